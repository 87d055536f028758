/* registry.c: owns sink specifications ("null", "print", "file:DIR",
 * "http://HOST:PORT/PATH?...", "nats://HOST:PORT/SUBJECT?...", "postgresql://..."):
 * the table of schemes and what each names (weir__sink_def), checking a
 * specification and adding the sink it names to a job (weir_sink_to,
 * weir_sink_to_conf).
 *
 * A connector's sink is one weir__sink_def in its own folder (which parses
 * its specification into its own arg) and its line in the table here.
 */
#include "connector.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

extern const weir__sink_def weir__file_sink;  /* file/file.c */
extern const weir__sink_def weir__http_sink;  /* http/http.c */
extern const weir__sink_def weir__https_sink; /* http/http.c */
extern const weir__sink_def weir__nats_sink;  /* nats/nats.c */
extern const weir__sink_def weir__pg_sink;    /* postgres/pg.c */

/* A scheme ending in ':' or '/' is a prefix; any other names the whole
 * specification. `usage` is its form in the list of what to use (NULL:
 * not listed). */
static const struct {
  const char *scheme;
  const char *usage;
  const weir__sink_def *def;
} sinks[] = {
    {"null", "null", &weir__null_sink},
    {"print", "print", &weir__print_sink},
    {"file:", "file:DIR", &weir__file_sink},
    {"http://", "http://HOST:PORT/PATH", &weir__http_sink},
    {"https://", "https://HOST:PORT/PATH", &weir__https_sink},
    {"nats://", "nats://HOST:PORT/SUBJECT", &weir__nats_sink},
    {"postgresql://", "postgresql://...", &weir__pg_sink},
    {"postgres://", NULL, &weir__pg_sink},
};
#define NSINKS (sizeof sinks / sizeof sinks[0])

int weir__spec_error(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return WEIR_ESINK;
}

/* What to use, from the table: "use a, b or c". */
static void usage(char *buf, size_t cap) {
  size_t total = 0, listed = 0;
  for (size_t i = 0; i < NSINKS; i++) total += sinks[i].usage != NULL;
  int n = snprintf(buf, cap, "use ");
  for (size_t i = 0; i < NSINKS && n > 0 && (size_t)n < cap; i++) {
    if (!sinks[i].usage) continue;
    const char *sep = listed == 0 ? "" : listed + 1 < total ? ", " : " or ";
    n += snprintf(buf + n, cap - (size_t)n, "%s%s", sep, sinks[i].usage);
    listed++;
  }
}

int weir__parse_duration_ms(const char *s, size_t n, uint64_t *ms) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < n && s[i] >= '0' && s[i] <= '9') {
    if (v > UINT64_MAX / 10 - 9) return -1;
    v = v * 10 + (uint64_t)(s[i++] - '0');
  }
  if (i == 0) return -1;
  const char *u = s + i;
  size_t un = n - i;
  uint64_t mul = 0;
  if (un == 2 && !strncmp(u, "ms", 2))
    mul = 1;
  else if (un == 1 && *u == 's')
    mul = 1000;
  else if (un == 1 && *u == 'm')
    mul = 60000;
  else if (un == 1 && *u == 'h')
    mul = 3600000;
  else if (un == 1 && *u == 'd')
    mul = 86400000;
  if (!mul || v > UINT64_MAX / mul) return -1;
  *ms = v * mul;
  return 0;
}

int weir__parse_bytes(const char *s, size_t n, uint64_t *bytes) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < n && s[i] >= '0' && s[i] <= '9') {
    if (v > UINT64_MAX / 10 - 9) return -1;
    v = v * 10 + (uint64_t)(s[i++] - '0');
  }
  if (i == 0) return -1;
  unsigned shift = 0;
  if (i + 1 == n) {
    const char *units = "kKmMgG";
    const char *u = strchr(units, s[i]);
    if (!u || !s[i]) return -1;
    shift = 10u * (unsigned)((u - units) / 2 + 1);
  } else if (i != n) {
    return -1;
  }
  if (v > (UINT64_MAX >> shift)) return -1;
  *bytes = v << shift;
  return 0;
}

void weir__url_identity(const char *url, char *buf, size_t cap) {
  const char *host = strstr(url, "://");
  host = host ? host + 3 : url;
  size_t authority = strcspn(host, "/?#");
  const char *at = memchr(host, '@', authority);
  if (!at) {
    snprintf(buf, cap, "%s", url);
    return;
  }
  snprintf(buf, cap, "%.*s%s", (int)(host - url), url, at + 1);
}

static const weir__sink_def *lookup(const char *spec) {
  for (size_t i = 0; i < NSINKS; i++) {
    size_t n = strlen(sinks[i].scheme);
    char last = sinks[i].scheme[n - 1];
    if (!strncmp(spec, sinks[i].scheme, n) && (spec[n] == '\0' || last == ':' || last == '/'))
      return sinks[i].def;
  }
  return NULL;
}

/* Checks spec and parses it into a new arg (*out, NULL on error), which
 * the caller frees with def->free. */
static int resolve(const char *spec, const weir__sink_def **def, weir__sink_arg **out, char *err,
                   size_t errlen) {
  *out = NULL;
  char use[256];
  if (!spec || !*spec) {
    usage(use, sizeof use);
    return weir__spec_error(err, errlen, "empty sink specification: %s", use);
  }
  const weir__sink_def *d = lookup(spec);
  if (!d) {
    usage(use, sizeof use);
    return weir__spec_error(err, errlen, "unknown sink '%s': %s", spec, use);
  }
  if (d->available && !d->available())
    return weir__spec_error(err, errlen,
                            "sink '%s': this weir was built without %s, so the %s sink is not "
                            "available (install %s's development files and rebuild)",
                            spec, d->library, d->name, d->library);
  weir__sink_arg *a = weir_calloc(1, d->arg_size);
  int rc = d->parse ? d->parse(spec, a, err, errlen) : 0;
  if (rc < 0) {
    d->free(a);
    return rc;
  }
  *def = d;
  *out = a;
  return 0;
}

int weir_sink_spec_check(const char *spec, char *err, size_t errlen) {
  const weir__sink_def *d;
  weir__sink_arg *a;
  int rc = resolve(spec, &d, &a, err, errlen);
  if (rc == 0) d->free(a);
  return rc;
}

int weir_sink_to_conf(weir_stream *s, const char *name, const char *spec,
                      const weir_sink_conf *conf, int parallelism) {
  weir_job *job = weir_stream_job(s);
  /* s is NULL after a build error, which the job holds; as weir_sink. */
  if (!job) return WEIR_EPLAN;
  char err[512];
  const weir__sink_def *d;
  weir__sink_arg *a;
  if (resolve(spec, &d, &a, err, sizeof err) < 0)
    return weir_job_fail(job, WEIR_ESINK, "sink '%s': %s", name ? name : "?", err);
  a->fmt = conf && conf->fmt ? conf->fmt : weir_format_default;
  a->opid = conf ? conf->opid : NULL;
  int rc = weir_job_adopt(job, a, d->free);
  if (rc < 0) return rc;
  if (d->dest) return weir_sink_twophase(s, name, d->dest, a, parallelism);
  return weir_sink(s, name, d->sink, a, parallelism);
}

int weir_sink_to(weir_stream *s, const char *name, const char *spec, weir_format_fn fmt,
                 int parallelism) {
  weir_sink_conf c = {.fmt = fmt};
  return weir_sink_to_conf(s, name, spec, &c, parallelism);
}
