/* batch.c: owns the memory layout of batches (see batch.h). */
#include "batch.h"

#include "base/alloc.h"

/* Initial arena: 16 bytes per record covers the common small payloads. */
#define ARENA_PER_RECORD 16u

weir__batch *weir__batch_create(uint32_t cap) {
  weir__batch *b = weir_calloc(1, sizeof *b);
  b->cap = cap;
  /* One block for the five columns, 8-byte columns first for alignment. */
  size_t cols = (size_t)cap * (3 * sizeof(uint64_t) + 2 * sizeof(uint32_t));
  uint8_t *m = weir_aligned_alloc(cols);
  b->keys = (uint64_t *)m;
  b->ts = (int64_t *)(m + (size_t)cap * 8);
  b->ids = (uint64_t *)(m + (size_t)cap * 16);
  b->off = (uint32_t *)(m + (size_t)cap * 24);
  b->lens = (uint32_t *)(m + (size_t)cap * 28);
  b->arena_cap = cap * ARENA_PER_RECORD;
  b->data = weir_malloc(b->arena_cap);
  return b;
}

void weir__batch_destroy(weir__batch *b) {
  if (!b) return;
  weir_free(b->keys);
  weir_free(b->data);
  weir_free(b);
}

void weir__batch_reset(weir__batch *b) {
  b->kind = WEIR__MSG_DATA;
  b->len = 0;
  b->used = 0;
  b->barrier_id = 0;
  b->next = NULL;
  b->tr.born = b->tr.pushed = 0;
  if (b->arena_cap > WEIR__ARENA_SOFT) {
    weir_free(b->data);
    b->arena_cap = b->cap * ARENA_PER_RECORD;
    b->data = weir_malloc(b->arena_cap);
  }
}

void weir__batch_grow(weir__batch *b, uint32_t need) {
  uint64_t want = (uint64_t)b->used + need;
  uint64_t n = b->arena_cap ? b->arena_cap : 64;
  while (n < want) n *= 2;
  if (n > UINT32_MAX) n = want;
  b->data = weir_realloc(b->data, (size_t)n);
  b->arena_cap = (uint32_t)n;
}
