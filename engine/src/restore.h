/* restore.h: loading a checkpoint into a job's operator contexts before
 * its run (restore.c).
 */
#ifndef WEIR_RESTORE_H
#define WEIR_RESTORE_H

#include <stdint.h>

#include "graph.h"

/* Loads checkpoint id into the contexts of the job's frozen plan (installed
 * when the tasks open), redistributing the state of operators whose
 * parallelism or key groups changed. notified_only: only the operators that
 * hear of completed checkpoints (a finished job's restore). Returns 0 or
 * an error, with the job failed and its message set. Fills the restore's
 * figures in job->info. */
int weir__restore_load(weir_job *job, uint64_t id, int notified_only);

#endif
