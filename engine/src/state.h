/* state.h: managed keyed state of one subtask.
 *
 * Two hash tables: u64 key -> u64 value (the fast path: open addressing,
 * linear probing, key and value side by side so one cache line serves a
 * probe, Fibonacci hashing of the key), and exact byte-string key -> byte
 * value (entries on the heap, the table holding hash and pointer). Both keep
 * a load factor of at most 1/2 and grow by doubling.
 *
 * Owned by the subtask's thread; no locking. Checkpoints (a later layer)
 * read the tables through weir__state_each_* on that same thread.
 */
#ifndef WEIR_STATE_H
#define WEIR_STATE_H

#include <stddef.h>
#include <stdint.h>

typedef struct weir__u64map {
  uint64_t *slots; /* 2 words per slot: key, value; key == EMPTY is free */
  uint64_t cap;    /* slots, a power of two */
  uint64_t n;      /* entries, not counting the EMPTY key */
  unsigned shift;  /* 64 - log2(cap) */
  int has_empty_key;
  uint64_t empty_key_value;
} weir__u64map;

/* A byte-string entry: hash, the routing key that created it, key, value. */
typedef struct weir__bent {
  uint64_t hash;
  uint64_t route_key;
  uint32_t klen, vlen, vcap;
  uint8_t data[]; /* klen key bytes, then vcap value bytes */
} weir__bent;

typedef struct weir__bmap {
  weir__bent **slots;
  uint64_t cap, n;
} weir__bmap;

typedef struct weir__state {
  weir__u64map u;
  weir__bmap b;
} weir__state;

#define WEIR__U64_EMPTY UINT64_MAX

void weir__state_init(weir__state *s);
void weir__state_close(weir__state *s);

/* The value slot of key, or NULL if absent. Valid until the next insert. */
uint64_t *weir__u64_find(weir__u64map *m, uint64_t key);
/* The value slot of key, inserted as 0 if absent. Valid until the next
 * insert. */
uint64_t *weir__u64_upsert_slow(weir__u64map *m, uint64_t key);
static inline uint64_t *weir__u64_upsert(weir__u64map *m, uint64_t key) {
  /* Fast path: the key is present and no growth is due. */
  if (m->slots && key != WEIR__U64_EMPTY) {
    uint64_t mask = m->cap - 1;
    for (uint64_t j = (key * 0x9e3779b97f4a7c15ULL) >> m->shift;; j = (j + 1) & mask) {
      uint64_t k = m->slots[2 * j];
      if (k == key) return &m->slots[2 * j + 1];
      if (k == WEIR__U64_EMPTY) break;
    }
  }
  return weir__u64_upsert_slow(m, key);
}
/* 1 if removed, 0 if absent. */
int weir__u64_del(weir__u64map *m, uint64_t key);

static inline void weir__u64_prefetch(const weir__u64map *m, uint64_t key) {
  if (m->slots) {
    uint64_t i = (key * 0x9e3779b97f4a7c15ULL) >> m->shift;
    __builtin_prefetch(&m->slots[2 * i], 1, 3);
  }
}

weir__bent *weir__bytes_find(weir__bmap *m, const void *k, size_t klen);
/* Inserts or overwrites; returns the entry (valid until the next insert). */
weir__bent *weir__bytes_put(weir__bmap *m, uint64_t route_key, const void *k, size_t klen,
                            const void *v, size_t vlen);
int weir__bytes_del(weir__bmap *m, const void *k, size_t klen);

static inline const uint8_t *weir__bent_key(const weir__bent *e) {
  return e->data;
}
static inline uint8_t *weir__bent_val(weir__bent *e) {
  return e->data + e->klen;
}

#endif
