/* gen.c: owns weir_gen, the deterministic record generator source.
 *
 * DESIGN. The records i = 0 .. records-1 (forever when records is 0) have
 * key = i mod keys, timestamp = i, no payload. They are divided into a fixed
 * number of splits, WEIR_GEN_SPLITS, independent of the parallelism: split j
 * holds i = j, j + S, j + 2S, ... Subtask s of P owns the splits j with
 * j mod P == s and emits from them in turn, one record each, so with P = 1
 * the records come out in order 0, 1, 2, ... and with P dividing S subtask s
 * emits exactly the i with i mod P == s. A record's id is
 * weir_source_record_id(ctx, j, i). The position of a split is its next i;
 * checkpoints store one position per split, so a restore continues each
 * split where the cut left it, whichever subtask owns it then.
 *
 * The generator is the source of the headline counter benchmark, so run()
 * is one tight loop with no division per record: each split keeps its next
 * key, advanced by S mod keys and wrapped with one compare.
 *
 * Rate limiting. With rate R over all subtasks a subtask owning n of the S
 * splits emits R*n/S records per second: record k of the subtask is due
 * k*S/(R*n) seconds after its first run(). run() emits what is due (at most
 * its budget) and, when it has caught up, returns WEIR_SOURCE_IDLE and asks
 * to be woken when the next chunk is due. A chunk is what falls due in
 * about a millisecond, at least one record, so low rates come out record by
 * record and high rates without a wake-up per record. A subtask that fell
 * more than a second behind (stalled by backpressure) forgets the backlog
 * instead of bursting.
 *
 * Event time (weir_gen_timed). The same records, with the timestamps of
 * the formula in weir/operators.h instead of ts = i, and each split a
 * watermark split of its own (weir_source_split): every owned split is
 * named at open, so that one that has not emitted yet holds event time
 * back, and ended when it is exhausted. Per-split watermarks are what keep
 * a restore exact: after a rescale a subtask may own splits that the cut
 * left at different positions, and emitting them in turn would put the
 * lagging ones behind a watermark that the leading ones set. Within a
 * split the base times grow, so with bound D a record that is not chosen
 * late is never behind its split's watermark. The counter job's path
 * (ts = i, no split names) is unchanged.
 *
 * Bursts (session_gap_ms > 0) change the keys, never the timestamps: a
 * per-key pause made in event time would have to exceed the gap, hence
 * the disorder bound, and put the paused key's records behind the
 * watermark; moving a resting key's records to a key that is on keeps
 * every split's timestamps (and so its watermark) as they were, and
 * emits every record, so --records still counts what comes out. The key
 * is computed per record (a few splitmix64 per record: a test and demo
 * generator, not the counter's hot loop, which keeps its running key).
 */
#include "weir/operators.h"

#include <stddef.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"

/* The generator's options, copied and owned by the job (weir_job_adopt). */
typedef struct gen_arg {
  uint64_t records; /* 0 = never ends */
  uint64_t keys;    /* >= 1 */
  uint64_t rate;    /* records/s over all subtasks, 0 = unlimited */
  /* weir_gen_timed: the timestamp formula's parameters (timed = 0: ts = i). */
  int timed;
  uint64_t event_rate; /* E >= 1 */
  uint64_t disorder;   /* D */
  uint64_t late_lag;   /* L */
  uint64_t late_below; /* a record is late when mix(h) >> 11 < this (F * 2^53) */
  uint64_t seed_mix;   /* splitmix64(seed) */
  uint64_t slot_ms;    /* bursts: 2 * session_gap_ms; 0 = no bursts */
} gen_arg;

typedef struct gen_split {
  uint64_t next;   /* the next i of this split */
  uint64_t key;    /* next % keys */
  uint64_t idbase; /* weir_source_record_id(ctx, j, 0): ids are idbase + i */
  uint32_t index;  /* j */
} gen_split;

/* One subtask's position; owned by the subtask's thread. */
typedef struct gen_state {
  uint32_t nlive; /* splits not yet exhausted: s[0 .. nlive-1] */
  uint32_t nsplits;
  uint32_t cur; /* the split to emit from next */
  gen_split *s;
  uint64_t end;     /* records, UINT64_MAX when unbounded */
  uint64_t kstep;   /* S % keys */
  uint64_t emitted; /* records emitted since `t0` (rate limiting) */
  uint64_t t0;      /* monotonic ns of the first run(), 0 before */
  uint64_t chunk;   /* records per wake-up at the configured rate */
} gen_state;

#define NS_PER_S 1000000000ull
/* Wake-up period at low and moderate rates: one chunk per millisecond. */
#define CHUNK_NS 1000000ull
#define S ((uint64_t)WEIR_GEN_SPLITS)

__extension__ typedef unsigned __int128 u128;

/* splitmix64 of x: the finaliser of the state x + golden ratio (the
 * formula in weir/operators.h names it). */
static uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Record i's event time (weir/operators.h, weir_gen_timed). */
static int64_t timed_ts(const gen_arg *a, uint64_t i) {
  u128 base = (u128)i * 1000u / a->event_rate;
  uint64_t h = splitmix64(a->seed_mix ^ i);
  uint64_t back = h % (a->disorder + 1);
  if (a->late_below && (splitmix64(h) >> 11) < a->late_below) back += a->disorder + a->late_lag;
  /* base fits in 63 bits for every i below 2^63 / 1000 (and E >= 1):
   * more records than any run emits. */
  return (int64_t)(uint64_t)base - (int64_t)back;
}

/* Record i's key in burst mode (weir/operators.h, weir_gen_timed): the
 * first key from i mod K on that is on in i's slot, i mod K if none is. A
 * long run of keys that are off is as unlikely as that many coin flips
 * coming up alike, so the probe is short; it ends after K keys. */
static uint64_t burst_key(const gen_arg *a, uint64_t i) {
  uint64_t base = (uint64_t)((u128)i * 1000u / a->event_rate);
  uint64_t slot_mix = splitmix64(base / a->slot_ms);
  uint64_t k0 = i % a->keys, k = k0;
  for (uint64_t n = 0; n < a->keys; n++) {
    if (splitmix64(a->seed_mix ^ splitmix64(k ^ slot_mix)) & 1) return k;
    if (++k == a->keys) k = 0;
  }
  return k0;
}

/* Drops exhausted splits from the rotation (order stays deterministic);
 * with ctx (timed), ends their watermark splits. */
static void prune(gen_state *g, weir_ctx *ctx) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < g->nlive; i++) {
    if (g->s[i].next < g->end)
      g->s[k++] = g->s[i];
    else if (ctx)
      weir_source_split_end(ctx, g->s[i].index);
  }
  g->nlive = k;
  if (g->cur >= g->nlive) g->cur = 0;
}

/* Split j positioned at its record i = next. */
static gen_split split_at(weir_ctx *ctx, const gen_arg *a, uint64_t j, uint64_t next) {
  return (gen_split){next, next % a->keys, weir_source_record_id(ctx, (uint32_t)j, 0), (uint32_t)j};
}

static int gen_open(weir_ctx *ctx) {
  const gen_arg *a = weir_ctx_arg(ctx);
  uint32_t p = weir_ctx_parallelism(ctx), sub = weir_ctx_subtask(ctx);
  gen_state *g = weir_calloc(1, sizeof *g);
  g->end = a->records ? a->records : UINT64_MAX;
  g->kstep = S % a->keys;
  for (uint64_t j = sub; j < S; j += p) g->nsplits++;
  g->s = weir_calloc(g->nsplits ? g->nsplits : 1, sizeof *g->s);
  uint32_t k = 0;
  for (uint64_t j = sub; j < S; j += p) g->s[k++] = split_at(ctx, a, j, j);
  g->nlive = g->nsplits;
  prune(g, a->timed ? ctx : NULL);
  /* Every owned split holds event time back from the start (see DESIGN). */
  if (a->timed)
    for (uint32_t i = 0; i < g->nlive; i++) weir_source_split(ctx, g->s[i].index);
  if (a->rate && g->nsplits) {
    /* Records per CHUNK_NS for this subtask: R * n * CHUNK_NS / (S * 1e9). */
    u128 c = (u128)a->rate * g->nsplits * CHUNK_NS / ((u128)S * NS_PER_S);
    g->chunk = c == 0 ? 1 : c > UINT32_MAX ? UINT32_MAX : (uint64_t)c;
  }
  weir_ctx_set_user(ctx, g);
  return 0;
}

/* Records this subtask may have emitted `ns` after t0. */
static uint64_t due_at(uint64_t ns, uint64_t rate, uint64_t n) {
  u128 d = (u128)ns * rate * n / ((u128)S * NS_PER_S);
  return d > UINT64_MAX ? UINT64_MAX : (uint64_t)d;
}

/* The first time (ns after t0) at which due_at() reaches k. */
static uint64_t time_of(uint64_t k, uint64_t rate, uint64_t n) {
  u128 num = (u128)k * S * NS_PER_S, den = (u128)rate * n;
  u128 t = (num + den - 1) / den;
  return t > UINT64_MAX ? UINT64_MAX : (uint64_t)t;
}

/* Emits up to n records from g's splits; returns 0 or the first emit error. */
static int emit_n(weir_ctx *ctx, gen_state *g, const gen_arg *a, uint64_t n) {
  weir_record r;
  memset(&r, 0, sizeof r);
  int rc = 0;
  uint64_t k = 0, keys = a->keys;
  weir_ctx *timed = a->timed ? ctx : NULL;
  while (k < n && g->nlive) {
    gen_split *sp = &g->s[g->cur];
    r.key = sp->key;
    if (timed) {
      r.ts = timed_ts(a, sp->next);
      if (a->slot_ms) r.key = burst_key(a, sp->next);
      weir_source_split(ctx, sp->index);
    } else {
      r.ts = (int64_t)sp->next;
    }
    r.id = sp->idbase + sp->next; /* consecutive within a split (weir/job.h) */
    rc = weir_emit_record(ctx, &r);
    if (rc < 0) break;
    k++;
    sp->key += g->kstep;
    if (sp->key >= keys) sp->key -= keys;
    sp->next += S;
    if (sp->next >= g->end || sp->next < S /* wrapped: unbounded ran out of u64 */) {
      sp->next = g->end;
      prune(g, timed);
      continue;
    }
    if (++g->cur == g->nlive) g->cur = 0;
  }
  g->emitted += k;
  return rc;
}

static int gen_run(weir_ctx *ctx, uint32_t budget) {
  const gen_arg *a = weir_ctx_arg(ctx);
  gen_state *g = weir_ctx_user(ctx);
  if (weir_ctx_stopping(ctx) || !g->nlive) return WEIR_SOURCE_DONE;
  uint64_t n = budget ? budget : 1;
  if (a->rate) {
    uint64_t now = weir_clock_mono_ns();
    if (g->t0 == 0) g->t0 = now;
    uint64_t due = due_at(now - g->t0, a->rate, g->nsplits) + 1;
    uint64_t backlog = a->rate * g->nsplits / S + 1; /* a second's worth */
    if (due > g->emitted + backlog + n) {
      /* Far behind (stalled): forget the backlog rather than burst. */
      g->t0 = now - time_of(g->emitted, a->rate, g->nsplits);
      due = g->emitted + 1;
    }
    if (due <= g->emitted) {
      /* Ahead: sleep until the next chunk is due. */
      uint64_t at = time_of(g->emitted + g->chunk - 1, a->rate, g->nsplits);
      uint64_t elapsed = now - g->t0;
      uint64_t us = at > elapsed ? (at - elapsed + 999) / 1000 : 1;
      weir_ctx_wake_after(ctx, us);
      return WEIR_SOURCE_IDLE;
    }
    if (due - g->emitted < n) n = due - g->emitted;
  }
  int rc = emit_n(ctx, g, a, n);
  if (rc < 0) return rc;
  return g->nlive ? WEIR_SOURCE_MORE : WEIR_SOURCE_DONE;
}

/* Position of every owned split: its next i (the end when exhausted). */
static int gen_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  gen_state *g = weir_ctx_user(ctx);
  const gen_arg *a = weir_ctx_arg(ctx);
  uint32_t p = weir_ctx_parallelism(ctx), sub = weir_ctx_subtask(ctx);
  /* Exhausted splits were pruned: they are at the end. */
  for (uint64_t j = sub; j < S; j += p) {
    uint64_t next = a->records ? a->records : UINT64_MAX;
    for (uint32_t i = 0; i < g->nlive; i++)
      if (g->s[i].index == j) next = g->s[i].next;
    if (a->records && next > a->records) next = a->records;
    int rc = weir_snapshot_position(w, (uint32_t)j, next);
    if (rc < 0) return rc;
  }
  return 0;
}

static int gen_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  gen_state *g = weir_ctx_user(ctx);
  const gen_arg *a = weir_ctx_arg(ctx);
  uint32_t p = weir_ctx_parallelism(ctx), sub = weir_ctx_subtask(ctx);
  uint32_t k = 0;
  for (uint64_t j = sub; j < S; j += p) {
    uint64_t next = j;
    if (weir_snapshot_get_position(r, (uint32_t)j, &next) && next % S != j && next < g->end)
      return weir_ctx_fail(ctx, WEIR_ECORRUPT,
                           "generator split %llu: position %llu is not one of its records",
                           (unsigned long long)j, (unsigned long long)next);
    g->s[k++] = split_at(ctx, a, j, next);
  }
  g->nlive = k;
  g->cur = 0;
  prune(g, a->timed ? ctx : NULL);
  return 0;
}

static void gen_close(weir_ctx *ctx) {
  gen_state *g = weir_ctx_user(ctx);
  if (g) weir_free(g->s);
  weir_free(g);
  weir_ctx_set_user(ctx, NULL);
}

static const weir_source_vt gen_vt = {
    .size = sizeof(weir_source_vt),
    .name = "gen",
    .rescalable = 1, /* splits are fixed (WEIR_GEN_SPLITS), whatever P */
    .open = gen_open,
    .run = gen_run,
    .close = gen_close,
    .snapshot = gen_snapshot,
    .restore = gen_restore,
};

static void gen_arg_free(void *p) {
  weir_free(p);
}

/* The generator's options, adopted by the job; NULL after a build error. */
static gen_arg *gen_arg_new(weir_job *job, const char *name, const weir_gen_opts *opts) {
  if (!opts) {
    weir_job_fail(job, WEIR_EINVAL, "weir_gen '%s': opts is NULL", name ? name : "?");
    return NULL;
  }
  gen_arg *a = weir_calloc(1, sizeof *a);
  a->records = opts->records;
  a->keys = opts->keys ? opts->keys : 1;
  a->rate = opts->rate;
  if (weir_job_adopt(job, a, gen_arg_free) < 0) return NULL;
  return a;
}

weir_stream *weir_gen(weir_job *job, const char *name, const weir_gen_opts *opts, int parallelism) {
  if (!job) return NULL;
  gen_arg *a = gen_arg_new(job, name, opts);
  return a ? weir_source(job, name, &gen_vt, a, parallelism) : NULL;
}

weir_stream *weir_gen_timed(weir_job *job, const char *name, const weir_gen_opts *opts,
                            const weir_gen_time *t, int parallelism) {
  if (!job) return NULL;
  /* A struct sized before session_gap_ms is taken without bursts. */
  weir_gen_time tt;
  memset(&tt, 0, sizeof tt);
  const size_t old_size = offsetof(weir_gen_time, session_gap_ms);
  if (t && t->size >= old_size) memcpy(&tt, t, t->size < sizeof tt ? t->size : sizeof tt);
  const char *why = !t                   ? "time options are NULL"
                    : t->size < old_size ? "weir_gen_time without its size"
                    : !(tt.late_fraction >= 0.0 && tt.late_fraction <= 1.0)
                        ? "late_fraction must be within 0 .. 1"
                    : tt.disorder_ms > INT64_MAX / 4    ? "disorder_ms is too large"
                    : tt.late_lag_ms > INT64_MAX / 4    ? "late_lag_ms is too large"
                    : tt.session_gap_ms > INT64_MAX / 4 ? "session_gap_ms is too large"
                                                        : NULL;
  if (why) {
    weir_job_fail(job, WEIR_EINVAL, "weir_gen_timed '%s': %s", name ? name : "?", why);
    return NULL;
  }
  gen_arg *a = gen_arg_new(job, name, opts);
  if (!a) return NULL;
  a->timed = 1;
  a->event_rate = tt.event_rate ? tt.event_rate : 10 * a->keys;
  if (a->event_rate == 0) a->event_rate = 1; /* 10 * keys wrapped */
  a->disorder = tt.disorder_ms;
  a->late_lag = tt.late_lag_ms ? tt.late_lag_ms : 1000;
  /* F * 2^53, exact for the fractions a double holds; F = 1 makes every
   * record late (the top 53 bits are always below 2^53). */
  a->late_below = (uint64_t)(tt.late_fraction * 9007199254740992.0);
  a->seed_mix = splitmix64(tt.seed);
  a->slot_ms = 2 * tt.session_gap_ms;
  weir_watermark_strategy ws = {.size = sizeof ws,
                                .out_of_orderness = (int64_t)tt.disorder_ms,
                                .interval_ms = tt.watermark_interval_ms};
  return weir_with_watermarks(weir_source(job, name, &gen_vt, a, parallelism), &ws);
}
