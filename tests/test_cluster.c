/* test_cluster.c: cluster mode (jobs/cluster.c, connectors/nats/
 * nats_cluster.c, engine/src/cut.c; docs/scale-out.md): the counter job
 * run by three `weir run --cluster URL --member NAME` processes, its two
 * stages (generator | count -> nats sink) of two tasks each (task t: split
 * t of the generator; the keys of task t) in their children, the key-by
 * edge between them a stage edge, ownership, fencing epochs, commit points
 * and replicated checkpoints in NATS, per task.
 *
 * Covers: with no fault the output stream holds every (key, count) exactly
 * once, the tasks spread over the members, and every member leaves when
 * every task finished; members killed (SIGKILL of the member process
 * only: its tasks' runs kill themselves when their pipe closes) while
 * they run a task, and restarted later, the job still exact, no run of a
 * dead member left behind (and the same into PostgreSQL: every row once,
 * no prepared transaction left); a paused member (SIGSTOP past its lease,
 * then SIGCONT) commits nothing more, its task taken over, exact; a
 * task's run killed while it publishes its batches downstream (the stage
 * edge's stream keeps duplicates: a 100 ms window), exact, and the
 * negative control, the same with the consumer's high-water marks
 * disabled (failpoint stage.apply_duplicates), counts some records twice;
 * a member that joins takes the tasks that hash to it over from their
 * holder (stopped after a committed checkpoint), exact;
 * one node of a three-node NATS cluster killed under the members (R3),
 * exact; a member with another graph refused (exit 2),
 * the file sink refused, `weir cluster status` and `delete`.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nats/nats.h>

#include "crash.h"
#include "helpers.h"
#include "nats_server.h"
#include "weir/cluster.h"

typedef unsigned long long ull;

#define LEASE_MS "1500"
#define NMEMBERS 3
#define NTASKS 2 /* --tasks: of each of the two stages */
#define NTASKS_ARG "2"

static void cluster_fini(void);
TestSuite(cluster, .timeout = 240, .fini = cluster_fini);

typedef struct tcl {
  char url[512];
  char job[64];
  char out_subject[128], out_stream[96];
  const char *replicas; /* "--replicas N" value, or NULL */
  crash_job *j;         /* records, keys, the directory and the history */
  const char *rate;
  char sink[700]; /* the job's sink: "" = the nats sink on out_stream */
  natsConnection *nc;
  jsCtx *js;
  weir_cluster *cl;  /* the job's state in NATS, for holder_of (NULL until read) */
  int http_base;     /* > 0: member i runs with --http 127.0.0.1:<http_base + 20 i> */
  const char *tasks; /* --tasks, NULL: NTASKS */
  pid_t pid[NMEMBERS];
} tcl;

/* What the suite's fini closes when a test ends on a failed assertion (a
 * long jump out of it): so each test's tcl is static, not on its stack. */
static tcl *live;
static pcluster *live_pc;

static void tcl_stop_members(tcl *c) {
  for (int i = 0; i < NMEMBERS; i++)
    if (c->pid[i] > 0) {
      kill(-c->pid[i], SIGKILL);
      waitpid(c->pid[i], NULL, 0);
      c->pid[i] = 0;
    }
}

static void tcl_close(tcl *c) {
  tcl_stop_members(c);
  weir_cluster_close(c->cl);
  char err[256];
  (void)weir_cluster_delete(c->url, c->job, err, sizeof err);
  js_DeleteStream(c->js, c->out_stream, NULL, NULL);
  jsCtx_Destroy(c->js);
  natsConnection_Close(c->nc);
  natsConnection_Destroy(c->nc);
  crash_free(c->j);
  live = NULL;
}

static void cluster_fini(void) {
  if (live) tcl_close(live);
  if (live_pc) pcluster_stop(live_pc);
  crash_fini();
}

static void tcl_open(tcl *c, const char *url, uint64_t records, uint64_t keys, const char *rate) {
  static int n;
  memset(c, 0, sizeof *c);
  snprintf(c->url, sizeof c->url, "%s", url);
  snprintf(c->job, sizeof c->job, "t%d_%d", (int)getpid(), n++);
  snprintf(c->out_subject, sizeof c->out_subject, "weirtest.%s.out", c->job);
  snprintf(c->out_stream, sizeof c->out_stream, "OUT_%s", c->job);
  c->j = crash_new("counter", 0);
  c->j->records = records;
  c->j->keys = keys;
  c->rate = rate;
  /* nats://H:P or nats://H1:P1,H2:P2,...: each server as libnats wants it. */
  char list[512], *servers[8], *save = NULL;
  int ns = 0;
  snprintf(list, sizeof list, "%s", url + strlen("nats://"));
  char full[8][128];
  for (char *tok = strtok_r(list, ",", &save); tok && ns < 8; tok = strtok_r(NULL, ",", &save)) {
    snprintf(full[ns], sizeof full[ns], "nats://%s", tok);
    servers[ns] = full[ns];
    ns++;
  }
  natsOptions *o = NULL;
  cr_assert_eq(natsOptions_Create(&o), NATS_OK);
  cr_assert_eq(natsOptions_SetServers(o, (const char **)servers, ns), NATS_OK);
  cr_assert_eq(natsConnection_Connect(&c->nc, o), NATS_OK, "cannot connect to %s", url);
  natsOptions_Destroy(o);
  cr_assert_eq(natsConnection_JetStream(&c->js, c->nc, NULL), NATS_OK);
  live = c;
}

/* Starts member i (name m<i>) with `failpoints` (NULL: none) in its
 * environment and `extra` job arguments; its output appends to
 * <dir>/m<i>.log. In a process group of its own (with its stages' runs). */
static void member_start(tcl *c, int i, const char *failpoints, const char *extra) {
  char name[16], state[700], log[700], sink[1024], recs[24], keys[24];
  snprintf(name, sizeof name, "m%d", i);
  snprintf(state, sizeof state, "%s/%s", c->j->dir, name);
  snprintf(log, sizeof log, "%s/%s.log", c->j->dir, name);
  if (c->sink[0])
    snprintf(sink, sizeof sink, "%s", c->sink);
  else /* replicated as the job's streams are: on one node of three, a kill could take it */
    snprintf(sink, sizeof sink, "%s/%s?stream=%s%s%s", c->url, c->out_subject, c->out_stream,
             c->replicas ? "&replicas=" : "", c->replicas ? c->replicas : "");
  snprintf(recs, sizeof recs, "%llu", (ull)c->j->records);
  snprintf(keys, sizeof keys, "%llu", (ull)c->j->keys);
  const char *argv[48];
  int k = 0;
  argv[k++] = WEIR_BINARY;
  argv[k++] = "run";
  argv[k++] = "--cluster";
  argv[k++] = c->url;
  argv[k++] = "--member";
  argv[k++] = name;
  argv[k++] = "--job";
  argv[k++] = c->job;
  argv[k++] = "--state-dir";
  argv[k++] = state;
  argv[k++] = "--lease-ms";
  argv[k++] = LEASE_MS;
  argv[k++] = "--tasks";
  argv[k++] = c->tasks ? c->tasks : NTASKS_ARG;
  if (c->replicas) {
    argv[k++] = "--replicas";
    argv[k++] = c->replicas;
  }
  argv[k++] = "counter";
  argv[k++] = "--records";
  argv[k++] = recs;
  argv[k++] = "--keys";
  argv[k++] = keys;
  argv[k++] = "--rate";
  argv[k++] = c->rate;
  argv[k++] = "--workers";
  argv[k++] = "1";
  argv[k++] = "--checkpoint-interval";
  argv[k++] = "200";
  argv[k++] = "--sink";
  argv[k++] = sink;
  char http[64];
  if (c->http_base > 0) {
    snprintf(http, sizeof http, "127.0.0.1:%d", c->http_base + 20 * i);
    argv[k++] = "--http";
    argv[k++] = http;
  }
  if (extra) argv[k++] = extra;
  argv[k] = NULL;
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    if (failpoints)
      setenv("WEIR_FAILPOINTS", failpoints, 1);
    else
      unsetenv("WEIR_FAILPOINTS");
    execv(argv[0], (char **)argv);
    _exit(127);
  }
  setpgid(pid, pid);
  c->pid[i] = pid;
  crash_hist(c->j, " start m%d", i);
}

/* Kills member i with its tasks' runs (SIGKILL to its process group: a
 * host gone). */
static void member_kill(tcl *c, int i) {
  kill(-c->pid[i], SIGKILL);
  waitpid(c->pid[i], NULL, 0);
  c->pid[i] = 0;
}

/* Waits for member i to exit (up to timeout_s): its exit code, or -1 if
 * it did not (then it is killed). */
static int member_wait(tcl *c, int i, int timeout_s) {
  for (int t = 0; t < timeout_s * 50; t++) {
    int st;
    pid_t r = waitpid(c->pid[i], &st, WNOHANG);
    if (r == c->pid[i]) {
      c->pid[i] = 0;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    th_sleep_ms(20);
  }
  member_kill(c, i);
  return -1;
}

/* Waits up to timeout_s for member i's log to report n failed runs of its
 * tasks, then kills it (member_kill). Returns the failures reported. */
static int member_kill_after_failures(tcl *c, int i, int n, int timeout_s) {
  char log[700];
  snprintf(log, sizeof log, "%s/m%d.log", c->j->dir, i);
  int seen = 0;
  for (int t = 0; t < timeout_s * 10 && seen < n; t++) {
    th_sleep_ms(100);
    char *text = th_read_file(log, NULL);
    seen = 0;
    for (const char *p = text; p && (p = strstr(p, " failed (exit ")) != NULL; p++) seen++;
    free(text);
  }
  member_kill(c, i);
  return seen;
}

/* Processes of group pgid that are not zombies (orphans reparented to an
 * init that reaps them late stay as zombies a while: they are dead). */
static int live_in_group(pid_t pgid) {
  FILE *p = popen("ps -eo pgid=,stat=", "r");
  cr_assert(p, "cannot run ps");
  int n = 0, g;
  char st[16];
  while (fscanf(p, "%d %15s", &g, st) == 2)
    if (g == (int)pgid && st[0] != 'Z') n++;
  pclose(p);
  return n;
}

/* No live process of member i's group is left (its stages' runs died with
 * it) within a second: less than a lease, so that it is not their fencing
 * that ended them. */
static void no_orphans(tcl *c, pid_t pgid, int i) {
  for (int t = 0; t < 20; t++) {
    if (!live_in_group(pgid)) return;
    th_sleep_ms(50);
  }
  cr_assert_fail("member m%d was killed, but a run of its stages lives on\nhistory: %s", i,
                 c->j->history);
}

/* The member that holds task `task`'s lease ("<stage>.<task>"; -1: none),
 * through the job's state in NATS (opened once a member made it). */
static int holder_of(tcl *c, const char *task) {
  char err[256], name[64];
  if (!c->cl && weir_cluster_open(&c->cl, c->url, c->job, 1500, -1, err, sizeof err) != 0)
    return -1;
  if (weir_cluster_holder(c->cl, task, name, sizeof name) != 0 || name[0] != 'm') return -1;
  return atoi(name + 1);
}

static const char *task_name(int stage, int task) {
  static const char *names[2][NTASKS] = {{"0.0", "0.1"}, {"1.0", "1.1"}};
  return names[stage][task];
}

/* The output stream holds every (key, count) exactly once (exact), or
 * returns how many lines were over (not exact). */
static uint64_t check_output(tcl *c, int exact) {
  jsStreamInfo *si = NULL;
  cr_assert_eq(js_GetStreamInfo(&si, c->js, c->out_stream, NULL, NULL), NATS_OK,
               "no output stream %s\nhistory: %s", c->out_stream, c->j->history);
  uint64_t first = si->State.FirstSeq, last = si->State.LastSeq, msgs = si->State.Msgs;
  jsStreamInfo_Destroy(si);
  if (exact)
    cr_assert_eq(msgs, c->j->records, "%s holds %llu messages for %llu records\nhistory: %s",
                 c->out_stream, (ull)msgs, (ull)c->j->records, c->j->history);
  crash_tally t;
  crash_tally_init(c->j, &t, exact);
  uint64_t wrong = 0;
  /* One ordered consumer over the stream: far quicker than a get per
   * message. */
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = c->out_stream;
  so.Ordered = true;
  natsSubscription *sub = NULL;
  /* Asked again for a while: a replicated stream just lost a node. */
  natsStatus st = NATS_ERR;
  for (int t = 0; t < 20 && st != NATS_OK; t++) {
    if (t) th_sleep_ms(500);
    st = js_SubscribeSync(&sub, c->js, c->out_subject, NULL, &so, NULL);
  }
  cr_assert_eq(st, NATS_OK, "cannot read %s: %s", c->out_stream, nats_GetLastError(NULL));
  for (uint64_t got = 0; first && got < msgs; got++) {
    natsMsg *m = NULL;
    cr_assert_eq(natsSubscription_NextMsg(&m, sub, 10000), NATS_OK, "message %llu of %llu: %s",
                 (ull)got, (ull)msgs, nats_GetLastError(NULL));
    char line[128];
    int n = natsMsg_GetDataLength(m);
    cr_assert(n > 0 && n < (int)sizeof line);
    memcpy(line, natsMsg_GetData(m), (size_t)n);
    line[n] = '\0';
    ull k = 0, cnt = 0;
    cr_assert_eq(sscanf(line, "%llu %llu", &k, &cnt), 2, "line '%s'", line);
    /* A key counted past its records: only a duplicate makes that. */
    uint64_t per = c->j->records / c->j->keys + (k < c->j->records % c->j->keys);
    if (cnt > per)
      wrong++;
    else
      crash_tally_line(c->j, &t, line, c->out_stream);
    natsMsg_Destroy(m);
  }
  natsSubscription_Destroy(sub);
  (void)last;
  if (exact) {
    cr_assert_eq(wrong, 0, "%llu counts beyond their key's records\nhistory: %s", (ull)wrong,
                 c->j->history);
    crash_tally_check(c->j, &t, c->out_stream);
  }
  crash_tally_free(&t);
  return wrong + t.over;
}

/* Every member exits 0 within timeout_s. */
static void all_leave(tcl *c, int timeout_s) {
  for (int i = 0; i < NMEMBERS; i++) {
    if (c->pid[i] <= 0) continue;
    int rc = member_wait(c, i, timeout_s);
    if (rc != 0) {
      char log[700];
      snprintf(log, sizeof log, "%s/m%d.log", c->j->dir, i);
      char *text = th_read_file(log, NULL);
      cr_assert_fail("member m%d exited %d\nhistory: %s\nits log:\n%s", i, rc, c->j->history,
                     text ? text : "(none)");
    }
  }
}

/* `weir cluster status` of the job into buf. */
static void status_of(tcl *c, char *buf, size_t cap) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "%s cluster status --cluster %s --job %s", WEIR_BINARY, c->url, c->job);
  FILE *p = popen(cmd, "r");
  cr_assert(p, "cannot run %s", cmd);
  size_t n = fread(buf, 1, cap - 1, p);
  buf[n] = '\0';
  cr_assert_eq(pclose(p), 0, "%s:\n%s", cmd, buf);
}

static void start_all(tcl *c, const char *failpoints) {
  for (int i = 0; i < NMEMBERS; i++) member_start(c, i, failpoints, NULL);
}

Test(cluster, three_members_exact) {
  static tcl c;
  tcl_open(&c, nats_url(), 60000, 97, "30000");
  start_all(&c, NULL);
  all_leave(&c, 90);
  check_output(&c, 1);
  /* Status says it finished; a member started again has nothing to do. */
  char buf[4096];
  status_of(&c, buf, sizeof buf);
  cr_assert(strstr(buf, "task 0.0: finished") && strstr(buf, "task 0.1: finished") &&
                strstr(buf, "task 1.0: finished") && strstr(buf, "task 1.1: finished") &&
                strstr(buf, "the job finished"),
            "status:\n%s", buf);
  /* The tasks were spread: more than one member ran some. */
  int ran = 0;
  for (int i = 0; i < NMEMBERS; i++) {
    char log[700];
    snprintf(log, sizeof log, "%s/m%d.log", c.j->dir, i);
    char *text = th_read_file(log, NULL);
    ran += text && strstr(text, "runs here") != NULL;
    free(text);
  }
  cr_assert_geq(ran, 2, "only %d member(s) ran tasks\nhistory: %s", ran, c.j->history);
  member_start(&c, 0, NULL, NULL);
  cr_assert_eq(member_wait(&c, 0, 30), 0);
  check_output(&c, 1);
  tcl_close(&c);
}

/* The stage edge's stream, made before the members, with a 100 ms
 * duplicate window: what a producer publishes again lands twice, and only
 * the consumer's marks keep it out of the count. */
static void short_window_edge(tcl *c) {
  char name[96], subj[128];
  snprintf(name, sizeof name, "WEIR_%s_E1", c->job);
  snprintf(subj, sizeof subj, "weir.%s.e1.>", c->job);
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  const char *subs[1] = {subj};
  cfg.Name = name;
  cfg.Subjects = subs;
  cfg.SubjectsLen = 1;
  cfg.Duplicates = 100 * 1000000LL;
  jsStreamInfo *si = NULL;
  cr_assert_eq(js_AddStream(&si, c->js, &cfg, NULL, NULL), NATS_OK, "%s", nats_GetLastError(NULL));
  jsStreamInfo_Destroy(si);
}

/* Member 0 alone first (it takes every task), its tasks' runs killed
 * after their 6th send (a stage edge batch, an output message) again and
 * again (4 times), then member 0 too; the two others finish the job. */
static uint64_t killed_while_publishing(const char *all_failpoints) {
  static tcl c;
  tcl_open(&c, nats_url(), 80000, 97, "20000");
  short_window_edge(&c);
  char fp[256];
  snprintf(fp, sizeof fp, "sink.after_send=kill@6%s%s", all_failpoints ? "," : "",
           all_failpoints ? all_failpoints : "");
  member_start(&c, 0, fp, NULL);
  int failed = member_kill_after_failures(&c, 0, 4, 60);
  cr_assert_geq(failed, 4, "member 0's runs failed %d times in 60 s\nhistory: %s", failed,
                c.j->history);
  crash_hist(c.j, " kill m0 after %d failed runs", failed);
  for (int i = 1; i < NMEMBERS; i++) member_start(&c, i, all_failpoints, NULL);
  all_leave(&c, 120);
  uint64_t over = check_output(&c, all_failpoints == NULL);
  tcl_close(&c);
  return over;
}

Test(cluster, killed_while_publishing_is_exact) {
  killed_while_publishing(NULL);
}

Test(cluster, negative_control_without_marks_counts_twice) {
  uint64_t over = killed_while_publishing("stage.apply_duplicates=error+");
  cr_assert_gt(over, 0,
               "no record was counted twice with the marks disabled: the kills did not "
               "make the producer publish again, so the positive test proves nothing");
}

Test(cluster, members_killed_are_taken_over) {
  static tcl c;
  tcl_open(&c, nats_url(), 150000, 97, "15000");
  short_window_edge(&c);
  start_all(&c, NULL);
  uint64_t seed = (uint64_t)getpid() * 2654435761u;
  int kills = 0;
  for (int round = 0; round < 4; round++) {
    th_sleep_ms(1800 + (int)(th_splitmix64(&seed) % 1200));
    const char *task =
        task_name((int)(th_splitmix64(&seed) % 2), (int)(th_splitmix64(&seed) % NTASKS));
    int who = holder_of(&c, task);
    if (who < 0 || c.pid[who] <= 0) continue;
    pid_t pg = c.pid[who];
    kill(pg, SIGKILL); /* the member only: its runs must die with it */
    waitpid(pg, NULL, 0);
    c.pid[who] = 0;
    crash_hist(&c.j[0], " kill m%d (task %s)", who, task);
    kills++;
    no_orphans(&c, pg, who);
    th_sleep_ms(500);
    member_start(&c, who, NULL, NULL);
  }
  cr_assert_geq(kills, 2, "only %d kills landed\nhistory: %s", kills, c.j->history);
  all_leave(&c, 150);
  check_output(&c, 1);
  tcl_close(&c);
}

#ifdef WEIR_TEST_PQ
#include <libpq-fe.h>

static long long pg_count(PGconn *pg, const char *sql) {
  PGresult *r = PQexec(pg, sql);
  cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(pg));
  long long v = PQntuples(r) ? atoll(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  return v;
}

/* First member 0 alone, the runs of the sink's tasks killed at their first
 * commit point (cluster.before_commit.stage1: the sink's transaction of
 * their first checkpoint prepared at the server, the checkpoint committed
 * nowhere) again and again, until two such transactions are left and
 * member 0 is killed too: those tasks then start from nothing in the other
 * members, and since a task's job id is the same in every run of it, they
 * roll back what the dead runs prepared. Then the kills of
 * members_killed_are_taken_over into PostgreSQL (two-phase commit; the
 * fence row of each task's job id at its epoch). Every (k, c) once in the
 * table, and no prepared transaction left behind. (The only test here
 * that uses PostgreSQL, so the count of prepared transactions is its.) */
Test(cluster, members_killed_into_postgresql_are_exact) {
  if (!th_service("PGHOST")) {
    cr_assert(!th_in_ci(), "PGHOST is not set: PostgreSQL is required under CI");
    cr_skip_test("PGHOST is not set (scripts/services starts PostgreSQL)");
  }
  static tcl c;
  tcl_open(&c, nats_url(), 100000, 97, "12000");
  const char *user = getenv("PGUSER"), *db = getenv("PGDATABASE"), *port = getenv("PGPORT");
  char conninfo[512], table[96];
  snprintf(conninfo, sizeof conninfo, "postgresql://%s@%s:%s/%s", user && *user ? user : "postgres",
           getenv("PGHOST"), port ? port : "5432", db && *db ? db : "postgres");
  snprintf(table, sizeof table, "weir_c_%s", c.job);
  snprintf(c.sink, sizeof c.sink, "%s?table=%s", conninfo, table);
  PGconn *pg = PQconnectdb(conninfo);
  cr_assert(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
  long long prepared0 = pg_count(pg, "SELECT count(*) FROM pg_prepared_xacts");
  member_start(&c, 0, "cluster.before_commit.stage1=kill", NULL);
  long long left = 0;
  for (int t = 0; t < 600 && left < 2 && c.pid[0] > 0; t++) {
    th_sleep_ms(100);
    left = pg_count(pg, "SELECT count(*) FROM pg_prepared_xacts") - prepared0;
  }
  cr_assert_geq(left, 2,
                "%lld transactions left prepared by the killed runs in 60 s: the test "
                "proves nothing\nhistory: %s",
                left, c.j->history);
  member_kill(&c, 0);
  crash_hist(c.j, " kill m0, %lld prepared", left);
  start_all(&c, NULL);
  uint64_t seed = (uint64_t)getpid() * 40503u;
  int kills = 0;
  for (int round = 0; round < 3; round++) {
    th_sleep_ms(1800 + (int)(th_splitmix64(&seed) % 1000));
    const char *task = task_name(1, (int)(th_splitmix64(&seed) % NTASKS));
    int who = holder_of(&c, task);
    if (who < 0 || c.pid[who] <= 0) continue;
    kill(c.pid[who], SIGKILL);
    waitpid(c.pid[who], NULL, 0);
    c.pid[who] = 0;
    crash_hist(c.j, " kill m%d (task %s)", who, task);
    kills++;
    th_sleep_ms(300);
    member_start(&c, who, NULL, NULL);
  }
  cr_assert_geq(kills, 2, "only %d kills landed\nhistory: %s", kills, c.j->history);
  all_leave(&c, 150);
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT key, value FROM %s", table);
  PGresult *r = PQexec(pg, sql);
  cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(pg));
  cr_assert_eq((uint64_t)PQntuples(r), c.j->records, "%d rows for %llu records\nhistory: %s",
               PQntuples(r), (ull)c.j->records, c.j->history);
  crash_tally t;
  crash_tally_init(c.j, &t, 1);
  for (int i = 0; i < PQntuples(r); i++) {
    char line[128];
    snprintf(line, sizeof line, "%s %s", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
    crash_tally_line(c.j, &t, line, table);
  }
  PQclear(r);
  crash_tally_check(c.j, &t, table);
  crash_tally_free(&t);
  long long prepared = pg_count(pg, "SELECT count(*) FROM pg_prepared_xacts");
  cr_assert_eq(prepared, prepared0, "%lld prepared transactions before, %lld after\nhistory: %s",
               prepared0, prepared, c.j->history);
  snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", table);
  PQclear(PQexec(pg, sql));
  PQfinish(pg);
  tcl_close(&c);
}

#endif

/* A port the kernel had free just now: the first of a range for --http. */
static int free_port(void) {
  int p = 0;
  cr_assert_eq(pcluster_free_ports(&p, 1), 0, "no free loopback port");
  return p > 65000 ? 40000 : p;
}

/* Also: with --http HOST:PORT each task's run serves on PORT + its index
 * (stage * tasks + task), so that a member's tasks do not ask for one
 * port; the paused member's task 1.0 wrote its address there. */
Test(cluster, paused_member_commits_nothing_more) {
  static tcl c;
  tcl_open(&c, nats_url(), 120000, 97, "15000");
  c.http_base = free_port();
  start_all(&c, NULL);
  int who = -1;
  for (int t = 0; t < 200 && who < 0; t++) {
    th_sleep_ms(50);
    who = holder_of(&c, "1.0");
  }
  cr_assert_geq(who, 0, "nobody took task 1.0");
  th_sleep_ms(2000);
  kill(-c.pid[who], SIGSTOP); /* the member and its runs */
  crash_hist(c.j, " pause m%d (task 1.0)", who);
  /* Meanwhile status shows its holder and what it has not applied: the
   * batches on its input subjects since its last commit. */
  th_sleep_ms(500);
  char buf[8192], want[160];
  status_of(&c, buf, sizeof buf);
  snprintf(want, sizeof want, "task 1.0: runs on m%d", who);
  cr_assert(strstr(buf, want), "status, m%d paused:\n%s", who, buf);
  /* A producer that is not paused too publishes for task 1.0, which
   * purges nothing while stopped: its input backlog shows. */
  int producing = 0;
  for (int k = 0; k < NTASKS; k++) {
    int h = holder_of(&c, task_name(0, k));
    producing |= h >= 0 && h != who;
  }
  snprintf(want, sizeof want, "input weir.%s.e1.", c.job);
  const char *in = strstr(buf, want);
  if (producing)
    cr_assert(in && strstr(in, ".0: ") && strstr(in, "batches not applied"),
              "status shows no input backlog of task 1.0, m%d paused:\n%s", who, buf);
  char path[800], addr[64];
  snprintf(path, sizeof path, "%s/m%d/task1.0/http", c.j->dir, who);
  char *served = th_read_file(path, NULL);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", c.http_base + 20 * who + 1 * NTASKS + 0);
  cr_assert(served && !strncmp(served, addr, strlen(addr)), "task 1.0 of m%d serves on %s, not %s",
            who, served ? served : "(nothing)", addr);
  free(served);
  th_sleep_ms(4500); /* past its lease: another member takes task 1.0 */
  int now = holder_of(&c, "1.0");
  cr_assert(now >= 0 && now != who, "task 1.0 held by m%d after m%d paused", now, who);
  kill(-c.pid[who], SIGCONT);
  crash_hist(c.j, " continue m%d", who);
  all_leave(&c, 150);
  check_output(&c, 1);
  char log[700];
  snprintf(log, sizeof log, "%s/m%d.log", c.j->dir, who);
  char *text = th_read_file(log, NULL);
  cr_assert(text && (strstr(text, "lost the lease of task 1.0") ||
                     strstr(text, "taken over by another owner") ||
                     strstr(text, "another owner took it")),
            "m%d's log does not say it lost task 1.0:\n%s", who, text ? text : "");
  free(text);
  tcl_close(&c);
}

/* Rendezvous hashing gives some of the tasks to m1 once it is alive (m0
 * alone has them all): m0 hands those over when m1 joins, and keeps the
 * others. */
Test(cluster, a_joining_member_takes_tasks_over) {
  static tcl c;
  tcl_open(&c, nats_url(), 150000, 97, "15000");
  member_start(&c, 0, NULL, NULL);
  int who = -1;
  for (int t = 0; t < 200 && who != 0; t++) {
    th_sleep_ms(50);
    who = holder_of(&c, "1.0");
  }
  cr_assert_eq(who, 0, "m0, alone, does not run task 1.0");
  th_sleep_ms(1500);
  member_start(&c, 1, NULL, NULL);
  const char *moved = NULL;
  for (int t = 0; t < 300 && !moved; t++) {
    th_sleep_ms(50);
    for (int st = 0; st < 2; st++)
      for (int k = 0; k < NTASKS; k++)
        if (holder_of(&c, task_name(st, k)) == 1) moved = task_name(st, k);
  }
  cr_assert(moved, "no task moved to m1\nhistory: %s", c.j->history);
  crash_hist(c.j, " task %s on m1", moved);
  all_leave(&c, 150);
  check_output(&c, 1);
  char log[700], says[64];
  snprintf(log, sizeof log, "%s/m0.log", c.j->dir);
  char *text = th_read_file(log, NULL);
  snprintf(says, sizeof says, "task %s moves to member m1", moved);
  cr_assert(text && strstr(text, says), "m0's log does not say '%s':\n%s", says, text ? text : "");
  snprintf(says, sizeof says, "task %s handed over", moved);
  cr_assert(strstr(text, says), "m0's log does not say '%s':\n%s", says, text);
  free(text);
  tcl_close(&c);
}

Test(cluster, another_graph_and_the_file_sink_are_refused) {
  static tcl c;
  tcl_open(&c, nats_url(), 2000, 10, "1000");
  member_start(&c, 0, NULL, NULL);
  th_sleep_ms(1500);
  member_start(&c, 1, NULL, "--all-edges");
  cr_assert_eq(member_wait(&c, 1, 30), 2);
  char log[700];
  snprintf(log, sizeof log, "%s/m1.log", c.j->dir);
  char *text = th_read_file(log, NULL);
  cr_assert(text && strstr(text, "runs another graph"), "%s", text ? text : "");
  free(text);
  cr_assert_eq(member_wait(&c, 0, 60), 0);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s run --cluster %s --member x --job %s_f counter --sink file:%s/out 2>%s/f.err",
           WEIR_BINARY, c.url, c.job, c.j->dir, c.j->dir);
  int rc = system(cmd);
  cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "file sink: %d", rc);
  snprintf(log, sizeof log, "%s/f.err", c.j->dir);
  text = th_read_file(log, NULL);
  cr_assert(text && strstr(text, "the file sink is single-host"), "%s", text ? text : "");
  free(text);
  tcl_close(&c);
}

Test(cluster, survives_a_nats_node_killed) {
  static pcluster pc;
  char dir[600], *tmp = th_tmpdir();
  snprintf(dir, sizeof dir, "%s/nats", tmp);
  if (pcluster_start(&pc, dir) != 0) {
    cr_assert(!th_in_ci(), "cannot start a three-node NATS cluster");
    cr_skip_test("cannot start a three-node NATS cluster");
  }
  live_pc = &pc;
  static tcl c;
  tcl_open(&c, pc.url, 60000, 97, "15000");
  c.replicas = "3";
  /* One task a stage: on two cores, three NATS servers electing leaders
   * under seven weir processes answer too late for the members' leases. */
  c.tasks = "1";
  start_all(&c, NULL);
  th_sleep_ms(3000);
  pcluster_kill(&pc, 1, SIGKILL);
  crash_hist(c.j, " kill nats node 2");
  all_leave(&c, 150);
  check_output(&c, 1);
  tcl_close(&c);
  pcluster_stop(&pc);
  live_pc = NULL;
  th_rmrf(tmp);
  free(tmp);
}
