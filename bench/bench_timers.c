/* bench_timers.c: what timers cost (docs/event-time.md §5.3).
 *
 * Two parts, each the median over --reps repetitions:
 *   set    the timer set and its order on one thread (what one worker
 *          does per timer), registrations and firings counted apart:
 *            clustered - N timers over K keys on N/K timestamps (window
 *                        ends: every key has a timer at each);
 *            spread    - N timers, each at its own timestamp, keys at
 *                        random (the order's worst case: a bucket each).
 *   job    one worker, a source of N records (key i mod K, timestamp i)
 *          -> key_by -> a keyed operator: the baseline counts records;
 *          the timer run also registers, per record, an event-time timer
 *          at the end of its 1 s window (as a window operator does: the
 *          record timestamps are ms, so 1000 records share a window end,
 *          each of another key: every registration is a distinct (key,
 *          timestamp) pair) and fires them (on_timers counts them).
 *          Reported: both rates, their ratio, and the time the timers
 *          added per timer (registered and fired).
 *
 *   bench_timers [--timers N] [--keys K] [--records N] [--reps R]
 *                [--jsonl FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "timers.h"
#include "weir/weir.h"

static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t fired;

static int count_fired(void *arg, int64_t ts, const uint64_t *keys, uint32_t n) {
  (void)arg;
  (void)ts;
  (void)keys;
  fired += n;
  return 0;
}

/* One run of the set: registrations/s and firings/s (millions). */
static void set_run(uint64_t n, uint64_t k, int spread, double *reg, double *fire) {
  weir__timers tm;
  weir__timers_init(&tm);
  uint64_t *keys = malloc(n * sizeof *keys);
  int64_t *ts = malloc(n * sizeof *ts);
  uint64_t x = 88172645463325252ull;
  for (uint64_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    keys[i] = spread ? x : i % k;
    ts[i] = spread ? (int64_t)i : (int64_t)(i / k) * 1000;
  }
  uint64_t t0 = weir_clock_mono_ns();
  for (uint64_t i = 0; i < n; i++) weir__timers_add(&tm, keys[i], ts[i]);
  uint64_t t1 = weir_clock_mono_ns();
  fired = 0;
  weir__timers_fire(&tm, INT64_MAX, 1024, count_fired, NULL);
  uint64_t t2 = weir_clock_mono_ns();
  if (fired != n)
    fprintf(stderr, "bench_timers: %llu of %llu fired\n", (unsigned long long)fired,
            (unsigned long long)n);
  *reg = (double)n / ((double)(t1 - t0) / 1e9) / 1e6;
  *fire = (double)n / ((double)(t2 - t1) / 1e9) / 1e6;
  weir__timers_free(&tm);
  free(keys);
  free(ts);
}

/* ---- the job ------------------------------------------------------------------ */

static uint64_t job_records, job_keys;
static int job_timers;

typedef struct src_state {
  uint64_t next;
} src_state;

static int src_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(src_state)));
  return 0;
}
static int src_run(weir_ctx *ctx, uint32_t budget) {
  src_state *s = weir_ctx_user(ctx);
  for (uint32_t b = 0; b < budget && s->next < job_records; b++, s->next++) {
    int rc = weir_emit_at(ctx, s->next % job_keys, (int64_t)s->next, NULL, 0);
    if (rc) return rc;
  }
  return s->next >= job_records ? WEIR_SOURCE_DONE : WEIR_SOURCE_MORE;
}
static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}
static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "records",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close};

static uint64_t op_seen, op_fired; /* one worker: one thread */

static int op_batch(weir_ctx *ctx, const weir_batch *b) {
  op_seen += b->len;
  if (!job_timers) return 0;
  for (uint32_t i = 0; i < b->len; i++) {
    weir_state_select(ctx, b->keys[i]);
    int rc = weir_timer_register(ctx, WEIR_EVENT_TIME, b->ts[i] - b->ts[i] % 1000 + 999);
    if (rc) return rc;
  }
  return 0;
}
static int op_timers(weir_ctx *ctx, const weir_timer_batch *tb) {
  (void)ctx;
  op_fired += tb->len;
  return 0;
}
static const weir_operator_vt op_vt = {.size = sizeof(weir_operator_vt),
                                       .name = "op",
                                       .process_batch = op_batch,
                                       .on_timers = op_timers};

/* One run of the job: records/s (millions). */
static double job_run(int timers) {
  job_timers = timers;
  op_seen = op_fired = 0;
  weir_job *job = NULL;
  weir_job_create(&job, "bench-timers");
  weir_watermark_strategy ws = {.size = sizeof ws, .out_of_orderness = 0, .interval_ms = 1};
  weir_stream *s = weir_with_watermarks(weir_source(job, "records", &src_vt, NULL, 1), &ws);
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_EVENT_TIMERS};
  s = weir_process_opts(weir_key_by(s), "op", &op_vt, NULL, 1, &oo);
  weir_sink(s, "sink", &op_vt, NULL, 1);
  weir_run_opts o = {.workers = 1};
  uint64_t t0 = weir_clock_mono_ns();
  int rc = weir_job_run(job, &o);
  uint64_t t1 = weir_clock_mono_ns();
  if (rc) fprintf(stderr, "bench_timers: %s\n", weir_job_error(job));
  uint64_t want = timers ? job_records : 0;
  if (op_seen != job_records || op_fired != want)
    fprintf(stderr, "bench_timers: %llu records, %llu timers fired\n", (unsigned long long)op_seen,
            (unsigned long long)op_fired);
  weir_job_destroy(job);
  return (double)job_records / ((double)(t1 - t0) / 1e9) / 1e6;
}

int main(int argc, char **argv) {
  uint64_t n = 4000000, k = 100000;
  int reps = 5;
  const char *jsonl_path = NULL;
  job_records = 10000000;
  job_keys = 100000;
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_timers: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--timers"))
      n = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--keys"))
      k = job_keys = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--records"))
      job_records = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--reps"))
      reps = atoi(v);
    else if (!strcmp(a, "--jsonl"))
      jsonl_path = v;
    else {
      fprintf(stderr, "bench_timers: unknown option %s\n", a);
      return 2;
    }
  }
  if (reps < 1 || reps > 64 || n == 0 || k == 0 || job_records == 0) {
    fprintf(stderr, "bench_timers: bad arguments\n");
    return 2;
  }
  weir_log_set_level(WEIR_LOG_WARN);
  double creg[64], cfire[64], sreg[64], sfire[64], base[64], with[64];
  for (int r = 0; r < reps; r++) {
    set_run(n, k, 0, &creg[r], &cfire[r]);
    set_run(n, k, 1, &sreg[r], &sfire[r]);
    base[r] = job_run(0);
    with[r] = job_run(1);
  }
  double ratio[64];
  for (int r = 0; r < reps; r++) ratio[r] = with[r] / base[r];
  double mb = median(base, reps), mw = median(with, reps), mr = median(ratio, reps);
  double added_ns = (1e3 / mw - 1e3 / mb); /* per record = per timer */
  double c_reg = median(creg, reps), c_fire = median(cfire, reps);
  double s_reg = median(sreg, reps), s_fire = median(sfire, reps);
  printf("timer set, one thread, %llu timers over %llu keys (median of %d):\n",
         (unsigned long long)n, (unsigned long long)k, reps);
  printf("  clustered  %7.1f M registrations/s  %7.1f M firings/s\n", c_reg, c_fire);
  printf("  spread     %7.1f M registrations/s  %7.1f M firings/s\n", s_reg, s_fire);
  printf("job, one worker, %llu records over %llu keys:\n", (unsigned long long)job_records,
         (unsigned long long)job_keys);
  printf("  baseline %6.2f M records/s, a timer per record %6.2f M records/s (ratio %.2f); "
         "timers add %.0f ns per timer (registered and fired)\n",
         mb, mw, mr, added_ns);
  if (jsonl_path) {
    FILE *f = fopen(jsonl_path, "a");
    if (!f) {
      perror(jsonl_path);
      return 1;
    }
    fprintf(f,
            "{\"bench\": \"timers\", \"timers\": %llu, \"keys\": %llu, \"reps\": %d, "
            "\"clustered_reg_mps\": %.2f, \"clustered_fire_mps\": %.2f, \"spread_reg_mps\": %.2f, "
            "\"spread_fire_mps\": %.2f, \"job_records\": %llu, \"job_base_mrps\": %.3f, "
            "\"job_timers_mrps\": %.3f, \"job_ratio\": %.3f, \"job_added_ns\": %.1f}\n",
            (unsigned long long)n, (unsigned long long)k, reps, c_reg, c_fire, s_reg, s_fire,
            (unsigned long long)job_records, mb, mw, mr, added_ns);
    fclose(f);
  }
  return 0;
}
