/* channel.c: owns the SPSC channel protocol (see channel.h for the design).
 *
 * Memory ordering: the producer fills a batch, then stores `tail` with
 * release; the consumer loads `tail` with acquire before reading the batch.
 * Symmetrically for `head` and the return ring. The waiting handshakes use
 * sequentially consistent fences between "publish" and "read the other
 * side's flag", which is what makes a lost wake-up impossible.
 */
#include "channel.h"

#include <errno.h>

#include "spill.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "base/log.h"

static uint32_t pow2_at_least(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

weir__chan *weir__chan_create(uint32_t cap, uint32_t batch_records, weir__notify_fn notify,
                              void *producer, void *consumer) {
  WEIR_ASSERT(cap >= 1 && batch_records >= 1);
  weir__chan *ch = weir_aligned_alloc(sizeof *ch);
  memset(ch, 0, sizeof *ch);
  ch->cap = cap;
  /* One slot beyond the bound: an unaligned barrier may overtake a full
   * ring (weir__chan_push_front). */
  uint32_t rs = pow2_at_least(cap + 1);
  ch->mask = rs - 1;
  ch->ring = weir_calloc(rs, sizeof *ch->ring);
  /* The return ring holds every batch that can exist at once, but pending
   * overflow may exceed it; extra batches are then freed. */
  uint32_t fs = pow2_at_least(cap + 3);
  ch->fmask = fs - 1;
  ch->fring = weir_calloc(fs, sizeof *ch->fring);
  ch->batch_records = batch_records;
  ch->notify = notify;
  ch->producer = producer;
  ch->consumer = consumer;
  return ch;
}

void weir__chan_destroy(weir__chan *ch) {
  if (!ch) return;
  uint64_t h = atomic_load(&ch->head), t = atomic_load(&ch->tail);
  for (; h != t; h++) weir__batch_destroy(ch->ring[h & ch->mask]);
  uint64_t fh = atomic_load(&ch->fhead), ft = atomic_load(&ch->ftail_pub);
  for (; fh != ft; fh++) weir__batch_destroy(ch->fring[fh & ch->fmask]);
  weir__batch *lists[2] = {ch->pend_head, ch->late_head};
  for (int i = 0; i < 2; i++)
    while (lists[i]) {
      weir__batch *b = lists[i];
      lists[i] = b->next;
      weir__batch_destroy(b);
    }
  if (ch->spill) {
    weir__spill_close(ch->spill);
    weir_free(ch->spill);
  }
  weir_free(ch->scratch);
  weir_free(ch->ring);
  weir_free(ch->fring);
  weir_free(ch);
}

weir__batch *weir__chan_batch(weir__chan *ch) {
  uint64_t ft = atomic_load_explicit(&ch->ftail_pub, memory_order_acquire);
  uint64_t fh = atomic_load_explicit(&ch->fhead, memory_order_relaxed);
  if (fh != ft) {
    weir__batch *b = ch->fring[fh & ch->fmask];
    atomic_store_explicit(&ch->fhead, fh + 1, memory_order_release);
    weir__batch_reset(b);
    return b;
  }
  return weir__batch_create(ch->batch_records);
}

static int ring_full(weir__chan *ch) {
  uint64_t t = atomic_load_explicit(&ch->tail, memory_order_relaxed);
  uint64_t h = atomic_load_explicit(&ch->head, memory_order_acquire);
  return t - h >= ch->cap;
}

static void publish(weir__chan *ch, weir__batch *b) {
  uint64_t t = atomic_load_explicit(&ch->tail, memory_order_relaxed);
  ch->ring[t & ch->mask] = b;
  atomic_store_explicit(&ch->tail, t + 1, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&ch->consumer_waiting, memory_order_relaxed) &&
      atomic_exchange(&ch->consumer_waiting, 0) && ch->notify)
    ch->notify(ch->consumer);
}

int weir__chan_try_push(weir__chan *ch, weir__batch *b) {
  if (ch->npend || ring_full(ch)) return WEIR_EAGAIN;
  b->next = NULL;
  publish(ch, b);
  return 0;
}

/* Memory a pending batch holds. */
static uint64_t batch_bytes(const weir__batch *b) {
  return (uint64_t)b->cap * 32u + b->arena_cap;
}

static void list_append(weir__batch **head, weir__batch **tail, weir__batch *b) {
  if (*tail)
    (*tail)->next = b;
  else
    *head = b;
  *tail = b;
}

/* Spilled form: kind, len, used, 0 (u32 each), barrier id (u64), then the
 * len keys, timestamps, ids, offsets and lengths, then `used` payload
 * bytes. */
#define SPILL_HDR 24u

static int spill_batch(weir__chan *ch, weir__batch *b) {
  if (!ch->spill) {
    ch->spill = weir_malloc(sizeof *ch->spill);
    weir__spill_init(ch->spill, ch->spill_dir);
  }
  uint64_t n = SPILL_HDR + (uint64_t)b->len * 32u + b->used;
  if (n > ch->scratch_cap) {
    weir_free(ch->scratch);
    ch->scratch_cap = n;
    ch->scratch = weir_malloc((size_t)n);
  }
  uint8_t *p = ch->scratch;
  uint32_t h[4] = {b->kind, b->len, b->used, 0};
  memcpy(p, h, 16);
  memcpy(p + 16, &b->barrier_id, 8);
  p += SPILL_HDR;
  size_t l = b->len;
  memcpy(p, b->keys, l * 8);
  memcpy(p + l * 8, b->ts, l * 8);
  memcpy(p + l * 16, b->ids, l * 8);
  memcpy(p + l * 24, b->off, l * 4);
  memcpy(p + l * 28, b->lens, l * 4);
  memcpy(p + l * 32, b->data, b->used);
  return weir__spill_write2(ch->spill, ch->scratch, (size_t)n, NULL, 0);
}

/* Reads the oldest spilled batch into a recycled one. */
static weir__batch *unspill_batch(weir__chan *ch) {
  uint8_t hdr[SPILL_HDR];
  uint32_t h[4];
  weir__batch *b = NULL;
  int rc = weir__spill_read(ch->spill, hdr, SPILL_HDR);
  if (!rc) {
    memcpy(h, hdr, 16);
    if (h[1] > ch->batch_records) rc = -EIO;
  }
  if (!rc) {
    b = weir__chan_batch(ch);
    if (h[2] > b->arena_cap) weir__batch_grow(b, h[2]);
    size_t l = h[1];
    b->kind = h[0];
    b->len = h[1];
    b->used = h[2];
    memcpy(&b->barrier_id, hdr + 16, 8);
    if (!rc) rc = weir__spill_read(ch->spill, b->keys, l * 8);
    if (!rc) rc = weir__spill_read(ch->spill, b->ts, l * 8);
    if (!rc) rc = weir__spill_read(ch->spill, b->ids, l * 8);
    if (!rc) rc = weir__spill_read(ch->spill, b->off, l * 4);
    if (!rc) rc = weir__spill_read(ch->spill, b->lens, l * 4);
    if (!rc) rc = weir__spill_read(ch->spill, b->data, b->used);
  }
  if (rc) {
    WEIR_LOG_E("a spilled batch of a feedback edge cannot be read back from '%s': %s",
               ch->spill->dir, strerror(-rc));
    ch->spill_err = rc;
    weir__batch_destroy(b);
    return NULL;
  }
  return b;
}

void weir__chan_push(weir__chan *ch, weir__batch *b) {
  b->next = NULL;
  if (!ch->npend && !ring_full(ch)) {
    publish(ch, b);
    return;
  }
  ch->npend++;
  if (ch->late_head) {
    list_append(&ch->late_head, &ch->late_tail, b);
  } else if (ch->spill_after &&
             (ch->nspilled || ch->pend_bytes + batch_bytes(b) > ch->spill_after)) {
    if (spill_batch(ch, b) == 0) {
      ch->nspilled++;
      weir__batch_destroy(b);
    } else {
      list_append(&ch->late_head, &ch->late_tail, b);
    }
  } else {
    ch->pend_bytes += batch_bytes(b);
    list_append(&ch->pend_head, &ch->pend_tail, b);
  }
}

void weir__chan_push_front(weir__chan *ch, weir__batch *b) {
  uint64_t t = atomic_load_explicit(&ch->tail, memory_order_relaxed);
  uint64_t h = atomic_load_explicit(&ch->head, memory_order_acquire);
  if (t - h <= ch->mask) {
    b->next = NULL;
    publish(ch, b);
  } else {
    /* Not even the spare slot: first in line on the pending list. */
    WEIR_ASSERT(!ch->spill_after && !ch->late_head && !ch->nspilled);
    b->next = ch->pend_head;
    ch->pend_head = b;
    if (!ch->pend_tail) ch->pend_tail = b;
    ch->pend_bytes += batch_bytes(b);
    ch->npend++;
  }
}

uint32_t weir__chan_flush_pending(weir__chan *ch) {
  while (ch->npend && !ring_full(ch) && !ch->spill_err) {
    weir__batch *b = ch->pend_head;
    if (b) {
      ch->pend_head = b->next;
      if (!ch->pend_head) ch->pend_tail = NULL;
      ch->pend_bytes -= batch_bytes(b);
    } else if (ch->nspilled) {
      if (!(b = unspill_batch(ch))) break;
      if (--ch->nspilled == 0) (void)weir__spill_reset(ch->spill);
    } else {
      /* Only batches that waited behind the file are left: they are next. */
      WEIR_ASSERT(ch->late_head);
      for (weir__batch *l = ch->late_head; l; l = l->next) ch->pend_bytes += batch_bytes(l);
      ch->pend_head = ch->late_head;
      ch->pend_tail = ch->late_tail;
      ch->late_head = ch->late_tail = NULL;
      continue;
    }
    ch->npend--;
    b->next = NULL;
    publish(ch, b);
  }
  return ch->npend;
}

int weir__chan_writable(weir__chan *ch) {
  if (ch->unbounded) {
    /* Never blocks its producer; what waits on the pending list moves on
     * when the consumer frees room and wakes the producer. */
    if (weir__chan_flush_pending(ch)) {
      atomic_store(&ch->producer_waiting, 1);
      atomic_thread_fence(memory_order_seq_cst);
      if (weir__chan_flush_pending(ch) == 0) atomic_store(&ch->producer_waiting, 0);
    }
    return 1;
  }
  if (weir__chan_flush_pending(ch) == 0 && !ring_full(ch)) return 1;
  atomic_store(&ch->producer_waiting, 1);
  atomic_thread_fence(memory_order_seq_cst);
  if (weir__chan_flush_pending(ch) == 0 && !ring_full(ch)) {
    /* Room appeared meanwhile; a wake-up may still come (harmless). */
    atomic_store(&ch->producer_waiting, 0);
    return 1;
  }
  return 0;
}

weir__batch *weir__chan_peek(weir__chan *ch) {
  uint64_t h = atomic_load_explicit(&ch->head, memory_order_relaxed);
  uint64_t t = atomic_load_explicit(&ch->tail, memory_order_acquire);
  return h == t ? NULL : ch->ring[h & ch->mask];
}

void weir__chan_release(weir__chan *ch) {
  uint64_t h = atomic_load_explicit(&ch->head, memory_order_relaxed);
  weir__batch *b = ch->ring[h & ch->mask];
  /* Recycle through the return ring, or free when it is full (only after a
   * pending overflow put more batches in circulation than it holds). */
  uint64_t fh = atomic_load_explicit(&ch->fhead, memory_order_acquire);
  if (ch->ftail - fh <= ch->fmask) {
    ch->fring[ch->ftail & ch->fmask] = b;
    ch->ftail++;
    atomic_store_explicit(&ch->ftail_pub, ch->ftail, memory_order_release);
  } else {
    weir__batch_destroy(b);
  }
  atomic_store_explicit(&ch->head, h + 1, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&ch->producer_waiting, memory_order_relaxed) &&
      atomic_exchange(&ch->producer_waiting, 0) && ch->notify)
    ch->notify(ch->producer);
}

int weir__chan_wait(weir__chan *ch) {
  atomic_store(&ch->consumer_waiting, 1);
  atomic_thread_fence(memory_order_seq_cst);
  if (weir__chan_peek(ch)) {
    atomic_store(&ch->consumer_waiting, 0);
    return 1;
  }
  return 0;
}

uint32_t weir__chan_size(weir__chan *ch) {
  return (uint32_t)(atomic_load(&ch->tail) - atomic_load(&ch->head));
}
