/* test_emit.c: the timestamps and ids of records operators emit outside
 * process (include/weir/job.h, the callbacks' comment): finish's records
 * get a lineage per subtask, stable on replay, and the end of event time;
 * poll's get ids unique within the run; weir_emit_at sets a timestamp;
 * emitting from open fails the job with a message that says why. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/weir.h"

#define CAP 4096

/* A sink that keeps every record's key, ts and id. */
typedef struct {
  pthread_mutex_t mu;
  uint32_t n;
  uint64_t keys[CAP], ids[CAP];
  int64_t ts[CAP];
} seen;

static int keep(weir_ctx *ctx, const weir_record *r) {
  seen *s = weir_ctx_arg(ctx);
  pthread_mutex_lock(&s->mu);
  if (s->n < CAP) {
    s->keys[s->n] = r->key;
    s->ids[s->n] = r->id;
    s->ts[s->n++] = r->ts;
  }
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static const weir_operator_vt keep_vt = {
    .size = sizeof(weir_operator_vt), .name = "keep", .process = keep};

static void seen_init(seen *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
}

static int distinct_ids(const seen *s) {
  for (uint32_t i = 0; i < s->n; i++)
    for (uint32_t j = i + 1; j < s->n; j++)
      if (s->ids[i] == s->ids[j]) return 0;
  return 1;
}

/* n records with ts = 1000 + i. */
static int src_run(weir_ctx *ctx, uint32_t budget) {
  uint64_t *next = weir_ctx_user(ctx), n = *(uint64_t *)weir_ctx_arg(ctx);
  for (uint32_t k = 0; k < budget && *next < n; k++, (*next)++) {
    weir_record r = {.key = *next,
                     .ts = 1000 + (int64_t)*next,
                     .id = weir_source_record_id(ctx, weir_ctx_subtask(ctx), *next)};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
  }
  return *next == n ? WEIR_SOURCE_DONE : WEIR_SOURCE_MORE;
}

static int src_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(uint64_t)));
  return 0;
}

static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "src",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close};

static weir_job *new_job(const char *name) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, name), 0);
  return job;
}

/* ---- finish ------------------------------------------------------------------ */

static int nothing(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  (void)r;
  return 0;
}

static int finish_two(weir_ctx *ctx) {
  int rc = weir_emit_u64(ctx, weir_ctx_subtask(ctx), 1);
  return rc ? rc : weir_emit_u64(ctx, weir_ctx_subtask(ctx), 2);
}

static const weir_operator_vt finisher_vt = {
    .size = sizeof(weir_operator_vt), .name = "fin", .process = nothing, .finish = finish_two};

static void run_finish(seen *s) {
  static uint64_t n = 100;
  seen_init(s);
  weir_job *job = new_job("finish_ids");
  weir_stream *st = weir_source(job, "src", &src_vt, &n, 1);
  st = weir_process(weir_key_by(st), "fin", &finisher_vt, NULL, 3);
  cr_assert_eq(weir_sink(weir_rebalance(st), "keep", &keep_vt, s, 1), 0);
  weir_run_opts o = {.workers = 2};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
}

Test(emit, finish_records_have_a_lineage_per_subtask) {
  seen *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  run_finish(a);
  cr_assert_eq(a->n, 6);
  cr_assert(distinct_ids(a), "two subtasks' finish records share an id");
  for (uint32_t i = 0; i < a->n; i++) cr_assert_eq(a->ts[i], WEIR_WATERMARK_MAX);
  /* A second run (a replay) gives each subtask's records the same ids. */
  run_finish(b);
  cr_assert_eq(b->n, 6);
  for (uint32_t i = 0; i < a->n; i++) {
    int found = 0;
    for (uint32_t j = 0; j < b->n; j++) found |= a->ids[i] == b->ids[j];
    cr_assert(found, "finish record %u: id not the same in the replay", i);
  }
  free(a);
  free(b);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- poll -------------------------------------------------------------------- */

typedef struct {
  int polls;
} poller;

static int poll_emit(weir_ctx *ctx) {
  poller *p = weir_ctx_user(ctx);
  if (p->polls < 20) {
    p->polls++;
    int rc = weir_emit_u64(ctx, (uint64_t)p->polls, 0);
    return rc ? rc : weir_emit_u64(ctx, (uint64_t)p->polls, 1);
  }
  return WEIR_POLL_IDLE;
}

static int poller_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(poller)));
  return 0;
}

static void poller_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

static const weir_operator_vt poller_vt = {.size = sizeof(weir_operator_vt),
                                           .name = "poller",
                                           .open = poller_open,
                                           .process = nothing,
                                           .poll = poll_emit,
                                           .close = poller_close};

Test(emit, poll_records_have_ids_unique_in_the_run) {
  static uint64_t n = 5000;
  seen *s = malloc(sizeof *s);
  seen_init(s);
  weir_job *job = new_job("poll_ids");
  weir_stream *st = weir_source(job, "src", &src_vt, &n, 1);
  st = weir_process(weir_rebalance(st), "poller", &poller_vt, NULL, 2);
  cr_assert_eq(weir_sink(weir_rebalance(st), "keep", &keep_vt, s, 1), 0);
  weir_run_opts o = {.workers = 2, .batch_records = 64};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_geq(s->n, 4, "only %u records from poll", s->n);
  cr_assert(distinct_ids(s), "records emitted from poll share an id");
  for (uint32_t i = 0; i < s->n; i++) cr_assert_eq(s->ts[i], 0, "no event time: ts 0");
  weir_job_destroy(job);
  free(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- weir_emit_at -------------------------------------------------------------- */

static int tenfold(weir_ctx *ctx, const weir_record *r) {
  return weir_emit_at(ctx, r->key, r->ts * 10, NULL, 0);
}

static const weir_operator_vt tenfold_vt = {
    .size = sizeof(weir_operator_vt), .name = "tenfold", .process = tenfold};

Test(emit, emit_at_sets_the_timestamp) {
  static uint64_t n = 300;
  seen *s = malloc(sizeof *s);
  seen_init(s);
  weir_job *job = new_job("emit_at");
  weir_stream *st = weir_source(job, "src", &src_vt, &n, 1);
  st = weir_process(st, "tenfold", &tenfold_vt, NULL, 1);
  cr_assert_eq(weir_sink(st, "keep", &keep_vt, s, 1), 0);
  cr_assert_eq(weir_job_run(job, NULL), 0, "%s", weir_job_error(job));
  cr_assert_eq(s->n, 300);
  for (uint32_t i = 0; i < s->n; i++)
    cr_assert_eq(s->ts[i], (1000 + (int64_t)s->keys[i]) * 10, "record %u", i);
  cr_assert(distinct_ids(s));
  weir_job_destroy(job);
  free(s);
}

/* ---- open -------------------------------------------------------------------- */

static int open_emits(weir_ctx *ctx) {
  (void)weir_emit_u64(ctx, 1, 1); /* the error is ignored: the job fails anyway */
  return 0;
}

static const weir_operator_vt open_emits_vt = {
    .size = sizeof(weir_operator_vt), .name = "eager", .open = open_emits, .process = nothing};

Test(emit, emitting_from_open_fails_the_job) {
  static uint64_t n = 10;
  seen *s = malloc(sizeof *s);
  seen_init(s);
  weir_job *job = new_job("open_emits");
  weir_stream *st = weir_source(job, "src", &src_vt, &n, 1);
  st = weir_process(st, "eager", &open_emits_vt, NULL, 1);
  cr_assert_eq(weir_sink(st, "keep", &keep_vt, s, 1), 0);
  cr_assert_eq(weir_job_run(job, NULL), WEIR_ESTATE);
  const char *e = weir_job_error(job);
  cr_assert(strstr(e, "'eager'") && strstr(e, "emitting from open"), "%s", e);
  cr_assert_eq(s->n, 0);
  weir_job_destroy(job);
  free(s);
  cr_assert_eq(th_leak_check(), 0);
}
