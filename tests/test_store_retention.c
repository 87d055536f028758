/* test_store_retention.c: unit tests of what the store keeps and deletes
 * (retention.c, chunker.c's shared keys) on real LMDB environments in
 * per-test directories.
 *
 * Covers: invisibility and collection of uncommitted checkpoints;
 * retention, list and info, the final flag; u64 keys shared with an
 * earlier checkpoint's record while a retained checkpoint names it, and
 * kept when a stored checkpoint's metadata is not this weir's to read.
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
