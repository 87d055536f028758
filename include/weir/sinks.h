/* weir/sinks.h: built-in sinks and the sink specifications of the CLI.
 *
 * A sink specification is a short string:
 *   null       count records, write nothing (honest at-least-once: nothing
 *              to duplicate)
 *   print      one line per record on standard output: at-least-once, a
 *              restored job prints again what came after its checkpoint
 *   file:DIR   exactly-once: two-phase commit (weir/sink.h). Each sink
 *              subtask s writes one part file per epoch n (the records
 *              between two checkpoints), <name>-<s>-<n>.txt, visible only
 *              once checkpoint n completed (before: <...>.txt.pending, and
 *              <name>-<s>.inprogress for the epoch being written). Every
 *              *.txt file together holds every record exactly once. Without
 *              a state directory, one file <name>-<s>.txt at end of input
 *              (<...>.txt.pending meanwhile, left behind by a failed run).
 *              DIR and its parents are created.
 *   http://HOST:PORT/PATH[?retention=DURATION][&idempotency=off][&inflight=N][&buffer=B]
 *              exactly-once at a destination that honours Idempotency-Key:
 *              each epoch's records are kept in the checkpoint and POSTed
 *              after it completed, one request per record, up to N at once
 *              per sink subtask (default 64; 1 sends them in order, else an
 *              epoch's effects may be applied in any order), holding at most
 *              B bytes of unanswered epochs per subtask (default 64M; then
 *              no input until they land) (body
 *              "<key> <value>", text/plain) with Idempotency-Key = the
 *              record's operation id; timeouts, 5xx and connection errors
 *              are retried with the same key, 409 later; 422 (the key was
 *              used with another payload) fails the job (exit code 5).
 *              retention=DURATION (ms, s, m, h, d) is the destination's key
 *              retention: weir refuses to replay an effect that may be
 *              older (WEIR_ERETENTION, exit code 5). idempotency=off sends no
 *              key: at-least-once, for comparisons. These parameters are
 *              taken out of the URL before sending.
 *   postgresql://USER@HOST:PORT/DB[?table=T&...]   (or postgres://)
 *              exactly-once: two-phase commit into PostgreSQL. Rows (key,
 *              value, opid) are COPYed into one transaction per sink subtask
 *              and epoch, PREPAREd at the barrier (gid
 *              weir:<job>:<sink>:<owner epoch>:<checkpoint>:<subtask>, with a
 *              marker row in weir_markers and the job's fence row in
 *              weir_fence checked) and COMMIT PREPAREd when the checkpoint
 *              completed. table=T (default weir_output, created if missing)
 *              and markers=N (checkpoints of marker rows kept per subtask,
 *              default 100) are taken out of the URI; the rest goes to
 *              libpq. Needs
 *              max_prepared_transactions >= 2 per subtask.
 * Text lines are "<key> <value>\n" in decimal by default (see
 * weir_format_default); a job can give its own formatter.
 */
#ifndef WEIR_SINKS_H
#define WEIR_SINKS_H

#include "weir/job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Formats one record as a line of text without the newline into buf (cap
 * bytes), NUL-terminated as snprintf does. Returns the line's length; if that
 * is >= cap, nothing useful was written and the caller retries with a buffer
 * of that length + 1. Must return the same length for the same record, and
 * be safe to call from several sink subtasks at once. */
typedef size_t (*weir_format_fn)(const weir_record *r, char *buf, size_t cap);

/* Writes the content part of a record's operation id (docs/sinks.md §2) into
 * buf, as weir_format_fn does: the same text for the same logical effect
 * in every replay, whatever order records arrive in. The sink makes it
 * "<job id>/<sink>/c/<content>". */
typedef size_t (*weir_opid_fn)(const weir_record *r, char *buf, size_t cap);

/* The counter job's: "<key>.<count>" (count = the u64 payload). */
size_t weir_opid_key_count(const weir_record *r, char *buf, size_t cap);

/* "<key> <value>": value is the payload as a u64 when it is 8 bytes long,
 * otherwise the payload bytes as they are; "<key>" alone when empty. */
size_t weir_format_default(const weir_record *r, char *buf, size_t cap);

/* Checks a specification; on error returns WEIR_ESINK and writes a message
 * naming the problem into err (errlen bytes). */
int weir_sink_spec_check(const char *spec, char *err, size_t errlen);

/* Adds the sink named by `spec` to stream s. fmt NULL = weir_format_default.
 * Returns 0 or the job's build error (WEIR_ESINK for a bad spec); WEIR_EPLAN
 * for a NULL stream, as weir_sink. */
int weir_sink_to(weir_stream *s, const char *name, const char *spec, weir_format_fn fmt,
                 int parallelism);

/* What weir_sink_conf adds to weir_sink_to: the formatter (NULL: default)
 * and the operation id function (NULL: write-ahead ids
 * "<job id>/<sink>/w/<subtask>/<epoch>/<index>"). */
typedef struct weir_sink_conf {
  weir_format_fn fmt;
  weir_opid_fn opid;
} weir_sink_conf;
int weir_sink_to_conf(weir_stream *s, const char *name, const char *spec,
                      const weir_sink_conf *conf, int parallelism);

#ifdef __cplusplus
}
#endif
#endif
