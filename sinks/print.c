/* print.c: owns the print sink: one line per record on standard output.
 *
 * DESIGN. Each subtask formats its lines into its own buffer and hands it to
 * stdout with one fwrite() once it holds 64 KiB, at finish and at close.
 * stdio locks the stream for the whole fwrite(), and the buffer always ends
 * at a line boundary (see linebuf.c), so lines of different subtasks never
 * interleave inside a line, while the order between subtasks is arbitrary.
 * Writing to stdout can block if its reader is slow; that is the print
 * sink's nature (it is for people and small tests, not for throughput).
 */
#include "sink_impl.h"

#include <stdio.h>

#include "base/alloc.h"

#define PRINT_BUF (128u * 1024u)
#define PRINT_FLUSH_AT (64u * 1024u)

static int print_write(weir_ctx *ctx, void *sink, const char *p, size_t n) {
  errno = 0;
  if (fwrite(p, 1, n, stdout) == n) return 0;
  int err = errno ? -errno : WEIR_EIO;
  return weir_ctx_fail(ctx, err, "sink '%s': cannot write to standard output: %s",
                       weir_ctx_name(ctx), weir_strerror(err));
}

static int print_open(weir_ctx *ctx) {
  weir__linebuf *lb = weir_malloc(sizeof *lb);
  weir__linebuf_init(lb, PRINT_BUF, PRINT_FLUSH_AT, print_write, NULL);
  weir_ctx_set_user(ctx, lb);
  return 0;
}

static int print_process(weir_ctx *ctx, const weir_record *r) {
  const weir__sink_arg *a = weir_ctx_arg(ctx);
  return weir__linebuf_put(ctx, weir_ctx_user(ctx), a->fmt, r);
}

static int print_process_batch(weir_ctx *ctx, const weir_batch *b) {
  const weir__sink_arg *a = weir_ctx_arg(ctx);
  weir__linebuf *lb = weir_ctx_user(ctx);
  for (uint32_t i = 0; i < b->len; i++) {
    weir_record r = weir_batch_record(b, i);
    int rc = weir__linebuf_put(ctx, lb, a->fmt, &r);
    if (rc < 0) return rc;
  }
  return 0;
}

static int print_finish(weir_ctx *ctx) {
  int rc = weir__linebuf_flush(ctx, weir_ctx_user(ctx));
  if (rc < 0) return rc;
  if (fflush(stdout) != 0) {
    int err = errno ? -errno : WEIR_EIO;
    return weir_ctx_fail(ctx, err, "sink '%s': cannot write to standard output: %s",
                         weir_ctx_name(ctx), weir_strerror(err));
  }
  return 0;
}

/* The cut: every record before the barrier is on standard output. */
static int print_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  (void)w;
  return print_finish(ctx);
}

/* Writes what is still buffered (after an error elsewhere, best effort). */
static void print_close(weir_ctx *ctx) {
  weir__linebuf *lb = weir_ctx_user(ctx);
  if (!lb) return;
  if (lb->len) fwrite(lb->buf, 1, lb->len, stdout);
  fflush(stdout);
  weir__linebuf_close(lb);
  weir_free(lb);
  weir_ctx_set_user(ctx, NULL);
}

static const weir_operator_vt print_sink_vt = {
    .size = sizeof(weir_operator_vt),
    .name = "print",
    .open = print_open,
    .process = print_process,
    .process_batch = print_process_batch,
    .finish = print_finish,
    .close = print_close,
    .snapshot = print_snapshot,
};

const weir__sink_def weir__print_sink = {
    .name = "print",
    .arg_size = sizeof(weir__sink_arg),
    .free = weir_free,
    .sink = &print_sink_vt,
};
