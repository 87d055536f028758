/* nats_stage.h: private to connectors/nats/: the stage edge's batches
 * (nats_stage.c), what its output (nats.c with tasks=) writes and its input
 * (nats_stage_source.c) reads. docs/scale-out.md §2.
 *
 * A stage edge SUBJECT with tasks=N carries the records a producing job's
 * sink subtask `from` sends to consuming task `to` (0..N-1, the key's
 * owner under the job's key groups, weir_ctx_key_owner) on the subject
 * SUBJECT.<from>.<to>, in batch messages of at most WEIR__STAGE_BATCH_RECORDS
 * records or WEIR__STAGE_BATCH_BYTES bytes cut in the order they were
 * written. A batch is named (from, epoch, index): the checkpoint epoch
 * that pre-committed it and its place among that epoch's batches to `to`;
 * its Nats-Msg-Id is <job>/<SUBJECT>/<from>/<to>/<epoch>/<index>. At the
 * end of input each producer sends every task a batch flagged END, which
 * also says how many producers there are.
 *
 * Batch (little-endian):
 *   "WSB1", u32 from, u64 epoch, u32 index, u32 flags (1: END),
 *   u32 producers, u32 tasks (the edge's tasks=), u32 records, then per
 *   record:
 *   u64 key, i64 ts, u32 len, len bytes.
 *
 * Handle of a pre-committed epoch (what the checkpoint holds):
 *   "WSH1", u32 count, then per batch: u32 to, u32 len, the batch.
 */
#ifndef WEIR_NATS_STAGE_H
#define WEIR_NATS_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "weir/job.h"
#include "weir/sink.h"

#define WEIR__STAGE_BATCH_RECORDS 4096u
#define WEIR__STAGE_BATCH_BYTES (256u << 10)
#define WEIR__STAGE_HEADER 36u /* bytes before a batch's first record */
#define WEIR__STAGE_END 1u

/* The output side of one sink subtask: an open batch per task, and the
 * open epoch's handle, to which a batch is appended (in its final form,
 * the epoch and the producer filled in when the epoch is taken) when it
 * closes: a record is copied once into its open batch and once into the
 * handle, which pre-commit then hands over without a copy. Task thread. */
typedef struct weir__stage_out {
  uint32_t tasks;
  weir_sink_buf *open; /* per task: the open batch's records */
  uint32_t *nopen;     /* per task: records in it */
  uint32_t *index;     /* per task: batches closed in the open epoch */
  weir_sink_buf handle;
  uint32_t nclosed;
  int ended; /* END batches go with the next epoch */
} weir__stage_out;

void weir__stage_out_init(weir__stage_out *o, uint32_t tasks);
void weir__stage_out_free(weir__stage_out *o);
/* Adds r for its task. WEIR_ETOOBIG for a record over the batch size. */
int weir__stage_out_add(weir_ctx *ctx, weir__stage_out *o, const weir_record *r);
/* Writes the open epoch's batches into the handle `out`, named (from,
 * epoch), with `producers` producers (for END). 1 if there is nothing. */
int weir__stage_out_take(weir__stage_out *o, uint32_t from, uint32_t producers, uint64_t epoch,
                         weir_sink_buf *out);

/* One batch of a handle. */
typedef struct weir__stage_batch {
  uint32_t to;
  const uint8_t *data; /* the whole batch */
  uint32_t len;
  /* from its header */
  uint32_t from, index, flags, producers, tasks, records;
  uint64_t epoch;
} weir__stage_batch;

/* Reads a batch's header: 0, or WEIR_ECORRUPT. */
int weir__stage_batch_parse(const uint8_t *p, size_t len, weir__stage_batch *b);
/* The records of a parsed batch, one by one: *off starts at
 * WEIR__STAGE_HEADER. 1 with *r set, 0 at the end, WEIR_ECORRUPT. */
int weir__stage_batch_next(const weir__stage_batch *b, size_t *off, weir_record *r);

/* Reading a handle: open sets *off and *count (its batches) or returns
 * WEIR_ECORRUPT; next then gives 1 with *b set, 0 at the end, or
 * WEIR_ECORRUPT. */
int weir__stage_handle_open(const uint8_t *h, size_t len, size_t *off, uint32_t *count);
int weir__stage_handle_next(const uint8_t *h, size_t len, size_t *off, uint32_t *count,
                            weir__stage_batch *b);

#endif
