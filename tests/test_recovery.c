/* tests/test_recovery.c: owns the crash-recovery tests of the whole `weir`
 * binary: SIGKILL at every checkpoint failpoint and at random times, the job
 * lifecycle in a state directory (new instances, refusals, restores of
 * older checkpoints, --fresh), damaged and future-format stores, and the
 * at-least-once mode, synchronous (stop-the-world) checkpoints, and full
 * disks and store errors.
 *
 * DESIGN. Every test runs the real binary (WEIR_BINARY) on the counter job
 * (gen -> key_by -> count -> file sink, parallelism 2 on 2 workers) in a
 * th_tmpdir of its own, every run with a time limit. Kills come from the
 * engine's failpoints (WEIR_FAILPOINTS=name=kill@N), and each one is
 * asserted to have fired (the process died of SIGKILL and said which
 * failpoint), so a failpoint that is never reached fails its test; random
 * kills come from a seeded delay, printed so a failure can be replayed
 * (WEIR_TEST_SEED=N). After every kill, `weir checkpoints --json` must list
 * only whole checkpoints (each one inspected: six operator subtasks, every
 * generator split once at a valid position) with ids strictly increasing and
 * never reused across attempts. After the job ends, the sink directory must
 * hold, for every key k, the counts 1..n_k EXACTLY once and nothing else:
 * the file sink commits one part per epoch when its checkpoint completed
 * and recovery commits or removes what a crash left pending (sinks/file.c),
 * so this is exactly-once output (TESTING.md
 * invariants 1, 3, 4, 5, 6, 11). Every run's log ("checkpoint N completed")
 * must show ids above every id seen before. Refusals (damaged or newer
 * stores, unknown ids, unfinished jobs) must exit with their code, never by
 * a signal, and leave the sink directory byte for byte as it was.
 *
 * Synchronous checkpoints are killed at the same failpoints and restored
 * (also in aligned mode from a sync run's checkpoint): same exact output.
 * Store failures come from the failpoints store.write_chunk / store.commit
 * (enospc, error), from a store limited with --max-store-size (LMDB's map
 * full) and from a real 2 MB tmpfs (skipped where mount(2) is not allowed):
 * a declined checkpoint's message must name the store's path, the error and
 * the room left; the job runs on (exact output, the declined id never
 * listed), or stops with exit 3 after --tolerable-checkpoint-failures and
 * names its restore point, the latest listed checkpoint, from which a
 * restore gives the exact output.
 *
 * The program has its own main(): it forces Criterion's --jobs 1, so crash
 * runs never compete for the 2 cores (a slow run would shift every kill),
 * whatever the command line says. Nothing here sleeps to synchronise; the
 * only timed waits are the random kills, which are timed by design.
 *
 * Environment: WEIR_TEST_SEED=N replays the random kills' schedule;
 * WEIR_TEST_KEEP=1 keeps a failed test's directory (named in the message);
 * WEIR_TEST_VERBOSE=1 prints the messages of refused runs.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "envelope.h"
#include "helpers.h"
#include "weir/operators.h"
#include "snapshot/store.h"

typedef unsigned long long ull;

#define RUN_TIMEOUT_S 60
#define MAX_ATTEMPTS 10
#define KILLED (128 + SIGKILL)
/* The counter job of every test: ~0.5 s at this rate, so that a 20 ms
 * interval completes several checkpoints before the end of the input. */
#define RECORDS 200000u
#define KEYS 500u
#define RATE "300000"
#define INTERVAL "20"
/* Operator subtasks of the job: gen, count and sink, two each. */
#define SUBTASKS 6
#define MAX_LISTED 64
#define MAX_SEEN 1024

/* ---- a job in a temporary directory -------------------------------------- */

typedef struct job {
  char *dir;   /* th_tmpdir of the test */
  char *state; /* <dir>/state */
  char *out;   /* <dir>/out: the file sink's directory */
  uint64_t records, keys;
  char records_s[24], keys_s[24], sink_s[600];
  const char *interval; /* --checkpoint-interval */
  const char *mode;     /* --checkpoint-mode */
  char job_id[64];      /* from the first listing with a job */
  /* Every checkpoint ever listed (id, completion time), for "never reused". */
  ull seen_id[MAX_SEEN];
  long long seen_time[MAX_SEEN];
  int seen_final[MAX_SEEN]; /* inspected once, when first listed */
  size_t nseen;
  ull max_id;       /* the largest id listed so far */
  ull max_logged;   /* the largest id a run logged as completed so far */
  int one_instance; /* restores resume the latest listed checkpoint */
  int runs;
  struct listing *last; /* the listing after run `last_runs` */
  int last_runs;
  char history[4096]; /* what happened, for failure messages */
} job;

static void hist(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hist(job *j, const char *fmt, ...) {
  size_t n = strlen(j->history);
  if (n + 2 >= sizeof j->history) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->history + n, sizeof j->history - n, fmt, ap);
  va_end(ap);
}

static char *path_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  cr_assert_not_null(p);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

/* The jobs of the running test, so that the suite's teardown removes their
 * directories when an assertion ended the test early (kept with
 * WEIR_TEST_KEEP=1, to look at). */
#define MAX_LIVE 8
static job *live[MAX_LIVE];
static uint32_t *seen_buf; /* the output check's table, see seen_table() */

/* A zeroed table of j->keys x per counters for the output checks. */
static uint32_t *seen_table(const job *j, uint64_t per) {
  free(seen_buf);
  seen_buf = calloc(j->keys * per, sizeof *seen_buf);
  cr_assert_not_null(seen_buf);
  return seen_buf;
}

static void seen_free(void) {
  free(seen_buf);
  seen_buf = NULL;
}

static job *job_new(uint64_t records, uint64_t keys) {
  job *j = calloc(1, sizeof *j);
  cr_assert_not_null(j);
  j->dir = th_tmpdir();
  cr_assert_not_null(j->dir, "th_tmpdir: %s", strerror(errno));
  j->state = path_join(j->dir, "state");
  j->out = path_join(j->dir, "out");
  j->records = records;
  j->keys = keys;
  snprintf(j->records_s, sizeof j->records_s, "%llu", (ull)records);
  snprintf(j->keys_s, sizeof j->keys_s, "%llu", (ull)keys);
  snprintf(j->sink_s, sizeof j->sink_s, "file:%s", j->out);
  j->interval = INTERVAL;
  j->mode = "aligned";
  j->one_instance = 1;
  j->last_runs = -1;
  hist(j, "dir %s: ", j->dir);
  for (int i = 0; i < MAX_LIVE; i++)
    if (!live[i]) {
      live[i] = j;
      break;
    }
  return j;
}

static void job_free(job *j) {
  for (int i = 0; i < MAX_LIVE; i++)
    if (live[i] == j) live[i] = NULL;
  th_rmrf(j->dir);
  free(j->dir);
  free(j->state);
  free(j->out);
  free(j->last);
  free(j);
}

/* Suite teardown: frees what a failed test left. */
static void cleanup(void) {
  seen_free();
  for (int i = 0; i < MAX_LIVE; i++) {
    if (!live[i]) continue;
    if (getenv("WEIR_TEST_KEEP")) {
      fprintf(stderr, "kept %s\n", live[i]->dir);
      free(live[i]->dir);
      live[i]->dir = NULL; /* th_rmrf(NULL) is a no-op */
    }
    job_free(live[i]);
  }
}

/* ---- running weir -------------------------------------------------------- */

/* Arms WEIR_FAILPOINTS for the next child (NULL: none). The test runs in a
 * process of its own (Criterion forks), so the environment is ours. */
static void arm(const char *failpoints) {
  if (failpoints)
    setenv("WEIR_FAILPOINTS", failpoints, 1);
  else
    unsetenv("WEIR_FAILPOINTS");
}

/* argv of `weir run counter` for job j, then the NULL-terminated extras.
 * Returns the index of the first extra. */
static int job_argv(const job *j, const char *argv[64], va_list ap) {
  int n = 0;
  argv[n++] = WEIR_BINARY;
  argv[n++] = "run";
  argv[n++] = "counter";
  const char *fixed[] = {"--records",
                         j->records_s,
                         "--keys",
                         j->keys_s,
                         "--rate",
                         RATE,
                         "--workers",
                         "2",
                         "--parallelism",
                         "2",
                         "--state-dir",
                         j->state,
                         "--checkpoint-interval",
                         j->interval,
                         "--checkpoint-mode",
                         j->mode,
                         "--sink",
                         j->sink_s};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = fixed[i];
  int first = n;
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 63) argv[n++] = a;
  argv[n] = NULL;
  return first;
}

/* Checks the "checkpoint N completed" lines a run logged: ids strictly
 * increasing, all above every id listed or logged before the run (ids are
 * never reused across attempts, even those retention dropped since). */
static void check_run_log(job *j, const char *err, ull floor) {
  ull prev = floor;
  for (const char *p = err ? strstr(err, "checkpoint ") : NULL; p;
       p = strstr(p + 1, "checkpoint ")) {
    ull id;
    char word[16];
    if (sscanf(p, "checkpoint %llu %15s", &id, word) != 2 || strcmp(word, "completed") != 0)
      continue;
    cr_assert_gt(id, prev,
                 "checkpoint %llu completed after %llu (reused or out of order)"
                 "\nhistory: %s",
                 id, prev, j->history);
    prev = id;
  }
  if (prev > j->max_logged) j->max_logged = prev;
}

/* Runs the job with `failpoints` armed and the extra arguments (NULL
 * terminated); returns th_run's code, stderr in *err (caller frees). */
static int run_job(job *j, const char *failpoints, char **err, ...) {
  const char *argv[64];
  va_list ap;
  va_start(ap, err);
  int x = job_argv(j, argv, ap);
  va_end(ap);
  arm(failpoints);
  ull floor = j->max_id > j->max_logged ? j->max_id : j->max_logged;
  int rc = th_run(argv, j->dir, NULL, err, RUN_TIMEOUT_S);
  arm(NULL);
  j->runs++;
  hist(j, "[run %d%s%s", j->runs, failpoints ? " " : "", failpoints ? failpoints : "");
  for (int i = x; argv[i]; i++) hist(j, " %s", argv[i]);
  hist(j, ": %d] ", rc);
  if (err) check_run_log(j, *err, floor);
  return rc;
}

/* Runs `weir ARGS...` (NULL terminated), no failpoint armed. */
static int run_cmd(char **out, char **err, ...) {
  const char *argv[32];
  int n = 0;
  argv[n++] = WEIR_BINARY;
  va_list ap;
  va_start(ap, err);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 31) argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  arm(NULL);
  return th_run(argv, NULL, out, err, RUN_TIMEOUT_S);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs the job (extras NULL terminated) with stdout discarded and stderr in
 * a file, and SIGKILLs its process group if it has not exited after
 * delay_ms. Returns the exit status, or 128 + the signal (KILLED when this
 * function killed it), or -1 if it could not start. */
static int run_job_kill_after(job *j, int delay_ms, char **err, ...) {
  const char *argv[64];
  va_list ap;
  va_start(ap, err);
  int x = job_argv(j, argv, ap);
  va_end(ap);
  char *errpath = path_join(j->dir, "stderr.txt");
  arm(NULL);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    free(errpath);
    return -1;
  }
  if (pid == 0) {
    /* As th_run: a process group of its own, the default signal handling. */
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int nul = open("/dev/null", O_RDWR);
    if (fd < 0 || nul < 0 || chdir(j->dir) != 0) _exit(127);
    dup2(nul, 0);
    dup2(nul, 1);
    dup2(fd, 2);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  setpgid(pid, pid);
  ull floor = j->max_id > j->max_logged ? j->max_id : j->max_logged;
  int64_t kill_at = mono_ms() + delay_ms;
  int st = 0, killed = 0, rc = -1;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) {
      rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
      break;
    }
    if (w < 0 && errno != EINTR) break;
    if (!killed && mono_ms() >= kill_at) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      killed = 1;
      continue; /* reap it */
    }
    struct timespec ts = {0, 1000000L}; /* the kill's time resolution: 1 ms */
    nanosleep(&ts, NULL);
  }
  if (err) {
    *err = th_read_file(errpath, NULL);
    if (*err == NULL) *err = strdup("");
  }
  free(errpath);
  j->runs++;
  hist(j, "[run %d %s %d ms", j->runs, killed ? "killed at" : "ended before a kill at", delay_ms);
  for (int i = x; argv[i]; i++) hist(j, " %s", argv[i]);
  hist(j, ": %d] ", rc);
  if (err) check_run_log(j, *err, floor);
  return rc;
}

/* ---- checkpoint listings ------------------------------------------------- */

typedef struct listing {
  int has_job;
  char job_id[64];
  int finished;
  size_t n;
  ull id[MAX_LISTED];
  long long time[MAX_LISTED];
} listing;

static void parse_listing(const char *s, listing *l) {
  memset(l, 0, sizeof *l);
  const char *p = strstr(s, "{\"job\": ");
  cr_assert_not_null(p, "no job in the listing: %s", s);
  p += 8;
  if (*p == '"') {
    const char *e = strchr(p + 1, '"');
    cr_assert(e != NULL && (size_t)(e - p - 1) < sizeof l->job_id, "bad job id: %s", s);
    memcpy(l->job_id, p + 1, (size_t)(e - p - 1));
    l->has_job = 1;
  } else {
    cr_assert(strncmp(p, "null", 4) == 0, "bad job field: %s", s);
  }
  p = strstr(s, "\"finished\": ");
  cr_assert_not_null(p, "no finished field: %s", s);
  l->finished = strncmp(p + 12, "true", 4) == 0;
  cr_assert(l->finished || strncmp(p + 12, "false", 5) == 0, "bad finished field: %s", s);
  for (p = strstr(s, "{\"id\": "); p; p = strstr(p + 1, "{\"id\": ")) {
    cr_assert_lt(l->n, MAX_LISTED, "too many checkpoints listed: %s", s);
    cr_assert_eq(sscanf(p, "{\"id\": %llu, \"time\": %lld", &l->id[l->n], &l->time[l->n]), 2,
                 "bad checkpoint entry: %s", p);
    l->n++;
  }
}

/* `weir checkpoints --json` of the job's state directory. */
static void get_listing(job *j, listing *l) {
  char *out = NULL, *err = NULL;
  int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", j->state, "--json", NULL);
  cr_assert_eq(rc, 0, "weir checkpoints: exit %d, stderr: %s\nhistory: %s", rc, err, j->history);
  parse_listing(out, l);
  free(out);
  free(err);
}

/* `weir inspect ID --json`: asserts a whole checkpoint of this job (every
 * operator subtask, the generator's splits each once at a valid position;
 * all at the end of the input in a final checkpoint). Returns 1 if it is
 * the job's final checkpoint. */
static int check_inspect(job *j, ull id) {
  char ids[32];
  snprintf(ids, sizeof ids, "%llu", id);
  char *out = NULL, *err = NULL;
  int rc = run_cmd(&out, &err, "inspect", ids, "--state-dir", j->state, "--json", NULL);
  cr_assert_eq(rc, 0, "weir inspect %llu: exit %d, stderr: %s\nhistory: %s", id, rc, err,
               j->history);
  char want[128];
  snprintf(want, sizeof want, "{\"id\": %llu, \"job\": \"%s\"", id, j->job_id);
  cr_assert(strncmp(out, want, strlen(want)) == 0, "inspect %llu: expected '%s' in: %s", id, want,
            out);
  int final = strstr(out, "\"final\": true") != NULL;
  int per_op[3][2] = {{0}}; /* count, gen, sink x subtask */
  static const char *const ops[3] = {"count", "gen", "sink"};
  uint8_t split_seen[WEIR_GEN_SPLITS] = {0};
  int nsub = 0;
  for (const char *p = strstr(out, "{\"operator\": \""); p;
       p = strstr(p + 1, "{\"operator\": \"")) {
    const char *name = p + 14;
    int op = -1;
    for (int k = 0; k < 3; k++)
      if (strncmp(name, ops[k], strlen(ops[k])) == 0 && name[strlen(ops[k])] == '"') op = k;
    cr_assert_geq(op, 0, "inspect %llu: unexpected operator in: %s", id, p);
    unsigned sub = 99, par = 0;
    const char *q = strstr(p, "\"subtask\": ");
    cr_assert_not_null(q);
    cr_assert_eq(sscanf(q, "\"subtask\": %u, \"parallelism\": %u", &sub, &par), 2);
    cr_assert(sub < 2 && par == 2, "inspect %llu: %s subtask %u of %u", id, ops[op], sub, par);
    per_op[op][sub]++;
    nsub++;
    const char *pos = strstr(p, "\"positions\": [");
    cr_assert_not_null(pos);
    pos += 14;
    const char *end = strchr(pos, ']');
    cr_assert_not_null(end);
    unsigned npos = 0;
    for (const char *e = strstr(pos, "{\"split\": "); e && e < end;
         e = strstr(e + 1, "{\"split\": ")) {
      unsigned split;
      ull off;
      cr_assert_eq(sscanf(e, "{\"split\": %u, \"offset\": %llu}", &split, &off), 2);
      cr_assert_eq(op, 1, "inspect %llu: positions for operator %s", id, ops[op]);
      cr_assert_lt(split, WEIR_GEN_SPLITS, "inspect %llu: split %u", id, split);
      cr_assert_eq(split % 2, sub, "inspect %llu: split %u in gen subtask %u", id, split, sub);
      cr_assert_eq(split_seen[split], 0, "inspect %llu: split %u twice", id, split);
      split_seen[split] = 1;
      /* A split's position is its next i (i = split mod S), or the end. */
      cr_assert(off == j->records || (off < j->records && off % WEIR_GEN_SPLITS == split),
                "inspect %llu: split %u at %llu", id, split, off);
      if (final)
        cr_assert_eq(off, j->records, "inspect %llu (final): split %u at %llu", id, split, off);
      npos++;
    }
    if (op == 1)
      cr_assert_eq(npos, WEIR_GEN_SPLITS / 2, "inspect %llu: gen %u has %u", id, sub, npos);
  }
  cr_assert_eq(nsub, SUBTASKS, "inspect %llu: %d operator subtasks in: %s", id, nsub, out);
  for (int k = 0; k < 3; k++)
    for (int s = 0; s < 2; s++)
      cr_assert_eq(per_op[k][s], 1, "inspect %llu: %s/%d listed %d times", id, ops[k], s,
                   per_op[k][s]);
  for (unsigned s = 0; s < WEIR_GEN_SPLITS; s++)
    cr_assert(split_seen[s], "inspect %llu: split %u missing", id, s);
  free(out);
  free(err);
  return final;
}

/* Checks a listing against everything listed before: the same job, ids
 * strictly increasing, an id seen before only with the same completion time
 * (never reused), a new id above every id seen before (monotonic across
 * attempts), every checkpoint whole (inspected when first listed: a
 * completed checkpoint never changes), only the last one final, and only
 * when the job is finished. */
static void check_listing(job *j, const listing *l) {
  if (!l->has_job) {
    cr_assert_eq(l->n, 0, "checkpoints without a job\nhistory: %s", j->history);
    return;
  }
  if (!j->job_id[0])
    snprintf(j->job_id, sizeof j->job_id, "%s", l->job_id);
  else
    cr_assert_str_eq(l->job_id, j->job_id, "the job id changed\nhistory: %s", j->history);
  ull max_before = j->max_id;
  for (size_t i = 0; i < l->n; i++) {
    if (i) cr_assert_gt(l->id[i], l->id[i - 1], "ids not increasing\nhistory: %s", j->history);
    size_t k = 0;
    while (k < j->nseen && j->seen_id[k] != l->id[i]) k++;
    if (k < j->nseen) {
      cr_assert_eq(l->time[i], j->seen_time[k], "checkpoint %llu changed (id reused?)\nhistory: %s",
                   l->id[i], j->history);
    } else {
      cr_assert_gt(l->id[i], max_before,
                   "new checkpoint %llu not above %llu, an id listed before\nhistory: %s", l->id[i],
                   max_before, j->history);
      cr_assert_lt(j->nseen, MAX_SEEN);
      j->seen_id[j->nseen] = l->id[i];
      j->seen_time[j->nseen] = l->time[i];
      j->seen_final[j->nseen++] = check_inspect(j, l->id[i]);
      if (l->id[i] > j->max_id) j->max_id = l->id[i];
    }
    int final = j->seen_final[k];
    if (final && j->one_instance)
      cr_assert(i + 1 == l->n && l->finished, "checkpoint %llu is final\nhistory: %s", l->id[i],
                j->history);
  }
  if (l->finished) cr_assert_gt(l->n, 0, "finished without a checkpoint");
}

/* The checked listing after the job's last run (listed once per run). */
static void listing_now(job *j, listing *l) {
  if (j->last_runs == j->runs) {
    *l = *j->last;
    return;
  }
  get_listing(j, l);
  check_listing(j, l);
  if (!j->last) j->last = malloc(sizeof *j->last);
  cr_assert_not_null(j->last);
  *j->last = *l;
  j->last_runs = j->runs;
}

/* Was checkpoint id final when it was first listed? */
static int was_final(const job *j, ull id) {
  for (size_t k = 0; k < j->nseen; k++)
    if (j->seen_id[k] == id) return j->seen_final[k];
  return 0;
}

/* ---- the sink's output --------------------------------------------------- */

/* n_k: the number of i < N with i mod K = k. */
static uint64_t n_of(const job *j, uint64_t k) {
  return j->records / j->keys + (k < j->records % j->keys ? 1 : 0);
}

/* Reads every line of every file in the sink directory into seen[]
 * (per slots per key: occurrences of (key, count) for count 1..per) and
 * returns the number of lines. exact: a file that is not a finished sink
 * file (a .pending file left behind), a line twice or a count above n_k
 * fail the test; otherwise lines with a count above n_k are only counted in
 * *over. A malformed line or key fails the test in both modes. */
static uint64_t read_output(job *j, uint32_t *seen, uint64_t per, int exact, uint64_t *over) {
  DIR *d = opendir(j->out);
  cr_assert_not_null(d, "no sink directory %s\nhistory: %s", j->out, j->history);
  struct dirent *e;
  uint64_t lines = 0;
  int files = 0;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    size_t n = strlen(e->d_name);
    int txt = n > 4 && strcmp(e->d_name + n - 4, ".txt") == 0;
    if (exact)
      cr_assert(txt && strncmp(e->d_name, "sink-", 5) == 0,
                "unexpected file %s in the sink directory\nhistory: %s", e->d_name, j->history);
    char *p = path_join(j->out, e->d_name);
    char *text = th_read_file(p, NULL);
    cr_assert_not_null(text, "cannot read %s", p);
    files++;
    for (char *s = text, *nl; *s; s = nl + 1) {
      nl = strchr(s, '\n');
      cr_assert_not_null(nl, "%s: last line without newline: '%.40s'\nhistory: %s", e->d_name, s,
                         j->history);
      *nl = '\0';
      ull key, count;
      char extra;
      cr_assert_eq(sscanf(s, "%llu %llu%c", &key, &count, &extra), 2, "%s: bad line '%s'",
                   e->d_name, s);
      cr_assert_lt(key, j->keys, "%s: key out of range: '%s'", e->d_name, s);
      cr_assert_geq(count, 1, "%s: count out of range: '%s'", e->d_name, s);
      lines++;
      if (count > n_of(j, key)) {
        cr_assert_not(exact, "%s: '%s' beyond the final count %llu\nhistory: %s", e->d_name, s,
                      (ull)n_of(j, key), j->history);
        ++*over;
        continue;
      }
      if (exact)
        cr_assert_eq(seen[key * per + count - 1], 0, "%s: line '%s' twice\nhistory: %s", e->d_name,
                     s, j->history);
      seen[key * per + count - 1]++;
    }
    free(text);
    free(p);
  }
  closedir(d);
  cr_assert_gt(files, 0, "no sink files\nhistory: %s", j->history);
  return lines;
}

/* The exactly-once check: for every key k, the counts 1..n_k once each,
 * nothing else, and no unfinished file. */
static void check_exact(job *j) {
  uint64_t per = j->records / j->keys + 1;
  uint32_t *seen = seen_table(j, per);
  uint64_t over = 0;
  uint64_t lines = read_output(j, seen, per, 1, &over);
  for (uint64_t k = 0; k < j->keys; k++) {
    uint64_t n = n_of(j, k);
    for (uint64_t c = 1; c <= per; c++) {
      if (c <= n)
        cr_assert_eq(seen[k * per + c - 1], 1,
                     "line '%llu %llu' missing (%llu lines of %llu)"
                     "\nhistory: %s",
                     (ull)k, (ull)c, (ull)lines, (ull)j->records, j->history);
      else
        cr_assert_eq(seen[k * per + c - 1], 0, "line '%llu %llu' beyond the final count", (ull)k,
                     (ull)c);
    }
  }
  cr_assert_eq(lines, j->records);
  seen_free();
}

/* All files of the sink directory, names and contents, as one string: to
 * check that a refused run wrote nothing. */
static char *dir_image(const char *dir) {
  struct dirent **names = NULL;
  int n = scandir(dir, &names, NULL, alphasort);
  size_t len = 0;
  char *img = calloc(1, 1);
  for (int i = 0; i < n; i++) {
    if (names[i]->d_name[0] != '.') {
      char *p = path_join(dir, names[i]->d_name);
      size_t flen = 0;
      char *data = th_read_file(p, &flen);
      size_t nl = strlen(names[i]->d_name);
      img = realloc(img, len + nl + 2 + flen + 1);
      memcpy(img + len, names[i]->d_name, nl);
      img[len + nl] = '\n';
      len += nl + 1;
      if (data) memcpy(img + len, data, flen);
      len += data ? flen : 0;
      img[len++] = '\n';
      img[len] = '\0';
      free(data);
      free(p);
    }
    free(names[i]);
  }
  free(names);
  return img;
}

/* ---- the recovery loop --------------------------------------------------- */

/* A run that a failpoint killed: died of SIGKILL after naming the
 * failpoint (hit `hit`). Then the listing is checked. */
static void expect_killed_at(job *j, int rc, const char *err, const char *name, unsigned hit) {
  char want[128];
  snprintf(want, sizeof want, "failpoint %s: kill (hit %u)", name, hit);
  cr_assert_eq(rc, KILLED, "failpoint %s=kill@%u did not fire: exit %d, stderr: %s\nhistory: %s",
               name, hit, rc, err, j->history);
  cr_assert(strstr(err, want) != NULL, "no '%s' in stderr: %s", want, err);
  listing l;
  listing_now(j, &l);
  cr_assert_not(l.finished, "a killed job is listed as finished\nhistory: %s", j->history);
}

/* One `--restore latest` run that must end the job, with stderr saying
 * where it resumed: the latest listed checkpoint, or the beginning. */
static void restore_to_end(job *j) {
  listing l;
  listing_now(j, &l);
  char *err = NULL;
  int rc = run_job(j, NULL, &err, "--restore", "latest", NULL);
  cr_assert_eq(rc, 0, "restore: exit %d, stderr: %s\nhistory: %s", rc, err, j->history);
  if (j->one_instance) {
    char want[160];
    if (l.n)
      snprintf(want, sizeof want, "restored job %s from checkpoint %llu", l.job_id, l.id[l.n - 1]);
    else
      snprintf(want, sizeof want, "starting from the beginning");
    cr_assert(strstr(err, want) != NULL, "no '%s' in stderr: %s\nhistory: %s", want, err,
              j->history);
  }
  free(err);
}

/* The end of every recovery scenario: finished, listed whole, exact. */
static void check_finished(job *j) {
  listing l;
  listing_now(j, &l);
  cr_assert(l.finished, "the job is not listed as finished\nhistory: %s", j->history);
  cr_assert(was_final(j, l.id[l.n - 1]), "the last checkpoint is not final");
  check_exact(j);
}

/* Kill at failpoint `name` hit 1, 2, 3 (each in a new directory) in
 * checkpoint mode `mode`, then restore until done. */
static void kill_at_in(const char *name, const char *mode) {
  for (unsigned hit = 1; hit <= 3; hit++) {
    job *j = job_new(RECORDS, KEYS);
    j->mode = mode;
    char fp[128];
    snprintf(fp, sizeof fp, "%s=kill@%u", name, hit);
    char *err = NULL;
    int rc = run_job(j, fp, &err, NULL);
    expect_killed_at(j, rc, err, name, hit);
    free(err);
    restore_to_end(j);
    check_finished(j);
    job_free(j);
  }
  cr_assert_eq(th_leak_check(), 0);
}

static void kill_at(const char *name) {
  kill_at_in(name, "aligned");
}

TestSuite(recovery, .timeout = 150, .fini = cleanup);

Test(recovery, kill_at_barrier_injected) {
  kill_at("ckpt.barrier_injected");
}
Test(recovery, kill_at_aligning) {
  kill_at("ckpt.aligning");
}
Test(recovery, kill_at_after_sync_snapshot) {
  kill_at("ckpt.after_sync_snapshot");
}
Test(recovery, kill_at_after_chunk_write) {
  kill_at("ckpt.after_chunk_write");
}
Test(recovery, kill_at_before_meta_commit) {
  kill_at("ckpt.before_meta_commit");
}
Test(recovery, kill_at_after_meta_commit) {
  kill_at("ckpt.after_meta_commit");
}

/* A first run killed after its second checkpoint completed; then the
 * restore killed while loading (hit 1: the coordinator's load; hits 2, 3:
 * operator subtasks installing their state); then a restore that ends. */
Test(recovery, kill_during_restore) {
  for (unsigned hit = 1; hit <= 3; hit++) {
    job *j = job_new(RECORDS, KEYS);
    char *err = NULL;
    int rc = run_job(j, "ckpt.after_meta_commit=kill@2", &err, NULL);
    expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 2);
    free(err);
    listing before, after;
    listing_now(j, &before);
    cr_assert_geq(before.n, 2);
    char fp[64];
    snprintf(fp, sizeof fp, "ckpt.during_restore=kill@%u", hit);
    rc = run_job(j, fp, &err, "--restore", "latest", NULL);
    expect_killed_at(j, rc, err, "ckpt.during_restore", hit);
    free(err);
    /* A killed restore completed nothing. */
    listing_now(j, &after);
    cr_assert_eq(after.n, before.n);
    cr_assert_eq(after.id[after.n - 1], before.id[before.n - 1]);
    restore_to_end(j);
    check_finished(j);
    job_free(j);
  }
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed during the job's FINAL checkpoint (before its metadata commit),
 * after the sink subtasks had pre-committed their last epoch; the restore
 * resumes an earlier checkpoint. A regression test: when the file sink
 * wrote one file per subtask, the restore started an empty file and renamed
 * it over the complete one, losing every line before the cut. With a part
 * per epoch, the restore removes the uncommitted parts after the restored
 * checkpoint and the output is exact. */
Test(recovery, kill_during_final_checkpoint) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@1", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 1);
  free(err);
  /* No periodic checkpoint in this run: the first one is the final one. */
  rc = run_job(j, "ckpt.before_meta_commit=kill@1", &err, "--restore", "latest",
               "--checkpoint-interval", "0", NULL);
  expect_killed_at(j, rc, err, "ckpt.before_meta_commit", 1);
  free(err);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- random kills -------------------------------------------------------- */

static uint64_t rng;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* At least 20 runs: jobs killed by SIGKILL at random delays (1 to 3 kills
 * each, up to 650 ms into a ~0.5 s run, so some runs end before the kill),
 * restored until they end; each checked exactly. The seed is printed;
 * WEIR_TEST_SEED=N replays it. */
Test(recovery, random_kills) {
  const char *env = getenv("WEIR_TEST_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 10)
                              : ((uint64_t)time(NULL) * 1000003u) ^ (uint64_t)getpid();
  fprintf(stderr, "recovery::random_kills: seed %llu (replay: WEIR_TEST_SEED=%llu)\n", (ull)seed,
          (ull)seed);
  rng = seed;
  int runs = 0, kills = 0;
  for (int jn = 0; runs < 20; jn++) {
    job *j = job_new(RECORDS, KEYS);
    hist(j, "seed %llu, job %d: ", (ull)seed, jn);
    int want_kills = 1 + (int)(rnd() % 3), attempt = 0;
    for (;;) {
      cr_assert_lt(attempt, MAX_ATTEMPTS, "no end after %d attempts\nhistory: %s", attempt,
                   j->history);
      char *err = NULL;
      int rc;
      int killing = attempt < want_kills;
      if (killing) {
        int delay = 5 + (int)(rnd() % 645);
        rc = attempt ? run_job_kill_after(j, delay, &err, "--restore", "latest", NULL)
                     : run_job_kill_after(j, delay, &err, NULL);
      } else {
        rc = run_job(j, NULL, &err, "--restore", "latest", NULL);
      }
      runs++;
      attempt++;
      cr_assert(rc == 0 || (killing && rc == KILLED), "exit %d, stderr: %s\nhistory: %s", rc, err,
                j->history);
      free(err);
      if (rc == 0) break;
      kills++;
      listing l;
      listing_now(j, &l);
    }
    /* A run may have ended before its kill: then it is done. */
    check_finished(j);
    job_free(j);
  }
  fprintf(stderr, "recovery::random_kills: %d runs, %d killed\n", runs, kills);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- lifecycle ----------------------------------------------------------- */

TestSuite(lifecycle, .timeout = 120, .fini = cleanup);

/* Two complete runs on one state directory: the second is a new instance
 * of the same job, its checkpoint ids continue above the first's. */
Test(lifecycle, run_twice) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, NULL, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  free(err);
  listing a, b;
  listing_now(j, &a);
  cr_assert(a.finished);
  check_exact(j);
  j->one_instance = 0; /* the first instance's final checkpoint may stay listed */
  rc = run_job(j, NULL, &err, NULL);
  cr_assert_eq(rc, 0, "second run: exit %d: %s", rc, err);
  free(err);
  listing_now(j, &b); /* same job id, new ids above the first run's */
  cr_assert(b.finished);
  cr_assert_gt(b.id[0], a.id[a.n - 1], "the second instance's checkpoints reuse ids");
  check_exact(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A plain run on an unfinished job is refused (exit 2) naming both ways
 * on, and changes nothing. */
Test(lifecycle, unfinished_is_refused) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@2", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 2);
  free(err);
  listing before, after;
  listing_now(j, &before);
  char *img = dir_image(j->out);
  rc = run_job(j, NULL, &err, NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "--restore latest") != NULL, "no '--restore latest' in: %s", err);
  cr_assert(strstr(err, "--fresh") != NULL, "no '--fresh' in: %s", err);
  free(err);
  char *img2 = dir_image(j->out);
  cr_assert_str_eq(img, img2, "a refused run changed the output");
  listing_now(j, &after);
  cr_assert_eq(after.n, before.n);
  cr_assert_eq(after.id[after.n - 1], before.id[before.n - 1]);
  free(img);
  free(img2);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed before any checkpoint completed (the first barrier): --restore
 * latest starts from the beginning, says so, and the output is exact. */
Test(lifecycle, restore_without_checkpoint) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "ckpt.barrier_injected=kill@1", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.barrier_injected", 1);
  free(err);
  listing l;
  listing_now(j, &l);
  cr_assert_eq(l.n, 0);
  restore_to_end(j); /* asserts "starting from the beginning" */
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The same with checkpoints off (interval 0: only the final one), killed
 * at that final checkpoint's commit. */
Test(lifecycle, restore_without_checkpoint_interval_0) {
  job *j = job_new(RECORDS, KEYS);
  j->interval = "0";
  char *err = NULL;
  int rc = run_job(j, "ckpt.before_meta_commit=kill@1", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.before_meta_commit", 1);
  free(err);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* --restore latest on a finished job: exit 0, "already finished", nothing
 * written. */
Test(lifecycle, restore_finished_is_noop) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, NULL, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  free(err);
  listing a, b;
  listing_now(j, &a);
  char *img = dir_image(j->out);
  rc = run_job(j, NULL, &err, "--restore", "latest", NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "already finished") != NULL && strstr(err, "nothing to do") != NULL,
            "stderr: %s", err);
  free(err);
  char *img2 = dir_image(j->out);
  cr_assert_str_eq(img, img2, "a restore of a finished job changed the output");
  listing_now(j, &b);
  cr_assert_eq(b.n, a.n);
  cr_assert_eq(b.id[b.n - 1], a.id[a.n - 1]);
  free(img);
  free(img2);
  check_exact(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* --restore ID of the oldest retained checkpoint (not the latest). */
Test(lifecycle, restore_older_id) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@2", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 2);
  free(err);
  listing l;
  listing_now(j, &l);
  cr_assert_geq(l.n, 2);
  char id[32];
  snprintf(id, sizeof id, "%llu", l.id[0]);
  rc = run_job(j, NULL, &err, "--restore", id, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  char want[128];
  snprintf(want, sizeof want, "from checkpoint %llu", l.id[0]);
  cr_assert(strstr(err, want) != NULL, "no '%s' in: %s", want, err);
  free(err);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* --restore of an id that is not retained: exit 2, naming it; nothing
 * written. */
Test(lifecycle, restore_unknown_id) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@1", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 1);
  free(err);
  char *img = dir_image(j->out);
  rc = run_job(j, NULL, &err, "--restore", "999999", NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "999999") != NULL, "stderr: %s", err);
  free(err);
  char *img2 = dir_image(j->out);
  cr_assert_str_eq(img, img2, "a refused restore changed the output");
  free(img);
  free(img2);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* --fresh on an unfinished job: a new instance of the same job runs from
 * the beginning, ids continue, the output is the new run's, exact. */
Test(lifecycle, fresh_on_unfinished) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@2", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 2);
  free(err);
  listing a, b;
  listing_now(j, &a);
  j->one_instance = 0;
  rc = run_job(j, NULL, &err, "--fresh", NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "restored") == NULL, "--fresh restored: %s", err);
  free(err);
  listing_now(j, &b); /* same job id, ids above the first instance's */
  cr_assert(b.finished);
  cr_assert_gt(b.id[b.n - 1], a.id[a.n - 1]);
  check_exact(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* `weir checkpoints --json` where there is no store: an empty listing,
 * exit 0, and nothing created. */
Test(lifecycle, checkpoints_on_empty_dir) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char *missing = path_join(dir, "nothing-here");
  const char *dirs[2] = {dir, missing};
  for (int i = 0; i < 2; i++) {
    char *out = NULL, *err = NULL;
    int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", dirs[i], "--json", NULL);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", dirs[i], rc, err);
    cr_assert_str_eq(out, "{\"job\": null, \"finished\": false, \"checkpoints\": []}\n");
    free(out);
    free(err);
  }
  struct stat st;
  cr_assert_neq(stat(missing, &st), 0, "weir checkpoints created %s", missing);
  char *store = path_join(dir, "store");
  cr_assert_neq(stat(store, &st), 0, "weir checkpoints created %s", store);
  free(store);
  free(missing);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* `weir inspect ID --json`: per-subtask entries (operator, subtask,
 * parallelism, entries) and the generator's positions; an unknown id is a
 * usage error. */
Test(lifecycle, inspect_json) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@2", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 2); /* inspects every listed one */
  free(err);
  listing l;
  listing_now(j, &l);
  char id[32], *out = NULL;
  snprintf(id, sizeof id, "%llu", l.id[l.n - 1]);
  rc = run_cmd(&out, &err, "inspect", id, "--state-dir", j->state, "--json", NULL);
  cr_assert_eq(rc, 0);
  /* Keyed state: the two count subtasks hold the keys seen so far. */
  unsigned long long e0 = 0, e1 = 0;
  const char *c0 = strstr(out, "{\"operator\": \"count\", \"subtask\": 0");
  const char *c1 = strstr(out, "{\"operator\": \"count\", \"subtask\": 1");
  cr_assert(c0 && c1, "%s", out);
  cr_assert_eq(sscanf(strstr(c0, "\"u64_entries\": "), "\"u64_entries\": %llu", &e0), 1);
  cr_assert_eq(sscanf(strstr(c1, "\"u64_entries\": "), "\"u64_entries\": %llu", &e1), 1);
  cr_assert(e0 + e1 > 0 && e0 + e1 <= KEYS, "count entries %llu + %llu", e0, e1);
  free(out);
  free(err);
  rc = run_cmd(&out, &err, "inspect", "999999", "--state-dir", j->state, "--json", NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "999999") != NULL, "%s", err);
  free(out);
  free(err);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- damage -------------------------------------------------------------- */

TestSuite(damage, .timeout = 120, .fini = cleanup);

static char *data_mdb(const job *j) {
  char *store = path_join(j->state, "store");
  char *p = path_join(store, "data.mdb");
  free(store);
  return p;
}

static uint64_t be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
  return v;
}

/* locate's kind for u64 state: a chunk with its keys or, when the
 * checkpoint shares the keys of an earlier one, with its values only. */
#define U64_STATE (-1)

/* Finds a stored value in <state>/store with LMDB itself (read-only, no
 * lock file use): the job record (db "job"), the metadata of checkpoint id
 * (db "meta"), or the first chunk of checkpoint id whose envelope kind is
 * `kind` (db "chunks"). Returns a malloc'd copy of the value (*len bytes). */
static uint8_t *locate(const job *j, const char *db, ull id, int kind, size_t *len) {
  char *store = path_join(j->state, "store");
  MDB_env *env = NULL;
  cr_assert_eq(mdb_env_create(&env), 0);
  cr_assert_eq(mdb_env_set_maxdbs(env, 4), 0);
  int rc = mdb_env_open(env, store, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0644);
  cr_assert_eq(rc, 0, "mdb_env_open %s: %s", store, mdb_strerror(rc));
  MDB_txn *txn = NULL;
  cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
  MDB_dbi dbi;
  cr_assert_eq(mdb_dbi_open(txn, db, 0, &dbi), 0, "no database %s", db);
  uint8_t kb[16] = {0};
  for (int i = 0; i < 8; i++) kb[i] = (uint8_t)(id >> (56 - 8 * i));
  MDB_val key, val;
  int found = 0;
  if (!strcmp(db, "job")) {
    key = (MDB_val){3, (void *)"job"};
    found = mdb_get(txn, dbi, &key, &val) == 0;
  } else if (!strcmp(db, "meta")) {
    key = (MDB_val){8, kb};
    found = mdb_get(txn, dbi, &key, &val) == 0;
  } else {
    MDB_cursor *cur = NULL;
    cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
    key = (MDB_val){16, kb};
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
      if (key.mv_size != 16 || be64(key.mv_data) != id) break;
      const uint8_t *v = val.mv_data;
      found = val.mv_size > WEIR__ENV_HDR + 8 && v[7] == 0 &&
              (v[6] == kind ||
               (kind == U64_STATE && (v[6] == WEIR__KIND_U64 || v[6] == WEIR__KIND_U64_VALUES)));
      if (found) break;
    }
    mdb_cursor_close(cur);
  }
  cr_assert(found, "no %s value for checkpoint %llu (kind %d)", db, id, kind);
  cr_assert(memcmp(val.mv_data, "WEIR", 4) == 0, "the %s value has no envelope", db);
  uint8_t *copy = malloc(val.mv_size);
  memcpy(copy, val.mv_data, val.mv_size);
  *len = val.mv_size;
  mdb_txn_abort(txn);
  mdb_env_close(env);
  free(store);
  return copy;
}

/* Replaces every copy of the value `old` in data.mdb by `new` (same
 * length): the live one and any stale copy on a free page. Returns how
 * many. */
static int replace_value(const job *j, const uint8_t *old, const uint8_t *new, size_t len) {
  char *mdb = data_mdb(j);
  size_t flen = 0;
  char *d = th_read_file(mdb, &flen);
  cr_assert_not_null(d);
  int n = 0;
  for (size_t i = 0; i + len <= flen; i++) {
    if (memcmp(d + i, old, len) != 0) continue;
    memcpy(d + i, new, len);
    n++;
  }
  cr_assert_gt(n, 0, "the value is not in %s", mdb);
  cr_assert_eq(th_write_file(mdb, d, flen), 0);
  free(d);
  free(mdb);
  return n;
}

static void patch_file(const char *path, long off, const void *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
  cr_assert_eq(pwrite(fd, p, n, off), (ssize_t)n);
  cr_assert_eq(close(fd), 0);
}

/* A job killed after its third checkpoint committed (three retained). */
static job *killed_with_checkpoints(listing *l) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@3", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 3);
  free(err);
  listing_now(j, l);
  cr_assert_eq(l->n, 3);
  return j;
}

/* A refused run: exit `code` (not a signal), stderr naming `want` (if not
 * NULL), and the sink directory untouched. Returns stderr (caller frees). */
static char *expect_refused(job *j, int code, const char *want, const char *const img,
                            const char *restore) {
  char *err = NULL;
  int rc = run_job(j, NULL, &err, "--restore", restore, NULL);
  cr_assert_lt(rc, 128, "the run died of signal %d: %s", rc - 128, err);
  cr_assert_eq(rc, code, "exit %d (expected %d): %s", rc, code, err);
  if (want) cr_assert(strstr(err, want) != NULL, "no '%s' in: %s", want, err);
  if (getenv("WEIR_TEST_VERBOSE")) fprintf(stderr, "refused (exit %d): %s", rc, err);
  char *now = dir_image(j->out);
  cr_assert_str_eq(img, now, "a refused run changed the output");
  free(now);
  return err;
}

/* (a) A flipped payload byte in a chunk of the latest checkpoint: refused
 * (exit 3) naming the checkpoint, nothing run; (b) an older checkpoint,
 * whose chunks are intact, restores explicitly and the output is exact. */
Test(damage, flipped_chunk_byte) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  ull latest = l.id[l.n - 1];
  size_t len;
  uint8_t *v = locate(j, "chunks", latest, U64_STATE, &len);
  uint8_t *bad = malloc(len);
  memcpy(bad, v, len);
  bad[WEIR__ENV_HDR + 5] ^= 0x5a;
  replace_value(j, v, bad, len);
  free(v);
  free(bad);
  char *img = dir_image(j->out);
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu", latest);
  char *err = expect_refused(j, 3, want, img, "latest");
  free(err);
  /* Listing still works (the metadata is intact). */
  listing l2;
  get_listing(j, &l2);
  cr_assert_eq(l2.n, l.n);
  snprintf(want, sizeof want, "%llu", l.id[l.n - 2]);
  int rc = run_job(j, NULL, &err, "--restore", want, NULL);
  cr_assert_eq(rc, 0, "restore of %s: exit %d: %s", want, rc, err);
  free(err);
  /* The damaged checkpoint stays listed until retention drops it: check
   * the end without inspecting it. */
  get_listing(j, &l2);
  cr_assert(l2.finished);
  cr_assert_gt(l2.id[l2.n - 1], latest);
  check_exact(j);
  free(img);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* (c) data.mdb truncated to half: refused, no signal, nothing run. */
Test(damage, truncated_store) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  char *mdb = data_mdb(j);
  struct stat st;
  cr_assert_eq(stat(mdb, &st), 0);
  cr_assert_eq(truncate(mdb, st.st_size / 2), 0);
  char *img = dir_image(j->out);
  char *err = expect_refused(j, 3, NULL, img, "latest");
  cr_assert(strstr(err, "corrupt") != NULL || strstr(err, "damaged") != NULL,
            "no clear message: %s", err);
  free(err);
  char *out = NULL;
  int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", j->state, "--json", NULL);
  cr_assert(rc == 0 || rc == 3, "weir checkpoints on a truncated store: exit %d: %s", rc, err);
  free(out);
  free(err);
  free(img);
  free(mdb);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The page number of the main (named-database) root of data.mdb's newer
 * meta page, read from LMDB 0.9's on-disk meta layout (64-bit): after the
 * 16-byte page header, magic u32, version u32, address, map size, then the
 * free and the main database records (48 bytes each, the root last), the
 * last page and the txn id. 0 if the layout is not the one expected. */
static uint64_t main_root_page(const char *mdb) {
  size_t len = 0;
  char *d = th_read_file(mdb, &len);
  cr_assert_not_null(d);
  uint64_t root = 0, best = 0;
  for (int m = 0; m < 2 && len >= 2 * 4096; m++) {
    const char *p = d + m * 4096 + 16;
    uint32_t magic;
    uint64_t r, txn;
    memcpy(&magic, p, 4);
    memcpy(&r, p + 24 + 48 + 40, 8);
    memcpy(&txn, p + 24 + 96 + 8, 8);
    if (magic == 0xBEEFC0DEu && txn >= best && r >= 2 && r < len / 4096) {
      best = txn;
      root = r;
    }
  }
  free(d);
  return root;
}

/* (d) Garbage over LMDB's own pages 2..5 (branch, leaf and free-list pages
 * of a small store) and over the live main root page (pages 2..5 may all
 * be free, their contents stale, depending on how the writes were grouped
 * into transactions): refused, no signal, nothing run. */
Test(damage, scribbled_pages) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  char *mdb = data_mdb(j);
  struct stat st;
  cr_assert_eq(stat(mdb, &st), 0);
  cr_assert_geq(st.st_size, 6 * 4096);
  uint64_t root = main_root_page(mdb);
  cr_assert_gt(root, 0, "no meta page with a main root in %s", mdb);
  uint8_t junk[4 * 4096];
  rng = 12345;
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)rnd();
  patch_file(mdb, 2 * 4096, junk, sizeof junk);
  patch_file(mdb, (long)root * 4096, junk, 4096);
  char *img = dir_image(j->out);
  char *err = expect_refused(j, 3, NULL, img, "latest");
  cr_assert(strstr(err, "corrupt") != NULL || strstr(err, "damaged") != NULL,
            "no clear message: %s", err);
  free(err);
  char *out = NULL;
  int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", j->state, "--json", NULL);
  cr_assert(rc == 0 || rc == 3, "weir checkpoints on a scribbled store: exit %d: %s", rc, err);
  free(out);
  free(err);
  free(img);
  free(mdb);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Rewrites every copy of the value v (len bytes) with its envelope as
 * written by format WEIR_STORE_FORMAT + 1, with a valid checksum. Frees v. */
static void make_future(const job *j, uint8_t *v, size_t len) {
  uint8_t *f = malloc(len);
  memcpy(f, v, len);
  uint16_t kind = (uint16_t)(v[6] | v[7] << 8);
  weir__env_seal(f, (uint16_t)(WEIR_STORE_FORMAT + 1), kind, (uint32_t)(len - WEIR__ENV_HDR));
  replace_value(j, v, f, len);
  free(f);
  free(v);
}

/* (e) The latest checkpoint's metadata written by a newer format: refused
 * (exit 3) saying so; the older ones still restore. */
Test(damage, future_format_checkpoint) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  ull latest = l.id[l.n - 1];
  size_t len;
  uint8_t *v = locate(j, "meta", latest, 0, &len);
  make_future(j, v, len);
  char *img = dir_image(j->out);
  char *err = expect_refused(j, 3, NULL, img, "latest");
  cr_assert(strstr(err, "format") != NULL || strstr(err, "newer") != NULL,
            "the message does not say newer format: %s", err);
  free(err);
  char id[32];
  snprintf(id, sizeof id, "%llu", l.id[0]);
  int rc = run_job(j, NULL, &err, "--restore", id, NULL);
  cr_assert_eq(rc, 0, "restore of %s: exit %d: %s", id, rc, err);
  free(err);
  check_exact(j);
  free(img);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* (e') A chunk of the latest checkpoint in a newer format: refused the
 * same way. */
Test(damage, future_format_chunk) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  ull latest = l.id[l.n - 1];
  size_t len;
  uint8_t *v = locate(j, "chunks", latest, U64_STATE, &len);
  make_future(j, v, len);
  char *img = dir_image(j->out);
  char want[64];
  snprintf(want, sizeof want, "checkpoint %llu", latest);
  char *err = expect_refused(j, 3, want, img, "latest");
  cr_assert(strstr(err, "format") != NULL || strstr(err, "newer") != NULL,
            "the message does not say newer format: %s", err);
  free(err);
  free(img);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* (e'') The job record in a newer format: every verb refuses (exit 3). */
Test(damage, future_format_job_record) {
  listing l;
  job *j = killed_with_checkpoints(&l);
  size_t len;
  uint8_t *v = locate(j, "job", 0, 0, &len);
  make_future(j, v, len);
  char *img = dir_image(j->out);
  char *err = expect_refused(j, 3, NULL, img, "latest");
  cr_assert(strstr(err, "format") != NULL || strstr(err, "newer") != NULL,
            "the message does not say newer format: %s", err);
  free(err);
  char *out = NULL;
  int rc = run_cmd(&out, &err, "checkpoints", "--state-dir", j->state, "--json", NULL);
  cr_assert_eq(rc, 3, "weir checkpoints: exit %d: %s", rc, err);
  free(out);
  free(err);
  free(img);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- at-least-once ------------------------------------------------------- */

/* Barriers never block an input: after a kill and a restore, every (key,
 * count) for count 1..n_k is in the output at least once, no gap. The final
 * counts may exceed n_k: the count's snapshot is taken when the barrier has
 * arrived on all its inputs, so it includes records that came after the
 * barrier on the input that delivered it first; the restored sources replay
 * them and they are counted again (at-least-once state, as with Flink's
 * BarrierTracker). Such lines are reported, not failed. */
Test(recovery, at_least_once_kill_and_restore) {
  job *j = job_new(RECORDS, KEYS);
  j->mode = "at-least-once";
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@3", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 3);
  free(err);
  restore_to_end(j);
  listing l;
  listing_now(j, &l);
  cr_assert(l.finished);
  uint64_t per = j->records / j->keys + 1;
  uint32_t *seen = seen_table(j, per);
  uint64_t over = 0;
  uint64_t lines = read_output(j, seen, per, 0, &over);
  uint64_t dups = 0;
  for (uint64_t k = 0; k < j->keys; k++)
    for (uint64_t c = 1; c <= n_of(j, k); c++) {
      cr_assert_geq(seen[k * per + c - 1], 1, "line '%llu %llu' missing\nhistory: %s", (ull)k,
                    (ull)c, j->history);
      dups += seen[k * per + c - 1] - 1;
    }
  cr_assert_geq(lines, j->records);
  fprintf(stderr,
          "recovery::at_least_once: %llu lines for %llu records: %llu duplicated lines, %llu "
          "lines above a key's final count (records counted twice)\n",
          (ull)lines, (ull)j->records, (ull)dups, (ull)over);
  seen_free();
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- synchronous checkpoints --------------------------------------------- */

/* The stop-the-world mode writes ordinary checkpoints: a sync run killed
 * at a failpoint restores (in sync mode, and in aligned mode from a sync
 * run's checkpoint) to exactly the failure-free output. */
TestSuite(sync_recovery, .timeout = 150, .fini = cleanup);

Test(sync_recovery, kill_at_barrier_injected) {
  kill_at_in("ckpt.barrier_injected", "sync");
}
Test(sync_recovery, kill_at_after_sync_snapshot) {
  kill_at_in("ckpt.after_sync_snapshot", "sync");
}
Test(sync_recovery, kill_at_after_meta_commit) {
  kill_at_in("ckpt.after_meta_commit", "sync");
}
Test(sync_recovery, restore_a_sync_checkpoint_aligned) {
  job *j = job_new(RECORDS, KEYS);
  j->mode = "sync";
  char *err = NULL;
  int rc = run_job(j, "ckpt.after_meta_commit=kill@3", &err, NULL);
  expect_killed_at(j, rc, err, "ckpt.after_meta_commit", 3);
  free(err);
  j->mode = "aligned";
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- full disks and store errors ------------------------------------------ */

/* A declined checkpoint's message names the store, the error and the room
 * there was; returns the id it names (0 when the message names none). */
static ull check_declined(job *j, const char *err, const char *verb, const char *error) {
  char want[700];
  snprintf(want, sizeof want, "store %s/store: ", j->state);
  cr_assert(strstr(err, want) != NULL, "the message does not name the store '%s': %s", want, err);
  cr_assert(strstr(err, error) != NULL, "no '%s' in: %s", error, err);
  cr_assert(strstr(err, "bytes free") != NULL || strstr(err, "in use") != NULL,
            "the message says nothing of the room left: %s", err);
  const char *p = strstr(err, verb);
  cr_assert_not_null(p, "no '%s' in: %s", verb, err);
  ull id = 0;
  const char *c = p;
  while (c > err && !(c[0] == 'c' && strncmp(c, "checkpoint ", 11) == 0)) c--;
  if (sscanf(c, "checkpoint %llu", &id) != 1) id = 0;
  return id;
}

/* A listing (with --retain 50) that holds every completed checkpoint of
 * the run, and never `declined`. */
static void check_not_listed(job *j, ull declined) {
  listing l;
  listing_now(j, &l);
  cr_assert_gt(l.n, 1, "fewer checkpoints than expected\nhistory: %s", j->history);
  for (size_t i = 0; i < l.n; i++)
    cr_assert_neq(l.id[i], declined, "declined checkpoint %llu is listed\nhistory: %s", declined,
                  j->history);
}

TestSuite(diskfull, .timeout = 150, .fini = cleanup);

/* One chunk write fails with ENOSPC: that checkpoint is declined with a
 * message naming the store, the job runs on, later checkpoints complete,
 * the declined one is never listed, and the output is exact. */
Test(diskfull, enospc_once_declines_one_checkpoint) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "store.write_chunk=enospc@6", &err, "--retain", "50", NULL);
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  ull id = check_declined(j, err, " declined: ", "No space left on device");
  cr_assert_gt(id, 0, "no declined checkpoint id in: %s", err);
  cr_assert(strstr(err, "[simulated by failpoint store.write_chunk]") != NULL, "%s", err);
  cr_assert(strstr(err, "the subtask needs ") != NULL, "%s", err);
  cr_assert(strstr(err, "the restore point stays ") != NULL, "%s", err);
  free(err);
  check_not_listed(j, id);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The commit (metadata) fails once with EIO: declined, the job goes on. */
Test(diskfull, eio_at_commit_declines_one_checkpoint) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc = run_job(j, "store.commit=error@3", &err, "--retain", "50", NULL);
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  ull id = check_declined(j, err, " declined: ", "Input/output error");
  cr_assert(strstr(err, "committing checkpoint") != NULL, "%s", err);
  free(err);
  check_not_listed(j, id);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Every write fails from the 9th chunk on: with 2 failures tolerated the
 * third stops the job (exit 3) naming its restore point, the latest listed
 * checkpoint; a restore from it gives the exact output. */
Test(diskfull, persistent_enospc_stops_the_job) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc =
      run_job(j, "store.write_chunk=enospc@9+", &err, "--tolerable-checkpoint-failures", "2", NULL);
  cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
  check_declined(j, err, " failed: ", "No space left on device");
  cr_assert(strstr(err, "3 checkpoints failed in a row, more than the 2 tolerated") != NULL, "%s",
            err);
  listing l;
  listing_now(j, &l);
  cr_assert_gt(l.n, 0, "no checkpoint completed before the failures\nhistory: %s", j->history);
  cr_assert_not(l.finished);
  char want[64];
  snprintf(want, sizeof want, "its restore point is checkpoint %llu", l.id[l.n - 1]);
  cr_assert(strstr(err, want) != NULL, "no '%s' in: %s", want, err);
  free(err);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* No failure tolerated: the first I/O error stops the job. */
Test(diskfull, tolerate_none) {
  job *j = job_new(RECORDS, KEYS);
  char *err = NULL;
  int rc =
      run_job(j, "store.write_chunk=error@9", &err, "--tolerable-checkpoint-failures", "0", NULL);
  cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
  check_declined(j, err, " failed: ", "Input/output error");
  cr_assert(strstr(err, "1 checkpoints failed in a row, more than the 0 tolerated") != NULL, "%s",
            err);
  free(err);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Only the final checkpoint (interval 0), and its commit fails once: it is
 * tried again after a second and the job ends finished and exact. */
Test(diskfull, final_checkpoint_is_retried) {
  job *j = job_new(RECORDS, KEYS);
  j->interval = "0";
  char *err = NULL;
  int rc = run_job(j, "store.commit=enospc@1", &err, NULL);
  cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
  cr_assert(strstr(err, "the final checkpoint ") != NULL && strstr(err, " declined: ") != NULL,
            "%s", err);
  free(err);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Keys enough that the count's state outgrows a small store while the job
 * runs: the early checkpoints fit, later ones do not. */
#define BIG_KEYS 100000u

/* The store's map is limited (--max-store-size 1M): MDB_MAP_FULL declines
 * checkpoints, the job stops after the tolerated failures, and a restore
 * with room gives the exact output. */
Test(diskfull, map_full) {
  job *j = job_new(RECORDS, BIG_KEYS);
  char *err = NULL;
  int rc = run_job(j, NULL, &err, "--max-store-size", "1M", "--tolerable-checkpoint-failures", "1",
                   NULL);
  cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
  check_declined(j, err, " failed: ", "the store's map is full (map size ");
  free(err);
  listing l;
  listing_now(j, &l);
  cr_assert_gt(l.n, 0, "no checkpoint fitted\nhistory: %s", j->history);
  restore_to_end(j);
  check_finished(j);
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A real full file system: the state directory on a 2 MB tmpfs (needs
 * mount(2): root with CAP_SYS_ADMIN; skipped otherwise). Checkpoints are
 * declined with ENOSPC and the free space in the message, the job stops;
 * after the file system grows, the restore is exact. */
static char *mounted; /* unmounted by the test, or else by mnt_cleanup */

static void mnt_cleanup(void) {
  if (mounted) {
    umount2(mounted, MNT_DETACH);
    free(mounted);
    mounted = NULL;
  }
  cleanup();
}

Test(diskfull, tiny_tmpfs, .fini = mnt_cleanup) {
  job *j = job_new(RECORDS, BIG_KEYS);
  char *small = path_join(j->dir, "small");
  cr_assert_eq(mkdir(small, 0755), 0, "%s", strerror(errno));
  if (mount("tmpfs", small, "tmpfs", 0, "size=2m") != 0) {
    int e = errno;
    free(small);
    job_free(j);
    cr_skip_test("cannot mount a 2 MB tmpfs here (%s): needs root with CAP_SYS_ADMIN", strerror(e));
  }
  mounted = small;
  free(j->state);
  j->state = path_join(small, "state");
  char *err = NULL;
  int rc = run_job(j, NULL, &err, "--tolerable-checkpoint-failures", "1", NULL);
  cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
  check_declined(j, err, " failed: ", "No space left on device");
  free(err);
  listing l;
  listing_now(j, &l);
  cr_assert_gt(l.n, 0, "no checkpoint fitted\nhistory: %s", j->history);
  cr_assert_eq(mount("tmpfs", small, NULL, MS_REMOUNT, "size=64m"), 0, "remount: %s",
               strerror(errno));
  restore_to_end(j);
  check_finished(j);
  cr_assert_eq(umount2(small, MNT_DETACH), 0, "umount: %s", strerror(errno));
  free(mounted);
  mounted = NULL;
  job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Crash tests run one at a time whatever --jobs says: a second test on the
 * 2 cores would slow every run and move every kill. */
int main(int argc, char *argv[]) {
  setenv("WEIR_LOG", "info", 1); /* the tests read the restore messages */
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (criterion_handle_args(argc, argv, true)) {
    criterion_options.jobs = 1;
    result = !criterion_run_all_tests(tests);
  }
  criterion_finalize(tests);
  return result;
}
