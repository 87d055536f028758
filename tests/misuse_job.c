/* tests/misuse_job.c: a job module that misuses the API in the way its one
 * argument names, for test_cli's api_misuse tests: what the `weir` command
 * says about each mistake, and its exit code.
 *
 *   forward       a forward edge between parallelisms 1 and 2 (plan error)
 *   null-stream   a NULL stream given to weir_process, then to weir_sink_to
 *   process-1     process returns 1
 *   minus-one     process returns a bare -1
 *   run-7         a source's run returns 7
 *   idle          a source returns WEIR_SOURCE_IDLE without weir_ctx_wake_after
 *                 (20 records per subtask, one per run)
 */
#include "weir/weir.h"

#include <stdlib.h>
#include <string.h>

#define RECORDS 20

static int src_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(uint64_t)));
  return 0;
}

static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

/* One record per call; arg: what to return while records are left. */
static int src_run(weir_ctx *ctx, uint32_t budget) {
  (void)budget;
  uint64_t *next = weir_ctx_user(ctx);
  if (*next == RECORDS) return WEIR_SOURCE_DONE;
  weir_record r = {.key = *next, .id = weir_source_record_id(ctx, weir_ctx_subtask(ctx), *next)};
  int rc = weir_emit_record(ctx, &r);
  if (rc) return rc;
  ++*next;
  return (int)(intptr_t)weir_ctx_arg(ctx);
}

static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "src",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close};

/* Returns its arg for every record. */
static int ret_process(weir_ctx *ctx, const weir_record *r) {
  (void)r;
  return (int)(intptr_t)weir_ctx_arg(ctx);
}

static const weir_operator_vt ret_vt = {
    .size = sizeof(weir_operator_vt), .name = "ret", .process = ret_process};

static weir_stream *source(weir_job *job, int ret, int parallelism) {
  return weir_source(job, "src", &src_vt, (void *)(intptr_t)ret, parallelism);
}

static int build(weir_job *job, int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  if (!strcmp(what, "forward")) {
    weir_stream *s = weir_process(source(job, WEIR_SOURCE_MORE, 1), "wide", &ret_vt, NULL, 2);
    return weir_sink_to(s, "sink", "null", NULL, 2);
  }
  if (!strcmp(what, "null-stream")) {
    weir_stream *s = weir_process(NULL, "lost", &ret_vt, NULL, 0);
    return weir_sink_to(s, "sink", "null", NULL, 0);
  }
  if (!strcmp(what, "process-1") || !strcmp(what, "minus-one")) {
    int ret = !strcmp(what, "process-1") ? 1 : -1;
    weir_stream *s =
        weir_process(source(job, WEIR_SOURCE_MORE, 1), "sloppy", &ret_vt, (void *)(intptr_t)ret, 1);
    return weir_sink_to(s, "sink", "null", NULL, 1);
  }
  if (!strcmp(what, "run-7")) return weir_sink_to(source(job, 7, 1), "sink", "null", NULL, 1);
  if (!strcmp(what, "idle"))
    return weir_sink_to(source(job, WEIR_SOURCE_IDLE, 0), "sink", "null", NULL, 0);
  return weir_job_fail(job, WEIR_EINVAL,
                       "usage: %s forward|null-stream|process-1|minus-one|"
                       "run-7|idle",
                       argv[0]);
}

WEIR_JOB_EXPORT(build)
