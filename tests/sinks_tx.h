/* tests/sinks_tx.h: the helpers shared by the exactly-once sink tests
 * (test_sinks_tx.c: files and the write-order matrix; test_sinks_http.c:
 * the HTTP sink against weir receiver): a counter job in a temporary
 * directory, runs with failpoints or a kill after a delay, restores until
 * done, the exact output checks, and a `weir receiver` child.
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

#include "helpers.h"

typedef unsigned long long ull;

#define RUN_TIMEOUT_S 90
#define MAX_ATTEMPTS 12
#define KILLED (128 + SIGKILL)

/* ---- a job in a temporary directory -------------------------------------- */

typedef struct job {
  char dir[512];
  char state[600];
  char out[600];
  char sink[700];
  uint64_t records, keys;
  char records_s[24], keys_s[24];
  const char *rate;
  const char *interval;
  const char *par; /* --parallelism (and --workers): "2" unless a test says */
  int runs;
  char history[4096];
} job;

static job *live; /* removed by the suite's fini if a test failed */

TX_FN void hist(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
TX_FN void hist(job *j, const char *fmt, ...) {
  size_t n = strlen(j->history);
  if (n + 2 >= sizeof j->history) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->history + n, sizeof j->history - n, fmt, ap);
  va_end(ap);
}

TX_FN job *job_new(uint64_t records, uint64_t keys, const char *rate, const char *interval) {
  job *j = calloc(1, sizeof *j);
  cr_assert_not_null(j);
  char *d = th_tmpdir();
  cr_assert_not_null(d);
  snprintf(j->dir, sizeof j->dir, "%s", d);
  free(d);
  snprintf(j->state, sizeof j->state, "%s/state", j->dir);
  snprintf(j->out, sizeof j->out, "%s/out", j->dir);
  snprintf(j->sink, sizeof j->sink, "file:%s", j->out);
  j->records = records;
  j->keys = keys;
  snprintf(j->records_s, sizeof j->records_s, "%llu", (ull)records);
  snprintf(j->keys_s, sizeof j->keys_s, "%llu", (ull)keys);
  j->rate = rate;
  j->interval = interval;
  j->par = "2";
  hist(j, "dir %s: ", j->dir);
  live = j;
  return j;
}

TX_FN void job_free(job *j) {
  if (live == j) live = NULL;
  th_rmrf(j->dir);
  free(j);
}

TX_FN int job_argv(const job *j, const char *argv[64], va_list ap) {
  int n = 0;
  const char *fixed[] = {WEIR_BINARY,  "run",         "counter", "--records",
                         j->records_s, "--keys",      j->keys_s, "--rate",
                         j->rate,      "--workers",   "2",       "--parallelism",
                         j->par,       "--state-dir", j->state,  "--checkpoint-interval",
                         j->interval,  "--sink",      j->sink};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = fixed[i];
  int first = n;
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 63) argv[n++] = a;
  argv[n] = NULL;
  return first;
}

TX_FN void arm(const char *fp) {
  if (fp)
    setenv("WEIR_FAILPOINTS", fp, 1);
  else
    unsetenv("WEIR_FAILPOINTS");
}

/* Runs the job with failpoints armed and the extras (NULL terminated). */
TX_FN int run_job(job *j, const char *fp, char **err, ...) {
  const char *argv[64];
  va_list ap;
  va_start(ap, err);
  int x = job_argv(j, argv, ap);
  va_end(ap);
  arm(fp);
  int rc = th_run(argv, j->dir, NULL, err, RUN_TIMEOUT_S);
  arm(NULL);
  j->runs++;
  hist(j, "[run %d%s%s", j->runs, fp ? " " : "", fp ? fp : "");
  for (int i = x; argv[i]; i++) hist(j, " %s", argv[i]);
  hist(j, ": %d] ", rc);
  return rc;
}

TX_FN int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TX_FN void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Starts the job with failpoints `fp` armed (NULL: none) and the arguments
 * in argv (from job_argv) without waiting for it, in its own process
 * group, stderr into <dir>/stderr.txt. Returns its pid. */
TX_FN pid_t spawn_argv(job *j, const char *fp, const char *const *argv) {
  char errpath[700];
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", j->dir);
  pid_t pid = th_spawn(argv, j->dir, fp, errpath);
  cr_assert_geq(pid, 0);
  return pid;
}

/* Runs the job (extras NULL terminated) and SIGKILLs its process group
 * after delay_ms unless it ended. Returns the exit status or 128 + signal. */
TX_FN int run_kill_after(job *j, int delay_ms, ...) {
  const char *argv[64];
  va_list ap;
  va_start(ap, delay_ms);
  int x = job_argv(j, argv, ap);
  va_end(ap);
  char errpath[700], *err = NULL;
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", j->dir);
  int rc = th_run_killable(argv, j->dir, NULL, delay_ms, 0, errpath, &err, NULL);
  cr_assert_neq(rc, -2, "cannot fork");
  int killed = rc == KILLED;
  j->runs++;
  hist(j, "[run %d %s %d ms", j->runs, killed ? "killed at" : "ended before a kill at", delay_ms);
  for (int i = x; argv[i]; i++) hist(j, " %s", argv[i]);
  hist(j, ": %d] ", rc);
  if (rc != 0 && !killed && err) { /* why it failed: the end of its stderr */
    size_t n = strlen(err);
    hist(j, "(stderr: %s) ", err + (n > 800 ? n - 800 : 0));
  }
  free(err);
  return rc;
}

/* The job id of j's state directory (weir checkpoints --json) into out. */
TX_FN void job_id_into(const job *j, char *out, size_t cap) {
  const char *argv[] = {WEIR_BINARY, "checkpoints", "--state-dir", j->state, "--json", NULL};
  char *text = NULL;
  int rc = th_run(argv, NULL, &text, NULL, RUN_TIMEOUT_S);
  cr_assert_eq(rc, 0, "weir checkpoints: %d", rc);
  char *p = strstr(text, "\"job\": \"");
  cr_assert_not_null(p, "no job id in %s", text);
  p += 8;
  size_t n = strcspn(p, "\"");
  cr_assert(n > 0 && n < cap);
  memcpy(out, p, n);
  out[n] = '\0';
  free(text);
}

TX_FN void expect_killed_at(job *j, int rc, const char *err, const char *name) {
  char want[160];
  snprintf(want, sizeof want, "failpoint %s: kill", name);
  cr_assert_eq(rc, KILLED, "failpoint %s did not fire: exit %d, stderr: %s\nhistory: %s", name, rc,
               err, j->history);
  cr_assert(strstr(err, want) != NULL, "no '%s' in stderr: %s", want, err);
}

/* --restore latest until the job ends (exit 0). */
TX_FN void restore_until_done(job *j) {
  for (int attempt = 0;; attempt++) {
    cr_assert_lt(attempt, MAX_ATTEMPTS, "no end\nhistory: %s", j->history);
    char *err = NULL;
    int rc = run_job(j, NULL, &err, "--restore", "latest", NULL);
    cr_assert_eq(rc, 0, "restore: exit %d, stderr: %s\nhistory: %s", rc, err, j->history);
    free(err);
    return;
  }
}

/* ---- the expected output ------------------------------------------------- */

TX_FN uint64_t n_of(const job *j, uint64_t k) {
  return j->records / j->keys + (k < j->records % j->keys ? 1 : 0);
}

/* Counts one line "<k> <c>" into seen (keys x per). */
TX_FN void count_line(job *j, uint32_t *seen, uint64_t per, const char *s, const char *where) {
  ull k, c;
  char extra;
  cr_assert_eq(sscanf(s, "%llu %llu%c", &k, &c, &extra), 2, "%s: bad line '%s'", where, s);
  cr_assert(k < j->keys && c >= 1 && c <= n_of(j, k), "%s: line '%s' out of range\nhistory: %s",
            where, s, j->history);
  seen[k * per + c - 1]++;
}

/* Every (k, c) exactly once in seen, and `lines` == N. */
TX_FN void check_seen(job *j, uint32_t *seen, uint64_t per, uint64_t lines, const char *what) {
  for (uint64_t k = 0; k < j->keys; k++)
    for (uint64_t c = 1; c <= n_of(j, k); c++)
      cr_assert_eq(seen[k * per + c - 1], 1, "%s: '%llu %llu' seen %u times\nhistory: %s", what,
                   (ull)k, (ull)c, seen[k * per + c - 1], j->history);
  cr_assert_eq(lines, j->records, "%s: %llu lines for %llu records\nhistory: %s", what, (ull)lines,
               (ull)j->records, j->history);
}

/* The file sink's output: only committed parts, every pair once. */
TX_FN void check_files(job *j) {
  uint64_t per = j->records / j->keys + 1;
  uint32_t *seen = calloc(j->keys * per, sizeof *seen);
  cr_assert_not_null(seen);
  DIR *d = opendir(j->out);
  cr_assert_not_null(d, "no %s\nhistory: %s", j->out, j->history);
  struct dirent *e;
  uint64_t lines = 0;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    size_t n = strlen(e->d_name);
    cr_assert(n > 4 && !strcmp(e->d_name + n - 4, ".txt") && !strncmp(e->d_name, "sink-", 5),
              "left in the sink directory: %s\nhistory: %s", e->d_name, j->history);
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", j->out, e->d_name);
    char *text = th_read_file(p, NULL);
    cr_assert_not_null(text);
    for (char *s = text, *nl; *s; s = nl + 1) {
      nl = strchr(s, '\n');
      cr_assert_not_null(nl, "%s: unterminated line", e->d_name);
      *nl = '\0';
      count_line(j, seen, per, s, e->d_name);
      lines++;
    }
    free(text);
  }
  closedir(d);
  check_seen(j, seen, per, lines, "files");
  free(seen);
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
  int64_t t0 = mono_ms();
  for (;;) {
    r->err[r->err_len] = '\0';
    if (needle && strstr(r->err, needle)) return 1;
    int left = ms - (int)(mono_ms() - t0);
    if (left <= 0) return 0;
    struct pollfd p = {.fd = r->err_fd, .events = POLLIN};
    if (poll(&p, 1, left) <= 0) continue;
    ssize_t n = read(r->err_fd, r->err + r->err_len, sizeof r->err - 1 - r->err_len);
    if (n <= 0) return needle && strstr(r->err, needle) != NULL;
    r->err_len += (size_t)n;
  }
}

/* `weir receiver --listen 127.0.0.1:0 --db <dir>/recv.db [extra...]`. */
TX_FN void recv_start(receiver *r, const job *j, const char *const extra[]) {
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
TX_FN void check_effects(job *j, const receiver *r) {
  const char *argv[] = {WEIR_BINARY, "receiver", "effects", "--db", r->db, NULL};
  char *out = NULL, *err = NULL;
  int rc = th_run(argv, NULL, &out, &err, RUN_TIMEOUT_S);
  cr_assert_eq(rc, 0, "effects: %d %s", rc, err);
  uint64_t per = j->records / j->keys + 1;
  uint32_t *seen = calloc(j->keys * per, sizeof *seen);
  uint64_t lines = 0;
  for (char *s = out, *nl; *s; s = nl + 1) {
    nl = strchr(s, '\n');
    cr_assert_not_null(nl);
    *nl = '\0';
    count_line(j, seen, per, s, "receiver");
    lines++;
  }
  check_seen(j, seen, per, lines, "receiver effects");
  free(seen);
  free(out);
  free(err);
}

TX_FN void http_sink(job *j, const receiver *r, const char *params) {
  snprintf(j->sink, sizeof j->sink, "http://127.0.0.1:%d/effects%s", r->port, params ? params : "");
}

/* The receiver after a job ended: effects == N, requests >= N, no
 * rejection, exactly the expected effects. */
TX_FN stats check_receiver(job *j, const receiver *r) {
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
  if (live) {
    if (getenv("WEIR_TEST_KEEP"))
      fprintf(stderr, "kept %s\n", live->dir);
    else
      th_rmrf(live->dir);
    free(live);
    live = NULL;
  }
}

static uint64_t rng;
TX_FN uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Runs j up to `attempts` times, each SIGKILLed min_ms + rnd() % spread_ms
 * after its start unless it ended first, every run after the first with
 * --restore latest, and all with --source `source` unless it is NULL.
 * Returns how many kills landed (a run that ends stops the loop). Callers
 * keep min_ms + spread_ms below the paced length of a first run (records /
 * rate, ~85% of it), so every first run is killed and a test's floor on
 * kills holds by construction; the shorter runs after a restore are killed
 * or not, at random. */
TX_FN int kill_at_random(job *j, int attempts, int min_ms, int spread_ms, const char *source) {
  const char *src = source ? "--source" : NULL;
  int kills = 0;
  for (int a = 0; a < attempts; a++) {
    int delay = min_ms + (int)(rnd() % (uint64_t)spread_ms);
    int rc = a ? run_kill_after(j, delay, "--restore", "latest", src, source, NULL)
               : run_kill_after(j, delay, src, source, NULL);
    cr_assert(rc == 0 || rc == KILLED, "exit %d\nhistory: %s", rc, j->history);
    if (rc == 0) break;
    kills++;
  }
  return kills;
}

TX_FN uint64_t seed_from_env(const char *what) {
  const char *env = getenv("WEIR_TEST_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 10)
                              : ((uint64_t)time(NULL) * 1000003u) ^ (uint64_t)getpid();
  fprintf(stderr, "%s: seed %llu (replay: WEIR_TEST_SEED=%llu)\n", what, (ull)seed, (ull)seed);
  rng = seed;
  return seed;
}

/* Crash tests run one at a time whatever --jobs says. */
#define TX_MAIN                                                                                    \
  int main(int argc, char *argv[]) {                                                               \
    setenv("WEIR_LOG", "info", 1);                                                                 \
    signal(SIGPIPE, SIG_IGN);                                                                      \
    struct criterion_test_set *tests = criterion_initialize();                                     \
    int result = 0;                                                                                \
    if (criterion_handle_args(argc, argv, true)) {                                                 \
      criterion_options.jobs = 1;                                                                  \
      result = !criterion_run_all_tests(tests);                                                    \
    }                                                                                              \
    criterion_finalize(tests);                                                                     \
    return result;                                                                                 \
  }

#endif
