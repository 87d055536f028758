/* test_state_keys.c: what a u64 state key may be (include/weir/job.h,
 * "Managed keyed state"): the key of the record it belongs to, enforced
 * when a key is inserted, in process (any parallelism) and in
 * process_batch (the owning subtask); and visiting the byte-string map
 * with the record keys its entries belong to. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/weir.h"

static int src_run(weir_ctx *ctx, uint32_t budget) {
  uint64_t *next = weir_ctx_user(ctx), n = *(uint64_t *)weir_ctx_arg(ctx);
  for (uint32_t k = 0; k < budget && *next < n; k++, (*next)++) {
    weir_record r = {.key = *next % 50,
                     .ts = (int64_t)*next,
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

/* Counts per record key, and per (key, key + 1000): a composite key. */
static int composite(weir_ctx *ctx, const weir_record *r) {
  int rc = weir_state_add_u64(ctx, r->key, 1, NULL);
  return rc ? rc : weir_state_add_u64(ctx, r->key * 1000003 + 7, 1, NULL);
}

static int composite_batch(weir_ctx *ctx, const weir_batch *b) {
  for (uint32_t i = 0; i < b->len; i++) {
    int rc = weir_state_add_u64(ctx, b->keys[i] * 1000003 + 7, 1, NULL);
    if (rc) return rc;
  }
  return 0;
}

/* The record's key only: fine. */
static int plain_batch(weir_ctx *ctx, const weir_batch *b) {
  for (uint32_t i = 0; i < b->len; i++) {
    int rc = weir_state_add_u64(ctx, b->keys[i], 1, NULL);
    if (rc) return rc;
  }
  return 0;
}

static const weir_operator_vt composite_vt = {
    .size = sizeof(weir_operator_vt), .name = "composite", .process = composite};
static const weir_operator_vt composite_batch_vt = {
    .size = sizeof(weir_operator_vt), .name = "composite", .process_batch = composite_batch};
static const weir_operator_vt plain_batch_vt = {
    .size = sizeof(weir_operator_vt), .name = "plain", .process_batch = plain_batch};

static int run(const weir_operator_vt *vt, int parallelism, weir_job **out) {
  static uint64_t n = 1000;
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "keys"), 0);
  weir_stream *s = weir_source(job, "src", &src_vt, &n, 1);
  s = weir_process(weir_key_by(s), "op", vt, NULL, parallelism);
  cr_assert_eq(weir_sink_to(s, "out", "null", NULL, parallelism), 0);
  weir_run_opts o = {.workers = 2};
  *out = job;
  return weir_job_run(job, &o);
}

Test(state_keys, composite_key_in_process_is_refused_at_any_parallelism) {
  for (int p = 1; p <= 2; p++) {
    weir_job *job;
    cr_assert_eq(run(&composite_vt, p, &job), WEIR_EINVAL, "parallelism %d", p);
    const char *e = weir_job_error(job);
    cr_assert(strstr(e, "'op'") && strstr(e, "is not the key of the record being processed"), "%s",
              e);
    weir_job_destroy(job);
  }
  cr_assert_eq(th_leak_check(), 0);
}

Test(state_keys, composite_key_in_a_batch_is_refused_where_not_owned) {
  weir_job *job;
  cr_assert_eq(run(&composite_batch_vt, 4, &job), WEIR_EINVAL);
  const char *e = weir_job_error(job);
  cr_assert(strstr(e, "belongs to subtask"), "%s", e);
  weir_job_destroy(job);
  cr_assert_eq(run(&plain_batch_vt, 4, &job), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- weir_state_each_bytes -------------------------------------------------- */

typedef struct {
  pthread_mutex_t mu;
  uint64_t entries, bad;
} visit_cfg;

static int word_process(weir_ctx *ctx, const weir_record *r) {
  char k[32];
  int n = snprintf(k, sizeof k, "w%llu", (unsigned long long)r->key);
  return weir_state_put_bytes(ctx, k, (size_t)n, &r->key, sizeof r->key);
}

static int check_entry(void *user, uint64_t record_key, const void *k, size_t klen, const void *v,
                       size_t vlen) {
  visit_cfg *c = user;
  char want[32];
  int n = snprintf(want, sizeof want, "w%llu", (unsigned long long)record_key);
  uint64_t val;
  memcpy(&val, v, sizeof val);
  pthread_mutex_lock(&c->mu);
  c->entries++;
  if (klen != (size_t)n || memcmp(k, want, klen) || vlen != 8 || val != record_key) c->bad++;
  pthread_mutex_unlock(&c->mu);
  return 0;
}

static int stop_at_first(void *user, uint64_t record_key, const void *k, size_t klen, const void *v,
                         size_t vlen) {
  (void)user, (void)record_key, (void)k, (void)klen, (void)v, (void)vlen;
  return 42;
}

static int word_finish(weir_ctx *ctx) {
  visit_cfg *c = weir_ctx_arg(ctx);
  int rc = weir_state_each_bytes(ctx, check_entry, c);
  if (rc) return rc;
  return weir_state_each_bytes(ctx, stop_at_first, NULL) == 42 ? 0 : WEIR_EINVAL;
}

static const weir_operator_vt word_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "words",
                                         .process = word_process,
                                         .finish = word_finish};

Test(state_keys, each_bytes_visits_every_entry_with_its_record_key) {
  static uint64_t n = 1000;
  visit_cfg c = {.entries = 0};
  pthread_mutex_init(&c.mu, NULL);
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "each_bytes"), 0);
  weir_stream *s = weir_source(job, "src", &src_vt, &n, 1);
  s = weir_process(weir_key_by(s), "words", &word_vt, &c, 2);
  cr_assert_eq(weir_sink_to(s, "out", "null", NULL, 2), 0);
  weir_run_opts o = {.workers = 2};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(c.entries, 50); /* keys 0..49, over both subtasks */
  cr_assert_eq(c.bad, 0);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}
