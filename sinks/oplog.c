/* oplog.c: owns the operation log of the idempotent sinks (http, nats):
 * the records of an open epoch, kept as the operations a commit sends, and
 * the handle that pre-commit stores and commit reads back.
 *
 * Handle: u32 count, then per operation u32 length + the formatted record,
 * u32 length + its content id (length 0: none, the operation id is then
 * derived from the subtask that wrote it (weir_sink_commit.origin), epoch and
 * index). Little-endian.
 */
#include <stdio.h>
#include <string.h>

#include "sink_impl.h"
#include "base/alloc.h"

/* Formats r with fn into scratch (grown as asked) and appends it to the
 * log as u32 length + bytes. */
static int put_text(weir_ctx *ctx, weir__oplog *l, weir_format_fn fn, const weir_record *r) {
  weir_sink_buf *s = &l->scratch;
  if (s->cap == 0) {
    s->cap = 256;
    s->data = weir_malloc(s->cap);
  }
  size_t n = fn(r, (char *)s->data, s->cap);
  if (n >= s->cap) {
    s->cap = n + 1;
    s->data = weir_realloc(s->data, s->cap);
    if (fn(r, (char *)s->data, s->cap) != n)
      return weir_ctx_fail(ctx, WEIR_EINVAL, "sink '%s': a formatter contradicted itself",
                           weir_ctx_name(ctx));
  }
  if (n > UINT32_MAX) return WEIR_ETOOBIG;
  weir_sink_buf_u32(&l->open, (uint32_t)n);
  weir_sink_buf_put(&l->open, s->data, n);
  return 0;
}

int weir__oplog_add(weir_ctx *ctx, weir__oplog *l, weir_format_fn fmt, weir_opid_fn opid,
                    const weir_record *r) {
  if (l->n == UINT32_MAX) return WEIR_ETOOBIG;
  int rc = put_text(ctx, l, fmt, r);
  if (rc < 0) return rc;
  if (opid)
    rc = put_text(ctx, l, opid, r);
  else
    weir_sink_buf_u32(&l->open, 0);
  l->n++;
  return rc;
}

int weir__oplog_take(weir__oplog *l, weir_sink_buf *out) {
  if (!l->n) return 1;
  weir_sink_buf_u32(out, l->n);
  weir_sink_buf_put(out, l->open.data, l->open.len);
  l->open.len = 0;
  l->n = 0;
  return 0;
}

void weir__oplog_free(weir__oplog *l) {
  weir_sink_buf_free(&l->open);
  weir_sink_buf_free(&l->scratch);
  l->n = 0;
}

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int weir__oplog_open(const weir_sink_commit *c, weir__oplog_reader *rd) {
  memset(rd, 0, sizeof *rd);
  if (c->len < 4) return WEIR_ECORRUPT;
  rd->c = c;
  rd->n = get_u32(c->handle);
  rd->off = 4;
  return 0;
}

/* One u32-length-prefixed field at rd->off. */
static int field(weir__oplog_reader *rd, const uint8_t **p, uint32_t *len) {
  const weir_sink_commit *c = rd->c;
  if (c->len - rd->off < 4) return WEIR_ECORRUPT;
  *len = get_u32(c->handle + rd->off);
  if (c->len - rd->off - 4 < *len) return WEIR_ECORRUPT;
  *p = c->handle + rd->off + 4;
  rd->off += 4 + (size_t)*len;
  return 0;
}

int weir__oplog_next(weir__oplog_reader *rd, weir__op *op) {
  const weir_sink_commit *c = rd->c;
  const uint8_t *content;
  uint32_t clen;
  if (field(rd, &op->body, &op->blen) < 0 || field(rd, &content, &clen) < 0) return WEIR_ECORRUPT;
  op->index = rd->i++;
  if (clen)
    snprintf(op->id, sizeof op->id, "%s/%s/c/%.*s", c->job_id, c->sink, (int)clen,
             (const char *)content);
  else
    snprintf(op->id, sizeof op->id, "%s/%s/w/%u/%llu/%llu", c->job_id, c->sink, (unsigned)c->origin,
             (unsigned long long)c->epoch, (unsigned long long)op->index);
  return 0;
}

int weir__refuse_rewind(weir_ctx *ctx) {
  uint64_t latest = weir_ctx_rewound_from(ctx);
  if (!latest) return 0;
  return weir_ctx_fail(
      ctx, WEIR_EMISMATCH,
      "sink '%s': restoring checkpoint %llu rewinds a job that had completed checkpoint %llu, "
      "and this sink's operation ids are formed from epochs (write-ahead ids): the effects of "
      "the epochs after %llu were applied and would be applied again under new epoch numbers. "
      "Restore the latest checkpoint (or savepoint), or give the sink's records content ids "
      "(an id function)",
      weir_ctx_name(ctx), (unsigned long long)weir_ctx_restored_checkpoint(ctx),
      (unsigned long long)latest, (unsigned long long)weir_ctx_restored_checkpoint(ctx));
}
