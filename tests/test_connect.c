/* test_connect.c: two-input operators (weir_connect, engine/src/graph.c and
 * task.c): each input's records reach its own callbacks, record by record
 * and in batches; with both inputs keyed, one key's records of both meet in
 * one subtask and share its keyed state, also across a stop and a restore
 * at another parallelism; misuse is a build error; unaligned checkpoints
 * fall back to aligned ones. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/weir.h"

#define NA 30000u /* records of input A: key i % K, payload i */
#define NB 20000u /* of input B: key i % K, payload NA + i */
#define K 100u

static uint64_t rate, stop_after;
static weir_job *cur_job;

/* ---- two sources ------------------------------------------------------------ */

static int emit_a(weir_ctx *ctx, uint64_t i, void *user) {
  (void)user;
  return weir_emit_u64(ctx, i % K, i);
}
static int emit_b(weir_ctx *ctx, uint64_t j, void *user) {
  (void)user;
  return weir_emit_u64(ctx, j % K, NA + j);
}
static th_seq seq_a = {.n = NA, .emit = emit_a, .rate = &rate};
static th_seq seq_b = {.n = NB, .emit = emit_b, .rate = &rate};

/* ---- the operator: per key, a's count + 1000 * b's count ------------------------ */

static _Atomic uint64_t wrong_side;

/* Keeps the key's sum and emits it: the last emission of a key is its
 * total, which only comes out right if both inputs' records of the key met
 * in one subtask's state. */
static int add(weir_ctx *ctx, uint64_t key, uint64_t v, int side) {
  if ((v >= NA) != side) atomic_fetch_add(&wrong_side, 1);
  uint64_t n;
  int rc = weir_state_add_u64(ctx, key, side ? 1000 : 1, &n);
  return rc < 0 ? rc : weir_emit_u64(ctx, key, n);
}
static int p1(weir_ctx *ctx, const weir_record *r) {
  return add(ctx, r->key, weir_payload_u64(r), 0);
}
static int p2(weir_ctx *ctx, const weir_record *r) {
  return add(ctx, r->key, weir_payload_u64(r), 1);
}
static int pb2(weir_ctx *ctx, const weir_batch *b) {
  for (uint32_t i = 0; i < b->len; i++) {
    weir_record r = weir_batch_record(b, i);
    weir_state_select(ctx, r.key);
    int rc = add(ctx, r.key, weir_payload_u64(&r), 1);
    if (rc) return rc;
  }
  return 0;
}
static const weir_operator_vt both_vt = {
    .size = sizeof both_vt, .name = "both", .process = p1, .process2 = p2};
static const weir_operator_vt batch2_vt = {
    .size = sizeof batch2_vt, .name = "both", .process = p1, .process_batch2 = pb2};

static _Atomic uint64_t last[K], results;
static int sink_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t v = weir_payload_u64(r), cur = atomic_load(&last[r->key % K]);
  while (v > cur && !atomic_compare_exchange_weak(&last[r->key % K], &cur, v)) {
  }
  uint64_t n = atomic_fetch_add(&results, 1) + 1;
  if (stop_after && n == stop_after) weir_job_stop(cur_job);
  return 0;
}
static const weir_operator_vt sink_vt = {
    .size = sizeof sink_vt, .name = "last", .process = sink_process};

static weir_job *build(const weir_operator_vt *vt, int p) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "connect"), 0);
  weir_stream *a = weir_key_by(weir_source(job, "a", &th_seq_vt, &seq_a, 1));
  weir_stream *b = weir_key_by(weir_source(job, "b", &th_seq_vt, &seq_b, 1));
  weir_op_opts o = {.size = sizeof o, .flags = WEIR_OP_KEYED_STATE};
  weir_stream *j = weir_connect(a, b, "both", vt, NULL, p, &o);
  cr_assert_not_null(j, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(j), "last", &sink_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  cur_job = job;
  return job;
}

static void reset(void) {
  for (uint32_t k = 0; k < K; k++) atomic_store(&last[k], 0);
  atomic_store(&results, 0);
  atomic_store(&wrong_side, 0);
}

static void check_totals(void) {
  cr_assert_eq(atomic_load(&wrong_side), 0, "records reached the other input's callback");
  for (uint32_t k = 0; k < K; k++)
    cr_assert_eq(atomic_load(&last[k]), NA / K + 1000 * (NB / K), "key %u: %llu", k,
                 (unsigned long long)atomic_load(&last[k]));
}

static void run(const weir_operator_vt *vt, int p, const char *state, int restore, int unaligned) {
  weir_job *job = build(vt, p);
  weir_run_opts o = {.workers = 2};
  if (state) {
    o.state_dir = state;
    o.checkpoint_interval_ms = 10;
    o.unaligned = unaligned;
    if (restore) o.restore = WEIR_RESTORE_LATEST;
  }
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
}

/* ---- one operator's main and side output, connected ---------------------------- */

static int split_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t v = weir_payload_u64(r);
  if (v < NA) return weir_emit_u64(ctx, r->key, v);
  return weir_emit_side(ctx, "b", r->key, WEIR_TS_DEFAULT, r->payload, r->len);
}
static const weir_operator_vt split_vt = {
    .size = sizeof split_vt, .name = "split", .process = split_process};

/* a and b through one operator that sends b's records to its side output
 * "b": its two outputs are the two inputs of the connected operator. */
static weir_job *build_split(int p) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "split"), 0);
  static const char *const tags[] = {"b"};
  weir_op_opts so = {.size = sizeof so, .ntags = 1, .tags = tags};
  weir_stream *ab = weir_union(weir_source(job, "a", &th_seq_vt, &seq_a, 1),
                               weir_source(job, "b", &th_seq_vt, &seq_b, 1));
  weir_stream *main = weir_process_opts(ab, "split", &split_vt, NULL, 1, &so);
  weir_op_opts o = {.size = sizeof o, .flags = WEIR_OP_KEYED_STATE};
  weir_stream *j = weir_connect(weir_key_by(main), weir_key_by(weir_side_output(main, "b")), "both",
                                &both_vt, NULL, p, &o);
  cr_assert_not_null(j, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(j), "last", &sink_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  cur_job = job;
  return job;
}

TestSuite(connect, .timeout = 120);

Test(connect, each_input_reaches_its_callbacks_with_shared_keyed_state) {
  reset();
  run(&both_vt, 3, NULL, 0, 0);
  check_totals();
  cr_assert_eq(atomic_load(&results), NA + NB);
}

Test(connect, second_input_in_batches) {
  reset();
  run(&batch2_vt, 2, NULL, 0, 0);
  check_totals();
}

/* Stopped part-way, restored at another parallelism: the shared state
 * moved with its keys; asked for unaligned checkpoints, the job takes
 * aligned ones (channel state does not say which input a record was on). */
Test(connect, stop_and_restore_at_another_parallelism) {
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  reset();
  rate = 100000;
  stop_after = 5000;
  run(&both_vt, 2, state, 0, 1);
  cr_assert_lt(atomic_load(&results), NA + NB, "run 1 was not stopped part-way");
  rate = 0;
  stop_after = 0;
  run(&both_vt, 3, state, 1, 1);
  check_totals();
  th_rmrf(state);
  free(state);
}

static void refused(weir_stream *(*make)(weir_job *job), const char *want) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "bad"), 0);
  cr_assert_null(make(job));
  cr_assert_eq(weir_job_build_error(job), WEIR_EPLAN);
  cr_assert(strstr(weir_job_error(job), want), "%s", weir_job_error(job));
  weir_job_destroy(job);
}
static weir_stream *no_process2(weir_job *job) {
  static const weir_operator_vt vt = {.size = sizeof vt, .name = "one", .process = p1};
  return weir_connect(weir_source(job, "a", &th_seq_vt, &seq_a, 1),
                      weir_source(job, "b", &th_seq_vt, &seq_b, 1), "one", &vt, NULL, 1, NULL);
}
static weir_stream *same_input_twice(weir_job *job) {
  weir_stream *a = weir_source(job, "a", &th_seq_vt, &seq_a, 1);
  return weir_connect(a, a, "twice", &both_vt, NULL, 1, NULL);
}
static weir_stream *one_side_keyed(weir_job *job) {
  return weir_connect(weir_key_by(weir_source(job, "a", &th_seq_vt, &seq_a, 1)),
                      weir_rebalance(weir_source(job, "b", &th_seq_vt, &seq_b, 1)), "half",
                      &both_vt, NULL, 1, NULL);
}
static weir_stream *keyed_state_no_side_keyed(weir_job *job) {
  weir_op_opts o = {.size = sizeof o, .flags = WEIR_OP_KEYED_STATE};
  return weir_connect(weir_rebalance(weir_source(job, "a", &th_seq_vt, &seq_a, 1)),
                      weir_rebalance(weir_source(job, "b", &th_seq_vt, &seq_b, 1)), "none",
                      &both_vt, NULL, 1, &o);
}
static weir_stream *null_input(weir_job *job) {
  return weir_connect(weir_source(job, "a", &th_seq_vt, &seq_a, 1), NULL, "x", &both_vt, NULL, 1,
                      NULL);
}

Test(connect, misuse_is_a_build_error) {
  refused(no_process2, "has neither process2 nor process_batch2");
  refused(same_input_twice, "reads an output of operator 'a' twice");
  refused(one_side_keyed, "its second is neither keyed (weir_key_by) nor broadcast");
  refused(keyed_state_no_side_keyed, "keeps keyed state, but its input is not keyed");
  refused(null_input, "input 2 is NULL");
}

/* An operator's main output and its side output into one two-input
 * operator: each reaches its own callbacks, also across a stop and a
 * restore at another parallelism. */
Test(connect, main_and_side_output_of_one_operator) {
  reset();
  weir_job *job = build_split(2);
  weir_run_opts o = {.workers = 2};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  check_totals();

  char *state = th_tmpdir();
  cr_assert_not_null(state);
  reset();
  rate = 200000;
  stop_after = 5000;
  job = build_split(2);
  weir_run_opts s1 = {.workers = 2, .state_dir = state, .checkpoint_interval_ms = 10};
  cr_assert_eq(weir_job_run(job, &s1), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  rate = 0;
  stop_after = 0;
  job = build_split(3);
  weir_run_opts s2 = {.workers = 2,
                      .state_dir = state,
                      .checkpoint_interval_ms = 10,
                      .restore = WEIR_RESTORE_LATEST};
  cr_assert_eq(weir_job_run(job, &s2), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  check_totals();
  th_rmrf(state);
  free(state);
}
