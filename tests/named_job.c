/* tests/named_job.c: a job module whose operators are named after its
 * arguments, for test_http's credentials_redacted: a paced generator,
 * then an operator named argv[1] (it passes records on), then a null
 * sink named argv[2]. Names may hold anything, credentials included; the
 * endpoint must not show them.
 */
#include "weir/weir.h"

static int pass(weir_ctx *ctx, const weir_record *r) {
  weir_ctx_count(ctx, "passed", 1);
  return weir_emit_record(ctx, r);
}
static const weir_operator_vt pass_vt = {
    .size = sizeof(weir_operator_vt), .name = "pass", .process = pass};

static int build(weir_job *job, int argc, char **argv) {
  if (argc != 3) return weir_job_fail(job, WEIR_EINVAL, "usage: named_job.so OPERATOR SINK");
  weir_gen_opts g = {.records = 100000000, .keys = 100, .rate = 20000};
  weir_stream *s = weir_gen(job, "gen", &g, 0);
  s = weir_process(weir_key_by(s), argv[1], &pass_vt, NULL, 0);
  return weir_sink_to(s, argv[2], "null", NULL, 0);
}
WEIR_JOB_EXPORT(build)
