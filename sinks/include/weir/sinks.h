/* weir/sinks.h: built-in sinks and the sink specifications of the CLI.
 *
 * A sink specification is a short string:
 *   null       count records, write nothing
 *   print      one line per record on standard output
 *   file:DIR   one file per sink subtask in DIR (created if missing), named
 *              <sink name>-<subtask>.txt; while being written it is named
 *              <...>.txt.pending, and at end of input it is fsynced and
 *              renamed. A job that stops on an error leaves the .pending
 *              file (incomplete output) behind.
 * These sinks are plain (at-least-once): a restarted job may write a record
 * again. Text lines are "<key> <value>\n" in decimal by default (see
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

/* "<key> <value>": value is the payload as a u64 when it is 8 bytes long,
 * otherwise the payload bytes as they are; "<key>" alone when empty. */
size_t weir_format_default(const weir_record *r, char *buf, size_t cap);

/* Checks a specification; on error returns WEIR_ESINK and writes a message
 * naming the problem into err (errlen bytes). */
int weir_sink_spec_check(const char *spec, char *err, size_t errlen);

/* Adds the sink named by `spec` to stream s. fmt NULL = weir_format_default.
 * Returns 0 or the job's build error (WEIR_ESINK for a bad spec). */
int weir_sink_to(weir_stream *s, const char *name, const char *spec, weir_format_fn fmt,
                 int parallelism);

#ifdef __cplusplus
}
#endif
#endif
