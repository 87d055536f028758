/* test_harness.c: the operator harness property (Hazelcast Jet's
 * TestSupport): snapshotting an operator and restoring the snapshot into a
 * new instance after every input record gives exactly the output of an
 * uninterrupted run. Covers the built-in keyed operators (count, reduce),
 * whose state is managed keyed state, and an operator with state of its own
 * (snapshot/restore callbacks). */
#include <criterion/criterion.h>
#include <string.h>

#include "graph.h"
#include "harness.h"
#include "helpers.h"
#include "base/alloc.h"
#include "weir/weir.h"

typedef struct out_rec {
  uint64_t key, id, value;
  int64_t ts;
} out_rec;

/* Runs `n` records through the operator; with `restore_every`, snapshots
 * and restores into a new instance after every record. */
static out_rec *run(const weir_operator_vt *vt, void *arg, int keyed, int restore_every, uint32_t n,
                    uint32_t *count) {
  weir__harness *h = weir__harness_create(vt, arg, keyed, 0, 1);
  cr_assert_not_null(h);
  for (uint32_t i = 0; i < n; i++) {
    uint8_t v[8];
    uint64_t val = (uint64_t)i * 7 + 3;
    for (int k = 0; k < 8; k++) v[k] = (uint8_t)(val >> (8 * k));
    weir_record r = {
        .key = (i * 2654435761u) % 13, .ts = i, .id = 1000 + i, .payload = v, .len = 8};
    cr_assert_eq(weir__harness_process(h, &r), 0, "%s", weir__harness_error(h));
    if (restore_every) {
      weir_subtask_snapshot s;
      cr_assert_eq(weir__harness_snapshot(h, i + 1, &s), 0);
      cr_assert_eq(weir__harness_restore(h, &s), 0, "%s", weir__harness_error(h));
      weir_subtask_snapshot_free(&s);
    }
  }
  cr_assert_eq(weir__harness_finish(h), 0);
  *count = weir__harness_count(h);
  out_rec *o = weir_calloc(*count + 1, sizeof *o);
  for (uint32_t i = 0; i < *count; i++) {
    weir_record r = weir__harness_output(h, i);
    o[i] = (out_rec){r.key, r.id, weir_payload_u64(&r), r.ts};
  }
  weir__harness_destroy(h);
  return o;
}

static void check_same(const weir_operator_vt *vt, void *arg, int keyed, uint32_t n) {
  uint32_t na, nb;
  out_rec *a = run(vt, arg, keyed, 0, n, &na);
  out_rec *b = run(vt, arg, keyed, 1, n, &nb);
  cr_assert_eq(na, nb);
  cr_assert_gt(na, 0);
  for (uint32_t i = 0; i < na; i++) {
    cr_assert_eq(a[i].key, b[i].key, "record %u", i);
    cr_assert_eq(a[i].value, b[i].value, "record %u", i);
    cr_assert_eq(a[i].ts, b[i].ts, "record %u", i);
    cr_assert_eq(a[i].id, b[i].id, "record %u", i);
  }
  weir_free(a);
  weir_free(b);
}

/* The vt and arg of the operator a builder verb made (graph internals). */
static weir__node *built(weir_job *job, const char *name) {
  for (uint32_t i = 0; i < job->nnodes; i++)
    if (!strcmp(job->nodes[i]->name, name)) return job->nodes[i];
  return NULL;
}

static uint64_t add(void *u, uint64_t acc, uint64_t v) {
  (void)u;
  return acc + v;
}

Test(harness, count_restored_after_every_record) {
  weir_job *job;
  weir_job_create(&job, "t");
  weir_gen_opts g = {.records = 1, .keys = 1};
  weir_count(weir_key_by(weir_gen(job, "gen", &g, 1)), "count", 1);
  weir__node *n = built(job, "count");
  cr_assert_not_null(n);
  check_same(n->ovt, n->arg, 1, 500);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(harness, reduce_restored_after_every_record) {
  weir_job *job;
  weir_job_create(&job, "t");
  weir_gen_opts g = {.records = 1, .keys = 1};
  weir_reduce(weir_key_by(weir_gen(job, "gen", &g, 1)), "sum", add, NULL, 1);
  weir__node *n = built(job, "sum");
  check_same(n->ovt, n->arg, 1, 500);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* An operator with state of its own: a running total across all keys,
 * emitted every record and saved through the snapshot callbacks. */
typedef struct total {
  uint64_t sum;
} total;

static int total_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, weir_calloc(1, sizeof(total)));
  return 0;
}
static int total_process(weir_ctx *ctx, const weir_record *r) {
  total *t = weir_ctx_user(ctx);
  t->sum += weir_payload_u64(r);
  return weir_emit_u64(ctx, r->key, t->sum);
}
static int total_finish(weir_ctx *ctx) {
  total *t = weir_ctx_user(ctx);
  return weir_emit_u64(ctx, 999, t->sum);
}
static void total_close(weir_ctx *ctx) {
  weir_free(weir_ctx_user(ctx));
}
static int total_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  total *t = weir_ctx_user(ctx);
  return weir_snapshot_write(w, &t->sum, sizeof t->sum);
}
static int total_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  total *t = weir_ctx_user(ctx);
  size_t n;
  const void *p = weir_snapshot_data(r, &n);
  cr_assert_eq(n, sizeof t->sum);
  memcpy(&t->sum, p, n);
  return 0;
}
static const weir_operator_vt total_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "total",
                                          .open = total_open,
                                          .process = total_process,
                                          .finish = total_finish,
                                          .close = total_close,
                                          .snapshot = total_snapshot,
                                          .restore = total_restore};

Test(harness, operator_state_restored_after_every_record) {
  check_same(&total_vt, NULL, 0, 300);
  cr_assert_eq(th_leak_check(), 0);
}

/* Without restore, a new instance would lose the state: the property is not
 * vacuous. */
Test(harness, losing_state_changes_the_output) {
  weir__harness *h = weir__harness_create(&total_vt, NULL, 0, 0, 1);
  uint8_t v[8] = {5};
  weir_record r = {.key = 1, .payload = v, .len = 8};
  cr_assert_eq(weir__harness_process(h, &r), 0);
  weir_subtask_snapshot empty;
  memset(&empty, 0, sizeof empty);
  cr_assert_eq(weir__harness_restore(h, &empty), 0);
  cr_assert_eq(weir__harness_process(h, &r), 0);
  weir_record o = weir__harness_output(h, 1);
  cr_assert_eq(weir_payload_u64(&o), 5); /* not 10: the total restarted */
  weir__harness_destroy(h);
  cr_assert_eq(th_leak_check(), 0);
}
