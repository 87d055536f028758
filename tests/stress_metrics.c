/* stress_metrics.c: the live metrics (weir_job_metrics_read, weir_job_plan,
 * weir_job_checkpoint_stats) read from other threads while jobs run, for
 * ThreadSanitizer, and their figures checked.
 *
 * A generator (2 subtasks) feeds, over a hash edge with channels of one
 * batch of 64 records, a keyed count chained with a sink that spins about
 * 20 us per batch and counts its records with weir_ctx_count: the sink's
 * chain is the bottleneck, so the generator's task waits for room most of
 * the time. Two reader threads poll all three calls without pause while
 * the job runs with checkpoints every 20 ms. Checks: every reading is
 * consistent (subtask counts, operator indexes, a state that only moves
 * forward), records, busy and backpressured times never go back between
 * readings (backpressured time by at most 1 ms, a margin far above the
 * nanoseconds meter.h allows for a store to reach another core); at the
 * end the job is finished, the generator was backpressured and the sink
 * was not (it has no output channel), records and counters equal
 * weir_job_operator_counts and weir_job_counter, and the checkpoint count
 * equals the history's. Also a reader that starts before the run and
 * outlives it.
 *
 * A plain main() program (Criterion cannot start under ThreadSanitizer):
 * prints "N passed, N failed" and exits non-zero on failure.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "helpers.h"
#include "weir/job.h"
#include "weir/operators.h"

#define SUBTASKS 6 /* gen x2, count x2, sink x2 */

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static int slow_sink(weir_ctx *ctx, const weir_batch *b) {
  uint64_t until = weir_clock_mono_ns() + 20000;
  while (weir_clock_mono_ns() < until) {
  }
  weir_ctx_count(ctx, "seen", b->len);
  return 0;
}
static const weir_operator_vt sink_vt = {
    .size = sizeof(weir_operator_vt), .name = "slow", .process_batch = slow_sink};

typedef struct reader {
  weir_job *job;
  atomic_int *stop;
  int errors;
  uint64_t readings;
  int saw_running;
} reader;

/* One inconsistent reading: counted, and said (the first few). */
static void bad(reader *r, const char *fmt, ...) {
  if (r->errors++ < 5) {
    va_list ap;
    va_start(ap, fmt);
    fputs("inconsistent reading: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
}

static void *read_loop(void *arg) {
  reader *r = arg;
  weir_subtask_metrics prev[SUBTASKS], cur[SUBTASKS];
  int have_prev = 0;
  weir_job_state last_state = WEIR_JOB_CREATED;
  weir_checkpoint_stat cs[8];
  while (!atomic_load(r->stop)) {
    weir_job_metrics m = {.size = sizeof m};
    int rc = weir_job_metrics_read(r->job, &m, cur, SUBTASKS);
    if (rc != 0) bad(r, "metrics_read returned %d", rc);
    r->readings++;
    if (m.state == WEIR_JOB_RUNNING) r->saw_running = 1;
    if (m.state < last_state && m.state != WEIR_JOB_FAILED)
      bad(r, "state went back from %d to %d", (int)last_state, (int)m.state);
    last_state = m.state;
    if (m.nsubtasks != 0 && m.nsubtasks != SUBTASKS) bad(r, "%zu subtasks", (size_t)m.nsubtasks);
    weir_plan_operator ops[4];
    size_t nops = 0;
    if (weir_job_plan(r->job, ops, 4, &nops, NULL, 0, NULL) == 0 && nops != 3)
      bad(r, "%zu operators in the plan", nops);
    (void)weir_job_checkpoint_stats(r->job, 0, cs, 8);
    if (m.nsubtasks == SUBTASKS) {
      for (int i = 0; i < SUBTASKS; i++) {
        if (cur[i].op > 2) bad(r, "subtask %d of operator %u", i, (unsigned)cur[i].op);
        if (!have_prev) continue;
        const weir_subtask_metrics *a = &prev[i], *b = &cur[i];
        if (b->records_in < a->records_in || b->records_out < a->records_out ||
            b->busy_ns < a->busy_ns || b->backpressured_ns + 1000000 < a->backpressured_ns) {
          bad(r, "subtask %d went back: in %llu->%llu busy %llu->%llu bp %llu->%llu", i,
              (unsigned long long)a->records_in, (unsigned long long)b->records_in,
              (unsigned long long)a->busy_ns, (unsigned long long)b->busy_ns,
              (unsigned long long)a->backpressured_ns, (unsigned long long)b->backpressured_ns);
        }
      }
      memcpy(prev, cur, sizeof prev);
      have_prev = 1;
    }
  }
  return NULL;
}

static void run_once(int with_checkpoints) {
  weir_job *job = NULL;
  CHECK(weir_job_create(&job, "metrics") == 0, "create");
  weir_gen_opts g = {.records = 200000, .keys = 1000};
  weir_stream *s = weir_count(weir_key_by(weir_gen(job, "gen", &g, 2)), "count", 2);
  CHECK(weir_sink(s, "sink", &sink_vt, NULL, 2) == 0, "build: %s", weir_job_error(job));

  atomic_int stop = 0;
  reader rd[2] = {{.job = job, .stop = &stop}, {.job = job, .stop = &stop}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, read_loop, &rd[i]);

  char *dir = with_checkpoints ? th_tmpdir() : NULL;
  weir_run_opts o = {.workers = 2, .batch_records = 64, .channel_batches = 1};
  if (dir) {
    o.state_dir = dir;
    o.checkpoint_interval_ms = 20;
  }
  int rc = weir_job_run(job, &o);
  CHECK(rc == 0, "run: %s", weir_job_error(job));
  /* The readers go on a little after the end. */
  weir_sleep_us(20000);
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    CHECK(rd[i].errors == 0, "reader %d: %d inconsistent readings of %llu", i, rd[i].errors,
          (unsigned long long)rd[i].readings);
    CHECK(rd[i].readings > 10, "reader %d read only %llu times", i,
          (unsigned long long)rd[i].readings);
  }
  CHECK(rd[0].saw_running || rd[1].saw_running, "no reading saw the job running");

  weir_job_metrics m = {.size = sizeof m};
  weir_subtask_metrics st[SUBTASKS];
  CHECK(weir_job_metrics_read(job, &m, st, SUBTASKS) == 0, "read");
  CHECK(m.state == WEIR_JOB_FINISHED, "state %d", (int)m.state);
  CHECK(m.nsubtasks == SUBTASKS, "%zu subtasks", m.nsubtasks);
  CHECK(m.job_id[0] != '\0', "no job id");
  CHECK(m.uptime_ns > 0, "no uptime");
  uint64_t in[3] = {0}, out[3] = {0}, bp[3] = {0}, busy[3] = {0}, seen = 0;
  for (int i = 0; i < SUBTASKS; i++) {
    in[st[i].op] += st[i].records_in;
    out[st[i].op] += st[i].records_out;
    bp[st[i].op] += st[i].backpressured_ns;
    busy[st[i].op] += st[i].busy_ns;
    for (uint32_t k = 0; k < st[i].ncounters; k++)
      if (strcmp(st[i].counter_names[k], "seen") == 0) seen += st[i].counter_values[k];
  }
  const char *names[3] = {"gen", "count", "sink"};
  for (int op = 0; op < 3; op++) {
    uint64_t ri = 0, ro = 0;
    weir_job_operator_counts(job, names[op], &ri, &ro);
    CHECK(in[op] == ri && out[op] == ro, "%s: %llu/%llu, counts say %llu/%llu", names[op],
          (unsigned long long)in[op], (unsigned long long)out[op], (unsigned long long)ri,
          (unsigned long long)ro);
    CHECK(busy[op] > 0, "%s: no busy time", names[op]);
  }
  CHECK(out[0] == g.records, "gen emitted %llu", (unsigned long long)out[0]);
  uint64_t counted = 0;
  weir_job_counter(job, "sink", "seen", &counted);
  CHECK(seen == counted && seen == g.records, "seen %llu, counter %llu", (unsigned long long)seen,
        (unsigned long long)counted);
  /* The generator waits for the slow chain; the chain has no output. */
  CHECK(bp[0] > 0, "the generator was never backpressured");
  CHECK(bp[1] == 0 && bp[2] == 0, "the sink's chain backpressured %llu ns",
        (unsigned long long)bp[2]);
  for (int i = 0; i < SUBTASKS; i++) {
    if (st[i].op == 0) CHECK(st[i].out_capacity == 1, "gen's output bound %u", st[i].out_capacity);
    if (st[i].op == 1) CHECK(st[i].in_capacity == 2, "count's inputs %u", st[i].in_capacity);
    CHECK(!st[i].has_watermark, "a watermark without event time");
  }
  if (dir) {
    weir_checkpoint_stat cs[1024];
    size_t n = weir_job_checkpoint_stats(job, 0, cs, 1024);
    CHECK(m.checkpoints_completed == n && n > 0, "checkpoints %llu, history %zu",
          (unsigned long long)m.checkpoints_completed, n);
    CHECK(m.last_checkpoint_id == cs[n - 1].id, "last %llu",
          (unsigned long long)m.last_checkpoint_id);
    CHECK(m.lease_epoch >= 1, "lease epoch %llu", (unsigned long long)m.lease_epoch);
    th_rmrf(dir);
    free(dir);
  }
  weir_job_destroy(job);
}

int main(void) {
  weir_log_set_level(WEIR_LOG_WARN); /* a line per checkpoint otherwise */
  int passed = 0, failed = 0;
  for (int round = 0; round < 4; round++) {
    int before = failures;
    run_once(round % 2);
    if (failures == before)
      passed++;
    else
      failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
