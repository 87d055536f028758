/* format.c: owns weir_format_default, the "<key> <value>" text form of a
 * record used by the text sinks, and weir_opid_key_count, the counter
 * job's content operation id.
 *
 * DESIGN. Sinks format every record, so the text form avoids printf: decimal digits
 * are produced by a small loop into a stack array and copied once.
 */
#include "weir/sinks.h"

#include <stdio.h>
#include <string.h>

/* Writes v in decimal at the end of d[20]; returns the first digit. */
static char *u64_dec(char d[20], uint64_t v) {
  char *p = d + 20;
  do {
    *--p = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return p;
}

size_t weir_format_default(const weir_record *r, char *buf, size_t cap) {
  char kd[20], vd[20];
  const char *k = u64_dec(kd, r->key);
  size_t kn = (size_t)(kd + 20 - k);
  const char *v = NULL;
  size_t vn = 0;
  if (r->len == 8) {
    v = u64_dec(vd, weir_payload_u64(r));
    vn = (size_t)(vd + 20 - v);
  } else if (r->len > 0) {
    v = r->payload;
    vn = r->len;
  }
  size_t total = kn + (r->len ? 1 + vn : 0);
  if (total >= cap) return total;
  memcpy(buf, k, kn);
  if (r->len) {
    buf[kn] = ' ';
    memcpy(buf + kn + 1, v, vn);
  }
  buf[total] = '\0';
  return total;
}

size_t weir_opid_key_count(const weir_record *r, char *buf, size_t cap) {
  int n = snprintf(buf, cap, "%llu.%llu", (unsigned long long)r->key,
                   (unsigned long long)weir_payload_u64(r));
  return n < 0 ? 0 : (size_t)n;
}
