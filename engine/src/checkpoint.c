/* checkpoint.c: owns the task side of checkpoints: the synchronous part of
 * a snapshot (copying each operator's managed state and calling its
 * snapshot callback), handing it to the store as the asynchronous part,
 * acknowledging to the coordinator, telling operators about completed and
 * aborted checkpoints, and installing restored state.
 *
 * DESIGN
 * The copy is taken on the task's own thread at the moment of the cut (after
 * alignment, before the barrier is forwarded), so the snapshot reflects
 * exactly the records before the barrier on every input. Keyed u64 state
 * is a copy-on-write view, read by the store's reader threads or, when the
 * workers take every core (job.c, views_on_tasks), by the task itself once
 * it has forwarded the barrier (weir__task_write_held). Serialising and
 * writing happen on the store-writer thread. A write is reported to the
 * checkpoint coordinator (coordinator.c) twice, under the job's ck_mu: when
 * it is queued (the coordinator queues the commit right behind the last
 * one, so the store commits as soon as the writes are durable, in the same
 * transaction as the last of them, without a round trip through the
 * coordinator) and when the store's completion callback acknowledges it.
 * The coordinator thread is woken only when the coordinator has a step to
 * take; an acknowledgement for a checkpoint that is no longer pending
 * (aborted by timeout, or superseded) is dropped.
 */
#include "checkpoint.h"

#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "snapshot/store.h"
#include "chanstate.h"
#include "iteration.h"
#include "job.h"
#include "restore.h"
#include "task.h"
#include "task_time.h"

struct weir_snapshot_writer {
  uint8_t *blob;
  uint64_t len, cap;
  weir_snap_position *pos;
  uint32_t npos, pcap;
};

struct weir_snapshot_reader {
  weir_subtask_snapshot *snap;
};

int weir_snapshot_write(weir_snapshot_writer *w, const void *data, size_t len) {
  if (w->len + len > w->cap) {
    uint64_t n = w->cap ? w->cap : 256;
    while (n < w->len + len) n *= 2;
    w->blob = weir_realloc(w->blob, (size_t)n);
    w->cap = n;
  }
  if (len) memcpy(w->blob + w->len, data, len);
  w->len += len;
  return 0;
}

int weir_snapshot_position(weir_snapshot_writer *w, uint32_t split, uint64_t offset) {
  for (uint32_t i = 0; i < w->npos; i++)
    if (w->pos[i].split == split) return WEIR_EINVAL;
  if (w->npos == w->pcap) {
    w->pcap = w->pcap ? w->pcap * 2 : 8;
    w->pos = weir_realloc(w->pos, w->pcap * sizeof *w->pos);
  }
  w->pos[w->npos++] = (weir_snap_position){split, offset};
  return 0;
}

const void *weir_snapshot_data(weir_snapshot_reader *r, size_t *len) {
  *len = (size_t)r->snap->blob_len;
  return r->snap->blob;
}

uint8_t *weir__snapshot_take_blob(weir_snapshot_reader *r, uint64_t *len,
                                  void (**release)(uint8_t *, uint64_t)) {
  uint8_t *p = r->snap->blob;
  *len = r->snap->blob_len;
  *release = r->snap->blob_release;
  r->snap->blob = NULL;
  r->snap->blob_len = 0;
  r->snap->blob_release = NULL;
  return p;
}

int weir_snapshot_get_position(weir_snapshot_reader *r, uint32_t split, uint64_t *offset) {
  for (uint32_t i = 0; i < r->snap->npos; i++)
    if (r->snap->pos[i].split == split) {
      *offset = r->snap->pos[i].offset;
      return 1;
    }
  return 0;
}

/* ---- acknowledgements ------------------------------------------------------- */

typedef struct ack {
  weir_job *job;
  uint64_t id;
  int channels; /* a task's channel state */
} ack;

/* Counts one operator subtask's acknowledgement of checkpoint id. */
static void count_ack(weir_job *job, uint64_t id, int status, const weir_store_written *w) {
  char why[sizeof job->coord.ck.why];
  why[0] = 0;
  /* The store's message for this failure (set just before done() ran on
   * the writer thread, or by the refused request). */
  if (status < 0) weir_store_error(job->store, why, sizeof why);
  pthread_mutex_lock(&job->ck_mu);
  int due = weir__coord_written(&job->coord, id, status, w ? w->bytes : 0, why);
  pthread_mutex_unlock(&job->ck_mu);
  if (due) weir__job_poke(job);
}

/* The store writer finished (or failed) one subtask's state. */
static void on_written(void *user, int status, const weir_store_written *w) {
  ack *a = user;
  weir_job *job = a->job;
  uint64_t id = a->id;
  int channels = a->channels;
  weir_free(a);
  (void)weir_failpoint("ckpt.after_chunk_write");
  if (channels) (void)weir_failpoint("ckpt.channel_state_written");
  count_ack(job, id, status, w);
}

/* Hands one subtask's state to the store (taking it over); a request the
 * store refuses counts as a failed acknowledgement. */
static void write_state_ex(weir_job *job, uint64_t id, weir_subtask_snapshot *s, int channels) {
  ack *a = weir_malloc(sizeof *a);
  a->job = job;
  a->id = id;
  a->channels = channels;
  int rc = weir_store_write_subtask(job->store, id, s, on_written, a);
  if (rc) {
    weir_free(a);
    weir_subtask_snapshot_free(s);
    count_ack(job, id, rc, NULL);
    return;
  }
  pthread_mutex_lock(&job->ck_mu);
  int due = weir__coord_queued(&job->coord, id);
  pthread_mutex_unlock(&job->ck_mu);
  if (due) weir__job_poke(job);
}

static void write_state(weir_job *job, uint64_t id, weir_subtask_snapshot *s) {
  write_state_ex(job, id, s, 0);
}

/* ---- the synchronous part --------------------------------------------------- */

/* Runs on a store thread (a view reader, or the writer): the view's
 * entries into the snapshot. */
static void fill_from_view(void *arg, weir_subtask_snapshot *s, int run) {
  weir__cow *v = arg;
  if (run) {
    weir__cow_extract(v, &s->u64_keys, &s->u64_values, &s->n_u64);
    s->u64_release = weir_pool_free;
    s->u64_in_order = 1;
  }
  weir__cow_release(v);
}

/* Byte-string map b copied into arrays at the cut (malloc'd, owned by the
 * snapshot): per entry its key and value lengths and, with route, its
 * routing key; keys and values back to back in *data. */
static void copy_bmap(const weir__bmap *b, uint64_t **route, uint32_t **klen, uint32_t **vlen,
                      uint8_t **data, uint64_t *data_len) {
  uint64_t total = 0;
  for (uint64_t i = 0; i < b->cap; i++) {
    const weir__bent *e = weir__bytes_at(b, i);
    if (e) total += (uint64_t)e->klen + e->vlen;
  }
  if (route) *route = weir_malloc(b->n * sizeof(uint64_t));
  *klen = weir_malloc(b->n * sizeof(uint32_t));
  *vlen = weir_malloc(b->n * sizeof(uint32_t));
  *data = weir_malloc(total ? total : 1);
  *data_len = total;
  uint64_t j = 0, off = 0;
  for (uint64_t i = 0; i < b->cap; i++) {
    weir__bent *e = weir__bytes_at(b, i);
    if (!e) continue;
    if (route) (*route)[j] = e->route_key;
    (*klen)[j] = e->klen;
    (*vlen)[j] = e->vlen;
    memcpy(*data + off, e->data, e->klen);
    memcpy(*data + off + e->klen, weir__bent_val(e), e->vlen);
    off += (uint64_t)e->klen + e->vlen;
    j++;
  }
}

static void copy_state(weir_ctx *c, weir_subtask_snapshot *s) {
  weir__u64map *m = &c->state.u;
  uint64_t n = m->n + (m->has_empty_key ? 1 : 0), k = 0;
  s->u64_keys_version = n ? weir__u64_keys_version(m) : 0;
  /* The u64 map: a copy-on-write view read on the writer thread, unless
   * the previous one is still being read. */
  weir__cow *v = n ? weir__u64_cow_begin(m) : NULL;
  if (v) {
    s->fill = fill_from_view;
    s->fill_arg = v;
    n = 0;
  }
  s->n_u64 = n;
  if (n) {
    s->u64_keys = weir_malloc(n * sizeof(uint64_t));
    s->u64_values = weir_malloc(n * sizeof(uint64_t));
    if (m->has_empty_key) {
      s->u64_keys[k] = WEIR__U64_EMPTY;
      s->u64_values[k++] = m->empty_key_value;
    }
    for (uint64_t i = 0; i < m->cap; i++) {
      if (m->slots[2 * i] == WEIR__U64_EMPTY) continue;
      s->u64_keys[k] = m->slots[2 * i];
      s->u64_values[k++] = m->slots[2 * i + 1];
    }
  }
  const weir__bmap *b = &c->state.b;
  s->n_bytes = b->n;
  if (b->n) copy_bmap(b, &s->b_route, &s->b_klen, &s->b_vlen, &s->b_data, &s->b_data_len);
}

/* Namespaced u64 state, copied at the cut into arrays (a copy-on-write
 * view, as the u64 map has, can come later: state.h's views would need to
 * be generic over the slot width). */
static void copy_ns(weir_ctx *c, weir_subtask_snapshot *s) {
  const weir__wtab *t = &c->state.ns;
  uint64_t n = weir__wtab_count(t);
  if (!n) return;
  s->n_ns = n;
  s->ns_keys = weir_malloc_big(n * sizeof *s->ns_keys);
  s->ns_ns = weir_malloc_big(n * sizeof *s->ns_ns);
  s->ns_values = weir_malloc_big(n * sizeof *s->ns_values);
  weir__wtab_copy(t, s->ns_keys, s->ns_ns, s->ns_values);
}

/* Installs restored namespaced state; a (key, ns) stored twice is a
 * damaged checkpoint (the writer stores a table). */
static int restore_ns(weir_ctx *c, const weir_subtask_snapshot *s) {
  if (!s->n_ns) return 0;
  weir__wtab *t = &c->state.ns;
  weir__wtab_reserve(t, s->n_ns);
  for (uint64_t i = 0; i < s->n_ns; i++) {
    if (i + 16 < s->n_ns) weir__wtab_prefetch(t, s->ns_keys[i + 16], s->ns_ns[i + 16]);
    int created;
    uint64_t *v = weir__wtab_upsert(t, s->ns_keys[i], s->ns_ns[i], &created);
    if (!created)
      return weir_ctx_fail(c, WEIR_ECORRUPT,
                           "checkpoint holds namespaced entry (key %llu, ns %llu) twice",
                           (unsigned long long)s->ns_keys[i], (unsigned long long)s->ns_ns[i]);
    *v = s->ns_values[i];
  }
  return 0;
}

/* The subtask's copy of broadcast state, copied at the cut (it is small:
 * rules, lookup tables), in table order. */
static void copy_bcast(weir_ctx *c, weir_subtask_snapshot *s) {
  const weir__bmap *b = &c->bcast;
  if (!b->n) return;
  s->n_bcast = b->n;
  copy_bmap(b, NULL, &s->bc_klen, &s->bc_vlen, &s->bc_data, &s->bc_data_len);
}

/* Installs restored broadcast state; a key stored twice is a damaged
 * checkpoint (the writer stores a map). */
static int restore_bcast(weir_ctx *c, const weir_subtask_snapshot *s) {
  if (!s->n_bcast) return 0;
  if (!c->node->bcast_in2)
    return weir_ctx_fail(c, WEIR_ECORRUPT,
                         "checkpoint holds broadcast state for an operator without a broadcast "
                         "input");
  uint64_t off = 0;
  for (uint64_t i = 0; i < s->n_bcast; i++) {
    const uint8_t *k = s->bc_data + off;
    if (weir__bytes_find(&c->bcast, k, s->bc_klen[i]))
      return weir_ctx_fail(c, WEIR_ECORRUPT, "checkpoint holds broadcast key %llu twice",
                           (unsigned long long)i);
    weir__bytes_put(&c->bcast, 0, k, s->bc_klen[i], k + s->bc_klen[i], s->bc_vlen[i]);
    off += (uint64_t)s->bc_klen[i] + s->bc_vlen[i];
  }
  return 0;
}

int weir__ctx_snapshot(weir_ctx *c, uint64_t id, weir_subtask_snapshot *s) {
  memset(s, 0, sizeof *s);
  s->op = weir_strdup(c->node->name);
  s->subtask = c->subtask;
  s->parallelism = c->parallelism;
  s->state_version = c->node->state_version;
  copy_state(c, s);
  copy_ns(c, s);
  weir__timers_snapshot(c, s);
  copy_bcast(c, s);
  weir_snapshot_writer w = {0};
  int (*cb)(weir_ctx *, uint64_t, weir_snapshot_writer *) =
      c->node->svt ? c->node->svt->snapshot : c->node->ovt->snapshot;
  c->declined = 0;
  int rc = cb ? cb(c, id, &w) : 0;
  s->blob = w.blob;
  s->blob_len = w.len;
  s->pos = w.pos;
  s->npos = w.npos;
  if (rc == WEIR_ECKPT && c->declined) {
    c->declined = 0;
    return 1;
  }
  if (rc == WEIR_SNAPSHOT_LATER) {
    /* Only poll can give the acknowledgement: without it the checkpoint
     * would wait for its timeout, every time. */
    if (c->node->ovt && c->node->ovt->poll) return 2;
    weir_ctx_fail(c, WEIR_EOPERATOR,
                  "returned WEIR_SNAPSHOT_LATER, but has no poll to acknowledge the snapshot from");
    return weir__ctx_report(c, WEIR_EOPERATOR, "snapshot");
  }
  return rc ? weir__ctx_result(c, rc, 0, "snapshot", "0 or WEIR_SNAPSHOT_LATER") : 0;
}

int weir_ctx_snapshot_ack(weir_ctx *c, uint64_t id, const char *why) {
  weir_job *job = c->job;
  if (!job->store) return 0;
  int due;
  if (!why) {
    pthread_mutex_lock(&job->ck_mu);
    due = weir__coord_queued(&job->coord, id);
    due |= weir__coord_written(&job->coord, id, 0, 0, NULL);
    pthread_mutex_unlock(&job->ck_mu);
  } else {
    char msg[sizeof job->coord.ck.why];
    snprintf(msg, sizeof msg, "operator '%s' subtask %u: %s", c->node->name, c->subtask,
             why[0] ? why : "declined");
    WEIR_LOG_D("checkpoint %llu declined later by %s", (unsigned long long)id, msg);
    pthread_mutex_lock(&job->ck_mu);
    due = weir__coord_written(&job->coord, id, WEIR_ECKPT, 0, msg);
    pthread_mutex_unlock(&job->ck_mu);
  }
  if (due) weir__job_poke(job);
  return 0;
}

/* Operator subtask c declined checkpoint id (weir_ctx_decline): its write
 * counts as failed, with the operator's message, so that the coordinator
 * aborts the checkpoint and counts it against the tolerance; the task
 * goes on. */
static void declined(weir_job *job, weir_ctx *c, uint64_t id) {
  char why[sizeof job->coord.ck.why];
  snprintf(why, sizeof why, "operator '%s' subtask %u: %s", c->node->name, c->subtask,
           c->decline_msg[0] ? c->decline_msg : "declined");
  WEIR_LOG_D("checkpoint %llu declined by %s", (unsigned long long)id, why);
  pthread_mutex_lock(&job->ck_mu);
  int due = weir__coord_written(&job->coord, id, WEIR_ECKPT, 0, why);
  pthread_mutex_unlock(&job->ck_mu);
  if (due) weir__job_poke(job);
}

static int task_snapshot(weir__task *t, uint64_t id, uint64_t align_ns, int unaligned) {
  weir_job *job = t->job;
  t->ckpt_done = id;
  if (!job->store) return 0;
  /* The previous checkpoint's views, if this task is still reading them:
   * one view of a table at a time. */
  weir__task_write_held(t);
  pthread_mutex_lock(&job->ck_mu);
  weir__coord_cut(&job->coord, id, align_ns, unaligned);
  pthread_mutex_unlock(&job->ck_mu);
  for (uint32_t i = 0; i < t->nops; i++) {
    /* A loop head that opened a back-edge log for this checkpoint (it was
     * running at the cut) has that log as its state, written when the log
     * completes (weir__head_write_log). */
    if (i == 0 && t->head_loop && t->log_id == id) continue;
    weir_subtask_snapshot s;
    int rc = weir__ctx_snapshot(t->ops[i], id, &s);
    if (rc == 1) {
      weir_subtask_snapshot_free(&s);
      declined(job, t->ops[i], id);
      continue;
    }
    if (rc == 2) {
      /* Its state is written now, its acknowledgement comes later. */
      pthread_mutex_lock(&job->ck_mu);
      weir__coord_ack_later(&job->coord, id);
      pthread_mutex_unlock(&job->ck_mu);
      rc = 0;
    }
    if (rc) {
      weir_subtask_snapshot_free(&s);
      return rc;
    }
    rc = weir_failpoint("ckpt.after_sync_snapshot");
    if (rc) {
      weir_subtask_snapshot_free(&s);
      weir__job_failed(job, rc, "checkpoint %llu: failpoint ckpt.after_sync_snapshot",
                       (unsigned long long)id);
      return rc;
    }
    if (t->hold_views && s.fill) {
      if (t->nheld == t->held_cap) {
        t->held_cap = t->held_cap ? 2 * t->held_cap : 4;
        t->held_snaps = weir_realloc(t->held_snaps, t->held_cap * sizeof *t->held_snaps);
      }
      t->held_snaps[t->nheld++] = s;
      t->held_id = id;
      t->read_slice_ns = WEIR__READ_SLICE_NS;
      continue;
    }
    write_state(job, id, &s);
  }
  return 0;
}

/* Pages a task reads between two looks at the clock: about 20 us. */
#define READ_PAGES 32u

int weir__task_read_held(weir__task *t, uint64_t budget_ns) {
  uint64_t t0 = budget_ns == UINT64_MAX ? 0 : weir_clock_mono_ns();
  while (t->held_next < t->nheld) {
    weir_subtask_snapshot *s = &t->held_snaps[t->held_next];
    weir__cow_reader *r = &t->held_rd;
    if (!r->c) weir__cow_read_begin(r, s->fill_arg);
    if (!weir__cow_read_some(r, READ_PAGES)) {
      if (budget_ns != UINT64_MAX && weir_clock_mono_ns() - t0 >= budget_ns) return 1;
      continue;
    }
    weir__cow *v = r->c;
    weir__cow_read_end(r, &s->u64_keys, &s->u64_values, &s->n_u64);
    s->u64_release = weir_pool_free;
    s->u64_in_order = 1;
    s->fill = NULL;
    s->fill_arg = NULL;
    weir__cow_release(v);
    write_state(t->job, t->held_id, s);
    t->held_next++;
  }
  t->nheld = t->held_next = 0;
  return 0;
}

void weir__task_write_held(weir__task *t) {
  (void)weir__task_read_held(t, UINT64_MAX);
}

void weir__task_drop_held(weir__task *t) {
  if (t->held_rd.c) weir__cow_read_abandon(&t->held_rd);
  for (uint32_t i = t->held_next; i < t->nheld; i++) weir_subtask_snapshot_free(&t->held_snaps[i]);
  weir_free(t->held_snaps);
  t->held_snaps = NULL;
  t->nheld = t->held_cap = t->held_next = 0;
}

int weir__task_snapshot(weir__task *t, uint64_t id, uint64_t align_ns) {
  return task_snapshot(t, id, align_ns, 0);
}

int weir__task_snapshot_unaligned(weir__task *t, uint64_t id, uint64_t align_ns) {
  return task_snapshot(t, id, align_ns, 1);
}

int weir__task_write_channels(weir__task *t, uint64_t id, uint8_t *blob, uint64_t len) {
  weir_job *job = t->job;
  if (!job->store) {
    weir__cs_free(blob);
    return 0;
  }
  weir_ctx *c = t->ops[0];
  pthread_mutex_lock(&job->ck_mu);
  weir__coord_channel_bytes(&job->coord, id, len - WEIR__CS_HDR);
  pthread_mutex_unlock(&job->ck_mu);
  weir_subtask_snapshot s;
  memset(&s, 0, sizeof s);
  size_t n = strlen(c->node->name) + sizeof WEIR__CHANNELS_SUFFIX;
  s.op = weir_malloc(n);
  snprintf(s.op, n, "%s" WEIR__CHANNELS_SUFFIX, c->node->name);
  s.subtask = c->subtask;
  s.parallelism = c->parallelism;
  s.blob = blob;
  s.blob_len = len;
  s.blob_release = weir__cs_release;
  WEIR_LOG_D("checkpoint %llu: channel state of '%s' subtask %u: %llu bytes",
             (unsigned long long)id, c->node->name, c->subtask, (unsigned long long)len);
  write_state_ex(job, id, &s, 1);
  return 0;
}

void weir__task_no_channels(weir__task *t, uint64_t id) {
  weir_job *job = t->job;
  if (!job->store) return;
  pthread_mutex_lock(&job->ck_mu);
  int due = weir__coord_no_channels(&job->coord, id);
  pthread_mutex_unlock(&job->ck_mu);
  if (due) weir__job_poke(job);
}

void weir__task_drained(weir__task *t, uint64_t id) {
  weir_job *job = t->job;
  pthread_mutex_lock(&job->ck_mu);
  int due = weir__coord_drained(&job->coord, id);
  pthread_mutex_unlock(&job->ck_mu);
  if (due) weir__job_poke(job);
}

int weir__head_write_log(weir__task *t) {
  weir_job *job = t->job;
  uint64_t id = t->backlog->id, len, records = t->backlog->records;
  void (*release)(uint8_t *, uint64_t);
  int err;
  weir_ctx *c = t->ops[0];
  uint8_t *log = weir__backlog_take(t->backlog, &len, &release, &err);
  if (!log && len) {
    weir__job_failed(job, WEIR_EIO,
                     "checkpoint %llu: the back-edge log of '%s' subtask %u (%llu bytes) cannot "
                     "be read back from its spill file: %s",
                     (unsigned long long)id, c->node->name, c->subtask, (unsigned long long)len,
                     strerror(-err));
    return WEIR_EIO;
  }
  if (!job->store) {
    weir_blob_free(log, len, release);
    return 0;
  }
  weir_subtask_snapshot s;
  memset(&s, 0, sizeof s);
  s.op = weir_strdup(c->node->name);
  s.subtask = c->subtask;
  s.parallelism = c->parallelism;
  s.state_version = c->node->state_version;
  s.blob = log;
  s.blob_len = len;
  s.blob_release = release;
  WEIR_LOG_D("checkpoint %llu: back-edge log of '%s' subtask %u: %llu records, %llu bytes",
             (unsigned long long)id, c->node->name, c->subtask, (unsigned long long)records,
             (unsigned long long)len);
  write_state(job, id, &s);
  return 0;
}

/* ---- notifications ------------------------------------------------------------ */

int weir__task_notify(weir__task *t) {
  weir_job *job = t->job;
  uint64_t done = atomic_load(&job->complete_id), ab = atomic_load(&job->aborted_id);
  uint64_t fin = atomic_load(&job->final_id);
  int rc = 0;
  if (ab > t->notified && ab > done) {
    for (uint32_t i = 0; i < t->nops && !rc; i++) {
      weir_ctx *c = t->ops[i];
      if (c->node->ovt && c->node->ovt->checkpoint_aborted)
        rc = c->node->ovt->checkpoint_aborted(c, ab);
      if (rc) rc = weir__ctx_result(c, rc, 0, "checkpoint_aborted", "0");
    }
    t->notified = ab;
  }
  if (done > t->notified || (done && done == fin && t->notified < done)) {
    for (uint32_t i = 0; i < t->nops && !rc; i++) {
      weir_ctx *c = t->ops[i];
      if (c->node->ovt && c->node->ovt->checkpoint_complete)
        rc = c->node->ovt->checkpoint_complete(c, done);
      else if (c->node->svt && c->node->svt->checkpoint_complete)
        rc = c->node->svt->checkpoint_complete(c, done);
      if (rc) rc = weir__ctx_result(c, rc, 0, "checkpoint_complete", "0");
    }
    t->notified = done;
    /* Counted once the operators' effects for it have landed (task.c). */
    if (fin && done == fin) t->final_pending = 1;
  }
  return rc;
}

/* ---- restore ------------------------------------------------------------------ */

int weir__ctx_restore(weir_ctx *c) {
  weir_subtask_snapshot *s = c->restore;
  if (!s) return 0;
  int rc = 0;
  if ((s->n_u64 || s->n_bytes || s->n_ns || s->n_timers) && !c->keyed) {
    rc = weir_ctx_fail(c, WEIR_ECORRUPT, "checkpoint holds keyed state for a non-keyed operator");
  }
  if (!rc) rc = weir__timers_restore(c, s);
  if (!rc) rc = restore_bcast(c, s);
  if (!rc) rc = restore_ns(c, s);
  uint64_t t0 = uv_hrtime();
  /* Keyed u64 state read with the operator's own parallelism was built
   * while loading (job.c); rescaled state comes here in arrays. Entries in
   * hash order (format 2) are laid out in one pass; in key order (format
   * 1), inserted with prefetching (state.h, weir__u64_build). */
  if (!rc && s->n_u64 && !weir__u64_load(&c->state.u, s->u64_keys, s->u64_values, s->n_u64)) {
    weir__u64_reserve(&c->state.u, s->n_u64);
    for (uint64_t i = 0; i < s->n_u64; i++) {
      if (i + 16 < s->n_u64) weir__u64_prefetch(&c->state.u, s->u64_keys[i + 16]);
      *weir__u64_upsert(&c->state.u, s->u64_keys[i]) = s->u64_values[i];
    }
  }
  uint64_t off = 0;
  for (uint64_t i = 0; !rc && i < s->n_bytes; i++) {
    weir__bytes_put(&c->state.b, s->b_route[i], s->b_data + off, s->b_klen[i],
                    s->b_data + off + s->b_klen[i], s->b_vlen[i]);
    off += (uint64_t)s->b_klen[i] + s->b_vlen[i];
  }
  int (*cb)(weir_ctx *, weir_snapshot_reader *) =
      c->node->svt ? c->node->svt->restore : c->node->ovt->restore;
  if (!rc && cb && (s->blob_len || s->npos)) {
    weir_snapshot_reader r = {s};
    rc = cb(c, &r);
  }
  uint64_t ns = uv_hrtime() - t0;
  weir__restore_note(&c->job->restore, ns, c->restore_stream_ns);
  WEIR_LOG_D("restored '%s' subtask %u: %llu u64, %llu byte-string and %llu namespaced entries "
             "in %.1f ms",
             c->node->name, c->subtask, (unsigned long long)s->n_u64,
             (unsigned long long)s->n_bytes, (unsigned long long)s->n_ns, (double)ns / 1e6);
  c->restored_version = s->state_version;
  weir_subtask_snapshot_free(s);
  weir_free(s);
  c->restore = NULL;
  if (rc) return weir__ctx_result(c, rc, 0, "restore", "0");
  return weir_failpoint("ckpt.during_restore");
}
