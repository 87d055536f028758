/* test_engine.c: the job API end to end (engine/src/graph.c, plan.c, job.c,
 * task.c, ctx.c, summary.c), with tiny hand-written sources and operators.
 *
 * Covers: builder and plan errors (no operators, a forward edge between
 * unequal parallelisms naming both operators, duplicate names, an operator
 * without process, a source without run, NULL streams propagating, a job
 * runs only once); runtime errors (an operator's error stops the job, is
 * returned by weir_job_run and named in weir_job_error() with the message
 * given to weir_ctx_fail(); errors in open, in finish and in a source's run;
 * close is called exactly for the subtasks whose open succeeded); record
 * sizes (over max_record_bytes -> WEIR_ETOOBIG with a clear message; a
 * record larger than a batch's arena but under the maximum travels intact
 * through chains and channels); chaining (map -> map -> sink counts via
 * weir_job_operator_counts); finish() emitting final records; a slow source
 * (WEIR_SOURCE_IDLE + weir_ctx_wake_after) still delivering everything, its
 * timer always waking the worker (a watchdog turns a stall into a quick
 * failure); weir_job_write_summary; weir_job_stop before the run and twice;
 * weir_job_counter and weir_job_stopped; empty inputs and empty payloads;
 * lineage ids being deterministic across runs; an unaligned cut taking a
 * finished input's queue as channel state at once; a slow operator getting
 * its batches in consecutive parts, in order and each record once, while
 * the other tasks of its worker run in between; an operator whose cost is
 * per call not being cut into ever smaller parts. API misuse: builder
 * errors naming the call and argument (and what a NULL stream leaves);
 * callbacks returning values outside their documented set (1 from
 * process, 7 from a source's run, a bare -1) failing the job with the
 * operator, callback and value named, while -errno and WEIR_E* codes keep
 * their text; a source that returns IDLE without a wake-up run again.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "weir/job.h"
#include "base/log.h"
#include "weir/weir.h"

#define MAXP 8
#define UNBOUNDED UINT64_MAX

/* ------------------------------------------------------------------------ */
/* A configurable source                                                    */

typedef struct src_cfg {
  uint64_t n;               /* records per subtask (UNBOUNDED: until stopped) */
  uint32_t big_len;         /* every third record (i % 3 == 1) has this payload size */
  uint32_t idle_us;         /* > 0: one record per run(), then IDLE for this long */
  uint64_t fail_at;         /* > 0: run() fails when record fail_at is next */
  uint32_t emit_len;        /* > 0: every record has this payload size */
  _Atomic uint64_t emitted; /* all subtasks */
  atomic_int opens, closes;
} src_cfg;

/* Payload byte j of record i. */
static uint8_t pattern(uint64_t i, uint32_t j) {
  return (uint8_t)(i * 31 + j * 7 + (j >> 8));
}

static uint32_t payload_len(const src_cfg *cfg, uint64_t i) {
  if (cfg->emit_len) return cfg->emit_len;
  if (cfg->big_len && i % 3 == 1) return cfg->big_len;
  return 8;
}

/* Per-subtask state of the source. */
typedef struct src_state {
  uint64_t next;
  uint8_t *buf;
  uint32_t cap;
} src_state;

static int src_open(weir_ctx *ctx) {
  src_cfg *cfg = weir_ctx_arg(ctx);
  atomic_fetch_add(&cfg->opens, 1);
  weir_ctx_set_user(ctx, calloc(1, sizeof(src_state)));
  return 0;
}

static int src_run(weir_ctx *ctx, uint32_t budget) {
  src_cfg *cfg = weir_ctx_arg(ctx);
  src_state *st = weir_ctx_user(ctx);
  uint64_t *next = &st->next;
  if (cfg->idle_us) budget = 1;
  for (uint32_t k = 0; k < budget && *next < cfg->n; k++) {
    uint64_t i = *next;
    if (cfg->fail_at && i == cfg->fail_at)
      return weir_ctx_fail(ctx, WEIR_EIO, "source broke at record %llu", (unsigned long long)i);
    uint32_t len = payload_len(cfg, i);
    if (len > st->cap) {
      free(st->buf);
      st->buf = malloc(len);
      st->cap = len;
    }
    uint8_t *buf = st->buf;
    for (uint32_t j = 0; j < len; j++) buf[j] = pattern(i, j);
    if (len >= 8)
      for (int b = 0; b < 8; b++) buf[b] = (uint8_t)(i >> (8 * b));
    weir_record r = {.key = i % 100,
                     .ts = (int64_t)i,
                     .id = weir_source_record_id(ctx, weir_ctx_subtask(ctx), i),
                     .payload = buf,
                     .len = len};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
    (*next)++;
    atomic_fetch_add(&cfg->emitted, 1);
  }
  if (*next == cfg->n) return WEIR_SOURCE_DONE;
  if (cfg->idle_us) {
    weir_ctx_wake_after(ctx, cfg->idle_us);
    return WEIR_SOURCE_IDLE;
  }
  return WEIR_SOURCE_MORE;
}

static void src_close(weir_ctx *ctx) {
  src_cfg *cfg = weir_ctx_arg(ctx);
  atomic_fetch_add(&cfg->closes, 1);
  src_state *st = weir_ctx_user(ctx);
  free(st->buf);
  free(st);
}

static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "src",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close};

/* ------------------------------------------------------------------------ */
/* A collecting sink: each subtask appends to its own slot.                 */

typedef struct got {
  uint64_t key, idx, id;
  uint32_t len;
  int intact; /* payload matches the source's pattern */
} got;

typedef struct sinkbuf {
  got *v[MAXP];
  size_t n[MAXP], cap[MAXP];
  int finished[MAXP];
} sinkbuf;

static int payload_intact(const weir_record *r, uint64_t idx) {
  const uint8_t *p = r->payload;
  for (uint32_t j = 8; j < r->len; j++)
    if (p[j] != pattern(idx, j)) return 0;
  return 1;
}

static int sink_process(weir_ctx *ctx, const weir_record *r) {
  sinkbuf *sb = weir_ctx_arg(ctx);
  uint32_t s = weir_ctx_subtask(ctx);
  if (s >= MAXP) return weir_ctx_fail(ctx, WEIR_EINVAL, "subtask %u out of range", s);
  if (sb->n[s] == sb->cap[s]) {
    sb->cap[s] = sb->cap[s] ? 2 * sb->cap[s] : 256;
    sb->v[s] = realloc(sb->v[s], sb->cap[s] * sizeof *sb->v[s]);
  }
  uint64_t idx = weir_payload_u64(r);
  sb->v[s][sb->n[s]++] = (got){r->key, idx, r->id, r->len, payload_intact(r, idx)};
  return 0;
}

static int sink_finish(weir_ctx *ctx) {
  sinkbuf *sb = weir_ctx_arg(ctx);
  sb->finished[weir_ctx_subtask(ctx)]++;
  return 0;
}

static const weir_operator_vt sink_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "collect",
                                         .process = sink_process,
                                         .finish = sink_finish};

static void sink_free(sinkbuf *sb) {
  for (int s = 0; s < MAXP; s++) free(sb->v[s]);
  memset(sb, 0, sizeof *sb);
}

static size_t sink_total(const sinkbuf *sb) {
  size_t t = 0;
  for (int s = 0; s < MAXP; s++) t += sb->n[s];
  return t;
}

/* ------------------------------------------------------------------------ */
/* Small operators                                                          */

static int pass_process(weir_ctx *ctx, const weir_record *r) {
  return weir_emit(ctx, r->key, r->payload, r->len);
}
static const weir_operator_vt pass_vt = {
    .size = sizeof(weir_operator_vt), .name = "pass", .process = pass_process};

/* Emits each record twice, through the batch callback. */
static int twice_batch(weir_ctx *ctx, const weir_batch *b) {
  for (uint32_t i = 0; i < b->len; i++) {
    weir_record r = weir_batch_record(b, i);
    for (int k = 0; k < 2; k++) {
      int rc = weir_emit_from(ctx, b, i, r.key, r.payload, r.len);
      if (rc) return rc;
    }
  }
  return 0;
}
static const weir_operator_vt twice_vt = {
    .size = sizeof(weir_operator_vt), .name = "twice", .process_batch = twice_batch};

static int drop_process(weir_ctx *ctx, const weir_record *r) {
  return 0;
}
static const weir_operator_vt drop_vt = {
    .size = sizeof(weir_operator_vt), .name = "drop", .process = drop_process};

static weir_job *new_job(const char *name) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, name), 0);
  return job;
}

static int run_w(weir_job *job, int workers) {
  weir_run_opts o = {.workers = workers, .batch_records = 64, .channel_batches = 2};
  return weir_job_run(job, &o);
}

#define assert_contains(hay, needle)                                                               \
  cr_assert(strstr((hay), (needle)) != NULL, "\"%s\" does not contain \"%s\"", (hay), (needle))

/* ------------------------------------------------------------------------ */
/* Builder and plan errors                                                  */

Test(engine, plan_no_operators) {
  weir_job *job = new_job("empty");
  cr_assert_str_eq(weir_job_name(job), "empty");
  cr_assert_str_eq(weir_job_error(job), "");
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  assert_contains(weir_job_error(job), "no operators");
  weir_job_destroy(job);
  weir_job_destroy(NULL);
  cr_assert_eq(weir_job_create(NULL, "x"), WEIR_EINVAL);
  cr_assert_eq(weir_job_run(NULL, NULL), WEIR_EINVAL);
  cr_assert_eq(th_leak_check(), 0);
}

/* Minimal: a job whose plan is refused must still be destroyable. (Fails
 * while weir_job_run sets job->plan.nworkers before weir__plan_freeze, which
 * leaves job->plan.workers NULL on a plan error: weir__plan_free then reads
 * job->plan.workers[i].) */
Test(engine, destroy_after_plan_error) {
  weir_job *job = new_job("refused");
  src_cfg cfg = {.n = 1};
  weir_stream *s = weir_source(job, "a", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(s, "b", &sink_vt, NULL, 2), 0);
  weir_run_opts o = {.workers = 2};
  cr_assert_eq(weir_job_run(job, &o), WEIR_EPLAN);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, plan_forward_unequal_parallelism) {
  weir_job *job = new_job("fwd");
  src_cfg cfg = {.n = 10};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "numbers", &src_vt, &cfg, 2);
  s = weir_process(s, "doubler", &pass_vt, NULL, 3);
  cr_assert_not_null(s);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 3), 0);
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  const char *e = weir_job_error(job);
  assert_contains(e, "'numbers'");
  assert_contains(e, "'doubler'");
  assert_contains(e, "forward");
  cr_assert_eq(atomic_load(&cfg.opens), 0, "nothing runs after a plan error");
  weir_job_destroy(job);

  /* Default parallelism resolved at run time can also mismatch. */
  job = new_job("fwd-default");
  s = weir_source(job, "numbers", &src_vt, &cfg, 0);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 2), 0);
  weir_run_opts o = {.workers = 1, .default_parallelism = 1};
  cr_assert_eq(weir_job_run(job, &o), WEIR_EPLAN);
  assert_contains(weir_job_error(job), "'out'");
  weir_job_destroy(job);

  /* Parallelism above max_parallelism. */
  job = new_job("maxpar");
  s = weir_source(job, "numbers", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(weir_key_by(s), "wide", &sink_vt, &sb, 5), 0);
  weir_run_opts o2 = {.workers = 1, .max_parallelism = 4};
  cr_assert_eq(weir_job_run(job, &o2), WEIR_EPLAN);
  assert_contains(weir_job_error(job), "'wide'");
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, plan_duplicate_names) {
  weir_job *job = new_job("dup");
  src_cfg cfg = {.n = 10};
  weir_stream *s = weir_source(job, "same", &src_vt, &cfg, 1);
  cr_assert_not_null(s);
  cr_assert_null(weir_process(s, "same", &pass_vt, NULL, 1));
  assert_contains(weir_job_error(job), "'same'");
  /* Later builder calls are no-ops returning NULL / the first error. */
  cr_assert_null(weir_source(job, "other", &src_vt, &cfg, 1));
  cr_assert_null(weir_key_by(s));
  cr_assert_eq(weir_sink(s, "fine", &sink_vt, NULL, 1), WEIR_EPLAN);
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  assert_contains(weir_job_error(job), "'same'");
  weir_job_destroy(job);

  job = new_job("dup-sink");
  s = weir_source(job, "a", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(s, "b", &sink_vt, NULL, 1), 0);
  cr_assert_eq(weir_sink(s, "b", &sink_vt, NULL, 1), WEIR_EPLAN);
  weir_job_destroy(job);

  job = new_job("noname");
  cr_assert_null(weir_source(job, "", &src_vt, &cfg, 1));
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* A table as a newer header would lay it out: this weir's, then one more
 * callback. */
typedef struct newer_operator_vt {
  weir_operator_vt vt;
  int (*later)(weir_ctx *ctx);
} newer_operator_vt;

static int later_cb(weir_ctx *ctx) {
  (void)ctx;
  return 0;
}

Test(engine, callback_tables_carry_their_size) {
  src_cfg cfg = {.n = 100};
  sinkbuf sb = {0};
  /* No size: a build error that says what to set. */
  static const weir_operator_vt nosize = {.name = "nosize", .process = pass_process};
  weir_job *job = new_job("nosize");
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
  cr_assert_null(weir_process(s, "unsized", &nosize, NULL, 1));
  assert_contains(weir_job_error(job), "'unsized'");
  assert_contains(weir_job_error(job), ".size");
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EABI);
  weir_job_destroy(job);

  static const weir_source_vt nosize_src = {.name = "nosize", .run = src_run};
  job = new_job("nosize_src");
  cr_assert_null(weir_source(job, "unsized", &nosize_src, &cfg, 1));
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EABI);
  weir_job_destroy(job);

  /* A newer header's table that sets nothing this weir does not know runs;
   * the copy is the engine's own, so the caller's table may go away. */
  newer_operator_vt *newer = calloc(1, sizeof *newer);
  newer->vt = pass_vt;
  newer->vt.size = sizeof *newer;
  job = new_job("newer");
  s = weir_source(job, "src", &src_vt, &cfg, 1);
  s = weir_process(s, "pass", &newer->vt, NULL, 1);
  free(newer);
  cr_assert_eq(weir_sink(s, "sink", &sink_vt, &sb, 1), 0, "%s", weir_job_error(job));
  cr_assert_eq(weir_job_run(job, NULL), 0, "%s", weir_job_error(job));
  cr_assert_eq(sink_total(&sb), 100);
  weir_job_destroy(job);
  sink_free(&sb);

  /* One that sets a callback this weir would ignore is refused. */
  newer_operator_vt later = {.vt = pass_vt, .later = later_cb};
  later.vt.size = sizeof later;
  job = new_job("later");
  s = weir_source(job, "src", &src_vt, &cfg, 1);
  cr_assert_null(weir_process(s, "later", &later.vt, NULL, 1));
  assert_contains(weir_job_error(job), "newer weir");
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EABI);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, plan_missing_callbacks) {
  static const weir_operator_vt noproc = {.size = sizeof(weir_operator_vt), .name = "noproc"};
  static const weir_source_vt norun = {.size = sizeof(weir_source_vt), .name = "norun"};
  src_cfg cfg = {.n = 10};
  weir_job *job = new_job("noproc");
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
  cr_assert_null(weir_process(s, "lazy", &noproc, NULL, 1));
  assert_contains(weir_job_error(job), "'lazy'");
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  weir_job_destroy(job);

  job = new_job("nullvt");
  s = weir_source(job, "src", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(s, "nothing", NULL, NULL, 1), WEIR_EPLAN);
  assert_contains(weir_job_error(job), "'nothing'");
  weir_job_destroy(job);

  job = new_job("norun");
  cr_assert_null(weir_source(job, "idle", &norun, NULL, 1));
  assert_contains(weir_job_error(job), "'idle'");
  cr_assert_null(weir_source(job, "idle2", NULL, NULL, 1));
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  weir_job_destroy(job);

  job = new_job("badpar");
  cr_assert_null(weir_source(job, "neg", &src_vt, &cfg, -1));
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, null_stream_propagation) {
  weir_job *job = new_job("nulls");
  src_cfg cfg = {.n = 10};
  cr_assert_null(weir_key_by(NULL));
  cr_assert_null(weir_rebalance(NULL));
  cr_assert_null(weir_broadcast(NULL));
  cr_assert_null(weir_forward(NULL));
  cr_assert_null(weir_process(NULL, "p", &pass_vt, NULL, 1));
  cr_assert_neq(weir_sink(NULL, "s", &sink_vt, NULL, 1), 0);
  cr_assert_null(weir_stream_job(NULL));
  cr_assert_null(weir_source(NULL, "s", &src_vt, &cfg, 1));
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
  cr_assert_eq(weir_stream_job(s), job);
  cr_assert_null(weir_union(NULL, s));
  cr_assert_null(weir_union(s, NULL));
  /* A chain with a NULL in the middle ends in an error at the sink. */
  cr_assert_neq(weir_sink(weir_key_by(weir_process(weir_key_by(NULL), "x", &pass_vt, NULL, 1)), "y",
                          &sink_vt, NULL, 1),
                0);
  weir_job_destroy(job);

  /* Reading one operator twice through a union is a build error. */
  job = new_job("twice");
  s = weir_source(job, "src", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(weir_union(s, weir_rebalance(s)), "greedy", &sink_vt, NULL, 1),
               WEIR_EPLAN);
  assert_contains(weir_job_error(job), "'greedy'");
  assert_contains(weir_job_error(job), "'src'");
  weir_job_destroy(job);

  /* weir_union of streams of two jobs is a build error. */
  weir_job *a = new_job("a"), *b = new_job("b");
  weir_stream *sa = weir_source(a, "src", &src_vt, &cfg, 1);
  weir_stream *sb2 = weir_source(b, "src", &src_vt, &cfg, 1);
  cr_assert_null(weir_union(sa, sb2));
  cr_assert_eq(weir_job_run(a, NULL), WEIR_EPLAN);
  weir_job_destroy(a);
  weir_job_destroy(b);
  cr_assert_eq(th_leak_check(), 0);
}

/* Builder errors name the call and the argument; a NULL stream reaches no
 * job, so all a chain can say is its return (WEIR_EPLAN, no message). */
Test(engine, builder_errors_name_the_call) {
  src_cfg cfg = {.n = 10};
  struct {
    const char *name, *want;
  } cases[] = {
      {"process-name", "weir_process: name is NULL (every operator needs a unique name)"},
      {"sink-vt", "weir_sink: operator 'nothing': vt is NULL (no callbacks)"},
      {"source-vt", "weir_source: source 'none': vt is NULL (no callbacks)"},
      {"source-name", "weir_source: name is empty"},
      {"union-b", "weir_union: stream b is NULL (a previous builder call failed? see "
                  "weir_job_error)"},
      {"union-a", "weir_union: stream a is NULL"},
      {"dup", "weir_process: two operators are named 'src'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *c = cases[i].name;
    weir_job *job = new_job(c);
    weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
    if (!strcmp(c, "process-name")) s = weir_process(s, NULL, &pass_vt, NULL, 1);
    if (!strcmp(c, "sink-vt")) cr_assert_eq(weir_sink(s, "nothing", NULL, NULL, 1), WEIR_EPLAN);
    if (!strcmp(c, "source-vt")) s = weir_source(job, "none", NULL, NULL, 1);
    if (!strcmp(c, "source-name")) s = weir_source(job, "", &src_vt, &cfg, 1);
    if (!strcmp(c, "union-b")) s = weir_union(s, NULL);
    if (!strcmp(c, "union-a")) s = weir_union(NULL, s);
    if (!strcmp(c, "dup")) s = weir_process(s, "src", &pass_vt, NULL, 1);
    if (strcmp(c, "sink-vt")) cr_assert_null(s, "%s", c);
    assert_contains(weir_job_error(job), cases[i].want);
    cr_assert_eq(weir_job_build_error(job), WEIR_EPLAN, "%s", c);
    cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN, "%s", c);
    weir_job_destroy(job);
  }

  /* A NULL stream from nowhere: nothing is recorded in the job, the sink
   * says WEIR_EPLAN (weir_sink_to too, not "invalid argument"). */
  weir_job *job = new_job("lost");
  cr_assert_eq(weir_sink(weir_process(NULL, "p", &pass_vt, NULL, 1), "s", &sink_vt, NULL, 1),
               WEIR_EPLAN);
  cr_assert_eq(weir_sink_to(weir_key_by(NULL), "s", "null", NULL, 1), WEIR_EPLAN);
  cr_assert_str_eq(weir_job_error(job), "");
  cr_assert_eq(weir_job_build_error(job), 0);
  weir_job_destroy(job);
  cr_assert_eq(weir_job_build_error(NULL), 0);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, job_runs_once) {
  weir_job *job = new_job("once");
  src_cfg cfg = {.n = 100};
  sinkbuf sb = {0};
  cr_assert_eq(weir_sink(weir_source(job, "src", &src_vt, &cfg, 1), "out", &sink_vt, &sb, 1), 0);
  cr_assert_eq(run_w(job, 1), 0, "%s", weir_job_error(job));
  cr_assert_eq(sink_total(&sb), 100);
  cr_assert_eq(run_w(job, 1), WEIR_ESTATE);
  assert_contains(weir_job_error(job), "once");
  cr_assert_eq(sink_total(&sb), 100, "the second run did nothing");
  cr_assert_eq(atomic_load(&cfg.opens), 1);
  cr_assert_eq(atomic_load(&cfg.closes), 1);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, adopt_frees_at_destroy) {
  weir_job *job = new_job("adopt");
  cr_assert_eq(weir_job_adopt(job, malloc(100), free), 0);
  cr_assert_eq(weir_job_adopt(job, NULL, NULL), WEIR_EINVAL);
  cr_assert_eq(weir_job_fail(job, WEIR_EBADREC, "my %s", "reason"), WEIR_EBADREC);
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EBADREC);
  cr_assert_str_eq(weir_job_error(job), "my reason");
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Runtime errors                                                           */

typedef struct opstats {
  atomic_int opens, closes, open_fail_subtask; /* open_fail_subtask: -1 none */
  uint64_t fail_at;                            /* process fails at this record index */
  int fail_in_finish;
  atomic_int finishes;
  _Atomic uint64_t processed;
} opstats;

static int op_open(weir_ctx *ctx) {
  opstats *st = weir_ctx_arg(ctx);
  if ((int)weir_ctx_subtask(ctx) == atomic_load(&st->open_fail_subtask))
    return weir_ctx_fail(ctx, WEIR_EIO, "cannot open the thing for subtask %u",
                         weir_ctx_subtask(ctx));
  atomic_fetch_add(&st->opens, 1);
  return 0;
}

static int op_process(weir_ctx *ctx, const weir_record *r) {
  opstats *st = weir_ctx_arg(ctx);
  uint64_t idx = weir_payload_u64(r);
  if (st->fail_at && idx == st->fail_at)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "bad record %llu", (unsigned long long)idx);
  atomic_fetch_add(&st->processed, 1);
  return weir_emit(ctx, r->key, r->payload, r->len);
}

static int op_finish(weir_ctx *ctx) {
  opstats *st = weir_ctx_arg(ctx);
  atomic_fetch_add(&st->finishes, 1);
  if (st->fail_in_finish)
    return weir_ctx_fail(ctx, WEIR_EOPERATOR, "final flush failed: %s", "disk on fire");
  return 0;
}

static void op_close(weir_ctx *ctx) {
  opstats *st = weir_ctx_arg(ctx);
  atomic_fetch_add(&st->closes, 1);
}

static const weir_operator_vt checked_vt = {.size = sizeof(weir_operator_vt),
                                            .name = "checked",
                                            .open = op_open,
                                            .process = op_process,
                                            .finish = op_finish,
                                            .close = op_close};

static void opstats_init(opstats *st) {
  memset(st, 0, sizeof *st);
  atomic_store(&st->open_fail_subtask, -1);
}

/* src(2) -> rebalance -> validator(2) -> out(2), run on two workers until
 * the validator fails at record fail_at: checks the error and its message,
 * returns the job (the caller destroys it). */
static weir_job *run_failing_validator(const char *name, src_cfg *cfg, opstats *st,
                                       uint64_t fail_at, sinkbuf *sb) {
  weir_job *job = new_job(name);
  opstats_init(st);
  st->fail_at = fail_at;
  weir_stream *s = weir_source(job, "src", &src_vt, cfg, 2);
  s = weir_process(weir_rebalance(s), "validator", &checked_vt, st, 2);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, sb, 2), 0);
  int rc = run_w(job, 2);
  cr_assert_eq(rc, WEIR_EBADREC, "run returned %s", weir_err_name(rc));
  char want[64];
  snprintf(want, sizeof want, "bad record %llu", (unsigned long long)fail_at);
  assert_contains(weir_job_error(job), "'validator'");
  assert_contains(weir_job_error(job), want);
  return job;
}

Test(engine, operator_error_stops_job) {
  /* An unbounded source: only the error can end this job. */
  src_cfg cfg = {.n = UNBOUNDED};
  opstats st;
  sinkbuf sb = {0};
  weir_job *job = run_failing_validator("fails", &cfg, &st, 1000, &sb);
  /* close for every open that succeeded, sources included. */
  cr_assert_eq(atomic_load(&st.opens), 2);
  cr_assert_eq(atomic_load(&st.closes), 2);
  cr_assert_eq(atomic_load(&cfg.opens), 2);
  cr_assert_eq(atomic_load(&cfg.closes), 2);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, error_in_open) {
  weir_job *job = new_job("openfail");
  src_cfg cfg = {.n = UNBOUNDED};
  opstats st;
  opstats_init(&st);
  atomic_store(&st.open_fail_subtask, 1);
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 2);
  s = weir_process(weir_key_by(s), "opener", &checked_vt, &st, 2);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 2), 0);
  int rc = run_w(job, 2);
  cr_assert_eq(rc, WEIR_EIO, "run returned %s", weir_err_name(rc));
  const char *e = weir_job_error(job);
  assert_contains(e, "'opener'");
  assert_contains(e, "cannot open the thing for subtask 1");
  assert_contains(e, "open");
  /* close only where open succeeded. */
  cr_assert_eq(atomic_load(&st.closes), atomic_load(&st.opens));
  cr_assert_leq(atomic_load(&st.opens), 1);
  cr_assert_eq(atomic_load(&cfg.closes), atomic_load(&cfg.opens));
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, error_in_finish) {
  weir_job *job = new_job("finishfail");
  src_cfg cfg = {.n = 500};
  opstats st;
  opstats_init(&st);
  st.fail_in_finish = 1;
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
  s = weir_process(weir_rebalance(s), "finisher", &checked_vt, &st, 1);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 1), 0);
  int rc = run_w(job, 2);
  cr_assert_eq(rc, WEIR_EOPERATOR, "run returned %s", weir_err_name(rc));
  const char *e = weir_job_error(job);
  assert_contains(e, "'finisher'");
  assert_contains(e, "final flush failed: disk on fire");
  assert_contains(e, "finish");
  cr_assert_eq(atomic_load(&st.processed), 500);
  cr_assert_eq(atomic_load(&st.finishes), 1);
  cr_assert_eq(atomic_load(&st.closes), 1);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, error_in_source_run) {
  weir_job *job = new_job("srcfail");
  src_cfg cfg = {.n = UNBOUNDED, .fail_at = 777};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "flaky", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &sink_vt, &sb, 2), 0);
  int rc = run_w(job, 2);
  cr_assert_eq(rc, WEIR_EIO, "run returned %s", weir_err_name(rc));
  assert_contains(weir_job_error(job), "'flaky'");
  assert_contains(weir_job_error(job), "source broke at record 777");
  cr_assert_eq(atomic_load(&cfg.emitted), 777);
  cr_assert_eq(atomic_load(&cfg.closes), 1);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

/* A job that fails while its paced sources have their next wake-up armed
 * (a millisecond away): the coordinator stops worker 0, then is held up
 * 5 ms (failpoint) between setting worker 1's stop and sending it the
 * wake-up. Worker 1 wakes on its timer meanwhile and sees stop; it must
 * not close its loop under that send (libuv aborts on the closed
 * descriptor). */
Test(engine, workers_outlive_the_wake_up_that_stops_them) {
  for (int round = 0; round < 3; round++) {
    th_arm_failpoints("worker.stop_wake=delay@2");
    src_cfg cfg = {.n = UNBOUNDED, .idle_us = 100};
    opstats st;
    sinkbuf sb = {0};
    weir_job *job = run_failing_validator("stopwake", &cfg, &st, 30, &sb);
    cr_assert_eq(weir_failpoint_hits("worker.stop_wake"), 2);
    weir_job_destroy(job);
    sink_free(&sb);
  }
  th_arm_failpoints(NULL);
  cr_assert_eq(th_leak_check(), 0);
}

/* until:POINT:N answers WEIR_EAGAIN at every hit until POINT was reached N
 * times (counted although nothing else arms it), then 0 for good. */
Test(engine, failpoint_until_waits_for_another_points_hits) {
  th_arm_failpoints("t.hold=until:t.event:2");
  cr_assert_eq(weir_failpoint("t.hold"), WEIR_EAGAIN);
  cr_assert_eq(weir_failpoint("t.event"), 0);
  cr_assert_eq(weir_failpoint("t.hold"), WEIR_EAGAIN);
  cr_assert_eq(weir_failpoint("t.event"), 0);
  cr_assert_eq(weir_failpoint_hits("t.event"), 2);
  cr_assert_eq(weir_failpoint("t.hold"), 0);
  cr_assert_eq(weir_failpoint("t.hold"), 0);
  cr_assert_eq(weir_failpoint_hits("t.hold"), 4);
  th_arm_failpoints(NULL);
}

/* Batch callback failing without weir_ctx_fail: the code's own text. */
static int batch_fail(weir_ctx *ctx, const weir_batch *b) {
  return WEIR_EBADREC;
}

Test(engine, error_without_message) {
  static const weir_operator_vt vt = {
      .size = sizeof(weir_operator_vt), .name = "bf", .process_batch = batch_fail};
  weir_job *job = new_job("nomsg");
  src_cfg cfg = {.n = 10};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(s, "quiet", &vt, NULL, 1), 0);
  cr_assert_eq(run_w(job, 1), WEIR_EBADREC);
  assert_contains(weir_job_error(job), "'quiet'");
  assert_contains(weir_job_error(job), weir_strerror(WEIR_EBADREC));
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* API misuse: callbacks' returns outside the documented set                */

/* An operator whose every callback returns what misuse_cfg says for it. */
typedef struct misuse_cfg {
  int open, process, batch, finish, poll, snapshot, complete;
  const char *msg; /* given to weir_ctx_fail before process returns, if set */
} misuse_cfg;

static int mis_open(weir_ctx *ctx) {
  return ((misuse_cfg *)weir_ctx_arg(ctx))->open;
}
static int mis_process(weir_ctx *ctx, const weir_record *r) {
  misuse_cfg *m = weir_ctx_arg(ctx);
  (void)r;
  if (m->msg) weir_ctx_fail(ctx, m->process, "%s", m->msg);
  return m->process;
}
static int mis_batch(weir_ctx *ctx, const weir_batch *b) {
  (void)b;
  return ((misuse_cfg *)weir_ctx_arg(ctx))->batch;
}
static int mis_finish(weir_ctx *ctx) {
  return ((misuse_cfg *)weir_ctx_arg(ctx))->finish;
}
static int mis_poll(weir_ctx *ctx) {
  return ((misuse_cfg *)weir_ctx_arg(ctx))->poll;
}
static int mis_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  (void)w;
  return ((misuse_cfg *)weir_ctx_arg(ctx))->snapshot;
}
static int mis_complete(weir_ctx *ctx, uint64_t id) {
  (void)id;
  return ((misuse_cfg *)weir_ctx_arg(ctx))->complete;
}

static const weir_operator_vt mis_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "mis",
                                        .open = mis_open,
                                        .process = mis_process,
                                        .finish = mis_finish,
                                        .poll = mis_poll,
                                        .snapshot = mis_snapshot,
                                        .checkpoint_complete = mis_complete};
static const weir_operator_vt mis_batch_vt = {
    .size = sizeof(weir_operator_vt), .name = "mis", .process_batch = mis_batch};

/* src(1, 10 records) -> `name` (mis_vt or mis_batch_vt with m) -> out; with
 * dir, a checkpointing run into it (only the final checkpoint). Returns what
 * weir_job_run returned and copies the job's error into err. */
static int run_misuse(const char *name, const weir_operator_vt *vt, misuse_cfg *m, const char *dir,
                      char *err, size_t errlen) {
  weir_job *job = new_job(name);
  src_cfg cfg = {.n = 10};
  sinkbuf sb = {0};
  weir_stream *s = weir_process(weir_source(job, "src", &src_vt, &cfg, 1), name, vt, m, 1);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 1), 0, "%s", weir_job_error(job));
  weir_run_opts o = {.workers = 1, .state_dir = dir};
  int rc = weir_job_run(job, &o);
  snprintf(err, errlen, "%s", weir_job_error(job));
  cr_assert_eq(weir_job_build_error(job), 0, "a runtime error is not a build error");
  cr_assert_eq(atomic_load(&cfg.closes), atomic_load(&cfg.opens));
  weir_job_destroy(job);
  sink_free(&sb);
  return rc;
}

/* A positive value a callback does not document fails the job, naming the
 * operator, the callback and the value. */
Test(engine, undocumented_returns_fail_the_job) {
  struct {
    misuse_cfg m;
    int batch, checkpoint;
    const char *want;
  } cases[] = {
      {{.process = 1},
       0,
       0,
       "operator 'p1' subtask 0 (process): returned 1, not 0 or a negative "
       "WEIR_E* error code"},
      {{.batch = 3}, 1, 0, "operator 'b3' subtask 0 (process_batch): returned 3, not 0"},
      {{.open = 1}, 0, 0, "operator 'o1' subtask 0 (open): returned 1, not 0"},
      {{.finish = 2}, 0, 0, "operator 'f2' subtask 0 (finish): returned 2, not 0"},
      {{.poll = 3},
       0,
       0,
       "operator 'q3' subtask 0 (poll): returned 3, not WEIR_POLL_IDLE (0), "
       "WEIR_POLL_BUSY (1), WEIR_POLL_FULL (2) or a negative WEIR_E* error code"},
      {{.snapshot = 1}, 0, 1, "operator 's1' subtask 0 (snapshot): returned 1, not 0"},
      {{.complete = 4}, 0, 1, "operator 'c4' subtask 0 (checkpoint_complete): returned 4, not 0"},
  };
  const char *names[] = {"p1", "b3", "o1", "f2", "q3", "s1", "c4"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *dir = cases[i].checkpoint ? th_tmpdir() : NULL;
    char err[1024];
    int rc = run_misuse(names[i], cases[i].batch ? &mis_batch_vt : &mis_vt, &cases[i].m, dir, err,
                        sizeof err);
    cr_assert_eq(rc, WEIR_EOPERATOR, "%s: run returned %s: %s", names[i], weir_err_name(rc), err);
    assert_contains(err, cases[i].want);
    if (dir) th_rmrf(dir);
    free(dir);
  }
  cr_assert_eq(th_leak_check(), 0);
}

/* A source's run returning 7 is not taken as WEIR_SOURCE_MORE. */
static int run_seven(weir_ctx *ctx, uint32_t budget) {
  (void)ctx;
  (void)budget;
  return 7;
}

Test(engine, source_run_returning_seven_fails_the_job, .timeout = 30) {
  static const weir_source_vt seven_vt = {
      .size = sizeof(weir_source_vt), .name = "seven", .run = run_seven};
  weir_job *job = new_job("seven");
  sinkbuf sb = {0};
  cr_assert_eq(weir_sink(weir_source(job, "seven", &seven_vt, NULL, 1), "out", &sink_vt, &sb, 1),
               0);
  int rc = run_w(job, 1);
  cr_assert_eq(rc, WEIR_EOPERATOR, "run returned %s", weir_err_name(rc));
  assert_contains(weir_job_error(job), "operator 'seven' subtask 0 (run): returned 7, not "
                                       "WEIR_SOURCE_MORE (0), WEIR_SOURCE_DONE (1), "
                                       "WEIR_SOURCE_IDLE (2) or a negative WEIR_E* error code");
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

/* A bare -1 is a misuse, not -EPERM; -errno and weir's codes stay errors
 * with their own text; a message given with -1 is kept. */
Test(engine, bare_minus_one_is_not_eperm) {
  char err[1024];
  misuse_cfg m = {.process = -1};
  int rc = run_misuse("m1", &mis_vt, &m, NULL, err, sizeof err);
  cr_assert_eq(rc, WEIR_EOPERATOR, "run returned %s", weir_err_name(rc));
  assert_contains(err, "operator 'm1' subtask 0 (process): returned -1, not 0 or a negative "
                       "WEIR_E* error code");
  assert_contains(err, "weir_ctx_fail");
  cr_assert(strstr(err, strerror(EPERM)) == NULL, "%s", err);

  m = (misuse_cfg){.process = -1, .msg = "the thing broke"};
  rc = run_misuse("m1msg", &mis_vt, &m, NULL, err, sizeof err);
  cr_assert_eq(rc, WEIR_EOPERATOR, "run returned %s", weir_err_name(rc));
  assert_contains(err, "(process): returned -1, not 0 or a negative WEIR_E* error code: the "
                       "thing broke");

  /* Far below the errno range, and not weir's. */
  m = (misuse_cfg){.process = -40000};
  rc = run_misuse("m40k", &mis_vt, &m, NULL, err, sizeof err);
  cr_assert_eq(rc, WEIR_EOPERATOR, "run returned %s", weir_err_name(rc));
  assert_contains(err, "returned -40000, not 0");

  /* A genuine -errno keeps its code and strerror's text. */
  m = (misuse_cfg){.process = -EACCES};
  rc = run_misuse("eacces", &mis_vt, &m, NULL, err, sizeof err);
  cr_assert_eq(rc, -EACCES, "run returned %d", rc);
  assert_contains(err, "operator 'eacces' subtask 0 (process): ");
  assert_contains(err, strerror(EACCES));

  /* And a WEIR_E* code its message. */
  m = (misuse_cfg){.batch = WEIR_EBADREC};
  rc = run_misuse("badrec", &mis_batch_vt, &m, NULL, err, sizeof err);
  cr_assert_eq(rc, WEIR_EBADREC, "run returned %s", weir_err_name(rc));
  assert_contains(err, weir_strerror(WEIR_EBADREC));
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Record sizes                                                             */

/* Emits one record of `len` bytes per input and returns what emit said. */
static int grow_process(weir_ctx *ctx, const weir_record *r) {
  uint32_t len = *(const uint32_t *)weir_ctx_arg(ctx);
  if (weir_ctx_max_record(ctx) != 100) return weir_ctx_fail(ctx, WEIR_EINVAL, "max_record");
  uint8_t *buf = calloc(1, len);
  int rc = weir_emit(ctx, r->key, buf, len);
  free(buf);
  return rc;
}
static const weir_operator_vt grow_vt = {
    .size = sizeof(weir_operator_vt), .name = "grow", .process = grow_process};

Test(engine, record_over_max_is_etoobig) {
  /* From an operator. */
  weir_job *job = new_job("toobig");
  src_cfg cfg = {.n = 50};
  uint32_t len = 101;
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
  s = weir_process(s, "inflate", &grow_vt, &len, 1);
  cr_assert_eq(weir_sink(s, "out", &drop_vt, NULL, 1), 0);
  weir_run_opts o = {.workers = 1, .max_record_bytes = 100};
  int rc = weir_job_run(job, &o);
  cr_assert_eq(rc, WEIR_ETOOBIG, "run returned %s", weir_err_name(rc));
  const char *e = weir_job_error(job);
  assert_contains(e, "'inflate'");
  assert_contains(e, "101 bytes");
  assert_contains(e, "maximum of 100");
  weir_job_destroy(job);

  /* Exactly the maximum is fine. */
  job = new_job("justfits");
  sinkbuf sb = {0};
  len = 100;
  s = weir_source(job, "src", &src_vt, &cfg, 1);
  s = weir_process(s, "inflate", &grow_vt, &len, 1);
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &sink_vt, &sb, 1), 0);
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(sink_total(&sb), 50);
  for (size_t i = 0; i < sb.n[0]; i++) cr_assert_eq(sb.v[0][i].len, 100);
  weir_job_destroy(job);
  sink_free(&sb);

  /* From a source. */
  job = new_job("toobig-src");
  src_cfg big = {.n = 10, .emit_len = 4096};
  s = weir_source(job, "bigsrc", &src_vt, &big, 1);
  cr_assert_eq(weir_sink(s, "out", &drop_vt, NULL, 1), 0);
  weir_run_opts o2 = {.workers = 1, .max_record_bytes = 1000};
  cr_assert_eq(weir_job_run(job, &o2), WEIR_ETOOBIG);
  assert_contains(weir_job_error(job), "'bigsrc'");
  assert_contains(weir_job_error(job), "4096 bytes");
  assert_contains(weir_job_error(job), "maximum of 1000");
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

static void check_big_records(const sinkbuf *sb, uint64_t n, uint32_t big_len, int p) {
  cr_assert_eq(sink_total(sb), n * (uint64_t)p);
  uint8_t *seen = calloc(n, 1);
  for (int t = 0; t < MAXP; t++)
    for (size_t i = 0; i < sb->n[t]; i++) {
      const got *g = &sb->v[t][i];
      cr_assert_lt(g->idx, n);
      seen[g->idx]++;
      cr_assert_eq(g->len, g->idx % 3 == 1 ? big_len : 8u, "record %llu has %u bytes",
                   (unsigned long long)g->idx, g->len);
      cr_assert(g->intact, "record %llu (%u bytes) arrived damaged", (unsigned long long)g->idx,
                g->len);
    }
  for (uint64_t i = 0; i < n; i++)
    cr_assert_eq(seen[i], p, "record %llu seen %d times", (unsigned long long)i, seen[i]);
  free(seen);
}

Test(engine, big_record_travels_intact) {
  /* 300 KiB: over a batch's arena soft limit, under the default 1 MiB. */
  const uint32_t big = 300u * 1024u;
  const uint64_t n = 60;
  /* Through a chain link and a channel. */
  weir_job *job = new_job("big");
  src_cfg cfg = {.n = n, .big_len = big};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
  s = weir_process(s, "pass", &pass_vt, NULL, 1); /* chained: link batch */
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &sink_vt, &sb, 2), 0);
  int rc = run_w(job, 2);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  check_big_records(&sb, n, big, 1);
  weir_job_destroy(job);
  sink_free(&sb);

  /* Broadcast (every channel gets a copy) and a chained sink. */
  job = new_job("big-broadcast");
  src_cfg cfg2 = {.n = n, .big_len = big};
  s = weir_source(job, "src", &src_vt, &cfg2, 1);
  s = weir_process(weir_broadcast(s), "pass", &pass_vt, NULL, 3);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 3), 0);
  cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
  check_big_records(&sb, n, big, 3);
  weir_job_destroy(job);
  sink_free(&sb);

  /* Right at the maximum. */
  job = new_job("big-max");
  src_cfg cfg3 = {.n = 7, .big_len = 1u << 20};
  s = weir_source(job, "src", &src_vt, &cfg3, 1);
  cr_assert_eq(weir_sink(weir_key_by(s), "out", &sink_vt, &sb, 2), 0);
  cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
  check_big_records(&sb, 7, 1u << 20, 1);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Chaining, finish, slow sources                                           */

Test(engine, chain_map_map_sink_counts) {
  weir_job *job = new_job("chain");
  src_cfg cfg = {.n = 10000};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 2);
  s = weir_process(s, "m1", &pass_vt, NULL, 2);
  s = weir_process(s, "m2", &twice_vt, NULL, 2);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 2), 0);
  cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
  uint64_t in = 1, out = 1;
  cr_assert_eq(weir_job_operator_counts(job, "src", &in, &out), 0);
  cr_assert_eq(in, 0);
  cr_assert_eq(out, 20000);
  cr_assert_eq(weir_job_operator_counts(job, "m1", &in, &out), 0);
  cr_assert_eq(in, 20000);
  cr_assert_eq(out, 20000);
  cr_assert_eq(weir_job_operator_counts(job, "m2", &in, &out), 0);
  cr_assert_eq(in, 20000);
  cr_assert_eq(out, 40000);
  cr_assert_eq(weir_job_operator_counts(job, "out", &in, &out), 0);
  cr_assert_eq(in, 40000);
  cr_assert_eq(out, 0);
  cr_assert_eq(weir_job_operator_counts(job, "nope", &in, &out), WEIR_ENOENT);
  cr_assert_eq(sink_total(&sb), 40000);
  /* Forward chain: subtask s's records stay in subtask s, each twice. */
  for (int t = 0; t < 2; t++) cr_assert_eq(sb.n[t], 20000);
  for (int t = 0; t < 2; t++) cr_assert_eq(sb.finished[t], 1);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

/* Sums payload indices and emits one record with the sum in finish. */
static int sum_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t *sum = weir_ctx_user(ctx);
  *sum += weir_payload_u64(r);
  return 0;
}
static int sum_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(uint64_t)));
  return 0;
}
static int sum_finish(weir_ctx *ctx) {
  uint64_t *sum = weir_ctx_user(ctx);
  int rc = weir_emit_u64(ctx, 1000 + weir_ctx_subtask(ctx), *sum);
  if (rc) return rc;
  return weir_emit_u64(ctx, 2000 + weir_ctx_subtask(ctx), 42);
}
static void sum_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}
static const weir_operator_vt sum_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "sum",
                                        .open = sum_open,
                                        .process = sum_process,
                                        .finish = sum_finish,
                                        .close = sum_close};

Test(engine, finish_emits_final_records) {
  for (int chained = 0; chained < 2; chained++) {
    weir_job *job = new_job("finish");
    src_cfg cfg = {.n = 1000};
    sinkbuf sb = {0};
    weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 2);
    s = weir_process(weir_rebalance(s), "sum", &sum_vt, NULL, 2);
    /* chained: sum -> pass -> sink in one task; else through a channel. */
    if (chained) s = weir_process(s, "pass", &pass_vt, NULL, 2);
    cr_assert_eq(weir_sink(chained ? s : weir_rebalance(s), "out", &sink_vt, &sb, chained ? 2 : 1),
                 0);
    cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
    cr_assert_eq(sink_total(&sb), 4);
    uint64_t total = 0;
    int fortytwo = 0;
    for (int t = 0; t < MAXP; t++)
      for (size_t i = 0; i < sb.n[t]; i++) {
        if (sb.v[t][i].key >= 2000) {
          cr_assert_eq(sb.v[t][i].idx, 42);
          fortytwo++;
        } else {
          total += sb.v[t][i].idx;
        }
      }
    /* Two subtasks each emitting 0..999. */
    cr_assert_eq(total, 2 * 999 * 1000 / 2);
    cr_assert_eq(fortytwo, 2);
    weir_job_destroy(job);
    sink_free(&sb);
  }
  cr_assert_eq(th_leak_check(), 0);
}

/* A hang detector for jobs with idle sources: a thread that watches a
 * progress counter and, if it has not moved for STALL_S seconds (the jobs
 * below make progress every few milliseconds), records the stall and ends
 * the job (two weir_job_stop() calls, since a single graceful stop cannot
 * wake a worker that sleeps on a task it already has queued); if even that
 * does not end it, aborts the test with a message. This turns a lost
 * wake-up into a quick, explained failure instead of a test timeout. */
#define STALL_S 5

typedef struct watchdog {
  weir_job *job;
  _Atomic uint64_t *progress;
  atomic_int done;
  atomic_int stalled;
  uint64_t stalled_at;
  pthread_t thread;
} watchdog;

static void *watchdog_main(void *arg) {
  watchdog *wd = arg;
  uint64_t last = atomic_load(wd->progress);
  int still = 0; /* 50 ms ticks without progress */
  while (!atomic_load(&wd->done)) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    uint64_t now = atomic_load(wd->progress);
    if (now != last) {
      last = now;
      still = 0;
      continue;
    }
    ++still;
    if (still == STALL_S * 20 && !atomic_load(&wd->stalled)) {
      wd->stalled_at = now;
      atomic_store(&wd->stalled, 1);
      weir_job_stop(wd->job);
      weir_job_stop(wd->job);
    } else if (still == 3 * STALL_S * 20) {
      fprintf(stderr, "test_engine: job stalled after %llu records and could not be stopped\n",
              (unsigned long long)last);
      abort();
    }
  }
  return NULL;
}

static void watchdog_start(watchdog *wd, weir_job *job, _Atomic uint64_t *progress) {
  memset(wd, 0, sizeof *wd);
  wd->job = job;
  wd->progress = progress;
  cr_assert_eq(pthread_create(&wd->thread, NULL, watchdog_main, wd), 0);
}

/* Stops the watchdog; returns nonzero if it saw a stall. */
static int watchdog_end(watchdog *wd) {
  atomic_store(&wd->done, 1);
  pthread_join(wd->thread, NULL);
  return atomic_load(&wd->stalled);
}

/* Regression (fixed in 801679a): a source that is idle for 1 ms between
 * records, alone on one worker, woken by a timer on the worker's loop. It
 * stalled while worker.c could block in uv_run(UV_RUN_ONCE) after a due
 * timer's callback (on_timer -> weir__task_wake -> rq_push, run at the very
 * start of that uv_run) had queued the task locally: the poll then waited
 * with no timeout. A graceful weir_job_stop() could not help either: the
 * coordinator's weir__task_wake() saw `queued` already set and returned. */
Test(engine, idle_source_timer_wakes_worker) {
  weir_job *job = new_job("idle-timer");
  src_cfg cfg = {.n = 300, .idle_us = 1};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "ticker", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 1), 0);
  watchdog wd;
  watchdog_start(&wd, job, &cfg.emitted);
  weir_run_opts o = {.workers = 1};
  int rc = weir_job_run(job, &o);
  int stalled = watchdog_end(&wd);
  cr_expect_eq(stalled, 0,
               "the job stalled after %llu of 300 records: the worker slept with its idle "
               "source's timer already fired (lost wake-up)",
               (unsigned long long)wd.stalled_at);
  if (!stalled) {
    cr_expect_eq(rc, 0, "%s", weir_job_error(job));
    cr_expect_eq(sink_total(&sb), 300);
  }
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

/* A source that returns WEIR_SOURCE_IDLE without weir_ctx_wake_after is
 * run again (WEIR_SOURCE_IDLE_DEFAULT_US) instead of sleeping forever. */
static int idle_run(weir_ctx *ctx, uint32_t budget) {
  src_cfg *cfg = weir_ctx_arg(ctx);
  (void)budget;
  uint64_t i = atomic_load(&cfg->emitted);
  if (i == cfg->n) return WEIR_SOURCE_DONE;
  weir_record r = {.key = i, .id = weir_source_record_id(ctx, 0, i)};
  int rc = weir_emit_record(ctx, &r);
  if (rc) return rc;
  atomic_fetch_add(&cfg->emitted, 1);
  return WEIR_SOURCE_IDLE;
}

Test(engine, idle_source_without_wake_up_runs_again, .timeout = 60) {
  static const weir_source_vt idle_vt = {
      .size = sizeof(weir_source_vt), .name = "idle", .run = idle_run};
  weir_job *job = new_job("idle-default");
  src_cfg cfg = {.n = 50};
  sinkbuf sb = {0};
  cr_assert_eq(weir_sink(weir_source(job, "forgetful", &idle_vt, &cfg, 1), "out", &sink_vt, &sb, 1),
               0);
  watchdog wd;
  watchdog_start(&wd, job, &cfg.emitted);
  int rc = run_w(job, 1);
  int stalled = watchdog_end(&wd);
  cr_assert_eq(stalled, 0,
               "the job stalled after %llu of 50 records: an idle source without a "
               "wake-up is never run again",
               (unsigned long long)wd.stalled_at);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  cr_assert_eq(sink_total(&sb), 50);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, slow_source_gets_everything_through) {
  /* One record every 2 ms: partly filled batches must be flushed by the
   * idle path / buffer timeout, not wait for a full batch or the end. */
  weir_job *job = new_job("slow");
  src_cfg cfg = {.n = 40, .idle_us = 2000};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "trickle", &src_vt, &cfg, 1);
  s = weir_process(weir_rebalance(s), "pass", &pass_vt, NULL, 2);
  cr_assert_eq(weir_sink(weir_key_by(s), "out", &sink_vt, &sb, 2), 0);
  weir_run_opts o = {.workers = 2, .batch_records = 1024, .buffer_timeout_us = 500};
  watchdog wd;
  watchdog_start(&wd, job, &cfg.emitted);
  int rc = weir_job_run(job, &o);
  cr_assert_eq(watchdog_end(&wd), 0,
               "stalled after %llu records (see idle_source_timer_wakes_worker)",
               (unsigned long long)wd.stalled_at);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  cr_assert_eq(sink_total(&sb), 40);
  uint8_t seen[40] = {0};
  for (int t = 0; t < MAXP; t++)
    for (size_t i = 0; i < sb.n[t]; i++) seen[sb.v[t][i].idx]++;
  for (int i = 0; i < 40; i++) cr_assert_eq(seen[i], 1);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

/* Seen by a probe sink while the job runs: the slow source's records must
 * arrive one by one, not all at the end. The sink stops the job once it
 * has seen `stop_after` records; if the records were held back until the
 * end of input, the source (unbounded) would never end. */
typedef struct probe {
  weir_job *job;
  atomic_int seen;
  int stop_after;
} probe;

static int probe_process(weir_ctx *ctx, const weir_record *r) {
  probe *p = weir_ctx_arg(ctx);
  if (atomic_fetch_add(&p->seen, 1) + 1 == p->stop_after) weir_job_stop(p->job);
  return 0;
}
static const weir_operator_vt probe_vt = {
    .size = sizeof(weir_operator_vt), .name = "probe", .process = probe_process};

Test(engine, slow_unbounded_source_flows_before_end) {
  weir_job *job = new_job("slow-unbounded");
  src_cfg cfg = {.n = UNBOUNDED, .idle_us = 2000};
  probe p = {.job = job, .stop_after = 10};
  weir_stream *s = weir_source(job, "trickle", &src_vt, &cfg, 1);
  cr_assert_eq(weir_sink(weir_rebalance(s), "probe", &probe_vt, &p, 2), 0);
  weir_run_opts o = {.workers = 2};
  watchdog wd;
  watchdog_start(&wd, job, &cfg.emitted);
  int rc = weir_job_run(job, &o);
  cr_assert_eq(watchdog_end(&wd), 0,
               "stalled after %llu records (see idle_source_timer_wakes_worker)",
               (unsigned long long)wd.stalled_at);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  cr_assert_geq(atomic_load(&p.seen), 10);
  /* Drained: everything emitted arrived. */
  cr_assert_eq((uint64_t)atomic_load(&p.seen), atomic_load(&cfg.emitted));
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Summary, stop, determinism                                               */

static int counting_process(weir_ctx *ctx, const weir_record *r) {
  weir_ctx_count(ctx, "odd_records", weir_payload_u64(r) % 2);
  weir_ctx_count(ctx, "seen", 1);
  return weir_emit(ctx, r->key, r->payload, r->len);
}
static const weir_operator_vt counting_vt = {
    .size = sizeof(weir_operator_vt), .name = "counting", .process = counting_process};

Test(engine, write_summary_names_operators) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char path[4096];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  weir_job *job = new_job("summary-job");
  src_cfg cfg = {.n = 1000};
  weir_stream *s = weir_source(job, "numbers_src", &src_vt, &cfg, 2);
  s = weir_process(weir_key_by(s), "odd_counter", &counting_vt, NULL, 2);
  cr_assert_eq(weir_sink(s, "drain\"sink", &drop_vt, NULL, 2), 0);
  cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
  cr_assert_eq(weir_job_write_summary(job, path), 0);
  char *json = th_read_file(path, NULL);
  cr_assert_not_null(json);
  assert_contains(json, "\"summary-job\"");
  assert_contains(json, "\"numbers_src\"");
  assert_contains(json, "\"odd_counter\"");
  assert_contains(json, "\"drain\\\"sink\""); /* escaped quote */
  assert_contains(json, "\"odd_records\": ");
  assert_contains(json, "\"ok\": true");
  assert_contains(json, "\"source_records\": 2000");
  free(json);
  /* Counters add up across subtasks: 2 x 500 odd records. */
  uint64_t in, out;
  cr_assert_eq(weir_job_operator_counts(job, "odd_counter", &in, &out), 0);
  cr_assert_eq(in, 2000);
  weir_job_destroy(job);

  /* A failed job's summary says so. */
  job = new_job("failed-job");
  src_cfg fcfg = {.n = UNBOUNDED, .fail_at = 10};
  s = weir_source(job, "flaky", &src_vt, &fcfg, 1);
  cr_assert_eq(weir_sink(s, "out", &drop_vt, NULL, 1), 0);
  cr_assert_eq(run_w(job, 1), WEIR_EIO);
  cr_assert_eq(weir_job_write_summary(job, path), 0);
  json = th_read_file(path, NULL);
  assert_contains(json, "\"ok\": false");
  assert_contains(json, "source broke at record 10");
  free(json);
  /* Unwritable path: an error, not a crash. */
  snprintf(path, sizeof path, "%s/no/such/dir/summary.json", dir);
  cr_assert_lt(weir_job_write_summary(job, path), 0);
  weir_job_destroy(job);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, stop_before_run) {
  weir_job *job = new_job("prestopped");
  src_cfg cfg = {.n = UNBOUNDED};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "forever", &src_vt, &cfg, 2);
  s = weir_process(weir_rebalance(s), "pass", &pass_vt, NULL, 2);
  cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 2), 0);
  weir_job_stop(job);
  weir_job_stop(NULL); /* harmless */
  cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
  /* The sources ended (the sinks saw end of input and finished), and what
   * was emitted before they noticed was drained. */
  cr_assert_eq(sb.finished[0], 1);
  cr_assert_eq(sb.finished[1], 1);
  cr_assert_eq(sink_total(&sb), atomic_load(&cfg.emitted));
  cr_assert_eq(atomic_load(&cfg.closes), 2);
  cr_assert_neq(weir_job_stopped(job), 0);
  weir_job_stop(job); /* after the run: harmless */
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, ids_deterministic_across_runs) {
  uint64_t *ids[2];
  size_t nids[2];
  for (int run = 0; run < 2; run++) {
    weir_job *job = new_job("ids");
    src_cfg cfg = {.n = 500};
    sinkbuf sb = {0};
    weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
    s = weir_process(s, "twice", &twice_vt, NULL, 1);
    cr_assert_eq(weir_sink(weir_rebalance(s), "out", &sink_vt, &sb, 1), 0);
    cr_assert_eq(run_w(job, run + 1), 0);
    nids[run] = sb.n[0];
    ids[run] = malloc(sb.n[0] * sizeof(uint64_t));
    for (size_t i = 0; i < sb.n[0]; i++) ids[run][i] = sb.v[0][i].id;
    weir_job_destroy(job);
    sink_free(&sb);
  }
  cr_assert_eq(nids[0], 1000);
  cr_assert_eq(nids[1], 1000);
  for (size_t i = 0; i < 1000; i++) cr_assert_eq(ids[0][i], ids[1][i], "id %zu differs", i);
  /* The two emissions of one input get different ids. */
  for (size_t i = 0; i < 1000; i += 2) cr_assert_neq(ids[0][i], ids[0][i + 1]);
  free(ids[0]);
  free(ids[1]);
  cr_assert_eq(th_leak_check(), 0);
}

/* (key ^ 5, key * 3 + 1) per record: record by record, or in runs of up to
 * 7 through weir_emit_u64_from_n (arg non-NULL), which must emit the same
 * records with the same ids. */
static int u64s_batch(weir_ctx *ctx, const weir_batch *b) {
  uint64_t keys[7], vals[7];
  if (!weir_ctx_arg(ctx)) {
    for (uint32_t i = 0; i < b->len; i++) {
      int rc = weir_emit_u64_from(ctx, b, i, b->keys[i] ^ 5, b->keys[i] * 3 + 1);
      if (rc) return rc;
    }
    return 0;
  }
  if (weir_emit_u64_from_n(ctx, b, b->len, 1, keys, vals) != WEIR_EINVAL) return WEIR_EIO;
  if (weir_emit_u64_from_n(ctx, b, 0, b->len + 1, keys, vals) != WEIR_EINVAL) return WEIR_EIO;
  for (uint32_t first = 0; first < b->len; first += 7) {
    uint32_t n = b->len - first < 7 ? b->len - first : 7;
    for (uint32_t k = 0; k < n; k++) {
      keys[k] = b->keys[first + k] ^ 5;
      vals[k] = b->keys[first + k] * 3 + 1;
    }
    int rc = weir_emit_u64_from_n(ctx, b, first, n, keys, vals);
    if (rc) return rc;
  }
  return weir_emit_u64_from_n(ctx, b, b->len, 0, keys, vals);
}
static const weir_operator_vt u64s_vt = {
    .size = sizeof(weir_operator_vt), .name = "u64s", .process_batch = u64s_batch};

Test(engine, emit_u64_from_n_equals_record_by_record) {
  got *out[2];
  size_t nout[2];
  static int on = 1;
  for (int run = 0; run < 2; run++) {
    weir_job *job = new_job("u64s");
    src_cfg cfg = {.n = 1000};
    sinkbuf sb = {0};
    weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
    s = weir_process(s, "u64s", &u64s_vt, run ? &on : NULL, 1);
    cr_assert_eq(weir_sink(s, "out", &sink_vt, &sb, 1), 0);
    cr_assert_eq(run_w(job, 1), 0, "%s", weir_job_error(job));
    nout[run] = sb.n[0];
    out[run] = malloc(sb.n[0] * sizeof(got));
    memcpy(out[run], sb.v[0], sb.n[0] * sizeof(got));
    weir_job_destroy(job);
    sink_free(&sb);
  }
  cr_assert_eq(nout[0], 1000);
  cr_assert_eq(nout[1], 1000);
  for (size_t i = 0; i < 1000; i++) {
    cr_assert_eq(out[1][i].key, out[0][i].key, "key %zu differs", i);
    cr_assert_eq(out[1][i].idx, out[0][i].idx, "value %zu differs", i);
    cr_assert_eq(out[1][i].idx, (out[1][i].key ^ 5) * 3 + 1);
    cr_assert_eq(out[1][i].id, out[0][i].id, "id %zu differs", i);
    cr_assert_eq(out[1][i].len, 8);
  }
  free(out[0]);
  free(out[1]);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, empty_input_still_finishes) {
  weir_job *job = new_job("nothing");
  src_cfg cfg = {.n = 0};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 2);
  s = weir_process(weir_key_by(s), "sum", &sum_vt, NULL, 3);
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &sink_vt, &sb, 2), 0);
  cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
  /* Three sum subtasks each emit (sum 0) and 42 in finish. */
  cr_assert_eq(sink_total(&sb), 6);
  cr_assert_eq(sb.finished[0] + sb.finished[1], 2);
  cr_assert_eq(weir_job_stopped(job), 0);
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

/* Emits an empty record per input: the payload must arrive as NULL, 0. */
static int empty_process(weir_ctx *ctx, const weir_record *r) {
  return weir_emit(ctx, r->key, NULL, 0);
}
static const weir_operator_vt empty_vt = {
    .size = sizeof(weir_operator_vt), .name = "empty", .process = empty_process};

typedef struct empties {
  atomic_int n, bad;
} empties;

static int empties_process(weir_ctx *ctx, const weir_record *r) {
  empties *e = weir_ctx_arg(ctx);
  atomic_fetch_add(&e->n, 1);
  if (r->len != 0 || r->payload != NULL) atomic_fetch_add(&e->bad, 1);
  return 0;
}
static const weir_operator_vt empties_vt = {
    .size = sizeof(weir_operator_vt), .name = "empties", .process = empties_process};

Test(engine, empty_payloads) {
  weir_job *job = new_job("empty-payloads");
  src_cfg cfg = {.n = 300};
  empties e = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 1);
  s = weir_process(s, "empty", &empty_vt, NULL, 1);
  cr_assert_eq(weir_sink(weir_rebalance(s), "check", &empties_vt, &e, 2), 0);
  cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
  cr_assert_eq(atomic_load(&e.n), 300);
  cr_assert_eq(atomic_load(&e.bad), 0);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, counters_and_stopped) {
  weir_job *job = new_job("counters");
  src_cfg cfg = {.n = 1001};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 2);
  s = weir_process(weir_rebalance(s), "counting", &counting_vt, NULL, 3);
  cr_assert_eq(weir_sink(s, "out", &drop_vt, NULL, 3), 0);
  cr_assert_eq(run_w(job, 2), 0, "%s", weir_job_error(job));
  uint64_t v = 7;
  cr_assert_eq(weir_job_counter(job, "counting", "seen", &v), 0);
  cr_assert_eq(v, 2002);
  /* Each subtask emits 0..1000: 500 odd indices each. */
  cr_assert_eq(weir_job_counter(job, "counting", "odd_records", &v), 0);
  cr_assert_eq(v, 1000);
  cr_assert_eq(weir_job_counter(job, "counting", "never", &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(weir_job_counter(job, "nope", "seen", &v), WEIR_ENOENT);
  cr_assert_eq(weir_job_stopped(job), 0, "ended at the end of input, not by a stop");
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* weir/job.h: "Thread-safe and async-signal-safe; a second call is
 * harmless." A second weir_job_stop() must not turn the graceful stop into
 * a failure. */
Test(engine, stop_twice_is_harmless) {
  weir_job *job = new_job("stop-twice");
  src_cfg cfg = {.n = UNBOUNDED};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "forever", &src_vt, &cfg, 2);
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &sink_vt, &sb, 2), 0);
  weir_job_stop(job);
  weir_job_stop(job);
  int rc = run_w(job, 2);
  cr_expect_eq(rc, 0, "a second weir_job_stop() made the run return %s: %s", weir_err_name(rc),
               weir_job_error(job));
  cr_expect_neq(weir_job_stopped(job), 0);
  if (rc == 0) cr_expect_eq(sink_total(&sb), atomic_load(&cfg.emitted), "drained");
  weir_job_destroy(job);
  sink_free(&sb);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Unaligned cuts and a finished producer                                   */

/* Sleeps 10 ms every 256 records, then passes the record on. */
static int slow_pass(weir_ctx *ctx, void *user, const weir_record *in) {
  uint64_t *n = user;
  if (++*n % 256 == 0) weir_sleep_us(10000);
  return weir_emit(ctx, in->key, in->payload, in->len);
}

static int count_seen(weir_ctx *ctx, void *user, const weir_record *in) {
  (void)ctx;
  (void)in;
  atomic_fetch_add((_Atomic uint64_t *)user, 1);
  return 0;
}

/* Source "done" emits 16 batches at once and ends; "live" runs for a few
 * hundred ms. Both feed one slow task, which holds done's batches and its
 * end of input in its queue when the first unaligned checkpoint comes:
 * the cut takes them as channel state at once (the debug log says so)
 * instead of waiting until the slow task has processed them, and nothing
 * is lost. */
Test(engine, unaligned_cut_takes_a_finished_inputs_queue_at_once, .timeout = 60) {
  char dir[] = "/tmp/weir-test-eoi-XXXXXX", logpath[] = "/tmp/weir-test-eoi-log-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  int lfd = mkstemp(logpath);
  cr_assert_geq(lfd, 0);
  weir_job *job;
  cr_assert_eq(weir_job_create(&job, "eoi"), 0);
  weir_gen_opts done = {.records = 4096, .keys = 7},
                live = {.records = 6000, .keys = 5, .rate = 20000};
  uint64_t slow_n = 0;
  _Atomic uint64_t seen = 0;
  weir_stream *s = weir_union(weir_gen(job, "done", &done, 1), weir_gen(job, "live", &live, 1));
  s = weir_flat_map(s, "slow", slow_pass, &slow_n, 1);
  s = weir_flat_map(weir_rebalance(s), "seen", count_seen, (void *)&seen, 1);
  cr_assert_eq(weir_sink_to(s, "sink", "null", NULL, 1), 0);
  weir_run_opts o = {.workers = 2,
                     .batch_records = 256,
                     .channel_batches = 32,
                     .state_dir = dir,
                     .checkpoint_interval_ms = 10,
                     .unaligned = 1};
  fflush(stderr);
  int saved = dup(2);
  cr_assert_geq(saved, 0);
  cr_assert_geq(dup2(lfd, 2), 0);
  weir_log_set_level(WEIR_LOG_DEBUG);
  int rc = weir_job_run(job, &o);
  weir_log_set_level(WEIR_LOG_INFO);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(lfd);
  char *log = th_read_file(logpath, NULL);
  cr_assert_not_null(log);
  cr_assert_eq(rc, 0, "run: %s", weir_job_error(job));
  cr_assert_eq(atomic_load(&seen), 4096 + 6000, "records lost or doubled: %llu",
               (unsigned long long)atomic_load(&seen));
  cr_assert_gt(weir_job_run_info(job)->unaligned_checkpoints, 0, "no unaligned checkpoint");
  cr_assert_not_null(strstr(log, "ended behind"),
                     "no cut took the finished input's queue as channel state:\n%s", log);
  free(log);
  unlink(logpath);
  weir_job_destroy(job);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

/* ------------------------------------------------------------------------ */
/* A slow operator takes its batches in parts                               */

typedef struct slices {
  uint32_t call_us, record_us; /* the slow operator's cost */
  _Atomic uint64_t fast;       /* records the fast path has seen */
  uint64_t next_ts;            /* the timestamp the slow operator expects next */
  const uint64_t *end_keys;
  const int64_t *end_ts; /* one past the previous call's records */
  uint64_t fast_after;   /* `fast` when the previous call returned */
  uint32_t calls, continued, interleaved, interleaved_any, max_len, min_len, out_of_order;
} slices;

/* call_us per call and record_us per record; notes how its input came. */
static int slow_batch(weir_ctx *ctx, const weir_batch *b) {
  slices *sl = weir_ctx_arg(ctx);
  sl->calls++;
  if (sl->calls > 1 && atomic_load(&sl->fast) > sl->fast_after) sl->interleaved_any++;
  if (b->keys == sl->end_keys && b->ts == sl->end_ts) {
    /* The rest of the batch the previous call had part of. */
    sl->continued++;
    if (atomic_load(&sl->fast) > sl->fast_after) sl->interleaved++;
  }
  if (b->len > sl->max_len) sl->max_len = b->len;
  if (!sl->min_len || b->len < sl->min_len) sl->min_len = b->len;
  for (uint32_t i = 0; i < b->len; i++) {
    if ((uint64_t)b->ts[i] != sl->next_ts) sl->out_of_order++;
    sl->next_ts = (uint64_t)b->ts[i] + 1;
    if (sl->record_us) weir_sleep_us(sl->record_us);
  }
  if (sl->call_us) weir_sleep_us(sl->call_us);
  sl->end_keys = b->keys + b->len;
  sl->end_ts = b->ts + b->len;
  sl->fast_after = atomic_load(&sl->fast);
  return 0;
}

static int count_fast(weir_ctx *ctx, void *user, const weir_record *in) {
  (void)ctx;
  (void)in;
  atomic_fetch_add(&((slices *)user)->fast, 1);
  return 0;
}

/* One worker runs both paths: 1024 records through an operator that takes
 * 200 us each (about 50 ms for a batch of 256), and a paced source feeding
 * a cheap one. The slow operator must get its input in parts of about a
 * millisecond (each record once and in order), and the fast path must
 * advance between two of them: the worker was not held for a whole batch.
 * Behind a channel, the parts are consecutive pieces of one batch; chained
 * to its source, the source is asked for fewer records at a time. */
static void run_slices(int chained) {
  weir_job *job = new_job("slices");
  slices sl = {.record_us = 200};
  weir_gen_opts slow_in = {.records = 1024, .keys = 3},
                fast_in = {.records = 8000, .keys = 3, .rate = 20000};
  static const weir_operator_vt slow_vt = {
      .size = sizeof(weir_operator_vt), .name = "slow", .process_batch = slow_batch};
  weir_stream *s = weir_gen(job, "slow_in", &slow_in, 1);
  s = weir_process(chained ? s : weir_rebalance(s), "slow", &slow_vt, &sl, 1);
  cr_assert_eq(weir_sink_to(s, "slow_out", "null", NULL, 1), 0);
  s = weir_flat_map(weir_gen(job, "fast_in", &fast_in, 1), "fast", count_fast, &sl, 1);
  cr_assert_eq(weir_sink_to(s, "fast_out", "null", NULL, 1), 0);
  weir_run_opts o = {.workers = 1, .batch_records = 256, .channel_batches = 4};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(sl.next_ts, 1024, "the slow operator saw up to %llu",
               (unsigned long long)sl.next_ts);
  cr_assert_eq(sl.out_of_order, 0, "%u records out of order or repeated", sl.out_of_order);
  cr_assert_eq(atomic_load(&sl.fast), 8000);
  cr_assert_lt(sl.min_len, 16, "%u calls of %u to %u records: about 1 ms is 5 records", sl.calls,
               sl.min_len, sl.max_len);
  if (!chained) {
    cr_assert_gt(sl.continued, 0, "no batch came in parts (%u calls)", sl.calls);
    cr_assert_gt(sl.interleaved, 0,
                 "the fast path never ran between two parts of a batch (%u of %u calls, %u to "
                 "%u records, continued a batch; fast path %llu records)",
                 sl.continued, sl.calls, sl.min_len, sl.max_len, (unsigned long long)sl.fast_after);
  }
  cr_assert_gt(sl.interleaved_any, 0, "the fast path never ran between two calls (%u calls)",
               sl.calls);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, slow_operator_takes_batches_in_parts, .timeout = 60) {
  run_slices(0);
}

Test(engine, slow_operator_chained_to_its_source_takes_fewer_records, .timeout = 60) {
  run_slices(1);
}

/* An operator whose cost is per call (say a round trip per batch) is not
 * cut into slices, each costing as much as a batch, whether that cost is
 * well above a step (4 ms) or just above (1.5 ms: two slices a batch would
 * double it): at most a few calls are slices (the engine learns the cost's
 * shape from them). Everything arrives once and in order. */
static void run_per_call(uint32_t call_us, uint32_t max_calls) {
  weir_job *job = new_job("per-call");
  slices sl = {.call_us = call_us};
  weir_gen_opts in = {.records = 8192, .keys = 3};
  static const weir_operator_vt slow_vt = {
      .size = sizeof(weir_operator_vt), .name = "slow", .process_batch = slow_batch};
  weir_stream *s =
      weir_process(weir_rebalance(weir_gen(job, "in", &in, 1)), "slow", &slow_vt, &sl, 1);
  cr_assert_eq(weir_sink_to(s, "out", "null", NULL, 1), 0);
  weir_run_opts o = {.workers = 1, .batch_records = 256, .channel_batches = 4};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(sl.next_ts, 8192);
  cr_assert_eq(sl.out_of_order, 0);
  /* 32 batches of 256: a few more calls are the slices it learns from
   * (how small they are depends on how long the first call took: on a busy
   * machine, several times its share). */
  cr_assert_leq(sl.calls, max_calls, "%u calls of %u to %u records for 32 batches", sl.calls,
                sl.min_len, sl.max_len);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(engine, per_call_cost_is_not_sliced, .timeout = 60) {
  run_per_call(4000, 40);
}

Test(engine, per_call_cost_just_above_a_step_is_not_sliced, .timeout = 60) {
  run_per_call(1500, 40);
}

/* A source that emits batches of every size from 1 to 256 records: some
 * records, then idle (which pushes the partly filled batch). */
typedef struct sizes_src {
  uint64_t next, total, batches;
  uint32_t rng;
} sizes_src;

static int sizes_run(weir_ctx *ctx, uint32_t budget) {
  (void)budget;
  sizes_src *sz = weir_ctx_arg(ctx);
  sz->rng = sz->rng * 1103515245u + 12345u;
  uint64_t k = 1 + (sz->rng >> 16) % 256;
  if (k > sz->total - sz->next) k = sz->total - sz->next;
  for (uint64_t i = 0; i < k; i++, sz->next++) {
    weir_record r = {.key = sz->next % 3, .ts = (int64_t)sz->next};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
  }
  sz->batches++;
  if (sz->next == sz->total) return WEIR_SOURCE_DONE;
  weir_ctx_wake_after(ctx, 50);
  return WEIR_SOURCE_IDLE;
}

/* A cost per call (1.5 ms) with input batches of every size: the fit sees
 * the time does not grow with the records and leaves batches whole (cutting
 * a batch of 256 into slices would pay the 1.5 ms for each), after at most
 * a few slices while it learns. */
Test(engine, per_call_cost_with_batches_of_all_sizes_is_not_sliced, .timeout = 60) {
  weir_job *job = new_job("sizes");
  slices sl = {.call_us = 1500};
  sizes_src sz = {.total = 8192, .rng = 7};
  static const weir_source_vt sizes_vt = {
      .size = sizeof(weir_source_vt), .name = "sizes", .run = sizes_run};
  static const weir_operator_vt slow_vt = {
      .size = sizeof(weir_operator_vt), .name = "slow", .process_batch = slow_batch};
  weir_stream *s = weir_source(job, "in", &sizes_vt, &sz, 1);
  s = weir_process(weir_rebalance(s), "slow", &slow_vt, &sl, 1);
  cr_assert_eq(weir_sink_to(s, "out", "null", NULL, 1), 0);
  weir_run_opts o = {.workers = 1, .batch_records = 256, .channel_batches = 4};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(sl.next_ts, 8192);
  cr_assert_eq(sl.out_of_order, 0);
  cr_assert_leq(sl.continued, 4,
                "%u of %u calls (for %llu batches) took the rest of a sliced batch", sl.continued,
                sl.calls, (unsigned long long)sz.batches);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* The status line (the CLI's progress line) stays below the log lines: a
 * log line clears it, is written, and the status is drawn again; cleared,
 * it is gone. */
Test(log, status_line_stays_below_log_lines) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char path[600];
  snprintf(path, sizeof path, "%s/stderr.txt", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert_geq(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  cr_assert_geq(dup2(fd, 2), 0);
  weir_log_status("records 1");
  WEIR_LOG_W("hello");
  weir_log_status("records 2");
  weir_log_status(NULL);
  WEIR_LOG_W("bye");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  char *got = th_read_file(path, NULL);
  cr_assert_not_null(got);
  const char *want = "\rrecords 1\033[K"
                     "\r\033[Kweir: warn: hello\nrecords 1\033[K"
                     "\rrecords 2\033[K"
                     "\r\033[K"
                     "weir: warn: bye\n";
  cr_assert_str_eq(got, want);
  free(got);
  th_rmrf(dir);
  free(dir);
}
