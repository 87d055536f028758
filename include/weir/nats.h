/* weir/nats.h: the NATS JetStream source (the NATS sink is a sink
 * specification: weir/sinks.h).
 *
 *   nats://HOST:PORT/SUBJECT[?stream=NAME][&rate=R][&splits=N]
 *
 * reads the messages of SUBJECT stored in the JetStream stream NAME
 * (default WEIR), one record per message: payload = the message body; key
 * = the body as a decimal number when it is one (after trimming trailing
 * whitespace; at most 2^64 - 1), otherwise weir_hash_bytes(body);
 * timestamp = the stream sequence; id from (split 0, sequence), whatever
 * the split. rate=R limits the source to R messages per second, shared by
 * its subtasks in proportion to the splits they own (0 = unlimited).
 *
 * Splits. With splits=1 (the default) SUBJECT, wildcard or not, is one
 * split, read in stream order by one consumer. With splits=N (1 to 1024,
 * a wildcard SUBJECT only, as in orders.*), the concrete subjects the
 * stream holds under SUBJECT are spread over N splits by a stable hash of
 * their names, and each split reads its subjects merged in stream order.
 * Subtask k of P reads the splits j with j mod P == k, so up to N subtasks
 * read at once; take N well above the largest parallelism (a hash spreads
 * a few subjects unevenly; a split with no subject costs nothing). A
 * watermark strategy (weir_with_watermarks) keeps a watermark per split.
 *
 * Positions. The stream sequence is the position: a checkpoint records,
 * per split j, the next sequence to read (position 3j), the last sequence
 * the split reads (3j + 1: the last message of its subjects when it first
 * started, so every run and every restore of a job reads exactly the same
 * messages, whatever is published meanwhile) and N (3j + 2). A restore
 * resumes every split exactly after the cut, at the same or another
 * parallelism (a split's position does not depend on which subtask owns
 * it); a restore with another splits= is refused. A job that starts from
 * the beginning starts at the stream's first sequence. When the position
 * to resume from is no longer in the stream (retention or a purge removed
 * it: the stream's first sequence is above it), the job stops with
 * WEIR_ERETENTION and a message naming the position, rather than skip what
 * was lost; so does a job that waits for messages that were removed while
 * it read (checked once a second while idle).
 *
 * Servers. HOST:PORT may be a list of the servers of one cluster,
 * nats://HOST:PORT,HOST:PORT,.../SUBJECT (without credentials), for the
 * source, the nats sink and stage edges alike: libnats connects to one of
 * them and, when that one fails, reconnects to another.
 *
 * Stage edges (docs/scale-out.md §2.1). With tasks=T
 *
 *   nats://HOST:PORT/SUBJECT?tasks=T[&stream=NAME][&duplicates=D][&replicas=N]
 *
 * the URL is the input side of a stage edge, whose output side is the
 * nats sink with the same URL in another job: task t (0..T-1) reads the
 * batches the producing job's sink subtasks sent it on SUBJECT.<from>.t,
 * each applied once (the task's checkpoint keeps the last batch applied
 * per producer; a batch at or below it is skipped, whatever the stream's
 * duplicate window); records keep their key and timestamp. Subtask k of P
 * reads the tasks t with t mod P == k; a restore may change P. With a
 * watermark strategy, each producer of a task is a split of its own. A
 * task ends when every producer sent its end of input; the source when
 * all its tasks did. Once a checkpoint completed, each task purges its subjects
 * below its position in it; a run that would read below such a purge
 * stops with WEIR_ERETENTION.
 *
 * Replicas. replicas=N (1 to 5, default 1), on a stage edge and on the
 * nats sink, is the replica count of the stream weir creates when it is
 * missing (either side of an edge may create it): on a JetStream cluster,
 * N = 3 keeps the stream's batches, and its acknowledgements to the
 * producer, while one of its servers is down (a single server refuses
 * N > 1); the reading side may stall meanwhile, or fail and need a
 * restore (test stage::survives_a_nats_node_killed). A stream that exists
 * already is left as it is, whatever its replica count: no error, and no
 * change. The source without tasks= creates no stream, and refuses
 * replicas=.
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

/* Adds the source reading url to the job, with `parallelism` subtasks (0 =
 * the job's default; subtasks beyond the URL's splits= read nothing).
 * Returns the stream, or NULL after recording a build error (a bad URL, a
 * weir without libnats). The server is contacted when the job starts. */
weir_stream *weir_nats_source_par(weir_job *job, const char *name, const char *url,
                                  int parallelism);
/* The same with parallelism 1. */
weir_stream *weir_nats_source(weir_job *job, const char *name, const char *url);

#ifdef __cplusplus
}
#endif
#endif
