/* state.c: owns the keyed-state hash tables (see state.h). The public
 * weir_state_* calls that reach them through a context live in ctx.c. */
#include "state.h"

#include <string.h>
#include <sys/mman.h>

#include "weir/alloc.h"
#include "weir/assert.h"
#include "hash.h"
#include "weir/job.h"

#define MIN_CAP 1024u

void weir__state_init(weir__state *s) {
  memset(s, 0, sizeof *s);
}

/* Tables of 2 MiB and more are mapped directly and, where the system allows,
 * backed by huge pages: a large table is probed at random, and with 4 KiB
 * pages nearly every probe also misses the TLB (measured: the counter over
 * 1M keys ran about twice as fast with huge pages here). */
#define BIG_TABLE (2u << 20)

static uint64_t *table_alloc(uint64_t bytes) {
  if (bytes < BIG_TABLE) return weir_aligned_alloc(bytes);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
  if (p == MAP_FAILED) return weir_aligned_alloc(bytes); /* aborts if truly out of memory */
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

static void table_free(uint64_t *p, uint64_t bytes) {
  if (!p) return;
  if (bytes < BIG_TABLE)
    weir_free(p);
  else
    munmap(p, bytes);
}

void weir__state_close(weir__state *s) {
  table_free(s->u.slots, s->u.cap * 16);
  for (uint64_t i = 0; i < s->b.cap; i++) weir_free(s->b.slots[i]);
  weir_free(s->b.slots);
  memset(s, 0, sizeof *s);
}

/* ---- u64 -> u64 ---------------------------------------------------------- */

static inline uint64_t u64_index(const weir__u64map *m, uint64_t key) {
  return (key * 0x9e3779b97f4a7c15ULL) >> m->shift;
}

static void u64_alloc(weir__u64map *m, uint64_t cap) {
  m->slots = table_alloc(cap * 16);
  for (uint64_t i = 0; i < cap; i++) m->slots[2 * i] = WEIR__U64_EMPTY;
  m->cap = cap;
  unsigned lg = 0;
  while ((1ULL << lg) < cap) lg++;
  m->shift = 64 - lg;
}

static void u64_grow(weir__u64map *m) {
  uint64_t *old = m->slots, oldcap = m->cap;
  u64_alloc(m, oldcap ? oldcap * 2 : MIN_CAP);
  uint64_t mask = m->cap - 1;
  for (uint64_t i = 0; i < oldcap; i++) {
    uint64_t k = old[2 * i];
    if (k == WEIR__U64_EMPTY) continue;
    uint64_t j = u64_index(m, k);
    while (m->slots[2 * j] != WEIR__U64_EMPTY) j = (j + 1) & mask;
    m->slots[2 * j] = k;
    m->slots[2 * j + 1] = old[2 * i + 1];
  }
  table_free(old, oldcap * 16);
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

uint64_t *weir__u64_upsert_slow(weir__u64map *m, uint64_t key) {
  if (key == WEIR__U64_EMPTY) {
    if (!m->has_empty_key) {
      m->has_empty_key = 1;
      m->empty_key_value = 0;
    }
    return &m->empty_key_value;
  }
  if (!m->slots || (m->n + 1) * 2 > m->cap) u64_grow(m);
  uint64_t mask = m->cap - 1;
  for (uint64_t j = u64_index(m, key);; j = (j + 1) & mask) {
    uint64_t k = m->slots[2 * j];
    if (k == key) return &m->slots[2 * j + 1];
    if (k == WEIR__U64_EMPTY) {
      m->slots[2 * j] = key;
      m->slots[2 * j + 1] = 0;
      m->n++;
      return &m->slots[2 * j + 1];
    }
  }
}

int weir__u64_del(weir__u64map *m, uint64_t key) {
  if (key == WEIR__U64_EMPTY) {
    int had = m->has_empty_key;
    m->has_empty_key = 0;
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
      m->slots[2 * hole] = m->slots[2 * i];
      m->slots[2 * hole + 1] = m->slots[2 * i + 1];
      hole = i;
    }
  }
  m->slots[2 * hole] = WEIR__U64_EMPTY;
  m->n--;
  return 1;
}

/* ---- bytes -> bytes ------------------------------------------------------ */

static void bytes_grow(weir__bmap *m) {
  weir__bent **old = m->slots;
  uint64_t oldcap = m->cap;
  m->cap = oldcap ? oldcap * 2 : MIN_CAP;
  m->slots = weir_calloc(m->cap, sizeof *m->slots);
  uint64_t mask = m->cap - 1;
  for (uint64_t i = 0; i < oldcap; i++) {
    if (!old[i]) continue;
    uint64_t j = old[i]->hash & mask;
    while (m->slots[j]) j = (j + 1) & mask;
    m->slots[j] = old[i];
  }
  weir_free(old);
}

static uint64_t bytes_slot(weir__bmap *m, uint64_t h, const void *k, size_t klen, int *found) {
  uint64_t mask = m->cap - 1;
  for (uint64_t j = h & mask;; j = (j + 1) & mask) {
    weir__bent *e = m->slots[j];
    if (!e) {
      *found = 0;
      return j;
    }
    if (e->hash == h && e->klen == klen && (klen == 0 || memcmp(e->data, k, klen) == 0)) {
      *found = 1;
      return j;
    }
  }
}

weir__bent *weir__bytes_find(weir__bmap *m, const void *k, size_t klen) {
  if (!m->slots) return NULL;
  int found;
  uint64_t j = bytes_slot(m, weir_hash_bytes(k, klen), k, klen, &found);
  return found ? m->slots[j] : NULL;
}

weir__bent *weir__bytes_put(weir__bmap *m, uint64_t route_key, const void *k, size_t klen,
                            const void *v, size_t vlen) {
  if (!m->slots || (m->n + 1) * 2 > m->cap) bytes_grow(m);
  uint64_t h = weir_hash_bytes(k, klen);
  int found;
  uint64_t j = bytes_slot(m, h, k, klen, &found);
  weir__bent *e = found ? m->slots[j] : NULL;
  if (!e || e->vcap < vlen) {
    size_t vcap = vlen < 8 ? 8 : vlen;
    weir__bent *ne = weir_realloc(e, sizeof *ne + klen + vcap);
    if (!e) {
      ne->hash = h;
      ne->klen = (uint32_t)klen;
      if (klen) memcpy(ne->data, k, klen);
      m->n++;
    }
    ne->vcap = (uint32_t)vcap;
    e = ne;
    m->slots[j] = e;
  }
  e->route_key = route_key;
  e->vlen = (uint32_t)vlen;
  if (vlen) memcpy(weir__bent_val(e), v, vlen);
  return e;
}

int weir__bytes_del(weir__bmap *m, const void *k, size_t klen) {
  if (!m->slots) return 0;
  int found;
  uint64_t mask = m->cap - 1;
  uint64_t j = bytes_slot(m, weir_hash_bytes(k, klen), k, klen, &found);
  if (!found) return 0;
  weir_free(m->slots[j]);
  uint64_t hole = j;
  for (uint64_t i = (j + 1) & mask; m->slots[i]; i = (i + 1) & mask) {
    uint64_t home = m->slots[i]->hash & mask;
    if (((i - home) & mask) >= ((i - hole) & mask)) {
      m->slots[hole] = m->slots[i];
      hole = i;
    }
  }
  m->slots[hole] = NULL;
  m->n--;
  return 1;
}
