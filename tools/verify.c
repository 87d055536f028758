/* tools/verify.c: owns `weir verify`, the harness that makes the failure
 * window of an HTTP destination visible (docs/sinks.md §6, docs/leases.md): it
 * runs the counter job in separate worker processes (fork/exec of this very
 * binary) that share one state directory, interrupts them in named
 * scenarios, R times each, and reports per scenario what the destination
 * itself counted, apart from what weir did.
 *
 * DESIGN. Two questions, answered separately (docs/sinks.md §6):
 * "who may run and complete this job now" is the lease (snapshot/lease.c);
 * "did the destination already apply this effect" is the destination's,
 * helped by the http sink's stable operation ids (Idempotency-Key) and its
 * lease epoch (Weir-Epoch). A scenario puts an interruption exactly into the
 * window between the destination accepting a request and the checkpoint
 * recording it: the worker arms the failpoint http.after_accept (kill or
 * pause, hit 1: the first request the destination answered 2xx), so the
 * successor must resend that operation. Counts come from the destination's
 * own log (`weir receiver stats` and `weir receiver effects` on the database
 * of the receiver that verify starts for each repetition); owners from the
 * lease of the state directory (its epoch: one per process that ran the
 * job); takeover times are measured: from the moment the harness saw the
 * interruption (waitpid reporting the worker killed or stopped, or the
 * SIGTERM sent) until the successor's claim file <state>/lease/epoch.<N+1>
 * exists (polled every millisecond, so the figure includes the successor's
 * start-up where the harness starts it after the interruption).
 *
 *   scenario        worker A                  successor B               expected
 *   clean           runs to the end           -                         R = E = N, exact
 *   second-owner    runs (holds the lease)    started meanwhile         B exit 4, E = N, exact
 *   kill-no-key     kill after accept #1      --restore latest          R = N+1, E = N+1
 *   kill-key        kill after accept #1      --restore latest          R = N+1, E = N, 1 dup
 *   pause-key       stop after accept #1      --wait: takes over at     E = N, exact; A exit 4
 *                   (SIGSTOP), SIGCONT after  expiry, completes
 *                   B finished
 *   pause-no-dedup  as pause-key; receiver --no-dedup                   E = N+1 (the resend
 *                                                                       applied again), A exit 4
 *   release         SIGTERM (orderly release) --restore latest          takeover < lease/2,
 *                                                                       E = N, exact
 *
 * With --url, the destination is the user's: verify starts no receiver and
 * can see neither its requests nor its effects; it reports the worker
 * processes' exit codes, owners, takeover times and the requests weir's own
 * sink counted (from the summaries of the workers that ended normally), and
 * skips pause-no-dedup. Nothing here calls exit(); the verb returns its exit
 * code: 0 every expectation held, 1 one did not (or the harness failed), 2
 * usage.
 *
 * Threads: one (the harness); workers and receivers are child processes,
 * each stopped (SIGKILL at worst) and reaped before a repetition ends.
 */
#include "cli.h"
#include "tools.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/json.h"
#include "base/platform.h"
#include "snapshot/lease.h"

#define WAIT_MS 120000u /* the longest any one worker step may take */
#define POLL_US 1000u
#define V_ETIMEDOUT (-ETIMEDOUT) /* an OS condition: -errno (docs/style.md §4) */

/* ---- scenarios ------------------------------------------------------------ */

enum { K_CLEAN, K_SECOND, K_KILL, K_PAUSE, K_RELEASE };

typedef struct scenario {
  const char *name;
  const char *title;
  int kind;
  int idempotent; /* the sink sends Idempotency-Key */
  int no_dedup;   /* the receiver ignores keys */
} scenario;

static const scenario scenarios[] = {
    {"clean", "control: one owner, no interruption", K_CLEAN, 1, 0},
    {"second-owner", "a second process started while the owner is alive (must not run)", K_SECOND,
     1, 0},
    {"kill-no-key",
     "owner killed (SIGKILL) after the destination accepted a request, before the checkpoint "
     "recorded it; idempotency=off",
     K_KILL, 0, 0},
    {"kill-key",
     "owner killed (SIGKILL) after the destination accepted a request, before the checkpoint "
     "recorded it; Idempotency-Key sent",
     K_KILL, 1, 0},
    {"pause-key",
     "owner paused (SIGSTOP) after an accepted request, past its lease; successor (--wait) "
     "completes; owner resumed (SIGCONT)",
     K_PAUSE, 1, 0},
    {"pause-no-dedup",
     "as pause-key, with the receiver's deduplication off (--no-dedup): fencing does not undo "
     "what was sent before the pause",
     K_PAUSE, 1, 1},
    {"release", "orderly release (SIGTERM); the successor starts at once", K_RELEASE, 1, 0},
};
#define N_SCENARIOS (sizeof scenarios / sizeof scenarios[0])

/* ---- options and results ---------------------------------------------------- */

typedef struct vopts {
  uint64_t repeat, records, keys, rate, lease_ms;
  const char *url;  /* NULL: a weir receiver per repetition */
  const char *json; /* NULL, a file, or "-" (stdout) */
  const char *dir;  /* work directory (kept); NULL: a temporary one */
  const char *only; /* comma-separated scenario names; NULL: all */
  int quiet;
} vopts;

/* One repetition of one scenario. Counts are -1 where unknown. */
typedef struct run_res {
  int ok;         /* the harness ran every step */
  int met;        /* every expectation held */
  char note[400]; /* why not, or the first expectation that failed */
  int runs;       /* worker processes started */
  int64_t owners; /* lease epochs taken: processes that ran the job */
  int64_t requests, effects, duplicates, rejections, fenced, rep_payloads, rep_effects;
  int64_t weir_requests; /* the sink's own count, over the summaries written */
  int64_t lost, unexpected;
  double takeover_ms; /* -1: none in this scenario */
  int exact;          /* 1, 0, -1 unknown */
  int code[3];        /* exit codes of A, B, A after SIGCONT; 128+sig if killed; -1 none */
  int stopped;        /* A stopped itself (SIGSTOP) at the failpoint */
} run_res;

typedef struct vctx {
  const vopts *o;
  char exe[4096];
  char *work;
} vctx;

static int vusage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int vusage(const char *fmt, ...) {
  va_list ap;
  fputs("weir verify: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nsee 'weir help verify'\n", stderr);
  return -1;
}

static void note(run_res *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(run_res *r, const char *fmt, ...) {
  if (r->note[0]) return; /* the first one tells most */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->note, sizeof r->note, fmt, ap);
  va_end(ap);
}

static double now_ms(void) {
  return (double)weir_clock_mono_ns() / 1e6;
}

/* ---- processes -------------------------------------------------------------- */

/* The path of this executable, so that workers run the same weir: 0 with
 * it in buf (PATH_MAX bytes at least), or WEIR_ENOENT. From /proc/self/exe
 * where there is one; otherwise (macOS) from argv[0], which is a path when
 * weir was started by one, and the bare name when a shell or execvp found it
 * in PATH: then it is looked up there again, as they did. */
static int self_exe(char *buf, size_t cap, const char *argv0) {
#if WEIR_HAVE_PROC_FS
  ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
  if (n > 0) {
    buf[n] = '\0';
    return 0;
  }
#endif
  if (!argv0 || !*argv0) return WEIR_ENOENT;
  if (strchr(argv0, '/')) return realpath(argv0, buf) ? 0 : WEIR_ENOENT;
  const char *dir = getenv("PATH");
  if (!dir) dir = "/usr/bin:/bin"; /* execvp's default */
  for (;;) {
    size_t len = strcspn(dir, ":");
    char cand[4096];
    struct stat st;
    /* An empty element of PATH is the current directory. */
    int w = len ? snprintf(cand, sizeof cand, "%.*s/%s", (int)len, dir, argv0)
                : snprintf(cand, sizeof cand, "./%s", argv0);
    if (w > 0 && (size_t)w < sizeof cand && stat(cand, &st) == 0 && S_ISREG(st.st_mode) &&
        access(cand, X_OK) == 0 && realpath(cand, buf))
      return 0;
    if (dir[len] == '\0') return WEIR_ENOENT;
    dir += len + 1;
  }
}

/* Starts exe with argv (argv[0] is replaced by exe), stdout and stderr
 * appended to log (or to the pipe out_fd, if not NULL: its read end), stdin
 * from /dev/null, WEIR_FAILPOINTS set to failpoints (or unset). Returns the
 * pid, or a negative errno. */
static pid_t spawn(const vctx *v, char **argv, const char *failpoints, const char *log,
                   int *out_fd) {
  int p[2] = {-1, -1};
  if (out_fd && pipe(p) != 0) return -errno;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    if (out_fd) {
      close(p[0]);
      close(p[1]);
    }
    return -e;
  }
  if (pid == 0) {
    setenv("WEIR_LOG", "info", 1); /* release waits for a checkpoint line */
    if (failpoints)
      setenv("WEIR_FAILPOINTS", failpoints, 1);
    else
      unsetenv("WEIR_FAILPOINTS");
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, 0);
    int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : open("/dev/null", O_WRONLY);
    if (out_fd) {
      dup2(p[1], 1);
      close(p[0]);
      close(p[1]);
    } else if (fd >= 0) {
      dup2(fd, 1);
    }
    if (fd >= 0) dup2(fd, 2);
    argv[0] = (char *)v->exe;
    execv(v->exe, argv);
    _exit(127);
  }
  if (out_fd) {
    close(p[1]);
    *out_fd = p[0];
  }
  return pid;
}

/* An exit status as one number: the exit code, or 128 + the signal. */
static int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

/* Waits up to ms for pid to end (or, with `stopped`, to stop: *stopped = 1).
 * Returns 0 with *code (or *stopped), or V_ETIMEDOUT. */
static int wait_pid(pid_t pid, uint32_t ms, int *code, int *stopped) {
  double until = now_ms() + ms;
  if (stopped) *stopped = 0;
  for (;;) {
    int st = 0;
    pid_t w = waitpid(pid, &st, WNOHANG | (stopped ? WUNTRACED : 0));
    if (w == pid) {
      if (stopped && WIFSTOPPED(st)) {
        *stopped = 1;
        return 0;
      }
      if (WIFEXITED(st) || WIFSIGNALED(st)) {
        *code = code_of(st);
        return 0;
      }
    } else if (w < 0 && errno != EINTR) {
      *code = -1;
      return -errno;
    }
    if (now_ms() > until) return V_ETIMEDOUT;
    weir_sleep_us(POLL_US);
  }
}

/* Ends pid for good (SIGCONT, SIGKILL) and reaps it. */
static void reap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  kill(pid, SIGCONT);
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

/* Runs argv to its end with stdout captured into *out (malloc'd). Returns
 * the exit code, or a negative error. */
static int capture(const vctx *v, char **argv, char **out) {
  int fd = -1;
  *out = NULL;
  pid_t pid = spawn(v, argv, NULL, NULL, &fd);
  if (pid < 0) return (int)pid;
  size_t len = 0, cap = 4096;
  char *buf = weir_malloc(cap);
  for (;;) {
    if (cap - len < 2048) buf = weir_realloc(buf, cap *= 2);
    ssize_t n = read(fd, buf + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(fd);
  buf[len] = '\0';
  int code = -1;
  if (wait_pid(pid, WAIT_MS, &code, NULL) < 0) {
    reap(pid);
    code = -1;
  }
  *out = buf;
  return code;
}

/* Polls until `path` exists (*t_ms = when it was seen: 0), or pid ends first
 * (1, *code set), or ms pass (V_ETIMEDOUT). pid <= 0: no process to
 * watch. */
static int wait_file(const char *path, pid_t pid, uint32_t ms, double *t_ms, int *code) {
  double until = now_ms() + ms;
  for (;;) {
    struct stat st;
    if (stat(path, &st) == 0) {
      *t_ms = now_ms();
      return 0;
    }
    if (pid > 0) {
      int s = 0;
      if (waitpid(pid, &s, WNOHANG) == pid && (WIFEXITED(s) || WIFSIGNALED(s))) {
        *code = code_of(s);
        return 1;
      }
    }
    if (now_ms() > until) return V_ETIMEDOUT;
    weir_sleep_us(POLL_US);
  }
}

/* ---- files ------------------------------------------------------------------- */

static char *pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *pathf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = weir_malloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

/* rm -rf dir (best effort: what cannot be removed stays). */
static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      char *p = pathf("%s/%s", dir, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
        rm_rf(p);
      else
        unlink(p);
      weir_free(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t len = 0, cap = 4096;
  char *b = weir_malloc(cap);
  size_t n;
  while ((n = fread(b + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 1024) b = weir_realloc(b, cap *= 2);
  }
  fclose(f);
  b[len] = '\0';
  return b;
}

/* The integer after the first "\"key\":" in text; 0 if found. */
static int json_int(const char *text, const char *key, int64_t *out) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = text ? strstr(text, pat) : NULL;
  if (!p) return WEIR_ENOENT;
  p += strlen(pat);
  char *end = NULL;
  long long v = strtoll(p, &end, 10);
  if (end == p) return WEIR_ENOENT;
  *out = v;
  return 0;
}

/* The sum of every "\"key\": N" in text (the sink's per-subtask counters). */
static int64_t json_sum(const char *text, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  int64_t sum = 0;
  for (const char *p = text; p && (p = strstr(p, pat)) != NULL; p += strlen(pat))
    sum += strtoll(p + strlen(pat), NULL, 10);
  return sum;
}

/* ---- one repetition ---------------------------------------------------------- */

typedef struct rep {
  const vctx *v;
  const scenario *sc;
  char *dir, *state, *db, *url;
  pid_t recv;
  int nsum; /* summaries handed out: a.json, b.json, ... */
} rep;

/* Starts a weir receiver on a free loopback port for this repetition; sets
 * rp->url. Returns 0 or an error (note set). */
static int receiver_start(rep *rp, run_res *r) {
  char *log = pathf("%s/receiver.log", rp->dir);
  char *argv[] = {NULL, "receiver", "--listen", "127.0.0.1:0", "--db", rp->db, NULL, NULL};
  if (rp->sc->no_dedup) argv[6] = "--no-dedup";
  rp->recv = spawn(rp->v, argv, NULL, log, NULL);
  int rc = rp->recv < 0 ? (int)rp->recv : V_ETIMEDOUT;
  double until = now_ms() + 30000;
  while (rp->recv > 0 && now_ms() < until) {
    char *t = slurp(log);
    const char *p = t ? strstr(t, "listening on ") : NULL;
    if (p) {
      unsigned port = 0;
      if (sscanf(p, "listening on 127.0.0.1:%u", &port) == 1 && port) {
        rp->url = pathf("http://127.0.0.1:%u/verify", port);
        rc = 0;
      }
      weir_free(t);
      break;
    }
    weir_free(t);
    int code;
    if (wait_pid(rp->recv, 0, &code, NULL) == 0) {
      rp->recv = -1;
      rc = WEIR_EIO;
      break;
    }
    weir_sleep_us(2000);
  }
  if (rc < 0) note(r, "the receiver did not start (see %s)", log);
  weir_free(log);
  return rc;
}

static void receiver_stop(rep *rp) {
  if (rp->recv <= 0) return;
  kill(rp->recv, SIGTERM);
  int code;
  if (wait_pid(rp->recv, 30000, &code, NULL) < 0) reap(rp->recv);
  rp->recv = -1;
}

/* Starts a worker: `weir run` on the counter job. who names its log and
 * summary. */
static pid_t worker(rep *rp, run_res *r, char who, int restore, int wait, const char *fp) {
  const vopts *o = rp->v->o;
  char lease[24], recs[24], keys[24], rate[24];
  snprintf(lease, sizeof lease, "%" PRIu64, o->lease_ms);
  snprintf(recs, sizeof recs, "%" PRIu64, o->records);
  snprintf(keys, sizeof keys, "%" PRIu64, o->keys);
  snprintf(rate, sizeof rate, "%" PRIu64, o->rate);
  char *sum = pathf("%s/%c.json", rp->dir, who);
  char *log = pathf("%s/%c.log", rp->dir, who);
  char *sink = rp->sc->idempotent
                   ? weir_strdup(rp->url)
                   : pathf("%s%cidempotency=off", rp->url, strchr(rp->url, '?') ? '&' : '?');
  char *argv[40];
  int n = 0;
  argv[n++] = NULL;
  argv[n++] = "run";
  argv[n++] = "--state-dir";
  argv[n++] = rp->state;
  argv[n++] = "--checkpoint-interval";
  argv[n++] = "100";
  argv[n++] = "--lease-ms";
  argv[n++] = lease;
  argv[n++] = "--parallelism";
  argv[n++] = "1";
  argv[n++] = "--summary-json";
  argv[n++] = sum;
  if (restore) {
    argv[n++] = "--restore";
    argv[n++] = "latest";
  }
  if (wait) argv[n++] = "--wait";
  argv[n++] = "counter";
  argv[n++] = "--records";
  argv[n++] = recs;
  argv[n++] = "--keys";
  argv[n++] = keys;
  argv[n++] = "--rate";
  argv[n++] = rate;
  argv[n++] = "--sink";
  argv[n++] = sink;
  argv[n] = NULL;
  pid_t pid = spawn(rp->v, argv, fp, log, NULL);
  if (pid < 0)
    note(r, "cannot start a worker: %s", weir_strerror((int)pid));
  else
    r->runs++;
  weir_free(sum);
  weir_free(log);
  weir_free(sink);
  return pid;
}

/* Waits for a worker's end; on a timeout kills it. Returns 0 or an error
 * (note set). */
static int worker_end(pid_t pid, char who, int *code, run_res *r) {
  int rc = wait_pid(pid, WAIT_MS, code, NULL);
  if (rc < 0) {
    reap(pid);
    *code = -1;
    note(r, "worker %c did not end within %u s (killed)", who, WAIT_MS / 1000);
  }
  return rc;
}

/* The successor's claim: polls for <state>/lease/epoch.<epoch> from t0 on,
 * while watching pid. Returns 0 with r->takeover_ms, or an error. */
static int takeover(rep *rp, run_res *r, pid_t pid, uint64_t epoch, double t0) {
  char *path = pathf("%s/lease/epoch.%" PRIu64, rp->state, epoch);
  double t = 0;
  int code = -1;
  int rc = wait_file(path, pid, WAIT_MS, &t, &code);
  if (rc == 0) {
    r->takeover_ms = t - t0;
  } else if (rc == 1) {
    r->code[1] = code;
    note(r, "the successor ended (exit %d) without taking the lease", code);
    rc = WEIR_EIO;
  } else {
    note(r, "no successor claimed epoch %" PRIu64 " within %u s", epoch, WAIT_MS / 1000);
  }
  weir_free(path);
  return rc;
}

static void run_clean(rep *rp, run_res *r) {
  pid_t a = worker(rp, r, 'a', 0, 0, NULL);
  if (a > 0) worker_end(a, 'a', &r->code[0], r);
}

static void run_second(rep *rp, run_res *r) {
  pid_t a = worker(rp, r, 'a', 0, 0, NULL);
  if (a < 0) return;
  char *path = pathf("%s/lease/epoch.1", rp->state);
  double t = 0;
  int code = -1;
  int w = wait_file(path, a, WAIT_MS, &t, &code);
  weir_free(path);
  if (w != 0) {
    if (w == 1) r->code[0] = code;
    note(r, "the owner did not take the lease");
    if (w != 1) reap(a);
    return;
  }
  pid_t b = worker(rp, r, 'b', 1, 0, NULL);
  if (b > 0) worker_end(b, 'b', &r->code[1], r);
  int st = 0;
  if (waitpid(a, &st, WNOHANG) == a) {
    r->code[0] = code_of(st);
    note(r, "the owner had already ended when the second process was refused");
    return;
  }
  worker_end(a, 'a', &r->code[0], r);
}

static void run_kill(rep *rp, run_res *r) {
  pid_t a = worker(rp, r, 'a', 0, 0, "http.after_accept=kill@1");
  if (a < 0) return;
  if (worker_end(a, 'a', &r->code[0], r) < 0) return;
  double t0 = now_ms();
  if (r->code[0] != 128 + SIGKILL) {
    note(r, "the owner was not killed at http.after_accept (exit %d)", r->code[0]);
    return;
  }
  pid_t b = worker(rp, r, 'b', 1, 0, NULL);
  if (b < 0) return;
  if (takeover(rp, r, b, 2, t0) < 0 && r->code[1] >= 0) return;
  worker_end(b, 'b', &r->code[1], r);
}

static void run_pause(rep *rp, run_res *r) {
  pid_t a = worker(rp, r, 'a', 0, 0, "http.after_accept=pause@1");
  if (a < 0) return;
  int stopped = 0, code = -1;
  if (wait_pid(a, WAIT_MS, &code, &stopped) < 0 || !stopped) {
    r->code[0] = code;
    note(r, "the owner did not stop at http.after_accept (exit %d)", code);
    reap(a);
    return;
  }
  double t0 = now_ms();
  r->stopped = 1;
  pid_t b = worker(rp, r, 'b', 1, 1, NULL);
  if (b > 0 && (takeover(rp, r, b, 2, t0) == 0 || r->code[1] < 0))
    worker_end(b, 'b', &r->code[1], r);
  /* Only now the stale owner continues: whatever it still sends carries
   * epoch 1, below the successor's. */
  kill(a, SIGCONT);
  worker_end(a, 'a', &r->code[2], r);
}

/* Polls the log file `path` until it holds `needle` (0), pid ends (1, *code
 * set) or ms pass (V_ETIMEDOUT). */
static int wait_log(const char *path, const char *needle, pid_t pid, uint32_t ms, int *code) {
  double until = now_ms() + ms;
  for (;;) {
    char *t = slurp(path);
    int found = t && strstr(t, needle);
    weir_free(t);
    if (found) return 0;
    int s = 0;
    if (waitpid(pid, &s, WNOHANG) == pid && (WIFEXITED(s) || WIFSIGNALED(s))) {
      *code = code_of(s);
      return 1;
    }
    if (now_ms() > until) return V_ETIMEDOUT;
    weir_sleep_us(2000);
  }
}

static void run_release(rep *rp, run_res *r) {
  pid_t a = worker(rp, r, 'a', 0, 0, NULL);
  if (a < 0) return;
  /* Stop it in order once it runs: its first checkpoint completed (before
   * that, `weir run` may not have its SIGTERM handler yet, and the signal
   * would kill it: no release), and a quarter of the job later. */
  char *log = pathf("%s/a.log", rp->dir);
  int code = -1;
  int w = wait_log(log, "checkpoint 1 completed", a, WAIT_MS, &code);
  weir_free(log);
  if (w != 0) {
    if (w == 1) r->code[0] = code;
    note(r, "the owner did not complete its first checkpoint");
    if (w != 1) reap(a);
    return;
  }
  const vopts *o = rp->v->o;
  uint64_t run_ms = o->rate ? o->records * 1000 / o->rate : 0;
  weir_sleep_us(run_ms / 4 * 1000);
  double t0 = now_ms();
  kill(a, SIGTERM);
  if (worker_end(a, 'a', &r->code[0], r) < 0) return;
  pid_t b = worker(rp, r, 'b', 1, 0, NULL);
  if (b < 0) return;
  if (takeover(rp, r, b, 2, t0) < 0 && r->code[1] >= 0) return;
  worker_end(b, 'b', &r->code[1], r);
}

/* Reads what the destination counted and whether its effects are exactly
 * the counter job's output: for each key k < K with n_k records (records i
 * with i mod K == k), the bodies "k 1" .. "k n_k", once each. */
static void read_destination(rep *rp, run_res *r) {
  const vopts *o = rp->v->o;
  char *out = NULL;
  char *sargv[] = {NULL, "receiver", "stats", "--db", rp->db, "--json", NULL};
  int code = capture(rp->v, sargv, &out);
  int64_t x = 0;
  if (code != 0 || json_int(out, "requests", &r->requests) < 0) {
    note(r, "cannot read the receiver's stats");
  } else {
    json_int(out, "effects", &r->effects);
    json_int(out, "duplicates", &r->duplicates);
    json_int(out, "fenced", &r->fenced);
    if (json_int(out, "rejections", &x) == 0) r->rejections = x + (r->fenced > 0 ? r->fenced : 0);
    json_int(out, "repeated_payloads", &r->rep_payloads);
    json_int(out, "repeated_effects", &r->rep_effects);
  }
  weir_free(out);
  char *eargv[] = {NULL, "receiver", "effects", "--db", rp->db, NULL};
  code = capture(rp->v, eargv, &out);
  if (code != 0 || o->keys == 0) {
    note(r, "cannot read the receiver's effects");
    weir_free(out);
    return;
  }
  uint64_t per = o->records / o->keys + 1;
  uint32_t *seen = weir_calloc((size_t)(o->keys * per), sizeof *seen);
  r->lost = r->unexpected = 0;
  for (char *line = out; line && *line;) {
    char *eol = strchr(line, '\n');
    if (eol) *eol = '\0';
    unsigned long long k = 0, c = 0;
    char extra = 0;
    if (sscanf(line, "%llu %llu%c", &k, &c, &extra) == 2 && k < o->keys && c >= 1) {
      uint64_t nk = o->records / o->keys + (k < o->records % o->keys);
      if (c <= nk)
        seen[k * per + c]++;
      else
        r->unexpected++;
    } else {
      r->unexpected++;
    }
    line = eol ? eol + 1 : NULL;
  }
  int64_t twice = 0;
  for (uint64_t k = 0; k < o->keys; k++) {
    uint64_t nk = o->records / o->keys + (k < o->records % o->keys);
    for (uint64_t c = 1; c <= nk; c++) {
      if (seen[k * per + c] == 0) r->lost++;
      if (seen[k * per + c] > 1) twice++;
    }
  }
  r->exact = r->lost == 0 && r->unexpected == 0 && twice == 0;
  weir_free(seen);
  weir_free(out);
}

/* Checks the scenario's expectations (see DESIGN); sets r->met. */
static void judge(const vctx *v, const scenario *sc, run_res *r) {
  const vopts *o = v->o;
  int64_t n = (int64_t)o->records;
  int dest = v->o->url == NULL;
  int ok = r->ok;
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (ok && !(cond)) {                                                                           \
      ok = 0;                                                                                      \
      note(r, __VA_ARGS__);                                                                        \
    }                                                                                              \
  } while (0)
  switch (sc->kind) {
  case K_CLEAN:
    EXPECT(r->code[0] == 0, "the owner exited %d", r->code[0]);
    if (dest) EXPECT(r->requests == n, "requests %" PRId64 ", not %" PRId64, r->requests, n);
    break;
  case K_SECOND:
    EXPECT(r->code[1] == CLI_EXIT_OWNED, "the second process exited %d, not 4", r->code[1]);
    EXPECT(r->code[0] == 0, "the owner exited %d", r->code[0]);
    EXPECT(r->owners == 1, "%" PRId64 " owners, not 1", r->owners);
    if (dest) EXPECT(r->requests == n, "requests %" PRId64 ", not %" PRId64, r->requests, n);
    break;
  case K_KILL:
    EXPECT(r->code[1] == 0, "the successor exited %d", r->code[1]);
    EXPECT(r->owners == 2, "%" PRId64 " owners, not 2", r->owners);
    if (dest) {
      EXPECT(r->requests == n + 1, "requests %" PRId64 ", not %" PRId64, r->requests, n + 1);
      EXPECT(r->rep_payloads == 1, "%" PRId64 " operations resent, not 1", r->rep_payloads);
      if (sc->idempotent) {
        EXPECT(r->duplicates == 1, "duplicates %" PRId64 ", not 1", r->duplicates);
      } else {
        EXPECT(r->effects == n + 1, "effects %" PRId64 ", not %" PRId64, r->effects, n + 1);
        EXPECT(r->rep_effects == 1, "%" PRId64 " operations applied twice, not 1", r->rep_effects);
      }
    }
    break;
  case K_PAUSE:
    EXPECT(r->code[1] == 0, "the successor exited %d", r->code[1]);
    EXPECT(r->code[2] == CLI_EXIT_OWNED, "the resumed stale owner exited %d, not 4", r->code[2]);
    EXPECT(r->owners == 2, "%" PRId64 " owners, not 2", r->owners);
    if (dest && sc->no_dedup) {
      EXPECT(r->effects == n + 1, "effects %" PRId64 ", not %" PRId64, r->effects, n + 1);
      EXPECT(r->rep_effects == 1, "%" PRId64 " operations applied twice, not 1", r->rep_effects);
    }
    break;
  case K_RELEASE:
    EXPECT(r->code[0] == 0, "the owner exited %d after SIGTERM", r->code[0]);
    EXPECT(r->code[1] == 0, "the successor exited %d", r->code[1]);
    EXPECT(r->takeover_ms >= 0 && r->takeover_ms < (double)o->lease_ms / 2,
           "takeover %.0f ms, not under half the lease (%" PRIu64 " ms)", r->takeover_ms,
           o->lease_ms);
    break;
  }
  if (dest) {
    int exact = !(sc->kind == K_KILL && !sc->idempotent) && !sc->no_dedup;
    if (exact) {
      EXPECT(r->effects == n, "effects %" PRId64 ", not %" PRId64, r->effects, n);
      EXPECT(r->exact == 1, "the output is not exact (%" PRId64 " lost, %" PRId64 " unexpected)",
             r->lost, r->unexpected);
    } else {
      EXPECT(r->lost == 0, "%" PRId64 " effects lost", r->lost);
    }
  }
#undef EXPECT
  r->met = ok;
}

static void run_one(const vctx *v, const scenario *sc, unsigned i, run_res *r) {
  memset(r, 0, sizeof *r);
  r->ok = 1;
  r->owners = r->requests = r->effects = r->duplicates = r->rejections = r->fenced = -1;
  r->rep_payloads = r->rep_effects = r->weir_requests = r->lost = r->unexpected = -1;
  r->takeover_ms = -1;
  r->exact = -1;
  r->code[0] = r->code[1] = r->code[2] = -1;
  rep rp = {.v = v, .sc = sc, .recv = -1};
  rp.dir = pathf("%s/%s-%u", v->work, sc->name, i);
  rp.state = pathf("%s/state", rp.dir);
  rp.db = pathf("%s/receiver.db", rp.dir);
  rm_rf(rp.dir);
  if (cli_mkdir_p(rp.dir) < 0) {
    note(r, "cannot create %s", rp.dir);
    r->ok = 0;
    goto out;
  }
  if (v->o->url) {
    rp.url = weir_strdup(v->o->url);
  } else if (receiver_start(&rp, r) < 0) {
    r->ok = 0;
    goto out;
  }
  switch (sc->kind) {
  case K_CLEAN:
    run_clean(&rp, r);
    break;
  case K_SECOND:
    run_second(&rp, r);
    break;
  case K_KILL:
    run_kill(&rp, r);
    break;
  case K_PAUSE:
    run_pause(&rp, r);
    break;
  default:
    run_release(&rp, r);
    break;
  }
  if (r->note[0]) r->ok = 0;
  weir_lease_state ls;
  if (weir_lease_read(rp.state, &ls) == 1) r->owners = (int64_t)ls.epoch;
  r->weir_requests = 0;
  for (char who = 'a'; who <= 'b'; who++) {
    char *p = pathf("%s/%c.json", rp.dir, who);
    char *t = slurp(p);
    if (t) r->weir_requests += json_sum(t, "requests");
    weir_free(t);
    weir_free(p);
  }
  if (!v->o->url) read_destination(&rp, r);
  if (r->note[0]) r->ok = 0;
out:
  receiver_stop(&rp);
  judge(v, sc, r);
  weir_free(rp.url);
  weir_free(rp.dir);
  weir_free(rp.state);
  weir_free(rp.db);
}

/* ---- reports -------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* min, median, max of the measured takeover times; returns how many. */
static int takeover_stats(const run_res *rs, unsigned n, double out[3]) {
  double *t = weir_calloc(n ? n : 1, sizeof *t);
  int m = 0;
  for (unsigned i = 0; i < n; i++)
    if (rs[i].takeover_ms >= 0) t[m++] = rs[i].takeover_ms;
  if (m) {
    qsort(t, (size_t)m, sizeof *t, cmp_double);
    out[0] = t[0];
    out[1] = m % 2 ? t[m / 2] : (t[m / 2 - 1] + t[m / 2]) / 2;
    out[2] = t[m - 1];
  }
  weir_free(t);
  return m;
}

static const char *expectation(const scenario *sc, int dest) {
  switch (sc->kind) {
  case K_CLEAN:
    return dest ? "requests N, effects N, exact" : "exit 0";
  case K_SECOND:
    return dest ? "second process exits 4; 1 owner; requests N, effects N, exact"
                : "second process exits 4; 1 owner";
  case K_KILL:
    if (!dest) return "successor exits 0; 2 owners";
    return sc->idempotent ? "requests N+1 (one operation resent), effects N (1 duplicate), exact"
                          : "requests N+1, effects N+1 (the resent operation applied twice)";
  case K_PAUSE:
    if (!dest) return "successor exits 0; stale owner exits 4";
    return sc->no_dedup ? "effects N+1 (the operation sent before the pause, applied again); "
                          "nothing of the stale owner after the takeover lands; stale owner exits 4"
                        : "effects N, exact; nothing of the stale owner lands (fenced); stale "
                          "owner exits 4";
  default:
    return dest ? "takeover under half the lease; effects N, exact"
                : "takeover under half the lease";
  }
}

static void cell(FILE *f, int64_t v, int w) {
  if (v < 0)
    fprintf(f, " %*s", w, "-");
  else
    fprintf(f, " %*" PRId64, w, v);
}

static void exits(char *buf, size_t cap, const run_res *r) {
  size_t n = 0;
  buf[0] = '\0';
  if (r->stopped) n += (size_t)snprintf(buf, cap, "A=STOP");
  for (int i = 0; i < 3 && n < cap; i++) {
    if (r->code[i] < 0) continue;
    const char *who = i == 0 ? "A" : i == 1 ? "B" : "A'";
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "", who);
    if (r->code[i] > 128)
      n += (size_t)snprintf(buf + n, cap - n, "=%s", r->code[i] == 128 + SIGKILL ? "KILL" : "sig");
    else
      n += (size_t)snprintf(buf + n, cap - n, "=%d", r->code[i]);
  }
  if (!buf[0]) snprintf(buf, cap, "-");
}

static void print_table(FILE *f, const vctx *v, const scenario *sc, const run_res *rs, unsigned n) {
  int dest = v->o->url == NULL;
  fprintf(f, "\n%s: %s\n  expected: %s\n", sc->name, sc->title, expectation(sc, dest));
  if (!dest)
    fputs("  (your destination: requests as weir's sink counted them, in the runs that ended\n"
          "  normally; its effects are not visible to verify)\n",
          f);
  fprintf(f, "  %3s %4s %8s %8s %7s %5s %7s %6s %8s %9s %-16s %5s %3s\n", "rep", "runs", "attempts",
          "requests", "effects", "dups", "rejects", "resent", "applied2", "takeover", "exits",
          "exact", "ok");
  unsigned met = 0;
  for (unsigned i = 0; i < n; i++) {
    const run_res *r = &rs[i];
    char ex[64], to[24];
    exits(ex, sizeof ex, r);
    if (r->takeover_ms >= 0)
      snprintf(to, sizeof to, "%.1fms", r->takeover_ms);
    else
      snprintf(to, sizeof to, "-");
    fprintf(f, "  %3u %4d", i + 1, r->runs);
    cell(f, r->owners, 8);
    cell(f, dest ? r->requests : r->weir_requests, 8);
    cell(f, r->effects, 7);
    cell(f, r->duplicates, 5);
    cell(f, r->rejections, 7);
    cell(f, r->rep_payloads, 6);
    cell(f, r->rep_effects, 8);
    fprintf(f, " %9s %-16s %5s %3s\n", to, ex,
            r->exact < 0 ? "-"
            : r->exact   ? "yes"
                         : "no",
            r->met ? "yes" : "NO");
    if (r->met) met++;
  }
  for (unsigned i = 0; i < n; i++)
    if (rs[i].note[0]) fprintf(f, "  rep %u: %s\n", i + 1, rs[i].note);
  double t[3];
  if (takeover_stats(rs, n, t))
    fprintf(f, "  takeover min/median/max: %.1f / %.1f / %.1f ms (lease %" PRIu64 " ms)\n", t[0],
            t[1], t[2], v->o->lease_ms);
  fprintf(f, "  expectation held in %u of %u\n", met, n);
}

static void json_i(FILE *f, const char *k, int64_t v) {
  if (v < 0)
    fprintf(f, ", \"%s\": null", k);
  else
    fprintf(f, ", \"%s\": %" PRId64, k, v);
}

static void print_json(FILE *f, const vctx *v, const unsigned *which, unsigned nsc,
                       run_res *const *all) {
  const vopts *o = v->o;
  fprintf(f,
          "{\"records\": %" PRIu64 ", \"keys\": %" PRIu64 ", \"rate\": %" PRIu64
          ", \"lease_ms\": %" PRIu64 ", \"repeat\": %" PRIu64 ", \"destination\": ",
          o->records, o->keys, o->rate, o->lease_ms, o->repeat);
  weir_json_string(f, o->url ? o->url : "weir receiver");
  fputs(", \"scenarios\": [", f);
  for (unsigned s = 0; s < nsc; s++) {
    const scenario *sc = &scenarios[which[s]];
    const run_res *rs = all[s];
    unsigned met = 0;
    for (unsigned i = 0; i < o->repeat; i++) met += rs[i].met != 0;
    fprintf(f, "%s\n  {\"name\": ", s ? "," : "");
    weir_json_string(f, sc->name);
    fputs(", \"title\": ", f);
    weir_json_string(f, sc->title);
    fputs(", \"expected\": ", f);
    weir_json_string(f, expectation(sc, o->url == NULL));
    fprintf(f, ", \"met\": %u", met);
    double t[3];
    if (takeover_stats(rs, (unsigned)o->repeat, t))
      fprintf(f, ", \"takeover_ms\": {\"min\": %.3f, \"median\": %.3f, \"max\": %.3f}", t[0], t[1],
              t[2]);
    else
      fputs(", \"takeover_ms\": null", f);
    fputs(", \"runs\": [", f);
    for (unsigned i = 0; i < o->repeat; i++) {
      const run_res *r = &rs[i];
      fprintf(f, "%s\n    {\"rep\": %u, \"ok\": %s, \"met\": %s, \"processes\": %d", i ? "," : "",
              i + 1, r->ok ? "true" : "false", r->met ? "true" : "false", r->runs);
      json_i(f, "attempts", r->owners);
      json_i(f, "requests", r->requests);
      json_i(f, "effects", r->effects);
      json_i(f, "duplicates", r->duplicates);
      json_i(f, "rejections", r->rejections);
      json_i(f, "fenced", r->fenced);
      json_i(f, "repeated_payloads", r->rep_payloads);
      json_i(f, "repeated_effects", r->rep_effects);
      json_i(f, "weir_requests", r->weir_requests);
      json_i(f, "lost", r->lost);
      json_i(f, "unexpected", r->unexpected);
      if (r->takeover_ms >= 0)
        fprintf(f, ", \"takeover_ms\": %.3f", r->takeover_ms);
      else
        fputs(", \"takeover_ms\": null", f);
      fprintf(f, ", \"exact\": %s", r->exact < 0 ? "null" : r->exact ? "true" : "false");
      fprintf(f, ", \"owner_stopped\": %s", r->stopped ? "true" : "false");
      fputs(", \"exit\": {", f);
      static const char *const who[3] = {"owner", "successor", "owner_resumed"};
      int first = 1;
      for (int k = 0; k < 3; k++) {
        if (r->code[k] < 0) continue;
        fprintf(f, "%s\"%s\": %d", first ? "" : ", ", who[k], r->code[k]);
        first = 0;
      }
      fputs("}, \"note\": ", f);
      weir_json_string(f, r->note);
      fputc('}', f);
    }
    fputs("]}", f);
  }
  fputs("\n]}\n", f);
}

/* ---- the verb --------------------------------------------------------------------- */

void cli_help_verify(FILE *out) {
  fputs("usage: weir verify [--repeat R] [--scenarios LIST] [--records N] [--keys K]\n"
        "                   [--rate R] [--lease-ms MS] [--url URL] [--json FILE|-]\n"
        "                   [--dir DIR] [--quiet]\n"
        "\n"
        "Makes the failure window of an HTTP destination visible: runs the counter job\n"
        "(N records over K keys, one POST per record, body \"<key> <count>\") in worker\n"
        "processes of this weir that share one state directory, interrupts them in the\n"
        "scenarios below, R times each, and prints a table per scenario. By default\n"
        "the destination is a 'weir receiver' that verify starts for each repetition\n"
        "on a free loopback port, and every count comes from its own log ('weir\n"
        "receiver stats' and 'weir receiver effects'), not from weir's counters.\n"
        "\n"
        "Scenarios (--scenarios takes a comma-separated list; default all):\n"
        "  clean           control: one owner, no interruption\n"
        "  second-owner    a second process while the owner is alive: must exit 4\n"
        "  kill-no-key     owner SIGKILLed right after the destination accepted a\n"
        "                  request (failpoint http.after_accept), before the checkpoint\n"
        "                  recorded it; idempotency=off: 2 requests, 2 effects for it\n"
        "  kill-key        the same with Idempotency-Key: 2 requests, 1 effect\n"
        "  pause-key       owner stopped (SIGSTOP) at the same point, past its lease;\n"
        "                  a successor with --wait takes over and completes; then the\n"
        "                  owner is continued (SIGCONT): it exits 4, and its requests\n"
        "                  carry a stale Weir-Epoch, which the receiver refuses (409)\n"
        "  pause-no-dedup  as pause-key with 'weir receiver --no-dedup': fencing does not\n"
        "                  undo the effect sent before the pause (N+1 effects)\n"
        "  release         SIGTERM (orderly release); the successor takes over at once\n"
        "\n"
        "Columns: runs = worker processes started; attempts = task attempts: the\n"
        "processes that took the lease and ran the job (its epoch); requests, effects, dups "
        "(replayed with the same\n"
        "key), rejects (422, plus 409 to a stale Weir-Epoch), resent (operations\n"
        "requested more than once), applied2 (operations applied more than once): the\n"
        "destination's own counts; takeover = from the interruption the harness saw\n"
        "(the owner's death or stop reported by waitpid, or the SIGTERM it sent) until\n"
        "the successor's claim of the lease exists, measured; exits = exit codes of\n"
        "the owner (A), the successor (B) and the resumed owner (A'); exact = every\n"
        "expected effect exactly once and nothing else.\n"
        "\n"
        "Options:\n"
        "  --repeat R        repetitions per scenario (default 5)\n"
        "  --records N       records of the job (default 40)\n"
        "  --keys K          keys (default 4)\n"
        "  --rate R          records per second (default 50), so that the job runs\n"
        "                    long enough to be interrupted\n"
        "  --lease-ms MS     the workers' lease (default 2000): a paused owner is taken\n"
        "                    over after it\n"
        "  --url URL         your own destination instead of a weir receiver (http://,\n"
        "                    sink parameters allowed): verify cannot see its requests\n"
        "                    or effects then; it reports exits, owners, takeover times\n"
        "                    and the requests weir's sink counted (workers that ended\n"
        "                    normally), and skips pause-no-dedup\n"
        "  --json FILE       also write the results as JSON to FILE ('-': stdout; the\n"
        "                    tables then go to stderr)\n"
        "  --dir DIR         work directory (kept); default a temporary one, removed\n"
        "                    unless an expectation failed\n"
        "  --quiet           no tables (with --json)\n"
        "\n"
        "Exit codes: 0 every expectation held, 1 one did not (or a step failed),\n"
        "2 usage error.\n",
        out);
}

static int parse(int argc, char **argv, vopts *o) {
  memset(o, 0, sizeof *o);
  o->repeat = 5;
  o->records = 40;
  o->keys = 4;
  o->rate = 50;
  o->lease_ms = 2000;
  cli_args a = {.argc = argc, .argv = argv, .i = 1, .what = "verify"};
  while (a.i < argc) {
    if (cli_is_help(&a)) {
      cli_help_verify(stdout);
      return 1;
    }
    int r;
    if ((r = cli_take_u64(&a, "--repeat", 1000, &o->repeat)) != 0 ||
        (r = cli_take_u64(&a, "--records", 1000000, &o->records)) != 0 ||
        (r = cli_take_u64(&a, "--keys", 1000000, &o->keys)) != 0 ||
        (r = cli_take_u64(&a, "--rate", 1000000000, &o->rate)) != 0 ||
        (r = cli_take_u64(&a, "--lease-ms", 3600000, &o->lease_ms)) != 0 ||
        (r = cli_take_str(&a, "--url", &o->url)) != 0 ||
        (r = cli_take_str(&a, "--json", &o->json)) != 0 ||
        (r = cli_take_str(&a, "--dir", &o->dir)) != 0 ||
        (r = cli_take_str(&a, "--scenarios", &o->only)) != 0 ||
        (r = cli_take_bool(&a, "--quiet", &o->quiet)) != 0) {
      if (r < 0) return -1;
      continue;
    }
    return vusage("unexpected argument '%s'", argv[a.i]);
  }
  if (o->repeat == 0) return vusage("--repeat must be at least 1");
  if (o->records < 2 || o->keys == 0 || o->keys > o->records)
    return vusage("--records must be at least 2, --keys between 1 and --records");
  if (o->lease_ms < 100) return vusage("--lease-ms must be at least 100");
  if (o->url && strncmp(o->url, "http://", 7) != 0)
    return vusage("--url: '%s' is not an http:// URL", o->url);
  return 0;
}

/* Which scenarios to run, in table order. Returns how many, or -1. */
static int select_scenarios(const vopts *o, unsigned *which) {
  unsigned n = 0;
  for (unsigned i = 0; i < N_SCENARIOS; i++) {
    if (o->url && scenarios[i].no_dedup) continue;
    if (o->only) {
      size_t l = strlen(scenarios[i].name);
      int found = 0;
      for (const char *p = o->only; *p;) {
        const char *c = strchr(p, ',');
        size_t m = c ? (size_t)(c - p) : strlen(p);
        if (m == l && strncmp(p, scenarios[i].name, l) == 0) found = 1;
        p += m + (c != NULL);
      }
      if (!found) continue;
    }
    which[n++] = i;
  }
  if (o->only) {
    for (const char *p = o->only; *p;) {
      const char *c = strchr(p, ',');
      size_t m = c ? (size_t)(c - p) : strlen(p);
      int known = 0;
      for (unsigned i = 0; i < N_SCENARIOS; i++)
        if (strlen(scenarios[i].name) == m && strncmp(p, scenarios[i].name, m) == 0) known = 1;
      if (!known) return vusage("--scenarios: unknown scenario '%.*s'", (int)m, p);
      p += m + (c != NULL);
    }
  }
  if (n == 0) return vusage("--scenarios: nothing to run");
  return (int)n;
}

int cli_cmd_verify(int argc, char **argv, const char *argv0) {
  vopts o;
  int p = parse(argc, argv, &o);
  if (p) return p > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  unsigned which[N_SCENARIOS];
  int nsc = select_scenarios(&o, which);
  if (nsc < 0) return CLI_EXIT_USAGE;
  vctx v = {.o = &o};
  if (self_exe(v.exe, sizeof v.exe, argv0) < 0) {
    cli_error("verify: cannot find the weir executable to start workers with");
    return CLI_EXIT_RUNTIME;
  }
  if (o.dir) {
    if (cli_mkdir_p(o.dir) < 0) {
      cli_error("verify: cannot create '%s'", o.dir);
      return CLI_EXIT_RUNTIME;
    }
    v.work = weir_strdup(o.dir);
  } else {
    const char *tmp = getenv("TMPDIR");
    v.work = pathf("%s/weir-verify.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(v.work)) {
      cli_error("verify: cannot create a work directory: %s", strerror(errno));
      weir_free(v.work);
      return CLI_EXIT_RUNTIME;
    }
  }
  FILE *tables = o.quiet ? NULL : o.json && strcmp(o.json, "-") == 0 ? stderr : stdout;
  if (tables)
    fprintf(tables,
            "weir verify: counter job, %" PRIu64 " records over %" PRIu64 " keys at %" PRIu64
            "/s, lease %" PRIu64 " ms, %" PRIu64 " repetitions; destination %s; work in %s\n",
            o.records, o.keys, o.rate, o.lease_ms, o.repeat,
            o.url ? o.url : "a weir receiver per repetition", v.work);
  run_res *all[N_SCENARIOS] = {0};
  int all_met = 1;
  for (int s = 0; s < nsc; s++) {
    const scenario *sc = &scenarios[which[s]];
    all[s] = weir_calloc((size_t)o.repeat, sizeof *all[s]);
    for (unsigned i = 0; i < o.repeat; i++) {
      run_one(&v, sc, i + 1, &all[s][i]);
      if (!all[s][i].met) all_met = 0;
    }
    if (tables) {
      print_table(tables, &v, sc, all[s], (unsigned)o.repeat);
      fflush(tables);
    }
  }
  int code = all_met ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
  if (o.json) {
    FILE *f = strcmp(o.json, "-") == 0 ? stdout : fopen(o.json, "w");
    if (!f) {
      cli_error("verify: cannot write '%s': %s", o.json, strerror(errno));
      code = CLI_EXIT_RUNTIME;
    } else {
      print_json(f, &v, which, (unsigned)nsc, all);
      if (f != stdout && fclose(f) != 0) code = CLI_EXIT_RUNTIME;
      if (f == stdout) fflush(stdout);
    }
  }
  if (tables)
    fprintf(tables, "\nweir verify: %s\n",
            all_met ? "every expectation held" : "an expectation did not hold (see above)");
  if (!o.dir && all_met) {
    rm_rf(v.work);
  } else if (!o.dir && tables) {
    fprintf(tables, "weir verify: kept the work directory %s (logs of every process)\n", v.work);
  }
  for (int s = 0; s < nsc; s++) weir_free(all[s]);
  weir_free(v.work);
  return code;
}
