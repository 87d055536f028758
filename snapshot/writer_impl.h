/* writer_impl.h (private to snapshot/): what the files of the store-writer
 * thread share. writer.c owns the thread, its queue and grouped subtask
 * writes; commit.c checkpoint commits and the job record; pending.c what
 * the writer remembers of checkpoints being written and of finished ids;
 * chunker.c the cutting of a subtask into chunks and the shared-keys memo;
 * sort.c the sort of u64 state into hash order; retention.c retention and
 * the collection of orphaned chunks; txn.c the rules every write
 * transaction follows (fencing, durability, failure messages).
 * Everything here runs on the writer thread, or at open before it runs.
 */
#ifndef WEIR_SNAPSHOT_WRITER_IMPL_H
#define WEIR_SNAPSHOT_WRITER_IMPL_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#include "store_impl.h"
#include "base/failpoint.h"

/* ---- pending.c ----------------------------------------------------------- */

weir__pending *weir__pending_find(weir_store *s, uint64_t id);
/* The pending entry of checkpoint id, created when there is none. */
weir__pending *weir__pending_get(weir_store *s, uint64_t id);
/* Forgets checkpoint id's pending entry (and frees what it holds). */
void weir__pending_drop(weir_store *s, uint64_t id);
/* Records that checkpoint id was committed, aborted or failed. */
void weir__fin_add(weir_store *s, uint64_t id);
/* 0 if checkpoint id may still be written or committed, else an error
 * (message set). */
int weir__check_open_id(weir_store *s, uint64_t id);

/* ---- txn.c --------------------------------------------------------------- */

/* Is checkpoint id committed in txn? 1, 0 or an error (message set). */
int weir__is_committed(weir_store *s, MDB_txn *txn, uint64_t id);
/* weir__is_committed in a read transaction of its own. */
int weir__committed_now(weir_store *s, uint64_t id);
/* Commits txn and makes it durable: an LMDB code. */
int weir__commit_durable(weir_store *s, MDB_txn *txn);
/* Begins a write transaction, then checks the lease: an LMDB code or
 * WEIR_EFENCED (nothing begun). */
int weir__begin_write(weir_store *s, MDB_txn **txn);
/* The WEIR_E* code of a failed write transaction that was writing `want`
 * bytes, with an account of the space left in note. */
int weir__write_err(weir_store *s, int rc, uint64_t want, char *note, size_t len);

/* A failpoint standing for a write: 0, or the errno it simulates (EIO,
 * ENOSPC), as LMDB would return it. */
static inline int weir__simulated(const char *name) {
  int rc = weir_failpoint(name);
  return rc < 0 ? -rc : 0;
}

/* ---- sort.c -------------------------------------------------------------- */

/* Sorts n u64 keys into hash order (weir_store_u64_rank), values alongside. */
void weir__sort_u64(uint64_t *k, uint64_t *v, uint64_t n);

/* ---- chunker.c ----------------------------------------------------------- */

/* Produces the chunks of one subtask in order: u64 state, byte-string
 * state, blob, namespaced u64 state, timers, broadcast state. Byte-string entries (and broadcast
 * ones) are a stream: headers go into the chunk where the entry's data
 * starts, data fills every chunk's remaining room. */
typedef struct weir__chunker {
  const weir_subtask_snapshot *snap;
  const weir__keys_memo *share; /* the holder whose keys it shares, or NULL */
  uint32_t *counts;             /* without share: each u64 chunk's entries */
  uint32_t counts_cap;
  weir__chunk_id id;
  int phase;          /* 0 u64, 1 bytes, 2 blob, 3 ns, 4 timers, 5 broadcast, 6 done */
  uint64_t i;         /* u64, ns, timers: next entry; bytes, broadcast: next entry to head */
  uint64_t d;         /* bytes, broadcast: data bytes emitted; blob: offset */
  uint64_t dend;      /* bytes, broadcast: end of the data of the headed entries */
  uint32_t chunks[6]; /* per phase */
  uint32_t dom[WEIR__MAX_TIMERS_PER_CHUNK]; /* timers: the chunk's domains as stored */
  /* A u64 chunk with keys, or a blob chunk, is only planned by
   * weir__chunker_next (its length known, its bytes not yet written):
   * weir__chunker_write puts it where it goes. It holds the pn entries
   * before i (blob: the pn bytes before d), and had the seq before id's. A
   * values-only chunk is encoded into buf like the others: sizing its
   * varints first would read the values twice. */
  int planned;
  size_t pn, pvlen;
} weir__chunker;

int weir__chunker_next(weir__chunker *c, uint8_t *buf, size_t *len);
void weir__chunker_write(const weir__chunker *c, uint8_t *dst);
uint64_t weir__subtask_bytes(uint64_t id, uint32_t record, const weir_subtask_snapshot *sn,
                             const weir__keys_memo *share, uint8_t *buf);

const weir__keys_memo *weir__keys_share(weir_store *s, const weir_subtask_snapshot *sn);
void weir__memo_keep(weir_store *s, uint64_t id, uint32_t record, weir_subtask_snapshot *sn,
                     uint32_t *counts, uint32_t nchunks);
/* Forgets the holder of an operator subtask's keys. */
void weir__memo_drop(weir_store *s, const char *op, uint32_t subtask);
void weir__memo_committed(weir_store *s, uint64_t id);
/* Forgets every holder (the writer stops). */
void weir__memo_free_all(weir_store *s);

/* ---- retention.c --------------------------------------------------------- */

/* Deletes what was written for a checkpoint that will not be committed. */
void weir__discard(weir_store *s, uint64_t id);
/* After a commit: removes the checkpoints beyond `retain` and the chunks
 * nothing names any more. */
void weir__retention(weir_store *s);
/* weir__collect_orphans: store_impl.h (open runs it too). */

/* ---- commit.c ------------------------------------------------------------ */

/* A checkpoint's commit as it runs: on its own (weir__exec_commit) or with
 * its metadata in the transaction that holds its last writes (writer.c,
 * exec_writes). */
typedef struct weir__ckcommit {
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
} weir__ckcommit;

int weir__commit_check(weir_store *s, weir__ckcommit *c);
int weir__commit_io_fail(weir_store *s, const weir__ckcommit *c, int rc, int with_writes);
int weir__commit_put(weir_store *s, weir__ckcommit *c, MDB_txn *txn);
int weir__commit_owned(weir_store *s, weir__ckcommit *c);
void weir__commit_end(weir_store *s, weir__ckcommit *c, int rc);
/* The commit request r in a write transaction of its own. */
void weir__exec_commit(weir_store *s, weir__req *r);
/* Runs a JOB_BEGIN or RESERVE request: its status. */
int weir__update_job(weir_store *s, weir__req *r);

#endif
