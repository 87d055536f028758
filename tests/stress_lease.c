/* stress_lease.c: the lease's threads (snapshot/lease.c) under
 * ThreadSanitizer: the heartbeat renewing, several threads checking the
 * lease at once (as a job's commits do), and a takeover that makes all of
 * them find it lost at about the same moment.
 *
 * Each round acquires a lease with a short duration and starts its
 * heartbeat; four checker threads call weir_lease_check and read
 * weir_lease_error in a loop; after a random while a second acquisition,
 * as another owner whose process the lease takes for gone, takes the lease
 * over. The first owner's lost callback must run exactly once, with a
 * message; every checker must then see WEIR_EFENCED with a non-empty
 * message; the successor's epoch is one higher. Then both close (the
 * successor releases) and the next round starts in the same directory.
 *
 * A plain main() program (Criterion cannot start under ThreadSanitizer):
 * prints "N passed, N failed" and exits non-zero on failure.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "snapshot/lease.h"
#include "weir/error.h"

#define ROUNDS 40
#define CHECKERS 4

typedef struct round_state {
  weir_lease *lease;
  atomic_int lost_calls;
  atomic_int stop;
  char lost_msg[512];
  atomic_int fenced_seen[CHECKERS];
  atomic_int bad_msg;
} round_state;

static void on_lost(void *user, int err, const char *msg) {
  round_state *r = user;
  if (atomic_fetch_add(&r->lost_calls, 1) == 0)
    snprintf(r->lost_msg, sizeof r->lost_msg, "%d %s", err, msg ? msg : "");
}

typedef struct checker {
  round_state *r;
  int i;
} checker;

static void *check_loop(void *p) {
  checker *c = p;
  char buf[512];
  while (!atomic_load(&c->r->stop)) {
    if (weir_lease_check(c->r->lease) == WEIR_EFENCED) {
      weir_lease_error(c->r->lease, buf, sizeof buf);
      if (!buf[0]) atomic_store(&c->r->bad_msg, 1);
      atomic_store(&c->r->fenced_seen[c->i], 1);
    }
  }
  return NULL;
}

static int gone(void *user, const weir_lease_owner *o) {
  (void)user;
  (void)o;
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int one_round(const char *dir, int round, uint64_t *epoch) {
  round_state r;
  memset(&r, 0, sizeof r);
  char err[512];
  weir_lease_opts o = {.lease_ms = 60, .lost = on_lost, .lost_user = &r};
  if (weir_lease_acquire(&r.lease, dir, &o, err, sizeof err) != 0) {
    fprintf(stderr, "round %d: acquire: %s\n", round, err);
    return 1;
  }
  if (weir_lease_start(r.lease) != 0) {
    fprintf(stderr, "round %d: start failed\n", round);
    weir_lease_close(r.lease, 0);
    return 1;
  }
  pthread_t th[CHECKERS];
  checker cs[CHECKERS];
  for (int i = 0; i < CHECKERS; i++) {
    cs[i] = (checker){&r, i};
    pthread_create(&th[i], NULL, check_loop, &cs[i]);
  }
  sleep_ms(5 + rand() % 60); /* a few heartbeats (every 20 ms) */
  /* Another owner, whose predecessor (this process, as far as the lease
   * can tell) is gone: it takes over at once. */
  weir_lease_owner other;
  weir_lease_self(&other);
  other.pid += 1000000 + round;
  weir_lease *next = NULL;
  weir_lease_opts o2 = {.lease_ms = 60, .as = &other, .alive = gone};
  int rc = weir_lease_acquire(&next, dir, &o2, err, sizeof err);
  int failed = 0;
  if (rc != 0) {
    fprintf(stderr, "round %d: takeover: %s\n", round, err);
    failed = 1;
  }
  /* Every checker must find the lease lost. */
  for (int waited = 0; !failed && waited < 5000; waited++) {
    int all = 1;
    for (int i = 0; i < CHECKERS; i++) all &= atomic_load(&r.fenced_seen[i]);
    if (all) break;
    sleep_ms(1);
  }
  atomic_store(&r.stop, 1);
  for (int i = 0; i < CHECKERS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < CHECKERS && !failed; i++)
    if (!atomic_load(&r.fenced_seen[i])) {
      fprintf(stderr, "round %d: checker %d never saw the lease lost\n", round, i);
      failed = 1;
    }
  uint64_t e0 = weir_lease_epoch(r.lease);
  /* Joins the heartbeat: whichever thread told of the loss is done. */
  weir_lease_close(r.lease, 0);
  if (!failed && atomic_load(&r.lost_calls) != 1) {
    fprintf(stderr, "round %d: lost callback ran %d times\n", round, atomic_load(&r.lost_calls));
    failed = 1;
  }
  if (!failed && (atomic_load(&r.bad_msg) || strlen(r.lost_msg) < 4)) {
    fprintf(stderr, "round %d: a loss without its message ('%s')\n", round, r.lost_msg);
    failed = 1;
  }
  if (next) {
    if (!failed && weir_lease_epoch(next) != e0 + 1) {
      fprintf(stderr, "round %d: successor epoch %llu after %llu\n", round,
              (unsigned long long)weir_lease_epoch(next), (unsigned long long)e0);
      failed = 1;
    }
    *epoch = weir_lease_epoch(next);
    weir_lease_close(next, 1);
  }
  return failed;
}

int main(void) {
  srand((unsigned)time(NULL));
  char *dir = th_tmpdir();
  if (!dir) {
    perror("tmpdir");
    return 1;
  }
  int passed = 0, failed = 0;
  uint64_t epoch = 0;
  for (int round = 0; round < ROUNDS; round++) {
    if (one_round(dir, round, &epoch))
      failed++;
    else
      passed++;
  }
  if (!failed && epoch != 2u * ROUNDS) {
    fprintf(stderr, "final epoch %llu, expected %u\n", (unsigned long long)epoch, 2u * ROUNDS);
    failed++;
  }
  th_rmrf(dir);
  free(dir);
  printf("stress_lease: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
