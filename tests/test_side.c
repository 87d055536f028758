/* test_side.c: side outputs (docs/event-time.md §6): an operator emits to
 * tags it declared; each tag's consumers get exactly those records, with
 * their timestamps and ids, through shuffles, alongside the main output,
 * with checkpoints taken across them; a tag nothing consumes is counted as
 * dropped; undeclared tags are a build error (asking for one) or a clear
 * runtime error (emitting to one). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/weir.h"

#define N 30000u

/* The records: i = 0..N-1, key i, timestamp 10 i; subtask s of P emits
 * those with i mod P = s. */
static int src_open(weir_ctx *ctx) {
  uint64_t *next = calloc(1, sizeof(uint64_t));
  *next = weir_ctx_subtask(ctx);
  weir_ctx_set_user(ctx, next);
  return 0;
}
static int paced; /* 100 records a millisecond per subtask, so checkpoints come between */
static int src_run(weir_ctx *ctx, uint32_t budget) {
  uint64_t *next = weir_ctx_user(ctx);
  if (paced && budget > 100) budget = 100;
  for (uint32_t b = 0; b < budget && *next < N; b++, *next += weir_ctx_parallelism(ctx)) {
    int rc = weir_emit_at(ctx, *next, (int64_t)*next * 10, next, 8);
    if (rc) return rc;
  }
  if (*next >= N) return WEIR_SOURCE_DONE;
  if (!paced) return WEIR_SOURCE_MORE;
  weir_ctx_wake_after(ctx, 1000);
  return WEIR_SOURCE_IDLE;
}
static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}
static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "records",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close};

/* Even records to the main output, odd ones to "odd", multiples of 3 also
 * to "three" (at timestamp 1), multiples of 5 also to "five" (which
 * nothing consumes). */
static const char *const tags[] = {"odd", "three", "five"};
static int split_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t i = weir_payload_u64(r);
  int rc = i % 2 ? weir_emit_side(ctx, "odd", r->key, WEIR_TS_DEFAULT, &i, 8)
                 : weir_emit(ctx, r->key, &i, 8);
  if (!rc && i % 3 == 0) rc = weir_emit_side(ctx, tags[1], r->key, 1, &i, 8);
  if (!rc && i % 5 == 0) rc = weir_emit_side(ctx, "five", r->key, WEIR_TS_DEFAULT, &i, 8);
  return rc;
}
static const weir_operator_vt split_vt = {
    .size = sizeof(weir_operator_vt), .name = "split", .process = split_process};

typedef struct seen {
  _Atomic uint32_t count[N];
  _Atomic uint64_t bad, total;
  _Atomic uint64_t ids[N]; /* "odd" and main: the id each record came with */
} seen;
static seen out[3]; /* main, odd, three */

static int check_process(weir_ctx *ctx, const weir_record *r) {
  int which = (int)(intptr_t)weir_ctx_arg(ctx);
  uint64_t i = weir_payload_u64(r);
  if (i >= N || r->key != i) {
    atomic_fetch_add(&out[which].bad, 1);
    return 0;
  }
  int64_t want_ts = which == 2 ? 1 : (int64_t)i * 10;
  int right = which == 0 ? i % 2 == 0 : which == 1 ? i % 2 == 1 : i % 3 == 0;
  if (r->ts != want_ts || !right) atomic_fetch_add(&out[which].bad, 1);
  atomic_fetch_add(&out[which].count[i], 1);
  atomic_store(&out[which].ids[i], r->id);
  atomic_fetch_add(&out[which].total, 1);
  return 0;
}
static const weir_operator_vt check_vt = {
    .size = sizeof(weir_operator_vt), .name = "check", .process = check_process};

static weir_op_opts split_opts(void) {
  return (weir_op_opts){.size = sizeof(weir_op_opts), .ntags = 3, .tags = tags};
}

TestSuite(side, .timeout = 120);

static void run_split(const char *state) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "side"), 0);
  weir_op_opts oo = split_opts();
  /* Chained after the source: side outputs of a chain's tail. */
  weir_stream *main = weir_process_opts(weir_source(job, "records", &src_vt, NULL, 2), "split",
                                        &split_vt, NULL, 2, &oo);
  cr_assert_not_null(main, "%s", weir_job_error(job));
  weir_stream *odd = weir_side_output(main, "odd");
  weir_stream *three = weir_side_output(main, "three");
  cr_assert(odd && three, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(main), "main", &check_vt, (void *)0, 1), 0);
  cr_assert_eq(weir_sink(weir_key_by(odd), "odd", &check_vt, (void *)1, 3), 0);
  cr_assert_eq(weir_sink(three, "three", &check_vt, (void *)2, 2), 0, "%s", weir_job_error(job));
  weir_run_opts o = {.workers = 2, .state_dir = state, .checkpoint_interval_ms = 5};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  for (int w = 0; w < 3; w++) cr_assert_eq(atomic_load(&out[w].bad), 0, "output %d", w);
  uint64_t want[3] = {0, 0, 0};
  for (uint32_t i = 0; i < N; i++) {
    uint32_t m = i % 2 == 0, o1 = i % 2 == 1, t = i % 3 == 0;
    want[0] += m;
    want[1] += o1;
    want[2] += t;
    cr_assert_eq(atomic_load(&out[0].count[i]), m, "record %u at main", i);
    cr_assert_eq(atomic_load(&out[1].count[i]), o1, "record %u at odd", i);
    cr_assert_eq(atomic_load(&out[2].count[i]), t, "record %u at three", i);
    /* One id sequence per parent: a record sent to two outputs gets two
     * ids. */
    if (t) cr_assert_neq(atomic_load(&out[2].ids[i]), atomic_load(&out[m ? 0 : 1].ids[i]));
  }
  for (int w = 0; w < 3; w++) cr_assert_eq(atomic_load(&out[w].total), want[w], "output %d", w);
  uint64_t dropped = 0;
  cr_assert_eq(weir_job_counter(job, "split", "dropped:five", &dropped), 0);
  cr_assert_eq(dropped, N / 5);
  if (state)
    cr_assert_gt(weir_job_run_info(job)->checkpoints, 1,
                 "no checkpoint completed across the side outputs");
  weir_job_destroy(job);
}

Test(side, each_tag_gets_its_records) {
  run_split(NULL);
}

Test(side, checkpoints_cross_side_outputs) {
  char *state = th_tmpdir();
  paced = 1;
  run_split(state);
  th_rmrf(state);
  free(state);
}

Test(side, asking_for_an_undeclared_tag_is_a_build_error) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "side"), 0);
  weir_op_opts oo = split_opts();
  weir_stream *main = weir_process_opts(weir_source(job, "records", &src_vt, NULL, 1), "split",
                                        &split_vt, NULL, 1, &oo);
  cr_assert_null(weir_side_output(main, "late"));
  cr_assert_eq(weir_job_build_error(job), WEIR_EPLAN);
  cr_assert(strstr(weir_job_error(job), "weir_side_output: operator 'split' does not declare side "
                                        "output 'late' (declares: odd, three, five)"),
            "%s", weir_job_error(job));
  weir_job_destroy(job);

  cr_assert_eq(weir_job_create(&job, "side"), 0);
  main = weir_process_opts(weir_source(job, "records", &src_vt, NULL, 1), "split", &split_vt, NULL,
                           1, &oo);
  cr_assert_null(weir_side_output(weir_key_by(main), "odd"));
  cr_assert(strstr(weir_job_error(job), "not an operator's main output"), "%s",
            weir_job_error(job));
  weir_job_destroy(job);
}

Test(side, repeated_or_empty_tags_are_build_errors) {
  static const char *const twice[] = {"a", "b", "a"}, *const empty[] = {"a", ""};
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "side"), 0);
  weir_op_opts oo = {.size = sizeof oo, .ntags = 3, .tags = twice};
  cr_assert_null(weir_process_opts(weir_source(job, "records", &src_vt, NULL, 1), "split",
                                   &split_vt, NULL, 1, &oo));
  cr_assert(strstr(weir_job_error(job), "declares side output 'a' twice"), "%s",
            weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(weir_job_create(&job, "side"), 0);
  oo = (weir_op_opts){.size = sizeof oo, .ntags = 2, .tags = empty};
  cr_assert_null(weir_process_opts(weir_source(job, "records", &src_vt, NULL, 1), "split",
                                   &split_vt, NULL, 1, &oo));
  cr_assert(strstr(weir_job_error(job), "side output 1 has an empty or overlong tag"), "%s",
            weir_job_error(job));
  weir_job_destroy(job);
}

Test(side, emitting_to_an_undeclared_tag_fails_the_job) {
  static const char *const one[] = {"odd"};
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "side"), 0);
  weir_op_opts oo = {.size = sizeof oo, .ntags = 1, .tags = one};
  weir_stream *main = weir_process_opts(weir_source(job, "records", &src_vt, NULL, 1), "split",
                                        &split_vt, NULL, 1, &oo);
  cr_assert_eq(weir_sink(main, "main", &check_vt, (void *)0, 1), 0);
  weir_run_opts o = {.workers = 1};
  cr_assert_eq(weir_job_run(job, &o), WEIR_EINVAL);
  cr_assert(strstr(weir_job_error(job), "operator 'split' emits to side output 'three', which it "
                                        "did not declare (declares: odd)"),
            "%s", weir_job_error(job));
  weir_job_destroy(job);
}
