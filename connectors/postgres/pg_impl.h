/* pg_impl.h: private to connectors/postgres/: the PostgreSQL sink's
 * specification parser and global transaction ids (pg.c), apart so that
 * they can be checked without a server.
 */
#ifndef WEIR_PG_IMPL_H
#define WEIR_PG_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weir/sinks.h"

/* Splits a postgresql:// spec into the URI for libpq (without weir's
 * `table` and `markers`), the table (default weir_output), both malloc'd,
 * and the checkpoints of marker rows to keep (default 100). Returns 0 or
 * WEIR_ESINK with a message in err. */
int weir__pg_parse(const char *spec, char **conninfo, char **table, uint64_t *keep, char *err,
                   size_t errlen);
/* The global transaction id
 * "weir:<job>:<sink>:<owner epoch>:<checkpoint>:<subtask>" (a hash for a
 * sink name over 64 bytes or with ':'). Returns 0, or WEIR_EINVAL if it
 * would not fit cap or 199 bytes. */
int weir__pg_gid(char *buf, size_t cap, const char *job, const char *sink, uint64_t epoch,
                 uint64_t checkpoint, uint32_t subtask);

#endif
