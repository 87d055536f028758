/* file.c: owns the file sink: one text file per sink subtask in a directory.
 *
 * DESIGN. Subtask s of sink `name` writes <DIR>/<name>-<s>.txt.pending
 * (created or truncated at open) through a 1 MiB line buffer and plain
 * write() calls. Publishing the file fsyncs it, closes it, renames it to
 * <DIR>/<name>-<s>.txt and fsyncs the directory, so a reader sees either no
 * .txt file or the whole of it (the temp file, fsync, rename, fsync-directory
 * sequence). Without checkpoints the file is published at end of input
 * (finish). With checkpoints it is published only when a checkpoint taken
 * after finish completes: until then a crash must be able to resume the
 * .pending file from the last cut.
 *
 * If the job stops with an error, finish is not called and close() only
 * writes out the buffer and closes the file: the .pending file is left
 * behind, marking the output as incomplete. Every subtask creates DIR (and
 * its parents) if missing and tolerates a concurrent creator (EEXIST).
 *
 * Checkpoints: at a barrier the sink writes out its buffer, fsyncs the
 * file and stores the file's length in the checkpoint. A restore into the
 * same directory truncates the .pending file back to that length (dropping
 * what was written after the cut) and appends from there, so the file ends
 * up holding every record once. Restored into a directory without the file,
 * the sink starts a new one (what came before the cut is wherever it was
 * written). A checkpoint taken after the file was published still records
 * it as whole, with its length: a restore of that checkpoint takes the file
 * back as .pending at open and publishes it again once told the checkpoint
 * completed. Until the sink takes part in two-phase commit, a reader of the
 * .pending file may see records that a restore later drops.
 */
#include "sink_impl.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weir/alloc.h"

#define FILE_BUF (1024u * 1024u)

/* One subtask's output file; owned by the subtask's thread. */
typedef struct file_sink {
  int fd;        /* -1 once closed */
  char *pending; /* <DIR>/<name>-<s>.txt.pending */
  char *final;   /* <DIR>/<name>-<s>.txt */
  weir__linebuf lb;
  int finished;        /* input ended; waiting for a checkpoint to publish */
  uint64_t after_ckpt; /* first checkpoint snapshotted after finish, 0 if none */
  uint64_t published;  /* the published file's length (fd < 0) */
} file_sink;

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

static int file_write(weir_ctx *ctx, void *sink, const char *p, size_t n) {
  file_sink *f = sink;
  int rc = write_all(f->fd, p, n);
  if (rc < 0) return weir_ctx_fail(ctx, rc, "cannot write '%s': %s", f->pending, weir_strerror(rc));
  return 0;
}

/* fsync, or F_FULLFSYNC where fsync does not reach the disk (macOS). */
static int sync_fd(int fd) {
#ifdef F_FULLFSYNC
  if (fcntl(fd, F_FULLFSYNC) == 0) return 0;
#endif
  return fsync(fd) == 0 ? 0 : -errno;
}

static char *path_of(const char *dir, const char *name, uint32_t subtask, const char *suffix) {
  size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 16;
  char *p = weir_malloc(n);
  snprintf(p, n, "%s/%s-%u%s", dir, name, (unsigned)subtask, suffix);
  return p;
}

static void sink_free(file_sink *f) {
  if (f->fd >= 0) close(f->fd);
  weir__linebuf_close(&f->lb);
  weir_free(f->pending);
  weir_free(f->final);
  weir_free(f);
}

static int file_open(weir_ctx *ctx) {
  const weir__sink_arg *a = weir_ctx_arg(ctx);
  int rc = mkdir_p(a->dir);
  if (rc < 0)
    return weir_ctx_fail(ctx, rc, "cannot create directory '%s': %s", a->dir, weir_strerror(rc));
  file_sink *f = weir_calloc(1, sizeof *f);
  uint32_t s = weir_ctx_subtask(ctx);
  f->pending = path_of(a->dir, weir_ctx_name(ctx), s, ".txt.pending");
  f->final = path_of(a->dir, weir_ctx_name(ctx), s, ".txt");
  weir__linebuf_init(&f->lb, FILE_BUF, FILE_BUF, file_write, f);
  /* Restoring: keep the file; restore() truncates it to the cut. A file
   * published before (a stop on request) becomes the .pending file again. */
  struct stat pst;
  if (weir_ctx_restoring(ctx) && stat(f->pending, &pst) != 0 && errno == ENOENT &&
      rename(f->final, f->pending) != 0 && errno != ENOENT) {
    rc = -errno;
    rc = weir_ctx_fail(ctx, rc, "cannot take back '%s': %s", f->final, weir_strerror(rc));
    sink_free(f);
    return rc;
  }
  f->fd = open(f->pending, O_WRONLY | O_CREAT | O_CLOEXEC | (weir_ctx_restoring(ctx) ? 0 : O_TRUNC),
               0644);
  if (f->fd < 0) {
    rc = -errno;
    rc = weir_ctx_fail(ctx, rc, "cannot create '%s': %s", f->pending, weir_strerror(rc));
    sink_free(f);
    return rc;
  }
  weir_ctx_set_user(ctx, f);
  return 0;
}

static int file_process(weir_ctx *ctx, const weir_record *r) {
  const weir__sink_arg *a = weir_ctx_arg(ctx);
  file_sink *f = weir_ctx_user(ctx);
  return weir__linebuf_put(ctx, &f->lb, a->fmt, r);
}

static int file_process_batch(weir_ctx *ctx, const weir_batch *b) {
  const weir__sink_arg *a = weir_ctx_arg(ctx);
  file_sink *f = weir_ctx_user(ctx);
  for (uint32_t i = 0; i < b->len; i++) {
    weir_record r = weir_batch_record(b, i);
    int rc = weir__linebuf_put(ctx, &f->lb, a->fmt, &r);
    if (rc < 0) return rc;
  }
  return 0;
}

/* Makes the file durable and visible under its final name. */
static int publish(weir_ctx *ctx, file_sink *f) {
  const weir__sink_arg *a = weir_ctx_arg(ctx);
  int rc = weir__linebuf_flush(ctx, &f->lb);
  if (rc < 0) return rc;
  if ((rc = sync_fd(f->fd)) < 0)
    return weir_ctx_fail(ctx, rc, "cannot fsync '%s': %s", f->pending, weir_strerror(rc));
  off_t len = lseek(f->fd, 0, SEEK_CUR);
  f->published = len > 0 ? (uint64_t)len : 0;
  rc = close(f->fd) == 0 ? 0 : -errno;
  f->fd = -1;
  if (rc < 0) return weir_ctx_fail(ctx, rc, "cannot close '%s': %s", f->pending, weir_strerror(rc));
  if (rename(f->pending, f->final) != 0) {
    rc = -errno;
    return weir_ctx_fail(ctx, rc, "cannot rename '%s' to '%s': %s", f->pending, f->final,
                         weir_strerror(rc));
  }
  int dfd = open(a->dir, O_RDONLY | O_CLOEXEC);
  if (dfd < 0) {
    rc = -errno;
    return weir_ctx_fail(ctx, rc, "cannot open directory '%s': %s", a->dir, weir_strerror(rc));
  }
  rc = sync_fd(dfd);
  close(dfd);
  /* Some file systems refuse fsync on a directory (EINVAL): nothing to do. */
  if (rc < 0 && rc != -EINVAL)
    return weir_ctx_fail(ctx, rc, "cannot fsync directory '%s': %s", a->dir, weir_strerror(rc));
  return 0;
}

static int file_finish(weir_ctx *ctx) {
  file_sink *f = weir_ctx_user(ctx);
  if (!weir_ctx_checkpointing(ctx)) return publish(ctx, f);
  f->finished = 1;
  return weir__linebuf_flush(ctx, &f->lb);
}

/* A checkpoint that includes the whole file completed: publish it. */
static int file_checkpoint_complete(weir_ctx *ctx, uint64_t id) {
  file_sink *f = weir_ctx_user(ctx);
  if (f->fd < 0 || !f->after_ckpt || id < f->after_ckpt) return 0;
  return publish(ctx, f);
}

/* The cut: everything before the barrier durable, and the length noted. */
static int file_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  file_sink *f = weir_ctx_user(ctx);
  off_t len = (off_t)f->published;
  if (f->fd >= 0) {
    if (f->finished && !f->after_ckpt) f->after_ckpt = id;
    int rc = weir__linebuf_flush(ctx, &f->lb);
    if (rc < 0) return rc;
    if ((rc = sync_fd(f->fd)) < 0)
      return weir_ctx_fail(ctx, rc, "cannot fsync '%s': %s", f->pending, weir_strerror(rc));
    len = lseek(f->fd, 0, SEEK_CUR);
    if (len < 0) return -errno;
  }
  /* Published already (an earlier checkpoint held the whole file): the
   * state still says "whole, this long", so that a restore of this
   * checkpoint (which takes the file back as .pending at open) publishes it
   * again. */
  uint8_t b[9];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)len >> (8 * i));
  /* complete: publish when this checkpoint is known complete */
  b[8] = (uint8_t)(f->finished || f->fd < 0);
  return weir_snapshot_write(w, b, sizeof b);
}

static int file_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  file_sink *f = weir_ctx_user(ctx);
  size_t n;
  const uint8_t *b = weir_snapshot_data(r, &n);
  if (n != 9 || b[8] > 1)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "file sink: bad checkpointed length");
  if (b[8]) {
    /* The file was whole at this checkpoint: publish it once the engine says
     * the checkpoint completed (it may already have, before a crash). */
    f->finished = 1;
    f->after_ckpt = 1;
  }
  uint64_t want = 0;
  for (int i = 7; i >= 0; i--) want = (want << 8) | b[i];
  struct stat st;
  if (fstat(f->fd, &st) != 0) return -errno;
  if (st.st_size == 0) return 0; /* a new file: the output before the cut is elsewhere */
  if ((uint64_t)st.st_size < want)
    return weir_ctx_fail(ctx, WEIR_EIO,
                         "cannot resume '%s': it holds %lld bytes, fewer than the %llu it had "
                         "at the checkpoint",
                         f->pending, (long long)st.st_size, (unsigned long long)want);
  if (ftruncate(f->fd, (off_t)want) != 0 || lseek(f->fd, 0, SEEK_END) < 0) {
    int rc = -errno;
    return weir_ctx_fail(ctx, rc, "cannot truncate '%s': %s", f->pending, weir_strerror(rc));
  }
  return 0;
}

/* After finish: frees. After an error: writes out the buffer (best effort)
 * and closes the file under its .pending name, which stays. */
static void file_close(weir_ctx *ctx) {
  file_sink *f = weir_ctx_user(ctx);
  if (!f) return;
  if (f->fd >= 0 && f->lb.len) (void)write_all(f->fd, f->lb.buf, f->lb.len);
  sink_free(f);
  weir_ctx_set_user(ctx, NULL);
}

const weir_operator_vt weir__file_sink_vt = {
    .name = "file",
    .open = file_open,
    .process = file_process,
    .process_batch = file_process_batch,
    .finish = file_finish,
    .close = file_close,
    .snapshot = file_snapshot,
    .restore = file_restore,
    .checkpoint_complete = file_checkpoint_complete,
};
