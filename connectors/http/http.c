/* http.c: owns the HTTP destination (http://HOST:PORT/PATH), its
 * specification and arg, and the refusal of https://: write-ahead
 * epochs POSTed after their checkpoint completed, one request per record,
 * with Idempotency-Key = the record's operation id (a destination of
 * twophase.c), through libcurl's blocking easy API on the sink subtask's
 * commit thread.
 *
 * DESIGN. The transaction of an epoch is its records, formatted: write
 * appends each record's body ("<key> <value>") and, with a job-defined id
 * function, the content part of its operation id to a buffer; pre_commit
 * hands the buffer over as the handle, so the records travel in the
 * checkpoint and nothing reaches the destination before it completed.
 * commit sends the epoch's records in order, each until the destination
 * answered it:
 *
 *   2xx                 done (200 with Idempotent-Replayed: a duplicate the
 *                       destination recognised: done, counted apart)
 *   timeout, connection refused/reset, empty reply, 5xx, 408, 429
 *                       sent again with the same key after a backoff (a lost
 *                       acknowledgement must not fail the job)
 *   409                 the key is in flight at the destination: later;
 *                       with Weir-Fenced: this run's epoch is fenced there
 *                       (a successor wrote with a higher one): permanent,
 *                       WEIR_EFENCED (exit code 4)
 *   422                 the key was used with another payload: permanent,
 *                       WEIR_EREFUSED naming the operation id (exit code 5)
 *   other 4xx           permanent, WEIR_EREFUSED
 *
 * The operation id is "<job id>/<sink>/c/<content>" with an id function,
 * else "<job id>/<sink>/w/<subtask>/<epoch>/<index>"; both are stable over
 * every replay of the epoch. With idempotency=off no key is sent: every
 * retry after a lost answer is a new effect (at-least-once, on purpose).
 *
 * Fencing: with a state directory every request also carries `Weir-Job:
 * <job id>` and `Weir-Epoch: <lease epoch>` (weir_ctx_epoch). A destination
 * that keeps the highest epoch per job can refuse a stale owner's requests
 * per request (weir receiver does, with 409 and Weir-Fenced), which the
 * lease alone cannot: between a takeover and the moment the paused owner
 * notices it, the owner may already be inside a send. Destinations that do
 * not know the headers ignore them.
 *
 * Failpoints: sink.after_send after any answer was read, http.after_accept
 * after a 2xx (the destination applied the effect or replayed it; the
 * checkpoint does not know yet).
 *
 * Retention (retention=DURATION): a destination forgets a key after its
 * retention, and a replay after that is a new effect. A request that may be
 * a replay (a retry, or any request of an epoch recovered from a
 * checkpoint, which may have been sent before the crash) is refused with
 * WEIR_ERETENTION when its first possible sending (its first attempt here,
 * or, recovered, its epoch's pre-commit time) is older than the retention.
 *
 * Threads: write/pre_commit on the task thread, commit on the commit
 * thread, which alone owns the CURL handle (made at its first commit).
 */
#include "connector.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"

#ifdef WEIR_HAVE_CURL
#include <curl/curl.h>
#endif

#define BACKOFF_MIN_MS 5u
#define BACKOFF_MAX_MS 1000u

/* The sink's arg: http://HOST:PORT/PATH[?retention=D][&idempotency=on|off]. */
typedef struct http_arg {
  weir__sink_arg common;
  char *url;             /* the URL without weir's parameters */
  uint64_t retention_ms; /* the destination's key retention, 0 = unknown */
  int idempotent;        /* send Idempotency-Key (idempotency=off: 0) */
} http_arg;

#ifndef WEIR_HAVE_CURL

static int http_available(void) {
  return 0;
}

#else

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ok;

static void curl_init_once(void) {
  curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

static int http_available(void) {
  pthread_once(&curl_once, curl_init_once);
  return curl_ok;
}

/* One subtask's destination. `ops` is the task
 * thread's; `curl` and `hdrs` the commit thread's. */
typedef struct hdest {
  const http_arg *a;
  weir__oplog ops; /* the open transaction's operations */
  CURL *curl;
  int replayed;   /* the last response had Idempotent-Replayed: true */
  int fenced;     /* the last response had Weir-Fenced */
  uint64_t epoch; /* the lease epoch of this run (0: no state directory) */
  weir_sink_io *io;
} hdest;

static int http_open(weir_ctx *ctx, void **out) {
  hdest *h = weir_calloc(1, sizeof *h);
  h->a = weir_sink_dest_arg(ctx);
  h->epoch = weir_ctx_epoch(ctx);
  *out = h;
  return 0;
}

static int http_write(weir_ctx *ctx, void *dest, const weir_record *r) {
  hdest *h = dest;
  return weir__oplog_add(ctx, &h->ops, h->a->common.fmt,
                         h->a->idempotent ? h->a->common.opid : NULL, r);
}

static int http_pre_commit(weir_ctx *ctx, void *dest, uint64_t epoch, weir_sink_buf *out) {
  (void)ctx;
  (void)epoch;
  return weir__oplog_take(&((hdest *)dest)->ops, out);
}

static size_t on_header(char *b, size_t size, size_t n, void *user) {
  hdest *h = user;
  size_t len = size * n;
  static const char want[] = "Idempotent-Replayed:";
  static const char fence[] = "Weir-Fenced:";
  if (len >= sizeof want - 1 && strncasecmp(b, want, sizeof want - 1) == 0) {
    const char *v = b + sizeof want - 1;
    while (*v == ' ') v++;
    if (len - (size_t)(v - b) >= 4 && strncasecmp(v, "true", 4) == 0) h->replayed = 1;
  }
  if (len >= sizeof fence - 1 && strncasecmp(b, fence, sizeof fence - 1) == 0) h->fenced = 1;
  return len;
}

static size_t on_body(char *b, size_t size, size_t n, void *user) {
  (void)b;
  (void)user;
  return size * n;
}

/* Aborts a transfer when the subtask closes. */
static int on_progress(void *user, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  hdest *h = user;
  return h->io && weir_sink_io_stopping(h->io) ? 1 : 0;
}

static CURL *make_curl(hdest *h) {
  CURL *c = curl_easy_init();
  if (!c) return NULL;
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_URL, h->a->url);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 15000L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
  return c;
}

/* Sends one operation until the destination answered it. */
static int send_op(hdest *h, weir_sink_commit *c, const char *id, const uint8_t *body,
                   uint32_t blen) {
  weir_sink_io *io = c->io;
  char hdr[600];
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: text/plain");
  if (h->a->idempotent) {
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", id);
    hl = curl_slist_append(hl, hdr);
  }
  if (h->epoch) {
    snprintf(hdr, sizeof hdr, "Weir-Job: %s", c->job_id);
    hl = curl_slist_append(hl, hdr);
    snprintf(hdr, sizeof hdr, "Weir-Epoch: %llu", (unsigned long long)h->epoch);
    hl = curl_slist_append(hl, hdr);
  }
  hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
  curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, (const char *)body);
  curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
  uint32_t backoff = BACKOFF_MIN_MS;
  int64_t first_ms = c->recovered ? (int64_t)c->precommit_ms : 0;
  int rc = 0;
  for (int tries = 0;; tries++) {
    int64_t now = weir_clock_wall_ms();
    if (!first_ms) first_ms = now;
    if (h->a->idempotent && h->a->retention_ms && (tries || c->recovered) &&
        now - first_ms > (int64_t)h->a->retention_ms) {
      snprintf(c->err, c->errlen,
               "operation %s may have reached the destination %lld ms ago, beyond its key "
               "retention of %llu ms: a replay could apply it twice, so it is refused",
               id, (long long)(now - first_ms), (unsigned long long)h->a->retention_ms);
      rc = WEIR_ERETENTION;
      break;
    }
    h->replayed = 0;
    h->fenced = 0;
    weir_sink_io_count(io, WEIR_SINK_REQUESTS, 1);
    CURLcode cc = curl_easy_perform(h->curl);
    if (cc == CURLE_ABORTED_BY_CALLBACK || weir_sink_io_stopping(io)) {
      rc = WEIR_ECANCELED;
      break;
    }
    long status = 0;
    if (cc == CURLE_OK) {
      curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
      weir_sink_io_count(io, WEIR_SINK_RESPONSES, 1);
      /* The request was accepted: a crash now loses only the answer. */
      (void)weir_failpoint("sink.after_send");
    }
    if (cc == CURLE_OK && status >= 200 && status < 300) {
      if (h->replayed) weir_sink_io_count(io, WEIR_SINK_DUPLICATES, 1);
      /* Applied at the destination, not yet known to the checkpoint: the
       * failure window (weir verify). */
      (void)weir_failpoint("http.after_accept");
      break;
    }
    if (cc == CURLE_OK && status == 409 && h->fenced) {
      weir_sink_io_count(io, WEIR_SINK_REJECTIONS, 1);
      snprintf(c->err, c->errlen,
               "operation %s refused by %s: epoch %llu of this job is fenced there (a later "
               "owner wrote)",
               id, h->a->url, (unsigned long long)h->epoch);
      rc = WEIR_EFENCED;
      break;
    }
    if (cc == CURLE_OK && status == 422) {
      weir_sink_io_count(io, WEIR_SINK_REJECTIONS, 1);
      snprintf(c->err, c->errlen,
               "operation %s refused by %s with 422: its key was used before with another "
               "payload",
               id, h->a->url);
      rc = WEIR_EREFUSED;
      break;
    }
    if (cc == CURLE_OK && status >= 400 && status < 500 && status != 408 && status != 409 &&
        status != 429) {
      weir_sink_io_count(io, WEIR_SINK_REJECTIONS, 1);
      snprintf(c->err, c->errlen, "operation %s refused by %s with %ld", id, h->a->url, status);
      rc = WEIR_EREFUSED;
      break;
    }
    if (cc != CURLE_OK && cc != CURLE_OPERATION_TIMEDOUT && cc != CURLE_COULDNT_CONNECT &&
        cc != CURLE_GOT_NOTHING && cc != CURLE_RECV_ERROR && cc != CURLE_SEND_ERROR &&
        cc != CURLE_PARTIAL_FILE && cc != CURLE_COULDNT_RESOLVE_HOST) {
      snprintf(c->err, c->errlen, "operation %s: %s: %s", id, h->a->url, curl_easy_strerror(cc));
      rc = WEIR_EIO;
      break;
    }
    /* Lost answer, 5xx, 408, 429, 409 (in flight): again, same key. Said
     * once per operation, so a destination that is down does not look like
     * a hang. */
    if (tries == 3) {
      if (cc != CURLE_OK)
        WEIR_LOG_W("sink '%s' subtask %u: %s: %s; retrying operation %s", c->sink,
                   (unsigned)c->subtask, h->a->url, curl_easy_strerror(cc), id);
      else
        WEIR_LOG_W("sink '%s' subtask %u: %s answered %ld; retrying operation %s", c->sink,
                   (unsigned)c->subtask, h->a->url, status, id);
    }
    if (weir_sink_io_sleep(io, backoff)) {
      rc = WEIR_ECANCELED;
      break;
    }
    backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
  }
  curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, NULL);
  curl_slist_free_all(hl);
  return rc;
}

static int http_commit(void *dest, weir_sink_commit *c) {
  hdest *h = dest;
  h->io = c->io;
  if (!h->curl && !(h->curl = make_curl(h))) {
    snprintf(c->err, c->errlen, "cannot create a libcurl handle");
    return WEIR_ENOMEM;
  }
  weir__oplog_reader rd;
  weir__op op;
  if (weir__oplog_open(c, &rd) < 0) goto bad;
  while (rd.i < rd.n) {
    if (weir__oplog_next(&rd, &op) < 0) goto bad;
    if (op.index < c->progress) continue; /* sent in an earlier attempt of this process */
    int rc = send_op(h, c, op.id, op.body, op.blen);
    if (rc < 0) return rc;
    c->progress = op.index + 1;
  }
  return 0;
bad:
  snprintf(c->err, c->errlen, "epoch %llu: malformed handle", (unsigned long long)c->epoch);
  return WEIR_ECORRUPT;
}

static void http_close(weir_ctx *ctx, void *dest) {
  hdest *h = dest;
  if (h->curl) curl_easy_cleanup(h->curl);
  weir__oplog_free(&h->ops);
  weir_free(h);
}

/* The URL without user information (credentials) and weir's parameters. */
static int http_identity(const void *arg, char *buf, size_t cap) {
  const http_arg *a = arg;
  weir__url_identity(a->url, buf, cap);
  return 0;
}

static const weir_sink_dest_vt http_dest_vt = {
    .size = sizeof(weir_sink_dest_vt),
    .name = "http",
    .open = http_open,
    .write = http_write,
    .pre_commit = http_pre_commit,
    .commit = http_commit,
    .close = http_close,
    .identity = http_identity,
    .move_note = "the http sink sends a checkpoint's pending epochs after it completed, so they "
                 "may have reached the old destination already: sending them to the new one "
                 "would apply them twice across the two, and weir keeps no credentials to send "
                 "them to the old one",
};

#endif

/* Parses an http spec into a (url without weir's parameters, retention,
 * idempotency). Returns 0 or WEIR_ESINK with a message. */
static int http_parse(const char *spec, weir__sink_arg *common, char *err, size_t errlen) {
  http_arg *a = (http_arg *)common;
  const char *host = spec + strlen("http://");
  if (!*host || *host == '/' || *host == '?')
    return weir__spec_error(err, errlen,
                            "sink '%s' needs a host, as in http://127.0.0.1:8080/effects", spec);
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
        return weir__spec_error(
            err, errlen,
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
        return weir__spec_error(err, errlen, "sink '%s': idempotency must be on or off", spec);
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

static void http_arg_free(void *p) {
  http_arg *a = p;
  weir_free(a->url);
  weir_free(a);
}

const weir__sink_def weir__http_sink = {
    .name = "http",
    .library = "libcurl",
    .available = http_available,
    .arg_size = sizeof(http_arg),
    .parse = http_parse,
    .free = http_arg_free,
#ifdef WEIR_HAVE_CURL
    .dest = &http_dest_vt,
#endif
};

static int https_parse(const char *spec, weir__sink_arg *a, char *err, size_t errlen) {
  return weir__spec_error(err, errlen, "sink '%s': https is not supported yet: use http://", spec);
}

const weir__sink_def weir__https_sink = {
    .name = "https",
    .arg_size = sizeof(weir__sink_arg),
    .parse = https_parse,
    .free = weir_free,
};
