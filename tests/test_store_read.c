/* test_store_read.c: unit tests of reading the store back (load.c,
 * verify.c) on real LMDB environments in per-test directories.
 *
 * Covers: damage on disk (a flipped byte in a chunk or in metadata, heavy
 * truncation, scribbled LMDB pages, a file truncated under an open store
 * making the verifying child crash), which must give WEIR_ECORRUPT naming
 * the checkpoint and never crash the test; read-only opens beside a writer
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
