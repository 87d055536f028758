/* connector.h: private to connectors/: what the connectors' specification
 * parsers share (registry.c): the sink protocol's internals they build on,
 * their error message, durations in URL parameters.
 */
#ifndef WEIR_CONNECTOR_H
#define WEIR_CONNECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "sink_impl.h"

/* Writes the message into err (errlen bytes; err may be NULL) and returns
 * WEIR_ESINK. */
int weir__spec_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A URL as a destination's identity (weir_destination.id): the URL without
 * its user information ("user:password@", credentials), written into buf
 * (cap bytes, NUL-terminated, cut if need be). */
void weir__url_identity(const char *url, char *buf, size_t cap);

/* Parses a duration "10s" (ms, s, m, h, d). Returns 0 or -1. */
int weir__parse_duration_ms(const char *s, size_t n, uint64_t *ms);

/* Parses a size "65536", "64k", "64M", "1G" (binary: k = 1024). Returns 0
 * or -1. */
int weir__parse_bytes(const char *s, size_t n, uint64_t *bytes);

#endif
