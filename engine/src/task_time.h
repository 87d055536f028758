/* task_time.h: a task's part in event time (docs/event-time.md): a
 * source's watermark generator, the valve over a task's inputs, the
 * task's clock, and the watermark and idleness events it sends on. Jobs
 * without a watermark strategy pay one null test per control event. */
#ifndef WEIR_TASK_TIME_H
#define WEIR_TASK_TIME_H

#include <stdint.h>

#include "task.h"

/* In a job with event time: the task's generator (a source with a
 * strategy) or valve (a task with inputs). Called as the task opens. */
void weir__time_open(weir__task *t);
void weir__time_close(weir__task *t);
/* A source with a strategy, after a call to its run at time now: sends a
 * watermark or IDLE if the tick is due. */
void weir__time_source_tick(weir__task *t, uint64_t now_ns);
/* A source with a strategy that returned WEIR_SOURCE_IDLE asking to be run
 * again in `us` (0: when woken): how long it may sleep so that its ticks
 * still come (idleness is found by ticks). */
uint64_t weir__time_source_sleep_us(const weir__task *t, uint64_t now_ns, uint64_t us);
/* A WATERMARK (value v) or IDLE event on input idx. Returns 0 or the
 * error of a timer that fired (reported). */
int weir__time_input(weir__task *t, uint32_t idx, uint32_t kind, uint64_t v);
/* End of input on idx, for good (a true end, not a stop). As above. */
int weir__time_input_ended(weir__task *t, uint32_t idx);
/* The true end of all input: the clock goes to WEIR_WATERMARK_MAX. */
void weir__time_end(weir__task *t);
/* The timestamp of records emitted outside any input record (poll, a
 * processing-time timer): just after the task's clock, 0 without one. */
static inline int64_t weir__time_after_clock(const weir__task *t) {
  return t->clock == WEIR_WATERMARK_MIN   ? 0
         : t->clock == WEIR_WATERMARK_MAX ? WEIR_WATERMARK_MAX
                                          : t->clock + 1;
}

/* ---- timers (task_timers.c) ---- */

/* Makes and frees a context's timer sets (those its operator declared). */
void weir__timers_ctx_init(weir_ctx *c);
void weir__timers_ctx_free(weir_ctx *c);
/* In on_timers: key becomes current and starts its emission ids. */
void weir__timers_select(weir_ctx *c, uint64_t key);
/* The clock advanced: every operator's event-time timers at or below it
 * fire, in chain order. 0 or the error (reported). */
int weir__timers_fire_event(weir__task *t);
/* After a callback and at the start of a step: what is due in either
 * domain fires. 0 or the error (reported). */
int weir__timers_due(weir__task *t);
/* The true end, before operator i's finish: its timers fire. */
int weir__timers_end(weir__task *t, uint32_t i);
/* At the end of a step: the task wakes for its next processing-time
 * timer. */
void weir__timers_arm(weir__task *t);
/* Checkpoints: the timer sets and the clock into s; back from s (called
 * as the context restores). */
void weir__timers_snapshot(weir_ctx *c, struct weir_subtask_snapshot *s);
int weir__timers_restore(weir_ctx *c, const struct weir_subtask_snapshot *s);

#endif
