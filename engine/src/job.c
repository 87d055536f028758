/* job.c: owns running a job: defaults, the coordinator loop on the calling
 * thread (completion, failure, stop requests, signals, progress), and the
 * job's statistics and JSON summary.
 *
 * DESIGN
 * The coordinator is the only thread that starts and stops workers. Workers
 * and weir_job_stop() reach it through one uv_async_t; its handler looks at
 * the job's atomic state (failed, tasks done, stop requests) rather than at
 * messages, because uv_async_send coalesces. weir_job_stop() may run in a
 * signal handler or race with the end of the run: it bumps `senders` around
 * its uv_async_send, and the coordinator, after marking itself gone, waits
 * for `senders` to drop to zero before it closes the handle.
 */
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "weir/alloc.h"
#include "weir/clock.h"
#include "task.h"
#include "worker.h"

typedef struct coord {
  weir_job *job;
  uv_loop_t loop;
  uv_async_t async;
  uv_timer_t progress;
  uv_signal_t sigint, sigterm;
  int handled_stops;
  int ending;
} coord;

static atomic_int senders; /* weir_job_stop() calls inside uv_async_send */

void weir__job_poke(weir_job *job) {
  atomic_fetch_add(&senders, 1);
  if (atomic_load(&job->coord_alive)) uv_async_send((uv_async_t *)job->coord_async);
  atomic_fetch_sub(&senders, 1);
}

void weir_job_stop(weir_job *job) {
  if (!job) return;
  atomic_fetch_add(&job->stop_requests, 1);
  weir__job_poke(job);
}

static void collect(const weir_job *job, weir_progress *p) {
  memset(p, 0, sizeof *p);
  uint64_t end = job->end_ns ? job->end_ns : weir_clock_mono_ns();
  p->elapsed_s = job->start_ns ? (double)(end - job->start_ns) / 1e9 : 0;
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    if (!n->ctx) continue;
    for (int s = 0; s < n->parallelism; s++) {
      if (n->kind == WEIR__NODE_SOURCE)
        p->source_records += atomic_load_explicit(&n->ctx[s]->pub_out, memory_order_relaxed);
      if (n->kind == WEIR__NODE_SINK)
        p->sink_records += atomic_load_explicit(&n->ctx[s]->pub_in, memory_order_relaxed);
    }
  }
}

static void close_cb(uv_handle_t *h) {
  (void)h;
}

static void coord_end(coord *c) {
  if (c->ending) return;
  c->ending = 1;
  weir__workers_stop(c->job);
  atomic_store(&c->job->coord_alive, 0);
  while (atomic_load(&senders)) uv_sleep(0);
  uv_close((uv_handle_t *)&c->async, close_cb);
  if (c->job->opts.progress_ms && c->job->opts.progress)
    uv_close((uv_handle_t *)&c->progress, close_cb);
  if (c->job->opts.handle_signals) {
    uv_close((uv_handle_t *)&c->sigint, close_cb);
    uv_close((uv_handle_t *)&c->sigterm, close_cb);
  }
}

static void on_async(uv_async_t *h) {
  coord *c = h->data;
  weir_job *job = c->job;
  if (c->ending) return;
  if (atomic_load(&job->failed) || atomic_load(&job->tasks_done) == job->ntasks) {
    coord_end(c);
    return;
  }
  int req = atomic_load(&job->stop_requests);
  while (c->handled_stops < req) {
    c->handled_stops++;
    if (c->handled_stops == 1) {
      /* Graceful: sources end, everything downstream drains and finishes. */
      atomic_store(&job->stopping, 1);
      for (uint32_t i = 0; i < job->ntasks; i++)
        if (job->tasks[i]->is_source) weir__task_wake(job->tasks[i]);
    } else {
      weir__job_failed(job, WEIR_ECANCELED, "stopped before the job could drain");
      coord_end(c);
      return;
    }
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  coord *c = h->data;
  atomic_fetch_add(&c->job->stop_requests, 1);
  on_async(&c->async);
}

static void on_progress(uv_timer_t *h) {
  coord *c = h->data;
  weir_progress p;
  collect(c->job, &p);
  c->job->opts.progress(c->job->opts.progress_user, &p);
}

static void apply_defaults(weir_run_opts *o) {
  if (o->workers <= 0) {
    int n = (int)uv_available_parallelism();
    o->workers = n > 0 ? n : 1;
  }
  if (o->default_parallelism <= 0) o->default_parallelism = o->workers;
  if (o->max_parallelism <= 0) o->max_parallelism = WEIR_DEFAULT_MAX_PARALLELISM;
  if (!o->batch_records) o->batch_records = 1024;
  if (!o->channel_batches) o->channel_batches = 8;
  if (!o->max_record_bytes) o->max_record_bytes = 1u << 20;
  if (!o->buffer_timeout_us) o->buffer_timeout_us = 1000;
}

int weir_job_run(weir_job *job, const weir_run_opts *opts) {
  if (!job) return WEIR_EINVAL;
  if (job->build_err) return job->build_err;
  if (job->ran) return weir_job_fail(job, WEIR_ESTATE, "a job runs only once");
  job->ran = 1;
  if (opts) job->opts = *opts;
  apply_defaults(&job->opts);
  if (job->opts.workers > 1024 || job->opts.batch_records > (1u << 20))
    return weir_job_fail(job, WEIR_EINVAL, "workers or batch size out of range");
  job->nworkers = (uint32_t)job->opts.workers;
  int rc = weir__plan_freeze(job);
  if (rc) return rc;

  coord c;
  memset(&c, 0, sizeof c);
  c.job = job;
  uv_loop_init(&c.loop);
  uv_async_init(&c.loop, &c.async, on_async);
  c.async.data = &c;
  job->coord_async = &c.async;
  if (job->opts.progress_ms && job->opts.progress) {
    uv_timer_init(&c.loop, &c.progress);
    c.progress.data = &c;
    uv_timer_start(&c.progress, on_progress, job->opts.progress_ms, job->opts.progress_ms);
  }
  if (job->opts.handle_signals) {
    uv_signal_init(&c.loop, &c.sigint);
    uv_signal_init(&c.loop, &c.sigterm);
    c.sigint.data = c.sigterm.data = &c;
    uv_signal_start(&c.sigint, on_signal, SIGINT);
    uv_signal_start(&c.sigterm, on_signal, SIGTERM);
  }
  atomic_store(&job->coord_alive, 1);
  job->start_ns = weir_clock_mono_ns();
  rc = weir__workers_start(job);
  if (rc) weir__job_failed(job, rc, "cannot start worker threads");
  on_async(&c.async); /* stop requests made before the run, empty jobs */
  uv_run(&c.loop, UV_RUN_DEFAULT);
  weir__workers_join(job);
  job->end_ns = weir_clock_mono_ns();
  uv_loop_close(&c.loop);
  job->coord_async = NULL;
  return atomic_load(&job->failed);
}
