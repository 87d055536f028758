/* bench_counter.c: counter throughput, engine against a hand-written loop.
 *
 * In one invocation, interleaved per repetition so machine drift cancels:
 *   hand-1   one thread: generate a batch of 1024 records (key = i mod K),
 *            increment each key's count in an open-addressing table with
 *            software prefetch, emit (key, count) into an output buffer;
 *   hand-2   the same on two threads that each own half of the records and
 *            keys (shared nothing): the physical limit on two cores;
 *   weir-W   the engine's counter job (generator -> hash by key -> keyed
 *            count -> null sink) with W workers and parallelism W.
 * Prints records/s (median over repetitions) and the engine/hand ratios.
 *
 *   bench_counter [--records N] [--keys K] [--reps R] [--max-workers W] [--json FILE]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "weir/alloc.h"
#include "weir/clock.h"
#include "weir/log.h"
#include "weir/weir.h"

typedef struct table {
  uint64_t *slots;
  uint64_t cap;
  unsigned shift;
} table;

#define EMPTY UINT64_MAX

static void table_init(table *t, uint64_t keys) {
  uint64_t cap = 1024;
  while (cap < keys * 2) cap *= 2;
  t->cap = cap;
  unsigned lg = 0;
  while ((1ULL << lg) < cap) lg++;
  t->shift = 64 - lg;
  size_t bytes = cap * 16;
  t->slots = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
#ifdef MADV_HUGEPAGE
  madvise(t->slots, bytes, MADV_HUGEPAGE);
#endif
  for (uint64_t i = 0; i < cap; i++) t->slots[2 * i] = EMPTY;
}

static void table_free(table *t) {
  munmap(t->slots, t->cap * 16);
}

static inline uint64_t *table_ref(table *t, uint64_t key) {
  uint64_t mask = t->cap - 1;
  for (uint64_t j = (key * 0x9e3779b97f4a7c15ULL) >> t->shift;; j = (j + 1) & mask) {
    if (t->slots[2 * j] == key) return &t->slots[2 * j + 1];
    if (t->slots[2 * j] == EMPTY) {
      t->slots[2 * j] = key;
      t->slots[2 * j + 1] = 0;
      return &t->slots[2 * j + 1];
    }
  }
}

typedef struct hand_arg {
  uint64_t first, step, records, keys;
  uint64_t checksum;
} hand_arg;

/* The hand-written counter: the work of the engine's job with nothing else. */
static void *hand_loop(void *p) {
  hand_arg *a = p;
  table t;
  table_init(&t, a->keys / a->step + 1);
  enum { B = 1024, AHEAD = 12 };
  static __thread uint64_t keys[B], out_k[B], out_v[B];
  uint64_t sum = 0;
  for (uint64_t i = a->first; i < a->records;) {
    uint32_t n = 0;
    for (; n < B && i < a->records; n++, i += a->step) keys[n] = i % a->keys;
    for (uint32_t k = 0; k < n; k++) {
      if (k + AHEAD < n)
        __builtin_prefetch(&t.slots[2 * ((keys[k + AHEAD] * 0x9e3779b97f4a7c15ULL) >> t.shift)], 1,
                           3);
      uint64_t *v = table_ref(&t, keys[k]);
      out_k[k] = keys[k];
      out_v[k] = ++*v;
    }
    sum += out_v[n - 1] + out_k[0];
  }
  a->checksum = sum;
  table_free(&t);
  return NULL;
}

static double run_hand(uint64_t records, uint64_t keys, int threads) {
  pthread_t th[64];
  hand_arg args[64];
  uint64_t t0 = weir_clock_mono_ns();
  for (int i = 0; i < threads; i++) {
    args[i] = (hand_arg){(uint64_t)i, (uint64_t)threads, records, keys, 0};
    pthread_create(&th[i], NULL, hand_loop, &args[i]);
  }
  for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
  double s = (double)(weir_clock_mono_ns() - t0) / 1e9;
  return (double)records / s;
}

static double run_engine(uint64_t records, uint64_t keys, int workers) {
  weir_job *job;
  weir_job_create(&job, "counter");
  weir_gen_opts g = {.records = records, .keys = keys};
  weir_stream *s = weir_gen(job, "gen", &g, workers);
  s = weir_count(weir_key_by(s), "count", workers);
  int rc = weir_sink_to(s, "sink", "null", NULL, workers);
  uint64_t t0 = weir_clock_mono_ns();
  if (!rc) rc = weir_job_run(job, &(weir_run_opts){.workers = workers});
  double sec = (double)(weir_clock_mono_ns() - t0) / 1e9;
  if (rc) {
    fprintf(stderr, "bench_counter: job failed: %s\n", weir_job_error(job));
    exit(1);
  }
  uint64_t in = 0;
  weir_job_operator_counts(job, "sink", &in, NULL);
  weir_job_destroy(job);
  if (in != records) {
    fprintf(stderr, "bench_counter: sink saw %llu records, expected %llu\n", (unsigned long long)in,
            (unsigned long long)records);
    exit(1);
  }
  return (double)records / sec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  uint64_t records = 50000000, keys = 1000000;
  int reps = 5, maxw = 2;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--records") && i + 1 < argc)
      records = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--keys") && i + 1 < argc)
      keys = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max-workers") && i + 1 < argc)
      maxw = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc)
      json = argv[++i];
    else {
      fprintf(stderr, "usage: bench_counter [--records N] [--keys K] [--reps R] [--max-workers W] "
                      "[--json FILE]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > 100 || maxw < 1 || maxw > 64 || !records || !keys) {
    fprintf(stderr, "bench_counter: bad arguments\n");
    return 2;
  }
  weir_log_set_level(WEIR_LOG_WARN);
  double *hand = weir_calloc((size_t)(maxw * reps), sizeof(double));
  double *eng = weir_calloc((size_t)(maxw * reps), sizeof(double));
  printf("counter: %llu records, %llu keys, %d repetitions (interleaved)\n",
         (unsigned long long)records, (unsigned long long)keys, reps);
  for (int r = 0; r < reps; r++) {
    for (int w = 1; w <= maxw; w++) {
      hand[(w - 1) * reps + r] = run_hand(records, keys, w);
      eng[(w - 1) * reps + r] = run_engine(records, keys, w);
      printf("  rep %d  workers %d  hand %.2fM/s  weir %.2fM/s\n", r + 1, w,
             hand[(w - 1) * reps + r] / 1e6, eng[(w - 1) * reps + r] / 1e6);
      fflush(stdout);
    }
  }
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf)
    fprintf(jf, "{\"records\": %llu, \"keys\": %llu, \"reps\": %d, \"results\": [",
            (unsigned long long)records, (unsigned long long)keys, reps);
  printf("%-8s %14s %14s %8s\n", "workers", "hand rec/s", "weir rec/s", "ratio");
  for (int w = 1; w <= maxw; w++) {
    double *h = hand + (w - 1) * reps, *e = eng + (w - 1) * reps;
    /* Ratios pair by pair (same repetition), then the median. */
    double *ratio = weir_calloc((size_t)reps, sizeof(double));
    for (int r = 0; r < reps; r++) ratio[r] = e[r] / h[r];
    double mr = median(ratio, reps), mh = median(h, reps), me = median(e, reps);
    printf("%-8d %13.2fM %13.2fM %8.2f\n", w, mh / 1e6, me / 1e6, mr);
    if (jf)
      fprintf(jf,
              "%s{\"workers\": %d, \"hand_median\": %.0f, \"weir_median\": %.0f, "
              "\"ratio_median\": %.4f}",
              w > 1 ? ", " : "", w, mh, me, mr);
    weir_free(ratio);
  }
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  weir_free(hand);
  weir_free(eng);
  return 0;
}
