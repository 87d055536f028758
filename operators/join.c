/* join.c: owns the keyed joins weir_interval_join and weir_window_join
 * (docs/event-time.md §9), built on the public API only: a two-input
 * operator (weir_connect), keyed byte-string state, event-time timers and
 * two side outputs for late records.
 *
 * The window join keeps each side's records of a key per window (one
 * byte-string entry per (key, side, window end), as the interval join's
 * buckets) and at the window's timer (end - 1) hands every pair of the
 * window to fn, at timestamp end - 1, then drops both lists. A record all
 * of whose windows fired already is late ("late1", "late2").
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
#include "reclist.h"

typedef struct join {
  int64_t lo, hi, bucket;
  weir_join_fn fn;
  void *user;
} join;

/* floor(x / d) for d > 0. */
static int64_t floor_div(int64_t x, int64_t d) {
  int64_t q = x / d;
  return (x % d != 0 && x < 0) ? q - 1 : q;
}

static void bucket_key(uint8_t k[17], uint64_t key, int side, int64_t bucket) {
  weir__le_put64(k, key);
  k[8] = (uint8_t)side;
  weir__le_put64(k + 9, (uint64_t)bucket);
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

/* Appends r to the list under k; *made: the list is new. */
static int append(weir_ctx *ctx, const uint8_t k[17], const weir_record *r, int *made) {
  const void *v = NULL;
  size_t vlen = 0;
  int rc = weir_state_get_bytes(ctx, k, 17, &v, &vlen);
  if (rc < 0) return rc;
  size_t n = vlen + weir__reclist_size(r);
  uint8_t *buf = weir_malloc(n);
  if (vlen) memcpy(buf, v, vlen);
  weir__reclist_put(buf + vlen, r);
  rc = weir_state_put_bytes(ctx, k, 17, buf, n);
  weir_free(buf);
  *made = vlen == 0;
  return rc < 0 ? rc : 0;
}

/* Appends r to its side's bucket (registering the bucket's cleanup when the
 * bucket is new). */
static int buffer(weir_ctx *ctx, const join *j, int side, const weir_record *r) {
  uint8_t k[17];
  int64_t b = floor_div(r->ts, j->bucket);
  bucket_key(k, r->key, side, b);
  int made = 0;
  int rc = append(ctx, k, r, &made);
  if (!rc && made) rc = weir_timer_register(ctx, WEIR_EVENT_TIME, cleanup_at(j, side, b));
  return rc < 0 ? rc : 0;
}

/* A copy of the list under k (*len bytes; NULL: none, or *rc < 0): fn may
 * touch the state, which may move the value. */
static uint8_t *load_list(weir_ctx *ctx, const uint8_t k[17], size_t *len, int *rc) {
  const void *v = NULL;
  *len = 0;
  *rc = weir_state_get_bytes(ctx, k, 17, &v, len);
  if (*rc <= 0) return NULL;
  *rc = 0;
  uint8_t *copy = weir_malloc(*len);
  memcpy(copy, v, *len);
  return copy;
}

/* fn for the pair (a, b), emitting at ts with the pair's own ids. */
static int call_pair(weir_ctx *ctx, weir_join_fn fn, void *user, const weir_record *a,
                     const weir_record *b, int64_t ts) {
  weir_ctx_select_parent(ctx, pair_id(a->id, b->id), ts);
  return fn(ctx, user, a, b);
}

/* r (of `side`) against the other side's records of its key in [from, to]. */
static int probe(weir_ctx *ctx, const join *j, int side, const weir_record *r, int64_t from,
                 int64_t to) {
  for (int64_t b = floor_div(from, j->bucket); b <= floor_div(to, j->bucket); b++) {
    uint8_t k[17];
    bucket_key(k, r->key, !side, b);
    size_t vlen;
    int rc;
    uint8_t *copy = load_list(ctx, k, &vlen, &rc);
    if (!copy) {
      if (rc < 0) return rc;
      continue;
    }
    weir_record o;
    for (size_t off = 0; !rc && weir__reclist_next(copy, vlen, &off, r->key, &o);) {
      if (o.ts < from || o.ts > to) continue;
      const weir_record *a = side ? &o : r, *bb = side ? r : &o;
      rc = call_pair(ctx, j->fn, j->user, a, bb, a->ts > bb->ts ? a->ts : bb->ts);
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

/* The join operator on a and b, with the joins' declarations; arg (ours)
 * goes with the job. */
static weir_stream *connect_join(weir_job *job, weir_stream *a, weir_stream *b, const char *name,
                                 const weir_operator_vt *vt, void *arg, int parallelism) {
  if (weir_job_adopt(job, arg, weir_free)) {
    weir_free(arg);
    return NULL;
  }
  static const char *const tags[] = {WEIR_TAG_LATE1, WEIR_TAG_LATE2};
  weir_op_opts oo = {.size = sizeof oo,
                     .flags = WEIR_OP_KEYED_STATE | WEIR_OP_EVENT_TIMERS,
                     .ntags = 2,
                     .tags = tags};
  return weir_connect(a, b, name, vt, arg, parallelism, &oo);
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
  return connect_join(job, a, b, name, &join_vt, j, parallelism);
}

/* ---- window join -------------------------------------------------------------- */

typedef struct wjoin {
  weir_window_spec w;
  weir_join_fn fn;
  void *user;
} wjoin;

static int64_t wslide(const wjoin *j) {
  return j->w.kind == WEIR_WINDOW_SLIDING ? j->w.slide : j->w.length;
}

/* r joins every window of its key that holds ts and has not fired. */
static int wjoin_arrive(weir_ctx *ctx, const weir_record *r, int side) {
  const wjoin *j = weir_ctx_arg(ctx);
  int64_t clock = weir_ctx_watermark(ctx), s = wslide(j), len = j->w.length;
  int64_t m = (r->ts - j->w.offset) % s;
  int joined = 0;
  for (int64_t start = r->ts - (m < 0 ? m + s : m); start > r->ts - len; start -= s) {
    int64_t end = start + len;
    if (clock != WEIR_WATERMARK_MIN && end - 1 <= clock) continue; /* fired */
    uint8_t k[17];
    bucket_key(k, r->key, side, end);
    int made = 0;
    int rc = append(ctx, k, r, &made);
    if (!rc && made) rc = weir_timer_register(ctx, WEIR_EVENT_TIME, end - 1);
    if (rc < 0) return rc;
    joined = 1;
  }
  if (joined) return 0;
  return weir_emit_side(ctx, side ? WEIR_TAG_LATE2 : WEIR_TAG_LATE1, r->key, WEIR_TS_DEFAULT,
                        r->payload, r->len);
}

static int wjoin_a(weir_ctx *ctx, const weir_record *r) {
  return wjoin_arrive(ctx, r, 0);
}
static int wjoin_b(weir_ctx *ctx, const weir_record *r) {
  return wjoin_arrive(ctx, r, 1);
}

/* The window ending at t + 1: every pair of its two lists, then neither. */
static int wjoin_fire(weir_ctx *ctx, const wjoin *j, uint64_t key, int64_t t) {
  uint8_t ka[17], kb[17];
  bucket_key(ka, key, 0, t + 1);
  bucket_key(kb, key, 1, t + 1);
  size_t la, lb;
  int rc;
  uint8_t *a = load_list(ctx, ka, &la, &rc);
  if (rc < 0) return rc;
  uint8_t *b = load_list(ctx, kb, &lb, &rc);
  weir_record ra, rb;
  for (size_t oa = 0; a && b && !rc && weir__reclist_next(a, la, &oa, key, &ra);)
    for (size_t ob = 0; !rc && weir__reclist_next(b, lb, &ob, key, &rb);)
      rc = call_pair(ctx, j->fn, j->user, &ra, &rb, t);
  weir_free(a);
  weir_free(b);
  if (rc) return rc;
  if ((rc = weir_state_del_bytes(ctx, ka, sizeof ka)) < 0) return rc;
  rc = weir_state_del_bytes(ctx, kb, sizeof kb);
  return rc < 0 ? rc : 0;
}

static int wjoin_timers(weir_ctx *ctx, const weir_timer_batch *tb) {
  const wjoin *j = weir_ctx_arg(ctx);
  for (uint32_t i = 0; i < tb->len; i++) {
    weir_state_select(ctx, tb->keys[i]);
    int rc = wjoin_fire(ctx, j, tb->keys[i], tb->ts);
    if (rc) return rc;
  }
  return 0;
}

static const weir_operator_vt wjoin_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "window_join",
                                          .process = wjoin_a,
                                          .on_timers = wjoin_timers,
                                          .rescalable = 1,
                                          .process2 = wjoin_b};

weir_stream *weir_window_join(weir_stream *a, weir_stream *b, const char *name,
                              const weir_window_spec *w, weir_join_fn fn, void *user,
                              int parallelism) {
  weir_job *job = weir_stream_job(a ? a : b);
  if (!job) return NULL;
  const char *why = !fn                         ? "the join function is NULL"
                    : !w || w->size < sizeof *w ? "the window spec is NULL or without its size"
                    : w->kind != WEIR_WINDOW_TUMBLING && w->kind != WEIR_WINDOW_SLIDING
                        ? "windows are tumbling or sliding"
                    : w->time != WEIR_EVENT_TIME ? "windows are in event time"
                    : w->length <= 0             ? "length must be positive"
                    : w->kind == WEIR_WINDOW_SLIDING && (w->slide <= 0 || w->slide > w->length)
                        ? "a sliding window needs 0 < slide <= length"
                    : w->allowed_lateness ? "a window join takes no allowed lateness"
                                          : NULL;
  if (why) {
    weir_job_fail(job, WEIR_EPLAN, "weir_window_join: join '%s': %s", name ? name : "?", why);
    return NULL;
  }
  wjoin *j = weir_calloc(1, sizeof *j);
  j->w = *w;
  j->fn = fn;
  j->user = user;
  return connect_join(job, a, b, name, &wjoin_vt, j, parallelism);
}
