/* jobs/control.c: owns the control socket of a running job and the verbs
 * that use it: `weir savepoint` and `weir stop` (docs/savepoints.md §3).
 *
 * DESIGN. A run with a state directory listens on the Unix socket
 * <state dir>/control (mode 0600: only the job's user may savepoint or
 * stop it) from the moment it owns the directory (the engine's `started`
 * callback) until it has ended. One thread accepts one request at a time:
 * a line, answered with a line.
 *
 *   savepoint PATH|-          ->  ok ID BYTES PATH      | error CODE MESSAGE
 *   stop FLAGS PATH|-         ->  ok ID BYTES PATH      (FLAGS: s savepoint,
 *                                 or ok 0 0 -              d drain, - none)
 *                                 then, when the job has ended: ended EXIT
 *   abandon                   ->  ok 0 0 -
 *
 * A `stop` connection stays open until the job has ended, so that `weir
 * stop` learns the job's exit code without polling. The socket is removed
 * at the end only if it is still this run's (a successor may have made its
 * own once the lease was released). Also the TCP listening socket of the
 * command's HTTP servers (cli_listen).
 */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

#define CONTROL_NAME "control"
#define MAX_WAITERS 16

struct cli_control {
  weir_job *job;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  int fd;
  int wake[2]; /* a byte here stops the thread */
  pthread_t thread;
  int running;
  struct stat st; /* the socket as made: removed only if still it */
  int waiters[MAX_WAITERS];
  int nwaiters;
};

static void send_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_line(int fd, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  for (int i = 0; i < n; i++)
    if (buf[i] == '\n') buf[i] = ' ';
  buf[n++] = '\n';
  for (ssize_t off = 0; off < n;) {
    ssize_t w = send(fd, buf + off, (size_t)(n - off), 0);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    off += w;
  }
}

/* Reads one line (without its newline) within timeout_ms: its length, or
 * -1 (closed, timed out, too long). */
static int read_line(int fd, char *buf, size_t cap, int timeout_ms) {
  size_t n = 0;
  while (n + 1 < cap) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, timeout_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return -1;
    ssize_t r = recv(fd, buf + n, 1, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    if (buf[n] == '\n') {
      buf[n] = '\0';
      return (int)n;
    }
    n++;
  }
  return -1;
}

static void answer_savepoint(int fd, int rc, const weir_savepoint_result *res) {
  if (rc == 0)
    send_line(fd, "ok %llu %llu %s", (unsigned long long)res->id, (unsigned long long)res->bytes,
              res->path);
  else
    send_line(fd, "error %d %s", rc, res->error[0] ? res->error : weir_strerror(rc));
}

/* Serves one request on fd; returns 1 if fd is kept (a stop's waiter). */
static int serve(cli_control *c, int fd) {
  char line[4200];
  if (read_line(fd, line, sizeof line, 5000) < 0) return 0;
  char *arg = strchr(line, ' ');
  if (arg) *arg++ = '\0';
  weir_savepoint_result res;
  if (strcmp(line, "savepoint") == 0 && arg) {
    int rc = weir_job_savepoint(c->job, strcmp(arg, "-") ? arg : NULL, 0, &res);
    answer_savepoint(fd, rc, &res);
    return 0;
  }
  if (strcmp(line, "stop") == 0 && arg) {
    char *path = strchr(arg, ' ');
    if (path) *path++ = '\0';
    int sp = strchr(arg, 's') != NULL, drain = strchr(arg, 'd') != NULL;
    if (sp) {
      unsigned f = WEIR_SAVEPOINT_STOP | (drain ? WEIR_SAVEPOINT_DRAIN : 0);
      int rc = weir_job_savepoint(c->job, path && strcmp(path, "-") ? path : NULL, f, &res);
      answer_savepoint(fd, rc, &res);
      if (rc) return 0;
    } else {
      if (drain)
        weir_job_drain(c->job);
      else
        weir_job_stop(c->job);
      send_line(fd, "ok 0 0 -");
    }
    if (c->nwaiters == MAX_WAITERS) return 0;
    c->waiters[c->nwaiters++] = fd;
    return 1;
  }
  if (strcmp(line, "abandon") == 0) {
    weir_job_abandon(c->job);
    send_line(fd, "ok 0 0 -");
    return 0;
  }
  send_line(fd, "error %d unknown request '%s'", WEIR_EINVAL, line);
  return 0;
}

static void *control_main(void *arg) {
  cli_control *c = arg;
  /* A client that went away must not end the job: SIGPIPE of a send on
   * this thread stays blocked here (send fails with EPIPE instead), on
   * every platform, without ignoring it for the whole process. */
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, NULL);
  for (;;) {
    struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = c->wake[0], .events = POLLIN}};
    int pr = poll(p, 2, -1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0 || (p[1].revents & (POLLIN | POLLHUP))) break;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = accept(c->fd, NULL, NULL);
    if (fd < 0) continue;

    if (!serve(c, fd)) close(fd);
  }
  return NULL;
}

int cli_control_path(const char *state_dir, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/%s", state_dir, CONTROL_NAME);
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

cli_control *cli_control_start(weir_job *job, const char *state_dir) {
  cli_control *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->job = job;
  c->fd = c->wake[0] = c->wake[1] = -1;
  if (cli_control_path(state_dir, c->path, sizeof c->path) < 0) {
    WEIR_LOG_W("no control socket: the state directory's path is too long for one (%zu bytes "
               "at most): 'weir savepoint' and 'weir stop' cannot reach this job",
               sizeof c->path - sizeof CONTROL_NAME - 1);
    free(c);
    return NULL;
  }
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
  /* This run owns the directory: a socket there is a dead run's. */
  unlink(c->path);
  c->fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (c->fd >= 0) (void)fcntl(c->fd, F_SETFD, FD_CLOEXEC);
  mode_t old = umask(077);
  int rc = c->fd < 0 ? -1 : bind(c->fd, (struct sockaddr *)&sa, sizeof sa);
  umask(old);
  if (rc == 0) rc = chmod(c->path, 0600);
  if (rc == 0) rc = listen(c->fd, 8);
  if (rc == 0) rc = stat(c->path, &c->st);
  if (rc == 0) rc = pipe(c->wake);
  if (rc == 0 && pthread_create(&c->thread, NULL, control_main, c) != 0) rc = -1;
  if (rc != 0) {
    WEIR_LOG_W("no control socket at %s: %s: 'weir savepoint' and 'weir stop' cannot reach "
               "this job",
               c->path, strerror(errno));
    if (c->fd >= 0) close(c->fd);
    for (int i = 0; i < 2; i++)
      if (c->wake[i] >= 0) close(c->wake[i]);
    unlink(c->path);
    free(c);
    return NULL;
  }
  c->running = 1;
  return c;
}

void cli_control_end(cli_control *c, int exit_code) {
  if (c == NULL) return;
  if (write(c->wake[1], "x", 1) < 0) {
  }
  pthread_join(c->thread, NULL);
  struct stat now;
  if (stat(c->path, &now) == 0 && now.st_ino == c->st.st_ino && now.st_dev == c->st.st_dev)
    unlink(c->path);
  close(c->fd);
  close(c->wake[0]);
  close(c->wake[1]);
  for (int i = 0; i < c->nwaiters; i++) {
    send_line(c->waiters[i], "ended %d", exit_code);
    close(c->waiters[i]);
  }
  free(c);
}

/* ------------------------------------------------------------------------ */
/* The client verbs                                                         */

void cli_help_savepoint(FILE *out) {
  fputs("usage: weir savepoint [--state-dir DIR] [--out PATH]\n"
        "       weir savepoint --delete ID [--state-dir DIR]\n"
        "\n"
        "Takes a savepoint of the job running in DIR (default ./state): its next\n"
        "checkpoint, aligned, written as one self-contained file that retention never\n"
        "removes and that can be moved to another machine. Waits until the file is\n"
        "durable and prints its path on stdout (default DIR/savepoints/<checkpoint id>).\n"
        "Start a job from it with 'weir run --from-savepoint PATH ...'.\n"
        "  --out PATH      write the savepoint file there instead\n"
        "  --delete ID     remove DIR/savepoints/ID (savepoints are removed only so)\n"
        "Reaches the job through its control socket DIR/control (mode 0600).\n"
        "Exit codes: 0 done, 1 no job runs in DIR or the savepoint failed, 2 usage.\n",
        out);
}

void cli_help_stop(FILE *out) {
  fputs("usage: weir stop [--state-dir DIR] [--savepoint [--out PATH]] [--drain]\n"
        "                 [--timeout S]\n"
        "\n"
        "Stops the job running in DIR (default ./state) and waits for it to exit.\n"
        "Its sources end, the job drains and its last checkpoint is taken; two-phase\n"
        "sinks commit it as the job ends. Without --drain no end of input is emitted:\n"
        "open windows and timers stay in the last checkpoint for the next run.\n"
        "  --savepoint     the last checkpoint is also written as a savepoint file\n"
        "                  (printed on stdout; default DIR/savepoints/<id>): stop, then\n"
        "                  'weir run --from-savepoint PATH' with the new version of the\n"
        "                  job, upgrades it without losing or repeating an effect\n"
        "  --out PATH      with --savepoint: write the savepoint file there\n"
        "  --drain         end the input for good: timers fire, windows close, and the\n"
        "                  job is finished (nothing left to restore)\n"
        "  --timeout S     wait at most S seconds (default 60) for the job to end; then\n"
        "                  abandon the stop: the job exits 1 and the effects it had not\n"
        "                  committed stay pending, committed by the next run\n"
        "Exit codes: 0 the job ended cleanly, 1 no job runs in DIR, the job failed or\n"
        "was abandoned, 2 usage.\n",
        out);
}

/* Connects to DIR's control socket: an fd, or -1 after a message. */
static int connect_to(const char *dir) {
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  if (cli_control_path(dir, path, sizeof path) < 0) {
    cli_error("the state directory's path '%s' is too long for its control socket", dir);
    return -1;
  }
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
  int e = errno;
  if (fd >= 0) close(fd);
  if (e == ENOENT || e == ECONNREFUSED)
    cli_error("no job runs in the state directory '%s' (no control socket answers at %s)", dir,
              path);
  else
    cli_error("cannot reach the job in '%s' through %s: %s", dir, path, strerror(e));
  return -1;
}

/* An absolute form of a path the job process will open. */
static char *absolute(const char *p) {
  if (p[0] == '/') return strdup(p);
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd) == NULL) return NULL;
  size_t n = strlen(cwd) + strlen(p) + 2;
  char *a = malloc(n);
  if (a) snprintf(a, n, "%s/%s", cwd, p);
  return a;
}

/* Parses "ok ID BYTES PATH" (prints PATH when it is a savepoint) or
 * "error CODE MESSAGE" (prints it): 0 or -1. */
static int take_answer(const char *line, int print_path) {
  unsigned long long id, bytes;
  int off = 0;
  if (sscanf(line, "ok %llu %llu %n", &id, &bytes, &off) == 2 && off > 0) {
    if (print_path && id) printf("%s\n", line + off);
    fflush(stdout);
    return 0;
  }
  int code;
  if (sscanf(line, "error %d %n", &code, &off) == 1 && off > 0) {
    cli_error("%s", line + off);
    return -1;
  }
  cli_error("the job answered something this weir does not understand: '%s'", line);
  return -1;
}

typedef struct ctl_args {
  const char *dir, *out;
  uint64_t del, timeout_s;
  int sp, drain, deleting;
} ctl_args;

static int parse_ctl(int argc, char **argv, const char *verb, ctl_args *c, int stop) {
  cli_args a = {.argc = argc, .argv = argv, .i = 1, .what = verb};
  memset(c, 0, sizeof *c);
  c->dir = "./state";
  c->timeout_s = 60;
  while (a.i < argc) {
    if (cli_is_help(&a)) return 1;
    int r;
    if ((r = cli_take_str(&a, "--state-dir", &c->dir)) != 0) {
      if (r < 0) return -1;
      continue;
    }
    if ((r = cli_take_str(&a, "--out", &c->out)) != 0) {
      if (r < 0) return -1;
      continue;
    }
    if (!stop && (r = cli_take_u64(&a, "--delete", UINT64_MAX, &c->del)) != 0) {
      if (r < 0) return -1;
      c->deleting = 1;
      continue;
    }
    if (stop && (r = cli_take_bool(&a, "--savepoint", &c->sp)) != 0) continue;
    if (stop && (r = cli_take_bool(&a, "--drain", &c->drain)) != 0) continue;
    if (stop && (r = cli_take_u64(&a, "--timeout", 86400 * 365, &c->timeout_s)) != 0) {
      if (r < 0) return -1;
      continue;
    }
    cli_usage("unknown argument '%s' for 'weir %s' (see 'weir help %s')", argv[a.i], verb, verb);
    return -1;
  }
  if (stop && c->out && !c->sp) {
    cli_usage("--out goes with --savepoint");
    return -1;
  }
  if (c->deleting && c->out) {
    cli_usage("--delete and --out exclude each other");
    return -1;
  }
  return 0;
}

static int delete_savepoint(const ctl_args *c) {
  char path[4096];
  snprintf(path, sizeof path, "%s/savepoints/%llu", c->dir, (unsigned long long)c->del);
  if (unlink(path) != 0) {
    if (errno == ENOENT)
      cli_error("no savepoint %llu in '%s/savepoints' (see 'weir checkpoints')",
                (unsigned long long)c->del, c->dir);
    else
      cli_error("cannot delete '%s': %s", path, strerror(errno));
    return CLI_EXIT_RUNTIME;
  }
  fprintf(stderr, "weir: savepoint %llu deleted\n", (unsigned long long)c->del);
  return CLI_EXIT_OK;
}

int cli_cmd_savepoint(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN); /* a job that ends mid-request is an answer too */
  ctl_args c;
  int p = parse_ctl(argc, argv, "savepoint", &c, 0);
  if (p > 0) {
    cli_help_savepoint(stdout);
    return CLI_EXIT_OK;
  }
  if (p < 0) return CLI_EXIT_USAGE;
  if (c.deleting) return delete_savepoint(&c);
  char *out = c.out ? absolute(c.out) : NULL;
  if (c.out && out == NULL) {
    cli_error("cannot resolve '%s': %s", c.out, strerror(errno));
    return CLI_EXIT_RUNTIME;
  }
  int fd = connect_to(c.dir);
  if (fd < 0) {
    free(out);
    return CLI_EXIT_RUNTIME;
  }
  send_line(fd, "savepoint %s", out ? out : "-");
  free(out);
  char line[4200];
  /* A savepoint waits for the next checkpoint and for its file: no limit
   * here beyond the job's own checkpoint timeout. */
  int n = read_line(fd, line, sizeof line, -1);
  close(fd);
  if (n < 0) {
    cli_error("the job in '%s' ended before it answered", c.dir);
    return CLI_EXIT_RUNTIME;
  }
  return take_answer(line, 1) == 0 ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}

int cli_cmd_stop(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  ctl_args c;
  int p = parse_ctl(argc, argv, "stop", &c, 1);
  if (p > 0) {
    cli_help_stop(stdout);
    return CLI_EXIT_OK;
  }
  if (p < 0) return CLI_EXIT_USAGE;
  char *out = c.out ? absolute(c.out) : NULL;
  int fd = connect_to(c.dir);
  if (fd < 0) {
    free(out);
    return CLI_EXIT_RUNTIME;
  }
  char flags[4] = "-";
  if (c.sp || c.drain) snprintf(flags, sizeof flags, "%s%s", c.sp ? "s" : "", c.drain ? "d" : "");
  send_line(fd, "stop %s %s", flags, out ? out : "-");
  free(out);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long long limit_ms = (long long)c.timeout_s * 1000;
  char line[4200];
  int n = read_line(fd, line, sizeof line, -1);
  if (n < 0 || take_answer(line, c.sp) < 0) {
    if (n < 0) cli_error("the job in '%s' ended before it answered", c.dir);
    close(fd);
    return CLI_EXIT_RUNTIME;
  }
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long long spent = (t1.tv_sec - t0.tv_sec) * 1000LL + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  long long left = limit_ms > spent ? limit_ms - spent : 0;
  n = read_line(fd, line, sizeof line, left > INT32_MAX ? INT32_MAX : (int)left);
  if (n < 0) {
    close(fd);
    int fa = connect_to(c.dir);
    if (fa >= 0) {
      send_line(fa, "abandon");
      if (read_line(fa, line, sizeof line, 5000) >= 0) (void)0;
      close(fa);
    }
    cli_error("the job in '%s' did not end within %llu s: the stop was abandoned; effects not "
              "committed yet stay pending, committed by the next run ('weir run --restore "
              "latest')",
              c.dir, (unsigned long long)c.timeout_s);
    return CLI_EXIT_RUNTIME;
  }
  close(fd);
  int code = -1;
  if (sscanf(line, "ended %d", &code) != 1) code = -1;
  if (code == 0) {
    fprintf(stderr, "weir: the job in '%s' stopped cleanly\n", c.dir);
    return CLI_EXIT_OK;
  }
  cli_error("the job in '%s' ended with exit code %d (see its log)", c.dir, code);
  return CLI_EXIT_RUNTIME;
}

int cli_listen(const struct addrinfo *ai, int backlog, int *err) {
  int fd = -1;
  *err = 0;
  for (const struct addrinfo *p = ai; p != NULL && fd < 0; p = p->ai_next) {
    fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
    if (fd < 0) {
      *err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (bind(fd, p->ai_addr, p->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
      *err = errno;
      close(fd);
      fd = -1;
    }
  }
  return fd;
}
