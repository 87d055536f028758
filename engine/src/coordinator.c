/* coordinator.c: owns the checkpoint coordinator's state machine: the
 * checkpoint in flight, its transitions, and the decision to decline a
 * failed checkpoint or fail the job. Pure: job.c and checkpoint.c feed it
 * events under the job's ck_mu and carry out the actions it returns
 * (docs/checkpoints.md describes the protocol).
 *
 *            trigger(n)                          trigger(n), synchronous
 *   IDLE -----------------------> WRITING(n) <--------------+
 *    ^ ^                         |   |   \                   \
 *    | |          every write    |   |    \ a write failed    DRAINING(n)
 *    | |          queued: COMMIT |   |     v                     |
 *    | |                         |   |   FAILING(n)              | every task drained:
 *    | |                         v   |     | every write         | SNAPSHOT (to WRITING)
 *    | |              COMMITTING(n)  |     | answered: ABORT     |
 *    | |     commit answered |       |     |                     |
 *    | |                     v       |     |                     |
 *    | +--- durable: ---- COMMITTED(n)     |                     |
 *    |      COMPLETE      | failed: ABORT  |                     |
 *    +--------------------+----------------+---------------------+
 *        timeout in DRAINING, WRITING or FAILING; abort(): ABORT
 *
 * Transitions out of WRITING on a failed write and out of COMMITTING on
 * the commit's answer happen on the thread that reports them; every other
 * one happens in weir__coord_step on the coordinator thread, which the
 * reporting thread wakes when an event returns nonzero. Once the commit
 * is queued the timeout no longer applies: the store finishes it, and a
 * write that fails behind it fails the commit (reported as the write's
 * failure). An ABORT is followed by weir__coord_declined once the caller
 * aborted the checkpoint at the store: within the tolerance the job runs
 * on and its restore point stays the latest completed checkpoint; beyond
 * it the job fails with WEIR_ECKPTLIMIT; a failed final checkpoint is
 * triggered again after one interval (RETRY).
 *
 * Invariants (weir__coord_check):
 *   - IDLE iff no checkpoint id is pending;
 *   - handed <= expected and failed <= acks;
 *   - FAILING iff a write failed before the commit was queued;
 *   - DRAINING only for synchronous checkpoints, with drained <= ntasks;
 *   - COMMITTING and COMMITTED hold every write the checkpoint expects.
 * Events for an id that is not the pending one (aborted, or superseded)
 * are dropped.
 */
#include "coordinator.h"

#include <stdio.h>
#include <string.h>

#include "weir/error.h"
#include "weir/job.h"

void weir__coord_init(weir__coord *co, uint32_t writes, uint32_t ntasks, int sync, int tolerable,
                      uint64_t restored_from) {
  memset(co, 0, sizeof *co);
  co->writes = writes;
  co->ntasks = ntasks;
  co->sync = sync;
  co->tolerated = tolerable == 0                    ? WEIR_DEFAULT_TOLERABLE_FAILURES
                  : tolerable == WEIR_TOLERATE_NONE ? 0
                                                    : tolerable;
  co->restore_point = restored_from;
}

int weir__coord_may_trigger(const weir__coord *co, int final) {
  return co->state == WEIR__CK_IDLE && !co->final_triggered && !(final && co->retry_wait);
}

static int pending(const weir__coord *co, uint64_t id) {
  return co->state != WEIR__CK_IDLE && co->ck.id == id;
}

/* Nonzero when weir__coord_step has a transition to make. */
static int due(const weir__coord *co) {
  const weir__ck_pending *ck = &co->ck;
  switch (co->state) {
  case WEIR__CK_DRAINING:
    return ck->drained == co->ntasks;
  case WEIR__CK_WRITING:
    return ck->handed == ck->expected;
  case WEIR__CK_FAILING:
    return ck->acks == ck->expected;
  case WEIR__CK_COMMITTED:
    return 1;
  default:
    return 0;
  }
}

static void act_clear(weir__coord_act *act) {
  act->what = 0;
  act->status = 0;
  act->why = NULL;
  act->msg[0] = 0;
}

static void to_idle(weir__coord *co) {
  co->state = WEIR__CK_IDLE;
  co->ck.id = 0;
}

int weir__coord_trigger(weir__coord *co, uint64_t id, int final, uint64_t now_ns, int64_t now_ms,
                        weir__coord_act *act) {
  act_clear(act);
  if (co->state != WEIR__CK_IDLE || !id) return WEIR_ESTATE;
  memset(&co->ck, 0, sizeof co->ck);
  co->ck.id = id;
  co->ck.final = final;
  co->ck.expected = co->writes;
  co->ck.trigger_ns = now_ns;
  co->ck.trigger_ms = now_ms;
  co->state = co->sync ? WEIR__CK_DRAINING : WEIR__CK_WRITING;
  if (final) co->final_triggered = 1;
  act->what = WEIR__CA_BARRIERS;
  act->ck = co->ck;
  return 0;
}

static void abort_pending(weir__coord *co, int status, const char *why, const char *detail,
                          weir__coord_act *act) {
  act->what = WEIR__CA_ABORT | WEIR__CA_NOTIFY;
  act->status = status;
  act->why = why;
  act->ck = co->ck;
  /* A failed write's own message says more than what failed after it. */
  if (status >= 0)
    act->ck.why[0] = 0;
  else if (!act->ck.why[0] && detail)
    snprintf(act->ck.why, sizeof act->ck.why, "%s", detail);
  to_idle(co);
}

/* Why a checkpoint with a failed write failed: an operator that declined
 * it (weir_ctx_decline) acknowledges with WEIR_ECKPT, which no store write
 * returns. */
static const char *failed_why(const weir__ck_pending *ck) {
  return ck->status == WEIR_ECKPT ? "an operator declined it" : "writing its state failed";
}

void weir__coord_step(weir__coord *co, uint64_t now_ns, weir__coord_act *act) {
  act_clear(act);
  if (!due(co)) return;
  weir__ck_pending *ck = &co->ck;
  switch (co->state) {
  case WEIR__CK_DRAINING: /* nothing moves any more: every task snapshots now */
    ck->align_ns = now_ns - ck->trigger_ns;
    co->state = WEIR__CK_WRITING;
    act->what = WEIR__CA_SNAPSHOT;
    act->ck = *ck;
    return;
  case WEIR__CK_WRITING:
    co->state = WEIR__CK_COMMITTING;
    act->what = WEIR__CA_COMMIT;
    act->ck = *ck;
    return;
  case WEIR__CK_FAILING:
    abort_pending(co, ck->status, failed_why(ck), NULL, act);
    return;
  case WEIR__CK_COMMITTED:
    if (ck->commit_status < 0) {
      /* A write that failed behind the queued commit failed the commit. */
      if (ck->failed)
        abort_pending(co, ck->status, failed_why(ck), NULL, act);
      else
        abort_pending(co, ck->commit_status, "its commit failed", NULL, act);
      return;
    }
    act->what = WEIR__CA_COMPLETE | WEIR__CA_NOTIFY;
    act->ck = *ck;
    co->failures = 0;
    co->restore_point = ck->id;
    to_idle(co);
    return;
  default:
    return;
  }
}

void weir__coord_timeout(weir__coord *co, weir__coord_act *act) {
  act_clear(act);
  if (co->state == WEIR__CK_DRAINING || co->state == WEIR__CK_WRITING ||
      co->state == WEIR__CK_FAILING)
    abort_pending(co, 0, "timed out before every operator acknowledged", NULL, act);
}

void weir__coord_abort(weir__coord *co, int status, const char *why, const char *detail,
                       weir__coord_act *act) {
  act_clear(act);
  if (co->state != WEIR__CK_IDLE) abort_pending(co, status, why, detail, act);
}

void weir__coord_declined(weir__coord *co, uint64_t id, int final, const char *why,
                          const char *detail, weir__coord_act *act) {
  act_clear(act);
  co->failures++;
  char what[64], point[96];
  if (id)
    snprintf(what, sizeof what, "%scheckpoint %llu", final ? "the final " : "",
             (unsigned long long)id);
  else
    snprintf(what, sizeof what, "%scheckpoint", final ? "the final " : "a ");
  if (co->restore_point)
    snprintf(point, sizeof point, "checkpoint %llu", (unsigned long long)co->restore_point);
  else
    snprintf(point, sizeof point, "none (a restore starts from the beginning)");
  if (!detail) detail = "";
  const char *sep = detail[0] ? ": " : "";
  int tol = co->tolerated;
  if (tol != WEIR_TOLERATE_ANY && co->failures > (uint32_t)tol) {
    act->what |= WEIR__CA_FAIL;
    act->status = WEIR_ECKPTLIMIT;
    snprintf(act->msg, sizeof act->msg,
             "%s failed: %s%s%s; %u checkpoints failed in a row, more than the %d "
             "tolerated (--tolerable-checkpoint-failures): the job stops; its restore "
             "point is %s",
             what, why, sep, detail, co->failures, tol, point);
    return;
  }
  act->what |= WEIR__CA_DECLINE;
  if (tol == WEIR_TOLERATE_ANY)
    snprintf(act->msg, sizeof act->msg,
             "%s declined: %s%s%s; the restore point stays %s (%u failed in a row)", what, why, sep,
             detail, point, co->failures);
  else
    snprintf(act->msg, sizeof act->msg,
             "%s declined: %s%s%s; the restore point stays %s (%u failed in a row, %d "
             "tolerated)",
             what, why, sep, detail, point, co->failures, tol);
  if (final) {
    co->final_triggered = 0;
    co->retry_wait = 1;
    act->what |= WEIR__CA_RETRY;
  }
}

void weir__coord_retry_due(weir__coord *co) {
  co->retry_wait = 0;
}

/* ---- events from the tasks and the store ---------------------------------- */

int weir__coord_drained(weir__coord *co, uint64_t id) {
  if (pending(co, id) && co->state == WEIR__CK_DRAINING) co->ck.drained++;
  return due(co);
}

void weir__coord_cut(weir__coord *co, uint64_t id, uint64_t align_ns, int unaligned) {
  if (!pending(co, id)) return;
  if (align_ns > co->ck.align_ns) co->ck.align_ns = align_ns;
  /* The channel state is one more write to wait for; counted before any
   * of the task's writes is queued, so the commit cannot start first. */
  if (unaligned) {
    co->ck.expected++;
    co->ck.unaligned++;
  }
}

void weir__coord_channel_bytes(weir__coord *co, uint64_t id, uint64_t bytes) {
  if (pending(co, id)) co->ck.channel_bytes += bytes;
}

int weir__coord_no_channels(weir__coord *co, uint64_t id) {
  /* The channel state is still missing from the writes queued, so the
   * commit cannot have been queued. */
  if (pending(co, id) && (co->state == WEIR__CK_WRITING || co->state == WEIR__CK_FAILING))
    co->ck.expected--;
  return due(co);
}

void weir__coord_ack_later(weir__coord *co, uint64_t id) {
  if (pending(co, id) && (co->state == WEIR__CK_WRITING || co->state == WEIR__CK_FAILING)) {
    co->ck.expected++;
    co->ck.later++;
  }
}

int weir__coord_queued(weir__coord *co, uint64_t id) {
  if (!pending(co, id)) return 0;
  co->ck.handed++;
  return due(co);
}

int weir__coord_written(weir__coord *co, uint64_t id, int status, uint64_t bytes,
                        const char *detail) {
  if (!pending(co, id)) return 0;
  weir__ck_pending *ck = &co->ck;
  ck->acks++;
  if (status < 0) {
    ck->failed++;
    if (!ck->status) {
      ck->status = status;
      snprintf(ck->why, sizeof ck->why, "%s", detail ? detail : "");
    }
    if (co->state == WEIR__CK_WRITING) co->state = WEIR__CK_FAILING;
  } else {
    ck->bytes += bytes;
  }
  return due(co);
}

int weir__coord_committed(weir__coord *co, int status, const char *detail) {
  if (co->state != WEIR__CK_COMMITTING) return 0;
  co->ck.commit_status = status;
  /* A failed write's own message says more than the commit's. */
  if (status < 0 && !co->ck.failed)
    snprintf(co->ck.why, sizeof co->ck.why, "%s", detail ? detail : "");
  co->state = WEIR__CK_COMMITTED;
  return 1;
}

int weir__coord_check(const weir__coord *co) {
  const weir__ck_pending *ck = &co->ck;
  if ((co->state == WEIR__CK_IDLE) != (ck->id == 0)) return 0;
  if (co->state == WEIR__CK_IDLE) return 1;
  if (ck->handed > ck->expected || ck->failed > ck->acks) return 0;
  if ((co->state == WEIR__CK_FAILING) != (ck->failed && co->state < WEIR__CK_COMMITTING)) return 0;
  if (co->state == WEIR__CK_DRAINING && (!co->sync || ck->drained > co->ntasks)) return 0;
  if (co->state >= WEIR__CK_COMMITTING && ck->handed != ck->expected) return 0;
  return 1;
}
