/* keyed.c: owns the keyed aggregations weir_count and weir_reduce.
 *
 * DESIGN. Both keep one u64 per key in the engine's managed keyed state, so
 * the engine snapshots and restores them; they have no per-subtask data of
 * their own. count is the counter benchmark's hot loop, so it implements
 * process_batch: while it adds 1 to key i it prefetches the state of key
 * i + PREFETCH_AHEAD, hiding the cache miss of a large state table behind
 * useful work (measured here with 1M keys: ~3x the throughput without
 * prefetch; distances 12 to 24 perform alike). count increments a whole
 * batch before it emits anything (see count_process_batch). `process`
 * exists for engines or tests that call record by record.
 *
 * Both need a keyed input (weir_key_by) and declare it (WEIR_OP_KEYED_STATE):
 * a non-keyed input is a build error naming the operator and the remedy.
 */
#include "weir/operators.h"

#include "base/alloc.h"

/* How many records ahead the batch loops prefetch state. */
#define PREFETCH_AHEAD 16u
/* Records counted before their emissions (count_process_batch): a batch of
 * the default size at once, on the stack. */
#define COUNT_CHUNK 1024u

/* Both are added with that declaration. */
static weir_stream *keyed_process(weir_stream *s, const char *name, const weir_operator_vt *vt,
                                  void *arg, int parallelism) {
  weir_op_opts o = {.size = sizeof o, .flags = WEIR_OP_KEYED_STATE};
  return weir_process_opts(s, name, vt, arg, parallelism, &o);
}

/* ------------------------------------------------------------------------ */
/* count */

static int count_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t n;
  int rc = weir_state_add_u64(ctx, r->key, 1, &n);
  if (rc < 0) return rc;
  return weir_emit_u64(ctx, r->key, n);
}

/* Two passes over the batch: first every increment (the probes of a table
 * larger than the caches, prefetched PREFETCH_AHEAD records ahead, with
 * nothing else in the loop, so many misses are in flight at once), then
 * every emission. One loop doing both kept fewer misses in flight: the
 * emit path's stores and calls filled the window between them. The state
 * and the output are the same: a batch's emissions reach the successor
 * only after process_batch returns or its link batch fills, and neither
 * reads this operator's state. */
static int count_process_batch(weir_ctx *ctx, const weir_batch *b) {
  const uint32_t len = b->len;
  const uint64_t *keys = b->keys;
  uint64_t counts[COUNT_CHUNK];
  for (uint32_t base = 0; base < len; base += COUNT_CHUNK) {
    uint32_t n = len - base < COUNT_CHUNK ? len - base : COUNT_CHUNK;
    const uint64_t *k = keys + base;
    uint32_t ahead = n < PREFETCH_AHEAD ? n : PREFETCH_AHEAD;
    for (uint32_t i = 0; i < ahead; i++) weir_state_prefetch_u64(ctx, k[i]);
    for (uint32_t i = 0; i < n; i++) {
      if (i + PREFETCH_AHEAD < n) weir_state_prefetch_u64(ctx, k[i + PREFETCH_AHEAD]);
      int rc = weir_state_add_u64(ctx, k[i], 1, &counts[i]);
      if (rc < 0) return rc;
    }
    int rc = weir_emit_u64_from_n(ctx, b, base, n, k, counts);
    if (rc < 0) return rc;
  }
  return 0;
}

static const weir_operator_vt count_vt = {
    .size = sizeof(weir_operator_vt),
    .name = "count",
    .process = count_process,
    .process_batch = count_process_batch,
};

weir_stream *weir_count(weir_stream *s, const char *name, int parallelism) {
  if (!weir_stream_job(s)) return NULL;
  return keyed_process(s, name, &count_vt, NULL, parallelism);
}

/* ------------------------------------------------------------------------ */
/* reduce */

/* {fn, user} of one reduce node; owned by the job, read-only at run time. */
typedef struct reduce_arg {
  weir_reduce_fn fn;
  void *user;
} reduce_arg;

/* Folds `value` into key's accumulator; *acc = the new accumulator. */
static int reduce_one(weir_ctx *ctx, const reduce_arg *a, uint64_t key, uint64_t value,
                      uint64_t *acc) {
  uint64_t cur;
  int rc = weir_state_get_u64(ctx, key, &cur);
  if (rc < 0) return rc;
  *acc = rc == 1 ? a->fn(a->user, cur, value) : value;
  rc = weir_state_put_u64(ctx, key, *acc);
  return rc < 0 ? rc : 0;
}

static int reduce_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t acc;
  int rc = reduce_one(ctx, weir_ctx_arg(ctx), r->key, weir_payload_u64(r), &acc);
  if (rc < 0) return rc;
  return weir_emit_u64(ctx, r->key, acc);
}

static int reduce_process_batch(weir_ctx *ctx, const weir_batch *b) {
  const reduce_arg *a = weir_ctx_arg(ctx);
  const uint32_t len = b->len;
  uint32_t ahead = len < PREFETCH_AHEAD ? len : PREFETCH_AHEAD;
  for (uint32_t i = 0; i < ahead; i++) weir_state_prefetch_u64(ctx, b->keys[i]);
  for (uint32_t i = 0; i < len; i++) {
    if (i + PREFETCH_AHEAD < len) weir_state_prefetch_u64(ctx, b->keys[i + PREFETCH_AHEAD]);
    weir_record r = weir_batch_record(b, i);
    uint64_t acc;
    int rc = reduce_one(ctx, a, r.key, weir_payload_u64(&r), &acc);
    if (rc < 0) return rc;
    rc = weir_emit_u64_from(ctx, b, i, r.key, acc);
    if (rc < 0) return rc;
  }
  return 0;
}

static const weir_operator_vt reduce_vt = {
    .size = sizeof(weir_operator_vt),
    .name = "reduce",
    .process = reduce_process,
    .process_batch = reduce_process_batch,
};

static void reduce_arg_free(void *p) {
  weir_free(p);
}

weir_stream *weir_reduce(weir_stream *s, const char *name, weir_reduce_fn fn, void *user,
                         int parallelism) {
  weir_job *job = weir_stream_job(s);
  if (!job) return NULL;
  if (!fn) {
    weir_job_fail(job, WEIR_EINVAL, "reduce '%s': function is NULL", name ? name : "?");
    return NULL;
  }
  reduce_arg *a = weir_malloc(sizeof *a);
  a->fn = fn;
  a->user = user;
  if (weir_job_adopt(job, a, reduce_arg_free) < 0) return NULL;
  return keyed_process(s, name, &reduce_vt, a, parallelism);
}
