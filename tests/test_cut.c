/* test_cut.c: cutting a job's graph into stages (engine/src/cut.c;
 * weir_job_stages, weir_job_cut; docs/scale-out.md §1).
 *
 * Covers: stage numbering and the fingerprint (the same graph built twice
 * has one fingerprint, another graph another); each stage of
 * gen -> map -> key_by -> count -> sink run alone with what the cut puts
 * at its edges, and together equal to the whole job: stage 0 sends every
 * generated record (mapped) to its out sink, stage 1 counts exactly what
 * its in source gives; stage 0 cut into tasks, each run alone making its
 * split of the sources, as subtask t of the tasks; the refusals: a loop, two key-by inputs into one
 * stage, an input across a non-key-by edge from an earlier stage, an
 * event-time operator outside stage 0, a stage out of range, a missing in
 * or out, a second cut.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "weir/job.h"
#include "weir/operators.h"
#include "weir/weir.h"

#define N 5000
#define KEYS 37

typedef struct gen {
  uint64_t n; /* records per subtask */
  uint64_t at[8];
} gen;

static int gen_run(weir_ctx *ctx, uint32_t budget) {
  gen *g = weir_ctx_arg(ctx);
  uint32_t s = weir_ctx_subtask(ctx), p = weir_ctx_parallelism(ctx);
  for (uint32_t i = 0; i < budget && g->at[s] < g->n; i++, g->at[s]++) {
    uint64_t v = g->at[s] * p + s;
    int rc = weir_emit_u64(ctx, v % KEYS, v);
    if (rc < 0) return rc;
  }
  return g->at[s] < g->n ? 0 : WEIR_SOURCE_DONE;
}

static const weir_source_vt gen_vt = {.size = sizeof gen_vt, .name = "gen", .run = gen_run};

/* A sink that keeps (key, payload) of every record. */
typedef struct bag {
  pthread_mutex_t mu;
  uint64_t n;
  uint64_t keys[N * 2], vals[N * 2];
} bag;

static int bag_process(weir_ctx *ctx, const weir_record *in) {
  bag *b = weir_ctx_arg(ctx);
  pthread_mutex_lock(&b->mu);
  cr_assert_lt(b->n, N * 2);
  b->keys[b->n] = in->key;
  b->vals[b->n++] = weir_payload_u64(in);
  pthread_mutex_unlock(&b->mu);
  return 0;
}

static const weir_operator_vt bag_vt = {
    .size = sizeof bag_vt, .name = "bag", .process = bag_process};

static int plus_one(void *user, const weir_record *in, weir_record *out) {
  (void)user;
  (void)in;
  (void)out;
  return 0;
}

static gen g_gen;
static bag g_out, g_in_fed;

/* gen -> map -> key_by -> count -> bag */
static weir_job *counter(bag *sink) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "cut"), 0);
  weir_stream *s = weir_source(job, "gen", &gen_vt, &g_gen, 2);
  s = weir_map(s, "map", plus_one, NULL, 2);
  s = weir_count(weir_key_by(s), "count", 2);
  cr_assert_eq(weir_sink(s, "sink", &bag_vt, sink, 2), 0);
  return job;
}

static void reset(void) {
  memset(&g_gen, 0, sizeof g_gen);
  g_gen.n = N / 2;
  static bag zero;
  g_out = zero;
  g_in_fed = zero;
  pthread_mutex_init(&g_out.mu, NULL);
  pthread_mutex_init(&g_in_fed.mu, NULL);
}

static int run(weir_job *job) {
  weir_run_opts o = {.workers = 2};
  return weir_job_run(job, &o);
}

Test(cut, stages_and_fingerprint) {
  reset();
  weir_job *a = counter(&g_out), *b = counter(&g_out);
  int na = 0, nb = 0;
  uint64_t fa = 0, fb = 0;
  cr_assert_eq(weir_job_stages(a, &na, &fa), 0);
  cr_assert_eq(weir_job_stages(b, &nb, &fb), 0);
  cr_assert_eq(na, 2);
  cr_assert_eq(nb, 2);
  cr_assert_eq(fa, fb);
  weir_job *c = NULL;
  cr_assert_eq(weir_job_create(&c, "cut"), 0);
  weir_stream *s = weir_source(c, "gen", &gen_vt, &g_gen, 2);
  cr_assert_eq(weir_sink(weir_count(weir_key_by(s), "count", 2), "sink", &bag_vt, &g_out, 2), 0);
  int nc = 0;
  uint64_t fc = 0;
  cr_assert_eq(weir_job_stages(c, &nc, &fc), 0);
  cr_assert_eq(nc, 2);
  cr_assert_neq(fc, fa);
  weir_job_destroy(a);
  weir_job_destroy(b);
  weir_job_destroy(c);
}

/* Stage 0's out: every generated record, keyed, to one bag. */
static int out_to_bag(weir_stream *s, void *user) {
  return weir_sink(s, "to-next", &bag_vt, user, 0);
}

Test(cut, stage0_sends_every_record_out) {
  reset();
  weir_job *job = counter(&g_out);
  weir_stage_cut cut = {.stage = 0, .out = out_to_bag, .user = &g_in_fed};
  cr_assert_eq(weir_job_cut(job, &cut), 0, "%s", weir_job_error(job));
  cr_assert_eq(run(job), 0, "%s", weir_job_error(job));
  cr_assert_eq(g_in_fed.n, N, "stage 0 sent %llu of %d", (unsigned long long)g_in_fed.n, N);
  cr_assert_eq(g_out.n, 0, "the count of stage 1 ran in stage 0");
  uint64_t sum = 0;
  for (uint64_t i = 0; i < g_in_fed.n; i++) {
    cr_assert_eq(g_in_fed.keys[i], g_in_fed.vals[i] % KEYS);
    sum += g_in_fed.vals[i];
  }
  cr_assert_eq(sum, (uint64_t)N * (N - 1) / 2);
  /* A second cut is refused. */
  cr_assert_eq(weir_job_cut(job, &cut), WEIR_ESTATE);
  weir_job_destroy(job);
}

/* Stage 1's in: the records stage 0 sent, replayed. */
typedef struct replay {
  const bag *from;
  uint64_t at[8];
} replay;
static replay g_replay;

static int replay_run(weir_ctx *ctx, uint32_t budget) {
  uint32_t s = weir_ctx_subtask(ctx), p = weir_ctx_parallelism(ctx);
  replay *r = &g_replay;
  if (!r->at[s]) r->at[s] = s + 1; /* 1-based: record i = at - 1 */
  for (uint32_t i = 0; i < budget && r->at[s] - 1 < r->from->n; i++, r->at[s] += p) {
    uint64_t k = r->at[s] - 1;
    int rc = weir_emit_u64(ctx, r->from->keys[k], r->from->vals[k]);
    if (rc < 0) return rc;
  }
  return r->at[s] - 1 < r->from->n ? 0 : WEIR_SOURCE_DONE;
}
static const weir_source_vt replay_vt = {
    .size = sizeof replay_vt, .name = "replay", .run = replay_run};

static weir_stream *in_replay(weir_job *job, void *user) {
  (void)user;
  return weir_source(job, "from-previous", &replay_vt, NULL, 2);
}

Test(cut, stage1_counts_what_its_input_gives) {
  reset();
  /* Stage 0 first, into g_in_fed. */
  weir_job *job = counter(&g_out);
  weir_stage_cut c0 = {.stage = 0, .out = out_to_bag, .user = &g_in_fed};
  cr_assert_eq(weir_job_cut(job, &c0), 0);
  cr_assert_eq(run(job), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  memset(g_gen.at, 0, sizeof g_gen.at);
  memset(&g_replay, 0, sizeof g_replay);
  g_replay.from = &g_in_fed;
  job = counter(&g_out);
  weir_stage_cut c1 = {.stage = 1, .in = in_replay};
  cr_assert_eq(weir_job_cut(job, &c1), 0, "%s", weir_job_error(job));
  cr_assert_eq(run(job), 0, "%s", weir_job_error(job));
  cr_assert_eq(g_gen.at[0] + g_gen.at[1], 0, "stage 0's generator ran in stage 1");
  /* The count saw each key n_k times: its largest count per key is n_k. */
  uint64_t maxc[KEYS] = {0}, total = 0;
  for (uint64_t i = 0; i < g_out.n; i++)
    if (g_out.vals[i] > maxc[g_out.keys[i]]) maxc[g_out.keys[i]] = g_out.vals[i];
  for (int k = 0; k < KEYS; k++) {
    uint64_t want = N / KEYS + ((uint64_t)k < N % KEYS);
    cr_assert_eq(maxc[k], want, "key %d: %llu, expected %llu", k, (unsigned long long)maxc[k],
                 (unsigned long long)want);
    total += maxc[k];
  }
  cr_assert_eq(total, N);
  cr_assert_eq(g_out.n, N);
  weir_job_destroy(job);
}

/* Stage 0's out, seen from one task of it: the subtask and parallelism its
 * sink reports, besides the records. */
static uint32_t g_seen_sub, g_seen_par;
static int probe_process(weir_ctx *ctx, const weir_record *in) {
  g_seen_sub = weir_ctx_subtask(ctx);
  g_seen_par = weir_ctx_parallelism(ctx);
  return bag_process(ctx, in);
}
static const weir_operator_vt probe_vt = {
    .size = sizeof probe_vt, .name = "probe", .process = probe_process};
static int out_to_probe(weir_stream *s, void *user) {
  return weir_sink(s, "to-next", &probe_vt, user, 0);
}

/* Stage 0 cut into 3 tasks, each run alone: task t runs one subtask of each
 * operator, which reports itself as subtask t of 3, so the generator
 * makes its split t (values = t mod 3); the three runs together make each
 * of the 3 splits once. */
Test(cut, tasks_split_a_stage) {
  reset();
  uint64_t total = 0;
  for (int t = 0; t < 3; t++) {
    memset(g_gen.at, 0, sizeof g_gen.at);
    static bag zero;
    g_in_fed = zero;
    pthread_mutex_init(&g_in_fed.mu, NULL);
    g_seen_sub = g_seen_par = 99;
    weir_job *job = counter(&g_out);
    weir_stage_cut c = {.stage = 0, .task = t, .tasks = 3, .out = out_to_probe, .user = &g_in_fed};
    cr_assert_eq(weir_job_cut(job, &c), 0, "%s", weir_job_error(job));
    cr_assert_eq(run(job), 0, "%s", weir_job_error(job));
    cr_assert_eq(g_seen_sub, (uint32_t)t);
    cr_assert_eq(g_seen_par, 3);
    cr_assert_eq(g_in_fed.n, N / 2, "task %d sent %llu records", t, (unsigned long long)g_in_fed.n);
    for (uint64_t i = 0; i < g_in_fed.n; i++) {
      cr_assert_eq(g_in_fed.vals[i] % 3, (uint64_t)t, "task %d made %llu", t,
                   (unsigned long long)g_in_fed.vals[i]);
      total += g_in_fed.vals[i];
    }
    weir_job_destroy(job);
  }
  /* 0 .. 3N/2 - 1, each once. */
  cr_assert_eq(total, (uint64_t)(3 * N / 2) * (3 * N / 2 - 1) / 2);
  cr_assert_eq(g_out.n, 0, "the count of stage 1 ran in stage 0");
  weir_job *job = counter(&g_out);
  weir_stage_cut bad = {.stage = 0, .task = 3, .tasks = 3, .out = out_to_probe, .user = &g_in_fed};
  cr_assert_eq(weir_job_cut(job, &bad), WEIR_EPLAN);
  cr_assert(strstr(weir_job_error(job), "task 3 of 3"), "%s", weir_job_error(job));
  weir_job_destroy(job);
}

static void refused(weir_job *job, const weir_stage_cut *cut, const char *needle) {
  int rc = weir_job_cut(job, cut);
  cr_assert_eq(rc, WEIR_EPLAN, "rc %d (%s)", rc, weir_job_error(job));
  cr_assert(strstr(weir_job_error(job), needle), "message: %s (expected '%s')", weir_job_error(job),
            needle);
  weir_job_destroy(job);
}

static int pass2(weir_ctx *ctx, const weir_record *in) {
  return weir_emit(ctx, in->key, in->payload, in->len);
}
static const weir_operator_vt two_vt = {
    .size = sizeof two_vt, .name = "two", .process = pass2, .process2 = pass2};

Test(cut, refusals) {
  reset();
  weir_stage_cut c1 = {.stage = 1, .in = in_replay, .out = out_to_bag, .user = &g_in_fed};

  /* Two key-by inputs into stage 1. */
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "x"), 0);
  weir_stream *a = weir_source(job, "a", &gen_vt, &g_gen, 1);
  weir_stream *b = weir_source(job, "b", &gen_vt, &g_gen, 1);
  weir_stream *j = weir_connect(weir_key_by(a), weir_key_by(b), "join", &two_vt, NULL, 1, NULL);
  cr_assert_eq(weir_sink(j, "sink", &bag_vt, &g_out, 1), 0);
  refused(job, &c1, "two key-by inputs");

  /* A forward edge from stage 0 into stage 1. */
  cr_assert_eq(weir_job_create(&job, "x"), 0);
  a = weir_source(job, "a", &gen_vt, &g_gen, 1);
  weir_stream *k = weir_count(weir_key_by(a), "count", 1);
  j = weir_connect(k, weir_broadcast(weir_source(job, "b", &gen_vt, &g_gen, 1)), "join", &two_vt,
                   NULL, 1, NULL);
  cr_assert_eq(weir_sink(j, "sink", &bag_vt, &g_out, 1), 0);
  refused(job, &c1, "non-key-by");

  /* Stage out of range, missing in. */
  job = counter(&g_out);
  weir_stage_cut c5 = {.stage = 5, .in = in_replay};
  refused(job, &c5, "stages 0 to 1");
  job = counter(&g_out);
  weir_stage_cut nin = {.stage = 1};
  refused(job, &nin, "needs a source");
  job = counter(&g_out);
  weir_stage_cut nout = {.stage = 0};
  refused(job, &nout, "needs a sink");

  /* A loop. */
  cr_assert_eq(weir_job_create(&job, "x"), 0);
  weir_stream *body = NULL;
  weir_iteration *it = weir_iterate(weir_source(job, "a", &gen_vt, &g_gen, 1), "head", 1, &body);
  weir_stream *m = weir_map(body, "step", plus_one, NULL, 1);
  cr_assert_eq(weir_iteration_close(it, m), 0);
  cr_assert_eq(weir_sink(m, "sink", &bag_vt, &g_out, 1), 0);
  refused(job, &c1, "loop");
}
