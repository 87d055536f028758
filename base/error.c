/* error.c: owns the text of every weir error code (see weir/error.h). */
#include "weir/error.h"

#include <signal.h>
#include <string.h>

const char *weir_strerror(int err) {
  switch (err) {
#define WEIR__ERR_MSG(name, value, msg)                                                            \
  case value:                                                                                      \
    return msg;
    WEIR_ERRNO_MAP(WEIR__ERR_MSG)
#undef WEIR__ERR_MSG
  default:
    break;
  }
  if (err < 0 && err > -4096) {
    /* strerror is not thread-safe in general, but glibc and macOS return a
     * static string for known codes; unknown ones are caught above. */
    return strerror(-err);
  }
  return "unknown error";
}

const char *weir_err_name(int err) {
  switch (err) {
#define WEIR__ERR_NAME(name, value, msg)                                                           \
  case value:                                                                                      \
    return "WEIR_" #name;
    WEIR_ERRNO_MAP(WEIR__ERR_NAME)
#undef WEIR__ERR_NAME
  default:
    return "WEIR_EUNKNOWN";
  }
}

const char *weir_signal_name(int sig) {
  switch (sig) {
  case SIGSEGV:
    return "SIGSEGV";
  case SIGBUS:
    return "SIGBUS";
  case SIGABRT:
    return "SIGABRT";
  case SIGILL:
    return "SIGILL";
  case SIGFPE:
    return "SIGFPE";
  case SIGKILL:
    return "SIGKILL";
  default:
    return "a signal";
  }
}
