/* operators/reclist.h: a list of records in one byte string, as the
 * built-in operators keep them in byte-string state (the joins' buffers,
 * full-window lists): per record its timestamp (i64), id (u64), payload
 * length (u32) and payload, little-endian. Internal to operators/. */
#ifndef WEIR_OPERATORS_RECLIST_H
#define WEIR_OPERATORS_RECLIST_H

#include <string.h>

#include "le.h"
#include "weir/job.h"

#define WEIR__RECLIST_HDR 20u

/* Bytes r takes in a list. */
static inline size_t weir__reclist_size(const weir_record *r) {
  return WEIR__RECLIST_HDR + r->len;
}

/* Writes r at p (weir__reclist_size(r) bytes). */
static inline void weir__reclist_put(uint8_t *p, const weir_record *r) {
  weir__le_put64(p, (uint64_t)r->ts);
  weir__le_put64(p + 8, r->id);
  weir__le_put32(p + 16, r->len);
  if (r->len) memcpy(p + WEIR__RECLIST_HDR, r->payload, r->len);
}

/* The record at *off of the list (len bytes), with `key`, and *off moved
 * past it; 0 at the end (or at a truncated entry). */
static inline int weir__reclist_next(const uint8_t *list, size_t len, size_t *off, uint64_t key,
                                     weir_record *o) {
  if (*off + WEIR__RECLIST_HDR > len) return 0;
  const uint8_t *e = list + *off;
  uint32_t n = weir__le_get32(e + 16);
  if (*off + WEIR__RECLIST_HDR + n > len) return 0;
  o->key = key;
  o->ts = (int64_t)weir__le_get64(e);
  o->id = weir__le_get64(e + 8);
  o->len = n;
  o->payload = n ? e + WEIR__RECLIST_HDR : NULL;
  *off += WEIR__RECLIST_HDR + n;
  return 1;
}

#endif
