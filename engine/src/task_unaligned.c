/* task_unaligned.c: owns a task's part in unaligned checkpoints: scanning
 * its inputs for barriers, taking its cut, recording its channel state and
 * handing it to the store, and the restore of that state (unaligned.c is the
 * pure state machine this drives; chanstate.c the blob's format).
 *
 * DESIGN
 * Unaligned cuts (job->unaligned): the task scans its input rings for
 * barriers at every step, also when its outputs are full (a producer wakes
 * its consumer when it pushes an unaligned barrier). At the first sight of
 * barrier n it takes the cut: partly filled output batches go into their
 * channels, the data batches waiting on the channels' pending lists are
 * copied into the channel state (output records: emitted before the cut,
 * delivered after the barrier), the operators snapshot, and barrier n goes
 * into every output channel ahead of the pending batches
 * (weir__chan_push_front). Then every record consumed from an input that
 * has not delivered n yet is appended to the channel state (input records),
 * until every input delivered n or ended; and as soon as barrier n is in
 * sight in such an input's queue, the batches in front of it are copied into
 * the channel state at once (they are processed later, not logged again:
 * un_capture), so the channel state is complete when every barrier n is in
 * sight, not when the backlog in front of them has been processed. The
 * channel state is then written as one more entry of checkpoint n
 * (checkpoint.c). With the alignment timeout the task aligns as usual and
 * takes an unaligned cut only when the barrier it saw first has waited
 * longer than the timeout (inputs that already delivered n are then not
 * logged).
 *
 * Restore: the output records go back into their channels when the task
 * opens, before anything it emits; the input records are processed before
 * any live input (a step at a time, sliced like live input: task.c), and no
 * barrier is looked for until they are.
 */
#include "task_unaligned.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "snapshot/store.h"
#include "channel.h"
#include "task_step.h"

/* Starts the channel state of a cut: the output records waiting on every
 * output channel's pending list, one run per channel. */
static void cs_begin(weir__task *t) {
  weir__cs_writer *cs = &t->un->cs;
  weir__cs_begin(cs);
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      uint64_t n = 0;
      for (weir__batch *b = r->chans[j]->pend_head; b; b = b->next)
        if (b->kind == WEIR__MSG_DATA) n += b->len;
      if (!n) continue;
      weir__cs_run(cs, k, j, n);
      for (weir__batch *b = r->chans[j]->pend_head; b; b = b->next)
        if (b->kind == WEIR__MSG_DATA) weir__cs_batch(cs, b);
    }
  }
  weir__cs_inputs(cs);
}

/* Hands the completed channel state of sm.cur to the store. Returns 0 or
 * an error (the job has been failed). */
static int cs_finish(weir__task *t) {
  weir__task_un *u = t->un;
  uint64_t id = weir__unalign_done(&u->sm);
  int none = !u->cs.out_records && !u->cs.in_records;
  uint64_t len;
  uint8_t *blob = weir__cs_finish(&u->cs, &len);
  if (none) {
    /* Nothing overtaken: no entry (one durable write less). */
    weir__cs_free(blob);
    weir__task_no_channels(t, id);
    return 0;
  }
  int rc = weir_failpoint("ckpt.channel_state");
  if (rc) {
    weir__cs_free(blob);
    weir__job_failed(t->job, rc, "checkpoint %llu: failpoint ckpt.channel_state",
                     (unsigned long long)id);
    return rc;
  }
  return weir__task_write_channels(t, id, blob, len);
}

int weir__task_un_cut(weir__task *t, uint64_t id, const uint8_t *passed, uint64_t align_ns) {
  weir__task_un *u = t->un;
  weir__task_flush_outputs(t);
  cs_begin(t);
  weir__unalign_result ur = weir__unalign_start(&u->sm, id, passed);
  uint32_t parts = 0;
  for (uint32_t i = 0; i < t->nin; i++) parts += t->in_off[i] != 0;
  WEIR_LOG_D("checkpoint %llu: unaligned cut of task %u (%llu output records overtaken, %u "
             "input batches consumed in part)",
             (unsigned long long)id, t->index, (unsigned long long)u->cs.out_records, parts);
  /* A source's cut overtakes only its pending output: no entry if none. */
  int chan = t->nin > 0 || u->cs.out_records > 0;
  t->hold_views = t->job->views_on_tasks;
  int rc =
      chan ? weir__task_snapshot_unaligned(t, id, align_ns) : weir__task_snapshot(t, id, align_ns);
  t->hold_views = 0;
  if (rc) return rc;
  for (uint32_t k = 0; k < t->nrouters; k++) {
    weir__router *r = &t->routers[k];
    for (uint32_t j = 0; j < r->n; j++) {
      weir__batch *b = weir__chan_batch(r->chans[j]);
      b->kind = WEIR__MSG_BARRIER;
      b->barrier_id = id;
      weir__chan_push_front(r->chans[j], b);
      /* Whether or not it waits on this input: it sees the barrier now. */
      weir__task_wake_first(r->chans[j]->consumer);
    }
  }
  /* Its held views are read from the next run on (weir__task_run). */
  if (ur == WEIR__UN_COMPLETE) {
    if (chan) return cs_finish(t);
    (void)weir__unalign_done(&u->sm);
    return 0;
  }
  return weir_failpoint("ckpt.unaligned_cut");
}

/* While recording the channel state of sm.cur: an input that is still
 * logging and whose barrier sm.cur (or end of input) is now in its queue
 * has all its records before the cut in sight; they are copied into the
 * channel state at once (they are processed later, not logged again), so
 * the channel state completes as soon as every barrier is in sight, not
 * once the backlog in front of it has been processed. Returns 0 or an
 * error (the job has been failed). */
static int un_capture(weir__task *t) {
  weir__task_un *u = t->un;
  for (uint32_t i = 0; i < t->nin && u->sm.cur; i++) {
    if (u->sm.in[i] != WEIR__UN_LOGGING) continue;
    weir__chan *ch = t->in[i];
    uint64_t h = atomic_load_explicit(&ch->head, memory_order_relaxed);
    uint64_t tl = atomic_load_explicit(&ch->tail, memory_order_acquire);
    uint64_t p = h;
    const weir__batch *stop = NULL;
    for (; p < tl; p++) {
      const weir__batch *b = ch->ring[p & ch->mask];
      /* An input whose producer finished sends no barrier: its end of
       * input stands for one (the producer's final state answered the
       * checkpoint, so everything before the end is before the cut). */
      if ((b->kind == WEIR__MSG_BARRIER && b->barrier_id == u->sm.cur) ||
          b->kind == WEIR__MSG_EOI) {
        stop = b;
        break;
      }
    }
    if (!stop) continue; /* not in sight yet: logged as it is consumed */
    if (stop->kind == WEIR__MSG_EOI)
      WEIR_LOG_D("checkpoint %llu: task %u: input %u ended behind %llu queued batches, taken as "
                 "channel state",
                 (unsigned long long)u->sm.cur, t->index, i, (unsigned long long)(p - h));
    for (uint64_t q = h; q < p; q++) {
      const weir__batch *b = ch->ring[q & ch->mask];
      if (b->kind != WEIR__MSG_DATA) continue;
      /* The head batch may be partly consumed already (a slice). */
      uint32_t from = q == h ? t->in_off[i] : 0;
      weir__cs_records(&u->cs, b, from, b->len);
      (void)weir__unalign_data(&u->sm, i, b->len - from); /* counted */
    }
    if (weir__unalign_barrier(&u->sm, i, u->sm.cur) == WEIR__UN_COMPLETE) return cs_finish(t);
  }
  return 0;
}

/* Scans every live input's ring for barriers not seen yet (positions
 * between the last scan and the tail) and takes the unaligned cut of the
 * newest one due: at once in WEIR__UNALIGNED_ALWAYS mode, after the
 * alignment timeout otherwise. Returns 1 if the task failed. */
static int un_scan(weir__task *t) {
  weir__task_un *u = t->un;
  if (u->replay || t->state != WEIR__TASK_RUNNING) return 0;
  uint64_t want = 0;
  for (uint32_t i = 0; i < t->nin; i++) {
    if (t->in_ended[i]) continue;
    weir__chan *ch = t->in[i];
    uint64_t h = atomic_load_explicit(&ch->head, memory_order_relaxed);
    uint64_t tl = atomic_load_explicit(&ch->tail, memory_order_acquire);
    uint64_t pos = u->scanned[i] > h ? u->scanned[i] : h;
    for (; pos < tl; pos++) {
      const weir__batch *b = ch->ring[pos & ch->mask];
      if (b->kind == WEIR__MSG_BARRIER &&
          weir__unalign_seen(&u->sm, i, b->barrier_id) == WEIR__UN_CUT && b->barrier_id > want)
        want = b->barrier_id;
    }
    u->scanned[i] = pos;
  }
  uint64_t now = 0;
  if (u->sm.cur && un_capture(t)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  if (t->job->unaligned == WEIR__UNALIGNED_TIMEOUT) {
    if (want > u->seen_id) {
      /* The timeout counts from the first sight of the barrier. */
      u->seen_id = want;
      u->seen_ns = weir_clock_mono_ns();
      weir__task_wake_after(t, (uint64_t)t->job->opts.alignment_timeout_ms * 1000u + 100u);
    }
    if (u->seen_id <= u->sm.last || u->seen_id <= t->align.last) return 0;
    now = weir_clock_mono_ns();
    uint64_t limit = (uint64_t)t->job->opts.alignment_timeout_ms * 1000000u;
    if (now - u->seen_ns < limit) {
      /* Not yet: make sure a wake-up comes when it is due (libuv's timers
       * count from the loop's cached time, so the one set at first sight
       * may fire a little early, and a task that waits for input on a
       * blocked alignment would then never look again: the switch must
       * not depend on other events, or a task that aligns on a barrier
       * another task sent ahead of its output after its own switch can
       * wait for good). */
      weir__task_wake_after(t, (limit - (now - u->seen_ns)) / 1000u + 1000u);
      return 0;
    }
    want = u->seen_id;
  }
  if (!want) return 0;
  /* Inputs that already delivered `want` (aligned so far) are not logged. */
  uint8_t *passed = NULL;
  uint64_t align_ns = 0;
  if (t->job->unaligned == WEIR__UNALIGNED_TIMEOUT) {
    align_ns = now - u->seen_ns;
    if (t->align.cur == want) {
      passed = weir_calloc(t->nin, 1);
      for (uint32_t i = 0; i < t->nin; i++) passed[i] = t->align.in[i] == WEIR__IN_BLOCKED;
    }
    weir__align_force(&t->align, want);
    WEIR_LOG_D("checkpoint %llu: task %u switches to an unaligned cut after %llu ms",
               (unsigned long long)want, t->index, (unsigned long long)(align_ns / 1000000u));
  }
  int rc = weir__task_un_cut(t, want, passed, align_ns);
  weir_free(passed);
  if (!rc && u->sm.cur) rc = un_capture(t);
  if (rc) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

int weir__task_un_scan(weir__task *t) {
  uint64_t before = t->un->sm.last;
  if (un_scan(t)) return -1;
  return t->un->sm.last != before;
}

int weir__task_un_barrier(weir__task *t, uint32_t idx, uint64_t id) {
  weir__task_un *u = t->un;
  weir__unalign_result ur = weir__unalign_barrier(&u->sm, idx, id);
  if (ur == WEIR__UN_CUT && t->job->unaligned == WEIR__UNALIGNED_ALWAYS) {
    /* It arrived after the last scan: cut now (nothing of this input is
     * overtaken; the others are recorded as usual). */
    if (weir__task_un_cut(t, id, NULL, 0)) {
      weir__task_failed(t, WEIR_ECKPT);
      return 1;
    }
    ur = weir__unalign_barrier(&u->sm, idx, id);
  }
  if (ur == WEIR__UN_COMPLETE && cs_finish(t)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  /* Timeout mode: an aligned cut unless the task switched (then the
   * barrier is stale for the aligner). A barrier that arrived after the
   * last scan starts the timeout here. */
  if (t->job->unaligned == WEIR__UNALIGNED_TIMEOUT && id > u->seen_id && id > u->sm.last &&
      id > t->align.last) {
    u->seen_id = id;
    u->seen_ns = weir_clock_mono_ns();
    weir__task_wake_after(t, (uint64_t)t->job->opts.alignment_timeout_ms * 1000u + 1000u);
  }
  return 0;
}

int weir__task_un_ended(weir__task *t, uint32_t idx) {
  if (t->job->unaligned && weir__unalign_end(&t->un->sm, idx) == WEIR__UN_COMPLETE &&
      cs_finish(t)) {
    weir__task_failed(t, WEIR_ECKPT);
    return 1;
  }
  return 0;
}

/* Restore: pushes the restored output records into their channels (before
 * anything the task emits) and keeps the input records for replay. Returns
 * 0 or WEIR_ECORRUPT (reported). */
static int un_restore(weir__task *t, weir_subtask_snapshot *s) {
  weir__task_un *u = t->un;
  weir_ctx *c = t->ops[0];
  uint64_t len = 0;
  void (*release)(uint8_t *, uint64_t) = s->blob_release;
  uint8_t *p = s->blob;
  len = s->blob_len;
  s->blob = NULL;
  s->blob_len = 0;
  s->blob_release = NULL;
  weir_subtask_snapshot_free(s);
  weir_free(s);
  const char *why = NULL;
  weir__cs_reader rd;
  weir__cs_rec rec;
  int rc = weir__cs_open(&rd, p, len, c->max_record, &why);
  if (!rc)
    while ((rc = weir__cs_next(&rd, &rec, &why)) > 0) {
      if (rec.k >= t->nrouters || rec.j >= t->routers[rec.k].n) {
        why = "an output record names no channel of this task";
        break;
      }
      weir__task_route(t, rec.k, rec.j, rec.key, rec.ts, rec.id, rec.data, rec.len);
    }
  /* The input section: checked now, replayed later. */
  if (!rc) {
    weir__cs_to_inputs(&rd);
    u->replay_rd = rd;
    do rc = weir__cs_next(&rd, &rec, &why);
    while (rc > 0);
  }
  if (why) {
    weir_blob_free(p, len, release);
    return weir_ctx_fail(c, WEIR_ECORRUPT, "restored channel state of task %u: %s", t->index, why);
  }
  weir__task_flush_outputs(t);
  if (rd.out_records || rd.in_records)
    WEIR_LOG_I("'%s' subtask %u: restored channel state: %llu output records, %llu input "
               "records",
               c->node->name, c->subtask, (unsigned long long)rd.out_records,
               (unsigned long long)rd.in_records);
  if (rd.in_records) {
    u->replay = p;
    u->replay_len = len;
    u->replay_release = release;
    u->replay_batch = weir__batch_create(t->batch_records);
  } else {
    weir_blob_free(p, len, release);
  }
  return 0;
}

int weir__task_un_open(weir__task *t) {
  weir_subtask_snapshot *s = t->ops[0]->restore_chan;
  if (!t->job->unaligned && !s) return 0;
  t->un = weir_calloc(1, sizeof *t->un);
  weir__unalign_init(&t->un->sm, t->nin);
  t->un->scanned = weir_calloc(t->nin ? t->nin : 1, sizeof *t->un->scanned);
  if (!s) return 0;
  t->ops[0]->restore_chan = NULL;
  return un_restore(t, s);
}

void weir__task_un_close(weir__task *t) {
  weir__task_un *u = t->un;
  if (!u) return;
  weir__unalign_close(&u->sm);
  weir_free(u->scanned);
  weir__cs_drop(&u->cs);
  if (u->replay) weir_blob_free(u->replay, u->replay_len, u->replay_release);
  weir__batch_destroy(u->replay_batch);
  weir_free(u);
  t->un = NULL;
}

weir__batch *weir__task_un_replay_next(weir__task *t, uint32_t want) {
  weir__task_un *u = t->un;
  weir__cs_reader *rd = &u->replay_rd;
  if (rd->off >= rd->end) return NULL;
  weir__batch *b = u->replay_batch;
  weir__batch_reset(b);
  weir__cs_rec rec;
  const char *why;
  while (b->len < want) {
    weir__cs_reader at = *rd;
    /* Checked in un_restore: a record, or the end. */
    if (weir__cs_next(rd, &rec, &why) <= 0) break;
    if (!weir__batch_fits(b, rec.len)) {
      *rd = at;
      break;
    }
    weir__batch_append(b, rec.key, rec.ts, rec.id, rec.data, rec.len);
  }
  return b;
}

int weir__task_un_replay_left(weir__task *t) {
  weir__task_un *u = t->un;
  if (u->replay_rd.off < u->replay_rd.end) return 1;
  weir_blob_free(u->replay, u->replay_len, u->replay_release);
  u->replay = NULL;
  u->replay_len = 0;
  weir__batch_destroy(u->replay_batch);
  u->replay_batch = NULL;
  return 0;
}
