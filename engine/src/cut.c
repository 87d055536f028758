/* cut.c: owns cutting a built job graph into stages and keeping one of
 * them (weir_job_stages, weir_job_cut; docs/scale-out.md §1).
 *
 * A stage is what lies between two key-by edges: sources are in stage 0,
 * an operator in the stage of its inputs, one more across a key-by edge.
 * Cutting keeps the operators of one stage, puts a source where the
 * key-by edge into it was and a sink where the key-by edge out of it was,
 * and drops the rest before the plan is made, so the run below knows
 * nothing of stages: it runs a smaller graph. The dropped operators stay
 * owned by the job (freed with it) but are never opened.
 */
#include <string.h>

#include "base/alloc.h"
#include "graph.h"
#include "identity.h"

/* Stage of every node into st[] (nodes are in an order where inputs come
 * first: the builder makes them so, loops aside). Returns the number of
 * stages, or WEIR_EPLAN with the job failed. */
static int number_stages(weir_job *job, int *st) {
  if (job->nloops)
    return weir_job_fail(job, WEIR_EPLAN,
                         "the job has an iteration ('%s'): a loop cannot be cut into stages "
                         "(docs/scale-out.md §5)",
                         job->loops[0]->head->name);
  int nstages = 1;
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    int s = 0;
    for (uint32_t k = 0; k < n->nin; k++) {
      const weir__edge *e = n->in[k];
      int v = st[e->from->index] + (e->part == WEIR__PART_HASH);
      if (v > s) s = v;
    }
    for (uint32_t k = 0; k < n->nin; k++) {
      const weir__edge *e = n->in[k];
      int v = st[e->from->index] + (e->part == WEIR__PART_HASH);
      if (v != s)
        return weir_job_fail(job, WEIR_EPLAN,
                             "operator '%s' (stage %d) reads operator '%s' (stage %d) across "
                             "%s edge: a stage's inputs must all come from the stage before it, "
                             "across key-by edges (docs/scale-out.md §1)",
                             n->name, s, e->from->name, st[e->from->index],
                             e->part == WEIR__PART_HASH ? "a key-by" : "a non-key-by");
    }
    st[i] = s;
    if (s + 1 > nstages) nstages = s + 1;
  }
  /* One key-by edge between two stages: one stage edge carries it. */
  for (int s = 1; s < nstages; s++) {
    const weir__edge *first = NULL;
    for (uint32_t i = 0; i < job->nedges; i++) {
      const weir__edge *e = job->edges[i];
      if (e->part != WEIR__PART_HASH || st[e->to->index] != s) continue;
      if (first)
        return weir_job_fail(job, WEIR_EPLAN,
                             "stage %d has two key-by inputs ('%s' -> '%s' and '%s' -> '%s'): a "
                             "stage is cut at one key-by edge so far (docs/scale-out.md §5)",
                             s, first->from->name, first->to->name, e->from->name, e->to->name);
      first = e;
    }
  }
  return nstages;
}

int weir_job_stages(weir_job *job, int *nstages, uint64_t *fingerprint) {
  if (!job) return WEIR_EINVAL;
  if (job->build_err) return job->build_err;
  int *st = weir_calloc(job->nnodes + 1, sizeof *st);
  int n = number_stages(job, st);
  weir_free(st);
  if (n < 0) return n;
  if (nstages) *nstages = n;
  if (fingerprint) *fingerprint = weir__identity_fingerprint(job);
  return 0;
}

static void add_edge_to(weir__edge ***arr, uint32_t *len, weir__edge *e) {
  *arr = weir_realloc(*arr, (*len + 1) * sizeof **arr);
  (*arr)[(*len)++] = e;
}

/* The one key-by edge from stage `from` into the next, or NULL. */
static weir__edge *crossing(weir_job *job, const int *st, uint32_t nold, int from) {
  for (uint32_t i = 0; i < job->nedges; i++) {
    weir__edge *e = job->edges[i];
    if (e->from->index < nold && e->to->index < nold && e->part == WEIR__PART_HASH &&
        st[e->from->index] == from && st[e->to->index] == from + 1)
      return e;
  }
  return NULL;
}

int weir_job_cut(weir_job *job, const weir_stage_cut *cut) {
  if (!job || !cut) return WEIR_EINVAL;
  if (job->build_err) return job->build_err;
  if (job->ran || atomic_load(&job->planned) || job->cut)
    return weir_job_fail(job, WEIR_ESTATE, "weir_job_cut: the job was cut or has run already");
  uint32_t nold = job->nnodes;
  int *st = weir_calloc(nold + 1, sizeof *st);
  int nstages = number_stages(job, st);
  int rc = nstages < 0 ? nstages : 0;
  int k = cut->stage;
  if (!rc && (k < 0 || k >= nstages))
    rc = weir_job_fail(job, WEIR_EPLAN, "weir_job_cut: stage %d: the job has stages 0 to %d", k,
                       nstages - 1);
  if (!rc && (cut->tasks < 0 || (cut->tasks > 0 && (cut->task < 0 || cut->task >= cut->tasks))))
    rc = weir_job_fail(job, WEIR_EPLAN, "weir_job_cut: task %d of %d tasks", cut->task, cut->tasks);
  if (!rc && k > 0 && !cut->in)
    rc = weir_job_fail(job, WEIR_EPLAN, "weir_job_cut: stage %d needs a source for its input", k);
  if (!rc && k < nstages - 1 && !cut->out)
    rc = weir_job_fail(job, WEIR_EPLAN, "weir_job_cut: stage %d needs a sink for its output", k);
  for (uint32_t i = 0; i < nold && !rc && k > 0; i++)
    if (st[i] == k && (job->nodes[i]->op_flags & WEIR_OP_EVENT_TIME))
      rc = weir_job_fail(job, WEIR_EPLAN,
                         "operator '%s' uses event time in stage %d: watermarks do not cross "
                         "stages yet, so event-time operators must be in stage 0 "
                         "(docs/scale-out.md §5)",
                         job->nodes[i]->name, k);
  weir__edge *ein = !rc && k > 0 ? crossing(job, st, nold, k - 1) : NULL;
  weir__edge *eout = !rc && k < nstages - 1 ? crossing(job, st, nold, k) : NULL;
  /* The caller's source and sink, built as any other; then the edges
   * that crossed are taken off their old ends. */
  if (!rc && ein) {
    weir_stream *in = cut->in(job, cut->user);
    if (!in || job->build_err) {
      rc = job->build_err ? job->build_err
                          : weir_job_fail(job, WEIR_EPLAN,
                                          "weir_job_cut: "
                                          "the stage's source "
                                          "was not made");
    } else if (in->n != 1 || in->out[0].node->kind != WEIR__NODE_SOURCE) {
      rc = weir_job_fail(job, WEIR_EPLAN, "weir_job_cut: the stage's input is not one source");
    } else {
      ein->from = in->out[0].node;
      ein->port = in->out[0].port;
    }
  }
  if (!rc && eout) {
    weir_stream *s = weir__stream_new(job, 1);
    s->out[0] = (weir__stream_out){eout->from, WEIR__PART_FORWARD, eout->port};
    rc = cut->out(s, cut->user);
    if (!rc && job->build_err) rc = job->build_err;
    if (!rc && job->nnodes == nold + (ein != NULL))
      rc = weir_job_fail(job, WEIR_EPLAN, "weir_job_cut: the stage's sink was not made");
  }
  if (rc) {
    weir_free(st);
    return rc;
  }

  /* Edges: kept inside the stage (the new nodes' are), dropped else. */
  uint32_t nkeep = 0;
  weir__edge **keep = weir_calloc(job->nedges + 1, sizeof *keep);
  for (uint32_t i = 0; i < job->nedges; i++) {
    weir__edge *e = job->edges[i];
    int sf = e->from->index >= nold ? k : st[e->from->index];
    int stt = e->to->index >= nold ? k : st[e->to->index];
    if (sf == k && stt == k)
      keep[nkeep++] = e;
    else
      weir_free(e);
  }
  /* Nodes: the stage's and the new ones; the others set aside. */
  uint32_t nn = 0;
  weir__node **nodes = weir_calloc(job->nnodes + 1, sizeof *nodes);
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    if (i >= nold || st[i] == k) {
      nodes[nn++] = n;
    } else {
      job->dropped = weir_realloc(job->dropped, (job->ndropped + 1) * sizeof *job->dropped);
      job->dropped[job->ndropped++] = n;
    }
  }
  for (uint32_t i = 0; i < nn; i++) {
    weir__node *n = nodes[i];
    n->index = i;
    /* One task of the stage: one subtask of each operator, which the
     * context reports as the task's (ctx.c). */
    if (cut->tasks > 0) n->parallelism = 1;
    weir_free(n->in);
    weir_free(n->out);
    n->in = n->out = NULL;
    n->nin = n->nout = 0;
  }
  for (uint32_t i = 0; i < nkeep; i++) {
    weir__edge *e = keep[i];
    add_edge_to(&e->from->out, &e->from->nout, e);
    add_edge_to(&e->to->in, &e->to->nin, e);
  }
  weir_free(job->nodes);
  weir_free(job->edges);
  job->nodes = nodes;
  job->nnodes = nn;
  job->edges = keep;
  job->nedges = nkeep;
  job->cut = 1;
  if (cut->tasks > 0) {
    job->task = (uint32_t)cut->task;
    job->tasks = (uint32_t)cut->tasks;
  }
  weir_free(st);
  return 0;
}
