/* file_source.c: owns weir_file_source, the line-oriented file source.
 *
 * DESIGN. Each subtask reads the file sequentially through one buffer of
 * max_line + 1 + READ_CHUNK bytes and splits it at '\n'. A line that lies
 * whole in the buffer is emitted straight from it (no copy); when the buffer
 * ends inside a line, that partial line is moved to the front and the rest
 * read behind it, so each byte moves at most once. A line longer than
 * max_line is recognised as soon as more than max_line bytes of it are
 * buffered, reported, and the rest of it is skipped while scanning: memory
 * never exceeds the one buffer, whatever the file holds.
 *
 * Splitting. With P subtasks the file's size at open is cut into ranges
 * [s * size / P, (s + 1) * size / P); subtask s emits the lines that start in
 * its range, reading past its end to finish its last line. A subtask whose
 * range starts at b > 0 begins reading at b - 1 in "skipping" mode, which
 * discards bytes up to and including the first '\n': if byte b - 1 is that
 * '\n', the line starting at b is its own; otherwise the partial line is the
 * previous subtask's. Every line is thus emitted by exactly one subtask.
 *
 * Records: payload = the line without its '\n', key = the line's byte
 * offset, timestamp 0, id = weir_source_record_id(ctx, 0, offset).
 *
 * Bad records (longer than max_line, or containing a NUL byte) stop the job
 * with WEIR_EBADREC naming the path and byte offset; with skip_bad they are
 * counted as "bad_records" and, if a dead-letter path is set, appended to it
 * as "<offset>\t<first 200 bytes, escaped>\n" (one write() per entry on an
 * O_APPEND descriptor, so subtasks do not interleave within an entry; the
 * file is appended to, never truncated, and created on the first bad line).
 *
 * Position: split s (the subtask's byte range) is at the offset of the next
 * byte to look at, with a flag (the operator state) saying whether that byte
 * starts a line or lies inside one being skipped. Restoring seeks there.
 */
#include "weir/operators.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"

/* Bytes read per refill beyond room for one maximal line. */
#define READ_CHUNK (128u * 1024u)
/* Bytes of a bad line copied (escaped) into the dead-letter file. */
#define DEAD_LETTER_BYTES 200u

__extension__ typedef unsigned __int128 u128;

/* The source's options, copied and owned by the job (weir_job_adopt). */
typedef struct file_arg {
  char *path;
  char *dead_letter; /* NULL = none */
  uint32_t max_line; /* 0 = the job's maximum record size */
  int skip_bad;
} file_arg;

/* One subtask's reader; owned by the subtask's thread. Invariant:
 * pos <= lim <= cap, and buf[0..lim) holds the file's bytes
 * [buf_off, buf_off + lim). */
typedef struct file_reader {
  int fd;
  int dl_fd;        /* dead-letter descriptor, -1 until the first bad line */
  uint64_t end;     /* lines starting at offsets >= end are not ours */
  uint64_t buf_off; /* file offset of buf[0] */
  char *buf;
  size_t cap, pos, lim;
  uint32_t max_line; /* effective limit: min(option, max record size) */
  int skipping;      /* discarding bytes up to and including the next '\n' */
  int eof;
} file_reader;

static void reader_free(file_reader *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  if (f->dl_fd >= 0) close(f->dl_fd);
  weir_free(f->buf);
  weir_free(f);
}

static int file_open(weir_ctx *ctx) {
  const file_arg *a = weir_ctx_arg(ctx);
  uint64_t p = weir_ctx_parallelism(ctx), s = weir_ctx_subtask(ctx);
  file_reader *f = weir_calloc(1, sizeof *f);
  f->dl_fd = -1;
  f->fd = open(a->path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) {
    int err = -errno;
    reader_free(f);
    return weir_ctx_fail(ctx, err, "cannot open '%s': %s", a->path, weir_strerror(err));
  }
  struct stat st;
  if (fstat(f->fd, &st) != 0) {
    int err = -errno;
    reader_free(f);
    return weir_ctx_fail(ctx, err, "cannot stat '%s': %s", a->path, weir_strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    reader_free(f);
    return weir_ctx_fail(ctx, -EISDIR, "cannot read '%s': it is a directory", a->path);
  }
  uint64_t start = 0;
  if (S_ISREG(st.st_mode)) {
    uint64_t size = (uint64_t)st.st_size;
    start = (uint64_t)((u128)size * s / p);
    f->end = (uint64_t)((u128)size * (s + 1) / p);
  } else if (p == 1) {
    f->end = UINT64_MAX; /* a pipe or device: read to its end */
  } else {
    reader_free(f);
    return weir_ctx_fail(ctx, WEIR_EINVAL,
                         "cannot split '%s' over %u subtasks: not a regular file (use "
                         "parallelism 1)",
                         a->path, (unsigned)p);
  }
  if (start >= f->end) {
    f->eof = 1; /* an empty range: nothing to read */
  } else if (start > 0) {
    f->buf_off = start - 1;
    f->skipping = 1;
    if (lseek(f->fd, (off_t)f->buf_off, SEEK_SET) < 0) {
      int err = -errno;
      reader_free(f);
      return weir_ctx_fail(ctx, err, "cannot seek in '%s': %s", a->path, weir_strerror(err));
    }
  }
  uint32_t max_rec = weir_ctx_max_record(ctx);
  f->max_line = a->max_line && a->max_line < max_rec ? a->max_line : max_rec;
  if (!f->eof) {
    f->cap = (size_t)f->max_line + 1 + READ_CHUNK;
    f->buf = weir_malloc(f->cap);
  }
  weir_ctx_set_user(ctx, f);
  return 0;
}

/* Moves the unconsumed bytes to the front and reads more behind them.
 * Returns 0 (f->eof set at end of file) or a negative error. */
static int refill(weir_ctx *ctx, file_reader *f) {
  if (f->pos > 0) {
    memmove(f->buf, f->buf + f->pos, f->lim - f->pos);
    f->buf_off += f->pos;
    f->lim -= f->pos;
    f->pos = 0;
  }
  for (;;) {
    ssize_t n = read(f->fd, f->buf + f->lim, f->cap - f->lim);
    if (n > 0) {
      f->lim += (size_t)n;
      return 0;
    }
    if (n == 0) {
      f->eof = 1;
      return 0;
    }
    if (errno == EINTR) continue;
    int err = -errno;
    const file_arg *a = weir_ctx_arg(ctx);
    return weir_ctx_fail(ctx, err, "cannot read '%s' at byte offset %llu: %s", a->path,
                         (unsigned long long)(f->buf_off + f->lim), weir_strerror(err));
  }
}

/* Writes `in` (n bytes) escaped into out (room for 4 * n bytes): backslash,
 * tab, CR, LF and other control bytes become \\, \t, \r, \n and \xHH; other
 * bytes (UTF-8 included) stay. Returns the escaped length. */
static size_t escape(char *out, const unsigned char *in, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = in[i];
    if (c == '\\') {
      out[o++] = '\\';
      out[o++] = '\\';
    } else if (c == '\t') {
      out[o++] = '\\';
      out[o++] = 't';
    } else if (c == '\r') {
      out[o++] = '\\';
      out[o++] = 'r';
    } else if (c == '\n') {
      out[o++] = '\\';
      out[o++] = 'n';
    } else if (c < 0x20 || c == 0x7f) {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    } else {
      out[o++] = (char)c;
    }
  }
  return o;
}

/* A bad line at file offset `off` whose first bytes are line[0..n) (n may be
 * less than the whole line); `why` is the reason, followed by "<limit> bytes"
 * when limit is nonzero. Stops the job, or counts and dead-letters the line.
 * Returns 0 (skipped) or a negative error. */
static int bad_line(weir_ctx *ctx, file_reader *f, uint64_t off, const char *line, size_t n,
                    const char *why, uint32_t limit) {
  const file_arg *a = weir_ctx_arg(ctx);
  if (!a->skip_bad) {
    if (limit)
      return weir_ctx_fail(ctx, WEIR_EBADREC, "bad record in '%s' at byte offset %llu: %s %u bytes",
                           a->path, (unsigned long long)off, why, limit);
    return weir_ctx_fail(ctx, WEIR_EBADREC, "bad record in '%s' at byte offset %llu: %s", a->path,
                         (unsigned long long)off, why);
  }
  weir_ctx_count(ctx, "bad_records", 1);
  if (!a->dead_letter) return 0;
  if (f->dl_fd < 0) {
    f->dl_fd = open(a->dead_letter, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (f->dl_fd < 0) {
      int err = -errno;
      return weir_ctx_fail(ctx, err, "cannot open dead-letter file '%s': %s", a->dead_letter,
                           weir_strerror(err));
    }
  }
  char entry[24 + 4 * DEAD_LETTER_BYTES + 2];
  if (n > DEAD_LETTER_BYTES) n = DEAD_LETTER_BYTES;
  /* The offset in decimal, written backwards then reversed. */
  size_t o = 0;
  uint64_t v = off;
  do {
    entry[o++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0, j = o - 1; i < j; i++, j--) {
    char t = entry[i];
    entry[i] = entry[j];
    entry[j] = t;
  }
  entry[o++] = '\t';
  o += escape(entry + o, (const unsigned char *)line, n);
  entry[o++] = '\n';
  for (size_t done = 0; done < o;) {
    ssize_t w = write(f->dl_fd, entry + done, o - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = -errno;
      return weir_ctx_fail(ctx, err, "cannot write dead-letter file '%s': %s", a->dead_letter,
                           weir_strerror(err));
    }
    done += (size_t)w;
  }
  return 0;
}

static int emit_line(weir_ctx *ctx, uint64_t off, const char *line, size_t len) {
  weir_record r;
  r.key = off;
  r.ts = 0;
  r.id = weir_source_record_id(ctx, 0, off);
  r.payload = len ? line : NULL;
  r.len = (uint32_t)len;
  return weir_emit_record(ctx, &r);
}

/* Emits up to `budget` lines. Every line (good or bad) and every refill counts
 * as one unit of work, so a file of bad lines or one huge line still yields. */
static int file_run(weir_ctx *ctx, uint32_t budget) {
  file_reader *f = weir_ctx_user(ctx);
  if (weir_ctx_stopping(ctx)) return WEIR_SOURCE_DONE;
  if (!f->buf) return WEIR_SOURCE_DONE;
  int rc;
  for (uint32_t work = 0; work < (budget ? budget : 1); work++) {
    char *p = f->buf + f->pos;
    size_t have = f->lim - f->pos;
    char *nl = have ? memchr(p, '\n', have) : NULL;
    if (f->skipping) {
      if (nl) {
        f->pos += (size_t)(nl - p) + 1;
        f->skipping = 0;
        continue;
      }
      f->pos = f->lim; /* discard; keep the buffer free for reading */
      if (f->eof) return WEIR_SOURCE_DONE;
      if ((rc = refill(ctx, f)) < 0) return rc;
      continue;
    }
    uint64_t off = f->buf_off + f->pos;
    if (off >= f->end) return WEIR_SOURCE_DONE;
    if (!nl) {
      /* (With enough of it buffered for the dead-letter file.) */
      if (have > f->max_line && (have >= DEAD_LETTER_BYTES || f->eof)) {
        /* Over-long and not ended yet: report, then skip the rest of it. */
        if ((rc = bad_line(ctx, f, off, p, have, "line longer than", f->max_line)) < 0) return rc;
        f->pos = f->lim;
        f->skipping = 1;
        continue;
      }
      if (!f->eof) {
        if ((rc = refill(ctx, f)) < 0) return rc;
        continue;
      }
      if (have == 0) return WEIR_SOURCE_DONE;
      nl = p + have; /* a final line without '\n' */
    }
    size_t len = (size_t)(nl - p);
    f->pos += len + (f->pos + len < f->lim ? 1 : 0);
    if (len > f->max_line)
      rc = bad_line(ctx, f, off, p, len, "line longer than", f->max_line);
    else if (memchr(p, 0, len))
      rc = bad_line(ctx, f, off, p, len, "line contains a NUL byte", 0);
    else
      rc = emit_line(ctx, off, p, len);
    if (rc < 0) return rc;
  }
  return WEIR_SOURCE_MORE;
}

static void file_close(weir_ctx *ctx) {
  reader_free(weir_ctx_user(ctx));
  weir_ctx_set_user(ctx, NULL);
}

static int file_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  file_reader *f = weir_ctx_user(ctx);
  if (!f->buf) return 0; /* an empty range: nothing to resume */
  uint8_t skipping = (uint8_t)f->skipping;
  int rc = weir_snapshot_position(w, weir_ctx_subtask(ctx), f->buf_off + f->pos);
  if (rc == 0) rc = weir_snapshot_write(w, &skipping, 1);
  return rc;
}

static int file_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  file_reader *f = weir_ctx_user(ctx);
  const file_arg *a = weir_ctx_arg(ctx);
  uint64_t off;
  size_t n;
  const uint8_t *flag = weir_snapshot_data(r, &n);
  if (!weir_snapshot_get_position(r, weir_ctx_subtask(ctx), &off)) return 0;
  if (!f->buf || n != 1 || flag[0] > 1)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "file source '%s': checkpointed position unusable",
                         a->path);
  if (lseek(f->fd, (off_t)off, SEEK_SET) < 0) {
    int err = -errno;
    return weir_ctx_fail(ctx, err, "cannot seek in '%s' to %llu: %s", a->path,
                         (unsigned long long)off, weir_strerror(err));
  }
  f->buf_off = off;
  f->pos = f->lim = 0;
  f->eof = 0;
  f->skipping = flag[0];
  return 0;
}

static const weir_source_vt file_vt = {
    .size = sizeof(weir_source_vt),
    .name = "file_source",
    .open = file_open,
    .run = file_run,
    .close = file_close,
    .snapshot = file_snapshot,
    .restore = file_restore,
};

static void file_arg_free(void *p) {
  file_arg *a = p;
  if (!a) return;
  weir_free(a->path);
  weir_free(a->dead_letter);
  weir_free(a);
}

weir_stream *weir_file_source(weir_job *job, const char *name, const char *path,
                              const weir_file_source_opts *opts, int parallelism) {
  if (!job) return NULL;
  if (!path || !*path) {
    weir_job_fail(job, WEIR_EINVAL, "file source '%s': no path given", name ? name : "?");
    return NULL;
  }
  file_arg *a = weir_calloc(1, sizeof *a);
  a->path = weir_strdup(path);
  if (opts) {
    a->max_line = opts->max_line;
    a->skip_bad = opts->skip_bad;
    a->dead_letter = opts->dead_letter_path ? weir_strdup(opts->dead_letter_path) : NULL;
  }
  if (weir_job_adopt(job, a, file_arg_free) < 0) return NULL;
  return weir_source(job, name, &file_vt, a, parallelism);
}
