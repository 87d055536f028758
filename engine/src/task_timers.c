/* task_timers.c: owns an operator subtask's timers in its task: the
 * weir_timer_* calls, firing them (on_timer / on_timers, with the key and
 * the emission ids set), arming the task's wake-up for processing time,
 * and their part in checkpoints (docs/event-time.md §5.4).
 *
 * DESIGN
 * Timers fire on the task's thread, between input batches: event-time
 * timers when the task's clock advances (before the watermark goes on
 * downstream, so that what they emit precedes it), processing-time timers
 * at the start of a step once the wall clock passed them (the task's
 * libuv timer wakes it for the earliest), and any timer registered at or
 * below its clock right after the callback that registered it. Whatever
 * an operator emits from a timer runs through the rest of the chain
 * before the next input batch.
 */
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "hash.h"
#include "snapshot/store.h"
#include "task_step.h"
#include "task_time.h"
#include "timers.h"

void weir__timers_ctx_init(weir_ctx *c) {
  uint32_t f = c->node->op_flags;
  if (f & WEIR_OP_EVENT_TIMERS) {
    c->tm[WEIR_EVENT_TIME] = weir_malloc(sizeof(weir__timers));
    weir__timers_init(c->tm[WEIR_EVENT_TIME]);
  }
  if (f & WEIR_OP_PROCESSING_TIMERS) {
    c->tm[WEIR_PROCESSING_TIME] = weir_malloc(sizeof(weir__timers));
    weir__timers_init(c->tm[WEIR_PROCESSING_TIME]);
  }
}

void weir__timers_ctx_free(weir_ctx *c) {
  for (int d = 0; d < 2; d++) {
    if (!c->tm[d]) continue;
    weir__timers_free(c->tm[d]);
    weir_free(c->tm[d]);
    c->tm[d] = NULL;
  }
}

/* ---- the API ------------------------------------------------------------------ */

static const char *domain_name(weir_time_domain d) {
  return d == WEIR_EVENT_TIME ? "event-time" : "processing-time";
}

/* The current key's timers of domain d, or NULL with the error in *rc. */
static weir__timers *timers_of(weir_ctx *c, weir_time_domain d, int64_t ts, int *rc) {
  if (!c->keyed) {
    *rc = WEIR_ENOTKEYED;
    return NULL;
  }
  if ((unsigned)d > WEIR_PROCESSING_TIME || ts == WEIR__TS_NONE) {
    *rc =
        weir_ctx_fail(c, WEIR_EINVAL, "timer: %s",
                      ts == WEIR__TS_NONE ? "timestamp WEIR_WATERMARK_MIN" : "no such time domain");
    return NULL;
  }
  if (!c->tm[d]) {
    *rc = weir_ctx_fail(
        c, WEIR_ESTATE, "%s timer, but the operator did not declare %s (weir_process_opts)",
        domain_name(d),
        d == WEIR_EVENT_TIME ? "WEIR_OP_EVENT_TIMERS" : "WEIR_OP_PROCESSING_TIMERS");
    return NULL;
  }
  if (c->in_bcast) {
    *rc = weir_ctx_fail(c, WEIR_ESTATE,
                        "timer in process2/process_batch2 of a broadcast input: its records "
                        "belong to no key");
    return NULL;
  }
  if (!c->key_known) {
    *rc = weir_ctx_fail(c, WEIR_ESTATE,
                        "timer without a current key: a timer belongs to a key (call "
                        "weir_state_select first in process_batch and on_timers)");
    return NULL;
  }
  return c->tm[d];
}

int weir_timer_register(weir_ctx *c, weir_time_domain d, int64_t ts) {
  int rc = 0;
  weir__timers *tm = timers_of(c, d, ts, &rc);
  if (!tm) return rc;
  weir__timers_add(tm, c->cur_key, ts);
  return 0;
}

void weir_timer_prefetch(weir_ctx *c, weir_time_domain d, uint64_t key, int64_t ts) {
  if ((unsigned)d <= WEIR_PROCESSING_TIME && c->tm[d]) weir__timers_prefetch(c->tm[d], key, ts);
}

int weir_timer_delete(weir_ctx *c, weir_time_domain d, int64_t ts) {
  int rc = 0;
  weir__timers *tm = timers_of(c, d, ts, &rc);
  if (!tm) return rc;
  weir__timers_del(tm, c->cur_key, ts);
  return 0;
}

int64_t weir_ctx_processing_time(const weir_ctx *c) {
  (void)c;
  return weir_clock_wall_ms();
}

/* ---- firing ------------------------------------------------------------------- */

void weir__timers_select(weir_ctx *c, uint64_t key) {
  c->cur_key = key;
  c->key_known = 1;
  if (c->timer_domain == WEIR_EVENT_TIME)
    c->cur_id = weir__mix64(c->salt ^ 0x7133e7a1ULL ^
                            weir__mix64(key ^ weir__mix64((uint64_t)c->timer_ts)));
  else
    c->cur_id = weir__mix64(c->poll_nonce + ++c->poll_seq);
}

typedef struct fire_arg {
  weir_ctx *c;
  weir_time_domain d;
} fire_arg;

static int fire_group(void *arg, int64_t ts, const uint64_t *keys, uint32_t n) {
  fire_arg *f = arg;
  weir_ctx *c = f->c;
  const weir_operator_vt *vt = c->node->ovt;
  c->timer_ts = ts;
  c->timer_domain = (uint8_t)f->d;
  c->cur_ts = f->d == WEIR_EVENT_TIME ? ts : weir__time_after_clock(c->task);
  int rc = 0;
  if (vt->on_timers) {
    weir_timer_batch tb = {n, ts, f->d, keys};
    c->timer_batch = 1;
    c->key_known = 0;
    rc = vt->on_timers(c, &tb);
    c->timer_batch = 0;
    if (rc) rc = weir__ctx_result(c, rc, 0, "on_timers", "0");
  } else {
    for (uint32_t i = 0; i < n && !rc; i++) {
      weir__timers_select(c, keys[i]);
      weir_timer tmr = {keys[i], ts, f->d};
      rc = vt->on_timer(c, &tmr);
      if (rc) rc = weir__ctx_result(c, rc, 0, "on_timer", "0");
    }
  }
  c->key_known = 0;
  return rc;
}

/* Fires operator i's timers of domain d at or below upto, then runs what
 * they emitted through the rest of the chain. */
static int fire(weir__task *t, uint32_t i, weir_time_domain d, int64_t upto) {
  weir_ctx *c = t->ops[i];
  weir__timers *tm = c->tm[d];
  if (!tm || !tm->hn || tm->heap[0] > upto) return 0;
  fire_arg f = {c, d};
  int rc = weir__timers_fire(tm, upto, c->node->ovt->on_timers ? 1024 : 64, fire_group, &f);
  if (!rc) rc = weir__task_chain_flush(t, i);
  return rc;
}

int weir__timers_fire_event(weir__task *t) {
  if (!t->has_timers) return 0;
  for (uint32_t i = 0; i < t->nops; i++) {
    int rc = fire(t, i, WEIR_EVENT_TIME, t->clock);
    if (rc) return rc;
  }
  return 0;
}

int weir__timers_due(weir__task *t) {
  if (!t->has_timers) return 0;
  int64_t now = INT64_MIN;
  for (uint32_t i = 0; i < t->nops; i++) {
    weir_ctx *c = t->ops[i];
    int rc = fire(t, i, WEIR_EVENT_TIME, t->clock);
    weir__timers *p = c->tm[WEIR_PROCESSING_TIME];
    if (!rc && p && p->hn) {
      if (now == INT64_MIN) now = weir_clock_wall_ms();
      rc = fire(t, i, WEIR_PROCESSING_TIME, now);
    }
    if (rc) return rc;
  }
  return 0;
}

int weir__timers_end(weir__task *t, uint32_t i) {
  weir_ctx *c = t->ops[i];
  /* Every timer there is fires, and those they register up to the latest
   * of them: an operator that re-registers a timer from its own firing
   * (a periodic one) would otherwise never let the end come. */
  for (int d = 0; d < 2; d++) {
    int64_t upto = c->tm[d] ? weir__timers_latest(c->tm[d]) : WEIR__TS_NONE;
    if (upto == WEIR__TS_NONE) continue;
    int rc = fire(t, i, (weir_time_domain)d, upto);
    if (rc) return rc;
  }
  return 0;
}

void weir__timers_arm(weir__task *t) {
  int64_t next = INT64_MAX;
  for (uint32_t i = 0; i < t->nops; i++) {
    const weir__timers *p = t->ops[i]->tm[WEIR_PROCESSING_TIME];
    if (p && p->hn && p->heap[0] < next) next = p->heap[0];
  }
  if (next == INT64_MAX) return;
  int64_t now = weir_clock_wall_ms();
  /* The armed wake-up came (early, too: the wall clock is not the loop's):
   * arm again for what is next. */
  if (!weir__task_wake_pending(t)) t->proc_armed = INT64_MAX;
  if (next >= t->proc_armed) return;
  t->proc_armed = next;
  if (next <= now)
    weir__task_wake(t);
  else
    weir__task_wake_after(t, (uint64_t)(next - now) * 1000u);
}

/* ---- checkpoints -------------------------------------------------------------- */

typedef struct copy_arg {
  weir_subtask_snapshot *s;
  uint8_t domain;
} copy_arg;

static void copy_one(void *arg, uint64_t key, int64_t ts) {
  copy_arg *a = arg;
  weir_subtask_snapshot *s = a->s;
  s->tm_keys[s->n_timers] = key;
  s->tm_ts[s->n_timers] = ts;
  s->tm_domain[s->n_timers++] = a->domain;
}

void weir__timers_snapshot(weir_ctx *c, weir_subtask_snapshot *s) {
  if (c->node->op_flags & WEIR_OP_EVENT_TIME) {
    s->has_clock = 1;
    s->clock = c->task->clock;
  }
  uint64_t n = 0;
  for (int d = 0; d < 2; d++) n += c->tm[d] ? c->tm[d]->n : 0;
  if (!n) return;
  s->tm_keys = weir_malloc(n * sizeof *s->tm_keys);
  s->tm_ts = weir_malloc(n * sizeof *s->tm_ts);
  s->tm_domain = weir_malloc(n);
  for (int d = 0; d < 2; d++) {
    copy_arg a = {s, (uint8_t)d};
    if (c->tm[d]) weir__timers_each(c->tm[d], copy_one, &a);
  }
}

int weir__timers_restore(weir_ctx *c, const weir_subtask_snapshot *s) {
  if (s->has_clock && (c->node->op_flags & WEIR_OP_EVENT_TIME) && s->clock > c->task->clock)
    c->task->clock = s->clock;
  /* A negative control for the tests: with this failpoint's `error`, the
   * subtask's restored timers are dropped (its windows then never fire),
   * so that a test can show its exact-output check sees lost timers. */
  if (s->n_timers && weir_failpoint("timers.skip_restore")) return 0;
  for (uint64_t i = 0; i < s->n_timers; i++) {
    uint8_t d = s->tm_domain[i];
    if (d > WEIR_PROCESSING_TIME || s->tm_ts[i] == WEIR__TS_NONE)
      return weir_ctx_fail(c, WEIR_ECORRUPT, "checkpoint holds a timer of domain %u at %lld", d,
                           (long long)s->tm_ts[i]);
    if (!c->tm[d])
      return weir_ctx_fail(c, WEIR_EPLAN,
                           "the checkpoint holds %s timers of this operator, which no longer "
                           "declares them (weir_process_opts): they would be lost",
                           domain_name((weir_time_domain)d));
    if (!weir__timers_add(c->tm[d], s->tm_keys[i], s->tm_ts[i]))
      return weir_ctx_fail(c, WEIR_ECORRUPT, "checkpoint holds the timer (%llu, %lld) twice",
                           (unsigned long long)s->tm_keys[i], (long long)s->tm_ts[i]);
  }
  return 0;
}
