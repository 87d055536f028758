/* ctx.c: owns operator contexts: their creation, the accessors of the API,
 * failure messages, named counters, and the weir_state_* and
 * weir_broadcast_* calls. */
#include "task_ctx.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "snapshot/lease.h"
#include "snapshot/store.h"
#include "batch.h"
#include "hash.h"
#include "task.h"
#include "task_time.h"

weir_ctx *weir__ctx_create(weir__task *t, weir__node *node, uint32_t subtask) {
  weir_ctx *c = weir_aligned_alloc(sizeof *c);
  memset(c, 0, sizeof *c);
  c->task = t;
  c->node = node;
  c->job = t->job;
  c->subtask = subtask;
  c->parallelism = (uint32_t)node->parallelism;
  c->max_record = t->job->opts.max_record_bytes;
  c->keyed = node->keyed;
  c->salt = weir__mix64(0x5eed0000ULL + node->index);
  c->seq_parent = ~0ULL;
  weir__state_init(&c->state);
  weir__timers_ctx_init(c);
  return c;
}

void weir__ctx_destroy(weir_ctx *c) {
  if (!c) return;
  if (c->restore_chan) { /* channel state that never got installed */
    weir_subtask_snapshot_free(c->restore_chan);
    weir_free(c->restore_chan);
  }
  if (c->restore) { /* a restore that never got installed (the run failed first) */
    weir_subtask_snapshot_free(c->restore);
    weir_free(c->restore);
  }
  weir__state_close(&c->state);
  weir__bytes_close(&c->bcast);
  weir__timers_ctx_free(c);
  weir__batch_destroy(c->link);
  weir_free(c);
}

int weir__ctx_report(weir_ctx *c, int err, const char *what) {
  weir__job_failed(c->job, err, "operator '%s' subtask %u (%s): %s", c->node->name, c->subtask,
                   what,
                   c->msg[0]                          ? c->msg
                   : c->declined && c->decline_msg[0] ? c->decline_msg
                                                      : weir_strerror(err));
  return err;
}

/* Whether err is a WEIR_E* code: one of weir's own, or -errno but for -1
 * (weir/job.h, "What callbacks return", says why). */
static int is_error_code(int err) {
  switch (err) {
#define WEIR__ERR_CASE(name, value, msg) case value:
    WEIR_ERRNO_MAP(WEIR__ERR_CASE)
#undef WEIR__ERR_CASE
    return 1;
  default:
    return err < -1 && err > -4096;
  }
}

int weir__ctx_result(weir_ctx *c, int rc, int most, const char *what, const char *ok) {
  if (rc >= 0 && rc <= most) return rc;
  if (rc < 0 && is_error_code(rc)) return weir__ctx_report(c, rc, what);
  /* A message the operator gave still says why it failed; without one,
   * say how a callback fails. */
  const char *hint = rc < 0 ? " (to fail, return weir_ctx_fail(ctx, WEIR_EOPERATOR, \"why\"))" : "";
  weir__job_failed(c->job, WEIR_EOPERATOR,
                   "operator '%s' subtask %u (%s): returned %d, not %s or a negative WEIR_E* error "
                   "code%s%s",
                   c->node->name, c->subtask, what, rc, ok, c->msg[0] ? ": " : hint,
                   c->msg[0] ? c->msg : "");
  return WEIR_EOPERATOR;
}

uint32_t weir_ctx_subtask(const weir_ctx *c) {
  return c->subtask + c->job->task * c->parallelism;
}
uint32_t weir_ctx_parallelism(const weir_ctx *c) {
  return c->job->tasks ? c->parallelism * c->job->tasks : c->parallelism;
}
const char *weir_ctx_name(const weir_ctx *c) {
  return c->node->name;
}
void *weir_ctx_arg(const weir_ctx *c) {
  return c->node->arg;
}
void *weir_ctx_user(const weir_ctx *c) {
  return c->user;
}
void weir_ctx_set_user(weir_ctx *c, void *user) {
  c->user = user;
}
uint32_t weir_ctx_max_record(const weir_ctx *c) {
  return c->max_record;
}
uint32_t weir_ctx_key_owner(const weir_ctx *c, uint64_t key, uint32_t parallelism) {
  uint32_t m = (uint32_t)c->job->opts.max_parallelism;
  if (!parallelism) return 0;
  return weir__kg_subtask(weir__key_group(key, m), m, parallelism);
}
int weir_ctx_checkpointing(const weir_ctx *c) {
  return c->job->opts.state_dir != NULL;
}
int weir_ctx_restoring(const weir_ctx *c) {
  return c->restore != NULL;
}
uint32_t weir_ctx_state_version(const weir_ctx *c) {
  return c->restore ? c->restore->state_version : c->restored_version;
}
void weir_ctx_select_parent(weir_ctx *c, uint64_t parent_id, int64_t ts) {
  c->cur_id = parent_id;
  c->cur_ts = ts;
}
uint64_t weir_ctx_restored_checkpoint(const weir_ctx *c) {
  return c->job->restoring;
}
uint64_t weir_ctx_rewound_from(const weir_ctx *c) {
  return c->job->rewound_from;
}
int weir_ctx_stopping(const weir_ctx *c) {
  return atomic_load_explicit(&c->job->stopping, memory_order_relaxed);
}
int weir_ctx_input_stopped(const weir_ctx *c) {
  return c->task->stopped;
}
uint64_t weir_ctx_epoch(const weir_ctx *c) {
  return weir_lease_epoch(c->job->lease);
}
int weir_ctx_owner_check(weir_ctx *c) {
  return c->job->lease ? weir_lease_check(c->job->lease) : 0;
}
void weir_ctx_wake_after(weir_ctx *c, uint64_t us) {
  c->wake_after_us = us ? us : 1;
}
void weir_ctx_wake(weir_ctx *c) {
  weir__task_wake(c->task);
}
const char *weir_ctx_job_id(const weir_ctx *c) {
  return c->job->info.job_id;
}

int weir_ctx_fail(weir_ctx *c, int err, const char *fmt, ...) {
  if (!c->msg[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
  }
  return err;
}

int weir_ctx_decline(weir_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->decline_msg, sizeof c->decline_msg, fmt, ap);
  va_end(ap);
  /* Outside a snapshot callback the WEIR_ECKPT it returns fails the job
   * (weir__ctx_report says this message). */
  c->declined = 1;
  return WEIR_ECKPT;
}

void weir_ctx_count(weir_ctx *c, const char *name, uint64_t n) {
  unsigned k = atomic_load_explicit(&c->ncounters, memory_order_relaxed);
  for (unsigned i = 0; i < k; i++) {
    if (c->counters[i].name == name || strcmp(c->counters[i].name, name) == 0) {
      atomic_fetch_add_explicit(&c->counters[i].value, n, memory_order_relaxed);
      return;
    }
  }
  if (k == WEIR__MAX_COUNTERS) return; /* documented limit: extra names are dropped */
  c->counters[k].name = name;
  atomic_store_explicit(&c->counters[k].value, n, memory_order_relaxed);
  /* Release: a reader that sees the new count sees the name and value. */
  atomic_store_explicit(&c->ncounters, k + 1, memory_order_release);
}

uint64_t weir_source_record_id(const weir_ctx *c, uint32_t split, uint64_t offset) {
  return weir__mix64(((uint64_t)c->node->index << 32) | split) + offset;
}

/* ---- keyed state ---------------------------------------------------------- */

/* Why a keyed call is refused: the operator is not keyed, or it runs a
 * broadcast input's record, which belongs to no key (docs/event-time.md
 * §7.2): state written there would sit under whatever key came last, on
 * every subtask at once. */
static int no_key(weir_ctx *c) {
  if (!c->keyed) return WEIR_ENOTKEYED;
  return weir_ctx_fail(c, WEIR_ESTATE,
                       "keyed state in process2/process_batch2 of a broadcast input: its records "
                       "belong to no key (use weir_broadcast_*, or visit keyed state with "
                       "weir_state_each_*)");
}

/* One test on the fast path for both conditions of no_key. */
#define NEED_KEYED(c)                                                                              \
  do {                                                                                             \
    if (__builtin_expect(!(c)->keyed || (c)->in_bcast, 0)) return no_key(c);                       \
  } while (0)
/* Read-only visits: allowed on a broadcast input too. */
#define NEED_KEYED_VISIT(c)                                                                        \
  do {                                                                                             \
    if (!(c)->keyed) return WEIR_ENOTKEYED;                                                        \
  } while (0)

int weir_state_get_u64(weir_ctx *c, uint64_t key, uint64_t *out) {
  NEED_KEYED(c);
  uint64_t *v = weir__u64_find(&c->state.u, key);
  *out = v ? *v : 0;
  return v != NULL;
}

/* A new u64 key the map's guard refused (state.h, weir__key_guard). */
static int key_refused(weir_ctx *c, uint64_t key) {
  uint32_t m = c->guard.max_par, kg = weir__key_group(key, m);
  if (c->key_known)
    return weir_ctx_fail(c, WEIR_EINVAL,
                         "u64 state key %llu (key group %u) is not the key of the record being "
                         "processed (%llu, key group %u): u64 state moves with its key on a "
                         "rescale, so it must be the record's key; keep other state in the "
                         "byte-string map",
                         (unsigned long long)key, kg, (unsigned long long)c->cur_key,
                         weir__key_group(c->cur_key, m));
  return weir_ctx_fail(c, WEIR_EINVAL,
                       "u64 state key %llu (key group %u) belongs to subtask %u, not %u: u64 "
                       "state moves with its key on a rescale, so it must be the key of a record "
                       "this subtask receives; keep other state in the byte-string map",
                       (unsigned long long)key, kg, weir__kg_subtask(kg, m, c->parallelism),
                       c->subtask);
}

int weir_state_put_u64(weir_ctx *c, uint64_t key, uint64_t value) {
  NEED_KEYED(c);
  uint64_t *v = weir__u64_upsert(&c->state.u, key);
  if (!v) return key_refused(c, key);
  *v = value;
  return 0;
}

int weir_state_add_u64(weir_ctx *c, uint64_t key, uint64_t delta, uint64_t *out) {
  NEED_KEYED(c);
  uint64_t *v = weir__u64_upsert(&c->state.u, key);
  if (!v) return key_refused(c, key);
  *v += delta;
  if (out) *out = *v;
  return 0;
}

int weir_state_del_u64(weir_ctx *c, uint64_t key) {
  NEED_KEYED(c);
  weir__u64_del(&c->state.u, key);
  return 0;
}

void weir_state_prefetch_u64(weir_ctx *c, uint64_t key) {
  weir__u64_prefetch(&c->state.u, key);
}
void weir_state_prefetch_bytes(weir_ctx *c, const void *k, size_t klen, int entry) {
  weir__bytes_prefetch(&c->state.b, k, klen, entry);
}

void weir_state_select(weir_ctx *c, uint64_t record_key) {
  if (c->timer_batch) {
    weir__timers_select(c, record_key);
    return;
  }
  c->cur_key = record_key;
  c->key_known = 1;
}

int weir_state_get_bytes(weir_ctx *c, const void *k, size_t klen, const void **val, size_t *vlen) {
  NEED_KEYED(c);
  weir__bent *e = weir__bytes_find(&c->state.b, k, klen);
  *val = e ? weir__bent_val(e) : NULL;
  *vlen = e ? e->vlen : 0;
  return e != NULL;
}

int weir_state_put_bytes(weir_ctx *c, const void *k, size_t klen, const void *val, size_t vlen) {
  NEED_KEYED(c);
  if (klen > UINT32_MAX || vlen > UINT32_MAX) return WEIR_EINVAL;
  weir__bytes_put(&c->state.b, c->cur_key, k, klen, val, vlen);
  return 0;
}

int weir_state_update_bytes(weir_ctx *c, const void *k, size_t klen, size_t vlen, void **val,
                            int64_t *old_len) {
  NEED_KEYED(c);
  if (klen > UINT32_MAX || vlen > UINT32_MAX) return WEIR_EINVAL;
  int64_t was;
  weir__bent *e = weir__bytes_upsert(&c->state.b, c->cur_key, k, klen, vlen, &was);
  *val = weir__bent_val(e);
  if (old_len) *old_len = was;
  return was >= 0;
}

int weir_state_del_bytes(weir_ctx *c, const void *k, size_t klen) {
  NEED_KEYED(c);
  weir__bytes_del(&c->state.b, k, klen);
  return 0;
}

int weir_state_each_bytes(weir_ctx *c,
                          int (*fn)(void *user, uint64_t record_key, const void *k, size_t klen,
                                    const void *v, size_t vlen),
                          void *user) {
  NEED_KEYED_VISIT(c);
  weir__bmap *m = &c->state.b;
  for (uint64_t i = 0; i < m->cap; i++) {
    /* Entries are separate allocations, visited in slot order: each one a
     * cache miss once the state outgrows the cache (Nexmark q18's visit at
     * its end, 1.5M entries, a tenth of its run). The entry some slots
     * ahead is fetched while this one is visited; its first two lines
     * hold the header, the key and a short value. */
    if (i + 8 < m->cap) {
      const weir__bent *a = weir__bytes_at(m, i + 8);
      if (a) {
        __builtin_prefetch(a, 0, 3);
        __builtin_prefetch((const uint8_t *)a + 64, 0, 3);
      }
    }
    weir__bent *e = weir__bytes_at(m, i);
    if (!e) continue;
    int rc = fn(user, e->route_key, weir__bent_key(e), e->klen, weir__bent_val(e), e->vlen);
    if (rc) return rc;
  }
  return 0;
}

int weir_state_each_u64(weir_ctx *c, int (*fn)(void *user, uint64_t key, uint64_t value),
                        void *user) {
  NEED_KEYED_VISIT(c);
  weir__u64map *m = &c->state.u;
  if (m->has_empty_key) {
    int rc = fn(user, WEIR__U64_EMPTY, m->empty_key_value);
    if (rc) return rc;
  }
  for (uint64_t i = 0; i < m->cap; i++) {
    if (m->slots[2 * i] == WEIR__U64_EMPTY) continue;
    int rc = fn(user, m->slots[2 * i], m->slots[2 * i + 1]);
    if (rc) return rc;
  }
  return 0;
}

/* ---- namespaced u64 state ---------------------------------------------------- */

/* Why a namespaced call is refused: no keyed operator, a broadcast input,
 * or no current key. An entry belongs to the current key and moves with it
 * on a rescale; without one (process_batch or on_timers before a select,
 * finish, poll, open, snapshot) it would land under whatever key came
 * last. */
static int ns_no_key(weir_ctx *c, const char *call) {
  if (!c->keyed || c->in_bcast) return no_key(c);
  return weir_ctx_fail(c, WEIR_ESTATE,
                       "%s without a current key: namespaced state belongs to the current key "
                       "(process, or call weir_state_select first in process_batch and "
                       "on_timers)",
                       call);
}

/* One unlikely branch on the fast path. key_known alone is not enough:
 * the task sets it in `process` of every operator, keyed or not. */
#define NEED_KEY(c, call)                                                                          \
  do {                                                                                             \
    if (__builtin_expect(!(c)->key_known || !(c)->keyed || (c)->in_bcast, 0))                      \
      return ns_no_key(c, call);                                                                   \
  } while (0)

int weir_state_ns_get_u64(weir_ctx *c, uint64_t ns, uint64_t *out) {
  NEED_KEY(c, "weir_state_ns_get_u64");
  uint64_t *v = weir__wtab_find(&c->state.ns, c->cur_key, ns);
  *out = v ? *v : 0;
  return v != NULL;
}

int weir_state_ns_put_u64(weir_ctx *c, uint64_t ns, uint64_t value) {
  NEED_KEY(c, "weir_state_ns_put_u64");
  int created;
  *weir__wtab_upsert(&c->state.ns, c->cur_key, ns, &created) = value;
  return 0;
}

int weir_state_ns_add_u64(weir_ctx *c, uint64_t ns, uint64_t delta, uint64_t *out) {
  NEED_KEY(c, "weir_state_ns_add_u64");
  int created;
  uint64_t *v = weir__wtab_upsert(&c->state.ns, c->cur_key, ns, &created);
  *v += delta;
  if (out) *out = *v;
  return created;
}

int weir_state_ns_update_u64(weir_ctx *c, uint64_t ns, uint64_t **val) {
  NEED_KEY(c, "weir_state_ns_update_u64");
  int created;
  *val = weir__wtab_upsert(&c->state.ns, c->cur_key, ns, &created);
  return !created;
}

int weir_state_ns_del_u64(weir_ctx *c, uint64_t ns) {
  NEED_KEY(c, "weir_state_ns_del_u64");
  weir__wtab_del(&c->state.ns, c->cur_key, ns);
  return 0;
}

void weir_state_ns_prefetch(weir_ctx *c, uint64_t key, uint64_t ns) {
  weir__wtab_prefetch(&c->state.ns, key, ns);
}

int weir_state_ns_each_u64(weir_ctx *c,
                           int (*fn)(void *user, uint64_t key, uint64_t ns, uint64_t value),
                           void *user) {
  NEED_KEYED_VISIT(c);
  return weir__wtab_each(&c->state.ns, fn, user);
}

/* ---- broadcast state ----------------------------------------------------------- */

/* Broadcast state exists in an operator whose second input broadcasts, and
 * is written only by that input's records: every subtask sees the same
 * broadcast records, so every copy sees the same updates. */
static int bcast_check(weir_ctx *c, const char *call, int write) {
  if (!c->node->bcast_in2)
    return weir_ctx_fail(c, WEIR_ESTATE,
                         "%s: operator '%s' has no broadcast input (broadcast state belongs to "
                         "weir_connect with weir_broadcast(...) as its second input)",
                         call, c->node->name);
  if (write && !c->in_bcast)
    return weir_ctx_fail(c, WEIR_ESTATE,
                         "%s: operator '%s' writes broadcast state outside process2/"
                         "process_batch2: only the broadcast input's records, which every "
                         "subtask sees, keep the subtasks' copies equal",
                         call, c->node->name);
  return 0;
}

int weir_broadcast_get(weir_ctx *c, const void *k, size_t klen, const void **val, size_t *vlen) {
  int rc = bcast_check(c, "weir_broadcast_get", 0);
  if (rc) return rc;
  weir__bent *e = weir__bytes_find(&c->bcast, k, klen);
  *val = e ? weir__bent_val(e) : NULL;
  *vlen = e ? e->vlen : 0;
  return e != NULL;
}

int weir_broadcast_put(weir_ctx *c, const void *k, size_t klen, const void *val, size_t vlen) {
  int rc = bcast_check(c, "weir_broadcast_put", 1);
  if (rc) return rc;
  if (klen > UINT32_MAX || vlen > UINT32_MAX) return WEIR_EINVAL;
  weir__bytes_put(&c->bcast, 0, k, klen, val, vlen);
  return 0;
}

int weir_broadcast_del(weir_ctx *c, const void *k, size_t klen) {
  int rc = bcast_check(c, "weir_broadcast_del", 1);
  if (rc) return rc;
  weir__bytes_del(&c->bcast, k, klen);
  return 0;
}

int weir_broadcast_each(weir_ctx *c,
                        int (*fn)(void *user, const void *k, size_t klen, const void *v,
                                  size_t vlen),
                        void *user) {
  int rc = bcast_check(c, "weir_broadcast_each", 0);
  if (rc) return rc;
  weir__bmap *m = &c->bcast;
  for (uint64_t i = 0; i < m->cap; i++) {
    weir__bent *e = weir__bytes_at(m, i);
    if (!e) continue;
    rc = fn(user, weir__bent_key(e), e->klen, weir__bent_val(e), e->vlen);
    if (rc) return rc;
  }
  return 0;
}
