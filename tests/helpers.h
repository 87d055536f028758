/* tests/helpers.h: small helpers shared by every Criterion test program.
 *
 * Temporary directories, running a child process (usually the weir binary,
 * WEIR_BINARY) with its output captured and a time limit, whole-file reads
 * and writes, and an explicit leak check for AddressSanitizer builds.
 *
 * DESIGN: nothing here calls cr_assert (helpers report errors through their
 * return values, so a test decides what is fatal), keeps global state, or
 * starts threads, so the helpers are safe inside Criterion's forked test
 * processes and may be called from any thread a test starts.
 */
#ifndef WEIR_TESTS_HELPERS_H
#define WEIR_TESTS_HELPERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a fresh, private directory "$TMPDIR/weir-test-XXXXXX" ("/tmp" when
 * TMPDIR is unset or empty) and returns its path, which the caller frees.
 * Returns NULL on failure (errno set). Remove it with th_rmrf(). */
char *th_tmpdir(void);

/* Removes `dir` and everything under it; symbolic links are removed, never
 * followed. Best effort: errors are ignored. NULL is a no-op. */
void th_rmrf(const char *dir);

/* Runs argv[0] (a path, not searched in PATH) with arguments argv (NULL
 * terminated) in directory `cwd` (NULL: the current one), stdin from
 * /dev/null, and waits for it.
 *
 * stdout and stderr are captured in full into NUL-terminated malloc'd strings
 * stored in *out and *err (the caller frees them); pass NULL to discard a
 * stream. They are set on every return except -2, also after a timeout.
 *
 * The child runs in a process group of its own. If it has not exited after
 * `timeout_s` seconds (<= 0: no limit), the whole group gets SIGKILL and -1 is
 * returned. Otherwise returns the exit status (0..255; 127 when the program
 * could not be executed or `cwd` entered), or 128 + the signal number if the
 * child was killed by a signal, or -2 if the child could not be started
 * (pipe or fork failed; errno set). Flushes stdio (fflush(NULL)) before
 * forking. Blocks the calling thread. */
int th_run(const char *const argv[], const char *cwd, char **out, char **err, int timeout_s);

/* Reads the whole file at `path` into a malloc'd buffer with a NUL byte
 * appended (so text can be used as a string); *len (if len != NULL) receives
 * the length without that NUL. Returns NULL if the file is missing or
 * unreadable (errno set). The caller frees the buffer. */
char *th_read_file(const char *path, size_t *len);

/* The files of one directory, read whole (th_read_dir). */
typedef struct th_input {
  char *name;    /* the file's name (malloc'd) */
  uint8_t *data; /* its bytes (th_read_file's buffer) */
  size_t len;
} th_input;
typedef struct th_inputs {
  th_input *v;
  size_t n;
} th_inputs;

/* Reads every file of `dir` except dot files and *.md, sorted by name, into
 * *in. Returns 0, or a negative errno (nothing allocated). Free with
 * th_free_inputs. */
int th_read_dir(const char *dir, th_inputs *in);
void th_free_inputs(th_inputs *in);

/* Creates or truncates `path` (mode 0644) and writes `len` bytes of `data`.
 * Returns 0 or a negative errno. Not durable (no fsync). */
int th_write_file(const char *path, const char *data, size_t len);

/* In an AddressSanitizer build, runs LeakSanitizer now and returns nonzero if
 * it found leaks (after printing its report to stderr); the process keeps
 * running. Without AddressSanitizer, or with detect_leaks=0, returns 0. Use
 * at the end of a test: cr_assert_eq(th_leak_check(), 0); a leaking
 * Criterion test otherwise passes. */
int th_leak_check(void);

/* Entries of directory `dir` other than "." and "..", or -1 if it cannot be
 * read. */
int th_count_entries(const char *dir);

/* Arms failpoints in this process (WEIR_FAILPOINTS = spec, NULL disarms
 * them all) and makes the engine read them again. */
void th_arm_failpoints(const char *spec);

/* ---- services (PostgreSQL, NATS: scripts/services starts them) ------------- */

/* The value of environment variable `var` (PGHOST, NATS_URL, ...) when it
 * names a service the tests may use, else NULL. A test that gets NULL
 * skips itself, unless th_in_ci(): then a missing service fails it, so
 * that CI cannot pass by skipping. Pattern:
 *   if (!th_service("NATS_URL")) {
 *     cr_assert(!th_in_ci(), "NATS_URL is not set: nats-server is required under CI");
 *     cr_skip_test("NATS_URL is not set (scripts/services starts nats-server)");
 *   } */
const char *th_service(const char *var);

/* Whether CI=true is set in the environment. */
int th_in_ci(void);

/* ---- crash tests of the weir binary ---------------------------------------- */

/* CLOCK_MONOTONIC in milliseconds. */
int64_t th_mono_ms(void);

/* Sleeps ms milliseconds (again after a signal). */
void th_sleep_ms(int ms);

/* One step of splitmix64 over *state: seeded random numbers that a test can
 * replay from its printed seed. */
uint64_t th_splitmix64(uint64_t *state);

/* Runs argv[0] (a path) with arguments argv (NULL terminated) for a crash
 * test: in directory `cwd` (NULL: the current one), in a process group of
 * its own, stdin and stdout on /dev/null, stderr into the file `errpath`
 * (so what a killed child wrote is kept), WEIR_FAILPOINTS set to
 * `failpoints` in the child (NULL: unset). kill_ms >= 0: the group gets
 * SIGKILL kill_ms after the start if it still runs; otherwise it gets
 * SIGKILL after timeout_s seconds and -1 is returned. Returns the exit
 * status, 128 + the signal, -1 (timeout) or -2 (could not fork; errno set).
 * *err receives the stderr text (malloc'd, "" if unreadable) and *ms, if
 * not NULL, the wall time. */
int th_run_killable(const char *const argv[], const char *cwd, const char *failpoints, int kill_ms,
                    int timeout_s, const char *errpath, char **err, int64_t *ms);
/* Starts argv as th_run_killable does (own process group, stdin/stdout on
 * /dev/null, stderr into errpath, WEIR_FAILPOINTS = failpoints) without
 * waiting for it. Returns its pid, or -1 (errno set). */
pid_t th_spawn(const char *const argv[], const char *cwd, const char *failpoints,
               const char *errpath);

/* Where a `weir run ... --restore latest` run said it resumed (its stderr,
 * with WEIR_LOG=info): the checkpoint id, 0 for the beginning,
 * TH_ALREADY_FINISHED when the job had completed its final checkpoint
 * (nothing left to do), or -1 if it said none of these. */
#define TH_ALREADY_FINISHED (-2)
long long th_resumed_from(const char *err);

/* The number of entries of `dir` whose name contains ".pending" (unpublished
 * file-sink output); 0 if dir does not exist. */
int th_count_pending(const char *dir);

/* Reads the latest completed checkpoint of the store in `state` with the
 * weir binary `weir` (`weir checkpoints --json`, `weir inspect ID --json`):
 * *id = its id (0 if none), *bytes = the sum of the operator_state sizes of
 * operator `op` over its subtasks, *subtasks = how many subtasks of `op` it
 * lists. Returns 0, or -1 after printing why on stderr. */
int th_latest_op_state(const char *weir, const char *state, const char *op, unsigned long long *id,
                       unsigned long long *bytes, int *subtasks);

/* A source of records 0 .. n-1 for the event-time tests (its arg, one
 * subtask): emit(ctx, i, user) emits record i. Paced at *rate records/s
 * when rate points at a non-zero value (burst records per run, then a
 * wake-up; burst 0: 50); a stop ends it; its position is checkpointed. */
struct weir_ctx;
struct weir_run_opts;
struct weir_source_vt;
typedef struct th_seq {
  uint64_t n;
  int (*emit)(struct weir_ctx *ctx, uint64_t i, void *user);
  void *user;
  const uint64_t *rate;
  uint32_t burst;
} th_seq;
extern const struct weir_source_vt th_seq_vt;

/* Run options of the event-time tests: 2 workers, batches sent after
 * 200 us; with a state directory, checkpoints every 10 ms and, with
 * restore, a restore of the latest. */
struct weir_run_opts th_event_run_opts(const char *state, int restore);

#ifdef __cplusplus
}
#endif
#endif
