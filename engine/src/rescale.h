/* rescale.h: restoring one operator's checkpointed state with another
 * parallelism (see rescale.c for what moves where). */
#ifndef WEIR_RESCALE_H
#define WEIR_RESCALE_H

#include <stddef.h>
#include <stdint.h>

#include "snapshot/store.h"

typedef struct weir__rescale_kind {
  int keyed;             /* its input is hash-partitioned: keyed state moves */
  int rescalable_source; /* a source with parallelism-independent splits */
  int loop_head;         /* its blob is a back-edge log */
  int rescalable_blob;   /* its blob is appendable (weir_operator_vt.rescalable) */
  int broadcast;         /* its second input broadcasts: it keeps broadcast state */
} weir__rescale_kind;

/* Builds the restore states out[0..p-1] of operator `op` from the states
 * old[0..p0-1] of a checkpoint (NULL where a subtask stored none; out[s] is
 * NULL where a new subtask gets nothing), routing keyed state with
 * `key_groups` key groups as the new plan does. The caller owns old[] and,
 * on success, out[] (weir_subtask_snapshot_free + weir_free). Returns 0,
 * WEIR_EPLAN with a message when the operator's state cannot be
 * redistributed (naming it and its old parallelism), or WEIR_ECORRUPT. */
int weir__rescale(const char *op, const weir__rescale_kind *kind, uint32_t key_groups,
                  weir_subtask_snapshot **old, uint32_t p0, uint32_t p, weir_subtask_snapshot **out,
                  char *msg, size_t msglen);

#endif
