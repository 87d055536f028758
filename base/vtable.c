/* base/vtable.c: copying size-prefixed callback tables (base/vtable.h). */
#include "base/vtable.h"

#include <stdio.h>
#include <string.h>

#include "weir/error.h"

int weir_vtable_copy(void *dst, size_t cap, const void *src, size_t min, char *why, size_t whylen) {
  size_t size;
  memcpy(&size, src, sizeof size);
  memset(dst, 0, cap);
  if (size == 0) {
    snprintf(why, whylen, "its callback table has no size: set .size to the sizeof of its type");
    return WEIR_EABI;
  }
  if (size < min) {
    snprintf(why, whylen,
             "its callback table is %zu bytes, less than the %zu of any weir ABI this "
             "weir runs: rebuild it against this weir's headers",
             size, min);
    return WEIR_EABI;
  }
  if (size > cap) {
    /* A newer header's table: harmless if it sets none of the callbacks
     * this weir does not know. */
    const unsigned char *extra = (const unsigned char *)src + cap;
    for (size_t i = 0; i < size - cap; i++)
      if (extra[i]) {
        snprintf(why, whylen,
                 "its callback table (%zu bytes) sets callbacks this weir does not "
                 "know (it knows %zu bytes): it was built against a newer weir",
                 size, cap);
        return WEIR_EABI;
      }
    size = cap;
  }
  memcpy(dst, src, size);
  return 0;
}
