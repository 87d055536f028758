/* task.c: owns the execution of one task: pulling batches from its inputs,
 * running them through its chain of operators, routing what the chain's tail
 * emits into output channels, end of input, and the emit calls of the API.
 *
 * DESIGN
 * A task runs in steps (the mailbox model): a step first makes sure every
 * output channel has room, then consumes up to `budget_batches` input
 * batches (or asks its source for that many batches' worth of records),
 * stopping early when an output fills up, input runs dry, or the step has
 * taken WEIR__STEP_NS: a slow operator then holds up the other tasks of
 * its worker (and the checkpoint barriers they would forward, a source's
 * among them) for about one batch, not for its whole budget.
 *
 * A chain that needs more than WEIR__STEP_NS for a whole batch takes its
 * input batches in slices of about that much time, one slice a step; the
 * rest of the batch stays at the head of its channel (`in_off`: records
 * already consumed), so the worker's other tasks, and a barrier waiting
 * for this one, wait about WEIR__STEP_NS, not a whole batch of a slow
 * operator. Slicing pays for a cost per record, not for a cost per call (a
 * round trip per batch): every slice pays that again. So the chain's time
 * is fitted as call_ns + rec_ns * n over its recent calls (`pace`), and
 * only a chain whose cost per call is under a quarter step is sliced. The
 * fit needs calls of different sizes; batches of one size are taken as all
 * per record until slices (or the sizes input brings) tell otherwise.
 *
 * Operators in a chain hand records to each other through a link batch
 * per chain link: emissions append to it and a full link is processed by
 * the successor at once; after each input batch every link is flushed in
 * chain order, so a record never waits inside a chain across steps.
 *
 * Output batches are pushed when full, when the task goes idle, before any
 * control event, and at the end of a busy step once the buffer timeout has
 * passed since the last flush; so low rates and ends of input never wait on
 * a full batch.
 *
 *   RUNNING --(all inputs ended / source done: finish, push EOI)--> FINISHING
 *   FINISHING --(every output's pending list drained)--> DONE
 *
 * Synchronous checkpoints (see job.c) reuse the barrier as a drain marker:
 * a source pushes it and pauses until the checkpoint completed or failed;
 * a task aligns on it as on a barrier and forwards it, but instead of
 * snapshotting reports itself drained; every task snapshots only once all
 * of them drained (sync_snap_id), when no record is in flight anywhere. A
 * loop head holds the marker back until every head of its loop has it and
 * the loop's count of records in flight is zero, so records that circle in the
 * loop are processed before anything snapshots; the back-edge log it then
 * opens stays empty. Nothing wakes a task when a count reaches zero, so
 * the coordinator wakes every task each millisecond while a synchronous
 * checkpoint drains.
 *
 * Unaligned cuts (job->unaligned; unaligned.h has the state machine): the
 * task scans its input rings for barriers at every step, also when its
 * outputs are full (a producer wakes its consumer when it pushes an
 * unaligned barrier). At the first sight of barrier n it takes the cut:
 * partly filled output batches go into their channels, the data batches
 * waiting on the channels' pending lists are copied into the channel state
 * (output records: emitted before the cut, delivered after the barrier),
 * the operators snapshot, and barrier n goes into every output channel
 * ahead of the pending batches (weir__chan_push_front). Then every record
 * consumed from an input that has not delivered n yet is appended to the
 * channel state (input records), until every input delivered n or ended;
 * and as soon as barrier n is in sight in such an input's queue, the
 * batches in front of it are copied into the channel state at once (they
 * are processed later, not logged again: un_capture), so the channel state
 * is complete when every barrier n is in sight, not when the backlog in
 * front of them has been processed. The channel state is then written as
 * one more entry of checkpoint n (checkpoint.c). With
 * the alignment timeout the task aligns as usual and takes an unaligned cut
 * only when the barrier it saw first has waited longer than the timeout
 * (inputs that already delivered n are then not logged).
 *
 * Restore: the output records go back into their channels when the task
 * opens, before anything it emits; the input records are processed before
 * any live input (a step at a time, sliced like live input), and no
 * barrier is looked for until they are.
 */
#include "task.h"

#include <math.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "snapshot/store.h"
#include "hash.h"
#include "iteration.h"
#include "job.h"

static int op_process(weir_ctx *ctx, const weir__batch *b, uint32_t from, uint32_t n);

/* Publishes a batch on channel j of r; inside a loop, the records it holds
 * are added to the loop's in-flight count first (see iteration.c). */
static inline void router_push(weir__router *r, uint32_t j, weir__batch *b) {
  if (r->loop) weir__loop_publish(r);
  weir__chan_push(r->chans[j], b);
}

/* ---- output routing ---------------------------------------------------- */

/* The per-record emit path (emit_raw -> link batch or router -> batch)
 * is inlined into each emit call of the API, and everything that happens
 * once per batch (taking a batch from a channel, pushing a full one,
 * growing an arena, flushing a link) or never (an oversized record) is
 * kept out of line, so the record path is a few compares and the column
 * stores. */
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((noinline, cold))

/* Out of line: channel j of r has no current batch, or it lacks room for
 * len bytes. Pushes a batch that cannot take the record (growing one that
 * can), takes a new one if needed; returns the batch to append to. */
COLD weir__batch *route_batch(weir__router *r, uint32_t j, uint32_t len) {
  weir__batch *b = r->cur[j];
  if (!b) {
    b = r->cur[j] = weir__chan_batch(r->chans[j]);
  } else if (!weir__batch_fits(b, len)) {
    router_push(r, j, b);
    b = r->cur[j] = weir__chan_batch(r->chans[j]);
  }
  if (!weir__batch_fits(b, len)) WEIR_ASSERT(0 && "an empty batch takes any record");
  return b;
}

/* Out of line: pushes channel j's batch, which just became full. */
COLD void route_full(weir__router *r, uint32_t j, weir__batch *b) {
  router_push(r, j, b);
  r->cur[j] = NULL;
}

HOT void route_append(weir__router *r, uint32_t j, uint64_t key, int64_t ts, uint64_t id,
                      const void *p, uint32_t len) {
  weir__batch *b = r->cur[j];
  if (UNLIKELY(!b || !weir__batch_room(b, len))) b = route_batch(r, j, len);
  weir__batch_append(b, key, ts, id, p, len);
  if (r->loop) r->loop_inc++;
  if (UNLIKELY(b->len == b->cap)) route_full(r, j, b);
}

HOT void emit_routers(weir__task *t, uint64_t key, int64_t ts, uint64_t id, const void *p,
                      uint32_t len) {
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    switch (r->part) {
    case WEIR__PART_FORWARD:
      route_append(r, 0, key, ts, id, p, len);
      break;
    case WEIR__PART_HASH: {
      uint32_t j = r->n == 1 ? 0 : r->kg_target[weir__key_group(key, r->max_par)];
      route_append(r, j, key, ts, id, p, len);
      break;
    }
    case WEIR__PART_REBALANCE:
      route_append(r, r->rr, key, ts, id, p, len);
      if (++r->rr == r->n) r->rr = 0;
      break;
    case WEIR__PART_BROADCAST:
      for (uint32_t j = 0; j < r->n; j++) route_append(r, j, key, ts, id, p, len);
      break;
    }
  }
}

/* Processes a full link batch of ctx by its successor and empties it. */
static int flush_link(weir_ctx *ctx) {
  int rc = op_process(ctx->next, ctx->link, 0, ctx->link->len);
  ctx->link->len = 0;
  ctx->link->used = 0;
  return rc;
}

/* Out of line: the link lacks room for len bytes without growing. Grows it
 * if the record still fits, else processes it and grows the empty one. */
COLD int link_room(weir_ctx *ctx, uint32_t len) {
  if (weir__batch_fits(ctx->link, len)) return 0;
  int rc = flush_link(ctx);
  if (rc) return rc;
  (void)weir__batch_fits(ctx->link, len); /* grows an empty batch */
  return 0;
}

COLD int too_big(weir_ctx *ctx, size_t len) {
  return weir_ctx_fail(ctx, WEIR_ETOOBIG, "record of %zu bytes exceeds the maximum of %u", len,
                       ctx->max_record);
}

HOT int emit_raw(weir_ctx *ctx, uint64_t key, int64_t ts, uint64_t id, const void *p, size_t len) {
  if (UNLIKELY(len > ctx->max_record)) return too_big(ctx, len);
  ctx->n_out++;
  weir__batch *l = ctx->link;
  if (l) { /* a chained successor */
    if (UNLIKELY(!weir__batch_room(l, (uint32_t)len))) {
      int rc = link_room(ctx, (uint32_t)len);
      if (rc) return rc;
    }
    weir__batch_append(l, key, ts, id, p, (uint32_t)len);
    if (UNLIKELY(l->len == l->cap)) return flush_link(ctx);
    return 0;
  }
  emit_routers(ctx->task, key, ts, id, p, (uint32_t)len);
  return 0;
}

static inline uint64_t next_id(weir_ctx *ctx, uint64_t parent) {
  if (parent != ctx->seq_parent) {
    ctx->seq_parent = parent;
    ctx->seq = 0;
  }
  return weir__derive_id(parent, ctx->salt, ctx->seq++);
}

int weir_emit(weir_ctx *ctx, uint64_t key, const void *payload, size_t len) {
  return emit_raw(ctx, key, ctx->cur_ts, next_id(ctx, ctx->cur_id), payload, len);
}

/* A u64 payload: 8 little-endian bytes (weir_payload_u64 reads it back),
 * stored as one word: a byte loop here cost a store-forwarding stall when
 * the batch append read the 8 bytes back as one load. */
static inline void put_u64(uint8_t buf[8], uint64_t value) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  value = __builtin_bswap64(value);
#endif
  memcpy(buf, &value, 8);
}

int weir_emit_u64(weir_ctx *ctx, uint64_t key, uint64_t value) {
  uint8_t buf[8];
  put_u64(buf, value);
  return emit_raw(ctx, key, ctx->cur_ts, next_id(ctx, ctx->cur_id), buf, 8);
}

int weir_emit_from(weir_ctx *ctx, const weir_batch *b, uint32_t i, uint64_t key,
                   const void *payload, size_t len) {
  return emit_raw(ctx, key, b->ts[i], next_id(ctx, b->ids[i]), payload, len);
}

int weir_emit_u64_from(weir_ctx *ctx, const weir_batch *b, uint32_t i, uint64_t key,
                       uint64_t value) {
  uint8_t buf[8];
  put_u64(buf, value);
  return emit_raw(ctx, key, b->ts[i], next_id(ctx, b->ids[i]), buf, 8);
}

int weir_emit_u64_from_n(weir_ctx *ctx, const weir_batch *b, uint32_t first, uint32_t n,
                         const uint64_t *keys, const uint64_t *values) {
  if (first > b->len || n > b->len - first) return WEIR_EINVAL;
  /* The record path inlined into one loop: no call per record. */
  for (uint32_t k = 0; k < n; k++) {
    uint8_t buf[8];
    put_u64(buf, values[k]);
    int rc = emit_raw(ctx, keys[k], b->ts[first + k], next_id(ctx, b->ids[first + k]), buf, 8);
    if (rc) return rc;
  }
  return 0;
}

int weir_emit_record(weir_ctx *ctx, const weir_record *r) {
  return emit_raw(ctx, r->key, r->ts, r->id, r->payload, r->len);
}

/* ---- operators ----------------------------------------------------------- */

/* Runs records [from, from + n) of b through ctx's operator. */
static int op_process(weir_ctx *ctx, const weir__batch *b, uint32_t from, uint32_t n) {
  const weir_operator_vt *vt = ctx->node->ovt;
  int rc = 0;
  ctx->n_in += n;
  if (vt->process_batch) {
    weir_batch v = weir__batch_view(b);
    if (from || n != b->len) {
      v.len = n;
      v.keys += from;
      v.ts += from;
      v.ids += from;
      v.off += from; /* offsets into the whole arena: data stays */
      v.lens += from;
    }
    rc = vt->process_batch(ctx, &v);
  } else {
    for (uint32_t i = from; i < from + n; i++) {
      weir_record r = {b->keys[i], b->ts[i], b->ids[i], b->lens[i] ? b->data + b->off[i] : NULL,
                       b->lens[i]};
      ctx->cur_ts = r.ts;
      ctx->cur_id = r.id;
      ctx->cur_key = r.key;
      rc = vt->process(ctx, &r);
      if (rc < 0) break;
    }
  }
  return rc < 0 ? weir__ctx_report(ctx, rc, "process") : 0;
}

/* Of n records waiting, how many the chain takes now: all, unless they
 * would take it past WEIR__STEP_NS at its recent pace and its cost is not
 * per call; then an even share of them, about a step's worth each (no
 * short tail: a call of a few records costs a call, and tells the fit
 * below little where a cost per record comes in lumps). */
static inline uint32_t slice_of(const weir__task *t, uint32_t n) {
  const weir__pace *p = &t->pace;
  if (p->per_call || p->call_ns + p->rec_ns * n <= WEIR__STEP_NS) return n;
  double a = p->call_ns < WEIR__STEP_NS / 2 ? p->call_ns : WEIR__STEP_NS / 2;
  double most = (WEIR__STEP_NS - a) / p->rec_ns;
  if (most < 1) return 1;
  uint32_t parts = (uint32_t)(n / most) + 1;
  return (n + parts - 1) / parts;
}

/* The chain took ns for a call with n records: refits its cost, call_ns +
 * rec_ns * n, by least squares over its recent calls, fading by 1/8 a
 * call. Slicing pays the cost per call again for every slice: a chain is
 * taken to have one (and left whole) when the fit shows at least a quarter
 * step per call beyond its scatter (two standard errors), and to have
 * little when it shows under half a step with the scatter; in between it
 * stays as it was. A cost per record that comes in lumps (a stall every so
 * many records), or calls that found their thread descheduled, scatter the
 * times, and must not pass for a cost per call, nor a few slow calls for
 * a cost per record: a call slower than the fit and four times its scatter
 * predict counts as only that slow. Calls of nearly one size cannot tell
 * the two terms apart: then the cost per call found last is kept, fading
 * (so that slices are tried again now and then), and the rest is taken as
 * per record. */
static inline void note_time(weir__task *t, uint64_t ns, uint64_t n) {
  if (!n) return;
  weir__pace *p = &t->pace;
  const double keep = 7.0 / 8;
  double x = (double)n, y = (double)ns;
  if (p->sw * p->sw > 2.5 * p->sww) { /* three calls or more: a scatter */
    double most = p->call_ns + p->rec_ns * x + 4 * sqrt(p->scatter) + WEIR__STEP_NS / 4;
    if (y > most) y = most;
  }
  p->sw = p->sw * keep + 1;
  p->sww = p->sww * keep * keep + 1;
  p->sx = p->sx * keep + x;
  p->sxx = p->sxx * keep + x * x;
  p->sy = p->sy * keep + y;
  p->sxy = p->sxy * keep + x * y;
  p->syy = p->syy * keep + y * y;
  double mx = p->sx / p->sw, my = p->sy / p->sw, calls = p->sw * p->sw / p->sww;
  double vx = p->sxx / p->sw - mx * mx, vy = p->syy / p->sw - my * my;
  double cov = p->sxy / p->sw - mx * my, a;
  if (vx * 64 > mx * mx) { /* sizes spread by more than an eighth */
    double b = cov > 0 ? cov / vx : 0;
    a = my - b * mx;
    p->scatter = vy - b * cov > 0 ? vy - b * cov : 0;
    /* Two calls fit exactly: no scatter to go by yet (one of them may have
     * found its thread descheduled), so they cannot show a cost per call. */
    double err = calls > 2.5 ? 2 * sqrt(p->scatter / (calls - 2) * (1 + mx * mx / vx)) : 0;
    if (calls > 2.5 && a - err >= WEIR__STEP_NS / 4)
      p->per_call = 1;
    else if (a + err < WEIR__STEP_NS / 2)
      p->per_call = 0;
  } else {
    a = p->call_ns * (31.0 / 32);
    p->scatter = vy > 0 ? vy : 0;
    if (a < WEIR__STEP_NS / 4) p->per_call = 0;
  }
  if (a < 0) a = 0;
  if (a > my) a = my;
  p->call_ns = a;
  p->rec_ns = (my - a) / mx;
}

/* Runs every non-empty link through its successor, in chain order. */
static int chain_flush(weir__task *t, uint32_t from) {
  for (uint32_t i = from; i + 1 < t->nops; i++) {
    weir_ctx *c = t->ops[i];
    if (c->link->len) {
      int rc = flush_link(c);
      if (rc) return rc;
    }
  }
  return 0;
}

static void flush_outputs(weir__task *t) {
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      if (r->cur[j] && r->cur[j]->len) {
        router_push(r, j, r->cur[j]);
        r->cur[j] = NULL;
      }
    }
  }
  t->last_flush_ns = weir_clock_mono_ns();
}

static void maybe_timeout_flush(weir__task *t) {
  uint64_t now = weir_clock_mono_ns();
  if (now - t->last_flush_ns >= (uint64_t)t->job->opts.buffer_timeout_us * 1000u) flush_outputs(t);
}

static void task_failed(weir__task *t, int rc);

static int outputs_writable(weir__task *t) {
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      int ok = weir__chan_writable(r->chans[j]);
      if (r->chans[j]->spill_err) {
        task_failed(t, WEIR_EIO); /* the channel logged what and where */
        return 0;
      }
      if (!ok) return 0;
    }
  }
  return 1;
}

/* Before a step ends to wait for input or a timer: a flush or a control
 * event may have left batches pending behind a full ring, and nothing else
 * would move them on; ask their consumers to wake this task when room
 * appears. */
static void settle_pending(weir__task *t) {
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++)
      if (!weir__chan_drained(r->chans[j])) (void)weir__chan_writable(r->chans[j]);
  }
}

static void publish_stats(weir__task *t) {
  for (uint32_t i = 0; i < t->nops; i++) {
    weir_ctx *c = t->ops[i];
    atomic_store_explicit(&c->pub_in, c->n_in, memory_order_relaxed);
    atomic_store_explicit(&c->pub_out, c->n_out, memory_order_relaxed);
  }
}

static void task_done(weir__task *t) {
  t->state = WEIR__TASK_DONE;
  publish_stats(t);
  unsigned done = atomic_fetch_add(&t->job->tasks_done, 1) + 1;
  if (done == t->job->ntasks) weir__job_poke(t->job);
}

int weir__task_poll(weir__task *t) {
  int held = 0;
  for (uint32_t i = 0; i < t->nops; i++) {
    weir_ctx *c = t->ops[i];
    if (!c->opened || !c->node->ovt || !c->node->ovt->poll) continue;
    int rc = c->node->ovt->poll(c);
    if (rc < 0) return weir__ctx_report(c, rc, "poll");
    if (rc == WEIR_POLL_BUSY) held = 1;
  }
  t->held = held;
  return 0;
}

/* The final checkpoint's completion counts as heard of once the effects it
 * started have landed (DESIGN.md §5: the job ends after its sinks commit). */
static void count_final(weir__task *t) {
  if (!t->final_pending || t->held) return;
  t->final_pending = 0;
  atomic_fetch_add(&t->job->final_notified, 1);
  weir__job_poke(t->job);
}

static void task_failed(weir__task *t, int rc) {
  publish_stats(t);
  /* The operator already reported its error with its name; this covers
   * errors that did not come from an operator callback. */
  weir__job_failed(t->job, rc, "task %u: %s", t->index, weir_strerror(rc));
}

int weir__ctx_finish(weir_ctx *c) {
  const weir_operator_vt *vt = c->node->ovt;
  if (!vt || !vt->finish) return 0;
  c->cur_id = weir__mix64(c->salt ^ 0xf1a1f1a1ULL); /* finish emissions: own lineage */
  c->cur_ts = 0;
  int rc = vt->finish(c);
  return rc < 0 ? weir__ctx_report(c, rc, "finish") : 0;
}

/* Sends a control event on every output channel, after every record
 * emitted before it. */
static void push_control(weir__task *t, uint32_t kind, uint64_t id) {
  flush_outputs(t);
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      weir__batch *b = weir__chan_batch(r->chans[j]);
      b->kind = kind;
      b->barrier_id = id;
      router_push(r, j, b);
    }
  }
}

static inline int sync_mode(const weir__task *t) {
  return t->job->opts.sync_checkpoints;
}

/* ---- unaligned cuts -------------------------------------------------------- */

/* Starts the channel state of a cut: the output records waiting on every
 * output channel's pending list, one run per channel. */
static void cs_begin(weir__task *t) {
  weir__cs_begin(&t->cs);
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      uint64_t n = 0;
      for (weir__batch *b = r->chans[j]->pend_head; b; b = b->next)
        if (b->kind == WEIR__MSG_DATA) n += b->len;
      if (!n) continue;
      weir__cs_run(&t->cs, k, j, n);
      for (weir__batch *b = r->chans[j]->pend_head; b; b = b->next)
        if (b->kind == WEIR__MSG_DATA) weir__cs_batch(&t->cs, b);
    }
  }
  weir__cs_inputs(&t->cs);
}

/* Hands the completed channel state of un.cur to the store. Returns 0 or an
 * error (the job has been failed). */
static int cs_finish(weir__task *t) {
  uint64_t id = weir__unalign_done(&t->un);
  int none = !t->cs.out_records && !t->cs.in_records;
  uint64_t len;
  uint8_t *blob = weir__cs_finish(&t->cs, &len);
  if (none) {
    /* Nothing overtaken: no entry (one durable write less). */
    weir__cs_free(blob);
    weir__task_no_channels(t, id);
    return 0;
  }
  int rc = weir_failpoint("ckpt.channel_state");
  if (rc) {
    weir__cs_free(blob);
    weir__job_failed(t->job, rc, "checkpoint %llu: failpoint ckpt.channel_state",
                     (unsigned long long)id);
    return rc;
  }
  return weir__task_write_channels(t, id, blob, len);
}

/* Logs records [from, from + n) of a data batch consumed from input idx
 * if they crossed the cut. */
static inline void un_log(weir__task *t, uint32_t idx, const weir__batch *b, uint32_t from,
                          uint32_t n) {
  if (!t->job->unaligned || !weir__unalign_data(&t->un, idx, n)) return;
  weir__cs_records(&t->cs, b, from, from + n);
}

/* The unaligned cut of checkpoint id (passed: inputs that delivered it
 * already, or NULL). Returns 0 or an error (the job has been failed). */
static int un_cut(weir__task *t, uint64_t id, const uint8_t *passed, uint64_t align_ns) {
  flush_outputs(t);
  cs_begin(t);
  weir__unalign_result ur = weir__unalign_start(&t->un, id, passed);
  uint32_t parts = 0;
  for (uint32_t i = 0; i < t->nin; i++) parts += t->in_off[i] != 0;
  WEIR_LOG_D("checkpoint %llu: unaligned cut of task %u (%llu output records overtaken, %u "
             "input batches consumed in part)",
             (unsigned long long)id, t->index, (unsigned long long)t->cs.out_records, parts);
  /* A source's cut overtakes only its pending output: no entry if none. */
  int chan = t->nin > 0 || t->cs.out_records > 0;
  t->hold_views = t->job->views_on_tasks;
  int rc =
      chan ? weir__task_snapshot_unaligned(t, id, align_ns) : weir__task_snapshot(t, id, align_ns);
  t->hold_views = 0;
  if (rc) return rc;
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      weir__batch *b = weir__chan_batch(r->chans[j]);
      b->kind = WEIR__MSG_BARRIER;
      b->barrier_id = id;
      weir__chan_push_front(r->chans[j], b);
      /* Whether or not it waits on this input: it sees the barrier now. */
      weir__task_wake_first(r->chans[j]->consumer);
    }
  }
  weir__task_write_held(t);
  if (ur == WEIR__UN_COMPLETE) {
    if (chan) return cs_finish(t);
    (void)weir__unalign_done(&t->un);
    return 0;
  }
  return weir_failpoint("ckpt.unaligned_cut");
}

/* While recording the channel state of un.cur: an input that is still
 * logging and whose barrier un.cur (or end of input) is now in its queue
 * has all its records
 * before the cut in sight; they are copied into the channel state at once
 * (they are processed later, not logged again), so the channel state
 * completes as soon as every barrier is in sight, not once the backlog in
 * front of it has been processed. Returns 0 or an error (the job has been
 * failed). */
static int un_capture(weir__task *t) {
  for (uint32_t i = 0; i < t->nin && t->un.cur; i++) {
    if (t->un.in[i] != WEIR__UN_LOGGING) continue;
    weir__chan *ch = t->in[i];
    uint64_t h = atomic_load_explicit(&ch->head, memory_order_relaxed);
    uint64_t tl = atomic_load_explicit(&ch->tail, memory_order_acquire);
    uint64_t p = h;
    const weir__batch *stop = NULL;
    for (; p < tl; p++) {
      const weir__batch *b = ch->ring[p & ch->mask];
      /* An input whose producer finished sends no barrier: its end of
       * input stands for one (the producer's final state answered the
       * checkpoint, so everything before the end is before the cut). */
      if ((b->kind == WEIR__MSG_BARRIER && b->barrier_id == t->un.cur) ||
          b->kind == WEIR__MSG_EOI) {
        stop = b;
        break;
      }
    }
    if (!stop) continue; /* not in sight yet: logged as it is consumed */
    if (stop->kind == WEIR__MSG_EOI)
      WEIR_LOG_D("checkpoint %llu: task %u: input %u ended behind %llu queued batches, taken as "
                 "channel state",
                 (unsigned long long)t->un.cur, t->index, i, (unsigned long long)(p - h));
    for (uint64_t q = h; q < p; q++) {
      const weir__batch *b = ch->ring[q & ch->mask];
      if (b->kind != WEIR__MSG_DATA) continue;
      /* The head batch may be partly consumed already (a slice). */
      uint32_t from = q == h ? t->in_off[i] : 0;
      weir__cs_records(&t->cs, b, from, b->len);
      (void)weir__unalign_data(&t->un, i, b->len - from); /* counted */
    }
    if (weir__unalign_barrier(&t->un, i, t->un.cur) == WEIR__UN_COMPLETE) return cs_finish(t);
  }
  return 0;
}

/* Scans every live input's ring for barriers not seen yet (positions
 * between the last scan and the tail) and takes the unaligned cut of the
 * newest one due: at once in WEIR__UNALIGNED_ALWAYS mode, after the
 * alignment timeout otherwise. Returns 1 if the task failed. */
static int un_scan(weir__task *t) {
  if (t->replay || t->state != WEIR__TASK_RUNNING) return 0;
  uint64_t want = 0;
  for (uint32_t i = 0; i < t->nin; i++) {
    if (t->in_ended[i]) continue;
    weir__chan *ch = t->in[i];
    uint64_t h = atomic_load_explicit(&ch->head, memory_order_relaxed);
    uint64_t tl = atomic_load_explicit(&ch->tail, memory_order_acquire);
    uint64_t pos = t->scanned[i] > h ? t->scanned[i] : h;
    for (; pos < tl; pos++) {
      const weir__batch *b = ch->ring[pos & ch->mask];
      if (b->kind == WEIR__MSG_BARRIER &&
          weir__unalign_seen(&t->un, i, b->barrier_id) == WEIR__UN_CUT && b->barrier_id > want)
        want = b->barrier_id;
    }
    t->scanned[i] = pos;
  }
  uint64_t now = 0;
  if (t->un.cur && un_capture(t)) {
    task_failed(t, WEIR_ECKPT);
    return 1;
  }
  if (t->job->unaligned == WEIR__UNALIGNED_TIMEOUT) {
    if (want > t->seen_id) {
      /* The timeout counts from the first sight of the barrier. */
      t->seen_id = want;
      t->seen_ns = weir_clock_mono_ns();
      weir__task_wake_after(t, (uint64_t)t->job->opts.alignment_timeout_ms * 1000u + 100u);
    }
    if (t->seen_id <= t->un.last || t->seen_id <= t->align.last) return 0;
    now = weir_clock_mono_ns();
    uint64_t limit = (uint64_t)t->job->opts.alignment_timeout_ms * 1000000u;
    if (now - t->seen_ns < limit) {
      /* Not yet: make sure a wake-up comes when it is due (libuv's timers
       * count from the loop's cached time, so the one set at first sight
       * may fire a little early, and a task that waits for input on a
       * blocked alignment would then never look again: the switch must
       * not depend on other events, or a task that aligns on a barrier
       * another task sent ahead of its output after its own switch can
       * wait for good). */
      weir__task_wake_after(t, (limit - (now - t->seen_ns)) / 1000u + 1000u);
      return 0;
    }
    want = t->seen_id;
  }
  if (!want) return 0;
  /* Inputs that already delivered `want` (aligned so far) are not logged. */
  uint8_t *passed = NULL;
  uint64_t align_ns = 0;
  if (t->job->unaligned == WEIR__UNALIGNED_TIMEOUT) {
    align_ns = now - t->seen_ns;
    if (t->align.cur == want) {
      passed = weir_calloc(t->nin, 1);
      for (uint32_t i = 0; i < t->nin; i++) passed[i] = t->align.in[i] == WEIR__IN_BLOCKED;
    }
    weir__align_force(&t->align, want);
    WEIR_LOG_D("checkpoint %llu: task %u switches to an unaligned cut after %llu ms",
               (unsigned long long)want, t->index, (unsigned long long)(align_ns / 1000000u));
  }
  int rc = un_cut(t, want, passed, align_ns);
  weir_free(passed);
  if (!rc && t->un.cur) rc = un_capture(t);
  if (rc) {
    task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

/* Restore: pushes the restored output records into their channels (before
 * anything the task emits) and keeps the input records for replay. Returns
 * 0 or WEIR_ECORRUPT (reported). */
static int un_restore(weir__task *t) {
  weir_ctx *c = t->ops[0];
  weir_subtask_snapshot *s = c->restore_chan;
  if (!s) return 0;
  c->restore_chan = NULL;
  uint64_t len = 0;
  void (*release)(uint8_t *, uint64_t) = s->blob_release;
  uint8_t *p = s->blob;
  len = s->blob_len;
  s->blob = NULL;
  s->blob_len = 0;
  s->blob_release = NULL;
  weir_subtask_snapshot_free(s);
  weir_free(s);
  const char *why = NULL;
  weir__cs_reader rd;
  weir__cs_rec rec;
  int rc = weir__cs_open(&rd, p, len, c->max_record, &why);
  if (!rc)
    while ((rc = weir__cs_next(&rd, &rec, &why)) > 0) {
      if (rec.k >= t->nrouters || rec.j >= t->routers[rec.k].n) {
        why = "an output record names no channel of this task";
        break;
      }
      route_append(&t->routers[rec.k], rec.j, rec.key, rec.ts, rec.id, rec.data, rec.len);
    }
  /* The input section: checked now, replayed later. */
  if (!rc) {
    weir__cs_to_inputs(&rd);
    t->replay_rd = rd;
    do rc = weir__cs_next(&rd, &rec, &why);
    while (rc > 0);
  }
  if (why) {
    weir_blob_free(p, len, release);
    return weir_ctx_fail(c, WEIR_ECORRUPT, "restored channel state of task %u: %s", t->index, why);
  }
  flush_outputs(t);
  if (rd.out_records || rd.in_records)
    WEIR_LOG_I("'%s' subtask %u: restored channel state: %llu output records, %llu input "
               "records",
               c->node->name, c->subtask, (unsigned long long)rd.out_records,
               (unsigned long long)rd.in_records);
  if (rd.in_records) {
    t->replay = p;
    t->replay_len = len;
    t->replay_release = release;
    t->replay_batch = weir__batch_create(t->batch_records);
  } else {
    weir_blob_free(p, len, release);
  }
  return 0;
}

/* Processes up to one step's worth of restored input records. Returns 1 if
 * more remain, 0 when done, or an error. */
static int un_replay(weir__task *t) {
  weir__cs_reader *rd = &t->replay_rd;
  weir__cs_rec rec;
  const char *why;
  uint64_t t0 = weir_clock_mono_ns(), t1 = t0;
  for (uint32_t n = 0; n < t->budget_batches && rd->off < rd->end; n++) {
    weir__batch *b = t->replay_batch;
    weir__batch_reset(b);
    /* A slow chain replays in slices too (see input_step). */
    uint32_t want = t->sliceable ? slice_of(t, t->batch_records) : t->batch_records;
    while (b->len < want) {
      weir__cs_reader at = *rd;
      /* Checked in un_restore: a record, or the end. */
      if (weir__cs_next(rd, &rec, &why) <= 0) break;
      if (!weir__batch_fits(b, rec.len)) {
        *rd = at;
        break;
      }
      weir__batch_append(b, rec.key, rec.ts, rec.id, rec.data, rec.len);
    }
    int rc = op_process(t->ops[0], b, 0, b->len);
    if (!rc) rc = chain_flush(t, 0);
    if (rc) return rc;
    uint64_t t2 = weir_clock_mono_ns();
    note_time(t, t2 - t1, b->len);
    t1 = t2;
    if (!outputs_writable(t) || t2 - t0 > WEIR__STEP_NS) break;
  }
  if (rd->off < rd->end) return 1;
  weir_blob_free(t->replay, t->replay_len, t->replay_release);
  t->replay = NULL;
  t->replay_len = 0;
  weir__batch_destroy(t->replay_batch);
  t->replay_batch = NULL;
  return 0;
}

/* Synchronous checkpoints: this task forwarded drain marker id. */
static void report_drained(weir__task *t, uint64_t id) {
  t->sync_drained = id;
  weir__task_drained(t, id);
}

/* The cut of checkpoint id at this task: snapshot, then forward the
 * barrier (synchronous checkpoints: forward the drain marker, and snapshot
 * later). Returns 0 or an error (the job has been failed). */
static int take_checkpoint(weir__task *t, uint64_t id, uint64_t align_ns) {
  int rc = 0;
  if (t->job->unaligned == WEIR__UNALIGNED_ALWAYS) return un_cut(t, id, NULL, align_ns);
  if (t->job->unaligned) weir__unalign_taken(&t->un, id);
  if (t->head_loop) t->log_id = id;
  t->hold_views = t->job->views_on_tasks;
  if (!sync_mode(t)) rc = weir__task_snapshot(t, id, align_ns);
  t->hold_views = 0;
  if (rc) return rc;
  push_control(t, WEIR__MSG_BARRIER, id);
  weir__task_write_held(t);
  /* A loop head now logs its feedback edges until the barrier is back. */
  if (t->head_loop) {
    if (weir__backlog_start(t->backlog, id) == WEIR__LOG_COMPLETE)
      rc = weir__head_write_log(t);
    else if (weir_failpoint("iter.log_open"))
      rc = WEIR_ECKPT; /* a back-edge log is open */
  }
  if (!rc && sync_mode(t)) report_drained(t, id);
  return rc;
}

/* Sources (which have no barrier to wait for) and finished tasks answer a
 * triggered checkpoint at once (synchronous checkpoints: once, by
 * forwarding the drain marker or reporting drained). */
static int pending_trigger(weir__task *t) {
  uint64_t tr = atomic_load_explicit(&t->job->trigger_id, memory_order_acquire);
  return tr > t->ckpt_done && (!sync_mode(t) || tr > t->sync_drained);
}

/* Synchronous checkpoints: a source that forwarded a drain marker waits
 * until its checkpoint completed or failed. */
static int sync_paused(weir__task *t) {
  return sync_mode(t) && t->sync_drained > atomic_load(&t->job->resume_id);
}

/* Synchronous checkpoints, loop heads: drain marker id came on every
 * regular input (or they ended). Tells the loop's other heads. */
static void head_ready(weir__task *t, uint64_t id) {
  atomic_store(&t->sync_ready, id);
  weir__loop *l = t->head_loop;
  for (uint32_t i = 0; i < l->nheads; i++)
    if (l->heads[i] != t) weir__task_wake(l->heads[i]);
}

/* Synchronous checkpoints, loop heads: forwards the drain marker into the
 * loop once every head of the loop has it and nothing is in flight inside
 * (nothing can enter any more, so the loop stays empty); a marker of a
 * checkpoint that already ended goes on at once. Returns 1 if the task
 * failed. */
static int head_sync(weir__task *t) {
  uint64_t id = atomic_load_explicit(&t->sync_ready, memory_order_relaxed);
  if (!id || id <= t->sync_drained || t->state != WEIR__TASK_RUNNING) return 0;
  weir__loop *l = t->head_loop;
  if (id > atomic_load(&t->job->resume_id)) {
    for (uint32_t i = 0; i < l->nheads; i++)
      if (atomic_load(&l->heads[i]->sync_ready) < id) return 0; /* it wakes us when ready */
    /* The count has no waiters to wake: the coordinator wakes every task
     * each millisecond while a synchronous checkpoint drains (job.c). */
    if (atomic_load(&l->inflight) != 0) return 0;
  }
  if (take_checkpoint(t, id, 0)) {
    task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

/* End of all input: finish each operator in chain order, then send end of
 * input downstream. */
static void task_finish(weir__task *t) {
  for (uint32_t i = 0; i < t->nops; i++) {
    int rc = weir__ctx_finish(t->ops[i]);
    if (!rc) rc = chain_flush(t, i);
    if (rc) {
      task_failed(t, rc);
      return;
    }
  }
  push_control(t, WEIR__MSG_EOI, 0);
  t->state = WEIR__TASK_FINISHING;
  /* A head finishes when its loop drained: nothing can reach it on a
   * feedback edge any more, so an open log is complete. */
  if (t->head_loop && t->backlog->id && weir__head_write_log(t)) {
    task_failed(t, WEIR_ECKPT);
    return;
  }
  /* A checkpoint triggered while this task drained its last input: no
   * barrier will reach it any more, so its final state answers it. */
  if (pending_trigger(t)) {
    uint64_t tr = atomic_load(&t->job->trigger_id);
    if (sync_mode(t)) {
      if (t->head_loop) head_ready(t, tr);
      report_drained(t, tr); /* snapshots with the others */
    } else if (weir__task_snapshot(t, tr, 0)) {
      task_failed(t, WEIR_ECKPT);
      return;
    }
  }
  /* finish may have started effects (a sink without checkpoints commits
   * its only transaction at the end of input): wait for them. */
  if (weir__task_poll(t)) {
    task_failed(t, WEIR_EOPERATOR);
    return;
  }
  if (outputs_writable(t) && !t->held) task_done(t);
}

static int source_step(weir__task *t) {
  weir_ctx *c = t->ops[0];
  if (sync_paused(t)) return 0; /* the coordinator wakes it */
  uint64_t t0 = weir_clock_mono_ns();
  for (uint32_t n = 0; n < t->budget_batches; n++) {
    if (atomic_load_explicit(&t->job->stopping, memory_order_relaxed)) {
      task_finish(t);
      return 0;
    }
    if (pending_trigger(t)) {
      uint64_t id = atomic_load(&t->job->trigger_id);
      if (weir_failpoint("ckpt.barrier_injected") || take_checkpoint(t, id, 0)) {
        task_failed(t, WEIR_ECKPT);
        return 0;
      }
      if (sync_paused(t)) {
        publish_stats(t);
        return 0;
      }
      if (!outputs_writable(t)) {
        publish_stats(t);
        return 0;
      }
    }
    c->wake_after_us = 0;
    /* A slow chain (or source) is asked for about WEIR__STEP_NS of
     * records at a time, as input batches are sliced. */
    uint32_t want = slice_of(t, t->batch_records);
    uint64_t before = c->n_out, t1 = weir_clock_mono_ns();
    int rc = c->node->svt->run(c, want);
    if (rc < 0) {
      weir__ctx_report(c, rc, "run");
      task_failed(t, rc);
      return 0;
    }
    int frc = chain_flush(t, 0);
    if (frc) {
      task_failed(t, frc);
      return 0;
    }
    uint64_t t2 = weir_clock_mono_ns(), made = c->n_out - before;
    note_time(t, t2 - t1, made);
    if (rc == WEIR_SOURCE_DONE) {
      task_finish(t);
      return 0;
    }
    if (rc == WEIR_SOURCE_IDLE) {
      flush_outputs(t);
      settle_pending(t);
      publish_stats(t);
      if (c->wake_after_us) weir__task_wake_after(t, c->wake_after_us);
      return 0;
    }
    if (!outputs_writable(t)) {
      publish_stats(t);
      return 0;
    }
    if (t2 - t0 > WEIR__STEP_NS) break;
  }
  maybe_timeout_flush(t);
  publish_stats(t);
  return 1;
}

/* Alignment completed: take the cut. Returns 1 if the task failed. */
static int complete_alignment(weir__task *t) {
  uint64_t align_ns = weir_clock_mono_ns() - t->align.started_ns;
  uint64_t id = weir__align_done(&t->align);
  if (sync_mode(t) && t->head_loop) {
    head_ready(t, id);
    /* Tests: the other heads may act on this one's readiness meanwhile. */
    (void)weir_failpoint("iter.head_ready");
    return head_sync(t);
  }
  if (take_checkpoint(t, id, align_ns)) {
    task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

/* Loop heads: replay a restored back-edge log before any new input, act as
 * the loop's source of barriers once its external inputs ended, and finish
 * when the loop drained. Returns 1 if the step must end here, 2 if part of
 * the log is still to be replayed. */
static int head_duties(weir__task *t) {
  if (!t->replayed) {
    int rc = weir__head_replay(t->ops[0], (uint64_t)t->budget_batches * t->batch_records);
    if (rc >= 0) {
      int frc = chain_flush(t, 0);
      if (frc) rc = frc;
      weir__loop_publish_all(t);
    }
    if (rc < 0) {
      task_failed(t, rc);
      return 1;
    }
    if (rc > 0) return 2;
    t->replayed = 1;
  }
  if (sync_mode(t)) {
    uint64_t tr = atomic_load(&t->job->trigger_id);
    if (t->nregular_ended == t->nregular && pending_trigger(t) &&
        atomic_load_explicit(&t->sync_ready, memory_order_relaxed) < tr)
      head_ready(t, tr); /* no marker will come on an external input */
    if (head_sync(t)) return 1;
  }
  if (t->nregular_ended < t->nregular) return 0;
  if (!sync_mode(t) && pending_trigger(t) && !t->backlog->id) {
    /* No barrier will come on an external input: inject it, as a source. */
    if (take_checkpoint(t, atomic_load(&t->job->trigger_id), 0)) {
      task_failed(t, WEIR_ECKPT);
      return 1;
    }
  }
  if (weir__loop_drained(t->head_loop)) {
    task_finish(t);
    return 1;
  }
  return 0;
}

/* End of input on input idx. Returns 1 if the step must end here. */
static int input_ended(weir__task *t, uint32_t idx) {
  t->in_ended[idx] = 1;
  ++t->nended;
  if (t->in_back[idx]) {
    if (weir__backlog_end(t->backlog, idx) == WEIR__LOG_COMPLETE && weir__head_write_log(t)) {
      task_failed(t, WEIR_ECKPT);
      return 1;
    }
    return 0;
  }
  if (t->job->unaligned && weir__unalign_end(&t->un, idx) == WEIR__UN_COMPLETE && cs_finish(t)) {
    task_failed(t, WEIR_ECKPT);
    return 1;
  }
  if (weir__align_end(&t->align, idx) == WEIR__ALIGN_COMPLETE && complete_alignment(t)) return 1;
  if (++t->nregular_ended == t->nregular && t->head_loop) weir__loop_ext_done(t->head_loop);
  if (!t->head_loop && t->nended == t->nin) {
    task_finish(t);
    return 1;
  }
  return 0;
}

/* Barrier `id` on input idx. Returns 1 if the step must end here. */
static int input_barrier(weir__task *t, uint32_t idx, uint64_t id) {
  if (t->in_back[idx]) {
    weir__log_result lr = weir__backlog_barrier(t->backlog, idx, id);
    if (lr == WEIR__LOG_COMPLETE && weir__head_write_log(t)) {
      task_failed(t, WEIR_ECKPT);
      return 1;
    }
    if (lr == WEIR__LOG_BLOCK && t->nregular_ended == t->nregular && head_duties(t) == 1) return 1;
    return 0;
  }
  if (t->job->unaligned) {
    weir__unalign_result ur = weir__unalign_barrier(&t->un, idx, id);
    if (ur == WEIR__UN_CUT && t->job->unaligned == WEIR__UNALIGNED_ALWAYS) {
      /* It arrived after the last scan: cut now (nothing of this input is
       * overtaken; the others are recorded as usual). */
      if (un_cut(t, id, NULL, 0)) {
        task_failed(t, WEIR_ECKPT);
        return 1;
      }
      ur = weir__unalign_barrier(&t->un, idx, id);
    }
    if (ur == WEIR__UN_COMPLETE && cs_finish(t)) {
      task_failed(t, WEIR_ECKPT);
      return 1;
    }
    if (t->job->unaligned == WEIR__UNALIGNED_ALWAYS) {
      if (!outputs_writable(t)) {
        publish_stats(t);
        return 1;
      }
      return 0;
    }
    /* Timeout mode: an aligned cut unless the task switched (then the
     * barrier is stale for the aligner). A barrier that arrived after the
     * last scan starts the timeout here. */
    if (id > t->seen_id && id > t->un.last && id > t->align.last) {
      t->seen_id = id;
      t->seen_ns = weir_clock_mono_ns();
      weir__task_wake_after(t, (uint64_t)t->job->opts.alignment_timeout_ms * 1000u + 1000u);
    }
  }
  weir__align_result ar = weir__align_barrier(&t->align, idx, id, weir_clock_mono_ns());
  if (ar == WEIR__ALIGN_COMPLETE) {
    if (complete_alignment(t)) return 1;
    if (!outputs_writable(t)) {
      publish_stats(t);
      return 1;
    }
  } else if (ar == WEIR__ALIGN_NONE && weir_failpoint("ckpt.aligning")) {
    task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

static int input_step(weir__task *t) {
  uint32_t processed = 0;
  if (t->replay) {
    int rc = un_replay(t);
    if (rc < 0) {
      task_failed(t, rc);
      return 0;
    }
    if (!outputs_writable(t)) return 0;
    if (rc > 0) return 1;
  }
  if (t->head_loop) {
    int hd = head_duties(t);
    if (hd == 1) return 0;
    /* A replayed log or an injected barrier may be waiting for room. */
    if (!outputs_writable(t)) return 0;
    if (hd == 2) return 1; /* more of the log next step */
  }
  /* Unaligned: while a checkpoint is in flight and this task took its cut,
   * it yields after every batch, so that the tasks sharing its worker see
   * their barriers soon even when this one is slow (a mailbox step of a
   * slow operator would otherwise hold them back for its whole budget). */
  uint32_t budget = t->budget_batches;
  if (t->job->unaligned && t->un.last &&
      t->un.last >= atomic_load_explicit(&t->job->trigger_id, memory_order_relaxed) &&
      t->un.last > atomic_load_explicit(&t->job->complete_id, memory_order_relaxed))
    budget = 1;
  uint64_t t0 = weir_clock_mono_ns();
  while (processed < budget) {
    weir__batch *b = NULL;
    uint32_t idx = 0;
    if (t->job->unaligned) {
      uint64_t before = t->un.last;
      if (un_scan(t)) return 0;
      if (t->un.last != before) {
        /* Just took a cut: let the worker's other tasks see theirs. */
        maybe_timeout_flush(t);
        publish_stats(t);
        return 1;
      }
    }
    /* (Not while a checkpoint waits on the external inputs: records held
     * on a blocked edge stay in flight, and would hold the barrier back.
     * That includes a barrier not read yet: with a body behind a hash edge,
     * the body aligns on every head, so one head's barrier queued behind
     * admission-limited input blocks the others' records in the body, which
     * keeps the count at the limit.) */
    int passes = !t->head_loop || t->align.cur || t->backlog->nearly || pending_trigger(t) ||
                         atomic_load(&t->head_loop->inflight) < t->head_loop->admit
                     ? 2
                     : 1;
    /* A loop head reads its feedback edges first, and external input only
     * while few records are in flight in the loop: the loop drains before
     * more work enters it, which keeps the unbounded feedback queues (and
     * the back-edge logs, and the time a barrier takes round the loop)
     * small, and lets backpressure reach the sources. */
    for (int pass = t->head_loop ? 0 : 1; pass < passes && !b; pass++) {
      for (uint32_t k = 0; k < t->nin; k++) {
        uint32_t i = t->rr + k < t->nin ? t->rr + k : t->rr + k - t->nin;
        if (t->in_ended[i] || !weir__align_readable(&t->align, i)) continue;
        if (pass == 0 && !t->in_back[i]) continue;
        if (t->backlog && weir__backlog_blocked(t->backlog, i)) continue;
        b = weir__chan_peek(t->in[i]);
        if (b) {
          idx = i;
          break;
        }
      }
    }
    if (!b) {
      /* Nothing to read: announce waiting on every live input, then look
       * once more (data may have arrived between the peek and the flag). */
      int again = 0;
      for (uint32_t i = 0; i < t->nin; i++)
        if (!t->in_ended[i] && weir__align_readable(&t->align, i) &&
            (passes == 2 || t->in_back[i]) &&
            !(t->backlog && weir__backlog_blocked(t->backlog, i)) && weir__chan_wait(t->in[i]))
          again = 1;
      if (again) continue;
      flush_outputs(t);
      if (!t->head_loop || head_duties(t) != 1) settle_pending(t);
      publish_stats(t);
      return 0;
    }
    t->rr = idx + 1 == t->nin ? 0 : idx + 1;
    if (b->kind == WEIR__MSG_DATA) {
      uint32_t from = t->in_off[idx], n = b->len - from;
      if (t->sliceable) n = slice_of(t, n);
      uint64_t t1 = weir_clock_mono_ns();
      if (t->head_loop && weir__backlog_logging(t->backlog, idx))
        for (uint32_t r = from; r < from + n; r++)
          weir__backlog_append(t->backlog, b->keys[r], b->ts[r], b->ids[r], b->data + b->off[r],
                               b->lens[r]);
      un_log(t, idx, b, from, n);
      int rc = op_process(t->ops[0], b, from, n);
      if (from + n == b->len) {
        t->in_off[idx] = 0;
        weir__chan_release(t->in[idx]);
      } else {
        t->in_off[idx] = from + n;
      }
      if (!rc) rc = chain_flush(t, 0);
      if (rc) {
        task_failed(t, rc);
        return 0;
      }
      /* Only the call's own time: a snapshot taken on a barrier
       * between calls would look like a cost per call. */
      uint64_t t2 = weir_clock_mono_ns();
      note_time(t, t2 - t1, n);
      if (t->in_loopin[idx])
        weir__loop_consumed(t, n);
      else if (t->loop_out)
        weir__loop_publish_all(t);
      processed++;
      if (!outputs_writable(t)) {
        publish_stats(t);
        return 0;
      }
      if (t2 - t0 > WEIR__STEP_NS) break;
    } else if (b->kind == WEIR__MSG_EOI) {
      weir__chan_release(t->in[idx]);
      if (input_ended(t, idx)) return 0;
    } else {
      uint64_t id = b->barrier_id;
      weir__chan_release(t->in[idx]);
      if (input_barrier(t, idx, id)) return 0;
    }
  }
  maybe_timeout_flush(t);
  publish_stats(t);
  return 1;
}

int weir__task_run(weir__task *t) {
  if (atomic_load_explicit(&t->job->failed, memory_order_relaxed)) return 0;
  if (weir__task_notify(t)) {
    task_failed(t, WEIR_ECKPT);
    return 0;
  }
  if (weir__task_poll(t)) {
    task_failed(t, WEIR_EOPERATOR);
    return 0;
  }
  count_final(t);
  if (t->job->recover_only) {
    if (t->state != WEIR__TASK_DONE && !t->held) task_done(t);
    return 0;
  }
  if (sync_mode(t)) {
    /* Every task drained: snapshot while nothing moves. */
    uint64_t snap = atomic_load(&t->job->sync_snap_id);
    if (snap > t->ckpt_done && snap == t->sync_drained && weir__task_snapshot(t, snap, 0)) {
      task_failed(t, WEIR_ECKPT);
      return 0;
    }
  }
  if (t->state != WEIR__TASK_RUNNING && pending_trigger(t)) {
    /* Finished: everything it will ever emit is before any later cut. */
    uint64_t tr = atomic_load(&t->job->trigger_id);
    if (sync_mode(t)) {
      if (t->head_loop) head_ready(t, tr);
      report_drained(t, tr);
    } else if (weir__task_snapshot(t, tr, 0)) {
      task_failed(t, WEIR_ECKPT);
      return 0;
    }
  }
  if (t->state == WEIR__TASK_DONE) return 0;
  /* A barrier may overtake what waits for a full output. After a cut, the
   * worker's other tasks go first (the barriers just sent are theirs). */
  if (t->job->unaligned && !t->is_source) {
    uint64_t before = t->un.last;
    if (un_scan(t)) return 0;
    if (t->un.last != before) return 1;
  }
  if (t->job->unaligned == WEIR__UNALIGNED_ALWAYS && t->is_source &&
      t->state == WEIR__TASK_RUNNING && pending_trigger(t)) {
    /* A backpressured source injects the barrier at once, ahead of the
     * output it cannot hand over yet (that becomes its channel state). */
    uint64_t id = atomic_load(&t->job->trigger_id);
    if (weir_failpoint("ckpt.barrier_injected") || take_checkpoint(t, id, 0)) {
      task_failed(t, WEIR_ECKPT);
      return 0;
    }
  }
  if (!outputs_writable(t)) return 0; /* a consumer will wake us */
  if (t->state == WEIR__TASK_FINISHING) {
    if (!t->held) task_done(t);
    return 0;
  }
  return t->is_source ? source_step(t) : input_step(t);
}

int weir__task_open(weir__task *t) {
  t->last_flush_ns = weir_clock_mono_ns();
  weir__align_init(&t->align, t->nin,
                   t->job->opts.at_least_once ? WEIR__ALIGN_AT_LEAST_ONCE
                                              : WEIR__ALIGN_EXACTLY_ONCE);
  /* Feedback edges are outside alignment (see iteration.c). */
  for (uint32_t i = 0; i < t->nin; i++)
    if (t->in_back[i]) weir__align_exclude(&t->align, i);
  weir__unalign_init(&t->un, t->nin);
  t->scanned = weir_calloc(t->nin ? t->nin : 1, sizeof *t->scanned);
  t->in_off = weir_calloc(t->nin ? t->nin : 1, sizeof *t->in_off);
  /* Loop heads log whole batches, and consumption inside a loop is
   * counted per batch: their batches are never sliced. */
  t->sliceable = !t->head_loop;
  for (uint32_t i = 0; i < t->nin; i++)
    if (t->in_loopin[i] || t->in_back[i]) t->sliceable = 0;
  if (t->head_loop && !t->backlog) {
    t->backlog = weir_calloc(1, sizeof *t->backlog);
    uint64_t bound = t->job->opts.loop_memory_bytes;
    weir__backlog_init(t->backlog, t->nin, t->in_back, bound == UINT64_MAX ? 0 : bound,
                       t->job->opts.spill_dir);
  }
  for (uint32_t i = 0; i < t->nops; i++) {
    weir_ctx *c = t->ops[i];
    int rc = 0;
    if (c->node->svt && c->node->svt->open)
      rc = c->node->svt->open(c);
    else if (c->node->ovt && c->node->ovt->open)
      rc = c->node->ovt->open(c);
    if (rc < 0) return weir__ctx_report(c, rc, "open");
    c->opened = 1;
    rc = weir__ctx_restore(c);
    if (rc < 0) return rc;
  }
  return un_restore(t);
}

void weir__task_close(weir__task *t) {
  for (uint32_t i = 0; i < t->nops; i++) {
    weir_ctx *c = t->ops[i];
    atomic_fetch_add(&t->job->cow_copies, c->state.u.cow_copies);
    c->state.u.cow_copies = 0;
    if (!c->opened) continue;
    if (c->node->svt && c->node->svt->close)
      c->node->svt->close(c);
    else if (c->node->ovt && c->node->ovt->close)
      c->node->ovt->close(c);
    c->opened = 0;
  }
  weir__align_close(&t->align);
  weir__unalign_close(&t->un);
  weir_free(t->scanned);
  t->scanned = NULL;
  weir_free(t->in_off);
  t->in_off = NULL;
  weir__task_drop_held(t);
  weir__cs_drop(&t->cs);
  if (t->replay) weir_blob_free(t->replay, t->replay_len, t->replay_release);
  t->replay = NULL;
  weir__batch_destroy(t->replay_batch);
  t->replay_batch = NULL;
  if (t->backlog) {
    weir__backlog_close(t->backlog);
    weir_free(t->backlog);
    t->backlog = NULL;
  }
  publish_stats(t);
}
