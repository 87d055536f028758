/* base/vtable.h: taking in a caller's callback table whose first member is
 * its own size (weir_operator_vt, weir_source_vt, weir_sink_dest_vt).
 *
 * A job .so built against an older header has shorter tables than this
 * weir's; one built against a newer header has longer ones. The engine never
 * reads a caller's table in place: it copies it once, when the operator is
 * added, into a table of this weir's size, the callbacks past the caller's
 * size left NULL (WEIR_ABI_VERSION in weir/job.h).
 */
#ifndef WEIR_VTABLE_H
#define WEIR_VTABLE_H

#include <stddef.h>

/* Copies the table src into dst (cap bytes, this weir's size of it); min is
 * the size of the table at WEIR_ABI_MIN_VERSION. Returns 0, or WEIR_EABI
 * with why (whylen bytes) saying what is wrong: size 0 (not set), below min,
 * or above cap with a nonzero byte past cap (a callback this weir does not
 * know: a newer header). */
int weir_vtable_copy(void *dst, size_t cap, const void *src, size_t min, char *why, size_t whylen);

#endif
