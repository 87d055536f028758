/* bench_windows.c: what event-time windows cost, as a ratio to the counter
 * job in the same run (docs/event-time.md §13).
 *
 * Three jobs over the same generated records (N records, K keys), each
 * gen -> key_by -> keyed operator -> null sink, on the same workers and
 * parallelism:
 *   counter   weir_count (one u64 per key): the baseline;
 *   tumbling  weir_window_aggregate count, 1 s tumbling windows in event
 *             time: weir_gen_timed with 10 * K records per event-time
 *             second (about 10 records per key and window) and 100 ms of
 *             disorder;
 *   sliding   the same with 10 s windows sliding by 1 s (each record in
 *             10 windows).
 * Run A B C in turn --reps times; reported: the median records/s of each
 * and the median of the per-repetition ratios to the counter.
 *
 *   bench_windows [--records N] [--keys K] [--workers W] [--reps R]
 *                 [--jsonl FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
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

enum { COUNTER, TUMBLING, SLIDING, NJOBS };
static const char *const job_names[NJOBS] = {"counter", "tumbling", "sliding"};

/* One run: records/s (millions), or a negative number on failure. */
static double run(int kind, uint64_t records, uint64_t keys, int workers) {
  weir_job *job = NULL;
  weir_job_create(&job, job_names[kind]);
  weir_gen_opts g = {.records = records, .keys = keys};
  weir_stream *s;
  if (kind == COUNTER) {
    s = weir_count(weir_key_by(weir_gen(job, "gen", &g, 0)), "count", 0);
  } else {
    weir_gen_time t = {.size = sizeof t, .event_rate = 10 * keys, .disorder_ms = 100};
    weir_window_spec w = {.size = sizeof w,
                          .kind = kind == SLIDING ? WEIR_WINDOW_SLIDING : WEIR_WINDOW_TUMBLING,
                          .time = WEIR_EVENT_TIME,
                          .length = kind == SLIDING ? 10000 : 1000,
                          .slide = 1000};
    s = weir_window_aggregate(weir_key_by(weir_gen_timed(job, "gen", &g, &t, 0)), "window", &w,
                              &weir_agg_count, NULL, 0);
  }
  weir_sink_to(s, "sink", "null", NULL, 0);
  weir_run_opts o = {.workers = workers};
  uint64_t t0 = weir_clock_mono_ns();
  int rc = weir_job_run(job, &o);
  uint64_t t1 = weir_clock_mono_ns();
  if (rc) fprintf(stderr, "bench_windows: %s: %s\n", job_names[kind], weir_job_error(job));
  weir_job_destroy(job);
  return rc ? -1 : (double)records / ((double)(t1 - t0) / 1e9) / 1e6;
}

int main(int argc, char **argv) {
  uint64_t records = 20000000, keys = 1000000;
  int reps = 3, workers = 0;
  const char *jsonl_path = NULL;
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_windows: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--records"))
      records = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--keys"))
      keys = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--workers"))
      workers = atoi(v);
    else if (!strcmp(a, "--reps"))
      reps = atoi(v);
    else if (!strcmp(a, "--jsonl"))
      jsonl_path = v;
    else {
      fprintf(stderr, "bench_windows: unknown option %s\n", a);
      return 2;
    }
  }
  if (reps < 1 || reps > 64 || records == 0 || keys == 0 || workers < 0) {
    fprintf(stderr, "bench_windows: bad arguments\n");
    return 2;
  }
  weir_log_set_level(WEIR_LOG_WARN);
  double rate[NJOBS][64], ratio[NJOBS][64];
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < NJOBS; k++) {
      rate[k][r] = run(k, records, keys, workers);
      if (rate[k][r] < 0) return 1;
    }
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < NJOBS; k++) ratio[k][r] = rate[k][r] / rate[COUNTER][r];
  printf("windows, %llu records over %llu keys, %d workers (0: one per core), median of %d:\n",
         (unsigned long long)records, (unsigned long long)keys, workers, reps);
  double m[NJOBS], mr[NJOBS];
  for (int k = 0; k < NJOBS; k++) {
    m[k] = median(rate[k], reps);
    mr[k] = median(ratio[k], reps);
    printf("  %-9s %7.2f M records/s  ratio to the counter %.2f\n", job_names[k], m[k], mr[k]);
  }
  if (jsonl_path) {
    FILE *f = fopen(jsonl_path, "a");
    if (!f) {
      perror(jsonl_path);
      return 1;
    }
    fprintf(f,
            "{\"bench\": \"windows\", \"records\": %llu, \"keys\": %llu, \"workers\": %d, "
            "\"reps\": %d, \"counter_mrps\": %.3f, \"tumbling_mrps\": %.3f, "
            "\"sliding_mrps\": %.3f, \"tumbling_ratio\": %.3f, \"sliding_ratio\": %.3f}\n",
            (unsigned long long)records, (unsigned long long)keys, workers, reps, m[COUNTER],
            m[TUMBLING], m[SLIDING], mr[TUMBLING], mr[SLIDING]);
    fclose(f);
  }
  return 0;
}
