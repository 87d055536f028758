/* checkpoint.h: what checkpoint.c (the task side of checkpoints: snapshots,
 * their writes, notifications, installing restored state) gives the other
 * engine files.
 */
#ifndef WEIR_CHECKPOINT_H
#define WEIR_CHECKPOINT_H

#include <stdint.h>

#include "graph.h"

struct weir_subtask_snapshot;

/* Snapshot every operator of the task for checkpoint id (synchronous copy;
 * the store writes asynchronously and acknowledges to the coordinator).
 * Returns 0 or an error (the job is then failed). */
int weir__task_snapshot(weir__task *t, uint64_t id, uint64_t align_ns);
/* As weir__task_snapshot, for an unaligned cut: the task's channel state
 * (weir__task_write_channels) is one more write the checkpoint must wait
 * for. */
int weir__task_snapshot_unaligned(weir__task *t, uint64_t id, uint64_t align_ns);
/* Reads the views of the snapshots weir__task_snapshot held
 * (t->hold_views) and hands each to the store once read; the caller has
 * forwarded the barrier. weir__task_read_held reads for about budget_ns
 * and returns 1 if more remains (the task reads on at its next run, with
 * its records in between: the pages it writes meanwhile are copied on
 * write); weir__task_write_held reads all that remains. */
int weir__task_read_held(weir__task *t, uint64_t budget_ns);
void weir__task_write_held(weir__task *t);
/* Frees snapshots still held (a task that failed between its cut and
 * forwarding the barrier). */
void weir__task_drop_held(weir__task *t);
/* Writes the task's channel state of checkpoint id (takes the blob over)
 * under its chain head's name + WEIR__CHANNELS_SUFFIX. */
int weir__task_write_channels(weir__task *t, uint64_t id, uint8_t *blob, uint64_t len);
/* The task's unaligned cut of checkpoint id overtook nothing: the
 * checkpoint waits for no channel state from it after all. */
void weir__task_no_channels(weir__task *t, uint64_t id);
/* Synchronous checkpoints: the task drained for checkpoint id (everything
 * before the drain marker processed, the marker forwarded). */
void weir__task_drained(weir__task *t, uint64_t id);
/* The synchronous part of one operator's snapshot (a copy of its managed
 * state plus its snapshot callback's output) into *s. */
int weir__ctx_snapshot(weir_ctx *c, uint64_t id, struct weir_subtask_snapshot *s);
/* A loop head's back-edge log completed: write it as the head operator's
 * state in its checkpoint. */
int weir__head_write_log(weir__task *t);
/* Tell the task's operators about completed / aborted checkpoints they
 * have not heard of. */
int weir__task_notify(weir__task *t);
/* Install a loaded snapshot into ctx (keyed state, then the operator's
 * restore callback). Called on the task's thread after open. */
int weir__ctx_restore(weir_ctx *ctx);
/* In a restore callback: takes the restored blob over instead of copying it
 * (release it with *release(p, len), or weir_free when that is NULL). */
uint8_t *weir__snapshot_take_blob(weir_snapshot_reader *r, uint64_t *len,
                                  void (**release)(uint8_t *, uint64_t));

#endif
