/* test_trace.c: latency tracing (engine/src/trace.c, base/hist.c,
 * docs/latency.md): the log-bucketed histograms, and what a traced run
 * reports through weir_job_hop_quantile and weir_job_write_latency. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/hist.h"
#include "helpers.h"
#include "weir/weir.h"

Test(hist, small_values_are_exact) {
  static weir_hist h;
  memset(&h, 0, sizeof h);
  for (uint64_t v = 0; v < 64; v++) weir_hist_add(&h, v, 1);
  cr_assert_eq(h.count, 64);
  cr_assert_eq(h.max, 63);
  cr_assert_eq(weir_hist_quantile(&h, 0), 0);
  cr_assert_eq(weir_hist_quantile(&h, 0.5), 32);
  cr_assert_eq(weir_hist_quantile(&h, 1), 63);
}

Test(hist, quantiles_within_one_sixty_fourth) {
  static weir_hist h, a, b;
  memset(&h, 0, sizeof h);
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  /* 1..1e6 ns, each value once; half of them into each of two histograms
   * merged after, as tasks' histograms are. */
  for (uint64_t v = 1; v <= 1000000; v++) weir_hist_add(v % 2 ? &a : &b, v, 1);
  weir_hist_merge(&h, &a);
  weir_hist_merge(&h, &b);
  cr_assert_eq(h.count, 1000000);
  cr_assert_eq(h.max, 1000000);
  double qs[] = {0.1, 0.5, 0.9, 0.99, 0.999};
  for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
    double want = qs[i] * 1e6, got = (double)weir_hist_quantile(&h, qs[i]);
    cr_assert(got >= want * (1 - 1.0 / 64) && got <= want * (1 + 1.0 / 64),
              "q %.3f: %.0f, want %.0f within 1/64", qs[i], got, want);
  }
  /* Weights count as that many values; the largest stays exact. */
  memset(&h, 0, sizeof h);
  weir_hist_add(&h, 1000, 99);
  weir_hist_add(&h, 123456789, 1);
  cr_assert_eq(h.count, 100);
  cr_assert(weir_hist_quantile(&h, 0.5) >= 984 && weir_hist_quantile(&h, 0.5) <= 1016);
  cr_assert_eq(weir_hist_quantile(&h, 1), 123456789);
  uint64_t top = weir_hist_quantile(&h, 0.999);
  cr_assert(top >= 123456789 - 123456789 / 64 && top <= 123456789, "%llu", (unsigned long long)top);
}

/* An operator that holds one batch for 30 ms: its hop's processing time,
 * and the total of the records in that batch, must show it. */
static int slow_batch(weir_ctx *ctx, const weir_batch *b) {
  int *done = weir_ctx_user(ctx);
  if (!*done && weir_ctx_subtask(ctx) == 0) {
    *done = 1;
    struct timespec ts = {0, 30 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  for (uint32_t i = 0; i < b->len; i++) {
    int rc = weir_emit_u64(ctx, b->keys[i], b->keys[i]);
    if (rc < 0) return rc;
  }
  return 0;
}
static int slow_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(int)));
  return 0;
}
static void slow_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}
static const weir_operator_vt slow_vt = {.size = sizeof(weir_operator_vt),
                                         .name = "slow",
                                         .open = slow_open,
                                         .process_batch = slow_batch,
                                         .close = slow_close};

/* gen(2) -> key_by -> slow(2) -> key_by -> count(2) + null sink. */
static weir_job *traced_job(int trace, int *rc) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "traced"), 0);
  weir_gen_opts g = {.records = 20000, .keys = 100};
  weir_stream *s = weir_gen(job, "gen", &g, 2);
  s = weir_process(weir_key_by(s), "slow", &slow_vt, NULL, 2);
  s = weir_count(weir_key_by(s), "count", 2);
  cr_assert_eq(weir_sink_to(s, "sink", "null", NULL, 2), 0, "%s", weir_job_error(job));
  weir_run_opts o = {.workers = 2, .trace_latency = trace};
  *rc = weir_job_run(job, &o);
  return job;
}

Test(trace, waits_per_hop_and_the_slowest_path) {
  int rc;
  weir_job *job = traced_job(1, &rc);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  uint64_t lo, mid, hi;
  const weir_hop_wait waits[] = {WEIR_WAIT_FILL, WEIR_WAIT_QUEUE, WEIR_WAIT_PROCESS};
  const char *into[] = {"slow", "count"};
  for (int n = 0; n < 2; n++)
    for (int w = 0; w < 3; w++) {
      cr_assert_eq(weir_job_hop_quantile(job, into[n], waits[w], 0, &lo), 0);
      cr_assert_eq(weir_job_hop_quantile(job, into[n], waits[w], 0.5, &mid), 0);
      cr_assert_eq(weir_job_hop_quantile(job, into[n], waits[w], 1, &hi), 0);
      cr_assert(lo <= mid && mid <= hi, "%s wait %d: %llu %llu %llu", into[n], w,
                (unsigned long long)lo, (unsigned long long)mid, (unsigned long long)hi);
    }
  /* The 30 ms batch: processed in slow's hop, and seen in the total at the
   * sink's chain (count + sink), not in count's own processing. */
  cr_assert_eq(weir_job_hop_quantile(job, "slow", WEIR_WAIT_PROCESS, 1, &hi), 0);
  cr_assert_geq(hi, 30000000ull);
  cr_assert_eq(weir_job_hop_quantile(job, "count", WEIR_WAIT_TOTAL, 1, &hi), 0);
  cr_assert_geq(hi, 30000000ull);
  cr_assert_eq(weir_job_hop_quantile(job, NULL, WEIR_WAIT_TOTAL, 1, &lo), 0);
  cr_assert_eq(lo, hi, "only the sink's chain has totals");
  /* The report names the hops and the slowest path through both. */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cr_assert_eq(weir_job_write_latency(job, f), 0);
  fclose(f);
  cr_assert(strstr(text, "slowest records"), "%s", text);
  cr_assert(strstr(text, "-> slow["), "%s", text);
  cr_assert(strstr(text, "-> count["), "%s", text);
  free(text);
  weir_job_destroy(job);
}

Test(trace, asked_of_an_untraced_run_or_an_unknown_operator) {
  int rc;
  weir_job *job = traced_job(0, &rc);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  uint64_t ns = 7;
  cr_assert_eq(weir_job_hop_quantile(job, "slow", WEIR_WAIT_QUEUE, 0.5, &ns), WEIR_EINVAL);
  cr_assert_eq(weir_job_write_latency(job, stderr), WEIR_EINVAL);
  weir_job_destroy(job);
  job = traced_job(1, &rc);
  cr_assert_eq(weir_job_hop_quantile(job, "nope", WEIR_WAIT_QUEUE, 0.5, &ns), WEIR_ENOENT);
  cr_assert_eq(weir_job_hop_quantile(job, "slow", WEIR_WAIT_QUEUE, 1.5, &ns), WEIR_EINVAL);
  weir_job_destroy(job);
}
