/* task_ctx.h: the operator context (weir_ctx), one per operator of a task,
 * and the calls that make, snapshot, restore and finish it.
 *
 * Separate from task.h so that what reads only operators' contexts (the
 * statistics, the head operator) does not see the task's internals.
 */
#ifndef WEIR_TASK_CTX_H
#define WEIR_TASK_CTX_H

#include <stdatomic.h>
#include <stdint.h>

#include "graph.h"
#include "state.h"

#define WEIR__MAX_COUNTERS 16

struct weir__batch;
struct weir_subtask_snapshot;

typedef struct weir__counter {
  const char *name;
  _Atomic uint64_t value;
} weir__counter;

struct weir_ctx {
  weir__task *task;
  weir__node *node;
  weir_job *job;
  uint32_t subtask, parallelism;
  uint32_t max_record;
  int keyed;
  void *user;
  int opened;
  /* The input record being processed: derived emissions take its timestamp
   * and derive their ids from its id and a per-parent sequence number. */
  int64_t cur_ts;
  uint64_t cur_id;
  uint64_t seq_parent, seq;
  uint64_t salt;
  uint64_t cur_key;
  /* Chained successor: emissions go to `link`, processed by `next`. NULL
   * for the chain's tail, whose emissions go to the task's routers. */
  weir_ctx *next;
  struct weir__batch *link;
  /* Records in/out: counted by the owner, published once per step. */
  uint64_t n_in, n_out;
  _Atomic uint64_t pub_in, pub_out;
  atomic_uint ncounters;
  weir__counter counters[WEIR__MAX_COUNTERS];
  weir__state state;
  /* State loaded from a checkpoint, installed when the task opens (a keyed
   * operator's u64 state is already in `state`, built while loading). */
  struct weir_subtask_snapshot *restore;
  uint32_t restored_version;  /* the state version restored (after restore) */
  uint64_t restore_stream_ns; /* time the load spent building `state` */
  /* Chain heads: the task's channel state in that checkpoint, if any. */
  struct weir_subtask_snapshot *restore_chan;
  /* A source with a watermark strategy: its generator, which notes the
   * timestamp of every record it emits (task_time.c). */
  struct weir__wmgen *wmgen;
  /* Emissions take the slow path (task.c, emit_check): the generator
   * notes them, or the operator is in open or restore (emitting there is
   * refused: they run again at every restore). */
  uint8_t emit_slow, in_open;
  /* The input the records in process come from (weir_connect: 0 or 1;
   * set by the task for its head operator). */
  uint8_t in_side;
  /* Broadcast state (docs/event-time.md §7.2): this subtask's copy, used
   * only by an operator whose second input broadcasts (node->bcast_in2).
   * in_bcast is set while process2/process_batch2 runs on such an input:
   * broadcast state may be written then, and there is no current key, so
   * keyed state and timers are refused (but for read-only visits). */
  weir__bmap bcast;
  uint8_t in_bcast;
  /* Keyed operators: what a new u64 state key may be (state.h), armed
   * once state is restored; key_known: cur_key is the record's whose
   * state the operator works on (process, or after weir_state_select). */
  weir__key_guard guard;
  uint8_t key_known;
  /* Records emitted from poll derive from a fresh parent per call: unique
   * per run, not stable across replays. */
  uint64_t poll_nonce, poll_seq;
  /* Timers (task_timers.c), per domain: NULL unless the operator
   * declared them (weir_process_opts). While on_timers runs, timer_batch
   * is set: weir_state_select then starts the selected key's emission
   * ids, derived from (operator, key, timer_ts). */
  struct weir__timers *tm[2];
  uint8_t timer_batch;
  uint8_t timer_domain;
  int64_t timer_ts;
  /* Side outputs (a chain's tail): side output k goes to routers
   * [side_first[k], side_first[k] + side_n[k]) of the task (none: nothing
   * consumes it); the last tag looked up, for weir_emit_side. */
  uint8_t side_first[WEIR_MAX_SIDE_OUTPUTS], side_n[WEIR_MAX_SIDE_OUTPUTS];
  const char *side_tag;
  uint32_t side_k;
  /* Source pacing: wake-up requested by weir_ctx_wake_after. */
  uint64_t wake_after_us;
  char msg[512];
  /* weir_ctx_decline in the snapshot callback running now: its message. */
  int declined;
  char decline_msg[512];
};

/* checkpoint.c: the synchronous part of one operator's snapshot (a copy of
 * its managed state plus its snapshot callback's output) into *s. Returns
 * 0, 1 if the operator declined the checkpoint (weir_ctx_decline; its
 * message in decline_msg), 2 if it acknowledges it later
 * (WEIR_SNAPSHOT_LATER: *s is its state all the same), or an error (the
 * job has been failed). */
int weir__ctx_snapshot(weir_ctx *c, uint64_t id, struct weir_subtask_snapshot *s);
/* checkpoint.c: install a loaded snapshot into ctx (keyed state, then the
 * operator's restore callback). Called on the task's thread after open. */
int weir__ctx_restore(weir_ctx *ctx);
/* In a restore callback: takes the restored blob over instead of copying it
 * (release it with *release(p, len), or weir_free when that is NULL). */
uint8_t *weir__snapshot_take_blob(weir_snapshot_reader *r, uint64_t *len,
                                  void (**release)(uint8_t *, uint64_t));

/* task.c: calls the operator's finish (emissions get their own lineage). */
int weir__ctx_finish(weir_ctx *c);

/* Operator context lifecycle (ctx.c). */
weir_ctx *weir__ctx_create(weir__task *t, weir__node *node, uint32_t subtask);
void weir__ctx_destroy(weir_ctx *ctx);
/* Records an operator error in the job with the operator's name. */
int weir__ctx_report(weir_ctx *ctx, int err, const char *what);
/* Checks what callback `what` of ctx returned: 0 to `most`, the values it
 * documents (named by `ok` in the message), come back as they are; a
 * negative WEIR_E* code is reported (weir__ctx_report) and returned; any
 * other value is a misuse of the API (weir/job.h, "What callbacks
 * return"), reported as such and returned as WEIR_EOPERATOR. */
int weir__ctx_result(weir_ctx *ctx, int rc, int most, const char *what, const char *ok);

#endif
