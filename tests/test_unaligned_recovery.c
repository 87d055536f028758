/* tests/test_unaligned_recovery.c: crash recovery of unaligned checkpoints
 * and of the alignment timeout, with the whole `weir` binary.
 *
 * DESIGN. The counter job with --all-edges (forward, rebalance, broadcast
 * and hash channels between the generator and the count; --fan-out 8, so
 * that output also waits behind full channels and is overtaken) and one slow path
 * (--slow-us: subtask 0 of the forward path sleeps), small batches and
 * channel bounds, parallelism 2 on 2 workers, the transactional file sink,
 * a checkpoint every 20 ms. Each scenario runs it under
 * `--checkpoint-mode unaligned` or under `--alignment-timeout 1` (aligned
 * first, unaligned after 1 ms), kills it (SIGKILL) at seeded random times
 * (WEIR_TEST_SEED=N replays a schedule) or at failpoints inside the
 * unaligned cut and the channel-state write (ckpt.unaligned_cut, after the
 * barrier went ahead of the pending output and before the channel state
 * is complete; ckpt.channel_state, when it is handed to the store;
 * ckpt.channel_state_written, on the store's writer thread once its chunks
 * are written, before the acknowledgement), and
 * restores with --restore latest until the job is done. The *_spread
 * scenarios (and the timeout's failpoint) spread the slow path's cost over
 * its records, so the slow task consumes its batches in slices and some
 * cuts must come while a batch is consumed in part (the debug log says
 * how many). Every injected
 * kill is asserted to have fired (the run died of SIGKILL; a failpoint's
 * run also said so), and some run must have completed a checkpoint with
 * channel state and some restore must have started from one, so a
 * scenario that never exercised channel state fails. Then the sink
 * directory must hold, for every key k, the counts 1..n_k exactly once and
 * nothing else (exactly-once state and output). A checkpoint with channel
 * state restored with another parallelism is refused by name.
 *
 * Budget: each run lasts well under a second; the whole program runs in
 * about 20 s in the plain build (ctest TIMEOUT 120, for sanitizer builds).
 */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crash.h"
#include "helpers.h"

typedef unsigned long long ull;

#define RECORDS 120000ull
#define KEYS 300ull
#define RUN_TIMEOUT_S 60
#define MAX_RUNS 16
/* The slow path: with these batches and bounds a run lasts about 1.5 s and
 * the barriers of most checkpoints overtake buffered data. */
#define SLOW_US "20000"
#define SPREAD_US "1250"
#define SPREAD_EVERY "64"

typedef struct scen {
  crash_job c;
  /* The slow path's cost spread over its records (SPREAD_US every
   * SPREAD_EVERY, the same rate): the slow task then takes its batches in
   * slices, and cuts come while a batch is consumed in part (counted from
   * the debug log: part_cuts). */
  int spread;
  int part_cuts;
  int kills;
  int channel_ckpts;             /* checkpoints completed with channel state, all runs */
  int restored_unaligned;        /* restores from a checkpoint with channel state */
  ull restored_out, restored_in; /* records of restored channel state */
  ull last_unaligned;            /* latest id logged with channel state */
} scen;

/* Notes what a run's log says about channel state. */
static void scan_log(scen *s, const char *err) {
  for (const char *p = strstr(err, "checkpoint "); p; p = strstr(p + 1, "checkpoint ")) {
    ull id;
    char word[16];
    if (sscanf(p, "checkpoint %llu %15s", &id, word) != 2 || strcmp(word, "completed") != 0)
      continue;
    const char *eol = strchr(p, '\n');
    const char *u = strstr(p, ", unaligned,");
    if (u && (!eol || u < eol)) {
      s->channel_ckpts++;
      s->last_unaligned = id;
    }
  }
  static const char cut[] = "unaligned cut of task ";
  for (const char *p = strstr(err, cut); p; p = strstr(p + 1, cut)) {
    unsigned task, parts;
    ull out;
    if (sscanf(p + sizeof cut - 1, "%u (%llu output records overtaken, %u input batches", &task,
               &out, &parts) == 3 &&
        parts > 0)
      s->part_cuts++;
  }
}

/* After every run: what its log says about channel state; it exited 0 or
 * was killed. */
static void after_run(crash_job *j, int rc, const char *err) {
  scen *s = (scen *)j;
  cr_assert_lt(j->runs, MAX_RUNS, "too many runs\nhistory: %s", j->history);
  long long from = th_resumed_from(err);
  if (from > 0 && (ull)from <= s->last_unaligned) {
    /* Resumed from a checkpoint at or below the latest one with channel
     * state: is it one? The log of earlier runs tells. */
    if ((ull)from == s->last_unaligned) s->restored_unaligned++;
  }
  scan_log(s, err);
  for (const char *p = strstr(err, "restored channel state: "); p;
       p = strstr(p + 1, "restored channel state: ")) {
    ull o = 0, i = 0;
    if (sscanf(p, "restored channel state: %llu output records, %llu input", &o, &i) == 2) {
      s->restored_out += o;
      s->restored_in += i;
    }
  }
  if (rc == CRASH_KILLED) s->kills++;
  if (rc != 0 && rc != CRASH_KILLED)
    cr_assert_fail("run %d exited with %d\nstderr: %s\nhistory: %s", j->runs, rc, err, j->history);
}

/* The counter job with --all-edges, the slow path, small batches and
 * bounds, checkpoints every 20 ms, unaligned (or aligned with a 1 ms
 * alignment timeout); spreads: the slow path's cost spread (the debug log
 * counts the cuts inside a batch). */
static scen *scen_new(int timeout_mode, int spreads) {
  scen *s = (scen *)crash_new("counter", sizeof(scen));
  crash_job *j = &s->c;
  crash_counter(j, RECORDS, KEYS, NULL);
  crash_arg(j, "--all-edges", NULL);
  crash_arg(j, "--fan-out", "8");
  crash_arg(j, "--slow-us", "%s", spreads ? SPREAD_US : SLOW_US);
  crash_arg(j, "--slow-every", "%s", spreads ? SPREAD_EVERY : "1024");
  crash_arg(j, "--batch-records", "128");
  crash_arg(j, "--channel-batches", "2");
  if (timeout_mode)
    crash_arg(j, "--alignment-timeout", "1");
  else
    j->mode = "unaligned";
  j->interval = "20";
  j->timeout_s = RUN_TIMEOUT_S;
  j->after_run = after_run;
  if (spreads) {
    s->spread = 1;
    setenv("WEIR_LOG", "debug", 1);
  }
  return s;
}

/* One run (--restore latest), killed after kill_ms (< 0: not) or by the
 * armed failpoints. Returns the exit status. */
static int run(scen *s, const char *failpoints, int kill_ms) {
  char *err = NULL;
  int rc = crash_run(&s->c, failpoints, kill_ms, &err, "--restore", "latest", NULL);
  if (failpoints && rc == CRASH_KILLED)
    cr_assert_not_null(strstr(err, "failpoint"), "killed, but not by the failpoint\n%s", err);
  free(err);
  return rc;
}

/* Restores until the job is done. */
static void restore_to_end(scen *s) {
  crash_restore_to_end(&s->c, MAX_RUNS, NULL, NULL, NULL);
}

static void check_part_cuts(const scen *s) {
  if (s->spread)
    cr_assert_gt(s->part_cuts, 0, "no cut came while a batch was consumed in part\nhistory: %s",
                 s->c.history);
}

static void random_kills(int timeout_mode, int spreads) {
  scen *s = scen_new(timeout_mode, spreads);
  const char *e = getenv("WEIR_TEST_SEED");
  uint64_t rng = e ? strtoull(e, NULL, 10) : (uint64_t)th_mono_ms();
  fprintf(stderr, "test_unaligned_recovery: WEIR_TEST_SEED=%llu\n", (ull)rng);
  int fired = 0;
  for (int k = 0; k < 3; k++) {
    int ms = 150 + (int)(th_splitmix64(&rng) % 400);
    if (run(s, NULL, ms) == CRASH_KILLED) fired++;
  }
  restore_to_end(s);
  cr_assert_geq(fired, 1, "no random kill fired before the job ended\nhistory: %s", s->c.history);
  cr_assert_gt(s->channel_ckpts, 0, "no checkpoint with channel state\nhistory: %s", s->c.history);
  check_part_cuts(s);
  crash_check_counter(&s->c);
  crash_free(&s->c);
}

static void kill_at(const char *fp, int timeout_mode, int spreads) {
  scen *s = scen_new(timeout_mode, spreads);
  cr_assert_eq(run(s, fp, -1), CRASH_KILLED, "failpoint %s did not fire\nhistory: %s", fp,
               s->c.history);
  restore_to_end(s);
  check_part_cuts(s);
  crash_check_counter(&s->c);
  crash_free(&s->c);
}

TestSuite(unaligned_recovery, .timeout = 120, .fini = crash_fini);

Test(unaligned_recovery, random_kills_unaligned) {
  random_kills(0, 0);
}

Test(unaligned_recovery, random_kills_unaligned_spread) {
  random_kills(0, 1);
}

Test(unaligned_recovery, random_kills_alignment_timeout) {
  random_kills(1, 0);
}

Test(unaligned_recovery, kill_in_channel_state_write) {
  /* The 6th channel state handed to the store: checkpoints before it
   * completed with channel state, so the restore replays some. */
  kill_at("ckpt.channel_state=kill@6", 0, 0);
}

Test(unaligned_recovery, kill_after_channel_state_written) {
  /* On the store's writer thread, the 5th channel state's chunks written,
   * its acknowledgement not yet counted. */
  kill_at("ckpt.channel_state_written=kill@5", 0, 0);
}

Test(unaligned_recovery, kill_in_unaligned_cut) {
  kill_at("ckpt.unaligned_cut=kill@9", 0, 0);
}

Test(unaligned_recovery, kill_in_unaligned_cut_spread) {
  kill_at("ckpt.unaligned_cut=kill@9", 0, 1);
}

Test(unaligned_recovery, kill_in_channel_state_write_after_timeout) {
  kill_at("ckpt.channel_state=kill@2", 1, 1);
}

Test(unaligned_recovery, restores_replay_channel_state) {
  /* Kill at a channel-state write after several checkpoints with channel
   * state completed, restore, and kill again further on: some restore must
   * start from a checkpoint with channel state, and replay both output
   * records (with --fan-out 8 the tasks before the broadcast overtake
   * pending output at most cuts) and input records. Three kills, so that
   * one restore without output records (a checkpoint whose cuts found no
   * pending output) does not fail the test. */
  scen *s = scen_new(0, 0);
  static const char *const kills[] = {"ckpt.channel_state=kill@40", "ckpt.channel_state=kill@25",
                                      "ckpt.channel_state=kill@25"};
  for (int k = 0; k < 3 && !(s->restored_out && s->restored_in); k++) {
    int rc = run(s, kills[k], -1);
    if (k == 0) cr_assert_eq(rc, CRASH_KILLED, "failpoint did not fire\nhistory: %s", s->c.history);
    if (rc != CRASH_KILLED) break; /* the job ended first */
  }
  cr_assert_gt(s->channel_ckpts, 0, "no checkpoint with channel state\nhistory: %s", s->c.history);
  restore_to_end(s);
  cr_assert_gt(s->restored_unaligned, 0,
               "no restore from a checkpoint with channel state\nhistory: %s", s->c.history);
  cr_assert_gt(s->restored_in, 0, "no input records replayed\nhistory: %s", s->c.history);
  cr_assert_gt(s->restored_out, 0, "no output records replayed\nhistory: %s", s->c.history);
  crash_check_counter(&s->c);
  crash_free(&s->c);
}

Test(unaligned_recovery, rescale_is_refused) {
  scen *s = scen_new(0, 0);
  cr_assert_eq(run(s, "ckpt.channel_state=kill@40", -1), CRASH_KILLED);
  cr_assert_gt(s->channel_ckpts, 0);
  /* Only if the latest checkpoint holds channel state is a refusal due. */
  crash_job *j = &s->c;
  j->workers = j->par = "1";
  j->interval = NULL;
  j->nargs = 0;
  j->after_run = NULL;
  crash_counter(j, RECORDS, KEYS, NULL);
  crash_arg(j, "--all-edges", NULL);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", NULL);
  cr_assert_not_null(err);
  if (strstr(err, "checkpoint") && th_resumed_from(err) < 0) {
    cr_assert_neq(rc, 0, "restore with another parallelism: %s", err);
    cr_assert_not_null(strstr(err, "channel state"), "refusal does not say why: %s", err);
  }
  free(err);
  crash_free(j);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, "info");
}
