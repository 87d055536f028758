/* bench_abs.c: the ABS paper's comparison on one machine, record latency, and
 * memory per key, through the public API (the workloads of scripts/bench-suite
 * that no other bench program covers).
 *
 * The job (the paper's evaluation topology: 6 operators, 3 hash shuffles,
 * keyed state in three of them):
 *   gen -> key_by -> count1 (keyed count) -> rekey -> key_by ->
 *   agg2 (keyed sum, rekeys) -> key_by -> count3 (keyed count) -> sink
 * Every operator emits one record per input, so the sink sees every record.
 *
 * Modes (one JSON object per run, appended to --jsonl FILE):
 *   default      throughput of the job with an unbounded generator, measured
 *                over the --seconds S from its first records (stopper.h)
 *                and then stopped, for checkpoints off and each of
 *                --modes (aligned, unaligned, sync) at each of --intervals.
 *                Runs go off, modes at interval 1, off, modes at interval 2,
 *                off ...; a run's ratio is its rate over the mean of the off
 *                runs around it (drift cancels). After each
 *                checkpointed run the store is listed: checkpoint sizes,
 *                durations and alignment times (medians). --skew-us U slows
 *                one path: rekey's subtask 0 sleeps U us per batch, so the
 *                barrier reaches agg2 late on that input (alignment under
 *                skew: compare align_ms and ckpt_ms with and without).
 *   --latency R  the same job fed by a source of R records/s that stamps
 *                each record with the time it was due (t0 + i / R, so a
 *                source that runs late counts: no coordinated omission;
 *                weir_record.ts, carried by every derived record), wakes
 *                every 50 us at most; a sink written here records
 *                now - ts per record in a histogram: p50, p99, p99.9, max
 *                over the run after --warmup S seconds (default: the first
 *                20%), without checkpoints and
 *                with aligned checkpoints every --latency-interval ms, and
 *                with aligned checkpoints every --align-interval ms (default
 *                100; 0: not run), or one run per interval of
 *                --latency-runs LIST (ms, 0: no checkpoints): for each
 *                checkpointed run also the
 *                alignment time per checkpoint (the longest any task waited
 *                between its first and last barrier), p50, p99 and max in
 *                microseconds; at a rate the job keeps up with, that is
 *                alignment without backpressure. Until the source has sent
 *                every key (keys / R seconds) each record adds a key to
 *                three tables that keep growing; the alignment over the
 *                checkpoints after that (steady state) is reported too.
 *                --trace 1 also prints how late the source emitted and the
 *                engine's breakdown per hop with the slowest records'
 *                paths (weir_run_opts.trace_latency; docs/latency.md).
 *   --buffer-timeout US  the engine's buffer timeout for every mode
 *                (0: flush at once, WEIR_FLUSH_AT_ONCE); default 1000.
 *   --memory K   the counter job (gen -> key_by -> count -> null) over K keys,
 *                2K records, with only the final checkpoint: peak RSS
 *                (getrusage) growth per key, and the final checkpoint's size
 *                and duration. Run it in a fresh process per K.
 *
 *   bench_abs [--workers W] [--keys K] [--seconds S] [--modes LIST]
 *             [--intervals LIST] [--skew-us U]
 *             [--latency R [--latency-interval MS] [--align-interval MS]
 *             [--latency-runs LIST] [--warmup S] [--trace 1]]
 *             [--buffer-timeout US] [--memory K] [--jsonl FILE]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/hist.h"
#include "base/log.h"
#include "snapshot/store.h"
#include "weir/weir.h"
#include "stopper.h"

static FILE *jsonl;
static uint32_t skew_us; /* --skew-us: see rekey_batch */
static char dir[4096];

static void rmrf(const char *p) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  if (system(cmd) != 0) fprintf(stderr, "bench_abs: could not remove %s\n", p);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the job ---------------------------------------------------------------- */

/* rekey: emits each record under another key; with --skew-us U, subtask 0
 * sleeps U microseconds per batch (one slow path into the next shuffle). */
typedef struct rekey_arg {
  uint64_t keys;
  uint32_t skew_us;
} rekey_arg;

static int rekey_batch(weir_ctx *ctx, const weir_batch *b) {
  const rekey_arg *a = weir_ctx_arg(ctx);
  if (a->skew_us && weir_ctx_subtask(ctx) == 0) {
    struct timespec ts = {0, (long)a->skew_us * 1000};
    nanosleep(&ts, NULL);
  }
  for (uint32_t i = 0; i < b->len; i++) {
    uint64_t v =
        b->lens[i] >= 8
            ? weir_payload_u64(&(weir_record){.payload = b->data + b->off[i], .len = b->lens[i]})
            : 0;
    int rc = weir_emit_u64_from(ctx, b, i, (b->keys[i] * 0x9e3779b97f4a7c15ULL + 1) % a->keys, v);
    if (rc < 0) return rc;
  }
  return 0;
}
static const weir_operator_vt rekey_vt = {
    .size = sizeof(weir_operator_vt), .name = "rekey", .process_batch = rekey_batch};

/* agg2: adds 1 per record to its key's state and emits (rotated key, sum). */
static int agg2_batch(weir_ctx *ctx, const weir_batch *b) {
  for (uint32_t i = 0; i < b->len; i++) {
    if (i + 8 < b->len) weir_state_prefetch_u64(ctx, b->keys[i + 8]);
    uint64_t v = 0;
    int rc = weir_state_add_u64(ctx, b->keys[i], 1, &v);
    if (rc < 0) return rc;
    rc = weir_emit_u64_from(ctx, b, i, b->keys[i] ^ 0x5bd1e995u, v);
    if (rc < 0) return rc;
  }
  return 0;
}
static const weir_operator_vt agg2_vt = {
    .size = sizeof(weir_operator_vt), .name = "agg2", .process_batch = agg2_batch};

/* Latency sink: a histogram of now - ts in ns (base/hist.h; per subtask,
 * merged at close). */
typedef struct lat_arg {
  pthread_mutex_t mu;
  weir_hist total;
  int64_t skip_before; /* records emitted before this (ns) are warm-up */
} lat_arg;

static int lat_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, weir_calloc(1, sizeof(weir_hist)));
  return 0;
}

static int lat_batch(weir_ctx *ctx, const weir_batch *b) {
  weir_hist *h = weir_ctx_user(ctx);
  const lat_arg *a = weir_ctx_arg(ctx);
  int64_t now = (int64_t)weir_clock_mono_ns();
  for (uint32_t i = 0; i < b->len; i++) {
    if (b->ts[i] < a->skip_before) continue;
    uint64_t d = now > b->ts[i] ? (uint64_t)(now - b->ts[i]) : 0;
    weir_hist_add(h, d, 1);
  }
  return 0;
}

static void lat_close(weir_ctx *ctx) {
  weir_hist *h = weir_ctx_user(ctx);
  lat_arg *a = weir_ctx_arg(ctx);
  if (!h) return;
  pthread_mutex_lock(&a->mu);
  weir_hist_merge(&a->total, h);
  pthread_mutex_unlock(&a->mu);
  weir_free(h);
  weir_ctx_set_user(ctx, NULL);
}
static const weir_operator_vt lat_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "lat",
                                        .open = lat_open,
                                        .process_batch = lat_batch,
                                        .close = lat_close};

/* Timed source: R records/s over all subtasks, keys i mod K, one split per
 * subtask. A record's ts is the monotonic time (ns) it was due, t0 + i / rate,
 * not the time it was emitted: a source that runs late (its worker busy or
 * asleep) adds to the latency its records report, as it does to a real
 * source's events (no coordinated omission). How late the source itself
 * emitted is kept apart (`late`). */
typedef struct timed_arg {
  uint64_t rate, keys;
  pthread_mutex_t mu;
  weir_hist late; /* emit time - due time, merged at close */
  int64_t skip_before;
} timed_arg;
typedef struct timed_state {
  uint64_t t0, emitted, next;
  weir_hist late;
} timed_state;

static int timed_open(weir_ctx *ctx) {
  timed_state *t = weir_calloc(1, sizeof *t);
  t->next = weir_ctx_subtask(ctx);
  weir_ctx_set_user(ctx, t);
  return 0;
}

static int timed_run(weir_ctx *ctx, uint32_t budget) {
  const timed_arg *a = weir_ctx_arg(ctx);
  timed_state *t = weir_ctx_user(ctx);
  if (weir_ctx_stopping(ctx)) return WEIR_SOURCE_DONE;
  uint64_t now = weir_clock_mono_ns(), p = weir_ctx_parallelism(ctx);
  if (!t->t0) t->t0 = now;
  double per_ns = (double)a->rate / (double)p / 1e9, ns_per = 1.0 / per_ns;
  uint64_t due = (uint64_t)((double)(now - t->t0) * per_ns) + 1;
  if (due <= t->emitted) {
    /* Until the next record is due, but not more often than every 50 us
     * (a wake-up per record would cost more than the records). */
    uint64_t next_ns = t->t0 + (uint64_t)((double)t->emitted * ns_per);
    uint64_t wait_us = next_ns > now ? (next_ns - now + 999) / 1000 : 1;
    weir_ctx_wake_after(ctx, wait_us < 50 ? 50 : wait_us);
    return WEIR_SOURCE_IDLE;
  }
  uint64_t n = due - t->emitted;
  if (n > budget) n = budget;
  uint32_t sub = weir_ctx_subtask(ctx);
  weir_record r = {0};
  for (uint64_t k = 0; k < n; k++) {
    r.key = t->next % a->keys;
    r.ts = (int64_t)(t->t0 + (uint64_t)((double)(t->emitted + k) * ns_per));
    if (r.ts >= a->skip_before) {
      uint64_t d = now > (uint64_t)r.ts ? now - (uint64_t)r.ts : 0;
      weir_hist_add(&t->late, d, 1);
    }
    r.id = weir_source_record_id(ctx, sub, t->emitted + k);
    int rc = weir_emit_record(ctx, &r);
    if (rc < 0) return rc;
    t->next += p;
  }
  t->emitted += n;
  return WEIR_SOURCE_MORE;
}

static int timed_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  timed_state *t = weir_ctx_user(ctx);
  return weir_snapshot_position(w, weir_ctx_subtask(ctx), t->emitted);
}

static void timed_close(weir_ctx *ctx) {
  timed_state *t = weir_ctx_user(ctx);
  timed_arg *a = weir_ctx_arg(ctx);
  if (!t) return;
  pthread_mutex_lock(&a->mu);
  weir_hist_merge(&a->late, &t->late);
  pthread_mutex_unlock(&a->mu);
  weir_free(t);
  weir_ctx_set_user(ctx, NULL);
}
static const weir_source_vt timed_vt = {.size = sizeof(weir_source_vt),
                                        .name = "timed",
                                        .open = timed_open,
                                        .run = timed_run,
                                        .snapshot = timed_snapshot,
                                        .close = timed_close};

/* Builds the 6-operator job on source stream s; sink: NULL = null sink. */
static int build_abs(weir_stream *s, rekey_arg *rk, int p, lat_arg *lat) {
  s = weir_count(weir_key_by(s), "count1", p);
  s = weir_process(s, "rekey", &rekey_vt, rk, p);
  s = weir_process(weir_key_by(s), "agg2", &agg2_vt, NULL, p);
  s = weir_count(weir_key_by(s), "count3", p);
  if (lat) return weir_sink(s, "sink", &lat_vt, lat, p);
  return weir_sink_to(s, "sink", "null", NULL, p);
}

/* ---- runs ------------------------------------------------------------------- */

typedef struct ckpt_stats {
  double n, bytes, ms, align_ms;
} ckpt_stats;

/* Medians over the retained, non-final checkpoints of the store in `dir`. */
static void store_stats(ckpt_stats *cs) {
  memset(cs, 0, sizeof *cs);
  weir_store *st = NULL;
  weir_store_opts so = {.read_only = 1};
  if (weir_store_open(&st, dir, &so) != 0) return;
  weir_store_ckpt *l = NULL;
  size_t n = 0;
  if (weir_store_list(st, &l, &n) == 0 && n) {
    double *b = weir_calloc(n, sizeof *b), *d = weir_calloc(n, sizeof *d);
    double *a = weir_calloc(n, sizeof *a);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      if (l[i].status < 0 || (l[i].final && n > 1)) continue;
      b[k] = (double)l[i].bytes;
      d[k] = (double)l[i].duration_ms;
      a[k++] = (double)l[i].alignment_ms;
    }
    cs->n = (double)k;
    cs->bytes = median(b, k);
    cs->ms = median(d, k);
    cs->align_ms = median(a, k);
    weir_free(b);
    weir_free(d);
    weir_free(a);
  }
  weir_free(l);
  weir_store_close(st);
}

static int trace;                  /* --trace 1: latency tracing in the engine */
static uint32_t buffer_timeout_us; /* --buffer-timeout US (0: at once); unset: the default */

/* The buffer timeout in force, in us (0: flush at once). */
static long long buffer_timeout_json(void) {
  if (buffer_timeout_us == WEIR_FLUSH_AT_ONCE) return 0;
  return buffer_timeout_us ? (long long)buffer_timeout_us : 1000;
}

typedef struct mode {
  const char *name; /* off, aligned, unaligned, sync */
  uint32_t interval_ms;
} mode;

/* One throughput run; returns records/s or -1 on failure. */
static double run_abs(const mode *m, int workers, uint64_t keys, double seconds, uint64_t *ckpts,
                      ckpt_stats *cs) {
  memset(cs, 0, sizeof *cs);
  *ckpts = 0;
  int unaligned = !strcmp(m->name, "unaligned");
  weir_job *job = NULL;
  weir_job_create(&job, "abs");
  weir_gen_opts g = {.records = 0, .keys = keys};
  rekey_arg rk = {keys, skew_us};
  int rc = build_abs(weir_gen(job, "gen", &g, workers), &rk, workers, NULL);
  weir_run_opts o = {.workers = workers, .buffer_timeout_us = buffer_timeout_us};
  if (strcmp(m->name, "off") != 0) {
    rmrf(dir);
    o.state_dir = dir;
    o.checkpoint_interval_ms = m->interval_ms;
    o.retain = 12;
    o.sync_checkpoints = !strcmp(m->name, "sync");
    o.unaligned = unaligned;
  }
  bench_stopper st;
  bench_stopper_start(&st, job, "gen", seconds);
  if (!rc) rc = weir_job_run(job, &o);
  double rate = bench_stopper_join(&st);
  if (rc) fprintf(stderr, "bench_abs: %s: %s\n", m->name, weir_job_error(job));
  *ckpts = weir_job_run_info(job)->checkpoints;
  weir_job_destroy(job);
  if (o.state_dir) {
    store_stats(cs);
    rmrf(dir);
  }
  return rc ? -1 : rate;
}

static void emit_abs(const mode *m, int workers, uint64_t keys, double seconds, double rate,
                     double ratio, uint64_t ckpts, const ckpt_stats *cs) {
  const char *status = rate < 0 ? "failed" : "ok";
  printf("  %-9s %5u ms  workers %d  %s", m->name, m->interval_ms, workers, status);
  if (rate >= 0)
    printf("  %8.2fM rec/s  ratio %.3f  %llu ckpts  %.1f MB  %.0f ms (alignment %.0f ms)",
           rate / 1e6, ratio, (unsigned long long)ckpts, cs->bytes / 1e6, cs->ms, cs->align_ms);
  printf("\n");
  fflush(stdout);
  if (!jsonl) return;
  fprintf(jsonl,
          "{\"bench\": \"abs\", \"mode\": \"%s\", \"interval_ms\": %u, \"workers\": %d, "
          "\"keys\": %llu, \"seconds\": %.1f, \"skew_us\": %u, \"buffer_timeout_us\": %lld, "
          "\"status\": \"%s\"",
          m->name, m->interval_ms, workers, (unsigned long long)keys, seconds, skew_us,
          buffer_timeout_json(), status);
  if (rate >= 0)
    fprintf(jsonl,
            ", \"rate\": %.0f, \"ratio\": %.4f, \"checkpoints\": %llu, \"ckpt_bytes\": %.0f, "
            "\"ckpt_ms\": %.1f, \"align_ms\": %.1f",
            rate, ratio, (unsigned long long)ckpts, cs->bytes, cs->ms, cs->align_ms);
  fprintf(jsonl, "}\n");
  fflush(jsonl);
}

static int bench_throughput(char *modes, char *intervals, int workers, uint64_t keys,
                            double seconds) {
  const char *mv[8];
  int nm = 0;
  for (char *t = strtok(modes, ","); t && nm < 8; t = strtok(NULL, ",")) mv[nm++] = t;
  uint32_t iv[16];
  int ni = 0;
  char *save = NULL;
  for (char *t = strtok_r(intervals, ",", &save); t && ni < 16; t = strtok_r(NULL, ",", &save))
    iv[ni++] = (uint32_t)strtoul(t, NULL, 10);
  mode off = {"off", 0};
  uint64_t c;
  ckpt_stats cs;
  double before = run_abs(&off, workers, keys, seconds, &c, &cs);
  emit_abs(&off, workers, keys, seconds, before, 1, 0, &cs);
  if (before <= 0) return 1;
  for (int i = 0; i < ni; i++) {
    double rate[8];
    uint64_t ck[8];
    ckpt_stats st[8];
    for (int j = 0; j < nm; j++) {
      mode m = {mv[j], iv[i]};
      rate[j] = run_abs(&m, workers, keys, seconds, &ck[j], &st[j]);
    }
    double after = run_abs(&off, workers, keys, seconds, &c, &cs);
    if (after <= 0) return 1;
    double base = (before + after) / 2;
    for (int j = 0; j < nm; j++) {
      mode m = {mv[j], iv[i]};
      emit_abs(&m, workers, keys, seconds, rate[j], rate[j] > 0 ? rate[j] / base : 0, ck[j],
               &st[j]);
    }
    emit_abs(&off, workers, keys, seconds, after, 1, 0, &cs);
    before = after;
  }
  return 0;
}

/* ---- latency ---------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of n sorted values. */
static uint32_t rank_pct(const uint32_t *v, uint32_t n, double q) {
  uint32_t i = (uint32_t)(q * n + 0.999999);
  return v[i == 0 ? 0 : i > n ? n - 1 : i - 1];
}

/* One run per checkpoint interval of `ivs` (n of them; 0: no checkpoints). */
static int bench_latency(uint64_t rate, const uint32_t *ivs, int n, double warmup, int workers,
                         uint64_t keys, double seconds) {
  for (int c = 0; c < n; c++) {
    uint32_t iv = ivs[c];
    lat_arg *la = weir_calloc(1, sizeof *la);
    pthread_mutex_init(&la->mu, NULL);
    la->skip_before = (int64_t)(weir_clock_mono_ns() + (uint64_t)(warmup * 1e9));
    timed_arg *ta = weir_calloc(1, sizeof *ta);
    ta->rate = rate;
    ta->keys = keys;
    ta->skip_before = la->skip_before;
    pthread_mutex_init(&ta->mu, NULL);
    rekey_arg rk = {keys, 0};
    weir_job *job = NULL;
    weir_job_create(&job, "latency");
    int rc = build_abs(weir_source(job, "timed", &timed_vt, ta, workers), &rk, workers, la);
    weir_run_opts o = {
        .workers = workers, .buffer_timeout_us = buffer_timeout_us, .trace_latency = trace};
    if (iv) {
      rmrf(dir);
      o.state_dir = dir;
      o.checkpoint_interval_ms = iv;
    }
    bench_stopper st;
    bench_stopper_start(&st, job, "timed", seconds);
    if (!rc) rc = weir_job_run(job, &o);
    double achieved = bench_stopper_join(&st);
    const weir_run_info *ri = weir_job_run_info(job);
    uint64_t ck = ri->checkpoints;
    /* Alignment per checkpoint of the measured window. */
    static weir_checkpoint_stat cs[BENCH_MAX_CHECKPOINTS];
    static uint32_t al[BENCH_MAX_CHECKPOINTS], sa[BENCH_MAX_CHECKPOINTS];
    uint32_t nal = bench_window_checkpoints(job, cs, BENCH_MAX_CHECKPOINTS);
    for (uint32_t i = 0; i < nal; i++)
      al[i] = cs[i].alignment_us > UINT32_MAX ? UINT32_MAX : (uint32_t)cs[i].alignment_us;
    /* In steady state: the checkpoints after every key exists (the source
     * reaches the last new key after keys / rate seconds; until then every
     * record adds a key to three tables, and the tables grow). */
    uint32_t warm = iv ? (uint32_t)((double)keys / (double)rate * 1000.0 / iv) + 1 : 0;
    uint32_t nst = nal > warm ? nal - warm : 0;
    memcpy(sa, al + (nal - nst), nst * sizeof *sa);
    qsort(sa, nst, sizeof *sa, cmp_u32);
    uint32_t s50 = nst ? rank_pct(sa, nst, 0.5) : 0, s99 = nst ? rank_pct(sa, nst, 0.99) : 0;
    qsort(al, nal, sizeof *al, cmp_u32);
    uint32_t a50 = nal ? rank_pct(al, nal, 0.5) : 0, a99 = nal ? rank_pct(al, nal, 0.99) : 0;
    uint32_t amax = nal ? al[nal - 1] : 0;
    if (rc) fprintf(stderr, "bench_abs: latency: %s\n", weir_job_error(job));
    if (!rc && trace) {
      printf("  source emitted late (us): p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
             (double)weir_hist_quantile(&ta->late, 0.5) / 1e3,
             (double)weir_hist_quantile(&ta->late, 0.99) / 1e3,
             (double)weir_hist_quantile(&ta->late, 0.999) / 1e3, (double)ta->late.max / 1e3);
      weir_job_write_latency(job, stdout);
    }
    weir_job_destroy(job);
    pthread_mutex_destroy(&ta->mu);
    weir_free(ta);
    if (iv) rmrf(dir);
    if (rc) return 1;
    double p50 = (double)weir_hist_quantile(&la->total, 0.5) / 1e3,
           p99 = (double)weir_hist_quantile(&la->total, 0.99) / 1e3;
    double p999 = (double)weir_hist_quantile(&la->total, 0.999) / 1e3,
           mx = (double)la->total.max / 1e3;
    printf("  latency  ckpt %5u ms  rate %.0f/s (achieved %.0f/s)  p50 %.0f us  p99 %.0f us  "
           "p99.9 %.0f us  max %.0f us  %llu ckpts",
           iv, (double)rate, achieved, p50, p99, p999, mx, (unsigned long long)ck);
    if (nal) printf("  alignment p50 %u us  p99 %u us  max %u us (%u ckpts)", a50, a99, amax, nal);
    if (nst) printf("; every key present: p50 %u us  p99 %u us (%u ckpts)", s50, s99, nst);
    printf("\n");
    fflush(stdout);
    if (jsonl) {
      fprintf(jsonl,
              "{\"bench\": \"latency\", \"interval_ms\": %u, \"workers\": %d, \"rate\": %llu, "
              "\"keys\": %llu, \"buffer_timeout_us\": %lld, \"seconds\": %.1f, \"warmup_s\": %.1f, "
              "\"achieved\": %.0f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
              "\"max_us\": %.1f, \"checkpoints\": %llu, \"align_n\": %u, \"align_p50_us\": %u, "
              "\"align_p99_us\": %u, \"align_max_us\": %u, \"align_steady_n\": %u, "
              "\"align_steady_p50_us\": %u, \"align_steady_p99_us\": %u}\n",
              iv, workers, (unsigned long long)rate, (unsigned long long)keys,
              buffer_timeout_json(), seconds, warmup, achieved, p50, p99, p999, mx,
              (unsigned long long)ck, nal, a50, a99, amax, nst, s50, s99);
      fflush(jsonl);
    }
    pthread_mutex_destroy(&la->mu);
    weir_free(la);
  }
  return 0;
}

/* ---- memory per key --------------------------------------------------------- */

/* Peak resident set size in bytes. */
static double maxrss_bytes(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
#ifdef __APPLE__
  return (double)ru.ru_maxrss; /* bytes on macOS */
#else
  return (double)ru.ru_maxrss * 1024.0; /* KiB on Linux and the BSDs */
#endif
}

static int bench_memory(uint64_t keys, int workers) {
  double before = maxrss_bytes();
  rmrf(dir);
  weir_job *job = NULL;
  weir_job_create(&job, "counter");
  weir_gen_opts g = {.records = 2 * keys, .keys = keys};
  weir_stream *s = weir_count(weir_key_by(weir_gen(job, "gen", &g, workers)), "count", workers);
  int rc = weir_sink_to(s, "sink", "null", NULL, workers);
  weir_run_opts o = {.workers = workers, .state_dir = dir};
  uint64_t t0 = weir_clock_mono_ns();
  if (!rc) rc = weir_job_run(job, &o);
  double secs = (double)(weir_clock_mono_ns() - t0) / 1e9;
  if (rc) fprintf(stderr, "bench_abs: memory: %s\n", weir_job_error(job));
  weir_job_destroy(job);
  double after = maxrss_bytes();
  ckpt_stats cs;
  store_stats(&cs);
  rmrf(dir);
  if (rc) return 1;
  double per_key = (after - before) / (double)keys;
  printf("  memory  %llu keys  peak RSS +%.0f MB  %.1f bytes/key  final checkpoint %.1f MB in "
         "%.0f ms  (run %.2f s)\n",
         (unsigned long long)keys, (after - before) / 1e6, per_key, cs.bytes / 1e6, cs.ms, secs);
  if (jsonl)
    fprintf(jsonl,
            "{\"bench\": \"memory\", \"keys\": %llu, \"workers\": %d, \"rss_bytes\": %.0f, "
            "\"bytes_per_key\": %.2f, \"ckpt_bytes\": %.0f, \"ckpt_ms\": %.1f, \"run_s\": %.3f}\n",
            (unsigned long long)keys, workers, after - before, per_key, cs.bytes, cs.ms, secs);
  return 0;
}

int main(int argc, char **argv) {
  int workers = 2;
  uint64_t keys = 1000000, lat_rate = 0, mem_keys = 0;
  uint32_t lat_iv = 1000, align_iv = 100;
  char lat_runs[256] = "";
  double warmup = -1;
  double seconds = 3;
  char modes[256] = "aligned,unaligned,sync", intervals[256] = "100,1000";
  const char *jpath = NULL;
  for (int i = 1; i < argc; i += 2) { /* every option takes a value */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) goto usage;
    if (!strcmp(a, "--workers"))
      workers = atoi(v);
    else if (!strcmp(a, "--keys"))
      keys = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--seconds"))
      seconds = atof(v);
    else if (!strcmp(a, "--modes"))
      snprintf(modes, sizeof modes, "%s", v);
    else if (!strcmp(a, "--intervals"))
      snprintf(intervals, sizeof intervals, "%s", v);
    else if (!strcmp(a, "--latency"))
      lat_rate = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--latency-interval"))
      lat_iv = (uint32_t)strtoul(v, NULL, 10);
    else if (!strcmp(a, "--align-interval"))
      align_iv = (uint32_t)strtoul(v, NULL, 10);
    else if (!strcmp(a, "--latency-runs"))
      snprintf(lat_runs, sizeof lat_runs, "%s", v);
    else if (!strcmp(a, "--warmup"))
      warmup = atof(v);
    else if (!strcmp(a, "--memory"))
      mem_keys = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--skew-us"))
      skew_us = (uint32_t)strtoul(v, NULL, 10);
    else if (!strcmp(a, "--jsonl"))
      jpath = v;
    else if (!strcmp(a, "--trace"))
      trace = atoi(v);
    else if (!strcmp(a, "--buffer-timeout")) {
      unsigned long us = strtoul(v, NULL, 10);
      buffer_timeout_us = us == 0 ? WEIR_FLUSH_AT_ONCE : (uint32_t)us;
    } else
      goto usage;
  }
  if (workers < 1 || workers > 256 || !keys || !(seconds > 0 && seconds <= 3600) ||
      skew_us > 100000)
    goto usage;
  if (!getenv("WEIR_LOG")) weir_log_set_level(WEIR_LOG_WARN);
  if (jpath && !(jsonl = fopen(jpath, "a"))) {
    perror("bench_abs: --jsonl");
    return 1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/bench-abs-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
  int rc;
  if (mem_keys)
    rc = bench_memory(mem_keys, workers);
  else if (lat_rate) {
    /* The runs: --latency-runs, or none, --latency-interval and
     * --align-interval (when nonzero and different). */
    uint32_t ivs[16];
    int n = 0;
    if (lat_runs[0]) {
      for (char *p = lat_runs; *p && n < 16;) {
        ivs[n++] = (uint32_t)strtoul(p, &p, 10);
        if (*p == ',')
          p++;
        else if (*p)
          goto usage;
      }
    } else {
      ivs[n++] = 0;
      ivs[n++] = lat_iv;
      if (align_iv && align_iv != lat_iv) ivs[n++] = align_iv;
    }
    if (warmup < 0) warmup = seconds * 0.2;
    if (warmup >= seconds) goto usage;
    rc = bench_latency(lat_rate, ivs, n, warmup, workers, keys, seconds);
  } else
    rc = bench_throughput(modes, intervals, workers, keys, seconds);
  rmrf(dir);
  if (jsonl) fclose(jsonl);
  return rc;
usage:
  fprintf(stderr, "usage: bench_abs [--workers W] [--keys K] [--seconds S] [--modes LIST] "
                  "[--intervals LIST] [--skew-us U] [--latency R [--latency-interval MS] "
                  "[--align-interval MS] [--latency-runs LIST] [--warmup S] [--trace 1]] "
                  "[--buffer-timeout US] "
                  "[--memory K] [--jsonl FILE]\n");
  return 2;
}
