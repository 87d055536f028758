/* tests/test_sinks_pg.c: owns the tests of the PostgreSQL two-phase-commit
 * sink (sinks/pg.c): the gid format and the `table` parameter (no server
 * needed); then, against the PostgreSQL of scripts/services (PGHOST...):
 * a run without failure, SIGKILL at failpoints around write, prepare and
 * commit and during recovery, SIGKILL at seeded random times, and a stale
 * owner whose fence row was bumped, the connection lost around PREPARE
 * (declined, then settled), and a PREPARE answered after its checkpoint
 * timed out; and, on a cluster of its own (initdb from
 * WEIR_PG_BINDIR), max_prepared_transactions = 0 refused with a clear
 * message, a server restarted between PREPARE and COMMIT PREPARED and one
 * restarted mid-run, and every prepared-transaction slot held by another
 * client (checkpoints declined while within the tolerable failures, then
 * exact rows once they are released; beyond them WEIR_ECKPTLIMIT and a
 * restore).
 *
 * DESIGN. The witness is the counter job, as in test_sinks_tx.c
 * (sinks_tx.h): the output table must hold every (key, count) exactly once
 * (docs/testing.md §1 invariants 2, 3, 8), and no prepared transaction of the job
 * may remain in pg_prepared_xacts once it ended. Each job writes to a table
 * of its own (weir_t_<pid>_<n>), dropped at the end with the job's marker
 * and fence rows, because the server is shared. Without PGHOST the server
 * tests skip (fail under CI=true). Random kills print their seed
 * (WEIR_TEST_SEED=N replays it). The program has its own main(): crash
 * tests run one at a time (--jobs 1); ctest holds RESOURCE_LOCK postgres.
 */
#include "sinks_tx.h"

#include <libpq-fe.h>
#include <pwd.h>

#include "pg_impl.h"

/* ---- PostgreSQL helpers ----------------------------------------------------- */

static char g_table[64]; /* the live job's table (dropped by pg_fini) */
static char g_job[64];   /* its job id, once known */
static char g_conninfo[512];
static char g_own[600]; /* an own cluster's data dir, stopped by pg_fini */
static char g_own_bin[512];

static void quiet(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

static PGconn *pg_connect(const char *conninfo) {
  PGconn *c = PQconnectdb(conninfo ? conninfo : "");
  cr_assert(PQstatus(c) == CONNECTION_OK, "cannot connect: %s", PQerrorMessage(c));
  PQsetNoticeProcessor(c, quiet, NULL);
  return c;
}

static void pg_exec(PGconn *c, const char *sql) {
  PGresult *r = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
  PQclear(r);
}

/* The first value of the first row of sql (%s-formatted), as a number; -1
 * if there is no row or it is NULL. */
static long long pg_num(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static long long pg_num(PGconn *c, const char *fmt, ...) {
  char sql[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sql, sizeof sql, fmt, ap);
  va_end(ap);
  PGresult *r = PQexec(c, sql);
  cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
  long long v = PQntuples(r) && !PQgetisnull(r, 0, 0) ? atoll(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  return v;
}

/* The service, or skip (fail under CI). */
static void need_pg(void) {
  if (!th_service("PGHOST")) {
    cr_assert(!th_in_ci(), "PGHOST is not set: PostgreSQL is required under CI");
    cr_skip_test("PGHOST is not set (scripts/services starts PostgreSQL)");
  }
}

static void spec_for(crash_job *j, const char *host, const char *port) {
  static int n;
  snprintf(g_table, sizeof g_table, "weir_t_%d_%d", (int)getpid(), ++n);
  const char *user = getenv("PGUSER"), *db = getenv("PGDATABASE");
  snprintf(j->sink, sizeof j->sink, "postgresql://%s@%s:%s/%s?table=%s",
           user && *user ? user : "postgres", host, port, db && *db ? db : "postgres", g_table);
  snprintf(g_conninfo, sizeof g_conninfo, "postgresql://%s@%s:%s/%s",
           user && *user ? user : "postgres", host, port, db && *db ? db : "postgres");
  g_job[0] = '\0';
}

static crash_job *pg_job(uint64_t records, uint64_t keys, const char *rate, const char *interval) {
  crash_job *j = tx_job(records, keys, rate, interval);
  spec_for(j, getenv("PGHOST"), getenv("PGPORT") ? getenv("PGPORT") : "5432");
  return j;
}

/* The job id of j's state directory, kept for pg_fini. */
static const char *job_id(crash_job *j) {
  if (!g_job[0]) crash_job_id(j, g_job, sizeof g_job);
  return g_job;
}

static long long prepared_of(PGconn *c, const char *job) {
  return pg_num(c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'weir:%s:%%'", job);
}

/* The table holds every (k, c) exactly once; no prepared transaction of
 * the job remains. */
static void check_pg(crash_job *j, PGconn *c) {
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT key, value FROM %s", g_table);
  PGresult *r = PQexec(c, sql);
  cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s\nhistory: %s", sql, PQerrorMessage(c),
            j->history);
  crash_tally t;
  crash_tally_init(j, &t, 1);
  int n = PQntuples(r);
  for (int i = 0; i < n; i++) {
    char line[128];
    snprintf(line, sizeof line, "%s %s", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
    crash_tally_line(j, &t, line, g_table);
  }
  PQclear(r);
  crash_tally_check(j, &t, "table");
  crash_tally_free(&t);
  long long p = prepared_of(c, job_id(j));
  cr_assert_eq(p, 0, "%lld prepared transactions of job %s remain\nhistory: %s", p, g_job,
               j->history);
}

/* Drops the live job's table and its rows in weir_markers and weir_fence,
 * and rolls back its prepared transactions (after a failed test). */
static void pg_cleanup(void) {
  if (!g_table[0] || !g_conninfo[0]) return;
  PGconn *c = PQconnectdb(g_conninfo);
  if (PQstatus(c) == CONNECTION_OK) {
    char sql[512];
    PQclear(PQexec(c, "SET lock_timeout = '5s'"));
    if (g_job[0]) {
      snprintf(sql, sizeof sql, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'weir:%s:%%'",
               g_job);
      PGresult *r = PQexec(c, sql);
      for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
        snprintf(sql, sizeof sql, "ROLLBACK PREPARED '%s'", PQgetvalue(r, i, 0));
        PQclear(PQexec(c, sql));
      }
      PQclear(r);
      snprintf(sql, sizeof sql,
               "DELETE FROM weir_markers WHERE job = '%s'; DELETE FROM weir_fence WHERE job = "
               "'%s'",
               g_job, g_job);
      PQclear(PQexec(c, sql));
    }
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", g_table);
    PQclear(PQexec(c, sql));
  }
  PQfinish(c);
  g_table[0] = g_job[0] = '\0';
}

static void pg_job_free(crash_job *j) {
  (void)job_id(j);
  pg_cleanup();
  crash_free(j);
}

/* ---- an own cluster --------------------------------------------------------- */

static int am_root(void) {
  return geteuid() == 0;
}

/* Runs a PostgreSQL binary (as user postgres when root). Returns its exit. */
static int as_pg(const char *const args[], char **err) {
  const char *argv[32];
  int n = 0;
  if (am_root()) {
    argv[n++] = access("/usr/sbin/runuser", X_OK) == 0 ? "/usr/sbin/runuser" : "/sbin/runuser";
    argv[n++] = "-u";
    argv[n++] = "postgres";
    argv[n++] = "--";
  }
  for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
  argv[n] = NULL;
  return th_run(argv, NULL, NULL, err, 60);
}

static int own_ctl(const char *dir, int port, const char *action, int mpt) {
  char bin[600], data[700], log[700], opts[900];
  snprintf(bin, sizeof bin, "%s/pg_ctl", g_own_bin);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(log, sizeof log, "%s/pg.log", dir);
  snprintf(opts, sizeof opts,
           "-c listen_addresses=127.0.0.1 -p %d -k %s -c max_prepared_transactions=%d -c "
           "fsync=off",
           port, dir, mpt);
  const char *stop[] = {bin, "-D", data, "-m", "fast", "-w", "stop", NULL};
  const char *start[] = {bin, "-D", data, "-l", log, "-w", "-t", "30", "-o", opts, action, NULL};
  char *err = NULL;
  int rc = as_pg(!strcmp(action, "stop") ? stop : start, &err);
  if (rc) fprintf(stderr, "pg_ctl %s: %d %s\n", action, rc, err ? err : "");
  free(err);
  return rc;
}

/* Makes a cluster in dir/pg; returns 0, or -1 with why (then skip). */
static int own_cluster(const char *dir, char *why, size_t n) {
  const char *bindir = getenv("WEIR_PG_BINDIR");
  if (!bindir || !*bindir) bindir = "/usr/lib/postgresql/15/bin";
  snprintf(g_own_bin, sizeof g_own_bin, "%s", bindir);
  char initdb[600];
  snprintf(initdb, sizeof initdb, "%s/initdb", bindir);
  if (access(initdb, X_OK) != 0) {
    snprintf(why, n, "no initdb in %s (set WEIR_PG_BINDIR)", bindir);
    return -1;
  }
  if (chmod(dir, 0755) != 0 || mkdir(g_own, 0700) != 0) {
    snprintf(why, n, "cannot make %.400s", g_own);
    return -1;
  }
  if (am_root()) {
    struct passwd *pw = getpwnam("postgres");
    if (!pw || chown(g_own, pw->pw_uid, pw->pw_gid) != 0) {
      snprintf(why, n, "no user postgres to run the cluster as");
      return -1;
    }
  }
  char data[700];
  snprintf(data, sizeof data, "%s/data", g_own);
  const char *argv[] = {initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", NULL};
  char *err = NULL;
  int rc = as_pg(argv, &err);
  if (rc) snprintf(why, n, "initdb failed (%d): %.300s", rc, err ? err : "");
  free(err);
  return rc ? -1 : 0;
}

static void pg_fini(void) {
  if (g_own[0]) {
    (void)own_ctl(g_own, 0, "stop", 0);
    g_own[0] = '\0';
  }
  pg_cleanup();
  fini();
}

/* ---- without a server --------------------------------------------------------- */

TestSuite(pg_spec, .timeout = 30);

Test(pg_spec, gid_format) {
  char gid[256];
  const char *job = "c033111a-732a-4547-8b0f-13129cb3e069";
  cr_assert_eq(weir__pg_gid(gid, sizeof gid, job, "sink", 7, 123, 1), 0);
  cr_assert_str_eq(gid, "weir:c033111a-732a-4547-8b0f-13129cb3e069:sink:7:123:1");
  /* Worst case: the largest numbers and a long sink name stay < 200. */
  char longname[300];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  cr_assert_eq(weir__pg_gid(gid, sizeof gid, job, longname, UINT64_MAX, UINT64_MAX, UINT32_MAX), 0);
  cr_assert_lt(strlen(gid), 200);
  cr_assert(strstr(gid, ":h") != NULL, "long sink name not hashed: %s", gid);
  cr_assert_eq(weir__pg_gid(gid, sizeof gid, job, "a:b", 1, 1, 0), 0);
  cr_assert(strstr(gid, "a:b") == NULL, "':' in a sink name kept: %s", gid);
  cr_assert_eq(weir__pg_gid(gid, 10, job, "sink", 1, 1, 0), WEIR_EINVAL);
}

Test(pg_spec, table_parameter_is_taken_out) {
  char *ci = NULL, *t = NULL, err[300];
  uint64_t keep = 0;
  cr_assert_eq(weir__pg_parse("postgresql://u@h:5/db?sslmode=disable&table=s.out&connect_timeout=3",
                              &ci, &t, &keep, err, sizeof err),
               0);
  cr_assert_str_eq(ci, "postgresql://u@h:5/db?sslmode=disable&connect_timeout=3");
  cr_assert_str_eq(t, "s.out");
  cr_assert_eq(keep, 100);
  free(ci);
  free(t);
  cr_assert_eq(weir__pg_parse("postgresql://u@h/db?table=rows", &ci, &t, &keep, err, sizeof err),
               0);
  cr_assert_str_eq(ci, "postgresql://u@h/db");
  cr_assert_str_eq(t, "rows");
  free(ci);
  free(t);
  cr_assert_eq(weir__pg_parse("postgres://h/db", &ci, &t, &keep, err, sizeof err), 0);
  cr_assert_str_eq(ci, "postgres://h/db");
  cr_assert_str_eq(t, "weir_output");
  free(ci);
  free(t);
  cr_assert_eq(weir__pg_parse("postgresql://h/db?table=a;drop", &ci, &t, &keep, err, sizeof err),
               WEIR_ESINK);
  cr_assert(strstr(err, "table must be") != NULL, "%s", err);
  cr_assert_eq(weir_sink_spec_check("postgresql://h/db?table=9x", err, sizeof err), WEIR_ESINK);
  cr_assert_eq(weir_sink_spec_check("postgresql://h/db?table=x", err, sizeof err), 0);
  cr_assert_eq(
      weir__pg_parse("postgresql://h/db?markers=7&table=x", &ci, &t, &keep, err, sizeof err), 0);
  cr_assert_str_eq(ci, "postgresql://h/db");
  cr_assert_eq(keep, 7);
  free(ci);
  free(t);
  cr_assert_eq(weir_sink_spec_check("postgresql://h/db?markers=0", err, sizeof err), WEIR_ESINK);
  cr_assert_eq(weir_sink_spec_check("postgresql://h/db?markers=x", err, sizeof err), WEIR_ESINK);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- against the shared server ----------------------------------------------- */

TestSuite(pg_tx, .timeout = 240, .fini = pg_fini);

#define P_RECORDS 40000u
#define P_KEYS 200u
#define P_RATE "100000"
#define P_INTERVAL "20"

Test(pg_tx, no_failure_prepare_commit_markers) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  PGconn *c = pg_connect(g_conninfo);
  check_pg(j, c);
  const char *id = job_id(j);
  /* One marker per committed transaction, all of this run's owner epoch,
   * which is the fence's; the operation ids are the content ids. */
  long long fence = pg_num(c, "SELECT epoch FROM weir_fence WHERE job = '%s'", id);
  cr_assert_geq(fence, 1);
  long long markers = pg_num(c, "SELECT count(*) FROM weir_markers WHERE job = '%s'", id);
  cr_assert_gt(markers, 2, "markers: %lld", markers);
  cr_assert_eq(
      pg_num(c, "SELECT count(*) FROM weir_markers WHERE job = '%s' AND epoch <> %lld", id, fence),
      0);
  cr_assert_eq(pg_num(c,
                      "SELECT count(*) FROM weir_markers WHERE job = '%s' AND gid <> 'weir:' || "
                      "job || ':sink:' || epoch || ':' || checkpoint || ':' || subtask",
                      id),
               0, "a marker's gid is not weir:<job>:<sink>:<epoch>:<checkpoint>:<subtask>");
  cr_assert_eq(pg_num(c,
                      "SELECT count(*) FROM %s WHERE opid <> '%s/sink/c/' || key || '.' || value",
                      g_table, id),
               0, "operation ids are not <job>/sink/c/<key>.<count>");
  /* A new instance of the finished job replaces its rows: still exact. */
  rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(strstr(err, "fresh start: removed") != NULL, "%s", err);
  free(err);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Stop with a savepoint, then the savepoint run in a new state directory
 * (the upgrade path): the same job id and a higher owner epoch, so the
 * fence row takes the new run; every row exactly once, nothing prepared
 * left. */
Test(pg_tx, stop_with_savepoint_then_from_savepoint) {
  need_pg();
  crash_job *j = pg_job(60000, P_KEYS, "20000", P_INTERVAL);
  pid_t pid = start(j, NULL);
  th_sleep_ms(500);
  const char *id = job_id(j);
  stop_with_savepoint_and_upgrade(j, pid);
  PGconn *c = pg_connect(g_conninfo);
  check_pg(j, c);
  cr_assert_geq(pg_num(c, "SELECT epoch FROM weir_fence WHERE job = '%s'", id), 2);
  PQfinish(c);
  pg_job_free(j);
}

/* A rewind over committed rows is refused (exit 2) and changes nothing:
 * --restore of the oldest retained checkpoint of a finished job. */
Test(pg_tx, rewind_over_committed_rows_is_refused) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, "--retain", "5", NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  char id[32];
  snprintf(id, sizeof id, "%llu", oldest_of_several(j));
  err = NULL;
  rc = crash_run(j, NULL, -1, &err, "--restore", id, NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert_not_null(strstr(err, "a rewind duplicates them"), "%s", err);
  free(err);
  PGconn *c = pg_connect(g_conninfo);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
}

/* Marker rows are pruned: with markers=10, a subtask keeps those of about
 * its last 10 checkpoints, not one per commit. */
Test(pg_tx, markers_pruned) {
  need_pg();
  crash_job *j = pg_job(30000, 100, "20000", "10");
  strncat(j->sink, "&markers=10", sizeof j->sink - strlen(j->sink) - 1);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  PGconn *c = pg_connect(g_conninfo);
  check_pg(j, c);
  const char *id = job_id(j);
  long long last = pg_num(c, "SELECT max(checkpoint) FROM weir_markers WHERE job = '%s'", id);
  long long first = pg_num(c, "SELECT min(checkpoint) FROM weir_markers WHERE job = '%s'", id);
  long long n = pg_num(c, "SELECT count(*) FROM weir_markers WHERE job = '%s'", id);
  fprintf(stderr, "pg_tx::markers_pruned: %lld markers, checkpoints %lld..%lld\n", n, first, last);
  cr_assert_gt(last, 20, "too few checkpoints to prune: %lld", last);
  cr_assert_geq(first, last - 12, "not pruned: checkpoints %lld..%lld", first, last);
  cr_assert_leq(n, 2 * 12, "%lld markers kept", n);
  PQfinish(c);
  pg_job_free(j);
}

/* One --restore latest that must end the job; returns the commits it
 * found already made through their marker (the summary's "duplicates"). */
static long long restore_duplicates(crash_job *j) {
  char sum[700], *err = NULL;
  snprintf(sum, sizeof sum, "%s/summary.json", j->dir);
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", "--summary-json", sum, NULL);
  cr_assert_eq(rc, 0, "restore: exit %d, stderr: %s\nhistory: %s", rc, err, j->history);
  free(err);
  char *t = th_read_file(sum, NULL);
  cr_assert_not_null(t, "no %s", sum);
  long long dups = 0;
  for (char *q = t; (q = strstr(q, "\"duplicates\": ")) != NULL; q++) dups += atoll(q + 14);
  free(t);
  return dups;
}

/* Killed at failpoint NAME@hit; prepared transactions must be there when
 * want_prepared; then restored until done: exact, none prepared. */
static void pg_kill(const char *name, unsigned hit, int want_prepared) {
  crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
  crash_kill_at(j, name, hit, 0, NULL, NULL);
  PGconn *c = pg_connect(g_conninfo);
  long long p = prepared_of(c, job_id(j));
  if (want_prepared)
    cr_assert_gt(p, 0, "%s: no prepared transaction left by the kill\nhistory: %s", name,
                 j->history);
  if (!strcmp(name, "sink.after_commit")) {
    /* The restore commits the epoch again: COMMIT PREPARED says 42704, the
     * marker says it was committed: a duplicate, not an error. */
    cr_assert_geq(restore_duplicates(j), 1, "no marker-resolved commit counted\nhistory: %s",
                  j->history);
  }
  restore_until_done(j);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
}

Test(pg_tx, kill_around_prepare_and_commit) {
  need_pg();
  pg_kill("sink.after_write", 30, 0);
  pg_kill("sink.after_pre_commit", 3, 1);
  pg_kill("ckpt.after_meta_commit", 2, 1);
  pg_kill("sink.before_commit", 3, 1);
  pg_kill("sink.after_commit", 2, 0);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed after a checkpoint completed, then again while the restore
 * commits what it pre-committed; then restored to the end. */
Test(pg_tx, kill_during_recover) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
  crash_kill_at(j, "ckpt.after_meta_commit", 3, 0, NULL, NULL);
  crash_kill_at(j, "sink.during_recover", 1, 0, NULL, "--restore", "latest", NULL);
  restore_until_done(j);
  PGconn *c = pg_connect(g_conninfo);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A restored transaction stays pending (listed by every checkpoint) until
 * its commit is seen, and a new run's checkpoint ids start a new block (65
 * after 3): its commits must not prune the restored transaction's marker,
 * or restoring one of those checkpoints finds the transaction gone and no
 * marker, and fails as if its rows were lost. Run 2 commits what it
 * restored 1 s late (every checkpoint meanwhile lists it), prunes with
 * markers=1 and is killed after its own commits began; run 3 restores. */
Test(pg_tx, restored_pending_keeps_its_marker) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
  strncat(j->sink, "&markers=1", sizeof j->sink - strlen(j->sink) - 1);
  char *err = NULL;
  crash_kill_at(j, "ckpt.after_meta_commit", 3, 0, NULL, NULL);
  PGconn *c = pg_connect(g_conninfo);
  cr_assert_gt(prepared_of(c, job_id(j)), 0, "no prepared transaction left\nhistory: %s",
               j->history);
  int rc = crash_run(j, "sink.during_recover=delay:1000+,sink.after_commit=kill@4", -1, &err,
                     "--restore", "latest", NULL);
  crash_expect_killed(j, rc, err, "sink.after_commit", 0);
  free(err);
  cr_assert_geq(restore_duplicates(j), 1, "nothing committed again through its marker\nhistory: %s",
                j->history);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed with transactions prepared at parallelism 3, restored at 2 until
 * done: the prepared transactions of subtask 2 are committed by the
 * subtask that took them over; rows exact, none left prepared. */
Test(pg_tx, restored_with_another_parallelism) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
  j->par = "3";
  crash_kill_at(j, "ckpt.after_meta_commit", 3, 0, NULL, NULL);
  PGconn *c = pg_connect(g_conninfo);
  cr_assert_gt(pg_num(c,
                      "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'weir:%s:%%:2' AND "
                      "gid LIKE '%%:3:2'",
                      job_id(j)),
               0, "no transaction of subtask 2 prepared for checkpoint 3\nhistory: %s", j->history);
  j->par = "2";
  restore_until_done(j);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed with transactions prepared at parallelism 2, restored at 3: the
 * added subtask 2 has no state of its own, yet the run restores, so it
 * must neither roll back the restored checkpoint's prepared transactions
 * of subtasks 0 and 1 nor remove the rows committed before (it did both,
 * taking itself for a fresh start: the others then found their
 * transactions gone without a marker). */
Test(pg_tx, restored_with_more_subtasks) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
  crash_kill_at(j, "ckpt.after_meta_commit", 3, 0, NULL, NULL);
  PGconn *c = pg_connect(g_conninfo);
  cr_assert_gt(pg_num(c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'weir:%s:%%:3:%%'",
                      job_id(j)),
               0, "no transaction prepared for checkpoint 3\nhistory: %s", j->history);
  j->par = "3";
  restore_until_done(j);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* At least 10 runs killed at seeded random times (1-2 kills each). */
Test(pg_tx, random_kills) {
  need_pg();
  uint64_t seed = rng = crash_seed("pg_tx::random_kills");
  int kills = 0;
  PGconn *c = pg_connect(NULL);
  for (int n = 0; n < 10; n++) {
    crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    kills += kill_at_random(j, 1 + (int)(rnd() % 2), 30, 310, NULL);
    restore_until_done(j);
    check_pg(j, c);
    pg_job_free(j);
  }
  PQfinish(c);
  fprintf(stderr, "pg_tx::random_kills: 10 jobs, %d kills\n", kills);
  cr_assert_geq(kills, 5, "too few kills landed: %d", kills);
  cr_assert_eq(th_leak_check(), 0);
}

/* Starts the job (extra arguments) without waiting; stderr into
 * <dir>/stderr.txt. Returns its pid (its own process group). */
static pid_t spawn_job(crash_job *j, const char *fp, const char *const extra[]) {
  char errpath[700];
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", j->dir);
  return crash_spawnv(j, fp, errpath, extra);
}

static char *read_stderr(crash_job *j) {
  char p[700];
  snprintf(p, sizeof p, "%s/stderr.txt", j->dir);
  char *t = th_read_file(p, NULL);
  return t ? t : strdup("");
}

/* A new owner bumps the fence row while the old one runs: the old one's
 * next prepare cannot land (it fails, saying so), nothing of its epoch is
 * added after the bump, and the new owner completes the job exactly. */
Test(pg_tx, stale_owner_cannot_prepare) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, "20000", "100");
  pid_t pid = spawn_job(j, NULL, NULL);
  PGconn *c = pg_connect(g_conninfo);
  /* Wait until rows are committed (so the job id and fence are there). */
  char id[64] = "";
  for (int64_t end = th_mono_ms() + 30000; !id[0];) {
    cr_assert_lt(th_mono_ms(), end, "no rows committed");
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT split_part(opid, '/', 1) FROM %s LIMIT 1", g_table);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
      snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (!id[0]) th_sleep_ms(10);
  }
  snprintf(g_job, sizeof g_job, "%s", id);
  long long old = pg_num(c, "SELECT epoch FROM weir_fence WHERE job = '%s'", id);
  cr_assert_geq(old, 1);
  /* The new owner's bump: behind the old owner's prepared transactions
   * (FOR SHARE), never hanging (lock_timeout). */
  long long bumped = -1;
  for (int a = 0; a < 50 && bumped < 0; a++) {
    pg_exec(c, "BEGIN");
    pg_exec(c, "SET LOCAL lock_timeout = '200ms'");
    char sql[256];
    snprintf(sql, sizeof sql,
             "UPDATE weir_fence SET epoch = epoch + 1 WHERE job = '%s' RETURNING epoch", id);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
      bumped = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    pg_exec(c, bumped >= 0 ? "COMMIT" : "ROLLBACK");
  }
  cr_assert_eq(bumped, old + 1, "fence not bumped");
  long long markers =
      pg_num(c, "SELECT count(*) FROM weir_markers WHERE job = '%s' AND epoch = %lld", id, old);
  int rc = crash_wait(pid, RUN_TIMEOUT_S * 1000, 0);
  char *err = read_stderr(j);
  crash_hist(j, "[stale run: %d] ", rc);
  cr_assert_neq(rc, 0, "the stale owner ended well after the fence was bumped: %s", err);
  cr_assert(strstr(err, "fence") != NULL, "no fence message: %s", err);
  free(err);
  cr_assert_eq(
      pg_num(c, "SELECT count(*) FROM weir_markers WHERE job = '%s' AND epoch = %lld", id, old),
      markers, "the stale epoch committed after the bump");
  cr_assert_eq(
      pg_num(c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'weir:%s:sink:%lld:%%'", id,
             old),
      0, "a stale epoch's transaction is prepared");
  /* The new owner (the next lease epoch) finishes the job. */
  restore_until_done(j);
  check_pg(j, c);
  cr_assert_geq(pg_num(c, "SELECT epoch FROM weir_fence WHERE job = '%s'", id), old + 1);
  PQfinish(c);
  pg_job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A database that is not there: a clear error naming host and port, no
 * password, non-zero exit. */
Test(pg_tx, unreachable_database) {
  need_pg();
  crash_job *j = tx_job(1000, 10, "0", "50");
  snprintf(j->sink, sizeof j->sink, "postgresql://weir:secret@127.0.0.1:1/x?table=t");
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_neq(rc, 0);
  cr_assert(strstr(err, "127.0.0.1:1") != NULL, "no host:port in: %s", err);
  cr_assert(strstr(err, "secret") == NULL, "password in: %s", err);
  free(err);
  crash_free(j);
}

/* ---- on a cluster of its own ------------------------------------------------- */

/* max_prepared_transactions = 0 is refused with a message naming it; then
 * (16) the server is restarted while the job is stopped between PREPARE
 * and COMMIT PREPARED: the prepared transactions survive and the same
 * process commits them after it reconnects. */
Test(pg_tx, own_server_restart_between_prepare_and_commit) {
  crash_job *j = tx_job(4000, 40, "0", "600000");
  snprintf(g_own, sizeof g_own, "%s/pg", j->dir);
  char why[512];
  if (own_cluster(j->dir, why, sizeof why) < 0) {
    g_own[0] = '\0';
    cr_assert(!th_in_ci(), "cannot make a PostgreSQL cluster: %s", why);
    crash_free(j);
    cr_skip_test("cannot make a PostgreSQL cluster of its own: %s", why);
  }
  /* A port nobody holds: a few tries. */
  int port = 0;
  for (int k = 0; k < 5 && !port; k++) {
    int p = 56000 + (int)((getpid() + 97 * k) % 2000);
    if (own_ctl(g_own, p, "start", 0) == 0) port = p;
  }
  cr_assert_neq(port, 0, "own cluster did not start");
  char ports[16];
  snprintf(ports, sizeof ports, "%d", port);
  spec_for(j, "127.0.0.1", ports);

  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_neq(rc, 0, "ran with max_prepared_transactions = 0: %s", err);
  cr_assert(strstr(err, "max_prepared_transactions = 0") != NULL && strstr(err, ports) != NULL,
            "unclear error: %s", err);
  free(err);
  cr_assert_eq(own_ctl(g_own, port, "stop", 0), 0);
  cr_assert_eq(own_ctl(g_own, port, "start", 16), 0);

  /* Fresh state: the failed run above started the job. */
  char state[700];
  snprintf(state, sizeof state, "%s", j->state);
  th_rmrf(state);
  const char *lease[] = {"--lease-ms", "120000", NULL};
  pid_t pid = spawn_job(j, "sink.before_commit=pause@1", lease);
  int st = crash_wait(pid, RUN_TIMEOUT_S * 1000, 1);
  if (st != 1000) {
    char *e = read_stderr(j);
    cr_assert_fail("the job did not stop at sink.before_commit: %d %s", st, e);
  }
  PGconn *c = pg_connect(g_conninfo);
  long long before = prepared_of(c, job_id(j));
  PQfinish(c);
  cr_assert_gt(before, 0, "nothing prepared before the restart");
  cr_assert_eq(own_ctl(g_own, port, "restart", 16), 0);
  c = pg_connect(g_conninfo);
  cr_assert_eq(prepared_of(c, g_job), before, "prepared transactions lost by the restart");
  kill(-pid, SIGCONT);
  rc = crash_wait(pid, RUN_TIMEOUT_S * 1000, 0);
  err = read_stderr(j);
  cr_assert_eq(rc, 0, "after the restart: exit %d: %s", rc, err);
  free(err);
  check_pg(j, c);
  PQfinish(c);
  pg_cleanup();
  (void)own_ctl(g_own, port, "stop", 0);
  g_own[0] = '\0';
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A cluster of its own for j with max_prepared_transactions = mpt, on a
 * free port, the job's sink pointed at it; returns the port, or skips. */
static int own_server(crash_job *j, int mpt) {
  snprintf(g_own, sizeof g_own, "%s/pg", j->dir);
  char why[512];
  if (own_cluster(j->dir, why, sizeof why) < 0) {
    g_own[0] = '\0';
    cr_assert(!th_in_ci(), "cannot make a PostgreSQL cluster: %s", why);
    crash_free(j);
    cr_skip_test("cannot make a PostgreSQL cluster of its own: %s", why);
  }
  int port = 0;
  for (int k = 0; k < 5 && !port; k++) {
    int p = 56000 + (int)((getpid() + 97 * k) % 2000);
    if (own_ctl(g_own, p, "start", mpt) == 0) port = p;
  }
  cr_assert_neq(port, 0, "own cluster did not start");
  char ports[16];
  snprintf(ports, sizeof ports, "%d", port);
  spec_for(j, "127.0.0.1", ports);
  return port;
}

/* Waits until the job's first rows are committed (its job id is known
 * then). */
static void wait_committed(PGconn *c) {
  for (int64_t end = th_mono_ms() + 30000; !g_job[0];) {
    cr_assert_lt(th_mono_ms(), end, "no rows committed");
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT split_part(opid, '/', 1) FROM %s LIMIT 1", g_table);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
      snprintf(g_job, sizeof g_job, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (!g_job[0]) th_sleep_ms(10);
  }
}

/* Another client takes every prepared-transaction slot of the server
 * (slots of its own, empty transactions prepared on connection h, until
 * it holds `slots`; the sink's own are released as their checkpoints
 * complete). */
static void hold_slots(PGconn *h, int slots) {
  int held = 0;
  for (int64_t end = th_mono_ms() + 30000; held < slots;) {
    cr_assert_lt(th_mono_ms(), end, "holds %d of %d prepared-transaction slots", held, slots);
    pg_exec(h, "BEGIN");
    char sql[128];
    snprintf(sql, sizeof sql, "PREPARE TRANSACTION 'weir_test_hold_%d_%d'", (int)getpid(), held);
    PGresult *r = PQexec(h, sql);
    if (PQresultStatus(r) == PGRES_COMMAND_OK)
      held++;
    else
      th_sleep_ms(2);
    PQclear(r);
  }
}

static void release_slots(PGconn *h, int slots) {
  for (int i = 0; i < slots; i++) {
    char sql[128];
    snprintf(sql, sizeof sql, "ROLLBACK PREPARED 'weir_test_hold_%d_%d'", (int)getpid(), i);
    pg_exec(h, sql);
  }
}

/* Lines of text holding needle. */
static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *q = text; (q = strstr(q, needle)) != NULL; q += strlen(needle)) n++;
  return n;
}

/* The summary's "prepare_declines", over the sink's subtasks. */
static long long summary_declines(const char *path) {
  char *t = th_read_file(path, NULL);
  cr_assert_not_null(t, "no %s", path);
  long long n = 0;
  for (char *q = t; (q = strstr(q, "\"prepare_declines\": ")) != NULL; q++) n += atoll(q + 20);
  free(t);
  return n;
}

#define SLOTS 4 /* max_prepared_transactions of the own server: 2 per sink subtask */

/* Another client holds every prepared-transaction slot while the job runs:
 * its PREPAREs fail (the server's error named in each declined
 * checkpoint's log line), the checkpoints are declined and counted, the
 * job goes on (within --tolerable-checkpoint-failures) keeping the rows
 * of the declined epochs; once the client releases the slots the job
 * completes with every row exactly once and nothing left prepared. */
Test(pg_tx, prepare_slots_held_by_another_client) {
  crash_job *j = tx_job(8000, 40, "2000", "100");
  own_server(j, SLOTS);
  char sum[700];
  snprintf(sum, sizeof sum, "%s/summary.json", j->dir);
  const char *extra[] = {"--tolerable-checkpoint-failures", "1000", "--summary-json", sum, NULL};
  pid_t pid = spawn_job(j, NULL, extra);
  PGconn *c = pg_connect(g_conninfo);
  wait_committed(c);
  PGconn *h = pg_connect(g_conninfo);
  hold_slots(h, SLOTS);
  long long held_at = pg_num(c, "SELECT count(*) FROM %s", g_table);
  th_sleep_ms(1500);
  /* Nothing committed while every slot is held, and the job runs on. */
  cr_assert_eq(pg_num(c, "SELECT count(*) FROM %s", g_table), held_at, "rows committed meanwhile");
  cr_assert_eq(waitpid(pid, NULL, WNOHANG), 0, "the job ended while the slots were held");
  char *err = read_stderr(j);
  int declined = count_of(err, "declined: an operator declined it: operator 'sink'");
  cr_assert_geq(declined, 5, "%d checkpoints declined while the slots were held: %s", declined,
                err);
  cr_assert(strstr(err, "maximum number of prepared transactions reached") != NULL,
            "the server's error is not named: %s", err);
  cr_assert(strstr(err, "are kept for the next epoch's transaction") != NULL, "%s", err);
  free(err);
  release_slots(h, SLOTS);
  int rc = crash_wait(pid, RUN_TIMEOUT_S * 1000, 0);
  err = read_stderr(j);
  cr_assert_eq(rc, 0, "after the slots were released: exit %d: %s", rc, err);
  declined = count_of(err, "declined: an operator declined it: operator 'sink'");
  free(err);
  long long counted = summary_declines(sum);
  cr_assert_geq(counted, declined, "summary counts %lld declines, the log %d", counted, declined);
  fprintf(stderr,
          "pg_tx::prepare_slots_held_by_another_client: %d checkpoints declined, %lld "
          "prepares declined\n",
          declined, counted);
  check_pg(j, c);
  PQfinish(h);
  PQfinish(c);
  pg_cleanup();
  (void)own_ctl(g_own, 0, "stop", 0);
  g_own[0] = '\0';
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The slots stay held: beyond the tolerable checkpoint failures the job
 * stops with WEIR_ECKPTLIMIT (exit 3), naming the server's error; once
 * they are released, --restore latest finishes it exactly. */
Test(pg_tx, prepare_slots_held_beyond_tolerance) {
  crash_job *j = tx_job(8000, 40, "2000", "100");
  own_server(j, SLOTS);
  const char *extra[] = {"--tolerable-checkpoint-failures", "3", NULL};
  pid_t pid = spawn_job(j, NULL, extra);
  PGconn *c = pg_connect(g_conninfo);
  wait_committed(c);
  PGconn *h = pg_connect(g_conninfo);
  hold_slots(h, SLOTS);
  int rc = crash_wait(pid, RUN_TIMEOUT_S * 1000, 0);
  char *err = read_stderr(j);
  crash_hist(j, "[slots held: %d] ", rc);
  cr_assert_eq(rc, 3, "with every slot held: exit %d: %s", rc, err);
  cr_assert(strstr(err, "more than the 3 tolerated") != NULL, "%s", err);
  cr_assert(strstr(err, "maximum number of prepared transactions reached") != NULL, "%s", err);
  free(err);
  release_slots(h, SLOTS);
  PQfinish(h);
  restore_until_done(j);
  check_pg(j, c);
  PQfinish(c);
  pg_cleanup();
  (void)own_ctl(g_own, 0, "stop", 0);
  g_own[0] = '\0';
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The connection drops before PREPARE (failpoint pg.before_prepare: the
 * checkpoint is declined, the rows kept and sent again) and after it, its
 * answer lost (pg.after_prepare: settled by looking the gid up, found
 * prepared): exact rows on the shared server. */
Test(pg_tx, connection_lost_around_prepare) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, P_RATE, P_INTERVAL);
  char *err = NULL;
  int rc = crash_run(j, "pg.before_prepare=error@3,pg.after_prepare=error@6", -1, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "failpoint pg.before_prepare") != NULL &&
                strstr(err, "are kept for the next epoch's transaction") != NULL,
            "no declined checkpoint: %s", err);
  cr_assert(strstr(err, "the connection was lost after PREPARE TRANSACTION") != NULL &&
                strstr(err, "which is prepared") != NULL,
            "not settled: %s", err);
  free(err);
  PGconn *c = pg_connect(g_conninfo);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A PREPARE slower than the checkpoint timeout (failpoint
 * pg.before_prepare delays it 1.5 s, the timeout is 300 ms): its
 * checkpoint times out and is declined, the worker goes on, the next
 * snapshot takes the late answer (prepared) before it pre-commits, and
 * the epoch is committed with a later checkpoint: exact rows. */
Test(pg_tx, prepare_slower_than_the_checkpoint_timeout) {
  need_pg();
  crash_job *j = pg_job(P_RECORDS, P_KEYS, "20000", "100");
  char *err = NULL;
  int rc = crash_run(j, "pg.before_prepare=delay:1500@4", -1, &err, "--checkpoint-timeout", "300",
                     "--tolerable-checkpoint-failures", "10", NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "timed out before every operator acknowledged") != NULL,
            "no checkpoint timed out: %s", err);
  free(err);
  PGconn *c = pg_connect(g_conninfo);
  check_pg(j, c);
  PQfinish(c);
  pg_job_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The server restarts while the job runs (rows being COPYed, PREPAREs
 * failing while it is down, commits waiting for it): the connection
 * thread reconnects and sends the kept rows again, and the job completes
 * with every row exactly once. */
Test(pg_tx, own_server_restart_mid_run) {
  crash_job *j = tx_job(8000, 40, "2000", "100");
  int port = own_server(j, SLOTS);
  const char *extra[] = {"--tolerable-checkpoint-failures", "1000", NULL};
  pid_t pid = spawn_job(j, NULL, extra);
  PGconn *c = pg_connect(g_conninfo);
  wait_committed(c);
  PQfinish(c);
  cr_assert_eq(own_ctl(g_own, port, "restart", SLOTS), 0);
  cr_assert_eq(waitpid(pid, NULL, WNOHANG), 0, "the job ended before the server was back");
  int rc = crash_wait(pid, RUN_TIMEOUT_S * 1000, 0);
  char *err = read_stderr(j);
  cr_assert_eq(rc, 0, "after the restart: exit %d: %s", rc, err);
  fprintf(stderr, "pg_tx::own_server_restart_mid_run: %d checkpoints declined\n",
          count_of(err, "declined: an operator declined it: operator 'sink'"));
  free(err);
  c = pg_connect(g_conninfo);
  check_pg(j, c);
  PQfinish(c);
  pg_cleanup();
  (void)own_ctl(g_own, port, "stop", 0);
  g_own[0] = '\0';
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

TX_MAIN
