/* test_chanstate.c: the channel-state blob (engine/src/chanstate.c):
 * format 3 round trips (runs, deltas of either sign, extreme values,
 * payloads), format 1 and 2 blobs still read, and a damaged blob (every
 * truncation, every single-byte change, seeded random corruption, wrong
 * counts, bad varints) gives a clean error or records within bounds, never
 * a read past the blob (AddressSanitizer checks that in CI). The fuzzer
 * fuzz_chanstate's seeds are written and checked here, and its findings
 * replayed through the same oracle (tests/fuzz/chanstate_input.h). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chanstate.h"
#include "chanstate_input.h"
#include "helpers.h"
#include "base/alloc.h"

typedef struct want {
  uint32_t k, j, len;
  uint64_t key, id;
  int64_t ts;
} want;

/* Payload byte x of a record with this key. */
static uint8_t pay_byte(uint64_t key, uint32_t x) {
  return (uint8_t)(key * 31u + x);
}

static void fill(weir__batch *b, const want *w, uint32_t n) {
  weir__batch_reset(b);
  uint8_t pay[256];
  for (uint32_t i = 0; i < n; i++) {
    for (uint32_t x = 0; x < w[i].len; x++) pay[x] = pay_byte(w[i].key, x);
    cr_assert(weir__batch_fits(b, w[i].len));
    weir__batch_append(b, w[i].key, w[i].ts, w[i].id, pay, w[i].len);
  }
}

/* Reads one section to its end and checks it against w. */
static void expect(weir__cs_reader *r, const want *w, uint32_t n, int out) {
  weir__cs_rec rec;
  const char *why = NULL;
  for (uint32_t i = 0; i < n; i++) {
    cr_assert_eq(weir__cs_next(r, &rec, &why), 1, "record %u: %s", i, why ? why : "");
    cr_assert_eq(rec.key, w[i].key, "record %u key", i);
    cr_assert_eq(rec.ts, w[i].ts, "record %u ts", i);
    cr_assert_eq(rec.id, w[i].id, "record %u id", i);
    cr_assert_eq(rec.len, w[i].len);
    if (out) {
      cr_assert_eq(rec.k, w[i].k);
      cr_assert_eq(rec.j, w[i].j);
    }
    for (uint32_t x = 0; x < rec.len; x++) cr_assert_eq(rec.data[x], pay_byte(w[i].key, x));
  }
  cr_assert_eq(weir__cs_next(r, &rec, &why), 0, "section does not end: %s", why ? why : "");
}

static const want OUTS[] = {
    {0, 0, 0, 10, 100, 5},
    {0, 0, 8, 11, 101, 6},
    {0, 0, 0, 3, 99, 4},
    {1, 2, 3, UINT64_MAX, 0, INT64_MIN},
    {1, 2, 0, 0, UINT64_MAX, INT64_MAX},
};
static const want INS[] = {
    {0, 0, 0, 1u << 20, 7, -1},
    {0, 0, 17, 5, 8, 0},
    {0, 0, 0, 5, 8, 0},
    {0, 0, 200, 0x8000000000000000ull, 9, -5},
};

/* The blob of OUTS (a run of 3 to (0,0), one of 2 to (1,2)) and INS (two
 * batches). */
static uint8_t *sample(uint64_t *len) {
  weir__cs_writer w;
  memset(&w, 0, sizeof w);
  weir__batch *b = weir__batch_create(16);
  weir__cs_begin(&w);
  weir__cs_run(&w, 0, 0, 3);
  fill(b, OUTS, 3);
  weir__cs_batch(&w, b);
  weir__cs_run(&w, 1, 2, 2);
  fill(b, OUTS + 3, 2);
  weir__cs_batch(&w, b);
  weir__cs_inputs(&w);
  fill(b, INS, 2);
  weir__cs_batch(&w, b);
  fill(b, INS + 2, 2);
  weir__cs_batch(&w, b);
  weir__batch_destroy(b);
  return weir__cs_finish(&w, len);
}

/* Reads a whole blob; returns 0, or -1 (with why) at the first error. */
static int read_all(const uint8_t *p, uint64_t len, uint32_t max_record, const char **why,
                    uint64_t *records) {
  weir__cs_reader r;
  weir__cs_rec rec;
  *records = 0;
  if (weir__cs_open(&r, p, len, max_record, why)) return -1;
  for (int sec = 0; sec < 2; sec++) {
    int rc;
    while ((rc = weir__cs_next(&r, &rec, why)) > 0) {
      cr_assert_leq(rec.len, max_record);
      cr_assert(rec.data >= p && rec.data + rec.len <= p + len, "record outside the blob");
      ++*records;
    }
    if (rc < 0) {
      cr_assert_not_null(*why);
      return -1;
    }
    if (!sec) weir__cs_to_inputs(&r);
  }
  return 0;
}

/* Reads a blob of OUTS and INS (any format) and frees it. */
static void expect_sample(uint8_t *blob, uint64_t len) {
  weir__cs_reader r;
  const char *why = NULL;
  cr_assert_eq(weir__cs_open(&r, blob, len, 256, &why), 0, "%s", why);
  cr_assert_eq(r.out_records, 5);
  cr_assert_eq(r.in_records, 4);
  expect(&r, OUTS, 5, 1);
  weir__cs_to_inputs(&r);
  expect(&r, INS, 4, 0);
  weir__cs_free(blob);
  cr_assert_eq(th_leak_check(), 0);
}

Test(chanstate, format3_round_trip) {
  uint64_t len;
  uint8_t *blob = sample(&len);
  uint32_t h[2];
  memcpy(h, blob, 8);
  cr_assert_eq(h[0], WEIR__CS_MAGIC);
  cr_assert_eq(h[1], WEIR__CS_FORMAT);
  expect_sample(blob, len);
}

/* The size of a blob of 1024 input records from make(i). */
static uint64_t blob_of(void (*make)(uint32_t, uint64_t *, int64_t *, uint64_t *)) {
  weir__cs_writer w;
  memset(&w, 0, sizeof w);
  weir__batch *b = weir__batch_create(1024);
  want *v = weir_malloc(1024 * sizeof *v);
  for (uint32_t i = 0; i < 1024; i++) {
    memset(&v[i], 0, sizeof v[i]);
    make(i, &v[i].key, &v[i].ts, &v[i].id);
  }
  fill(b, v, 1024);
  weir__cs_begin(&w);
  weir__cs_inputs(&w);
  weir__cs_batch(&w, b);
  uint64_t len;
  uint8_t *blob = weir__cs_finish(&w, &len);
  weir__cs_reader r;
  const char *why = NULL;
  cr_assert_eq(weir__cs_open(&r, blob, len, 0, &why), 0, "%s", why);
  weir__cs_to_inputs(&r);
  expect(&r, v, 1024, 0);
  weir__cs_free(blob);
  weir_free(v);
  weir__batch_destroy(b);
  cr_assert_eq(th_leak_check(), 0);
  return len - WEIR__CS_HDR;
}

/* A source's records: key, time and id each a step apart. */
static void source_record(uint32_t i, uint64_t *key, int64_t *ts, uint64_t *id) {
  *key = 1000000u + 37u * i;
  *ts = 5000 + 2 * i;
  *id = 900000000u + 2 * i;
}

/* An operator's records out of a source with parallelism 2: key and time
 * two apart, the id a hash (weir__derive_id). */
static void derived_record(uint32_t i, uint64_t *key, int64_t *ts, uint64_t *id) {
  *key = 4000u + 2u * i;
  *ts = 7000 + 2 * i;
  *id = 0x9e3779b97f4a7c15ull * (i + 1) ^ (0xbf58476d1ce4e5b9ull >> (i % 7));
}

/* A source that takes turns among 64 splits (weir_gen): ids consecutive
 * per split (a step of 128), each split's base a hash. */
static void split_record(uint32_t i, uint64_t *key, int64_t *ts, uint64_t *id) {
  uint64_t j = i % 64, base = 0x9e3779b97f4a7c15ull * (j + 1);
  *key = 2u * i % 1000u;
  *ts = 2 * i;
  *id = base + 128u * (i / 64);
}

/* Its ids are coded against the same split's last: after the first round
 * (8 raw bytes each) a record takes 3 bytes, the id 2 of them. */
Test(chanstate, format3_codes_ids_against_their_split) {
  uint64_t n = blob_of(split_record);
  cr_assert_leq(n, 64u * 10 + 960u * 3 + 64, "%llu bytes for 1024 records", (unsigned long long)n);
}

/* A source's record takes 3 bytes: the head byte, the key's difference,
 * the id's (the time's is in the head); no length, no payload (the first
 * record's differences to 0 take a few more). */
Test(chanstate, format3_is_compact_for_a_source) {
  uint64_t n = blob_of(source_record);
  cr_assert_leq(n, 1024u * 3 + 16, "%llu bytes for 1024 records", (unsigned long long)n);
}

/* A record with a hashed id takes 9: the head byte and the id's 8 bytes
 * (format 2: 12). */
Test(chanstate, format3_is_compact_with_hashed_ids) {
  uint64_t n = blob_of(derived_record);
  cr_assert_leq(n, 1024u * 9 + 16, "%llu bytes for 1024 records", (unsigned long long)n);
}

/* Format 2's coding of a value against the previous one (chanstate.h). */
static uint64_t put_varint2(uint8_t *p, uint64_t o, uint64_t v) {
  for (; v >= 0x80; v >>= 7) p[o++] = (uint8_t)(v | 0x80);
  p[o++] = (uint8_t)v;
  return o;
}

static uint64_t put_delta2(uint8_t *p, uint64_t o, uint64_t v, uint64_t prev) {
  uint64_t d = v - prev, u = (d << 1) ^ (uint64_t)((int64_t)d >> 63);
  if (u < (1ull << 55)) return put_varint2(p, o, u << 1);
  p[o++] = 1;
  memcpy(p + o, &v, 8);
  return o + 8;
}

/* OUTS and INS in an earlier format, as checkpoints written before format
 * 3 hold. Format 1: fixed-width records, router and channel before each
 * output record. Format 2: varint differences, a record
 * [key][ts][id][len][payload], outputs in runs (0,0) x 3 and (1,2) x 2. */
static uint8_t *earlier(uint32_t fmt, uint64_t *len) {
  uint8_t *p = weir_pool_alloc(1024); /* freed as a writer's blob */
  uint64_t o = WEIR__CS_HDR;
  for (int sec = 0; sec < 2; sec++) {
    const want *w = sec ? INS : OUTS;
    uint32_t n = sec ? 4 : 5;
    uint64_t start = o, pk = 0, pt = 0, pi = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (fmt == 1) {
        if (!sec) {
          memcpy(p + o, &w[i].k, 4);
          memcpy(p + o + 4, &w[i].j, 4);
          o += 8;
        }
        memcpy(p + o, &w[i].key, 8);
        memcpy(p + o + 8, &w[i].ts, 8);
        memcpy(p + o + 16, &w[i].id, 8);
        memcpy(p + o + 24, &w[i].len, 4);
        o += 28;
      } else {
        if (!sec && (i == 0 || i == 3)) {
          o = put_varint2(p, o, w[i].k);
          o = put_varint2(p, o, w[i].j);
          o = put_varint2(p, o, i == 0 ? 3 : 2);
        }
        o = put_delta2(p, o, w[i].key, pk);
        o = put_delta2(p, o, (uint64_t)w[i].ts, pt);
        o = put_delta2(p, o, w[i].id, pi);
        o = put_varint2(p, o, w[i].len);
        pk = w[i].key;
        pt = (uint64_t)w[i].ts;
        pi = w[i].id;
      }
      for (uint32_t x = 0; x < w[i].len; x++) p[o++] = pay_byte(w[i].key, x);
    }
    uint64_t q[2] = {n, o - start};
    memcpy(p + 8 + 16 * sec, q, 16);
  }
  uint32_t h[2] = {WEIR__CS_MAGIC, fmt};
  memcpy(p, h, 8);
  *len = o;
  return p;
}

Test(chanstate, format2_still_reads) {
  uint64_t len;
  uint8_t *blob = earlier(2, &len);
  expect_sample(blob, len);
}

Test(chanstate, format1_still_reads) {
  uint64_t len;
  uint8_t *blob = earlier(1, &len);
  expect_sample(blob, len);
}

Test(chanstate, header_errors) {
  uint64_t len;
  uint8_t *blob = sample(&len);
  const char *why = NULL;
  uint64_t n;
  cr_assert_eq(read_all(blob, 39, 256, &why, &n), -1);
  cr_assert_str_eq(why, "shorter than its header");
  uint32_t v = WEIR__CS_FORMAT + 1;
  memcpy(blob + 4, &v, 4);
  cr_assert_eq(read_all(blob, len, 256, &why, &n), -1);
  cr_assert_str_eq(why, "unknown format (written by a newer weir?)");
  v = WEIR__CS_FORMAT;
  memcpy(blob + 4, &v, 4);
  cr_assert_eq(read_all(blob, len - 1, 256, &why, &n), -1);
  cr_assert_str_eq(why, "section lengths do not add up");
  /* One output record more than the header says, then one less. */
  uint64_t c;
  memcpy(&c, blob + 8, 8);
  c--;
  memcpy(blob + 8, &c, 8);
  cr_assert_eq(read_all(blob, len, 256, &why, &n), -1);
  cr_assert_str_eq(why, "output record count does not match");
  c += 2;
  memcpy(blob + 8, &c, 8);
  cr_assert_eq(read_all(blob, len, 256, &why, &n), -1);
  cr_assert_str_eq(why, "output record count does not match");
  c--;
  memcpy(blob + 8, &c, 8);
  memcpy(&c, blob + 24, 8);
  c++;
  memcpy(blob + 24, &c, 8);
  cr_assert_eq(read_all(blob, len, 256, &why, &n), -1);
  cr_assert_str_eq(why, "input record count does not match");
  c--;
  memcpy(blob + 24, &c, 8);
  /* A payload over the limit the task reads with. */
  cr_assert_eq(read_all(blob, len, 199, &why, &n), -1);
  cr_assert_str_eq(why, "malformed input record");
  cr_assert_eq(read_all(blob, len, 200, &why, &n), 0, "%s", why);
  cr_assert_eq(n, 9);
  weir__cs_free(blob);
  cr_assert_eq(th_leak_check(), 0);
}

/* A blob of format fmt with one output section: the header says `records`
 * records in n bytes, which are s. */
static int read_section_in(uint32_t fmt, const uint8_t *s, uint64_t n, uint64_t records,
                           const char **why) {
  uint8_t p[WEIR__CS_HDR + 32];
  cr_assert_leq(n, 32);
  uint32_t h[2] = {WEIR__CS_MAGIC, fmt};
  uint64_t q[4] = {records, n, 0, 0};
  memcpy(p, h, 8);
  memcpy(p + 8, q, 32);
  memcpy(p + WEIR__CS_HDR, s, n);
  uint64_t got;
  int rc = read_all(p, WEIR__CS_HDR + n, 0, why, &got);
  if (!rc) cr_assert_eq(got, records);
  return rc;
}

static int read_section(const uint8_t *s, uint64_t n, uint64_t records, const char **why) {
  return read_section_in(2, s, n, records, why);
}

/* Varints longer than 64 bits, the escape to 8 raw bytes, runs of zero
 * records or longer than their section. */
Test(chanstate, bad_varints_and_runs) {
  const char *why = NULL;
  /* A run (0, 0, 1); key: the escape and UINT64_MAX; ts, id, len 0. */
  uint8_t ok[15] = {0, 0, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0};
  cr_assert_eq(read_section(ok, sizeof ok, 1, &why), 0, "%s", why);
  uint8_t s[32];
  memcpy(s, ok, sizeof ok);
  s[3] = 3; /* an odd value other than the escape */
  cr_assert_eq(read_section(s, sizeof ok, 1, &why), -1);
  cr_assert_str_eq(why, "malformed output record");
  cr_assert_eq(read_section(ok, 10, 1, &why), -1); /* the escape's bytes cut short */
  /* A key of eleven varint bytes; then of ten whose last carries more
   * than the 64th bit; then of ten that fit. */
  memset(s, 0, sizeof s);
  s[2] = 1;
  memset(s + 3, 0xfe, 10);
  s[13] = 0x01;
  cr_assert_eq(read_section(s, 17, 1, &why), -1);
  cr_assert_str_eq(why, "malformed output record");
  s[12] = 0x02;
  s[13] = 0;
  cr_assert_eq(read_section(s, 16, 1, &why), -1);
  s[12] = 0x01;
  cr_assert_eq(read_section(s, 16, 1, &why), 0, "%s", why);
  s[2] = 0; /* a run of no records */
  cr_assert_eq(read_section(s, 16, 1, &why), -1);
  cr_assert_str_eq(why, "malformed output run");
  s[2] = 2; /* a run longer than its section */
  cr_assert_eq(read_section(s, 16, 2, &why), -1);
  cr_assert_str_eq(why, "an output run ends early");
}

/* Format 3's head byte: a key or time coded as a varint that would fit
 * in the head, a length flagged but 0, raw bytes cut short. */
Test(chanstate, bad_heads_format3) {
  const char *why = NULL;
  /* A run (0, 0, 1); head: key raw, ts the same as before, id a varint,
   * no length; key UINT64_MAX; id difference 0. */
  uint8_t ok[13] = {0, 0, 1, 0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0};
  cr_assert_eq(read_section_in(3, ok, sizeof ok, 1, &why), 0, "%s", why);
  cr_assert_eq(read_section_in(3, ok, 11, 1, &why), -1); /* the key's bytes cut short */
  cr_assert_str_eq(why, "malformed output record");
  uint8_t s[32];
  uint8_t small[6] = {0, 0, 1, 0x06, 5, 0}; /* key: a varint 5, which the head holds */
  cr_assert_eq(read_section_in(3, small, sizeof small, 1, &why), -1);
  cr_assert_str_eq(why, "malformed output record");
  small[4] = 6;
  cr_assert_eq(read_section_in(3, small, sizeof small, 1, &why), 0, "%s", why);
  uint8_t nolen[6] = {0, 0, 1, 0x80, 0, 0}; /* a length flagged, and 0 */
  cr_assert_eq(read_section_in(3, nolen, sizeof nolen, 1, &why), -1);
  cr_assert_str_eq(why, "malformed output record");
  nolen[5] = 1; /* a length of 1, its byte missing */
  cr_assert_eq(read_section_in(3, nolen, sizeof nolen, 1, &why), -1);
  memset(s, 0, sizeof s);
  memcpy(s, (uint8_t[]){0, 0, 1, 0x40}, 4); /* the id raw: 8 bytes */
  cr_assert_eq(read_section_in(3, s, 12, 1, &why), 0, "%s", why);
  cr_assert_eq(read_section_in(3, s, 11, 1, &why), -1);
}

/* Every truncation of the last section, every single-byte change and
 * seeded random corruption: an error or records within bounds. */
Test(chanstate, damaged_blobs_stay_in_bounds) {
  uint64_t len;
  uint8_t *blob = sample(&len);
  const char *why;
  uint64_t n;
  for (uint64_t cut = WEIR__CS_HDR; cut < len; cut++) {
    /* Keep the header consistent, so the sections themselves are read. */
    uint8_t *p = weir_malloc(cut);
    memcpy(p, blob, cut);
    uint64_t q[4];
    memcpy(q, p + 8, 32);
    if (cut < WEIR__CS_HDR + q[1]) q[1] = cut - WEIR__CS_HDR;
    q[3] = cut - WEIR__CS_HDR - q[1];
    memcpy(p + 8, q, 32);
    why = NULL;
    cr_assert_eq(read_all(p, cut, 256, &why, &n), -1, "cut at %llu read", (unsigned long long)cut);
    weir_free(p);
  }
  uint8_t *p = weir_malloc(len);
  for (uint64_t i = WEIR__CS_HDR; i < len; i++)
    for (int bit = 0; bit < 8; bit++) {
      memcpy(p, blob, len);
      p[i] ^= (uint8_t)(1u << bit);
      (void)read_all(p, len, 256, &why, &n);
    }
  const char *env = getenv("WEIR_TEST_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 10) : 20261201u;
  for (int round = 0; round < 20000; round++) {
    memcpy(p, blob, len);
    int m = 1 + (int)(th_splitmix64(&seed) % 4);
    for (int k = 0; k < m; k++)
      p[WEIR__CS_HDR + th_splitmix64(&seed) % (len - WEIR__CS_HDR)] = (uint8_t)th_splitmix64(&seed);
    (void)read_all(p, len, 256, &why, &n);
  }
  weir_free(p);
  weir__cs_free(blob);
  cr_assert_eq(th_leak_check(), 0);
}

/* Seeded random records (keys, times and ids near and far apart, payloads
 * of any length) in runs and batches of random sizes read back exactly. */
Test(chanstate, random_round_trips) {
  const char *env = getenv("WEIR_TEST_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 10) : 20261202u;
  enum { N = 3000 };
  want *w = weir_malloc(N * sizeof *w);
  weir__batch *b = weir__batch_create(64);
  for (int round = 0; round < 50; round++) {
    uint32_t nout = (uint32_t)(th_splitmix64(&seed) % N), nin = N - nout;
    for (uint32_t i = 0; i < N; i++) {
      uint64_t x = th_splitmix64(&seed);
      int far = x % 8 == 0;
      uint64_t pk = i ? w[i - 1].key : 0, pi = i ? w[i - 1].id : 0;
      int64_t pt = i ? w[i - 1].ts : 0;
      w[i].key = far ? th_splitmix64(&seed) : pk + (x >> 8) % 100 - 50;
      w[i].ts = far ? (int64_t)th_splitmix64(&seed) : pt + (int64_t)((x >> 16) % 7) - 3;
      w[i].id = far ? th_splitmix64(&seed) : pi + (x >> 24) % 5;
      w[i].len = (x >> 32) % 4 == 0 ? (uint32_t)((x >> 40) % 200) : 0;
      w[i].k = i < nout ? (uint32_t)(i * 3 / (nout ? nout : 1)) : 0;
      w[i].j = w[i].k % 2;
    }
    weir__cs_writer cw;
    memset(&cw, 0, sizeof cw);
    weir__cs_begin(&cw);
    for (uint32_t i = 0; i < N;) {
      if (i == nout) weir__cs_inputs(&cw);
      uint32_t lim = i < nout ? nout : N, n = 1 + (uint32_t)(th_splitmix64(&seed) % 64);
      if (n > lim - i) n = lim - i;
      if (i < nout) /* a run within one channel */
        for (uint32_t m = 1; m < n; m++)
          if (w[i + m].k != w[i].k) n = m;
      if (i < nout) weir__cs_run(&cw, w[i].k, w[i].j, n);
      fill(b, w + i, n);
      weir__cs_batch(&cw, b);
      i += n;
    }
    if (nout == N) weir__cs_inputs(&cw);
    uint64_t len;
    uint8_t *blob = weir__cs_finish(&cw, &len);
    weir__cs_reader r;
    const char *why = NULL;
    cr_assert_eq(weir__cs_open(&r, blob, len, 256, &why), 0, "%s", why);
    expect(&r, w, nout, 1);
    weir__cs_to_inputs(&r);
    expect(&r, w + nout, nin, 0);
    weir__cs_free(blob);
  }
  weir__batch_destroy(b);
  weir_free(w);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- the fuzzer's seeds and findings ----------------------------------------- */

/* An fz_chanstate input: the max_record byte, then the blob (freed here). */
static uint8_t *seed_input(uint8_t m, uint8_t *blob, uint64_t len, size_t *n) {
  uint8_t *in = malloc(len + 1);
  cr_assert_not_null(in);
  in[0] = m;
  memcpy(in + 1, blob, len);
  weir__cs_free(blob);
  *n = len + 1;
  return in;
}

/* The seed corpus of fuzz_chanstate (tests/fuzz/corpus-chanstate): the
 * sample blobs of formats 1, 2 and 3, a generator's batch, and an empty
 * blob. */
static const char *const SEEDS[] = {"format1-sample", "format2-sample", "format3-sample",
                                    "format3-source-batch", "format3-empty"};

static uint8_t *make_seed(int i, size_t *n) {
  uint64_t len;
  if (i < 3) {
    uint8_t *blob = i == 0 ? earlier(1, &len) : i == 1 ? earlier(2, &len) : sample(&len);
    return seed_input(16, blob, len, n);
  }
  weir__cs_writer w;
  memset(&w, 0, sizeof w);
  weir__cs_begin(&w);
  weir__cs_inputs(&w);
  if (i == 3) {
    weir__batch *b = weir__batch_create(32);
    for (uint32_t r = 0; r < 32; r++) {
      cr_assert(weir__batch_fits(b, 8));
      uint64_t v = r * 3u;
      weir__batch_append(b, 5000u + 7u * r, 1000 + 2 * r, 77000u + 2 * r, &v, 8);
    }
    weir__cs_batch(&w, b);
    weir__batch_destroy(b);
  }
  uint8_t *blob = weir__cs_finish(&w, &len);
  return seed_input(1, blob, len, n);
}

/* Every seed is accepted and the files in tests/fuzz/corpus-chanstate are
 * current; WEIR_WRITE_SEEDS=1 writes them (after a format change). */
Test(chanstate, fuzz_seeds_are_current) {
  const char *write = getenv("WEIR_WRITE_SEEDS");
  for (int i = 0; i < (int)(sizeof SEEDS / sizeof SEEDS[0]); i++) {
    size_t n;
    uint8_t *in = make_seed(i, &n);
    cr_assert_eq(fz_chanstate(in, n), 1, "seed %s refused", SEEDS[i]);
    char path[4096];
    snprintf(path, sizeof path, "%s/corpus-chanstate/%s", WEIR_FUZZ_DIR, SEEDS[i]);
    if (write && *write) {
      cr_assert_eq(th_write_file(path, (const char *)in, n), 0, "cannot write %s", path);
    } else {
      size_t got;
      char *file = th_read_file(path, &got);
      cr_assert_not_null(file, "no seed %s: run test_chanstate with WEIR_WRITE_SEEDS=1", path);
      cr_assert(got == n && memcmp(file, in, n) == 0,
                "seed %s is stale: run test_chanstate with WEIR_WRITE_SEEDS=1", path);
      free(file);
    }
    free(in);
  }
  cr_assert_eq(th_leak_check(), 0);
}

/* Every finding of fuzz_chanstate, kept forever, is refused or read
 * cleanly. */
Test(chanstate, fuzz_regressions_replay) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/regressions-chanstate", WEIR_FUZZ_DIR);
  th_inputs in;
  cr_assert_eq(th_read_dir(dir, &in), 0, "cannot read %s", dir);
  for (size_t i = 0; i < in.n; i++) (void)fz_chanstate(in.v[i].data, in.v[i].len);
  th_free_inputs(&in);
  cr_assert_eq(th_leak_check(), 0);
}
