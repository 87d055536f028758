/* weir/sink.h: the sink protocol: two-phase commit tied to checkpoints, for
 * destinations that take part in exactly-once effects (docs/sinks.md §1, docs/checkpoints.md §6).
 *
 * A destination implements weir_sink_dest_vt; weir_sink_twophase() adds it
 * to a job behind a generic driver operator that owns the protocol:
 *
 *   write      records go into the open transaction (begun by the first
 *              record after the previous pre_commit; an epoch without
 *              records has no transaction at all);
 *   pre_commit at barrier n the open transaction is closed as epoch n (the
 *              id of the checkpoint that closes it) and its handle goes into
 *              checkpoint n, with every epoch still pending;
 *   commit     on "n complete", every pending epoch <= n, in epoch order, on
 *              the sink subtask's own thread; a commit must be idempotent,
 *              and is retried until it succeeds or fails permanently;
 *   aborted    "n aborted" is not "roll back n": epoch n stays pending and is
 *              committed with the next completed checkpoint;
 *   recover    on restore from checkpoint r: commit every epoch r's snapshot
 *              holds (they may or may not have been committed before the
 *              crash: hence idempotent), and abort what came after r.
 *
 * A job without a state directory has one epoch, 0, committed at the end of
 * input. The job does not end (and its final checkpoint does not count as
 * heard of) until every queued commit has landed.
 *
 *   (none) --write--> OPEN --barrier n: pre_commit--> PENDING(n)
 *   PENDING(n) --"m complete", m >= n: queued--> COMMITTING --done--> (gone)
 *   PENDING(n) --"n aborted"--> PENDING(n)       (committed with the next)
 *   restore(r): PENDING(<= r) --> COMMITTING;  everything after r: aborted
 *
 * Operation ids (docs/sinks.md §2), for destinations that deduplicate:
 *   content:      <job id>/<sink>/c/<content>        (a job-defined function
 *                 of the output record: the counter job's is <key>.<count>)
 *   write-ahead:  <job id>/<sink>/w/<subtask>/<epoch>/<index>   (the epoch's
 *                 output is buffered in the checkpoint and sent after it
 *                 completed, so (epoch, index) names the same record in
 *                 every replay)
 * Neither contains an attempt number, an owner or a time.
 *
 * Threads: open, write, pre_commit, abort_after and close run on the sink
 * subtask's thread (the worker's); commit runs on a thread of the sink
 * subtask's own, which reports back through the subtask's mailbox
 * (weir_ctx_wake + the driver's poll), so no worker loop waits on I/O. The
 * one exception is pre_commit, which makes the epoch durable (an fsync)
 * before the checkpoint can complete, unless the destination makes it
 * durable on a thread of its own and answers later (WEIR_SINK_LATER,
 * `prepared`).
 */
#ifndef WEIR_SINK_H
#define WEIR_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "weir/job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters kept apart per sink subtask (docs/sinks.md §6): commit attempts of
 * transactions, requests sent to the destination, responses received,
 * duplicates the destination reported (replays), rejections (refusals),
 * transactions committed, aborted (by recovery) and recovered (committed
 * at a restore). In the job summary under these names, and, as totals over
 * every run of the job, in the sink's checkpointed state (weir inspect). */
typedef enum weir_sink_counter {
  WEIR_SINK_ATTEMPTS,
  WEIR_SINK_REQUESTS,
  WEIR_SINK_RESPONSES,
  WEIR_SINK_DUPLICATES,
  WEIR_SINK_REJECTIONS,
  WEIR_SINK_COMMITS,
  WEIR_SINK_ABORTS,
  WEIR_SINK_RECOVERED,
  WEIR_SINK_NCOUNTERS
} weir_sink_counter;

/* "attempts", "requests", ...: indexed by weir_sink_counter. */
extern const char *const weir_sink_counter_names[WEIR_SINK_NCOUNTERS];

/* A growable byte buffer (a transaction's handle). */
typedef struct weir_sink_buf {
  uint8_t *data;
  size_t len, cap;
} weir_sink_buf;
/* Appends n bytes; cannot fail (out of memory aborts). */
void weir_sink_buf_put(weir_sink_buf *b, const void *p, size_t n);
void weir_sink_buf_u32(weir_sink_buf *b, uint32_t v); /* little-endian */
void weir_sink_buf_u64(weir_sink_buf *b, uint64_t v); /* little-endian */
void weir_sink_buf_free(weir_sink_buf *b);

typedef struct weir_sink_io weir_sink_io;

/* One pre-committed transaction, as commit sees it. */
typedef struct weir_sink_commit {
  uint64_t epoch;
  const uint8_t *handle; /* what pre_commit wrote; read-only */
  size_t len;
  uint64_t precommit_ms; /* wall clock when it was pre-committed */
  int recovered;         /* restored from a checkpoint: may have been applied before */
  /* The oldest epoch of the subtask still pending when this one was
   * pre-committed (this epoch itself if none was older); 0 when not known
   * (recovered). No checkpoint from this epoch on lists an older epoch as
   * pending, so once this epoch is committed, what the destination keeps to
   * answer "was epoch e applied?" is needed only for e >= oldest_pending
   * (restoring a checkpoint before this epoch is a rewind). */
  uint64_t oldest_pending;
  uint64_t progress;  /* the destination's: operations done in this process (0 at first) */
  const char *job_id; /* weir_ctx_job_id */
  const char *sink;   /* the sink's name */
  uint32_t subtask;
  /* The subtask that pre-committed it: the same as subtask, unless the job
   * was restored with another parallelism and this subtask took over the
   * pending epochs of a subtask that is gone. What the epoch wrote, and
   * the ids of its operations, are named after its origin. */
  uint32_t origin;
  weir_sink_io *io;
  char *err; /* a permanent error's message (errlen bytes) */
  size_t errlen;
} weir_sink_commit;

/* For commit (sink thread): adds n to a counter. */
void weir_sink_io_count(weir_sink_io *io, weir_sink_counter k, uint64_t n);
/* For commit: nonzero once the subtask is closing (the job ends or failed):
 * give up with WEIR_ECANCELED. */
int weir_sink_io_stopping(weir_sink_io *io);
/* For commit: waits ms milliseconds, or less if the subtask closes; returns
 * weir_sink_io_stopping(). The only way a commit should wait. */
int weir_sink_io_sleep(weir_sink_io *io, uint32_t ms);

typedef struct weir_sink_dest_vt {
  size_t size; /* sizeof(weir_sink_dest_vt), as for weir_operator_vt */
  const char *name;
  /* Sets *dest (per subtask). When restoring (weir_ctx_restoring), keeps
   * what is in the destination; otherwise a fresh start: may discard what a
   * previous run of this sink subtask left (nothing committed by an
   * unfinished run survives a start from the beginning). */
  int (*open)(weir_ctx *ctx, void **dest);
  /* Adds r to the open transaction, beginning one if none is open. */
  int (*write)(weir_ctx *ctx, void *dest, const weir_record *r);
  /* Closes the open transaction as `epoch`, makes it durable and appends
   * its handle to h. Returns 0, 1 if no transaction is open (nothing to
   * commit), or a negative error. With checkpoints, a destination that
   * cannot make it durable now, but may at the next barrier, returns
   * weir_ctx_decline(ctx, "why") instead: the checkpoint is declined, not
   * the job failed (within the tolerable checkpoint failures), no epoch is
   * pending, and the destination keeps the transaction's records for the
   * next epoch's transaction. With checkpoints and `prepared`, it may
   * also return WEIR_SINK_LATER after appending the handle: the
   * transaction becomes durable later, on a thread of the destination's
   * own, which then calls weir_ctx_wake; the checkpoint waits for that
   * (WEIR_SNAPSHOT_LATER), the worker does not. */
  int (*pre_commit)(weir_ctx *ctx, void *dest, uint64_t epoch, weir_sink_buf *h);
  /* Restore from checkpoint `id`: aborts what came after it (and an open
   * transaction left by the crash). Returns the number of transactions
   * aborted, or a negative error. NULL: nothing to abort. */
  int (*abort_after)(weir_ctx *ctx, void *dest, uint64_t id);
  /* On the sink thread: commits c. Idempotent: committing a committed
   * transaction succeeds. Returns 0, WEIR_EAGAIN to be called again after a
   * backoff (c->progress kept), WEIR_ECANCELED when told to stop, or a
   * permanent error with a message in c->err (the job fails with it). */
  int (*commit)(void *dest, weir_sink_commit *c);
  /* Frees dest (after the sink thread stopped). */
  void (*close)(weir_ctx *ctx, void *dest);
  /* Optional: writes the destination's identity for its arg (as given to
   * weir_sink_twophase) into buf (cap bytes, NUL-terminated): what, when it
   * changes, makes it another destination (weir_destination.id: absolute
   * paths, no credentials). A checkpoint records it, and a restore into
   * another destination is refused unless allowed (docs/checkpoints.md §8).
   * Called on the thread that runs the job, before it runs. Returns 0 or a
   * negative error. NULL: no identity, never checked. */
  int (*identity)(const void *arg, char *buf, size_t cap);
  /* Optional: lets a restore move the sink to another destination
   * (--allow-sink-change). Called after open, when the checkpoint being
   * restored recorded the destination `old` (its identity) and the job
   * writes elsewhere now: what recovery does next (abort_after, and the
   * commits of the recovered epochs, weir_sink_commit.recovered) concerns
   * `old`, where those epochs were pre-committed; new epochs go to the
   * destination of the arg. Returns 0 or a negative error. NULL: the
   * destination cannot move, and such a restore is refused at start. */
  int (*move)(weir_ctx *ctx, void *dest, const char *old);
  /* One sentence for the user: with move, what becomes of the pending
   * epochs of the old destination; without, why it cannot move. NULL: a
   * generic one. */
  const char *move_note;
  /* Optional: the bound, in bytes, on the handles of the epochs a sink
   * subtask holds pre-committed and not yet known committed (for a
   * write-ahead destination, its records), for arg. Past it the sink
   * takes no more input (WEIR_POLL_FULL) until commits bring it below:
   * a slow destination slows the sources instead of growing memory. 0 or
   * NULL: WEIR_SINK_BUFFER_DEFAULT. */
  uint64_t (*buffer_bytes)(const void *arg);
  /* Optional, with pre_commit returning WEIR_SINK_LATER: on the task
   * thread, the answer for the transaction pre_commit left to become
   * durable (one at a time: the driver takes it before the next
   * pre_commit). With wait, waits for it. Returns 0 (no answer yet), 1
   * (durable), 2 (it could not be: the checkpoint is declined with the
   * message written into why, whylen bytes, and the destination keeps its
   * records for the next epoch's transaction), or a negative error (the
   * job fails). */
  int (*prepared)(weir_ctx *ctx, void *dest, int wait, char *why, size_t whylen);
  /* Optional: at the true end of input (not at a stop), on the task
   * thread, before the last transaction is pre-committed: may add to the
   * open transaction what tells readers that nothing follows (a stage
   * edge's end markers). Returns 0 or a negative error. */
  int (*finish)(weir_ctx *ctx, void *dest);
} weir_sink_dest_vt;

#define WEIR_SINK_BUFFER_DEFAULT (64ull << 20)

/* What pre_commit returns when the transaction becomes durable later
 * (weir_sink_dest_vt.prepared). */
enum { WEIR_SINK_LATER = 2 };

/* Adds a two-phase-commit sink for destination vt to stream s; `arg` is the
 * destination's (weir_sink_dest_arg), borrowed: it must outlive the job.
 * Returns 0 or the job's build error. */
int weir_sink_twophase(weir_stream *s, const char *name, const weir_sink_dest_vt *vt, void *arg,
                       int parallelism);
/* In a destination's callbacks: its `arg`. */
void *weir_sink_dest_arg(const weir_ctx *ctx);

/* The checkpointed state of a two-phase sink subtask, as `weir inspect`
 * shows it: counter totals over every run, and the pending epochs. */
typedef struct weir_sink_state_info {
  uint64_t checkpoint; /* the checkpoint it was written for */
  uint64_t counters[WEIR_SINK_NCOUNTERS];
  uint32_t npending;
  uint64_t pending_epochs[16]; /* the first 16 */
  uint64_t pending_bytes;      /* handles, in total */
} weir_sink_state_info;
/* Decodes a two-phase sink's state. Returns 0, or WEIR_ENOENT if the
 * bytes are not a two-phase sink's, or WEIR_ECORRUPT. */
int weir_sink_state_decode(const void *p, size_t len, weir_sink_state_info *out);

#ifdef __cplusplus
}
#endif
#endif
