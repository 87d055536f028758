/* meter.h: a task's live time accounting for weir_job_metrics: how long it
 * ran (busy) and how long it waited for room in a full output channel
 * (backpressured), and its event-time clock, published for readers on any
 * thread.
 *
 * DESIGN
 * The task's thread measures per step, never per record: a step starts
 * and ends with a clock read (a step is up to 16 batches or about 1 ms),
 * and a step that found an output full (outputs_writable said no, which
 * ends the step) opens a backpressured period at its end; the next step
 * closes it at its start. So a task that waits for a consumer counts that
 * wait, a task that waits for input counts nothing, and the two never
 * overlap with its busy time.
 *
 * Readers take the three totals as one consistent set through a sequence
 * lock: the owner makes `seq` odd, stores (release), makes it even again;
 * a reader loads (acquire) and retries while `seq` is odd or changed under
 * it. Release stores and acquire loads are plain moves on x86-64 and
 * cheap on ARM, and a step publishes once at most.
 *
 * A reader adds the open backpressured period itself (now - since), so the
 * total it reports must not exceed what the owner adds when it closes the
 * period, or a counter would go back. Hence the order on both sides: the
 * owner makes `seq` odd *before* it reads the clock that closes the period,
 * and a reader reads its clock *between* its two loads of `seq`. A reader
 * whose clock read came after the owner's sees the odd or a later count
 * and retries; one whose clock read came before adds no more than the
 * owner will. Only the time for a store to become visible to another core
 * is left (nanoseconds); a preempted owner makes readers wait, not lie.
 */
#ifndef WEIR_METER_H
#define WEIR_METER_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/clock.h"

typedef struct weir__meter {
  /* Owner (the task's thread) only. */
  uint64_t busy, bp, since; /* since: start of the open backpressured period, 0: none */
  int blocked;              /* the current step found an output full */
  /* Published copies, written by the owner under seq, read by anyone. */
  _Atomic uint32_t seq;
  _Atomic uint64_t pub_busy, pub_bp, pub_since;
  _Atomic int64_t pub_clock;
} weir__meter;

/* Owner: the stores of a publication, seq already odd (s + 1). */
static inline void weir__meter_store(weir__meter *m, uint32_t s, int64_t clock) {
  /* Release stores, not a fence (which ThreadSanitizer cannot follow): a
   * reader that acquires any of these values sees the odd count too. */
  atomic_store_explicit(&m->pub_busy, m->busy, memory_order_release);
  atomic_store_explicit(&m->pub_bp, m->bp, memory_order_release);
  atomic_store_explicit(&m->pub_since, m->since, memory_order_release);
  atomic_store_explicit(&m->pub_clock, clock, memory_order_release);
  atomic_store_explicit(&m->seq, s + 2, memory_order_release);
}

/* Owner: a step starts; returns its start time. Closes an open
 * backpressured period, `seq` made odd before the clock is read. */
static inline uint64_t weir__meter_start(weir__meter *m, int64_t clock) {
  m->blocked = 0;
  if (!m->since) return weir_clock_mono_ns();
  uint32_t s = atomic_load_explicit(&m->seq, memory_order_relaxed);
  atomic_store_explicit(&m->seq, s + 1, memory_order_seq_cst);
  uint64_t t0 = weir_clock_mono_ns();
  m->bp += t0 > m->since ? t0 - m->since : 0;
  m->since = 0;
  weir__meter_store(m, s, clock);
  return t0;
}

/* Owner: the step that started at t0 ended at t1. */
static inline void weir__meter_end(weir__meter *m, uint64_t t0, uint64_t t1, int64_t clock) {
  m->busy += t1 - t0;
  if (m->blocked) m->since = t1 ? t1 : 1;
  uint32_t s = atomic_load_explicit(&m->seq, memory_order_relaxed);
  atomic_store_explicit(&m->seq, s + 1, memory_order_relaxed);
  weir__meter_store(m, s, clock);
}

/* Any thread: the totals now (the open period counted up to now). */
static inline void weir__meter_read(weir__meter *m, uint64_t *busy, uint64_t *bp, int64_t *clock) {
  uint64_t b, p, s, now;
  int64_t c;
  for (unsigned tries = 1;; tries++) {
    uint32_t s1 = atomic_load_explicit(&m->seq, memory_order_acquire);
    /* Acquire loads: seq's second read cannot move before them, and a
     * value of a write in progress brings its odd count with it. */
    b = atomic_load_explicit(&m->pub_busy, memory_order_acquire);
    p = atomic_load_explicit(&m->pub_bp, memory_order_acquire);
    s = atomic_load_explicit(&m->pub_since, memory_order_acquire);
    c = atomic_load_explicit(&m->pub_clock, memory_order_acquire);
    now = weir_clock_mono_ns();
    uint32_t s2 = atomic_load_explicit(&m->seq, memory_order_seq_cst);
    if (s1 == s2 && !(s1 & 1)) break;
    if (tries % 64 == 0) sched_yield(); /* the owner may be preempted mid-write */
  }
  *busy = b;
  *bp = p + (s && now > s ? now - s : 0);
  *clock = c;
}

#endif
