/* bench_unaligned.c: checkpoints under backpressure: aligned, unaligned and
 * aligned with an alignment timeout, against no checkpoints.
 *
 * The workload is the counter job's --all-edges shape with one slow path
 * (jobs/counter.c), built here through the public API:
 *
 *   gen -forward-> pace (even i; subtask 0 sleeps) --+
 *   gen -rebalance-> pass (odd i) -------------------+-broadcast-> pick -hash-> count -> null
 *
 * Subtask 0 of pace sleeps --slow-us microseconds every --slow-every
 * records (defaults 5000 and 1024: one long pause a batch; a smaller
 * --slow-every with a proportionally smaller --slow-us spreads the same
 * cost over the records, like an operator that is slow on every record), so
 * its input channel stays full and everything upstream of it is
 * backpressured: an aligned barrier waits behind every buffered batch on
 * the slow path (and behind the batches of the tasks that share its
 * worker), an unaligned one overtakes them.
 *
 * In one invocation, W workers and parallelism W (default 2), an unbounded
 * generator measured over --seconds S (default 4) from its first records
 * and then stopped (stopper.h), a checkpoint every
 * --interval MS (default 100), channels of --channel-batches batches of
 * --batch-records records (defaults 8 and 1024: the engine's defaults).
 * Each repetition runs none, aligned, none, unaligned, none, timeout, none
 * (A B A B), where timeout is aligned with --alignment-timeout T (default
 * 10 ms). For each mode: throughput (the generator's records in those S
 * seconds) and its ratio to the mean of the two runs without checkpoints
 * around it (median over repetitions); checkpoint duration, trigger to
 * durable (to 0.1 ms), p50 and p99 over every checkpoint of every
 * repetition (not the final one, nor one still in flight at the stop:
 * both wait for the job
 * to drain); the share of checkpoints with unaligned cuts and the
 * channel state per checkpoint (records the barriers overtook, average).
 *
 *   bench_unaligned [--seconds S] [--reps R] [--workers W] [--slow-us US]
 *                   [--slow-every N] [--interval MS] [--timeout MS] [--channel-batches N]
 *                   [--batch-records N] [--keys K] [--json FILE]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "weir/weir.h"
#include "stopper.h"

typedef struct cfg {
  double seconds;
  int reps, workers;
  uint64_t slow_us, slow_every, keys;
  uint32_t interval, timeout, channel_batches, batch_records;
} cfg;

typedef struct mode {
  const char *name;
  int checkpoints, unaligned;
  uint32_t timeout;
} mode;

/* pace subtask 0's record count (only its thread touches it). */
typedef struct slow {
  uint64_t us, every, n;
} slow;

static int keep_parity(weir_ctx *ctx, void *user, const weir_record *in) {
  slow *sl = user;
  int pace = strcmp(weir_ctx_name(ctx), "pace") == 0;
  if (((uint64_t)in->ts & 1u) != (pace ? 0u : 1u)) return 0;
  if (pace && sl->us && weir_ctx_subtask(ctx) == 0 && ++sl->n % sl->every == 0)
    weir_sleep_us(sl->us);
  return weir_emit(ctx, in->key, in->payload, in->len);
}

static int pick_one(weir_ctx *ctx, void *user, const weir_record *in) {
  (void)user;
  if (((uint64_t)in->ts / 2) % weir_ctx_parallelism(ctx) != weir_ctx_subtask(ctx)) return 0;
  return weir_emit(ctx, in->key, in->payload, in->len);
}

static void remove_store(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s/store/data.mdb", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/store/lock.mdb", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/store", dir);
  rmdir(p);
  snprintf(p, sizeof p, "%s/lease", dir);
  char q[4200];
  snprintf(q, sizeof q, "rm -rf '%s'", p);
  if (system(q) != 0) fprintf(stderr, "bench_unaligned: cannot remove %s\n", p);
}

typedef struct result {
  double rate;
  uint32_t n;                       /* checkpoints, final excluded */
  double ms[BENCH_MAX_CHECKPOINTS]; /* their durations, ms (from microseconds) */
  uint64_t unaligned;               /* completed with unaligned cuts */
  uint64_t chan_bytes;              /* channel state over the run */
  uint64_t checkpoints;
} result;

static void run(const cfg *c, const mode *m, const char *dir, result *out) {
  weir_job *job;
  weir_job_create(&job, "unaligned");
  slow sl = {c->slow_us, c->slow_every, 0};
  weir_gen_opts g = {.records = 0, .keys = c->keys};
  int p = c->workers;
  weir_stream *s = weir_gen(job, "gen", &g, p);
  weir_stream *even = weir_flat_map(weir_forward(s), "pace", keep_parity, &sl, p);
  weir_stream *odd = weir_flat_map(weir_rebalance(s), "pass", keep_parity, &sl, p);
  s = weir_flat_map(weir_broadcast(weir_union(even, odd)), "pick", pick_one, NULL, p);
  s = weir_count(weir_key_by(s), "count", p);
  int rc = weir_sink_to(s, "sink", "null", NULL, p);
  weir_run_opts o = {
      .workers = p, .channel_batches = c->channel_batches, .batch_records = c->batch_records};
  if (m->checkpoints) {
    remove_store(dir);
    o.state_dir = dir;
    o.checkpoint_interval_ms = c->interval;
    o.unaligned = m->unaligned;
    o.alignment_timeout_ms = m->timeout;
    o.restore = WEIR_RESTORE_FRESH;
  }
  bench_stopper st;
  bench_stopper_start(&st, job, "gen", c->seconds);
  if (!rc) rc = weir_job_run(job, &o);
  double rate = bench_stopper_join(&st);
  if (rc) {
    fprintf(stderr, "bench_unaligned: job failed: %s\n", weir_job_error(job));
    exit(1);
  }
  const weir_run_info *ri = weir_job_run_info(job);
  memset(out, 0, sizeof *out);
  out->rate = rate;
  static weir_checkpoint_stat cs[BENCH_MAX_CHECKPOINTS];
  out->n = bench_window_checkpoints(job, cs, BENCH_MAX_CHECKPOINTS);
  for (uint32_t i = 0; i < out->n; i++) out->ms[i] = (double)cs[i].duration_us / 1000.0;
  out->unaligned = ri->unaligned_checkpoints;
  out->chan_bytes = ri->channel_state_bytes;
  out->checkpoints = ri->checkpoints;
  if (m->checkpoints) remove_store(dir);
  weir_job_destroy(job);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double q) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, cmp_double);
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

int main(int argc, char **argv) {
  cfg c = {.seconds = 4,
           .reps = 3,
           .workers = 2,
           .slow_us = 5000,
           .slow_every = 1024,
           .keys = 100000,
           .interval = 100,
           .timeout = 10,
           .channel_batches = 8,
           .batch_records = 1024};
  const char *json = NULL;
  for (int i = 1; i < argc; i += 2) { /* every option takes a value */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) goto usage;
    if (!strcmp(a, "--seconds"))
      c.seconds = atof(v);
    else if (!strcmp(a, "--reps"))
      c.reps = atoi(v);
    else if (!strcmp(a, "--workers"))
      c.workers = atoi(v);
    else if (!strcmp(a, "--slow-us"))
      c.slow_us = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--slow-every"))
      c.slow_every = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--keys"))
      c.keys = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--interval"))
      c.interval = (uint32_t)atoi(v);
    else if (!strcmp(a, "--timeout"))
      c.timeout = (uint32_t)atoi(v);
    else if (!strcmp(a, "--channel-batches"))
      c.channel_batches = (uint32_t)atoi(v);
    else if (!strcmp(a, "--batch-records"))
      c.batch_records = (uint32_t)atoi(v);
    else if (!strcmp(a, "--json"))
      json = v;
    else
      goto usage;
  }
  if (!(c.seconds >= 0.5 && c.seconds <= 3600) || c.reps < 1 || c.reps > 100 || c.workers < 1 ||
      c.workers > 64 || !c.keys || !c.slow_every || !c.interval || !c.timeout)
    goto usage;
  if (!getenv("WEIR_LOG")) weir_log_set_level(WEIR_LOG_WARN);
  char tmpl[4096];
  const char *tmp = getenv("TMPDIR");
  snprintf(tmpl, sizeof tmpl, "%s/weir-bench-unaligned-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  char *dir = mkdtemp(tmpl);
  if (!dir) {
    perror("bench_unaligned: mkdtemp");
    return 1;
  }
  static const mode none = {"none", 0, 0, 0};
  mode modes[3] = {{"aligned", 1, 0, 0}, {"unaligned", 1, 1, 0}, {"timeout", 1, 0, 0}};
  modes[2].timeout = c.timeout;
  enum { NM = 3 };
  printf("unaligned: %d workers, slow path %llu us / %llu records, checkpoint every %u ms, "
         "channels %u x %u records, alignment timeout %u ms, %.1f s x %d repetitions "
         "(none, mode, none, ...)\n",
         c.workers, (unsigned long long)c.slow_us, (unsigned long long)c.slow_every, c.interval,
         c.channel_batches, c.batch_records, c.timeout, c.seconds, c.reps);
  double ratio[NM][100], rate[NM][100];
  double *ms[NM];
  size_t nms[NM] = {0};
  uint64_t unal[NM] = {0}, cks[NM] = {0}, bytes[NM] = {0};
  for (int k = 0; k < NM; k++) ms[k] = weir_calloc((size_t)c.reps * 256, sizeof(double));
  result r;
  for (int rep = 0; rep < c.reps; rep++) {
    run(&c, &none, dir, &r);
    double before = r.rate;
    printf("  rep %d  %-10s %8.3fM/s\n", rep + 1, "none", r.rate / 1e6);
    for (int k = 0; k < NM; k++) {
      result m;
      run(&c, &modes[k], dir, &m);
      run(&c, &none, dir, &r);
      double after = r.rate;
      rate[k][rep] = m.rate;
      ratio[k][rep] = m.rate / ((before + after) / 2);
      before = after;
      for (uint32_t i = 0; i < m.n; i++) ms[k][nms[k]++] = m.ms[i];
      unal[k] += m.unaligned;
      cks[k] += m.checkpoints;
      bytes[k] += m.chan_bytes;
      double tmpv[256];
      for (uint32_t i = 0; i < m.n; i++) tmpv[i] = m.ms[i];
      printf("  rep %d  %-10s %8.3fM/s  %3u checkpoints, p50 %.1f ms, %llu unaligned\n", rep + 1,
             modes[k].name, m.rate / 1e6, m.n, pct(tmpv, m.n, 0.5),
             (unsigned long long)m.unaligned);
      printf("  rep %d  %-10s %8.3fM/s\n", rep + 1, "none", r.rate / 1e6);
    }
  }
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf)
    fprintf(jf,
            "{\"workers\": %d, \"slow_us\": %llu, \"slow_every\": %llu, \"interval_ms\": %u, "
            "\"timeout_ms\": %u, \"channel_batches\": %u, \"batch_records\": %u, "
            "\"seconds\": %.1f, \"reps\": %d, \"modes\": [",
            c.workers, (unsigned long long)c.slow_us, (unsigned long long)c.slow_every, c.interval,
            c.timeout, c.channel_batches, c.batch_records, c.seconds, c.reps);
  printf("%-10s %12s %10s %14s %14s %12s %18s\n", "mode", "rec/s", "vs none", "ckpt p50 ms",
         "ckpt p99 ms", "unaligned", "channel B/ckpt");
  for (int k = 0; k < NM; k++) {
    double rt = pct(rate[k], (size_t)c.reps, 0.5), rr = pct(ratio[k], (size_t)c.reps, 0.5);
    double p50 = pct(ms[k], nms[k], 0.5), p99 = pct(ms[k], nms[k], 0.99);
    double per = cks[k] ? (double)bytes[k] / (double)cks[k] : 0;
    printf("%-10s %11.3fM %10.3f %14.1f %14.1f %8llu/%-3llu %18.0f\n", modes[k].name, rt / 1e6, rr,
           p50, p99, (unsigned long long)unal[k], (unsigned long long)cks[k], per);
    if (jf)
      fprintf(jf,
              "%s{\"mode\": \"%s\", \"rate_median\": %.0f, \"ratio_to_none\": %.4f, "
              "\"ckpt_p50_ms\": %.1f, \"ckpt_p99_ms\": %.1f, \"checkpoints\": %llu, "
              "\"unaligned\": %llu, \"channel_bytes_per_checkpoint\": %.0f}",
              k ? ", " : "", modes[k].name, rt, rr, p50, p99, (unsigned long long)cks[k],
              (unsigned long long)unal[k], per);
  }
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  for (int k = 0; k < NM; k++) weir_free(ms[k]);
  rmdir(dir);
  return 0;
usage:
  fprintf(stderr, "usage: bench_unaligned [--seconds S] [--reps R] [--workers W] [--slow-us US]\n"
                  "                       [--slow-every N] [--interval MS] [--timeout MS]\n"
                  "                       [--channel-batches N] [--batch-records N] [--keys K]\n"
                  "                       [--json FILE]\n");
  return 2;
}
