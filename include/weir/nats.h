/* weir/nats.h: the NATS JetStream source (the NATS sink is a sink
 * specification: weir/sinks.h).
 *
 *   nats://HOST:PORT/SUBJECT[?stream=NAME][&rate=R]
 *
 * reads the messages of SUBJECT stored in the JetStream stream NAME
 * (default WEIR), in stream order, one record per message: payload = the
 * message body; key = the body as a decimal number when it is one (after
 * trimming trailing whitespace; at most 2^64 - 1), otherwise
 * weir_hash_bytes(body); timestamp = the stream sequence; id from (split 0,
 * sequence). rate=R limits it to R messages per second (0 = unlimited).
 *
 * Positions. The stream sequence is the position: a checkpoint records the
 * next sequence to read (split 0) and the last sequence the job reads
 * (split 1: the last message of SUBJECT when the job first started, so
 * every run and every restore of a job reads exactly the same messages,
 * whatever is published meanwhile). A restore resumes exactly after the
 * cut. A job that starts from the beginning starts at the stream's first
 * sequence. When the position to resume from is no longer in the stream
 * (retention or a purge removed it: the stream's first sequence is above
 * it), the job stops with WEIR_ERETENTION and a message naming the
 * position, rather than skip what was lost; so does a job that waits for
 * messages that were removed while it read (checked once a second while
 * idle).
 *
 * One subtask reads (the source has parallelism 1); rescalable.
 */
#ifndef WEIR_NATS_H
#define WEIR_NATS_H

#include <stddef.h>

#include "weir/job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks a source URL; on error returns WEIR_ESINK and writes a message
 * naming the problem into err (errlen bytes). */
int weir_nats_source_check(const char *url, char *err, size_t errlen);

/* Adds the source (parallelism 1) reading url to the job. Returns the
 * stream, or NULL after recording a build error (a bad URL, a weir without
 * libnats). The server is contacted when the job starts. */
weir_stream *weir_nats_source(weir_job *job, const char *name, const char *url);

#ifdef __cplusplus
}
#endif
#endif
