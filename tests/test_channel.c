/* test_channel.c: unit tests of the SPSC batch channel (engine/src/channel.c),
 * single-threaded, by scripted producer and consumer calls.
 *
 * Covers: FIFO order of data batches and control events (EOI); the bound
 * (weir__chan_try_push refuses with WEIR_EAGAIN once `cap` batches are
 * queued, weir__chan_writable() then returns 0 and sets producer_waiting, and
 * the consumer's next release notifies the producer exactly once); pending
 * overflow of weir__chan_push and weir__chan_flush_pending, order preserved;
 * the consumer's wait/notify handshake and its coalescing; batch recycling
 * through the return ring (and freeing when it is full); destroying a
 * channel with batches in the ring, on the pending list and in the return
 * ring (leaks are caught by LeakSanitizer through th_leak_check()).
 * Feedback (unbounded) channels: pending batches beyond the memory bound go
 * to a spill file and come back in order, control events included; when
 * the file cannot be created or fails part-way, batches wait in memory
 * behind it, order kept; a spill file that lost data is reported, never
 * read as batches; no spill file outlives its channel.
 *
 * The notify callback counts calls per side; `who` is the address of one of
 * the two counters, so a wake-up sent to the wrong side is noticed.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"
#include "helpers.h"
#include "spill.h"
#include "base/failpoint.h"

typedef struct sides {
  int producer, consumer; /* notify() calls received */
  int other;              /* calls with an unknown `who` */
} sides;

static sides g_sides; /* per test process: Criterion forks each test */

static void count_notify(void *who) {
  if (who == &g_sides.producer)
    g_sides.producer++;
  else if (who == &g_sides.consumer)
    g_sides.consumer++;
  else
    g_sides.other++;
}

static weir__chan *new_chan(uint32_t cap, uint32_t batch_records) {
  memset(&g_sides, 0, sizeof g_sides);
  return weir__chan_create(cap, batch_records, count_notify, &g_sides.producer, &g_sides.consumer);
}

/* A data batch holding the keys first, first+1, ..., first+n-1, each with an
 * 8-byte payload equal to its key. */
static weir__batch *data_batch(weir__chan *ch, uint64_t first, uint32_t n) {
  weir__batch *b = weir__chan_batch(ch);
  cr_assert_not_null(b);
  cr_assert_eq(b->kind, WEIR__MSG_DATA);
  cr_assert_eq(b->len, 0);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t k = first + i;
    cr_assert(weir__batch_fits(b, 8));
    weir__batch_append(b, k, (int64_t)k, k, &k, 8);
  }
  return b;
}

static weir__batch *eoi_batch(weir__chan *ch) {
  weir__batch *b = weir__chan_batch(ch);
  b->kind = WEIR__MSG_EOI;
  return b;
}

/* Consumer: takes the oldest batch, checks it is data with keys first.., and
 * releases it. */
static void expect_data(weir__chan *ch, uint64_t first, uint32_t n) {
  weir__batch *b = weir__chan_peek(ch);
  cr_assert_not_null(b, "expected a data batch starting at %llu", (unsigned long long)first);
  cr_assert_eq(b->kind, WEIR__MSG_DATA);
  cr_assert_eq(b->len, n, "batch starting at %llu: %u records, expected %u",
               (unsigned long long)first, b->len, n);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t k = first + i, v;
    cr_assert_eq(b->keys[i], k);
    cr_assert_eq(b->ids[i], k);
    cr_assert_eq(b->lens[i], 8);
    memcpy(&v, b->data + b->off[i], 8);
    cr_assert_eq(v, k);
  }
  weir__chan_release(ch);
}

static void expect_eoi(weir__chan *ch) {
  weir__batch *b = weir__chan_peek(ch);
  cr_assert_not_null(b, "expected an end-of-input event");
  cr_assert_eq(b->kind, WEIR__MSG_EOI);
  weir__chan_release(ch);
}

Test(channel, fifo_data_and_control_events) {
  weir__chan *ch = new_chan(8, 4);
  cr_assert_null(weir__chan_peek(ch));
  cr_assert_eq(weir__chan_size(ch), 0);
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 0, 4)), 0);
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 4, 2)), 0);
  weir__batch *bar = weir__chan_batch(ch);
  bar->kind = WEIR__MSG_BARRIER;
  bar->barrier_id = 7;
  cr_assert_eq(weir__chan_try_push(ch, bar), 0);
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 6, 3)), 0);
  cr_assert_eq(weir__chan_try_push(ch, eoi_batch(ch)), 0);
  cr_assert_eq(weir__chan_size(ch), 5);

  expect_data(ch, 0, 4);
  expect_data(ch, 4, 2);
  weir__batch *b = weir__chan_peek(ch);
  cr_assert_not_null(b);
  cr_assert_eq(b->kind, WEIR__MSG_BARRIER);
  cr_assert_eq(b->barrier_id, 7);
  /* Peek does not consume. */
  cr_assert_eq(weir__chan_peek(ch), b);
  weir__chan_release(ch);
  expect_data(ch, 6, 3);
  expect_eoi(ch);
  cr_assert_null(weir__chan_peek(ch));
  cr_assert_eq(weir__chan_size(ch), 0);
  /* Nobody waited, so nobody was notified. */
  cr_assert_eq(g_sides.producer, 0);
  cr_assert_eq(g_sides.consumer, 0);
  cr_assert_eq(g_sides.other, 0);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, fifo_across_ring_wraparound) {
  /* cap 3 (ring of 4 slots): many rounds wrap head and tail many times. */
  weir__chan *ch = new_chan(3, 2);
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 1000; round++) {
    int n = 1 + round % 3;
    for (int i = 0; i < n; i++) {
      cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, next_in, 2)), 0);
      next_in += 2;
    }
    for (int i = 0; i < n; i++) {
      expect_data(ch, next_out, 2);
      next_out += 2;
    }
  }
  cr_assert_null(weir__chan_peek(ch));
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, bound_and_producer_wakeup) {
  const uint32_t cap = 3;
  weir__chan *ch = new_chan(cap, 4);
  cr_assert_eq(weir__chan_writable(ch), 1);
  cr_assert_eq(atomic_load(&ch->producer_waiting), 0);
  for (uint32_t i = 0; i < cap; i++) {
    cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 4 * i, 4)), 0);
    cr_assert_eq(weir__chan_size(ch), i + 1);
  }
  /* Full: refused, and the producer keeps the batch. */
  weir__batch *extra = data_batch(ch, 4 * cap, 4);
  cr_assert_eq(weir__chan_try_push(ch, extra), WEIR_EAGAIN);
  cr_assert_eq(weir__chan_size(ch), cap);
  cr_assert_eq(ch->npend, 0);
  cr_assert_eq(weir__chan_try_push(ch, extra), WEIR_EAGAIN);

  /* Not writable: the producer announced that it waits. */
  cr_assert_eq(weir__chan_writable(ch), 0);
  cr_assert_eq(atomic_load(&ch->producer_waiting), 1);
  cr_assert_eq(g_sides.producer, 0);

  /* The consumer frees one slot: exactly one wake-up for the producer. */
  expect_data(ch, 0, 4);
  cr_assert_eq(g_sides.producer, 1);
  cr_assert_eq(g_sides.consumer, 0);
  cr_assert_eq(atomic_load(&ch->producer_waiting), 0);
  /* Further releases do not notify again: the producer has not waited since. */
  expect_data(ch, 4, 4);
  cr_assert_eq(g_sides.producer, 1);

  cr_assert_eq(weir__chan_writable(ch), 1);
  cr_assert_eq(weir__chan_try_push(ch, extra), 0);
  expect_data(ch, 8, 4);
  expect_data(ch, 12, 4);
  cr_assert_null(weir__chan_peek(ch));
  cr_assert_eq(g_sides.producer, 1);

  /* A second waiting period gets its own, single, wake-up. */
  for (uint32_t i = 0; i < cap; i++) cr_assert_eq(weir__chan_try_push(ch, eoi_batch(ch)), 0);
  cr_assert_eq(weir__chan_writable(ch), 0);
  cr_assert_eq(weir__chan_writable(ch), 0); /* asking twice is one waiting period */
  for (uint32_t i = 0; i < cap; i++) expect_eoi(ch);
  cr_assert_eq(g_sides.producer, 2);
  cr_assert_eq(g_sides.consumer, 0);
  cr_assert_eq(g_sides.other, 0);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, cap_one) {
  weir__chan *ch = new_chan(1, 1);
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 0, 1)), 0);
  weir__batch *b = data_batch(ch, 1, 1);
  cr_assert_eq(weir__chan_try_push(ch, b), WEIR_EAGAIN);
  cr_assert_eq(weir__chan_writable(ch), 0);
  expect_data(ch, 0, 1);
  cr_assert_eq(g_sides.producer, 1);
  cr_assert_eq(weir__chan_try_push(ch, b), 0);
  expect_data(ch, 1, 1);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, pending_overflow_keeps_order) {
  const uint32_t cap = 2;
  weir__chan *ch = new_chan(cap, 3);
  /* One step emits 7 batches and an EOI: cap go to the ring, the rest wait. */
  for (uint64_t i = 0; i < 7; i++) weir__chan_push(ch, data_batch(ch, 3 * i, 3));
  weir__chan_push(ch, eoi_batch(ch));
  cr_assert_eq(weir__chan_size(ch), cap);
  cr_assert_eq(ch->npend, 6);
  cr_assert_eq(weir__chan_drained(ch), 0);
  /* Pending batches block try_push even when the ring has room. */
  cr_assert_eq(weir__chan_flush_pending(ch), 6);
  cr_assert_eq(weir__chan_writable(ch), 0);
  cr_assert_eq(atomic_load(&ch->producer_waiting), 1);

  expect_data(ch, 0, 3);
  cr_assert_eq(g_sides.producer, 1);
  cr_assert_eq(weir__chan_size(ch), cap - 1);
  weir__batch *b = data_batch(ch, 1000, 1);
  cr_assert_eq(weir__chan_try_push(ch, b), WEIR_EAGAIN, "a batch overtook pending ones");
  /* Room for one: flush moves exactly one. */
  cr_assert_eq(weir__chan_flush_pending(ch), 5);
  cr_assert_eq(weir__chan_size(ch), cap);
  /* Drain by alternating consumer releases and producer flushes. */
  uint64_t next = 3;
  while (!weir__chan_drained(ch)) {
    expect_data(ch, next, 3);
    next += 3;
    weir__chan_flush_pending(ch);
  }
  cr_assert_eq(next, 18); /* 18 and the EOI are left in the ring */
  cr_assert_eq(weir__chan_size(ch), cap);
  for (; next < 21; next += 3) expect_data(ch, next, 3);
  expect_eoi(ch);
  cr_assert_null(weir__chan_peek(ch));
  /* Push with room and nothing pending publishes at once. */
  weir__chan_push(ch, b);
  cr_assert_eq(ch->npend, 0);
  cr_assert_eq(weir__chan_size(ch), 1);
  expect_data(ch, 1000, 1);
  cr_assert_eq(weir__chan_writable(ch), 1);
  cr_assert_eq(g_sides.consumer, 0);
  cr_assert_eq(g_sides.other, 0);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, writable_flushes_pending) {
  weir__chan *ch = new_chan(2, 1);
  for (uint64_t i = 0; i < 4; i++) weir__chan_push(ch, data_batch(ch, i, 1));
  cr_assert_eq(ch->npend, 2);
  expect_data(ch, 0, 1);
  expect_data(ch, 1, 1);
  /* Room for both pending batches: writable() moves them but the ring is
   * then full, so it still says 0. */
  cr_assert_eq(weir__chan_writable(ch), 0);
  cr_assert_eq(ch->npend, 0);
  cr_assert_eq(weir__chan_size(ch), 2);
  expect_data(ch, 2, 1);
  cr_assert_eq(weir__chan_writable(ch), 1);
  expect_data(ch, 3, 1);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, consumer_wait_notify_coalesces) {
  weir__chan *ch = new_chan(4, 2);
  /* Empty: the consumer may sleep, and the producer will notify it. */
  cr_assert_eq(weir__chan_wait(ch), 0);
  cr_assert_eq(atomic_load(&ch->consumer_waiting), 1);
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 0, 2)), 0);
  cr_assert_eq(g_sides.consumer, 1);
  cr_assert_eq(atomic_load(&ch->consumer_waiting), 0);
  /* More data in the same waiting period: no second wake-up. */
  weir__chan_push(ch, data_batch(ch, 2, 2));
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 4, 2)), 0);
  cr_assert_eq(g_sides.consumer, 1);
  /* Wait with data present: returns 1 and does not leave the flag set. */
  cr_assert_eq(weir__chan_wait(ch), 1);
  cr_assert_eq(atomic_load(&ch->consumer_waiting), 0);
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 6, 2)), 0);
  cr_assert_eq(g_sides.consumer, 1);
  for (uint64_t k = 0; k < 8; k += 2) expect_data(ch, k, 2);
  /* A new waiting period: one wake-up again, by a pending flush too. */
  cr_assert_eq(weir__chan_wait(ch), 0);
  cr_assert_eq(weir__chan_wait(ch), 0); /* announcing twice is one period */
  weir__chan_push(ch, eoi_batch(ch));
  cr_assert_eq(g_sides.consumer, 2);
  expect_eoi(ch);
  cr_assert_eq(g_sides.producer, 0);
  cr_assert_eq(g_sides.other, 0);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, consumer_notified_by_flush_pending) {
  weir__chan *ch = new_chan(1, 1);
  weir__chan_push(ch, data_batch(ch, 0, 1));
  weir__chan_push(ch, data_batch(ch, 1, 1));
  cr_assert_eq(ch->npend, 1);
  expect_data(ch, 0, 1);
  cr_assert_eq(weir__chan_wait(ch), 0);
  cr_assert_eq(g_sides.consumer, 0);
  cr_assert_eq(weir__chan_flush_pending(ch), 0);
  cr_assert_eq(g_sides.consumer, 1);
  expect_data(ch, 1, 1);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, notify_may_be_null) {
  weir__chan *ch = weir__chan_create(1, 1, NULL, NULL, NULL);
  cr_assert_eq(weir__chan_wait(ch), 0);
  weir__chan_push(ch, weir__chan_batch(ch));
  weir__chan_push(ch, weir__chan_batch(ch));
  cr_assert_eq(weir__chan_writable(ch), 0);
  weir__chan_release(ch);
  cr_assert_eq(weir__chan_flush_pending(ch), 0);
  weir__chan_release(ch);
  cr_assert_null(weir__chan_peek(ch));
  weir__chan_destroy(ch);
  weir__chan_destroy(NULL);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, batches_are_recycled) {
  weir__chan *ch = new_chan(2, 4);
  weir__batch *b = data_batch(ch, 0, 4);
  cr_assert_eq(weir__chan_try_push(ch, b), 0);
  expect_data(ch, 0, 4);
  /* The released batch comes back, emptied. */
  weir__batch *again = weir__chan_batch(ch);
  cr_assert_eq(again, b);
  cr_assert_eq(again->len, 0);
  cr_assert_eq(again->used, 0);
  cr_assert_eq(again->kind, WEIR__MSG_DATA);
  /* An EOI batch is recycled as a data batch. */
  again->kind = WEIR__MSG_EOI;
  cr_assert_eq(weir__chan_try_push(ch, again), 0);
  expect_eoi(ch);
  weir__batch *c = weir__chan_batch(ch);
  cr_assert_eq(c, b);
  cr_assert_eq(c->kind, WEIR__MSG_DATA);
  /* Nothing to recycle: a fresh batch. */
  weir__batch *d = weir__chan_batch(ch);
  cr_assert_neq(d, c);
  /* Released in order, recycled in order. */
  cr_assert_eq(weir__chan_try_push(ch, c), 0);
  cr_assert_eq(weir__chan_try_push(ch, d), 0);
  weir__chan_release(ch);
  weir__chan_release(ch);
  cr_assert_eq(weir__chan_batch(ch), c);
  weir__batch *e = weir__chan_batch(ch);
  cr_assert_eq(e, d);
  weir__batch_destroy(c);
  weir__batch_destroy(e);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, oversized_arena_shrinks_on_recycle) {
  weir__chan *ch = new_chan(1, 4);
  weir__batch *b = weir__chan_batch(ch);
  static uint8_t big[WEIR__ARENA_SOFT + 1000];
  memset(big, 0xab, sizeof big);
  cr_assert(weir__batch_fits(b, sizeof big)); /* an empty batch takes any record */
  weir__batch_append(b, 1, 0, 1, big, sizeof big);
  cr_assert_geq(b->arena_cap, sizeof big);
  cr_assert_eq(weir__chan_try_push(ch, b), 0);
  weir__batch *r = weir__chan_peek(ch);
  cr_assert_eq(r->lens[0], sizeof big);
  cr_assert_eq(memcmp(r->data + r->off[0], big, sizeof big), 0);
  weir__chan_release(ch);
  weir__batch *c = weir__chan_batch(ch);
  cr_assert_eq(c, b);
  cr_assert_leq(c->arena_cap, WEIR__ARENA_SOFT);
  weir__batch_destroy(c);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, return_ring_overflow_frees_extra_batches) {
  /* cap 1: the return ring has 4 slots; a pending overflow of 10 batches
   * puts more in circulation than it holds, and the extra ones are freed
   * when released (LeakSanitizer checks none is lost). */
  weir__chan *ch = new_chan(1, 2);
  for (uint64_t i = 0; i < 10; i++) weir__chan_push(ch, data_batch(ch, 2 * i, 2));
  cr_assert_eq(ch->npend, 9);
  for (uint64_t i = 0; i < 10; i++) {
    expect_data(ch, 2 * i, 2);
    weir__chan_flush_pending(ch);
  }
  cr_assert_null(weir__chan_peek(ch));
  /* The producer gets back at most the return ring's size, then new ones. */
  weir__batch *got[6];
  for (int i = 0; i < 6; i++) got[i] = weir__chan_batch(ch);
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(got[i]->len, 0);
    for (int k = 0; k < i; k++) cr_assert_neq(got[i], got[k]);
  }
  /* Hand them all through the channel again, in order. */
  for (int i = 0; i < 6; i++) {
    uint64_t k = 100 + (uint64_t)i;
    weir__batch_append(got[i], k, 0, k, &k, 8);
    weir__chan_push(ch, got[i]);
  }
  for (int i = 0; i < 6; i++) {
    expect_data(ch, 100 + (uint64_t)i, 1);
    weir__chan_flush_pending(ch);
  }
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, destroy_with_batches_everywhere) {
  weir__chan *ch = new_chan(2, 8);
  /* Two batches go through and come back to the return ring. */
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 0, 8)), 0);
  cr_assert_eq(weir__chan_try_push(ch, data_batch(ch, 8, 8)), 0);
  weir__chan_release(ch);
  weir__chan_release(ch);
  /* Fresh batches (the return ring is not used for them): two in the ring,
   * three pending, one of them an EOI. */
  weir__batch *fresh[5];
  for (int i = 0; i < 5; i++) fresh[i] = weir__batch_create(8);
  for (int i = 0; i < 5; i++) {
    uint64_t k = 16 + (uint64_t)i;
    weir__batch_append(fresh[i], k, 0, k, &k, 8);
    if (i == 4) fresh[i]->kind = WEIR__MSG_EOI;
    weir__chan_push(ch, fresh[i]);
  }
  cr_assert_eq(weir__chan_size(ch), 2);
  cr_assert_eq(ch->npend, 3);
  cr_assert_neq(atomic_load(&ch->ftail_pub), atomic_load(&ch->fhead));
  /* The consumer has one peeked (not released): it is still in the ring. */
  cr_assert_not_null(weir__chan_peek(ch));
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

Test(channel, destroy_empty_and_fresh) {
  weir__chan_destroy(new_chan(1, 1));
  weir__chan *ch = new_chan(5, 1024);
  cr_assert_eq(ch->cap, 5);
  cr_assert_geq(ch->mask + 1, 5);
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- spilling feedback edges ------------------------------------------------ */

static char *spill_tmp;

static void spill_setup(void) {
  spill_tmp = th_tmpdir();
  cr_assert_not_null(spill_tmp);
}

static void spill_teardown(void) {
  th_arm_failpoints(NULL);
  cr_assert_eq(th_count_entries(spill_tmp), 0, "a spill file was left behind");
  th_rmrf(spill_tmp);
  free(spill_tmp);
}

/* An unbounded (feedback) channel of cap 2 whose pending list spills after
 * about two batches; one step emits `n` batches of 3 records (payloads of
 * growing size, a barrier every 5th batch) and an EOI, then the consumer
 * drains, the producer flushing between releases. Returns how many batches
 * were in the spill file at most. */
static uint32_t spill_run(uint32_t n) {
  weir__chan *ch = new_chan(2, 3);
  ch->unbounded = 1;
  ch->spill_after = 2 * (3 * 32 + 3 * 16);
  ch->spill_dir = spill_tmp;
  for (uint64_t i = 0; i < n; i++) {
    weir__batch *b;
    if (i % 5 == 4) {
      b = weir__chan_batch(ch);
      b->kind = WEIR__MSG_BARRIER;
      b->barrier_id = i;
    } else {
      b = data_batch(ch, 3 * i, 3);
    }
    weir__chan_push(ch, b);
  }
  weir__chan_push(ch, eoi_batch(ch));
  uint32_t most = ch->nspilled;
  cr_assert_eq(ch->npend, n + 1 - 2);
  cr_assert_eq(weir__chan_writable(ch), 1, "a feedback edge never refuses");
  for (uint64_t i = 0; i < n; i++) {
    if (i % 5 == 4) {
      weir__batch *b = weir__chan_peek(ch);
      cr_assert_not_null(b);
      cr_assert_eq(b->kind, WEIR__MSG_BARRIER, "batch %llu", (unsigned long long)i);
      cr_assert_eq(b->barrier_id, i);
      weir__chan_release(ch);
    } else {
      expect_data(ch, 3 * i, 3);
    }
    weir__chan_flush_pending(ch);
    cr_assert_eq(ch->spill_err, 0);
  }
  expect_eoi(ch);
  cr_assert_null(weir__chan_peek(ch));
  cr_assert(weir__chan_drained(ch));
  /* The next overflow spills again into the same (emptied) file. */
  for (uint64_t i = 0; i < 8; i++) weir__chan_push(ch, data_batch(ch, 100 * i, 3));
  for (uint64_t i = 0; i < 8; i++) {
    expect_data(ch, 100 * i, 3);
    weir__chan_flush_pending(ch);
  }
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
  return most;
}

TestSuite(spill, .init = spill_setup, .fini = spill_teardown);

Test(spill, feedback_overflow_goes_to_a_file_in_order) {
  uint32_t most = spill_run(40);
  cr_assert_geq(most, 30, "only %u of 40 batches were spilled", most);
}

Test(spill, file_that_cannot_be_created_keeps_batches_in_memory) {
  th_arm_failpoints("spill.open=error+");
  cr_assert_eq(spill_run(40), 0);
  cr_assert_geq(weir_failpoint_hits("spill.open"), 1);
}

Test(spill, write_failing_part_way_keeps_order) {
  /* Batches 1-3 of the overflow go to the file, the rest wait behind it. */
  th_arm_failpoints("spill.write=error@4+");
  cr_assert_eq(spill_run(40), 3);
}

Test(spill, unreadable_file_is_reported) {
  weir__chan *ch = new_chan(1, 3);
  ch->unbounded = 1;
  ch->spill_after = 1;
  ch->spill_dir = spill_tmp;
  for (uint64_t i = 0; i < 4; i++) weir__chan_push(ch, data_batch(ch, 3 * i, 3));
  cr_assert_eq(ch->nspilled, 3);
  th_arm_failpoints("spill.read=error+");
  expect_data(ch, 0, 3);
  weir__chan_flush_pending(ch);
  cr_assert_neq(ch->spill_err, 0, "a short spill file went unnoticed");
  cr_assert_null(weir__chan_peek(ch));
  weir__chan_destroy(ch);
  cr_assert_eq(th_leak_check(), 0);
}
