/* testhooks.c: owns the store's test hooks (declared in store_impl.h),
 * compiled only into the variant of the library that the tests link
 * (weir_snapshot_testing, built with WEIR_TEST_HOOKS): the weir binary and
 * the benchmarks carry none of them.
 */
#ifndef WEIR_TEST_HOOKS
#error "testhooks.c belongs to the test variant of the library (WEIR_TEST_HOOKS)"
#endif

#include <string.h>

#include "store_impl.h"
#include "base/alloc.h"

void weir__store_test_child_signal(weir_store *s, int sig) {
  s->test_child_signal = sig;
}

uint64_t weir__store_test_chunk_txns(weir_store *s) {
  return s->test_chunk_txns;
}

uint64_t weir__store_test_commits_with_writes(weir_store *s) {
  return s->stats.commits_with_writes;
}

int weir__store_test_chunk_stats(weir_store *s, uint64_t id, size_t *max_len, uint64_t *count) {
  *max_len = 0;
  *count = 0;
  MDB_txn *txn;
  int rc = weir__read_txn(s, &txn);
  if (rc < 0) return rc;
  MDB_cursor *cur;
  rc = mdb_cursor_open(txn, s->dbi_chunks, &cur);
  if (rc == 0) {
    uint8_t kb[WEIR__CHUNK_KEY];
    weir__key_chunk(kb, id, 0, 0);
    MDB_val key = {sizeof kb, kb}, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
      if (key.mv_size < 8 || weir__be64(key.mv_data) != id) break;
      if (val.mv_size > *max_len) *max_len = val.mv_size;
      (*count)++;
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND) rc = 0;
  }
  mdb_txn_abort(txn);
  return weir__mdb_err(rc);
}

int weir__store_test_strip_identity(weir_store *s) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
  if (rc) return weir__mdb_err(rc);
  weir__job_rec job;
  rc = weir__txn_job(s, txn, s->dbi_job, &job);
  if (rc == 1) {
    memset(job.name, 0, sizeof job.name);
    uint8_t *v;
    size_t len;
    weir__job_encode(&job, &v, &len);
    MDB_val key = {3, "job"}, val = {len, v};
    rc = mdb_put(txn, s->dbi_job, &key, &val, 0);
    weir_free(v);
    rc = weir__mdb_err(rc);
  }
  /* Ids first, then the rewrites: no put while a cursor walks the tree. */
  uint64_t ids[256];
  size_t n = 0;
  MDB_cursor *cur;
  if (rc == 0 && (rc = weir__mdb_err(mdb_cursor_open(txn, s->dbi_meta, &cur))) == 0) {
    MDB_val key, val;
    for (int r = mdb_cursor_get(cur, &key, &val, MDB_FIRST); r == 0 && n < 256;
         r = mdb_cursor_get(cur, &key, &val, MDB_NEXT))
      ids[n++] = weir__be64(key.mv_data);
    mdb_cursor_close(cur);
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    uint8_t k[8];
    weir__key_meta(k, ids[i]);
    MDB_val key = {8, k}, val;
    if ((rc = weir__mdb_err(mdb_get(txn, s->dbi_meta, &key, &val))) != 0) break;
    weir__ckpt_meta m;
    char err[256];
    if ((rc = weir__meta_decode(val.mv_data, val.mv_size, ids[i], NULL, &m, err, sizeof err)) != 0)
      break;
    weir_free(m.job_name);
    m.job_name = NULL;
    m.fingerprint = 0;
    for (uint32_t d = 0; d < m.ndest; d++) {
      weir_free(m.dests[d].op);
      weir_free(m.dests[d].id);
    }
    weir_free(m.dests);
    m.dests = NULL;
    m.ndest = 0;
    uint8_t *v;
    size_t len;
    weir__meta_encode(&m, &v, &len);
    weir__meta_free(&m);
    MDB_val nv = {len, v};
    rc = weir__mdb_err(mdb_put(txn, s->dbi_meta, &key, &nv, 0));
    weir_free(v);
  }
  if (rc) {
    mdb_txn_abort(txn);
    return rc < 0 ? rc : WEIR_EIO;
  }
  return weir__mdb_err(mdb_txn_commit(txn));
}
