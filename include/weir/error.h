/* weir/error.h: error codes shared by every weir module.
 *
 * Fallible functions return 0 or a negative code. OS conditions reuse -errno
 * (WEIR_EINVAL is -EINVAL, ...); weir's own conditions live in a range far
 * from errno values. One table below yields the enum, weir_strerror() and
 * weir_err_name(), so a code and its explanation cannot drift apart.
 *
 * A message that says more than the code is kept by the object it concerns
 * (weir_job_error() for the job's first failure, set by weir_job_fail and
 * weir_ctx_fail) or, where there is no object (checking a specification,
 * a sink's commit), written into a caller's buffer passed as
 * (char *err, size_t errlen): always NUL-terminated, truncated if need be.
 */
#ifndef WEIR_ERROR_H
#define WEIR_ERROR_H

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define WEIR_ERRNO_MAP(X)                                                                          \
  X(EINVAL, -EINVAL, "invalid argument")                                                           \
  X(ENOMEM, -ENOMEM, "out of memory")                                                              \
  X(ENOENT, -ENOENT, "no such file or directory")                                                  \
  X(EIO, -EIO, "input/output error")                                                               \
  X(ENOSPC, -ENOSPC, "no space left on device")                                                    \
  X(EAGAIN, -EAGAIN, "resource temporarily unavailable")                                           \
  X(EPLAN, -30001, "invalid job graph")                                                            \
  X(ETOOBIG, -30002, "record larger than the maximum record size")                                 \
  X(EBADREC, -30003, "malformed record")                                                           \
  X(EOPERATOR, -30004, "an operator failed")                                                       \
  X(ECANCELED, -30005, "job stopped")                                                              \
  X(EABI, -30006, "job built for another weir ABI version")                                        \
  X(ENOJOB, -30007, "unknown job")                                                                 \
  X(ENOTKEYED, -30008, "keyed state used by an operator whose input is not keyed")                 \
  X(ESTATE, -30009, "operation not allowed in the current state")                                  \
  X(ESINK, -30010, "invalid sink specification")                                                   \
  X(ECORRUPT, -30011, "checkpoint data is corrupt")                                                \
  X(EFORMAT, -30012, "checkpoint written in an unknown format")                                    \
  X(EUNFINISHED, -30013, "the state directory holds an unfinished job")                            \
  X(ENOCKPT, -30014, "no such checkpoint")                                                         \
  X(ECKPT, -30015, "checkpoint failed")                                                            \
  X(EOWNED, -30016, "the state directory is held by a live owner")                                 \
  X(EFENCED, -30017, "this process lost ownership of the state directory (fenced)")                \
  X(EREFUSED, -30018, "a destination refused an effect permanently")                               \
  X(ERETENTION, -30019, "replay beyond the destination's idempotency key retention")               \
  X(ECKPTLIMIT, -30020, "more checkpoints failed in a row than tolerated")                         \
  X(EMISMATCH, -30021, "the run does not fit the state directory (another job or destination)")

typedef enum {
#define WEIR__ERR_ENUM(name, value, msg) WEIR_##name = (value),
  WEIR_ERRNO_MAP(WEIR__ERR_ENUM)
#undef WEIR__ERR_ENUM
} weir_errno;

/* A static English explanation of an error code; never NULL. Codes not in the
 * table (other -errno values) are explained by strerror(). Thread-safe. */
const char *weir_strerror(int err);

/* The code's symbolic name, "WEIR_EPLAN", or "WEIR_EUNKNOWN"; never NULL. */
const char *weir_err_name(int err);

/* "SIGSEGV" for the signals that end a crashed or killed process (SEGV, BUS,
 * ABRT, ILL, FPE, KILL), "a signal" for any other; never NULL. Safe in a
 * signal handler. */
const char *weir_signal_name(int sig);

#ifdef __cplusplus
}
#endif
#endif
