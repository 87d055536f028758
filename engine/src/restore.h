/* restore.h: loading a checkpoint into a job's operator contexts before
 * its run (restore.c).
 */
#ifndef WEIR_RESTORE_H
#define WEIR_RESTORE_H

#include <stdatomic.h>
#include <stdint.h>

#include "weir/job.h"

/* A restore's figures that the subtasks report as they install their
 * state on their own threads (weir_job_run_info reads them). */
typedef struct weir__restore_stats {
  _Atomic uint64_t build_ns;   /* the slowest subtask's building, so far */
  _Atomic uint64_t install_ns; /* of it, after open: the slowest subtask's */
} weir__restore_stats;

/* Loads checkpoint id into the contexts of the job's frozen plan (installed
 * when the tasks open), redistributing the state of operators whose
 * parallelism or key groups changed. notified_only: only the operators that
 * hear of completed checkpoints (a finished job's restore). Returns 0 or
 * an error, with the job failed and its message set. Fills the restore's
 * figures in job->info. */
int weir__restore_load(weir_job *job, uint64_t id, int notified_only);

/* A subtask installed its restored state in install_ns, after its load
 * built part of it in stream_ns (weir__ctx_restore). Thread-safe. */
void weir__restore_note(weir__restore_stats *st, uint64_t install_ns, uint64_t stream_ns);

#endif
