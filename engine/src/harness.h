/* harness.h: runs one operator outside the runtime, for tests.
 *
 * The operator gets a real context (keyed state, emit calls, snapshot and
 * restore callbacks) but no threads, loops or channels: the test feeds
 * records one call at a time, reads what the operator emitted, and can
 * snapshot it and restore the snapshot into a brand-new instance, as
 * Hazelcast Jet's TestSupport and Flink's operator test harnesses do.
 */
#ifndef WEIR_HARNESS_H
#define WEIR_HARNESS_H

#include "weir/job.h"
#include "snapshot/store.h"

typedef struct weir__harness weir__harness;

/* An opened instance of the operator (subtask `subtask` of `parallelism`;
 * keyed state allowed when keyed). NULL if open failed. */
weir__harness *weir__harness_create(const weir_operator_vt *vt, void *arg, int keyed,
                                    uint32_t subtask, uint32_t parallelism);
void weir__harness_destroy(weir__harness *h);
/* Feeds one record (through process_batch when the operator has it). */
int weir__harness_process(weir__harness *h, const weir_record *r);
/* Calls finish. */
int weir__harness_finish(weir__harness *h);
/* Everything emitted so far, in order (valid until the next call). */
uint32_t weir__harness_count(const weir__harness *h);
weir_record weir__harness_output(const weir__harness *h, uint32_t i);
/* Snapshot of the operator's state (managed and its own) as the runtime
 * would store it; *out is owned by the caller (weir_subtask_snapshot_free). */
int weir__harness_snapshot(weir__harness *h, uint64_t id, weir_subtask_snapshot *out);
/* Closes the instance and opens a new one from `snap` (taken over); the
 * emitted output is kept. */
int weir__harness_restore(weir__harness *h, weir_subtask_snapshot *snap);
/* The failure message of the last failed call, or "". */
const char *weir__harness_error(const weir__harness *h);

#endif
