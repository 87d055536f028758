/* jobs/collatz.c: owns the built-in `collatz` job, the example of a cyclic
 * dataflow (an iteration with a feedback edge).
 *
 * DESIGN. gen (records 0 .. N-1) -> start (n = i + 1) -> iteration head ->
 * step -> { done: leaves the loop -> result -> sink; again: fed back, keyed by
 * n, into the head }. A record inside the loop carries (n, current value,
 * steps so far); `step` applies one Collatz step (c/2 if even, 3c + 1 if
 * odd) until the value reaches 1. The sink receives one "<n> <steps>" line
 * per number; the summary gives the total number of steps of this run.
 * Checkpoints log the feedback edge (ABS Algorithm 2), so a restored run
 * gives exactly the uninterrupted run's lines.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

typedef struct collatz_cfg {
  uint64_t records;
  const char *sink;
} collatz_cfg;

typedef struct loop_rec {
  uint64_t n, cur, steps;
} loop_rec;

static void collatz_help(FILE *out) {
  fputs("usage: weir run collatz [--records N] [--parallelism P] [--workers W]\n"
        "                        [--sink null|print|file:DIR|http://...] [CHECKPOINT OPTIONS]\n"
        "\n"
        "For every n in 1..N, counts the Collatz steps to reach 1 (n -> n/2 if even,\n"
        "3n + 1 if odd) in a loop: each step is one trip round an iteration with a\n"
        "feedback edge. The sink writes one line \"<n> <steps>\" per number; the\n"
        "summary gives the total of the steps.\n"
        "\n"
        "  --records N   numbers 1..N (default 100000)\n"
        "  --sink SPEC   null (default), print, file:DIR or http://HOST:PORT/PATH\n",
        out);
}

static int collatz_parse(cli_args *a, cli_engine *eng, void **out) {
  collatz_cfg *c = calloc(1, sizeof *c);
  if (c == NULL) return cli_usage("out of memory");
  c->records = 100000;
  c->sink = "null";
  while (a->i < a->argc) {
    int r;
    if ((r = cli_take_engine(a, eng)) != 0 ||
        (r = cli_take_u64(a, "--records", UINT64_MAX / 4, &c->records)) != 0 ||
        (r = cli_take_str(a, "--sink", &c->sink)) != 0) {
      if (r < 0) goto fail;
      continue;
    }
    cli_unknown_arg(a, "collatz");
    goto fail;
  }
  if (c->records == 0) {
    cli_usage("--records: must be at least 1");
    goto fail;
  }
  if (cli_check_sink(c->sink, eng) < 0) goto fail;
  eng->total_records = c->records; /* the progress line's total */
  *out = c;
  return 0;
fail:
  free(c);
  return -1;
}

static int emit_loop(weir_ctx *ctx, const loop_rec *l) {
  return weir_emit(ctx, l->n, l, sizeof *l);
}

static int read_loop(weir_ctx *ctx, const weir_record *r, loop_rec *l) {
  if (r->len != sizeof *l) return weir_ctx_fail(ctx, WEIR_EBADREC, "bad loop record");
  memcpy(l, r->payload, sizeof *l);
  return 0;
}

/* i -> (n = i + 1, n, 0) */
static int start_fn(weir_ctx *ctx, void *user, const weir_record *in) {
  (void)user;
  loop_rec l = {in->key + 1, in->key + 1, 0};
  return emit_loop(ctx, &l);
}

static int step_process(weir_ctx *ctx, const weir_record *r) {
  loop_rec l;
  int rc = read_loop(ctx, r, &l);
  if (rc) return rc;
  if (l.cur != 1) {
    if (l.cur > (UINT64_MAX - 1) / 3)
      return weir_ctx_fail(ctx, WEIR_EBADREC, "collatz(%llu) overflows 64 bits",
                           (unsigned long long)l.n);
    l.cur = l.cur % 2 ? 3 * l.cur + 1 : l.cur / 2;
    l.steps++;
  }
  return emit_loop(ctx, &l);
}
static const weir_operator_vt step_vt = {
    .size = sizeof(weir_operator_vt), .name = "step", .process = step_process};

static int is_done(void *user, const weir_record *r) {
  (void)user;
  loop_rec l;
  memcpy(&l, r->payload, sizeof l);
  return l.cur == 1;
}
static int not_done(void *user, const weir_record *r) {
  return !is_done(user, r);
}

/* (n, 1, steps) -> "<n> <steps>", counting the steps. */
static int result_fn(weir_ctx *ctx, void *user, const weir_record *in) {
  (void)user;
  loop_rec l;
  int rc = read_loop(ctx, in, &l);
  if (rc) return rc;
  weir_ctx_count(ctx, "steps", l.steps);
  return weir_emit_u64(ctx, l.n, l.steps);
}

static int collatz_build(weir_job *job, const cli_engine *eng, void *cfg) {
  collatz_cfg *c = cfg;
  int p = eng->parallelism;
  weir_gen_opts g = {.records = c->records, .keys = c->records};
  weir_stream *s = weir_flat_map(weir_gen(job, "gen", &g, p), "start", start_fn, NULL, p);
  weir_stream *body = NULL;
  weir_iteration *it = weir_iterate(weir_key_by(s), "loop", p, &body);
  weir_stream *step = weir_process(body, "step", &step_vt, NULL, p);
  weir_stream *again = weir_filter(step, "again", not_done, NULL, p);
  weir_stream *done = weir_filter(step, "done", is_done, NULL, p);
  int rc = weir_iteration_close(it, weir_key_by(again));
  if (rc) return rc;
  s = weir_flat_map(done, "result", result_fn, NULL, p);
  return weir_sink_to(s, "sink", c->sink, NULL, p);
}

static void collatz_report(const weir_job *job, void *cfg, cli_outcome *o, FILE *out) {
  (void)cfg;
  uint64_t in = 0, numbers = 0, steps = 0;
  weir_job_operator_counts(job, "result", &in, &numbers);
  weir_job_counter(job, "result", "steps", &steps);
  o->stopped = weir_job_stopped(job);
  const weir_run_info *ri = weir_job_run_info(job);
  fprintf(out, "collatz: %s %llu numbers in %.2f s, %llu steps in total (this run)",
          o->stopped ? "stopped after" : "finished", (unsigned long long)numbers, o->elapsed_s,
          (unsigned long long)steps);
  if (ri->restored_from)
    fprintf(out, ", resumed from checkpoint %llu", (unsigned long long)ri->restored_from);
  fputc('\n', out);
}

static void collatz_free(void *cfg) {
  free(cfg);
}

const cli_builtin cli_collatz_job = {
    .name = "collatz",
    .synopsis = "Collatz steps of 1..N, one loop trip per step (an iteration)",
    .help = collatz_help,
    .parse = collatz_parse,
    .build = collatz_build,
    .report = collatz_report,
    .free_cfg = collatz_free,
};
