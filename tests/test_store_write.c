/* test_store_write.c: unit tests of the store's writes and commits
 * (store.c, writer.c, commit.c) on real LMDB environments in per-test
 * directories.
 *
 * Covers: the job record and checkpoint ids (monotonic across close/reopen
 * and across a crash of a writer process, under concurrent callers, from a
 * done() callback); exact round trips of u64 state spanning many chunks,
 * byte-string state (empty and binary keys and values, an entry larger than
 * a chunk), positions and blobs; the chunk size limit; the checks of a
 * write's arguments; a failed subtask write failing its commit (map full,
 * double write); ENOSPC on a tiny tmpfs when the test runs as root on Linux
 * (skipped otherwise). Commits are refused for ids aborted, failed,
 * committed, or begun by an earlier run.
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
