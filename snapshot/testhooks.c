/* testhooks.c: owns the store's test hooks (declared in store_impl.h),
 * compiled only into the variant of the library that the tests link
 * (weir_snapshot_testing, built with WEIR_TEST_HOOKS): the weir binary and
 * the benchmarks carry none of them.
 */
#ifndef WEIR_TEST_HOOKS
#error "testhooks.c belongs to the test variant of the library (WEIR_TEST_HOOKS)"
#endif

#include "store_impl.h"

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
