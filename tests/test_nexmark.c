/* tests/test_nexmark.c: the `nexmark` job (jobs/nexmark.c,
 * jobs/nexmark_stateful.c) end to end with the weir binary: every query's
 * output against the independent reference (scripts/nexmark-reference) on
 * the same events, --query all, crash tests of a top-N, a join, a window
 * and a session query (SIGKILL, then --restore latest, exactly the
 * reference's output), the side input of q13, and the command line.
 *
 * DESIGN. A run dumps its events (--dump-events) and writes its results
 * through the file sink; the reference reads the dump, computes the query
 * with SQLite and Python, and writes the expected lines; this program
 * reads the sink's committed parts (any other file, a .pending part, is a
 * failure), sorts both and asserts they are equal line for line. The
 * events span 50,000 s of event time at --tps 1 from 18:30 UTC, so q14
 * sees every kind of hour and q17 two days (q8 at --tps 1000: at one
 * event a second no person opens an auction in the 10 s window she
 * registered in). Queries run at parallelisms 1 to 3: the generator's
 * events, and so the results, do not depend on it. q12's windows are
 * processing time: its lines are checked by their sum per bidder, which
 * the reference gives.
 * The seed comes from crash_seed (printed; WEIR_TEST_SEED=N replays it).
 * Without python3 the tests skip with a message (scripts/setup installs
 * it). Like the other crash tests, the program runs one test at a time.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crash.h"
#include "helpers.h"

typedef unsigned long long ull;

#define EVENTS "50000"
#define BASE_TIME "1436985000000" /* 2015-07-15 18:30:00 UTC */

TestSuite(nexmark, .timeout = 200, .fini = crash_fini);

/* ---- lines -------------------------------------------------------------------- */

typedef struct lines {
  char **v;
  size_t n, cap;
  char *bufs[64]; /* the texts v points into */
  int nbufs;
} lines;

static void lines_add_text(lines *l, char *text) {
  cr_assert_lt(l->nbufs, 64);
  l->bufs[l->nbufs++] = text;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    cr_assert_not_null(nl, "an unterminated line: '%.80s'", p);
    *nl = '\0';
    if (l->n == l->cap) {
      l->cap = l->cap ? 2 * l->cap : 1024;
      l->v = realloc(l->v, l->cap * sizeof *l->v);
      cr_assert_not_null(l->v);
    }
    l->v[l->n++] = p;
    p = nl + 1;
  }
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void lines_sort(lines *l) {
  if (l->n) qsort(l->v, l->n, sizeof *l->v, cmp_str);
}

static void lines_free(lines *l) {
  for (int i = 0; i < l->nbufs; i++) free(l->bufs[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* The committed parts of a file sink's directory (sink-*.txt), sorted;
 * any other file fails the test. */
static void read_sink(const char *dir, lines *out) {
  memset(out, 0, sizeof *out);
  th_inputs in;
  int rc = th_read_dir(dir, &in);
  cr_assert_eq(rc, 0, "cannot read %s: %s", dir, strerror(-rc));
  for (size_t i = 0; i < in.n; i++) {
    const char *name = in.v[i].name;
    size_t n = strlen(name);
    cr_assert(strncmp(name, "sink-", 5) == 0 && n > 4 && strcmp(name + n - 4, ".txt") == 0,
              "%s: '%s' is not a committed part of the sink", dir, name);
    char *text = malloc(in.v[i].len + 1);
    cr_assert_not_null(text);
    memcpy(text, in.v[i].data, in.v[i].len);
    text[in.v[i].len] = '\0';
    lines_add_text(out, text);
  }
  th_free_inputs(&in);
  lines_sort(out);
}

/* ---- the reference ------------------------------------------------------------- */

static int have_python(void) {
  const char *argv[] = {"/usr/bin/env", "python3", "-c", "import sqlite3", NULL};
  return th_run(argv, NULL, NULL, NULL, 60) == 0;
}

static void need_python(void) {
  if (!have_python())
    cr_skip_test("python3 with sqlite3 is missing: the reference (scripts/nexmark-reference) "
                 "needs it; scripts/setup installs it");
}

/* The reference's lines for `query` on the events in `csv`. */
static void reference(const char *csv, const char *query, const char *side, const char *dir,
                      lines *out) {
  char path[700];
  snprintf(path, sizeof path, "%s/expected-%s.txt", dir, query);
  const char *argv[12] = {"/usr/bin/env", "python3", WEIR_NEXMARK_REFERENCE,
                          "--events",     csv,       "--query",
                          query,          "--out",   path};
  int n = 9;
  if (side) {
    argv[n++] = "--side-input";
    argv[n++] = side;
  }
  argv[n] = NULL;
  char *err = NULL;
  int rc = th_run(argv, NULL, NULL, &err, 120);
  cr_assert_eq(rc, 0, "the reference failed (%d): %s", rc, err);
  free(err);
  memset(out, 0, sizeof *out);
  size_t len;
  char *text = th_read_file(path, &len);
  cr_assert_not_null(text, "%s: %s", path, strerror(errno));
  lines_add_text(out, text);
  lines_sort(out);
}

/* Asserts that the sink wrote exactly the reference's lines. */
static void assert_equal(const lines *ref, const lines *got, const char *what) {
  size_t i = 0;
  while (i < ref->n && i < got->n && strcmp(ref->v[i], got->v[i]) == 0) i++;
  cr_assert(i == ref->n && i == got->n,
            "%s: %zu lines expected, %zu written; first difference at sorted line %zu:\n"
            "  expected: %.300s\n  written:  %.300s",
            what, ref->n, got->n, i, i < ref->n ? ref->v[i] : "(none)",
            i < got->n ? got->v[i] : "(none)");
  cr_assert_gt(ref->n, 0, "%s: no results at all: the check would be empty", what);
}

/* q12's lines "<bidder> <count>,<start>,<end>" summed per bidder into
 * "<bidder> <total>" (the reference's lines for q12), sorted. */
static void q12_totals(lines *l) {
  lines t;
  memset(&t, 0, sizeof t);
  size_t cap = 1 << 16, len = 0;
  char *text = malloc(cap);
  cr_assert_not_null(text);
  text[0] = '\0';
  for (size_t i = 0; i < l->n;) {
    const char *sp = strchr(l->v[i], ' ');
    cr_assert_not_null(sp, "q12: no key in '%s'", l->v[i]);
    size_t kn = (size_t)(sp - l->v[i]);
    unsigned long long sum = 0;
    size_t j = i;
    for (; j < l->n && strncmp(l->v[j], l->v[i], kn + 1) == 0; j++) {
      char *end;
      unsigned long long c = strtoull(l->v[j] + kn + 1, &end, 10);
      cr_assert(end > l->v[j] + kn + 1 && *end == ',', "q12: a bad line '%s'", l->v[j]);
      cr_assert_gt(c, 0, "q12: an empty window in '%s'", l->v[j]);
      sum += c;
    }
    if (len + kn + 32 > cap) {
      text = realloc(text, cap *= 2);
      cr_assert_not_null(text);
    }
    len += (size_t)snprintf(text + len, cap - len, "%.*s %llu\n", (int)kn, l->v[i], sum);
    i = j;
  }
  lines_add_text(&t, text);
  lines_sort(&t);
  lines_free(l);
  *l = t;
}

/* ---- one query against the reference ---------------------------------------------- */

static void run_query_at(const char *query, const char *par, const char *side, const char *tps) {
  need_python();
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char csv[600], out[600], sink[700], state[600], seed[24];
  snprintf(csv, sizeof csv, "%s/events.csv", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(sink, sizeof sink, "file:%s", out);
  snprintf(state, sizeof state, "%s/state", dir);
  snprintf(seed, sizeof seed, "%llu", (ull)crash_seed(query));
  const char *argv[40] = {WEIR_BINARY, "run",           "nexmark", "--query",
                          query,       "--events",      EVENTS,    "--tps",
                          tps,         "--base-time",   BASE_TIME, "--seed",
                          seed,        "--dump-events", csv,       "--sink",
                          sink,        "--state-dir",   state,     "--checkpoint-interval",
                          "100",       "--workers",     "2",       "--parallelism",
                          par};
  int n = 25;
  if (side) {
    argv[n++] = "--side-input";
    argv[n++] = side;
  }
  argv[n] = NULL;
  char *err = NULL;
  int rc = th_run(argv, NULL, NULL, &err, 120);
  cr_assert_eq(rc, 0, "weir run nexmark --query %s: exit %d\n%s", query, rc, err);
  cr_assert(strstr(err, "nexmark ") && strstr(err, " results"), "no report line:\n%s", err);
  free(err);
  lines ref, got;
  reference(csv, query, side, dir, &ref);
  read_sink(out, &got);
  if (strcmp(query, "q12") == 0) q12_totals(&got);
  assert_equal(&ref, &got, query);
  fprintf(stderr, "nexmark %s: %zu lines equal to the reference\n", query, got.n);
  lines_free(&ref);
  lines_free(&got);
  th_rmrf(dir);
  free(dir);
}

static void run_query(const char *query, const char *par, const char *side) {
  run_query_at(query, par, side, "1");
}

Test(nexmark, q0) {
  run_query("q0", "2", NULL);
}
Test(nexmark, q1) {
  run_query("q1", "1", NULL);
}
Test(nexmark, q2) {
  run_query("q2", "2", NULL);
}
Test(nexmark, q3) {
  run_query("q3", "2", NULL);
}
Test(nexmark, q4) {
  run_query("q4", "2", NULL);
}
Test(nexmark, q5) {
  run_query("q5", "3", NULL);
}
Test(nexmark, q6) {
  run_query("q6", "2", NULL);
}
Test(nexmark, q7) {
  run_query("q7", "2", NULL);
}
Test(nexmark, q8) {
  run_query_at("q8", "3", NULL, "1000");
}
Test(nexmark, q9) {
  run_query("q9", "3", NULL);
}
Test(nexmark, q10) {
  run_query("q10", "1", NULL);
}
Test(nexmark, q11) {
  run_query("q11", "2", NULL);
}
Test(nexmark, q12) {
  run_query("q12", "2", NULL);
}
Test(nexmark, q13) {
  run_query("q13", "2", NULL);
}
Test(nexmark, q14) {
  run_query("q14", "3", NULL);
}
Test(nexmark, q15) {
  run_query("q15", "2", NULL);
}
Test(nexmark, q16) {
  run_query("q16", "3", NULL);
}
Test(nexmark, q17) {
  run_query("q17", "2", NULL);
}
Test(nexmark, q18) {
  run_query("q18", "3", NULL);
}
Test(nexmark, q19) {
  run_query("q19", "2", NULL);
}
Test(nexmark, q20) {
  run_query("q20", "2", NULL);
}
Test(nexmark, q21) {
  run_query("q21", "1", NULL);
}
Test(nexmark, q22) {
  run_query("q22", "2", NULL);
}

/* A side input of the user's: keys missing (no result for those bids),
 * keys twice (a result per row, in any order), a negative key, CRLF line
 * ends, an empty line and values with spaces. */
Test(nexmark, q13_side_input_file) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char side[600];
  snprintf(side, sizeof side, "%s/side.csv", dir);
  size_t cap = 1 << 20, len = 0;
  char *text = malloc(cap);
  cr_assert_not_null(text);
  for (int k = 0; k < 10000; k += 3)
    len += (size_t)snprintf(text + len, cap - len, "%d,value %d\r\n", k, k * 7);
  for (int k = 0; k < 10000; k += 97)
    len += (size_t)snprintf(text + len, cap - len, "%d,again %d\n", k, k);
  len += (size_t)snprintf(text + len, cap - len, "\n-5,negative\n12345,beyond");
  cr_assert_eq(th_write_file(side, text, len), 0);
  free(text);
  run_query("q13", "2", side);
  th_rmrf(dir);
  free(dir);
}

/* A side input that is not "key,value" lines stops the job with the file
 * and the line (exit 1, a file that cannot be used). */
Test(nexmark, q13_bad_side_input) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char side[600];
  snprintf(side, sizeof side, "%s/side.csv", dir);
  cr_assert_eq(th_write_file(side, "1,one\ntwo\n", 10), 0);
  const char *argv[] = {WEIR_BINARY, "run",         "nexmark", "--query",      "q13", "--events",
                        "1000",      "--state-dir", "none",    "--side-input", side,  NULL};
  char *err = NULL;
  int rc = th_run(argv, NULL, NULL, &err, 60);
  cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
  cr_assert(strstr(err, side) && strstr(err, "line 2"), "%s", err);
  free(err);
  th_rmrf(dir);
  free(dir);
}

/* ---- --query all --------------------------------------------------------------------- */

static const char *const ALL[] = {"q0",  "q1",  "q2",  "q3",  "q4",  "q5",  "q6",  "q7",
                                  "q8",  "q9",  "q10", "q11", "q12", "q13", "q14", "q15",
                                  "q16", "q17", "q18", "q19", "q20", "q21", "q22"};
#define NALL (sizeof ALL / sizeof ALL[0])

/* At --tps 100 (80 s of event time) every query has results, q8's too. */
Test(nexmark, all_queries_in_one_run) {
  need_python();
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char csv[600], out[600], sink[700], state[600];
  snprintf(csv, sizeof csv, "%s/events.csv", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(sink, sizeof sink, "file:%s", out);
  snprintf(state, sizeof state, "%s/state", dir);
  const char *argv[] = {WEIR_BINARY, "run",         "nexmark", "--query",       "all", "--events",
                        "8000",      "--tps",       "100",     "--dump-events", csv,   "--sink",
                        sink,        "--state-dir", state,     "--workers",     "2",   NULL};
  char *err = NULL;
  int rc = th_run(argv, NULL, NULL, &err, 120);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  /* The table: a row per query, in order. */
  const char *table = strstr(err, "\nquery ");
  cr_assert_not_null(table, "no table:\n%s", err);
  const char *p = table;
  for (size_t i = 0; i < NALL; i++) {
    char row[16];
    snprintf(row, sizeof row, "\n%-4s ", ALL[i]);
    const char *at = strstr(p, row);
    cr_assert_not_null(at, "no row for %s after the previous one:\n%s", ALL[i], table);
    p = at + 1;
  }
  if (have_python()) {
    for (size_t i = 0; i < NALL; i++) {
      char qout[700];
      snprintf(qout, sizeof qout, "%s/%s", out, ALL[i]);
      lines ref, got;
      reference(csv, ALL[i], NULL, dir, &ref);
      read_sink(qout, &got);
      if (strcmp(ALL[i], "q12") == 0) q12_totals(&got);
      assert_equal(&ref, &got, ALL[i]);
      lines_free(&ref);
      lines_free(&got);
    }
  }
  free(err);
  th_rmrf(dir);
  free(dir);
}

/* ---- crash tests ------------------------------------------------------------------------ */

/* The events of a crash job, dumped by a run of their own. */
static void dump_for(crash_job *j, const char *query, const char *seed, char *csv, size_t cap) {
  snprintf(csv, cap, "%s/events.csv", j->dir);
  const char *argv[] = {
      WEIR_BINARY, "run",    "nexmark",     "--query",     query,    "--events", EVENTS,
      "--tps",     "1",      "--base-time", BASE_TIME,     "--seed", seed,       "--dump-events",
      csv,         "--sink", "null",        "--state-dir", "none",   NULL};
  char *err = NULL;
  int rc = th_run(argv, NULL, NULL, &err, 120);
  cr_assert_eq(rc, 0, "dump: exit %d: %s", rc, err);
  free(err);
}

static crash_job *crash_query(const char *query, const char *seed) {
  crash_job *j = crash_new("nexmark", 0);
  crash_arg(j, "--query", "%s", query);
  crash_arg(j, "--events", "%s", EVENTS);
  crash_arg(j, "--tps", "1");
  crash_arg(j, "--base-time", "%s", BASE_TIME);
  crash_arg(j, "--seed", "%s", seed);
  crash_arg(j, "--rate", "25000"); /* about 2 s a run: kills land mid-run */
  j->interval = "100";
  return j;
}

static void assert_reference(crash_job *j, const char *query, const char *csv) {
  lines ref, got;
  reference(csv, query, NULL, j->dir, &ref);
  read_sink(j->out, &got);
  char what[64];
  snprintf(what, sizeof what, "%s killed and restored", query);
  assert_equal(&ref, &got, what);
  fprintf(stderr, "nexmark %s: killed and restored, %zu lines equal to the reference\n", query,
          got.n);
  lines_free(&ref);
  lines_free(&got);
}

/* Top-10 (q19): SIGKILL at a random time mid-run, --restore latest (also
 * at another parallelism): the sink holds exactly the reference's lines,
 * each once, written at the end from the restored state. */
Test(nexmark, q19_killed_mid_run) {
  need_python();
  uint64_t rng = crash_seed("q19_killed_mid_run");
  char seed[24], csv[700];
  snprintf(seed, sizeof seed, "%llu", (ull)(rng % 1000000));
  crash_job *j = crash_query("q19", seed);
  dump_for(j, "q19", seed, csv, sizeof csv);
  int kill_ms = crash_delay_within(2000, 0, th_splitmix64(&rng));
  char *err = NULL;
  int rc = crash_run(j, NULL, kill_ms, &err, NULL);
  cr_assert_eq(rc, CRASH_KILLED, "the run was to be killed after %d ms: exit %d\n%s", kill_ms, rc,
               err);
  free(err);
  crash_par(j, 3);
  long long at = crash_restore_to_end(j, 1, NULL, &err, NULL);
  cr_assert_gt(at, 0, "did not resume from a checkpoint (killed after %d ms): %s\nhistory: %s",
               kill_ms, err, j->history);
  free(err);
  assert_reference(j, "q19", csv);
  crash_free(j);
}

/* The join (q3): killed right after its third checkpoint committed, then
 * restored: persons and waiting auctions come back from the checkpoint,
 * and the output is exactly the reference's. */
Test(nexmark, q3_killed_after_checkpoint) {
  need_python();
  uint64_t rng = crash_seed("q3_killed_after_checkpoint");
  char seed[24], csv[700];
  snprintf(seed, sizeof seed, "%llu", (ull)(rng % 1000000));
  crash_job *j = crash_query("q3", seed);
  dump_for(j, "q3", seed, csv, sizeof csv);
  char *err = NULL;
  crash_kill_at(j, "ckpt.after_meta_commit", 3, 0, &err, NULL);
  free(err);
  long long at = crash_restore_to_end(j, 1, NULL, &err, NULL);
  cr_assert_gt(at, 0, "did not resume from a checkpoint: %s\nhistory: %s", err, j->history);
  free(err);
  assert_reference(j, "q3", csv);
  crash_free(j);
}

/* A window query (q5: sliding windows, then the top count per window in
 * keyed state with timers): SIGKILL at a random time mid-run, --restore
 * latest at another parallelism (window state and timers move with
 * their keys): exactly the reference's lines, each window's once. */
Test(nexmark, q5_killed_mid_run) {
  need_python();
  uint64_t rng = crash_seed("q5_killed_mid_run");
  char seed[24], csv[700];
  snprintf(seed, sizeof seed, "%llu", (ull)(rng % 1000000));
  crash_job *j = crash_query("q5", seed);
  dump_for(j, "q5", seed, csv, sizeof csv);
  int kill_ms = crash_delay_within(2000, 0, th_splitmix64(&rng));
  char *err = NULL;
  int rc = crash_run(j, NULL, kill_ms, &err, NULL);
  cr_assert_eq(rc, CRASH_KILLED, "the run was to be killed after %d ms: exit %d\n%s", kill_ms, rc,
               err);
  free(err);
  crash_par(j, 3);
  long long at = crash_restore_to_end(j, 1, NULL, &err, NULL);
  cr_assert_gt(at, 0, "did not resume from a checkpoint (killed after %d ms): %s\nhistory: %s",
               kill_ms, err, j->history);
  free(err);
  assert_reference(j, "q5", csv);
  crash_free(j);
}

/* A session query (q11): SIGKILL at a random time mid-run, --restore
 * latest: open sessions come back from the checkpoint and the sink holds
 * exactly the reference's sessions. */
Test(nexmark, q11_killed_mid_run) {
  need_python();
  uint64_t rng = crash_seed("q11_killed_mid_run");
  char seed[24], csv[700];
  snprintf(seed, sizeof seed, "%llu", (ull)(rng % 1000000));
  crash_job *j = crash_query("q11", seed);
  dump_for(j, "q11", seed, csv, sizeof csv);
  int kill_ms = crash_delay_within(2000, 0, th_splitmix64(&rng));
  char *err = NULL;
  int rc = crash_run(j, NULL, kill_ms, &err, NULL);
  cr_assert_eq(rc, CRASH_KILLED, "the run was to be killed after %d ms: exit %d\n%s", kill_ms, rc,
               err);
  free(err);
  long long at = crash_restore_to_end(j, 1, NULL, &err, NULL);
  cr_assert_gt(at, 0, "did not resume from a checkpoint (killed after %d ms): %s\nhistory: %s",
               kill_ms, err, j->history);
  free(err);
  assert_reference(j, "q11", csv);
  crash_free(j);
}

/* ---- the command line -------------------------------------------------------------------- */

static int weir(char **out, char **err, const char *const *args) {
  const char *argv[32] = {WEIR_BINARY};
  size_t n = 1;
  for (; args[n - 1]; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  return th_run(argv, NULL, out, err, 60);
}

Test(nexmark, usage_errors) {
  static const struct {
    const char *args[10];
    const char *says;
  } cases[] = {
      {{"run", "nexmark", NULL}, "--query is required"},
      {{"run", "nexmark", "--query", "q23", NULL}, "'q23' is not one of"},
      {{"run", "nexmark", "--query", "q0", "--events", "0", NULL}, "--events: must be at least 1"},
      {{"run", "nexmark", "--query", "q0", "--tps", "0", NULL}, "--tps: must be at least 1"},
      {{"run", "nexmark", "--query", "q0", "--events", "-3", NULL}, "is negative"},
      {{"run", "nexmark", "--query", "all", "--restore", "latest", NULL}, "--query all"},
      {{"run", "nexmark", "--query", "q0", "--bogus", NULL}, "unknown flag '--bogus'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL, *err = NULL;
    int rc = weir(&out, &err, cases[i].args);
    cr_assert_eq(rc, 2, "case %zu: exit %d: %s", i, rc, err);
    cr_assert(strstr(err, cases[i].says), "case %zu: '%s' not in:\n%s", i, cases[i].says, err);
    free(out);
    free(err);
  }
}

/* `weir help run nexmark` documents every query's line. */
Test(nexmark, help_documents_every_query) {
  static const char *const args[] = {"help", "run", "nexmark", NULL};
  char *out = NULL, *err = NULL;
  int rc = weir(&out, &err, args);
  cr_assert_eq(rc, 0, "%s", err);
  for (size_t i = 0; i < NALL; i++) {
    char row[16];
    snprintf(row, sizeof row, "\n  %-4s <", ALL[i]);
    cr_assert(strstr(out, row), "no output line for %s in:\n%s", ALL[i], out);
  }
  free(out);
  free(err);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, "info");
}
