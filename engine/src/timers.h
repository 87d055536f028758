/* timers.h: the timers of one operator subtask in one time domain
 * (docs/event-time.md §5.3).
 *
 * Timers are grouped by timestamp: a bucket per distinct timestamp holds
 * the set of keys with a timer there (up to two inline, then an open-
 * addressing table of its own), the buckets are found by timestamp in a
 * hash map, and a min-heap holds each bucket's timestamp once. Window
 * timers cluster on few timestamps (every key's window ends at the same
 * instants), so a burst of registrations lands in one bucket's table,
 * small enough to stay in cache, and firing a timestamp scans one table
 * front to back and drops it whole. A bucket lives until its timestamp
 * fires, even if its keys were deleted (it then fires nothing), so that a
 * timestamp is in the heap exactly when it has a bucket.
 *
 * Owned by the subtask's thread; no locking.
 */
#ifndef WEIR_TIMERS_H
#define WEIR_TIMERS_H

#include <stdint.h>

/* No timer has this timestamp (it marks a free bucket slot). */
#define WEIR__TS_NONE INT64_MIN

typedef struct weir__tbucket {
  int64_t ts;   /* WEIR__TS_NONE: free slot */
  uint32_t n;   /* keys, the key WEIR__TKEY_EMPTY included */
  uint32_t cap; /* 0: keys inline in a, b; else the slots of the table at a */
  uint64_t a;   /* inline key 0, or the table (uintptr_t) */
  uint64_t b;   /* inline key 1, or 1 if the table's set holds WEIR__TKEY_EMPTY */
} weir__tbucket;

/* A free slot of a bucket's table; that key itself is kept in a flag. */
#define WEIR__TKEY_EMPTY UINT64_MAX

typedef struct weir__timers {
  weir__tbucket *buckets; /* open addressing by ts */
  uint32_t bcap, bn;
  unsigned bshift;
  int64_t *heap; /* the timestamps of the buckets, each once */
  uint32_t hn, hcap;
  uint64_t n; /* timers */
  /* The bucket a burst of registrations at one timestamp goes to. */
  int64_t last_ts;
  uint32_t last_slot;
  /* Keys of the bucket fired last, to size the next new bucket: window
   * ends come one after another with about as many keys (one use). */
  uint32_t size_hint;
} weir__timers;

void weir__timers_init(weir__timers *tm);
void weir__timers_free(weir__timers *tm);

/* Adds (key, ts). Returns 1 if added, 0 if it was there already. ts must
 * not be WEIR__TS_NONE. */
int weir__timers_add(weir__timers *tm, uint64_t key, int64_t ts);
/* Removes (key, ts). Returns 1 if removed, 0 if absent. */
int weir__timers_del(weir__timers *tm, uint64_t key, int64_t ts);
int weir__timers_has(const weir__timers *tm, uint64_t key, int64_t ts);
/* Prefetches the slot of (key, ts) if ts is the bucket of the last
 * registration (a burst at one window end); otherwise does nothing. */
void weir__timers_prefetch(const weir__timers *tm, uint64_t key, int64_t ts);
/* The earliest timestamp that may have a timer, or WEIR__TS_NONE when none
 * does (its timers may all have been deleted: firing finds none there). */
static inline int64_t weir__timers_next(const weir__timers *tm) {
  return tm->hn ? tm->heap[0] : WEIR__TS_NONE;
}

/* Called with up to `group` keys of one timestamp whose timers fire (all
 * of that timestamp's timers are out of the set by then): returns 0 or an
 * error, which stops the firing (the timers of that timestamp not yet
 * handed over are dropped: the job fails). It may add and delete timers;
 * those it adds at or below `upto` fire in the same call. */
typedef int (*weir__timers_fn)(void *arg, int64_t ts, const uint64_t *keys, uint32_t n);
/* Fires every timer at or below upto, in timestamp order (within one
 * timestamp: unspecified), in groups of at most `group` keys (1..1024).
 * Returns 0 or the callback's error. */
int weir__timers_fire(weir__timers *tm, int64_t upto, uint32_t group, weir__timers_fn fn,
                      void *arg);

/* Visits every timer (any order): for checkpoints. */
typedef void (*weir__timers_visit_fn)(void *arg, uint64_t key, int64_t ts);
void weir__timers_each(const weir__timers *tm, weir__timers_visit_fn fn, void *arg);
/* The latest timestamp with a bucket (WEIR__TS_NONE: none). */
int64_t weir__timers_latest(const weir__timers *tm);

#endif
