/* nats_stage_source.c: owns the input side of a stage edge
 * (nats://HOST:PORT/SUBJECT?tasks=N as a source): reading the batches sent
 * to each task, applying each exactly once whatever the stream holds twice,
 * its positions and per-producer high-water marks in checkpoints.
 * docs/scale-out.md §2; the format is nats_stage.h's.
 *
 * DESIGN. Task j (0..N-1) is read by subtask j mod P, through one ordered
 * consumer filtered on SUBJECT.*.j, in stream order. Every producer (the
 * sink subtask `from` of the producing job) publishes its batches to j in
 * order: epochs ascending, indexes 0, 1, ... within an epoch. So for each
 * producer the task keeps the last batch it applied (epoch, index), and a
 * batch is
 *   - a duplicate when it is at or below that mark (a producer's replay
 *     after its crash, beyond JetStream's duplicate window, or the
 *     consumer's own re-reading after a restore): skipped;
 *   - the next one when it is index 0 of a later epoch or index + 1 of the
 *     same epoch: applied, and then any held batch that now follows;
 *   - ahead of a gap otherwise (a batch of an epoch was lost, e.g. in a
 *     connection that broke, and later ones were stored; the producer
 *     publishes the whole epoch again, and JetStream keeps the missing one
 *     only): held in memory until the gap closes.
 * The deduplication is this task's own checkpoint, not the duplicate
 * window, which is then only a second line of defence: a replay after any
 * outage is absorbed. A checkpoint records per task the sequence to read
 * from (the smallest held batch's, else the next) and per producer the
 * mark; held batches are read again after a restore.
 *
 * The task ends when every producer sent its END batch (each says how many
 * producers there are) and nothing is held.
 *
 * Retention. Once a checkpoint completed, nothing before the positions it
 * holds is read again by a restore of the latest checkpoint, so the task
 * purges its subjects up to there (SUBJECT.*.t below the sequence), after
 * writing that sequence to SUBJECT.t.purged (the last message only is
 * kept; the marker goes first, so a crash between the two over-states the
 * purge, never under-states it). A start that would read below the marker
 * (a restore of an older checkpoint or savepoint, or a fresh start of a
 * job on an edge another run consumed) is refused with WEIR_ERETENTION
 * instead of missing batches. The stream's own limits (age, size) would
 * remove batches nobody read, which no reader can tell from the purges of
 * other tasks: a stage edge's stream should have none (the stream weir
 * makes has none).
 *
 * Positions (rescalable: they depend on the task, not on the subtask):
 * split (j << 16 | 0xFFFF) = the sequence to read from, (j << 16 | 0xFFFE)
 * = the producers recorded, (j << 16 | 0xFFFD) = the producers announced by
 * END (0: none yet), and for producer f, (j << 16 | 2f) = its mark's epoch
 * + 1 (0: nothing applied) and (j << 16 | 2f + 1) = its index, with bit 63
 * set once it ended.
 *
 * Threads: every callback on the subtask's thread; libnats's own threads
 * fill the subscriptions' queues.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nats_impl.h"
#include "nats_stage.h"
#include "base/alloc.h"
#include "base/failpoint.h"
#include "base/clock.h"
#include "base/log.h"

#define MAX_PRODUCERS 0x7FF0u
#define MAX_HELD 1024u /* batches held per task before the job fails */
#define SNAPS 8        /* checkpoints awaited at once, with their positions */
#define SPLIT(j, x) ((uint32_t)(j) << 16 | (uint32_t)(x))
#define ENDED (1ull << 63)

#ifdef WEIR_HAVE_NATS

typedef struct mark {
  uint64_t epoch1; /* the last applied batch's epoch + 1; 0: none */
  uint32_t index;
  int ended;
  uint32_t split; /* its watermark split (weir_source_split), once named */
  int named;
} mark;

typedef struct held {
  uint64_t seq;
  natsMsg *m;
  weir__stage_batch b;
} held;

/* One task this subtask reads. */
typedef struct stask {
  uint32_t index;
  natsSubscription *sub;
  uint64_t next; /* the next sequence to read; 0: from the stream's first */
  mark *marks;   /* per producer */
  uint32_t nmarks;
  uint32_t producers; /* announced by END batches; 0: not yet */
  uint32_t nended;
  held *held;
  uint32_t nheld;
  uint64_t purged; /* the sequence below which its subjects were purged */
  uint32_t hold;   /* the watermark split that holds event time until the first batch */
  int producers_named;
  int restored, done;
} stask;

/* The positions a snapshot wrote, until its checkpoint completes. */
typedef struct snap {
  uint64_t id;
  uint64_t *from; /* per task of the subtask */
} snap;

typedef struct ssrc {
  natsConnection *nc;
  jsCtx *js;
  stask *t; /* the tasks j with j mod P == subtask */
  uint32_t nt, live, cur;
  int started;
  uint32_t nsplits;  /* watermark splits named so far (dense) */
  snap snaps[SNAPS]; /* a ring, by checkpoint id */
} ssrc;

static mark *mark_of(stask *t, uint32_t from) {
  if (from >= t->nmarks) {
    uint32_t n = from + 1;
    t->marks = weir_realloc(t->marks, n * sizeof *t->marks);
    memset(t->marks + t->nmarks, 0, (n - t->nmarks) * sizeof *t->marks);
    t->nmarks = n;
  }
  return &t->marks[from];
}

static int st_open(weir_ctx *ctx) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  uint32_t k = weir_ctx_subtask(ctx), p = weir_ctx_parallelism(ctx);
  if (k >= u->tasks) return 0; /* more subtasks than tasks: this one reads nothing */
  ssrc *s = weir_calloc(1, sizeof *s);
  weir_ctx_set_user(ctx, s);
  s->nt = (u->tasks - k + p - 1) / p;
  s->t = weir_calloc(s->nt, sizeof *s->t);
  for (uint32_t i = 0; i < s->nt; i++) s->t[i].index = k + i * p;
  for (int i = 0; i < SNAPS; i++) s->snaps[i].from = weir_calloc(s->nt, sizeof(uint64_t));
  s->live = s->nt;
  char err[512];
  if (weir__nats_connect(u, NULL, &s->nc, &s->js, err, sizeof err) < 0)
    return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s", weir_ctx_name(ctx), err);
  return 0;
}

static void task_free(stask *t) {
  for (uint32_t i = 0; i < t->nheld; i++) natsMsg_Destroy(t->held[i].m);
  weir_free(t->held);
  t->held = NULL;
  t->nheld = 0;
  natsSubscription_Destroy(t->sub);
  t->sub = NULL;
}

static void st_close(weir_ctx *ctx) {
  ssrc *s = weir_ctx_user(ctx);
  if (!s) return;
  for (uint32_t i = 0; i < s->nt; i++) {
    task_free(&s->t[i]);
    weir_free(s->t[i].marks);
  }
  weir_free(s->t);
  for (int i = 0; i < SNAPS; i++) weir_free(s->snaps[i].from);
  weir__nats_disconnect(s->nc, s->js);
  weir_free(s);
  weir_ctx_set_user(ctx, NULL);
}

static int st_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  ssrc *s = weir_ctx_user(ctx);
  if (!s) return 0;
  snap *sn = &s->snaps[id % SNAPS];
  sn->id = id;
  for (uint32_t i = 0; i < s->nt; i++) {
    const stask *t = &s->t[i];
    uint32_t j = t->index;
    uint64_t from = t->next;
    for (uint32_t h = 0; h < t->nheld; h++)
      if (t->held[h].seq < from) from = t->held[h].seq;
    sn->from[i] = s->started ? from : 0; /* 0: nothing read, nothing to purge */
    int rc = weir_snapshot_position(w, SPLIT(j, 0xFFFF), from);
    if (rc == 0) rc = weir_snapshot_position(w, SPLIT(j, 0xFFFE), t->nmarks);
    if (rc == 0) rc = weir_snapshot_position(w, SPLIT(j, 0xFFFD), t->producers);
    for (uint32_t f = 0; f < t->nmarks && rc == 0; f++) {
      const mark *m = &t->marks[f];
      rc = weir_snapshot_position(w, SPLIT(j, 2 * f), m->epoch1);
      if (rc == 0)
        rc = weir_snapshot_position(w, SPLIT(j, 2 * f + 1), m->index | (m->ended ? ENDED : 0));
    }
    if (rc < 0) return rc;
  }
  return 0;
}

static int st_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  ssrc *s = weir_ctx_user(ctx);
  if (!s) return 0;
  for (uint32_t i = 0; i < s->nt; i++) {
    stask *t = &s->t[i];
    uint32_t j = t->index;
    uint64_t next = 0, n = 0, producers = 0;
    if (!weir_snapshot_get_position(r, SPLIT(j, 0xFFFF), &next)) continue; /* not started */
    (void)weir_snapshot_get_position(r, SPLIT(j, 0xFFFE), &n);
    (void)weir_snapshot_get_position(r, SPLIT(j, 0xFFFD), &producers);
    if (n > MAX_PRODUCERS || producers > MAX_PRODUCERS)
      return weir_ctx_fail(ctx, WEIR_ECORRUPT, "source '%s': task %u: malformed positions",
                           weir_ctx_name(ctx), j);
    t->next = next;
    t->restored = 1;
    t->producers = (uint32_t)producers;
    for (uint32_t f = 0; f < n; f++) {
      uint64_t e1 = 0, ix = 0;
      (void)weir_snapshot_get_position(r, SPLIT(j, 2 * f), &e1);
      (void)weir_snapshot_get_position(r, SPLIT(j, 2 * f + 1), &ix);
      mark *m = mark_of(t, f);
      m->epoch1 = e1;
      m->index = (uint32_t)(ix & 0xFFFFFFFFu);
      m->ended = (ix & ENDED) != 0;
      t->nended += (uint32_t)m->ended;
    }
  }
  return 0;
}

/* The stream of the edge, made if missing (the producer or the consumer
 * may start first; the producer's sink makes it alike). Returns its first
 * sequence (>= 1) in *first, or the job's error. */
static int stream_ready(weir_ctx *ctx, ssrc *s, uint64_t *first) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus st = js_GetStreamInfo(&si, s->js, u->stream, NULL, &jerr);
  if (st != NATS_OK && (st == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)) {
    char wide[512];
    snprintf(wide, sizeof wide, "%s.>", u->subject);
    st = weir__nats_add_stream(s->js, u, wide, &si, &jerr);
    if (st != NATS_OK) { /* made by another meanwhile? */
      jerr = 0;
      st = js_GetStreamInfo(&si, s->js, u->stream, NULL, &jerr);
    }
  }
  if (st != NATS_OK)
    return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: stream %s: %s", weir_ctx_name(ctx),
                         u->spec, u->stream, weir__nats_errtext(st));
  *first = si->State.FirstSeq ? si->State.FirstSeq : 1;
  jsStreamInfo_Destroy(si);
  return 0;
}

/* t->purged from the marker SUBJECT.<t>.purged (0 if there is none).
 * Returns 0 or the job's error. */
static int read_marker(weir_ctx *ctx, ssrc *s, stask *t) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  char subj[512];
  snprintf(subj, sizeof subj, "%s.%u.purged", u->subject, t->index);
  natsMsg *m = NULL;
  jsErrCode jerr = 0;
  natsStatus st = js_GetLastMsg(&m, s->js, u->stream, subj, NULL, &jerr);
  if (st == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr) return 0;
  if (st != NATS_OK)
    return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: %s: %s", weir_ctx_name(ctx), u->spec,
                         subj, weir__nats_errtext(st));
  char buf[32];
  int n = natsMsg_GetDataLength(m);
  if (n <= 0 || n >= (int)sizeof buf) n = 0;
  memcpy(buf, natsMsg_GetData(m), (size_t)n);
  buf[n] = '\0';
  natsMsg_Destroy(m);
  char *end = NULL;
  t->purged = strtoull(buf, &end, 10);
  if (!n || !end || *end)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "source '%s': %s: %s holds no sequence",
                         weir_ctx_name(ctx), u->spec, subj);
  return 0;
}

/* Purges task t's subjects below `seq`, the marker first. A purge that
 * fails (a request unanswered while the stream's replicas elect a leader)
 * is not the job's end: it is logged and tried again at the next completed
 * checkpoint; the batches stay a while longer, and a marker written ahead
 * only over-states the purge. Returns 0. */
static int purge_below(weir_ctx *ctx, ssrc *s, stask *t, uint64_t seq) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  char marker[512], data[512], body[32];
  snprintf(marker, sizeof marker, "%s.%u.purged", u->subject, t->index);
  snprintf(data, sizeof data, "%s.*.%u", u->subject, t->index);
  int n = snprintf(body, sizeof body, "%llu", (unsigned long long)seq);
  jsPubAck *pa = NULL;
  jsErrCode jerr = 0;
  natsStatus st = js_Publish(&pa, s->js, marker, body, n, NULL, &jerr);
  jsPubAck_Destroy(pa);
  jsOptions o;
  for (int k = 0; k < 2 && st == NATS_OK; k++) {
    jsOptions_Init(&o);
    o.Stream.Purge.Subject = k ? marker : data;
    if (k)
      o.Stream.Purge.Keep = 1;
    else
      o.Stream.Purge.Sequence = seq;
    jerr = 0;
    st = js_PurgeStream(s->js, u->stream, &o, &jerr);
  }
  if (st != NATS_OK) {
    WEIR_LOG_W("source '%s': %s: purging %s below sequence %llu failed (%s): tried again at the "
               "next checkpoint",
               weir_ctx_name(ctx), u->spec, data, (unsigned long long)seq, weir__nats_errtext(st));
    return 0;
  }
  t->purged = seq;
  return 0;
}

static int st_checkpoint_complete(weir_ctx *ctx, uint64_t id) {
  ssrc *s = weir_ctx_user(ctx);
  if (!s || !s->started) return 0;
  const snap *sn = NULL;
  for (int i = 0; i < SNAPS; i++)
    if (s->snaps[i].id && s->snaps[i].id <= id && (!sn || s->snaps[i].id > sn->id))
      sn = &s->snaps[i];
  if (!sn) return 0;
  for (uint32_t i = 0; i < s->nt; i++) {
    stask *t = &s->t[i];
    if (sn->from[i] > t->purged && sn->from[i] > 1) {
      int rc = purge_below(ctx, s, t, sn->from[i]);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

static int st_start(weir_ctx *ctx, ssrc *s) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  const char *name = weir_ctx_name(ctx);
  uint64_t first = 1;
  int rc = stream_ready(ctx, s, &first);
  if (rc < 0) return rc;
  for (uint32_t i = 0; i < s->nt; i++) {
    stask *t = &s->t[i];
    /* The stream's first sequence says nothing here: the other tasks purge
     * their subjects up to their own positions. The marker does. */
    rc = read_marker(ctx, s, t);
    if (rc < 0) return rc;
    if (t->purged && t->restored && t->next < t->purged)
      return weir_ctx_fail(ctx, WEIR_ERETENTION,
                           "source '%s': %s: task %u's batches below sequence %llu were purged "
                           "once a later checkpoint completed, and this checkpoint resumes it at "
                           "%llu: it would miss them. Restore the latest checkpoint",
                           name, u->spec, t->index, (unsigned long long)t->purged,
                           (unsigned long long)t->next);
    if (t->purged && !t->restored)
      return weir_ctx_fail(ctx, WEIR_ERETENTION,
                           "source '%s': %s: task %u's batches below sequence %llu were purged "
                           "by an earlier job that read them, and this run starts from the "
                           "beginning: it would miss them. Restore that job's latest "
                           "checkpoint, or give a new run of both sides another stream or "
                           "subject",
                           name, u->spec, t->index, (unsigned long long)t->purged);
    if (!t->next) t->next = first;
    if (t->producers && t->nended == t->producers) { /* ended at the cut */
      t->done = 1;
      s->live--;
      continue;
    }
    t->hold = s->nsplits++;
    weir_source_split(ctx, t->hold);
    char subj[512];
    snprintf(subj, sizeof subj, "%s.*.%u", u->subject, t->index);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = u->stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = t->next;
    jsErrCode jerr = 0;
    natsStatus st = js_SubscribeSync(&t->sub, s->js, subj, NULL, &so, &jerr);
    if (st != NATS_OK)
      return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: cannot subscribe to %s: %s", name,
                           u->spec, subj, weir__nats_errtext(st));
    natsSubscription_SetPendingLimits(t->sub, -1, -1);
    WEIR_LOG_I("source '%s': %s: task %u of %u reads %s of stream %s from sequence %llu", name,
               u->spec, t->index, u->tasks, subj, u->stream, (unsigned long long)t->next);
  }
  return 0;
}

/* The stream sequence of m, or 0 if it is not a stream message. */
static uint64_t msg_seq(natsMsg *m) {
  jsMsgMetaData *meta = NULL;
  if (natsMsg_GetMetaData(&meta, m) != NATS_OK) return 0;
  uint64_t seq = meta->Sequence.Stream;
  jsMsgMetaData_Destroy(meta);
  return seq;
}

/* -1: at or below the mark (a duplicate); 0: the next one; 1: ahead of a
 * gap. */
static int place(const mark *m, const weir__stage_batch *b) {
  if (!m->epoch1) return b->index == 0 ? 0 : 1;
  uint64_t e = m->epoch1 - 1;
  if (b->epoch < e || (b->epoch == e && b->index <= m->index)) return -1;
  if (b->epoch == e) return b->index == m->index + 1 ? 0 : 1;
  return b->index == 0 ? 0 : 1;
}

/* Names producer m's watermark split (no-op without a strategy). */
static void name_split(weir_ctx *ctx, ssrc *s, mark *m) {
  if (m->named) return;
  m->named = 1;
  m->split = s->nsplits++;
  weir_source_split(ctx, m->split);
  if (m->ended) weir_source_split_end(ctx, m->split);
}

/* Emits b's records and moves the producer's mark. Event time: each
 * producer is a watermark split of its own (its batches come in its
 * order), all of them named at the task's first batch, which says how
 * many there are, so that a producer whose batches come later holds event
 * time back from the start; until then the task's `hold` split does. */
static int apply(weir_ctx *ctx, ssrc *s, stask *t, uint64_t seq, const weir__stage_batch *b) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  if (!t->producers_named) {
    t->producers_named = 1;
    for (uint32_t f = 0; f < b->producers; f++) name_split(ctx, s, mark_of(t, f));
    weir_source_split_end(ctx, t->hold);
  }
  mark *m = mark_of(t, b->from);
  name_split(ctx, s, m);
  weir_source_split(ctx, m->split);
  size_t off = WEIR__STAGE_HEADER;
  weir_record r;
  int rc;
  for (uint32_t i = 0; (rc = weir__stage_batch_next(b, &off, &r)) == 1; i++) {
    r.id = weir_source_record_id(ctx, t->index, seq << 12 | (i & 0xFFFu));
    rc = weir_emit_record(ctx, &r);
    if (rc < 0) return rc;
  }
  if (rc < 0)
    return weir_ctx_fail(ctx, WEIR_ECORRUPT, "source '%s': %s: batch at sequence %llu is malformed",
                         weir_ctx_name(ctx), u->spec, (unsigned long long)seq);
  m->epoch1 = b->epoch + 1;
  m->index = b->index;
  if (b->flags & WEIR__STAGE_END) {
    if (t->producers && t->producers != b->producers)
      return weir_ctx_fail(ctx, WEIR_ECORRUPT,
                           "source '%s': %s: producers announce both %u and %u producers for "
                           "task %u",
                           weir_ctx_name(ctx), u->spec, t->producers, b->producers, t->index);
    t->producers = b->producers;
    if (!m->ended) t->nended++;
    m->ended = 1;
    weir_source_split_end(ctx, m->split);
  }
  return 0;
}

/* Applies the held batches that now follow their producer's mark. */
static int drain_held(weir_ctx *ctx, ssrc *s, stask *t) {
  for (int again = 1; again;) {
    again = 0;
    for (uint32_t h = 0; h < t->nheld; h++) {
      held *x = &t->held[h];
      int p = place(mark_of(t, x->b.from), &x->b);
      if (p > 0) continue;
      int rc = p == 0 ? apply(ctx, s, t, x->seq, &x->b) : 0;
      natsMsg_Destroy(x->m);
      t->held[h] = t->held[--t->nheld];
      if (rc < 0) return rc;
      again = 1;
      break;
    }
  }
  return 0;
}

/* Takes one message of task t if there is one: 1, 0 if none, or the job's
 * error. */
static int take_one(weir_ctx *ctx, ssrc *s, stask *t) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  natsMsg *m = NULL;
  natsStatus st = natsSubscription_NextMsg(&m, t->sub, 0);
  if (st == NATS_TIMEOUT) return 0;
  if (st != NATS_OK)
    return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: task %u: %s", weir_ctx_name(ctx), u->spec,
                         t->index, weir__nats_errtext(st));
  uint64_t seq = msg_seq(m);
  if (!seq || seq < t->next) { /* not a stream message; or again after a restart */
    natsMsg_Destroy(m);
    return 1;
  }
  t->next = seq + 1;
  weir__stage_batch b;
  int len = natsMsg_GetDataLength(m);
  if (weir__stage_batch_parse((const uint8_t *)natsMsg_GetData(m), (size_t)len, &b) < 0 ||
      b.producers > MAX_PRODUCERS) {
    natsMsg_Destroy(m);
    return weir_ctx_fail(ctx, WEIR_ECORRUPT,
                         "source '%s': %s: the message at sequence %llu of stream %s is not a "
                         "stage batch (is another producer publishing to %s.*.%u?)",
                         weir_ctx_name(ctx), u->spec, (unsigned long long)seq, u->stream,
                         u->subject, t->index);
  }
  if (b.tasks != u->tasks) {
    natsMsg_Destroy(m);
    return weir_ctx_fail(ctx, WEIR_EMISMATCH,
                         "source '%s': %s: producer %u sends to tasks=%u, this source reads "
                         "tasks=%u: give both sides of the edge the same tasks=",
                         weir_ctx_name(ctx), u->spec, b.from, b.tasks, u->tasks);
  }
  int p = place(mark_of(t, b.from), &b);
  int rc = 0;
  if (p < 0) {
    /* The tests' negative control: a duplicate applied as if it were new
     * (the mark stays where it was). */
    if (weir_failpoint("stage.apply_duplicates") == WEIR_EIO) {
      mark *k = mark_of(t, b.from), was = *k;
      rc = apply(ctx, s, t, seq, &b);
      *k = was;
    }
    natsMsg_Destroy(m);
  } else if (p == 0) {
    rc = apply(ctx, s, t, seq, &b);
    natsMsg_Destroy(m);
    if (rc == 0 && t->nheld) rc = drain_held(ctx, s, t);
  } else {
    if (t->nheld == MAX_HELD) {
      natsMsg_Destroy(m);
      return weir_ctx_fail(ctx, WEIR_ESTATE,
                           "source '%s': %s: task %u holds %u batches after a gap in producer "
                           "%u's batches that has not closed (a producer's batches lost and "
                           "never published again?)",
                           weir_ctx_name(ctx), u->spec, t->index, MAX_HELD, b.from);
    }
    if (t->nheld % 16 == 0) t->held = weir_realloc(t->held, (t->nheld + 16) * sizeof *t->held);
    t->held[t->nheld++] = (held){.seq = seq, .m = m, .b = b};
  }
  if (rc < 0) return rc;
  if (t->producers && t->nended == t->producers && !t->nheld) {
    t->done = 1;
    s->live--;
    task_free(t);
    WEIR_LOG_I("source '%s': task %u: every one of %u producers ended", weir_ctx_name(ctx),
               t->index, t->producers);
  }
  return 1;
}

static int st_run(weir_ctx *ctx, uint32_t budget) {
  ssrc *s = weir_ctx_user(ctx);
  if (!s || weir_ctx_stopping(ctx)) return WEIR_SOURCE_DONE;
  if (!s->started) {
    int rc = st_start(ctx, s);
    if (rc < 0) return rc;
    s->started = 1;
  }
  /* Batches of up to 4096 records: a few per run. */
  uint32_t n = budget / 1024 + 1, idle = 0;
  for (uint32_t k = 0; k < n && s->live;) {
    if (s->cur >= s->nt) s->cur = 0;
    stask *t = &s->t[s->cur++];
    if (t->done) continue;
    int rc = take_one(ctx, s, t);
    if (rc < 0) return rc;
    if (rc) {
      k++;
      idle = 0;
    } else if (++idle >= s->live) {
      weir_ctx_wake_after(ctx, 2000);
      return WEIR_SOURCE_IDLE;
    }
  }
  return s->live ? WEIR_SOURCE_MORE : WEIR_SOURCE_DONE;
}

#else

static int st_open(weir_ctx *ctx) {
  return weir_ctx_fail(ctx, WEIR_ESINK, "this weir was built without libnats");
}
static int st_run(weir_ctx *ctx, uint32_t budget) {
  (void)ctx;
  (void)budget;
  return WEIR_ESINK;
}
static void st_close(weir_ctx *ctx) {
  (void)ctx;
}
static int st_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)ctx;
  (void)id;
  (void)w;
  return 0;
}
static int st_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  (void)ctx;
  (void)r;
  return 0;
}
static int st_checkpoint_complete(weir_ctx *ctx, uint64_t id) {
  (void)ctx;
  (void)id;
  return 0;
}

#endif

static const weir_source_vt stage_source_vt = {
    .size = sizeof(weir_source_vt),
    .name = "nats-stage",
    .open = st_open,
    .run = st_run,
    .close = st_close,
    .snapshot = st_snapshot,
    .restore = st_restore,
    .rescalable = 1,
    .checkpoint_complete = st_checkpoint_complete,
};

weir_stream *weir__nats_stage_source(weir_job *job, const char *name, weir__nats_url *u,
                                     int parallelism) {
  return weir_source(job, name, &stage_source_vt, u, parallelism);
}
