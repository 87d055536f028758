/* test_sessions.c: session windows of the window operator
 * (operators/window.c, WEIR_WINDOW_SESSION) against sessions computed here
 * from the same records: keys drawn at random make per-key bursts, so a key
 * has many sessions of varied length; out-of-order input within the
 * source's bound gives exactly the reference sessions, each fired once; late
 * records go to the side output and conserve the record count; allowed
 * lateness fires merged sessions again and ends exact; a stop and a restore
 * at another parallelism exact; bad specs refused at build time. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/operators.h"
#include "weir/weir.h"

#define N 30000u /* records: i has ts i + 1000 - disorder(i), payload i */
#define K 40u    /* keys, drawn at random per record: about one per K ms each */
#define GAP 90   /* sessions break where a key rests a gap: often, at random */
#define MAXR (4 * N)

typedef struct cfg {
  uint64_t disorder;
  int64_t bound, lateness;
  uint64_t rate, stop_after;
} cfg;
static cfg C;
static weir_job *cur_job;

static uint64_t mix(uint64_t x) {
  x = (x + 1) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}
static uint64_t key_of(uint64_t i) {
  return mix(i) % K;
}
static int64_t ts_of(uint64_t i) {
  return (int64_t)i + 1000 - (int64_t)(C.disorder ? mix(i ^ 0x5555) % (C.disorder + 1) : 0);
}

/* ---- the source ------------------------------------------------------------- */

static int emit_record(weir_ctx *ctx, uint64_t i, void *user) {
  (void)user;
  return weir_emit_at(ctx, key_of(i), ts_of(i), &i, 8);
}
static th_seq records = {.n = N, .emit = emit_record, .rate = &C.rate};

/* ---- sessions: what came out and what should ------------------------------------ */

typedef struct sess {
  uint64_t key;
  int64_t start, end;
  uint64_t value;
  uint32_t firing;
} sess;

static sess got[MAXR];
static _Atomic uint32_t ngot;
static _Atomic uint64_t nlate, nbad;
static sess ref[N];
static uint32_t nref;

static int result_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  weir_window_result wr;
  uint32_t at = atomic_fetch_add(&ngot, 1);
  if (weir_window_result_parse(r, &wr) || wr.len != 8 || r->ts != wr.end - 1 || at >= MAXR) {
    atomic_fetch_add(&nbad, 1);
    return 0;
  }
  sess *s = &got[at];
  s->key = r->key;
  s->start = wr.start;
  s->end = wr.end;
  s->firing = wr.firing;
  memcpy(&s->value, wr.value, 8);
  if (C.stop_after && at + 1 == C.stop_after) weir_job_stop(cur_job);
  return 0;
}
static const weir_operator_vt result_vt = {
    .size = sizeof(weir_operator_vt), .name = "results", .process = result_process};

static int late_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t i = weir_payload_u64(r);
  if (i >= N || r->key != key_of(i) || r->ts != ts_of(i)) atomic_fetch_add(&nbad, 1);
  atomic_fetch_add(&nlate, 1);
  return 0;
}
static const weir_operator_vt late_vt = {
    .size = sizeof(weir_operator_vt), .name = "late", .process = late_process};

static int cmp_ts(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  return *x < *y ? -1 : *x > *y;
}
static int cmp_sess(const void *a, const void *b) {
  const sess *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->firing < y->firing ? -1 : x->firing > y->firing;
}

/* Per key: its timestamps in order; a session goes on while the next one
 * is before its end (the last timestamp + GAP). */
static void reference(void) {
  static int64_t ts[K][N];
  static uint32_t n[K];
  memset(n, 0, sizeof n);
  for (uint64_t i = 0; i < N; i++) ts[key_of(i)][n[key_of(i)]++] = ts_of(i);
  nref = 0;
  for (uint64_t k = 0; k < K; k++) {
    qsort(ts[k], n[k], sizeof ts[k][0], cmp_ts);
    for (uint32_t j = 0; j < n[k]; j++) {
      if (j == 0 || ts[k][j] >= ref[nref - 1].end)
        ref[nref++] = (sess){k, ts[k][j], ts[k][j] + GAP, 0, 1};
      sess *s = &ref[nref - 1];
      if (ts[k][j] + GAP > s->end) s->end = ts[k][j] + GAP;
      s->value++;
    }
  }
}

static weir_window_spec session_spec(void) {
  return (weir_window_spec){.size = sizeof(weir_window_spec),
                            .kind = WEIR_WINDOW_SESSION,
                            .time = WEIR_EVENT_TIME,
                            .length = GAP,
                            .allowed_lateness = C.lateness};
}

static weir_job *build(int p) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "sessions"), 0);
  weir_watermark_strategy ws = {.size = sizeof ws, .out_of_orderness = C.bound, .interval_ms = 1};
  weir_stream *src =
      weir_with_watermarks(weir_source(job, "records", &th_seq_vt, &records, 1), &ws);
  weir_window_spec spec = session_spec();
  weir_stream *w = weir_window_aggregate(weir_key_by(src), "s", &spec, &weir_agg_count, NULL, p);
  cr_assert_not_null(w, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(w), "results", &result_vt, NULL, 1), 0);
  cr_assert_eq(
      weir_sink(weir_rebalance(weir_side_output(w, WEIR_TAG_LATE)), "late", &late_vt, NULL, 1), 0);
  cur_job = job;
  return job;
}

static void run(int p, const char *state, int restore) {
  weir_job *job = build(p);
  weir_run_opts o = th_event_run_opts(state, restore);
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
}

static void reset(void) {
  atomic_store(&ngot, 0);
  atomic_store(&nlate, 0);
  atomic_store(&nbad, 0);
  reference();
}

/* The results are the reference sessions, each fired once. */
static void assert_exact(void) {
  uint32_t n = atomic_load(&ngot);
  cr_assert_eq(atomic_load(&nbad), 0);
  qsort(got, n, sizeof got[0], cmp_sess);
  qsort(ref, nref, sizeof ref[0], cmp_sess);
  cr_assert_eq(n, nref, "%u results for %u sessions", n, nref);
  for (uint32_t i = 0; i < n; i++)
    cr_assert(got[i].key == ref[i].key && got[i].start == ref[i].start &&
                  got[i].end == ref[i].end && got[i].value == ref[i].value && got[i].firing == 1,
              "session %u: key %llu [%lld, %lld) %llu (firing %u), want key %llu [%lld, %lld) %llu",
              i, (unsigned long long)got[i].key, (long long)got[i].start, (long long)got[i].end,
              (unsigned long long)got[i].value, got[i].firing, (unsigned long long)ref[i].key,
              (long long)ref[i].start, (long long)ref[i].end, (unsigned long long)ref[i].value);
}

TestSuite(sessions, .timeout = 120);

Test(sessions, out_of_order_within_the_bound_exact) {
  C = (cfg){.disorder = 40, .bound = 40};
  reset();
  cr_assert_gt(nref, 2 * K, "too few sessions: %u", nref);
  run(2, NULL, 0);
  assert_exact();
  cr_assert_eq(atomic_load(&nlate), 0);
}

/* Records further behind than the bound: some are late; every record is
 * in exactly one fired session or in the side output. */
Test(sessions, late_records_go_to_the_side_output_and_conserve_counts) {
  C = (cfg){.disorder = 400, .bound = 10, .rate = 100000};
  reset();
  run(2, NULL, 0);
  cr_assert_eq(atomic_load(&nbad), 0);
  cr_assert_gt(atomic_load(&nlate), 0, "no record was late: the test tests nothing");
  uint64_t counted = 0;
  for (uint32_t i = 0; i < atomic_load(&ngot); i++) {
    cr_assert_eq(got[i].firing, 1);
    counted += got[i].value;
  }
  cr_assert_eq(counted + atomic_load(&nlate), N, "%llu counted + %llu late",
               (unsigned long long)counted, (unsigned long long)atomic_load(&nlate));
}

/* Lateness covering the disorder: nothing is late; sessions that fired
 * early merge with late records and fire again; the last firing of every
 * final session is the reference, and every reference session is one. */
Test(sessions, allowed_lateness_fires_merged_sessions_again) {
  C = (cfg){.disorder = 400, .bound = 10, .lateness = 500, .rate = 100000};
  reset();
  run(2, NULL, 0);
  cr_assert_eq(atomic_load(&nbad), 0);
  cr_assert_eq(atomic_load(&nlate), 0);
  uint32_t n = atomic_load(&ngot), again = 0;
  qsort(got, n, sizeof got[0], cmp_sess);
  qsort(ref, nref, sizeof ref[0], cmp_sess);
  for (uint32_t i = 0; i < n; i++) again += got[i].firing > 1;
  cr_assert_gt(again, 0, "no session fired twice: the test tests nothing");
  /* Each reference session: a result with its bounds and value, whose
   * firing is the highest of that key's results within its bounds. */
  uint32_t j = 0;
  for (uint32_t r = 0; r < nref; r++) {
    const sess *want = &ref[r];
    const sess *last = NULL;
    for (;
         j < n && (got[j].key < want->key || (got[j].key == want->key && got[j].start < want->end));
         j++)
      if (got[j].key == want->key && got[j].start >= want->start && got[j].end <= want->end &&
          (!last || got[j].firing >= last->firing))
        last = &got[j];
    cr_assert_not_null(last, "session %u never fired", r);
    cr_assert(last->start == want->start && last->end == want->end && last->value == want->value,
              "session %u: last firing [%lld, %lld) %llu, want [%lld, %lld) %llu", r,
              (long long)last->start, (long long)last->end, (unsigned long long)last->value,
              (long long)want->start, (long long)want->end, (unsigned long long)want->value);
  }
}

/* Stopped part-way and restored at another parallelism: open sessions and
 * their timers come back; every session fires once over the two runs. */
Test(sessions, stop_and_restore_at_another_parallelism_exact) {
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  C = (cfg){.disorder = 40, .bound = 40, .rate = 200000, .stop_after = 200};
  reset();
  run(2, state, 0);
  cr_assert_lt(atomic_load(&ngot), nref / 2, "run 1 was not stopped part-way");
  C.stop_after = 0;
  C.rate = 0;
  run(3, state, 1);
  assert_exact();
  th_rmrf(state);
  free(state);
}

static void refused(const weir_window_spec *spec, const weir_aggregate_vt *agg, const char *want) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "bad"), 0);
  cr_assert_null(weir_window_aggregate(
      weir_key_by(weir_source(job, "records", &th_seq_vt, &records, 1)), "w", spec, agg, NULL, 1));
  cr_assert_eq(weir_job_build_error(job), WEIR_EPLAN);
  cr_assert(strstr(weir_job_error(job), want), "%s", weir_job_error(job));
  weir_job_destroy(job);
}

Test(sessions, bad_specs_are_refused_at_build) {
  weir_window_spec s = session_spec();
  s.time = WEIR_PROCESSING_TIME;
  refused(&s, &weir_agg_count, "session windows are in event time");
  s = session_spec();
  weir_aggregate_vt no_merge = weir_agg_count;
  no_merge.merge = NULL;
  refused(&s, &no_merge, "need an aggregate with merge");
  /* A table sized before merge existed: taken, without merge. */
  no_merge.size = offsetof(weir_aggregate_vt, merge);
  refused(&s, &no_merge, "need an aggregate with merge");
}
