/* weir/alloc.h: the one allocation policy of weir.
 *
 * Out of memory is not an input error that a caller can handle usefully in a
 * dataflow engine (a half-built batch or state table has no sane fallback), so
 * every allocation goes through these wrappers, which abort with a message on
 * failure. One policy, written once.
 */
#ifndef WEIR_ALLOC_H
#define WEIR_ALLOC_H

#include <stddef.h>

void *weir_malloc(size_t n);
void *weir_calloc(size_t count, size_t size);
void *weir_realloc(void *p, size_t n);
char *weir_strdup(const char *s);
/* weir_malloc for a large array that is about to be filled front to back
 * (restored state): asks for huge pages where the system has them, since
 * first-touch page faults, not the copying, dominate filling fresh memory.
 * Released with weir_free(). */
void *weir_malloc_big(size_t n);
/* Cache-line aligned memory (64 bytes), released with weir_free(). */
void *weir_aligned_alloc(size_t n);
void weir_free(void *p);

#endif
