/* tests/helpers.c: the test helper library (see helpers.h).
 *
 * DESIGN: th_run() is the only involved part. The child gets two pipes for
 * stdout and stderr and its own process group; the parent reads both pipes
 * with poll() so a child that fills one pipe while the parent waits on the
 * other cannot deadlock, and wakes at least every TH_TICK_MS to notice a
 * child that exited while a grandchild still holds the pipes open (whatever
 * is already in the pipes is then drained without blocking). On timeout the
 * whole process group is killed with SIGKILL, so a stuck grandchild does not
 * outlive the test either.
 */
#include "helpers.h"

#include "base/failpoint.h"
#include "weir/weir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* AddressSanitizer: gcc defines __SANITIZE_ADDRESS__, clang has
 * __has_feature(address_sanitizer). */
#if defined(__SANITIZE_ADDRESS__)
#define TH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TH_ASAN 1
#endif
#endif

#ifdef TH_ASAN
#if defined(__has_include)
#if __has_include(<sanitizer/lsan_interface.h>)
#include <sanitizer/lsan_interface.h>
#define TH_HAVE_LSAN_HEADER 1
#endif
#endif
#ifndef TH_HAVE_LSAN_HEADER
int __lsan_do_recoverable_leak_check(void);
#endif
#endif

/* How often the read loop of th_run() checks whether the child has exited. */
#define TH_TICK_MS 100

/* ------------------------------------------------------------------------ */
/* Temporary directories                                                    */

char *th_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  if (base == NULL || base[0] == '\0') base = "/tmp";
  size_t n = strlen(base) + sizeof("/weir-test-XXXXXX");
  char *path = malloc(n);
  if (path == NULL) return NULL;
  snprintf(path, n, "%s/weir-test-XXXXXX", base);
  if (mkdtemp(path) == NULL) {
    int e = errno;
    free(path);
    errno = e;
    return NULL;
  }
  return path;
}

/* Removes `name` relative to the directory `dirfd`, recursively. */
static void rm_at(int dirfd, const char *name) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    unlinkat(dirfd, name, 0);
    return;
  }
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES) {
    /* A test may have made a directory unreadable: make it ours again. */
    fchmodat(dirfd, name, S_IRWXU, 0);
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd >= 0) {
    DIR *d = fdopendir(fd); /* owns fd from here on */
    if (d == NULL) {
      close(fd);
    } else {
      if ((st.st_mode & S_IRWXU) != S_IRWXU) fchmod(fd, st.st_mode | S_IRWXU);
      /* Removing entries while reading a directory may make readdir() skip
       * others (some file systems): repeat while passes make progress. */
      size_t seen = 0, prev;
      do {
        prev = seen;
        seen = 0;
        rewinddir(d);
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
          if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
          seen++;
          rm_at(fd, e->d_name);
        }
      } while (seen > 0 && (prev == 0 || seen < prev));
      closedir(d);
    }
  }
  unlinkat(dirfd, name, AT_REMOVEDIR);
}

void th_rmrf(const char *dir) {
  if (dir == NULL || dir[0] == '\0') return;
  rm_at(AT_FDCWD, dir);
}

/* ------------------------------------------------------------------------ */
/* Running a child process                                                  */

typedef struct th_buf {
  char *p;
  size_t len, cap;
} th_buf;

static void buf_append(th_buf *b, const char *data, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (b->len + n + 1 > cap) cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) abort(); /* a test helper: out of memory ends the test */
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0';
}

/* Hands the buffer to *dst (an empty string if nothing was read), or frees
 * it when dst is NULL. */
static void buf_give(th_buf *b, char **dst) {
  if (dst == NULL) {
    free(b->p);
  } else {
    if (b->p == NULL) buf_append(b, "", 0);
    *dst = b->p;
  }
  b->p = NULL;
  b->len = b->cap = 0;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Reads what is available from *fd into b (if b != NULL); closes *fd and
 * sets it to -1 at end of file or on an error. Never blocks (O_NONBLOCK). */
static void drain(int *fd, th_buf *b) {
  char tmp[16384];
  for (;;) {
    ssize_t n = read(*fd, tmp, sizeof tmp);
    if (n > 0) {
      if (b != NULL) buf_append(b, tmp, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close(*fd);
    *fd = -1;
    return;
  }
}

/* In the child: makes `fd` descriptor `target`, inheritable across exec. */
static void child_move_fd(int fd, int target) {
  if (fd == target) {
    fcntl(fd, F_SETFD, 0);
  } else {
    dup2(fd, target);
  }
}

static void child_write(const char *s) {
  ssize_t r = write(2, s, strlen(s));
  (void)r;
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void child_exec(const char *const argv[], const char *cwd, int out_w, int err_w) {
  setpgid(0, 0);
  /* Signal dispositions set to "ignore" and the signal mask survive exec;
   * give the program the defaults it would get from a shell. */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);

  int nul = open("/dev/null", O_RDONLY);
  if (nul >= 0 && nul != 0) {
    dup2(nul, 0);
    close(nul);
  }
  child_move_fd(out_w, 1);
  child_move_fd(err_w, 2);
  if (cwd != NULL && chdir(cwd) != 0) {
    child_write("th_run: cannot enter the working directory\n");
    _exit(127);
  }
  execv(argv[0], (char *const *)argv);
  child_write("th_run: cannot execute ");
  child_write(argv[0]);
  child_write("\n");
  _exit(127);
}

static int status_code(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 255;
}

static int run_impl(const char *const argv[], const char *cwd, char **out, char **err,
                    int timeout_s, int dump);

int th_run(const char *const argv[], const char *cwd, char **out, char **err, int timeout_s) {
  return run_impl(argv, cwd, out, err, timeout_s, 1);
}

/* A child that outlived its time limit is hung somewhere: before it is
 * killed, every thread's stack goes to the test's stderr (the test log),
 * which is all a failure seen once on a loaded machine leaves to go by.
 * Needs gdb (skipped without it); gdb itself gets a minute. */
static void dump_stacks(pid_t pid) {
  static const char *const gdbs[] = {"/usr/bin/gdb", "/usr/local/bin/gdb", "/opt/homebrew/bin/gdb"};
  const char *gdb = NULL;
  for (size_t i = 0; i < sizeof gdbs / sizeof gdbs[0] && !gdb; i++)
    if (access(gdbs[i], X_OK) == 0) gdb = gdbs[i];
  if (!gdb) return;
  char ps[32];
  snprintf(ps, sizeof ps, "%ld", (long)pid);
  const char *argv[] = {gdb, "-batch", "-nx", "-p", ps, "-ex", "thread apply all bt", NULL};
  char *out = NULL;
  run_impl(argv, NULL, &out, NULL, 60, 0);
  fprintf(stderr, "--- process %s timed out; its threads:\n%s--- end of process %s\n", ps,
          out ? out : "(gdb printed nothing)\n", ps);
  free(out);
}

static int run_impl(const char *const argv[], const char *cwd, char **out, char **err,
                    int timeout_s, int dump) {
  int po[2] = {-1, -1}, pe[2] = {-1, -1};
  if (out != NULL) *out = NULL;
  if (err != NULL) *err = NULL;
  if (argv == NULL || argv[0] == NULL) {
    errno = EINVAL;
    return -2;
  }
  if (pipe(po) != 0 || pipe(pe) != 0) {
    int e = errno;
    for (int i = 0; i < 2; i++) {
      if (po[i] >= 0) close(po[i]);
      if (pe[i] >= 0) close(pe[i]);
    }
    errno = e;
    return -2;
  }
  /* No descriptor of ours leaks into this child or into other children
   * started concurrently; the child re-enables its own two in dup2(). */
  for (int i = 0; i < 2; i++) {
    fcntl(po[i], F_SETFD, FD_CLOEXEC);
    fcntl(pe[i], F_SETFD, FD_CLOEXEC);
  }

  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    for (int i = 0; i < 2; i++) {
      close(po[i]);
      close(pe[i]);
    }
    errno = e;
    return -2;
  }
  if (pid == 0) child_exec(argv, cwd, po[1], pe[1]); /* does not return */

  setpgid(pid, pid); /* also here, so a timeout kill never misses the group */
  close(po[1]);
  close(pe[1]);
  int fds[2] = {po[0], pe[0]};
  for (int i = 0; i < 2; i++) fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);

  th_buf bufs[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
  th_buf *dst[2] = {out != NULL ? &bufs[0] : NULL, err != NULL ? &bufs[1] : NULL};
  int64_t deadline = timeout_s > 0 ? now_ms() + (int64_t)timeout_s * 1000 : INT64_MAX;
  int reaped = 0, st = 0, timed_out = 0;

  while (fds[0] >= 0 || fds[1] >= 0) {
    int64_t left = deadline - now_ms();
    if (left <= 0) {
      timed_out = 1;
      break;
    }
    struct pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    int r = poll(p, 2, left < TH_TICK_MS ? (int)left : TH_TICK_MS);
    if (r < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; i++) {
      if (r > 0 && fds[i] >= 0 && p[i].revents != 0) drain(&fds[i], dst[i]);
    }
    if (!reaped && (fds[0] >= 0 || fds[1] >= 0)) {
      pid_t w = waitpid(pid, &st, WNOHANG);
      if (w == pid) {
        /* The child is gone but someone still holds a pipe: take what the
         * child wrote (it is all in the pipes now) and stop reading. */
        reaped = 1;
        for (int i = 0; i < 2; i++) {
          if (fds[i] >= 0) {
            drain(&fds[i], dst[i]);
            if (fds[i] >= 0) close(fds[i]);
            fds[i] = -1;
          }
        }
      }
    }
  }
  for (int i = 0; i < 2; i++) {
    if (fds[i] >= 0) close(fds[i]);
  }

  /* Both pipes closed: wait for the exit, still within the time limit. */
  while (!reaped && !timed_out) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) {
      reaped = 1;
    } else if (w < 0 && errno != EINTR) {
      break; /* not our child any more (someone else reaped it) */
    } else if (now_ms() >= deadline) {
      timed_out = 1;
    } else {
      sleep_ms(5);
    }
  }

  int rc;
  if (timed_out) {
    if (dump) dump_stacks(pid);
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    rc = -1;
  } else if (reaped) {
    rc = status_code(st);
  } else {
    rc = 255;
  }
  buf_give(&bufs[0], out);
  buf_give(&bufs[1], err);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Files                                                                    */

char *th_read_file(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  th_buf b = {NULL, 0, 0};
  char tmp[16384];
  for (;;) {
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n > 0) {
      buf_append(&b, tmp, (size_t)n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      int e = errno;
      close(fd);
      free(b.p);
      errno = e;
      return NULL;
    }
  }
  close(fd);
  if (b.p == NULL) buf_append(&b, "", 0);
  if (len != NULL) *len = b.len;
  return b.p;
}

static int input_by_name(const void *a, const void *b) {
  return strcmp(((const th_input *)a)->name, ((const th_input *)b)->name);
}

int th_read_dir(const char *dir, th_inputs *in) {
  memset(in, 0, sizeof *in);
  DIR *d = opendir(dir);
  if (d == NULL) return -errno;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t nl = strlen(e->d_name);
    if (e->d_name[0] == '.' || (nl > 3 && strcmp(e->d_name + nl - 3, ".md") == 0)) continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t len;
    char *data = th_read_file(path, &len);
    char *name = strdup(e->d_name);
    th_input *v = realloc(in->v, (in->n + 1) * sizeof *v);
    if (data == NULL || name == NULL || v == NULL) {
      int err = data == NULL ? errno : ENOMEM;
      free(data);
      free(name);
      if (v != NULL) in->v = v;
      closedir(d);
      th_free_inputs(in);
      return -err;
    }
    in->v = v;
    in->v[in->n++] = (th_input){name, (uint8_t *)data, len};
  }
  closedir(d);
  if (in->n > 1) qsort(in->v, in->n, sizeof *in->v, input_by_name);
  return 0;
}

void th_free_inputs(th_inputs *in) {
  for (size_t i = 0; i < in->n; i++) {
    free(in->v[i].name);
    free(in->v[i].data);
  }
  free(in->v);
  memset(in, 0, sizeof *in);
}

int th_write_file(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      return -e;
    }
    done += (size_t)n;
  }
  if (close(fd) != 0) return -errno;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Leaks                                                                    */

int th_leak_check(void) {
#ifdef TH_ASAN
  fflush(NULL);
  return __lsan_do_recoverable_leak_check() != 0;
#else
  return 0;
#endif
}

int th_count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

void th_arm_failpoints(const char *spec) {
  if (spec)
    setenv("WEIR_FAILPOINTS", spec, 1);
  else
    unsetenv("WEIR_FAILPOINTS");
  weir_failpoint_reload();
}

/* ------------------------------------------------------------------------ */
/* Crash tests of the weir binary                                           */

const char *th_service(const char *var) {
  const char *v = getenv(var);
  return v && *v ? v : NULL;
}

int th_in_ci(void) {
  const char *v = getenv("CI");
  return v && strcmp(v, "true") == 0;
}

int64_t th_mono_ms(void) {
  return now_ms();
}

void th_sleep_ms(int ms) {
  sleep_ms(ms);
}

uint64_t th_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* stderr goes to a file rather than a pipe: a SIGKILLed group cannot leave
 * a reader waiting, and the polling loop below only watches the child. */
pid_t th_spawn(const char *const argv[], const char *cwd, const char *failpoints,
               const char *errpath) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    if (failpoints)
      setenv("WEIR_FAILPOINTS", failpoints, 1);
    else
      unsetenv("WEIR_FAILPOINTS");
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0 || nul < 0 || (cwd && chdir(cwd) != 0)) _exit(127);
    dup2(nul, 0);
    dup2(nul, 1);
    dup2(fd, 2);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  setpgid(pid, pid); /* also here: no window in which a kill misses the group */
  return pid;
}

int th_run_killable(const char *const argv[], const char *cwd, const char *failpoints, int kill_ms,
                    int timeout_s, const char *errpath, char **err, int64_t *ms) {
  int64_t t0 = now_ms();
  pid_t pid = th_spawn(argv, cwd, failpoints, errpath);
  if (pid < 0) return -2;
  int64_t kill_at = kill_ms >= 0 ? t0 + kill_ms : t0 + (int64_t)timeout_s * 1000;
  int st = 0, killed = 0, rc = -1;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) {
      rc = status_code(st);
      break;
    }
    if (w < 0 && errno != EINTR) break;
    if (!killed && (kill_ms >= 0 || timeout_s > 0) && now_ms() >= kill_at) {
      if (kill_ms < 0) dump_stacks(pid);
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      killed = kill_ms >= 0 ? 1 : 2;
      continue;
    }
    sleep_ms(1);
  }
  if (ms) *ms = now_ms() - t0;
  if (killed == 2) rc = -1;
  *err = th_read_file(errpath, NULL);
  if (!*err) *err = strdup("");
  return rc;
}

long long th_resumed_from(const char *err) {
  if (strstr(err, "already finished")) return TH_ALREADY_FINISHED;
  const char *p = strstr(err, "restored job ");
  if (p) {
    p = strstr(p, " from checkpoint ");
    unsigned long long id = 0;
    if (p && sscanf(p, " from checkpoint %llu", &id) == 1) return (long long)id;
  }
  return strstr(err, "starting from the beginning") ? 0 : -1;
}

int th_count_pending(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".pending") != NULL;
  closedir(d);
  return n;
}

int th_latest_op_state(const char *weir, const char *state, const char *op, unsigned long long *id,
                       unsigned long long *bytes, int *subtasks) {
  *id = *bytes = 0;
  *subtasks = 0;
  char *out = NULL, *err = NULL;
  const char *list[] = {weir, "checkpoints", "--state-dir", state, "--json", NULL};
  int rc = th_run(list, NULL, &out, &err, 60);
  if (rc != 0) {
    fprintf(stderr, "weir checkpoints: exit %d: %s\n", rc, err ? err : "");
    free(out);
    free(err);
    return -1;
  }
  for (const char *p = strstr(out, "{\"id\": "); p; p = strstr(p + 1, "{\"id\": "))
    if (sscanf(p, "{\"id\": %llu", id) != 1) rc = -1;
  free(out);
  free(err);
  if (rc < 0 || *id == 0) return rc;
  char ids[32], pat[128];
  snprintf(ids, sizeof ids, "%llu", *id);
  snprintf(pat, sizeof pat, "{\"operator\": \"%s\"", op);
  const char *inspect[] = {weir, "inspect", ids, "--state-dir", state, "--json", NULL};
  rc = th_run(inspect, NULL, &out, &err, 60);
  if (rc != 0) {
    fprintf(stderr, "weir inspect %s: exit %d: %s\n", ids, rc, err ? err : "");
    free(out);
    free(err);
    return -1;
  }
  for (const char *p = strstr(out, pat); p; p = strstr(p + 1, pat)) {
    const char *q = strstr(p, "\"operator_state\": ");
    unsigned long long n = 0;
    if (!q || sscanf(q, "\"operator_state\": %llu", &n) != 1) {
      fprintf(stderr, "weir inspect %s: no operator_state after '%s'\n", ids, pat);
      rc = -1;
      break;
    }
    *bytes += n;
    ++*subtasks;
  }
  free(out);
  free(err);
  return rc;
}

/* ---- th_seq: records 0 .. n-1 ------------------------------------------------- */

static int seq_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(uint64_t)));
  return 0;
}
static int seq_run(weir_ctx *ctx, uint32_t budget) {
  const th_seq *s = weir_ctx_arg(ctx);
  uint64_t *next = weir_ctx_user(ctx);
  uint64_t rate = s->rate ? *s->rate : 0;
  uint32_t burst = s->burst ? s->burst : 50;
  if (weir_ctx_stopping(ctx)) return WEIR_SOURCE_DONE;
  if (rate && budget > burst) budget = burst;
  for (uint32_t b = 0; b < budget && *next < s->n; b++, ++*next) {
    int rc = s->emit(ctx, *next, s->user);
    if (rc) return rc;
  }
  if (*next >= s->n) return WEIR_SOURCE_DONE;
  if (rate) {
    weir_ctx_wake_after(ctx, burst * 1000000ull / rate);
    return WEIR_SOURCE_IDLE;
  }
  return WEIR_SOURCE_MORE;
}
static int seq_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  return weir_snapshot_position(w, 0, *(uint64_t *)weir_ctx_user(ctx));
}
static int seq_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  uint64_t off = 0;
  if (weir_snapshot_get_position(r, 0, &off)) *(uint64_t *)weir_ctx_user(ctx) = off;
  return 0;
}
static void seq_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}
const weir_source_vt th_seq_vt = {.size = sizeof(weir_source_vt),
                                  .name = "seq",
                                  .open = seq_open,
                                  .run = seq_run,
                                  .close = seq_close,
                                  .snapshot = seq_snapshot,
                                  .restore = seq_restore,
                                  .rescalable = 1};

weir_run_opts th_event_run_opts(const char *state, int restore) {
  weir_run_opts o = {.workers = 2, .buffer_timeout_us = 200};
  if (state) {
    o.state_dir = state;
    o.checkpoint_interval_ms = 10;
    if (restore) o.restore = WEIR_RESTORE_LATEST;
  }
  return o;
}
