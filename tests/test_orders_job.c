/* test_orders_job.c: the interval join under crashes, through the example
 * job shared object jobs/examples/orders_job.c (an interval join of orders
 * and payments, a keyed operator counting pairs per customer and second
 * with its own timers, a side output "busy"), run by `weir run` into the
 * transactional file sink and killed (SIGKILL) at random moments, then
 * restored (--restore latest), also at another parallelism: its output
 * must be exactly the uninterrupted run's, computed here from its
 * generators.
 *
 * The reference: order i is customer i mod 100 at i ms, payment j customer
 * j mod 100 at 2j ms; they pair when 0 <= 2j - i <= 500; a pair counts in
 * the second of its payment. "sink" has one line "<customer> <second>
 * <pairs>" per (customer, second) with pairs, "busy" the same for those
 * with more than 25, "late1"/"late2" nothing (the generators send in
 * order).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crash.h"

#define ORDERS 400000ull
#define CUSTOMERS 100u
#define SECONDS (2 * ORDERS / 2 / 1000 + 1) /* payments at 2j ms, j < ORDERS / 2 */
#define BUSY 25u

typedef unsigned long long ull;

/* Pairs per (customer, second), and what the output said. */
typedef struct ref {
  uint32_t want[CUSTOMERS][SECONDS];
  uint32_t sink[CUSTOMERS][SECONDS], busy[CUSTOMERS][SECONDS];
  uint64_t lines, late, problems;
  char why[1024];
} ref;

static ref R;

static void ref_init(void) {
  memset(&R, 0, sizeof R);
  for (uint64_t j = 0; j < ORDERS / 2; j++) {
    uint64_t i = 2 * j > 500 ? 2 * j - 500 : 0;
    i += (j % CUSTOMERS + CUSTOMERS - i % CUSTOMERS) % CUSTOMERS; /* the customer's first */
    for (; i <= 2 * j && i < ORDERS; i += CUSTOMERS) R.want[j % CUSTOMERS][2 * j / 1000]++;
  }
}

static void problem(const char *fmt, const char *file, const char *line) {
  if (R.problems++ == 0) snprintf(R.why, sizeof R.why, fmt, file, line ? line : "");
}

/* A committed part of the job's other sinks: "<name>-<subtask>-<epoch>.txt"
 * (crash_sink_lines knows only "sink-" parts). */
static int other_part(const char *file) {
  size_t n = strlen(file);
  return (!strncmp(file, "busy-", 5) || !strncmp(file, "late1-", 6) ||
          !strncmp(file, "late2-", 6)) &&
         n > 4 && !strcmp(file + n - 4, ".txt");
}

static void take_line(void *user, int kind, const char *file, char *line) {
  (void)user;
  if (kind == CRASH_STRAY) {
    if (!other_part(file)) problem("%s: not a committed part%s", file, NULL);
    return;
  }
  if (kind != CRASH_LINE) return problem("%s: unreadable or unterminated%s", file, NULL);
  int late = strncmp(file, "late", 4) == 0, busy = strncmp(file, "busy-", 5) == 0;
  if (late) {
    R.late++;
    return;
  }
  if (!busy && strncmp(file, "sink-", 5) != 0)
    return problem("%s: a part of no known sink%s", file, NULL);
  ull c, s, n;
  char extra;
  if (sscanf(line, "%llu %llu %llu%c", &c, &s, &n, &extra) != 3 || c >= CUSTOMERS || s >= SECONDS)
    return problem("%s: bad line '%s'", file, line);
  uint32_t *slot = busy ? &R.busy[c][s] : &R.sink[c][s];
  if (*slot) return problem("%s: (customer, second) twice: '%s'", file, line);
  *slot = (uint32_t)n;
  R.lines++;
}

/* The file sink's output of j against the reference: every (customer,
 * second) once with its pairs, the busy ones again in "busy", nothing
 * late. Returns the number of differences, the first described in R.why. */
static uint64_t differences(crash_job *j) {
  memset(R.sink, 0, sizeof R.sink);
  memset(R.busy, 0, sizeof R.busy);
  R.lines = R.late = R.problems = 0;
  if (crash_sink_lines(j->out, take_line, NULL) <= 0) problem("%s: no sink output%s", j->out, NULL);
  if (R.late) problem("%s: late records%s", j->out, NULL);
  for (uint32_t c = 0; c < CUSTOMERS; c++)
    for (uint32_t s = 0; s < SECONDS; s++) {
      uint32_t b = R.want[c][s] > BUSY ? R.want[c][s] : 0;
      if (R.sink[c][s] == R.want[c][s] && R.busy[c][s] == b) continue;
      char cell[120];
      snprintf(cell, sizeof cell, "customer %u second %u: %u pairs (busy %u), want %u", c, s,
               R.sink[c][s], R.busy[c][s], R.want[c][s]);
      problem("%s%s", "", cell);
    }
  return R.problems;
}

static void assert_exact(crash_job *j, const char *what) {
  uint64_t n = differences(j);
  cr_assert_eq(n, 0, "%s: %llu differences, the first: %s. %s", what, (ull)n, R.why, j->history);
}

static crash_job *orders_new(int par) {
  crash_job *j = crash_new(WEIR_JOBS_DIR "/orders_job.so", 0);
  crash_arg(j, "400000", NULL);
  crash_arg(j, j->sink, NULL);
  crash_par(j, par);
  j->interval = "50";
  return j;
}

TestSuite(orders_job, .timeout = 300, .fini = crash_fini);

/* The uninterrupted run's wall time: kills land within it. */
static int64_t run_ms = 1000;

static int kill_delay(crash_job *j, int attempt, int killing, void *user) {
  (void)j;
  (void)killing;
  return crash_delay_within(run_ms, attempt, th_splitmix64(user));
}

/* Runs a job uninterrupted: exact, and its wall time in run_ms. */
static void measure(const char *what) {
  crash_job *j = orders_new(2);
  char *err = NULL;
  int rc = crash_runv(j, NULL, -1, &err, &run_ms, NULL);
  cr_assert_eq(rc, 0, "%s: exit %d: %s", what, rc, err);
  free(err);
  assert_exact(j, what);
  crash_free(j);
}

Test(orders_job, random_kills_exact) {
  const char *what = "orders_job::random_kills_exact";
  uint64_t seed = crash_seed(what), rng = seed;
  ref_init();
  measure(what);
  int kills = 0;
  /* Two jobs; more while no kill landed: a run measured on a loaded
   * machine can take longer than the ones after it, which then end before
   * their kill is due, so the window halves each time. */
  for (int n = 0; n < 2 || (kills == 0 && n < 6); n++) {
    crash_job *j = orders_new(2);
    crash_hist(j, "seed %llu: ", (ull)seed);
    crash_schedule s = {
        .kills = 1 + n % 2, .restore = 1, .max_attempts = 8, .delay = kill_delay, .user = &rng};
    int k = crash_kill_randomly(j, &s, NULL);
    if (!k) run_ms /= 2;
    kills += k;
    assert_exact(j, what);
    crash_free(j);
  }
  fprintf(stderr, "%s: %d kills landed\n", what, kills);
  cr_assert_gt(kills, 0, "%s: no kill landed", what);
}

/* Killed at parallelism from, restored from a mid-run checkpoint at to
 * (the join's buffered records, the counts and their timers move with
 * their keys), then exact. */
static void rescale(int from, int to, const char *what) {
  uint64_t seed = crash_seed(what), rng = seed;
  ref_init();
  measure(what);
  for (int attempt = 0;; attempt++) {
    cr_assert_lt(attempt, 6, "%s: no restore from a mid-run checkpoint in 6 attempts", what);
    crash_job *j = orders_new(from);
    int delay = crash_delay_within(run_ms, 0, th_splitmix64(&rng));
    char *err = NULL;
    int rc = crash_run(j, NULL, delay, &err, NULL);
    free(err);
    if (rc != CRASH_KILLED) { /* it ended before the kill */
      crash_free(j);
      continue;
    }
    crash_par(j, to);
    long long at = crash_restore_to_end(j, 1, NULL, NULL, NULL);
    if (at <= 0) { /* no checkpoint yet, or the final one: no rescale */
      crash_free(j);
      continue;
    }
    fprintf(stderr, "%s: killed at %d ms, restored checkpoint %lld at P=%d\n", what, delay, at, to);
    assert_exact(j, what);
    crash_free(j);
    break;
  }
}

Test(orders_job, rescale_2_to_3) {
  rescale(2, 3, "orders_job::rescale_2_to_3");
}

Test(orders_job, rescale_3_to_1) {
  rescale(3, 1, "orders_job::rescale_3_to_1");
}

/* The exact check sees lost timers: restored without them (failpoint
 * timers.skip_restore on every subtask), the join never drops what it
 * buffered and the seconds open at the cut are never counted; the twin
 * restored from the same checkpoint with them is exact. */
Test(orders_job, negative_control_timers_not_restored) {
  ref_init();
  crash_job *j = orders_new(2);
  /* The input stays open past the cut (failpoint source.done=until:),
   * so that the cut is never the final checkpoint, taken after the end of
   * input fired every timer: a fast machine ends the job's 400000 orders
   * within four 50 ms checkpoints. */
  char *err = NULL;
  int rc = crash_run(j, "ckpt.after_meta_commit=kill@4,source.done=until:ckpt.after_meta_commit:5",
                     -1, &err, NULL);
  crash_expect_killed(j, rc, err, "ckpt.after_meta_commit", 4);
  free(err);
  crash_job *twin = crash_twin(j, 0);
  long long at = crash_restore_to_end(j, 1, "timers.skip_restore=error+", &err, NULL);
  cr_assert_gt(at, 0, "did not resume from a checkpoint: %s", err);
  free(err);
  uint64_t n = differences(j);
  fprintf(stderr, "orders_job::negative_control: without timers: %llu differences (%s)\n", (ull)n,
          n ? R.why : "none");
  cr_assert_gt(n, 0,
               "restored without its timers, the job still wrote every count: the exact check "
               "cannot see lost timers. %s",
               j->history);
  long long at2 = crash_restore_to_end(twin, 1, NULL, &err, NULL);
  cr_assert_eq(at2, at, "the twin resumed elsewhere: %s", err);
  free(err);
  assert_exact(twin, "twin restored with its timers");
  crash_free(twin);
  crash_free(j);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, "info");
}
