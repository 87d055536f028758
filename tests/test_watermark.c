/* test_watermark.c: event time's watermarks (docs/event-time.md): the
 * generator and the valve as pure state machines (engine/src/watermark.c),
 * then through running jobs: bounded out-of-orderness, the minimum over
 * inputs across a shuffle and a union, idleness, chains, the true end
 * (+inf) against a stop, and the build errors. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "watermark.h"
#include "weir/weir.h"

#define MS 1000000ull
#define MIN WEIR_WATERMARK_MIN
#define MAX WEIR_WATERMARK_MAX

/* ---- the valve ------------------------------------------------------------ */

Test(watermark, valve_takes_the_minimum_and_never_goes_back) {
  weir__valve v;
  weir__valve_init(&v, 3);
  cr_assert_eq(weir__valve_watermark(&v, 0, 100), WEIR__WM_NONE); /* 1, 2 at MIN */
  cr_assert_eq(weir__valve_watermark(&v, 1, 50), WEIR__WM_NONE);
  cr_assert_eq(v.out, MIN);
  cr_assert_eq(weir__valve_watermark(&v, 2, 70), WEIR__WM_ADVANCE);
  cr_assert_eq(v.out, 50);
  /* A watermark that goes back on one input changes nothing. */
  cr_assert_eq(weir__valve_watermark(&v, 1, 20), WEIR__WM_NONE);
  cr_assert_eq(v.out, 50);
  cr_assert_eq(weir__valve_watermark(&v, 1, 90), WEIR__WM_ADVANCE);
  cr_assert_eq(v.out, 70);
  cr_assert_eq(weir__valve_check(&v, 70), 0);
  weir__valve_free(&v);
}

Test(watermark, valve_leaves_idle_inputs_out) {
  weir__valve v;
  weir__valve_init(&v, 2);
  cr_assert_eq(weir__valve_watermark(&v, 0, 100), WEIR__WM_NONE);
  /* Input 1 never sent a watermark and goes idle: input 0 alone counts. */
  cr_assert_eq(weir__valve_idle(&v, 1), WEIR__WM_ADVANCE);
  cr_assert_eq(v.out, 100);
  cr_assert_eq(weir__valve_idle(&v, 0), WEIR__WM_GONE_IDLE);
  cr_assert(v.idle);
  cr_assert_eq(weir__valve_check(&v, 100), 0);
  /* Back from idleness behind the clock: active again at the same clock
   * (restated downstream), and holding nothing back until it catches up. */
  cr_assert_eq(weir__valve_watermark(&v, 1, 40), WEIR__WM_ADVANCE);
  cr_assert(!v.idle);
  cr_assert_eq(v.out, 100);
  cr_assert_eq(weir__valve_watermark(&v, 0, 300), WEIR__WM_ADVANCE); /* 1 is behind */
  cr_assert_eq(v.out, 300);
  cr_assert_eq(weir__valve_watermark(&v, 1, 200), WEIR__WM_NONE);
  /* Caught up: it counts again. */
  cr_assert_eq(weir__valve_watermark(&v, 1, 400), WEIR__WM_NONE);
  cr_assert_eq(weir__valve_watermark(&v, 0, 500), WEIR__WM_ADVANCE);
  cr_assert_eq(v.out, 400);
  cr_assert_eq(weir__valve_check(&v, 400), 0);
  weir__valve_free(&v);
}

Test(watermark, valve_ends_at_infinity) {
  weir__valve v;
  weir__valve_init(&v, 2);
  cr_assert_eq(weir__valve_watermark(&v, 0, 10), WEIR__WM_NONE);
  cr_assert_eq(weir__valve_ended(&v, 1), WEIR__WM_ADVANCE); /* ended: +inf */
  cr_assert_eq(v.out, 10);
  cr_assert_eq(weir__valve_ended(&v, 0), WEIR__WM_ADVANCE);
  cr_assert_eq(v.out, MAX);
  /* Ended is final. */
  cr_assert_eq(weir__valve_watermark(&v, 0, 5), WEIR__WM_NONE);
  cr_assert_eq(weir__valve_idle(&v, 0), WEIR__WM_NONE);
  cr_assert_eq(weir__valve_check(&v, MAX), 0);
  weir__valve_free(&v);
}

/* Random events on 4 inputs: the invariants hold after each, the clock
 * never goes back, and it never passes an active input that caught up. */
Test(watermark, valve_random_scripts_keep_the_invariants) {
  uint64_t rng = 42;
  for (int round = 0; round < 200; round++) {
    weir__valve v;
    weir__valve_init(&v, 4);
    int64_t prev = v.out, top[4] = {0, 0, 0, 0};
    for (int step = 0; step < 100; step++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      uint32_t i = (uint32_t)(rng >> 33) % 4, what = (uint32_t)(rng >> 40) % 10;
      if (what < 7) {
        top[i] += (int64_t)((rng >> 20) % 50) - 10;
        weir__valve_watermark(&v, i, top[i]);
      } else if (what < 9) {
        weir__valve_idle(&v, i);
      } else if (step > 80) {
        weir__valve_ended(&v, i);
      }
      cr_assert_eq(weir__valve_check(&v, prev), 0, "round %d step %d", round, step);
      for (uint32_t k = 0; k < 4; k++)
        if (v.st[k] == WEIR__VIN_ACTIVE && v.wm[k] >= prev)
          cr_assert_leq(v.out, v.wm[k], "round %d step %d: clock past input %u", round, step, k);
      prev = v.out;
    }
    weir__valve_free(&v);
  }
}

/* ---- the generator ------------------------------------------------------- */

static weir_watermark_strategy strat(int64_t d, uint32_t interval_ms, uint32_t idle_ms) {
  return (weir_watermark_strategy){.size = sizeof(weir_watermark_strategy),
                                   .out_of_orderness = d,
                                   .interval_ms = interval_ms,
                                   .idle_timeout_ms = idle_ms};
}

Test(watermark, generator_bounds_out_of_orderness_per_interval) {
  weir__wmgen g;
  weir_watermark_strategy s = strat(10, 1, 0);
  weir__wmgen_init(&g, &s, 0);
  weir__wmgen_note(&g, 100);
  weir__wmgen_note(&g, 95); /* out of order: the largest counts */
  cr_assert_eq(weir__wmgen_tick(&g, MS / 2, 0), WEIR__WM_NONE); /* not due */
  cr_assert_eq(weir__wmgen_tick(&g, MS, 0), WEIR__WM_ADVANCE);
  cr_assert_eq(g.out, 89); /* 100 - 10 - 1 */
  weir__wmgen_note(&g, 50);
  cr_assert_eq(weir__wmgen_tick(&g, 2 * MS, 0), WEIR__WM_NONE);
  cr_assert_eq(g.out, 89);
  /* No record yet: no watermark (MIN - D does not wrap). */
  weir__wmgen_free(&g);
  weir__wmgen_init(&g, &s, 0);
  cr_assert_eq(weir__wmgen_tick(&g, MS, 0), WEIR__WM_NONE);
  weir__wmgen_note(&g, MIN + 3);
  cr_assert_eq(weir__wmgen_tick(&g, 2 * MS, 0), WEIR__WM_NONE);
  cr_assert_eq(g.out, MIN);
  weir__wmgen_free(&g);
}

Test(watermark, generator_takes_the_slowest_split) {
  weir__wmgen g;
  weir_watermark_strategy s = strat(0, 1, 0);
  weir__wmgen_init(&g, &s, 0);
  weir__wmgen_split(&g, 0, 0);
  weir__wmgen_note(&g, 100);
  weir__wmgen_split(&g, 1, 0);
  weir__wmgen_note(&g, 30);
  weir__wmgen_split(&g, 2, 0); /* begun, nothing yet: holds at MIN */
  cr_assert_eq(weir__wmgen_tick(&g, MS, 0), WEIR__WM_NONE);
  weir__wmgen_note(&g, 60);
  cr_assert_eq(weir__wmgen_tick(&g, 2 * MS, 0), WEIR__WM_ADVANCE);
  cr_assert_eq(g.out, 29);
  weir__wmgen_split_end(&g, 1);
  cr_assert_eq(weir__wmgen_tick(&g, 3 * MS, 0), WEIR__WM_ADVANCE);
  cr_assert_eq(g.out, 59);
  weir__wmgen_free(&g);
  /* A source that names split 3 first never had a split 0. */
  weir__wmgen_init(&g, &s, 0);
  weir__wmgen_split(&g, 3, 0);
  weir__wmgen_note(&g, 10);
  cr_assert_eq(weir__wmgen_tick(&g, MS, 0), WEIR__WM_ADVANCE);
  cr_assert_eq(g.out, 9);
  weir__wmgen_free(&g);
}

Test(watermark, generator_idleness) {
  weir__wmgen g;
  weir_watermark_strategy s = strat(0, 1, 5);
  weir__wmgen_init(&g, &s, 0);
  weir__wmgen_split(&g, 0, 0);
  weir__wmgen_note(&g, 100);
  weir__wmgen_split(&g, 1, 0);
  weir__wmgen_note(&g, 10);
  cr_assert_eq(weir__wmgen_tick(&g, MS, 0), WEIR__WM_ADVANCE);
  cr_assert_eq(g.out, 9);
  /* Split 1 falls silent; split 0 goes on. After 5 ms split 1 is idle. */
  uint64_t now = MS;
  weir__wm_result r = WEIR__WM_NONE;
  for (int i = 0; i < 4; i++) {
    now += MS;
    weir__wmgen_split(&g, 0, now);
    weir__wmgen_note(&g, 200 + i);
    r = weir__wmgen_tick(&g, now, 0);
    cr_assert_eq(r, WEIR__WM_NONE, "tick %d", i); /* split 1 still holds */
  }
  now += 2 * MS;
  weir__wmgen_note(&g, 300);
  cr_assert_eq(weir__wmgen_tick(&g, now, 0), WEIR__WM_ADVANCE);
  cr_assert_eq(g.out, 299);
  /* Everything silent: the subtask goes idle, once. */
  now += 6 * MS;
  cr_assert_eq(weir__wmgen_tick(&g, now, 0), WEIR__WM_GONE_IDLE);
  cr_assert_eq(weir__wmgen_tick(&g, now + MS, 0), WEIR__WM_NONE);
  /* Split 1 speaks again behind the clock: active again, clock restated. */
  weir__wmgen_split(&g, 1, now);
  weir__wmgen_note(&g, 20);
  cr_assert_eq(weir__wmgen_tick(&g, now + 2 * MS, 0), WEIR__WM_ADVANCE);
  cr_assert_eq(g.out, 299);
  weir__wmgen_free(&g);
}

/* ---- in a running job ------------------------------------------------------ */

/* A source of n records per subtask with timestamps base + i * step (in
 * order), paced: `per_run` records, then idle for pace_us. Subtask `mute`
 * (if >= 0) emits nothing until every other subtask is done. */
typedef struct {
  uint64_t n;
  int64_t base, step;
  uint32_t per_run, pace_us;
  int mute;
  atomic_int done;
  int64_t finish_clock; /* the source task's clock in a chained op's finish */
} tsrc_cfg;

static int tsrc_open(weir_ctx *ctx) {
  uint64_t *next = calloc(1, sizeof *next);
  if (!next) return WEIR_ENOMEM;
  weir_ctx_set_user(ctx, next);
  return 0;
}

static int tsrc_run(weir_ctx *ctx, uint32_t budget) {
  tsrc_cfg *c = weir_ctx_arg(ctx);
  uint64_t *next = weir_ctx_user(ctx);
  uint32_t sub = weir_ctx_subtask(ctx), par = weir_ctx_parallelism(ctx);
  if ((int)sub == c->mute) {
    if (atomic_load(&c->done) >= (int)par - 1) return WEIR_SOURCE_DONE;
    weir_ctx_wake_after(ctx, 500);
    return WEIR_SOURCE_IDLE;
  }
  uint32_t k = budget < c->per_run ? budget : c->per_run;
  for (uint32_t j = 0; j < k && *next < c->n; j++, (*next)++) {
    uint64_t i = *next;
    weir_record r = {.key = i * par + sub,
                     .ts = c->base + (int64_t)i * c->step,
                     .id = weir_source_record_id(ctx, sub, i),
                     .payload = NULL,
                     .len = 0};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
  }
  if (*next == c->n) {
    atomic_fetch_add(&c->done, 1);
    return WEIR_SOURCE_DONE;
  }
  weir_ctx_wake_after(ctx, c->pace_us);
  return WEIR_SOURCE_IDLE;
}

static void tsrc_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

static const weir_source_vt tsrc_vt = {.size = sizeof(weir_source_vt),
                                       .name = "tsrc",
                                       .open = tsrc_open,
                                       .run = tsrc_run,
                                       .close = tsrc_close};

/* An operator that checks each record against its subtask's clock. */
typedef struct {
  atomic_uint_fast64_t records, late, backwards, advances;
  _Atomic int64_t max_clock; /* the largest clock seen while processing */
  atomic_int finish_at_max, finish_not_max;
} watch_cfg;

typedef struct {
  int64_t last;
} watch_st;

static int watch_open(weir_ctx *ctx) {
  watch_st *st = calloc(1, sizeof *st);
  if (!st) return WEIR_ENOMEM;
  st->last = MIN;
  weir_ctx_set_user(ctx, st);
  return 0;
}

static int watch_process(weir_ctx *ctx, const weir_record *r) {
  watch_cfg *c = weir_ctx_arg(ctx);
  watch_st *st = weir_ctx_user(ctx);
  int64_t w = weir_ctx_watermark(ctx);
  atomic_fetch_add(&c->records, 1);
  if (r->ts <= w) atomic_fetch_add(&c->late, 1);
  if (w < st->last) atomic_fetch_add(&c->backwards, 1);
  if (w > st->last) atomic_fetch_add(&c->advances, 1);
  st->last = w;
  int64_t m = atomic_load(&c->max_clock);
  while (w > m && !atomic_compare_exchange_weak(&c->max_clock, &m, w)) {
  }
  return weir_emit(ctx, r->key, NULL, 0);
}

static int watch_finish(weir_ctx *ctx) {
  watch_cfg *c = weir_ctx_arg(ctx);
  if (weir_ctx_watermark(ctx) == MAX)
    atomic_fetch_add(&c->finish_at_max, 1);
  else
    atomic_fetch_add(&c->finish_not_max, 1);
  return 0;
}

static void watch_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

static const weir_operator_vt watch_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "watch",
                                          .open = watch_open,
                                          .process = watch_process,
                                          .finish = watch_finish,
                                          .close = watch_close};

static void watch_init(watch_cfg *w) {
  memset(w, 0, sizeof *w);
  atomic_store(&w->max_clock, MIN);
}

static weir_job *new_job(const char *name) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, name), 0);
  return job;
}

static void run_job(weir_job *job) {
  weir_run_opts o = {.workers = 2, .buffer_timeout_us = 200};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
}

/* In-order timestamps from two source subtasks through a key-by to two
 * subtasks: the clock is the minimum of the two sources' watermarks, so no
 * record is late; it advances, never goes back, and is +inf in finish.
 * An operator chained to the source sees the source's own clock. */
Test(watermark, through_a_shuffle_no_record_is_late) {
  tsrc_cfg sc = {.n = 20000, .base = 1000, .step = 1, .per_run = 64, .pace_us = 100, .mute = -1};
  watch_cfg chained, keyed;
  watch_init(&chained);
  watch_init(&keyed);
  weir_job *job = new_job("wm_shuffle");
  weir_watermark_strategy s = strat(0, 1, 0);
  weir_stream *st = weir_with_watermarks(weir_source(job, "src", &tsrc_vt, &sc, 2), &s);
  cr_assert_not_null(st);
  st = weir_process(st, "chained", &watch_vt, &chained, 2);
  st = weir_process(weir_key_by(st), "keyed", &watch_vt, &keyed, 2);
  cr_assert_eq(weir_sink_to(st, "out", "null", NULL, 2), 0);
  run_job(job);
  watch_cfg *all[] = {&chained, &keyed};
  for (int k = 0; k < 2; k++) {
    watch_cfg *w = all[k];
    cr_assert_eq(atomic_load(&w->records), 40000, "%d", k);
    cr_assert_eq(atomic_load(&w->late), 0, "%d: %llu late", k,
                 (unsigned long long)atomic_load(&w->late));
    cr_assert_eq(atomic_load(&w->backwards), 0, "%d", k);
    /* 20000 records at 64 per 100 us: tens of 1 ms ticks. */
    cr_assert_geq(atomic_load(&w->advances), 4, "%d: %llu advances", k,
                  (unsigned long long)atomic_load(&w->advances));
    cr_assert_gt(atomic_load(&w->max_clock), 1000, "%d", k);
    cr_assert_lt(atomic_load(&w->max_clock), 1000 + 20000, "%d", k);
    cr_assert_eq(atomic_load(&w->finish_at_max), 2, "%d", k);
  }
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* A union of a source far ahead in event time and one far behind: the
 * clock follows the one behind, whose records are then never late (a
 * valve that took the maximum, or ignored an input, would make them so). */
Test(watermark, a_union_follows_the_slower_input) {
  tsrc_cfg ahead = {
      .n = 20000, .base = 1000000, .step = 1, .per_run = 64, .pace_us = 100, .mute = -1};
  tsrc_cfg behind = {.n = 20000, .base = 0, .step = 1, .per_run = 64, .pace_us = 100, .mute = -1};
  watch_cfg w;
  watch_init(&w);
  weir_job *job = new_job("wm_union");
  weir_watermark_strategy s = strat(0, 1, 0);
  weir_stream *a = weir_with_watermarks(weir_source(job, "ahead", &tsrc_vt, &ahead, 1), &s);
  weir_stream *b = weir_with_watermarks(weir_source(job, "behind", &tsrc_vt, &behind, 1), &s);
  weir_stream *u = weir_union(weir_rebalance(a), weir_rebalance(b));
  u = weir_process(u, "watch", &watch_vt, &w, 1);
  cr_assert_eq(weir_sink_to(u, "out", "null", NULL, 1), 0);
  run_job(job);
  cr_assert_eq(atomic_load(&w.records), 40000);
  cr_assert_eq(atomic_load(&w.late), 0, "%llu late", (unsigned long long)atomic_load(&w.late));
  cr_assert_eq(atomic_load(&w.backwards), 0);
  cr_assert_geq(atomic_load(&w.advances), 2);
  cr_assert_eq(atomic_load(&w.finish_at_max), 1);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* A source subtask that emits nothing until the other is done: without an
 * idleness timeout it holds event time at MIN for the whole run; with one,
 * event time moves on with the other subtask. */
static int64_t max_clock_with_a_mute_subtask(uint32_t idle_ms) {
  tsrc_cfg sc = {.n = 20000, .base = 1000, .step = 1, .per_run = 64, .pace_us = 100, .mute = 1};
  watch_cfg w;
  watch_init(&w);
  weir_job *job = new_job("wm_idle");
  weir_watermark_strategy s = strat(0, 1, idle_ms);
  weir_stream *st = weir_with_watermarks(weir_source(job, "src", &tsrc_vt, &sc, 2), &s);
  st = weir_process(weir_rebalance(st), "watch", &watch_vt, &w, 1);
  cr_assert_eq(weir_sink_to(st, "out", "null", NULL, 1), 0);
  run_job(job);
  cr_assert_eq(atomic_load(&w.records), 20000);
  cr_assert_eq(atomic_load(&w.late), 0);
  cr_assert_eq(atomic_load(&w.finish_at_max), 1);
  weir_job_destroy(job);
  return atomic_load(&w.max_clock);
}

Test(watermark, an_idle_subtask_holds_back_only_without_a_timeout) {
  cr_assert_eq(max_clock_with_a_mute_subtask(0), MIN);
  int64_t m = max_clock_with_a_mute_subtask(5);
  cr_assert_gt(m, 1000, "max clock %lld", (long long)m);
  cr_assert_eq(th_leak_check(), 0);
}

/* Without a strategy, event time stays at MIN until the true end. */
Test(watermark, none_without_a_strategy) {
  tsrc_cfg sc = {.n = 5000, .base = 0, .step = 1, .per_run = 512, .pace_us = 100, .mute = -1};
  watch_cfg w;
  watch_init(&w);
  weir_job *job = new_job("wm_none");
  weir_stream *st = weir_source(job, "src", &tsrc_vt, &sc, 2);
  st = weir_process(weir_key_by(st), "watch", &watch_vt, &w, 2);
  cr_assert_eq(weir_sink_to(st, "out", "null", NULL, 2), 0);
  run_job(job);
  cr_assert_eq(atomic_load(&w.records), 10000);
  cr_assert_eq(atomic_load(&w.max_clock), MIN);
  cr_assert_eq(atomic_load(&w.finish_at_max), 2);
  weir_job_destroy(job);
}

/* A source emits ten records and falls quiet: its one watermark (the
 * largest ts - 1) reaches the operator downstream while it is quiet, not
 * only with the next advance. (The tick used to pass on the generator's
 * previous watermark, so a source's last one waited for another.) */
typedef struct {
  atomic_int stop;
  int sent;
} quiet_cfg;

static int quiet_run(weir_ctx *ctx, uint32_t budget) {
  (void)budget;
  quiet_cfg *c = weir_ctx_arg(ctx);
  if (atomic_load(&c->stop)) return WEIR_SOURCE_DONE;
  for (; c->sent < 10; c->sent++) {
    weir_record r = {.key = (uint64_t)c->sent,
                     .ts = 1000 + c->sent,
                     .id = weir_source_record_id(ctx, 0, (uint64_t)c->sent)};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
  }
  weir_ctx_wake_after(ctx, 1000);
  return WEIR_SOURCE_IDLE;
}

static const weir_source_vt quiet_vt = {
    .size = sizeof(weir_source_vt), .name = "quiet", .run = quiet_run};

typedef struct {
  weir_job *job;
  int rc;
} quiet_run_t;

static void *quiet_main(void *arg) {
  quiet_run_t *q = arg;
  weir_run_opts o = {.workers = 2, .buffer_timeout_us = 200};
  q->rc = weir_job_run(q->job, &o);
  return NULL;
}

Test(watermark, a_quiet_source_watermark_arrives) {
  quiet_cfg qc = {0};
  watch_cfg w;
  watch_init(&w);
  quiet_run_t q = {.job = new_job("wm_quiet")};
  weir_stream *st = weir_source(q.job, "src", &quiet_vt, &qc, 1);
  weir_watermark_strategy ws = {.size = sizeof ws, .out_of_orderness = 0, .interval_ms = 5};
  st = weir_with_watermarks(st, &ws);
  st = weir_process(weir_key_by(st), "watch", &watch_vt, &w, 1);
  cr_assert_eq(weir_sink_to(st, "out", "null", NULL, 1), 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, quiet_main, &q), 0);
  int64_t clock = MIN;
  for (int i = 0; i < 400 && clock < 1008; i++) {
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    weir_job_metrics m = {.size = sizeof m};
    weir_subtask_metrics sm[4];
    if (weir_job_metrics_read(q.job, &m, sm, 4) != 0) continue;
    for (size_t k = 0; k < m.nsubtasks && k < 4; k++)
      if (sm[k].op == 1) clock = sm[k].watermark;
  }
  atomic_store(&qc.stop, 1);
  pthread_join(th, NULL);
  cr_assert_eq(q.rc, 0, "%s", weir_job_error(q.job));
  cr_assert_eq(clock, 1008, "the operator's clock is %lld after 2 s of a quiet source",
               (long long)clock);
  weir_job_destroy(q.job);
}

/* A stop is not the end of input: finish sees the clock where it was. */
static void *stop_soon(void *arg) {
  weir_job *job = arg;
  struct timespec ts = {0, 100 * 1000 * 1000};
  nanosleep(&ts, NULL);
  weir_job_stop(job);
  return NULL;
}

Test(watermark, a_stop_does_not_end_event_time) {
  tsrc_cfg sc = {
      .n = UINT64_MAX, .base = 1000, .step = 1, .per_run = 64, .pace_us = 200, .mute = -1};
  watch_cfg w;
  watch_init(&w);
  weir_job *job = new_job("wm_stop");
  weir_watermark_strategy s = strat(0, 1, 0);
  weir_stream *st = weir_with_watermarks(weir_source(job, "src", &tsrc_vt, &sc, 2), &s);
  st = weir_process(weir_key_by(st), "watch", &watch_vt, &w, 2);
  cr_assert_eq(weir_sink_to(st, "out", "null", NULL, 2), 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, stop_soon, job), 0);
  run_job(job);
  pthread_join(th, NULL);
  cr_assert(weir_job_stopped(job));
  cr_assert_gt(atomic_load(&w.records), 0);
  cr_assert_eq(atomic_load(&w.finish_at_max), 0);
  cr_assert_eq(atomic_load(&w.finish_not_max), 2);
  weir_job_destroy(job);
}

/* ---- build errors ------------------------------------------------------ */

static void assert_contains(const char *s, const char *want) {
  cr_assert(s && strstr(s, want), "'%s' does not contain '%s'", s ? s : "(null)", want);
}

Test(watermark, misuse_is_a_build_error) {
  tsrc_cfg sc = {.n = 10, .per_run = 10, .mute = -1};
  watch_cfg w;
  watch_init(&w);
  weir_watermark_strategy s = strat(0, 0, 0);

  weir_job *job = new_job("wm_not_source");
  weir_stream *st = weir_source(job, "src", &tsrc_vt, &sc, 1);
  st = weir_process(st, "watch", &watch_vt, &w, 1);
  cr_assert_null(weir_with_watermarks(st, &s));
  assert_contains(weir_job_error(job), "not a source's own");
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  weir_job_destroy(job);

  job = new_job("wm_twice");
  st = weir_source(job, "src", &tsrc_vt, &sc, 1);
  cr_assert_not_null(weir_with_watermarks(st, &s));
  cr_assert_null(weir_with_watermarks(st, &s));
  assert_contains(weir_job_error(job), "already has a watermark strategy");
  weir_job_destroy(job);

  job = new_job("wm_negative");
  weir_watermark_strategy neg = strat(-5, 0, 0);
  cr_assert_null(weir_with_watermarks(weir_source(job, "src", &tsrc_vt, &sc, 1), &neg));
  assert_contains(weir_job_error(job), "out_of_orderness -5 is negative");
  weir_job_destroy(job);

  job = new_job("wm_unsized");
  weir_watermark_strategy unsized = {.out_of_orderness = 1};
  cr_assert_null(weir_with_watermarks(weir_source(job, "src", &tsrc_vt, &sc, 1), &unsized));
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EABI);
  weir_job_destroy(job);

  /* Event time and an iteration in one job. */
  job = new_job("wm_loop");
  st = weir_with_watermarks(weir_source(job, "src", &tsrc_vt, &sc, 1), &s);
  weir_stream *body = NULL;
  weir_iteration *it = weir_iterate(st, "head", 1, &body);
  cr_assert_not_null(it);
  weir_stream *fb = weir_process(body, "watch", &watch_vt, &w, 1);
  cr_assert_eq(weir_iteration_close(it, fb), 0);
  cr_assert_eq(weir_sink_to(fb, "out", "null", NULL, 1), 0);
  cr_assert_eq(weir_job_run(job, NULL), WEIR_EPLAN);
  assert_contains(weir_job_error(job), "event time is not defined inside a loop");
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}
