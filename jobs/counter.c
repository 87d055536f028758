/* jobs/counter.c: owns the built-in `counter` job: its flags, its graph and
 * its report line.
 *
 * DESIGN. gen -> key_by -> count -> sink. The generator emits records
 * i = 0 .. N-1 with key i mod K; the keyed count emits (key, running count)
 * for every record, so the sink sees each key k with the counts 1, 2, ..., n_k
 * (n_k = the number of i < N with i mod K = k), and a key's final count is the
 * largest it reached. --parallelism applies to every operator; the record
 * format is "<key> <count>" (docs/sinks.md §3).
 *
 * --all-edges (and --slow-us, which implies it) puts every kind of channel
 * between the generator and the count, for checkpoint tests and
 * benchmarks, with the same output:
 *
 *   gen -forward-> pace (keeps even i) --+
 *   gen -rebalance-> pass (keeps odd i) -+-broadcast-> pick -hash-> count -> sink
 *
 * (i is the record's timestamp; pick subtask s keeps the i with
 * (i / 2) mod P == s, so each record reaches the count once.) Subtask 0 of
 * pace sleeps --slow-us microseconds after every 1024 records (every
 * --slow-every records): one slow path, whose backpressure holds aligned
 * barriers back. With --fan-out F,
 * pace and pass emit F copies of each record (payload 0 .. F-1) and pick
 * keeps copy 0: one input batch then fills several output batches, so
 * output waits on the pending lists behind full channels (the output side
 * of unaligned channel state).
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "weir/nats.h"

typedef struct counter_cfg {
  uint64_t records; /* 0 = unbounded */
  uint64_t keys;
  uint64_t rate; /* records/s over all generator subtasks, 0 = unlimited */
  const char *sink;
  const char *source;    /* NULL: the generator; else a nats:// URL */
  const char *stage_out; /* a stage edge's URL: the records go there, not counted */
  int all_edges;
  uint64_t slow_us, slow_every;
  uint64_t fan_out; /* copies pace and pass emit of each record (pick keeps one) */
  uint64_t paced;   /* records of pace subtask 0 (only its thread touches it) */
} counter_cfg;

/* pace (parity 0) and pass (parity 1): keep the records of their parity;
 * subtask 0 of pace is the slow path. */
static int keep_parity(weir_ctx *ctx, void *user, const weir_record *in) {
  counter_cfg *c = user;
  int pace = strcmp(weir_ctx_name(ctx), "pace") == 0;
  if (((uint64_t)in->ts & 1u) != (pace ? 0u : 1u)) return 0;
  if (pace && c->slow_us && weir_ctx_subtask(ctx) == 0) {
    if (++c->paced % c->slow_every == 0) weir_sleep_us(c->slow_us);
  }
  for (uint64_t k = 0; k < (c->fan_out ? c->fan_out : 1); k++) {
    int rc = weir_emit_u64(ctx, in->key, k);
    if (rc < 0) return rc;
  }
  return 0;
}

/* pick: one subtask of the broadcast keeps each record. */
static int pick_one(weir_ctx *ctx, void *user, const weir_record *in) {
  (void)user;
  if (((uint64_t)in->ts / 2) % weir_ctx_parallelism(ctx) != weir_ctx_subtask(ctx)) return 0;
  if (weir_payload_u64(in) != 0) return 0; /* a copy of --fan-out */
  return weir_emit(ctx, in->key, NULL, 0);
}

static void counter_help(FILE *out) {
  fputs("usage: weir run counter [--records N] [--keys K] [--rate R] [--parallelism P]\n"
        "                        [--workers W] [--sink SPEC]\n"
        "                        [--source nats://HOST:PORT/SUBJECT[?stream=S&rate=R\n"
        "                                  &splits=N]]\n"
        "                        [--stage-out nats://HOST:PORT/SUBJECT?tasks=T]\n"
        "                        [--summary-json FILE] [CHECKPOINT OPTIONS] [--quiet]\n"
        "\n"
        "Counts records per key: a generator emits records i = 0 .. N-1 with key\n"
        "i mod K, a keyed count emits (key, running count) for every record, and\n"
        "the sink writes one line \"<key> <count>\" per record. The final count of\n"
        "a key is the largest count written for it.\n"
        "\n"
        "  --records N      records to generate, 0 = until stopped (default 20M)\n"
        "  --keys K         distinct keys (default 1M)\n"
        "  --rate R         records per second over all generators, 0 = as fast as\n"
        "                   possible (default 0)\n"
        "  --sink SPEC      null (default), print, file:DIR, http://HOST:PORT/PATH or\n"
        "                   nats://HOST:PORT/SUBJECT (see README.md, Sinks); the\n"
        "                   http and nats sinks' operation ids are\n"
        "                   <job id>/sink/c/<key>.<count>\n"
        "  --source URL     read the records from NATS JetStream instead of the\n"
        "                   generator: one record per message of SUBJECT in stream\n"
        "                   S (default WEIR), key = the body as a decimal number\n"
        "                   (else its hash), up to the last message of SUBJECT when\n"
        "                   the job first started; --records, --keys and --rate then\n"
        "                   do not apply (rate=R in the URL limits messages/s);\n"
        "                   with a wildcard SUBJECT and splits=N its subjects are\n"
        "                   spread over N splits read by up to P subtasks\n"
        "  --stage-out URL  run the job's first stage only: the records go, by key,\n"
        "                   to the T tasks of the stage edge URL (subjects\n"
        "                   SUBJECT.<producer>.<task>) instead of being counted;\n"
        "                   a second run with --source URL (the same tasks=T)\n"
        "                   counts them, each record exactly once across kills\n"
        "                   of either (docs/scale-out.md). With --source URL?tasks=T\n"
        "                   the source reads such an edge\n"
        "  --all-edges      route the records over a forward, a rebalance, a\n"
        "                   broadcast and a hash edge (same output; for tests)\n"
        "  --slow-us US     with --all-edges, one slow path: subtask 0 of the\n"
        "                   forward path sleeps US microseconds every 1024 records\n"
        "  --slow-every N   ... every N records instead (spreads the same cost)\n"
        "  --fan-out F      with --all-edges, each record travels as F copies up\n"
        "                   to the broadcast's consumer, which keeps one (default 1)\n"
        "Checkpoint options: see 'weir help run' (state under ./state by default).\n"
        "Numbers take a k, M or G suffix (x1000): --records 20M.\n",
        out);
}

static int counter_parse(cli_args *a, cli_engine *eng, void **out) {
  counter_cfg *c = calloc(1, sizeof *c);
  if (c == NULL) return cli_usage("out of memory");
  c->records = 20000000;
  c->keys = 1000000;
  c->sink = "null";
  c->slow_every = 1024;
  while (a->i < a->argc) {
    int r;
    if ((r = cli_take_engine(a, eng)) != 0 ||
        (r = cli_take_u64(a, "--records", UINT64_MAX, &c->records)) != 0 ||
        (r = cli_take_u64(a, "--keys", UINT64_MAX, &c->keys)) != 0 ||
        (r = cli_take_u64(a, "--rate", UINT64_MAX, &c->rate)) != 0 ||
        (r = cli_take_str(a, "--sink", &c->sink)) != 0 ||
        (r = cli_take_str(a, "--source", &c->source)) != 0 ||
        (r = cli_take_str(a, "--stage-out", &c->stage_out)) != 0 ||
        (r = cli_take_bool(a, "--all-edges", &c->all_edges)) != 0 ||
        (r = cli_take_u64(a, "--slow-us", 10000000, &c->slow_us)) != 0 ||
        (r = cli_take_u64(a, "--slow-every", UINT64_MAX, &c->slow_every)) != 0 ||
        (r = cli_take_u64(a, "--fan-out", 1024, &c->fan_out)) != 0) {
      if (r < 0) goto fail;
      continue;
    }
    cli_unknown_arg(a, "counter");
    goto fail;
  }
  if (c->keys == 0) {
    cli_usage("--keys: must be at least 1");
    goto fail;
  }
  if (c->slow_every == 0) {
    cli_usage("--slow-every: must be at least 1");
    goto fail;
  }
  if (cli_check_sink(c->sink, eng) < 0) goto fail;
  if (c->stage_out) {
    if (strncmp(c->stage_out, "nats://", 7) != 0 || !strstr(c->stage_out, "tasks=")) {
      cli_usage("--stage-out: a stage edge is nats://HOST:PORT/SUBJECT?tasks=T");
      goto fail;
    }
    if (cli_check_sink(c->stage_out, eng) < 0) goto fail;
  }
  if (c->source) {
    char err[512];
    if (weir_nats_source_check(c->source, err, sizeof err) < 0) {
      cli_usage("--source: %s", err);
      goto fail;
    }
  }
  eng->total_records = c->source ? 0 : c->records; /* the progress line's total */
  *out = c;
  return 0;
fail:
  free(c);
  return -1;
}

static int counter_build(weir_job *job, const cli_engine *eng, void *cfg) {
  counter_cfg *c = cfg;
  int p = eng->parallelism;
  weir_gen_opts g = {.records = c->records, .keys = c->keys, .rate = c->rate};
  weir_stream *s =
      c->source ? weir_nats_source_par(job, "nats", c->source, p) : weir_gen(job, "gen", &g, p);
  if (c->all_edges || c->slow_us || c->fan_out) {
    weir_stream *even = weir_flat_map(weir_forward(s), "pace", keep_parity, c, p);
    weir_stream *odd = weir_flat_map(weir_rebalance(s), "pass", keep_parity, c, p);
    s = weir_flat_map(weir_broadcast(weir_union(even, odd)), "pick", pick_one, NULL, p);
  }
  if (c->stage_out) /* the stage edge routes by key itself */
    return weir_sink_to(s, "stage", c->stage_out, NULL, p);
  s = weir_count(weir_key_by(s), "count", p);
  /* "key k reached count c" is one logical effect in every replay: its
   * operation id is "<job>/sink/c/<k>.<c>" (docs/sinks.md §2). */
  weir_sink_conf sc = {.opid = weir_opid_key_count};
  return weir_sink_to_conf(s, "sink", c->sink, &sc, p);
}

static void counter_report(const weir_job *job, void *cfg, cli_outcome *o, FILE *out) {
  counter_cfg *c = cfg;
  uint64_t in = 0, emitted = 0;
  int known = weir_job_operator_counts(job, c->source ? "nats" : "gen", &in, &emitted) == 0;
  o->stopped = weir_job_stopped(job);
  const weir_run_info *ri = weir_job_run_info(job);
  char n[32], rate[32], from[64] = "";
  double secs = o->elapsed_s > 0 ? o->elapsed_s : 1e-9;
  if (ri->restored_from)
    snprintf(from, sizeof from, " (resumed from checkpoint %llu)",
             (unsigned long long)ri->restored_from);
  if (!known) {
    fprintf(out, "counter: %s in %.2f s%s\n", o->stopped ? "stopped" : "done", o->elapsed_s, from);
    return;
  }
  /* Keys are i mod K over the records: a complete run of N records has
   * counted min(N, K) keys. */
  fprintf(out, "counter: %s %s records in %.2f s (%s rec/s)%s",
          o->stopped ? "stopped after" : "counted", cli_human((double)emitted, n, sizeof n),
          o->elapsed_s, cli_human((double)emitted / secs, rate, sizeof rate), from);
  if (!o->stopped && c->records && !c->source)
    fprintf(out, ", %llu distinct keys",
            (unsigned long long)(c->records < c->keys ? c->records : c->keys));
  if (ri->last_checkpoint)
    fprintf(out, ", last checkpoint %llu", (unsigned long long)ri->last_checkpoint);
  fputc('\n', out);
}

static void counter_free(void *cfg) {
  free(cfg);
}

const cli_builtin cli_counter_job = {
    .name = "counter",
    .synopsis = "count generated records per key (gen -> key_by -> count -> sink)",
    .help = counter_help,
    .parse = counter_parse,
    .build = counter_build,
    .report = counter_report,
    .free_cfg = counter_free,
};
