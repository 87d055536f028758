/* linebuf.c: owns weir__linebuf, the per-subtask buffer of formatted lines
 * shared by the print and file sinks (see sink_impl.h for its contract).
 *
 * DESIGN. Records are formatted straight into the free tail of the buffer:
 * the formatter reports the length it needs, and only when that does not fit
 * is the buffer written out and the record formatted again, into the emptied
 * buffer or, if larger than the whole buffer, into a heap buffer of exactly
 * its size. Writes therefore always end at a line boundary, which is what
 * keeps the print sink's subtasks from interleaving inside a line.
 */
#include "sink_impl.h"

#include "base/alloc.h"

void weir__linebuf_init(weir__linebuf *lb, size_t cap, size_t flush_at,
                        int (*write)(weir_ctx *, void *, const char *, size_t), void *sink) {
  lb->buf = weir_malloc(cap);
  lb->cap = cap;
  lb->len = 0;
  lb->flush_at = flush_at;
  lb->write = write;
  lb->sink = sink;
}

void weir__linebuf_close(weir__linebuf *lb) {
  weir_free(lb->buf);
  lb->buf = NULL;
  lb->cap = lb->len = 0;
}

int weir__linebuf_flush(weir_ctx *ctx, weir__linebuf *lb) {
  if (lb->len == 0) return 0;
  int rc = lb->write(ctx, lb->sink, lb->buf, lb->len);
  lb->len = 0;
  return rc;
}

/* Formats r plus '\n' into dst (room bytes). Returns the line's length with
 * its '\n' if it fit (<= room), or the room it needs (> room). */
static size_t format_line(weir_format_fn fmt, const weir_record *r, char *dst, size_t room) {
  size_t n = fmt(r, dst, room);
  if (n < room) dst[n] = '\n'; /* n < room: there was room for the NUL */
  return n + 1;
}

static int inconsistent(weir_ctx *ctx) {
  return weir_ctx_fail(ctx, WEIR_EINVAL,
                       "sink '%s': the record formatter returned a longer line when given the "
                       "room it asked for",
                       weir_ctx_name(ctx));
}

int weir__linebuf_put(weir_ctx *ctx, weir__linebuf *lb, weir_format_fn fmt, const weir_record *r) {
  size_t room = lb->cap - lb->len;
  size_t n = format_line(fmt, r, lb->buf + lb->len, room);
  if (n <= room) {
    lb->len += n;
  } else {
    int rc = weir__linebuf_flush(ctx, lb);
    if (rc < 0) return rc;
    if (n <= lb->cap) {
      size_t m = format_line(fmt, r, lb->buf, lb->cap);
      if (m > lb->cap) return inconsistent(ctx);
      lb->len = m;
    } else {
      char *big = weir_malloc(n);
      size_t m = format_line(fmt, r, big, n);
      rc = m > n ? inconsistent(ctx) : lb->write(ctx, lb->sink, big, m);
      weir_free(big);
      return rc;
    }
  }
  return lb->len >= lb->flush_at ? weir__linebuf_flush(ctx, lb) : 0;
}
