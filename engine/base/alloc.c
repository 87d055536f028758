/* alloc.c: owns the out-of-memory policy (abort with a message). */
#include "weir/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
