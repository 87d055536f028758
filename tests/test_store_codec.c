/* test_store_codec.c: unit tests of the store's value formats: the value
 * envelope (envelope.c) and the codec's validation (codec.c).
 *
 * Covers: CRC32C vectors, envelope round trip and every kind of damage
 * (header bytes, payload, truncation, magic, newer format); semantic
 * validation of job records, checkpoint metadata and chunks; the direct
 * encoders of u64 and blob chunks byte for byte against protobuf-c, and
 * values-only chunks of every prefix length.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "envelope.h"
#include "helpers.h"
#include "store_helpers.h"
#include "base/alloc.h"
#include "snapshot/store.h"

/* ---- envelope --------------------------------------------------------------- */

Test(envelope, crc32c_vectors) {
  cr_assert_eq(weir__crc32c(0, "123456789", 9), 0xe3069283u);
  cr_assert_eq(weir__crc32c_sw(0, "123456789", 9), 0xe3069283u);
  cr_assert_eq(weir__crc32c(0, "", 0), 0);
  uint8_t zeros[32] = {0};
  cr_assert_eq(weir__crc32c(0, zeros, 32), 0x8a9136aau); /* RFC 3720 B.4 */
  uint8_t buf[1000];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)rnd();
  for (size_t off = 0; off < 9; off++) {
    for (size_t n = 0; n + off <= sizeof buf; n += 37) {
      uint32_t a = weir__crc32c(0, buf + off, n), b = weir__crc32c_sw(0, buf + off, n);
      cr_assert_eq(a, b, "off %zu n %zu", off, n);
      uint32_t split =
          weir__crc32c(weir__crc32c(0, buf + off, n / 3), buf + off + n / 3, n - n / 3);
      cr_assert_eq(split, a);
    }
  }
  /* Long buffers (the interleaved streams of the hardware path), at every
   * alignment, with lengths around multiples of the streams' blocks. */
  size_t big = 70000;
  uint8_t *l = malloc(big + 8);
  for (size_t i = 0; i < big + 8; i++) l[i] = (uint8_t)rnd();
  for (size_t off = 0; off < 8; off += 3) {
    for (size_t n = 0; n <= big; n += n < 30000 ? 4093 : 12289) {
      cr_assert_eq(weir__crc32c(7, l + off, n), weir__crc32c_sw(7, l + off, n), "off %zu n %zu",
                   off, n);
    }
  }
  free(l);
  cr_assert_eq(th_leak_check(), 0);
}

/* A value of `n` payload bytes in an exactly sized heap buffer (so an
 * out-of-bounds read shows under ASan). */
static uint8_t *make_value(size_t n, uint16_t version, uint16_t kind) {
  uint8_t *v = malloc(WEIR__ENV_HDR + n);
  for (size_t i = 0; i < n; i++) v[WEIR__ENV_HDR + i] = (uint8_t)(i * 7 + 1);
  weir__env_seal(v, version, kind, (uint32_t)n);
  return v;
}

static int open_env(const uint8_t *v, size_t len, char *err, size_t errlen) {
  uint16_t kind;
  const uint8_t *p;
  size_t plen;
  /* Copy to an exactly sized buffer: truncations must not read past it. */
  uint8_t *c = malloc(len ? len : 1);
  memcpy(c, v, len);
  int rc = weir__env_open(c, len, &kind, &p, &plen, err, errlen);
  free(c);
  return rc;
}

Test(envelope, round_trip_and_damage) {
  char err[256];
  size_t n = 300, len = WEIR__ENV_HDR + n;
  uint8_t *v = make_value(n, WEIR_STORE_FORMAT, WEIR__KIND_U64);
  uint16_t kind = 0;
  const uint8_t *p = NULL;
  size_t plen = 0;
  cr_assert_eq(weir__env_open(v, len, &kind, &p, &plen, err, sizeof err), 0);
  cr_assert_eq(kind, WEIR__KIND_U64);
  cr_assert_eq(plen, n);
  cr_assert_eq(p, v + WEIR__ENV_HDR);
  cr_assert_eq(memcmp(v, "WEIR", 4), 0);

  /* Every header byte, and payload bytes, flipped: corrupt (never "newer"). */
  for (size_t i = 0; i < len; i += (i < WEIR__ENV_HDR ? 1 : 41)) {
    for (int bit = 0; bit < 8; bit++) {
      v[i] ^= (uint8_t)(1u << bit);
      int rc = open_env(v, len, err, sizeof err);
      cr_assert_eq(rc, WEIR_ECORRUPT, "byte %zu bit %d: %d (%s)", i, bit, rc, err);
      v[i] ^= (uint8_t)(1u << bit);
    }
  }
  cr_assert_eq(open_env(v, len, err, sizeof err), 0);
  /* Truncations, down to nothing, and a trailing byte. */
  size_t cuts[] = {len - 1, len - 100, WEIR__ENV_HDR + 1, WEIR__ENV_HDR, WEIR__ENV_HDR - 1, 4,
                   1,       0};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    cr_assert_eq(open_env(v, cuts[i], err, sizeof err), WEIR_ECORRUPT, "cut to %zu", cuts[i]);
  }
  cr_assert(strstr(err, "shorter") != NULL, "%s", err);
  cr_assert_eq(open_env(v, len - 1, err, sizeof err), WEIR_ECORRUPT);
  cr_assert(strstr(err, "truncated") != NULL, "%s", err);
  uint8_t *longer = malloc(len + 1);
  memcpy(longer, v, len);
  longer[len] = 0;
  cr_assert_eq(open_env(longer, len + 1, err, sizeof err), WEIR_ECORRUPT);
  free(longer);
  cr_assert_eq(weir__env_open(NULL, 0, &kind, &p, &plen, err, sizeof err), WEIR_ECORRUPT);
  /* Wrong magic. */
  memcpy(v, "LMDB", 4);
  cr_assert_eq(open_env(v, len, err, sizeof err), WEIR_ECORRUPT);
  cr_assert(strstr(err, "magic") != NULL, "%s", err);
  free(v);

  /* A newer format, correctly sealed: EFORMAT, saying so. */
  v = make_value(10, WEIR_STORE_FORMAT + 1, WEIR__KIND_META);
  cr_assert_eq(open_env(v, WEIR__ENV_HDR + 10, err, sizeof err), WEIR_EFORMAT);
  cr_assert(strstr(err, "newer") != NULL, "%s", err);
  free(v);
  /* Version 0 and unknown kinds, correctly sealed: corrupt. */
  v = make_value(10, 0, WEIR__KIND_META);
  cr_assert_eq(open_env(v, WEIR__ENV_HDR + 10, err, sizeof err), WEIR_ECORRUPT);
  free(v);
  v = make_value(10, WEIR_STORE_FORMAT, 99);
  cr_assert_eq(open_env(v, WEIR__ENV_HDR + 10, err, sizeof err), WEIR_ECORRUPT);
  free(v);
  v = make_value(0, WEIR_STORE_FORMAT, WEIR__KIND_BLOB); /* empty payload is fine */
  cr_assert_eq(open_env(v, WEIR__ENV_HDR, err, sizeof err), 0);
  free(v);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- codec -------------------------------------------------------------------- */

#define JOB_ID "0b6a43d2-6a07-4c5e-9a36-0f6f1f2b8c11"

Test(codec, job_record) {
  weir__job_rec j = {.job_id = JOB_ID,
                     .instance = 2,
                     .id_limit = 129,
                     .latest = 70,
                     .finished = 1,
                     .created_ms = 123};
  uint8_t *v;
  size_t len;
  char err[256];
  weir__job_encode(&j, &v, &len);
  weir__job_rec d;
  cr_assert_eq(weir__job_decode(v, len, &d, err, sizeof err), 0, "%s", err);
  cr_assert_str_eq(d.job_id, JOB_ID);
  cr_assert_eq(d.instance, 2);
  cr_assert_eq(d.id_limit, 129);
  cr_assert_eq(d.latest, 70);
  cr_assert_eq(d.finished, 1);
  cr_assert_eq(d.created_ms, 123);
  /* A metadata value is not a job record. */
  weir_free(v);

  weir__job_rec bad[] = {
      {.job_id = "not-a-uuid", .instance = 1, .id_limit = 1},
      {.job_id = JOB_ID, .instance = 0, .id_limit = 1},
      {.job_id = JOB_ID, .instance = 1, .id_limit = 5, .latest = 5},
      {.job_id = JOB_ID, .instance = 1, .id_limit = 5, .latest = 0, .finished = 1},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    weir__job_encode(&bad[i], &v, &len);
    cr_assert_eq(weir__job_decode(v, len, &d, err, sizeof err), WEIR_ECORRUPT, "case %zu", i);
    weir_free(v);
  }
  cr_assert(weir__uuid_valid(JOB_ID));
  cr_assert_not(weir__uuid_valid("0B6A43D2-6A07-4C5E-9A36-0F6F1F2B8C11"));
  cr_assert_eq(th_leak_check(), 0);
}

static weir_snap_position g_pos[3] = {{1, 10}, {2, 20}, {7, 70}};

/* A valid metadata value with three entries. */
static void good_meta(weir__ckpt_meta *m, weir__sub_entry subs[3]) {
  memset(m, 0, sizeof *m);
  memset(subs, 0, 3 * sizeof *subs);
  m->format_version = WEIR_STORE_FORMAT;
  m->min_reader_version = WEIR_STORE_MIN_READER;
  strcpy(m->job_id, JOB_ID);
  m->instance = 1;
  m->id = 7;
  m->nsub = 3;
  m->subs = subs;
  const char *ops[3] = {"count", "count", "src"};
  for (int i = 0; i < 3; i++) {
    subs[i].op = (char *)ops[i];
    subs[i].parallelism = 2;
    subs[i].subtask = i == 1 ? 1 : 0;
    subs[i].record = (uint32_t)i;
    subs[i].u64_chunks = 1;
    subs[i].u64_entries = 10;
    subs[i].bytes = 500;
    m->total_bytes += 500;
    m->total_chunks += 1;
  }
  subs[2].npos = 3;
  subs[2].pos = g_pos;
}

static int decode_meta(const weir__ckpt_meta *m, const char *job, char *err, size_t errlen) {
  uint8_t *v;
  size_t len;
  weir__meta_encode(m, &v, &len);
  weir__ckpt_meta d;
  int rc = weir__meta_decode(v, len, 7, job, &d, err, errlen);
  weir_free(v);
  if (rc == 0) weir__meta_free(&d);
  return rc;
}

Test(codec, metadata_round_trip) {
  weir__ckpt_meta m;
  weir__sub_entry subs[3];
  good_meta(&m, subs);
  m.epoch = 3;
  m.final = 1;
  m.trigger_ms = -5;
  m.complete_ms = 99;
  uint8_t *v;
  size_t len;
  weir__meta_encode(&m, &v, &len);
  weir__ckpt_meta d;
  char err[256];
  cr_assert_eq(weir__meta_decode(v, len, 7, JOB_ID, &d, err, sizeof err), 0, "%s", err);
  cr_assert_eq(d.nsub, 3);
  cr_assert_str_eq(d.subs[2].op, "src");
  cr_assert_eq(d.subs[2].npos, 3);
  cr_assert_eq(d.subs[2].pos[2].split, 7);
  cr_assert_eq(d.subs[2].pos[2].offset, 70);
  cr_assert_eq(d.epoch, 3);
  cr_assert_eq(d.final, 1);
  cr_assert_eq(d.trigger_ms, -5);
  cr_assert_eq(d.complete_ms, 99);
  weir__meta_free(&d);
  /* Stored under another id: corrupt. */
  cr_assert_eq(weir__meta_decode(v, len, 8, JOB_ID, &d, err, sizeof err), WEIR_ECORRUPT);
  cr_assert(strstr(err, "checkpoint 8") != NULL, "%s", err);
  weir_free(v);
  cr_assert_eq(th_leak_check(), 0);
}

Test(codec, metadata_semantic_checks) {
  weir__ckpt_meta m;
  weir__sub_entry subs[3];
  char err[512];
  weir_snap_position dup[2] = {{4, 1}, {4, 2}};
  struct {
    const char *name, *expect;
    int code;
  } cases[] = {
      {"duplicate entry", "appears twice", WEIR_ECORRUPT},
      {"parallelism 0", "out of range", WEIR_ECORRUPT},
      {"subtask >= parallelism", "out of range", WEIR_ECORRUPT},
      {"out of order", "out of order", WEIR_ECORRUPT},
      {"shared record", "share record", WEIR_ECORRUPT},
      {"entries without chunks", "cannot fill", WEIR_ECORRUPT},
      {"more entries than chunks hold", "cannot fill", WEIR_ECORRUPT},
      {"duplicate positions", "appears twice", WEIR_ECORRUPT},
      {"job id mismatch", "belongs to job", WEIR_ECORRUPT},
      {"totals", "totals", WEIR_ECORRUPT},
      {"parallelism differs", "parallelism 2 and 3", WEIR_ECORRUPT},
      {"newer reader needed", "readers of format", WEIR_EFORMAT},
      {"blob without chunks", "blob", WEIR_ECORRUPT},
      {"bytes beyond chunks", "stored bytes", WEIR_ECORRUPT},
      {"empty operator name", "operator name", WEIR_ECORRUPT},
      {"entries beyond stored bytes", "at least", WEIR_ECORRUPT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    good_meta(&m, subs);
    const char *job = JOB_ID;
    switch (i) {
    case 0:
      subs[1].subtask = 0;
      break;
    case 1:
      subs[0].parallelism = subs[1].parallelism = 0;
      break;
    case 2:
      subs[1].subtask = 2;
      break;
    case 3:
      subs[0].subtask = 1, subs[1].subtask = 0;
      break;
    case 4:
      subs[2].record = 0;
      break;
    case 5:
      subs[0].u64_chunks = 0;
      m.total_chunks--;
      break;
    case 6:
      subs[0].u64_entries = 1000000;
      break;
    case 7:
      subs[2].pos = dup, subs[2].npos = 2;
      break;
    case 8:
      job = "11111111-2222-4333-8444-555555555555";
      break;
    case 9:
      m.total_bytes++;
      break;
    case 10:
      subs[1].parallelism = 3;
      break;
    case 11:
      m.min_reader_version = m.format_version = WEIR_STORE_FORMAT + 1;
      break;
    case 12:
      subs[0].blob_len = 100;
      break;
    case 13:
      subs[0].bytes = 70000;
      m.total_bytes += 70000 - 500;
      break;
    case 14:
      subs[0].op = "";
      break;
    case 15:
      subs[0].u64_entries = 60;
      break;
    }
    int rc = decode_meta(&m, job, err, sizeof err);
    cr_assert_eq(rc, cases[i].code, "%s: %d (%s)", cases[i].name, rc, err);
    cr_assert(strstr(err, "checkpoint 7") != NULL, "%s: %s", cases[i].name, err);
    cr_assert(strstr(err, cases[i].expect) != NULL, "%s: %s", cases[i].name, err);
    if ((i <= 7 && i != 4) || i == 15) /* entry-level problems name the operator */
      cr_assert(strstr(err, "operator \"") != NULL, "%s: %s", cases[i].name, err);
  }
  good_meta(&m, subs);
  cr_assert_eq(decode_meta(&m, JOB_ID, err, sizeof err), 0, "%s", err);
  cr_assert_eq(decode_meta(&m, NULL, err, sizeof err), 0, "%s", err);
  /* A job record is not metadata. */
  weir__job_rec j = {.job_id = JOB_ID, .instance = 1, .id_limit = 9};
  uint8_t *v;
  size_t len;
  weir__job_encode(&j, &v, &len);
  weir__ckpt_meta d;
  cr_assert_eq(weir__meta_decode(v, len, 7, NULL, &d, err, sizeof err), WEIR_ECORRUPT);
  weir_free(v);
  cr_assert_eq(th_leak_check(), 0);
}

/* The direct u64 chunk encoder writes exactly protobuf-c's bytes, and
 * weir__u64_chunk_fill takes exactly the entries that fit the budget (at
 * most WEIR__U64_SHAREABLE): ids with zero fields (left out in proto3), no
 * entries, one entry, and runs up to twice a chunk of values of every
 * varint length or of one-byte values. */
Test(codec, u64_chunk_direct_encoder_matches_protobuf_c) {
  uint8_t *a = weir_malloc(WEIR__CHUNK_MAX), *b = weir_malloc(WEIR__CHUNK_MAX);
  uint64_t *keys = weir_malloc(2 * WEIR__MAX_U64_PER_CHUNK * 8);
  uint64_t *vals = weir_malloc(2 * WEIR__MAX_U64_PER_CHUNK * 8);
  uint64_t x = 88172645463325252ull;
  const weir__chunk_id ids[] = {
      {1, 0, 0}, {9, 2, 5}, {UINT64_MAX, UINT32_MAX, UINT32_MAX}, {300, 0, 7}};
  for (int round = 0; round < 200; round++) {
    /* Up to twice what fits: fill takes the greedy cut of codec.h. */
    size_t want = round == 0 ? 0 : round == 1 ? 1 : (size_t)(x % (2 * WEIR__MAX_U64_PER_CHUNK)) + 1;
    for (size_t i = 0; i < want; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      keys[i] = x * 31;
      /* every varint length, 0 included; or one byte each, so that the
       * entry cap (WEIR__U64_SHAREABLE) binds before the budget */
      vals[i] = round % 5 == 4 ? x % 128 : x >> (x % 64);
    }
    size_t fit = 0, used = 0;
    while (fit < want && fit < WEIR__U64_SHAREABLE &&
           used + 8 + weir__varint_len(vals[fit]) <= WEIR__CHUNK_BUDGET)
      used += 8 + weir__varint_len(vals[fit++]);
    weir__chunk_id id = ids[round % 4];
    size_t taken = SIZE_MAX;
    size_t la = weir__u64_chunk_fill(id, keys, vals, want, a, &taken);
    cr_assert_eq(taken, fit, "round %d: took %zu of %zu entries, %zu fit", round, taken, want, fit);
    size_t lb = weir__u64_chunk_encode_pb(id, keys, vals, fit, b);
    cr_assert_eq(la, lb, "round %d (%zu entries): %zu bytes, protobuf-c %zu", round, fit, la, lb);
    cr_assert_eq(memcmp(a, b, la), 0, "round %d (%zu entries): the bytes differ", round, fit);
    if (fit == want) {
      cr_assert_eq(weir__u64_chunk_encode(id, keys, vals, fit, a), la);
      cr_assert_eq(memcmp(a, b, la), 0);
    }
  }
  for (uint64_t v = 1; v; v <<= 1) {
    unsigned n = 1;
    for (uint64_t t = v - 1; t >= 0x80; t >>= 7) n++;
    cr_assert_eq(weir__varint_len(v - 1), n, "varint_len(%llu)", (unsigned long long)(v - 1));
  }
  cr_assert_eq(weir__varint_len(UINT64_MAX), 10);
  weir_free(a);
  weir_free(b);
  weir_free(keys);
  weir_free(vals);
  cr_assert_eq(th_leak_check(), 0);
}

Test(codec, chunks) {
  uint8_t *buf = weir_malloc(WEIR__CHUNK_MAX);
  char err[256];
  weir__chunk c;
  weir__chunk_id id = {9, 2, 5};
  /* In hash order (ascending key * WEIR_STORE_U64_RANK), which is not key
   * order for these. */
  uint64_t keys[3] = {1, 5, 9}, vals[3] = {0, UINT64_MAX, 300};
  qsort(keys, 3, 8, cmp_pair);
  cr_assert(keys[0] > keys[1] || keys[1] > keys[2], "keys 1, 5, 9 are in key order by hash too");
  size_t len = weir__u64_chunk_encode(id, keys, vals, 3, buf);
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), 0, "%s", err);
  cr_assert_eq(c.kind, WEIR__KIND_U64);
  cr_assert_eq(c.n, 3);
  cr_assert_arr_eq(c.keys, keys, sizeof keys);
  cr_assert_arr_eq(c.values, vals, sizeof vals);
  weir__chunk_free(&c);
  /* Found under another key. */
  weir__chunk_id other = {9, 2, 6};
  cr_assert_eq(weir__chunk_decode(buf, len, other, &c, err, sizeof err), WEIR_ECORRUPT);
  cr_assert(strstr(err, "chunk 5 of record 2 of checkpoint 9") != NULL, "%s", err);
  /* Keys out of order or repeated: key order is out of hash order. */
  uint64_t bad[3] = {1, 5, 9}, rep[3] = {1, 1, 5};
  len = weir__u64_chunk_encode(id, bad, vals, 3, buf);
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), WEIR_ECORRUPT);
  cr_assert(strstr(err, "hash order") != NULL, "%s", err);
  /* A format 1 chunk is in key order: read as it was written, and hash
   * order is out of order there. */
  weir__env_seal(buf, 1, WEIR__KIND_U64, (uint32_t)(len - WEIR__ENV_HDR));
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), 0, "%s", err);
  cr_assert_eq(c.format, 1);
  cr_assert_arr_eq(c.keys, bad, sizeof bad);
  weir__chunk_free(&c);
  len = weir__u64_chunk_encode(id, keys, vals, 3, buf);
  weir__env_seal(buf, 1, WEIR__KIND_U64, (uint32_t)(len - WEIR__ENV_HDR));
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), WEIR_ECORRUPT);
  len = weir__u64_chunk_encode(id, rep, vals, 3, buf);
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), WEIR_ECORRUPT);
  cr_assert(strstr(err, "repeats") != NULL, "%s", err);
  len = weir__u64_chunk_encode(id, keys, vals, 0, buf);
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), WEIR_ECORRUPT);
  /* Bytes and blob. */
  uint64_t route[2] = {7, 8};
  uint32_t kl[2] = {0, 3}, vl[2] = {2, 0};
  len = weir__bytes_chunk_encode(id, route, kl, vl, 2, (const uint8_t *)"\0\1abc", 5, buf);
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), 0, "%s", err);
  cr_assert_eq(c.kind, WEIR__KIND_BYTES);
  cr_assert_eq(c.n, 2);
  cr_assert_eq(c.data_len, 5);
  cr_assert_eq(memcmp(c.data, "\0\1abc", 5), 0);
  cr_assert_eq(c.klen[1], 3);
  weir__chunk_free(&c);
  len = weir__bytes_chunk_encode(id, NULL, NULL, NULL, 0, NULL, 0, buf);
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), WEIR_ECORRUPT);
  len = weir__blob_chunk_encode(id, (const uint8_t *)"xyz", 3, buf);
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), 0, "%s", err);
  cr_assert_eq(c.kind, WEIR__KIND_BLOB);
  weir__chunk_free(&c);
  /* A flipped payload byte. */
  buf[len - 1] ^= 1;
  cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), WEIR_ECORRUPT);
  cr_assert(strstr(err, "checksum") != NULL, "%s", err);
  weir_free(buf);
  cr_assert_eq(th_leak_check(), 0);
}

/* Blob chunks planned and written straight into their destination are
 * protobuf-c's bytes exactly, at every length prefix up to the budget. */
Test(codec, blob_chunk_direct_encoder_matches_protobuf_c) {
  uint8_t *a = weir_malloc(WEIR__CHUNK_MAX), *b = weir_malloc(WEIR__CHUNK_MAX);
  uint8_t *data = weir_malloc(WEIR__CHUNK_BUDGET);
  for (size_t i = 0; i < WEIR__CHUNK_BUDGET; i++) data[i] = (uint8_t)rnd();
  const size_t lens[] = {0, 1, 127, 128, 16383, 16384, WEIR__CHUNK_BUDGET};
  const weir__chunk_id ids[] = {{0, 0, 0}, {1, 2, 3}, {UINT64_MAX, UINT32_MAX, UINT32_MAX}};
  for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
    for (size_t j = 0; j < sizeof ids / sizeof *ids; j++) {
      size_t want = weir__blob_chunk_encode(ids[j], data, lens[k], a);
      size_t len = weir__blob_chunk_len(ids[j], lens[k]);
      cr_assert_eq(len, want, "%zu bytes: length %zu, protobuf-c %zu", lens[k], len, want);
      memset(b, 0xa5, WEIR__CHUNK_MAX);
      weir__blob_chunk_write(ids[j], data, lens[k], b);
      cr_assert_eq(memcmp(a, b, want), 0, "%zu bytes, id %zu: the bytes differ", lens[k], j);
    }
  }
  weir_free(data);
  weir_free(b);
  weir_free(a);
  cr_assert_eq(th_leak_check(), 0);
}

/* Values-only chunks are encoded in one pass, their length prefix written
 * after them: every prefix length (1, 2 and 3 bytes), one-byte values and
 * values of every varint length up to the most a shared chunk holds,
 * decode to the same values. */
Test(codec, values_chunks_of_every_prefix_length) {
  uint8_t *buf = weir_malloc(WEIR__CHUNK_MAX);
  enum { MOST = 40000 };
  uint64_t *vals = weir_malloc(MOST * sizeof *vals);
  char err[256];
  const struct {
    size_t n;
    int wide;
  } cases[] = {{1, 0},
               {3, 0},
               {127, 0},
               {128, 0},
               {16383, 0},
               {16384, 0},
               {MOST, 0},
               {1, 1},
               {200, 1},
               {2000, 1},
               {WEIR__U64_SHAREABLE, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    size_t n = cases[k].n;
    int wide = cases[k].wide;
    for (size_t i = 0; i < n; i++) {
      uint64_t r = rnd();
      vals[i] = wide ? r >> (r & 63) : r & 0x7f;
    }
    weir__chunk_id id = {11, 4, (uint32_t)k};
    size_t len = weir__u64_values_encode(id, vals, n, buf);
    cr_assert_leq(len, WEIR__CHUNK_MAX);
    weir__chunk c;
    cr_assert_eq(weir__chunk_decode(buf, len, id, &c, err, sizeof err), 0, "%zu values: %s", n,
                 err);
    cr_assert_eq(c.kind, WEIR__KIND_U64_VALUES);
    cr_assert_eq(c.n, n);
    cr_assert_arr_eq(c.values, vals, n * sizeof *vals, "%zu values, wide %d", n, wide);
    weir__chunk_free(&c);
    /* Exactly its length: one byte less is refused. */
    cr_assert_eq(weir__chunk_decode(buf, len - 1, id, &c, err, sizeof err), WEIR_ECORRUPT);
  }
  weir_free(vals);
  weir_free(buf);
  cr_assert_eq(th_leak_check(), 0);
}
