/* nats_stage.c: owns the stage edge's batch and handle formats
 * (nats_stage.h): cutting what a sink subtask writes into per-task batches,
 * and reading batches and handles back with every length checked.
 */
#include "nats_stage.h"

#include <string.h>

#include "base/alloc.h"
#include "weir/error.h"

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) {
  return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

void weir__stage_out_init(weir__stage_out *o, uint32_t tasks) {
  memset(o, 0, sizeof *o);
  o->tasks = tasks;
  o->open = weir_calloc(tasks, sizeof *o->open);
  o->nopen = weir_calloc(tasks, sizeof *o->nopen);
}

void weir__stage_out_free(weir__stage_out *o) {
  for (uint32_t i = 0; o->open && i < o->tasks; i++) weir_sink_buf_free(&o->open[i]);
  weir_free(o->open);
  weir_free(o->nopen);
  weir_sink_buf_free(&o->closed);
  memset(o, 0, sizeof *o);
}

/* Moves task `to`'s open batch to the closed ones. */
static void close_batch(weir__stage_out *o, uint32_t to) {
  weir_sink_buf_u32(&o->closed, to);
  weir_sink_buf_u32(&o->closed, o->nopen[to]);
  weir_sink_buf_u32(&o->closed, (uint32_t)o->open[to].len);
  weir_sink_buf_put(&o->closed, o->open[to].data, o->open[to].len);
  o->open[to].len = 0;
  o->nopen[to] = 0;
  o->nclosed++;
}

int weir__stage_out_add(weir_ctx *ctx, weir__stage_out *o, const weir_record *r) {
  size_t need = 20u + r->len;
  if (need > WEIR__STAGE_BATCH_BYTES)
    return weir_ctx_fail(ctx, WEIR_ETOOBIG,
                         "sink '%s': a record of %u bytes is over a stage batch (%u bytes)",
                         weir_ctx_name(ctx), r->len, WEIR__STAGE_BATCH_BYTES);
  uint32_t to = weir_ctx_key_owner(ctx, r->key, o->tasks);
  weir_sink_buf *b = &o->open[to];
  if (o->nopen[to] == WEIR__STAGE_BATCH_RECORDS || b->len + need > WEIR__STAGE_BATCH_BYTES)
    close_batch(o, to);
  weir_sink_buf_u64(b, r->key);
  weir_sink_buf_u64(b, (uint64_t)r->ts);
  weir_sink_buf_u32(b, r->len);
  if (r->len) weir_sink_buf_put(b, r->payload, r->len);
  o->nopen[to]++;
  return 0;
}

static void put_batch(weir_sink_buf *out, uint32_t to, uint32_t from, uint64_t epoch,
                      uint32_t index, uint32_t flags, uint32_t producers, uint32_t tasks,
                      uint32_t records, const uint8_t *data, uint32_t len) {
  weir_sink_buf_u32(out, to);
  weir_sink_buf_u32(out, WEIR__STAGE_HEADER + len);
  weir_sink_buf_put(out, "WSB1", 4);
  weir_sink_buf_u32(out, from);
  weir_sink_buf_u64(out, epoch);
  weir_sink_buf_u32(out, index);
  weir_sink_buf_u32(out, flags);
  weir_sink_buf_u32(out, producers);
  weir_sink_buf_u32(out, tasks);
  weir_sink_buf_u32(out, records);
  if (len) weir_sink_buf_put(out, data, len);
}

int weir__stage_out_take(weir__stage_out *o, uint32_t from, uint32_t producers, uint64_t epoch,
                         weir_sink_buf *out) {
  for (uint32_t to = 0; to < o->tasks; to++)
    if (o->nopen[to]) close_batch(o, to);
  if (!o->nclosed && !o->ended) return 1;
  uint32_t n = o->nclosed + (o->ended ? o->tasks : 0);
  weir_sink_buf_put(out, "WSH1", 4);
  weir_sink_buf_u32(out, n);
  uint32_t *index = weir_calloc(o->tasks, sizeof *index);
  for (size_t off = 0; off < o->closed.len;) {
    const uint8_t *p = o->closed.data + off;
    uint32_t to = rd32(p), records = rd32(p + 4), len = rd32(p + 8);
    put_batch(out, to, from, epoch, index[to]++, 0, producers, o->tasks, records, p + 12, len);
    off += 12u + len;
  }
  if (o->ended)
    for (uint32_t to = 0; to < o->tasks; to++)
      put_batch(out, to, from, epoch, index[to]++, WEIR__STAGE_END, producers, o->tasks, 0, NULL,
                0);
  weir_free(index);
  o->closed.len = 0;
  o->nclosed = 0;
  o->ended = 0;
  return 0;
}

int weir__stage_batch_parse(const uint8_t *p, size_t len, weir__stage_batch *b) {
  if (len < WEIR__STAGE_HEADER || memcmp(p, "WSB1", 4) != 0) return WEIR_ECORRUPT;
  b->data = p;
  b->len = (uint32_t)len;
  b->from = rd32(p + 4);
  b->epoch = rd64(p + 8);
  b->index = rd32(p + 16);
  b->flags = rd32(p + 20);
  b->producers = rd32(p + 24);
  b->tasks = rd32(p + 28);
  b->records = rd32(p + 32);
  if (!b->producers || b->from >= b->producers || !b->tasks) return WEIR_ECORRUPT;
  return 0;
}

int weir__stage_batch_next(const weir__stage_batch *b, size_t *off, weir_record *r) {
  if (*off == b->len) return 0;
  if (b->len - *off < 20) return WEIR_ECORRUPT;
  const uint8_t *p = b->data + *off;
  uint32_t n = rd32(p + 16);
  if (b->len - *off - 20 < n) return WEIR_ECORRUPT;
  *r = (weir_record){
      .key = rd64(p), .ts = (int64_t)rd64(p + 8), .payload = n ? p + 20 : NULL, .len = n};
  *off += 20u + n;
  return 1;
}

int weir__stage_handle_next(const uint8_t *h, size_t len, size_t *off, uint32_t *count,
                            weir__stage_batch *b) {
  if (*off == 0) {
    if (len < 8 || memcmp(h, "WSH1", 4) != 0) return WEIR_ECORRUPT;
    *count = rd32(h + 4);
    *off = 8;
  }
  if (*count == 0) return *off == len ? 0 : WEIR_ECORRUPT;
  if (len - *off < 8) return WEIR_ECORRUPT;
  uint32_t to = rd32(h + *off), n = rd32(h + *off + 4);
  if (len - *off - 8 < n) return WEIR_ECORRUPT;
  int rc = weir__stage_batch_parse(h + *off + 8, n, b);
  if (rc < 0) return rc;
  b->to = to;
  *off += 8u + n;
  (*count)--;
  return 1;
}
