/* null.c: owns the null sink, which accepts records and writes nothing.
 *
 * The engine counts every sink's input records, so the null sink has
 * nothing to do per record; it takes whole batches so that it costs one
 * call per batch.
 */
#include "sink_impl.h"

static int null_process(weir_ctx *ctx, const weir_record *r) {
  return 0;
}

static int null_process_batch(weir_ctx *ctx, const weir_batch *b) {
  return 0;
}

const weir_operator_vt weir__null_sink_vt = {
    .name = "null",
    .process = null_process,
    .process_batch = null_process_batch,
};
