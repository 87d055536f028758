/* iteration_task.c: owns a loop's work inside its tasks: the duties of an
 * iteration head's task (its back-edge log over a checkpoint, the restored
 * log's replay, which input it reads, the loop's barriers once its external
 * input ended, synchronous drain markers, and finishing when the loop
 * drained), and the count of records in flight that every task inside a
 * loop keeps. iteration.c has the protocol and its invariants, the head
 * operator and the back-edge log's state machine.
 */
#include "iteration.h"

#include "base/alloc.h"
#include "base/assert.h"
#include "base/failpoint.h"
#include "task_step.h"

/* ---- records in flight -------------------------------------------------------- */

void weir__loop_publish(weir__router *r) {
  if (r->loop_inc) {
    atomic_fetch_add(&r->loop->inflight, r->loop_inc);
    r->loop_inc = 0;
  }
}

static void wake_heads(weir__loop *l) {
  for (uint32_t i = 0; i < l->nheads; i++) weir__task_wake(l->heads[i]);
}

int weir__loop_drained(weir__loop *l) {
  return atomic_load(&l->ext_done) == l->nheads && atomic_load(&l->inflight) == 0;
}

void weir__loop_publish_all(weir__task *t) {
  for (uint32_t k = 0; k < t->nrouters; k++)
    if (t->routers[k].loop) weir__loop_publish(&t->routers[k]);
}

void weir__loop_consumed(weir__task *t, uint64_t n) {
  weir__loop_publish_all(t);
  weir__loop *l = t->ops[0]->node->loop;
  int64_t left = atomic_fetch_sub(&l->inflight, (int64_t)n) - (int64_t)n;
  WEIR_ASSERT(left >= 0);
  if ((left == 0 && weir__loop_drained(l)) || (left < l->admit && left + (int64_t)n >= l->admit))
    wake_heads(l); /* drained, or room to admit external input again */
}

void weir__loop_ext_done(weir__loop *l) {
  atomic_fetch_add(&l->ext_done, 1);
  if (weir__loop_drained(l)) wake_heads(l);
}

/* ---- the head's task ----------------------------------------------------------- */

void weir__head_open(weir__task *t) {
  if (t->backlog) return;
  t->backlog = weir_calloc(1, sizeof *t->backlog);
  uint64_t bound = t->job->opts.loop_memory_bytes;
  weir__backlog_init(t->backlog, t->nin, t->in_back, bound == UINT64_MAX ? 0 : bound,
                     t->job->opts.spill_dir);
}

void weir__head_close(weir__task *t) {
  if (!t->backlog) return;
  weir__backlog_close(t->backlog);
  weir_free(t->backlog);
  t->backlog = NULL;
}

int weir__head_admits(weir__task *t) {
  /* (Not while a checkpoint waits on the external inputs: records held
   * on a blocked edge stay in flight, and would hold the barrier back.
   * That includes a barrier not read yet: with a body behind a hash edge,
   * the body aligns on every head, so one head's barrier queued behind
   * admission-limited input blocks the others' records in the body, which
   * keeps the count at the limit.) */
  return t->align.cur || t->backlog->nearly || weir__task_pending_trigger(t) ||
         atomic_load(&t->head_loop->inflight) < t->head_loop->admit;
}

int weir__head_log_start(weir__task *t, uint64_t id) {
  if (weir__backlog_start(t->backlog, id) == WEIR__LOG_COMPLETE) return weir__head_write_log(t);
  if (weir_failpoint("iter.log_open")) return WEIR_ECKPT; /* a back-edge log is open */
  return 0;
}

void weir__head_ready(weir__task *t, uint64_t id) {
  atomic_store(&t->sync_ready, id);
  weir__loop *l = t->head_loop;
  for (uint32_t i = 0; i < l->nheads; i++)
    if (l->heads[i] != t) weir__task_wake(l->heads[i]);
}

/* Synchronous checkpoints: forwards the drain marker into the loop once
 * every head of the loop has it and nothing is in flight inside (nothing
 * can enter any more, so the loop stays empty); a marker of a checkpoint
 * that already ended goes on at once. Returns 1 if the task failed. */
static int head_sync(weir__task *t) {
  uint64_t id = atomic_load_explicit(&t->sync_ready, memory_order_relaxed);
  if (!id || id <= t->sync_drained || t->state != WEIR__TASK_RUNNING) return 0;
  weir__loop *l = t->head_loop;
  if (id > atomic_load(&t->job->resume_id)) {
    for (uint32_t i = 0; i < l->nheads; i++)
      if (atomic_load(&l->heads[i]->sync_ready) < id) return 0; /* it wakes us when ready */
    /* The count has no waiters to wake: the coordinator wakes every task
     * each millisecond while a synchronous checkpoint drains (job.c). */
    if (atomic_load(&l->inflight) != 0) return 0;
  }
  if (weir__task_take_checkpoint(t, id, 0)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

int weir__head_aligned(weir__task *t, uint64_t id) {
  weir__head_ready(t, id);
  /* Tests: the other heads may act on this one's readiness meanwhile. */
  (void)weir_failpoint("iter.head_ready");
  return head_sync(t);
}

int weir__head_duties(weir__task *t) {
  if (!t->replayed) {
    int rc = weir__head_replay(t->ops[0], (uint64_t)t->budget_batches * t->batch_records);
    if (rc >= 0) {
      int frc = weir__task_chain_flush(t, 0);
      if (frc) rc = frc;
      weir__loop_publish_all(t);
    }
    if (rc < 0) {
      weir__task_failed(t, rc);
      return 1;
    }
    if (rc > 0) return 2;
    t->replayed = 1;
  }
  if (weir__task_sync_mode(t)) {
    uint64_t tr = atomic_load(&t->job->trigger_id);
    if (t->nregular_ended == t->nregular && weir__task_pending_trigger(t) &&
        atomic_load_explicit(&t->sync_ready, memory_order_relaxed) < tr)
      weir__head_ready(t, tr); /* no marker will come on an external input */
    if (head_sync(t)) return 1;
  }
  if (t->nregular_ended < t->nregular) return 0;
  if (!weir__task_sync_mode(t) && weir__task_pending_trigger(t) && !t->backlog->id) {
    /* No barrier will come on an external input: inject it, as a source. */
    if (weir__task_take_checkpoint(t, atomic_load(&t->job->trigger_id), 0)) {
      weir__task_failed(t, WEIR_ECKPT);
      return 1;
    }
  }
  if (weir__loop_drained(t->head_loop)) {
    weir__task_finish(t);
    return 1;
  }
  return 0;
}

int weir__head_back_barrier(weir__task *t, uint32_t idx, uint64_t id) {
  weir__log_result lr = weir__backlog_barrier(t->backlog, idx, id);
  if (lr == WEIR__LOG_COMPLETE && weir__head_write_log(t)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return lr == WEIR__LOG_BLOCK && t->nregular_ended == t->nregular && weir__head_duties(t) == 1;
}

int weir__head_back_ended(weir__task *t, uint32_t idx) {
  if (weir__backlog_end(t->backlog, idx) == WEIR__LOG_COMPLETE && weir__head_write_log(t)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}
