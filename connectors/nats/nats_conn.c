/* nats_conn.c: owns what the NATS JetStream sink and source share
 * (nats_impl.h): parsing nats://HOST:PORT[,HOST:PORT...]/SUBJECT?... URLs,
 * connecting with bounded timeouts, error texts, subject matching, adding
 * a missing stream.
 */
#include "nats_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connector.h"
#include "base/alloc.h"
#include "base/clock.h"

void weir__nats_url_free(weir__nats_url *u) {
  if (!u) return;
  weir_free(u->spec);
  weir_free(u->server);
  for (int i = 0; i < u->nservers; i++) weir_free(u->servers[i]);
  weir_free(u->servers);
  weir_free(u->subject);
  weir_free(u->stream);
  memset(u, 0, sizeof *u);
}

static char *dup_n(const char *p, size_t n) {
  char *s = weir_malloc(n + 1);
  memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

/* A stream name: letters, digits, - and _ (no '.', '*', '>', spaces). */
static int valid_stream(const char *p, size_t n) {
  if (!n || n > 200) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_'))
      return 0;
  }
  return 1;
}

/* A parameter's value of n bytes as a number from 1 to max into *v.
 * Returns 0 or -1. */
static int parse_count(const char *p, size_t n, unsigned long max, uint32_t *v) {
  char tmp[24], *end = NULL;
  size_t k = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
  memcpy(tmp, p, k);
  tmp[k] = '\0';
  unsigned long x = strtoul(tmp, &end, 10);
  if (!end || *end || tmp[0] < '0' || tmp[0] > '9' || x == 0 || x > max) return -1;
  *v = (uint32_t)x;
  return 0;
}

/* With a list of servers (HOST:PORT,HOST:PORT,... between nats:// and the
 * subject, n bytes at host), each of them as nats://HOST:PORT into
 * u->servers. Returns 0, or -1 if an entry is empty, ends with ':' (no
 * port: as in a second nats:// inside the list) or holds credentials (the
 * identity of the destination strips those of the first entry only). */
static int parse_servers(const char *host, size_t n, weir__nats_url *u) {
  if (!memchr(host, ',', n)) return 0;
  int count = 1;
  for (size_t i = 0; i < n; i++) count += host[i] == ',';
  u->servers = weir_calloc((size_t)count, sizeof *u->servers);
  for (const char *p = host, *end = host + n; p <= end;) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    size_t k = comma ? (size_t)(comma - p) : (size_t)(end - p);
    if (!k || p[k - 1] == ':' || memchr(p, '@', k)) return -1;
    char *s = weir_malloc(k + 8);
    memcpy(s, "nats://", 7);
    memcpy(s + 7, p, k);
    s[k + 7] = '\0';
    u->servers[u->nservers++] = s;
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

int weir__nats_url_parse(const char *spec, int source, weir__nats_url *u, char *err,
                         size_t errlen) {
  memset(u, 0, sizeof *u);
  if (strncmp(spec, "nats://", 7) != 0)
    return weir__spec_error(err, errlen, "'%s' is not a nats:// URL", spec);
  const char *host = spec + 7;
  const char *slash = strchr(host, '/');
  const char *q = strchr(host, '?');
  if (q && slash && q < slash) slash = NULL;
  if (!slash || slash == host)
    return weir__spec_error(
        err, errlen, "'%s' needs a server and a subject, as in nats://127.0.0.1:4222/weir.out",
        spec);
  const char *subj = slash + 1;
  size_t sn = q ? (size_t)(q - subj) : strlen(subj);
  if (!sn || memchr(subj, ' ', sn) || subj[0] == '.' || subj[sn - 1] == '.')
    return weir__spec_error(err, errlen,
                            "'%s' needs a subject after the server, as in .../weir.out", spec);
  u->spec = weir_strdup(spec);
  u->server = dup_n(spec, (size_t)(slash - spec));
  u->subject = dup_n(subj, sn);
  if (parse_servers(host, (size_t)(slash - host), u) < 0) {
    weir__nats_url_free(u);
    return weir__spec_error(err, errlen,
                            "'%s': a list of servers is HOST:PORT,HOST:PORT,... after nats:// "
                            "(as in nats://10.0.0.1:4222,10.0.0.2:4222/weir.out), without "
                            "credentials",
                            spec);
  }
  for (const char *p = q ? q + 1 : NULL; p && *p;) {
    const char *amp = strchr(p, '&');
    size_t n = amp ? (size_t)(amp - p) : strlen(p);
    if (n > 7 && !strncmp(p, "stream=", 7)) {
      if (!valid_stream(p + 7, n - 7)) {
        weir__nats_url_free(u);
        return weir__spec_error(
            err, errlen, "'%s': stream= takes a stream name (letters, digits, - and _)", spec);
      }
      weir_free(u->stream);
      u->stream = dup_n(p + 7, n - 7);
    } else if (n > 11 && !strncmp(p, "duplicates=", 11)) {
      if (weir__parse_duration_ms(p + 11, n - 11, &u->duplicates_ms) < 0 || !u->duplicates_ms) {
        weir__nats_url_free(u);
        return weir__spec_error(
            err, errlen,
            "'%s': duplicates= takes a positive duration with a unit: ms, s, m, h "
            "or d (as in duplicates=2m)",
            spec);
      }
    } else if (n > 8 && !strncmp(p, "pending=", 8)) {
      if (parse_count(p + 8, n - 8, 1000000, &u->pending) < 0) {
        weir__nats_url_free(u);
        return weir__spec_error(err, errlen, "'%s': pending= takes a number from 1 to 1000000",
                                spec);
      }
    } else if (source && n > 5 && !strncmp(p, "rate=", 5)) {
      char tmp[24], *end = NULL;
      size_t k = n - 5 < sizeof tmp - 1 ? n - 5 : sizeof tmp - 1;
      memcpy(tmp, p + 5, k);
      tmp[k] = '\0';
      unsigned long long v = strtoull(tmp, &end, 10);
      if (!end || *end || tmp[0] < '0' || tmp[0] > '9') {
        weir__nats_url_free(u);
        return weir__spec_error(err, errlen,
                                "'%s': rate= takes messages per second (0 = unlimited)", spec);
      }
      u->rate = v;
    } else if (source && n > 7 && !strncmp(p, "splits=", 7)) {
      if (parse_count(p + 7, n - 7, WEIR__NATS_MAX_SPLITS, &u->splits) < 0) {
        weir__nats_url_free(u);
        return weir__spec_error(err, errlen, "'%s': splits= takes a number from 1 to %d", spec,
                                WEIR__NATS_MAX_SPLITS);
      }
    } else if (n > 9 && !strncmp(p, "replicas=", 9)) {
      if (parse_count(p + 9, n - 9, WEIR__NATS_MAX_REPLICAS, &u->replicas) < 0) {
        weir__nats_url_free(u);
        return weir__spec_error(err, errlen, "'%s': replicas= takes a number from 1 to %d", spec,
                                WEIR__NATS_MAX_REPLICAS);
      }
    } else if (n > 6 && !strncmp(p, "tasks=", 6)) {
      if (parse_count(p + 6, n - 6, WEIR__NATS_MAX_TASKS, &u->tasks) < 0) {
        weir__nats_url_free(u);
        return weir__spec_error(err, errlen, "'%s': tasks= takes a number from 1 to %d", spec,
                                WEIR__NATS_MAX_TASKS);
      }
    } else if (n) {
      weir__nats_url_free(u);
      return weir__spec_error(
          err, errlen,
          source ? "'%s': unknown parameter (the source takes stream=, rate=, splits= and tasks=; "
                   "a stage edge also duplicates=, pending= and replicas=)"
                 : "'%s': unknown parameter (the sink takes stream=, duplicates=, pending=, "
                   "replicas= and tasks=)",
          spec);
    }
    p = amp ? amp + 1 : NULL;
  }
  if (!u->stream) u->stream = weir_strdup(WEIR__NATS_DEFAULT_STREAM);
  if (!u->splits) u->splits = 1;
  /* The source reads a stream it never creates: a stream's window and
   * replicas are for whoever creates it. */
  if (source && !u->tasks && (u->duplicates_ms || u->pending || u->replicas)) {
    int rc = weir__spec_error(err, errlen,
                              "'%s': duplicates=, pending= and replicas= are the sink's (and a "
                              "stage edge's, with tasks=), not the source's",
                              spec);
    weir__nats_url_free(u);
    return rc;
  }
  if (!u->replicas) u->replicas = 1;
  if (u->tasks && (weir__nats_subject_wild(u->subject) || u->splits > 1 || u->rate)) {
    int rc = weir__spec_error(err, errlen,
                              "'%s': tasks= makes the URL a stage edge, whose subjects are "
                              "SUBJECT.<from>.<to>: give one subject without wildcards, and no "
                              "splits= or rate=",
                              spec);
    weir__nats_url_free(u);
    return rc;
  }
  if (u->splits > 1 && !weir__nats_subject_wild(u->subject)) {
    int rc = weir__spec_error(err, errlen,
                              "'%s': splits= spreads the concrete subjects of a wildcard subject "
                              "(as in .../orders.*?splits=16); %s is one subject, one split",
                              spec, u->subject);
    weir__nats_url_free(u);
    return rc;
  }
  return 0;
}

int weir__nats_subject_wild(const char *subj) {
  for (const char *p = subj; *p; p++)
    if ((*p == '*' || *p == '>') && (p == subj || p[-1] == '.') && (!p[1] || p[1] == '.')) return 1;
  return 0;
}

int weir__nats_subject_covers(const char *pat, const char *subj) {
  for (;;) {
    const char *pe = strchr(pat, '.'), *se = strchr(subj, '.');
    size_t pn = pe ? (size_t)(pe - pat) : strlen(pat);
    size_t sn = se ? (size_t)(se - subj) : strlen(subj);
    if (pn == 1 && pat[0] == '>') return 1;
    if (!(pn == 1 && pat[0] == '*') && (pn != sn || memcmp(pat, subj, pn) != 0)) return 0;
    if (!pe || !se) return !pe && !se;
    pat = pe + 1;
    subj = se + 1;
  }
}

#ifndef WEIR_HAVE_NATS

int weir__nats_available(void) {
  return 0;
}

#else

int weir__nats_available(void) {
  return 1;
}

const char *weir__nats_errtext(natsStatus s) {
  const char *t = nats_GetLastError(NULL);
  return t && *t ? t : natsStatus_GetText(s);
}

natsStatus weir__nats_add_stream(jsCtx *js, const weir__nats_url *u, const char *subject,
                                 jsStreamInfo **si, jsErrCode *jerr) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  const char *subjects[1] = {subject};
  cfg.Name = u->stream;
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  if (u->duplicates_ms) cfg.Duplicates = (int64_t)u->duplicates_ms * 1000000;
  /* Only for a stream made here: one that exists keeps its own count (the
   * callers add a stream only when there is none), so that two sides of an
   * edge given different replicas= do not fail on each other. */
  cfg.Replicas = u->replicas ? u->replicas : 1;
  *jerr = 0;
  natsStatus s = js_AddStream(si, js, &cfg, NULL, jerr);
  /* A replicated stream answers requests only once its replicas elected a
   * leader. JetStream answers a second creation of the same stream (another
   * subtask, the other side of an edge) at once, before that: requests sent
   * then go unanswered (a timeout after 5 s), so the stream is awaited here,
   * up to 10 s (then the callers' requests time out and say so). */
  uint64_t end = weir_clock_mono_ns() + 10000000000ull;
  while (s == NATS_OK && cfg.Replicas > 1 && weir_clock_mono_ns() < end) {
    if (*si && (*si)->Cluster && (*si)->Cluster->Leader && *(*si)->Cluster->Leader) break;
    weir_sleep_us(50000);
    jsStreamInfo *again = NULL;
    jsErrCode e = 0;
    if (js_GetStreamInfo(&again, js, u->stream, NULL, &e) != NATS_OK) continue;
    jsStreamInfo_Destroy(*si);
    *si = again;
  }
  return s;
}

int weir__nats_connect(const weir__nats_url *u, jsOptions *jo, natsConnection **nc, jsCtx **js,
                       char *err, size_t errlen) {
  natsOptions *o = NULL;
  *nc = NULL;
  *js = NULL;
  natsStatus s = natsOptions_Create(&o);
  if (s == NATS_OK && u->nservers)
    s = natsOptions_SetServers(o, (const char **)u->servers, u->nservers);
  else if (s == NATS_OK)
    s = natsOptions_SetURL(o, u->server);
  if (s == NATS_OK) s = natsOptions_SetTimeout(o, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(o, 60);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(o, 1000);
  if (s == NATS_OK) s = natsConnection_Connect(nc, o);
  natsOptions_Destroy(o);
  if (s != NATS_OK) {
    snprintf(err, errlen, "cannot connect to NATS at %s (%s): %s", u->server, u->spec,
             weir__nats_errtext(s));
    *nc = NULL;
    return WEIR_EIO;
  }
  s = natsConnection_JetStream(js, *nc, jo);
  if (s != NATS_OK) {
    snprintf(err, errlen, "%s: no JetStream context: %s", u->spec, weir__nats_errtext(s));
    weir__nats_disconnect(*nc, NULL);
    *nc = NULL;
    *js = NULL;
    return WEIR_EIO;
  }
  return 0;
}

void weir__nats_disconnect(natsConnection *nc, jsCtx *js) {
  jsCtx_Destroy(js);
  if (nc) {
    natsConnection_Close(nc);
    natsConnection_Destroy(nc);
  }
}

#endif
