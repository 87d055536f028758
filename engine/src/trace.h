/* trace.h: where records wait, per hop (weir_run_opts.trace_latency;
 * docs/latency.md). Off by default, and then nothing here runs: every hook
 * is behind a NULL check of the task's, router's or worker's trace.
 *
 * A batch carries the times of its own hop (its first record appended,
 * the batch published on its channel) and the path its first record took
 * to get here: one weir__hop per earlier hop. The task that takes a batch
 * stamps the pick, and a batch it starts while processing one inherits
 * that path plus this hop; a chain that ends in a sink closes the path:
 * from the first append at the source to the end of the sink's call, the
 * path telescopes into the waits of each hop (fill, queue, processing).
 * A worker keeps a ring of what it ran and when it slept, so that a long
 * queue wait is attributed to the worker's sleep, its other tasks, the
 * task itself, or time the thread did not run at all. */
#ifndef WEIR_TRACE_H
#define WEIR_TRACE_H

#include <stdatomic.h>
#include <stdint.h>

#define WEIR__TRACE_HOPS 8u
#define WEIR__TRACE_RING 4096u
#define WEIR__TRACE_WORST 8u

/* One hop of a record: the batch it travelled in, and who took it. */
typedef struct weir__hop {
  uint64_t born;   /* first record appended to the batch (ns, monotonic) */
  uint64_t pushed; /* the batch published on its channel */
  uint64_t picked; /* its consumer began to process it */
  uint32_t task, worker;
  /* Between pushed and picked, on the consumer's worker: asleep, woken
   * but not yet running (the system's wake-up latency), running the
   * consumer itself, running other tasks (the longest: top_task for
   * top_us), in microseconds; the rest the thread did not run inside a
   * step, or the worker's own overhead, or older than the worker's ring. */
  uint32_t asleep_us, waking_us, self_us, other_us, top_us;
  int32_t top_task;
} weir__hop;

/* What a data batch carries when tracing. */
typedef struct weir__batch_trace {
  uint64_t born, pushed;
  uint32_t npath;
  weir__hop path[WEIR__TRACE_HOPS];
} weir__batch_trace;

/* A worker's activity: task steps, sleeps and spins, newest last. */
enum { WEIR__SLICE_ASLEEP = -1, WEIR__SLICE_SPIN = -2, WEIR__SLICE_WAKING = -3 };
typedef struct weir__slice {
  uint64_t start, end;
  int32_t task; /* a task index, or WEIR__SLICE_* */
} weir__slice;

typedef struct weir__worker_trace {
  /* Set by the first waker of a sleeping worker, taken by the worker when
   * it runs again: the time between is the system's, not weir's. */
  _Atomic uint64_t woken_at;
  uint64_t step_start; /* of the task step under way */
  uint32_t next;       /* ring position of the next slice */
  weir__slice ring[WEIR__TRACE_RING];
} weir__worker_trace;

struct weir__batch;
struct weir__task;
struct weir_job;

typedef struct weir__task_trace weir__task_trace;
typedef struct weir__job_trace weir__job_trace;

/* Job: the merged traces of its tasks, kept after the run for the report
 * (weir_job_hop_quantile, weir_job_write_latency). */
weir__job_trace *weir__trace_job_create(uint32_t nnodes, uint32_t ntasks);
void weir__trace_job_destroy(weir__job_trace *jt);

/* Task: created at open, merged into the job's and freed at close. */
weir__task_trace *weir__trace_task_create(void);
void weir__trace_task_close(struct weir__task *t);

static inline void weir__trace_slice(weir__worker_trace *wt, int32_t task, uint64_t start,
                                     uint64_t end) {
  weir__slice *s = &wt->ring[wt->next++ % WEIR__TRACE_RING];
  s->start = start;
  s->end = end;
  s->task = task;
}

/* A batch was started (its first record is about to be appended). */
void weir__trace_born(weir__task_trace *tt, struct weir__batch *b);
/* The task took data batch b, `from` records of it consumed before. */
void weir__trace_pick(struct weir__task *t, const struct weir__batch *b, uint32_t from,
                      uint64_t now);
/* ... and processed n records of it (the call ended at `now`). */
void weir__trace_done(struct weir__task *t, const struct weir__batch *b, uint32_t n, uint64_t now);

#endif
