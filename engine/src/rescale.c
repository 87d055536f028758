/* rescale.c: owns restoring a checkpoint with another parallelism (or
 * another number of key groups): redistributing one operator's subtask
 * states among its new subtasks.
 *
 * What moves, and how:
 *  - keyed state (u64 and byte-string entries) goes to the subtask that owns
 *    the entry's key group in the new plan: the same function that routes
 *    records (hash.h), so every key finds its state where its records go;
 *    a u64 entry's key is its record key, a byte-string entry carries the
 *    record key that wrote it, a namespaced entry's key is its record key;
 *  - timers are keyed state too: each goes with its key;
 *  - broadcast state: every new subtask gets old subtask 0's copy (a
 *    two-input operator checkpoints aligned, so every copy saw the same
 *    broadcast records at the cut);
 *  - an event-time operator's clock: each new subtask resumes from the
 *    minimum of the old ones (a later clock could make records late that
 *    were not);
 *  - source positions: a rescalable source (weir_source_vt.rescalable) has
 *    splits that do not depend on its parallelism, so every new subtask is
 *    offered every split's position and takes the ones it owns;
 *  - a loop head's back-edge log is a list of records in flight into the
 *    loop: old subtask k's log is replayed by new subtask k mod P (the loop
 *    body's edges route each record as usual);
 *  - an operator whose own state (a blob) is appendable
 *    (weir_operator_vt.rescalable, e.g. a two-phase sink's pending epochs)
 *    gets it the same way: old subtask k's blob is appended to new subtask
 *    k mod P's;
 *  - any other operator-managed state (a blob) has a meaning only its
 *    operator knows: such an operator is refused, with its name, and the
 *    job keeps its old parallelism or starts over.
 * Everything here runs before the workers start, on the calling thread.
 */
#include "rescale.h"

#include <stdio.h>
#include <string.h>

#include "hash.h"
#include "base/alloc.h"

/* The new subtask (of p) that owns a routing key. */
static uint32_t owner(uint64_t key, uint32_t key_groups, uint32_t p) {
  return weir__kg_subtask(weir__key_group(key, key_groups), key_groups, p);
}

int weir__rescale(const char *op, const weir__rescale_kind *kind, uint32_t key_groups,
                  weir_subtask_snapshot **old, uint32_t p0, uint32_t p, weir_subtask_snapshot **out,
                  char *msg, size_t msglen) {
  for (uint32_t k = 0; k < p0; k++) {
    weir_subtask_snapshot *o = old[k];
    if (!o) continue;
    if (o->blob_len && !kind->loop_head && !kind->rescalable_blob) {
      snprintf(msg, msglen,
               "operator '%s' keeps its own state (%llu bytes in subtask %u), which weir cannot "
               "split or merge: restore it with parallelism %u",
               op, (unsigned long long)o->blob_len, k, p0);
      return WEIR_EPLAN;
    }
    if (o->npos && !kind->rescalable_source) {
      snprintf(msg, msglen,
               "source '%s' has splits that depend on its parallelism: restore it with "
               "parallelism %u",
               op, p0);
      return WEIR_EPLAN;
    }
    if ((o->n_u64 || o->n_bytes || o->n_ns || o->n_timers) && !kind->keyed) {
      snprintf(msg, msglen, "operator '%s' has keyed state but is not keyed", op);
      return WEIR_ECORRUPT;
    }
    if (o->n_bcast && !kind->broadcast) {
      snprintf(msg, msglen, "operator '%s' has broadcast state but no broadcast input", op);
      return WEIR_ECORRUPT;
    }
  }
  const weir_subtask_snapshot *bc = p0 ? old[0] : NULL; /* the copy every subtask gets */
  if (bc && !bc->n_bcast) bc = NULL;
  /* Two passes over the old states: count what each new subtask gets,
   * then fill arrays of exactly that size. */
  weir_subtask_snapshot **n = out;
  uint32_t npos = 0;
  int has_clock = 0;
  int64_t clock = INT64_MAX;
  uint32_t version = 0; /* every old subtask's, one job's: the same */
  for (uint32_t s = 0; s < p; s++) n[s] = weir_calloc(1, sizeof *n[s]);
  for (uint32_t k = 0; k < p0; k++) {
    weir_subtask_snapshot *o = old[k];
    if (!o) continue;
    if (o->state_version > version) version = o->state_version;
    if (o->has_clock) {
      has_clock = 1;
      if (o->clock < clock) clock = o->clock;
    }
    for (uint64_t i = 0; i < o->n_u64; i++) n[owner(o->u64_keys[i], key_groups, p)]->n_u64++;
    for (uint64_t i = 0; i < o->n_timers; i++) n[owner(o->tm_keys[i], key_groups, p)]->n_timers++;
    for (uint64_t i = 0; i < o->n_ns; i++) n[owner(o->ns_keys[i], key_groups, p)]->n_ns++;
    for (uint64_t i = 0; i < o->n_bytes; i++) {
      weir_subtask_snapshot *t = n[owner(o->b_route[i], key_groups, p)];
      t->n_bytes++;
      t->b_data_len += (uint64_t)o->b_klen[i] + o->b_vlen[i];
    }
    npos += o->npos;
    n[k % p]->blob_len += o->blob_len;
  }
  for (uint32_t s = 0; s < p; s++) {
    weir_subtask_snapshot *t = n[s];
    t->npos = npos;
    t->has_clock = has_clock;
    t->clock = clock;
    if (bc) {
      t->n_bcast = bc->n_bcast;
      t->bc_data_len = bc->bc_data_len;
      t->bc_klen = weir_malloc(bc->n_bcast * sizeof *t->bc_klen);
      t->bc_vlen = weir_malloc(bc->n_bcast * sizeof *t->bc_vlen);
      t->bc_data = weir_malloc(bc->bc_data_len ? bc->bc_data_len : 1);
      memcpy(t->bc_klen, bc->bc_klen, bc->n_bcast * sizeof *t->bc_klen);
      memcpy(t->bc_vlen, bc->bc_vlen, bc->n_bcast * sizeof *t->bc_vlen);
      if (bc->bc_data_len) memcpy(t->bc_data, bc->bc_data, (size_t)bc->bc_data_len);
    }
    if (!t->n_u64 && !t->n_bytes && !t->npos && !t->blob_len && !t->n_timers && !has_clock &&
        !t->n_bcast && !t->n_ns) {
      weir_free(t); /* nothing for this subtask */
      n[s] = NULL;
      continue;
    }
    t->op = weir_strdup(op);
    t->subtask = s;
    t->parallelism = p;
    t->state_version = version;
    if (t->n_u64) {
      t->u64_keys = weir_malloc(t->n_u64 * sizeof *t->u64_keys);
      t->u64_values = weir_malloc(t->n_u64 * sizeof *t->u64_values);
    }
    if (t->n_bytes) {
      t->b_route = weir_malloc(t->n_bytes * sizeof *t->b_route);
      t->b_klen = weir_malloc(t->n_bytes * sizeof *t->b_klen);
      t->b_vlen = weir_malloc(t->n_bytes * sizeof *t->b_vlen);
    }
    if (t->b_data_len) t->b_data = weir_malloc(t->b_data_len);
    if (t->n_timers) {
      t->tm_keys = weir_malloc(t->n_timers * sizeof *t->tm_keys);
      t->tm_ts = weir_malloc(t->n_timers * sizeof *t->tm_ts);
      t->tm_domain = weir_malloc(t->n_timers);
    }
    if (t->n_ns) {
      t->ns_keys = weir_malloc(t->n_ns * sizeof *t->ns_keys);
      t->ns_ns = weir_malloc(t->n_ns * sizeof *t->ns_ns);
      t->ns_values = weir_malloc(t->n_ns * sizeof *t->ns_values);
    }
    if (t->npos) t->pos = weir_malloc(t->npos * sizeof *t->pos);
    if (t->blob_len) t->blob = weir_malloc(t->blob_len);
    /* Filled again from zero below. */
    t->n_u64 = t->n_bytes = t->b_data_len = t->blob_len = t->n_timers = t->n_ns = 0;
    t->npos = 0;
  }
  for (uint32_t k = 0; k < p0; k++) {
    weir_subtask_snapshot *o = old[k];
    if (!o) continue;
    for (uint64_t i = 0; i < o->n_u64; i++) {
      weir_subtask_snapshot *t = n[owner(o->u64_keys[i], key_groups, p)];
      t->u64_keys[t->n_u64] = o->u64_keys[i];
      t->u64_values[t->n_u64++] = o->u64_values[i];
    }
    for (uint64_t i = 0; i < o->n_timers; i++) {
      weir_subtask_snapshot *t = n[owner(o->tm_keys[i], key_groups, p)];
      t->tm_keys[t->n_timers] = o->tm_keys[i];
      t->tm_ts[t->n_timers] = o->tm_ts[i];
      t->tm_domain[t->n_timers++] = o->tm_domain[i];
    }
    for (uint64_t i = 0; i < o->n_ns; i++) {
      weir_subtask_snapshot *t = n[owner(o->ns_keys[i], key_groups, p)];
      t->ns_keys[t->n_ns] = o->ns_keys[i];
      t->ns_ns[t->n_ns] = o->ns_ns[i];
      t->ns_values[t->n_ns++] = o->ns_values[i];
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < o->n_bytes; i++) {
      weir_subtask_snapshot *t = n[owner(o->b_route[i], key_groups, p)];
      uint64_t len = (uint64_t)o->b_klen[i] + o->b_vlen[i];
      t->b_route[t->n_bytes] = o->b_route[i];
      t->b_klen[t->n_bytes] = o->b_klen[i];
      t->b_vlen[t->n_bytes++] = o->b_vlen[i];
      if (len) memcpy(t->b_data + t->b_data_len, o->b_data + off, (size_t)len);
      t->b_data_len += len;
      off += len;
    }
    for (uint32_t s = 0; s < p; s++) {
      if (!n[s] || !o->npos) continue;
      memcpy(n[s]->pos + n[s]->npos, o->pos, o->npos * sizeof *o->pos);
      n[s]->npos += o->npos;
    }
    weir_subtask_snapshot *t = n[k % p];
    if (o->blob_len) {
      memcpy(t->blob + t->blob_len, o->blob, (size_t)o->blob_len);
      t->blob_len += o->blob_len;
    }
  }
  return 0;
}
