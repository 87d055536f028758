/* state.h: managed keyed state of one subtask.
 *
 * Three hash tables: namespaced u64 state in wtab.h, and two here: u64 key -> u64 value (the fast
 * path: open addressing, linear probing, key and value side by side so one cache line serves a
 * probe, Fibonacci hashing of the key), and exact byte-string key -> byte
 * value (entries on the heap, the table holding hash and pointer). Both keep
 * a load factor of at most 1/2 and grow by doubling.
 *
 * Owned by the subtask's thread; no locking, except that a checkpoint's
 * copy-on-write view of the u64 map is read by the store-writer thread (see
 * below). The byte-string map is copied by checkpoints on the owning
 * thread.
 */
#ifndef WEIR_STATE_H
#define WEIR_STATE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "wtab.h"

typedef struct weir__cow weir__cow;

/* Copy-on-write pages (see "copy-on-write snapshots" below): slots per
 * page, and the first page state in which the owner writes freely. */
#define WEIR__COW_PAGE 512u

/* The u64 tables' multiplicative hash: key k's home slot is the top bits of
 * k * WEIR__U64_HASH_MUL. */
#define WEIR__U64_HASH_MUL 0x9e3779b97f4a7c15ull
#define WEIR__COW_FREE 2u

/* What a u64 state key may be (docs/event-time.md §4.1): the key of the
 * record it belongs to, since the store keeps and a rescale moves u64
 * state by its key's key group. Checked when a key is inserted (never on
 * the fast path): while the current record is known (`*known`), the new
 * key must be in its key group; else in a key group this subtask owns. */
typedef struct weir__key_guard {
  uint32_t max_par, subtask, parallelism;
  const uint64_t *cur_key;
  const uint8_t *known;
} weir__key_guard;

typedef struct weir__u64map {
  uint64_t *slots;            /* 2 words per slot: key, value; key == EMPTY is free */
  weir__cow *cow;             /* a snapshot's copy-on-write view, or NULL */
  _Atomic uint8_t *cow_pages; /* the view's page states (NULL without one) */
  uint64_t *spare, spare_cap; /* a finished view's copy arena, for the next */
  uint64_t cap;               /* slots, a power of two */
  uint64_t n;                 /* entries, not counting the EMPTY key */
  unsigned shift;             /* 64 - log2(cap) */
  int has_empty_key;
  uint64_t empty_key_value;
  uint64_t keys_version;        /* weir__u64_keys_version; 0: keys changed since */
  uint64_t cow_copies;          /* pages the owner copied for views (owner only) */
  const weir__key_guard *guard; /* NULL: any key (tests, restore) */
} weir__u64map;

/* A byte-string entry: the routing key that created it, key, value (its
 * hash is in its slot). */
typedef struct weir__bent {
  uint64_t route_key;
  uint32_t klen, vlen, vcap;
  uint8_t data[]; /* klen key bytes, then vcap value bytes */
} weir__bent;

/* A slot: the entry (NULL: free) and its key's hash. */
typedef struct weir__bslot {
  uint64_t hash;
  weir__bent *e;
} weir__bslot;

typedef struct weir__bmap {
  weir__bslot *slots;
  uint64_t cap, n;
} weir__bmap;

/* Slot i's entry (NULL if free), for visits over i < cap. */
static inline weir__bent *weir__bytes_at(const weir__bmap *m, uint64_t i) {
  return m->slots[i].e;
}

typedef struct weir__state {
  weir__u64map u;
  weir__bmap b;
  weir__wtab ns; /* namespaced u64 state (wtab.h) */
} weir__state;

#define WEIR__U64_EMPTY UINT64_MAX

/* Memory for a hash table of `bytes` (contents unspecified): from 2 MiB on
 * mapped directly and, where the system allows, backed by huge pages (a
 * large table probed at random otherwise misses the TLB at nearly every
 * probe). Free with weir__table_free and the same size. */
uint64_t *weir__table_alloc(uint64_t bytes);
void weir__table_free(uint64_t *p, uint64_t bytes);

void weir__state_init(weir__state *s);
void weir__state_close(weir__state *s);

/* The value slot of key, or NULL if absent. Valid until the next insert. */
uint64_t *weir__u64_find(weir__u64map *m, uint64_t key);
/* The value slot of key, inserted as 0 if absent. Valid until the next
 * insert. NULL if the key is absent and the map's guard refuses it. */
uint64_t *weir__u64_upsert_slow(weir__u64map *m, uint64_t key);
/* 1 if the guard lets key in (see weir__key_guard). */
int weir__key_admitted(const weir__key_guard *g, uint64_t key);
static inline uint64_t *weir__u64_upsert(weir__u64map *m, uint64_t key) {
  /* Fast path: the key is present, no growth is due, and no open view
   * still needs the slot's page as it was (see below). */
  if (m->slots && key != WEIR__U64_EMPTY) {
    uint64_t mask = m->cap - 1;
    for (uint64_t j = (key * WEIR__U64_HASH_MUL) >> m->shift;; j = (j + 1) & mask) {
      uint64_t k = m->slots[2 * j];
      if (k == key) {
        if (m->cow_pages && atomic_load_explicit(&m->cow_pages[j / WEIR__COW_PAGE],
                                                 memory_order_acquire) < WEIR__COW_FREE)
          break;
        return &m->slots[2 * j + 1];
      }
      if (k == WEIR__U64_EMPTY) break;
    }
  }
  return weir__u64_upsert_slow(m, key);
}
/* 1 if removed, 0 if absent. */
int weir__u64_del(weir__u64map *m, uint64_t key);
/* The version of m's key set: a nonzero number, process-wide unique, that
 * stays the same while no key is inserted or deleted (values may change,
 * the table may grow). Two snapshots with the same version hold the same
 * keys, so a checkpoint may share the keys of an earlier one (store.h:
 * u64_keys_version). Owning thread. */
uint64_t weir__u64_keys_version(weir__u64map *m);
/* Grows the table once so that n more entries fit without growing again
 * (a restore: one allocation instead of a doubling per power of two). */
void weir__u64_reserve(weir__u64map *m, uint64_t n);
/* Builds a table that has none yet from n entries (weir__u64_build_*, in
 * one batch). Returns 1 if done, 0 (nothing changed) if the table exists
 * or n is 0. */
int weir__u64_load(weir__u64map *m, const uint64_t *keys, const uint64_t *values, uint64_t n);

/* Building a table that has none yet from entries that arrive in batches
 * (a restore, chunk by chunk as it reads them). Entries in hash order
 * (ascending key * WEIR__U64_HASH_MUL, as a format 2 checkpoint stores
 * them) are laid out in one pass over fresh memory, every slot written
 * once: each entry lands at its home slot or right after the entry before
 * it, the free slots between get EMPTY as the pass goes (no separate
 * initialisation pass). From the first entry out of that order on (a
 * format 1 checkpoint stores key order), the rest of the table is
 * initialised and entries are inserted, their slots prefetched ahead.
 * A key given twice keeps the later value. Between begin and end the table
 * is not usable; the builder only borrows m. */
typedef struct weir__u64_build {
  weir__u64map *m; /* borrowed */
  uint64_t pos;    /* in order: slots [0, pos) are written */
  uint64_t last;   /* in order: the hash of the last key placed */
  int ordered;     /* 0 once a key came out of hash order */
  int any;         /* a key was placed in order */
} weir__u64_build;

/* m has no table (nor view): sizes one for n entries (the table grows if
 * more come). Takes ownership of `mem` (NULL: none), memory from
 * weir__u64_table_prefault of `bytes`: the table if it has the size n
 * needs, else freed. */
void weir__u64_build_begin(weir__u64_build *b, weir__u64map *m, uint64_t n, uint64_t *mem,
                           uint64_t bytes);
void weir__u64_build_add(weir__u64_build *b, const uint64_t *keys, const uint64_t *values,
                         uint64_t n);
/* Initialises what the pass did not reach: the table is usable. */
void weir__u64_build_end(weir__u64_build *b);
/* Memory for the table of n entries (*bytes of it; NULL if n is 0) with
 * every page already faulted in: the kernel zeroes fresh pages on first
 * touch, which a build over fresh memory would otherwise wait for. Any
 * thread (a restore does it while something else runs). Contents
 * unspecified. */
uint64_t *weir__u64_table_prefault(uint64_t n, uint64_t *bytes);
/* Frees what weir__u64_table_prefault returned and no build took (NULL:
 * no-op). */
void weir__u64_table_free(uint64_t *mem, uint64_t bytes);

static inline void weir__u64_prefetch(const weir__u64map *m, uint64_t key) {
  if (m->slots) {
    uint64_t i = (key * WEIR__U64_HASH_MUL) >> m->shift;
    __builtin_prefetch(&m->slots[2 * i], 1, 3);
  }
}

/* ---- copy-on-write snapshots of the u64 map ---------------------------------
 *
 * A snapshot of the u64 map takes O(1) work on the owning thread
 * (weir__u64_cow_begin), and the store-writer thread reads the entries
 * later (weir__cow_extract), while the owner goes on writing. The table is
 * split in pages of WEIR__COW_PAGE slots, each in one of four states:
 *   LIVE   - neither side has touched it since the snapshot;
 *   READING- the writer is reading it in place (the owner waits, briefly,
 *            before writing to it);
 *   COPIED - the owner copied it before its first write; the writer reads
 *            the copy;
 *   DONE   - the writer has read it: the owner writes freely.
 * The owner moves a page LIVE -> COPIED (after copying, by compare-and-swap)
 * and the writer LIVE -> READING -> DONE, so exactly one of them decides
 * what the snapshot sees of each page, and it is the page as it was at
 * weir__u64_cow_begin. A table that grows while a view is open is left to
 * the view (the owner rehashes into a new one without touching it); the
 * view, shared by two threads, is freed by whichever lets go of it last.
 * One view at a time: while one is still being read, the next snapshot
 * copies the entries synchronously instead. */

/* Opens a view of m's u64 entries as they are now. NULL if a previous view
 * is still being read (copy instead). The owner keeps writing m. */
weir__cow *weir__u64_cow_begin(weir__u64map *m);
/* Any thread, once: the view's entries in arrays of *n (from
 * weir_pool_alloc: the caller releases them with weir_pool_free; NULL when
 * empty), in strictly ascending hash order (the store's, WEIR_STORE_U64_RANK),
 * sorted page by page as they are read. */
void weir__cow_extract(weir__cow *c, uint64_t **keys, uint64_t **values, uint64_t *n);
/* The same read in parts, so that a task reading its own view can go on
 * with its records in between: begin, then read_some (a number of pages
 * at a time) until it returns 1, then end (the arrays as from
 * weir__cow_extract), or abandon (frees them). One thread reads. */
typedef struct weir__cow_reader {
  weir__cow *c;
  uint64_t *keys, *values, *wrapped;
  uint64_t max, n, nw, page, empty_at;
  unsigned shift;
} weir__cow_reader;
void weir__cow_read_begin(weir__cow_reader *r, weir__cow *c);
int weir__cow_read_some(weir__cow_reader *r, uint64_t pages);
void weir__cow_read_end(weir__cow_reader *r, uint64_t **keys, uint64_t **values, uint64_t *n);
void weir__cow_read_abandon(weir__cow_reader *r);
/* Lets go of the view for its reader (after extracting or instead of it). */
void weir__cow_release(weir__cow *c);

weir__bent *weir__bytes_find(weir__bmap *m, const void *k, size_t klen);
/* Two-step hint for an upcoming lookup of k: the slot (a cache miss in a
 * large table), and with `entry` also the entry it points to, if the slot
 * is in cache by then (call it again a few records later). */
void weir__bytes_prefetch(const weir__bmap *m, const void *k, size_t klen, int entry);
/* Inserts or overwrites; returns the entry (valid until the next insert). */
weir__bent *weir__bytes_put(weir__bmap *m, uint64_t route_key, const void *k, size_t klen,
                            const void *v, size_t vlen);
/* The entry of k, made if absent, its value resized to vlen bytes (new
 * bytes zero); *old_len: the value's length before, -1 if it was absent. */
weir__bent *weir__bytes_upsert(weir__bmap *m, uint64_t route_key, const void *k, size_t klen,
                               size_t vlen, int64_t *old_len);
int weir__bytes_del(weir__bmap *m, const void *k, size_t klen);
/* Frees every entry and the table; m is empty and usable again (a map of
 * its own, as broadcast state is, zero-initialised, needs no init). */
void weir__bytes_close(weir__bmap *m);

static inline const uint8_t *weir__bent_key(const weir__bent *e) {
  return e->data;
}
static inline uint8_t *weir__bent_val(weir__bent *e) {
  return e->data + e->klen;
}

#endif
