/* job.c: owns running a job: defaults, the coordinator loop on the calling
 * thread (completion, failure, stop requests, signals, progress, and
 * carrying out the checkpoint coordinator's actions), the lease, and the
 * job's lifecycle in its state directory.
 *
 * DESIGN
 * The coordinator is the only thread that starts and stops workers and the
 * only one that triggers, commits or aborts checkpoints. Workers, the store
 * writer and weir_job_stop() reach it through one uv_async_t; its handler
 * looks at the job's state (failed, tasks done, stop requests, the
 * checkpoint coordinator's next step) rather than at messages, because
 * uv_async_send coalesces. weir_job_stop() may run in a signal handler or
 * race with the end of the run: it bumps `senders` around its
 * uv_async_send, and the coordinator, after marking itself gone, waits for
 * `senders` to drop to zero before it closes the handle.
 *
 * Checkpoints, one in flight at a time, follow the state machine of
 * coordinator.c: this file feeds it the timer's trigger, the timeout and
 * its own wake-ups, and carries out what it answers (barriers, the commit,
 * completion, abort, telling the tasks). The commit is queued behind the
 * checkpoint's writes as soon as every write is queued: the store runs it
 * once they are durable, in the transaction of the last of them when it
 * can, with no round trip through this thread between.
 *
 * Ownership: before anything else touches the state directory the run
 * acquires its lease (snapshot/lease.c) and holds it to the end; every
 * commit carries the lease epoch and is fenced by it. Losing the lease (a
 * commit or the heartbeat finds it taken over or not renewed in time) fails
 * the run with WEIR_EFENCED.
 *
 * Synchronous checkpoints (opts.sync_checkpoints), the stop-the-world
 * baseline of the ABS paper: each source pushes a drain marker (barrier n)
 * and pauses; a task aligns on the marker as on a barrier, forwards it and
 * reports drained (a loop head first waits until every head of its loop
 * has the marker and nothing is in flight in the loop: see task.c). Once
 * every task drained, sync_snap_id = n and every task snapshots while
 * nothing moves anywhere; when the checkpoint completes or aborts,
 * resume_id = n and the sources run again.
 *
 * While a synchronous checkpoint drains, the coordinator wakes every task
 * each millisecond: a loop head waits for its loop's count of records in
 * flight to reach zero, and nothing else would wake it then (the count has
 * no waiters); the cost falls on the paused job only.
 *
 * The pause covers the write and the commit: the job stands still from the
 * trigger until the checkpoint is durable, as in a halting (Naiad-style)
 * snapshot. The drain time is stored as the checkpoint's alignment time.
 *
 * Failures: an aborted checkpoint (a state write or the commit failed, e.g.
 * a full disk; it timed out; it could not start) is declined: the latest
 * completed checkpoint stays the restore point, the job runs on and the
 * next interval tries again (a failed final checkpoint is retried after one
 * interval). More than tolerable_checkpoint_failures failures in a row fail
 * the job with WEIR_ECKPTLIMIT; a completed checkpoint resets the count.
 *
 * When every task has finished, the coordinator takes the final checkpoint
 * (marking the job finished in the store, unless the run was stopped on
 * request), waits until every task has been told it completed, and only
 * then stops the workers.
 */
#include "job.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h> /* before sys/random.h (macOS) */
#include <sys/random.h>
#include <unistd.h>
#include <uv.h>

#include "identity.h"
#include "restore.h"
#include "savepoint.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "snapshot/lease.h"
#include "base/log.h"
#include "snapshot/store.h"
#include "task.h"
#include "trace.h"
#include "worker.h"

/* The coordinator loop's handles and what only it reads. */
typedef struct runner {
  weir_job *job;
  uv_loop_t loop;
  uv_async_t async;
  uv_timer_t progress, interval, timeout;
  int handled_stops;
  int ending;
  uv_timer_t retry; /* a failed final checkpoint is tried again */
  uv_timer_t drain; /* synchronous checkpoints: wakes every task while draining */
} runner;

void weir__job_poke(weir_job *job) {
  atomic_fetch_add(&job->senders, 1);
  if (atomic_load(&job->coord_alive)) uv_async_send((uv_async_t *)job->coord_async);
  atomic_fetch_sub(&job->senders, 1);
}

void weir_job_stop(weir_job *job) {
  if (!job) return;
  atomic_fetch_add(&job->stop_requests, 1);
  weir__job_poke(job);
}

void weir_job_abandon(weir_job *job) {
  if (!job) return;
  atomic_store(&job->abandon, 1);
  weir__job_poke(job);
}

void weir_job_drain(weir_job *job) {
  if (!job) return;
  atomic_store(&job->drain, 1);
  weir_job_stop(job);
}

const weir_run_info *weir_job_run_info(const weir_job *job) {
  weir_job *j = (weir_job *)job; /* the build time is gathered from the subtasks */
  j->info.restore_build_ms = (double)atomic_load(&j->restore.build_ns) / 1e6;
  j->info.cow_pages_copied = atomic_load(&j->cow_copies);
  j->info.restore_ms = j->info.restore_read_ms + (double)atomic_load(&j->restore.install_ns) / 1e6;
  return &job->info;
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
  p->last_checkpoint = atomic_load(&job->complete_id);
}

static void close_cb(uv_handle_t *h) {
  (void)h;
}

static void wake_all(weir_job *job) {
  for (uint32_t i = 0; i < job->plan.ntasks; i++) weir__task_wake(job->plan.tasks[i]);
}

static void coord_end(runner *r) {
  if (r->ending) return;
  r->ending = 1;
  weir__workers_stop(r->job);
  atomic_store(&r->job->coord_alive, 0);
  while (atomic_load(&r->job->senders)) uv_sleep(0);
  uv_close((uv_handle_t *)&r->async, close_cb);
  uv_close((uv_handle_t *)&r->interval, close_cb);
  uv_close((uv_handle_t *)&r->timeout, close_cb);
  uv_close((uv_handle_t *)&r->retry, close_cb);
  uv_close((uv_handle_t *)&r->drain, close_cb);
  if (r->job->opts.progress_ms && r->job->opts.progress)
    uv_close((uv_handle_t *)&r->progress, close_cb);
}

/* ---- checkpoints: the coordinator's actions ------------------------------- */

static void carry_out(runner *r, weir__coord_act *a);
static void on_timeout(uv_timer_t *h);
static void on_retry(uv_timer_t *h);

static void on_drain(uv_timer_t *h) {
  runner *r = h->data;
  wake_all(r->job);
}

/* Starts a checkpoint. Returns 0 or the store's error (when no id can be
 * reserved, e.g. on a full disk), with the message in the store. */
static int ck_trigger(runner *r, int final) {
  weir_job *job = r->job;
  uint64_t id;
  int rc = weir_store_next_id(job->store, &id);
  if (rc) return rc;
  weir__coord_act a;
  pthread_mutex_lock(&job->ck_mu);
  rc = weir__coord_trigger(&job->coord, id, final, weir_clock_mono_ns(), weir_clock_wall_ms(), &a);
  pthread_mutex_unlock(&job->ck_mu);
  WEIR_ASSERT(rc == 0); /* only triggered when weir__coord_may_trigger */
  weir__sp_triggered(job, id, final);
  carry_out(r, &a);
  return 0;
}

/* Checkpoint id (0: one that could not start) failed: the coordinator
 * counts it against the tolerance. */
static void ck_declined(runner *r, uint64_t id, int final, const char *why, const char *detail) {
  weir_job *job = r->job;
  weir__coord_act d;
  pthread_mutex_lock(&job->ck_mu);
  weir__coord_declined(&job->coord, id, final, why, detail, &d);
  pthread_mutex_unlock(&job->ck_mu);
  if (d.what & WEIR__CA_FAIL) weir__job_failed(job, d.status, "%s", d.msg);
  if (d.what & WEIR__CA_DECLINE) WEIR_LOG_W("%s", d.msg);
  if (d.what & WEIR__CA_RETRY) {
    uint32_t ms = job->opts.checkpoint_interval_ms ? job->opts.checkpoint_interval_ms : 1000;
    atomic_store(&job->final_id, 0);
    uv_timer_start(&r->retry, on_retry, ms, 0);
  }
}

/* A checkpoint could not start: counted as failed and declined. */
static void ck_not_started(runner *r, int final) {
  char msg[512];
  r->job->info.checkpoints_failed++;
  ck_declined(r, 0, final, "it could not start", weir_store_error(r->job->store, msg, sizeof msg));
}

/* The coordinator thread gives the checkpoint in flight up. */
static void ck_give_up(runner *r, int status, const char *why, const char *detail) {
  weir__coord_act a;
  pthread_mutex_lock(&r->job->ck_mu);
  weir__coord_abort(&r->job->coord, status, why, detail, &a);
  pthread_mutex_unlock(&r->job->ck_mu);
  carry_out(r, &a);
}

static void on_committed(void *user, int status, const weir_store_written *w) {
  (void)w;
  weir_job *job = user;
  char why[sizeof job->coord.ck.why];
  why[0] = 0;
  if (status < 0) weir_store_error(job->store, why, sizeof why);
  pthread_mutex_lock(&job->ck_mu);
  int due = weir__coord_committed(&job->coord, status, why);
  pthread_mutex_unlock(&job->ck_mu);
  if (due) weir__job_poke(job);
}

static void do_barriers(runner *r, const weir__ck_pending *ck) {
  weir_job *job = r->job;
  if (ck->final) atomic_store(&job->final_id, ck->id);
  atomic_store_explicit(&job->trigger_id, ck->id, memory_order_release);
  WEIR_LOG_D("checkpoint %llu triggered%s", (unsigned long long)ck->id,
             ck->final ? " (final)" : "");
  uv_timer_start(&r->timeout, on_timeout, job->opts.checkpoint_timeout_ms, 0);
  if (job->opts.sync_checkpoints) uv_timer_start(&r->drain, on_drain, 1, 1);
  /* Sources inject the barriers: ahead of whatever their workers run. */
  for (uint32_t i = 0; i < job->plan.ntasks; i++)
    if (job->plan.tasks[i]->is_source)
      weir__task_wake_first(job->plan.tasks[i]);
    else
      weir__task_wake(job->plan.tasks[i]);
}

static void do_snapshot(runner *r, const weir__ck_pending *ck) {
  WEIR_LOG_D("checkpoint %llu: every task drained, snapshotting", (unsigned long long)ck->id);
  uv_timer_stop(&r->drain);
  atomic_store(&r->job->sync_snap_id, ck->id);
  wake_all(r->job);
}

static void do_commit(runner *r, const weir__ck_pending *ck) {
  weir_job *job = r->job;
  int rc = weir_failpoint("ckpt.before_meta_commit");
  if (rc) {
    ck_give_up(r, 0, "failpoint ckpt.before_meta_commit", NULL);
    return;
  }
  /* The store measures the duration (trigger_ns): the commit is queued
   * before the writes are done. */
  weir_store_commit_info info = {
      .id = ck->id,
      .epoch = weir_lease_epoch(job->lease),
      .trigger_ms = ck->trigger_ms,
      .trigger_ns = ck->trigger_ns,
      .alignment_ms = ck->align_ns / 1000000u,
      .key_groups = (uint32_t)job->opts.max_parallelism,
      .final = ck->final && (!atomic_load(&job->stopping) || atomic_load(&job->draining)),
      .subtasks = ck->expected - ck->later, /* the store's writes */
  };
  WEIR_LOG_D("checkpoint %llu: every write queued, %u of %u durable: commit queued",
             (unsigned long long)ck->id, ck->acks, ck->expected);
  rc = weir_store_commit(job->store, &info, on_committed, job);
  if (rc) {
    char msg[512];
    ck_give_up(r, rc, "its commit could not be queued",
               weir_store_error(job->store, msg, sizeof msg));
  }
}

/* The run's commit point outside the state directory (commit_point):
 * the checkpoint exported, handed over, the file removed. 0 or the
 * callback's error (the job failed with it). */
static int commit_point(weir_job *job, uint64_t id) {
  char path[1024];
  snprintf(path, sizeof path, "%s/commit-%llu.svp", job->opts.state_dir, (unsigned long long)id);
  uint64_t bytes = 0;
  int rc = weir_store_export(job->store, id, path, &bytes);
  if (rc) {
    char msg[512];
    weir__job_failed(job, rc, "checkpoint %llu: its export for the commit point failed: %s",
                     (unsigned long long)id, weir_store_error(job->store, msg, sizeof msg));
    (void)unlink(path);
    return rc;
  }
  rc = job->opts.commit_point(job->opts.commit_point_user, id, path, bytes);
  (void)unlink(path);
  if (rc < 0)
    weir__job_failed(job, rc, "checkpoint %llu was not committed: %s", (unsigned long long)id,
                     rc == WEIR_EFENCED ? "the job is owned by another run now"
                                        : weir_strerror(rc));
  return rc < 0 ? rc : 0;
}

/* Returns 0 if the tasks must not be told (the commit point refused it:
 * the job fails instead). */
static int do_complete(runner *r, const weir__ck_pending *ck) {
  weir_job *job = r->job;
  uv_timer_stop(&r->timeout);
  if (job->opts.commit_point && commit_point(job, ck->id) < 0) return 0;
  uint64_t took_ns = weir_clock_mono_ns() - ck->trigger_ns, ms = took_ns / 1000000u;
  char un[96] = "";
  if (job->unaligned)
    snprintf(un, sizeof un, ", %s, channel state %llu bytes",
             ck->unaligned ? "unaligned" : "aligned", (unsigned long long)ck->channel_bytes);
  WEIR_LOG_I("checkpoint %llu completed in %llu ms (%llu bytes, %s %llu ms%s)%s",
             (unsigned long long)ck->id, (unsigned long long)ms, (unsigned long long)ck->bytes,
             job->opts.sync_checkpoints ? "drain" : "alignment",
             (unsigned long long)(ck->align_ns / 1000000u), un, ck->final ? ", final" : "");
  job->info.unaligned_checkpoints += ck->unaligned ? 1 : 0;
  job->info.channel_state_bytes += ck->channel_bytes;
  weir_checkpoint_stat st = {
      .id = ck->id,
      .started_us = ck->trigger_ns > job->start_ns ? (ck->trigger_ns - job->start_ns) / 1000u : 0,
      .duration_us = took_ns / 1000u,
      .alignment_us = ck->align_ns / 1000u,
      .bytes = ck->bytes,
      .channel_state_bytes = ck->channel_bytes,
      .flags = (ck->unaligned ? WEIR_CHECKPOINT_UNALIGNED : 0u) |
               (ck->final ? WEIR_CHECKPOINT_FINAL : 0u),
  };
  weir__history_add(&job->history, &st);
  job->info.last_checkpoint = ck->id;
  job->info.checkpoints++;
  (void)weir_failpoint("ckpt.after_meta_commit");
  atomic_store(&job->complete_ns, weir_clock_mono_ns());
  atomic_store(&job->complete_id, ck->id);
  atomic_store(&job->resume_id, ck->id); /* synchronous checkpoints: sources run again */
  weir__sp_completed(job, ck);
  return 1;
}

/* Returns 0 if the tasks must not be told (the lease is lost: the job
 * fails instead). */
static int do_abort(runner *r, weir__coord_act *a) {
  weir_job *job = r->job;
  uint64_t id = a->ck.id;
  uv_timer_stop(&r->timeout);
  uv_timer_stop(&r->drain);
  if (a->status < 0 && !a->ck.why[0]) weir_store_error(job->store, a->ck.why, sizeof a->ck.why);
  weir_store_abort(job->store, id);
  job->info.checkpoints_failed++;
  atomic_fetch_add(&job->ck_failed, 1);
  if (a->status == WEIR_EFENCED) { /* not ours to commit any more: stop */
    char lost[512];
    weir__job_failed(job, a->status, "checkpoint %llu not committed: %s", (unsigned long long)id,
                     weir_lease_error(job->lease, lost, sizeof lost));
    return 0;
  }
  atomic_store(&job->aborted_id, id);
  atomic_store(&job->resume_id, id); /* synchronous checkpoints: sources run again */
  weir__sp_aborted(job, id, a->status, a->why, a->ck.why);
  ck_declined(r, id, a->ck.final, a->why, a->ck.why);
  return 1;
}

static void carry_out(runner *r, weir__coord_act *a) {
  int notify = a->what & WEIR__CA_NOTIFY;
  if (a->what & WEIR__CA_BARRIERS) do_barriers(r, &a->ck);
  if (a->what & WEIR__CA_SNAPSHOT) do_snapshot(r, &a->ck);
  if (a->what & WEIR__CA_COMMIT) do_commit(r, &a->ck);
  if ((a->what & WEIR__CA_COMPLETE) && !do_complete(r, &a->ck)) notify = 0;
  if ((a->what & WEIR__CA_ABORT) && !do_abort(r, a)) notify = 0;
  if (notify) wake_all(r->job);
}

static void on_timeout(uv_timer_t *h) {
  runner *r = h->data;
  weir__coord_act a;
  pthread_mutex_lock(&r->job->ck_mu);
  weir__coord_timeout(&r->job->coord, &a);
  pthread_mutex_unlock(&r->job->ck_mu);
  carry_out(r, &a);
}

/* Moves the checkpoint in flight along; called on every wake-up. */
static void ck_progress(runner *r) {
  weir__coord_act a;
  pthread_mutex_lock(&r->job->ck_mu);
  weir__coord_step(&r->job->coord, weir_clock_mono_ns(), &a);
  pthread_mutex_unlock(&r->job->ck_mu);
  carry_out(r, &a);
}

static int may_trigger(weir_job *job, int final) {
  pthread_mutex_lock(&job->ck_mu);
  int may = weir__coord_may_trigger(&job->coord, final);
  pthread_mutex_unlock(&job->ck_mu);
  return may;
}

static void on_interval(uv_timer_t *h) {
  runner *r = h->data;
  weir_job *job = r->job;
  if (r->ending || atomic_load(&job->tasks_done) == job->plan.ntasks || !may_trigger(job, 0))
    return;
  if (ck_trigger(r, 0)) ck_not_started(r, 0);
}

static void on_async(uv_async_t *h);

/* A failed final checkpoint's retry is due. */
static void on_retry(uv_timer_t *h) {
  runner *r = h->data;
  pthread_mutex_lock(&r->job->ck_mu);
  weir__coord_retry_due(&r->job->coord);
  pthread_mutex_unlock(&r->job->ck_mu);
  on_async(&r->async);
}

/* ---- the coordinator's wake-ups ------------------------------------------- */

static void on_async(uv_async_t *h) {
  runner *r = h->data;
  weir_job *job = r->job;
  if (r->ending) return;
  if (atomic_load(&job->signals) > 1) {
    weir__job_failed(job, WEIR_ECANCELED, "stopped by a second %s before the job could drain",
                     atomic_load(&job->last_signal) == SIGINT ? "SIGINT" : "SIGTERM");
    coord_end(r);
    return;
  }
  if (atomic_load(&job->abandon) && atomic_load(&job->stopping)) {
    weir__job_failed(job, WEIR_ECANCELED,
                     "the stop was abandoned before the job ended: effects of completed "
                     "checkpoints not committed yet stay pending, for the next run to commit");
    coord_end(r);
    return;
  }
  if (atomic_load(&job->failed)) {
    coord_end(r);
    return;
  }
  if (job->store) ck_progress(r);
  if (atomic_load(&job->failed)) {
    coord_end(r);
    return;
  }
  unsigned spf = 0;
  if (job->store && !job->recover_only && !atomic_load(&job->stopping) &&
      atomic_load(&job->tasks_done) < job->plan.ntasks && weir__sp_asked(job, &spf) &&
      !(spf & WEIR_SAVEPOINT_STOP) && may_trigger(job, 0) && ck_trigger(r, 0))
    ck_not_started(r, 0); /* the savepoint waits for the next interval */
  if (atomic_load(&job->tasks_done) == job->plan.ntasks) {
    if (!job->store || job->recover_only) {
      coord_end(r);
      return;
    }
    uint64_t fin = atomic_load(&job->final_id);
    if (may_trigger(job, 1)) {
      if (ck_trigger(r, 1)) {
        ck_not_started(r, 1);
        if (atomic_load(&job->failed)) coord_end(r);
      }
    } else if (fin && atomic_load(&job->complete_id) == fin &&
               atomic_load(&job->final_notified) == job->plan.ntasks) {
      coord_end(r);
    }
    return;
  }
  if (atomic_load(&job->stop_requests) && !r->handled_stops) {
    /* Graceful: sources end, everything downstream drains and finishes. */
    r->handled_stops = 1;
    weir__history_stop(&job->history);
    int drain = atomic_load(&job->drain);
    if (drain)
      WEIR_LOG_I("draining: sources end as at the end of their input; timers fire, operators "
                 "finish and the job ends for good");
    else
      WEIR_LOG_I("stopping: sources end, the job drains");
    atomic_store(&job->stop_ns, weir_clock_mono_ns());
    atomic_store(&job->draining, drain);
    atomic_store(&job->stopping, 1);
    for (uint32_t i = 0; i < job->plan.ntasks; i++)
      if (job->plan.tasks[i]->is_source) weir__task_wake(job->plan.tasks[i]);
  }
}

static void on_progress(uv_timer_t *h) {
  runner *r = h->data;
  weir_progress p;
  collect(r->job, &p);
  r->job->opts.progress(r->job->opts.progress_user, &p);
}

/* ---- signals ---------------------------------------------------------------
 * With opts.handle_signals a run owns SIGINT and SIGTERM from its first
 * step to its return. By sigaction, not uv_signal_t: libuv puts a signal
 * back to SIG_DFL when its last watcher closes, so one arriving while a
 * finished job tore down killed the process. The handler only counts and
 * calls weir_job_stop() (async-signal-safe); the coordinator reads the
 * count: the first signal drains the job, a second abandons the drain. One
 * that arrives before the loop runs (during the lease or a restore) is a
 * stop request handled as the loop starts; one after the job ended changes
 * nothing. On return the caller's dispositions are back, swapped in one
 * sigaction each (no moment of SIG_DFL). One run per process at a time. */

static _Atomic(weir_job *) sig_job;
static atomic_int sig_inside; /* handlers between loading sig_job and done */
static struct sigaction sig_saved_int, sig_saved_term;

static void on_stop_signal(int signum) {
  int saved_errno = errno;
  atomic_fetch_add(&sig_inside, 1);
  weir_job *job = atomic_load(&sig_job);
  if (job) {
    atomic_store(&job->last_signal, signum);
    atomic_fetch_add(&job->signals, 1);
    weir_job_stop(job);
  }
  atomic_fetch_sub(&sig_inside, 1);
  errno = saved_errno;
}

static int signals_own(weir_job *job) {
  if (!job->opts.handle_signals) return 0;
  weir_job *none = NULL;
  if (!atomic_compare_exchange_strong(&sig_job, &none, job))
    return weir_job_fail(job, WEIR_ESTATE,
                         "another run in this process handles SIGINT/SIGTERM (handle_signals)");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &sig_saved_int);
  sigaction(SIGTERM, &sa, &sig_saved_term);
  job->owns_signals = 1;
  return 0;
}

static void signals_release(weir_job *job) {
  if (!job->owns_signals) return;
  sigaction(SIGINT, &sig_saved_int, NULL);
  sigaction(SIGTERM, &sig_saved_term, NULL);
  atomic_store(&sig_job, NULL);
  while (atomic_load(&sig_inside)) uv_sleep(0); /* a handler on another thread */
  job->owns_signals = 0;
}

/* ---- lifecycle ------------------------------------------------------------ */

/* Checkpoint id must fit this job (identity.c): 0 or WEIR_EMISMATCH (or
 * the store's error) with the job failed. Runs before anything is
 * restored or written. */
static int check_identity(weir_job *job, uint64_t id) {
  weir_store_ckpt_info *info = NULL;
  int rc = weir_store_info(job->store, id, &info);
  if (rc) return weir__job_store_failed(job, rc, "cannot restore");
  rc = weir__identity_check_restore(job, info);
  weir_store_ckpt_info_free(info);
  return rc;
}

/* A restore of a finished job: returns 1 (nothing to run) or, when it has
 * a final checkpoint, 0 with that checkpoint loaded for its operators'
 * notifications only; or an error. */
static int recover_finished(weir_job *job, const weir_store_job *rec) {
  WEIR_LOG_I("job %s already finished (instance %llu): nothing to restore", rec->job_id,
             (unsigned long long)rec->instance);
  snprintf(job->info.job_id, sizeof job->info.job_id, "%s", rec->job_id);
  job->info.instance = rec->instance;
  job->info.already_finished = 1;
  if (!rec->latest) return 1;
  /* Its final checkpoint may have completed without every operator
   * hearing of it (a crash right after the commit): restore it, tell
   * them, and run nothing. */
  int rc = check_identity(job, rec->latest);
  if (rc) return rc;
  rc = weir__restore_load(job, rec->latest, 1);
  if (rc) return rc;
  job->recover_only = 1;
  job->restoring = rec->latest;
  atomic_store(&job->complete_id, rec->latest);
  atomic_store(&job->final_id, rec->latest);
  return 0;
}

/* 0 if checkpoint id is in the store, else WEIR_ENOCKPT (or the store's
 * error) with the job failed. */
static int find_checkpoint(weir_job *job, uint64_t id) {
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  int rc = weir_store_list(job->store, &list, &n);
  if (rc) return weir__job_store_failed(job, rc, "cannot list checkpoints");
  int found = 0;
  for (size_t i = 0; i < n; i++) found |= list[i].id == id;
  weir_free(list);
  if (found) return 0;
  weir__job_failed(job, WEIR_ENOCKPT,
                   "checkpoint %llu is not in the state directory '%s' (see 'weir checkpoints')",
                   (unsigned long long)id, job->opts.state_dir);
  return WEIR_ENOCKPT;
}

/* A restore of checkpoint `bad` found it damaged: says in the job's error
 * which other retained checkpoints are intact (each checked as `weir
 * checkpoints --verify` checks it) and how to restore one. */
static void note_intact(weir_job *job, uint64_t bad) {
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  if (weir_store_list(job->store, &list, &n) != 0) return;
  char ids[256] = "";
  size_t len = 0;
  uint64_t newest = 0;
  for (size_t i = n; i-- > 0;) {
    if (list[i].id == bad || list[i].status || weir_store_verify(job->store, list[i].id) != 0)
      continue;
    if (!newest) newest = list[i].id;
    int k = snprintf(ids + len, sizeof ids - len, "%s%llu", len ? ", " : "",
                     (unsigned long long)list[i].id);
    if (k < 0 || (size_t)k >= sizeof ids - len) break;
    len += (size_t)k;
  }
  weir_free(list);
  size_t used = strlen(job->errmsg);
  if (newest)
    snprintf(job->errmsg + used, sizeof job->errmsg - used,
             "; intact retained checkpoints (checked): %s: restore one with --restore ID "
             "(e.g. --restore %llu), or start over with --fresh",
             ids, (unsigned long long)newest);
  else
    snprintf(job->errmsg + used, sizeof job->errmsg - used,
             "; no other retained checkpoint is intact: start over with --fresh");
}

/* Opens the store and decides what this run is (docs/architecture.md §5): returns 0 to
 * run, 1 if there is nothing to do (restore of a finished job), or an error. */
static int prepare_store(weir_job *job) {
  const weir_run_opts *o = &job->opts;
  if (weir__identity_make(job)) return atomic_load(&job->failed);
  weir_store_opts so = {.retain = o->retain, .lease = job->lease, .map_size = o->store_max_bytes};
  int rc = weir_store_open(&job->store, o->state_dir, &so);
  if (rc) {
    char msg[512];
    weir__job_failed(job, rc, "cannot open the state directory '%s': %s", o->state_dir,
                     job->store ? weir_store_error(job->store, msg, sizeof msg)
                                : weir_strerror(rc));
    return rc;
  }
  if (o->from_savepoint) {
    rc = weir_store_import(job->store, o->from_savepoint, job->name, &job->from_sp);
    if (rc) return weir__job_store_failed(job, rc, "cannot start from the savepoint");
    if (weir_lease_epoch(job->lease) <= job->from_sp.epoch) {
      weir__job_failed(job, WEIR_EMISMATCH,
                       "the state directory '%s' is at lease epoch %llu, not above the "
                       "savepoint's %llu, so destinations would fence this run out: start "
                       "from the savepoint in a new state directory",
                       o->state_dir, (unsigned long long)weir_lease_epoch(job->lease),
                       (unsigned long long)job->from_sp.epoch);
      return WEIR_EMISMATCH;
    }
    WEIR_LOG_I("savepoint %s: checkpoint %llu of job %s ('%s') copied into '%s'", o->from_savepoint,
               (unsigned long long)job->from_sp.id, job->from_sp.job_id, job->from_sp.job_name,
               o->state_dir);
  }
  weir_store_job rec;
  int exists = weir_store_job_get(job->store, &rec);
  if (exists < 0) return weir__job_store_failed(job, exists, "cannot read the state directory");
  /* Another job's directory is refused before anything else is said
   * about it (an unfinished run of it is not this job's to continue). */
  if (exists && (rc = weir__identity_check_job(job, &rec)) != 0) return rc;
  uint64_t from = 0;
  int new_instance = 0;
  switch (o->restore) {
  case WEIR_RESTORE_NONE:
    if (job->from_sp.id) {
      from = job->from_sp.id;
      break;
    }
    if (exists && !rec.finished) {
      weir__job_failed(job, WEIR_EUNFINISHED,
                       "the state directory '%s' holds an unfinished run of job %s (latest "
                       "checkpoint %llu): continue it with --restore latest, or start over "
                       "with --fresh",
                       o->state_dir, rec.job_id, (unsigned long long)rec.latest);
      return WEIR_EUNFINISHED;
    }
    new_instance = exists;
    break;
  case WEIR_RESTORE_FRESH:
    new_instance = exists;
    break;
  case WEIR_RESTORE_LATEST:
    if (exists && rec.finished) return recover_finished(job, &rec);
    if (!exists || !rec.latest)
      WEIR_LOG_I("no checkpoint has completed yet: starting from the beginning");
    else
      from = rec.latest;
    break;
  case WEIR_RESTORE_ID:
    rc = find_checkpoint(job, o->restore_id);
    if (rc) return rc;
    from = o->restore_id;
    break;
  }
  if (from && (rc = check_identity(job, from)) != 0) return rc;
  /* A restore of a checkpoint older than the one the job reached here is
   * a rewind (the record's latest: this instance's; a savepoint copied in
   * set it to the savepoint). */
  if (from && exists && rec.latest > from) job->rewound_from = rec.latest;
  if (from && job->from_sp.replaced_latest > from) job->rewound_from = job->from_sp.replaced_latest;
  if ((rc = weir__identity_record(job, job->store)) != 0) return rc;
  rc = weir_store_job_begin(job->store, new_instance, &rec);
  if (rc) return weir__job_store_failed(job, rc, "cannot start the job in its state directory");
  snprintf(job->info.job_id, sizeof job->info.job_id, "%s", rec.job_id);
  job->info.instance = rec.instance;
  if (from) {
    rc = weir__restore_load(job, from, 0);
    if (rc == WEIR_ECORRUPT || rc == WEIR_EFORMAT) note_intact(job, from);
    if (rc) return rc;
    job->info.restored_from = job->restoring = from;
    WEIR_LOG_I("restored job %s from checkpoint %llu (%.1f MB read, checked and built in %.0f "
               "ms)",
               rec.job_id, (unsigned long long)from, (double)job->info.restored_bytes / 1e6,
               job->info.restore_read_ms);
  }
  return 0;
}

/* ---- ownership ---------------------------------------------------------------- */

static void on_lease_lost(void *user, int err, const char *msg) {
  weir_job *job = user;
  weir__job_failed(job, err, "%s", msg);
  if (job->opts.lease_lost) job->opts.lease_lost(job->opts.lease_lost_user, msg);
}

/* Acquires the lease of the state directory, starts its heartbeat, and, if
 * the previous owner may still be alive, moves the store to a fresh
 * environment that it cannot block (snapshot/handover.c). */
static int acquire_lease(weir_job *job) {
  const weir_run_opts *o = &job->opts;
  static const char *const how[] = {"", "it released the lease", "its process is gone",
                                    "its lease expired"};
  char err[1024];
  weir_lease_opts lo = {
      .lease_ms = o->lease_ms, .wait = o->lease_wait, .lost = on_lease_lost, .lost_user = job};
  if (o->from_savepoint) {
    /* The whole file is checked before anything is touched, and a new
     * directory's first epoch starts above the savepoint's. */
    weir_savepoint_info sp;
    int rc = weir_savepoint_check(o->from_savepoint, &sp, err, sizeof err);
    if (rc) {
      weir__job_failed(job, rc, "%s", err);
      return rc;
    }
    lo.min_epoch = sp.epoch + 1;
  }
  if (o->min_lease_epoch > lo.min_epoch) lo.min_epoch = o->min_lease_epoch;
  int rc = weir_lease_acquire(&job->lease, o->state_dir, &lo, err, sizeof err);
  if (rc) {
    weir__job_failed(job, rc, "%s", err);
    return rc;
  }
  weir_lease_takeover t = weir_lease_how(job->lease);
  if (t != WEIR_LEASE_FIRST) {
    const weir_lease_owner *p = weir_lease_previous(job->lease);
    WEIR_LOG_I("state directory %s: epoch %llu took over from pid %lld on %s: %s", o->state_dir,
               (unsigned long long)weir_lease_epoch(job->lease), (long long)p->pid, p->host,
               how[t]);
  }
  rc = weir_lease_start(job->lease);
  if (rc) {
    weir__job_failed(job, rc, "%s", weir_lease_error(job->lease, err, sizeof err));
    return rc;
  }
  if (t == WEIR_LEASE_EXPIRED) {
    rc = weir_store_handover(o->state_dir, weir_lease_epoch(job->lease), err, sizeof err);
    if (rc) {
      weir__job_failed(job, rc, "%s", err);
      return rc;
    }
  }
  /* Tests hold an owner here (pause) to race a second run against it. */
  return weir_failpoint("lease.acquired");
}

/* ---- running ------------------------------------------------------------------ */

/* A job without a state directory still needs an id for its operation ids
 * (weir_ctx_job_id): a random version-4 UUID, from getentropy() (no file
 * descriptor: two jobs starting at once in one process share nothing),
 * else from the clocks and the address of `out` (unique enough for one
 * run). */
static void random_job_id(char out[40]) {
  uint8_t b[16] = {0};
  if (getentropy(b, sizeof b) != 0) {
    uint64_t x =
        weir_clock_mono_ns() ^ ((uint64_t)weir_clock_wall_ms() << 20) ^ (uint64_t)(uintptr_t)out;
    for (int i = 0; i < 16; i++) {
      x ^= x >> 33;
      x *= 0xff51afd7ed558ccdULL;
      b[i] = (uint8_t)(x >> 56);
    }
  }
  b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
  b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
  snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
}

/* Who reads a checkpoint's copy-on-write views. The store's reader threads
 * read them beside the workers; that is free only on a core no worker
 * needs. When the workers take every core, a reader preempts one, and
 * through the hash shuffle the others soon wait for it too; and while it
 * reads, the owner copies every page it updates. Read by their own task
 * once it has forwarded the barrier, a slice between its steps
 * (task.c, weir__task_run), the views cost each worker only its own read,
 * its records wait for one slice at most, and only the pages it updates
 * between slices are copied.
 * So the task reads when the workers take every core (the default, and
 * WEIR_TASK_READS_VIEWS=1); WEIR_TASK_READS_VIEWS=0 leaves it to the
 * readers always, 2 has the task read even with a core to spare. */
static int views_on_tasks(uint32_t workers) {
  const char *e = getenv("WEIR_TASK_READS_VIEWS");
  if (e && !strcmp(e, "0")) return 0;
  if (e && !strcmp(e, "2")) return 1;
  if (e && strcmp(e, "1")) WEIR_LOG_W("WEIR_TASK_READS_VIEWS=%s: not 0, 1 or 2, ignored", e);
  return workers >= uv_available_parallelism();
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
  if (!o->checkpoint_timeout_ms) o->checkpoint_timeout_ms = 600000;
  if (!o->retain) o->retain = 3;
  if (!o->loop_memory_bytes) o->loop_memory_bytes = 64ull << 20;
  if (!o->spill_dir) o->spill_dir = o->state_dir;
}

/* Checks the run options (defaults applied) and decides the barrier
 * handling of the run. Returns 0 or WEIR_EINVAL with the job's message. */
static int check_opts(weir_job *job) {
  const weir_run_opts *o = &job->opts;
  if (o->workers > 1024 || o->batch_records > (1u << 20))
    return weir_job_fail(job, WEIR_EINVAL, "workers or batch size out of range");
  if (o->sync_checkpoints && o->at_least_once)
    return weir_job_fail(job, WEIR_EINVAL,
                         "synchronous checkpoints drain every channel: they do not combine with "
                         "at-least-once barriers");
  if ((o->unaligned || o->alignment_timeout_ms) && (o->sync_checkpoints || o->at_least_once))
    return weir_job_fail(
        job, WEIR_EINVAL, "unaligned checkpoints and the alignment timeout do not combine with %s",
        o->sync_checkpoints ? "synchronous checkpoints" : "at-least-once barriers");
  if (o->alignment_timeout_ms)
    job->unaligned = WEIR__UNALIGNED_TIMEOUT;
  else if (o->unaligned)
    job->unaligned = WEIR__UNALIGNED_ALWAYS;
  if (!o->state_dir) job->unaligned = 0; /* no checkpoints at all */
  int two_inputs = 0;
  for (uint32_t i = 0; i < job->nnodes; i++) two_inputs |= job->nodes[i]->two_inputs;
  if (job->unaligned && two_inputs && !job->nloops) {
    /* Channel state does not record which input a record came on. */
    WEIR_LOG_W("this job has a two-input operator: its checkpoints are aligned (unaligned "
               "checkpoints and the alignment timeout apply to jobs without one)");
    job->unaligned = 0;
  }
  if (job->unaligned && job->nloops) {
    /* Channel state of a cycle would have to include the feedback edges'
     * unbounded (spilling) queues and the in-flight count of the loop; the
     * back-edge log already captures what crosses the cut there, so loop
     * jobs keep the aligned protocol (see README, Loops). */
    WEIR_LOG_W("this job has a loop: its checkpoints are aligned, with back-edge logging "
               "(unaligned checkpoints and the alignment timeout apply to acyclic jobs only)");
    job->unaligned = 0;
  }
  if (o->from_savepoint && (!o->state_dir || o->restore != WEIR_RESTORE_NONE))
    return weir_job_fail(job, WEIR_EINVAL,
                         o->state_dir
                             ? "a run from a savepoint restores the savepoint: it takes no "
                               "other restore (--restore, --fresh)"
                             : "a run from a savepoint needs a state directory");
  if (o->tolerable_checkpoint_failures < WEIR_TOLERATE_ANY)
    return weir_job_fail(job, WEIR_EINVAL, "tolerable checkpoint failures: %d is not a count",
                         o->tolerable_checkpoint_failures);
  if (o->job_id && !weir_store_job_id_valid(o->job_id))
    return weir_job_fail(job, WEIR_EINVAL,
                         "job id '%s': not a UUID in text form (lower-case hex, 8-4-4-4-12)",
                         o->job_id);
  return 0;
}

/* Sets up the coordinator loop: its wake-up, timers and signal handlers,
 * and the checkpoint coordinator. */
static void loop_open(runner *r) {
  weir_job *job = r->job;
  uint32_t writes = 0; /* operator subtasks: the writes of an aligned checkpoint */
  for (uint32_t i = 0; i < job->plan.ntasks; i++) writes += job->plan.tasks[i]->nops;
  weir__coord_init(&job->coord, writes, job->plan.ntasks, job->opts.sync_checkpoints,
                   job->opts.tolerable_checkpoint_failures, job->info.restored_from);
  uv_loop_init(&r->loop);
  uv_async_init(&r->loop, &r->async, on_async);
  r->async.data = r;
  job->coord_async = &r->async;
  uv_timer_init(&r->loop, &r->interval);
  uv_timer_init(&r->loop, &r->timeout);
  uv_timer_init(&r->loop, &r->retry);
  uv_timer_init(&r->loop, &r->drain);
  r->interval.data = r->timeout.data = r->retry.data = r->drain.data = r;
  if (job->store && job->opts.checkpoint_interval_ms)
    uv_timer_start(&r->interval, on_interval, job->opts.checkpoint_interval_ms,
                   job->opts.checkpoint_interval_ms);
  if (job->opts.progress_ms && job->opts.progress) {
    uv_timer_init(&r->loop, &r->progress);
    r->progress.data = r;
    uv_timer_start(&r->progress, on_progress, job->opts.progress_ms, job->opts.progress_ms);
  }
}

int weir_job_run(weir_job *job, const weir_run_opts *opts) {
  if (!job) return WEIR_EINVAL;
  if (job->build_err) return job->build_err;
  if (job->ran) return weir_job_fail(job, WEIR_ESTATE, "a job runs only once");
  job->ran = 1;
  if (opts) job->opts = *opts;
  apply_defaults(&job->opts);
  int rc = check_opts(job);
  if (rc) return rc;
  job->plan.nworkers = (uint32_t)job->opts.workers;
  job->views_on_tasks = views_on_tasks(job->plan.nworkers);
  rc = weir__plan_freeze(job);
  if (rc) return rc;
  if (job->opts.trace_latency) job->trace = weir__trace_job_create(job->nnodes, job->plan.ntasks);

  rc = signals_own(job);
  if (rc) return rc;
  if (job->opts.state_dir) {
    rc = acquire_lease(job);
    if (rc == 0) rc = prepare_store(job);
    if (rc) {
      weir_store_close(job->store);
      job->store = NULL;
      weir_lease_close(job->lease, 1);
      job->lease = NULL;
      signals_release(job);
      return rc > 0 ? 0 : atomic_load(&job->failed) ? atomic_load(&job->failed) : rc;
    }
  }
  if (!job->info.job_id[0] && job->opts.job_id)
    snprintf(job->info.job_id, sizeof job->info.job_id, "%s", job->opts.job_id);
  if (!job->info.job_id[0]) random_job_id(job->info.job_id);

  runner r;
  memset(&r, 0, sizeof r);
  r.job = job;
  loop_open(&r);
  atomic_store(&job->coord_alive, 1);
  if (job->store && !job->recover_only) weir__sp_open(job);
  if (job->opts.started) job->opts.started(job->opts.started_user, job);
  job->start_ns = weir_clock_mono_ns();
  job->lease_epoch = job->lease ? weir_lease_epoch(job->lease) : 0;
  atomic_store_explicit(&job->run_phase, 1, memory_order_release);
  rc = weir__workers_start(job);
  if (rc) weir__job_failed(job, rc, "cannot start worker threads");
  on_async(&r.async); /* stop requests made before the run, empty jobs */
  uv_run(&r.loop, UV_RUN_DEFAULT);
  weir__sp_close(job);
  weir__workers_join(job);
  weir_failpoint("job.teardown");
  job->end_ns = weir_clock_mono_ns();
  atomic_store_explicit(&job->run_phase, 2, memory_order_release);
  uv_loop_close(&r.loop);
  job->coord_async = NULL;
  if (job->store) {
    weir_store_close(job->store); /* waits for queued writes */
    job->store = NULL;
  }
  /* Every commit has stopped: a successor may start at once (unless one
   * already took over: then this does nothing). */
  weir_lease_close(job->lease, 1);
  job->lease = NULL;
  signals_release(job);
  return atomic_load(&job->failed);
}
