/* tests/test_sinks_tx.c: owns the exactly-once effect tests of the
 * two-phase-commit file sink (file:DIR), run through the real `weir`
 * binary, killed with SIGKILL at failpoints around every sink step and at
 * seeded random times, then restored with `--restore latest` until the job
 * ends; an aborted checkpoint between two completed ones; and the
 * write-order matrix of a completion record. test_sinks_http.c does the same
 * for the HTTP sink against `weir receiver` (helpers: crash.h and
 * sinks_tx.h).
 *
 * DESIGN. The witness is the counter job (gen -> key_by -> count -> sink):
 * it emits (k, c) for every record, so exactly-once output is exactly the
 * set {(k, c) : 1 <= c <= n_k}, each once (docs/testing.md §1 invariants 2, 3, 4,
 * 8, 9, 11). Files: every committed part (*.txt) is read and nothing else
 * may be left in the directory (no .pending, no .inprogress) once the job
 * has ended. Receiver: `weir receiver stats --json` must say effects == N,
 * requests >= N, rejections == 0, and `weir receiver effects` must list
 * exactly the expected pairs. Each failpoint kill is asserted to have fired
 * (killed by SIGKILL, its name on stderr). Random kills print their seed
 * (WEIR_TEST_SEED=N replays it). The receiver runs as a child on port 0 and
 * says when it listens (no sleep); the only waits on the clock are the
 * random kills and the retention test, whose subject is time.
 *
 * The program has its own main(): crash tests run one at a time (--jobs 1).
 */
#include "sinks_tx.h"

/* ---- files ------------------------------------------------------------------ */

TestSuite(file_tx, .timeout = 170, .fini = fini);
TestSuite(write_order, .timeout = 170, .fini = fini);

/* The file job: ~0.7 s at this rate, so 20 ms checkpoints complete often. */
#define F_RECORDS 200000u
#define F_KEYS 500u
#define F_RATE "300000"
#define F_INTERVAL "20"

/* Killed at failpoint fp (NAME=kill@N), then restored until done: exact. */
static void file_kill(const char *name, unsigned hit) {
  crash_job *j = tx_job(F_RECORDS, F_KEYS, F_RATE, F_INTERVAL);
  crash_kill_at(j, name, hit, 0, NULL, NULL);
  restore_until_done(j);
  crash_check_counter(j);
  crash_free(j);
}

Test(file_tx, no_failure) {
  crash_job *j = tx_job(F_RECORDS, F_KEYS, F_RATE, F_INTERVAL);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  crash_check_counter(j);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* After write (per batch), after pre_commit (at a barrier), after the
 * checkpoint's metadata commit but before the sink's commit, before and
 * after the commit's rename: each at two hits. */
Test(file_tx, kill_after_write) {
  file_kill("sink.after_write", 30);
  file_kill("sink.after_write", 150);
}
Test(file_tx, kill_after_pre_commit) {
  file_kill("sink.after_pre_commit", 2);
  file_kill("sink.after_pre_commit", 5);
}
Test(file_tx, kill_after_meta_commit_before_commit) {
  file_kill("ckpt.after_meta_commit", 2);
  file_kill("sink.before_commit", 3);
}
Test(file_tx, kill_after_commit) {
  file_kill("sink.after_commit", 1);
  file_kill("sink.after_commit", 4);
}

/* Killed after a checkpoint completed, then killed again while the restore
 * commits what that checkpoint pre-committed; then restored to the end. */
Test(file_tx, kill_during_recover) {
  crash_job *j = tx_job(F_RECORDS, F_KEYS, F_RATE, F_INTERVAL);
  crash_kill_at(j, "ckpt.after_meta_commit", 3, 0, NULL, NULL);
  crash_kill_at(j, "sink.during_recover", 1, 0, NULL, "--restore", "latest", NULL);
  restore_until_done(j);
  crash_check_counter(j);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed with epochs pending at parallelism `from`, then restored at `to`
 * until done: the subtasks that are gone have their pending parts
 * committed (under their own names) by the ones that took them over, and
 * nothing else of theirs is left. With `again`, the rescaled run commits
 * what it took over 1 s late and is killed after its second checkpoint,
 * so that the next restore (at `to`) commits a taken-over epoch from a
 * checkpoint of the new parallelism. */
static void file_rescaled(const char *from, const char *to, int again) {
  crash_job *j = tx_job(F_RECORDS, F_KEYS, F_RATE, F_INTERVAL);
  j->par = from;
  char *err = NULL;
  crash_kill_at(j, "ckpt.after_meta_commit", 3, 0, NULL, NULL);
  j->par = to;
  if (again) {
    int rc = crash_run(j, "sink.during_recover=delay:1000+,ckpt.after_meta_commit=kill@2", -1, &err,
                       "--restore", "latest", NULL);
    crash_expect_killed(j, rc, err, "ckpt.after_meta_commit", 0);
    free(err);
  }
  restore_until_done(j);
  crash_check_counter(j);
  crash_free(j);
}

/* Parallelism 3, then 2 from a checkpoint (subtask 2's pending parts taken
 * over), then 3 again from a checkpoint of the run at 2: subtask 2 is back
 * with no state of its own, and its parts committed in the first run are
 * output that must stay (they were removed, as on a fresh start). */
Test(file_tx, restored_with_fewer_then_more_subtasks) {
  crash_job *j = tx_job(F_RECORDS, F_KEYS, F_RATE, F_INTERVAL);
  j->par = "3";
  crash_kill_at(j, "ckpt.after_meta_commit", 3, 0, NULL, NULL);
  j->par = "2";
  char *err = NULL;
  int rc = crash_run(j, "ckpt.after_meta_commit=kill@3", -1, &err, "--restore", "latest", NULL);
  crash_expect_killed(j, rc, err, "ckpt.after_meta_commit", 0);
  free(err);
  j->par = "3";
  restore_until_done(j);
  crash_check_counter(j);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_tx, restored_with_another_parallelism) {
  file_rescaled("3", "2", 1);
  file_rescaled("2", "3", 0);
  file_rescaled("3", "1", 0);
  cr_assert_eq(th_leak_check(), 0);
}

/* At least 10 runs killed at seeded random times (1-2 kills each). */
Test(file_tx, random_kills) {
  uint64_t seed = rng = crash_seed("file_tx::random_kills");
  int kills = 0;
  for (int n = 0; n < 10; n++) {
    crash_job *j = tx_job(F_RECORDS, F_KEYS, F_RATE, F_INTERVAL);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    kills += kill_at_random(j, 1 + (int)(rnd() % 2), 20, 540, NULL);
    restore_until_done(j);
    crash_check_counter(j);
    crash_free(j);
  }
  fprintf(stderr, "file_tx::random_kills: 10 jobs, %d kills\n", kills);
  cr_assert_geq(kills, 5, "too few kills landed: %d", kills);
  cr_assert_eq(th_leak_check(), 0);
}

/* Checkpoint 2's metadata commit fails (it is aborted) between completed
 * checkpoints 1 and 3: its pre-committed epoch stays pending and is
 * committed with checkpoint 3: nothing is lost. */
Test(file_tx, aborted_checkpoint_loses_nothing) {
  crash_job *j = tx_job(F_RECORDS, F_KEYS, F_RATE, F_INTERVAL);
  char *err = NULL;
  int rc = crash_run(j, "ckpt.before_meta_commit=error@2", -1, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "checkpoint 2 declined") != NULL, "no abort in: %s", err);
  cr_assert(strstr(err, "checkpoint 1 completed") && strstr(err, "checkpoint 3 completed"),
            "stderr: %s", err);
  free(err);
  /* Epoch 2 (records between barriers 1 and 2) was committed with 3. */
  char p0[700], p1[700];
  snprintf(p0, sizeof p0, "%s/sink-0-2.txt", j->out);
  snprintf(p1, sizeof p1, "%s/sink-1-2.txt", j->out);
  struct stat st;
  cr_assert(stat(p0, &st) == 0 || stat(p1, &st) == 0, "no part of epoch 2");
  crash_check_counter(j);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- the write orders of a completion record ------------------------------ */

/* docs/sinks.md §6: a sink that applies an effect at a
 * destination which does not deduplicate, and keeps its own completion
 * record ("receipt") of it, with a recovery that redoes the step unless the
 * receipt is there. Crash points: 1 before the first write, 2 between the
 * two writes, 3 after both. The effect is a line appended to dest.log (an
 * increment, not an assignment: duplicates show).
 *   effect-first:  append, then receipt      -> effects 1, 2, 1
 *   receipt-first: receipt, then append      -> effects 1, 0, 1
 *   atomic:        the effect is written to a temporary file and renamed
 *                  into place; its name is the receipt (one step: the file
 *                  sink's commit)             -> effects 1, 1, 1
 * Each crash is a real SIGKILL of a child process; recovery runs after it. */
typedef enum { EFFECT_FIRST, RECEIPT_FIRST, ATOMIC } order;

static void crash_if(int crash, int point) {
  if (crash == point) kill(getpid(), SIGKILL);
}

static void durable_write(const char *path, const char *data, int append) {
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0 || write(fd, data, strlen(data)) != (ssize_t)strlen(data) || fsync(fd) != 0) _exit(99);
  close(fd);
}

static void op_step(const char *dir, order o, int crash) {
  char log[700], receipt[700], tmp[700], final[700];
  snprintf(log, sizeof log, "%s/dest.log", dir);
  snprintf(receipt, sizeof receipt, "%s/receipt", dir);
  snprintf(tmp, sizeof tmp, "%s/op-1.txt.pending", dir);
  snprintf(final, sizeof final, "%s/op-1.txt", dir);
  struct stat st;
  if (stat(o == ATOMIC ? final : receipt, &st) == 0) return; /* recorded: done */
  crash_if(crash, 1);
  switch (o) {
  case EFFECT_FIRST:
    durable_write(log, "1\n", 1);
    crash_if(crash, 2);
    durable_write(receipt, "done\n", 0);
    break;
  case RECEIPT_FIRST:
    durable_write(receipt, "done\n", 0);
    crash_if(crash, 2);
    durable_write(log, "1\n", 1);
    break;
  case ATOMIC:
    durable_write(tmp, "1\n", 0);
    crash_if(crash, 2);
    if (rename(tmp, final) != 0) _exit(98);
    break;
  }
  crash_if(crash, 3);
}

/* Effects applied: lines of dest.log plus lines of the committed op file. */
static int effects_in(const char *dir) {
  int n = 0;
  const char *names[] = {"dest.log", "op-1.txt"};
  for (int i = 0; i < 2; i++) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    char *t = th_read_file(p, NULL);
    for (char *c = t; c && *c; c++) n += *c == '\n';
    free(t);
  }
  return n;
}

/* The real file sink's effect "0 1" (the first record of key 0), killed
 * before its commit's rename, after it (before the report), and after the
 * whole job: restored, it is in the committed output once each time. */
static int file_sink_effects(const char *name) {
  crash_job *j = tx_job(4000, 10, "20000", "20");
  char *err = NULL, fp[128];
  snprintf(fp, sizeof fp, "%s=kill@1", name ? name : "");
  int rc = crash_run(j, name ? fp : NULL, -1, &err, NULL);
  if (!name)
    cr_assert_eq(rc, 0, "%s", err);
  else
    crash_expect_killed(j, rc, err, name, 0);
  free(err);
  restore_until_done(j);
  crash_check_counter(j);
  int n = 0;
  DIR *d = opendir(j->out);
  cr_assert_not_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", j->out, e->d_name);
    char *t = th_read_file(p, NULL);
    for (char *c = t; c && (c = strstr(c, "0 1\n")) != NULL; c += 4)
      if (c == t || c[-1] == '\n') n++;
    free(t);
  }
  closedir(d);
  crash_free(j);
  return n;
}

Test(write_order, matrix) {
  static const char *const names[] = {"effect-first", "receipt-first", "atomic"};
  static const int want[3][3] = {{1, 2, 1}, {1, 0, 1}, {1, 1, 1}};
  for (int o = 0; o < 3; o++) {
    int got[3];
    for (int crash = 1; crash <= 3; crash++) {
      char *dir = th_tmpdir();
      cr_assert_not_null(dir);
      fflush(NULL);
      pid_t pid = fork();
      cr_assert_geq(pid, 0);
      if (pid == 0) {
        op_step(dir, (order)o, crash);
        _exit(0);
      }
      int st = 0;
      cr_assert_eq(waitpid(pid, &st, 0), pid);
      cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: crash %d did not happen", names[o],
                crash);
      op_step(dir, (order)o, 0); /* recovery */
      got[crash - 1] = effects_in(dir);
      th_rmrf(dir);
      free(dir);
    }
    fprintf(stderr, "write_order::matrix: %-13s effects %d,%d,%d over crash points 1,2,3\n",
            names[o], got[0], got[1], got[2]);
    for (int c = 0; c < 3; c++)
      cr_assert_eq(got[c], want[o][c], "%s: crash point %d: %d effects, expected %d", names[o],
                   c + 1, got[c], want[o][c]);
  }
  /* The production path is the atomic one: the file sink's commit. */
  int a = file_sink_effects("sink.before_commit");
  int b = file_sink_effects("sink.after_commit");
  int c = file_sink_effects(NULL);
  fprintf(stderr, "write_order::matrix: file sink     effects %d,%d,%d\n", a, b, c);
  cr_assert(a == 1 && b == 1 && c == 1, "file sink: %d,%d,%d", a, b, c);
  cr_assert_eq(th_leak_check(), 0);
}

TX_MAIN
