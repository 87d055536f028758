/* task.h: tasks (one subtask of a chain of operators) and their output
 * routers.
 *
 * A task runs on one worker thread and owns everything below: its contexts,
 * its chain's link batches, its routers' current batches, the producer side
 * of its output channels and the consumer side of its input channels.
 * Beside it: its operators' contexts (task_ctx.h), its unaligned cuts
 * (task_unaligned.h), its loop duties (iteration.h), and what its step
 * offers those files (task_step.h).
 */
#ifndef WEIR_TASK_H
#define WEIR_TASK_H

#include <stdatomic.h>
#include <stdint.h>

#include "align.h"
#include "checkpoint.h"
#include "graph.h"
#include "meter.h"
#include "task_ctx.h"

/* A step of a task ends after the batch that takes it past this much time,
 * and a chain slower than this per batch takes its input in slices of
 * about this much time (task.c). */
#define WEIR__STEP_NS 1000000u
/* How long a stop waits for effects in flight (a sink's commits) before
 * it leaves them to the next run (task.c, held_back). */
#define WEIR__STOP_GRACE_NS 2000000000u
/* A task reading the copy-on-write views of its cut reads about this much
 * at a time between its steps (checkpoint.c, weir__task_read_held). */
#define WEIR__READ_SLICE_NS 100000u

struct weir__task_un;

typedef struct weir__router {
  weir__part part;
  uint32_t n; /* channels, one per consumer subtask (1 for forward) */
  weir__chan **chans;
  struct weir__batch **cur;    /* batch being filled per channel, or NULL */
  uint32_t rr;                 /* rebalance cursor */
  uint32_t max_par;            /* key groups */
  uint16_t *kg_target;         /* hash: key group -> channel index */
  weir__loop *loop;            /* an edge inside a loop: records are counted */
  int64_t loop_inc;            /* counted, not yet published to loop->inflight */
  struct weir__task_trace *tr; /* latency tracing: the task's, or NULL */
} weir__router;

/* A chain's cost per call and per record, fitted from its recent calls
 * (task.c: note_time), and whether its input may be sliced at all. */
typedef struct weir__pace {
  double call_ns, rec_ns;                /* the fit */
  double scatter;                        /* its residual variance */
  double sw, sww, sx, sxx, sy, sxy, syy; /* fading sums over (records, ns) of calls */
  int per_call;                          /* never sliced while set */
  int sliceable;                         /* never sliced unless set */
} weir__pace;

typedef enum { WEIR__TASK_RUNNING, WEIR__TASK_FINISHING, WEIR__TASK_DONE } weir__task_state;

struct weir__task {
  weir_job *job;
  weir__worker *worker;
  uint32_t index, subtask;
  weir__chain *chain;
  uint32_t nops;
  weir_ctx **ops;
  int is_source;
  /* Inputs. */
  uint32_t nin;
  weir__chan **in;
  uint8_t *in_ended;
  uint8_t *in_back;   /* feedback-edge inputs (loop heads) */
  uint8_t *in_loopin; /* inputs inside a loop: consumption is counted */
  uint8_t *in_side;   /* which input of the head operator (weir_connect) */
  int loop_out;       /* some output edge is inside a loop: emissions are counted */
  uint32_t nended, rr;
  uint32_t nregular, nregular_ended; /* inputs that are not feedback edges */
  /* Outputs: routers [0, nmain) take the chain's main emissions, the rest
   * its tail's side outputs (weir_ctx.side_first). */
  uint32_t nrouters, nmain;
  weir__router *routers;
  /* Scheduling (see worker.c). */
  atomic_int queued;
  atomic_int hurry; /* woken by weir__task_wake_first from another worker */
  weir__task *next_run;
  weir__task_state state;
  void *timer;      /* uv_timer_t on the worker's loop */
  uint64_t wake_at; /* a short wait (worker.c): run again at this time, or 0 */
  uint64_t last_flush_ns;
  uint32_t budget_batches;
  uint32_t batch_records;
  /* Slices of slow chains (task.c): records of each input's head batch
   * consumed already; the chain's cost model (a call of n records takes
   * call_ns + rec_ns * n) and the fading sums it is fitted from. */
  uint32_t *in_off;
  weir__pace pace;
  /* Loop heads (iteration_task.c): set when the chain's head is an
   * iteration head. */
  weir__loop *head_loop;
  struct weir__backlog *backlog;
  int replayed; /* a restored back-edge log went into the loop */
  /* The latest checkpoint whose cut this head took while running, so that
   * its state there is a back-edge log. */
  uint64_t log_id;
  /* Synchronous checkpoints: the latest drain marker that came on every
   * regular input (read by the loop's other heads). */
  _Atomic uint64_t sync_ready;
  /* Checkpoints. */
  weir__align align;
  uint64_t ckpt_done; /* latest checkpoint this task snapshotted */
  /* Snapshots whose copy-on-write views this task reads itself, a slice
   * per run once the barrier is forwarded (checkpoint.c,
   * weir__task_read_held): held only while hold_views is set around a
   * cut. held_next is the one being read, by held_rd. */
  struct weir_subtask_snapshot *held_snaps;
  uint32_t nheld, held_cap, held_next;
  weir__cow_reader held_rd;
  uint64_t read_slice_ns; /* the next slice of reading them (task.c) */
  /* Event time (task_time.c): a source's generator, the valve over the
   * inputs (NULL in jobs without event time), the task's clock. */
  struct weir__wmgen *wmgen;
  struct weir__valve *valve;
  int64_t clock;
  /* Timers (task_timers.c): some operator of the chain has them; the
   * processing-time deadline the task's timer is armed for (ms, or
   * INT64_MAX: none). */
  int has_timers;
  int64_t proc_armed;
  int stopped; /* input ends by a stop, not its true end */
  uint64_t held_id;
  int hold_views;
  uint64_t notified; /* latest completion/abort its operators were told */
  /* Effects in flight on an operator's own thread (the last poll said
   * WEIR_POLL_BUSY): the task neither finishes nor counts as told of the
   * final checkpoint until they land. */
  int held;
  int full;          /* an operator's last poll said WEIR_POLL_FULL: no input read */
  int abandoned;     /* a stop stopped waiting for them (task.c, held_back) */
  int final_pending; /* told of the final checkpoint, not yet counted */
  /* Synchronous checkpoints: the latest drain marker this task forwarded
   * (reported drained). */
  uint64_t sync_drained;
  /* Unaligned cuts and restored channel state (task_unaligned.h): NULL
   * unless the job takes unaligned cuts or the task restored channel
   * state. Out of line: its channel-state buffers are kilobytes that the
   * aligned path never reads. */
  struct weir__task_un *un;
  /* Latency tracing (trace.h), or NULL. */
  struct weir__task_trace *tr;
  /* Busy and backpressured time, the clock, for weir_job_metrics
   * (meter.h): counted per step by the task's thread, read by any. */
  weir__meter meter;
};

/* Runs the task for one bounded step. Returns 1 if it should run again soon
 * (more input or budget exhausted), 0 if it waits for a wake-up. */
int weir__task_run(weir__task *t);
/* Opens every operator of the task (on its worker thread). */
int weir__task_open(weir__task *t);
/* Closes operators that were opened. */
void weir__task_close(weir__task *t);

/* worker.c: makes t runnable from any thread (coalesces). */
void weir__task_wake(void *t);
/* worker.c: as weir__task_wake, and t runs next on its worker (moved to
 * the front of its run queue, at once or when the worker takes it from its
 * inbox): a barrier sent ahead of the data then reaches the next task
 * without waiting for the steps of the tasks queued before it. */
void weir__task_wake_first(weir__task *t);
/* worker.c: arm the task's timer to wake it after `us` microseconds. */
void weir__task_wake_after(weir__task *t, uint64_t us);
/* worker.c: nonzero while a wake-up weir__task_wake_after armed has not
 * come yet. */
int weir__task_wake_pending(const weir__task *t);

/* task.c: calls every operator's poll; sets t->held. Returns 0 or the
 * error (reported with the operator's name). */
int weir__task_poll(weir__task *t);

#endif
