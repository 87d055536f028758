/* test_rescale.c: restoring a checkpoint with another parallelism
 * (engine/src/rescale.c), in process.
 *
 * The job: a generator (N records over K keys) -> key_by -> two keyed
 * counters, one in the u64 map (weir_count) and one in the byte-string map
 * (a test operator keyed by the key's decimal text) -> a sink per counter
 * that keeps the largest count seen per key. A first run at parallelism P1
 * is stopped part-way (the sink asks for a stop after a third of the
 * records); a second run restores it at P2 (a checkpoint taken before the
 * stop, or the one the stop took) and runs to the end. With state and
 * source positions redistributed right, each key's largest count over both
 * runs is exactly N/K in both counters: a key whose state landed on the
 * wrong subtask starts again from 1 and ends low, a split resumed twice or
 * not at all ends high or low. Also: another number of key groups; an operator with
 * its own (blob) state is refused by name; so is a source whose splits
 * depend on the parallelism.
 */
#include <criterion/criterion.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "base/alloc.h"
#include "weir/operators.h"
#include "snapshot/store.h"
#include "weir/weir.h"

#define N 240000u
#define K 3000u

typedef struct run_cfg {
  _Atomic uint64_t max[2][K]; /* per counter, per key: the largest count */
  _Atomic uint64_t seen;      /* records at the sinks */
  uint64_t stop_after;        /* ask for a stop after this many (0 = never) */
  uint64_t rate;              /* the generator's records/s (0: as fast as it can) */
  int any_key;                /* keys beyond K are fine (a file source) */
  weir_job *job;
} run_cfg;

static run_cfg cfg;

static void note_max(_Atomic uint64_t *m, uint64_t v) {
  uint64_t cur = atomic_load(m);
  while (v > cur && !atomic_compare_exchange_weak(m, &cur, v)) {
  }
}

static int sink_process(weir_ctx *ctx, const weir_record *r) {
  int which = *(const int *)weir_ctx_arg(ctx);
  uint64_t count = 0;
  cr_assert_eq(r->len, 8);
  memcpy(&count, r->payload, 8);
  if (r->key < K)
    note_max(&cfg.max[which][r->key], count);
  else if (!cfg.any_key)
    return weir_ctx_fail(ctx, WEIR_EINVAL, "key %llu out of range", (unsigned long long)r->key);
  uint64_t n = atomic_fetch_add(&cfg.seen, 1) + 1;
  if (cfg.stop_after && n == cfg.stop_after) weir_job_stop(cfg.job);
  return 0;
}
static const weir_operator_vt sink_vt = {
    .size = sizeof(weir_operator_vt), .name = "max", .process = sink_process};
static const int which0 = 0, which1 = 1;

/* A counter in the byte-string map, keyed by the key's decimal text. */
static int bcount_process(weir_ctx *ctx, const weir_record *r) {
  char k[24];
  int kl = snprintf(k, sizeof k, "%llu", (unsigned long long)r->key);
  const void *v = NULL;
  size_t vl = 0;
  uint64_t c = 0;
  int rc = weir_state_get_bytes(ctx, k, (size_t)kl, &v, &vl);
  if (rc < 0) return rc;
  if (rc == 1) {
    cr_assert_eq(vl, 8);
    memcpy(&c, v, 8);
  }
  c++;
  rc = weir_state_put_bytes(ctx, k, (size_t)kl, &c, 8);
  if (rc < 0) return rc;
  return weir_emit_u64(ctx, r->key, c);
}
static const weir_operator_vt bcount_vt = {
    .size = sizeof(weir_operator_vt), .name = "bcount", .process = bcount_process};

/* An operator with its own state (a blob): not redistributable. */
static int blob_process(weir_ctx *ctx, const weir_record *r) {
  return weir_emit_record(ctx, r);
}
static int blob_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)ctx;
  return weir_snapshot_write(w, &id, sizeof id);
}
static int blob_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  (void)ctx;
  (void)r;
  return 0;
}
static const weir_operator_vt blob_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "blobby",
                                         .process = blob_process,
                                         .snapshot = blob_snapshot,
                                         .restore = blob_restore};

typedef struct job_shape {
  int p;            /* parallelism of every operator */
  int max_par;      /* key groups (0 = default) */
  int with_blob;    /* a blob-state operator after the generator */
  int file_source;  /* a line file source instead of the generator */
  const char *path; /* its file */
} job_shape;

static weir_job *build(job_shape sh) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "rescale"), 0);
  weir_stream *src;
  if (sh.file_source) {
    weir_file_source_opts fo = {0};
    src = weir_file_source(job, "lines", sh.path, &fo, sh.p);
  } else {
    weir_gen_opts go = {.records = N, .keys = K, .rate = cfg.rate};
    src = weir_gen(job, "gen", &go, sh.p);
  }
  if (sh.with_blob) src = weir_process(src, "blobby", &blob_vt, NULL, sh.p);
  weir_stream *keyed = weir_key_by(src);
  cr_assert_eq(
      weir_sink(weir_count(keyed, "count", sh.p), "max-u64", &sink_vt, (void *)&which0, sh.p), 0,
      "%s", weir_job_error(job));
  cr_assert_eq(weir_sink(weir_process(keyed, "bcount", &bcount_vt, NULL, sh.p), "max-bytes",
                         &sink_vt, (void *)&which1, sh.p),
               0, "%s", weir_job_error(job));
  return job;
}

static weir_run_opts opts(const char *state, job_shape sh) {
  weir_run_opts o = {.workers = 2,
                     .max_parallelism = sh.max_par,
                     .state_dir = state,
                     .checkpoint_interval_ms = 5,
                     .retain = 1000};
  return o;
}

/* The completed checkpoints of the store in state: one from the middle
 * (taken while the job ran: keyed state and positions part-way) and the
 * last (taken by the stop). */
static void list_ckpts(const char *state, uint64_t *mid, uint64_t *last, size_t *n) {
  weir_store *st = NULL;
  weir_store_opts so = {.read_only = 1};
  cr_assert_eq(weir_store_open(&st, state, &so), 0);
  weir_store_ckpt *list = NULL;
  cr_assert_eq(weir_store_list(st, &list, n), 0);
  cr_assert_gt(*n, 0, "no checkpoint completed");
  *mid = list[*n / 2].id;
  *last = list[*n - 1].id;
  weir_free(list);
  weir_store_close(st);
}

/* Run 1 at a (stopped after a third), run 2 at b restored from a checkpoint
 * in the middle of run 1 or the last one, to the end: exact counts. */
static void rescale(job_shape a, job_shape b, int from_mid) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);

  memset(&cfg, 0, sizeof cfg);
  cfg.stop_after = N / 2; /* two sinks: a quarter of the records each */
  /* About a second for all the records, so that the stop, asked for a
   * quarter of the way, lands long before the generator is done. */
  cfg.rate = N;
  cfg.job = build(a);
  cfg.rate = 0;
  weir_run_opts o = opts(state, a);
  cr_assert_eq(weir_job_run(cfg.job, &o), 0, "run 1: %s", weir_job_error(cfg.job));
  cr_assert(weir_job_stopped(cfg.job), "run 1 was not stopped");
  weir_job_destroy(cfg.job);
  uint64_t mid, last;
  size_t n;
  list_ckpts(state, &mid, &last, &n);

  /* The largest counts carry over: a key that ended before the restore
   * point sends nothing more; one that did not must reach N/K in run 2,
   * which it cannot if its state went to the wrong subtask (it would
   * restart from 1) or its records are replayed twice or not at all. */
  uint64_t before = 0;
  for (uint64_t k = 0; k < K; k++) before += atomic_load(&cfg.max[0][k]) == N / K;
  cr_assert_lt(before, K / 10, "%llu of %u keys ended in run 1: too few left to check",
               (unsigned long long)before, K);
  atomic_store(&cfg.seen, 0);
  cfg.stop_after = 0;
  cfg.job = build(b);
  o = opts(state, b);
  o.restore = WEIR_RESTORE_ID;
  o.restore_id = from_mid ? mid : last;
  int rc = weir_job_run(cfg.job, &o);
  cr_assert_eq(rc, 0, "P %d -> %d from checkpoint %llu: %s", a.p, b.p,
               (unsigned long long)o.restore_id, weir_job_error(cfg.job));
  cr_assert_not(weir_job_stopped(cfg.job));
  cr_assert_eq(weir_job_run_info(cfg.job)->restored_from, o.restore_id);
  cr_assert_gt(atomic_load(&cfg.seen), 0, "run 2 emitted nothing");
  weir_job_destroy(cfg.job);
  for (int w = 0; w < 2; w++)
    for (uint64_t k = 0; k < K; k++)
      cr_assert_eq(atomic_load(&cfg.max[w][k]), N / K,
                   "P %d -> %d (key groups %d -> %d) from checkpoint %llu of %zu: %s counter, "
                   "key %llu ends at %llu, expected %u",
                   a.p, b.p, a.max_par, b.max_par, (unsigned long long)o.restore_id, n,
                   w ? "byte-string" : "u64", (unsigned long long)k,
                   (unsigned long long)atomic_load(&cfg.max[w][k]), N / K);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

TestSuite(rescale, .timeout = 120);

Test(rescale, two_to_three_from_the_stop) {
  rescale((job_shape){.p = 2}, (job_shape){.p = 3}, 0);
}
Test(rescale, two_to_three_from_a_checkpoint_mid_run) {
  rescale((job_shape){.p = 2}, (job_shape){.p = 3}, 1);
}
Test(rescale, three_to_one) {
  rescale((job_shape){.p = 3}, (job_shape){.p = 1}, 1);
}
Test(rescale, one_to_four) {
  rescale((job_shape){.p = 1}, (job_shape){.p = 4}, 0);
}
Test(rescale, same_parallelism_other_key_groups) {
  rescale((job_shape){.p = 2, .max_par = 128}, (job_shape){.p = 2, .max_par = 40}, 1);
}
Test(rescale, same_parallelism_unchanged) {
  rescale((job_shape){.p = 2}, (job_shape){.p = 2}, 1);
}

/* Run 1 at a, stopped; run 2 at b must be refused naming `who`. */
static void refused(job_shape a, job_shape b, const char *who) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  memset(&cfg, 0, sizeof cfg);
  cfg.stop_after = 2 * N / 3;
  cfg.job = build(a);
  weir_run_opts o = opts(state, a);
  cr_assert_eq(weir_job_run(cfg.job, &o), 0, "run 1: %s", weir_job_error(cfg.job));
  weir_job_destroy(cfg.job);
  memset(&cfg, 0, sizeof cfg);
  cfg.job = build(b);
  o = opts(state, b);
  o.restore = WEIR_RESTORE_LATEST;
  int rc = weir_job_run(cfg.job, &o);
  cr_assert_eq(rc, WEIR_EPLAN, "rc %d: %s", rc, weir_job_error(cfg.job));
  const char *msg = weir_job_error(cfg.job);
  cr_assert(strstr(msg, who) && strstr(msg, "parallelism"), "unclear refusal: %s", msg);
  weir_job_destroy(cfg.job);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

Test(rescale, operator_with_own_state_is_refused) {
  refused((job_shape){.p = 2, .with_blob = 1}, (job_shape){.p = 3, .with_blob = 1}, "'blobby'");
}

Test(rescale, source_with_parallelism_bound_splits_is_refused) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char path[600];
  snprintf(path, sizeof path, "%s/lines.txt", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < 300000; i++) fprintf(f, "line %d\n", i);
  fclose(f);
  /* Stopped part-way: its last checkpoint holds the positions of a P = 2
   * file source, whose byte-range splits depend on P. */
  job_shape a = {.p = 2, .file_source = 1, .path = path};
  job_shape b = {.p = 3, .file_source = 1, .path = path};
  char state[700];
  snprintf(state, sizeof state, "%s/state", dir);
  memset(&cfg, 0, sizeof cfg);
  cfg.any_key = 1;
  cfg.stop_after = 20000;
  cfg.job = build(a);
  weir_run_opts o = opts(state, a);
  cr_assert_eq(weir_job_run(cfg.job, &o), 0, "run 1: %s", weir_job_error(cfg.job));
  weir_job_destroy(cfg.job);
  memset(&cfg, 0, sizeof cfg);
  cfg.any_key = 1;
  cfg.job = build(b);
  o = opts(state, b);
  o.restore = WEIR_RESTORE_LATEST;
  int rc = weir_job_run(cfg.job, &o);
  const char *msg = weir_job_error(cfg.job);
  if (rc == 0 && weir_job_run_info(cfg.job)->already_finished) {
    cr_skip_test("the file job finished before its stop: nothing to restore");
  }
  cr_assert_eq(rc, WEIR_EPLAN, "rc %d: %s", rc, msg);
  cr_assert(strstr(msg, "'lines'") && strstr(msg, "parallelism 2"), "unclear refusal: %s", msg);
  weir_job_destroy(cfg.job);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}
