/* sink_impl.h: private to sinks/ and the connectors built on it: the part
 * every sink's arg begins with, what a sink specification names
 * (weir__sink_def), the built-in null and print sinks, the line buffer of
 * the text sinks (linebuf.c) and the operation log of the idempotent ones
 * (oplog.c). */
#ifndef WEIR_SINK_IMPL_H
#define WEIR_SINK_IMPL_H

#include "weir/sink.h"
#include "weir/sinks.h"

/* The part every sink's arg begins with (a connector's own arg struct
 * embeds it first). Owned by the job (weir_job_adopt), read-only at run
 * time, shared by the node's subtasks (and their commit threads). */
typedef struct weir__sink_arg {
  weir_format_fn fmt; /* never NULL */
  weir_opid_fn opid;  /* content operation ids; NULL: write-ahead ids */
} weir__sink_arg;

/* What a sink specification names: how to take its arg out of the
 * specification and which vtable to add. The table of specifications maps
 * schemes to these (connectors/registry.c). */
typedef struct weir__sink_def {
  const char *name;    /* as in "the http sink" */
  const char *library; /* the client library it needs, for the message without it */
  /* Nonzero if weir was built with `library` (may initialise it: called
   * on the thread building the job). NULL: always available. */
  int (*available)(void);
  size_t arg_size; /* its arg struct, which begins with a weir__sink_arg */
  /* Fills a (zeroed, arg_size bytes) from spec. Returns 0 or WEIR_ESINK
   * with a message in err (errlen bytes). NULL: spec holds nothing more. */
  int (*parse)(const char *spec, weir__sink_arg *a, char *err, size_t errlen);
  /* Frees a and what parse put in it, also after parse failed. */
  void (*free)(void *a);
  /* A two-phase destination (weir_sink_twophase) or a plain sink
   * (weir_sink); neither where `available` says no (a weir built without
   * the library never adds it). */
  const weir_sink_dest_vt *dest;
  const weir_operator_vt *sink;
} weir__sink_def;

extern const weir__sink_def weir__null_sink;  /* null.c */
extern const weir__sink_def weir__print_sink; /* print.c */

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
/* For a sink with write-ahead operation ids (no content id function), in
 * open: fails with WEIR_EMISMATCH (exit 2) when the run rewinds the job
 * (weir_ctx_rewound_from): the epochs after the restored checkpoint were
 * applied, and would be applied again under new epoch numbers. 0 if not. */
int weir__refuse_rewind(weir_ctx *ctx);

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
