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
  o->index = weir_calloc(tasks, sizeof *o->index);
}

void weir__stage_out_free(weir__stage_out *o) {
  for (uint32_t i = 0; o->open && i < o->tasks; i++) weir_sink_buf_free(&o->open[i]);
  weir_free(o->open);
  weir_free(o->nopen);
  weir_free(o->index);
  weir_sink_buf_free(&o->handle);
  memset(o, 0, sizeof *o);
}

static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Appends a batch to task `to` to the handle; from, epoch and producers
 * are filled in by take. */
static void put_batch(weir__stage_out *o, uint32_t to, uint32_t flags, uint32_t records,
                      const uint8_t *data, uint32_t len) {
  weir_sink_buf *h = &o->handle;
  if (!h->len) {
    weir_sink_buf_put(h, "WSH1", 4);
    weir_sink_buf_u32(h, 0);
  }
  weir_sink_buf_u32(h, to);
  weir_sink_buf_u32(h, WEIR__STAGE_HEADER + len);
  weir_sink_buf_put(h, "WSB1", 4);
  weir_sink_buf_u32(h, 0); /* from */
  weir_sink_buf_u64(h, 0); /* epoch */
  weir_sink_buf_u32(h, o->index[to]++);
  weir_sink_buf_u32(h, flags);
  weir_sink_buf_u32(h, 0); /* producers */
  weir_sink_buf_u32(h, o->tasks);
  weir_sink_buf_u32(h, records);
  if (len) weir_sink_buf_put(h, data, len);
  o->nclosed++;
}

static void close_batch(weir__stage_out *o, uint32_t to) {
  put_batch(o, to, 0, o->nopen[to], o->open[to].data, (uint32_t)o->open[to].len);
  o->open[to].len = 0;
  o->nopen[to] = 0;
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
  uint8_t head[20]; /* one append per record for the fixed part */
  wr32(head, (uint32_t)r->key);
  wr32(head + 4, (uint32_t)(r->key >> 32));
  wr32(head + 8, (uint32_t)r->ts);
  wr32(head + 12, (uint32_t)((uint64_t)r->ts >> 32));
  wr32(head + 16, r->len);
  weir_sink_buf_put(b, head, sizeof head);
  if (r->len) weir_sink_buf_put(b, r->payload, r->len);
  o->nopen[to]++;
  return 0;
}

int weir__stage_out_take(weir__stage_out *o, uint32_t from, uint32_t producers, uint64_t epoch,
                         weir_sink_buf *out) {
  for (uint32_t to = 0; to < o->tasks; to++)
    if (o->nopen[to]) close_batch(o, to);
  if (o->ended)
    for (uint32_t to = 0; to < o->tasks; to++) put_batch(o, to, WEIR__STAGE_END, 0, NULL, 0);
  if (!o->nclosed) return 1;
  uint8_t *h = o->handle.data;
  wr32(h + 4, o->nclosed);
  for (size_t off = 8; off < o->handle.len;) {
    uint8_t *b = h + off + 8;
    wr32(b + 4, from);
    wr32(b + 8, (uint32_t)epoch);
    wr32(b + 12, (uint32_t)(epoch >> 32));
    wr32(b + 24, producers);
    off += 8u + rd32(h + off + 4);
  }
  if (!out->len) { /* hand the buffer over */
    weir_sink_buf_free(out);
    *out = o->handle;
    memset(&o->handle, 0, sizeof o->handle);
  } else {
    weir_sink_buf_put(out, o->handle.data, o->handle.len);
    o->handle.len = 0;
  }
  memset(o->index, 0, o->tasks * sizeof *o->index);
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

int weir__stage_handle_open(const uint8_t *h, size_t len, size_t *off, uint32_t *count) {
  if (len < 8 || memcmp(h, "WSH1", 4) != 0) return WEIR_ECORRUPT;
  *count = rd32(h + 4);
  *off = 8;
  return 0;
}

int weir__stage_handle_next(const uint8_t *h, size_t len, size_t *off, uint32_t *count,
                            weir__stage_batch *b) {
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
