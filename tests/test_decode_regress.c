/* test_decode_regress.c: the decoders of stored values (snapshot/envelope.c,
 * snapshot/codec.c, and the store's load paths in snapshot/store.c) against
 * hostile bytes and a failing allocator, without libFuzzer.
 *
 * Covers: every seed input of the decoder fuzzer (tests/fuzz/corpus) still
 * decodes; every kept finding (tests/fuzz/regressions) decodes or is refused
 * cleanly; random mutations of the seeds (bit flips, byte stores,
 * truncation, extension, insertion, deletion, copied slices, long varints;
 * with and without resealing the envelope, some with an allocation failing)
 * are each accepted or refused cleanly, all through fz_decode (tests/fuzz/decode_input.h), the same
 * oracle the fuzzer runs; and, in the manner of SQLite's fault loops, every
 * decode (job record, metadata, each chunk kind) and the store's job, list,
 * info and load paths with the Nth protobuf-c allocation failing, for N = 1,
 * 2, ... until the operation succeeds: each failure is WEIR_ENOMEM with an
 * empty result, and nothing leaks.
 *
 * The mutation test prints its seed; rerun it with WEIR_SEED=<seed>. Under
 * AddressSanitizer a crash prints the input being decoded (xxd -p form) so
 * it can be kept in tests/fuzz/regressions.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codec.h"
#include "decode_input.h"
#include "helpers.h"
#include "base/alloc.h"
#include "weir/error.h"
#include "snapshot/store.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif
#ifdef HAVE_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

typedef unsigned long long ull;

/* ---- inputs on disk ---------------------------------------------------------- */

/* Every file in WEIR_FUZZ_DIR/sub except dot files and *.md, by name. */
static th_inputs read_dir(const char *sub) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", WEIR_FUZZ_DIR, sub);
  th_inputs in;
  cr_assert_eq(th_read_dir(dir, &in), 0, "cannot read %s", dir);
  return in;
}

static void dump_on_death(void) {
#ifdef HAVE_ASAN
  __sanitizer_set_death_callback(fz_dump_current);
#endif
}

/* ---- corpus and regressions ---------------------------------------------------- */

Test(decode_regress, corpus_decodes) {
  th_inputs in = read_dir("corpus");
  cr_assert_geq(in.n, 10, "only %zu seed inputs in tests/fuzz/corpus", in.n);
  int kinds[4] = {0};
  for (size_t i = 0; i < in.n; i++) {
    cr_assert_eq(fz_decode(in.v[i].data, in.v[i].len), 1,
                 "seed %s no longer decodes: regenerate the corpus (tests/fuzz/README.md)",
                 in.v[i].name);
    kinds[in.v[i].len > 0 ? in.v[i].data[0] & FZ_DECODERS : 0]++;
  }
  cr_assert(kinds[FZ_ALL] && kinds[FZ_JOB] && kinds[FZ_META] && kinds[FZ_CHUNK],
            "the corpus should exercise every decoder");
  th_free_inputs(&in);
  cr_assert_eq(th_leak_check(), 0);
}

Test(decode_regress, regressions_replay) {
  dump_on_death();
  th_inputs in = read_dir("regressions");
  int accepted = 0;
  for (size_t i = 0; i < in.n; i++) {
    fprintf(stderr, "regression %s (%zu bytes)\n", in.v[i].name, in.v[i].len);
    accepted += fz_decode(in.v[i].data, in.v[i].len); /* aborts on a broken promise */
  }
  cr_log_info("%zu regression inputs replayed, %d accepted", in.n, accepted);
  th_free_inputs(&in);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- random mutations ---------------------------------------------------------- */

static uint64_t rng;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static size_t below(size_t n) {
  return n ? (size_t)(rnd() % n) : 0;
}

/* Applies one random mutation to buf[0 .. *len) (capacity cap). Mutations
 * aim at the value (behind the 17-byte header) unless the input is shorter. */
static void mutate(uint8_t *buf, size_t *len, size_t cap) {
  static const uint8_t interesting[] = {0x00, 0x01, 0x02, 0x07, 0x08, 0x0f, 0x10, 0x7f,
                                        0x80, 0x81, 0xfe, 0xff, 0x0a, 0x12, 0x22, 0x3a};
  size_t n = *len, lo = n > FZ_HDR ? FZ_HDR : 0;
  size_t at = lo + below(n - lo);
  switch (rnd() % 9) {
  case 0: /* flip a bit */
    if (n) buf[at] ^= (uint8_t)(1u << (rnd() % 8));
    break;
  case 1: /* store an interesting byte */
    if (n) buf[at] = interesting[rnd() % sizeof interesting];
    break;
  case 2: /* store a random byte */
    if (n) buf[at] = (uint8_t)rnd();
    break;
  case 3: /* truncate */
    *len = lo + below(n - lo + 1);
    break;
  case 4: /* extend with random bytes */
    for (size_t k = 1 + below(64); k > 0 && *len < cap; k--) buf[(*len)++] = (uint8_t)rnd();
    break;
  case 5: { /* insert random bytes */
    size_t k = 1 + below(8);
    if (n + k > cap) break;
    memmove(buf + at + k, buf + at, n - at);
    for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)rnd();
    *len = n + k;
    break;
  }
  case 6: { /* delete a range */
    size_t k = 1 + below(16);
    if (at + k > n) k = n - at;
    memmove(buf + at, buf + at + k, n - at - k);
    *len = n - k;
    break;
  }
  case 7: { /* copy a slice over another place */
    size_t from = lo + below(n - lo), k = 1 + below(32);
    if (from + k > n) k = n - from;
    if (at + k > n) k = n - at;
    memmove(buf + at, buf + from, k);
    break;
  }
  case 8: { /* a long varint (10 bytes, or an unterminated one) */
    size_t k = rnd() % 2 ? 10 : 11;
    for (size_t i = 0; i < k && at + i < n; i++) buf[at + i] = i + 1 < k ? 0xff : 0x01;
    if (k == 11 && at + 10 < n) buf[at + 10] = 0xff;
    break;
  }
  }
}

Test(decode_regress, random_mutations, .timeout = 120) {
  dump_on_death();
  const char *s = getenv("WEIR_SEED");
  uint64_t seed =
      s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  rng = seed;
  fprintf(stderr, "decode_regress.random_mutations: seed %llu (rerun with WEIR_SEED=%llu)\n",
          (ull)seed, (ull)seed);
  cr_log_info("seed %llu", (ull)seed);
  th_inputs in = read_dir("corpus");
  cr_assert_gt(in.n, 0);
  size_t cap = 0;
  for (size_t i = 0; i < in.n; i++)
    if (in.v[i].len > cap) cap = in.v[i].len;
  cap += 1024;
  uint8_t *buf = weir_malloc(cap);
  const int rounds = 100000;
  int accepted = 0, resealed = 0;
  for (int r = 0; r < rounds; r++) {
    const th_input *src = &in.v[below(in.n)];
    size_t len = src->len;
    memcpy(buf, src->data, len);
    for (int k = 1 + (int)below(4); k > 0; k--) mutate(buf, &len, cap);
    if (len > 0) {
      if (rnd() % 2) buf[0] ^= FZ_RESEAL; /* as stored, or resealed */
      if (rnd() % 8 == 0) buf[0] = (uint8_t)((buf[0] & ~FZ_DECODERS) | (rnd() % 4));
      if (rnd() % 8 == 0) /* and an allocation failing */
        buf[0] = (uint8_t)((buf[0] & 0x0f) | (1 + rnd() % 15) << FZ_FAIL_SHIFT);
      resealed += (buf[0] & FZ_RESEAL) != 0;
    }
    accepted += fz_decode(buf, len);
  }
  fprintf(stderr,
          "decode_regress.random_mutations: %d mutated inputs (%d resealed), %d accepted, "
          "the rest refused cleanly\n",
          rounds, resealed, accepted);
  weir_free(buf);
  th_free_inputs(&in);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- a failing allocator --------------------------------------------------------- */

/* Decodes the value of a corpus input with the decoder its envelope kind
 * calls for and the input's expectations; frees the result. Returns the
 * decoder's result, and checks that an error left the result empty. */
static int decode_seed(const th_input *in) {
  const uint8_t *h = in->data, *v = in->data + FZ_HDR;
  size_t n = in->len - FZ_HDR;
  uint64_t ckpt = 0;
  uint32_t rec = 0, seq = 0;
  for (int i = 7; i >= 0; i--) ckpt = ckpt << 8 | h[1 + i];
  for (int i = 3; i >= 0; i--) {
    rec = rec << 8 | h[9 + i];
    seq = seq << 8 | h[13 + i];
  }
  char err[512] = "";
  int rc;
  switch (v[6]) { /* the envelope's kind */
  case WEIR__KIND_JOB: {
    weir__job_rec j;
    rc = weir__job_decode(v, n, &j, err, sizeof err);
    if (rc < 0) cr_assert_eq(j.instance, 0);
    break;
  }
  case WEIR__KIND_META: {
    weir__ckpt_meta m;
    rc =
        weir__meta_decode(v, n, ckpt, (h[0] & FZ_WITH_JOB) ? FZ_JOB_ID : NULL, &m, err, sizeof err);
    if (rc < 0) cr_assert(m.nsub == 0 && m.subs == NULL);
    weir__meta_free(&m);
    break;
  }
  default: {
    weir__chunk c;
    rc = weir__chunk_decode(v, n, (weir__chunk_id){ckpt, rec, seq}, &c, err, sizeof err);
    if (rc < 0) cr_assert(c.msg_ == NULL && c.n == 0 && c.data == NULL);
    weir__chunk_free(&c);
    break;
  }
  }
  if (rc < 0) cr_assert(err[0] != '\0');
  if (rc == WEIR_ENOMEM) cr_assert(strstr(err, "out of memory") != NULL, "%s", err);
  return rc;
}

/* Runs op() with the Nth protobuf-c allocation failing for N = 1, 2, ...
 * until it succeeds without the failure firing. Every failure must be
 * WEIR_ENOMEM; returns the number of failures injected. */
static int fail_each_allocation(const char *what, int (*op)(void *), void *arg) {
  int injected = 0;
  for (long n = 0;; n++) {
    cr_assert_lt(n, 100000, "%s: never succeeds", what);
    weir__codec_fail_alloc_after(n);
    int rc = op(arg);
    int fired = weir__codec_fail_alloc_after(-1);
    if (!fired) {
      cr_assert_eq(rc, 0, "%s: %s with no allocation failing", what, weir_err_name(rc));
      break;
    }
    cr_assert_eq(rc, WEIR_ENOMEM, "%s: allocation %ld failing gave %s, not WEIR_ENOMEM", what,
                 n + 1, weir_err_name(rc));
    injected++;
  }
  return injected;
}

static int decode_seed_op(void *arg) {
  return decode_seed(arg);
}

Test(decode_alloc, every_decode_with_each_allocation_failing) {
  th_inputs in = read_dir("corpus");
  int kinds = 0, total = 0;
  for (size_t i = 0; i < in.n; i++) {
    if (in.v[i].len < FZ_HDR + WEIR__ENV_HDR || (in.v[i].data[0] & FZ_RESEAL)) continue;
    int k = fail_each_allocation(in.v[i].name, decode_seed_op, &in.v[i]);
    cr_assert_gt(k, 0, "%s: decoding allocates nothing through protobuf-c?", in.v[i].name);
    kinds |= 1 << in.v[i].data[FZ_HDR + 6];
    total += k;
  }
  cr_assert_eq(kinds,
               (1 << WEIR__KIND_JOB) | (1 << WEIR__KIND_META) | (1 << WEIR__KIND_U64) |
                   (1 << WEIR__KIND_U64_VALUES) | (1 << WEIR__KIND_BYTES) | (1 << WEIR__KIND_BLOB) |
                   (1 << WEIR__KIND_TIMERS) | (1 << WEIR__KIND_NS),
               "every kind of value should have been decoded");
  cr_log_info("%d allocation failures injected", total);
  th_free_inputs(&in);
  cr_assert_eq(th_leak_check(), 0);
}

Test(decode_alloc, hook_disarms_and_leaves_others_alone) {
  th_inputs in = read_dir("corpus");
  const th_input *seed = NULL;
  for (size_t i = 0; i < in.n && seed == NULL; i++)
    if (strcmp(in.v[i].name, "meta-4-subtasks") == 0) seed = &in.v[i];
  cr_assert_not_null(seed);
  /* Never armed: nothing fires. */
  cr_assert_eq(weir__codec_fail_alloc_after(-1), 0);
  cr_assert_eq(decode_seed(seed), 0);
  cr_assert_eq(weir__codec_fail_alloc_after(-1), 0);
  /* Armed far beyond what a decode needs: nothing fires; disarmed after. */
  weir__codec_fail_alloc_after(1000000);
  cr_assert_eq(decode_seed(seed), 0);
  cr_assert_eq(weir__codec_fail_alloc_after(-1), 0);
  /* Fires once, then the hook is disarmed: the next decode succeeds. */
  weir__codec_fail_alloc_after(0);
  cr_assert_eq(decode_seed(seed), WEIR_ENOMEM);
  cr_assert_eq(decode_seed(seed), 0);
  cr_assert_eq(weir__codec_fail_alloc_after(-1), 1);
  /* A malformed value is still corrupt, not out of memory, after a fired
   * failure on this thread. */
  weir__codec_fail_alloc_after(0);
  cr_assert_eq(decode_seed(seed), WEIR_ENOMEM);
  uint8_t bad[WEIR__ENV_HDR + 2] = {0};
  bad[WEIR__ENV_HDR] = 0x0a;     /* field 1, length-delimited */
  bad[WEIR__ENV_HDR + 1] = 0x7f; /* 127 bytes that are not there */
  weir__env_seal(bad, WEIR_STORE_FORMAT, WEIR__KIND_JOB, 2);
  weir__job_rec j;
  char err[256];
  cr_assert_eq(weir__job_decode(bad, sizeof bad, &j, err, sizeof err), WEIR_ECORRUPT, "%s", err);
  cr_assert_eq(weir__codec_fail_alloc_after(-1), 1);
  th_free_inputs(&in);
  cr_assert_eq(th_leak_check(), 0);
}

/* The store's read paths, on a real store, with each allocation failing. */
typedef struct store_ctx {
  weir_store *s;
  uint64_t id;
  weir_subtask_snapshot want;
} store_ctx;

static int op_job(void *arg) {
  store_ctx *c = arg;
  weir_store_job j;
  int rc = weir_store_job_get(c->s, &j);
  return rc == 1 ? 0 : rc;
}

static int op_info(void *arg) {
  store_ctx *c = arg;
  weir_store_ckpt_info *info = NULL;
  int rc = weir_store_info(c->s, c->id, &info);
  if (rc < 0) cr_assert_null(info);
  weir_store_ckpt_info_free(info);
  return rc;
}

static int op_list(void *arg) {
  store_ctx *c = arg;
  weir_store_ckpt *v = NULL;
  size_t n = 0;
  int rc = weir_store_list(c->s, &v, &n);
  if (rc < 0) { /* the job record could not be read */
    cr_assert(v == NULL && n == 0);
    return rc;
  }
  cr_assert_eq(n, 1);
  rc = v[0].status; /* an unreadable checkpoint is listed with its error */
  if (rc == 0) cr_assert_eq(v[0].bytes > 0, 1);
  weir_free(v);
  return rc;
}

static int op_load(void *arg) {
  store_ctx *c = arg;
  weir_subtask_snapshot got;
  int rc = weir_store_load(c->s, c->id, "count", 1, &got);
  if (rc < 0) {
    cr_assert_null(got.op);
    cr_assert_null(got.u64_keys);
    return rc;
  }
  const weir_subtask_snapshot *w = &c->want;
  cr_assert_eq(got.n_u64, w->n_u64);
  cr_assert_arr_eq(got.u64_keys, w->u64_keys, w->n_u64 * 8); /* written in hash order */
  cr_assert_arr_eq(got.u64_values, w->u64_values, w->n_u64 * 8);
  cr_assert_eq(got.n_bytes, w->n_bytes);
  cr_assert_arr_eq(got.b_data, w->b_data, w->b_data_len);
  cr_assert_eq(got.blob_len, w->blob_len);
  cr_assert_arr_eq(got.blob, w->blob, w->blob_len);
  weir_subtask_snapshot_free(&got);
  return 0;
}

static void done_status(void *user, int status, const weir_store_written *w) {
  (void)w;
  *(int *)user = status;
}

Test(decode_alloc, store_reads_with_each_allocation_failing, .timeout = 60) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  store_ctx c = {0};
  cr_assert_eq(weir_store_open(&c.s, dir, NULL), 0);
  weir_store_job j;
  cr_assert_eq(weir_store_job_begin(c.s, 0, &j), 0);
  cr_assert_eq(weir_store_next_id(c.s, &c.id), 0);

  /* u64 state over several chunks, byte strings, a blob, positions. */
  weir_subtask_snapshot *w = &c.want;
  w->op = weir_strdup("count");
  w->subtask = 1;
  w->parallelism = 2;
  w->n_u64 = 20000;
  w->u64_keys = weir_malloc(w->n_u64 * 8);
  w->u64_values = weir_malloc(w->n_u64 * 8);
  for (uint64_t i = 0; i < w->n_u64; i++) {
    /* Ranks 3i + 1: already in hash order (the inverse of the rank). */
    w->u64_keys[i] = (3 * i + 1) * 0xf1de83e19937733dull;
    w->u64_values[i] = i * i;
  }
  w->n_bytes = 2;
  w->b_route = weir_malloc(16);
  w->b_klen = weir_malloc(8);
  w->b_vlen = weir_malloc(8);
  w->b_route[0] = 1;
  w->b_route[1] = 2;
  w->b_klen[0] = w->b_klen[1] = 2;
  w->b_vlen[0] = w->b_vlen[1] = 3;
  w->b_data_len = 10;
  w->b_data = (uint8_t *)weir_strdup("k1v01k2v02");
  w->blob_len = 100;
  w->blob = weir_malloc(w->blob_len);
  memset(w->blob, 0xb1, w->blob_len);
  w->npos = 1;
  w->pos = weir_malloc(sizeof *w->pos);
  w->pos[0] = (weir_snap_position){3, 99};
  weir_subtask_snapshot copy = *w;
  copy.op = weir_strdup(w->op);
  /* The store takes the arrays; keep ours (copy them for it). */
#define DUP(f, n)                                                                                  \
  do {                                                                                             \
    copy.f = weir_malloc((n) * sizeof *w->f);                                                      \
    memcpy(copy.f, w->f, (n) * sizeof *w->f);                                                      \
  } while (0)
  DUP(u64_keys, w->n_u64);
  DUP(u64_values, w->n_u64);
  DUP(b_route, w->n_bytes);
  DUP(b_klen, w->n_bytes);
  DUP(b_vlen, w->n_bytes);
  DUP(b_data, w->b_data_len);
  DUP(blob, w->blob_len);
  DUP(pos, w->npos);
#undef DUP
  int ws = 1, cs = 1;
  cr_assert_eq(weir_store_write_subtask(c.s, c.id, &copy, done_status, &ws), 0);
  weir_store_commit_info ci = {.id = c.id, .trigger_ms = 1, .subtasks = 1};
  cr_assert_eq(weir_store_commit(c.s, &ci, done_status, &cs), 0);
  weir_store_flush(c.s);
  cr_assert_eq(ws, 0);
  cr_assert_eq(cs, 0);

  int n_job = fail_each_allocation("job record", op_job, &c);
  int n_list = fail_each_allocation("list", op_list, &c);
  int n_info = fail_each_allocation("info", op_info, &c);
  int n_load = fail_each_allocation("load", op_load, &c);
  cr_assert(n_job > 0 && n_list > 0 && n_info > 0 && n_load > n_info,
            "failures injected: job %d, list %d, info %d, load %d", n_job, n_list, n_info, n_load);
  cr_log_info("failures injected: job %d, list %d, info %d, load %d", n_job, n_list, n_info,
              n_load);

  weir_store_close(c.s);
  weir_subtask_snapshot_free(&c.want);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}
