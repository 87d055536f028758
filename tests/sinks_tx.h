/* tests/sinks_tx.h: what the exactly-once sink tests share beyond the
 * crash harness (crash.h): the counter job they all run, a random-kill
 * schedule with a floor on the kills, and a `weir receiver` child for the
 * HTTP sink (test_sinks_tx.c: files and the write-order matrix;
 * test_sinks_http.c; test_sinks_pg.c; test_nats.c).
 *
 * DESIGN. Included by exactly one .c per test program (static helpers, some
 * unused in each); see test_sinks_tx.c for what the tests check and why.
 */
#ifndef WEIR_TESTS_SINKS_TX_H
#define WEIR_TESTS_SINKS_TX_H

#define TX_FN static __attribute__((unused))

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
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

typedef unsigned long long ull;

#define RUN_TIMEOUT_S 90

/* The counter job with the file sink, `interval` ms between checkpoints. */
TX_FN crash_job *tx_job(uint64_t records, uint64_t keys, const char *rate, const char *interval) {
  crash_job *j = crash_new("counter", 0);
  crash_counter(j, records, keys, rate);
  j->interval = interval;
  j->timeout_s = RUN_TIMEOUT_S;
  return j;
}

/* One --restore latest that must end the job (exit 0). */
TX_FN void restore_until_done(crash_job *j) {
  crash_restore_to_end(j, 1, NULL, NULL, NULL);
}

static uint64_t rng;
TX_FN uint64_t rnd(void) {
  return th_splitmix64(&rng);
}

typedef struct tx_delay {
  int min_ms, spread_ms;
} tx_delay;

static int tx_delay_ms(crash_job *j, int attempt, int killing, void *user) {
  (void)j;
  (void)attempt;
  (void)killing;
  const tx_delay *d = user;
  return d->min_ms + (int)(rnd() % (uint64_t)d->spread_ms);
}

/* Runs j up to `attempts` times, each SIGKILLed min_ms + rnd() % spread_ms
 * after its start unless it ended first, every run after the first with
 * --restore latest, and all with --source `source` unless it is NULL.
 * Returns how many kills landed (a run that ends stops the loop). Callers
 * keep min_ms + spread_ms below the paced length of a first run (records /
 * rate, ~85% of it), so every first run is killed and a test's floor on
 * kills holds by construction; the shorter runs after a restore are killed
 * or not, at random. */
TX_FN int kill_at_random(crash_job *j, int attempts, int min_ms, int spread_ms,
                         const char *source) {
  tx_delay d = {min_ms, spread_ms};
  const char *src[] = {"--source", source, NULL};
  crash_schedule s = {.kills = attempts,
                      .max_attempts = attempts,
                      .delay = tx_delay_ms,
                      .extra = source ? src : NULL,
                      .user = &d};
  return crash_kill_randomly(j, &s, NULL);
}

/* ---- the receiver -------------------------------------------------------- */

typedef struct receiver {
  pid_t pid;
  int port;
  int err_fd;
  char db[700];
  char err[16384];
  size_t err_len;
} receiver;

static pid_t g_recv; /* killed by the fini if a test failed */

TX_FN int read_err_until(receiver *r, const char *needle, int ms) {
  int64_t t0 = th_mono_ms();
  for (;;) {
    r->err[r->err_len] = '\0';
    if (needle && strstr(r->err, needle)) return 1;
    int left = ms - (int)(th_mono_ms() - t0);
    if (left <= 0) return 0;
    struct pollfd p = {.fd = r->err_fd, .events = POLLIN};
    if (poll(&p, 1, left) <= 0) continue;
    ssize_t n = read(r->err_fd, r->err + r->err_len, sizeof r->err - 1 - r->err_len);
    if (n <= 0) return needle && strstr(r->err, needle) != NULL;
    r->err_len += (size_t)n;
  }
}

/* `weir receiver --listen 127.0.0.1:0 --db <dir>/recv.db [extra...]`. */
TX_FN void recv_start(receiver *r, const crash_job *j, const char *const extra[]) {
  memset(r, 0, sizeof *r);
  snprintf(r->db, sizeof r->db, "%s/recv.db", j->dir);
  const char *argv[32] = {WEIR_BINARY, "receiver", "--listen", "127.0.0.1:0", "--db", r->db};
  int n = 6;
  for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  r->pid = g_recv = pid;
  r->err_fd = fds[0];
  const char *ready = "weir receiver: listening on 127.0.0.1:";
  cr_assert(read_err_until(r, ready, RUN_TIMEOUT_S * 1000), "receiver did not start: %s", r->err);
  r->port = atoi(strstr(r->err, ready) + strlen(ready));
  cr_assert_gt(r->port, 0);
}

TX_FN void recv_stop(receiver *r) {
  kill(r->pid, SIGTERM);
  int st = 0;
  waitpid(r->pid, &st, 0);
  g_recv = 0;
  close(r->err_fd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "receiver ended with 0x%x", st);
}

typedef struct stats {
  long long requests, effects, duplicates, rejections;
} stats;

TX_FN stats recv_stats(const receiver *r) {
  const char *argv[] = {WEIR_BINARY, "receiver", "stats", "--db", r->db, "--json", NULL};
  char *out = NULL, *err = NULL;
  int rc = th_run(argv, NULL, &out, &err, RUN_TIMEOUT_S);
  cr_assert_eq(rc, 0, "stats: %d %s", rc, err);
  stats s;
  cr_assert_eq(sscanf(out,
                      "{\"requests\": %lld, \"effects\": %lld, \"duplicates\": %lld, "
                      "\"rejections\": %lld",
                      &s.requests, &s.effects, &s.duplicates, &s.rejections),
               4, "stats: %s", out);
  free(out);
  free(err);
  return s;
}

/* The receiver's effects are exactly the expected pairs, each once. */
TX_FN void check_effects(crash_job *j, const receiver *r) {
  const char *argv[] = {WEIR_BINARY, "receiver", "effects", "--db", r->db, NULL};
  char *out = NULL, *err = NULL;
  int rc = th_run(argv, NULL, &out, &err, RUN_TIMEOUT_S);
  cr_assert_eq(rc, 0, "effects: %d %s", rc, err);
  crash_tally t;
  crash_tally_init(j, &t, 1);
  for (char *s = out, *nl; *s; s = nl + 1) {
    nl = strchr(s, '\n');
    cr_assert_not_null(nl);
    *nl = '\0';
    crash_tally_line(j, &t, s, "receiver");
  }
  crash_tally_check(j, &t, "receiver effects");
  crash_tally_free(&t);
  free(out);
  free(err);
}

TX_FN void http_sink(crash_job *j, const receiver *r, const char *params) {
  snprintf(j->sink, sizeof j->sink, "http://127.0.0.1:%d/effects%.600s", r->port,
           params ? params : "");
}

/* The receiver after a job ended: effects == N, requests >= N, no
 * rejection, exactly the expected effects. */
TX_FN stats check_receiver(crash_job *j, const receiver *r) {
  stats s = recv_stats(r);
  cr_assert_eq(s.effects, (long long)j->records, "effects %lld for %llu records\nhistory: %s",
               s.effects, (ull)j->records, j->history);
  cr_assert_geq(s.requests, s.effects);
  cr_assert_eq(s.rejections, 0);
  check_effects(j, r);
  return s;
}

TX_FN void fini(void) {
  if (g_recv > 0) {
    kill(g_recv, SIGKILL);
    waitpid(g_recv, NULL, 0);
    g_recv = 0;
  }
  crash_fini();
}

/* Crash tests run one at a time whatever --jobs says. */
#define TX_MAIN                                                                                    \
  int main(int argc, char *argv[]) {                                                               \
    return crash_main(argc, argv, "info");                                                         \
  }

/* The oldest checkpoint j's state directory retains, which must not be
 * its only one (a --restore of it is then a rewind). */
TX_FN unsigned long long oldest_of_several(const crash_job *j) {
  char *so = NULL;
  const char *la[] = {WEIR_BINARY, "checkpoints", "--state-dir", j->state, "--json", NULL};
  cr_assert_eq(th_run(la, NULL, &so, NULL, RUN_TIMEOUT_S), 0);
  unsigned long long oldest = 0;
  const char *at = strstr(so, "\"checkpoints\": [{\"id\": ");
  cr_assert(at && sscanf(at, "\"checkpoints\": [{\"id\": %llu", &oldest) == 1, "%s", so);
  cr_assert_not_null(strstr(at + 10, "{\"id\": "), "one checkpoint only: %s", so);
  free(so);
  return oldest;
}

/* ---- savepoints (test_savepoint.c, and the sinks' stop-with-savepoint) ---- */

/* Waits until the job's control socket is there (the run owns its state
 * directory and restored what it restores). */
TX_FN void wait_for_control(const crash_job *j) {
  char path[700];
  snprintf(path, sizeof path, "%s/control", j->state);
  for (int i = 0; i < 300; i++) {
    struct stat st;
    if (stat(path, &st) == 0) return;
    th_sleep_ms(20);
  }
  cr_assert_fail("no control socket at %s after 6 s\nhistory: %s", path, j->history);
}

/* Runs `weir ARGS...` (NULL terminated): its exit; stdout in *out. */
TX_FN int weir_cmd(char **out, char **err, ...) {
  const char *argv[24] = {WEIR_BINARY};
  va_list ap;
  va_start(ap, err);
  size_t n = 1;
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 23) argv[n++] = a;
  argv[n] = NULL;
  va_end(ap);
  return th_run(argv, NULL, out, err, RUN_TIMEOUT_S);
}

/* Starts j (extra arguments NULL terminated) in the background; its stderr
 * goes to <dir>/run.err. */
TX_FN pid_t start(crash_job *j, const char *const extra[]) {
  char errpath[700];
  snprintf(errpath, sizeof errpath, "%s/run.err", j->dir);
  pid_t pid = crash_spawnv(j, NULL, errpath, extra);
  wait_for_control(j);
  return pid;
}

/* The run started by start() ended with `want`. */
TX_FN void expect_exit(crash_job *j, pid_t pid, int want) {
  int rc = crash_wait(pid, RUN_TIMEOUT_S * 1000, 0);
  char errpath[700];
  snprintf(errpath, sizeof errpath, "%s/run.err", j->dir);
  char *err = th_read_file(errpath, NULL);
  cr_assert_eq(rc, want, "exit %d, want %d: %s\nhistory: %s", rc, want, err ? err : "", j->history);
  free(err);
}

/* Moves j to a new state directory (<dir>/STATE), the sink unchanged. */
TX_FN void new_state_dir(crash_job *j, const char *name) {
  snprintf(j->state, sizeof j->state, "%s/%s", j->dir, name);
}

/* `weir stop --savepoint --out <dir>/upgrade.savepoint` of the running j
 * (started by start()), which must end 0; then j moved to a new state
 * directory and run --from-savepoint to the end: exit 0, resumed. */
TX_FN void stop_with_savepoint_and_upgrade(crash_job *j, pid_t pid) {
  char out[700];
  snprintf(out, sizeof out, "%s/upgrade.savepoint", j->dir);
  char *so = NULL, *se = NULL;
  int rc = weir_cmd(&so, &se, "stop", "--state-dir", j->state, "--savepoint", "--out", out, NULL);
  cr_assert_eq(rc, 0, "weir stop: %s", se);
  cr_assert_not_null(strstr(so, out), "%s", so);
  free(so);
  free(se);
  expect_exit(j, pid, 0);
  new_state_dir(j, "upgraded");
  char *err = NULL;
  rc = crash_run(j, NULL, -1, &err, "--from-savepoint", out, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_gt(th_resumed_from(err), 0, "%s", err);
  free(err);
}

#endif
