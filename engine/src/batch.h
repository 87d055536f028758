/* batch.h: batches, the unit that travels on channels and between chained
 * operators, and the in-band control events that share their FIFO.
 *
 * A batch holds up to `cap` records in column form (keys, timestamps, ids,
 * payload offsets and lengths) and their payload bytes in one arena. A
 * batch is full when it holds `cap` records or its arena cannot take the next
 * payload without growing past the soft limit; a record larger than that
 * still travels, alone, in a batch whose arena grows to fit it (up to the
 * job's maximum record size). Ownership moves with the batch: whoever holds
 * the pointer may touch it, nobody else.
 */
#ifndef WEIR_BATCH_H
#define WEIR_BATCH_H

#include <stdint.h>
#include <string.h>

#include "trace.h"
#include "weir/job.h"

typedef enum {
  WEIR__MSG_DATA = 0,
  WEIR__MSG_EOI = 1,       /* end of input on this channel; `barrier_id`: WEIR__END_* */
  WEIR__MSG_BARRIER = 2,   /* checkpoint barrier `barrier_id` */
  WEIR__MSG_WATERMARK = 3, /* watermark `barrier_id` (an int64_t) */
  WEIR__MSG_IDLE = 4,      /* no watermarks until the next WATERMARK (task_time.c) */
} weir__msg_kind;

/* Why input ended: its true end, or a stop (the job resumes after a
 * restore, so event time does not go to +inf). */
enum { WEIR__END_INPUT = 0, WEIR__END_STOP = 1 };

/* Arena bytes a batch keeps between uses; larger arenas are shrunk back. */
#define WEIR__ARENA_SOFT (256u * 1024u)

typedef struct weir__batch {
  struct weir__batch *next; /* intrusive link for pending lists */
  uint32_t kind;
  uint32_t len;
  uint32_t cap;
  uint32_t used;      /* arena bytes in use */
  uint32_t arena_cap; /* arena bytes allocated */
  uint64_t barrier_id;
  uint64_t *keys;
  int64_t *ts;
  uint64_t *ids;
  uint32_t *off;
  uint32_t *lens;
  uint8_t *data;
  weir__batch_trace tr; /* latency tracing only (trace.h) */
} weir__batch;

/* A new empty data batch for `cap` records. Caller owns it. */
weir__batch *weir__batch_create(uint32_t cap);
void weir__batch_destroy(weir__batch *b);
/* Empties a batch for reuse as a data batch, shrinking an oversized arena. */
void weir__batch_reset(weir__batch *b);
/* Grows the arena to hold `need` more bytes (only for len == 0 or when the
 * total stays under the soft limit). */
void weir__batch_grow(weir__batch *b, uint32_t need);

/* Nonzero if b takes a record of len payload bytes as it is, without
 * growing: the common case, which the record path tests inline. */
static inline int weir__batch_room(const weir__batch *b, uint32_t len) {
  return b->len < b->cap && len <= b->arena_cap - b->used;
}

/* Nonzero if a record with `len` payload bytes fits without flushing
 * (growing the batch's arena if need be). */
static inline int weir__batch_fits(weir__batch *b, uint32_t len) {
  if (weir__batch_room(b, len)) return 1;
  if (b->len == b->cap) return 0;
  if (b->len == 0 || b->used + len <= WEIR__ARENA_SOFT) {
    weir__batch_grow(b, len);
    return 1;
  }
  return 0;
}

/* Appends a record; the caller checked weir__batch_fits(). */
static inline void weir__batch_append(weir__batch *b, uint64_t key, int64_t ts, uint64_t id,
                                      const void *payload, uint32_t len) {
  uint32_t i = b->len++;
  b->keys[i] = key;
  b->ts[i] = ts;
  b->ids[i] = id;
  b->off[i] = b->used;
  b->lens[i] = len;
  if (len == 8) {
    memcpy(b->data + b->used, payload, 8); /* a constant size: one move */
    b->used += 8;
  } else if (len) {
    memcpy(b->data + b->used, payload, len);
    b->used += len;
  }
}

/* The read-only view handed to process_batch. */
static inline weir_batch weir__batch_view(const weir__batch *b) {
  weir_batch v = {b->len, b->keys, b->ts, b->ids, b->off, b->lens, b->data};
  return v;
}

#endif
