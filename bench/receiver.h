/* bench/receiver.h: a `weir receiver` started for a benchmark run, shared
 * by the bench programs that send effects to it (each includes it;
 * everything is static).
 */
#ifndef WEIR_BENCH_RECEIVER_H
#define WEIR_BENCH_RECEIVER_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Starts `weir receiver --listen 127.0.0.1:0 --db DB` plus the NULL-ended
 * extra flags (NULL: none); returns its port, or -1, and its pid in *pid.
 * It reads the port from the receiver's "listening on" line. */
static int bench_receiver_start(const char *weir, const char *db, const char *const *extra,
                                pid_t *pid) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  *pid = fork();
  if (*pid < 0) return -1;
  if (*pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    const char *argv[32] = {weir, "receiver", "--listen", "127.0.0.1:0", "--db", db};
    int a = 6;
    for (; extra && *extra && a < 31; extra++) argv[a++] = *extra;
    argv[a] = NULL;
    execv(weir, (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  char buf[1024];
  size_t len = 0;
  const char *ready = "listening on 127.0.0.1:";
  while (len < sizeof buf - 1) {
    ssize_t n = read(fds[0], buf + len, sizeof buf - 1 - len);
    if (n <= 0) break;
    len += (size_t)n;
    buf[len] = '\0';
    char *p = strstr(buf, ready);
    if (p && strchr(p, '\n')) {
      close(fds[0]);
      return atoi(p + strlen(ready));
    }
  }
  close(fds[0]);
  return -1;
}

/* Stops a receiver that bench_receiver_start started. */
static void bench_receiver_stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}

/* A number field of `weir receiver stats --db DB --json`, or -1. */
static long long bench_receiver_stat(const char *weir, const char *db, const char *field) {
  char cmd[1200], line[2048] = "", key[64];
  snprintf(cmd, sizeof cmd, "'%s' receiver stats --db '%s' --json", weir, db);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  long long v = -1;
  snprintf(key, sizeof key, "\"%s\": ", field);
  if (fgets(line, sizeof line, f)) {
    char *p = strstr(line, key);
    if (p) v = atoll(p + strlen(key));
  }
  pclose(f);
  return v;
}

#endif
