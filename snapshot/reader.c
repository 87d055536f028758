/* reader.c: owns the store's view readers: threads that read the
 * copy-on-write views of queued subtask writes (their deferred fill) while
 * the writer thread is still busy with what came before.
 *
 * DESIGN
 * A checkpoint hands the store one view per keyed subtask at about the same
 * moment. Read one after another on the writer thread, they keep one core
 * busy for the whole read, and on a machine whose cores all run workers the
 * worker it displaces stalls the others too (they wait on its full
 * channels): a run of the counter lost about twice the writer's CPU share.
 * Read on other threads, the reading overlaps the writer's encoding of the
 * writes before it, and on several threads it can overlap itself. Only
 * the reading moves here: encoding and LMDB stay on the writer thread, in
 * queue order.
 *
 * Protocol (rd_mu guards the queue and every offered request's rd_filled):
 *   post:   a write with a deferred fill is queued here too (rd_offered);
 *   reader: takes the oldest one off the queue, fills it, sets rd_filled;
 *   writer: before it touches a write's snapshot, weir__readers_claim()
 *           waits for rd_filled.
 * The writer does not take a queued fill back to do it itself: it has
 * nothing else to do meanwhile, and when the workers keep every core busy
 * it is often woken before the readers, so it would read the views one
 * after another again.
 * The writer frees a request only after claiming it, so a reader never
 * holds a freed one. A reader's fill is heap work: it holds the fork guard
 * meanwhile (weir/alloc.h).
 *
 * WEIR_STORE_READERS=N sets the number of threads (default: one per online
 * core, at most 4; 0 or a single core: the writer reads every view). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_impl.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"
#include "base/log.h"

#define MAX_READERS 4

static int readers_wanted(void) {
  const char *e = getenv("WEIR_STORE_READERS");
  if (e != NULL && *e != '\0') {
    char *end;
    long n = strtol(e, &end, 10);
    if (*end == '\0' && n >= 0) return n > MAX_READERS ? MAX_READERS : (int)n;
    WEIR_LOG_W("WEIR_STORE_READERS=%s is not a number of threads; using the default", e);
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores <= 1) return 0;
  return cores > MAX_READERS ? MAX_READERS : (int)cores;
}

static void *reader_main(void *arg) {
  weir_store *s = arg;
  pthread_mutex_lock(&s->rd_mu);
  for (;;) {
    while (s->rd_head == NULL && !s->rd_stop) pthread_cond_wait(&s->rd_cv, &s->rd_mu);
    if (s->rd_head == NULL) break; /* stopping, nothing left */
    weir__req *r = s->rd_head;
    s->rd_head = r->rd_next;
    if (s->rd_head == NULL) s->rd_tail = NULL;
    pthread_mutex_unlock(&s->rd_mu);
    weir_fork_hold();
    uint64_t cpu = weir_clock_thread_cpu_ns();
    weir_subtask_snapshot_fill(&r->snap);
    cpu = weir_clock_thread_cpu_ns() - cpu;
    weir_fork_release();
    pthread_mutex_lock(&s->rd_mu);
    s->rd_cpu += cpu;
    s->rd_fills++;
    r->rd_filled = 1;
    pthread_cond_broadcast(&s->rd_done_cv);
  }
  pthread_mutex_unlock(&s->rd_mu);
  return NULL;
}

void weir__readers_start(weir_store *s) {
  int n = readers_wanted();
  s->nreaders = 0;
  s->readers = n ? weir_calloc((size_t)n, sizeof *s->readers) : NULL;
  for (int i = 0; i < n; i++) {
    if (weir_thread_start(&s->readers[s->nreaders], reader_main, s) != 0) { /* probes fork */
      /* Fewer readers only means more reading on the writer thread. */
      WEIR_LOG_W("store %s: started %d of %d view reader threads", s->path, s->nreaders, n);
      break;
    }
    s->nreaders++;
  }
}

void weir__readers_offer(weir_store *s, weir__req *r) {
  if (s->nreaders == 0 || r->type != WEIR__REQ_WRITE || r->snap.fill == NULL) return;
  pthread_mutex_lock(&s->rd_mu);
  r->rd_offered = 1;
  r->rd_filled = 0;
  r->rd_next = NULL;
  if (s->rd_tail)
    s->rd_tail->rd_next = r;
  else
    s->rd_head = r;
  s->rd_tail = r;
  pthread_cond_signal(&s->rd_cv);
  pthread_mutex_unlock(&s->rd_mu);
}

void weir__readers_claim(weir_store *s, weir__req *r) {
  if (!r->rd_offered) return;
  pthread_mutex_lock(&s->rd_mu);
  while (!r->rd_filled) pthread_cond_wait(&s->rd_done_cv, &s->rd_mu);
  r->rd_offered = 0;
  pthread_mutex_unlock(&s->rd_mu);
}

void weir__readers_stop(weir_store *s) {
  pthread_mutex_lock(&s->rd_mu);
  WEIR_ASSERT(s->rd_head == NULL); /* every write was claimed before the writer stopped */
  s->rd_stop = 1;
  pthread_cond_broadcast(&s->rd_cv);
  pthread_mutex_unlock(&s->rd_mu);
  for (int i = 0; i < s->nreaders; i++) pthread_join(s->readers[i], NULL);
  weir_free(s->readers);
  s->readers = NULL;
  s->rd_stop = 0; /* nreaders stays, for the debug line */
}
