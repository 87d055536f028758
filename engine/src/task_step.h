/* task_step.h: what a task's step (task.c) offers the files that hold the
 * task's other concerns: its unaligned cuts (task_unaligned.c) and its loop
 * duties (iteration_task.c). None of it is on the per-record path.
 */
#ifndef WEIR_TASK_STEP_H
#define WEIR_TASK_STEP_H

#include "task.h"

/* Records the task's failure in the job (rc: a WEIR_E* code). */
void weir__task_failed(weir__task *t, int rc);
/* Sends a control event (WEIR__MSG_*, with its value) on every output
 * channel, after every record emitted before it. */
void weir__task_push_control(weir__task *t, uint32_t kind, uint64_t id);
/* Pushes every partly filled output batch into its channel. */
void weir__task_flush_outputs(weir__task *t);
/* Runs every non-empty link of the chain from operator `from` on through
 * its successor, in chain order. Returns 0 or an operator's error. */
int weir__task_chain_flush(weir__task *t, uint32_t from);
/* End of all input: finishes the operators and sends end of input. */
void weir__task_finish(weir__task *t);
/* The cut of checkpoint id at this task (see task.c). Returns 0 or an
 * error (the job has been failed). */
int weir__task_take_checkpoint(weir__task *t, uint64_t id, uint64_t align_ns);
/* Appends a record to channel j of router k (a restored output record). */
void weir__task_route(weir__task *t, uint32_t k, uint32_t j, uint64_t key, int64_t ts, uint64_t id,
                      const void *p, uint32_t len);

static inline int weir__task_sync_mode(const weir__task *t) {
  return t->job->opts.sync_checkpoints;
}

/* Sources (which have no barrier to wait for) and finished tasks answer a
 * triggered checkpoint at once (synchronous checkpoints: once, by
 * forwarding the drain marker or reporting drained). */
static inline int weir__task_pending_trigger(const weir__task *t) {
  uint64_t tr = atomic_load_explicit(&t->job->trigger_id, memory_order_acquire);
  return tr > t->ckpt_done && (!weir__task_sync_mode(t) || tr > t->sync_drained);
}

#endif
