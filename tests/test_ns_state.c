/* test_ns_state.c: namespaced u64 state (weir_state_ns_*, engine/src/wtab.c,
 * ctx.c, checkpoint.c, rescale.c).
 *
 * Covers: the table against a reference (random inserts, updates and
 * deletes, the reserved pair (UINT64_MAX, UINT64_MAX) and 0 as keys and
 * namespaces, growth from empty, deletions inside probe chains that wrap
 * around the table's end); the calls through a keyed operator in the
 * harness against a model kept here, with a snapshot and a restore half-way
 * and every entry compared at the end; a (key, ns) stored twice refused at
 * restore (WEIR_ECORRUPT); WEIR_ESTATE without a current key (process_batch
 * before weir_state_select, finish, a snapshot callback right after
 * records) and WEIR_ENOTKEYED from a non-keyed operator; a job stopped and
 * restored at the same and at other parallelisms (2 -> 2 -> 3 -> 1): every
 * (key, ns) exact at the end, against a sequential replay of the records.
 *
 * Seeds are printed; WEIR_TEST_SEED replays one.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "helpers.h"
#include "wtab.h"
#include "base/alloc.h"
#include "weir/weir.h"

static uint64_t seed_of(const char *what) {
  const char *e = getenv("WEIR_TEST_SEED");
  uint64_t s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock();
  fprintf(stderr, "%s: seed %llu (WEIR_TEST_SEED replays it)\n", what, (unsigned long long)s);
  return s;
}

/* Keys and namespaces: the reserved marker, its neighbours, 0, small
 * numbers and random ones. */
#define NK 300
#define NN 40
static uint64_t keys[NK], nss[NN];
static void make_names(uint64_t *rng) {
  for (int i = 0; i < NK; i++)
    keys[i] = i < 3 ? UINT64_MAX - (uint64_t)i : i < 40 ? (uint64_t)i - 3 : th_splitmix64(rng);
  for (int i = 0; i < NN; i++)
    nss[i] = i < 2    ? UINT64_MAX - (uint64_t)i
             : i < 20 ? (uint64_t)(i - 2) * 1000
                      : th_splitmix64(rng);
}

/* ---- the table on its own ------------------------------------------------------ */

typedef struct ref_ent {
  uint64_t v;
  int live;
} ref_ent;

static int count_each(void *user, uint64_t k, uint64_t ns, uint64_t v) {
  (void)k;
  (void)ns;
  (void)v;
  ++*(uint64_t *)user;
  return 0;
}

Test(ns_state, table_against_a_reference) {
  uint64_t rng = seed_of("table_against_a_reference");
  make_names(&rng);
  static ref_ent ref[NK][NN];
  memset(ref, 0, sizeof ref);
  weir__wtab t = {0};
  uint64_t live = 0;
  for (int op = 0; op < 400000; op++) {
    uint64_t r = th_splitmix64(&rng);
    int ki = (int)(r % NK), ni = (int)((r >> 16) % NN), what = (int)((r >> 32) % 10);
    uint64_t k = keys[ki], ns = nss[ni];
    ref_ent *e = &ref[ki][ni];
    if (what < 5) { /* upsert */
      int created;
      uint64_t *v = weir__wtab_upsert(&t, k, ns, &created);
      cr_assert_eq(created, !e->live, "op %d: created %d for (%llx, %llx)", op, created,
                   (unsigned long long)k, (unsigned long long)ns);
      if (!e->live) live++;
      cr_assert_eq(*v, e->live ? e->v : 0);
      *v += r >> 40;
      e->v += r >> 40;
      e->live = 1;
    } else if (what < 8) { /* delete */
      cr_assert_eq(weir__wtab_del(&t, k, ns), e->live, "op %d", op);
      if (e->live) live--;
      e->live = 0;
      e->v = 0;
    } else {
      uint64_t *v = weir__wtab_find(&t, k, ns);
      cr_assert_eq(v != NULL, e->live, "op %d: found %d", op, v != NULL);
      if (v) cr_assert_eq(*v, e->v);
    }
    cr_assert_eq(weir__wtab_count(&t), live);
    cr_assert_leq(t.n * 2, t.cap, "load above 1/2");
  }
  /* Every entry, once more, and the copy a checkpoint takes. */
  uint64_t n = weir__wtab_count(&t), seen = 0;
  uint64_t *ck = weir_malloc((n + 1) * 8), *cn = weir_malloc((n + 1) * 8),
           *cv = weir_malloc((n + 1) * 8);
  weir__wtab_copy(&t, ck, cn, cv);
  for (uint64_t i = 0; i < n; i++) {
    int ki = 0, ni = 0;
    while (ki < NK && keys[ki] != ck[i]) ki++;
    while (ni < NN && nss[ni] != cn[i]) ni++;
    cr_assert(ki < NK && ni < NN && ref[ki][ni].live, "copied an entry that is not there");
    cr_assert_eq(cv[i], ref[ki][ni].v);
  }
  cr_assert_eq(weir__wtab_each(&t, count_each, &seen), 0);
  cr_assert_eq(seen, n);
  weir_free(ck);
  weir_free(cn);
  weir_free(cv);
  weir__wtab_close(&t);
}

/* Entries whose home is one of the last slots of a 256-slot table: their
 * cluster wraps around to the start. Deleting them one by one, in every
 * order of a few rounds, must leave the others reachable. */
Test(ns_state, deletion_in_chains_that_wrap) {
  weir__wtab t = {0};
  weir__wtab_reserve(&t, 1);
  cr_assert_eq(t.cap, 256);
  uint64_t ck[60], cn[60];
  int m = 0;
  for (uint64_t ns = 0; m < 60; ns++) {
    uint64_t h = weir__wtab_home(7, ns, t.shift);
    if (h >= 250 || h <= 2) {
      ck[m] = 7;
      cn[m++] = ns;
    }
  }
  /* 60 entries: under half the table, no growth. */
  uint64_t rng = seed_of("deletion_in_chains_that_wrap");
  for (int round = 0; round < 50; round++) {
    for (int i = 0; i < m; i++) {
      int created;
      *weir__wtab_upsert(&t, ck[i], cn[i], &created) = cn[i] + 1;
      cr_assert(created);
    }
    cr_assert_eq(t.cap, 256);
    int order[60];
    for (int i = 0; i < m; i++) order[i] = i;
    for (int i = m - 1; i > 0; i--) {
      int j = (int)(th_splitmix64(&rng) % (uint64_t)(i + 1)), x = order[i];
      order[i] = order[j];
      order[j] = x;
    }
    for (int d = 0; d < m; d++) {
      cr_assert_eq(weir__wtab_del(&t, ck[order[d]], cn[order[d]]), 1);
      for (int i = d + 1; i < m; i++) {
        uint64_t *v = weir__wtab_find(&t, ck[order[i]], cn[order[i]]);
        cr_assert_not_null(v, "round %d: entry lost after %d deletes", round, d + 1);
        cr_assert_eq(*v, cn[order[i]] + 1);
      }
    }
    cr_assert_eq(t.n, 0);
  }
  weir__wtab_close(&t);
}

/* ---- the calls, through a keyed operator in the harness ------------------------ */

/* A record's payload: the call and its arguments; the operator emits
 * {rc, out}. */
enum { OP_GET, OP_PUT, OP_ADD, OP_DEL };
typedef struct call {
  uint64_t op, ns, arg;
} call;

static int model_process(weir_ctx *ctx, const weir_record *r) {
  call c;
  memcpy(&c, r->payload, sizeof c);
  uint64_t out[2] = {0, 0};
  int rc = 0;
  switch (c.op) {
  case OP_GET:
    rc = weir_state_ns_get_u64(ctx, c.ns, &out[1]);
    break;
  case OP_PUT:
    rc = weir_state_ns_put_u64(ctx, c.ns, c.arg);
    break;
  case OP_ADD:
    rc = weir_state_ns_add_u64(ctx, c.ns, c.arg, &out[1]);
    break;
  default:
    rc = weir_state_ns_del_u64(ctx, c.ns);
  }
  if (rc < 0) return rc;
  out[0] = (uint64_t)rc;
  return weir_emit(ctx, r->key, out, sizeof out);
}

/* finish: every entry, as (key, {ns, value}); no current key here. */
static int emit_entry(void *user, uint64_t k, uint64_t ns, uint64_t v) {
  uint64_t p[2] = {ns, v};
  return weir_emit(user, k, p, sizeof p);
}
static int model_finish(weir_ctx *ctx) {
  uint64_t x;
  if (weir_state_ns_get_u64(ctx, 1, &x) != WEIR_ESTATE)
    return weir_ctx_fail(ctx, WEIR_EOPERATOR, "ns_get in finish was not refused");
  return weir_state_ns_each_u64(ctx, emit_entry, ctx);
}
static const weir_operator_vt model_vt = {
    .size = sizeof model_vt, .name = "model", .process = model_process, .finish = model_finish};

static int index_of(const uint64_t *v, int n, uint64_t x) {
  for (int i = 0; i < n; i++)
    if (v[i] == x) return i;
  return -1;
}

Test(ns_state, calls_against_a_model_with_a_restore) {
  uint64_t rng = seed_of("calls_against_a_model_with_a_restore");
  make_names(&rng);
  static ref_ent ref[NK][NN];
  memset(ref, 0, sizeof ref);
  weir__harness *h = weir__harness_create(&model_vt, NULL, 1, 0, 1);
  cr_assert_not_null(h);
  const int nops = 200000;
  for (int i = 0; i < nops; i++) {
    if (i == nops / 2) { /* a checkpoint and a restore into a new instance */
      weir_subtask_snapshot snap;
      cr_assert_eq(weir__harness_snapshot(h, 1, &snap), 0, "%s", weir__harness_error(h));
      cr_assert_gt(snap.n_ns, 1000);
      cr_assert_eq(weir__harness_restore(h, &snap), 0, "%s", weir__harness_error(h));
    }
    uint64_t r = th_splitmix64(&rng);
    int ki = (int)(r % NK), ni = (int)((r >> 16) % NN), what = (int)((r >> 32) % 10);
    call c = {what < 2   ? OP_GET
              : what < 4 ? OP_PUT
              : what < 8 ? OP_ADD
                         : OP_DEL,
              nss[ni], th_splitmix64(&rng) >> (r % 64)};
    ref_ent *e = &ref[ki][ni];
    uint64_t want[2] = {0, 0};
    switch (c.op) {
    case OP_GET:
      want[0] = (uint64_t)e->live;
      want[1] = e->v;
      break;
    case OP_PUT:
      e->v = c.arg;
      e->live = 1;
      break;
    case OP_ADD:
      want[0] = (uint64_t)!e->live; /* 1: created */
      e->v += c.arg;
      e->live = 1;
      want[1] = e->v;
      break;
    default:
      e->v = 0;
      e->live = 0;
    }
    weir_record rec = {keys[ki], 0, (uint64_t)i, &c, sizeof c};
    cr_assert_eq(weir__harness_process(h, &rec), 0, "%s", weir__harness_error(h));
    cr_assert_eq(weir__harness_count(h), (uint32_t)i + 1);
    weir_record got = weir__harness_output(h, (uint32_t)i);
    cr_assert_eq(got.len, sizeof want);
    cr_assert_eq(memcmp(got.payload, want, sizeof want), 0,
                 "op %d (%llu on key %d ns %d): got {%llu, %llu}, want {%llu, %llu}", i,
                 (unsigned long long)c.op, ki, ni, (unsigned long long)((uint64_t *)got.payload)[0],
                 (unsigned long long)((uint64_t *)got.payload)[1], (unsigned long long)want[0],
                 (unsigned long long)want[1]);
  }
  cr_assert_eq(weir__harness_finish(h), 0, "%s", weir__harness_error(h));
  uint32_t n = weir__harness_count(h) - (uint32_t)nops;
  uint64_t live = 0;
  for (int ki = 0; ki < NK; ki++)
    for (int ni = 0; ni < NN; ni++) live += ref[ki][ni].live;
  cr_assert_eq(n, live, "%u entries at the end, want %llu", n, (unsigned long long)live);
  for (uint32_t i = 0; i < n; i++) {
    weir_record got = weir__harness_output(h, (uint32_t)nops + i);
    uint64_t p[2];
    memcpy(p, got.payload, sizeof p);
    int ki = index_of(keys, NK, got.key), ni = index_of(nss, NN, p[0]);
    cr_assert(ki >= 0 && ni >= 0 && ref[ki][ni].live, "entry %u not in the model", i);
    cr_assert_eq(p[1], ref[ki][ni].v);
  }
  weir__harness_destroy(h);
}

/* A checkpoint that holds one (key, ns) twice is damaged. */
Test(ns_state, a_repeated_entry_is_refused_at_restore) {
  weir__harness *h = weir__harness_create(&model_vt, NULL, 1, 0, 1);
  cr_assert_not_null(h);
  weir_subtask_snapshot snap;
  cr_assert_eq(weir__harness_snapshot(h, 1, &snap), 0);
  snap.n_ns = 3;
  snap.ns_keys = weir_malloc(3 * 8);
  snap.ns_ns = weir_malloc(3 * 8);
  snap.ns_values = weir_malloc(3 * 8);
  const uint64_t k[3] = {5, 5, 5}, n[3] = {UINT64_MAX, 0, UINT64_MAX}, v[3] = {1, 2, 3};
  memcpy(snap.ns_keys, k, sizeof k);
  memcpy(snap.ns_ns, n, sizeof n);
  memcpy(snap.ns_values, v, sizeof v);
  cr_assert_eq(weir__harness_restore(h, &snap), WEIR_ECORRUPT);
  cr_assert(strstr(weir__harness_error(h), "twice"), "%s", weir__harness_error(h));
  weir__harness_destroy(h);
}

/* ---- no current key --------------------------------------------------------------- */

static _Atomic uint64_t wrong; /* a call that should have been refused (or allowed) was not */

static int batch_process(weir_ctx *ctx, const weir_batch *b) {
  uint64_t x;
  if (weir_state_ns_get_u64(ctx, 1, &x) != WEIR_ESTATE) atomic_fetch_add(&wrong, 1);
  if (weir_state_ns_put_u64(ctx, 1, 1) != WEIR_ESTATE) atomic_fetch_add(&wrong, 1);
  if (weir_state_ns_add_u64(ctx, 1, 1, &x) != WEIR_ESTATE) atomic_fetch_add(&wrong, 1);
  if (weir_state_ns_del_u64(ctx, 1) != WEIR_ESTATE) atomic_fetch_add(&wrong, 1);
  for (uint32_t i = 0; i < b->len; i++) {
    weir_state_select(ctx, b->keys[i]);
    int rc = weir_state_ns_add_u64(ctx, 1, 1, &x);
    if (rc < 0) return rc;
  }
  return 0;
}
static const weir_operator_vt batch_vt = {
    .size = sizeof batch_vt, .name = "batch", .process_batch = batch_process};

static int not_keyed_process(weir_ctx *ctx, const weir_record *r) {
  (void)r;
  uint64_t x;
  if (weir_state_ns_add_u64(ctx, 1, 1, &x) != WEIR_ENOTKEYED) atomic_fetch_add(&wrong, 1);
  return 0;
}
static const weir_operator_vt not_keyed_vt = {
    .size = sizeof not_keyed_vt, .name = "plain", .process = not_keyed_process};

Test(ns_state, refused_without_a_current_key) {
  atomic_store(&wrong, 0);
  weir__harness *h = weir__harness_create(&batch_vt, NULL, 1, 0, 1);
  uint64_t p = 9;
  weir_record rec = {42, 0, 1, &p, sizeof p};
  cr_assert_eq(weir__harness_process(h, &rec), 0, "%s", weir__harness_error(h));
  weir_subtask_snapshot snap;
  cr_assert_eq(weir__harness_snapshot(h, 1, &snap), 0);
  cr_assert_eq(snap.n_ns, 1);
  cr_assert_eq(snap.ns_keys[0], 42, "the entry belongs to the selected key");
  weir_subtask_snapshot_free(&snap);
  weir__harness_destroy(h);
  h = weir__harness_create(&not_keyed_vt, NULL, 0, 0, 1);
  cr_assert_eq(weir__harness_process(h, &rec), 0, "%s", weir__harness_error(h));
  weir__harness_destroy(h);
  cr_assert_eq(atomic_load(&wrong), 0);
}

/* In a job, the error fails it with a message that says why. */
static int forgetful_batch(weir_ctx *ctx, const weir_batch *b) {
  (void)b;
  return weir_state_ns_put_u64(ctx, 3, 3);
}
static const weir_operator_vt forgetful_vt = {
    .size = sizeof forgetful_vt, .name = "forgetful", .process_batch = forgetful_batch};
static int drop(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  (void)r;
  return 0;
}
static const weir_operator_vt drop_vt = {.size = sizeof drop_vt, .name = "out", .process = drop};
static int emit_small(weir_ctx *ctx, uint64_t i, void *user) {
  (void)user;
  return weir_emit_u64(ctx, i, i);
}
static th_seq small_seq = {.n = 10, .emit = emit_small};

Test(ns_state, a_batch_without_select_fails_the_job) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "forgetful"), 0);
  weir_stream *s = weir_process(weir_key_by(weir_source(job, "src", &th_seq_vt, &small_seq, 1)),
                                "forgetful", &forgetful_vt, NULL, 2);
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &drop_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  weir_run_opts o = {.workers = 1};
  cr_assert_eq(weir_job_run(job, &o), WEIR_ESTATE, "%s", weir_job_error(job));
  cr_assert(strstr(weir_job_error(job), "without a current key"), "%s", weir_job_error(job));
  cr_assert(strstr(weir_job_error(job), "weir_state_select"), "%s", weir_job_error(job));
  weir_job_destroy(job);
}

/* ---- stop, restore, rescale -------------------------------------------------------- */

/* Record i has key key_of(i % JK) and works on namespace ns_of(i % JW):
 * every 13th record of the first JDEL deletes it, the others add i + 1 (the
 * final values depend on every run, the first included). */
#define JN 60000u
#define JK 150u
#define JDEL 10000u
#define JW 7u /* prime to JK: every key meets every namespace */
static uint64_t key_of(uint64_t j) {
  return j == 0 ? UINT64_MAX : j == 1 ? 0 : j * 0x9e3779b97f4a7c15ull;
}
static uint64_t ns_of(uint64_t w) {
  return w == 0 ? UINT64_MAX : w * 1000;
}
static int emit_job(weir_ctx *ctx, uint64_t i, void *user) {
  (void)user;
  return weir_emit_u64(ctx, key_of(i % JK), i);
}
static uint64_t job_rate;
static th_seq job_seq = {.n = JN, .emit = emit_job, .rate = &job_rate, .burst = 50};

static _Atomic uint64_t results, stop_after, finals;
static _Atomic uint64_t got_v[JK][JW];
static _Atomic int got_live[JK][JW];
static weir_job *cur_job;

static int job_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t i = weir_payload_u64(r), ns = ns_of(i % JW), v = 0;
  int rc;
  if (i % 13 == 0 && i < JDEL)
    rc = weir_state_ns_del_u64(ctx, ns);
  else
    rc = weir_state_ns_add_u64(ctx, ns, i + 1, &v);
  if (rc < 0) return rc;
  return weir_emit_u64(ctx, r->key, v);
}
/* At the true end only: finish runs at a stop too. */
static int job_finish(weir_ctx *ctx) {
  if (weir_ctx_stopping(ctx)) return 0;
  return weir_state_ns_each_u64(ctx, emit_entry, ctx);
}
/* Right after records: no current key (the last record's must not stay). */
static int job_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  (void)w;
  if (weir_state_ns_put_u64(ctx, 7, 7) != WEIR_ESTATE) atomic_fetch_add(&wrong, 1);
  return 0;
}
static const weir_operator_vt job_vt = {.size = sizeof job_vt,
                                        .name = "ns",
                                        .process = job_process,
                                        .finish = job_finish,
                                        .snapshot = job_snapshot};

static int job_sink(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  if (r->len == 16) { /* an entry from finish */
    uint64_t p[2];
    memcpy(p, r->payload, sizeof p);
    uint64_t j = 0, w = 0;
    while (j < JK && key_of(j) != r->key) j++;
    while (w < JW && ns_of(w) != p[0]) w++;
    if (j == JK || w == JW || atomic_exchange(&got_live[j][w], 1)) {
      atomic_fetch_add(&wrong, 1);
      return 0;
    }
    atomic_store(&got_v[j][w], p[1]);
    atomic_fetch_add(&finals, 1);
    return 0;
  }
  uint64_t n = atomic_fetch_add(&results, 1) + 1;
  if (atomic_load(&stop_after) && n == atomic_load(&stop_after)) weir_job_stop(cur_job);
  return 0;
}
static const weir_operator_vt job_sink_vt = {
    .size = sizeof job_sink_vt, .name = "out", .process = job_sink};

static void run_job(int p, const char *state, int restore) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "ns"), 0);
  weir_stream *s = weir_process(weir_key_by(weir_source(job, "src", &th_seq_vt, &job_seq, 1)), "ns",
                                &job_vt, NULL, p);
  cr_assert_not_null(s, "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &job_sink_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  cur_job = job;
  weir_run_opts o = th_event_run_opts(state, restore);
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
}

TestSuite(ns_state, .timeout = 150);

Test(ns_state, exact_after_stops_restores_and_rescales) {
  char *state = th_tmpdir();
  cr_assert_not_null(state);
  atomic_store(&wrong, 0);
  const int ps[4] = {2, 2, 3, 1};
  for (int r = 0; r < 4; r++) {
    atomic_store(&results, 0);
    atomic_store(&finals, 0);
    job_rate = r < 3 ? 60000 : 0;
    atomic_store(&stop_after, r < 3 ? 8000 : 0);
    run_job(ps[r], state, r > 0);
    if (r < 3)
      cr_assert(atomic_load(&results) >= 8000 && atomic_load(&finals) == 0,
                "run %d: %llu results, %llu entries: not stopped part-way", r,
                (unsigned long long)atomic_load(&results),
                (unsigned long long)atomic_load(&finals));
  }
  cr_assert_eq(atomic_load(&wrong), 0);
  /* A sequential replay: per key, records come in order. */
  static uint64_t want_v[JK][JW];
  static int want_live[JK][JW];
  memset(want_v, 0, sizeof want_v);
  memset(want_live, 0, sizeof want_live);
  for (uint64_t i = 0; i < JN; i++) {
    uint64_t j = i % JK, w = i % JW;
    if (i % 13 == 0 && i < JDEL) {
      want_v[j][w] = 0;
      want_live[j][w] = 0;
    } else {
      want_v[j][w] += i + 1;
      want_live[j][w] = 1;
    }
  }
  uint64_t n = 0;
  for (uint32_t j = 0; j < JK; j++)
    for (uint32_t w = 0; w < JW; w++) {
      n += (uint64_t)want_live[j][w];
      cr_assert_eq(atomic_load(&got_live[j][w]), want_live[j][w], "key %u ns %u: live %d", j, w,
                   atomic_load(&got_live[j][w]));
      cr_assert_eq(atomic_load(&got_v[j][w]), want_v[j][w], "key %u ns %u: %llu, want %llu", j, w,
                   (unsigned long long)atomic_load(&got_v[j][w]), (unsigned long long)want_v[j][w]);
    }
  cr_assert_eq(atomic_load(&finals), n);
  th_rmrf(state);
  free(state);
}
