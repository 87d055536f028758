/* timers.c: owns the timer set and its firing order (see timers.h and
 * docs/event-time.md §5.3). */
#include "timers.h"

#include <string.h>

#include "base/alloc.h"
#include "base/assert.h"

#define NIL UINT32_MAX
#define SET_MIN 64u
#define BUCKETS_MIN 16u
#define NODES_MIN 64u
/* The lists are rebuilt instead of grown once more than this many of their
 * entries beyond twice the live timers are dead. */
#define SLACK 1024u

static inline uint64_t pair_hash(uint64_t key, int64_t ts) {
  uint64_t x = key * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts * 0xc2b2ae3d27d4eb4full;
  return x ^ (x >> 29);
}

static inline uint64_t set_home(const weir__timers *tm, uint64_t key, int64_t ts) {
  return (pair_hash(key, ts) * 0x9e3779b97f4a7c15ull) >> tm->shift;
}

static inline uint32_t bucket_home(const weir__timers *tm, int64_t ts) {
  unsigned bits = (unsigned)__builtin_ctz(tm->bcap);
  return (uint32_t)(((uint64_t)ts * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static uint64_t *set_alloc(uint64_t cap) {
  uint64_t *s = weir_malloc(cap * 16);
  for (uint64_t i = 0; i < cap; i++) s[2 * i + 1] = (uint64_t)WEIR__TS_NONE;
  return s;
}

static void set_size(weir__timers *tm, uint64_t cap) {
  tm->cap = cap;
  tm->shift = 64u - (unsigned)__builtin_ctzll(cap);
  tm->slots = set_alloc(cap);
}

void weir__timers_init(weir__timers *tm) {
  memset(tm, 0, sizeof *tm);
  tm->last_ts = WEIR__TS_NONE;
}

void weir__timers_free(weir__timers *tm) {
  weir_free(tm->slots);
  weir_free(tm->buckets);
  weir_free(tm->heap);
  weir_free(tm->node_key);
  weir_free(tm->node_next);
  weir__timers_init(tm);
}

/* ---- the set ---------------------------------------------------------------- */

static void set_grow(weir__timers *tm) {
  uint64_t *old = tm->slots, ocap = tm->cap;
  set_size(tm, ocap ? 2 * ocap : SET_MIN);
  uint64_t mask = tm->cap - 1;
  for (uint64_t i = 0; i < ocap; i++) {
    int64_t ts = (int64_t)old[2 * i + 1];
    if (ts == WEIR__TS_NONE) continue;
    uint64_t j = set_home(tm, old[2 * i], ts);
    while ((int64_t)tm->slots[2 * j + 1] != WEIR__TS_NONE) j = (j + 1) & mask;
    tm->slots[2 * j] = old[2 * i];
    tm->slots[2 * j + 1] = old[2 * i + 1];
  }
  weir_free(old);
}

/* The slot of (key, ts), or the free slot where it would go. */
static inline uint64_t set_probe(const weir__timers *tm, uint64_t key, int64_t ts, int *found) {
  uint64_t mask = tm->cap - 1;
  for (uint64_t j = set_home(tm, key, ts);; j = (j + 1) & mask) {
    int64_t t = (int64_t)tm->slots[2 * j + 1];
    if (t == WEIR__TS_NONE) {
      *found = 0;
      return j;
    }
    if (t == ts && tm->slots[2 * j] == key) {
      *found = 1;
      return j;
    }
  }
}

int weir__timers_has(const weir__timers *tm, uint64_t key, int64_t ts) {
  int found = 0;
  if (tm->cap) (void)set_probe(tm, key, ts, &found);
  return found;
}

/* Linear probing without tombstones: the entries after a removed one move
 * back where their probe would otherwise stop short of them. */
static void set_remove_at(weir__timers *tm, uint64_t i) {
  uint64_t mask = tm->cap - 1;
  for (uint64_t j = (i + 1) & mask;; j = (j + 1) & mask) {
    int64_t ts = (int64_t)tm->slots[2 * j + 1];
    if (ts == WEIR__TS_NONE) break;
    uint64_t h = set_home(tm, tm->slots[2 * j], ts);
    /* Entry j may fill hole i unless its home lies cyclically in (i, j]. */
    int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (stays) continue;
    tm->slots[2 * i] = tm->slots[2 * j];
    tm->slots[2 * i + 1] = tm->slots[2 * j + 1];
    i = j;
  }
  tm->slots[2 * i + 1] = (uint64_t)WEIR__TS_NONE;
  tm->n--;
}

static int set_add(weir__timers *tm, uint64_t key, int64_t ts) {
  if (2 * (tm->n + 1) > tm->cap) set_grow(tm);
  int found;
  uint64_t j = set_probe(tm, key, ts, &found);
  if (found) return 0;
  tm->slots[2 * j] = key;
  tm->slots[2 * j + 1] = (uint64_t)ts;
  tm->n++;
  return 1;
}

int weir__timers_del(weir__timers *tm, uint64_t key, int64_t ts) {
  if (!tm->n) return 0;
  int found;
  uint64_t j = set_probe(tm, key, ts, &found);
  if (!found) return 0;
  set_remove_at(tm, j);
  return 1;
}

/* ---- the order ------------------------------------------------------------ */

static void heap_push(weir__timers *tm, int64_t ts) {
  if (tm->hn == tm->hcap) {
    tm->hcap = tm->hcap ? 2 * tm->hcap : BUCKETS_MIN;
    tm->heap = weir_realloc(tm->heap, tm->hcap * sizeof *tm->heap);
  }
  uint32_t i = tm->hn++;
  while (i) {
    uint32_t p = (i - 1) / 2;
    if (tm->heap[p] <= ts) break;
    tm->heap[i] = tm->heap[p];
    i = p;
  }
  tm->heap[i] = ts;
}

static void heap_pop(weir__timers *tm) {
  int64_t last = tm->heap[--tm->hn];
  uint32_t i = 0, n = tm->hn;
  for (;;) {
    uint32_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && tm->heap[c + 1] < tm->heap[c]) c++;
    if (last <= tm->heap[c]) break;
    tm->heap[i] = tm->heap[c];
    i = c;
  }
  if (n) tm->heap[i] = last;
}

static void buckets_size(weir__timers *tm, uint32_t cap) {
  tm->bcap = cap;
  tm->buckets = weir_malloc(cap * sizeof *tm->buckets);
  for (uint32_t i = 0; i < cap; i++) tm->buckets[i].ts = WEIR__TS_NONE;
  tm->last_ts = WEIR__TS_NONE;
}

static uint32_t bucket_probe(const weir__timers *tm, int64_t ts, int *found) {
  uint32_t mask = tm->bcap - 1;
  for (uint32_t j = bucket_home(tm, ts);; j = (j + 1) & mask) {
    if (tm->buckets[j].ts == ts) {
      *found = 1;
      return j;
    }
    if (tm->buckets[j].ts == WEIR__TS_NONE) {
      *found = 0;
      return j;
    }
  }
}

static void buckets_grow(weir__timers *tm) {
  weir__tbucket *old = tm->buckets;
  uint32_t ocap = tm->bcap;
  buckets_size(tm, ocap ? 2 * ocap : BUCKETS_MIN);
  for (uint32_t i = 0; i < ocap; i++) {
    if (old[i].ts == WEIR__TS_NONE) continue;
    int found;
    tm->buckets[bucket_probe(tm, old[i].ts, &found)] = old[i];
  }
  weir_free(old);
}

static void bucket_remove(weir__timers *tm, int64_t ts) {
  int found;
  uint32_t i = bucket_probe(tm, ts, &found), mask = tm->bcap - 1;
  WEIR_ASSERT(found);
  for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
    if (tm->buckets[j].ts == WEIR__TS_NONE) break;
    uint32_t h = bucket_home(tm, tm->buckets[j].ts);
    int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (stays) continue;
    tm->buckets[i] = tm->buckets[j];
    i = j;
  }
  tm->buckets[i].ts = WEIR__TS_NONE;
  tm->bn--;
  tm->last_ts = WEIR__TS_NONE; /* slots moved */
}

static uint32_t node_new(weir__timers *tm, uint64_t key) {
  if (tm->nn == tm->ncap) {
    tm->ncap = tm->ncap ? 2 * tm->ncap : NODES_MIN;
    WEIR_ASSERT(tm->ncap > tm->nn); /* no wrap: a list entry per live timer at most twice over */
    tm->node_key = weir_realloc(tm->node_key, (size_t)tm->ncap * sizeof *tm->node_key);
    tm->node_next = weir_realloc(tm->node_next, (size_t)tm->ncap * sizeof *tm->node_next);
  }
  uint32_t i = tm->nn++;
  tm->node_key[i] = key;
  tm->node_next[i] = NIL;
  return i;
}

/* Appends key to the list of ts (a new bucket if it has none). */
static void order_add(weir__timers *tm, uint64_t key, int64_t ts) {
  uint32_t slot;
  if (ts == tm->last_ts) {
    slot = tm->last_slot;
  } else {
    if (2 * (tm->bn + 1) > tm->bcap) buckets_grow(tm);
    int found;
    slot = bucket_probe(tm, ts, &found);
    if (!found) {
      tm->buckets[slot] = (weir__tbucket){ts, NIL, NIL};
      tm->bn++;
      heap_push(tm, ts);
    }
    tm->last_ts = ts;
    tm->last_slot = slot;
  }
  uint32_t node = node_new(tm, key);
  weir__tbucket *b = &tm->buckets[slot];
  if (b->head == NIL)
    b->head = node;
  else
    tm->node_next[b->tail] = node;
  b->tail = node;
}

/* The lists again from the set: dead entries gone, each timestamp's keys
 * in set order. */
static void rebuild(weir__timers *tm) {
  tm->nn = 0;
  tm->hn = 0;
  tm->bn = 0;
  for (uint32_t i = 0; i < tm->bcap; i++) tm->buckets[i].ts = WEIR__TS_NONE;
  tm->last_ts = WEIR__TS_NONE;
  for (uint64_t i = 0; i < tm->cap; i++) {
    int64_t ts = (int64_t)tm->slots[2 * i + 1];
    if (ts != WEIR__TS_NONE) order_add(tm, tm->slots[2 * i], ts);
  }
}

int weir__timers_add(weir__timers *tm, uint64_t key, int64_t ts) {
  WEIR_ASSERT(ts != WEIR__TS_NONE);
  if (!set_add(tm, key, ts)) return 0;
  /* A full node array mostly dead (timers fired or deleted): compact it
   * rather than grow it. */
  if (tm->nn == tm->ncap && !tm->firing && tm->nn > 2 * tm->n + SLACK) rebuild(tm);
  order_add(tm, key, ts);
  return 1;
}

/* ---- firing ------------------------------------------------------------------ */

#define GROUP_MAX 1024u
#define PREFETCH 16u

int weir__timers_fire(weir__timers *tm, int64_t upto, uint32_t group, weir__timers_fn fn,
                      void *arg) {
  uint64_t keys[GROUP_MAX];
  if (group == 0 || group > GROUP_MAX) group = GROUP_MAX;
  int rc = 0;
  tm->firing = 1;
  while (!rc && tm->hn && tm->heap[0] <= upto) {
    int64_t ts = tm->heap[0];
    int found;
    uint32_t cur = tm->buckets[bucket_probe(tm, ts, &found)].head, prev = NIL;
    WEIR_ASSERT(found);
    for (;;) {
      uint32_t k = 0;
      for (; cur != NIL && k < group; prev = cur, cur = tm->node_next[cur]) {
        /* A burst's list entries are adjacent: their set slots are read
         * ahead. */
        uint32_t ahead = cur + PREFETCH;
        if (ahead < tm->nn)
          __builtin_prefetch(&tm->slots[2 * set_home(tm, tm->node_key[ahead], ts)], 1, 1);
        if (weir__timers_del(tm, tm->node_key[cur], ts)) keys[k++] = tm->node_key[cur];
      }
      if (!k) break;
      rc = fn(arg, ts, keys, k);
      if (rc) break;
      /* The callback may have appended to this list: go on from the last
       * entry read. */
      if (cur == NIL && prev != NIL) cur = tm->node_next[prev];
    }
    if (rc) break;
    /* A callback may have added an earlier timestamp: this one's bucket
     * then stays until its turn comes again (its entries are dead). */
    if (tm->heap[0] == ts) {
      heap_pop(tm);
      bucket_remove(tm, ts);
    }
  }
  tm->firing = 0;
  if (!tm->n && tm->nn) rebuild(tm); /* all fired: the lists start over */
  return rc;
}

void weir__timers_each(const weir__timers *tm, weir__timers_visit_fn fn, void *arg) {
  for (uint64_t i = 0; i < tm->cap; i++) {
    int64_t ts = (int64_t)tm->slots[2 * i + 1];
    if (ts != WEIR__TS_NONE) fn(arg, tm->slots[2 * i], ts);
  }
}
