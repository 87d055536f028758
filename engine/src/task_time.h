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
/* A WATERMARK (value v) or IDLE event on input idx. */
void weir__time_input(weir__task *t, uint32_t idx, uint32_t kind, uint64_t v);
/* End of input on idx, for good (a true end, not a stop). */
void weir__time_input_ended(weir__task *t, uint32_t idx);
/* The true end of all input: the clock goes to WEIR_WATERMARK_MAX. */
void weir__time_end(weir__task *t);

#endif
