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

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

typedef unsigned long long ull;

#define RECORDS 120000ull
#define KEYS 300ull
#define KILLED (128 + SIGKILL)
#define RUN_TIMEOUT_S 60
#define MAX_RUNS 16
/* The slow path: with these batches and bounds a run lasts about 1.5 s and
 * the barriers of most checkpoints overtake buffered data. */
#define SLOW_US "20000"
#define SPREAD_US "1250"
#define SPREAD_EVERY "64"

typedef struct scen {
  char *dir, *state, *out, *errpath;
  int timeout_mode; /* --alignment-timeout 1 instead of --checkpoint-mode unaligned */
  /* The slow path's cost spread over its records (SPREAD_US every
   * SPREAD_EVERY, the same rate): the slow task then takes its batches in
   * slices, and cuts come while a batch is consumed in part (counted from
   * the debug log: part_cuts). */
  int spread;
  int part_cuts;
  const char *parallelism;
  int runs, kills;
  int channel_ckpts;             /* checkpoints completed with channel state, all runs */
  int restored_unaligned;        /* restores from a checkpoint with channel state */
  ull restored_out, restored_in; /* records of restored channel state */
  ull last_unaligned;            /* latest id logged with channel state */
  char history[2048];
} scen;

static scen *live;

static void cleanup(void) {
  if (live && !getenv("WEIR_TEST_KEEP")) th_rmrf(live->dir);
  live = NULL;
}

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  cr_assert_not_null(p);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

static scen *scen_new(int timeout_mode) {
  scen *s = calloc(1, sizeof *s);
  cr_assert_not_null(s);
  s->dir = th_tmpdir();
  cr_assert_not_null(s->dir);
  s->state = join(s->dir, "state");
  s->out = join(s->dir, "out");
  s->errpath = join(s->dir, "stderr.txt");
  s->timeout_mode = timeout_mode;
  s->parallelism = "2";
  live = s;
  return s;
}

static void scen_free(scen *s) {
  cleanup();
  free(s->state);
  free(s->out);
  free(s->errpath);
  free(s->dir);
  free(s);
}

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

/* One run (--restore latest), killed after kill_ms (< 0: not) or by the
 * armed failpoints. Returns the exit status. */
static int run(scen *s, const char *failpoints, int kill_ms) {
  char sink[600];
  snprintf(sink, sizeof sink, "file:%s", s->out);
  const char *argv[48];
  int n = 0;
  const char *fixed[] = {WEIR_BINARY,
                         "run",
                         "counter",
                         "--records",
                         "120000",
                         "--keys",
                         "300",
                         "--workers",
                         "2",
                         "--parallelism",
                         s->parallelism,
                         "--all-edges",
                         "--fan-out",
                         "8",
                         "--slow-us",
                         s->spread ? SPREAD_US : SLOW_US,
                         "--slow-every",
                         s->spread ? SPREAD_EVERY : "1024",
                         "--batch-records",
                         "128",
                         "--channel-batches",
                         "2",
                         "--checkpoint-interval",
                         "20",
                         "--state-dir",
                         s->state,
                         "--sink",
                         sink,
                         "--restore",
                         "latest"};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = fixed[i];
  if (s->timeout_mode) {
    argv[n++] = "--alignment-timeout";
    argv[n++] = "1";
  } else {
    argv[n++] = "--checkpoint-mode";
    argv[n++] = "unaligned";
  }
  argv[n] = NULL;
  char *err = NULL;
  int rc =
      th_run_killable(argv, s->dir, failpoints, kill_ms, RUN_TIMEOUT_S, s->errpath, &err, NULL);
  s->runs++;
  cr_assert_lt(s->runs, MAX_RUNS, "too many runs\nhistory: %s", s->history);
  size_t hl = strlen(s->history);
  snprintf(s->history + hl, sizeof s->history - hl, "[run %d %s kill %d: %d] ", s->runs,
           failpoints ? failpoints : "-", kill_ms, rc);
  cr_assert_not_null(err);
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
  if (rc == KILLED) s->kills++;
  if (rc != 0 && rc != KILLED)
    cr_assert_fail("run %d exited with %d\nstderr: %s\nhistory: %s", s->runs, rc, err, s->history);
  if (failpoints && rc == KILLED)
    cr_assert_not_null(strstr(err, "failpoint"), "killed, but not by the failpoint\n%s", err);
  free(err);
  return rc;
}

static ull n_of(ull k) {
  return (RECORDS - k + KEYS - 1) / KEYS; /* the i < RECORDS with i mod KEYS == k */
}

/* Every key's counts 1..n_k exactly once, nothing else, nothing pending. */
static void check_exact(scen *s) {
  ull per = RECORDS / KEYS + 1;
  unsigned char *seen = calloc(KEYS * per, 1);
  cr_assert_not_null(seen);
  DIR *d = opendir(s->out);
  cr_assert_not_null(d, "no sink directory\nhistory: %s", s->history);
  struct dirent *e;
  ull lines = 0;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    size_t n = strlen(e->d_name);
    cr_assert(n > 4 && !strcmp(e->d_name + n - 4, ".txt"), "unexpected file %s\nhistory: %s",
              e->d_name, s->history);
    char *p = join(s->out, e->d_name);
    char *text = th_read_file(p, NULL);
    cr_assert_not_null(text);
    for (char *q = text, *nl; *q; q = nl + 1) {
      nl = strchr(q, '\n');
      cr_assert_not_null(nl);
      *nl = '\0';
      ull k, c;
      cr_assert_eq(sscanf(q, "%llu %llu", &k, &c), 2, "bad line '%s'", q);
      cr_assert(k < KEYS && c >= 1 && c <= n_of(k), "'%s' out of range\nhistory: %s", q,
                s->history);
      cr_assert_eq(seen[k * per + c - 1], 0, "'%s' twice\nhistory: %s", q, s->history);
      seen[k * per + c - 1] = 1;
      lines++;
    }
    free(text);
    free(p);
  }
  closedir(d);
  cr_assert_eq(lines, RECORDS, "%llu lines of %llu: some are missing\nhistory: %s", lines,
               (ull)RECORDS, s->history);
  free(seen);
}

/* Restores until the job is done. */
static void restore_to_end(scen *s) {
  while (run(s, NULL, -1) != 0) {
  }
}

static uint64_t seed(void) {
  const char *e = getenv("WEIR_TEST_SEED");
  uint64_t v = e ? strtoull(e, NULL, 10) : (uint64_t)th_mono_ms();
  fprintf(stderr, "test_unaligned_recovery: WEIR_TEST_SEED=%llu\n", (ull)v);
  return v;
}

/* Spread scenarios log at debug level, for the cuts (see part_cuts). */
static void spread(scen *s) {
  s->spread = 1;
  setenv("WEIR_LOG", "debug", 1);
}

static void check_part_cuts(const scen *s) {
  if (s->spread)
    cr_assert_gt(s->part_cuts, 0, "no cut came while a batch was consumed in part\nhistory: %s",
                 s->history);
}

static void random_kills(int timeout_mode, int spreads) {
  scen *s = scen_new(timeout_mode);
  if (spreads) spread(s);
  uint64_t rng = seed();
  int fired = 0;
  for (int k = 0; k < 3; k++) {
    int ms = 150 + (int)(th_splitmix64(&rng) % 400);
    if (run(s, NULL, ms) == KILLED) fired++;
  }
  restore_to_end(s);
  cr_assert_geq(fired, 1, "no random kill fired before the job ended\nhistory: %s", s->history);
  cr_assert_gt(s->channel_ckpts, 0, "no checkpoint with channel state\nhistory: %s", s->history);
  check_part_cuts(s);
  check_exact(s);
  scen_free(s);
}

static void kill_at(const char *fp, int timeout_mode, int spreads) {
  scen *s = scen_new(timeout_mode);
  if (spreads) spread(s);
  cr_assert_eq(run(s, fp, -1), KILLED, "failpoint %s did not fire\nhistory: %s", fp, s->history);
  restore_to_end(s);
  check_part_cuts(s);
  check_exact(s);
  scen_free(s);
}

TestSuite(unaligned_recovery, .timeout = 120, .fini = cleanup);

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
  scen *s = scen_new(0);
  static const char *const kills[] = {"ckpt.channel_state=kill@40", "ckpt.channel_state=kill@25",
                                      "ckpt.channel_state=kill@25"};
  for (int k = 0; k < 3 && !(s->restored_out && s->restored_in); k++) {
    int rc = run(s, kills[k], -1);
    if (k == 0) cr_assert_eq(rc, KILLED, "failpoint did not fire\nhistory: %s", s->history);
    if (rc != KILLED) break; /* the job ended first */
  }
  cr_assert_gt(s->channel_ckpts, 0, "no checkpoint with channel state\nhistory: %s", s->history);
  restore_to_end(s);
  cr_assert_gt(s->restored_unaligned, 0,
               "no restore from a checkpoint with channel state\nhistory: %s", s->history);
  cr_assert_gt(s->restored_in, 0, "no input records replayed\nhistory: %s", s->history);
  cr_assert_gt(s->restored_out, 0, "no output records replayed\nhistory: %s", s->history);
  check_exact(s);
  scen_free(s);
}

Test(unaligned_recovery, rescale_is_refused) {
  scen *s = scen_new(0);
  cr_assert_eq(run(s, "ckpt.channel_state=kill@40", -1), KILLED);
  cr_assert_gt(s->channel_ckpts, 0);
  /* Only if the latest checkpoint holds channel state is a refusal due. */
  s->parallelism = "1";
  char sink[600];
  snprintf(sink, sizeof sink, "file:%s", s->out);
  const char *argv[] = {
      WEIR_BINARY, "run", "counter",           "--records", "120000",      "--keys",      "300",
      "--workers", "1",   "--parallelism",     "1",         "--all-edges", "--state-dir", s->state,
      "--sink",    sink,  "--checkpoint-mode", "unaligned", "--restore",   "latest",      NULL};
  char *err = NULL;
  int rc = th_run(argv, s->dir, NULL, &err, RUN_TIMEOUT_S);
  cr_assert_not_null(err);
  if (strstr(err, "checkpoint") && th_resumed_from(err) < 0) {
    cr_assert_neq(rc, 0, "restore with another parallelism: %s", err);
    cr_assert_not_null(strstr(err, "channel state"), "refusal does not say why: %s", err);
  }
  free(err);
  scen_free(s);
}

/* Crash tests run one at a time whatever --jobs says: a second test on the
 * 2 cores would slow every run and move every kill. */
int main(int argc, char *argv[]) {
  setenv("WEIR_LOG", "info", 1); /* the tests read the restore messages */
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (criterion_handle_args(argc, argv, true)) {
    criterion_options.jobs = 1;
    result = !criterion_run_all_tests(tests);
  }
  criterion_finalize(tests);
  return result;
}
