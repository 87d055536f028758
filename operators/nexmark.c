/* nexmark.c: owns the Nexmark generator (weir/nexmark.h): the events'
 * formulas and payload layout, the CSV dump, and the source that emits
 * them with watermarks and checkpointed positions.
 *
 * DESIGN. The suite's generator draws its random choices from one
 * SplittableRandom per generator, unseeded, so its events differ from run
 * to run and depend on how many generators run. Here event i draws from a
 * splitmix64 stream of its own, seeded by splitmix64(seed) ^ e (e = i + 2,
 * the suite's event id): an event is a pure function of (options, i), so
 * the events are the same at any parallelism, in any order, and after any
 * restore, and a test or a reference can ask for event i alone. The
 * formulas (ids, hot ratios, prices, strings, auction lengths) are the
 * suite's, read off its generator; docs/nexmark.md lists what differs.
 *
 * The tables the suite makes once per process (the 1 MiB string that
 * extras are cut from, the four hot URLs, the 10,000 channels and their
 * URLs) are made here from the seed when the generator is created, and
 * only read afterwards: every subtask shares them.
 *
 * Splits are blocks of WEIR_NEXMARK_BLOCK events dealt round-robin over
 * WEIR_NEXMARK_SPLITS splits (weir/nexmark.h), not single events: a
 * subtask then names its watermark split once per block rather than once
 * per event, and with P = 1 the events still come out in order. Within a
 * split the timestamps grow, so no event is ever behind its split's
 * watermark; across splits they differ by at most the events of one round
 * of blocks (128 Ki events, 13 ms of event time at 10M events/s), far
 * within the 4 s of out-of-orderness.
 *
 * The cost per event is the suite's: every field of every event is made
 * (no lazy fields), an auction's strings character by character as the
 * suite does (two random numbers per character), a bid's extra as a copy
 * out of the shared string. What is the generator's own: the copies out
 * of the large tables (the extra's string, the channels' URLs: 1.8 MB, more
 * than a core's cache) are prefetched for a group of events before they
 * are made (nx_copies), and the price's power of ten comes from tables
 * with pow() only where they cannot decide (next_price): where the
 * generator's time went is in bench/RESULTS.md (Nexmark).
 */
#include "weir/nexmark.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"

_Static_assert(sizeof(weir_nexmark_person) == 40, "person layout");
_Static_assert(sizeof(weir_nexmark_auction) == 80, "auction layout");
_Static_assert(sizeof(weir_nexmark_bid) == 56, "bid layout");
_Static_assert(offsetof(weir_nexmark_person, event) == 16 &&
                   offsetof(weir_nexmark_auction, event) == 16 &&
                   offsetof(weir_nexmark_bid, event) == 16 &&
                   offsetof(weir_nexmark_bid, date_time) == 24,
               "the common head of the three parts");

__extension__ typedef unsigned __int128 u128;

#define S ((uint64_t)WEIR_NEXMARK_SPLITS)
#define B ((uint64_t)WEIR_NEXMARK_BLOCK)
#define GOLDEN 0x9e3779b97f4a7c15ull

/* The suite's configuration (NexmarkConfiguration's defaults). */
#define PERSON_PROPORTION 1
#define AUCTION_PROPORTION 3
#define TOTAL_PROPORTION 50
#define FIRST_PERSON_ID 1000
#define FIRST_AUCTION_ID 1000
#define FIRST_CATEGORY_ID 10
#define NUM_CATEGORIES 5
#define HOT_AUCTION_RATIO 2 /* configuration: a bid is for a hot auction unless 1 in 2 */
#define HOT_SELLERS_RATIO 4 /* an auction's seller is hot unless 1 in 4 */
#define HOT_BIDDERS_RATIO 4 /* a bidder is hot unless 1 in 4 */
#define HOT_BATCH 100       /* the generators' HOT_*_RATIO: the hot one of each 100 */
#define NUM_IN_FLIGHT_AUCTIONS 100
#define NUM_ACTIVE_PEOPLE 1000
#define PERSON_ID_LEAD 10
#define AUCTION_ID_LEAD 10
#define AVG_PERSON_BYTES 200
#define AVG_AUCTION_BYTES 500
#define AVG_BID_BYTES 100
#define CHANNELS 10000
#define EXTRA_LEN (1024 * 1024)
/* A channel's URL: 24 + 3 * 5 + 16 bytes of base URL, then at most
 * "&channel_id=" and 10 digits: 77. */
#define URL_STRIDE 80
#define MIN_STRING_LENGTH 3

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

struct weir_nexmark_gen {
  uint64_t events, tps, rate, seed_mix;
  int64_t base_time, delay_ms;
  uint32_t watermark_interval_ms;
  char *extra;      /* EXTRA_LEN letters, extras are cut from it */
  char *hot_url[4]; /* NUL-terminated */
  /* The channels' URLs in one arena, channel k's at urls + k * URL_STRIDE:
   * 10,000 separate allocations spread them over twice the memory, and a
   * table of offsets was one more cache miss per bid; the lengths' table
   * (10 KB) stays in the cache. */
  char *urls;
  uint8_t channel_url_len[CHANNELS];
  uint8_t hot_url_len[4];
  /* 2^(j/256), j = 0 .. 255, and 100 * 2^e, e = 0 .. 63: fast_exp2_100's. */
  double exp2_frac[256], exp2_int100[64];
};

/* ---- random numbers ------------------------------------------------------ */

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t x) {
  return mix64(x + GOLDEN);
}

static uint64_t next64(rng *r) {
  r->s += GOLDEN;
  return mix64(r->s);
}

/* 0 .. n-1 (n <= 2^32), by multiplying the top 32 bits (Lemire's method
 * without the rejection step: a bias below n / 2^32, nothing a Nexmark
 * query can see). */
static uint32_t next_int(rng *r, uint32_t n) {
  return (uint32_t)(((next64(r) >> 32) * (uint64_t)n) >> 32);
}

/* The suite's LongGenerator: an int draw below 2^31 - 1, else |long % n|. */
static int64_t next_long(rng *r, int64_t n) {
  if (n < 2147483647) return (int64_t)next_int(r, (uint32_t)n);
  int64_t v = (int64_t)next64(r) % n;
  return v < 0 ? -v : v;
}

/* The price of the power p10 = 10^x: floor(p10 * 100 + 0.5) (Java's
 * Math.round), in the floating-point steps of the suite's formula; the
 * value is positive, so the conversion truncates as floor() would, without
 * a call. */
static int64_t price_of(double p10) {
  return (int64_t)(p10 * 100.0 + 0.5);
}

#define LOG2_10 3.321928094887362347870319429489390175864831393
#define LN_2 0.693147180559945309417232121458176568

/* 100 * 2^y for y in [0, 20), within a relative 2e-15 of the exact value:
 * 2^e * 2^(j/256) * 2^r, |r| <= 1/512, from two tables (the first holds
 * 100 * 2^e, exact) and a polynomial of degree 4 in Estrin's form (its
 * error below 1e-16; few steps in a row, as this is a chain of dependent
 * floating-point operations). j + 256 e = round(256 y) comes out of the
 * low bits of y + 1.5 * 2^44, whose ulp is 1/256. */
static double fast_exp2_100(const weir_nexmark_gen *g, double y) {
  double t = y + 0x1.8p44;
  uint64_t tb;
  memcpy(&tb, &t, sizeof tb);
  uint32_t n = (uint32_t)tb;
  double r = (y - (t - 0x1.8p44)) * LN_2, r2 = r * r;
  double poly = (1.0 + r) + r2 * (0.5 + r * (1.0 / 6)) + r2 * r2 * (1.0 / 24);
  return g->exp2_int100[n >> 8] * g->exp2_frac[n & 255] * poly;
}

/* A price in cents: round(10^(6u) * 100), u uniform in [0, 1) (Java's
 * Math.round: floor(x + 0.5)), exactly as pow() gives it. pow() was a
 * tenth of the generator's time. fast_exp2_100 of 6u log2(10) (rounded
 * once more: 1e-15) is within 1e-14 of the exact 100 * 10^(6u), pow()
 * within an ulp (2.2e-16); so pow()'s result times 100 lies within a
 * relative 1e-12 of a, and the price is a monotone function of it: when
 * both ends of that interval give one price, so does pow(). Only a power
 * within 1e-12 of a half cent (1.5 draws in 10^5) asks pow(). */
static int64_t next_price(const weir_nexmark_gen *g, rng *r) {
  uint64_t bits = next64(r) >> 11; /* u = bits * 2^-53: 53 random bits */
  double a = fast_exp2_100(g, (double)bits * (0x1.0p-53 * 6.0 * LOG2_10));
  int64_t lo = (int64_t)(a * (1.0 - 1e-12) + 0.5), hi = (int64_t)(a * (1.0 + 1e-12) + 0.5);
  return lo == hi ? lo : price_of(pow(10.0, (double)bits * 0x1.0p-53 * 6.0));
}

/* The suite's nextString: 3 .. max-1 characters, each `special` with
 * probability 1/13, else a lowercase letter; with special ' ' the result
 * is trimmed as Java's trim() does. Writes at p, returns the length. */
static size_t next_string(rng *r, uint32_t max, char special, char *p) {
  uint32_t len = MIN_STRING_LENGTH + next_int(r, max - MIN_STRING_LENGTH);
  for (uint32_t k = 0; k < len; k++)
    p[k] = next_int(r, 13) == 0 ? special : (char)('a' + next_int(r, 26));
  if (special != ' ') return len;
  uint32_t a = 0, b = len;
  while (a < b && p[a] == ' ') a++;
  while (b > a && p[b - 1] == ' ') b--;
  if (a) memmove(p, p + a, b - a);
  return b - a;
}

/* The copies out of the generator's large tables that an event needs (a
 * channel's URL, the extra), left for later: the tables (1.8 MB) do not
 * stay in a core's cache, so a copy made at once waited for memory (a
 * fifth of q0's cycles). The source makes a group of events, prefetching
 * these, and then copies (nx_emit). */
typedef struct nx_copy {
  const char *src;
  uint32_t dst, len; /* dst: offset in the event's payload */
} nx_copy;

typedef struct nx_copies {
  uint32_t n;
  nx_copy c[2];
} nx_copies;

static void copy_later(nx_copies *cp, const char *src, const uint8_t *buf, const char *dst,
                       size_t len) {
  cp->c[cp->n++] = (nx_copy){src, (uint32_t)((const uint8_t *)dst - buf), (uint32_t)len};
}

static void copies_prefetch(const nx_copies *cp) {
  for (uint32_t k = 0; k < cp->n; k++) {
    const char *s = cp->c[k].src;
    uint32_t len = cp->c[k].len;
    for (uint32_t o = 0; o < len; o += 64) __builtin_prefetch(s + o, 0, 3);
    if (len) __builtin_prefetch(s + len - 1, 0, 3);
  }
}

static void copies_do(const nx_copies *cp, uint8_t *buf) {
  for (uint32_t k = 0; k < cp->n; k++) memcpy(buf + cp->c[k].dst, cp->c[k].src, cp->c[k].len);
}

/* The suite's nextExtra: about desired - current bytes (+-20%), cut out
 * of the shared string at a random offset (copied later, into p). */
static size_t next_extra(const weir_nexmark_gen *g, rng *r, size_t current, size_t desired,
                         const uint8_t *buf, char *p, nx_copies *cp) {
  if (current > desired) return 0;
  int64_t avg = (int64_t)(desired - current);
  int64_t delta = (int64_t)floor((double)avg * 0.2 + 0.5);
  int64_t size = avg - delta + (delta == 0 ? 0 : (int64_t)next_int(r, (uint32_t)(2 * delta)));
  uint32_t off = next_int(r, (uint32_t)(EXTRA_LEN - size));
  copy_later(cp, g->extra + off, buf, p, (size_t)size);
  return (size_t)size;
}

/* ---- ids ------------------------------------------------------------------ */

/* The last person made at or before event id e (base 0). */
static int64_t last_person(int64_t e) {
  int64_t epoch = e / TOTAL_PROPORTION, off = e % TOTAL_PROPORTION;
  if (off >= PERSON_PROPORTION) off = PERSON_PROPORTION - 1;
  return epoch * PERSON_PROPORTION + off;
}

/* The last auction made at or before event id e (base 0). */
static int64_t last_auction(int64_t e) {
  int64_t epoch = e / TOTAL_PROPORTION, off = e % TOTAL_PROPORTION;
  if (off < PERSON_PROPORTION) {
    epoch--;
    off = AUCTION_PROPORTION - 1;
  } else if (off >= PERSON_PROPORTION + AUCTION_PROPORTION) {
    off = AUCTION_PROPORTION - 1;
  } else {
    off -= PERSON_PROPORTION;
  }
  return epoch * AUCTION_PROPORTION + off;
}

/* One of the active people, or a few ids ahead of the last (base 0). */
static int64_t next_person(rng *r, int64_t e) {
  int64_t n = last_person(e) + 1;
  int64_t active = n < NUM_ACTIVE_PEOPLE ? n : NUM_ACTIVE_PEOPLE;
  return n - active + next_long(r, active + PERSON_ID_LEAD);
}

/* One of the auctions likely in flight, or a few ahead (base 0). */
static int64_t next_auction(rng *r, int64_t e) {
  int64_t max = last_auction(e);
  int64_t min = max - NUM_IN_FLIGHT_AUCTIONS > 0 ? max - NUM_IN_FLIGHT_AUCTIONS : 0;
  return min + next_long(r, max - min + 1 + AUCTION_ID_LEAD);
}

/* Event time of event number n (the suite numbers from 1: event i is
 * number i + 1). */
static int64_t time_of(const weir_nexmark_gen *g, uint64_t n) {
  /* n <= 2^50 + 1700 here (weir_nexmark_gen_create): n * 1000 fits in 64
   * bits, and a 64-bit division is several times cheaper than a 128-bit
   * one (a call to the runtime). */
  if (n < (1ull << 53)) return g->base_time + (int64_t)(n * 1000u / g->tps);
  return g->base_time + (int64_t)((u128)n * 1000u / g->tps);
}

/* ---- events --------------------------------------------------------------- */

/* A string of a table, with its length. */
typedef struct nx_word {
  const char *p;
  uint8_t len;
} nx_word;
#define WORD(s)                                                                                    \
  { s, sizeof s - 1 }

static size_t put_word(char *p, nx_word w) {
  memcpy(p, w.p, w.len);
  return w.len;
}

/* The fixed part is stored field by field straight into the payload: a
 * struct on the stack filled with 16-bit stores and then copied out with
 * 16-byte loads stalled on store forwarding (a fifth of the generator's
 * samples). */
static void put16(uint8_t *b, size_t off, uint16_t v) {
  memcpy(b + off, &v, 2);
}
static void put32(uint8_t *b, size_t off, uint32_t v) {
  memcpy(b + off, &v, 4);
}
static void put64(uint8_t *b, size_t off, int64_t v) {
  memcpy(b + off, &v, 8);
}
#define PUT16(b, type, field, v) put16(b, offsetof(type, field), (uint16_t)(v))
#define PUT64(b, type, field, v) put64(b, offsetof(type, field), (int64_t)(v))

static const nx_word US_STATES[] = {WORD("AZ"), WORD("CA"), WORD("ID"),
                                    WORD("OR"), WORD("WA"), WORD("WY")};
static const nx_word US_CITIES[] = {
    WORD("Phoenix"), WORD("Los Angeles"), WORD("San Francisco"), WORD("Boise"), WORD("Portland"),
    WORD("Bend"),    WORD("Redmond"),     WORD("Seattle"),       WORD("Kent"),  WORD("Cheyenne")};
static const nx_word FIRST_NAMES[] = {WORD("Peter"), WORD("Paul"),   WORD("Luke"),  WORD("John"),
                                      WORD("Saul"),  WORD("Vicky"),  WORD("Kate"),  WORD("Julie"),
                                      WORD("Sarah"), WORD("Deiter"), WORD("Walter")};
static const nx_word LAST_NAMES[] = {WORD("Shultz"), WORD("Abrams"),  WORD("Spencer"),
                                     WORD("White"),  WORD("Bartels"), WORD("Walton"),
                                     WORD("Smith"),  WORD("Jones"),   WORD("Noris")};
static const nx_word HOT_CHANNELS[] = {WORD("Google"), WORD("Facebook"), WORD("Baidu"),
                                       WORD("Apple")};

static size_t make_person(const weir_nexmark_gen *g, rng *r, int64_t e, uint64_t i, int64_t ts,
                          uint8_t *buf, nx_copies *cp) {
  typedef weir_nexmark_person T;
  put32(buf, 0, WEIR_NEXMARK_PERSON);
  PUT64(buf, T, event, i);
  PUT64(buf, T, date_time, ts);
  PUT64(buf, T, id, last_person(e) + FIRST_PERSON_ID);
  char *p = (char *)buf + sizeof(T), *s = p;
  /* name */
  size_t n = put_word(p, FIRST_NAMES[next_int(r, NELEM(FIRST_NAMES))]);
  p[n++] = ' ';
  n += put_word(p + n, LAST_NAMES[next_int(r, NELEM(LAST_NAMES))]);
  PUT16(buf, T, len[0], n);
  p += n;
  /* email: nextString(7) @ nextString(5) .com */
  n = next_string(r, 7, ' ', p);
  p[n++] = '@';
  n += next_string(r, 5, ' ', p + n);
  memcpy(p + n, ".com", 4);
  n += 4;
  PUT16(buf, T, len[1], n);
  p += n;
  /* credit card: four groups of four digits */
  for (int k = 0; k < 4; k++) {
    uint32_t v = next_int(r, 10000);
    if (k) *p++ = ' ';
    p[0] = (char)('0' + v / 1000);
    p[1] = (char)('0' + v / 100 % 10);
    p[2] = (char)('0' + v / 10 % 10);
    p[3] = (char)('0' + v % 10);
    p += 4;
  }
  PUT16(buf, T, len[2], 19);
  n = put_word(p, US_CITIES[next_int(r, NELEM(US_CITIES))]);
  PUT16(buf, T, len[3], n);
  p += n;
  n = put_word(p, US_STATES[next_int(r, NELEM(US_STATES))]);
  PUT16(buf, T, len[4], n);
  p += n;
  size_t current = 8 + (size_t)(p - s);
  n = next_extra(g, r, current, AVG_PERSON_BYTES, buf, p, cp);
  PUT16(buf, T, len[5], n);
  p += n;
  return (size_t)((uint8_t *)p - buf);
}

static size_t make_auction(const weir_nexmark_gen *g, rng *r, int64_t e, uint64_t i, int64_t ts,
                           uint8_t *buf, nx_copies *cp) {
  typedef weir_nexmark_auction T;
  put32(buf, 0, WEIR_NEXMARK_AUCTION);
  memset(buf + offsetof(T, pad), 0, sizeof(((T *)0)->pad));
  PUT64(buf, T, event, i);
  PUT64(buf, T, date_time, ts);
  PUT64(buf, T, id, last_auction(e) + FIRST_AUCTION_ID);
  int64_t seller;
  if (next_int(r, HOT_SELLERS_RATIO) > 0)
    seller = last_person(e) / HOT_BATCH * HOT_BATCH; /* the hot seller of the last 100 */
  else
    seller = next_person(r, e);
  PUT64(buf, T, seller, seller + FIRST_PERSON_ID);
  PUT64(buf, T, category, FIRST_CATEGORY_ID + next_int(r, NUM_CATEGORIES));
  int64_t initial_bid = next_price(g, r);
  PUT64(buf, T, initial_bid, initial_bid);
  /* A length averaging the time until NUM_IN_FLIGHT_AUCTIONS more
   * auctions have been made. */
  int64_t ahead = (int64_t)NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION / AUCTION_PROPORTION;
  int64_t horizon = time_of(g, i + 1 + (uint64_t)ahead) - ts;
  PUT64(buf, T, expires, ts + 1 + next_long(r, horizon * 2 > 1 ? horizon * 2 : 1));
  char *p = (char *)buf + sizeof(T);
  size_t n0 = next_string(r, 20, ' ', p);
  PUT16(buf, T, len[0], n0);
  p += n0;
  size_t n1 = next_string(r, 100, ' ', p);
  PUT16(buf, T, len[1], n1);
  p += n1;
  PUT64(buf, T, reserve, initial_bid + next_price(g, r));
  size_t current = 8 + n0 + n1 + 8 + 8 + 8 + 8 + 8;
  size_t n2 = next_extra(g, r, current, AVG_AUCTION_BYTES, buf, p, cp);
  PUT16(buf, T, len[2], n2);
  p += n2;
  return (size_t)((uint8_t *)p - buf);
}

static size_t make_bid(const weir_nexmark_gen *g, rng *r, int64_t e, uint64_t i, int64_t ts,
                       uint8_t *buf, nx_copies *cp, uint64_t *key) {
  typedef weir_nexmark_bid T;
  put32(buf, 0, WEIR_NEXMARK_BID);
  memset(buf + offsetof(T, pad), 0, sizeof(((T *)0)->pad));
  PUT64(buf, T, event, i);
  PUT64(buf, T, date_time, ts);
  int64_t auction, bidder;
  if (next_int(r, HOT_AUCTION_RATIO) > 0)
    auction = last_auction(e) / HOT_BATCH * HOT_BATCH;
  else
    auction = next_auction(r, e);
  auction += FIRST_AUCTION_ID;
  PUT64(buf, T, auction, auction);
  *key = (uint64_t)auction;
  if (next_int(r, HOT_BIDDERS_RATIO) > 0)
    bidder = last_person(e) / HOT_BATCH * HOT_BATCH + 1; /* not the hot seller */
  else
    bidder = next_person(r, e);
  /* The suite adds the first person id twice to a bidder (BidGenerator):
   * kept, so that bidders are where the suite's are. */
  PUT64(buf, T, bidder, bidder + 2 * FIRST_PERSON_ID);
  PUT64(buf, T, price, next_price(g, r));
  char *p = (char *)buf + sizeof(T);
  size_t clen, ulen;
  if (next_int(r, 2) > 0) {
    uint32_t k = next_int(r, NELEM(HOT_CHANNELS));
    clen = put_word(p, HOT_CHANNELS[k]);
    ulen = g->hot_url_len[k];
    copy_later(cp, g->hot_url[k], buf, p + clen, ulen);
  } else {
    uint32_t c = next_int(r, CHANNELS), k = c;
    memcpy(p, "channel-", 8);
    clen = 8;
    char d[8];
    size_t nd = 0;
    do {
      d[nd++] = (char)('0' + k % 10);
      k /= 10;
    } while (k);
    while (nd) p[clen++] = d[--nd];
    ulen = g->channel_url_len[c];
    copy_later(cp, g->urls + (size_t)c * URL_STRIDE, buf, p + clen, ulen);
  }
  PUT16(buf, T, len[0], clen);
  PUT16(buf, T, len[1], ulen);
  p += clen + ulen;
  size_t n = next_extra(g, r, 8 + 8 + 8 + 8, AVG_BID_BYTES, buf, p, cp);
  PUT16(buf, T, len[2], n);
  p += n;
  return (size_t)((uint8_t *)p - buf);
}

/* Event i without the copies out of the large tables (cp says which). */
static size_t gen_head(const weir_nexmark_gen *g, uint64_t i, uint8_t *b, uint64_t *key,
                       int64_t *ts, nx_copies *cp) {
  int64_t e = (int64_t)i + 2; /* the suite's event id (weir/nexmark.h) */
  int64_t t = time_of(g, i + 1);
  rng r = {splitmix64(g->seed_mix ^ (uint64_t)e)};
  int64_t rem = e % TOTAL_PROPORTION;
  size_t n;
  cp->n = 0;
  if (rem < PERSON_PROPORTION) {
    n = make_person(g, &r, e, i, t, b, cp);
    *key = (uint64_t)(last_person(e) + FIRST_PERSON_ID);
  } else if (rem < PERSON_PROPORTION + AUCTION_PROPORTION) {
    n = make_auction(g, &r, e, i, t, b, cp);
    *key = (uint64_t)(last_auction(e) + FIRST_AUCTION_ID);
  } else {
    n = make_bid(g, &r, e, i, t, b, cp, key);
  }
  *ts = t;
  return n;
}

size_t weir_nexmark_gen_event(const weir_nexmark_gen *g, uint64_t i, void *buf, uint64_t *key,
                              int64_t *ts) {
  nx_copies cp;
  size_t n = gen_head(g, i, buf, key, ts, &cp);
  copies_do(&cp, buf);
  return n;
}

/* ---- parsing -------------------------------------------------------------- */

int weir_nexmark_parse(const void *payload, size_t len, weir_nexmark_event *out) {
  const uint8_t *p = payload;
  int kind = weir_nexmark_kind(payload, len);
  size_t fixed, nstr;
  const uint16_t *lens;
  switch (kind) {
  case WEIR_NEXMARK_PERSON:
    fixed = sizeof(weir_nexmark_person);
    nstr = 6;
    lens = out->u.person.len;
    break;
  case WEIR_NEXMARK_AUCTION:
    fixed = sizeof(weir_nexmark_auction);
    nstr = 3;
    lens = out->u.auction.len;
    break;
  case WEIR_NEXMARK_BID:
    fixed = sizeof(weir_nexmark_bid);
    nstr = 3;
    lens = out->u.bid.len;
    break;
  default:
    return WEIR_EBADREC;
  }
  if (len < fixed) return WEIR_EBADREC;
  memcpy(&out->u, p, fixed);
  out->kind = (uint32_t)kind;
  size_t off = fixed;
  for (size_t k = 0; k < nstr; k++) {
    if (lens[k] > len - off) return WEIR_EBADREC;
    out->s[k].p = (const char *)p + off;
    out->s[k].len = lens[k];
    off += lens[k];
  }
  for (size_t k = nstr; k < 6; k++) out->s[k] = (weir_nexmark_str){"", 0};
  return off == len ? 0 : WEIR_EBADREC;
}

/* ---- the generator's tables ----------------------------------------------- */

static size_t put_str(char *p, const char *s) {
  size_t n = strlen(s);
  memcpy(p, s, n);
  return n;
}

/* The suite's getBaseUrl: https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1
 * with three nextString(5, '_'). */
static size_t base_url(rng *r, char *p) {
  size_t n = put_str(p, "https://www.nexmark.com/");
  for (int k = 0; k < 3; k++) {
    n += next_string(r, 5, '_', p + n);
    p[n++] = '/';
  }
  n += put_str(p + n, "item.htm?query=1");
  p[n] = '\0';
  return n;
}

static void gen_free(weir_nexmark_gen *g) {
  if (!g) return;
  weir_free(g->extra);
  for (int k = 0; k < 4; k++) weir_free(g->hot_url[k]);
  weir_free(g->urls);
  weir_free(g);
}

void weir_nexmark_gen_destroy(weir_nexmark_gen *g) {
  gen_free(g);
}

int weir_nexmark_gen_create(const weir_nexmark_opts *opts, weir_nexmark_gen **out, char *err,
                            size_t errlen) {
  *out = NULL;
  const char *why = NULL;
  weir_nexmark_opts o;
  memset(&o, 0, sizeof o);
  if (!opts || opts->size < sizeof o)
    why = "weir_nexmark_opts without its size";
  else
    memcpy(&o, opts, sizeof o);
  if (!why && o.events == 0) why = "events must be at least 1";
  if (!why && o.events > (1ull << 50)) why = "events must be at most 2^50";
  if (!why && (o.base_time < 0 || o.base_time > (1ll << 52)))
    why = "base_time must be within 0 .. 2^52 ms";
  if (!why && o.delay_ms > 1000000000) why = "delay_ms is too large";
  if (why) {
    if (err && errlen) snprintf(err, errlen, "%s", why);
    return WEIR_EINVAL;
  }
  weir_nexmark_gen *g = weir_calloc(1, sizeof *g);
  g->events = o.events;
  g->tps = o.tps ? o.tps : WEIR_NEXMARK_DEFAULT_TPS;
  g->rate = o.rate;
  g->seed_mix = splitmix64(o.seed);
  g->base_time = o.base_time ? o.base_time : WEIR_NEXMARK_DEFAULT_BASE_TIME;
  g->delay_ms = o.delay_ms <= 0 ? WEIR_NEXMARK_DEFAULT_DELAY_MS : o.delay_ms;
  g->watermark_interval_ms = o.watermark_interval_ms;
  /* The tables' own stream: the seed mixed with a constant no event id
   * reaches (e >= 2). */
  rng r = {splitmix64(g->seed_mix ^ 1)};
  /* The suite's nextExactString: 'a' + rnd % 26 of a signed 32-bit rnd,
   * six characters per draw; a negative rnd gives characters below 'a'
   * ('H' .. '`'), as the suite's string has them. */
  g->extra = weir_malloc(EXTRA_LEN);
  int32_t rnd = 0;
  int left = 0;
  for (size_t k = 0; k < EXTRA_LEN; k++) {
    if (left == 0) {
      rnd = (int32_t)(uint32_t)(next64(&r) >> 32);
      left = 6;
    }
    g->extra[k] = (char)('a' + rnd % 26);
    rnd /= 26;
    left--;
  }
  char url[128];
  for (int k = 0; k < 4; k++) {
    size_t n = base_url(&r, url);
    g->hot_url[k] = weir_malloc(n + 1);
    memcpy(g->hot_url[k], url, n + 1);
    g->hot_url_len[k] = (uint8_t)n;
  }
  g->urls = weir_malloc((size_t)CHANNELS * URL_STRIDE);
  for (int k = 0; k < CHANNELS; k++) {
    size_t n = base_url(&r, url);
    if (next_int(&r, 10) > 0) {
      /* Java's Math.abs(Integer.reverse(k)): bits reversed as a signed
       * int; the absolute value of INT_MIN stays INT_MIN. */
      uint32_t v = (uint32_t)k, rev = 0;
      for (int b = 0; b < 32; b++) rev |= ((v >> b) & 1u) << (31 - b);
      int64_t sv = (int32_t)rev;
      if (sv < 0 && sv != INT32_MIN) sv = -sv;
      n += (size_t)snprintf(url + n, sizeof url - n, "&channel_id=%lld", (long long)sv);
    }
    WEIR_ASSERT(n <= URL_STRIDE);
    memcpy(g->urls + (size_t)k * URL_STRIDE, url, n);
    g->channel_url_len[k] = (uint8_t)n;
  }
  for (int k = 0; k < 256; k++) g->exp2_frac[k] = exp2(k / 256.0);
  for (int k = 0; k < 64; k++) g->exp2_int100[k] = ldexp(100.0, k);
  *out = g;
  return 0;
}

/* ---- the CSV dump --------------------------------------------------------- */

static void csv_str(FILE *f, const weir_nexmark_str *s) {
  fwrite(s->p, 1, s->len, f);
}

int weir_nexmark_write_csv(const weir_nexmark_gen *g, uint64_t first, uint64_t n, FILE *out) {
  if (first == 0)
    fputs("event,event_type,date_time,id,name,email_address,credit_card,city,state,"
          "item_name,description,initial_bid,reserve,expires,seller,category,"
          "auction,bidder,price,channel,url,extra\n",
          out);
  uint8_t buf[WEIR_NEXMARK_MAX_EVENT];
  weir_nexmark_event ev;
  for (uint64_t i = first; i < first + n && i < g->events; i++) {
    uint64_t key;
    int64_t ts;
    size_t len = weir_nexmark_gen_event(g, i, buf, &key, &ts);
    if (weir_nexmark_parse(buf, len, &ev) < 0) return WEIR_EBADREC; /* not reached */
    fprintf(out, "%llu,%u,%lld,", (unsigned long long)i, ev.kind, (long long)ts);
    if (ev.kind == WEIR_NEXMARK_PERSON) {
      fprintf(out, "%lld", (long long)ev.u.person.id);
      for (int k = 0; k < 5; k++) {
        fputc(',', out);
        csv_str(out, &ev.s[k]);
      }
      fputs(",,,,,,,,,,,,,", out);
      csv_str(out, &ev.s[5]);
    } else if (ev.kind == WEIR_NEXMARK_AUCTION) {
      const weir_nexmark_auction *a = &ev.u.auction;
      fprintf(out, "%lld,,,,,,", (long long)a->id);
      csv_str(out, &ev.s[0]);
      fputc(',', out);
      csv_str(out, &ev.s[1]);
      fprintf(out, ",%lld,%lld,%lld,%lld,%lld,,,,,,", (long long)a->initial_bid,
              (long long)a->reserve, (long long)a->expires, (long long)a->seller,
              (long long)a->category);
      csv_str(out, &ev.s[2]);
    } else {
      const weir_nexmark_bid *b = &ev.u.bid;
      fprintf(out, ",,,,,,,,,,,,,%lld,%lld,%lld,", (long long)b->auction, (long long)b->bidder,
              (long long)b->price);
      csv_str(out, &ev.s[0]);
      fputc(',', out);
      csv_str(out, &ev.s[1]);
      fputc(',', out);
      csv_str(out, &ev.s[2]);
    }
    if (fputc('\n', out) == EOF) return WEIR_EIO;
  }
  return ferror(out) ? WEIR_EIO : 0;
}

/* ---- the source ----------------------------------------------------------- */

typedef struct nx_split {
  uint64_t next;  /* the next event of this split, or the end */
  uint32_t index; /* j */
} nx_split;

/* Events made at once before they are emitted (nx_emit): enough for the
 * prefetches of a group to arrive before its first copy, few enough that
 * the group stays in the first-level cache (16 bids are 2 KB: the events
 * are packed, the buffer only has room for the largest). */
#define GROUP 16
#define GROUP_BYTES (GROUP * WEIR_NEXMARK_MAX_EVENT)

/* One subtask's position; owned by the subtask's thread. */
typedef struct nx_state {
  uint32_t nlive, nsplits, cur;
  nx_split *s;
  uint64_t emitted, t0, chunk; /* rate limiting, as weir_gen's */
  uint8_t buf[GROUP_BYTES];
} nx_state;

#define NS_PER_S 1000000000ull
#define CHUNK_NS 1000000ull

/* The first event of split j at or after event i (the end when none). */
static uint64_t split_next(const weir_nexmark_gen *g, uint32_t j, uint64_t i) {
  uint64_t b = i / B;
  if (b % S != j) {
    /* the next block of split j after block b */
    uint64_t round = b / S, nb = round * S + j;
    if (nb < b) nb += S;
    i = nb * B;
  }
  return i < g->events ? i : g->events;
}

static void nx_prune(nx_state *st, weir_ctx *ctx, const weir_nexmark_gen *g) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < st->nlive; i++) {
    if (st->s[i].next < g->events)
      st->s[k++] = st->s[i];
    else
      weir_source_split_end(ctx, st->s[i].index);
  }
  st->nlive = k;
  if (st->cur >= st->nlive) st->cur = 0;
}

static int nx_open(weir_ctx *ctx) {
  const weir_nexmark_gen *g = weir_ctx_arg(ctx);
  uint32_t p = weir_ctx_parallelism(ctx), sub = weir_ctx_subtask(ctx);
  nx_state *st = weir_calloc(1, sizeof *st);
  for (uint64_t j = sub; j < S; j += p) st->nsplits++;
  st->s = weir_calloc(st->nsplits ? st->nsplits : 1, sizeof *st->s);
  uint32_t k = 0;
  for (uint64_t j = sub; j < S; j += p)
    st->s[k++] = (nx_split){split_next(g, (uint32_t)j, j * B), (uint32_t)j};
  st->nlive = st->nsplits;
  /* Every owned split holds event time back from the start. */
  for (uint32_t i = 0; i < st->nlive; i++) weir_source_split(ctx, st->s[i].index);
  nx_prune(st, ctx, g);
  if (g->rate && st->nsplits) {
    u128 c = (u128)g->rate * st->nsplits * CHUNK_NS / ((u128)S * NS_PER_S);
    st->chunk = c == 0 ? 1 : c > UINT32_MAX ? UINT32_MAX : (uint64_t)c;
  }
  weir_ctx_set_user(ctx, st);
  return 0;
}

static uint64_t due_at(uint64_t ns, uint64_t rate, uint64_t n) {
  u128 d = (u128)ns * rate * n / ((u128)S * NS_PER_S);
  return d > UINT64_MAX ? UINT64_MAX : (uint64_t)d;
}

static uint64_t ns_of(uint64_t k, uint64_t rate, uint64_t n) {
  u128 num = (u128)k * S * NS_PER_S, den = (u128)rate * n;
  u128 t = (num + den - 1) / den;
  return t > UINT64_MAX ? UINT64_MAX : (uint64_t)t;
}

/* Events first .. first + n - 1 (n <= GROUP) into st->buf, then out:
 * made without their table copies, which are prefetched, then copied and
 * emitted one by one. */
static int emit_group(weir_ctx *ctx, nx_state *st, const weir_nexmark_gen *g, uint64_t first,
                      uint32_t n, uint64_t id0) {
  weir_record r[GROUP];
  nx_copies cp[GROUP];
  size_t used = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint8_t *b = st->buf + used;
    r[k].payload = b;
    r[k].len = (uint32_t)gen_head(g, first + k, b, &r[k].key, &r[k].ts, &cp[k]);
    r[k].id = id0 + first + k;
    copies_prefetch(&cp[k]);
    used += r[k].len;
  }
  for (uint32_t k = 0; k < n; k++) {
    copies_do(&cp[k], (uint8_t *)r[k].payload);
    int rc = weir_emit_record(ctx, &r[k]);
    if (rc < 0) return rc;
  }
  return 0;
}

static int nx_emit(weir_ctx *ctx, nx_state *st, const weir_nexmark_gen *g, uint64_t n) {
  uint64_t done = 0;
  while (done < n && st->nlive) {
    nx_split *sp = &st->s[st->cur];
    weir_source_split(ctx, sp->index);
    uint64_t id0 = weir_source_record_id(ctx, sp->index, 0);
    /* to the end of this block, at most */
    uint64_t block_end = (sp->next / B + 1) * B;
    if (block_end > g->events) block_end = g->events;
    while (done < n && sp->next < block_end) {
      uint64_t m = block_end - sp->next;
      if (m > n - done) m = n - done;
      if (m > GROUP) m = GROUP;
      int rc = emit_group(ctx, st, g, sp->next, (uint32_t)m, id0);
      if (rc < 0) return rc;
      sp->next += m;
      done += m;
    }
    if (sp->next == block_end) {
      sp->next = split_next(g, sp->index, block_end);
      if (sp->next >= g->events) {
        nx_prune(st, ctx, g);
        continue;
      }
      if (++st->cur == st->nlive) st->cur = 0;
    }
  }
  st->emitted += done;
  return 0;
}

static int nx_run(weir_ctx *ctx, uint32_t budget) {
  const weir_nexmark_gen *g = weir_ctx_arg(ctx);
  nx_state *st = weir_ctx_user(ctx);
  if (weir_ctx_stopping(ctx) || !st->nlive) return WEIR_SOURCE_DONE;
  uint64_t n = budget ? budget : 1;
  if (g->rate) {
    uint64_t now = weir_clock_mono_ns();
    if (st->t0 == 0) st->t0 = now;
    uint64_t due = due_at(now - st->t0, g->rate, st->nsplits) + 1;
    uint64_t backlog = g->rate * st->nsplits / S + 1;
    if (due > st->emitted + backlog + n) {
      /* far behind (stalled): forget the backlog rather than burst */
      st->t0 = now - ns_of(st->emitted, g->rate, st->nsplits);
      due = st->emitted + 1;
    }
    if (due <= st->emitted) {
      uint64_t at = ns_of(st->emitted + st->chunk - 1, g->rate, st->nsplits);
      uint64_t elapsed = now - st->t0;
      weir_ctx_wake_after(ctx, at > elapsed ? (at - elapsed + 999) / 1000 : 1);
      return WEIR_SOURCE_IDLE;
    }
    if (due - st->emitted < n) n = due - st->emitted;
  }
  int rc = nx_emit(ctx, st, g, n);
  if (rc < 0) return rc;
  return st->nlive ? WEIR_SOURCE_MORE : WEIR_SOURCE_DONE;
}

static int nx_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  const weir_nexmark_gen *g = weir_ctx_arg(ctx);
  nx_state *st = weir_ctx_user(ctx);
  uint32_t p = weir_ctx_parallelism(ctx), sub = weir_ctx_subtask(ctx);
  for (uint64_t j = sub; j < S; j += p) {
    uint64_t next = g->events; /* pruned: exhausted */
    for (uint32_t i = 0; i < st->nlive; i++)
      if (st->s[i].index == j) next = st->s[i].next;
    int rc = weir_snapshot_position(w, (uint32_t)j, next);
    if (rc < 0) return rc;
  }
  return 0;
}

static int nx_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  const weir_nexmark_gen *g = weir_ctx_arg(ctx);
  nx_state *st = weir_ctx_user(ctx);
  uint32_t p = weir_ctx_parallelism(ctx), sub = weir_ctx_subtask(ctx);
  uint32_t k = 0;
  for (uint64_t j = sub; j < S; j += p) {
    uint64_t next = split_next(g, (uint32_t)j, j * B);
    if (weir_snapshot_get_position(r, (uint32_t)j, &next) && next < g->events && next / B % S != j)
      return weir_ctx_fail(ctx, WEIR_ECORRUPT,
                           "nexmark split %llu: position %llu is not one of its events",
                           (unsigned long long)j, (unsigned long long)next);
    if (next > g->events) next = g->events;
    st->s[k++] = (nx_split){next, (uint32_t)j};
  }
  st->nlive = k;
  st->cur = 0;
  nx_prune(st, ctx, g);
  return 0;
}

static void nx_close(weir_ctx *ctx) {
  nx_state *st = weir_ctx_user(ctx);
  if (st) weir_free(st->s);
  weir_free(st);
  weir_ctx_set_user(ctx, NULL);
}

static const weir_source_vt nexmark_vt = {
    .size = sizeof(weir_source_vt),
    .name = "nexmark",
    .rescalable = 1, /* splits are fixed (WEIR_NEXMARK_SPLITS), whatever P */
    .open = nx_open,
    .run = nx_run,
    .close = nx_close,
    .snapshot = nx_snapshot,
    .restore = nx_restore,
};

static void gen_free_void(void *p) {
  gen_free(p);
}

weir_stream *weir_nexmark_source(weir_job *job, const char *name, const weir_nexmark_opts *opts,
                                 int parallelism) {
  if (!job) return NULL;
  char err[160];
  weir_nexmark_gen *g = NULL;
  int rc = weir_nexmark_gen_create(opts, &g, err, sizeof err);
  if (rc < 0) {
    weir_job_fail(job, rc, "weir_nexmark_source '%s': %s", name ? name : "?", err);
    return NULL;
  }
  if (weir_job_adopt(job, g, gen_free_void) < 0) return NULL;
  weir_watermark_strategy ws = {
      .size = sizeof ws, .out_of_orderness = g->delay_ms, .interval_ms = g->watermark_interval_ms};
  return weir_with_watermarks(weir_source(job, name, &nexmark_vt, g, parallelism), &ws);
}
