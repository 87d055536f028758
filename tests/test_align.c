/* test_align.c: the barrier alignment state machine (engine/src/align.c),
 * driven by scripted events on 1–3 inputs, without threads. Each script
 * also keeps a model of which records a snapshot may reflect: a record that
 * arrives on an input after that input delivered barrier n must not be
 * read before snapshot n, i.e. the input is not readable. */
#include <criterion/criterion.h>

#include "align.h"
#include "helpers.h"

#define E WEIR__ALIGN_EXACTLY_ONCE

Test(align, single_input_completes_at_once) {
  weir__align a;
  weir__align_init(&a, 1, E);
  cr_assert_eq(weir__align_barrier(&a, 0, 1, 100), WEIR__ALIGN_COMPLETE);
  cr_assert(!weir__align_readable(&a, 0)); /* until the snapshot is taken */
  cr_assert_eq(weir__align_done(&a), 1);
  cr_assert(weir__align_readable(&a, 0));
  cr_assert(weir__align_check(&a));
  weir__align_close(&a);
  cr_assert_eq(th_leak_check(), 0);
}

Test(align, blocks_aligned_inputs_until_all_arrive) {
  weir__align a;
  weir__align_init(&a, 3, E);
  cr_assert_eq(weir__align_barrier(&a, 1, 5, 10), WEIR__ALIGN_NONE);
  cr_assert(weir__align_check(&a));
  /* Records on input 1 after its barrier must wait: not readable. */
  cr_assert(!weir__align_readable(&a, 1));
  cr_assert(weir__align_readable(&a, 0));
  cr_assert(weir__align_readable(&a, 2));
  cr_assert_eq(weir__align_barrier(&a, 0, 5, 20), WEIR__ALIGN_NONE);
  cr_assert(!weir__align_readable(&a, 0));
  cr_assert_eq(a.started_ns, 10);
  cr_assert_eq(weir__align_barrier(&a, 2, 5, 30), WEIR__ALIGN_COMPLETE);
  cr_assert(weir__align_check(&a));
  cr_assert_eq(weir__align_done(&a), 5);
  for (uint32_t i = 0; i < 3; i++) cr_assert(weir__align_readable(&a, i));
  cr_assert_eq(a.last, 5);
  weir__align_close(&a);
  cr_assert_eq(th_leak_check(), 0);
}

Test(align, ended_input_counts_as_aligned) {
  weir__align a;
  weir__align_init(&a, 2, E);
  cr_assert_eq(weir__align_end(&a, 0), WEIR__ALIGN_NONE); /* idle: nothing to complete */
  cr_assert_eq(weir__align_barrier(&a, 1, 3, 0), WEIR__ALIGN_COMPLETE);
  cr_assert_eq(weir__align_done(&a), 3);
  cr_assert(weir__align_check(&a));
  weir__align_close(&a);
  cr_assert_eq(th_leak_check(), 0);
}

Test(align, end_of_input_during_alignment_completes_it) {
  weir__align a;
  weir__align_init(&a, 3, E);
  cr_assert_eq(weir__align_barrier(&a, 0, 7, 0), WEIR__ALIGN_NONE);
  cr_assert_eq(weir__align_end(&a, 1), WEIR__ALIGN_NONE);
  cr_assert(weir__align_check(&a));
  cr_assert_eq(weir__align_end(&a, 2), WEIR__ALIGN_COMPLETE);
  cr_assert_eq(weir__align_done(&a), 7);
  cr_assert(weir__align_readable(&a, 0));
  cr_assert(weir__align_check(&a));
  weir__align_close(&a);
  cr_assert_eq(th_leak_check(), 0);
}

Test(align, blocked_input_that_ends_stays_counted) {
  weir__align a;
  weir__align_init(&a, 2, E);
  cr_assert_eq(weir__align_barrier(&a, 0, 4, 0), WEIR__ALIGN_NONE);
  cr_assert_eq(weir__align_end(&a, 0), WEIR__ALIGN_NONE);
  cr_assert(weir__align_check(&a));
  cr_assert_eq(weir__align_barrier(&a, 1, 4, 0), WEIR__ALIGN_COMPLETE);
  cr_assert_eq(weir__align_done(&a), 4);
  weir__align_close(&a);
  cr_assert_eq(th_leak_check(), 0);
}

Test(align, newer_barrier_abandons_older_alignment) {
  weir__align a;
  weir__align_init(&a, 2, E);
  cr_assert_eq(weir__align_barrier(&a, 0, 1, 0), WEIR__ALIGN_NONE);
  /* Checkpoint 1 was aborted upstream; 2 arrives on the other input. */
  cr_assert_eq(weir__align_barrier(&a, 1, 2, 0), WEIR__ALIGN_NONE);
  cr_assert(weir__align_check(&a));
  cr_assert_eq(a.cur, 2);
  cr_assert(weir__align_readable(&a, 0)); /* unblocked: it owes barrier 2 */
  cr_assert(!weir__align_readable(&a, 1));
  /* The late barrier 1 on input 1 can no longer come (FIFO), but a stale
   * one on input 0 is dropped. */
  cr_assert_eq(weir__align_barrier(&a, 0, 1, 0), WEIR__ALIGN_STALE);
  cr_assert_eq(weir__align_barrier(&a, 0, 2, 0), WEIR__ALIGN_COMPLETE);
  cr_assert_eq(weir__align_done(&a), 2);
  cr_assert_eq(weir__align_barrier(&a, 0, 2, 0), WEIR__ALIGN_STALE);
  weir__align_close(&a);
  cr_assert_eq(th_leak_check(), 0);
}

Test(align, at_least_once_never_blocks) {
  weir__align a;
  weir__align_init(&a, 2, WEIR__ALIGN_AT_LEAST_ONCE);
  cr_assert_eq(weir__align_barrier(&a, 0, 9, 0), WEIR__ALIGN_NONE);
  cr_assert(weir__align_readable(&a, 0));
  cr_assert(weir__align_readable(&a, 1));
  cr_assert(weir__align_check(&a));
  cr_assert_eq(weir__align_barrier(&a, 1, 9, 0), WEIR__ALIGN_COMPLETE);
  cr_assert_eq(weir__align_done(&a), 9);
  weir__align_close(&a);
  cr_assert_eq(th_leak_check(), 0);
}

/* Random interleavings on 3 inputs: each input carries barriers 1..20 in
 * order with records between them; the model checks that no input is read
 * between its barrier n and the completion of n, and that every checkpoint
 * completes exactly once, in order. */
Test(align, random_interleavings_keep_the_cut) {
  unsigned seed = 12345;
  for (int round = 0; round < 200; round++) {
    weir__align a;
    weir__align_init(&a, 3, E);
    int next[3] = {1, 1, 1}; /* next barrier each input will deliver */
    int ended[3] = {0, 0, 0};
    uint64_t expect = 1;
    int steps = 0;
    while (steps++ < 10000) {
      int i = (int)(rand_r(&seed) % 3);
      if (ended[i] || !weir__align_readable(&a, i)) continue;
      int what = (int)(rand_r(&seed) % 10);
      if (what == 0 && round % 4 == 0 && next[i] > 10) {
        ended[i] = 1;
        weir__align_result r = weir__align_end(&a, (uint32_t)i);
        if (r == WEIR__ALIGN_COMPLETE) cr_assert_eq(weir__align_done(&a), expect++);
      } else if (what < 4 && next[i] <= 20) {
        weir__align_result r = weir__align_barrier(&a, (uint32_t)i, (uint64_t)next[i]++, 0);
        cr_assert_neq(r, WEIR__ALIGN_STALE);
        if (r == WEIR__ALIGN_COMPLETE) cr_assert_eq(weir__align_done(&a), expect++);
      }
      cr_assert(weir__align_check(&a), "round %d step %d", round, steps);
      if ((next[0] > 20 || ended[0]) && (next[1] > 20 || ended[1]) && (next[2] > 20 || ended[2]))
        break;
    }
    cr_assert_eq(a.cur, 0, "round %d: an alignment never completed", round);
    weir__align_close(&a);
  }
  cr_assert_eq(th_leak_check(), 0);
}
