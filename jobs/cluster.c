/* jobs/cluster.c: owns cluster mode of `weir run` (--cluster URL --member
 * NAME; docs/scale-out.md): the member, which takes tasks of the job and
 * runs each in a child process of its own, and the child's side of it, a
 * run of one task whose commit point is in NATS.
 *
 * DESIGN. A job's graph is cut into stages at its key-by edges, and each
 * stage into --tasks tasks: task t of stage K reads the stage edge's task
 * t and is split t of K's sources (weir_stage_cut.task). The task is the
 * unit of ownership. A member is a supervisor, never a data path: every
 * beat (a third of the lease) it writes its heartbeat, renews the leases
 * of the tasks it runs, reaps the children that ended, and claims the
 * tasks that nobody holds and that rendezvous hashing over the live
 * members gives to it. A task runs as `weir run --cluster-stage K
 * --cluster-task T ...` (the member's own command line with the task, its
 * fencing epoch and a pipe whose end tells the child its member died), in
 * a fresh state directory <state dir>/task<K>.<T>: what a member had only
 * locally never counts. The child cuts the graph to the task with stage
 * edges at its cuts, takes the task's commit point over
 * (weir_cluster_take: its epoch written, the checkpoint it names fetched)
 * and restores from it as from a savepoint; each checkpoint then counts
 * only once weir_cluster_commit stored it in NATS and moved the commit
 * point, before any sink commits or any batch goes downstream. A member
 * that loses a lease kills that task's child at once (fail-stop), and a
 * child whose member died kills itself.
 */
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <sys/stat.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "weir/cluster.h"
#include "weir/nats.h"
#include "weir/sinks.h"

#define MAX_STAGES 64
#define MAX_TASKS 4096 /* stages x tasks */
/* A task's failed run is started again after a backoff, from 2 beats
 * doubling up to 32; its member ends only when the runs kept failing for
 * FAIL_LEASES leases and at least MAX_RESTARTS times. NATS itself may be
 * unavailable that long (a node's death: its streams elect leaders, and
 * consumers and requests time out meanwhile); a fault of the job's own
 * fails every run and still ends the member. A run that lasted
 * FAIL_LEASES leases got going: the count starts again. */
#define MAX_RESTARTS 3
#define FAIL_LEASES 40
#define MAX_BACKOFF_BEATS 32

int cli_main_argc;
char **cli_main_argv;

static int valid_name(const char *s) {
  if (!s || !*s || strlen(s) > 100) return 0;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_'))
      return 0;
  return 1;
}

int cli_cluster_check(const cli_engine *eng, const char *job_name) {
  if (!eng->cluster) {
    if (eng->member || eng->cluster_job || eng->cluster_stage >= 0 || eng->cluster_task >= 0)
      return cli_usage("--member and --job go with --cluster nats://HOST:PORT[,HOST:PORT...]");
    return 0;
  }
  if (strncmp(eng->cluster, "nats://", 7) != 0 || strchr(eng->cluster + 7, '/'))
    return cli_usage("--cluster: the NATS servers, nats://HOST:PORT[,HOST:PORT...] (no subject)");
  if (eng->cluster_stage < 0 && !valid_name(eng->member))
    return cli_usage("--cluster needs --member NAME (letters, digits, - and _): this process's "
                     "name in the cluster");
  const char *job = eng->cluster_job ? eng->cluster_job : job_name;
  if (!valid_name(job))
    return cli_usage("--job '%s': letters, digits, - and _ only (the job's name in the cluster)",
                     job);
  if (eng->sink && !strncmp(eng->sink, "file:", 5))
    return cli_usage("--sink %s: the file sink is single-host, and a task may move to another "
                     "host: in cluster mode, use postgresql://, nats:// or http:// sinks",
                     eng->sink);
  if (!strcmp(eng->state_dir, "none"))
    return cli_usage("--cluster needs a state directory (its tasks checkpoint there first)");
  if (eng->parallelism > 1)
    return cli_usage("--parallelism %d: in cluster mode each task runs its stage at one "
                     "subtask, so a stage's parallelism is its number of tasks: --tasks %d",
                     eng->parallelism, eng->parallelism);
  return 0;
}

static const char *cluster_job(const cli_engine *eng, const weir_job *job) {
  return eng->cluster_job ? eng->cluster_job : weir_job_name(job);
}

static uint32_t lease_of(const cli_engine *eng) {
  return eng->lease_ms ? (uint32_t)eng->lease_ms : 6000u;
}

static int tasks_of(const cli_engine *eng) {
  return eng->tasks ? (int)eng->tasks : 4;
}

/* ---- the member ---------------------------------------------------------- */

typedef struct task_run {
  int stage, task;
  char name[24]; /* "<stage>.<task>": its keys in NATS */
  int owned;
  uint64_t epoch, rev;
  uint64_t renewed_ns; /* the lease's last renewal that NATS answered */
  pid_t pid;           /* 0: no child */
  int pipe_w;          /* the member's end of the child's pipe */
  int failures;        /* the task's runs that failed here in a row */
  uint64_t failing_ns; /* when the first of those failed */
  uint64_t started_ns; /* when its current (last) run started */
  uint64_t next_ns;    /* a task nobody holds is claimed by anyone after this */
  uint64_t retry_ns;   /* a task whose run failed here is claimed again after this */
  int handing_off;     /* its child was stopped for the task's rendezvous owner */
  char want[128];      /* the task's rendezvous owner at the last beat */
} task_run;

/* Counts the failure of r's run that just ended at `now`: nonzero if its
 * member should give the task up (see MAX_RESTARTS). */
static int gave_up(task_run *r, uint64_t now, uint64_t fail_ns) {
  if (r->failures && now - r->started_ns >= fail_ns) r->failures = 0;
  if (r->failures++ == 0) r->failing_ns = now;
  return r->failures >= MAX_RESTARTS && now - r->failing_ns >= fail_ns;
}

static volatile sig_atomic_t g_stop;
static void on_stop(int sig) {
  (void)sig;
  g_stop = 1;
}

/* A stable hash of "<a>/<b>" (weir_hash_bytes: the same on every host). */
static uint64_t hash_pair(const char *a, const char *b) {
  char buf[300];
  int n = snprintf(buf, sizeof buf, "%s/%s", a, b);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
  return weir_hash_bytes(buf, (size_t)n);
}

/* Rendezvous hashing: the live member with the highest hash of (member,
 * task) runs the task, so that a member's death moves only its tasks. */
static const char *owner_of(const char *task, char **members, int n) {
  const char *best = NULL;
  uint64_t bh = 0;
  for (int i = 0; i < n; i++) {
    uint64_t h = hash_pair(members[i], task);
    if (!best || h > bh) best = members[i], bh = h;
  }
  return best;
}

/* Removes path and, if it is a directory, all it holds (no symbolic link
 * is followed). 0, or -1 with errno. */
static int rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[2048];
      if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) {
        errno = ENAMETOOLONG;
        rc = -1;
      } else {
        rc = rm_tree(sub);
      }
    }
    closedir(d);
    if (rc) return rc;
    return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
  }
  return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* <state dir>/task<K>.<T>, emptied. */
static int task_dir(const cli_engine *eng, const char *task, char *out, size_t cap, int empty) {
  int n = snprintf(out, cap, "%s/task%s", eng->state_dir, task);
  if (n < 0 || (size_t)n >= cap) return -1;
  if (empty && rm_tree(out) != 0) return -1;
  return 0;
}

static int spawn_task(const cli_engine *eng, task_run *r) {
  char dir[1024];
  if (task_dir(eng, r->name, dir, sizeof dir, 1) < 0) {
    cli_error("cluster: cannot empty the state directory of task %s (%s): %s", r->name, dir,
              strerror(errno));
    return -1;
  }
  int p[2];
  if (pipe(p) != 0) return -1;
  (void)fcntl(p[1], F_SETFD, FD_CLOEXEC);
  char sk[16], tk[16], ep[24], fd[16];
  snprintf(sk, sizeof sk, "%d", r->stage);
  snprintf(tk, sizeof tk, "%d", r->task);
  snprintf(ep, sizeof ep, "%llu", (unsigned long long)r->epoch);
  snprintf(fd, sizeof fd, "%d", p[0]);
  /* weir run --cluster-stage K --cluster-task T --cluster-epoch E
   * --cluster-parent-fd FD <the rest> */
  char **argv = calloc((size_t)cli_main_argc + 10, sizeof *argv);
  if (!argv) return -1;
  int k = 0;
  argv[k++] = cli_main_argv[0];
  argv[k++] = cli_main_argv[1];
  argv[k++] = "--cluster-stage";
  argv[k++] = sk;
  argv[k++] = "--cluster-task";
  argv[k++] = tk;
  argv[k++] = "--cluster-epoch";
  argv[k++] = ep;
  argv[k++] = "--cluster-parent-fd";
  argv[k++] = fd;
  for (int i = 2; i < cli_main_argc; i++) argv[k++] = cli_main_argv[i];
  argv[k] = NULL;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    execvp(argv[0], argv);
    fprintf(stderr, "weir: cluster: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  free(argv);
  close(p[0]);
  if (pid < 0) {
    close(p[1]);
    return -1;
  }
  r->pid = pid;
  r->started_ns = weir_clock_mono_ns();
  r->pipe_w = p[1];
  if (!eng->quiet)
    fprintf(stderr, "weir: cluster: task %s runs here (epoch %llu, pid %d)\n", r->name,
            (unsigned long long)r->epoch, (int)pid);
  return 0;
}

/* Ends a task's child now (SIGKILL: nothing it still holds may reach a
 * destination) and forgets it. */
static void kill_task(task_run *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    close(r->pipe_w);
  }
  r->pid = 0;
}

/* The job's stages and fingerprint: an exit code. */
static int stages_of(weir_job *job, int *nstages, uint64_t *fp) {
  int rc = weir_job_stages(job, nstages, fp);
  if (rc) {
    cli_error("cluster: %s", weir_job_error(job));
    return cli_exit_for_build(rc);
  }
  return CLI_EXIT_OK;
}

int cli_cluster_member(weir_job *job, const cli_engine *eng) {
  int nstages = 0;
  uint64_t fp = 0;
  int rc = stages_of(job, &nstages, &fp);
  if (rc) return rc;
  int ntasks = tasks_of(eng), nruns = nstages * ntasks;
  if (nstages > MAX_STAGES || nruns > MAX_TASKS) {
    cli_error("cluster: the job has %d stages of %d tasks: at most %d stages and %d tasks in all",
              nstages, ntasks, MAX_STAGES, MAX_TASKS);
    return CLI_EXIT_USAGE;
  }
  const char *name = cluster_job(eng, job);
  uint32_t lease = lease_of(eng);
  uint64_t beat_ns = (uint64_t)lease * 1000000u / 3u;
  char err[512] = "";
  weir_cluster *c = NULL;
  rc = weir_cluster_open(&c, eng->cluster, name, lease, eng->replicas ? eng->replicas : 1, err,
                         sizeof err);
  if (!rc) rc = weir_cluster_agree(c, fp, nstages, ntasks, err, sizeof err);
  if (rc) {
    cli_error("cluster: %s", err);
    weir_cluster_close(c);
    return cli_exit_for(rc);
  }
  if (cli_mkdir_p(eng->state_dir) < 0) {
    cli_error("cluster: cannot create the state directory '%s'", eng->state_dir);
    weir_cluster_close(c);
    return CLI_EXIT_RUNTIME;
  }
  if (!eng->quiet)
    fprintf(stderr, "weir: cluster: member %s of job %s (%d stages of %d tasks, lease %u ms)\n",
            eng->member, name, nstages, ntasks, lease);
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  signal(SIGPIPE, SIG_IGN);

  /* Owned here; every task of every stage, in stage order. */
  task_run *runs = calloc((size_t)nruns, sizeof *runs);
  if (!runs) {
    weir_cluster_close(c);
    return CLI_EXIT_RUNTIME;
  }
  for (int i = 0; i < nruns; i++) {
    runs[i].stage = i / ntasks;
    runs[i].task = i % ntasks;
    snprintf(runs[i].name, sizeof runs[i].name, "%d.%d", runs[i].stage, runs[i].task);
  }
  int code = CLI_EXIT_OK, first = 1;
  uint64_t alive_ns = weir_clock_mono_ns(), fail_ns = (uint64_t)FAIL_LEASES * lease * 1000000u;
  for (;;) {
    uint64_t now = weir_clock_mono_ns();
    if (weir_cluster_heartbeat(c, eng->member) == 0) alive_ns = now;
    /* Children that ended. */
    for (int i = 0; i < nruns; i++) {
      task_run *r = &runs[i];
      int st;
      if (r->pid <= 0 || waitpid(r->pid, &st, WNOHANG) != r->pid) continue;
      close(r->pipe_w);
      r->pid = 0;
      int ex = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
      if (r->handing_off) {
        /* Stopped after a committed checkpoint: its owner takes it from there. */
        weir_cluster_release(c, r->name, r->rev);
        r->owned = r->handing_off = r->failures = 0;
        if (!eng->quiet)
          fprintf(stderr, "weir: cluster: task %s handed over (its run exited %d)\n", r->name, ex);
      } else if (ex == 0) {
        (void)weir_cluster_set_done(c, r->name);
        weir_cluster_release(c, r->name, r->rev);
        r->owned = 0;
        if (!eng->quiet) fprintf(stderr, "weir: cluster: task %s finished\n", r->name);
      } else if (ex == CLI_EXIT_OWNED || ex == CLI_EXIT_USAGE || ex == CLI_EXIT_REFUSED ||
                 gave_up(r, now, fail_ns)) {
        cli_error("cluster: task %s ended with exit %d%s", r->name, ex,
                  ex == CLI_EXIT_OWNED ? " (another owner took it)" : "");
        weir_cluster_release(c, r->name, r->rev);
        r->owned = 0;
        if (ex != CLI_EXIT_OWNED && code == CLI_EXIT_OK) code = ex;
      } else {
        /* Started again after a pause, by a new claim: each run of a task
         * has an epoch of its own, so that destinations fence what the
         * failed one left (a PostgreSQL sink rolls back its prepared
         * transactions, which the same epoch would take for its own). */
        weir_cluster_release(c, r->name, r->rev);
        r->owned = 0;
        uint64_t wait = 2 * beat_ns;
        for (int f = 1; f < r->failures && wait < MAX_BACKOFF_BEATS * beat_ns; f++) wait *= 2;
        r->retry_ns = now + wait;
        if (!eng->quiet)
          fprintf(stderr,
                  "weir: cluster: task %s failed (exit %d, %d in a row): claimed again in "
                  "%.1f s\n",
                  r->name, ex, r->failures, (double)wait / 1e9);
      }
    }
    if (code != CLI_EXIT_OK || g_stop) break;
    /* Leases. */
    for (int i = 0; i < nruns; i++) {
      task_run *r = &runs[i];
      if (!r->owned) continue;
      int x = weir_cluster_renew(c, r->name, eng->member, &r->rev);
      if (x == 0) {
        r->renewed_ns = now;
      } else if (x == WEIR_EFENCED || now - r->renewed_ns >= (uint64_t)lease * 1000000u) {
        cli_error("cluster: lost the lease of task %s: its run here is killed", r->name);
        kill_task(r);
        r->owned = 0;
      }
    }
    /* Tasks nobody runs. */
    char **members = NULL;
    int nm = 0, done = 0;
    if (now - alive_ns < (uint64_t)lease * 1000000u &&
        weir_cluster_members(c, &members, &nm) == 0) {
      int self = 0;
      for (int i = 0; i < nm; i++) self |= !strcmp(members[i], eng->member);
      if (!self) {
        members = realloc(members, (size_t)(nm + 1) * sizeof *members);
        members[nm++] = strdup(eng->member);
      }
      for (int i = 0; i < nruns; i++) {
        task_run *r = &runs[i];
        const char *want = owner_of(r->name, members, nm);
        int steady = !strcmp(want, r->want); /* the same owner two beats in a row */
        snprintf(r->want, sizeof r->want, "%s", want);
        if (r->owned) {
          if (r->pid > 0 && !r->handing_off && steady && strcmp(want, eng->member) != 0) {
            /* A member joined that the task hashes to: stop the run (its
             * last checkpoint commits, no end of input is sent), then
             * release the lease for it. */
            if (!eng->quiet)
              fprintf(stderr, "weir: cluster: task %s moves to member %s\n", r->name, want);
            kill(r->pid, SIGTERM);
            r->handing_off = 1;
          }
          continue;
        }
        if (weir_cluster_done(c, r->name) == 1) {
          done++;
          continue;
        }
        if (first || now < r->retry_ns) continue; /* the others' heartbeats first */
        if (strcmp(want, eng->member) != 0) {
          /* Its rendezvous owner may be dead but not yet expired; anyone
           * takes a task nobody has held for two leases. */
          char holder[128];
          if (weir_cluster_holder(c, r->name, holder, sizeof holder) != 0 || holder[0]) {
            r->next_ns = 0;
            continue;
          }
          if (!r->next_ns) r->next_ns = now + 2 * (uint64_t)lease * 1000000u;
          if (now < r->next_ns) continue;
        }
        uint64_t epoch = 0, rev = 0;
        if (weir_cluster_claim(c, r->name, eng->member, &epoch, &rev) == 1) {
          r->owned = 1;
          r->epoch = epoch;
          r->rev = rev;
          r->renewed_ns = now;
          r->next_ns = 0;
          r->handing_off = 0;
          if (spawn_task(eng, r) < 0) {
            cli_error("cluster: cannot start task %s: %s", r->name, strerror(errno));
            weir_cluster_release(c, r->name, rev);
            r->owned = 0;
          }
        }
      }
      for (int i = 0; i < nm; i++) free(members[i]);
      free(members);
    }
    if (done == nruns) {
      if (first && !eng->quiet)
        fprintf(stderr,
                "weir: cluster: job %s already finished: nothing to do ('weir cluster delete "
                "--cluster URL --job %s' forgets it, to run it again)\n",
                name, name);
      break;
    }
    first = 0;
    uint64_t until = now + beat_ns;
    while (!g_stop && weir_clock_mono_ns() < until) weir_sleep_us(20000);
  }
  /* Leaving: children stop with the member (a stop is not an end of
   * input: their tasks are taken over from their last commit). */
  for (int i = 0; i < nruns; i++) {
    task_run *r = &runs[i];
    if (r->pid > 0) {
      kill(r->pid, SIGTERM);
      int st;
      waitpid(r->pid, &st, 0);
      close(r->pipe_w);
      r->pid = 0;
    }
    if (r->owned) weir_cluster_release(c, r->name, r->rev);
  }
  free(runs);
  weir_cluster_leave(c, eng->member);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  weir_cluster_close(c);
  if (!eng->quiet && code == CLI_EXIT_OK)
    fprintf(stderr, "weir: cluster: member %s leaves (%s)\n", eng->member,
            g_stop ? "stopped" : "every task finished");
  return code;
}

/* ---- a task's run ------------------------------------------------------- */

struct cli_cluster_task {
  weir_cluster *c;
  int stage, task;
  char name[24];   /* "<stage>.<task>" */
  char job_id[40]; /* the task's: the same for every run of it */
  char http[300];  /* --http with the task's port */
  uint64_t epoch;
  char in_url[1024], out_url[1024];
  char dir[1024], takeover[1100];
};

/* The stage edge into stage k (k >= 1). */
static void edge_url(const cli_engine *eng, const char *job, int k, char *out, size_t cap) {
  char rep[32] = "";
  if (eng->replicas > 1) snprintf(rep, sizeof rep, "&replicas=%d", eng->replicas);
  snprintf(out, cap, "%s/weir.%s.e%d?tasks=%llu&stream=WEIR_%s_E%d%s", eng->cluster, job, k,
           (unsigned long long)(eng->tasks ? eng->tasks : 4), job, k, rep);
}

/* Task `task` of cluster job `job`'s id: a name-based UUID (version 5's
 * layout, from two 64-bit hashes rather than SHA-1), the same wherever the
 * task runs. */
static void task_job_id(const char *job, const char *task, char out[40]) {
  uint64_t a = hash_pair(job, task), b = hash_pair(task, job);
  a = (a & ~0xf000ull) | 0x5000ull;                        /* version 5 */
  b = (b & 0x3fffffffffffffffull) | 0x8000000000000000ull; /* RFC 4122 variant */
  snprintf(out, 40, "%08llx-%04llx-%04llx-%04llx-%012llx", (unsigned long long)(a >> 32),
           (unsigned long long)((a >> 16) & 0xffff), (unsigned long long)(a & 0xffff),
           (unsigned long long)(b >> 48), (unsigned long long)(b & 0xffffffffffffull));
}

/* --http HOST:PORT for the run of the member's i-th task: PORT + i (port
 * 0 stays 0: any free port), so that a member's tasks, each a process of
 * its own, do not all ask for one port. -1 after a usage message. */
static int task_http(const char *listen, int i, char *out, size_t cap) {
  const char *colon = strrchr(listen, ':');
  char *end = NULL;
  long port = colon ? strtol(colon + 1, &end, 10) : -1;
  if (!colon || end == colon + 1 || *end || port < 0 || port > 65535)
    return cli_usage("--http %s: not HOST:PORT", listen);
  if (port && port + i > 65535)
    return cli_usage("--http %s: in cluster mode task i serves on PORT + i, past 65535 here",
                     listen);
  snprintf(out, cap, "%.*s:%ld", (int)(colon - listen), listen, port ? port + i : 0);
  return 0;
}

static weir_stream *cut_in(weir_job *job, void *user) {
  cli_cluster_task *t = user;
  char name[32];
  snprintf(name, sizeof name, "stage%d.in", t->stage);
  return weir_nats_source_par(job, name, t->in_url, 0);
}

static int cut_out(weir_stream *s, void *user) {
  cli_cluster_task *t = user;
  char name[32];
  snprintf(name, sizeof name, "stage%d.out", t->stage + 1);
  return weir_sink_to(s, name, t->out_url, NULL, 0);
}

static int commit_point(void *user, uint64_t id, const char *path, uint64_t bytes) {
  cli_cluster_task *t = user;
  /* Tests kill a stage's runs here: the checkpoint durable locally and
   * prepared at destinations, committed nowhere. */
  char fp[48];
  snprintf(fp, sizeof fp, "cluster.before_commit.stage%d", t->stage);
  int rc = weir_failpoint(fp);
  if (rc < 0) return rc;
  char err[512] = "";
  rc = weir_cluster_commit(t->c, t->name, id, path, bytes, err, sizeof err);
  if (rc) cli_error("cluster: %s", err);
  return rc;
}

/* The member's end of the pipe closed: it died, and with it this run's
 * right to its task. Nothing more of it may happen. */
static void *watch_parent(void *arg) {
  int fd = (int)(intptr_t)arg;
  char b;
  while (read(fd, &b, 1) < 0 && errno == EINTR) {
  }
  fprintf(stderr, "weir: cluster: the member died: its task's run ends\n");
  kill(getpid(), SIGKILL);
  return NULL;
}

int cli_cluster_task_prepare(weir_job *job, cli_engine *eng, cli_cluster_task **out) {
  *out = NULL;
  int nstages = 0;
  uint64_t fp = 0;
  int rc = stages_of(job, &nstages, &fp);
  if (rc) return rc;
  int ntasks = tasks_of(eng);
  if (eng->cluster_stage >= nstages || eng->cluster_task < 0 || eng->cluster_task >= ntasks) {
    cli_error("cluster: task %d.%d: the job has %d stages of %d tasks", eng->cluster_stage,
              eng->cluster_task, nstages, ntasks);
    return CLI_EXIT_USAGE;
  }
  const char *name = cluster_job(eng, job);
  cli_cluster_task *t = calloc(1, sizeof *t);
  if (!t) return CLI_EXIT_RUNTIME;
  t->stage = eng->cluster_stage;
  t->task = eng->cluster_task;
  snprintf(t->name, sizeof t->name, "%d.%d", t->stage, t->task);
  t->epoch = eng->cluster_epoch;
  task_job_id(name, t->name, t->job_id);
  if (eng->http && task_http(eng->http, t->stage * ntasks + t->task, t->http, sizeof t->http)) {
    free(t);
    return CLI_EXIT_USAGE;
  }
  if (t->stage > 0) edge_url(eng, name, t->stage, t->in_url, sizeof t->in_url);
  if (t->stage < nstages - 1) edge_url(eng, name, t->stage + 1, t->out_url, sizeof t->out_url);
  weir_stage_cut cut = {
      .stage = t->stage, .task = t->task, .tasks = ntasks, .in = cut_in, .out = cut_out, .user = t};
  if ((rc = weir_job_cut(job, &cut)) != 0) {
    cli_error("cluster: %s", weir_job_error(job));
    free(t);
    return cli_exit_for_build(rc);
  }
  if (eng->cluster_parent_fd >= 0) {
    pthread_t th;
    if (pthread_create(&th, NULL, watch_parent, (void *)(intptr_t)eng->cluster_parent_fd) == 0)
      pthread_detach(th);
  }
  char err[512] = "";
  rc = weir_cluster_open(&t->c, eng->cluster, name, lease_of(eng),
                         eng->replicas ? eng->replicas : 1, err, sizeof err);
  if (!rc) rc = weir_cluster_agree(t->c, fp, nstages, ntasks, err, sizeof err);
  task_dir(eng, t->name, t->dir, sizeof t->dir, 0);
  snprintf(t->takeover, sizeof t->takeover, "%s.takeover", t->dir);
  uint64_t id = 0;
  if (!rc)
    rc = weir_cluster_take(t->c, t->name, eng->cluster_epoch, t->takeover, &id, err, sizeof err);
  if (rc) {
    cli_error("cluster: task %s: %s", t->name, err);
    cli_cluster_task_end(t);
    return cli_exit_for(rc);
  }
  if (!eng->quiet)
    fprintf(stderr, "weir: cluster: task %s (epoch %llu) %s\n", t->name,
            (unsigned long long)eng->cluster_epoch,
            id ? "restores its committed checkpoint" : "starts from the beginning");
  eng->state_dir = t->dir;
  eng->from_savepoint = id ? t->takeover : NULL;
  if (eng->http) eng->http = t->http;
  eng->lease_wait = 1;
  *out = t;
  return CLI_EXIT_OK;
}

void cli_cluster_task_opts(cli_cluster_task *t, weir_run_opts *o) {
  o->commit_point = commit_point;
  o->commit_point_user = t;
  /* The task's epoch is the run's: its directory is new, and every
   * checkpoint it may restore was committed by a lower epoch. */
  o->min_lease_epoch = t->epoch;
  /* A run that starts the task from nothing has the id the task's first
   * run had, so destinations find what a run that died before its first
   * commit left uncommitted (a PostgreSQL sink rolls its prepared
   * transactions back). Restores keep the checkpoint's id anyway. */
  o->job_id = t->job_id;
}

void cli_cluster_task_end(cli_cluster_task *t) {
  if (!t) return;
  (void)unlink(t->takeover);
  weir_cluster_close(t->c);
  free(t);
}

/* ---- weir cluster status|delete ----------------------------------------- */

void cli_help_cluster(FILE *out) {
  fputs("usage: weir cluster status --cluster nats://HOST:PORT[,...] --job NAME\n"
        "       weir cluster delete --cluster nats://HOST:PORT[,...] --job NAME\n"
        "\n"
        "status: the job's graph, its live members, and per task (<stage>.<task>)\n"
        "who runs it (its lease holder), its committed checkpoint (and the fencing\n"
        "epoch that committed it), whether it finished, and its lag: per input\n"
        "subject, the batches it had not applied at its last commit.\n"
        "delete: removes all the job keeps in NATS (its key-value buckets, its\n"
        "replicated checkpoints and its stage edges' streams), so that the name\n"
        "can run again from the beginning; only once no member runs it.\n"
        "Members: weir run --cluster URL --member NAME [--job NAME] JOB ... (see\n"
        "'weir help run' and docs/scale-out.md).\n",
        out);
}

/* A task's input subject and the batches it holds (its lag). */
static void print_backlog(void *user, const char *subject, uint64_t msgs) {
  (void)user;
  printf("  input %s: %llu batches not applied at its last commit\n", subject,
         (unsigned long long)msgs);
}

int cli_cmd_cluster(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    cli_help_cluster(argc < 2 ? stderr : stdout);
    return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
  }
  const char *what = argv[1], *url = NULL, *job = NULL;
  cli_args a = {.argc = argc, .argv = argv, .i = 2, .what = "cluster"};
  while (a.i < argc) {
    int r;
    if (!strcmp(argv[a.i], "--help") || !strcmp(argv[a.i], "-h")) {
      cli_help_cluster(stdout);
      return CLI_EXIT_OK;
    }
    if ((r = cli_take_str(&a, "--cluster", &url)) != 0 ||
        (r = cli_take_str(&a, "--job", &job)) != 0) {
      if (r < 0) return CLI_EXIT_USAGE;
      continue;
    }
    cli_usage("cluster: unknown argument '%s'", argv[a.i]);
    return CLI_EXIT_USAGE;
  }
  if (strcmp(what, "status") != 0 && strcmp(what, "delete") != 0) {
    cli_usage("cluster: '%s': use status or delete", what);
    return CLI_EXIT_USAGE;
  }
  if (!url || !job) {
    cli_usage("cluster %s needs --cluster nats://HOST:PORT[,...] and --job NAME", what);
    return CLI_EXIT_USAGE;
  }
  char err[512] = "";
  if (!strcmp(what, "delete")) {
    int rc = weir_cluster_delete(url, job, err, sizeof err);
    if (rc) {
      cli_error("cluster delete: %s", err);
      return cli_exit_for(rc);
    }
    printf("job %s: deleted from %s\n", job, url);
    return CLI_EXIT_OK;
  }
  weir_cluster *c = NULL;
  int rc = weir_cluster_open(&c, url, job, 6000, -1, err, sizeof err);
  if (rc == WEIR_ENOENT) {
    printf("job %s: no member ran it yet\n", job);
    return CLI_EXIT_OK;
  }
  if (rc) {
    cli_error("cluster status: %s", err);
    return cli_exit_for(rc);
  }
  uint64_t fp = 0;
  int nstages = 0, ntasks = 0;
  int g = weir_cluster_graph(c, &fp, &nstages, &ntasks);
  if (g <= 0) {
    printf("job %s: no member ran it yet\n", job);
    weir_cluster_close(c);
    return g < 0 ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
  }
  printf("job %s: graph %016llx, %d stages of %d tasks\n", job, (unsigned long long)fp, nstages,
         ntasks);
  char **members = NULL;
  int nm = 0;
  if (weir_cluster_members(c, &members, &nm) == 0) {
    printf("members:");
    for (int i = 0; i < nm; i++) printf(" %s", members[i]);
    printf("%s\n", nm ? "" : " none alive");
    weir_cluster_free_names(members, nm);
  }
  int finished = 0, nruns = nstages * ntasks;
  for (int i = 0; i < nruns && i < MAX_TASKS; i++) {
    char holder[128] = "", task[24];
    uint64_t epoch = 0, id = 0;
    snprintf(task, sizeof task, "%d.%d", i / ntasks, i % ntasks);
    (void)weir_cluster_holder(c, task, holder, sizeof holder);
    (void)weir_cluster_committed(c, task, &epoch, &id);
    int done = weir_cluster_done(c, task) == 1;
    finished += done;
    printf("task %s: %s", task, done ? "finished" : holder[0] ? "runs on " : "not running");
    if (!done && holder[0]) printf("%s", holder);
    if (id)
      printf(", checkpoint %llu committed (epoch %llu)", (unsigned long long)id,
             (unsigned long long)epoch);
    else
      printf(", no checkpoint committed");
    printf("\n");
    if (!done && i >= ntasks)
      (void)weir_cluster_edge_backlog(c, i / ntasks, i % ntasks, print_backlog, NULL);
  }
  if (finished == nruns) printf("the job finished\n");
  weir_cluster_close(c);
  return CLI_EXIT_OK;
}
