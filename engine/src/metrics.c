/* metrics.c: owns the live view of a running job for monitoring: the frozen
 * plan (weir_job_plan) and the job's and every operator subtask's figures
 * (weir_job_metrics_read), read from any thread while the job runs.
 *
 * DESIGN
 * Nothing here is on the data path: it reads what the tasks already publish
 * (records in/out once per step, the meter's times and clock per step,
 * meter.h), the channels' ring positions (atomics of their own), the
 * counters (atomics), and the job's run phase, which says when the fields
 * set before the run (job id, lease epoch, the restore's figures) may be
 * read. The plan, the tasks and the channels exist from the freeze to
 * weir_job_destroy, so a reader that stops before the destroy never sees
 * them go away.
 */
#include <string.h>

#include "task.h"
#include "base/clock.h"
#include "channel.h"
#include "task_ctx.h"

static const char *kind_name(weir__node_kind k) {
  return k == WEIR__NODE_SOURCE ? "source" : k == WEIR__NODE_SINK ? "sink" : "operator";
}

static const char *part_name(weir__part p) {
  switch (p) {
  case WEIR__PART_FORWARD:
    return "forward";
  case WEIR__PART_HASH:
    return "hash";
  case WEIR__PART_BROADCAST:
    return "broadcast";
  case WEIR__PART_REBALANCE:
    return "rebalance";
  }
  return "forward";
}

int weir_job_plan(const weir_job *job, weir_plan_operator *ops, size_t nops, size_t *total_ops,
                  weir_plan_edge *edges, size_t nedges, size_t *total_edges) {
  if (total_ops) *total_ops = 0;
  if (total_edges) *total_edges = 0;
  if (!job || !atomic_load_explicit(&job->planned, memory_order_acquire)) return WEIR_ESTATE;
  for (uint32_t i = 0; i < job->nnodes && i < nops; i++) {
    const weir__node *n = job->nodes[i];
    ops[i] = (weir_plan_operator){.name = n->name,
                                  .kind = kind_name(n->kind),
                                  .parallelism = n->parallelism,
                                  .chain = n->chain,
                                  .chain_pos = n->chain_pos,
                                  .keyed = n->keyed};
  }
  for (uint32_t i = 0; i < job->nedges && i < nedges; i++) {
    const weir__edge *e = job->edges[i];
    edges[i] = (weir_plan_edge){.from = e->from->index,
                                .to = e->to->index,
                                .port = e->port,
                                .partitioning = part_name(e->part),
                                .chained = !e->back && e->from->chain == e->to->chain,
                                .feedback = e->back};
  }
  if (total_ops) *total_ops = job->nnodes;
  if (total_edges) *total_edges = job->nedges;
  return 0;
}

static weir_job_state state_of(const weir_job *job, int phase) {
  int failed = atomic_load(&((weir_job *)job)->failed) != 0;
  int stopping = atomic_load(&((weir_job *)job)->stopping) != 0;
  if (failed) return WEIR_JOB_FAILED;
  if (phase == 0) return WEIR_JOB_CREATED;
  if (phase == 1) return stopping ? WEIR_JOB_STOPPING : WEIR_JOB_RUNNING;
  if (stopping && !atomic_load(&((weir_job *)job)->draining)) return WEIR_JOB_STOPPED;
  return WEIR_JOB_FINISHED;
}

/* Input side of a chain's head: batches queued and the bound, over its
 * input channels. */
static void input_fill(const weir__task *t, uint32_t *queued, uint32_t *cap) {
  for (uint32_t i = 0; i < t->nin; i++) {
    *queued += weir__chan_size(t->in[i]);
    *cap += t->in[i]->cap;
  }
}

/* Output side of a chain's tail: the fullest output channel. */
static void output_fill(const weir__task *t, uint32_t *queued, uint32_t *cap) {
  for (uint32_t k = 0; k < t->nrouters; k++) {
    const weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      uint32_t q = weir__chan_size(r->chans[j]), c = r->chans[j]->cap;
      if (!*cap || (uint64_t)q * *cap > (uint64_t)*queued * c) {
        *queued = q;
        *cap = c;
      }
    }
  }
}

static void subtask_of(const weir_job *job, weir_ctx *c, weir_subtask_metrics *o) {
  memset(o, 0, sizeof *o);
  o->op = c->node->index;
  o->subtask = c->subtask;
  o->records_in = atomic_load_explicit(&c->pub_in, memory_order_relaxed);
  o->records_out = atomic_load_explicit(&c->pub_out, memory_order_relaxed);
  weir__task *t = c->task;
  int64_t clock = 0;
  weir__meter_read(&t->meter, &o->busy_ns, &o->backpressured_ns, &clock);
  if (t->ops[0] == c) input_fill(t, &o->in_queued, &o->in_capacity);
  if (t->ops[t->nops - 1] == c) output_fill(t, &o->out_queued, &o->out_capacity);
  o->has_watermark = job->event_time;
  o->watermark = job->event_time ? clock : 0;
  /* Acquire: a count seen here comes with its names and values
   * (weir_ctx_count stores them first). */
  unsigned nc = atomic_load_explicit(&c->ncounters, memory_order_acquire);
  for (unsigned k = 0; k < nc && k < WEIR_METRICS_COUNTERS; k++) {
    o->counter_names[k] = c->counters[k].name;
    o->counter_values[k] = atomic_load_explicit(&c->counters[k].value, memory_order_relaxed);
  }
  o->ncounters = nc < WEIR_METRICS_COUNTERS ? nc : WEIR_METRICS_COUNTERS;
}

int weir_job_metrics_read(const weir_job *job, weir_job_metrics *m, weir_subtask_metrics *st,
                          size_t n) {
  if (!job || !m || m->size < sizeof(weir_job_metrics)) return WEIR_EINVAL;
  weir_job *j = (weir_job *)job; /* atomics and the history's mutex only */
  uint64_t now = weir_clock_mono_ns();
  memset(m, 0, sizeof *m);
  m->size = sizeof *m;
  /* Acquire: the phase publishes what the run set before it (job id,
   * start and end, lease epoch, the restore's read time). */
  int phase = atomic_load_explicit(&j->run_phase, memory_order_acquire);
  m->state = state_of(job, phase);
  if (phase >= 1) {
    memcpy(m->job_id, j->info.job_id, sizeof m->job_id);
    m->job_id[sizeof m->job_id - 1] = '\0';
    m->uptime_ns = (phase == 2 ? j->end_ns : now) - j->start_ns;
    m->lease_epoch = j->lease_epoch;
    m->restored_from = j->info.restored_from;
    if (m->restored_from)
      m->restore_ms = j->info.restore_read_ms + (double)atomic_load(&j->restore.install_ns) / 1e6;
  }
  pthread_mutex_lock(&j->history.mu);
  m->checkpoints_completed = j->history.n;
  pthread_mutex_unlock(&j->history.mu);
  m->checkpoints_failed = atomic_load(&j->ck_failed);
  /* complete_ns is stored before complete_id: an id seen here has its time. */
  m->last_checkpoint_id = atomic_load(&j->complete_id);
  uint64_t at = atomic_load(&j->complete_ns);
  if (m->last_checkpoint_id && at && now > at) m->last_checkpoint_age_ns = now - at;
  if (!atomic_load_explicit(&j->planned, memory_order_acquire)) return 0;
  size_t k = 0;
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *nd = job->nodes[i];
    for (int s = 0; nd->ctx && s < nd->parallelism; s++, k++)
      if (k < n) subtask_of(job, nd->ctx[s], &st[k]);
  }
  m->nsubtasks = k;
  return 0;
}
