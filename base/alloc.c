/* alloc.c: owns the out-of-memory policy (abort with a message). */
#include "base/alloc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/platform.h"

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
#if WEIR_HAVE_MADV_HUGEPAGE
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

/* Each pooled array is preceded by its capacity, in a header that keeps
 * the array 64-byte aligned. */
#define POOL_HDR 64u
#define POOL_MAX_BYTES (1ull << 30)

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static void *pool[WEIR_POOL_KEEP];
static size_t pool_bytes;

static size_t pool_cap(const void *p) {
  size_t cap;
  memcpy(&cap, (const char *)p - POOL_HDR, sizeof cap);
  return cap;
}

void *weir_pool_alloc(size_t n) {
  void *best = NULL;
  int at = -1;
  pthread_mutex_lock(&pool_mu);
  /* The smallest that fits, and not one far bigger (it would pin memory
   * that a small state does not need). */
  for (int i = 0; i < WEIR_POOL_KEEP; i++) {
    if (!pool[i]) continue;
    size_t cap = pool_cap(pool[i]);
    if (cap >= n && cap / 4 <= n && (!best || cap < pool_cap(best))) {
      best = pool[i];
      at = i;
    }
  }
  if (best) {
    pool[at] = NULL;
    pool_bytes -= pool_cap(best);
  }
  pthread_mutex_unlock(&pool_mu);
  if (best) return best;
  char *p = weir_malloc_big(POOL_HDR + n);
  memcpy(p, &n, sizeof n);
  return p + POOL_HDR;
}

void weir_pool_free(void *p) {
  if (!p) return;
  size_t cap = pool_cap(p);
  void *drop = p;
  pthread_mutex_lock(&pool_mu);
  if (pool_bytes + cap <= POOL_MAX_BYTES) {
    for (int i = 0; i < WEIR_POOL_KEEP; i++) {
      if (!pool[i]) {
        pool[i] = p;
        pool_bytes += cap;
        drop = NULL;
        break;
      }
    }
  }
  pthread_mutex_unlock(&pool_mu);
  if (drop) free((char *)drop - POOL_HDR);
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

/* Held shared by background threads at work, exclusively by fork(). */
static pthread_rwlock_t fork_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) {
  pthread_rwlock_wrlock(&fork_lock);
}

static void fork_parent(void) {
  pthread_rwlock_unlock(&fork_lock);
}

/* The child cannot unlock: its thread is not the one that locked (glibc
 * checks the writer's thread id, and takes the unlock for a reader's,
 * leaving the lock held: the child's own first fork then waited forever).
 * It has no other thread, so no holder: the lock starts afresh. */
static void fork_child(void) {
  pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
  memcpy(&fork_lock, &fresh, sizeof fresh);
}

static void fork_register(void) {
  (void)pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void weir_fork_hold(void) {
  (void)pthread_once(&fork_once, fork_register);
  pthread_rwlock_rdlock(&fork_lock);
}

void weir_fork_release(void) {
  pthread_rwlock_unlock(&fork_lock);
}

typedef struct thread_start {
  void *(*fn)(void *);
  void *arg;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int running;
} thread_start;

static void *thread_trampoline(void *p) {
  thread_start *ts = p;
  void *(*fn)(void *) = ts->fn;
  void *arg = ts->arg;
  pthread_mutex_lock(&ts->mu);
  ts->running = 1;
  pthread_cond_signal(&ts->cv);
  pthread_mutex_unlock(&ts->mu); /* ts lives on the starter's stack: not used past here */
  return fn(arg);
}

int weir_thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
  thread_start ts = {.fn = fn, .arg = arg, .running = 0};
  pthread_mutex_init(&ts.mu, NULL);
  pthread_cond_init(&ts.cv, NULL);
  int rc = pthread_create(t, NULL, thread_trampoline, &ts);
  if (rc == 0) {
    pthread_mutex_lock(&ts.mu);
    while (!ts.running) pthread_cond_wait(&ts.cv, &ts.mu);
    pthread_mutex_unlock(&ts.mu);
  }
  pthread_cond_destroy(&ts.cv);
  pthread_mutex_destroy(&ts.mu);
  return rc;
}
