/* transform.c: owns the stateless record-at-a-time operators weir_map,
 * weir_filter and weir_flat_map.
 *
 * DESIGN. Each is a weir_operator_vt with only a `process` callback whose
 * shared arg is a small {fn, user} struct owned by the job. They hold no
 * per-subtask data and no state, so they need no open, close or snapshot.
 *
 *  - map emits fn's output with weir_emit(): the output keeps the input's
 *    timestamp and gets an id derived from the input's id, whatever fn wrote
 *    into out->ts and out->id (weir_emit cannot set them).
 *  - filter passes a kept record on unchanged (weir_emit_record: same key,
 *    timestamp, id and payload): a filter makes no new record.
 *  - flat_map lets fn emit with weir_emit*() itself.
 *
 * A negative return from fn stops the job with that error; fn may call
 * weir_ctx_fail() first (flat_map) to give a message.
 */
#include "weir/operators.h"

#include "base/alloc.h"

/* {fn, user} of one transform node; owned by the job, read-only at run time. */
typedef struct transform_arg {
  union {
    weir_map_fn map;
    weir_filter_fn filter;
    weir_flat_map_fn flat_map;
  } fn;
  void *user;
} transform_arg;

static int map_process(weir_ctx *ctx, const weir_record *r) {
  const transform_arg *a = weir_ctx_arg(ctx);
  weir_record out = *r;
  int rc = a->fn.map(a->user, r, &out);
  if (rc < 0) return rc;
  return weir_emit(ctx, out.key, out.payload, out.len);
}

static int filter_process(weir_ctx *ctx, const weir_record *r) {
  const transform_arg *a = weir_ctx_arg(ctx);
  int rc = a->fn.filter(a->user, r);
  if (rc < 0) return rc;
  return rc ? weir_emit_record(ctx, r) : 0;
}

static int flat_map_process(weir_ctx *ctx, const weir_record *r) {
  const transform_arg *a = weir_ctx_arg(ctx);
  return a->fn.flat_map(ctx, a->user, r);
}

static const weir_operator_vt map_vt = {
    .size = sizeof(weir_operator_vt), .name = "map", .process = map_process};
static const weir_operator_vt filter_vt = {
    .size = sizeof(weir_operator_vt), .name = "filter", .process = filter_process};
static const weir_operator_vt flat_map_vt = {
    .size = sizeof(weir_operator_vt), .name = "flat_map", .process = flat_map_process};

static void transform_arg_free(void *p) {
  weir_free(p);
}

/* Adds node `vt` with a new {fn, user} arg; fn_null says fn was NULL. */
static weir_stream *add(weir_stream *s, const char *name, const weir_operator_vt *vt,
                        transform_arg arg, int fn_null, int parallelism) {
  weir_job *job = weir_stream_job(s);
  if (!job) return NULL;
  if (fn_null) {
    weir_job_fail(job, WEIR_EINVAL, "%s '%s': function is NULL", vt->name, name ? name : "?");
    return NULL;
  }
  transform_arg *a = weir_malloc(sizeof *a);
  *a = arg;
  if (weir_job_adopt(job, a, transform_arg_free) < 0) return NULL;
  return weir_process(s, name, vt, a, parallelism);
}

weir_stream *weir_map(weir_stream *s, const char *name, weir_map_fn fn, void *user,
                      int parallelism) {
  transform_arg a = {.fn.map = fn, .user = user};
  return add(s, name, &map_vt, a, fn == NULL, parallelism);
}

weir_stream *weir_filter(weir_stream *s, const char *name, weir_filter_fn fn, void *user,
                         int parallelism) {
  transform_arg a = {.fn.filter = fn, .user = user};
  return add(s, name, &filter_vt, a, fn == NULL, parallelism);
}

weir_stream *weir_flat_map(weir_stream *s, const char *name, weir_flat_map_fn fn, void *user,
                           int parallelism) {
  transform_arg a = {.fn.flat_map = fn, .user = user};
  return add(s, name, &flat_map_vt, a, fn == NULL, parallelism);
}
