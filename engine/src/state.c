/* state.c: owns the keyed-state hash tables (see state.h). The public
 * weir_state_* calls that reach them through a context live in ctx.c. */
#include "state.h"

#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "spin.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "base/platform.h"
#include "hash.h"
#include "weir/job.h"
#include "snapshot/store.h"

#define MIN_CAP 1024u

void weir__state_init(weir__state *s) {
  memset(s, 0, sizeof *s);
}

/* Tables of 2 MiB and more are mapped directly and, where the system allows,
 * backed by huge pages: a large table is probed at random, and with 4 KiB
 * pages nearly every probe also misses the TLB (measured: the counter over
 * 1M keys ran about twice as fast with huge pages here). */
#define BIG_TABLE (2u << 20)

uint64_t *weir__table_alloc(uint64_t bytes) {
  if (bytes < BIG_TABLE) return weir_aligned_alloc(bytes);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
  if (p == MAP_FAILED) return weir_aligned_alloc(bytes); /* aborts if truly out of memory */
#if WEIR_HAVE_MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

void weir__table_free(uint64_t *p, uint64_t bytes) {
  if (!p) return;
  if (bytes < BIG_TABLE)
    weir_free(p);
  else
    munmap(p, bytes);
}

static void cow_detach(weir__u64map *m);

void weir__state_close(weir__state *s) {
  if (s->u.cow)
    cow_detach(&s->u); /* a snapshot may still read the table: it frees it */
  else
    weir__table_free(s->u.slots, s->u.cap * 16);
  /* After the detach: dropping a finished view hands its arena to spare. */
  weir__table_free(s->u.spare, s->u.spare_cap * 16);
  weir__bytes_close(&s->b);
  weir__wtab_close(&s->ns);
  memset(s, 0, sizeof *s);
}

/* ---- copy-on-write views (see state.h) ----------------------------------- */

enum { PAGE_LIVE = 0, PAGE_READING = 1, PAGE_COPIED = WEIR__COW_FREE, PAGE_DONE = 3 };

struct weir__cow {
  _Atomic int refs;     /* the owner's and the reader's */
  _Atomic int finished; /* the reader is done with it */
  _Atomic int detached; /* the owner no longer uses `slots`: the last one frees it */
  uint64_t *slots, cap, npages;
  _Atomic uint8_t *state; /* per page */
  uint64_t *arena;        /* page p's copy at arena + 2 * p * WEIR__COW_PAGE */
  int has_empty_key;
  uint64_t empty_key_value;
};

static uint64_t page_slots(const weir__cow *c, uint64_t p) {
  uint64_t left = c->cap - p * WEIR__COW_PAGE;
  return left < WEIR__COW_PAGE ? left : WEIR__COW_PAGE;
}

static void cow_free(weir__cow *c) {
  weir__table_free(c->arena, c->cap * 16);
  if (atomic_load(&c->detached)) weir__table_free(c->slots, c->cap * 16);
  weir_free((void *)c->state);
  weir_free(c);
}

static void cow_unref(weir__cow *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) cow_free(c);
}

/* The owner lets go of its view (the table is its own again). A view its
 * reader is done with leaves its copy arena for the next one: a fresh
 * arena per snapshot costs a page fault per page the owner copies. */
static void cow_drop(weir__u64map *m) {
  weir__cow *c = m->cow;
  if (atomic_load_explicit(&c->finished, memory_order_acquire) && !m->spare) {
    m->spare = c->arena;
    m->spare_cap = c->cap;
    c->arena = NULL;
  }
  m->cow = NULL;
  m->cow_pages = NULL;
  cow_unref(c);
}

/* The owner leaves the view's table to the view (it grows or closes). */
static void cow_detach(weir__u64map *m) {
  atomic_store(&m->cow->detached, 1);
  cow_drop(m);
}

weir__cow *weir__u64_cow_begin(weir__u64map *m) {
  if (m->cow) {
    if (!atomic_load(&m->cow->finished)) return NULL;
    cow_drop(m);
  }
  weir__cow *c = weir_calloc(1, sizeof *c);
  atomic_init(&c->refs, 2);
  c->slots = m->slots;
  c->cap = m->slots ? m->cap : 0;
  c->npages = (c->cap + WEIR__COW_PAGE - 1) / WEIR__COW_PAGE;
  c->state = weir_calloc(c->npages ? c->npages : 1, 1);
  if (m->spare && m->spare_cap != c->cap) {
    weir__table_free(m->spare, m->spare_cap * 16);
    m->spare = NULL;
  }
  c->arena = m->spare ? m->spare : c->cap ? weir__table_alloc(c->cap * 16) : NULL;
  m->spare = NULL;
  c->has_empty_key = m->has_empty_key;
  c->empty_key_value = m->empty_key_value;
  m->cow = c;
  m->cow_pages = c->state;
  return c;
}

/* Before the owner writes slot j: make sure the view keeps the page as it
 * was. */
static void cow_touch(weir__u64map *m, uint64_t j) {
  weir__cow *c = m->cow;
  uint64_t p = j / WEIR__COW_PAGE;
  uint8_t st = atomic_load_explicit(&c->state[p], memory_order_acquire);
  if (st >= PAGE_COPIED) return;
  if (st == PAGE_LIVE) {
    uint64_t off = 2 * p * WEIR__COW_PAGE;
    memcpy(c->arena + off, c->slots + off, page_slots(c, p) * 16);
    m->cow_copies++;
    uint8_t live = PAGE_LIVE;
    if (atomic_compare_exchange_strong_explicit(&c->state[p], &live, PAGE_COPIED,
                                                memory_order_acq_rel, memory_order_acquire))
      return;
    /* The reader got there first (the copy is simply not used). */
  }
  while (atomic_load_explicit(&c->state[p], memory_order_acquire) == PAGE_READING)
    weir__cpu_relax();
}

/* The owner, before writing slot j of its table. */
static inline void cow_write(weir__u64map *m, uint64_t j) {
  if (!m->cow) return;
  if (atomic_load_explicit(&m->cow->finished, memory_order_acquire))
    cow_drop(m);
  else
    cow_touch(m, j);
}

/* The store keeps u64 state in hash order (store.h): the order of the
 * table's slots, give or take the keys linear probing displaced. */
_Static_assert(WEIR__U64_HASH_MUL == WEIR_STORE_U64_RANK, "tables are laid out in store order");

static inline uint64_t rank_of(uint64_t key) {
  return key * WEIR__U64_HASH_MUL;
}

/* Moves the entries from `from` on into place, so that keys[0, to) is in
 * strictly ascending hash order given that keys[0, from) was. Linear
 * probing displaces a key only forward within its cluster, so an entry
 * moves back a few places at most, and the common case is one comparison
 * against the largest rank so far. */
static void order_from(uint64_t *keys, uint64_t *values, uint64_t from, uint64_t to) {
  if (to == 0) return;
  if (from == 0) from = 1;
  uint64_t top = rank_of(keys[from - 1]);
  for (uint64_t i = from; i < to; i++) {
    uint64_t kk = keys[i], r = rank_of(kk);
    if (r > top) {
      top = r;
      continue;
    }
    uint64_t vv = values[i], j = i;
    for (; j > 0 && rank_of(keys[j - 1]) > r; j--) {
      keys[j] = keys[j - 1];
      values[j] = values[j - 1];
    }
    keys[j] = kk;
    values[j] = vv;
  }
}

/* Appends the page's entries at keys[k], values[k] (which have room for
 * one more entry than the page holds) and returns the new count. Without
 * a branch on the slot: about half the slots are empty, at random, so a
 * branch would mispredict on every other one. */
static uint64_t take_page(const uint64_t *sl, uint64_t n, uint64_t *keys, uint64_t *values,
                          uint64_t k) {
  for (uint64_t i = 0; i < n; i++) {
    keys[k] = sl[2 * i];
    values[k] = sl[2 * i + 1];
    k += sl[2 * i] != WEIR__U64_EMPTY;
  }
  return k;
}

/* Page 0, whose first cluster may hold keys that wrapped around from the
 * table's end: those go to wrapped[] (to be put last, where hash order
 * has them), the rest to keys[]. */
static uint64_t take_first_page(const uint64_t *sl, uint64_t n, unsigned shift, uint64_t *keys,
                                uint64_t *values, uint64_t k, uint64_t *wrapped, uint64_t *nw) {
  uint64_t i = 0;
  for (; i < n && sl[2 * i] != WEIR__U64_EMPTY; i++) {
    uint64_t key = sl[2 * i];
    if ((rank_of(key) >> shift) > i) {
      wrapped[2 * *nw] = key;
      wrapped[2 * (*nw)++ + 1] = sl[2 * i + 1];
    } else {
      keys[k] = key;
      values[k++] = sl[2 * i + 1];
    }
  }
  return take_page(sl + 2 * i, n - i, keys, values, k);
}

void weir__cow_read_begin(weir__cow_reader *r, weir__cow *c) {
  memset(r, 0, sizeof *r);
  r->c = c;
  /* At most cap / 2 entries (load factor), plus the EMPTY key, plus the
   * slot take_page writes past the last entry. */
  r->max = c->cap / 2 + 2;
  /* From the pool: the arrays of the previous checkpoint, already touched
   * (the caller releases them with weir_pool_free). */
  r->keys = weir_pool_alloc(r->max * sizeof *r->keys);
  r->values = weir_pool_alloc(r->max * sizeof *r->values);
  r->wrapped = c->cap ? weir_malloc(WEIR__COW_PAGE * 16) : NULL;
  r->shift = c->cap ? 64 - (unsigned)__builtin_ctzll(c->cap) : 0;
  /* The EMPTY key's rank: with the keys whose slots come before it. */
  r->empty_at = c->has_empty_key ? rank_of(WEIR__U64_EMPTY) >> r->shift : 0;
}

int weir__cow_read_some(weir__cow_reader *r, uint64_t pages) {
  weir__cow *c = r->c;
  uint64_t *ks = r->keys, *vs = r->values, k = r->n;
  for (; r->page < c->npages && pages; r->page++, pages--) {
    uint64_t p = r->page, k0 = k;
    if (c->has_empty_key && r->empty_at / WEIR__COW_PAGE == p) {
      ks[k] = WEIR__U64_EMPTY;
      vs[k++] = c->empty_key_value;
    }
    uint64_t cnt = page_slots(c, p);
    uint8_t live = PAGE_LIVE;
    const uint64_t *sl;
    int reading = atomic_compare_exchange_strong_explicit(
        &c->state[p], &live, PAGE_READING, memory_order_acq_rel, memory_order_acquire);
    /* If not, COPIED: the owner copied it (published by the acquire above). */
    sl = (reading ? c->slots : c->arena) + 2 * p * WEIR__COW_PAGE;
    if (p == 0)
      k = take_first_page(sl, cnt, r->shift, ks, vs, k, r->wrapped, &r->nw);
    else
      k = take_page(sl, cnt, ks, vs, k);
    if (reading) atomic_store_explicit(&c->state[p], PAGE_DONE, memory_order_release);
    WEIR_ASSERT(k + r->nw < r->max);
    /* While the page's entries are in the cache. */
    order_from(ks, vs, k0, k);
  }
  r->n = k;
  return r->page == c->npages;
}

void weir__cow_read_end(weir__cow_reader *r, uint64_t **keys, uint64_t **values, uint64_t *n) {
  weir__cow *c = r->c;
  uint64_t *ks = r->keys, *vs = r->values, k = r->n, k0 = k;
  WEIR_ASSERT(r->page == c->npages);
  if (c->has_empty_key && c->npages == 0) {
    ks[k] = WEIR__U64_EMPTY;
    vs[k++] = c->empty_key_value;
  }
  for (uint64_t i = 0; i < r->nw; i++) {
    ks[k] = r->wrapped[2 * i];
    vs[k++] = r->wrapped[2 * i + 1];
  }
  order_from(ks, vs, k0, k);
  weir_free(r->wrapped);
  if (!k) {
    weir_pool_free(ks);
    weir_pool_free(vs);
    ks = vs = NULL;
  }
  *keys = ks;
  *values = vs;
  *n = k;
  memset(r, 0, sizeof *r);
}

void weir__cow_read_abandon(weir__cow_reader *r) {
  weir_pool_free(r->keys);
  weir_pool_free(r->values);
  weir_free(r->wrapped);
  memset(r, 0, sizeof *r);
}

void weir__cow_extract(weir__cow *c, uint64_t **keys, uint64_t **values, uint64_t *n) {
  weir__cow_reader r;
  weir__cow_read_begin(&r, c);
  (void)weir__cow_read_some(&r, UINT64_MAX);
  weir__cow_read_end(&r, keys, values, n);
}

void weir__cow_release(weir__cow *c) {
  atomic_store(&c->finished, 1);
  cow_unref(c);
}

/* ---- u64 -> u64 ---------------------------------------------------------- */

static inline uint64_t u64_index(const weir__u64map *m, uint64_t key) {
  return (key * WEIR__U64_HASH_MUL) >> m->shift;
}

static void u64_alloc(weir__u64map *m, uint64_t cap) {
  m->slots = weir__table_alloc(cap * 16);
  for (uint64_t i = 0; i < cap; i++) m->slots[2 * i] = WEIR__U64_EMPTY;
  m->cap = cap;
  unsigned lg = 0;
  while ((1ULL << lg) < cap) lg++;
  m->shift = 64 - lg;
}

static void u64_rehash(weir__u64map *m, uint64_t newcap) {
  uint64_t *old = m->slots, oldcap = m->cap;
  /* An open view keeps the old table: the owner only reads it from here. */
  weir__cow *view = m->cow;
  m->cow = NULL;
  m->cow_pages = NULL;
  u64_alloc(m, newcap);
  uint64_t mask = m->cap - 1;
  for (uint64_t i = 0; i < oldcap; i++) {
    uint64_t k = old[2 * i];
    if (k == WEIR__U64_EMPTY) continue;
    uint64_t j = u64_index(m, k);
    while (m->slots[2 * j] != WEIR__U64_EMPTY) j = (j + 1) & mask;
    m->slots[2 * j] = k;
    m->slots[2 * j + 1] = old[2 * i + 1];
  }
  if (view) {
    atomic_store(&view->detached, 1);
    cow_unref(view); /* may free the old table, now that it is rehashed */
  } else {
    weir__table_free(old, oldcap * 16);
  }
}

static void u64_grow(weir__u64map *m) {
  u64_rehash(m, m->cap ? m->cap * 2 : MIN_CAP);
}

void weir__u64_reserve(weir__u64map *m, uint64_t n) {
  uint64_t cap = m->slots ? m->cap : MIN_CAP;
  while ((m->n + n) * 2 > cap) cap *= 2;
  if (!m->slots || cap > m->cap) u64_rehash(m, cap);
}

/* The capacity of a table for n entries (a load factor of at most 1/2). */
static uint64_t cap_for(uint64_t n) {
  uint64_t cap = MIN_CAP;
  while (n * 2 > cap) cap *= 2;
  return cap;
}

uint64_t *weir__u64_table_prefault(uint64_t n, uint64_t *bytes) {
  *bytes = 0;
  if (n == 0) return NULL;
  *bytes = cap_for(n) * 16;
  uint64_t *p = weir__table_alloc(*bytes);
  /* A write per 4 KiB page (a read would map the shared zero page): with
   * huge pages, the first of each 2 MiB faults it all in. */
  for (uint64_t off = 0; off < *bytes; off += 4096) p[off / 8] = 0;
  return p;
}

void weir__u64_table_free(uint64_t *mem, uint64_t bytes) {
  weir__table_free(mem, bytes);
}

void weir__u64_build_begin(weir__u64_build *b, weir__u64map *m, uint64_t n, uint64_t *mem,
                           uint64_t bytes) {
  WEIR_ASSERT(!m->slots && !m->cow);
  memset(b, 0, sizeof *b);
  b->m = m;
  m->keys_version = 0;
  b->ordered = 1;
  uint64_t cap = cap_for(n);
  if (mem && (n == 0 || bytes != cap * 16)) {
    weir__table_free(mem, bytes);
    mem = NULL;
  }
  if (n == 0) {
    b->ordered = 0; /* no table yet: inserts make one */
    return;
  }
  /* Not filled with EMPTY: the pass does it. Fresh pages (huge ones for a
   * big table) are zeroed by the kernel as the pass first touches them,
   * unless they were prefaulted. */
  m->slots = mem ? mem : weir__table_alloc(cap * 16);
  m->cap = cap;
  m->shift = 64 - (unsigned)__builtin_ctzll(cap);
}

/* Leaves the in-order pass: every slot not yet written becomes EMPTY. */
static void build_unordered(weir__u64_build *b) {
  weir__u64map *m = b->m;
  if (m->slots)
    for (; b->pos < m->cap; b->pos++) m->slots[2 * b->pos] = WEIR__U64_EMPTY;
  b->ordered = 0;
}

void weir__u64_build_add(weir__u64_build *b, const uint64_t *keys, const uint64_t *values,
                         uint64_t n) {
  weir__u64map *m = b->m;
  uint64_t i = 0;
  if (b->ordered) {
    /* Locals, not m's fields: stores into the table could alias them. */
    uint64_t *sl = m->slots, cap = m->cap, pos = b->pos, last = b->last, added = 0;
    unsigned shift = m->shift;
    int any = b->any;
    for (; i < n; i++) {
      uint64_t k = keys[i], h = k * WEIR__U64_HASH_MUL;
      if (any && h <= last) break; /* out of hash order (or repeated) */
      /* The last cluster ran past the table's end: the rest wraps around to
       * the free slots at its start, as inserts put them (every slot is
       * written by now; more entries than announced grow the table). */
      if (pos == cap && k != WEIR__U64_EMPTY) break;
      any = 1;
      last = h;
      if (k == WEIR__U64_EMPTY) {
        m->has_empty_key = 1;
        m->empty_key_value = values[i];
        continue;
      }
      /* The free slots before the key's home: usually a few, their number
       * unpredictable. So eight are written EMPTY without a branch (those
       * past the key are written again by the keys after it, or stay
       * free), and a loop takes the rest. */
      uint64_t home = h >> shift;
      if (pos + 8 <= cap) {
        for (int g = 0; g < 8; g++) sl[2 * (pos + g)] = WEIR__U64_EMPTY;
        for (uint64_t q = pos + 8; q < home; q++) sl[2 * q] = WEIR__U64_EMPTY;
      } else {
        for (uint64_t q = pos; q < home; q++) sl[2 * q] = WEIR__U64_EMPTY;
      }
      pos = home > pos ? home : pos;
      sl[2 * pos] = k;
      sl[2 * pos++ + 1] = values[i];
      added++;
    }
    m->n += added;
    b->pos = pos;
    b->last = last;
    b->any = any;
    if (i == n) return;
    build_unordered(b);
  }
  for (; i < n; i++) {
    if (i + 16 < n) weir__u64_prefetch(m, keys[i + 16]);
    *weir__u64_upsert_slow(m, keys[i]) = values[i];
  }
}

void weir__u64_build_end(weir__u64_build *b) {
  if (b->ordered) build_unordered(b);
}

int weir__u64_load(weir__u64map *m, const uint64_t *keys, const uint64_t *values, uint64_t n) {
  if (m->slots || m->cow || n == 0) return 0;
  weir__u64_build b;
  weir__u64_build_begin(&b, m, n, NULL, 0);
  weir__u64_build_add(&b, keys, values, n);
  weir__u64_build_end(&b);
  return 1;
}

uint64_t *weir__u64_find(weir__u64map *m, uint64_t key) {
  if (key == WEIR__U64_EMPTY) return m->has_empty_key ? &m->empty_key_value : NULL;
  if (!m->slots) return NULL;
  uint64_t mask = m->cap - 1;
  for (uint64_t j = u64_index(m, key);; j = (j + 1) & mask) {
    uint64_t k = m->slots[2 * j];
    if (k == key) return &m->slots[2 * j + 1];
    if (k == WEIR__U64_EMPTY) return NULL;
  }
}

uint64_t weir__u64_keys_version(weir__u64map *m) {
  static _Atomic uint64_t last;
  if (m->keys_version == 0) m->keys_version = atomic_fetch_add(&last, 1) + 1;
  return m->keys_version;
}

int weir__key_admitted(const weir__key_guard *g, uint64_t key) {
  uint32_t kg = weir__key_group(key, g->max_par);
  if (*g->known) return kg == weir__key_group(*g->cur_key, g->max_par);
  return weir__kg_subtask(kg, g->max_par, g->parallelism) == g->subtask;
}

uint64_t *weir__u64_upsert_slow(weir__u64map *m, uint64_t key) {
  if (key == WEIR__U64_EMPTY) {
    if (!m->has_empty_key) {
      if (m->guard && !weir__key_admitted(m->guard, key)) return NULL;
      m->has_empty_key = 1;
      m->empty_key_value = 0;
      m->keys_version = 0;
    }
    return &m->empty_key_value;
  }
  if (!m->slots || (m->n + 1) * 2 > m->cap) u64_grow(m);
  uint64_t mask = m->cap - 1;
  for (uint64_t j = u64_index(m, key);; j = (j + 1) & mask) {
    uint64_t k = m->slots[2 * j];
    if (k == key) {
      cow_write(m, j);
      return &m->slots[2 * j + 1];
    }
    if (k == WEIR__U64_EMPTY) {
      if (m->guard && !weir__key_admitted(m->guard, key)) return NULL;
      cow_write(m, j);
      m->slots[2 * j] = key;
      m->slots[2 * j + 1] = 0;
      m->n++;
      m->keys_version = 0;
      return &m->slots[2 * j + 1];
    }
  }
}

int weir__u64_del(weir__u64map *m, uint64_t key) {
  if (key == WEIR__U64_EMPTY) {
    int had = m->has_empty_key;
    m->has_empty_key = 0;
    if (had) m->keys_version = 0;
    return had;
  }
  if (!m->slots) return 0;
  uint64_t mask = m->cap - 1, j = u64_index(m, key);
  while (m->slots[2 * j] != key) {
    if (m->slots[2 * j] == WEIR__U64_EMPTY) return 0;
    j = (j + 1) & mask;
  }
  /* Backward-shift deletion keeps probe chains whole without tombstones. */
  uint64_t hole = j;
  for (uint64_t i = (j + 1) & mask; m->slots[2 * i] != WEIR__U64_EMPTY; i = (i + 1) & mask) {
    uint64_t home = u64_index(m, m->slots[2 * i]);
    /* Move i into the hole if its home is not in (hole, i]. */
    if (((i - home) & mask) >= ((i - hole) & mask)) {
      cow_write(m, hole);
      m->slots[2 * hole] = m->slots[2 * i];
      m->slots[2 * hole + 1] = m->slots[2 * i + 1];
      hole = i;
    }
  }
  cow_write(m, hole);
  m->slots[2 * hole] = WEIR__U64_EMPTY;
  m->n--;
  m->keys_version = 0;
  return 1;
}

/* ---- bytes -> bytes ------------------------------------------------------ */

/* The table's own hash of a key: never stored nor sent anywhere (routing
 * goes by the entry's route key), so it need not be weir_hash_bytes, whose
 * values are fixed forever; one multiply per word and a final mix (a
 * window's 16-byte key hashed at about a third of weir_hash_bytes' cost). */
static inline uint64_t bytes_hash(const void *k, size_t klen) {
  const uint8_t *p = k;
  uint64_t h = (uint64_t)klen * 0x9e3779b97f4a7c15ULL, w;
  for (; klen >= 8; p += 8, klen -= 8) {
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  if (klen) {
    w = 0;
    memcpy(&w, p, klen);
    h = (h ^ w ^ 0xff) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 32);
}

void weir__bytes_close(weir__bmap *m) {
  for (uint64_t i = 0; i < m->cap; i++) weir_free(m->slots[i].e);
  weir_free(m->slots);
  memset(m, 0, sizeof *m);
}

static void bytes_grow(weir__bmap *m) {
  weir__bslot *old = m->slots;
  uint64_t oldcap = m->cap;
  m->cap = oldcap ? oldcap * 2 : MIN_CAP;
  m->slots = weir_calloc(m->cap, sizeof *m->slots);
  uint64_t mask = m->cap - 1;
  for (uint64_t i = 0; i < oldcap; i++) {
    if (!old[i].e) continue;
    uint64_t j = old[i].hash & mask;
    while (m->slots[j].e) j = (j + 1) & mask;
    m->slots[j] = old[i];
  }
  weir_free(old);
}

/* The slot of key k (hash h): found, or the free one where it would go.
 * The hash beside each pointer lets a probe pass other keys' slots
 * without reading their entries (each a cache miss in a large table). */
static uint64_t bytes_slot(weir__bmap *m, uint64_t h, const void *k, size_t klen, int *found) {
  uint64_t mask = m->cap - 1;
  for (uint64_t j = h & mask;; j = (j + 1) & mask) {
    const weir__bslot *sl = &m->slots[j];
    if (!sl->e) {
      *found = 0;
      return j;
    }
    if (sl->hash == h && sl->e->klen == klen && (klen == 0 || memcmp(sl->e->data, k, klen) == 0)) {
      *found = 1;
      return j;
    }
  }
}

void weir__bytes_prefetch(const weir__bmap *m, const void *k, size_t klen, int entry) {
  if (!m->slots) return;
  uint64_t j = bytes_hash(k, klen) & (m->cap - 1);
  if (!entry) {
    __builtin_prefetch(&m->slots[j], 0, 3);
    return;
  }
  const weir__bent *e = m->slots[j].e;
  if (e) __builtin_prefetch(e, 1, 3);
}

weir__bent *weir__bytes_find(weir__bmap *m, const void *k, size_t klen) {
  if (!m->slots) return NULL;
  int found;
  uint64_t j = bytes_slot(m, bytes_hash(k, klen), k, klen, &found);
  return found ? m->slots[j].e : NULL;
}

/* The entry of k with room for vlen value bytes and vlen set (made if
 * absent; *old_len: its value's length before, -1 if it was absent). The
 * bytes past the old length are unspecified. */
static weir__bent *bytes_entry(weir__bmap *m, uint64_t route_key, const void *k, size_t klen,
                               size_t vlen, int64_t *old_len) {
  if (!m->slots || (m->n + 1) * 2 > m->cap) bytes_grow(m);
  uint64_t h = bytes_hash(k, klen);
  int found;
  uint64_t j = bytes_slot(m, h, k, klen, &found);
  weir__bent *e = found ? m->slots[j].e : NULL;
  *old_len = e ? (int64_t)e->vlen : -1;
  if (!e || e->vcap < vlen) {
    size_t vcap = vlen < 8 ? 8 : vlen;
    weir__bent *ne = weir_realloc(e, sizeof *ne + klen + vcap);
    if (!e) {
      ne->klen = (uint32_t)klen;
      if (klen) memcpy(ne->data, k, klen);
      m->n++;
    }
    ne->vcap = (uint32_t)vcap;
    e = ne;
    m->slots[j].hash = h;
    m->slots[j].e = e;
  }
  e->route_key = route_key;
  e->vlen = (uint32_t)vlen;
  return e;
}

weir__bent *weir__bytes_put(weir__bmap *m, uint64_t route_key, const void *k, size_t klen,
                            const void *v, size_t vlen) {
  int64_t old_len;
  weir__bent *e = bytes_entry(m, route_key, k, klen, vlen, &old_len);
  if (vlen) memcpy(weir__bent_val(e), v, vlen);
  return e;
}

weir__bent *weir__bytes_upsert(weir__bmap *m, uint64_t route_key, const void *k, size_t klen,
                               size_t vlen, int64_t *old_len) {
  weir__bent *e = bytes_entry(m, route_key, k, klen, vlen, old_len);
  size_t kept = *old_len < 0 ? 0 : (size_t)*old_len;
  if (kept < vlen) memset(weir__bent_val(e) + kept, 0, vlen - kept);
  return e;
}

int weir__bytes_del(weir__bmap *m, const void *k, size_t klen) {
  if (!m->slots) return 0;
  int found;
  uint64_t mask = m->cap - 1;
  uint64_t j = bytes_slot(m, bytes_hash(k, klen), k, klen, &found);
  if (!found) return 0;
  weir_free(m->slots[j].e);
  uint64_t hole = j;
  for (uint64_t i = (j + 1) & mask; m->slots[i].e; i = (i + 1) & mask) {
    uint64_t home = m->slots[i].hash & mask;
    if (((i - home) & mask) >= ((i - hole) & mask)) {
      m->slots[hole] = m->slots[i];
      hole = i;
    }
  }
  m->slots[hole].e = NULL;
  m->n--;
  return 1;
}
