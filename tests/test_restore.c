/* test_restore.c: the streamed restore (engine/src/job.c loading,
 * weir_store_load_stream, weir__u64_build_*), in process.
 *
 * The job: a generator (N records over K keys, key = i mod K) -> key_by ->
 * two keyed counters, one in the u64 map (weir_count: its state streams
 * into the tables while it is read) and one in the byte-string map (a test
 * operator keyed by the key's decimal text: restored from the loaded
 * snapshot at open) -> a sink per counter that keeps the largest count seen
 * per key. Run 1 is stopped part-way; run 2 restores a checkpoint of it
 * with the same parallelism and runs to the end. Restored exactly, every
 * key's largest count is N/K in both counters: a key whose state was lost
 * or wrong restarts low or ends high.
 *
 * With K large, each subtask's u64 state takes several chunks; a chunk
 * damaged in the middle of one subtask's stream must fail the restore with
 * WEIR_ECORRUPT naming the checkpoint, operator, subtask and chunk, run
 * nothing, and leak nothing (the tables other subtasks built, and the one
 * half built, are dropped).
 */
#include <criterion/criterion.h>

#include <lmdb.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "helpers.h"
#include "store_impl.h"
#include "base/alloc.h"
#include "base/failpoint.h"
#include "weir/operators.h"
#include "snapshot/store.h"
#include "weir/weir.h"

#define N 360000u
#define K 60000u

typedef struct run_cfg {
  _Atomic uint64_t max[2][K]; /* per counter, per key: the largest count */
  _Atomic uint64_t seen;      /* records at the sinks */
  uint64_t stop_after;        /* ask for a stop after this many (0 = never) */
  _Atomic uint64_t completed; /* checkpoints the sinks heard completed */
  atomic_int stopped;         /* the stop was asked for */
  uint64_t rate;              /* the generator's records/s (0: as fast as it can) */
  weir_job *job;
} run_cfg;

static run_cfg cfg;

static void note_max(_Atomic uint64_t *m, uint64_t v) {
  uint64_t cur = atomic_load(m);
  while (v > cur && !atomic_compare_exchange_weak(m, &cur, v)) {
  }
}

static int sink_process(weir_ctx *ctx, const weir_record *r) {
  int which = *(const int *)weir_ctx_arg(ctx);
  uint64_t count = 0;
  cr_assert_eq(r->len, 8);
  memcpy(&count, r->payload, 8);
  if (r->key >= K)
    return weir_ctx_fail(ctx, WEIR_EINVAL, "key %llu out of range", (unsigned long long)r->key);
  note_max(&cfg.max[which][r->key], count);
  uint64_t n = atomic_fetch_add(&cfg.seen, 1) + 1;
  /* The stop waits for a completed checkpoint, so that run 1 leaves two
   * (that one and the final one), however fast it runs. */
  if (cfg.stop_after && n >= cfg.stop_after && atomic_load(&cfg.completed) > 0 &&
      !atomic_exchange(&cfg.stopped, 1))
    weir_job_stop(cfg.job);
  return 0;
}
static int sink_complete(weir_ctx *ctx, uint64_t id) {
  (void)ctx;
  (void)id;
  atomic_fetch_add(&cfg.completed, 1);
  return 0;
}
static const weir_operator_vt sink_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "max",
                                         .process = sink_process,
                                         .checkpoint_complete = sink_complete};
static const int which0 = 0, which1 = 1;

/* A counter in the byte-string map, keyed by the key's decimal text. */
static int bcount_process(weir_ctx *ctx, const weir_record *r) {
  char k[24];
  int kl = snprintf(k, sizeof k, "%llu", (unsigned long long)r->key);
  const void *v = NULL;
  size_t vl = 0;
  uint64_t c = 0;
  int rc = weir_state_get_bytes(ctx, k, (size_t)kl, &v, &vl);
  if (rc < 0) return rc;
  if (rc == 1) {
    cr_assert_eq(vl, 8);
    memcpy(&c, v, 8);
  }
  c++;
  rc = weir_state_put_bytes(ctx, k, (size_t)kl, &c, 8);
  if (rc < 0) return rc;
  return weir_emit_u64(ctx, r->key, c);
}
static const weir_operator_vt bcount_vt = {
    .size = sizeof(weir_operator_vt), .name = "bcount", .process = bcount_process};

static weir_job *build(int p) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "restore"), 0);
  weir_gen_opts go = {.records = N, .keys = K, .rate = cfg.rate};
  weir_stream *keyed = weir_key_by(weir_gen(job, "gen", &go, p));
  cr_assert_eq(weir_sink(weir_count(keyed, "count", p), "max-u64", &sink_vt, (void *)&which0, p), 0,
               "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_process(keyed, "bcount", &bcount_vt, NULL, p), "max-bytes", &sink_vt,
                         (void *)&which1, p),
               0, "%s", weir_job_error(job));
  return job;
}

static weir_run_opts opts(const char *state) {
  weir_run_opts o = {
      .workers = 2, .state_dir = state, .checkpoint_interval_ms = 20, .retain = 1000};
  return o;
}

/* The checkpoints stored in `state`: one from the middle and the last. */
static void stored_ids(const char *state, uint64_t *mid, uint64_t *last) {
  weir_store *st = NULL;
  weir_store_opts so = {.read_only = 1};
  cr_assert_eq(weir_store_open(&st, state, &so), 0);
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  cr_assert_eq(weir_store_list(st, &list, &n), 0);
  cr_assert_gt(n, 0, "no checkpoint completed");
  *mid = list[n / 2].id;
  *last = list[n - 1].id;
  weir_free(list);
  weir_store_close(st);
}

/* Run 1 at parallelism p, stopped after a third of the records (every key
 * has state by then). Returns the id of a checkpoint from its middle in
 * *mid and its last in *last. */
static void run_stopped(const char *state, int p, uint64_t *mid, uint64_t *last) {
  memset(&cfg, 0, sizeof cfg);
  cfg.stop_after = 2 * N / 3; /* two sinks: a third of the records each */
  /* About a second for all the records: the stop (a third of the way,
   * after a completed checkpoint) comes long before the end. */
  cfg.rate = N;
  cfg.job = build(p);
  cfg.rate = 0;
  weir_run_opts o = opts(state);
  cr_assert_eq(weir_job_run(cfg.job, &o), 0, "run 1: %s", weir_job_error(cfg.job));
  cr_assert(weir_job_stopped(cfg.job), "run 1 was not stopped");
  weir_job_destroy(cfg.job);
  stored_ids(state, mid, last);
}

/* Runs the job at parallelism p restored from checkpoint id; returns
 * weir_job_run's code (cfg.job stays for the caller to look at). */
static int run_restored(const char *state, int p, uint64_t id) {
  atomic_store(&cfg.seen, 0);
  cfg.stop_after = 0;
  cfg.job = build(p);
  weir_run_opts o = opts(state);
  o.restore = WEIR_RESTORE_ID;
  o.restore_id = id;
  return weir_job_run(cfg.job, &o);
}

/* Run 2 at parallelism p from checkpoint id, to the end: exact counts. */
static void restore_exact(const char *state, int p, uint64_t id) {
  /* The largest counts carry over from run 1 (a key may have ended there). */
  uint64_t before = 0;
  for (uint64_t k = 0; k < K; k++) before += atomic_load(&cfg.max[0][k]) == N / K;
  cr_assert_lt(before, K / 2, "%llu of %u keys ended in run 1: too few left to check",
               (unsigned long long)before, K);
  int rc = run_restored(state, p, id);
  cr_assert_eq(rc, 0, "restore of checkpoint %llu at %d: %s", (unsigned long long)id, p,
               weir_job_error(cfg.job));
  const weir_run_info *ri = weir_job_run_info(cfg.job);
  cr_assert_eq(ri->restored_from, id);
  cr_assert_gt(ri->restored_bytes, 0);
  cr_assert_geq(ri->restore_ms, ri->restore_read_ms);
  cr_assert_geq(ri->restore_read_ms, ri->restore_probe_ms);
  weir_job_destroy(cfg.job);
  for (int w = 0; w < 2; w++)
    for (uint64_t k = 0; k < K; k++)
      cr_assert_eq(atomic_load(&cfg.max[w][k]), N / K,
                   "parallelism %d from checkpoint %llu: %s counter, key %llu ends at %llu, "
                   "expected %u",
                   p, (unsigned long long)id, w ? "byte-string" : "u64", (unsigned long long)k,
                   (unsigned long long)atomic_load(&cfg.max[w][k]), N / K);
}

TestSuite(restore, .timeout = 180);

/* Run 1 at parallelism p, stopped; then its middle checkpoint restores
 * exactly at p; nothing leaks. */
static void stopped_then_restored(int p) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  uint64_t mid, last;
  run_stopped(state, p, &mid, &last);
  restore_exact(state, p, mid);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* Six subtasks (three per loader thread), several chunks each: exactly the
 * stored state, from a checkpoint taken while the job ran and from the
 * one its stop took. */
Test(restore, many_subtasks_exact) {
  stopped_then_restored(6);
}

/* The chunks of checkpoint id, through LMDB itself: chunks_open begins a
 * write transaction on the store of `state` and puts the cursor on the
 * checkpoint's first chunk (returns mdb_cursor_get's answer, *key and *val
 * set when 0). */
typedef struct chunks_txn {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_cursor *cur;
  uint8_t kb[WEIR__CHUNK_KEY];
} chunks_txn;

static int chunks_open(chunks_txn *c, const char *state, uint64_t id, MDB_val *key, MDB_val *val) {
  char store[700];
  snprintf(store, sizeof store, "%s/store", state);
  cr_assert_eq(mdb_env_create(&c->env), 0);
  cr_assert_eq(mdb_env_set_maxdbs(c->env, 4), 0);
  cr_assert_eq(mdb_env_set_mapsize(c->env, 1ull << 30), 0);
  int rc = mdb_env_open(c->env, store, MDB_NOTLS, 0644);
  cr_assert_eq(rc, 0, "mdb_env_open %s: %s", store, mdb_strerror(rc));
  cr_assert_eq(mdb_txn_begin(c->env, NULL, 0, &c->txn), 0);
  cr_assert_eq(mdb_dbi_open(c->txn, "chunks", 0, &c->dbi), 0);
  cr_assert_eq(mdb_cursor_open(c->txn, c->dbi, &c->cur), 0);
  weir__key_chunk(c->kb, id, 0, 0);
  *key = (MDB_val){sizeof c->kb, c->kb};
  return mdb_cursor_get(c->cur, key, val, MDB_SET_RANGE);
}

/* Commits what was changed and closes. */
static void chunks_close(chunks_txn *c) {
  if (c->cur) mdb_cursor_close(c->cur);
  cr_assert_eq(mdb_txn_commit(c->txn), 0);
  mdb_env_close(c->env);
}

/* Deletes chunk `seq` of the first record of checkpoint id that has more
 * than seq + 1 chunks, through LMDB itself. */
static void delete_chunk(const char *state, uint64_t id, uint32_t seq) {
  chunks_txn c = {0};
  MDB_val key, val;
  int done = 0;
  for (int rc = chunks_open(&c, state, id, &key, &val); rc == 0 && !done;
       rc = mdb_cursor_get(c.cur, &key, &val, MDB_NEXT)) {
    if (key.mv_size != 16 || weir__be64(key.mv_data) != id) break;
    if (weir__be32((const uint8_t *)key.mv_data + 12) == seq + 1) {
      uint8_t target[16];
      memcpy(target, key.mv_data, 16);
      target[15] = (uint8_t)seq;
      target[14] = target[13] = target[12] = 0;
      MDB_val tk = {16, target};
      cr_assert_eq(mdb_del(c.txn, c.dbi, &tk, NULL), 0);
      done = 1;
    }
  }
  cr_assert(done, "no record of checkpoint %llu has %u chunks", (unsigned long long)id, seq + 2);
  chunks_close(&c);
}

/* Flips a payload byte of chunk `seq` of the first record of checkpoint id
 * whose chunks 0..seq+1 hold u64 state (one subtask's stream, in its
 * middle), through LMDB itself. Returns that record. */
static uint32_t damage_u64_chunk(const char *state, uint64_t id, uint32_t seq) {
  chunks_txn c = {0};
  MDB_val key, val;
  uint32_t record = UINT32_MAX, run = 0, cur_rec = UINT32_MAX;
  uint8_t target[16];
  for (int rc = chunks_open(&c, state, id, &key, &val); rc == 0;
       rc = mdb_cursor_get(c.cur, &key, &val, MDB_NEXT)) {
    if (key.mv_size != 16 || weir__be64(key.mv_data) != id) break;
    const uint8_t *k = key.mv_data, *v = val.mv_data;
    uint32_t rec = weir__be32(k + 8), s = weir__be32(k + 12);
    int u64 = val.mv_size > WEIR__ENV_HDR + 64 &&
              (v[6] == WEIR__KIND_U64 || v[6] == WEIR__KIND_U64_VALUES) && v[7] == 0;
    if (rec != cur_rec) {
      cur_rec = rec;
      run = 0;
    }
    if (u64 && s == run) run++;
    if (run == seq + 2) {
      record = rec;
      memcpy(target, k, 16);
      break;
    }
  }
  cr_assert_neq(record, UINT32_MAX, "no record of checkpoint %llu has %u u64 chunks",
                (unsigned long long)id, seq + 2);
  target[15] = (uint8_t)seq;
  target[14] = target[13] = target[12] = 0;
  mdb_cursor_close(c.cur);
  c.cur = NULL;
  key = (MDB_val){16, target};
  cr_assert_eq(mdb_get(c.txn, c.dbi, &key, &val), 0);
  uint8_t *bad = malloc(val.mv_size);
  memcpy(bad, val.mv_data, val.mv_size);
  bad[WEIR__ENV_HDR + val.mv_size / 3] ^= 0x5a;
  MDB_val nv = {val.mv_size, bad};
  cr_assert_eq(mdb_put(c.txn, c.dbi, &key, &nv, 0), 0);
  chunks_close(&c);
  free(bad);
  return record;
}

/* Restores checkpoint id at parallelism p, which must be refused as
 * damaged with a message holding both `want` and `chunk`, before any record
 * runs. */
static void refused_restore(const char *state, int p, uint64_t id, const char *want,
                            const char *chunk) {
  int rc = run_restored(state, p, id);
  cr_assert_eq(rc, WEIR_ECORRUPT, "rc %d: %s", rc, weir_job_error(cfg.job));
  const char *msg = weir_job_error(cfg.job);
  cr_assert(strstr(msg, want) && strstr(msg, chunk), "unclear message: %s", msg);
  if (getenv("WEIR_TEST_VERBOSE")) fprintf(stderr, "refused: %s\n", msg);
  cr_assert_eq(atomic_load(&cfg.seen), 0, "a refused restore ran records");
  weir_job_destroy(cfg.job);
}

/* A damaged chunk in the middle of one subtask's stream, while other
 * subtasks stream theirs on the other loader thread: WEIR_ECORRUPT naming
 * the checkpoint, the operator, a subtask and the chunk; nothing runs;
 * nothing leaks. The older checkpoint, intact, still restores exactly. */
Test(restore, damaged_chunk_mid_stream_fails_cleanly) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  uint64_t mid, last;
  run_stopped(state, 3, &mid, &last);
  cr_assert_neq(mid, last, "one checkpoint only");
  damage_u64_chunk(state, last, 1);
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu: operator \"count\" subtask ",
           (unsigned long long)last);
  refused_restore(state, 3, last, want, "chunk 1: ");
  cr_assert_eq(th_leak_check(), 0);
  restore_exact(state, 3, mid);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* A chunk missing from one subtask's record: the probe child finds it
 * (after the tables were prefaulted for the load that then does not run):
 * WEIR_ECORRUPT naming it, nothing run, nothing leaked. */
Test(restore, missing_chunk_fails_in_the_probe) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  uint64_t mid, last;
  run_stopped(state, 2, &mid, &last);
  delete_chunk(state, mid, 1);
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu: operator \"", (unsigned long long)mid);
  refused_restore(state, 2, mid, want, "chunk 1 of ");
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* Where /proc/self/maps cannot be read (WEIR_NO_PROC_MAPS: as on systems
 * without it), the probe touches the values' pages and the load reads them
 * through the map: the same state restores. */
Test(restore, without_proc_maps) {
  setenv("WEIR_NO_PROC_MAPS", "1", 1);
  stopped_then_restored(3);
  unsetenv("WEIR_NO_PROC_MAPS");
}

/* Run 1 of stopped_then_restored with WEIR_TASK_READS_VIEWS=`reads` (who
 * reads the copy-on-write views: the task itself, or the store's
 * readers); returns the pages its operators copied for views, and a
 * checkpoint from its middle in *mid. */
static uint64_t run_reading(const char *state, const char *reads, uint64_t *mid) {
  setenv("WEIR_TASK_READS_VIEWS", reads, 1);
  memset(&cfg, 0, sizeof cfg);
  cfg.stop_after = 2 * N / 3;
  cfg.rate = N;
  cfg.job = build(2);
  cfg.rate = 0;
  weir_run_opts o = opts(state);
  cr_assert_eq(weir_job_run(cfg.job, &o), 0, "run 1: %s", weir_job_error(cfg.job));
  unsetenv("WEIR_TASK_READS_VIEWS");
  const weir_run_info *ri = weir_job_run_info(cfg.job);
  cr_assert_gt(ri->checkpoints, 2, "only %llu checkpoints", (unsigned long long)ri->checkpoints);
  uint64_t copied = ri->cow_pages_copied;
  weir_job_destroy(cfg.job);
  uint64_t last;
  stored_ids(state, mid, &last);
  cr_assert_lt(*mid, last);
  return copied;
}

/* Views read by their own task (WEIR_TASK_READS_VIEWS=2: whatever the
 * number of cores), a slice at a time between its steps, and views read
 * by the store's readers (0): either way the owners copy the pages they
 * update before they are read (how many depends on timing, so it is not
 * asserted), and the checkpoints restore exactly. */
Test(restore, views_read_by_their_task_or_readers) {
  for (int reads = 1; reads >= 0; reads--) {
    char *dir = th_tmpdir();
    cr_assert_not_null(dir);
    char state[600];
    snprintf(state, sizeof state, "%s/state", dir);
    uint64_t mid;
    uint64_t copied = run_reading(state, reads ? "2" : "0", &mid);
    cr_log_info("views read by %s: %llu pages copied", reads ? "their task" : "the store's readers",
                (unsigned long long)copied);
    restore_exact(state, 2, mid);
    th_rmrf(dir);
    free(dir);
  }
  cr_assert_eq(th_leak_check(), 0);
}

/* The coordinator queues a checkpoint's commit as soon as every write of
 * it is queued, so with slow chunk puts (5 ms each, failpoint) the commit
 * waits behind writes; then a chunk transaction fails (ENOSPC). The store
 * refuses the commit, and the job reports the write's own failure (with no
 * failure tolerated it stops, naming it, not the commit's refusal); the
 * checkpoint is never listed, and the latest listed one restores exactly. */
Test(restore, write_failing_behind_its_queued_commit_declines_it) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  th_arm_failpoints("store.write_chunk=delay@1+,store.chunk_txn_commit=enospc@4");
  memset(&cfg, 0, sizeof cfg);
  cfg.rate = N / 2;
  cfg.job = build(2);
  cfg.rate = 0;
  weir_run_opts o = opts(state);
  o.tolerable_checkpoint_failures = WEIR_TOLERATE_NONE;
  int rc = weir_job_run(cfg.job, &o);
  const char *err = weir_job_error(cfg.job);
  cr_assert_eq(rc, WEIR_ECKPTLIMIT, "run 1: %d %s", rc, err);
  cr_assert(strstr(err, "writing its state failed: ") != NULL, "%s", err);
  cr_assert(strstr(err, "writing checkpoint ") != NULL, "not the write's message: %s", err);
  cr_assert(strstr(err, "[simulated by failpoint store.chunk_txn_commit]") != NULL, "%s", err);
  cr_assert(strstr(err, "No space left on device") != NULL, "%s", err);
  const weir_run_info *ri = weir_job_run_info(cfg.job);
  cr_assert_eq(ri->checkpoints_failed, 1);
  cr_assert_gt(ri->checkpoints, 0, "no checkpoint completed before the failure");
  cr_assert_eq(weir_failpoint_hits("store.chunk_txn_commit"), 4);
  uint64_t declined = ri->last_checkpoint + 1;
  weir_job_destroy(cfg.job);
  th_arm_failpoints(NULL);
  uint64_t mid, last;
  stored_ids(state, &mid, &last);
  cr_assert_lt(last, declined);
  restore_exact(state, 2, last);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- an operator that declines checkpoints ----------------------------------- */

static atomic_int g_declines; /* how many snapshots decline (the first ones) */
static atomic_int g_declined, g_aborted, g_completed;

static int decl_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  (void)r;
  return 0;
}
static int decl_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  if (atomic_load(&g_declined) < atomic_load(&g_declines)) {
    atomic_fetch_add(&g_declined, 1);
    return weir_ctx_decline(ctx, "test declines checkpoint %llu", (unsigned long long)id);
  }
  return weir_snapshot_write(w, "x", 1);
}
static int decl_aborted(weir_ctx *ctx, uint64_t id) {
  (void)ctx;
  (void)id;
  atomic_fetch_add(&g_aborted, 1);
  return 0;
}
static int decl_complete(weir_ctx *ctx, uint64_t id) {
  (void)ctx;
  (void)id;
  atomic_fetch_add(&g_completed, 1);
  return 0;
}
static const weir_operator_vt decl_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "decl",
                                         .process = decl_process,
                                         .snapshot = decl_snapshot,
                                         .checkpoint_aborted = decl_aborted,
                                         .checkpoint_complete = decl_complete};

/* Runs gen -> decl (about half a second, a checkpoint every 20 ms) with
 * the first `declines` snapshots declined and `tolerable` failures. */
static int run_declining(const char *state, int declines, int tolerable, weir_job **out) {
  atomic_store(&g_declines, declines);
  atomic_store(&g_declined, 0);
  atomic_store(&g_aborted, 0);
  atomic_store(&g_completed, 0);
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "decline"), 0);
  weir_gen_opts go = {.records = 20000, .keys = 10, .rate = 40000};
  cr_assert_eq(weir_sink(weir_gen(job, "gen", &go, 1), "decl", &decl_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  weir_run_opts o = opts(state);
  o.tolerable_checkpoint_failures = tolerable;
  *out = job;
  return weir_job_run(job, &o);
}

/* A snapshot callback that declines (weir_ctx_decline) fails that
 * checkpoint without failing the job: counted as failed, the operator hears
 * checkpoint_aborted, and the next checkpoints complete; beyond the
 * tolerable failures the job stops with WEIR_ECKPTLIMIT, naming the
 * operator and its message. */
Test(restore, operator_declines_checkpoints) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  weir_job *job = NULL;
  int rc = run_declining(state, 3, 3, &job);
  cr_assert_eq(rc, 0, "%d %s", rc, weir_job_error(job));
  const weir_run_info *ri = weir_job_run_info(job);
  cr_assert_eq(ri->checkpoints_failed, 3);
  cr_assert_gt(ri->checkpoints, 0);
  cr_assert_eq(atomic_load(&g_aborted), 3);
  cr_assert_gt(atomic_load(&g_completed), 0);
  weir_job_destroy(job);
  th_rmrf(state);

  rc = run_declining(state, 100, 2, &job);
  const char *err = weir_job_error(job);
  cr_assert_eq(rc, WEIR_ECKPTLIMIT, "%d %s", rc, err);
  cr_assert(strstr(err, "an operator declined it: operator 'decl' subtask 0: test declines "
                        "checkpoint ") != NULL,
            "%s", err);
  cr_assert_eq(weir_job_run_info(job)->checkpoints_failed, 3);
  weir_job_destroy(job);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- an operator that acknowledges its snapshots later ------------------------ */

static uint64_t g_later; /* the checkpoint whose acknowledgement is due (task thread) */

static int later_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  int rc = weir_snapshot_write(w, "x", 1);
  if (rc < 0) return rc;
  g_later = id;
  weir_ctx_wake(ctx);
  return WEIR_SNAPSHOT_LATER;
}
static int later_poll(weir_ctx *ctx) {
  if (!g_later) return WEIR_POLL_IDLE;
  uint64_t id = g_later;
  g_later = 0;
  if (atomic_load(&g_declined) < atomic_load(&g_declines)) {
    atomic_fetch_add(&g_declined, 1);
    return weir_ctx_snapshot_ack(ctx, id, "test declines it later");
  }
  return weir_ctx_snapshot_ack(ctx, id, NULL);
}
static const weir_operator_vt later_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "later",
                                          .process = decl_process,
                                          .snapshot = later_snapshot,
                                          .poll = later_poll,
                                          .checkpoint_aborted = decl_aborted,
                                          .checkpoint_complete = decl_complete};

/* A snapshot callback returning WEIR_SNAPSHOT_LATER holds its checkpoint
 * until poll acknowledges it (weir_ctx_snapshot_ack): acknowledged, the
 * checkpoints complete; declined later, they fail as declined ones do
 * (counted, aborted notices, the job goes on), and the checkpoint after
 * them completes. */
Test(restore, operator_acknowledges_later) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  atomic_store(&g_declines, 2);
  atomic_store(&g_declined, 0);
  atomic_store(&g_aborted, 0);
  atomic_store(&g_completed, 0);
  g_later = 0;
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "later"), 0);
  weir_gen_opts go = {.records = 20000, .keys = 10, .rate = 40000};
  cr_assert_eq(weir_sink(weir_gen(job, "gen", &go, 1), "later", &later_vt, NULL, 1), 0, "%s",
               weir_job_error(job));
  weir_run_opts o = opts(state);
  o.tolerable_checkpoint_failures = 2;
  int rc = weir_job_run(job, &o);
  cr_assert_eq(rc, 0, "%d %s", rc, weir_job_error(job));
  const weir_run_info *ri = weir_job_run_info(job);
  cr_assert_eq(ri->checkpoints_failed, 2);
  cr_assert_gt(ri->checkpoints, 2);
  cr_assert_eq(atomic_load(&g_aborted), 2);
  cr_assert_eq((uint64_t)atomic_load(&g_completed), ri->checkpoints);
  weir_job_destroy(job);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

static const weir_operator_vt later_nopoll_vt = {.size = sizeof(weir_operator_vt),
                                                 .name = "later-nopoll",
                                                 .process = decl_process,
                                                 .snapshot = later_snapshot};

/* WEIR_SNAPSHOT_LATER from an operator without poll, which could never
 * acknowledge it, fails the job at once, saying so. */
Test(restore, snapshot_later_without_poll_fails) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "later-nopoll"), 0);
  weir_gen_opts go = {.records = 20000, .keys = 10, .rate = 40000};
  cr_assert_eq(weir_sink(weir_gen(job, "gen", &go, 1), "lnp", &later_nopoll_vt, NULL, 1), 0);
  weir_run_opts o = opts(state);
  int rc = weir_job_run(job, &o);
  cr_assert_eq(rc, WEIR_EOPERATOR, "%d %s", rc, weir_job_error(job));
  cr_assert(strstr(weir_job_error(job), "operator 'lnp' subtask 0 (snapshot): returned "
                                        "WEIR_SNAPSHOT_LATER, but has no poll") != NULL,
            "%s", weir_job_error(job));
  weir_job_destroy(job);
  g_later = 0;
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}
