/* hist.h: histograms of durations (or any u64) with logarithmic buckets, in
 * the manner of HdrHistogram: values below 64 are exact; above, each power
 * of two is split into 64 buckets, so a quantile is within 1/64 (1.6%) of
 * the true value whatever its magnitude. Adding is an index computation and
 * an increment; a histogram is a fixed 30 KiB, merged by adding counts.
 * Not thread-safe: one writer, and merged after it stopped. */
#ifndef WEIR_BASE_HIST_H
#define WEIR_BASE_HIST_H

#include <stdint.h>

#define WEIR_HIST_SUB_BITS 6u
#define WEIR_HIST_SUB (1u << WEIR_HIST_SUB_BITS)
#define WEIR_HIST_BUCKETS ((64u - WEIR_HIST_SUB_BITS + 1u) * WEIR_HIST_SUB)

typedef struct weir_hist {
  uint64_t count; /* values added (with their weights) */
  uint64_t max;
  uint64_t n[WEIR_HIST_BUCKETS];
} weir_hist;

static inline uint32_t weir_hist_index(uint64_t v) {
  if (v < WEIR_HIST_SUB) return (uint32_t)v;
  uint32_t msb = 63u - (uint32_t)__builtin_clzll(v);
  return (msb - WEIR_HIST_SUB_BITS + 1u) * WEIR_HIST_SUB +
         (uint32_t)((v >> (msb - WEIR_HIST_SUB_BITS)) & (WEIR_HIST_SUB - 1u));
}

/* Adds value v `times` times. */
static inline void weir_hist_add(weir_hist *h, uint64_t v, uint64_t times) {
  h->n[weir_hist_index(v)] += times;
  h->count += times;
  if (v > h->max) h->max = v;
}

void weir_hist_merge(weir_hist *into, const weir_hist *from);
/* The value at quantile q (0..1): the middle of the bucket holding it, never
 * above the largest value added (which q = 1 gives exactly); 0 for an
 * empty histogram. */
uint64_t weir_hist_quantile(const weir_hist *h, double q);

#endif
