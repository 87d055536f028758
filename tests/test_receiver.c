/* tests/test_receiver.c: owns the end-to-end tests of `weir receiver`, the
 * reference HTTP destination: Idempotency-Key semantics (201, replay 200 with
 * Idempotent-Replayed, 422, 409, no key), retention, --no-dedup, lost
 * acknowledgements (--drop-acks), body limits, garbage on the wire, the
 * payload hash, `stats` (while it serves and after) and `effects`.
 *
 * DESIGN. Each test starts the real binary (WEIR_BINARY) with fork/exec on
 * port 0, waits for its "listening on 127.0.0.1:PORT" line on a stderr pipe
 * (an explicit readiness signal, no sleep), talks to it with the tiny HTTP/1.1
 * client below (plain sockets, one request per connection), and stops it with
 * SIGTERM, expecting exit 0 (under AddressSanitizer a leak at exit would make
 * that fail). The fixture's fini kills a receiver that a failed assertion left
 * running. The counts are always read back through `weir receiver stats
 * --json`, so the tests check what a sink's test would see. Only the retention
 * test waits on the clock, because the clock is what it tests.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define TIMEOUT_S 60

/* send()'s flags. setup() ignores SIGPIPE, which is all that keeps a closed
 * connection from killing the test where there is no MSG_NOSIGNAL (older
 * macOS): the build with WEIR_PORTABLE_ONLY (base/platform.h) does without
 * it too. */
#if defined(MSG_NOSIGNAL) && !defined(WEIR_PORTABLE_ONLY)
#define SEND_FLAGS MSG_NOSIGNAL
#else
#define SEND_FLAGS 0
#endif

/* ------------------------------------------------------------------------ */
/* The receiver process                                                     */

typedef struct receiver {
  pid_t pid;
  int port;
  int err_fd; /* read end of its stderr */
  char err[8192];
  size_t err_len;
} receiver;

static char *g_dir; /* this test's temporary directory */
static pid_t g_pid; /* the receiver running, killed by the fini if a test failed */

static void setup(void) {
  signal(SIGPIPE, SIG_IGN); /* a receiver that closes early must not kill the test */
  g_dir = th_tmpdir();
  cr_assert_not_null(g_dir);
}

static void teardown(void) {
  if (g_pid > 0) {
    kill(g_pid, SIGKILL);
    waitpid(g_pid, NULL, 0);
  }
  th_rmrf(g_dir);
  free(g_dir);
}

static char *db_path(const char *name) {
  size_t n = strlen(g_dir) + strlen(name) + 2;
  char *p = malloc(n);
  cr_assert_not_null(p);
  snprintf(p, n, "%s/%s", g_dir, name);
  return p;
}

/* Reads what the receiver wrote on stderr until `needle` appears or `ms`
 * pass. Returns nonzero if it appeared. */
static int read_err_until(receiver *r, const char *needle, int ms) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    r->err[r->err_len] = '\0';
    if (needle && strstr(r->err, needle)) return 1;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long left = ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
    if (left <= 0) return 0;
    struct pollfd p = {.fd = r->err_fd, .events = POLLIN};
    if (poll(&p, 1, (int)left) <= 0) continue;
    ssize_t n = read(r->err_fd, r->err + r->err_len, sizeof r->err - 1 - r->err_len);
    if (n <= 0) {
      r->err[r->err_len] = '\0';
      return needle && strstr(r->err, needle) != NULL;
    }
    r->err_len += (size_t)n;
  }
}

/* Starts `weir receiver --listen 127.0.0.1:0 --db DB [extra...]`, with
 * WEIR_FAILPOINTS set to failpoints if not NULL, and waits until it
 * listens. */
static void start_fp(receiver *r, const char *db, const char *const extra[],
                     const char *failpoints) {
  memset(r, 0, sizeof *r);
  const char *argv[32] = {WEIR_BINARY, "receiver", "--listen", "127.0.0.1:0", "--db", db};
  int n = 6;
  for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (failpoints) setenv("WEIR_FAILPOINTS", failpoints, 1);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  r->pid = pid;
  r->err_fd = fds[0];
  g_pid = pid;
  const char *ready = "weir receiver: listening on 127.0.0.1:";
  cr_assert(read_err_until(r, ready, TIMEOUT_S * 1000), "receiver did not start: %s", r->err);
  r->port = atoi(strstr(r->err, ready) + strlen(ready));
  cr_assert_gt(r->port, 0, "no port in: %s", r->err);
}

static void start(receiver *r, const char *db, const char *const extra[]) {
  start_fp(r, db, extra, NULL);
}

/* Stops it with SIGTERM; expects a clean exit 0. */
static void stop(receiver *r) {
  cr_assert_eq(kill(r->pid, SIGTERM), 0);
  int st = 0;
  cr_assert_eq(waitpid(r->pid, &st, 0), r->pid);
  r->pid = 0;
  g_pid = 0;
  read_err_until(r, NULL, 200);
  close(r->err_fd);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "receiver ended with status 0x%x: %s", st,
            r->err);
  cr_assert(strstr(r->err, "weir receiver: stopped") != NULL, "stderr: %s", r->err);
}

/* ------------------------------------------------------------------------ */
/* A tiny HTTP/1.1 client                                                   */

typedef struct resp {
  int status;   /* 0: the connection closed without a response */
  int replayed; /* header Idempotent-Replayed: true */
  int retry_after;
  char head[2048];
  char body[4096];
} resp;

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct timeval tv = {.tv_sec = TIMEOUT_S};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, SEND_FLAGS);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Reads until the server closes; parses status, headers and body into out.
 * Returns 0 or -1 on a read error (a reset counts as a close). */
static int read_response_into(int fd, resp *out, char *buf, size_t cap) {
  size_t len = 0;
  for (;;) {
    ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ECONNRESET) break;
    if (n < 0) return -1;
    if (n == 0) break;
    len += (size_t)n;
    if (len >= cap - 1) break;
  }
  buf[len] = '\0';
  memset(out, 0, sizeof *out);
  char *p = buf;
  /* Skip interim responses (100 Continue). */
  while (strncmp(p, "HTTP/1.1 1", 10) == 0 && strstr(p, "\r\n\r\n")) p = strstr(p, "\r\n\r\n") + 4;
  if (len == 0 || sscanf(p, "HTTP/1.%*d %d", &out->status) != 1) {
    out->status = 0;
    return 0;
  }
  char *end = strstr(p, "\r\n\r\n");
  if (end == NULL) return -1;
  size_t hl = (size_t)(end - p);
  snprintf(out->head, sizeof out->head, "%.*s", (int)hl, p);
  snprintf(out->body, sizeof out->body, "%s", end + 4);
  for (char *h = strstr(out->head, "\r\n"); h; h = strstr(h + 2, "\r\n")) {
    if (strncasecmp(h + 2, "Idempotent-Replayed: true", 25) == 0) out->replayed = 1;
    if (strncasecmp(h + 2, "Retry-After:", 12) == 0) out->retry_after = 1;
  }
  return 0;
}

static int read_response(int fd, resp *out) {
  enum { CAP = 1 << 16 };
  char *buf = malloc(CAP);
  if (buf == NULL) return -1;
  int rc = read_response_into(fd, out, buf, CAP);
  free(buf);
  return rc;
}

/* Formats the head of a POST of a body of blen bytes with key (NULL: none)
 * into buf. */
static size_t format_post(char *buf, size_t cap, const char *key, size_t blen,
                          const char *extra_header) {
  int n = snprintf(buf, cap,
                   "POST /effects HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n%s%s%s%s\r\n",
                   blen, key ? "Idempotency-Key: " : "", key ? key : "", key ? "\r\n" : "",
                   extra_header ? extra_header : "");
  return (size_t)n;
}

/* POSTs body with key; returns 0 with out filled, or -1. Safe from any
 * thread (no cr_assert). */
static int post_n(int port, const char *key, const char *body, size_t blen, resp *out) {
  char head[1024];
  size_t hl = format_post(head, sizeof head, key, blen, NULL);
  int fd = connect_to(port);
  if (fd < 0) return -1;
  int rc = send_all(fd, head, hl) == 0 && send_all(fd, body, blen) == 0 ? 0 : -1;
  if (rc == 0) rc = read_response(fd, out);
  close(fd);
  return rc;
}

static int post(int port, const char *key, const char *body, resp *out) {
  return post_n(port, key, body, strlen(body), out);
}

/* POSTs body with key (NULL: none) and extra header lines ("Name: v\r\n"). */
static int post_x(int port, const char *key, const char *extra, const char *body, resp *out) {
  char head[1024];
  size_t blen = strlen(body);
  size_t hl = format_post(head, sizeof head, key, blen, extra);
  int fd = connect_to(port);
  if (fd < 0) return -1;
  int rc = send_all(fd, head, hl) == 0 && send_all(fd, body, blen) == 0 ? 0 : -1;
  if (rc == 0) rc = read_response(fd, out);
  close(fd);
  return rc;
}

/* Sends raw bytes and reads whatever comes back (the server may close). */
static void raw(int port, const char *bytes, size_t n, resp *out) {
  int fd = connect_to(port);
  cr_assert_geq(fd, 0);
  send_all(fd, bytes, n);
  read_response(fd, out);
  close(fd);
}

#define POST_OK(port, key, body, r)                                                                \
  cr_assert_eq(post(port, key, body, r), 0, "request failed: %s", strerror(errno))

/* ------------------------------------------------------------------------ */
/* stats                                                                    */

typedef struct stats {
  long long requests, effects, duplicates, rejections, conflicts, invalid, aborted, errors, dropped;
  long long commits;
} stats;

static long long field(const char *json, const char *name) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", name);
  const char *p = strstr(json, pat);
  cr_assert_not_null(p, "no %s in %s", name, json);
  return strtoll(p + strlen(pat), NULL, 10);
}

static stats get_stats(const char *db) {
  const char *argv[] = {WEIR_BINARY, "receiver", "stats", "--db", db, "--json", NULL};
  char *out = NULL, *err = NULL;
  int rc = th_run(argv, NULL, &out, &err, TIMEOUT_S);
  cr_assert_eq(rc, 0, "stats: exit %d: %s", rc, err);
  stats s = {field(out, "requests"),   field(out, "effects"),   field(out, "duplicates"),
             field(out, "rejections"), field(out, "conflicts"), field(out, "invalid"),
             field(out, "aborted"),    field(out, "errors"),    field(out, "acks_dropped"),
             field(out, "commits")};
  cr_assert(strncmp(out, "{\"requests\": ", 13) == 0, "stats --json starts with requests: %s", out);
  /* Every request is accounted for. */
  cr_assert_eq(s.requests,
               s.effects + s.duplicates + s.rejections + s.conflicts + s.invalid + s.aborted +
                   s.errors + field(out, "fenced"),
               "%s", out);
  free(out);
  free(err);
  return s;
}

#define EXPECT(db, req, eff, dup, rej)                                                             \
  do {                                                                                             \
    stats s_ = get_stats(db);                                                                      \
    cr_assert_eq(s_.requests, req, "requests %lld, expected %d", s_.requests, req);                \
    cr_assert_eq(s_.effects, eff, "effects %lld, expected %d", s_.effects, eff);                   \
    cr_assert_eq(s_.duplicates, dup, "duplicates %lld, expected %d", s_.duplicates, dup);          \
    cr_assert_eq(s_.rejections, rej, "rejections %lld, expected %d", s_.rejections, rej);          \
  } while (0)

static char *run_weir(int *rc, char **err, const char *const args[]) {
  const char *argv[16] = {WEIR_BINARY};
  int n = 1;
  for (int i = 0; args[i] && n < 15; i++) argv[n++] = args[i];
  argv[n] = NULL;
  char *out = NULL;
  *rc = th_run(argv, g_dir, &out, err, TIMEOUT_S);
  return out;
}

/* ------------------------------------------------------------------------ */
/* Idempotency-Key                                                          */

TestSuite(receiver, .init = setup, .fini = teardown, .timeout = 120);

Test(receiver, first_key_replay_and_other_payload) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, NULL);
  resp a, b, c;
  POST_OK(r.port, "op-1", "7 1\n", &a);
  cr_assert_eq(a.status, 201, "%s", a.head);
  cr_assert_not(a.replayed);
  cr_assert(strstr(a.body, "\"effect\": 1") != NULL, "%s", a.body);
  EXPECT(db, 1, 1, 0, 0);

  POST_OK(r.port, "op-1", "7 1\n", &b); /* a retry */
  cr_assert_eq(b.status, 200, "%s", b.head);
  cr_assert(b.replayed, "no Idempotent-Replayed: true in %s", b.head);
  cr_assert_str_eq(b.body, a.body, "the replay is the stored first response");
  EXPECT(db, 2, 1, 1, 0);

  POST_OK(r.port, "op-1", "7 2\n", &c); /* same key, another payload */
  cr_assert_eq(c.status, 422, "%s", c.head);
  cr_assert_not(c.replayed);
  EXPECT(db, 3, 1, 1, 1);

  /* Another key is another operation. */
  POST_OK(r.port, "op-2", "7 2\n", &c);
  cr_assert_eq(c.status, 201);
  EXPECT(db, 4, 2, 1, 1);

  int rc;
  char *err = NULL;
  char *out = run_weir(&rc, &err, (const char *const[]){"receiver", "effects", "--db", db, NULL});
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_str_eq(out, "7 1\n7 2\n");
  free(out);
  free(err);
  out = run_weir(&rc, &err, (const char *const[]){"receiver", "stats", "--db", db, NULL});
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(strstr(out, "effects       2\n") && strstr(out, "duplicates    1"), "%s", out);
  free(out);
  free(err);

  stop(&r);
  EXPECT(db, 4, 2, 1, 1); /* and after it stopped */
  free(db);
  cr_assert_eq(th_leak_check(), 0);
}

Test(receiver, no_key_is_always_a_new_effect) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, NULL);
  for (int i = 1; i <= 3; i++) {
    resp a;
    POST_OK(r.port, NULL, "5 1\n", &a);
    cr_assert_eq(a.status, 201);
    char want[32];
    snprintf(want, sizeof want, "\"effect\": %d,", i);
    cr_assert(strstr(a.body, want) && strstr(a.body, "\"key\": null"), "%s", a.body);
  }
  EXPECT(db, 3, 3, 0, 0);
  stop(&r);
  free(db);
}

/* The payload hash is SHA-256 of the body (FIPS 180-2 vectors, one and two
 * blocks, the empty body, and a million 'a's near the 1 MiB limit). */
Test(receiver, payload_hash_is_sha256) {
  static const struct {
    const char *body;
    size_t repeat;
    const char *sha;
  } v[] = {
      {"", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, NULL);
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    size_t n = v[i].repeat * strlen(v[i].body);
    char *body = malloc(n + 1);
    cr_assert_not_null(body);
    for (size_t k = 0; k < v[i].repeat; k++)
      memcpy(body + k * strlen(v[i].body), v[i].body, strlen(v[i].body));
    resp a;
    /* With a key (the hash goes into the completion record) and without. */
    cr_assert_eq(post_n(r.port, "h", body, n, &a), 0);
    /* Each body differs, so the key "h" is refused after the first. */
    cr_assert_eq(a.status, i == 0 ? 201 : 422, "%zu: %s", i, a.head);
    if (i == 0) cr_assert(strstr(a.body, v[i].sha) != NULL, "%s", a.body);
    cr_assert_eq(post_n(r.port, NULL, body, n, &a), 0);
    free(body);
    cr_assert_eq(a.status, 201, "%zu: %s", i, a.head);
    cr_assert(strstr(a.body, v[i].sha) != NULL, "%zu: want %s in %s", i, v[i].sha, a.body);
  }
  stop(&r);
  free(db);
}

/* A request whose headers arrived holds its key until it is answered: a
 * second one gets 409 with Retry-After, and once the first is answered, the
 * retry gets the replay. "Expect: 100-continue" makes the order certain: the
 * receiver says "100 Continue" only after the first request claimed the key. */
Test(receiver, key_in_flight_gets_409) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, NULL);
  char head[1024];
  size_t hl = format_post(head, sizeof head, "slow", 4, "Expect: 100-continue\r\n");
  int fd = connect_to(r.port);
  cr_assert_geq(fd, 0);
  cr_assert_eq(send_all(fd, head, hl), 0);
  char cont[64] = {0};
  ssize_t n = recv(fd, cont, sizeof cont - 1, 0);
  cr_assert(n > 0 && strncmp(cont, "HTTP/1.1 100", 12) == 0, "no 100 Continue: '%s'", cont);

  resp b;
  POST_OK(r.port, "slow", "3 1\n", &b);
  cr_assert_eq(b.status, 409, "%s", b.head);
  cr_assert(b.retry_after, "no Retry-After in %s", b.head);
  EXPECT(db, 1, 0, 0, 0);

  resp a;
  cr_assert_eq(send_all(fd, "3 1\n", 4), 0);
  cr_assert_eq(read_response(fd, &a), 0);
  close(fd);
  cr_assert_eq(a.status, 201, "%s", a.head);

  POST_OK(r.port, "slow", "3 1\n", &b);
  cr_assert_eq(b.status, 200);
  cr_assert(b.replayed);
  EXPECT(db, 3, 1, 1, 0);
  cr_assert_eq(get_stats(db).conflicts, 1);
  stop(&r);
  free(db);
}

enum { RACERS = 8, ROUNDS = 10 };

typedef struct race {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go;
  int port;
  int round;
  int status[ROUNDS][RACERS];
  int replayed[ROUNDS][RACERS];
} race;

typedef struct racer {
  race *r;
  int i;
} racer;

static void *race_main(void *arg) {
  racer *me = arg;
  race *r = me->r;
  pthread_mutex_lock(&r->mu);
  while (!r->go) pthread_cond_wait(&r->cv, &r->mu);
  pthread_mutex_unlock(&r->mu);
  char key[32];
  snprintf(key, sizeof key, "race-%d", r->round);
  resp a;
  if (post(r->port, key, "9 9\n", &a) == 0) {
    r->status[r->round][me->i] = a.status;
    r->replayed[r->round][me->i] = a.replayed;
  } else {
    r->status[r->round][me->i] = -1;
  }
  return NULL;
}

/* RACERS concurrent requests with one key: exactly one effect; every other
 * request gets the replay or 409. */
Test(receiver, concurrent_requests_with_one_key_make_one_effect) {
  char *db = db_path("r.db");
  receiver rc;
  start(&rc, db, NULL);
  static race r;
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  r.port = rc.port;
  long long others = 0;
  for (r.round = 0; r.round < ROUNDS; r.round++) {
    pthread_t t[RACERS];
    racer who[RACERS];
    r.go = 0;
    for (int i = 0; i < RACERS; i++) {
      who[i] = (racer){&r, i};
      cr_assert_eq(pthread_create(&t[i], NULL, race_main, &who[i]), 0);
    }
    pthread_mutex_lock(&r.mu);
    r.go = 1;
    pthread_cond_broadcast(&r.cv);
    pthread_mutex_unlock(&r.mu);
    for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
    int created = 0;
    for (int i = 0; i < RACERS; i++) {
      int s = r.status[r.round][i];
      if (s == 201) {
        created++;
        continue;
      }
      cr_assert(s == 409 || (s == 200 && r.replayed[r.round][i]), "round %d racer %d: status %d",
                r.round, i, s);
      others++;
    }
    cr_assert_eq(created, 1, "round %d: %d requests created an effect", r.round, created);
  }
  stats s = get_stats(db);
  cr_assert_eq(s.requests, RACERS * ROUNDS);
  cr_assert_eq(s.effects, ROUNDS);
  cr_assert_eq(s.duplicates + s.conflicts, others);
  cr_assert_eq(s.rejections, 0);
  stop(&rc);
  free(db);
}

/* ------------------------------------------------------------------------ */
/* Retention, --no-dedup, lost acknowledgements                             */

Test(receiver, key_reused_after_retention_is_a_new_effect) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, (const char *const[]){"--retention", "1s", NULL});
  resp a;
  POST_OK(r.port, "k", "1 1\n", &a);
  cr_assert_eq(a.status, 201);
  POST_OK(r.port, "k", "1 1\n", &a);
  cr_assert_eq(a.status, 200, "within the retention: a replay");
  /* Waiting on the clock is the point here: the record must expire. */
  struct timespec ts = {.tv_sec = 1, .tv_nsec = 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  POST_OK(r.port, "k", "1 1\n", &a);
  cr_assert_eq(a.status, 201, "after the retention the key is forgotten: %s", a.head);
  cr_assert(strstr(a.body, "\"effect\": 2") != NULL, "%s", a.body);
  EXPECT(db, 3, 2, 1, 0);
  /* And the new record holds: a reuse with another payload is refused. */
  POST_OK(r.port, "k", "1 2\n", &a);
  cr_assert_eq(a.status, 422);
  EXPECT(db, 4, 2, 1, 1);
  stop(&r);
  free(db);
}

Test(receiver, no_dedup_applies_every_request) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, (const char *const[]){"--no-dedup", NULL});
  resp a;
  POST_OK(r.port, "k", "2 1\n", &a);
  cr_assert_eq(a.status, 201);
  POST_OK(r.port, "k", "2 1\n", &a);
  cr_assert_eq(a.status, 201);
  cr_assert_not(a.replayed);
  POST_OK(r.port, "k", "2 2\n", &a);
  cr_assert_eq(a.status, 201, "no payload check either");
  EXPECT(db, 3, 3, 0, 0);
  stop(&r);
  free(db);
}

/* Weir-Epoch: per job, the highest epoch seen wins; lower ones are refused
 * with 409 and Weir-Fenced, before the key is looked at, dedup or not. */
static void fencing(int no_dedup) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, no_dedup ? (const char *const[]){"--no-dedup", NULL} : NULL);
  resp a;
  const char *j1 = "Weir-Job: j\r\nWeir-Epoch: 1\r\n", *j2 = "Weir-Job: j\r\nWeir-Epoch: 2\r\n";
  cr_assert_eq(post_x(r.port, "k1", j1, "1 1\n", &a), 0);
  cr_assert_eq(a.status, 201, "%s", a.head);
  cr_assert_eq(post_x(r.port, "k2", j2, "1 2\n", &a), 0);
  cr_assert_eq(a.status, 201, "%s", a.head);
  cr_assert_eq(post_x(r.port, "k3", j1, "1 3\n", &a), 0); /* the stale owner */
  cr_assert_eq(a.status, 409, "%s", a.head);
  cr_assert(strstr(a.head, "Weir-Fenced: 2") != NULL, "%s", a.head);
  cr_assert(strstr(a.body, "fenced") != NULL, "%s", a.body);
  cr_assert_eq(post_x(r.port, "k1", j1, "1 1\n", &a), 0); /* even its own replay */
  cr_assert_eq(a.status, 409, "%s", a.head);
  cr_assert_eq(post_x(r.port, "k2", j2, "1 2\n", &a), 0); /* the same epoch passes */
  cr_assert_eq(a.status, no_dedup ? 201 : 200, "%s", a.head);
  cr_assert_eq(post_x(r.port, NULL, "Weir-Job: other\r\nWeir-Epoch: 1\r\n", "2 1\n", &a), 0);
  cr_assert_eq(a.status, 201, "another job has a fence of its own: %s", a.head);
  cr_assert_eq(post_x(r.port, NULL, NULL, "2 2\n", &a), 0);
  cr_assert_eq(a.status, 201, "no epoch, no fence: %s", a.head);
  cr_assert_eq(post_x(r.port, NULL, "Weir-Epoch: x1\r\n", "2 3\n", &a), 0);
  cr_assert_eq(a.status, 400, "%s", a.head);
  stats s = get_stats(db);
  cr_assert_eq(s.requests, 8);
  cr_assert_eq(s.effects, no_dedup ? 5 : 4);
  cr_assert_eq(s.invalid, 1);
  const char *argv[] = {WEIR_BINARY, "receiver", "stats", "--db", db, "--json", NULL};
  char *out = NULL;
  cr_assert_eq(th_run(argv, NULL, &out, NULL, TIMEOUT_S), 0);
  cr_assert_eq(field(out, "fenced"), 2, "%s", out);
  cr_assert_eq(field(out, "repeated_payloads"), 2, "%s", out);
  cr_assert_eq(field(out, "repeated_effects"), no_dedup ? 1 : 0, "%s", out);
  free(out);
  stop(&r);
  free(db);
}

Test(receiver, stale_epoch_is_fenced) {
  fencing(0);
}

Test(receiver, stale_epoch_is_fenced_without_dedup_too) {
  fencing(1);
}

Test(receiver, dropped_ack_applies_the_effect_and_the_retry_replays) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, (const char *const[]){"--drop-acks", "1.0", "--seed", "7", NULL});
  cr_assert(strstr(r.err, "seed 7") != NULL, "%s", r.err);
  resp a;
  POST_OK(r.port, "op", "4 1\n", &a);
  cr_assert_eq(a.status, 0, "expected no response, got: %s", a.head);
  stats s = get_stats(db);
  cr_assert_eq(s.requests, 1);
  cr_assert_eq(s.effects, 1);
  cr_assert_eq(s.dropped, 1);

  POST_OK(r.port, "op", "4 1\n", &a); /* the sink's retry */
  cr_assert_eq(a.status, 200, "%s", a.head);
  cr_assert(a.replayed);
  EXPECT(db, 2, 1, 1, 0);

  POST_OK(r.port, NULL, "4 2\n", &a); /* without a key: applied, unanswered */
  cr_assert_eq(a.status, 0);
  EXPECT(db, 3, 2, 1, 0);
  cr_assert_eq(get_stats(db).dropped, 2);
  stop(&r);
  free(db);
}

/* ------------------------------------------------------------------------ */
/* --latency and --fsync                                                    */

enum { SHOTS = 32 };

/* SHOTS requests sent at once, each on its own thread and connection. */
typedef struct volley {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go;
  int port;
  const char *prefix;
  int status[SHOTS];
  int replayed[SHOTS];
  long ms[SHOTS]; /* from connect to the end of the answer */
} volley;

typedef struct shooter {
  volley *v;
  int i;
} shooter;

static long mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void *shoot(void *arg) {
  shooter *me = arg;
  volley *v = me->v;
  pthread_mutex_lock(&v->mu);
  while (!v->go) pthread_cond_wait(&v->cv, &v->mu);
  pthread_mutex_unlock(&v->mu);
  char key[64], body[64];
  snprintf(key, sizeof key, "%s-%d", v->prefix, me->i);
  snprintf(body, sizeof body, "%s %d\n", v->prefix, me->i);
  resp a;
  long t0 = mono_ms();
  int rc = post(v->port, key, body, &a);
  v->ms[me->i] = mono_ms() - t0;
  v->status[me->i] = rc == 0 ? a.status : -1;
  v->replayed[me->i] = rc == 0 && a.replayed;
  return NULL;
}

/* POSTs "PREFIX i\n" with key "PREFIX-i" for i < SHOTS, all at once (the
 * threads are started first, then released together). Returns the wall time
 * in ms from their release to the last answer. */
static long fire(volley *v, int port, const char *prefix) {
  memset(v, 0, sizeof *v);
  pthread_mutex_init(&v->mu, NULL);
  pthread_cond_init(&v->cv, NULL);
  v->port = port;
  v->prefix = prefix;
  pthread_t t[SHOTS];
  shooter who[SHOTS];
  for (int i = 0; i < SHOTS; i++) {
    who[i] = (shooter){v, i};
    cr_assert_eq(pthread_create(&t[i], NULL, shoot, &who[i]), 0);
  }
  long t0 = mono_ms();
  pthread_mutex_lock(&v->mu);
  v->go = 1;
  pthread_cond_broadcast(&v->cv);
  pthread_mutex_unlock(&v->mu);
  for (int i = 0; i < SHOTS; i++) pthread_join(t[i], NULL);
  long wall = mono_ms() - t0;
  pthread_mutex_destroy(&v->mu);
  pthread_cond_destroy(&v->cv);
  return wall;
}

/* Requests wait out their delay side by side: 32 requests with 100 ms each
 * take far less than 32 x 100 ms (a receiver that slept holding its database
 * would take 3.2 s), and each one at least the 100 ms. */
Test(receiver, latency_delays_each_answer_and_requests_wait_concurrently) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, (const char *const[]){"--latency", "100", NULL});
  cr_assert(strstr(r.err, "synchronous=NORMAL") != NULL, "%s", r.err);
  static volley v;
  long wall = fire(&v, r.port, "lat");
  for (int i = 0; i < SHOTS; i++) {
    cr_assert_eq(v.status[i], 201, "request %d: %d", i, v.status[i]);
    cr_assert_geq(v.ms[i], 100, "request %d answered after %ld ms", i, v.ms[i]);
  }
  cr_assert_lt(wall, SHOTS * 100 / 4, "%d requests with 100 ms each took %ld ms", SHOTS, wall);
  EXPECT(db, SHOTS, SHOTS, 0, 0);
  /* Replays wait too, and are still replays. */
  resp a;
  long t0 = mono_ms();
  POST_OK(r.port, "lat-3", "lat 3\n", &a);
  cr_assert_eq(a.status, 200, "%s", a.head);
  cr_assert(a.replayed);
  cr_assert_geq(mono_ms() - t0, 100);
  stop(&r);
  free(db);
}

/* --latency 100:300: every delay in [100, 400] ms, and they differ. The upper
 * bound gets a slack for a loaded machine; the spread shows the jitter (32
 * uniform draws all within 100 ms of each other: p < 1e-13). */
Test(receiver, latency_jitter_stays_within_its_bounds) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, (const char *const[]){"--latency", "100:300", NULL});
  static volley v;
  fire(&v, r.port, "jit");
  long lo = 1L << 30, hi = 0;
  for (int i = 0; i < SHOTS; i++) {
    cr_assert_eq(v.status[i], 201, "request %d: %d", i, v.status[i]);
    if (v.ms[i] < lo) lo = v.ms[i];
    if (v.ms[i] > hi) hi = v.ms[i];
  }
  cr_assert_geq(lo, 100, "fastest answer after %ld ms", lo);
  cr_assert_lt(hi, 400 + 600, "slowest answer after %ld ms", hi);
  cr_assert_geq(hi - lo, 100, "answers between %ld and %ld ms: no jitter?", lo, hi);
  EXPECT(db, SHOTS, SHOTS, 0, 0);
  stop(&r);
  free(db);
}

/* The delay comes after the commit: a receiver killed during it has applied
 * the effect and never answered; the client's retry after a restart is a
 * replay, not a second effect. */
Test(receiver, kill_during_the_delay_leaves_an_applied_unanswered_request) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, (const char *const[]){"--latency", "30000", NULL});
  char head[1024];
  size_t hl = format_post(head, sizeof head, "slow", 4, NULL);
  int fd = connect_to(r.port);
  cr_assert_geq(fd, 0);
  cr_assert_eq(send_all(fd, head, hl), 0);
  cr_assert_eq(send_all(fd, "6 1\n", 4), 0);
  /* The commit is what the test waits for (30 s of delay leave it time). */
  stats s = {0};
  for (int i = 0; i < TIMEOUT_S * 20 && s.effects == 0; i++) {
    s = get_stats(db);
    if (s.effects == 0) nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
  }
  cr_assert_eq(s.effects, 1, "the effect was never committed");
  cr_assert_eq(kill(r.pid, SIGKILL), 0);
  int st = 0;
  cr_assert_eq(waitpid(r.pid, &st, 0), r.pid);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "0x%x", st);
  g_pid = 0;
  close(r.err_fd);
  resp a;
  cr_assert_eq(read_response(fd, &a), 0);
  close(fd);
  cr_assert_eq(a.status, 0, "answered before the kill: %s", a.head);
  EXPECT(db, 1, 1, 0, 0);

  start(&r, db, NULL);
  POST_OK(r.port, "slow", "6 1\n", &a); /* the client's retry */
  cr_assert_eq(a.status, 200, "%s", a.head);
  cr_assert(a.replayed);
  EXPECT(db, 2, 1, 1, 0);
  stop(&r);
  free(db);
}

/* --fsync: synchronous=FULL, read back from SQLite by the receiver, and group
 * commit: while the first group is held 200 ms before its commit (failpoint),
 * the others queue and commit together, so there are fewer commits than
 * requests (a transaction per request would make them equal). Every request
 * is applied once; the retries are replays. */
Test(receiver, fsync_group_commit_applies_each_request_once) {
  char *db = db_path("r.db");
  receiver r;
  start_fp(&r, db, (const char *const[]){"--fsync", NULL}, "receiver.group_commit=delay:200");
  cr_assert(strstr(r.err, "synchronous=FULL") != NULL, "%s", r.err);
  static volley v;
  fire(&v, r.port, "fs");
  for (int i = 0; i < SHOTS; i++) cr_assert_eq(v.status[i], 201, "request %d: %d", i, v.status[i]);
  stats s = get_stats(db);
  cr_assert_eq(s.requests, SHOTS);
  cr_assert_eq(s.effects, SHOTS);
  cr_assert_lt(s.commits, SHOTS, "%lld commits for %d requests", s.commits, SHOTS);
  cr_assert_geq(s.commits, 1);
  fire(&v, r.port, "fs");
  for (int i = 0; i < SHOTS; i++)
    cr_assert(v.status[i] == 200 && v.replayed[i], "retry %d: %d", i, v.status[i]);
  EXPECT(db, 2 * SHOTS, SHOTS, SHOTS, 0);
  const char *argv[] = {WEIR_BINARY, "receiver", "stats", "--db", db, "--json", NULL};
  char *out = NULL;
  cr_assert_eq(th_run(argv, NULL, &out, NULL, TIMEOUT_S), 0);
  cr_assert_eq(field(out, "repeated_effects"), 0, "%s", out);
  free(out);
  stop(&r);
  free(db);
}

/* One request of a group fails (failpoint after its writes): it alone is
 * rolled back and answered 500; the rest of its group commits. Its retry is
 * then a new effect: nothing of it was left behind. */
Test(receiver, a_failed_request_leaves_the_rest_of_its_group_committed) {
  char *db = db_path("r.db");
  receiver r;
  start_fp(&r, db, NULL, "receiver.group_commit=delay:200,receiver.request=error@3");
  static volley v;
  fire(&v, r.port, "g");
  int failed = -1;
  for (int i = 0; i < SHOTS; i++) {
    if (v.status[i] == 500) {
      cr_assert_eq(failed, -1, "requests %d and %d failed", failed, i);
      failed = i;
      continue;
    }
    cr_assert_eq(v.status[i], 201, "request %d: %d", i, v.status[i]);
  }
  cr_assert_geq(failed, 0, "the failpoint did not fire");
  stats s = get_stats(db);
  cr_assert_eq(s.effects, SHOTS - 1);
  cr_assert_eq(s.errors, 1);
  cr_assert_lt(s.commits, s.requests, "%lld commits for %lld requests", s.commits, s.requests);
  char key[32], body[32];
  snprintf(key, sizeof key, "g-%d", failed);
  snprintf(body, sizeof body, "g %d\n", failed);
  resp a;
  POST_OK(r.port, key, body, &a);
  cr_assert_eq(a.status, 201, "%s", a.head);
  s = get_stats(db);
  cr_assert_eq(s.effects, SHOTS);
  cr_assert_eq(s.duplicates, 0);
  stop(&r);
  free(db);
}

/* ------------------------------------------------------------------------ */
/* Bad input                                                                */

static stats wait_aborted(const char *db, long long n) {
  for (int i = 0; i < TIMEOUT_S * 20; i++) {
    stats s = get_stats(db);
    if (s.aborted >= n) return s;
    struct timespec ts = {.tv_nsec = 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  cr_assert_fail("the aborted upload was never logged");
  return (stats){0};
}

Test(receiver, survives_garbage_and_refuses_bad_requests) {
  char *db = db_path("r.db");
  receiver r;
  start(&r, db, NULL);
  resp a;
  static const char garbage[] = "\x01\x02\xff\xfe not http at all\r\n\r\n\x00\x00";
  raw(r.port, garbage, sizeof garbage, &a);
  cr_assert(a.status == 0 || (a.status >= 400 && a.status < 500), "%d", a.status);
  /* Half a head, then the client goes: never a request. */
  static const char halfhead[] = "POST /x HTTP/1.1\r\nHost";
  int fd = connect_to(r.port);
  cr_assert_geq(fd, 0);
  cr_assert_eq(send_all(fd, halfhead, sizeof halfhead - 1), 0);
  close(fd);

  /* An upload cut off: a request, aborted, no effect. */
  fd = connect_to(r.port);
  cr_assert_geq(fd, 0);
  static const char cut[] = "POST /x HTTP/1.1\r\nHost: x\r\nIdempotency-Key: cut\r\n"
                            "Content-Length: 100\r\n\r\nonly a part";
  cr_assert_eq(send_all(fd, cut, sizeof cut - 1), 0);
  close(fd);
  wait_aborted(db, 1);

  static const char get[] = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  raw(r.port, get, sizeof get - 1, &a);
  cr_assert_eq(a.status, 405);
  static const char huge[] = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1048577\r\n"
                             "Connection: close\r\n\r\n";
  raw(r.port, huge, sizeof huge - 1, &a);
  cr_assert_eq(a.status, 413);
  char longkey[300];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = '\0';
  POST_OK(r.port, longkey, "1 1\n", &a);
  cr_assert_eq(a.status, 400);

  /* A body over 1 MiB without Content-Length (chunked). */
  fd = connect_to(r.port);
  cr_assert_geq(fd, 0);
  static const char chunked[] = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                "Connection: close\r\n\r\n";
  cr_assert_eq(send_all(fd, chunked, sizeof chunked - 1), 0);
  static char chunk[64 * 1024 + 16];
  int cl = snprintf(chunk, sizeof chunk, "%x\r\n", 64 * 1024);
  memset(chunk + cl, 'x', 64 * 1024);
  memcpy(chunk + cl + 64 * 1024, "\r\n", 2);
  for (int i = 0; i < 17; i++) cr_assert_eq(send_all(fd, chunk, (size_t)cl + 64 * 1024 + 2), 0);
  cr_assert_eq(send_all(fd, "0\r\n\r\n", 5), 0);
  cr_assert_eq(read_response(fd, &a), 0);
  close(fd);
  cr_assert_eq(a.status, 413);

  /* Still serving, and the cut-off key was released. */
  POST_OK(r.port, "cut", "1 1\n", &a);
  cr_assert_eq(a.status, 201, "%s", a.head);
  stats s = get_stats(db);
  cr_assert_eq(s.effects, 1);
  cr_assert_eq(s.aborted, 1);
  cr_assert_eq(s.invalid, 4, "405, 413, 400, 413: %lld", s.invalid);
  cr_assert_eq(s.requests, 6);
  stop(&r);
  free(db);
}

Test(receiver, usage_and_database_errors) {
  static const char *const usage[][8] = {
      {"receiver", NULL},
      {"receiver", "--db", "x.db", NULL},
      {"receiver", "--listen", "127.0.0.1:0", NULL},
      {"receiver", "--listen", "nonsense", "--db", "x.db", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--retention", "10", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--drop-acks", "1.5", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--seed", "-1", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--bogus", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--latency", "x", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--latency", "-1", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--latency", "10:", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--latency", "10:5x", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--latency", "60001", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--latency", "1:60001", NULL},
      {"receiver", "--listen", "127.0.0.1:0", "--db", "x.db", "--fsync=1", NULL},
      {"receiver", "stats", NULL},
      {"receiver", "stats", "--db", "x.db", "--no-dedup", NULL},
  };
  for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
    int rc;
    char *err = NULL;
    char *out = run_weir(&rc, &err, usage[i]);
    cr_assert_eq(rc, 2, "case %zu: exit %d: %s", i, rc, err);
    cr_assert(strstr(err, "weir help receiver") != NULL, "case %zu: %s", i, err);
    free(out);
    free(err);
  }
  int rc;
  char *err = NULL;
  char *out = run_weir(&rc, &err, (const char *const[]){"help", "receiver", NULL});
  cr_assert_eq(rc, 0);
  cr_assert(strstr(out, "Idempotent-Replayed") != NULL);
  cr_assert(strstr(out, "--latency MS[:JITTER]") && strstr(out, "--fsync"), "%s", out);
  free(out);
  free(err);

  char *missing = db_path("missing.db");
  out = run_weir(&rc, &err, (const char *const[]){"receiver", "stats", "--db", missing, NULL});
  cr_assert_eq(rc, 1, "%s", err);
  free(out);
  free(err);
  char *notdb = db_path("notdb");
  cr_assert_eq(th_write_file(notdb, "hello, this is not SQLite at all, not at all\n", 46), 0);
  out = run_weir(&rc, &err, (const char *const[]){"receiver", "stats", "--db", notdb, NULL});
  cr_assert_eq(rc, 3, "%d: %s", rc, err);
  free(out);
  free(err);
  out = run_weir(&rc, &err,
                 (const char *const[]){"receiver", "--listen", "127.0.0.1:0", "--db", notdb, NULL});
  cr_assert_eq(rc, 3, "%d: %s", rc, err);
  free(out);
  free(err);
  free(missing);
  free(notdb);
}
