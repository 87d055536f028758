/* hash.h: the integer mixers weir routes and stores keys with.
 *
 * Two different functions on purpose: routing picks a key group from the
 * high-quality mix below, and keyed state indexes its table with Fibonacci
 * hashing. If both used the same bits, every key of one subtask would share
 * a residue and crowd one region of its table.
 */
#ifndef WEIR_HASH_H
#define WEIR_HASH_H

#include <stdint.h>

/* MurmurHash3's 64-bit finalizer: a bijection with full avalanche. */
static inline uint64_t weir__mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* The key group of a key among max_par groups (stable across versions: keyed
 * state is stored and redistributed by key group). Multiply-shift range
 * reduction of the mix's high half: uniform, and no division per record. */
static inline uint32_t weir__key_group(uint64_t key, uint32_t max_par) {
  return (uint32_t)(((weir__mix64(key) >> 32) * (uint64_t)max_par) >> 32);
}

/* The subtask (of p) that owns key group kg (of max_par): contiguous ranges,
 * so rescaling moves whole ranges. */
static inline uint32_t weir__kg_subtask(uint32_t kg, uint32_t max_par, uint32_t p) {
  return (uint32_t)(((uint64_t)kg * p) / max_par);
}

/* The id of the n-th record an operator emits while processing `parent`:
 * the mix is a bijection, so distinct (parent, operator) pairs give distinct
 * bases, and the emissions of one parent are consecutive from there. */
static inline uint64_t weir__derive_id(uint64_t parent, uint64_t salt, uint64_t n) {
  return weir__mix64(parent ^ salt) + n;
}

#endif
