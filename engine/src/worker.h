/* worker.h: worker threads, each driving one libuv loop and a run queue of
 * the tasks assigned to it. */
#ifndef WEIR_WORKER_H
#define WEIR_WORKER_H

#include <stdatomic.h>
#include <uv.h>

#include "graph.h"
#include "trace.h"

struct weir__worker {
  weir_job *job;
  uint32_t index;
  uv_thread_t thread;
  uv_loop_t loop;
  uv_async_t async;
  /* Inbox: tasks woken from other threads (mutex: once per idle period). */
  uv_mutex_t mu;
  weir__task *inbox_head, *inbox_tail;
  atomic_uint inbox_n;
  atomic_int sleeping; /* in uv_run: a waker sends the async */
  /* Napping until short_min on cv (under mu): a waker signals cv. */
  uv_cond_t cv;
  int napping;
  /* Short waits (worker.c): the earliest wake_at of its tasks, or 0. */
  uint64_t short_min;
  atomic_int stop; /* 1: stop (the wake-up may be under way), 2: the wake-up was sent */
  /* Run queue: touched only by this worker's thread. */
  weir__task *rq_head, *rq_tail;
  uint32_t ntasks;
  weir__task **tasks;
  uv_barrier_t *quiesce; /* shared by the job's workers */
  /* Where its time went (this worker's thread writes them; read after the
   * join): logged at debug level when the job ends. */
  uint64_t started_ns, ended_ns, spin_ns, sleep_ns, sleeps;
  weir__worker_trace *tr; /* latency tracing (trace.h), or NULL */
};

/* Creates the job's workers (loops, handles) and starts their threads; each
 * opens its tasks, then runs them. Called by the coordinator. */
int weir__workers_start(weir_job *job);
/* Tells every worker to stop; they quiesce together, close their tasks and
 * handles, and exit. Coordinator thread only, once. */
void weir__workers_stop(weir_job *job);
/* Joins and frees the workers. */
void weir__workers_join(weir_job *job);

#endif
