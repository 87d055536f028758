/* rescale.c: owns restoring a checkpoint with another parallelism (or
 * another number of key groups): redistributing one operator's subtask
 * states among its new subtasks.
 *
 * What moves, and how:
 *  - keyed state (u64 and byte-string entries) goes to the subtask that owns
 *    the entry's key group in the new plan: the same function that routes
 *    records (hash.h), so every key finds its state where its records go;
 *    a u64 entry's key is its record key, a byte-string entry carries the
 *    record key that wrote it;
 *  - source positions: a rescalable source (weir_source_vt.rescalable) has
 *    splits that do not depend on its parallelism, so every new subtask is
 *    offered every split's position and takes the ones it owns;
 *  - a loop head's back-edge log is a list of records in flight into the
 *    loop: old subtask k's log is replayed by new subtask k mod P (the loop
 *    body's edges route each record as usual);
 *  - any other operator-managed state (a blob) has a meaning only its
 *    operator knows: such an operator is refused, with its name, and the
 *    job keeps its old parallelism or starts over.
 * Everything here runs before the workers start, on the calling thread.
 */
#include "rescale.h"

#include <stdio.h>
#include <string.h>

#include "hash.h"
#include "weir/alloc.h"

/* Appends n bytes to a growing array. */
static void *grow(void *p, uint64_t *cap, uint64_t need, size_t elem) {
  if (need <= *cap) return p;
  uint64_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  *cap = c;
  return weir_realloc(p, (size_t)(c * elem));
}

typedef struct build {
  weir_subtask_snapshot *s;
  uint64_t cap_u, cap_b, cap_d, cap_blob;
  uint32_t cap_pos;
} build;

static void add_u64(build *b, uint64_t key, uint64_t value) {
  weir_subtask_snapshot *s = b->s;
  uint64_t cu = b->cap_u;
  s->u64_keys = grow(s->u64_keys, &cu, s->n_u64 + 1, sizeof *s->u64_keys);
  s->u64_values = grow(s->u64_values, &b->cap_u, s->n_u64 + 1, sizeof *s->u64_values);
  s->u64_keys[s->n_u64] = key;
  s->u64_values[s->n_u64++] = value;
}

static void add_bytes(build *b, uint64_t route, const uint8_t *kv, uint32_t klen, uint32_t vlen) {
  weir_subtask_snapshot *s = b->s;
  uint64_t c1 = b->cap_b, c2 = b->cap_b;
  s->b_route = grow(s->b_route, &c1, s->n_bytes + 1, sizeof *s->b_route);
  s->b_klen = grow(s->b_klen, &c2, s->n_bytes + 1, sizeof *s->b_klen);
  s->b_vlen = grow(s->b_vlen, &b->cap_b, s->n_bytes + 1, sizeof *s->b_vlen);
  s->b_route[s->n_bytes] = route;
  s->b_klen[s->n_bytes] = klen;
  s->b_vlen[s->n_bytes++] = vlen;
  uint64_t n = (uint64_t)klen + vlen;
  s->b_data = grow(s->b_data, &b->cap_d, s->b_data_len + n, 1);
  if (n) memcpy(s->b_data + s->b_data_len, kv, (size_t)n);
  s->b_data_len += n;
}

static void add_blob(build *b, const uint8_t *p, uint64_t n) {
  weir_subtask_snapshot *s = b->s;
  s->blob = grow(s->blob, &b->cap_blob, s->blob_len + n, 1);
  if (n) memcpy(s->blob + s->blob_len, p, (size_t)n);
  s->blob_len += n;
}

static void add_pos(build *b, weir_snap_position pos) {
  weir_subtask_snapshot *s = b->s;
  uint64_t c = b->cap_pos;
  s->pos = grow(s->pos, &c, (uint64_t)s->npos + 1, sizeof *s->pos);
  b->cap_pos = (uint32_t)c;
  s->pos[s->npos++] = pos;
}

int weir__rescale(const char *op, const weir__rescale_kind *kind, uint32_t key_groups,
                  weir_subtask_snapshot **old, uint32_t p0, uint32_t p, weir_subtask_snapshot **out,
                  char *msg, size_t msglen) {
  for (uint32_t k = 0; k < p0; k++) {
    weir_subtask_snapshot *o = old[k];
    if (!o) continue;
    if (o->blob_len && !kind->loop_head) {
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
    if ((o->n_u64 || o->n_bytes) && !kind->keyed) {
      snprintf(msg, msglen, "operator '%s' has keyed state but is not keyed", op);
      return WEIR_ECORRUPT;
    }
  }
  build *b = weir_calloc(p, sizeof *b);
  for (uint32_t s = 0; s < p; s++) {
    b[s].s = weir_calloc(1, sizeof *b[s].s);
    b[s].s->op = weir_strdup(op);
    b[s].s->subtask = s;
    b[s].s->parallelism = p;
  }
  for (uint32_t k = 0; k < p0; k++) {
    weir_subtask_snapshot *o = old[k];
    if (!o) continue;
    for (uint64_t i = 0; i < o->n_u64; i++) {
      uint32_t s = weir__kg_subtask(weir__key_group(o->u64_keys[i], key_groups), key_groups, p);
      add_u64(&b[s], o->u64_keys[i], o->u64_values[i]);
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < o->n_bytes; i++) {
      uint32_t s = weir__kg_subtask(weir__key_group(o->b_route[i], key_groups), key_groups, p);
      add_bytes(&b[s], o->b_route[i], o->b_data + off, o->b_klen[i], o->b_vlen[i]);
      off += (uint64_t)o->b_klen[i] + o->b_vlen[i];
    }
    for (uint32_t i = 0; i < o->npos; i++)
      for (uint32_t s = 0; s < p; s++) add_pos(&b[s], o->pos[i]);
    if (o->blob_len) add_blob(&b[k % p], o->blob, o->blob_len);
  }
  for (uint32_t s = 0; s < p; s++) {
    weir_subtask_snapshot *n = b[s].s;
    if (!n->n_u64 && !n->n_bytes && !n->npos && !n->blob_len) {
      weir_subtask_snapshot_free(n); /* nothing for this subtask */
      weir_free(n);
      n = NULL;
    }
    out[s] = n;
  }
  weir_free(b);
  return 0;
}
