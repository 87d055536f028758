/* operators/le.h: little-endian integers in byte strings, the layout the
 * built-in operators keep in their byte-string state and records (window
 * results, session lists, join buffers). Internal to operators/. */
#ifndef WEIR_OPERATORS_LE_H
#define WEIR_OPERATORS_LE_H

#include <stdint.h>

static inline void weir__le_put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t weir__le_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static inline void weir__le_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t weir__le_get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif
