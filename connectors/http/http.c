/* http.c: owns the HTTP destination (http://HOST:PORT/PATH, and
 * https:// through libcurl's TLS), its specification and arg: write-ahead
 * epochs POSTed after their checkpoint completed, one request per record,
 * with Idempotency-Key = the record's operation id (a destination of
 * twophase.c), up to `inflight` at once through libcurl's multi interface
 * on the sink subtask's commit thread.
 *
 * DESIGN. The transaction of an epoch is its records, formatted: write
 * appends each record's body ("<key> <value>") and, with a job-defined id
 * function, the content part of its operation id to a buffer; pre_commit
 * hands the buffer over as the handle, so the records travel in the
 * checkpoint and nothing reaches the destination before it completed.
 * commit sends the epoch's records, each until the destination answered it
 * 2xx, with up to `inflight=N` requests in flight (default 64): one multi
 * handle and a pool of N easy handles, each slot keeping its connection
 * open (HTTP/1.1 keep-alive). Operations are taken in order as slots free
 * up, so effects of one epoch may be applied in any order; inflight=1 sends
 * them one after the other, as a destination that needs order requires.
 * The epoch is committed when every request of it was answered 2xx; the
 * next epoch starts after that (commits are in epoch order). Each answer
 * is handled per request:
 *
 *   2xx                 done, the slot takes the next operation (200 with
 *                       Idempotent-Replayed: a duplicate the destination
 *                       recognised: done, counted apart)
 *   timeout, connection refused/reset, empty reply, 5xx, 408, 429
 *                       the slot sends it again with the same key after its
 *                       own backoff (a lost acknowledgement must not fail the
 *                       job); the other slots go on meanwhile
 *   409                 the key is in flight at the destination: later;
 *                       with Weir-Fenced: this run's epoch is fenced there
 *                       (a successor wrote with a higher one): permanent,
 *                       WEIR_EFENCED (exit code 4)
 *   422                 the key was used with another payload: permanent,
 *                       WEIR_EREFUSED naming the operation id (exit code 5)
 *   other 4xx           permanent, WEIR_EREFUSED
 *
 * A permanent answer ends the commit at once: the requests still in flight
 * are abandoned (they may have been applied; their operation ids make a
 * later run's resend a duplicate), and the job fails as with one request at
 * a time. Until a request of this run was answered 2xx, only one is in
 * flight: a run that is fenced or refused at its destination (a stale
 * owner, a reused key) learns it from one request, not from N.
 * c->progress is the number of leading operations answered 2xx.
 *
 * A slow destination: each subtask has at most N requests waiting, so it
 * makes at most N / latency effects per second; until its epochs are
 * answered they stay in memory and in every checkpoint, and the engine has
 * no way yet to hold a sink's input back (an operator cannot refuse or
 * defer records), so a destination slower than the input makes the pending
 * epochs grow.
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
 * Credentials: auth_file=PATH or auth_env=NAME names where the value of an
 * Authorization header is ("Bearer TOKEN", "Basic BASE64"), read when the
 * spec is parsed and sent with every request; the value is never logged,
 * never part of the destination's identity or of a checkpoint (only the
 * spec with the path or the variable's name is). Credentials written into
 * the URL (user:password@) are refused: the URL is in messages and logs.
 * 401 and 403 are permanent refusals that say the credentials were not
 * accepted. https:// verifies the server against the system's CA bundle,
 * or cacert=FILE (a private CA, a self-signed certificate); a failed TLS
 * handshake or verification is permanent (a configuration error, exit 1).
 *
 * Threads: write/pre_commit on the task thread, commit on the commit
 * thread, which alone owns the multi handle and the pool (made at its
 * first commit); close frees them after the commit thread stopped. A stop
 * is seen within POLL_MAX_MS.
 */
#include "connector.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
#define INFLIGHT_DEFAULT 64u
#define INFLIGHT_MAX 1024u /* a connection each: file descriptors, the destination's threads */
#define POLL_MAX_MS 50L    /* how late the commit thread may notice a stop */

/* The sink's arg: http[s]://HOST:PORT/PATH[?retention=D][&idempotency=on|off]
 * [&inflight=N][&buffer=BYTES][&auth_file=PATH|&auth_env=NAME][&cacert=FILE]. */
typedef struct http_arg {
  weir__sink_arg common;
  char *url;             /* the URL without weir's parameters */
  uint64_t retention_ms; /* the destination's key retention, 0 = unknown */
  int idempotent;        /* send Idempotency-Key (idempotency=off: 0) */
  uint32_t inflight;     /* requests in flight per sink subtask */
  uint64_t buffer;       /* bound on unacknowledged epochs' bytes; 0: default */
  char *auth;            /* the Authorization header's value (a secret), or NULL */
  char *cacert;          /* CA certificates for https (cacert=), or NULL */
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

/* One request slot: an easy handle of the pool (its connection stays in
 * the multi handle's cache between requests) and the operation it carries
 * until the destination answered it 2xx. Commit thread. */
typedef struct hreq {
  CURL *curl;
  struct curl_slist *hl; /* the operation's headers */
  int busy;              /* carries an operation */
  int active;            /* in the multi handle (else waiting for its retry) */
  int replayed;          /* the last answer had Idempotent-Replayed: true */
  int fenced;            /* the last answer had Weir-Fenced */
  int tries;
  uint32_t backoff;
  int64_t first_ms; /* wall time of its first possible sending (retention) */
  uint64_t due_ns;  /* monotonic: when its retry goes */
  uint64_t index;
  char id[512];
} hreq;

/* One subtask's destination. `ops` is the task thread's; the multi
 * handle, the slots and `proven` the commit thread's. */
typedef struct hdest {
  const http_arg *a;
  weir__oplog ops; /* the open transaction's operations */
  CURLM *multi;
  hreq *req;      /* a->inflight slots */
  int proven;     /* a request of this run was answered 2xx: the window is open */
  uint64_t epoch; /* the lease epoch of this run (0: no state directory) */
} hdest;

static int http_open(weir_ctx *ctx, void **out) {
  const http_arg *a = weir_sink_dest_arg(ctx);
  if (a->idempotent && !a->common.opid) {
    int rc = weir__refuse_rewind(ctx);
    if (rc) return rc;
  }
  hdest *h = weir_calloc(1, sizeof *h);
  h->a = a;
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
  hreq *q = user;
  size_t len = size * n;
  static const char want[] = "Idempotent-Replayed:";
  static const char fence[] = "Weir-Fenced:";
  if (len >= sizeof want - 1 && strncasecmp(b, want, sizeof want - 1) == 0) {
    const char *v = b + sizeof want - 1;
    while (*v == ' ') v++;
    if (len - (size_t)(v - b) >= 4 && strncasecmp(v, "true", 4) == 0) q->replayed = 1;
  }
  if (len >= sizeof fence - 1 && strncasecmp(b, fence, sizeof fence - 1) == 0) q->fenced = 1;
  return len;
}

static size_t on_body(char *b, size_t size, size_t n, void *user) {
  (void)b;
  (void)user;
  return size * n;
}

/* The multi handle and a->inflight easy handles, at the first commit. */
/* Frees q for another operation. */
static void end_op(hdest *h, hreq *q) {
  if (q->active) curl_multi_remove_handle(h->multi, q->curl);
  curl_easy_setopt(q->curl, CURLOPT_HTTPHEADER, NULL);
  curl_slist_free_all(q->hl);
  q->hl = NULL;
  q->busy = q->active = 0;
}

static void free_pool(hdest *h) {
  if (h->req) {
    for (uint32_t i = 0; i < h->a->inflight; i++) {
      hreq *q = &h->req[i];
      if (q->busy) end_op(h, q);
      if (q->curl) curl_easy_cleanup(q->curl);
    }
    weir_free(h->req);
    h->req = NULL;
  }
  if (h->multi) curl_multi_cleanup(h->multi);
  h->multi = NULL;
}

static int make_pool(hdest *h) {
  uint32_t n = h->a->inflight;
  h->multi = curl_multi_init();
  if (!h->multi) return WEIR_ENOMEM;
  /* Keep every slot's connection open between requests (keep-alive). */
  curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long)n);
  h->req = weir_calloc(n, sizeof *h->req);
  for (uint32_t i = 0; i < n; i++) {
    CURL *c = h->req[i].curl = curl_easy_init();
    if (!c) {
      free_pool(h);
      return WEIR_ENOMEM;
    }
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_URL, h->a->url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 15000L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h->req[i]);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_PRIVATE, &h->req[i]);
    if (h->a->cacert) curl_easy_setopt(c, CURLOPT_CAINFO, h->a->cacert);
    /* HTTP/1.1 over https too (libcurl would offer HTTP/2 by ALPN): a
     * connection per slot, as tested; HTTP/2 is not. */
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  }
  return 0;
}

/* Puts operation op into the free slot q (not yet sent). */
static void start_op(hdest *h, const weir_sink_commit *c, hreq *q, const weir__op *op) {
  char hdr[600];
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: text/plain");
  if (h->a->idempotent) {
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", op->id);
    hl = curl_slist_append(hl, hdr);
  }
  if (h->epoch) {
    snprintf(hdr, sizeof hdr, "Weir-Job: %s", c->job_id);
    hl = curl_slist_append(hl, hdr);
    snprintf(hdr, sizeof hdr, "Weir-Epoch: %llu", (unsigned long long)h->epoch);
    hl = curl_slist_append(hl, hdr);
  }
  if (h->a->auth) {
    size_t n = strlen(h->a->auth) + 16;
    char *v = weir_malloc(n);
    snprintf(v, n, "Authorization: %s", h->a->auth);
    hl = curl_slist_append(hl, v); /* copies */
    memset(v, 0, n);
    weir_free(v);
  }
  hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
  q->hl = hl;
  curl_easy_setopt(q->curl, CURLOPT_HTTPHEADER, hl);
  /* The body stays in the handle, which outlives the commit. */
  curl_easy_setopt(q->curl, CURLOPT_POSTFIELDS, (const char *)op->body);
  curl_easy_setopt(q->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)op->blen);
  q->busy = 1;
  q->active = 0;
  q->tries = 0;
  q->backoff = BACKOFF_MIN_MS;
  q->first_ms = c->recovered ? (int64_t)c->precommit_ms : 0;
  q->index = op->index;
  snprintf(q->id, sizeof q->id, "%s", op->id);
}

/* Sends q's operation (again), unless it may be a replay beyond the
 * destination's retention. */
static int send_op(hdest *h, weir_sink_commit *c, hreq *q) {
  int64_t now = weir_clock_wall_ms();
  if (!q->first_ms) q->first_ms = now;
  if (h->a->idempotent && h->a->retention_ms && (q->tries || c->recovered) &&
      now - q->first_ms > (int64_t)h->a->retention_ms) {
    snprintf(c->err, c->errlen,
             "operation %s may have reached the destination %lld ms ago, beyond its key "
             "retention of %llu ms: a replay could apply it twice, so it is refused",
             q->id, (long long)(now - q->first_ms), (unsigned long long)h->a->retention_ms);
    return WEIR_ERETENTION;
  }
  q->replayed = 0;
  q->fenced = 0;
  weir_sink_io_count(c->io, WEIR_SINK_REQUESTS, 1);
  CURLMcode mc = curl_multi_add_handle(h->multi, q->curl);
  if (mc != CURLM_OK) {
    snprintf(c->err, c->errlen, "operation %s: %s", q->id, curl_multi_strerror(mc));
    return WEIR_EIO;
  }
  q->active = 1;
  return 0;
}

/* What q's answer (or its failure cc) means: 0 done, 1 to be sent again
 * after q's backoff, or a permanent error with a message in c->err. */
static int answered(hdest *h, weir_sink_commit *c, hreq *q, CURLcode cc) {
  weir_sink_io *io = c->io;
  long status = 0;
  if (cc == CURLE_OK) {
    curl_easy_getinfo(q->curl, CURLINFO_RESPONSE_CODE, &status);
    weir_sink_io_count(io, WEIR_SINK_RESPONSES, 1);
    /* The request was accepted: a crash now loses only the answer. */
    (void)weir_failpoint("sink.after_send");
  }
  if (cc == CURLE_OK && status >= 200 && status < 300) {
    if (q->replayed) weir_sink_io_count(io, WEIR_SINK_DUPLICATES, 1);
    /* Applied at the destination, not yet known to the checkpoint: the
     * failure window (weir verify). */
    (void)weir_failpoint("http.after_accept");
    return 0;
  }
  if (cc == CURLE_OK && status == 409 && q->fenced) {
    weir_sink_io_count(io, WEIR_SINK_REJECTIONS, 1);
    snprintf(c->err, c->errlen,
             "operation %s refused by %s: epoch %llu of this job is fenced there (a later "
             "owner wrote)",
             q->id, h->a->url, (unsigned long long)h->epoch);
    return WEIR_EFENCED;
  }
  if (cc == CURLE_OK && status == 422) {
    weir_sink_io_count(io, WEIR_SINK_REJECTIONS, 1);
    snprintf(c->err, c->errlen,
             "operation %s refused by %s with 422: its key was used before with another "
             "payload",
             q->id, h->a->url);
    return WEIR_EREFUSED;
  }
  if (cc == CURLE_OK && (status == 401 || status == 403)) {
    weir_sink_io_count(io, WEIR_SINK_REJECTIONS, 1);
    snprintf(c->err, c->errlen,
             "operation %s refused by %s with %ld: the destination did not accept %s", q->id,
             h->a->url, status,
             h->a->auth ? "this sink's credentials (auth_file or auth_env)"
                        : "a request without credentials (give them with auth_file=PATH or "
                          "auth_env=NAME)");
    return WEIR_EREFUSED;
  }
  if (cc == CURLE_OK && status >= 400 && status < 500 && status != 408 && status != 409 &&
      status != 429) {
    weir_sink_io_count(io, WEIR_SINK_REJECTIONS, 1);
    snprintf(c->err, c->errlen, "operation %s refused by %s with %ld", q->id, h->a->url, status);
    return WEIR_EREFUSED;
  }
  if (cc != CURLE_OK && cc != CURLE_OPERATION_TIMEDOUT && cc != CURLE_COULDNT_CONNECT &&
      cc != CURLE_GOT_NOTHING && cc != CURLE_RECV_ERROR && cc != CURLE_SEND_ERROR &&
      cc != CURLE_PARTIAL_FILE && cc != CURLE_COULDNT_RESOLVE_HOST) {
    int tls = cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CONNECT_ERROR ||
              cc == CURLE_SSL_CACERT_BADFILE;
    snprintf(c->err, c->errlen, "operation %s: %s: %s%s", q->id, h->a->url, curl_easy_strerror(cc),
             !tls ? ""
             : h->a->cacert
                 ? " (TLS: is the server's certificate signed by the CA in cacert=, and the "
                   "URL's host one of its names?)"
                 : " (TLS: a server whose certificate the system does not trust needs its CA "
                   "with cacert=FILE)");
    return WEIR_EIO;
  }
  /* Lost answer, 5xx, 408, 429, 409 (in flight): again, same key. Said
   * once per operation, so a destination that is down does not look like
   * a hang. */
  if (q->tries == 3) {
    if (cc != CURLE_OK)
      WEIR_LOG_W("sink '%s' subtask %u: %s: %s; retrying operation %s", c->sink,
                 (unsigned)c->subtask, h->a->url, curl_easy_strerror(cc), q->id);
    else
      WEIR_LOG_W("sink '%s' subtask %u: %s answered %ld; retrying operation %s", c->sink,
                 (unsigned)c->subtask, h->a->url, status, q->id);
  }
  q->tries++;
  q->due_ns = weir_clock_mono_ns() + (uint64_t)q->backoff * 1000000u;
  q->backoff = q->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : q->backoff * 2;
  return 1;
}

/* The next operation not sent in an earlier attempt of this process: 1,
 * 0 if there is none, or WEIR_ECORRUPT. */
static int next_op(weir__oplog_reader *rd, weir_sink_commit *c, weir__op *op) {
  while (rd->i < rd->n) {
    if (weir__oplog_next(rd, op) < 0) {
      snprintf(c->err, c->errlen, "epoch %llu: malformed handle", (unsigned long long)c->epoch);
      return WEIR_ECORRUPT;
    }
    if (op->index >= c->progress) return 1;
  }
  return 0;
}

/* Sends the epoch's operations with up to a->inflight in flight (one until
 * a request of this run was accepted), each until the destination answered
 * it 2xx; see DESIGN. */
static int http_commit(void *dest, weir_sink_commit *c) {
  hdest *h = dest;
  if (!h->multi) {
    int rc = make_pool(h);
    if (rc < 0) {
      snprintf(c->err, c->errlen, "cannot create the libcurl handles");
      return rc;
    }
  }
  weir__oplog_reader rd;
  weir__op op;
  if (weir__oplog_open(c, &rd) < 0) {
    snprintf(c->err, c->errlen, "epoch %llu: malformed handle", (unsigned long long)c->epoch);
    return WEIR_ECORRUPT;
  }
  uint32_t nreq = h->a->inflight, busy = 0;
  int rc = 0;
  for (;;) {
    /* Free slots take the next operations. */
    for (uint32_t i = 0; i < nreq && busy < (h->proven ? nreq : 1); i++) {
      hreq *q = &h->req[i];
      if (q->busy) continue;
      if ((rc = next_op(&rd, c, &op)) < 0) goto out;
      if (!rc) break;
      start_op(h, c, q, &op);
      busy++;
      if ((rc = send_op(h, c, q)) < 0) goto out;
    }
    if (!busy && rd.i >= rd.n) break;
    rc = 0;
    if (weir_sink_io_stopping(c->io)) {
      rc = WEIR_ECANCELED;
      goto out;
    }
    int running;
    CURLMcode mc = curl_multi_perform(h->multi, &running);
    if (mc != CURLM_OK) {
      snprintf(c->err, c->errlen, "%s: %s", h->a->url, curl_multi_strerror(mc));
      rc = WEIR_EIO;
      goto out;
    }
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
      if (m->msg != CURLMSG_DONE) continue;
      CURLcode cc = m->data.result;
      char *priv = NULL;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
      hreq *q = (hreq *)(void *)priv;
      curl_multi_remove_handle(h->multi, q->curl);
      q->active = 0;
      if ((rc = answered(h, c, q, cc)) < 0) goto out;
      if (rc == 0) {
        end_op(h, q);
        busy--;
        h->proven = 1;
      }
      rc = 0;
    }
    /* Done are all operations before the oldest one still busy (they are
     * taken in order). */
    uint64_t progress = rd.i;
    uint64_t now = weir_clock_mono_ns(), next = UINT64_MAX;
    for (uint32_t i = 0; i < nreq; i++) {
      hreq *q = &h->req[i];
      if (!q->busy) continue;
      if (q->index < progress) progress = q->index;
      if (q->active) continue;
      if (q->due_ns <= now) {
        if ((rc = send_op(h, c, q)) < 0) goto out;
      } else if (q->due_ns < next) {
        next = q->due_ns;
      }
    }
    c->progress = progress;
    /* Woken by any transfer's activity; at least every POLL_MAX_MS to see
     * a stop, and when the next retry is due. */
    long wait = POLL_MAX_MS, t = -1;
    curl_multi_timeout(h->multi, &t);
    if (t >= 0 && t < wait) wait = t;
    if (next != UINT64_MAX && (long)((next - now) / 1000000u) < wait)
      wait = (long)((next - now) / 1000000u);
    if (busy < (h->proven ? nreq : 1) && rd.i < rd.n) wait = 0;
    if (wait > 0 && (mc = curl_multi_poll(h->multi, NULL, 0, (int)wait, NULL)) != CURLM_OK) {
      snprintf(c->err, c->errlen, "%s: %s", h->a->url, curl_multi_strerror(mc));
      rc = WEIR_EIO;
      goto out;
    }
  }
  c->progress = rd.n;
  return 0;
out:
  /* What is still in flight is abandoned: the job stops or fails, and a
   * later run sends the epoch again. */
  for (uint32_t i = 0; i < nreq; i++)
    if (h->req[i].busy) end_op(h, &h->req[i]);
  return rc;
}

static void http_close(weir_ctx *ctx, void *dest) {
  hdest *h = dest;
  free_pool(h);
  weir__oplog_free(&h->ops);
  weir_free(h);
}

/* The URL without user information (credentials) and weir's parameters. */
static int http_identity(const void *arg, char *buf, size_t cap) {
  const http_arg *a = arg;
  weir__url_identity(a->url, buf, cap);
  return 0;
}

static uint64_t http_buffer_bytes(const void *arg) {
  return ((const http_arg *)arg)->buffer;
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
    .buffer_bytes = http_buffer_bytes,
    .move_note = "the http sink sends a checkpoint's pending epochs after it completed, so they "
                 "may have reached the old destination already: sending them to the new one "
                 "would apply them twice across the two, and weir keeps no credentials to send "
                 "them to the old one",
};

#endif

/* Parses an http spec into a (url without weir's parameters, retention,
 * idempotency, inflight). Returns 0 or WEIR_ESINK with a message. */
/* The value of an Authorization header from `from` (auth_file=: a file;
 * auth_env=: an environment variable), trailing newlines dropped; NULL and
 * a message that does not contain it. */
static char *read_auth(const char *spec, const char *what, const char *from, int env, char *err,
                       size_t errlen) {
  char *v = NULL;
  if (env) {
    const char *e = getenv(from);
    if (!e) {
      weir__spec_error(err, errlen, "sink '%s': auth_env: the environment has no variable %s", spec,
                       from);
      return NULL;
    }
    v = weir_strdup(e);
  } else {
    FILE *f = fopen(from, "rb");
    if (!f) {
      weir__spec_error(err, errlen, "sink '%s': auth_file: cannot read '%s': %s", spec, from,
                       strerror(errno));
      return NULL;
    }
    size_t cap = 8193, n = 0;
    v = weir_malloc(cap);
    n = fread(v, 1, cap - 1, f);
    int big = n == cap - 1 && fgetc(f) != EOF;
    fclose(f);
    v[n] = '\0';
    if (big || strlen(v) != n) {
      memset(v, 0, cap);
      weir_free(v);
      weir__spec_error(err, errlen,
                       "sink '%s': auth_file '%s' is not one line of text of at most 8 KiB", spec,
                       from);
      return NULL;
    }
  }
  size_t n = strlen(v);
  while (n && (v[n - 1] == '\n' || v[n - 1] == '\r')) v[--n] = '\0';
  int bad = n == 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)v[i] < 0x20 && v[i] != '\t') bad = 1;
  if (bad) {
    memset(v, 0, n);
    weir_free(v);
    weir__spec_error(err, errlen,
                     "sink '%s': %s %s is empty or not one line: it must hold the value of an "
                     "Authorization header, as in 'Bearer TOKEN'",
                     spec, what, from);
    return NULL;
  }
  return v;
}

static int http_parse(const char *spec, weir__sink_arg *common, char *err, size_t errlen) {
  http_arg *a = (http_arg *)common;
  const char *host = strstr(spec, "://") + 3;
  if (!*host || *host == '/' || *host == '?')
    return weir__spec_error(err, errlen,
                            "sink '%s' needs a host, as in http://127.0.0.1:8080/effects", spec);
  size_t authority = strcspn(host, "/?");
  if (memchr(host, '@', authority)) /* not echoed: it holds them */
    return weir__spec_error(err, errlen,
                            "sink '%.*s...': credentials in the URL would show in messages and "
                            "logs: give them with auth_file=PATH or auth_env=NAME",
                            (int)(host - spec), spec);
  a->idempotent = 1;
  a->inflight = INFLIGHT_DEFAULT;
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
    } else if (n >= 9 && !strncmp(p, "inflight=", 9)) {
      uint64_t v = 0;
      size_t k = 9;
      while (k < n && p[k] >= '0' && p[k] <= '9' && v <= INFLIGHT_MAX)
        v = v * 10 + (uint64_t)(p[k++] - '0');
      if (k == 9 || k != n || v < 1 || v > INFLIGHT_MAX) {
        weir_free(url);
        return weir__spec_error(err, errlen,
                                "sink '%s': inflight must be a whole number from 1 to %u (the "
                                "requests in flight per sink subtask; 1 sends in order)",
                                spec, INFLIGHT_MAX);
      }
      a->inflight = (uint32_t)v;
    } else if (n >= 7 && !strncmp(p, "buffer=", 7)) {
      if (weir__parse_bytes(p + 7, n - 7, &a->buffer) < 0 || a->buffer < 4096) {
        weir_free(url);
        return weir__spec_error(err, errlen,
                                "sink '%s': buffer must be a size of at least 4096 bytes, as in "
                                "buffer=64M (k, M, G: binary)",
                                spec);
      }
    } else if ((n > 10 && !strncmp(p, "auth_file=", 10)) ||
               (n > 9 && !strncmp(p, "auth_env=", 9))) {
      int env = p[5] == 'e';
      size_t k = env ? 9 : 10;
      char *from = weir_malloc(n - k + 1);
      memcpy(from, p + k, n - k);
      from[n - k] = '\0';
      if (a->auth) {
        weir_free(from);
        weir_free(url);
        return weir__spec_error(err, errlen, "sink '%s': give one of auth_file and auth_env", spec);
      }
      a->auth = read_auth(spec, env ? "auth_env" : "auth_file", from, env, err, errlen);
      weir_free(from);
      if (!a->auth) {
        weir_free(url);
        return WEIR_ESINK;
      }
    } else if (n > 7 && !strncmp(p, "cacert=", 7)) {
      weir_free(a->cacert);
      a->cacert = weir_malloc(n - 7 + 1);
      memcpy(a->cacert, p + 7, n - 7);
      a->cacert[n - 7] = '\0';
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
  if (a->auth) {
    memset(a->auth, 0, strlen(a->auth));
    weir_free(a->auth);
  }
  weir_free(a->cacert);
  weir_free(a->url);
  weir_free(a);
}

#ifdef WEIR_HAVE_CURL
#define HTTP_DEST .dest = &http_dest_vt,
#else
#define HTTP_DEST
#endif

/* http:// and https:// are one sink; libcurl tells them apart by the URL. */
#define HTTP_SINK(scheme)                                                                          \
  {                                                                                                \
    .name = scheme, .library = "libcurl", .available = http_available,                             \
    .arg_size = sizeof(http_arg), .parse = http_parse, .free = http_arg_free, HTTP_DEST            \
  }

const weir__sink_def weir__http_sink = HTTP_SINK("http");
const weir__sink_def weir__https_sink = HTTP_SINK("https");
