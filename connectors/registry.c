/* registry.c: owns sink specifications ("null", "print", "file:DIR",
 * "http://HOST:PORT/PATH?...", "nats://HOST:PORT/SUBJECT?...", "postgresql://..."):
 * checking them, taking weir's own URL parameters out, and adding the sink
 * they name to a job (weir_sink_to, weir_sink_to_conf).
 */
#include "sink_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nats/nats_impl.h"
#include "weir/alloc.h"

#define SPEC_HELP                                                                                  \
  "use null, print, file:DIR, http://HOST:PORT/PATH, nats://HOST:PORT/SUBJECT or postgresql://..."

static int spec_error(char *err, size_t errlen, const char *fmt, const char *spec) {
  if (err && errlen) snprintf(err, errlen, fmt, spec);
  return WEIR_ESINK;
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

/* Parses an http spec into a (url without weir's parameters, retention,
 * idempotency). Returns 0 or WEIR_ESINK with a message. */
static int parse_http(const char *spec, weir__sink_arg *a, char *err, size_t errlen) {
  const char *host = spec + 7;
  if (!*host || *host == '/' || *host == '?')
    return spec_error(err, errlen, "sink '%s' needs a host, as in http://127.0.0.1:8080/effects",
                      spec);
  a->idempotent = 1;
  const char *q = strchr(spec, '?');
  size_t base = q ? (size_t)(q - spec) : strlen(spec);
  char *url = weir_malloc(strlen(spec) + 1);
  memcpy(url, spec, base);
  url[base] = '\0';
  size_t ulen = base;
  int kept = 0;
  for (const char *p = q ? q + 1 : NULL; p && *p;) {
    const char *amp = strchr(p, '&');
    size_t n = amp ? (size_t)(amp - p) : strlen(p);
    if (n > 10 && !strncmp(p, "retention=", 10)) {
      if (weir__parse_duration_ms(p + 10, n - 10, &a->retention_ms) < 0 || !a->retention_ms) {
        weir_free(url);
        return spec_error(err, errlen,
                          "sink '%s': retention must be a positive duration with a unit: ms, s, "
                          "m, h or d (as in retention=24h)",
                          spec);
      }
    } else if (n >= 12 && !strncmp(p, "idempotency=", 12)) {
      if (n == 15 && !strncmp(p + 12, "off", 3))
        a->idempotent = 0;
      else if (n == 14 && !strncmp(p + 12, "on", 2))
        a->idempotent = 1;
      else {
        weir_free(url);
        return spec_error(err, errlen, "sink '%s': idempotency must be on or off", spec);
      }
    } else if (n) {
      url[ulen++] = kept++ ? '&' : '?';
      memcpy(url + ulen, p, n);
      ulen += n;
      url[ulen] = '\0';
    }
    p = amp ? amp + 1 : NULL;
  }
  a->url = url;
  return 0;
}

/* Checks spec; if a is not NULL, fills it. */
static int check(const char *spec, weir__sink_arg *a, char *err, size_t errlen) {
  if (!spec || !*spec) return spec_error(err, errlen, "empty sink specification%s: " SPEC_HELP, "");
  if (strcmp(spec, "null") == 0 || strcmp(spec, "print") == 0) return 0;
  if (strncmp(spec, "file:", 5) == 0) {
    if (spec[5] == '\0')
      return spec_error(err, errlen, "sink '%s' needs a directory, as in file:out", spec);
    if (a) a->dir = weir_strdup(spec + 5);
    return 0;
  }
  if (strncmp(spec, "http://", 7) == 0) {
    if (!weir__http_available())
      return spec_error(err, errlen,
                        "sink '%s': this weir was built without libcurl, so the http sink is "
                        "not available (install libcurl's development files and rebuild)",
                        spec);
    weir__sink_arg tmp = {0};
    int rc = parse_http(spec, a ? a : &tmp, err, errlen);
    weir_free(tmp.url);
    return rc;
  }
  if (strncmp(spec, "nats://", 7) == 0) {
    if (!weir__nats_available())
      return spec_error(err, errlen,
                        "sink '%s': this weir was built without libnats, so the nats sink is "
                        "not available (install libnats's development files and rebuild)",
                        spec);
    weir__nats_url *u = weir_calloc(1, sizeof *u);
    int rc = weir__nats_url_parse(spec, 0, u, err, errlen);
    if (rc == 0 && a) {
      a->nats = u;
      return 0;
    }
    weir__nats_url_free(u);
    weir_free(u);
    return rc;
  }
  if (strncmp(spec, "postgresql://", 13) == 0 || strncmp(spec, "postgres://", 11) == 0) {
    if (!weir__pg_available())
      return spec_error(err, errlen,
                        "sink '%s': this weir was built without libpq, so the postgresql sink "
                        "is not available (install libpq's development files and rebuild)",
                        spec);
    char *ci = NULL, *t = NULL;
    uint64_t keep = 0;
    int rc = weir__pg_parse(spec, &ci, &t, &keep, err, errlen);
    if (rc == 0 && a) {
      a->conninfo = ci;
      a->table = t;
      a->marker_keep = keep;
    } else {
      weir_free(ci);
      weir_free(t);
    }
    return rc;
  }
  if (strncmp(spec, "https://", 8) == 0)
    return spec_error(err, errlen, "sink '%s': https is not supported yet: use http://", spec);
  return spec_error(err, errlen, "unknown sink '%s': " SPEC_HELP, spec);
}

int weir_sink_spec_check(const char *spec, char *err, size_t errlen) {
  return check(spec, NULL, err, errlen);
}

static void sink_arg_free(void *p) {
  weir__sink_arg *a = p;
  if (!a) return;
  weir_free(a->dir);
  weir_free(a->url);
  weir__nats_url_free(a->nats);
  weir_free(a->nats);
  weir_free(a->conninfo);
  weir_free(a->table);
  weir_free(a);
}

int weir_sink_to_conf(weir_stream *s, const char *name, const char *spec,
                      const weir_sink_conf *conf, int parallelism) {
  weir_job *job = weir_stream_job(s);
  /* s is NULL after a build error: weir_job_run() reports the first one. */
  if (!job) return WEIR_EINVAL;
  char err[512];
  weir__sink_arg *a = weir_calloc(1, sizeof *a);
  if (check(spec, a, err, sizeof err) < 0) {
    sink_arg_free(a);
    return weir_job_fail(job, WEIR_ESINK, "sink '%s': %s", name ? name : "?", err);
  }
  a->fmt = conf && conf->fmt ? conf->fmt : weir_format_default;
  a->opid = conf ? conf->opid : NULL;
  int rc = weir_job_adopt(job, a, sink_arg_free);
  if (rc < 0) return rc;
  if (strcmp(spec, "print") == 0) return weir_sink(s, name, &weir__print_sink_vt, a, parallelism);
  if (a->dir) return weir_sink_twophase(s, name, &weir__file_dest_vt, a, parallelism);
  if (a->url) return weir_sink_twophase(s, name, &weir__http_dest_vt, a, parallelism);
  if (a->nats) return weir_sink_twophase(s, name, &weir__nats_dest_vt, a, parallelism);
  if (a->conninfo) return weir_sink_twophase(s, name, &weir__pg_dest_vt, a, parallelism);
  return weir_sink(s, name, &weir__null_sink_vt, a, parallelism);
}

int weir_sink_to(weir_stream *s, const char *name, const char *spec, weir_format_fn fmt,
                 int parallelism) {
  weir_sink_conf c = {.fmt = fmt};
  return weir_sink_to_conf(s, name, spec, &c, parallelism);
}

size_t weir_opid_key_count(const weir_record *r, char *buf, size_t cap) {
  int n = snprintf(buf, cap, "%llu.%llu", (unsigned long long)r->key,
                   (unsigned long long)weir_payload_u64(r));
  return n < 0 ? 0 : (size_t)n;
}
