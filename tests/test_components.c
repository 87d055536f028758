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
 * checkpoint's cut on restore). The runs, kills, restores and the random
 * kill loop are the crash harness's (crash.h), shared with the other crash
 * tests.
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

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crash.h"
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
  crash_job c;
  const graph_ref *g;
  int p;
} ccjob;

/* A job in directory dir (NULL: a new one) with the crash tests' settings:
 * checkpoints every 10 ms; batches of `batch` records, channels of
 * `channel` batches. */
static ccjob *ccjob_at(const char *dir, const graph_ref *g, int p, const char *batch,
                       const char *channel) {
  ccjob *j = (ccjob *)(dir ? crash_at(dir, "components", sizeof(ccjob))
                           : crash_new("components", sizeof(ccjob)));
  j->g = g;
  j->p = p;
  crash_arg(&j->c, "--vertices", "%u", g->n);
  crash_arg(&j->c, "--edges", "%u", g->m);
  crash_arg(&j->c, "--seed", "%u", SEED);
  crash_arg(&j->c, "--batch-records", "%s", batch);
  crash_arg(&j->c, "--channel-batches", "%s", channel);
  crash_par(&j->c, p);
  j->c.interval = "10";
  crash_hist(&j->c, "N=%u M=%u P=%d: ", g->n, g->m, p);
  return j;
}

static ccjob *ccjob_new(const graph_ref *g, int p) {
  return ccjob_at(NULL, g, p, "16", "2");
}

static uint64_t label_of(const void *g, uint64_t v) {
  return ((const graph_ref *)g)->label[v];
}

/* Compares the sink directory with the reference: the number of problems
 * (a vertex missing, twice, or with a wrong label, malformed lines, stray
 * files), the first described; *wrong gets the number of vertices with a
 * wrong label. */
static void out_diff(ccjob *j, crash_diff *d, uint64_t *wrong) {
  crash_ref r = {0, j->g->n - 1, label_of, j->g, "vertex"};
  crash_diff_ids(j->c.out, &r, d, NULL, wrong);
}

static void check_exact(ccjob *j) {
  crash_diff d;
  uint64_t wrong = 0;
  out_diff(j, &d, &wrong);
  cr_assert_eq(d.problems, 0,
               "output differs from the reference (%llu problems, %llu wrong labels): %s\n"
               "history: %s",
               (ull)d.problems, (ull)wrong, d.why, j->c.history);
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

/* One `--restore latest` run that must end the job. Returns 1 if it
 * resumed from a checkpoint, 0 if not. */
static int restore_to_end(ccjob *j) {
  char *err = NULL;
  long long from = crash_restore_to_end(&j->c, 1, NULL, &err, NULL);
  cr_assert(from >= 0 || from == TH_ALREADY_FINISHED,
            "the restore did not say where it resumed: %s\nhistory: %s", err, j->c.history);
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
  ccjob *j = ccjob_at(NULL, g, p, batch, channel);
  j->c.interval = interval;
  char *err = NULL;
  int64_t ms = 0;
  int rc = crash_runv(&j->c, NULL, -1, &err, &ms, NULL);
  cr_assert_eq(rc, 0, "P=%d: exit %d: %s", p, rc, err);
  check_exact(j);
  ull comps = summary_components(err, g->n);
  cr_assert_eq(comps, g->components, "P=%d: summary says %llu components, expected %llu", p, comps,
               (ull)g->components);
  ull id = 0, log = 0;
  int heads = 0;
  cr_assert_eq(th_latest_op_state(WEIR_BINARY, j->c.state, "loop", &id, &log, &heads), 0);
  cr_assert_gt(id, 0, "P=%d: no checkpoint completed", p);
  if (!dur_ms[p]) dur_ms[p] = ms;
  fprintf(stderr,
          "components::reference P=%d interval %s ms, batch %s, channel %s: %u vertices, %u "
          "edges, %llu components in %lld ms, last checkpoint %llu\n",
          p, interval, batch, channel, g->n, g->m, comps, (long long)ms, id);
  free(err);
  crash_free(&j->c);
}

/* Suite fini: the jobs a failed test left, and the references. */
static void cleanup(void) {
  crash_fini();
  free(dense_ref.label);
  free(sparse_ref.label);
  dense_ref.label = sparse_ref.label = NULL;
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

/* Kill at iter.log_open hit `hit`, restore until done, exact output. The
 * input stays open until the hit (failpoint source.done=until:): a loop
 * whose input is open has open back edges, so every checkpoint opens a
 * back-edge log, and the kill lands however fast or slow the machine.
 * Returns whether the restore resumed a checkpoint. */
static int log_open_kill(int p, unsigned hit) {
  const graph_ref *g = reference(&dense_ref, VERTICES, EDGES);
  ccjob *j = ccjob_new(g, p);
  char fp[128], want[96];
  snprintf(fp, sizeof fp, "iter.log_open=kill@%u,source.done=until:iter.log_open:%u", hit, hit + 1);
  snprintf(want, sizeof want, "failpoint iter.log_open: kill (hit %u)", hit);
  char *err = NULL;
  int rc = crash_run(&j->c, fp, -1, &err, NULL);
  cr_assert_eq(rc, CRASH_KILLED, "P=%d: %s: exit %d, stderr: %s", p, fp, rc, err);
  cr_assert(strstr(err, want) != NULL, "P=%d: no '%s' in stderr: %s", p, want, err);
  free(err);
  int resumed = restore_to_end(j);
  check_exact(j);
  crash_free(&j->c);
  return resumed;
}

/* Every parallelism killed with a back-edge log open, at its first, second
 * and third opening. */
Test(components, kill_while_back_edge_log_open) {
  int resumed = 0;
  for (int p = 1; p <= 4; p *= 2)
    for (unsigned hit = 1; hit <= 3; hit++) resumed += log_open_kill(p, hit);
  fprintf(stderr,
          "components::kill_while_back_edge_log_open: %d of 9 restores resumed a checkpoint\n",
          resumed);
  cr_assert_gt(resumed, 0, "no restore resumed a checkpoint: the test would be vacuous");
}

/* ------------------------------------------------------------------------ */
/* Random kills                                                             */

typedef struct cc_kills {
  uint64_t rng;
  int p;
  int64_t t0;
  crash_resumes res;
} cc_kills;

static int cc_delay(crash_job *j, int attempt, int killing, void *user) {
  (void)j;
  (void)killing;
  cc_kills *k = user;
  k->t0 = th_mono_ms();
  return crash_delay_within(dur_ms[k->p], attempt, th_splitmix64(&k->rng));
}

static void cc_after(crash_job *j, int attempt, int rc, const char *err, void *user) {
  cc_kills *k = user;
  /* A whole first run done before its kill: the reference ran while the
   * machine was busier, and later delays come from this run's time. */
  int64_t took = th_mono_ms() - k->t0;
  if (attempt == 0 && rc == 0 && took < dur_ms[k->p]) dur_ms[k->p] = took;
  crash_note_resume(j, attempt, rc, err, &k->res);
}

/* Jobs at P = 1, 2, 4 in turn. */
static crash_job *cc_job(int jn, void *user) {
  cc_kills *k = user;
  k->p = 1 << (jn % 3);
  return &ccjob_new(reference(&dense_ref, VERTICES, EDGES), k->p)->c;
}

static void cc_check(crash_job *j, void *user) {
  (void)user;
  check_exact((ccjob *)j);
}

/* At least 20 kills in at least 20 runs: jobs at P = 1, 2, 4 in turn, each
 * killed 1 to 3 times by SIGKILL at random delays (a first run between a
 * quarter of an uninterrupted run's duration and its end, a restore within
 * its first half; a first run that ends before its kill shortens that
 * duration), then restored until done; each checked exactly. */
Test(components, random_kills) {
  uint64_t seed = crash_seed("components::random_kills");
  cc_kills k = {.rng = seed};
  for (int p = 1; p <= 4; p *= 2)
    if (!dur_ms[p]) reference_run(p, "10", "16", "2");
  crash_loop l = {.min_runs = 20,
                  .min_kills = 20,
                  .max_jobs = 40,
                  .max_kills = 3,
                  .max_attempts = MAX_ATTEMPTS,
                  .seed = seed,
                  .rng = &k.rng,
                  .new_job = cc_job,
                  .check = cc_check,
                  .delay = cc_delay,
                  .after = cc_after,
                  .user = &k};
  int runs = 0, kills = crash_kill_loop(&l, &runs);
  fprintf(stderr,
          "components::random_kills: %d runs, %d killed, %d restores resumed a checkpoint, %d "
          "kills came after the final checkpoint\n",
          runs, kills, k.res.resumed, k.res.finished_before_kill);
  cr_assert_gt(k.res.resumed, 0, "no restore resumed a checkpoint: the test would be vacuous");
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
    int rc = crash_run(&j->c, NULL, -1, &err, NULL);
    cr_assert_eq(rc, 0, "P=%d: exit %d: %s", p, rc, err);
    free(err);
    check_exact(j);
    ull id = 0, log = 0;
    int heads = 0;
    cr_assert_eq(th_latest_op_state(WEIR_BINARY, j->c.state, "loop", &id, &log, &heads), 0);
    last[p] = (unsigned)id;
    fprintf(stderr, "components::negative_control: P=%d: a whole run takes %llu checkpoints\n", p,
            id);
    crash_free(&j->c);
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
    int rc = crash_run(&j->c, fp, -1, &err, NULL);
    if (rc == 0) { /* the job ended before checkpoint k */
      free(err);
      crash_free(&j->c);
      continue;
    }
    cr_assert_eq(rc, CRASH_KILLED, "%s did not fire: exit %d, stderr: %s", fp, rc, err);
    free(err);
    ull id = 0, log = 0;
    int heads = 0;
    cr_assert_eq(th_latest_op_state(WEIR_BINARY, j->c.state, "loop", &id, &log, &heads), 0);
    cr_assert_eq(heads, p, "checkpoint %llu lists %d loop heads, expected %d", id, heads, p);
    fprintf(stderr,
            "components::negative_control: P=%d killed after checkpoint %llu: back-edge log %llu "
            "bytes\n",
            p, id, log);
    if (!log) {
      crash_free(&j->c);
      continue;
    }
    eligible++;
    ccjob *twin = (ccjob *)crash_twin(&j->c, sizeof(ccjob));

    /* Without replay. */
    char *err2 = NULL;
    long long at = crash_restore_to_end(&j->c, 1, "iter.skip_replay=error+", &err2, NULL);
    cr_assert_eq(at, (long long)id, "resumed elsewhere: %s", err2);
    free(err2);
    crash_diff d;
    uint64_t nwrong = 0;
    out_diff(j, &d, &nwrong);
    fprintf(stderr, "components::negative_control: without replay: %llu problems (%s)\n",
            (ull)d.problems, d.problems ? d.why : "none");
    if (d.problems) wrong++;

    /* With replay, from the very same checkpoint: exact. */
    at = crash_restore_to_end(&twin->c, 1, NULL, &err2, NULL);
    cr_assert_eq(at, (long long)id, "twin resumed elsewhere: %s", err2);
    free(err2);
    check_exact(twin);
    crash_free(&twin->c);
    crash_free(&j->c);
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

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, "info");
}
