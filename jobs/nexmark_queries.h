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

typedef struct nx_line {
  size_t n;
  char b[2 * WEIR_NEXMARK_MAX_EVENT + 512];
} nx_line;

static inline void nx_u64(nx_line *l, uint64_t v) {
  char d[24];
  size_t n = 0;
  do {
    d[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) l->b[l->n++] = d[--n];
}

static inline void nx_i64(nx_line *l, int64_t v) {
  if (v < 0) {
    l->b[l->n++] = '-';
    nx_u64(l, 0 - (uint64_t)v);
  } else {
    nx_u64(l, (uint64_t)v);
  }
}

static inline void nx_c(nx_line *l, char c) {
  l->b[l->n++] = c;
}

static inline void nx_mem(nx_line *l, const void *p, size_t n) {
  memcpy(l->b + l->n, p, n);
  l->n += n;
}

static inline void nx_str(nx_line *l, const weir_nexmark_str *s) {
  nx_mem(l, s->p, s->len);
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
