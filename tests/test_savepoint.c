/* tests/test_savepoint.c: savepoints through the real `weir` binary: `weir
 * savepoint` of a running counter job, `weir stop [--savepoint]`, and
 * `weir run --from-savepoint` into a new state directory (with another
 * parallelism), checked exactly through the transactional file sink; a
 * savepoint outliving retention; and the refusals: no job running, a
 * damaged or truncated file (exit 3), a savepoint of another graph
 * (exit 2, naming the operators; --allow-non-restored-state drops them),
 * --from-savepoint with --restore (exit 2).
 *
 * The PostgreSQL and HTTP sinks' stop-with-savepoint round trips live
 * with those sinks' tests (test_sinks_pg.c, test_sinks_http.c).
 *
 * The program has its own main(): crash tests run one at a time (--jobs 1).
 */
#include "sinks_tx.h"

TestSuite(savepoint, .timeout = 170, .fini = fini);

#define S_RECORDS 60000u
#define S_KEYS 200u
#define S_RATE "20000" /* 3 s in all */
#define S_INTERVAL "30"

/* Takes a savepoint (to `out`, or the default), returning its path. */
static char *take_savepoint(crash_job *j, const char *out) {
  char *so = NULL, *se = NULL;
  int rc = out ? weir_cmd(&so, &se, "savepoint", "--state-dir", j->state, "--out", out, NULL)
               : weir_cmd(&so, &se, "savepoint", "--state-dir", j->state, NULL);
  cr_assert_eq(rc, 0, "weir savepoint: exit %d: %s", rc, se);
  cr_assert_not_null(so);
  so[strcspn(so, "\n")] = '\0';
  struct stat st;
  cr_assert_eq(stat(so, &st), 0, "savepoint file '%s' missing", so);
  if (out) cr_assert_str_eq(so, out);
  free(se);
  return so;
}

/* A savepoint of a running job, the job stopped later (it runs on past the
 * savepoint, through checkpoints that retention 1 removes), then the
 * savepoint restored into a new state directory with parallelism 3: the
 * file sink's output rewinds to the savepoint and ends exact. */
Test(savepoint, round_trip_another_dir_and_parallelism) {
  crash_job *j = tx_job(S_RECORDS, S_KEYS, S_RATE, S_INTERVAL);
  const char *retain[] = {"--retain", "1", NULL};
  pid_t pid = start(j, retain);
  th_sleep_ms(300);
  char *sp = take_savepoint(j, NULL);
  unsigned long long id = 0;
  const char *base = strrchr(sp, '/');
  cr_assert(base && sscanf(base + 1, "%llu", &id) == 1 && id > 0, "%s", sp);
  th_sleep_ms(500); /* many checkpoints later */
  char *so = NULL, *se = NULL;
  cr_assert_eq(weir_cmd(&so, &se, "stop", "--state-dir", j->state, NULL), 0, "%s", se);
  free(so);
  free(se);
  expect_exit(j, pid, 0);
  /* Retention removed the checkpoint; the savepoint is listed and intact. */
  so = NULL;
  cr_assert_eq(weir_cmd(&so, NULL, "checkpoints", "--state-dir", j->state, "--json", NULL), 0);
  char want[64];
  snprintf(want, sizeof want, "\"checkpoints\": [{\"id\": %llu,", id);
  cr_assert_null(strstr(so, want), "checkpoint %llu still retained: %s", id, so);
  snprintf(want, sizeof want, "\"savepoints\": [{\"id\": %llu,", id);
  cr_assert_not_null(strstr(so, want), "%s", so);
  cr_assert_not_null(strstr(so, "\"intact\": true"), "%s", so);
  free(so);

  new_state_dir(j, "state2");
  crash_par(j, 3);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, "--from-savepoint", sp, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_eq(th_resumed_from(err), (long long)id, "%s", err);
  free(err);
  crash_check_counter(j);
  free(sp);
  crash_free(j);
}

/* weir stop --savepoint: the last checkpoint is the savepoint, the job
 * exits 0, and a run from the savepoint in a new state directory finishes
 * the input: exact. */
Test(savepoint, stop_with_savepoint_then_from_savepoint) {
  crash_job *j = tx_job(S_RECORDS, S_KEYS, S_RATE, S_INTERVAL);
  pid_t pid = start(j, NULL);
  th_sleep_ms(400);
  char old_state[600];
  memcpy(old_state, j->state, sizeof old_state);
  stop_with_savepoint_and_upgrade(j, pid);
  crash_check_counter(j);
  /* The control socket went with the stopped job. */
  char *so = NULL, *se = NULL;
  cr_assert_eq(weir_cmd(&so, &se, "savepoint", "--state-dir", old_state, NULL), 1);
  cr_assert_not_null(strstr(se, "no job runs"), "%s", se);
  free(so);
  free(se);
  crash_free(j);
}

/* Refusals: a damaged and a truncated savepoint (exit 3, nothing run), a
 * savepoint of another graph (exit 2 naming the operator whose state would
 * be lost; --allow-non-restored-state runs it), --from-savepoint with
 * --restore (exit 2). */
Test(savepoint, refusals) {
  crash_job *j = tx_job(20000, 50, "20000", S_INTERVAL);
  pid_t pid = start(j, NULL);
  th_sleep_ms(200);
  char good[700];
  snprintf(good, sizeof good, "%s/good.savepoint", j->dir);
  free(take_savepoint(j, good));
  char *so = NULL, *se = NULL;
  cr_assert_eq(weir_cmd(&so, &se, "stop", "--state-dir", j->state, NULL), 0, "%s", se);
  free(so);
  free(se);
  expect_exit(j, pid, 0);

  size_t len = 0;
  char *bytes = th_read_file(good, &len);
  cr_assert_not_null(bytes);
  cr_assert_gt(len, 200u);
  char bad[700], cut[700];
  snprintf(bad, sizeof bad, "%s/bad.savepoint", j->dir);
  snprintf(cut, sizeof cut, "%s/cut.savepoint", j->dir);
  bytes[len - 40] ^= 0x5a; /* a chunk's byte, near the end */
  cr_assert_eq(th_write_file(bad, bytes, len), 0);
  bytes[len - 40] ^= 0x5a;
  cr_assert_eq(th_write_file(cut, bytes, len / 2), 0);
  free(bytes);
  const char *files[] = {bad, cut};
  for (int i = 0; i < 2; i++) {
    char name[16];
    snprintf(name, sizeof name, "refused%d", i);
    new_state_dir(j, name);
    char *err = NULL;
    int rc = crash_run(j, NULL, -1, &err, "--from-savepoint", files[i], NULL);
    cr_assert_eq(rc, 3, "%s: exit %d: %s", files[i], rc, err);
    cr_assert_not_null(strstr(err, "damaged"), "%s", err);
    cr_assert_null(strstr(err, "counted"), "%s", err);
    free(err);
  }

  /* Another graph: the windows job has no operator 'count'. */
  crash_job *w = crash_new("windows", 0);
  crash_arg(w, "--records", "1000");
  crash_arg(w, "--keys", "10");
  snprintf(w->sink, sizeof w->sink, "%s", j->sink); /* the savepoint's destination */
  char *err = NULL;
  int rc = crash_run(w, NULL, -1, &err, "--from-savepoint", good, NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert_not_null(strstr(err, "'count'"), "%s", err);
  cr_assert_not_null(strstr(err, "--allow-non-restored-state"), "%s", err);
  free(err);
  err = NULL;
  rc = crash_run(w, NULL, -1, &err, "--from-savepoint", good, "--allow-non-restored-state", NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  free(err);
  crash_free(w);

  new_state_dir(j, "usage");
  err = NULL;
  rc = crash_run(j, NULL, -1, &err, "--from-savepoint", good, "--restore", "latest", NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  free(err);
  crash_free(j);
}

/* weir savepoint and weir stop without a job: exit 1, saying so; weir
 * savepoint --delete of a savepoint that is not there: exit 1. */
Test(savepoint, no_job_running) {
  char *dir = th_tmpdir();
  char *so = NULL, *se = NULL;
  cr_assert_eq(weir_cmd(&so, &se, "savepoint", "--state-dir", dir, NULL), 1);
  cr_assert_not_null(strstr(se, "no job runs"), "%s", se);
  free(so);
  free(se);
  so = se = NULL;
  cr_assert_eq(weir_cmd(&so, &se, "stop", "--state-dir", dir, "--savepoint", NULL), 1);
  cr_assert_not_null(strstr(se, "no job runs"), "%s", se);
  free(so);
  free(se);
  so = se = NULL;
  cr_assert_eq(weir_cmd(&so, &se, "savepoint", "--state-dir", dir, "--delete", "7", NULL), 1);
  cr_assert_not_null(strstr(se, "no savepoint 7"), "%s", se);
  free(so);
  free(se);
  th_rmrf(dir);
  free(dir);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, "info");
}
