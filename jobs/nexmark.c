/* jobs/nexmark.c: owns the built-in `nexmark` job: the Nexmark queries on
 * weir's public API, their flags, their output lines, the CSV dump of the
 * events and the report (one line per query, a table for --query all).
 *
 * DESIGN. Every query is source -> operators -> sink "sink", the source
 * weir_nexmark_source (weir/nexmark.h). A query's operators write each
 * result as the text "<key> <field>,<field>,..." (the sink writes the key,
 * a space and the payload, cli_key_and_text), so the formatting reads
 * every field of every result whatever the sink: the null sink of a
 * benchmark cannot let a query skip work. The SQL of each query is the
 * suite's (docs/nexmark.md); numbers follow Flink SQL: 0.908 * price is an
 * exact DECIMAL with three places, AVG of a BIGINT truncates.
 *
 * - Stateless (q0, q1, q2, q14, q21, q22): one flat_map chained between
 *   the source and the sink.
 * - q3, the incremental join of auctions (category 10) and persons (state
 *   OR, ID or CA) on seller = id: one operator reads the events once and
 *   sends auctions to its main output, persons to a side output, both
 *   keyed by the person id into one two-input operator. A person's id is unique, so its state is
 * its result text (or an empty marker for a person of another state, so that later auctions of that
 * seller are dropped at once), and auctions that come before their seller wait in a list that the
 * person's arrival empties: an auction whose seller never comes is all the state that is left
 * waiting, as in the suite's regular join.
 * - q13, the lookup join of bids with a bounded side input (a file of
 *   "key,value" lines, the suite's 10,000 rows "k,k" unless --side-input
 *   names one): every subtask loads it at open into a hash table, and
 *   keeps it in its checkpoints, so that a restore joins with the table
 *   the run started with even if the file changed since.
 * - q17, q18, q19: updating results (an unbounded GROUP BY, a dedup, a
 *   top-10). Each keeps its current result per key in keyed state and
 *   writes the final result per key once, at the end of the input (finish),
 *   not its changes as they happen: the file sink then holds exactly the
 *   final table, which is what the reference computes. q18 keeps, per
 *   (bidder, auction), the bid with the latest date_time, ties to the
 *   larger event number (the later generated); q19 keeps per auction the
 *   10 highest prices, ties to the smaller event number (the earlier
 *   generated), as Flink's ROW_NUMBER does with events in generation
 *   order. Ties depend on the event number, not on arrival, so results do
 *   not depend on the parallelism or on a restore. Before the shuffle, an
 *   operator combines each batch's bids (a partial aggregate per auction
 *   and day; the latest bid per pair; the best ten per auction): the
 *   local phase of a two-phase aggregation, see "combining within a
 *   batch".
 *
 * --query all runs the queries one after another in this process: all but
 * the last inside build() (each its own job, with the state directory
 * <state-dir>/<query> and, with file:DIR, the sink directory DIR/<query>),
 * the last as the job that `weir run` runs, then report() prints the
 * table. CPU time and peak RSS come from getrusage(RUSAGE_SELF): the CPU
 * time of every thread of the process, not wall time times cores.
 */
#include "cli.h"
#include "nexmark_queries.h"

#include "base/alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>

typedef unsigned long long ull;

/* ---- the queries' table -------------------------------------------------- */

typedef struct nx_query {
  const char *name;
  nx_build_fn build;
  const char *line; /* the output line, for the help */
  double flink;     /* Flink 1.13's published events/s per core (the suite's README); 0: none */
} nx_query;

/* What one run of a query did (the table of --query all). */
typedef struct nx_result {
  const nx_query *q;
  int rc; /* 0, or the exit code of a failed run */
  uint64_t events, results;
  double wall_s, cpu_s;
  uint64_t rss_kib; /* the process's peak so far */
} nx_result;

#define NX_MAX_QUERIES 32

struct nx_cfg {
  const nx_query *q[NX_MAX_QUERIES];
  int nq;
  int all;
  weir_nexmark_opts opts;
  const char *sink;
  const char *dump; /* --dump-events FILE */
  const char *side_input;
  char side_path[1024];   /* the file q13 reads */
  const char *state_base; /* --state-dir as given: the queries' directories are in it */
  char state_last[1024];
  nx_result res[NX_MAX_QUERIES];
  struct rusage ru0; /* at the start of the query that `weir run` runs */
  double t0;
};

/* ---- output lines ---------------------------------------------------------- */

/* The event of a record, or the job fails naming the operator. */
static int parse(weir_ctx *ctx, const weir_record *r, weir_nexmark_event *ev) {
  if (weir_nexmark_parse(r->payload, r->len, ev) == 0) return 0;
  return weir_ctx_fail(ctx, WEIR_EBADREC, "not a Nexmark event (%u bytes)", (unsigned)r->len);
}

/* Parses a bid; 1 if r is one, 0 if another event, or an error. */
static int bid_of(weir_ctx *ctx, const weir_record *r, weir_nexmark_event *ev) {
  if (weir_nexmark_kind(r->payload, r->len) != WEIR_NEXMARK_BID) return 0;
  int rc = parse(ctx, r, ev);
  return rc < 0 ? rc : 1;
}

/* ---- stateless queries ------------------------------------------------------ */

/* q0: SELECT auction, bidder, price, dateTime, extra FROM bid. */
static int q0_fn(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_nexmark_event ev;
  int rc = bid_of(ctx, r, &ev);
  if (rc <= 0) return rc;
  const weir_nexmark_bid *b = &ev.u.bid;
  nx_line l;
  l.n = 0;
  nx_i64(&l, b->bidder);
  nx_c(&l, ',');
  nx_i64(&l, b->price);
  nx_c(&l, ',');
  nx_i64(&l, b->date_time);
  nx_c(&l, ',');
  nx_str(&l, &ev.s[2]);
  return nx_emit(ctx, (uint64_t)b->auction, &l);
}

/* q1: the price in euros, 0.908 * price as DECIMAL(23, 3). */
static int q1_fn(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_nexmark_event ev;
  int rc = bid_of(ctx, r, &ev);
  if (rc <= 0) return rc;
  const weir_nexmark_bid *b = &ev.u.bid;
  nx_line l;
  l.n = 0;
  nx_i64(&l, b->bidder);
  nx_c(&l, ',');
  nx_dec3(&l, b->price * 908);
  nx_c(&l, ',');
  nx_i64(&l, b->date_time);
  nx_c(&l, ',');
  nx_str(&l, &ev.s[2]);
  return nx_emit(ctx, (uint64_t)b->auction, &l);
}

/* q2: SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0. */
static int q2_fn(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_nexmark_event ev;
  int rc = bid_of(ctx, r, &ev);
  if (rc <= 0) return rc;
  const weir_nexmark_bid *b = &ev.u.bid;
  if (b->auction % 123 != 0) return 0;
  nx_line l;
  l.n = 0;
  nx_i64(&l, b->price);
  return nx_emit(ctx, (uint64_t)b->auction, &l);
}

/* q14: bids with 1,000,000 < 0.908 * price < 50,000,000, their hour's type
 * (UTC, as Flink's HOUR of a TIMESTAMP(3)) and the 'c's of their extra. */
static int q14_fn(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_nexmark_event ev;
  int rc = bid_of(ctx, r, &ev);
  if (rc <= 0) return rc;
  const weir_nexmark_bid *b = &ev.u.bid;
  int64_t th = b->price * 908;
  if (!(th > 1000000000ll && th < 50000000000ll)) return 0;
  int64_t ms_per_day = 86400000, t = b->date_time % ms_per_day;
  if (t < 0) t += ms_per_day;
  int hour = (int)(t / 3600000);
  const char *type = hour >= 8 && hour <= 18   ? "dayTime"
                     : hour <= 6 || hour >= 20 ? "nightTime"
                                               : "otherTime";
  uint64_t cs = 0;
  for (uint32_t k = 0; k < ev.s[2].len; k++) cs += ev.s[2].p[k] == 'c';
  nx_line l;
  l.n = 0;
  nx_i64(&l, b->bidder);
  nx_c(&l, ',');
  nx_dec3(&l, th);
  nx_c(&l, ',');
  nx_mem(&l, type, strlen(type));
  nx_c(&l, ',');
  nx_i64(&l, b->date_time);
  nx_c(&l, ',');
  nx_str(&l, &ev.s[2]);
  nx_c(&l, ',');
  nx_u64(&l, cs);
  return nx_emit(ctx, (uint64_t)b->auction, &l);
}

/* Java's REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2): the value of
 * the first "channel_id=" at the start or after a '&'; 1 if found. The
 * candidates are the start and each '&' (memchr), not every byte. */
static int channel_id(const weir_nexmark_str *url, weir_nexmark_str *out) {
  static const char key[] = "channel_id=";
  const size_t kn = sizeof key - 1;
  const char *p = url->p, *end = url->p + url->len;
  for (;;) {
    if ((size_t)(end - p) >= kn && memcmp(p, key, kn) == 0) {
      const char *a = p + kn, *b = memchr(a, '&', (size_t)(end - a));
      if (!b) b = end;
      *out = (weir_nexmark_str){a, (uint32_t)(b - a)};
      return 1;
    }
    const char *amp = p < end ? memchr(p, '&', (size_t)(end - p)) : NULL;
    if (!amp) return 0;
    p = amp + 1;
  }
}

/* lower(s) equals the lowercase word w. */
static int lower_is(const weir_nexmark_str *s, const char *w) {
  size_t n = strlen(w);
  if (s->len != n) return 0;
  for (size_t k = 0; k < n; k++) {
    char c = s->p[k];
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    if (c != w[k]) return 0;
  }
  return 1;
}

/* q21: the channel's id: 0 .. 3 for the four named channels, else the
 * url's channel_id; bids with neither are dropped. */
static int q21_fn(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_nexmark_event ev;
  int rc = bid_of(ctx, r, &ev);
  if (rc <= 0) return rc;
  const weir_nexmark_bid *b = &ev.u.bid;
  static const char *const named[] = {"apple", "google", "facebook", "baidu"};
  static const char *const ids[] = {"0", "1", "2", "3"};
  weir_nexmark_str id = {NULL, 0};
  int found = 0;
  for (int k = 0; k < 4 && !found; k++)
    if (lower_is(&ev.s[0], named[k])) {
      id = (weir_nexmark_str){ids[k], 1};
      found = 1;
    }
  if (!found) found = channel_id(&ev.s[1], &id);
  if (!found) return 0;
  nx_line l;
  l.n = 0;
  nx_i64(&l, b->bidder);
  nx_c(&l, ',');
  nx_i64(&l, b->price);
  nx_c(&l, ',');
  nx_str(&l, &ev.s[0]);
  nx_c(&l, ',');
  nx_str(&l, &id);
  return nx_emit(ctx, (uint64_t)b->auction, &l);
}

/* Flink's SPLIT_INDEX(s, '/', k) for k = 0 .. n-1 in one pass: out[k] the
 * k-th (0-based) piece; returns how many of the n pieces exist (the others
 * are NULL). One pass with memchr: q22 scanned the URL byte by byte, once
 * per piece, a quarter of its cycles. */
static int split_pieces(const weir_nexmark_str *s, int n, weir_nexmark_str *out) {
  const char *a = s->p, *end = s->p + s->len;
  for (int k = 0; k < n; k++) {
    const char *b = memchr(a, '/', (size_t)(end - a));
    if (!b) {
      out[k] = (weir_nexmark_str){a, (uint32_t)(end - a)};
      return k + 1;
    }
    out[k] = (weir_nexmark_str){a, (uint32_t)(b - a)};
    a = b + 1;
  }
  return n;
}

/* q22: the url's first three directories (SPLIT_INDEX 3, 4, 5); a missing
 * one (SQL NULL) is written as an empty field. */
static int q22_fn(weir_ctx *ctx, void *user, const weir_record *r) {
  (void)user;
  weir_nexmark_event ev;
  int rc = bid_of(ctx, r, &ev);
  if (rc <= 0) return rc;
  const weir_nexmark_bid *b = &ev.u.bid;
  nx_line l;
  l.n = 0;
  nx_i64(&l, b->bidder);
  nx_c(&l, ',');
  nx_i64(&l, b->price);
  nx_c(&l, ',');
  nx_str(&l, &ev.s[0]);
  weir_nexmark_str d[6];
  int nd = split_pieces(&ev.s[1], 6, d);
  for (int k = 3; k <= 5; k++) {
    nx_c(&l, ',');
    if (k < nd) nx_str(&l, &d[k]);
  }
  return nx_emit(ctx, (uint64_t)b->auction, &l);
}

static int build_flat(weir_stream *src, const char *name, weir_flat_map_fn fn, int p,
                      weir_stream **out) {
  *out = weir_flat_map(src, name, fn, NULL, p);
  return 0;
}

static int q0_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  return build_flat(src, "q0", q0_fn, p, out);
}
static int q1_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  return build_flat(src, "q1", q1_fn, p, out);
}
static int q2_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  return build_flat(src, "q2", q2_fn, p, out);
}
static int q14_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  return build_flat(src, "q14", q14_fn, p, out);
}
static int q21_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  return build_flat(src, "q21", q21_fn, p, out);
}
static int q22_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  return build_flat(src, "q22", q22_fn, p, out);
}

/* ---- q3: the incremental join ------------------------------------------------ */

/* q3's one pass over the events: auctions of category 10 to the main
 * output, keyed by seller, as the auction id (8 bytes); persons to the side
 * output "persons", keyed by id, as the result text "name,city,state" for
 * the states q3 wants and an empty payload for the others. One operator
 * rather than a filter per input: two consumers of the source cost a copy
 * of every event into each one's batch and a call of each per event (a
 * quarter of q3's cycles), for the 8% of events that are persons or
 * auctions. */
static const char *const Q3_TAGS[] = {"persons"};

static int q3_split(weir_ctx *ctx, const weir_record *r) {
  int kind = weir_nexmark_kind(r->payload, r->len);
  if (kind != WEIR_NEXMARK_PERSON && kind != WEIR_NEXMARK_AUCTION) return 0;
  weir_nexmark_event ev;
  int rc = parse(ctx, r, &ev);
  if (rc < 0) return rc;
  if (kind == WEIR_NEXMARK_AUCTION) {
    if (ev.u.auction.category != 10) return 0;
    return weir_emit_u64(ctx, (uint64_t)ev.u.auction.seller, (uint64_t)ev.u.auction.id);
  }
  const weir_nexmark_str *st = &ev.s[4];
  int wanted = st->len == 2 && (memcmp(st->p, "OR", 2) == 0 || memcmp(st->p, "ID", 2) == 0 ||
                                memcmp(st->p, "CA", 2) == 0);
  nx_line l;
  l.n = 0;
  if (wanted) {
    nx_str(&l, &ev.s[0]);
    nx_c(&l, ',');
    nx_str(&l, &ev.s[3]);
    nx_c(&l, ',');
    nx_str(&l, st);
  }
  return weir_emit_side(ctx, Q3_TAGS[0], (uint64_t)ev.u.person.id, WEIR_TS_DEFAULT, l.b, l.n);
}

static const weir_operator_vt q3_split_vt = {
    .size = sizeof(weir_operator_vt), .name = "q3-split", .process = q3_split};

/* State keys: 'P' + person id -> its result text (empty: not wanted);
 * 'A' + person id -> the auction ids (8 bytes each) that wait for it. */
static void q3_key(uint8_t k[9], char tag, uint64_t id) {
  k[0] = (uint8_t)tag;
  memcpy(k + 1, &id, 8);
}

static int q3_emit(weir_ctx *ctx, uint64_t auction, const void *text, size_t n) {
  return weir_emit(ctx, auction, text, n);
}

/* An auction (input 1): joins its seller if known, else waits. */
static int q3_auction(weir_ctx *ctx, const weir_record *r) {
  uint64_t auction = weir_payload_u64(r);
  uint8_t k[9];
  q3_key(k, 'P', r->key);
  const void *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 1) return vn ? q3_emit(ctx, auction, v, vn) : 0;
  q3_key(k, 'A', r->key);
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  void *w;
  rc = weir_state_update_bytes(ctx, k, sizeof k, (rc == 1 ? vn : 0) + 8, &w, NULL);
  if (rc < 0) return rc;
  memcpy((uint8_t *)w + (rc == 1 ? vn : 0), &auction, 8);
  return 0;
}

/* A person (input 2): kept, and the auctions that waited for it joined. */
static int q3_person(weir_ctx *ctx, const weir_record *r) {
  uint8_t k[9];
  q3_key(k, 'P', r->key);
  int rc = weir_state_put_bytes(ctx, k, sizeof k, r->payload, r->len);
  if (rc < 0) return rc;
  q3_key(k, 'A', r->key);
  const void *v;
  size_t vn;
  rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc <= 0) return rc;
  if (r->len) {
    /* v is valid until the next state call: emit from a copy */
    size_t n = vn / 8;
    uint64_t *ids = weir_malloc(vn ? vn : 1);
    memcpy(ids, v, n * 8);
    for (size_t i = 0; i < n && rc >= 0; i++) rc = q3_emit(ctx, ids[i], r->payload, r->len);
    weir_free(ids);
    if (rc < 0) return rc;
  }
  return weir_state_del_bytes(ctx, k, sizeof k);
}

static const weir_operator_vt q3_join_vt = {.size = sizeof(weir_operator_vt),
                                            .name = "q3-join",
                                            .process = q3_auction,
                                            .process2 = q3_person};

static int q3_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  weir_op_opts so = {.size = sizeof so, .ntags = 1, .tags = Q3_TAGS};
  weir_stream *auctions = weir_process_opts(src, "q3-split", &q3_split_vt, NULL, p, &so);
  weir_stream *persons = weir_side_output(auctions, Q3_TAGS[0]);
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_KEYED_STATE};
  *out = weir_connect(weir_key_by(auctions), weir_key_by(persons), "q3", &q3_join_vt, NULL, p, &oo);
  return 0;
}

/* ---- q13: the bounded side input --------------------------------------------- */

/* The side input: rows (key, value) in file order, and a hash index. */
typedef struct side_row {
  int64_t key;
  uint32_t off, len; /* the value in text */
  int32_t next;      /* the next row of the same bucket, -1 at the end */
} side_row;

typedef struct side_table {
  char *text; /* the rows as "key,value\n" lines: also what a checkpoint stores */
  size_t text_len;
  side_row *rows;
  size_t nrows;
  int32_t *bucket;
  uint64_t mask;
} side_table;

static void side_free(side_table *t) {
  if (!t) return;
  weir_free(t->text);
  weir_free(t->rows);
  weir_free(t->bucket);
  weir_free(t);
}

static uint64_t side_hash(int64_t k) {
  uint64_t z = (uint64_t)k * 0x9e3779b97f4a7c15ull;
  return z ^ (z >> 29);
}

/* Parses "key,value" lines (a final line without newline counts, empty
 * lines are skipped, a '\r' before the newline is dropped) into a table
 * that owns `text`. 0, or WEIR_EBADREC with the line in *bad. */
static int side_parse(char *text, size_t len, side_table **out, size_t *bad) {
  side_table *t = weir_calloc(1, sizeof *t);
  t->text = text;
  t->text_len = len;
  size_t cap = 0, lineno = 0;
  for (size_t a = 0; a < len;) {
    size_t b = a;
    while (b < len && text[b] != '\n') b++;
    size_t e = b;
    if (e > a && text[e - 1] == '\r') e--;
    lineno++;
    if (e > a) {
      size_t k = a;
      int neg = 0;
      if (text[k] == '-') neg = 1, k++;
      uint64_t v = 0;
      size_t d0 = k;
      while (k < e && text[k] >= '0' && text[k] <= '9' && v < (1ull << 59))
        v = v * 10 + (uint64_t)(text[k++] - '0');
      if (k == d0 || k >= e || text[k] != ',' || e - k - 1 > UINT32_MAX) {
        *bad = lineno;
        t->text = NULL;
        side_free(t);
        return WEIR_EBADREC;
      }
      if (t->nrows == cap) {
        cap = cap ? 2 * cap : 1024;
        t->rows = weir_realloc(t->rows, cap * sizeof *t->rows);
      }
      t->rows[t->nrows++] =
          (side_row){neg ? -(int64_t)v : (int64_t)v, (uint32_t)(k + 1), (uint32_t)(e - k - 1), -1};
    }
    a = b + 1;
  }
  uint64_t nb = 16;
  while (nb < 2 * t->nrows) nb *= 2;
  t->mask = nb - 1;
  t->bucket = weir_malloc(nb * sizeof *t->bucket);
  for (uint64_t k = 0; k < nb; k++) t->bucket[k] = -1;
  /* Rows of one key chain in file order: insert from the last. */
  for (size_t r = t->nrows; r-- > 0;) {
    uint64_t h = side_hash(t->rows[r].key) & t->mask;
    t->rows[r].next = t->bucket[h];
    t->bucket[h] = (int32_t)r;
  }
  *out = t;
  return 0;
}

static int q13_open(weir_ctx *ctx) {
  /* A restoring subtask takes its table from the checkpoint (restore). */
  if (weir_ctx_restoring(ctx)) return 0;
  const nx_cfg *c = weir_ctx_arg(ctx);
  FILE *f = fopen(c->side_path, "rb");
  if (!f) {
    int e = errno;
    return weir_ctx_fail(ctx, -e, "q13: cannot open the side input '%s': %s", c->side_path,
                         strerror(e));
  }
  size_t cap = 1 << 16, len = 0, n;
  char *text = weir_malloc(cap);
  while ((n = fread(text + len, 1, cap - len, f)) > 0) {
    len += n;
    if (len == cap) text = weir_realloc(text, cap *= 2);
  }
  int rd_err = ferror(f);
  fclose(f);
  if (rd_err) {
    weir_free(text);
    return weir_ctx_fail(ctx, WEIR_EIO, "q13: cannot read the side input '%s'", c->side_path);
  }
  side_table *t = NULL;
  size_t bad = 0;
  int rc = side_parse(text, len, &t, &bad);
  if (rc < 0) {
    weir_free(text);
    return weir_ctx_fail(ctx, rc, "q13: side input '%s' line %zu: expected 'key,value'",
                         c->side_path, bad);
  }
  weir_ctx_set_user(ctx, t);
  return 0;
}

/* The checkpoint holds the table's text, so that a restore joins with
 * what the run loaded; a rescale appends the old subtasks' copies, which
 * are equal: the first is taken. Layout: u64 length, the text. */
static int q13_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  side_table *t = weir_ctx_user(ctx);
  uint64_t n = t ? t->text_len : 0;
  int rc = weir_snapshot_write(w, &n, sizeof n);
  if (rc < 0 || !n) return rc;
  return weir_snapshot_write(w, t->text, n);
}

static int q13_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  size_t len = 0;
  const uint8_t *p = weir_snapshot_data(r, &len);
  uint64_t n = 0;
  if (len < 8 || (memcpy(&n, p, 8), n > len - 8))
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q13: the checkpointed side input is truncated");
  char *text = weir_malloc(n ? n : 1);
  memcpy(text, p + 8, n);
  side_table *t = NULL;
  size_t bad = 0;
  int rc = side_parse(text, n, &t, &bad);
  if (rc < 0) {
    weir_free(text);
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q13: the checkpointed side input is damaged");
  }
  side_free(weir_ctx_user(ctx));
  weir_ctx_set_user(ctx, t);
  return 0;
}

static void q13_close(weir_ctx *ctx) {
  side_free(weir_ctx_user(ctx));
  weir_ctx_set_user(ctx, NULL);
}

/* q13: bids joined with the side input on MOD(auction, 10000) = key: a
 * row per matching side-input row (none: no output). */
static int q13_process(weir_ctx *ctx, const weir_record *r) {
  weir_nexmark_event ev;
  int rc = bid_of(ctx, r, &ev);
  if (rc <= 0) return rc;
  side_table *t = weir_ctx_user(ctx);
  if (!t) return weir_ctx_fail(ctx, WEIR_ESTATE, "q13: no side input (restored without one)");
  const weir_nexmark_bid *b = &ev.u.bid;
  int64_t key = b->auction % 10000;
  for (int32_t i = t->bucket[side_hash(key) & t->mask]; i >= 0; i = t->rows[i].next) {
    const side_row *row = &t->rows[i];
    if (row->key != key) continue;
    nx_line l;
    l.n = 0;
    nx_i64(&l, b->bidder);
    nx_c(&l, ',');
    nx_i64(&l, b->price);
    nx_c(&l, ',');
    nx_i64(&l, b->date_time);
    nx_c(&l, ',');
    size_t room = sizeof l.b - l.n;
    nx_mem(&l, t->text + row->off, row->len < room ? row->len : room);
    rc = nx_emit(ctx, (uint64_t)b->auction, &l);
    if (rc < 0) return rc;
  }
  return 0;
}

static const weir_operator_vt q13_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "q13",
                                        .open = q13_open,
                                        .process = q13_process,
                                        .close = q13_close,
                                        .snapshot = q13_snapshot,
                                        .restore = q13_restore,
                                        .rescalable = 1};

static int q13_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job;
  *out = weir_process(src, "q13", &q13_vt, (void *)c, p);
  return 0;
}

/* ---- keyed state, batch by batch ------------------------------------------------ */

/* The state key of record i of b into k (at most 16 bytes): its length, 0
 * if the record has none (a payload too short: process reports it). */
typedef size_t (*state_key_fn)(const weir_batch *b, uint32_t i, uint8_t k[16]);

#define SLOT_AHEAD 16
#define ENTRY_AHEAD 4

/* Runs process on each record of b, the state of the records ahead
 * prefetched: a state table of millions of keys misses the cache on every
 * lookup (q17's lookup was a tenth of its cycles), and the records of a
 * batch are all there to look ahead. Two steps, as weir_state_prefetch_bytes
 * asks: the slot SLOT_AHEAD records ahead, its entry ENTRY_AHEAD ahead. */
static int state_batch(weir_ctx *ctx, const weir_batch *b, state_key_fn key_of,
                       int (*process)(weir_ctx *, const weir_record *)) {
  uint8_t k[16];
  size_t kn;
  for (uint32_t i = 0; i < b->len && i < SLOT_AHEAD; i++)
    if ((kn = key_of(b, i, k)) != 0) weir_state_prefetch_bytes(ctx, k, kn, 0);
  for (uint32_t i = 0; i < b->len; i++) {
    if (i + SLOT_AHEAD < b->len && (kn = key_of(b, i + SLOT_AHEAD, k)) != 0)
      weir_state_prefetch_bytes(ctx, k, kn, 0);
    if (i + ENTRY_AHEAD < b->len && (kn = key_of(b, i + ENTRY_AHEAD, k)) != 0)
      weir_state_prefetch_bytes(ctx, k, kn, 1);
    weir_state_select(ctx, b->keys[i]);
    weir_record r = weir_batch_record(b, i);
    int rc = process(ctx, &r);
    if (rc < 0) return rc;
  }
  return 0;
}

/* ---- combining within a batch ---------------------------------------------------- */

/* The groups of one input batch by a key of two int64s, for the operators
 * that combine a batch's bids before the shuffle (q17, q18, q19): half of
 * all bids go to the hot auction of the moment and three in eight to one
 * (hot bidder, hot auction) pair, so a batch of 1024 events holds some 100
 * groups, not 940 bids. What a group keeps is the query's (`size` bytes
 * per group). Nothing stays between batches, so checkpoints see no state
 * here, and a replay that cuts batches elsewhere combines differently but
 * gives the same final result: each query's combination is associative
 * and commutative (sums, min and max; the latest bid; the best ten). This
 * is the local phase of Flink's two-phase aggregation, which the suite's
 * configuration turns on with its mini-batches. */
typedef struct combiner {
  uint32_t cap;  /* slots, a power of two, at least twice the records */
  uint32_t n;    /* groups of the batch */
  int32_t *slot; /* group + 1; 0 empty */
  int64_t *key;  /* two per group */
  uint8_t *data; /* size bytes per group */
  size_t size;
} combiner;

static combiner *comb_create(size_t size) {
  combiner *c = weir_calloc(1, sizeof *c);
  c->size = size;
  return c;
}

static void comb_destroy(combiner *c) {
  if (!c) return;
  weir_free(c->slot);
  weir_free(c->key);
  weir_free(c->data);
  weir_free(c);
}

/* Empties c for a batch of `records`. */
static void comb_reset(combiner *c, uint32_t records) {
  if (c->cap < 2 * (uint64_t)records || c->cap == 0) {
    uint32_t cap = 64;
    while (cap < 2 * (uint64_t)records) cap *= 2;
    weir_free(c->slot);
    weir_free(c->key);
    weir_free(c->data);
    c->cap = cap;
    c->slot = weir_malloc(cap * sizeof *c->slot);
    c->key = weir_malloc(cap * sizeof(int64_t));
    c->data = weir_malloc(cap / 2 * c->size);
  }
  memset(c->slot, 0, c->cap * sizeof *c->slot);
  c->n = 0;
}

/* The group of key (a, b): its data, *made 1 if new (data uninitialized). */
static void *comb_find(combiner *c, int64_t a, int64_t b, int *made) {
  uint64_t h = ((uint64_t)a * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)b * 0xc2b2ae3d27d4eb4full);
  uint32_t mask = c->cap - 1;
  for (uint32_t j = (uint32_t)(h >> 32) & mask;; j = (j + 1) & mask) {
    int32_t g = c->slot[j] - 1;
    if (g < 0) {
      g = (int32_t)c->n++;
      c->slot[j] = g + 1;
      c->key[2 * g] = a;
      c->key[2 * g + 1] = b;
      *made = 1;
      return c->data + (size_t)g * c->size;
    }
    if (c->key[2 * g] == a && c->key[2 * g + 1] == b) {
      *made = 0;
      return c->data + (size_t)g * c->size;
    }
  }
}

/* The fixed part of bid i of b into *out: 1, 0 if i is another event, or
 * an error for a bid too short to be one. */
static int batch_bid(weir_ctx *ctx, const weir_batch *b, uint32_t i, weir_nexmark_bid *out) {
  const uint8_t *p = b->data + b->off[i];
  if (weir_nexmark_kind(p, b->lens[i]) != WEIR_NEXMARK_BID) return 0;
  if (b->lens[i] < sizeof *out)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "not a bid (%u bytes)", (unsigned)b->lens[i]);
  memcpy(out, p, sizeof *out);
  return 1;
}

static int comb_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, comb_create((size_t)(uintptr_t)weir_ctx_arg(ctx)));
  return 0;
}

static void comb_close(weir_ctx *ctx) {
  comb_destroy(weir_ctx_user(ctx));
  weir_ctx_set_user(ctx, NULL);
}

/* ---- q17: per auction and day, an unbounded aggregate ------------------------ */

/* State: (auction, day) -> total, rank1, rank2, rank3, min, max, sum. */
typedef struct q17_acc {
  uint64_t total, r1, r2, r3;
  int64_t min, max, sum;
} q17_acc;

/* A batch's bids combined per (auction, day), keyed by auction: one
 * record per group, (auction, day, its q17_acc), 72 bytes. */
typedef struct q17_part {
  int64_t auction, day;
  q17_acc a;
  uint32_t first; /* the group's first record: its emission derives from it */
} q17_part;
#define Q17_PART 72 /* the bytes of a q17_part that travel */

static int q17_bids(weir_ctx *ctx, const weir_batch *b) {
  combiner *c = weir_ctx_user(ctx);
  comb_reset(c, b->len);
  for (uint32_t i = 0; i < b->len; i++) {
    weir_nexmark_bid bid;
    int rc = batch_bid(ctx, b, i, &bid);
    if (rc <= 0) {
      if (rc < 0) return rc;
      continue;
    }
    int64_t day = nx_floor_div(bid.date_time, 86400000), p = bid.price;
    int made;
    q17_part *g = comb_find(c, bid.auction, day, &made);
    if (made) {
      g->auction = bid.auction;
      g->day = day;
      g->first = i;
      g->a = (q17_acc){0, 0, 0, 0, p, p, 0};
    }
    if (p < g->a.min) g->a.min = p;
    if (p > g->a.max) g->a.max = p;
    g->a.total++;
    g->a.r1 += p < 10000;
    g->a.r2 += p >= 10000 && p < 1000000;
    g->a.r3 += p >= 1000000;
    g->a.sum += p;
  }
  for (uint32_t k = 0; k < c->n; k++) {
    const q17_part *g = (const q17_part *)(c->data + k * c->size);
    int rc = weir_emit_from(ctx, b, g->first, (uint64_t)g->auction, g, Q17_PART);
    if (rc < 0) return rc;
  }
  return 0;
}

static int q17_process(weir_ctx *ctx, const weir_record *r) {
  q17_part in;
  if (r->len != Q17_PART)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "q17: not a combined bid (%u bytes)", (unsigned)r->len);
  memcpy(&in, r->payload, Q17_PART);
  int64_t k[2] = {in.auction, in.day};
  void *v;
  int rc = weir_state_update_bytes(ctx, k, sizeof k, sizeof(q17_acc), &v, NULL);
  if (rc < 0) return rc;
  q17_acc a;
  memcpy(&a, v, sizeof a);
  if (rc == 0) {
    a = in.a;
  } else {
    if (in.a.min < a.min) a.min = in.a.min;
    if (in.a.max > a.max) a.max = in.a.max;
    a.total += in.a.total;
    a.r1 += in.a.r1;
    a.r2 += in.a.r2;
    a.r3 += in.a.r3;
    a.sum += in.a.sum;
  }
  memcpy(v, &a, sizeof a);
  return 0;
}

static int q17_each(void *user, uint64_t record_key, const void *k, size_t klen, const void *v,
                    size_t vlen) {
  weir_ctx *ctx = user;
  if (klen != 16 || vlen != sizeof(q17_acc))
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q17: a state entry of %zu/%zu bytes", klen, vlen);
  int64_t kk[2];
  q17_acc a;
  memcpy(kk, k, sizeof kk);
  memcpy(&a, v, sizeof a);
  nx_line l;
  l.n = 0;
  nx_day(&l, kk[1]);
  nx_c(&l, ',');
  nx_u64(&l, a.total);
  nx_c(&l, ',');
  nx_u64(&l, a.r1);
  nx_c(&l, ',');
  nx_u64(&l, a.r2);
  nx_c(&l, ',');
  nx_u64(&l, a.r3);
  nx_c(&l, ',');
  nx_i64(&l, a.min);
  nx_c(&l, ',');
  nx_i64(&l, a.max);
  nx_c(&l, ',');
  nx_i64(&l, a.sum / (int64_t)a.total); /* AVG(BIGINT) truncates */
  nx_c(&l, ',');
  nx_i64(&l, a.sum);
  (void)record_key;
  return nx_emit(ctx, (uint64_t)kk[0], &l);
}

static int q17_finish(weir_ctx *ctx) {
  return weir_state_each_bytes(ctx, q17_each, ctx);
}

/* q17's state key: (auction, day), the projected bid's first 16 bytes. */
static size_t q17_key(const weir_batch *b, uint32_t i, uint8_t k[16]) {
  if (b->lens[i] != Q17_PART) return 0;
  memcpy(k, b->data + b->off[i], 16);
  return 16;
}

static int q17_batch(weir_ctx *ctx, const weir_batch *b) {
  return state_batch(ctx, b, q17_key, q17_process);
}

static const weir_operator_vt q17_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "q17",
                                        .process_batch = q17_batch,
                                        .finish = q17_finish};

static int q17_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  static const weir_operator_vt bids_vt = {.size = sizeof(weir_operator_vt),
                                           .name = "q17-bids",
                                           .open = comb_open,
                                           .process_batch = q17_bids,
                                           .close = comb_close};
  weir_stream *bids = weir_process(src, "q17-bids", &bids_vt, (void *)sizeof(q17_part), p);
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_KEYED_STATE};
  *out = weir_process_opts(weir_key_by(bids), "q17", &q17_vt, NULL, p, &oo);
  return 0;
}

/* ---- q18 and q19: dedup and top-N --------------------------------------------- */

/* A stored bid's ordering fields (the payload's fixed part). */
static void bid_order(const uint8_t *payload, int64_t *ts, int64_t *price, uint64_t *event) {
  weir_nexmark_bid b;
  memcpy(&b, payload, sizeof b);
  *ts = b.date_time;
  *price = b.price;
  *event = b.event;
}

/* Writes a stored bid payload's line after `l`'s prefix. */
static int bid_fields(weir_ctx *ctx, const void *payload, size_t len, nx_line *l,
                      int64_t *auction) {
  weir_nexmark_event ev;
  if (weir_nexmark_parse(payload, len, &ev) < 0 || ev.kind != WEIR_NEXMARK_BID)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "a stored bid of %zu bytes is not one", len);
  const weir_nexmark_bid *b = &ev.u.bid;
  nx_i64(l, b->bidder);
  nx_c(l, ',');
  nx_i64(l, b->price);
  nx_c(l, ',');
  nx_str(l, &ev.s[0]);
  nx_c(l, ',');
  nx_str(l, &ev.s[1]);
  nx_c(l, ',');
  nx_i64(l, b->date_time);
  nx_c(l, ',');
  nx_str(l, &ev.s[2]);
  *auction = b->auction;
  return 0;
}

/* Bids keyed by (bidder, auction) for the dedup, a batch's latest per
 * pair only (the same order as q18's: date_time, then event): a bid that
 * a later one of its batch replaces can never be the final one. */
typedef struct q18_best {
  int64_t ts;
  uint64_t event;
  uint32_t rec;
} q18_best;

static int q18_bids(weir_ctx *ctx, const weir_batch *b) {
  combiner *c = weir_ctx_user(ctx);
  comb_reset(c, b->len);
  for (uint32_t i = 0; i < b->len; i++) {
    weir_nexmark_bid bid;
    int rc = batch_bid(ctx, b, i, &bid);
    if (rc <= 0) {
      if (rc < 0) return rc;
      continue;
    }
    int made;
    q18_best *g = comb_find(c, bid.bidder, bid.auction, &made);
    if (made || bid.date_time > g->ts || (bid.date_time == g->ts && bid.event > g->event))
      *g = (q18_best){bid.date_time, bid.event, i};
  }
  for (uint32_t k = 0; k < c->n; k++) {
    const q18_best *g = (const q18_best *)(c->data + k * c->size);
    int64_t key[2] = {c->key[2 * k], c->key[2 * k + 1]};
    int rc = weir_emit_from(ctx, b, g->rec, weir_hash_bytes(key, sizeof key),
                            b->data + b->off[g->rec], b->lens[g->rec]);
    if (rc < 0) return rc;
  }
  return 0;
}

/* q18: per (bidder, auction) the bid with the latest date_time (ties: the
 * larger event number); state (bidder, auction) -> the bid's payload. */
static int q18_process(weir_ctx *ctx, const weir_record *r) {
  weir_nexmark_bid b;
  if (r->len < sizeof b)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "not a bid (%u bytes)", (unsigned)r->len);
  memcpy(&b, r->payload, sizeof b);
  int64_t k[2] = {b.bidder, b.auction};
  const void *v;
  size_t vn;
  int rc = weir_state_get_bytes(ctx, k, sizeof k, &v, &vn);
  if (rc < 0) return rc;
  if (rc == 1) {
    int64_t ts, price;
    uint64_t ev;
    if (vn < sizeof b) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q18: a short state entry");
    bid_order(v, &ts, &price, &ev);
    if (!(b.date_time > ts || (b.date_time == ts && b.event > ev))) return 0;
  }
  return weir_state_put_bytes(ctx, k, sizeof k, r->payload, r->len);
}

static int q18_each(void *user, uint64_t record_key, const void *k, size_t klen, const void *v,
                    size_t vlen) {
  (void)record_key, (void)k, (void)klen;
  weir_ctx *ctx = user;
  nx_line l;
  l.n = 0;
  int64_t auction;
  int rc = bid_fields(ctx, v, vlen, &l, &auction);
  return rc < 0 ? rc : nx_emit(ctx, (uint64_t)auction, &l);
}

static int q18_finish(weir_ctx *ctx) {
  return weir_state_each_bytes(ctx, q18_each, ctx);
}

/* q18's state key: (bidder, auction) of the bid. */
static size_t q18_key(const weir_batch *b, uint32_t i, uint8_t k[16]) {
  if (b->lens[i] < sizeof(weir_nexmark_bid)) return 0;
  const uint8_t *p = b->data + b->off[i];
  memcpy(k, p + offsetof(weir_nexmark_bid, bidder), 8);
  memcpy(k + 8, p + offsetof(weir_nexmark_bid, auction), 8);
  return 16;
}

static int q18_batch(weir_ctx *ctx, const weir_batch *b) {
  return state_batch(ctx, b, q18_key, q18_process);
}

static const weir_operator_vt q18_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "q18",
                                        .process_batch = q18_batch,
                                        .finish = q18_finish};

static int q18_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  static const weir_operator_vt bids_vt = {.size = sizeof(weir_operator_vt),
                                           .name = "q18-bids",
                                           .open = comb_open,
                                           .process_batch = q18_bids,
                                           .close = comb_close};
  weir_stream *bids = weir_process(src, "q18-bids", &bids_vt, (void *)sizeof(q18_best), p);
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_KEYED_STATE};
  *out = weir_process_opts(weir_key_by(bids), "q18", &q18_vt, NULL, p, &oo);
  return 0;
}

/* q19's state per auction: up to TOPN bids, best first (price descending,
 * then event ascending), as [u32 n][u32 0] then per bid [u32 len][payload]. */
#define TOPN 10

static int better(int64_t pa, uint64_t ea, int64_t pb, uint64_t eb) {
  return pa > pb || (pa == pb && ea < eb);
}

/* Per-subtask scratch for rebuilding a list. */
typedef struct q19_scratch {
  uint8_t b[8 + TOPN * (4 + WEIR_NEXMARK_MAX_EVENT)];
} q19_scratch;

static int q19_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, weir_malloc(sizeof(q19_scratch)));
  return 0;
}

static void q19_close(weir_ctx *ctx) {
  weir_free(weir_ctx_user(ctx));
  weir_ctx_set_user(ctx, NULL);
}

/* A batch's best TOPN bids per auction (price descending, then event
 * ascending, as q19 ranks): a bid that ten of its batch beat is not among
 * the final ten. */
typedef struct q19_best {
  uint32_t n;
  uint32_t rec[TOPN];
  int64_t price[TOPN];
  uint64_t event[TOPN];
} q19_best;

static int q19_bids(weir_ctx *ctx, const weir_batch *b) {
  combiner *c = weir_ctx_user(ctx);
  comb_reset(c, b->len);
  for (uint32_t i = 0; i < b->len; i++) {
    weir_nexmark_bid bid;
    int rc = batch_bid(ctx, b, i, &bid);
    if (rc <= 0) {
      if (rc < 0) return rc;
      continue;
    }
    int made;
    q19_best *g = comb_find(c, bid.auction, 0, &made);
    if (made) g->n = 0;
    uint32_t at = g->n;
    while (at > 0 && better(bid.price, bid.event, g->price[at - 1], g->event[at - 1])) at--;
    if (at >= TOPN) continue;
    uint32_t last = g->n < TOPN ? g->n : TOPN - 1;
    for (uint32_t k = last; k > at; k--) {
      g->rec[k] = g->rec[k - 1];
      g->price[k] = g->price[k - 1];
      g->event[k] = g->event[k - 1];
    }
    g->rec[at] = i;
    g->price[at] = bid.price;
    g->event[at] = bid.event;
    if (g->n < TOPN) g->n++;
  }
  for (uint32_t k = 0; k < c->n; k++) {
    const q19_best *g = (const q19_best *)(c->data + k * c->size);
    for (uint32_t j = 0; j < g->n; j++) {
      uint32_t i = g->rec[j];
      int rc = weir_emit_from(ctx, b, i, b->keys[i], b->data + b->off[i], b->lens[i]);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

static int q19_process(weir_ctx *ctx, const weir_record *r) {
  weir_nexmark_bid b;
  if (r->len < sizeof b || r->len > WEIR_NEXMARK_MAX_EVENT)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "not a bid (%u bytes)", (unsigned)r->len);
  memcpy(&b, r->payload, sizeof b);
  uint64_t k = (uint64_t)b.auction;
  const uint8_t *v = NULL;
  size_t vn = 0;
  int rc = weir_state_get_bytes(ctx, &k, sizeof k, (const void **)&v, &vn);
  if (rc < 0) return rc;
  uint32_t n = 0;
  if (rc == 1) {
    if (vn < 8) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q19: a short state entry");
    memcpy(&n, v, 4);
  }
  /* Walk the list: where the new bid goes, and the entries' offsets. */
  size_t off[TOPN + 1], pos = 0, at = 8;
  uint32_t ins = n;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t len;
    if (at + 4 > vn || (memcpy(&len, v + at, 4), len < sizeof b || len > vn - at - 4))
      return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q19: a damaged state entry");
    off[i] = at;
    int64_t ts, price;
    uint64_t ev;
    bid_order(v + at + 4, &ts, &price, &ev);
    if (ins == n && better(b.price, b.event, price, ev)) ins = i;
    at += 4 + len;
  }
  off[n] = at;
  if (ins >= TOPN) return 0; /* not among the best 10 */
  q19_scratch *s = weir_ctx_user(ctx);
  uint32_t nn = n < TOPN ? n + 1 : TOPN;
  memcpy(s->b, &nn, 4);
  memset(s->b + 4, 0, 4);
  pos = 8;
  size_t before = off[ins] - 8; /* the entries before the new one */
  if (before) memcpy(s->b + pos, v + 8, before);
  pos += before;
  uint32_t len = r->len;
  memcpy(s->b + pos, &len, 4);
  memcpy(s->b + pos + 4, r->payload, len);
  pos += 4 + len;
  /* the entries after it, but the 10th is dropped when the list is full */
  uint32_t last = n < TOPN ? n : TOPN - 1;
  if (last > ins) {
    size_t after = off[last] - off[ins];
    memcpy(s->b + pos, v + off[ins], after);
    pos += after;
  }
  return weir_state_put_bytes(ctx, &k, sizeof k, s->b, pos);
}

static int q19_each(void *user, uint64_t record_key, const void *k, size_t klen, const void *v,
                    size_t vlen) {
  (void)record_key, (void)k, (void)klen;
  weir_ctx *ctx = user;
  const uint8_t *p = v;
  uint32_t n = 0;
  if (vlen < 8) return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q19: a short state entry");
  memcpy(&n, p, 4);
  size_t at = 8;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t len;
    if (at + 4 > vlen || (memcpy(&len, p + at, 4), len > vlen - at - 4))
      return weir_ctx_fail(ctx, WEIR_ECORRUPT, "q19: a damaged state entry");
    nx_line l;
    l.n = 0;
    nx_u64(&l, i + 1);
    nx_c(&l, ',');
    int64_t auction;
    int rc = bid_fields(ctx, p + at + 4, len, &l, &auction);
    if (rc < 0) return rc;
    rc = nx_emit(ctx, (uint64_t)auction, &l);
    if (rc < 0) return rc;
    at += 4 + len;
  }
  return 0;
}

static int q19_finish(weir_ctx *ctx) {
  return weir_state_each_bytes(ctx, q19_each, ctx);
}

/* q19's state key: the bid's auction. */
static size_t q19_key(const weir_batch *b, uint32_t i, uint8_t k[16]) {
  if (b->lens[i] < sizeof(weir_nexmark_bid)) return 0;
  memcpy(k, b->data + b->off[i] + offsetof(weir_nexmark_bid, auction), 8);
  return 8;
}

static int q19_batch(weir_ctx *ctx, const weir_batch *b) {
  return state_batch(ctx, b, q19_key, q19_process);
}

static const weir_operator_vt q19_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "q19",
                                        .open = q19_open,
                                        .process_batch = q19_batch,
                                        .finish = q19_finish,
                                        .close = q19_close};

static int q19_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c;
  static const weir_operator_vt bids_vt = {.size = sizeof(weir_operator_vt),
                                           .name = "q19-bids",
                                           .open = comb_open,
                                           .process_batch = q19_bids,
                                           .close = comb_close};
  weir_stream *bids = weir_process(src, "q19-bids", &bids_vt, (void *)sizeof(q19_best), p);
  weir_op_opts oo = {.size = sizeof oo, .flags = WEIR_OP_KEYED_STATE};
  *out = weir_process_opts(weir_key_by(bids), "q19", &q19_vt, NULL, p, &oo);
  return 0;
}

/* --query gen: not a query of the suite but its ceiling, the generator
 * alone: every event goes straight to the sink, which formats it
 * ("<key> <event_type>,<event number>") only if it writes anything. */
static size_t gen_format(const weir_record *r, char *buf, size_t cap) {
  uint64_t ev = 0;
  if (r->len >= 24) memcpy(&ev, (const uint8_t *)r->payload + 16, 8); /* weir/nexmark.h */
  return (size_t)snprintf(buf, cap, "%llu %d,%llu", (ull)r->key,
                          weir_nexmark_kind(r->payload, r->len), (ull)ev);
}

static int gen_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out) {
  (void)job, (void)c, (void)p;
  *out = src;
  return 0;
}

static const nx_query GEN = {"gen", gen_build, "<key> <event_type>,<event number>", 155.0e3};

/* The queries in the order --query all runs them, with Flink 1.13's
 * published throughput per core (nexmark/nexmark's README). */
static const nx_query QUERIES[] = {
    {"q0", q0_build, "<auction> <bidder>,<price>,<date_time>,<extra>", 155.0e3},
    {"q1", q1_build, "<auction> <bidder>,<0.908*price, 3 places>,<date_time>,<extra>", 157.9e3},
    {"q2", q2_build, "<auction> <price>", 175.2e3},
    {"q3", q3_build, "<auction id> <name>,<city>,<state>", 152.1e3},
    {"q4", nx_q4_build, "<category> <avg of the winning prices>", 34.3e3},
    {"q5", nx_q5_build, "<auction> <bids>,<window start>,<window end>", 22.1e3},
    {"q6", nx_q6_build, "<seller> <avg of the last 10 winning prices>,<auctions averaged>", 0},
    {"q7", nx_q7_build, "<auction> <price>,<bidder>,<date_time>,<extra>,<window end>", 12.3e3},
    {"q8", nx_q8_build, "<person id> <name>,<window start>", 146.1e3},
    {"q9", nx_q9_build,
     "<auction id> <item_name>,<description>,<initial_bid>,<reserve>,<date_time>,<expires>,"
     "<seller>,<category>,<extra>,<bidder>,<price>,<bid date_time>,<bid extra>",
     14.2e3},
    {"q10", nx_q10_build,
     "<auction> <bidder>,<price>,<date_time>,<extra>,<dt yyyy-MM-dd>,<hm HH:mm>", 57.8e3},
    {"q11", nx_q11_build, "<bidder> <bids>,<session start>,<session end>", 39.7e3},
    {"q12", nx_q12_build, "<bidder> <bids>,<window start>,<window end> (processing time)", 75.7e3},
    {"q13", q13_build, "<auction> <bidder>,<price>,<date_time>,<side input value>", 130.7e3},
    {"q14", q14_build,
     "<auction> <bidder>,<0.908*price>,<dayTime|nightTime|otherTime>,<date_time>,<extra>,"
     "<'c's in extra>",
     161.2e3},
    {"q15", nx_q15_build,
     "<days since the epoch> <yyyy-MM-dd>,<bids>,<rank1>,<rank2>,<rank3>,<bidders>,<rank1>,"
     "<rank2>,<rank3>,<auctions>,<rank1>,<rank2>,<rank3>",
     72.4e3},
    {"q16", nx_q16_build,
     "<days since the epoch> <channel>,<yyyy-MM-dd>,<HH:mm, the latest>,<the 12 counts of q15>",
     18.7e3},
    {"q17", q17_build,
     "<auction> <yyyy-MM-dd>,<total>,<rank1>,<rank2>,<rank3>,<min>,<max>,<avg>,<sum>", 116.8e3},
    {"q18", q18_build, "<auction> <bidder>,<price>,<channel>,<url>,<date_time>,<extra>", 53.7e3},
    {"q19", q19_build, "<auction> <rank>,<bidder>,<price>,<channel>,<url>,<date_time>,<extra>",
     44.0e3},
    {"q20", nx_q20_build,
     "<auction> <bidder>,<price>,<channel>,<url>,<date_time>,<extra>,<item_name>,<description>,"
     "<initial_bid>,<reserve>,<auction date_time>,<expires>,<seller>,<category>,<auction extra>",
     19.0e3},
    {"q21", q21_build, "<auction> <bidder>,<price>,<channel>,<channel_id>", 98.5e3},
    {"q22", q22_build, "<auction> <bidder>,<price>,<channel>,<dir1>,<dir2>,<dir3>", 130.0e3},
};
#define NQUERIES (sizeof QUERIES / sizeof QUERIES[0])

static const nx_query *find_query(const char *name) {
  for (size_t i = 0; i < NQUERIES; i++)
    if (strcmp(QUERIES[i].name, name) == 0) return &QUERIES[i];
  return strcmp(name, GEN.name) == 0 ? &GEN : NULL;
}

/* ---- flags and help ----------------------------------------------------------- */

static void nexmark_help(FILE *out) {
  fputs("usage: weir run nexmark --query Q [--events N] [--tps T] [--rate R] [--seed S]\n"
        "                        [--base-time MS] [--side-input FILE] [--dump-events FILE]\n"
        "                        [--sink SPEC] [ENGINE OPTIONS] [CHECKPOINT OPTIONS]\n"
        "\n"
        "Runs a query of the Nexmark benchmark on generated events (docs/nexmark.md):\n"
        "persons, auctions and bids in the proportions 1:3:46, made as the suite's\n"
        "generator makes them, deterministic from --seed (the same events at any\n"
        "--parallelism and after a restore), event time date_time = base time +\n"
        "floor((i + 1) * 1000 / T) ms for event i, watermarks 4 s behind.\n"
        "\n"
        "  --query Q        one of q0 .. q22 (see below), or all: each\n"
        "                   in turn (state in <state-dir>/<query>, a file sink's\n"
        "                   output in DIR/<query>) and a table of their figures;\n"
        "                   gen: no query, the generator alone (its events straight\n"
        "                   to the sink, '<key> <event_type>,<event number>'): the\n"
        "                   benchmark's ceiling; its ratio is to Flink's q0\n"
        "  --events N       events to generate (default 10M)\n"
        "  --tps T          events per second of event time (default 10M, the suite's)\n"
        "  --rate R         events per second of wall-clock time over all source\n"
        "                   subtasks, 0 = as fast as possible (default 0)\n"
        "  --seed S         seed of every random choice (default 1)\n"
        "  --base-time MS   date_time of event -1, ms since the epoch (default\n"
        "                   1436918400000, 2015-07-15 00:00:00 UTC)\n"
        "  --side-input FILE  q13's side input, 'key,value' lines (default: the\n"
        "                   suite's 10,000 lines 'k,k', written to\n"
        "                   <state-dir>/nexmark-side-input.csv)\n"
        "  --dump-events FILE  also write the N events as CSV before the run:\n"
        "                   a header line 'event,event_type,date_time,id,name,\n"
        "                   email_address,credit_card,city,state,item_name,description,\n"
        "                   initial_bid,reserve,expires,seller,category,auction,bidder,\n"
        "                   price,channel,url,extra', then one line per event in order\n"
        "                   (event_type 0 person, 1 auction, 2 bid; the fields of other\n"
        "                   kinds empty; no field holds a comma, quote or newline)\n"
        "  --sink SPEC      null (default), print, file:DIR, ... (see README.md, Sinks)\n"
        "\n"
        "Output: one line per result, '<key> <field>,<field>,...' (times are ms since\n"
        "the epoch; 0.908 * price is exact with 3 decimal places, as Flink's DECIMAL;\n"
        "AVG truncates, as Flink's AVG of a BIGINT):\n",
        out);
  for (size_t i = 0; i < NQUERIES; i++)
    fprintf(out, "  %-4s %s\n", QUERIES[i].name, QUERIES[i].line);
  fputs("q3 joins auctions of category 10 with their seller when the seller's state is\n"
        "OR, ID or CA; q13 joins bids with the side input on MOD(auction, 10000) = key\n"
        "(a line per matching row). q4, q6, q15, q16, q17, q18 and q19 have updating\n"
        "results in SQL; they write their final result per key once, at the end of\n"
        "the input: q4 per category; q6 per seller (the last 10 auctions by expires,\n"
        "then id); q15 per day, q16 per channel and day (UTC); q17 per auction and\n"
        "day; q18 per (bidder, auction) the bid with the latest date_time, ties to\n"
        "the later generated (larger event number); q19 per auction the 10 highest\n"
        "prices, ranks 1 .. 10, ties to the earlier generated (smaller event number).\n"
        "A winning bid (q4, q6, q9) is an auction's highest bid with date_time from\n"
        "the auction's to its expires, both included (q9: ties to the earlier\n"
        "date_time, then the smaller event number), written when the watermark\n"
        "passes expires. Windows are event time, aligned to the epoch: q5 sliding\n"
        "10 s by 2 s (every auction with the window's highest count), q7 tumbling\n"
        "10 s (every bid with the window's highest price and date_time from end - 10 s\n"
        "to end, both included), q8 tumbling 10 s (a person who registered and\n"
        "opened an auction in the window), q11 sessions of gap 10 s (end = last bid +\n"
        "10 s); q12's are tumbling 10 s of processing time, its counts depend on the\n"
        "run. q10 writes every bid with its partition, dt and hm (UTC), in the line.\n"
        "q20 joins bids with auctions of category 10 (a line per bid).\n"
        "Engine and checkpoint options: see 'weir help run' (state under ./state by\n"
        "default). The report line gives events/s, the process's CPU time, events/s\n"
        "per core of CPU time and the peak RSS.\n"
        "Numbers take a k, M or G suffix (x1000): --events 100M.\n",
        out);
}

static int nexmark_parse(cli_args *a, cli_engine *eng, void **out) {
  nx_cfg *c = calloc(1, sizeof *c);
  if (c == NULL) return cli_usage("out of memory");
  c->opts.size = sizeof c->opts;
  c->opts.events = 10000000;
  c->opts.tps = WEIR_NEXMARK_DEFAULT_TPS;
  c->opts.seed = 1;
  c->opts.base_time = WEIR_NEXMARK_DEFAULT_BASE_TIME;
  c->sink = "null";
  const char *query = NULL;
  uint64_t base = (uint64_t)WEIR_NEXMARK_DEFAULT_BASE_TIME;
  while (a->i < a->argc) {
    int r;
    if ((r = cli_take_engine(a, eng)) != 0 || (r = cli_take_str(a, "--query", &query)) != 0 ||
        (r = cli_take_u64(a, "--events", 1ull << 50, &c->opts.events)) != 0 ||
        (r = cli_take_u64(a, "--tps", UINT32_MAX, &c->opts.tps)) != 0 ||
        (r = cli_take_u64(a, "--rate", UINT64_MAX, &c->opts.rate)) != 0 ||
        (r = cli_take_u64(a, "--seed", UINT64_MAX, &c->opts.seed)) != 0 ||
        (r = cli_take_u64(a, "--base-time", 1ull << 52, &base)) != 0 ||
        (r = cli_take_str(a, "--side-input", &c->side_input)) != 0 ||
        (r = cli_take_str(a, "--dump-events", &c->dump)) != 0 ||
        (r = cli_take_str(a, "--sink", &c->sink)) != 0) {
      if (r < 0) goto fail;
      continue;
    }
    cli_unknown_arg(a, "nexmark");
    goto fail;
  }
  c->opts.base_time = (int64_t)base;
  if (!query) {
    cli_usage("nexmark: --query is required (q0 .. q22 or all)");
    goto fail;
  }
  if (strcmp(query, "all") == 0) {
    c->all = 1;
    for (size_t i = 0; i < NQUERIES; i++) c->q[c->nq++] = &QUERIES[i];
  } else if ((c->q[0] = find_query(query)) != NULL) {
    c->nq = 1;
  } else {
    cli_usage("--query: '%s' is not one of q0 .. q22, all, gen", query);
    goto fail;
  }
  if (c->opts.events == 0) {
    cli_usage("--events: must be at least 1");
    goto fail;
  }
  if (c->opts.tps == 0) {
    cli_usage("--tps: must be at least 1 (events per second of event time)");
    goto fail;
  }
  if (cli_check_sink(c->sink, eng) < 0) goto fail;
  if (c->all && (eng->restore || eng->fresh)) {
    cli_usage("--query all: --restore and --fresh apply to one query (run it alone)");
    goto fail;
  }
  if (c->all && strcmp(eng->state_dir, "none") != 0) {
    /* The last query runs as `weir run`'s job: in its own directory too. */
    snprintf(c->state_last, sizeof c->state_last, "%s/%s", eng->state_dir, c->q[c->nq - 1]->name);
  }
  c->state_base = eng->state_dir;
  if (c->state_last[0]) eng->state_dir = c->state_last;
  eng->total_records = c->opts.events;
  *out = c;
  return 0;
fail:
  free(c);
  return -1;
}

/* ---- building and running ---------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_of(const struct rusage *ru) {
  return (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec / 1e6 +
         (double)ru->ru_stime.tv_sec + (double)ru->ru_stime.tv_usec / 1e6;
}

static uint64_t rss_kib(const struct rusage *ru) {
#ifdef __APPLE__
  return (uint64_t)ru->ru_maxrss / 1024; /* bytes there */
#else
  return (uint64_t)ru->ru_maxrss; /* KiB */
#endif
}

/* The sink spec of query q: with --query all and file:DIR, DIR/<query>. */
static void sink_of(const nx_cfg *c, const nx_query *q, char *buf, size_t cap) {
  if (c->all && strncmp(c->sink, "file:", 5) == 0)
    snprintf(buf, cap, "%s/%s", c->sink, q->name);
  else
    snprintf(buf, cap, "%s", c->sink);
}

/* Adds query q's graph to job. */
static int build_query(weir_job *job, const cli_engine *eng, const nx_cfg *c, const nx_query *q) {
  int p = eng->parallelism;
  weir_stream *src = weir_nexmark_source(job, "nexmark", &c->opts, p);
  weir_stream *res = NULL;
  int rc = q->build(job, src, c, p, &res);
  if (rc) return rc;
  char sink[1100];
  sink_of(c, q, sink, sizeof sink);
  weir_sink_conf sc = {.fmt = q == &GEN ? gen_format : cli_key_and_text};
  return weir_sink_to_conf(res, "sink", sink, &sc, p);
}

/* Writes the suite's side input (10,000 lines "k,k") to path. */
static int write_side_input(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -errno;
  for (int k = 0; k < 10000; k++) fprintf(f, "%d,%d\n", k, k);
  int rc = ferror(f) ? WEIR_EIO : 0;
  if (fclose(f) != 0 && rc == 0) rc = -errno;
  return rc;
}

static int dump_events(weir_job *job, const nx_cfg *c) {
  weir_nexmark_gen *g = NULL;
  char err[160];
  int rc = weir_nexmark_gen_create(&c->opts, &g, err, sizeof err);
  if (rc < 0) return weir_job_fail(job, rc, "nexmark: %s", err);
  FILE *f = fopen(c->dump, "w");
  if (!f) {
    rc = -errno;
    weir_nexmark_gen_destroy(g);
    return weir_job_fail(job, rc, "--dump-events: cannot create '%s': %s", c->dump,
                         weir_strerror(rc));
  }
  rc = weir_nexmark_write_csv(g, 0, c->opts.events, f);
  if (fclose(f) != 0 && rc == 0) rc = -errno;
  weir_nexmark_gen_destroy(g);
  if (rc < 0)
    return weir_job_fail(job, rc, "--dump-events: cannot write '%s': %s", c->dump,
                         weir_strerror(rc));
  return 0;
}

/* Runs query q as a job of its own (--query all, all but the last). */
static void run_one(const cli_engine *eng, nx_cfg *c, const nx_query *q, nx_result *res) {
  res->q = q;
  cli_engine e = *eng;
  char state[1100];
  if (strcmp(c->state_base, "none") != 0) {
    snprintf(state, sizeof state, "%s/%s", c->state_base, q->name);
    e.state_dir = state;
  }
  weir_run_opts o = {0};
  o.workers = e.workers;
  o.default_parallelism = e.parallelism;
  o.batch_records = (uint32_t)e.batch_records;
  o.channel_batches = (uint32_t)e.channel_batches;
  if (e.buffer_timeout_set)
    o.buffer_timeout_us = e.buffer_timeout ? (uint32_t)e.buffer_timeout : WEIR_FLUSH_AT_ONCE;
  o.handle_signals = 1;
  if (cli_checkpoint_opts(&e, &o) < 0) {
    res->rc = CLI_EXIT_USAGE;
    return;
  }
  if (o.state_dir && cli_mkdir_p(o.state_dir) < 0) {
    cli_error("cannot create the state directory '%s'", o.state_dir);
    res->rc = CLI_EXIT_RUNTIME;
    return;
  }
  weir_job *job = NULL;
  int rc = weir_job_create(&job, "nexmark");
  if (rc == 0) rc = build_query(job, &e, c, q);
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  double t0 = now_s();
  if (rc == 0) rc = weir_job_run(job, &o);
  res->wall_s = now_s() - t0;
  getrusage(RUSAGE_SELF, &r1);
  res->cpu_s = cpu_of(&r1) - cpu_of(&r0);
  res->rss_kib = rss_kib(&r1);
  uint64_t in = 0;
  weir_job_operator_counts(job, "nexmark", &in, &res->events);
  weir_job_operator_counts(job, "sink", &res->results, &in);
  if (rc != 0) {
    const char *m = job ? weir_job_error(job) : "";
    cli_error("%s: %s", q->name, m && *m ? m : weir_strerror(rc));
    res->rc = job && weir_job_build_error(job) ? cli_exit_for_build(rc) : cli_exit_for(rc);
  } else if (weir_job_stopped(job)) {
    res->rc = -1; /* stopped: the rest is not run */
  }
  weir_job_destroy(job);
}

static int nexmark_build(weir_job *job, const cli_engine *eng, void *cfg) {
  nx_cfg *c = cfg;
  if (c->dump && dump_events(job, c) < 0) return weir_job_build_error(job);
  int needs_side = 0;
  for (int i = 0; i < c->nq; i++) needs_side |= c->q[i]->build == q13_build;
  if (needs_side) {
    if (c->side_input) {
      snprintf(c->side_path, sizeof c->side_path, "%s", c->side_input);
    } else {
      const char *dir = strcmp(c->state_base, "none") != 0 ? c->state_base : NULL;
      if (!dir) dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
      int m = cli_mkdir_p(dir);
      if (m < 0) return weir_job_fail(job, m, "cannot create '%s': %s", dir, weir_strerror(m));
      snprintf(c->side_path, sizeof c->side_path, "%s/nexmark-side-input.csv", dir);
      int rc = write_side_input(c->side_path);
      if (rc < 0)
        return weir_job_fail(job, rc, "cannot write the side input '%s': %s", c->side_path,
                             weir_strerror(rc));
    }
  }
  for (int i = 0; i + 1 < c->nq; i++) {
    if (!eng->quiet) fprintf(stderr, "nexmark: running %s\n", c->q[i]->name);
    run_one(eng, c, c->q[i], &c->res[i]);
    if (c->res[i].rc != 0)
      return weir_job_fail(job, WEIR_ECANCELED, "nexmark --query all: %s %s", c->q[i]->name,
                           c->res[i].rc < 0 ? "was stopped" : "failed");
    if (!eng->quiet)
      fprintf(stderr, "nexmark: %s done in %.2f s\n", c->q[i]->name, c->res[i].wall_s);
  }
  if (c->all && !eng->quiet) fprintf(stderr, "nexmark: running %s\n", c->q[c->nq - 1]->name);
  int rc = build_query(job, eng, c, c->q[c->nq - 1]);
  getrusage(RUSAGE_SELF, &c->ru0);
  c->t0 = now_s();
  return rc;
}

static void result_line(const nx_result *r, FILE *out) {
  char e[32], eps[32], pc[32];
  double rate = r->wall_s > 0 ? (double)r->events / r->wall_s : 0;
  double per_core = r->cpu_s > 0 ? (double)r->events / r->cpu_s : 0;
  char vs[32] = "    n/a"; /* q6: Flink SQL does not run it */
  if (r->q->flink > 0) snprintf(vs, sizeof vs, "%7.1fx", per_core / r->q->flink);
  fprintf(out, "%-4s %8s %10llu %8.2f %9s %8.2f %9s %8s %7.0f\n", r->q->name,
          cli_human((double)r->events, e, sizeof e), (ull)r->results, r->wall_s,
          cli_human(rate, eps, sizeof eps), r->cpu_s, cli_human(per_core, pc, sizeof pc), vs,
          (double)r->rss_kib / 1024.0);
}

static void nexmark_report(const weir_job *job, void *cfg, cli_outcome *o, FILE *out) {
  nx_cfg *c = cfg;
  struct rusage r1;
  getrusage(RUSAGE_SELF, &r1);
  nx_result *r = &c->res[c->nq - 1];
  r->q = c->q[c->nq - 1];
  r->wall_s = o->elapsed_s;
  r->cpu_s = cpu_of(&r1) - cpu_of(&c->ru0);
  r->rss_kib = rss_kib(&r1);
  uint64_t in = 0;
  weir_job_operator_counts(job, "nexmark", &in, &r->events);
  weir_job_operator_counts(job, "sink", &r->results, &in);
  o->stopped = weir_job_stopped(job);
  const weir_run_info *ri = weir_job_run_info(job);
  char n[32], eps[32], pc[32];
  double per_core = r->cpu_s > 0 ? (double)r->events / r->cpu_s : 0;
  char vs[40] = "no Flink figure";
  if (r->q->flink > 0) snprintf(vs, sizeof vs, "%.1fx Flink's", per_core / r->q->flink);
  fprintf(out,
          "nexmark %s: %s %s events in %.2f s (%s events/s): %llu results, CPU %.2f s "
          "(%s events/s per core, %s), peak RSS %.0f MiB",
          r->q->name, o->stopped ? "stopped after" : "processed",
          cli_human((double)r->events, n, sizeof n), r->wall_s,
          cli_human(r->wall_s > 0 ? (double)r->events / r->wall_s : 0, eps, sizeof eps),
          (ull)r->results, r->cpu_s, cli_human(per_core, pc, sizeof pc), vs,
          (double)r->rss_kib / 1024.0);
  if (ri->restored_from)
    fprintf(out, " (this run, resumed from checkpoint %llu)", (ull)ri->restored_from);
  if (ri->last_checkpoint) fprintf(out, ", last checkpoint %llu", (ull)ri->last_checkpoint);
  fputc('\n', out);
  if (!c->all) return;
  fprintf(out, "\nquery   events    results   wall s  events/s    CPU s  per core  "
               "vs Flink  RSS MiB\n");
  for (int i = 0; i < c->nq; i++) result_line(&c->res[i], out);
}

static void nexmark_free(void *cfg) {
  free(cfg);
}

const cli_builtin cli_nexmark_job = {
    .name = "nexmark",
    .synopsis = "the Nexmark benchmark's queries on its generated auction events",
    .help = nexmark_help,
    .parse = nexmark_parse,
    .build = nexmark_build,
    .report = nexmark_report,
    .free_cfg = nexmark_free,
};
