/* twophase.c: owns the two-phase-commit sink driver (weir/sink.h): the
 * operator that ties a destination's transactions to checkpoints, the sink
 * subtask's commit thread and its mailbox, the sink counters, and the
 * sink's checkpointed state.
 *
 * DESIGN. Per sink subtask, the task thread owns the list of *pending*
 * transactions (pre-committed, not known to be committed), in epoch order.
 * "n complete" hands every pending transaction with epoch <= n that is not
 * yet handed over to the commit thread, in order, through a FIFO under
 * `mu`; the thread commits them one by one (retrying with a backoff on
 * WEIR_EAGAIN), puts each on the `done` list, and wakes the task
 * (weir_ctx_wake). The task's poll takes the done list and drops those
 * transactions from the pending list; a permanent error fails the job with
 * the destination's message. A transaction stays in the pending list (and so
 * in every snapshot) until its commit is known, so a crash at any point
 * recovers it: recovery commits it again, which is why commit is idempotent.
 *
 * A destination that makes a transaction durable on a thread of its own
 * returns WEIR_SINK_LATER from pre_commit: the transaction goes onto the
 * pending list as `preparing`, the snapshot is written with it and
 * returns WEIR_SNAPSHOT_LATER, and poll (woken by the destination) takes
 * the answer (vt->prepared) and acknowledges the snapshot, or declines
 * it and drops the transaction. At most one is preparing: a snapshot
 * first takes the previous answer (waiting if that checkpoint timed out
 * before it came), so no snapshot holds a transaction not known durable,
 * and "complete" queues nothing from the preparing one on.
 *
 * While the thread holds a transaction, both threads read its handle (never
 * written after pre_commit); only the thread writes its `c` and result
 * fields, and the task reads them only after taking it from `done` under
 * `mu`. Counters are atomics written by either thread; the task publishes
 * them as named counters (weir_ctx_count) at each poll.
 *
 * State (little-endian): "WSK2", u64 checkpoint id, 8 x u64 counter totals,
 * u32 npending, then per pending transaction: u64 epoch, u64 precommit_ms,
 * u32 origin (the subtask that pre-committed it), u64 handle length, handle
 * bytes. ("WSK1", written before, has no origin: the subtask's own.)
 * Records append (weir_operator_vt.rescalable): restored with another
 * parallelism, a subtask gets the records of the old subtasks it takes
 * over one after the other, and commits their pending transactions under
 * their origin (weir_sink_commit.origin), so that a destination finds
 * what they wrote and names their operations as before; the counters add
 * up.
 */
#include "sink_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/vtable.h"
#include "weir/sink.h"

#define MAGIC "WSK2"
#define MAGIC_V1 "WSK1"
#define BACKOFF_MIN_MS 5u
#define BACKOFF_MAX_MS 1000u

const char *const weir_sink_counter_names[WEIR_SINK_NCOUNTERS] = {
    "attempts",   "requests", "responses", "duplicates",
    "rejections", "commits",  "aborts",    "recovered"};

void weir_sink_buf_put(weir_sink_buf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t c = b->cap ? b->cap : 256;
    while (c < b->len + n) c *= 2;
    b->data = weir_realloc(b->data, c);
    b->cap = c;
  }
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
}

void weir_sink_buf_u32(weir_sink_buf *b, uint32_t v) {
  uint8_t x[4];
  for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
  weir_sink_buf_put(b, x, 4);
}

void weir_sink_buf_u64(weir_sink_buf *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
  weir_sink_buf_put(b, x, 8);
}

void weir_sink_buf_free(weir_sink_buf *b) {
  weir_free(b->data);
  memset(b, 0, sizeof *b);
}

/* ---- per subtask ---------------------------------------------------------- */

/* One pre-committed transaction. Owned by the task thread, except while
 * handed to the commit thread (see DESIGN). */
typedef struct txn {
  struct txn *next;  /* pending list (task thread) */
  struct txn *wnext; /* work or done list (under mu) */
  uint64_t epoch, precommit_ms;
  uint64_t oldest_pending; /* weir_sink_commit's; 0 when recovered */
  uint32_t origin;         /* the subtask that pre-committed it */
  int recovered;
  int queued; /* handed to the commit thread */
  weir_sink_buf handle;
  weir_sink_commit c; /* the commit thread's while queued */
  int rc;
  char err[512];
} txn;

struct weir_sink_io {
  struct tp *tp;
};

/* A sink subtask's driver state. Threads: see DESIGN. */
typedef struct tp {
  const weir_sink_dest_vt *vt;
  void *dest;
  weir_ctx *ctx;
  uint32_t subtask;
  char *name;
  char *job_id;
  txn *head, *tail;       /* pending, epoch order (task thread) */
  uint64_t pending_bytes; /* their handles' bytes (task thread) */
  uint64_t buffer_bytes;  /* the bound on pending_bytes (weir_sink_dest_vt) */
  /* The pending transaction the destination makes durable on its own
   * thread (WEIR_SINK_LATER), and the checkpoint that waits for it. */
  txn *preparing;
  uint64_t later_id;
  uint32_t inflight; /* queued, not yet taken back (task thread) */
  /* The mailbox between the task and the commit thread. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  txn *work_head, *work_tail; /* under mu */
  txn *done_head, *done_tail; /* under mu */
  int stop;                   /* under mu */
  int broken;                 /* commit thread: a permanent error happened */
  atomic_int mail;            /* done list not empty: poll has work */
  atomic_int stopping;        /* mirror of stop for weir_sink_io_stopping */
  pthread_t th;
  int th_started;
  weir_sink_io io;
  _Atomic uint64_t count[WEIR_SINK_NCOUNTERS]; /* this run's */
  uint64_t published[WEIR_SINK_NCOUNTERS];     /* given to weir_ctx_count (task) */
  uint64_t base[WEIR_SINK_NCOUNTERS];          /* totals of earlier runs (restored) */
} tp;

/* The node's arg: the destination (a copy of the caller's table,
 * base/vtable.h) and its own arg. Owned by the job. */
typedef struct tp_arg {
  weir_sink_dest_vt vt;
  void *arg;
} tp_arg;

void *weir_sink_dest_arg(const weir_ctx *ctx) {
  const tp_arg *a = weir_ctx_arg(ctx);
  return a->arg;
}

void weir_sink_io_count(weir_sink_io *io, weir_sink_counter k, uint64_t n) {
  if ((unsigned)k < WEIR_SINK_NCOUNTERS)
    atomic_fetch_add_explicit(&io->tp->count[k], n, memory_order_relaxed);
}

int weir_sink_io_stopping(weir_sink_io *io) {
  return atomic_load(&io->tp->stopping);
}

int weir_sink_io_sleep(weir_sink_io *io, uint32_t ms) {
  tp *t = io->tp;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&t->mu);
  /* A spurious wake-up only shortens one backoff: no loop needed. */
  if (!t->stop) pthread_cond_timedwait(&t->cv, &t->mu, &ts);
  int stop = t->stop;
  pthread_mutex_unlock(&t->mu);
  return stop;
}

static void count(tp *t, weir_sink_counter k, uint64_t n) {
  atomic_fetch_add_explicit(&t->count[k], n, memory_order_relaxed);
}

/* ---- the commit thread ---------------------------------------------------- */

/* Commits one transaction, retrying WEIR_EAGAIN with a growing backoff. */
static int commit_one(tp *t, txn *x) {
  uint32_t backoff = BACKOFF_MIN_MS;
  int fp = weir_failpoint(x->recovered ? "sink.during_recover" : "sink.before_commit");
  if (fp) {
    snprintf(x->err, sizeof x->err, "failpoint %s",
             x->recovered ? "sink.during_recover" : "sink.before_commit");
    return fp;
  }
  for (;;) {
    /* Fencing (docs/leases.md §4): a run that no longer owns the job (paused
     * past its lease and taken over) makes nothing more visible. */
    int own = weir_ctx_owner_check(t->ctx);
    if (own) {
      snprintf(x->err, sizeof x->err,
               "epoch %llu not committed: this run no longer owns the job (fenced)",
               (unsigned long long)x->epoch);
      return own;
    }
    count(t, WEIR_SINK_ATTEMPTS, 1);
    int rc = t->vt->commit(t->dest, &x->c);
    if (rc != WEIR_EAGAIN) return rc;
    if (weir_sink_io_sleep(&t->io, backoff)) return WEIR_ECANCELED;
    backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
  }
}

static void *commit_thread(void *arg) {
  tp *t = arg;
  for (;;) {
    pthread_mutex_lock(&t->mu);
    while (!t->stop && !t->work_head) pthread_cond_wait(&t->cv, &t->mu);
    if (t->stop) {
      pthread_mutex_unlock(&t->mu);
      return NULL;
    }
    txn *x = t->work_head;
    t->work_head = x->wnext;
    if (!t->work_head) t->work_tail = NULL;
    pthread_mutex_unlock(&t->mu);

    /* After a permanent error nothing later may be committed (order). */
    x->rc = t->broken ? WEIR_ECANCELED : commit_one(t, x);
    if (x->rc == 0) {
      if (weir_failpoint("sink.after_commit")) x->rc = WEIR_EIO;
    } else if (x->rc != WEIR_ECANCELED) {
      t->broken = 1;
    }
    pthread_mutex_lock(&t->mu);
    x->wnext = NULL;
    if (t->done_tail)
      t->done_tail->wnext = x;
    else
      t->done_head = x;
    t->done_tail = x;
    pthread_mutex_unlock(&t->mu);
    atomic_store(&t->mail, 1);
    weir_ctx_wake(t->ctx);
  }
}

/* ---- the task side -------------------------------------------------------- */

static void txn_free(txn *x) {
  weir_sink_buf_free(&x->handle);
  weir_free(x);
}

static void pending_append(tp *t, txn *x) {
  t->pending_bytes += x->handle.len;
  x->next = NULL;
  if (t->tail)
    t->tail->next = x;
  else
    t->head = x;
  t->tail = x;
}

static void pending_remove(tp *t, txn *x) {
  txn *prev = NULL;
  for (txn *p = t->head; p; prev = p, p = p->next) {
    if (p != x) continue;
    t->pending_bytes -= p->handle.len;
    if (prev)
      prev->next = p->next;
    else
      t->head = p->next;
    if (t->tail == p) t->tail = prev;
    return;
  }
}

/* Hands x to the commit thread. */
static void queue(tp *t, txn *x) {
  x->queued = 1;
  x->c = (weir_sink_commit){.epoch = x->epoch,
                            .handle = x->handle.data,
                            .len = x->handle.len,
                            .precommit_ms = x->precommit_ms,
                            .recovered = x->recovered,
                            .oldest_pending = x->oldest_pending,
                            .origin = x->origin,
                            .job_id = t->job_id,
                            .sink = t->name,
                            .subtask = t->subtask,
                            .io = &t->io,
                            .err = x->err,
                            .errlen = sizeof x->err};
  x->err[0] = '\0';
  t->inflight++;
  pthread_mutex_lock(&t->mu);
  x->wnext = NULL;
  if (t->work_tail)
    t->work_tail->wnext = x;
  else
    t->work_head = x;
  t->work_tail = x;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

static void publish(tp *t) {
  for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++) {
    uint64_t v = atomic_load_explicit(&t->count[k], memory_order_relaxed);
    if (v != t->published[k]) {
      weir_ctx_count(t->ctx, weir_sink_counter_names[k], v - t->published[k]);
      t->published[k] = v;
    }
  }
}

static int settle(tp *t, int wait);

static int tp_poll(weir_ctx *ctx) {
  tp *t = weir_ctx_user(ctx);
  if (!t) return WEIR_POLL_IDLE;
  int rc = settle(t, 0);
  if (atomic_exchange(&t->mail, 0)) {
    pthread_mutex_lock(&t->mu);
    txn *d = t->done_head;
    t->done_head = t->done_tail = NULL;
    pthread_mutex_unlock(&t->mu);
    while (d) {
      txn *n = d->wnext;
      t->inflight--;
      if (d->rc < 0 && !rc) {
        rc = weir_ctx_fail(ctx, d->rc, "sink '%s' subtask %u: epoch %llu: %s", t->name, t->subtask,
                           (unsigned long long)d->epoch, d->err[0] ? d->err : weir_strerror(d->rc));
      }
      if (d->rc == 0) {
        count(t, WEIR_SINK_COMMITS, 1);
        if (d->recovered) count(t, WEIR_SINK_RECOVERED, 1);
        pending_remove(t, d);
        txn_free(d);
      }
      d = n;
    }
  }
  publish(t);
  if (rc < 0) return rc;
  /* Past the bound, no more input until commits land (weir_sink.h). */
  if (t->pending_bytes >= t->buffer_bytes) return WEIR_POLL_FULL;
  return t->inflight || t->preparing ? WEIR_POLL_BUSY : WEIR_POLL_IDLE;
}

static void tp_free(tp *t) {
  if (t->th_started) {
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    atomic_store(&t->stopping, 1);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->th, NULL);
  }
  /* Every transaction is on the pending list (queued or not). */
  for (txn *x = t->head, *n; x; x = n) {
    n = x->next;
    txn_free(x);
  }
  if (t->dest && t->vt->close) t->vt->close(t->ctx, t->dest);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  weir_free(t->name);
  weir_free(t->job_id);
  weir_free(t);
}

/* What the destination holds of this subtask after checkpoint id is
 * discarded (it never completed). */
static int abort_after(tp *t, uint64_t id) {
  if (!t->vt->abort_after) return 0;
  int rc = t->vt->abort_after(t->ctx, t->dest, id);
  if (rc > 0) count(t, WEIR_SINK_ABORTS, (uint64_t)rc);
  return rc < 0 ? rc : 0;
}

static int tp_open(weir_ctx *ctx) {
  const tp_arg *a = weir_ctx_arg(ctx);
  tp *t = weir_calloc(1, sizeof *t);
  t->vt = &a->vt;
  t->ctx = ctx;
  t->subtask = weir_ctx_subtask(ctx);
  t->name = weir_strdup(weir_ctx_name(ctx));
  t->job_id = weir_strdup(weir_ctx_job_id(ctx));
  t->io.tp = t;
  t->buffer_bytes = a->vt.buffer_bytes ? a->vt.buffer_bytes(a->arg) : 0;
  if (!t->buffer_bytes) t->buffer_bytes = WEIR_SINK_BUFFER_DEFAULT;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  /* Every counter by name from the start, so a summary shows zeros too
   * (and the commit thread never adds a name: weir_ctx_count is the task's). */
  for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++) weir_ctx_count(ctx, weir_sink_counter_names[k], 0);
  int rc = t->vt->open(ctx, &t->dest);
  if (rc < 0) {
    t->dest = NULL;
    tp_free(t);
    return rc;
  }
  if (pthread_create(&t->th, NULL, commit_thread, t) != 0) {
    tp_free(t);
    return weir_ctx_fail(ctx, WEIR_ENOMEM, "cannot start the sink's commit thread");
  }
  t->th_started = 1;
  weir_ctx_set_user(ctx, t);
  /* A restored run where this subtask has no state of its own (a rescale
   * added it): no restore callback follows, but what an earlier run of
   * this subtask began after the checkpoint must still go, and its
   * committed output stay (the destination's open kept it). */
  uint64_t r = weir_ctx_restored_checkpoint(ctx);
  if (r && !weir_ctx_restoring(ctx)) {
    rc = abort_after(t, r);
    if (rc < 0) {
      weir_ctx_set_user(ctx, NULL);
      tp_free(t);
      return rc;
    }
  }
  return 0;
}

static void tp_close(weir_ctx *ctx) {
  tp *t = weir_ctx_user(ctx);
  if (!t) return;
  publish(t);
  tp_free(t);
  weir_ctx_set_user(ctx, NULL);
}

static int tp_process(weir_ctx *ctx, const weir_record *r) {
  tp *t = weir_ctx_user(ctx);
  int rc = t->vt->write(ctx, t->dest, r);
  if (rc < 0) return rc;
  return weir_failpoint("sink.after_write");
}

static int tp_process_batch(weir_ctx *ctx, const weir_batch *b) {
  tp *t = weir_ctx_user(ctx);
  for (uint32_t i = 0; i < b->len; i++) {
    weir_record r = weir_batch_record(b, i);
    int rc = t->vt->write(ctx, t->dest, &r);
    if (rc < 0) return rc;
  }
  return weir_failpoint("sink.after_write");
}

/* Closes the open transaction as `epoch`: onto the pending list. Returns
 * 0, WEIR_SINK_LATER (it is t->preparing until the destination answers,
 * settle) or a negative error. */
static int pre_commit(tp *t, uint64_t epoch) {
  /* Fencing (docs/leases.md §4): a run paused past its lease and taken
   * over must not touch the destination any more (a file sink's rename
   * would move its successor's in-progress part). */
  int own = weir_ctx_owner_check(t->ctx);
  if (own)
    return weir_ctx_fail(t->ctx, own,
                         "sink '%s' subtask %u: epoch %llu not pre-committed: this run no longer "
                         "owns the job (fenced)",
                         t->name, t->subtask, (unsigned long long)epoch);
  /* A pause here, past the check, is what the destinations' own fencing
   * must stand (test_lease's paused_before_pre_commit). */
  if ((own = weir_failpoint("sink.before_pre_commit")) != 0) return own;
  txn *x = weir_calloc(1, sizeof *x);
  int rc = t->vt->pre_commit(t->ctx, t->dest, epoch, &x->handle);
  if (rc == WEIR_SINK_LATER && !t->vt->prepared)
    rc = weir_ctx_fail(t->ctx, WEIR_EOPERATOR,
                       "sink '%s': pre_commit returned WEIR_SINK_LATER, but the destination has "
                       "no prepared callback",
                       t->name);
  if (rc != 0 && rc != WEIR_SINK_LATER) {
    txn_free(x);
    return rc < 0 ? rc : 0;
  }
  x->epoch = epoch;
  x->precommit_ms = weir_clock_wall_ms();
  x->origin = t->subtask;
  pending_append(t, x);
  x->oldest_pending = t->head->epoch;
  if (rc == WEIR_SINK_LATER) {
    t->preparing = x;
    return rc;
  }
  return weir_failpoint("sink.after_pre_commit");
}

/* Takes the destination's answer for t->preparing (with wait: waits for
 * it) and gives the checkpoint that waits for it its acknowledgement: the
 * transaction stays pending, or, declined, it is dropped (the destination
 * keeps its records for the next epoch). Returns 0 or a negative error. */
static int settle(tp *t, int wait) {
  txn *x = t->preparing;
  if (!x) return 0;
  char why[768];
  why[0] = '\0';
  int r = t->vt->prepared(t->ctx, t->dest, wait, why, sizeof why);
  if (r == 0) return 0;
  t->preparing = NULL;
  if (r < 0) return r;
  if (r == 2) {
    pending_remove(t, x);
    txn_free(x);
    return weir_ctx_snapshot_ack(t->ctx, t->later_id, why[0] ? why : "declined");
  }
  int fp = weir_failpoint("sink.after_pre_commit");
  if (fp) return fp;
  return weir_ctx_snapshot_ack(t->ctx, t->later_id, NULL);
}

/* End of input. Without checkpoints the whole run is epoch 0, committed
 * now (the task waits for it through poll); with checkpoints the open
 * transaction is pre-committed by the final checkpoint's barrier. */
static int tp_finish(weir_ctx *ctx) {
  tp *t = weir_ctx_user(ctx);
  int rc = t->vt->finish ? t->vt->finish(ctx, t->dest) : 0;
  if (rc < 0) return rc;
  if (weir_ctx_checkpointing(ctx)) return 0;
  rc = pre_commit(t, 0);
  if (rc == WEIR_SINK_LATER) rc = settle(t, 1);
  if (rc < 0) return rc;
  for (txn *x = t->head; x; x = x->next)
    if (!x->queued) queue(t, x);
  return 0;
}

static int tp_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  tp *t = weir_ctx_user(ctx);
  /* A snapshot never holds an epoch whose durability is not known yet
   * (its checkpoint timed out before the answer came). */
  int rc = settle(t, 1);
  if (rc < 0) return rc;
  int later = (rc = pre_commit(t, id)) == WEIR_SINK_LATER;
  if (rc < 0) return rc;
  weir_sink_buf b = {0};
  weir_sink_buf_put(&b, MAGIC, 4);
  weir_sink_buf_u64(&b, id);
  for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++)
    weir_sink_buf_u64(&b, t->base[k] + atomic_load_explicit(&t->count[k], memory_order_relaxed));
  uint32_t n = 0;
  for (txn *x = t->head; x; x = x->next) n++;
  weir_sink_buf_u32(&b, n);
  for (txn *x = t->head; x; x = x->next) {
    weir_sink_buf_u64(&b, x->epoch);
    weir_sink_buf_u64(&b, x->precommit_ms);
    weir_sink_buf_u32(&b, x->origin);
    weir_sink_buf_u64(&b, x->handle.len);
    weir_sink_buf_put(&b, x->handle.data, x->handle.len);
  }
  rc = weir_snapshot_write(w, b.data, b.len);
  weir_sink_buf_free(&b);
  if (rc < 0 || !later) return rc;
  t->later_id = id;
  return WEIR_SNAPSHOT_LATER;
}

static int tp_complete(weir_ctx *ctx, uint64_t id) {
  tp *t = weir_ctx_user(ctx);
  /* In epoch order, up to one not known durable yet. */
  for (txn *x = t->head; x && x->epoch <= id && x != t->preparing; x = x->next)
    if (!x->queued) queue(t, x);
  return 0;
}

/* "n aborted" is not "roll back n": epoch n stays pending (see above). */
static int tp_aborted(weir_ctx *ctx, uint64_t id) {
  tp *t = weir_ctx_user(ctx);
  WEIR_LOG_D("sink '%s' subtask %u: checkpoint %llu aborted; its epoch stays pending", t->name,
             t->subtask, (unsigned long long)id);
  return 0;
}

/* ---- state ------------------------------------------------------------------- */

typedef struct rd {
  const uint8_t *p;
  size_t left;
} rd;

static int rd_u64(rd *r, uint64_t *v) {
  if (r->left < 8) return -1;
  *v = 0;
  for (int i = 7; i >= 0; i--) *v = (*v << 8) | r->p[i];
  r->p += 8;
  r->left -= 8;
  return 0;
}

static int rd_u32(rd *r, uint32_t *v) {
  if (r->left < 4) return -1;
  *v = 0;
  for (int i = 3; i >= 0; i--) *v = (*v << 8) | r->p[i];
  r->p += 4;
  r->left -= 4;
  return 0;
}

/* One pending transaction as decode finds it. */
typedef struct rd_txn {
  uint64_t epoch, ms;
  uint32_t origin;
  const uint8_t *handle;
  size_t len;
} rd_txn;

/* Walks a state: one or more records (appended by a rescaled restore),
 * each "WSK2" or "WSK1" (whose transactions are `own`'s: only the first
 * record, the subtask's own, may be one). Sets *id (every record's, the
 * same), adds up the counters and the number of pending transactions, and
 * calls each(user, txn) per pending transaction. Returns 0, WEIR_ENOENT
 * (not ours), WEIR_EPLAN (an appended "WSK1": whose epochs they are is not
 * known) or WEIR_ECORRUPT. */
static int decode(const void *p, size_t len, uint32_t own, uint64_t *id,
                  uint64_t counters[WEIR_SINK_NCOUNTERS], uint32_t *npending,
                  void (*each)(void *, const rd_txn *), void *user) {
  rd r = {p, len};
  memset(counters, 0, WEIR_SINK_NCOUNTERS * sizeof *counters);
  *npending = 0;
  for (int first = 1; first || r.left; first = 0) {
    int v1 = r.left >= 4 && memcmp(r.p, MAGIC_V1, 4) == 0;
    if (r.left < 4 || (!v1 && memcmp(r.p, MAGIC, 4) != 0))
      return first ? WEIR_ENOENT : WEIR_ECORRUPT;
    if (v1 && !first) return WEIR_EPLAN;
    r.p += 4;
    r.left -= 4;
    uint64_t rid;
    uint32_t n;
    if (rd_u64(&r, &rid) || (!first && rid != *id)) return WEIR_ECORRUPT;
    *id = rid;
    for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++) {
      uint64_t c;
      if (rd_u64(&r, &c)) return WEIR_ECORRUPT;
      counters[k] += c;
    }
    if (rd_u32(&r, &n)) return WEIR_ECORRUPT;
    for (uint32_t i = 0; i < n; i++) {
      rd_txn x = {.origin = own};
      uint64_t hl;
      if (rd_u64(&r, &x.epoch) || rd_u64(&r, &x.ms) || (!v1 && rd_u32(&r, &x.origin)) ||
          rd_u64(&r, &hl) || hl > r.left)
        return WEIR_ECORRUPT;
      x.handle = r.p;
      x.len = (size_t)hl;
      if (each) each(user, &x);
      r.p += hl;
      r.left -= (size_t)hl;
    }
    *npending += n;
  }
  return 0;
}

/* Into the pending list, in epoch order (records of several old subtasks
 * interleave). */
static void restore_one(void *user, const rd_txn *r) {
  tp *t = user;
  txn *x = weir_calloc(1, sizeof *x);
  x->epoch = r->epoch;
  x->precommit_ms = r->ms;
  x->origin = r->origin;
  x->recovered = 1;
  weir_sink_buf_put(&x->handle, r->handle, r->len);
  t->pending_bytes += x->handle.len;
  txn *prev = NULL;
  for (txn *q = t->head; q && q->epoch <= x->epoch; q = q->next) prev = q;
  if (!prev) {
    x->next = t->head;
    t->head = x;
  } else {
    x->next = prev->next;
    prev->next = x;
  }
  if (!x->next) t->tail = x;
}

/* recover: what the restored checkpoint pre-committed is committed (its
 * checkpoint completed, it may or may not have been committed before the
 * crash), what came after it is aborted. */
static int tp_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  tp *t = weir_ctx_user(ctx);
  size_t len;
  const void *p = weir_snapshot_data(r, &len);
  uint64_t id = 0;
  uint32_t n = 0;
  uint64_t counters[WEIR_SINK_NCOUNTERS];
  int rc = decode(p, len, t->subtask, &id, counters, &n, NULL, NULL);
  /* A run moved to another destination (--allow-sink-change; the engine
   * let it through only for a destination that can move): recovery
   * below concerns the one the checkpoint was taken with. */
  const char *old = weir_ctx_moved_from(ctx);
  if (old && rc >= 0) {
    if (!t->vt->move)
      return weir_ctx_fail(ctx, WEIR_EMISMATCH, "sink '%s': cannot move from %s", t->name, old);
    int mrc = t->vt->move(ctx, t->dest, old);
    if (mrc < 0) return mrc;
    WEIR_LOG_I("sink '%s' subtask %u: checkpoint %llu was taken writing to %s: recovery of its "
               "pending epochs happens there",
               t->name, t->subtask, (unsigned long long)id, old);
  }
  if (rc == WEIR_EPLAN)
    return weir_ctx_fail(ctx, WEIR_EPLAN,
                         "sink '%s': checkpoint %llu was written by an earlier weir, whose sink "
                         "state does not say which subtask pre-committed each pending epoch: "
                         "restore it once with the parallelism it was taken with, then rescale "
                         "from a later checkpoint",
                         t->name, (unsigned long long)id);
  if (rc < 0)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "sink '%s' subtask %u: bad checkpointed state",
                         t->name, t->subtask);
  for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++) t->base[k] = counters[k];
  (void)decode(p, len, t->subtask, &id, counters, &n, restore_one, t);
  if ((rc = abort_after(t, id)) < 0) return rc;
  if (n)
    WEIR_LOG_I("sink '%s' subtask %u: recovering %u pending transaction%s of checkpoint %llu",
               t->name, t->subtask, n, n == 1 ? "" : "s", (unsigned long long)id);
  for (txn *x = t->head; x; x = x->next)
    if (!x->queued) queue(t, x);
  return 0;
}

static void info_one(void *user, const rd_txn *r) {
  weir_sink_state_info *out = user;
  if (out->npending < 16) out->pending_epochs[out->npending] = r->epoch;
  out->npending++;
  out->pending_bytes += r->len;
}

int weir_sink_state_decode(const void *p, size_t len, weir_sink_state_info *out) {
  memset(out, 0, sizeof *out);
  uint32_t n = 0;
  int rc = decode(p, len, 0, &out->checkpoint, out->counters, &n, info_one, out);
  out->npending = n;
  return rc;
}

static int tp_destination(const void *arg, weir_destination *d);

static const weir_operator_vt tp_vt = {
    .size = sizeof(weir_operator_vt),
    .name = "twophase",
    .open = tp_open,
    .process = tp_process,
    .process_batch = tp_process_batch,
    .finish = tp_finish,
    .close = tp_close,
    .snapshot = tp_snapshot,
    .restore = tp_restore,
    .checkpoint_complete = tp_complete,
    .checkpoint_aborted = tp_aborted,
    .poll = tp_poll,
    .rescalable = 1,
    .destination = tp_destination,
};

/* The destination's identity, from the destination itself. */
static int tp_destination(const void *arg, weir_destination *d) {
  const tp_arg *a = arg;
  if (!a->vt.identity) return 0;
  int rc = a->vt.identity(a->arg, d->id, sizeof d->id);
  if (rc < 0) return rc;
  d->movable = a->vt.move != NULL;
  if (a->vt.move_note)
    snprintf(d->note, sizeof d->note, "%s", a->vt.move_note);
  else if (d->movable)
    snprintf(d->note, sizeof d->note,
             "the checkpoint's pending epochs are committed in the old destination, new epochs "
             "go to the new one");
  else
    snprintf(d->note, sizeof d->note,
             "the %s sink cannot commit the checkpoint's pending epochs anywhere but where they "
             "were prepared",
             a->vt.name ? a->vt.name : "");
  return 0;
}

static void tp_arg_free(void *p) {
  weir_free(p);
}

int weir_sink_twophase(weir_stream *s, const char *name, const weir_sink_dest_vt *vt, void *arg,
                       int parallelism) {
  weir_job *job = weir_stream_job(s);
  if (!job) return WEIR_EINVAL;
  if (!vt)
    return weir_job_fail(job, WEIR_EINVAL, "sink '%s': no destination (vt is NULL)",
                         name ? name : "?");
  weir_sink_dest_vt own;
  char why[256];
  int rc = weir_vtable_copy(&own, sizeof own, vt, sizeof own, why, sizeof why);
  if (rc) return weir_job_fail(job, rc, "sink '%s': %s", name ? name : "?", why);
  if (!own.open || !own.write || !own.pre_commit || !own.commit)
    return weir_job_fail(job, WEIR_EINVAL, "sink '%s': incomplete destination", name ? name : "?");
  tp_arg *a = weir_calloc(1, sizeof *a);
  a->vt = own;
  a->arg = arg;
  rc = weir_job_adopt(job, a, tp_arg_free);
  if (rc < 0) return rc;
  return weir_sink(s, name, &tp_vt, a, parallelism);
}
