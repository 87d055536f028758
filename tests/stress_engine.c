/* stress_engine.c: whole jobs through the public API under many thread
 * interleavings, for ThreadSanitizer (and for hangs: a watchdog fails the
 * program if a job never ends).
 *
 * A counter job built from tiny vtables: a source emitting records 0..N-1
 * (split over its subtasks) with key i % K, weir_key_by, a keyed operator
 * that counts per key with weir_state_add_u64 and emits (key, count) with
 * weir_emit_u64, and a sink that collects the pairs into its own subtask's
 * slot (weir_ctx_subtask). Run for parallelism P in {1, 2, 4} x workers W in
 * {1, 2, 3}, with 16-record batches and channels of 1-2 batches so
 * backpressure, pending overflow and wake-ups happen all the time. Checks
 * that every key's final count is exact and that every (key, count) pair
 * 1..count appears exactly once.
 *
 * Also: a job with an unbounded source stopped with weir_job_stop() from
 * another thread (must return 0 and drain: every emitted record counted,
 * no hang), two jobs running at once in two threads of one process (no
 * global state between jobs), and checkpoints of every mode while it runs,
 * also with one slow count subtask that takes its batches in slices.
 *
 * A plain main() program (Criterion cannot start under ThreadSanitizer):
 * prints "N passed, N failed" and exits non-zero on failure.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "weir/job.h"

#if defined(__SANITIZE_THREAD__)
#define SE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SE_TSAN 1
#endif
#endif

#ifdef SE_TSAN
/* ThreadSanitizer false positive, suppressed narrowly: libuv (Debian's build
 * is not instrumented) closes descriptors with syscall(SYS_close), which
 * TSan never sees. When two jobs run at once in two threads, one job's loop
 * reuses a descriptor number the other just closed, and TSan reports the two
 * creations (epoll_create1 / eventfd / pipe2 called by uv_loop_init and
 * uv_async_init) as a race on the descriptor. Nothing else is suppressed. */
__attribute__((used)) const char *__tsan_default_suppressions(void);
__attribute__((used)) const char *__tsan_default_suppressions(void) {
  return "race:epoll_create1\n"
         "race:eventfd\n"
         "race:pipe2\n";
}
#endif

#define WATCHDOG_S 240
#define MAXP 8
#define UNBOUNDED UINT64_MAX

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "stress_engine: watchdog fired: a job never ended (hang)\n"
                            "0 passed, 1 failed\n";
  ssize_t rc = write(2, msg, sizeof msg - 1);
  (void)rc;
  _exit(1);
}

/* ------------------------------------------------------------------------ */
/* The counter job                                                          */

typedef struct counter {
  /* Configuration. */
  uint64_t n; /* records 0..n-1 over all source subtasks (UNBOUNDED: until stopped) */
  uint64_t k; /* keys: i % k */
  /* Source side. */
  _Atomic uint64_t emitted;
  /* Sink side: per-subtask slots, each touched only by its own subtask. */
  struct slot {
    uint64_t *keys, *counts;
    size_t n, cap;
  } slot[MAXP];
  _Atomic uint64_t received; /* all sink subtasks */
  /* Count subtask 0 sleeps slow_us every 8 records (only its thread
   * touches `paced`): it takes its batches in slices. */
  uint32_t slow_us;
  uint64_t paced;
  /* Paced sources: after `pace` records, a source returns IDLE and asks
   * to run again in 1..1500 us (short waits nap, longer ones are libuv
   * timers), so workers nap and are woken from other workers all the
   * time. */
  uint32_t pace;
  /* Event time: the sources have a watermark strategy (no disorder, ticks
   * every 1 ms, never idle: a source starved for a while would let the
   * others' clock pass it, rightly), and the sink counts the records that
   * come at or behind its clock (none may: every source is in order). */
  int event_time;
  _Atomic uint64_t late;
  _Atomic int64_t clock_seen; /* the sink's largest clock below the end */
  /* Stop scenario: once `received` reaches stop_at, signal the stopper. */
  uint64_t stop_at;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int reached;
} counter;

static void counter_init(counter *c, uint64_t n, uint64_t k) {
  memset(c, 0, sizeof *c);
  c->n = n;
  c->k = k;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
}

static void counter_free(counter *c) {
  for (int s = 0; s < MAXP; s++) {
    free(c->slot[s].keys);
    free(c->slot[s].counts);
  }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
}

/* Source: subtask s of p emits i = s, s + p, s + 2p, ... < n. */
static int src_open(weir_ctx *ctx) {
  uint64_t *next = malloc(sizeof *next);
  *next = weir_ctx_subtask(ctx);
  weir_ctx_set_user(ctx, next);
  return 0;
}

static int src_run(weir_ctx *ctx, uint32_t budget) {
  counter *c = weir_ctx_arg(ctx);
  uint64_t *next = weir_ctx_user(ctx), p = weir_ctx_parallelism(ctx);
  uint32_t k = 0;
  if (c->pace && budget > c->pace) budget = c->pace;
  for (; k < budget && *next < c->n; k++) {
    uint64_t i = *next;
    uint8_t pl[8];
    for (int b = 0; b < 8; b++) pl[b] = (uint8_t)(i >> (8 * b));
    weir_record r = {.key = i % c->k,
                     .ts = (int64_t)i,
                     .id = weir_source_record_id(ctx, 0, i),
                     .payload = pl,
                     .len = 8};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
    *next += p;
  }
  atomic_fetch_add(&c->emitted, k);
  if (*next >= c->n) return WEIR_SOURCE_DONE;
  if (c->pace) {
    weir_ctx_wake_after(ctx, (*next * 7919u) % 1500u + 1u);
    return WEIR_SOURCE_IDLE;
  }
  return WEIR_SOURCE_MORE;
}

static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "numbers",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close};

/* Keyed count: emits (key, running count). */
static int count_process(weir_ctx *ctx, const weir_record *r) {
  counter *c = weir_ctx_arg(ctx);
  if (c->slow_us && weir_ctx_subtask(ctx) == 0 && ++c->paced % 8 == 0) weir_sleep_us(c->slow_us);
  uint64_t n = 0;
  int rc = weir_state_add_u64(ctx, r->key, 1, &n);
  if (rc) return rc;
  return weir_emit_u64(ctx, r->key, n);
}

static const weir_operator_vt count_vt = {
    .size = sizeof(weir_operator_vt), .name = "count", .process = count_process};

static int sink_process(weir_ctx *ctx, const weir_record *r) {
  counter *c = weir_ctx_arg(ctx);
  uint32_t s = weir_ctx_subtask(ctx);
  if (s >= MAXP) return weir_ctx_fail(ctx, WEIR_EINVAL, "subtask %u out of range", s);
  struct slot *sl = &c->slot[s];
  if (sl->n == sl->cap) {
    sl->cap = sl->cap ? 2 * sl->cap : 1024;
    sl->keys = realloc(sl->keys, sl->cap * sizeof *sl->keys);
    sl->counts = realloc(sl->counts, sl->cap * sizeof *sl->counts);
  }
  sl->keys[sl->n] = r->key;
  sl->counts[sl->n] = weir_payload_u64(r);
  sl->n++;
  if (c->event_time) {
    int64_t w = weir_ctx_watermark(ctx);
    if (r->ts <= w) atomic_fetch_add(&c->late, 1);
    int64_t m = atomic_load(&c->clock_seen);
    while (w > m && !atomic_compare_exchange_weak(&c->clock_seen, &m, w)) {
    }
  }
  uint64_t got = atomic_fetch_add(&c->received, 1) + 1;
  if (c->stop_at && got == c->stop_at) {
    pthread_mutex_lock(&c->mu);
    c->reached = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
  return 0;
}

static const weir_operator_vt sink_vt = {
    .size = sizeof(weir_operator_vt), .name = "collect", .process = sink_process};

/* Builds source(ps) -> key_by -> count(p) -> sink: chained (forward, p) when
 * sink_p == 0, else through another key_by into sink_p subtasks. */
static int build(weir_job *job, counter *c, int ps, int p, int sink_p) {
  weir_stream *s = weir_source(job, "numbers", &src_vt, c, ps);
  if (c->event_time) {
    weir_watermark_strategy wm = {
        .size = sizeof wm, .out_of_orderness = 0, .interval_ms = 1, .idle_timeout_ms = 0};
    s = weir_with_watermarks(s, &wm);
  }
  s = weir_process(weir_key_by(s), "count", &count_vt, c, p);
  if (sink_p) return weir_sink(weir_key_by(s), "collect", &sink_vt, c, sink_p);
  return weir_sink(s, "collect", &sink_vt, c, p);
}

/* Checks the collected pairs. With a bounded source: every key's final
 * count is exact; always: for each key, the counts seen are exactly 1..max
 * once each, and the maxima add up to what the source emitted. Returns 0 or
 * writes why into `why`. */
static int verify(counter *c, char *why, size_t whylen) {
  uint64_t k = c->k, total = 0;
  uint64_t *max = calloc(k, sizeof *max);
  for (int s = 0; s < MAXP; s++)
    for (size_t i = 0; i < c->slot[s].n; i++) {
      uint64_t key = c->slot[s].keys[i], cnt = c->slot[s].counts[i];
      if (key >= k || cnt == 0) {
        snprintf(why, whylen, "bad pair (%llu, %llu)", (unsigned long long)key,
                 (unsigned long long)cnt);
        free(max);
        return -1;
      }
      if (cnt > max[key]) max[key] = cnt;
      total++;
    }
  /* Every pair once: a bitmap per key. */
  uint64_t off = 0, *base = calloc(k, sizeof *base);
  for (uint64_t key = 0; key < k; key++) {
    base[key] = off;
    off += max[key];
  }
  uint8_t *seen = calloc(off ? off : 1, 1);
  int rc = 0;
  for (int s = 0; s < MAXP && !rc; s++)
    for (size_t i = 0; i < c->slot[s].n; i++) {
      uint64_t key = c->slot[s].keys[i], cnt = c->slot[s].counts[i];
      if (seen[base[key] + cnt - 1]++) {
        snprintf(why, whylen, "pair (%llu, %llu) seen twice", (unsigned long long)key,
                 (unsigned long long)cnt);
        rc = -1;
        break;
      }
    }
  if (!rc && total != off) {
    snprintf(why, whylen, "%llu pairs but the maxima add up to %llu (a count is missing)",
             (unsigned long long)total, (unsigned long long)off);
    rc = -1;
  }
  uint64_t emitted = atomic_load(&c->emitted);
  if (!rc && off != emitted) {
    snprintf(why, whylen, "counted %llu records, the source emitted %llu", (unsigned long long)off,
             (unsigned long long)emitted);
    rc = -1;
  }
  if (!rc && c->n != UNBOUNDED) {
    for (uint64_t key = 0; key < k; key++) {
      uint64_t want = c->n / k + (key < c->n % k ? 1 : 0);
      if (max[key] != want) {
        snprintf(why, whylen, "key %llu: final count %llu, expected %llu", (unsigned long long)key,
                 (unsigned long long)max[key], (unsigned long long)want);
        rc = -1;
        break;
      }
    }
  }
  free(seen);
  free(base);
  free(max);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Scenarios                                                                */

static int g_passed, g_failed;

static void report(const char *name, int ok, const char *why) {
  if (ok) {
    g_passed++;
    printf("ok   %s\n", name);
  } else {
    g_failed++;
    printf("FAIL %s: %s\n", name, why);
  }
  fflush(stdout);
}

/* One bounded counter job; returns 1 if it passed. */
/* Progress callback (on the thread running the job, while workers run):
 * reads the job's counters concurrently with the workers, for TSan, and
 * checks that the totals never go back. */
typedef struct progress_check {
  weir_job *job;
  uint64_t calls, last_src, last_sink;
  int backwards;
} progress_check;

static void on_progress(void *user, const weir_progress *p) {
  progress_check *pc = user;
  pc->calls++;
  if (p->source_records < pc->last_src || p->sink_records < pc->last_sink) pc->backwards = 1;
  pc->last_src = p->source_records;
  pc->last_sink = p->sink_records;
  uint64_t in, out;
  if (weir_job_operator_counts(pc->job, "count", &in, &out) != 0) pc->backwards = 1;
}

static int counter_job(const char *name, uint64_t n, uint64_t k, int ps, int p, int sink_p,
                       int workers, uint32_t chan, char *why, size_t whylen) {
  counter c;
  counter_init(&c, n, k);
  weir_job *job = NULL;
  int ok = 0;
  if (weir_job_create(&job, name) || build(job, &c, ps, p, sink_p)) {
    snprintf(why, whylen, "build: %s", weir_job_error(job));
  } else {
    progress_check pc = {.job = job};
    weir_run_opts o = {.workers = workers,
                       .batch_records = 16,
                       .channel_batches = chan,
                       .progress_ms = 1,
                       .progress = on_progress,
                       .progress_user = &pc};
    int rc = weir_job_run(job, &o);
    if (rc)
      snprintf(why, whylen, "run: %s: %s", weir_err_name(rc), weir_job_error(job));
    else if (pc.backwards)
      snprintf(why, whylen, "progress totals went backwards");
    else
      ok = verify(&c, why, whylen) == 0;
  }
  weir_job_destroy(job);
  counter_free(&c);
  return ok;
}

/* Checkpoints every 2 ms while the job runs (store writer thread,
 * coordinator, barriers and alignment under TSan), aligned, at-least-once,
 * synchronous (sources paused and resumed, tasks drained and woken),
 * unaligned (unaligned = 1: barriers overtake the rings, consumers scan
 * their producers' rings) and aligned with a 1 ms alignment timeout
 * (unaligned = 2): the output must be exact either way (nothing restores
 * here). With slow_us, count subtask 0 sleeps that long every 8 records,
 * so it takes its batches in slices and cuts come between them. */
static void checkpoint_scenario(uint64_t n, int p, int w, int at_least_once, int sync,
                                int unaligned, uint32_t slow_us) {
  char name[160], why[256] = "", dir[] = "/tmp/weir-stress-XXXXXX";
  snprintf(name, sizeof name, "counter P=%d W=%d, checkpoints every 2 ms%s%s", p, w,
           at_least_once    ? ", at-least-once"
           : sync           ? ", synchronous"
           : unaligned == 1 ? ", unaligned"
           : unaligned == 2 ? ", alignment timeout 1 ms"
                            : "",
           slow_us ? ", one slow count subtask (sliced batches)" : "");
  counter c;
  counter_init(&c, n, 97);
  c.slow_us = slow_us;
  weir_job *job = NULL;
  int ok = 0;
  if (!mkdtemp(dir)) {
    snprintf(why, sizeof why, "mkdtemp failed");
  } else if (weir_job_create(&job, name) || build(job, &c, p, p, p)) {
    snprintf(why, sizeof why, "build: %s", weir_job_error(job));
  } else {
    weir_run_opts o = {.workers = w,
                       .batch_records = 64,
                       .channel_batches = 2,
                       .state_dir = dir,
                       .checkpoint_interval_ms = 2,
                       .at_least_once = at_least_once,
                       .sync_checkpoints = sync,
                       .unaligned = unaligned == 1,
                       .alignment_timeout_ms = unaligned == 2 ? 1u : 0u};
    int rc = weir_job_run(job, &o);
    const weir_run_info *ri = weir_job_run_info(job);
    if (rc)
      snprintf(why, sizeof why, "run: %s: %s", weir_err_name(rc), weir_job_error(job));
    else if (!ri->last_checkpoint)
      snprintf(why, sizeof why, "no checkpoint completed");
    else
      ok = verify(&c, why, sizeof why) == 0;
  }
  weir_job_destroy(job);
  counter_free(&c);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  report(name, ok, why);
}

static void matrix(uint64_t n) {
  static const int ps[] = {1, 2, 4};
  static const int ws[] = {1, 2, 3};
  for (size_t a = 0; a < 3; a++)
    for (size_t b = 0; b < 3; b++) {
      int p = ps[a], w = ws[b];
      char name[160], why[256] = "";
      /* Chained sink, channels of 1 batch. */
      snprintf(name, sizeof name, "counter P=%d W=%d (chained sink, 1-batch channels)", p, w);
      report(name, counter_job(name, n, 37, p, p, 0, w, 1, why, sizeof why), why);
      /* Sink behind another key_by, source of a different parallelism. */
      snprintf(name, sizeof name,
               "counter P=%d W=%d (source P=3, keyed sink P=2, 2-batch channels)", p, w);
      report(name, counter_job(name, n, 101, 3, p, 2, w, 2, why, sizeof why), why);
    }
}

/* weir_job_stop() from another thread while an unbounded source runs. */
typedef struct stopper {
  counter *c;
  weir_job *job;
} stopper;

static void *stopper_main(void *arg) {
  stopper *st = arg;
  pthread_mutex_lock(&st->c->mu);
  while (!st->c->reached) pthread_cond_wait(&st->c->cv, &st->c->mu);
  pthread_mutex_unlock(&st->c->mu);
  weir_job_stop(st->job);
  return NULL;
}

static void stop_scenario(int p, int w, uint64_t stop_at) {
  char name[160], why[256] = "";
  snprintf(name, sizeof name, "weir_job_stop from another thread, unbounded source, P=%d W=%d", p,
           w);
  counter c;
  counter_init(&c, UNBOUNDED, 29);
  c.stop_at = stop_at;
  weir_job *job = NULL;
  int ok = 0;
  if (weir_job_create(&job, "stop") || build(job, &c, p, p, 0)) {
    snprintf(why, sizeof why, "build: %s", weir_job_error(job));
  } else {
    stopper st = {&c, job};
    pthread_t t;
    pthread_create(&t, NULL, stopper_main, &st);
    weir_run_opts o = {.workers = w, .batch_records = 16, .channel_batches = 1};
    int rc = weir_job_run(job, &o);
    if (rc) {
      snprintf(why, sizeof why, "run returned %s: %s", weir_err_name(rc), weir_job_error(job));
      /* The stopper may still wait: let it go. */
      pthread_mutex_lock(&c.mu);
      c.reached = 1;
      pthread_cond_signal(&c.cv);
      pthread_mutex_unlock(&c.mu);
    }
    pthread_join(t, NULL);
    if (!rc) {
      if (atomic_load(&c.received) < stop_at)
        snprintf(why, sizeof why, "ended after %llu records, before the stop",
                 (unsigned long long)atomic_load(&c.received));
      else
        ok = verify(&c, why, sizeof why) == 0;
    }
  }
  weir_job_destroy(job);
  counter_free(&c);
  report(name, ok, why);
}

/* Two jobs at once, in two threads of this process. */
typedef struct twin {
  uint64_t n, k;
  int p, w;
  int ok;
  char why[256];
} twin;

static void *twin_main(void *arg) {
  twin *t = arg;
  t->ok = 1;
  for (int round = 0; round < 3 && t->ok; round++)
    t->ok = counter_job("twin", t->n, t->k, t->p, t->p, 0, t->w, 1, t->why, sizeof t->why);
  return NULL;
}

static void twin_scenario(uint64_t n) {
  twin a = {.n = n, .k = 13, .p = 2, .w = 2}, b = {.n = n / 2 + 7, .k = 31, .p = 3, .w = 2};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, twin_main, &a);
  pthread_create(&tb, NULL, twin_main, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  char why[600] = "";
  if (!a.ok || !b.ok) snprintf(why, sizeof why, "job a: %s; job b: %s", a.why, b.why);
  report("two jobs at once in two threads (3 rounds each)", a.ok && b.ok, why);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  signal(SIGALRM, on_alarm);
  alarm(WATCHDOG_S);
  setvbuf(stdout, NULL, _IOLBF, 0);
  uint64_t n = 200000;
#ifdef SE_TSAN
  n = 150000; /* everything runs ~10x slower */
#endif
  matrix(n);
  /* The extreme: one record per batch, one batch per channel: a wake-up
   * handshake for every record. */
  for (int w = 1; w <= 3; w++) {
    char name[160], why[256] = "";
    snprintf(name, sizeof name, "counter P=2 W=%d, 1-record batches, 1-batch channels", w);
    counter c;
    counter_init(&c, n / 20, 7);
    weir_job *job = NULL;
    int ok = 0;
    if (weir_job_create(&job, name) || build(job, &c, 2, 2, 3)) {
      snprintf(why, sizeof why, "build: %s", weir_job_error(job));
    } else {
      weir_run_opts o = {.workers = w, .batch_records = 1, .channel_batches = 1};
      int rc = weir_job_run(job, &o);
      if (rc)
        snprintf(why, sizeof why, "run: %s: %s", weir_err_name(rc), weir_job_error(job));
      else
        ok = verify(&c, why, sizeof why) == 0;
    }
    weir_job_destroy(job);
    counter_free(&c);
    report(name, ok, why);
  }
  /* Paced sources (workers nap between short waits and are woken by the
   * others' pushes), with and without latency tracing, and with event
   * time (watermarks and idleness through two shuffles). */
  for (int mode = 0; mode < 3; mode++)
    for (int w = 1; w <= 3; w++) {
      char name[160], why[256] = "";
      int traced = mode == 1;
      snprintf(name, sizeof name, "counter P=3 W=%d, paced sources%s", w,
               traced      ? ", traced"
               : mode == 2 ? ", watermarks"
                           : "");
      counter c;
      counter_init(&c, n / 10, 13);
      c.pace = 40;
      c.event_time = mode == 2;
      weir_job *job = NULL;
      int ok = 0;
      if (weir_job_create(&job, name) || build(job, &c, 3, 3, 2)) {
        snprintf(why, sizeof why, "build: %s", weir_job_error(job));
      } else {
        weir_run_opts o = {
            .workers = w, .batch_records = 16, .channel_batches = 2, .trace_latency = traced};
        int rc = weir_job_run(job, &o);
        uint64_t p50 = 0;
        if (rc)
          snprintf(why, sizeof why, "run: %s: %s", weir_err_name(rc), weir_job_error(job));
        else if (traced && weir_job_hop_quantile(job, "collect", WEIR_WAIT_TOTAL, 0.5, &p50))
          snprintf(why, sizeof why, "no traced waits into the sink");
        else if (c.event_time && atomic_load(&c.clock_seen) <= 0)
          snprintf(why, sizeof why, "the sink's event-time clock never moved");
        else if (atomic_load(&c.late))
          snprintf(why, sizeof why, "%llu records late at the sink",
                   (unsigned long long)atomic_load(&c.late));
        else
          ok = verify(&c, why, sizeof why) == 0;
      }
      weir_job_destroy(job);
      counter_free(&c);
      report(name, ok, why);
    }
  for (uint64_t round = 0; round < 4; round++) {
    stop_scenario(2, 2, 3000 + round * 1111);
    stop_scenario(4, 3, 5000 + round * 777);
    stop_scenario(1, 1, 1 + round * 500);
  }
  twin_scenario(n);
  checkpoint_scenario(n, 2, 2, 0, 0, 0, 0);
  checkpoint_scenario(n, 4, 3, 0, 0, 0, 0);
  checkpoint_scenario(n, 3, 2, 1, 0, 0, 0);
  checkpoint_scenario(n, 2, 2, 0, 1, 0, 0);
  checkpoint_scenario(n, 4, 3, 0, 1, 0, 0);
  checkpoint_scenario(n, 2, 2, 0, 0, 1, 0);
  checkpoint_scenario(n, 4, 3, 0, 0, 1, 0);
  checkpoint_scenario(n, 3, 2, 0, 0, 2, 0);
  /* A slow subtask (200 us every 8 records, over 1 ms a 64-record batch):
   * cuts while its batches are consumed in part. */
  checkpoint_scenario(20000, 2, 2, 0, 0, 1, 200);
  checkpoint_scenario(20000, 3, 2, 0, 0, 2, 200);
  checkpoint_scenario(20000, 2, 2, 0, 0, 0, 200);
  alarm(0);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
