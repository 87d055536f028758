/* watermark.h: event time's two pure state machines (docs/event-time.md):
 * the generator a source subtask runs over the timestamps it emits, and
 * the valve a task runs over the watermarks of its inputs. Neither reads a
 * clock or touches a channel: the task passes the time in and sends what
 * they decide (task_time.c).
 *
 * The generator keeps, per split of the source subtask (a file, a
 * partition; split 0 when the source has none), the largest timestamp it
 * emitted. At each tick (at most one per interval) the subtask's watermark
 * is the minimum over its live splits of max_ts - D - 1 (D: the bounded
 * out-of-orderness), and it only grows. A split that emitted nothing for
 * the idleness timeout is idle, and left out until it emits again; with
 * every split idle the subtask is idle (downstream, its channels stop
 * holding event time back).
 *
 * The valve keeps per input channel its latest watermark and whether it is
 * active, idle or ended:
 *
 *   ACTIVE --IDLE--> IDLE --WATERMARK w--> ACTIVE        wm[i] = max(wm[i], w)
 *   ACTIVE, IDLE --end of input--> ENDED (+inf, for good)
 *
 *   some input ACTIVE     -> out = the minimum of wm[i] over the ACTIVE
 *                            inputs caught up with out (wm[i] >= out), if
 *                            that is above out
 *   none ACTIVE, some IDLE-> the valve is idle; out unchanged
 *   every input ENDED     -> out = +inf
 *
 * Invariants (weir__valve_check): out never decreases; ENDED is final; the
 * valve is idle exactly when no input is ACTIVE and one is IDLE. An idle
 * input does not hold event time back: records on it meet the clock the
 * others set (the price of idleness, as in Flink). An input that becomes
 * active again behind `out` holds nothing back until it has caught up
 * (else it would stall the others for as long as it was idle).
 */
#ifndef WEIR_WATERMARK_H
#define WEIR_WATERMARK_H

#include <stdint.h>

#include "weir/job.h"

/* ---- the generator ------------------------------------------------------- */

typedef struct weir__wm_split {
  int64_t max_ts;
  uint64_t active_ns; /* the tick that last saw records from it */
  uint8_t fresh;      /* records since the last tick */
  uint8_t ended;
} weir__wm_split;

typedef struct weir__wmgen {
  int64_t disorder;
  uint64_t interval_ns, idle_ns; /* idle_ns 0: never idle */
  uint32_t nsplits, cap, cur;
  weir__wm_split *splits;
  uint64_t next_tick;
  int64_t out; /* the latest watermark sent (WEIR_WATERMARK_MIN: none) */
  int idle;    /* IDLE sent, and no watermark since */
  int named;   /* the source has named a split (else all is split 0) */
} weir__wmgen;

typedef enum {
  WEIR__WM_NONE = 0,      /* nothing to send */
  WEIR__WM_ADVANCE = 1,   /* send WATERMARK out */
  WEIR__WM_GONE_IDLE = 2, /* send IDLE */
} weir__wm_result;

void weir__wmgen_init(weir__wmgen *g, const weir_watermark_strategy *s, uint64_t now_ns);
void weir__wmgen_free(weir__wmgen *g);
/* The split the next records come from (grows the split table). */
void weir__wmgen_split(weir__wmgen *g, uint32_t split, uint64_t now_ns);
/* A split that will emit no more: left out of the minimum for good. */
void weir__wmgen_split_end(weir__wmgen *g, uint32_t split);
/* One record of the current split. */
static inline void weir__wmgen_note(weir__wmgen *g, int64_t ts) {
  weir__wm_split *s = &g->splits[g->cur];
  if (ts > s->max_ts) s->max_ts = ts;
  s->fresh = 1;
}
/* At time now: what to send (the watermark is g->out). Does nothing before
 * the next tick is due unless `force`. */
weir__wm_result weir__wmgen_tick(weir__wmgen *g, uint64_t now_ns, int force);
/* Nanoseconds from now until the next tick. */
uint64_t weir__wmgen_until_tick(const weir__wmgen *g, uint64_t now_ns);

/* ---- the valve ----------------------------------------------------------- */

enum { WEIR__VIN_ACTIVE = 0, WEIR__VIN_IDLE = 1, WEIR__VIN_ENDED = 2, WEIR__VIN_EXCLUDED = 3 };

typedef struct weir__valve {
  uint32_t n;
  int64_t *wm;
  uint8_t *st;
  int64_t out;
  int idle;
} weir__valve;

void weir__valve_init(weir__valve *v, uint32_t n);
void weir__valve_free(weir__valve *v);
/* An input that never carries event time (a feedback edge). */
void weir__valve_exclude(weir__valve *v, uint32_t i);
/* Each returns what the task sends on: WEIR__WM_ADVANCE (a watermark: out
 * grew, or the valve was idle and is active again), WEIR__WM_GONE_IDLE, or
 * WEIR__WM_NONE. */
weir__wm_result weir__valve_watermark(weir__valve *v, uint32_t i, int64_t wm);
weir__wm_result weir__valve_idle(weir__valve *v, uint32_t i);
weir__wm_result weir__valve_ended(weir__valve *v, uint32_t i);
/* 0 if the invariants hold, else a negative number naming the one broken. */
int weir__valve_check(const weir__valve *v, int64_t prev_out);

#endif
