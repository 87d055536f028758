/* alloc.c: owns the out-of-memory policy (abort with a message). */
#include "weir/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void oom(size_t n) {
  fprintf(stderr, "weir: out of memory (allocating %zu bytes)\n", n);
  abort();
}

void *weir_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) oom(n);
  return p;
}

void *weir_calloc(size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p) oom(count * size);
  return p;
}

void *weir_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) oom(n);
  return q;
}

void *weir_malloc_big(size_t n) {
  void *p = weir_malloc(n);
#ifdef MADV_HUGEPAGE
  /* A large malloc is a mapping of its own: advise the whole 2 MiB pages
   * inside it (a hint; failure only costs speed). */
  const uintptr_t huge = 2u << 20;
  if (n >= 2 * huge) {
    uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + n) & ~(huge - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
  }
#endif
  return p;
}

char *weir_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = weir_malloc(n);
  memcpy(d, s, n);
  return d;
}

void *weir_aligned_alloc(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, n ? n : 64) != 0) oom(n);
  return p;
}

void weir_free(void *p) {
  free(p);
}
