/* hash.c: owns weir_hash_bytes, the stable content hash for record keys.
 *
 * The value must not change between versions or platforms: jobs use it to
 * key records by content, and those keys end up in stored state and in
 * operation ids. Bytes are read explicitly as little-endian words.
 */
#include "hash.h"

#include <string.h>

#include "weir/job.h"

/* A whole word: one load (and a byte swap on a big-endian host), where a
 * loop over the bytes cost a sixth of a window operator's time. */
static uint64_t load_le64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

static uint64_t load_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

uint64_t weir_hash_bytes(const void *data, size_t n) {
  const uint8_t *p = data;
  uint64_t h = 0x243f6a8885a308d3ULL ^ (n * 0x9e3779b97f4a7c15ULL);
  while (n >= 8) {
    h = weir__mix64(h ^ load_le64(p)) * 0x9e3779b97f4a7c15ULL;
    p += 8;
    n -= 8;
  }
  if (n) h = weir__mix64(h ^ load_le(p, n) ^ ((uint64_t)n << 56)) * 0x9e3779b97f4a7c15ULL;
  return weir__mix64(h);
}
