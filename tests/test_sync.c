/* tests/test_sync.c: synchronous (stop-the-world) checkpoints in process:
 * every snapshot call of a checkpoint sees a job that stands still, also
 * with an iteration, and the option checks.
 *
 * DESIGN. Small jobs built through the public API with counting vtables: a
 * source (two subtasks, a u64 payload per record) counts every record it
 * emits, and every operator counts every record it processes, in
 * process-wide atomics. Every snapshot callback (source and operators, every
 * subtask) appends what the counters say at that moment to a log, tagged
 * with the checkpoint id. In sync mode the sources are paused and every
 * channel drained before the first snapshot call of a checkpoint and until
 * the last one, so for each checkpoint every entry must show the same
 * counts, and every record emitted must have been processed by every stage
 * (emitted == processed at each stage): nothing in flight, nothing arriving
 * between the snapshot calls of different subtasks. The loop test does the
 * same with records that circle in an iteration a varying number of times:
 * at every snapshot each record that entered the loop has left it.
 *
 * The sources pace themselves (a batch, then IDLE for 200 µs), so a run
 * lasts long enough for several interval checkpoints whatever the machine's
 * load; the assertions do not depend on timing (only on how many interval
 * checkpoints there were: at least one besides the final one).
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/job.h"

typedef unsigned long long ull;

#define RECORDS 60000u /* per source subtask */
#define PER_RUN 500u   /* records per run() before the source idles */
#define MAX_LOG 8192

/* ---- counters and the snapshot log ------------------------------------------ */

enum { C_EMITTED, C_MID, C_LAST, C_COUNTERS };

static _Atomic uint64_t counters[C_COUNTERS];

typedef struct entry {
  uint64_t id;
  uint64_t c[C_COUNTERS];
} entry;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static entry log_v[MAX_LOG];
static size_t log_n;
static int log_overflow;

static void log_snapshot(uint64_t id) {
  entry e = {.id = id};
  for (int i = 0; i < C_COUNTERS; i++) e.c[i] = atomic_load(&counters[i]);
  pthread_mutex_lock(&log_mu);
  if (log_n < MAX_LOG)
    log_v[log_n++] = e;
  else
    log_overflow = 1;
  pthread_mutex_unlock(&log_mu);
}

static void reset(void) {
  for (int i = 0; i < C_COUNTERS; i++) atomic_store(&counters[i], 0);
  log_n = 0;
  log_overflow = 0;
}

/* ---- the source ----------------------------------------------------------- */

static int src_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(uint64_t)));
  return 0;
}

static int src_run(weir_ctx *ctx, uint32_t budget) {
  uint64_t *next = weir_ctx_user(ctx);
  uint32_t sub = weir_ctx_subtask(ctx);
  if (budget > PER_RUN) budget = PER_RUN;
  for (uint32_t k = 0; k < budget && *next < RECORDS; k++) {
    uint64_t i = *next * 2 + sub, v = i % 7; /* v: trips round the loop */
    uint8_t p[8];
    for (int b = 0; b < 8; b++) p[b] = (uint8_t)(v >> (8 * b));
    weir_record r = {
        .key = i, .id = weir_source_record_id(ctx, sub, *next), .payload = p, .len = sizeof p};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
    atomic_fetch_add(&counters[C_EMITTED], 1);
    (*next)++;
  }
  if (*next == RECORDS) return WEIR_SOURCE_DONE;
  weir_ctx_wake_after(ctx, 200);
  return WEIR_SOURCE_IDLE;
}

static int src_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  uint64_t *next = weir_ctx_user(ctx);
  log_snapshot(id);
  return weir_snapshot_position(w, weir_ctx_subtask(ctx), *next);
}

static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "src",
                                      .open = src_open,
                                      .run = src_run,
                                      .snapshot = src_snapshot,
                                      .close = src_close};

/* ---- counting operators -------------------------------------------------- */

/* arg: the counter it bumps (an int cast to a pointer). */
static int count_process(weir_ctx *ctx, const weir_record *r) {
  int which = (int)(intptr_t)weir_ctx_arg(ctx);
  atomic_fetch_add(&counters[which], 1);
  return which == C_LAST ? 0 : weir_emit(ctx, r->key, r->payload, r->len);
}

static int count_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)ctx;
  (void)w;
  log_snapshot(id);
  return 0;
}

static const weir_operator_vt count_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "count",
                                          .process = count_process,
                                          .snapshot = count_snapshot};

/* Loop body: one trip round the loop takes one from the payload's value. */
static int step_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t v = weir_payload_u64(r);
  return weir_emit_u64(ctx, r->key, v ? v - 1 : 0);
}

/* Splits step's output: arg 1 keeps what goes round again, 0 what leaves. */
static int split_process(weir_ctx *ctx, const weir_record *r) {
  int again = weir_ctx_arg(ctx) != NULL;
  if ((weir_payload_u64(r) > 0) != again) return 0;
  return weir_emit(ctx, r->key, r->payload, r->len);
}

static const weir_operator_vt step_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "step",
                                         .process = step_process,
                                         .snapshot = count_snapshot};
static const weir_operator_vt split_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "split",
                                          .process = split_process,
                                          .snapshot = count_snapshot};

/* ---- running and checking ------------------------------------------------ */

static int run(weir_job *job, const char *dir, int sync, int at_least_once) {
  weir_run_opts o = {.workers = 2,
                     .state_dir = dir,
                     .checkpoint_interval_ms = 5,
                     .sync_checkpoints = sync,
                     .at_least_once = at_least_once};
  return weir_job_run(job, &o);
}

/* Every checkpoint's entries agree, and show every record processed by
 * every stage. Returns the number of checkpoints seen. */
static size_t check_log(size_t nstages, size_t per_ckpt) {
  cr_assert_not(log_overflow, "the snapshot log overflowed");
  size_t ckpts = 0;
  for (size_t i = 0; i < log_n; i++) {
    const entry *e = &log_v[i];
    size_t same = 0;
    for (size_t k = 0; k < log_n; k++) {
      if (log_v[k].id != e->id) continue;
      same++;
      for (int c = 0; c < C_COUNTERS; c++)
        cr_assert_eq(log_v[k].c[c], e->c[c],
                     "checkpoint %llu: counter %d was %llu at one snapshot call and %llu at "
                     "another: records moved while the job should stand still",
                     (ull)e->id, c, (ull)e->c[c], (ull)log_v[k].c[c]);
    }
    cr_assert_eq(same, per_ckpt, "checkpoint %llu: %zu snapshot calls, expected %zu", (ull)e->id,
                 same, per_ckpt);
    for (size_t s = 1; s <= nstages; s++)
      cr_assert_eq(e->c[s], e->c[C_EMITTED],
                   "checkpoint %llu: %llu records emitted, %llu processed by stage %zu: records "
                   "in flight during a synchronous snapshot",
                   (ull)e->id, (ull)e->c[C_EMITTED], (ull)e->c[s], s);
    int first = 1;
    for (size_t k = 0; k < i; k++) first &= log_v[k].id != e->id;
    ckpts += first;
  }
  return ckpts;
}

static void leak_check(void) {
  cr_assert_eq(th_leak_check(), 0);
}

TestSuite(sync, .timeout = 120, .fini = leak_check);

/* src(2) -> key_by -> mid(2) -> rebalance -> last(2). */
Test(sync, snapshots_see_a_job_that_stands_still) {
  reset();
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  weir_job *job;
  cr_assert_eq(weir_job_create(&job, "sync"), 0);
  weir_stream *s = weir_source(job, "src", &src_vt, NULL, 2);
  s = weir_process(weir_key_by(s), "mid", &count_vt, (void *)(intptr_t)C_MID, 2);
  cr_assert_eq(weir_sink(weir_rebalance(s), "last", &count_vt, (void *)(intptr_t)C_LAST, 2), 0);
  int rc = run(job, dir, 1, 0);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  const weir_run_info *ri = weir_job_run_info(job);
  size_t n = check_log(2, 6);
  cr_assert_eq(n, ri->checkpoints, "%zu checkpoints logged, %llu completed", n,
               (ull)ri->checkpoints);
  cr_assert_geq(n, 2, "only %zu checkpoints: none besides the final one", n);
  cr_assert_eq(atomic_load(&counters[C_LAST]), 2ull * RECORDS);
  fprintf(stderr, "sync::snapshots_see_a_job_that_stands_still: %zu checkpoints, all quiet\n", n);
  weir_job_destroy(job);
  th_rmrf(dir);
  free(dir);
}

/* src(2) -> key_by -> loop head(2) -> step -> { again: key_by back to the
 * head; out -> key_by -> last(2) }: a record goes round v = i % 7 times. At
 * every snapshot every record that entered the loop has left it and has
 * reached `last`. With `failpoints` armed during the run. */
static void loop_run(const char *name, const char *failpoints) {
  reset();
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  weir_job *job;
  cr_assert_eq(weir_job_create(&job, "sync-loop"), 0);
  weir_stream *s = weir_source(job, "src", &src_vt, NULL, 2);
  weir_stream *body = NULL;
  weir_iteration *it = weir_iterate(weir_key_by(s), "loop", 2, &body);
  weir_stream *step = weir_process(body, "step", &step_vt, NULL, 2);
  weir_stream *again = weir_process(step, "again", &split_vt, (void *)1, 2);
  weir_stream *out = weir_process(step, "out", &split_vt, NULL, 2);
  cr_assert_eq(weir_iteration_close(it, weir_key_by(again)), 0);
  cr_assert_eq(weir_sink(weir_key_by(out), "last", &count_vt, (void *)(intptr_t)C_LAST, 2), 0);
  th_arm_failpoints(failpoints);
  int rc = run(job, dir, 1, 0);
  th_arm_failpoints(NULL);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  const weir_run_info *ri = weir_job_run_info(job);
  /* Snapshot callbacks: src, step, again, out, last (the head has none). */
  pthread_mutex_lock(&log_mu);
  for (size_t i = 0; i < log_n; i++) log_v[i].c[C_MID] = log_v[i].c[C_LAST]; /* one stage */
  pthread_mutex_unlock(&log_mu);
  size_t n = check_log(1, 10);
  cr_assert_eq(n, ri->checkpoints, "%zu checkpoints logged, %llu completed", n,
               (ull)ri->checkpoints);
  cr_assert_geq(n, 2, "only %zu checkpoints: none besides the final one", n);
  cr_assert_eq(atomic_load(&counters[C_LAST]), 2ull * RECORDS);
  fprintf(stderr, "sync::%s: %zu checkpoints, loop empty at each\n", name, n);
  weir_job_destroy(job);
  th_rmrf(dir);
  free(dir);
}

Test(sync, loops_drain_before_the_snapshot) {
  loop_run("loops_drain_before_the_snapshot", NULL);
}

/* A head that just got the drain marker on its external inputs may still
 * hold records for the loop in an output batch it has not pushed: they
 * count as in flight from the moment they were emitted, so another head
 * that looks at the count meanwhile (here: while the first one sleeps 5 ms
 * after saying it is ready) waits for them instead of letting its marker
 * into a loop that is not empty. */
Test(sync, loop_heads_count_records_not_pushed_yet) {
  loop_run("loop_heads_count_records_not_pushed_yet", "iter.head_ready=delay+");
}

Test(sync, not_with_at_least_once) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  weir_job *job;
  cr_assert_eq(weir_job_create(&job, "sync-alo"), 0);
  weir_stream *s = weir_source(job, "src", &src_vt, NULL, 1);
  cr_assert_eq(weir_sink(s, "last", &count_vt, (void *)(intptr_t)C_LAST, 1), 0);
  cr_assert_eq(run(job, dir, 1, 1), WEIR_EINVAL);
  cr_assert(strstr(weir_job_error(job), "at-least-once") != NULL, "%s", weir_job_error(job));
  weir_job_destroy(job);
  th_rmrf(dir);
  free(dir);
}
