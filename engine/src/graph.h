/* graph.h: the logical job graph as the builder makes it, and the job
 * object that owns it and its run.
 *
 * Nodes are sources, operators and sinks; edges carry a partitioning. A
 * stream is the builder's handle: one or more (node, partitioning) outputs
 * (several after weir_union). Freezing turns the graph into a plan (see
 * plan.c): chains of nodes joined by forward edges become tasks, one per
 * subtask, and every other edge becomes channels.
 */
#ifndef WEIR_GRAPH_H
#define WEIR_GRAPH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "coordinator.h"
#include "history.h"
#include "restore.h"
#include "savepoint.h"
#include "snapshot/store.h"
#include "weir/job.h"

typedef enum {
  WEIR__PART_FORWARD,
  WEIR__PART_HASH,
  WEIR__PART_BROADCAST,
  WEIR__PART_REBALANCE
} weir__part;
typedef enum { WEIR__NODE_SOURCE, WEIR__NODE_OP, WEIR__NODE_SINK } weir__node_kind;

typedef struct weir__node weir__node;
typedef struct weir__task weir__task;
typedef struct weir__worker weir__worker;
typedef struct weir__chan weir__chan;

typedef struct weir__edge {
  weir__node *from, *to;
  weir__part part;
  uint32_t port; /* 0: the main output of `from`; k: its k-th side output */
  uint8_t side;  /* which input of `to` (weir_connect: 0 or 1) */
  int back;      /* a feedback edge, closing an iteration */
  int in_loop;   /* both ends inside the same loop (set by the plan) */
} weir__edge;

/* An iteration: a head node, its feedback edges, and (after freezing) the
 * count of records in flight inside the loop (see iteration.c). */
typedef struct weir__loop {
  weir__node *head;
  int closed;
  _Atomic int64_t inflight;
  atomic_uint ext_done; /* head subtasks whose external inputs all ended */
  atomic_int done;      /* the loop drained: heads send end of input */
  uint32_t nheads;
  weir__task **heads;
  int64_t admit; /* heads read external input only below this many in flight */
} weir__loop;

struct weir__node {
  uint32_t index;
  char *name;
  weir__node_kind kind;
  /* The callbacks: NULL, or the node's own copy of the caller's table
   * (base/vtable.h), so that a table of another ABI's size reads right. */
  const weir_operator_vt *ovt;
  const weir_source_vt *svt;
  union {
    weir_operator_vt op;
    weir_source_vt src;
  } vt;
  void *arg;
  /* Sources: the watermark strategy (weir_with_watermarks), if has_wms. */
  int has_wms;
  weir_watermark_strategy wms;
  /* Sources: a subtask returned WEIR_SOURCE_IDLE without a wake-up, and
   * that was logged (task.c, once per source: any subtask's thread). */
  atomic_int idle_warned;
  int parallelism;   /* 0 until frozen when the user said "default" */
  int keyed;         /* side 0 hash-partitioned, side 1 hashed or broadcast */
  int two_inputs;    /* weir_connect: in edges of side 1 too */
  int bcast_in2;     /* weir_connect: every side-1 edge broadcasts (broadcast state) */
  uint32_t op_flags; /* WEIR_OP_* declared by weir_process_opts */
  /* Side outputs it declared (port k + 1 is tags[k]), and the names of
   * their drop counters ("dropped:<tag>"); owned by the node. */
  uint32_t ntags;
  char **tags, **drop_names;
  uint32_t nin, nout;
  weir__edge **in, **out;
  weir__loop *head_of; /* the loop this node is the head of, or NULL */
  weir__loop *loop;    /* the loop this node is inside (plan), or NULL */
  /* Plan: */
  uint32_t chain;     /* index of the chain (task group) it runs in */
  uint32_t chain_pos; /* position inside the chain */
  weir_ctx **ctx;     /* per subtask */
  /* Identity (identity.c), set on the thread that runs the job before it
   * runs, read-only afterwards: the destination of a sink (NULL: none),
   * and the destination a restore moves it from (NULL: not moved). */
  weir_destination *dest;
  char *moved_from;
  /* The version of the operator's state (weir_operator_state_version),
   * stored with every snapshot of it. */
  uint32_t state_version;
};

/* n's declared side outputs as "a, b, c" into buf ("" if none). */
void weir__node_tags(const weir__node *n, char *buf, size_t len);

typedef struct weir__stream_out {
  weir__node *node;
  weir__part part;
  uint32_t port; /* which output of node: 0 main, k the k-th side output */
} weir__stream_out;

struct weir_stream {
  weir_job *job;
  struct weir_stream *next_alloc; /* the job's list of streams */
  uint32_t n;
  weir__stream_out out[];
};

/* Barrier handling of a run (weir_job.unaligned). */
enum { WEIR__UNALIGNED_ALWAYS = 1, WEIR__UNALIGNED_TIMEOUT = 2 };

/* Suffix of the operator name under which a task's channel state is stored
 * (its chain head's name + this; graph.c refuses operator names with it). */
#define WEIR__CHANNELS_SUFFIX WEIR_STORE_CHANNELS_SUFFIX

typedef struct weir__adopted {
  void *p;
  void (*free_fn)(void *);
} weir__adopted;

typedef struct weir__chain {
  uint32_t nnodes;
  weir__node **nodes;
  int parallelism;
} weir__chain;

/* The physical plan weir__plan_freeze makes of the graph (plan.c): chains
 * of operators, each chain's subtasks as tasks, the channels between
 * tasks, the workers that run them. Owned by the job from the freeze to
 * weir__plan_free. */
typedef struct weir__plan {
  uint32_t nchains;
  weir__chain *chains;
  uint32_t ntasks;
  weir__task **tasks;
  uint32_t nchans;
  weir__chan **chans;
  uint32_t nworkers;
  weir__worker **workers;
} weir__plan;

struct weir_job {
  char *name;
  /* Builder. */
  int build_err;
  uint32_t nnodes, nedges;
  weir__node **nodes;
  weir__edge **edges;
  weir_stream *streams;
  uint32_t nadopted;
  weir__adopted *adopted;
  uint32_t nloops;
  weir__loop **loops;
  /* Operators of other stages than the one weir_job_cut kept (cut.c). */
  uint32_t ndropped;
  weir__node **dropped;
  int cut; /* weir_job_cut kept one stage */
  /* weir_job_cut kept one task of it: subtasks report themselves as
   * subtask task * p + i of p * tasks (ctx.c); tasks = 0: as they are. */
  uint32_t task, tasks;
  /* Plan (after freeze). */
  atomic_int planned; /* the operators' contexts exist (read their counts) */
  weir_run_opts opts;
  weir__plan plan;
  int ran;
  /* Run state shared across threads. */
  atomic_int stopping;      /* sources end (graceful stop) */
  _Atomic uint64_t stop_ns; /* when stopping was set (monotonic) */
  atomic_int stop_requests; /* weir_job_stop() calls */
  atomic_int drain;         /* weir_job_drain(): a stop ends the input for good */
  atomic_int draining;      /* the stop under way is a drain (set with stopping) */
  atomic_int signals;       /* SIGINT/SIGTERM while the run owns them */
  atomic_int last_signal;   /* the latest of them */
  int owns_signals;         /* this run installed the handler (job.c) */
  atomic_int failed;        /* first error code, 0 if none */
  atomic_uint tasks_done;
  atomic_int coord_alive;
  atomic_int senders; /* threads inside uv_async_send on coord_async */
  void *coord_async;  /* uv_async_t of the coordinator loop while alive */
  pthread_mutex_t err_mu;
  char errmsg[1024];
  uint64_t start_ns, end_ns;
  /* Checkpoints (see coordinator.c). The ids below are published by the
   * coordinator thread and read by tasks; `coord` is fed events by the
   * coordinator thread, the tasks and the store writer, under ck_mu. */
  struct weir_store *store;
  struct weir_lease *lease;     /* ownership of state_dir (lease.c) */
  _Atomic uint64_t trigger_id;  /* latest checkpoint triggered */
  _Atomic uint64_t complete_id; /* latest checkpoint completed */
  _Atomic uint64_t aborted_id;  /* latest checkpoint aborted */
  _Atomic uint64_t final_id;    /* the final checkpoint's id, once triggered */
  /* Synchronous checkpoints (see job.c): every task drained for sync_snap_id,
   * so tasks snapshot it now; sources paused for a checkpoint above
   * resume_id run again once it reaches that checkpoint. */
  _Atomic uint64_t sync_snap_id;
  _Atomic uint64_t resume_id;
  atomic_uint final_notified; /* tasks told that the final one completed */
  pthread_mutex_t ck_mu;
  weir__coord coord;
  weir_run_info info;
  weir__history history; /* completed checkpoints (history.c) */
  weir__restore_stats restore;
  _Atomic uint64_t cow_copies; /* pages copied for views, by closed tasks */
  int recover_only; /* a finished job: only tell operators its last checkpoint completed */
  /* The restore goes back: the job had completed this later checkpoint
   * (weir_ctx_rewound_from), 0: not a rewind. */
  uint64_t rewound_from;
  uint64_t restoring; /* the checkpoint loaded for this run (also recover_only's), 0: none */
  /* Barrier handling of this run: 0 aligned (or at-least-once, or sync),
   * WEIR__UNALIGNED_ALWAYS, or WEIR__UNALIGNED_TIMEOUT (aligned first, an
   * unaligned cut once alignment_timeout_ms passed). */
  int unaligned;
  /* Copy-on-write views of keyed state are read by their own task right
   * after it forwards the barrier, not by the store's reader threads: set
   * when the workers leave no core free (job.c). */
  int views_on_tasks;
  /* A source has a watermark strategy: tasks run event time (task_time.c). */
  int event_time;
  /* Latency tracing (weir_run_opts.trace_latency; trace.h), or NULL. */
  struct weir__job_trace *trace;
  /* Identity (identity.c): the graph's fingerprint (0 until made), and
   * whether the warning about a store without identities was given. */
  uint64_t fingerprint;
  int identity_warned;
  /* Savepoints (savepoint.c), and the savepoint this run started from
   * (id 0: none). */
  weir__savepoint sp;
  weir_savepoint_info from_sp;
  atomic_int abandon; /* weir_job_abandon(): fail a stop under way at once */
  /* Live metrics (metrics.c), for readers on any thread: the run's phase
   * (0 before it started, 1 running, 2 ended), stored with release once
   * start_ns, the job id, the restore's figures and lease_epoch are set (and
   * end_ns, for 2); when the latest checkpoint completed (monotonic ns,
   * stored before complete_id); checkpoints that failed. */
  atomic_int run_phase;
  uint64_t lease_epoch;
  _Atomic uint64_t complete_ns;
  _Atomic uint64_t ck_failed;
};

/* Records the job's first failure (later ones are dropped) and wakes the
 * coordinator. Thread-safe. */
void weir__job_failed(weir_job *job, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* weir__job_failed with "what: " and the store's message; returns rc. */
int weir__job_store_failed(weir_job *job, int rc, const char *what);

/* A new stream of n outputs, owned by the job (graph.c). */
weir_stream *weir__stream_new(weir_job *job, uint32_t n);

/* plan.c: freezes the graph; returns 0 or WEIR_EPLAN with the job's error
 * message set. */
int weir__plan_freeze(weir_job *job);
void weir__plan_free(weir_job *job);

#endif
