/* test_identity.c: a state directory belongs to one job and one set of
 * destinations (engine/src/identity.c, docs/checkpoints.md §8).
 *
 * The `weir` binary (as test_cli.c runs it): another job in the same state
 * directory is refused with exit 2 naming both; a restore with --sink
 * file:OTHER is refused with exit 2 naming both directories and the ways
 * out, and with --allow-sink-change the checkpoint's pending parts are
 * committed in the old directory while the new one gets what follows (the
 * two together exact); a store without identities (rewritten as an older
 * weir wrote it, weir__store_test_strip_identity) restores with one
 * warning.
 *
 * In process (weir_job_run): a job gen -> key_by -> count -> sink, run 1
 * stopped part-way; then restores of its latest checkpoint with a graph
 * that gained a stateless operator (exact), without the stateful count
 * (refused unless allow_non_restored_state), with another parallelism
 * (rescaled, exact), and a two-phase sink whose destination cannot move
 * (refused even with allow_sink_change, with the sink's reason); a job id
 * given by the caller (weir_run_opts.job_id) names a new job, not a
 * restored one.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "store_impl.h"
#include "base/alloc.h"
#include "weir/operators.h"
#include "weir/sink.h"
#include "weir/weir.h"

#define TIMEOUT_S 120

typedef unsigned long long ull;

TestSuite(identity, .timeout = 300);

/* ---- the weir binary ------------------------------------------------------- */

static int weir(const char *cwd, char **err, const char *const args[]) {
  const char *argv[64];
  int n = 0;
  argv[n++] = WEIR_BINARY;
  for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
  argv[n] = NULL;
  char *out = NULL;
  int rc = th_run(argv, cwd, &out, err, TIMEOUT_S);
  free(out);
  return rc;
}
#define WEIR(cwd, err, ...) weir(cwd, err, (const char *const[]){__VA_ARGS__, NULL})

#define RECORDS "20000"
#define KEYS "20"

/* The counter job of these tests, killed right after its third checkpoint
 * completed (its parts of that epoch pending in dir/out). */
static void killed_counter(const char *dir) {
  char errpath[PATH_MAX];
  snprintf(errpath, sizeof errpath, "%s/killed.err", dir);
  const char *argv[] = {WEIR_BINARY, "run",
                        "counter",   "--records",
                        RECORDS,     "--keys",
                        KEYS,        "--rate",
                        "20000",     "--workers",
                        "2",         "--parallelism",
                        "2",         "--checkpoint-interval",
                        "50",        "--sink",
                        "file:out",  "--quiet",
                        NULL};
  char *err = NULL;
  int rc = th_run_killable(argv, dir, "ckpt.after_meta_commit=kill@3", -1, TIMEOUT_S, errpath, &err,
                           NULL);
  cr_assert_eq(rc, 128 + 9, "the counter was not killed at its third checkpoint: %d, %s", rc, err);
  free(err);
}

/* The real path of dir/name (dir exists; name may not). */
static void real_of(const char *dir, const char *name, char *out, size_t cap) {
  char r[PATH_MAX];
  cr_assert_not_null(realpath(dir, r), "realpath %s", dir);
  snprintf(out, cap, "%s/%s", r, name);
}

/* Asserts that the *.txt parts of the directories hold the counter's output
 * exactly once: per key, the counts 1..c once each, the c adding up to the
 * records. Returns the number of part files read. */
static int counter_exact(const char *const dirs[]) {
  uint64_t records = strtoull(RECORDS, NULL, 10), keys = strtoull(KEYS, NULL, 10);
  uint64_t *seen = calloc(keys * (records + 1), 1);
  uint64_t *top = calloc(keys, sizeof *top), lines = 0;
  int files = 0;
  for (int i = 0; dirs[i]; i++) {
    DIR *d = opendir(dirs[i]);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      size_t n = strlen(e->d_name);
      cr_assert(strstr(e->d_name, ".pending") == NULL, "%s/%s left pending", dirs[i], e->d_name);
      if (n < 4 || strcmp(e->d_name + n - 4, ".txt")) continue;
      char p[PATH_MAX];
      snprintf(p, sizeof p, "%s/%s", dirs[i], e->d_name);
      FILE *f = fopen(p, "r");
      cr_assert_not_null(f, "%s", p);
      ull k, c;
      while (fscanf(f, "%llu %llu", &k, &c) == 2) {
        cr_assert(k < keys && c >= 1 && c <= records, "line %llu %llu in %s", k, c, p);
        cr_assert_eq(((uint8_t *)seen)[k * (records + 1) + c], 0, "key %llu count %llu twice", k,
                     c);
        ((uint8_t *)seen)[k * (records + 1) + c] = 1;
        if (c > top[k]) top[k] = c;
        lines++;
      }
      fclose(f);
      files++;
    }
    closedir(d);
  }
  uint64_t sum = 0;
  for (uint64_t k = 0; k < keys; k++) sum += top[k];
  cr_assert_eq(sum, records, "the counts add up to %llu, not %llu", (ull)sum, (ull)records);
  cr_assert_eq(lines, records, "%llu lines for %llu records", (ull)lines, (ull)records);
  free(seen);
  free(top);
  return files;
}

static void finish(char *dir) {
  th_rmrf(dir);
  free(dir);
}

Test(identity, another_job_in_the_state_directory_is_refused) {
  char *dir = th_tmpdir();
  char *err = NULL;
  int rc = WEIR(dir, &err, "run", "counter", "--records", "1000", "--keys", "10", "--quiet");
  cr_assert_eq(rc, 0, "counter: exit %d: %s", rc, err);
  free(err);
  char in[PATH_MAX];
  snprintf(in, sizeof in, "%s/in.txt", dir);
  cr_assert_eq(th_write_file(in, "a b a\n", 6), 0);

  /* A finished counter: the wordcount used to become its instance 2. */
  rc = WEIR(dir, &err, "run", "wordcount", "--input", in, "--sink", "null", "--quiet");
  cr_assert_eq(rc, 2, "wordcount over a finished counter: exit %d: %s", rc, err);
  const char *want[] = {"belongs to job 'counter'", "not to this job 'wordcount'", "--state-dir",
                        "--fresh", NULL};
  for (int i = 0; want[i]; i++) cr_assert(strstr(err, want[i]), "no \"%s\" in: %s", want[i], err);
  free(err);
  /* Another state directory, or --fresh, is the way out. */
  rc = WEIR(dir, &err, "run", "--state-dir", "wc", "wordcount", "--input", in, "--sink", "null",
            "--quiet");
  cr_assert_eq(rc, 0, "wordcount in its own directory: exit %d: %s", rc, err);
  free(err);
  rc = WEIR(dir, &err, "run", "wordcount", "--input", in, "--sink", "null", "--quiet", "--fresh");
  cr_assert_eq(rc, 0, "wordcount --fresh: exit %d: %s", rc, err);
  cr_assert(strstr(err, "--fresh starts job 'wordcount' over"), "%s", err);
  free(err);
  /* Now the directory is the wordcount's: the counter is the stranger. */
  rc = WEIR(dir, &err, "run", "counter", "--records", "1000", "--keys", "10", "--quiet",
            "--restore", "latest");
  cr_assert_eq(rc, 2, "counter over the wordcount: exit %d: %s", rc, err);
  cr_assert(strstr(err, "belongs to job 'wordcount'") && strstr(err, "this job 'counter'"), "%s",
            err);
  free(err);
  finish(dir);
}

Test(identity, help_names_the_ways_out) {
  const char *argv[] = {WEIR_BINARY, "help", "run", NULL};
  char *out = NULL, *err = NULL;
  cr_assert_eq(th_run(argv, NULL, &out, &err, TIMEOUT_S), 0, "%s", err);
  const char *want[] = {"--allow-sink-change", "--allow-non-restored-state",
                        "does not fit the state directory", NULL};
  for (int i = 0; want[i]; i++) cr_assert(strstr(out, want[i]), "no \"%s\" in: %s", want[i], out);
  free(out);
  free(err);
}

Test(identity, another_job_over_an_unfinished_one_is_refused) {
  char *dir = th_tmpdir();
  killed_counter(dir);
  char in[PATH_MAX];
  snprintf(in, sizeof in, "%s/in.txt", dir);
  cr_assert_eq(th_write_file(in, "a b a\n", 6), 0);
  char *err = NULL;
  int rc = WEIR(dir, &err, "run", "wordcount", "--input", in, "--sink", "null", "--restore",
                "latest", "--quiet");
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "belongs to job 'counter'") && strstr(err, "unfinished") &&
                strstr(err, "this job 'wordcount'"),
            "%s", err);
  free(err);
  finish(dir);
}

Test(identity, restore_into_another_sink_directory_is_refused) {
  char *dir = th_tmpdir();
  killed_counter(dir);
  char out[PATH_MAX], other[PATH_MAX], want_out[PATH_MAX + 8], want_other[PATH_MAX + 8];
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(other, sizeof other, "%s/other", dir);
  int pending = th_count_pending(out);
  cr_assert_gt(pending, 0, "the kill left nothing pending");
  real_of(dir, "out", want_out, sizeof want_out);
  real_of(dir, "other", want_other, sizeof want_other);

  char *err = NULL;
  int rc = WEIR(dir, &err, "run", "counter", "--records", RECORDS, "--keys", KEYS, "--workers", "2",
                "--parallelism", "2", "--sink", "file:other", "--restore", "latest");
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  char a[2 * PATH_MAX], b[2 * PATH_MAX];
  snprintf(a, sizeof a, "writing to file:%s,", want_out);
  snprintf(b, sizeof b, "writes to file:%s:", want_other);
  const char *want[] = {"sink 'sink'", a, b, "--allow-sink-change", "--fresh", "--state-dir", NULL};
  for (int i = 0; want[i]; i++) cr_assert(strstr(err, want[i]), "no \"%s\" in: %s", want[i], err);
  free(err);
  /* Refused before anything ran: the old output as it was, no new one. */
  cr_assert_eq(th_count_pending(out), pending);
  struct stat st;
  cr_assert_neq(stat(other, &st), 0, "%s was created", other);

  /* The same directory, however written, is the same destination. */
  char same[PATH_MAX + 16];
  snprintf(same, sizeof same, "file:%s/./out/", dir);
  rc = WEIR(dir, &err, "run", "counter", "--records", RECORDS, "--keys", KEYS, "--workers", "2",
            "--parallelism", "2", "--sink", same, "--restore", "latest", "--quiet");
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  free(err);
  counter_exact((const char *const[]){out, NULL});
  finish(dir);
}

/* The name's epoch: <sink>-<s>-<n>.txt. */
static uint64_t part_epoch(const char *name) {
  const char *dash = strrchr(name, '-');
  return dash ? strtoull(dash + 1, NULL, 10) : 0;
}

Test(identity, allow_sink_change_commits_the_pending_parts_where_they_are) {
  char *dir = th_tmpdir();
  killed_counter(dir);
  char out[PATH_MAX], other[PATH_MAX];
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(other, sizeof other, "%s/other", dir);
  cr_assert_gt(th_count_pending(out), 0);
  char *err = NULL;
  int rc = WEIR(dir, &err, "run", "counter", "--records", RECORDS, "--keys", KEYS, "--workers", "2",
                "--parallelism", "2", "--sink", "file:other", "--restore", "latest",
                "--allow-sink-change");
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "moves from file:") && strstr(err, "--allow-sink-change"), "%s", err);
  long long from = th_resumed_from(err);
  cr_assert_gt(from, 0, "%s", err);
  free(err);
  /* The old directory: every epoch up to the checkpoint, committed; the new
   * one: the epochs after it; together every record once. */
  cr_assert_eq(th_count_pending(out), 0);
  const char *dirs[] = {out, other};
  for (int i = 0; i < 2; i++) {
    DIR *d = opendir(dirs[i]);
    cr_assert_not_null(d, "%s", dirs[i]);
    struct dirent *e;
    int parts = 0;
    while ((e = readdir(d)) != NULL) {
      if (!strstr(e->d_name, ".txt")) continue;
      uint64_t n = part_epoch(e->d_name);
      if (i == 0)
        cr_assert_leq(n, (uint64_t)from, "%s in the old directory", e->d_name);
      else
        cr_assert_gt(n, (uint64_t)from, "%s in the new directory", e->d_name);
      parts++;
    }
    closedir(d);
    cr_assert_gt(parts, 0, "no parts in %s", dirs[i]);
  }
  counter_exact((const char *const[]){out, other, NULL});
  finish(dir);
}

Test(identity, a_store_without_identities_restores_with_one_warning) {
  char *dir = th_tmpdir();
  killed_counter(dir);
  char state[PATH_MAX], out[PATH_MAX];
  snprintf(state, sizeof state, "%s/state", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  weir_store *s = NULL;
  weir_store_opts so = {0};
  char msg[512];
  cr_assert_eq(weir_store_open(&s, state, &so), 0);
  cr_assert_eq(weir__store_test_strip_identity(s), 0, "%s", weir_store_error(s, msg, sizeof msg));
  weir_store_job rec;
  cr_assert_eq(weir_store_job_get(s, &rec), 1);
  cr_assert_str_empty(rec.name);
  weir_store_close(s);

  /* Even into another directory: an older store names no destination. */
  char *err = NULL;
  int rc = WEIR(dir, &err, "run", "counter", "--records", RECORDS, "--keys", KEYS, "--workers", "2",
                "--parallelism", "2", "--sink", "file:out", "--restore", "latest");
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  const char *w = "did not record its job's name, graph and sink destinations";
  char *first = strstr(err, w);
  cr_assert_not_null(first, "no warning in: %s", err);
  cr_assert_null(strstr(first + 1, w), "warned twice: %s", err);
  cr_assert_gt(th_resumed_from(err), 0, "%s", err);
  free(err);
  counter_exact((const char *const[]){out, NULL});
  /* The run recorded the name: the store is a current one now. */
  weir_store_opts ro = {.read_only = 1};
  cr_assert_eq(weir_store_open(&s, state, &ro), 0);
  cr_assert_eq(weir_store_job_get(s, &rec), 1);
  cr_assert_str_eq(rec.name, "counter");
  weir_store_close(s);
  finish(dir);
}

/* ---- in process ------------------------------------------------------------ */

#define N 60000u
#define K 600u

typedef struct run_cfg {
  _Atomic uint64_t max[K]; /* per key: the largest count the sink saw */
  /* The state versions the versioned sink saw (in restore; in open, +1:
   * 0 means it was not restoring). */
  atomic_uint restore_version, open_version;
  _Atomic uint64_t seen;
  uint64_t stop_after; /* ask for a stop after this many records (0: never) */
  atomic_int stopped;
  weir_job *job;
} run_cfg;

static run_cfg cfg;

static int sink_process(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t v = weir_payload_u64(r), k = r->key % K;
  uint64_t cur = atomic_load(&cfg.max[k]);
  while (v > cur && !atomic_compare_exchange_weak(&cfg.max[k], &cur, v)) {
  }
  if (atomic_fetch_add(&cfg.seen, 1) + 1 == cfg.stop_after && !atomic_exchange(&cfg.stopped, 1))
    weir_job_stop(cfg.job);
  return 0;
}

static const weir_operator_vt sink_vt = {
    .size = sizeof(weir_operator_vt), .name = "max", .process = sink_process};

/* The sink with state of its own (one byte), which notes the state version
 * it restores. */
static int vs_open(weir_ctx *ctx) {
  if (weir_ctx_restoring(ctx)) atomic_store(&cfg.open_version, weir_ctx_state_version(ctx) + 1);
  return 0;
}
static int vs_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)ctx;
  (void)id;
  return weir_snapshot_write(w, "v", 1);
}
static int vs_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  (void)r;
  atomic_store(&cfg.restore_version, weir_ctx_state_version(ctx));
  return 0;
}
static const weir_operator_vt versioned_vt = {.size = sizeof(weir_operator_vt),
                                              .name = "versioned",
                                              .open = vs_open,
                                              .process = sink_process,
                                              .snapshot = vs_snapshot,
                                              .restore = vs_restore,
                                              .rescalable = 1};

static int pass(void *user, const weir_record *in, weir_record *out) {
  (void)user;
  (void)in;
  (void)out;
  return 0;
}

/* A two-phase destination that writes nowhere and cannot move; its
 * identity is its arg. */
static int nd_open(weir_ctx *ctx, void **dest) {
  (void)ctx;
  *dest = &cfg;
  return 0;
}
static int nd_write(weir_ctx *ctx, void *dest, const weir_record *r) {
  (void)ctx;
  (void)dest;
  return sink_process(ctx, r);
}
static int nd_pre_commit(weir_ctx *ctx, void *dest, uint64_t epoch, weir_sink_buf *h) {
  (void)ctx;
  (void)dest;
  (void)epoch;
  weir_sink_buf_u64(h, epoch);
  return 0;
}
static int nd_commit(void *dest, weir_sink_commit *c) {
  (void)dest;
  (void)c;
  return 0;
}
static int nd_identity(const void *arg, char *buf, size_t cap) {
  snprintf(buf, cap, "test:%s", (const char *)arg);
  return 0;
}
static const weir_sink_dest_vt nowhere_vt = {.size = sizeof(weir_sink_dest_vt),
                                             .name = "nowhere",
                                             .open = nd_open,
                                             .write = nd_write,
                                             .pre_commit = nd_pre_commit,
                                             .commit = nd_commit,
                                             .identity = nd_identity,
                                             .move_note = "it is a test that keeps nothing"};

enum { BASE, GAINED, NO_COUNT, TWO_PHASE, VERSIONED };

/* The state version VERSIONED jobs declare for their sink. */
static uint32_t g_sink_version;

/* gen -> key_by -> count -> sink; GAINED: a map "pass" before the sink;
 * NO_COUNT: gen -> key_by -> pass -> sink; TWO_PHASE: the sink is the
 * `nowhere` destination named dest. */
static weir_job *build(int shape, int p, uint64_t rate, const char *dest) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "identity"), 0);
  weir_gen_opts go = {.records = N, .keys = K, .rate = rate};
  weir_stream *s = weir_key_by(weir_gen(job, "gen", &go, p));
  if (shape != NO_COUNT) s = weir_count(s, "count", p);
  if (shape == GAINED || shape == NO_COUNT) s = weir_map(s, "pass", pass, NULL, p);
  int rc = shape == TWO_PHASE   ? weir_sink_twophase(s, "sink", &nowhere_vt, (void *)dest, p)
           : shape == VERSIONED ? weir_sink(s, "sink", &versioned_vt, NULL, p)
                                : weir_sink(s, "sink", &sink_vt, NULL, p);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  if (shape == VERSIONED) cr_assert_eq(weir_operator_state_version(job, "sink", g_sink_version), 0);
  cr_assert_eq(weir_operator_state_version(job, "no such operator", 1), WEIR_ENOENT);
  return job;
}

static weir_run_opts opts(const char *state) {
  weir_run_opts o = {.workers = 2, .state_dir = state, .checkpoint_interval_ms = 20};
  return o;
}

/* Run 1, stopped a third of the way (after checkpoints completed). */
static void run_stopped(const char *state, int shape, const char *dest) {
  memset(&cfg, 0, sizeof cfg);
  cfg.stop_after = N / 3;
  cfg.job = build(shape, 2, N, dest);
  weir_run_opts o = opts(state);
  cr_assert_eq(weir_job_run(cfg.job, &o), 0, "run 1: %s", weir_job_error(cfg.job));
  cr_assert(weir_job_stopped(cfg.job), "run 1 was not stopped");
  weir_job_destroy(cfg.job);
}

/* Restores the latest checkpoint into shape at parallelism p; returns
 * weir_job_run's code (cfg.job stays for the caller). */
static int run_restored(const char *state, int shape, int p, weir_run_opts *o, const char *dest) {
  atomic_store(&cfg.seen, 0);
  cfg.stop_after = 0;
  cfg.job = build(shape, p, 0, dest);
  o->restore = WEIR_RESTORE_LATEST;
  return weir_job_run(cfg.job, o);
}

static void assert_exact(void) {
  for (uint64_t k = 0; k < K; k++)
    cr_assert_eq(atomic_load(&cfg.max[k]), N / K, "key %llu ends at %llu, expected %u", (ull)k,
                 (ull)atomic_load(&cfg.max[k]), N / K);
}

/* weir_run_opts.job_id: a job the run creates gets it (with a state
 * directory, or without one); a restore keeps the checkpoint's id whatever
 * is asked; an id that is not a UUID is refused before anything runs. */
Test(identity, a_given_job_id_names_a_new_job) {
  const char *given = "0123abcd-4567-5890-a1b2-c3d4e5f60718";
  char *dir = th_tmpdir();
  memset(&cfg, 0, sizeof cfg);
  cfg.stop_after = N / 3;
  cfg.job = build(BASE, 2, N, NULL);
  weir_run_opts o = opts(dir);
  o.job_id = given;
  cr_assert_eq(weir_job_run(cfg.job, &o), 0, "%s", weir_job_error(cfg.job));
  cr_assert_str_eq(weir_job_run_info(cfg.job)->job_id, given);
  weir_job_destroy(cfg.job);
  o = opts(dir);
  o.job_id = "ffffffff-ffff-5fff-bfff-ffffffffffff";
  cr_assert_eq(run_restored(dir, BASE, 2, &o, NULL), 0, "%s", weir_job_error(cfg.job));
  cr_assert_gt(weir_job_run_info(cfg.job)->restored_from, 0);
  cr_assert_str_eq(weir_job_run_info(cfg.job)->job_id, given, "a restore took another id");
  weir_job_destroy(cfg.job);
  assert_exact();
  /* Without a state directory. */
  memset(&cfg, 0, sizeof cfg);
  cfg.job = build(BASE, 2, 0, NULL);
  weir_run_opts none = {.workers = 2, .job_id = given};
  cr_assert_eq(weir_job_run(cfg.job, &none), 0, "%s", weir_job_error(cfg.job));
  cr_assert_str_eq(weir_job_run_info(cfg.job)->job_id, given);
  weir_job_destroy(cfg.job);
  /* Not a UUID. */
  cfg.job = build(BASE, 2, 0, NULL);
  weir_run_opts bad = {.workers = 2, .job_id = "job-1"};
  cr_assert_eq(weir_job_run(cfg.job, &bad), WEIR_EINVAL);
  cr_assert(strstr(weir_job_error(cfg.job), "not a UUID"), "%s", weir_job_error(cfg.job));
  weir_job_destroy(cfg.job);
  finish(dir);
}

Test(identity, a_graph_that_gained_a_stateless_operator_restores) {
  char *dir = th_tmpdir();
  run_stopped(dir, BASE, NULL);
  weir_run_opts o = opts(dir);
  int rc = run_restored(dir, GAINED, 2, &o, NULL);
  cr_assert_eq(rc, 0, "%s", weir_job_error(cfg.job));
  cr_assert_gt(weir_job_run_info(cfg.job)->restored_from, 0);
  weir_job_destroy(cfg.job);
  assert_exact();
  finish(dir);
}

/* A state version declared by the job that wrote the state is what the
 * restoring run's operator sees (in open and in restore), whatever version
 * the restoring job declares; with another parallelism too. */
Test(identity, the_restore_sees_the_written_state_version) {
  char *dir = th_tmpdir();
  g_sink_version = 2;
  run_stopped(dir, VERSIONED, NULL);
  g_sink_version = 3;
  weir_run_opts o = opts(dir);
  int rc = run_restored(dir, VERSIONED, 3, &o, NULL);
  cr_assert_eq(rc, 0, "%s", weir_job_error(cfg.job));
  weir_job_destroy(cfg.job);
  assert_exact();
  cr_assert_eq(atomic_load(&cfg.restore_version), 2);
  cr_assert_eq(atomic_load(&cfg.open_version), 3);
  finish(dir);
}

Test(identity, another_parallelism_still_rescales) {
  char *dir = th_tmpdir();
  run_stopped(dir, BASE, NULL);
  weir_run_opts o = opts(dir);
  int rc = run_restored(dir, BASE, 3, &o, NULL);
  cr_assert_eq(rc, 0, "%s", weir_job_error(cfg.job));
  cr_assert_gt(weir_job_run_info(cfg.job)->restored_from, 0);
  weir_job_destroy(cfg.job);
  assert_exact();
  finish(dir);
}

Test(identity, state_of_a_missing_operator_needs_allow_non_restored_state) {
  char *dir = th_tmpdir();
  run_stopped(dir, BASE, NULL);
  weir_run_opts o = opts(dir);
  int rc = run_restored(dir, NO_COUNT, 2, &o, NULL);
  cr_assert_eq(rc, WEIR_EMISMATCH, "%d: %s", rc, weir_job_error(cfg.job));
  const char *e = weir_job_error(cfg.job);
  const char *want[] = {"holds state of operators", "'count'", "--allow-non-restored-state",
                        "--fresh", NULL};
  for (int i = 0; want[i]; i++) cr_assert(strstr(e, want[i]), "no \"%s\" in: %s", want[i], e);
  cr_assert_eq(weir_job_run_info(cfg.job)->restored_from, 0);
  weir_job_destroy(cfg.job);
  cr_assert_eq(atomic_load(&cfg.seen), 0, "the refused run ran");

  o = opts(dir);
  o.allow_non_restored_state = 1;
  rc = run_restored(dir, NO_COUNT, 2, &o, NULL);
  cr_assert_eq(rc, 0, "%s", weir_job_error(cfg.job));
  cr_assert_gt(weir_job_run_info(cfg.job)->restored_from, 0);
  weir_job_destroy(cfg.job);
  finish(dir);
}

Test(identity, a_sink_that_cannot_move_is_refused_even_when_allowed) {
  char *dir = th_tmpdir();
  run_stopped(dir, TWO_PHASE, "a");
  weir_run_opts o = opts(dir);
  int rc = run_restored(dir, TWO_PHASE, 2, &o, "b");
  cr_assert_eq(rc, WEIR_EMISMATCH, "%d: %s", rc, weir_job_error(cfg.job));
  const char *e = weir_job_error(cfg.job);
  cr_assert(strstr(e, "writing to test:a,") && strstr(e, "writes to test:b:") &&
                strstr(e, "--allow-sink-change (which this sink refuses: it is a test that keeps "
                          "nothing)"),
            "%s", e);
  weir_job_destroy(cfg.job);

  o = opts(dir);
  o.allow_sink_change = 1;
  rc = run_restored(dir, TWO_PHASE, 2, &o, "b");
  cr_assert_eq(rc, WEIR_EMISMATCH, "%d: %s", rc, weir_job_error(cfg.job));
  e = weir_job_error(cfg.job);
  cr_assert(strstr(e, "cannot move from test:a") && strstr(e, "to test:b") &&
                strstr(e, "it is a test that keeps nothing"),
            "%s", e);
  weir_job_destroy(cfg.job);
  cr_assert_eq(atomic_load(&cfg.seen), 0, "a refused run ran");

  /* Its own destination restores. */
  o = opts(dir);
  rc = run_restored(dir, TWO_PHASE, 2, &o, "a");
  cr_assert_eq(rc, 0, "%s", weir_job_error(cfg.job));
  weir_job_destroy(cfg.job);
  finish(dir);
}
