/* test_timers.c: timers (docs/event-time.md §5): the timer set and its
 * firing order (engine/src/timers.c) against a reference, then through
 * running jobs: event-time timers fire once each as the watermark passes
 * them, in the key's context, with the timer's timestamp; deleted ones
 * never; the rest at the true end. Processing-time timers fire from the
 * worker's loop by the wall clock. Timers pending at a stop stay in the
 * final checkpoint and fire exactly once after a restore, also at another
 * parallelism, and the operator's clock resumes where it was. Misuse is a
 * build error or a clear runtime one. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "timers.h"
#include "weir/weir.h"

/* ---- the timer set and its order ------------------------------------------- */

typedef struct fired {
  int64_t ts[4096];
  uint64_t key[4096];
  uint32_t n;
  weir__timers *tm; /* for callbacks that register */
  int again;        /* register (key + 1000, ts) once from the callback */
} fired;

static int note(void *arg, int64_t ts, const uint64_t *keys, uint32_t n) {
  fired *f = arg;
  for (uint32_t i = 0; i < n; i++) {
    cr_assert_lt(f->n, 4096);
    f->ts[f->n] = ts;
    f->key[f->n++] = keys[i];
    if (f->again && keys[i] < 1000) weir__timers_add(f->tm, keys[i] + 1000, ts);
  }
  return 0;
}

Test(timers, add_delete_and_fire_in_order) {
  weir__timers tm;
  weir__timers_init(&tm);
  cr_assert_eq(weir__timers_add(&tm, 1, 30), 1);
  cr_assert_eq(weir__timers_add(&tm, 2, 10), 1);
  cr_assert_eq(weir__timers_add(&tm, 3, 20), 1);
  cr_assert_eq(weir__timers_add(&tm, 1, 30), 0); /* again: a no-op */
  cr_assert_eq(weir__timers_add(&tm, 4, 10), 1);
  cr_assert_eq(tm.n, 4);
  cr_assert_eq(weir__timers_next(&tm), 10);
  cr_assert_eq(weir__timers_del(&tm, 4, 10), 1);
  cr_assert_eq(weir__timers_del(&tm, 4, 10), 0);
  cr_assert_eq(weir__timers_has(&tm, 3, 20), 1);
  cr_assert_eq(weir__timers_has(&tm, 3, 21), 0);
  fired f = {0};
  cr_assert_eq(weir__timers_fire(&tm, 20, 0, note, &f), 0);
  cr_assert_eq(f.n, 2);
  cr_assert(f.ts[0] == 10 && f.key[0] == 2);
  cr_assert(f.ts[1] == 20 && f.key[1] == 3);
  /* Deleted then registered again: fires once. */
  cr_assert_eq(weir__timers_del(&tm, 1, 30), 1);
  cr_assert_eq(weir__timers_add(&tm, 1, 30), 1);
  cr_assert_eq(weir__timers_fire(&tm, INT64_MAX, 0, note, &f), 0);
  cr_assert_eq(f.n, 3);
  cr_assert(f.ts[2] == 30 && f.key[2] == 1);
  cr_assert_eq(tm.n, 0);
  cr_assert_eq(weir__timers_next(&tm), WEIR__TS_NONE);
  weir__timers_free(&tm);
}

Test(timers, what_a_callback_registers_at_its_time_fires_in_the_same_call) {
  weir__timers tm;
  weir__timers_init(&tm);
  for (uint64_t k = 0; k < 100; k++) weir__timers_add(&tm, k, 5);
  /* The key that marks a free slot of a bucket's table is a key too. */
  cr_assert_eq(weir__timers_add(&tm, UINT64_MAX, 5), 1);
  cr_assert_eq(weir__timers_has(&tm, UINT64_MAX, 5), 1);
  cr_assert_eq(weir__timers_del(&tm, UINT64_MAX, 5), 1);
  cr_assert_eq(weir__timers_has(&tm, UINT64_MAX, 5), 0);
  fired f = {.tm = &tm, .again = 1};
  /* Groups of 7: the list grows while it is walked. */
  cr_assert_eq(weir__timers_fire(&tm, 5, 7, note, &f), 0);
  cr_assert_eq(f.n, 200);
  cr_assert_eq(tm.n, 0);
  weir__timers_free(&tm);
}

/* Random adds, deletes and firings against a plain array of live timers:
 * each live timer fires exactly once, none that was deleted, in
 * timestamp order; the lists stay bounded. */
Test(timers, random_against_a_reference) {
  enum { CAP = 20000 };
  static uint64_t rk[CAP];
  static int64_t rt[CAP];
  uint32_t rn = 0;
  uint64_t rng = 7;
  weir__timers tm;
  weir__timers_init(&tm);
  int64_t floor = 0;
  for (int round = 0; round < 300; round++) {
    for (int i = 0; i < 60; i++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      uint64_t key = (rng >> 33) % 500;
      if (key == 0) key = UINT64_MAX; /* the key that marks free table slots */
      int64_t ts = floor + 1 + (int64_t)((rng >> 20) % 40);
      int have = 0;
      for (uint32_t j = 0; j < rn; j++)
        if (rk[j] == key && rt[j] == ts) have = 1;
      if ((rng >> 50) % 4 == 0) {
        cr_assert_eq(weir__timers_del(&tm, key, ts), have);
        for (uint32_t j = 0; j < rn; j++)
          if (rk[j] == key && rt[j] == ts) {
            rk[j] = rk[--rn];
            rt[j] = rt[rn];
            break;
          }
      } else {
        cr_assert_eq(weir__timers_add(&tm, key, ts), !have);
        if (!have) {
          cr_assert_lt(rn, CAP);
          rk[rn] = key;
          rt[rn++] = ts;
        }
      }
    }
    cr_assert_eq(tm.n, rn);
    floor += 10;
    fired f = {0};
    cr_assert_eq(weir__timers_fire(&tm, floor, 0, note, &f), 0);
    uint32_t due = 0;
    for (uint32_t j = 0; j < rn;) {
      if (rt[j] <= floor) {
        int found = 0;
        for (uint32_t k = 0; k < f.n; k++)
          if (f.key[k] == rk[j] && f.ts[k] == rt[j]) found++;
        cr_assert_eq(found, 1, "round %d: timer (%llu, %lld) fired %d times", round,
                     (unsigned long long)rk[j], (long long)rt[j], found);
        due++;
        rk[j] = rk[--rn];
        rt[j] = rt[rn];
      } else {
        j++;
      }
    }
    cr_assert_eq(f.n, due, "round %d", round);
    for (uint32_t k = 1; k < f.n; k++) cr_assert_leq(f.ts[k - 1], f.ts[k]);
    /* What fired is gone, empty buckets too: a timestamp is in the heap
     * exactly while it has a bucket. */
    cr_assert(weir__timers_next(&tm) == WEIR__TS_NONE || weir__timers_next(&tm) > floor, "round %d",
              round);
    cr_assert_eq(tm.bn, tm.hn, "round %d", round);
  }
  weir__timers_free(&tm);
}

/* ---- in a job: event time -------------------------------------------------- */

#define N 20000u /* records: record i has key i % K and timestamp i */
#define K 500u   /* keys */
#define DELAY 37 /* each record's timer: its timestamp + DELAY */
#define UNSET 0xffu

typedef struct timer_run {
  _Atomic uint32_t fired[N];      /* per record i: times its timer fired */
  _Atomic uint64_t emitted;       /* at the sink */
  _Atomic uint64_t bad;           /* a timer that fired out of its key's context or early */
  _Atomic int64_t max_clock;      /* the largest clock an operator saw */
  _Atomic int64_t first_clock[8]; /* the clock at each subtask's first record */
  _Atomic uint64_t seen;          /* records at the timer operator */
  _Atomic uint64_t completed;     /* checkpoints completed */
  atomic_int stopped;
  uint64_t stop_after; /* stop run 1 after this many records (0: never) */
  int batch;           /* use on_timers */
  uint64_t rate;       /* source records/s (0: unpaced) */
  weir_job *job;
} timer_run;

static timer_run run;

/* The source: records [from, N), one split, its position checkpointed. */
typedef struct src_state {
  uint64_t next;
} src_state;

static int src_open(weir_ctx *ctx) {
  src_state *s = calloc(1, sizeof *s);
  weir_ctx_set_user(ctx, s);
  return 0;
}
static int src_run(weir_ctx *ctx, uint32_t budget) {
  src_state *s = weir_ctx_user(ctx);
  if (weir_ctx_stopping(ctx)) return WEIR_SOURCE_DONE;
  if (run.rate) budget = budget < 20 ? budget : 20;
  for (uint32_t b = 0; b < budget && s->next < N; b++, s->next++) {
    uint64_t i = s->next;
    int rc = weir_emit_at(ctx, i % K, (int64_t)i, &i, 8);
    if (rc) return rc;
  }
  if (s->next >= N) return WEIR_SOURCE_DONE;
  if (run.rate) {
    weir_ctx_wake_after(ctx, 20 * 1000000ull / run.rate);
    return WEIR_SOURCE_IDLE;
  }
  return WEIR_SOURCE_MORE;
}
static int src_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  src_state *s = weir_ctx_user(ctx);
  return weir_snapshot_position(w, 0, s->next);
}
static int src_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  src_state *s = weir_ctx_user(ctx);
  uint64_t off = 0;
  if (weir_snapshot_get_position(r, 0, &off)) s->next = off;
  return 0;
}
static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}
static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "records",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close,
                                      .snapshot = src_snapshot,
                                      .restore = src_restore,
                                      .rescalable = 1};

static void note_max_clock(int64_t c) {
  int64_t cur = atomic_load(&run.max_clock);
  while (c > cur && !atomic_compare_exchange_weak(&run.max_clock, &cur, c)) {
  }
}

/* Each record: its key's state is its latest timestamp + 1, and a timer
 * at ts + DELAY; every 7th record's timer is deleted again, every 11th
 * registered twice. */
static int tm_process(weir_ctx *ctx, const weir_record *r) {
  uint32_t s = weir_ctx_subtask(ctx);
  int64_t unset = INT64_MIN + 1, clock = weir_ctx_watermark(ctx);
  atomic_compare_exchange_strong(&run.first_clock[s], &unset, clock);
  note_max_clock(clock);
  int rc = weir_state_put_u64(ctx, r->key, (uint64_t)r->ts + 1);
  if (!rc) rc = weir_timer_register(ctx, WEIR_EVENT_TIME, r->ts + DELAY);
  if (!rc && r->ts % 11 == 5) rc = weir_timer_register(ctx, WEIR_EVENT_TIME, r->ts + DELAY);
  if (!rc && r->ts % 7 == 3) rc = weir_timer_delete(ctx, WEIR_EVENT_TIME, r->ts + DELAY);
  uint64_t n = atomic_fetch_add(&run.seen, 1) + 1;
  if (run.stop_after && n >= run.stop_after && atomic_load(&run.completed) > 0 &&
      !atomic_exchange(&run.stopped, 1))
    weir_job_stop(run.job);
  return rc;
}

static int fire_one(weir_ctx *ctx, uint64_t key, int64_t ts) {
  uint64_t v = 0;
  int64_t i = ts - DELAY;
  /* The key's context: its state is there, and the key is the timer's. */
  if (i < 0 || i >= (int64_t)N || (uint64_t)i % K != key || weir_state_get_u64(ctx, key, &v) != 1 ||
      weir_ctx_watermark(ctx) < ts)
    atomic_fetch_add(&run.bad, 1);
  else
    atomic_fetch_add(&run.fired[i], 1);
  note_max_clock(weir_ctx_watermark(ctx));
  return weir_emit(ctx, key, &ts, 8);
}
static int tm_on_timer(weir_ctx *ctx, const weir_timer *t) {
  if (t->domain != WEIR_EVENT_TIME) atomic_fetch_add(&run.bad, 1);
  return fire_one(ctx, t->key, t->ts);
}
static int tm_on_timers(weir_ctx *ctx, const weir_timer_batch *tb) {
  for (uint32_t i = 0; i < tb->len; i++) {
    weir_state_select(ctx, tb->keys[i]);
    int rc = fire_one(ctx, tb->keys[i], tb->ts);
    if (rc) return rc;
  }
  return 0;
}
static const weir_operator_vt tm_vt = {.size = sizeof(weir_operator_vt),
                                       .name = "timers",
                                       .process = tm_process,
                                       .on_timer = tm_on_timer};
static const weir_operator_vt tm_batch_vt = {.size = sizeof(weir_operator_vt),
                                             .name = "timers",
                                             .process = tm_process,
                                             .on_timers = tm_on_timers};

/* The sink: what on_timer emitted carries the timer's timestamp. */
static int sink_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  int64_t ts = 0;
  memcpy(&ts, r->payload, 8);
  if (r->ts != ts) atomic_fetch_add(&run.bad, 1);
  atomic_fetch_add(&run.emitted, 1);
  return 0;
}
static int sink_complete(weir_ctx *ctx, uint64_t id) {
  (void)ctx;
  (void)id;
  atomic_fetch_add(&run.completed, 1);
  return 0;
}
static const weir_operator_vt sink_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "sink",
                                         .process = sink_process,
                                         .checkpoint_complete = sink_complete};

static weir_job *build(int p) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "timers"), 0);
  weir_watermark_strategy ws = {.size = sizeof ws, .out_of_orderness = 0, .interval_ms = 1};
  weir_stream *src = weir_with_watermarks(weir_source(job, "records", &src_vt, NULL, 1), &ws);
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_EVENT_TIMERS};
  weir_stream *t = weir_process_opts(weir_key_by(src), "timers", run.batch ? &tm_batch_vt : &tm_vt,
                                     NULL, p, &oo);
  cr_assert_eq(weir_sink(weir_rebalance(t), "sink", &sink_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  run.job = job;
  return job;
}

static void reset_run(void) {
  for (uint32_t i = 0; i < N; i++) atomic_store(&run.fired[i], 0);
  atomic_store(&run.emitted, 0);
  atomic_store(&run.bad, 0);
  atomic_store(&run.max_clock, INT64_MIN);
  for (int s = 0; s < 8; s++) atomic_store(&run.first_clock[s], INT64_MIN + 1);
  atomic_store(&run.seen, 0);
  atomic_store(&run.completed, 0);
  atomic_store(&run.stopped, 0);
}

/* Every timer that was not deleted fired exactly once, nothing else. */
static void assert_exactly_once(void) {
  cr_assert_eq(atomic_load(&run.bad), 0, "%llu timers fired out of context or early",
               (unsigned long long)atomic_load(&run.bad));
  uint64_t want = 0;
  for (uint32_t i = 0; i < N; i++) {
    uint32_t expect = i % 7 == 3 ? 0 : 1;
    want += expect;
    cr_assert_eq(atomic_load(&run.fired[i]), expect, "timer of record %u fired %u times", i,
                 atomic_load(&run.fired[i]));
  }
  cr_assert_eq(atomic_load(&run.emitted), want);
}

TestSuite(timers, .timeout = 120);

static void event_time_run(int batch) {
  reset_run();
  run.batch = batch;
  run.stop_after = 0;
  run.rate = 0;
  weir_job *job = build(2);
  weir_run_opts o = {.workers = 2, .buffer_timeout_us = 200};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  assert_exactly_once();
  cr_assert_eq(atomic_load(&run.max_clock), WEIR_WATERMARK_MAX);
  weir_job_destroy(job);
}

Test(timers, event_time_fire_once_each_in_context) {
  event_time_run(0);
}

Test(timers, event_time_on_timers_batches) {
  event_time_run(1);
}

/* Run 1 stops part-way (its pending timers stay in the final checkpoint,
 * none fires at the stop); run 2 restores at parallelism p2. */
static void stop_and_restore(int p1, int p2) {
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  reset_run();
  run.batch = 0;
  run.rate = 100000;
  run.stop_after = N / 3;
  weir_job *job = build(p1);
  weir_run_opts o = {.workers = 2,
                     .buffer_timeout_us = 200,
                     .state_dir = state,
                     .checkpoint_interval_ms = 20,
                     .retain = 3};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert(atomic_load(&run.stopped), "run 1 was not stopped");
  int64_t clock1 = atomic_load(&run.max_clock);
  cr_assert_lt(clock1, (int64_t)N, "run 1 reached the end");
  cr_assert_gt(clock1, (int64_t)DELAY, "run 1's clock never moved");
  uint64_t fired1 = atomic_load(&run.emitted);
  weir_job_destroy(job);

  /* Run 2: what run 1 fired stays counted. */
  run.stop_after = 0;
  run.rate = 0;
  atomic_store(&run.max_clock, INT64_MIN);
  for (int s = 0; s < 8; s++) atomic_store(&run.first_clock[s], INT64_MIN + 1);
  job = build(p2);
  o.restore = WEIR_RESTORE_LATEST;
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_gt(atomic_load(&run.emitted), fired1, "run 2 fired nothing");
  assert_exactly_once();
  /* The clock resumed where run 1 left it (or above), never from scratch. */
  for (int s = 0; s < p2; s++) {
    int64_t c = atomic_load(&run.first_clock[s]);
    if (c == INT64_MIN + 1) continue; /* no record reached it */
    cr_assert_geq(c, clock1 - 2 * (int64_t)DELAY - 1,
                  "subtask %d of run 2 started at clock %lld, run 1 ended at %lld", s, (long long)c,
                  (long long)clock1);
  }
  weir_job_destroy(job);
  th_rmrf(state);
  free(state);
}

Test(timers, pending_at_a_stop_fire_once_after_restore) {
  stop_and_restore(2, 2);
}

Test(timers, move_with_their_keys_on_a_rescale) {
  stop_and_restore(2, 3);
}

/* ---- processing time --------------------------------------------------------- */

static _Atomic uint64_t pt_fired, pt_early, pt_before_end;
static atomic_int pt_src_done;

static int pt_src_run(weir_ctx *ctx, uint32_t budget) {
  (void)budget;
  src_state *s = weir_ctx_user(ctx);
  if (s->next < 100) {
    for (; s->next < 100; s->next++) {
      int rc = weir_emit(ctx, s->next, &s->next, 8);
      if (rc) return rc;
    }
    s->next = 100 + (uint64_t)weir_ctx_processing_time(ctx); /* when it started idling */
  }
  /* Idle for 400 ms, then the end: the timers (at +30 ms) fire meanwhile. */
  if ((uint64_t)weir_ctx_processing_time(ctx) < s->next - 100 + 400) {
    weir_ctx_wake_after(ctx, 20000);
    return WEIR_SOURCE_IDLE;
  }
  atomic_store(&pt_src_done, 1);
  return WEIR_SOURCE_DONE;
}
static const weir_source_vt pt_src_vt = {.size = sizeof(weir_source_vt),
                                         .name = "pt",
                                         .open = src_open,
                                         .run = pt_src_run,
                                         .close = src_close};

static int pt_process(weir_ctx *ctx, const weir_record *r) {
  int rc = weir_state_put_u64(ctx, r->key, 1);
  if (rc) return rc;
  return weir_timer_register(ctx, WEIR_PROCESSING_TIME, weir_ctx_processing_time(ctx) + 30);
}
static int pt_on_timer(weir_ctx *ctx, const weir_timer *t) {
  uint64_t v = 0;
  if (t->domain != WEIR_PROCESSING_TIME || weir_ctx_processing_time(ctx) < t->ts ||
      weir_state_get_u64(ctx, t->key, &v) != 1)
    atomic_fetch_add(&pt_early, 1);
  if (!atomic_load(&pt_src_done)) atomic_fetch_add(&pt_before_end, 1);
  atomic_fetch_add(&pt_fired, 1);
  return 0;
}
static const weir_operator_vt pt_vt = {
    .size = sizeof(weir_operator_vt), .name = "pt", .process = pt_process, .on_timer = pt_on_timer};

Test(timers, processing_time_fire_by_the_wall_clock) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "pt"), 0);
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_PROCESSING_TIMERS};
  weir_stream *s = weir_process_opts(weir_key_by(weir_source(job, "src", &pt_src_vt, NULL, 1)),
                                     "pt", &pt_vt, NULL, 2, &oo);
  cr_assert_eq(weir_sink(s, "sink", &sink_vt, NULL, 2), 0, "%s", weir_job_error(job));
  weir_run_opts o = {.workers = 2};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(atomic_load(&pt_fired), 100);
  cr_assert_eq(atomic_load(&pt_early), 0);
  cr_assert_eq(atomic_load(&pt_before_end), 100, "only %llu fired before the input ended",
               (unsigned long long)atomic_load(&pt_before_end));
  weir_job_destroy(job);
}

/* ---- misuse -------------------------------------------------------------------- */

static weir_job *misuse_job(void) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "misuse"), 0);
  return job;
}

Test(timers, timers_on_a_stream_that_is_not_keyed_is_a_build_error) {
  weir_job *job = misuse_job();
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_PROCESSING_TIMERS};
  cr_assert_null(
      weir_process_opts(weir_source(job, "src", &pt_src_vt, NULL, 1), "pt", &pt_vt, NULL, 1, &oo));
  cr_assert_eq(weir_job_build_error(job), WEIR_EPLAN);
  cr_assert(strstr(weir_job_error(job), "operator 'pt' declares processing-time timers, but its "
                                        "input is not keyed"),
            "%s", weir_job_error(job));
  weir_job_destroy(job);
}

Test(timers, declared_timers_without_on_timer_is_a_build_error) {
  weir_job *job = misuse_job();
  static const weir_operator_vt no_cb = {
      .size = sizeof(weir_operator_vt), .name = "x", .process = pt_process};
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_EVENT_TIMERS};
  cr_assert_null(weir_process_opts(weir_key_by(weir_source(job, "src", &pt_src_vt, NULL, 1)), "x",
                                   &no_cb, NULL, 1, &oo));
  cr_assert(strstr(weir_job_error(job), "has neither on_timer nor on_timers"), "%s",
            weir_job_error(job));
  weir_job_destroy(job);
}

Test(timers, event_time_without_a_watermark_strategy_is_a_build_error) {
  weir_job *job = misuse_job();
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_EVENT_TIMERS};
  weir_stream *s = weir_process_opts(weir_key_by(weir_source(job, "plain", &src_vt, NULL, 1)), "t",
                                     &tm_vt, NULL, 1, &oo);
  cr_assert_eq(weir_sink(s, "sink", &sink_vt, NULL, 1), 0);
  weir_run_opts o = {.workers = 1};
  cr_assert_eq(weir_job_run(job, &o), WEIR_EPLAN);
  cr_assert(strstr(weir_job_error(job), "operator 't' uses event time (event-time timers), but "
                                        "source 'plain' upstream of it has no watermark "
                                        "strategy"),
            "%s", weir_job_error(job));
  weir_job_destroy(job);
}

Test(timers, an_undeclared_domain_fails_the_job_with_a_message) {
  weir_job *job = misuse_job();
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_PROCESSING_TIMERS};
  weir_watermark_strategy ws = {.size = sizeof ws, .interval_ms = 1};
  /* tm_vt registers event-time timers; only processing time is declared. */
  weir_stream *src = weir_with_watermarks(weir_source(job, "records", &src_vt, NULL, 1), &ws);
  weir_stream *s = weir_process_opts(weir_key_by(src), "t", &tm_vt, NULL, 1, &oo);
  cr_assert_eq(weir_sink(s, "sink", &sink_vt, NULL, 1), 0);
  reset_run();
  weir_run_opts o = {.workers = 1};
  cr_assert_eq(weir_job_run(job, &o), WEIR_ESTATE);
  cr_assert(strstr(weir_job_error(job), "event-time timer, but the operator did not declare "
                                        "WEIR_OP_EVENT_TIMERS"),
            "%s", weir_job_error(job));
  weir_job_destroy(job);
}
