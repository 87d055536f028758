/* unaligned.c: owns the unaligned barrier handler (see unaligned.h for the
 * diagram and invariants). Pure: the task (task.c) scans its rings, takes
 * cuts and keeps the logged records; this file only decides. */
#include "unaligned.h"

#include <string.h>

#include "base/alloc.h"
#include "base/assert.h"

void weir__unalign_init(weir__unalign *u, uint32_t nin) {
  memset(u, 0, sizeof *u);
  u->nin = nin;
  uint32_t n = nin ? nin : 1;
  u->in = weir_calloc(n, 1);
  u->records = weir_calloc(n, sizeof *u->records);
  u->batches = weir_calloc(n, sizeof *u->batches);
}

void weir__unalign_close(weir__unalign *u) {
  weir_free(u->in);
  weir_free(u->records);
  weir_free(u->batches);
  u->in = NULL;
  u->records = u->batches = NULL;
}

static void to_idle(weir__unalign *u) {
  for (uint32_t i = 0; i < u->nin; i++)
    if (u->in[i] != WEIR__UN_ENDED) u->in[i] = WEIR__UN_IDLE;
  u->nlogging = 0;
  u->cur = 0;
}

void weir__unalign_taken(weir__unalign *u, uint64_t id) {
  if (id <= u->last) return;
  if (u->cur) {
    u->abandoned = u->cur;
    to_idle(u);
  }
  u->last = id;
}

weir__unalign_result weir__unalign_seen(weir__unalign *u, uint32_t i, uint64_t id) {
  WEIR_ASSERT(i < u->nin);
  if (id <= u->last) return WEIR__UN_NONE;
  u->want = id;
  return WEIR__UN_CUT;
}

weir__unalign_result weir__unalign_start(weir__unalign *u, uint64_t id, const uint8_t *passed) {
  WEIR_ASSERT(id > u->last);
  if (u->cur) u->abandoned = u->cur;
  to_idle(u);
  u->cur = u->last = id;
  for (uint32_t i = 0; i < u->nin; i++) {
    u->records[i] = u->batches[i] = 0;
    if (u->in[i] == WEIR__UN_ENDED) continue;
    if (passed && passed[i]) {
      u->in[i] = WEIR__UN_PASSED;
    } else {
      u->in[i] = WEIR__UN_LOGGING;
      u->nlogging++;
    }
  }
  return u->nlogging ? WEIR__UN_NONE : WEIR__UN_COMPLETE;
}

int weir__unalign_data(weir__unalign *u, uint32_t i, uint64_t n) {
  WEIR_ASSERT(i < u->nin);
  if (u->in[i] != WEIR__UN_LOGGING) return 0;
  u->records[i] += n;
  u->batches[i]++;
  return 1;
}

weir__unalign_result weir__unalign_barrier(weir__unalign *u, uint32_t i, uint64_t id) {
  WEIR_ASSERT(i < u->nin && u->in[i] != WEIR__UN_ENDED);
  if (id > u->last) {
    u->want = id;
    return WEIR__UN_CUT; /* never seen: cut now (nothing of i is overtaken) */
  }
  if (!u->cur || id < u->cur || u->in[i] != WEIR__UN_LOGGING) return WEIR__UN_NONE; /* stale */
  u->in[i] = WEIR__UN_PASSED;
  return --u->nlogging ? WEIR__UN_NONE : WEIR__UN_COMPLETE;
}

weir__unalign_result weir__unalign_end(weir__unalign *u, uint32_t i) {
  WEIR_ASSERT(i < u->nin && u->in[i] != WEIR__UN_ENDED);
  int was = u->in[i] == WEIR__UN_LOGGING;
  u->in[i] = WEIR__UN_ENDED;
  if (!was) return WEIR__UN_NONE;
  return --u->nlogging ? WEIR__UN_NONE : WEIR__UN_COMPLETE;
}

uint64_t weir__unalign_done(weir__unalign *u) {
  WEIR_ASSERT(u->cur && u->nlogging == 0);
  uint64_t id = u->cur;
  to_idle(u);
  return id;
}

int weir__unalign_check(const weir__unalign *u) {
  uint32_t logging = 0;
  for (uint32_t i = 0; i < u->nin; i++)
    if (u->in[i] == WEIR__UN_LOGGING) logging++;
  if (logging != u->nlogging) return 0;
  if (!u->cur && u->nlogging) return 0;
  if (u->cur && u->cur != u->last) return 0;
  return 1;
}
