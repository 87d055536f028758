/* base/log.h: leveled logging to stderr.
 *
 * The level is checked before the arguments are evaluated, so a disabled
 * WEIR_LOG_DEBUG costs one load and a branch. Nothing is logged per record:
 * per-record facts are counters. The level comes from WEIR_LOG (error, warn,
 * info, debug) at first use, default info; weir_log_set_level() overrides it.
 */
#ifndef WEIR_LOG_H
#define WEIR_LOG_H

enum { WEIR_LOG_ERROR = 0, WEIR_LOG_WARN = 1, WEIR_LOG_INFO = 2, WEIR_LOG_DEBUG = 3 };

int weir_log_level(void);
void weir_log_set_level(int level);
/* Parses "error", "warn", "info" or "debug"; -1 for anything else. */
int weir_log_level_parse(const char *name);
/* A status line kept at the bottom of a terminal (a progress line): drawn
 * now over the previous one, cleared before each log line and drawn again
 * after it, so that log lines never overwrite it; NULL or "" clears it.
 * Thread-safe. */
void weir_log_status(const char *line);
void weir__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define WEIR_LOG(level, ...)                                                                       \
  do {                                                                                             \
    if ((level) <= weir_log_level()) weir__log((level), __VA_ARGS__);                              \
  } while (0)
#define WEIR_LOG_E(...) WEIR_LOG(WEIR_LOG_ERROR, __VA_ARGS__)
#define WEIR_LOG_W(...) WEIR_LOG(WEIR_LOG_WARN, __VA_ARGS__)
#define WEIR_LOG_I(...) WEIR_LOG(WEIR_LOG_INFO, __VA_ARGS__)
#define WEIR_LOG_D(...) WEIR_LOG(WEIR_LOG_DEBUG, __VA_ARGS__)

#endif
