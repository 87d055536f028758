/* tests/crash.h: the crash harness of the tests that run the weir binary
 * and kill it: a job in a temporary directory (which `weir run` job, its
 * arguments, its state directory, sink and checkpoint options), runs with
 * failpoints armed or a SIGKILL after a delay, kills at a failpoint
 * asserted to have fired, seeded random kill schedules, restores until the
 * job ends, and the exact checks of what the file sink published.
 *
 * DESIGN. Every helper asserts with Criterion (cr_assert): a crash test
 * stops at the first thing that is not as it must be, with the job's
 * history (every run, its failpoints, kill time, extra arguments and exit)
 * in the message. Jobs are registered while they live, so that the suite's
 * fini (crash_fini) removes the directories a failed test left behind
 * (WEIR_TEST_KEEP=1 keeps them, to look at). A test that needs more per
 * job embeds crash_job as the first member of its own struct and passes
 * its size to crash_new; hooks (before and after every run) let it look at
 * each run's log. Crash tests run one at a time: crash_main forces
 * Criterion's --jobs 1, since a second test on the cores would slow every
 * run and move every kill.
 */
#ifndef WEIR_TESTS_CRASH_H
#define WEIR_TESTS_CRASH_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "helpers.h"

#define CRASH_KILLED (128 + SIGKILL)
#define CRASH_MAX_ARGS 40
#define CRASH_MAX_ENV 4

typedef struct crash_job crash_job;

struct crash_job {
  char dir[512];         /* th_tmpdir of the job (or crash_at's) */
  char state[600];       /* --state-dir: <dir>/state */
  char out[600];         /* the file sink's directory: <dir>/out */
  char sink[700];        /* --sink: file:<out> unless a test says */
  int allow_sink_change; /* --allow-sink-change (a twin's sink, moved) */
  const char *job;       /* `weir run JOB` */
  /* The common options; NULL leaves one out. */
  const char *workers, *par, *interval, *mode;
  char parbuf[12]; /* crash_par's */
  /* The job's own arguments (crash_arg), before the common ones. */
  const char *args[CRASH_MAX_ARGS];
  int nargs;
  char argbuf[1024];
  size_t argused;
  /* "NAME=VALUE" set in the environment of every run of this job. */
  const char *env[CRASH_MAX_ENV];
  /* The counter job's size, for crash_check_counter. */
  uint64_t records, keys;
  int timeout_s; /* a run's limit: RUN_TIMEOUT_S unless a test says */
  int runs;
  char history[4096];
  /* Called before every run, and after it with its exit and stderr. */
  void (*before_run)(crash_job *j);
  void (*after_run)(crash_job *j, int rc, const char *err);
};

/* A job `job` in a new th_tmpdir, `size` bytes (sizeof of the struct that
 * embeds crash_job first; 0: sizeof(crash_job)), zeroed, registered:
 * workers and parallelism "2", sink file:<out>, a 90 s limit per run. */
crash_job *crash_new(const char *job, size_t size);
/* The same in an existing directory (a copy of another job's). */
crash_job *crash_at(const char *dir, const char *job, size_t size);
/* A copy of job j (its struct, `size` bytes as for crash_new, and its
 * directory, copied to <dir>-twin), registered: to run the same state two
 * ways. */
crash_job *crash_twin(const crash_job *j, size_t size);
/* Removes the job's directory and frees it. */
void crash_free(crash_job *j);
/* Suite fini: frees the jobs a failed test left (kept with WEIR_TEST_KEEP). */
void crash_fini(void);

/* Appends option `opt` to the job's own arguments, with the value printed
 * from fmt (NULL: a flag without a value). */
void crash_arg(crash_job *j, const char *opt, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The counter job's --records, --keys and --rate (NULL: no --rate). */
void crash_counter(crash_job *j, uint64_t records, uint64_t keys, const char *rate);

/* --parallelism p. */
void crash_par(crash_job *j, int p);

void crash_hist(crash_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs the job once: failpoints armed (NULL: none), SIGKILL after kill_ms
 * (< 0: not; then the run's limit applies), the extra arguments `extra`
 * (NULL terminated, may be NULL) after the job's. stderr (with what a
 * killed run wrote) in *err, which the caller frees (err NULL: dropped).
 * Returns the exit status, 128 + the signal (CRASH_KILLED), or -1 when the
 * run hit its limit; *ms (if not NULL) gets its wall time. */
int crash_runv(crash_job *j, const char *failpoints, int kill_ms, char **err, int64_t *ms,
               const char *const extra[]);
/* Declares `array` (const char *[32]) holding the NULL-terminated
 * variable arguments after `last`, NULL terminated. */
#define CRASH_VA_ARRAY(array, last)                                                                \
  const char *array[32];                                                                           \
  do {                                                                                             \
    va_list ap_;                                                                                   \
    va_start(ap_, last);                                                                           \
    size_t n_ = 0;                                                                                 \
    const char *a_;                                                                                \
    while ((a_ = va_arg(ap_, const char *)) != NULL) {                                             \
      cr_assert_lt(n_ + 1, sizeof array / sizeof array[0], "too many arguments");                  \
      array[n_++] = a_;                                                                            \
    }                                                                                              \
    array[n_] = NULL;                                                                              \
    va_end(ap_);                                                                                   \
  } while (0)

/* crash_runv with the extra arguments NULL terminated. */
int crash_run(crash_job *j, const char *failpoints, int kill_ms, char **err, ...);
/* Starts the job without waiting (own process group, stderr into errpath)
 * and counts the run. Returns its pid. */
pid_t crash_spawnv(crash_job *j, const char *failpoints, const char *errpath,
                   const char *const extra[]);

/* Waits for pid (a process group leader) to exit or, with stopped, to
 * stop: its exit status, 128 + the signal, 1000 for "stopped", or -1
 * after timeout_ms (then its group is killed and reaped). */
int crash_wait(pid_t pid, int timeout_ms, int stopped);

/* The job id of j's state directory (`weir checkpoints --json`) into id. */
void crash_job_id(const crash_job *j, char *id, size_t cap);

/* A run that failpoint `name` killed: SIGKILL, and stderr saying
 * "failpoint NAME: kill (hit HIT)" (hit 0: "failpoint NAME: kill"). */
void crash_expect_killed(crash_job *j, int rc, const char *err, const char *name, unsigned hit);
/* Runs the job (extras NULL terminated) with NAME=kill@HIT armed and
 * asserts that it fired (hit_in_log: the log names the hit). Returns its
 * stderr in *err (NULL: dropped). */
void crash_kill_at(crash_job *j, const char *name, unsigned hit, int hit_in_log, char **err, ...);
/* crash_kill_at with the extra arguments in an array (may be NULL). */
void crash_kill_atv(crash_job *j, const char *name, unsigned hit, int hit_in_log, char **err,
                    const char *const extra[]);

/* Runs `--restore latest` (failpoints armed, extra arguments) until a run
 * exits 0: each run must exit 0, or, within `attempts` runs, die of
 * SIGKILL (then it is run again). Returns where the last run said it
 * resumed (th_resumed_from), also noted in the history; its stderr in
 * *err (NULL: dropped). */
long long crash_restore_to_end(crash_job *j, int attempts, const char *failpoints, char **err,
                               const char *const extra[]);

/* ---- seeded random kills --------------------------------------------------- */

/* The seed of a test's random kills: WEIR_TEST_SEED, else time and pid;
 * printed so that a failure can be replayed. */
uint64_t crash_seed(const char *what);

typedef struct crash_schedule {
  int kills;        /* the first `kills` runs get a SIGKILL */
  int restore;      /* then: 1 restores until the job ends, 0 stops */
  int max_attempts; /* runs of one job at most */
  /* The kill's delay for run `attempt` (0: the first), called for every
   * run, with killing = attempt < kills; the value is ignored when not
   * killing. */
  int (*delay)(crash_job *j, int attempt, int killing, void *user);
  /* After every run (may be NULL). */
  void (*after)(crash_job *j, int attempt, int rc, const char *err, void *user);
  const char *const *extra; /* extra arguments of every run (may be NULL) */
  void *user;
} crash_schedule;

/* A kill time for run `attempt` of a job whose uninterrupted run takes
 * dur_ms (40 at least): a first run between a quarter of that and its end;
 * a restore, which has less left to do, within its first half. r: a
 * random number. */
int crash_delay_within(int64_t dur_ms, int attempt, uint64_t r);

/* What the restores of a random-kill loop said. */
typedef struct crash_resumes {
  int resumed;              /* from a checkpoint */
  int finished_before_kill; /* nothing left to do: killed after the final checkpoint */
} crash_resumes;
/* After run `attempt` of a random-kill loop: a restore must say where it
 * resumed, unless it was killed before it logged anything; counts into r.
 * Returns th_resumed_from's answer (0 for a first run). */
long long crash_note_resume(crash_job *j, int attempt, int rc, const char *err, crash_resumes *r);

/* Runs j under schedule s: the first run plain, later ones with --restore
 * latest; each must exit 0 or, when it was to be killed, die of SIGKILL; a
 * run that exits 0 ends the job. Returns the number of kills that landed;
 * *runs (if not NULL) is increased by the runs made. */
int crash_kill_randomly(crash_job *j, const crash_schedule *s, int *runs);

/* Many jobs under random kills: the loop of the random-kill tests. */
typedef struct crash_loop {
  int min_runs, min_kills; /* jobs go on until both are reached */
  int max_jobs;            /* and fail after that many (0: no bound) */
  int max_kills;           /* each job is killed 1 to max_kills times */
  int max_attempts;        /* runs of one job at most */
  uint64_t seed, *rng;     /* the seeded draws (rng starts at seed) */
  crash_job *(*new_job)(int jn, void *user);
  void (*check)(crash_job *j, void *user); /* once the job ended */
  int (*delay)(crash_job *j, int attempt, int killing, void *user);
  void (*after)(crash_job *j, int attempt, int rc, const char *err, void *user);
  void *user;
} crash_loop;

/* Runs jobs new_job(0), new_job(1)... each under crash_kill_randomly with
 * 1 to max_kills kills, restored to its end, checked and freed, until
 * min_runs runs and min_kills kills. Returns the kills; *runs gets the
 * runs. */
int crash_kill_loop(const crash_loop *l, int *runs);

/* ---- the file sink's output ------------------------------------------------- */

/* The files of directory `dir` (not the dot files; with committed_only
 * only the committed parts, *.txt, what a reader of a sink directory
 * sees), names and contents in name order, as one string (malloc'd): to
 * check that a run changed nothing there. */
char *crash_dir_image(const char *dir, int committed_only);

/* What crash_sink_lines found. */
enum { CRASH_LINE, CRASH_STRAY, CRASH_UNREADABLE, CRASH_UNTERMINATED };
typedef void (*crash_line_fn)(void *user, int kind, const char *file, char *line);

/* Calls fn for every line of every file of the sink directory `out`
 * (CRASH_LINE, the line without its newline); for a file that is not a
 * committed part (sink-*.txt) once with CRASH_STRAY before its lines, for
 * one that cannot be read with CRASH_UNREADABLE (line NULL), and for a
 * last line without a newline with CRASH_UNTERMINATED (then the file's
 * reading stops). Returns the number of files, or -1 if out cannot be
 * opened. */
int crash_sink_lines(const char *out, crash_line_fn fn, void *user);

/* Differences from a reference: how many, and the first described. */
typedef struct crash_diff {
  uint64_t problems;
  char why[400];
} crash_diff;
/* The output of a job that writes one line "<id> <value>" per id in
 * lo..hi, against a reference: value(user, id) for each id; `what` names
 * an id in messages ("vertex"). */
typedef struct crash_ref {
  uint64_t lo, hi;
  uint64_t (*value)(const void *user, uint64_t id);
  const void *user;
  const char *what;
} crash_ref;

/* Compares the sink directory `out` with r into d: stray, unreadable and
 * unterminated files, malformed lines, an id twice or with another value,
 * an id missing are problems (no sink directory: one per id). *sum gets
 * the sum of the values read, *wrong the number of wrong values. */
void crash_diff_ids(const char *out, const crash_ref *r, crash_diff *d, uint64_t *sum,
                    uint64_t *wrong);

/* ---- the counter job's exact output ----------------------------------------- */

/* Occurrences of every (key, count) of the counter job, which emits
 * "<k> <c>" for c = 1..n_k, n_k the number of i < records with i mod keys
 * = k. */
typedef struct crash_tally {
  uint64_t per, lines, over;
  uint32_t *seen; /* keys x per */
  int exact;
} crash_tally;

uint64_t crash_n_of(const crash_job *j, uint64_t k);
/* exact: a line twice or beyond its key's final count fails the test;
 * otherwise the latter are only counted in over. */
void crash_tally_init(const crash_job *j, crash_tally *t, int exact);
/* Counts one line "<k> <c>"; a malformed line or key out of range fails. */
void crash_tally_line(crash_job *j, crash_tally *t, const char *line, const char *where);
/* Counts every line the file sink published; with exact, any other file
 * fails the test. Returns the number of files. */
int crash_tally_sink(crash_job *j, crash_tally *t);
/* Every (k, c) exactly once and lines == records. */
void crash_tally_check(crash_job *j, const crash_tally *t, const char *what);
void crash_tally_free(crash_tally *t);

/* The exactly-once check of the counter job with the file sink: at least
 * one part, only committed parts, every (k, c) exactly once, nothing
 * else. */
void crash_check_counter(crash_job *j);

/* Criterion's main with --jobs 1 whatever the command line says, WEIR_LOG
 * set to `log` (NULL: left alone; the tests read the restore messages at
 * info) and SIGPIPE ignored. */
int crash_main(int argc, char *argv[], const char *log);

#endif
