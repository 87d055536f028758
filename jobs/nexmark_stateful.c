/* jobs/nexmark_stateful.c: owns the Nexmark queries of the `nexmark` job
 * that need windows, timers, joins or aggregates across keys: q4 .. q12,
 * q15, q16 and q20 (jobs/nexmark.c owns the table, the flags and the
 * runs; docs/nexmark.md gives each query's semantics and line).
 *
 * DESIGN. Each query is written as a user of weir's public API would
 * write it, on the generator's events (weir/nexmark.h), whose record key
 * is already the person's id, the auction's id or the bid's auction:
 *
 * - Windows: q5 (sliding 10 s by 2 s, bids per auction) and q11 (sessions
 *   of 10 s per bidder) are weir_window_aggregate with the built-in
 *   count; q12 the same in processing time, tumbling 10 s. q5's "auctions
 *   with the most bids per window" re-keys the window results by window
 *   end into an operator that keeps the largest count and the auctions
 *   that have it, and writes them at an event-time timer at end - 1: the
 *   window operator fires a window before the watermark that fired it
 *   goes on, so every result of the window is in when the timer fires.
 * - q7 (the bids of a 10 s tumbling window with its highest price, the
 *   SQL's B.dateTime BETWEEN end - 10 s AND end, both ends included)
 *   keys bids by window and keeps only the highest price and the bids
 *   that have it; a bid at exactly a window's end is also offered to
 *   the window before (it does not count in that window's maximum, but
 *   is written with it if its price equals it); a timer at the end
 *   writes and purges.
 * - q8 (persons who opened auctions in the 10 s window they registered
 *   in) routes persons and auctions with one map into one operator keyed
 *   by the person's id (a two-input operator would read each source
 *   batch twice), one entry per (person, window) with the name and a
 *   flag, written and purged at the window's timer: a person with
 *   several auctions in the window is written once, as the SQL's GROUP
 *   BY makes it.
 * - q4, q6, q9 share the winning-bid core: auctions and bids keyed by
 *   auction into one two-input operator. An auction keeps its best bid
 *   among those with date_time BETWEEN the auction's date_time AND its
 *   expires; an event-time timer at expires closes it (no bid that
 *   qualifies can come after the watermark passed expires), writes the
 *   winner, and leaves a small tombstone so that later bids for the
 *   auction are dropped at once; the tombstone goes at expires + twice
 *   the auction's length (later bids then take the path below, which is
 *   slower but as exact). A bid whose auction has not come yet waits in
 *   a list, dropped at a timer at the bid's date_time if the auction
 *   has still not come by then (an auction that could take the bid has
 *   a date_time at or before it, so it would have come). q9 writes the
 *   winner with both events' fields; q4 sends (category, price) to a
 *   per-category average, q6 (seller, expires, auction, price) to a
 *   per-seller "last 10" list; both write their final result per key at
 *   the end of the input.
 * - q15, q16: per day (and channel) counts and distinct counts of
 *   bidders and auctions, overall and per price rank; one entry per
 *   group with the counters, one namespaced u64 per (group, bidder) and
 *   (group, auction) with a bitmask of the ranks seen, so that a
 *   distinct count is a counter bumped on the first sighting; final per
 *   group at the end of the input.
 * - q20, the regular join of bids with auctions of category 10, is q3's
 *   shape: an auction is kept as its text (or an empty marker for
 *   another category), bids that come first wait for it.
 * - q10 is stateless: every bid with its partition (dt, hm) in the line.
 *
 * Ties are broken by event number, never by arrival, so no result
 * depends on the parallelism or on a restore.
 */
#include "nexmark_queries.h"

#include "base/alloc.h"

#include <stdio.h>
#include <string.h>

/* ---- events ------------------------------------------------------------------ */

static int nx_parse(weir_ctx *ctx, const void *payload, size_t len, weir_nexmark_event *ev) {
  if (weir_nexmark_parse(payload, len, ev) == 0) return 0;
  return weir_ctx_fail(ctx, WEIR_EBADREC, "not a Nexmark event (%zu bytes)", len);
}

/* Parses r if it is an event of `kind`: 1, 0 for another kind, or an error. */
static int event_of(weir_ctx *ctx, const weir_record *r, int kind, weir_nexmark_event *ev) {
  if (weir_nexmark_kind(r->payload, r->len) != kind) return 0;
  int rc = nx_parse(ctx, r->payload, r->len, ev);
  return rc < 0 ? rc : 1;
}

static int is_bid(void *user, const weir_record *r) {
  (void)user;
  return weir_nexmark_kind(r->payload, r->len) == WEIR_NEXMARK_BID;
}

static int is_auction(void *user, const weir_record *r) {
  (void)user;
  return weir_nexmark_kind(r->payload, r->len) == WEIR_NEXMARK_AUCTION;
}

/* A state key: a tag and a 64-bit id (byte-string state is one map per
 * subtask, so the id that owns an entry is in its name). */
static void tag_key(uint8_t k[9], char tag, uint64_t id) {
  k[0] = (uint8_t)tag;
  memcpy(k + 1, &id, 8);
}

static const weir_op_opts event_timers = {.size = sizeof(weir_op_opts),
                                          .flags = WEIR_OP_EVENT_TIMERS | WEIR_OP_KEYED_STATE};
static const weir_op_opts keyed_state = {.size = sizeof(weir_op_opts),
                                         .flags = WEIR_OP_KEYED_STATE};

/* q10's fields of a bid: bidder, price, date_time, extra. */
static void bid_text(nx_line *l, const weir_nexmark_event *ev) {
  const weir_nexmark_bid *b = &ev->u.bid;
  nx_i64(l, b->bidder);
  nx_ci64(l, b->price);
  nx_ci64(l, b->date_time);
  nx_c(l, ',');
  nx_str(l, &ev->s[2]);
}

/* ---- q5: hot items ----------------------------------------------------------- */

#define Q5_SIZE 10000
#define Q5_SLIDE 2000

/* A window's count of one auction, re-keyed by the window's end. */
typedef struct q5_count {
  uint64_t auction, count;
  int64_t start;
} q5_count;

static int q5_by_window(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_window_result w;
  if (weir_window_result_parse(r, &w) < 0 || w.len != 8)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q5: not a window count (%u bytes)", (unsigned)r->len);
  q5_count c = {r->key, 0, w.start};
  const uint8_t *p = w.value;
  for (int i = 7; i >= 0; i--) c.count = (c.count << 8) | p[i]; /* little-endian u64 */
  return weir_emit(ctx, (uint64_t)w.end, &c, sizeof c);
}

/* Per window end: [max u64][start i64][the auctions with max, u64 each]. */
static int q5_process(weir_ctx *ctx, const weir_record *r) {
  q5_count c;
  if (r->len != sizeof c)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q5: a count of %u bytes", (unsigned)r->len);
  memcpy(&c, r->payload, sizeof c);
  uint8_t k[9];
  tag_key(k, 'M', r->key);
  const void *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  uint64_t max = 0;
  if (rc == 1) {
    if (vn < 24) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q5: a short state entry");
    memcpy(&max, v, 8);
    if (c.count < max) return 0;
  }
  if (rc == 0 || c.count > max) {
    uint64_t e[3] = {c.count, (uint64_t)c.start, c.auction};
    rc = weir_state_put_bytes(ctx, k, sizeof k, e, sizeof e);
    if (rc < 0) return rc;
    return weir_timer_register(ctx, WEIR_EVENT_TIME, (int64_t)r->key - 1);
  }
  void *w;
  rc = weir_state_update_bytes(ctx, k, sizeof k, vn + 8, &w, NULL);
  if (rc < 0) return rc;
  memcpy((uint8_t *)w + vn, &c.auction, 8);
  return 0;
}

static int q5_on_timer(weir_ctx *ctx, const weir_timer *t) {
  uint8_t k[9];
  tag_key(k, 'M', t->key);
  const uint8_t *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, (const void **)&v, &vn);
  if (rc <= 0) return rc;
  if (vn < 24 || vn % 8) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q5: a damaged state entry");
  uint64_t max;
  int64_t start;
  memcpy(&max, v, 8);
  memcpy(&start, v + 8, 8);
  for (size_t at = 16; at < vn && rc >= 0; at += 8) {
    uint64_t auction;
    memcpy(&auction, v + at, 8);
    nx_line l;
    l.n = 0;
    nx_u64(&l, max);
    nx_ci64(&l, start);
    nx_ci64(&l, (int64_t)t->key);
    rc = nx_emit(ctx, auction, &l);
  }
  if (rc < 0) return rc;
  return weir_state_del_bytes(ctx, k, sizeof k);
}

static const weir_operator_vt q5_vt = {
    .size = sizeof(weir_operator_vt), .name = "q5", .process = q5_process, .on_timer = q5_on_timer};

int nx_q5_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_stream *bids = weir_filter(src, "q5-bids", is_bid, NULL, p);
  weir_window_spec w = {.size = sizeof w,
                        .kind = WEIR_WINDOW_SLIDING,
                        .time = WEIR_EVENT_TIME,
                        .length = Q5_SIZE,
                        .slide = Q5_SLIDE};
  weir_stream *counts =
      weir_window_aggregate(weir_key_by(bids), "q5-window", &w, &weir_agg_count, NULL, p);
  weir_stream *by_window = weir_flat_map(counts, "q5-by-window", q5_by_window, NULL, p);
  *out = weir_process_opts(weir_key_by(by_window), "q5", &q5_vt, NULL, p, &event_timers);
  return 0;
}

/* ---- q7: highest bids -------------------------------------------------------- */

#define Q7_SIZE 10000

/* Bids keyed by their window's index; a bid at exactly a window's start
 * also goes to the window before, whose end it is. */
static int q7_bids(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  if (weir_nexmark_kind(r->payload, r->len) != WEIR_NEXMARK_BID) return 0;
  int64_t w = nx_floor_div(r->ts, Q7_SIZE);
  int rc = weir_emit(ctx, (uint64_t)w, r->payload, r->len);
  if (rc < 0 || r->ts != w * Q7_SIZE) return rc;
  return weir_emit(ctx, (uint64_t)(w - 1), r->payload, r->len);
}

/* Appends [u32 len][payload] to entry k (made if absent); 1 if it was
 * made. */
static int append_payload(weir_ctx *ctx, const uint8_t *k, size_t klen, const void *payload,
                          uint32_t len) {
  const void *v;
  size_t vn = 0;
  int rc = weir_state_get_bytes(ctx, k, klen, &v, &vn);
  if (rc < 0) return rc;
  int made = rc == 0;
  if (made) vn = 0;
  void *w;
  rc = weir_state_update_bytes(ctx, k, klen, vn + 4 + len, &w, NULL);
  if (rc < 0) return rc;
  memcpy((uint8_t *)w + vn, &len, 4);
  memcpy((uint8_t *)w + vn + 4, payload, len);
  return made;
}

/* Per window w: 'M' [max price i64][n u32][0 u32] then n bids with that
 * price ([u32 len][payload]); 'E' the bids at the window's end, with
 * [u32 len][payload] each. */
static int q7_process(weir_ctx *ctx, const weir_record *r) {
  weir_nexmark_bid b;
  if (r->len < sizeof b || weir_nexmark_kind(r->payload, r->len) != WEIR_NEXMARK_BID)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q7: not a bid (%u bytes)", (unsigned)r->len);
  memcpy(&b, r->payload, sizeof b);
  int64_t w = (int64_t)r->key, end = (w + 1) * Q7_SIZE;
  uint8_t k[9];
  int rc;
  if (b.date_time == end) {
    tag_key(k, 'E', r->key);
    rc = append_payload(ctx, k, sizeof k, r->payload, r->len);
    return rc == 1 ? weir_timer_register(ctx, WEIR_EVENT_TIME, end) : rc;
  }
  tag_key(k, 'M', r->key);
  const void *v;
  size_t vn;
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  int64_t max = 0;
  if (rc == 1) {
    if (vn < 16) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q7: a short state entry");
    memcpy(&max, v, 8);
    if (b.price < max) return 0;
  }
  if (rc == 0 || b.price > max) {
    void *nw;
    int made = rc == 0;
    rc = weir_state_update_bytes(ctx, k, sizeof k, 16 + 4 + r->len, &nw, NULL);
    if (rc < 0) return rc;
    uint8_t *p = nw;
    uint32_t n = 1, zero = 0, len = r->len;
    memcpy(p, &b.price, 8);
    memcpy(p + 8, &n, 4);
    memcpy(p + 12, &zero, 4);
    memcpy(p + 16, &len, 4);
    memcpy(p + 20, r->payload, len);
    return made ? weir_timer_register(ctx, WEIR_EVENT_TIME, end) : 0;
  }
  /* Another bid at the maximum: appended, and counted. */
  void *nw;
  rc = weir_state_update_bytes(ctx, k, sizeof k, vn + 4 + r->len, &nw, NULL);
  if (rc < 0) return rc;
  uint8_t *p = nw;
  uint32_t n, len = r->len;
  memcpy(&n, p + 8, 4);
  n++;
  memcpy(p + 8, &n, 4);
  memcpy(p + vn, &len, 4);
  memcpy(p + vn + 4, r->payload, len);
  return 0;
}

/* Writes the bids of a [u32 len][payload] list with price max (any price
 * when all), as "<auction> <price>,<bidder>,<date_time>,<extra>,<end>". */
static int q7_write(weir_ctx *ctx, const uint8_t *v, size_t vn, size_t at, int all, int64_t max,
                    int64_t end) {
  while (at < vn) {
    uint32_t len;
    if (at + 4 > vn || (memcpy(&len, v + at, 4), len > vn - at - 4))
      return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q7: a damaged state entry");
    weir_nexmark_event ev;
    int rc = nx_parse(ctx, v + at + 4, len, &ev);
    if (rc < 0) return rc;
    const weir_nexmark_bid *b = &ev.u.bid;
    if (all || b->price == max) {
      nx_line l;
      l.n = 0;
      nx_i64(&l, b->price);
      nx_ci64(&l, b->bidder);
      nx_ci64(&l, b->date_time);
      nx_c(&l, ',');
      nx_str(&l, &ev.s[2]);
      nx_ci64(&l, end);
      rc = nx_emit(ctx, (uint64_t)b->auction, &l);
      if (rc < 0) return rc;
    }
    at += 4 + len;
  }
  return 0;
}

static int q7_on_timer(weir_ctx *ctx, const weir_timer *t) {
  int64_t end = t->ts;
  uint8_t k[9];
  tag_key(k, 'M', t->key);
  const uint8_t *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, (const void **)&v, &vn);
  if (rc < 0) return rc;
  int has = rc == 1;
  int64_t max = 0;
  if (has) {
    if (vn < 16) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q7: a short state entry");
    memcpy(&max, v, 8);
    rc = q7_write(ctx, v, vn, 16, 1, max, end);
    if (rc < 0) return rc;
    rc = weir_state_del_bytes(ctx, k, sizeof k);
    if (rc < 0) return rc;
  }
  tag_key(k, 'E', t->key);
  rc = weir_state_get_bytes(ctx, k, sizeof k, (const void **)&v, &vn);
  if (rc <= 0) return rc;
  /* A window without bids of its own has no maximum: its end's bids
   * match nothing. */
  if (has) rc = q7_write(ctx, v, vn, 0, 0, max, end);
  if (rc < 0) return rc;
  return weir_state_del_bytes(ctx, k, sizeof k);
}

static const weir_operator_vt q7_vt = {
    .size = sizeof(weir_operator_vt), .name = "q7", .process = q7_process, .on_timer = q7_on_timer};

int nx_q7_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_stream *bids = weir_flat_map(src, "q7-bids", q7_bids, NULL, p);
  *out = weir_process_opts(weir_key_by(bids), "q7", &q7_vt, NULL, p, &event_timers);
  return 0;
}

/* ---- q8: new users --------------------------------------------------------------- */

#define Q8_SIZE 10000

/* Persons and auctions, routed by one map (one pass over each source
 * batch; a connect of two maps, one per kind, cost 30% more CPU per event
 * on 5M events) and keyed by the person's id: a person as 'P' and its
 * name, an auction as 'A' keyed by its seller. The window comes from the
 * record's time. */
static int q8_route(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  int kind = weir_nexmark_kind(r->payload, r->len);
  if (kind != WEIR_NEXMARK_PERSON && kind != WEIR_NEXMARK_AUCTION) return 0;
  weir_nexmark_event ev;
  int rc = nx_parse(ctx, r->payload, r->len, &ev);
  if (rc < 0) return rc;
  if (kind == WEIR_NEXMARK_AUCTION) return weir_emit(ctx, (uint64_t)ev.u.auction.seller, "A", 1);
  uint8_t out[1 + WEIR_NEXMARK_MAX_EVENT];
  if (ev.s[0].len > WEIR_NEXMARK_MAX_EVENT)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q8: a name of %u bytes", (unsigned)ev.s[0].len);
  out[0] = 'P';
  memcpy(out + 1, ev.s[0].p, ev.s[0].len);
  return weir_emit(ctx, (uint64_t)ev.u.person.id, out, 1 + (size_t)ev.s[0].len);
}

/* Per (person, window): [has person u8][has auction u8][0 u16][0 u32]
 * then the person's name. */
static void q8_key(uint8_t k[17], uint64_t id, int64_t w) {
  k[0] = 'W';
  memcpy(k + 1, &id, 8);
  memcpy(k + 9, &w, 8);
}

static int q8_process(weir_ctx *ctx, const weir_record *r) {
  const uint8_t *in = r->payload;
  if (r->len < 1 || (in[0] != 'P' && in[0] != 'A'))
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q8: not a routed person or auction");
  int64_t w = nx_floor_div(r->ts, Q8_SIZE);
  uint8_t k[17];
  q8_key(k, r->key, w);
  const void *v;
  size_t vn = 0;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 1 && vn < 8) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q8: a short state entry");
  int made = rc == 0;
  if (in[0] == 'A' && !made && ((const uint8_t *)v)[1]) return 0; /* seen already */
  /* A person's entry grows by the name; an auction keeps what is there. */
  size_t len = in[0] == 'P' ? 8 + (r->len - 1) : made ? 8 : vn;
  void *nw;
  rc = weir_state_update_bytes(ctx, k, sizeof k, len, &nw, NULL);
  if (rc < 0) return rc;
  uint8_t *p = nw;
  if (in[0] == 'P') {
    p[0] = 1;
    memcpy(p + 8, in + 1, r->len - 1);
  } else {
    p[1] = 1;
  }
  return made ? weir_timer_register(ctx, WEIR_EVENT_TIME, (w + 1) * Q8_SIZE - 1) : 0;
}

static int q8_on_timer(weir_ctx *ctx, const weir_timer *t) {
  int64_t w = nx_floor_div(t->ts + 1, Q8_SIZE) - 1;
  uint8_t k[17];
  q8_key(k, t->key, w);
  const uint8_t *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, (const void **)&v, &vn);
  if (rc <= 0) return rc;
  if (vn < 8) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q8: a short state entry");
  if (v[0] && v[1]) {
    nx_line l;
    l.n = 0;
    nx_mem(&l, v + 8, vn - 8);
    nx_ci64(&l, w * Q8_SIZE);
    rc = nx_emit(ctx, t->key, &l);
    if (rc < 0) return rc;
  }
  return weir_state_del_bytes(ctx, k, sizeof k);
}

static const weir_operator_vt q8_vt = {
    .size = sizeof(weir_operator_vt), .name = "q8", .process = q8_process, .on_timer = q8_on_timer};

int nx_q8_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_stream *routed = weir_flat_map(src, "q8-route", q8_route, NULL, p);
  *out = weir_process_opts(weir_key_by(routed), "q8", &q8_vt, NULL, p, &event_timers);
  return 0;
}

/* ---- q4, q6, q9: winning bids -------------------------------------------------- */

enum { WB_Q4, WB_Q6, WB_Q9 };
static const int wb_q4 = WB_Q4, wb_q6 = WB_Q6, wb_q9 = WB_Q9;

/* 'A' + auction: the auction while open (and a tombstone once closed). */
typedef struct wb_auction {
  int64_t date_time, expires, seller, category;
  int64_t best_price, best_ts;
  uint64_t best_event;
  uint32_t closed, has_best;
} wb_auction;

/* 'B' + auction: bids that came before their auction, each
 * [ts i64][price i64][event u64][len u32][0 u32] then (q9) the payload. */
typedef struct wb_pending {
  int64_t ts, price;
  uint64_t event;
  uint32_t len, zero;
} wb_pending;

/* 'P' + auction (q9): the auction's payload while open; 'W' + auction
 * (q9): its best bid's payload. */

/* The bid beats the auction's best so far: a higher price, then the
 * earlier date_time, then the smaller event number. */
static int wb_better(const wb_auction *a, int64_t price, int64_t ts, uint64_t event) {
  if (!a->has_best) return 1;
  if (price != a->best_price) return price > a->best_price;
  if (ts != a->best_ts) return ts < a->best_ts;
  return event < a->best_event;
}

/* Offers a bid to the open auction *a (a local copy, written back by the
 * caller); q9 stores the payload of a new best. */
static int wb_offer(weir_ctx *ctx, int mode, uint64_t id, wb_auction *a, int64_t price, int64_t ts,
                    uint64_t event, const void *payload, uint32_t len) {
  if (ts < a->date_time || ts > a->expires || !wb_better(a, price, ts, event)) return 0;
  a->best_price = price;
  a->best_ts = ts;
  a->best_event = event;
  a->has_best = 1;
  if (mode != WB_Q9) return 0;
  uint8_t k[9];
  tag_key(k, 'W', id);
  return weir_state_put_bytes(ctx, k, sizeof k, payload, len);
}

static int wb_auction_in(weir_ctx *ctx, const weir_record *r) {
  int mode = *(const int *)weir_ctx_arg(ctx);
  weir_nexmark_event ev;
  int rc = event_of(ctx, r, WEIR_NEXMARK_AUCTION, &ev);
  if (rc <= 0) return rc < 0 ? rc : weir_ctx_fail(ctx, WEIR_EBADREC, "not an auction");
  const weir_nexmark_auction *x = &ev.u.auction;
  uint64_t id = (uint64_t)x->id;
  wb_auction a = {.date_time = x->date_time,
                  .expires = x->expires,
                  .seller = x->seller,
                  .category = x->category};
  uint8_t k[9];
  if (mode == WB_Q9) {
    tag_key(k, 'P', id);
    rc = weir_state_put_bytes(ctx, k, sizeof k, r->payload, r->len);
    if (rc < 0) return rc;
  }
  /* The bids that came first: offered now, in a copy (the list's bytes
   * are valid only until the next state call). */
  tag_key(k, 'B', id);
  const void *v;
  size_t vn;
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 1) {
    uint8_t *list = weir_malloc(vn ? vn : 1);
    memcpy(list, v, vn);
    rc = weir_state_del_bytes(ctx, k, sizeof k);
    for (size_t at = 0; rc >= 0 && at < vn;) {
      wb_pending e;
      if (vn - at < sizeof e || (memcpy(&e, list + at, sizeof e), e.len > vn - at - sizeof e)) {
        rc = weir_ctx_fail(ctx, WEIR_ECORRUPT, "winning bids: a damaged list of bids");
        break;
      }
      rc = wb_offer(ctx, mode, id, &a, e.price, e.ts, e.event, list + at + sizeof e, e.len);
      at += sizeof e + e.len;
    }
    weir_free(list);
    if (rc < 0) return rc;
  }
  tag_key(k, 'A', id);
  rc = weir_state_put_bytes(ctx, k, sizeof k, &a, sizeof a);
  if (rc < 0) return rc;
  return weir_timer_register(ctx, WEIR_EVENT_TIME, a.expires);
}

static int wb_bid_in(weir_ctx *ctx, const weir_record *r) {
  int mode = *(const int *)weir_ctx_arg(ctx);
  weir_nexmark_bid b;
  if (r->len < sizeof b || weir_nexmark_kind(r->payload, r->len) != WEIR_NEXMARK_BID)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "winning bids: not a bid (%u bytes)", (unsigned)r->len);
  memcpy(&b, r->payload, sizeof b);
  uint64_t id = (uint64_t)b.auction;
  uint8_t k[9];
  tag_key(k, 'A', id);
  const void *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 1) {
    wb_auction a;
    if (vn != sizeof a) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "winning bids: a damaged auction");
    memcpy(&a, v, sizeof a);
    if (a.closed || b.date_time < a.date_time || b.date_time > a.expires ||
        !wb_better(&a, b.price, b.date_time, b.event))
      return 0;
    rc = wb_offer(ctx, mode, id, &a, b.price, b.date_time, b.event, r->payload, r->len);
    if (rc < 0) return rc;
    return weir_state_put_bytes(ctx, k, sizeof k, &a, sizeof a);
  }
  /* Its auction has not come (yet): the bid waits until the clock passes
   * its date_time. */
  tag_key(k, 'B', id);
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 0) vn = 0;
  wb_pending e = {b.date_time, b.price, b.event, mode == WB_Q9 ? r->len : 0, 0};
  void *w;
  rc = weir_state_update_bytes(ctx, k, sizeof k, vn + sizeof e + e.len, &w, NULL);
  if (rc < 0) return rc;
  memcpy((uint8_t *)w + vn, &e, sizeof e);
  if (e.len) memcpy((uint8_t *)w + vn + sizeof e, r->payload, e.len);
  return weir_timer_register(ctx, WEIR_EVENT_TIME, b.date_time);
}

/* q9's line: the auction's fields, then the winning bid's. */
static int q9_write(weir_ctx *ctx, uint64_t id) {
  uint8_t k[9], auction[WEIR_NEXMARK_MAX_EVENT];
  const void *v;
  size_t vn;
  tag_key(k, 'P', id);
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 0 || vn > sizeof auction)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q9: auction %llu was not kept",
                         (unsigned long long)id);
  memcpy(auction, v, vn);
  weir_nexmark_event a, b;
  rc = nx_parse(ctx, auction, vn, &a);
  if (rc < 0) return rc;
  tag_key(k, 'W', id);
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 0) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q9: the winning bid was not kept");
  rc = nx_parse(ctx, v, vn, &b);
  if (rc < 0) return rc;
  const weir_nexmark_auction *x = &a.u.auction;
  nx_line l;
  l.n = 0;
  nx_str(&l, &a.s[0]);
  nx_c(&l, ',');
  nx_str(&l, &a.s[1]);
  nx_ci64(&l, x->initial_bid);
  nx_ci64(&l, x->reserve);
  nx_ci64(&l, x->date_time);
  nx_ci64(&l, x->expires);
  nx_ci64(&l, x->seller);
  nx_ci64(&l, x->category);
  nx_c(&l, ',');
  nx_str(&l, &a.s[2]);
  nx_ci64(&l, b.u.bid.bidder);
  nx_ci64(&l, b.u.bid.price);
  nx_ci64(&l, b.u.bid.date_time);
  nx_c(&l, ',');
  nx_str(&l, &b.s[2]);
  return nx_emit(ctx, id, &l);
}

/* What q6's per-seller list receives of a closed auction. */
typedef struct q6_closed {
  int64_t expires, auction, price;
} q6_closed;

static int wb_close(weir_ctx *ctx, int mode, uint64_t id, const wb_auction *a) {
  if (!a->has_best) return 0;
  if (mode == WB_Q4) return weir_emit_u64(ctx, (uint64_t)a->category, (uint64_t)a->best_price);
  if (mode == WB_Q6) {
    q6_closed c = {a->expires, (int64_t)id, a->best_price};
    return weir_emit(ctx, (uint64_t)a->seller, &c, sizeof c);
  }
  return q9_write(ctx, id);
}

static int wb_on_timer(weir_ctx *ctx, const weir_timer *t) {
  int mode = *(const int *)weir_ctx_arg(ctx);
  uint64_t id = t->key;
  uint8_t k[9];
  tag_key(k, 'A', id);
  const void *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 1) {
    wb_auction a;
    if (vn != sizeof a) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "winning bids: a damaged auction");
    memcpy(&a, v, sizeof a);
    /* Kept after it closed for twice its length, to drop its late bids. */
    int64_t purge = a.expires + 2 * (a.expires - a.date_time) + 1;
    if (!a.closed && t->ts >= a.expires) {
      rc = wb_close(ctx, mode, id, &a);
      if (rc < 0) return rc;
      a.closed = 1;
      rc = weir_state_put_bytes(ctx, k, sizeof k, &a, sizeof a);
      if (rc >= 0 && mode == WB_Q9) {
        tag_key(k, 'P', id);
        rc = weir_state_del_bytes(ctx, k, sizeof k);
        tag_key(k, 'W', id);
        if (rc >= 0) rc = weir_state_del_bytes(ctx, k, sizeof k);
      }
      if (rc < 0) return rc;
      return weir_timer_register(ctx, WEIR_EVENT_TIME, purge);
    }
    if (a.closed && t->ts >= purge) return weir_state_del_bytes(ctx, k, sizeof k);
    return 0;
  }
  /* No auction: the waiting bids up to the clock can no longer meet it. */
  tag_key(k, 'B', id);
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc <= 0) return rc;
  const uint8_t *list = v;
  uint8_t *keep = weir_malloc(vn ? vn : 1);
  size_t kn = 0;
  for (size_t at = 0; at < vn;) {
    wb_pending e;
    if (vn - at < sizeof e || (memcpy(&e, list + at, sizeof e), e.len > vn - at - sizeof e)) {
      weir_free(keep);
      return weir_ctx_fail(ctx, WEIR_ECORRUPT, "winning bids: a damaged list of bids");
    }
    if (e.ts > t->ts) {
      memcpy(keep + kn, list + at, sizeof e + e.len);
      kn += sizeof e + e.len;
    }
    at += sizeof e + e.len;
  }
  rc = kn ? weir_state_put_bytes(ctx, k, sizeof k, keep, kn)
          : weir_state_del_bytes(ctx, k, sizeof k);
  weir_free(keep);
  return rc;
}

static const weir_operator_vt wb_vt = {.size = sizeof(weir_operator_vt),
                                       .name = "winning-bids",
                                       .process = wb_auction_in,
                                       .process2 = wb_bid_in,
                                       .on_timer = wb_on_timer};

static weir_stream *winning_bids(weir_stream *src, const char *name, const int *mode, int p) {
  char an[32], bn[32];
  snprintf(an, sizeof an, "%s-auctions", name);
  snprintf(bn, sizeof bn, "%s-bids", name);
  weir_stream *auctions = weir_filter(src, an, is_auction, NULL, p);
  weir_stream *bids = weir_filter(src, bn, is_bid, NULL, p);
  return weir_connect(weir_key_by(auctions), weir_key_by(bids), name, &wb_vt, (void *)mode, p,
                      &event_timers);
}

/* q4's average per category: 'C' + category -> [sum i64][count u64]. */
static int q4_process(weir_ctx *ctx, const weir_record *r) {
  uint8_t k[9];
  tag_key(k, 'C', r->key);
  void *v;
  int rc = weir_state_update_bytes(ctx, k, sizeof k, 16, &v, NULL);
  if (rc < 0) return rc;
  int64_t acc[2];
  memcpy(acc, v, sizeof acc);
  acc[0] += (int64_t)weir_payload_u64(r);
  acc[1]++;
  memcpy(v, acc, sizeof acc);
  return 0;
}

static int q4_each(void *user, uint64_t record_key, const void *k, size_t klen, const void *v,
                   size_t vlen) {
  weir_ctx *ctx = user;
  (void)k;
  if (klen != 9 || vlen != 16)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q4: a state entry of %zu/%zu bytes", klen, vlen);
  int64_t acc[2];
  memcpy(acc, v, sizeof acc);
  nx_line l;
  l.n = 0;
  nx_i64(&l, acc[0] / acc[1]); /* AVG(BIGINT) truncates */
  return nx_emit(ctx, record_key, &l);
}

static int q4_finish(weir_ctx *ctx) {
  return weir_state_each_bytes(ctx, q4_each, ctx);
}

static const weir_operator_vt q4_vt = {
    .size = sizeof(weir_operator_vt), .name = "q4", .process = q4_process, .finish = q4_finish};

int nx_q4_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_stream *winners = winning_bids(src, "q4-winning", &wb_q4, p);
  *out = weir_process_opts(weir_key_by(winners), "q4", &q4_vt, NULL, p, &keyed_state);
  return 0;
}

/* q6's last 10 closed auctions per seller (by expires, then auction id):
 * 'S' + seller -> up to Q6_LAST q6_closed, in no order. */
#define Q6_LAST 10

static int q6_later(const q6_closed *a, const q6_closed *b) {
  return a->expires != b->expires ? a->expires > b->expires : a->auction > b->auction;
}

static int q6_process(weir_ctx *ctx, const weir_record *r) {
  q6_closed c;
  if (r->len != sizeof c)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q6: a closed auction of %u bytes", (unsigned)r->len);
  memcpy(&c, r->payload, sizeof c);
  uint8_t k[9];
  tag_key(k, 'S', r->key);
  const void *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 0) vn = 0;
  if (vn % sizeof c || vn > Q6_LAST * sizeof c)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q6: a damaged list");
  size_t n = vn / sizeof c;
  if (n < Q6_LAST) {
    void *w;
    rc = weir_state_update_bytes(ctx, k, sizeof k, vn + sizeof c, &w, NULL);
    if (rc < 0) return rc;
    memcpy((uint8_t *)w + vn, &c, sizeof c);
    return 0;
  }
  /* Full: the new one replaces the earliest if it is later. */
  q6_closed l[Q6_LAST];
  memcpy(l, v, sizeof l);
  size_t min = 0;
  for (size_t i = 1; i < n; i++)
    if (q6_later(&l[min], &l[i])) min = i;
  if (!q6_later(&c, &l[min])) return 0;
  l[min] = c;
  return weir_state_put_bytes(ctx, k, sizeof k, l, sizeof l);
}

static int q6_each(void *user, uint64_t record_key, const void *k, size_t klen, const void *v,
                   size_t vlen) {
  weir_ctx *ctx = user;
  (void)k, (void)klen;
  if (vlen == 0 || vlen % sizeof(q6_closed) || vlen > Q6_LAST * sizeof(q6_closed))
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q6: a state entry of %zu bytes", vlen);
  q6_closed l[Q6_LAST];
  memcpy(l, v, vlen);
  size_t n = vlen / sizeof l[0];
  int64_t sum = 0;
  for (size_t i = 0; i < n; i++) sum += l[i].price;
  nx_line o;
  o.n = 0;
  nx_i64(&o, sum / (int64_t)n); /* AVG(BIGINT) truncates */
  nx_ci64(&o, (int64_t)n);
  return nx_emit(ctx, record_key, &o);
}

static int q6_finish(weir_ctx *ctx) {
  return weir_state_each_bytes(ctx, q6_each, ctx);
}

static const weir_operator_vt q6_vt = {
    .size = sizeof(weir_operator_vt), .name = "q6", .process = q6_process, .finish = q6_finish};

int nx_q6_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_stream *winners = winning_bids(src, "q6-winning", &wb_q6, p);
  *out = weir_process_opts(weir_key_by(winners), "q6", &q6_vt, NULL, p, &keyed_state);
  return 0;
}

int nx_q9_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  *out = winning_bids(src, "q9", &wb_q9, p);
  return 0;
}

/* ---- q10: every bid with its partition ----------------------------------------- */

static int q10_fn(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_nexmark_event ev;
  int rc = event_of(ctx, r, WEIR_NEXMARK_BID, &ev);
  if (rc <= 0) return rc;
  nx_line l;
  l.n = 0;
  bid_text(&l, &ev);
  nx_c(&l, ',');
  nx_day(&l, nx_floor_div(ev.u.bid.date_time, 86400000));
  nx_c(&l, ',');
  nx_hhmm(&l, ev.u.bid.date_time);
  return nx_emit(ctx, (uint64_t)ev.u.bid.auction, &l);
}

int nx_q10_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  *out = weir_flat_map(src, "q10", q10_fn, NULL, p);
  return 0;
}

/* ---- q11, q12: bids per bidder and session / processing-time window --------------- */

static int by_bidder(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_nexmark_bid b;
  if (weir_nexmark_kind(r->payload, r->len) != WEIR_NEXMARK_BID) return 0;
  if (r->len < sizeof b)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "not a bid (%u bytes)", (unsigned)r->len);
  memcpy(&b, r->payload, sizeof b);
  static const char none[1];
  return weir_emit(ctx, (uint64_t)b.bidder, none, 0);
}

/* A window's count as "<key> <count>,<start>,<end>". */
static int count_line(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_window_result w;
  if (weir_window_result_parse(r, &w) < 0 || w.len != 8)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "not a window count (%u bytes)", (unsigned)r->len);
  uint64_t n = 0;
  const uint8_t *p = w.value;
  for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];
  nx_line l;
  l.n = 0;
  nx_u64(&l, n);
  nx_ci64(&l, w.start);
  nx_ci64(&l, w.end);
  return nx_emit(ctx, r->key, &l);
}

static weir_stream *bidder_windows(weir_stream *src, const char *name, const weir_window_spec *w,
                                   int p) {
  char n[32];
  snprintf(n, sizeof n, "%s-bidders", name);
  weir_stream *bidders = weir_flat_map(src, n, by_bidder, NULL, p);
  snprintf(n, sizeof n, "%s-window", name);
  weir_stream *counts = weir_window_aggregate(weir_key_by(bidders), n, w, &weir_agg_count, NULL, p);
  return weir_flat_map(counts, name, count_line, NULL, p);
}

int nx_q11_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_window_spec w = {
      .size = sizeof w, .kind = WEIR_WINDOW_SESSION, .time = WEIR_EVENT_TIME, .length = 10000};
  *out = bidder_windows(src, "q11", &w, p);
  return 0;
}

int nx_q12_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_window_spec w = {.size = sizeof w,
                        .kind = WEIR_WINDOW_TUMBLING,
                        .time = WEIR_PROCESSING_TIME,
                        .length = 10000};
  *out = bidder_windows(src, "q12", &w, p);
  return 0;
}

/* ---- q15, q16: distinct counts per day (and channel) ------------------------------- */

enum { DC_Q15, DC_Q16 };
static const int dc_q15 = DC_Q15, dc_q16 = DC_Q16;

/* The longest channel a group may have (the generator's are a dozen
 * characters). */
#define DC_CHANNEL_MAX 256

/* What the counting operator receives of a bid: the fields it reads,
 * then (q16) the channel, not the whole event (a third of q15's time
 * went into copying bids). */
typedef struct dc_bid {
  int64_t date_time, price, bidder, auction;
} dc_bid;

/* Bids keyed by their group. */
static int dc_bids(weir_ctx *ctx, void *user, const weir_record *r) {
  int mode = *(const int *)user;
  weir_nexmark_event ev;
  int rc = event_of(ctx, r, WEIR_NEXMARK_BID, &ev);
  if (rc <= 0) return rc;
  const weir_nexmark_bid *b = &ev.u.bid;
  uint8_t out[sizeof(dc_bid) + DC_CHANNEL_MAX];
  dc_bid d = {b->date_time, b->price, b->bidder, b->auction};
  memcpy(out, &d, sizeof d);
  int64_t day = nx_floor_div(b->date_time, 86400000);
  if (mode != DC_Q16) return weir_emit(ctx, (uint64_t)day, out, sizeof d);
  if (ev.s[0].len > DC_CHANNEL_MAX)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q16: a channel of %u bytes (at most %d)",
                         (unsigned)ev.s[0].len, DC_CHANNEL_MAX);
  uint8_t g[8 + DC_CHANNEL_MAX];
  memcpy(g, &day, 8);
  memcpy(g + 8, ev.s[0].p, ev.s[0].len);
  memcpy(out + sizeof d, ev.s[0].p, ev.s[0].len);
  return weir_emit(ctx, weir_hash_bytes(g, 8 + ev.s[0].len), out, sizeof d + ev.s[0].len);
}

/* The counters of a group: bids, bidders, auctions, each overall and per
 * price rank (< 10,000, < 1,000,000, the rest), and q16's latest minute
 * of the day. */
typedef struct dc_acc {
  uint64_t c[12];
  int64_t minute;
} dc_acc;

/* State: 'G' group -> dc_acc (byte-string state: the group exactly); a
 * bidder or auction seen in the group, in namespaced state under the
 * group's record key, ns = id * 2 (+ 1 for an auction) -> the ranks (bits
 * 1 .. 3) it was seen in: one fixed slot per (group, id), where a
 * byte-string entry costs several times that (q16 keeps millions). For
 * q16 the record key is a 64-bit hash of (day, channel): two groups
 * whose hashes collide would share their sets. */
static int dc_seen(weir_ctx *ctx, uint64_t ns, int rank, uint64_t *c) {
  uint64_t *mask;
  int rc = weir_state_ns_update_u64(ctx, ns, &mask);
  if (rc < 0) return rc;
  if (rc == 0) c[0]++;
  if (!(*mask & (1u << rank))) {
    c[rank]++;
    *mask |= 1u << rank;
  }
  return 0;
}

static int dc_process(weir_ctx *ctx, const weir_record *r) {
  dc_bid bb;
  if (r->len < sizeof bb || r->len > sizeof bb + DC_CHANNEL_MAX)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q15/q16: a bid of %u bytes", (unsigned)r->len);
  memcpy(&bb, r->payload, sizeof bb);
  const dc_bid *b = &bb;
  int64_t day = nx_floor_div(b->date_time, 86400000);
  /* k: 'G', day, q16's channel */
  uint8_t k[1 + 8 + DC_CHANNEL_MAX];
  size_t klen = 9 + (r->len - sizeof bb);
  k[0] = 'G';
  memcpy(k + 1, &day, 8);
  memcpy(k + 9, (const uint8_t *)r->payload + sizeof bb, r->len - sizeof bb);
  int rank = b->price < 10000 ? 1 : b->price < 1000000 ? 2 : 3;
  dc_acc d;
  memset(&d, 0, sizeof d);
  int rc = dc_seen(ctx, (uint64_t)b->bidder * 2, rank, d.c + 4);
  if (rc >= 0) rc = dc_seen(ctx, (uint64_t)b->auction * 2 + 1, rank, d.c + 8);
  if (rc < 0) return rc;
  void *v;
  rc = weir_state_update_bytes(ctx, k, klen, sizeof(dc_acc), &v, NULL);
  if (rc < 0) return rc;
  dc_acc a;
  memcpy(&a, v, sizeof a);
  a.c[0]++;
  a.c[rank]++;
  for (int i = 4; i < 12; i++) a.c[i] += d.c[i];
  int64_t minute = (b->date_time - day * 86400000) / 60000;
  if (rc == 0 || minute > a.minute) a.minute = minute;
  memcpy(v, &a, sizeof a);
  return 0;
}

static int dc_each(void *user, uint64_t record_key, const void *k, size_t klen, const void *v,
                   size_t vlen) {
  (void)record_key;
  weir_ctx *ctx = user;
  int mode = *(const int *)weir_ctx_arg(ctx);
  const uint8_t *kk = k;
  if (klen < 9 || kk[0] != 'G') return 0;
  if (vlen != sizeof(dc_acc)) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q15/q16: a damaged group");
  dc_acc a;
  memcpy(&a, v, sizeof a);
  int64_t day;
  memcpy(&day, kk + 1, 8);
  nx_line l;
  l.n = 0;
  if (mode == DC_Q16) {
    nx_mem(&l, kk + 9, klen - 9);
    nx_c(&l, ',');
  }
  nx_day(&l, day);
  if (mode == DC_Q16) {
    nx_c(&l, ',');
    nx_hhmm(&l, a.minute * 60000);
  }
  for (int i = 0; i < 12; i++) nx_ci64(&l, (int64_t)a.c[i]);
  return nx_emit(ctx, (uint64_t)day, &l);
}

static int dc_finish(weir_ctx *ctx) {
  return weir_state_each_bytes(ctx, dc_each, ctx);
}

static const weir_operator_vt dc_vt = {.size = sizeof(weir_operator_vt),
                                       .name = "distinct-counts",
                                       .process = dc_process,
                                       .finish = dc_finish};

static weir_stream *distinct_counts(weir_stream *src, const char *name, const int *mode, int p) {
  char n[32];
  snprintf(n, sizeof n, "%s-bids", name);
  weir_stream *bids = weir_flat_map(src, n, dc_bids, (void *)mode, p);
  return weir_process_opts(weir_key_by(bids), name, &dc_vt, (void *)mode, p, &keyed_state);
}

int nx_q15_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  *out = distinct_counts(src, "q15", &dc_q15, p);
  return 0;
}

int nx_q16_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  *out = distinct_counts(src, "q16", &dc_q16, p);
  return 0;
}

/* ---- q20: bids joined with auctions of category 10 ---------------------------------- */

/* Auctions: the text "<item_name>,...,<extra>" of category 10, else an
 * empty marker. 'A' + id -> that text; 'B' + id -> the texts of bids
 * waiting for it, [u32 len][text] each. */
static int q20_auction(weir_ctx *ctx, const weir_record *r) {
  weir_nexmark_event ev;
  int rc = event_of(ctx, r, WEIR_NEXMARK_AUCTION, &ev);
  if (rc <= 0) return rc < 0 ? rc : weir_ctx_fail(ctx, WEIR_EBADREC, "q20: not an auction");
  const weir_nexmark_auction *a = &ev.u.auction;
  nx_line t;
  t.n = 0;
  if (a->category == 10) {
    nx_str(&t, &ev.s[0]);
    nx_c(&t, ',');
    nx_str(&t, &ev.s[1]);
    nx_ci64(&t, a->initial_bid);
    nx_ci64(&t, a->reserve);
    nx_ci64(&t, a->date_time);
    nx_ci64(&t, a->expires);
    nx_ci64(&t, a->seller);
    nx_ci64(&t, a->category);
    nx_c(&t, ',');
    nx_str(&t, &ev.s[2]);
  }
  uint8_t k[9];
  tag_key(k, 'A', r->key);
  rc = weir_state_put_bytes(ctx, k, sizeof k, t.b, t.n);
  if (rc < 0) return rc;
  tag_key(k, 'B', r->key);
  const uint8_t *v;
  size_t vn;
  rc = weir_state_get_bytes(ctx, k, sizeof k, (const void **)&v, &vn);
  if (rc <= 0) return rc;
  for (size_t at = 0; t.n && at < vn;) {
    uint32_t len;
    if (vn - at < 4 || (memcpy(&len, v + at, 4), len > vn - at - 4 || len > WEIR_NEXMARK_MAX_EVENT))
      return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q20: a damaged list of bids");
    nx_line l;
    l.n = 0;
    nx_mem(&l, v + at + 4, len);
    nx_c(&l, ',');
    nx_mem(&l, t.b, t.n);
    rc = nx_emit(ctx, r->key, &l);
    if (rc < 0) return rc;
    at += 4 + len;
  }
  return weir_state_del_bytes(ctx, k, sizeof k);
}

static int q20_bid(weir_ctx *ctx, const weir_record *r) {
  weir_nexmark_event ev;
  int rc = event_of(ctx, r, WEIR_NEXMARK_BID, &ev);
  if (rc <= 0) return rc < 0 ? rc : weir_ctx_fail(ctx, WEIR_EBADREC, "q20: not a bid");
  const weir_nexmark_bid *b = &ev.u.bid;
  nx_line l;
  l.n = 0;
  nx_i64(&l, b->bidder);
  nx_ci64(&l, b->price);
  nx_c(&l, ',');
  nx_str(&l, &ev.s[0]);
  nx_c(&l, ',');
  nx_str(&l, &ev.s[1]);
  nx_ci64(&l, b->date_time);
  nx_c(&l, ',');
  nx_str(&l, &ev.s[2]);
  uint8_t k[9];
  tag_key(k, 'A', r->key);
  const void *v;
  size_t vn;
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 1) {
    if (vn == 0) return 0; /* another category */
    nx_c(&l, ',');
    nx_mem(&l, v, vn);
    return nx_emit(ctx, r->key, &l);
  }
  /* Its auction has not come (yet): the bid's text waits for it. */
  tag_key(k, 'B', r->key);
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  size_t old = rc == 1 ? vn : 0;
  void *w;
  rc = weir_state_update_bytes(ctx, k, sizeof k, old + 4 + l.n, &w, NULL);
  if (rc < 0) return rc;
  uint32_t len = (uint32_t)l.n;
  memcpy((uint8_t *)w + old, &len, 4);
  memcpy((uint8_t *)w + old + 4, l.b, l.n);
  return 0;
}

static const weir_operator_vt q20_vt = {
    .size = sizeof(weir_operator_vt), .name = "q20", .process = q20_auction, .process2 = q20_bid};

int nx_q20_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_stream *auctions = weir_filter(src, "q20-auctions", is_auction, NULL, p);
  weir_stream *bids = weir_filter(src, "q20-bids", is_bid, NULL, p);
  *out =
      weir_connect(weir_key_by(auctions), weir_key_by(bids), "q20", &q20_vt, NULL, p, &keyed_state);
  return 0;
}
