/* graph.c: owns the job object and the builder verbs of weir/job.h.
 *
 * Building never fails loudly: the first error is kept in the job with its
 * message, and every later verb that receives a NULL stream or runs on a
 * failed job returns NULL without doing anything, so a chain of builder
 * calls needs one check at its end. Messages begin with the verb the user
 * called, since a name or table may be wrong in any of them. A NULL stream
 * reaches no job, so it cannot record anything (weir/job.h says what the
 * user sees then).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/vtable.h"
#include "snapshot/lease.h"
#include "snapshot/store.h"
#include "graph.h"
#include "iteration.h"
#include "job.h"
#include "trace.h"

int weir_job_create(weir_job **out, const char *name) {
  if (!out) return WEIR_EINVAL;
  weir_job *job = weir_calloc(1, sizeof *job);
  job->name = weir_strdup(name ? name : "job");
  pthread_mutex_init(&job->err_mu, NULL);
  pthread_mutex_init(&job->ck_mu, NULL);
  weir__history_init(&job->history);
  weir__sp_init(&job->sp);
  *out = job;
  return 0;
}

static void node_free(weir__node *n) {
  weir_free(n->name);
  for (uint32_t k = 0; k < n->ntags; k++) {
    weir_free(n->tags[k]);
    weir_free(n->drop_names[k]);
  }
  weir_free(n->tags);
  weir_free(n->drop_names);
  weir_free(n->dest);
  weir_free(n->moved_from);
  weir_free(n->in);
  weir_free(n->out);
  weir_free(n);
}

void weir_job_destroy(weir_job *job) {
  if (!job) return;
  weir__plan_free(job);
  for (uint32_t i = 0; i < job->nnodes; i++) node_free(job->nodes[i]);
  for (uint32_t i = 0; i < job->ndropped; i++) node_free(job->dropped[i]);
  weir_free(job->dropped);
  for (uint32_t i = 0; i < job->nedges; i++) weir_free(job->edges[i]);
  for (uint32_t i = 0; i < job->nloops; i++) {
    weir_free(job->loops[i]->heads);
    weir_free(job->loops[i]);
  }
  weir_free(job->loops);
  weir_free(job->nodes);
  weir_free(job->edges);
  while (job->streams) {
    weir_stream *s = job->streams;
    job->streams = s->next_alloc;
    weir_free(s);
  }
  /* Adopted objects go last, in reverse: later ones may refer to earlier. */
  for (uint32_t i = job->nadopted; i-- > 0;) job->adopted[i].free_fn(job->adopted[i].p);
  weir_free(job->adopted);
  pthread_mutex_destroy(&job->err_mu);
  pthread_mutex_destroy(&job->ck_mu);
  weir__history_free(&job->history);
  weir__sp_free(&job->sp);
  weir__trace_job_destroy(job->trace);
  weir_free(job->name);
  weir_free(job);
}

const char *weir_job_name(const weir_job *job) {
  return job->name;
}

int weir_job_adopt(weir_job *job, void *p, void (*free_fn)(void *)) {
  if (!job || !free_fn) return WEIR_EINVAL;
  job->adopted = weir_realloc(job->adopted, (job->nadopted + 1) * sizeof *job->adopted);
  job->adopted[job->nadopted++] = (weir__adopted){p, free_fn};
  return 0;
}

static void set_error(weir_job *job, int err, const char *fmt, va_list ap) {
  pthread_mutex_lock(&job->err_mu);
  if (!job->errmsg[0]) vsnprintf(job->errmsg, sizeof job->errmsg, fmt, ap);
  pthread_mutex_unlock(&job->err_mu);
  (void)err;
}

int weir_job_fail(weir_job *job, int err, const char *fmt, ...) {
  if (!job) return err;
  if (!job->build_err) {
    job->build_err = err;
    va_list ap;
    va_start(ap, fmt);
    set_error(job, err, fmt, ap);
    va_end(ap);
  }
  return err;
}

void weir__job_failed(weir_job *job, int err, const char *fmt, ...) {
  /* A process that lost its lease fails because of it (a successor may
   * have removed what it was working on): the loss is the error, as the
   * lease reports it (its callback records WEIR_EFENCED), and this one
   * is its consequence. */
  if (err != WEIR_EFENCED && job->lease && !atomic_load(&job->failed) &&
      weir_lease_check(job->lease) == WEIR_EFENCED) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    WEIR_LOG_W("after losing ownership of the state directory: %s", msg);
    weir__job_poke(job);
    return;
  }
  int expected = 0;
  if (atomic_compare_exchange_strong(&job->failed, &expected, err)) {
    va_list ap;
    va_start(ap, fmt);
    set_error(job, err, fmt, ap);
    va_end(ap);
  }
  weir__job_poke(job);
}

int weir__job_store_failed(weir_job *job, int rc, const char *what) {
  char msg[512];
  weir__job_failed(job, rc, "%s: %s", what, weir_store_error(job->store, msg, sizeof msg));
  return rc;
}

const char *weir_job_error(const weir_job *job) {
  return job ? job->errmsg : "";
}

int weir_job_build_error(const weir_job *job) {
  return job ? job->build_err : 0;
}

/* ---- builder -------------------------------------------------------------- */

weir_stream *weir__stream_new(weir_job *job, uint32_t n) {
  weir_stream *s = weir_calloc(1, sizeof *s + n * sizeof s->out[0]);
  s->job = job;
  s->n = n;
  s->next_alloc = job->streams;
  job->streams = s;
  return s;
}

/* `call`: the builder verb, which every message names first. */
static int check_name(weir_job *job, const char *call, const char *name) {
  if (!name || !name[0])
    return weir_job_fail(job, WEIR_EPLAN, "%s: name is %s (every operator needs a unique name)",
                         call, name ? "empty" : "NULL");
  size_t nl = strlen(name), sl = strlen(WEIR__CHANNELS_SUFFIX);
  if (nl >= sl && strcmp(name + nl - sl, WEIR__CHANNELS_SUFFIX) == 0)
    return weir_job_fail(job, WEIR_EPLAN,
                         "%s: operator '%s': names ending in '" WEIR__CHANNELS_SUFFIX
                         "' are reserved for channel state",
                         call, name);
  for (uint32_t i = 0; i < job->nnodes; i++)
    if (strcmp(job->nodes[i]->name, name) == 0)
      return weir_job_fail(job, WEIR_EPLAN, "%s: two operators are named '%s'", call, name);
  return 0;
}

static int check_parallelism(weir_job *job, const char *call, const char *name, int parallelism) {
  if (parallelism < 0 || parallelism > 65535)
    return weir_job_fail(job, WEIR_EPLAN, "%s: operator '%s': parallelism %d is out of range", call,
                         name, parallelism);
  return 0;
}

static weir__node *node_new(weir_job *job, const char *name, weir__node_kind kind,
                            int parallelism) {
  weir__node *n = weir_calloc(1, sizeof *n);
  n->index = job->nnodes;
  n->name = weir_strdup(name);
  n->kind = kind;
  n->parallelism = parallelism;
  job->nodes = weir_realloc(job->nodes, (job->nnodes + 1) * sizeof *job->nodes);
  job->nodes[job->nnodes++] = n;
  return n;
}

static void edge_new(weir_job *job, const weir__stream_out *o, weir__node *to) {
  weir__node *from = o->node;
  weir__edge *e = weir_calloc(1, sizeof *e);
  e->from = from;
  e->to = to;
  e->part = o->part;
  e->port = o->port;
  job->edges = weir_realloc(job->edges, (job->nedges + 1) * sizeof *job->edges);
  job->edges[job->nedges++] = e;
  from->out = weir_realloc(from->out, (from->nout + 1) * sizeof *from->out);
  from->out[from->nout++] = e;
  to->in = weir_realloc(to->in, (to->nin + 1) * sizeof *to->in);
  to->in[to->nin++] = e;
}

/* Copies a caller's callback table into *own (size bytes: this weir's);
 * records a build error naming what and whom if the table is not one this
 * weir can run. */
static int adopt_vt(weir_job *job, const char *what, const char *name, void *own, size_t size,
                    const void *vt) {
  char why[256];
  int rc = weir_vtable_copy(own, size, vt, size, why, sizeof why);
  if (rc) return weir_job_fail(job, rc, "%s '%s': %s", what, name, why);
  return 0;
}

weir_stream *weir_source(weir_job *job, const char *name, const weir_source_vt *vt, void *arg,
                         int parallelism) {
  if (!job || job->build_err) return NULL;
  const char *call = "weir_source";
  if (check_name(job, call, name) || check_parallelism(job, call, name, parallelism)) return NULL;
  if (!vt) {
    weir_job_fail(job, WEIR_EPLAN, "%s: source '%s': vt is NULL (no callbacks)", call, name);
    return NULL;
  }
  weir_source_vt own;
  if (adopt_vt(job, "source", name, &own, sizeof own, vt)) return NULL;
  if (!own.run) {
    weir_job_fail(job, WEIR_EPLAN, "%s: source '%s' has no run callback", call, name);
    return NULL;
  }
  weir__node *n = node_new(job, name, WEIR__NODE_SOURCE, parallelism);
  n->vt.src = own;
  n->svt = &n->vt.src;
  n->arg = arg;
  weir_stream *s = weir__stream_new(job, 1);
  s->out[0] = (weir__stream_out){n, WEIR__PART_FORWARD, 0};
  return s;
}

weir_stream *weir_with_watermarks(weir_stream *s, const weir_watermark_strategy *ws) {
  if (!s || s->job->build_err) return NULL;
  weir_job *job = s->job;
  weir__node *n = s->out[0].node;
  if (s->n != 1 || n->kind != WEIR__NODE_SOURCE || n->nout) {
    weir_job_fail(job, WEIR_EPLAN,
                  "weir_with_watermarks: the stream is not a source's own (give the strategy to "
                  "the stream weir_source returned, before anything consumes it)");
    return NULL;
  }
  if (!ws) {
    weir_job_fail(job, WEIR_EPLAN, "weir_with_watermarks: source '%s': strategy is NULL", n->name);
    return NULL;
  }
  if (n->has_wms) {
    weir_job_fail(job, WEIR_EPLAN,
                  "weir_with_watermarks: source '%s' already has a watermark strategy", n->name);
    return NULL;
  }
  weir_watermark_strategy own;
  if (adopt_vt(job, "watermark strategy of source", n->name, &own, sizeof own, ws)) return NULL;
  if (own.out_of_orderness < 0) {
    weir_job_fail(job, WEIR_EPLAN,
                  "weir_with_watermarks: source '%s': out_of_orderness %lld is negative (the "
                  "bound on how far "
                  "behind the largest timestamp a record may come)",
                  n->name, (long long)own.out_of_orderness);
    return NULL;
  }
  n->wms = own;
  n->has_wms = 1;
  return s;
}

static weir_stream *repartition(weir_stream *s, weir__part part) {
  if (!s || s->job->build_err) return NULL;
  weir_stream *r = weir__stream_new(s->job, s->n);
  for (uint32_t i = 0; i < s->n; i++)
    r->out[i] = (weir__stream_out){s->out[i].node, part, s->out[i].port};
  return r;
}

weir_stream *weir_key_by(weir_stream *s) {
  return repartition(s, WEIR__PART_HASH);
}
weir_stream *weir_rebalance(weir_stream *s) {
  return repartition(s, WEIR__PART_REBALANCE);
}
weir_stream *weir_broadcast(weir_stream *s) {
  return repartition(s, WEIR__PART_BROADCAST);
}
weir_stream *weir_forward(weir_stream *s) {
  return repartition(s, WEIR__PART_FORWARD);
}

weir_stream *weir_union(weir_stream *a, weir_stream *b) {
  if (!a || !b) {
    /* The other stream's job is the only place this can be said. */
    weir_stream *s = a ? a : b;
    if (s)
      weir_job_fail(s->job, WEIR_EPLAN,
                    "weir_union: stream %s is NULL (a previous builder call failed? see "
                    "weir_job_error)",
                    a ? "b" : "a");
    return NULL;
  }
  if (a->job->build_err) return NULL;
  if (a->job != b->job) {
    weir_job_fail(a->job, WEIR_EPLAN, "weir_union of streams of two different jobs");
    return NULL;
  }
  weir_stream *u = weir__stream_new(a->job, a->n + b->n);
  memcpy(u->out, a->out, a->n * sizeof a->out[0]);
  memcpy(u->out + a->n, b->out, b->n * sizeof b->out[0]);
  return u;
}

/* A node reading ns streams, stream k as its input k (side k). */
static weir__node *consume_n(const char *call, weir_stream *const *in, uint32_t ns,
                             const char *name, const weir_operator_vt *vt, void *arg,
                             int parallelism, weir__node_kind kind) {
  for (uint32_t k = 0; k < ns; k++)
    if (!in[k] || in[k]->job->build_err) return NULL;
  weir_job *job = in[0]->job;
  for (uint32_t k = 1; k < ns; k++)
    if (in[k]->job != job) {
      weir_job_fail(job, WEIR_EPLAN, "%s: operator '%s': its inputs belong to different jobs", call,
                    name);
      return NULL;
    }
  if (check_name(job, call, name) || check_parallelism(job, call, name, parallelism)) return NULL;
  if (!vt) {
    weir_job_fail(job, WEIR_EPLAN, "%s: operator '%s': vt is NULL (no callbacks)", call, name);
    return NULL;
  }
  weir_operator_vt own;
  if (adopt_vt(job, "operator", name, &own, sizeof own, vt)) return NULL;
  if (!own.process && !own.process_batch) {
    weir_job_fail(job, WEIR_EPLAN, "%s: operator '%s' has neither process nor process_batch", call,
                  name);
    return NULL;
  }
  if (ns > 1 && !own.process2 && !own.process_batch2) {
    weir_job_fail(job, WEIR_EPLAN,
                  "%s: operator '%s' has neither process2 nor process_batch2 (for its second "
                  "input)",
                  call, name);
    return NULL;
  }
  /* Every (stream, output) pair read, across the inputs: none twice. */
  for (uint32_t a = 0; a < ns; a++)
    for (uint32_t i = 0; i < in[a]->n; i++)
      for (uint32_t b = 0; b <= a; b++)
        for (uint32_t k = 0; k < (b == a ? i : in[b]->n); k++)
          if (in[a]->out[i].node == in[b]->out[k].node &&
              in[a]->out[i].port == in[b]->out[k].port) {
            weir_job_fail(job, WEIR_EPLAN,
                          "%s: operator '%s' reads an output of operator '%s' twice", call, name,
                          in[a]->out[i].node->name);
            return NULL;
          }
  /* A broadcast second input (every side-1 edge broadcasts) carries
   * broadcast state and leaves the operator keyed if its first input is:
   * its records reach every subtask and touch no key's state. A side that
   * mixes broadcast with other edges is neither. */
  int hashed[2] = {1, 1}, bcast[2] = {1, 1};
  for (uint32_t k = 0; k < ns; k++)
    for (uint32_t i = 0; i < in[k]->n; i++) {
      if (in[k]->out[i].part != WEIR__PART_HASH) hashed[k] = 0;
      if (in[k]->out[i].part != WEIR__PART_BROADCAST) bcast[k] = 0;
    }
  /* A keyed first input with a second that is neither would share keyed
   * state with records that reach an arbitrary subtask. */
  if (ns > 1 && hashed[0] && !hashed[1] && !bcast[1]) {
    weir_job_fail(job, WEIR_EPLAN,
                  "%s: operator '%s': its first input is keyed but its second is neither keyed "
                  "(weir_key_by) nor broadcast (weir_broadcast)",
                  call, name);
    return NULL;
  }
  weir__node *n = node_new(job, name, kind, parallelism);
  n->vt.op = own;
  n->ovt = &n->vt.op;
  n->arg = arg;
  n->two_inputs = ns > 1;
  for (uint32_t k = 0; k < ns; k++)
    for (uint32_t i = 0; i < in[k]->n; i++) {
      edge_new(job, &in[k]->out[i], n);
      n->in[n->nin - 1]->side = (uint8_t)k;
    }
  n->bcast_in2 = ns > 1 && bcast[1];
  n->keyed = hashed[0] && (ns == 1 || hashed[1] || n->bcast_in2);
  return n;
}

static weir__node *consume(const char *call, weir_stream *s, const char *name,
                           const weir_operator_vt *vt, void *arg, int parallelism,
                           weir__node_kind kind) {
  return consume_n(call, &s, 1, name, vt, arg, parallelism, kind);
}

weir_stream *weir_process(weir_stream *s, const char *name, const weir_operator_vt *vt, void *arg,
                          int parallelism) {
  return weir_process_opts(s, name, vt, arg, parallelism, NULL);
}

#define TAG_MAX 128

/* The side outputs declared in o, checked and copied into n. */
static int take_tags(weir_job *job, weir__node *n, const weir_op_opts *o) {
  const char *call = "weir_process_opts";
  if (o->ntags > WEIR_MAX_SIDE_OUTPUTS)
    return weir_job_fail(job, WEIR_EPLAN,
                         "%s: operator '%s' declares %u side outputs, more than %d", call, n->name,
                         o->ntags, WEIR_MAX_SIDE_OUTPUTS);
  if (o->ntags && !o->tags)
    return weir_job_fail(job, WEIR_EPLAN, "%s: operator '%s': ntags %u but tags is NULL", call,
                         n->name, o->ntags);
  for (uint32_t k = 0; k < o->ntags; k++) {
    const char *t = o->tags[k];
    if (!t || !t[0] || strlen(t) > TAG_MAX)
      return weir_job_fail(job, WEIR_EPLAN,
                           "%s: operator '%s': side output %u has an empty or overlong tag", call,
                           n->name, k);
    for (uint32_t j = 0; j < k; j++)
      if (!strcmp(o->tags[j], t))
        return weir_job_fail(job, WEIR_EPLAN, "%s: operator '%s' declares side output '%s' twice",
                             call, n->name, t);
  }
  n->ntags = o->ntags;
  n->tags = weir_calloc(o->ntags ? o->ntags : 1, sizeof *n->tags);
  n->drop_names = weir_calloc(o->ntags ? o->ntags : 1, sizeof *n->drop_names);
  for (uint32_t k = 0; k < o->ntags; k++) {
    n->tags[k] = weir_strdup(o->tags[k]);
    size_t len = strlen(o->tags[k]) + sizeof "dropped:";
    n->drop_names[k] = weir_malloc(len);
    snprintf(n->drop_names[k], len, "dropped:%s", o->tags[k]);
  }
  return 0;
}

/* What weir_process_opts' declarations require of the operator (docs/
 * event-time.md §10); 0 or the build error. */
static int check_opts(weir_job *job, const weir__node *n, uint32_t flags) {
  const char *call = "weir_process_opts";
  const uint32_t known =
      WEIR_OP_EVENT_TIME | WEIR_OP_EVENT_TIMERS | WEIR_OP_PROCESSING_TIMERS | WEIR_OP_KEYED_STATE;
  if (flags & ~known)
    return weir_job_fail(job, WEIR_EPLAN, "%s: operator '%s': unknown flags 0x%x", call, n->name,
                         flags & ~known);
  if ((flags & WEIR_OP_KEYED_STATE) && !n->keyed)
    return weir_job_fail(job, WEIR_EPLAN,
                         "%s: operator '%s' keeps keyed state, but its input is not keyed: "
                         "apply weir_key_by() to its input stream",
                         call, n->name);
  uint32_t timers = flags & (WEIR_OP_EVENT_TIMERS | WEIR_OP_PROCESSING_TIMERS);
  if (!timers) return 0;
  const char *what = timers == WEIR_OP_PROCESSING_TIMERS ? "processing-time" : "event-time";
  if (!n->keyed)
    return weir_job_fail(job, WEIR_EPLAN,
                         "%s: operator '%s' declares %s timers, but its input is not keyed: "
                         "timers belong to a key (weir_key_by the stream first)",
                         call, n->name, what);
  if (!n->vt.op.on_timer && !n->vt.op.on_timers)
    return weir_job_fail(job, WEIR_EPLAN,
                         "%s: operator '%s' declares %s timers but has neither on_timer nor "
                         "on_timers",
                         call, n->name, what);
  return 0;
}

/* weir_process_opts and weir_connect: ns inputs. */
static weir_stream *process_n(const char *call, weir_stream *const *in, uint32_t ns,
                              const char *name, const weir_operator_vt *vt, void *arg,
                              int parallelism, const weir_op_opts *opts) {
  weir_op_opts o = {0};
  if (opts) {
    if (!in[0] || in[0]->job->build_err) return NULL;
    if (adopt_vt(in[0]->job, "options of operator", name ? name : "?", &o, sizeof o, opts))
      return NULL;
  }
  weir__node *n = consume_n(call, in, ns, name, vt, arg, parallelism, WEIR__NODE_OP);
  if (!n) return NULL;
  weir_job *job = in[0]->job;
  if (o.flags & WEIR_OP_EVENT_TIMERS) o.flags |= WEIR_OP_EVENT_TIME;
  if (check_opts(job, n, o.flags) || take_tags(job, n, &o)) return NULL;
  n->op_flags = o.flags;
  weir_stream *r = weir__stream_new(job, 1);
  r->out[0] = (weir__stream_out){n, WEIR__PART_FORWARD, 0};
  return r;
}

weir_stream *weir_process_opts(weir_stream *s, const char *name, const weir_operator_vt *vt,
                               void *arg, int parallelism, const weir_op_opts *opts) {
  return process_n(opts ? "weir_process_opts" : "weir_process", &s, 1, name, vt, arg, parallelism,
                   opts);
}

weir_stream *weir_connect(weir_stream *in1, weir_stream *in2, const char *name,
                          const weir_operator_vt *vt, void *arg, int parallelism,
                          const weir_op_opts *opts) {
  weir_stream *in[2] = {in1, in2};
  if (!in1 || !in2) {
    weir_job *job = in1 ? in1->job : in2 ? in2->job : NULL;
    if (job && !job->build_err)
      weir_job_fail(job, WEIR_EPLAN, "weir_connect: operator '%s': input %d is NULL",
                    name ? name : "?", in1 ? 2 : 1);
    return NULL;
  }
  return process_n("weir_connect", in, 2, name, vt, arg, parallelism, opts);
}

int weir_operator_state_version(weir_job *job, const char *name, uint32_t version) {
  if (!job || !name) return WEIR_EINVAL;
  for (uint32_t i = 0; i < job->nnodes; i++)
    if (job->nodes[i]->name && strcmp(job->nodes[i]->name, name) == 0) {
      job->nodes[i]->state_version = version;
      return 0;
    }
  return WEIR_ENOENT;
}

int weir_sink(weir_stream *s, const char *name, const weir_operator_vt *vt, void *arg,
              int parallelism) {
  /* No job to record in: after a failed call, the job holds its error. */
  if (!s) return WEIR_EPLAN;
  weir__node *n = consume("weir_sink", s, name, vt, arg, parallelism, WEIR__NODE_SINK);
  return n ? 0 : s->job->build_err;
}

struct weir_iteration {
  weir__loop loop; /* first: a weir_iteration is its loop */
};

weir_iteration *weir_iterate(weir_stream *input, const char *name, int parallelism,
                             weir_stream **body) {
  if (body) *body = NULL;
  weir__node *n =
      consume("weir_iterate", input, name, &weir__head_vt, NULL, parallelism, WEIR__NODE_OP);
  if (!n) return NULL;
  weir_job *job = input->job;
  weir__loop *l = weir_calloc(1, sizeof(weir_iteration));
  l->head = n;
  n->head_of = l;
  n->keyed = 0;
  job->loops = weir_realloc(job->loops, (job->nloops + 1) * sizeof *job->loops);
  job->loops[job->nloops++] = l;
  if (body) {
    weir_stream *b = weir__stream_new(job, 1);
    b->out[0] = (weir__stream_out){n, WEIR__PART_FORWARD, 0};
    *body = b;
  }
  return (weir_iteration *)l;
}

int weir_iteration_close(weir_iteration *it, weir_stream *feedback) {
  if (!it) return WEIR_EPLAN;
  weir__loop *l = &it->loop;
  weir_job *job = NULL;
  for (uint32_t i = 0; feedback && i < feedback->n; i++) job = feedback->job;
  if (!feedback || feedback->job->build_err)
    return feedback ? feedback->job->build_err : WEIR_EPLAN;
  if (l->closed)
    return weir_job_fail(job, WEIR_EPLAN, "iteration '%s' is closed twice", l->head->name);
  for (uint32_t i = 0; i < feedback->n; i++) {
    edge_new(job, &feedback->out[i], l->head);
    job->edges[job->nedges - 1]->back = 1;
  }
  l->closed = 1;
  return 0;
}

void weir__node_tags(const weir__node *n, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (uint32_t k = 0; k < n->ntags && at < len; k++)
    at += (size_t)snprintf(buf + at, len - at, "%s%s", k ? ", " : "", n->tags[k]);
}

weir_stream *weir_side_output(weir_stream *s, const char *tag) {
  if (!s || s->job->build_err) return NULL;
  weir_job *job = s->job;
  const char *call = "weir_side_output";
  if (!tag) {
    weir_job_fail(job, WEIR_EPLAN, "%s: tag is NULL", call);
    return NULL;
  }
  weir__node *n = s->n == 1 ? s->out[0].node : NULL;
  if (!n || n->kind != WEIR__NODE_OP || s->out[0].part != WEIR__PART_FORWARD || s->out[0].port) {
    weir_job_fail(job, WEIR_EPLAN,
                  "%s('%s'): the stream is not an operator's main output (pass the stream "
                  "weir_process_opts returned)",
                  call, tag);
    return NULL;
  }
  for (uint32_t k = 0; k < n->ntags; k++)
    if (!strcmp(n->tags[k], tag)) {
      weir_stream *r = weir__stream_new(job, 1);
      r->out[0] = (weir__stream_out){n, WEIR__PART_FORWARD, k + 1};
      return r;
    }
  char list[512];
  weir__node_tags(n, list, sizeof list);
  weir_job_fail(job, WEIR_EPLAN, "%s: operator '%s' does not declare side output '%s' (%s%s)", call,
                n->name, tag, n->ntags ? "declares: " : "declares none; weir_op_opts.tags", list);
  return NULL;
}

weir_job *weir_stream_job(const weir_stream *s) {
  return s ? s->job : NULL;
}
