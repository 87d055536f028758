/* task_unaligned.h: a task's part in unaligned checkpoints: taking its cut,
 * recording its channel state, and replaying restored channel state
 * (task_unaligned.c). unaligned.h is the state machine it drives.
 */
#ifndef WEIR_TASK_UNALIGNED_H
#define WEIR_TASK_UNALIGNED_H

#include "batch.h"
#include "chanstate.h"
#include "task.h"
#include "unaligned.h"

/* A task's unaligned state (t->un). */
typedef struct weir__task_un {
  weir__unalign sm;
  uint64_t *scanned; /* per input: ring position scanned for barriers up to */
  uint64_t seen_id;  /* alignment timeout: newest barrier seen, and when */
  uint64_t seen_ns;
  weir__cs_writer cs; /* channel state of sm.cur being recorded */
  /* Restored channel state: input records still to replay before live
   * input (an owned blob and a reader at the next record). */
  uint8_t *replay;
  uint64_t replay_len;
  weir__cs_reader replay_rd;
  void (*replay_release)(uint8_t *, uint64_t);
  weir__batch *replay_batch;
} weir__task_un;

/* At open, after the operators restored: makes t->un if the task needs it,
 * pushes restored output records into their channels and keeps the input
 * records for replay. Returns 0 or an error (reported). */
int weir__task_un_open(weir__task *t);
void weir__task_un_close(weir__task *t);

/* Scans the inputs for barriers and takes the cut that is due (see
 * task_unaligned.c). Returns 1 if it took a cut, 0 if none, -1 if the task
 * failed. */
int weir__task_un_scan(weir__task *t);
static inline int weir__task_un_poll(weir__task *t) {
  return t->job->unaligned ? weir__task_un_scan(t) : 0;
}

/* The unaligned cut of checkpoint id (passed: inputs that delivered it
 * already, or NULL). Returns 0 or an error (the job has been failed). */
int weir__task_un_cut(weir__task *t, uint64_t id, const uint8_t *passed, uint64_t align_ns);
/* The task took the cut of id by other means (an aligned cut). */
static inline void weir__task_un_taken(weir__task *t, uint64_t id) {
  weir__unalign_taken(&t->un->sm, id);
}
/* Unaligned mode: barrier id consumed from regular input idx. Returns 1 if
 * the task failed. */
int weir__task_un_barrier(weir__task *t, uint32_t idx, uint64_t id);
/* End of regular input idx. Returns 1 if the task failed. */
int weir__task_un_ended(weir__task *t, uint32_t idx);

/* Records [from, from + n) of a data batch consumed from input idx go into
 * the channel state if they crossed the cut. */
static inline void weir__task_un_log(weir__task *t, uint32_t idx, const weir__batch *b,
                                     uint32_t from, uint32_t n) {
  if (!t->job->unaligned || !weir__unalign_data(&t->un->sm, idx, n)) return;
  weir__cs_records(&t->un->cs, b, from, from + n);
}

/* A checkpoint is in flight and this task took its cut. */
static inline int weir__task_un_in_flight(const weir__task *t) {
  return t->job->unaligned && t->un->sm.last &&
         t->un->sm.last >= atomic_load_explicit(&t->job->trigger_id, memory_order_relaxed) &&
         t->un->sm.last > atomic_load_explicit(&t->job->complete_id, memory_order_relaxed);
}

/* Restored input records are still to be replayed. */
static inline int weir__task_un_replaying(const weir__task *t) {
  return t->un && t->un->replay;
}
/* The next batch of at most `want` restored input records, or NULL when
 * none is left. */
weir__batch *weir__task_un_replay_next(weir__task *t, uint32_t want);
/* 1 if restored input records remain; else releases them and returns 0. */
int weir__task_un_replay_left(weir__task *t);

#endif
