/* test_windows.c: the window operator (operators/window.c,
 * docs/event-time.md §8) against a reference computed here from the same
 * generated records: tumbling and sliding event-time windows with
 * out-of-order input exact when no record is further behind than the
 * source's bound; late records in the side output, conserving each
 * window's count; allowed lateness firing windows again and ending exact;
 * a stop and a restore at another parallelism exact; processing-time
 * windows counting every record; bad specs refused at build time. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/operators.h"
#include "weir/weir.h"

#define N 40000u /* records: i has key i % K, ts i - disorder(i), payload i */
#define K 40u
#define MAXW 512u /* windows per key tracked: ends / slide below this */

typedef struct cfg {
  uint64_t disorder; /* records are up to this much behind */
  int64_t bound;     /* the source's out-of-orderness */
  weir_window_spec spec;
  const weir_aggregate_vt *agg;
  uint64_t rate;       /* source records/s (0: unpaced) */
  uint64_t stop_after; /* stop run 1 after this many results (0: never) */
  int apply;           /* weir_window_apply with sum_fn (the reference: agg's) */
} cfg;

static cfg C;
static weir_job *cur_job;
static int cur_drain; /* stop_after drains instead of stopping */

static int64_t ts_of(uint64_t i) {
  uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 31;
  return (int64_t)i + 1000 - (int64_t)(C.disorder ? h % (C.disorder + 1) : 0);
}

static int64_t slide(void) {
  return C.spec.kind == WEIR_WINDOW_SLIDING ? C.spec.slide : C.spec.length;
}

/* ---- the source ------------------------------------------------------------- */

static int emit_record(weir_ctx *ctx, uint64_t i, void *user) {
  (void)user;
  return weir_emit_at(ctx, i % K, ts_of(i), &i, 8);
}
static th_seq records = {.n = N, .emit = emit_record, .rate = &C.rate};

/* ---- what comes out ------------------------------------------------------------ */

typedef struct got {
  _Atomic uint64_t value[K][MAXW];
  _Atomic uint32_t firing[K][MAXW]; /* the highest firing seen */
  _Atomic uint32_t fired[K][MAXW];  /* results seen */
  _Atomic uint64_t late[K][MAXW];   /* late records of the window (tumbling) */
  _Atomic uint64_t results, late_total, bad;
} got;
static got G;

static int result_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  weir_window_result wr;
  if (weir_window_result_parse(r, &wr) || wr.len != 8 || r->key >= K ||
      wr.end - wr.start != C.spec.length || r->ts != wr.end - 1 || wr.end % slide() != 0 ||
      wr.end / slide() >= (int64_t)MAXW) {
    atomic_fetch_add(&G.bad, 1);
    return 0;
  }
  uint64_t v = 0;
  memcpy(&v, wr.value, 8);
  uint64_t w = (uint64_t)(wr.end / slide());
  atomic_fetch_add(&G.fired[r->key][w], 1);
  if (wr.firing > atomic_load(&G.firing[r->key][w])) {
    atomic_store(&G.firing[r->key][w], wr.firing);
    atomic_store(&G.value[r->key][w], v);
  }
  uint64_t n = atomic_fetch_add(&G.results, 1) + 1;
  if (C.stop_after && n == C.stop_after) (cur_drain ? weir_job_drain : weir_job_stop)(cur_job);
  return 0;
}
static const weir_operator_vt result_vt = {
    .size = sizeof(weir_operator_vt), .name = "results", .process = result_process};

/* A late record: it belongs to every window holding its timestamp. */
static int late_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t i = weir_payload_u64(r);
  if (i >= N || r->ts != ts_of(i)) {
    atomic_fetch_add(&G.bad, 1);
    return 0;
  }
  int64_t ts = ts_of(i);
  for (int64_t s = ts - ts % slide(); s > ts - C.spec.length; s -= slide()) {
    int64_t w = (s + C.spec.length) / slide();
    if (w >= (int64_t)MAXW)
      atomic_fetch_add(&G.bad, 1);
    else
      atomic_fetch_add(&G.late[r->key][w], 1);
  }
  atomic_fetch_add(&G.late_total, 1);
  return 0;
}
static const weir_operator_vt late_vt = {
    .size = sizeof(weir_operator_vt), .name = "late", .process = late_process};

/* A record that missed one of its (sliding) windows: counts for that one. */
static _Atomic uint64_t missed_total;
static int missed_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  weir_window_result m;
  uint64_t i = 0;
  if (weir_window_missed_parse(r, &m) || m.len != 8 || m.end - m.start != C.spec.length ||
      m.end % slide() || m.end / slide() >= (int64_t)MAXW) {
    atomic_fetch_add(&G.bad, 1);
    return 0;
  }
  memcpy(&i, m.value, 8);
  if (i >= N || ts_of(i) < m.start || ts_of(i) >= m.end) atomic_fetch_add(&G.bad, 1);
  atomic_fetch_add(&G.late[r->key][m.end / slide()], 1);
  atomic_fetch_add(&missed_total, 1);
  return 0;
}
static const weir_operator_vt missed_vt = {
    .size = sizeof(weir_operator_vt), .name = "missed", .process = missed_process};

/* A full-window function: the sum of the records' payloads, each checked
 * to be in the window; it first asks for more room than it needs, so
 * that its records are read twice. */
static int sum_fn(void *user, uint64_t key, const weir_window *w, weir_window_records *it,
                  void *out, size_t cap, size_t *len) {
  (void)user;
  if (cap < 300) {
    *len = 300;
    return 0;
  }
  uint64_t sum = 0;
  weir_record r;
  while (weir_window_next(it, &r)) {
    uint64_t i = weir_payload_u64(&r);
    if (r.key != key || i >= N || r.ts != ts_of(i) || r.ts < w->start || r.ts >= w->end)
      return WEIR_EBADREC;
    sum += i;
  }
  memcpy(out, &sum, 8);
  *len = 8;
  return 0;
}

/* ---- the reference ---------------------------------------------------------------- */

static uint64_t ref[K][MAXW];
static uint8_t has[K][MAXW];

static void reference(void) {
  memset(ref, 0, sizeof ref);
  memset(has, 0, sizeof has);
  int sum = C.agg == &weir_agg_sum_u64;
  for (uint64_t i = 0; i < N; i++) {
    int64_t ts = ts_of(i), s = ts - ts % slide();
    for (; s > ts - C.spec.length; s -= slide()) {
      uint64_t w = (uint64_t)((s + C.spec.length) / slide());
      cr_assert_lt(w, MAXW);
      ref[i % K][w] += sum ? i : 1;
      has[i % K][w] = 1;
    }
  }
}

/* ---- runs --------------------------------------------------------------------------- */

static weir_job *build(int p) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "windows"), 0);
  weir_watermark_strategy ws = {.size = sizeof ws, .out_of_orderness = C.bound, .interval_ms = 1};
  weir_stream *src = weir_source(job, "records", &th_seq_vt, &records, 1);
  if (C.spec.time == WEIR_EVENT_TIME) src = weir_with_watermarks(src, &ws);
  weir_stream *w = C.apply ? weir_window_apply(weir_key_by(src), "w", &C.spec, sum_fn, NULL, p)
                           : weir_window_aggregate(weir_key_by(src), "w", &C.spec, C.agg, NULL, p);
  cr_assert_not_null(w, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(w), "results", &result_vt, NULL, 1), 0);
  cr_assert_eq(
      weir_sink(weir_rebalance(weir_side_output(w, WEIR_TAG_LATE)), "late", &late_vt, NULL, 1), 0,
      "%s", weir_job_error(job));
  if (C.spec.kind == WEIR_WINDOW_SLIDING)
    cr_assert_eq(weir_sink(weir_rebalance(weir_side_output(w, WEIR_TAG_MISSED)), "missed",
                           &missed_vt, NULL, 1),
                 0, "%s", weir_job_error(job));
  cur_job = job;
  return job;
}

static void run(int p, const char *state, int restore) {
  weir_job *job = build(p);
  weir_run_opts o = th_event_run_opts(state, restore);
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
}

static weir_window_spec tumbling(int64_t len) {
  return (weir_window_spec){.size = sizeof(weir_window_spec),
                            .kind = WEIR_WINDOW_TUMBLING,
                            .time = WEIR_EVENT_TIME,
                            .length = len};
}

/* Every window of the reference fired with its value, and nothing else. */
static void assert_exact(int once) {
  cr_assert_eq(atomic_load(&G.bad), 0);
  for (uint32_t k = 0; k < K; k++)
    for (uint32_t w = 0; w < MAXW; w++) {
      if (!has[k][w]) {
        cr_assert_eq(atomic_load(&G.fired[k][w]), 0, "window %u of key %u should not exist", w, k);
        continue;
      }
      cr_assert_gt(atomic_load(&G.fired[k][w]), 0, "window %u of key %u never fired", w, k);
      if (once) cr_assert_eq(atomic_load(&G.fired[k][w]), 1, "window %u of key %u", w, k);
      cr_assert_eq(atomic_load(&G.value[k][w]), ref[k][w], "window %u of key %u: %llu, want %llu",
                   w, k, (unsigned long long)atomic_load(&G.value[k][w]),
                   (unsigned long long)ref[k][w]);
    }
}

TestSuite(windows, .timeout = 120);

Test(windows, tumbling_out_of_order_exact) {
  C = (cfg){.disorder = 30, .bound = 30, .spec = tumbling(100), .agg = &weir_agg_count};
  reference();
  run(2, NULL, 0);
  assert_exact(1);
  cr_assert_eq(atomic_load(&G.late_total), 0);
}

Test(windows, sliding_sum_exact) {
  C = (cfg){.disorder = 50, .bound = 50, .agg = &weir_agg_sum_u64};
  C.spec = (weir_window_spec){.size = sizeof(weir_window_spec),
                              .kind = WEIR_WINDOW_SLIDING,
                              .time = WEIR_EVENT_TIME,
                              .length = 400,
                              .slide = 100};
  reference();
  run(3, NULL, 0);
  assert_exact(1);
}

/* weir_window_apply: the same sums from the records themselves. */
Test(windows, apply_sliding_sum_exact) {
  C = (cfg){.disorder = 50, .bound = 50, .agg = &weir_agg_sum_u64, .apply = 1};
  C.spec = (weir_window_spec){.size = sizeof(weir_window_spec),
                              .kind = WEIR_WINDOW_SLIDING,
                              .time = WEIR_EVENT_TIME,
                              .length = 400,
                              .slide = 100};
  reference();
  run(3, NULL, 0);
  assert_exact(1);
}

/* Runs C (its lateness covering its disorder) at parallelism 2: nothing
 * is late, every window ends exact, and some fired again (else the
 * lateness part tests nothing). */
static void assert_fires_again_exact(void) {
  reference();
  run(2, NULL, 0);
  assert_exact(0);
  cr_assert_eq(atomic_load(&G.late_total), 0);
  uint32_t again = 0;
  for (uint32_t k = 0; k < K; k++)
    for (uint32_t w = 0; w < MAXW; w++) again += atomic_load(&G.firing[k][w]) > 1;
  cr_assert_gt(again, 0, "no window fired twice: the lateness part tests nothing");
}

/* Runs C at parallelism 2, stopped after K * 100 results, then restored
 * at 3 to the end: every window fires once, exact (state and timers came
 * back and moved). */
static void assert_stop_restore_exact(void) {
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  memset(&G, 0, sizeof G);
  C.stop_after = K * 100;
  reference();
  run(2, state, 0);
  uint64_t windows = 0;
  for (uint32_t k = 0; k < K; k++)
    for (uint32_t w = 0; w < MAXW; w++) windows += has[k][w];
  cr_assert_lt(atomic_load(&G.results), windows, "run 1 was not stopped part-way");
  C.stop_after = 0;
  C.rate = 0;
  run(3, state, 1);
  assert_exact(1);
  th_rmrf(state);
  free(state);
}

/* weir_window_apply under allowed lateness: a window fired early fires
 * again with all its records; stopped and restored at another
 * parallelism, the kept records come back. */
Test(windows, apply_lateness_and_restore_exact) {
  C = (cfg){.disorder = 400,
            .bound = 10,
            .spec = tumbling(100),
            .agg = &weir_agg_sum_u64,
            .rate = 100000,
            .apply = 1};
  C.spec.allowed_lateness = 500;
  assert_fires_again_exact();
  C = (cfg){.disorder = 30,
            .bound = 30,
            .spec = tumbling(100),
            .agg = &weir_agg_sum_u64,
            .rate = 200000,
            .apply = 1};
  assert_stop_restore_exact();
}

/* Records further behind than the bound: some are late. Every window's
 * count plus its late records is the reference. */
Test(windows, late_records_go_to_the_side_output_and_conserve_counts) {
  /* Paced, so that watermarks come between the records. */
  C = (cfg){
      .disorder = 400, .bound = 10, .spec = tumbling(100), .agg = &weir_agg_count, .rate = 100000};
  reference();
  run(2, NULL, 0);
  cr_assert_eq(atomic_load(&G.bad), 0);
  cr_assert_gt(atomic_load(&G.late_total), 0, "no record was late: the test tests nothing");
  for (uint32_t k = 0; k < K; k++)
    for (uint32_t w = 0; w < MAXW; w++) {
      uint64_t fired = atomic_load(&G.fired[k][w]) ? atomic_load(&G.value[k][w]) : 0;
      cr_assert_eq(fired + atomic_load(&G.late[k][w]), ref[k][w], "window %u of key %u", w, k);
      cr_assert_leq(atomic_load(&G.fired[k][w]), 1);
    }
}

/* Sliding: a record late for some of its windows counts in the others and
 * is in "missed" once per window it missed; every window's last count plus
 * its late and missed records is the reference, whatever the timing. */
Test(windows, sliding_late_and_missed_conserve_counts) {
  C = (cfg){.disorder = 400, .bound = 10, .agg = &weir_agg_count, .rate = 100000};
  C.spec = (weir_window_spec){.size = sizeof(weir_window_spec),
                              .kind = WEIR_WINDOW_SLIDING,
                              .time = WEIR_EVENT_TIME,
                              .length = 400,
                              .slide = 100};
  atomic_store(&missed_total, 0);
  reference();
  run(2, NULL, 0);
  cr_assert_eq(atomic_load(&G.bad), 0);
  cr_assert_gt(atomic_load(&missed_total), 0, "no record missed a window: the test tests nothing");
  for (uint32_t k = 0; k < K; k++)
    for (uint32_t w = 0; w < MAXW; w++) {
      uint64_t fired = atomic_load(&G.fired[k][w]) ? atomic_load(&G.value[k][w]) : 0;
      cr_assert_eq(fired + atomic_load(&G.late[k][w]), ref[k][w], "window %u of key %u", w, k);
    }
}

/* With lateness covering the disorder nothing is late: windows fire again
 * for their late records and end exact. */
Test(windows, allowed_lateness_fires_again_and_ends_exact) {
  C = (cfg){
      .disorder = 400, .bound = 10, .spec = tumbling(100), .agg = &weir_agg_count, .rate = 100000};
  C.spec.allowed_lateness = 500;
  assert_fires_again_exact();
}

/* Sliding windows by panes (an aggregate that merges, the length a
 * multiple of the slide): with lateness covering the disorder, windows
 * fire again for their late records and end exact; stopped part-way and
 * restored at another parallelism, panes, firing counts and timers come
 * back and every window fires once. */
static weir_window_spec sliding(int64_t len, int64_t slide, int64_t lateness) {
  return (weir_window_spec){.size = sizeof(weir_window_spec),
                            .kind = WEIR_WINDOW_SLIDING,
                            .time = WEIR_EVENT_TIME,
                            .length = len,
                            .slide = slide,
                            .allowed_lateness = lateness};
}

Test(windows, sliding_panes_lateness_and_restore_exact) {
  C = (cfg){.disorder = 400,
            .bound = 10,
            .spec = sliding(400, 100, 500),
            .agg = &weir_agg_sum_u64,
            .rate = 100000};
  assert_fires_again_exact();
  C = (cfg){.disorder = 30,
            .bound = 30,
            .spec = sliding(400, 100, 0),
            .agg = &weir_agg_sum_u64,
            .rate = 200000};
  assert_stop_restore_exact();
}

/* Stopped part-way and restored at another parallelism: window state and
 * timers come back, each window fires once. */
Test(windows, stop_and_restore_at_another_parallelism_exact) {
  C = (cfg){
      .disorder = 30, .bound = 30, .spec = tumbling(100), .agg = &weir_agg_count, .rate = 200000};
  assert_stop_restore_exact();
}

/* A drain ends the job for good: every window that got records fires
 * (also those whose end the event time had not reached), once, with
 * every record that reached the operator; the store marks the job
 * finished. A stop at the same point leaves open windows unfired. */
static uint64_t fired_sum(void) {
  uint64_t sum = 0;
  for (uint32_t k = 0; k < K; k++)
    for (uint32_t w = 0; w < MAXW; w++) {
      cr_assert_leq(atomic_load(&G.fired[k][w]), 1, "window %u of key %u fired again", w, k);
      sum += atomic_load(&G.value[k][w]);
    }
  return sum;
}

static uint64_t stopped_run(const char *state, int drain, int *how) {
  memset(&G, 0, sizeof G);
  C = (cfg){.disorder = 30,
            .bound = 30,
            .spec = tumbling(100),
            .agg = &weir_agg_count,
            .rate = 200000,
            .stop_after = K * 50};
  weir_job *job = build(2);
  cur_drain = drain;
  weir_run_opts o = th_event_run_opts(state, 0);
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  uint64_t in = 0, out = 0;
  cr_assert_eq(weir_job_operator_counts(job, "w", &in, &out), 0);
  *how = weir_job_stopped(job);
  weir_job_destroy(job);
  cur_drain = 0;
  cr_assert_lt(in, N, "the run was not stopped part-way");
  return in;
}

Test(windows, drain_fires_every_window_and_finishes_the_job) {
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  int how = 0;
  uint64_t in = stopped_run(state, 1, &how);
  cr_assert_eq(how, 2, "weir_job_stopped: %d", how);
  cr_assert_eq(atomic_load(&G.late_total), 0);
  cr_assert_eq(fired_sum(), in, "windows hold %llu of the %llu records that reached them",
               (unsigned long long)fired_sum(), (unsigned long long)in);
  /* Finished: a restore has nothing to resume. */
  weir_job *job = build(2);
  weir_run_opts o = th_event_run_opts(state, 1);
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert(weir_job_run_info(job)->already_finished, "a drained job is not finished");
  weir_job_destroy(job);
  th_rmrf(state);

  /* The control: a stop at the same point leaves windows open. */
  cr_assert_not_null(state);
  in = stopped_run(state, 0, &how);
  cr_assert_eq(how, 1);
  cr_assert_lt(fired_sum(), in, "a stop fired every window: the drain part tests nothing");
  th_rmrf(state);
  free(state);
}

static _Atomic uint64_t pt_total, pt_results;
static int pt_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  weir_window_result wr;
  uint64_t v = 0;
  if (weir_window_result_parse(r, &wr) == 0 && wr.len == 8) memcpy(&v, wr.value, 8);
  atomic_fetch_add(&pt_total, v);
  atomic_fetch_add(&pt_results, 1);
  return 0;
}
static const weir_operator_vt pt_vt = {
    .size = sizeof(weir_operator_vt), .name = "pt", .process = pt_process};

Test(windows, processing_time_counts_every_record) {
  C = (cfg){.agg = &weir_agg_count, .rate = 100000};
  C.spec = (weir_window_spec){.size = sizeof(weir_window_spec),
                              .kind = WEIR_WINDOW_TUMBLING,
                              .time = WEIR_PROCESSING_TIME,
                              .length = 50};
  /* Windows of the wall clock: which window a record joins is not
   * deterministic, but every record is counted once. */
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "pt"), 0);
  weir_stream *w =
      weir_window_aggregate(weir_key_by(weir_source(job, "records", &th_seq_vt, &records, 1)), "w",
                            &C.spec, C.agg, NULL, 2);
  cr_assert_not_null(w, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(w, "sum", &pt_vt, NULL, 2), 0, "%s", weir_job_error(job));
  weir_run_opts o = {.workers = 2};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(atomic_load(&pt_total), N);
  cr_assert_geq(atomic_load(&pt_results), K * 2, "the records spread over one window only?");
  weir_job_destroy(job);
}

static void refused(const weir_window_spec *spec, const char *want) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "bad"), 0);
  cr_assert_null(
      weir_window_aggregate(weir_key_by(weir_source(job, "records", &th_seq_vt, &records, 1)), "w",
                            spec, &weir_agg_count, NULL, 1));
  cr_assert_eq(weir_job_build_error(job), WEIR_EPLAN);
  cr_assert(strstr(weir_job_error(job), want), "%s", weir_job_error(job));
  weir_job_destroy(job);
}

Test(windows, bad_specs_are_build_errors) {
  weir_window_spec s = tumbling(0);
  refused(&s, "window 'w': length must be positive");
  s = tumbling(100);
  s.kind = WEIR_WINDOW_SLIDING;
  s.slide = 200;
  refused(&s, "a sliding window needs 0 < slide <= length");
  s = tumbling(100);
  s.time = WEIR_PROCESSING_TIME;
  s.allowed_lateness = 10;
  refused(&s, "processing-time windows are tumbling, without lateness");
  /* On a stream that is not keyed. */
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "bad"), 0);
  s = tumbling(100);
  cr_assert_null(weir_window_aggregate(weir_source(job, "records", &th_seq_vt, &records, 1), "w",
                                       &s, &weir_agg_count, NULL, 1));
  cr_assert(strstr(weir_job_error(job), "but its input is not keyed"), "%s", weir_job_error(job));
  weir_job_destroy(job);
}

/* A result's line and operation id: a window fired again is a new effect
 * ("<key>.<end>.<firing>"), and a record that is no result is named as such. */
Test(windows, result_format_and_operation_id) {
  uint8_t p[32];
  int64_t start = -500, end = 500;
  uint32_t firing = 2;
  uint64_t v = 42;
  memcpy(p, &start, 8); /* little-endian machines: the header's layout */
  memcpy(p + 8, &end, 8);
  memcpy(p + 16, &firing, 4);
  memset(p + 20, 0, 4);
  memcpy(p + 24, &v, 8);
  weir_record r = {.key = 7, .ts = 499, .id = 1, .payload = p, .len = sizeof p};
  char buf[64];
  cr_assert_eq(weir_format_window(&r, buf, sizeof buf), strlen("7 -500 500 42"));
  cr_assert_str_eq(buf, "7 -500 500 42");
  cr_assert_eq(weir_opid_window(&r, buf, sizeof buf), strlen("7.500.2"));
  cr_assert_str_eq(buf, "7.500.2");
  r.len = 8;
  weir_format_window(&r, buf, sizeof buf);
  cr_assert_str_eq(buf, "7 ?");
}
