/* jobs/nexmark_queries.h: what the `nexmark` job's two files share (private
 * to jobs/): the signature of a query's builder, the builders of the
 * queries in jobs/nexmark_stateful.c (windows, joins, sessions, distinct
 * and winning-bid aggregates), and the helpers with which they write a
 * result's text. jobs/nexmark.c owns the flags, the query table and the
 * runs.
 *
 * DESIGN. A result is the text "<field>,<field>,..." after its key (the
 * sink writes "<key> <text>", cli_key_and_text), made in a stack buffer
 * with the nx_* appenders below, which never fail: a buffer holds two
 * events' strings and the numbers around them, more than any line needs
 * (the longest, q9's and q20's, join an auction and a bid).
 */
#ifndef WEIR_JOBS_NEXMARK_QUERIES_H
#define WEIR_JOBS_NEXMARK_QUERIES_H

#include <stdint.h>
#include <string.h>

#include "weir/weir.h"

typedef struct nx_cfg nx_cfg;
/* Adds a query's operators after the source `src` (parallelism p) and
 * sets *out to the stream of its result lines. 0, or the job's build
 * error. */
typedef int (*nx_build_fn)(weir_job *job, weir_stream *src, const nx_cfg *c, int p,
                           weir_stream **out);

/* jobs/nexmark_stateful.c */
int nx_q4_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q5_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q6_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q7_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q8_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q9_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q10_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q11_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q12_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q15_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q16_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);
int nx_q20_build(weir_job *job, weir_stream *src, const nx_cfg *c, int p, weir_stream **out);

/* ---- a result's text ------------------------------------------------------ */

/* A result's text (the payload after the key). Fields are at most a few
 * hundred bytes; a line never exceeds the largest event. */
typedef struct nx_line {
  size_t n;
  char b[2 * WEIR_NEXMARK_MAX_EVENT + 512];
} nx_line;

/* Numbers are most of a stateless query's line (a 13-digit timestamp and
 * three ids per result): written two digits per step from a table, into
 * their place at once (the digits counted first), where digit by digit
 * through a buffer was a sixth of q0's cycles. */
static const char NX_DIGITS2[201] = "00010203040506070809101112131415161718192021222324"
                                    "25262728293031323334353637383940414243444546474849"
                                    "50515253545556575859606162636465666768697071727374"
                                    "75767778798081828384858687888990919293949596979899";

static inline unsigned nx_ndigits(uint64_t v) {
  static const uint64_t pow10[20] = {1ull,
                                     10ull,
                                     100ull,
                                     1000ull,
                                     10000ull,
                                     100000ull,
                                     1000000ull,
                                     10000000ull,
                                     100000000ull,
                                     1000000000ull,
                                     10000000000ull,
                                     100000000000ull,
                                     1000000000000ull,
                                     10000000000000ull,
                                     100000000000000ull,
                                     1000000000000000ull,
                                     10000000000000000ull,
                                     100000000000000000ull,
                                     1000000000000000000ull,
                                     10000000000000000000ull};
  /* floor(log10(v)) is bits * log10(2) or one less */
  unsigned t = ((unsigned)(64 - __builtin_clzll(v | 1)) * 1233u) >> 12;
  return t + 1 - ((v | 1) < pow10[t]); /* 0 has one digit too */
}

/* Exactly four and eight digits: two independent chains of 32-bit steps. */
static inline void nx_put4(char *p, uint32_t v) {
  uint32_t a = v / 100;
  memcpy(p, NX_DIGITS2 + 2 * a, 2);
  memcpy(p + 2, NX_DIGITS2 + 2 * (v - a * 100), 2);
}

static inline void nx_put8(char *p, uint32_t v) {
  uint32_t a = v / 10000;
  nx_put4(p, a);
  nx_put4(p + 4, v - a * 10000);
}

static inline void nx_u64(nx_line *l, uint64_t v) {
  unsigned nd = nx_ndigits(v);
  char *p = l->b + l->n + nd;
  l->n += nd;
  while (v >= 100000000) {
    uint64_t q = v / 100000000;
    p -= 8;
    nx_put8(p, (uint32_t)(v - q * 100000000));
    v = q;
  }
  while (v >= 100) {
    uint64_t q = v / 100;
    p -= 2;
    memcpy(p, NX_DIGITS2 + 2 * (v - q * 100), 2);
    v = q;
  }
  if (v >= 10)
    memcpy(p - 2, NX_DIGITS2 + 2 * v, 2);
  else
    p[-1] = (char)('0' + v);
}

static inline void nx_i64(nx_line *l, int64_t v) {
  if (v < 0) {
    l->b[l->n++] = '-';
    nx_u64(l, 0 - (uint64_t)v);
  } else {
    nx_u64(l, (uint64_t)v);
  }
}

static inline void nx_mem(nx_line *l, const void *p, size_t n) {
  memcpy(l->b + l->n, p, n);
  l->n += n;
}

static inline void nx_str(nx_line *l, const weir_nexmark_str *s) {
  nx_mem(l, s->p, s->len);
}

static inline void nx_c(nx_line *l, char c) {
  l->b[l->n++] = c;
}

/* A DECIMAL with three places from its value in thousandths (>= 0):
 * Flink's 0.908 * price is price * 908 thousandths, exactly. */
static inline void nx_dec3(nx_line *l, int64_t th) {
  nx_i64(l, th / 1000);
  nx_c(l, '.');
  int64_t f = th % 1000;
  nx_c(l, (char)('0' + f / 100));
  nx_c(l, (char)('0' + f / 10 % 10));
  nx_c(l, (char)('0' + f % 10));
}

/* A comma, then the number. */
static inline void nx_ci64(nx_line *l, int64_t v) {
  nx_c(l, ',');
  nx_i64(l, v);
}

static inline int64_t nx_floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static inline void nx_2digits(nx_line *l, int64_t v) {
  nx_c(l, (char)('0' + v / 10 % 10));
  nx_c(l, (char)('0' + v % 10));
}

/* Days since the epoch as yyyy-MM-dd (proleptic Gregorian, UTC), as
 * Flink's DATE_FORMAT of a TIMESTAMP(3) made from epoch milliseconds;
 * years 0 .. 9999. */
static inline void nx_day(nx_line *l, int64_t z) {
  z += 719468;
  int64_t era = nx_floor_div(z, 146097);
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t y = yoe + era * 400, doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1;
  int64_t m = mp < 10 ? mp + 3 : mp - 9;
  if (m <= 2) y++;
  nx_2digits(l, y / 100);
  nx_2digits(l, y % 100);
  nx_c(l, '-');
  nx_2digits(l, m);
  nx_c(l, '-');
  nx_2digits(l, d);
}

/* The minute of the day of a time (ms) as HH:mm, UTC. */
static inline void nx_hhmm(nx_line *l, int64_t ms) {
  int64_t t = ms - nx_floor_div(ms, 86400000) * 86400000;
  nx_2digits(l, t / 3600000);
  nx_c(l, ':');
  nx_2digits(l, t / 60000 % 60);
}

static inline int nx_emit(weir_ctx *ctx, uint64_t key, const nx_line *l) {
  return weir_emit(ctx, key, l->b, l->n);
}

#endif
