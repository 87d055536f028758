/* lease.c: owns the job lease of a state directory (weir/lease.h): the
 * files under <dir>/lease, acquisition and takeover, the heartbeat thread,
 * the fence check that every checkpoint commit runs, and release.
 *
 * DESIGN
 * No lock of any kind is held across processes, so a process that is
 * stopped (SIGSTOP, a debugger, a VM pause) at any instruction can never make
 * another one wait: every step is a single atomic file-system operation.
 *
 *   <dir>/lease/epoch.<N>  the claim of epoch N: owner id (host, boot id, pid,
 *                          process start time, nonce), lease_ms and the
 *                          monotonic time of the claim. Written to a private
 *                          temporary file, fsynced, then link()ed to its name:
 *                          link fails with EEXIST if the name exists, so
 *                          exactly one process gets each epoch, and nobody
 *                          ever sees a half-written claim. Never changed.
 *   <dir>/lease/hb.<N>     the heartbeat of epoch N, written only by N's
 *                          owner (temporary file + rename): a sequence number,
 *                          the monotonic time of the renewal, lease_ms, the
 *                          wall-clock expiry (for humans), and `released`.
 *
 * The current epoch is the highest N with an epoch file. The owner of N is
 * fenced as soon as epoch.<N+1> exists (or its own epoch file is gone: old
 * claims are deleted in ascending order, so N+1 never disappears before N).
 *
 * Acquisition (weir_lease_acquire), with N the current epoch:
 *   no epoch yet                              -> claim 1            (FIRST)
 *   hb.N says released                        -> claim N+1 at once  (RELEASED)
 *   owner on this host and boot, process gone -> claim N+1 at once  (GONE)
 *     (pid not alive, a zombie, or alive with another start time)
 *   owner on this host, another boot          -> claim N+1 at once  (GONE)
 *   owner alive on this host and boot         -> WEIR_EOWNED, or with --wait
 *     sleep until hb.mono + lease_ms (CLOCK_MONOTONIC is one clock for every
 *     process of one boot) and look again            -> claim N+1 (EXPIRED)
 *   owner on another host, or no boot id      -> WEIR_EOWNED, or with --wait
 *     watch hb.N: when its sequence number has not changed for lease_ms on
 *     this process's own monotonic clock                -> claim N+1 (EXPIRED)
 * A claim that fails with EEXIST lost a race to another successor: look
 * again (its owner is alive now, so that is WEIR_EOWNED or a wait).
 *
 * Renewal (weir_lease_renew, every lease_ms / 3 on the heartbeat thread):
 * t0 = now; refuse if t0 >= valid_until - margin (too late: self-fenced) or
 * if taken over; write hb.N with mono t0; t1 = now. The renewal counts
 * (valid_until = t0 + lease_ms) only if t1 - t0 < margin.
 *
 * Invariants
 *  I1 Epochs only grow and are never reused: each is claimed by one link()
 *     of an fsynced file, and the claim is fsynced into the directory before
 *     the owner does anything else.
 *  I2 The owner's own view of its lease, valid_until, is never later than
 *     what any successor computes from hb.N: both come from the same t0.
 *     A successor that reads hb.N at time r >= old valid_until sees every
 *     renewal that counts, because a counted renewal started before
 *     old valid_until - margin and finished within margin, so before r.
 *  I3 Self-fencing: weir_lease_check refuses from valid_until - margin on,
 *     so an owner that cannot renew stops committing before a successor
 *     (same boot: at hb.mono + lease_ms; other host: after lease_ms without a
 *     change, measured by itself) can take over. The margin (lease_ms / 4)
 *     also covers clock-rate differences between hosts.
 *  I4 Wall-clock time decides nothing (it is written for humans only), so a
 *     wall-clock jump cannot make two owners live; a reboot changes the boot
 *     id, and every process of the old boot is gone.
 *  I5 Every write transaction checks weir_lease_check right after it
 *     begins, and a commit checks again once durable; a stale owner that
 *     was paused past its expiry fails one of them and reports the
 *     checkpoint as not completed, so no effect follows it. Where the old
 *     owner may still be alive (EXPIRED), the successor also leaves it its
 *     LMDB environment (snapshot/handover.c): what the stale owner's one
 *     in-flight transaction commits lands nowhere anyone reads, and LMDB's
 *     writer lock, which a stopped process keeps, is never needed again.
 *     (A commit that passed its check before the takeover and lands before
 *     the successor's copy is copied: it is a whole checkpoint, committed
 *     by the owner of its epoch, and that owner reports it as not
 *     completed. The successor may restore it; nothing was made visible
 *     for it.)
 *  I6 After GONE or RELEASED, nobody of the old epoch can write any more, so
 *     the successor keeps the environment: no copy on the common paths
 *     (restart after a crash, after a stop, after the end of the input).
 *
 * Assumptions: the file system has hard links (every local POSIX one does);
 * processes that share a state directory and a host name also share a pid
 * namespace (otherwise a live owner in another container looks gone);
 * lease_ms is longer than the longest stall of the heartbeat thread (a
 * starved or swapped-out process self-fences, which is safe but stops it).
 * Effects outside the store are fenced by their sinks: weir_ctx_epoch and
 * weir_ctx_owner_check (weir/job.h) expose this lease to them.
 */
#include "snapshot/lease.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"

typedef unsigned long long ull;

#define NS_PER_MS 1000000ull
#define KEEP_EPOCHS 16u /* older claims are deleted */
#define POLL_MAX_MS 50u /* a waiting successor looks again at least this often */
#define FILE_MAX 2048

struct weir_lease {
  char *dir;       /* <state dir>/lease */
  char *own_path;  /* epoch.<N> */
  char *next_path; /* epoch.<N+1> */
  char *hb_path, *hb_tmp;
  uint64_t epoch;
  uint32_t lease_ms;
  uint64_t margin_ns;
  weir_lease_owner self, prev;
  weir_lease_takeover how;
  weir_lease_clock clock;
  void (*lost_fn)(void *user, int err, const char *msg);
  void *lost_user;

  _Atomic uint64_t valid_until; /* monotonic ns: this owner's own view of its expiry */
  atomic_int lost;              /* set once: the lease is lost for good */

  pthread_mutex_t mu; /* guards err, seq and hb writes */
  char err[512];
  uint64_t seq;

  pthread_t thread; /* the heartbeat */
  int running;
  int wake[2]; /* a byte on wake[1] stops the heartbeat */
};

/* ---- clocks ---------------------------------------------------------------- */

static uint64_t sys_now(void *user) {
  (void)user;
  return weir_clock_mono_ns();
}

static void sys_sleep(void *user, uint64_t ns) {
  (void)user;
  weir_sleep_us(ns / 1000u);
}

static const weir_lease_clock sys_clock = {sys_now, sys_sleep, NULL};

static uint64_t now_ns(const weir_lease *l) {
  return l->clock.now_ns(l->clock.user);
}

/* ---- small file helpers ---------------------------------------------------- */

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = weir_malloc(n);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

static char *epoch_path(const char *dir, const char *what, uint64_t n) {
  char name[64];
  snprintf(name, sizeof name, "%s.%llu", what, (ull)n);
  return join(dir, name);
}

/* mkdir -p: the state directory may not exist yet (the store used to
 * create it; the lease comes first now). */
static int mkdir_p(const char *path) {
  char *p = weir_strdup(path);
  int rc = 0;
  for (char *q = p + 1;; q++) {
    if (*q != '/' && *q != '\0') continue;
    char c = *q;
    *q = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      rc = -errno;
      break;
    }
    *q = c;
    if (c == '\0') break;
  }
  weir_free(p);
  return rc;
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int rc = fsync(fd) == 0 ? 0 : -errno;
  close(fd);
  return rc == -EINVAL ? 0 : rc; /* some file systems cannot sync directories */
}

/* Writes `len` bytes to a new file `path` (truncating), optionally fsynced. */
static int write_file(const char *path, const char *data, size_t len, int sync) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  size_t off = 0;
  while (off < len) {
    ssize_t n = write(fd, data + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    off += (size_t)n;
  }
  if (sync && fsync(fd) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  if (close(fd) != 0) return -errno;
  return 0;
}

/* Reads a small file into buf (NUL-terminated). */
static int read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t off = 0;
  for (;;) {
    ssize_t n = read(fd, buf + off, cap - 1 - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    if (n == 0) break;
    off += (size_t)n;
    if (off == cap - 1) break;
  }
  close(fd);
  buf[off] = '\0';
  return 0;
}

/* The value of "key value" line `key` in text, copied into out. */
static int field(const char *text, const char *key, char *out, size_t cap) {
  size_t k = strlen(key);
  for (const char *p = text; p && *p;) {
    const char *eol = strchr(p, '\n');
    size_t n = eol ? (size_t)(eol - p) : strlen(p);
    if (n > k && strncmp(p, key, k) == 0 && p[k] == ' ') {
      size_t v = n - k - 1;
      if (v >= cap) v = cap - 1;
      memcpy(out, p + k + 1, v);
      out[v] = '\0';
      return 1;
    }
    p = eol ? eol + 1 : NULL;
  }
  return 0;
}

static int field_u64(const char *text, const char *key, uint64_t *out) {
  char v[32], *end;
  if (!field(text, key, v, sizeof v) || v[0] < '0' || v[0] > '9') return 0;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end) return 0;
  *out = x;
  return 1;
}

static int field_i64(const char *text, const char *key, int64_t *out) {
  char v[32], *end;
  if (!field(text, key, v, sizeof v)) return 0;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || end == v) return 0;
  *out = x;
  return 1;
}

/* ---- who we are -------------------------------------------------------------- */

/* 1 and *start / *zombie if process pid exists, 0 if it does not, -1 if this
 * OS cannot tell (then kill(pid, 0) decides existence and start is 0). */
static int proc_info(int64_t pid, uint64_t *start, int *zombie) {
  *start = 0;
  *zombie = 0;
  if (pid <= 0 || (int64_t)(pid_t)pid != pid) return 0;
#if defined(__linux__)
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  int rc = read_file(path, buf, sizeof buf);
  if (rc == -ENOENT || rc == -ESRCH) {
    struct stat st;
    if (stat("/proc/self/stat", &st) == 0) return 0; /* /proc works: the process is gone */
  } else if (rc == 0) {
    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses; the
     * state is the first field after the last ')', starttime the 20th. */
    char *p = strrchr(buf, ')');
    if (p) {
      p++;
      char state = 0;
      unsigned long long st = 0;
      int i = 0;
      for (char *tok = strtok(p, " "); tok; tok = strtok(NULL, " "), i++) {
        if (i == 0) state = tok[0];
        if (i == 19) {
          st = strtoull(tok, NULL, 10);
          break;
        }
      }
      if (i == 19) {
        *start = st;
        *zombie = state == 'Z' || state == 'X';
        return 1;
      }
    }
  }
#elif defined(__APPLE__)
  int mib[4] = {CTL_KERN, KERN_PROC, KERN_PROC_PID, (int)pid};
  struct kinfo_proc kp;
  size_t len = sizeof kp;
  memset(&kp, 0, sizeof kp);
  if (sysctl(mib, 4, &kp, &len, NULL, 0) == 0) {
    if (len == 0) return 0;
    *start = (uint64_t)kp.kp_proc.p_starttime.tv_sec * 1000000u +
             (uint64_t)kp.kp_proc.p_starttime.tv_usec;
    *zombie = kp.kp_proc.p_stat == SZOMB;
    return 1;
  }
#endif
  if (kill((pid_t)pid, 0) == 0 || errno == EPERM) return -1;
  return 0;
}

static void boot_id(char *out, size_t cap) {
  out[0] = '\0';
#if defined(__linux__)
  char buf[128];
  if (read_file("/proc/sys/kernel/random/boot_id", buf, sizeof buf) == 0 && cap > 0) {
    size_t n = strcspn(buf, " \r\n");
    if (n >= cap) n = cap - 1; /* a boot id is 36 characters */
    memcpy(out, buf, n);
    out[n] = '\0';
  }
#elif defined(__APPLE__)
  char buf[128];
  size_t len = sizeof buf;
  if (sysctlbyname("kern.bootsessionuuid", buf, &len, NULL, 0) == 0 && len > 0) {
    buf[len < sizeof buf ? len : sizeof buf - 1] = '\0';
    snprintf(out, cap, "%s", buf);
  }
#endif
  /* Elsewhere: no boot id. Owners are then judged by expiry alone. */
  for (char *p = out; *p; p++)
    if (*p == ' ' || *p == '\n') *p = '_';
}

int weir_lease_self(weir_lease_owner *out) {
  memset(out, 0, sizeof *out);
  if (gethostname(out->host, sizeof out->host - 1) != 0) snprintf(out->host, sizeof out->host, "?");
  for (char *p = out->host; *p; p++)
    if (*p == ' ' || *p == '\n') *p = '_';
  boot_id(out->boot, sizeof out->boot);
  out->pid = (int64_t)getpid();
  int zombie;
  if (proc_info(out->pid, &out->start, &zombie) < 0) out->start = 0;
  return 0;
}

int weir_lease_owner_alive(const weir_lease_owner *o) {
  weir_lease_owner me;
  weir_lease_self(&me);
  if (strcmp(o->host, me.host) != 0) return -1;
  if (o->boot[0] == '\0' || me.boot[0] == '\0') return -1;
  if (strcmp(o->boot, me.boot) != 0) return 0; /* rebooted since: every process of then is gone */
  uint64_t start;
  int zombie;
  int r = proc_info(o->pid, &start, &zombie);
  if (r == 0) return 0;
  if (r < 0) return 1; /* exists; pid reuse cannot be told apart here */
  if (zombie) return 0;
  if (o->start != 0 && start != o->start) return 0; /* the pid was reused */
  return 1;
}

static int random_hex(char *out, size_t bytes) {
  uint8_t b[32];
  if (bytes > sizeof b) bytes = sizeof b;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  if (fd >= 0) {
    while (got < bytes) {
      ssize_t n = read(fd, b + got, bytes - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += (size_t)n;
    }
    close(fd);
  }
  if (got < bytes) return fd < 0 ? -errno : WEIR_EIO;
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < bytes; i++) {
    out[2 * i] = hex[b[i] >> 4];
    out[2 * i + 1] = hex[b[i] & 15];
  }
  out[2 * bytes] = '\0';
  return 0;
}

/* ---- the files ------------------------------------------------------------------ */

typedef struct claim_rec {
  weir_lease_owner owner;
  uint32_t lease_ms;
  uint64_t mono_ns;
} claim_rec;

typedef struct hb_rec {
  uint64_t seq, mono_ns;
  uint32_t lease_ms;
  int released;
} hb_rec;

static int parse_claim(const char *text, claim_rec *c) {
  memset(c, 0, sizeof *c);
  uint64_t lease_ms, start;
  if (strncmp(text, "weir-lease 1\n", 13) != 0) return WEIR_ECORRUPT;
  if (!field(text, "host", c->owner.host, sizeof c->owner.host) ||
      !field_i64(text, "pid", &c->owner.pid) || !field_u64(text, "start", &start) ||
      !field_u64(text, "lease_ms", &lease_ms) || !field_u64(text, "mono_ns", &c->mono_ns) ||
      !field(text, "nonce", c->owner.nonce, sizeof c->owner.nonce))
    return WEIR_ECORRUPT;
  if (!field(text, "boot", c->owner.boot, sizeof c->owner.boot)) c->owner.boot[0] = '\0';
  if (strcmp(c->owner.boot, "-") == 0) c->owner.boot[0] = '\0';
  c->owner.start = start;
  c->lease_ms = (uint32_t)lease_ms;
  return 0;
}

static int read_claim(const char *dir, uint64_t n, claim_rec *c) {
  char buf[FILE_MAX];
  char *p = epoch_path(dir, "epoch", n);
  int rc = read_file(p, buf, sizeof buf);
  weir_free(p);
  if (rc < 0) return rc;
  return parse_claim(buf, c);
}

/* hb.<n>; without one (its owner died between claim and first heartbeat),
 * the claim itself is the first heartbeat. */
static int read_hb(const char *dir, uint64_t n, const claim_rec *c, hb_rec *h) {
  char buf[FILE_MAX];
  char *p = epoch_path(dir, "hb", n);
  int rc = read_file(p, buf, sizeof buf);
  weir_free(p);
  memset(h, 0, sizeof *h);
  if (rc == -ENOENT) {
    h->mono_ns = c->mono_ns;
    h->lease_ms = c->lease_ms;
    return 0;
  }
  if (rc < 0) return rc;
  uint64_t lease_ms, rel;
  if (strncmp(buf, "weir-heartbeat 1\n", 17) != 0 || !field_u64(buf, "seq", &h->seq) ||
      !field_u64(buf, "mono_ns", &h->mono_ns) || !field_u64(buf, "lease_ms", &lease_ms) ||
      !field_u64(buf, "released", &rel))
    return WEIR_ECORRUPT;
  h->lease_ms = (uint32_t)lease_ms;
  h->released = rel != 0;
  return 0;
}

/* The current epoch: the highest N with an epoch file (0: none). With
 * `old`, also collects epochs below `below` for cleanup. */
static int max_epoch(const char *dir, uint64_t *out, uint64_t **old, size_t *nold, uint64_t below) {
  *out = 0;
  DIR *d = opendir(dir);
  if (!d) return -errno;
  size_t cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *s = e->d_name;
    if (strncmp(s, "epoch.", 6) != 0 || s[6] < '0' || s[6] > '9') continue;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s + 6, &end, 10);
    if (errno || *end) continue; /* temporary files have a suffix */
    if (n > *out) *out = n;
    if (old && n < below) {
      if (*nold == cap) {
        cap = cap ? cap * 2 : 16;
        *old = weir_realloc(*old, cap * sizeof **old);
      }
      (*old)[(*nold)++] = n;
    }
  }
  closedir(d);
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Deletes claims (and heartbeats) older than KEEP_EPOCHS before `epoch`, in
 * ascending order: the fence check relies on epoch N going before N+1. */
static void cleanup(const char *dir, uint64_t epoch) {
  if (epoch <= KEEP_EPOCHS) return;
  uint64_t top, *old = NULL;
  size_t n = 0;
  if (max_epoch(dir, &top, &old, &n, epoch - KEEP_EPOCHS) == 0 && n > 0) {
    qsort(old, n, sizeof *old, cmp_u64);
    for (size_t i = 0; i < n; i++) {
      char *p = epoch_path(dir, "epoch", old[i]);
      unlink(p);
      weir_free(p);
      p = epoch_path(dir, "hb", old[i]);
      unlink(p);
      weir_free(p);
    }
  }
  weir_free(old);
}

static void owner_text(const weir_lease_owner *o, char *buf, size_t cap) {
  snprintf(buf, cap, "pid %lld on host %s (boot %s, started %llu, nonce %.8s)", (long long)o->pid,
           o->host, o->boot[0] ? o->boot : "unknown", (ull)o->start, o->nonce);
}

/* ---- the lease object ------------------------------------------------------------ */

static int set_err(weir_lease *l, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_err(weir_lease *l, int rc, const char *fmt, ...) {
  char buf[sizeof l->err];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&l->mu);
  memcpy(l->err, buf, sizeof buf);
  pthread_mutex_unlock(&l->mu);
  return rc;
}

const char *weir_lease_error(weir_lease *l, char *buf, size_t len) {
  if (!buf || !len) return "";
  if (!l) {
    snprintf(buf, len, "no lease");
    return buf;
  }
  pthread_mutex_lock(&l->mu);
  snprintf(buf, len, "%s", l->err);
  pthread_mutex_unlock(&l->mu);
  return buf;
}

static void lease_free(weir_lease *l) {
  if (!l) return;
  pthread_mutex_destroy(&l->mu);
  weir_free(l->dir);
  weir_free(l->own_path);
  weir_free(l->next_path);
  weir_free(l->hb_path);
  weir_free(l->hb_tmp);
  weir_free(l);
}

/* Marks the lease lost (once) with a message, and tells the owner. The
 * message is in place before the mark can be seen: a thread that finds the
 * lease lost (weir_lease_check's first test) and asks why must get the
 * reason, and only the thread that marked it tells, so an owner that exits
 * at once never says nothing of why. (The mark used to come first: a
 * concurrent check could return WEIR_EFENCED with weir_lease_error still
 * empty; tests/stress_lease caught it.) */
static int lose(weir_lease *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lose(weir_lease *l, const char *fmt, ...) {
  char buf[sizeof l->err];
  pthread_mutex_lock(&l->mu);
  int first = !atomic_load(&l->lost);
  if (first) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err, sizeof l->err, fmt, ap);
    va_end(ap);
    memcpy(buf, l->err, sizeof buf);
    atomic_store(&l->lost, 1);
  }
  pthread_mutex_unlock(&l->mu);
  if (first) {
    WEIR_LOG_W("%s", buf);
    if (l->lost_fn) l->lost_fn(l->lost_user, WEIR_EFENCED, buf);
  }
  return WEIR_EFENCED;
}

/* Taken over? 1 (and lost) if epoch N+1 exists or our claim is gone. */
static int taken_over(weir_lease *l) {
  struct stat st;
  if (stat(l->next_path, &st) == 0) {
    claim_rec c;
    char who[300] = "an unknown owner";
    if (read_claim(l->dir, l->epoch + 1, &c) == 0) owner_text(&c.owner, who, sizeof who);
    lose(l, "lost ownership of the state directory: epoch %llu was taken over by epoch %llu (%s)",
         (ull)l->epoch, (ull)l->epoch + 1, who);
    return 1;
  }
  if (stat(l->own_path, &st) != 0 && errno == ENOENT) {
    lose(l, "lost ownership of the state directory: the claim of epoch %llu is gone (%s)",
         (ull)l->epoch, l->own_path);
    return 1;
  }
  return 0;
}

int weir_lease_check(weir_lease *l) {
  if (!l) return 0;
  if (atomic_load(&l->lost)) return WEIR_EFENCED;
  uint64_t t = now_ns(l);
  uint64_t until = atomic_load(&l->valid_until);
  if (t + l->margin_ns >= until && !taken_over(l)) /* (a takeover is the better message) */
    return lose(l,
                "lost ownership of the state directory: epoch %llu could not renew its lease in "
                "time (%u ms lease; the last renewal was %llu ms ago): stopping before another "
                "owner may take over",
                (ull)l->epoch, l->lease_ms,
                (ull)((t - (until - (uint64_t)l->lease_ms * NS_PER_MS)) / NS_PER_MS));
  if (taken_over(l)) return WEIR_EFENCED;
  return 0;
}

/* Writes hb.N (temporary file + rename: a reader sees the old or the new). */
static int write_hb(weir_lease *l, uint64_t mono, int released) {
  char buf[512];
  int64_t wall_exp = weir_clock_wall_ms() + (int64_t)l->lease_ms;
  int n =
      snprintf(buf, sizeof buf,
               "weir-heartbeat 1\nepoch %llu\nseq %llu\nmono_ns %llu\nlease_ms %u\n"
               "wall_expiry_ms %lld\nreleased %d\n",
               (ull)l->epoch, (ull)l->seq, (ull)mono, l->lease_ms, (long long)wall_exp, released);
  int rc = write_file(l->hb_tmp, buf, (size_t)n, 0);
  if (rc == 0 && rename(l->hb_tmp, l->hb_path) != 0) rc = -errno;
  return rc;
}

int weir_lease_renew(weir_lease *l) {
  if (atomic_load(&l->lost)) return WEIR_EFENCED;
  uint64_t t0 = now_ns(l);
  if (t0 + l->margin_ns >= atomic_load(&l->valid_until)) return weir_lease_check(l);
  if (taken_over(l)) return WEIR_EFENCED;
  pthread_mutex_lock(&l->mu);
  l->seq++;
  int rc = write_hb(l, t0, 0);
  pthread_mutex_unlock(&l->mu);
  uint64_t t1 = now_ns(l);
  if (rc < 0) {
    /* Not fatal yet: the next beat tries again, and the check self-fences
     * if none succeeds in time. */
    WEIR_LOG_W("lease %s: renewing epoch %llu failed: %s", l->dir, (ull)l->epoch,
               weir_strerror(rc));
    return 0;
  }
  if (t1 - t0 >= l->margin_ns) {
    /* I2: a renewal that took longer than the margin may have become
     * visible after a successor judged the lease expired: it does not
     * count. */
    WEIR_LOG_W("lease %s: renewing epoch %llu took %llu ms (margin %llu ms): not counted", l->dir,
               (ull)l->epoch, (ull)((t1 - t0) / NS_PER_MS), (ull)(l->margin_ns / NS_PER_MS));
    return 0;
  }
  atomic_store(&l->valid_until, t0 + (uint64_t)l->lease_ms * NS_PER_MS);
  return 0;
}

/* Claims epoch n: 0, -EEXIST (lost a race), or an error (message set). */
static int claim(weir_lease *l, uint64_t n) {
  char buf[1024], tmpname[128];
  uint64_t t = now_ns(l);
  const weir_lease_owner *o = &l->self;
  int len = snprintf(buf, sizeof buf,
                     "weir-lease 1\nepoch %llu\nhost %s\nboot %s\npid %lld\nstart %llu\n"
                     "nonce %s\nlease_ms %u\nmono_ns %llu\nwall_ms %lld\n",
                     (ull)n, o->host, o->boot[0] ? o->boot : "-", (long long)o->pid, (ull)o->start,
                     o->nonce, l->lease_ms, (ull)t, (long long)weir_clock_wall_ms());
  snprintf(tmpname, sizeof tmpname, ".claim.%llu.%s.tmp", (ull)n, o->nonce);
  char *tmp = join(l->dir, tmpname);
  char *dst = epoch_path(l->dir, "epoch", n);
  int rc = write_file(tmp, buf, (size_t)len, 1);
  if (rc == 0 && link(tmp, dst) != 0) rc = -errno;
  unlink(tmp);
  weir_free(tmp);
  weir_free(dst);
  if (rc == -EEXIST) return rc;
  if (rc == 0) rc = fsync_dir(l->dir); /* I1: the epoch is durable before it is used */
  if (rc < 0)
    return set_err(l, rc, "lease %s: claiming epoch %llu: %s", l->dir, (ull)n, weir_strerror(rc));
  l->epoch = n;
  l->own_path = epoch_path(l->dir, "epoch", n);
  l->next_path = epoch_path(l->dir, "epoch", n + 1);
  l->hb_path = epoch_path(l->dir, "hb", n);
  snprintf(tmpname, sizeof tmpname, ".hb.%llu.tmp", (ull)n);
  l->hb_tmp = join(l->dir, tmpname);
  atomic_store(&l->valid_until, t + (uint64_t)l->lease_ms * NS_PER_MS);
  /* The claim was fsynced, which may have taken a good part of the lease:
   * renew at once, under the rules of a renewal (I2). If the heartbeat
   * cannot be written, the claim is the first heartbeat. */
  uint64_t t0 = now_ns(l);
  l->seq = 1;
  if (write_hb(l, t0, 0) == 0 && now_ns(l) - t0 < l->margin_ns)
    atomic_store(&l->valid_until, t0 + (uint64_t)l->lease_ms * NS_PER_MS);
  cleanup(l->dir, n);
  return 0;
}

int weir_lease_acquire(weir_lease **out, const char *dir, const weir_lease_opts *opts, char *err,
                       size_t errlen) {
  if (out) *out = NULL;
  if (err && errlen) err[0] = '\0';
  if (!out || !dir || !dir[0]) return WEIR_EINVAL;
  weir_lease_opts o = {0};
  if (opts) o = *opts;
  weir_lease *l = weir_calloc(1, sizeof *l);
  pthread_mutex_init(&l->mu, NULL);
  l->wake[0] = l->wake[1] = -1;
  l->dir = join(dir, "lease");
  l->lease_ms = o.lease_ms ? o.lease_ms : WEIR_LEASE_DEFAULT_MS;
  if (l->lease_ms < 30) l->lease_ms = 30;
  l->margin_ns = (uint64_t)l->lease_ms * NS_PER_MS / 4;
  l->clock = o.clock ? *o.clock : sys_clock;
  l->lost_fn = o.lost;
  l->lost_user = o.lost_user;
  if (o.as)
    l->self = *o.as;
  else
    weir_lease_self(&l->self);
  int rc;
  if ((rc = random_hex(l->self.nonce, 8)) < 0) {
    set_err(l, rc, "lease %s: no random nonce: %s", l->dir, weir_strerror(rc));
    goto fail;
  }
  if ((rc = mkdir_p(l->dir)) < 0) {
    set_err(l, rc, "lease %s: cannot create the directory: %s", l->dir, weir_strerror(rc));
    goto fail;
  }

  /* Watching an owner whose liveness cannot be told: what we saw, since when. */
  uint64_t seen_epoch = 0, seen_seq = 0, seen_since = 0;
  int waited = 0;
  for (;;) {
    uint64_t n;
    if ((rc = max_epoch(l->dir, &n, NULL, NULL, 0)) < 0) {
      set_err(l, rc, "lease %s: %s", l->dir, weir_strerror(rc));
      goto fail;
    }
    if (n == 0) {
      rc = claim(l, o.min_epoch > 1 ? o.min_epoch : 1);
      if (rc == -EEXIST) continue;
      if (rc < 0) goto fail;
      l->how = WEIR_LEASE_FIRST;
      break;
    }
    claim_rec c;
    hb_rec h;
    rc = read_claim(l->dir, n, &c);
    if (rc == -ENOENT) continue; /* cleaned up under us: look again */
    if (rc == 0) rc = read_hb(l->dir, n, &c, &h);
    if (rc < 0) {
      set_err(l, rc,
              "lease %s: epoch %llu cannot be read (%s); if no weir runs on this state "
              "directory, remove %s",
              l->dir, (ull)n, weir_strerror(rc), l->dir);
      goto fail;
    }
    uint64_t t = now_ns(l);
    uint32_t lms = h.lease_ms ? h.lease_ms : c.lease_ms;
    weir_lease_takeover how;
    int alive = -1;
    if (h.released) {
      how = WEIR_LEASE_RELEASED;
    } else {
      alive = o.alive ? o.alive(o.alive_user, &c.owner) : weir_lease_owner_alive(&c.owner);
      if (alive == 0) {
        how = WEIR_LEASE_GONE;
      } else {
        how = WEIR_LEASE_EXPIRED;
        int same_boot = alive > 0 && strcmp(c.owner.host, l->self.host) == 0 && c.owner.boot[0] &&
                        strcmp(c.owner.boot, l->self.boot) == 0;
        uint64_t left;
        if (same_boot) {
          /* One monotonic clock for every process of this boot. */
          uint64_t exp = h.mono_ns + (uint64_t)lms * NS_PER_MS;
          left = t >= exp ? 0 : exp - t;
        } else {
          /* Another host: expired when its heartbeat has not changed for a
           * whole lease, on our own clock. */
          if (seen_epoch != n || seen_seq != h.seq || !seen_since) {
            seen_epoch = n;
            seen_seq = h.seq;
            seen_since = t;
          }
          uint64_t waited_ns = t - seen_since, full = (uint64_t)lms * NS_PER_MS;
          left = waited_ns >= full ? 0 : full - waited_ns;
          if (!o.wait) left = full; /* cannot tell without watching */
        }
        if (left > 0) {
          if (!o.wait) {
            char who[300];
            owner_text(&c.owner, who, sizeof who);
            if (same_boot)
              rc = set_err(l, WEIR_EOWNED,
                           "the state directory '%s' is held by a live owner: epoch %llu, %s; its "
                           "lease (%u ms) was renewed %llu ms ago; use --wait to take over when "
                           "it expires",
                           dir, (ull)n, who, lms,
                           (ull)(t > h.mono_ns ? (t - h.mono_ns) / NS_PER_MS : 0));
            else
              rc = set_err(l, WEIR_EOWNED,
                           "the state directory '%s' is held by epoch %llu, %s, which may be "
                           "alive (another host or boot); use --wait to take over when its "
                           "lease (%u ms) expires",
                           dir, (ull)n, who, lms);
            goto fail;
          }
          if (!waited) {
            char who[300];
            owner_text(&c.owner, who, sizeof who);
            WEIR_LOG_I("lease %s: epoch %llu is held by %s: waiting for it to expire", l->dir,
                       (ull)n, who);
            waited = 1;
          }
          uint64_t nap = left < POLL_MAX_MS * NS_PER_MS ? left : POLL_MAX_MS * NS_PER_MS;
          l->clock.sleep_ns(l->clock.user, nap);
          continue;
        }
      }
    }
    rc = claim(l, n + 1);
    if (rc == -EEXIST) continue; /* another successor won: look at it */
    if (rc < 0) goto fail;
    l->how = how;
    l->prev = c.owner;
    break;
  }
  *out = l;
  return 0;
fail:
  if (err && errlen) weir_lease_error(l, err, errlen);
  lease_free(l);
  return rc;
}

/* ---- the heartbeat ------------------------------------------------------------------ */

static void *heartbeat_main(void *arg) {
  weir_lease *l = arg;
  uint64_t beat = (uint64_t)l->lease_ms * NS_PER_MS / 3;
  weir_fork_hold(); /* everything but the wait: see weir/alloc.h */
  for (;;) {
    uint64_t t = now_ns(l), until = atomic_load(&l->valid_until);
    /* Wake for the next beat; when the self-fencing point is nearer (the
     * last renewals failed or did not count), try again halfway to it, so
     * that the lease is renewed before it and a loss is noticed at it. */
    uint64_t fence_at = until > l->margin_ns ? until - l->margin_ns : 0;
    uint64_t wait = beat;
    if (fence_at > t && fence_at - t < 2 * wait) wait = (fence_at - t) / 2;
    if (fence_at <= t) wait = 0;
    struct pollfd p = {.fd = l->wake[0], .events = POLLIN};
    int ms = (int)((wait + NS_PER_MS - 1) / NS_PER_MS);
    weir_fork_release();
    int r = poll(&p, 1, ms);
    weir_fork_hold();
    if (r > 0) break; /* asked to stop */
    if (r < 0 && errno != EINTR) break;
    if (weir_lease_renew(l) == WEIR_EFENCED) break;
  }
  weir_fork_release();
  return NULL;
}

int weir_lease_start(weir_lease *l) {
  if (!l || l->running) return WEIR_ESTATE;
  if (pipe(l->wake) != 0) return set_err(l, -errno, "lease: pipe: %s", strerror(errno));
  fcntl(l->wake[0], F_SETFD, FD_CLOEXEC);
  fcntl(l->wake[1], F_SETFD, FD_CLOEXEC);
  int rc = weir_thread_start(&l->thread, heartbeat_main, l); /* store opens fork */
  if (rc != 0) {
    close(l->wake[0]);
    close(l->wake[1]);
    l->wake[0] = l->wake[1] = -1;
    return set_err(l, -rc, "lease: starting the heartbeat thread: %s", strerror(rc));
  }
  l->running = 1;
  return 0;
}

void weir_lease_close(weir_lease *l, int release) {
  if (!l) return;
  if (l->running) {
    char b = 1;
    while (write(l->wake[1], &b, 1) < 0 && errno == EINTR) {
    }
    pthread_join(l->thread, NULL);
    l->running = 0;
  }
  if (l->wake[0] >= 0) close(l->wake[0]);
  if (l->wake[1] >= 0) close(l->wake[1]);
  if (release) {
    /* Still ours? Then say so: a successor starts at once. (If one claims
     * N+1 right now, this heartbeat is simply never read again.) */
    struct stat st;
    if (l->epoch && stat(l->next_path, &st) != 0 && stat(l->own_path, &st) == 0) {
      pthread_mutex_lock(&l->mu);
      l->seq++;
      int rc = write_hb(l, now_ns(l), 1);
      pthread_mutex_unlock(&l->mu);
      if (rc < 0)
        WEIR_LOG_W("lease %s: releasing epoch %llu failed: %s", l->dir, (ull)l->epoch,
                   weir_strerror(rc));
    }
  }
  lease_free(l);
}

uint64_t weir_lease_epoch(const weir_lease *l) {
  return l ? l->epoch : 0;
}

weir_lease_takeover weir_lease_how(const weir_lease *l) {
  return l ? l->how : WEIR_LEASE_FIRST;
}

const weir_lease_owner *weir_lease_previous(const weir_lease *l) {
  return &l->prev;
}

int weir_lease_read(const char *dir, weir_lease_state *out) {
  memset(out, 0, sizeof *out);
  char *ld = join(dir, "lease");
  uint64_t n;
  int rc = max_epoch(ld, &n, NULL, NULL, 0);
  if (rc == -ENOENT || (rc == 0 && n == 0)) {
    weir_free(ld);
    return 0;
  }
  claim_rec c;
  hb_rec h;
  if (rc == 0) rc = read_claim(ld, n, &c);
  if (rc == 0) rc = read_hb(ld, n, &c, &h);
  weir_free(ld);
  if (rc < 0) return rc;
  out->epoch = n;
  out->owner = c.owner;
  out->lease_ms = h.lease_ms ? h.lease_ms : c.lease_ms;
  out->released = h.released;
  out->age_ms = -1;
  weir_lease_owner me;
  weir_lease_self(&me);
  if (strcmp(me.host, c.owner.host) == 0 && me.boot[0] && strcmp(me.boot, c.owner.boot) == 0) {
    uint64_t t = weir_clock_mono_ns();
    out->age_ms = t > h.mono_ns ? (int64_t)((t - h.mono_ns) / NS_PER_MS) : 0;
  }
  return 1;
}
