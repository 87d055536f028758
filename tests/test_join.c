/* test_join.c: the interval and window joins (operators/join.c) against
 * the pairs computed here from the same records: out-of-order input within
 * the sources' bound gives every matching pair exactly once (the window
 * join: once per window holding both), at timestamp max(a.ts, b.ts) (the
 * window's end - 1), and nothing else; late records go to their side
 * outputs and only pairs with a late record are missing; a stop and a
 * restore at another parallelism exact; misuse refused at build time. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/operators.h"
#include "weir/weir.h"

#define NA 4000u /* a_i: key i % K, ts 2i + 1000 - disorder */
#define NB 3000u /* b_j: key j % K, ts 3j + 1000 - disorder */
#define K 20u
#define LO 30
#define HI 50

typedef struct cfg {
  uint64_t disorder;
  int64_t bound;
  uint64_t rate, stop_after;
  weir_window_spec w; /* a window join when w.length > 0 */
} cfg;
static cfg C;
static weir_job *cur_job;

static uint64_t mix(uint64_t x) {
  x = (x + 1) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}
static int64_t ts_a(uint64_t i) {
  return 2 * (int64_t)i + 1000 - (int64_t)(C.disorder ? mix(i) % (C.disorder + 1) : 0);
}
static int64_t ts_b(uint64_t j) {
  return 3 * (int64_t)j + 1000 - (int64_t)(C.disorder ? mix(j ^ 0xabc) % (C.disorder + 1) : 0);
}

/* ---- sources: a and b ---------------------------------------------------------- */

static int emit_a(weir_ctx *ctx, uint64_t i, void *user) {
  (void)user;
  return weir_emit_at(ctx, i % K, ts_a(i), &i, 8);
}
static int emit_b(weir_ctx *ctx, uint64_t j, void *user) {
  (void)user;
  return weir_emit_at(ctx, j % K, ts_b(j), &j, 8);
}
static th_seq seq_a = {.n = NA, .emit = emit_a, .rate = &C.rate, .burst = 20};
static th_seq seq_b = {.n = NB, .emit = emit_b, .rate = &C.rate, .burst = 20};

/* ---- the join and what comes out ------------------------------------------------- */

static _Atomic uint8_t seen[NA][NB];
static _Atomic uint8_t late_a[NA], late_b[NB];
static _Atomic uint64_t pairs, bad;

static int pair(weir_ctx *ctx, void *user, const weir_record *a, const weir_record *b) {
  (void)user;
  uint64_t v[2] = {weir_payload_u64(a), weir_payload_u64(b)};
  return weir_emit(ctx, a->key, v, sizeof v);
}

static int result_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t v[2];
  if (r->len != sizeof v) {
    atomic_fetch_add(&bad, 1);
    return 0;
  }
  memcpy(v, r->payload, sizeof v);
  int64_t hi = v[0] < NA && v[1] < NB && ts_a(v[0]) > ts_b(v[1]) ? ts_a(v[0]) : ts_b(v[1]);
  int64_t lo = v[0] < NA && v[1] < NB && ts_a(v[0]) < ts_b(v[1]) ? ts_a(v[0]) : ts_b(v[1]);
  int ts_ok = C.w.length ? r->ts >= hi && r->ts < lo + C.w.length : r->ts == hi;
  if (v[0] >= NA || v[1] >= NB || !ts_ok) {
    atomic_fetch_add(&bad, 1);
    return 0;
  }
  atomic_fetch_add(&seen[v[0]][v[1]], 1);
  uint64_t n = atomic_fetch_add(&pairs, 1) + 1;
  if (C.stop_after && n == C.stop_after) weir_job_stop(cur_job);
  return 0;
}
static const weir_operator_vt result_vt = {
    .size = sizeof(weir_operator_vt), .name = "pairs", .process = result_process};

static int late1_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t i = weir_payload_u64(r);
  if (i < NA) atomic_store(&late_a[i], 1);
  return 0;
}
static int late2_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t j = weir_payload_u64(r);
  if (j < NB) atomic_store(&late_b[j], 1);
  return 0;
}
static const weir_operator_vt late1_vt = {
    .size = sizeof(weir_operator_vt), .name = "late1", .process = late1_process};
static const weir_operator_vt late2_vt = {
    .size = sizeof(weir_operator_vt), .name = "late2", .process = late2_process};

static int64_t floor_div(int64_t x, int64_t d) {
  return x / d - (x % d != 0 && x < 0);
}

/* How often a_i and b_j must be paired: once if they match in the
 * interval; for the window join, once per window that holds both. */
static int matches(uint64_t i, uint64_t j) {
  if (i % K != j % K) return 0;
  if (!C.w.length) return ts_a(i) - LO <= ts_b(j) && ts_b(j) <= ts_a(i) + HI;
  int64_t s = C.w.kind == WEIR_WINDOW_SLIDING ? C.w.slide : C.w.length, n = 0;
  int64_t lo = ts_a(i) < ts_b(j) ? ts_a(i) : ts_b(j), hi = ts_a(i) + ts_b(j) - lo;
  for (int64_t start = floor_div(lo, s) * s; start > lo - C.w.length; start -= s)
    n += hi < start + C.w.length;
  return (int)n;
}

static void reset(void) {
  memset((void *)seen, 0, sizeof seen);
  memset((void *)late_a, 0, sizeof late_a);
  memset((void *)late_b, 0, sizeof late_b);
  atomic_store(&pairs, 0);
  atomic_store(&bad, 0);
}

static weir_job *build(int p) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "join"), 0);
  weir_watermark_strategy ws = {.size = sizeof ws, .out_of_orderness = C.bound, .interval_ms = 1};
  weir_stream *a = weir_with_watermarks(weir_source(job, "a", &th_seq_vt, &seq_a, 1), &ws);
  weir_stream *b = weir_with_watermarks(weir_source(job, "b", &th_seq_vt, &seq_b, 1), &ws);
  weir_stream *j =
      C.w.length
          ? weir_window_join(weir_key_by(a), weir_key_by(b), "join", &C.w, pair, NULL, p)
          : weir_interval_join(weir_key_by(a), weir_key_by(b), "join", LO, HI, pair, NULL, p);
  cr_assert_not_null(j, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(j), "pairs", &result_vt, NULL, 1), 0);
  cr_assert_eq(
      weir_sink(weir_rebalance(weir_side_output(j, WEIR_TAG_LATE1)), "late1", &late1_vt, NULL, 1),
      0);
  cr_assert_eq(
      weir_sink(weir_rebalance(weir_side_output(j, WEIR_TAG_LATE2)), "late2", &late2_vt, NULL, 1),
      0);
  cur_job = job;
  return job;
}

static void run(int p, const char *state, int restore) {
  weir_job *job = build(p);
  weir_run_opts o = th_event_run_opts(state, restore);
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
}

/* Every matching pair once and nothing else; with `late`, a matching pair
 * may be missing only if one of its records was late. Returns the pairs
 * expected. */
static uint64_t check_pairs(int late) {
  cr_assert_eq(atomic_load(&bad), 0);
  uint64_t want = 0;
  for (uint64_t i = 0; i < NA; i++)
    for (uint64_t j = i % K; j < NB; j += K) {
      uint8_t s = atomic_load(&seen[i][j]);
      int m = matches(i, j);
      if (!m) {
        cr_assert_eq(s, 0, "a%llu b%llu do not match but were paired", (unsigned long long)i,
                     (unsigned long long)j);
        continue;
      }
      want += (uint64_t)m;
      /* A late record misses some or all of its pairs. */
      if (late && s < m && (atomic_load(&late_a[i]) || atomic_load(&late_b[j]))) continue;
      cr_assert_eq(s, m, "a%llu b%llu paired %u times, not %d", (unsigned long long)i,
                   (unsigned long long)j, s, m);
    }
  return want;
}

static uint64_t late_records(void) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < NA; i++) n += atomic_load(&late_a[i]);
  for (uint64_t j = 0; j < NB; j++) n += atomic_load(&late_b[j]);
  return n;
}

TestSuite(join, .timeout = 120);

Test(join, every_matching_pair_once) {
  C = (cfg){.disorder = 40, .bound = 40};
  reset();
  run(2, NULL, 0);
  uint64_t want = check_pairs(0);
  cr_assert_gt(want, NA / 2, "few pairs: %llu", (unsigned long long)want);
  cr_assert_eq(atomic_load(&pairs), want);
}

/* Records further behind than the bound: some are late, go to their side
 * output, and only their pairs are missing. */
Test(join, late_records_go_to_their_side_output) {
  C = (cfg){.disorder = 300, .bound = 5, .rate = 50000};
  reset();
  run(2, NULL, 0);
  check_pairs(1);
  cr_assert_gt(late_records(), 0, "no record was late: the test tests nothing");
}

/* Stopped part-way and restored at another parallelism: the buffered
 * records and their cleanup timers come back; every pair once over both
 * runs. */
Test(join, stop_and_restore_at_another_parallelism) {
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  C = (cfg){.disorder = 40, .bound = 40, .rate = 50000, .stop_after = 500};
  reset();
  run(2, state, 0);
  uint64_t first = atomic_load(&pairs);
  C.stop_after = 0;
  C.rate = 0;
  run(3, state, 1);
  uint64_t want = check_pairs(0);
  cr_assert_lt(first, want, "run 1 was not stopped part-way");
  cr_assert_eq(atomic_load(&pairs), want);
  th_rmrf(state);
  free(state);
}

static weir_window_spec window(weir_window_kind kind, int64_t length, int64_t slide) {
  return (weir_window_spec){.size = sizeof(weir_window_spec),
                            .kind = kind,
                            .time = WEIR_EVENT_TIME,
                            .length = length,
                            .slide = slide};
}

Test(join, window_join_tumbling_every_pair_once) {
  C = (cfg){.disorder = 40, .bound = 40, .w = window(WEIR_WINDOW_TUMBLING, 100, 0)};
  reset();
  run(2, NULL, 0);
  uint64_t want = check_pairs(0);
  cr_assert_gt(want, NA / 2, "few pairs: %llu", (unsigned long long)want);
  cr_assert_eq(atomic_load(&pairs), want);
}

Test(join, window_join_sliding_once_per_window) {
  C = (cfg){.disorder = 40, .bound = 40, .w = window(WEIR_WINDOW_SLIDING, 200, 50)};
  reset();
  run(3, NULL, 0);
  cr_assert_eq(atomic_load(&pairs), check_pairs(0));
}

Test(join, window_join_late_records_and_restore) {
  C = (cfg){.disorder = 300, .bound = 5, .rate = 50000, .w = window(WEIR_WINDOW_TUMBLING, 100, 0)};
  reset();
  run(2, NULL, 0);
  check_pairs(1);
  cr_assert_gt(late_records(), 0, "no record was late: the test tests nothing");
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  C = (cfg){.disorder = 40,
            .bound = 40,
            .rate = 50000,
            .stop_after = 500,
            .w = window(WEIR_WINDOW_SLIDING, 200, 100)};
  reset();
  run(2, state, 0);
  C.stop_after = 0;
  C.rate = 0;
  run(1, state, 1);
  cr_assert_eq(atomic_load(&pairs), check_pairs(0));
  th_rmrf(state);
  free(state);
}

Test(join, misuse_is_a_build_error) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "bad"), 0);
  weir_stream *a = weir_key_by(weir_source(job, "a", &th_seq_vt, &seq_a, 1));
  weir_stream *b = weir_key_by(weir_source(job, "b", &th_seq_vt, &seq_b, 1));
  cr_assert_null(weir_interval_join(a, b, "j", 10, -20, pair, NULL, 1));
  cr_assert(strstr(weir_job_error(job), "lo + hi >= 0"), "%s", weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(weir_job_create(&job, "bad"), 0);
  a = weir_source(job, "a", &th_seq_vt, &seq_a, 1);
  b = weir_key_by(weir_source(job, "b", &th_seq_vt, &seq_b, 1));
  cr_assert_null(weir_interval_join(a, b, "j", 10, 20, pair, NULL, 1));
  cr_assert(strstr(weir_job_error(job), "not keyed"), "%s", weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(weir_job_create(&job, "bad"), 0);
  a = weir_key_by(weir_source(job, "a", &th_seq_vt, &seq_a, 1));
  b = weir_key_by(weir_source(job, "b", &th_seq_vt, &seq_b, 1));
  weir_window_spec w = window(WEIR_WINDOW_TUMBLING, 100, 0);
  w.allowed_lateness = 10;
  cr_assert_null(weir_window_join(a, b, "j", &w, pair, NULL, 1));
  cr_assert(strstr(weir_job_error(job), "no allowed lateness"), "%s", weir_job_error(job));
  weir_job_destroy(job);
}
