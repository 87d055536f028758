/* window.c: owns the keyed window operator weir_window_aggregate
 * (docs/event-time.md §8), built on the public API only: timers, keyed
 * byte-string state and a side output for late records.
 *
 * DESIGN
 * State: one byte-string entry per (key, window), its name the key and the
 * window's end (16 bytes, little-endian), its value the firing count so far
 * (u32, 0 until the window fired), 4 spare bytes and the accumulator. It
 * belongs to the record's key, so a rescale moves it with the key.
 * Sliding windows that can keep panes instead do (see "panes" below).
 * Accumulators of at most 8 bytes without allowed lateness live in
 * namespaced u64 state instead (see "namespaced" below).
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
 * Sessions (event time): a record at ts makes the window [ts, ts + gap);
 * windows of a key that overlap (half-open: a record exactly one gap after
 * the last starts a new session) merge, accumulators with agg.merge. A
 * key's open sessions are one state entry (the key and INT64_MIN), a list
 * of (start, end, firing, accumulator): a key has few at once (those the
 * disorder keeps open). Each session has its timer at end - 1 (and, with
 * lateness, its purge at end - 1 + lateness). The timers of sessions a
 * merge absorbed stay: timers are per (key, timestamp), one may be another
 * session's too, and one that finds no session ending there does nothing.
 * A session fires once the clock passes end - 1
 * and goes, or with lateness stays until its purge: a record that merges
 * into it meanwhile fires the merged session again at once.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "weir/operators.h"
#include "reclist.h"

#define HEADER 24u        /* result header: start, end, firing, 0 */
#define PREFETCH_SLOT 16u /* records ahead whose state slots are fetched */
#define PREFETCH_ENTRY 4u /* ... and whose entries */
#define ACC_MAX 4096u     /* accumulator bytes at most */
#define VALUE_AT 8u       /* the accumulator's offset in a state value */

typedef struct win {
  weir_window_spec w;
  weir_aggregate_vt agg;
  weir_window_fn fn; /* weir_window_apply: the records, not an accumulator */
  void *user;
  int panes; /* sliding, by panes (see "panes" below) */
  int ns;    /* accumulators in namespaced state (see "namespaced" below) */
} win;

/* A subtask's own (weir_ctx_user; made in open, freed in close). */
typedef struct wsub {
  int unchecked; /* restored: the layout is checked before the first record */
  /* Windows and panes made in the batch at hand, whose timers are
   * registered after it with their slots prefetched (a cache miss each
   * otherwise). */
  struct made *made;
  uint32_t tn, tcap;
} wsub;

/* A window (first = last = its end) or pane (its end, and the ends of its
 * first and last windows not gone) made in a batch. */
struct made {
  uint64_t key;
  int64_t end, first, last;
};

struct weir_window_records {
  const uint8_t *list;
  size_t len, off;
  uint64_t key;
};

int weir_window_next(weir_window_records *it, weir_record *r) {
  return weir__reclist_next(it->list, it->len, &it->off, it->key, r);
}

static void state_key(uint8_t k[16], uint64_t key, int64_t end) {
  weir__le_put64(k, key);
  weir__le_put64(k + 8, (uint64_t)end);
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
static int emit_result(weir_ctx *ctx, const win *w, uint64_t key, int64_t start, int64_t end,
                       uint32_t firing, const void *acc, int from_timer) {
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
  weir__le_put64(out, (uint64_t)start);
  weir__le_put64(out + 8, (uint64_t)end);
  weir__le_put32(out + 16, firing);
  weir__le_put32(out + 20, 0);
  int rc = from_timer ? weir_emit(ctx, key, out, HEADER + len)
                      : weir_emit_at(ctx, key, end - 1, out, HEADER + len);
  if (out != buf) weir_free(out);
  return rc;
}

/* Emits the result of weir_window_apply's fn for window [start, end) of
 * key, whose records are list (len bytes). */
static int emit_apply(weir_ctx *ctx, const win *w, uint64_t key, int64_t start, int64_t end,
                      uint32_t firing, const uint8_t *list, size_t len, int from_timer) {
  uint8_t buf[HEADER + 256];
  uint8_t *out = buf;
  size_t cap = sizeof buf - HEADER, n = 0;
  weir_window win_ = {start, end, firing};
  for (;;) {
    weir_window_records it = {list, len, 0, key};
    int rc = w->fn(w->user, key, &win_, &it, out + HEADER, cap, &n);
    if (rc) {
      if (out != buf) weir_free(out);
      return rc;
    }
    if (n <= cap) break;
    if (out != buf) weir_free(out);
    cap = n; /* more room, the records from the start */
    out = weir_malloc(HEADER + cap);
  }
  weir__le_put64(out, (uint64_t)start);
  weir__le_put64(out + 8, (uint64_t)end);
  weir__le_put32(out + 16, firing);
  weir__le_put32(out + 20, 0);
  int rc = from_timer ? weir_emit(ctx, key, out, HEADER + n)
                      : weir_emit_at(ctx, key, end - 1, out, HEADER + n);
  if (out != buf) weir_free(out);
  return rc;
}

/* r missed window [start, end): to "missed", the header (firing 0) before
 * its payload. */
static int emit_missed(weir_ctx *ctx, const weir_record *r, int64_t start, int64_t end) {
  uint8_t buf[HEADER + 256];
  uint8_t *out = r->len <= 256 ? buf : weir_malloc(HEADER + r->len);
  weir__le_put64(out, (uint64_t)start);
  weir__le_put64(out + 8, (uint64_t)end);
  weir__le_put32(out + 16, 0);
  weir__le_put32(out + 20, 0);
  if (r->len) memcpy(out + HEADER, r->payload, r->len);
  int rc = weir_emit_side(ctx, WEIR_TAG_MISSED, r->key, WEIR_TS_DEFAULT, out, HEADER + r->len);
  if (out != buf) weir_free(out);
  return rc;
}

/* weir_window_apply: the record goes into the list of window
 * [end - length, end) of its key (firing count, 4 spare bytes, records). */
static int join_apply(weir_ctx *ctx, const win *w, const weir_record *r, int64_t end,
                      int64_t clock) {
  uint8_t k[16];
  state_key(k, r->key, end);
  const void *v = NULL;
  size_t vlen = 0;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vlen);
  if (rc < 0) return rc;
  int made = rc == 0;
  if (!made && vlen < VALUE_AT)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "window state of %zu bytes", vlen);
  size_t n = (made ? VALUE_AT : vlen) + weir__reclist_size(r);
  uint8_t *val = weir_malloc(n);
  if (made)
    memset(val, 0, VALUE_AT);
  else
    memcpy(val, v, vlen);
  weir__reclist_put(val + n - weir__reclist_size(r), r);
  uint32_t firing = weir__le_get32(val);
  int again = w->w.time == WEIR_EVENT_TIME && firing > 0 && end - 1 <= clock;
  if (again) weir__le_put32(val, ++firing);
  rc = weir_state_put_bytes(ctx, k, sizeof k, val, n);
  if (!rc && made) {
    rc = weir_timer_register(ctx, w->w.time, end - 1);
    if (!rc && w->w.time == WEIR_EVENT_TIME && w->w.allowed_lateness > 0)
      rc = weir_timer_register(ctx, WEIR_EVENT_TIME, end - 1 + w->w.allowed_lateness);
  }
  if (!rc && again)
    rc =
        emit_apply(ctx, w, r->key, end - w->w.length, end, firing, val + VALUE_AT, n - VALUE_AT, 0);
  weir_free(val);
  return rc;
}

/* The record joins window [end - length, end) of its key: its entry is
 * updated in place (one lookup per record and window). */
static int join(weir_ctx *ctx, const win *w, const weir_record *r, int64_t end, int64_t clock) {
  if (w->fn) return join_apply(ctx, w, r, end, clock);
  uint8_t k[16];
  size_t vlen = VALUE_AT + w->agg.acc_len;
  state_key(k, r->key, end);
  void *v = NULL;
  int64_t had = -1;
  int rc = weir_state_update_bytes(ctx, k, sizeof k, vlen, &v, &had);
  if (rc < 0) return rc;
  uint8_t *val = v;
  int made = rc == 0;
  if (made) {
    w->agg.init(w->user, val + VALUE_AT);
  } else if (had != (int64_t)vlen) {
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "window state of %lld bytes, not %zu", (long long)had,
                         vlen);
  }
  rc = w->agg.add(w->user, val + VALUE_AT, r);
  if (rc) return rc;
  uint32_t firing = weir__le_get32(val);
  int event = w->w.time == WEIR_EVENT_TIME;
  int again = event && firing > 0 && end - 1 <= clock;
  if (again) weir__le_put32(val, ++firing);
  /* The result is emitted before the timers are touched: val points into
   * the state only until the next state call. */
  if (again &&
      (rc = emit_result(ctx, w, r->key, end - w->w.length, end, firing, val + VALUE_AT, 0)) != 0)
    return rc;
  if (made) {
    rc = weir_timer_register(ctx, w->w.time, end - 1);
    if (!rc && event && w->w.allowed_lateness > 0)
      rc = weir_timer_register(ctx, WEIR_EVENT_TIME, end - 1 + w->w.allowed_lateness);
  }
  return rc;
}

/* ---- panes ------------------------------------------------------------------
 * Sliding windows in event time whose length is a multiple of the slide,
 * with an aggregate that merges, keep one accumulator per key and slide (a
 * pane [end - slide, end)) instead of one per key and window: a record
 * updates one entry, not length / slide of them, and a window merges its
 * panes when it fires. A pane's entry (the key, its end, 'p': 17 bytes)
 * holds the firing count of the window that ends where it ends, a flag
 * "has records" and the accumulator; an entry made only to count a firing
 * has no records and adds nothing to a window.
 * Timers: a pane's first record registers the timers (end - 1) of those
 * of its windows that are not gone and, with lateness, the pane's purge
 * (the end of its last window - 1 + lateness); the timer of window E
 * fires it (once: firing 0) if a pane of it has records. (Timers are one
 * per key and time, so the panes of a window share its timer; a timer
 * that a firing registered for the next window would not fire at the end
 * of input, which fires the timers there are.) The timer at t purges the
 * pane whose last window is gone at t. A record for a window that already
 * fired and is not gone fires it again at once, as in the per-window
 * path. */

#define PANE_KEY 17u

static void pane_key(uint8_t k[PANE_KEY], uint64_t key, int64_t end) {
  state_key(k, key, end);
  k[16] = 'p';
}

/* Merges the panes of window [end - length, end) of key into acc (made by
 * init); *firing: the window's firing count; returns 1 if a pane had
 * records, 0 if none, or a negative error. */
static int pane_merge(weir_ctx *ctx, const win *w, uint64_t key, int64_t end, void *acc,
                      uint32_t *firing) {
  int64_t S = w->w.slide;
  uint8_t k[PANE_KEY];
  int any = 0;
  w->agg.init(w->user, acc);
  *firing = 0;
  for (int64_t q = end - w->w.length + S; q <= end; q += S) {
    const void *v = NULL;
    size_t vlen = 0;
    pane_key(k, key, q);
    int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vlen);
    if (rc < 0) return rc;
    if (rc == 0) continue;
    if (vlen != VALUE_AT + w->agg.acc_len)
      return weir_ctx_fail(ctx, WEIR_ECORRUPT, "window pane state of %zu bytes, not %u", vlen,
                           VALUE_AT + w->agg.acc_len);
    if (q == end) *firing = weir__le_get32(v);
    if (!weir__le_get32((const uint8_t *)v + 4)) continue; /* a firing count only */
    w->agg.merge(w->user, acc, (const uint8_t *)v + VALUE_AT);
    any = 1;
  }
  return any;
}

/* Sets the firing count of the window ending at end (in its pane's entry,
 * made without records if absent). */
static int pane_set_firing(weir_ctx *ctx, const win *w, uint64_t key, int64_t end,
                           uint32_t firing) {
  uint8_t k[PANE_KEY];
  pane_key(k, key, end);
  void *v = NULL;
  int rc = weir_state_update_bytes(ctx, k, sizeof k, VALUE_AT + w->agg.acc_len, &v, NULL);
  if (rc < 0) return rc;
  if (rc == 0) w->agg.init(w->user, (uint8_t *)v + VALUE_AT);
  weir__le_put32(v, firing);
  if (rc == 0 && w->w.allowed_lateness > 0) /* its purge, as for a pane with records */
    return weir_timer_register(ctx, WEIR_EVENT_TIME,
                               end + w->w.length - w->w.slide - 1 + w->w.allowed_lateness);
  return 0;
}

/* A record (not late for all its windows: first, the end of the first one
 * not gone, <= last, the end of the last one) into its pane. */
static int pane_join(weir_ctx *ctx, const win *w, const weir_record *r, int64_t pane, int64_t first,
                     int64_t last, int64_t clock) {
  uint8_t k[PANE_KEY];
  pane_key(k, r->key, pane);
  void *v = NULL;
  int64_t had = -1;
  size_t vlen = VALUE_AT + w->agg.acc_len;
  int rc = weir_state_update_bytes(ctx, k, sizeof k, vlen, &v, &had);
  if (rc < 0) return rc;
  uint8_t *val = v;
  if (rc == 0)
    w->agg.init(w->user, val + VALUE_AT);
  else if (had != (int64_t)vlen)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "window pane state of %lld bytes, not %zu",
                         (long long)had, vlen);
  if ((rc = w->agg.add(w->user, val + VALUE_AT, r)) != 0) return rc;
  int first_record = !weir__le_get32(val + 4);
  weir__le_put32(val + 4, 1);
  if (first_record) {
    for (int64_t e = first; e <= last; e += w->w.slide)
      if ((rc = weir_timer_register(ctx, WEIR_EVENT_TIME, e - 1)) < 0) return rc;
    if (w->w.allowed_lateness > 0 &&
        (rc = weir_timer_register(ctx, WEIR_EVENT_TIME, last - 1 + w->w.allowed_lateness)) < 0)
      return rc;
  }
  if (clock == WEIR_WATERMARK_MIN || first - 1 > clock) return 0;
  /* Windows past their end and not gone: those that fired fire again now;
   * the others fire from their timers, due already. */
  uint8_t acc[ACC_MAX];
  for (int64_t e = first; e <= last && e - 1 <= clock; e += w->w.slide) {
    uint32_t firing;
    rc = pane_merge(ctx, w, r->key, e, acc, &firing);
    if (rc < 0) return rc;
    if (firing == 0) continue;
    if ((rc = pane_set_firing(ctx, w, r->key, e, firing + 1)) < 0) return rc;
    if ((rc = emit_result(ctx, w, r->key, e - w->w.length, e, firing + 1, acc, 0)) != 0) return rc;
  }
  return 0;
}

/* The timer at t of key: fires the window ending at t + 1, purges the
 * pane whose last window is gone at t. */
static int pane_timer(weir_ctx *ctx, const win *w, uint64_t key, int64_t t) {
  int64_t end = t + 1, lateness = w->w.allowed_lateness;
  uint8_t acc[ACC_MAX], k[PANE_KEY];
  uint32_t firing;
  int rc = pane_merge(ctx, w, key, end, acc, &firing);
  if (rc < 0) return rc;
  if (rc == 1 && firing == 0) {
    if ((rc = emit_result(ctx, w, key, end - w->w.length, end, 1, acc, 1)) != 0) return rc;
    if (lateness > 0 && (rc = pane_set_firing(ctx, w, key, end, 1)) < 0) return rc;
  }
  pane_key(k, key, end - w->w.length + w->w.slide - lateness);
  rc = weir_state_del_bytes(ctx, k, sizeof k);
  return rc < 0 ? rc : 0;
}

/* ---- namespaced -------------------------------------------------------------
 * Without allowed lateness and without a window function, an accumulator of
 * at most 8 bytes lives in namespaced u64 state: (key, window end) -> the
 * accumulator's bytes, or (key, pane end) for panes. One inline slot, one
 * probe per record, no allocation (docs/event-time.md §8.2). Without
 * lateness nothing else needs keeping: a window fires once, from its timer,
 * and goes with it (a record for a window past its end is late for it), so
 * there is no firing count, and a pane's entry exists only with records in
 * it. The two layouts do not mix: a restore into the other one is refused
 * (check_layout). */

/* The timers of made window or pane m of the current key. A pane's windows
 * up to last - slide are its previous pane's too: if that pane exists, it
 * registered their timers when it was made (those that fired since are
 * gone, before first), so only the last window's is new. */
static int made_timers(weir_ctx *ctx, const win *w, const struct made *m) {
  int64_t from = m->first;
  int rc;
  if (w->panes && m->last - w->w.slide >= m->first) {
    uint64_t v;
    if ((rc = weir_state_ns_get_u64(ctx, (uint64_t)(m->end - w->w.slide), &v)) < 0) return rc;
    if (rc == 1) from = m->last;
  }
  for (int64_t e = from; e <= m->last; e += slide_of(w))
    if ((rc = weir_timer_register(ctx, w->w.time, e - 1)) < 0) return rc;
  return 0;
}

/* Registers the timers of what the batch made (in any order: a previous
 * pane made later in the batch registers its own), the state and timer
 * slots prefetched 8 ahead. */
static int ns_timers_flush(weir_ctx *ctx, const win *w, wsub *sub) {
  for (uint32_t i = 0; i < sub->tn; i++) {
    if (i + 8 < sub->tn) {
      const struct made *a = &sub->made[i + 8];
      if (w->panes) weir_state_ns_prefetch(ctx, a->key, (uint64_t)(a->end - w->w.slide));
      weir_timer_prefetch(ctx, w->w.time, a->key, a->last - 1);
    }
    weir_state_select(ctx, sub->made[i].key);
    int rc = made_timers(ctx, w, &sub->made[i]);
    if (rc < 0) return rc;
  }
  sub->tn = 0;
  return 0;
}

/* The record joins window (or pane) `end` of its key. Window timers as in
 * join; a pane registers those of its windows first .. last (with sub:
 * after the batch). */
static int ns_join(weir_ctx *ctx, const win *w, wsub *sub, const weir_record *r, int64_t end,
                   int64_t first, int64_t last) {
  uint64_t *acc;
  int rc = weir_state_ns_update_u64(ctx, (uint64_t)end, &acc);
  if (rc < 0) return rc;
  int made = rc == 0;
  if (made) w->agg.init(w->user, acc);
  /* acc points into the state until the next state call: add first. */
  if ((rc = w->agg.add(w->user, acc, r)) != 0 || !made) return rc;
  struct made m = {r->key, end, first, last};
  if (!sub) return made_timers(ctx, w, &m);
  if (sub->tn == sub->tcap) {
    sub->tcap = sub->tcap ? 2 * sub->tcap : 1024;
    sub->made = weir_realloc(sub->made, sub->tcap * sizeof *sub->made);
  }
  sub->made[sub->tn++] = m;
  return 0;
}

/* The timer at t of key fires the window ending at t + 1 and drops it, or
 * (panes) merges the window's panes, fires it and drops its first pane,
 * whose last window it was. */
static int ns_timer(weir_ctx *ctx, const win *w, uint64_t key, int64_t t) {
  int64_t end = t + 1;
  uint64_t acc = 0, part;
  int any = 0, rc;
  if (!w->panes) {
    if ((any = weir_state_ns_get_u64(ctx, (uint64_t)end, &acc)) < 0) return any;
  } else {
    w->agg.init(w->user, &acc);
    for (int64_t q = end - w->w.length + w->w.slide; q <= end; q += w->w.slide) {
      if ((rc = weir_state_ns_get_u64(ctx, (uint64_t)q, &part)) < 0) return rc;
      if (rc == 0) continue;
      w->agg.merge(w->user, &acc, &part);
      any = 1;
    }
  }
  if (any && (rc = emit_result(ctx, w, key, end - w->w.length, end, 1, &acc, 1)) != 0) return rc;
  rc = weir_state_ns_del_u64(ctx, (uint64_t)(w->panes ? end - w->w.length + w->w.slide : end));
  return rc < 0 ? rc : 0;
}

static int any_window_entry(void *user, uint64_t record_key, const void *k, size_t klen,
                            const void *v, size_t vlen) {
  (void)user, (void)record_key, (void)k, (void)v, (void)vlen;
  return klen == 16 || klen == PANE_KEY;
}

static int any_ns_entry(void *user, uint64_t key, uint64_t ns, uint64_t value) {
  (void)user, (void)key, (void)ns, (void)value;
  return 1;
}

/* Refuses restored state kept in the other layout: its windows would be
 * lost, never fired. */
static int check_layout(weir_ctx *ctx, const win *w) {
  ((wsub *)weir_ctx_user(ctx))->unchecked = 0;
  int other = w->ns ? weir_state_each_bytes(ctx, any_window_entry, NULL)
                    : weir_state_ns_each_u64(ctx, any_ns_entry, NULL);
  if (other <= 0) return other;
  return weir_ctx_fail(
      ctx, WEIR_EMISMATCH,
      "window '%s': the restored checkpoint keeps this operator's windows in the other layout "
      "(accumulators of at most 8 bytes without allowed lateness are namespaced state, other "
      "windows byte-string entries): it was taken with another allowed lateness or aggregate, "
      "or by an earlier weir; restore it with the window as it was, or start without --restore",
      weir_ctx_name(ctx));
}

#define CHECK_LAYOUT(ctx, w)                                                                       \
  do {                                                                                             \
    if (__builtin_expect(((wsub *)weir_ctx_user(ctx))->unchecked, 0)) {                            \
      int rc_ = check_layout(ctx, w);                                                              \
      if (rc_) return rc_;                                                                         \
    }                                                                                              \
  } while (0)

static int win_open(weir_ctx *ctx) {
  wsub *sub = weir_calloc(1, sizeof *sub);
  /* Set on a restore: the state is loaded after open. */
  sub->unchecked = weir_ctx_restored_checkpoint(ctx) != 0;
  weir_ctx_set_user(ctx, sub);
  return 0;
}

static void win_close(weir_ctx *ctx) {
  wsub *sub = weir_ctx_user(ctx);
  if (!sub) return;
  weir_free(sub->made);
  weir_free(sub);
  weir_ctx_set_user(ctx, NULL);
}

/* ---- sessions ---------------------------------------------------------------- */

/* A session in the list: start i64, end i64, firings so far u32, fired at
 * its current end u32 (0 or 1: a merge that moves the end clears it), the
 * accumulator. */
#define SESSION_AT 24u
#define SESSIONS_MAX 4096u /* open sessions of one key at most */

typedef struct sessions {
  uint8_t k[16];
  uint32_t n, size; /* sessions; bytes of one */
  uint8_t *v;       /* n * size bytes (weir_malloc'd) */
} sessions;

static uint8_t *sess_at(const sessions *s, uint32_t i) {
  return s->v + (size_t)i * s->size;
}

/* Loads key's open sessions (none: n = 0). */
static int sess_load(weir_ctx *ctx, const win *w, uint64_t key, sessions *s) {
  state_key(s->k, key, INT64_MIN);
  s->size = SESSION_AT + w->agg.acc_len;
  s->n = 0;
  s->v = NULL;
  const void *v = NULL;
  size_t vlen = 0;
  int rc = weir_state_get_bytes(ctx, s->k, sizeof s->k, &v, &vlen);
  if (rc <= 0) return rc;
  if (vlen % s->size || vlen / s->size > SESSIONS_MAX)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "window '%s': session state of %zu bytes",
                         weir_ctx_name(ctx), vlen);
  s->n = (uint32_t)(vlen / s->size);
  s->v = weir_malloc(vlen + s->size); /* room for one more */
  memcpy(s->v, v, vlen);
  return 0;
}

static int sess_store(weir_ctx *ctx, sessions *s) {
  int rc = s->n ? weir_state_put_bytes(ctx, s->k, sizeof s->k, s->v, (size_t)s->n * s->size)
                : weir_state_del_bytes(ctx, s->k, sizeof s->k);
  weir_free(s->v);
  s->v = NULL;
  return rc < 0 ? rc : 0;
}

static void sess_remove(sessions *s, uint32_t i) {
  memmove(sess_at(s, i), sess_at(s, i + 1), (size_t)(s->n - i - 1) * s->size);
  s->n--;
}

/* The record's window [ts, ts + gap) merged with every open session of its
 * key that it overlaps (transitively); fired again at once if the merged
 * session's end already passed and a part of it had fired. */
static int session_process(weir_ctx *ctx, const win *w, const weir_record *r, int64_t clock) {
  int64_t gap = w->w.length, lateness = w->w.allowed_lateness;
  if (clock != WEIR_WATERMARK_MIN && r->ts + gap - 1 + lateness <= clock)
    return weir_emit_side(ctx, WEIR_TAG_LATE, r->key, WEIR_TS_DEFAULT, r->payload, r->len);
  sessions s;
  int rc = sess_load(ctx, w, r->key, &s);
  if (rc < 0) return rc;
  if (!s.v) s.v = weir_malloc(s.size);
  if (s.n >= SESSIONS_MAX) {
    weir_free(s.v);
    return weir_ctx_fail(ctx, WEIR_ENOSPC, "window '%s': key %llu has %u open sessions",
                         weir_ctx_name(ctx), (unsigned long long)r->key, s.n);
  }
  /* The new session, last in the list, absorbs the ones it overlaps. */
  uint8_t *m = sess_at(&s, s.n);
  weir__le_put64(m, (uint64_t)r->ts);
  weir__le_put64(m + 8, (uint64_t)(r->ts + gap));
  weir__le_put32(m + 16, 0);
  weir__le_put32(m + 20, 0);
  w->agg.init(w->user, m + SESSION_AT);
  if ((rc = w->agg.add(w->user, m + SESSION_AT, r)) != 0) goto out;
  int64_t start = r->ts, end = r->ts + gap;
  uint32_t firing = 0;
  for (int merged = 1; merged;) {
    merged = 0;
    for (uint32_t i = 0; i < s.n; i++) {
      uint8_t *e = sess_at(&s, i);
      int64_t es = (int64_t)weir__le_get64(e), ee = (int64_t)weir__le_get64(e + 8);
      if (es >= end || start >= ee) continue;
      if (es < start) start = es;
      if (ee > end) end = ee;
      if (weir__le_get32(e + 16) > firing) firing = weir__le_get32(e + 16);
      w->agg.merge(w->user, m + SESSION_AT, e + SESSION_AT);
      memmove(e, sess_at(&s, i + 1), (size_t)(s.n - i) * s.size); /* m moves down too */
      s.n--;
      m = sess_at(&s, s.n);
      merged = 1;
      break;
    }
  }
  weir__le_put64(m, (uint64_t)start);
  weir__le_put64(m + 8, (uint64_t)end);
  /* Merged into a session that fired, and its end passed already: fire
   * again now; otherwise its timer fires it (again) at its end. */
  int again = firing > 0 && end - 1 <= clock;
  if (again) firing++;
  weir__le_put32(m + 16, firing);
  weir__le_put32(m + 20, (uint32_t)again);
  s.n++;
  if ((rc = weir_timer_register(ctx, WEIR_EVENT_TIME, end - 1)) < 0) goto out;
  if (lateness > 0 && (rc = weir_timer_register(ctx, WEIR_EVENT_TIME, end - 1 + lateness)) < 0)
    goto out;
  if (again && (rc = emit_result(ctx, w, r->key, start, end, firing, m + SESSION_AT, 0)) < 0)
    goto out;
  return sess_store(ctx, &s);
out:
  weir_free(s.v);
  return rc;
}

/* Timer at t: fires the key's session ending at t + 1 if it has not fired
 * (and drops it without lateness), drops the one whose purge is due. */
static int session_timer(weir_ctx *ctx, const win *w, uint64_t key, int64_t t) {
  sessions s;
  int rc = sess_load(ctx, w, key, &s);
  if (rc < 0 || !s.n) {
    weir_free(s.v);
    return rc;
  }
  int64_t lateness = w->w.allowed_lateness;
  for (uint32_t i = 0; i < s.n;) {
    uint8_t *e = sess_at(&s, i);
    int64_t es = (int64_t)weir__le_get64(e), ee = (int64_t)weir__le_get64(e + 8);
    if (ee - 1 == t && weir__le_get32(e + 20) == 0) {
      uint32_t firing = weir__le_get32(e + 16) + 1;
      weir__le_put32(e + 16, firing);
      weir__le_put32(e + 20, 1);
      if ((rc = emit_result(ctx, w, key, es, ee, firing, e + SESSION_AT, 1)) < 0) {
        weir_free(s.v);
        return rc;
      }
    }
    if (ee - 1 + lateness <= t && weir__le_get32(e + 20)) {
      sess_remove(&s, i);
      continue;
    }
    i++;
  }
  return sess_store(ctx, &s);
}

static int win_record(weir_ctx *ctx, const win *w, wsub *sub, const weir_record *r) {
  if (w->w.kind == WEIR_WINDOW_SESSION) return session_process(ctx, w, r, weir_ctx_watermark(ctx));
  int event = w->w.time == WEIR_EVENT_TIME;
  int64_t clock = event ? weir_ctx_watermark(ctx) : WEIR_WATERMARK_MIN;
  int64_t ts = event ? r->ts : weir_ctx_processing_time(ctx);
  int64_t len = w->w.length, lateness = event ? w->w.allowed_lateness : 0;
  int joined = 0, missed = 0;
  int64_t pane = last_start(w, ts) + slide_of(w), first = 0;
  for (int64_t s = last_start(w, ts); s > ts - len; s -= slide_of(w)) {
    int64_t end = s + len;
    if (event && clock != WEIR_WATERMARK_MIN && end - 1 + lateness <= clock) { /* gone */
      missed++;
      continue;
    }
    first = end;
    joined = 1;
    if (w->panes) continue; /* one update below, for all of them */
    int rc = w->ns ? ns_join(ctx, w, sub, r, end, end, end) : join(ctx, w, r, end, clock);
    if (rc) return rc;
  }
  if (joined && w->panes) {
    int64_t last = pane + len - slide_of(w);
    int rc = w->ns ? ns_join(ctx, w, sub, r, pane, first, last)
                   : pane_join(ctx, w, r, pane, first, last, clock);
    if (rc) return rc;
  }
  if (!joined)
    return weir_emit_side(ctx, WEIR_TAG_LATE, r->key, WEIR_TS_DEFAULT, r->payload, r->len);
  if (!missed) return 0;
  /* Late for some of its windows only (sliding): it counts in the others,
   * and says which ones it missed. The gone windows are the earliest. */
  int64_t s = last_start(w, ts);
  while (s - slide_of(w) > ts - len) s -= slide_of(w);
  for (int k = 0; k < missed; k++, s += slide_of(w)) {
    int rc = emit_missed(ctx, r, s, s + len);
    if (rc) return rc;
  }
  return 0;
}

static int win_process(weir_ctx *ctx, const weir_record *r) {
  const win *w = weir_ctx_arg(ctx);
  CHECK_LAYOUT(ctx, w);
  return win_record(ctx, w, NULL, r);
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
  if (w->fn && rc == 1 && vlen >= VALUE_AT && weir__le_get32(v) == 0) {
    uint8_t *list = weir_malloc(vlen);
    memcpy(list, v, vlen);
    weir__le_put32(list, 1);
    rc =
        emit_apply(ctx, w, key, t + 1 - w->w.length, t + 1, 1, list + VALUE_AT, vlen - VALUE_AT, 1);
    if (!rc)
      rc = lateness > 0 ? weir_state_put_bytes(ctx, k, sizeof k, list, vlen)
                        : weir_state_del_bytes(ctx, k, sizeof k);
    weir_free(list);
    if (rc < 0) return rc;
  } else if (!w->fn && rc == 1 && vlen == VALUE_AT + w->agg.acc_len && weir__le_get32(v) == 0) {
    memcpy(val, v, vlen);
    weir__le_put32(val, 1);
    rc = emit_result(ctx, w, key, t + 1 - w->w.length, t + 1, 1, val + VALUE_AT, 1);
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

/* Hints for the panes of key's window ending at end: step 0 their slots,
 * step 1 their entries. */
static void pane_prefetch(weir_ctx *ctx, const win *w, uint64_t key, int64_t end, int step) {
  uint8_t k[PANE_KEY];
  for (int64_t q = end - w->w.length + w->w.slide; q <= end; q += w->w.slide) {
    pane_key(k, key, q);
    weir_state_prefetch_bytes(ctx, k, sizeof k, step);
  }
}

static int win_timers(weir_ctx *ctx, const weir_timer_batch *tb) {
  const win *w = weir_ctx_arg(ctx);
  CHECK_LAYOUT(ctx, w);
  for (uint32_t i = 0; i < tb->len; i++) {
    if (w->ns) {
      if (i + PREFETCH_SLOT < tb->len) {
        uint64_t k = tb->keys[i + PREFETCH_SLOT];
        int64_t end = tb->ts + 1;
        for (int64_t q = w->panes ? end - w->w.length + w->w.slide : end; q <= end;
             q += slide_of(w))
          weir_state_ns_prefetch(ctx, k, (uint64_t)q);
      }
    } else if (w->panes) { /* a window's panes are length / slide lookups */
      if (i + PREFETCH_ENTRY < tb->len)
        pane_prefetch(ctx, w, tb->keys[i + PREFETCH_ENTRY], tb->ts + 1, 0);
      if (i + 1 < tb->len) pane_prefetch(ctx, w, tb->keys[i + 1], tb->ts + 1, 1);
    }
    weir_state_select(ctx, tb->keys[i]);
    int rc = w->w.kind == WEIR_WINDOW_SESSION ? session_timer(ctx, w, tb->keys[i], tb->ts)
             : w->ns                          ? ns_timer(ctx, w, tb->keys[i], tb->ts)
             : w->panes                       ? pane_timer(ctx, w, tb->keys[i], tb->ts)
                                              : win_timer_key(ctx, w, tb->keys[i], tb->ts);
    if (rc) return rc;
  }
  return 0;
}

/* Hints for the state entries of record (key, ts): step 0 their slots,
 * step 1 the entries themselves. */
static void win_prefetch(weir_ctx *ctx, const win *w, uint64_t key, int64_t ts, int step) {
  uint8_t k[16];
  if (w->w.kind == WEIR_WINDOW_SESSION) {
    state_key(k, key, INT64_MIN);
    weir_state_prefetch_bytes(ctx, k, sizeof k, step);
    return;
  }
  if (w->w.time != WEIR_EVENT_TIME) return;
  if (w->ns) { /* one step: the slot is the entry */
    if (step) return;
    int64_t s0 = last_start(w, ts);
    if (w->panes) {
      weir_state_ns_prefetch(ctx, key, (uint64_t)(s0 + slide_of(w)));
      return;
    }
    for (int64_t s = s0; s > ts - w->w.length; s -= slide_of(w))
      weir_state_ns_prefetch(ctx, key, (uint64_t)(s + w->w.length));
    return;
  }
  if (w->panes) {
    uint8_t pk[PANE_KEY];
    pane_key(pk, key, last_start(w, ts) + slide_of(w));
    weir_state_prefetch_bytes(ctx, pk, sizeof pk, step);
    return;
  }
  for (int64_t s = last_start(w, ts); s > ts - w->w.length; s -= slide_of(w)) {
    state_key(k, key, s + w->w.length);
    weir_state_prefetch_bytes(ctx, k, sizeof k, step);
  }
}

/* Record by record as process, with the state of the records ahead on its
 * way into the cache: a table of many keys and windows misses the cache
 * at nearly every lookup (measured: ~2/3 of the window operator's time
 * went to the first load of a slot). */
static int win_process_batch(weir_ctx *ctx, const weir_batch *b) {
  const win *w = weir_ctx_arg(ctx);
  CHECK_LAYOUT(ctx, w);
  wsub *sub = w->ns ? weir_ctx_user(ctx) : NULL;
  for (uint32_t i = 0; i < b->len; i++) {
    if (i + PREFETCH_SLOT < b->len)
      win_prefetch(ctx, w, b->keys[i + PREFETCH_SLOT], b->ts[i + PREFETCH_SLOT], 0);
    if (i + PREFETCH_ENTRY < b->len)
      win_prefetch(ctx, w, b->keys[i + PREFETCH_ENTRY], b->ts[i + PREFETCH_ENTRY], 1);
    weir_record r = weir_batch_record(b, i);
    weir_state_select(ctx, r.key);
    weir_ctx_select_parent(ctx, r.id, r.ts);
    int rc = win_record(ctx, w, sub, &r);
    if (rc) return rc;
  }
  return sub ? ns_timers_flush(ctx, w, sub) : 0;
}

static const weir_operator_vt win_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "window",
                                        .open = win_open,
                                        .close = win_close,
                                        .process = win_process,
                                        .process_batch = win_process_batch,
                                        .on_timers = win_timers,
                                        .rescalable = 1};

/* What is wrong with spec w, or NULL. */
static const char *bad_window(const weir_window_spec *w) {
  if (w->kind != WEIR_WINDOW_TUMBLING && w->kind != WEIR_WINDOW_SLIDING &&
      w->kind != WEIR_WINDOW_SESSION)
    return "kind is not WEIR_WINDOW_TUMBLING, WEIR_WINDOW_SLIDING or WEIR_WINDOW_SESSION";
  if (w->time != WEIR_EVENT_TIME && w->time != WEIR_PROCESSING_TIME)
    return "time is not WEIR_EVENT_TIME or WEIR_PROCESSING_TIME";
  if (w->length <= 0) return "length must be positive";
  if (w->kind == WEIR_WINDOW_SLIDING && (w->slide <= 0 || w->slide > w->length))
    return "a sliding window needs 0 < slide <= length";
  if (w->allowed_lateness < 0) return "allowed_lateness must not be negative";
  if (w->kind == WEIR_WINDOW_SESSION && w->time != WEIR_EVENT_TIME)
    return "session windows are in event time";
  if (w->time == WEIR_PROCESSING_TIME &&
      (w->kind != WEIR_WINDOW_TUMBLING || w->allowed_lateness != 0))
    return "processing-time windows are tumbling, without lateness";
  return NULL;
}

/* What is wrong with spec w and aggregate agg, or NULL. */
static const char *bad_spec(const weir_window_spec *w, const weir_aggregate_vt *agg) {
  const char *why = bad_window(w);
  if (why) return why;
  if (!agg->init || !agg->add || !agg->result) return "the aggregate lacks init, add or result";
  if (w->kind == WEIR_WINDOW_SESSION && !agg->merge)
    return "session windows need an aggregate with merge (sessions merge their accumulators)";
  if (agg->acc_len == 0 || agg->acc_len > ACC_MAX)
    return "the aggregate's acc_len must be 1 .. 4096";
  return NULL;
}

/* The window operator with a (ours: it goes with the job) on s. */
static weir_stream *add_window(weir_job *job, weir_stream *s, const char *name, win *a,
                               int parallelism) {
  if (weir_job_adopt(job, a, weir_free)) {
    weir_free(a);
    return NULL;
  }
  static const char *const tags[] = {WEIR_TAG_LATE, WEIR_TAG_MISSED};
  weir_op_opts oo = {
      .size = sizeof oo,
      .flags = WEIR_OP_KEYED_STATE |
               (a->w.time == WEIR_EVENT_TIME ? WEIR_OP_EVENT_TIMERS : WEIR_OP_PROCESSING_TIMERS),
      .ntags = a->w.kind == WEIR_WINDOW_SLIDING ? 2 : 1,
      .tags = tags};
  return weir_process_opts(s, name, &win_vt, a, parallelism, &oo);
}

weir_stream *weir_window_aggregate(weir_stream *s, const char *name, const weir_window_spec *w,
                                   const weir_aggregate_vt *agg, void *user, int parallelism) {
  weir_job *job = weir_stream_job(s);
  if (!job) return NULL;
  /* An aggregate table from before merge existed is taken (without it). */
  if (!w || !agg || w->size < sizeof *w || agg->size < offsetof(weir_aggregate_vt, merge)) {
    weir_job_fail(job, WEIR_EPLAN, "weir_window_aggregate: window '%s': %s", name ? name : "?",
                  !w || !agg ? "spec or aggregate is NULL" : "spec or aggregate without its size");
    return NULL;
  }
  weir_aggregate_vt ag = {0};
  memcpy(&ag, agg, agg->size < sizeof ag ? agg->size : sizeof ag);
  const char *why = bad_spec(w, &ag);
  if (why) {
    weir_job_fail(job, WEIR_EPLAN, "weir_window_aggregate: window '%s': %s", name ? name : "?",
                  why);
    return NULL;
  }
  win *a = weir_calloc(1, sizeof *a);
  a->w = *w;
  a->agg = ag;
  a->user = user;
  a->panes = w->kind == WEIR_WINDOW_SLIDING && w->time == WEIR_EVENT_TIME && ag.merge &&
             w->length % w->slide == 0;
  a->ns = w->kind != WEIR_WINDOW_SESSION && ag.acc_len <= 8 &&
          (w->time != WEIR_EVENT_TIME || w->allowed_lateness == 0);
  return add_window(job, s, name, a, parallelism);
}

weir_stream *weir_window_apply(weir_stream *s, const char *name, const weir_window_spec *w,
                               weir_window_fn fn, void *user, int parallelism) {
  weir_job *job = weir_stream_job(s);
  if (!job) return NULL;
  const char *why = !w || w->size < sizeof *w ? "the spec is NULL or without its size"
                    : !fn                     ? "the window function is NULL"
                    : w->kind == WEIR_WINDOW_SESSION
                        ? "session windows take an aggregate (weir_window_aggregate)"
                        : bad_window(w);
  if (why) {
    weir_job_fail(job, WEIR_EPLAN, "weir_window_apply: window '%s': %s", name ? name : "?", why);
    return NULL;
  }
  win *a = weir_calloc(1, sizeof *a);
  a->w = *w;
  a->fn = fn;
  a->user = user;
  return add_window(job, s, name, a, parallelism);
}

int weir_window_missed_parse(const weir_record *r, weir_window_result *out) {
  if (!r || r->len < HEADER || !r->payload) return WEIR_EBADREC;
  const uint8_t *p = r->payload;
  out->start = (int64_t)weir__le_get64(p);
  out->end = (int64_t)weir__le_get64(p + 8);
  out->firing = weir__le_get32(p + 16);
  if (out->end <= out->start || out->firing != 0) return WEIR_EBADREC;
  out->value = r->len > HEADER ? p + HEADER : NULL;
  out->len = r->len - HEADER;
  return 0;
}

int weir_window_result_parse(const weir_record *r, weir_window_result *out) {
  if (!r || r->len < HEADER || !r->payload) return WEIR_EBADREC;
  const uint8_t *p = r->payload;
  out->start = (int64_t)weir__le_get64(p);
  out->end = (int64_t)weir__le_get64(p + 8);
  out->firing = weir__le_get32(p + 16);
  if (out->end <= out->start || out->firing == 0) return WEIR_EBADREC;
  out->value = p + HEADER;
  out->len = r->len - HEADER;
  return 0;
}

size_t weir_format_window(const weir_record *r, char *buf, size_t cap) {
  weir_window_result wr;
  int n;
  if (weir_window_result_parse(r, &wr) < 0)
    n = snprintf(buf, cap, "%llu ?", (unsigned long long)r->key);
  else if (wr.len == 8)
    n = snprintf(buf, cap, "%llu %lld %lld %llu", (unsigned long long)r->key, (long long)wr.start,
                 (long long)wr.end, (unsigned long long)weir__le_get64(wr.value));
  else
    n = snprintf(buf, cap, "%llu %lld %lld %.*s", (unsigned long long)r->key, (long long)wr.start,
                 (long long)wr.end, (int)wr.len, (const char *)wr.value);
  return n < 0 ? 0 : (size_t)n;
}

size_t weir_opid_window(const weir_record *r, char *buf, size_t cap) {
  weir_window_result wr;
  int n =
      weir_window_result_parse(r, &wr) < 0
          ? snprintf(buf, cap, "%llu.?.%llu", (unsigned long long)r->key, (unsigned long long)r->id)
          : snprintf(buf, cap, "%llu.%lld.%u", (unsigned long long)r->key, (long long)wr.end,
                     wr.firing);
  return n < 0 ? 0 : (size_t)n;
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
  weir__le_put64(acc, weir__le_get64(acc) + 1);
  return 0;
}
static int sum_add(void *user, void *acc, const weir_record *r) {
  (void)user;
  weir__le_put64(acc, weir__le_get64(acc) + weir_payload_u64(r));
  return 0;
}
static int min_add(void *user, void *acc, const weir_record *r) {
  (void)user;
  uint64_t v = weir_payload_u64(r);
  if (v < weir__le_get64(acc)) weir__le_put64(acc, v);
  return 0;
}
static int max_add(void *user, void *acc, const weir_record *r) {
  (void)user;
  uint64_t v = weir_payload_u64(r);
  if (v > weir__le_get64(acc)) weir__le_put64(acc, v);
  return 0;
}
static void sum_merge(void *user, void *acc, const void *other) {
  (void)user;
  weir__le_put64(acc, weir__le_get64(acc) + weir__le_get64(other));
}
static void min_merge(void *user, void *acc, const void *other) {
  (void)user;
  if (weir__le_get64(other) < weir__le_get64(acc)) weir__le_put64(acc, weir__le_get64(other));
}
static void max_merge(void *user, void *acc, const void *other) {
  (void)user;
  if (weir__le_get64(other) > weir__le_get64(acc)) weir__le_put64(acc, weir__le_get64(other));
}
static size_t u64_result(void *user, const void *acc, void *out, size_t cap) {
  (void)user;
  if (cap >= 8) memcpy(out, acc, 8); /* the accumulator is the u64, little-endian */
  return 8;
}

const weir_aggregate_vt weir_agg_count = {
    sizeof(weir_aggregate_vt), "count", 8, zero64, count_add, u64_result, sum_merge};
const weir_aggregate_vt weir_agg_sum_u64 = {
    sizeof(weir_aggregate_vt), "sum", 8, zero64, sum_add, u64_result, sum_merge};
const weir_aggregate_vt weir_agg_min_u64 = {
    sizeof(weir_aggregate_vt), "min", 8, ones64, min_add, u64_result, min_merge};
const weir_aggregate_vt weir_agg_max_u64 = {
    sizeof(weir_aggregate_vt), "max", 8, zero64, max_add, u64_result, max_merge};
