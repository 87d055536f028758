/* hist.c: owns the quantile arithmetic of log-bucketed histograms (hist.h). */
#include "base/hist.h"

void weir_hist_merge(weir_hist *into, const weir_hist *from) {
  for (uint32_t i = 0; i < WEIR_HIST_BUCKETS; i++) into->n[i] += from->n[i];
  into->count += from->count;
  if (from->max > into->max) into->max = from->max;
}

/* The middle of bucket i. */
static uint64_t bucket_mid(uint32_t i) {
  if (i < WEIR_HIST_SUB) return i;
  uint32_t msb = i / WEIR_HIST_SUB + WEIR_HIST_SUB_BITS - 1u, sub = i % WEIR_HIST_SUB;
  uint32_t shift = msb - WEIR_HIST_SUB_BITS;
  uint64_t lo = ((uint64_t)WEIR_HIST_SUB + sub) << shift;
  return lo + (shift ? (1ULL << shift) / 2 : 0);
}

uint64_t weir_hist_quantile(const weir_hist *h, double q) {
  if (!h->count) return 0;
  if (q >= 1) return h->max;
  if (q <= 0) q = 0;
  uint64_t want = (uint64_t)(q * (double)h->count), seen = 0;
  for (uint32_t i = 0; i < WEIR_HIST_BUCKETS; i++) {
    seen += h->n[i];
    if (seen > want) {
      uint64_t v = bucket_mid(i);
      return v < h->max ? v : h->max;
    }
  }
  return h->max;
}
