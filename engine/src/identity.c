/* identity.c: owns the identity of a job in its state directory and the
 * rule that decides whether a run fits the directory: which job it is (its
 * name), what its graph is (a fingerprint), where its sinks' effects go
 * (each sink's destination, as the sink states it), and what a restore may
 * change. docs/checkpoints.md §8 describes it for users.
 *
 * DESIGN
 * The store records the job's name in its job record and the whole
 * identity in every checkpoint (snapshot/weir.proto). Before a run touches
 * anything, job.c asks here:
 *
 *   job record of another name          refused, unless --fresh
 *   checkpoint of another job's name    refused
 *   state of an operator the job lacks  refused, unless allow_non_restored_state
 *                                       (state is matched by operator name)
 *   a sink's destination changed        refused, unless allow_sink_change and
 *                                       the sink can move (weir_destination)
 *   operators gained, stateless ones    allowed (logged)
 *   gone, another parallelism
 *   no identity recorded (older store)  allowed, one warning
 *
 * Every refusal is WEIR_EMISMATCH (exit 2: a run that does not fit the
 * state directory) and names both sides and the ways out. A checkpoint of
 * another job *id* (a store that is not this directory's) stays the
 * store's own refusal (WEIR_ECORRUPT, exit 3).
 *
 * The fingerprint hashes the graph as built (operators in the order added,
 * their kinds, callback names and names, edges with their partitioning),
 * not the parallelism: it tells "the same graph" quickly and names the
 * change in the log; the rule itself looks at operator names and state,
 * so it is the same for every store, old ones included.
 */
#include "identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "task_ctx.h"

/* ---- the identity of this job -------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) {
  return fnv(h, s ? s : "", (s ? strlen(s) : 0) + 1); /* the NUL separates fields */
}

static const char *vt_name(const weir__node *n) {
  if (n->svt) return n->svt->name;
  return n->ovt ? n->ovt->name : NULL;
}

/* The graph's fingerprint: never 0, which means "not recorded". */
uint64_t weir__identity_fingerprint(const weir_job *job) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t i = 0; i < job->nnodes; i++) {
    const weir__node *n = job->nodes[i];
    uint8_t kind = (uint8_t)n->kind;
    h = fnv(h, &kind, 1);
    h = fnv_str(h, vt_name(n));
    h = fnv_str(h, n->name);
  }
  for (uint32_t i = 0; i < job->nedges; i++) {
    const weir__edge *e = job->edges[i];
    uint8_t x[2] = {(uint8_t)e->part, (uint8_t)(e->back != 0)};
    h = fnv_str(h, e->from->name);
    h = fnv_str(h, e->to->name);
    h = fnv(h, x, sizeof x);
    /* Only where it is not 0, so that one-input graphs keep their
     * fingerprints: a two-input operator's inputs swapped is another job. */
    if (e->side) h = fnv(h, &e->side, 1);
  }
  return h ? h : 1;
}

int weir__identity_make(weir_job *job) {
  job->fingerprint = weir__identity_fingerprint(job);
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    if (n->kind != WEIR__NODE_SINK || !n->ovt || !n->ovt->destination || n->dest) continue;
    weir_destination *d = weir_calloc(1, sizeof *d);
    int rc = n->ovt->destination(n->arg, d);
    d->id[sizeof d->id - 1] = d->note[sizeof d->note - 1] = '\0';
    if (rc < 0 || !d->id[0]) {
      weir_free(d);
      if (rc < 0) {
        weir__job_failed(job, rc, "sink '%s': cannot tell its destination: %s", n->name,
                         weir_strerror(rc));
        return rc;
      }
      continue;
    }
    n->dest = d;
  }
  return 0;
}

static int cmp_dest(const void *a, const void *b) {
  return strcmp(((const weir_store_dest *)a)->op, ((const weir_store_dest *)b)->op);
}

int weir__identity_record(weir_job *job, weir_store *store) {
  weir_store_dest *d = weir_calloc(job->nnodes ? job->nnodes : 1, sizeof *d);
  uint32_t nd = 0;
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    if (!n->dest) continue;
    d[nd].op = n->name;
    d[nd].id = n->dest->id;
    if (strlen(d[nd].id) > WEIR_STORE_DEST_MAX) continue; /* cannot be: 1024 bytes with NUL */
    nd++;
  }
  qsort(d, nd, sizeof *d, cmp_dest);
  char name[WEIR_STORE_NAME_MAX + 1];
  snprintf(name, sizeof name, "%s", job->name ? job->name : "");
  weir_store_identity id = {.name = name,
                            .fingerprint = job->fingerprint,
                            .ndests = nd,
                            .dests = d,
                            .job_id = job->opts.job_id};
  int rc = weir_store_set_identity(store, &id);
  weir_free(d);
  if (rc) return weir__job_store_failed(job, rc, "cannot record the job's identity");
  return 0;
}

/* ---- the rule --------------------------------------------------------------- */

/* The name as the store keeps it (cut to WEIR_STORE_NAME_MAX). */
static int same_name(const weir_job *job, const char *stored) {
  const char *n = job->name ? job->name : "";
  return strncmp(n, stored, WEIR_STORE_NAME_MAX) == 0 &&
         (strlen(n) <= WEIR_STORE_NAME_MAX || strlen(stored) == WEIR_STORE_NAME_MAX);
}

static void warn_unrecorded(weir_job *job) {
  if (job->identity_warned) return;
  job->identity_warned = 1;
  WEIR_LOG_W("the state directory '%s' was written by a weir that did not record its job's "
             "name, graph and sink destinations: this run cannot check that it is the same job "
             "writing to the same destinations (it records them from now on)",
             job->opts.state_dir);
}

int weir__identity_check_job(weir_job *job, const weir_store_job *rec) {
  if (!rec->name[0]) {
    warn_unrecorded(job);
    return 0;
  }
  if (same_name(job, rec->name)) return 0;
  if (job->opts.restore == WEIR_RESTORE_FRESH) {
    WEIR_LOG_W("the state directory '%s' held job '%s' (id %s); --fresh starts job '%s' over in "
               "it, as a new instance of that id: the checkpoints of '%s' are not restored",
               job->opts.state_dir, rec->name, rec->job_id, job->name, rec->name);
    return 0;
  }
  weir__job_failed(job, WEIR_EMISMATCH,
                   "the state directory '%s' belongs to job '%s' (id %s, instance %llu, %s), not "
                   "to this job '%s': give '%s' a state directory of its own (--state-dir), or "
                   "start it over in this one with --fresh (the checkpoints of '%s' are then "
                   "not restored)",
                   job->opts.state_dir, rec->name, rec->job_id, (unsigned long long)rec->instance,
                   rec->finished ? "finished" : "unfinished", job->name, job->name, rec->name);
  return WEIR_EMISMATCH;
}

int weir__identity_has_state(const weir_store_subtask_info *st) {
  return st->u64_entries || st->bytes_entries || st->blob_len || st->npos || st->keys_ckpt;
}

/* The node named `name`, or NULL. */
static weir__node *node_named(const weir_job *job, const char *name, size_t len) {
  for (uint32_t k = 0; k < job->nnodes; k++)
    if (strlen(job->nodes[k]->name) == len && !strncmp(job->nodes[k]->name, name, len))
      return job->nodes[k];
  return NULL;
}

/* The operator a checkpoint entry belongs to: its own name, or, for a
 * task's channel state, its chain head's. */
static size_t op_len(const char *op) {
  size_t ol = strlen(op), sl = strlen(WEIR_STORE_CHANNELS_SUFFIX);
  if (ol > sl && !strcmp(op + ol - sl, WEIR_STORE_CHANNELS_SUFFIX)) return ol - sl;
  return ol;
}

/* Appends 'name' to a list of at most cap bytes, unless it is there; a
 * list that is full ends in "...". */
static void list_add(char *list, size_t cap, const char *name, size_t len) {
  char item[256];
  snprintf(item, sizeof item, "'%.*s'", (int)len, name);
  if (strstr(list, item) || strstr(list, "...")) return;
  size_t used = strlen(list);
  int k = snprintf(list + used, cap - used, "%s%s", used ? ", " : "", item);
  if (k < 0 || (size_t)k >= cap - used) {
    list[used] = '\0';
    if (used + 5 < cap) snprintf(list + used, cap - used, "%s...", used ? ", " : "");
  }
}

/* State of operators this job lacks: refused unless allowed. */
static int check_state(weir_job *job, const weir_store_ckpt_info *info) {
  char lost[512] = "", gone[512] = "";
  uint64_t lost_bytes = 0;
  for (uint32_t i = 0; i < info->nsubtasks; i++) {
    const weir_store_subtask_info *st = &info->subtasks[i];
    size_t len = op_len(st->op);
    if (node_named(job, st->op, len)) continue;
    if (weir__identity_has_state(st)) {
      list_add(lost, sizeof lost, st->op, len);
      lost_bytes += st->bytes;
    }
  }
  for (uint32_t i = 0; i < info->nsubtasks; i++) {
    const weir_store_subtask_info *st = &info->subtasks[i];
    size_t len = op_len(st->op);
    char item[256];
    snprintf(item, sizeof item, "'%.*s'", (int)len, st->op);
    if (!node_named(job, st->op, len) && !strstr(lost, item))
      list_add(gone, sizeof gone, st->op, len);
  }
  if (gone[0])
    WEIR_LOG_I("checkpoint %llu: operators without state that this job no longer has: %s",
               (unsigned long long)info->ckpt.id, gone);
  if (!lost[0]) return 0;
  if (job->opts.allow_non_restored_state) {
    WEIR_LOG_W("checkpoint %llu holds state of operators this job does not have, which is not "
               "restored (--allow-non-restored-state): %s (%llu bytes)",
               (unsigned long long)info->ckpt.id, lost, (unsigned long long)lost_bytes);
    return 0;
  }
  weir__job_failed(job, WEIR_EMISMATCH,
                   "checkpoint %llu in the state directory '%s' holds state of operators that "
                   "this job '%s' does not have: %s (%llu bytes); restoring would lose it. "
                   "Restore it with a job that has operators of those names, drop that state "
                   "with --allow-non-restored-state, or start over with --fresh",
                   (unsigned long long)info->ckpt.id, job->opts.state_dir, job->name, lost,
                   (unsigned long long)lost_bytes);
  return WEIR_EMISMATCH;
}

/* Operators this job has that the checkpoint does not: logged. */
static void note_gained(const weir_job *job, const weir_store_ckpt_info *info) {
  char gained[512] = "";
  for (uint32_t k = 0; k < job->nnodes; k++) {
    const char *name = job->nodes[k]->name;
    int found = 0;
    for (uint32_t i = 0; i < info->nsubtasks && !found; i++)
      found = op_len(info->subtasks[i].op) == strlen(name) &&
              !strncmp(info->subtasks[i].op, name, strlen(name));
    if (!found) list_add(gained, sizeof gained, name, strlen(name));
  }
  WEIR_LOG_I("checkpoint %llu was taken with another graph of job '%s' (fingerprint %016llx, "
             "now %016llx)%s%s",
             (unsigned long long)info->ckpt.id, job->name, (unsigned long long)info->fingerprint,
             (unsigned long long)job->fingerprint,
             gained[0] ? "; new operators, starting empty: " : "", gained);
}

/* A sink whose destination differs from the checkpoint's. */
static int check_dests(weir_job *job, const weir_store_ckpt_info *info) {
  for (uint32_t i = 0; i < info->ndests; i++) {
    const weir_store_dest *d = &info->dests[i];
    weir__node *n = node_named(job, d->op, strlen(d->op));
    if (!n) continue; /* gone: its state is check_state's */
    const char *now = n->dest ? n->dest->id : "";
    if (!strcmp(now, d->id)) continue;
    const char *shown = now[0] ? now : "a sink without a destination identity";
    if (!job->opts.allow_sink_change) {
      weir__job_failed(
          job, WEIR_EMISMATCH,
          "sink '%s': checkpoint %llu in the state directory '%s' was taken writing to %s, but "
          "this run writes to %s: its pending epochs belong to the first. Run it with the "
          "checkpoint's destination again, start over with --fresh or another --state-dir, or "
          "pass --allow-sink-change%s%s%s",
          n->name, (unsigned long long)info->ckpt.id, job->opts.state_dir, d->id, shown,
          n->dest && n->dest->movable ? " (" : " (which this sink refuses: ",
          n->dest && n->dest->note[0] ? n->dest->note : "it cannot move", ")");
      return WEIR_EMISMATCH;
    }
    if (!n->dest || !n->dest->movable) {
      weir__job_failed(job, WEIR_EMISMATCH,
                       "sink '%s': --allow-sink-change: cannot move from %s (checkpoint %llu) to "
                       "%s: %s. Run it with the checkpoint's destination again, or start over "
                       "with --fresh or another --state-dir",
                       n->name, d->id, (unsigned long long)info->ckpt.id, shown,
                       n->dest && n->dest->note[0] ? n->dest->note
                                                   : "it has no destination identity to move to");
      return WEIR_EMISMATCH;
    }
    WEIR_LOG_W("sink '%s' moves from %s (checkpoint %llu) to %s (--allow-sink-change): %s", n->name,
               d->id, (unsigned long long)info->ckpt.id, now, n->dest->note);
    weir_free(n->moved_from);
    n->moved_from = weir_strdup(d->id);
  }
  return 0;
}

int weir__identity_check_restore(weir_job *job, const weir_store_ckpt_info *info) {
  /* A run from a savepoint may be another version of the job, under
   * another name: its state decides (check_state names the operators). */
  if (info->job_name[0] && !job->opts.from_savepoint && !same_name(job, info->job_name)) {
    weir__job_failed(job, WEIR_EMISMATCH,
                     "checkpoint %llu in the state directory '%s' was taken by job '%s', not by "
                     "this job '%s': restore another checkpoint of '%s', give it a state "
                     "directory of its own (--state-dir), or start it over here with --fresh",
                     (unsigned long long)info->ckpt.id, job->opts.state_dir, info->job_name,
                     job->name, job->name);
    return WEIR_EMISMATCH;
  }
  if (!info->fingerprint)
    warn_unrecorded(job);
  else if (info->fingerprint != job->fingerprint)
    note_gained(job, info);
  int rc = check_state(job, info);
  if (!rc) rc = check_dests(job, info);
  return rc;
}

/* ---- for the operators ------------------------------------------------------ */

const char *weir_ctx_moved_from(const weir_ctx *ctx) {
  return ctx && ctx->node ? ctx->node->moved_from : NULL;
}
