/* weir/cluster.h: a job's shared state in NATS for cluster mode
 * (docs/scale-out.md §3-§4): which graph the members run, who is alive,
 * who owns each task (a lease and a fencing epoch), where each task's
 * committed checkpoint is, and which tasks have finished.
 *
 * A task is named "<stage>.<task>" (task t of the stage's tasks). Two
 * key-value buckets hold the state: weir_<job>_live, whose keys expire one
 * lease after they were last written (member.<name>, lease.<task>), and
 * weir_<job>, whose keys stay (graph, epoch.<task>, ckpt.<task>,
 * done.<task>). A task's checkpoints are savepoint files cut into
 * messages of the stream WEIR_<job>_CKPT (subjects
 * weir.<job>.ckpt.<task>.<id>); ckpt.<task> names the chunks of the
 * one that counts. Every change that must not race is a compare-and-set
 * on a key's revision.
 *
 * Every call blocks on NATS (bounded by its request timeouts). Returns 0 or
 * a negative WEIR_E* code with a message in err where one is taken.
 */
#ifndef WEIR_CLUSTER_H
#define WEIR_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "weir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weir_cluster weir_cluster;

/* Connects to `servers` (nats://HOST:PORT[,HOST:PORT...]) and opens (or
 * makes, with `replicas` replicas; replicas < 0: only opens, WEIR_ENOENT if
 * the job has none) the buckets and stream of job `job` (letters, digits,
 * - and _). lease_ms: how long a member's and a lease's
 * keys live unwritten. *out is owned by the caller (weir_cluster_close). */
int weir_cluster_open(weir_cluster **out, const char *servers, const char *job, uint32_t lease_ms,
                      int replicas, char *err, size_t errlen);
void weir_cluster_close(weir_cluster *c);

/* Records the graph (its fingerprint, its stage count and the tasks of each
 * stage) if none is, else compares: WEIR_EMISMATCH with a message when
 * another graph runs. */
int weir_cluster_agree(weir_cluster *c, uint64_t fingerprint, int nstages, int tasks, char *err,
                       size_t errlen);

/* The member is alive: writes member.<name>. */
int weir_cluster_heartbeat(weir_cluster *c, const char *member);
/* The member leaves: removes member.<name> (the others see it gone at once
 * instead of a lease later). */
void weir_cluster_leave(weir_cluster *c, const char *member);
/* The live members' names (sorted), *n of them; free with
 * weir_cluster_free_names. */
int weir_cluster_members(weir_cluster *c, char ***names, int *n);
void weir_cluster_free_names(char **names, int n);

/* Claims task's lease for member: 1 and the task's new fencing epoch in
 * *epoch and the lease's revision in *rev if it was free; 0 if another
 * holds it. */
int weir_cluster_claim(weir_cluster *c, const char *task, const char *member, uint64_t *epoch,
                       uint64_t *rev);
/* Renews a held lease (compare-and-set on *rev, updated): 0, or
 * WEIR_EFENCED if it is no longer this holder's (expired and claimed, or
 * gone), or WEIR_EIO when NATS did not answer (the lease may still hold). */
int weir_cluster_renew(weir_cluster *c, const char *task, const char *member, uint64_t *rev);
/* Gives a held lease up (only if it is still at rev). */
void weir_cluster_release(weir_cluster *c, const char *task, uint64_t rev);
/* The task's lease holder into name ("" if none). */
int weir_cluster_holder(weir_cluster *c, const char *task, char *name, size_t len);

/* Marks a task finished (its input ended and its last checkpoint committed), or asks:
 * weir_cluster_done returns 1 if it is, 0 if not. */
int weir_cluster_set_done(weir_cluster *c, const char *task);
int weir_cluster_done(weir_cluster *c, const char *task);

/* The owner of task (fencing epoch `epoch`) takes its commit point over:
 * writes its epoch into ckpt.<task> (compare-and-set, so an earlier
 * owner's next commit fails) and fetches the checkpoint it names into the
 * file `path`: *id is its id, or 0 if the task has none yet (then no
 * file). WEIR_EFENCED if a later epoch took it over meanwhile. */
int weir_cluster_take(weir_cluster *c, const char *task, uint64_t epoch, const char *path,
                      uint64_t *id, char *err, size_t errlen);
/* Commits checkpoint `id` of task: publishes the savepoint file `path`
 * (`bytes` long) in chunks, then compare-and-sets ckpt.<task> to name
 * them, then purges the previous checkpoint's chunks. WEIR_EFENCED if
 * another owner took the task over since weir_cluster_take. */
int weir_cluster_commit(weir_cluster *c, const char *task, uint64_t id, const char *path,
                        uint64_t bytes, char *err, size_t errlen);

/* For `weir cluster status`: the graph recorded (1; 0 if none), and a
 * task's commit point (its epoch and checkpoint id, 0 if none). */
int weir_cluster_graph(weir_cluster *c, uint64_t *fingerprint, int *nstages, int *tasks);
int weir_cluster_committed(weir_cluster *c, const char *task, uint64_t *epoch, uint64_t *id);

/* For `weir cluster status`: the batches held on each input subject of
 * task `task` of stage `edge` (weir.<job>.e<edge>.<from>.<task>, from each
 * producing task): what the task had not applied at its last committed
 * checkpoint, since each task purges its subjects up to there. Calls fn
 * for each subject that holds any. WEIR_ENOENT: the edge has no stream
 * yet. */
int weir_cluster_edge_backlog(weir_cluster *c, int edge, int task,
                              void (*fn)(void *user, const char *subject, uint64_t msgs),
                              void *user);

/* Deletes everything job `job` keeps in NATS at `servers`: its buckets,
 * its checkpoint stream and its stage edges' streams (WEIR_<job>_E<k>).
 * For a job no member runs any more. */
int weir_cluster_delete(const char *servers, const char *job, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
