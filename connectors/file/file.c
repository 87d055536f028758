/* file.c: owns the transactional file destination (file:DIR), its
 * specification and arg: one part file per sink subtask and epoch, made
 * visible by renaming it into place when the epoch's checkpoint completes
 * (a destination of twophase.c).
 *
 * DESIGN. What a reader of DIR sees, for sink `name`, subtask s:
 *
 *   <name>-<s>-<n>.txt          committed: the records of epoch n (those
 *                               between barriers n' and n, n' the previous
 *                               checkpoint), whole and final. Reading every
 *                               committed part gives every record once.
 *   <name>-<s>-<n>.txt.pending  pre-committed at barrier n, fsynced, waiting
 *                               for checkpoint n to complete (or, after a
 *                               crash, for recovery to commit or remove it).
 *   <name>-<s>.<o>.inprogress   the epoch being written (no barrier yet) by
 *                               the run of owner epoch o (its lease's):
 *                               each owner writes its own (below).
 *   <name>-<s>.txt              a job without checkpoints: its one epoch (0),
 *                               committed at the end of input; while being
 *                               written it is <name>-<s>.txt.pending, which
 *                               a failed run leaves behind.
 *
 * Only *.txt files are output; a reader that lists them in numeric epoch
 * order per subtask reads each subtask's records in order.
 *
 * Steps: write appends lines to the in-progress file through a 1 MiB line
 * buffer (created by the first record of an epoch: an epoch without records
 * has no part). pre_commit(n) writes the buffer out, fsyncs the file, closes
 * it, renames it to its .pending name and fsyncs the directory, so the part
 * survives a crash of the machine before checkpoint n can complete (the one
 * blocking step on the task's thread: the checkpoint must not complete
 * before it). commit (on the sink's commit thread) renames .pending to .txt
 * and fsyncs the directory; if the .pending file is gone and the .txt is
 * there, the part was committed before (a crash between rename and the
 * report, or a recovery committing again): success. If neither is there,
 * the part is lost: a permanent error.
 *
 * Recovery from checkpoint r removes the in-progress file and every part of
 * an epoch after r, pending or committed (committed ones exist only after a
 * --restore of an older checkpoint: rewinding the job rewinds its output);
 * subtask 0 does the same for subtasks the job no longer has (restored with
 * a lower parallelism). A pending part of a subtask that is gone is
 * committed under its own name by the subtask that took it over.
 * A fresh start (no checkpoint restored) removes every part of the subtask:
 * a new run replaces the output of the previous one, and nothing of an
 * unfinished run was ever committed before its first checkpoint completed.
 * Every subtask creates DIR (and its parents) if missing and tolerates a
 * concurrent creator (EEXIST).
 *
 * Identity: "file:" and DIR as an absolute path, symbolic links of the part
 * that exists resolved, so that "out", "./out" and "/abs/out" are one
 * destination. Moving (--allow-sink-change, restoring a checkpoint taken
 * with another DIR): recovery acts on the old directory, where the
 * checkpoint's parts were pre-committed (file_move): its pending parts are
 * committed there and its parts after the checkpoint removed; the new
 * directory gets the epochs after the checkpoint (and loses its own parts
 * after it, as a restore does). Together the two hold every record once.
 * A pending part found in the new directory instead (DIR was copied or
 * moved there with its contents) is committed where it is.
 *
 * Stale owners (docs/leases.md §4): a run paused past its lease may go on
 * for a moment before it notices, while its successor writes into the same
 * directory. Each checks its ownership before it creates a part and before
 * a pre-commit, but a pause can fall between a check and the file
 * operation; so in-progress names carry the owner epoch (a stale owner
 * truncates and renames only its own), and a pre-commit publishes its part
 * by link(), which does not replace: if the pending name exists, or the
 * epoch's committed part, only a run that still owns the job goes on
 * (publish_part). What a stale owner can still leave is a .pending part of
 * an epoch its successor has not reached: the successor replaces it when it
 * pre-commits that epoch; if it never does (it ends first, or has no
 * records then), it stays, never committed: readers take .txt parts only,
 * and the next restore removes it.
 */
#include "connector.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"

#define FILE_BUF (1024u * 1024u)
#define SCHEME "file:"

/* The sink's arg: file:DIR. */
typedef struct file_arg {
  weir__sink_arg common;
  char *dir; /* the output directory */
} file_arg;

/* One subtask's parts. The commit thread reads only the immutable dir,
 * name and subtask (to name parts); everything else is the task thread's. */
typedef struct fdest {
  char *dir;
  char *old_dir; /* moved: where the recovered epochs were pre-committed (set
                    before any commit is queued; NULL: not moved) */
  char *name;
  uint32_t subtask, parallelism;
  int checkpointing;
  weir_format_fn fmt;
  int fd;           /* the open part, -1 if none */
  char *open_path;  /* its name: .inprogress, or .txt.pending without checkpoints */
  weir__linebuf lb; /* owned by the task thread */
  weir_ctx *ctx;    /* for the line buffer's errors (task thread) */
} fdest;

/* mkdir -p: creates dir and its missing parents. Returns 0 or -errno
 * (-ENOTDIR if a component exists and is not a directory). */
static int mkdir_p(const char *dir) {
  char *p = weir_strdup(dir);
  int rc = 0;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0') continue;
    char c = *s;
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      rc = -errno;
      break;
    }
    *s = c;
    if (c == '\0') break;
  }
  struct stat st;
  if (rc == 0 && (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))) rc = -ENOTDIR;
  weir_free(p);
  return rc;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -errno;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* fsync, or F_FULLFSYNC where fsync does not reach the disk (macOS). */
static int sync_fd(int fd) {
#ifdef F_FULLFSYNC
  if (fcntl(fd, F_FULLFSYNC) == 0) return 0;
#endif
  return fsync(fd) == 0 ? 0 : -errno;
}

/* Makes renames in dir durable. Some file systems refuse fsync on a
 * directory (EINVAL): nothing to do there. */
static int sync_dir(const char *dir) {
  int dfd = open(dir, O_RDONLY | O_CLOEXEC);
  if (dfd < 0) return -errno;
  int rc = sync_fd(dfd);
  close(dfd);
  return rc == -EINVAL ? 0 : rc;
}

/* <dir>/<name>-<s>-<epoch><suffix>, or <dir>/<name>-<s><suffix> for
 * epoch 0 (a job without checkpoints). */
static char *part_in(const fdest *f, const char *dir, uint32_t s, uint64_t epoch,
                     const char *suffix) {
  size_t n = strlen(dir) + strlen(f->name) + strlen(suffix) + 48;
  char *p = weir_malloc(n);
  if (epoch)
    snprintf(p, n, "%s/%s-%u-%llu%s", dir, f->name, (unsigned)s, (unsigned long long)epoch, suffix);
  else
    snprintf(p, n, "%s/%s-%u%s", dir, f->name, (unsigned)s, suffix);
  return p;
}

static char *part_path(const fdest *f, uint32_t s, uint64_t epoch, const char *suffix) {
  return part_in(f, f->dir, s, epoch, suffix);
}

static int lb_write(weir_ctx *ctx, void *sink, const char *p, size_t n) {
  fdest *f = sink;
  int rc = write_all(f->fd, p, n);
  if (rc < 0)
    return weir_ctx_fail(ctx, rc, "cannot write '%s': %s", f->open_path, weir_strerror(rc));
  return 0;
}

/* What a directory entry is to this sink: 1, with *sub and *epoch, for a
 * part (<name>-<s>-<n>.txt[.pending], or epoch 0 for <name>-<s>.txt[.pending]
 * and <name>-<s>.inprogress, with *committed), else 0. */
static int parse_part(const fdest *f, const char *e, uint32_t *sub, uint64_t *epoch,
                      int *committed) {
  size_t n = strlen(f->name);
  if (strncmp(e, f->name, n) != 0 || e[n] != '-' || e[n + 1] < '0' || e[n + 1] > '9') return 0;
  char *end;
  unsigned long long s = strtoull(e + n + 1, &end, 10);
  if (s > UINT32_MAX) return 0;
  *sub = (uint32_t)s;
  const char *p = end;
  *epoch = 0;
  if (*p == '-') {
    if (p[1] < '0' || p[1] > '9') return 0;
    *epoch = strtoull(p + 1, &end, 10);
    p = end;
  } else if (*p == '.') { /* .inprogress, or .<owner epoch>.inprogress */
    const char *q = p + 1 + strspn(p + 1, "0123456789");
    if (strcmp(q == p + 1 ? p : q, ".inprogress") == 0) {
      *committed = 0;
      return 1;
    }
  }
  if (strcmp(p, ".txt") == 0) {
    *committed = 1;
    return 1;
  }
  if (strcmp(p, ".txt.pending") == 0) {
    *committed = 0;
    return 1;
  }
  return 0;
}

/* Removes this subtask's parts with epoch > after (every part, epoch 0
 * included, when all is set), and subtask 0 those of the subtasks the job
 * no longer has (a run with a lower parallelism than an earlier one: their
 * pending epochs were taken over, see twophase.c). Returns the number of
 * transactions removed (pending or committed parts; the in-progress file
 * is not one) or -errno. */
static int remove_parts_in(weir_ctx *ctx, fdest *f, const char *dir, uint64_t after, int all) {
  DIR *d = opendir(dir);
  if (!d) {
    int rc = -errno;
    return weir_ctx_fail(ctx, rc, "cannot list '%s': %s", dir, weir_strerror(rc));
  }
  int removed = 0, rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t epoch;
    uint32_t sub;
    int committed = 0;
    if (!parse_part(f, e->d_name, &sub, &epoch, &committed)) continue;
    if (sub != f->subtask && (f->subtask != 0 || sub < f->parallelism)) continue;
    int inprogress = strstr(e->d_name, ".inprogress") != NULL;
    if (!all && !inprogress && epoch <= after) continue;
    size_t n = strlen(dir) + strlen(e->d_name) + 2;
    char *p = weir_malloc(n);
    snprintf(p, n, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0 && errno != ENOENT) {
      rc = -errno;
      rc = weir_ctx_fail(ctx, rc, "cannot remove '%s': %s", p, weir_strerror(rc));
    } else if (!inprogress) {
      removed++;
      if (!all)
        WEIR_LOG_I("sink '%s' subtask %u: removed %s part of epoch %llu (after checkpoint %llu) "
                   "from %s",
                   f->name, sub, committed ? "committed" : "pending", (unsigned long long)epoch,
                   (unsigned long long)after, dir);
    }
    weir_free(p);
    if (rc < 0) break;
  }
  closedir(d);
  if (rc < 0) return rc;
  if (removed) {
    rc = sync_dir(dir);
    if (rc < 0)
      return weir_ctx_fail(ctx, rc, "cannot fsync directory '%s': %s", dir, weir_strerror(rc));
  }
  return removed;
}

static int remove_parts(weir_ctx *ctx, fdest *f, uint64_t after, int all) {
  return remove_parts_in(ctx, f, f->dir, after, all);
}

static void fdest_free(fdest *f) {
  if (f->fd >= 0) close(f->fd);
  weir__linebuf_close(&f->lb);
  weir_free(f->open_path);
  weir_free(f->old_dir);
  weir_free(f->dir);
  weir_free(f->name);
  weir_free(f);
}

static int file_open(weir_ctx *ctx, void **out) {
  const file_arg *a = weir_sink_dest_arg(ctx);
  int rc = mkdir_p(a->dir);
  if (rc < 0)
    return weir_ctx_fail(ctx, rc, "cannot create directory '%s': %s", a->dir, weir_strerror(rc));
  fdest *f = weir_calloc(1, sizeof *f);
  f->dir = weir_strdup(a->dir);
  f->name = weir_strdup(weir_ctx_name(ctx));
  f->subtask = weir_ctx_subtask(ctx);
  f->parallelism = weir_ctx_parallelism(ctx);
  f->checkpointing = weir_ctx_checkpointing(ctx);
  f->fmt = a->common.fmt;
  f->fd = -1;
  f->ctx = ctx;
  char inprogress[40];
  snprintf(inprogress, sizeof inprogress, ".%llu.inprogress",
           (unsigned long long)weir_ctx_epoch(ctx));
  f->open_path = part_path(f, f->subtask, 0, f->checkpointing ? inprogress : ".txt.pending");
  weir__linebuf_init(&f->lb, FILE_BUF, FILE_BUF, lb_write, f);
  /* A fresh start replaces what an earlier run of this subtask left (a
   * subtask with no state of its own in a restored run keeps its committed
   * parts: twophase.c calls abort_after for it). */
  if (!weir_ctx_restored_checkpoint(ctx) && (rc = remove_parts(ctx, f, 0, 1)) < 0) {
    fdest_free(f);
    return rc;
  }
  *out = f;
  /* Without checkpoints the one part exists from the start, so a failed
   * run always leaves its .pending file as the mark of incomplete output. */
  if (!f->checkpointing) {
    f->fd = open(f->open_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
      rc = -errno;
      rc = weir_ctx_fail(ctx, rc, "cannot create '%s': %s", f->open_path, weir_strerror(rc));
      fdest_free(f);
      *out = NULL;
      return rc;
    }
  }
  return 0;
}

static int file_write(weir_ctx *ctx, void *dest, const weir_record *r) {
  fdest *f = dest;
  if (f->fd < 0) {
    /* A run taken over while paused must not truncate its successor's
     * in-progress part, which has the same name. */
    int own = weir_ctx_owner_check(ctx);
    if (own)
      return weir_ctx_fail(ctx, own, "not creating '%s': this run no longer owns the job (fenced)",
                           f->open_path);
    f->fd = open(f->open_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
      int rc = -errno;
      return weir_ctx_fail(ctx, rc, "cannot create '%s': %s", f->open_path, weir_strerror(rc));
    }
  }
  return weir__linebuf_put(ctx, &f->lb, f->fmt, r);
}

/* Moves the closed in-progress part `from` to its pending name `to`
 * without replacing a part there, unless this run still owns the job (see
 * "Stale owners" above). A file system without hard links gets a plain
 * rename. */
static int publish_part(weir_ctx *ctx, const fdest *f, const char *from, const char *to,
                        const char *final) {
  int rc = 0;
  /* The epoch committed already: another owner's (a run's own parts after
   * its restored checkpoint were removed when it started). */
  if (access(final, F_OK) == 0 && (rc = weir_ctx_owner_check(ctx)) != 0)
    return weir_ctx_fail(ctx, rc,
                         "not pre-committing '%s': this run no longer owns the job (fenced)", from);
  if (link(from, to) == 0) {
    if (unlink(from) != 0 && errno != ENOENT) {
      rc = -errno;
      return weir_ctx_fail(ctx, rc, "cannot remove '%s': %s", from, weir_strerror(rc));
    }
    return 0;
  }
  if (errno == EEXIST) {
    int own = weir_ctx_owner_check(ctx);
    if (own)
      return weir_ctx_fail(ctx, own, "not replacing '%s': this run no longer owns the job (fenced)",
                           to);
    WEIR_LOG_W("sink '%s' subtask %u: replacing '%s', left by an earlier owner of the job", f->name,
               f->subtask, to);
  } else if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != EMLINK &&
             errno != ENOSYS) {
    rc = -errno;
    return weir_ctx_fail(ctx, rc, "cannot link '%s' to '%s': %s", from, to, weir_strerror(rc));
  }
  if (rename(from, to) != 0) {
    rc = -errno;
    return weir_ctx_fail(ctx, rc, "cannot rename '%s' to '%s': %s", from, to, weir_strerror(rc));
  }
  return 0;
}

static int file_pre_commit(weir_ctx *ctx, void *dest, uint64_t epoch, weir_sink_buf *h) {
  fdest *f = dest;
  if (f->fd < 0) return 1;
  int rc = weir__linebuf_flush(ctx, &f->lb);
  if (rc < 0) return rc;
  off_t len = lseek(f->fd, 0, SEEK_END);
  if (len < 0 || (rc = sync_fd(f->fd)) < 0) {
    rc = len < 0 ? -errno : rc;
    return weir_ctx_fail(ctx, rc, "cannot fsync '%s': %s", f->open_path, weir_strerror(rc));
  }
  rc = close(f->fd) == 0 ? 0 : -errno;
  f->fd = -1;
  if (rc < 0)
    return weir_ctx_fail(ctx, rc, "cannot close '%s': %s", f->open_path, weir_strerror(rc));
  char *pending = part_path(f, f->subtask, epoch, ".txt.pending");
  char *final = part_path(f, f->subtask, epoch, ".txt");
  if (strcmp(pending, f->open_path) != 0) rc = publish_part(ctx, f, f->open_path, pending, final);
  weir_free(final);
  weir_free(pending);
  if (rc < 0) return rc;
  if ((rc = sync_dir(f->dir)) < 0)
    return weir_ctx_fail(ctx, rc, "cannot fsync directory '%s': %s", f->dir, weir_strerror(rc));
  weir_sink_buf_u64(h, (uint64_t)len);
  return 0;
}

static int file_abort_after(weir_ctx *ctx, void *dest, uint64_t id) {
  fdest *f = dest;
  int rc = remove_parts(ctx, f, id, 0);
  if (rc < 0 || !f->old_dir) return rc;
  int old = remove_parts_in(ctx, f, f->old_dir, id, 0);
  return old < 0 ? old : rc + old;
}

/* Restoring a checkpoint taken with directory `old` ("file:DIR"): see the
 * top of the file. */
static int file_move(weir_ctx *ctx, void *dest, const char *old) {
  fdest *f = dest;
  if (strncmp(old, SCHEME, strlen(SCHEME)) != 0 || !old[strlen(SCHEME)])
    return weir_ctx_fail(ctx, WEIR_EMISMATCH, "sink '%s': cannot move from %s: not a directory",
                         f->name, old);
  weir_free(f->old_dir);
  f->old_dir = weir_strdup(old + strlen(SCHEME));
  return 0;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Where a recovered epoch of a moved sink is: in the old directory, where
 * it was pre-committed; in the new one if it came along with a copy of the
 * old one (its part is there, pending, or committed and not pending in
 * the old one). */
static const char *recovered_dir(const fdest *f, const weir_sink_commit *c) {
  char *np = part_in(f, f->dir, c->origin, c->epoch, ".txt.pending");
  char *nf = part_in(f, f->dir, c->origin, c->epoch, ".txt");
  char *op = part_in(f, f->old_dir, c->origin, c->epoch, ".txt.pending");
  int here = exists(np) || (exists(nf) && !exists(op));
  weir_free(np);
  weir_free(nf);
  weir_free(op);
  return here ? f->dir : f->old_dir;
}

/* On the commit thread: .pending -> .txt, idempotently. A recovered epoch
 * of a moved sink is committed where it is (recovered_dir). */
static int file_commit(void *dest, weir_sink_commit *c) {
  fdest *f = dest;
  const char *dir = c->recovered && f->old_dir ? recovered_dir(f, c) : f->dir;
  char *pending = part_in(f, dir, c->origin, c->epoch, ".txt.pending");
  char *final = part_in(f, dir, c->origin, c->epoch, ".txt");
  int rc = 0;
  uint64_t want = 0;
  for (int i = 7; i >= 0 && c->len == 8; i--) want = (want << 8) | c->handle[i];
  struct stat st;
  if (c->len != 8) {
    rc = WEIR_ECORRUPT;
    snprintf(c->err, c->errlen, "bad handle for part '%s'", final);
  } else if (stat(pending, &st) == 0) {
    if ((uint64_t)st.st_size != want) {
      rc = WEIR_EIO;
      snprintf(c->err, c->errlen, "part '%s' holds %lld bytes, not the %llu pre-committed", pending,
               (long long)st.st_size, (unsigned long long)want);
    } else if (rename(pending, final) != 0) {
      rc = -errno;
      snprintf(c->err, c->errlen, "cannot rename '%s' to '%s': %s", pending, final,
               weir_strerror(rc));
    } else if ((rc = sync_dir(dir)) < 0) {
      snprintf(c->err, c->errlen, "cannot fsync directory '%s': %s", dir, weir_strerror(rc));
    }
  } else if (errno != ENOENT) {
    rc = -errno;
    snprintf(c->err, c->errlen, "cannot stat '%s': %s", pending, weir_strerror(rc));
  } else if (stat(final, &st) != 0) {
    /* Neither name: the part is gone (removed by hand, or another run). */
    rc = WEIR_EIO;
    snprintf(c->err, c->errlen, "part '%s' is missing: neither pending nor committed", final);
  }
  /* else: committed before (a crash after the rename): done. */
  weir_free(pending);
  weir_free(final);
  return rc;
}

static void file_close(weir_ctx *ctx, void *dest) {
  fdest *f = dest;
  /* After an error: what was written stays as the in-progress file. */
  if (f->fd >= 0 && f->lb.len) (void)write_all(f->fd, f->lb.buf, f->lb.len);
  fdest_free(f);
}

/* dir as an absolute path (cap bytes): "." and ".." taken out, the
 * longest part of it that exists with its symbolic links resolved. Returns
 * 0 or -errno (-ENAMETOOLONG). */
static int abs_path(const char *dir, char *out, size_t cap) {
  char buf[PATH_MAX * 2];
  size_t len = 0;
  if (dir[0] != '/') {
    if (!getcwd(buf, PATH_MAX)) return -errno;
    len = strlen(buf);
  }
  /* Lexically: components appended one by one, ".." dropping the last. */
  for (const char *p = dir; *p;) {
    while (*p == '/') p++;
    const char *e = p;
    while (*e && *e != '/') e++;
    size_t n = (size_t)(e - p);
    if (n == 0 || (n == 1 && p[0] == '.')) {
    } else if (n == 2 && p[0] == '.' && p[1] == '.') {
      while (len > 0 && buf[len - 1] != '/') len--;
      if (len > 0) len--;
    } else {
      if (len + n + 2 > PATH_MAX) return -ENAMETOOLONG;
      buf[len++] = '/';
      memcpy(buf + len, p, n);
      len += n;
    }
    p = e;
  }
  if (len == 0) buf[len++] = '/';
  buf[len] = '\0';
  /* The longest prefix that exists, resolved; the rest as it is. */
  char real[PATH_MAX];
  size_t cut = len;
  for (;;) {
    char c = buf[cut];
    buf[cut] = '\0';
    int ok = realpath(cut ? buf : "/", real) != NULL;
    buf[cut] = c;
    if (ok) break;
    while (cut > 0 && buf[cut - 1] != '/') cut--;
    if (cut > 0) cut--;
  }
  size_t rl = strlen(real);
  if (rl == 1 && cut < len) rl = 0; /* "/" + "/rest" */
  if (rl + (len - cut) + 1 > cap) return -ENAMETOOLONG;
  memcpy(out, real, rl);
  memcpy(out + rl, buf + cut, len - cut + 1);
  return 0;
}

static int file_identity(const void *arg, char *buf, size_t cap) {
  const file_arg *a = arg;
  char path[PATH_MAX];
  int rc = abs_path(a->dir, path, sizeof path);
  if (rc < 0) return rc;
  snprintf(buf, cap, SCHEME "%s", path);
  return 0;
}

static const weir_sink_dest_vt file_dest_vt = {
    .size = sizeof(weir_sink_dest_vt),
    .name = "file",
    .open = file_open,
    .write = file_write,
    .pre_commit = file_pre_commit,
    .abort_after = file_abort_after,
    .commit = file_commit,
    .close = file_close,
    .identity = file_identity,
    .move = file_move,
    .move_note = "the file sink commits the checkpoint's pending parts in the old directory "
                 "(or in the new one, if they were moved there with it) and removes the parts "
                 "after the checkpoint from both; the new directory gets every epoch after the "
                 "checkpoint, so the two together hold every record once",
};

static int file_parse(const char *spec, weir__sink_arg *a, char *err, size_t errlen) {
  const char *dir = spec + strlen(SCHEME);
  if (!*dir)
    return weir__spec_error(err, errlen, "sink '%s' needs a directory, as in file:out", spec);
  ((file_arg *)a)->dir = weir_strdup(dir);
  return 0;
}

static void file_arg_free(void *p) {
  file_arg *a = p;
  weir_free(a->dir);
  weir_free(a);
}

const weir__sink_def weir__file_sink = {
    .name = "file",
    .arg_size = sizeof(file_arg),
    .parse = file_parse,
    .free = file_arg_free,
    .dest = &file_dest_vt,
};
