/* wtab.h: the table of namespaced u64 state, (key, ns) -> value, of one
 * subtask (docs/event-time.md §4.2).
 *
 * DESIGN
 * Open addressing with linear probing over slots of three words (key, ns,
 * value) side by side, so that a lookup is one probe into one slot, usually
 * one cache line, and can be prefetched from (key, ns) alone: the byte-string
 * map it replaces for window state costs a slot, an entry behind a pointer
 * and an allocation per entry. The home slot is the top bits of a mix of
 * both words (window ends are multiples of the window's length, keys often
 * small integers: neither word alone spreads). Load at most 1/2, growth by
 * doubling, deletion by backward shift (no tombstones, probe chains stay
 * short under the insert/delete churn of windows).
 *
 * A free slot holds the pair (WEIR__WTAB_FREE, WEIR__WTAB_FREE) in its key
 * and ns words; only that one pair cannot live in a slot, and it is kept
 * aside (has_free_pair). A probe compares the key word first, so a real key
 * equal to the marker costs one more compare, and nothing else.
 *
 * Owned by the subtask's thread; checkpoints copy the live entries at the
 * cut (weir__wtab_copy).
 */
#ifndef WEIR_WTAB_H
#define WEIR_WTAB_H

#include <stdint.h>

#define WEIR__WTAB_FREE UINT64_MAX

typedef struct weir__wtab {
  uint64_t *slots; /* 3 words per slot: key, ns, value */
  uint64_t cap;    /* slots, a power of two (0: no table yet) */
  uint64_t n;      /* entries in slots (the pair kept aside not counted) */
  unsigned shift;  /* 64 - log2(cap) */
  int has_free_pair;
  uint64_t free_pair_value; /* the value of (FREE, FREE), if has_free_pair */
} weir__wtab;

/* The home slot of (key, ns) in a table of 2^(64 - shift) slots. */
static inline uint64_t weir__wtab_home(uint64_t key, uint64_t ns, unsigned shift) {
  uint64_t h = (key ^ (ns * 0xc2b2ae3d27d4eb4full)) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  return (h * 0xbf58476d1ce4e5b9ull) >> shift;
}

/* Frees the table; t is empty and usable again (a zeroed table needs no
 * init). */
void weir__wtab_close(weir__wtab *t);
/* The value of (key, ns), or NULL if absent. Valid until the next insert
 * or delete. */
uint64_t *weir__wtab_find(weir__wtab *t, uint64_t key, uint64_t ns);
/* The value of (key, ns), inserted as 0 if absent (*created: 1 if it was).
 * Valid until the next insert or delete. */
uint64_t *weir__wtab_upsert_slow(weir__wtab *t, uint64_t key, uint64_t ns, int *created);
static inline uint64_t *weir__wtab_upsert(weir__wtab *t, uint64_t key, uint64_t ns, int *created) {
  /* Fast path, inline (a call in a loop of lookups keeps fewer of them in
   * flight): the entry is there. The free pair, which would match a free
   * slot, takes the slow path. */
  if (t->slots && !(key == WEIR__WTAB_FREE && ns == WEIR__WTAB_FREE)) {
    uint64_t mask = t->cap - 1;
    for (uint64_t j = weir__wtab_home(key, ns, t->shift);; j = (j + 1) & mask) {
      uint64_t *s = t->slots + 3 * j;
      if (s[0] == key && s[1] == ns) {
        *created = 0;
        return s + 2;
      }
      if (s[0] == WEIR__WTAB_FREE && s[1] == WEIR__WTAB_FREE) break;
    }
  }
  return weir__wtab_upsert_slow(t, key, ns, created);
}
/* 1 if removed, 0 if absent. */
int weir__wtab_del(weir__wtab *t, uint64_t key, uint64_t ns);
/* Grows the table once so that n more entries fit without growing again. */
void weir__wtab_reserve(weir__wtab *t, uint64_t n);
/* Every entry, in no order; a nonzero return from fn stops the visit and is
 * returned. fn must not change t. */
int weir__wtab_each(const weir__wtab *t,
                    int (*fn)(void *user, uint64_t key, uint64_t ns, uint64_t value), void *user);
/* Entries, the pair kept aside included. */
static inline uint64_t weir__wtab_count(const weir__wtab *t) {
  return t->n + (uint64_t)(t->has_free_pair != 0);
}
/* Copies every entry into keys, ns and values (weir__wtab_count(t) each). */
void weir__wtab_copy(const weir__wtab *t, uint64_t *keys, uint64_t *ns, uint64_t *values);

/* A slot may straddle two cache lines (a quarter of them do): both ends
 * are fetched. always_inline: GCC 12 at -O2 otherwise drops the call (a
 * function with no effect it can see) before inlining it, and the
 * prefetches with it (bench_ns: no prefetch instruction left). */
static inline __attribute__((always_inline)) void weir__wtab_prefetch(const weir__wtab *t,
                                                                      uint64_t key, uint64_t ns) {
  if (t->slots) {
    const uint64_t *s = &t->slots[3 * weir__wtab_home(key, ns, t->shift)];
    __builtin_prefetch(s, 1, 3);
    __builtin_prefetch(s + 2, 1, 3);
  }
}

#endif
