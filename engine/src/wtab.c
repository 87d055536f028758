/* wtab.c: owns the table of namespaced u64 state (see wtab.h). */
#include "wtab.h"

#include <string.h>

#include "state.h"
#include "base/assert.h"

/* 256 slots of 24 bytes: 6 KiB, a table a few keys' windows fill. */
#define MIN_CAP 256u

static inline int is_free(const uint64_t *s) {
  return s[0] == WEIR__WTAB_FREE && s[1] == WEIR__WTAB_FREE;
}

void weir__wtab_close(weir__wtab *t) {
  weir__table_free(t->slots, t->cap * 24);
  memset(t, 0, sizeof *t);
}

/* A table of cap slots, all free: every byte 0xff sets both marker words
 * (the value word's contents do not matter in a free slot). */
static void wtab_alloc(weir__wtab *t, uint64_t cap) {
  t->slots = weir__table_alloc(cap * 24);
  memset(t->slots, 0xff, cap * 24);
  t->cap = cap;
  t->shift = 64 - (unsigned)__builtin_ctzll(cap);
}

static void rehash(weir__wtab *t, uint64_t newcap) {
  uint64_t *old = t->slots, oldcap = t->cap;
  wtab_alloc(t, newcap);
  uint64_t mask = newcap - 1;
  for (uint64_t i = 0; i < oldcap; i++) {
    const uint64_t *s = old + 3 * i;
    if (is_free(s)) continue;
    uint64_t j = weir__wtab_home(s[0], s[1], t->shift);
    while (!is_free(t->slots + 3 * j)) j = (j + 1) & mask;
    memcpy(t->slots + 3 * j, s, 24);
  }
  weir__table_free(old, oldcap * 24);
}

void weir__wtab_reserve(weir__wtab *t, uint64_t n) {
  uint64_t cap = t->slots ? t->cap : MIN_CAP;
  while ((t->n + n) * 2 > cap) cap *= 2;
  if (!t->slots || cap > t->cap) rehash(t, cap);
}

/* The slot of (key, ns), or of the free slot where it would go (*found 0).
 * The table exists. */
static inline uint64_t *slot_of(const weir__wtab *t, uint64_t key, uint64_t ns, int *found) {
  uint64_t mask = t->cap - 1;
  for (uint64_t j = weir__wtab_home(key, ns, t->shift);; j = (j + 1) & mask) {
    uint64_t *s = t->slots + 3 * j;
    if (s[0] == key && s[1] == ns) {
      *found = 1;
      return s;
    }
    if (s[0] == WEIR__WTAB_FREE && s[1] == WEIR__WTAB_FREE) {
      *found = 0;
      return s;
    }
  }
}

uint64_t *weir__wtab_find(weir__wtab *t, uint64_t key, uint64_t ns) {
  if (key == WEIR__WTAB_FREE && ns == WEIR__WTAB_FREE)
    return t->has_free_pair ? &t->free_pair_value : NULL;
  if (!t->slots) return NULL;
  int found;
  uint64_t *s = slot_of(t, key, ns, &found);
  return found ? s + 2 : NULL;
}

uint64_t *weir__wtab_upsert_slow(weir__wtab *t, uint64_t key, uint64_t ns, int *created) {
  if (key == WEIR__WTAB_FREE && ns == WEIR__WTAB_FREE) {
    *created = !t->has_free_pair;
    if (*created) {
      t->has_free_pair = 1;
      t->free_pair_value = 0;
    }
    return &t->free_pair_value;
  }
  int found = 0;
  uint64_t *s = t->slots ? slot_of(t, key, ns, &found) : NULL;
  *created = !found;
  if (found) return s + 2;
  if (!t->slots || (t->n + 1) * 2 > t->cap) {
    rehash(t, t->slots ? t->cap * 2 : MIN_CAP);
    s = slot_of(t, key, ns, &found);
  }
  s[0] = key;
  s[1] = ns;
  s[2] = 0;
  t->n++;
  return s + 2;
}

int weir__wtab_del(weir__wtab *t, uint64_t key, uint64_t ns) {
  if (key == WEIR__WTAB_FREE && ns == WEIR__WTAB_FREE) {
    int had = t->has_free_pair;
    t->has_free_pair = 0;
    return had;
  }
  if (!t->slots) return 0;
  int found;
  uint64_t *s = slot_of(t, key, ns, &found);
  if (!found) return 0;
  /* Backward shift: every entry after the hole in its cluster whose home
   * is not in (hole, i] moves into the hole, so no probe chain breaks. */
  uint64_t mask = t->cap - 1, hole = (uint64_t)(s - t->slots) / 3;
  for (uint64_t i = (hole + 1) & mask; !is_free(t->slots + 3 * i); i = (i + 1) & mask) {
    const uint64_t *e = t->slots + 3 * i;
    uint64_t home = weir__wtab_home(e[0], e[1], t->shift);
    if (((i - home) & mask) >= ((i - hole) & mask)) {
      memcpy(t->slots + 3 * hole, e, 24);
      hole = i;
    }
  }
  t->slots[3 * hole] = t->slots[3 * hole + 1] = WEIR__WTAB_FREE;
  t->n--;
  return 1;
}

int weir__wtab_each(const weir__wtab *t,
                    int (*fn)(void *user, uint64_t key, uint64_t ns, uint64_t value), void *user) {
  if (t->has_free_pair) {
    int rc = fn(user, WEIR__WTAB_FREE, WEIR__WTAB_FREE, t->free_pair_value);
    if (rc) return rc;
  }
  for (uint64_t i = 0; i < t->cap; i++) {
    const uint64_t *s = t->slots + 3 * i;
    if (is_free(s)) continue;
    int rc = fn(user, s[0], s[1], s[2]);
    if (rc) return rc;
  }
  return 0;
}

void weir__wtab_copy(const weir__wtab *t, uint64_t *keys, uint64_t *ns, uint64_t *values) {
  uint64_t k = 0;
  if (t->has_free_pair) {
    keys[k] = ns[k] = WEIR__WTAB_FREE;
    values[k++] = t->free_pair_value;
  }
  for (uint64_t i = 0; i < t->cap; i++) {
    const uint64_t *s = t->slots + 3 * i;
    if (is_free(s)) continue;
    keys[k] = s[0];
    ns[k] = s[1];
    values[k++] = s[2];
  }
  WEIR_ASSERT(k == weir__wtab_count(t));
}
