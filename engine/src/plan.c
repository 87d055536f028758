/* plan.c: owns freezing a job graph into its physical plan.
 *
 * Freezing resolves default parallelism, validates the graph, chains
 * operators (a node joins its predecessor's chain when it has exactly one
 * input, a forward edge from a node with exactly one output, and the same
 * parallelism, as Flink chains operators), creates one task per chain and
 * subtask with a context per operator, creates the channels of every edge
 * between chains (forward: subtask i to subtask i; hash, broadcast and
 * rebalance: every producer subtask to every consumer subtask), and assigns
 * subtask s of every chain to worker s mod W, so that a keyed pipeline's
 * stages for one key range share a thread.
 */
#include <string.h>

#include "base/alloc.h"
#include "channel.h"
#include "hash.h"
#include "task.h"
#include "worker.h"

static int validate(weir_job *job) {
  const weir_run_opts *o = &job->opts;
  if (job->nnodes == 0) return weir_job_fail(job, WEIR_EPLAN, "the job has no operators");
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    if (n->parallelism == 0) n->parallelism = o->default_parallelism;
    if (n->parallelism > o->max_parallelism)
      return weir_job_fail(job, WEIR_EPLAN,
                           "operator '%s': parallelism %d exceeds the maximum parallelism %d",
                           n->name, n->parallelism, o->max_parallelism);
  }
  for (uint32_t i = 0; i < job->nedges; i++) {
    weir__edge *e = job->edges[i];
    if (e->part == WEIR__PART_FORWARD && e->from->parallelism != e->to->parallelism)
      return weir_job_fail(job, WEIR_EPLAN,
                           "forward edge from '%s' (parallelism %d) to '%s' (parallelism %d): "
                           "use equal parallelism or weir_rebalance/weir_key_by",
                           e->from->name, e->from->parallelism, e->to->name, e->to->parallelism);
  }
  for (uint32_t i = 0; i < job->nloops; i++)
    if (!job->loops[i]->closed)
      return weir_job_fail(job, WEIR_EPLAN,
                           "iteration '%s' was never closed (weir_iteration_close)",
                           job->loops[i]->head->name);
  job->event_time = 0;
  for (uint32_t i = 0; i < job->nnodes; i++)
    if (job->nodes[i]->has_wms) {
      if (job->nloops)
        return weir_job_fail(job, WEIR_EPLAN,
                             "source '%s' has a watermark strategy, but the job has an iteration "
                             "('%s'): event time is not defined inside a loop "
                             "(docs/event-time.md)",
                             job->nodes[i]->name, job->loops[0]->head->name);
      job->event_time = 1;
    }
  return 0;
}

/* An operator that reads the event-time clock needs a watermark strategy
 * on every source upstream: without one, its clock never moves. (Loops
 * are refused with event time in validate.) */
static int validate_time(weir_job *job) {
  weir__node **stack = weir_calloc(job->nnodes + 1, sizeof *stack);
  uint8_t *seen = weir_calloc(job->nnodes + 1, 1);
  int rc = 0;
  for (uint32_t i = 0; i < job->nnodes && !rc; i++) {
    weir__node *op = job->nodes[i];
    if (!(op->op_flags & WEIR_OP_EVENT_TIME)) continue;
    memset(seen, 0, job->nnodes);
    uint32_t sp = 0;
    stack[sp++] = op;
    seen[op->index] = 1;
    while (sp && !rc) {
      weir__node *n = stack[--sp];
      if (n->svt && !n->has_wms)
        rc = weir_job_fail(job, WEIR_EPLAN,
                           "operator '%s' uses event time (%s), but source '%s' upstream of it "
                           "has no watermark strategy: give it one with weir_with_watermarks "
                           "(docs/event-time.md)",
                           op->name,
                           op->op_flags & WEIR_OP_EVENT_TIMERS ? "event-time timers"
                                                               : "WEIR_OP_EVENT_TIME",
                           n->name);
      for (uint32_t k = 0; k < n->nin; k++) {
        weir__node *u = n->in[k]->from;
        if (seen[u->index]) continue;
        seen[u->index] = 1;
        stack[sp++] = u;
      }
    }
  }
  weir_free(stack);
  weir_free(seen);
  return rc;
}

/* Marks the nodes of each loop: those reachable from its head (without
 * crossing a feedback edge) that lead back to a feedback edge into it. */
static int mark_loops(weir_job *job) {
  uint8_t *fwd = weir_calloc(job->nnodes + 1, 1), *bwd = weir_calloc(job->nnodes + 1, 1);
  weir__node **stack = weir_calloc(job->nnodes + 1, sizeof *stack);
  int rc = 0;
  for (uint32_t li = 0; li < job->nloops && !rc; li++) {
    weir__loop *l = job->loops[li];
    memset(fwd, 0, job->nnodes);
    memset(bwd, 0, job->nnodes);
    uint32_t sp = 0;
    stack[sp++] = l->head;
    fwd[l->head->index] = 1;
    while (sp) {
      weir__node *n = stack[--sp];
      for (uint32_t k = 0; k < n->nout; k++) {
        weir__edge *e = n->out[k];
        if (e->back || fwd[e->to->index]) continue;
        fwd[e->to->index] = 1;
        stack[sp++] = e->to;
      }
    }
    for (uint32_t k = 0; k < l->head->nin; k++) {
      weir__edge *e = l->head->in[k];
      if (!e->back) continue;
      if (!fwd[e->from->index]) {
        rc = weir_job_fail(job, WEIR_EPLAN,
                           "the feedback stream of iteration '%s' comes from '%s', which is not "
                           "inside the loop",
                           l->head->name, e->from->name);
        break;
      }
      if (!bwd[e->from->index]) {
        bwd[e->from->index] = 1;
        stack[sp++] = e->from;
      }
    }
    while (!rc && sp) {
      weir__node *n = stack[--sp];
      for (uint32_t k = 0; k < n->nin; k++) {
        weir__edge *e = n->in[k];
        if (e->back || bwd[e->from->index]) continue;
        bwd[e->from->index] = 1;
        stack[sp++] = e->from;
      }
    }
    for (uint32_t i = 0; i < job->nnodes && !rc; i++) {
      weir__node *n = job->nodes[i];
      if (!(fwd[i] && bwd[i]) && n != l->head) continue;
      if (n->loop && n->loop != l) {
        rc = weir_job_fail(job, WEIR_EPLAN,
                           "operator '%s' is inside two iterations: nested "
                           "iterations are not supported",
                           n->name);
        break;
      }
      n->loop = l;
    }
  }
  for (uint32_t i = 0; i < job->nedges; i++) {
    weir__edge *e = job->edges[i];
    e->in_loop = e->from->loop && e->from->loop == e->to->loop;
  }
  weir_free(fwd);
  weir_free(bwd);
  weir_free(stack);
  return rc;
}

static int chainable(const weir__node *n) {
  if (n->nin != 1) return 0;
  const weir__edge *e = n->in[0];
  /* A side output always crosses a channel: so a node with side outputs
   * is its chain's tail, and its side routers are its task's. */
  return e->part == WEIR__PART_FORWARD && e->port == 0 && e->from->nout == 1 &&
         e->from->parallelism == n->parallelism;
}

static void make_chains(weir_job *job) {
  job->plan.chains = weir_calloc(job->nnodes, sizeof *job->plan.chains);
  /* Builder order is topological: a node only consumes earlier nodes. */
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    weir__chain *c;
    if (chainable(n)) {
      n->chain = n->in[0]->from->chain;
      c = &job->plan.chains[n->chain];
    } else {
      n->chain = job->plan.nchains++;
      c = &job->plan.chains[n->chain];
      c->parallelism = n->parallelism;
    }
    n->chain_pos = c->nnodes;
    c->nodes = weir_realloc(c->nodes, (c->nnodes + 1) * sizeof *c->nodes);
    c->nodes[c->nnodes++] = n;
  }
}

static weir__task *task_of(weir_job *job, uint32_t chain, uint32_t subtask) {
  uint32_t base = 0;
  for (uint32_t i = 0; i < chain; i++) base += (uint32_t)job->plan.chains[i].parallelism;
  return job->plan.tasks[base + subtask];
}

static void make_tasks(weir_job *job) {
  const weir_run_opts *o = &job->opts;
  for (uint32_t i = 0; i < job->plan.nchains; i++)
    job->plan.ntasks += (uint32_t)job->plan.chains[i].parallelism;
  job->plan.tasks = weir_calloc(job->plan.ntasks, sizeof *job->plan.tasks);
  for (uint32_t i = 0; i < job->nnodes; i++)
    job->nodes[i]->ctx = weir_calloc((size_t)job->nodes[i]->parallelism, sizeof(weir_ctx *));
  uint32_t k = 0;
  for (uint32_t ci = 0; ci < job->plan.nchains; ci++) {
    weir__chain *c = &job->plan.chains[ci];
    for (uint32_t s = 0; s < (uint32_t)c->parallelism; s++) {
      weir__task *t = weir_aligned_alloc(sizeof *t);
      memset(t, 0, sizeof *t);
      t->job = job;
      t->index = k;
      t->subtask = s;
      t->chain = c;
      t->budget_batches = 16;
      t->batch_records = o->batch_records;
      t->is_source = c->nodes[0]->kind == WEIR__NODE_SOURCE;
      t->nops = c->nnodes;
      t->ops = weir_calloc(c->nnodes, sizeof *t->ops);
      for (uint32_t p = 0; p < c->nnodes; p++) {
        weir_ctx *ctx = weir__ctx_create(t, c->nodes[p], s);
        t->ops[p] = ctx;
        c->nodes[p]->ctx[s] = ctx;
      }
      for (uint32_t p = 0; p + 1 < c->nnodes; p++) {
        t->ops[p]->next = t->ops[p + 1];
        t->ops[p]->link = weir__batch_create(o->batch_records);
      }
      job->plan.tasks[k++] = t;
    }
  }
}

static weir__chan *chan_new(weir_job *job, weir__task *from, weir__task *to, const weir__edge *e) {
  weir__chan *ch = weir__chan_create(job->opts.channel_batches, job->opts.batch_records,
                                     weir__task_wake, from, to);
  ch->unbounded = e->back;
  if (e->back && job->opts.loop_memory_bytes != UINT64_MAX) {
    ch->spill_after = job->opts.loop_memory_bytes;
    ch->spill_dir = job->opts.spill_dir;
  }
  job->plan.chans = weir_realloc(job->plan.chans, (job->plan.nchans + 1) * sizeof *job->plan.chans);
  job->plan.chans[job->plan.nchans++] = ch;
  to->in = weir_realloc(to->in, (to->nin + 1) * sizeof *to->in);
  to->in_back = weir_realloc(to->in_back, to->nin + 1);
  to->in_loopin = weir_realloc(to->in_loopin, to->nin + 1);
  to->in_side = weir_realloc(to->in_side, to->nin + 1);
  to->in_side[to->nin] = e->side;
  to->in_back[to->nin] = (uint8_t)e->back;
  to->in_loopin[to->nin] = (uint8_t)e->in_loop;
  if (!e->back) to->nregular++;
  to->in[to->nin++] = ch;
  return ch;
}

/* The tail's out edges in router order: its main output's first, then
 * each side output's, by port (a stable sort: few edges). */
static void order_by_port(weir__node *tail) {
  for (uint32_t i = 1; i < tail->nout; i++)
    for (uint32_t j = i; j > 0 && tail->out[j - 1]->port > tail->out[j]->port; j--) {
      weir__edge *e = tail->out[j];
      tail->out[j] = tail->out[j - 1];
      tail->out[j - 1] = e;
    }
}

static void make_channels(weir_job *job) {
  /* Routers: one per outgoing edge of each task's tail node; the main
   * output's first (t->nmain), then the side outputs' (the tail's
   * context knows which are whose). */
  for (uint32_t ci = 0; ci < job->plan.nchains; ci++)
    order_by_port(job->plan.chains[ci].nodes[job->plan.chains[ci].nnodes - 1]);
  for (uint32_t i = 0; i < job->plan.ntasks; i++) {
    weir__task *t = job->plan.tasks[i];
    weir__node *tail = t->chain->nodes[t->chain->nnodes - 1];
    weir_ctx *c = t->ops[t->nops - 1];
    t->nrouters = tail->nout;
    t->routers = weir_calloc(tail->nout ? tail->nout : 1, sizeof *t->routers);
    for (uint32_t ei = 0; ei < tail->nout; ei++) {
      uint32_t port = tail->out[ei]->port;
      if (port == 0) {
        t->nmain++;
      } else {
        if (!c->side_n[port - 1]) c->side_first[port - 1] = (uint8_t)ei;
        c->side_n[port - 1]++;
      }
    }
  }
  for (uint32_t ci = 0; ci < job->plan.nchains; ci++) {
    weir__chain *c = &job->plan.chains[ci];
    weir__node *tail = c->nodes[c->nnodes - 1];
    for (uint32_t ei = 0; ei < tail->nout; ei++) {
      weir__edge *e = tail->out[ei];
      uint32_t pto = (uint32_t)e->to->parallelism;
      for (uint32_t p = 0; p < (uint32_t)c->parallelism; p++) {
        weir__task *from = task_of(job, ci, p);
        weir__router *r = &from->routers[ei];
        r->part = e->part;
        r->max_par = (uint32_t)job->opts.max_parallelism;
        r->n = e->part == WEIR__PART_FORWARD ? 1 : pto;
        r->rr = p % r->n; /* spread rebalance starting points */
        r->chans = weir_calloc(r->n, sizeof *r->chans);
        r->loop = e->in_loop ? e->from->loop : NULL;
        if (r->loop) from->loop_out = 1;
        if (e->part == WEIR__PART_HASH) {
          r->kg_target = weir_calloc(r->max_par, sizeof *r->kg_target);
          for (uint32_t kg = 0; kg < r->max_par; kg++)
            r->kg_target[kg] = (uint16_t)weir__kg_subtask(kg, r->max_par, r->n);
        }
        r->cur = weir_calloc(r->n, sizeof *r->cur);
        for (uint32_t j = 0; j < r->n; j++) {
          uint32_t target = e->part == WEIR__PART_FORWARD ? p : j;
          r->chans[j] = chan_new(job, from, task_of(job, e->to->chain, target), e);
        }
      }
    }
  }
  for (uint32_t i = 0; i < job->plan.ntasks; i++) {
    weir__task *t = job->plan.tasks[i];
    t->in_ended = weir_calloc(t->nin ? t->nin : 1, 1);
    if (!t->in_back) t->in_back = weir_calloc(1, 1);
    if (!t->in_loopin) t->in_loopin = weir_calloc(1, 1);
    if (!t->in_side) t->in_side = weir_calloc(1, 1);
    weir__loop *l = t->chain->nodes[0]->head_of;
    if (l) {
      t->head_loop = l;
      l->heads = weir_realloc(l->heads, (l->nheads + 1) * sizeof *l->heads);
      l->heads[l->nheads++] = t;
      l->admit += 128 * (int64_t)job->opts.batch_records;
    }
  }
}

static void assign_workers(weir_job *job) {
  job->plan.workers = weir_calloc(job->plan.nworkers, sizeof *job->plan.workers);
  for (uint32_t i = 0; i < job->plan.nworkers; i++) {
    weir__worker *w = weir_aligned_alloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->job = job;
    w->index = i;
    uv_mutex_init(&w->mu);
    uv_cond_init(&w->cv);
    job->plan.workers[i] = w;
  }
  for (uint32_t i = 0; i < job->plan.ntasks; i++) {
    weir__task *t = job->plan.tasks[i];
    weir__worker *w = job->plan.workers[t->subtask % job->plan.nworkers];
    t->worker = w;
    w->tasks = weir_realloc(w->tasks, (w->ntasks + 1) * sizeof *w->tasks);
    w->tasks[w->ntasks++] = t;
  }
}

int weir__plan_freeze(weir_job *job) {
  int rc = validate(job);
  if (!rc) rc = validate_time(job);
  if (!rc) rc = mark_loops(job);
  if (rc) return rc;
  make_chains(job);
  make_tasks(job);
  make_channels(job);
  /* Subtask s runs on worker s mod W: workers beyond the largest
   * parallelism would have nothing to run. */
  uint32_t maxp = 1;
  for (uint32_t i = 0; i < job->plan.nchains; i++)
    if ((uint32_t)job->plan.chains[i].parallelism > maxp)
      maxp = (uint32_t)job->plan.chains[i].parallelism;
  if (job->plan.nworkers > maxp) job->plan.nworkers = maxp;
  if (job->plan.nworkers == 0) job->plan.nworkers = 1;
  assign_workers(job);
  /* Another thread may be asking for operator counts (summary.c). */
  atomic_store_explicit(&job->planned, 1, memory_order_release);
  return 0;
}

void weir__plan_free(weir_job *job) {
  atomic_store_explicit(&job->planned, 0, memory_order_relaxed);
  for (uint32_t i = 0; i < job->plan.ntasks; i++) {
    weir__task *t = job->plan.tasks[i];
    for (uint32_t k = 0; k < t->nrouters; k++) {
      weir__router *r = &t->routers[k];
      for (uint32_t j = 0; j < r->n; j++) weir__batch_destroy(r->cur[j]);
      weir_free(r->chans);
      weir_free(r->cur);
      weir_free(r->kg_target);
    }
    for (uint32_t p = 0; p < t->nops; p++) weir__ctx_destroy(t->ops[p]);
    weir_free(t->routers);
    weir_free(t->ops);
    weir_free(t->in);
    weir_free(t->in_ended);
    weir_free(t->in_back);
    weir_free(t->in_loopin);
    weir_free(t->in_side);
    weir_free(t);
  }
  weir_free(job->plan.tasks);
  job->plan.tasks = NULL;
  job->plan.ntasks = 0;
  for (uint32_t i = 0; i < job->plan.nchans; i++) weir__chan_destroy(job->plan.chans[i]);
  weir_free(job->plan.chans);
  job->plan.chans = NULL;
  job->plan.nchans = 0;
  for (uint32_t i = 0; job->plan.workers && i < job->plan.nworkers; i++) {
    weir__worker *w = job->plan.workers[i];
    uv_cond_destroy(&w->cv);
    uv_mutex_destroy(&w->mu);
    weir_free(w->tasks);
    weir_free(w);
  }
  weir_free(job->plan.workers);
  job->plan.workers = NULL;
  job->plan.nworkers = 0;
  for (uint32_t i = 0; i < job->plan.nchains; i++) weir_free(job->plan.chains[i].nodes);
  weir_free(job->plan.chains);
  job->plan.chains = NULL;
  job->plan.nchains = 0;
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir_free(job->nodes[i]->ctx);
    job->nodes[i]->ctx = NULL;
  }
}
