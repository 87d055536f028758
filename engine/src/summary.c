/* summary.c: owns the job's statistics as the API reports them: totals per
 * operator and the JSON summary of a run. */
#include <stdio.h>
#include <string.h>

#include "task.h"
#include "base/json.h"
#include "task_ctx.h"

static const char *kind_name(weir__node_kind k) {
  return k == WEIR__NODE_SOURCE ? "source" : k == WEIR__NODE_SINK ? "sink" : "operator";
}

int weir_job_operator_counts(const weir_job *job, const char *name, uint64_t *records_in,
                             uint64_t *records_out) {
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    if (strcmp(n->name, name) != 0) continue;
    uint64_t in = 0, out = 0;
    /* Asked from another thread before the run has made the contexts:
     * nothing counted yet. */
    int planned = atomic_load_explicit(&job->planned, memory_order_acquire);
    for (int s = 0; planned && n->ctx && s < n->parallelism; s++) {
      in += atomic_load_explicit(&n->ctx[s]->pub_in, memory_order_relaxed);
      out += atomic_load_explicit(&n->ctx[s]->pub_out, memory_order_relaxed);
    }
    if (records_in) *records_in = in;
    if (records_out) *records_out = out;
    return 0;
  }
  return WEIR_ENOENT;
}

int weir_job_write_summary(const weir_job *job, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -errno;
  uint64_t end = job->end_ns ? job->end_ns : job->start_ns;
  double elapsed = job->start_ns ? (double)(end - job->start_ns) / 1e9 : 0;
  uint64_t src = 0;
  fprintf(f, "{\n  \"job\": ");
  weir_json_string(f, job->name);
  int failed = atomic_load(&job->failed);
  fprintf(f, ",\n  \"ok\": %s,\n  \"error\": ", failed || job->build_err ? "false" : "true");
  weir_json_string(f, job->errmsg);
  fprintf(f, ",\n  \"workers\": %u,\n  \"elapsed_s\": %.6f,\n  \"operators\": [",
          job->plan.nworkers, elapsed);
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    uint64_t tin = 0, tout = 0;
    fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
    weir_json_string(f, n->name);
    fprintf(f, ", \"kind\": \"%s\", \"parallelism\": %d, \"subtasks\": [", kind_name(n->kind),
            n->parallelism);
    for (int s = 0; n->ctx && s < n->parallelism; s++) {
      weir_ctx *c = n->ctx[s];
      uint64_t in = atomic_load_explicit(&c->pub_in, memory_order_relaxed);
      uint64_t out = atomic_load_explicit(&c->pub_out, memory_order_relaxed);
      tin += in;
      tout += out;
      fprintf(f, "%s{\"records_in\": %llu, \"records_out\": %llu, \"counters\": {", s ? ", " : "",
              (unsigned long long)in, (unsigned long long)out);
      unsigned nc = atomic_load_explicit(&c->ncounters, memory_order_acquire);
      for (unsigned k = 0; k < nc; k++) {
        fprintf(f, "%s", k ? ", " : "");
        weir_json_string(f, c->counters[k].name);
        fprintf(f, ": %llu", (unsigned long long)atomic_load(&c->counters[k].value));
      }
      fprintf(f, "}}");
    }
    if (n->kind == WEIR__NODE_SOURCE) src += tout;
    fprintf(f, "], \"records_in\": %llu, \"records_out\": %llu}", (unsigned long long)tin,
            (unsigned long long)tout);
  }
  fprintf(f, "\n  ],\n  \"source_records\": %llu,\n  \"records_per_s\": %.1f",
          (unsigned long long)src, elapsed > 0 ? (double)src / elapsed : 0.0);
  const weir_run_info *ri = weir_job_run_info(job);
  if (ri->restored_from)
    fprintf(f,
            ",\n  \"restore\": {\"checkpoint\": %llu, \"bytes\": %llu, \"read_ms\": %.3f, "
            "\"build_ms\": %.3f, \"probe_ms\": %.3f, \"total_ms\": %.3f}",
            (unsigned long long)ri->restored_from, (unsigned long long)ri->restored_bytes,
            ri->restore_read_ms, ri->restore_build_ms, ri->restore_probe_ms, ri->restore_ms);
  fprintf(f, "\n}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) return WEIR_EIO;
  return 0;
}

int weir_job_counter(const weir_job *job, const char *op, const char *counter, uint64_t *value) {
  *value = 0;
  for (uint32_t i = 0; i < job->nnodes; i++) {
    weir__node *n = job->nodes[i];
    if (strcmp(n->name, op) != 0) continue;
    for (int s = 0; n->ctx && s < n->parallelism; s++) {
      weir_ctx *c = n->ctx[s];
      unsigned nc = atomic_load_explicit(&c->ncounters, memory_order_acquire);
      for (unsigned k = 0; k < nc; k++)
        if (strcmp(c->counters[k].name, counter) == 0) *value += atomic_load(&c->counters[k].value);
    }
    return 0;
  }
  return WEIR_ENOENT;
}

int weir_job_stopped(const weir_job *job) {
  if (!atomic_load(&job->stopping)) return 0;
  return atomic_load(&job->draining) ? 2 : 1;
}
