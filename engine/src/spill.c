/* spill.c: owns scratch files for loop data beyond its memory bound (see
 * spill.h). Plain POSIX file I/O on the owning thread: spilling is the
 * overload path of a loop, where a write to the page cache is cheap next to
 * running out of memory. */
#include "spill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/failpoint.h"
#include "base/log.h"

#define SPILL_BUF (256u * 1024u)

void weir__spill_init(weir__spill *s, const char *dir) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  if (!dir || !*dir) dir = getenv("TMPDIR");
  s->dir = weir_strdup(dir && *dir ? dir : "/tmp");
}

void weir__spill_close(weir__spill *s) {
  if (s->fd >= 0) close(s->fd);
  weir_free(s->buf);
  weir_free(s->dir);
  memset(s, 0, sizeof *s);
  s->fd = -1;
}

static int spill_open(weir__spill *s) {
  size_t n = strlen(s->dir) + 32;
  char *path = weir_malloc(n);
  snprintf(path, n, "%s/weir-spill-XXXXXX", s->dir);
  int fd = weir_failpoint("spill.open") ? (errno = ENOSPC, -1) : mkstemp(path);
  if (fd < 0) {
    int e = errno;
    WEIR_LOG_W("cannot create a spill file in '%s': %s; the data stays in memory", s->dir,
               strerror(e));
    weir_free(path);
    return -e;
  }
  unlink(path); /* nothing survives the process */
  weir_free(path);
  s->fd = fd;
  s->buf = weir_malloc(SPILL_BUF);
  return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n, uint64_t off) {
  while (n) {
    ssize_t w = pwrite(fd, p, n, (off_t)off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += w;
    n -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

static int spill_flush(weir__spill *s) {
  if (!s->buf_len) return 0;
  int rc = write_all(s->fd, s->buf, s->buf_len, s->size - s->buf_len);
  if (rc) return rc;
  s->buf_len = 0;
  return 0;
}

int weir__spill_write2(weir__spill *s, const void *a, size_t na, const void *b, size_t nb) {
  if (s->err) return s->err;
  if (s->fd < 0 && (s->err = spill_open(s)) != 0) return s->err;
  size_t n = na + nb;
  int rc = weir_failpoint("spill.write") ? -ENOSPC : 0;
  if (!rc && s->buf_len + n > SPILL_BUF) rc = spill_flush(s);
  if (!rc && n > SPILL_BUF) {
    /* Past the buffer: straight to the file; the size moves only when both
     * parts are there, so a failure appends nothing. */
    rc = write_all(s->fd, a, na, s->size);
    if (!rc) rc = write_all(s->fd, b, nb, s->size + na);
    if (!rc) {
      s->size += n;
      return 0;
    }
  }
  if (rc) {
    WEIR_LOG_W("cannot write a spill file in '%s': %s; the data stays in memory", s->dir,
               strerror(-rc));
    return s->err = rc;
  }
  if (na) memcpy(s->buf + s->buf_len, a, na);
  if (nb) memcpy(s->buf + s->buf_len + na, b, nb);
  s->buf_len += (uint32_t)n;
  s->size += n;
  return 0;
}

int weir__spill_read(weir__spill *s, void *p, size_t n) {
  if (n > s->size - s->rd || weir_failpoint("spill.read")) return -EIO;
  uint8_t *out = p;
  uint64_t flushed = s->size - s->buf_len;
  while (n && s->rd < flushed) {
    size_t want = n < flushed - s->rd ? n : (size_t)(flushed - s->rd);
    ssize_t r = pread(s->fd, out, want, (off_t)s->rd);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r < 0 ? -errno : -EIO;
    out += r;
    n -= (size_t)r;
    s->rd += (uint64_t)r;
  }
  if (n) { /* the rest is still in the write buffer */
    memcpy(out, s->buf + (s->rd - flushed), n);
    s->rd += n;
  }
  return 0;
}

int weir__spill_reset(weir__spill *s) {
  s->size = s->rd = 0;
  s->buf_len = 0;
  if (s->fd >= 0 && ftruncate(s->fd, 0) != 0) return -errno;
  return 0;
}

uint8_t *weir__spill_map(weir__spill *s, uint64_t *len, int *err) {
  *len = s->size;
  *err = s->err;
  if (*err) return NULL;
  if (!s->size) {
    *err = -EINVAL;
    return NULL;
  }
  int rc = spill_flush(s);
  if (rc) {
    *err = rc;
    return NULL;
  }
  void *p = mmap(NULL, (size_t)s->size, PROT_READ, MAP_SHARED, s->fd, 0);
  if (p == MAP_FAILED) {
    *err = -errno;
    return NULL;
  }
  return p;
}

void weir__spill_unmap(uint8_t *p, uint64_t len) {
  if (p) munmap(p, (size_t)len);
}
