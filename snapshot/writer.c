/* writer.c: owns the store-writer thread, its request queue, and every LMDB
 * write transaction of an open store (see store.c for opening, reading and
 * verifying).
 *
 * DESIGN: LMDB allows one write transaction at a time per environment, and a
 * durable commit costs two fsyncs, so writes must never run on an engine
 * worker loop. Every write is a request to one thread: requests are queued
 * (mutex + condvar) and run in order; asynchronous ones (subtask writes,
 * commits, aborts) report through a done() callback on this thread,
 * synchronous ones (job_begin, id reservation, flush, stop) are waited for
 * by their caller, or run inline when the caller is this thread (a done()
 * callback), so nothing deadlocks. A subtask write whose u64 state is a
 * copy-on-write view has it read by the view readers (reader.c) as soon as
 * it is queued; the writer waits for that read when it reaches the write.
 *
 * Store layout (named databases of one environment):
 *   job     "job"                               -> envelope(Job)
 *   meta    [ckpt id BE u64]                    -> envelope(Checkpoint)
 *   chunks  [ckpt id BE u64][record BE u32][seq BE u32] -> envelope(chunk)
 * A subtask write gets the checkpoint's next record number; its chunks are
 * its u64 state in hash order (store.h; values only when its keys are an
 * earlier record's: "shared keys" below), then its byte-string entries,
 * then its blob, each chunk at most WEIR__CHUNK_MAX bytes. Subtask writes queued
 * together share write transactions of at most WEIR__TXN_CHUNKS chunks
 * ("grouped subtask writes" below: one durable commit for many writes),
 * each write in a nested transaction of its own (MDB_APPEND when the keys
 * land past the current last key).
 * What was written is remembered per checkpoint (weir__pending) for the
 * commit.
 *
 * Commit protocol: the commit is ONE write transaction holding the
 * checkpoint's metadata (every subtask written for it) and the job record's
 * `latest` (and `finished`): a transaction of its own, or the one that
 * holds the checkpoint's last chunks when it is queued right behind them
 * (grouped subtask writes below). Its other chunks are on disk before it
 * starts (a chunk transaction commits with fdatasync of its pages), so once
 * the metadata is visible all it names is on disk; before it, the
 * checkpoint does not exist. Only that commit and id reservations sync LMDB's meta page
 * (commit_durable): a power failure can undo the last chunk transaction,
 * which no committed checkpoint names yet, never a commit. A checkpoint
 * with a failed subtask write is never committed: its chunks are discarded.
 * Retention runs after the commit in its own short transactions: metadata
 * first, then chunks (but the records whose keys a retained checkpoint
 * shares), so a crash in between leaves only chunks without metadata,
 * which the next collection (at open, or after any commit) deletes. Checkpoint ids are reserved
 * durably in blocks of WEIR__ID_BLOCK in the job record before they are handed out: a crash skips
 * ids, never repeats them.
 *
 * Fencing (lease.c): with a lease, every write transaction checks it right
 * after it begins (begin_write), and a commit checks it again once durable;
 * the metadata records the committing owner's epoch.
 * Full disks and I/O errors: a failed put fails its subtask write, a failed
 * shared transaction every subtask write with chunks in it (and so their
 * checkpoints' commits), each with a message that names the
 * store's path, the LMDB error, the space the file system has left (or the
 * map size and how much of it is used) and what the subtask needs; what
 * the checkpoint wrote is discarded. Earlier checkpoints are untouched.
 * Failpoints store.write_chunk (before each chunk put), store.chunk_txn_commit
 * (before a shared chunk transaction's commit) and store.commit (before the
 * commit's metadata put) simulate such failures for tests
 * (WEIR_FAILPOINTS=store.write_chunk=enospc@3).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "store_impl.h"
#include "snapshot/lease.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"

typedef unsigned long long ull;

/* ---- pending checkpoints -------------------------------------------------- */

static weir__pending *pending_find(weir_store *s, uint64_t id) {
  for (weir__pending *p = s->pending; p; p = p->next)
    if (p->id == id) return p;
  return NULL;
}

static weir__pending *pending_get(weir_store *s, uint64_t id) {
  weir__pending *p = pending_find(s, id);
  if (p) return p;
  p = weir_calloc(1, sizeof *p);
  p->id = id;
  p->next = s->pending;
  s->pending = p;
  return p;
}

static void pending_drop(weir_store *s, uint64_t id) {
  for (weir__pending **pp = &s->pending; *pp; pp = &(*pp)->next) {
    weir__pending *p = *pp;
    if (p->id != id) continue;
    *pp = p->next;
    for (uint32_t i = 0; i < p->nsub; i++) {
      weir_free(p->subs[i].op);
      weir_free(p->subs[i].pos);
    }
    weir_free(p->subs);
    weir_free(p);
    return;
  }
}

/* ---- finished ids ------------------------------------------------------------ */

/* Index of the first range whose end is >= id. */
static size_t fin_find(const weir_store *s, uint64_t id) {
  size_t lo = 0, hi = s->nfin;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->fin[mid][1] < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int fin_has(const weir_store *s, uint64_t id) {
  size_t i = fin_find(s, id);
  return i < s->nfin && s->fin[i][0] <= id;
}

/* Records that checkpoint id was committed, aborted or failed. */
static void fin_add(weir_store *s, uint64_t id) {
  size_t i = fin_find(s, id);
  if (i < s->nfin && s->fin[i][0] <= id) return;
  int join_prev = i > 0 && s->fin[i - 1][1] + 1 == id;
  int join_next = i < s->nfin && s->fin[i][0] == id + 1;
  if (join_prev && join_next) {
    s->fin[i - 1][1] = s->fin[i][1];
    memmove(&s->fin[i], &s->fin[i + 1], (s->nfin - i - 1) * sizeof *s->fin);
    s->nfin--;
  } else if (join_prev) {
    s->fin[i - 1][1] = id;
  } else if (join_next) {
    s->fin[i][0] = id;
  } else {
    if (s->nfin == s->fin_cap) {
      s->fin_cap = s->fin_cap ? 2 * s->fin_cap : 8;
      s->fin = weir_realloc(s->fin, s->fin_cap * sizeof *s->fin);
    }
    memmove(&s->fin[i + 1], &s->fin[i], (s->nfin - i) * sizeof *s->fin);
    s->fin[i][0] = s->fin[i][1] = id;
    s->nfin++;
  }
}

/* Checks that checkpoint id may still be written or committed: handed out
 * by this store since it was opened, and neither committed, aborted nor
 * failed since. */
static int check_open_id(weir_store *s, uint64_t id) {
  pthread_mutex_lock(&s->id_mu);
  uint64_t first = s->first_id, next = s->next;
  int have = s->have_job;
  pthread_mutex_unlock(&s->id_mu);
  if (!have)
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu: no job (weir_store_job_begin first)",
                            s->path, (ull)id);
  if (id == 0 || id >= next)
    return weir__store_fail(s, WEIR_EINVAL,
                            "store %s: checkpoint id %llu was not handed out (the next is %llu)",
                            s->path, (ull)id, (ull)next);
  if (id < first)
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu was begun before this store was opened "
                            "(only the run that wrote it may commit it)",
                            s->path, (ull)id);
  if (fin_has(s, id))
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu is already committed, aborted or failed",
                            s->path, (ull)id);
  return 0;
}

/* ---- small LMDB helpers --------------------------------------------------- */

/* Is checkpoint id committed? 1, 0 or an error. */
static int is_committed(weir_store *s, MDB_txn *txn, uint64_t id) {
  uint8_t k[8];
  weir__key_meta(k, id);
  MDB_val key = {8, k}, val;
  int rc = mdb_get(txn, s->dbi_meta, &key, &val);
  if (rc == 0) return 1;
  if (rc == MDB_NOTFOUND) return 0;
  return weir__store_fail(s, weir__mdb_err(rc), "store %s: reading checkpoint %llu: %s", s->path,
                          (ull)id, weir__mdb_text(rc));
}

static int committed_now(weir_store *s, uint64_t id) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: read transaction: %s", s->path,
                            weir__mdb_text(rc));
  rc = is_committed(s, txn, id);
  mdb_txn_abort(txn);
  return rc;
}

/* Commits txn and makes it durable. The environment is opened with
 * MDB_NOMETASYNC: a commit syncs the data pages it wrote, and writes the
 * meta page that makes them current without syncing it; the next commit's
 * data sync (fdatasync of the whole file) or mdb_env_sync carries it to
 * disk. So a power failure can undo only the last commit before it, and
 * chunk transactions (which a checkpoint's commit always follows) and
 * deletions cost one sync instead of two. What must be durable before
 * anything acts on it (a checkpoint's commit, reserved ids) commits here. */
static int commit_durable(weir_store *s, MDB_txn *txn) {
  int rc = mdb_txn_commit(txn);
  return rc != 0 ? rc : mdb_env_sync(s->env, 1);
}

/* Begins a write transaction and then checks the lease (lease.c, I5): the
 * check runs while this process holds LMDB's writer lock, so after a takeover
 * at most the one transaction that had already passed it can still commit,
 * and a fenced owner begins no other. Returns an LMDB code or WEIR_EFENCED
 * (nothing begun). */
static int begin_write(weir_store *s, MDB_txn **txn) {
  int rc = mdb_txn_begin(s->env, NULL, 0, txn);
  if (rc != 0) return rc;
  if (s->lease != NULL && weir_lease_check(s->lease) < 0) {
    mdb_txn_abort(*txn);
    *txn = NULL;
    return WEIR_EFENCED;
  }
  return 0;
}

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
    int rc = begin_write(s, &txn);
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
static void discard(weir_store *s, uint64_t id) {
  pending_drop(s, id);
  uint64_t n = 0;
  if (delete_chunks(s, id, NULL, 0, &n) < 0) {
    char msg[512];
    WEIR_LOG_W("%s (they will be collected later)", weir_store_error(s, msg, sizeof msg));
  }
}

/* A record of an earlier checkpoint whose chunks hold u64 keys that a
 * later checkpoint shares ("shared keys" below). */
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
    int c = is_committed(s, txn, id);
    if (c < 0) {
      rc = c;
      break;
    }
    if (!c && !pending_find(s, id)) {
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

/* ---- sorting u64 state ---------------------------------------------------- */

/* Insertion sort that gives up once it has moved more than `budget`
 * entries (returns -1; the arrays are then a permutation of the input). */
static int insertion_sort_bounded(uint64_t *k, uint64_t *v, uint64_t n, uint64_t budget) {
  uint64_t moved = 0;
  for (uint64_t i = 1; i < n; i++) {
    uint64_t kk = k[i], vv = v[i], j = i;
    for (; j > 0 && k[j - 1] > kk; j--) {
      k[j] = k[j - 1];
      v[j] = v[j - 1];
    }
    k[j] = kk;
    v[j] = vv;
    moved += i - j;
    if (moved > budget) return -1;
  }
  return 0;
}

static void insertion_sort(uint64_t *k, uint64_t *v, uint64_t n) {
  (void)insertion_sort_bounded(k, v, n, UINT64_MAX);
}

/* MSD radix sort of (k, v) by k, using (tk, tv) as scratch: buckets by the
 * top bits of (key - min) (so dense or clustered keys split as well as
 * spread ones), at most 256 buckets per level (more scatter streams thrash
 * the TLB), recursing into each bucket; small buckets by insertion. Equal
 * keys end in one bucket whose min equals its max, which stops the
 * recursion, so the depth is bounded by the key width. */
static void msd_sort(uint64_t *k, uint64_t *v, uint64_t *tk, uint64_t *tv, uint64_t n) {
  if (n <= 64) {
    insertion_sort(k, v, n);
    return;
  }
  uint64_t lo = k[0], hi = k[0];
  for (uint64_t i = 1; i < n; i++) {
    if (k[i] < lo) lo = k[i];
    if (k[i] > hi) hi = k[i];
  }
  if (lo == hi) return;
  int bits = 64 - __builtin_clzll(hi - lo);
  int b = 63 - __builtin_clzll(n) - 5; /* about 32 keys per bucket */
  if (b < 1) b = 1;
  if (b > 8) b = 8;
  if (b > bits) b = bits;
  int shift = bits - b;
  uint64_t nb = 1ull << b, start[257] = {0}, at[256];
  for (uint64_t i = 0; i < n; i++) start[((k[i] - lo) >> shift) + 1]++;
  for (uint64_t x = 1; x <= nb; x++) start[x] += start[x - 1];
  memcpy(at, start, nb * sizeof *at);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t to = at[(k[i] - lo) >> shift]++;
    tk[to] = k[i];
    tv[to] = v[i];
  }
  memcpy(k, tk, n * sizeof *k);
  memcpy(v, tv, n * sizeof *v);
  for (uint64_t x = 0; x < nb; x++) {
    uint64_t m = start[x + 1] - start[x];
    if (m > 1) msd_sort(k + start[x], v + start[x], tk + start[x], tv + start[x], m);
  }
}

/* The multiplicative inverse of WEIR_STORE_U64_RANK mod 2^64: rank -> key. */
#define U64_UNRANK 0xf1de83e19937733dull
_Static_assert(WEIR_STORE_U64_RANK *U64_UNRANK == 1, "U64_UNRANK inverts the rank");

/* Sorts keys into hash order, values alongside. A snapshot of a hash table
 * comes nearly in that order (only the keys that linear probing displaced
 * are out of place), so an insertion sort finishes in a few passes' time;
 * an order it cannot fix cheaply goes to the radix sort. */
static void sort_u64(uint64_t *k, uint64_t *v, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) k[i] = weir_store_u64_rank(k[i]);
  if (insertion_sort_bounded(k, v, n, 8 * n + 4096) < 0) {
    uint64_t *tk = weir_malloc(n * sizeof *tk), *tv = weir_malloc(n * sizeof *tv);
    msd_sort(k, v, tk, tv, n);
    weir_free(tk);
    weir_free(tv);
  }
  for (uint64_t i = 0; i < n; i++) k[i] *= U64_UNRANK;
}

/* ---- shared keys ------------------------------------------------------------
 *
 * A keyed operator's keys change far less often than its values (a counter's
 * not at all once every key was seen), and 8-byte keys are most of what its
 * u64 chunks hold. So the writer remembers, per operator subtask, the last
 * write that stored its keys (the holder): the key set's version (the
 * engine's promise: the same version, the same keys; store.h) and how that
 * write cut them into chunks. A later write of the same version stores only
 * its values, one U64Values chunk per chunk of the holder's with the same
 * entries, and its metadata names the holder's record (format 3). Debug
 * builds keep the holder's keys too and check every such write against
 * them (comparing 8 MB of keys per million cost more in a release build
 * than writing them). Only a committed holder is shared: an uncommitted
 * one may still be discarded. A write of another version stores its keys
 * whole and becomes the holder.
 *
 * The holder's chunks outlive its metadata while anything names them: a
 * retained checkpoint, a pending write, or this memory (a later write may
 * still share them); collect_orphans deletes the rest. A restart forgets
 * the memo: the first checkpoint after it stores every key again, and the
 * old holder goes once no retained checkpoint names it. */

static weir__keys_memo *memo_find(weir_store *s, const char *op, uint32_t subtask) {
  for (size_t i = 0; i < s->nmemo; i++)
    if (s->memo[i]->subtask == subtask && strcmp(s->memo[i]->op, op) == 0) return s->memo[i];
  return NULL;
}

static void memo_clear(weir__keys_memo *k) {
  weir_free(k->op);
  if (k->keys) k->release(k->keys);
  weir_free(k->counts);
  memset(k, 0, sizeof *k);
}

static void memo_drop(weir_store *s, const char *op, uint32_t subtask) {
  for (size_t i = 0; i < s->nmemo; i++) {
    weir__keys_memo *k = s->memo[i];
    if (k->subtask != subtask || strcmp(k->op, op) != 0) continue;
    memo_clear(k);
    weir_free(k);
    s->memo[i] = s->memo[--s->nmemo];
    return;
  }
}

static void memo_free_all(weir_store *s) {
  while (s->nmemo) memo_drop(s, s->memo[0]->op, s->memo[0]->subtask);
  weir_free(s->memo);
  s->memo = NULL;
}

/* The holder whose keys sn may share: committed, the same keys, chunks
 * whose values always fit a values-only chunk; else NULL. */
static const weir__keys_memo *keys_share(weir_store *s, const weir_subtask_snapshot *sn) {
  weir__keys_memo *k = memo_find(s, sn->op, sn->subtask);
  if (!k || !k->committed || sn->n_u64 == 0 || sn->u64_keys_version == 0 ||
      k->version != sn->u64_keys_version || k->n != sn->n_u64 || k->parallelism != sn->parallelism)
    return NULL;
  WEIR_DEBUG_ASSERT(memcmp(k->keys, sn->u64_keys, sn->n_u64 * sizeof *k->keys) == 0);
  /* The planner cut the holder's chunks so that any values fit
   * (WEIR__U64_SHAREABLE): no pass over the values is needed here. */
#ifdef WEIR_DEBUG
  for (uint32_t i = 0; i < k->nchunks; i++) WEIR_DEBUG_ASSERT(k->counts[i] <= WEIR__U64_SHAREABLE);
#endif
  return k;
}

/* sn's keys, stored whole by its write for checkpoint id (record `record`,
 * in nchunks chunks of counts[i] entries), are its holder's now: the memo
 * takes the keys from sn and owns counts. */
static void memo_keep(weir_store *s, uint64_t id, uint32_t record, weir_subtask_snapshot *sn,
                      uint32_t *counts, uint32_t nchunks) {
  weir__keys_memo *k = memo_find(s, sn->op, sn->subtask);
  if (k) {
    memo_clear(k);
  } else {
    s->memo = weir_realloc(s->memo, (s->nmemo + 1) * sizeof *s->memo);
    k = s->memo[s->nmemo++] = weir_calloc(1, sizeof *k);
  }
  k->op = weir_strdup(sn->op);
  k->subtask = sn->subtask;
  k->parallelism = sn->parallelism;
  k->n = sn->n_u64;
  k->version = sn->u64_keys_version;
#ifdef WEIR_DEBUG
  k->keys = sn->u64_keys;
  k->release = sn->u64_release ? sn->u64_release : weir_free;
  sn->u64_keys = NULL;
#endif
  k->holder = id;
  k->record = record;
  k->nchunks = nchunks;
  k->counts = counts;
  k->committed = 0;
}

/* Checkpoint id committed: the holders it wrote may be shared. */
static void memo_committed(weir_store *s, uint64_t id) {
  for (size_t i = 0; i < s->nmemo; i++)
    if (s->memo[i]->holder == id) s->memo[i]->committed = 1;
}

/* ---- packing a subtask into chunks ---------------------------------------- */

/* Produces the chunks of one subtask in order: u64 state, byte-string
 * state, blob. Byte-string entries are a stream: headers go into the chunk
 * where the entry's data starts, data fills every chunk's remaining room. */
typedef struct chunker {
  const weir_subtask_snapshot *snap;
  const weir__keys_memo *share; /* the holder whose keys it shares, or NULL */
  uint32_t *counts;             /* without share: each u64 chunk's entries */
  uint32_t counts_cap;
  weir__chunk_id id;
  int phase;     /* 0 u64, 1 bytes, 2 blob, 3 done */
  uint64_t i;    /* u64: next entry; bytes: next entry to head */
  uint64_t d;    /* bytes: data bytes emitted; blob: offset */
  uint64_t dend; /* bytes: end of the data of the headed entries */
  uint32_t chunks[3];
  /* A u64 chunk with keys, or a blob chunk, is only planned by
   * chunker_next (its length known, its bytes not yet written):
   * chunker_write puts it where it goes. It holds the pn entries before i
   * (blob: the pn bytes before d), and had the seq before id's. A
   * values-only chunk is encoded into buf like the others: sizing its
   * varints first would read the values twice. */
  int planned;
  size_t pn, pvlen;
} chunker;

/* The next chunk: returns 1 with *len, or 0 when there is none left. A u64
 * chunk with keys or a blob chunk is planned (c->planned; chunker_write
 * encodes it into its destination), any other encoded into buf. */
static int chunker_next(chunker *c, uint8_t *buf, size_t *len) {
  const weir_subtask_snapshot *sn = c->snap;
  const uint64_t budget = WEIR__CHUNK_BUDGET;
  c->planned = 0;
  for (;;) {
    switch (c->phase) {
    case 0: {
      if (c->i >= sn->n_u64) {
        c->phase = 1;
        c->i = c->d = c->dend = 0;
        continue;
      }
      if (c->share) {
        c->pn = c->share->counts[c->chunks[0]];
        *len = weir__u64_values_encode(c->id, sn->u64_values + c->i, c->pn, buf);
      } else {
        *len = weir__u64_chunk_plan(c->id, sn->u64_values + c->i, (size_t)(sn->n_u64 - c->i),
                                    &c->pn, &c->pvlen);
        if (c->chunks[0] == c->counts_cap) {
          c->counts_cap = c->counts_cap ? 2 * c->counts_cap : 64;
          c->counts = weir_realloc(c->counts, c->counts_cap * sizeof *c->counts);
        }
        c->counts[c->chunks[0]] = (uint32_t)c->pn;
        c->planned = 1;
      }
      c->i += c->pn;
      c->chunks[0]++;
      c->id.seq++;
      return 1;
    }
    case 1: {
      if (c->i >= sn->n_bytes && c->d >= sn->b_data_len) {
        c->phase = 2;
        c->d = 0;
        continue;
      }
      uint64_t e0 = c->i, d0 = c->d, used = 0;
      for (;;) {
        if (c->d < c->dend) {
          uint64_t take = c->dend - c->d;
          if (take > budget - used) take = budget - used;
          c->d += take;
          used += take;
          if (used == budget) break;
        } else if (c->i < sn->n_bytes) {
          uint64_t h = 8 + weir__varint_len(sn->b_klen[c->i]) + weir__varint_len(sn->b_vlen[c->i]);
          if (used + h > budget) break;
          used += h;
          c->dend += (uint64_t)sn->b_klen[c->i] + sn->b_vlen[c->i];
          c->i++;
        } else {
          break;
        }
      }
      size_t n = (size_t)(c->i - e0);
      *len = weir__bytes_chunk_encode(c->id, n ? sn->b_route + e0 : NULL,
                                      n ? sn->b_klen + e0 : NULL, n ? sn->b_vlen + e0 : NULL, n,
                                      sn->b_data + d0, (size_t)(c->d - d0), buf);
      c->chunks[1]++;
      c->id.seq++;
      return 1;
    }
    case 2: {
      if (c->d >= sn->blob_len) {
        c->phase = 3;
        continue;
      }
      uint64_t take = sn->blob_len - c->d;
      if (take > budget) take = budget;
      /* Planned, like a u64 chunk with keys: the blob goes straight
       * into its page (channel state is most of an unaligned checkpoint). */
      *len = weir__blob_chunk_len(c->id, (size_t)take);
      c->planned = 1;
      c->pn = (size_t)take;
      c->d += take;
      c->chunks[2]++;
      c->id.seq++;
      return 1;
    }
    default:
      return 0;
    }
  }
}

/* Encodes the chunk chunker_next planned into dst (*len bytes). */
static void chunker_write(const chunker *c, uint8_t *dst) {
  const weir_subtask_snapshot *sn = c->snap;
  weir__chunk_id id = {c->id.ckpt, c->id.record, c->id.seq - 1};
  if (c->phase == 2) {
    weir__blob_chunk_write(id, sn->blob + (c->d - c->pn), c->pn, dst);
    return;
  }
  uint64_t at = c->i - c->pn;
  weir__u64_chunk_write(id, sn->u64_keys + at, sn->u64_values + at, c->pn, c->pvlen, dst);
}

/* The writer's own CPU time and the wall time since a span began, added
 * to its stats (log_stats). */
typedef struct span {
  uint64_t cpu, wall;
} span;

static span span_begin(void) {
  return (span){weir_clock_thread_cpu_ns(), weir_clock_mono_ns()};
}

static void span_end(span b, uint64_t *cpu, uint64_t *wall) {
  *cpu += weir_clock_thread_cpu_ns() - b.cpu;
  *wall += weir_clock_mono_ns() - b.wall;
}

/* Maps the failure of a write transaction that was writing `want` bytes,
 * with a note for the message. LMDB reports a short write as EIO; on a file
 * system without room for what was being written that is a full disk. */
static int write_err(weir_store *s, int rc, uint64_t want, char *note, size_t len) {
  note[0] = '\0';
  if (rc == MDB_MAP_FULL) {
    MDB_envinfo info;
    MDB_stat st;
    if (mdb_env_info(s->env, &info) == 0 && mdb_env_stat(s->env, &st) == 0)
      snprintf(note, len, " (map size %llu bytes, %llu of them in use)", (ull)info.me_mapsize,
               (ull)(((uint64_t)info.me_last_pgno + 1) * st.ms_psize));
    else
      snprintf(note, len, " (map size %llu bytes)", (ull)s->map_size);
  } else if (rc == EIO || rc == ENOSPC) {
    struct statvfs v;
    if (statvfs(s->path, &v) == 0) {
      uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
      int full = avail < want + (1u << 20);
      snprintf(note, len, " (%sthe file system has %llu bytes free)",
               full && rc == EIO ? "a short write: No space left on device; " : "", (ull)avail);
      if (full) return WEIR_ENOSPC;
    }
  }
  return weir__mdb_err(rc);
}

/* Can the keys from `first` on be appended (all existing keys are lower)? */
static int can_append(weir_store *s, MDB_txn *txn, const uint8_t *first) {
  MDB_cursor *cur;
  if (mdb_cursor_open(txn, s->dbi_chunks, &cur) != 0) return 0;
  MDB_val key, val;
  int rc = mdb_cursor_get(cur, &key, &val, MDB_LAST);
  int ok = rc == MDB_NOTFOUND || (rc == 0 && key.mv_size == WEIR__CHUNK_KEY &&
                                  memcmp(key.mv_data, first, WEIR__CHUNK_KEY) < 0);
  mdb_cursor_close(cur);
  return ok;
}

/* A failpoint standing for a write: 0, or the errno it simulates (EIO,
 * ENOSPC), as LMDB would return it. */
static int simulated(const char *name) {
  int rc = weir_failpoint(name);
  return rc < 0 ? -rc : 0;
}

/* The bytes the chunks of a subtask take (values and keys, without LMDB's
 * page overhead): encodes them all again, into buf, for a failure message. */
static uint64_t subtask_bytes(uint64_t id, uint32_t record, const weir_subtask_snapshot *sn,
                              const weir__keys_memo *share, uint8_t *buf) {
  chunker c = {.snap = sn, .share = share, .id = {id, record, 0}};
  uint64_t total = 0;
  size_t len = 0;
  while (chunker_next(&c, buf, &len)) total += len + WEIR__CHUNK_KEY;
  weir_free(c.counts);
  return total;
}

/* Frees what a write request holds (its view read first, if a reader
 * has it). */
static void req_free_snap(weir_store *s, weir__req *r) {
  weir__readers_claim(s, r);
  weir_subtask_snapshot_free(&r->snap);
}

/* ---- grouped subtask writes ------------------------------------------------ */

/* The writer thread takes a subtask write off its queue together with every
 * write queued right behind it and puts them into ONE shared write
 * transaction (a group commit: each LMDB commit costs an fdatasync, which
 * dominated a checkpoint of many small writes). The shared
 * transaction is committed when it holds WEIR__TXN_CHUNKS chunks (a large
 * state still commits in pieces of at most ~4 MB) or when no write is left
 * to add; done() of a write runs once the transaction holding its last
 * chunks is committed (its pages synced), never while a write transaction is open (a done()
 * callback may run a synchronous request inline, which opens its own).
 *
 * Each write puts its chunks in a nested transaction of the shared one, so
 * a write that fails while putting (a full map, a failpoint, a bad value)
 * is undone alone and the others go on; a shared transaction that fails to
 * begin or to commit fails every write that had chunks in it, each with its
 * own message. Only a consecutive run of writes is taken off the queue:
 * commits, aborts and synchronous requests keep their order.
 *
 * A member's life (g.m[i]):
 *
 *   queued --prepare fails-------------------------------> failed
 *   queued --chunks put, nested txn committed into shared-> written
 *   written (and every chunk of it in a committed txn) ---> durable
 *   written/partly put --shared txn fails to begin/commit-> failed
 *   failed, durable --no shared txn open------------------> reported (done())
 *
 * Invariants: members are reported in queue order; a member is registered
 * in its checkpoint's pending entries when written (so a later write of the
 * same operator subtask is refused as before); a failed member sets its
 * checkpoint's status, so the commit fails whatever the entries say.
 *
 * A checkpoint's commit (metadata + latest pointer) queued right behind
 * the group ends it: the coordinator queues it as soon as every write of
 * the checkpoint is queued, so it usually is. If every write with chunks
 * in the open transaction is of that checkpoint, the metadata goes into
 * that transaction (commit_behind), which is then committed durably: the
 * checkpoint's last chunks and its metadata become visible together, and
 * the members are reported before the commit. A write of another
 * checkpoint in it keeps the commit out (a failure of theirs must not fail
 * it); a commit behind a write never runs before it. Behind a commit there
 * can only be a later checkpoint's writes (none while one checkpoint is in
 * flight). */

#define GROUP_MAX 256u /* writes taken into one group (bounds its array) */

typedef enum { M_QUEUED, M_WRITING, M_WRITTEN, M_DURABLE, M_FAILED, M_REPORTED } mstate;

typedef struct gmember {
  weir__req *r;
  int own; /* taken off the queue by the group: freed by it */
  mstate state;
  int status; /* M_FAILED: the error */
  char *why;  /* M_FAILED: its message (weir_malloc'd) */
  uint64_t id;
  uint32_t record, subtask;
  char *op;             /* a copy, for messages after the snapshot is gone */
  uint64_t need;        /* its chunks' bytes with keys, once written */
  weir_store_written w; /* durable so far */
  uint64_t txn_bytes;   /* values of its chunks in the shared transaction */
  uint32_t txn_chunks;
  const weir__keys_memo *share; /* while writing: the holder of its keys */
} gmember;

typedef struct wgroup {
  MDB_txn *txn;     /* the shared transaction, or NULL */
  uint32_t chunks;  /* chunk puts in it */
  uint64_t bytes;   /* their values' bytes */
  uint32_t writers; /* members with chunks in it */
  gmember *m;
  size_t n, cap, reported;
} wgroup;

static void group_add(wgroup *g, weir__req *r, int own) {
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 16;
    g->m = weir_realloc(g->m, g->cap * sizeof *g->m);
  }
  g->m[g->n++] = (gmember){.r = r, .own = own, .state = M_QUEUED, .id = r->id};
}

/* Takes the consecutive writes at the head of the queue into the group (at
 * most GROUP_MAX members in all); returns how many. Only on the writer
 * thread: an inline write (no thread yet) has nothing queued. */
static size_t group_pull(weir_store *s, wgroup *g) {
  if (!weir__on_writer(s)) return 0;
  size_t got = 0;
  pthread_mutex_lock(&s->q_mu);
  while (g->n < GROUP_MAX && s->head != NULL && s->head->type == WEIR__REQ_WRITE) {
    weir__req *r = s->head;
    s->head = r->next;
    if (s->head == NULL) s->tail = NULL;
    group_add(g, r, 1);
    got++;
  }
  pthread_mutex_unlock(&s->q_mu);
  return got;
}

/* Marks m failed with the store's current message (set by the caller with
 * weir__store_fail) and its checkpoint as no longer whole. */
static void member_fail(weir_store *s, gmember *m, int rc) {
  char msg[sizeof s->err];
  weir_store_error(s, msg, sizeof msg);
  weir_free(m->why);
  m->why = weir_strdup(msg);
  m->status = rc;
  m->state = M_FAILED;
  m->txn_bytes = 0;
  m->txn_chunks = 0;
  weir__pending *pc = pending_find(s, m->id);
  if (pc != NULL && pc->status == 0) pc->status = rc;
  weir_subtask_snapshot_free(&m->r->snap);
}

/* Fails m with the message of a failed chunk write: rc the LMDB or errno
 * code (code: what it is reported as, note: write_err's account of the
 * space), fp a simulated failure, need the subtask's bytes, inflight the
 * bytes of the transaction that failed, held what else it held ("" for
 * m's own nested transaction). */
static void write_failed(weir_store *s, gmember *m, int code, int rc, const char *note,
                         const char *fp, uint64_t need, uint64_t inflight, const char *held) {
  weir__store_fail(s, code,
                   "store %s: writing checkpoint %llu, operator \"%s\" subtask %u: %s%s%s; the "
                   "subtask needs %llu bytes (and LMDB's page overhead), %llu bytes were being "
                   "written in this transaction%s, %llu bytes of this subtask were already durable",
                   s->path, (ull)m->id, m->op, m->subtask, weir__mdb_text(rc), note, fp, (ull)need,
                   (ull)inflight, held, (ull)m->w.bytes);
  member_fail(s, m, code);
}

/* Runs done() of every member that is finished, in queue order, up to the
 * first one that is not. Never with a transaction open. */
static void group_report(weir_store *s, wgroup *g) {
  WEIR_ASSERT(g->txn == NULL);
  while (g->reported < g->n) {
    gmember *m = &g->m[g->reported];
    if (m->state != M_FAILED && m->state != M_DURABLE) break;
    weir__req *r = m->r;
    int rc = 0;
    if (m->state == M_FAILED) {
      /* done() reads the store's message: this member's, set just before. */
      rc = weir__store_fail(s, m->status, "%s", m->why);
    }
    m->state = M_REPORTED;
    g->reported++;
    if (r->done) r->done(r->user, rc, &m->w);
  }
}

/* Ends the shared transaction and settles its members: with rc 0 commits
 * it (written members become durable, a partly written one carries its
 * durable bytes on); otherwise (rc an LMDB or errno code, fp naming a
 * simulated failure) aborts it. A failed commit or an abort fails every
 * member with chunks in it, each with its own message. A transaction
 * without chunks (every put in it failed) is only aborted, unless it holds
 * a checkpoint's metadata (meta_fp not NULL): it is then committed durably
 * (commit_durable), and *meta_fp names a simulated failure of that commit.
 * Returns 0 if the transaction was committed, else the LMDB or errno code. */
static int group_end_txn(weir_store *s, wgroup *g, int rc, const char *fp, const char **meta_fp) {
  WEIR_ASSERT(g->txn != NULL);
  int empty = g->chunks == 0 && meta_fp == NULL;
  if (!empty && rc == 0 && (rc = simulated("store.chunk_txn_commit")) != 0)
    fp = " [simulated by failpoint store.chunk_txn_commit]";
  if (meta_fp != NULL) *meta_fp = fp;
  if (rc == 0 && !empty) {
    /* Durable once the checkpoint's commit is (commit_durable): the data
     * is synced, the meta page with the next commit. A transaction with
     * the commit in it is that commit. */
    span t = span_begin();
    rc = meta_fp != NULL ? commit_durable(s, g->txn) : mdb_txn_commit(g->txn);
    span_end(t, &s->stats.txn_cpu, &s->stats.txn_wall);
    if (rc == 0 && g->chunks > 0) s->test_chunk_txns++;
  } else {
    mdb_txn_abort(g->txn);
  }
  g->txn = NULL;
  if (rc == 0 && !empty) {
    WEIR_LOG_D("store %s: %u subtask writes in one transaction (%u chunks, %llu bytes)", s->path,
               g->writers, g->chunks, (ull)g->bytes);
    s->stats.chunks += g->chunks;
    s->stats.bytes += g->bytes;
  }
  char note[128] = "";
  int code = rc != 0 ? write_err(s, rc, g->bytes, note, sizeof note) : 0;
  for (size_t i = g->reported; i < g->n; i++) {
    gmember *m = &g->m[i];
    if (m->state != M_WRITING && m->state != M_WRITTEN) continue;
    if (rc == 0 || m->txn_chunks == 0) {
      m->w.bytes += m->txn_bytes;
      m->w.chunks += m->txn_chunks;
      m->txn_bytes = 0;
      m->txn_chunks = 0;
      if (m->state == M_WRITTEN) m->state = M_DURABLE;
      continue;
    }
    uint64_t need = m->state == M_WRITTEN
                        ? m->need
                        : subtask_bytes(m->id, m->record, &m->r->snap, m->share, s->chunk_buf);
    char held[96];
    snprintf(held, sizeof held, " (%llu of them this subtask's; it held %u subtask writes)",
             (ull)m->txn_bytes, g->writers);
    write_failed(s, m, code, rc, note, fp, need, g->bytes, held);
  }
  g->chunks = 0;
  g->bytes = 0;
  g->writers = 0;
  return rc;
}

/* Checks a write before any chunk of it is put and sorts its u64 state; registers its checkpoint
 * as pending and gives it a record number. 0 or an error (message set). */
static int prepare(weir_store *s, gmember *m) {
  weir_subtask_snapshot *sn = &m->r->snap;
  uint64_t cpu = weir_clock_thread_cpu_ns();
  weir__readers_claim(s, m->r);   /* a reader may have read its view already */
  weir_subtask_snapshot_fill(sn); /* if not, read it here */
  s->stats.read_cpu += weir_clock_thread_cpu_ns() - cpu;
  uint64_t id = m->id;
  m->subtask = sn->subtask;
  m->op = weir_strdup(sn->op ? sn->op : "");
  int rc = check_open_id(s, id);
  if (rc < 0) {
    char why[512];
    weir_store_error(s, why, sizeof why);
    return weir__store_fail(s, rc, "%s: operator \"%s\" subtask %u not written", why, sn->op,
                            sn->subtask);
  }
  weir__pending *pc = pending_get(s, id);
  if (pc->status < 0)
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu already failed: operator \"%s\" subtask %u "
                            "not written",
                            s->path, (ull)id, sn->op, sn->subtask);
  for (uint32_t i = 0; i < pc->nsub; i++) {
    const weir__sub_entry *o = &pc->subs[i];
    if (strcmp(o->op, sn->op) != 0) continue;
    if (o->subtask == sn->subtask)
      return weir__store_fail(s, WEIR_EINVAL,
                              "store %s: checkpoint %llu: operator \"%s\" subtask %u written twice",
                              s->path, (ull)id, sn->op, sn->subtask);
    if (o->parallelism != sn->parallelism)
      return weir__store_fail(s, WEIR_EINVAL,
                              "store %s: checkpoint %llu: operator \"%s\" written with "
                              "parallelism %u and %u",
                              s->path, (ull)id, sn->op, o->parallelism, sn->parallelism);
  }
  if (sn->n_u64 > 1 && sn->u64_in_order) {
#ifdef WEIR_DEBUG
    for (uint64_t i = 1; i < sn->n_u64; i++)
      WEIR_DEBUG_ASSERT(weir_store_u64_rank(sn->u64_keys[i - 1]) <
                        weir_store_u64_rank(sn->u64_keys[i]));
#endif
  } else if (sn->n_u64 > 1) {
    sort_u64(sn->u64_keys, sn->u64_values, sn->n_u64);
    for (uint64_t i = 1; i < sn->n_u64; i++) {
      if (sn->u64_keys[i] == sn->u64_keys[i - 1])
        return weir__store_fail(s, WEIR_EINVAL,
                                "store %s: checkpoint %llu: operator \"%s\" subtask %u: u64 key "
                                "%llu appears twice",
                                s->path, (ull)id, sn->op, sn->subtask, (ull)sn->u64_keys[i]);
    }
  }
  m->record = pc->next_record++; /* consumed even on failure: chunks may exist */
  return 0;
}

/* Registers a written member in its checkpoint's pending entries (taking
 * its snapshot's name and positions) and lets go of its snapshot. */
static void member_written(weir_store *s, gmember *m, chunker *c) {
  weir_subtask_snapshot *sn = &m->r->snap;
  weir__pending *pc = pending_get(s, m->id);
  weir__sub_entry e = {0};
  if (c->share) {
    e.keys_ckpt = c->share->holder;
    e.keys_record = c->share->record;
    s->stats.shared_writes++;
    s->stats.shared_entries += sn->n_u64;
  } else if (sn->n_u64 > 0) {
    memo_keep(s, m->id, m->record, sn, c->counts, c->chunks[0]);
    c->counts = NULL;
  } else {
    memo_drop(s, sn->op, sn->subtask);
  }
  m->share = NULL;
  e.record = m->record;
  e.u64_chunks = c->chunks[0];
  e.bytes_chunks = c->chunks[1];
  e.blob_chunks = c->chunks[2];
  e.bytes = m->w.bytes + m->txn_bytes;
  e.op = sn->op;
  sn->op = NULL;
  e.subtask = sn->subtask;
  e.parallelism = sn->parallelism;
  e.u64_entries = sn->n_u64;
  e.bytes_entries = sn->n_bytes;
  e.bytes_data_len = sn->b_data_len;
  e.blob_len = sn->blob_len;
  e.npos = sn->npos;
  e.pos = sn->pos;
  sn->pos = NULL;
  sn->npos = 0;
  if (pc->nsub == pc->cap) {
    pc->cap = pc->cap ? 2 * pc->cap : 8;
    pc->subs = weir_realloc(pc->subs, pc->cap * sizeof *pc->subs);
  }
  pc->subs[pc->nsub++] = e;
  m->state = M_WRITTEN;
  weir_subtask_snapshot_free(sn);
}

/* Puts the chunks of member m under [id][record] into the group's shared
 * transaction (beginning one when none is open), in a nested transaction
 * of it; at WEIR__TXN_CHUNKS chunks the shared transaction is committed
 * (and finished members reported) and a new one begun. On failure m is
 * failed (message set), the shared transaction stays usable unless it was
 * the one that failed. */
static void write_chunks(weir_store *s, wgroup *g, gmember *m) {
  if (s->chunk_buf == NULL) s->chunk_buf = weir_malloc(WEIR__CHUNK_MAX);
  const weir_subtask_snapshot *sn = &m->r->snap;
  uint64_t id = m->id;
  uint32_t record = m->record;
  m->share = keys_share(s, sn);
  chunker c = {.snap = sn, .share = m->share, .id = {id, record, 0}};
  MDB_txn *txn = NULL; /* m's nested transaction */
  int append = 0, rc = 0;
  uint64_t failing = 0, need = 0;
  const char *fp = "";
  m->state = M_WRITING;
  for (;;) {
    size_t len = 0;
    uint32_t seq = c.id.seq;
    int more = chunker_next(&c, s->chunk_buf, &len);
    if (more) {
      uint8_t kb[WEIR__CHUNK_KEY];
      weir__key_chunk(kb, id, record, seq);
      if (g->txn == NULL) {
        group_report(s, g); /* no transaction open: done() may run */
        rc = begin_write(s, &g->txn);
        if (rc != 0) {
          g->txn = NULL;
          break;
        }
      }
      if (txn == NULL) {
        rc = mdb_txn_begin(s->env, g->txn, 0, &txn);
        if (rc != 0) {
          txn = NULL;
          break;
        }
        append = can_append(s, txn, kb);
      }
      MDB_val key = {sizeof kb, kb}, val = {len, s->chunk_buf};
      failing = len;
      if ((rc = simulated("store.write_chunk")) != 0) {
        fp = " [simulated by failpoint store.write_chunk]";
        break;
      }
      /* A planned chunk is encoded straight into the page LMDB reserves
       * for it: ~10 MB less to copy per million keys. */
      unsigned flags = (append ? MDB_APPEND : MDB_NOOVERWRITE) | (c.planned ? MDB_RESERVE : 0);
      rc = mdb_put(txn, s->dbi_chunks, &key, &val, flags);
      if (rc == 0 && c.planned) {
        uint64_t t = weir_clock_thread_cpu_ns();
        chunker_write(&c, val.mv_data);
        s->stats.fill_cpu += weir_clock_thread_cpu_ns() - t;
      }
      if (rc == 0 && weir_failpoint("store.in_chunk_txn")) rc = EIO; /* tests */
      if (rc != 0) break;
      failing = 0;
      need += len + WEIR__CHUNK_KEY;
      if (m->txn_chunks++ == 0) g->writers++;
      m->txn_bytes += len;
      g->chunks++;
      g->bytes += len;
    }
    if (txn != NULL && (!more || g->chunks >= WEIR__TXN_CHUNKS)) {
      rc = mdb_txn_commit(txn); /* into the shared transaction: no I/O */
      txn = NULL;
      if (rc != 0) { /* the shared one may be half merged: fail it all */
        group_end_txn(s, g, rc, "", NULL);
        weir_free(c.counts);
        return;
      }
    }
    if (!more) {
      m->need = need;
      member_written(s, m, &c);
    }
    if (g->txn != NULL && g->chunks >= WEIR__TXN_CHUNKS) group_end_txn(s, g, 0, "", NULL);
    if (!more || m->state == M_FAILED) {
      weir_free(c.counts);
      return;
    }
  }
  /* A failure of m's own: its nested transaction is undone, the shared one
   * goes on (unless beginning it failed: then there is none). */
  if (txn != NULL) mdb_txn_abort(txn);
  if (m->txn_chunks > 0 && g->writers > 0) g->writers--;
  g->chunks -= m->txn_chunks;
  g->bytes -= m->txn_bytes;
  char map[128];
  uint64_t inflight = m->txn_bytes + failing;
  int code = write_err(s, rc, inflight, map, sizeof map);
  write_failed(s, m, code, rc, map, fp, subtask_bytes(id, record, sn, m->share, s->chunk_buf),
               inflight, "");
  weir_free(c.counts);
}

/* ---- requests ----------------------------------------------------------------- */

static int cmp_entry(const void *a, const void *b) {
  const weir__sub_entry *x = a, *y = b;
  int c = strcmp(x->op, y->op);
  if (c != 0) return c;
  return x->subtask < y->subtask ? -1 : x->subtask > y->subtask;
}

/* Deletes the metadata of the oldest completed checkpoints beyond `retain`,
 * then the chunks that no checkpoint left names (collect_orphans: the keys
 * of a removed checkpoint stay while a later one shares them). */
static void retention(weir_store *s) {
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
    rc = begin_write(s, &txn);
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

/* A checkpoint's commit as it runs: on its own (exec_commit) or with its
 * metadata in the transaction that holds its last writes (exec_writes). */
typedef struct ckcommit {
  weir__req *r;
  uint64_t id;
  weir__pending *pc;
  int untouched;       /* refused before anything of the checkpoint was touched */
  int discard_on_fail; /* a failure discards what was written for it */
  const char *fp;      /* a simulated failure of the metadata put */
  weir__ckpt_meta m;
  uint8_t *mval, *jval;
  size_t mlen, jlen;
  weir__sub_entry *subs;
  char *why; /* a failure's message, kept while the writes before it are reported */
} ckcommit;

/* The checks that need no transaction: the id is this store's to commit,
 * no subtask write of it failed, and it holds as many writes as the
 * coordinator counted. 0 or an error (message set). */
static int commit_check(weir_store *s, ckcommit *c) {
  const weir_store_commit_info *ci = &c->r->commit;
  c->discard_on_fail = 1;
  int rc = check_open_id(s, c->id);
  if (rc < 0) { /* nothing of it may be touched: it is not this commit's */
    c->untouched = 1;
    return rc;
  }
  c->pc = pending_find(s, c->id);
  uint32_t written = c->pc ? c->pc->nsub : 0;
  if (c->pc != NULL && c->pc->status < 0) {
    char prev[512];
    weir_store_error(s, prev, sizeof prev);
    return weir__store_fail(s, c->pc->status,
                            "store %s: checkpoint %llu not committed: a subtask write failed (%s; "
                            "last store error: %s)",
                            s->path, (ull)c->id, weir_strerror(c->pc->status), prev);
  }
  if (ci->subtasks != 0 && ci->subtasks != written)
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu not committed: it holds %u subtask writes, "
                            "%u were acknowledged",
                            s->path, (ull)c->id, written, ci->subtasks);
  return 0;
}

/* The message of a failed metadata put or durable commit (rc an LMDB or
 * errno code; with_writes: of the transaction that also held the
 * checkpoint's last writes); returns the WEIR_E* code. */
static int commit_io_fail(weir_store *s, const ckcommit *c, int rc, int with_writes) {
  char map[128];
  int code = write_err(s, rc, c->mlen + c->jlen, map, sizeof map);
  if (with_writes)
    return weir__store_fail(s, code,
                            "store %s: checkpoint %llu not committed: the transaction holding its "
                            "last writes and its metadata (%zu bytes) failed: %s%s%s",
                            s->path, (ull)c->id, c->mlen, weir__mdb_text(rc), map, c->fp);
  return weir__store_fail(s, code,
                          "store %s: committing checkpoint %llu (%zu bytes of metadata): %s%s%s",
                          s->path, (ull)c->id, c->mlen, weir__mdb_text(rc), map, c->fp);
}

/* Puts the checkpoint's metadata (every subtask written for it) and the
 * job record's latest pointer (and finished flag) into txn. 0 or an error
 * (message set); txn must then be aborted. */
static int commit_put(weir_store *s, ckcommit *c, MDB_txn *txn) {
  const weir_store_commit_info *ci = &c->r->commit;
  uint64_t id = c->id;
  weir__job_rec job;
  int rc = weir__txn_job(s, txn, s->dbi_job, &job);
  if (rc == 0)
    rc = weir__store_fail(s, WEIR_ESTATE,
                          "store %s: checkpoint %llu: no job (weir_store_job_begin first)", s->path,
                          (ull)id);
  if (rc < 0) return rc;
  if (id == 0 || id >= job.id_limit)
    return weir__store_fail(
        s, WEIR_EINVAL, "store %s: checkpoint id %llu was never handed out (ids below %llu were)",
        s->path, (ull)id, (ull)job.id_limit);
  rc = is_committed(s, txn, id);
  if (rc > 0) {
    c->discard_on_fail = 0;
    return weir__store_fail(s, WEIR_ESTATE, "store %s: checkpoint %llu is already committed",
                            s->path, (ull)id);
  }
  if (rc < 0) return rc;

  weir__ckpt_meta *m = &c->m;
  m->format_version = WEIR_STORE_FORMAT;
  m->min_reader_version = WEIR_STORE_MIN_READER;
  memcpy(m->job_id, job.job_id, sizeof m->job_id);
  m->instance = job.instance;
  m->id = id;
  m->epoch = ci->epoch;
  m->trigger_ms = ci->trigger_ms;
  m->complete_ms = weir_clock_wall_ms();
  m->duration_ms = ci->duration_ms;
  if (ci->trigger_ns != 0) {
    uint64_t now = weir_clock_mono_ns();
    m->duration_ms = now > ci->trigger_ns ? (now - ci->trigger_ns) / 1000000u : 0;
  }
  m->alignment_ms = ci->alignment_ms;
  m->key_groups = ci->key_groups;
  m->final = ci->final != 0;
  weir__pending *pc = c->pc;
  if (pc != NULL && pc->nsub > 0) {
    c->subs = weir_malloc(pc->nsub * sizeof *c->subs);
    memcpy(c->subs, pc->subs, pc->nsub * sizeof *c->subs);
    qsort(c->subs, pc->nsub, sizeof *c->subs, cmp_entry);
    m->nsub = pc->nsub;
    m->subs = c->subs;
    for (uint32_t i = 0; i < m->nsub; i++) {
      m->total_bytes += c->subs[i].bytes;
      m->total_chunks += weir__sub_chunks(&c->subs[i]);
      if (c->subs[i].keys_ckpt) m->min_reader_version = WEIR_STORE_SHARED_KEYS;
    }
  }
  weir__meta_encode(m, &c->mval, &c->mlen);
  uint8_t k[8];
  weir__key_meta(k, id);
  MDB_val key = {8, k}, val = {c->mlen, c->mval};
  if ((rc = simulated("store.commit")) != 0)
    c->fp = " [simulated by failpoint store.commit]";
  else
    rc = mdb_put(txn, s->dbi_meta, &key, &val, MDB_NOOVERWRITE);
  if (rc == 0) {
    if (id > job.latest) job.latest = id;
    if (ci->final) job.finished = 1;
    weir__job_encode(&job, &c->jval, &c->jlen);
    MDB_val jkey = {3, "job"}, jv = {c->jlen, c->jval};
    rc = mdb_put(txn, s->dbi_job, &jkey, &jv, 0);
  }
  /* Tests: pause (SIGSTOP) here holds LMDB's writer lock (lease.c, I5). */
  if (rc == 0 && weir_failpoint("store.in_commit_txn")) rc = EIO;
  return rc == 0 ? 0 : commit_io_fail(s, c, rc, 0);
}

/* Once the transaction holding the metadata is durable: still the owner?
 * If not, this process was paused past its lease: the checkpoint is not
 * reported as completed (no effects may follow it), though it stays in
 * this environment. 0 or WEIR_EFENCED (message set). */
static int commit_owned(weir_store *s, ckcommit *c) {
  if (s->lease == NULL || weir_lease_check(s->lease) >= 0) return 0;
  c->discard_on_fail = 0;
  char why[512];
  return weir__store_fail(s, WEIR_EFENCED, "store %s: checkpoint %llu: %s", s->path, (ull)c->id,
                          weir_lease_error(s->lease, why, sizeof why));
}

/* Settles the commit with rc (0: durable and owned) and reports it; never
 * with a transaction open. */
static void commit_end(weir_store *s, ckcommit *c, int rc) {
  weir__req *r = c->r;
  weir_store_written w = {0, 0};
  if (rc == 0) {
    w.bytes = c->m.total_bytes;
    w.chunks = (uint32_t)(c->m.total_chunks > UINT32_MAX ? UINT32_MAX : c->m.total_chunks);
    WEIR_LOG_D("store %s: checkpoint %llu committed (%u subtasks, %llu bytes in %llu chunks)%s",
               s->path, (ull)c->id, c->m.nsub, (ull)c->m.total_bytes, (ull)c->m.total_chunks,
               c->m.final ? ", final" : "");
  }
  if (rc < 0 && c->why != NULL) weir__store_fail(s, rc, "%s", c->why); /* done() reads it */
  weir_free(c->why);
  weir_free(c->subs);
  weir_free(c->mval);
  weir_free(c->jval);
  s->stats.commits++;
  if (c->untouched) {
    if (r->done) r->done(r->user, rc, NULL);
    return;
  }
  fin_add(s, c->id);
  if (rc == 0) {
    pending_drop(s, c->id);
    memo_committed(s, c->id);
    if (r->done) r->done(r->user, 0, &w);
    retention(s);
  } else {
    if (c->discard_on_fail) discard(s, c->id);
    if (r->done) r->done(r->user, rc, NULL);
  }
}

/* The commit in a write transaction of its own. */
static void exec_commit(weir_store *s, weir__req *r) {
  ckcommit c = {.r = r, .id = r->commit.id, .fp = ""};
  MDB_txn *txn = NULL;
  int rc = commit_check(s, &c);
  if (rc == 0 && (rc = begin_write(s, &txn)) != 0) {
    txn = NULL;
    rc = weir__store_fail(s, weir__mdb_err(rc), "store %s: committing checkpoint %llu: %s", s->path,
                          (ull)c.id, weir__mdb_text(rc));
  }
  if (rc == 0) rc = commit_put(s, &c, txn);
  if (rc == 0) {
    rc = commit_durable(s, txn);
    txn = NULL;
    rc = rc != 0 ? commit_io_fail(s, &c, rc, 0) : commit_owned(s, &c);
  }
  if (txn != NULL) mdb_txn_abort(txn);
  commit_end(s, &c, rc);
}

/* The commit queued right behind the group, taken off the queue if its
 * metadata may join the group's open transaction: every write with chunks
 * in it is of that checkpoint (a failure of another checkpoint's write
 * must not fail this one). NULL: none, or not on the writer thread. */
static weir__req *commit_behind(weir_store *s, const wgroup *g) {
  if (g->txn == NULL || !weir__on_writer(s)) return NULL;
  pthread_mutex_lock(&s->q_mu);
  weir__req *r = s->head;
  if (r != NULL && r->type == WEIR__REQ_COMMIT) {
    for (size_t i = 0; r != NULL && i < g->n; i++)
      if (g->m[i].txn_chunks > 0 && g->m[i].id != r->commit.id) r = NULL;
  } else {
    r = NULL;
  }
  if (r != NULL) {
    s->head = r->next;
    if (s->head == NULL) s->tail = NULL;
  }
  pthread_mutex_unlock(&s->q_mu);
  return r;
}

/* Commits the group's open transaction with c's metadata in it (a nested
 * transaction of its own), durably; the group's members are settled, not
 * reported. Returns 0 (durable and owned) or the commit's error (message
 * set; a failure before the metadata was in leaves the transaction
 * committed without it, as a chunk transaction). */
static int commit_in_group(weir_store *s, wgroup *g, ckcommit *c) {
  c->id = c->r->commit.id;
  MDB_txn *nest = NULL;
  int rc = commit_check(s, c);
  if (rc == 0 && (rc = mdb_txn_begin(s->env, g->txn, 0, &nest)) != 0)
    return commit_io_fail(s, c, rc, 0);
  if (rc == 0 && (rc = commit_put(s, c, nest)) != 0) mdb_txn_abort(nest);
  if (rc != 0) return rc;
  if ((rc = mdb_txn_commit(nest)) != 0) { /* the shared one may be half merged */
    group_end_txn(s, g, rc, "", NULL);
    return commit_io_fail(s, c, rc, 1);
  }
  const char *fp = "";
  if ((rc = group_end_txn(s, g, 0, "", &fp)) != 0) {
    c->fp = fp;
    return commit_io_fail(s, c, rc, 1);
  }
  s->stats.commits_with_writes++;
  WEIR_LOG_D("store %s: checkpoint %llu: its metadata went into the transaction of its last writes",
             s->path, (ull)c->id);
  return commit_owned(s, c);
}

/* Runs the write `first` and, on the writer thread, every write queued
 * right behind it as one group (above), and the checkpoint's commit if it
 * is queued right behind them (commit_behind): its metadata then goes into
 * the transaction that holds the last writes, a nested one of its own, and
 * that transaction is committed durably, one transaction and one sync less
 * for the checkpoint. Frees the requests it pulled off the queue; `first`
 * stays the caller's. */
static void exec_writes(weir_store *s, weir__req *first) {
  wgroup g = {0};
  group_add(&g, first, 0);
  for (size_t i = 0;; i++) {
    if (i == g.n) {
      /* Room left in an open transaction: take what queued meanwhile. */
      if (g.txn == NULL || g.chunks >= WEIR__TXN_CHUNKS || group_pull(s, &g) == 0) break;
    }
    gmember *m = &g.m[i];
    int rc = prepare(s, m);
    if (rc < 0) {
      member_fail(s, m, rc);
    } else {
      /* Encoding and puts: the writes' CPU less the commits inside it. */
      uint64_t cpu = weir_clock_thread_cpu_ns(), txn = s->stats.txn_cpu;
      write_chunks(s, &g, m);
      s->stats.encode_cpu += weir_clock_thread_cpu_ns() - cpu - (s->stats.txn_cpu - txn);
      s->stats.writes++;
    }
    if (m->state == M_WRITTEN && m->txn_chunks == 0 && g.txn == NULL)
      m->state = M_DURABLE; /* nothing of it waits for a commit */
    if (g.txn == NULL) group_report(s, &g);
  }
  ckcommit c = {.r = commit_behind(s, &g), .fp = ""};
  int crc = c.r != NULL ? commit_in_group(s, &g, &c) : 0;
  if (g.txn != NULL) group_end_txn(s, &g, 0, "", NULL); /* no commit in it */
  if (crc < 0) { /* the members' done() calls set their own messages */
    char why[sizeof s->err];
    c.why = weir_strdup(weir_store_error(s, why, sizeof why));
  }
  for (size_t i = g.reported; i < g.n; i++)
    if (g.m[i].state == M_WRITTEN) g.m[i].state = M_DURABLE; /* no chunks: none to wait for */
  group_report(s, &g);
  WEIR_ASSERT(g.reported == g.n);
  for (size_t i = 0; i < g.n; i++) {
    gmember *m = &g.m[i];
    weir_free(m->why);
    weir_free(m->op);
    req_free_snap(s, m->r);
    if (m->own) weir_free(m->r);
  }
  weir_free(g.m);
  if (c.r != NULL) {
    commit_end(s, &c, crc);
    weir_free(c.r);
  }
}

static void exec_abort(weir_store *s, weir__req *r) {
  fin_add(s, r->id);
  int c = committed_now(s, r->id);
  if (c > 0) {
    WEIR_LOG_D("store %s: abort of checkpoint %llu ignored: it is committed", s->path, (ull)r->id);
    pending_drop(s, r->id);
    return;
  }
  discard(s, r->id);
}

/* Fills out with a random (version 4) UUID in text form. */
static int make_uuid(weir_store *s, char out[40]) {
  uint8_t b[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return weir__store_fail(s, -errno, "store %s: /dev/urandom: %s", s->path, strerror(errno));
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = read(fd, b + got, sizeof b - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      close(fd);
      return weir__store_fail(s, -e, "store %s: reading /dev/urandom: %s", s->path, strerror(e));
    }
    got += (size_t)n;
  }
  close(fd);
  b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
  b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
  static const char hex[] = "0123456789abcdef";
  char *p = out;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
    *p++ = hex[b[i] >> 4];
    *p++ = hex[b[i] & 15];
  }
  *p = '\0';
  return 0;
}

/* Reads the job record in a write transaction, lets `change` modify it, and
 * writes it back (when change returns 1). */
static int update_job(weir_store *s, weir__req *r) {
  MDB_txn *txn;
  int rc = begin_write(s, &txn);
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: updating the job record: %s", s->path,
                            weir__mdb_text(rc));
  weir__job_rec job;
  int have = weir__txn_job(s, txn, s->dbi_job, &job);
  if (have < 0) {
    mdb_txn_abort(txn);
    return have;
  }
  int write = 0;
  if (r->type == WEIR__REQ_JOB_BEGIN) {
    if (!have) {
      memset(&job, 0, sizeof job);
      if ((rc = make_uuid(s, job.job_id)) < 0) {
        mdb_txn_abort(txn);
        return rc;
      }
      job.instance = 1;
      job.id_limit = 1;
      job.created_ms = weir_clock_wall_ms();
      write = 1;
    } else if (r->new_instance) {
      job.instance++;
      job.latest = 0;
      job.finished = 0;
      write = 1;
    }
  } else { /* RESERVE */
    if (!have) {
      mdb_txn_abort(txn);
      return weir__store_fail(
          s, WEIR_ESTATE, "store %s: no job: weir_store_job_begin before asking for ids", s->path);
    }
    job.id_limit = (job.id_limit > r->from ? job.id_limit : r->from) + WEIR__ID_BLOCK;
    write = 1;
  }
  if (write) {
    uint8_t *v;
    size_t len;
    weir__job_encode(&job, &v, &len);
    MDB_val key = {3, "job"}, val = {len, v};
    rc = mdb_put(txn, s->dbi_job, &key, &val, 0);
    weir_free(v);
    if (rc == 0) {
      rc = commit_durable(s, txn);
    } else {
      mdb_txn_abort(txn);
    }
    if (rc != 0) {
      char note[128];
      int code = write_err(s, rc, len, note, sizeof note);
      return weir__store_fail(s, code, "store %s: writing the job record: %s%s", s->path,
                              weir__mdb_text(rc), note);
    }
  } else {
    mdb_txn_abort(txn);
  }
  r->job = job;
  r->limit = job.id_limit;
  return 0;
}

static void execute(weir_store *s, weir__req *r) {
  switch (r->type) {
  case WEIR__REQ_WRITE:
    exec_writes(s, r);
    break;
  case WEIR__REQ_COMMIT: {
    span t = span_begin();
    exec_commit(s, r);
    span_end(t, &s->stats.commit_cpu, &s->stats.commit_wall);
    break;
  }
  case WEIR__REQ_ABORT:
    exec_abort(s, r);
    break;
  case WEIR__REQ_JOB_BEGIN:
  case WEIR__REQ_RESERVE:
    r->status = update_job(s, r);
    break;
  case WEIR__REQ_FLUSH:
  case WEIR__REQ_STOP:
    r->status = 0;
    break;
  }
}

uint64_t weir__store_test_chunk_txns(weir_store *s) {
  return s->test_chunk_txns;
}

uint64_t weir__store_test_commits_with_writes(weir_store *s) {
  return s->stats.commits_with_writes;
}

/* ---- the thread ---------------------------------------------------------------- */

int weir__on_writer(weir_store *s) {
  return s->writer_running && pthread_equal(pthread_self(), s->writer);
}

static void *writer_main(void *arg) {
  weir_store *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->q_mu);
    while (s->head == NULL) pthread_cond_wait(&s->q_cv, &s->q_mu);
    weir__req *r = s->head;
    s->head = r->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->q_mu);
    int stop = r->type == WEIR__REQ_STOP;
    weir_fork_hold(); /* every request, not the wait: see weir/alloc.h */
    execute(s, r);
    weir_fork_release();
    if (r->sync) {
      pthread_mutex_lock(&s->q_mu);
      r->finished = 1;
      pthread_cond_broadcast(&s->done_cv);
      pthread_mutex_unlock(&s->q_mu);
    } else {
      req_free_snap(s, r);
      weir_free(r);
    }
    if (stop) break;
  }
  return NULL;
}

static void enqueue(weir_store *s, weir__req *r) {
  r->next = NULL;
  pthread_mutex_lock(&s->q_mu);
  if (s->tail) {
    s->tail->next = r;
  } else {
    s->head = r;
  }
  s->tail = r;
  pthread_cond_signal(&s->q_cv);
  pthread_mutex_unlock(&s->q_mu);
}

void weir__writer_post(weir_store *s, weir__req *r) {
  r->sync = 0;
  if (!s->writer_running) { /* not reached: posts need an open, writable store */
    execute(s, r);
    weir_subtask_snapshot_free(&r->snap);
    weir_free(r);
    return;
  }
  weir__readers_offer(s, r); /* its view read ahead, if it has one */
  enqueue(s, r);
}

int weir__writer_call(weir_store *s, weir__req *r) {
  r->sync = 1;
  r->finished = 0;
  if (!s->writer_running || weir__on_writer(s)) {
    execute(s, r);
    return r->status;
  }
  enqueue(s, r);
  pthread_mutex_lock(&s->q_mu);
  while (!r->finished) pthread_cond_wait(&s->done_cv, &s->q_mu);
  pthread_mutex_unlock(&s->q_mu);
  return r->status;
}

/* LMDB takes a write transaction's dirty overflow pages (every chunk value
 * is 16 of them) from malloc and frees them at commit. glibc gives memory
 * free at the top of a heap back to the kernel once more than 128 KiB is
 * free there, so every checkpoint faulted its ~10 MB of pages per million
 * keys in again, and the kernel zeroed them: two thirds of the writer's
 * time, a third of a 2-worker counter job's throughput at 100 ms
 * checkpoints. Keeping up to 64 MiB free is process-wide (glibc has no
 * per-heap setting); MALLOC_TRIM_THRESHOLD_ in the environment wins.
 * That setting also freezes glibc's threshold for serving an allocation
 * from a mapping of its own at 128 KiB, and the store makes allocations of
 * a few MB per subtask write (LMDB's page lists of each nested write
 * transaction, channel-state blobs): each was a fresh mapping, faulted in
 * page by page at every checkpoint (an unaligned checkpoint on 2 cores
 * took ~1 ms longer). From 4 MiB on they still get their own mappings
 * (large state arrays, which ask for huge pages: weir_malloc_big);
 * MALLOC_MMAP_THRESHOLD_ in the environment wins. */
static void keep_freed_pages(void) {
#if defined(__GLIBC__) && defined(M_TRIM_THRESHOLD)
  if (getenv("MALLOC_TRIM_THRESHOLD_") == NULL) (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
#if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD)
  if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL) (void)mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
}

int weir__writer_start(weir_store *s) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  (void)pthread_once(&once, keep_freed_pages);
  s->writer_running = 1; /* before the thread runs: on_writer() reads it */
  int rc = pthread_create(&s->writer, NULL, writer_main, s);
  if (rc != 0) {
    s->writer_running = 0;
    return weir__store_fail(s, -rc, "store %s: starting the writer thread: %s", s->path,
                            strerror(rc));
  }
  weir__readers_start(s);
  return 0;
}

/* Where the writer's time went: on few cores its CPU is taken from the
 * workers, so this is the measure of what checkpoints cost them. */
static void log_stats(const weir_store *s) {
  if (s->stats.writes == 0 && s->stats.commits == 0) return;
#define MS(ns) ((double)(ns) / 1e6)
  uint64_t cpu = s->stats.read_cpu + s->stats.encode_cpu + s->stats.txn_cpu + s->stats.commit_cpu;
  WEIR_LOG_D(
      "store %s: writer thread: %llu subtask writes (%llu chunks, %.1f MB) and %llu "
      "commits took %.0f ms of CPU: reading state views %.0f, encoding and LMDB puts "
      "%.0f, chunk transactions %.0f (%.0f ms wall, syncs included), checkpoint commits "
      "%.0f (%.0f ms wall), %llu of the commits in the transaction of their last writes; %llu "
      "writes shared the keys of an earlier checkpoint (%llu "
      "entries); of the encoding and puts, writing planned chunks (u64 with keys, blobs) into "
      "their pages took %.0f ms; %llu state views read ahead by %d reader threads in %.0f ms "
      "of CPU",
      s->path, (ull)s->stats.writes, (ull)s->stats.chunks, (double)s->stats.bytes / 1e6,
      (ull)s->stats.commits, MS(cpu), MS(s->stats.read_cpu), MS(s->stats.encode_cpu),
      MS(s->stats.txn_cpu), MS(s->stats.txn_wall), MS(s->stats.commit_cpu),
      MS(s->stats.commit_wall), (ull)s->stats.commits_with_writes, (ull)s->stats.shared_writes,
      (ull)s->stats.shared_entries, MS(s->stats.fill_cpu), (ull)s->rd_fills, s->nreaders,
      MS(s->rd_cpu));
#undef MS
}

void weir__writer_stop(weir_store *s) {
  if (s->writer_running) {
    weir__req r = {.type = WEIR__REQ_STOP};
    weir__writer_call(s, &r);
    pthread_join(s->writer, NULL);
    s->writer_running = 0;
    weir__readers_stop(s);
    log_stats(s);
  }
  while (s->pending) pending_drop(s, s->pending->id);
  memo_free_all(s);
  weir_free(s->fin);
  s->fin = NULL;
  s->nfin = s->fin_cap = 0;
  weir_free(s->chunk_buf);
  s->chunk_buf = NULL;
}
