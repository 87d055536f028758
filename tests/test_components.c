/* tests/test_components.c: the `components` job (connected components by
 * label propagation in a loop) end to end with the weir binary: its result
 * against a union-find reference, crash tests (random SIGKILLs, kills while
 * a back-edge log is open) and a negative control that restores without
 * replaying the back-edge log.
 *
 * DESIGN. The test recomputes the job's graph (edge e joins h(S, 2e) mod N
 * and h(S, 2e + 1) mod N, h the splitmix64 finaliser of S * golden + x, as
 * documented in jobs/components.c) and labels every vertex with the
 * smallest id of its component by union-find. A run writes its output with
 * the file sink into OUT; the check reads every OUT/sink-*.txt and wants
 * EXACTLY one line "<v> <label>" per vertex 0..N-1 with the reference label,
 * and no other file (a .pending file is unpublished output).
 *
 * Runs use --workers 2, checkpoints every 10 ms (25 at P = 4 in one
 * reference run) and small batches and channel bounds (--batch-records,
 * --channel-batches), so barriers queue behind backpressure and the
 * feedback edge carries records across many cuts. Crash runs are killed
 * with SIGKILL at seeded random times (the seed is printed; WEIR_TEST_SEED=N
 * replays it) or at the failpoint iter.log_open (a head starts logging a
 * back edge that is still open), then run with `--restore latest` until one
 * exits 0, in the same directories (the file sink truncates back to the
 * checkpoint's cut on restore). The process plumbing is in helpers.c
 * (th_run_killable, th_resumed_from, ...), shared with test_iteration.c.
 *
 * The negative control kills a run right after a checkpoint whose back-edge
 * log is not empty, copies the directory, restores one copy with
 * iter.skip_replay (every head drops its log) and the other normally: the
 * twin must be exact, and the copies without replay must (at least once)
 * give a wrong label. Not every lost log changes the result: an offer in
 * flight that carried a label a vertex also gets by another path, or one
 * that a lower label overtakes later, is redundant; the control uses a
 * sparse graph (mostly trees, where the final label has one path) and
 * reports how many of its restores went wrong.
 *
 * Like test_iteration.c, the program forces Criterion's --jobs 1 (a second
 * crash test on the cores would move every kill), and sizes are smaller
 * under AddressSanitizer.
 *
 * Environment: WEIR_TEST_SEED=N replays the random kills; WEIR_TEST_KEEP=1
 * keeps a failed test's directory.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

typedef unsigned long long ull;

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
#ifndef ASAN
#define ASAN 0
#endif

#define KILLED (128 + SIGKILL)
#define RUN_TIMEOUT_S 90
#define MAX_ATTEMPTS 12

/* The graph: an uninterrupted run takes about half a second (plain build,
 * two loaded cores). M = N: a giant component and many small ones. */
#define VERTICES (ASAN ? 5000u : 20000u)
#define EDGES (ASAN ? 5000u : 20000u)
#define SEED 7u
/* The negative control's sparse graph: M = 0.4 N, mostly trees, and five
 * times the vertices, so that a run lasts several checkpoint intervals
 * (at 20000 vertices an optimised build ends in ~20 ms, before checkpoint
 * 2 to 4 where the control kills it). */
#define SPARSE_VERTICES (VERTICES * 5)
#define SPARSE_EDGES (SPARSE_VERTICES * 2 / 5)

/* ------------------------------------------------------------------------ */
/* The reference                                                            */

/* jobs/components.c's endpoint hash. */
static uint64_t cc_hash(uint64_t seed, uint64_t x) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + x;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t uf_find(uint32_t *parent, uint32_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return x;
}

/* A graph and its reference labels: the smallest vertex of each component
 * (union-find whose root is always the smaller id). */
typedef struct graph_ref {
  uint32_t n, m;
  uint32_t *label;
  uint64_t components;
} graph_ref;

static graph_ref dense_ref, sparse_ref;

static const graph_ref *reference(graph_ref *g, uint32_t n, uint32_t m) {
  if (g->label) return g;
  g->n = n;
  g->m = m;
  g->label = malloc((size_t)n * sizeof *g->label);
  cr_assert_not_null(g->label);
  for (uint32_t v = 0; v < n; v++) g->label[v] = v;
  for (uint64_t e = 0; e < m; e++) {
    uint32_t a = uf_find(g->label, (uint32_t)(cc_hash(SEED, 2 * e) % n));
    uint32_t b = uf_find(g->label, (uint32_t)(cc_hash(SEED, 2 * e + 1) % n));
    if (a < b) g->label[b] = a;
    if (b < a) g->label[a] = b;
  }
  g->components = 0;
  for (uint32_t v = 0; v < n; v++) {
    g->label[v] = uf_find(g->label, v);
    g->components += g->label[v] == v;
  }
  return g;
}

/* ------------------------------------------------------------------------ */
/* Runs of the weir binary                                                  */

typedef struct ccjob {
  char *dir, *state, *out;
  const graph_ref *g;
  int p;
  char p_s[8], n_s[24], m_s[24], seed_s[24], sink_s[600];
  const char *interval, *batch, *channel;
  int runs;
  char history[4096];
} ccjob;

static void hist(ccjob *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hist(ccjob *j, const char *fmt, ...) {
  size_t n = strlen(j->history);
  if (n + 2 >= sizeof j->history) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->history + n, sizeof j->history - n, fmt, ap);
  va_end(ap);
}

#define MAX_LIVE 4
static ccjob *live[MAX_LIVE];

/* A job in directory dir with the crash tests' settings: checkpoints every
 * 10 ms, batches of 16 records, channels of 2 batches. */
static ccjob *ccjob_at(const char *dir, const graph_ref *g, int p) {
  ccjob *j = calloc(1, sizeof *j);
  cr_assert_not_null(j);
  j->dir = strdup(dir);
  size_t n = strlen(dir) + 16;
  j->state = malloc(n);
  j->out = malloc(n);
  cr_assert(j->dir && j->state && j->out);
  snprintf(j->state, n, "%s/state", dir);
  snprintf(j->out, n, "%s/out", dir);
  j->g = g;
  j->p = p;
  snprintf(j->p_s, sizeof j->p_s, "%d", p);
  snprintf(j->n_s, sizeof j->n_s, "%u", g->n);
  snprintf(j->m_s, sizeof j->m_s, "%u", g->m);
  snprintf(j->seed_s, sizeof j->seed_s, "%u", SEED);
  snprintf(j->sink_s, sizeof j->sink_s, "file:%s", j->out);
  j->interval = "10";
  j->batch = "16";
  j->channel = "2";
  hist(j, "dir %s, N=%u M=%u P=%d: ", dir, g->n, g->m, p);
  for (int i = 0; i < MAX_LIVE; i++)
    if (!live[i]) {
      live[i] = j;
      break;
    }
  return j;
}

static ccjob *ccjob_new(const graph_ref *g, int p) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir, "th_tmpdir: %s", strerror(errno));
  ccjob *j = ccjob_at(dir, g, p);
  free(dir);
  return j;
}

static void ccjob_free(ccjob *j) {
  for (int i = 0; i < MAX_LIVE; i++)
    if (live[i] == j) live[i] = NULL;
  th_rmrf(j->dir);
  free(j->dir);
  free(j->state);
  free(j->out);
  free(j);
}

/* Suite teardown: removes what a failed test left (kept with
 * WEIR_TEST_KEEP=1). */
static void cleanup(void) {
  for (int i = 0; i < MAX_LIVE; i++) {
    if (!live[i]) continue;
    if (getenv("WEIR_TEST_KEEP")) {
      fprintf(stderr, "kept %s\n", live[i]->dir);
      free(live[i]->dir);
      live[i]->dir = NULL;
    }
    ccjob_free(live[i]);
  }
  free(dense_ref.label);
  free(sparse_ref.label);
  dense_ref.label = sparse_ref.label = NULL;
}

/* Runs `weir run components` for j with failpoints armed (NULL: none) and
 * the extra arguments (NULL terminated); stderr into *err (caller frees).
 * kill_ms >= 0: SIGKILL after kill_ms. Returns the exit status, 128 + the
 * signal, or -1 after RUN_TIMEOUT_S; *ms (if not NULL) gets the wall time. */
static int run_cc(ccjob *j, const char *failpoints, int kill_ms, char **err, int64_t *ms, ...) {
  const char *argv[48];
  int n = 0;
  const char *fixed[] = {
      WEIR_BINARY,  "run",
      "components", "--vertices",
      j->n_s,       "--edges",
      j->m_s,       "--seed",
      j->seed_s,    "--parallelism",
      j->p_s,       "--workers",
      "2",          "--state-dir",
      j->state,     "--checkpoint-interval",
      j->interval,  "--batch-records",
      j->batch,     "--channel-batches",
      j->channel,   "--sink",
      j->sink_s,
  };
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = fixed[i];
  int first = n;
  va_list ap;
  va_start(ap, ms);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 46) argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;

  char errpath[700];
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", j->dir);
  int rc = th_run_killable(argv, j->dir, failpoints, kill_ms, RUN_TIMEOUT_S, errpath, err, ms);
  cr_assert_neq(rc, -2, "fork: %s", strerror(errno));
  j->runs++;
  hist(j, "[run %d", j->runs);
  if (failpoints) hist(j, " %s", failpoints);
  if (kill_ms >= 0) hist(j, " kill at %d ms", kill_ms);
  for (int i = first; argv[i]; i++) hist(j, " %s", argv[i]);
  hist(j, ": %d] ", rc);
  return rc;
}

/* Compares the sink directory with the reference: returns the number of
 * problems (a vertex missing, twice, or with a wrong label, malformed
 * lines, stray files) and describes the first in why; *wrong gets the
 * number of vertices with a wrong label. */
static uint64_t out_diff(ccjob *j, char *why, size_t whylen, uint64_t *wrong) {
  const graph_ref *g = j->g;
  why[0] = '\0';
  *wrong = 0;
  uint8_t *seen = calloc(g->n, 1);
  cr_assert_not_null(seen);
  uint64_t problems = 0;
#define PROBLEM(...)                                                                               \
  do {                                                                                             \
    if (!problems++) snprintf(why, whylen, __VA_ARGS__);                                           \
  } while (0)
  DIR *d = opendir(j->out);
  if (!d) {
    free(seen);
    snprintf(why, whylen, "no sink directory %s", j->out);
    return g->n;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    size_t n = strlen(e->d_name);
    if (!(n > 4 && strcmp(e->d_name + n - 4, ".txt") == 0 && strncmp(e->d_name, "sink-", 5) == 0))
      PROBLEM("unexpected file %.64s in the sink directory", e->d_name);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", j->out, e->d_name);
    char *text = th_read_file(path, NULL);
    if (!text) {
      PROBLEM("cannot read %.64s", e->d_name);
      continue;
    }
    for (char *s = text, *nl; *s; s = nl + 1) {
      nl = strchr(s, '\n');
      if (!nl) {
        PROBLEM("%.64s: last line without a newline: '%.40s'", e->d_name, s);
        break;
      }
      *nl = '\0';
      ull v, label;
      char extra;
      if (sscanf(s, "%llu %llu%c", &v, &label, &extra) != 2 || v >= g->n) {
        PROBLEM("%.64s: bad line '%.80s'", e->d_name, s);
        continue;
      }
      if (seen[v]++) PROBLEM("%.64s: vertex %llu twice ('%.80s')", e->d_name, v, s);
      if (label != g->label[v]) {
        ++*wrong;
        PROBLEM("%.64s: '%.80s', expected label %u", e->d_name, s, g->label[v]);
      }
    }
    free(text);
  }
  closedir(d);
  uint64_t missing = 0;
  for (uint32_t v = 0; v < g->n; v++)
    if (!seen[v] && !missing++) PROBLEM("vertex %u missing", v);
  if (missing > 1 && problems == 1)
    snprintf(why + strlen(why), whylen - strlen(why), " (%llu vertices missing)", (ull)missing);
  problems += missing ? missing - 1 : 0;
#undef PROBLEM
  free(seen);
  return problems;
}

static void check_exact(ccjob *j) {
  char why[400];
  uint64_t wrong = 0;
  uint64_t problems = out_diff(j, why, sizeof why, &wrong);
  cr_assert_eq(problems, 0,
               "output differs from the reference (%llu problems, %llu wrong labels): %s\n"
               "history: %s",
               (ull)problems, (ull)wrong, why, j->history);
}

/* The summary line: "components: finished N vertices, M edges in T s: C
 * components, ...". Returns C. */
static ull summary_components(const char *err, uint32_t n) {
  const char *p = strstr(err, "components: finished ");
  cr_assert_not_null(p, "no summary in: %s", err);
  ull vertices = 0, components = 0;
  double secs = 0;
  cr_assert_eq(sscanf(p, "components: finished %llu vertices, %*s edges in %lf s: %llu components",
                      &vertices, &secs, &components),
               3, "bad summary: %s", p);
  cr_assert_eq(vertices, n, "summary: %llu vertices, expected %u: %s", vertices, n, p);
  return components;
}

/* One `--restore latest` run (failpoints armed) that must end the job.
 * Returns 1 if it resumed from a checkpoint, 0 if not. */
static int restore_to_end(ccjob *j, const char *failpoints) {
  char *err = NULL;
  int rc = run_cc(j, failpoints, -1, &err, NULL, "--restore", "latest", NULL);
  cr_assert_eq(rc, 0, "restore: exit %d, stderr: %s\nhistory: %s", rc, err, j->history);
  long long from = th_resumed_from(err);
  cr_assert(from >= 0 || from == TH_ALREADY_FINISHED,
            "the restore did not say where it resumed: %s\nhistory: %s", err, j->history);
  hist(j, "(from %lld) ", from);
  free(err);
  return from > 0;
}

/* ------------------------------------------------------------------------ */
/* Uninterrupted runs                                                       */

/* Durations of uninterrupted runs per parallelism, for the random kills. */
static int64_t dur_ms[5];

/* A run to the end with the given batching and checkpoint interval: exact
 * output, the summary's component count, and (with checkpoints) at least
 * one completed checkpoint. */
static void reference_run(int p, const char *interval, const char *batch, const char *channel) {
  const graph_ref *g = reference(&dense_ref, VERTICES, EDGES);
  ccjob *j = ccjob_new(g, p);
  j->interval = interval;
  j->batch = batch;
  j->channel = channel;
  char *err = NULL;
  int64_t ms = 0;
  int rc = run_cc(j, NULL, -1, &err, &ms, NULL);
  cr_assert_eq(rc, 0, "P=%d: exit %d: %s", p, rc, err);
  check_exact(j);
  ull comps = summary_components(err, g->n);
  cr_assert_eq(comps, g->components, "P=%d: summary says %llu components, expected %llu", p, comps,
               (ull)g->components);
  ull id = 0, log = 0;
  int heads = 0;
  cr_assert_eq(th_latest_op_state(WEIR_BINARY, j->state, "loop", &id, &log, &heads), 0);
  cr_assert_gt(id, 0, "P=%d: no checkpoint completed", p);
  if (!dur_ms[p]) dur_ms[p] = ms;
  fprintf(stderr,
          "components::reference P=%d interval %s ms, batch %s, channel %s: %u vertices, %u "
          "edges, %llu components in %lld ms, last checkpoint %llu\n",
          p, interval, batch, channel, g->n, g->m, comps, (long long)ms, id);
  free(err);
  ccjob_free(j);
}

TestSuite(components, .timeout = 170, .fini = cleanup);

Test(components, matches_reference) {
  reference_run(1, "10", "16", "2");
  reference_run(2, "10", "8", "1");
  reference_run(4, "25", "32", "2");
  reference_run(2, "1000", "1024", "8"); /* the defaults but the interval */
}

/* ------------------------------------------------------------------------ */
/* Kills at the failpoint: a back-edge log open                             */

/* Kill at iter.log_open hit `hit`, restore until done, exact output. A run
 * that ends before the hit (the job is short) is checked and the kill tried
 * again in a new directory, up to `tries` times. Returns 1 if the kill
 * fired. */
static int log_open_kill(int p, unsigned hit, int tries, int *resumed, int *ended) {
  const graph_ref *g = reference(&dense_ref, VERTICES, EDGES);
  for (int t = 0; t < tries; t++) {
    ccjob *j = ccjob_new(g, p);
    char fp[64], want[96];
    snprintf(fp, sizeof fp, "iter.log_open=kill@%u", hit);
    snprintf(want, sizeof want, "failpoint iter.log_open: kill (hit %u)", hit);
    char *err = NULL;
    int rc = run_cc(j, fp, -1, &err, NULL, NULL);
    int fired = rc != 0;
    if (fired) {
      cr_assert_eq(rc, KILLED, "P=%d: %s: exit %d, stderr: %s", p, fp, rc, err);
      cr_assert(strstr(err, want) != NULL, "P=%d: no '%s' in stderr: %s", p, want, err);
      *resumed += restore_to_end(j, NULL);
    } else {
      fprintf(stderr, "components::kill_while_back_edge_log_open: P=%d ended before hit %u\n", p,
              hit);
      ++*ended;
    }
    free(err);
    check_exact(j);
    ccjob_free(j);
    if (fired) return 1;
  }
  return 0;
}

/* How many back-edge logs a run opens depends on how many checkpoints fall
 * into it (a fast machine, or a slow sanitizer build, changes that): every
 * parallelism must be killed with a log open at least once, and hit 1 (the
 * first checkpoint with work in the loop) always. */
Test(components, kill_while_back_edge_log_open) {
  int resumed = 0, ended = 0;
  for (int p = 1; p <= 4; p *= 2) {
    int fired = 0;
    for (unsigned hit = 1; hit <= 3; hit++) {
      int f = log_open_kill(p, hit, 4, &resumed, &ended);
      cr_assert(f || hit > 1, "P=%d: iter.log_open=kill@1 never fired in 4 runs", p);
      fired += f;
    }
    fprintf(stderr, "components::kill_while_back_edge_log_open: P=%d: %d of 3 kills fired\n", p,
            fired);
  }
  fprintf(stderr,
          "components::kill_while_back_edge_log_open: %d restores resumed a checkpoint, %d runs "
          "ended before their hit\n",
          resumed, ended);
  cr_assert_gt(resumed, 0, "no restore resumed a checkpoint: the test would be vacuous");
}

/* ------------------------------------------------------------------------ */
/* Random kills                                                             */

/* At least 20 kills in at least 20 runs: jobs at P = 1, 2, 4 in turn, each
 * killed 1 to 3 times by SIGKILL at random delays (a first run between a
 * quarter of an uninterrupted run's duration and its end, a restore within
 * its first half; a first run that ends before its kill shortens that
 * duration), then restored until done; each checked exactly. */
Test(components, random_kills) {
  const char *env = getenv("WEIR_TEST_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 10)
                              : ((uint64_t)time(NULL) * 1000003u) ^ (uint64_t)getpid();
  fprintf(stderr, "components::random_kills: seed %llu (replay: WEIR_TEST_SEED=%llu)\n", (ull)seed,
          (ull)seed);
  uint64_t rng = seed;
  for (int p = 1; p <= 4; p *= 2)
    if (!dur_ms[p]) reference_run(p, "10", "16", "2");
  const graph_ref *g = reference(&dense_ref, VERTICES, EDGES);
  int runs = 0, kills = 0, resumed = 0, finished_before_kill = 0;
  for (int jn = 0; runs < 20 || kills < 20; jn++) {
    cr_assert_lt(jn, 40, "only %d kills in %d runs of %d jobs", kills, runs, jn);
    int p = 1 << (jn % 3);
    ccjob *j = ccjob_new(g, p);
    hist(j, "seed %llu, job %d: ", (ull)seed, jn);
    int want_kills = 1 + (int)(th_splitmix64(&rng) % 3);
    for (int attempt = 0;; attempt++) {
      cr_assert_lt(attempt, MAX_ATTEMPTS, "no end after %d attempts\nhistory: %s", attempt,
                   j->history);
      char *err = NULL;
      int killing = attempt < want_kills;
      int64_t d = dur_ms[p] > 40 ? dur_ms[p] : 40;
      uint64_t r = th_splitmix64(&rng);
      int delay = !killing  ? -1
                  : attempt ? 5 + (int)(r % (uint64_t)(d / 2))
                            : (int)(d / 4 + (int64_t)(r % (uint64_t)(d - d / 4)));
      int64_t t0 = th_mono_ms();
      int rc = attempt ? run_cc(j, NULL, delay, &err, NULL, "--restore", "latest", NULL)
                       : run_cc(j, NULL, delay, &err, NULL, NULL);
      int64_t took = th_mono_ms() - t0;
      /* A whole run done before its kill: the reference ran while the
       * machine was busier, and later delays come from this run's time. */
      if (killing && rc == 0 && attempt == 0 && took < dur_ms[p]) dur_ms[p] = took;
      runs++;
      cr_assert(rc == 0 || (killing && rc == KILLED), "exit %d, stderr: %s\nhistory: %s", rc, err,
                j->history);
      if (attempt) {
        long long from = th_resumed_from(err);
        /* A run killed before it logged anything may say nothing; a kill
         * after the final checkpoint leaves nothing to do. */
        cr_assert(from >= 0 || rc == KILLED || (from == TH_ALREADY_FINISHED && rc == 0),
                  "restore said nothing about where it resumed: %s\nhistory: %s", err, j->history);
        if (from > 0) resumed++;
        if (from == TH_ALREADY_FINISHED && rc == 0) finished_before_kill++;
      }
      free(err);
      if (rc == 0) break;
      kills++;
    }
    check_exact(j);
    ccjob_free(j);
  }
  fprintf(stderr,
          "components::random_kills: %d runs, %d killed, %d restores resumed a checkpoint, %d "
          "kills came after the final checkpoint\n",
          runs, kills, resumed, finished_before_kill);
  cr_assert_gt(resumed, 0, "no restore resumed a checkpoint: the test would be vacuous");
}

/* ------------------------------------------------------------------------ */
/* The negative control                                                     */

#define CONTROL_ATTEMPTS 40

/* Kills a run of the sparse graph right after checkpoint k committed; when
 * that checkpoint has a non-empty back-edge log, copies the directory and
 * restores one copy without replaying the log and the other with it (exact
 * output expected). At least one restore without replay must be wrong. */
Test(components, negative_control_without_replay) {
  const graph_ref *g = reference(&sparse_ref, SPARSE_VERTICES, SPARSE_EDGES);
  int eligible = 0, wrong = 0;
  /* A checkpoint's back-edge log is empty whenever nothing crossed the
   * back edge while its barrier went round the loop, which is always the
   * case while the input is still making vertices (the first 5/7 of it):
   * only edges send offers round. How many checkpoints that phase lasts
   * depends on the machine's load, so an uninterrupted run per parallelism
   * counts the checkpoints of a whole run, and the kills come in its last
   * 40%. Attempts go on until 3 had a log and one restore without it went
   * wrong (usually the first few). */
  unsigned last[5] = {0};
  for (int p = 2; p <= 4; p += 2) {
    ccjob *j = ccjob_new(g, p);
    char *err = NULL;
    int rc = run_cc(j, NULL, -1, &err, NULL, NULL);
    cr_assert_eq(rc, 0, "P=%d: exit %d: %s", p, rc, err);
    free(err);
    check_exact(j);
    ull id = 0, log = 0;
    int heads = 0;
    cr_assert_eq(th_latest_op_state(WEIR_BINARY, j->state, "loop", &id, &log, &heads), 0);
    last[p] = (unsigned)id;
    fprintf(stderr, "components::negative_control: P=%d: a whole run takes %llu checkpoints\n", p,
            id);
    ccjob_free(j);
  }
  for (int attempt = 0; attempt < CONTROL_ATTEMPTS && (eligible < 3 || !wrong); attempt++) {
    int p = attempt % 2 ? 4 : 2;
    unsigned from = last[p] * 3 / 5 > 2 ? last[p] * 3 / 5 : 2;
    unsigned span = last[p] > from ? last[p] - from : 1;
    unsigned k = from + (unsigned)(attempt / 2) % span;
    ccjob *j = ccjob_new(g, p);
    char fp[64];
    snprintf(fp, sizeof fp, "ckpt.after_meta_commit=kill@%u", k);
    char *err = NULL;
    int rc = run_cc(j, fp, -1, &err, NULL, NULL);
    if (rc == 0) { /* the job ended before checkpoint k */
      free(err);
      ccjob_free(j);
      continue;
    }
    cr_assert_eq(rc, KILLED, "%s did not fire: exit %d, stderr: %s", fp, rc, err);
    free(err);
    ull id = 0, log = 0;
    int heads = 0;
    cr_assert_eq(th_latest_op_state(WEIR_BINARY, j->state, "loop", &id, &log, &heads), 0);
    cr_assert_eq(heads, p, "checkpoint %llu lists %d loop heads, expected %d", id, heads, p);
    fprintf(stderr,
            "components::negative_control: P=%d killed after checkpoint %llu: back-edge log %llu "
            "bytes\n",
            p, id, log);
    if (!log) {
      ccjob_free(j);
      continue;
    }
    eligible++;
    char twin_dir[700];
    snprintf(twin_dir, sizeof twin_dir, "%s-twin", j->dir);
    const char *cp[] = {"/bin/cp", "-a", j->dir, twin_dir, NULL};
    cr_assert_eq(th_run(cp, NULL, NULL, NULL, 60), 0, "cp -a %s %s", j->dir, twin_dir);
    ccjob *twin = ccjob_at(twin_dir, g, p);

    /* Without replay. */
    rc = run_cc(j, "iter.skip_replay=error+", -1, &err, NULL, "--restore", "latest", NULL);
    cr_assert_eq(rc, 0, "restore without replay: exit %d, stderr: %s", rc, err);
    cr_assert_eq(th_resumed_from(err), (long long)id, "resumed elsewhere: %s", err);
    free(err);
    char why[400];
    uint64_t nwrong = 0;
    uint64_t problems = out_diff(j, why, sizeof why, &nwrong);
    fprintf(stderr, "components::negative_control: without replay: %llu problems (%s)\n",
            (ull)problems, problems ? why : "none");
    if (problems) wrong++;

    /* With replay, from the very same checkpoint: exact. */
    rc = run_cc(twin, NULL, -1, &err, NULL, "--restore", "latest", NULL);
    cr_assert_eq(rc, 0, "twin restore: exit %d, stderr: %s", rc, err);
    cr_assert_eq(th_resumed_from(err), (long long)id, "twin resumed elsewhere: %s", err);
    free(err);
    check_exact(twin);
    ccjob_free(twin);
    ccjob_free(j);
  }
  fprintf(stderr, "components::negative_control: %d of %d restores without replay were wrong\n",
          wrong, eligible);
  cr_assert_gt(eligible, 0, "no checkpoint with a non-empty back-edge log in %d attempts",
               CONTROL_ATTEMPTS);
  cr_assert_gt(wrong, 0,
               "%d restores that dropped a non-empty back-edge log all gave the right output: "
               "the exact checks cannot see a lost log",
               eligible);
}

/* Crash tests run one at a time whatever --jobs says: a second test on the
 * cores would slow every run and move every kill. */
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
