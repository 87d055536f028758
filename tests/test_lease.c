/* tests/test_lease.c: owns the tests of the job lease (snapshot/lease.c),
 * the fencing of checkpoint commits (snapshot/writer.c) and the store
 * handover after an expiry takeover (snapshot/handover.c), in process and
 * with real `weir run` processes.
 *
 * DESIGN. The unit tests drive the lease with an injected clock (a number
 * that only the test moves; sleeping moves it) and injected owners whose
 * liveness is a table, so acquisition, renewal, expiry, self-fencing and
 * takeover are checked without waiting; threads that find the lease lost
 * at the same moment must tell the owner once, with the reason. The
 * process tests run the weir
 * binary (WEIR_BINARY) on the counter job with a file sink, as
 * test_recovery does, and check the invariants of docs/testing.md §1 that belong to
 * ownership: at most one owner runs (races of two runs), a SIGKILLed owner
 * is taken over at once, an owner stopped (SIGSTOP) at a random point or
 * inside an LMDB write transaction is taken over after its lease expires by
 * a successor that never hangs, and when it is continued it exits with the
 * fencing message (exit 4) without changing the store; the output is exact
 * in the end. Takeover times are measured (from the interruption until the
 * successor's claim file exists) and printed.
 *
 * The program has its own main(): Criterion --jobs 1, so that the races and
 * the timed scenarios do not compete with each other for the 2 cores.
 * WEIR_TEST_SEED=N replays the random stop points.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crash.h"
#include "helpers.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "snapshot/lease.h"
#include "base/log.h"
#include "snapshot/store.h"

typedef unsigned long long ull;
#define MS 1000000ull

static char *path_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  cr_assert_not_null(p);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

static int exists(const char *dir, const char *name) {
  char *p = path_join(dir, name);
  struct stat st;
  int r = stat(p, &st) == 0;
  free(p);
  return r;
}

/* ---- unit: an injected clock and injected owners ---------------------------- */

typedef struct fclock {
  uint64_t t;
  unsigned calls, jump_at; /* call number jump_at of now() adds `jump` first */
  uint64_t jump;
} fclock;

static uint64_t f_now(void *u) {
  fclock *c = u;
  if (c->jump_at && ++c->calls == c->jump_at) c->t += c->jump;
  return c->t;
}

static void f_sleep(void *u, uint64_t ns) {
  ((fclock *)u)->t += ns;
}

static int alive_tab[16]; /* by fake pid: 1 alive, 0 gone, -1 cannot tell */

static int f_alive(void *u, const weir_lease_owner *o) {
  (void)u;
  return o->pid >= 0 && o->pid < 16 ? alive_tab[o->pid] : 0;
}

static weir_lease_owner fake(int pid, const char *host) {
  weir_lease_owner o;
  memset(&o, 0, sizeof o);
  snprintf(o.host, sizeof o.host, "%s", host);
  snprintf(o.boot, sizeof o.boot, "boot-1");
  o.pid = pid;
  o.start = 1000u + (uint64_t)pid;
  alive_tab[pid] = 1;
  return o;
}

typedef struct lost_rec {
  int calls, err;
  char msg[512];
} lost_rec;

static void on_lost(void *user, int err, const char *msg) {
  lost_rec *r = user;
  r->calls++;
  r->err = err;
  snprintf(r->msg, sizeof r->msg, "%s", msg);
}

static int acq(weir_lease **l, const char *dir, fclock *c, const weir_lease_owner *who, uint32_t ms,
               int wait, lost_rec *lost, char *err, size_t errlen) {
  weir_lease_clock clk = {f_now, f_sleep, c};
  weir_lease_opts o = {.lease_ms = ms,
                       .wait = wait,
                       .clock = &clk,
                       .as = who,
                       .alive = f_alive,
                       .lost = lost ? on_lost : NULL,
                       .lost_user = lost};
  return weir_lease_acquire(l, dir, &o, err, errlen);
}

static char *g_dir;
static void setup(void) {
  g_dir = th_tmpdir();
  cr_assert_not_null(g_dir);
  memset(alive_tab, 0, sizeof alive_tab);
}
static void teardown(void) {
  th_rmrf(g_dir);
  free(g_dir);
}

TestSuite(lease, .init = setup, .fini = teardown, .timeout = 60);

Test(lease, first_acquisition_is_epoch_1) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h");
  weir_lease *l = NULL;
  char err[1024];
  cr_assert_eq(acq(&l, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_lease_epoch(l), 1);
  cr_assert_eq(weir_lease_how(l), WEIR_LEASE_FIRST);
  cr_assert(exists(g_dir, "lease/epoch.1") && exists(g_dir, "lease/hb.1"));
  cr_assert_eq(weir_lease_check(l), 0);
  weir_lease_state st;
  cr_assert_eq(weir_lease_read(g_dir, &st), 1);
  cr_assert_eq(st.epoch, 1);
  cr_assert_eq(st.owner.pid, 1);
  cr_assert_eq(st.released, 0);
  weir_lease_close(l, 1);
  cr_assert_eq(weir_lease_read(g_dir, &st), 1);
  cr_assert_eq(st.released, 1);
}

Test(lease, live_owner_is_refused_with_owner_and_epoch) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h"), b = fake(2, "h");
  weir_lease *la = NULL, *lb = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  c.t += 700 * MS; /* within the lease */
  int rc = acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err);
  cr_assert_eq(rc, WEIR_EOWNED, "%d %s", rc, err);
  cr_assert_null(lb);
  cr_assert(strstr(err, "epoch 1") && strstr(err, "pid 1 on host h") && strstr(err, "--wait"), "%s",
            err);
  cr_assert_eq(weir_lease_check(la), 0);
  weir_lease_close(la, 0);
}

Test(lease, gone_owner_is_taken_over_at_once) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h"), b = fake(2, "h");
  weir_lease *la = NULL, *lb = NULL;
  lost_rec lost = {0};
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, &lost, err, sizeof err), 0);
  alive_tab[1] = 0; /* its process is gone (killed, or its pid reused) */
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(c.t, 5 * MS, "no waiting for a gone owner");
  cr_assert_eq(weir_lease_epoch(lb), 2);
  cr_assert_eq(weir_lease_how(lb), WEIR_LEASE_GONE);
  cr_assert_eq(weir_lease_previous(lb)->pid, 1);
  /* The old owner, were it to come back, is fenced, and told so once. */
  cr_assert_eq(weir_lease_check(la), WEIR_EFENCED);
  cr_assert_eq(weir_lease_renew(la), WEIR_EFENCED);
  cr_assert_eq(weir_lease_check(la), WEIR_EFENCED);
  cr_assert_eq(lost.calls, 1);
  cr_assert_eq(lost.err, WEIR_EFENCED);
  cr_assert(strstr(lost.msg, "epoch 1 was taken over by epoch 2") && strstr(lost.msg, "pid 2"),
            "%s", lost.msg);
  cr_assert_eq(weir_lease_check(lb), 0);
  weir_lease_close(la, 1); /* not the owner any more: releases nothing */
  weir_lease_state st;
  cr_assert_eq(weir_lease_read(g_dir, &st), 1);
  cr_assert_eq(st.epoch, 2);
  cr_assert_eq(st.released, 0);
  weir_lease_close(lb, 1);
}

Test(lease, released_lease_is_taken_at_once) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h"), b = fake(2, "h");
  weir_lease *la = NULL, *lb = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  weir_lease_close(la, 1); /* alive, but released */
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_lease_how(lb), WEIR_LEASE_RELEASED);
  cr_assert_eq(weir_lease_epoch(lb), 2);
  cr_assert_eq(c.t, 5 * MS);
  weir_lease_close(lb, 1);
}

Test(lease, wait_takes_over_exactly_at_expiry) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h"), b = fake(2, "h");
  weir_lease *la = NULL, *lb = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  c.t += 300 * MS;
  cr_assert_eq(weir_lease_renew(la), 0); /* valid until 305 + 1000 */
  /* A alive, stopped from now on; B waits (its sleeps move the clock). */
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 200, 1, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_lease_how(lb), WEIR_LEASE_EXPIRED);
  cr_assert_eq(c.t, 1305 * MS, "took over at %llu ms, not at the expiry (1305 ms)",
               (ull)(c.t / MS));
  /* A, continued: its own clock says its lease ended; and it was taken over. */
  cr_assert_eq(weir_lease_check(la), WEIR_EFENCED);
  weir_lease_close(la, 1);
  weir_lease_close(lb, 1);
}

Test(lease, expired_lease_is_taken_without_wait) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h"), b = fake(2, "h");
  weir_lease *la = NULL, *lb = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  c.t += 999 * MS;
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), WEIR_EOWNED);
  c.t += 1 * MS;
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_lease_how(lb), WEIR_LEASE_EXPIRED);
  weir_lease_close(la, 0);
  weir_lease_close(lb, 1);
}

/* Threads that find the lease lost at the same moment: the owner is told
 * once, and with the reason (a second finder used to tell with the message
 * still empty, and the CLI, which exits at once, printed a bare "weir: "). */
typedef struct finder {
  weir_lease *l;
  pthread_barrier_t *go;
  int rc;
} finder;

static void *race_check(void *arg) {
  finder *r = arg;
  pthread_barrier_wait(r->go);
  r->rc = weir_lease_check(r->l);
  return NULL;
}

static void on_lost_racing(void *user, int err, const char *msg) {
  lost_rec *r = user;
  __atomic_add_fetch(&r->calls, 1, __ATOMIC_SEQ_CST);
  r->err = err;
  if (!strstr(msg, "lost ownership")) snprintf(r->msg, sizeof r->msg, "[%s]", msg);
}

Test(lease, concurrent_finders_tell_once_with_the_reason) {
  enum { THREADS = 4, ROUNDS = 200 };
  weir_log_set_level(WEIR_LOG_ERROR); /* one warning a round otherwise */
  for (int round = 0; round < ROUNDS; round++) {
    char *dir = th_tmpdir();
    cr_assert_not_null(dir);
    fclock c = {.t = 5 * MS};
    weir_lease_owner a = fake(1, "h");
    lost_rec lost = {0};
    weir_lease_clock clk = {f_now, f_sleep, &c};
    weir_lease_opts o = {.lease_ms = 1000,
                         .clock = &clk,
                         .as = &a,
                         .alive = f_alive,
                         .lost = on_lost_racing,
                         .lost_user = &lost};
    weir_lease *l = NULL;
    char err[1024];
    cr_assert_eq(weir_lease_acquire(&l, dir, &o, err, sizeof err), 0, "%s", err);
    c.t += 2000 * MS; /* expired: every check finds it lost */
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    finder r[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
      r[i] = (finder){l, &go, 0};
      cr_assert_eq(pthread_create(&th[i], NULL, race_check, &r[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
      pthread_join(th[i], NULL);
      cr_assert_eq(r[i].rc, WEIR_EFENCED);
    }
    pthread_barrier_destroy(&go);
    cr_assert_eq(lost.calls, 1, "round %d: told %d times", round, lost.calls);
    cr_assert_eq(lost.msg[0], 0, "round %d: told without the reason: %s", round, lost.msg);
    weir_lease_close(l, 0);
    th_rmrf(dir);
    free(dir);
  }
  weir_log_set_level(WEIR_LOG_INFO);
}

/* A clock that, once armed, stalls the heartbeat thread's next reading for
 * 200 ms (as if the heartbeat were inside an allocation), noting when it
 * starts and ends. */
typedef struct stall_clock {
  _Atomic int armed, stalling, done;
} stall_clock;

static uint64_t stall_now(void *user) {
  stall_clock *c = user;
  int one = 1;
  if (atomic_load(&c->armed) && atomic_compare_exchange_strong(&c->armed, &one, 0)) {
    atomic_store(&c->stalling, 1);
    weir_sleep_us(200000);
    atomic_store(&c->done, 1);
  }
  return weir_clock_mono_ns();
}

static void stall_sleep(void *user, uint64_t ns) {
  (void)user;
  weir_sleep_us(ns / 1000);
}

/* A fork while the heartbeat thread is at work waits until it is done: the
 * child gets a copy of the heap between beats (a child that allocates
 * would otherwise wait forever under allocators whose locks stay taken in
 * the copy, as the store's probe child did under AddressSanitizer). */
Test(lease, fork_waits_for_the_heartbeat_between_beats) {
  stall_clock c = {0};
  weir_lease_clock clk = {stall_now, stall_sleep, &c};
  weir_lease_opts o = {.lease_ms = 1500, .clock = &clk}; /* a beat every 500 ms */
  weir_lease *l = NULL;
  char err[1024];
  cr_assert_eq(weir_lease_acquire(&l, g_dir, &o, err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_lease_start(l), 0);
  for (int round = 0; round < 3; round++) {
    atomic_store(&c.stalling, 0);
    atomic_store(&c.done, 0);
    atomic_store(&c.armed, 1);
    for (int ms = 0; !atomic_load(&c.stalling); ms++) {
      cr_assert_lt(ms, 5000, "round %d: the heartbeat did not read its clock in 5 s", round);
      weir_sleep_us(1000);
    }
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) _exit(atomic_load(&c.done) ? 0 : 1);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "round %d: the child was forked while the heartbeat was at work", round);
  }
  weir_lease_close(l, 1);
}

/* A child forked while the guard is in use can fork in its turn (a job
 * process forked by a test or a supervisor forks its store's probe
 * children): the child's copy of the guard is free. */
Test(lease, a_forked_child_can_fork_again) {
  weir_fork_hold(); /* registers the guard's fork handlers */
  weir_fork_release();
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    alarm(10); /* a child that hangs dies of SIGALRM */
    for (int i = 0; i < 3; i++) {
      pid_t g = fork();
      if (g < 0) _exit(2);
      if (g == 0) _exit(0);
      int st = 0;
      if (waitpid(g, &st, 0) != g || !WIFEXITED(st) || WEXITSTATUS(st) != 0) _exit(3);
      weir_fork_hold(); /* and the guard still works in the child */
      weir_fork_release();
    }
    _exit(0);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(!WIFSIGNALED(st), "the child's fork hung (signal %d)", WTERMSIG(st));
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
}

/* A thread that waits on its latch until the test lets it end. */
typedef struct latch {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open;
} latch;

static void *wait_latch(void *p) {
  latch *g = p;
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* A store opened right after its lease's heartbeat started forks its
 * probe while that thread may still be starting: under AddressSanitizer a
 * thread's start-up allocates under the allocator's locks, and a child
 * forked then hangs in its allocations. With pthread_create alone, about
 * 1 child in 150 of this pattern (new threads kept alive, a child making
 * allocations of every size up to 5 MB) hung; weir_thread_start returns
 * after the start-up, and none may. Meaningful in the ASan build (where
 * it can fail); elsewhere the allocator is fork-safe anyway. */
Test(lease, a_thread_started_is_past_its_start_up_at_a_fork, .timeout = 300) {
  enum { ROUNDS = 300 };
  static pthread_t th[ROUNDS];
  latch g = {.open = 0};
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, NULL);
  int hung = 0;
  for (int round = 0; round < ROUNDS; round++) {
    cr_assert_eq(weir_thread_start(&th[round], wait_latch, &g), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
      alarm(5); /* a child that hangs dies of SIGALRM */
      for (size_t k = 0; k < 100; k++) free(malloc(100 + k * 50000));
      _exit(0);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    hung += WIFSIGNALED(st);
  }
  pthread_mutex_lock(&g.mu);
  g.open = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  for (int i = 0; i < ROUNDS; i++) pthread_join(th[i], NULL);
  pthread_cond_destroy(&g.cv);
  pthread_mutex_destroy(&g.mu);
  cr_assert_eq(hung, 0, "%d of %d children forked after weir_thread_start hung", hung, ROUNDS);
}

Test(lease, renewal_extends_and_self_fencing_keeps_a_margin) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h"), b = fake(2, "h");
  weir_lease *la = NULL, *lb = NULL;
  lost_rec lost = {0};
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, &lost, err, sizeof err), 0);
  for (int i = 0; i < 5; i++) { /* beats every third of the lease */
    c.t += 333 * MS;
    cr_assert_eq(weir_lease_renew(la), 0);
    cr_assert_eq(weir_lease_check(la), 0);
  }
  uint64_t last = c.t; /* valid until last + 1000 ms; margin 250 ms */
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), WEIR_EOWNED);
  c.t = last + 749 * MS;
  cr_assert_eq(weir_lease_check(la), 0);
  c.t = last + 750 * MS; /* no renewal since: stop before anyone may take over */
  cr_assert_eq(weir_lease_check(la), WEIR_EFENCED);
  cr_assert_eq(lost.calls, 1);
  cr_assert(strstr(lost.msg, "could not renew its lease in time"), "%s", lost.msg);
  cr_assert_eq(weir_lease_renew(la), WEIR_EFENCED, "a lost lease is never renewed again");
  /* Nobody may take over before the expiry itself. */
  c.t = last + 999 * MS;
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), WEIR_EOWNED);
  c.t = last + 1000 * MS;
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), 0, "%s", err);
  weir_lease_close(la, 1);
  weir_lease_close(lb, 1);
}

Test(lease, slow_renewal_does_not_count) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h");
  weir_lease *la = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  /* valid until 1005 ms. A renewal at 305 ms whose write takes 300 ms (more
   * than the 250 ms margin): a successor may have judged by the old
   * heartbeat, so it must not extend the lease. */
  c.t = 305 * MS;
  c.calls = 0;
  c.jump_at = 2; /* the second clock read of the renewal: after the write */
  c.jump = 300 * MS;
  cr_assert_eq(weir_lease_renew(la), 0);
  c.jump_at = 0;
  c.t = 760 * MS;
  cr_assert_eq(weir_lease_check(la), WEIR_EFENCED, "the slow renewal extended the lease");
  weir_lease_close(la, 0);
}

Test(lease, another_host_is_taken_over_after_a_lease_without_heartbeat) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "elsewhere"), b = fake(2, "h");
  alive_tab[1] = -1; /* liveness cannot be told from here */
  weir_lease *la = NULL, *lb = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  /* Its monotonic clock is not ours: even long after, B does not guess. */
  c.t += 3600 * 1000 * MS;
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), WEIR_EOWNED);
  cr_assert(strstr(err, "another host"), "%s", err);
  uint64_t t0 = c.t;
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 1, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_lease_how(lb), WEIR_LEASE_EXPIRED);
  cr_assert_geq(c.t - t0, 1000 * MS, "took over after %llu ms of watching", (ull)((c.t - t0) / MS));
  weir_lease_close(la, 0);
  weir_lease_close(lb, 1);
}

Test(lease, epochs_only_grow_and_old_claims_are_cleaned_in_order) {
  fclock c = {.t = 5 * MS};
  weir_lease *first = NULL, *l = NULL;
  char err[1024];
  weir_lease_owner o = fake(1, "h");
  cr_assert_eq(acq(&first, g_dir, &c, &o, 1000, 0, NULL, err, sizeof err), 0);
  alive_tab[1] = 0;
  for (int i = 2; i <= 40; i++) {
    o = fake(2 + (i % 2), "h");
    cr_assert_eq(acq(&l, g_dir, &c, &o, 1000, 0, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(weir_lease_epoch(l), (uint64_t)i);
    weir_lease_close(l, i % 3 == 0); /* released or left to die */
    alive_tab[o.pid] = 0;
  }
  /* epoch 1's claim is long gone: its owner is still fenced. */
  cr_assert_not(exists(g_dir, "lease/epoch.1"));
  cr_assert_not(exists(g_dir, "lease/epoch.2"));
  cr_assert(exists(g_dir, "lease/epoch.40"));
  cr_assert_eq(weir_lease_check(first), WEIR_EFENCED);
  weir_lease_close(first, 1);
  DIR *d = opendir(g_dir);
  cr_assert_not_null(d);
  closedir(d);
}

/* Threads race for one lease (all alive, distinct owners): exactly one wins
 * every round; claims are atomic even within one process. */
/* A start gate (pthread barriers do not exist on macOS). */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiting, n;
} gate;

static void gate_wait(gate *g) {
  pthread_mutex_lock(&g->mu);
  if (++g->waiting == g->n)
    pthread_cond_broadcast(&g->cv);
  else
    while (g->waiting < g->n) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

typedef struct racer {
  gate *go;
  const char *dir;
  weir_lease_owner who;
  int rc;
  weir_lease *l;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  weir_lease_opts o = {.lease_ms = 60000, .as = &r->who, .alive = f_alive};
  char err[512];
  gate_wait(r->go);
  r->rc = weir_lease_acquire(&r->l, r->dir, &o, err, sizeof err);
  return NULL;
}

Test(lease, threads_racing_get_one_owner) {
  enum { N = 6 };
  for (int round = 0; round < 20; round++) {
    gate go = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, N};
    racer r[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
      r[i] = (racer){.go = &go, .dir = g_dir, .who = fake(1 + i, "h")};
      pthread_create(&t[i], NULL, race, &r[i]);
    }
    int won = 0;
    for (int i = 0; i < N; i++) {
      pthread_join(t[i], NULL);
      if (r[i].rc == 0)
        won++;
      else
        cr_assert_eq(r[i].rc, WEIR_EOWNED, "round %d: %d", round, r[i].rc);
    }
    cr_assert_eq(won, 1, "round %d: %d owners", round, won);
    for (int i = 0; i < N; i++) {
      if (r[i].l) cr_assert_eq(weir_lease_epoch(r[i].l), (uint64_t)round + 1);
      weir_lease_close(r[i].l, 1);
    }
  }
}

/* ---- unit: fencing of the store ------------------------------------------------- */

typedef struct seen {
  int calls, status;
} seen;

static void on_done(void *user, int status, const weir_store_written *w) {
  (void)w;
  seen *r = user;
  r->calls++;
  r->status = status;
}

static void one_snap(weir_subtask_snapshot *sn) {
  memset(sn, 0, sizeof *sn);
  sn->op = weir_strdup("count");
  sn->parallelism = 1;
  sn->n_u64 = 3;
  sn->u64_keys = weir_malloc(3 * 8);
  sn->u64_values = weir_malloc(3 * 8);
  for (int i = 0; i < 3; i++) {
    sn->u64_keys[i] = (uint64_t)i + 1;
    sn->u64_values[i] = (uint64_t)i * 10;
  }
}

/* Writes and commits one checkpoint; returns the commit's status. */
static int checkpoint(weir_store *s, weir_lease *l, uint64_t *idp) {
  uint64_t id;
  cr_assert_eq(weir_store_next_id(s, &id), 0);
  weir_subtask_snapshot sn;
  one_snap(&sn);
  seen w = {0}, c = {0};
  cr_assert_eq(weir_store_write_subtask(s, id, &sn, on_done, &w), 0);
  weir_store_commit_info ci = {.id = id, .epoch = weir_lease_epoch(l), .subtasks = 1};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  cr_assert_eq(c.calls, 1);
  if (idp) *idp = id;
  return c.status;
}

Test(lease, commits_record_the_epoch_and_a_stale_owner_commits_nothing) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h"), b = fake(2, "h");
  weir_lease *la = NULL, *lb = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  weir_store_opts so = {.lease = la};
  weir_store *s = NULL;
  cr_assert_eq(weir_store_open(&s, g_dir, &so), 0);
  weir_store_job j;
  cr_assert_eq(weir_store_job_begin(s, 0, &j), 0);
  uint64_t id1;
  cr_assert_eq(checkpoint(s, la, &id1), 0);
  /* A stops; B takes over (A gone as far as B can tell: a pid reused). */
  alive_tab[1] = 0;
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), 0);
  uint64_t id2;
  int rc = checkpoint(s, la, &id2);
  cr_assert_eq(rc, WEIR_EFENCED, "stale commit: %d", rc);
  char msg[1024];
  cr_assert(strstr(weir_lease_error(la, msg, sizeof msg), "taken over by epoch 2"), "%s", msg);
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 1);
  cr_assert_eq(list[0].id, id1);
  cr_assert_eq(list[0].epoch, 1);
  weir_free(list);
  weir_store_close(s);
  weir_lease_close(la, 1);
  weir_lease_close(lb, 1);
}

Test(lease, a_self_fenced_owner_commits_nothing) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h");
  weir_lease *la = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  weir_store_opts so = {.lease = la};
  weir_store *s = NULL;
  cr_assert_eq(weir_store_open(&s, g_dir, &so), 0);
  weir_store_job j;
  cr_assert_eq(weir_store_job_begin(s, 0, &j), 0);
  cr_assert_eq(checkpoint(s, la, NULL), 0);
  c.t += 800 * MS; /* past expiry - margin, never renewed */
  cr_assert_eq(checkpoint(s, la, NULL), WEIR_EFENCED);
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 1);
  weir_free(list);
  weir_store_close(s);
  weir_lease_close(la, 1);
}

/* ---- unit: the handover, against a process stopped inside a write txn ----------- */

/* A child that opens the store's environment, begins a write transaction,
 * and stops itself there: it holds LMDB's writer lock until killed. */
static pid_t stop_inside_write_txn(const char *env_dir) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    MDB_env *env;
    MDB_txn *txn;
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
        mdb_env_set_mapsize(env, 1ull << 30) || mdb_env_open(env, env_dir, MDB_NOTLS, 0644) ||
        mdb_txn_begin(env, NULL, 0, &txn))
      _exit(3);
    raise(SIGSTOP);
    _exit(0);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, WUNTRACED), pid);
  cr_assert(WIFSTOPPED(st), "the child did not stop inside its write transaction");
  return pid;
}

/* Can a write transaction begin on env_dir within 1 s? (In a child, which
 * is killed if it hangs.) */
static int can_write(const char *env_dir) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    alarm(1);
    MDB_env *env;
    MDB_txn *txn;
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
        mdb_env_set_mapsize(env, 1ull << 30) || mdb_env_open(env, env_dir, MDB_NOTLS, 0644) ||
        mdb_txn_begin(env, NULL, 0, &txn))
      _exit(3);
    mdb_txn_abort(txn);
    _exit(0);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

Test(lease, handover_never_waits_for_a_writer_lock_held_by_a_stopped_process) {
  fclock c = {.t = 5 * MS};
  weir_lease_owner a = fake(1, "h"), b = fake(2, "h");
  weir_lease *la = NULL, *lb = NULL;
  char err[1024];
  cr_assert_eq(acq(&la, g_dir, &c, &a, 1000, 0, NULL, err, sizeof err), 0);
  weir_store_opts so = {.lease = la};
  weir_store *s = NULL;
  cr_assert_eq(weir_store_open(&s, g_dir, &so), 0);
  weir_store_job j;
  cr_assert_eq(weir_store_job_begin(s, 0, &j), 0);
  uint64_t ids[3];
  for (int i = 0; i < 3; i++) cr_assert_eq(checkpoint(s, la, &ids[i]), 0);
  weir_store_close(s);

  char *env = path_join(g_dir, "store");
  pid_t stopped = stop_inside_write_txn(env);
  cr_assert_not(can_write(env), "the trap did not arm: a writer could still begin");

  /* B takes over by expiry and continues in a fresh environment. */
  c.t += 2000 * MS;
  cr_assert_eq(acq(&lb, g_dir, &c, &b, 1000, 0, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_lease_how(lb), WEIR_LEASE_EXPIRED);
  cr_assert_eq(weir_store_handover(g_dir, weir_lease_epoch(lb), err, sizeof err), 0, "%s", err);
  cr_assert(exists(g_dir, "store.2/ready"), "the new environment is not marked complete");
  cr_assert_not(exists(g_dir, "store/data.mdb"), "the old environment is left behind");

  so.lease = lb;
  cr_assert_eq(weir_store_open(&s, g_dir, &so), 0);
  weir_store_job j2;
  cr_assert_eq(weir_store_job_begin(s, 0, &j2), 0, "the successor cannot write");
  cr_assert_str_eq(j2.job_id, j.job_id);
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 3);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(list[i].id, ids[i]);
    cr_assert_eq(list[i].epoch, 1);
    cr_assert_eq(weir_store_verify(s, ids[i]), 0);
  }
  weir_free(list);
  uint64_t id4;
  cr_assert_eq(checkpoint(s, lb, &id4), 0);
  cr_assert_gt(id4, ids[2], "ids continue across the handover");
  weir_store_close(s);

  kill(stopped, SIGKILL);
  waitpid(stopped, NULL, 0);
  free(env);
  weir_lease_close(la, 0);
  weir_lease_close(lb, 1);
}

/* A handover that was stopped and completes after a later one (its owner
 * is fenced by then) never makes its environment the store. */
Test(lease, a_late_handover_never_wins) {
  weir_store *s = NULL;
  cr_assert_eq(weir_store_open(&s, g_dir, NULL), 0);
  weir_store_job j;
  cr_assert_eq(weir_store_job_begin(s, 0, &j), 0);
  cr_assert_eq(checkpoint(s, NULL, NULL), 0);
  weir_store_close(s);
  char err[512];
  cr_assert_eq(weir_store_handover(g_dir, 3, err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_store_handover(g_dir, 2, err, sizeof err), 0, "%s", err);
  cr_assert(exists(g_dir, "store.3/ready"));
  cr_assert_not(exists(g_dir, "store/data.mdb"));
  weir_store_opts ro = {.read_only = 1};
  cr_assert_eq(weir_store_open(&s, g_dir, &ro), 0);
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  cr_assert_eq(weir_store_list(s, &list, &n), 0);
  cr_assert_eq(n, 1);
  weir_free(list);
  weir_store_close(s);
  cr_assert_eq(weir_store_handover(g_dir, 4, err, sizeof err), 0, "%s", err);
  cr_assert(exists(g_dir, "store.4/ready"));
  cr_assert_not(exists(g_dir, "store.3"), "older environments are deleted");
  cr_assert_not(exists(g_dir, "store.2"));
}

Test(lease, real_process_identity) {
  weir_lease_owner me;
  cr_assert_eq(weir_lease_self(&me), 0);
  cr_assert_eq(me.pid, (int64_t)getpid());
  cr_assert_eq(weir_lease_owner_alive(&me), 1);
  weir_lease_owner reused = me;
  reused.start += 1; /* the same pid, another process */
#if defined(__linux__) || defined(__APPLE__)
  cr_assert_eq(weir_lease_owner_alive(&reused), 0);
#endif
  pid_t child = fork();
  if (child == 0) _exit(0);
  int st;
  waitpid(child, &st, 0);
  weir_lease_owner dead = me;
  dead.pid = child;
  cr_assert_eq(weir_lease_owner_alive(&dead), 0);
  if (me.boot[0]) {
    weir_lease_owner rebooted = me;
    snprintf(rebooted.boot, sizeof rebooted.boot, "another-boot");
    cr_assert_eq(weir_lease_owner_alive(&rebooted), 0);
  }
  weir_lease_owner other = me;
  other.host[0] = other.host[0] == 'x' ? 'y' : 'x'; /* another host */
  cr_assert_eq(weir_lease_owner_alive(&other), -1);
}

/* ---- processes ----------------------------------------------------------------- */

#define RECORDS 300000u
#define KEYS 300u
#define RUN_TIMEOUT_MS 60000
/* The lease of the stop scenarios: short, but with a margin (a quarter)
 * that a loaded 2-core machine running sanitizer builds still keeps. */
#define LEASE_MS "2000"

static double mono_msf(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* The counter job with the file sink, checkpoints every 30 ms, quiet. */
static crash_job *pjob_new(uint64_t records, const char *rate) {
  crash_job *j = crash_new("counter", 0);
  crash_counter(j, records, KEYS, rate);
  crash_arg(j, "--quiet", NULL);
  j->interval = "30";
  j->env[0] = "WEIR_LOG=info";
  return j;
}

/* Starts the job (extra arguments NULL terminated) in a process group of
 * its own, stderr into <dir>/log.<n> (*log = n, the run's number), with
 * `failpoints` armed. */
static pid_t spawn(crash_job *j, const char *failpoints, int *log, ...) {
  CRASH_VA_ARRAY(extra, log);
  char logpath[700];
  *log = j->runs + 1;
  snprintf(logpath, sizeof logpath, "%s/log.%d", j->dir, *log);
  return crash_spawnv(j, failpoints, logpath, extra);
}

static char *log_of(crash_job *j, int n) {
  char name[32];
  snprintf(name, sizeof name, "log.%d", n);
  char *p = path_join(j->dir, name);
  char *t = th_read_file(p, NULL);
  free(p);
  return t ? t : strdup("");
}

/* Waits until log n of j holds `what`. */
static void wait_log(crash_job *j, int n, const char *what, int timeout_ms) {
  int64_t end = th_mono_ms() + timeout_ms;
  for (;;) {
    char *t = log_of(j, n);
    int found = strstr(t, what) != NULL;
    free(t);
    if (found) return;
    cr_assert_lt(th_mono_ms(), end, "log %d never said '%s'", n, what);
    th_sleep_ms(2);
  }
}

/* Waits until <state>/lease/epoch.<n> exists; returns the time it was seen
 * (ms, monotonic) or fails the test after timeout_ms. */
static double wait_claim(crash_job *j, uint64_t n, int timeout_ms) {
  char name[64];
  snprintf(name, sizeof name, "lease/epoch.%llu", (ull)n);
  double end = mono_msf() + timeout_ms;
  for (;;) {
    if (exists(j->state, name)) return mono_msf();
    cr_assert_lt(mono_msf(), end, "epoch %llu was never claimed in %s", (ull)n, j->state);
    struct timespec ts = {0, 200000L};
    nanosleep(&ts, NULL);
  }
}

/* The listing: ids and epochs of the retained checkpoints (from `weir
 * checkpoints --json`), as one string for comparisons. */
static char *listing(crash_job *j) {
  const char *argv[] = {WEIR_BINARY, "checkpoints", "--state-dir", j->state, "--json", NULL};
  char *out = NULL, *err = NULL;
  int rc = th_run(argv, NULL, &out, &err, 60);
  cr_assert_eq(rc, 0, "weir checkpoints: %d %s", rc, err);
  size_t cap = 4096, len = 0;
  char *s = calloc(1, cap);
  for (const char *p = strstr(out, "{\"id\": "); p; p = strstr(p + 1, "{\"id\": ")) {
    ull id, ep;
    const char *e = strstr(p, "\"epoch\": ");
    cr_assert(e && sscanf(p, "{\"id\": %llu", &id) == 1 && sscanf(e, "\"epoch\": %llu", &ep) == 1,
              "bad listing: %s", out);
    len += (size_t)snprintf(s + len, cap - len, "%llu@%llu ", id, ep);
    cr_assert_lt(len, cap - 64);
  }
  free(out);
  free(err);
  return s;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  fprintf(stderr, "lease: takeover %s: min %.1f ms, median %.1f ms, max %.1f ms (n = %d)\n", what,
          v[0], n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[n - 1], n);
}

static uint64_t g_rng;
static uint64_t rnd(void) {
  return th_splitmix64(&g_rng);
}

static void seed(const char *test) {
  const char *s = getenv("WEIR_TEST_SEED");
  g_rng = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
  fprintf(stderr, "lease::%s: WEIR_TEST_SEED=%llu\n", test, (ull)g_rng);
}

TestSuite(owners, .timeout = 400, .fini = crash_fini);

/* 50 races of two runs on one state directory: exactly one runs, the other
 * exits 4 naming the owner and its epoch, and touches nothing. The winner
 * holds still right after taking the lease (failpoint lease.acquired=pause,
 * a lease far longer than the round), so the loser meets a live owner
 * however late it starts on a loaded machine; then the winner is continued
 * and completes. (Without the pause a second run that started only after a
 * short first one ended took over the released lease: no race at all.) */
Test(owners, fifty_races_one_owner_each) {
  crash_job *j = pjob_new(60000, "100000");
  snprintf(j->sink, sizeof j->sink, "null");
  for (int round = 0; round < 50; round++) {
    int la, lb;
    const char *fp = "lease.acquired=pause";
    pid_t a = spawn(j, fp, &la, "--fresh", "--lease-ms", "60000", NULL);
    pid_t b = spawn(j, fp, &lb, "--fresh", "--lease-ms", "60000", NULL);
    int ra = crash_wait(a, RUN_TIMEOUT_MS, 1), rb = crash_wait(b, RUN_TIMEOUT_MS, 1);
    char *ea = log_of(j, la), *eb = log_of(j, lb);
    cr_assert(
        (ra == 1000 && rb == 4) || (ra == 4 && rb == 1000),
        "round %d: %d and %d (one must hold the lease, stopped, the other exit 4)\n%s\n---\n%s",
        round, ra, rb, ea, eb);
    pid_t winner = ra == 1000 ? a : b;
    const char *loser = ra == 4 ? ea : eb;
    cr_assert(strstr(loser, "held by a live owner: epoch ") && strstr(loser, "pid "),
              "round %d: the refusal does not name the owner: %s", round, loser);
    kill(-winner, SIGCONT);
    int rw = crash_wait(winner, RUN_TIMEOUT_MS, 0);
    cr_assert_eq(rw, 0, "round %d: the owner exited %d after it was continued", round, rw);
    free(ea);
    free(eb);
  }
  weir_lease_state st;
  cr_assert_eq(weir_lease_read(j->state, &st), 1);
  cr_assert_eq(st.epoch, 50, "one epoch per round");
  cr_assert(st.released);
  crash_free(j);
}

/* SIGKILL the owner at random times: each successor takes over at once and
 * the output is exact in the end. */
Test(owners, killed_owner_is_taken_over_at_once) {
  seed("killed_owner_is_taken_over_at_once");
  crash_job *j = pjob_new(RECORDS, "150000");
  double took[6];
  int n = 0, log;
  pid_t p = spawn(j, NULL, &log, NULL);
  for (uint64_t epoch = 1; n < 6; epoch++) {
    wait_claim(j, epoch, RUN_TIMEOUT_MS);
    th_sleep_ms(100 + (int)(rnd() % 300));
    kill(-p, SIGKILL);
    int rc = crash_wait(p, RUN_TIMEOUT_MS, 0);
    if (rc != 128 + SIGKILL) { /* it ended first: run again */
      cr_assert_eq(rc, 0, "exit %d", rc);
      break;
    }
    double t0 = mono_msf();
    p = spawn(j, NULL, &log, "--restore", "latest", NULL);
    took[n++] = wait_claim(j, epoch + 1, RUN_TIMEOUT_MS) - t0;
  }
  int rc = crash_wait(p, RUN_TIMEOUT_MS, 0);
  char *e = log_of(j, log);
  cr_assert_eq(rc, 0, "the last run: exit %d: %s", rc, e);
  cr_assert(j->runs == 1 || strstr(e, "its process is gone"), "%s", e);
  free(e);
  cr_assert_geq(n, 3, "too few kills landed (%d): the job ended first", n);
  crash_hist(j, "after SIGKILLs: ");
  crash_check_counter(j);
  report("after SIGKILL", took, n);
  crash_free(j);
}

/* SIGTERM: the owner drains, releases, and the next run starts at once;
 * the same at the end of the input (a new instance). (No file sink here: a
 * file sink restored after a stop by SIGTERM fails with EBADF, a bug of the
 * sink, not of ownership.) */
Test(owners, released_lease_is_taken_over_at_once) {
  double took[10];
  int n = 0;
  crash_job *j = pjob_new(100000, "100000");
  snprintf(j->sink, sizeof j->sink, "null");
  int log;
  uint64_t epoch = 1;
  pid_t p = spawn(j, NULL, &log, NULL);
  for (int round = 0; round < 5; round++) {
    wait_claim(j, epoch, RUN_TIMEOUT_MS);
    wait_log(j, log, " completed in ", RUN_TIMEOUT_MS); /* running: SIGTERM drains it */
    kill(p, SIGTERM);
    int rc = crash_wait(p, RUN_TIMEOUT_MS, 0);
    cr_assert_eq(rc, 0, "a run stopped by SIGTERM: exit %d", rc);
    double t0 = mono_msf();
    p = spawn(j, NULL, &log, "--restore", "latest", NULL);
    took[n++] = wait_claim(j, ++epoch, RUN_TIMEOUT_MS) - t0;
    rc = crash_wait(p, RUN_TIMEOUT_MS, 0);
    char *e = log_of(j, log);
    cr_assert_eq(rc, 0, "the successor: exit %d: %s", rc, e);
    cr_assert(strstr(e, "it released the lease"), "%s", e);
    free(e);
    /* It ended: released again, and a new instance starts at once. */
    t0 = mono_msf();
    p = spawn(j, NULL, &log, NULL);
    took[n++] = wait_claim(j, ++epoch, RUN_TIMEOUT_MS) - t0;
  }
  cr_assert_eq(crash_wait(p, RUN_TIMEOUT_MS, 0), 0);
  report("after orderly release (SIGTERM, end of input)", took, n);
  crash_free(j);
}

static int stale_sink_writes;

/* One stop scenario: the owner stops (SIGSTOP from here, or itself at a
 * failpoint), a successor with --wait takes over after the lease expires
 * and finishes, then the owner is continued: it exits 4 with the fencing
 * message, the store is as the successor left it, the output exact. Returns
 * the takeover time (from the stop to the successor's claim). */
static double stopped_owner(const char *failpoint, int delay_ms, const char *what) {
  crash_job *j = pjob_new(RECORDS, "150000");
  int lo, ls;
  pid_t owner = spawn(j, failpoint, &lo, "--lease-ms", LEASE_MS, NULL);
  double t0;
  if (failpoint) {
    int rc = crash_wait(owner, RUN_TIMEOUT_MS, 1);
    char *e = log_of(j, lo);
    cr_assert_eq(rc, 1000, "%s: the owner did not stop at %s (%d): %s", what, failpoint, rc, e);
    free(e);
    t0 = mono_msf();
  } else {
    wait_claim(j, 1, RUN_TIMEOUT_MS);
    th_sleep_ms(delay_ms);
    kill(-owner, SIGSTOP);
    t0 = mono_msf();
  }
  pid_t succ = spawn(j, NULL, &ls, "--restore", "latest", "--wait", "--lease-ms", LEASE_MS, NULL);
  double took = wait_claim(j, 2, RUN_TIMEOUT_MS) - t0;
  int rs = crash_wait(succ, RUN_TIMEOUT_MS, 0);
  char *es = log_of(j, ls);
  cr_assert_eq(rs, 0, "%s: the successor: exit %d (-1: it hung): %s", what, rs, es);
  cr_assert(strstr(es, "epoch 2 took over") && strstr(es, "its lease expired"), "%s: %s", what, es);
  char *before = listing(j);
  crash_hist(j, "%s: ", what);
  crash_check_counter(j); /* the successor's output, whole */
  char *sink_before = crash_dir_image(j->out, 1);

  kill(-owner, SIGCONT);
  kill(owner, SIGCONT);
  int ro = crash_wait(owner, RUN_TIMEOUT_MS, 0);
  char *eo = log_of(j, lo);
  cr_assert_eq(ro, 4, "%s: the stale owner exited %d, not 4: %s", what, ro, eo);
  cr_assert(strstr(eo, "lost ownership of the state directory"), "%s: %s", what, eo);
  char *after = listing(j);
  cr_assert_str_eq(after, before, "%s: the stale owner changed the store", what);
  char *sink_after = crash_dir_image(j->out, 1);
  if (strcmp(sink_after, sink_before) != 0) {
    /* A stale owner must not change what a reader sees. Its commits check
     * ownership first, and the parts it could still rename were recovered
     * (committed or removed) by the successor, so renaming them again
     * changes nothing; a stop that lands inside a commit is reported.
     * At a failpoint (one just before a sink commit among them) it must
     * hold. */
    cr_assert_null(failpoint, "%s: the stale owner committed sink output", what);
    stale_sink_writes++;
    fprintf(stderr, "lease: %s: the stale owner committed sink output\n", what);
  }
  free(sink_after);
  /* Nothing of epoch 1 after the takeover: every epoch-1 checkpoint is
   * older than every epoch-2 one, and the final one is epoch 2's. */
  ull max1 = 0, min2 = ~0ull, last_ep = 0;
  for (char *p = after; *p;) {
    ull id, ep;
    int used;
    if (sscanf(p, "%llu@%llu %n", &id, &ep, &used) != 2) break;
    if (ep == 1 && id > max1) max1 = id;
    if (ep == 2 && id < min2) min2 = id;
    cr_assert(ep == 1 || ep == 2, "%s: epoch %llu", what, ep);
    last_ep = ep;
    p += used;
  }
  cr_assert_lt(max1, min2, "%s: %s", what, after);
  cr_assert_eq(last_ep, 2, "%s: %s", what, after);
  free(sink_before);
  weir_lease_state st;
  cr_assert_eq(weir_lease_read(j->state, &st), 1);
  cr_assert_eq(st.epoch, 2);
  free(before);
  free(after);
  free(es);
  free(eo);
  crash_free(j);
  return took;
}

Test(owners, stopped_owner_is_fenced) {
  seed("stopped_owner_is_fenced");
  double took[16];
  int n = 0;
  static const char *const fps[] = {
      "store.in_commit_txn=pause@3", /* holding LMDB's writer lock */
      "store.in_chunk_txn=pause@5",  /* the same, in a chunk transaction */
      "ckpt.before_meta_commit=pause@4", "ckpt.after_meta_commit=pause@2",
      "sink.before_commit=pause@2", /* about to commit a sink epoch */
  };
  for (size_t i = 0; i < sizeof fps / sizeof fps[0]; i++)
    took[n++] = stopped_owner(fps[i], 0, fps[i]);
  for (int i = 0; i < 6; i++) {
    int delay = (int)(rnd() % 1200);
    char what[64];
    snprintf(what, sizeof what, "SIGSTOP after %d ms", delay);
    took[n++] = stopped_owner(NULL, delay, what);
  }
  report("after expiry (lease " LEASE_MS " ms, from SIGSTOP)", took, n);
  fprintf(stderr,
          "lease: stale owners committed file sink output after SIGCONT in %d of %d "
          "scenarios (a stop between the ownership check and the rename)\n",
          stale_sink_writes, n);
}

/* Continues stopped run p (log n) and expects it to exit with `want`. */
static void continue_until_exit(crash_job *j, pid_t p, int n, int want, const char *who) {
  kill(-p, SIGCONT);
  kill(p, SIGCONT);
  int rc = crash_wait(p, RUN_TIMEOUT_MS, 0);
  char *e = log_of(j, n);
  cr_assert_eq(rc, want, "%s exited %d, not %d: %s", who, rc, want, e);
  free(e);
}

/* An owner paused between its ownership check and its pre-commit (a gap no
 * check closes), continued while its successor is in the middle of an
 * epoch: it must not take the successor's in-progress part nor replace its
 * pending parts; it exits 4 and the successor's output is exact. (The soak
 * saw a stale owner's rename move its successor's part away when both had
 * one name; here the stale owner is fenced before it reaches the rename
 * in the runs tried, so this covers the scenario, not that interleaving.) */
Test(owners, paused_before_pre_commit) {
  crash_job *j = pjob_new(RECORDS, "150000");
  crash_par(j, 1); /* one sink subtask: the successor's part is the one */
  int lo, ls;
  pid_t owner = spawn(j, "sink.before_pre_commit=pause@3", &lo, "--lease-ms", LEASE_MS, NULL);
  int rc = crash_wait(owner, RUN_TIMEOUT_MS, 1);
  char *e = log_of(j, lo);
  cr_assert_eq(rc, 1000, "the owner did not stop before its pre-commit (%d): %s", rc, e);
  free(e);
  pid_t succ = spawn(j, "sink.after_write=pause@40", &ls, "--restore", "latest", "--wait",
                     "--lease-ms", LEASE_MS, NULL);
  rc = crash_wait(succ, RUN_TIMEOUT_MS, 1);
  e = log_of(j, ls);
  cr_assert_eq(rc, 1000, "the successor did not stop after its writes (%d): %s", rc, e);
  free(e);
  continue_until_exit(j, owner, lo, 4, "the stale owner");
  continue_until_exit(j, succ, ls, 0, "the successor");
  crash_check_counter(j);
  crash_free(j);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, NULL);
}
