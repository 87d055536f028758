/* tests/test_recovery.c: owns the crash-recovery tests of the whole `weir`
 * binary: SIGKILL at every checkpoint failpoint and at random times, the job
 * lifecycle in a state directory (new instances, refusals, restores of
 * older checkpoints, --fresh), damaged and future-format stores, and the
 * at-least-once mode, synchronous (stop-the-world) checkpoints, and full
 * disks and store errors.
 *
 * DESIGN. Every test runs the real binary (WEIR_BINARY) on the counter job
 * (gen -> key_by -> count -> file sink, parallelism 2 on 2 workers) in a
 * th_tmpdir of its own, every run with a time limit. Kills come from the
 * engine's failpoints (WEIR_FAILPOINTS=name=kill@N), and each one is
 * asserted to have fired (the process died of SIGKILL and said which
 * failpoint), so a failpoint that is never reached fails its test; random
 * kills come from a seeded delay, printed so a failure can be replayed
 * (WEIR_TEST_SEED=N). After every kill, `weir checkpoints --json` must list
 * only whole checkpoints (each one inspected: six operator subtasks, every
 * generator split once at a valid position) with ids strictly increasing and
 * never reused across attempts. After the job ends, the sink directory must
 * hold, for every key k, the counts 1..n_k EXACTLY once and nothing else:
 * the file sink commits one part per epoch when its checkpoint completed
 * and recovery commits or removes what a crash left pending (sinks/file.c),
 * so this is exactly-once output (docs/testing.md §1
 * invariants 1, 3, 4, 5, 6, 11). Every run's log ("checkpoint N completed")
 * must show ids above every id seen before. Refusals (damaged or newer
 * stores, unknown ids, unfinished jobs) must exit with their code, never by
 * a signal, and leave the sink directory byte for byte as it was.
 *
 * Synchronous checkpoints are killed at the same failpoints and restored
 * (also in aligned mode from a sync run's checkpoint): same exact output.
 * Store failures come from the failpoints store.write_chunk / store.commit
 * (enospc, error), from a store limited with --max-store-size (LMDB's map
 * full) and from a real 2 MB tmpfs (skipped where mount(2) is not allowed):
 * a declined checkpoint's message must name the store's path, the error and
 * the room left; the job runs on (exact output, the declined id never
 * listed), or stops with exit 3 after --tolerable-checkpoint-failures and
 * names its restore point, the latest listed checkpoint, from which a
 * restore gives the exact output.
 *
 * The program has its own main(): it forces Criterion's --jobs 1, so crash
 * runs never compete for the 2 cores (a slow run would shift every kill),
 * whatever the command line says. Nothing here sleeps to synchronise; the
 * only timed waits are the random kills, which are timed by design.
 *
 * Environment: WEIR_TEST_SEED=N replays the random kills' schedule;
 * WEIR_TEST_KEEP=1 keeps a failed test's directory (named in the message);
 * WEIR_TEST_VERBOSE=1 prints the messages of refused runs.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crash.h"
#include "envelope.h"
#include "helpers.h"
#include "weir/operators.h"
#include "snapshot/store.h"

typedef unsigned long long ull;

#define RUN_TIMEOUT_S 60
#define MAX_ATTEMPTS 10
/* The counter job of every test: ~0.5 s at this rate, so that a 20 ms
 * interval completes several checkpoints before the end of the input. */
#define RECORDS 200000u
#define KEYS 500u
#define RATE "300000"
#define INTERVAL "20"
/* Operator subtasks of the job: gen, count and sink, two each. */
#define SUBTASKS 6
#define MAX_LISTED 64
#define MAX_SEEN 1024

typedef struct listing {
  int has_job;
  char job_id[64];
  int finished;
  size_t n;
  ull id[MAX_LISTED];
  long long time[MAX_LISTED];
} listing;

/* ---- a job in a temporary directory -------------------------------------- */

typedef struct job {
  crash_job c;
  char job_id[64]; /* from the first listing with a job */
  /* Every checkpoint ever listed (id, completion time), for "never reused". */
  ull seen_id[MAX_SEEN];
  long long seen_time[MAX_SEEN];
  int seen_final[MAX_SEEN]; /* inspected once, when first listed */
  size_t nseen;
  ull max_id;       /* the largest id listed so far */
  ull max_logged;   /* the largest id a run logged as completed so far */
  ull floor;        /* the larger of the two when the current run started */
  int one_instance; /* restores resume the latest listed checkpoint */
  listing last;     /* the listing after run `last_runs` */
  int last_runs;
} job;

static char *path_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  cr_assert_not_null(p);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

static void before_run(crash_job *c) {
  job *j = (job *)c;
  j->floor = j->max_id > j->max_logged ? j->max_id : j->max_logged;
}

/* Checks the "checkpoint N completed" lines a run logged: ids strictly
 * increasing, all above every id listed or logged before the run (ids are
 * never reused across attempts, even those retention dropped since). */
static void check_run_log(crash_job *c, int rc, const char *err) {
  (void)rc;
  job *j = (job *)c;
  ull prev = j->floor;
  for (const char *p = strstr(err, "checkpoint "); p; p = strstr(p + 1, "checkpoint ")) {
    ull id;
    char word[16];
    if (sscanf(p, "checkpoint %llu %15s", &id, word) != 2 || strcmp(word, "completed") != 0)
      continue;
    cr_assert_gt(id, prev,
                 "checkpoint %llu completed after %llu (reused or out of order)"
                 "\nhistory: %s",
                 id, prev, c->history);
    prev = id;
  }
  if (prev > j->max_logged) j->max_logged = prev;
}

static job *job_new(uint64_t records, uint64_t keys) {
  job *j = (job *)crash_new("counter", sizeof(job));
  crash_counter(&j->c, records, keys, RATE);
  j->c.interval = INTERVAL;
  j->c.mode = "aligned";
  j->c.timeout_s = RUN_TIMEOUT_S;
  j->c.before_run = before_run;
  j->c.after_run = check_run_log;
  j->one_instance = 1;
  j->last_runs = -1;
  return j;
}

static void job_free(job *j) {
  crash_free(&j->c);
}

/* ---- running weir -------------------------------------------------------- */

/* Runs `weir ARGS...` (NULL terminated), no failpoint armed. */
static int run_cmd(char **out, char **err, ...) {
  const char *argv[32];
  int n = 0;
  argv[n++] = WEIR_BINARY;
  va_list ap;
  va_start(ap, err);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 31) argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  return th_run(argv, NULL, out, err, RUN_TIMEOUT_S);
}

static void parse_listing(const char *s, listing *l) {
  memset(l, 0, sizeof *l);
  const char *p = strstr(s, "{\"job\": ");
  cr_assert_not_null(p, "no job in the listing: %s", s);
  p += 8;
  if (*p == '"') {
    const char *e = strchr(p + 1, '"');
    cr_assert(e != NULL && (size_t)(e - p - 1) < sizeof l->job_id, "bad job id: %s", s);
    memcpy(l->job_id, p + 1, (size_t)(e - p - 1));
    l->has_job = 1;
  } else {
    cr_assert(strncmp(p, "null", 4) == 0, "bad job field: %s", s);
  }
  p = strstr(s, "\"finished\": ");
  cr_assert_not_null(p, "no finished field: %s", s);
  l->finished = strncmp(p + 12, "true", 4) == 0;
  cr_assert(l->finished || strncmp(p + 12, "false", 5) == 0, "bad finished field: %s", s);
  for (p = strstr(s, "{\"id\": "); p; p = strstr(p + 1, "{\"id\": ")) {
    cr_assert_lt(l->n, MAX_LISTED, "too many checkpoints listed: %s", s);
    cr_assert_eq(sscanf(p, "{\"id\": %llu, \"time\": %lld", &l->id[l->n], &l->time[l->n]), 2,
                 "bad checkpoint entry: %s", p);
    l->n++;
  }
}

/* `weir checkpoints --json` of the job's state directory. */
static void get_listing(job *j, listing *l) {
  char *out = NULL, *err = NULL;
  int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", j->c.state, "--json", NULL);
  cr_assert_eq(rc, 0, "weir checkpoints: exit %d, stderr: %s\nhistory: %s", rc, err, j->c.history);
  parse_listing(out, l);
  free(out);
  free(err);
}

/* `weir inspect ID --json`: asserts a whole checkpoint of this job (every
 * operator subtask, the generator's splits each once at a valid position;
 * all at the end of the input in a final checkpoint). Returns 1 if it is
 * the job's final checkpoint. */
static int check_inspect(job *j, ull id) {
  char ids[32];
  snprintf(ids, sizeof ids, "%llu", id);
  char *out = NULL, *err = NULL;
  int rc = run_cmd(&out, &err, "inspect", ids, "--state-dir", j->c.state, "--json", NULL);
  cr_assert_eq(rc, 0, "weir inspect %llu: exit %d, stderr: %s\nhistory: %s", id, rc, err,
               j->c.history);
  char want[128];
  snprintf(want, sizeof want, "{\"id\": %llu, \"job\": \"%s\"", id, j->job_id);
  cr_assert(strncmp(out, want, strlen(want)) == 0, "inspect %llu: expected '%s' in: %s", id, want,
            out);
  int final = strstr(out, "\"final\": true") != NULL;
  int per_op[3][2] = {{0}}; /* count, gen, sink x subtask */
  static const char *const ops[3] = {"count", "gen", "sink"};
  uint8_t split_seen[WEIR_GEN_SPLITS] = {0};
  int nsub = 0;
  for (const char *p = strstr(out, "{\"operator\": \""); p;
       p = strstr(p + 1, "{\"operator\": \"")) {
    const char *name = p + 14;
    int op = -1;
    for (int k = 0; k < 3; k++)
      if (strncmp(name, ops[k], strlen(ops[k])) == 0 && name[strlen(ops[k])] == '"') op = k;
    cr_assert_geq(op, 0, "inspect %llu: unexpected operator in: %s", id, p);
    unsigned sub = 99, par = 0;
    const char *q = strstr(p, "\"subtask\": ");
    cr_assert_not_null(q);
    cr_assert_eq(sscanf(q, "\"subtask\": %u, \"parallelism\": %u", &sub, &par), 2);
    cr_assert(sub < 2 && par == 2, "inspect %llu: %s subtask %u of %u", id, ops[op], sub, par);
    per_op[op][sub]++;
    nsub++;
    const char *pos = strstr(p, "\"positions\": [");
    cr_assert_not_null(pos);
    pos += 14;
    const char *end = strchr(pos, ']');
    cr_assert_not_null(end);
    unsigned npos = 0;
    for (const char *e = strstr(pos, "{\"split\": "); e && e < end;
         e = strstr(e + 1, "{\"split\": ")) {
      unsigned split;
      ull off;
      cr_assert_eq(sscanf(e, "{\"split\": %u, \"offset\": %llu}", &split, &off), 2);
      cr_assert_eq(op, 1, "inspect %llu: positions for operator %s", id, ops[op]);
      cr_assert_lt(split, WEIR_GEN_SPLITS, "inspect %llu: split %u", id, split);
      cr_assert_eq(split % 2, sub, "inspect %llu: split %u in gen subtask %u", id, split, sub);
      cr_assert_eq(split_seen[split], 0, "inspect %llu: split %u twice", id, split);
      split_seen[split] = 1;
      /* A split's position is its next i (i = split mod S), or the end. */
      cr_assert(off == j->c.records || (off < j->c.records && off % WEIR_GEN_SPLITS == split),
                "inspect %llu: split %u at %llu", id, split, off);
      if (final)
        cr_assert_eq(off, j->c.records, "inspect %llu (final): split %u at %llu", id, split, off);
      npos++;
    }
    if (op == 1)
      cr_assert_eq(npos, WEIR_GEN_SPLITS / 2, "inspect %llu: gen %u has %u", id, sub, npos);
  }
  cr_assert_eq(nsub, SUBTASKS, "inspect %llu: %d operator subtasks in: %s", id, nsub, out);
  for (int k = 0; k < 3; k++)
    for (int s = 0; s < 2; s++)
      cr_assert_eq(per_op[k][s], 1, "inspect %llu: %s/%d listed %d times", id, ops[k], s,
                   per_op[k][s]);
  for (unsigned s = 0; s < WEIR_GEN_SPLITS; s++)
    cr_assert(split_seen[s], "inspect %llu: split %u missing", id, s);
  free(out);
  free(err);
  return final;
}

/* Checks a listing against everything listed before: the same job, ids
 * strictly increasing, an id seen before only with the same completion time
 * (never reused), a new id above every id seen before (monotonic across
 * attempts), every checkpoint whole (inspected when first listed: a
 * completed checkpoint never changes), only the last one final, and only
 * when the job is finished. */
static void check_listing(job *j, const listing *l) {
  if (!l->has_job) {
    cr_assert_eq(l->n, 0, "checkpoints without a job\nhistory: %s", j->c.history);
    return;
  }
  if (!j->job_id[0])
    snprintf(j->job_id, sizeof j->job_id, "%s", l->job_id);
  else
    cr_assert_str_eq(l->job_id, j->job_id, "the job id changed\nhistory: %s", j->c.history);
  ull max_before = j->max_id;
  for (size_t i = 0; i < l->n; i++) {
    if (i) cr_assert_gt(l->id[i], l->id[i - 1], "ids not increasing\nhistory: %s", j->c.history);
    size_t k = 0;
    while (k < j->nseen && j->seen_id[k] != l->id[i]) k++;
    if (k < j->nseen) {
      cr_assert_eq(l->time[i], j->seen_time[k], "checkpoint %llu changed (id reused?)\nhistory: %s",
                   l->id[i], j->c.history);
    } else {
      cr_assert_gt(l->id[i], max_before,
                   "new checkpoint %llu not above %llu, an id listed before\nhistory: %s", l->id[i],
                   max_before, j->c.history);
      cr_assert_lt(j->nseen, MAX_SEEN);
      j->seen_id[j->nseen] = l->id[i];
      j->seen_time[j->nseen] = l->time[i];
      j->seen_final[j->nseen++] = check_inspect(j, l->id[i]);
      if (l->id[i] > j->max_id) j->max_id = l->id[i];
    }
    int final = j->seen_final[k];
    if (final && j->one_instance)
      cr_assert(i + 1 == l->n && l->finished, "checkpoint %llu is final\nhistory: %s", l->id[i],
                j->c.history);
  }
  if (l->finished) cr_assert_gt(l->n, 0, "finished without a checkpoint");
}

/* The checked listing after the job's last run (listed once per run). */
static void listing_now(job *j, listing *l) {
  if (j->last_runs == j->c.runs) {
    *l = j->last;
    return;
  }
  get_listing(j, l);
  check_listing(j, l);
  j->last = *l;
  j->last_runs = j->c.runs;
}

/* Was checkpoint id final when it was first listed? */
static int was_final(const job *j, ull id) {
  for (size_t k = 0; k < j->nseen; k++)
    if (j->seen_id[k] == id) return j->seen_final[k];
  return 0;
}

/* ---- the recovery loop --------------------------------------------------- */

/* Runs the job with NAME=kill@HIT armed and the extra arguments (NULL
 * terminated): it must die of SIGKILL after naming the failpoint and the
 * hit. Then the listing is checked. */
static void killed_at(job *j, const char *name, unsigned hit, ...) {
  CRASH_VA_ARRAY(extra, hit);
  /* A point reached at every checkpoint: the input does not end before
   * the kill (failpoint source.done=until:), however slowly a loaded
   * machine takes checkpoints (not with interval 0: only the final one). */
  char fp[200], *err = NULL;
  int n = snprintf(fp, sizeof fp, "%s=kill@%u", name, hit);
  int final_only = !strcmp(j->c.interval, "0");
  for (int i = 0; extra[i]; i++)
    if (!strcmp(extra[i], "--checkpoint-interval") && extra[i + 1])
      final_only = !strcmp(extra[i + 1], "0");
  if (!final_only && !strncmp(name, "ckpt.", 5) && strcmp(name, "ckpt.during_restore"))
    snprintf(fp + n, sizeof fp - (size_t)n, ",source.done=until:%s:%u", name, hit + 1);
  int rc = crash_runv(&j->c, fp, -1, &err, NULL, extra);
  crash_expect_killed(&j->c, rc, err, name, hit);
  free(err);
  listing l;
  listing_now(j, &l);
  cr_assert_not(l.finished, "a killed job is listed as finished\nhistory: %s", j->c.history);
}

/* One `--restore latest` run that must end the job, with stderr saying
 * where it resumed: the latest listed checkpoint, or the beginning. */
static void restore_to_end(job *j) {
  listing l;
  listing_now(j, &l);
  char *err = NULL;
  crash_restore_to_end(&j->c, 1, NULL, &err, NULL);
  if (j->one_instance) {
    char want[160];
    if (l.n)
      snprintf(want, sizeof want, "restored job %s from checkpoint %llu", l.job_id, l.id[l.n - 1]);
    else
      snprintf(want, sizeof want, "starting from the beginning");
    cr_assert(strstr(err, want) != NULL, "no '%s' in stderr: %s\nhistory: %s", want, err,
              j->c.history);
  }
  free(err);
}

/* The end of every recovery scenario: finished, listed whole, exact. */
static void check_finished(job *j) {
  listing l;
  listing_now(j, &l);
  cr_assert(l.finished, "the job is not listed as finished\nhistory: %s", j->c.history);
  cr_assert(was_final(j, l.id[l.n - 1]), "the last checkpoint is not final");
  crash_check_counter(&j->c);
}

/* Kill at failpoint `name` hit 1, 2, 3 (each in a new directory) in
 * checkpoint mode `mode`, then restore until done. */
static void kill_at_in(const char *name, const char *mode) {
  for (unsigned hit = 1; hit <= 3; hit++) {
    job *j = job_new(RECORDS, KEYS);
    j->c.mode = mode;
    killed_at(j, name, hit, NULL);
    restore_to_end(j);
    check_finished(j);
    job_free(j);
  }
  cr_assert_eq(th_leak_check(), 0);
}

static void kill_at(const char *name) {
  kill_at_in(name, "aligned");
}

TestSuite(recovery, .timeout = 150, .fini = crash_fini);

Test(recovery, kill_at_barrier_injected) {
  kill_at("ckpt.barrier_injected");
}
Test(recovery, kill_at_aligning) {
  kill_at("ckpt.aligning");
}
Test(recovery, kill_at_after_sync_snapshot) {
  kill_at("ckpt.after_sync_snapshot");
}
Test(recovery, kill_at_after_chunk_write) {
  kill_at("ckpt.after_chunk_write");
}
Test(recovery, kill_at_before_meta_commit) {
  kill_at("ckpt.before_meta_commit");
}
Test(recovery, kill_at_after_meta_commit) {
  kill_at("ckpt.after_meta_commit");
}

/* A first run killed after its second checkpoint completed; then the
 * restore killed while loading (hit 1: the coordinator's load; hits 2, 3:
 * operator subtasks installing their state); then a restore that ends. */
Test(recovery, kill_during_restore) {
  for (unsigned hit = 1; hit <= 3; hit++) {
    job *j = job_new(RECORDS, KEYS);
    killed_at(j, "ckpt.after_meta_commit", 2, NULL);
    listing before, after;
    listing_now(j, &before);
    cr_assert_geq(before.n, 2);
    killed_at(j, "ckpt.during_restore", hit, "--restore", "latest", NULL);
    /* A killed restore completed nothing. */
    listing_now(j, &after);
    cr_assert_eq(after.n, before.n);
    cr_assert_eq(after.id[after.n - 1], before.id[before.n - 1]);
    restore_to_end(j);
    check_finished(j);
    job_free(j);
  }
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed during the job's FINAL checkpoint (before its metadata commit),
 * after the sink subtasks had pre-committed their last epoch; the restore
 * resumes an earlier checkpoint. A regression test: when the file sink
 * wrote one file per subtask, the restore started an empty file and renamed
 * it over the complete one, losing every line before the cut. With a part
 * per epoch, the restore removes the uncommitted parts after the restored
 * checkpoint and the output is exact. */
Test(recovery, kill_during_final_checkpoint) {
  job *j = job_new(RECORDS, KEYS);
  killed_at(j, "ckpt.after_meta_commit", 1, NULL);
  /* No periodic checkpoint in this run: the first one is the final one. */
  killed_at(j, "ckpt.before_meta_commit", 1, "--restore", "latest", "--checkpoint-interval", "0",
            NULL);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- random kills -------------------------------------------------------- */

static int random_delay(crash_job *j, int attempt, int killing, void *rng) {
  (void)j;
  (void)attempt;
  return killing ? 5 + (int)(th_splitmix64(rng) % 645) : -1;
}

/* After a kill, the listing is checked. */
static void after_kill(crash_job *j, int attempt, int rc, const char *err, void *rng) {
  (void)attempt;
  (void)err;
  (void)rng;
  listing l;
  if (rc != 0) listing_now((job *)j, &l);
}

static crash_job *random_job(int jn, void *rng) {
  (void)jn;
  (void)rng;
  return &job_new(RECORDS, KEYS)->c;
}

/* A run may have ended before its kill: then it is done. */
static void random_check(crash_job *j, void *rng) {
  (void)rng;
  check_finished((job *)j);
}

/* At least 20 runs: jobs killed by SIGKILL at random delays (1 to 3 kills
 * each, up to 650 ms into a ~0.5 s run, so some runs end before the kill),
 * restored until they end; each checked exactly. The seed is printed;
 * WEIR_TEST_SEED=N replays it. */
Test(recovery, random_kills) {
  uint64_t seed = crash_seed("recovery::random_kills"), rng = seed;
  crash_loop l = {.min_runs = 20,
                  .max_kills = 3,
                  .max_attempts = MAX_ATTEMPTS,
                  .seed = seed,
                  .rng = &rng,
                  .new_job = random_job,
                  .check = random_check,
                  .delay = random_delay,
                  .after = after_kill,
                  .user = &rng};
  int runs = 0, kills = crash_kill_loop(&l, &runs);
  fprintf(stderr, "recovery::random_kills: %d runs, %d killed\n", runs, kills);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- lifecycle ----------------------------------------------------------- */

TestSuite(lifecycle, .timeout = 120, .fini = crash_fini);

/* Two complete runs on one state directory: the second is a new instance
 * of the same job, its checkpoint ids continue above the first's. */
Test(lifecycle, run_twice) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  free(err);
  listing a, b;
  listing_now(j, &a);
  cr_assert(a.finished);
  crash_check_counter(&j->c);
  j->one_instance = 0; /* the first instance's final checkpoint may stay listed */
  rc = crash_run(&j->c, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "second run: exit %d: %s", rc, err);
  free(err);
  listing_now(j, &b); /* same job id, new ids above the first run's */
  cr_assert(b.finished);
  cr_assert_gt(b.id[0], a.id[a.n - 1], "the second instance's checkpoints reuse ids");
  crash_check_counter(&j->c);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A plain run on an unfinished job is refused (exit 2) naming both ways
 * on, and changes nothing. */
Test(lifecycle, unfinished_is_refused) {
  job *j = job_new(RECORDS, KEYS);
  killed_at(j, "ckpt.after_meta_commit", 2, NULL);
  listing before, after;
  listing_now(j, &before);
  char *img = crash_dir_image(j->c.out, 0);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "--restore latest") != NULL, "no '--restore latest' in: %s", err);
  cr_assert(strstr(err, "--fresh") != NULL, "no '--fresh' in: %s", err);
  free(err);
  char *img2 = crash_dir_image(j->c.out, 0);
  cr_assert_str_eq(img, img2, "a refused run changed the output");
  listing_now(j, &after);
  cr_assert_eq(after.n, before.n);
  cr_assert_eq(after.id[after.n - 1], before.id[before.n - 1]);
  free(img);
  free(img2);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed before any checkpoint completed (the first barrier): --restore
 * latest starts from the beginning, says so, and the output is exact. */
Test(lifecycle, restore_without_checkpoint) {
  job *j = job_new(RECORDS, KEYS);
  killed_at(j, "ckpt.barrier_injected", 1, NULL);
  listing l;
  listing_now(j, &l);
  cr_assert_eq(l.n, 0);
  restore_to_end(j); /* asserts "starting from the beginning" */
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The same with checkpoints off (interval 0: only the final one), killed
 * at that final checkpoint's commit. */
Test(lifecycle, restore_without_checkpoint_interval_0) {
  job *j = job_new(RECORDS, KEYS);
  j->c.interval = "0";
  killed_at(j, "ckpt.before_meta_commit", 1, NULL);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* --restore latest on a finished job: exit 0, "already finished", nothing
 * written. */
Test(lifecycle, restore_finished_is_noop) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  free(err);
  listing a, b;
  listing_now(j, &a);
  char *img = crash_dir_image(j->c.out, 0);
  rc = crash_run(&j->c, NULL, -1, &err, "--restore", "latest", NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "already finished") != NULL && strstr(err, "nothing to do") != NULL,
            "stderr: %s", err);
  free(err);
  char *img2 = crash_dir_image(j->c.out, 0);
  cr_assert_str_eq(img, img2, "a restore of a finished job changed the output");
  listing_now(j, &b);
  cr_assert_eq(b.n, a.n);
  cr_assert_eq(b.id[b.n - 1], a.id[a.n - 1]);
  free(img);
  free(img2);
  crash_check_counter(&j->c);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* --restore ID of the oldest retained checkpoint (not the latest). */
Test(lifecycle, restore_older_id) {
  job *j = job_new(RECORDS, KEYS);
  killed_at(j, "ckpt.after_meta_commit", 2, NULL);
  listing l;
  listing_now(j, &l);
  cr_assert_geq(l.n, 2);
  char id[32];
  snprintf(id, sizeof id, "%llu", l.id[0]);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, "--restore", id, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  char want[128];
  snprintf(want, sizeof want, "from checkpoint %llu", l.id[0]);
  cr_assert(strstr(err, want) != NULL, "no '%s' in: %s", want, err);
  free(err);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* --restore of an id that is not retained: exit 2, naming it; nothing
 * written. */
Test(lifecycle, restore_unknown_id) {
  job *j = job_new(RECORDS, KEYS);
  killed_at(j, "ckpt.after_meta_commit", 1, NULL);
  char *img = crash_dir_image(j->c.out, 0);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, "--restore", "999999", NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "999999") != NULL, "stderr: %s", err);
  free(err);
  char *img2 = crash_dir_image(j->c.out, 0);
  cr_assert_str_eq(img, img2, "a refused restore changed the output");
  free(img);
  free(img2);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* --fresh on an unfinished job: a new instance of the same job runs from
 * the beginning, ids continue, the output is the new run's, exact. */
Test(lifecycle, fresh_on_unfinished) {
  job *j = job_new(RECORDS, KEYS);
  killed_at(j, "ckpt.after_meta_commit", 2, NULL);
  listing a, b;
  listing_now(j, &a);
  j->one_instance = 0;
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, "--fresh", NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "restored") == NULL, "--fresh restored: %s", err);
  free(err);
  listing_now(j, &b); /* same job id, ids above the first instance's */
  cr_assert(b.finished);
  cr_assert_gt(b.id[b.n - 1], a.id[a.n - 1]);
  crash_check_counter(&j->c);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* `weir checkpoints --json` where there is no store: an empty listing,
 * exit 0, and nothing created. */
Test(lifecycle, checkpoints_on_empty_dir) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *missing = path_join(dir, "nothing-here");
  const char *dirs[2] = {dir, missing};
  for (int i = 0; i < 2; i++) {
    char *out = NULL, *err = NULL;
    int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", dirs[i], "--json", NULL);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", dirs[i], rc, err);
    cr_assert_str_eq(
        out, "{\"job\": null, \"finished\": false, \"checkpoints\": [], \"savepoints\": []}\n");
    free(out);
    free(err);
  }
  struct stat st;
  cr_assert_neq(stat(missing, &st), 0, "weir checkpoints created %s", missing);
  char *store = path_join(dir, "store");
  cr_assert_neq(stat(store, &st), 0, "weir checkpoints created %s", store);
  free(store);
  free(missing);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* `weir inspect ID --json`: per-subtask entries (operator, subtask,
 * parallelism, entries) and the generator's positions; an unknown id is a
 * usage error. */
Test(lifecycle, inspect_json) {
  job *j = job_new(RECORDS, KEYS);
  killed_at(j, "ckpt.after_meta_commit", 2, NULL); /* inspects every listed one */
  listing l;
  listing_now(j, &l);
  char id[32], *out = NULL;
  snprintf(id, sizeof id, "%llu", l.id[l.n - 1]);
  char *err = NULL;
  int rc = run_cmd(&out, &err, "inspect", id, "--state-dir", j->c.state, "--json", NULL);
  cr_assert_eq(rc, 0);
  /* Keyed state: the two count subtasks hold the keys seen so far. */
  unsigned long long e0 = 0, e1 = 0;
  const char *c0 = strstr(out, "{\"operator\": \"count\", \"subtask\": 0");
  const char *c1 = strstr(out, "{\"operator\": \"count\", \"subtask\": 1");
  cr_assert(c0 && c1, "%s", out);
  cr_assert_eq(sscanf(strstr(c0, "\"u64_entries\": "), "\"u64_entries\": %llu", &e0), 1);
  cr_assert_eq(sscanf(strstr(c1, "\"u64_entries\": "), "\"u64_entries\": %llu", &e1), 1);
  cr_assert(e0 + e1 > 0 && e0 + e1 <= KEYS, "count entries %llu + %llu", e0, e1);
  free(out);
  free(err);
  rc = run_cmd(&out, &err, "inspect", "999999", "--state-dir", j->c.state, "--json", NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "999999") != NULL, "%s", err);
  free(out);
  free(err);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- damage -------------------------------------------------------------- */

TestSuite(damage, .timeout = 120, .fini = crash_fini);

static char *data_mdb(const job *j) {
  char *store = path_join(j->c.state, "store");
  char *p = path_join(store, "data.mdb");
  free(store);
  return p;
}

static uint64_t be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
  return v;
}

/* locate's kind for u64 state: a chunk with its keys or, when the
 * checkpoint shares the keys of an earlier one, with its values only. */
#define U64_STATE (-1)

/* Finds a stored value in <state>/store with LMDB itself (read-only, no
 * lock file use): the job record (db "job"), the metadata of checkpoint id
 * (db "meta"), or the first chunk of checkpoint id whose envelope kind is
 * `kind` (db "chunks"). Returns a malloc'd copy of the value (*len bytes). */
static uint8_t *locate(const job *j, const char *db, ull id, int kind, size_t *len) {
  char *store = path_join(j->c.state, "store");
  MDB_env *env = NULL;
  cr_assert_eq(mdb_env_create(&env), 0);
  cr_assert_eq(mdb_env_set_maxdbs(env, 4), 0);
  int rc = mdb_env_open(env, store, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0644);
  cr_assert_eq(rc, 0, "mdb_env_open %s: %s", store, mdb_strerror(rc));
  MDB_txn *txn = NULL;
  cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
  MDB_dbi dbi;
  cr_assert_eq(mdb_dbi_open(txn, db, 0, &dbi), 0, "no database %s", db);
  uint8_t kb[16] = {0};
  for (int i = 0; i < 8; i++) kb[i] = (uint8_t)(id >> (56 - 8 * i));
  MDB_val key, val;
  int found = 0;
  if (!strcmp(db, "job")) {
    key = (MDB_val){3, (void *)"job"};
    found = mdb_get(txn, dbi, &key, &val) == 0;
  } else if (!strcmp(db, "meta")) {
    key = (MDB_val){8, kb};
    found = mdb_get(txn, dbi, &key, &val) == 0;
  } else {
    MDB_cursor *cur = NULL;
    cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
    key = (MDB_val){16, kb};
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
      if (key.mv_size != 16 || be64(key.mv_data) != id) break;
      const uint8_t *v = val.mv_data;
      found = val.mv_size > WEIR__ENV_HDR + 8 && v[7] == 0 &&
              (v[6] == kind ||
               (kind == U64_STATE && (v[6] == WEIR__KIND_U64 || v[6] == WEIR__KIND_U64_VALUES)));
      if (found) break;
    }
    mdb_cursor_close(cur);
  }
  cr_assert(found, "no %s value for checkpoint %llu (kind %d)", db, id, kind);
  cr_assert(memcmp(val.mv_data, "WEIR", 4) == 0, "the %s value has no envelope", db);
  uint8_t *copy = malloc(val.mv_size);
  memcpy(copy, val.mv_data, val.mv_size);
  *len = val.mv_size;
  mdb_txn_abort(txn);
  mdb_env_close(env);
  free(store);
  return copy;
}

/* Replaces every copy of the value `old` in data.mdb by `new` (same
 * length): the live one and any stale copy on a free page. Returns how
 * many. */
static int replace_value(const job *j, const uint8_t *old, const uint8_t *new, size_t len) {
  char *mdb = data_mdb(j);
  size_t flen = 0;
  char *d = th_read_file(mdb, &flen);
  cr_assert_not_null(d);
  int n = 0;
  for (size_t i = 0; i + len <= flen; i++) {
    if (memcmp(d + i, old, len) != 0) continue;
    memcpy(d + i, new, len);
    n++;
  }
  cr_assert_gt(n, 0, "the value is not in %s", mdb);
  cr_assert_eq(th_write_file(mdb, d, flen), 0);
  free(d);
  free(mdb);
  return n;
}

static void patch_file(const char *path, long off, const void *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
  cr_assert_eq(pwrite(fd, p, n, off), (ssize_t)n);
  cr_assert_eq(close(fd), 0);
}

/* A job killed after its third checkpoint committed (three retained). */
static job *killed_with_checkpoints(listing *l) {
  job *j = job_new(RECORDS, KEYS);
  killed_at(j, "ckpt.after_meta_commit", 3, NULL);
  listing_now(j, l);
  cr_assert_eq(l->n, 3);
  return j;
}

/* A refused run: exit `code` (not a signal), stderr naming `want` (if not
 * NULL), and the sink directory untouched. Returns stderr (caller frees). */
static char *expect_refused(job *j, int code, const char *want, const char *const img,
                            const char *restore) {
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, "--restore", restore, NULL);
  cr_assert_lt(rc, 128, "the run died of signal %d: %s", rc - 128, err);
  cr_assert_eq(rc, code, "exit %d (expected %d): %s", rc, code, err);
  if (want) cr_assert(strstr(err, want) != NULL, "no '%s' in: %s", want, err);
  if (getenv("WEIR_TEST_VERBOSE")) fprintf(stderr, "refused (exit %d): %s", rc, err);
  char *now = crash_dir_image(j->c.out, 0);
  cr_assert_str_eq(img, now, "a refused run changed the output");
  free(now);
  return err;
}

/* (a) A flipped payload byte in a chunk of the latest checkpoint: refused
 * (exit 3) naming the checkpoint, nothing run; (b) an older checkpoint,
 * whose chunks are intact, restores explicitly and the output is exact. */
Test(damage, flipped_chunk_byte) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  ull latest = l.id[l.n - 1];
  size_t len;
  uint8_t *v = locate(j, "chunks", latest, U64_STATE, &len);
  uint8_t *bad = malloc(len);
  memcpy(bad, v, len);
  bad[WEIR__ENV_HDR + 5] ^= 0x5a;
  replace_value(j, v, bad, len);
  free(v);
  free(bad);
  char *img = crash_dir_image(j->c.out, 0);
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu", latest);
  char *err = expect_refused(j, 3, want, img, "latest");
  /* The refusal names the intact older checkpoints and how to restore one. */
  char intact[160];
  snprintf(intact, sizeof intact,
           "intact retained checkpoints (checked): %llu, %llu: restore one with --restore ID",
           l.id[l.n - 2], l.id[l.n - 3]);
  cr_assert(strstr(err, intact) != NULL, "no '%s' in: %s", intact, err);
  free(err);
  /* weir checkpoints --verify: a line each, exit 3 for the damaged one. */
  char *vout = NULL, *verr = NULL;
  int vrc = run_cmd(&vout, &verr, "checkpoints", "--state-dir", j->c.state, "--verify", NULL);
  cr_assert_eq(vrc, 3, "--verify: exit %d: %s%s", vrc, vout, verr);
  for (size_t k = 0; k < l.n; k++) {
    char line[96];
    snprintf(line, sizeof line, k + 1 == l.n ? "%llu damaged: " : "%llu ok\n", l.id[k]);
    cr_assert(strstr(vout, line) != NULL, "no '%s' in: %s", line, vout);
  }
  free(vout);
  free(verr);
  /* Listing still works (the metadata is intact). */
  listing l2;
  get_listing(j, &l2);
  cr_assert_eq(l2.n, l.n);
  snprintf(want, sizeof want, "%llu", l.id[l.n - 2]);
  int rc = crash_run(&j->c, NULL, -1, &err, "--restore", want, NULL);
  cr_assert_eq(rc, 0, "restore of %s: exit %d: %s", want, rc, err);
  free(err);
  /* The damaged checkpoint stays listed until retention drops it: check
   * the end without inspecting it. */
  get_listing(j, &l2);
  cr_assert(l2.finished);
  cr_assert_gt(l2.id[l2.n - 1], latest);
  crash_check_counter(&j->c);
  /* Intact once retention dropped the damaged one (if the run took enough
   * checkpoints for that). */
  int still = 0;
  for (size_t k = 0; k < l2.n; k++) still |= l2.id[k] == latest;
  vrc = run_cmd(&vout, &verr, "checkpoints", "--state-dir", j->c.state, "--verify", NULL);
  cr_assert_eq(vrc, still ? 3 : 0, "--verify after the restore: exit %d: %s%s", vrc, vout, verr);
  free(vout);
  free(verr);
  free(img);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* (c) data.mdb truncated to half: refused, no signal, nothing run. */
Test(damage, truncated_store) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  char *mdb = data_mdb(j);
  struct stat st;
  cr_assert_eq(stat(mdb, &st), 0);
  cr_assert_eq(truncate(mdb, st.st_size / 2), 0);
  char *img = crash_dir_image(j->c.out, 0);
  char *err = expect_refused(j, 3, NULL, img, "latest");
  cr_assert(strstr(err, "corrupt") != NULL || strstr(err, "damaged") != NULL,
            "no clear message: %s", err);
  free(err);
  char *out = NULL;
  int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", j->c.state, "--json", NULL);
  cr_assert(rc == 0 || rc == 3, "weir checkpoints on a truncated store: exit %d: %s", rc, err);
  free(out);
  free(err);
  free(img);
  free(mdb);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The page number of the main (named-database) root of data.mdb's newer
 * meta page, read from LMDB 0.9's on-disk meta layout (64-bit): after the
 * 16-byte page header, magic u32, version u32, address, map size, then the
 * free and the main database records (48 bytes each, the root last), the
 * last page and the txn id. 0 if the layout is not the one expected. */
static uint64_t main_root_page(const char *mdb) {
  size_t len = 0;
  char *d = th_read_file(mdb, &len);
  cr_assert_not_null(d);
  uint64_t root = 0, best = 0;
  for (int m = 0; m < 2 && len >= 2 * 4096; m++) {
    const char *p = d + m * 4096 + 16;
    uint32_t magic;
    uint64_t r, txn;
    memcpy(&magic, p, 4);
    memcpy(&r, p + 24 + 48 + 40, 8);
    memcpy(&txn, p + 24 + 96 + 8, 8);
    if (magic == 0xBEEFC0DEu && txn >= best && r >= 2 && r < len / 4096) {
      best = txn;
      root = r;
    }
  }
  free(d);
  return root;
}

/* (d) Garbage over LMDB's own pages 2..5 (branch, leaf and free-list pages
 * of a small store) and over the live main root page (pages 2..5 may all
 * be free, their contents stale, depending on how the writes were grouped
 * into transactions): refused, no signal, nothing run. */
Test(damage, scribbled_pages) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  char *mdb = data_mdb(j);
  struct stat st;
  cr_assert_eq(stat(mdb, &st), 0);
  cr_assert_geq(st.st_size, 6 * 4096);
  uint64_t root = main_root_page(mdb);
  cr_assert_gt(root, 0, "no meta page with a main root in %s", mdb);
  uint8_t junk[4 * 4096];
  uint64_t rng = 12345;
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)th_splitmix64(&rng);
  patch_file(mdb, 2 * 4096, junk, sizeof junk);
  patch_file(mdb, (long)root * 4096, junk, 4096);
  char *img = crash_dir_image(j->c.out, 0);
  char *err = expect_refused(j, 3, NULL, img, "latest");
  cr_assert(strstr(err, "corrupt") != NULL || strstr(err, "damaged") != NULL,
            "no clear message: %s", err);
  free(err);
  char *out = NULL;
  int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", j->c.state, "--json", NULL);
  cr_assert(rc == 0 || rc == 3, "weir checkpoints on a scribbled store: exit %d: %s", rc, err);
  free(out);
  free(err);
  free(img);
  free(mdb);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Rewrites every copy of the value v (len bytes) with its envelope as
 * written by format WEIR_STORE_FORMAT + 1, with a valid checksum. Frees v. */
static void make_future(const job *j, uint8_t *v, size_t len) {
  uint8_t *f = malloc(len);
  memcpy(f, v, len);
  uint16_t kind = (uint16_t)(v[6] | v[7] << 8);
  weir__env_seal(f, (uint16_t)(WEIR_STORE_FORMAT + 1), kind, (uint32_t)(len - WEIR__ENV_HDR));
  replace_value(j, v, f, len);
  free(f);
  free(v);
}

/* (e) The latest checkpoint's metadata written by a newer format: refused
 * (exit 3) saying so; the older ones still restore. */
Test(damage, future_format_checkpoint) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  ull latest = l.id[l.n - 1];
  size_t len;
  uint8_t *v = locate(j, "meta", latest, 0, &len);
  make_future(j, v, len);
  char *img = crash_dir_image(j->c.out, 0);
  char *err = expect_refused(j, 3, NULL, img, "latest");
  cr_assert(strstr(err, "format") != NULL || strstr(err, "newer") != NULL,
            "the message does not say newer format: %s", err);
  free(err);
  char id[32];
  snprintf(id, sizeof id, "%llu", l.id[0]);
  int rc = crash_run(&j->c, NULL, -1, &err, "--restore", id, NULL);
  cr_assert_eq(rc, 0, "restore of %s: exit %d: %s", id, rc, err);
  free(err);
  crash_check_counter(&j->c);
  free(img);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* (e') A chunk of the latest checkpoint in a newer format: refused the
 * same way. */
Test(damage, future_format_chunk) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  ull latest = l.id[l.n - 1];
  size_t len;
  uint8_t *v = locate(j, "chunks", latest, U64_STATE, &len);
  make_future(j, v, len);
  char *img = crash_dir_image(j->c.out, 0);
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu", latest);
  char *err = expect_refused(j, 3, want, img, "latest");
  cr_assert(strstr(err, "format") != NULL || strstr(err, "newer") != NULL,
            "the message does not say newer format: %s", err);
  free(err);
  free(img);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* (e'') The job record in a newer format: every verb refuses (exit 3). */
Test(damage, future_format_job_record) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  size_t len;
  uint8_t *v = locate(j, "job", 0, 0, &len);
  make_future(j, v, len);
  char *img = crash_dir_image(j->c.out, 0);
  char *err = expect_refused(j, 3, NULL, img, "latest");
  cr_assert(strstr(err, "format") != NULL || strstr(err, "newer") != NULL,
            "the message does not say newer format: %s", err);
  free(err);
  char *out = NULL;
  int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", j->c.state, "--json", NULL);
  cr_assert_eq(rc, 3, "weir checkpoints: exit %d: %s", rc, err);
  free(out);
  free(err);
  free(img);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- at-least-once ------------------------------------------------------- */

/* Barriers never block an input: after a kill and a restore, every (key,
 * count) for count 1..n_k is in the output at least once, no gap. The final
 * counts may exceed n_k: the count's snapshot is taken when the barrier has
 * arrived on all its inputs, so it includes records that came after the
 * barrier on the input that delivered it first; the restored sources replay
 * them and they are counted again (at-least-once state, as with Flink's
 * BarrierTracker). Such lines are reported, not failed. */
Test(recovery, at_least_once_kill_and_restore) {
  job *j = job_new(RECORDS, KEYS);
  j->c.mode = "at-least-once";
  killed_at(j, "ckpt.after_meta_commit", 3, NULL);
  restore_to_end(j);
  listing l;
  listing_now(j, &l);
  cr_assert(l.finished);
  crash_tally t;
  crash_tally_init(&j->c, &t, 0);
  cr_assert_gt(crash_tally_sink(&j->c, &t), 0, "no sink files\nhistory: %s", j->c.history);
  uint64_t dups = 0;
  for (uint64_t k = 0; k < j->c.keys; k++)
    for (uint64_t c = 1; c <= crash_n_of(&j->c, k); c++) {
      uint32_t n = t.seen[k * t.per + c - 1];
      cr_assert_geq(n, 1, "line '%llu %llu' missing\nhistory: %s", (ull)k, (ull)c, j->c.history);
      dups += n - 1;
    }
  cr_assert_geq(t.lines, j->c.records);
  fprintf(stderr,
          "recovery::at_least_once: %llu lines for %llu records: %llu duplicated lines, %llu "
          "lines above a key's final count (records counted twice)\n",
          (ull)t.lines, (ull)j->c.records, (ull)dups, (ull)t.over);
  crash_tally_free(&t);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- synchronous checkpoints --------------------------------------------- */

/* The stop-the-world mode writes ordinary checkpoints: a sync run killed
 * at a failpoint restores (in sync mode, and in aligned mode from a sync
 * run's checkpoint) to exactly the failure-free output. */
TestSuite(sync_recovery, .timeout = 150, .fini = crash_fini);

Test(sync_recovery, kill_at_barrier_injected) {
  kill_at_in("ckpt.barrier_injected", "sync");
}
Test(sync_recovery, kill_at_after_sync_snapshot) {
  kill_at_in("ckpt.after_sync_snapshot", "sync");
}
Test(sync_recovery, kill_at_after_meta_commit) {
  kill_at_in("ckpt.after_meta_commit", "sync");
}
Test(sync_recovery, restore_a_sync_checkpoint_aligned) {
  job *j = job_new(RECORDS, KEYS);
  j->c.mode = "sync";
  killed_at(j, "ckpt.after_meta_commit", 3, NULL);
  j->c.mode = "aligned";
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- full disks and store errors ------------------------------------------ */

/* A declined checkpoint's message names the store, the error and the room
 * there was; returns the id it names (0 when the message names none). */
static ull check_declined(job *j, const char *err, const char *verb, const char *error) {
  char want[700];
  snprintf(want, sizeof want, "store %s/store: ", j->c.state);
  cr_assert(strstr(err, want) != NULL, "the message does not name the store '%s': %s", want, err);
  cr_assert(strstr(err, error) != NULL, "no '%s' in: %s", error, err);
  cr_assert(strstr(err, "bytes free") != NULL || strstr(err, "in use") != NULL,
            "the message says nothing of the room left: %s", err);
  const char *p = strstr(err, verb);
  cr_assert_not_null(p, "no '%s' in: %s", verb, err);
  ull id = 0;
  const char *c = p;
  while (c > err && !(c[0] == 'c' && strncmp(c, "checkpoint ", 11) == 0)) c--;
  if (sscanf(c, "checkpoint %llu", &id) != 1) id = 0;
  return id;
}

/* A listing (with --retain 50) that holds every completed checkpoint of
 * the run, and never `declined`. */
static void check_not_listed(job *j, ull declined) {
  listing l;
  listing_now(j, &l);
  cr_assert_gt(l.n, 1, "fewer checkpoints than expected\nhistory: %s", j->c.history);
  for (size_t i = 0; i < l.n; i++)
    cr_assert_neq(l.id[i], declined, "declined checkpoint %llu is listed\nhistory: %s", declined,
                  j->c.history);
}

TestSuite(diskfull, .timeout = 150, .fini = crash_fini);

/* One chunk write fails with ENOSPC: that checkpoint is declined with a
 * message naming the store, the job runs on, later checkpoints complete,
 * the declined one is never listed, and the output is exact. */
Test(diskfull, enospc_once_declines_one_checkpoint) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = crash_run(&j->c, "store.write_chunk=enospc@6", -1, &err, "--retain", "50", NULL);
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  ull id = check_declined(j, err, " declined: ", "No space left on device");
  cr_assert_gt(id, 0, "no declined checkpoint id in: %s", err);
  cr_assert(strstr(err, "[simulated by failpoint store.write_chunk]") != NULL, "%s", err);
  cr_assert(strstr(err, "the subtask needs ") != NULL, "%s", err);
  cr_assert(strstr(err, "the restore point stays ") != NULL, "%s", err);
  free(err);
  check_not_listed(j, id);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The commit (metadata) fails once with EIO: declined, the job goes on. */
Test(diskfull, eio_at_commit_declines_one_checkpoint) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = crash_run(&j->c, "store.commit=error@3", -1, &err, "--retain", "50", NULL);
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  ull id = check_declined(j, err, " declined: ", "Input/output error");
  cr_assert(strstr(err, "committing checkpoint") != NULL, "%s", err);
  free(err);
  check_not_listed(j, id);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Every write fails from the 9th chunk on: with 2 failures tolerated the
 * third stops the job (exit 3) naming its restore point, the latest listed
 * checkpoint; a restore from it gives the exact output. */
Test(diskfull, persistent_enospc_stops_the_job) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = crash_run(&j->c, "store.write_chunk=enospc@9+", -1, &err,
                     "--tolerable-checkpoint-failures", "2", NULL);
  cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
  check_declined(j, err, " failed: ", "No space left on device");
  cr_assert(strstr(err, "3 checkpoints failed in a row, more than the 2 tolerated") != NULL, "%s",
            err);
  listing l;
  listing_now(j, &l);
  cr_assert_gt(l.n, 0, "no checkpoint completed before the failures\nhistory: %s", j->c.history);
  cr_assert_not(l.finished);
  char want[64];
  snprintf(want, sizeof want, "its restore point is checkpoint %llu", l.id[l.n - 1]);
  cr_assert(strstr(err, want) != NULL, "no '%s' in: %s", want, err);
  free(err);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* No failure tolerated: the first I/O error stops the job. */
Test(diskfull, tolerate_none) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = crash_run(&j->c, "store.write_chunk=error@9", -1, &err,
                     "--tolerable-checkpoint-failures", "0", NULL);
  cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
  check_declined(j, err, " failed: ", "Input/output error");
  cr_assert(strstr(err, "1 checkpoints failed in a row, more than the 0 tolerated") != NULL, "%s",
            err);
  free(err);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Only the final checkpoint (interval 0), and its commit fails once: it is
 * tried again after a second and the job ends finished and exact. */
Test(diskfull, final_checkpoint_is_retried) {
  job *j = job_new(RECORDS, KEYS);
  j->c.interval = "0";
  char *err = NULL;
  int rc = crash_run(&j->c, "store.commit=enospc@1", -1, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "the final checkpoint ") != NULL && strstr(err, " declined: ") != NULL,
            "%s", err);
  free(err);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Keys enough that the count's state outgrows a small store while the job
 * runs: the early checkpoints fit, later ones do not. */
#define BIG_KEYS 100000u

/* The store's map is limited (--max-store-size 1M): MDB_MAP_FULL declines
 * checkpoints, the job stops after the tolerated failures, and a restore
 * with room gives the exact output. */
Test(diskfull, map_full) {
  job *j = job_new(RECORDS, BIG_KEYS);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, "--max-store-size", "1M",
                     "--tolerable-checkpoint-failures", "1", NULL);
  cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
  check_declined(j, err, " failed: ", "the store's map is full (map size ");
  free(err);
  listing l;
  listing_now(j, &l);
  cr_assert_gt(l.n, 0, "no checkpoint fitted\nhistory: %s", j->c.history);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A real full file system: the state directory on a 2 MB tmpfs (needs
 * mount(2): root with CAP_SYS_ADMIN; skipped otherwise). Checkpoints are
 * declined with ENOSPC and the free space in the message, the job stops
 * at the first one (none is tolerated: whether a second decline follows
 * depends on how far the job got when the disk filled, since retention
 * frees room); after the file system grows, the restore is exact. */
static char *mounted; /* unmounted by the test, or else by mnt_cleanup */

static void mnt_cleanup(void) {
  if (mounted) {
    umount2(mounted, MNT_DETACH);
    free(mounted);
    mounted = NULL;
  }
  crash_fini();
}

Test(diskfull, tiny_tmpfs, .fini = mnt_cleanup) {
  job *j = job_new(RECORDS, BIG_KEYS);
  char *small = path_join(j->c.dir, "small");
  cr_assert_eq(mkdir(small, 0755), 0, "%s", strerror(errno));
  if (mount("tmpfs", small, "tmpfs", 0, "size=2m") != 0) {
    int e = errno;
    free(small);
    job_free(j);
    cr_skip_test("cannot mount a 2 MB tmpfs here (%s): needs root with CAP_SYS_ADMIN", strerror(e));
  }
  mounted = small;
  snprintf(j->c.state, sizeof j->c.state, "%s/state", small);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, "--tolerable-checkpoint-failures", "0", NULL);
  cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
  check_declined(j, err, " failed: ", "No space left on device");
  free(err);
  listing l;
  listing_now(j, &l);
  cr_assert_gt(l.n, 0, "no checkpoint fitted\nhistory: %s", j->c.history);
  cr_assert_eq(mount("tmpfs", small, NULL, MS_REMOUNT, "size=64m"), 0, "remount: %s",
               strerror(errno));
  restore_to_end(j);
  check_finished(j);
  cr_assert_eq(umount2(small, MNT_DETACH), 0, "umount: %s", strerror(errno));
  free(mounted);
  mounted = NULL;
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, "info");
}
