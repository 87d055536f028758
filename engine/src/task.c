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
 * Unaligned cuts (job->unaligned) are task_unaligned.c's: the step only
 * asks it to look for barriers in the inputs' queues before each batch,
 * and hands it what it consumes while a cut's channel state is recorded.
 * The duties of a loop head's task are iteration_task.c's.
 */
#include "task.h"

#include <math.h>

#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "snapshot/store.h"
#include "hash.h"
#include "iteration.h"
#include "job.h"
#include "batch.h"
#include "channel.h"
#include "task_step.h"
#include "task_time.h"
#include "watermark.h"
#include "task_unaligned.h"
#include "trace.h"

static int op_process(weir_ctx *ctx, const weir__batch *b, uint32_t from, uint32_t n);

/* Publishes a batch on channel j of r; inside a loop, the records it holds
 * are added to the loop's in-flight count first (see iteration.c). */
static inline void router_push(weir__router *r, uint32_t j, weir__batch *b) {
  if (r->loop) weir__loop_publish(r);
  if (r->tr) b->tr.pushed = weir_clock_mono_ns();
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
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((noinline, cold))

/* Out of line: channel j of r has no current batch, or it lacks room for
 * len bytes. Pushes a batch that cannot take the record (growing one that
 * can), takes a new one if needed; returns the batch to append to. */
COLD weir__batch *route_batch(weir__router *r, uint32_t j, uint32_t len) {
  weir__batch *b = r->cur[j];
  if (!b) {
    b = r->cur[j] = weir__chan_batch(r->chans[j]);
    if (r->tr) weir__trace_born(r->tr, b);
  } else if (!weir__batch_fits(b, len)) {
    router_push(r, j, b);
    b = r->cur[j] = weir__chan_batch(r->chans[j]);
    if (r->tr) weir__trace_born(r->tr, b);
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

/* A record to routers [from, to) of t. */
HOT void emit_routers(weir__task *t, uint32_t from, uint32_t to, uint64_t key, int64_t ts,
                      uint64_t id, const void *p, uint32_t len) {
  for (uint32_t k = from; k < to; k++) {
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

COLD int emit_refused(weir_ctx *ctx) {
  weir_ctx_fail(ctx, WEIR_ESTATE,
                "emitting from open or restore is not allowed (they run again at every "
                "restore): emit from process, finish, poll or a source's run");
  return weir__ctx_report(ctx, WEIR_ESTATE, "open");
}

static inline int emit_check(weir_ctx *ctx, int64_t ts) {
  if (ctx->in_open) return emit_refused(ctx);
  if (ctx->wmgen) weir__wmgen_note(ctx->wmgen, ts);
  return 0;
}

HOT int emit_raw(weir_ctx *ctx, uint64_t key, int64_t ts, uint64_t id, const void *p, size_t len) {
  if (UNLIKELY(len > ctx->max_record)) return too_big(ctx, len);
  if (UNLIKELY(ctx->emit_slow)) {
    int rc = emit_check(ctx, ts);
    if (rc) return rc;
  }
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
  emit_routers(ctx->task, 0, ctx->task->nmain, key, ts, id, p, (uint32_t)len);
  return 0;
}

static inline uint64_t next_id(weir_ctx *ctx, uint64_t parent) {
  if (parent != ctx->seq_parent) {
    ctx->seq_parent = parent;
    ctx->seq = 0;
  }
  return weir__derive_id(parent, ctx->salt, ctx->seq++);
}

/* The index of side output `tag` of ctx's operator, or -1. A job emits to
 * one or two tags over and over: the last one is remembered by pointer. */
static int side_index(weir_ctx *ctx, const char *tag) {
  const weir__node *n = ctx->node;
  if (tag && tag == ctx->side_tag) return (int)ctx->side_k;
  for (uint32_t k = 0; tag && k < n->ntags; k++)
    if (!strcmp(n->tags[k], tag)) {
      ctx->side_tag = tag;
      ctx->side_k = k;
      return (int)k;
    }
  return -1;
}

COLD int side_undeclared(weir_ctx *ctx, const char *tag) {
  const weir__node *n = ctx->node;
  char list[512];
  weir__node_tags(n, list, sizeof list);
  return weir_ctx_fail(ctx, WEIR_EINVAL,
                       "operator '%s' emits to side output '%s', which it did not declare "
                       "(declares: %s)",
                       n->name, tag ? tag : "(null)", n->ntags ? list : "none");
}

int weir_emit_side(weir_ctx *ctx, const char *tag, uint64_t key, int64_t ts, const void *payload,
                   size_t len) {
  int k = side_index(ctx, tag);
  if (k < 0) return side_undeclared(ctx, tag);
  if (len > ctx->max_record) return too_big(ctx, len);
  if (ts == WEIR_TS_DEFAULT) ts = ctx->cur_ts;
  if (UNLIKELY(ctx->emit_slow)) {
    int rc = emit_check(ctx, ts);
    if (rc) return rc;
  }
  uint64_t id = next_id(ctx, ctx->cur_id);
  if (!ctx->side_n[k]) { /* nothing consumes it */
    weir_ctx_count(ctx, ctx->node->drop_names[k], 1);
    return 0;
  }
  ctx->n_out++;
  uint32_t from = ctx->side_first[k];
  emit_routers(ctx->task, from, from + ctx->side_n[k], key, ts, id, payload, (uint32_t)len);
  return 0;
}

int weir_emit(weir_ctx *ctx, uint64_t key, const void *payload, size_t len) {
  return emit_raw(ctx, key, ctx->cur_ts, next_id(ctx, ctx->cur_id), payload, len);
}

int weir_emit_at(weir_ctx *ctx, uint64_t key, int64_t ts, const void *payload, size_t len) {
  return emit_raw(ctx, key, ts, next_id(ctx, ctx->cur_id), payload, len);
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
  int (*process)(weir_ctx *, const weir_record *) = vt->process;
  int (*process_batch)(weir_ctx *, const weir_batch *) = vt->process_batch;
  if (UNLIKELY(ctx->in_side)) {
    process = vt->process2;
    process_batch = vt->process_batch2;
    /* Broadcast records belong to no key: broadcast state only. */
    ctx->in_bcast = (uint8_t)ctx->node->bcast_in2;
  }
  int rc = 0;
  ctx->n_in += n;
  /* A batch has no current record until a select. */
  ctx->key_known = !process_batch && !ctx->in_bcast;
  if (process_batch) {
    weir_batch v = weir__batch_view(b);
    if (from || n != b->len) {
      v.len = n;
      v.keys += from;
      v.ts += from;
      v.ids += from;
      v.off += from; /* offsets into the whole arena: data stays */
      v.lens += from;
    }
    rc = process_batch(ctx, &v);
  } else {
    for (uint32_t i = from; i < from + n; i++) {
      weir_record r = {b->keys[i], b->ts[i], b->ids[i], b->lens[i] ? b->data + b->off[i] : NULL,
                       b->lens[i]};
      ctx->cur_ts = r.ts;
      ctx->cur_id = r.id;
      ctx->cur_key = r.key;
      rc = process(ctx, &r);
      if (UNLIKELY(rc)) break;
    }
  }
  ctx->in_bcast = 0;
  /* No current key outside the records: state calls from a snapshot or a
   * checkpoint notification must not land under the last record's key. */
  ctx->key_known = 0;
  if (LIKELY(!rc)) return 0;
  static const char *const names[2][2] = {{"process", "process_batch"},
                                          {"process2", "process_batch2"}};
  return weir__ctx_result(ctx, rc, 0, names[ctx->in_side != 0][process_batch != NULL], "0");
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

void weir__task_flush_outputs(weir__task *t) {
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
  if (t->job->opts.buffer_timeout_us == WEIR_FLUSH_AT_ONCE) return; /* flushed already */
  uint64_t now = weir_clock_mono_ns();
  if (now - t->last_flush_ns >= (uint64_t)t->job->opts.buffer_timeout_us * 1000u)
    weir__task_flush_outputs(t);
}

static int outputs_writable(weir__task *t) {
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      int ok = weir__chan_writable(r->chans[j]);
      if (r->chans[j]->spill_err) {
        weir__task_failed(t, WEIR_EIO); /* the channel logged what and where */
        return 0;
      }
      if (!ok) {
        t->meter.blocked = 1; /* the step ends backpressured (meter.h) */
        return 0;
      }
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
  if (done == t->job->plan.ntasks) weir__job_poke(t->job);
}

int weir__task_poll(weir__task *t) {
  int held = 0, full = 0;
  for (uint32_t i = 0; i < t->nops; i++) {
    weir_ctx *c = t->ops[i];
    if (!c->opened || !c->node->ovt || !c->node->ovt->poll) continue;
    /* Its emissions: a parent of their own, and just after event time. */
    c->cur_id = weir__mix64(c->poll_nonce + ++c->poll_seq);
    c->key_known = 0;
    c->cur_ts = weir__time_after_clock(t);
    int rc = c->node->ovt->poll(c);
    if (rc < 0 || rc > WEIR_POLL_FULL)
      return weir__ctx_result(c, rc, WEIR_POLL_FULL, "poll",
                              "WEIR_POLL_IDLE (0), WEIR_POLL_BUSY (1), WEIR_POLL_FULL (2)");
    if (rc != WEIR_POLL_IDLE) held = 1;
    if (rc == WEIR_POLL_FULL) full = 1;
  }
  t->held = held;
  t->full = full;
  return 0;
}

/* Whether effects in flight hold the task's end. A stop waits for them
 * only WEIR__STOP_GRACE_NS: a first SIGINT must not wait on a destination
 * that does not answer. What it leaves is safe: those effects are pending
 * in the last checkpoint, and the next run (--restore latest) makes them
 * visible (docs/sinks.md). */
static int held_back(weir__task *t) {
  if (!t->held) return 0;
  /* A drain ends the job for good: nothing may stay pending. */
  if (!atomic_load_explicit(&t->job->stopping, memory_order_relaxed) ||
      atomic_load(&t->job->draining))
    return 1;
  uint64_t waited = weir_clock_mono_ns() - atomic_load(&t->job->stop_ns);
  if (waited < WEIR__STOP_GRACE_NS) {
    weir__task_wake_after(t, (WEIR__STOP_GRACE_NS - waited) / 1000 + 1);
    return 1;
  }
  if (!t->abandoned) {
    t->abandoned = 1;
    for (uint32_t i = 0; i < t->nops; i++)
      WEIR_LOG_W("stopping without waiting any longer for '%s' subtask %u: its effects in flight "
                 "stay pending in the last checkpoint, and the next run (--restore latest) makes "
                 "them visible",
                 t->ops[i]->node->name, t->subtask);
  }
  return 0;
}

/* The final checkpoint's completion counts as heard of once the effects it
 * started have landed (docs/sinks.md §1: the job ends after its sinks
 * commit; at a stop, see held_back). */
static void count_final(weir__task *t) {
  if (!t->final_pending || held_back(t)) return;
  t->final_pending = 0;
  atomic_fetch_add(&t->job->final_notified, 1);
  weir__job_poke(t->job);
}

void weir__task_failed(weir__task *t, int rc) {
  publish_stats(t);
  /* The operator already reported its error with its name; this covers
   * errors that did not come from an operator callback. */
  weir__job_failed(t->job, rc, "task %u: %s", t->index, weir_strerror(rc));
}

int weir__ctx_finish(weir_ctx *c) {
  const weir_operator_vt *vt = c->node->ovt;
  if (!vt || !vt->finish) return 0;
  /* Its emissions: a lineage of their own per subtask (stable on replay
   * at the same parallelism), after the end of event time. */
  c->cur_id = weir__mix64(c->salt ^ 0xf1a1f1a1ULL ^
                          weir__mix64(((uint64_t)c->parallelism << 32) | c->subtask));
  c->cur_ts = WEIR_WATERMARK_MAX;
  c->key_known = 0;
  int rc = vt->finish(c);
  return rc ? weir__ctx_result(c, rc, 0, "finish", "0") : 0;
}

/* Sends a control event on every output channel, after every record
 * emitted before it. */
void weir__task_push_control(weir__task *t, uint32_t kind, uint64_t id) {
  weir__task_flush_outputs(t);
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

/* Nonzero, after publishing the counts, if the task's outputs are full:
 * the step ends and a consumer wakes the task. */
static int outputs_blocked(weir__task *t) {
  if (outputs_writable(t)) return 0;
  publish_stats(t);
  return 1;
}

/* ---- checkpoints ------------------------------------------------------------ */

/* Synchronous checkpoints: this task forwarded drain marker id. */
static void report_drained(weir__task *t, uint64_t id) {
  t->sync_drained = id;
  weir__task_drained(t, id);
}

/* The cut of checkpoint id at this task: snapshot, then forward the
 * barrier (synchronous checkpoints: forward the drain marker, and snapshot
 * later). Returns 0 or an error (the job has been failed). */
int weir__task_take_checkpoint(weir__task *t, uint64_t id, uint64_t align_ns) {
  int rc = 0;
  if (t->job->unaligned == WEIR__UNALIGNED_ALWAYS) return weir__task_un_cut(t, id, NULL, align_ns);
  if (t->job->unaligned) weir__task_un_taken(t, id);
  if (t->head_loop) t->log_id = id;
  t->hold_views = t->job->views_on_tasks;
  if (!weir__task_sync_mode(t)) rc = weir__task_snapshot(t, id, align_ns);
  t->hold_views = 0;
  if (rc) return rc;
  weir__task_push_control(t, WEIR__MSG_BARRIER, id);
  /* Its held views are read from the next run on (weir__task_run). */
  if (t->head_loop) rc = weir__head_log_start(t, id);
  if (!rc && weir__task_sync_mode(t)) report_drained(t, id);
  return rc;
}

/* A finished task answers the triggered checkpoint with its final state:
 * everything it will ever emit is before any later cut. Returns 1 if the
 * task failed. */
static int answer_trigger(weir__task *t) {
  uint64_t tr = atomic_load(&t->job->trigger_id);
  if (weir__task_sync_mode(t)) {
    if (t->head_loop) weir__head_ready(t, tr);
    report_drained(t, tr); /* snapshots with the others */
  } else if (weir__task_snapshot(t, tr, 0)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

/* Synchronous checkpoints: a source that forwarded a drain marker waits
 * until its checkpoint completed or failed. */
static int sync_paused(weir__task *t) {
  return weir__task_sync_mode(t) && t->sync_drained > atomic_load(&t->job->resume_id);
}

/* End of all input: finish each operator in chain order, then send end of
 * input downstream. */
void weir__task_finish(weir__task *t) {
  /* The last checkpoint's views before the end of input goes out: a task
   * that is done runs no more. */
  weir__task_write_held(t);
  /* A source that ends while the job stops (asked to, or returning DONE
   * then) has not reached the end of its input: the restored job goes on
   * from there. A task with inputs knows from them (input_ended). */
  if (t->is_source && atomic_load_explicit(&t->job->stopping, memory_order_relaxed) &&
      !atomic_load(&t->job->draining))
    t->stopped = 1;
  if (!t->stopped) weir__time_end(t);
  for (uint32_t i = 0; i < t->nops; i++) {
    /* The true end: the operator's timers fire, then finish. A stop
     * leaves them in the last checkpoint. */
    int rc = t->has_timers && !t->stopped ? weir__timers_end(t, i) : 0;
    if (!rc) rc = weir__ctx_finish(t->ops[i]);
    if (!rc) rc = chain_flush(t, i);
    if (rc) {
      weir__task_failed(t, rc);
      return;
    }
  }
  weir__task_push_control(t, WEIR__MSG_EOI, t->stopped ? WEIR__END_STOP : WEIR__END_INPUT);
  t->state = WEIR__TASK_FINISHING;
  /* A head finishes when its loop drained: nothing can reach it on a
   * feedback edge any more, so an open log is complete. */
  if (t->head_loop && t->backlog->id && weir__head_write_log(t)) {
    weir__task_failed(t, WEIR_ECKPT);
    return;
  }
  /* A checkpoint triggered while this task drained its last input: no
   * barrier will reach it any more. */
  if (weir__task_pending_trigger(t) && answer_trigger(t)) return;
  /* finish may have started effects (a sink without checkpoints commits
   * its only transaction at the end of input): wait for them. */
  if (weir__task_poll(t)) {
    weir__task_failed(t, WEIR_EOPERATOR);
    return;
  }
  if (outputs_writable(t) && !held_back(t)) task_done(t);
}

/* How long a source that returned WEIR_SOURCE_IDLE sleeps: what it asked
 * for with weir_ctx_wake_after, else WEIR_SOURCE_IDLE_DEFAULT_US (weir/job.h
 * says why that long), with a warning the first time any subtask of the
 * source forgets: nothing else might ever run it again. */
static uint64_t idle_wake_us(weir_ctx *c) {
  if (c->wake_after_us) return c->wake_after_us;
  if (!atomic_exchange_explicit(&c->node->idle_warned, 1, memory_order_relaxed))
    WEIR_LOG_W("source '%s' subtask %u returned WEIR_SOURCE_IDLE without calling "
               "weir_ctx_wake_after: it runs again after %u us each time it does so (call "
               "weir_ctx_wake_after to choose when, or weir_ctx_wake from another thread to "
               "wake it at once)",
               c->node->name, c->subtask, (unsigned)WEIR_SOURCE_IDLE_DEFAULT_US);
  return WEIR_SOURCE_IDLE_DEFAULT_US;
}

static int source_step(weir__task *t) {
  weir_ctx *c = t->ops[0];
  if (sync_paused(t)) return 0; /* the coordinator wakes it */
  uint64_t t0 = weir_clock_mono_ns();
  for (uint32_t n = 0; n < t->budget_batches; n++) {
    if (atomic_load_explicit(&t->job->stopping, memory_order_relaxed)) {
      weir__task_finish(t);
      return 0;
    }
    if (weir__task_pending_trigger(t)) {
      uint64_t id = atomic_load(&t->job->trigger_id);
      if (weir_failpoint("ckpt.barrier_injected") || weir__task_take_checkpoint(t, id, 0)) {
        weir__task_failed(t, WEIR_ECKPT);
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
    if (rc < 0 || rc > WEIR_SOURCE_IDLE) {
      weir__task_failed(t, weir__ctx_result(c, rc, WEIR_SOURCE_IDLE, "run",
                                            "WEIR_SOURCE_MORE (0), WEIR_SOURCE_DONE (1), "
                                            "WEIR_SOURCE_IDLE (2)"));
      return 0;
    }
    int frc = chain_flush(t, 0);
    if (frc) {
      weir__task_failed(t, frc);
      return 0;
    }
    uint64_t t2 = weir_clock_mono_ns(), made = c->n_out - before;
    note_time(t, t2 - t1, made);
    if (t->wmgen && rc != WEIR_SOURCE_DONE) weir__time_source_tick(t, t2);
    if (UNLIKELY(t->job->opts.buffer_timeout_us == WEIR_FLUSH_AT_ONCE)) weir__task_flush_outputs(t);
    /* A test may hold the end of the input (failpoint source.done=until:
     * POINT:N, e.g. until a third checkpoint completed): the source idles
     * meanwhile and is asked again (the built-in ones answer DONE again). */
    if (rc == WEIR_SOURCE_DONE && weir_failpoint("source.done") == WEIR_EAGAIN) {
      rc = WEIR_SOURCE_IDLE;
      c->wake_after_us = 1000;
    }
    if (rc == WEIR_SOURCE_DONE) {
      weir__task_finish(t);
      return 0;
    }
    if (rc == WEIR_SOURCE_IDLE) {
      weir__task_flush_outputs(t);
      settle_pending(t);
      publish_stats(t);
      uint64_t us = weir__time_source_sleep_us(t, t2, idle_wake_us(c));
      if (us) weir__task_wake_after(t, us);
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
  if (weir__task_sync_mode(t) && t->head_loop) return weir__head_aligned(t, id);
  if (weir__task_take_checkpoint(t, id, align_ns)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

/* ---- a step of a task with inputs ------------------------------------------- */

/* How a part of a step ends: the step goes on, or it ends and the task
 * waits for a wake-up, or it ends and the task runs again soon. */
typedef enum { STEP_ON, STEP_WAIT, STEP_AGAIN } step_end;

/* Restored input records go through the chain before any live input, a
 * step at a time and sliced like live input. Returns 1 if more remain, 0
 * when done, or an error. */
static int replay_batches(weir__task *t) {
  uint64_t t0 = weir_clock_mono_ns(), t1 = t0;
  for (uint32_t n = 0; n < t->budget_batches; n++) {
    uint32_t want = t->pace.sliceable ? slice_of(t, t->batch_records) : t->batch_records;
    weir__batch *b = weir__task_un_replay_next(t, want);
    if (!b) break;
    int rc = op_process(t->ops[0], b, 0, b->len);
    if (!rc) rc = chain_flush(t, 0);
    if (rc) return rc;
    uint64_t t2 = weir_clock_mono_ns();
    note_time(t, t2 - t1, b->len);
    t1 = t2;
    if (!outputs_writable(t) || t2 - t0 > WEIR__STEP_NS) break;
  }
  return weir__task_un_replay_left(t);
}

static step_end replay_step(weir__task *t) {
  int rc = replay_batches(t);
  if (rc < 0) {
    weir__task_failed(t, rc);
    return STEP_WAIT;
  }
  if (!outputs_writable(t)) return STEP_WAIT;
  return rc > 0 ? STEP_AGAIN : STEP_ON;
}

static step_end head_step(weir__task *t) {
  int hd = weir__head_duties(t);
  /* A replayed log or an injected barrier may be waiting for room. */
  if (hd == 1 || !outputs_writable(t)) return STEP_WAIT;
  return hd == 2 ? STEP_AGAIN : STEP_ON; /* more of the log next step */
}

/* Whether input i may be read now. */
static inline int readable(const weir__task *t, uint32_t i) {
  return !t->in_ended[i] && weir__align_readable(&t->align, i) &&
         !(t->backlog && weir__backlog_blocked(t->backlog, i));
}

/* The head batch of the next input to read, round robin, or NULL. A loop
 * head reads its feedback edges first, and its external inputs only while
 * it admits them (see weir__head_admits). */
static inline weir__batch *next_input(weir__task *t, int external, uint32_t *idx) {
  for (int pass = t->head_loop ? 0 : 1; pass < (external ? 2 : 1); pass++) {
    for (uint32_t k = 0; k < t->nin; k++) {
      uint32_t i = t->rr + k < t->nin ? t->rr + k : t->rr + k - t->nin;
      if (!readable(t, i) || (pass == 0 && !t->in_back[i])) continue;
      weir__batch *b = weir__chan_peek(t->in[i]);
      if (b) {
        *idx = i;
        return b;
      }
    }
  }
  return NULL;
}

/* Nothing to read: announces waiting on every input it would read, and
 * returns 1 if one got data meanwhile (between the peek and the flag). */
static int wait_inputs(weir__task *t, int external) {
  int again = 0;
  for (uint32_t i = 0; i < t->nin; i++)
    if (readable(t, i) && (external || t->in_back[i]) && weir__chan_wait(t->in[i])) again = 1;
  return again;
}

/* The step ends to wait for input. */
static void go_idle(weir__task *t) {
  weir__task_flush_outputs(t);
  if (!t->head_loop || weir__head_duties(t) != 1) settle_pending(t);
  publish_stats(t);
}

/* A data batch on input idx: (a slice of) it goes through the chain, and
 * into a checkpoint's log where one needs it. *now: the time after the
 * call. Returns 1 if the step must end here. */
static inline int input_data(weir__task *t, uint32_t idx, weir__batch *b, uint64_t *now) {
  uint32_t from = t->in_off[idx], n = b->len - from;
  if (t->pace.sliceable) n = slice_of(t, n);
  uint64_t t1 = weir_clock_mono_ns();
  if (t->tr) weir__trace_pick(t, b, from, t1);
  if (t->head_loop && weir__backlog_logging(t->backlog, idx))
    weir__backlog_batch(t->backlog, b, from, n);
  weir__task_un_log(t, idx, b, from, n);
  t->ops[0]->in_side = t->in_side[idx];
  int rc = op_process(t->ops[0], b, from, n);
  if (!rc) rc = chain_flush(t, 0);
  /* Timers the records registered at or below the clock fire now. */
  if (!rc && t->has_timers) rc = weir__timers_due(t);
  if (t->tr) weir__trace_done(t, b, n, weir_clock_mono_ns());
  if (from + n == b->len) {
    t->in_off[idx] = 0;
    weir__chan_release(t->in[idx]);
  } else {
    t->in_off[idx] = from + n;
  }
  if (rc) {
    weir__task_failed(t, rc);
    return 1;
  }
  /* Only the call's own time: a snapshot taken on a barrier
   * between calls would look like a cost per call. */
  *now = weir_clock_mono_ns();
  note_time(t, *now - t1, n);
  if (UNLIKELY(t->job->opts.buffer_timeout_us == WEIR_FLUSH_AT_ONCE)) weir__task_flush_outputs(t);
  if (t->in_loopin[idx])
    weir__loop_consumed(t, n);
  else if (t->loop_out)
    weir__loop_publish_all(t);
  return outputs_blocked(t);
}

/* End of input on input idx (why: WEIR__END_*). Returns 1 if the step
 * must end here. */
static int input_ended(weir__task *t, uint32_t idx, uint64_t why) {
  t->in_ended[idx] = 1;
  ++t->nended;
  if (why == WEIR__END_STOP) {
    t->stopped = 1;
  } else {
    int rc = weir__time_input_ended(t, idx);
    if (rc) {
      weir__task_failed(t, rc);
      return 1;
    }
  }
  if (t->in_back[idx]) return weir__head_back_ended(t, idx);
  if (weir__task_un_ended(t, idx)) return 1;
  if (weir__align_end(&t->align, idx) == WEIR__ALIGN_COMPLETE && complete_alignment(t)) return 1;
  if (++t->nregular_ended == t->nregular && t->head_loop) weir__loop_ext_done(t->head_loop);
  if (!t->head_loop && t->nended == t->nin) {
    weir__task_finish(t);
    return 1;
  }
  return 0;
}

/* Barrier `id` on input idx. Returns 1 if the step must end here. */
static int input_barrier(weir__task *t, uint32_t idx, uint64_t id) {
  if (t->in_back[idx]) return weir__head_back_barrier(t, idx, id);
  if (t->job->unaligned) {
    if (weir__task_un_barrier(t, idx, id)) return 1;
    if (t->job->unaligned == WEIR__UNALIGNED_ALWAYS) return outputs_blocked(t);
  }
  weir__align_result ar = weir__align_barrier(&t->align, idx, id, weir_clock_mono_ns());
  if (ar == WEIR__ALIGN_COMPLETE) return complete_alignment(t) || outputs_blocked(t);
  if (ar == WEIR__ALIGN_NONE && weir_failpoint("ckpt.aligning")) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

/* A step of a task with inputs: restored records first, then a loop
 * head's duties, then up to its budget of input batches. */
static int input_step(weir__task *t) {
  step_end e = weir__task_un_replaying(t) ? replay_step(t) : STEP_ON;
  if (e == STEP_ON && t->head_loop) e = head_step(t);
  if (e != STEP_ON) return e == STEP_AGAIN;
  /* Unaligned: while a checkpoint is in flight and this task took its cut,
   * it yields after every batch, so that the tasks sharing its worker see
   * their barriers soon even when this one is slow (a mailbox step of a
   * slow operator would otherwise hold them back for its whole budget). */
  uint32_t budget = weir__task_un_in_flight(t) ? 1 : t->budget_batches;
  uint64_t t0 = weir_clock_mono_ns();
  for (uint32_t processed = 0; processed < budget;) {
    int cut = weir__task_un_poll(t);
    if (cut < 0) return 0;
    if (cut > 0) {
      /* Just took a cut: let the worker's other tasks see theirs. */
      maybe_timeout_flush(t);
      publish_stats(t);
      return 1;
    }
    int external = !t->head_loop || weir__head_admits(t);
    uint32_t idx = 0;
    weir__batch *b = next_input(t, external, &idx);
    if (!b) {
      if (wait_inputs(t, external)) continue;
      go_idle(t);
      return 0;
    }
    t->rr = idx + 1 == t->nin ? 0 : idx + 1;
    if (b->kind == WEIR__MSG_DATA) {
      uint64_t now;
      if (input_data(t, idx, b, &now)) return 0;
      processed++;
      if (now - t0 > WEIR__STEP_NS) break;
    } else if (b->kind == WEIR__MSG_EOI) {
      uint64_t why = b->barrier_id;
      weir__chan_release(t->in[idx]);
      if (input_ended(t, idx, why)) return 0;
    } else if (b->kind == WEIR__MSG_WATERMARK || b->kind == WEIR__MSG_IDLE) {
      uint32_t kind = b->kind;
      uint64_t v = b->barrier_id;
      weir__chan_release(t->in[idx]);
      int rc = weir__time_input(t, idx, kind, v);
      if (rc) {
        weir__task_failed(t, rc);
        return 0;
      }
      if (outputs_blocked(t)) return 0; /* timers may have filled them */
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

/* ---- the task -------------------------------------------------------------- */

static int task_step(weir__task *t);
static int run_reading(weir__task *t);

/* A slice of reading the views of the task's last cut, if any are left,
 * then a step: the records that came meanwhile wait for one slice, not for
 * the whole table. A slice takes as long as the step before it, or
 * WEIR__READ_SLICE_NS if that was shorter (WEIR__STEP_NS at most): under load, reading and records
 * share the task's time evenly and the checkpoint is not held up for long;
 * at light load the slices stay short. */
static int task_run(weir__task *t) {
  if (t->has_timers) {
    int more = t->nheld ? run_reading(t) : task_step(t);
    if (t->state == WEIR__TASK_RUNNING) weir__timers_arm(t);
    return more;
  }
  if (!t->nheld) return task_step(t);
  return run_reading(t);
}

/* A step between two clock reads, for the live metrics (meter.h): per
 * step, not per batch or record. */
int weir__task_run(weir__task *t) {
  uint64_t t0 = weir__meter_start(&t->meter, t->clock);
  int more = task_run(t);
  weir__meter_end(&t->meter, t0, weir_clock_mono_ns(), t->clock);
  return more;
}

static int run_reading(weir__task *t) {
  int reading = weir__task_read_held(t, t->read_slice_ns);
  uint64_t t0 = weir_clock_mono_ns();
  int more = task_step(t);
  uint64_t took = weir_clock_mono_ns() - t0;
  t->read_slice_ns = took < WEIR__READ_SLICE_NS ? WEIR__READ_SLICE_NS
                     : took > WEIR__STEP_NS     ? WEIR__STEP_NS
                                                : took;
  return more || (reading && !atomic_load_explicit(&t->job->failed, memory_order_relaxed));
}

static int task_step(weir__task *t) {
  if (atomic_load_explicit(&t->job->failed, memory_order_relaxed)) return 0;
  if (weir__task_notify(t)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 0;
  }
  if (weir__task_poll(t)) {
    weir__task_failed(t, WEIR_EOPERATOR);
    return 0;
  }
  count_final(t);
  if (t->job->recover_only) {
    if (t->state != WEIR__TASK_DONE && !held_back(t)) task_done(t);
    return 0;
  }
  if (weir__task_sync_mode(t)) {
    /* Every task drained: snapshot while nothing moves. */
    uint64_t snap = atomic_load(&t->job->sync_snap_id);
    if (snap > t->ckpt_done && snap == t->sync_drained && weir__task_snapshot(t, snap, 0)) {
      weir__task_failed(t, WEIR_ECKPT);
      return 0;
    }
  }
  if (t->state != WEIR__TASK_RUNNING && weir__task_pending_trigger(t) && answer_trigger(t))
    return 0;
  if (t->state == WEIR__TASK_DONE) return 0;
  /* Processing-time timers whose time came (a stopped task fires none). */
  if (t->has_timers && t->state == WEIR__TASK_RUNNING && !t->stopped) {
    int rc = weir__timers_due(t);
    if (rc) {
      weir__task_failed(t, rc);
      return 0;
    }
  }
  /* A barrier may overtake what waits for a full output. After a cut, the
   * worker's other tasks go first (the barriers just sent are theirs). */
  if (!t->is_source) {
    int cut = weir__task_un_poll(t);
    if (cut) return cut > 0;
  }
  if (t->job->unaligned == WEIR__UNALIGNED_ALWAYS && t->is_source &&
      t->state == WEIR__TASK_RUNNING && weir__task_pending_trigger(t)) {
    /* A backpressured source injects the barrier at once, ahead of the
     * output it cannot hand over yet (that becomes its channel state). */
    uint64_t id = atomic_load(&t->job->trigger_id);
    if (weir_failpoint("ckpt.barrier_injected") || weir__task_take_checkpoint(t, id, 0)) {
      weir__task_failed(t, WEIR_ECKPT);
      return 0;
    }
  }
  if (!outputs_writable(t)) return 0; /* a consumer will wake us */
  /* An operator that takes no more input for now (WEIR_POLL_FULL) holds
   * its task's input as a full output does; its weir_ctx_wake wakes us. */
  if (t->full && t->state == WEIR__TASK_RUNNING && !t->is_source) return 0;
  if (t->state == WEIR__TASK_FINISHING) {
    if (!held_back(t)) task_done(t);
    return 0;
  }
  return t->is_source ? source_step(t) : input_step(t);
}

int weir__task_open(weir__task *t) {
  t->last_flush_ns = weir_clock_mono_ns();
  if (t->job->trace) {
    t->tr = weir__trace_task_create();
    for (uint32_t k = 0; k < t->nrouters; k++) t->routers[k].tr = t->tr;
  }
  weir__align_init(&t->align, t->nin,
                   t->job->opts.at_least_once ? WEIR__ALIGN_AT_LEAST_ONCE
                                              : WEIR__ALIGN_EXACTLY_ONCE);
  /* Feedback edges are outside alignment (see iteration.c). */
  for (uint32_t i = 0; i < t->nin; i++)
    if (t->in_back[i]) weir__align_exclude(&t->align, i);
  t->in_off = weir_calloc(t->nin ? t->nin : 1, sizeof *t->in_off);
  /* Loop heads log whole batches, and consumption inside a loop is
   * counted per batch: their batches are never sliced. */
  t->pace.sliceable = !t->head_loop;
  for (uint32_t i = 0; i < t->nin; i++)
    if (t->in_loopin[i] || t->in_back[i]) t->pace.sliceable = 0;
  if (t->head_loop) weir__head_open(t);
  weir__time_open(t);
  t->proc_armed = INT64_MAX;
  for (uint32_t i = 0; i < t->nops; i++) {
    weir_ctx *c = t->ops[i];
    int rc = 0;
    if (c->tm[0] || c->tm[1]) t->has_timers = 1;
    c->poll_nonce = weir__mix64(weir_clock_mono_ns() ^ (uint64_t)(uintptr_t)c ^ c->salt);
    c->in_open = c->emit_slow = 1;
    if (c->node->svt && c->node->svt->open)
      rc = c->node->svt->open(c);
    else if (c->node->ovt && c->node->ovt->open)
      rc = c->node->ovt->open(c);
    if (rc) return weir__ctx_result(c, rc, 0, "open", "0");
    c->opened = 1;
    rc = weir__ctx_restore(c);
    c->in_open = 0;
    c->emit_slow = c->wmgen != NULL;
    if (rc < 0) return rc;
    if (c->keyed) {
      /* Restored keys are this subtask's by construction: the guard
       * checks what the operator inserts from now on. */
      int mp = t->job->opts.max_parallelism; /* 0 in a plan built by hand (harness.c) */
      c->guard = (weir__key_guard){(uint32_t)(mp > 0 ? mp : WEIR_DEFAULT_MAX_PARALLELISM),
                                   c->subtask, c->parallelism, &c->cur_key, &c->key_known};
      c->state.u.guard = &c->guard;
    }
  }
  return weir__task_un_open(t);
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
  weir_free(t->in_off);
  t->in_off = NULL;
  weir__task_drop_held(t);
  weir__task_un_close(t);
  weir__head_close(t);
  weir__time_close(t);
  weir__trace_task_close(t);
  publish_stats(t);
}

int weir__task_chain_flush(weir__task *t, uint32_t from) {
  return chain_flush(t, from);
}

/* Appends a restored output record (task_unaligned.c). */
void weir__task_route(weir__task *t, uint32_t k, uint32_t j, uint64_t key, int64_t ts, uint64_t id,
                      const void *p, uint32_t len) {
  route_append(&t->routers[k], j, key, ts, id, p, len);
}
