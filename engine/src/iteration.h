/* iteration.h: loops (iterations) at run time: the head operator, the
 * count of records in flight, and back-edge logging (ABS Algorithm 2).
 * See iteration.c for the protocol and its invariants. */
#ifndef WEIR_ITERATION_H
#define WEIR_ITERATION_H

#include <stdint.h>

#include "graph.h"

struct weir__batch;
struct weir__router;
struct weir_subtask_snapshot;

/* The head operator: forwards every record unchanged. */
extern const weir_operator_vt weir__head_vt;

/* ---- back-edge log: a pure state machine ---------------------------------- */

typedef struct weir__backlog {
  uint32_t nin;
  uint8_t *back;   /* 1 for back-edge inputs */
  uint8_t *state;  /* per back input: 0 logging, 1 barrier returned, 2 ended */
  uint64_t *early; /* barrier that came back before the head's snapshot, 0 if none */
  uint32_t nearly;
  uint32_t nback, nclosed;
  uint64_t id;   /* checkpoint being logged, 0 if none */
  uint64_t last; /* latest checkpoint this head snapshotted */
  /* Logged records, [key u64][ts i64][id u64][len u32][payload] each:
   * the first spilled bytes in the spill file, the rest in `log`. */
  uint8_t *log;
  uint64_t mem, cap;     /* bytes in `log`, allocated */
  uint64_t len, records; /* the whole log */
  uint64_t spill_after;  /* memory bound before spilling; 0 = never */
  const char *spill_dir;
  struct weir__spill *spill;
  uint64_t spilled;
} weir__backlog;

typedef enum {
  WEIR__LOG_NONE = 0,
  WEIR__LOG_COMPLETE = 1, /* every back edge closed: write the log */
  WEIR__LOG_BLOCK = 2     /* barrier before the head's snapshot: block the edge */
} weir__log_result;

/* spill_after: bytes kept in memory before the log continues in a spill
 * file in spill_dir (0 = never). */
void weir__backlog_init(weir__backlog *l, uint32_t nin, const uint8_t *back, uint64_t spill_after,
                        const char *spill_dir);
void weir__backlog_close(weir__backlog *l);
/* The head took its snapshot for checkpoint id (its regular inputs
 * aligned): logging starts on every back input that has not ended. A log
 * still open for an older checkpoint is dropped (that checkpoint was given
 * up). Returns COMPLETE at once if no back input is open. */
weir__log_result weir__backlog_start(weir__backlog *l, uint64_t id);
/* Input blocked by an early barrier: see weir__backlog_barrier. */
/* Nonzero if back input i delivered a barrier the head has not snapshotted
 * for yet: what follows it is after the cut, so it waits. */
static inline int weir__backlog_blocked(const weir__backlog *l, uint32_t i) {
  return l->early && l->early[i] != 0;
}
/* Nonzero if a record arriving on input i now must be logged. */
static inline int weir__backlog_logging(const weir__backlog *l, uint32_t i) {
  return l->id && l->back[i] && l->state[i] == 0;
}
void weir__backlog_append(weir__backlog *l, uint64_t key, int64_t ts, uint64_t id,
                          const void *payload, uint32_t len);
/* Appends records [from, from + n) of data batch b. */
void weir__backlog_batch(weir__backlog *l, const struct weir__batch *b, uint32_t from, uint32_t n);
/* Barrier `id` came back on back input i. Returns BLOCK when it came
 * before the head's own snapshot for `id` (a parallel head elsewhere in the
 * loop forwarded it first): the edge is then blocked until
 * weir__backlog_start(id), which closes it with nothing logged. */
weir__log_result weir__backlog_barrier(weir__backlog *l, uint32_t i, uint64_t id);
/* End of input on back input i. */
weir__log_result weir__backlog_end(weir__backlog *l, uint32_t i);
/* After COMPLETE: hands over the log and returns to idle. The caller
 * releases it with *release(log, len) (mapped from a spill file) or
 * weir_free when *release is NULL. NULL with *len > 0 means a spilled log
 * could not be read back (*err says why). */
uint8_t *weir__backlog_take(weir__backlog *l, uint64_t *len, void (**release)(uint8_t *, uint64_t),
                            int *err);

/* ---- records in flight (iteration_task.c) --------------------------------------- */

/* Adds what router r counted to its loop before a batch becomes visible. */
void weir__loop_publish(struct weir__router *r);
/* A task processed a batch from outside its loop (a head's external input):
 * what it emitted into the loop counts from now on, also while it waits in
 * an output batch not pushed yet. Heads compare the count with zero before
 * they let a synchronous drain marker into the loop, and take the loop for
 * drained at the end of input when it is zero. */
void weir__loop_publish_all(weir__task *t);
/* A task consumed n records from in-loop inputs and emitted what it did:
 * publishes its routers' counts, then takes the n away; wakes the heads if
 * the loop drained. */
void weir__loop_consumed(weir__task *t, uint64_t n);
/* A head subtask's external inputs all ended. */
void weir__loop_ext_done(weir__loop *l);
/* Nonzero once every external input ended and nothing is in flight. */
int weir__loop_drained(weir__loop *l);

/* ---- the head's task (iteration_task.c) ---------------------------------------- */

/* At the task's open and close: the head's back-edge log. */
void weir__head_open(weir__task *t);
void weir__head_close(weir__task *t);
/* Nonzero if the head reads its external inputs now, not only its feedback
 * edges: the loop drains before more work enters it, which keeps the
 * unbounded feedback queues (and the back-edge logs, and the time a barrier
 * takes round the loop) small, and lets backpressure reach the sources. */
int weir__head_admits(weir__task *t);
/* Replays a restored back-edge log before any new input, acts as the
 * loop's source of barriers once its external inputs ended, and finishes
 * the task when the loop drained. Returns 1 if the step must end here, 2 if
 * part of the log is still to be replayed, 0 otherwise. */
int weir__head_duties(weir__task *t);
/* The head took its cut of checkpoint id and forwarded the barrier: it
 * logs its feedback edges until the barrier is back. Returns 0 or an
 * error. */
int weir__head_log_start(weir__task *t, uint64_t id);
/* Barrier id, or end of input, on feedback input idx. Return 1 if the step
 * must end here. */
int weir__head_back_barrier(weir__task *t, uint32_t idx, uint64_t id);
int weir__head_back_ended(weir__task *t, uint32_t idx);
/* Synchronous checkpoints: drain marker id came on every regular input (or
 * they ended); tells the loop's other heads. */
void weir__head_ready(weir__task *t, uint64_t id);
/* Synchronous checkpoints: the head aligned on drain marker id. Returns 1
 * if the task failed. */
int weir__head_aligned(weir__task *t, uint64_t id);

/* ---- restore ------------------------------------------------------------------- */

/* Emits up to max records of a restored back-edge log into the loop (head
 * task, before any new input; a step at a time, so a large log flows at the
 * pace the loop takes it). Returns 1 if more remain, 0 when the log is
 * done, or an error. */
int weir__head_replay(weir_ctx *head, uint64_t max);

#endif
