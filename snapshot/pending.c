/* pending.c: owns what the store-writer thread remembers of checkpoints:
 * the pending entries of those being written (what their commits will
 * name) and the ids this store finished (committed, aborted or failed),
 * which may not be written or committed again.
 */
#include <pthread.h>
#include <string.h>

#include "writer_impl.h"
#include "base/alloc.h"

typedef unsigned long long ull;

/* ---- pending checkpoints -------------------------------------------------- */

weir__pending *weir__pending_find(weir_store *s, uint64_t id) {
  for (weir__pending *p = s->pending; p; p = p->next)
    if (p->id == id) return p;
  return NULL;
}

weir__pending *weir__pending_get(weir_store *s, uint64_t id) {
  weir__pending *p = weir__pending_find(s, id);
  if (p) return p;
  p = weir_calloc(1, sizeof *p);
  p->id = id;
  p->next = s->pending;
  s->pending = p;
  return p;
}

void weir__pending_drop(weir_store *s, uint64_t id) {
  for (weir__pending **pp = &s->pending; *pp; pp = &(*pp)->next) {
    weir__pending *p = *pp;
    if (p->id != id) continue;
    *pp = p->next;
    for (uint32_t i = 0; i < p->nsub; i++) {
      weir_free(p->subs[i].op);
      weir_free(p->subs[i].pos);
    }
    weir_free(p->subs);
    weir_free(p);
    return;
  }
}

/* ---- finished ids ------------------------------------------------------------ */

/* Index of the first range whose end is >= id. */
static size_t fin_find(const weir_store *s, uint64_t id) {
  size_t lo = 0, hi = s->nfin;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->fin[mid][1] < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int fin_has(const weir_store *s, uint64_t id) {
  size_t i = fin_find(s, id);
  return i < s->nfin && s->fin[i][0] <= id;
}

/* Records that checkpoint id was committed, aborted or failed. */
void weir__fin_add(weir_store *s, uint64_t id) {
  size_t i = fin_find(s, id);
  if (i < s->nfin && s->fin[i][0] <= id) return;
  int join_prev = i > 0 && s->fin[i - 1][1] + 1 == id;
  int join_next = i < s->nfin && s->fin[i][0] == id + 1;
  if (join_prev && join_next) {
    s->fin[i - 1][1] = s->fin[i][1];
    memmove(&s->fin[i], &s->fin[i + 1], (s->nfin - i - 1) * sizeof *s->fin);
    s->nfin--;
  } else if (join_prev) {
    s->fin[i - 1][1] = id;
  } else if (join_next) {
    s->fin[i][0] = id;
  } else {
    if (s->nfin == s->fin_cap) {
      s->fin_cap = s->fin_cap ? 2 * s->fin_cap : 8;
      s->fin = weir_realloc(s->fin, s->fin_cap * sizeof *s->fin);
    }
    memmove(&s->fin[i + 1], &s->fin[i], (s->nfin - i) * sizeof *s->fin);
    s->fin[i][0] = s->fin[i][1] = id;
    s->nfin++;
  }
}

/* Checks that checkpoint id may still be written or committed: handed out
 * by this store since it was opened, and neither committed, aborted nor
 * failed since. */
int weir__check_open_id(weir_store *s, uint64_t id) {
  pthread_mutex_lock(&s->id_mu);
  uint64_t first = s->first_id, next = s->next;
  int have = s->have_job;
  pthread_mutex_unlock(&s->id_mu);
  if (!have)
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu: no job (weir_store_job_begin first)",
                            s->path, (ull)id);
  if (id == 0 || id >= next)
    return weir__store_fail(s, WEIR_EINVAL,
                            "store %s: checkpoint id %llu was not handed out (the next is %llu)",
                            s->path, (ull)id, (ull)next);
  if (id < first)
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu was begun before this store was opened "
                            "(only the run that wrote it may commit it)",
                            s->path, (ull)id);
  if (fin_has(s, id))
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu is already committed, aborted or failed",
                            s->path, (ull)id);
  return 0;
}
