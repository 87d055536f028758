/* savepoint.c: owns savepoints of a running job (docs/savepoints.md): the
 * request a control thread makes (weir_job_savepoint), the checkpoint that
 * takes it, writing the savepoint file when that checkpoint is durable,
 * and the answer.
 *
 * DESIGN
 * A savepoint is the next checkpoint the coordinator triggers after the
 * request (or the job's last checkpoint, for a stop with a savepoint),
 * written by the coordinator thread into a savepoint file right after it
 * completed (weir_store_export copies it out of the store in one read
 * transaction, so retention cannot take it away meanwhile). One request
 * at a time: a later one waits for its turn; the requester blocks on the
 * condition variable until it is answered. A checkpoint with an unaligned cut is no savepoint (its
 * channel state ties it to one parallelism): with alignment timeouts the
 * next checkpoint tries again; with unaligned checkpoints the request
 * fails, saying so.
 */
#include "savepoint.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator.h"
#include "graph.h"
#include "job.h"
#include "snapshot/store.h"

typedef unsigned long long ull;

void weir__sp_init(weir__savepoint *sp) {
  memset(sp, 0, sizeof *sp);
  pthread_mutex_init(&sp->mu, NULL);
  pthread_cond_init(&sp->cv, NULL);
}

void weir__sp_free(weir__savepoint *sp) {
  pthread_mutex_destroy(&sp->mu);
  pthread_cond_destroy(&sp->cv);
  weir_free(sp->path);
  sp->path = NULL;
}

/* Answers the request under sp->mu. */
static void answer(weir__savepoint *sp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void answer(weir__savepoint *sp, int status, const char *fmt, ...) {
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sp->result.error, sizeof sp->result.error, fmt, ap);
    va_end(ap);
  }
  sp->result.bytes = status ? 0 : sp->result.bytes;
  sp->state = WEIR__SP_NONE;
  sp->answered = sp->serving;
  sp->status = status;
  weir_free(sp->path);
  sp->path = NULL;
  pthread_cond_broadcast(&sp->cv);
}

int weir_job_savepoint(weir_job *job, const char *path, unsigned flags,
                       weir_savepoint_result *out) {
  weir_savepoint_result none;
  if (out == NULL) out = &none;
  memset(out, 0, sizeof *out);
  if (job == NULL) return WEIR_EINVAL;
  weir__savepoint *sp = &job->sp;
  pthread_mutex_lock(&sp->mu);
  /* One at a time, in the order asked: request `me` waits until every
   * earlier one has been answered and its answer read. */
  uint64_t me = ++sp->seq;
  while (sp->open && sp->collected != me - 1) pthread_cond_wait(&sp->cv, &sp->mu);
  int rc = 0;
  if (!sp->open)
    rc = WEIR_ESTATE, snprintf(out->error, sizeof out->error, "the job is not running");
  else if (!job->store)
    rc = WEIR_ESTATE,
    snprintf(out->error, sizeof out->error, "the job runs without a state directory");
  else if (atomic_load(&job->stopping))
    rc = WEIR_ESTATE, snprintf(out->error, sizeof out->error, "the job is stopping");
  if (rc) {
    if (sp->collected < me) sp->collected = me; /* the next one's turn */
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    return rc;
  }
  sp->serving = me;
  sp->state = WEIR__SP_ASKED;
  sp->flags = flags;
  sp->path = path && *path ? weir_strdup(path) : NULL;
  memset(&sp->result, 0, sizeof sp->result);
  pthread_mutex_unlock(&sp->mu);
  if (flags & WEIR_SAVEPOINT_STOP) {
    if (flags & WEIR_SAVEPOINT_DRAIN)
      weir_job_drain(job);
    else
      weir_job_stop(job);
  } else {
    weir__job_poke(job);
  }
  pthread_mutex_lock(&sp->mu);
  while (sp->answered < me) pthread_cond_wait(&sp->cv, &sp->mu);
  *out = sp->result;
  rc = sp->status;
  if (sp->collected < me) sp->collected = me; /* the next may overwrite the result now */
  pthread_cond_broadcast(&sp->cv);
  pthread_mutex_unlock(&sp->mu);
  return rc;
}

void weir__sp_open(weir_job *job) {
  pthread_mutex_lock(&job->sp.mu);
  job->sp.open = 1;
  pthread_mutex_unlock(&job->sp.mu);
}

void weir__sp_close(weir_job *job) {
  weir__savepoint *sp = &job->sp;
  pthread_mutex_lock(&sp->mu);
  sp->open = 0;
  pthread_cond_broadcast(&sp->cv); /* requests waiting their turn */
  if (sp->state != WEIR__SP_NONE) {
    const char *e = job->errmsg[0] ? job->errmsg : "";
    answer(sp, WEIR_ECANCELED, "the job ended before the savepoint completed%s%s", *e ? ": " : "",
           e);
  }
  pthread_mutex_unlock(&sp->mu);
}

int weir__sp_asked(weir_job *job, unsigned *flags) {
  pthread_mutex_lock(&job->sp.mu);
  int asked = job->sp.state == WEIR__SP_ASKED;
  if (asked && flags) *flags = job->sp.flags;
  pthread_mutex_unlock(&job->sp.mu);
  return asked;
}

void weir__sp_triggered(weir_job *job, uint64_t id, int final) {
  pthread_mutex_lock(&job->sp.mu);
  if (job->sp.state == WEIR__SP_ASKED && (final || !(job->sp.flags & WEIR_SAVEPOINT_STOP))) {
    job->sp.state = WEIR__SP_TAKING;
    job->sp.id = id;
    WEIR_LOG_D("checkpoint %llu takes the savepoint", (ull)id);
  }
  pthread_mutex_unlock(&job->sp.mu);
}

/* <state dir>/savepoints/<id>, the directory created. */
static int default_path(weir_job *job, uint64_t id, char *out, size_t len) {
  int n = snprintf(out, len, "%s/savepoints", job->opts.state_dir);
  if (n < 0 || (size_t)n >= len) return WEIR_EINVAL;
  if (mkdir(out, 0700) != 0 && errno != EEXIST) return -errno;
  n = snprintf(out, len, "%s/savepoints/%llu", job->opts.state_dir, (ull)id);
  return n < 0 || (size_t)n >= len ? WEIR_EINVAL : 0;
}

void weir__sp_completed(weir_job *job, const weir__ck_pending *ck) {
  weir__savepoint *sp = &job->sp;
  pthread_mutex_lock(&sp->mu);
  if (sp->state != WEIR__SP_TAKING || sp->id != ck->id) {
    pthread_mutex_unlock(&sp->mu);
    return;
  }
  if (ck->unaligned) {
    if (job->unaligned == WEIR__UNALIGNED_ALWAYS) {
      answer(sp, WEIR_ESTATE,
             "checkpoint %llu has unaligned cuts (the job runs unaligned checkpoints), and a "
             "savepoint must be aligned: take savepoints of this job with aligned checkpoints "
             "and --alignment-timeout instead",
             (ull)ck->id);
    } else {
      sp->state = WEIR__SP_ASKED; /* the alignment timed out: the next one tries */
      WEIR_LOG_I("checkpoint %llu was cut unaligned: the savepoint waits for the next one",
                 (ull)ck->id);
    }
    pthread_mutex_unlock(&sp->mu);
    return;
  }
  char *path = sp->path ? weir_strdup(sp->path) : NULL;
  pthread_mutex_unlock(&sp->mu);

  /* The file is written outside the lock: a requester may look meanwhile. */
  char where[sizeof sp->result.path];
  int rc = 0;
  if (path)
    snprintf(where, sizeof where, "%s", path);
  else
    rc = default_path(job, ck->id, where, sizeof where);
  uint64_t bytes = 0;
  char msg[768] = "";
  if (rc)
    snprintf(msg, sizeof msg, "cannot make the savepoints directory of '%s': %s",
             job->opts.state_dir, weir_strerror(rc));
  else if ((rc = weir_store_export(job->store, ck->id, where, &bytes)) != 0)
    weir_store_error(job->store, msg, sizeof msg);
  weir_free(path);

  pthread_mutex_lock(&sp->mu);
  sp->result.id = ck->id;
  sp->result.bytes = bytes;
  snprintf(sp->result.path, sizeof sp->result.path, "%s", where);
  if (rc) {
    WEIR_LOG_W("savepoint of checkpoint %llu failed: %s", (ull)ck->id, msg);
    answer(sp, rc, "%s", msg);
  } else {
    WEIR_LOG_I("savepoint: checkpoint %llu written to %s (%llu bytes)", (ull)ck->id, where,
               (ull)bytes);
    answer(sp, 0, NULL);
  }
  pthread_mutex_unlock(&sp->mu);
}

void weir__sp_aborted(weir_job *job, uint64_t id, int status, const char *why, const char *detail) {
  weir__savepoint *sp = &job->sp;
  pthread_mutex_lock(&sp->mu);
  if (sp->state == WEIR__SP_TAKING && (sp->id == id || id == 0)) {
    if (sp->flags & WEIR_SAVEPOINT_STOP) {
      sp->state = WEIR__SP_ASKED; /* the job's last checkpoint is tried again */
    } else {
      answer(sp, status ? status : WEIR_ECANCELED, "checkpoint %llu failed: %s%s%s", (ull)id,
             why ? why : "", detail && *detail ? ": " : "", detail ? detail : "");
    }
  }
  pthread_mutex_unlock(&sp->mu);
}
