/* align.c: owns the barrier alignment state machine (see align.h for the
 * diagram and invariants). No threads, no clocks: the caller passes time in,
 * so every interleaving can be scripted in a unit test. */
#include "align.h"

#include <string.h>

#include "base/alloc.h"
#include "base/assert.h"

void weir__align_init(weir__align *a, uint32_t nin, weir__align_mode mode) {
  memset(a, 0, sizeof *a);
  a->mode = mode;
  a->nin = nin;
  a->in = weir_calloc(nin ? nin : 1, 1);
}

void weir__align_close(weir__align *a) {
  weir_free(a->in);
  a->in = NULL;
}

void weir__align_exclude(weir__align *a, uint32_t i) {
  WEIR_ASSERT(i < a->nin && a->in[i] == WEIR__IN_OPEN && !a->cur);
  a->in[i] = WEIR__IN_ENDED;
  a->nended++;
}

static void unblock_all(weir__align *a) {
  for (uint32_t i = 0; i < a->nin; i++)
    if (a->in[i] != WEIR__IN_ENDED) a->in[i] = WEIR__IN_OPEN;
  a->nblocked = 0;
}

static weir__align_result maybe_complete(weir__align *a) {
  if (a->cur && a->nblocked + a->nended == a->nin) return WEIR__ALIGN_COMPLETE;
  return WEIR__ALIGN_NONE;
}

weir__align_result weir__align_barrier(weir__align *a, uint32_t i, uint64_t id, uint64_t now_ns) {
  WEIR_ASSERT(i < a->nin && a->in[i] != WEIR__IN_ENDED);
  if (id <= a->last || id < a->cur || id <= a->abandoned) return WEIR__ALIGN_STALE;
  if (a->cur && id > a->cur) {
    /* A newer barrier while aligning: the older checkpoint cannot complete
     * here any more (its barrier on other inputs is now behind this one's
     * position); give it up and align the newer one. */
    a->abandoned = a->cur;
    unblock_all(a);
    a->cur = 0;
  }
  if (!a->cur) {
    a->cur = id;
    a->started_ns = now_ns;
  }
  if (a->in[i] == WEIR__IN_BLOCKED || a->in[i] == WEIR__IN_SEEN) {
    /* A second barrier `cur` on one input cannot happen with FIFO channels
     * and one barrier per checkpoint per channel. */
    WEIR_ASSERT(0 && "barrier delivered twice on one input");
  }
  a->in[i] = a->mode == WEIR__ALIGN_EXACTLY_ONCE ? WEIR__IN_BLOCKED : WEIR__IN_SEEN;
  a->nblocked++;
  return maybe_complete(a);
}

weir__align_result weir__align_end(weir__align *a, uint32_t i) {
  WEIR_ASSERT(i < a->nin && a->in[i] != WEIR__IN_ENDED);
  if (a->in[i] == WEIR__IN_BLOCKED || a->in[i] == WEIR__IN_SEEN) {
    /* The input delivered `cur` and then ended: it stays counted as ended. */
    a->nblocked--;
  }
  a->in[i] = WEIR__IN_ENDED;
  a->nended++;
  return maybe_complete(a);
}

uint64_t weir__align_done(weir__align *a) {
  WEIR_ASSERT(a->cur && a->nblocked + a->nended == a->nin);
  uint64_t id = a->cur;
  a->last = id;
  a->cur = 0;
  unblock_all(a);
  return id;
}

int weir__align_check(const weir__align *a) {
  uint32_t blocked = 0, ended = 0;
  for (uint32_t i = 0; i < a->nin; i++) {
    if (a->in[i] == WEIR__IN_BLOCKED || a->in[i] == WEIR__IN_SEEN) blocked++;
    if (a->in[i] == WEIR__IN_ENDED) ended++;
    if (a->in[i] == WEIR__IN_BLOCKED && a->mode != WEIR__ALIGN_EXACTLY_ONCE) return 0;
  }
  if (blocked != a->nblocked || ended != a->nended) return 0;
  if (a->nblocked + a->nended > a->nin) return 0;
  if (!a->cur && a->nblocked) return 0;
  if (a->cur && a->cur <= a->last) return 0;
  return 1;
}

void weir__align_force(weir__align *a, uint64_t id) {
  if (id <= a->last) return;
  if (a->cur && a->cur != id) a->abandoned = a->cur;
  a->last = id;
  a->cur = 0;
  unblock_all(a);
}
