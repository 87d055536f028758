/* nats_source.c: owns the NATS JetStream source (weir/nats.h): reading the
 * subjects of a stream in sequence order through ordered consumers, split
 * over subtasks, its positions (stream sequences per split) in
 * checkpoints, and the refusal to resume from a position the stream no
 * longer holds.
 *
 * DESIGN. Splits. A JetStream consumer (nats-server 2.9, libnats 3.4)
 * filters on one subject, wildcard or not, and delivers in stream order;
 * several filter subjects per consumer need newer servers. So a split is a
 * set of subjects whose consumers weir merges: with splits=1 (the default)
 * the split is the URL's subject with one consumer, as a single subject
 * always was; with splits=N and a wildcard subject, the concrete subjects
 * the stream holds under it (the stream info's subject list) are spread
 * over N splits by a hash of their names, one consumer per subject. The
 * split of a subject is a function of its name and N alone, so every
 * subtask finds its own subjects at its first run without asking the
 * others, a subject that appears later lands in the same split in every
 * run, and a checkpoint needs no list of names: a split's position is two
 * sequences. Sequence ranges would need no discovery but make every
 * subtask read (and drop) the whole stream; one split per subject in a
 * list fixed at the first start would need that list in the checkpoint,
 * which holds only numbers, and agreement between subtasks that start at
 * different times. The price of the hash is balance: a few subjects over
 * N splits are spread unevenly, hence N well above the parallelism.
 *
 * Subtask k of P owns the splits j with j mod P == k; a split's position
 * does not depend on its owner, so the source is rescalable. Split j's
 * position is next (3j: the next sequence to read), end (3j + 1: the last,
 * fixed when the split first starts: the last message of its subjects
 * then, so that every run and restore reads the same messages) and N
 * (3j + 2, so that another splits= is refused). With one split these are
 * positions 0 and 1 as before, and a checkpoint without 2 restores as one
 * split. Messages published after a split's end was fixed have larger
 * sequences, so a subject that appeared since (found at a restore) has
 * nothing the split reads.
 *
 * Within a split the consumers are merged in sequence order: a consumer
 * holds at most one message taken from libnats (its head), and the
 * smallest head is emitted only when every consumer not done has one, so
 * `next` stays a cut (everything of the split below it emitted, nothing
 * above). A consumer is done after its `stop` (its subject's last message
 * when it subscribed, at most end) or at a message past end. Splits are
 * read in turn, one message each; a split waiting for a head is passed
 * over; when all wait, run() returns WEIR_SOURCE_IDLE, to be called again
 * 2 ms later, so the worker never waits on the network (connecting and
 * subscribing, once, bounded by 2 s and 5 s timeouts, do block it). With a
 * watermark strategy each split has its own watermark (weir_source_split):
 * sequences grow within a split, so a split restored behind another is not
 * made late by it.
 *
 *   open --first run--> CHECKED --subscribed--> READING --every split at end--> DONE
 *                        \--first_seq > next, or end gone (restored)--> failed (ERETENTION)
 *
 * A message with a sequence below the split's `next` (a consumer
 * restarting after a gap) is dropped. While nothing comes, the stream's
 * state is checked once a second: messages still to read that were
 * removed meanwhile (purge, retention, a deleted stream) stop the job
 * (WEIR_ERETENTION) instead of leaving it waiting. Messages removed while
 * others keep coming are not noticed (a consumer moves on to the next one
 * the stream holds). Record ids come from (split 0, sequence) whatever the
 * split: a sequence names one message of the stream.
 *
 * Threads: every callback on the subtask's thread; libnats's own threads
 * fill the subscriptions' queues.
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

/* One consumer of a split: an ordered consumer filtered on one subject
 * (the URL's subject with one split, else one concrete subject). */
typedef struct nsub {
  char *subject;
  natsSubscription *sub;
  natsMsg *head;     /* the next message, taken from libnats and not yet emitted */
  uint64_t head_seq; /* its stream sequence */
  uint64_t stop;     /* done once a message at or above this is emitted */
  int done;
} nsub;

/* A split this subtask owns; its position is (next, end). */
typedef struct nsplit {
  uint32_t index;
  uint64_t next;     /* the next sequence to read; 0 = from the stream's first */
  uint64_t end;      /* the last sequence to read */
  int have_end;      /* end is known (restored or computed) */
  int restored;      /* next came from a checkpoint */
  int done;          /* read through end */
  uint64_t last_now; /* the last message of its subjects when it started */
  nsub *subs;        /* its consumers */
  uint32_t nsubs;
} nsplit;

/* One subtask's reader; owned by the subtask's thread. */
typedef struct nsrc {
  natsConnection *nc;
  jsCtx *js;
  nsplit *sp; /* the splits j with j mod P == subtask, in order of j */
  uint32_t nsp;
  uint32_t live;     /* splits not done */
  uint32_t cur;      /* the split to read from next (round robin) */
  uint64_t rate;     /* this subtask's share of rate=, messages/s; 0 = unlimited */
  int started;       /* checked and subscribed */
  int done;          /* every split read through its end */
  uint64_t t0;       /* monotonic ns of the first message (rate) */
  uint64_t emitted;  /* since t0 */
  uint64_t received; /* messages taken from libnats */
  uint64_t idle_ms;  /* wall ms since nothing came (0: something did), for check_idle */
} nsrc;

static void split_free(nsplit *sp) {
  for (uint32_t i = 0; i < sp->nsubs; i++) {
    natsMsg_Destroy(sp->subs[i].head);
    natsSubscription_Destroy(sp->subs[i].sub);
    weir_free(sp->subs[i].subject);
  }
  weir_free(sp->subs);
  sp->subs = NULL;
  sp->nsubs = 0;
}

static int src_open(weir_ctx *ctx) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  uint32_t k = weir_ctx_subtask(ctx), p = weir_ctx_parallelism(ctx);
  if (k >= u->splits) return 0; /* more subtasks than splits: this one reads nothing */
  nsrc *s = weir_calloc(1, sizeof *s);
  weir_ctx_set_user(ctx, s);
  s->nsp = (u->splits - k + p - 1) / p;
  s->sp = weir_calloc(s->nsp, sizeof *s->sp);
  for (uint32_t i = 0; i < s->nsp; i++) s->sp[i].index = k + i * p;
  s->live = s->nsp;
  if (u->rate) { /* a share in proportion to the splits owned, at least 1/s */
    s->rate = u->rate * s->nsp / u->splits;
    if (!s->rate) s->rate = 1;
  }
  /* Every owned split holds event time back until it emits or ends. */
  for (uint32_t i = 0; i < s->nsp; i++) weir_source_split(ctx, s->sp[i].index);
  char err[512];
  if (weir__nats_connect(u, NULL, &s->nc, &s->js, err, sizeof err) < 0)
    return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s", weir_ctx_name(ctx), err);
  return 0;
}

static void src_close(weir_ctx *ctx) {
  nsrc *s = weir_ctx_user(ctx);
  if (!s) return;
  for (uint32_t i = 0; i < s->nsp; i++) split_free(&s->sp[i]);
  weir_free(s->sp);
  weir__nats_disconnect(s->nc, s->js);
  weir_free(s);
  weir_ctx_set_user(ctx, NULL);
}

/* Split j's position is at 3j (next), 3j + 1 (end) and 3j + 2 (the number
 * of splits, so that a restore with another splits= is refused). A
 * checkpoint without 3j + 2 comes from a weir that had one split. */
static int src_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  nsrc *s = weir_ctx_user(ctx);
  const weir__nats_url *u = weir_ctx_arg(ctx);
  if (!s) return 0;
  for (uint32_t i = 0; i < s->nsp; i++) {
    nsplit *sp = &s->sp[i];
    uint32_t j = sp->index;
    uint64_t next = 0, end = 0, n = 1;
    if (!weir_snapshot_get_position(r, 3 * j, &next) ||
        !weir_snapshot_get_position(r, 3 * j + 1, &end))
      continue; /* not started at the cut: starts from the beginning */
    (void)weir_snapshot_get_position(r, 3 * j + 2, &n);
    if (n != u->splits)
      return weir_ctx_fail(ctx, WEIR_ESTATE,
                           "source '%s': %s: the checkpoint was taken with splits=%llu, this job "
                           "has splits=%u (a split's position means nothing under another "
                           "number of splits): restore with splits=%llu",
                           weir_ctx_name(ctx), u->spec, (unsigned long long)n, u->splits,
                           (unsigned long long)n);
    sp->next = next;
    sp->end = end;
    sp->have_end = 1;
    sp->restored = 1;
  }
  return 0;
}

static int src_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  nsrc *s = weir_ctx_user(ctx);
  const weir__nats_url *u = weir_ctx_arg(ctx);
  if (!s) return 0;
  for (uint32_t i = 0; i < s->nsp; i++) {
    const nsplit *sp = &s->sp[i];
    if (!sp->have_end) continue; /* not started: a restore starts it from the beginning */
    uint32_t j = sp->index;
    int rc = weir_snapshot_position(w, 3 * j, sp->next);
    if (rc == 0) rc = weir_snapshot_position(w, 3 * j + 1, sp->end);
    if (rc == 0) rc = weir_snapshot_position(w, 3 * j + 2, u->splits);
    if (rc < 0) return rc;
  }
  return 0;
}

/* The split of a concrete subject: a hash of its name, so that every
 * subtask and every run agrees without asking anyone. */
static uint32_t subject_split(const char *subj, uint32_t splits) {
  return (uint32_t)(weir_hash_bytes(subj, strlen(subj)) % splits);
}

/* The sequence of the last message of `subj` in the stream into *last (0
 * if it has none). Returns NATS_OK, or the libnats status of a failure. */
static natsStatus last_seq(nsrc *s, const weir__nats_url *u, const char *subj, uint64_t *last) {
  natsMsg *m = NULL;
  jsErrCode jerr = 0;
  natsStatus st = js_GetLastMsg(&m, s->js, u->stream, subj, NULL, &jerr);
  *last = 0;
  if (st == NATS_OK) {
    *last = natsMsg_GetSequence(m);
    natsMsg_Destroy(m);
    return NATS_OK;
  }
  return st == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr ? NATS_OK : st;
}

static void sub_add(nsplit *sp, const char *subj, uint64_t stop) {
  sp->subs = weir_realloc(sp->subs, (sp->nsubs + 1) * sizeof *sp->subs);
  sp->subs[sp->nsubs++] = (nsub){.subject = weir_strdup(subj), .stop = stop};
}

/* Finds the consumers of each owned split: with one split, the URL's
 * subject; with several, the concrete subjects the stream holds under it
 * that hash to the split. A subject with nothing at or after the split's
 * position gets none. Fixes the end of a split that has none (the last
 * message of its subjects now). Returns 0 or the job's error. */
static int find_subjects(weir_ctx *ctx, nsrc *s, uint64_t first) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  const char *name = weir_ctx_name(ctx);
  jsStreamStateSubjects *list = NULL;
  jsStreamInfo *si = NULL;
  if (u->splits > 1) {
    jsOptions o;
    jsOptions_Init(&o);
    o.Stream.Info.SubjectsFilter = u->subject;
    jsErrCode jerr = 0;
    natsStatus st = js_GetStreamInfo(&si, s->js, u->stream, &o, &jerr);
    if (st != NATS_OK)
      return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: the subjects of stream %s: %s", name,
                           u->spec, u->stream, weir__nats_errtext(st));
    list = si->State.Subjects;
  }
  int rc = 0;
  for (uint32_t i = 0; i < s->nsp && rc == 0; i++) {
    nsplit *sp = &s->sp[i];
    uint32_t n = u->splits == 1 ? 1 : list ? (uint32_t)list->Count : 0;
    uint64_t end = 0;
    for (uint32_t k = 0; k < n; k++) {
      const char *subj = u->splits == 1 ? u->subject : list->List[k].Subject;
      if (u->splits > 1 && subject_split(subj, u->splits) != sp->index) continue;
      uint64_t last = 0;
      natsStatus st = last_seq(s, u, subj, &last);
      if (st != NATS_OK) {
        rc = weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: the last message of %s: %s", name,
                           u->spec, subj, weir__nats_errtext(st));
        break;
      }
      if (last > end) end = last;
      uint64_t from = sp->restored ? sp->next : first;
      uint64_t stop = sp->have_end && sp->end < last ? sp->end : last;
      if (last && stop >= from) sub_add(sp, subj, stop);
    }
    if (rc < 0) break;
    sp->last_now = end;
    if (!sp->have_end) {
      sp->end = end;
      sp->have_end = 1;
    }
  }
  jsStreamInfo_Destroy(si);
  return rc;
}

/* Reads the stream's state, fixes the ends, checks the positions,
 * subscribes. */
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
  if (!first) first = 1;
  int rc = find_subjects(ctx, s, first);
  if (rc < 0) return rc;
  for (uint32_t i = 0; i < s->nsp; i++) {
    nsplit *sp = &s->sp[i];
    if (!sp->restored) sp->next = first;
    if (sp->next > sp->end) {
      split_free(sp); /* read through at the cut: no consumer */
    } else if (sp->restored && first > sp->next) {
      return weir_ctx_fail(ctx, WEIR_ERETENTION,
                           "source '%s': %s: the checkpoint resumes split %u at sequence %llu, "
                           "which stream %s no longer holds (its first sequence is %llu, last "
                           "%llu: retention or a purge removed messages); refusing to skip them",
                           name, u->spec, sp->index, (unsigned long long)sp->next, u->stream,
                           (unsigned long long)first, (unsigned long long)last);
    } else if (sp->restored && sp->last_now < sp->end) {
      /* The message at `end` is one of the split's and was not read yet. */
      return weir_ctx_fail(ctx, WEIR_ERETENTION,
                           "source '%s': %s: the job reads split %u of %s up to sequence %llu, "
                           "but its last message in stream %s is now %llu (messages were removed "
                           "while the job read it); refusing to end without them",
                           name, u->spec, sp->index, u->subject, (unsigned long long)sp->end,
                           u->stream, (unsigned long long)sp->last_now);
    }
    if (sp->nsubs) /* a split with no subject (hashed elsewhere) says nothing */
      WEIR_LOG_I("source '%s': %s: split %u of %u reads %u subject(s) of stream %s from sequence "
                 "%llu up to %llu",
                 name, u->spec, sp->index, u->splits, sp->nsubs, u->stream,
                 (unsigned long long)sp->next, (unsigned long long)sp->end);
    for (uint32_t k = 0; k < sp->nsubs; k++) {
      nsub *c = &sp->subs[k];
      jsSubOptions so;
      jsSubOptions_Init(&so);
      so.Stream = u->stream;
      so.Ordered = true;
      so.Config.DeliverPolicy = js_DeliverByStartSequence;
      so.Config.OptStartSeq = sp->next;
      jerr = 0;
      st = js_SubscribeSync(&c->sub, s->js, c->subject, NULL, &so, &jerr);
      if (st != NATS_OK)
        return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: cannot subscribe to %s: %s", name,
                             u->spec, c->subject, weir__nats_errtext(st));
      natsSubscription_SetPendingLimits(c->sub, -1, -1);
    }
    if (!sp->nsubs) {
      sp->done = 1;
      s->live--;
      weir_source_split_end(ctx, sp->index);
    }
  }
  if (!s->live) s->done = 1;
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

/* Nothing has come for a while although a split's end is not reached: the
 * messages still to read may have been removed (a purge, retention, the
 * stream deleted) while the job was reading, and would never come.
 * Checked at most once a second while idle (a round trip to the server,
 * and one per consumer still waiting). Returns 0 or the job's error. */
static int check_idle(weir_ctx *ctx, nsrc *s) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  const char *name = weir_ctx_name(ctx);
  uint64_t now = (uint64_t)weir_clock_wall_ms();
  if (!s->idle_ms) s->idle_ms = now;
  if (now - s->idle_ms < 1000) return 0;
  s->idle_ms = now;
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus st = js_GetStreamInfo(&si, s->js, u->stream, NULL, &jerr);
  if (st == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
    return weir_ctx_fail(ctx, WEIR_ERETENTION,
                         "source '%s': %s: stream %s was deleted while the job read it", name,
                         u->spec, u->stream);
  if (st != NATS_OK) return 0; /* the server may be back later: libnats reconnects */
  uint64_t first = si->State.FirstSeq;
  jsStreamInfo_Destroy(si);
  for (uint32_t i = 0; i < s->nsp; i++) {
    nsplit *sp = &s->sp[i];
    if (sp->done) continue;
    if (first > sp->next)
      return weir_ctx_fail(ctx, WEIR_ERETENTION,
                           "source '%s': %s: sequence %llu, the next to read in split %u, is no "
                           "longer in stream %s (its first sequence is now %llu: retention or a "
                           "purge removed messages while the job read it); refusing to skip them",
                           name, u->spec, (unsigned long long)sp->next, sp->index, u->stream,
                           (unsigned long long)first);
    for (uint32_t k = 0; k < sp->nsubs; k++) {
      nsub *c = &sp->subs[k];
      if (c->done || c->head) continue;
      uint64_t last = 0;
      if (last_seq(s, u, c->subject, &last) != NATS_OK) return 0; /* try again later */
      if (last < c->stop)
        return weir_ctx_fail(ctx, WEIR_ERETENTION,
                             "source '%s': %s: the job reads %s up to sequence %llu, but its "
                             "last message in stream %s is now %llu (messages were removed "
                             "while the job read it); refusing to end without them",
                             name, u->spec, c->subject, (unsigned long long)c->stop, u->stream,
                             (unsigned long long)last);
    }
  }
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

/* The stream sequence of m, or 0 if it is not a stream message. */
static uint64_t msg_seq(natsMsg *m) {
  uint64_t seq = reply_seq(natsMsg_GetReply(m));
  if (seq) return seq;
  jsMsgMetaData *meta = NULL;
  if (natsMsg_GetMetaData(&meta, m) != NATS_OK) return 0;
  seq = meta->Sequence.Stream;
  jsMsgMetaData_Destroy(meta);
  return seq;
}

/* Gives every consumer of sp that is not done a head, if libnats has one.
 * Returns 1 if all have one (the smallest may be emitted), 0 if one
 * waits, or the job's error. */
static int fill_heads(weir_ctx *ctx, nsrc *s, nsplit *sp) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  int ready = 1;
  for (uint32_t k = 0; k < sp->nsubs; k++) {
    nsub *c = &sp->subs[k];
    while (!c->done && !c->head) {
      natsMsg *m = NULL;
      natsStatus st = natsSubscription_NextMsg(&m, c->sub, 0);
      if (st == NATS_TIMEOUT) {
        ready = 0;
        break;
      }
      if (st != NATS_OK)
        return weir_ctx_fail(ctx, WEIR_EIO, "source '%s': %s: %s: %s", weir_ctx_name(ctx), u->spec,
                             c->subject, weir__nats_errtext(st));
      uint64_t seq = msg_seq(m);
      s->received++;
      s->idle_ms = 0;
      if (!seq || seq < sp->next) { /* not a stream message; or again after a restart */
        natsMsg_Destroy(m);
        continue;
      }
      if (seq > sp->end) { /* past what the job reads */
        natsMsg_Destroy(m);
        c->done = 1;
        break;
      }
      c->head = m;
      c->head_seq = seq;
    }
  }
  return ready;
}

/* Emits the smallest head of sp (all consumers not done have one, or
 * none is left). Returns 0 or the job's error. */
static int emit_head(weir_ctx *ctx, nsrc *s, nsplit *sp) {
  const weir__nats_url *u = weir_ctx_arg(ctx);
  nsub *c = NULL;
  for (uint32_t k = 0; k < sp->nsubs; k++)
    if (sp->subs[k].head && (!c || sp->subs[k].head_seq < c->head_seq)) c = &sp->subs[k];
  if (c) {
    natsMsg *m = c->head;
    uint64_t seq = c->head_seq;
    int len = natsMsg_GetDataLength(m);
    const char *body = natsMsg_GetData(m);
    uint32_t maxrec = weir_ctx_max_record(ctx);
    if ((uint32_t)len > maxrec)
      return weir_ctx_fail(ctx, WEIR_ETOOBIG,
                           "source '%s': %s: message %llu has %d bytes, over the maximum record "
                           "size of %u",
                           weir_ctx_name(ctx), u->spec, (unsigned long long)seq, len, maxrec);
    /* Ids from (split 0, sequence) whatever the split: a sequence names
     * one message of the stream, so ids do not depend on splits=. */
    weir_record r = {.key = body_key(body, len),
                     .ts = (int64_t)seq,
                     .id = weir_source_record_id(ctx, 0, seq),
                     .payload = len ? body : NULL,
                     .len = (uint32_t)len};
    weir_source_split(ctx, sp->index);
    int rc = weir_emit_record(ctx, &r);
    if (rc < 0) return rc;
    natsMsg_Destroy(m);
    c->head = NULL;
    sp->next = seq + 1;
    s->emitted++;
    if (seq >= c->stop) c->done = 1;
  }
  int left = 0;
  for (uint32_t k = 0; k < sp->nsubs; k++) left |= !sp->subs[k].done;
  if (!left || sp->next > sp->end) {
    /* Past end (a consumer saw a later message): a restore finds it done. */
    if (sp->next <= sp->end) sp->next = sp->end + 1;
    sp->done = 1;
    s->live--;
    split_free(sp);
    weir_source_split_end(ctx, sp->index);
    if (!s->live) s->done = 1;
  }
  return 0;
}

static int src_run(weir_ctx *ctx, uint32_t budget) {
  nsrc *s = weir_ctx_user(ctx);
  if (!s || s->done || weir_ctx_stopping(ctx)) return WEIR_SOURCE_DONE;
  if (!s->started) {
    int rc = src_start(ctx, s);
    if (rc < 0) return rc;
    s->started = 1;
    if (s->done) return WEIR_SOURCE_DONE;
  }
  uint64_t n = budget ? budget : 1;
  if (s->rate) {
    uint64_t now = weir_clock_mono_ns();
    if (!s->t0) s->t0 = now;
    uint64_t due = (uint64_t)((double)(now - s->t0) * 1e-9 * (double)s->rate) + 1;
    if (due <= s->emitted) {
      weir_ctx_wake_after(ctx, 1000);
      return WEIR_SOURCE_IDLE;
    }
    if (due - s->emitted < n) n = due - s->emitted;
  }
  /* One message from each split in turn; a split whose consumers have not
   * all got their next message yet is passed over (its order across its
   * subjects is the stream's, which the merge needs every head for). */
  uint32_t waiting = 0;
  for (uint64_t k = 0; k < n && !s->done;) {
    if (s->cur >= s->nsp) s->cur = 0;
    nsplit *sp = &s->sp[s->cur];
    if (sp->done) {
      s->cur++;
      continue;
    }
    int ready = fill_heads(ctx, s, sp);
    if (ready < 0) return ready;
    if (ready) {
      int rc = emit_head(ctx, s, sp);
      if (rc < 0) return rc;
      waiting = 0;
      k++;
    } else if (++waiting >= s->live) {
      int rc = check_idle(ctx, s);
      if (rc < 0) return rc;
      weir_ctx_wake_after(ctx, 2000);
      return WEIR_SOURCE_IDLE;
    }
    if (s->nsp > 1) s->cur++;
  }
  return s->done ? WEIR_SOURCE_DONE : WEIR_SOURCE_MORE;
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

weir_stream *weir_nats_source_par(weir_job *job, const char *name, const char *url,
                                  int parallelism) {
  if (!job) return NULL;
  char err[512];
  if (weir_nats_source_check(url, err, sizeof err) < 0) {
    weir_job_fail(job, WEIR_ESINK, "%s", err);
    return NULL;
  }
  weir__nats_url *u = weir_calloc(1, sizeof *u);
  (void)weir__nats_url_parse(url, 1, u, err, sizeof err);
  if (weir_job_adopt(job, u, url_free) < 0) return NULL;
  if (u->tasks) return weir__nats_stage_source(job, name, u, parallelism);
  return weir_source(job, name, &nats_source_vt, u, parallelism);
}

weir_stream *weir_nats_source(weir_job *job, const char *name, const char *url) {
  return weir_nats_source_par(job, name, url, 1);
}
