/* tests/fuzz/decode_input.c: owns fz_decode, the decode-and-check function
 * behind the decoder fuzzer and the decode regression test (input format
 * and DESIGN in decode_input.h).
 *
 * Each decoder runs on a private copy of the value, allocated at its exact
 * size, so that AddressSanitizer catches a read one byte past the value
 * even though the fuzzer's own buffer would have been larger.
 */
#include "decode_input.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "envelope.h"
#include "base/alloc.h"
#include "weir/error.h"

static const uint8_t *cur_data; /* the input being decoded, for dumps */
static size_t cur_size;
static volatile uint64_t sink; /* where touched bytes go */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fz_decode: broken promise: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fz_dump_current();
  abort();
}

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) die(__VA_ARGS__);                                                                 \
  } while (0)

void fz_dump_current(void) {
  if (cur_data == NULL) return;
  size_t n = cur_size > 65536 ? 65536 : cur_size;
  fprintf(stderr,
          "fz_decode: the input (%zu bytes%s) in `xxd -p` form; keep it as a regression "
          "input with: xxd -r -p > tests/fuzz/regressions/NAME\n",
          cur_size, n < cur_size ? ", the first 65536 shown" : "");
  for (size_t i = 0; i < n; i++) {
    fprintf(stderr, "%02x", cur_data[i]);
    if (i % 30 == 29 || i + 1 == n) fputc('\n', stderr);
  }
  fflush(stderr);
}

static uint64_t le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void fz_header(uint8_t hdr[FZ_HDR], unsigned control, uint64_t ckpt, uint32_t record,
               uint32_t seq) {
  hdr[0] = (uint8_t)control;
  put_le(hdr + 1, ckpt, 8);
  put_le(hdr + 9, record, 4);
  put_le(hdr + 13, seq, 4);
}

static void touch(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) x += b[i];
  sink += x;
}

static int all_zero(const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != 0) return 0;
  return 1;
}

/* Equal arrays of n elements of `size` bytes (either pointer may be NULL
 * when n == 0). */
static int same(const void *a, const void *b, size_t n, size_t size) {
  return n == 0 || memcmp(a, b, n * size) == 0;
}

/* ---- what every decoder promises about its result code ------------------- */

static long fail_nth; /* from the control byte: 0, or the allocation to fail */

/* Arms the allocation failure that the input asks for, if any. */
static void arm(void) {
  weir__codec_fail_alloc_after(fail_nth > 0 ? fail_nth - 1 : -1);
}

/* The decoder `who` returned rc with message err for a value whose
 * envelope check returned env (and, if env == 0, holds a `kind` value);
 * `fits` says whether a value of that kind is one this decoder reads.
 * Disarms the allocation failure and returns 1 if it fired (then rc must
 * be WEIR_ENOMEM). */
static int check_rc(const char *who, int rc, int env, int fits, const char *err, size_t errlen) {
  int fired = weir__codec_fail_alloc_after(-1);
  if (rc < 0) {
    CHECK(memchr(err, '\0', errlen) != NULL, "%s: error message not terminated", who);
    CHECK(err[0] != '\0', "%s: %s without a message", who, weir_err_name(rc));
  }
  if (fired) {
    CHECK(rc == WEIR_ENOMEM, "%s: returned %s when allocation %ld failed", who, weir_err_name(rc),
          fail_nth);
    return 1;
  }
  CHECK(rc == 0 || rc == WEIR_ECORRUPT || rc == WEIR_EFORMAT, "%s: returned %d (%s)", who, rc,
        weir_err_name(rc));
  if (env < 0)
    CHECK(rc == env, "%s: returned %s where the envelope check returned %s", who, weir_err_name(rc),
          weir_err_name(env));
  if (env == 0 && !fits) CHECK(rc == WEIR_ECORRUPT, "%s: accepted a value of another kind", who);
  return 0;
}

/* ---- job record ------------------------------------------------------------ */

static int try_job(const uint8_t *v, size_t n, int env, uint16_t kind) {
  weir__job_rec j, j2;
  char err[256];
  memset(err, 0x55, sizeof err);
  memset(&j, 0xa5, sizeof j);
  arm();
  int rc = weir__job_decode(v, n, &j, err, sizeof err);
  check_rc("job decode", rc, env, kind == WEIR__KIND_JOB, err, sizeof err);
  if (rc < 0) {
    CHECK(all_zero(&j, sizeof j), "job decode: an error left a result behind");
    return 0;
  }
  CHECK(weir__uuid_valid(j.job_id), "job decode: job id is not a UUID");
  CHECK(j.instance >= 1 && j.id_limit >= 1 && j.latest < j.id_limit,
        "job decode: instance %llu, id limit %llu, latest %llu", (unsigned long long)j.instance,
        (unsigned long long)j.id_limit, (unsigned long long)j.latest);
  CHECK(j.finished == 0 || (j.finished == 1 && j.latest > 0), "job decode: finished %d, latest 0",
        j.finished);
  uint8_t *re;
  size_t relen;
  weir__job_encode(&j, &re, &relen);
  rc = weir__job_decode(re, relen, &j2, err, sizeof err);
  CHECK(rc == 0, "job decode: the re-encoded record does not decode: %s", err);
  CHECK(strcmp(j.job_id, j2.job_id) == 0 && j.instance == j2.instance &&
            j.id_limit == j2.id_limit && j.latest == j2.latest && j.finished == j2.finished &&
            j.created_ms == j2.created_ms,
        "job decode: the round trip changed the record");
  weir_free(re);
  return 1;
}

/* ---- checkpoint metadata --------------------------------------------------- */

static void check_meta(const weir__ckpt_meta *m, uint64_t key, const char *job) {
  CHECK(m->min_reader_version >= 1 && m->min_reader_version <= m->format_version &&
            m->min_reader_version <= WEIR_STORE_FORMAT,
        "meta decode: format %u, readers from %u", m->format_version, m->min_reader_version);
  CHECK(m->id == key, "meta decode: id %llu under key %llu", (unsigned long long)m->id,
        (unsigned long long)key);
  CHECK(weir__uuid_valid(m->job_id), "meta decode: job id is not a UUID");
  CHECK(job == NULL || strcmp(job, m->job_id) == 0, "meta decode: another job's checkpoint");
  CHECK(m->instance >= 1, "meta decode: instance 0");
  CHECK(m->nsub == 0 || m->subs != NULL, "meta decode: %u entries, no array", m->nsub);
  uint64_t bytes = 0, chunks = 0;
  for (uint32_t i = 0; i < m->nsub; i++) {
    const weir__sub_entry *e = &m->subs[i];
    CHECK(e->op != NULL && e->op[0] != '\0' && strlen(e->op) <= WEIR__MAX_OP_NAME,
          "meta decode: entry %u: empty or overlong operator name", i);
    CHECK(e->parallelism >= 1 && e->subtask < e->parallelism,
          "meta decode: entry %u: subtask %u of %u", i, e->subtask, e->parallelism);
    if (i > 0) {
      const weir__sub_entry *p = &m->subs[i - 1];
      int c = strcmp(p->op, e->op);
      CHECK(c < 0 || (c == 0 && p->subtask < e->subtask), "meta decode: entry %u out of order", i);
      CHECK(c != 0 || p->parallelism == e->parallelism,
            "meta decode: entry %u: parallelism differs within an operator", i);
    }
    for (uint32_t k = 0; k < i; k++)
      CHECK(m->subs[k].record != e->record, "meta decode: entries %u and %u share a record", k, i);
    uint64_t c = weir__sub_chunks(e);
    CHECK(c <= UINT32_MAX && e->bytes >= c * WEIR__ENV_HDR && e->bytes <= c * WEIR__CHUNK_MAX,
          "meta decode: entry %u: %llu bytes in %llu chunks", i, (unsigned long long)e->bytes,
          (unsigned long long)c);
    CHECK(e->u64_entries <= (uint64_t)e->u64_chunks * WEIR__MAX_U64_PER_CHUNK &&
              e->bytes_entries <= (uint64_t)e->bytes_chunks * WEIR__MAX_BYTES_PER_CHUNK &&
              e->blob_len <= (uint64_t)e->blob_chunks * WEIR__CHUNK_MAX &&
              e->timer_entries <= (uint64_t)e->timer_chunks * WEIR__MAX_TIMERS_PER_CHUNK &&
              (e->timer_entries == 0) == (e->timer_chunks == 0) &&
              e->ns_entries <= (uint64_t)e->ns_chunks * WEIR__MAX_NS_PER_CHUNK &&
              (e->ns_entries == 0) == (e->ns_chunks == 0) &&
              e->bcast_entries <= (uint64_t)e->bcast_chunks * WEIR__MAX_BYTES_PER_CHUNK &&
              (e->bcast_entries == 0) == (e->bcast_chunks == 0),
          "meta decode: entry %u: counts its chunks cannot hold", i);
    CHECK(e->npos == 0 || e->pos != NULL, "meta decode: entry %u: %u positions, no array", i,
          e->npos);
    CHECK(e->keys_ckpt == 0 ? e->keys_record == 0
                            : e->keys_ckpt < key && e->u64_entries > 0 &&
                                  m->min_reader_version >= WEIR_STORE_SHARED_KEYS,
          "meta decode: entry %u: shares the keys of checkpoint %llu", i,
          (unsigned long long)e->keys_ckpt);
    for (uint32_t k = 1; k < e->npos; k++)
      CHECK(e->pos[k - 1].split < e->pos[k].split, "meta decode: entry %u: positions unordered", i);
    for (uint32_t k = 0; k < e->npos; k++) sink += e->pos[k].split + e->pos[k].offset;
    bytes += e->bytes;
    chunks += c;
  }
  CHECK(bytes == m->total_bytes && chunks == m->total_chunks,
        "meta decode: totals disagree with the entries");
}

static int same_meta(const weir__ckpt_meta *a, const weir__ckpt_meta *b) {
  if (a->format_version != b->format_version || a->min_reader_version != b->min_reader_version ||
      strcmp(a->job_id, b->job_id) != 0 || a->instance != b->instance || a->id != b->id ||
      a->epoch != b->epoch || a->trigger_ms != b->trigger_ms || a->complete_ms != b->complete_ms ||
      a->duration_ms != b->duration_ms || a->alignment_ms != b->alignment_ms ||
      a->final != b->final || a->total_bytes != b->total_bytes ||
      a->total_chunks != b->total_chunks || a->nsub != b->nsub)
    return 0;
  for (uint32_t i = 0; i < a->nsub; i++) {
    const weir__sub_entry *x = &a->subs[i], *y = &b->subs[i];
    if (strcmp(x->op, y->op) != 0 || x->subtask != y->subtask || x->parallelism != y->parallelism ||
        x->record != y->record || x->u64_chunks != y->u64_chunks ||
        x->bytes_chunks != y->bytes_chunks || x->blob_chunks != y->blob_chunks ||
        x->bytes != y->bytes || x->u64_entries != y->u64_entries ||
        x->bytes_entries != y->bytes_entries || x->bytes_data_len != y->bytes_data_len ||
        x->blob_len != y->blob_len || x->npos != y->npos || x->keys_ckpt != y->keys_ckpt ||
        x->keys_record != y->keys_record || x->timer_chunks != y->timer_chunks ||
        x->timer_entries != y->timer_entries || x->has_clock != y->has_clock ||
        x->clock != y->clock || x->bcast_chunks != y->bcast_chunks ||
        x->bcast_entries != y->bcast_entries || x->ns_chunks != y->ns_chunks ||
        x->ns_entries != y->ns_entries)
      return 0;
    for (uint32_t k = 0; k < x->npos; k++) /* (a position has padding: no memcmp) */
      if (x->pos[k].split != y->pos[k].split || x->pos[k].offset != y->pos[k].offset) return 0;
  }
  return 1;
}

static int try_meta(const uint8_t *v, size_t n, int env, uint16_t kind, uint64_t key,
                    const char *job) {
  weir__ckpt_meta m, m2;
  char err[512];
  memset(err, 0x55, sizeof err);
  memset(&m, 0xa5, sizeof m);
  arm();
  int rc = weir__meta_decode(v, n, key, job, &m, err, sizeof err);
  check_rc("meta decode", rc, env, kind == WEIR__KIND_META, err, sizeof err);
  if (rc < 0) {
    CHECK(all_zero(&m, sizeof m), "meta decode: an error left a result behind");
    weir__meta_free(&m); /* must be harmless on an empty result */
    return 0;
  }
  check_meta(&m, key, job);
  uint8_t *re;
  size_t relen;
  weir__meta_encode(&m, &re, &relen);
  rc = weir__meta_decode(re, relen, key, job, &m2, err, sizeof err);
  CHECK(rc == 0, "meta decode: the re-encoded metadata does not decode: %s", err);
  CHECK(same_meta(&m, &m2), "meta decode: the round trip changed the metadata");
  weir_free(re);
  weir__meta_free(&m2);
  weir__meta_free(&m);
  CHECK(m.nsub == 0 && m.subs == NULL, "meta free: left entries behind");
  return 1;
}

/* ---- chunks ------------------------------------------------------------------ */

static void check_chunk(const weir__chunk *c, uint16_t kind, weir__chunk_id expect) {
  CHECK(c->kind == kind, "chunk decode: kind %u from a value of kind %u", c->kind, kind);
  CHECK(c->id.ckpt == expect.ckpt && c->id.record == expect.record && c->id.seq == expect.seq,
        "chunk decode: accepted a chunk with another id");
  CHECK(c->msg_ != NULL, "chunk decode: no message behind the views");
  switch (c->kind) {
  case WEIR__KIND_U64:
    CHECK(c->n >= 1 && c->keys != NULL && c->values != NULL, "u64 chunk: %zu entries", c->n);
    for (size_t i = 1; i < c->n; i++)
      CHECK(weir__u64_order(c->format, c->keys[i - 1]) < weir__u64_order(c->format, c->keys[i]),
            "u64 chunk: keys not ascending at %zu", i);
    touch(c->keys, c->n * sizeof *c->keys);
    touch(c->values, c->n * sizeof *c->values);
    break;
  case WEIR__KIND_U64_VALUES:
    CHECK(c->n >= 1 && c->keys == NULL && c->values != NULL, "u64 values chunk: %zu values", c->n);
    touch(c->values, c->n * sizeof *c->values);
    break;
  case WEIR__KIND_BYTES:
    CHECK(c->n > 0 || c->data_len > 0, "bytes chunk: empty");
    CHECK(c->n == 0 || (c->route && c->klen && c->vlen), "bytes chunk: %zu entries, no arrays",
          c->n);
    CHECK(c->data_len == 0 || c->data != NULL, "bytes chunk: %zu data bytes, no data", c->data_len);
    touch(c->route, c->n * sizeof *c->route);
    touch(c->klen, c->n * sizeof *c->klen);
    touch(c->vlen, c->n * sizeof *c->vlen);
    touch(c->data, c->data_len);
    break;
  case WEIR__KIND_BLOB:
    CHECK(c->data_len > 0 && c->data != NULL, "blob chunk: empty");
    touch(c->data, c->data_len);
    break;
  case WEIR__KIND_NS:
    CHECK(c->n >= 1 && c->keys && c->ns && c->values, "ns chunk: %zu entries", c->n);
    touch(c->keys, c->n * sizeof *c->keys);
    touch(c->ns, c->n * sizeof *c->ns);
    touch(c->values, c->n * sizeof *c->values);
    break;
  case WEIR__KIND_TIMERS:
    CHECK(c->n >= 1 && c->keys && c->ts && c->domain, "timer chunk: %zu timers", c->n);
    for (size_t i = 0; i < c->n; i++)
      CHECK(c->domain[i] <= 1 && c->ts[i] != INT64_MIN,
            "timer chunk: timer %zu in domain %u at %lld", i, c->domain[i], (long long)c->ts[i]);
    touch(c->keys, c->n * sizeof *c->keys);
    touch(c->ts, c->n * sizeof *c->ts);
    break;
  default:
    die("chunk decode: accepted a value of kind %u", c->kind);
  }
}

/* The encoded payload size, as codec.h tells the chunk planners to count
 * it, or SIZE_MAX if it exceeds WEIR__CHUNK_BUDGET (then the encoders may
 * not be given it). */
static size_t planned(const weir__chunk *c) {
  uint64_t sz = 0;
  if (c->kind == WEIR__KIND_U64) {
    for (size_t i = 0; i < c->n; i++) sz += 8 + weir__varint_len(c->values[i]);
  } else if (c->kind == WEIR__KIND_U64_VALUES) {
    for (size_t i = 0; i < c->n; i++) sz += weir__varint_len(c->values[i]);
  } else if (c->kind == WEIR__KIND_BYTES) {
    for (size_t i = 0; i < c->n; i++)
      sz += 8 + weir__varint_len(c->klen[i]) + weir__varint_len(c->vlen[i]);
    sz += c->data_len;
  } else if (c->kind == WEIR__KIND_NS) {
    for (size_t i = 0; i < c->n; i++) sz += 16 + weir__varint_len(c->values[i]);
  } else if (c->kind == WEIR__KIND_TIMERS) {
    sz = (uint64_t)c->n * WEIR__TIMER_BYTES;
  } else {
    sz = c->data_len;
  }
  return sz <= WEIR__CHUNK_BUDGET ? (size_t)sz : SIZE_MAX;
}

static void round_trip_chunk(const weir__chunk *c, weir__chunk_id expect) {
  if (planned(c) == SIZE_MAX) return;
  uint8_t *buf = weir_malloc(WEIR__CHUNK_MAX);
  size_t n;
  if (c->kind == WEIR__KIND_U64) {
    n = weir__u64_chunk_encode(c->id, c->keys, c->values, c->n, buf);
  } else if (c->kind == WEIR__KIND_U64_VALUES) {
    n = weir__u64_values_encode(c->id, c->values, c->n, buf);
  } else if (c->kind == WEIR__KIND_BYTES)
    n = weir__bytes_chunk_encode(c->id, c->route, c->klen, c->vlen, c->n, c->data, c->data_len,
                                 buf);
  else if (c->kind == WEIR__KIND_NS)
    n = weir__ns_chunk_encode(c->id, c->keys, c->ns, c->values, c->n, buf);
  else if (c->kind == WEIR__KIND_TIMERS)
    n = weir__timer_chunk_encode(c->id, c->keys, c->ts, c->domain, c->n, buf);
  else
    n = weir__blob_chunk_encode(c->id, c->data, c->data_len, buf);
  /* In the format it was read in (u64 key order depends on it). */
  weir__env_seal(buf, c->format, c->kind, (uint32_t)(n - WEIR__ENV_HDR));
  weir__chunk d;
  char err[300];
  int rc = weir__chunk_decode(buf, n, expect, &d, err, sizeof err);
  CHECK(rc == 0, "chunk decode: the re-encoded chunk does not decode: %s", err);
  CHECK(
      d.kind == c->kind && d.n == c->n && d.data_len == c->data_len &&
          same(d.keys, c->keys,
               c->kind == WEIR__KIND_U64 || c->kind == WEIR__KIND_TIMERS || c->kind == WEIR__KIND_NS
                   ? c->n
                   : 0,
               8) &&
          same(d.ns, c->ns, c->kind == WEIR__KIND_NS ? c->n : 0, 8) &&
          same(d.ts, c->ts, c->kind == WEIR__KIND_TIMERS ? c->n : 0, 8) &&
          same(d.domain, c->domain, c->kind == WEIR__KIND_TIMERS ? c->n : 0, 4) &&
          same(d.values, c->values,
               c->kind == WEIR__KIND_U64 || c->kind == WEIR__KIND_U64_VALUES ||
                       c->kind == WEIR__KIND_NS
                   ? c->n
                   : 0,
               8) &&
          same(d.route, c->route, c->kind == WEIR__KIND_BYTES ? c->n : 0, 8) &&
          same(d.klen, c->klen, c->kind == WEIR__KIND_BYTES ? c->n : 0, 4) &&
          same(d.vlen, c->vlen, c->kind == WEIR__KIND_BYTES ? c->n : 0, 4) &&
          same(d.data, c->data, c->data_len, 1),
      "chunk decode: the round trip changed the chunk");
  weir__chunk_free(&d);
  weir_free(buf);
}

static int try_chunk(const uint8_t *v, size_t n, int env, uint16_t kind, weir__chunk_id expect) {
  weir__chunk c;
  char err[300];
  memset(err, 0x55, sizeof err);
  memset(&c, 0xa5, sizeof c);
  arm();
  int rc = weir__chunk_decode(v, n, expect, &c, err, sizeof err);
  int fits = kind == WEIR__KIND_U64 || kind == WEIR__KIND_U64_VALUES || kind == WEIR__KIND_BYTES ||
             kind == WEIR__KIND_BLOB || kind == WEIR__KIND_TIMERS || kind == WEIR__KIND_NS;
  check_rc("chunk decode", rc, env, fits, err, sizeof err);
  if (rc < 0) {
    CHECK(all_zero(&c, sizeof c), "chunk decode: an error left a result behind");
    weir__chunk_free(&c); /* must be harmless on an empty result */
    return 0;
  }
  check_chunk(&c, kind, expect);
  round_trip_chunk(&c, expect);
  weir__chunk_free(&c);
  CHECK(c.msg_ == NULL, "chunk free: left the message behind");
  return 1;
}

/* ---- the entry point ------------------------------------------------------------ */

int fz_decode(const uint8_t *data, size_t size) {
  cur_data = data;
  cur_size = size;
  uint8_t hdr[FZ_HDR] = {0};
  if (size > 0) memcpy(hdr, data, size < FZ_HDR ? size : FZ_HDR);
  size_t n = size > FZ_HDR ? size - FZ_HDR : 0;
  uint8_t *v = weir_malloc(n); /* exactly n bytes: overreads are caught */
  if (n > 0) memcpy(v, data + FZ_HDR, n);
  unsigned control = hdr[0];
  fail_nth = control >> FZ_FAIL_SHIFT;
  if ((control & FZ_RESEAL) && n >= WEIR__ENV_HDR && n - WEIR__ENV_HDR <= UINT32_MAX) {
    uint32_t plen = (uint32_t)(n - WEIR__ENV_HDR);
    put_le(v + 8, plen, 4);
    put_le(v + 12, weir__crc32c(weir__crc32c(0, v, 12), v + WEIR__ENV_HDR, plen), 4);
  }
  uint64_t ckpt = le(hdr + 1, 8);
  weir__chunk_id expect = {ckpt, (uint32_t)le(hdr + 9, 4), (uint32_t)le(hdr + 13, 4)};
  const char *job = (control & FZ_WITH_JOB) ? FZ_JOB_ID : NULL;

  /* The envelope on its own: every decoder must agree with it. */
  uint16_t kind = 0;
  const uint8_t *payload = NULL;
  size_t plen = 0;
  char err[256];
  memset(err, 0x55, sizeof err);
  int env = weir__env_open(v, n, &kind, &payload, &plen, err, sizeof err);
  CHECK(env == 0 || env == WEIR_ECORRUPT || env == WEIR_EFORMAT, "envelope: returned %d", env);
  if (env == 0) {
    CHECK(kind >= 1 && kind <= WEIR__KIND_MAX, "envelope: accepted kind %u", kind);
    CHECK(payload == v + WEIR__ENV_HDR && plen == n - WEIR__ENV_HDR,
          "envelope: payload outside the value");
  } else {
    CHECK(err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL, "envelope: bad message");
    kind = 0;
  }

  int accepted = 0;
  unsigned which = control & FZ_DECODERS;
  if (which == FZ_ALL || which == FZ_JOB) accepted += try_job(v, n, env, kind);
  if (which == FZ_ALL || which == FZ_META) accepted += try_meta(v, n, env, kind, ckpt, job);
  if (which == FZ_ALL || which == FZ_CHUNK) accepted += try_chunk(v, n, env, kind, expect);
  CHECK(accepted <= 1, "%d decoders accepted one value", accepted);
  weir_free(v);
  cur_data = NULL;
  cur_size = 0;
  return accepted;
}
