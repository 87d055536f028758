/* test_store_group.c: unit tests of the writer thread's grouping
 * (writer.c) and the view readers (reader.c) on real LMDB environments in
 * per-test directories.
 *
 * Covers: fork() waiting for the writer between requests and for a reader
 * at work; queued subtask writes committed in one transaction; state views
 * read ahead by reader threads, or by the writer without them; a failed
 * group transaction failing every write in it, a failed put only its own;
 * a commit queued right behind its writes sharing their transaction, and
 * failing with them.
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
