/* savepoint.h: savepoints of a running job (savepoint.c): requests from
 * any thread, carried out by the coordinator thread (job.c).
 */
#ifndef WEIR_ENGINE_SAVEPOINT_H
#define WEIR_ENGINE_SAVEPOINT_H

#include <pthread.h>
#include <stdint.h>

#include "weir/job.h"

/* Where the one savepoint request at a time is. */
typedef enum {
  WEIR__SP_NONE = 0, /* none, or the last one answered */
  WEIR__SP_ASKED,    /* the next checkpoint triggered takes it */
  WEIR__SP_TAKING,   /* checkpoint `id` takes it */
} weir__sp_state;

typedef struct weir__savepoint {
  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t cv;  /* the requester waits for its answer */
  int open;           /* the coordinator takes requests (between open and close) */
  weir__sp_state state;
  unsigned flags;               /* WEIR_SAVEPOINT_* of the request */
  char *path;                   /* where to write it (NULL: <state dir>/savepoints/<id>) */
  uint64_t id;                  /* TAKING: the checkpoint */
  uint64_t seq;                 /* requests made (each has its number, in order) */
  uint64_t serving;             /* the request being taken (ASKED, TAKING) */
  uint64_t answered;            /* the last request answered */
  uint64_t collected;           /* requests done: answered and their answer read */
  int status;                   /* the last answer's code */
  weir_savepoint_result result; /* the last answer */
} weir__savepoint;

struct weir__ck_pending;

void weir__sp_init(weir__savepoint *sp);
void weir__sp_free(weir__savepoint *sp);

/* The coordinator thread. */
/* The run takes requests from now on (after the restore). */
void weir__sp_open(weir_job *job);
/* The run is over: a request not answered yet fails, later ones too. */
void weir__sp_close(weir_job *job);
/* A request waits for a checkpoint to be triggered: 1 (and its flags in
 * *flags), else 0. */
int weir__sp_asked(weir_job *job, unsigned *flags);
/* Checkpoint id was triggered: it takes the request that waits, if any
 * (a stop's only if it is the job's last checkpoint, `final`). */
void weir__sp_triggered(weir_job *job, uint64_t id, int final);
/* Checkpoint ck completed: if it takes the savepoint, writes the file and
 * answers. */
void weir__sp_completed(weir_job *job, const struct weir__ck_pending *ck);
/* Checkpoint id failed (why, detail): a savepoint it took fails, unless
 * it was the job's stop (its final checkpoint is tried again). */
void weir__sp_aborted(weir_job *job, uint64_t id, int status, const char *why, const char *detail);

#endif
