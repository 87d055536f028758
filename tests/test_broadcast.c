/* test_broadcast.c: broadcast state (weir_broadcast_*, engine/src/ctx.c,
 * checkpoint.c, rescale.c): a rules stream broadcast into a keyed
 * operator filters and enriches the records of its first input, exactly;
 * every subtask's copy is the same after a stop and a restore, also at
 * another parallelism (2 -> 3 -> 1); in process2 of a broadcast input
 * there is no current key; misuse fails the job with WEIR_ESTATE.
 *
 * The events source waits until every subtask has applied every rule
 * (the rules come first, always), so the output does not depend on how
 * the two inputs interleave. Each subtask records a digest of its copy
 * when its first event arrives in a run, before any rule could arrive in
 * that run: after a restore, the copy the checkpoint gave it. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/weir.h"

#define NE 20000u /* events: key i % K, payload i, class i % C */
#define K 100u
#define C 20u
#define NR 60u  /* rules (below) */
#define MAXP 8u /* subtasks */

/* ---- rules: rule j sets class j % C to multiplier j + 1, except that
 * every rule j with j % 7 == 3 deletes its class instead; classes that
 * end without a rule filter their events out. */

static int rule_is_del(uint64_t j) {
  return j % 7 == 3;
}

/* The map the rules leave: mult[c] (0: no rule). */
static void final_rules(uint64_t mult[C]) {
  memset(mult, 0, C * sizeof mult[0]);
  for (uint64_t j = 0; j < NR; j++) mult[j % C] = rule_is_del(j) ? 0 : j + 1;
}

static int emit_rule(weir_ctx *ctx, uint64_t j, void *user) {
  (void)user;
  return weir_emit_u64(ctx, j, j);
}
static th_seq rules_seq = {.n = NR, .emit = emit_rule};

/* ---- events, held back until every subtask has every rule ------------------- */

static _Atomic uint64_t rules_applied; /* rule records seen by the operator, all subtasks */
static _Atomic uint64_t gate;          /* events wait for this many (0: no wait) */
static uint64_t ev_rate;

static int ev_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(uint64_t)));
  return 0;
}
static int ev_run(weir_ctx *ctx, uint32_t budget) {
  uint64_t *next = weir_ctx_user(ctx);
  if (weir_ctx_stopping(ctx)) return WEIR_SOURCE_DONE;
  uint64_t g = atomic_load(&gate);
  if (g && atomic_load(&rules_applied) < g) {
    weir_ctx_wake_after(ctx, 500);
    return WEIR_SOURCE_IDLE;
  }
  if (ev_rate && budget > 50) budget = 50;
  for (uint32_t b = 0; b < budget && *next < NE; b++, ++*next) {
    int rc = weir_emit_u64(ctx, *next % K, *next);
    if (rc) return rc;
  }
  if (*next >= NE) return WEIR_SOURCE_DONE;
  if (ev_rate) {
    weir_ctx_wake_after(ctx, 50 * 1000000ull / ev_rate);
    return WEIR_SOURCE_IDLE;
  }
  return WEIR_SOURCE_MORE;
}
static int ev_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  return weir_snapshot_position(w, 0, *(uint64_t *)weir_ctx_user(ctx));
}
static int ev_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  uint64_t off = 0;
  if (weir_snapshot_get_position(r, 0, &off)) *(uint64_t *)weir_ctx_user(ctx) = off;
  return 0;
}
static void ev_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}
static const weir_source_vt events_vt = {.size = sizeof events_vt,
                                         .name = "events",
                                         .open = ev_open,
                                         .run = ev_run,
                                         .close = ev_close,
                                         .snapshot = ev_snapshot,
                                         .restore = ev_restore,
                                         .rescalable = 1};

/* ---- the operator ---------------------------------------------------------- */

/* An order-independent digest of a map: the sum of a hash per entry,
 * plus the number of entries in the top byte. */
static uint64_t entry_hash(const void *k, size_t klen, const void *v, size_t vlen) {
  return weir_hash_bytes(k, klen) * 0x9e3779b97f4a7c15ull + weir_hash_bytes(v, vlen);
}
static int digest_one(void *user, const void *k, size_t klen, const void *v, size_t vlen) {
  *(uint64_t *)user += entry_hash(k, klen, v, vlen) + (1ull << 56);
  return 0;
}
static uint64_t expected_digest(void) {
  uint64_t mult[C], d = 0;
  final_rules(mult);
  for (uint64_t c = 0; c < C; c++)
    if (mult[c]) digest_one(&d, &c, 8, &mult[c], 8);
  return d;
}

static _Atomic uint64_t digest[MAXP];
static atomic_int digest_set[MAXP];
static _Atomic uint64_t wrong; /* a call that should have been refused (or allowed) was not */
static int enrich;             /* emit (key, i * mult); else (key, events passed for the key) */

typedef struct op_state {
  int seen_event;
} op_state;

static int op_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(op_state)));
  return 0;
}
static void op_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

static int on_event(weir_ctx *ctx, uint64_t key, uint64_t i) {
  op_state *st = weir_ctx_user(ctx);
  if (!st->seen_event) {
    st->seen_event = 1;
    uint64_t d = 0;
    int rc = weir_broadcast_each(ctx, digest_one, &d);
    if (rc) return rc;
    uint32_t s = weir_ctx_subtask(ctx);
    atomic_store(&digest[s], d);
    atomic_store(&digest_set[s], 1);
  }
  uint64_t c = i % C;
  const void *v;
  size_t vlen;
  int rc = weir_broadcast_get(ctx, &c, sizeof c, &v, &vlen);
  if (rc < 0) return rc;
  if (rc == 0) return 0; /* no rule for its class: filtered out */
  uint64_t mult;
  if (vlen != sizeof mult) return weir_ctx_fail(ctx, WEIR_EOPERATOR, "rule of %zu bytes", vlen);
  memcpy(&mult, v, sizeof mult);
  uint64_t n;
  rc = weir_state_add_u64(ctx, key, 1, &n);
  if (rc) return rc;
  return weir_emit_u64(ctx, key, enrich ? i * mult : n);
}

static int op_process(weir_ctx *ctx, const weir_record *r) {
  return on_event(ctx, r->key, weir_payload_u64(r));
}

static int count_entry(void *user, uint64_t key, uint64_t value) {
  (void)key;
  (void)value;
  ++*(uint64_t *)user;
  return 0;
}

/* A rule: no current key here, so keyed state and timers are refused; a
 * read-only visit of keyed state is not. */
static int op_rule(weir_ctx *ctx, uint64_t j) {
  uint64_t x, n = 0;
  if (weir_state_get_u64(ctx, 1, &x) != WEIR_ESTATE) atomic_fetch_add(&wrong, 1);
  if (weir_state_add_u64(ctx, 1, 1, &x) != WEIR_ESTATE) atomic_fetch_add(&wrong, 1);
  if (weir_state_put_bytes(ctx, "k", 1, "v", 1) != WEIR_ESTATE) atomic_fetch_add(&wrong, 1);
  if (weir_timer_register(ctx, WEIR_PROCESSING_TIME, INT64_MAX / 2) != WEIR_ESTATE)
    atomic_fetch_add(&wrong, 1);
  if (weir_state_each_u64(ctx, count_entry, &n) != 0) atomic_fetch_add(&wrong, 1);
  uint64_t c = j % C, mult = j + 1;
  int rc = rule_is_del(j) ? weir_broadcast_del(ctx, &c, sizeof c)
                          : weir_broadcast_put(ctx, &c, sizeof c, &mult, sizeof mult);
  atomic_fetch_add(&rules_applied, 1);
  return rc;
}
static int op_process2(weir_ctx *ctx, const weir_record *r) {
  return op_rule(ctx, weir_payload_u64(r));
}
static int op_process_batch2(weir_ctx *ctx, const weir_batch *b) {
  for (uint32_t i = 0; i < b->len; i++) {
    weir_record r = weir_batch_record(b, i);
    weir_state_select(ctx, r.key); /* selects nothing: there is still no current key */
    int rc = op_rule(ctx, weir_payload_u64(&r));
    if (rc) return rc;
  }
  return 0;
}
static int op_timer(weir_ctx *ctx, const weir_timer *t) {
  (void)ctx;
  (void)t;
  return 0;
}
static const weir_operator_vt rules_vt = {.size = sizeof rules_vt,
                                          .name = "rules",
                                          .open = op_open,
                                          .close = op_close,
                                          .process = op_process,
                                          .on_timer = op_timer,
                                          .process2 = op_process2};
static const weir_operator_vt rules_batch_vt = {.size = sizeof rules_batch_vt,
                                                .name = "rules",
                                                .open = op_open,
                                                .close = op_close,
                                                .process = op_process,
                                                .on_timer = op_timer,
                                                .process_batch2 = op_process_batch2};

/* ---- the sink: per key, the sum and the largest value ----------------------- */

static _Atomic uint64_t sum[K], last[K], results, stop_after;
static weir_job *cur_job;

static int sink_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t v = weir_payload_u64(r), k = r->key % K, cur = atomic_load(&last[k]);
  atomic_fetch_add(&sum[k], v);
  while (v > cur && !atomic_compare_exchange_weak(&last[k], &cur, v)) {
  }
  uint64_t n = atomic_fetch_add(&results, 1) + 1;
  if (atomic_load(&stop_after) && n == atomic_load(&stop_after)) weir_job_stop(cur_job);
  return 0;
}
static const weir_operator_vt sink_vt = {
    .size = sizeof sink_vt, .name = "out", .process = sink_process};

static void reset(void) {
  for (uint32_t k = 0; k < K; k++) {
    atomic_store(&sum[k], 0);
    atomic_store(&last[k], 0);
  }
  for (uint32_t s = 0; s < MAXP; s++) {
    atomic_store(&digest[s], 0);
    atomic_store(&digest_set[s], 0);
  }
  atomic_store(&results, 0);
  atomic_store(&rules_applied, 0);
  atomic_store(&wrong, 0);
}

static weir_job *build(const weir_operator_vt *vt, int p) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "broadcast"), 0);
  weir_stream *ev = weir_key_by(weir_source(job, "events", &events_vt, NULL, 1));
  weir_stream *rules = weir_broadcast(weir_source(job, "rules-src", &th_seq_vt, &rules_seq, 1));
  weir_op_opts o = {.size = sizeof o, .flags = WEIR_OP_KEYED_STATE | WEIR_OP_PROCESSING_TIMERS};
  weir_stream *j = weir_connect(ev, rules, "rules", vt, NULL, p, &o);
  cr_assert_not_null(j, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(j), "out", &sink_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  cur_job = job;
  return job;
}

static void run(const weir_operator_vt *vt, int p, const char *state, int restore) {
  weir_job *job = build(vt, p);
  weir_run_opts o = {.workers = 2};
  if (state) {
    o.state_dir = state;
    o.checkpoint_interval_ms = 10;
    if (restore) o.restore = WEIR_RESTORE_LATEST;
  }
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
}

/* Events that pass the rules. */
static uint64_t passing(void) {
  uint64_t mult[C], n = 0;
  final_rules(mult);
  for (uint64_t i = 0; i < NE; i++) n += mult[i % C] != 0;
  return n;
}

/* Every subtask of p recorded the digest of the full rule set. */
static void check_digests(int p) {
  uint64_t want = expected_digest();
  for (int s = 0; s < p; s++) {
    cr_assert(atomic_load(&digest_set[s]), "subtask %d of %d saw no event", s, p);
    cr_assert_eq(atomic_load(&digest[s]), want,
                 "subtask %d of %d: broadcast state digest %llx, want %llx (%llu entries)", s, p,
                 (unsigned long long)atomic_load(&digest[s]), (unsigned long long)want,
                 (unsigned long long)(atomic_load(&digest[s]) >> 56));
  }
}

TestSuite(broadcast, .timeout = 120);

/* Every event of a class with a rule comes out once, multiplied by its
 * class's multiplier; the others are filtered out. */
static void rules_filter_and_enrich(const weir_operator_vt *vt, int p) {
  reset();
  enrich = 1;
  ev_rate = 0;
  atomic_store(&stop_after, 0);
  atomic_store(&gate, (uint64_t)NR * (uint64_t)p);
  run(vt, p, NULL, 0);
  uint64_t mult[C], want_sum[K] = {0}, want_n = 0;
  final_rules(mult);
  for (uint64_t i = 0; i < NE; i++)
    if (mult[i % C]) {
      want_sum[i % K] += i * mult[i % C];
      want_n++;
    }
  cr_assert_eq(atomic_load(&wrong), 0, "a keyed call in process2 was not refused");
  cr_assert_eq(atomic_load(&rules_applied), (uint64_t)NR * (uint64_t)p);
  cr_assert_eq(atomic_load(&results), want_n, "%llu results, want %llu",
               (unsigned long long)atomic_load(&results), (unsigned long long)want_n);
  for (uint32_t k = 0; k < K; k++)
    cr_assert_eq(atomic_load(&sum[k]), want_sum[k], "key %u: %llu, want %llu", k,
                 (unsigned long long)atomic_load(&sum[k]), (unsigned long long)want_sum[k]);
  check_digests(p);
}

Test(broadcast, rules_filter_and_enrich_a_keyed_stream) {
  rules_filter_and_enrich(&rules_vt, 3);
}

Test(broadcast, rules_in_batches) {
  rules_filter_and_enrich(&rules_batch_vt, 2);
}

/* Stopped part-way at parallelism 2, restored at 3, stopped again, then
 * restored at 1: every subtask starts each run with the whole rule set
 * from the checkpoint (the rules source is past its end: no rule comes
 * again), and the keyed counts come out whole. */
Test(broadcast, identical_on_every_subtask_after_restore_and_rescale) {
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  enrich = 0;
  const int ps[3] = {2, 3, 1};
  for (int r = 0; r < 3; r++) {
    reset();
    ev_rate = r < 2 ? 100000 : 0;
    atomic_store(&stop_after, r < 2 ? 3000 : 0);
    /* Only the first run waits for the rules; later ones restore them. */
    atomic_store(&gate, r == 0 ? (uint64_t)NR * (uint64_t)ps[r] : 0);
    run(&rules_vt, ps[r], state, r > 0);
    if (r < 2)
      cr_assert(atomic_load(&results) >= 3000 && atomic_load(&results) < passing(),
                "run %d: %llu results: not stopped part-way", r,
                (unsigned long long)atomic_load(&results));
    cr_assert_eq(atomic_load(&rules_applied), r == 0 ? (uint64_t)NR * 2 : 0,
                 "run %d: %llu rules applied", r, (unsigned long long)atomic_load(&rules_applied));
    cr_assert_eq(atomic_load(&wrong), 0);
    check_digests(ps[r]);
  }
  /* The last run went to the end: per key, the largest count is the
   * number of its events that pass. */
  uint64_t mult[C];
  final_rules(mult);
  for (uint32_t k = 0; k < K; k++) {
    uint64_t want = 0;
    for (uint64_t i = k; i < NE; i += K) want += mult[i % C] != 0;
    cr_assert_eq(atomic_load(&last[k]), want, "key %u: %llu, want %llu", k,
                 (unsigned long long)atomic_load(&last[k]), (unsigned long long)want);
  }
  th_rmrf(state);
  free(state);
}

/* ---- misuse ------------------------------------------------------------------- */

static int put_in_process(weir_ctx *ctx, const weir_record *r) {
  (void)r;
  return weir_broadcast_put(ctx, "k", 1, "v", 1);
}
static int get_in_process(weir_ctx *ctx, const weir_record *r) {
  (void)r;
  const void *v;
  size_t vlen;
  int rc = weir_broadcast_get(ctx, "k", 1, &v, &vlen);
  return rc < 0 ? rc : 0;
}
static int ignore(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  (void)r;
  return 0;
}

static int emit_small(weir_ctx *ctx, uint64_t i, void *user) {
  (void)user;
  return weir_emit_u64(ctx, i, i);
}
static th_seq small_seq = {.n = 10, .emit = emit_small};

/* Runs a job of the operator make() adds with `vt`; asserts that it fails
 * with WEIR_ESTATE and a message that says `want`. */
static void fails_with_estate(weir_stream *(*make)(weir_job *job, const weir_operator_vt *vt),
                              const weir_operator_vt *vt, const char *want) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "misuse"), 0);
  weir_stream *s = make(job, vt);
  cr_assert_not_null(s, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &sink_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  weir_run_opts o = {.workers = 1};
  cr_assert_eq(weir_job_run(job, &o), WEIR_ESTATE, "%s", weir_job_error(job));
  cr_assert(strstr(weir_job_error(job), want), "%s", weir_job_error(job));
  weir_job_destroy(job);
}
static weir_stream *connect_bcast(weir_job *job, const weir_operator_vt *vt) {
  return weir_connect(weir_key_by(weir_source(job, "a", &th_seq_vt, &small_seq, 1)),
                      weir_broadcast(weir_source(job, "b", &th_seq_vt, &small_seq, 1)), "op", vt,
                      NULL, 2, NULL);
}
static weir_stream *connect_keyed(weir_job *job, const weir_operator_vt *vt) {
  return weir_connect(weir_key_by(weir_source(job, "a", &th_seq_vt, &small_seq, 1)),
                      weir_key_by(weir_source(job, "b", &th_seq_vt, &small_seq, 1)), "op", vt, NULL,
                      2, NULL);
}
static weir_stream *one_input(weir_job *job, const weir_operator_vt *vt) {
  return weir_process(weir_key_by(weir_source(job, "a", &th_seq_vt, &small_seq, 1)), "op", vt, NULL,
                      2);
}

Test(broadcast, misuse_is_refused) {
  reset();
  atomic_store(&stop_after, 0);
  /* Written from the first input: the copies would differ. */
  const weir_operator_vt put1 = {
      .size = sizeof put1, .name = "op", .process = put_in_process, .process2 = ignore};
  fails_with_estate(connect_bcast, &put1, "outside process2");
  /* No broadcast input: both inputs keyed, or one input. */
  const weir_operator_vt get2 = {
      .size = sizeof get2, .name = "op", .process = get_in_process, .process2 = ignore};
  fails_with_estate(connect_keyed, &get2, "has no broadcast input");
  const weir_operator_vt get1 = {.size = sizeof get1, .name = "op", .process = get_in_process};
  fails_with_estate(one_input, &get1, "has no broadcast input");
  const weir_operator_vt put2 = {
      .size = sizeof put2, .name = "op", .process = ignore, .process2 = put_in_process};
  fails_with_estate(connect_keyed, &put2, "has no broadcast input");
}

/* A keyed first input and a broadcast second one make a keyed operator
 * (keyed state is declared without a build error); a broadcast side that
 * is mixed with another partitioning (a union) is not broadcast, and with
 * a keyed first input that is a build error. */
Test(broadcast, keyed_with_a_broadcast_input) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "kb"), 0);
  weir_op_opts o = {.size = sizeof o, .flags = WEIR_OP_KEYED_STATE};
  weir_stream *j = weir_connect(weir_key_by(weir_source(job, "a", &th_seq_vt, &small_seq, 1)),
                                weir_broadcast(weir_source(job, "b", &th_seq_vt, &small_seq, 1)),
                                "op", &rules_vt, NULL, 2, &o);
  cr_assert_not_null(j, "%s", weir_job_error(job));
  weir_job_destroy(job);

  cr_assert_eq(weir_job_create(&job, "mixed"), 0);
  weir_stream *b = weir_union(weir_broadcast(weir_source(job, "b", &th_seq_vt, &small_seq, 1)),
                              weir_rebalance(weir_source(job, "c", &th_seq_vt, &small_seq, 1)));
  j = weir_connect(weir_key_by(weir_source(job, "a", &th_seq_vt, &small_seq, 1)), b, "op",
                   &rules_vt, NULL, 2, &o);
  cr_assert_null(j);
  cr_assert_eq(weir_job_build_error(job), WEIR_EPLAN);
  cr_assert(strstr(weir_job_error(job), "neither keyed (weir_key_by) nor broadcast"), "%s",
            weir_job_error(job));
  weir_job_destroy(job);
}
