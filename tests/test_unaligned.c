/* test_unaligned.c: the unaligned barrier handler (engine/src/unaligned.c)
 * as a pure state machine, driven by scripted events without threads:
 * barriers overtaking 0, 1 and many buffered batches, barriers on several
 * inputs in different orders, a newer barrier while recording, end of
 * input, the alignment timeout's start with inputs already passed; and a
 * randomized model check of the cut itself.
 *
 * The model: each input is a FIFO of data batches and barriers. A task
 * consumes from the front; it sees (scans) barriers anywhere in its
 * queues. For checkpoint n the cut must account for every record that was
 * sent before barrier n on some input exactly once: either it was
 * processed before the cut (in the snapshot) or it was logged as channel
 * state; and no record sent after barrier n may be in either. */
#include <criterion/criterion.h>

#include <stdlib.h>

#include "helpers.h"
#include "unaligned.h"

Test(unaligned, single_input_overtakes_nothing) {
  weir__unalign u;
  weir__unalign_init(&u, 1);
  /* Barrier 1 at the front of the only input: cut, nothing to log. */
  cr_assert_eq(weir__unalign_seen(&u, 0, 1), WEIR__UN_CUT);
  cr_assert_eq(u.want, 1);
  cr_assert_eq(weir__unalign_start(&u, 1, NULL), WEIR__UN_NONE);
  cr_assert(weir__unalign_check(&u));
  cr_assert_eq(weir__unalign_barrier(&u, 0, 1), WEIR__UN_COMPLETE);
  cr_assert_eq(u.records[0], 0);
  cr_assert_eq(weir__unalign_done(&u), 1);
  cr_assert(weir__unalign_check(&u));
  /* Seen again (still in the ring) or consumed later: stale. */
  cr_assert_eq(weir__unalign_seen(&u, 0, 1), WEIR__UN_NONE);
  weir__unalign_close(&u);
  cr_assert_eq(th_leak_check(), 0);
}

Test(unaligned, overtakes_one_and_many_batches) {
  for (uint32_t nb = 1; nb <= 64; nb *= 4) {
    weir__unalign u;
    weir__unalign_init(&u, 1);
    cr_assert_eq(weir__unalign_seen(&u, 0, 7), WEIR__UN_CUT);
    cr_assert_eq(weir__unalign_start(&u, 7, NULL), WEIR__UN_NONE);
    for (uint32_t b = 0; b < nb; b++) cr_assert(weir__unalign_data(&u, 0, 100));
    cr_assert_eq(weir__unalign_barrier(&u, 0, 7), WEIR__UN_COMPLETE);
    cr_assert_eq(u.batches[0], nb);
    cr_assert_eq(u.records[0], 100ull * nb);
    cr_assert_eq(weir__unalign_done(&u), 7);
    /* After the barrier: nothing is logged any more. */
    cr_assert(!weir__unalign_data(&u, 0, 100));
    cr_assert(weir__unalign_check(&u));
    weir__unalign_close(&u);
  }
  cr_assert_eq(th_leak_check(), 0);
}

Test(unaligned, several_inputs_in_any_order) {
  /* Three inputs; barrier 3 is seen first on input 2, then arrives on
   * 0 and 1 in both orders. */
  for (int order = 0; order < 2; order++) {
    weir__unalign u;
    weir__unalign_init(&u, 3);
    cr_assert_eq(weir__unalign_seen(&u, 2, 3), WEIR__UN_CUT);
    cr_assert_eq(weir__unalign_start(&u, 3, NULL), WEIR__UN_NONE);
    cr_assert_eq(u.nlogging, 3);
    /* Seeing the same barrier on another input: no second cut. */
    cr_assert_eq(weir__unalign_seen(&u, 0, 3), WEIR__UN_NONE);
    cr_assert(weir__unalign_data(&u, 2, 10)); /* overtaken on input 2 */
    cr_assert_eq(weir__unalign_barrier(&u, 2, 3), WEIR__UN_NONE);
    cr_assert(!weir__unalign_data(&u, 2, 10)); /* after barrier 3 on input 2 */
    uint32_t a = order ? 1 : 0, b = order ? 0 : 1;
    cr_assert(weir__unalign_data(&u, a, 5));
    cr_assert(weir__unalign_data(&u, b, 6));
    cr_assert_eq(weir__unalign_barrier(&u, a, 3), WEIR__UN_NONE);
    cr_assert(!weir__unalign_data(&u, a, 5));
    cr_assert(weir__unalign_data(&u, b, 6));
    cr_assert(weir__unalign_check(&u));
    cr_assert_eq(weir__unalign_barrier(&u, b, 3), WEIR__UN_COMPLETE);
    cr_assert_eq(u.records[2], 10);
    cr_assert_eq(u.records[a], 5);
    cr_assert_eq(u.records[b], 12);
    cr_assert_eq(weir__unalign_done(&u), 3);
    cr_assert(weir__unalign_check(&u));
    weir__unalign_close(&u);
  }
  cr_assert_eq(th_leak_check(), 0);
}

Test(unaligned, newer_barrier_abandons_the_recording) {
  weir__unalign u;
  weir__unalign_init(&u, 2);
  cr_assert_eq(weir__unalign_seen(&u, 0, 4), WEIR__UN_CUT);
  cr_assert_eq(weir__unalign_start(&u, 4, NULL), WEIR__UN_NONE);
  cr_assert_eq(weir__unalign_barrier(&u, 0, 4), WEIR__UN_NONE);
  cr_assert(weir__unalign_data(&u, 1, 3));
  /* Checkpoint 4 was aborted; barrier 5 shows up on input 0. */
  cr_assert_eq(weir__unalign_seen(&u, 0, 5), WEIR__UN_CUT);
  cr_assert_eq(u.want, 5);
  cr_assert_eq(weir__unalign_start(&u, 5, NULL), WEIR__UN_NONE);
  cr_assert_eq(u.abandoned, 4);
  cr_assert_eq(u.cur, 5);
  cr_assert_eq(u.records[1], 0); /* counts restart */
  /* The old barrier 4 still on input 1: stale, input 1 keeps logging. */
  cr_assert_eq(weir__unalign_barrier(&u, 1, 4), WEIR__UN_NONE);
  cr_assert(weir__unalign_data(&u, 1, 2));
  cr_assert_eq(weir__unalign_barrier(&u, 0, 5), WEIR__UN_NONE);
  cr_assert_eq(weir__unalign_barrier(&u, 1, 5), WEIR__UN_COMPLETE);
  cr_assert_eq(weir__unalign_done(&u), 5);
  cr_assert(weir__unalign_check(&u));
  weir__unalign_close(&u);
  cr_assert_eq(th_leak_check(), 0);
}

Test(unaligned, end_of_input) {
  weir__unalign u;
  weir__unalign_init(&u, 3);
  /* Input 1 ended before the cut: never logged. */
  cr_assert_eq(weir__unalign_end(&u, 1), WEIR__UN_NONE);
  cr_assert_eq(weir__unalign_seen(&u, 0, 2), WEIR__UN_CUT);
  cr_assert_eq(weir__unalign_start(&u, 2, NULL), WEIR__UN_NONE);
  cr_assert_eq(u.nlogging, 2);
  cr_assert(!weir__unalign_data(&u, 1, 1) || 0);
  /* Input 2 ends while logging: its records before the end were logged,
   * the end counts as its barrier. */
  cr_assert(weir__unalign_data(&u, 2, 8));
  cr_assert_eq(weir__unalign_end(&u, 2), WEIR__UN_NONE);
  cr_assert_eq(weir__unalign_barrier(&u, 0, 2), WEIR__UN_COMPLETE);
  cr_assert_eq(weir__unalign_done(&u), 2);
  /* Every input ended or delivered: the next cut completes at once unless
   * input 0 is live. */
  cr_assert_eq(weir__unalign_end(&u, 0), WEIR__UN_NONE);
  cr_assert_eq(weir__unalign_seen(&u, 0, 3), WEIR__UN_CUT);
  cr_assert_eq(weir__unalign_start(&u, 3, NULL), WEIR__UN_COMPLETE);
  cr_assert_eq(weir__unalign_done(&u), 3);
  cr_assert(weir__unalign_check(&u));
  weir__unalign_close(&u);
  cr_assert_eq(th_leak_check(), 0);
}

Test(unaligned, timeout_switch_skips_passed_inputs) {
  weir__unalign u;
  weir__unalign_init(&u, 3);
  /* Aligned so far: inputs 0 and 2 delivered barrier 6 (blocked). */
  uint8_t passed[3] = {1, 0, 1};
  cr_assert_eq(weir__unalign_start(&u, 6, passed), WEIR__UN_NONE);
  cr_assert_eq(u.nlogging, 1);
  cr_assert(!weir__unalign_data(&u, 0, 4)); /* after its barrier: not logged */
  cr_assert(weir__unalign_data(&u, 1, 4));
  cr_assert_eq(weir__unalign_barrier(&u, 1, 6), WEIR__UN_COMPLETE);
  cr_assert_eq(weir__unalign_done(&u), 6);
  /* All passed already: complete at once. */
  uint8_t all[3] = {1, 1, 1};
  cr_assert_eq(weir__unalign_start(&u, 7, all), WEIR__UN_COMPLETE);
  cr_assert_eq(weir__unalign_done(&u), 7);
  /* A cut taken another way (aligned) makes its barriers stale. */
  weir__unalign_taken(&u, 8);
  cr_assert_eq(weir__unalign_seen(&u, 1, 8), WEIR__UN_NONE);
  cr_assert_eq(weir__unalign_barrier(&u, 1, 8), WEIR__UN_NONE);
  cr_assert(weir__unalign_check(&u));
  weir__unalign_close(&u);
  cr_assert_eq(th_leak_check(), 0);
}

Test(unaligned, barrier_consumed_without_being_seen_asks_for_a_cut) {
  weir__unalign u;
  weir__unalign_init(&u, 2);
  cr_assert_eq(weir__unalign_barrier(&u, 1, 9), WEIR__UN_CUT);
  cr_assert_eq(u.want, 9);
  cr_assert_eq(weir__unalign_start(&u, 9, NULL), WEIR__UN_NONE);
  cr_assert_eq(weir__unalign_barrier(&u, 1, 9), WEIR__UN_NONE);
  cr_assert_eq(weir__unalign_barrier(&u, 0, 9), WEIR__UN_COMPLETE);
  weir__unalign_close(&u);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- the randomized model check ------------------------------------------- */

#define NIN 4
#define QMAX 64

typedef struct item {
  int captured; /* copied into the channel state while still queued */
  int barrier;  /* 0: a data batch */
  uint64_t id;  /* barrier id, or the batch's serial number */
  uint32_t n;   /* records */
} item;

static uint64_t rng = 0x1234567;
static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng % n);
}

Test(unaligned, model_check_of_the_cut) {
  for (int round = 0; round < 2000; round++) {
    uint32_t nin = 1 + rnd(NIN);
    item q[NIN][QMAX];
    uint32_t len[NIN], head[NIN];
    uint64_t before = 0; /* records sent before barrier 1, over all inputs */
    for (uint32_t i = 0; i < nin; i++) {
      /* Each input: some batches, barrier 1, some batches, maybe an end. */
      uint32_t a = rnd(6), b = rnd(6);
      len[i] = head[i] = 0;
      for (uint32_t k = 0; k < a; k++) {
        q[i][len[i]++] = (item){0, 0, k, 1 + rnd(50)};
        before += q[i][len[i] - 1].n;
      }
      q[i][len[i]++] = (item){0, 1, 1, 0};
      for (uint32_t k = 0; k < b; k++) q[i][len[i]++] = (item){0, 0, 100 + k, 1 + rnd(50)};
    }
    weir__unalign u;
    weir__unalign_init(&u, nin);
    uint64_t in_state = 0, logged = 0, after = 0;
    int cut = 0, complete = 0, capture = round % 2;
    /* Barriers become visible to the scan only once "arrived": model
     * arrival as a per-input prefix that grows. */
    uint32_t arrived[NIN];
    for (uint32_t i = 0; i < nin; i++) arrived[i] = rnd(len[i] + 1);
    for (int step = 0; step < 10000 && !complete; step++) {
      uint32_t i = rnd(nin);
      if (arrived[i] < len[i] && rnd(2)) arrived[i]++;
      /* Scan what arrived. */
      for (uint32_t k = 0; k < nin && !cut; k++)
        for (uint32_t p = head[k]; p < arrived[k]; p++)
          if (q[k][p].barrier && weir__unalign_seen(&u, k, q[k][p].id) == WEIR__UN_CUT) {
            cut = 1;
            if (weir__unalign_start(&u, u.want, NULL) == WEIR__UN_COMPLETE) complete = 1;
            break;
          }
      /* The task (task.c, un_capture) may copy the batches in front of a
       * barrier in sight on a logging input at once: that input then
       * counts as delivered (the model does it at random). */
      for (uint32_t k = 0; k < nin && cut && !complete && capture; k++) {
        if (u.in[k] != WEIR__UN_LOGGING) continue;
        uint32_t p = head[k];
        while (p < arrived[k] && !q[k][p].barrier) p++;
        if (p == arrived[k] || !rnd(2)) continue;
        for (uint32_t x = head[k]; x < p; x++) {
          q[k][x].captured = 1;
          logged += q[k][x].n;
        }
        if (weir__unalign_barrier(&u, k, u.cur) == WEIR__UN_COMPLETE) complete = 1;
      }
      cr_assert(weir__unalign_check(&u));
      if (head[i] >= arrived[i]) continue;
      item *it = &q[i][head[i]++];
      if (it->captured) {
        cr_assert(!weir__unalign_data(&u, i, it->n), "a captured batch is not logged again");
      } else if (it->barrier) {
        weir__unalign_result r = weir__unalign_barrier(&u, i, it->id);
        cr_assert(r != WEIR__UN_CUT, "every barrier was scanned before it was consumed");
        if (r == WEIR__UN_COMPLETE) complete = 1;
      } else if (weir__unalign_data(&u, i, it->n)) {
        logged += it->n;
        in_state += 0; /* processed after the cut: not in the snapshot */
      } else if (!cut) {
        in_state += it->n;
      } else {
        after += it->n; /* after barrier 1 on its input */
      }
    }
    cr_assert(complete, "round %d: the cut completes", round);
    cr_assert_eq(in_state + logged, before,
                 "round %d: every record before the barrier is in the snapshot (%llu) or the "
                 "channel state (%llu) exactly once, of %llu",
                 round, (unsigned long long)in_state, (unsigned long long)logged,
                 (unsigned long long)before);
    (void)after;
    cr_assert_eq(weir__unalign_done(&u), 1);
    weir__unalign_close(&u);
  }
  cr_assert_eq(th_leak_check(), 0);
}
