/* log.c: owns the log level, the format of log lines on stderr and the
 * status line beneath them (weir_log_status). */
#include "base/log.h"
#include "base/assert.h"
#include "base/clock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int log_level = -1;
/* WEIR_LOG=debug: lines carry seconds since the first one, to follow a
 * checkpoint across threads. */
static _Atomic uint64_t log_t0;

/* The status line (empty: none) and what writes to stderr around it. */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static char status[512];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A fork while another thread writes must not leave out_mu locked in the
 * child (which may log before it execs). */
static void out_lock(void) {
  pthread_mutex_lock(&out_mu);
}
static void out_unlock(void) {
  pthread_mutex_unlock(&out_mu);
}
static void atfork_register(void) {
  pthread_atfork(out_lock, out_unlock, out_unlock);
}

int weir_log_level_parse(const char *name) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; name && i < 4; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

static int level_from_env(void) {
  int l = weir_log_level_parse(getenv("WEIR_LOG"));
  return l < 0 ? WEIR_LOG_INFO : l;
}

int weir_log_level(void) {
  int l = atomic_load_explicit(&log_level, memory_order_relaxed);
  if (l < 0) {
    l = level_from_env();
    atomic_store_explicit(&log_level, l, memory_order_relaxed);
  }
  return l;
}

void weir_log_set_level(int level) {
  atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

void weir__log(int level, const char *fmt, ...) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  char line[1024];
  int n;
  if (weir_log_level() >= WEIR_LOG_DEBUG) {
    /* The line that stores t0 finds it 0 and shows 0; so does a line of
     * another thread whose clock was read just before t0 was. */
    uint64_t now = weir_clock_mono_ns(), t0 = 0;
    atomic_compare_exchange_strong(&log_t0, &t0, now);
    double s = t0 && now > t0 ? (double)(now - t0) / 1e9 : 0;
    n = snprintf(line, sizeof line, "weir: %s: %.6f ", names[level & 3], s);
  } else {
    n = snprintf(line, sizeof line, "weir: %s: ", names[level & 3]);
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  /* One fputs per line under out_mu, so lines of concurrent threads do
   * not interleave and the status line goes below them. */
  size_t len = strlen(line);
  if (len + 1 < sizeof line) {
    line[len] = '\n';
    line[len + 1] = 0;
  }
  pthread_once(&atfork_once, atfork_register);
  pthread_mutex_lock(&out_mu);
  if (status[0]) fputs("\r\033[K", stderr);
  fputs(line, stderr);
  if (status[0]) fprintf(stderr, "%s\033[K", status);
  fflush(stderr);
  pthread_mutex_unlock(&out_mu);
}

void weir_log_status(const char *line) {
  pthread_once(&atfork_once, atfork_register);
  pthread_mutex_lock(&out_mu);
  if (line && line[0]) {
    snprintf(status, sizeof status, "%s", line);
    fprintf(stderr, "\r%s\033[K", status);
  } else if (status[0]) {
    status[0] = 0;
    fputs("\r\033[K", stderr);
  }
  fflush(stderr);
  pthread_mutex_unlock(&out_mu);
}

void weir__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "weir: internal assertion failed: %s (%s:%d)\n", expr, file, line);
  abort();
}
