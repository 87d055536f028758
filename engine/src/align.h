/* align.h: barrier alignment of one task, as a pure state machine.
 *
 * A task with several inputs receives barrier n on each of them at
 * different times. In aligned mode (the ABS paper's Algorithm 1) an input
 * that delivered barrier n is blocked (not read) until barrier n has
 * arrived on every input that has not ended; then the task snapshots,
 * forwards barrier n and unblocks everything. An input that ended counts as
 * aligned for every later checkpoint: its producer finished, so everything
 * it will ever send is already before the cut. In at-least-once mode
 * barriers are only counted: no input is ever blocked, and the snapshot is
 * taken when the last barrier arrives (records that overtook it on other
 * inputs are then in the snapshot and replayed again after a restore).
 *
 *            barrier n on input i (n > last)
 *   IDLE ------------------------------------------> ALIGNING(n)
 *     ^   (complete at once if i is the only live input)  |  barrier n on j: block j
 *     |                                                 |  end of input on j
 *     |        every live input delivered n             |  barrier m > n: abandon n,
 *     +------------ COMPLETE(n): snapshot, forward -----+  ALIGNING(m)
 *
 * Invariants (checked by weir__align_check):
 *   - blocked inputs are exactly the live inputs that delivered `cur`;
 *   - nblocked + nended <= nin, and == nin never persists (it completes);
 *   - cur == 0 (idle) implies no input is blocked;
 *   - `last` (latest completed id) only grows, and cur > last while aligning.
 * Barriers with ids <= last, or < cur, are stale (their checkpoint was
 * completed or abandoned) and are dropped.
 */
#ifndef WEIR_ALIGN_H
#define WEIR_ALIGN_H

#include <stdint.h>

typedef enum { WEIR__ALIGN_EXACTLY_ONCE = 0, WEIR__ALIGN_AT_LEAST_ONCE = 1 } weir__align_mode;

typedef enum {
  WEIR__ALIGN_NONE = 0,     /* nothing to do */
  WEIR__ALIGN_COMPLETE = 1, /* snapshot `cur`, forward it (see weir__align_done) */
  WEIR__ALIGN_STALE = 2,    /* barrier dropped */
} weir__align_result;

enum { WEIR__IN_OPEN = 0, WEIR__IN_BLOCKED = 1, WEIR__IN_ENDED = 2, WEIR__IN_SEEN = 3 };

typedef struct weir__align {
  weir__align_mode mode;
  uint32_t nin;
  uint8_t *in;       /* WEIR__IN_* per input */
  uint32_t nblocked; /* inputs that delivered `cur` (blocked, or seen when at-least-once) */
  uint32_t nended;
  uint64_t cur;        /* checkpoint being aligned, 0 if idle */
  uint64_t last;       /* latest checkpoint this task completed */
  uint64_t abandoned;  /* latest checkpoint given up for a newer one */
  uint64_t started_ns; /* when alignment of `cur` began (caller's clock) */
} weir__align;

void weir__align_init(weir__align *a, uint32_t nin, weir__align_mode mode);
void weir__align_close(weir__align *a);
/* Input i takes no part in alignment (a feedback edge): it is never
 * blocked and counts as aligned. Call before any event. */
void weir__align_exclude(weir__align *a, uint32_t i);
/* Barrier `id` arrived on input i at time now_ns. */
weir__align_result weir__align_barrier(weir__align *a, uint32_t i, uint64_t id, uint64_t now_ns);
/* End of input on input i. May complete a pending alignment. */
weir__align_result weir__align_end(weir__align *a, uint32_t i);
/* After COMPLETE: the caller took snapshot `cur` and forwarded the barrier;
 * unblocks every input. Returns the completed id. */
uint64_t weir__align_done(weir__align *a);
/* The task took the cut of `id` another way (an unaligned cut after the
 * alignment timeout): it counts as completed, every input is unblocked,
 * and barriers <= id are stale from now on. */
void weir__align_force(weir__align *a, uint64_t id);
/* Nonzero if input i may be read now. */
static inline int weir__align_readable(const weir__align *a, uint32_t i) {
  return a->in[i] != WEIR__IN_BLOCKED; /* an ended input has nothing to read anyway */
}
/* Nonzero if every invariant above holds. */
int weir__align_check(const weir__align *a);

#endif
