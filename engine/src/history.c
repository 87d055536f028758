/* history.c: the run's checkpoint history (history.h). A growing ring, so
 * that a short run costs a few entries and a long one a bounded amount
 * (WEIR_CHECKPOINT_HISTORY entries); the mutex is taken once per completed
 * checkpoint and by readers, never on the data path. */
#include "history.h"

#include <string.h>

#include "base/alloc.h"
#include "graph.h"

void weir__history_init(weir__history *h) {
  memset(h, 0, sizeof *h);
  pthread_mutex_init(&h->mu, NULL);
}

void weir__history_free(weir__history *h) {
  weir_free(h->ring);
  pthread_mutex_destroy(&h->mu);
}

void weir__history_add(weir__history *h, const weir_checkpoint_stat *s) {
  pthread_mutex_lock(&h->mu);
  if (h->n == h->cap && h->cap < WEIR_CHECKPOINT_HISTORY) {
    /* Not wrapped yet (n == cap): entry k is still at ring[k]. */
    h->cap = h->cap ? 2 * h->cap : 64;
    h->ring = weir_realloc(h->ring, h->cap * sizeof *h->ring);
  }
  weir_checkpoint_stat *e = &h->ring[h->n % h->cap];
  *e = *s;
  if (h->after_stop) e->flags |= WEIR_CHECKPOINT_AFTER_STOP;
  h->n++;
  pthread_mutex_unlock(&h->mu);
}

void weir__history_stop(weir__history *h) {
  pthread_mutex_lock(&h->mu);
  h->after_stop = 1;
  pthread_mutex_unlock(&h->mu);
}

size_t weir_job_checkpoint_stats(const weir_job *job, uint64_t first, weir_checkpoint_stat *out,
                                 size_t n) {
  if (!job || !out) return 0;
  weir__history *h = (weir__history *)&job->history;
  pthread_mutex_lock(&h->mu);
  uint64_t oldest = h->n > h->cap ? h->n - h->cap : 0, k = first > oldest ? first : oldest;
  size_t got = 0;
  for (; k < h->n && got < n; k++) out[got++] = h->ring[k % h->cap];
  pthread_mutex_unlock(&h->mu);
  return got;
}
