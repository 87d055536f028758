/* test_store_read.c: unit tests of reading the store back (load.c,
 * verify.c) on real LMDB environments in per-test directories.
 *
 * Covers: damage on disk (a flipped byte in a chunk or in metadata, heavy
 * truncation, scribbled LMDB pages, a file truncated under an open store
 * making the verifying child crash, a broadcast count its chunks do not
 * hold), which must give WEIR_ECORRUPT naming the checkpoint and never
 * crash the test; read-only opens beside a writer
 * (in a forked child: LMDB forbids opening one environment twice in a
 * process).
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
#include "store_helpers.h"
#include "store_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "snapshot/store.h"

TestSuite(store, .init = setup, .fini = teardown);

/* ---- damage ---------------------------------------------------------------------------- */

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

/* Broadcast state: 5 entries, one of them larger than a chunk (the stream
 * goes on over several chunks), an empty key and value among them. */
#define NBC 5
static void snap_bcast(weir_subtask_snapshot *sn) {
  memset(sn, 0, sizeof *sn);
  sn->op = weir_strdup("rules");
  sn->parallelism = 1;
  static const uint32_t klen[NBC] = {1, 0, 3, 2, 2}, vlen[NBC] = {1, 0, 70000, 2, 1};
  sn->n_bcast = NBC;
  sn->bc_klen = weir_malloc(sizeof klen);
  sn->bc_vlen = weir_malloc(sizeof vlen);
  memcpy(sn->bc_klen, klen, sizeof klen);
  memcpy(sn->bc_vlen, vlen, sizeof vlen);
  for (int i = 0; i < NBC; i++) sn->bc_data_len += klen[i] + vlen[i];
  sn->bc_data = weir_malloc(sn->bc_data_len);
  for (uint64_t i = 0; i < sn->bc_data_len; i++) sn->bc_data[i] = (uint8_t)(rnd() >> 13);
}

static uint32_t g_min_reader;
/* For edit_values: notes a checkpoint's min_reader_version, edits nothing. */
static int note_min_reader(uint8_t *v, size_t room) {
  uint32_t len =
      (uint32_t)v[8] | (uint32_t)v[9] << 8 | (uint32_t)v[10] << 16 | (uint32_t)v[11] << 24;
  if (WEIR__ENV_HDR + (size_t)len > room) return 0;
  weir__ckpt_meta m;
  char err[256];
  if (weir__meta_decode(v, WEIR__ENV_HDR + len, 1, NULL, &m, err, sizeof err) == 0) {
    g_min_reader = m.min_reader_version;
    weir__meta_free(&m);
  }
  return 0;
}
/* For edit_values: bcast_entries (field 24: tag bytes 0xc0 0x01) NBC ->
 * NBC + 1 in a checkpoint's metadata, resealed: the metadata still reads,
 * and claims an entry more than its chunks hold. */
static int bcast_count_up(uint8_t *v, size_t room) {
  uint32_t len =
      (uint32_t)v[8] | (uint32_t)v[9] << 8 | (uint32_t)v[10] << 16 | (uint32_t)v[11] << 24;
  if (WEIR__ENV_HDR + (size_t)len > room) return 0;
  uint8_t *p = v + WEIR__ENV_HDR;
  for (uint32_t i = 0; i + 2 < len; i++)
    if (p[i] == 0xc0 && p[i + 1] == 0x01 && p[i + 2] == NBC) {
      p[i + 2] = NBC + 1;
      weir__env_seal(v, WEIR_STORE_FORMAT, WEIR__KIND_META, len);
      return 1;
    }
  return 0;
}

Test(store, broadcast_state_round_trips_and_a_wrong_count_is_refused) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  cr_assert_eq(id, 1);
  weir_subtask_snapshot sn;
  snap_bcast(&sn);
  weir_subtask_snapshot want = sn;
  want.bc_klen = weir_malloc(NBC * sizeof *want.bc_klen);
  want.bc_vlen = weir_malloc(NBC * sizeof *want.bc_vlen);
  want.bc_data = weir_malloc(sn.bc_data_len);
  memcpy(want.bc_klen, sn.bc_klen, NBC * sizeof *want.bc_klen);
  memcpy(want.bc_vlen, sn.bc_vlen, NBC * sizeof *want.bc_vlen);
  memcpy(want.bc_data, sn.bc_data, sn.bc_data_len);
  want.op = NULL;
  write_commit(s, id, &sn, 0);
  cr_assert_eq(weir_store_verify(s, id), 0, "%s", err_of(s));
  weir_store_ckpt_info *info;
  cr_assert_eq(weir_store_info(s, id, &info), 0, "%s", err_of(s));
  cr_assert_eq(info->nsubtasks, 1);
  cr_assert_eq(info->subtasks[0].bcast, NBC);
  cr_assert_geq(info->subtasks[0].chunks, 2, "a stream over several chunks");
  weir_store_ckpt_info_free(info);
  weir_subtask_snapshot got;
  cr_assert_eq(weir_store_load(s, id, "rules", 0, &got), 0, "%s", err_of(s));
  cr_assert_eq(got.n_bcast, NBC);
  cr_assert_eq(got.bc_data_len, want.bc_data_len);
  cr_assert_arr_eq(got.bc_klen, want.bc_klen, NBC * sizeof *got.bc_klen);
  cr_assert_arr_eq(got.bc_vlen, want.bc_vlen, NBC * sizeof *got.bc_vlen);
  cr_assert_eq(memcmp(got.bc_data, want.bc_data, want.bc_data_len), 0);
  weir_subtask_snapshot_free(&got);
  weir_subtask_snapshot_free(&want);
  weir_store_close(s);
  /* An older weir must refuse it rather than drop the broadcast state. */
  g_min_reader = 0;
  edit_values(WEIR__KIND_META, 1, note_min_reader);
  cr_assert_eq(g_min_reader, WEIR_STORE_BROADCAST);

  cr_assert_eq(edit_values(WEIR__KIND_META, 0, bcast_count_up), 1);
  s = open_store(NULL);
  cr_assert_eq(weir_store_load(s, id, "rules", 0, &got), WEIR_ECORRUPT);
  cr_assert(strstr(err_of(s), "broadcast entries"), "%s", err_of(s));
  cr_assert(strstr(err_of(s), "operator \"rules\""), "%s", err_of(s));
  cr_assert_eq(weir_store_verify(s, id), WEIR_ECORRUPT);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
}

/* Namespaced u64 state: NNS entries over several chunks (values of ten
 * varint bytes), the reserved marker UINT64_MAX and 0 as keys and
 * namespaces. */
#define NNS 6000
static void snap_ns(weir_subtask_snapshot *sn) {
  memset(sn, 0, sizeof *sn);
  sn->op = weir_strdup("windows");
  sn->parallelism = 1;
  sn->n_ns = NNS;
  sn->ns_keys = weir_malloc(NNS * sizeof *sn->ns_keys);
  sn->ns_ns = weir_malloc(NNS * sizeof *sn->ns_ns);
  sn->ns_values = weir_malloc(NNS * sizeof *sn->ns_values);
  for (uint64_t i = 0; i < NNS; i++) {
    sn->ns_keys[i] = i < 2 ? (i ? UINT64_MAX : 0) : i / 3;
    sn->ns_ns[i] = i < 2 ? UINT64_MAX - i : i % 3 ? i : UINT64_MAX;
    sn->ns_values[i] = UINT64_MAX - i * 0x9e3779b97f4a7c15ull % 1000;
  }
}

/* For edit_values: ns_entries (field 18: tag bytes 0x90 0x01, then NNS as
 * a two-byte varint) NNS -> NNS + 1 in a checkpoint's metadata, resealed. */
static int ns_count_up(uint8_t *v, size_t room) {
  uint32_t len =
      (uint32_t)v[8] | (uint32_t)v[9] << 8 | (uint32_t)v[10] << 16 | (uint32_t)v[11] << 24;
  if (WEIR__ENV_HDR + (size_t)len > room) return 0;
  uint8_t *p = v + WEIR__ENV_HDR;
  const uint8_t lo = (NNS & 0x7f) | 0x80, hi = NNS >> 7;
  for (uint32_t i = 0; i + 3 < len; i++)
    if (p[i] == 0x90 && p[i + 1] == 0x01 && p[i + 2] == lo && p[i + 3] == hi) {
      p[i + 2] = ((NNS + 1) & 0x7f) | 0x80;
      weir__env_seal(v, WEIR_STORE_FORMAT, WEIR__KIND_META, len);
      return 1;
    }
  return 0;
}

Test(store, ns_state_round_trips_and_a_wrong_count_is_refused) {
  weir_store *s = open_with_job(NULL);
  uint64_t id = next_id(s);
  weir_subtask_snapshot sn;
  snap_ns(&sn);
  weir_subtask_snapshot want;
  snap_ns(&want);
  write_commit(s, id, &sn, 0);
  cr_assert_eq(weir_store_verify(s, id), 0, "%s", err_of(s));
  weir_store_ckpt_info *info;
  cr_assert_eq(weir_store_info(s, id, &info), 0, "%s", err_of(s));
  cr_assert_eq(info->nsubtasks, 1);
  cr_assert_eq(info->subtasks[0].ns, NNS);
  cr_assert_geq(info->subtasks[0].chunks, 3, "entries over several chunks");
  weir_store_ckpt_info_free(info);
  weir_subtask_snapshot got;
  cr_assert_eq(weir_store_load(s, id, "windows", 0, &got), 0, "%s", err_of(s));
  cr_assert_eq(got.n_ns, NNS);
  cr_assert_arr_eq(got.ns_keys, want.ns_keys, NNS * sizeof *got.ns_keys);
  cr_assert_arr_eq(got.ns_ns, want.ns_ns, NNS * sizeof *got.ns_ns);
  cr_assert_arr_eq(got.ns_values, want.ns_values, NNS * sizeof *got.ns_values);
  weir_subtask_snapshot_free(&got);
  weir_subtask_snapshot_free(&want);
  weir_store_close(s);
  /* An older weir must refuse it rather than drop the namespaced state. */
  g_min_reader = 0;
  edit_values(WEIR__KIND_META, 1, note_min_reader);
  cr_assert_eq(g_min_reader, WEIR_STORE_NS);

  cr_assert_eq(edit_values(WEIR__KIND_META, 0, ns_count_up), 1);
  s = open_store(NULL);
  cr_assert_eq(weir_store_load(s, id, "windows", 0, &got), WEIR_ECORRUPT);
  cr_assert(strstr(err_of(s), "namespaced entries"), "%s", err_of(s));
  cr_assert(strstr(err_of(s), "operator \"windows\""), "%s", err_of(s));
  cr_assert_eq(weir_store_verify(s, id), WEIR_ECORRUPT);
  weir_store_close(s);
  cr_assert_eq(th_leak_check(), 0);
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
