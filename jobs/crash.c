/* jobs/crash.c: owns the `weir` command's crash report: on a fatal signal
 * (an abort() in weir or a library, a fault) it writes the signal and the
 * thread's call stack to stderr, then lets the signal end the process as it
 * would have (same exit status, same core dump).
 *
 * DESIGN. A library such as libuv ends the process with a bare abort() when
 * a system call fails in a way it cannot handle; without a report such a run
 * only says "exit 134". The handler uses only write(2) and backtrace_symbols_fd
 * (no malloc: backtrace() is called once at install time, which loads what it
 * needs). On the main thread it runs on an alternate stack, so a stack
 * overflow there is reported too.
 * Frames of static functions show as offsets: `addr2line -f -e weir OFFSET`
 * names them. Sanitizer builds report faults themselves: there only SIGABRT
 * (which AddressSanitizer leaves alone) gets a report, and ThreadSanitizer
 * builds get none (it checks what signal handlers call).
 */
#include "cli.h"
#include "weir/error.h"

#include <execinfo.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define CRASH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CRASH_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CRASH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CRASH_ASAN 1
#endif
#endif

#ifdef CRASH_TSAN
void cli_crash_install(void) {}
#else
#define CRASH_FRAMES 64

static void put(const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

/* Decimal without stdio (snprintf is not async-signal-safe). */
static void put_num(unsigned long v) {
  char b[24];
  int i = (int)sizeof b - 1;
  b[i] = '\0';
  do {
    b[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v && i > 0);
  put(b + i);
}

static void on_fatal(int sig) {
  put("weir: crashed: ");
  put(weir_signal_name(sig));
  put(" in pid ");
  put_num((unsigned long)getpid());
  put("; call stack (addr2line -f -e <weir binary> OFFSET names static functions):\n");
  void *frames[CRASH_FRAMES];
  int n = backtrace(frames, CRASH_FRAMES);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  /* SA_RESETHAND restored the default action: a fault re-executes and ends
   * the process, abort() raises again; an asynchronous one needs a raise. */
  raise(sig);
}

void cli_crash_install(void) {
  void *warm[2];
  (void)backtrace(warm, 2);
  static char alt[1 << 16];
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  int onstack = sigaltstack(&ss, NULL) == 0;
#ifdef CRASH_ASAN
  static const int sigs[] = {SIGABRT};
#else
  static const int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE};
#endif
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | (onstack ? SA_ONSTACK : 0);
    sigaction(sigs[i], &sa, NULL);
  }
}
#endif
