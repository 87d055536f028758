/* join.c: owns the keyed interval join weir_interval_join
 * (docs/event-time.md §9), built on the public API only: a two-input
 * operator (weir_connect), keyed byte-string state, event-time timers and
 * two side outputs for late records.
 *
 * DESIGN
 * A record a of the first input matches the records b of the second with
 * its key and a.ts - lo <= b.ts <= a.ts + hi. Each side's records of a key
 * are buffered in buckets of B = max(1, lo + hi) ms of event time, one
 * byte-string entry per (key, side, bucket) holding the records (ts, id,
 * length, payload) in arrival order; a probe covers a range of lo + hi
 * ms, so it reads at most two buckets of the other side. A bucket of the
 * first input can go once the clock passes its last timestamp + hi (no
 * later b can match it), of the second at its last timestamp + lo: one
 * event-time timer each, at that time. A record at or below the clock is
 * late (it would meet buckets already dropped): it goes unchanged to
 * "late1" or "late2" and joins nothing. Each pair is handed to fn with the
 * pair's own parent id (derived from both ids, so the same whichever came
 * first) and timestamp max(a.ts, b.ts). Appending copies the bucket: cost
 * grows with the records a key has in lo + hi ms.
 */
#include <string.h>

#include "base/alloc.h"
#include "weir/operators.h"

#define ENTRY_HDR 20u /* ts i64, id u64, len u32 */

typedef struct join {
  int64_t lo, hi, bucket;
  weir_join_fn fn;
  void *user;
} join;

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* floor(x / d) for d > 0. */
static int64_t floor_div(int64_t x, int64_t d) {
  int64_t q = x / d;
  return (x % d != 0 && x < 0) ? q - 1 : q;
}

static void bucket_key(uint8_t k[17], uint64_t key, int side, int64_t bucket) {
  put64(k, key);
  k[8] = (uint8_t)side;
  put64(k + 9, (uint64_t)bucket);
}

/* When side's bucket can go: its last timestamp plus how far a record of
 * the other side may be ahead of it. */
static int64_t cleanup_at(const join *j, int side, int64_t bucket) {
  return (bucket + 1) * j->bucket - 1 + (side == 0 ? j->hi : j->lo);
}

static uint64_t pair_id(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b * 0x9e3779b97f4a7c15ull) ^ 0x6a09e667f3bcc909ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Appends r to its side's bucket (registering the bucket's cleanup when the
 * bucket is new). */
static int buffer(weir_ctx *ctx, const join *j, int side, const weir_record *r) {
  uint8_t k[17];
  int64_t b = floor_div(r->ts, j->bucket);
  bucket_key(k, r->key, side, b);
  const void *v = NULL;
  size_t vlen = 0;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vlen);
  if (rc < 0) return rc;
  size_t n = vlen + ENTRY_HDR + r->len;
  uint8_t *buf = weir_malloc(n);
  if (vlen) memcpy(buf, v, vlen);
  uint8_t *e = buf + vlen;
  put64(e, (uint64_t)r->ts);
  put64(e + 8, r->id);
  put32(e + 16, r->len);
  if (r->len) memcpy(e + ENTRY_HDR, r->payload, r->len);
  rc = weir_state_put_bytes(ctx, k, sizeof k, buf, n);
  weir_free(buf);
  if (rc < 0) return rc;
  if (!vlen) rc = weir_timer_register(ctx, WEIR_EVENT_TIME, cleanup_at(j, side, b));
  return rc < 0 ? rc : 0;
}

/* r (of `side`) against the other side's records of its key in [from, to]. */
static int probe(weir_ctx *ctx, const join *j, int side, const weir_record *r, int64_t from,
                 int64_t to) {
  for (int64_t b = floor_div(from, j->bucket); b <= floor_div(to, j->bucket); b++) {
    uint8_t k[17];
    bucket_key(k, r->key, !side, b);
    const void *v = NULL;
    size_t vlen = 0;
    int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vlen);
    if (rc < 0) return rc;
    if (rc == 0) continue;
    rc = 0;
    /* A copy: fn may touch the state, which may move the value. */
    uint8_t *copy = weir_malloc(vlen);
    memcpy(copy, v, vlen);
    for (size_t off = 0; off + ENTRY_HDR <= vlen && !rc;) {
      const uint8_t *e = copy + off;
      weir_record o = {r->key, (int64_t)get64(e), get64(e + 8), NULL, get32(e + 16)};
      o.payload = o.len ? e + ENTRY_HDR : NULL;
      off += ENTRY_HDR + o.len;
      if (o.ts < from || o.ts > to) continue;
      const weir_record *a = side ? &o : r, *bb = side ? r : &o;
      weir_ctx_select_parent(ctx, pair_id(a->id, bb->id), a->ts > bb->ts ? a->ts : bb->ts);
      rc = j->fn(ctx, j->user, a, bb);
    }
    weir_free(copy);
    if (rc) return rc;
  }
  return 0;
}

static int arrive(weir_ctx *ctx, const weir_record *r, int side) {
  const join *j = weir_ctx_arg(ctx);
  int64_t clock = weir_ctx_watermark(ctx);
  if (clock != WEIR_WATERMARK_MIN && r->ts <= clock)
    return weir_emit_side(ctx, side ? WEIR_TAG_LATE2 : WEIR_TAG_LATE1, r->key, WEIR_TS_DEFAULT,
                          r->payload, r->len);
  int rc = buffer(ctx, j, side, r);
  if (rc) return rc;
  return side ? probe(ctx, j, side, r, r->ts - j->hi, r->ts + j->lo)
              : probe(ctx, j, side, r, r->ts - j->lo, r->ts + j->hi);
}

static int join_a(weir_ctx *ctx, const weir_record *r) {
  return arrive(ctx, r, 0);
}
static int join_b(weir_ctx *ctx, const weir_record *r) {
  return arrive(ctx, r, 1);
}

/* A timer at t drops the buckets whose cleanup is t (of either side). */
static int join_timers(weir_ctx *ctx, const weir_timer_batch *tb) {
  const join *j = weir_ctx_arg(ctx);
  for (uint32_t i = 0; i < tb->len; i++) {
    weir_state_select(ctx, tb->keys[i]);
    for (int side = 0; side < 2; side++) {
      int64_t last = tb->ts - (side == 0 ? j->hi : j->lo); /* the bucket's last ts */
      if (floor_div(last + 1, j->bucket) * j->bucket != last + 1) continue;
      uint8_t k[17];
      bucket_key(k, tb->keys[i], side, floor_div(last + 1, j->bucket) - 1);
      int rc = weir_state_del_bytes(ctx, k, sizeof k);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

static const weir_operator_vt join_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "interval_join",
                                         .process = join_a,
                                         .on_timers = join_timers,
                                         .rescalable = 1,
                                         .process2 = join_b};

weir_stream *weir_interval_join(weir_stream *a, weir_stream *b, const char *name, int64_t lo,
                                int64_t hi, weir_join_fn fn, void *user, int parallelism) {
  weir_job *job = weir_stream_job(a ? a : b);
  if (!job) return NULL;
  if (!fn || lo + hi < 0) {
    weir_job_fail(job, WEIR_EPLAN, "weir_interval_join: join '%s': %s", name ? name : "?",
                  !fn ? "the join function is NULL"
                      : "an empty interval: a.ts - lo <= b.ts <= a.ts + hi needs lo + hi >= 0");
    return NULL;
  }
  join *j = weir_calloc(1, sizeof *j);
  j->lo = lo;
  j->hi = hi;
  j->bucket = lo + hi > 0 ? lo + hi : 1;
  j->fn = fn;
  j->user = user;
  int rc = weir_job_adopt(job, j, weir_free);
  if (rc) {
    weir_free(j);
    return NULL;
  }
  static const char *const tags[] = {WEIR_TAG_LATE1, WEIR_TAG_LATE2};
  weir_op_opts oo = {.size = sizeof oo,
                     .flags = WEIR_OP_KEYED_STATE | WEIR_OP_EVENT_TIMERS,
                     .ntags = 2,
                     .tags = tags};
  return weir_connect(a, b, name, &join_vt, j, parallelism, &oo);
}
