/* writer.c: owns the store-writer thread, its request queue and grouped
 * subtask writes; every LMDB write transaction of an open store runs on
 * this thread (see store.c for opening and reading, writer_impl.h for the
 * files that share the thread's work: the commit in commit.c, retention in
 * retention.c, chunks in chunker.c).
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
 * earlier record's: "shared keys" in chunker.c), then its byte-string entries,
 * then its blob, each chunk at most WEIR__CHUNK_MAX bytes (chunker.c). Subtask writes
 * queued together share write transactions of at most WEIR__TXN_CHUNKS chunks
 * ("grouped subtask writes" below: one durable commit for many writes),
 * each write in a nested transaction of its own (MDB_APPEND when the keys
 * land past the current last key).
 * What was written is remembered per checkpoint (weir__pending,
 * pending.c) for the commit.
 *
 * Commit protocol: the commit is ONE write transaction holding the
 * checkpoint's metadata (every subtask written for it) and the job record's
 * `latest` (and `finished`): a transaction of its own, or the one that
 * holds the checkpoint's last chunks when it is queued right behind them
 * (grouped subtask writes below). Its other chunks are on disk before it
 * starts (a chunk transaction commits with fdatasync of its pages), so once
 * the metadata is visible all it names is on disk; before it, the
 * checkpoint does not exist. Only that commit and id reservations sync LMDB's meta page
 * (weir__commit_durable): a power failure can undo the last chunk transaction,
 * which no committed checkpoint names yet, never a commit. A checkpoint
 * with a failed subtask write is never committed: its chunks are discarded.
 * Retention (retention.c) runs after the commit in its own short transactions: metadata
 * first, then chunks (but the records whose keys a retained checkpoint
 * shares), so a crash in between leaves only chunks without metadata,
 * which the next collection (at open, or after any commit) deletes. Checkpoint ids are reserved
 * durably in blocks of WEIR__ID_BLOCK in the job record before they are handed out: a crash skips
 * ids, never repeats them.
 *
 * Fencing (lease.c): with a lease, every write transaction checks it right
 * after it begins (weir__begin_write), and a commit checks it again once durable;
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "writer_impl.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/platform.h"
#include "store_impl.h"
#include "snapshot/lease.h"
#include "base/failpoint.h"
#if WEIR_HAVE_MALLOPT
#include <malloc.h>
#endif

typedef unsigned long long ull;

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
  weir__pending *pc = weir__pending_find(s, m->id);
  if (pc != NULL && pc->status == 0) pc->status = rc;
  weir_subtask_snapshot_free(&m->r->snap);
}

/* Fails m with the message of a failed chunk write: rc the LMDB or errno
 * code (code: what it is reported as, note: weir__write_err's account of the
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
 * (weir__commit_durable), and *meta_fp names a simulated failure of that commit.
 * Returns 0 if the transaction was committed, else the LMDB or errno code. */
static int group_end_txn(weir_store *s, wgroup *g, int rc, const char *fp, const char **meta_fp) {
  WEIR_ASSERT(g->txn != NULL);
  int empty = g->chunks == 0 && meta_fp == NULL;
  if (!empty && rc == 0 && (rc = weir__simulated("store.chunk_txn_commit")) != 0)
    fp = " [simulated by failpoint store.chunk_txn_commit]";
  if (meta_fp != NULL) *meta_fp = fp;
  if (rc == 0 && !empty) {
    /* Durable once the checkpoint's commit is (weir__commit_durable): the data
     * is synced, the meta page with the next commit. A transaction with
     * the commit in it is that commit. */
    span t = span_begin();
    rc = meta_fp != NULL ? weir__commit_durable(s, g->txn) : mdb_txn_commit(g->txn);
    span_end(t, &s->stats.txn_cpu, &s->stats.txn_wall);
#ifdef WEIR_TEST_HOOKS
    if (rc == 0 && g->chunks > 0) s->test_chunk_txns++;
#endif
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
  int code = rc != 0 ? weir__write_err(s, rc, g->bytes, note, sizeof note) : 0;
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
    uint64_t need = m->state == M_WRITTEN ? m->need
                                          : weir__subtask_bytes(m->id, m->record, &m->r->snap,
                                                                m->share, s->chunk_buf);
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
  int rc = weir__check_open_id(s, id);
  if (rc < 0) {
    char why[512];
    weir_store_error(s, why, sizeof why);
    return weir__store_fail(s, rc, "%s: operator \"%s\" subtask %u not written", why, sn->op,
                            sn->subtask);
  }
  weir__pending *pc = weir__pending_get(s, id);
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
    weir__sort_u64(sn->u64_keys, sn->u64_values, sn->n_u64);
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
static void member_written(weir_store *s, gmember *m, weir__chunker *c) {
  weir_subtask_snapshot *sn = &m->r->snap;
  weir__pending *pc = weir__pending_get(s, m->id);
  weir__sub_entry e = {0};
  if (c->share) {
    e.keys_ckpt = c->share->holder;
    e.keys_record = c->share->record;
    s->stats.shared_writes++;
    s->stats.shared_entries += sn->n_u64;
  } else if (sn->n_u64 > 0) {
    weir__memo_keep(s, m->id, m->record, sn, c->counts, c->chunks[0]);
    c->counts = NULL;
  } else {
    weir__memo_drop(s, sn->op, sn->subtask);
  }
  m->share = NULL;
  e.record = m->record;
  e.u64_chunks = c->chunks[0];
  e.bytes_chunks = c->chunks[1];
  e.blob_chunks = c->chunks[2];
  e.ns_chunks = c->chunks[3];
  e.ns_entries = sn->n_ns;
  e.timer_chunks = c->chunks[4];
  e.timer_entries = sn->n_timers;
  e.bcast_chunks = c->chunks[5];
  e.bcast_entries = sn->n_bcast;
  e.has_clock = sn->has_clock;
  e.clock = sn->clock;
  e.state_version = sn->state_version;
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
  m->share = weir__keys_share(s, sn);
  weir__chunker c = {.snap = sn, .share = m->share, .id = {id, record, 0}};
  MDB_txn *txn = NULL; /* m's nested transaction */
  int append = 0, rc = 0;
  uint64_t failing = 0, need = 0;
  const char *fp = "";
  m->state = M_WRITING;
  for (;;) {
    size_t len = 0;
    uint32_t seq = c.id.seq;
    int more = weir__chunker_next(&c, s->chunk_buf, &len);
    if (more) {
      uint8_t kb[WEIR__CHUNK_KEY];
      weir__key_chunk(kb, id, record, seq);
      if (g->txn == NULL) {
        group_report(s, g); /* no transaction open: done() may run */
        rc = weir__begin_write(s, &g->txn);
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
      if ((rc = weir__simulated("store.write_chunk")) != 0) {
        fp = " [simulated by failpoint store.write_chunk]";
        break;
      }
      /* A planned chunk is encoded straight into the page LMDB reserves
       * for it: ~10 MB less to copy per million keys. */
      unsigned flags = (append ? MDB_APPEND : MDB_NOOVERWRITE) | (c.planned ? MDB_RESERVE : 0);
      rc = mdb_put(txn, s->dbi_chunks, &key, &val, flags);
      if (rc == 0 && c.planned) {
        uint64_t t = weir_clock_thread_cpu_ns();
        weir__chunker_write(&c, val.mv_data);
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
  int code = weir__write_err(s, rc, inflight, map, sizeof map);
  write_failed(s, m, code, rc, map, fp, weir__subtask_bytes(id, record, sn, m->share, s->chunk_buf),
               inflight, "");
  weir_free(c.counts);
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
static int commit_in_group(weir_store *s, wgroup *g, weir__ckcommit *c) {
  c->id = c->r->commit.id;
  MDB_txn *nest = NULL;
  int rc = weir__commit_check(s, c);
  if (rc == 0 && (rc = mdb_txn_begin(s->env, g->txn, 0, &nest)) != 0)
    return weir__commit_io_fail(s, c, rc, 0);
  if (rc == 0 && (rc = weir__commit_put(s, c, nest)) != 0) mdb_txn_abort(nest);
  if (rc != 0) return rc;
  if ((rc = mdb_txn_commit(nest)) != 0) { /* the shared one may be half merged */
    group_end_txn(s, g, rc, "", NULL);
    return weir__commit_io_fail(s, c, rc, 1);
  }
  const char *fp = "";
  if ((rc = group_end_txn(s, g, 0, "", &fp)) != 0) {
    c->fp = fp;
    return weir__commit_io_fail(s, c, rc, 1);
  }
  s->stats.commits_with_writes++;
  WEIR_LOG_D("store %s: checkpoint %llu: its metadata went into the transaction of its last writes",
             s->path, (ull)c->id);
  return weir__commit_owned(s, c);
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
  weir__ckcommit c = {.r = commit_behind(s, &g), .fp = ""};
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
    weir__commit_end(s, &c, crc);
    weir_free(c.r);
  }
}

static void exec_abort(weir_store *s, weir__req *r) {
  weir__fin_add(s, r->id);
  int c = weir__committed_now(s, r->id);
  if (c > 0) {
    WEIR_LOG_D("store %s: abort of checkpoint %llu ignored: it is committed", s->path, (ull)r->id);
    weir__pending_drop(s, r->id);
    return;
  }
  weir__discard(s, r->id);
}

static void execute(weir_store *s, weir__req *r) {
  switch (r->type) {
  case WEIR__REQ_WRITE:
    exec_writes(s, r);
    break;
  case WEIR__REQ_COMMIT: {
    span t = span_begin();
    weir__exec_commit(s, r);
    span_end(t, &s->stats.commit_cpu, &s->stats.commit_wall);
    break;
  }
  case WEIR__REQ_ABORT:
    exec_abort(s, r);
    break;
  case WEIR__REQ_JOB_BEGIN:
  case WEIR__REQ_RESERVE:
    r->status = weir__update_job(s, r);
    break;
  case WEIR__REQ_IMPORT:
    r->status = weir__exec_import(s, r);
    break;
  case WEIR__REQ_FLUSH:
  case WEIR__REQ_STOP:
    r->status = 0;
    break;
  }
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
#if WEIR_HAVE_MALLOPT
  if (getenv("MALLOC_TRIM_THRESHOLD_") == NULL) (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
#if WEIR_HAVE_MALLOPT
  if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL) (void)mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
}

int weir__writer_start(weir_store *s) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  (void)pthread_once(&once, keep_freed_pages);
  s->writer_running = 1; /* before the thread runs: on_writer() reads it */
  int rc = weir_thread_start(&s->writer, writer_main, s); /* probes fork */
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
  while (s->pending) weir__pending_drop(s, s->pending->id);
  weir__memo_free_all(s);
  weir_free(s->fin);
  s->fin = NULL;
  s->nfin = s->fin_cap = 0;
  weir_free(s->chunk_buf);
  s->chunk_buf = NULL;
}
