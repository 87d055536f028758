/* watermark.c: the watermark generator of a source subtask and the valve
 * of a task's inputs, as pure state machines (watermark.h). */
#include "watermark.h"

#include <string.h>

#include "base/alloc.h"

#define MS_NS 1000000ull
#define DEFAULT_INTERVAL_MS 200u

/* ---- the generator ------------------------------------------------------- */

void weir__wmgen_init(weir__wmgen *g, const weir_watermark_strategy *s, uint64_t now_ns) {
  memset(g, 0, sizeof *g);
  g->disorder = s->out_of_orderness;
  g->interval_ns = (uint64_t)(s->interval_ms ? s->interval_ms : DEFAULT_INTERVAL_MS) * MS_NS;
  g->idle_ns = (uint64_t)s->idle_timeout_ms * MS_NS;
  g->out = WEIR_WATERMARK_MIN;
  g->next_tick = now_ns + g->interval_ns;
  weir__wmgen_split(g, 0, now_ns);
  g->named = 0;
}

void weir__wmgen_free(weir__wmgen *g) {
  weir_free(g->splits);
  g->splits = NULL;
  g->nsplits = g->cap = 0;
}

void weir__wmgen_split(weir__wmgen *g, uint32_t split, uint64_t now_ns) {
  if (!g->named) {
    /* The first split the source names: the implicit split 0 of a source
     * that has emitted nothing yet was not a split of its own. */
    g->named = 1;
    if (split != 0 && !g->splits[0].fresh && g->splits[0].max_ts == WEIR_WATERMARK_MIN)
      g->splits[0].ended = 1;
  }
  if (split >= g->nsplits) {
    if (split >= g->cap) {
      uint32_t cap = g->cap ? g->cap : 4;
      while (cap <= split) cap *= 2;
      g->splits = weir_realloc(g->splits, cap * sizeof *g->splits);
      g->cap = cap;
    }
    /* A split begins when it is first named: it holds event time back
     * from then on, until it emits, goes idle or ends. */
    for (uint32_t i = g->nsplits; i <= split; i++)
      g->splits[i] = (weir__wm_split){WEIR_WATERMARK_MIN, now_ns, 0, i != split};
    g->nsplits = split + 1;
  }
  g->splits[split].ended = 0;
  g->cur = split;
}

void weir__wmgen_split_end(weir__wmgen *g, uint32_t split) {
  if (split < g->nsplits) g->splits[split].ended = 1;
}

/* max_ts - D - 1, without wrapping below the minimum. */
static int64_t bound_of(int64_t max_ts, int64_t d) {
  if (max_ts == WEIR_WATERMARK_MIN) return WEIR_WATERMARK_MIN;
  if (max_ts < WEIR_WATERMARK_MIN + d + 1) return WEIR_WATERMARK_MIN;
  return max_ts - d - 1;
}

weir__wm_result weir__wmgen_tick(weir__wmgen *g, uint64_t now_ns, int force) {
  if (!force && now_ns < g->next_tick) return WEIR__WM_NONE;
  g->next_tick = now_ns + g->interval_ns;
  int live = 0;
  int64_t wm = WEIR_WATERMARK_MAX;
  for (uint32_t i = 0; i < g->nsplits; i++) {
    weir__wm_split *s = &g->splits[i];
    if (s->ended) continue;
    if (s->fresh) {
      s->fresh = 0;
      s->active_ns = now_ns;
    } else if (g->idle_ns && now_ns - s->active_ns >= g->idle_ns) {
      continue; /* idle */
    }
    live = 1;
    int64_t b = bound_of(s->max_ts, g->disorder);
    if (b < wm) wm = b;
  }
  if (!live) {
    /* Every split idle (or ended: the source ends by its end of input). */
    if (g->idle) return WEIR__WM_NONE;
    g->idle = 1;
    return WEIR__WM_GONE_IDLE;
  }
  int was_idle = g->idle;
  g->idle = 0;
  if (wm > g->out) {
    g->out = wm;
    return WEIR__WM_ADVANCE;
  }
  /* Active again, perhaps behind what it sent: restate that. */
  return was_idle ? WEIR__WM_ADVANCE : WEIR__WM_NONE;
}

uint64_t weir__wmgen_until_tick(const weir__wmgen *g, uint64_t now_ns) {
  return g->next_tick > now_ns ? g->next_tick - now_ns : 0;
}

/* ---- the valve ----------------------------------------------------------- */

void weir__valve_init(weir__valve *v, uint32_t n) {
  memset(v, 0, sizeof *v);
  v->n = n;
  v->wm = weir_malloc((n ? n : 1) * sizeof *v->wm);
  v->st = weir_calloc(n ? n : 1, 1);
  for (uint32_t i = 0; i < n; i++) v->wm[i] = WEIR_WATERMARK_MIN;
  v->out = WEIR_WATERMARK_MIN;
}

void weir__valve_free(weir__valve *v) {
  weir_free(v->wm);
  weir_free(v->st);
  memset(v, 0, sizeof *v);
}

void weir__valve_exclude(weir__valve *v, uint32_t i) {
  v->st[i] = WEIR__VIN_EXCLUDED;
}

/* Recomputes out and idleness after an input changed. */
static weir__wm_result settle(weir__valve *v) {
  int active = 0, idle = 0, ended = 0, caught = 0;
  int64_t min = WEIR_WATERMARK_MAX;
  for (uint32_t i = 0; i < v->n; i++) {
    switch (v->st[i]) {
    case WEIR__VIN_ACTIVE:
      active = 1;
      if (v->wm[i] >= v->out) {
        caught = 1;
        if (v->wm[i] < min) min = v->wm[i];
      }
      break;
    case WEIR__VIN_IDLE:
      idle = 1;
      break;
    case WEIR__VIN_ENDED:
      ended = 1;
      break;
    default:
      break;
    }
  }
  int was_idle = v->idle;
  if (!active && idle) {
    v->idle = 1;
    return was_idle ? WEIR__WM_NONE : WEIR__WM_GONE_IDLE;
  }
  v->idle = 0;
  if (!active) {
    /* Every input ended (or none carries event time). */
    if (!ended || v->out == WEIR_WATERMARK_MAX) return was_idle ? WEIR__WM_ADVANCE : WEIR__WM_NONE;
    v->out = WEIR_WATERMARK_MAX;
    return WEIR__WM_ADVANCE;
  }
  if (caught && min > v->out) {
    v->out = min;
    return WEIR__WM_ADVANCE;
  }
  return was_idle ? WEIR__WM_ADVANCE : WEIR__WM_NONE;
}

weir__wm_result weir__valve_watermark(weir__valve *v, uint32_t i, int64_t wm) {
  if (v->st[i] == WEIR__VIN_ENDED || v->st[i] == WEIR__VIN_EXCLUDED) return WEIR__WM_NONE;
  if (wm > v->wm[i]) v->wm[i] = wm;
  v->st[i] = WEIR__VIN_ACTIVE;
  return settle(v);
}

weir__wm_result weir__valve_idle(weir__valve *v, uint32_t i) {
  if (v->st[i] != WEIR__VIN_ACTIVE) return WEIR__WM_NONE;
  v->st[i] = WEIR__VIN_IDLE;
  return settle(v);
}

weir__wm_result weir__valve_ended(weir__valve *v, uint32_t i) {
  if (v->st[i] == WEIR__VIN_ENDED || v->st[i] == WEIR__VIN_EXCLUDED) return WEIR__WM_NONE;
  v->st[i] = WEIR__VIN_ENDED;
  v->wm[i] = WEIR_WATERMARK_MAX;
  return settle(v);
}

int weir__valve_check(const weir__valve *v, int64_t prev_out) {
  if (v->out < prev_out) return -1;
  int active = 0, idle = 0, all_ended = 1;
  for (uint32_t i = 0; i < v->n; i++) {
    if (v->st[i] > WEIR__VIN_EXCLUDED) return -2;
    if (v->st[i] == WEIR__VIN_ACTIVE) active = 1;
    if (v->st[i] == WEIR__VIN_IDLE) idle = 1;
    if (v->st[i] == WEIR__VIN_ENDED && v->wm[i] != WEIR_WATERMARK_MAX) return -3;
    if (v->st[i] != WEIR__VIN_ENDED && v->st[i] != WEIR__VIN_EXCLUDED) all_ended = 0;
  }
  if (v->idle != (!active && idle)) return -4;
  if (all_ended && v->n && v->out != WEIR_WATERMARK_MAX) {
    /* Only when at least one input ended (not all excluded). */
    for (uint32_t i = 0; i < v->n; i++)
      if (v->st[i] == WEIR__VIN_ENDED) return -5;
  }
  return 0;
}
