/* weir/job.h: the job API — records, operator contexts, the graph builder and
 * the runtime entry point.
 *
 * A job is a graph of sources, operators and sinks built with the verbs below
 * (weir_source, weir_key_by, weir_process, weir_sink, ...). Building records
 * the first error in the job and turns later calls into no-ops that return
 * NULL (or the recorded error), so a chain of builder calls needs one check at
 * the end: weir_sink() and weir_job_run() return it.
 *
 * At run time each operator runs as `parallelism` subtasks. An operator sees
 * the world only through its weir_ctx: its input records, its emitter, its
 * keyed state, its subtask index. It never sees a thread, a loop or a channel.
 * All callbacks of one subtask run on one thread, one at a time.
 *
 * Ownership: weir_job owns every stream, node and context; streams are valid
 * until weir_job_destroy(). Arguments passed as `void *arg` are borrowed and
 * must outlive the job, unless handed over with weir_job_adopt().
 */
#ifndef WEIR_JOB_H
#define WEIR_JOB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a job .so built against an older header would misbehave.
 * A job .so exports it with WEIR_JOB_EXPORT (below); the loader accepts
 * WEIR_ABI_MIN_VERSION to WEIR_ABI_VERSION. From version 3 on, every
 * callback table (weir_operator_vt, weir_source_vt, weir_sink_dest_vt)
 * begins with its own size, so that a later weir can add callbacks at the
 * end of a table and still run a job built against this header: callbacks
 * past a table's size are taken as NULL. */
#define WEIR_ABI_VERSION 3u
#define WEIR_ABI_MIN_VERSION 3u

/* Default number of key groups: the largest parallelism a keyed operator can
 * ever be rescaled to. Keys map to key groups, key groups to subtasks. */
#define WEIR_DEFAULT_MAX_PARALLELISM 128

typedef struct weir_job weir_job;
typedef struct weir_stream weir_stream;
typedef struct weir_ctx weir_ctx;

/* ------------------------------------------------------------------------ */
/* Records and batches                                                      */

/* A record as an operator sees it. Read-only; `payload` is valid only during
 * the callback that received it. `id` identifies the record's lineage:
 * sources assign it from (source, split, offset) and every emission derives
 * its id deterministically from its parent's id. */
typedef struct weir_record {
  uint64_t key;        /* partitioning and keyed-state key */
  int64_t ts;          /* event timestamp (user-defined unit), 0 if none */
  uint64_t id;         /* lineage id */
  const void *payload; /* `len` bytes; NULL when len is 0 */
  uint32_t len;
} weir_record;

/* A batch of records in column form, for the batch callbacks. Read-only and
 * valid only during the callback. Record i has key keys[i], timestamp ts[i],
 * id ids[i] and payload data + off[i] of lens[i] bytes. */
typedef struct weir_batch {
  uint32_t len;
  const uint64_t *keys;
  const int64_t *ts;
  const uint64_t *ids;
  const uint32_t *off;
  const uint32_t *lens;
  const uint8_t *data;
} weir_batch;

/* Record i of a batch as a weir_record. */
static inline weir_record weir_batch_record(const weir_batch *b, uint32_t i) {
  weir_record r = {b->keys[i], b->ts[i], b->ids[i], b->lens[i] ? b->data + b->off[i] : NULL,
                   b->lens[i]};
  return r;
}

/* Payload helpers: a u64 value travels as 8 little-endian bytes. */
static inline uint64_t weir_payload_u64(const weir_record *r) {
  const uint8_t *p = (const uint8_t *)r->payload;
  uint64_t v = 0;
  if (r->len < 8) return 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* ------------------------------------------------------------------------ */
/* Operators                                                                */

/* Callbacks of an operator. Every callback is optional except one of
 * `process` / `process_batch` (for operators with inputs). All return 0 or a
 * negative error (poll: see below); an error stops the job with the
 * operator's name and the message given to weir_ctx_fail(), if any.
 *
 * What callbacks return: 0 (or the values a callback documents, poll's
 * and a source's run's) or a negative WEIR_E* code, which is one of weir's
 * own (weir/error.h) or -errno from the system (-EACCES), except -1. Any
 * other value fails the job with WEIR_EOPERATOR and a message that names
 * the operator, the callback and the value ("operator 'x' subtask 0
 * (process): returned 1, not 0 or a negative WEIR_E* error code"): a
 * positive value the callback does not document, a negative value below
 * the errno range (-4095) that weir does not define, and -1. A bare -1 is
 * C's habit for "failed", not a deliberate -EPERM (which would read
 * "Operation not permitted" and hide the mistake); an operator that fails
 * returns weir_ctx_fail(ctx, WEIR_EOPERATOR, "why"), or the error it got
 * from a weir call.
 *
 *   open      once per subtask before any record; set per-subtask data with
 *             weir_ctx_set_user(). May not emit (nor may restore): both run
 *             again at every restore; an emission there fails the job
 *             (WEIR_ESTATE).
 *   process   one record. Emit with weir_emit*(): the records take the
 *             input's timestamp (weir_emit_at: another) and ids derived
 *             from its id, stable on replay.
 *   process_batch  a whole batch (preferred when both are set): lets keyed
 *             operators prefetch state across the batch. An operator that
 *             needs more than about a millisecond for a batch gets the
 *             batches of its input in consecutive parts, so that the
 *             other tasks of its worker (and checkpoint barriers) do not
 *             wait for a whole batch (unless its time does not shrink
 *             with the records: a cost per call is left whole).
 *   finish    end of all input: emit what is left (e.g. final aggregates).
 *             Its records get timestamp WEIR_WATERMARK_MAX (after the end
 *             of event time; weir_emit_at sets another) and ids of a
 *             lineage of their own per subtask, stable on replay at the
 *             same parallelism. A stop (weir_job_stop) calls it too,
 *             with the event-time clock where it was.
 *   close     release per-subtask resources; called once after open
 *             succeeded, whether the job succeeded or not. Cannot fail.
 *   snapshot / restore / checkpoint_complete / checkpoint_aborted: driven by
 *             checkpoints, for operators with state outside managed state.
 *   poll      the operator's mailbox, for operators that hand work to a
 *             thread of their own (a sink whose client library blocks): runs
 *             on the subtask's thread at every step of its task, and soon
 *             after weir_ctx_wake(). Returns WEIR_POLL_IDLE when nothing is
 *             in flight, WEIR_POLL_BUSY while effects are (the task then does
 *             not finish, and the final checkpoint does not count as heard
 *             of, until a later poll says idle), WEIR_POLL_FULL while they
 *             are and the operator takes no more input (below), or a
 *             negative error.
 *             Records it emits get the subtask's clock + 1 as timestamp
 *             (0 without event time) and ids unique within the run but
 *             not stable across a replay: a sink downstream needs
 *             write-ahead ids for them (docs/sinks.md).
 */
typedef struct weir_snapshot_writer weir_snapshot_writer;
typedef struct weir_snapshot_reader weir_snapshot_reader;

/* Inside a snapshot callback: appends bytes to the operator's own state for
 * this checkpoint (copied), or records a source position (the next offset
 * to read in `split`). Returns 0 or WEIR_EINVAL (a split recorded twice). */
int weir_snapshot_write(weir_snapshot_writer *w, const void *data, size_t len);
int weir_snapshot_position(weir_snapshot_writer *w, uint32_t split, uint64_t offset);
/* Inside a restore callback: the bytes written at snapshot time (valid
 * during the callback), and the position of a split: returns 1 and sets
 * *offset if the checkpoint has one, else 0. */
const void *weir_snapshot_data(weir_snapshot_reader *r, size_t *len);
int weir_snapshot_get_position(weir_snapshot_reader *r, uint32_t split, uint64_t *offset);

/* ------------------------------------------------------------------------ */
/* Timers (docs/event-time.md §5)                                           */

typedef enum weir_time_domain {
  WEIR_EVENT_TIME = 0,     /* fires once the subtask's event-time clock reaches ts */
  WEIR_PROCESSING_TIME = 1 /* fires once the wall clock (ms, weir_ctx_processing_time) does */
} weir_time_domain;

/* A timer that fired: its key (the current key during on_timer), its
 * timestamp and its domain. */
typedef struct weir_timer {
  uint64_t key;
  int64_t ts;
  weir_time_domain domain;
} weir_timer;

/* Timers of one timestamp and domain that fired together (on_timers). */
typedef struct weir_timer_batch {
  uint32_t len;
  int64_t ts;
  weir_time_domain domain;
  const uint64_t *keys;
} weir_timer_batch;

/* An operator's callbacks. `size` must be sizeof(weir_operator_vt), as in
 *   static const weir_operator_vt my_vt = {
 *       .size = sizeof(weir_operator_vt), .name = "my", .process = my_process};
 * adding an operator whose table has no size is a build error (WEIR_EABI). */
/* Where an operator's effects go outside the job (a sink's destination),
 * for the checks that keep a state directory to one job and one destination
 * (docs/checkpoints.md §8). */
typedef struct weir_destination {
  /* Its identity: what, when it changes, means another destination:
   * "file:/abs/dir", "postgresql://host:port/db table t",
   * "nats://host:port subject s", "http://host:port/path". Absolute
   * paths; never credentials. "" = none (not checked). */
  char id[1024];
  /* Nonzero if a restore may move the operator to another destination
   * (--allow-sink-change): it then recovers the checkpoint's pending
   * effects where they were prepared (weir_ctx_moved_from). */
  int movable;
  /* One sentence for the user: with movable, what happens to the pending
   * effects of the old destination; without, why it cannot move. */
  char note[512];
} weir_destination;

typedef struct weir_operator_vt {
  size_t size;
  const char *name;
  int (*open)(weir_ctx *ctx);
  int (*process)(weir_ctx *ctx, const weir_record *r);
  int (*process_batch)(weir_ctx *ctx, const weir_batch *b);
  int (*finish)(weir_ctx *ctx);
  void (*close)(weir_ctx *ctx);
  int (*snapshot)(weir_ctx *ctx, uint64_t checkpoint_id, weir_snapshot_writer *w);
  int (*restore)(weir_ctx *ctx, weir_snapshot_reader *r);
  int (*checkpoint_complete)(weir_ctx *ctx, uint64_t checkpoint_id);
  int (*checkpoint_aborted)(weir_ctx *ctx, uint64_t checkpoint_id);
  int (*poll)(weir_ctx *ctx);
  /* Nonzero if the operator's own state (what snapshot writes) is a record
   * that can be appended to another one of its kind: a checkpoint can then
   * be restored with another parallelism, new subtask k (mod P) being
   * handed the states of old subtasks k, k + P, ... one after the other
   * (k's own first). Any other operator state is not rescalable. */
  int rescalable;
  /* A timer of this operator fired (weir_timer_register): on the subtask's
   * thread, between input batches, never during another callback. The
   * timer's key is current (state calls act on it, weir_timer_register
   * registers for it). Records it emits get the timer's timestamp (event
   * time; weir_emit_at: another) and ids derived from (operator, key,
   * timestamp, emission index): stable on replay and across a rescale.
   * A processing-time timer's records get the timestamp poll's get and
   * ids unique within the run, not stable across a replay. Event-time
   * timers fire as the clock passes their timestamp, before the watermark
   * goes on downstream; at the true end of input every event-time timer
   * fires, then every processing-time timer, then finish. A stop fires
   * none: pending timers stay in the last checkpoint. */
  int (*on_timer)(weir_ctx *ctx, const weir_timer *t);
  /* Preferred when set: up to 1024 timers of one timestamp at once, so
   * that the operator can prefetch their state. No key is current until
   * weir_state_select(ctx, tb->keys[i]), which also starts key i's
   * emission ids; its timers are already out of the timer set. */
  int (*on_timers)(weir_ctx *ctx, const weir_timer_batch *tb);
  /* Optional, for an operator with effects outside the job (a sink): fills
   * *d (zeroed) with its destination. Called with the operator's arg on the
   * thread that runs the job, before it runs. Returns 0 or a negative error
   * (the run fails with it). */
  int (*destination)(const void *arg, weir_destination *d);
  /* Two-input operators (weir_connect): the records of the second input,
   * as process / process_batch take the first's (one of the two is
   * required). Same thread, same key rules: with both inputs keyed, the
   * record's key is current and its state is shared with the first's.
   * With a broadcast second input, no key is current: these write
   * broadcast state (weir_broadcast_*), not keyed state or timers. */
  int (*process2)(weir_ctx *ctx, const weir_record *r);
  int (*process_batch2)(weir_ctx *ctx, const weir_batch *b);
} weir_operator_vt;

/* What a snapshot callback returns besides 0 (or a negative error): its
 * state is written, but the checkpoint may not complete before the
 * operator acknowledges it with weir_ctx_snapshot_ack (below), from its
 * poll (an operator without one fails the job). A value no callback
 * returns by habit: a bare 1 still fails the job as undocumented. */
enum { WEIR_SNAPSHOT_LATER = 0x1a7e };

/* What poll returns (or a negative error). WEIR_POLL_FULL: effects are in
 * flight and the operator takes no more input for now (its bound on what
 * it holds unacknowledged is reached): the task reads no input, as when
 * its outputs are full, so that backpressure reaches the sources; it
 * calls poll again at every wake-up (weir_ctx_wake) and reads on once a
 * poll says otherwise. Under aligned checkpoints a barrier then waits in
 * the channel behind the records; unaligned ones overtake them. */
enum { WEIR_POLL_IDLE = 0, WEIR_POLL_BUSY = 1, WEIR_POLL_FULL = 2 };

/* What a source's run() returns (or a negative error; any other value
 * fails the job, as for an operator's callbacks above). */
enum {
  WEIR_SOURCE_MORE = 0, /* more to come now: call run() again */
  WEIR_SOURCE_DONE = 1, /* end of input for this subtask */
  WEIR_SOURCE_IDLE = 2  /* nothing now: call again after weir_ctx_wake_after() */
};
/* A source that returns WEIR_SOURCE_IDLE without calling
 * weir_ctx_wake_after is run again after this many microseconds, and a
 * warning naming it is logged once: otherwise nothing might ever run it
 * again (the job would hang silently). 1 ms is the engine's own scale (a
 * step of a task, the default buffer timeout), so a forgotten wake-up adds
 * no more delay than buffering may, while a run() that finds nothing costs
 * microseconds: well under 1% of a core per idle subtask. A source fed by
 * a thread of its own may return IDLE and be woken by weir_ctx_wake from
 * that thread; it is then also run at this default until it asks for a
 * longer fallback with weir_ctx_wake_after. */
#define WEIR_SOURCE_IDLE_DEFAULT_US 1000

/* Callbacks of a source. `run` emits up to `budget` records with
 * weir_emit_record() (more is allowed but delays other tasks) and returns
 * one of WEIR_SOURCE_*. A source is asked to stop (weir_ctx_stopping()) when
 * the job is stopped; it should then return WEIR_SOURCE_DONE. */
typedef struct weir_source_vt {
  size_t size; /* sizeof(weir_source_vt), as for weir_operator_vt */
  const char *name;
  int (*open)(weir_ctx *ctx);
  int (*run)(weir_ctx *ctx, uint32_t budget);
  void (*close)(weir_ctx *ctx);
  int (*snapshot)(weir_ctx *ctx, uint64_t checkpoint_id, weir_snapshot_writer *w);
  int (*restore)(weir_ctx *ctx, weir_snapshot_reader *r);
  /* Nonzero if the source's splits do not depend on its parallelism (a
   * split's position means the same whichever subtask owns it): its
   * checkpoints can then be restored with another parallelism, each
   * subtask's restore being offered every split's position and taking the
   * ones it owns. Sources with any other state are not rescalable. */
  int rescalable;
  /* Optional: checkpoint `checkpoint_id` completed (every subtask's state
   * in it is durable, so no restore of the latest checkpoint reads before
   * the positions it holds). On the subtask's thread, between run()
   * calls; also for the final checkpoint after run() returned DONE. A
   * source reading a log it owns may let go of what lies before those
   * positions. Returns 0 or a negative error (the job fails). */
  int (*checkpoint_complete)(weir_ctx *ctx, uint64_t checkpoint_id);
} weir_source_vt;

/* ------------------------------------------------------------------------ */
/* Event time (docs/event-time.md)                                          */

/* A record's event time is its `ts` (by convention milliseconds since the
 * epoch; the engine assumes no unit). A watermark W on a stream says that
 * no record with ts <= W follows; a record that does is late. */
#define WEIR_WATERMARK_MIN INT64_MIN /* no watermark yet */
#define WEIR_WATERMARK_MAX INT64_MAX /* the true end of input: no record follows */

/* How a source makes watermarks from the timestamps it emits (bounded
 * out-of-orderness, as Flink's forBoundedOutOfOrderness + withIdleness). */
typedef struct weir_watermark_strategy {
  size_t size;              /* sizeof(weir_watermark_strategy) */
  int64_t out_of_orderness; /* D >= 0: a split's watermark is the largest ts it emitted - D - 1 */
  uint32_t interval_ms;     /* a new watermark at most this often; 0 = 200 */
  /* A split that emits nothing for this long is idle: it stops holding
   * event time back until it emits again. 0 = never idle. */
  uint32_t idle_timeout_ms;
} weir_watermark_strategy;

/* Gives the source whose stream `s` is (as weir_source returned it) a
 * watermark strategy (copied). Returns s, or NULL with the job's build
 * error (WEIR_EPLAN) if s is not a source's stream, already has one, or D
 * is negative. A source without a strategy sends no watermarks: event time
 * downstream of it stays at WEIR_WATERMARK_MIN. Not in a job with an
 * iteration (event time is not defined inside a loop). */
weir_stream *weir_with_watermarks(weir_stream *s, const weir_watermark_strategy *ws);

/* ------------------------------------------------------------------------ */
/* The operator context (valid only inside callbacks, on the subtask's thread) */

uint32_t weir_ctx_subtask(const weir_ctx *ctx);
uint32_t weir_ctx_parallelism(const weir_ctx *ctx);
const char *weir_ctx_name(const weir_ctx *ctx);
/* The `arg` given when the operator was added to the graph (shared by all
 * subtasks: treat as read-only). */
void *weir_ctx_arg(const weir_ctx *ctx);
/* Per-subtask data, NULL until set (typically in open; freed by close). */
void *weir_ctx_user(const weir_ctx *ctx);
void weir_ctx_set_user(weir_ctx *ctx, void *user);
/* The job's maximum record size in bytes (payload). */
uint32_t weir_ctx_max_record(const weir_ctx *ctx);
/* The subtask, of `parallelism`, that weir_key_by sends `key` to under
 * this job's key groups (weir_run_opts.max_parallelism): for an operator
 * that routes records itself as a keyed edge would (a stage edge). */
uint32_t weir_ctx_key_owner(const weir_ctx *ctx, uint64_t key, uint32_t parallelism);
/* Nonzero if the job takes checkpoints (it has a state directory): a sink
 * can then tie what it makes visible to checkpoint completion. */
int weir_ctx_checkpointing(const weir_ctx *ctx);
/* In open: nonzero if this subtask's state is being restored from a
 * checkpoint (its restore callback runs right after open). A subtask that
 * a rescale added, or one that stored nothing, has no state to restore
 * while the job still restores: see weir_ctx_restored_checkpoint. */
int weir_ctx_restoring(const weir_ctx *ctx);
/* In open, restore and afterwards: the version of the operator's state
 * that this subtask restored, as the job that wrote it declared it with
 * weir_operator_state_version (0: none declared, or nothing restored).
 * An operator whose state layout changed reads the old layout by it;
 * weir itself never converts state. */
uint32_t weir_ctx_state_version(const weir_ctx *ctx);
/* The id of the checkpoint this run restores, for every subtask of the
 * job (0: a start from the beginning). A destination decides with it, not
 * with weir_ctx_restoring, whether earlier output may be discarded. */
uint64_t weir_ctx_restored_checkpoint(const weir_ctx *ctx);
/* For every subtask of a job that restores a checkpoint older than the
 * latest one it had completed in its state directory (--restore ID, or a
 * savepoint the job had moved past there): that latest checkpoint's id;
 * else 0. A destination whose operation ids are formed from epochs
 * (write-ahead ids) refuses such a rewind: the epochs after the restored
 * checkpoint were applied already and would be applied again under new
 * epoch numbers. (A rewind past checkpoints taken in another state
 * directory cannot be seen here.) */
uint64_t weir_ctx_rewound_from(const weir_ctx *ctx);
/* In open and restore: the destination id (weir_destination.id) that the
 * restored checkpoint recorded for this operator, if this run moves it to
 * another one (allow_sink_change, which only a movable destination
 * accepts): recovery of the checkpoint's pending effects belongs there.
 * NULL otherwise. Valid until the job is destroyed. */
const char *weir_ctx_moved_from(const weir_ctx *ctx);
/* Nonzero once the job has been asked to stop; sources should end. */
int weir_ctx_stopping(const weir_ctx *ctx);
/* In finish: nonzero if the subtask's input ends by a stop (the job goes
 * on from its last checkpoint later), 0 at the true end of its input. A
 * sink that tells a reader "no more records" does so only at the latter. */
int weir_ctx_input_stopped(const weir_ctx *ctx);
/* Sources: when run() returns WEIR_SOURCE_IDLE, call run() again after `us`
 * microseconds (or sooner, after weir_ctx_wake). Holds for the run() call
 * that makes it; without it, WEIR_SOURCE_IDLE_DEFAULT_US. */
void weir_ctx_wake_after(weir_ctx *ctx, uint64_t us);
/* The subtask's event-time clock: the largest watermark that every input
 * has passed (the minimum over its inputs that are not idle; a source's
 * own watermark); WEIR_WATERMARK_MIN before the first, WEIR_WATERMARK_MAX
 * after the true end of every input (not at a stop: a stopped job resumes
 * its event time after a restore). Records that come after it with ts <=
 * it are late. It only moves forward, between input batches. */
int64_t weir_ctx_watermark(const weir_ctx *ctx);
/* In process (record by record), on_timer, or process_batch after
 * weir_state_select (there: the record's own id and timestamp, so that it
 * emits as process would): the emissions that follow,
 * until the callback returns or the next call, derive their ids from
 * parent_id (each with its own emission index) and default to timestamp
 * ts, as if the record at hand had that id and timestamp. An operator that
 * emits for a combination of records (a join's pair) names it so, and the
 * ids do not depend on which record came first (stable across replays). */
void weir_ctx_select_parent(weir_ctx *ctx, uint64_t parent_id, int64_t ts);
/* A timer of the current key (process's record's; after
 * weir_state_select; on_timer's) at ts in domain d. One timer per (key,
 * ts, domain): registering it again is a no-op. A timer at or below the
 * clock already fires after the current callback. Returns 0,
 * WEIR_ENOTKEYED (the operator's input is not keyed), WEIR_EINVAL (d not
 * a domain, ts WEIR_WATERMARK_MIN) or WEIR_ESTATE (no current key, or the
 * operator did not declare timers of domain d: weir_process_opts), with a
 * message (weir_ctx_fail). Timers are keyed state: checkpointed with the
 * rest, restored, moved with their key on a rescale. */
int weir_timer_register(weir_ctx *ctx, weir_time_domain d, int64_t ts);
/* Removes the current key's timer at (ts, d); 0 whether or not it
 * existed, or the errors of weir_timer_register. */
int weir_timer_delete(weir_ctx *ctx, weir_time_domain d, int64_t ts);
/* Hints that key's timer at (ts, d) will be registered soon: an operator
 * that registers many (one per key and window) prefetches some 8 ahead.
 * Nothing happens for a domain the operator did not declare. */
void weir_timer_prefetch(weir_ctx *ctx, weir_time_domain d, uint64_t key, int64_t ts);
/* The wall clock in milliseconds since the epoch: what processing-time
 * timers compare with. */
int64_t weir_ctx_processing_time(const weir_ctx *ctx);
/* Sources with a watermark strategy reading several splits (files,
 * partitions): the records emitted from now on come from `split` (0 until
 * the first call). Each split keeps its own largest timestamp, and the
 * subtask's watermark is the minimum over the splits that are neither idle
 * nor ended, so a split that lags holds event time back. A split begins
 * when first named. No-op for a source without a strategy. */
void weir_source_split(weir_ctx *ctx, uint32_t split);
/* The split will emit no more (its data is exhausted). */
void weir_source_split_end(weir_ctx *ctx, uint32_t split);
/* Ownership, for sinks that fence their effects (docs/leases.md §4): the lease
 * epoch of this run (0 without a state directory); constant during a run. */
uint64_t weir_ctx_epoch(const weir_ctx *ctx);
/* 0 if this run still owns its state directory, with a margin before its
 * lease could expire; WEIR_EFENCED if not: nothing more may be made visible.
 * Call it right before an effect. Cheap (a clock read and two stat calls),
 * thread-safe, never blocks on another process; 0 without a state dir. */
int weir_ctx_owner_check(weir_ctx *ctx);
/* The one call that any thread may make on a context (while the job runs):
 * asks for the subtask's task to run soon, which calls the operator's poll
 * (a source's run) on the subtask's thread. Coalesces, like
 * uv_async_send. Never blocks. */
void weir_ctx_wake(weir_ctx *ctx);
/* The job's id: the UUID of its state directory (docs/architecture.md §5), or, for a
 * job without one, a random UUID made for this run. Valid until the job is
 * destroyed; "" before weir_job_run. Part of every operation id. */
const char *weir_ctx_job_id(const weir_ctx *ctx);

/* Records a failure message (printf-style) for this operator and returns
 * `err`, so `return weir_ctx_fail(ctx, WEIR_EBADREC, "line %d", n);` works.
 * The first failure of a job is what weir_job_error() reports. */
int weir_ctx_fail(weir_ctx *ctx, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* In a snapshot callback: declines checkpoint `checkpoint_id` instead of
 * failing the job, with a message (printf-style) saying why; returns
 * WEIR_ECKPT, which the callback returns. The operator's state is not
 * written; the checkpoint fails as a failed state write does (the store's
 * other writes for it are dropped, checkpoint_aborted follows, the restore
 * point stays the last completed checkpoint) and counts against
 * weir_run_opts.tolerable_checkpoint_failures: within them the job goes
 * on, beyond them it fails with WEIR_ECKPTLIMIT. For a condition the next
 * checkpoint may not meet (a destination out of a resource another client
 * holds); an operator that declines must be able to take the next
 * checkpoint from where it is (what it did not make durable, it keeps).
 * Anywhere else, and without checkpoints, WEIR_ECKPT fails the job with
 * the message, as weir_ctx_fail does. */
int weir_ctx_decline(weir_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After a snapshot callback returned WEIR_SNAPSHOT_LATER for checkpoint_id:
 * acknowledges that snapshot (why NULL: what it stands for is durable now)
 * or declines it (why: the message, as for weir_ctx_decline). On the
 * subtask's thread (typically in poll, woken by weir_ctx_wake from the
 * operator's own thread), once per such snapshot. Until then the
 * checkpoint cannot complete (the checkpoint timeout applies) and the task
 * goes on; an acknowledgement of a checkpoint that is no longer pending
 * (timed out) is dropped. An operator that acknowledges later keeps poll
 * busy (WEIR_POLL_BUSY) meanwhile, so that its task does not finish first,
 * and must not let a later snapshot depend on an unanswered one. Returns
 * 0. */
int weir_ctx_snapshot_ack(weir_ctx *ctx, uint64_t checkpoint_id, const char *why);

/* Adds `n` to a named per-subtask counter reported in the job summary (e.g.
 * "bad_records"). `name` must be a string literal or outlive the job. */
void weir_ctx_count(weir_ctx *ctx, const char *name, uint64_t n);

/* ------------------------------------------------------------------------ */
/* Emitting records                                                         */

/* Emits a record derived from the record being processed: its timestamp is
 * the input's, its id derived from the input's id. Returns 0 or WEIR_ETOOBIG
 * (payload over the maximum record size). The payload is copied. */
int weir_emit(weir_ctx *ctx, uint64_t key, const void *payload, size_t len);
/* weir_emit() with timestamp ts instead of the input's (event time: a
 * record at or behind the clock downstream is late there). */
int weir_emit_at(weir_ctx *ctx, uint64_t key, int64_t ts, const void *payload, size_t len);
/* As weir_emit_at, to the side output `tag` the operator declared
 * (weir_op_opts.tags); ts WEIR_TS_DEFAULT: the timestamp weir_emit would
 * give. Its id comes from the same sequence as the main emissions'.
 * WEIR_EINVAL, with a message naming the tag and the declared ones, for a
 * tag the operator did not declare. */
#define WEIR_TS_DEFAULT INT64_MIN
int weir_emit_side(weir_ctx *ctx, const char *tag, uint64_t key, int64_t ts, const void *payload,
                   size_t len);
/* weir_emit() with an 8-byte little-endian u64 payload. */
int weir_emit_u64(weir_ctx *ctx, uint64_t key, uint64_t value);
/* From process_batch: emit derived from record i of batch b. */
int weir_emit_from(weir_ctx *ctx, const weir_batch *b, uint32_t i, uint64_t key,
                   const void *payload, size_t len);
int weir_emit_u64_from(weir_ctx *ctx, const weir_batch *b, uint32_t i, uint64_t key,
                       uint64_t value);
/* From process_batch: weir_emit_u64_from(ctx, b, first + k, keys[k],
 * values[k]) for k = 0 .. n-1, in order, in one call (the per-record call
 * is a noticeable part of a cheap operator's cost). Returns 0, WEIR_EINVAL
 * if [first, first + n) is not within b, or the first emission's error
 * (the records before it were emitted). */
int weir_emit_u64_from_n(weir_ctx *ctx, const weir_batch *b, uint32_t first, uint32_t n,
                         const uint64_t *keys, const uint64_t *values);
/* Emits a record exactly as given (sources, or operators that set ids). */
int weir_emit_record(weir_ctx *ctx, const weir_record *r);

/* Source record ids: stable for (source node, split, offset), and
 * consecutive within a split: id(split, o) == id(split, 0) + o, so a source
 * may compute the base once and add offsets. */
uint64_t weir_source_record_id(const weir_ctx *ctx, uint32_t split, uint64_t offset);

/* A stable 64-bit hash of bytes (the same on every platform and run), for
 * keying records by content: weir_emit(ctx, weir_hash_bytes(w, n), w, n). */
uint64_t weir_hash_bytes(const void *p, size_t n);

/* ------------------------------------------------------------------------ */
/* Managed keyed state                                                      */
/*
 * Keyed operators (those whose input is partitioned with weir_key_by) own a
 * map from key to value per subtask, snapshotted by the engine. Two maps:
 *  - u64 keys (the record key) to u64 values: the fast path;
 *  - exact byte-string keys to byte-string values: for keys such as words,
 *    where two different words must never share state even if their u64
 *    record keys (hashes) collide.
 * and namespaced u64 state, (current key, ns) to u64 (below).
 * Calls from a non-keyed operator return WEIR_ENOTKEYED.
 *
 * A u64 state key is the key of the record it belongs to: the store keeps,
 * and a rescale moves, u64 state by its key's key group, so a key made up
 * from several values (a composite key) would come back on another subtask
 * after a rescale. Inserting a new key is refused (WEIR_EINVAL, with a
 * message naming both key groups) when the key's key group is not the
 * current record's (in process, or after weir_state_select), or, where no
 * record is current (process_batch without a select, finish, poll), when
 * this subtask does not own it. Keep other state in the byte-string map,
 * under the current record's key.
 */

/* *out = the value of `key`, or 0 if absent. Returns 1 if present, 0 if
 * absent, or a negative error. */
int weir_state_get_u64(weir_ctx *ctx, uint64_t key, uint64_t *out);
int weir_state_put_u64(weir_ctx *ctx, uint64_t key, uint64_t value);
/* Adds `delta` to key's value (absent = 0), stores it in *out if out != NULL. */
int weir_state_add_u64(weir_ctx *ctx, uint64_t key, uint64_t delta, uint64_t *out);
int weir_state_del_u64(weir_ctx *ctx, uint64_t key);
/* Hints that `key` will be used soon (batch form: prefetch ahead). */
void weir_state_prefetch_u64(weir_ctx *ctx, uint64_t key);
/* The same for byte-string key k, in two steps: first its slot in the
 * table (entry 0, some 16 records ahead), then its entry (entry 1, a few
 * records ahead, once the slot is in cache). */
void weir_state_prefetch_bytes(weir_ctx *ctx, const void *k, size_t klen, int entry);

/* Byte-string entries remember the key of the record that wrote them (for
 * redistributing state by key group). The per-record `process` form sets it;
 * a process_batch operator calls weir_state_select(ctx, b->keys[i]) before
 * the byte-string calls for record i. */
void weir_state_select(weir_ctx *ctx, uint64_t record_key);

/* Byte-string map. On get, *val points into the state (valid until the next
 * state call on this ctx) and *vlen is its length. Returns 1 if present, 0 if
 * absent. */
int weir_state_get_bytes(weir_ctx *ctx, const void *k, size_t klen, const void **val, size_t *vlen);
int weir_state_put_bytes(weir_ctx *ctx, const void *k, size_t klen, const void *val, size_t vlen);
int weir_state_del_bytes(weir_ctx *ctx, const void *k, size_t klen);
/* k's value for update in place, in one lookup where a get and a put take
 * two: *val points at its vlen bytes, writable until the next state call
 * on this ctx. Made if absent (vlen zero bytes, belonging to the current
 * key as with put); a value of another length is resized (its first bytes
 * kept, new ones zero). *old_len (if not NULL): the length it had, -1 if
 * absent. Returns 1 if it was present, 0 if made, or a negative error. */
int weir_state_update_bytes(weir_ctx *ctx, const void *k, size_t klen, size_t vlen, void **val,
                            int64_t *old_len);
/* Visit every entry of this subtask's state, in no particular order; a
 * nonzero return from fn stops the visit and is returned. The state must
 * not change during a visit. Byte-string entries come with the record key
 * they belong to. */
int weir_state_each_u64(weir_ctx *ctx, int (*fn)(void *user, uint64_t key, uint64_t value),
                        void *user);
int weir_state_each_bytes(weir_ctx *ctx,
                          int (*fn)(void *user, uint64_t record_key, const void *k, size_t klen,
                                    const void *v, size_t vlen),
                          void *user);

/* Namespaced u64 state: (current key, ns) -> u64, for state that a key
 * keeps per window, bucket or other 64-bit name (a window's end, a pane):
 * one table of fixed-width slots, one probe per call, no allocation per
 * entry. The key is always the current key (the record's in process;
 * process_batch and on_timers first call weir_state_select), so an entry
 * moves with its key on a rescale. `ns` is any u64, UINT64_MAX and 0
 * included; values are plain u64 (absent reads as 0).
 *
 * The calls act on the calling subtask's state, on its own thread, from the
 * operator's callbacks only, and do not block. Errors: WEIR_ENOTKEYED from a
 * non-keyed operator; WEIR_ESTATE, with a message, without a current key
 * (process_batch or on_timers before weir_state_select, open, finish, poll,
 * snapshot, checkpoint notifications, process2 of a broadcast input).
 *
 * get: *out = the value, or 0 if absent; returns 1 if present, 0 if absent.
 * put: returns 0.
 * add: adds delta (absent = 0), *out = the sum if out != NULL; returns 1 if
 *      it created the entry, 0 if it existed. (weir_state_add_u64 returns 0
 *      either way: test an ns_add result with `rc < 0`, not `rc != 0`.)
 * del: returns 0, whether the entry existed or not.
 * update: *val points at the value for update in place (made as 0 if
 *      absent), writable until the next state call on this ctx: one probe
 *      where a get and a put take two. Returns 1 if present, 0 if made. */
int weir_state_ns_get_u64(weir_ctx *ctx, uint64_t ns, uint64_t *out);
int weir_state_ns_put_u64(weir_ctx *ctx, uint64_t ns, uint64_t value);
int weir_state_ns_add_u64(weir_ctx *ctx, uint64_t ns, uint64_t delta, uint64_t *out);
int weir_state_ns_del_u64(weir_ctx *ctx, uint64_t ns);
int weir_state_ns_update_u64(weir_ctx *ctx, uint64_t ns, uint64_t **val);
/* Hints that (key, ns) will be used soon: a batch or timer operator
 * prefetches some 16 records ahead, before the key is selected. */
void weir_state_ns_prefetch(weir_ctx *ctx, uint64_t key, uint64_t ns);
/* Visits every namespaced entry of this subtask, in no particular order,
 * with the key it belongs to; no current key needed (finish may sum them;
 * allowed on a broadcast input). A nonzero return from fn stops the visit
 * and is returned. fn must not change namespaced state. */
int weir_state_ns_each_u64(weir_ctx *ctx,
                           int (*fn)(void *user, uint64_t key, uint64_t ns, uint64_t value),
                           void *user);

/* ------------------------------------------------------------------------ */
/* Broadcast state                                                          */
/*
 * An operator made by weir_connect whose second input is
 * weir_broadcast(...) keeps broadcast state: a small byte-string map of
 * which every subtask holds its own copy (rules, a lookup table), beside
 * keyed state if its first input is keyed. Every subtask receives every
 * broadcast record, so copies that are written only from those records
 * stay equal: weir_broadcast_put and _del may be called only in process2
 * or process_batch2 (else WEIR_ESTATE, with a message); _get and _each
 * anywhere in the operator (open, process, on_timer, finish, ...). An
 * operator without a broadcast input gets WEIR_ESTATE from all four.
 *
 * The copy is the calling subtask's, on its own thread: the calls may be
 * made only from the operator's callbacks and do not block. It is
 * snapshotted at every checkpoint and restored; restored with another
 * parallelism, every new subtask gets old subtask 0's copy (the checkpoints
 * of a two-input operator are aligned: all copies saw the same records).
 *
 * Several broadcast producers (a broadcast input of parallelism above 1,
 * or a union) interleave differently on each subtask: their updates must
 * not depend on that order (a put per distinct key, commutative merges),
 * or the broadcast side runs with parallelism 1. weir does not check it.
 *
 * While process2/process_batch2 runs on a broadcast input there is no
 * current key: keyed state and timer calls return WEIR_ESTATE, except the
 * read-only visits weir_state_each_u64, weir_state_each_bytes and
 * weir_state_ns_each_u64.
 *
 * Returns as the byte-string state calls: get returns 1 (found, *val into
 * the copy, valid until the next broadcast call on this ctx) or 0; put
 * WEIR_EINVAL for a key or value of 4 GiB or more. each visits every entry
 * in no particular order (fn must not change broadcast state); a nonzero
 * return from fn stops the visit and is returned. */
int weir_broadcast_get(weir_ctx *ctx, const void *k, size_t klen, const void **val, size_t *vlen);
int weir_broadcast_put(weir_ctx *ctx, const void *k, size_t klen, const void *val, size_t vlen);
int weir_broadcast_del(weir_ctx *ctx, const void *k, size_t klen);
int weir_broadcast_each(weir_ctx *ctx,
                        int (*fn)(void *user, const void *k, size_t klen, const void *v,
                                  size_t vlen),
                        void *user);

/* ------------------------------------------------------------------------ */
/* Building a job                                                           */

int weir_job_create(weir_job **out, const char *name);
void weir_job_destroy(weir_job *job); /* NULL is a no-op */
const char *weir_job_name(const weir_job *job);

/* Hands `p` to the job, which calls free_fn(p) at weir_job_destroy(). */
int weir_job_adopt(weir_job *job, void *p, void (*free_fn)(void *));

/* Records a build error with a message; returns err. Later builder calls
 * are no-ops and weir_sink()/weir_job_run() return err. */
int weir_job_fail(weir_job *job, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The job's build error: the first error recorded while it was built (a
 * builder call, weir_job_fail) or found by weir_job_run before it started
 * anything (its options, the frozen graph), or 0. Its message is
 * weir_job_error()'s. An error of the run itself is not one (a restore
 * that does not fit, an operator's failure). */
int weir_job_build_error(const weir_job *job);

/* A builder call names itself and the argument in the error it records
 * ("weir_process: operator 'x': vt is NULL"). A NULL stream is what a
 * failed call returns, and the job already holds that call's error; but a
 * NULL stream carries no job, so a call given one records nothing: it
 * returns NULL, and weir_sink (weir_sink_to) returns WEIR_EPLAN, with
 * weir_job_error() still "" if no earlier call failed (a NULL that did
 * not come from a builder call). Only weir_union, given one NULL stream
 * and one of a job, records "weir_union: stream b is NULL". So check what
 * weir_sink returns (the `weir` command reports a build function's error
 * without a message as such, exit 2), not weir_job_run alone, which runs
 * the graph that was built. */

/* Adds a source with `parallelism` subtasks (0 = the job's default). */
weir_stream *weir_source(weir_job *job, const char *name, const weir_source_vt *vt, void *arg,
                         int parallelism);
/* Partitioning of the edge to the next operator (default: forward, which
 * needs equal parallelism and chains operators into one task). */
weir_stream *weir_key_by(weir_stream *s);    /* hash of key, over key groups */
weir_stream *weir_rebalance(weir_stream *s); /* round-robin */
weir_stream *weir_broadcast(weir_stream *s); /* every record to every subtask */
weir_stream *weir_forward(weir_stream *s);
/* A stream of both inputs' records (each keeps its own partitioning). */
weir_stream *weir_union(weir_stream *a, weir_stream *b);
/* Adds an operator consuming `s`. Keyed if `s` is keyed (weir_key_by). */
weir_stream *weir_process(weir_stream *s, const char *name, const weir_operator_vt *vt, void *arg,
                          int parallelism);
/* What an operator declares when it is added (weir_process_opts), so that
 * misuse is a build error (WEIR_EPLAN, exit 2) rather than a failure at
 * the first record. */
enum {
  WEIR_OP_EVENT_TIME = 1,        /* reads the event-time clock: needs a watermark strategy on
                                    every source upstream, and no loop around or upstream */
  WEIR_OP_EVENT_TIMERS = 2,      /* registers event-time timers (implies WEIR_OP_EVENT_TIME;
                                    keyed input, on_timer or on_timers) */
  WEIR_OP_PROCESSING_TIMERS = 4, /* registers processing-time timers (keyed input, on_timer or
                                   on_timers) */
  WEIR_OP_KEYED_STATE = 8        /* keeps keyed state (weir_state_*): keyed input. Undeclared,
                                    a non-keyed input is found at the first state call
                                    (WEIR_ENOTKEYED) instead */
};
typedef struct weir_op_opts {
  size_t size;    /* sizeof(weir_op_opts) */
  uint32_t flags; /* WEIR_OP_* */
  /* The side outputs it may emit to (weir_emit_side), by tag: distinct,
   * non-empty, at most WEIR_MAX_SIDE_OUTPUTS (copied). */
  uint32_t ntags;
  const char *const *tags;
} weir_op_opts;
#define WEIR_MAX_SIDE_OUTPUTS 16
/* weir_process with declarations (opts NULL: none, as weir_process). An
 * operator with event-time state keeps its clock in its checkpoints and
 * resumes from it after a restore (on a rescale: the minimum of its old
 * subtasks' clocks), so that a replayed record does not reopen what was
 * already fired. */
weir_stream *weir_process_opts(weir_stream *s, const char *name, const weir_operator_vt *vt,
                               void *arg, int parallelism, const weir_op_opts *opts);
/* An operator of two inputs: in1's records go to process/process_batch,
 * in2's to process2/process_batch2 (one of each required). Keyed if both
 * inputs are keyed (weir_key_by): one key's records of both inputs meet
 * in one subtask, with shared keyed state and timers (a join); or if in1
 * is keyed and in2 is weir_broadcast(...). A broadcast in2 gives the
 * operator broadcast state (weir_broadcast_*, above). Declarations
 * as weir_process_opts (opts may be NULL). Its checkpoints are aligned
 * (unaligned ones and the alignment timeout apply to jobs without
 * two-input operators). WEIR_EPLAN if in1 and in2 come from one operator. */
weir_stream *weir_connect(weir_stream *in1, weir_stream *in2, const char *name,
                          const weir_operator_vt *vt, void *arg, int parallelism,
                          const weir_op_opts *opts);
/* The stream of side output `tag` of the operator whose main stream `s` is
 * (as weir_process_opts returned it). Its records cross a channel to what
 * consumes them (a side output never chains), and carry on with the
 * timestamps and ids they were emitted with. NULL with the job's build
 * error (WEIR_EPLAN) if s is not one operator's main stream or the
 * operator did not declare `tag`. Records emitted to a side output that
 * nothing consumes are dropped and counted ("dropped:<tag>" in the job's
 * summary). */
weir_stream *weir_side_output(weir_stream *s, const char *tag);
/* Declares the version of the state of operator `name` (source, operator
 * or sink, added before): stored with every snapshot of it, and told to
 * the operator when a later run restores that snapshot
 * (weir_ctx_state_version), so that a new version of a job can read the
 * state an older one wrote (docs/savepoints.md §5). Default 0. Returns 0,
 * WEIR_ENOENT (no such operator) or WEIR_EINVAL. */
int weir_operator_state_version(weir_job *job, const char *name, uint32_t version);
/* Adds a sink operator (emits nothing). Returns the job's build error or 0. */
int weir_sink(weir_stream *s, const char *name, const weir_operator_vt *vt, void *arg,
              int parallelism);
/* Iterations (cycles). weir_iterate opens a loop: a head operator `name`
 * with `parallelism` subtasks reads `input`, and *body receives the head's
 * output, the records inside the loop. Build the loop body on it, then close
 * the loop with weir_iteration_close(it, feedback): `feedback` (with its own
 * partitioning, e.g. weir_key_by) flows back into the head. Records leave
 * the loop through any stream built from the body that is not fed back.
 * The loop ends when every external input has ended and no record is left
 * inside it. Checkpoints cover records in flight on the feedback edge (they
 * are logged, ABS Algorithm 2), so state stays exactly-once across the
 * loop. Feedback edges are unbounded (they never block), so alignment
 * inside the loop cannot deadlock. The iteration is owned by the job. */
typedef struct weir_iteration weir_iteration;
weir_iteration *weir_iterate(weir_stream *input, const char *name, int parallelism,
                             weir_stream **body);
int weir_iteration_close(weir_iteration *it, weir_stream *feedback);

/* The job a stream belongs to (NULL for NULL). */
weir_job *weir_stream_job(const weir_stream *s);

/* ------------------------------------------------------------------------ */
/* Running a job                                                            */

typedef struct weir_progress {
  double elapsed_s;
  uint64_t source_records;  /* records emitted by all sources so far */
  uint64_t sink_records;    /* records received by all sinks so far */
  uint64_t last_checkpoint; /* latest completed checkpoint id, 0 if none */
} weir_progress;

typedef struct weir_run_opts {
  int workers;               /* worker threads; 0 = number of cores */
  int default_parallelism;   /* for parallelism 0; 0 = number of workers */
  int max_parallelism;       /* key groups; 0 = WEIR_DEFAULT_MAX_PARALLELISM */
  uint32_t batch_records;    /* records per batch; 0 = 1024 */
  uint32_t channel_batches;  /* channel bound in batches; 0 = 8 */
  uint32_t max_record_bytes; /* largest payload; 0 = 1 MiB */
  /* Partly filled output batches are sent this long after the last send
   * at the latest (a task that runs out of input sends at once anyway);
   * 0 = 1000; WEIR_FLUSH_AT_ONCE: after every input batch or source call
   * (lowest latency, less throughput; docs/latency.md). */
  uint32_t buffer_timeout_us;
  /* SIGINT/SIGTERM stop the job cleanly (a second abandons the drain).
   * The run installs its handlers (sigaction) when weir_job_run starts and
   * puts the caller's back when it returns; a signal before the loop runs
   * stops the job as it starts, one after the job ended changes nothing.
   * One run per process at a time (else WEIR_ESTATE). */
  int handle_signals;
  /* Called on the calling thread every progress_ms (0 = never). */
  uint32_t progress_ms;
  void (*progress)(void *user, const weir_progress *p);
  void *progress_user;
  /* Checkpoints (all off when state_dir is NULL). */
  const char *state_dir;           /* the job's store; NULL = no checkpoints */
  uint32_t checkpoint_interval_ms; /* 0 = only the final checkpoint */
  uint32_t checkpoint_timeout_ms;  /* 0 = 600000 (10 min) */
  uint32_t retain;                 /* completed checkpoints kept; 0 = 3 */
  int at_least_once;               /* barriers never block inputs */
  int restore;                     /* WEIR_RESTORE_* */
  uint64_t restore_id;             /* for WEIR_RESTORE_ID */
  /* Loops: a feedback edge's queue and a loop head's back-edge log keep up
   * to loop_memory_bytes each in memory (0 = 64 MiB; UINT64_MAX = never
   * spill), and continue beyond it in unlinked scratch files in spill_dir
   * (NULL = state_dir, or $TMPDIR or /tmp without one). */
  uint64_t loop_memory_bytes;
  const char *spill_dir;
  /* Ownership of state_dir (docs/leases.md): the run holds its lease. */
  uint32_t lease_ms; /* lease duration, renewed every third of it; 0 = 6000 */
  int lease_wait;    /* a live owner holds it: wait for its lease to expire and take
                        over, instead of failing with WEIR_EOWNED */
  /* Called once, on whichever thread notices first, when the run loses its
   * lease (taken over while it was paused, or not renewed in time); the run
   * then fails with WEIR_EFENCED and commits nothing more. A program may end
   * the process right here (fail-stop, as the weir command does), so that
   * nothing the run still buffers reaches a destination after it lost
   * ownership. NULL: the run just fails. */
  void (*lease_lost)(void *user, const char *msg);
  void *lease_lost_user;
  /* Stop-the-world checkpoints, the baseline the ABS paper compares
   * against: sources pause, every record in flight (loops included) is
   * processed, every operator snapshots, and sources resume once the
   * checkpoint is durable (or failed). Same store format as aligned
   * checkpoints. Not with at_least_once. */
  int sync_checkpoints;
  /* Unaligned checkpoints (FLIP-76): a barrier overtakes the data buffered
   * in channels; each task snapshots when it first sees the barrier in any
   * input queue, forwards it ahead of its pending output, and stores the
   * records it overtook (input records before the barrier on inputs it had
   * not reached yet, output records it had not handed over) as channel
   * state of the checkpoint, replayed first on restore. A checkpoint with
   * channel state restores only with the same parallelism and key groups.
   * Jobs with loops checkpoint aligned (back-edge logging) instead. Not with
   * at_least_once or sync_checkpoints. */
  int unaligned;
  /* With alignment_timeout_ms > 0 (whether or not `unaligned` is set), a
   * checkpoint starts aligned, and a task whose alignment has taken longer
   * than this (counted from when it first saw the barrier in an input
   * queue) switches to an unaligned cut (Flink's aligned checkpoint
   * timeout). */
  uint32_t alignment_timeout_ms;
  /* Consecutive failed checkpoints tolerated (declined by the store: full
   * disk, I/O error; timed out; refused by an operator) before the job
   * fails with WEIR_ECKPTLIMIT: 0 = the default (3), WEIR_TOLERATE_NONE = the
   * first failure stops the job, WEIR_TOLERATE_ANY = never stop. The count
   * restarts at every completed checkpoint. */
  int tolerable_checkpoint_failures;
  /* Largest size of the checkpoint store (LMDB map) in bytes; 0 = 64 GiB.
   * A checkpoint that does not fit is declined (WEIR_ENOSPC). */
  uint64_t store_max_bytes;
  /* Latency tracing: time where records wait, per hop, and keep the paths
   * of the slowest ones (weir_job_hop_quantile, weir_job_write_latency).
   * Costs a few clock reads per batch; off by default. */
  int trace_latency;
  /* Restoring into a state directory (docs/checkpoints.md §8). A run whose
   * job or sink destinations do not fit the checkpoint is refused
   * (WEIR_EMISMATCH) unless: allow_sink_change, where a sink's destination
   * changed and the sink can move (weir_destination.movable); or
   * allow_non_restored_state, where the checkpoint holds state of an
   * operator this job does not have (that state is dropped). */
  int allow_sink_change;
  int allow_non_restored_state;
  /* Starts the job from a savepoint file (weir_job_savepoint; docs/
   * savepoints.md) instead of from its state directory's checkpoints: the
   * file is copied into state_dir, whose lease epoch and checkpoint ids
   * then continue above the savepoint's, and the run restores it as
   * WEIR_RESTORE_ID would (restore must be WEIR_RESTORE_NONE). A state
   * directory that holds another job refuses it (WEIR_EMISMATCH); a
   * damaged file is WEIR_ECORRUPT. The job's name may differ from the
   * savepoint's (a new version of a job); its state is matched by
   * operator name. */
  const char *from_savepoint;
  /* Called once on the calling thread when the run owns its state
   * directory and has restored what it restores, right before its workers
   * start (a place to start a control endpoint that must not race another
   * owner). NULL: none. */
  void (*started)(void *user, weir_job *job);
  void *started_user;
  /* A commit point outside the state directory (cluster mode, docs/
   * scale-out.md §2): called on the coordinator thread once checkpoint
   * `id` is durable in state_dir and before any operator hears that it
   * completed (before sinks commit and a stage edge publishes), with the
   * checkpoint exported as a savepoint file (weir_job_savepoint's format)
   * at `savepoint`, `bytes` long, which the callback may copy elsewhere
   * (the file is removed after it returns). 0: the checkpoint counts. A
   * negative error fails the job with it (WEIR_EFENCED: the run no longer
   * owns the job) and no operator hears of the checkpoint, so nothing of
   * it is committed anywhere. NULL: the state directory is the commit
   * point. */
  int (*commit_point)(void *user, uint64_t id, const char *savepoint, uint64_t bytes);
  void *commit_point_user;
  /* A state directory without a lease epoch yet starts at least at this
   * one (0: 1; a savepoint's epoch + 1 if that is higher): the fencing
   * epoch destinations see, given by an owner outside the directory
   * (cluster mode: the stage's epoch in NATS). */
  uint64_t min_lease_epoch;
  /* The id of the job if this run creates it (a UUID in text form, lower
   * case, as weir_ctx_job_id gives; NULL: a random one): destinations
   * name what a job writes by its id, so a run that starts again from
   * nothing under the same id finds and removes what an earlier one left
   * uncommitted (cluster mode: one id per task). A state directory whose
   * job exists keeps that job's id. Borrowed: kept alive for the run. */
  const char *job_id;
} weir_run_opts;

#define WEIR_DEFAULT_TOLERABLE_FAILURES 3
enum { WEIR_TOLERATE_NONE = -1, WEIR_TOLERATE_ANY = -2 };
/* weir_run_opts.buffer_timeout_us: no buffering (0 keeps meaning "the
 * default", as in every other field). */
#define WEIR_FLUSH_AT_ONCE UINT32_MAX

enum {
  WEIR_RESTORE_NONE = 0,   /* new job, or new instance of a finished one */
  WEIR_RESTORE_LATEST = 1, /* continue from the latest completed checkpoint */
  WEIR_RESTORE_ID = 2,     /* continue from checkpoint restore_id */
  WEIR_RESTORE_FRESH = 3   /* start a new instance whatever the state */
};

/* Freezes the graph into a physical plan, validates it, runs it to the end
 * of input (or until stopped) on worker threads, and returns 0, a build or
 * plan error (WEIR_EPLAN, ...), or the first runtime error (message in
 * weir_job_error()). With a state_dir, the run first acquires its lease:
 * WEIR_EOWNED if a live owner holds it; WEIR_EFENCED if the run lost it
 * while running (it then stopped without committing). Blocks the calling
 * thread. A job runs at most once. */
int weir_job_run(weir_job *job, const weir_run_opts *opts);

/* Stages (docs/scale-out.md §1): a job's graph cut at its key-by edges.
 * Sources are in stage 0; an operator is in the stage of its inputs, one
 * more across a key-by edge. weir_job_stages counts them (after the graph
 * is built) and gives the graph's fingerprint (the same for every process
 * that built the same graph, whatever stage it runs). A graph that cannot
 * be cut so is WEIR_EPLAN with a message: a loop, an operator whose inputs
 * come from two stages or across a non-key-by edge, or more than one
 * key-by edge between two stages. */
int weir_job_stages(weir_job *job, int *nstages, uint64_t *fingerprint);

/* What weir_job_cut puts where the graph is cut, built by the caller's
 * callbacks with the usual verbs: `in` makes the source that reads what
 * the stage before sent (required for stage > 0) and returns its stream,
 * which takes the place of the key-by edge into the stage (its records
 * are keyed by again); `out` attaches to `s` (the producing operator's
 * output, at its parallelism) the sink that sends the stage's output to
 * the next stage, routing each record to the task that owns its key
 * (required unless the stage is the last), and returns 0 or its error.
 * Their names must not clash with the job's operators'.
 *
 * tasks > 0 keeps one task of the stage: the run is task `task` of
 * `tasks` identical runs of it (a cluster's unit of ownership). Every
 * operator kept then runs as one subtask that reports itself as subtask
 * `task` of parallelism `tasks` (weir_ctx_subtask, weir_ctx_parallelism),
 * so that sources read their share of the input, the stage edge's
 * source reads the edge's task `task`, and sinks name what they write
 * apart from the other tasks'. tasks = 0 keeps the whole stage at the
 * parallelism the job asked. */
typedef struct weir_stage_cut {
  int stage;
  int task, tasks;
  weir_stream *(*in)(weir_job *job, void *user);
  int (*out)(weir_stream *s, void *user);
  void *user;
} weir_stage_cut;

/* Keeps only stage cut->stage of the built graph, with what cut->in and
 * cut->out make at its edges (weir_job_stages' refusals apply). Call it
 * once, after building and before weir_job_run; the other stages'
 * operators are never opened (their args are still the caller's).
 * Event-time operators outside stage 0 are refused: watermarks do not
 * cross stages yet. */
int weir_job_cut(weir_job *job, const weir_stage_cut *cut);

/* What weir_job_run did about an existing job (after the run): */
typedef struct weir_run_info {
  char job_id[40];
  uint64_t instance;
  uint64_t restored_from;   /* checkpoint id, 0 if started from the beginning */
  uint64_t last_checkpoint; /* latest checkpoint completed by this run, 0 if none */
  uint64_t checkpoints;     /* completed by this run */
  uint64_t checkpoints_failed;
  int already_finished; /* --restore on a finished job: nothing was run */
  /* Checkpoints completed by this run with at least one unaligned cut, and
   * the channel state they stored (record bytes, before envelopes). */
  uint64_t unaligned_checkpoints;
  uint64_t channel_state_bytes;
  /* Pages of keyed u64 state (512 entries each) that operators copied
   * because a checkpoint's copy-on-write view of them was not read yet
   * when they updated them (counted when the tasks close). */
  uint64_t cow_pages_copied;
  /* The restore, when there was one: the checkpoint's stored bytes;
   * restore_read_ms, the wall time to load them: the metadata and the
   * page walk in a child (restore_probe_ms, the first part of it; the
   * tables are prefaulted meanwhile), then every subtask's chunks read,
   * checked and, for keyed u64 state, built into its table as they are
   * read (subtasks in parallel); restore_build_ms, the slowest subtask's
   * time building its state: filling its table during the load (inside
   * restore_read_ms) plus installing the rest when it opens; restore_ms,
   * the restore's wall time: restore_read_ms plus the slowest installation
   * after open. */
  uint64_t restored_bytes;
  double restore_read_ms, restore_build_ms;
  double restore_probe_ms, restore_ms;
} weir_run_info;
const weir_run_info *weir_job_run_info(const weir_job *job);

/* One checkpoint this run completed (weir_job_checkpoint_stats). */
typedef struct weir_checkpoint_stat {
  uint64_t id;
  uint64_t started_us;  /* when it was triggered, after the run started */
  uint64_t duration_us; /* trigger to durable */
  /* The longest any task waited from its first barrier to its last
   * (synchronous checkpoints: trigger to every task drained). */
  uint64_t alignment_us;
  uint64_t bytes;               /* stored, envelopes included */
  uint64_t channel_state_bytes; /* of unaligned cuts (record bytes) */
  uint32_t flags;               /* WEIR_CHECKPOINT_* */
} weir_checkpoint_stat;
enum {
  WEIR_CHECKPOINT_UNALIGNED = 1, /* at least one task cut it unaligned */
  WEIR_CHECKPOINT_FINAL = 2,     /* the one taken at the end of input */
  /* Completed after weir_job_stop() was handled: it waited for the job to
   * drain (benchmarks leave these out). */
  WEIR_CHECKPOINT_AFTER_STOP = 4
};
/* How many completed checkpoints a job remembers: the latest ones. */
#define WEIR_CHECKPOINT_HISTORY 65536u

/* Copies the statistics of the checkpoints this run completed into out (at
 * most n), oldest first, starting with the `first`-th (0: the run's first;
 * ones older than the latest WEIR_CHECKPOINT_HISTORY are skipped). Returns
 * how many it copied. Thread-safe: may be called while the job runs. */
size_t weir_job_checkpoint_stats(const weir_job *job, uint64_t first, weir_checkpoint_stat *out,
                                 size_t n);

/* Latency tracing (weir_run_opts.trace_latency; docs/latency.md): where a
 * record waited on a hop into a task, from its batch's first record. */
typedef enum weir_hop_wait {
  WEIR_WAIT_FILL,    /* first record appended -> the batch published */
  WEIR_WAIT_QUEUE,   /* published -> the consumer task took it */
  WEIR_WAIT_PROCESS, /* taken -> the consumer's chain returned from it */
  WEIR_WAIT_TOTAL    /* first append at the source -> a sink's chain returned */
} weir_hop_wait;

/* The q-quantile (0..1) in ns of a wait over the run, for the batches taken
 * by the tasks whose chain starts at operator `name` (NULL: all). After
 * weir_job_run. WEIR_EINVAL if the run did not trace, WEIR_ENOENT for an
 * unknown name. */
int weir_job_hop_quantile(const weir_job *job, const char *name, weir_hop_wait wait, double q,
                          uint64_t *ns);
/* Writes the traced waits per hop, and the paths of the slowest records
 * hop by hop (what each consumer's worker did while the batch waited), as
 * text. After weir_job_run; WEIR_EINVAL if the run did not trace. */
int weir_job_write_latency(const weir_job *job, FILE *out);

/* Asks a running job to stop: sources end, the rest drains and closes.
 * Thread-safe and async-signal-safe; a second call is harmless. (With
 * handle_signals, a second SIGINT/SIGTERM abandons the drain instead.) */
void weir_job_stop(weir_job *job);

/* Asks a running job to end now as if its sources had reached the end of
 * their input: sources end, the final watermark (+inf) fires every
 * event-time timer, processing-time timers fire, operators finish, sinks
 * land every effect (no grace limit, unlike a stop), and the final
 * checkpoint marks the job finished, so that a later --restore has nothing
 * to resume (Flink's stop --drain: for ending a job for good). A stop
 * instead leaves timers and open windows in its last checkpoint for the
 * next run. Thread-safe and async-signal-safe; with a stop already under
 * way it is too late to drain. */
void weir_job_drain(weir_job *job);

/* The first error's message ("operator 'count' subtask 1: ..."), or "" if
 * none. Valid until weir_job_destroy(). */
const char *weir_job_error(const weir_job *job);

/* Writes the run's summary as JSON (per-operator records in/out per subtask,
 * named counters, elapsed time, throughput) to `path`. After weir_job_run. */
int weir_job_write_summary(const weir_job *job, const char *path);

/* Per-operator totals after (or during) a run, also from another thread
 * (zeros until the run has started); returns WEIR_ENOENT for an unknown
 * operator name. */
int weir_job_operator_counts(const weir_job *job, const char *name, uint64_t *records_in,
                             uint64_t *records_out);

/* The sum over subtasks of an operator's named counter (weir_ctx_count);
 * 0 with *value = 0 if the operator never counted `counter`; WEIR_ENOENT for
 * an unknown operator. */
int weir_job_counter(const weir_job *job, const char *op, const char *counter, uint64_t *value);

/* ---- savepoints (docs/savepoints.md) ------------------------------------ */

enum {
  /* The savepoint stops the job (stop-with-savepoint): sources end as
   * weir_job_stop() makes them, and the job's last checkpoint is the
   * savepoint; two-phase sinks commit it as the job ends. */
  WEIR_SAVEPOINT_STOP = 1u << 0,
  /* With STOP: end as weir_job_drain() does (timers fire, the job finishes
   * for good) instead of leaving windows and timers in the savepoint. */
  WEIR_SAVEPOINT_DRAIN = 1u << 1,
};

typedef struct weir_savepoint_result {
  uint64_t id;      /* the checkpoint it is */
  uint64_t bytes;   /* the file's size */
  char path[4096];  /* where it was written */
  char error[1024]; /* why it failed ("" on success) */
} weir_savepoint_result;

/* Takes a savepoint of a running job: the next checkpoint (aligned, with
 * no channel state), written as a self-contained savepoint file to `path`
 * (NULL: <state dir>/savepoints/<checkpoint id>) once it is durable. A
 * savepoint file is never removed by retention; `weir_run_opts.
 * from_savepoint` starts a run from it. Blocks until the file is written
 * or the savepoint failed; call it from a thread other than the run's
 * (a control or HTTP thread). Savepoints are taken one at a time: a
 * request made while another is under way waits for its turn. Returns 0
 * with *out filled, or WEIR_ESTATE (the job does not run, has no state
 * directory, or is stopping), WEIR_ECANCELED (the job ended first), or
 * the checkpoint's or the file's error, with out->error saying why.
 * Thread-safe. */
int weir_job_savepoint(weir_job *job, const char *path, unsigned flags, weir_savepoint_result *out);

/* Abandons a stop under way (as a second SIGINT/SIGTERM does): the run
 * fails with WEIR_ECANCELED at once, without waiting for its sinks;
 * effects of checkpoints that completed and were not committed yet stay
 * pending, for the next run to commit. Thread-safe and async-signal-safe. */
void weir_job_abandon(weir_job *job);

/* Nonzero if the run ended because weir_job_stop() (or a signal) asked it
 * to, rather than at the end of its input; 2 if weir_job_drain() did. */
int weir_job_stopped(const weir_job *job);

/* ------------------------------------------------------------------------ */
/* Live metrics (weir_job_metrics_read; the weir command's --http)          */

/* An operator of the frozen plan (weir_job_plan). Strings are the job's,
 * valid until weir_job_destroy(). */
typedef struct weir_plan_operator {
  const char *name;
  const char *kind; /* "source", "operator" or "sink" */
  int parallelism;
  uint32_t chain;     /* the chain it runs in: one task per subtask per chain */
  uint32_t chain_pos; /* its place in the chain, 0 = the chain's head */
  int keyed;          /* its input is hash-partitioned by key */
} weir_plan_operator;

/* An edge of the plan: from operator `from` (its output `port`: 0 the main
 * one, k its k-th side output) to operator `to`. */
typedef struct weir_plan_edge {
  uint32_t from, to; /* indexes into the operators */
  uint32_t port;
  const char *partitioning; /* "forward", "hash", "broadcast" or "rebalance" */
  int chained;              /* inside a chain: records pass by call, no channel */
  int feedback;             /* closes an iteration */
} weir_plan_edge;

/* Copies up to nops operators and nedges edges of the frozen plan (in the
 * order they were added) and sets *total_ops and *total_edges (either
 * pointer may be NULL). Returns 0, or WEIR_ESTATE before weir_job_run froze
 * the plan. Any thread, while the job runs and after it, until
 * weir_job_destroy(); does not block. */
int weir_job_plan(const weir_job *job, weir_plan_operator *ops, size_t nops, size_t *total_ops,
                  weir_plan_edge *edges, size_t nedges, size_t *total_edges);

typedef enum weir_job_state {
  WEIR_JOB_CREATED = 0,  /* not running yet */
  WEIR_JOB_RUNNING = 1,  /* running */
  WEIR_JOB_STOPPING = 2, /* weir_job_stop / drain or a signal: sources ended, draining */
  WEIR_JOB_FINISHED = 3, /* ended at the end of its input (or drained) */
  WEIR_JOB_STOPPED = 4,  /* ended by a stop */
  WEIR_JOB_FAILED = 5    /* failed (weir_job_error says why) */
} weir_job_state;

/* How many named counters (weir_ctx_count) weir_subtask_metrics carries:
 * all an operator can have. */
#define WEIR_METRICS_COUNTERS 16

/* One operator subtask, live. The times are those of the task that runs
 * it: every operator of a chain shows its chain's. */
typedef struct weir_subtask_metrics {
  uint32_t op; /* index into weir_job_plan's operators */
  uint32_t subtask;
  uint64_t records_in, records_out; /* as weir_job_operator_counts, per subtask */
  /* Time its task spent running steps (its operators, its routing), and
   * time it could not hand on its output because an output channel was
   * full (Flink's backpressured time), since the run started. Measured
   * per step of the task (at most about a millisecond or 16 batches), so
   * a reading lags by up to a step. */
  uint64_t busy_ns, backpressured_ns;
  /* Batches queued in the subtask's input channels and their bound (the
   * head of a chain; 0 and 0 for the others, whose input comes by call),
   * and the fullest output channel's (the tail of a chain). Feedback
   * edges count with their ring's bound (they never refuse). */
  uint32_t in_queued, in_capacity;
  uint32_t out_queued, out_capacity;
  /* Event time: its task's clock (weir_ctx_watermark), with has_watermark
   * set in a job with a watermark strategy; WEIR_WATERMARK_MIN before the
   * first watermark. */
  int has_watermark;
  int64_t watermark;
  /* Its named counters (weir_ctx_count): names borrowed from the
   * operator, valid until weir_job_destroy(). */
  uint32_t ncounters;
  const char *counter_names[WEIR_METRICS_COUNTERS];
  uint64_t counter_values[WEIR_METRICS_COUNTERS];
} weir_subtask_metrics;

/* The job as a whole, live. `size` is set by the caller
 * (sizeof(weir_job_metrics)): the struct only grows at its end. */
typedef struct weir_job_metrics {
  size_t size;
  weir_job_state state;
  char job_id[40];      /* "" before the run started */
  uint64_t uptime_ns;   /* since the run started; its whole length once it ended */
  uint64_t lease_epoch; /* the run's fencing epoch (docs/leases.md), 0 without a state dir */
  uint64_t checkpoints_completed, checkpoints_failed; /* by this run */
  uint64_t last_checkpoint_id;                        /* latest completed by this run, 0 if none */
  uint64_t last_checkpoint_age_ns;                    /* since it completed */
  uint64_t restored_from; /* checkpoint id, 0 if started from the beginning */
  double restore_ms;      /* wall time of the restore (weir_run_info.restore_ms) */
  size_t nsubtasks;       /* operator subtasks in all (weir_subtask_metrics) */
} weir_job_metrics;

/* Fills *m (whose size the caller set) and copies up to n operator
 * subtasks into st (by operator in plan order, then subtask), n = 0 and
 * st = NULL to learn m->nsubtasks first (it does not change during a run).
 * Returns 0, or WEIR_EINVAL (m NULL, or m->size smaller than this weir's
 * first version of the struct). Any thread, as often as wanted, while the
 * job runs and after it, until weir_job_destroy(); reads atomics the tasks
 * publish once per step and takes only the checkpoint history's mutex
 * (held once per completed checkpoint), so it never slows the data path.
 * Checkpoint statistics: weir_job_checkpoint_stats. */
int weir_job_metrics_read(const weir_job *job, weir_job_metrics *m, weir_subtask_metrics *st,
                          size_t n);

/* What a job shared object exports: the build function and the ABI version. */
typedef int (*weir_job_build_fn)(weir_job *job, int argc, char **argv);
#define WEIR_JOB_EXPORT(build_fn)                                                                  \
  __attribute__((visibility("default"))) const unsigned weir_job_abi_version = WEIR_ABI_VERSION;   \
  __attribute__((visibility("default"))) int weir_job_build(weir_job *job, int argc,               \
                                                            char **argv) {                         \
    return build_fn(job, argc, argv);                                                              \
  }

#ifdef __cplusplus
}
#endif
#endif
