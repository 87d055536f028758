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
/* Cache-line aligned memory (64 bytes), released with weir_free(). */
void *weir_aligned_alloc(size_t n);
void weir_free(void *p);

#endif
