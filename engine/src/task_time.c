/* task_time.c: owns a task's event time: the watermark generator of a
 * source subtask, the valve over a task's inputs, the task's clock (what
 * weir_ctx_watermark says to every operator of its chain), and sending
 * watermarks and IDLE downstream (docs/event-time.md).
 *
 * DESIGN
 * Watermarks and IDLE travel as control events in the channels' FIFO,
 * after every record emitted before them, like barriers; they are sent on
 * every output channel whatever the partitioning. A chained operator
 * sees the clock move only after every record before the watermark went
 * through the chain (a source's tick follows the chain's flush; a task
 * with inputs takes control events between batches). End of input is
 * +inf only at the true end: a stopped source's end of input leaves the
 * valve where it was, so that a stopped job's operators never see a clock
 * the restored job would not have.
 */
#include "task_time.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "batch.h"
#include "task_step.h"
#include "watermark.h"

void weir__time_open(weir__task *t) {
  t->clock = WEIR_WATERMARK_MIN;
  if (!t->job->event_time) return;
  weir__node *n = t->ops[0]->node;
  if (t->is_source && n->has_wms) {
    t->wmgen = weir_malloc(sizeof *t->wmgen);
    weir__wmgen_init(t->wmgen, &n->wms, weir_clock_mono_ns());
    t->ops[0]->wmgen = t->wmgen;
  }
  if (t->nin) {
    t->valve = weir_malloc(sizeof *t->valve);
    weir__valve_init(t->valve, t->nin);
    for (uint32_t i = 0; i < t->nin; i++)
      if (t->in_back[i]) weir__valve_exclude(t->valve, i);
  }
}

void weir__time_close(weir__task *t) {
  if (t->wmgen) {
    weir__wmgen_free(t->wmgen);
    weir_free(t->wmgen);
    t->wmgen = NULL;
    t->ops[0]->wmgen = NULL;
  }
  if (t->valve) {
    weir__valve_free(t->valve);
    weir_free(t->valve);
    t->valve = NULL;
  }
}

/* Sends what the generator or valve decided, with `out` the new clock.
 * The clock never goes back: after a restore it starts where the
 * operators' checkpoint left it, above what the valve first says. The
 * timers it passes fire before the watermark goes on, so that what they
 * emit precedes it. Returns 0 or a timer's error. */
static int send(weir__task *t, weir__wm_result r, int64_t out) {
  if (r == WEIR__WM_ADVANCE) {
    if (out <= t->clock) return 0;
    t->clock = out;
    int rc = weir__timers_fire_event(t);
    if (rc) return rc;
    weir__task_push_control(t, WEIR__MSG_WATERMARK, (uint64_t)out);
  } else if (r == WEIR__WM_GONE_IDLE) {
    weir__task_push_control(t, WEIR__MSG_IDLE, 0);
  }
  return 0;
}

void weir__time_source_tick(weir__task *t, uint64_t now_ns) {
  if (!t->wmgen) return;
  /* The tick first: it sets wmgen->out, which the arguments of one call
   * could read before it (their order is unspecified). */
  weir__wm_result r = weir__wmgen_tick(t->wmgen, now_ns, 0);
  (void)send(t, r, t->wmgen->out); /* no timers */
}

uint64_t weir__time_source_sleep_us(const weir__task *t, uint64_t now_ns, uint64_t us) {
  if (!t->wmgen) return us;
  uint64_t tick_us = weir__wmgen_until_tick(t->wmgen, now_ns) / 1000 + 1;
  return us && us < tick_us ? us : tick_us;
}

int weir__time_input(weir__task *t, uint32_t idx, uint32_t kind, uint64_t v) {
  if (!t->valve) return 0;
  weir__wm_result r = kind == WEIR__MSG_WATERMARK ? weir__valve_watermark(t->valve, idx, (int64_t)v)
                                                  : weir__valve_idle(t->valve, idx);
  return send(t, r, t->valve->out);
}

int weir__time_input_ended(weir__task *t, uint32_t idx) {
  if (!t->valve) return 0;
  weir__wm_result r = weir__valve_ended(t->valve, idx);
  /* +inf goes downstream as this task's own end of input; its timers
   * fire as the task finishes (weir__timers_end). */
  if (t->valve->out == WEIR_WATERMARK_MAX) {
    t->clock = WEIR_WATERMARK_MAX;
    return 0;
  }
  return send(t, r, t->valve->out);
}

void weir__time_end(weir__task *t) {
  t->clock = WEIR_WATERMARK_MAX;
}

int64_t weir_ctx_watermark(const weir_ctx *ctx) {
  return ctx->task->clock;
}

void weir_source_split(weir_ctx *ctx, uint32_t split) {
  weir__wmgen *g = ctx->wmgen;
  if (!g || (split == g->cur && g->named)) return;
  weir__wmgen_split(g, split, split < g->nsplits ? 0 : weir_clock_mono_ns());
}

void weir_source_split_end(weir_ctx *ctx, uint32_t split) {
  if (ctx->wmgen) weir__wmgen_split_end(ctx->wmgen, split);
}
