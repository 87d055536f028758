/* tests/nats_server.h: what the NATS tests (test_nats, test_stage) share:
 * the URL of the nats-server of scripts/services, and a private
 * nats-server for the tests that kill and restart the server under a
 * running job (on a port of its own with its store in a directory of the
 * test, killed with any signal). Criterion asserts.
 */
#ifndef WEIR_TESTS_NATS_SERVER_H
#define WEIR_TESTS_NATS_SERVER_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* NATS_URL; the test is skipped without it (and fails under CI=true). */
static __attribute__((unused)) const char *nats_url(void) {
  const char *u = th_service("NATS_URL");
  if (!u) {
    cr_assert(!th_in_ci(), "NATS_URL is not set: nats-server is required under CI");
    cr_skip_test("NATS_URL is not set (scripts/services starts nats-server)");
  }
  return u;
}

typedef struct psrv {
  pid_t pid;
  int port;
  char dir[600], log[700];
} psrv;

/* Starts nats-server -js on 127.0.0.1:port (0: a free one) with its store in
 * s->dir; waits until its own log says it is ready. Returns 0, or -1 if
 * nats-server could not be started. */
static __attribute__((unused)) int psrv_start(psrv *s, int port) {
  snprintf(s->log, sizeof s->log, "%s.log", s->dir);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port ? port : -1);
  fflush(NULL);
  s->pid = fork();
  cr_assert_geq(s->pid, 0);
  if (s->pid == 0) {
    setpgid(0, 0);
    int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    execlp("nats-server", "nats-server", "-js", "-a", "127.0.0.1", "-p", ps, "-sd", s->dir,
           (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 500; i++) {
    th_sleep_ms(20);
    char *text = th_read_file(s->log, NULL);
    const char *p = text ? strstr(text, "Listening for client connections on 127.0.0.1:") : NULL;
    int ready = text && strstr(text, "Server is ready") != NULL;
    if (p) s->port = atoi(p + strlen("Listening for client connections on 127.0.0.1:"));
    free(text);
    if (ready && s->port > 0) return 0;
    if (waitpid(s->pid, NULL, WNOHANG) == s->pid) return -1;
  }
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
  return -1;
}

static __attribute__((unused)) void psrv_kill(psrv *s, int sig) {
  kill(s->pid, sig);
  waitpid(s->pid, NULL, 0);
}

#endif
