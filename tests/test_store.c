/* test_store.c: unit tests of the checkpoint store (snapshot/): the value
 * envelope (envelope.c), the codec's validation (codec.c) and the store
 * itself (store.c, writer.c) on real LMDB environments in per-test
 * directories.
 *
 * Covers: CRC32C vectors, envelope round trip and every kind of damage
 * (header bytes, payload, truncation, magic, newer format); semantic
 * validation of job records, checkpoint metadata and chunks; the job record
 * and checkpoint ids (monotonic across close/reopen and across a crash of a
 * writer process, under concurrent callers, from a done() callback); exact
 * round trips of u64 state spanning many chunks, byte-string state (empty
 * and binary keys and values, an entry larger than a chunk), positions and
 * blobs; the chunk size limit; invisibility and collection of uncommitted
 * checkpoints; a failed subtask write failing its commit (map full, double
 * write); retention; list and info; verify; damage on disk (a flipped byte
 * in a chunk or in metadata, heavy truncation, scribbled LMDB pages, a file
 * truncated under an open store making the verifying child crash) which
 * must give WEIR_ECORRUPT naming the checkpoint and never crash the test;
 * read-only opens beside a writer (in a forked child: LMDB forbids opening
 * one environment twice in a process); ENOSPC on a tiny tmpfs when the test
 * runs as root on Linux (skipped otherwise). Commits are refused for ids
 * aborted, failed, committed, or begun by an earlier run.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mount.h>
#endif
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codec.h"
#include "envelope.h"
#include "helpers.h"
#include "store_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "snapshot/store.h"

typedef unsigned long long ull;

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static char *g_dir;

static void setup(void) {
  g_dir = th_tmpdir();
  cr_assert_not_null(g_dir);
  rng_state = 42;
}
static void teardown(void) {
  th_rmrf(g_dir);
  free(g_dir);
}

static weir_store *open_store(const weir_store_opts *o) {
  weir_store *s = NULL;
  int rc = weir_store_open(&s, g_dir, o);
  cr_assert_eq(rc, 0, "open: %s", weir_strerror(rc));
  return s;
}

static char *err_of(weir_store *s) {
  static char buf[1024];
  return (char *)weir_store_error(s, buf, sizeof buf);
}

/* What a done() callback saw. Read after weir_store_flush (which
 * synchronises with the writer thread). */
typedef struct seen {
  int calls, status;
  weir_store_written w;
} seen;

static void on_done(void *user, int status, const weir_store_written *w) {
  seen *r = user;
  r->calls++;
  r->status = status;
  if (w) r->w = *w;
}

static char *data_path(void) {
  static char p[512];
  snprintf(p, sizeof p, "%s/store/data.mdb", g_dir);
  return p;
}

/* A snapshot with n u64 entries (distinct keys in scrambled order) and
 * nothing else. The keys depend on n only: n is their version. */
static void snap_u64(weir_subtask_snapshot *sn, const char *op, uint32_t sub, uint32_t par,
                     uint64_t n) {
  memset(sn, 0, sizeof *sn);
  sn->op = weir_strdup(op);
  sn->subtask = sub;
  sn->parallelism = par;
  sn->n_u64 = n;
  sn->u64_keys_version = n;
  if (n) {
    sn->u64_keys = weir_malloc(n * 8);
    sn->u64_values = weir_malloc(n * 8);
  }
  for (uint64_t i = 0; i < n; i++) {
    sn->u64_keys[i] = (i + 1) * 0x9e3779b97f4a7c15ull; /* bijective: distinct */
    uint64_t r = rnd();
    sn->u64_values[i] = r >> (r & 63); /* every varint length */
  }
}

static weir_subtask_snapshot copy_snap(const weir_subtask_snapshot *a) {
  weir_subtask_snapshot b = *a;
  b.op = weir_strdup(a->op);
#define DUP(f, n)                                                                                  \
  do {                                                                                             \
    if ((n) > 0) {                                                                                 \
      b.f = weir_malloc((n) * sizeof *a->f);                                                       \
      memcpy(b.f, a->f, (n) * sizeof *a->f);                                                       \
    } else {                                                                                       \
      b.f = NULL;                                                                                  \
    }                                                                                              \
  } while (0)
  DUP(u64_keys, a->n_u64);
  DUP(u64_values, a->n_u64);
  DUP(b_route, a->n_bytes);
  DUP(b_klen, a->n_bytes);
  DUP(b_vlen, a->n_bytes);
  DUP(b_data, a->b_data_len);
  DUP(pos, a->npos);
  DUP(blob, a->blob_len);
#undef DUP
  return b;
}

/* (key, value) pairs in hash order, the order the store keeps. */
static int cmp_pair(const void *a, const void *b) {
  uint64_t x = weir_store_u64_rank(*(const uint64_t *)a),
           y = weir_store_u64_rank(*(const uint64_t *)b);
  return x < y ? -1 : x > y;
}
static int cmp_posn(const void *a, const void *b) {
  const weir_snap_position *x = a, *y = b;
  return x->split < y->split ? -1 : x->split > y->split;
}

/* Asserts that `got` (loaded) holds exactly the state of `want` (as
 * written): u64 state as a set (loaded in hash order), byte-string entries in
 * order, positions as a set (loaded sorted by split), blob. */
static void assert_same(const weir_subtask_snapshot *want, const weir_subtask_snapshot *got) {
  cr_assert_str_eq(got->op, want->op);
  cr_assert_eq(got->subtask, want->subtask);
  cr_assert_eq(got->parallelism, want->parallelism);
  cr_assert_eq(got->n_u64, want->n_u64);
  if (want->n_u64) {
    uint64_t *pairs = weir_malloc(want->n_u64 * 16);
    for (uint64_t i = 0; i < want->n_u64; i++) {
      pairs[2 * i] = want->u64_keys[i];
      pairs[2 * i + 1] = want->u64_values[i];
    }
    qsort(pairs, want->n_u64, 16, cmp_pair);
    for (uint64_t i = 0; i < want->n_u64; i++) {
      if (got->u64_keys[i] != pairs[2 * i] || got->u64_values[i] != pairs[2 * i + 1])
        cr_assert_fail("u64 entry %llu differs", (ull)i);
    }
    weir_free(pairs);
  }
  cr_assert_eq(got->n_bytes, want->n_bytes);
  cr_assert_eq(got->b_data_len, want->b_data_len);
  if (want->n_bytes) {
    cr_assert_arr_eq(got->b_route, want->b_route, want->n_bytes * 8);
    cr_assert_arr_eq(got->b_klen, want->b_klen, want->n_bytes * 4);
    cr_assert_arr_eq(got->b_vlen, want->b_vlen, want->n_bytes * 4);
  }
  if (want->b_data_len) cr_assert_arr_eq(got->b_data, want->b_data, want->b_data_len);
  cr_assert_eq(got->npos, want->npos);
  if (want->npos) {
    weir_snap_position *p = weir_malloc(want->npos * sizeof *p);
    memcpy(p, want->pos, want->npos * sizeof *p);
    qsort(p, want->npos, sizeof *p, cmp_posn);
    for (uint32_t i = 0; i < want->npos; i++) {
      cr_assert_eq(got->pos[i].split, p[i].split);
      cr_assert_eq(got->pos[i].offset, p[i].offset);
    }
    weir_free(p);
  }
  cr_assert_eq(got->blob_len, want->blob_len);
  if (want->blob_len) cr_assert_arr_eq(got->blob, want->blob, want->blob_len);
}

/* The job record's latest completed checkpoint. */
static uint64_t latest_of(weir_store *s) {
  weir_store_job j;
  cr_assert_eq(weir_store_job_get(s, &j), 1);
  return j.latest;
}

/* Writes sn (ownership taken) for checkpoint id and commits it; asserts
 * both succeed. */
static void write_commit(weir_store *s, uint64_t id, weir_subtask_snapshot *sn, int final) {
  seen w = {0}, c = {0};
  if (sn) cr_assert_eq(weir_store_write_subtask(s, id, sn, on_done, &w), 0);
  weir_store_commit_info ci = {.id = id,
                               .trigger_ms = 1000,
                               .duration_ms = 5,
                               .alignment_ms = 2,
                               .final = final,
                               .subtasks = sn ? 1 : 0};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  if (sn) cr_assert_eq(w.status, 0, "write: %s", err_of(s));
  cr_assert_eq(c.calls, 1);
  cr_assert_eq(c.status, 0, "commit: %s", err_of(s));
}

static uint64_t next_id(weir_store *s) {
  uint64_t id = 0;
  int rc = weir_store_next_id(s, &id);
  cr_assert_eq(rc, 0, "next_id: %s", err_of(s));
  return id;
}

static weir_store *open_with_job(const weir_store_opts *o) {
  weir_store *s = open_store(o);
  weir_store_job j;
  cr_assert_eq(weir_store_job_begin(s, 0, &j), 0, "%s", err_of(s));
  return s;
}

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

/* ---- store: job record and ids ---------------------------------------------------- */

TestSuite(store, .init = setup, .fini = teardown);

Test(store, job_and_ids_across_reopen) {
  weir_store *s = open_store(NULL);
  weir_store_job j;
  cr_assert_eq(weir_store_job_get(s, &j), 0);
  uint64_t id;
  cr_assert_eq(weir_store_next_id(s, &id), WEIR_ESTATE);
  cr_assert_eq(weir_store_job_begin(s, 0, &j), 0, "%s", err_of(s));
  cr_assert(weir__uuid_valid(j.job_id), "%s", j.job_id);
  cr_assert_eq(j.job_id[14], '4'); /* version 4 */
  cr_assert(strchr("89ab", j.job_id[19]) != NULL);
  cr_assert_eq(j.instance, 1);
  cr_assert_eq(j.latest, 0);
  cr_assert_eq(j.finished, 0);
  char job_id[40];
  strcpy(job_id, j.job_id);
  uint64_t last = 0;
  for (int i = 0; i < 150; i++) { /* crosses two reservation blocks */
    id = next_id(s);
    cr_assert_gt(id, last);
    last = id;
  }
  cr_assert_eq(weir_store_job_get(s, &j), 1);
  cr_assert_eq(j.next_id, last + 1);
  weir_store_close(s);

  s = open_store(NULL);
  cr_assert_eq(weir_store_job_get(s, &j), 1);
  cr_assert_str_eq(j.job_id, job_id);
  id = next_id(s);
  cr_assert_gt(id, last);
  last = id;
  /* Same job again: unchanged; a new instance: ids continue. */
  cr_assert_eq(weir_store_job_begin(s, 0, &j), 0);
  cr_assert_eq(j.instance, 1);
  cr_assert_eq(weir_store_job_begin(s, 1, &j), 0);
  cr_assert_eq(j.instance, 2);
  cr_assert_str_eq(j.job_id, job_id);
  id = next_id(s);
  cr_assert_gt(id, last);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

Test(store, ids_and_collection_after_a_crash) {
  /* A writer process takes ids, writes a subtask of an uncommitted
   * checkpoint, and dies without closing. */
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    weir_store *s = NULL;
    if (weir_store_open(&s, g_dir, NULL) != 0) _exit(10);
    weir_store_job j;
    if (weir_store_job_begin(s, 0, &j) != 0) _exit(11);
    uint64_t id = 0;
    for (int i = 0; i < 100; i++)
      if (weir_store_next_id(s, &id) != 0) _exit(12);
    weir_subtask_snapshot sn;
    snap_u64(&sn, "count", 0, 1, 50000);
    seen w = {0};
    if (weir_store_write_subtask(s, id, &sn, on_done, &w) != 0) _exit(13);
    weir_store_flush(s);
    if (w.status != 0 || id != 100) _exit(14);
    kill(getpid(), SIGKILL);
    _exit(15);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status %d", st);

  weir_store *s = open_store(NULL);
  size_t max;
  uint64_t count;
  cr_assert_eq(weir__store_test_chunk_stats(s, 100, &max, &count), 0);
  cr_assert_eq(count, 0, "uncommitted chunks were not collected");
  uint64_t id = next_id(s);
  cr_assert_gt(id, 100);
  /* The dead run's checkpoint cannot be committed by this one. */
  seen c = {0}, w = {0};
  weir_store_commit_info ci = {.id = 100};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "count", 0, 1, 5);
  cr_assert_eq(weir_store_write_subtask(s, 100, &sn, on_done, &w), 0);
  weir_store_flush(s);
  cr_assert_eq(c.status, WEIR_ESTATE);
  cr_assert_eq(w.status, WEIR_ESTATE);
  cr_assert(strstr(err_of(s), "before this store was opened") != NULL, "%s", err_of(s));
  weir_store_ckpt *list;
  size_t n;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 0);
  cr_assert_null(list);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

typedef struct idthread {
  weir_store *s;
  uint64_t ids[300];
  int rc;
} idthread;

static void *take_ids(void *arg) {
  idthread *t = arg;
  for (int i = 0; i < 300; i++) {
    t->rc = weir_store_next_id(t->s, &t->ids[i]);
    if (t->rc != 0) break;
  }
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

Test(store, next_id_from_many_threads) {
  weir_store *s = open_with_job(NULL);
  idthread t[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    t[i].s = s;
    t[i].rc = 0;
    cr_assert_eq(pthread_create(&th[i], NULL, take_ids, &t[i]), 0);
  }
  uint64_t all[1200];
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    cr_assert_eq(t[i].rc, 0);
    for (int k = 1; k < 300; k++) cr_assert_gt(t[i].ids[k], t[i].ids[k - 1]);
    memcpy(all + 300 * i, t[i].ids, sizeof t[i].ids);
  }
  qsort(all, 1200, 8, cmp_u64);
  for (int i = 1; i < 1200; i++) cr_assert_neq(all[i], all[i - 1], "id %llu twice", (ull)all[i]);
  weir_store_close(s);
  s = open_store(NULL);
  cr_assert_gt(next_id(s), all[1199]);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* From a done() callback (the writer thread): ask for ids and queue the
 * commit; nothing may deadlock. */
typedef struct reentry {
  weir_store *s;
  uint64_t id, got[100];
  int rc_ids, rc_commit;
  seen commit;
} reentry;

static void done_then_commit(void *user, int status, const weir_store_written *w) {
  reentry *r = user;
  r->rc_ids = status;
  for (int i = 0; i < 100 && r->rc_ids == 0; i++) r->rc_ids = weir_store_next_id(r->s, &r->got[i]);
  weir_store_flush(r->s); /* returns at once on the writer thread */
  weir_store_commit_info ci = {.id = r->id};
  r->rc_commit = weir_store_commit(r->s, &ci, on_done, &r->commit);
}

Test(store, calls_from_a_done_callback) {
  weir_store *s = open_with_job(NULL);
  reentry r = {.s = s, .id = next_id(s)};
  weir_subtask_snapshot sn;
  snap_u64(&sn, "op", 0, 1, 10);
  cr_assert_eq(weir_store_write_subtask(s, r.id, &sn, done_then_commit, &r), 0);
  weir_store_flush(s);
  weir_store_flush(s); /* the commit was queued by the callback */
  cr_assert_eq(r.rc_ids, 0, "%s", err_of(s));
  cr_assert_eq(r.rc_commit, 0);
  cr_assert_eq(r.commit.status, 0, "%s", err_of(s));
  for (int i = 1; i < 100; i++) cr_assert_gt(r.got[i], r.got[i - 1]);
  cr_assert_gt(r.got[0], r.id);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- store: writing and loading ------------------------------------------------------ */

/* Byte-string state: empty keys and values, binary bytes, and one entry
 * larger than a chunk. */
static void add_bytes(weir_subtask_snapshot *sn, uint64_t n) {
  sn->n_bytes = n;
  sn->b_route = weir_malloc(n * 8);
  sn->b_klen = weir_malloc(n * 4);
  sn->b_vlen = weir_malloc(n * 4);
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; i++) {
    sn->b_route[i] = rnd();
    sn->b_klen[i] = i % 5 == 0 ? 0 : (uint32_t)(rnd() % 40);
    sn->b_vlen[i] = i % 7 == 0 ? 0 : (uint32_t)(rnd() % 200);
    if (i == n / 2) sn->b_vlen[i] = 200000; /* spans several chunks */
    total += sn->b_klen[i] + sn->b_vlen[i];
  }
  sn->b_data_len = total;
  sn->b_data = weir_malloc(total);
  for (uint64_t i = 0; i < total; i++) sn->b_data[i] = (uint8_t)rnd(); /* includes NULs */
}

Test(store, round_trip_large_state, .timeout = 60) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);

  weir_subtask_snapshot a;
  snap_u64(&a, "count", 1, 2, 1000000);
  add_bytes(&a, 3000);
  a.npos = 5;
  a.pos = weir_malloc(5 * sizeof *a.pos);
  uint32_t splits[5] = {9, 3, 0, 12, 4};
  for (int i = 0; i < 5; i++) a.pos[i] = (weir_snap_position){splits[i], rnd()};
  a.blob_len = 150000;
  a.blob = weir_malloc(a.blob_len);
  for (uint64_t i = 0; i < a.blob_len; i++) a.blob[i] = (uint8_t)rnd();
  weir_subtask_snapshot a_copy = copy_snap(&a);

  /* A source subtask with positions only, and a subtask with nothing. */
  weir_subtask_snapshot b = {.op = weir_strdup("gen"), .subtask = 0, .parallelism = 1, .npos = 1};
  b.pos = weir_malloc(sizeof *b.pos);
  b.pos[0] = (weir_snap_position){0, 12345};
  weir_subtask_snapshot b_copy = copy_snap(&b);
  weir_subtask_snapshot c = {.op = weir_strdup("count"), .subtask = 0, .parallelism = 2};
  weir_subtask_snapshot c_copy = copy_snap(&c);

  seen wa = {0}, wb = {0}, wc = {0}, cm = {0};
  cr_assert_eq(weir_store_write_subtask(s, id, &a, on_done, &wa), 0);
  cr_assert_null(a.u64_keys); /* taken */
  cr_assert_eq(weir_store_write_subtask(s, id, &b, on_done, &wb), 0);
  cr_assert_eq(weir_store_write_subtask(s, id, &c, on_done, &wc), 0);
  weir_store_commit_info ci = {
      .id = id, .epoch = 4, .trigger_ms = 77, .duration_ms = 12, .alignment_ms = 3};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &cm), 0);
  weir_store_flush(s);
  cr_assert_eq(wa.status, 0, "%s", err_of(s));
  cr_assert_eq(wb.status, 0);
  cr_assert_eq(wc.status, 0);
  cr_assert_eq(cm.status, 0, "%s", err_of(s));
  cr_assert_gt(wa.w.chunks, 100);
  cr_assert_eq(wc.w.chunks, 0);
  cr_assert_eq(cm.w.chunks, wa.w.chunks);
  cr_assert_eq(cm.w.bytes, wa.w.bytes);

  /* Every chunk value within the limit. */
  size_t max;
  uint64_t count;
  cr_assert_eq(weir__store_test_chunk_stats(s, id, &max, &count), 0);
  cr_assert_leq(max, 65520);
  cr_assert_gt(max, 60000);
  cr_assert_eq(count, wa.w.chunks);

  /* info */
  weir_store_ckpt_info *info;
  cr_assert_eq(weir_store_info(s, id, &info), 0, "%s", err_of(s));
  weir_store_job j;
  cr_assert_eq(weir_store_job_get(s, &j), 1);
  cr_assert_str_eq(info->job_id, j.job_id);
  cr_assert_eq(j.latest, id);
  cr_assert_eq(info->ckpt.id, id);
  cr_assert_eq(info->ckpt.instance, 1);
  cr_assert_eq(info->ckpt.duration_ms, 12);
  cr_assert_eq(info->ckpt.alignment_ms, 3);
  cr_assert_eq(info->ckpt.final, 0);
  cr_assert_eq(info->ckpt.bytes, wa.w.bytes);
  cr_assert_gt(info->ckpt.time_ms, 0);
  cr_assert_eq(info->format_version, WEIR_STORE_FORMAT);
  cr_assert_eq(info->nsubtasks, 3);
  cr_assert_str_eq(info->subtasks[0].op, "count"); /* ordered by (op, subtask) */
  cr_assert_eq(info->subtasks[0].subtask, 0);
  cr_assert_eq(info->subtasks[1].subtask, 1);
  cr_assert_str_eq(info->subtasks[2].op, "gen");
  cr_assert_eq(info->subtasks[1].u64_entries, 1000000);
  cr_assert_eq(info->subtasks[1].bytes_entries, 3000);
  cr_assert_eq(info->subtasks[1].blob_len, 150000);
  cr_assert_eq(info->subtasks[1].chunks, count);
  cr_assert_eq(info->subtasks[1].npos, 5);
  cr_assert_eq(info->subtasks[2].npos, 1);
  cr_assert_eq(info->subtasks[2].pos[0].offset, 12345);
  weir_store_ckpt_info_free(info);

  /* Loads, in this store and after reopening. */
  for (int round = 0; round < 2; round++) {
    weir_subtask_snapshot got;
    cr_assert_eq(weir_store_load(s, id, "count", 1, &got), 0, "%s", err_of(s));
    assert_same(&a_copy, &got);
    weir_subtask_snapshot_free(&got);
    cr_assert_eq(weir_store_load(s, id, "gen", 0, &got), 0, "%s", err_of(s));
    assert_same(&b_copy, &got);
    weir_subtask_snapshot_free(&got);
    cr_assert_eq(weir_store_load(s, id, "count", 0, &got), 0, "%s", err_of(s));
    assert_same(&c_copy, &got);
    weir_subtask_snapshot_free(&got);
    cr_assert_eq(weir_store_load(s, id, "gen", 1, &got), WEIR_ENOENT);
    cr_assert_null(got.op);
    cr_assert_eq(weir_store_verify(s, id), 0, "%s", err_of(s));
    weir_store_close(s);
    s = open_store(NULL);
  }
  weir_store_close(s);
  weir_subtask_snapshot_free(&a_copy);
  weir_subtask_snapshot_free(&b_copy);
  weir_subtask_snapshot_free(&c_copy);
  cr_assert_eq(th_leak_check(), 0);
}

/* Edge shapes of the chunk packing: each round-trips, every chunk within
 * the limit. */
Test(store, round_trip_edge_shapes) {
  weir_store *s = open_with_job(NULL);
  for (int shape = 0; shape < 8; shape++) {
    weir_subtask_snapshot sn;
    snap_u64(&sn, "shape", 0, 1, 0);
    switch (shape) {
    case 0: /* byte-string entries that are all empty */
      sn.n_bytes = 20000;
      sn.b_route = weir_malloc(20000 * 8);
      sn.b_klen = weir_calloc(20000, 4);
      sn.b_vlen = weir_calloc(20000, 4);
      for (int i = 0; i < 20000; i++) sn.b_route[i] = (uint64_t)i;
      break;
    case 1: /* one entry of 1 MB with an empty key */
      sn.n_bytes = 1;
      sn.b_route = weir_calloc(1, 8);
      sn.b_klen = weir_calloc(1, 4);
      sn.b_vlen = weir_malloc(4);
      sn.b_vlen[0] = 1u << 20;
      sn.b_data_len = 1u << 20;
      sn.b_data = weir_malloc(sn.b_data_len);
      for (uint64_t i = 0; i < sn.b_data_len; i++) sn.b_data[i] = (uint8_t)rnd();
      break;
    case 2: /* blobs of exactly one chunk's room, and one byte more */
    case 3:
      sn.blob_len = WEIR__CHUNK_BUDGET + (shape == 3);
      sn.blob = weir_malloc(sn.blob_len);
      for (uint64_t i = 0; i < sn.blob_len; i++) sn.blob[i] = (uint8_t)rnd();
      break;
    case 4: /* one u64 entry, the extreme keys */
      weir_subtask_snapshot_free(&sn);
      snap_u64(&sn, "shape", 0, 1, 3);
      sn.u64_keys[0] = UINT64_MAX;
      sn.u64_keys[1] = 0;
      sn.u64_values[2] = UINT64_MAX;
      break;
    case 5: /* widest varints */
      weir_subtask_snapshot_free(&sn);
      snap_u64(&sn, "shape", 0, 1, 20000);
      for (int i = 0; i < 20000; i++) sn.u64_values[i] = UINT64_MAX - (uint64_t)i;
      break;
    case 6: /* already sorted keys, all three kinds */
      weir_subtask_snapshot_free(&sn);
      snap_u64(&sn, "shape", 0, 1, 30000);
      for (int i = 0; i < 30000; i++) sn.u64_keys[i] = (uint64_t)i * 3;
      add_bytes(&sn, 500);
      sn.blob_len = 10;
      sn.blob = weir_calloc(1, 10);
      break;
    case 7: /* many positions */
      sn.npos = 10000;
      sn.pos = weir_malloc(sn.npos * sizeof *sn.pos);
      for (uint32_t i = 0; i < sn.npos; i++) sn.pos[i] = (weir_snap_position){sn.npos - i, i};
      break;
    }
    weir_subtask_snapshot keep = copy_snap(&sn);
    uint64_t id = next_id(s);
    write_commit(s, id, &sn, 0);
    size_t max;
    uint64_t count;
    cr_assert_eq(weir__store_test_chunk_stats(s, id, &max, &count), 0);
    cr_assert_leq(max, WEIR__CHUNK_MAX, "shape %d", shape);
    if (shape == 2) cr_assert_eq(count, 1);
    if (shape == 3) cr_assert_eq(count, 2);
    weir_subtask_snapshot got;
    cr_assert_eq(weir_store_load(s, id, "shape", 0, &got), 0, "shape %d: %s", shape, err_of(s));
    assert_same(&keep, &got);
    weir_subtask_snapshot_free(&got);
    weir_subtask_snapshot_free(&keep);
    cr_assert_eq(weir_store_verify(s, id), 0, "shape %d: %s", shape, err_of(s));
  }
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

Test(store, write_subtask_argument_checks) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "op", 2, 2, 5); /* subtask >= parallelism */
  cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, NULL), WEIR_EINVAL);
  cr_assert_null(sn.op); /* taken and freed */
  cr_assert(strstr(err_of(s), "subtask 2 of parallelism 2") != NULL, "%s", err_of(s));
  snap_u64(&sn, "op", 0, 1, 5);
  cr_assert_eq(weir_store_write_subtask(s, 0, &sn, on_done, NULL), WEIR_EINVAL);
  snap_u64(&sn, "op", 0, 1, 0);
  weir_free(sn.op);
  sn.op = NULL;
  cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, NULL), WEIR_EINVAL);
  snap_u64(&sn, "op", 0, 1, 0);
  add_bytes(&sn, 10);
  sn.b_data_len--;
  cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, NULL), WEIR_EINVAL);
  snap_u64(&sn, "op", 0, 1, 0);
  sn.npos = 2;
  sn.pos = weir_malloc(2 * sizeof *sn.pos);
  sn.pos[0] = sn.pos[1] = (weir_snap_position){3, 1};
  cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, NULL), WEIR_EINVAL);
  /* A repeated u64 key fails asynchronously, and so does the commit. */
  seen w = {0}, c = {0};
  snap_u64(&sn, "op", 0, 1, 5);
  sn.u64_keys[3] = sn.u64_keys[1];
  cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, &w), 0);
  weir_store_commit_info ci = {.id = id};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(w.status, WEIR_EINVAL);
  cr_assert_lt(c.status, 0);
  cr_assert_eq(weir_store_info(s, id, &(weir_store_ckpt_info *){NULL}), WEIR_ENOENT);
  /* Repeated keys in larger states (the radix sort's path): refused. */
  for (int k = 0; k < 2; k++) {
    uint64_t idk = next_id(s);
    seen dw = {0};
    snap_u64(&sn, "op", 0, 1, 10000);
    if (k == 0) sn.u64_keys[9000] = sn.u64_keys[17];
    for (int i = 0; k == 1 && i < 10000; i++) sn.u64_keys[i] = 42;
    cr_assert_eq(weir_store_write_subtask(s, idk, &sn, on_done, &dw), 0);
    weir_store_flush(s);
    cr_assert_eq(dw.status, WEIR_EINVAL);
    cr_assert(strstr(err_of(s), "appears twice") != NULL, "%s", err_of(s));
  }
  /* One operator with two parallelisms in a checkpoint: refused. */
  uint64_t id2 = next_id(s);
  seen p1 = {0}, p2 = {0};
  snap_u64(&sn, "op", 0, 2, 5);
  cr_assert_eq(weir_store_write_subtask(s, id2, &sn, on_done, &p1), 0);
  snap_u64(&sn, "op", 1, 3, 5);
  cr_assert_eq(weir_store_write_subtask(s, id2, &sn, on_done, &p2), 0);
  ci.id = id2;
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(p1.status, 0);
  cr_assert_eq(p2.status, WEIR_EINVAL);
  cr_assert_lt(c.status, 0);
  /* An id never handed out cannot be committed. */
  ci.id = id + 1000;
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(c.status, WEIR_EINVAL);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

Test(store, uncommitted_is_invisible_and_collected) {
  weir_store *s = open_with_job(NULL);
  uint64_t id1 = next_id(s), id2 = next_id(s), id3 = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "op", 0, 1, 20000);
  write_commit(s, id1, &sn, 0);
  seen w = {0};
  snap_u64(&sn, "op", 0, 1, 20000);
  cr_assert_eq(weir_store_write_subtask(s, id2, &sn, on_done, &w), 0);
  snap_u64(&sn, "op", 0, 1, 20000);
  cr_assert_eq(weir_store_write_subtask(s, id3, &sn, on_done, &w), 0);
  weir_store_flush(s);
  cr_assert_eq(w.status, 0);
  weir_store_ckpt *list;
  size_t n;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 1);
  cr_assert_eq(list[0].id, id1);
  weir_free(list);
  weir_store_ckpt_info *info;
  cr_assert_eq(weir_store_info(s, id2, &info), WEIR_ENOENT);
  cr_assert_null(info);
  weir_subtask_snapshot got;
  cr_assert_eq(weir_store_load(s, id2, "op", 0, &got), WEIR_ENOENT);
  cr_assert_eq(weir_store_verify(s, id2), WEIR_ENOENT);
  cr_assert(strstr(err_of(s), "not retained") != NULL, "%s", err_of(s));
  /* Abort discards at once; the other is collected at reopen. */
  size_t max;
  uint64_t count;
  cr_assert_eq(weir__store_test_chunk_stats(s, id2, &max, &count), 0);
  cr_assert_gt(count, 0);
  cr_assert_eq(weir_store_abort(s, id2), 0);
  cr_assert_eq(weir_store_abort(s, id1), 0); /* committed: left alone */
  weir_store_flush(s);
  cr_assert_eq(weir__store_test_chunk_stats(s, id2, &max, &count), 0);
  cr_assert_eq(count, 0);
  cr_assert_eq(weir__store_test_chunk_stats(s, id3, &max, &count), 0);
  cr_assert_gt(count, 0);
  /* An aborted checkpoint cannot be committed (it would be committed
   * empty), and a committed one takes no more writes. */
  seen c = {0}, w1 = {0};
  weir_store_commit_info ci = {.id = id2};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  snap_u64(&sn, "op", 1, 2, 5);
  cr_assert_eq(weir_store_write_subtask(s, id1, &sn, on_done, &w1), 0);
  weir_store_flush(s);
  cr_assert_eq(c.status, WEIR_ESTATE);
  cr_assert_eq(w1.status, WEIR_ESTATE);
  cr_assert_eq(weir_store_info(s, id2, &info), WEIR_ENOENT);
  /* A commit that counted more subtasks than were written fails, and
   * discards; its retry fails too. */
  uint64_t id4 = next_id(s);
  snap_u64(&sn, "op", 0, 1, 5);
  cr_assert_eq(weir_store_write_subtask(s, id4, &sn, on_done, &w1), 0);
  ci = (weir_store_commit_info){.id = id4, .subtasks = 2};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(w1.status, 0);
  cr_assert_eq(c.status, WEIR_ESTATE);
  cr_assert(strstr(err_of(s), "1 subtask writes, 2 were acknowledged") != NULL, "%s", err_of(s));
  cr_assert_eq(weir__store_test_chunk_stats(s, id4, &max, &count), 0);
  cr_assert_eq(count, 0);
  ci.subtasks = 0;
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(c.status, WEIR_ESTATE);
  weir_store_close(s);
  s = open_store(NULL);
  cr_assert_eq(weir__store_test_chunk_stats(s, id3, &max, &count), 0);
  cr_assert_eq(count, 0);
  cr_assert_eq(weir__store_test_chunk_stats(s, id1, &max, &count), 0);
  cr_assert_gt(count, 0);
  cr_assert_eq(weir_store_verify(s, id1), 0, "%s", err_of(s));
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

Test(store, commit_fails_after_a_failed_write) {
  weir_store_opts o = {.map_size = 2u << 20}; /* 2 MiB: a 4 MB blob cannot fit */
  weir_store *s = open_with_job(&o);
  uint64_t id1 = next_id(s), id2 = next_id(s), id3 = next_id(s), id4 = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "op", 0, 1, 1000);
  weir_subtask_snapshot keep = copy_snap(&sn);
  write_commit(s, id1, &sn, 0);

  seen w1 = {0}, w2 = {0}, c = {0};
  snap_u64(&sn, "op", 0, 2, 100);
  cr_assert_eq(weir_store_write_subtask(s, id2, &sn, on_done, &w1), 0);
  snap_u64(&sn, "op", 1, 2, 0);
  sn.blob_len = 4u << 20;
  sn.blob = weir_calloc(1, sn.blob_len);
  cr_assert_eq(weir_store_write_subtask(s, id2, &sn, on_done, &w2), 0);
  weir_store_commit_info ci = {.id = id2};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(w1.status, 0);
  cr_assert_eq(w2.status, WEIR_ENOSPC, "%d", w2.status);
  cr_assert_lt(c.status, 0);
  cr_assert(strstr(err_of(s), "not committed") != NULL, "%s", err_of(s));
  cr_assert(strstr(err_of(s), "map") != NULL, "%s", err_of(s));
  /* Nothing of id2 visible or left; id1 intact; the store still works. */
  weir_store_ckpt *list;
  size_t n;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 1);
  cr_assert_eq(list[0].id, id1);
  weir_free(list);
  size_t max;
  uint64_t count;
  cr_assert_eq(weir__store_test_chunk_stats(s, id2, &max, &count), 0);
  cr_assert_eq(count, 0);
  weir_subtask_snapshot got;
  cr_assert_eq(weir_store_load(s, id1, "op", 0, &got), 0, "%s", err_of(s));
  assert_same(&keep, &got);
  weir_subtask_snapshot_free(&got);
  snap_u64(&sn, "op", 0, 1, 1000);
  write_commit(s, id3, &sn, 0);

  /* The same operator subtask twice: the second write and the commit fail. */
  seen d1 = {0}, d2 = {0};
  snap_u64(&sn, "op", 0, 1, 10);
  cr_assert_eq(weir_store_write_subtask(s, id4, &sn, on_done, &d1), 0);
  snap_u64(&sn, "op", 0, 1, 10);
  cr_assert_eq(weir_store_write_subtask(s, id4, &sn, on_done, &d2), 0);
  ci.id = id4;
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(d1.status, 0);
  cr_assert_eq(d2.status, WEIR_EINVAL);
  cr_assert_lt(c.status, 0);
  weir_store_job j;
  cr_assert_eq(weir_store_job_get(s, &j), 1);
  cr_assert_eq(j.latest, id3);
  weir_store_close(s);
  weir_subtask_snapshot_free(&keep);
  cr_assert_eq(th_leak_check(), 0);
}

/* Writes and commits n checkpoints of operator "op" (one subtask, `entries`
 * u64 entries each), their ids into ids[]; the last one final if
 * final_last. */
static void commit_u64_ckpts(weir_store *s, uint64_t *ids, int n, uint64_t entries,
                             int final_last) {
  for (int i = 0; i < n; i++) {
    ids[i] = next_id(s);
    weir_subtask_snapshot sn;
    snap_u64(&sn, "op", 0, 1, entries);
    write_commit(s, ids[i], &sn, final_last && i == n - 1);
  }
}

Test(store, retention_list_and_final) {
  weir_store_opts o = {.retain = 2};
  weir_store *s = open_with_job(&o);
  uint64_t ids[5];
  commit_u64_ckpts(s, ids, 5, 30000, 1);
  weir_store_ckpt *list;
  size_t n;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 2);
  cr_assert_eq(list[0].id, ids[3]);
  cr_assert_eq(list[1].id, ids[4]);
  cr_assert_eq(list[0].status, 0);
  cr_assert_eq(list[0].final, 0);
  cr_assert_eq(list[1].final, 1);
  cr_assert_eq(list[1].instance, 1);
  /* The same keys every time: the first checkpoint holds them, the others
   * store their values (at least a byte each) and name it. */
  cr_assert_gt(list[1].bytes, 30000);
  cr_assert_lt(list[1].bytes, 30000 * 9);
  cr_assert_eq(list[1].duration_ms, 5);
  weir_free(list);
  for (int i = 0; i < 3; i++) {
    size_t max;
    uint64_t count;
    cr_assert_eq(weir__store_test_chunk_stats(s, ids[i], &max, &count), 0);
    if (i == 0)
      cr_assert_gt(count, 0, "the keys of checkpoint %llu were deleted", (ull)ids[i]);
    else
      cr_assert_eq(count, 0, "checkpoint %llu kept", (ull)ids[i]);
    cr_assert_eq(weir_store_verify(s, ids[i]), WEIR_ENOENT);
  }
  weir_store_job j;
  cr_assert_eq(weir_store_job_get(s, &j), 1);
  cr_assert_eq(j.latest, ids[4]);
  cr_assert_eq(j.finished, 1);
  /* A new instance: not finished, no latest, ids continue. */
  cr_assert_eq(weir_store_job_begin(s, 1, &j), 0);
  cr_assert_eq(j.finished, 0);
  cr_assert_eq(j.latest, 0);
  cr_assert_eq(j.instance, 2);
  uint64_t id = next_id(s);
  cr_assert_gt(id, ids[4]);
  write_commit(s, id, NULL, 0); /* a checkpoint without state */
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 2);
  cr_assert_eq(list[1].id, id);
  cr_assert_eq(list[1].instance, 2);
  weir_free(list);
  cr_assert_eq(weir_store_verify(s, id), 0, "%s", err_of(s));
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

static int flip_values(uint16_t kind, int all);
static int edit_values(uint16_t kind, int all, int (*edit)(uint8_t *, size_t));

/* Stored chunks of checkpoint id. */
static uint64_t chunks_of(weir_store *s, uint64_t id) {
  size_t max;
  uint64_t count;
  cr_assert_eq(weir__store_test_chunk_stats(s, id, &max, &count), 0);
  return count;
}

static void assert_loads(weir_store *s, uint64_t id, const weir_subtask_snapshot *want) {
  weir_subtask_snapshot got;
  cr_assert_eq(weir_store_load(s, id, "op", 0, &got), 0, "%s", err_of(s));
  assert_same(want, &got);
  weir_subtask_snapshot_free(&got);
}

/* A write whose u64 keys are those of the operator subtask's last write
 * that stored keys, once that one committed, stores only its values and
 * names that record. The record's chunks stay while a retained checkpoint
 * names them, and every checkpoint loads exactly what was written. */
Test(store, unchanged_keys_are_shared_while_named, .timeout = 60) {
  enum { N = 20000, CKPTS = 6 };
  weir_store_opts o = {.retain = 2};
  weir_store *s = open_with_job(&o);
  uint64_t ids[CKPTS];
  weir_subtask_snapshot want[CKPTS];
  for (int i = 0; i < CKPTS; i++) {
    ids[i] = next_id(s);
    weir_subtask_snapshot sn;
    /* 0-2: the same keys; 3 adds one (stored whole); 4-5: 3's keys. */
    snap_u64(&sn, "op", 0, 1, i < 3 ? N : N + 1);
    want[i] = copy_snap(&sn);
    write_commit(s, ids[i], &sn, 0);
    weir_store_ckpt *list;
    size_t n;
    cr_assert_eq(weir_store_list(s, &list, &n), 0);
    uint64_t bytes = list[n - 1].bytes;
    weir_free(list);
    if (i == 0 || i == 3)
      cr_assert_gt(bytes, (uint64_t)N * 9, "checkpoint %d: %llu bytes", i, (ull)bytes);
    else
      cr_assert_lt(bytes, (uint64_t)N * 7, "checkpoint %d shared nothing: %llu bytes", i,
                   (ull)bytes);
    assert_loads(s, ids[i], &want[i]);
    if (i > 0) assert_loads(s, ids[i - 1], &want[i - 1]);
    cr_assert_eq(weir_store_verify(s, ids[i]), 0, "%s", err_of(s));
    cr_assert_eq(weir_store_probe(s, ids[i]), 0, "%s", err_of(s));
    if (i == 2 || i == 3) { /* 0 is not retained, but 1 or 2 names its keys */
      cr_assert_eq(weir_store_verify(s, ids[0]), WEIR_ENOENT);
      cr_assert_gt(chunks_of(s, ids[0]), 0);
    }
    if (i == 3) cr_assert_eq(chunks_of(s, ids[1]), 0);
    if (i >= 4) /* nothing names 0 any more */
      cr_assert_eq(chunks_of(s, ids[0]), 0, "after checkpoint %d", i);
  }
  weir_store_close(s);

  /* After a reopen (the writer's memory of the keys is gone) the retained
   * checkpoints still load; the next write stores its keys again. */
  s = open_store(&o);
  assert_loads(s, ids[5], &want[5]);
  assert_loads(s, ids[4], &want[4]);
  cr_assert_gt(chunks_of(s, ids[3]), 0);
  uint64_t id = next_id(s);
  weir_subtask_snapshot sn, again;
  snap_u64(&sn, "op", 0, 1, N + 1);
  again = copy_snap(&sn);
  write_commit(s, id, &sn, 0);
  assert_loads(s, id, &again);
  weir_store_ckpt *list;
  size_t n;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_gt(list[n - 1].bytes, (uint64_t)N * 9);
  weir_free(list);
  cr_assert_eq(chunks_of(s, ids[4]), 0);
  cr_assert_gt(chunks_of(s, ids[3]), 0, "checkpoint 5 still names them");
  weir_store_close(s);

  /* Damage to shared keys is damage to every checkpoint that names them
   * (the u64 chunks with keys are those of checkpoints 3 and the last). */
  cr_assert_gt(flip_values(WEIR__KIND_U64, 1), 1);
  s = open_store(&o);
  cr_assert_eq(weir_store_verify(s, ids[5]), WEIR_ECORRUPT);
  cr_assert(strstr(err_of(s), "(its keys)") != NULL, "%s", err_of(s));
  cr_assert(strstr(err_of(s), "checksum") != NULL, "%s", err_of(s));
  weir_subtask_snapshot got;
  cr_assert_eq(weir_store_load(s, ids[5], "op", 0, &got), WEIR_ECORRUPT);
  cr_assert_eq(weir_store_verify(s, id), WEIR_ECORRUPT);
  weir_store_close(s);
  for (int i = 0; i < CKPTS; i++) weir_subtask_snapshot_free(&want[i]);
  weir_subtask_snapshot_free(&again);
  cr_assert_eq(th_leak_check(), 0);
}

/* For edit_values: reseals value v as written by the next
 * store format (valid checksum: a newer weir's value). */
static int reseal_newer(uint8_t *v, size_t room) {
  uint32_t plen =
      (uint32_t)v[8] | (uint32_t)v[9] << 8 | (uint32_t)v[10] << 16 | (uint32_t)v[11] << 24;
  if (plen > room - WEIR__ENV_HDR) return 0;
  weir__env_seal(v, (uint16_t)(WEIR_STORE_FORMAT + 1), (uint16_t)(v[6] | v[7] << 8), plen);
  return 1;
}

/* The keys a checkpoint shares are collected only when no checkpoint
 * names them; a checkpoint whose metadata this weir cannot read (a newer
 * format) may name them, so while one is stored nothing is collected. */
Test(store, unreadable_metadata_keeps_shared_keys) {
  weir_store_opts o = {.retain = 1};
  weir_store *s = open_with_job(&o);
  uint64_t ids[2];
  commit_u64_ckpts(s, ids, 2, 3000, 0);
  cr_assert_eq(weir_store_verify(s, ids[0]), WEIR_ENOENT); /* retain 1 */
  cr_assert_gt(chunks_of(s, ids[0]), 0, "named by checkpoint %llu", (ull)ids[1]);
  weir_store_close(s);
  cr_assert_geq(edit_values(WEIR__KIND_META, 1, reseal_newer), 1);
  s = open_store(&o); /* collects at open */
  cr_assert_eq(weir_store_verify(s, ids[1]), WEIR_EFORMAT, "%s", err_of(s));
  cr_assert_gt(chunks_of(s, ids[0]), 0, "collected what a newer checkpoint may name");
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- store: damage ---------------------------------------------------------------------- */

/* Edits stored values of `kind` (this format's) in data.mdb in place:
 * edit(value, bytes from it to the file's end) on the first one found (all
 * = 0) or on every one (all = 1). Returns how many it edited (edit returns
 * 1 for an edit, 0 to pass a value by). */
static int edit_values(uint16_t kind, int all, int (*edit)(uint8_t *, size_t)) {
  size_t len;
  char *d = th_read_file(data_path(), &len);
  cr_assert_not_null(d);
  int n = 0;
  for (size_t i = 0; i + 64 < len; i++) {
    uint8_t *v = (uint8_t *)d + i;
    if (memcmp(v, "WEIR", 4) != 0 || v[4] != WEIR_STORE_FORMAT || v[5] != 0 || v[6] != kind ||
        v[7] != 0 || !edit(v, len - i))
      continue;
    n++;
    if (!all) break;
  }
  cr_assert_eq(th_write_file(data_path(), d, len), 0);
  free(d);
  return n;
}

/* For edit_values: flips a payload byte. */
static int flip_one(uint8_t *v, size_t room) {
  (void)room; /* at least 64 bytes */
  v[WEIR__ENV_HDR + 20] ^= 0x5a;
  return 1;
}

/* Flips payload bytes of stored values of `kind` in data.mdb: the first
 * one found (all = 0) or every one (all = 1). Returns how many. */
static int flip_values(uint16_t kind, int all) {
  return edit_values(kind, all, flip_one);
}

Test(store, flipped_chunk_byte_is_refused) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "count", 0, 1, 50000);
  write_commit(s, id, &sn, 0);
  cr_assert_eq(weir_store_verify(s, id), 0, "%s", err_of(s));
  weir_store_close(s);

  cr_assert_eq(flip_values(WEIR__KIND_U64, 0), 1);
  s = open_store(NULL);
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu", (ull)id);
  cr_assert_eq(weir_store_verify(s, id), WEIR_ECORRUPT);
  cr_assert(strstr(err_of(s), want) != NULL, "%s", err_of(s));
  cr_assert(strstr(err_of(s), "checksum") != NULL, "%s", err_of(s));
  weir_subtask_snapshot got;
  cr_assert_eq(weir_store_load(s, id, "count", 0, &got), WEIR_ECORRUPT);
  cr_assert_null(got.u64_keys);
  cr_assert(strstr(err_of(s), want) != NULL, "%s", err_of(s));
  cr_assert(strstr(err_of(s), "operator \"count\"") != NULL, "%s", err_of(s));
  /* The metadata is intact: still listed. */
  weir_store_ckpt *list;
  size_t n;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 1);
  cr_assert_eq(list[0].status, 0);
  weir_free(list);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

Test(store, flipped_metadata_byte_is_refused) {
  weir_store *s = open_with_job(NULL);
  uint64_t id1 = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "count", 0, 1, 100);
  write_commit(s, id1, &sn, 0);
  weir_store_close(s);
  cr_assert_geq(flip_values(WEIR__KIND_META, 1), 1);

  s = open_store(NULL);
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu", (ull)id1);
  weir_store_ckpt *list;
  size_t n;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 1);
  cr_assert_eq(list[0].id, id1);
  cr_assert_eq(list[0].status, WEIR_ECORRUPT);
  weir_free(list);
  weir_store_ckpt_info *info;
  cr_assert_eq(weir_store_info(s, id1, &info), WEIR_ECORRUPT);
  cr_assert(strstr(err_of(s), want) != NULL, "%s", err_of(s));
  cr_assert_eq(weir_store_verify(s, id1), WEIR_ECORRUPT);
  cr_assert(strstr(err_of(s), want) != NULL, "%s", err_of(s));
  /* The store goes on: a new checkpoint commits and verifies. */
  uint64_t id2 = next_id(s);
  snap_u64(&sn, "count", 0, 1, 100);
  write_commit(s, id2, &sn, 0);
  cr_assert_eq(weir_store_verify(s, id2), 0, "%s", err_of(s));
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* Opens the damaged store; returns the open's status, or (when it opened)
 * verify's status on `id`. */
static int open_or_verify(uint64_t id, char *msg, size_t len) {
  weir_store *s = NULL;
  int rc = weir_store_open(&s, g_dir, NULL);
  if (rc < 0) {
    snprintf(msg, len, "open: %s", weir_strerror(rc));
    return rc;
  }
  rc = weir_store_verify(s, id);
  weir_store_error(s, msg, len);
  weir_store_close(s);
  return rc;
}

static uint64_t three_checkpoints(void) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = 0;
  for (int i = 0; i < 3; i++) {
    id = next_id(s);
    weir_subtask_snapshot sn;
    snap_u64(&sn, "count", 0, 1, 100000);
    write_commit(s, id, &sn, 0);
  }
  weir_store_close(s);
  return id;
}

Test(store, truncated_file_is_refused) {
  uint64_t id = three_checkpoints();
  struct stat st;
  cr_assert_eq(stat(data_path(), &st), 0);
  cr_assert_eq(truncate(data_path(), st.st_size / 3), 0);
  char msg[1024];
  int rc = open_or_verify(id, msg, sizeof msg);
  cr_assert_eq(rc, WEIR_ECORRUPT, "%d: %s", rc, msg);
  /* Down to the two meta pages, and to less than that. */
  cr_assert_eq(truncate(data_path(), 8192), 0);
  rc = open_or_verify(id, msg, sizeof msg);
  cr_assert_eq(rc, WEIR_ECORRUPT, "%d: %s", rc, msg);
  cr_assert_eq(truncate(data_path(), 5000), 0);
  rc = open_or_verify(id, msg, sizeof msg);
  cr_assert_eq(rc, WEIR_ECORRUPT, "%d: %s", rc, msg);
  cr_assert_eq(th_leak_check(), 0);
}

Test(store, scribbled_pages_are_refused) {
  uint64_t id = three_checkpoints();
  size_t len;
  char *d = th_read_file(data_path(), &len);
  cr_assert_not_null(d);
  char *orig = weir_malloc(len);
  memcpy(orig, d, len);
  /* Garbage over every page after the two meta pages, then over every other
   * page, then over one page in four: each must be refused, never crash. */
  for (int stride = 1; stride <= 4; stride *= 2) {
    memcpy(d, orig, len);
    for (size_t pg = 2; (pg + 1) * 4096 <= len; pg += (size_t)stride)
      for (size_t i = 0; i < 4096; i++) d[pg * 4096 + i] = (char)rnd();
    cr_assert_eq(th_write_file(data_path(), d, len), 0);
    char msg[1024];
    int rc = open_or_verify(id, msg, sizeof msg);
    cr_assert_eq(rc, WEIR_ECORRUPT, "stride %d: %d: %s", stride, rc, msg);
  }
  free(d);
  weir_free(orig);
  cr_assert_eq(th_leak_check(), 0);
}

Test(store, crashing_verifier_is_reported) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "count", 0, 1, 100000);
  write_commit(s, id, &sn, 0);
  /* Hook: the child faults as a damaged page would make it. */
  weir__store_test_child_signal(s, SIGSEGV);
  cr_assert_eq(weir_store_verify(s, id), WEIR_ECORRUPT);
  cr_assert(strstr(err_of(s), "reader crashed with signal SIGSEGV") != NULL, "%s", err_of(s));
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu: the store is damaged", (ull)id);
  cr_assert(strstr(err_of(s), want) != NULL, "%s", err_of(s));
  weir__store_test_child_signal(s, 0);
  cr_assert_eq(weir_store_verify(s, id), 0, "%s", err_of(s));
  int dead = -1;
  cr_assert_eq(mdb_reader_check(s->env, &dead), 0);
  cr_assert_eq(dead, 0, "verifying children left reader slots");
  /* For real: the file truncated under the open store; the child's reads
   * of the mapped pages fault (SIGBUS). This process touches none. */
  cr_assert_eq(truncate(data_path(), 8192), 0);
  cr_assert_eq(weir_store_verify(s, id), WEIR_ECORRUPT);
  cr_assert(strstr(err_of(s), "signal") != NULL, "%s", err_of(s));
  cr_assert_eq(mdb_reader_check(s->env, &dead), 0);
  cr_assert_eq(dead, 0, "the crashed child's reader slot was not cleared");
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- store: read-only ------------------------------------------------------------------------ */

Test(store, read_only_beside_a_writer) {
  weir_store *ro = NULL;
  cr_assert_eq(weir_store_open(&ro, g_dir, &(weir_store_opts){.read_only = 1}), WEIR_ENOENT);
  cr_assert_null(ro);
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "count", 0, 1, 5000);
  add_bytes(&sn, 50);
  weir_subtask_snapshot keep = copy_snap(&sn);
  write_commit(s, id, &sn, 0);
  weir_store_job wj;
  cr_assert_eq(weir_store_job_get(s, &wj), 1);

  /* A reader process opens the store read-only while this one holds it for
   * writing (LMDB allows one environment per path per process, so the
   * reader must be another process). */
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    weir_store *r = NULL;
    if (weir_store_open(&r, g_dir, &(weir_store_opts){.read_only = 1}) != 0) _exit(10);
    weir_store_job j;
    if (weir_store_job_get(r, &j) != 1 || strcmp(j.job_id, wj.job_id) != 0 || j.latest != id)
      _exit(11);
    weir_store_ckpt *list;
    size_t n;
    if (weir_store_list(r, &list, &n) != 0 || n != 1 || list[0].id != id) _exit(12);
    weir_free(list);
    weir_subtask_snapshot got;
    if (weir_store_load(r, id, "count", 0, &got) != 0 || got.n_u64 != 5000 || got.n_bytes != 50 ||
        got.b_data_len != keep.b_data_len || memcmp(got.b_data, keep.b_data, keep.b_data_len) != 0)
      _exit(13);
    weir_subtask_snapshot_free(&got);
    if (weir_store_verify(r, id) != 0) _exit(14);
    uint64_t x;
    if (weir_store_next_id(r, &x) != WEIR_ESTATE) _exit(15);
    snap_u64(&got, "count", 0, 1, 5);
    if (weir_store_write_subtask(r, id, &got, NULL, NULL) != WEIR_ESTATE) _exit(16);
    if (weir_store_job_begin(r, 0, &j) != WEIR_ESTATE) _exit(17);
    weir_store_close(r);
    _exit(0);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st), "reader status %d", st);
  cr_assert_eq(WEXITSTATUS(st), 0, "reader failed at step %d", WEXITSTATUS(st));
  /* The writer goes on. */
  snap_u64(&sn, "count", 0, 1, 10);
  write_commit(s, next_id(s), &sn, 0);
  weir_store_close(s);
  weir_subtask_snapshot_free(&keep);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- store: grouped writes ------------------------------------------------------------ */

/* Loads subtasks [0, n) of op from checkpoint id, checks each against
 * keep[i] and frees keep[i]. */
static void assert_loaded(weir_store *s, uint64_t id, const char *op, weir_subtask_snapshot *keep,
                          uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    weir_subtask_snapshot got;
    cr_assert_eq(weir_store_load(s, id, op, i, &got), 0, "%s", err_of(s));
    assert_same(&keep[i], &got);
    weir_subtask_snapshot_free(&got);
    weir_subtask_snapshot_free(&keep[i]);
  }
}

/* Holds the writer thread in a done() callback (no transaction is open
 * there) until released, so that the writes queued meanwhile are all
 * waiting when it goes on: no timing involved. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int entered, open;
} gate;

static gate g_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void gate_done(void *user, int status, const weir_store_written *w) {
  (void)user;
  (void)status;
  (void)w;
  pthread_mutex_lock(&g_gate.mu);
  g_gate.entered = 1;
  pthread_cond_broadcast(&g_gate.cv);
  while (!g_gate.open) pthread_cond_wait(&g_gate.cv, &g_gate.mu);
  pthread_mutex_unlock(&g_gate.mu);
}

/* Queues an empty write of ("gate", 0) for id and waits until the writer
 * sits in its done(). */
static void gate_close(weir_store *s, uint64_t id) {
  weir_subtask_snapshot sn;
  snap_u64(&sn, "gate", 0, 1, 0);
  cr_assert_eq(weir_store_write_subtask(s, id, &sn, gate_done, NULL), 0);
  pthread_mutex_lock(&g_gate.mu);
  while (!g_gate.entered) pthread_cond_wait(&g_gate.cv, &g_gate.mu);
  pthread_mutex_unlock(&g_gate.mu);
}

static void gate_open(void) {
  pthread_mutex_lock(&g_gate.mu);
  g_gate.open = 1;
  pthread_cond_broadcast(&g_gate.cv);
  pthread_mutex_unlock(&g_gate.mu);
}

/* What a done() callback saw, with the store's message at that moment (the
 * failed write's own). */
typedef struct seen_msg {
  seen s;
  weir_store *store;
  char msg[1024];
} seen_msg;

static void on_done_msg(void *user, int status, const weir_store_written *w) {
  seen_msg *r = user;
  on_done(&r->s, status, w);
  if (status < 0) weir_store_error(r->store, r->msg, sizeof r->msg);
}

/* A fork from another thread while the writer thread is at work (here,
 * held in a done() callback) waits until the writer is between requests:
 * the child gets a copy of the heap with no allocation of the writer's
 * half done (weir_fork_hold; allocators such as AddressSanitizer's leave
 * their locks taken in the child otherwise). */
typedef struct forker {
  pthread_t th;
  atomic_int forked;
  int status;
} forker;

static void *fork_main(void *arg) {
  forker *f = arg;
  pid_t pid = fork();
  if (pid == 0) _exit(g_gate.open ? 0 : 1); /* the child's copy: the writer was let go */
  atomic_store(&f->forked, 1);
  int st = -1;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) st = -1;
  f->status = st;
  return NULL;
}

Test(store, fork_waits_for_the_writer_between_requests, .timeout = 60) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  gate_close(s, id); /* the writer sits in a done() callback */
  fflush(NULL);
  forker f = {0};
  atomic_init(&f.forked, 0);
  cr_assert_eq(pthread_create(&f.th, NULL, fork_main, &f), 0);
  weir_sleep_us(200000);
  int early = atomic_load(&f.forked);
  gate_open();
  pthread_join(f.th, NULL);
  cr_assert_eq(early, 0, "fork() went ahead while the writer was at work");
  cr_assert(f.status >= 0 && WIFEXITED(f.status) && WEXITSTATUS(f.status) == 0,
            "the child was forked while the writer was at work (status %d)", f.status);
  weir_store_flush(s);
  weir_store_close(s);
}

/* The same while a view is read: a fork waits until the read is over
 * (the reader holds the fork guard while it reads, as the writer does
 * while it waits for the read), and the child sees the fill finished. */
static pthread_mutex_t g_rd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_rd_cv = PTHREAD_COND_INITIALIZER;
static int g_rd_in, g_rd_go;
static atomic_int g_rd_done;

static void blocking_fill(void *arg, weir_subtask_snapshot *sn, int run) {
  (void)arg;
  if (!run) return;
  pthread_mutex_lock(&g_rd_mu);
  g_rd_in = 1;
  pthread_cond_broadcast(&g_rd_cv);
  while (!g_rd_go) pthread_cond_wait(&g_rd_cv, &g_rd_mu);
  pthread_mutex_unlock(&g_rd_mu);
  weir_subtask_snapshot tmp;
  snap_u64(&tmp, "x", 0, 1, 100);
  sn->n_u64 = tmp.n_u64;
  sn->u64_keys = tmp.u64_keys;
  sn->u64_values = tmp.u64_values;
  tmp.u64_keys = tmp.u64_values = NULL;
  weir_subtask_snapshot_free(&tmp);
  atomic_store(&g_rd_done, 1); /* before the reader lets go of the fork guard */
}

static void *fork_reader_main(void *arg) {
  forker *f = arg;
  pid_t pid = fork();
  if (pid == 0)
    _exit(atomic_load(&g_rd_done) ? 0 : 1); /* the child's copy: the fill had finished */
  atomic_store(&f->forked, 1);
  int st = -1;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) st = -1;
  f->status = st;
  return NULL;
}

Test(store, fork_waits_for_a_reader_at_work, .timeout = 60) {
  setenv("WEIR_STORE_READERS", "1", 1);
  weir_store *s = open_with_job(NULL);
  unsetenv("WEIR_STORE_READERS");
  uint64_t id = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "x", 0, 1, 0);
  sn.u64_keys_version = 100;
  sn.fill = blocking_fill;
  seen w = {0};
  cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, &w), 0);
  pthread_mutex_lock(&g_rd_mu);
  while (!g_rd_in) pthread_cond_wait(&g_rd_cv, &g_rd_mu);
  pthread_mutex_unlock(&g_rd_mu);
  fflush(NULL);
  forker f = {0};
  atomic_init(&f.forked, 0);
  cr_assert_eq(pthread_create(&f.th, NULL, fork_reader_main, &f), 0);
  weir_sleep_us(200000);
  int early = atomic_load(&f.forked);
  pthread_mutex_lock(&g_rd_mu);
  g_rd_go = 1;
  pthread_cond_broadcast(&g_rd_cv);
  pthread_mutex_unlock(&g_rd_mu);
  pthread_join(f.th, NULL);
  cr_assert_eq(early, 0, "fork() went ahead while a reader was filling a view");
  cr_assert(f.status >= 0 && WIFEXITED(f.status) && WEXITSTATUS(f.status) == 0,
            "the child was forked while the reader was at work (status %d)", f.status);
  weir_store_flush(s);
  cr_assert_eq(w.status, 0, "%s", err_of(s));
  weir_store_close(s);
}

#define NGROUP 10

/* Writes queued behind a busy writer are written in one transaction (one
 * durable commit), a group larger than WEIR__TXN_CHUNKS chunks in as many
 * transactions as it needs, and everything loads back exactly. */
Test(store, queued_writes_commit_in_one_transaction, .timeout = 60) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  gate_close(s, id);
  uint64_t before = weir__store_test_chunk_txns(s); /* ordered by the gate's mutex */
  weir_subtask_snapshot keep[NGROUP];
  seen w[NGROUP] = {{0}};
  for (uint32_t i = 0; i < NGROUP; i++) {
    weir_subtask_snapshot sn;
    snap_u64(&sn, "w", i, NGROUP, 100 + i);
    keep[i] = copy_snap(&sn);
    cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, &w[i]), 0);
  }
  gate_open();
  weir_store_flush(s);
  cr_assert_eq(weir__store_test_chunk_txns(s) - before, 1, "%llu transactions",
               (ull)(weir__store_test_chunk_txns(s) - before));
  for (int i = 0; i < NGROUP; i++) {
    cr_assert_eq(w[i].calls, 1);
    cr_assert_eq(w[i].status, 0, "write %d: %s", i, err_of(s));
    cr_assert_gt(w[i].w.chunks, 0);
  }
  seen c = {0};
  weir_store_commit_info ci = {.id = id, .subtasks = NGROUP + 1};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(c.status, 0, "%s", err_of(s));
  assert_loaded(s, id, "w", keep, NGROUP);

  /* Three 3 MB blobs behind the gate: one group, committed every
   * WEIR__TXN_CHUNKS chunks. */
  g_gate.entered = g_gate.open = 0;
  uint64_t id2 = next_id(s);
  gate_close(s, id2);
  before = weir__store_test_chunk_txns(s);
  seen b[3] = {{0}};
  for (uint32_t i = 0; i < 3; i++) {
    weir_subtask_snapshot sn;
    snap_u64(&sn, "b", i, 3, 0);
    sn.blob_len = 3u << 20;
    sn.blob = weir_malloc(sn.blob_len);
    for (uint64_t k = 0; k < sn.blob_len; k++) sn.blob[k] = (uint8_t)(k * 7 + i);
    keep[i] = copy_snap(&sn);
    cr_assert_eq(weir_store_write_subtask(s, id2, &sn, on_done, &b[i]), 0);
  }
  gate_open();
  weir_store_flush(s);
  size_t max;
  uint64_t count;
  cr_assert_eq(weir__store_test_chunk_stats(s, id2, &max, &count), 0);
  uint64_t txns = weir__store_test_chunk_txns(s) - before;
  cr_assert_eq(txns, (count + WEIR__TXN_CHUNKS - 1) / WEIR__TXN_CHUNKS, "%llu chunks, %llu txns",
               (ull)count, (ull)txns);
  cr_assert_gt(txns, 1);
  for (int i = 0; i < 3; i++) cr_assert_eq(b[i].status, 0, "blob %d: %s", i, err_of(s));
  ci = (weir_store_commit_info){.id = id2, .subtasks = 4};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(c.status, 0, "%s", err_of(s));
  assert_loaded(s, id2, "b", keep, 3);
  cr_assert_eq(weir_store_verify(s, id2), 0, "%s", err_of(s));
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* Deferred fills (copy-on-write views, in the engine) are read ahead by
 * the store's reader threads: while the writer is held, every queued
 * write's fill runs on a thread that is neither the writer nor the caller;
 * each runs exactly once, also for a write that then fails (written
 * twice), and everything loads back exactly. Without readers
 * (WEIR_STORE_READERS=0) the writer runs them itself. */
typedef struct deferred {
  weir_subtask_snapshot src; /* what the fill hands over */
  int runs, drops;
  pthread_t on;
} deferred;

static pthread_mutex_t g_fill_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_fill_cv = PTHREAD_COND_INITIALIZER;
static int g_fills;

static void deferred_fill(void *arg, weir_subtask_snapshot *sn, int run) {
  deferred *d = arg;
  pthread_mutex_lock(&g_fill_mu);
  if (run) {
    d->runs++;
    d->on = pthread_self();
    sn->n_u64 = d->src.n_u64;
    sn->u64_keys = d->src.u64_keys;
    sn->u64_values = d->src.u64_values;
    d->src.u64_keys = d->src.u64_values = NULL;
  } else {
    d->drops++;
  }
  g_fills++;
  pthread_cond_broadcast(&g_fill_cv);
  pthread_mutex_unlock(&g_fill_mu);
}

#define NDEFER 4

static void deferred_writes(const char *readers) {
  setenv("WEIR_STORE_READERS", readers, 1);
  weir_store *s = open_with_job(NULL);
  unsetenv("WEIR_STORE_READERS");
  int ahead = strcmp(readers, "0") != 0;
  uint64_t id = next_id(s);
  g_gate.entered = g_gate.open = 0;
  g_fills = 0;
  gate_close(s, id);
  deferred d[NDEFER + 1];
  weir_subtask_snapshot keep[NDEFER];
  seen w[NDEFER + 1] = {{0}};
  for (uint32_t i = 0; i <= NDEFER; i++) {
    /* The last one writes ("v", 0) a second time. */
    uint32_t sub = i < NDEFER ? i : 0;
    memset(&d[i], 0, sizeof d[i]);
    snap_u64(&d[i].src, "v", sub, NDEFER, 3000 + 7 * sub);
    if (i < NDEFER) keep[i] = copy_snap(&d[i].src);
    weir_subtask_snapshot sn;
    snap_u64(&sn, "v", sub, NDEFER, 0);
    sn.u64_keys_version = d[i].src.u64_keys_version;
    sn.fill = deferred_fill;
    sn.fill_arg = &d[i];
    cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, &w[i]), 0);
  }
  if (ahead) { /* the writer is still held: only readers can do this */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&g_fill_mu);
    int rc = 0;
    while (g_fills < NDEFER + 1 && rc == 0)
      rc = pthread_cond_timedwait(&g_fill_cv, &g_fill_mu, &until);
    int fills = g_fills;
    pthread_mutex_unlock(&g_fill_mu);
    cr_assert_eq(fills, NDEFER + 1, "%d of %d views read while the writer was busy", fills,
                 NDEFER + 1);
  }
  gate_open();
  weir_store_flush(s);
  for (uint32_t i = 0; i <= NDEFER; i++) {
    cr_assert_eq(d[i].runs, 1, "write %u: fill ran %d times", i, d[i].runs);
    cr_assert_eq(d[i].drops, 0);
    cr_assert(!pthread_equal(d[i].on, pthread_self()));
    cr_assert_eq(pthread_equal(d[i].on, s->writer) != 0, !ahead,
                 "write %u: the fill ran %s the writer thread", i, ahead ? "on" : "off");
    cr_assert_eq(w[i].calls, 1);
    if (i < NDEFER) cr_assert_eq(w[i].status, 0, "write %u: %s", i, err_of(s));
  }
  cr_assert_eq(w[NDEFER].status, WEIR_EINVAL, "the second write of (v, 0): %d", w[NDEFER].status);
  seen c = {0};
  weir_store_commit_info ci = {.id = id, .subtasks = 0};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(c.status, WEIR_EINVAL, "a checkpoint with a failed write commits: %d", c.status);
  /* The next checkpoint, written whole, loads back. */
  uint64_t id2 = next_id(s);
  for (uint32_t i = 0; i < NDEFER; i++) {
    weir_subtask_snapshot sn = copy_snap(&keep[i]);
    cr_assert_eq(weir_store_write_subtask(s, id2, &sn, on_done, &w[i]), 0);
  }
  ci = (weir_store_commit_info){.id = id2, .subtasks = NDEFER};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(c.status, 0, "%s", err_of(s));
  assert_loaded(s, id2, "v", keep, NDEFER);
  weir_store_close(s);
  for (uint32_t i = 0; i <= NDEFER; i++) weir_subtask_snapshot_free(&d[i].src);
  cr_assert_eq(th_leak_check(), 0);
}

Test(store, views_are_read_ahead_by_reader_threads, .timeout = 60) {
  deferred_writes("2");
}

Test(store, views_are_read_by_the_writer_without_readers, .timeout = 60) {
  deferred_writes("0");
}

/* The commit of a group's transaction fails: every write in it fails, each
 * with a message naming the store, the checkpoint, its own operator
 * subtask and the failure; the checkpoint is not committed, nothing of it
 * is left, and the next one commits. */
Test(store, failed_group_transaction_fails_every_write_in_it) {
  setenv("WEIR_FAILPOINTS", "store.chunk_txn_commit=error@2", 1);
  weir_failpoint_reload();
  weir_store *s = open_with_job(NULL);
  uint64_t id0 = next_id(s), id = next_id(s), id2 = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "op", 0, 1, 10);
  write_commit(s, id0, &sn, 0); /* the failpoint's first hit */
  gate_close(s, id);
  seen_msg w[NGROUP];
  memset(w, 0, sizeof w);
  for (uint32_t i = 0; i < NGROUP; i++) {
    w[i].store = s;
    snap_u64(&sn, "w", i, NGROUP, 50);
    cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done_msg, &w[i]), 0);
  }
  gate_open();
  seen c = {0};
  weir_store_commit_info ci = {.id = id};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(weir_failpoint_hits("store.chunk_txn_commit"), 2);
  for (uint32_t i = 0; i < NGROUP; i++) {
    cr_assert_eq(w[i].s.calls, 1);
    cr_assert_eq(w[i].s.status, WEIR_EIO, "write %u: %d", i, w[i].s.status);
    char want[128];
    snprintf(want, sizeof want, "writing checkpoint %llu, operator \"w\" subtask %u: ", (ull)id, i);
    cr_assert(strstr(w[i].msg, want) != NULL, "no '%s' in: %s", want, w[i].msg);
    cr_assert(strstr(w[i].msg, g_dir) != NULL, "no path in: %s", w[i].msg);
    cr_assert(strstr(w[i].msg, "[simulated by failpoint store.chunk_txn_commit]") != NULL, "%s",
              w[i].msg);
    cr_assert(strstr(w[i].msg, "it held 10 subtask writes") != NULL, "%s", w[i].msg);
    cr_assert(strstr(w[i].msg, "the subtask needs ") != NULL, "%s", w[i].msg);
  }
  cr_assert_lt(c.status, 0);
  cr_assert(strstr(err_of(s), "not committed") != NULL, "%s", err_of(s));
  cr_assert_eq(chunks_of(s, id), 0);
  snap_u64(&sn, "op", 0, 1, 10);
  write_commit(s, id2, &sn, 0);
  cr_assert_eq(latest_of(s), id2);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* A chunk put fails for one write of a group (its own nested transaction
 * is undone): that write fails with its message, the writes before it in
 * the group stay in the transaction and are durable, the ones after it are
 * refused as before (their checkpoint already failed). */
Test(store, failed_put_fails_only_its_write) {
  setenv("WEIR_FAILPOINTS", "store.write_chunk=enospc@3", 1);
  weir_failpoint_reload();
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  gate_close(s, id);
  uint64_t before = weir__store_test_chunk_txns(s);
  seen_msg w[5];
  memset(w, 0, sizeof w);
  for (uint32_t i = 0; i < 5; i++) {
    weir_subtask_snapshot sn;
    w[i].store = s;
    snap_u64(&sn, "w", i, 5, 50); /* one chunk each: the third put is subtask 2's */
    cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done_msg, &w[i]), 0);
  }
  gate_open();
  weir_store_flush(s);
  cr_assert_eq(weir__store_test_chunk_txns(s) - before, 1);
  for (uint32_t i = 0; i < 5; i++) cr_assert_eq(w[i].s.calls, 1);
  cr_assert_eq(w[0].s.status, 0, "%s", w[0].msg);
  cr_assert_eq(w[1].s.status, 0, "%s", w[1].msg);
  cr_assert_eq(w[2].s.status, WEIR_ENOSPC, "%d", w[2].s.status);
  cr_assert(strstr(w[2].msg, "operator \"w\" subtask 2: ") != NULL, "%s", w[2].msg);
  cr_assert(strstr(w[2].msg, "[simulated by failpoint store.write_chunk]") != NULL, "%s", w[2].msg);
  for (uint32_t i = 3; i < 5; i++) {
    cr_assert_eq(w[i].s.status, WEIR_ESTATE, "%d", w[i].s.status);
    cr_assert(strstr(w[i].msg, "already failed") != NULL, "%s", w[i].msg);
  }
  size_t max;
  uint64_t count;
  cr_assert_eq(weir__store_test_chunk_stats(s, id, &max, &count), 0);
  cr_assert_eq(count, 2); /* until the failed commit discards them */
  seen c = {0};
  weir_store_commit_info ci = {.id = id};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_lt(c.status, 0);
  weir_store_close(s);
  unsetenv("WEIR_FAILPOINTS");
  weir_failpoint_reload();
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- store: a commit queued behind its writes ---------------------------------------------- */

/* The order in which done() callbacks ran. */
static int g_order;

typedef struct seen_at {
  seen s;
  int at;
} seen_at;

static void on_done_at(void *user, int status, const weir_store_written *w) {
  seen_at *r = user;
  on_done(&r->s, status, w);
  r->at = ++g_order;
}

/* A commit queued right behind its checkpoint's writes goes into the
 * transaction that holds them: one durable transaction for the writes and
 * the metadata, every write reported before the commit, and the checkpoint
 * loads back exactly and verifies. Behind writes of another checkpoint
 * (here, one that is then aborted) it commits in a transaction of its
 * own. */
Test(store, commit_queued_behind_its_writes_shares_their_transaction, .timeout = 60) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  g_gate.entered = g_gate.open = 0;
  gate_close(s, id);
  uint64_t txns = weir__store_test_chunk_txns(s), with = weir__store_test_commits_with_writes(s);
  weir_subtask_snapshot keep[NGROUP];
  seen_at w[NGROUP], c = {{0}, 0};
  memset(w, 0, sizeof w);
  g_order = 0;
  for (uint32_t i = 0; i < NGROUP; i++) {
    weir_subtask_snapshot sn;
    snap_u64(&sn, "w", i, NGROUP, 100 + i);
    keep[i] = copy_snap(&sn);
    cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done_at, &w[i]), 0);
  }
  weir_store_commit_info ci = {.id = id, .subtasks = NGROUP + 1};
  cr_assert_eq(weir_store_commit(s, &ci, on_done_at, &c), 0);
  gate_open();
  weir_store_flush(s);
  cr_assert_eq(c.s.calls, 1);
  cr_assert_eq(c.s.status, 0, "%s", err_of(s));
  cr_assert_eq(weir__store_test_chunk_txns(s) - txns, 1, "%llu transactions",
               (ull)(weir__store_test_chunk_txns(s) - txns));
  cr_assert_eq(weir__store_test_commits_with_writes(s) - with, 1);
  for (uint32_t i = 0; i < NGROUP; i++) {
    cr_assert_eq(w[i].s.calls, 1);
    cr_assert_eq(w[i].s.status, 0, "write %u: %s", i, err_of(s));
    cr_assert_lt(w[i].at, c.at, "write %u reported after its commit", i);
  }
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < NGROUP; i++) bytes += w[i].s.w.bytes;
  cr_assert_geq(c.s.w.bytes, bytes, "the commit counts %llu bytes, its writes %llu",
                (ull)c.s.w.bytes, (ull)bytes);
  cr_assert_eq(latest_of(s), id);
  assert_loaded(s, id, "w", keep, NGROUP);
  cr_assert_eq(weir_store_verify(s, id), 0, "%s", err_of(s));

  /* Behind a write of another checkpoint: a transaction of its own. */
  uint64_t other = next_id(s), id2 = next_id(s);
  g_gate.entered = g_gate.open = 0;
  gate_close(s, id2);
  with = weir__store_test_commits_with_writes(s);
  seen o = {0}, w2 = {0}, c2 = {0};
  weir_subtask_snapshot sn;
  snap_u64(&sn, "other", 0, 1, 50);
  cr_assert_eq(weir_store_write_subtask(s, other, &sn, on_done, &o), 0);
  snap_u64(&sn, "w", 0, 1, 50);
  weir_subtask_snapshot k2 = copy_snap(&sn);
  cr_assert_eq(weir_store_write_subtask(s, id2, &sn, on_done, &w2), 0);
  ci = (weir_store_commit_info){.id = id2, .subtasks = 2};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c2), 0);
  cr_assert_eq(weir_store_abort(s, other), 0);
  gate_open();
  weir_store_flush(s);
  cr_assert_eq(o.status, 0);
  cr_assert_eq(w2.status, 0);
  cr_assert_eq(c2.status, 0, "%s", err_of(s));
  cr_assert_eq(weir__store_test_commits_with_writes(s) - with, 0);
  assert_loaded(s, id2, "w", &k2, 1);
  uint64_t left = chunks_of(s, other);
  cr_assert_eq(left, 0, "the aborted checkpoint left %llu chunks", (ull)left);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* The metadata put fails inside the transaction of the checkpoint's last
 * writes (failpoint store.commit): the writes are durable and reported as
 * written, the commit fails with its own message, what the checkpoint
 * wrote is discarded, the latest checkpoint stays, and the next commits.
 * Then the shared transaction itself fails (store.chunk_txn_commit): every
 * write in it fails and so does the commit in it, which says so. */
Test(store, commit_failing_with_its_writes) {
  weir_store *s = open_with_job(NULL);
  uint64_t id0 = next_id(s), id = next_id(s), id2 = next_id(s), id3 = next_id(s);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "op", 0, 1, 10);
  write_commit(s, id0, &sn, 0);
  for (int round = 0; round < 2; round++) {
    uint64_t cid = round == 0 ? id : id3;
    g_gate.entered = g_gate.open = 0;
    gate_close(s, cid);
    /* Armed while the writer is held, past the gate's own transaction. */
    setenv("WEIR_FAILPOINTS",
           round == 0 ? "store.commit=error@1" : "store.chunk_txn_commit=error@1", 1);
    weir_failpoint_reload();
    uint64_t with = weir__store_test_commits_with_writes(s);
    seen_msg w[3], c;
    memset(w, 0, sizeof w);
    memset(&c, 0, sizeof c);
    c.store = s;
    for (uint32_t i = 0; i < 3; i++) {
      w[i].store = s;
      snap_u64(&sn, "w", i, 3, 40);
      cr_assert_eq(weir_store_write_subtask(s, cid, &sn, on_done_msg, &w[i]), 0);
    }
    weir_store_commit_info ci = {.id = cid, .subtasks = 4};
    cr_assert_eq(weir_store_commit(s, &ci, on_done_msg, &c), 0);
    gate_open();
    weir_store_flush(s);
    cr_assert_eq(weir__store_test_commits_with_writes(s) - with, 0);
    cr_assert_eq(c.s.calls, 1);
    cr_assert_eq(c.s.status, WEIR_EIO, "round %d: %d", round, c.s.status);
    char want[128];
    snprintf(want, sizeof want, "checkpoint %llu", (ull)cid);
    cr_assert(strstr(c.msg, want) != NULL, "%s", c.msg);
    if (round == 0) {
      cr_assert(strstr(c.msg, "[simulated by failpoint store.commit]") != NULL, "%s", c.msg);
      for (uint32_t i = 0; i < 3; i++) cr_assert_eq(w[i].s.status, 0, "%s", w[i].msg);
    } else {
      cr_assert(strstr(c.msg, "not committed: the transaction holding its last writes and its "
                              "metadata") != NULL,
                "%s", c.msg);
      cr_assert(strstr(c.msg, "[simulated by failpoint store.chunk_txn_commit]") != NULL, "%s",
                c.msg);
      for (uint32_t i = 0; i < 3; i++) {
        cr_assert_eq(w[i].s.status, WEIR_EIO, "%d", w[i].s.status);
        cr_assert(strstr(w[i].msg, "[simulated by failpoint store.chunk_txn_commit]") != NULL, "%s",
                  w[i].msg);
      }
    }
    uint64_t left = chunks_of(s, cid);
    cr_assert_eq(left, 0, "round %d: %llu chunks left", round, (ull)left);
    weir_store_ckpt *list;
    size_t n;
    cr_assert_eq(weir_store_list(s, &list, &n), 0);
    for (size_t i = 0; i < n; i++) cr_assert_neq(list[i].id, cid);
    weir_free(list);
    cr_assert_eq(weir_failpoint_hits(round == 0 ? "store.commit" : "store.chunk_txn_commit"), 1);
    unsetenv("WEIR_FAILPOINTS");
    weir_failpoint_reload();
    if (round == 0) {
      snap_u64(&sn, "op", 0, 1, 10);
      write_commit(s, id2, &sn, 0);
    }
  }
  cr_assert_eq(latest_of(s), id2);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- store: a full disk -------------------------------------------------------------------- */

#ifdef __linux__
Test(store, disk_full_on_tmpfs) {
  char mnt[600];
  snprintf(mnt, sizeof mnt, "%s/mnt", g_dir);
  cr_assert_eq(mkdir(mnt, 0755), 0);
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0)
    cr_skip_test("cannot mount a tmpfs here (needs root): ENOSPC not tested");
  weir_store *s = NULL;
  int rc = weir_store_open(&s, mnt, NULL);
  if (rc == 0) {
    weir_store_job j;
    rc = weir_store_job_begin(s, 0, &j);
  }
  if (rc != 0) {
    umount2(mnt, MNT_DETACH);
    cr_assert_fail("open on tmpfs: %s", weir_strerror(rc));
  }
  uint64_t id1, id2, id3;
  weir_store_next_id(s, &id1);
  weir_store_next_id(s, &id2);
  weir_store_next_id(s, &id3);
  weir_subtask_snapshot sn;
  snap_u64(&sn, "op", 0, 1, 1000);
  seen w = {0}, c = {0};
  weir_store_commit_info ci = {.id = id1};
  weir_store_write_subtask(s, id1, &sn, on_done, &w);
  weir_store_commit(s, &ci, on_done, &c);
  weir_store_flush(s);
  int ok1 = w.status == 0 && c.status == 0;
  /* 4 MB on a 1 MB file system. */
  seen w2 = {0}, c2 = {0};
  snap_u64(&sn, "op", 0, 1, 0);
  sn.blob_len = 4u << 20;
  sn.blob = weir_calloc(1, sn.blob_len);
  weir_store_write_subtask(s, id2, &sn, on_done, &w2);
  ci.id = id2;
  weir_store_commit(s, &ci, on_done, &c2);
  weir_store_flush(s);
  char msg[1024];
  weir_store_error(s, msg, sizeof msg);
  char wmsg[1024] = "";
  /* Still usable: id1 loads, a small checkpoint commits. */
  weir_subtask_snapshot got;
  int load = weir_store_load(s, id1, "op", 0, &got);
  weir_subtask_snapshot_free(&got);
  seen w3 = {0}, c3 = {0};
  snap_u64(&sn, "op", 0, 1, 100);
  weir_store_write_subtask(s, id3, &sn, on_done, &w3);
  ci.id = id3;
  weir_store_commit(s, &ci, on_done, &c3);
  weir_store_flush(s);
  weir_store_error(s, wmsg, sizeof wmsg);
  weir_store_close(s);
  umount2(mnt, MNT_DETACH);
  cr_assert(ok1);
  cr_assert_eq(w2.status, WEIR_ENOSPC, "write status %d: %s", w2.status, msg);
  cr_assert_lt(c2.status, 0);
  cr_assert(strstr(msg, mnt) != NULL, "message without the path: %s", msg);
  cr_assert_eq(load, 0);
  cr_assert_eq(w3.status, 0, "%s", wmsg);
  cr_assert_eq(c3.status, 0, "%s", wmsg);
  cr_assert_eq(th_leak_check(), 0);
}
#endif
