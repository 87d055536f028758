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
 * With --checkpoints, instead: the engine's counter job on W = max-workers
 * workers (unbounded generator, stopped after --seconds S, default 12) with
 * checkpoints off, aligned (ABS) and synchronous (stop-the-world)
 * checkpoints at each interval of --intervals (ms; default 100,1000; a
 * run of S seconds has S / interval of them), into a store under $TMPDIR
 * (removed after each run). Each repetition runs none, M1, none, M2, none,
 * M3, none, M4, none (A B A B), and a mode's ratio is its rate over the mean
 * of the two runs without checkpoints around it, so drift cancels; then the
 * median over repetitions. The rate is what the generator emitted in the S
 * seconds from its first record (stopper.h: the store's opening and the
 * lease, which only checkpointed runs have, come before it; the drain and
 * the last checkpoint after the stop are not timed either). Also the
 * median checkpoint duration, trigger to durable.
 *
 * With --restore, instead: restore time per stored GB. Each repetition
 * runs the counter job (W workers, K keys, unbounded, checkpoints every
 * 200 ms) until a checkpoint holds every key, then restores the newest
 * checkpoint that is not the final one in a job that has nothing left to
 * generate, and reads from weir_job_run_info: `probe`, the page walk in a
 * child; `load`, the wall time from the start of the restore until every
 * subtask's chunks were read, checked and built into its table (subtasks
 * on parallel threads, each building while it reads: the probe included);
 * `build`, of that, the slowest subtask's time filling its table (plus
 * installing the rest at open); `total`, the restore's wall time (load
 * plus the slowest installation at open). s/GB is total per GB stored and
 * per GB of state (16 bytes a key). Beside it, the naive rebuild of the
 * same number of keys per subtask: a fresh table filled in key order.
 *
 *   bench_counter [--records N] [--keys K] [--reps R] [--max-workers W] [--json FILE]
 *                 [--checkpoints [--seconds S] [--intervals MS,...] | --restore]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/platform.h"
#include "snapshot/store.h"
#include "weir/weir.h"
#include "stopper.h"

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
#if WEIR_HAVE_MADV_HUGEPAGE
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

/* A checkpoint configuration of the engine's run. */
typedef struct ckpt_mode {
  char name[32];
  uint32_t interval_ms; /* 0: checkpoints off */
  int sync;
} ckpt_mode;

static const ckpt_mode no_checkpoints = {"none", 0, 0};

/* What a checkpointed run reports besides its rate. */
typedef struct ckpt_run {
  uint64_t checkpoints;
  double ms_p50; /* checkpoint duration (trigger to durable) in the measured window */
} ckpt_run;

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The store of a run: <dir>/store/{data,lock}.mdb. */
static void remove_store(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s/store/data.mdb", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/store/lock.mdb", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/store", dir);
  rmdir(p);
}

/* records == 0: unbounded, stopped `seconds` after the generator's first
 * records; the rate is then what it emitted in that window (stopper.h). */
static double run_engine_ckpt(uint64_t records, uint64_t keys, int workers, const ckpt_mode *m,
                              const char *dir, ckpt_run *cr, double seconds) {
  weir_job *job;
  weir_job_create(&job, "counter");
  weir_gen_opts g = {.records = records, .keys = keys};
  weir_stream *s = weir_gen(job, "gen", &g, workers);
  s = weir_count(weir_key_by(s), "count", workers);
  int rc = weir_sink_to(s, "sink", "null", NULL, workers);
  weir_run_opts o = {.workers = workers};
  if (m->interval_ms) {
    remove_store(dir);
    o.state_dir = dir;
    o.checkpoint_interval_ms = m->interval_ms;
    o.sync_checkpoints = m->sync;
  }
  bench_stopper st;
  if (!records) bench_stopper_start(&st, job, "gen", seconds);
  uint64_t t0 = weir_clock_mono_ns();
  if (!rc) rc = weir_job_run(job, &o);
  double sec = (double)(weir_clock_mono_ns() - t0) / 1e9, rate = 0;
  if (!records) rate = bench_stopper_join(&st);
  if (cr) {
    const weir_run_info *ri = weir_job_run_info(job);
    static weir_checkpoint_stat cs[BENCH_MAX_CHECKPOINTS];
    static uint32_t d[BENCH_MAX_CHECKPOINTS];
    uint32_t n = bench_window_checkpoints(job, cs, BENCH_MAX_CHECKPOINTS);
    for (uint32_t i = 0; i < n; i++) d[i] = (uint32_t)(cs[i].duration_us / 1000);
    qsort(d, n, sizeof *d, cmp_u32);
    cr->checkpoints = ri->checkpoints;
    cr->ms_p50 = n ? (n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2.0) : 0;
  }
  if (m->interval_ms) remove_store(dir);
  if (rc) {
    fprintf(stderr, "bench_counter: job failed: %s\n", weir_job_error(job));
    exit(1);
  }
  uint64_t in = 0;
  weir_job_operator_counts(job, "sink", &in, NULL);
  weir_job_destroy(job);
  if (!records) return rate;
  if (in != records) {
    fprintf(stderr, "bench_counter: sink saw %llu records, expected %llu\n", (unsigned long long)in,
            (unsigned long long)records);
    exit(1);
  }
  return (double)records / sec;
}

static double run_engine(uint64_t records, uint64_t keys, int workers) {
  return run_engine_ckpt(records, keys, workers, &no_checkpoints, NULL, NULL, 0);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* --checkpoints: the engine without checkpoints, with aligned and with
 * synchronous ones at each interval of `intervals` (ms, comma-separated),
 * A B A B within each repetition. */
static int bench_checkpoints(uint64_t keys, int reps, int workers, double seconds,
                             const char *intervals, const char *json) {
  ckpt_mode modes[16];
  int NM = 0;
  for (const char *p = intervals; *p && NM + 2 <= 16;) {
    char *end;
    unsigned long iv = strtoul(p, &end, 10);
    if (end == p || iv == 0 || iv > 3600000) {
      fprintf(stderr, "bench_counter: --intervals: not a list of milliseconds: %s\n", intervals);
      return 2;
    }
    char when[16];
    if (iv % 1000 == 0)
      snprintf(when, sizeof when, "%lus", iv / 1000);
    else
      snprintf(when, sizeof when, "%lums", iv);
    for (int sync = 0; sync < 2; sync++) {
      snprintf(modes[NM].name, sizeof modes[NM].name, "%s-%s", sync ? "sync" : "aligned", when);
      modes[NM].interval_ms = (uint32_t)iv;
      modes[NM++].sync = sync;
    }
    p = *end == ',' ? end + 1 : end;
  }
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/bench-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("bench_counter: mkdtemp");
    return 1;
  }
  double *none = weir_calloc((size_t)((NM + 1) * reps), sizeof(double));
  double *rate = weir_calloc((size_t)(NM * reps), sizeof(double));
  double *ratio = weir_calloc((size_t)(NM * reps), sizeof(double));
  double *ckpts = weir_calloc((size_t)(NM * reps), sizeof(double));
  double *dur = weir_calloc((size_t)(NM * reps), sizeof(double));
  printf("counter with checkpoints: %.0f s runs, %llu keys, %d workers, %d repetitions "
         "(none, mode, none, mode, ...), store under %s\n",
         seconds, (unsigned long long)keys, workers, reps, dir);
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k <= NM; k++) {
      double *n = &none[r * (NM + 1) + k];
      *n = run_engine_ckpt(0, keys, workers, &no_checkpoints, dir, NULL, seconds);
      printf("  rep %d  %-14s %7.2fM/s\n", r + 1, "none", *n / 1e6);
      fflush(stdout);
      if (k == NM) break;
      ckpt_run cr = {0};
      rate[k * reps + r] = run_engine_ckpt(0, keys, workers, &modes[k], dir, &cr, seconds);
      ckpts[k * reps + r] = (double)cr.checkpoints;
      dur[k * reps + r] = cr.ms_p50;
      printf("  rep %d  %-14s %7.2fM/s  %3llu checkpoints, p50 %.0f ms\n", r + 1, modes[k].name,
             rate[k * reps + r] / 1e6, (unsigned long long)cr.checkpoints, cr.ms_p50);
      fflush(stdout);
    }
    for (int k = 0; k < NM; k++)
      ratio[k * reps + r] =
          rate[k * reps + r] / ((none[r * (NM + 1) + k] + none[r * (NM + 1) + k + 1]) / 2);
  }
  rmdir(dir);
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf)
    fprintf(jf, "{\"seconds\": %.1f, \"keys\": %llu, \"workers\": %d, \"reps\": %d, \"modes\": [",
            seconds, (unsigned long long)keys, workers, reps);
  double mn = median(none, (NM + 1) * reps);
  printf("%-14s %14s %12s %12s %14s\n", "mode", "weir rec/s", "checkpoints", "ckpt p50 ms",
         "ratio to none");
  printf("%-14s %13.2fM %12s %12s %14s\n", "none", mn / 1e6, "-", "-", "1");
  for (int k = 0; k < NM; k++) {
    double mr = median(ratio + k * reps, reps), me = median(rate + k * reps, reps);
    double mc = median(ckpts + k * reps, reps), md = median(dur + k * reps, reps);
    printf("%-14s %13.2fM %12.0f %12.0f %14.3f\n", modes[k].name, me / 1e6, mc, md, mr);
    if (jf)
      fprintf(jf,
              "%s{\"mode\": \"%s\", \"weir_median\": %.0f, \"checkpoints_median\": %.0f, "
              "\"ckpt_ms_median\": %.1f, \"ratio_median\": %.4f}",
              k ? ", " : "", modes[k].name, me, mc, md, mr);
  }
  if (jf) {
    fprintf(jf, "], \"none_median\": %.0f}\n", mn);
    fclose(jf);
  }
  weir_free(none);
  weir_free(rate);
  weir_free(ratio);
  weir_free(ckpts);
  weir_free(dur);
  return 0;
}

/* The naive rebuild: n keys in key order into a fresh table (no huge
 * pages), timed with its allocation. */
static double naive_build_ms(uint64_t n) {
  uint64_t t0 = weir_clock_mono_ns();
  uint64_t cap = 1024;
  while (cap < n * 2) cap *= 2;
  uint64_t *slots = weir_malloc(cap * 16);
  for (uint64_t i = 0; i < cap; i++) slots[2 * i] = EMPTY;
  unsigned lg = 0;
  while ((1ULL << lg) < cap) lg++;
  for (uint64_t k = 0; k < n; k++) {
    uint64_t j = (k * 0x9e3779b97f4a7c15ULL) >> (64 - lg);
    while (slots[2 * j] != EMPTY) j = (j + 1) & (cap - 1);
    slots[2 * j] = k;
    slots[2 * j + 1] = k + 1;
  }
  double ms = (double)(weir_clock_mono_ns() - t0) / 1e6;
  volatile uint64_t sink = slots[2 * (n % cap) + 1];
  (void)sink;
  weir_free(slots);
  return ms;
}

/* The newest retained checkpoint under dir that is not the final one. */
static uint64_t restorable_checkpoint(const char *dir) {
  weir_store *s = NULL;
  weir_store_opts so = {.read_only = 1};
  if (weir_store_open(&s, dir, &so) != 0) return 0;
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  uint64_t id = 0;
  if (weir_store_list(s, &list, &n) == 0)
    for (size_t i = 0; i < n; i++)
      if (list[i].status == 0 && !list[i].final) id = list[i].id;
  weir_free(list);
  weir_store_close(s);
  return id;
}

static void remove_state(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_counter: could not empty %s\n", dir);
}

/* Stops the job once a checkpoint completed after every key was counted. */
typedef struct until_full {
  weir_job *job;
  uint64_t keys, first;
} until_full;

static void stop_when_full(void *user, const weir_progress *p) {
  until_full *u = user;
  if (!u->first && p->sink_records >= u->keys) u->first = p->last_checkpoint + 1;
  if (u->first && p->last_checkpoint >= u->first) weir_job_stop(u->job);
}

/* Runs the counter job until a checkpoint holds all of its keys; returns
 * that checkpoint's id (the final one, taken at the stop, comes after). */
static uint64_t checkpoint_full_state(uint64_t keys, int workers, const char *dir) {
  weir_job *job;
  weir_job_create(&job, "counter");
  weir_gen_opts g = {.records = 0, .keys = keys};
  weir_stream *s = weir_gen(job, "gen", &g, workers);
  s = weir_count(weir_key_by(s), "count", workers);
  int rc = weir_sink_to(s, "sink", "null", NULL, workers);
  until_full u = {job, keys, 0};
  weir_run_opts o = {.workers = workers,
                     .state_dir = dir,
                     .checkpoint_interval_ms = 200,
                     .progress_ms = 20,
                     .progress = stop_when_full,
                     .progress_user = &u};
  if (!rc) rc = weir_job_run(job, &o);
  if (rc) fprintf(stderr, "bench_counter: job failed: %s\n", weir_job_error(job));
  weir_job_destroy(job);
  return rc ? 0 : restorable_checkpoint(dir);
}

/* --restore: see the top of the file. */
static int bench_restore(uint64_t keys, int reps, int workers, const char *json) {
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/bench-restore-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("bench_counter: mkdtemp");
    return 1;
  }
  double *mb = weir_calloc((size_t)reps, sizeof(double)), *rd = weir_calloc((size_t)reps, 8);
  double *bd = weir_calloc((size_t)reps, 8), *sgb = weir_calloc((size_t)reps, 8);
  double *nv = weir_calloc((size_t)reps, 8), *rt = weir_calloc((size_t)reps, 8);
  double *sgs = weir_calloc((size_t)reps, 8), *pr = weir_calloc((size_t)reps, 8);
  double *tt = weir_calloc((size_t)reps, 8);
  printf("restore: %llu keys, %d workers, %d repetitions, store under %s\n",
         (unsigned long long)keys, workers, reps, dir);
  int rc = 0;
  for (int r = 0; r < reps && !rc; r++) {
    remove_state(dir);
    uint64_t id = checkpoint_full_state(keys, workers, dir);
    if (!id) {
      fprintf(stderr, "bench_counter: no checkpoint to restore under %s\n", dir);
      rc = 1;
      break;
    }
    weir_job *job;
    weir_job_create(&job, "counter");
    weir_gen_opts g = {.records = 1, .keys = keys};
    weir_stream *s = weir_gen(job, "gen", &g, workers);
    s = weir_count(weir_key_by(s), "count", workers);
    rc = weir_sink_to(s, "sink", "null", NULL, workers);
    weir_run_opts o = {.workers = workers,
                       .state_dir = dir,
                       .checkpoint_interval_ms = 60000,
                       .restore = WEIR_RESTORE_ID,
                       .restore_id = id};
    if (!rc) rc = weir_job_run(job, &o);
    if (rc) {
      fprintf(stderr, "bench_counter: restore failed: %s\n", weir_job_error(job));
    } else {
      const weir_run_info *ri = weir_job_run_info(job);
      mb[r] = (double)ri->restored_bytes / 1e6;
      rd[r] = ri->restore_read_ms;
      bd[r] = ri->restore_build_ms;
      pr[r] = ri->restore_probe_ms;
      tt[r] = ri->restore_ms;
      sgb[r] = tt[r] / 1e3 / (mb[r] / 1e3);
      sgs[r] = tt[r] / 1e3 / ((double)keys * 16 / 1e9);
      nv[r] = naive_build_ms(keys / (uint64_t)workers);
      rt[r] = bd[r] / nv[r];
      printf("  rep %d  checkpoint %llu: %.1f MB  probe %.0f ms  load %.0f ms (build %.0f ms of "
             "it)  total %.0f ms  %.2f s/GB stored  %.2f s/GB of state  (naive build %.0f ms)\n",
             r + 1, (unsigned long long)id, mb[r], pr[r], rd[r], bd[r], tt[r], sgb[r], sgs[r],
             nv[r]);
      fflush(stdout);
    }
    weir_job_destroy(job);
  }
  remove_state(dir);
  rmdir(dir);
  if (!rc) {
    double m_mb = median(mb, reps), m_rd = median(rd, reps), m_bd = median(bd, reps);
    double m_s = median(sgb, reps), m_nv = median(nv, reps), m_rt = median(rt, reps);
    double m_ss = median(sgs, reps), m_pr = median(pr, reps), m_tt = median(tt, reps);
    printf("%-10s %10s %9s %9s %9s %9s %10s %10s %10s %12s\n", "keys", "stored MB", "probe ms",
           "load ms", "build ms", "total ms", "s/GB st.", "s/GB state", "naive ms", "build/naive");
    printf("%-10llu %10.1f %9.0f %9.0f %9.0f %9.0f %10.2f %10.2f %10.0f %12.2f\n",
           (unsigned long long)keys, m_mb, m_pr, m_rd, m_bd, m_tt, m_s, m_ss, m_nv, m_rt);
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (jf) {
      fprintf(jf,
              "{\"keys\": %llu, \"workers\": %d, \"reps\": %d, \"stored_mb_median\": %.1f, "
              "\"read_ms_median\": %.1f, \"build_ms_median\": %.1f, \"probe_ms_median\": %.1f, "
              "\"total_ms_median\": %.1f, \"s_per_stored_gb_median\": "
              "%.3f, \"s_per_state_gb_median\": %.3f, \"naive_build_ms_median\": %.1f, "
              "\"build_over_naive_median\": %.3f}\n",
              (unsigned long long)keys, workers, reps, m_mb, m_rd, m_bd, m_pr, m_tt, m_s, m_ss,
              m_nv, m_rt);
      fclose(jf);
    }
  }
  weir_free(mb);
  weir_free(rd);
  weir_free(bd);
  weir_free(sgb);
  weir_free(nv);
  weir_free(rt);
  weir_free(sgs);
  weir_free(pr);
  weir_free(tt);
  return rc;
}

int main(int argc, char **argv) {
  uint64_t records = 50000000, keys = 1000000;
  int reps = 5, maxw = 2, checkpoints = 0, restore = 0;
  double seconds = 12;
  const char *json = NULL, *intervals = "100,1000";
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
    else if (!strcmp(argv[i], "--checkpoints"))
      checkpoints = 1;
    else if (!strcmp(argv[i], "--restore"))
      restore = 1;
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--intervals") && i + 1 < argc)
      intervals = argv[++i];
    else {
      fprintf(stderr, "usage: bench_counter [--records N] [--keys K] [--reps R] [--max-workers W] "
                      "[--json FILE] [--checkpoints [--seconds S] [--intervals MS,...] | "
                      "--restore]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > 100 || maxw < 1 || maxw > 64 || !records || !keys) {
    fprintf(stderr, "bench_counter: bad arguments\n");
    return 2;
  }
  if (!getenv("WEIR_LOG")) weir_log_set_level(WEIR_LOG_WARN);
  if (restore) return bench_restore(keys, reps, maxw, json);
  if (checkpoints) {
    if (!(seconds >= 1 && seconds <= 3600)) {
      fprintf(stderr, "bench_counter: --seconds: 1 to 3600\n");
      return 2;
    }
    return bench_checkpoints(keys, reps, maxw, seconds, intervals, json);
  }
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
