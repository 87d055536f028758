/* tests/install/user_job.c: a job module as a user writes it, compiled only
 * against the installed public headers: gen -> key_by -> count -> twice (an
 * operator of its own) -> sink. Its arguments: RECORDS SINK. */
#include <weir/weir.h>

#include <stdlib.h>

static int twice(weir_ctx *ctx, const weir_record *r) {
  return weir_emit_u64(ctx, r->key, 2 * weir_payload_u64(r));
}
static const weir_operator_vt twice_vt = {
    .size = sizeof(weir_operator_vt), .name = "twice", .process = twice};

static int build(weir_job *job, int argc, char **argv) {
  if (argc != 3) return weir_job_fail(job, WEIR_EINVAL, "usage: %s RECORDS SINK", argv[0]);
  weir_gen_opts g = {.records = strtoull(argv[1], NULL, 10), .keys = 7};
  weir_stream *s = weir_count(weir_key_by(weir_gen(job, "gen", &g, 0)), "count", 0);
  s = weir_process(s, "twice", &twice_vt, NULL, 0);
  return weir_sink_to(s, "out", argv[2], NULL, 0);
}
WEIR_JOB_EXPORT(build)
