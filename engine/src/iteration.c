/* iteration.c: owns loops at run time: the head operator, the count of
 * records in flight that tells when a loop is done, and the back-edge log
 * that makes checkpoints of a cyclic dataflow consistent.
 *
 * DESIGN
 * A loop is a head node H, the nodes downstream of it that lead back to it,
 * and feedback (back) edges into H. Aligning on a back edge would deadlock
 * (H waits for a barrier that only H can send round the loop), so H aligns
 * on its regular inputs only, as in the ABS paper's Algorithm 2:
 *
 *   1. barrier n has arrived on every regular input of H (or they ended):
 *      H snapshots, forwards barrier n into the loop, and starts LOGGING;
 *   2. every record that reaches H on a back edge while that edge is logging
 *      is processed as usual and also appended to the log;
 *   3. barrier n comes back on a back edge (the loop's operators forwarded
 *      it): that edge stops logging; end of input on it counts the same;
 *   4. when every back edge stopped, the log is H's state in checkpoint n
 *      (written then, so checkpoint n completes only after it).
 *
 * With parallel heads, barrier n can come back on a back edge before this
 * head took its own snapshot n (another head of the loop was faster). What
 * follows it on that edge was emitted after the cut, so the edge is blocked
 * until this head's snapshot n; it then closes with nothing to log. The
 * edge is unbounded, so blocking it cannot stall its producer.
 *
 * Invariants: the log of n holds exactly the records that were emitted
 * inside the loop before the loop's operators took their snapshot n and
 * that reached H after H took its own, i.e. the records in flight on the
 * back edges across the cut; nothing else of the loop is in flight across
 * it, since forward edges carry barrier n behind everything sent before it.
 * A restore replays the log into the loop before H reads any new input.
 *
 * Feedback channels are unbounded (their producer never waits), because a
 * bounded one can close a cycle of waiting producers; their overflow and
 * the back-edge logs continue in spill files beyond the job's loop memory
 * bound (channel.h, spill.h), so "unbounded" costs disk, not memory. A
 * spilled log is handed to the store mapped from its file. And no single thread
 * can see that a loop is empty, so the loop counts the records in flight on
 * its edges: +1 when a record is emitted onto an in-loop edge, published
 * once the task has processed the batch that produced it (even if the
 * output batch holding it waits to be pushed: a head must not see zero, and
 * take the loop for empty, while another head holds records for the loop)
 * and at the latest before that output batch can be seen downstream; -1
 * when a task has processed a record from an in-loop edge, after publishing
 * what processing it emitted. The count never undercounts, so when it reads
 * 0 after every external input of the head ended, the loop is done: the
 * heads send end of input into the loop, which drains round to them.
 *
 * The tasks' part (the head's duties, the count kept by every task inside
 * a loop) is in iteration_task.c.
 */
#include "iteration.h"

#include <string.h>

#include "base/alloc.h"
#include "base/assert.h"
#include "base/failpoint.h"
#include "snapshot/store.h"
#include "batch.h"
#include "spill.h"
#include "task_ctx.h"

/* ---- the head operator ------------------------------------------------------ */

typedef struct head_state {
  uint8_t *replay;                      /* a restored back-edge log, emitted before new input */
  uint64_t len, off;                    /* its length, and how much of it was emitted */
  void (*release)(uint8_t *, uint64_t); /* how to let go of it (NULL: weir_free) */
} head_state;

static void drop_replay(head_state *h) {
  weir_blob_free(h->replay, h->len, h->release);
  h->replay = NULL;
  h->len = h->off = 0;
  h->release = NULL;
}

static int head_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, weir_calloc(1, sizeof(head_state)));
  return 0;
}

static int head_process_batch(weir_ctx *ctx, const weir_batch *b) {
  for (uint32_t i = 0; i < b->len; i++) {
    weir_record r = weir_batch_record(b, i);
    int rc = weir_emit_record(ctx, &r);
    if (rc < 0) return rc;
  }
  return 0;
}

/* Walks a serialized log from *offp, emitting at most max records into
 * emit_to (if not NULL); returns the records walked, -1 if malformed, -2 if
 * an emit failed. *offp ends after the last record walked. */
static int64_t log_walk(const uint8_t *p, uint64_t len, uint64_t *offp, uint64_t max,
                        weir_ctx *emit_to) {
  uint64_t off = *offp;
  int64_t n = 0;
  while (off < len && (uint64_t)n < max) {
    if (len - off < 28) return -1;
    weir_record r;
    memcpy(&r.key, p + off, 8);
    memcpy(&r.ts, p + off + 8, 8);
    memcpy(&r.id, p + off + 16, 8);
    memcpy(&r.len, p + off + 24, 4);
    off += 28;
    if (len - off < r.len) return -1;
    r.payload = r.len ? p + off : NULL;
    off += r.len;
    if (emit_to && weir_emit_record(emit_to, &r) < 0) return -2;
    n++;
    *offp = off;
  }
  return n;
}

static int head_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  head_state *h = weir_ctx_user(ctx);
  uint64_t n = 0, off = 0;
  void (*release)(uint8_t *, uint64_t) = NULL;
  uint8_t *p = weir__snapshot_take_blob(r, &n, &release);
  drop_replay(h);
  h->replay = p;
  h->len = n;
  h->release = release;
  if (log_walk(p, n, &off, UINT64_MAX, NULL) < 0) {
    drop_replay(h);
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "back-edge log of '%s' is malformed",
                         weir_ctx_name(ctx));
  }
  return 0;
}

static void head_close(weir_ctx *ctx) {
  head_state *h = weir_ctx_user(ctx);
  if (h) drop_replay(h);
  weir_free(h);
  weir_ctx_set_user(ctx, NULL);
}

const weir_operator_vt weir__head_vt = {.size = sizeof(weir_operator_vt),
                                        .name = "iteration-head",
                                        .open = head_open,
                                        .process_batch = head_process_batch,
                                        .restore = head_restore,
                                        .close = head_close};

int weir__head_replay(weir_ctx *ctx, uint64_t max) {
  head_state *h = weir_ctx_user(ctx);
  if (!h || !h->replay) return 0;
  /* For tests only: a negative control that drops the log must give a
   * wrong result (WEIR_FAILPOINTS=iter.skip_replay=error). */
  if (h->off == 0 && weir_failpoint("iter.skip_replay")) h->off = h->len;
  int64_t n = log_walk(h->replay, h->len, &h->off, max, ctx);
  if (n < 0) return WEIR_EIO;
  if (h->off < h->len) return 1;
  drop_replay(h);
  return 0;
}

/* ---- back-edge log ---------------------------------------------------------- */

static void drop_spill(weir__backlog *l) {
  if (!l->spill) return;
  weir__spill_close(l->spill);
  weir_free(l->spill);
  l->spill = NULL;
  l->spilled = 0;
}

void weir__backlog_init(weir__backlog *l, uint32_t nin, const uint8_t *back, uint64_t spill_after,
                        const char *spill_dir) {
  memset(l, 0, sizeof *l);
  l->spill_after = spill_after;
  l->spill_dir = spill_dir;
  l->nin = nin;
  l->back = weir_calloc(nin ? nin : 1, 1);
  l->state = weir_calloc(nin ? nin : 1, 1);
  l->early = weir_calloc(nin ? nin : 1, sizeof *l->early);
  for (uint32_t i = 0; i < nin; i++) {
    l->back[i] = back[i];
    l->nback += back[i] ? 1 : 0;
  }
}

void weir__backlog_close(weir__backlog *l) {
  weir_free(l->back);
  weir_free(l->state);
  weir_free(l->early);
  weir_free(l->log);
  drop_spill(l);
  memset(l, 0, sizeof *l);
}

static weir__log_result check_done(weir__backlog *l) {
  return l->id && l->nclosed == l->nback ? WEIR__LOG_COMPLETE : WEIR__LOG_NONE;
}

weir__log_result weir__backlog_start(weir__backlog *l, uint64_t id) {
  l->id = id;
  l->last = id;
  l->len = l->mem = l->records = 0;
  drop_spill(l); /* a log of a checkpoint given up */
  l->nclosed = 0;
  for (uint32_t i = 0; i < l->nin; i++) {
    if (!l->back[i]) continue;
    if (l->state[i] == 2) {
      l->nclosed++;
    } else if (l->early[i] == id) {
      l->state[i] = 1; /* came back before this snapshot: nothing to log */
      l->early[i] = 0;
      l->nearly--;
      l->nclosed++;
    } else {
      l->state[i] = 0;
      if (l->early[i] && l->early[i] < id) {
        l->early[i] = 0; /* an older checkpoint, given up */
        l->nearly--;
      }
    }
  }
  return check_done(l);
}

/* Nonzero if the record went to the spill file. A log spills once its
 * memory part would pass the bound: what is in memory goes first, then
 * every record, until the file fails (then the rest stays in memory,
 * behind the file's contents). */
static int append_spilled(weir__backlog *l, const uint8_t *hdr, const void *payload, uint32_t len) {
  if (!l->spill_after) return 0;
  if (!l->spill) {
    if (l->mem + 28 + len <= l->spill_after) return 0;
    l->spill = weir_malloc(sizeof *l->spill);
    weir__spill_init(l->spill, l->spill_dir);
    if (weir__spill_write2(l->spill, l->log, (size_t)l->mem, NULL, 0)) return 0;
    l->spilled = l->mem;
    l->mem = 0;
  }
  if (l->mem || weir__spill_write2(l->spill, hdr, 28, payload, len)) return 0;
  l->spilled += 28 + len;
  return 1;
}

void weir__backlog_append(weir__backlog *l, uint64_t key, int64_t ts, uint64_t id,
                          const void *payload, uint32_t len) {
  uint8_t hdr[28];
  memcpy(hdr, &key, 8);
  memcpy(hdr + 8, &ts, 8);
  memcpy(hdr + 16, &id, 8);
  memcpy(hdr + 24, &len, 4);
  l->len += 28 + len;
  l->records++;
  if (append_spilled(l, hdr, payload, len)) return;
  uint64_t need = l->mem + 28 + len;
  if (need > l->cap) {
    uint64_t c = l->cap ? l->cap : 4096;
    while (c < need) c *= 2;
    l->log = weir_realloc(l->log, (size_t)c);
    l->cap = c;
  }
  memcpy(l->log + l->mem, hdr, 28);
  if (len) memcpy(l->log + l->mem + 28, payload, len);
  l->mem = need;
}

void weir__backlog_batch(weir__backlog *l, const weir__batch *b, uint32_t from, uint32_t n) {
  for (uint32_t r = from; r < from + n; r++)
    weir__backlog_append(l, b->keys[r], b->ts[r], b->ids[r], b->data + b->off[r], b->lens[r]);
}

weir__log_result weir__backlog_barrier(weir__backlog *l, uint32_t i, uint64_t id) {
  WEIR_ASSERT(i < l->nin && l->back[i]);
  if (id > l->id && id > l->last) {
    /* Before this head's snapshot of `id`: hold the edge. */
    if (!l->early[i]) l->nearly++;
    l->early[i] = id;
    return WEIR__LOG_BLOCK;
  }
  if (!l->id || id != l->id || l->state[i] != 0) return WEIR__LOG_NONE; /* stale */
  l->state[i] = 1;
  l->nclosed++;
  return check_done(l);
}

weir__log_result weir__backlog_end(weir__backlog *l, uint32_t i) {
  WEIR_ASSERT(i < l->nin && l->back[i]);
  int was_open = l->id && l->state[i] == 0;
  l->state[i] = 2;
  if (!was_open) return WEIR__LOG_NONE;
  l->nclosed++;
  return check_done(l);
}

static void unmap_log(uint8_t *p, uint64_t len) {
  weir__spill_unmap(p, len);
}

uint8_t *weir__backlog_take(weir__backlog *l, uint64_t *len, void (**release)(uint8_t *, uint64_t),
                            int *err) {
  uint8_t *p = l->log;
  *len = l->len;
  *release = NULL;
  *err = 0;
  if (l->spilled) {
    if (!l->mem) {
      /* All of it in the file: the store reads it through a mapping. */
      uint64_t n;
      p = weir__spill_map(l->spill, &n, err);
      WEIR_ASSERT(!p || n == l->len);
      *release = unmap_log;
    } else {
      /* The file failed part-way: join its contents and the memory tail. */
      p = weir_malloc((size_t)l->len);
      *err = weir__spill_read(l->spill, p, (size_t)l->spilled);
      if (*err) {
        weir_free(p);
        p = NULL;
      } else {
        memcpy(p + l->spilled, l->log, (size_t)l->mem);
      }
    }
    weir_free(l->log);
  }
  drop_spill(l);
  l->log = NULL;
  l->len = l->mem = l->cap = l->records = 0;
  l->id = 0;
  return p;
}
