/* sink_impl.h: private to sinks/: the shared argument of the built-in text
 * sinks, their vtables, and the line buffer they share (linebuf.c). */
#ifndef WEIR_SINK_IMPL_H
#define WEIR_SINK_IMPL_H

#include "weir/sink.h"
#include "weir/sinks.h"

/* The arg of a built-in sink node: owned by the job (weir_job_adopt),
 * read-only at run time, shared by the node's subtasks (and their commit
 * threads). */
typedef struct weir__sink_arg {
  weir_format_fn fmt;    /* never NULL */
  weir_opid_fn opid;     /* content operation ids; NULL: write-ahead ids */
  char *dir;             /* file: the output directory; NULL otherwise */
  char *url;             /* http: the URL without weir's parameters */
  uint64_t retention_ms; /* http: the destination's key retention, 0 = unknown */
  int idempotent;        /* http: send Idempotency-Key (idempotency=off: 0) */
  void *nats;            /* nats: its parsed URL (weir__nats_url, nats_impl.h); NULL otherwise */
  char *conninfo;        /* postgresql: the URI without weir's parameters */
  char *table;           /* postgresql: the output table (NAME or SCHEMA.NAME) */
  uint64_t marker_keep;  /* postgresql: checkpoints of marker rows kept (markers=) */
} weir__sink_arg;

extern const weir_operator_vt weir__null_sink_vt;  /* null.c */
extern const weir_operator_vt weir__print_sink_vt; /* print.c */
extern const weir_sink_dest_vt weir__file_dest_vt; /* file.c */
extern const weir_sink_dest_vt weir__http_dest_vt; /* http.c */
extern const weir_sink_dest_vt weir__nats_dest_vt; /* nats.c */
extern const weir_sink_dest_vt weir__pg_dest_vt;   /* pg.c */

/* pg.c: nonzero if weir was built with libpq. */
int weir__pg_available(void);
/* pg.c: splits a postgresql:// spec into the URI for libpq (without
 * weir's `table` and `markers`), the table (default weir_output), both
 * malloc'd, and the checkpoints of marker rows to keep (default 100).
 * Returns 0 or WEIR_ESINK with a message in err. */
int weir__pg_parse(const char *spec, char **conninfo, char **table, uint64_t *keep, char *err,
                   size_t errlen);
/* pg.c: the global transaction id
 * "weir:<job>:<sink>:<owner epoch>:<checkpoint>:<subtask>" (a hash for a
 * sink name over 64 bytes or with ':'). Returns 0, or WEIR_EINVAL if it
 * would not fit cap or 199 bytes. */
int weir__pg_gid(char *buf, size_t cap, const char *job, const char *sink, uint64_t epoch,
                 uint64_t checkpoint, uint32_t subtask);

/* http.c: nonzero if weir was built with libcurl; initialises it once
 * (call on the thread building the job, before any sink thread starts). */
int weir__http_available(void);

/* spec.c: parses a duration "10s" (ms, s, m, h, d). Returns 0 or -1. */
int weir__parse_duration_ms(const char *s, size_t n, uint64_t *ms);

/* A per-subtask buffer of formatted lines, written out through `write`
 * (which returns 0 or a negative error, having called weir_ctx_fail). Owned
 * by the sink subtask's thread.
 *
 * Lines are formatted straight into the buffer (no intermediate copy); a
 * line that does not fit first flushes the buffer, and a line larger than
 * the whole buffer is formatted into a heap buffer of its size and written
 * on its own. So the buffer is always written out at line boundaries. */
typedef struct weir__linebuf {
  char *buf;
  size_t cap;      /* bytes in buf */
  size_t len;      /* bytes used */
  size_t flush_at; /* write out once len >= flush_at (cap: only when full) */
  int (*write)(weir_ctx *ctx, void *sink, const char *p, size_t n);
  void *sink;
} weir__linebuf;

/* oplog.c: the operation log of the idempotent sinks (http, nats): an
 * open epoch's records as the operations a commit sends. Task thread. */
typedef struct weir__oplog {
  weir_sink_buf open;    /* the open epoch's operations */
  weir_sink_buf scratch; /* formatting space */
  uint32_t n;            /* operations in `open` */
} weir__oplog;
/* Appends r: its text by fmt, and its content id by opid (NULL: none, the
 * id is then derived from its place). WEIR_ETOOBIG past 2^32 operations or
 * 4 GiB of text; WEIR_EINVAL if a formatter asks for another length the
 * second time. */
int weir__oplog_add(weir_ctx *ctx, weir__oplog *l, weir_format_fn fmt, weir_opid_fn opid,
                    const weir_record *r);
/* pre_commit: moves the open operations into the handle `out`; 1 if there
 * are none (nothing to commit). */
int weir__oplog_take(weir__oplog *l, weir_sink_buf *out);
void weir__oplog_free(weir__oplog *l);

/* Reading a handle back in commit. */
typedef struct weir__oplog_reader {
  const weir_sink_commit *c;
  uint32_t n; /* operations in the handle */
  uint32_t i; /* the next one's index */
  size_t off;
} weir__oplog_reader;
typedef struct weir__op {
  const uint8_t *body; /* the formatted record, in the handle */
  uint32_t blen;
  uint64_t index;
  char id[512]; /* its operation id: <job>/<sink>/c/<content> or .../w/<subtask>/<epoch>/<index> */
} weir__op;
/* WEIR_ECORRUPT if the handle is too short to hold a count. */
int weir__oplog_open(const weir_sink_commit *c, weir__oplog_reader *rd);
/* The next of rd->n operations; WEIR_ECORRUPT if the handle is malformed. */
int weir__oplog_next(weir__oplog_reader *rd, weir__op *op);

/* Allocates the buffer; cannot fail (out of memory aborts). */
void weir__linebuf_init(weir__linebuf *lb, size_t cap, size_t flush_at,
                        int (*write)(weir_ctx *, void *, const char *, size_t), void *sink);
/* Frees the buffer without writing it. */
void weir__linebuf_close(weir__linebuf *lb);
/* Appends r formatted by fmt, plus '\n'. Returns 0 or a negative error
 * (from write, or WEIR_EINVAL for a formatter that contradicts itself). */
int weir__linebuf_put(weir_ctx *ctx, weir__linebuf *lb, weir_format_fn fmt, const weir_record *r);
/* Writes out what is buffered. Returns 0 or write's error. */
int weir__linebuf_flush(weir_ctx *ctx, weir__linebuf *lb);

#endif
