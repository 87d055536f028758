/* coordinator.h: the checkpoint coordinator as a pure state machine (see
 * coordinator.c for the diagram).
 *
 * The machine owns the checkpoint in flight (one at a time) and the count
 * of checkpoints failed in a row. It is fed events and answers with
 * actions; it never blocks, sleeps, reads a clock or calls the store. Its
 * events come from three kinds of threads: the coordinator thread (job.c:
 * trigger, step, timeout, abort, declined), the tasks (checkpoint.c: cuts,
 * writes queued, drained) and the store's writer (checkpoint.c, job.c:
 * writes and the commit answered); the caller serialises them (the job's
 * ck_mu). Events from the tasks and the store only count: they return
 * nonzero when the coordinator thread has something to do (wake it up and
 * call weir__coord_step), which then carries out the transition there.
 */
#ifndef WEIR_COORDINATOR_H
#define WEIR_COORDINATOR_H

#include <stdint.h>

typedef enum {
  WEIR__CK_IDLE = 0,   /* no checkpoint in flight */
  WEIR__CK_DRAINING,   /* synchronous: drain markers sent, tasks draining */
  WEIR__CK_WRITING,    /* barriers sent: cuts taken, their states queued */
  WEIR__CK_FAILING,    /* a write failed: waiting for every write to answer */
  WEIR__CK_COMMITTING, /* every write queued, the commit queued behind them */
  WEIR__CK_COMMITTED,  /* the store answered the commit: to be reported */
} weir__ck_state;

/* The checkpoint in flight. */
typedef struct weir__ck_pending {
  uint64_t id;
  int final;
  /* Writes the checkpoint must hold, writes queued at the store, and
   * acknowledgements (writes durable, or failed). */
  uint32_t expected, handed, acks, failed;
  int status;        /* first write error */
  int commit_status; /* the commit's answer */
  uint64_t bytes;
  uint64_t trigger_ns; /* monotonic */
  int64_t trigger_ms;  /* wall clock */
  uint64_t align_ns;   /* longest alignment (synchronous: the drain) */
  uint32_t drained;    /* synchronous: tasks that drained */
  /* Unaligned cuts taken for it, and bytes of channel state they recorded
   * (input and output records, before the store's envelopes). */
  uint32_t unaligned;
  uint64_t channel_bytes;
  /* Of expected: acknowledgements operators give later
   * (weir_ctx_snapshot_ack), which write nothing to the store. */
  uint32_t later;
  char why[768]; /* the store's message for the first failure */
} weir__ck_pending;

typedef struct weir__coord {
  weir__ck_state state;
  weir__ck_pending ck;
  /* Fixed for the run. */
  uint32_t writes; /* operator subtasks: writes of an aligned checkpoint */
  uint32_t ntasks; /* tasks that report drained (synchronous checkpoints) */
  int sync;
  int tolerated; /* failures in a row tolerated, or WEIR_TOLERATE_ANY */
  /* Across checkpoints (the coordinator thread's). */
  uint32_t failures;      /* failed in a row */
  uint64_t restore_point; /* latest completed, or restored from; 0: none */
  int final_triggered;    /* the final checkpoint is in flight or done */
  int retry_wait;         /* a failed final checkpoint waits for its retry */
} weir__coord;

/* Actions, for the caller to carry out in this order. */
enum {
  /* Publish the trigger, wake every task (sources first), start the
   * timeout (and, synchronous, the drain's wake-ups). */
  WEIR__CA_BARRIERS = 1u << 0,
  /* Synchronous: every task drained; stop the drain's wake-ups, tell the
   * tasks to snapshot now. */
  WEIR__CA_SNAPSHOT = 1u << 1,
  /* Every write queued: queue the commit (act.ck has its figures). */
  WEIR__CA_COMMIT = 1u << 2,
  /* The commit is durable: stop the timeout, record and publish it. */
  WEIR__CA_COMPLETE = 1u << 3,
  /* Stop the timers, abort act.ck.id at the store (act.status, act.why,
   * and act.ck.why as the store's message, if any), publish the abort and
   * report it with weir__coord_declined (unless the lease was lost). */
  WEIR__CA_ABORT = 1u << 4,
  /* Wake every task: they tell their operators (sinks commit or roll
   * back) and paused sources run again. */
  WEIR__CA_NOTIFY = 1u << 5,
  /* The failure is tolerated: log act.msg as a warning. */
  WEIR__CA_DECLINE = 1u << 6,
  /* Beyond the tolerance: fail the job with act.status and act.msg. */
  WEIR__CA_FAIL = 1u << 7,
  /* The final checkpoint failed: trigger it again after one interval
   * (then call weir__coord_retry_due). */
  WEIR__CA_RETRY = 1u << 8,
};

typedef struct weir__coord_act {
  unsigned what;       /* WEIR__CA_* */
  weir__ck_pending ck; /* the checkpoint acted on */
  int status;          /* ABORT: its error (0: none); FAIL: the job's */
  const char *why;     /* ABORT: what failed */
  char msg[1024];      /* DECLINE, FAIL */
} weir__coord_act;

/* writes: operator subtasks; ntasks: tasks; sync: synchronous checkpoints;
 * tolerable: the run option (0 = the default); restored_from: the restore
 * point before any checkpoint completes (0: none). */
void weir__coord_init(weir__coord *co, uint32_t writes, uint32_t ntasks, int sync, int tolerable,
                      uint64_t restored_from);

/* ---- the coordinator thread --------------------------------------------- */

/* Nonzero if a checkpoint may start now: none in flight, the final one
 * not triggered yet, and (final) no failed final one waiting for its
 * retry. */
int weir__coord_may_trigger(const weir__coord *co, int final);
/* Starts checkpoint id (reserved at the store) at now_ns (monotonic) and
 * now_ms (wall clock): BARRIERS. WEIR_ESTATE if one is in flight: one at a
 * time (see weir__coord_may_trigger). */
int weir__coord_trigger(weir__coord *co, uint64_t id, int final, uint64_t now_ns, int64_t now_ms,
                        weir__coord_act *act);
/* The coordinator woke up: the transition due, if any (SNAPSHOT, COMMIT,
 * COMPLETE | NOTIFY, or ABORT | NOTIFY). */
void weir__coord_step(weir__coord *co, uint64_t now_ns, weir__coord_act *act);
/* The checkpoint timeout fired: ABORT | NOTIFY unless its commit is
 * queued already (the store finishes it then). */
void weir__coord_timeout(weir__coord *co, weir__coord_act *act);
/* The coordinator cannot go on with the checkpoint in flight (its commit
 * could not be queued, a failpoint): ABORT | NOTIFY with status, why and,
 * unless a write's message came first, detail. */
void weir__coord_abort(weir__coord *co, int status, const char *why, const char *detail,
                       weir__coord_act *act);
/* Checkpoint id (0: one that could not start) failed for `why` (the
 * store's `detail`, may be NULL): counted against the tolerance. DECLINE
 * (and RETRY for a final one) within it, FAIL beyond, with the message. */
void weir__coord_declined(weir__coord *co, uint64_t id, int final, const char *why,
                          const char *detail, weir__coord_act *act);
/* The final checkpoint's retry is due. */
void weir__coord_retry_due(weir__coord *co);

/* ---- tasks and the store: nonzero when weir__coord_step has work -------- */

/* Synchronous: a task drained for checkpoint id. */
int weir__coord_drained(weir__coord *co, uint64_t id);
/* A task took its cut of id after aligning for align_ns; an unaligned cut
 * has one more write to wait for, its channel state. */
void weir__coord_cut(weir__coord *co, uint64_t id, uint64_t align_ns, int unaligned);
/* An unaligned cut recorded `bytes` of channel state. */
void weir__coord_channel_bytes(weir__coord *co, uint64_t id, uint64_t bytes);
/* An unaligned cut overtook nothing: no channel state after all. */
int weir__coord_no_channels(weir__coord *co, uint64_t id);
/* An operator's snapshot of id is acknowledged later (weir_ctx_snapshot_ack):
 * one more answer to wait for, counted before the task's writes are
 * queued (as an unaligned cut's channel state), so the commit cannot
 * start first. */
void weir__coord_ack_later(weir__coord *co, uint64_t id);
/* One write of id was queued at the store. */
int weir__coord_queued(weir__coord *co, uint64_t id);
/* One write of id answered: durable (status 0, `bytes` written) or failed
 * (status < 0, the store's message in detail). */
int weir__coord_written(weir__coord *co, uint64_t id, int status, uint64_t bytes,
                        const char *detail);
/* The commit answered (detail: the store's message when it failed). */
int weir__coord_committed(weir__coord *co, int status, const char *detail);

/* Nonzero if every invariant (coordinator.c) holds. */
int weir__coord_check(const weir__coord *co);

#endif
