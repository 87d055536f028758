/* timers.h: the timers of one operator subtask in one time domain
 * (docs/event-time.md §5.3).
 *
 * The set of (key, timestamp) pairs is the truth: a checkpoint copies it,
 * a restore inserts it back, a rescale moves its entries with their key.
 * The firing order is derived from it and never stored: a min-heap of the
 * distinct timestamps, a bucket per timestamp, and each bucket's keys in a
 * list threaded through one append-only array. Window timers cluster on
 * few timestamps (every key's window ends at the same instants), so firing
 * walks a dense list instead of popping a heap entry per timer. Deleting
 * leaves the list alone: firing skips what the set no longer holds. The
 * lists are rebuilt from the set when their dead entries outnumber the
 * live ones.
 *
 * Owned by the subtask's thread; no locking.
 */
#ifndef WEIR_TIMERS_H
#define WEIR_TIMERS_H

#include <stdint.h>

/* No timer has this timestamp (it marks a free slot). */
#define WEIR__TS_NONE INT64_MIN

typedef struct weir__tbucket {
  int64_t ts;    /* WEIR__TS_NONE: free slot */
  uint32_t head; /* first node of its list */
  uint32_t tail; /* last node */
} weir__tbucket;

typedef struct weir__timers {
  /* The set: 2 words per slot (key, ts); free when ts is WEIR__TS_NONE. */
  uint64_t *slots;
  uint64_t cap, n;
  unsigned shift;
  /* The order. Buckets: open addressing by ts. */
  weir__tbucket *buckets;
  uint32_t bcap, bn;
  int64_t *heap; /* distinct timestamps with a bucket */
  uint32_t hn, hcap;
  uint64_t *node_key;
  uint32_t *node_next;
  uint32_t nn, ncap;
  /* The bucket a burst of registrations at one ts appends to. */
  int64_t last_ts;
  uint32_t last_slot;
  int firing; /* inside weir__timers_fire: no rebuild now */
} weir__timers;

void weir__timers_init(weir__timers *tm);
void weir__timers_free(weir__timers *tm);

/* Adds (key, ts). Returns 1 if added, 0 if it was there already. ts must
 * not be WEIR__TS_NONE. */
int weir__timers_add(weir__timers *tm, uint64_t key, int64_t ts);
/* Removes (key, ts). Returns 1 if removed, 0 if absent. */
int weir__timers_del(weir__timers *tm, uint64_t key, int64_t ts);
int weir__timers_has(const weir__timers *tm, uint64_t key, int64_t ts);
/* The earliest timestamp that may have a timer, or WEIR__TS_NONE when none
 * does (it may name a timestamp whose timers were all deleted: firing
 * finds none there). */
static inline int64_t weir__timers_next(const weir__timers *tm) {
  return tm->hn ? tm->heap[0] : WEIR__TS_NONE;
}

/* Called for each timer that fires, with up to `n` keys of one timestamp
 * (the timers already out of the set): returns 0 or an error, which stops
 * the firing. It may add and delete timers; those it adds at or below
 * `upto` fire in the same call. */
typedef int (*weir__timers_fn)(void *arg, int64_t ts, const uint64_t *keys, uint32_t n);
/* Fires every timer at or below upto, in timestamp order (within one
 * timestamp: unspecified), in groups of at most `group` keys. Returns 0 or
 * the callback's error. */
int weir__timers_fire(weir__timers *tm, int64_t upto, uint32_t group, weir__timers_fn fn,
                      void *arg);

/* Visits every timer (any order): for checkpoints. */
typedef void (*weir__timers_visit_fn)(void *arg, uint64_t key, int64_t ts);
void weir__timers_each(const weir__timers *tm, weir__timers_visit_fn fn, void *arg);

#endif
