/* gen.c: owns weir_gen, the deterministic record generator source.
 *
 * DESIGN. Subtask s of P emits the records i = s, s + P, s + 2P, ... below
 * `records` (forever when records is 0): key = i mod keys, timestamp = i, no
 * payload, id = weir_source_record_id(ctx, s, i). The generator is the
 * source of the headline counter benchmark, so run() is one tight loop over
 * weir_emit_record() with no division per record: the key advances by a
 * precomputed step (P mod keys) and wraps with one compare.
 *
 * Rate limiting. With rate R over all subtasks each subtask emits R/P records
 * per second, as the exact fraction: record i is due i / R seconds after the
 * subtask's first run(), so the P subtasks take turns and the job as a whole
 * emits one record every 1/R seconds (at 10 records/s over two subtasks,
 * each emits one record every 200 ms, 100 ms apart). run() emits what is
 * due (at most its budget) and, when it has caught up, returns
 * WEIR_SOURCE_IDLE and asks to be woken when the next chunk is due. A chunk
 * is what falls due in about a millisecond, at least one record, so low
 * rates come out record by record and 10 M records/s as ~10,000 records a
 * millisecond, without a wake-up per record. A subtask that fell more than
 * a second behind (stalled by backpressure) forgets the backlog instead of
 * bursting.
 *
 * Position. The per-subtask state is the next i (weir_ctx_user). job.h has
 * no snapshot writer API yet, so the source cannot checkpoint its position:
 * see the snapshot note at gen_vt.
 */
#include "weir/operators.h"

#include <string.h>

#include "weir/alloc.h"
#include "weir/clock.h"

/* The generator's options, copied and owned by the job (weir_job_adopt). */
typedef struct gen_arg {
  uint64_t records; /* 0 = never ends */
  uint64_t keys;    /* >= 1 */
  uint64_t rate;    /* records/s over all subtasks, 0 = unlimited */
} gen_arg;

/* One subtask's position; owned by the subtask's thread. */
typedef struct gen_state {
  uint64_t next;    /* the next i to emit */
  uint64_t key;     /* next % keys */
  uint64_t step;    /* P, the distance between this subtask's i */
  uint64_t kstep;   /* P % keys */
  uint64_t split;   /* this subtask's index */
  uint64_t end;     /* this subtask's end of input, UINT64_MAX when unbounded */
  uint64_t emitted; /* records emitted since `t0` (rate limiting) */
  uint64_t t0;      /* monotonic ns of the first run(), 0 before */
  uint64_t chunk;   /* records per wake-up at the configured rate */
} gen_state;

#define NS_PER_S 1000000000ull
/* Wake-up period at low and moderate rates: one chunk per millisecond. */
#define CHUNK_NS 1000000ull

__extension__ typedef unsigned __int128 u128;

static int gen_open(weir_ctx *ctx) {
  const gen_arg *a = weir_ctx_arg(ctx);
  uint64_t p = weir_ctx_parallelism(ctx);
  uint64_t s = weir_ctx_subtask(ctx);
  gen_state *g = weir_calloc(1, sizeof *g);
  g->next = s;
  g->key = s % a->keys;
  g->step = p;
  g->kstep = p % a->keys;
  g->split = s;
  g->end = a->records ? a->records : UINT64_MAX;
  if (a->rate) {
    /* Records per CHUNK_NS for this subtask: R * CHUNK_NS / (P * 1e9). */
    u128 c = (u128)a->rate * CHUNK_NS / ((u128)p * NS_PER_S);
    g->chunk = c == 0 ? 1 : c > UINT32_MAX ? UINT32_MAX : (uint64_t)c;
  }
  weir_ctx_set_user(ctx, g);
  return 0;
}

/* Records of subtask `split` due `ns` after t0 at rate R over P subtasks.
 * Record k of the subtask is i = k * P + split, due at i / R seconds, so the
 * subtasks take turns and together emit one record every 1/R seconds. */
static uint64_t due_at(uint64_t ns, uint64_t rate, uint64_t p, uint64_t split) {
  u128 num = (u128)ns * rate, off = (u128)split * NS_PER_S;
  if (num < off) return 0;
  u128 n = (num - off) / ((u128)p * NS_PER_S) + 1;
  return n > UINT64_MAX ? UINT64_MAX : (uint64_t)n;
}

/* The time (ns after t0) at which record k (0-based) of subtask `split` is
 * due: the first time at which due_at() exceeds k. */
static uint64_t time_of(uint64_t k, uint64_t rate, uint64_t p, uint64_t split) {
  u128 num = ((u128)k * p + split) * NS_PER_S;
  u128 t = (num + rate - 1) / rate;
  return t > UINT64_MAX ? UINT64_MAX : (uint64_t)t;
}

/* Emits n records from g's position; returns 0 or the first emit error. */
static int emit_n(weir_ctx *ctx, gen_state *g, uint64_t keys, uint64_t n) {
  weir_record r;
  memset(&r, 0, sizeof r);
  uint64_t i = g->next, key = g->key, k = 0;
  const uint64_t step = g->step, kstep = g->kstep;
  const uint32_t split = (uint32_t)g->split;
  int rc = 0;
  for (; k < n; k++) {
    r.key = key;
    r.ts = (int64_t)i;
    r.id = weir_source_record_id(ctx, split, i);
    rc = weir_emit_record(ctx, &r);
    if (rc < 0) break;
    i += step;
    key += kstep;
    if (key >= keys) key -= keys;
  }
  g->emitted += k;
  g->next = i;
  g->key = key;
  return rc;
}

static int gen_run(weir_ctx *ctx, uint32_t budget) {
  const gen_arg *a = weir_ctx_arg(ctx);
  gen_state *g = weir_ctx_user(ctx);
  if (weir_ctx_stopping(ctx) || g->next >= g->end) return WEIR_SOURCE_DONE;

  /* Records left for this subtask, then what budget and rate allow. */
  uint64_t left = g->end == UINT64_MAX ? UINT64_MAX : (g->end - g->next - 1) / g->step + 1;
  uint64_t n = budget ? budget : 1;
  if (n > left) n = left;
  if (a->rate) {
    uint64_t now = weir_clock_mono_ns();
    if (g->t0 == 0) g->t0 = now;
    uint64_t due = due_at(now - g->t0, a->rate, g->step, g->split);
    uint64_t backlog = a->rate / g->step + 1; /* a second's worth */
    if (due > g->emitted + backlog + n) {
      /* Far behind (stalled): forget the backlog rather than burst. */
      g->t0 = now - time_of(g->emitted, a->rate, g->step, g->split);
      due = g->emitted + 1;
    }
    if (due <= g->emitted) {
      /* Ahead: sleep until the next chunk (or what is left) is due. */
      uint64_t chunk = g->chunk < left ? g->chunk : left;
      uint64_t at = time_of(g->emitted + chunk - 1, a->rate, g->step, g->split);
      uint64_t elapsed = now - g->t0;
      uint64_t us = at > elapsed ? (at - elapsed + 999) / 1000 : 1;
      weir_ctx_wake_after(ctx, us);
      return WEIR_SOURCE_IDLE;
    }
    if (due - g->emitted < n) n = due - g->emitted;
  }
  int rc = emit_n(ctx, g, a->keys, n);
  if (rc < 0) return rc;
  return g->next >= g->end ? WEIR_SOURCE_DONE : WEIR_SOURCE_MORE;
}

static void gen_close(weir_ctx *ctx) {
  weir_free(weir_ctx_user(ctx));
  weir_ctx_set_user(ctx, NULL);
}

/* No snapshot/restore yet: job.h declares weir_snapshot_writer/reader but no
 * call to write or read through them. With one, snapshot would write g->next
 * and restore would set it (and key = next % keys). */
static const weir_source_vt gen_vt = {
    .name = "gen",
    .open = gen_open,
    .run = gen_run,
    .close = gen_close,
};

static void gen_arg_free(void *p) {
  weir_free(p);
}

weir_stream *weir_gen(weir_job *job, const char *name, const weir_gen_opts *opts, int parallelism) {
  if (!job) return NULL;
  if (!opts) {
    weir_job_fail(job, WEIR_EINVAL, "weir_gen '%s': opts is NULL", name ? name : "?");
    return NULL;
  }
  gen_arg *a = weir_malloc(sizeof *a);
  a->records = opts->records;
  a->keys = opts->keys ? opts->keys : 1;
  a->rate = opts->rate;
  if (weir_job_adopt(job, a, gen_arg_free) < 0) return NULL;
  return weir_source(job, name, &gen_vt, a, parallelism);
}
