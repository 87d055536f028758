/* nats.c: owns the NATS JetStream destination (nats://HOST:PORT/SUBJECT),
 * its specification and arg: write-ahead epochs published after their checkpoint completed, one
 * message "<key> <value>" per record, with Nats-Msg-Id = the record's
 * operation id (a destination of twophase.c), through libnats's
 * asynchronous publish on the sink subtask's commit thread.
 *
 * DESIGN. As in http.c, the transaction of an epoch is its records,
 * formatted: write appends each record's body and, with a job-defined id
 * function, the content part of its operation id; pre_commit hands the
 * buffer over as the handle, so the records travel in the checkpoint and
 * nothing reaches the stream before the checkpoint completed. commit
 * publishes the epoch's records in order with js_PublishAsync, at most
 * `pending` of them awaiting their acknowledgement at once (a bounded
 * window), and returns only when every acknowledgement has arrived: the
 * epoch counts as committed only then. An acknowledgement marked Duplicate
 * (JetStream recognised the Nats-Msg-Id inside its duplicate window: a
 * replay) is counted as a duplicate, apart from the others. A failed or
 * missing acknowledgement (no stream, server gone, 5 s without an answer)
 * makes the whole epoch be published again after a backoff (WEIR_EAGAIN):
 * what already landed comes back as duplicates. libnats reconnects by
 * itself (for about a minute); a connection it gave up on fails the job
 * with a message naming the URL.
 *
 *   commit(epoch): window check -> publish 0..n-1 (<= pending unacked)
 *        -> every ack arrived? yes: done   no/failed: EAGAIN, again later
 *
 * The duplicate window. JetStream remembers a Nats-Msg-Id only for its
 * stream's duplicate window (Duplicates, 2 minutes by default); a replay
 * after it is stored again. open reads the window of the stream (creating
 * the stream, covering SUBJECT, if it is missing; duplicates=DURATION sets
 * the window of a stream it creates). A publish that may be a replay is
 * refused (WEIR_ERETENTION, exit code 5) when its first possible
 * publication is older than the window: for an epoch restored from a
 * checkpoint, that is its pre-commit time, kept in the sink's checkpointed
 * state (twophase.c; an epoch is published only after its checkpoint
 * completed, so no effect of it can be older); for a retry within a run,
 * the time of its first publication in this run.
 *
 * Operation ids: "<job id>/<sink>/c/<content>" with an id function, else
 * "<job id>/<sink>/w/<subtask>/<epoch>/<index>" (sink.h).
 *
 * Threads: open, write, pre_commit and close run on the task thread; open
 * connects (blocking, once, with a 2 s timeout) and commit uses the
 * connection on the commit thread; libnats calls on_ack on a thread of its
 * own, which touches only the fields under `mu`.
 */
#include "connector.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nats_impl.h"
#include "nats_stage.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"

#define DEFAULT_PENDING 1024u
#define ACK_TIMEOUT_MS 5000 /* libnats reports an ack missing after this */

/* The sink's arg: its parsed URL (nats_impl.h). */
typedef struct nats_arg {
  weir__sink_arg common;
  weir__nats_url url;
} nats_arg;

#ifdef WEIR_HAVE_NATS

/* One subtask's destination. `ops` is the task
 * thread's; `first_*` the commit thread's; the ack fields are under `mu`. */
typedef struct ndest {
  const nats_arg *a;
  const weir__nats_url *u;
  weir__oplog ops;       /* the open transaction's operations */
  weir__stage_out stage; /* with tasks=: the open epoch's batches instead */
  natsConnection *nc;
  jsCtx *js;
  uint64_t window_ms; /* the stream's duplicate window */
  uint32_t pending;   /* unacknowledged publishes allowed at once */
  int published;      /* js_PublishAsync was called (libnats keeps a pending map) */
  uint64_t first_epoch;
  int64_t first_ms; /* first publication of first_epoch in this run */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t inflight, acks, dups, failed;
  char ackerr[256];
} ndest;

static void nats_close(weir_ctx *ctx, void *dest);

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure) {
  (void)js;
  ndest *h = closure;
  pthread_mutex_lock(&h->mu);
  if (h->inflight) h->inflight--;
  if (pa) {
    h->acks++;
    if (pa->Duplicate) h->dups++;
  } else {
    h->failed++;
    if (pae && !h->ackerr[0])
      snprintf(h->ackerr, sizeof h->ackerr, "%s",
               pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err));
  }
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  natsMsg_Destroy(msg);
}

/* ensure_stream_once's answer when another stream holds the subject. */
#define WEIR__NATS_OVERLAP ((natsStatus)-1)

/* One attempt of ensure_stream: the stream's info into *si, the stream made
 * if missing (`held`: the subjects it holds). NATS_OK, WEIR__NATS_OVERLAP,
 * or the failure (*jerr: JetStream's code). */
static natsStatus ensure_stream_once(weir_ctx *ctx, ndest *h, const char *held, jsStreamInfo **si,
                                     jsErrCode *jerr) {
  const weir__nats_url *u = h->u;
  natsStatus s = js_GetStreamInfo(si, h->js, u->stream, NULL, jerr);
  if (s == NATS_OK || !(s == NATS_NOT_FOUND || *jerr == JSStreamNotFoundErr)) return s;
  s = weir__nats_add_stream(h->js, u, held, si, jerr);
  if (s == NATS_OK) {
    WEIR_LOG_I("sink '%s': created stream %s for subject %s on %s", weir_ctx_name(ctx), u->stream,
               held, u->server);
  } else if (*jerr == JSStreamNameExistErr || *jerr == JSStreamSubjectOverlapErr) {
    /* Another subtask made it: JetStream answers a second creation of the
     * stream either way, the overlap when the two race. If no stream has
     * the name, another one holds the subject. */
    jsErrCode first = *jerr;
    *jerr = 0;
    natsStatus again = js_GetStreamInfo(si, h->js, u->stream, NULL, jerr);
    if (again == NATS_OK) return NATS_OK;
    *jerr = first;
    if (first == JSStreamSubjectOverlapErr) return WEIR__NATS_OVERLAP;
  }
  return s;
}

/* The stream of u: created if missing; checks it covers the subject and
 * reads its duplicate window. Returns 0 or an error with a message. */
static int ensure_stream(weir_ctx *ctx, ndest *h) {
  const weir__nats_url *u = h->u;
  /* A stage edge's subjects are SUBJECT.<from>.<to> (nats_stage.h). */
  char wide[512], one[512];
  snprintf(wide, sizeof wide, "%s.>", u->subject);
  snprintf(one, sizeof one, "%s.0.0", u->subject);
  const char *held = u->tasks ? wide : u->subject, *probe = u->tasks ? one : u->subject;
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus s = NATS_TIMEOUT;
  /* A request unanswered (a server just started, a leader being elected)
   * is asked again, twice, before the sink gives up. */
  for (int tries = 0; tries < 3 && s == NATS_TIMEOUT; tries++) {
    if (tries)
      WEIR_LOG_W("sink '%s': %s: stream %s: no answer, asking again", weir_ctx_name(ctx), u->spec,
                 u->stream);
    jerr = 0;
    s = ensure_stream_once(ctx, h, held, &si, &jerr);
    if (s == WEIR__NATS_OVERLAP)
      return weir_ctx_fail(ctx, WEIR_ESINK,
                           "sink '%s': %s: stream %s cannot be created: another stream holds "
                           "subject %s (JetStream error %d); name that stream with stream=",
                           weir_ctx_name(ctx), u->spec, u->stream, held, (int)jerr);
  }
  if (s != NATS_OK)
    return weir_ctx_fail(ctx, WEIR_EIO, "sink '%s': %s: stream %s: %s (JetStream error %d)",
                         weir_ctx_name(ctx), u->spec, u->stream, weir__nats_errtext(s), (int)jerr);
  int covered = 0;
  for (int i = 0; si->Config && i < si->Config->SubjectsLen; i++)
    if (weir__nats_subject_covers(si->Config->Subjects[i], probe)) covered = 1;
  int64_t dup_ns = si->Config ? si->Config->Duplicates : 0;
  jsStreamInfo_Destroy(si);
  if (!covered)
    return weir_ctx_fail(ctx, WEIR_ESINK,
                         "sink '%s': %s: stream %s exists but does not hold subject %s (name "
                         "another stream with stream=)",
                         weir_ctx_name(ctx), u->spec, u->stream, held);
  h->window_ms = dup_ns > 0 ? (uint64_t)(dup_ns / 1000000) : 120000;
  if (u->duplicates_ms && u->duplicates_ms != h->window_ms && weir_ctx_subtask(ctx) == 0)
    WEIR_LOG_W("sink '%s': stream %s exists with a duplicate window of %llu ms: duplicates= "
               "applies only to a stream the sink creates",
               weir_ctx_name(ctx), u->stream, (unsigned long long)h->window_ms);
  return 0;
}

static int nats_open(weir_ctx *ctx, void **out) {
  const nats_arg *a = weir_sink_dest_arg(ctx);
  if (!a->common.opid) {
    int rc = weir__refuse_rewind(ctx);
    if (rc) return rc;
  }
  ndest *h = weir_calloc(1, sizeof *h);
  h->a = weir_sink_dest_arg(ctx);
  h->u = &h->a->url;
  h->pending = h->u->pending ? h->u->pending : DEFAULT_PENDING;
  if (h->u->tasks) weir__stage_out_init(&h->stage, h->u->tasks);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 5000;
  jo.PublishAsync.MaxPending = h->pending + 16;
  jo.PublishAsync.AckHandler = on_ack;
  jo.PublishAsync.AckHandlerClosure = h;
  char err[512];
  int rc = weir__nats_connect(h->u, &jo, &h->nc, &h->js, err, sizeof err);
  if (rc < 0)
    rc = weir_ctx_fail(ctx, WEIR_EIO, "sink '%s': %s", weir_ctx_name(ctx), err);
  else
    rc = ensure_stream(ctx, h);
  if (rc < 0) { /* the driver does not close what did not open */
    nats_close(ctx, h);
    return rc;
  }
  *out = h;
  return 0;
}

static int nats_write(weir_ctx *ctx, void *dest, const weir_record *r) {
  ndest *h = dest;
  if (h->u->tasks) return weir__stage_out_add(ctx, &h->stage, r);
  return weir__oplog_add(ctx, &h->ops, h->a->common.fmt, h->a->common.opid, r);
}

static int nats_pre_commit(weir_ctx *ctx, void *dest, uint64_t epoch, weir_sink_buf *out) {
  ndest *h = dest;
  if (h->u->tasks)
    return weir__stage_out_take(&h->stage, weir_ctx_subtask(ctx), weir_ctx_parallelism(ctx), epoch,
                                out);
  return weir__oplog_take(&h->ops, out);
}

/* The true end of input: a stage edge tells every task that this
 * producer ended. Not at a stop: the producer goes on after a restore
 * (cluster mode stops a stage to hand it to another member). */
static int nats_finish(weir_ctx *ctx, void *dest) {
  ndest *h = dest;
  if (h->u->tasks && !weir_ctx_input_stopped(ctx)) h->stage.ended = 1;
  return 0;
}

/* Waits until at most `max` publishes are unacknowledged, the subtask
 * closes (1) or ACK_TIMEOUT_MS pass without an acknowledgement (-1). */
static int wait_inflight(ndest *h, weir_sink_io *io, uint64_t max) {
  int rc = 0;
  pthread_mutex_lock(&h->mu);
  uint64_t last_acks = h->acks + h->failed;
  int64_t since = weir_clock_wall_ms();
  while (h->inflight > max) {
    if (weir_sink_io_stopping(io)) {
      rc = 1;
      break;
    }
    if (h->acks + h->failed != last_acks) {
      last_acks = h->acks + h->failed;
      since = weir_clock_wall_ms();
    } else if (weir_clock_wall_ms() - since > 2 * ACK_TIMEOUT_MS) { /* a backstop */
      rc = -1;
      break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  }
  pthread_mutex_unlock(&h->mu);
  return rc;
}

/* Takes back every unacknowledged publish (their acks are then dropped). */
static void forget_inflight(ndest *h) {
  natsMsgList l = {0};
  /* libnats 3.4 crashes here if nothing was ever published asynchronously. */
  if (h->published && js_PublishAsyncGetPendingList(&l, h->js) == NATS_OK) natsMsgList_Destroy(&l);
  pthread_mutex_lock(&h->mu);
  h->inflight = 0;
  pthread_mutex_unlock(&h->mu);
}

/* The messages of an epoch's handle, one by one: the operation log's
 * records on SUBJECT, or a stage edge's batches on SUBJECT.<from>.<to>. */
typedef struct msgs {
  const ndest *h;
  const weir_sink_commit *c;
  weir__oplog_reader rd; /* the operation log */
  size_t off;            /* a stage handle */
  uint32_t left;
  uint32_t n; /* messages in the handle */
  const char *subject;
  char stage_subject[512];
  weir__op op;
} msgs;

/* Returns 0, or WEIR_ECORRUPT. */
static int msgs_open(msgs *m, const ndest *h, const weir_sink_commit *c) {
  memset(m, 0, sizeof *m);
  m->h = h;
  m->c = c;
  m->subject = h->u->subject;
  if (!h->u->tasks) {
    if (weir__oplog_open(c, &m->rd) < 0) return WEIR_ECORRUPT;
    m->n = m->rd.n;
    return 0;
  }
  if (weir__stage_handle_open(c->handle, c->len, &m->off, &m->n) < 0) return WEIR_ECORRUPT;
  m->left = m->n;
  return 0;
}

/* The next message into m->op (body, id) and m->subject: 1, 0 at the end,
 * or WEIR_ECORRUPT. */
static int msgs_next(msgs *m) {
  if (!m->h->u->tasks) {
    if (m->rd.i >= m->rd.n) return 0;
    return weir__oplog_next(&m->rd, &m->op) < 0 ? WEIR_ECORRUPT : 1;
  }
  weir__stage_batch b;
  int rc = weir__stage_handle_next(m->c->handle, m->c->len, &m->off, &m->left, &b);
  if (rc <= 0) return rc;
  const char *subj = m->h->u->subject;
  snprintf(m->stage_subject, sizeof m->stage_subject, "%s.%u.%u", subj, b.from, b.to);
  snprintf(m->op.id, sizeof m->op.id, "%s/%s/%u/%u/%llu/%u", m->c->job_id, subj, b.from, b.to,
           (unsigned long long)b.epoch, b.index);
  m->op.body = b.data;
  m->op.blen = b.len;
  m->subject = m->stage_subject;
  return 1;
}

static int nats_commit(void *dest, weir_sink_commit *c) {
  ndest *h = dest;
  weir_sink_io *io = c->io;
  const weir__nats_url *u = h->u;
  if (c->len < 4) goto bad;
  if (natsConnection_IsClosed(h->nc)) { /* libnats gave up reconnecting: it never will */
    snprintf(c->err, c->errlen, "lost the connection to NATS at %s (%s) and could not reconnect",
             u->server, u->spec);
    return WEIR_EIO;
  }
  int64_t now = weir_clock_wall_ms();
  /* A publish that may be a replay: refused beyond the duplicate window,
   * except on a stage edge, whose readers skip what they applied already
   * (nats_stage_source.c): there the window is only a second defence. */
  int64_t first = 0;
  if (c->recovered) first = (int64_t)c->precommit_ms;
  if (h->first_epoch == c->epoch && h->first_ms && (!first || h->first_ms < first))
    first = h->first_ms;
  if (first && now - first > (int64_t)h->window_ms && !u->tasks) {
    snprintf(c->err, c->errlen,
             "%s: epoch %llu may have been published %lld ms ago, beyond the duplicate window "
             "of stream %s (%llu ms): JetStream would store a replay twice, so it is refused",
             u->spec, (unsigned long long)c->epoch, (long long)(now - first), u->stream,
             (unsigned long long)h->window_ms);
    weir_sink_io_count(io, WEIR_SINK_REJECTIONS, 1);
    return WEIR_ERETENTION;
  }
  if (h->first_epoch != c->epoch || !h->first_ms) {
    h->first_epoch = c->epoch;
    h->first_ms = now;
  }
  pthread_mutex_lock(&h->mu);
  h->acks = h->dups = h->failed = 0;
  h->ackerr[0] = '\0';
  pthread_mutex_unlock(&h->mu);

  msgs rd;
  int rc = 0, more;
  natsStatus ps = NATS_OK;
  if (msgs_open(&rd, h, c) < 0) goto bad;
  while ((more = msgs_next(&rd)) != 0) {
    if (more < 0) goto bad;
    int w = wait_inflight(h, io, h->pending - 1);
    if (w) {
      rc = w > 0 ? WEIR_ECANCELED : WEIR_EAGAIN;
      break;
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = rd.op.id;
    po.MaxWait = ACK_TIMEOUT_MS;
    pthread_mutex_lock(&h->mu);
    h->inflight++;
    pthread_mutex_unlock(&h->mu);
    h->published = 1;
    ps = js_PublishAsync(h->js, rd.subject, rd.op.body, (int)rd.op.blen, &po);
    if (ps != NATS_OK) {
      pthread_mutex_lock(&h->mu);
      h->inflight--;
      pthread_mutex_unlock(&h->mu);
      rc = WEIR_EAGAIN;
      break;
    }
    weir_sink_io_count(io, WEIR_SINK_REQUESTS, 1);
    /* Published, perhaps stored: a crash now loses only the ack. */
    (void)weir_failpoint("sink.after_send");
  }
  /* Every ack awaited before the epoch's effects count as done. */
  if (rc == 0) {
    int w = wait_inflight(h, io, 0);
    if (w) rc = w > 0 ? WEIR_ECANCELED : WEIR_EAGAIN;
  }
  if (rc == WEIR_EAGAIN) forget_inflight(h);
  pthread_mutex_lock(&h->mu);
  uint64_t acks = h->acks, dups = h->dups, failed = h->failed;
  char ackerr[256];
  snprintf(ackerr, sizeof ackerr, "%s", h->ackerr);
  pthread_mutex_unlock(&h->mu);
  weir_sink_io_count(io, WEIR_SINK_RESPONSES, acks + failed);
  weir_sink_io_count(io, WEIR_SINK_DUPLICATES, dups);
  if (dups)
    WEIR_LOG_I("sink '%s' subtask %u: epoch %llu: %llu of %u messages were duplicates (Nats-Msg-Id "
               "already in stream %s)",
               c->sink, (unsigned)c->subtask, (unsigned long long)c->epoch,
               (unsigned long long)dups, rd.n, u->stream);
  if (rc == WEIR_ECANCELED) return rc;
  if (rc == 0 && failed) rc = WEIR_EAGAIN;
  if (rc == WEIR_EAGAIN) {
    WEIR_LOG_W("sink '%s' subtask %u: %s: epoch %llu: %s; publishing it again", c->sink,
               (unsigned)c->subtask, u->spec, (unsigned long long)c->epoch,
               ps != NATS_OK ? weir__nats_errtext(ps)
               : ackerr[0]   ? ackerr
                             : "no acknowledgement in time");
    return rc;
  }
  c->progress = rd.n;
  return 0;
bad:
  snprintf(c->err, c->errlen, "epoch %llu: malformed handle", (unsigned long long)c->epoch);
  return WEIR_ECORRUPT;
}

static void nats_close(weir_ctx *ctx, void *dest) {
  ndest *h = dest;
  if (!h) return;
  if (h->js) forget_inflight(h);
  weir__nats_disconnect(h->nc, h->js);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  weir__oplog_free(&h->ops);
  weir__stage_out_free(&h->stage);
  weir_free(h);
}

/* "nats://HOST:PORT subject S" (no credentials): a subject belongs to one
 * stream of a server, so the stream adds nothing. */
static int nats_identity(const void *arg, char *buf, size_t cap) {
  const nats_arg *a = arg;
  char server[512];
  weir__url_identity(a->url.server, server, sizeof server);
  snprintf(buf, cap, "%s subject %s", server, a->url.subject);
  return 0;
}

static const weir_sink_dest_vt nats_dest_vt = {
    .size = sizeof(weir_sink_dest_vt),
    .name = "nats",
    .open = nats_open,
    .write = nats_write,
    .pre_commit = nats_pre_commit,
    .commit = nats_commit,
    .close = nats_close,
    .finish = nats_finish,
    .identity = nats_identity,
    .move_note = "the nats sink publishes a checkpoint's pending epochs after it completed, so "
                 "they may be in the old stream already: publishing them to the new one would "
                 "store them twice across the two, and weir keeps no credentials to publish "
                 "them to the old one",
};

#endif

static int nats_parse(const char *spec, weir__sink_arg *a, char *err, size_t errlen) {
  return weir__nats_url_parse(spec, 0, &((nats_arg *)a)->url, err, errlen);
}

static void nats_arg_free(void *p) {
  nats_arg *a = p;
  weir__nats_url_free(&a->url);
  weir_free(a);
}

const weir__sink_def weir__nats_sink = {
    .name = "nats",
    .library = "libnats",
    .available = weir__nats_available,
    .arg_size = sizeof(nats_arg),
    .parse = nats_parse,
    .free = nats_arg_free,
#ifdef WEIR_HAVE_NATS
    .dest = &nats_dest_vt,
#endif
};
