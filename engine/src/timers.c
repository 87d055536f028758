/* timers.c: owns the timer buckets, their key sets and the heap of their
 * timestamps (see timers.h and docs/event-time.md §5.3). */
#include "timers.h"

#include <string.h>

#include "base/alloc.h"
#include "base/assert.h"
#include "state.h"

#define MUL 0x9e3779b97f4a7c15ull
#define BUCKETS_MIN 16u
#define TABLE_MIN 8u
#define GROUP_MAX 1024u

/* ---- a bucket's keys --------------------------------------------------------- */

static inline uint64_t *tab(const weir__tbucket *b) {
  return (uint64_t *)(uintptr_t)b->a;
}

static inline uint64_t key_home(uint64_t key, uint32_t cap) {
  return (key * MUL) >> (64 - __builtin_ctz(cap));
}

static uint64_t *tab_new(uint32_t cap) {
  uint64_t *t = weir__table_alloc((uint64_t)cap * 8);
  memset(t, 0xff, (size_t)cap * 8); /* every slot WEIR__TKEY_EMPTY */
  return t;
}

static void tab_put(uint64_t *t, uint32_t cap, uint64_t key) {
  uint32_t mask = cap - 1;
  uint64_t j = key_home(key, cap);
  while (t[j] != WEIR__TKEY_EMPTY) j = (j + 1) & mask;
  t[j] = key;
}

/* The bucket's keys move to a table of cap slots. */
static void bucket_resize(weir__tbucket *b, uint32_t cap) {
  uint64_t *t = tab_new(cap);
  int has_empty = 0;
  if (b->cap == 0) {
    for (uint32_t i = 0; i < b->n; i++) {
      uint64_t k = i ? b->b : b->a;
      if (k == WEIR__TKEY_EMPTY)
        has_empty = 1;
      else
        tab_put(t, cap, k);
    }
  } else {
    uint64_t *old = tab(b);
    for (uint32_t i = 0; i < b->cap; i++)
      if (old[i] != WEIR__TKEY_EMPTY) tab_put(t, cap, old[i]);
    has_empty = b->b != 0;
    weir__table_free(old, (uint64_t)b->cap * 8);
  }
  b->cap = cap;
  b->a = (uint64_t)(uintptr_t)t;
  b->b = (uint64_t)has_empty;
}

static void bucket_release(weir__tbucket *b) {
  if (b->cap) weir__table_free(tab(b), (uint64_t)b->cap * 8);
  b->cap = 0;
  b->n = 0;
}

/* The slot of key in b's table, or the free slot where it would go. */
static inline uint64_t tab_probe(const weir__tbucket *b, uint64_t key, int *found) {
  const uint64_t *t = tab(b);
  uint32_t mask = b->cap - 1;
  for (uint64_t j = key_home(key, b->cap);; j = (j + 1) & mask) {
    if (t[j] == key) {
      *found = 1;
      return j;
    }
    if (t[j] == WEIR__TKEY_EMPTY) {
      *found = 0;
      return j;
    }
  }
}

static int bucket_has(const weir__tbucket *b, uint64_t key) {
  if (b->cap == 0) return (b->n > 0 && b->a == key) || (b->n > 1 && b->b == key);
  if (key == WEIR__TKEY_EMPTY) return b->b != 0;
  int found;
  (void)tab_probe(b, key, &found);
  return found;
}

static int bucket_add(weir__tbucket *b, uint64_t key) {
  if (b->cap == 0) {
    if ((b->n > 0 && b->a == key) || (b->n > 1 && b->b == key)) return 0;
    if (b->n < 2) {
      if (b->n == 0)
        b->a = key;
      else
        b->b = key;
      b->n++;
      return 1;
    }
    bucket_resize(b, TABLE_MIN);
  }
  if (key == WEIR__TKEY_EMPTY) {
    if (b->b) return 0;
    b->b = 1;
    b->n++;
    return 1;
  }
  if (2 * (b->n + 1) > b->cap) bucket_resize(b, 2 * b->cap);
  int found;
  uint64_t j = tab_probe(b, key, &found);
  if (found) return 0;
  tab(b)[j] = key;
  b->n++;
  return 1;
}

static int bucket_del(weir__tbucket *b, uint64_t key) {
  if (b->cap == 0) {
    if (b->n > 1 && b->b == key) {
      b->n--;
      return 1;
    }
    if (b->n > 0 && b->a == key) {
      b->a = b->b;
      b->n--;
      return 1;
    }
    return 0;
  }
  if (key == WEIR__TKEY_EMPTY) {
    if (!b->b) return 0;
    b->b = 0;
    b->n--;
    return 1;
  }
  int found;
  uint64_t i = tab_probe(b, key, &found);
  if (!found) return 0;
  /* Linear probing without tombstones: the keys after a removed one move
   * back where their probe would otherwise stop short of them. */
  uint64_t *t = tab(b);
  uint32_t mask = b->cap - 1;
  for (uint64_t j = (i + 1) & mask;; j = (j + 1) & mask) {
    if (t[j] == WEIR__TKEY_EMPTY) break;
    uint64_t h = key_home(t[j], b->cap);
    int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (stays) continue;
    t[i] = t[j];
    i = j;
  }
  t[i] = WEIR__TKEY_EMPTY;
  b->n--;
  return 1;
}

/* ---- the buckets and their heap ---------------------------------------------- */

void weir__timers_init(weir__timers *tm) {
  memset(tm, 0, sizeof *tm);
  tm->last_ts = WEIR__TS_NONE;
}

void weir__timers_free(weir__timers *tm) {
  for (uint32_t i = 0; i < tm->bcap; i++)
    if (tm->buckets[i].ts != WEIR__TS_NONE) bucket_release(&tm->buckets[i]);
  weir_free(tm->buckets);
  weir_free(tm->heap);
  weir__timers_init(tm);
}

static inline uint32_t bucket_home(const weir__timers *tm, int64_t ts) {
  return (uint32_t)(((uint64_t)ts * MUL) >> tm->bshift);
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
  tm->bcap = ocap ? 2 * ocap : BUCKETS_MIN;
  tm->bshift = 64u - (unsigned)__builtin_ctz(tm->bcap);
  tm->buckets = weir_malloc((size_t)tm->bcap * sizeof *tm->buckets);
  for (uint32_t i = 0; i < tm->bcap; i++) tm->buckets[i].ts = WEIR__TS_NONE;
  for (uint32_t i = 0; i < ocap; i++) {
    if (old[i].ts == WEIR__TS_NONE) continue;
    int found;
    tm->buckets[bucket_probe(tm, old[i].ts, &found)] = old[i];
  }
  weir_free(old);
  tm->last_ts = WEIR__TS_NONE; /* slots moved */
}

/* Takes the bucket of ts out of the map (into *out). */
static void bucket_take(weir__timers *tm, uint32_t i, weir__tbucket *out) {
  uint32_t mask = tm->bcap - 1;
  *out = tm->buckets[i];
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
  tm->size_hint = out->n;
  tm->last_ts = WEIR__TS_NONE; /* slots moved */
}

static void heap_push(weir__timers *tm, int64_t ts) {
  if (tm->hn == tm->hcap) {
    tm->hcap = tm->hcap ? 2 * tm->hcap : BUCKETS_MIN;
    tm->heap = weir_realloc(tm->heap, (size_t)tm->hcap * sizeof *tm->heap);
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

/* The bucket of ts, made if it has none (create) or NULL. */
static weir__tbucket *bucket_of(weir__timers *tm, int64_t ts, int create) {
  if (ts == tm->last_ts) return &tm->buckets[tm->last_slot];
  if (!tm->bcap) {
    if (!create) return NULL;
    buckets_grow(tm);
  }
  int found;
  uint32_t slot = bucket_probe(tm, ts, &found);
  if (!found) {
    if (!create) return NULL;
    if (2 * (tm->bn + 1) > tm->bcap) {
      buckets_grow(tm);
      slot = bucket_probe(tm, ts, &found);
    }
    tm->buckets[slot] = (weir__tbucket){.ts = ts};
    if (tm->size_hint > TABLE_MIN && tm->size_hint < (1u << 30)) { /* at once, not doubling */
      uint32_t cap = TABLE_MIN;
      while (cap < 2 * tm->size_hint) cap *= 2;
      bucket_resize(&tm->buckets[slot], cap);
      tm->size_hint = 0;
    }
    tm->bn++;
    heap_push(tm, ts);
  }
  tm->last_ts = ts;
  tm->last_slot = slot;
  return &tm->buckets[slot];
}

int weir__timers_add(weir__timers *tm, uint64_t key, int64_t ts) {
  WEIR_ASSERT(ts != WEIR__TS_NONE);
  int added = bucket_add(bucket_of(tm, ts, 1), key);
  tm->n += (uint64_t)added;
  return added;
}

int weir__timers_del(weir__timers *tm, uint64_t key, int64_t ts) {
  weir__tbucket *b = tm->n ? bucket_of(tm, ts, 0) : NULL;
  if (!b || !bucket_del(b, key)) return 0;
  tm->n--;
  return 1;
}

void weir__timers_prefetch(const weir__timers *tm, uint64_t key, int64_t ts) {
  if (ts != tm->last_ts || ts == WEIR__TS_NONE) return;
  const weir__tbucket *b = &tm->buckets[tm->last_slot];
  if (b->cap) __builtin_prefetch(&tab(b)[key_home(key, b->cap)], 1, 3);
}

int weir__timers_has(const weir__timers *tm, uint64_t key, int64_t ts) {
  if (!tm->bn) return 0;
  int found;
  uint32_t slot = bucket_probe(tm, ts, &found);
  return found && bucket_has(&tm->buckets[slot], key);
}

/* ---- firing ------------------------------------------------------------------- */

/* Hands the keys of b (out of the map) to fn in groups. */
static int fire_bucket(const weir__tbucket *b, uint32_t group, weir__timers_fn fn, void *arg) {
  uint64_t keys[GROUP_MAX];
  uint32_t k = 0;
  int rc = 0;
  if (b->cap == 0) {
    keys[0] = b->a;
    keys[1] = b->b;
    return b->n ? fn(arg, b->ts, keys, b->n) : 0;
  }
  const uint64_t *t = tab(b);
  if (b->b) keys[k++] = WEIR__TKEY_EMPTY;
  for (uint32_t i = 0; i < b->cap && !rc; i++) {
    if (t[i] == WEIR__TKEY_EMPTY) continue;
    keys[k++] = t[i];
    if (k == group) {
      rc = fn(arg, b->ts, keys, k);
      k = 0;
    }
  }
  if (!rc && k) rc = fn(arg, b->ts, keys, k);
  return rc;
}

int weir__timers_fire(weir__timers *tm, int64_t upto, uint32_t group, weir__timers_fn fn,
                      void *arg) {
  if (group == 0 || group > GROUP_MAX) group = GROUP_MAX;
  int rc = 0;
  while (!rc && tm->hn && tm->heap[0] <= upto) {
    int64_t ts = tm->heap[0];
    heap_pop(tm);
    int found;
    uint32_t slot = bucket_probe(tm, ts, &found);
    WEIR_ASSERT(found);
    /* Out of the map before any callback: what they register at ts goes
     * to a new bucket, which fires after this one. */
    weir__tbucket b;
    bucket_take(tm, slot, &b);
    tm->n -= b.n;
    rc = fire_bucket(&b, group, fn, arg);
    bucket_release(&b);
  }
  return rc;
}

void weir__timers_each(const weir__timers *tm, weir__timers_visit_fn fn, void *arg) {
  for (uint32_t i = 0; i < tm->bcap; i++) {
    const weir__tbucket *b = &tm->buckets[i];
    if (b->ts == WEIR__TS_NONE) continue;
    if (b->cap == 0) {
      if (b->n > 0) fn(arg, b->a, b->ts);
      if (b->n > 1) fn(arg, b->b, b->ts);
      continue;
    }
    if (b->b) fn(arg, WEIR__TKEY_EMPTY, b->ts);
    const uint64_t *t = tab(b);
    for (uint32_t j = 0; j < b->cap; j++)
      if (t[j] != WEIR__TKEY_EMPTY) fn(arg, t[j], b->ts);
  }
}

int64_t weir__timers_latest(const weir__timers *tm) {
  int64_t m = WEIR__TS_NONE;
  for (uint32_t i = 0; i < tm->bcap; i++)
    if (tm->buckets[i].ts > m) m = tm->buckets[i].ts;
  return m;
}
