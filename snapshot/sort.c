/* sort.c: owns the sort of a subtask's u64 state into hash order (the
 * order its chunks store it in, weir/store.h): an insertion sort for the
 * nearly sorted snapshot of a hash table, an MSD radix sort otherwise.
 */
#include <string.h>

#include "writer_impl.h"
#include "base/alloc.h"

typedef unsigned long long ull;

/* Insertion sort that gives up once it has moved more than `budget`
 * entries (returns -1; the arrays are then a permutation of the input). */
static int insertion_sort_bounded(uint64_t *k, uint64_t *v, uint64_t n, uint64_t budget) {
  uint64_t moved = 0;
  for (uint64_t i = 1; i < n; i++) {
    uint64_t kk = k[i], vv = v[i], j = i;
    for (; j > 0 && k[j - 1] > kk; j--) {
      k[j] = k[j - 1];
      v[j] = v[j - 1];
    }
    k[j] = kk;
    v[j] = vv;
    moved += i - j;
    if (moved > budget) return -1;
  }
  return 0;
}

static void insertion_sort(uint64_t *k, uint64_t *v, uint64_t n) {
  (void)insertion_sort_bounded(k, v, n, UINT64_MAX);
}

/* MSD radix sort of (k, v) by k, using (tk, tv) as scratch: buckets by the
 * top bits of (key - min) (so dense or clustered keys split as well as
 * spread ones), at most 256 buckets per level (more scatter streams thrash
 * the TLB), recursing into each bucket; small buckets by insertion. Equal
 * keys end in one bucket whose min equals its max, which stops the
 * recursion, so the depth is bounded by the key width. */
static void msd_sort(uint64_t *k, uint64_t *v, uint64_t *tk, uint64_t *tv, uint64_t n) {
  if (n <= 64) {
    insertion_sort(k, v, n);
    return;
  }
  uint64_t lo = k[0], hi = k[0];
  for (uint64_t i = 1; i < n; i++) {
    if (k[i] < lo) lo = k[i];
    if (k[i] > hi) hi = k[i];
  }
  if (lo == hi) return;
  int bits = 64 - __builtin_clzll(hi - lo);
  int b = 63 - __builtin_clzll(n) - 5; /* about 32 keys per bucket */
  if (b < 1) b = 1;
  if (b > 8) b = 8;
  if (b > bits) b = bits;
  int shift = bits - b;
  uint64_t nb = 1ull << b, start[257] = {0}, at[256];
  for (uint64_t i = 0; i < n; i++) start[((k[i] - lo) >> shift) + 1]++;
  for (uint64_t x = 1; x <= nb; x++) start[x] += start[x - 1];
  memcpy(at, start, nb * sizeof *at);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t to = at[(k[i] - lo) >> shift]++;
    tk[to] = k[i];
    tv[to] = v[i];
  }
  memcpy(k, tk, n * sizeof *k);
  memcpy(v, tv, n * sizeof *v);
  for (uint64_t x = 0; x < nb; x++) {
    uint64_t m = start[x + 1] - start[x];
    if (m > 1) msd_sort(k + start[x], v + start[x], tk + start[x], tv + start[x], m);
  }
}

/* The multiplicative inverse of WEIR_STORE_U64_RANK mod 2^64: rank -> key. */
#define U64_UNRANK 0xf1de83e19937733dull
_Static_assert(WEIR_STORE_U64_RANK *U64_UNRANK == 1, "U64_UNRANK inverts the rank");

/* Sorts keys into hash order, values alongside. A snapshot of a hash table
 * comes nearly in that order (only the keys that linear probing displaced
 * are out of place), so an insertion sort finishes in a few passes' time;
 * an order it cannot fix cheaply goes to the radix sort. */
void weir__sort_u64(uint64_t *k, uint64_t *v, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) k[i] = weir_store_u64_rank(k[i]);
  if (insertion_sort_bounded(k, v, n, 8 * n + 4096) < 0) {
    uint64_t *tk = weir_malloc(n * sizeof *tk), *tv = weir_malloc(n * sizeof *tv);
    msd_sort(k, v, tk, tv, n);
    weir_free(tk);
    weir_free(tv);
  }
  for (uint64_t i = 0; i < n; i++) k[i] *= U64_UNRANK;
}
