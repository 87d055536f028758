/* harness.c: owns the operator test harness (see harness.h).
 *
 * A harness is a one-task plan built by hand: a job, a node for the
 * operator, and a second node, the capture, chained after it, so emissions
 * take the same path as in the runtime (the link batch between chained
 * operators) and end in the capture's output batch.
 */
#include "harness.h"

#include <string.h>

#include "base/alloc.h"
#include "batch.h"
#include "task.h"

struct weir__harness {
  weir_job *job;
  weir__node node, cap_node;
  weir__task task;
  weir_ctx *ctx, *cap;
  weir_ctx *ops[2];
  weir__batch *out;
  uint64_t seq;
};

static int capture_batch(weir_ctx *ctx, const weir_batch *b) {
  weir__harness *h = weir_ctx_arg(ctx);
  for (uint32_t i = 0; i < b->len; i++) {
    if (h->out->len == h->out->cap || !weir__batch_fits(h->out, b->lens[i])) {
      /* Grow the capture batch: it keeps everything. */
      weir__batch *n = weir__batch_create(h->out->cap * 2);
      for (uint32_t k = 0; k < h->out->len; k++)
        weir__batch_append(n, h->out->keys[k], h->out->ts[k], h->out->ids[k],
                           h->out->data + h->out->off[k], h->out->lens[k]);
      weir__batch_destroy(h->out);
      h->out = n;
      (void)weir__batch_fits(h->out, b->lens[i]);
    }
    weir__batch_append(h->out, b->keys[i], b->ts[i], b->ids[i], b->data + b->off[i], b->lens[i]);
  }
  return 0;
}

static const weir_operator_vt capture_vt = {
    .size = sizeof(weir_operator_vt), .name = "capture", .process_batch = capture_batch};

static int open_instance(weir__harness *h, weir_subtask_snapshot *snap) {
  h->ctx = weir__ctx_create(&h->task, &h->node, h->task.subtask);
  h->cap = weir__ctx_create(&h->task, &h->cap_node, h->task.subtask);
  h->ctx->next = h->cap;
  h->ctx->link = weir__batch_create(64);
  h->ops[0] = h->ctx;
  h->ops[1] = h->cap;
  if (snap) {
    h->ctx->restore = weir_malloc(sizeof *snap);
    *h->ctx->restore = *snap;
    memset(snap, 0, sizeof *snap);
  }
  return weir__task_open(&h->task);
}

static void close_instance(weir__harness *h) {
  weir__task_close(&h->task);
  weir__ctx_destroy(h->ctx);
  weir__ctx_destroy(h->cap);
  h->ctx = h->cap = NULL;
}

weir__harness *weir__harness_create(const weir_operator_vt *vt, void *arg, int keyed,
                                    uint32_t subtask, uint32_t parallelism) {
  weir__harness *h = weir_calloc(1, sizeof *h);
  weir_job_create(&h->job, "harness");
  h->job->opts.max_record_bytes = 1u << 20;
  h->node = (weir__node){.name = (char *)"op",
                         .kind = WEIR__NODE_OP,
                         .ovt = vt,
                         .arg = arg,
                         .parallelism = (int)parallelism,
                         .keyed = keyed};
  h->cap_node = (weir__node){.index = 1,
                             .name = (char *)"capture",
                             .kind = WEIR__NODE_SINK,
                             .ovt = &capture_vt,
                             .arg = h,
                             .parallelism = (int)parallelism};
  h->task.job = h->job;
  h->task.subtask = subtask;
  h->task.nops = 2;
  h->task.ops = h->ops;
  h->out = weir__batch_create(1024);
  if (open_instance(h, NULL)) {
    weir__harness_destroy(h);
    return NULL;
  }
  return h;
}

void weir__harness_destroy(weir__harness *h) {
  if (!h) return;
  if (h->ctx) close_instance(h);
  weir__batch_destroy(h->out);
  weir_job_destroy(h->job);
  weir_free(h);
}

static int drain(weir__harness *h) {
  if (!h->ctx->link->len) return 0;
  weir_batch v = weir__batch_view(h->ctx->link);
  int rc = capture_batch(h->cap, &v);
  h->ctx->link->len = h->ctx->link->used = 0;
  return rc;
}

int weir__harness_process(weir__harness *h, const weir_record *r) {
  weir__batch *b = weir__batch_create(1);
  (void)weir__batch_fits(b, r->len);
  weir__batch_append(b, r->key, r->ts, r->id, r->payload, r->len);
  weir_ctx *c = h->ctx;
  int rc;
  if (c->node->ovt->process_batch) {
    weir_batch v = weir__batch_view(b);
    rc = c->node->ovt->process_batch(c, &v);
  } else {
    c->cur_ts = r->ts;
    c->cur_id = r->id;
    c->cur_key = r->key;
    c->key_known = 1; /* as the task does (task.c, op_process) */
    rc = c->node->ovt->process(c, r);
    c->key_known = 0;
  }
  weir__batch_destroy(b);
  if (rc < 0) return rc;
  return drain(h);
}

int weir__harness_finish(weir__harness *h) {
  int rc = weir__ctx_finish(h->ctx);
  if (rc < 0) return rc;
  return drain(h);
}

uint32_t weir__harness_count(const weir__harness *h) {
  return h->out->len;
}

weir_record weir__harness_output(const weir__harness *h, uint32_t i) {
  weir_batch v = weir__batch_view(h->out);
  return weir_batch_record(&v, i);
}

int weir__harness_snapshot(weir__harness *h, uint64_t id, weir_subtask_snapshot *out) {
  int rc = weir__ctx_snapshot(h->ctx, id, out);
  weir_subtask_snapshot_fill(out); /* as the store would, before it reads */
  return rc == 1 ? WEIR_ECKPT : rc == 2 ? 0 : rc;
}

int weir__harness_restore(weir__harness *h, weir_subtask_snapshot *snap) {
  close_instance(h);
  return open_instance(h, snap);
}

const char *weir__harness_error(const weir__harness *h) {
  return h->ctx && h->ctx->msg[0] ? h->ctx->msg : weir_job_error(h->job);
}
