/* nats_source.c: owns the NATS JetStream source (weir/nats.h): reading a
 * subject of a stream in sequence order through an ordered consumer, its
 * positions (stream sequences) in checkpoints, and the refusal to resume
 * from a position the stream no longer holds.
 *
 * DESIGN. One subtask (0) reads; it owns two splits: split 0's position is
 * the next stream sequence to read, split 1's the last sequence to read
 * (`end`), fixed when the job first starts (the last message of SUBJECT
 * then) so that every run and restore reads the same messages. At the first
 * run() the subtask reads the stream's state, checks the position (a
 * restored position below the stream's first sequence was removed by
 * retention: WEIR_ERETENTION, never skipped), and subscribes with an
 * ordered consumer (no acks, flow control, in order) starting at that
 * sequence. run() takes what libnats has buffered without waiting
 * (natsSubscription_NextMsg with a zero timeout) and returns
 * WEIR_SOURCE_IDLE, to be called again 2 ms later, when nothing is there,
 * so the worker never waits on the network; connecting and subscribing
 * (once, bounded by 2 s and 5 s timeouts) do block it.
 *
 *   open --first run--> CHECKED --subscribed--> READING --seq == end--> DONE
 *                        \--first_seq > next (restored)--> failed (ERETENTION)
 *
 * A message with a sequence below `next` (the ordered consumer restarting
 * after a gap) is dropped; one above `end` ends the input. While nothing
 * comes, the stream's state is checked once a second: messages still to
 * read that were removed meanwhile (purge, retention, a deleted stream)
 * stop the job (WEIR_ERETENTION) instead of leaving it waiting. Messages
 * removed while others keep coming are not noticed (the consumer moves on
 * to the next one the stream holds).
 *
 * Threads: every callback on the subtask's thread; libnats's own threads
 * fill the subscription's queue.
 */
#include "weir/nats.h"

#include <stdio.h>
#include <string.h>

#include "nats_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"

int weir_nats_source_check(const char *url, char *err, size_t errlen) {
  if (!url || strncmp(url, "nats://", 7) != 0) {
    snprintf(err, errlen, "source '%s': use nats://HOST:PORT/SUBJECT", url ? url : "");
    return WEIR_ESINK;
  }
  if (!weir__nats_available()) {
    snprintf(err, errlen,
             "source '%s': this weir was built without libnats, so the nats source is not "
             "available (install libnats's development files and rebuild)",
             url);
    return WEIR_ESINK;
  }
  weir__nats_url u;
  int rc = weir__nats_url_parse(url, 1, &u, err, errlen);
  weir__nats_url_free(&u);
  return rc;
}

static void url_free(void *p) {
  weir__nats_url_free(p);
  weir_free(p);
}

#ifndef WEIR_HAVE_NATS

static int src_open(weir_ctx *ctx) {
  return weir_ctx_fail(ctx, WEIR_ESINK, "this weir was built without libnats");
}
static int src_run(weir_ctx *ctx, uint32_t budget) {
  return WEIR_ESINK;
}
static void src_close(weir_ctx *ctx) {}
static int src_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  return 0;
}
static int src_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  return 0;
}

#else

/* Subtask 0's reader; owned by the subtask's thread. */
typedef struct nsrc {
  natsConnection *nc;
  jsCtx *js;
  natsSubscription *sub;
  uint64_t next;     /* the next sequence to read; 0 = from the stream's first */
  uint64_t end;      /* the last sequence to read */
  int have_end;      /* end is known (restored or computed) */
  int restored;      /* next came from a checkpoint */
  int started;       /* checked and subscribed */
  int done;          /* read through end */
  uint64_t t0;       /* monotonic ns of the first message (rate) */
  uint64_t emitted;  /* since t0 */
  uint64_t received; /* messages taken from libnats */
  uint64_t idle_ms;  /* wall ms since nothing came (0: something did), for check_idle */
} nsrc;

static int src_open(weir_ctx *ctx) {
  if (weir_ctx_subtask(ctx) != 0) return 0; /* only subtask 0 reads */
  const weir__nats_url *u = weir_ctx_arg(ctx);
  nsrc *s = weir_calloc(1, sizeof *s);
  weir_ctx_set_user(ctx, s);
  char err[512];
  if (weir__nats_connect(u, NULL, &s->nc, &s->js, err, sizeof err) < 0)
    return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s", weir_ctx_name(ctx), err);
  return 0;
}

static void src_close(weir_ctx *ctx) {
  nsrc *s = weir_ctx_user(ctx);
  if (!s) return;
  natsSubscription_Destroy(s->sub);
  weir__nats_disconnect(s->nc, s->js);
  weir_free(s);
  weir_ctx_set_user(ctx, NULL);
}

static int src_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  nsrc *s = weir_ctx_user(ctx);
  if (!s) return 0;
  uint64_t next = 0, end = 0;
  if (weir_snapshot_get_position(r, 0, &next) && weir_snapshot_get_position(r, 1, &end)) {
    s->next = next;
    s->end = end;
    s->have_end = 1;
    s->restored = 1;
  }
  return 0;
}

static int src_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  nsrc *s = weir_ctx_user(ctx);
  if (!s || !s->have_end) return 0; /* not started: a restore starts from the beginning */
  int rc = weir_snapshot_position(w, 0, s->next);
  if (rc == 0) rc = weir_snapshot_position(w, 1, s->end);
  return rc;
}

/* Reads the stream's state, fixes `end`, checks the position, subscribes. */
static int src_start(weir_ctx *ctx, nsrc *s) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  const char *name = weir_ctx_name(ctx);
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus st = js_GetStreamInfo(&si, s->js, u->stream, NULL, &jerr);
  if (st != NATS_OK) {
    if (st == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
      return weir_ctx_fail(ctx, WEIR_EIO,
                           "source '%s': %s: no stream %s on %s (name it with stream=)", name,
                           u->spec, u->stream, u->server);
    return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: stream %s: %s", name, u->spec, u->stream,
                         weir__nats_errtext(st));
  }
  uint64_t first = si->State.FirstSeq, last = si->State.LastSeq;
  jsStreamInfo_Destroy(si);
  if (!s->have_end) {
    natsMsg *m = NULL;
    jerr = 0;
    st = js_GetLastMsg(&m, s->js, u->stream, u->subject, NULL, &jerr);
    if (st == NATS_OK) {
      s->end = natsMsg_GetSequence(m);
      natsMsg_Destroy(m);
    } else if (st == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr) {
      s->end = 0; /* nothing to read */
    } else {
      return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: the last message of %s: %s", name,
                           u->spec, u->subject, weir__nats_errtext(st));
    }
    s->have_end = 1;
    WEIR_LOG_I("source '%s': %s: reading stream %s up to sequence %llu", name, u->spec, u->stream,
               (unsigned long long)s->end);
  }
  if (!s->restored) s->next = first ? first : 1;
  if (s->next > s->end) {
    s->done = 1;
    return 0;
  }
  if (s->restored && first > s->next)
    return weir_ctx_fail(ctx, WEIR_ERETENTION,
                         "source '%s': %s: the checkpoint resumes at sequence %llu, which stream "
                         "%s no longer holds (its first sequence is %llu, last %llu: retention or "
                         "a purge removed messages); refusing to skip them",
                         name, u->spec, (unsigned long long)s->next, u->stream,
                         (unsigned long long)first, (unsigned long long)last);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = u->stream;
  so.Ordered = true;
  so.Config.DeliverPolicy = js_DeliverByStartSequence;
  so.Config.OptStartSeq = s->next;
  jerr = 0;
  st = js_SubscribeSync(&s->sub, s->js, u->subject, NULL, &so, &jerr);
  if (st != NATS_OK)
    return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: cannot subscribe: %s", name, u->spec,
                         weir__nats_errtext(st));
  natsSubscription_SetPendingLimits(s->sub, -1, -1);
  return 0;
}

/* The key of a body: its decimal value, else its hash. */
static uint64_t body_key(const char *p, int n) {
  int k = n;
  while (k > 0 && (p[k - 1] == ' ' || p[k - 1] == '\n' || p[k - 1] == '\r' || p[k - 1] == '\t'))
    k--;
  if (k == 0 || k > 20) return weir_hash_bytes(p, (size_t)n);
  uint64_t v = 0;
  for (int i = 0; i < k; i++) {
    if (p[i] < '0' || p[i] > '9') return weir_hash_bytes(p, (size_t)n);
    uint64_t d = (uint64_t)(p[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return weir_hash_bytes(p, (size_t)n);
    v = v * 10 + d;
  }
  return v;
}

/* Nothing has come for a while although `end` is not reached: the messages
 * still to read may have been removed (a purge, retention, the stream
 * deleted) while the job was reading, and would never come. Checked at
 * most once a second while idle (a round trip to the server). Returns 0 or
 * the job's error. */
static int check_idle(weir_ctx *ctx, nsrc *s) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  uint64_t now = (uint64_t)weir_clock_wall_ms();
  if (!s->idle_ms) s->idle_ms = now;
  if (now - s->idle_ms < 1000) return 0;
  s->idle_ms = now;
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus st = js_GetStreamInfo(&si, s->js, u->stream, NULL, &jerr);
  if (st == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
    return weir_ctx_fail(ctx, WEIR_ERETENTION,
                         "source '%s': %s: stream %s was deleted while the job read it (next "
                         "sequence %llu, last %llu)",
                         weir_ctx_name(ctx), u->spec, u->stream, (unsigned long long)s->next,
                         (unsigned long long)s->end);
  if (st != NATS_OK) return 0; /* the server may be back later: libnats reconnects */
  uint64_t first = si->State.FirstSeq;
  jsStreamInfo_Destroy(si);
  natsMsg *m = NULL;
  jerr = 0;
  st = js_GetLastMsg(&m, s->js, u->stream, u->subject, NULL, &jerr);
  uint64_t last = st == NATS_OK ? natsMsg_GetSequence(m) : 0;
  natsMsg_Destroy(m);
  if (first <= s->next && (st == NATS_OK || st == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr) &&
      last < s->end)
    return weir_ctx_fail(ctx, WEIR_ERETENTION,
                         "source '%s': %s: the job reads %s up to sequence %llu, but the last "
                         "message of %s in stream %s is now %llu (messages were removed while "
                         "the job read it); refusing to end without them",
                         weir_ctx_name(ctx), u->spec, u->subject, (unsigned long long)s->end,
                         u->subject, u->stream, (unsigned long long)last);
  if (first > s->next)
    return weir_ctx_fail(ctx, WEIR_ERETENTION,
                         "source '%s': %s: sequence %llu, the next to read, is no longer in "
                         "stream %s (its first sequence is now %llu: retention or a purge removed "
                         "messages while the job read it); refusing to skip them",
                         weir_ctx_name(ctx), u->spec, (unsigned long long)s->next, u->stream,
                         (unsigned long long)first);
  return 0;
}

/* The stream sequence of a message from a consumer, read from its reply
 * subject without allocating: $JS.ACK.<stream>.<consumer>.<delivered>.
 * <stream seq>.<consumer seq>.<time>.<pending> (9 tokens), or with
 * <domain>.<account hash> after $JS.ACK (12 tokens or more). Returns 0 if
 * the subject is neither (the caller then asks natsMsg_GetMetaData). */
static uint64_t reply_seq(const char *r) {
  if (!r || strncmp(r, "$JS.ACK.", 8) != 0) return 0;
  const char *tok[16];
  int n = 0;
  for (const char *p = r; n < 16;) {
    tok[n++] = p;
    p = strchr(p, '.');
    if (!p) break;
    p++;
  }
  int at = n == 9 ? 5 : n >= 11 ? 7 : -1;
  if (at < 0) return 0;
  uint64_t v = 0;
  const char *p = tok[at];
  if (*p < '0' || *p > '9') return 0;
  for (; *p >= '0' && *p <= '9'; p++) v = v * 10 + (uint64_t)(*p - '0');
  return *p == '.' ? v : 0;
}

static int src_run(weir_ctx *ctx, uint32_t budget) {
  nsrc *s = weir_ctx_user(ctx);
  const weir__nats_url *u = weir_ctx_arg(ctx);
  if (!s || s->done || weir_ctx_stopping(ctx)) return WEIR_SOURCE_DONE;
  if (!s->started) {
    int rc = src_start(ctx, s);
    if (rc < 0) return rc;
    s->started = 1;
    if (s->done) return WEIR_SOURCE_DONE;
  }
  uint64_t n = budget ? budget : 1;
  if (u->rate) {
    uint64_t now = weir_clock_mono_ns();
    if (!s->t0) s->t0 = now;
    uint64_t due = (uint64_t)((double)(now - s->t0) * 1e-9 * (double)u->rate) + 1;
    if (due <= s->emitted) {
      weir_ctx_wake_after(ctx, 1000);
      return WEIR_SOURCE_IDLE;
    }
    if (due - s->emitted < n) n = due - s->emitted;
  }
  uint32_t maxrec = weir_ctx_max_record(ctx);
  for (uint64_t k = 0; k < n; k++) {
    natsMsg *m = NULL;
    natsStatus st = natsSubscription_NextMsg(&m, s->sub, 0);
    if (st == NATS_TIMEOUT) {
      int rc = check_idle(ctx, s);
      if (rc < 0) return rc;
      weir_ctx_wake_after(ctx, 2000);
      return WEIR_SOURCE_IDLE;
    }
    if (st != NATS_OK)
      return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: %s", weir_ctx_name(ctx), u->spec,
                           weir__nats_errtext(st));
    uint64_t seq = reply_seq(natsMsg_GetReply(m));
    if (!seq) {
      jsMsgMetaData *meta = NULL;
      st = natsMsg_GetMetaData(&meta, m);
      if (st != NATS_OK) { /* not a stream message (should not happen): ignore it */
        natsMsg_Destroy(m);
        continue;
      }
      seq = meta->Sequence.Stream;
      jsMsgMetaData_Destroy(meta);
    }
    s->received++;
    s->idle_ms = 0;
    if (seq < s->next) { /* delivered again after the consumer restarted */
      natsMsg_Destroy(m);
      continue;
    }
    if (seq > s->end) {
      natsMsg_Destroy(m);
      s->done = 1;
      return WEIR_SOURCE_DONE;
    }
    int len = natsMsg_GetDataLength(m);
    const char *body = natsMsg_GetData(m);
    if ((uint32_t)len > maxrec) {
      natsMsg_Destroy(m);
      return weir_ctx_fail(ctx, WEIR_ETOOBIG,
                           "source '%s': %s: message %llu has %d bytes, over the maximum record "
                           "size of %u",
                           weir_ctx_name(ctx), u->spec, (unsigned long long)seq, len, maxrec);
    }
    weir_record r = {.key = body_key(body, len),
                     .ts = (int64_t)seq,
                     .id = weir_source_record_id(ctx, 0, seq),
                     .payload = len ? body : NULL,
                     .len = (uint32_t)len};
    int rc = weir_emit_record(ctx, &r);
    natsMsg_Destroy(m);
    if (rc < 0) return rc;
    s->next = seq + 1;
    s->emitted++;
    if (seq == s->end) {
      s->done = 1;
      return WEIR_SOURCE_DONE;
    }
  }
  return WEIR_SOURCE_MORE;
}

#endif

static const weir_source_vt nats_source_vt = {
    .size = sizeof(weir_source_vt),
    .name = "nats",
    .open = src_open,
    .run = src_run,
    .close = src_close,
    .snapshot = src_snapshot,
    .restore = src_restore,
    .rescalable = 1,
};

weir_stream *weir_nats_source(weir_job *job, const char *name, const char *url) {
  if (!job) return NULL;
  char err[512];
  if (weir_nats_source_check(url, err, sizeof err) < 0) {
    weir_job_fail(job, WEIR_ESINK, "%s", err);
    return NULL;
  }
  weir__nats_url *u = weir_calloc(1, sizeof *u);
  (void)weir__nats_url_parse(url, 1, u, err, sizeof err);
  if (weir_job_adopt(job, u, url_free) < 0) return NULL;
  return weir_source(job, name, &nats_source_vt, u, 1);
}
