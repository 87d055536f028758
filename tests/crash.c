/* tests/crash.c: the crash harness (see crash.h): jobs of the weir binary
 * in temporary directories, their runs, kills, restores and exact checks.
 *
 * DESIGN. Runs go through th_run_killable (helpers.c): stderr into a file
 * of the job's directory, so what a SIGKILLed run wrote is kept and no pipe
 * reader is left waiting. The registry of live jobs is a small static
 * table: a Criterion test runs in a process of its own, one at a time.
 */
#include "crash.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

typedef unsigned long long ull;

#define MAX_LIVE 8
static crash_job *live[MAX_LIVE];

crash_job *crash_at(const char *dir, const char *job, size_t size) {
  crash_job *j = calloc(1, size > sizeof *j ? size : sizeof *j);
  cr_assert_not_null(j);
  cr_assert_lt(strlen(dir), sizeof j->dir - 16, "directory name too long: %s", dir);
  snprintf(j->dir, sizeof j->dir, "%s", dir);
  snprintf(j->state, sizeof j->state, "%s/state", dir);
  snprintf(j->out, sizeof j->out, "%s/out", dir);
  snprintf(j->sink, sizeof j->sink, "file:%s", j->out);
  j->job = job;
  j->workers = "2";
  j->par = "2";
  j->timeout_s = 90;
  crash_hist(j, "dir %s: ", dir);
  for (int i = 0; i < MAX_LIVE; i++)
    if (!live[i]) {
      live[i] = j;
      break;
    }
  return j;
}

crash_job *crash_new(const char *job, size_t size) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir, "th_tmpdir: %s", strerror(errno));
  crash_job *j = crash_at(dir, job, size);
  free(dir);
  return j;
}

crash_job *crash_twin(const crash_job *j, size_t size) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s-twin", j->dir);
  const char *cp[] = {"/bin/cp", "-a", j->dir, dir, NULL};
  cr_assert_eq(th_run(cp, NULL, NULL, NULL, 60), 0, "cp -a %s %s", j->dir, dir);
  crash_job *t = crash_at(dir, j->job, size);
  crash_job fresh = *t;
  memcpy(t, j, size > sizeof *t ? size : sizeof *t);
  memcpy(t->dir, fresh.dir, sizeof t->dir);
  memcpy(t->state, fresh.state, sizeof t->state);
  memcpy(t->out, fresh.out, sizeof t->out);
  memcpy(t->history, fresh.history, sizeof t->history);
  t->runs = 0;
  if (!strncmp(j->sink, "file:", 5) && !strcmp(j->sink + 5, j->out)) {
    memcpy(t->sink, fresh.sink, sizeof t->sink);
    /* The copy's checkpoints name j's output directory: the twin moves
     * its sink to its own copy, which holds the pending parts. */
    t->allow_sink_change = 1;
  }
  /* The arguments that point into j's own buffers point into t's; one
   * that is j's sink (a job .so takes it as an argument) is t's. */
  for (int i = 0; i < t->nargs; i++)
    if (t->args[i] >= j->argbuf && t->args[i] < j->argbuf + sizeof j->argbuf)
      t->args[i] = t->argbuf + (t->args[i] - j->argbuf);
  for (int i = 0; i < t->nargs; i++)
    if (t->allow_sink_change && !strcmp(t->args[i], j->sink)) t->args[i] = t->sink;
  if (j->par == j->parbuf) t->par = t->parbuf;
  return t;
}

void crash_free(crash_job *j) {
  for (int i = 0; i < MAX_LIVE; i++)
    if (live[i] == j) live[i] = NULL;
  if (j->dir[0]) th_rmrf(j->dir);
  free(j);
}

void crash_fini(void) {
  for (int i = 0; i < MAX_LIVE; i++) {
    if (!live[i]) continue;
    if (getenv("WEIR_TEST_KEEP")) {
      fprintf(stderr, "kept %s\n", live[i]->dir);
      live[i]->dir[0] = '\0';
    }
    crash_free(live[i]);
  }
}

/* Copies s into the job's argument buffer. */
static const char *arg_copy(crash_job *j, const char *s) {
  size_t n = strlen(s) + 1;
  cr_assert_leq(j->argused + n, sizeof j->argbuf, "the job's arguments do not fit");
  char *p = j->argbuf + j->argused;
  memcpy(p, s, n);
  j->argused += n;
  return p;
}

void crash_arg(crash_job *j, const char *opt, const char *fmt, ...) {
  cr_assert_lt(j->nargs + 2, CRASH_MAX_ARGS, "too many arguments");
  j->args[j->nargs++] = opt;
  if (fmt) {
    char v[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    j->args[j->nargs++] = arg_copy(j, v);
  }
}

void crash_counter(crash_job *j, uint64_t records, uint64_t keys, const char *rate) {
  j->records = records;
  j->keys = keys;
  crash_arg(j, "--records", "%llu", (ull)records);
  crash_arg(j, "--keys", "%llu", (ull)keys);
  if (rate) crash_arg(j, "--rate", "%s", rate);
}

void crash_par(crash_job *j, int p) {
  snprintf(j->parbuf, sizeof j->parbuf, "%d", p);
  j->par = j->parbuf;
}

void crash_hist(crash_job *j, const char *fmt, ...) {
  size_t n = strlen(j->history);
  if (n + 2 >= sizeof j->history) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->history + n, sizeof j->history - n, fmt, ap);
  va_end(ap);
}

/* Whether j runs a job shared object: `weir run [OPTIONS] PATH.so ARGS`
 * takes the engine's options before the path, and the job's own
 * arguments (its sink among them) after it. */
static int job_is_so(const crash_job *j) {
  size_t n = strlen(j->job);
  return n > 3 && strcmp(j->job + n - 3, ".so") == 0;
}

/* argv of `weir run` for j: its own arguments, the common options, then
 * extra (a job .so: the common options and extra, then the job and its
 * arguments). Returns the index of the first extra. */
static int job_argv(const crash_job *j, const char *argv[], size_t cap, const char *const extra[]) {
  size_t n = 0;
  int so = job_is_so(j);
  argv[n++] = WEIR_BINARY;
  argv[n++] = "run";
  if (!so) {
    argv[n++] = j->job;
    for (int i = 0; i < j->nargs; i++) argv[n++] = j->args[i];
  }
  const char *opts[][2] = {{"--workers", j->workers},      {"--parallelism", j->par},
                           {"--state-dir", j->state},      {"--checkpoint-interval", j->interval},
                           {"--checkpoint-mode", j->mode}, {"--sink", so ? NULL : j->sink}};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
    if (!opts[i][1]) continue;
    argv[n++] = opts[i][0];
    argv[n++] = opts[i][1];
  }
  if (j->allow_sink_change) argv[n++] = "--allow-sink-change";
  int first = (int)n;
  for (size_t i = 0; extra && extra[i]; i++) {
    cr_assert_lt(n + 1, cap, "too many arguments");
    argv[n++] = extra[i];
  }
  if (so) {
    cr_assert_lt(n + (size_t)j->nargs + 1, cap, "too many arguments");
    argv[n++] = j->job;
    for (int i = 0; i < j->nargs; i++) argv[n++] = j->args[i];
  }
  argv[n] = NULL;
  return first;
}

/* The job's environment, set around a run; saved holds what was there. */
static void env_swap(const crash_job *j, char *saved[CRASH_MAX_ENV], int set) {
  for (int i = 0; i < CRASH_MAX_ENV && j->env[i]; i++) {
    char name[64];
    const char *eq = strchr(j->env[i], '=');
    cr_assert(eq && (size_t)(eq - j->env[i]) < sizeof name, "bad environment entry %s", j->env[i]);
    memcpy(name, j->env[i], (size_t)(eq - j->env[i]));
    name[eq - j->env[i]] = '\0';
    if (set) {
      const char *old = getenv(name);
      saved[i] = old ? strdup(old) : NULL;
      setenv(name, eq + 1, 1);
    } else {
      if (saved[i])
        setenv(name, saved[i], 1);
      else
        unsetenv(name);
      free(saved[i]);
    }
  }
}

int crash_runv(crash_job *j, const char *failpoints, int kill_ms, char **err, int64_t *ms,
               const char *const extra[]) {
  const char *argv[CRASH_MAX_ARGS + 32];
  int first = job_argv(j, argv, sizeof argv / sizeof argv[0], extra);
  char errpath[700], *text = NULL, *saved[CRASH_MAX_ENV] = {0};
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", j->dir);
  if (j->before_run) j->before_run(j);
  env_swap(j, saved, 1);
  int rc = th_run_killable(argv, j->dir, failpoints, kill_ms, j->timeout_s, errpath, &text, ms);
  env_swap(j, saved, 0);
  cr_assert_neq(rc, -2, "fork: %s", strerror(errno));
  j->runs++;
  crash_hist(j, "[run %d", j->runs);
  if (failpoints) crash_hist(j, " %s", failpoints);
  if (kill_ms >= 0)
    crash_hist(j, " %s %d ms", rc == CRASH_KILLED ? "killed at" : "ended before a kill at",
               kill_ms);
  for (int i = first; argv[i]; i++) crash_hist(j, " %s", argv[i]);
  crash_hist(j, ": %d] ", rc);
  if (rc != 0 && rc != CRASH_KILLED) { /* why it failed: the end of its stderr */
    size_t n = strlen(text);
    crash_hist(j, "(stderr: %s) ", text + (n > 800 ? n - 800 : 0));
  }
  if (j->after_run) j->after_run(j, rc, text);
  if (err)
    *err = text;
  else
    free(text);
  return rc;
}

int crash_run(crash_job *j, const char *failpoints, int kill_ms, char **err, ...) {
  CRASH_VA_ARRAY(extra, err);
  return crash_runv(j, failpoints, kill_ms, err, NULL, extra);
}

pid_t crash_spawnv(crash_job *j, const char *failpoints, const char *errpath,
                   const char *const extra[]) {
  const char *argv[CRASH_MAX_ARGS + 32];
  job_argv(j, argv, sizeof argv / sizeof argv[0], extra);
  char *saved[CRASH_MAX_ENV] = {0};
  env_swap(j, saved, 1);
  pid_t pid = th_spawn(argv, j->dir, failpoints, errpath);
  env_swap(j, saved, 0);
  cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
  j->runs++;
  return pid;
}

int crash_wait(pid_t pid, int timeout_ms, int stopped) {
  int64_t end = th_mono_ms() + timeout_ms;
  for (;;) {
    int st = 0;
    pid_t w = waitpid(pid, &st, WNOHANG | (stopped ? WUNTRACED : 0));
    if (w == pid) {
      if (WIFSTOPPED(st)) return 1000;
      return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
    }
    if (th_mono_ms() > end) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      kill(pid, SIGCONT);
      waitpid(pid, &st, 0);
      return -1;
    }
    th_sleep_ms(1);
  }
}

void crash_job_id(const crash_job *j, char *id, size_t cap) {
  const char *argv[] = {WEIR_BINARY, "checkpoints", "--state-dir", j->state, "--json", NULL};
  char *out = NULL;
  int rc = th_run(argv, NULL, &out, NULL, j->timeout_s);
  cr_assert_eq(rc, 0, "weir checkpoints: exit %d", rc);
  const char *p = strstr(out, "{\"job\": \"");
  cr_assert_not_null(p, "no job id in %s", out);
  p += 9;
  size_t n = strcspn(p, "\"");
  cr_assert(n > 0 && n < cap, "bad job id in %s", out);
  memcpy(id, p, n);
  id[n] = '\0';
  free(out);
}

void crash_expect_killed(crash_job *j, int rc, const char *err, const char *name, unsigned hit) {
  char want[160];
  if (hit)
    snprintf(want, sizeof want, "failpoint %s: kill (hit %u)", name, hit);
  else
    snprintf(want, sizeof want, "failpoint %s: kill", name);
  cr_assert_eq(rc, CRASH_KILLED, "failpoint %s did not fire: exit %d, stderr: %s\nhistory: %s",
               name, rc, err, j->history);
  cr_assert(strstr(err, want) != NULL, "no '%s' in stderr: %s\nhistory: %s", want, err, j->history);
}

void crash_kill_atv(crash_job *j, const char *name, unsigned hit, int hit_in_log, char **err,
                    const char *const extra[]) {
  char fp[160], *text = NULL;
  snprintf(fp, sizeof fp, "%s=kill@%u", name, hit);
  int rc = crash_runv(j, fp, -1, &text, NULL, extra);
  crash_expect_killed(j, rc, text, name, hit_in_log ? hit : 0);
  if (err)
    *err = text;
  else
    free(text);
}

void crash_kill_at(crash_job *j, const char *name, unsigned hit, int hit_in_log, char **err, ...) {
  CRASH_VA_ARRAY(extra, err);
  crash_kill_atv(j, name, hit, hit_in_log, err, extra);
}

#define RESTORE_ARGS 32

/* "--restore latest" and then extra (may be NULL), NULL terminated. */
static void restore_args(const char *args[RESTORE_ARGS], const char *const extra[]) {
  size_t n = 0;
  args[n++] = "--restore";
  args[n++] = "latest";
  for (size_t i = 0; extra && extra[i]; i++) {
    cr_assert_lt(n + 1, RESTORE_ARGS, "too many arguments");
    args[n++] = extra[i];
  }
  args[n] = NULL;
}

long long crash_restore_to_end(crash_job *j, int attempts, const char *failpoints, char **err,
                               const char *const extra[]) {
  const char *args[RESTORE_ARGS];
  restore_args(args, extra);
  for (int attempt = 0;; attempt++) {
    char *text = NULL;
    int rc = crash_runv(j, failpoints, -1, &text, NULL, args);
    if (rc == CRASH_KILLED && attempt + 1 < attempts) {
      free(text);
      continue;
    }
    cr_assert_eq(rc, 0, "restore: exit %d, stderr: %s\nhistory: %s", rc, text, j->history);
    long long from = th_resumed_from(text);
    crash_hist(j, "(from %lld) ", from);
    if (err)
      *err = text;
    else
      free(text);
    return from;
  }
}

/* ---- seeded random kills --------------------------------------------------- */

uint64_t crash_seed(const char *what) {
  const char *env = getenv("WEIR_TEST_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 10)
                              : ((uint64_t)time(NULL) * 1000003u) ^ (uint64_t)getpid();
  fprintf(stderr, "%s: seed %llu (replay: WEIR_TEST_SEED=%llu)\n", what, (ull)seed, (ull)seed);
  return seed;
}

int crash_delay_within(int64_t dur_ms, int attempt, uint64_t r) {
  int64_t d = dur_ms > 40 ? dur_ms : 40;
  return attempt ? 5 + (int)(r % (uint64_t)(d / 2))
                 : (int)(d / 4 + (int64_t)(r % (uint64_t)(d - d / 4)));
}

long long crash_note_resume(crash_job *j, int attempt, int rc, const char *err, crash_resumes *r) {
  if (!attempt) return 0;
  long long from = th_resumed_from(err);
  /* A run killed before it logged anything may say nothing; a kill after
   * the final checkpoint leaves nothing to do. */
  cr_assert(from >= 0 || rc == CRASH_KILLED || (from == TH_ALREADY_FINISHED && rc == 0),
            "restore said nothing about where it resumed: %s\nhistory: %s", err, j->history);
  if (from > 0) r->resumed++;
  if (from == TH_ALREADY_FINISHED && rc == 0) r->finished_before_kill++;
  return from;
}

int crash_kill_randomly(crash_job *j, const crash_schedule *s, int *runs) {
  const char *args[RESTORE_ARGS];
  restore_args(args, s->extra);
  int kills = 0;
  for (int attempt = 0;; attempt++) {
    int killing = attempt < s->kills;
    if (!killing && !s->restore) break;
    cr_assert_lt(attempt, s->max_attempts, "no end after %d attempts\nhistory: %s", attempt,
                 j->history);
    int delay = s->delay(j, attempt, killing, s->user);
    char *err = NULL;
    int rc = crash_runv(j, NULL, killing ? delay : -1, &err, NULL, attempt ? args : args + 2);
    if (runs) ++*runs;
    cr_assert(rc == 0 || (killing && rc == CRASH_KILLED), "exit %d, stderr: %s\nhistory: %s", rc,
              err, j->history);
    if (s->after) s->after(j, attempt, rc, err, s->user);
    free(err);
    if (rc == 0) break;
    kills++;
  }
  return kills;
}

int crash_kill_loop(const crash_loop *l, int *runs) {
  int kills = 0, n = 0;
  for (int jn = 0; n < l->min_runs || kills < l->min_kills; jn++) {
    if (l->max_jobs)
      cr_assert_lt(jn, l->max_jobs, "only %d kills in %d runs of %d jobs", kills, n, jn);
    crash_job *j = l->new_job(jn, l->user);
    crash_hist(j, "seed %llu, job %d: ", (ull)l->seed, jn);
    crash_schedule s = {.kills = 1 + (int)(th_splitmix64(l->rng) % (uint64_t)l->max_kills),
                        .restore = 1,
                        .max_attempts = l->max_attempts,
                        .delay = l->delay,
                        .after = l->after,
                        .user = l->user};
    kills += crash_kill_randomly(j, &s, &n);
    l->check(j, l->user);
    crash_free(j);
  }
  *runs = n;
  return kills;
}

/* ---- the file sink's output ------------------------------------------------- */

static int visible_file(const struct dirent *e) {
  return e->d_name[0] != '.';
}

static int committed_part(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return e->d_name[0] != '.' && n > 4 && strcmp(e->d_name + n - 4, ".txt") == 0;
}

char *crash_dir_image(const char *dir, int committed_only) {
  struct dirent **names = NULL;
  int n = scandir(dir, &names, committed_only ? committed_part : visible_file, alphasort);
  size_t len = 0;
  char *img = calloc(1, 1);
  cr_assert_not_null(img);
  for (int i = 0; i < n; i++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    size_t flen = 0, nl = strlen(names[i]->d_name);
    char *data = th_read_file(path, &flen);
    if (!data) flen = 0;
    img = realloc(img, len + nl + flen + 3);
    cr_assert_not_null(img);
    memcpy(img + len, names[i]->d_name, nl);
    img[len + nl] = '\n';
    len += nl + 1;
    if (data) memcpy(img + len, data, flen);
    len += flen;
    img[len++] = '\n';
    img[len] = '\0';
    free(data);
    free(names[i]);
  }
  free(names);
  return img;
}

int crash_sink_lines(const char *out, crash_line_fn fn, void *user) {
  DIR *d = opendir(out);
  if (!d) return -1;
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    size_t n = strlen(e->d_name);
    if (!(n > 4 && strcmp(e->d_name + n - 4, ".txt") == 0 && strncmp(e->d_name, "sink-", 5) == 0))
      fn(user, CRASH_STRAY, e->d_name, NULL);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", out, e->d_name);
    char *text = th_read_file(path, NULL);
    if (!text) {
      fn(user, CRASH_UNREADABLE, e->d_name, NULL);
      continue;
    }
    files++;
    for (char *s = text, *nl; *s; s = nl + 1) {
      nl = strchr(s, '\n');
      if (!nl) {
        fn(user, CRASH_UNTERMINATED, e->d_name, s);
        break;
      }
      *nl = '\0';
      fn(user, CRASH_LINE, e->d_name, s);
    }
    free(text);
  }
  closedir(d);
  return files;
}

static void crash_problem(crash_diff *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void crash_problem(crash_diff *d, const char *fmt, ...) {
  if (!d->problems++) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof d->why, fmt, ap);
    va_end(ap);
  }
}

typedef struct diff_ctx {
  crash_diff *d;
  const crash_ref *r;
  uint8_t *seen; /* by id - lo */
  uint64_t sum, wrong;
} diff_ctx;

static void diff_line(void *user, int kind, const char *file, char *s) {
  diff_ctx *c = user;
  crash_diff *d = c->d;
  const crash_ref *r = c->r;
  ull id, value;
  char extra;
  switch (kind) {
  case CRASH_STRAY:
    crash_problem(d, "unexpected file %.64s in the sink directory", file);
    return;
  case CRASH_UNREADABLE:
    crash_problem(d, "cannot read %.64s", file);
    return;
  case CRASH_UNTERMINATED:
    crash_problem(d, "%.64s: last line without a newline: '%.40s'", file, s);
    return;
  }
  if (sscanf(s, "%llu %llu%c", &id, &value, &extra) != 2 || id < r->lo || id > r->hi) {
    crash_problem(d, "%.64s: bad line '%.80s'", file, s);
    return;
  }
  c->sum += value;
  if (c->seen[id - r->lo]++)
    crash_problem(d, "%.64s: %s %llu twice ('%.80s')", file, r->what, id, s);
  uint64_t want = r->value(r->user, id);
  if (value != want) {
    c->wrong++;
    crash_problem(d, "%.64s: '%.80s', expected %llu", file, s, (ull)want);
  }
}

void crash_diff_ids(const char *out, const crash_ref *r, crash_diff *d, uint64_t *sum,
                    uint64_t *wrong) {
  memset(d, 0, sizeof *d);
  uint64_t n = r->hi - r->lo + 1;
  diff_ctx c = {d, r, calloc(n, 1), 0, 0};
  cr_assert_not_null(c.seen);
  if (crash_sink_lines(out, diff_line, &c) < 0) {
    crash_problem(d, "no sink directory %s", out);
    d->problems = n;
  } else {
    uint64_t missing = 0;
    for (uint64_t i = 0; i < n; i++)
      if (!c.seen[i] && !missing++) crash_problem(d, "%s %llu missing", r->what, (ull)(r->lo + i));
    if (missing > 1 && d->problems == 1)
      snprintf(d->why + strlen(d->why), sizeof d->why - strlen(d->why), " (%llu missing)",
               (ull)missing);
    d->problems += missing ? missing - 1 : 0;
  }
  free(c.seen);
  if (sum) *sum = c.sum;
  if (wrong) *wrong = c.wrong;
}

/* ---- the counter job's exact output ----------------------------------------- */

uint64_t crash_n_of(const crash_job *j, uint64_t k) {
  return j->records / j->keys + (k < j->records % j->keys ? 1 : 0);
}

void crash_tally_init(const crash_job *j, crash_tally *t, int exact) {
  memset(t, 0, sizeof *t);
  t->per = j->records / j->keys + 1;
  t->exact = exact;
  t->seen = calloc(j->keys * t->per, sizeof *t->seen);
  cr_assert_not_null(t->seen);
}

void crash_tally_line(crash_job *j, crash_tally *t, const char *line, const char *where) {
  ull k, c;
  char extra;
  cr_assert_eq(sscanf(line, "%llu %llu%c", &k, &c, &extra), 2, "%s: bad line '%s'", where, line);
  cr_assert(k < j->keys && c >= 1, "%s: line '%s' out of range\nhistory: %s", where, line,
            j->history);
  t->lines++;
  if (c > crash_n_of(j, k)) {
    cr_assert_not(t->exact, "%s: '%s' beyond the final count %llu\nhistory: %s", where, line,
                  (ull)crash_n_of(j, k), j->history);
    t->over++;
    return;
  }
  uint32_t *s = &t->seen[k * t->per + c - 1];
  if (t->exact) cr_assert_eq(*s, 0, "%s: line '%s' twice\nhistory: %s", where, line, j->history);
  ++*s;
}

typedef struct tally_ctx {
  crash_job *j;
  crash_tally *t;
} tally_ctx;

static void tally_sink_line(void *user, int kind, const char *file, char *line) {
  tally_ctx *c = user;
  crash_job *j = c->j;
  switch (kind) {
  case CRASH_STRAY:
    cr_assert_not(c->t->exact, "unexpected file %s in the sink directory\nhistory: %s", file,
                  j->history);
    break;
  case CRASH_UNREADABLE:
    cr_assert_fail("cannot read %s/%s\nhistory: %s", j->out, file, j->history);
    break;
  case CRASH_UNTERMINATED:
    cr_assert_fail("%s: last line without newline: '%.40s'\nhistory: %s", file, line, j->history);
    break;
  default:
    crash_tally_line(j, c->t, line, file);
  }
}

int crash_tally_sink(crash_job *j, crash_tally *t) {
  tally_ctx c = {j, t};
  int files = crash_sink_lines(j->out, tally_sink_line, &c);
  cr_assert_geq(files, 0, "no sink directory %s\nhistory: %s", j->out, j->history);
  return files;
}

void crash_tally_check(crash_job *j, const crash_tally *t, const char *what) {
  for (uint64_t k = 0; k < j->keys; k++)
    for (uint64_t c = 1; c <= crash_n_of(j, k); c++)
      cr_assert_eq(t->seen[k * t->per + c - 1], 1,
                   "%s: '%llu %llu' seen %u times (%llu lines of %llu)\nhistory: %s", what, (ull)k,
                   (ull)c, t->seen[k * t->per + c - 1], (ull)t->lines, (ull)j->records, j->history);
  cr_assert_eq(t->lines, j->records, "%s: %llu lines for %llu records\nhistory: %s", what,
               (ull)t->lines, (ull)j->records, j->history);
}

void crash_tally_free(crash_tally *t) {
  free(t->seen);
  t->seen = NULL;
}

void crash_check_counter(crash_job *j) {
  crash_tally t;
  crash_tally_init(j, &t, 1);
  int files = crash_tally_sink(j, &t);
  cr_assert_gt(files, 0, "no sink files\nhistory: %s", j->history);
  crash_tally_check(j, &t, "files");
  crash_tally_free(&t);
}

int crash_main(int argc, char *argv[], const char *log) {
  if (log) setenv("WEIR_LOG", log, 1);
  signal(SIGPIPE, SIG_IGN);
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (criterion_handle_args(argc, argv, true)) {
    criterion_options.jobs = 1;
    result = !criterion_run_all_tests(tests);
  }
  criterion_finalize(tests);
  return result;
}
