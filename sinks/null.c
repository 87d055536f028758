/* null.c: owns the null sink, which accepts records and writes nothing.
 *
 * The engine counts every sink's input records, so the null sink has
 * nothing to do per record; it takes whole batches so that it costs one
 * call per batch.
 */
#include "sink_impl.h"

#include "base/alloc.h"

static int null_process(weir_ctx *ctx, const weir_record *r) {
  return 0;
}

static int null_process_batch(weir_ctx *ctx, const weir_batch *b) {
  return 0;
}

static const weir_operator_vt null_sink_vt = {
    .size = sizeof(weir_operator_vt),
    .name = "null",
    .process = null_process,
    .process_batch = null_process_batch,
};

const weir__sink_def weir__null_sink = {
    .name = "null",
    .arg_size = sizeof(weir__sink_arg),
    .free = weir_free,
    .sink = &null_sink_vt,
};
