/* retention.c: owns what the store deletes: checkpoints beyond the
 * retained count (after each commit), the chunks of a checkpoint that will
 * not be committed, and orphaned chunks, which no checkpoint, pending write
 * or holder of shared keys names (at open and after each commit).
 */
#include <stdlib.h>

#include "writer_impl.h"
#include "base/alloc.h"
#include "base/log.h"

typedef unsigned long long ull;

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Deletes the chunks of checkpoint id but those of the nkeep records in
 * keep (sorted), WEIR__TXN_DELETES per transaction. */
static int delete_chunks(weir_store *s, uint64_t id, const uint32_t *keep, size_t nkeep,
                         uint64_t *deleted) {
  uint32_t from = 0; /* no chunk to delete below record `from` */
  for (;;) {
    MDB_txn *txn;
    MDB_cursor *cur;
    int rc = weir__begin_write(s, &txn);
    if (rc == 0) {
      rc = mdb_cursor_open(txn, s->dbi_chunks, &cur);
      if (rc != 0) mdb_txn_abort(txn);
    }
    if (rc != 0)
      return weir__store_fail(s, weir__mdb_err(rc),
                              "store %s: deleting chunks of checkpoint %llu: %s", s->path, (ull)id,
                              weir__mdb_text(rc));
    uint32_t n = 0;
    int more = 1;
    while (n < WEIR__TXN_DELETES) {
      uint8_t kb[WEIR__CHUNK_KEY];
      weir__key_chunk(kb, id, from, 0);
      MDB_val key = {sizeof kb, kb}, val;
      rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE);
      if (rc == MDB_NOTFOUND ||
          (rc == 0 && (key.mv_size != WEIR__CHUNK_KEY || weir__be64(key.mv_data) != id))) {
        rc = 0;
        more = 0;
        break;
      }
      if (rc != 0) break;
      uint32_t rec = weir__be32((const uint8_t *)key.mv_data + 8);
      if (nkeep && bsearch(&rec, keep, nkeep, sizeof *keep, cmp_u32)) {
        if (rec == UINT32_MAX) {
          more = 0;
          break;
        }
        from = rec + 1;
        continue;
      }
      from = rec;
      if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
      n++;
    }
    mdb_cursor_close(cur);
    if (rc == 0) {
      rc = mdb_txn_commit(txn);
    } else {
      mdb_txn_abort(txn);
    }
    if (rc != 0)
      return weir__store_fail(s, weir__mdb_err(rc),
                              "store %s: deleting chunks of checkpoint %llu: %s", s->path, (ull)id,
                              weir__mdb_text(rc));
    if (deleted) *deleted += n;
    if (!more) return 0;
  }
}

/* Deletes what was written for a checkpoint that will not be committed. */
void weir__discard(weir_store *s, uint64_t id) {
  weir__pending_drop(s, id);
  uint64_t n = 0;
  if (delete_chunks(s, id, NULL, 0, &n) < 0) {
    char msg[512];
    WEIR_LOG_W("%s (they will be collected later)", weir_store_error(s, msg, sizeof msg));
  }
}

/* A record of an earlier checkpoint whose chunks hold u64 keys that a
 * later checkpoint shares ("shared keys" in chunker.c). */
typedef struct keyref {
  uint64_t ckpt;
  uint32_t record;
} keyref;

typedef struct refset {
  keyref *r;
  size_t n, cap;
} refset;

static void refs_add(refset *rs, uint64_t ckpt, uint32_t record) {
  if (ckpt == 0) return;
  if (rs->n == rs->cap) {
    rs->cap = rs->cap ? 2 * rs->cap : 16;
    rs->r = weir_realloc(rs->r, rs->cap * sizeof *rs->r);
  }
  rs->r[rs->n++] = (keyref){ckpt, record};
}

static int cmp_ref(const void *a, const void *b) {
  const keyref *x = a, *y = b;
  if (x->ckpt != y->ckpt) return x->ckpt < y->ckpt ? -1 : 1;
  return x->record < y->record ? -1 : x->record > y->record;
}

/* The records whose keys something still needs: every stored checkpoint,
 * every pending write and every committed holder the writer remembers (a
 * later write may share it). Sorted. 1 if complete; 0 if a stored
 * checkpoint's metadata is not this weir's to read (a newer format): its
 * references are unknown, and nothing may be collected. A corrupt one
 * names nothing: it cannot be restored. Or an error. */
static int live_refs(weir_store *s, MDB_txn *txn, refset *rs) {
  MDB_cursor *cur;
  int rc = mdb_cursor_open(txn, s->dbi_meta, &cur);
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: reading checkpoints: %s", s->path,
                            weir__mdb_text(rc));
  int complete = 1;
  MDB_val key, val;
  for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
    if (key.mv_size != 8) continue;
    uint64_t id = weir__be64(key.mv_data);
    weir__ckpt_meta m;
    char err[256];
    int d = weir__meta_decode(val.mv_data, val.mv_size, id, NULL, &m, err, sizeof err);
    if (d == WEIR_ECORRUPT) continue;
    if (d < 0) {
      WEIR_LOG_D("store %s: no chunks collected: %s", s->path, err);
      complete = 0;
      break;
    }
    for (uint32_t i = 0; i < m.nsub; i++) refs_add(rs, m.subs[i].keys_ckpt, m.subs[i].keys_record);
    weir__meta_free(&m);
  }
  mdb_cursor_close(cur);
  if (rc != 0 && rc != MDB_NOTFOUND && complete)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: reading checkpoints: %s", s->path,
                            weir__mdb_text(rc));
  for (weir__pending *p = s->pending; p; p = p->next)
    for (uint32_t i = 0; i < p->nsub; i++)
      refs_add(rs, p->subs[i].keys_ckpt, p->subs[i].keys_record);
  for (size_t i = 0; i < s->nmemo; i++)
    if (s->memo[i]->committed) refs_add(rs, s->memo[i]->holder, s->memo[i]->record);
  if (rs->n) qsort(rs->r, rs->n, sizeof *rs->r, cmp_ref);
  return complete;
}

int weir__collect_orphans(weir_store *s, uint64_t *chunks, uint64_t *ckpts) {
  uint64_t *ids = NULL;
  size_t n = 0, cap = 0;
  refset rs = {0};
  MDB_txn *txn;
  MDB_cursor *cur;
  int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
  if (rc == 0) {
    rc = mdb_cursor_open(txn, s->dbi_chunks, &cur);
    if (rc != 0) mdb_txn_abort(txn);
  }
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: scanning chunks: %s", s->path,
                            weir__mdb_text(rc));
  int live = live_refs(s, txn, &rs);
  uint64_t next = 0;
  for (rc = live < 0 ? live : 0; live > 0;) {
    uint8_t kb[WEIR__CHUNK_KEY];
    weir__key_chunk(kb, next, 0, 0);
    MDB_val key = {sizeof kb, kb}, val;
    rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND) {
      rc = 0;
      break;
    }
    if (rc != 0) {
      rc = weir__store_fail(s, weir__mdb_err(rc), "store %s: scanning chunks: %s", s->path,
                            weir__mdb_text(rc));
      break;
    }
    if (key.mv_size != WEIR__CHUNK_KEY) {
      rc = weir__store_fail(s, WEIR_ECORRUPT, "store %s: a chunk key of %zu bytes", s->path,
                            key.mv_size);
      break;
    }
    uint64_t id = weir__be64(key.mv_data);
    int c = weir__is_committed(s, txn, id);
    if (c < 0) {
      rc = c;
      break;
    }
    if (!c && !weir__pending_find(s, id)) {
      if (n == cap) {
        cap = cap ? 2 * cap : 16;
        ids = weir_realloc(ids, cap * sizeof *ids);
      }
      ids[n++] = id;
    }
    if (id == UINT64_MAX) break;
    next = id + 1;
  }
  mdb_cursor_close(cur);
  mdb_txn_abort(txn);
  size_t at = 0;
  uint32_t *keep = NULL;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    size_t nkeep = 0;
    while (at < rs.n && rs.r[at].ckpt < ids[i]) at++;
    for (size_t j = at; j < rs.n && rs.r[j].ckpt == ids[i]; j++) {
      keep = weir_realloc(keep, (nkeep + 1) * sizeof *keep);
      keep[nkeep++] = rs.r[j].record;
    }
    uint64_t before = chunks ? *chunks : 0, got = 0;
    rc = delete_chunks(s, ids[i], keep, nkeep, &got);
    if (chunks) *chunks = before + got;
    if (ckpts && got) ++*ckpts;
  }
  weir_free(keep);
  weir_free(ids);
  weir_free(rs.r);
  return rc;
}

/* Deletes the metadata of the oldest completed checkpoints beyond `retain`,
 * then the chunks that no checkpoint left names (collect_orphans: the keys
 * of a removed checkpoint stay while a later one shares them). */
void weir__retention(weir_store *s) {
  uint64_t *ids = NULL;
  size_t n = 0, cap = 0;
  MDB_txn *txn;
  MDB_cursor *cur;
  int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
  if (rc == 0) {
    rc = mdb_cursor_open(txn, s->dbi_meta, &cur);
    if (rc != 0) mdb_txn_abort(txn);
  }
  if (rc == 0) {
    MDB_val key, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
      if (key.mv_size != 8) continue;
      if (n == cap) {
        cap = cap ? 2 * cap : 16;
        ids = weir_realloc(ids, cap * sizeof *ids);
      }
      ids[n++] = weir__be64(key.mv_data);
    }
    if (rc == MDB_NOTFOUND) rc = 0;
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
  }
  if (rc != 0) {
    weir__store_fail(s, weir__mdb_err(rc), "store %s: retention: %s", s->path, weir__mdb_text(rc));
    WEIR_LOG_W("store %s: retention skipped: %s", s->path, weir__mdb_text(rc));
    weir_free(ids);
    return;
  }
  for (size_t i = 0; n > s->retain && i < n - s->retain; i++) {
    uint8_t k[8];
    weir__key_meta(k, ids[i]);
    MDB_val key = {8, k};
    rc = weir__begin_write(s, &txn);
    if (rc == 0) {
      rc = mdb_del(txn, s->dbi_meta, &key, NULL);
      if (rc == 0 || rc == MDB_NOTFOUND) {
        rc = mdb_txn_commit(txn);
      } else {
        mdb_txn_abort(txn);
      }
    }
    if (rc != 0)
      weir__store_fail(s, weir__mdb_err(rc), "store %s: retention of checkpoint %llu: %s", s->path,
                       (ull)ids[i], weir__mdb_text(rc));
    if (rc != 0) {
      char msg[512];
      WEIR_LOG_W("%s", weir_store_error(s, msg, sizeof msg));
      break;
    }
    WEIR_LOG_D("store %s: checkpoint %llu removed by retention", s->path, (ull)ids[i]);
  }
  weir_free(ids);
  uint64_t chunks = 0, ckpts = 0;
  if (weir__collect_orphans(s, &chunks, &ckpts) < 0) {
    char msg[512];
    WEIR_LOG_W("%s", weir_store_error(s, msg, sizeof msg));
  } else if (ckpts > 0) {
    WEIR_LOG_D("store %s: deleted %llu chunks of %llu checkpoints", s->path, (ull)chunks,
               (ull)ckpts);
  }
}
