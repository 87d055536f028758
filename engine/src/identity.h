/* identity.h: which job and which destinations a state directory belongs
 * to, and the one rule deciding whether a run may use it (identity.c,
 * docs/checkpoints.md §8).
 */
#ifndef WEIR_IDENTITY_H
#define WEIR_IDENTITY_H

#include "graph.h"
#include "snapshot/store.h"

/* Makes the job's identity before a run with a state directory: the graph's
 * fingerprint (job->fingerprint) and each sink's destination (node->dest),
 * asked of the operators themselves. Returns 0 or an operator's error
 * (the job failed with a message). */
int weir__identity_make(weir_job *job);

/* The graph's fingerprint as built (never 0). */
uint64_t weir__identity_fingerprint(const weir_job *job);

/* Hands the identity to the store, which records it in the job record and
 * in every checkpoint it commits. Returns 0 or the store's error. */
int weir__identity_record(weir_job *job, weir_store *store);

/* Before a run starts in a state directory whose job record is `rec`:
 * refuses (WEIR_EMISMATCH, the job failed with a message naming both jobs
 * and the way out) a job of another name, unless the run starts over
 * (WEIR_RESTORE_FRESH). A record without a name (an older store) passes,
 * with the one warning about older stores. */
int weir__identity_check_job(weir_job *job, const weir_store_job *rec);

/* Before checkpoint `info` is restored: refuses (WEIR_EMISMATCH, with a
 * message) a checkpoint of another job's name, state of an operator this
 * job lacks (unless allow_non_restored_state), and a sink whose destination
 * changed (unless allow_sink_change and the sink can move: then its
 * node->moved_from is set). A graph that gained operators, lost stateless
 * ones or changed parallelism passes. Logs what changed. */
int weir__identity_check_restore(weir_job *job, const weir_store_ckpt_info *info);

/* Whether a checkpoint's subtask entry holds state that a restore would
 * lose if nothing took it (keyed entries, positions, a blob). */
int weir__identity_has_state(const weir_store_subtask_info *st);

#endif
