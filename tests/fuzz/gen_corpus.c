/* tests/fuzz/gen_corpus.c: writes the decoder fuzzer's seed corpus, valid
 * stored values of every kind in fz_decode's input format (decode_input.h).
 *
 *   fuzz_gen_corpus DIR      (the committed corpus is tests/fuzz/corpus)
 *
 * DESIGN: the values come from the codec's own encoders, so the corpus
 * follows the format; test_decode_regress checks that every corpus input
 * still decodes (a format change that makes the corpus stale fails there,
 * and this program regenerates it). Each value is written twice: checked as
 * stored, and resealed through every decoder (FZ_ALL | FZ_RESEAL), the form
 * in which the fuzzer's mutations reach protobuf-c. A few KB in all: small
 * inputs make the fuzzer fast.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "decode_input.h"
#include "base/alloc.h"

static const char *dir;
static int written;

/* Writes header + value to DIR/name, after checking that it decodes; exits
 * on an I/O error. */
static void put(const char *name, unsigned control, uint64_t ckpt, uint32_t record, uint32_t seq,
                const uint8_t *value, size_t len) {
  uint8_t *in = weir_malloc(FZ_HDR + len);
  fz_header(in, control, ckpt, record, seq);
  memcpy(in + FZ_HDR, value, len);
  if (fz_decode(in, FZ_HDR + len) != 1) {
    fprintf(stderr, "fuzz_gen_corpus: %s does not decode\n", name);
    exit(1);
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(in, 1, FZ_HDR + len, f) != FZ_HDR + len || fclose(f) != 0) {
    fprintf(stderr, "fuzz_gen_corpus: writing %s: %s\n", path, strerror(errno));
    exit(1);
  }
  weir_free(in);
  written++;
}

/* Both forms of one value: `control` as stored, then through every decoder
 * resealed. */
static void put2(const char *name, unsigned control, uint64_t ckpt, uint32_t record, uint32_t seq,
                 const uint8_t *value, size_t len) {
  char name2[256];
  put(name, control, ckpt, record, seq, value, len);
  snprintf(name2, sizeof name2, "%s-all-resealed", name);
  put(name2, FZ_ALL | FZ_RESEAL | (control & FZ_WITH_JOB), ckpt, record, seq, value, len);
}

static void jobs(void) {
  weir__job_rec j = {.instance = 1, .id_limit = 5, .latest = 3, .created_ms = 1700000000000};
  memcpy(j.job_id, FZ_JOB_ID, sizeof FZ_JOB_ID);
  uint8_t *v;
  size_t n;
  weir__job_encode(&j, &v, &n);
  put2("job-running", FZ_JOB, 0, 0, 0, v, n);
  weir_free(v);
  j.instance = 2;
  j.id_limit = 9;
  j.latest = 8;
  j.finished = 1;
  weir__job_encode(&j, &v, &n);
  put2("job-finished", FZ_JOB, 0, 0, 0, v, n);
  weir_free(v);
}

static void metas(void) {
  weir__ckpt_meta m = {.format_version = WEIR_STORE_FORMAT,
                       .min_reader_version = WEIR_STORE_MIN_READER,
                       .instance = 1,
                       .id = 3,
                       .epoch = 1,
                       .trigger_ms = 1700000000000,
                       .complete_ms = 1700000000040,
                       .duration_ms = 40,
                       .alignment_ms = 2};
  memcpy(m.job_id, FZ_JOB_ID, sizeof FZ_JOB_ID);
  uint8_t *v;
  size_t n;
  weir__meta_encode(&m, &v, &n);
  put2("meta-empty", FZ_META | FZ_WITH_JOB, 3, 0, 0, v, n);
  weir_free(v);

  weir_snap_position pos[3] = {
      {.split = 0, .offset = 4096}, {.split = 1, .offset = 77}, {.split = 5, .offset = 1ull << 40}};
  weir__sub_entry subs[4] = {
      /* a source with positions and a blob */
      {.op = "gen",
       .subtask = 0,
       .parallelism = 2,
       .record = 0,
       .blob_chunks = 1,
       .bytes = 90,
       .blob_len = 60,
       .npos = 2,
       .pos = pos},
      {.op = "gen",
       .subtask = 1,
       .parallelism = 2,
       .record = 1,
       .blob_chunks = 1,
       .bytes = 90,
       .blob_len = 60,
       .npos = 1,
       .pos = pos + 2},
      /* keyed u64 state over two chunks */
      {.op = "count",
       .subtask = 0,
       .parallelism = 1,
       .record = 2,
       .u64_chunks = 2,
       .bytes = 1800,
       .u64_entries = 106},
      /* byte-string state */
      {.op = "words",
       .subtask = 0,
       .parallelism = 1,
       .record = 3,
       .bytes_chunks = 2,
       .bytes = 160,
       .bytes_entries = 3,
       .bytes_data_len = 40},
  };
  /* (op, subtask) order: "count" < "gen" < "words". */
  weir__sub_entry sorted[4] = {subs[2], subs[0], subs[1], subs[3]};
  m.id = 8;
  m.instance = 2;
  m.final = 1;
  m.nsub = 4;
  m.subs = sorted;
  for (int i = 0; i < 4; i++) {
    m.total_bytes += sorted[i].bytes;
    m.total_chunks += weir__sub_chunks(&sorted[i]);
  }
  weir__meta_encode(&m, &v, &n);
  put2("meta-4-subtasks", FZ_META | FZ_WITH_JOB, 8, 0, 0, v, n);
  put("meta-4-subtasks-no-job", FZ_META, 8, 0, 0, v, n);
  weir_free(v);

  /* "count" shares the keys of record 1 of checkpoint 5 (format 3). */
  sorted[0].keys_ckpt = 5;
  sorted[0].keys_record = 1;
  sorted[0].bytes = 200;
  m.total_bytes += 200 - 1800;
  m.min_reader_version = WEIR_STORE_SHARED_KEYS;
  weir__meta_encode(&m, &v, &n);
  put2("meta-shared-keys", FZ_META | FZ_WITH_JOB, 8, 0, 0, v, n);
  weir_free(v);

  /* "words" keeps timers and an event-time clock (format 4). */
  sorted[3].timer_chunks = 1;
  sorted[3].timer_entries = 4;
  sorted[3].has_clock = 1;
  sorted[3].clock = 1500;
  sorted[3].bytes += 100;
  m.total_bytes += 100;
  m.total_chunks += 1;
  m.min_reader_version = WEIR_STORE_TIMERS;
  weir__meta_encode(&m, &v, &n);
  put2("meta-timers", FZ_META | FZ_WITH_JOB, 8, 0, 0, v, n);
  weir_free(v);

  /* "words" keeps broadcast state too, after its timers (format 4). */
  sorted[3].bcast_chunks = 2;
  sorted[3].bcast_entries = 3;
  sorted[3].bytes += 120;
  m.total_bytes += 120;
  m.total_chunks += 2;
  m.min_reader_version = WEIR_STORE_BROADCAST;
  weir__meta_encode(&m, &v, &n);
  put2("meta-bcast", FZ_META | FZ_WITH_JOB, 8, 0, 0, v, n);
  weir_free(v);

  /* "words" keeps namespaced u64 state too, after its blob (format 4). */
  sorted[3].ns_chunks = 1;
  sorted[3].ns_entries = 4;
  sorted[3].bytes += 100;
  m.total_bytes += 100;
  m.total_chunks += 1;
  m.min_reader_version = WEIR_STORE_NS;
  weir__meta_encode(&m, &v, &n);
  put2("meta-ns", FZ_META | FZ_WITH_JOB, 8, 0, 0, v, n);
  weir_free(v);
}

static void chunks(void) {
  uint8_t *buf = weir_malloc(WEIR__CHUNK_MAX);
  uint64_t keys[100], values[100];
  for (int i = 0; i < 100; i++) {
    /* In hash order (format 2 on): rank (1000 + 37 i), through the inverse
     * of WEIR_STORE_U64_RANK. */
    keys[i] = (1000 + 37 * (uint64_t)i) * 0xf1de83e19937733dull;
    values[i] = (uint64_t)1 << (i % 64);
  }
  size_t n = weir__u64_chunk_encode((weir__chunk_id){8, 2, 0}, keys, values, 6, buf);
  put2("u64-6", FZ_CHUNK, 8, 2, 0, buf, n);
  n = weir__u64_chunk_encode((weir__chunk_id){8, 2, 1}, keys, values, 100, buf);
  put2("u64-100", FZ_CHUNK, 8, 2, 1, buf, n);
  n = weir__u64_values_encode((weir__chunk_id){9, 2, 0}, values, 70, buf);
  put2("u64-values-70", FZ_CHUNK, 9, 2, 0, buf, n);

  const uint64_t route[3] = {7, 7 << 20, UINT64_MAX};
  const uint32_t klen[3] = {3, 5, 4}, vlen[3] = {5, 0, 23};
  const char data[] = "onetwo3fivesixsevenfour.and.twenty.three";
  n = weir__bytes_chunk_encode((weir__chunk_id){8, 3, 0}, route, klen, vlen, 3,
                               (const uint8_t *)data, 30, buf);
  put2("bytes-3", FZ_CHUNK, 8, 3, 0, buf, n);
  n = weir__bytes_chunk_encode((weir__chunk_id){8, 3, 1}, NULL, NULL, NULL, 0,
                               (const uint8_t *)data + 30, 10, buf);
  put2("bytes-data-only", FZ_CHUNK, 8, 3, 1, buf, n);
  /* Broadcast state: a byte-string stream whose routes are all 0. */
  const uint64_t zero[3] = {0, 0, 0};
  n = weir__bytes_chunk_encode((weir__chunk_id){8, 3, 2}, zero, klen, vlen, 3,
                               (const uint8_t *)data, 40, buf);
  put2("bcast-3", FZ_CHUNK, 8, 3, 2, buf, n);

  uint8_t blob[60];
  for (int i = 0; i < 60; i++) blob[i] = (uint8_t)(i * 7 + 1);
  n = weir__blob_chunk_encode((weir__chunk_id){8, 0, 0}, blob, sizeof blob, buf);
  put2("blob-60", FZ_CHUNK, 8, 0, 0, buf, n);

  /* Timers (format 4): both domains, a negative timestamp. */
  const uint64_t tkeys[4] = {3, 3, 99, UINT64_MAX};
  const int64_t tts[4] = {1000, 2000, -5, INT64_MAX};
  const uint32_t tdom[4] = {0, 0, 1, 0};
  n = weir__timer_chunk_encode((weir__chunk_id){8, 4, 0}, tkeys, tts, tdom, 4, buf);
  put2("timers-4", FZ_CHUNK, 8, 4, 0, buf, n);

  /* Namespaced u64 state (format 4): the reserved marker as key and ns, a
   * key under two namespaces, values of one and of ten varint bytes. */
  const uint64_t nkeys[4] = {3, 3, UINT64_MAX, 0};
  const uint64_t nns[4] = {1000, 2000, 0, UINT64_MAX};
  const uint64_t nvals[4] = {1, 300, UINT64_MAX, 0};
  n = weir__ns_chunk_encode((weir__chunk_id){8, 4, 1}, nkeys, nns, nvals, 4, buf);
  put2("ns-4", FZ_CHUNK, 8, 4, 1, buf, n);
  weir_free(buf);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_gen_corpus DIR\n");
    return 2;
  }
  dir = argv[1];
  jobs();
  metas();
  chunks();
  printf("fuzz_gen_corpus: %d inputs written to %s\n", written, dir);
  return 0;
}
