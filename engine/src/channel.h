/* channel.h: bounded single-producer single-consumer FIFOs of batches and
 * control events between two tasks.
 *
 * DESIGN
 * A channel is a ring of `cap` batch pointers (the bound) plus a return ring
 * through which the consumer hands emptied batches back for reuse, so a busy
 * channel allocates nothing. The producer thread owns `tail`, the pending
 * list and the return ring's head; the consumer thread owns `head` and the
 * return ring's tail. Control events (end of input, barriers) are batches of
 * another kind in the same ring, so they can never overtake data.
 *
 * Backpressure: a task checks weir__chan_writable() before it consumes input.
 * What one step emits beyond the ring's room waits on the producer-owned
 * pending list (a step's emissions cannot be refused half-way through a
 * user callback); the task takes no new input until the list has drained.
 * So a channel holds at most `cap` batches plus what one step emitted.
 *
 * Spilling: a feedback edge's pending list is unbounded. Beyond
 * `spill_after` bytes of pending batches, further batches are serialised to
 * a spill file (spill.h) instead, and read back in order once the
 * in-memory list has gone into the ring; if the file cannot be written,
 * batches wait in memory behind it (the `late` list): slower to drain, never
 * lost or reordered. All of it is producer-owned, like the pending list.
 *
 * Wake-ups: each side announces that it is about to wait (consumer_waiting,
 * producer_waiting) and re-checks the ring afterwards; the other side reads
 * the flag after publishing (sequentially consistent on both sides: the
 * classic store-then-load handshake), so a wake-up is never lost and is sent
 * only to a side that said it waits, once per waiting period.
 */
#ifndef WEIR_CHANNEL_H
#define WEIR_CHANNEL_H

#include <stdatomic.h>
#include <stdint.h>

#include "batch.h"

typedef void (*weir__notify_fn)(void *who);

typedef struct weir__chan {
  /* Consumer side. */
  _Alignas(64) _Atomic uint64_t head;
  _Atomic int consumer_waiting;
  uint64_t ftail; /* return ring: consumer pushes here (published below) */
  /* Producer side. */
  _Alignas(64) _Atomic uint64_t tail;
  _Atomic int producer_waiting;
  _Atomic uint64_t fhead; /* return ring: producer pops here */
  weir__batch *pend_head, *pend_tail;
  uint32_t npend; /* pending batches: in memory, spilled and late */
  /* Feedback edges only (see "Spilling" above). */
  uint64_t pend_bytes;  /* memory held by the in-memory pending list */
  uint64_t spill_after; /* 0 = never spill */
  const char *spill_dir;
  struct weir__spill *spill;
  uint32_t nspilled;                  /* batches in the spill file */
  weir__batch *late_head, *late_tail; /* behind the file, if it failed */
  uint8_t *scratch;                   /* serialising buffer */
  uint64_t scratch_cap;
  int spill_err; /* a spilled batch could not be read back */
  /* Shared, written by the consumer, read by the producer. */
  _Alignas(64) _Atomic uint64_t ftail_pub;
  /* Immutable after creation. */
  _Alignas(64) uint32_t cap;
  uint32_t mask;  /* ring size - 1 (ring size: power of two >= cap) */
  uint32_t fmask; /* return ring size - 1 */
  uint32_t batch_records;
  int unbounded; /* feedback edge: never refuses, pending grows */
  weir__batch **ring;
  weir__batch **fring;
  weir__notify_fn notify;
  void *producer, *consumer; /* passed to notify */
} weir__chan;

/* A channel bounded to `cap` batches of `batch_records` records. notify(who)
 * wakes the producer or the consumer; it may be NULL for single-threaded
 * tests. Caller owns the channel. */
weir__chan *weir__chan_create(uint32_t cap, uint32_t batch_records, weir__notify_fn notify,
                              void *producer, void *consumer);
/* Frees the channel and every batch in it. Both sides must have stopped. */
void weir__chan_destroy(weir__chan *ch);

/* Producer: an empty data batch (recycled or new); the producer owns it. */
weir__batch *weir__chan_batch(weir__chan *ch);
/* Producer: publishes b (ownership moves to the channel). Never refuses: if
 * the ring is full, b waits on the pending list. */
void weir__chan_push(weir__chan *ch, weir__batch *b);
/* Producer: publishes b only if the ring has room and nothing is pending;
 * otherwise returns WEIR_EAGAIN and the producer keeps b. */
int weir__chan_try_push(weir__chan *ch, weir__batch *b);
/* Producer: publishes control event b ahead of every pending batch (an
 * unaligned barrier): into the ring at once if it has a slot, the spare one
 * beyond the bound included, else first on the pending list. It does not
 * notify: the consumer may be busy with a full output of its own rather
 * than waiting on this input, so the caller wakes it whether or not it
 * waits (the task: ahead of its worker's other tasks). Not for feedback
 * edges. */
void weir__chan_push_front(weir__chan *ch, weir__batch *b);
/* Producer: moves pending batches into the ring; returns how many remain. */
uint32_t weir__chan_flush_pending(weir__chan *ch);
/* Producer: 1 if nothing is pending and the ring has room. If 0, the
 * consumer will notify the producer once room appears. */
int weir__chan_writable(weir__chan *ch);
/* Producer: 1 if nothing is pending (room may still be short). */
static inline int weir__chan_drained(const weir__chan *ch) {
  return ch->npend == 0;
}

/* Consumer: the oldest batch or control event, or NULL if empty. It stays in
 * the channel until weir__chan_release(). */
weir__batch *weir__chan_peek(weir__chan *ch);
/* Consumer: drops the batch returned by peek and recycles it. */
void weir__chan_release(weir__chan *ch);
/* Consumer: announce waiting; returns 1 if data arrived meanwhile (then do
 * not sleep), 0 if the producer will notify. */
int weir__chan_wait(weir__chan *ch);

/* Batches queued in the ring (either side; a snapshot). */
uint32_t weir__chan_size(weir__chan *ch);

#endif
