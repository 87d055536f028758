/* worker.c: owns worker threads, their libuv loops, and task scheduling.
 *
 * DESIGN
 * A worker runs its tasks cooperatively: it pops a task from its run queue,
 * runs one bounded step, and requeues it if it has more to do. A task is
 * queued at most once (its `queued` flag); waking it from the worker's own
 * thread appends to the run queue, from another thread appends to the inbox
 * and sends uv_async_send only if the worker said it sleeps. A worker with
 * nothing to run spins briefly on its inbox (a wake-up through the kernel
 * costs tens of microseconds, a spinning hand-off far less), then announces
 * `sleeping`, re-checks the inbox, and blocks in uv_run until an async or a
 * timer fires. The announce/re-check pair and the waker's publish/read of
 * `sleeping` are sequentially consistent, so no wake-up is lost. While
 * tasks keep it busy, a worker still looks at its loop's timers (tasks
 * waiting for a time, such as a paced source) every STEPS_PER_POLL steps or
 * every POLL_NS, whichever comes first: steps of a slow task last about a
 * millisecond each, and 64 of them would starve a timer for 64 ms.
 *
 * Short waits: libuv's timers count milliseconds, and a task that asks to
 * run again in 100 us would wait one to two of them (measured: a paced
 * source then emitted most records a millisecond late; docs/latency.md).
 * A wait under SHORT_NS (250 us; longer ones napped too often on a loaded
 * machine, docs/latency.md §3) is a deadline on the task (`wake_at`) instead,
 * looked at after every step; a worker with nothing to run and a deadline
 * ahead naps on a condition variable until it, and a waker that finds it
 * napping signals it, both under the inbox mutex, so no wake-up is lost
 * there either.
 *
 * Shutdown: only the coordinator stops workers. A worker leaves its loop
 * when it sees `stop`, waits until the coordinator's wake-up to it has been
 * sent (the only wake-up that may still be under way: the coordinator's
 * own happened before, on its thread), then for the other workers on a
 * barrier (after it, no task runs anywhere, so nobody can wake a task, i.e.
 * touch another worker's async handle), then closes its tasks' operators
 * and its own handles on its own loop.
 */
#include "worker.h"

#include <string.h>

#include "spin.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "task.h"

#define SPIN_NS 50000u
#define STEPS_PER_POLL 64u
#define POLL_NS WEIR__STEP_NS
#define SHORT_NS 250000u

static _Thread_local weir__worker *cur_worker;

static void rq_push(weir__worker *w, weir__task *t) {
  t->next_run = NULL;
  if (w->rq_tail)
    w->rq_tail->next_run = t;
  else
    w->rq_head = t;
  w->rq_tail = t;
}

static void rq_push_front(weir__worker *w, weir__task *t) {
  t->next_run = w->rq_head;
  w->rq_head = t;
  if (!w->rq_tail) w->rq_tail = t;
}

static weir__task *rq_pop(weir__worker *w) {
  weir__task *t = w->rq_head;
  if (t) {
    w->rq_head = t->next_run;
    if (!w->rq_head) w->rq_tail = NULL;
  }
  return t;
}

/* Tracing: the first wake-up sent to a sleeping worker. */
static void note_woken(weir__worker *w) {
  uint64_t none = 0;
  atomic_compare_exchange_strong(&w->tr->woken_at, &none, weir_clock_mono_ns());
}

/* Tracing: a sleep from t1 to t2, split where a wake-up was sent. */
static void trace_sleep(weir__worker *w, uint64_t t1, uint64_t t2) {
  uint64_t woken = atomic_exchange(&w->tr->woken_at, 0);
  if (woken > t1 && woken < t2) {
    weir__trace_slice(w->tr, WEIR__SLICE_ASLEEP, t1, woken);
    weir__trace_slice(w->tr, WEIR__SLICE_WAKING, woken, t2);
  } else {
    weir__trace_slice(w->tr, WEIR__SLICE_ASLEEP, t1, t2);
  }
}

void weir__task_wake(void *p) {
  weir__task *t = p;
  if (atomic_exchange(&t->queued, 1)) return;
  weir__worker *w = t->worker;
  if (cur_worker == w) {
    rq_push(w, t);
    return;
  }
  uv_mutex_lock(&w->mu);
  t->next_run = NULL;
  if (w->inbox_tail)
    w->inbox_tail->next_run = t;
  else
    w->inbox_head = t;
  w->inbox_tail = t;
  if (w->napping) {
    uv_cond_signal(&w->cv);
    if (w->tr) note_woken(w);
  }
  uv_mutex_unlock(&w->mu);
  atomic_fetch_add(&w->inbox_n, 1);
  if (atomic_load(&w->sleeping)) {
    if (w->tr) note_woken(w);
    uv_async_send(&w->async);
  }
}

/* From another thread, or while t waits in the inbox, `hurry` makes
 * drain_inbox put it first. (A hurry left over from a wake that found t
 * already in its worker's run queue makes a later wake go first once:
 * harmless.) */
void weir__task_wake_first(weir__task *t) {
  weir__worker *w = t->worker;
  if (cur_worker != w) {
    atomic_store(&t->hurry, 1);
    weir__task_wake(t);
    return;
  }
  if (atomic_exchange(&t->queued, 1)) {
    if (w->rq_head == t) return;
    /* Queued further back: unlink it (a worker runs a few tasks). */
    weir__task *p = w->rq_head;
    while (p && p->next_run != t) p = p->next_run;
    if (!p) { /* in the inbox: another thread woke it */
      atomic_store(&t->hurry, 1);
      return;
    }
    p->next_run = t->next_run;
    if (w->rq_tail == t) w->rq_tail = p;
  }
  rq_push_front(w, t);
}

static void drain_inbox(weir__worker *w) {
  if (!atomic_load_explicit(&w->inbox_n, memory_order_relaxed)) return;
  uv_mutex_lock(&w->mu);
  weir__task *t = w->inbox_head;
  w->inbox_head = w->inbox_tail = NULL;
  atomic_store(&w->inbox_n, 0);
  uv_mutex_unlock(&w->mu);
  while (t) {
    weir__task *n = t->next_run;
    if (atomic_exchange(&t->hurry, 0))
      rq_push_front(w, t);
    else
      rq_push(w, t);
    t = n;
  }
}

static void on_timer(uv_timer_t *h) {
  weir__task_wake(h->data);
  /* uv_run(UV_RUN_ONCE) runs due timers before it polls, and computes the
   * poll timeout from libuv's own state, which knows nothing of our run
   * queue: without this the task just queued would wait for an unrelated
   * event. uv_stop makes that poll return at once. */
  uv_stop(h->loop);
}

void weir__task_wake_after(weir__task *t, uint64_t us) {
  if (us * 1000u < SHORT_NS) {
    weir__worker *w = t->worker;
    uint64_t at = weir_clock_mono_ns() + us * 1000u;
    if (!t->wake_at || at < t->wake_at) t->wake_at = at;
    if (!w->short_min || at < w->short_min) w->short_min = at;
    return;
  }
  uint64_t ms = (us + 999) / 1000;
  /* The loop's clock is only read as it iterates: a worker busy with its
   * tasks may hold one from long ago, and a timer from it comes early. */
  uv_update_time(&t->worker->loop);
  uv_timer_start((uv_timer_t *)t->timer, on_timer, ms, 0);
}

int weir__task_wake_pending(const weir__task *t) {
  return t->wake_at != 0 || uv_is_active((const uv_handle_t *)t->timer);
}

/* Wakes the tasks whose short wait ended by `now`; the next deadline
 * becomes short_min. */
static void fire_short(weir__worker *w, uint64_t now) {
  uint64_t next = 0;
  for (uint32_t i = 0; i < w->ntasks; i++) {
    weir__task *t = w->tasks[i];
    if (!t->wake_at) continue;
    if (t->wake_at <= now) {
      t->wake_at = 0;
      weir__task_wake(t);
    } else if (!next || t->wake_at < next) {
      next = t->wake_at;
    }
  }
  w->short_min = next;
}

/* Nothing to run before short_min: waits for it or for a wake-up. */
static void nap(weir__worker *w) {
  uv_mutex_lock(&w->mu);
  w->napping = 1;
  for (;;) {
    uint64_t now = weir_clock_mono_ns();
    if (w->inbox_head || atomic_load(&w->stop) || now >= w->short_min) break;
    (void)uv_cond_timedwait(&w->cv, &w->mu, w->short_min - now);
  }
  w->napping = 0;
  uv_mutex_unlock(&w->mu);
}

static void on_async(uv_async_t *h) {
  (void)h; /* its only job is to end uv_run's wait */
}

static void worker_loop(weir__worker *w) {
  uint32_t steps = 0;
  uint64_t polled = weir_clock_mono_ns();
  for (;;) {
    if (atomic_load_explicit(&w->stop, memory_order_acquire)) return;
    drain_inbox(w);
    weir__task *t = rq_pop(w);
    if (t) {
      atomic_store(&t->queued, 0);
      if (w->tr) w->tr->step_start = weir_clock_mono_ns();
      if (weir__task_run(t)) weir__task_wake(t);
      uint64_t now = weir_clock_mono_ns();
      if (w->tr) weir__trace_slice(w->tr, (int32_t)t->index, w->tr->step_start, now);
      if (w->short_min && now >= w->short_min) fire_short(w, now);
      if (++steps >= STEPS_PER_POLL || now - polled >= POLL_NS) {
        steps = 0;
        polled = now;
        uv_run(&w->loop, UV_RUN_NOWAIT);
      }
      continue;
    }
    uv_run(&w->loop, UV_RUN_NOWAIT);
    if (w->short_min) fire_short(w, weir_clock_mono_ns());
    if (w->rq_head) continue;
    uint64_t t0 = weir_clock_mono_ns(), t1 = t0;
    uint64_t spin_end = w->short_min && w->short_min < t0 + SPIN_NS ? w->short_min : t0 + SPIN_NS;
    while (!atomic_load_explicit(&w->inbox_n, memory_order_relaxed) &&
           !atomic_load_explicit(&w->stop, memory_order_relaxed) && t1 < spin_end) {
      weir__cpu_relax();
      t1 = weir_clock_mono_ns();
    }
    w->spin_ns += t1 - t0;
    if (w->tr) weir__trace_slice(w->tr, WEIR__SLICE_SPIN, t0, t1);
    if (atomic_load(&w->inbox_n) || atomic_load(&w->stop)) continue;
    if (w->short_min) {
      if (w->short_min > t1) nap(w);
    } else {
      atomic_store(&w->sleeping, 1);
      if (!atomic_load(&w->inbox_n) && !atomic_load(&w->stop)) uv_run(&w->loop, UV_RUN_ONCE);
      atomic_store(&w->sleeping, 0);
    }
    uint64_t t2 = weir_clock_mono_ns();
    w->sleep_ns += t2 - t1;
    w->sleeps++;
    if (w->tr) trace_sleep(w, t1, t2);
  }
}

static void close_cb(uv_handle_t *h) {
  (void)h;
}

static void worker_main(void *arg) {
  weir__worker *w = arg;
  cur_worker = w;
  w->started_ns = weir_clock_mono_ns();
  int failed = 0;
  for (uint32_t i = 0; i < w->ntasks && !failed; i++) {
    int rc = weir__task_open(w->tasks[i]);
    if (rc) failed = 1;
  }
  if (!failed)
    for (uint32_t i = 0; i < w->ntasks; i++) weir__task_wake(w->tasks[i]);
  worker_loop(w);
  w->ended_ns = weir_clock_mono_ns();
  /* A running worker sees stop before the coordinator's wake-up is sent;
   * closing the loop under that uv_async_send would make it write to a
   * closed descriptor (libuv aborts). */
  while (atomic_load_explicit(&w->stop, memory_order_acquire) != 2) weir__cpu_relax();
  uv_barrier_wait(w->quiesce);
  for (uint32_t i = 0; i < w->ntasks; i++) {
    weir__task_close(w->tasks[i]);
    uv_close((uv_handle_t *)w->tasks[i]->timer, close_cb);
  }
  uv_close((uv_handle_t *)&w->async, close_cb);
  uv_run(&w->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&w->loop);
  WEIR_ASSERT(rc == 0);
  cur_worker = NULL;
}

int weir__workers_start(weir_job *job) {
  uv_barrier_t *bar = weir_malloc(sizeof *bar);
  if (uv_barrier_init(bar, job->plan.nworkers) != 0) {
    weir_free(bar);
    return WEIR_ENOMEM;
  }
  for (uint32_t i = 0; i < job->plan.nworkers; i++) {
    weir__worker *w = job->plan.workers[i];
    w->quiesce = bar;
    if (job->trace) w->tr = weir_calloc(1, sizeof *w->tr);
    int rc = uv_loop_init(&w->loop);
    if (rc) return WEIR_ENOMEM;
    uv_async_init(&w->loop, &w->async, on_async);
    for (uint32_t k = 0; k < w->ntasks; k++) {
      uv_timer_t *tm = weir_malloc(sizeof *tm);
      uv_timer_init(&w->loop, tm);
      tm->data = w->tasks[k];
      w->tasks[k]->timer = tm;
    }
  }
  for (uint32_t i = 0; i < job->plan.nworkers; i++) {
    weir__worker *w = job->plan.workers[i];
    if (uv_thread_create(&w->thread, worker_main, w) != 0) {
      /* Cannot start the pool: nothing has run yet; report and let the
       * already started workers be stopped by the coordinator. */
      WEIR_ASSERT(0 && "uv_thread_create failed");
    }
  }
  return 0;
}

void weir__workers_stop(weir_job *job) {
  for (uint32_t i = 0; i < job->plan.nworkers; i++) {
    weir__worker *w = job->plan.workers[i];
    atomic_store_explicit(&w->stop, 1, memory_order_release);
    /* Tests: the worker may see stop, and the others, before the wake-up. */
    (void)weir_failpoint("worker.stop_wake");
    uv_mutex_lock(&w->mu);
    if (w->napping) uv_cond_signal(&w->cv);
    uv_mutex_unlock(&w->mu);
    uv_async_send(&w->async);
    atomic_store_explicit(&w->stop, 2, memory_order_release);
  }
}

void weir__workers_join(weir_job *job) {
  uv_barrier_t *bar = NULL;
  for (uint32_t i = 0; i < job->plan.nworkers; i++) {
    weir__worker *w = job->plan.workers[i];
    uv_thread_join(&w->thread);
    /* Idle time is where a job on few cores loses to its checkpoints: a
     * worker displaced by the store writer starves the others. */
    WEIR_LOG_D("worker %u: %llu ms, of which asleep %llu ms (%llu times), spinning %llu ms", i,
               (unsigned long long)((w->ended_ns - w->started_ns) / 1000000),
               (unsigned long long)(w->sleep_ns / 1000000), (unsigned long long)w->sleeps,
               (unsigned long long)(w->spin_ns / 1000000));
    bar = w->quiesce;
    weir_free(w->tr);
    w->tr = NULL;
    for (uint32_t k = 0; k < w->ntasks; k++) {
      weir_free(w->tasks[k]->timer);
      w->tasks[k]->timer = NULL;
    }
  }
  if (bar) {
    uv_barrier_destroy(bar);
    weir_free(bar);
  }
}
