/* history.h: the checkpoints a run completed, as weir_job_checkpoint_stats
 * gives them: a ring of the latest WEIR_CHECKPOINT_HISTORY, appended to by
 * the coordinator thread and read by any thread.
 */
#ifndef WEIR_HISTORY_H
#define WEIR_HISTORY_H

#include <pthread.h>
#include <stdint.h>

#include "weir/job.h"

typedef struct weir__history {
  pthread_mutex_t mu;
  weir_checkpoint_stat *ring; /* cap entries (grows to WEIR_CHECKPOINT_HISTORY), owned */
  uint32_t cap;
  uint64_t n;     /* appended so far; entry k is ring[k % cap] */
  int after_stop; /* the stop was handled: later entries say so */
} weir__history;

void weir__history_init(weir__history *h);
void weir__history_free(weir__history *h);
/* Appends s (its WEIR_CHECKPOINT_AFTER_STOP flag set here). */
void weir__history_add(weir__history *h, const weir_checkpoint_stat *s);
/* From now on, appended checkpoints completed after the stop. */
void weir__history_stop(weir__history *h);

#endif
