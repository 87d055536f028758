/* tests/test_cli.c: owns the end-to-end tests of the `weir` command line:
 * help and version, usage errors and their exit codes, build and plan
 * errors (exit 2) and API misuse (tests/misuse_job.c), the built-in counter
 * and wordcount jobs checked against exact references computed here, the
 * example job .so, and --summary-json.
 *
 * DESIGN. Every test runs the real binary (WEIR_BINARY) in a temporary
 * directory of its own through th_run, with a time limit, so nothing hangs
 * and nothing is shared. Outputs are compared as multisets, never in order
 * (subtasks interleave), and nothing about timing is asserted.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define TIMEOUT_S 120

static int weir(const char *cwd, char **out, char **err, const char *const args[]) {
  const char *argv[64];
  int n = 0;
  argv[n++] = WEIR_BINARY;
  for (int i = 0; args[i] != NULL && n < 63; i++) argv[n++] = args[i];
  argv[n] = NULL;
  return th_run(argv, cwd, out, err, TIMEOUT_S);
}

#define WEIR(cwd, out, err, ...) weir(cwd, out, err, (const char *const[]){__VA_ARGS__, NULL})

static char *path_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  cr_assert_not_null(p);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

/* The concatenation of every "*.txt" file in dir (the file sink's finished
 * files); fails the test if a ".pending" file is left. */
static char *read_sink_dir(const char *dir) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "sink directory %s missing", dir);
  size_t len = 0;
  char *all = calloc(1, 1);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    cr_assert(strstr(e->d_name, ".pending") == NULL, "unfinished sink file %s", e->d_name);
    if (n < 4 || strcmp(e->d_name + n - 4, ".txt") != 0) continue;
    char *p = path_join(dir, e->d_name);
    size_t flen = 0;
    char *data = th_read_file(p, &flen);
    cr_assert_not_null(data, "cannot read %s", p);
    all = realloc(all, len + flen + 1);
    memcpy(all + len, data, flen);
    len += flen;
    all[len] = '\0';
    free(data);
    free(p);
    files++;
  }
  closedir(d);
  cr_assert_gt(files, 0, "no sink files in %s", dir);
  return all;
}

/* Splits text into lines in place; returns the number of lines (a final line
 * without newline counts). */
static size_t split_lines(char *text, char ***lines) {
  size_t n = 0, cap = 1024;
  char **v = malloc(cap * sizeof *v);
  char *p = text;
  while (*p) {
    char *nl = strchr(p, '\n');
    if (n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
    v[n++] = p;
    if (nl == NULL) break;
    *nl = '\0';
    p = nl + 1;
  }
  *lines = v;
  return n;
}

static void finish(char *dir) {
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Help and version                                                         */

static void expect_help(const char *const args[], const char *needle) {
  char *out = NULL, *err = NULL;
  int rc = weir(NULL, &out, &err, args);
  cr_assert_eq(rc, 0, "%s: exit %d, stderr: %s", args[0], rc, err);
  cr_assert(strstr(out, needle) != NULL, "%s: no '%s' in: %s", args[0], needle, out);
  free(out);
  free(err);
}

Test(cli, help) {
  expect_help((const char *const[]){"help", NULL}, "run");
  expect_help((const char *const[]){"--help", NULL}, "run");
  expect_help((const char *const[]){"help", "run", NULL}, "--workers");
  expect_help((const char *const[]){"run", "--help", NULL}, "counter");
  expect_help((const char *const[]){"run", "counter", "--help", NULL}, "--records");
  expect_help((const char *const[]){"help", "run", "counter", NULL}, "--keys");
  expect_help((const char *const[]){"run", "wordcount", "--help", NULL}, "--input");
  expect_help((const char *const[]){"version", NULL}, "weir");
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Usage errors: exit 2 with a message naming the problem                   */

static void expect_usage(const char *const args[], const char *needle) {
  char *out = NULL, *err = NULL;
  int rc = weir(NULL, &out, &err, args);
  cr_assert_eq(rc, 2, "weir %s ...: exit %d (expected 2), stderr: %s", args[0], rc, err);
  cr_assert(strstr(err, needle) != NULL, "weir %s ...: no '%s' in stderr: %s", args[0], needle,
            err);
  free(out);
  free(err);
}

Test(cli, usage_errors) {
  expect_usage((const char *const[]){"frobnicate", NULL}, "frobnicate");
  expect_usage((const char *const[]){"run", NULL}, "missing job");
  expect_usage((const char *const[]){"run", "foo", NULL}, "unknown job 'foo'");
  expect_usage((const char *const[]){"run", "--bogus", "counter", NULL}, "--bogus");
  expect_usage((const char *const[]){"run", "counter", "--bogus", NULL}, "--bogus");
  expect_usage((const char *const[]){"run", "counter", "extra", NULL}, "extra");
  expect_usage((const char *const[]){"run", "counter", "--records", NULL}, "--records");
  expect_usage((const char *const[]){"run", "counter", "--records", "-5", NULL}, "-5");
  expect_usage((const char *const[]){"run", "counter", "--records", "12x", NULL}, "12x");
  expect_usage((const char *const[]){"run", "counter", "--records", "", NULL}, "--records");
  expect_usage(
      (const char *const[]){"run", "counter", "--records", "99999999999999999999999", NULL},
      "too large");
  expect_usage((const char *const[]){"run", "counter", "--keys", "0", NULL}, "--keys");
  expect_usage((const char *const[]){"run", "--workers", "abc", "counter", NULL}, "abc");
  expect_usage((const char *const[]){"run", "counter", "--parallelism=-1", NULL}, "-1");
  expect_usage((const char *const[]){"run", "counter", "--quiet=yes", NULL}, "--quiet");
  expect_usage((const char *const[]){"run", "--log-level", "loud", "counter", NULL},
               "--log-level 'loud': use error, warn, info or debug");
  expect_usage((const char *const[]){"run", "counter", "--buffer-timeout", "soon", NULL}, "soon");
  expect_usage((const char *const[]){"run", "counter", "--sink", "nowhere:x", NULL}, "--sink");
  expect_usage((const char *const[]){"run", "wordcount", NULL}, "--input");
  expect_usage(
      (const char *const[]){"run", "wordcount", "--input", "x", "--on-bad-record", "maybe", NULL},
      "maybe");
  expect_usage(
      (const char *const[]){"run", "wordcount", "--input", "x", "--dead-letter", "d", NULL},
      "--dead-letter");
  expect_usage((const char *const[]){"run", "--cluster", "nats://127.0.0.1:1", "--member", "a",
                                     "--parallelism", "2", "counter", NULL},
               "a stage's parallelism is its number of tasks: --tasks 2");
  expect_usage((const char *const[]){"help", "nothing", NULL}, "nothing");
  expect_usage((const char *const[]){"checkpoints", "--verify", "--json", NULL}, "--verify");
  expect_usage((const char *const[]){"inspect", "1", "--verify", NULL}, "--verify");
  cr_assert_eq(th_leak_check(), 0);
}

Test(cli, checkpoint_option_errors) {
  expect_usage((const char *const[]){"run", "counter", "--checkpoint-mode", "bogus", NULL},
               "aligned, at-least-once, sync");
  expect_usage(
      (const char *const[]){"run", "counter", "--tolerable-checkpoint-failures", "-1", NULL}, "-1");
  expect_usage(
      (const char *const[]){"run", "counter", "--tolerable-checkpoint-failures", "lots", NULL},
      "lots");
  expect_usage((const char *const[]){"run", "counter", "--max-store-size", "10", NULL},
               "too small");
  expect_help((const char *const[]){"help", "run", NULL}, "--tolerable-checkpoint-failures");
  expect_help((const char *const[]){"help", "run", NULL}, "sync: stop the");
  cr_assert_eq(th_leak_check(), 0);
}

Test(cli, wordcount_unreadable_input) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *missing = path_join(dir, "no-such-input.txt");
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", "wordcount", "--input", missing, "--sink", "null");
  cr_assert_eq(rc, 1, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, missing) != NULL, "path not named in: %s", err);
  free(out);
  free(err);
  free(missing);
  finish(dir);
}

/* ------------------------------------------------------------------------ */
/* API misuse: build and plan errors exit 2, callbacks' wrong returns fail   */

#define MISUSE_JOB WEIR_JOBS_DIR "/misuse_job.so"

/* Runs `weir ARGS...` in a temporary directory of its own (the default
 * state directory is ./state); checks the exit code and that stderr holds
 * every needle; returns stderr (the caller frees it). */
static char *expect_exit(int want, const char *const args[], const char *const needles[]) {
  char *out = NULL, *err = NULL;
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  int rc = weir(dir, &out, &err, args);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(rc, want, "weir run %s %s: exit %d (expected %d), stderr: %s", args[1],
               args[2] ? args[2] : "", rc, want, err);
  for (int i = 0; needles[i] != NULL; i++)
    cr_assert(strstr(err, needles[i]) != NULL, "no '%s' in stderr: %s", needles[i], err);
  free(out);
  return err;
}

Test(cli, build_and_plan_errors_exit_2) {
  /* Parallelism above the maximum: found when the plan is frozen. */
  free(expect_exit(2,
                   (const char *const[]){"run", "counter", "--records", "10", "--parallelism",
                                         "1000", "--sink", "null", NULL},
                   (const char *const[]){"parallelism 1000 exceeds the maximum", NULL}));
  /* A forward edge between unequal parallelisms. */
  free(expect_exit(2, (const char *const[]){"run", MISUSE_JOB, "forward", NULL},
                   (const char *const[]){"forward edge from 'src'", "'wide'", NULL}));
  /* A NULL stream reaches no job: the build's error, said as such. */
  char *err =
      expect_exit(2, (const char *const[]){"run", MISUSE_JOB, "null-stream", NULL},
                  (const char *const[]){"could not be built", "WEIR_EPLAN", "NULL stream", NULL});
  cr_assert(strstr(err, "invalid argument") == NULL, "stderr: %s", err);
  free(err);
  cr_assert_eq(th_leak_check(), 0);
}

Test(cli, api_misuse_fails_the_job_clearly) {
  free(expect_exit(
      1, (const char *const[]){"run", MISUSE_JOB, "process-1", NULL},
      (const char *const[]){"operator 'sloppy' subtask 0 (process): returned 1, not 0", NULL}));
  char *err = expect_exit(1, (const char *const[]){"run", MISUSE_JOB, "minus-one", NULL},
                          (const char *const[]){"operator 'sloppy' subtask 0 (process): returned "
                                                "-1, not 0 or a negative WEIR_E* error code",
                                                NULL});
  cr_assert(strstr(err, "not permitted") == NULL, "-1 read as -EPERM: %s", err);
  free(err);
  free(expect_exit(1, (const char *const[]){"run", MISUSE_JOB, "run-7", NULL},
                   (const char *const[]){"operator 'src' subtask 0 (run): returned 7, not "
                                         "WEIR_SOURCE_MORE (0), WEIR_SOURCE_DONE (1), "
                                         "WEIR_SOURCE_IDLE (2)",
                                         NULL}));
  cr_assert_eq(th_leak_check(), 0);
}

/* A source that returns IDLE without asking for a wake-up is run again
 * after the default, with one warning for all its subtasks. */
Test(cli, idle_source_without_wake_up_runs_again) {
  const char *needle = "returned WEIR_SOURCE_IDLE without calling weir_ctx_wake_after";
  char *err = expect_exit(0,
                          (const char *const[]){"run", "--workers", "2", "--parallelism", "2",
                                                MISUSE_JOB, "idle", NULL},
                          (const char *const[]){"source 'src' subtask", needle, NULL});
  const char *first = strstr(err, needle);
  cr_assert(strstr(first + 1, needle) == NULL, "warned more than once: %s", err);
  free(err);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* counter                                                                  */

/* Checks lines "<key> <count>": for each key k < K, the counts 1..n_k (n_k =
 * number of i < N with i mod K = k) each exactly once, nothing else. */
static void check_counts(char *text, uint64_t n, uint64_t k) {
  char **lines;
  size_t nl = split_lines(text, &lines);
  cr_assert_eq(nl, n, "%zu lines, expected %llu", nl, (unsigned long long)n);
  uint64_t per = n / k + 1;
  uint8_t *seen = calloc(k * per, 1);
  uint64_t *max = calloc(k, sizeof *max);
  for (size_t i = 0; i < nl; i++) {
    unsigned long long key, count;
    char extra;
    cr_assert_eq(sscanf(lines[i], "%llu %llu%c", &key, &count, &extra), 2, "bad line '%s'",
                 lines[i]);
    uint64_t expect_n = n / k + (key < n % k ? 1 : 0);
    cr_assert_lt(key, k, "key out of range: '%s'", lines[i]);
    cr_assert(count >= 1 && count <= expect_n, "count out of range: '%s'", lines[i]);
    cr_assert_eq(seen[key * per + count - 1], 0, "duplicate line '%s'", lines[i]);
    seen[key * per + count - 1] = 1;
    if (count > max[key]) max[key] = count;
  }
  /* Every count once (implied by line count + no duplicates + range), and the
   * final per-key counts exact. */
  for (uint64_t key = 0; key < k; key++) {
    uint64_t expect_n = n / k + (key < n % k ? 1 : 0);
    cr_assert_eq(max[key], expect_n, "key %llu: final count %llu, expected %llu",
                 (unsigned long long)key, (unsigned long long)max[key],
                 (unsigned long long)expect_n);
  }
  free(seen);
  free(max);
  free(lines);
}

static void run_counter(const char *p, const char *w) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", "counter", "--records", "10000", "--keys", "100",
                "--parallelism", p, "--workers", w, "--sink", "file:out", "--state-dir", "st");
  cr_assert_eq(rc, 0, "P=%s W=%s: exit %d, stderr: %s", p, w, rc, err);
  cr_assert(strstr(err, "counter") != NULL, "no summary line in: %s", err);
  char *o = path_join(dir, "out");
  char *text = read_sink_dir(o);
  check_counts(text, 10000, 100);
  char *st = path_join(dir, "st");
  DIR *d = opendir(st);
  cr_assert_not_null(d, "state directory not created");
  closedir(d);
  free(st);
  free(text);
  free(o);
  free(out);
  free(err);
  finish(dir);
}

Test(cli, counter_p1_w1) {
  run_counter("1", "1");
}
Test(cli, counter_p2_w1) {
  run_counter("2", "1");
}
Test(cli, counter_p4_w1) {
  run_counter("4", "1");
}
Test(cli, counter_p1_w2) {
  run_counter("1", "2");
}
Test(cli, counter_p2_w2) {
  run_counter("2", "2");
}
Test(cli, counter_p4_w2) {
  run_counter("4", "2");
}

/* Engine options before the job name work as well as after it, and the
 * default state directory is ./state. */
Test(cli, counter_engine_options_first) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", "--workers", "2", "--parallelism=2", "--quiet", "counter",
                "--records", "1k", "--keys", "7", "--sink", "file:out");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "counter:") == NULL, "--quiet printed a summary: %s", err);
  cr_assert(strstr(err, "info:") == NULL, "--quiet printed info lines: %s", err);
  char *o = path_join(dir, "out");
  char *text = read_sink_dir(o);
  check_counts(text, 1000, 7);
  char *st = path_join(dir, "state");
  DIR *d = opendir(st);
  cr_assert_not_null(d, "./state not created");
  closedir(d);
  free(st);
  free(text);
  free(o);
  free(out);
  free(err);
  finish(dir);
}

/* --buffer-timeout 0 (every batch sent at once) and 100 us: the same
 * exact counts. */
Test(cli, counter_buffer_timeout) {
  const char *const timeouts[] = {"0", "100"};
  for (int i = 0; i < 2; i++) {
    char *dir = th_tmpdir();
    cr_assert_not_null(dir);
    char *out = NULL, *err = NULL;
    int rc =
        WEIR(dir, &out, &err, "run", "--buffer-timeout", timeouts[i], "counter", "--records", "5k",
             "--keys", "13", "--parallelism", "2", "--sink", "file:out", "--state-dir", "st");
    cr_assert_eq(rc, 0, "--buffer-timeout %s: exit %d, stderr: %s", timeouts[i], rc, err);
    char *o = path_join(dir, "out");
    char *text = read_sink_dir(o);
    check_counts(text, 5000, 13);
    free(text);
    free(o);
    free(out);
    free(err);
    finish(dir);
  }
}

/* At debug level, the end of a run says where each worker's time went:
 * asleep, spinning, the rest running tasks. A paced run (2000 records at
 * 10k/s, ~0.2 s) leaves both workers asleep most of the time. */
Test(cli, debug_log_says_where_each_worker_time_went) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  setenv("WEIR_LOG", "debug", 1);
  char *err = NULL;
  int rc = WEIR(dir, NULL, &err, "run", "--workers", "2", "counter", "--records", "2000", "--keys",
                "7", "--rate", "10000");
  unsetenv("WEIR_LOG");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  for (unsigned i = 0; i < 2; i++) {
    char want[32];
    snprintf(want, sizeof want, "worker %u: ", i);
    const char *p = strstr(err, want);
    cr_assert_not_null(p, "no '%s' line in: %s", want, err);
    unsigned long long total = 0, asleep = 0, times = 0, spin = 0;
    cr_assert_eq(sscanf(p + strlen(want),
                        "%llu ms, of which asleep %llu ms (%llu times), spinning %llu ms", &total,
                        &asleep, &times, &spin),
                 4, "worker %u: %.120s", i, p);
    cr_assert_geq(total, 150, "worker %u ran %llu ms for 0.2 s of paced input", i, total);
    cr_assert_leq(asleep + spin, total, "worker %u: %.120s", i, p);
    cr_assert_gt(asleep, total / 2, "worker %u was asleep %llu of %llu ms of paced input", i,
                 asleep, total);
    cr_assert_gt(times, 0);
  }
  free(err);
  finish(dir);
}

/* With WEIR_LOG=debug the store logs, when it closes, what its writer
 * thread wrote and where its CPU went, by phase, and how many writes
 * shared the keys of an earlier checkpoint: 500 keys are all seen within
 * the first checkpoint or two, so later ones share them, and `weir
 * inspect` of the last one names the checkpoint holding its keys. */
Test(cli, debug_log_says_where_the_store_writer_time_went) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  setenv("WEIR_LOG", "debug", 1);
  char *err = NULL;
  int rc = WEIR(dir, NULL, &err, "run", "--workers", "2", "--checkpoint-interval", "50", "counter",
                "--records", "60000", "--keys", "500", "--rate", "100000");
  unsetenv("WEIR_LOG");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  const char *p = strstr(err, "writer thread: ");
  cr_assert_not_null(p, "no writer line in: %s", err);
  unsigned long long writes = 0, chunks = 0, commits = 0;
  double mb = 0, cpu = 0, read = 0, enc = 0, txn = 0, txn_wall = 0, com = 0, com_wall = 0;
  int n =
      sscanf(p,
             "writer thread: %llu subtask writes (%llu chunks, %lf MB) and %llu commits took "
             "%lf ms of CPU: reading state views %lf, encoding and LMDB puts %lf, chunk "
             "transactions %lf (%lf ms wall, syncs included), checkpoint commits %lf (%lf ms "
             "wall)",
             &writes, &chunks, &mb, &commits, &cpu, &read, &enc, &txn, &txn_wall, &com, &com_wall);
  cr_assert_eq(n, 11, "%.300s", p);
  /* 0.6 s at 50 ms: several checkpoints, each with state of every subtask
   * of the counter and the generator (2 + 2). */
  cr_assert_geq(commits, 3, "%.300s", p);
  cr_assert_geq(writes, 4 * commits, "%.300s", p);
  cr_assert_geq(chunks, commits, "%.300s", p);
  cr_assert_leq(read + enc + txn + com, cpu + 2, "the phases add up to the total: %.300s", p);
  unsigned long long with_writes = 0;
  const char *w = strstr(p, "wall), ");
  cr_assert_not_null(w, "%.400s", p);
  cr_assert_eq(sscanf(w, "wall), %llu of the commits in the transaction of their last writes;",
                      &with_writes),
               1, "%.400s", p);
  cr_assert_leq(with_writes, commits, "%.400s", p);
  unsigned long long shared = 0, entries = 0;
  const char *q = strstr(p, "; ");
  cr_assert_not_null(q, "%.400s", p);
  cr_assert_eq(sscanf(q, "; %llu writes shared the keys of an earlier checkpoint (%llu entries)",
                      &shared, &entries),
               2, "%.400s", p);
  cr_assert_geq(shared, 2, "%.400s", p);
  cr_assert_leq(shared, writes, "%.400s", p);
  cr_assert_leq(entries, shared * 500, "%.400s", p);
  unsigned long long last = 0;
  const char *l = strstr(err, "last checkpoint ");
  cr_assert(l && sscanf(l, "last checkpoint %llu", &last) == 1, "%s", err);
  free(err);
  char id[32], *out = NULL;
  snprintf(id, sizeof id, "%llu", last);
  rc = WEIR(dir, &out, &err, "inspect", id);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  unsigned long long holder = 0;
  const char *k = strstr(out, "keys of checkpoint ");
  cr_assert(k && sscanf(k, "keys of checkpoint %llu", &holder) == 1, "%s", out);
  cr_assert(holder > 0 && holder < last, "keys of checkpoint %llu in %llu", holder, last);
  free(out);
  free(err);
  finish(dir);
}

/* The print sink writes records to stdout, the summary goes to stderr. */
Test(cli, counter_print) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", "counter", "--records", "500", "--keys", "5", "--sink",
                "print", "--workers", "2");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  check_counts(out, 500, 5);
  free(out);
  free(err);
  finish(dir);
}

/* Nonzero once dir holds at least one file (the sink has opened). */
static int has_file(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d)) != NULL) found = e->d_name[0] != '.';
  closedir(d);
  return found;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Starts `weir run counter ARGS... --workers 2 --parallelism 2 --sink
 * file:out` in dir, stdin and stdout on /dev/null, stderr into errpath,
 * WEIR_FAILPOINTS = failpoints (NULL: unset); its pid. args ends with
 * NULL (at most 8). */
static pid_t spawn_counter(const char *dir, const char *errpath, const char *failpoints,
                           const char *const *args) {
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int nul = open("/dev/null", O_RDWR);
    if (fd < 0 || nul < 0 || chdir(dir) != 0) _exit(127);
    dup2(nul, 0);
    dup2(nul, 1);
    dup2(fd, 2);
    if (failpoints != NULL) setenv("WEIR_FAILPOINTS", failpoints, 1);
    const char *argv[20] = {WEIR_BINARY, "run", "counter"};
    int a = 3;
    for (; *args != NULL && a < 12; args++) argv[a++] = *args;
    const char *tail[] = {"--workers", "2", "--parallelism", "2", "--sink", "file:out", NULL};
    for (int i = 0; tail[i] != NULL; i++) argv[a++] = tail[i];
    argv[a] = NULL;
    execv(WEIR_BINARY, (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* Starts an endless paced counter job in dir (stderr into errpath, its file
 * sink in dir/out) and waits until its sink has opened: the job runs. */
static pid_t start_endless_counter(const char *dir, const char *errpath) {
  char *o = path_join(dir, "out");
  static const char *const args[] = {"--records", "0", "--keys", "10", "--rate", "20000", NULL};
  pid_t pid = spawn_counter(dir, errpath, NULL, args);
  int waited = 0;
  while (!has_file(o) && waited < 60000) {
    nap_ms(10);
    waited += 10;
  }
  cr_assert(has_file(o), "the sink never opened");
  free(o);
  return pid;
}

/* Waits up to 60 s for pid to end after `what`; its wait status. */
static int wait_end(pid_t pid, const char *what) {
  int status = 0, waited = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (waited >= 60000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      cr_assert_fail("weir did not end within 60 s of %s", what);
    }
    nap_ms(10);
    waited += 10;
  }
  return status;
}

/* A stopped counter job's file output in dir o, 10 keys: for every key the
 * counts 1..m_k once each, for some m_k (nothing lost, nothing twice). */
static void check_stopped_counts(const char *o) {
  char *text = read_sink_dir(o);
  char **lines;
  size_t nl = split_lines(text, &lines);
  uint64_t max[10] = {0}, seen_lines[10] = {0};
  uint8_t *seen = calloc(10 * (nl + 1), 1);
  for (size_t i = 0; i < nl; i++) {
    unsigned long long key, count;
    char extra;
    cr_assert_eq(sscanf(lines[i], "%llu %llu%c", &key, &count, &extra), 2, "bad line '%s'",
                 lines[i]);
    cr_assert_lt(key, 10, "bad key in '%s'", lines[i]);
    cr_assert(count >= 1 && count <= nl, "bad count in '%s'", lines[i]);
    cr_assert_eq(seen[key * (nl + 1) + count], 0, "duplicate line '%s'", lines[i]);
    seen[key * (nl + 1) + count] = 1;
    seen_lines[key]++;
    if (count > max[key]) max[key] = count;
  }
  /* No duplicates and the highest count equal to the number of lines: each
   * key's counts are exactly 1..m_k. */
  for (int k = 0; k < 10; k++) {
    cr_assert_eq(max[k], seen_lines[k], "key %d: %llu lines, highest count %llu", k,
                 (unsigned long long)seen_lines[k], (unsigned long long)max[k]);
  }
  free(seen);
  free(lines);
  free(text);
}

/* --log-level picks what the log shows, over --quiet: info lines (the
 * checkpoints) with info, none with warn. */
Test(cli, log_level) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", "--quiet", "--log-level", "info", "counter", "--records",
                "1k", "--sink", "null");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "info: checkpoint") != NULL, "no info lines with info: %s", err);
  free(out);
  free(err);
  rc = WEIR(dir, &out, &err, "run", "--log-level", "warn", "counter", "--records", "1k", "--sink",
            "null", "--fresh");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "info:") == NULL, "info lines with warn: %s", err);
  free(out);
  free(err);
  finish(dir);
}

/* SIGINT stops an unbounded counter cleanly: exit 0, a "stopped" note, and
 * the drained output is, for every key, the counts 1..m_k once each. */
Test(cli, counter_sigint) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *o = path_join(dir, "out");
  char *errpath = path_join(dir, "stderr.txt");
  pid_t pid = start_endless_counter(dir, errpath);
  kill(pid, SIGINT);
  int status = wait_end(pid, "SIGINT");
  char *err = th_read_file(errpath, NULL);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d, stderr: %s", status, err);
  cr_assert(strstr(err, "stopped") != NULL, "no stop note in: %s", err);

  check_stopped_counts(o);
  free(err);
  free(errpath);
  free(o);
  finish(dir);
}

/* A SIGTERM that arrives after the job ended (while the run tears down, or
 * while the CLI reports) changes nothing: exit 0, every record counted once,
 * no "stopped" note. The process pauses itself at the failpoint (SIGSTOP),
 * gets SIGTERM while stopped, and goes on with SIGCONT. */
Test(cli, sigterm_after_the_end_changes_nothing) {
  static const char *points[] = {"job.teardown", "cli.reporting"};
  for (size_t p = 0; p < sizeof points / sizeof points[0]; p++) {
    char *dir = th_tmpdir();
    cr_assert_not_null(dir);
    char *o = path_join(dir, "out");
    char *errpath = path_join(dir, "stderr.txt");
    char fp[64], note[96];
    snprintf(fp, sizeof fp, "%s=pause", points[p]);
    snprintf(note, sizeof note, "failpoint %s: pause", points[p]);
    static const char *const args[] = {"--records", "20000", "--keys", "10", NULL};
    pid_t pid = spawn_counter(dir, errpath, fp, args);
    char *err = NULL;
    for (int waited = 0;; waited += 10) {
      free(err);
      err = th_read_file(errpath, NULL);
      if (err != NULL && strstr(err, note) != NULL) break;
      cr_assert_lt(waited, 60000, "no pause at %s within 60 s: %s", points[p], err);
      nap_ms(10);
    }
    kill(pid, SIGTERM);
    kill(pid, SIGCONT);
    int status = wait_end(pid, "SIGTERM and SIGCONT");
    free(err);
    err = th_read_file(errpath, NULL);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: status %d, stderr: %s", points[p],
              status, err);
    cr_assert_null(strstr(err, "stopped"), "%s: a stop note after the end: %s", points[p], err);
    char *text = read_sink_dir(o);
    check_counts(text, 20000, 10);
    free(text);
    free(err);
    free(errpath);
    free(o);
    finish(dir);
  }
}

/* A fatal signal (here SIGABRT, as from an abort() in a library) is
 * reported with the call stack, and still ends the process with that
 * signal. */
Test(cli, fatal_signal_is_reported_with_a_call_stack) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *errpath = path_join(dir, "stderr.txt");
  pid_t pid = start_endless_counter(dir, errpath);
  kill(pid, SIGABRT);
  int status = wait_end(pid, "SIGABRT");
  char *err = th_read_file(errpath, NULL);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %d, stderr: %s", status,
            err);
  char *r = strstr(err, "weir: crashed: SIGABRT in pid ");
  cr_assert_not_null(r, "no crash report in: %s", err);
  char *stack = strstr(r, "call stack");
  cr_assert_not_null(stack, "no call stack in: %s", err);
  char **lines;
  size_t nl = split_lines(stack, &lines), frames = 0;
  for (size_t i = 1; i < nl; i++) frames += strstr(lines[i], "0x") != NULL;
  cr_assert_geq(frames, 3, "too few frames (addresses) in: %s", err);
  free(lines);
  free(err);
  free(errpath);
  finish(dir);
}

/* ------------------------------------------------------------------------ */
/* wordcount                                                                */

#define VOCAB 300

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct wc_ref {
  char *words[VOCAB]; /* sorted */
  uint64_t count[VOCAB];
  uint64_t total;
} wc_ref;

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* Writes a deterministic input to path and fills the reference counts. Words
 * differ in case and punctuation ("Word", "word", "word,") so exact matching
 * shows; separators are runs of spaces and tabs; some lines are empty; CR LF
 * line ends occur; the last line has no newline. */
static void make_input(const char *path, wc_ref *ref) {
  static const char *const stems[] = {"alpha", "beta", "Gamma", "delta", "x", "y7", "über", "a-b"};
  uint64_t seed = 42;
  memset(ref, 0, sizeof *ref);
  for (int i = 0; i < VOCAB; i++) {
    /* Four spellings of each base word: only exact matching separates them. */
    char base[32], buf[64];
    snprintf(base, sizeof base, "%s%d", stems[(i / 4) % 8], i / 4);
    switch (i % 4) {
    case 0:
      snprintf(buf, sizeof buf, "%s", base);
      break;
    case 1:
      snprintf(buf, sizeof buf, "%s", base);
      if (buf[0] >= 'a' && buf[0] <= 'z') {
        buf[0] = (char)(buf[0] - 'a' + 'A');
      } else if (buf[0] >= 'A' && buf[0] <= 'Z') {
        buf[0] = (char)(buf[0] - 'A' + 'a');
      } else {
        snprintf(buf, sizeof buf, "_%s", base);
      }
      break;
    case 2:
      snprintf(buf, sizeof buf, "%s,", base);
      break;
    default:
      snprintf(buf, sizeof buf, "(%s)", base);
      break;
    }
    ref->words[i] = strdup(buf);
  }
  qsort(ref->words, VOCAB, sizeof ref->words[0], cmp_str);
  for (int i = 1; i < VOCAB; i++) cr_assert_str_neq(ref->words[i - 1], ref->words[i]);

  size_t cap = 1 << 20, len = 0;
  char *text = malloc(cap);
  for (int line = 0; line < 3000; line++) {
    int nw = (int)(lcg(&seed) % 13);
    if (lcg(&seed) % 3 == 0) text[len++] = ' ';
    for (int w = 0; w < nw; w++) {
      /* Skewed: low indices are frequent. */
      uint64_t r = lcg(&seed) % VOCAB;
      uint64_t idx = (lcg(&seed) % 2) ? r : r % 17;
      const char *word = ref->words[idx];
      size_t wl = strlen(word);
      cr_assert_lt(len + wl + 8, cap);
      memcpy(text + len, word, wl);
      len += wl;
      ref->count[idx]++;
      ref->total++;
      if (w + 1 < nw) {
        int seps = 1 + (int)(lcg(&seed) % 3);
        for (int k = 0; k < seps; k++) text[len++] = (lcg(&seed) % 4 == 0) ? '\t' : ' ';
      }
    }
    if (lcg(&seed) % 5 == 0) text[len++] = ' ';
    if (line + 1 < 3000) {
      if (lcg(&seed) % 7 == 0) text[len++] = '\r';
      text[len++] = '\n';
    }
  }
  cr_assert_eq(th_write_file(path, text, len), 0);
  free(text);
}

static void free_ref(wc_ref *ref) {
  for (int i = 0; i < VOCAB; i++) free(ref->words[i]);
}

/* Lines "<word> <count>": each word's counts are exactly 1..n_word, once each
 * (so its final count is n_word), and there is one line per input word. */
static void check_words(char *text, wc_ref *ref) {
  char **lines;
  size_t nl = split_lines(text, &lines);
  cr_assert_eq(nl, ref->total, "%zu lines, expected %llu (one per word)", nl,
               (unsigned long long)ref->total);
  uint8_t *seen[VOCAB];
  uint64_t max[VOCAB] = {0};
  for (int i = 0; i < VOCAB; i++) seen[i] = calloc(ref->count[i] + 1, 1);
  for (size_t i = 0; i < nl; i++) {
    char *sp = strrchr(lines[i], ' ');
    cr_assert_not_null(sp, "bad line '%s'", lines[i]);
    *sp = '\0';
    char *end = NULL;
    unsigned long long c = strtoull(sp + 1, &end, 10);
    cr_assert(*end == '\0' && sp[1] != '\0', "bad count in line '%s %s'", lines[i], sp + 1);
    char *key = lines[i];
    char **hit = bsearch(&key, ref->words, VOCAB, sizeof ref->words[0], cmp_str);
    cr_assert_not_null(hit, "unexpected word '%s'", lines[i]);
    size_t w = (size_t)(hit - ref->words);
    cr_assert(c >= 1 && c <= ref->count[w], "word '%s': count %llu out of 1..%llu", lines[i], c,
              (unsigned long long)ref->count[w]);
    cr_assert_eq(seen[w][c], 0, "word '%s': count %llu twice", lines[i], c);
    seen[w][c] = 1;
    if (c > max[w]) max[w] = c;
  }
  for (int i = 0; i < VOCAB; i++) {
    cr_assert_eq(max[i], ref->count[i], "word '%s': final count %llu, expected %llu", ref->words[i],
                 (unsigned long long)max[i], (unsigned long long)ref->count[i]);
    free(seen[i]);
  }
  free(lines);
}

static void run_wordcount(const char *p, const char *w) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *in = path_join(dir, "input.txt");
  wc_ref ref;
  make_input(in, &ref);
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", "wordcount", "--input", in, "--parallelism", p, "--workers",
                w, "--sink", "file:out");
  cr_assert_eq(rc, 0, "P=%s W=%s: exit %d, stderr: %s", p, w, rc, err);
  char *o = path_join(dir, "out");
  char *text = read_sink_dir(o);
  check_words(text, &ref);
  free(text);
  free(o);
  free(out);
  free(err);
  free(in);
  free_ref(&ref);
  finish(dir);
}

Test(cli, wordcount_p1_w1) {
  run_wordcount("1", "1");
}
Test(cli, wordcount_p2_w2) {
  run_wordcount("2", "2");
}
Test(cli, wordcount_p3_w2) {
  run_wordcount("3", "2");
}

/* The default sink prints to stdout. */
Test(cli, wordcount_print) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *in = path_join(dir, "in.txt");
  const char *text = "the cat  The\tcat\n\n  cat!\nthe";
  cr_assert_eq(th_write_file(in, text, strlen(text)), 0);
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", "wordcount", "--input", in, "--quiet");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  char **lines;
  size_t n = split_lines(out, &lines);
  qsort(lines, n, sizeof *lines, cmp_str);
  const char *expect[] = {"The 1", "cat 1", "cat 2", "cat! 1", "the 1", "the 2"};
  cr_assert_eq(n, 6, "%zu lines: %s", n, out);
  for (size_t i = 0; i < n; i++) cr_assert_str_eq(lines[i], expect[i]);
  free(lines);
  free(out);
  free(err);
  free(in);
  finish(dir);
}

/* A line with a NUL byte is a bad record: by default the job fails (exit 1);
 * with --on-bad-record skip it is left out and the rest is counted. */
Test(cli, wordcount_bad_record) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *in = path_join(dir, "in.txt");
  const char text[] = "a b\nbad\0line\nb c\n";
  cr_assert_eq(th_write_file(in, text, sizeof text - 1), 0);
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", "wordcount", "--input", in, "--sink", "null");
  cr_assert_eq(rc, 1, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "job failed") != NULL, "no failure message in: %s", err);
  free(out);
  free(err);

  /* The failed run left an unfinished job in ./state: run anew with
   * --fresh (a plain run is refused, naming --restore latest and --fresh). */
  char *dl = path_join(dir, "dead.txt");
  rc = WEIR(dir, &out, &err, "run", "wordcount", "--input", in, "--on-bad-record", "skip",
            "--dead-letter", dl, "--quiet", "--parallelism", "1");
  cr_assert_eq(rc, 2, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "--restore latest") && strstr(err, "--fresh"), "stderr: %s", err);
  free(out);
  free(err);
  rc = WEIR(dir, &out, &err, "run", "wordcount", "--input", in, "--on-bad-record", "skip",
            "--dead-letter", dl, "--quiet", "--parallelism", "1", "--fresh");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  char **lines;
  size_t n = split_lines(out, &lines);
  qsort(lines, n, sizeof *lines, cmp_str);
  const char *expect[] = {"a 1", "b 1", "b 2", "c 1"};
  cr_assert_eq(n, 4, "%zu lines: %s", n, out);
  for (size_t i = 0; i < n; i++) cr_assert_str_eq(lines[i], expect[i]);
  free(lines);
  free(out);
  free(err);
  free(dl);
  free(in);
  finish(dir);
}

/* ------------------------------------------------------------------------ */
/* Job shared objects                                                       */

/* Lines "<key> <sum>" of the example job for N records: for each key k < 10,
 * the sums j*k*k for j = 1..n_k, each once (key 0: n_0 lines "0 0"). */
static void check_squares(char *text, uint64_t n) {
  char **lines;
  size_t nl = split_lines(text, &lines);
  cr_assert_eq(nl, n, "%zu lines, expected %llu", nl, (unsigned long long)n);
  uint64_t per = n / 10 + 1;
  uint8_t *seen = calloc(10 * per, 1);
  uint64_t zeros = 0;
  for (size_t i = 0; i < nl; i++) {
    unsigned long long key, s;
    char extra;
    cr_assert_eq(sscanf(lines[i], "%llu %llu%c", &key, &s, &extra), 2, "bad line '%s'", lines[i]);
    cr_assert_lt(key, 10, "bad key in '%s'", lines[i]);
    if (key == 0) {
      cr_assert_eq(s, 0, "bad sum in '%s'", lines[i]);
      zeros++;
      continue;
    }
    uint64_t nk = n / 10 + (key < n % 10 ? 1 : 0);
    cr_assert_eq(s % (key * key), 0, "bad sum in '%s'", lines[i]);
    uint64_t j = s / (key * key);
    cr_assert(j >= 1 && j <= nk, "sum out of range in '%s'", lines[i]);
    cr_assert_eq(seen[key * per + j - 1], 0, "duplicate line '%s'", lines[i]);
    seen[key * per + j - 1] = 1;
  }
  cr_assert_eq(zeros, n / 10 + (n % 10 ? 1 : 0), "key 0: %llu lines", (unsigned long long)zeros);
  for (uint64_t k = 1; k < 10; k++) {
    uint64_t nk = n / 10 + (k < n % 10 ? 1 : 0);
    for (uint64_t j = 1; j <= nk; j++) {
      cr_assert(seen[k * per + j - 1], "key %llu: sum %llu missing", (unsigned long long)k,
                (unsigned long long)(j * k * k));
    }
  }
  free(seen);
  free(lines);
}

Test(cli, example_so) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *out = NULL, *err = NULL;
  int rc = WEIR(dir, &out, &err, "run", WEIR_JOBS_DIR "/example_job.so", "1003");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  check_squares(out, 1003);
  free(out);
  free(err);

  rc = WEIR(dir, &out, &err, "run", "--workers", "2", "--parallelism", "2", "--quiet",
            WEIR_JOBS_DIR "/example_job.so", "20000", "file:sq");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  char *o = path_join(dir, "sq");
  char *text = read_sink_dir(o);
  check_squares(text, 20000);
  free(text);
  free(o);
  free(out);
  free(err);

  /* A bad argument of the job is a usage error. */
  rc = WEIR(dir, &out, &err, "run", WEIR_JOBS_DIR "/example_job.so", "lots");
  cr_assert_eq(rc, 2, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "lots") != NULL, "no message in: %s", err);
  free(out);
  free(err);
  finish(dir);
}

/* The lines of dir's committed parts of sink `name` ("<name>-<s>-<n>.txt"),
 * each parsed as three numbers: calls fn for each. Returns the lines. */
static size_t sink_lines3(const char *dir, const char *name,
                          void (*fn)(void *, long long, long long, long long), void *user) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "sink directory %s missing", dir);
  size_t lines = 0, nl = strlen(name);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (strncmp(e->d_name, name, nl) || e->d_name[nl] != '-' || n < 4 ||
        strcmp(e->d_name + n - 4, ".txt"))
      continue;
    char *p = path_join(dir, e->d_name);
    char *data = th_read_file(p, NULL);
    cr_assert_not_null(data, "cannot read %s", p);
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
      long long a, b, c;
      cr_assert_eq(sscanf(line, "%lld %lld %lld", &a, &b, &c), 3, "%s: bad line '%s'", p, line);
      if (fn) fn(user, a, b, c);
      lines++;
    }
    free(data);
    free(p);
  }
  closedir(d);
  return lines;
}

typedef struct pair_tally {
  long long pairs, busy_lines, busy_pairs;
} pair_tally;
static void add_pairs(void *user, long long customer, long long second, long long n) {
  (void)customer;
  (void)second;
  pair_tally *t = user;
  t->pairs += n;
  if (n > 25) t->busy_lines++, t->busy_pairs += n;
}
static void add_busy(void *user, long long customer, long long second, long long n) {
  (void)customer;
  (void)second;
  pair_tally *t = user;
  cr_assert_gt(n, 25, "a busy line with %lld pairs", n);
  t->busy_lines--;
  t->busy_pairs -= n;
}

/* jobs/examples/orders_job.c, an interval join, timers and a side output
 * in a job .so: the pairs per customer and second add up to the matching
 * (order, payment) pairs computed here from its generators (order i:
 * customer i mod 100 at i ms; payment j: j mod 100 at 2j ms; within 500
 * ms after the order); the busy seconds are the side output's; none late. */
Test(cli, orders_example_so) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *out = NULL, *err = NULL;
  const long long orders = 20000;
  int rc = WEIR(dir, &out, &err, "run", "--workers", "2", "--parallelism", "2", "--quiet",
                WEIR_JOBS_DIR "/orders_job.so", "20000", "file:o");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  long long want = 0;
  for (long long j = 0; j < orders / 2; j++)
    for (long long i = 2 * j - 500 > 0 ? 2 * j - 500 : 0; i <= 2 * j && i < orders; i++)
      want += i % 100 == j % 100;
  char *o = path_join(dir, "o");
  pair_tally t = {0};
  cr_assert_gt(sink_lines3(o, "sink", add_pairs, &t), 0);
  cr_assert_eq(t.pairs, want, "%lld pairs counted, %lld match", t.pairs, want);
  cr_assert_gt(t.busy_lines, 0, "no busy second: the side output is not tested");
  sink_lines3(o, "busy", add_busy, &t);
  cr_assert(t.busy_lines == 0 && t.busy_pairs == 0, "busy lines differ from the busy seconds");
  cr_assert_eq(sink_lines3(o, "late1", NULL, NULL) + sink_lines3(o, "late2", NULL, NULL), 0);
  free(o);
  free(out);
  free(err);
  finish(dir);
}

Test(cli, bad_so) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *out = NULL, *err = NULL;
  char *missing = path_join(dir, "missing.so");
  int rc = WEIR(dir, &out, &err, "run", missing);
  cr_assert_eq(rc, 1, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, missing) != NULL, "path not named in: %s", err);
  free(out);
  free(err);

  /* Not a shared object at all, named without a '/'. */
  char *junk = path_join(dir, "junk.so");
  cr_assert_eq(th_write_file(junk, "not an ELF file\n", 16), 0);
  rc = WEIR(dir, &out, &err, "run", "junk.so");
  cr_assert_eq(rc, 1, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "junk.so") != NULL, "path not named in: %s", err);
  free(out);
  free(err);

  /* A job built against the headers of an ABI this weir no longer runs. */
  rc = WEIR(dir, &out, &err, "run", WEIR_JOBS_DIR "/old_abi_job.so");
  cr_assert_eq(rc, 1, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "ABI version 2") && strstr(err, "rebuild"), "stderr: %s", err);
  cr_assert(strstr(err, "must not be built") == NULL, "the job's build ran: %s", err);
  free(out);
  free(err);
  free(junk);
  free(missing);
  finish(dir);
}

/* ------------------------------------------------------------------------ */
/* --summary-json                                                           */

static void expect_json(const char *path, const char *const names[]) {
  char *j = th_read_file(path, NULL);
  cr_assert_not_null(j, "summary %s not written", path);
  const char *p = j;
  while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
  cr_assert_eq(*p, '{', "summary does not start with '{': %s", j);
  const char *q = j + strlen(j);
  while (q > p && (q[-1] == ' ' || q[-1] == '\n' || q[-1] == '\t' || q[-1] == '\r')) q--;
  cr_assert(q > p && q[-1] == '}', "summary does not end with '}': %s", j);
  for (int i = 0; names[i] != NULL; i++) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", names[i]);
    cr_assert(strstr(j, quoted) != NULL, "operator %s missing from summary: %s", names[i], j);
  }
  free(j);
}

Test(cli, summary_json) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *out = NULL, *err = NULL;
  char *js = path_join(dir, "counter.json");
  int rc = WEIR(dir, &out, &err, "run", "counter", "--records", "1000", "--keys", "10",
                "--summary-json", js, "--quiet");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  expect_json(js, (const char *const[]){"gen", "count", "sink", NULL});
  free(out);
  free(err);

  char *in = path_join(dir, "in.txt");
  cr_assert_eq(th_write_file(in, "a b a\n", 6), 0);
  char *jw = path_join(dir, "wc.json");
  /* Each job in a state directory of its own: one directory holds one job. */
  rc = WEIR(dir, &out, &err, "run", "--summary-json", jw, "--state-dir", "wc-state", "wordcount",
            "--input", in, "--sink", "null");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  expect_json(jw, (const char *const[]){"file", "split", "count_words", "sink", NULL});
  free(out);
  free(err);

  char *je = path_join(dir, "ex.json");
  rc = WEIR(dir, &out, &err, "run", "--summary-json", je, "--state-dir", "ex-state",
            WEIR_JOBS_DIR "/example_job.so", "100", "null");
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  expect_json(je, (const char *const[]){"gen", "square", "sum", "sink", NULL});
  free(out);
  free(err);
  free(je);
  free(jw);
  free(in);
  free(js);
  finish(dir);
}

/* A port on the loopback that nothing listens on. */
static int dead_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(s, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
  close(s);
  return ntohs(a.sin_port);
}

/* A first SIGINT never waits on a destination that does not answer: the
 * HTTP sink's commits to a dead port retry for ever, yet the job stops
 * within the stop's grace, saying what it left pending (docs/sinks.md). */
Test(cli, sigint_does_not_wait_for_a_dead_destination) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *errpath = path_join(dir, "stderr.txt");
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/effects", dead_port());
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int nul = open("/dev/null", O_RDWR);
    if (fd < 0 || nul < 0 || chdir(dir) != 0) _exit(127);
    dup2(nul, 0);
    dup2(nul, 1);
    dup2(fd, 2);
    execl(WEIR_BINARY, WEIR_BINARY, "run", "counter", "--records", "0", "--keys", "10", "--rate",
          "2000", "--checkpoint-interval", "100", "--sink", url, (char *)NULL);
    _exit(127);
  }
  /* Until a checkpoint completed: its epoch's effects are then in flight. */
  int waited = 0;
  char *err = NULL;
  for (; waited < 60000; waited += 50) {
    nap_ms(50);
    free(err);
    err = th_read_file(errpath, NULL);
    if (err && strstr(err, "checkpoint 2 completed")) break;
  }
  cr_assert(err && strstr(err, "checkpoint 2 completed"), "no checkpoint: %s", err ? err : "");
  nap_ms(300);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  kill(pid, SIGINT);
  int status = wait_end(pid, "SIGINT");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  free(err);
  err = th_read_file(errpath, NULL);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d, stderr: %s", status, err);
  cr_assert(strstr(err, "stopping without waiting any longer for 'sink'"), "stderr: %s", err);
  /* The grace is 2 s; the rest is the drain and the final checkpoint. */
  cr_assert_lt(s, 20.0, "the stop took %.1f s", s);
  free(err);
  free(errpath);
  th_rmrf(dir);
  free(dir);
}
