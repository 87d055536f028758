/* test_coordinator.c: the checkpoint coordinator (engine/src/coordinator.c)
 * as a pure state machine, driven by scripts of events without threads or
 * a store: each step names an event and the actions (or, for the tasks'
 * and the store's events, whether the coordinator thread must be woken)
 * and the state it must lead to. Covers the normal path, synchronous
 * checkpoints, unaligned cuts, write and commit failures (before and
 * behind the queued commit), timeouts, aborts, the tolerance of failures
 * in a row with the messages reported, the final checkpoint's retry, one
 * checkpoint at a time, and random interleavings checked against the
 * invariants. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "coordinator.h"
#include "helpers.h"
#include "weir/error.h"
#include "weir/job.h"

typedef enum {
  TRIGGER,       /* id; arg: final */
  STEP,          /* arg: now_ns */
  TIMEOUT,       /* */
  ABORT,         /* arg: status; the why and detail of the script */
  DECLINED,      /* after an ABORT, as job.c reports it */
  DRAINED,       /* id */
  CUT,           /* id; arg: align_ns */
  CUT_UNALIGNED, /* id; arg: align_ns */
  NO_CHANNELS,   /* id */
  CHAN_BYTES,    /* id; arg: bytes */
  QUEUED,        /* id */
  WRITTEN,       /* id; arg: bytes */
  WRITE_FAILED,  /* id; arg: status */
  COMMITTED,     /* */
  COMMIT_FAILED, /* arg: status */
  END
} ev;

typedef struct step {
  ev ev;
  uint64_t id;
  int64_t arg;
  unsigned want; /* actions, or 1 if the coordinator thread must be woken */
  weir__ck_state state;
} step;

enum { BAR = WEIR__CA_BARRIERS, SNAP = WEIR__CA_SNAPSHOT, COMMIT = WEIR__CA_COMMIT };
#define DONE (WEIR__CA_COMPLETE | WEIR__CA_NOTIFY)
#define ABORTED (WEIR__CA_ABORT | WEIR__CA_NOTIFY)
#define I WEIR__CK_IDLE
#define D WEIR__CK_DRAINING
#define W WEIR__CK_WRITING
#define F WEIR__CK_FAILING
#define C WEIR__CK_COMMITTING
#define K WEIR__CK_COMMITTED
#define STOP                                                                                       \
  { END, 0, 0, 0, I }

/* Runs a script; the last coordinator action is left in *last. */
static void run(weir__coord *co, const step *s, weir__coord_act *last) {
  for (int n = 0; s[n].ev != END; n++) {
    const step *e = &s[n];
    unsigned got = 0;
    weir__coord_act act;
    memset(&act, 0, sizeof act);
    int coordinator = 1;
    switch (e->ev) {
    case TRIGGER:
      cr_assert_eq(weir__coord_trigger(co, e->id, (int)e->arg, 1000, 5, &act), 0, "step %d", n);
      break;
    case STEP:
      weir__coord_step(co, (uint64_t)e->arg, &act);
      break;
    case TIMEOUT:
      weir__coord_timeout(co, &act);
      break;
    case ABORT:
      weir__coord_abort(co, (int)e->arg, "its commit could not be queued", "the store refused",
                        &act);
      break;
    case DECLINED:
      weir__coord_declined(co, last->ck.id, last->ck.final, last->why, last->ck.why, &act);
      break;
    default:
      coordinator = 0;
    }
    if (coordinator) {
      got = act.what;
      *last = act;
    }
    switch (e->ev) {
    case DRAINED:
      got = (unsigned)weir__coord_drained(co, e->id);
      break;
    case CUT:
    case CUT_UNALIGNED:
      weir__coord_cut(co, e->id, (uint64_t)e->arg, e->ev == CUT_UNALIGNED);
      break;
    case NO_CHANNELS:
      got = (unsigned)weir__coord_no_channels(co, e->id);
      break;
    case CHAN_BYTES:
      weir__coord_channel_bytes(co, e->id, (uint64_t)e->arg);
      break;
    case QUEUED:
      got = (unsigned)weir__coord_queued(co, e->id);
      break;
    case WRITTEN:
      got = (unsigned)weir__coord_written(co, e->id, 0, (uint64_t)e->arg, "");
      break;
    case WRITE_FAILED:
      got = (unsigned)weir__coord_written(co, e->id, (int)e->arg, 0, "no space left on device");
      break;
    case COMMITTED:
      got = (unsigned)weir__coord_committed(co, 0, "");
      break;
    case COMMIT_FAILED:
      got = (unsigned)weir__coord_committed(co, (int)e->arg, "the commit's transaction failed");
      break;
    default:
      break;
    }
    cr_assert_eq(got, e->want, "step %d: actions %#x, want %#x", n, got, e->want);
    cr_assert_eq(co->state, e->state, "step %d: state %d, want %d", n, co->state, e->state);
    cr_assert(weir__coord_check(co), "step %d: invariants", n);
  }
}

static void init(weir__coord *co, uint32_t writes, uint32_t ntasks, int sync, int tolerable) {
  weir__coord_init(co, writes, ntasks, sync, tolerable, 0);
  cr_assert(weir__coord_check(co));
}

Test(coordinator, normal_path) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 3, 2, 0, 0);
  cr_assert(weir__coord_may_trigger(&co, 0));
  const step s[] = {{TRIGGER, 1, 0, BAR, W},    {STEP, 0, 2000, 0, W}, /* nothing due */
                    {CUT, 1, 40, 0, W},         {QUEUED, 1, 0, 0, W},
                    {QUEUED, 1, 0, 0, W},       {WRITTEN, 1, 100, 0, W},
                    {CUT, 1, 70, 0, W},         {QUEUED, 1, 0, 1, W}, /* all queued */
                    {STEP, 0, 3000, COMMIT, C}, {WRITTEN, 1, 10, 0, C},
                    {TIMEOUT, 0, 0, 0, C}, /* ignored */
                    {WRITTEN, 1, 1, 0, C},      {COMMITTED, 0, 0, 1, K},
                    {STEP, 0, 4000, DONE, I},   STOP};
  run(&co, s, &a);
  cr_assert_eq(a.ck.id, 1);
  cr_assert_eq(a.ck.bytes, 111);
  cr_assert_eq(a.ck.align_ns, 70);
  cr_assert_eq(a.ck.trigger_ns, 1000);
  cr_assert_eq(a.ck.trigger_ms, 5);
  cr_assert_eq(co.restore_point, 1);
  cr_assert_eq(co.failures, 0);
  cr_assert(weir__coord_may_trigger(&co, 0));
}

Test(coordinator, synchronous_drains_then_snapshots) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 2, 2, 1, 0);
  const step s[] = {{TRIGGER, 4, 0, BAR, D},    {DRAINED, 3, 0, 0, D}, /* stale id */
                    {DRAINED, 4, 0, 0, D},      {STEP, 0, 1500, 0, D},
                    {DRAINED, 4, 0, 1, D},      {STEP, 0, 1800, SNAP, W},
                    {DRAINED, 4, 0, 0, W}, /* late: no longer counted */
                    {QUEUED, 4, 0, 0, W},       {QUEUED, 4, 0, 1, W},
                    {STEP, 0, 1900, COMMIT, C}, {WRITTEN, 4, 5, 0, C},
                    {WRITTEN, 4, 5, 0, C},      {COMMITTED, 0, 0, 1, K},
                    {STEP, 0, 2500, DONE, I},   STOP};
  run(&co, s, &a);
  cr_assert_eq(a.ck.align_ns, 800); /* the drain, as the alignment time */
  cr_assert_eq(a.ck.drained, 2);
}

Test(coordinator, unaligned_cut_waits_for_its_channel_state) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 2, 2, 0, 0);
  const step s[] = {{TRIGGER, 2, 0, BAR, W},
                    /* Task 0: unaligned cut, operator state queued, then its channel state. */
                    {CUT_UNALIGNED, 2, 10, 0, W},
                    {QUEUED, 2, 0, 0, W},
                    /* Task 1: unaligned cut that overtook nothing. */
                    {CUT_UNALIGNED, 2, 20, 0, W},
                    {QUEUED, 2, 0, 0, W}, /* 2 of 4 */
                    {NO_CHANNELS, 2, 0, 0, W},
                    {CHAN_BYTES, 2, 300, 0, W},
                    {QUEUED, 2, 0, 1, W}, /* 3 of 3 */
                    {STEP, 0, 0, COMMIT, C},
                    {NO_CHANNELS, 2, 0, 0, C}, /* cannot happen; must not change the count */
                    {WRITTEN, 2, 1, 0, C},
                    {COMMITTED, 0, 0, 1, K},
                    {STEP, 0, 0, DONE, I},
                    STOP};
  run(&co, s, &a);
  cr_assert_eq(a.ck.unaligned, 2);
  cr_assert_eq(a.ck.expected, 3);
  cr_assert_eq(a.ck.channel_bytes, 300);
}

Test(coordinator, write_failure_declines_after_every_answer) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 3, 3, 0, 0);
  const step s[] = {{TRIGGER, 1, 0, BAR, W},
                    {QUEUED, 1, 0, 0, W},
                    {QUEUED, 1, 0, 0, W},
                    {WRITE_FAILED, 1, WEIR_ENOSPC, 0, F},
                    {QUEUED, 1, 0, 0, F}, /* all queued, but no commit */
                    {STEP, 0, 0, 0, F},
                    {WRITE_FAILED, 1, WEIR_EIO, 0, F},
                    {WRITTEN, 1, 9, 1, F},
                    {STEP, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE, I},
                    STOP};
  run(&co, s, &a);
  cr_assert_str_eq(a.msg, "checkpoint 1 declined: writing its state failed: no space left on "
                          "device; the restore point stays none (a restore starts from the "
                          "beginning) (1 failed in a row, 3 tolerated)");
  cr_assert(weir__coord_may_trigger(&co, 0));
}

Test(coordinator, write_failure_behind_queued_commit) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 2, 2, 0, 0);
  const step s[] = {{TRIGGER, 6, 0, BAR, W},
                    {QUEUED, 6, 0, 0, W},
                    {QUEUED, 6, 0, 1, W},
                    {STEP, 0, 0, COMMIT, C},
                    {WRITTEN, 6, 1, 0, C},
                    {WRITE_FAILED, 6, WEIR_ENOSPC, 0, C}, /* the commit will fail */
                    {COMMIT_FAILED, 0, WEIR_EIO, 1, K},
                    {STEP, 0, 0, ABORTED, I},
                    STOP};
  run(&co, s, &a);
  /* Reported as the write's failure, with the write's message. */
  cr_assert_eq(a.status, WEIR_ENOSPC);
  cr_assert_str_eq(a.why, "writing its state failed");
  cr_assert_str_eq(a.ck.why, "no space left on device");
}

Test(coordinator, commit_failure) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 1, 1, 0, 0);
  const step s[] = {{TRIGGER, 2, 0, BAR, W},
                    {QUEUED, 2, 0, 1, W},
                    {STEP, 0, 0, COMMIT, C},
                    {WRITTEN, 2, 1, 0, C},
                    {COMMIT_FAILED, 0, WEIR_EIO, 1, K},
                    {STEP, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE, I},
                    STOP};
  run(&co, s, &a);
  cr_assert_str_eq(a.msg, "checkpoint 2 declined: its commit failed: the commit's transaction "
                          "failed; the restore point stays none (a restore starts from the "
                          "beginning) (1 failed in a row, 3 tolerated)");
}

Test(coordinator, commit_that_cannot_be_queued) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 1, 1, 0, 0);
  const step s[] = {{TRIGGER, 3, 0, BAR, W},
                    {QUEUED, 3, 0, 1, W},
                    {STEP, 0, 0, COMMIT, C},
                    {ABORT, 0, WEIR_EIO, ABORTED, I},
                    {WRITTEN, 3, 1, 0, I}, /* its write answers late: dropped */
                    STOP};
  run(&co, s, &a);
  cr_assert_eq(a.status, WEIR_EIO);
  cr_assert_str_eq(a.why, "its commit could not be queued");
  cr_assert_str_eq(a.ck.why, "the store refused");
  /* A failpoint before the commit: no error, no message. */
  const step t[] = {{TRIGGER, 4, 0, BAR, W},
                    {QUEUED, 4, 0, 1, W},
                    {STEP, 0, 0, COMMIT, C},
                    {ABORT, 0, 0, ABORTED, I},
                    STOP};
  run(&co, t, &a);
  cr_assert_str_eq(a.ck.why, "");
}

Test(coordinator, timeout_until_the_commit_is_queued) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 2, 2, 1, WEIR_TOLERATE_ANY);
  const step s[] = {/* Draining. */
                    {TRIGGER, 1, 0, BAR, D},
                    {TIMEOUT, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE, I},
                    {TIMEOUT, 0, 0, 0, I}, /* idle: nothing */
                    /* Failing. */
                    {TRIGGER, 2, 0, BAR, D},
                    {DRAINED, 2, 0, 0, D},
                    {DRAINED, 2, 0, 1, D},
                    {STEP, 0, 0, SNAP, W},
                    {WRITE_FAILED, 2, WEIR_EIO, 0, F},
                    {TIMEOUT, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE, I},
                    {QUEUED, 2, 0, 0, I}, /* late: dropped */
                    STOP};
  run(&co, s, &a);
  cr_assert_str_eq(a.msg, "checkpoint 2 declined: timed out before every operator "
                          "acknowledged; the restore point stays none (a restore starts from "
                          "the beginning) (2 failed in a row)");
}

Test(coordinator, tolerance_counts_failures_in_a_row) {
  weir__coord co;
  weir__coord_act a;
  weir__coord_init(&co, 1, 1, 0, 0, 7); /* restored from checkpoint 7 */
  const step s[] = {{TRIGGER, 8, 0, BAR, W},
                    {TIMEOUT, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE, I},
                    {TRIGGER, 9, 0, BAR, W},
                    {QUEUED, 9, 0, 1, W},
                    {STEP, 0, 0, COMMIT, C},
                    {WRITTEN, 9, 1, 0, C},
                    {COMMITTED, 0, 0, 1, K},
                    {STEP, 0, 0, DONE, I}, /* resets the count */
                    {TRIGGER, 10, 0, BAR, W},
                    {TIMEOUT, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE, I},
                    {TRIGGER, 11, 0, BAR, W},
                    {TIMEOUT, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE, I},
                    {TRIGGER, 12, 0, BAR, W},
                    {TIMEOUT, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE, I},
                    STOP};
  run(&co, s, &a);
  cr_assert_str_eq(a.msg, "checkpoint 12 declined: timed out before every operator "
                          "acknowledged; the restore point stays checkpoint 9 (3 failed in a "
                          "row, 3 tolerated)");
  const step t[] = {{TRIGGER, 13, 0, BAR, W},
                    {WRITE_FAILED, 13, WEIR_ENOSPC, 1, F},
                    {STEP, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_FAIL, I},
                    STOP};
  run(&co, t, &a);
  cr_assert_eq(a.status, WEIR_ECKPTLIMIT);
  cr_assert_str_eq(a.msg, "checkpoint 13 failed: writing its state failed: no space left on "
                          "device; 4 checkpoints failed in a row, more than the 3 tolerated "
                          "(--tolerable-checkpoint-failures): the job stops; its restore point "
                          "is checkpoint 9");
}

Test(coordinator, tolerate_none_and_could_not_start) {
  weir__coord co;
  weir__coord_act a;
  weir__coord_init(&co, 1, 1, 0, WEIR_TOLERATE_NONE, 3);
  weir__coord_declined(&co, 0, 0, "it could not start", "no space left on device", &a);
  cr_assert_eq(a.what, WEIR__CA_FAIL);
  cr_assert_eq(a.status, WEIR_ECKPTLIMIT);
  cr_assert_str_eq(a.msg, "a checkpoint failed: it could not start: no space left on device; 1 "
                          "checkpoints failed in a row, more than the 0 tolerated "
                          "(--tolerable-checkpoint-failures): the job stops; its restore point "
                          "is checkpoint 3");
  cr_assert_eq(co.state, WEIR__CK_IDLE);
  cr_assert(weir__coord_check(&co));
}

Test(coordinator, final_checkpoint_is_retried) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 1, 1, 0, WEIR_TOLERATE_ANY);
  cr_assert(weir__coord_may_trigger(&co, 1));
  const step s[] = {{TRIGGER, 5, 1, BAR, W},
                    {TIMEOUT, 0, 0, ABORTED, I},
                    {DECLINED, 0, 0, WEIR__CA_DECLINE | WEIR__CA_RETRY, I},
                    STOP};
  run(&co, s, &a);
  cr_assert_str_eq(a.msg, "the final checkpoint 5 declined: timed out before every operator "
                          "acknowledged; the restore point stays none (a restore starts from "
                          "the beginning) (1 failed in a row)");
  cr_assert(!weir__coord_may_trigger(&co, 1)); /* waits for its retry */
  weir__coord_retry_due(&co);
  cr_assert(weir__coord_may_trigger(&co, 1));
  /* A final checkpoint that could not start is retried too. */
  weir__coord_declined(&co, 0, 1, "it could not start", NULL, &a);
  cr_assert_eq(a.what, WEIR__CA_DECLINE | WEIR__CA_RETRY);
  cr_assert_str_eq(a.msg, "the final checkpoint declined: it could not start; the restore point "
                          "stays none (a restore starts from the beginning) (2 failed in a row)");
  weir__coord_retry_due(&co);
  const step t[] = {{TRIGGER, 6, 1, BAR, W},
                    {QUEUED, 6, 0, 1, W},
                    {STEP, 0, 0, COMMIT, C},
                    {WRITTEN, 6, 1, 0, C},
                    {COMMITTED, 0, 0, 1, K},
                    {STEP, 0, 0, DONE, I},
                    STOP};
  run(&co, t, &a);
  cr_assert(a.ck.final);
  /* Once the final one is triggered, nothing else starts. */
  cr_assert(!weir__coord_may_trigger(&co, 0));
  cr_assert(!weir__coord_may_trigger(&co, 1));
}

Test(coordinator, one_checkpoint_at_a_time) {
  weir__coord co;
  weir__coord_act a;
  init(&co, 2, 2, 0, 0);
  const step s[] = {{TRIGGER, 1, 0, BAR, W}, {QUEUED, 1, 0, 0, W}, STOP};
  run(&co, s, &a);
  cr_assert(!weir__coord_may_trigger(&co, 0));
  cr_assert_eq(weir__coord_trigger(&co, 2, 0, 0, 0, &a), WEIR_ESTATE);
  cr_assert_eq(a.what, 0);
  cr_assert_eq(co.ck.id, 1);
  cr_assert_eq(co.ck.handed, 1);
  /* An aborted checkpoint's late events do not count for the next one. */
  const step t[] = {{TIMEOUT, 0, 0, ABORTED, I},
                    {TRIGGER, 2, 0, BAR, W},
                    {QUEUED, 1, 0, 0, W},
                    {WRITE_FAILED, 1, WEIR_EIO, 0, W},
                    {CUT_UNALIGNED, 1, 5, 0, W},
                    {COMMITTED, 0, 0, 0, W}, /* no commit queued: dropped */
                    {QUEUED, 2, 0, 0, W},
                    {QUEUED, 2, 0, 1, W},
                    STOP};
  run(&co, t, &a);
  cr_assert_eq(co.ck.expected, 2);
  cr_assert_eq(co.ck.acks, 0);
  cr_assert_eq(co.ck.align_ns, 0);
}

/* Random interleavings: tasks queue and acknowledge writes, some fail,
 * the commit answers, the timeout fires, all in random order. Every
 * triggered checkpoint must end exactly once (COMPLETE or ABORT), a
 * completed one only with every write durable, the invariants must hold
 * after every event, and the coordinator thread must be woken whenever a
 * step is due (a step without a wake-up must find nothing to do). */
Test(coordinator, random_interleavings_end_each_checkpoint_once) {
  srand(7);
  weir__coord co;
  weir__coord_act a;
  for (int round = 0; round < 200; round++) {
    uint32_t writes = 1 + (uint32_t)(rand() % 5);
    init(&co, writes, writes, round % 3 == 0, WEIR_TOLERATE_ANY);
    uint64_t ended = 0;
    for (uint64_t id = 1; id <= 20; id++) {
      cr_assert_eq(weir__coord_trigger(&co, id, 0, 0, 0, &a), 0);
      uint32_t drained = 0, queued = 0, answered = 0;
      int commit_answered = 0, woken = 0, over = 0;
      for (int n = 0; n < 1000 && !over; n++) {
        int r = rand() % 100, due = 0;
        if (r < 5) {
          weir__coord_timeout(&co, &a);
        } else if (r < 40) {
          /* The coordinator looks: only after a wake-up, as job.c does;
           * a look without one must find nothing. */
          weir__coord_step(&co, 0, &a);
          cr_assert(woken || a.what == 0, "round %d id %llu: step without a wake-up", round,
                    (unsigned long long)id);
          woken = 0;
          if (a.what & WEIR__CA_COMMIT) cr_assert_eq(a.ck.handed, writes);
          if (a.what & WEIR__CA_COMPLETE) cr_assert_eq(a.ck.acks, writes);
        } else if (co.state == WEIR__CK_DRAINING && drained < writes) {
          drained++;
          due = weir__coord_drained(&co, id);
        } else if (co.state != WEIR__CK_DRAINING && queued < writes && r < 70) {
          queued++;
          due = weir__coord_queued(&co, id);
        } else if (answered < queued) {
          answered++;
          int fail = rand() % 20 == 0;
          due = weir__coord_written(&co, id, fail ? WEIR_EIO : 0, 1, "x");
        } else if (co.state == WEIR__CK_COMMITTING && answered == writes && !commit_answered) {
          commit_answered = 1;
          due = weir__coord_committed(&co, rand() % 20 ? 0 : WEIR_EIO, "y");
        }
        woken |= due;
        cr_assert(weir__coord_check(&co));
        if (a.what & (WEIR__CA_COMPLETE | WEIR__CA_ABORT)) {
          cr_assert_eq(a.ck.id, id);
          cr_assert_eq(co.state, WEIR__CK_IDLE);
          ended++;
          over = 1;
        }
        a.what = 0;
      }
      if (!over) { /* stuck only where a timeout would end it */
        weir__coord_timeout(&co, &a);
        if (!a.what) { /* commit queued, not answered: answer it */
          cr_assert_eq(co.state, WEIR__CK_COMMITTING);
          cr_assert(weir__coord_committed(&co, 0, ""));
          weir__coord_step(&co, 0, &a);
        }
        cr_assert(a.what & (WEIR__CA_COMPLETE | WEIR__CA_ABORT));
        ended++;
      }
    }
    cr_assert_eq(ended, 20);
  }
}
