/* tests/nats_server.h: what the NATS tests (test_nats, test_stage) share:
 * the URL of the nats-server of scripts/services, a private nats-server
 * for the tests that kill and restart the server under a running job (on
 * a port of its own with its store in a directory of the test, killed
 * with any signal), and a private three-node JetStream cluster on
 * loopback whose nodes are killed and restarted one at a time. Criterion
 * asserts.
 */
#ifndef WEIR_TESTS_NATS_SERVER_H
#define WEIR_TESTS_NATS_SERVER_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

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
 * s->dir and the further arguments `extra` (NULL terminated, at most 16;
 * may be NULL); waits until its own log (<dir>.log, written anew) says it
 * is ready. Returns 0, or -1 if nats-server could not be started. */
static __attribute__((unused)) int psrv_start_args(psrv *s, int port, const char *const extra[]) {
  snprintf(s->log, sizeof s->log, "%s.log", s->dir);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port ? port : -1);
  const char *argv[32] = {"nats-server", "-js", "-a", "127.0.0.1", "-p", ps, "-sd", s->dir};
  for (int i = 0, n = 8; extra && extra[i] && i < 16; i++) argv[n++] = extra[i];
  s->port = 0;
  fflush(NULL);
  s->pid = fork();
  cr_assert_geq(s->pid, 0);
  if (s->pid == 0) {
    setpgid(0, 0);
    int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    execvp("nats-server", (char *const *)argv);
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

/* psrv_start_args without further arguments: a server of its own. */
static __attribute__((unused)) int psrv_start(psrv *s, int port) {
  return psrv_start_args(s, port, NULL);
}

static __attribute__((unused)) void psrv_kill(psrv *s, int sig) {
  kill(s->pid, sig);
  waitpid(s->pid, NULL, 0);
}

/* ---- a three-node JetStream cluster ---------------------------------------
 *
 * Node i (0..2) is nats-server -js -n node<i+1> --cluster_name weirtest,
 * clients on 127.0.0.1:port[i], routes on 127.0.0.1:cport[i] to the two
 * others, its store in <dir>/n<i+1> and its log in <dir>/n<i+1>.log. The
 * six ports are picked free at start (bound to port 0 at once, then let
 * go) and kept, so a node restarts where it was. Clients connect with
 * `url`, the list of the three, as weir's nats:// URLs take it. */
#define PCLUSTER_NODES 3

typedef struct pcluster {
  psrv node[PCLUSTER_NODES];
  int port[PCLUSTER_NODES], cport[PCLUSTER_NODES];
  int up[PCLUSTER_NODES]; /* running (started and not killed) */
  char url[256];          /* nats://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 */
} pcluster;

/* n distinct free loopback ports into ports. Returns 0 or -1. */
static __attribute__((unused)) int pcluster_free_ports(int *ports, int n) {
  int fds[2 * PCLUSTER_NODES], ok = n <= 2 * PCLUSTER_NODES;
  for (int i = 0; i < n && ok; i++) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    ok = fds[i] >= 0 && bind(fds[i], (struct sockaddr *)&a, sizeof a) == 0 &&
         getsockname(fds[i], (struct sockaddr *)&a, &len) == 0;
    if (ok) ports[i] = ntohs(a.sin_port);
    if (!ok && fds[i] >= 0) close(fds[i]);
    if (!ok)
      while (i-- > 0) close(fds[i]);
  }
  if (ok)
    for (int i = 0; i < n; i++) close(fds[i]);
  return ok ? 0 : -1;
}

/* Whether node i's log names the JetStream meta leader ("Self is new
 * JetStream cluster metadata leader" or "JetStream cluster new metadata
 * leader: nodeK/weirtest"). */
static __attribute__((unused)) int pcluster_has_leader(const pcluster *c, int i) {
  char *text = th_read_file(c->node[i].log, NULL);
  int yes = text && strstr(text, "metadata leader") != NULL;
  free(text);
  return yes;
}

/* Starts node i on its ports, routed to the two others, until its log
 * says it is ready (psrv_start_args). Returns 0 or -1. */
static __attribute__((unused)) int pcluster_node_start(pcluster *c, int i) {
  char name[16], cluster[64], routes[128] = "";
  snprintf(name, sizeof name, "node%d", i + 1);
  snprintf(cluster, sizeof cluster, "nats://127.0.0.1:%d", c->cport[i]);
  for (int k = 0; k < PCLUSTER_NODES; k++) {
    if (k == i) continue;
    size_t used = strlen(routes);
    snprintf(routes + used, sizeof routes - used, "%snats://127.0.0.1:%d", used ? "," : "",
             c->cport[k]);
  }
  const char *extra[] = {"-n",    name,      "--cluster_name", "weirtest", "-cluster",
                         cluster, "-routes", routes,           NULL};
  if (psrv_start_args(&c->node[i], c->port[i], extra) != 0) return -1;
  c->up[i] = 1;
  return 0;
}

static __attribute__((unused)) int pcluster_wait_leader(pcluster *c, int i, int timeout_ms) {
  for (int64_t end = th_mono_ms() + timeout_ms; th_mono_ms() < end; th_sleep_ms(20))
    if (pcluster_has_leader(c, i)) return 0;
  return -1;
}

/* Connects to the cluster (the three servers) with a JetStream context
 * whose requests wait 1 s for their answer. Returns NATS_OK or the
 * failure. */
static __attribute__((unused)) natsStatus pcluster_connect(const pcluster *c, natsConnection **nc,
                                                           jsCtx **js) {
  const char *servers[PCLUSTER_NODES];
  char urls[PCLUSTER_NODES][64];
  for (int i = 0; i < PCLUSTER_NODES; i++) {
    snprintf(urls[i], sizeof urls[i], "nats://127.0.0.1:%d", c->port[i]);
    servers[i] = urls[i];
  }
  natsOptions *o = NULL;
  natsStatus s = natsOptions_Create(&o);
  if (s == NATS_OK) s = natsOptions_SetServers(o, servers, PCLUSTER_NODES);
  if (s == NATS_OK) s = natsOptions_SetTimeout(o, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(o, 60);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(o, 200);
  if (s == NATS_OK) s = natsConnection_Connect(nc, o);
  natsOptions_Destroy(o);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 1000; /* a request to a stream without a leader is not answered */
  if (s == NATS_OK) s = natsConnection_JetStream(js, *nc, &jo);
  return s;
}

static __attribute__((unused)) void pcluster_stop(pcluster *c) {
  for (int i = 0; i < PCLUSTER_NODES; i++)
    if (c->up[i]) {
      psrv_kill(&c->node[i], SIGTERM);
      c->up[i] = 0;
    }
}

/* Starts the three nodes under dir (made if missing) and waits until each names the meta
 * leader and a stream with 3 replicas can be made (then deleted): up to
 * about 30 s. Returns 0, or -1 (nothing left running). */
static __attribute__((unused)) int pcluster_start(pcluster *c, const char *dir) {
  memset(c, 0, sizeof *c);
  mkdir(dir, 0755);
  int ports[2 * PCLUSTER_NODES];
  if (pcluster_free_ports(ports, 2 * PCLUSTER_NODES) != 0) return -1;
  size_t used = 0;
  used += (size_t)snprintf(c->url, sizeof c->url, "nats://");
  for (int i = 0; i < PCLUSTER_NODES; i++) {
    c->port[i] = ports[i];
    c->cport[i] = ports[PCLUSTER_NODES + i];
    snprintf(c->node[i].dir, sizeof c->node[i].dir, "%.580s/n%d", dir, i + 1);
    used += (size_t)snprintf(c->url + used, sizeof c->url - used, "%s127.0.0.1:%d", i ? "," : "",
                             c->port[i]);
  }
  for (int i = 0; i < PCLUSTER_NODES; i++)
    if (pcluster_node_start(c, i) != 0) {
      pcluster_stop(c);
      return -1;
    }
  for (int i = 0; i < PCLUSTER_NODES; i++)
    if (pcluster_wait_leader(c, i, 20000) != 0) {
      pcluster_stop(c);
      return -1;
    }
  /* The meta leader may not know its peers are current yet: an R3 stream
   * is refused ("insufficient resources") until it does. */
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  int ok = 0;
  if (pcluster_connect(c, &nc, &js) == NATS_OK) {
    char name[64], subj[64];
    snprintf(name, sizeof name, "WEIRPROBE_%d", (int)getpid());
    snprintf(subj, sizeof subj, "weirprobe.%d", (int)getpid());
    const char *subjects[1] = {subj};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = name;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Replicas = 3;
    for (int64_t end = th_mono_ms() + 10000; !ok && th_mono_ms() < end;) {
      jsStreamInfo *si = NULL;
      ok = js_AddStream(&si, js, &cfg, NULL, NULL) == NATS_OK;
      jsStreamInfo_Destroy(si);
      if (!ok) th_sleep_ms(100);
    }
    if (ok) js_DeleteStream(js, name, NULL, NULL);
  }
  jsCtx_Destroy(js);
  if (nc) {
    natsConnection_Close(nc);
    natsConnection_Destroy(nc);
  }
  if (!ok) pcluster_stop(c);
  return ok ? 0 : -1;
}

/* Kills node i with sig and reaps it. */
static __attribute__((unused)) void pcluster_kill(pcluster *c, int i, int sig) {
  if (!c->up[i]) return;
  psrv_kill(&c->node[i], sig);
  c->up[i] = 0;
}

/* Starts node i again on its ports and store, and waits (up to 20 s)
 * until its log names the meta leader. Returns 0 or -1. */
static __attribute__((unused)) int pcluster_restart(pcluster *c, int i) {
  if (c->up[i]) return 0;
  if (pcluster_node_start(c, i) != 0) return -1;
  return pcluster_wait_leader(c, i, 20000);
}

/* The node named `name` ("node2", or "node2/weirtest"): its index, or -1. */
static __attribute__((unused)) int pcluster_node_named(const char *name) {
  int k = 0;
  if (!name || sscanf(name, "node%d", &k) != 1 || k < 1 || k > PCLUSTER_NODES) return -1;
  return k - 1;
}

#endif
