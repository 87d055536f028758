/* trace.c: owns latency tracing (trace.h): the hooks on the record path,
 * the per-task histograms and worst paths, their merge into the job's at
 * task close, and the report (weir_job_hop_quantile, weir_job_write_latency). */
#include "trace.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/hist.h"
#include "batch.h"
#include "task.h"
#include "task_ctx.h"
#include "worker.h"

/* A sink chain's slowest records: the whole path of each. */
typedef struct worst_path {
  uint64_t total, done; /* first append at the source -> the sink's call returned */
  uint32_t npath;       /* hops, the sink's own last */
  weir__hop path[WEIR__TRACE_HOPS + 1];
} worst_path;

typedef struct waits {
  weir_hist fill, queue, process, total;
} waits;

struct weir__task_trace {
  waits w;
  const weir__batch *in; /* the input batch being processed, or NULL */
  weir__hop hop;         /* its hop */
  uint32_t nworst;
  worst_path worst[WEIR__TRACE_WORST];
};

typedef struct task_info {
  uint32_t node, subtask, worker;
} task_info;

struct weir__job_trace {
  pthread_mutex_t mu;
  uint32_t nnodes, ntasks;
  waits *nodes;     /* per chain-head node */
  task_info *tasks; /* per task index, filled at close */
  uint32_t nworst;
  worst_path worst[WEIR__TRACE_WORST];
};

weir__job_trace *weir__trace_job_create(uint32_t nnodes, uint32_t ntasks) {
  weir__job_trace *jt = weir_calloc(1, sizeof *jt);
  pthread_mutex_init(&jt->mu, NULL);
  jt->nnodes = nnodes;
  jt->ntasks = ntasks;
  jt->nodes = weir_calloc(nnodes ? nnodes : 1, sizeof *jt->nodes);
  jt->tasks = weir_calloc(ntasks ? ntasks : 1, sizeof *jt->tasks);
  return jt;
}

void weir__trace_job_destroy(weir__job_trace *jt) {
  if (!jt) return;
  pthread_mutex_destroy(&jt->mu);
  weir_free(jt->nodes);
  weir_free(jt->tasks);
  weir_free(jt);
}

weir__task_trace *weir__trace_task_create(void) {
  return weir_calloc(1, sizeof(weir__task_trace));
}

/* Where a path of `total` goes among the n slowest of list (capacity
 * WEIR__TRACE_WORST): a free place, the fastest one's, or NULL if it is
 * not among them. */
static worst_path *worst_slot(worst_path *list, uint32_t *n, uint64_t total) {
  if (*n < WEIR__TRACE_WORST) return &list[(*n)++];
  worst_path *least = &list[0];
  for (uint32_t i = 1; i < *n; i++)
    if (list[i].total < least->total) least = &list[i];
  return least->total < total ? least : NULL;
}

void weir__trace_task_close(weir__task *t) {
  weir__task_trace *tt = t->tr;
  weir__job_trace *jt = t->job->trace;
  if (!tt) return;
  uint32_t node = t->ops[0]->node->index;
  pthread_mutex_lock(&jt->mu);
  jt->tasks[t->index] = (task_info){node, t->subtask, t->worker->index};
  waits *w = &jt->nodes[node];
  weir_hist_merge(&w->fill, &tt->w.fill);
  weir_hist_merge(&w->queue, &tt->w.queue);
  weir_hist_merge(&w->process, &tt->w.process);
  weir_hist_merge(&w->total, &tt->w.total);
  for (uint32_t i = 0; i < tt->nworst; i++) {
    worst_path *w = worst_slot(jt->worst, &jt->nworst, tt->worst[i].total);
    if (w) *w = tt->worst[i];
  }
  pthread_mutex_unlock(&jt->mu);
  for (uint32_t i = 0; i < t->nrouters; i++) t->routers[i].tr = NULL;
  weir_free(tt);
  t->tr = NULL;
}

void weir__trace_born(weir__task_trace *tt, weir__batch *b) {
  weir__batch_trace *bt = &b->tr;
  bt->born = weir_clock_mono_ns();
  bt->pushed = 0;
  bt->npath = 0;
  const weir__batch *in = tt->in;
  if (!in) return; /* a source's record, or one emitted outside a batch */
  uint32_t n = in->tr.npath < WEIR__TRACE_HOPS - 1 ? in->tr.npath : WEIR__TRACE_HOPS - 1;
  memcpy(bt->path, in->tr.path, n * sizeof *bt->path);
  bt->path[n] = tt->hop;
  bt->npath = n + 1;
}

static inline uint32_t us(uint64_t ns) {
  ns /= 1000;
  return ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

/* What t's worker did between `from` and `to` (its own thread: the ring
 * is its own). */
static void attribute(weir__task *t, weir__hop *h, uint64_t from, uint64_t to) {
  weir__worker_trace *wt = t->worker->tr;
  uint64_t asleep = 0, waking = 0, self = 0, other = 0, top = 0;
  int32_t top_task = -1;
  uint64_t cur = wt->step_start > from ? wt->step_start : from;
  if (to > cur) self += to - cur;
  /* Other tasks' time, summed per task over a short list. */
  enum { K = 8 };
  int32_t ids[K];
  uint64_t sums[K];
  uint32_t nids = 0;
  uint32_t n = wt->next < WEIR__TRACE_RING ? wt->next : WEIR__TRACE_RING;
  for (uint32_t k = 1; k <= n; k++) {
    const weir__slice *s = &wt->ring[(wt->next - k) % WEIR__TRACE_RING];
    if (s->end <= from) break;
    uint64_t a = s->start > from ? s->start : from, e = s->end < to ? s->end : to;
    if (e <= a) continue;
    uint64_t d = e - a;
    if (s->task == WEIR__SLICE_ASLEEP) {
      asleep += d;
    } else if (s->task == WEIR__SLICE_WAKING) {
      waking += d;
    } else if (s->task == (int32_t)t->index) {
      self += d;
    } else if (s->task >= 0) {
      other += d;
      uint32_t i = 0;
      while (i < nids && ids[i] != s->task) i++;
      if (i == nids && nids < K) {
        ids[nids] = s->task;
        sums[nids++] = 0;
      }
      if (i < nids) sums[i] += d;
    }
  }
  for (uint32_t i = 0; i < nids; i++)
    if (sums[i] > top) {
      top = sums[i];
      top_task = ids[i];
    }
  h->asleep_us = us(asleep);
  h->waking_us = us(waking);
  h->self_us = us(self);
  h->other_us = us(other);
  h->top_us = us(top);
  h->top_task = top_task;
}

/* Queue waits shorter than this are not attributed (scanning the ring
 * for every batch would cost more than the wait). */
#define ATTRIBUTE_NS 50000u

void weir__trace_pick(weir__task *t, const weir__batch *b, uint32_t from, uint64_t now) {
  weir__task_trace *tt = t->tr;
  const weir__batch_trace *bt = &b->tr;
  uint32_t n = b->len - from;
  weir__hop *h = &tt->hop;
  memset(h, 0, sizeof *h);
  h->born = bt->born;
  h->pushed = bt->pushed;
  h->picked = now;
  h->task = t->index;
  h->worker = t->worker->index;
  h->top_task = -1;
  if (!from && bt->pushed >= bt->born) weir_hist_add(&tt->w.fill, bt->pushed - bt->born, b->len);
  if (now > bt->pushed) {
    weir_hist_add(&tt->w.queue, now - bt->pushed, n);
    if (now - bt->pushed >= ATTRIBUTE_NS) attribute(t, h, bt->pushed, now);
  }
  tt->in = b;
}

void weir__trace_done(weir__task *t, const weir__batch *b, uint32_t n, uint64_t now) {
  weir__task_trace *tt = t->tr;
  tt->in = NULL;
  weir_hist_add(&tt->w.process, now - tt->hop.picked, n);
  if (t->nrouters) return;
  /* A sink chain: the path ends here. */
  const weir__batch_trace *bt = &b->tr;
  uint64_t origin = bt->npath ? bt->path[0].born : bt->born;
  if (!origin || now < origin) return;
  uint64_t total = now - origin;
  weir_hist_add(&tt->w.total, total, n);
  worst_path *p = worst_slot(tt->worst, &tt->nworst, total);
  if (!p) return;
  p->total = total;
  p->done = now;
  p->npath = bt->npath;
  memcpy(p->path, bt->path, bt->npath * sizeof *p->path);
  p->path[p->npath++] = tt->hop;
}

/* ---- the report ------------------------------------------------------------ */

static const weir_hist *wait_hist(const waits *w, weir_hop_wait k) {
  switch (k) {
  case WEIR_WAIT_FILL:
    return &w->fill;
  case WEIR_WAIT_QUEUE:
    return &w->queue;
  case WEIR_WAIT_PROCESS:
    return &w->process;
  case WEIR_WAIT_TOTAL:
    return &w->total;
  }
  return NULL;
}

int weir_job_hop_quantile(const weir_job *job, const char *node, weir_hop_wait wait, double q,
                          uint64_t *ns) {
  if (!job || !ns || q < 0 || q > 1) return WEIR_EINVAL;
  weir__job_trace *jt = job->trace;
  if (!jt) return WEIR_EINVAL;
  weir_hist sum;
  memset(&sum, 0, sizeof sum);
  int found = 0;
  pthread_mutex_lock(&jt->mu);
  for (uint32_t i = 0; i < jt->nnodes && i < job->nnodes; i++) {
    if (node && strcmp(job->nodes[i]->name, node) != 0) continue;
    const weir_hist *h = wait_hist(&jt->nodes[i], wait);
    if (!h) break;
    weir_hist_merge(&sum, h);
    found = 1;
  }
  pthread_mutex_unlock(&jt->mu);
  if (!found) return node ? WEIR_ENOENT : WEIR_EINVAL;
  *ns = weir_hist_quantile(&sum, q);
  return 0;
}

static void write_quantiles(FILE *f, const weir_hist *h) {
  fprintf(f, " %8.1f %8.1f %8.1f %8.1f", weir_hist_quantile(h, 0.5) / 1e3,
          weir_hist_quantile(h, 0.99) / 1e3, weir_hist_quantile(h, 0.999) / 1e3, h->max / 1e3);
}

static const char *task_name(const weir_job *job, const weir__job_trace *jt, uint32_t task,
                             uint32_t *subtask) {
  if (task >= jt->ntasks) return "?";
  *subtask = jt->tasks[task].subtask;
  uint32_t node = jt->tasks[task].node;
  return node < job->nnodes ? job->nodes[node]->name : "?";
}

int weir_job_write_latency(const weir_job *job, FILE *f) {
  if (!job || !f) return WEIR_EINVAL;
  weir__job_trace *jt = job->trace;
  if (!jt) return WEIR_EINVAL;
  pthread_mutex_lock(&jt->mu);
  fprintf(f, "where records wait, per hop (us; into = the task that takes the batch):\n");
  fprintf(f, "  %-16s %-8s %8s %8s %8s %8s %12s\n", "into", "wait", "p50", "p99", "p99.9", "max",
          "records");
  for (uint32_t i = 0; i < jt->nnodes && i < job->nnodes; i++) {
    const waits *w = &jt->nodes[i];
    if (!w->queue.count && !w->total.count) continue;
    static const char *names[] = {"fill", "queue", "process", "total"};
    for (int k = 0; k < 4; k++) {
      const weir_hist *h = wait_hist(w, (weir_hop_wait)k);
      if (!h->count) continue;
      fprintf(f, "  %-16s %-8s", job->nodes[i]->name, names[k]);
      write_quantiles(f, h);
      fprintf(f, " %12" PRIu64 "\n", h->count);
    }
  }
  /* Slowest first. */
  worst_path sorted[WEIR__TRACE_WORST];
  uint32_t n = jt->nworst;
  memcpy(sorted, jt->worst, n * sizeof *sorted);
  for (uint32_t i = 1; i < n; i++)
    for (uint32_t j = i; j > 0 && sorted[j].total > sorted[j - 1].total; j--) {
      worst_path x = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = x;
    }
  if (n) fprintf(f, "slowest records (engine time, first append at the source -> sink):\n");
  for (uint32_t i = 0; i < n; i++) {
    const worst_path *p = &sorted[i];
    fprintf(f, "  %.1f us:\n", p->total / 1e3);
    for (uint32_t k = 0; k < p->npath; k++) {
      const weir__hop *h = &p->path[k];
      uint64_t left = k + 1 < p->npath ? p->path[k + 1].born : p->done;
      uint32_t sub = 0;
      const char *name = task_name(job, jt, h->task, &sub);
      fprintf(f,
              "    -> %s[%u] on worker %u: fill %.1f, queue %.1f (asleep %u, waking %u, itself %u, "
              "others %u",
              name, sub, h->worker, (h->pushed - h->born) / 1e3, (h->picked - h->pushed) / 1e3,
              h->asleep_us, h->waking_us, h->self_us, h->other_us);
      if (h->top_task >= 0) {
        uint32_t tsub = 0;
        const char *top = task_name(job, jt, (uint32_t)h->top_task, &tsub);
        fprintf(f, ", most %s[%u] %u", top, tsub, h->top_us);
      }
      fprintf(f, "), then %.1f until %s\n", left > h->picked ? (left - h->picked) / 1e3 : 0.0,
              k + 1 < p->npath ? "it emitted the record" : "its call returned");
    }
  }
  pthread_mutex_unlock(&jt->mu);
  return 0;
}
