/* unaligned.h: the unaligned barrier handler of one task, as a pure state
 * machine (no threads, no clocks, no channels: the caller reports events).
 *
 * In unaligned mode (FLIP-76) barrier n does not wait behind buffered data.
 * The task scans its input rings; the first time it sees barrier n in any of
 * them (SEEN, even behind buffered batches) it takes its cut at once:
 * snapshots its operators, records the batches waiting in its output
 * channels' pending lists as *output channel state*, and puts barrier n at
 * the front of every output. From then on, every record it consumes from an
 * input that has not yet delivered barrier n (PASSED) was sent before the
 * barrier and processed after the cut: it is *input channel state* and is
 * logged. When every input delivered n or ended, the channel state is
 * complete and written as part of checkpoint n.
 *
 *                 seen(i, n), n > last: CUT (caller snapshots, then start(n))
 *   IDLE ------------------------------------------------------> RECORDING(n)
 *     ^                                                           |  data on a LOGGING input: log
 * it |     every live input delivered n (barrier(i, n)) or ended |  barrier(i, m > n): CUT for m
 *     +------------------- COMPLETE: write channel state, done() -+  (n is abandoned)
 *
 * The alignment timeout reuses the machine: an aligned task whose alignment
 * of n takes too long calls start(n) with the inputs that already delivered
 * n marked as passed, and continues unaligned.
 *
 * Invariants (weir__unalign_check):
 *   - cur == 0 (idle) implies no input is LOGGING;
 *   - nlogging is the number of LOGGING inputs; it reaches 0 only with a
 *     COMPLETE result, after which the caller calls done() at once;
 *   - last only grows, and cur == last while recording (the cut of `cur` was
 *     taken: its snapshot exists, its channel state is being recorded).
 * Barriers with ids <= last that are not the one being recorded are stale
 * (completed or abandoned) and ignored.
 */
#ifndef WEIR_UNALIGNED_H
#define WEIR_UNALIGNED_H

#include <stdint.h>

typedef enum {
  WEIR__UN_NONE = 0,     /* nothing to do */
  WEIR__UN_CUT = 1,      /* take the cut of weir__unalign.want now, then call start() */
  WEIR__UN_COMPLETE = 2, /* channel state of `cur` is complete: write it, call done() */
} weir__unalign_result;

enum { WEIR__UN_IDLE = 0, WEIR__UN_LOGGING = 1, WEIR__UN_PASSED = 2, WEIR__UN_ENDED = 3 };

typedef struct weir__unalign {
  uint32_t nin;
  uint8_t *in;                 /* WEIR__UN_* per input */
  uint32_t nlogging;           /* inputs in LOGGING */
  uint64_t cur;                /* checkpoint whose channel state is recorded, 0 if idle */
  uint64_t last;               /* latest checkpoint whose cut this task took */
  uint64_t want;               /* after CUT: the checkpoint to cut */
  uint64_t abandoned;          /* latest recording given up for a newer one */
  uint64_t *records, *batches; /* logged per input for `cur` */
} weir__unalign;

void weir__unalign_init(weir__unalign *u, uint32_t nin);
void weir__unalign_close(weir__unalign *u);
/* The task took the cut of `id` by other means (a source, a finished task,
 * an aligned cut): later barriers <= id are stale. */
void weir__unalign_taken(weir__unalign *u, uint64_t id);
/* Barrier `id` is in input i's queue (not yet consumed). CUT if its cut is
 * still to be taken (then `want` = id). */
weir__unalign_result weir__unalign_seen(weir__unalign *u, uint32_t i, uint64_t id);
/* The caller took the cut of `id` (id > last): recording starts on every
 * live input except those marked in `passed` (may be NULL: none), which
 * already delivered `id`. A recording still open for an older id is
 * abandoned (its channel state is dropped by the caller). Returns COMPLETE
 * at once if no input is left to log. */
weir__unalign_result weir__unalign_start(weir__unalign *u, uint64_t id, const uint8_t *passed);
/* A data batch of n records is consumed from input i: returns 1 if it must
 * be logged as channel state (and counts it). */
int weir__unalign_data(weir__unalign *u, uint32_t i, uint64_t n);
/* Barrier `id` consumed on input i. CUT if it was never seen (the caller
 * scans before it consumes, so only in scripted tests), COMPLETE if it was
 * the last input to deliver `cur`. */
weir__unalign_result weir__unalign_barrier(weir__unalign *u, uint32_t i, uint64_t id);
/* End of input on input i: it counts as delivered for every checkpoint. */
weir__unalign_result weir__unalign_end(weir__unalign *u, uint32_t i);
/* After COMPLETE: the channel state of `cur` was handed over. Returns it. */
uint64_t weir__unalign_done(weir__unalign *u);
/* Nonzero if every invariant above holds. */
int weir__unalign_check(const weir__unalign *u);

#endif
