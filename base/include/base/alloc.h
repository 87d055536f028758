/* base/alloc.h: the one allocation policy of weir.
 *
 * Out of memory is not an input error that a caller can handle usefully in a
 * dataflow engine (a half-built batch or state table has no sane fallback), so
 * every allocation goes through these wrappers, which abort with a message on
 * failure. One policy, written once.
 */
#ifndef WEIR_ALLOC_H
#define WEIR_ALLOC_H

#include <pthread.h>
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
/* Large scratch arrays made again and again (a snapshot's u64 state, once
 * per checkpoint): weir_pool_alloc hands out one that weir_pool_free gave
 * back when one is big enough, so the memory is already mapped and
 * touched; otherwise a fresh one (weir_malloc_big). The pool keeps at most
 * WEIR_POOL_KEEP arrays and 1 GiB; past that, weir_pool_free frees. A
 * checkpoint has two arrays in flight per keyed subtask until the store
 * wrote them, and the next may start before: 32 covers a job of a few keyed
 * operators on a few cores (8 made a 6-operator job on 2 cores fault in
 * four fresh arrays at every checkpoint). What it holds was in use at once
 * before (arrays far bigger than a request are not handed out for it, so
 * give or take those). Thread-safe. weir_pool_free(NULL) is a no-op. Not
 * to be mixed with weir_free. */
#define WEIR_POOL_KEEP 32
void *weir_pool_alloc(size_t n);
void weir_pool_free(void *p);
/* Cache-line aligned memory (64 bytes), released with weir_free(). */
void *weir_aligned_alloc(size_t n);
void weir_free(void *p);

/* The heap across fork(). A child forked by a threaded process that then
 * allocates (the store's checks run in one) needs the allocator's locks
 * free at the fork: glibc's malloc sees to that, AddressSanitizer's does
 * not. Threads that may be inside the allocator while another thread forks
 * (the lease's heartbeat, a store's writer, a restore's prefault threads)
 * hold this around their work, and fork() waits until none does
 * (pthread_atfork; a forked child starts with the guard free). A holder
 * must not fork. */
void weir_fork_hold(void);
void weir_fork_release(void);
/* A thread's own start-up and end allocate too (AddressSanitizer's thread
 * records, under its locks), outside any hold: a child forked meanwhile
 * hung on its first allocation. weir_thread_start returns only once the new
 * thread runs fn, so that its start-up is over before the caller may fork;
 * a thread that a fork may meet is joined before the fork, or kept alive
 * until after it. Returns 0 or pthread_create's error. */
int weir_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
