/* base/failpoint.h: named failure points, armed from the environment.
 *
 *   WEIR_FAILPOINTS="ckpt.before_meta_commit=kill@3,sink.after_send=error"
 *
 * Each entry is NAME=ACTION[@N][+]: ACTION is kill (SIGKILL the process),
 * error (the call returns WEIR_EIO), enospc (the call returns WEIR_ENOSPC:
 * a full disk, where the point stands for a write), pause (SIGSTOP the
 * process, to be continued by SIGCONT) or delay[:MS] (the calling thread
 * sleeps MS milliseconds, default 5, to widen a race window) or until:POINT:N (the call returns
 * WEIR_EAGAIN until POINT has been reached N times in this process, at every hit: where the caller
 * treats that as "not yet", a test orders two events without a timing window); @N fires on the N-th
 * time the point is reached (default 1); a trailing + keeps firing on every later hit. Unarmed
 * points cost one
 * relaxed load. The table is process-wide by nature (one environment per process) and read once, at
 * the first call.
 */
#ifndef WEIR_FAILPOINT_H
#define WEIR_FAILPOINT_H

/* 0, or WEIR_EIO (WEIR_ENOSPC) when an `error` (`enospc`) action fires, WEIR_EAGAIN while an
 * `until` waits (kill and pause do not return until continued, delay returns 0 after its sleep). */
int weir_failpoint(const char *name);
/* Times `name` was reached so far (armed or not: 0 if unarmed). */
unsigned weir_failpoint_hits(const char *name);
/* Re-reads WEIR_FAILPOINTS (tests). Not thread-safe with weir_failpoint. */
void weir_failpoint_reload(void);

#endif
