/* window.c: owns the keyed window operator weir_window_aggregate
 * (docs/event-time.md §8), built on the public API only: timers, keyed
 * byte-string state and a side output for late records.
 *
 * DESIGN
 * State: one byte-string entry per (key, window), its name the key and the
 * window's end (16 bytes, little-endian), its value the firing count so far
 * (u32, 0 until the window fired), 4 spare bytes and the accumulator. It
 * belongs to the record's key, so a rescale moves it with the key.
 * Timers: when a window's entry is made, an event-time timer at end - 1
 * (fire) and, with allowed lateness, one at end - 1 + lateness (purge);
 * the two may share a timestamp with another window's, so a timer at t
 * fires the window ending at t + 1 and purges the one ending at
 * t + 1 - lateness. Without lateness the window is purged as it fires.
 * Lateness (c: the clock): a window is gone once end - 1 + lateness <= c;
 * a record all of whose windows are gone goes to the "late" side output
 * unchanged; otherwise it joins every window not gone, and a window that
 * already fired (firing > 0) fires again at once with firing + 1. A window
 * first made after its end passed (a late record within lateness) fires
 * from its timer, already due, right after the record.
 * Processing time: tumbling windows of the wall clock at arrival, fired
 * and purged by processing-time timers.
 */
#include <string.h>

#include "base/alloc.h"
#include "weir/operators.h"

#define HEADER 24u    /* result header: start, end, firing, 0 */
#define ACC_MAX 4096u /* accumulator bytes at most */
#define VALUE_AT 8u   /* the accumulator's offset in a state value */

typedef struct win {
  weir_window_spec w;
  weir_aggregate_vt agg;
  void *user;
} win;

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

static void state_key(uint8_t k[16], uint64_t key, int64_t end) {
  put64(k, key);
  put64(k + 8, (uint64_t)end);
}

static int64_t slide_of(const win *w) {
  return w->w.kind == WEIR_WINDOW_SLIDING ? w->w.slide : w->w.length;
}

/* The start of the last window holding ts: ts - ((ts - offset) mod slide). */
static int64_t last_start(const win *w, int64_t ts) {
  int64_t s = slide_of(w), m = (ts - w->w.offset) % s;
  if (m < 0) m += s;
  return ts - m;
}

/* Emits the result of window [start, end) with accumulator acc. */
static int emit_result(weir_ctx *ctx, const win *w, uint64_t key, int64_t end, uint32_t firing,
                       const void *acc, int from_timer) {
  uint8_t buf[HEADER + 256];
  uint8_t *out = buf;
  size_t cap = sizeof buf - HEADER;
  size_t len = w->agg.result(w->user, acc, out + HEADER, cap);
  if (len > cap) {
    out = weir_malloc(HEADER + len);
    cap = len;
    len = w->agg.result(w->user, acc, out + HEADER, cap);
    if (len > cap) len = cap;
  }
  put64(out, (uint64_t)(end - w->w.length));
  put64(out + 8, (uint64_t)end);
  put32(out + 16, firing);
  put32(out + 20, 0);
  int rc = from_timer ? weir_emit(ctx, key, out, HEADER + len)
                      : weir_emit_at(ctx, key, end - 1, out, HEADER + len);
  if (out != buf) weir_free(out);
  return rc;
}

/* The record joins window [end - length, end) of its key. */
static int join(weir_ctx *ctx, const win *w, const weir_record *r, int64_t end, int64_t clock) {
  uint8_t k[16], val[VALUE_AT + ACC_MAX];
  uint32_t acc_len = w->agg.acc_len;
  state_key(k, r->key, end);
  const void *v = NULL;
  size_t vlen = 0;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vlen);
  if (rc < 0) return rc;
  int made = rc == 0;
  if (made) {
    memset(val, 0, VALUE_AT);
    w->agg.init(w->user, val + VALUE_AT);
  } else {
    if (vlen != VALUE_AT + acc_len)
      return weir_ctx_fail(ctx, WEIR_ECORRUPT, "window state of %zu bytes, not %u", vlen,
                           VALUE_AT + acc_len);
    memcpy(val, v, vlen);
  }
  rc = w->agg.add(w->user, val + VALUE_AT, r);
  if (rc) return rc;
  uint32_t firing = get32(val);
  int event = w->w.time == WEIR_EVENT_TIME;
  int again = event && firing > 0 && end - 1 <= clock;
  if (again) put32(val, ++firing);
  rc = weir_state_put_bytes(ctx, k, sizeof k, val, VALUE_AT + acc_len);
  if (!rc && made) {
    rc = weir_timer_register(ctx, w->w.time, end - 1);
    if (!rc && event && w->w.allowed_lateness > 0)
      rc = weir_timer_register(ctx, WEIR_EVENT_TIME, end - 1 + w->w.allowed_lateness);
  }
  if (!rc && again) rc = emit_result(ctx, w, r->key, end, firing, val + VALUE_AT, 0);
  return rc;
}

static int win_process(weir_ctx *ctx, const weir_record *r) {
  const win *w = weir_ctx_arg(ctx);
  int event = w->w.time == WEIR_EVENT_TIME;
  int64_t clock = event ? weir_ctx_watermark(ctx) : WEIR_WATERMARK_MIN;
  int64_t ts = event ? r->ts : weir_ctx_processing_time(ctx);
  int64_t len = w->w.length, lateness = event ? w->w.allowed_lateness : 0;
  int joined = 0;
  for (int64_t s = last_start(w, ts); s > ts - len; s -= slide_of(w)) {
    int64_t end = s + len;
    if (event && clock != WEIR_WATERMARK_MIN && end - 1 + lateness <= clock) continue; /* gone */
    int rc = join(ctx, w, r, end, clock);
    if (rc) return rc;
    joined = 1;
  }
  if (joined) return 0;
  return weir_emit_side(ctx, WEIR_TAG_LATE, r->key, WEIR_TS_DEFAULT, r->payload, r->len);
}

/* Timer at t for the current key: fires the window ending at t + 1 (if it
 * has not fired), purges it without lateness, and purges the window whose
 * lateness ends at t. */
static int win_timer_key(weir_ctx *ctx, const win *w, uint64_t key, int64_t t) {
  uint8_t k[16], val[VALUE_AT + ACC_MAX];
  const void *v = NULL;
  size_t vlen = 0;
  int64_t lateness = w->w.time == WEIR_EVENT_TIME ? w->w.allowed_lateness : 0;
  state_key(k, key, t + 1);
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vlen);
  if (rc < 0) return rc;
  if (rc == 1 && vlen == VALUE_AT + w->agg.acc_len && get32(v) == 0) {
    memcpy(val, v, vlen);
    put32(val, 1);
    rc = emit_result(ctx, w, key, t + 1, 1, val + VALUE_AT, 1);
    if (rc) return rc;
    rc = lateness > 0 ? weir_state_put_bytes(ctx, k, sizeof k, val, vlen)
                      : weir_state_del_bytes(ctx, k, sizeof k);
    if (rc < 0) return rc;
  }
  if (lateness > 0) {
    state_key(k, key, t + 1 - lateness);
    rc = weir_state_del_bytes(ctx, k, sizeof k);
    if (rc < 0) return rc;
  }
  return 0;
}

static int win_timers(weir_ctx *ctx, const weir_timer_batch *tb) {
  const win *w = weir_ctx_arg(ctx);
  for (uint32_t i = 0; i < tb->len; i++) {
    weir_state_select(ctx, tb->keys[i]);
    int rc = win_timer_key(ctx, w, tb->keys[i], tb->ts);
    if (rc) return rc;
  }
  return 0;
}

static const weir_operator_vt win_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "window",
                                        .process = win_process,
                                        .on_timers = win_timers,
                                        .rescalable = 1};

/* What is wrong with spec w and aggregate agg, or NULL. */
static const char *bad_spec(const weir_window_spec *w, const weir_aggregate_vt *agg) {
  if (w->kind != WEIR_WINDOW_TUMBLING && w->kind != WEIR_WINDOW_SLIDING)
    return "kind is not WEIR_WINDOW_TUMBLING or WEIR_WINDOW_SLIDING";
  if (w->time != WEIR_EVENT_TIME && w->time != WEIR_PROCESSING_TIME)
    return "time is not WEIR_EVENT_TIME or WEIR_PROCESSING_TIME";
  if (w->length <= 0) return "length must be positive";
  if (w->kind == WEIR_WINDOW_SLIDING && (w->slide <= 0 || w->slide > w->length))
    return "a sliding window needs 0 < slide <= length";
  if (w->allowed_lateness < 0) return "allowed_lateness must not be negative";
  if (w->time == WEIR_PROCESSING_TIME &&
      (w->kind != WEIR_WINDOW_TUMBLING || w->allowed_lateness != 0))
    return "processing-time windows are tumbling, without lateness";
  if (!agg->init || !agg->add || !agg->result) return "the aggregate lacks init, add or result";
  if (agg->acc_len == 0 || agg->acc_len > ACC_MAX)
    return "the aggregate's acc_len must be 1 .. 4096";
  return NULL;
}

weir_stream *weir_window_aggregate(weir_stream *s, const char *name, const weir_window_spec *w,
                                   const weir_aggregate_vt *agg, void *user, int parallelism) {
  weir_job *job = weir_stream_job(s);
  if (!job) return NULL;
  if (!w || !agg || w->size < sizeof *w || agg->size < sizeof *agg) {
    weir_job_fail(job, WEIR_EPLAN, "weir_window_aggregate: window '%s': %s", name ? name : "?",
                  !w || !agg ? "spec or aggregate is NULL" : "spec or aggregate without its size");
    return NULL;
  }
  const char *why = bad_spec(w, agg);
  if (why) {
    weir_job_fail(job, WEIR_EPLAN, "weir_window_aggregate: window '%s': %s", name ? name : "?",
                  why);
    return NULL;
  }
  win *a = weir_calloc(1, sizeof *a);
  a->w = *w;
  a->agg = *agg;
  a->user = user;
  int rc = weir_job_adopt(job, a, weir_free);
  if (rc) {
    weir_free(a);
    return NULL;
  }
  static const char *const tags[] = {WEIR_TAG_LATE};
  weir_op_opts oo = {
      .size = sizeof oo,
      .flags = WEIR_OP_KEYED_STATE |
               (w->time == WEIR_EVENT_TIME ? WEIR_OP_EVENT_TIMERS : WEIR_OP_PROCESSING_TIMERS),
      .ntags = 1,
      .tags = tags};
  return weir_process_opts(s, name, &win_vt, a, parallelism, &oo);
}

int weir_window_result_parse(const weir_record *r, weir_window_result *out) {
  if (!r || r->len < HEADER || !r->payload) return WEIR_EBADREC;
  const uint8_t *p = r->payload;
  out->start = (int64_t)get64(p);
  out->end = (int64_t)get64(p + 8);
  out->firing = get32(p + 16);
  if (out->end <= out->start || out->firing == 0) return WEIR_EBADREC;
  out->value = p + HEADER;
  out->len = r->len - HEADER;
  return 0;
}

/* ---- aggregates ------------------------------------------------------------ */

static void zero64(void *user, void *acc) {
  (void)user;
  memset(acc, 0, 8);
}
static void ones64(void *user, void *acc) {
  (void)user;
  memset(acc, 0xff, 8);
}
static int count_add(void *user, void *acc, const weir_record *r) {
  (void)user;
  (void)r;
  put64(acc, get64(acc) + 1);
  return 0;
}
static int sum_add(void *user, void *acc, const weir_record *r) {
  (void)user;
  put64(acc, get64(acc) + weir_payload_u64(r));
  return 0;
}
static int min_add(void *user, void *acc, const weir_record *r) {
  (void)user;
  uint64_t v = weir_payload_u64(r);
  if (v < get64(acc)) put64(acc, v);
  return 0;
}
static int max_add(void *user, void *acc, const weir_record *r) {
  (void)user;
  uint64_t v = weir_payload_u64(r);
  if (v > get64(acc)) put64(acc, v);
  return 0;
}
static size_t u64_result(void *user, const void *acc, void *out, size_t cap) {
  (void)user;
  if (cap >= 8) memcpy(out, acc, 8); /* the accumulator is the u64, little-endian */
  return 8;
}

const weir_aggregate_vt weir_agg_count = {
    sizeof(weir_aggregate_vt), "count", 8, zero64, count_add, u64_result};
const weir_aggregate_vt weir_agg_sum_u64 = {
    sizeof(weir_aggregate_vt), "sum", 8, zero64, sum_add, u64_result};
const weir_aggregate_vt weir_agg_min_u64 = {
    sizeof(weir_aggregate_vt), "min", 8, ones64, min_add, u64_result};
const weir_aggregate_vt weir_agg_max_u64 = {
    sizeof(weir_aggregate_vt), "max", 8, zero64, max_add, u64_result};
