/* stress_restore.c: the streamed restore's threads (prefaulting during the
 * probe, loader threads building the tables, the workers that then own
 * them) under ThreadSanitizer.
 *
 * A counter job (generator over K keys -> key_by -> weir_count -> a sink
 * that keeps each key's largest count) at parallelism P in {1, 3, 4} on 2
 * workers is stopped part-way; a second run restores a checkpoint taken
 * while it ran, with the same parallelism, and runs to the end: every
 * key's largest count must be N/K. Then the same restore with one u64
 * chunk damaged must fail with WEIR_ECORRUPT, run nothing and hang
 * nowhere.
 *
 * A plain main() program (Criterion cannot start under ThreadSanitizer):
 * prints "N passed, N failed" and exits non-zero on failure.
 */
#include <lmdb.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "helpers.h"
#include "base/alloc.h"
#include "snapshot/store.h"
#include "weir/weir.h"

#define N 120000u
#define K 20000u

static _Atomic uint64_t maxc[K];
static _Atomic uint64_t seen;
static uint64_t stop_after;
static weir_job *cur_job;
static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "stress_restore: " __VA_ARGS__);                                             \
      fprintf(stderr, "\n");                                                                       \
      failures++;                                                                                  \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

static int sink_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t count = 0;
  if (r->len != 8 || r->key >= K) return weir_ctx_fail(ctx, WEIR_EINVAL, "bad record");
  memcpy(&count, r->payload, 8);
  uint64_t was = atomic_load(&maxc[r->key]);
  while (count > was && !atomic_compare_exchange_weak(&maxc[r->key], &was, count)) {
  }
  uint64_t n = atomic_fetch_add(&seen, 1) + 1;
  if (stop_after && n == stop_after) weir_job_stop(cur_job);
  return 0;
}
static const weir_operator_vt sink_vt = {
    .size = sizeof(weir_operator_vt), .name = "max", .process = sink_process};

static weir_job *build(int p) {
  weir_job *job = NULL;
  if (weir_job_create(&job, "stress-restore")) return NULL;
  weir_gen_opts go = {.records = N, .keys = K};
  weir_stream *keyed = weir_key_by(weir_gen(job, "gen", &go, p));
  if (weir_sink(weir_count(keyed, "count", p), "max", &sink_vt, NULL, p)) {
    weir_job_destroy(job);
    return NULL;
  }
  return job;
}

static int run(const char *state, int p, uint64_t restore_id, char *err, size_t errlen) {
  cur_job = build(p);
  if (!cur_job) return WEIR_EINVAL;
  weir_run_opts o = {
      .workers = 2, .state_dir = state, .checkpoint_interval_ms = 10, .retain = 1000};
  if (restore_id) {
    o.restore = WEIR_RESTORE_ID;
    o.restore_id = restore_id;
  }
  int rc = weir_job_run(cur_job, &o);
  snprintf(err, errlen, "%s", weir_job_error(cur_job));
  weir_job_destroy(cur_job);
  cur_job = NULL;
  return rc;
}

static uint64_t mid_checkpoint(const char *state) {
  weir_store *st = NULL;
  weir_store_opts so = {.read_only = 1};
  if (weir_store_open(&st, state, &so)) return 0;
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  uint64_t id = 0;
  if (weir_store_list(st, &list, &n) == 0 && n) id = list[n / 2].id;
  weir_free(list);
  weir_store_close(st);
  return id;
}

/* Flips a payload byte of the first u64 chunk of checkpoint id. */
static int damage(const char *state, uint64_t id) {
  char store[700];
  snprintf(store, sizeof store, "%s/store", state);
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  MDB_cursor *cur = NULL;
  int rc = mdb_env_create(&env);
  if (!rc) rc = mdb_env_set_maxdbs(env, 4);
  if (!rc) rc = mdb_env_set_mapsize(env, 1ull << 30);
  if (!rc) rc = mdb_env_open(env, store, MDB_NOTLS, 0644);
  if (!rc) rc = mdb_txn_begin(env, NULL, 0, &txn);
  if (!rc) rc = mdb_dbi_open(txn, "chunks", 0, &dbi);
  if (!rc) rc = mdb_cursor_open(txn, dbi, &cur);
  uint8_t kb[16] = {0};
  for (int i = 0; i < 8; i++) kb[i] = (uint8_t)(id >> (56 - 8 * i));
  MDB_val key = {16, kb}, val;
  int done = 0;
  for (int r = rc ? rc : mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); r == 0 && !done;
       r = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
    const uint8_t *v = val.mv_data, *k = key.mv_data;
    if (key.mv_size != 16 || memcmp(k, kb, 8) != 0) break;
    /* u64 state: with its keys, or values only (keys shared). */
    if (val.mv_size > WEIR__ENV_HDR + 8 && v[7] == 0 &&
        (v[6] == WEIR__KIND_U64 || v[6] == WEIR__KIND_U64_VALUES)) {
      uint8_t *bad = malloc(val.mv_size);
      memcpy(bad, v, val.mv_size);
      bad[WEIR__ENV_HDR + (val.mv_size - WEIR__ENV_HDR) / 2] ^= 0x5a;
      MDB_val nv = {val.mv_size, bad};
      done = mdb_cursor_put(cur, &key, &nv, MDB_CURRENT) == 0;
      free(bad);
    }
  }
  if (cur) mdb_cursor_close(cur);
  if (txn) rc = done ? mdb_txn_commit(txn) : (mdb_txn_abort(txn), -1);
  if (env) mdb_env_close(env);
  return done && rc == 0 ? 0 : -1;
}

static void one(int p) {
  char *dir = th_tmpdir();
  CHECK(dir, "no temporary directory");
  char state[600], err[1024];
  snprintf(state, sizeof state, "%s/state", dir);
  memset(maxc, 0, sizeof maxc);
  atomic_store(&seen, 0);
  stop_after = N / 3;
  int rc = run(state, p, 0, err, sizeof err);
  stop_after = 0;
  CHECK(rc == 0, "P %d run 1: %s", p, err);
  uint64_t id = mid_checkpoint(state);
  CHECK(id, "P %d: no checkpoint", p);
  /* Counts carry over: keys that ended in run 1 stay at N/K. */
  atomic_store(&seen, 0);
  rc = run(state, p, id, err, sizeof err);
  CHECK(rc == 0, "P %d restore of %llu: %s", p, (unsigned long long)id, err);
  for (uint64_t k = 0; k < K; k++)
    CHECK(atomic_load(&maxc[k]) == N / K, "P %d from %llu: key %llu ends at %llu, expected %u", p,
          (unsigned long long)id, (unsigned long long)k, (unsigned long long)atomic_load(&maxc[k]),
          N / K);
  CHECK(damage(state, id) == 0, "P %d: could not damage checkpoint %llu", p,
        (unsigned long long)id);
  atomic_store(&seen, 0);
  rc = run(state, p, id, err, sizeof err);
  CHECK(rc == WEIR_ECORRUPT, "P %d damaged restore: rc %d: %s", p, rc, err);
  CHECK(atomic_load(&seen) == 0, "P %d: a refused restore ran records", p);
  th_rmrf(dir);
  free(dir);
}

int main(void) {
  static const int ps[] = {1, 3, 4};
  int runs = 0;
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++, runs++) one(ps[i]);
  printf("stress_restore: %d passed, %d failed\n", runs - failures, failures);
  return failures ? 1 : 0;
}
