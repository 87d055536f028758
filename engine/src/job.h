/* job.h: what job.c (running a job, its coordinator loop) gives the other
 * engine files. The public verbs are in weir/job.h.
 */
#ifndef WEIR_JOB_INTERNAL_H
#define WEIR_JOB_INTERNAL_H

#include "graph.h"

/* Wakes the coordinator loop (it then looks at the job's state: failure,
 * tasks done, stop requests, the checkpoint coordinator's next step).
 * Thread-safe, coalescing; a no-op once the loop is gone. */
void weir__job_poke(weir_job *job);

#endif
