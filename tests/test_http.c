/* tests/test_http.c: the HTTP endpoint of a running job (`weir run ...
 * --http`, jobs/http.c) end to end with the weir binary: /metrics parsed as
 * Prometheus text and checked against --summary-json, the JSON API while
 * the job runs, the security rules (tokens, loopback, the Host header, no
 * CORS), the files in the state directory, and the dashboard page rendered
 * by headless Chromium.
 *
 * DESIGN. Each test starts a counter job paced by --rate (a few seconds)
 * in its own directory and finds the endpoint through DIR/http, which the
 * run writes once it holds the directory's lease. Requests go over a plain
 * socket (HTTP/1.1, Connection: close) so that the test controls every
 * header, Host included. The Prometheus text is checked by a small parser
 * in Python (python3) written out by the test: every line a comment or a
 * well-formed sample, every sample of a declared family, no series twice,
 * histogram buckets cumulative; then its records and counters per operator
 * subtask are compared with the run's summary. For a scrape that equals
 * the summary, the run is held after its end by the failpoint
 * cli.reporting=delay (the endpoint still serves, the summary is written
 * after it): the test waits for the state "finished" and scrapes then.
 *
 * The program runs its tests one at a time (crash_main forces Criterion's
 * --jobs 1): they time the job's processes, and under AddressSanitizer
 * Criterion's runner itself leaks a small block when the browser test
 * runs beside another.
 *
 * The browser test runs Debian's `chromium` (--headless; as root it also
 * needs --no-sandbox), dumps the DOM after the page polled the API (with a
 * virtual time budget) and saves a screenshot in the build directory. It
 * skips with a message where Chromium is not installed, and fails then
 * under CI=true.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crash.h"
#include "helpers.h"

#ifndef WEIR_TEST_OUT
#define WEIR_TEST_OUT "."
#endif

/* ---- a job with an endpoint ------------------------------------------------- */

typedef struct job {
  char *dir;
  char state[512], addr[128], errpath[600];
  pid_t pid;
} job;

static void path_in(const job *j, const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s", j->dir, name);
}

static void job_init(job *j) {
  memset(j, 0, sizeof *j);
  j->dir = th_tmpdir();
  cr_assert_not_null(j->dir);
  path_in(j, "state", j->state, sizeof j->state);
  path_in(j, "stderr", j->errpath, sizeof j->errpath);
}

/* Starts argv (a weir run with --http and --state-dir j->state) and waits
 * for DIR/http. */
static void job_spawn(job *j, const char *const argv[], const char *failpoints) {
  j->pid = th_spawn(argv, j->dir, failpoints, j->errpath);
  cr_assert_gt(j->pid, 0);
  char http[600];
  snprintf(http, sizeof http, "%s/http", j->state);
  for (int waited = 0;; waited += 10) {
    char *a = th_read_file(http, NULL);
    if (a && strchr(a, '\n')) {
      *strchr(a, '\n') = '\0';
      snprintf(j->addr, sizeof j->addr, "%s", a);
      free(a);
      return;
    }
    free(a);
    int st;
    if (waitpid(j->pid, &st, WNOHANG) == j->pid) {
      char *err = th_read_file(j->errpath, NULL);
      cr_assert_fail("the job ended before writing DIR/http:\n%s", err ? err : "");
    }
    cr_assert_lt(waited, 30000, "no DIR/http after 30 s");
    th_sleep_ms(10);
  }
}

/* Starts `weir run NAME ... --http 127.0.0.1:0` (a built-in job) with extra
 * arguments (NULL-terminated), and waits for DIR/http. */
static void job_start_named(job *j, const char *name, const char *failpoints,
                            const char *const extra[]) {
  job_init(j);
  char sink[600], summary[600];
  snprintf(sink, sizeof sink, "file:%s/out", j->dir);
  snprintf(summary, sizeof summary, "%s/summary.json", j->dir);
  const char *argv[40] = {
      WEIR_BINARY, "run",    name,         "--workers",      "2",     "--state-dir",
      j->state,    "--sink", sink,         "--summary-json", summary, "--checkpoint-interval",
      "100",       "--http", "127.0.0.1:0"};
  int n = 15;
  for (int i = 0; extra && extra[i]; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  job_spawn(j, argv, failpoints);
}

static void job_start(job *j, const char *failpoints, const char *const extra[]) {
  job_start_named(j, "counter", failpoints, extra);
}

/* Waits for the job's exit (SIGKILL after timeout_s); returns its code. */
static int job_wait(job *j, int timeout_s) {
  int st = 0;
  for (int waited = 0; waited < timeout_s * 1000; waited += 10) {
    if (waitpid(j->pid, &st, WNOHANG) == j->pid) {
      j->pid = 0;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    th_sleep_ms(10);
  }
  kill(-j->pid, SIGKILL);
  waitpid(j->pid, &st, 0);
  j->pid = 0;
  return -1;
}

static void job_end(job *j) {
  if (j->pid > 0) {
    kill(-j->pid, SIGKILL);
    waitpid(j->pid, NULL, 0);
  }
  th_rmrf(j->dir);
  free(j->dir);
}

/* ---- HTTP over a socket ------------------------------------------------------- */

typedef struct resp {
  int status;
  char *head, *body; /* head: the status line and headers */
} resp;

static void resp_free(resp *r) {
  free(r->head);
  r->head = r->body = NULL;
}

/* One request to addr ("HOST:PORT"); `headers` are extra header lines,
 * each ending in \r\n (NULL: none); Host is addr unless `host` says
 * otherwise. Returns 0, or -1 if the connection failed. */
static int request(const char *addr, const char *method, const char *path, const char *host,
                   const char *headers, resp *r) {
  memset(r, 0, sizeof *r);
  char h[128];
  snprintf(h, sizeof h, "%s", addr);
  char *colon = strrchr(h, ':');
  if (!colon) return -1;
  *colon = '\0';
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(h, colon + 1, &hints, &ai) != 0) return -1;
  int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
  if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return -1;
  }
  freeaddrinfo(ai);
  char req[2048];
  int n = snprintf(req, sizeof req,
                   "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: 0\r\n%s\r\n",
                   method, path, host ? host : addr, headers ? headers : "");
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  size_t len = 0, cap = 1 << 16;
  char *buf = malloc(cap);
  for (;;) {
    if (len + 1 >= cap) buf = realloc(buf, cap *= 2);
    ssize_t got = read(fd, buf + len, cap - len - 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    len += (size_t)got;
  }
  close(fd);
  buf[len] = '\0';
  r->head = buf;
  if (sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) return -1;
  char *sep = strstr(buf, "\r\n\r\n");
  if (!sep) return -1;
  *sep = '\0';
  r->body = sep + 4;
  return 0;
}

/* Whether head has a header line starting with `prefix` (any case). */
static int has_header(const char *head, const char *prefix) {
  for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n"))
    if (strncasecmp(l + 2, prefix, strlen(prefix)) == 0) return 1;
  return 0;
}

static resp get_ok(const job *j, const char *path) {
  resp r;
  cr_assert_eq(request(j->addr, "GET", path, NULL, NULL, &r), 0, "GET %s failed", path);
  cr_assert_eq(r.status, 200, "GET %s: %d %s", path, r.status, r.body);
  return r;
}

/* ---- the Prometheus parser --------------------------------------------------- */

static const char prom_check_py[] =
    "import json, math, re, sys\n"
    "text = open(sys.argv[1]).read()\n"
    "summary = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else None\n"
    "NAME = r'[a-zA-Z_:][a-zA-Z0-9_:]*'\n"
    "LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\\\n]|\\\\[\\\\\"n])*)\"'\n"
    "errors, types, series, samples = [], {}, set(), []\n"
    "if not text.endswith('\\n'): errors.append('no final newline')\n"
    "for no, line in enumerate(text.split('\\n')[:-1], 1):\n"
    "    if line.startswith('#'):\n"
    "        m = re.fullmatch(r'# (HELP|TYPE) (' + NAME + r') (.+)', line)\n"
    "        if not m: errors.append('%d: bad comment: %s' % (no, line)); continue\n"
    "        if m.group(1) == 'TYPE':\n"
    "            if m.group(3) not in ('counter', 'gauge', 'histogram', 'summary', 'untyped'):\n"
    "                errors.append('%d: bad type %s' % (no, m.group(3)))\n"
    "            if m.group(2) in types: errors.append('%d: %s typed twice' % (no, m.group(2)))\n"
    "            types[m.group(2)] = m.group(3)\n"
    "        continue\n"
    "    m = re.fullmatch(r'(' + NAME + r')(?:\\{(' + LABEL + r'(?:,' + LABEL + r')*)\\})? "
    "(\\S+)', "
    "line)\n"
    "    if not m: errors.append('%d: bad sample: %s' % (no, line)); continue\n"
    "    name, value = m.group(1), m.group(m.lastindex)\n"
    "    labels = dict(re.findall(LABEL, m.group(2) or ''))\n"
    "    try: v = float(value)\n"
    "    except ValueError: errors.append('%d: bad value %s' % (no, value)); continue\n"
    "    fam = name\n"
    "    for suf in ('_bucket', '_sum', '_count'):\n"
    "        if name.endswith(suf) and types.get(name[:-len(suf)]) == 'histogram': fam = "
    "name[:-len(suf)]\n"
    "    if fam not in types: errors.append('%d: %s has no TYPE before it' % (no, name))\n"
    "    if not name.startswith('weir_'): errors.append('%d: %s is not weir_*' % (no, name))\n"
    "    if 'job' not in labels: errors.append('%d: %s without a job label' % (no, name))\n"
    "    if types.get(fam) == 'counter' and (v < 0 or math.isnan(v)): errors.append('%d: counter "
    "%s < 0' % (no, name))\n"
    "    key = (name, tuple(sorted(labels.items())))\n"
    "    if key in series: errors.append('%d: series twice: %s' % (no, line))\n"
    "    series.add(key)\n"
    "    samples.append((name, labels, v))\n"
    "for fam, t in types.items():\n"
    "    if t != 'histogram': continue\n"
    "    b = [(s[1]['le'], s[2]) for s in samples if s[0] == fam + '_bucket']\n"
    "    c = [s[2] for s in samples if s[0] == fam + '_count']\n"
    "    if not b or b[-1][0] != '+Inf' or len(c) != 1 or b[-1][1] != c[0]: errors.append('%s: "
    "buckets end wrong' % fam)\n"
    "    if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)): errors.append('%s: buckets not "
    "cumulative' % fam)\n"
    "def one(name, **want):\n"
    "    got = [s[2] for s in samples if s[0] == name and all(s[1].get(k) == str(v) for k, v in "
    "want.items())]\n"
    "    if len(got) != 1: errors.append('%s %s: %d samples' % (name, want, len(got))); return "
    "None\n"
    "    return got[0]\n"
    "for need in ('weir_operator_busy_seconds_total', "
    "'weir_operator_backpressured_seconds_total', 'weir_checkpoint_duration_seconds', "
    "'weir_checkpoint_size_bytes', 'weir_checkpoint_alignment_seconds', 'weir_lease_epoch', "
    "'weir_process_cpu_seconds_total', 'weir_checkpoint_last_id', 'weir_job_info'):\n"
    "    if need not in types: errors.append('no family ' + need)\n"
    "if summary:\n"
    "    st = [s[1].get('state') for s in samples if s[0] == 'weir_job_info']\n"
    "    if st != ['finished']: errors.append('state %s, not finished' % st)\n"
    "    compared = 0\n"
    "    for op in summary['operators']:\n"
    "        for i, sub in enumerate(op['subtasks']):\n"
    "            for key, metric in (('records_in', 'weir_operator_records_in_total'), "
    "('records_out', 'weir_operator_records_out_total')):\n"
    "                v = one(metric, operator=op['name'], subtask=i)\n"
    "                compared += 1\n"
    "                if v is not None and v != sub[key]: errors.append('%s %s/%d: %s, summary %d' "
    "% (metric, op['name'], i, v, sub[key]))\n"
    "            for k, n in sub['counters'].items():\n"
    "                v = one('weir_operator_counter_total', operator=op['name'], subtask=i, "
    "counter=k)\n"
    "                compared += 1\n"
    "                if v is not None and v != n: errors.append('counter %s %s/%d: %s, summary %d' "
    "% (k, op['name'], i, v, n))\n"
    "    busy = sum(s[2] for s in samples if s[0] == 'weir_operator_busy_seconds_total')\n"
    "    if not busy > 0: errors.append('no busy time at all')\n"
    "    ck = one('weir_checkpoints_completed_total')\n"
    "    if not ck: errors.append('no checkpoint counted')\n"
    "    print('compared %d figures with the summary' % compared)\n"
    "print('%d samples, %d families' % (len(samples), len(types)))\n"
    "for e in errors[:40]: print('error:', e)\n"
    "sys.exit(1 if errors else 0)\n";

/* Runs the parser over the text in `metrics` (and the summary, if not
 * NULL); returns its exit code, its output in *out. */
static int prom_check(const job *j, const char *metrics, const char *summary, char **out) {
  char py[600], txt[600];
  path_in(j, "prom_check.py", py, sizeof py);
  path_in(j, "metrics.txt", txt, sizeof txt);
  cr_assert_eq(th_write_file(py, prom_check_py, strlen(prom_check_py)), 0);
  cr_assert_eq(th_write_file(txt, metrics, strlen(metrics)), 0);
  const char *argv[] = {"/usr/bin/env", "python3", py, txt, summary, NULL};
  char *err = NULL;
  int rc = th_run(argv, NULL, out, &err, 60);
  if (rc != 0) fprintf(stderr, "prom_check: %s%s", *out ? *out : "", err ? err : "");
  free(err);
  return rc;
}

/* ---- tests --------------------------------------------------------------------- */

/* The JSON API while the job runs, then, held after its end, /metrics
 * against the summary. */
Test(http, metrics_and_api_agree_with_summary, .timeout = 120) {
  job j;
  const char *extra[] = {"--records", "150k", "--keys", "1000", "--rate", "100k", NULL};
  job_start(&j, "cli.reporting=delay:5000", extra);

  resp r = get_ok(&j, "/api/v1/job");
  cr_expect(strstr(r.body, "\"state\": \"running\""), "not running: %s", r.body);
  cr_expect(strstr(r.body, "\"name\": \"gen\""), "%s", r.body);
  cr_expect(strstr(r.body, "\"name\": \"count\""), "%s", r.body);
  cr_expect(strstr(r.body, "\"partitioning\": \"hash\""), "%s", r.body);
  cr_expect(strstr(r.body, "\"chained\": true"), "count and sink are one chain: %s", r.body);
  cr_expect(strstr(r.body, "\"total_records\": 150000"), "%s", r.body);
  resp_free(&r);
  /* A checkpoint while it runs, in the history. */
  int seen = 0;
  for (int i = 0; i < 300 && !seen; i++) {
    r = get_ok(&j, "/api/v1/checkpoints");
    seen = strstr(r.body, "\"duration_ms\"") != NULL;
    resp_free(&r);
    if (!seen) th_sleep_ms(10);
  }
  cr_expect(seen, "no checkpoint in /api/v1/checkpoints while the job ran");
  r = get_ok(&j, "/api/v1/metrics");
  cr_expect(strstr(r.body, "\"busy_ms\""), "%s", r.body);
  cr_expect(strstr(r.body, "\"counters\": {"), "%s", r.body);
  cr_expect(strstr(r.body, "\"rss_bytes\""), "%s", r.body);
  resp_free(&r);
  /* Mid-run text parses too. */
  r = get_ok(&j, "/metrics");
  cr_expect(strstr(r.head, "Content-Type: text/plain; version=0.0.4"), "%s", r.head);
  char *out = NULL;
  cr_expect_eq(prom_check(&j, r.body, NULL, &out), 0, "%s", out);
  free(out);
  resp_free(&r);

  /* The end: the run holds in cli.reporting; the endpoint still serves. */
  int finished = 0;
  for (int i = 0; i < 3000 && !finished; i++) {
    r = get_ok(&j, "/api/v1/job");
    finished = strstr(r.body, "\"state\": \"finished\"") != NULL;
    resp_free(&r);
    if (!finished) th_sleep_ms(10);
  }
  cr_assert(finished, "the job did not finish");
  resp m = get_ok(&j, "/metrics");
  cr_assert_eq(job_wait(&j, 60), 0, "exit code");
  char summary[600];
  path_in(&j, "summary.json", summary, sizeof summary);
  out = NULL;
  int rc = prom_check(&j, m.body, summary, &out);
  cr_expect_eq(rc, 0, "/metrics at the end disagrees with --summary-json:\n%s", out);
  /* Records in and out of 3 operators x 2 subtasks, and the sink's 8
   * counters per subtask at least. */
  const char *cmp = out ? strstr(out, "compared ") : NULL;
  cr_expect(cmp && atoi(cmp + 9) >= 12 + 16, "too few figures compared: %s", out);
  free(out);
  resp_free(&m);
  /* The files are gone with the endpoint. */
  char p[600];
  snprintf(p, sizeof p, "%s/http", j.state);
  cr_expect_neq(access(p, F_OK), 0, "DIR/http left behind");
  snprintf(p, sizeof p, "%s/http-token", j.state);
  cr_expect_neq(access(p, F_OK), 0, "DIR/http-token left behind");
  job_end(&j);
}

/* Mutating requests need the run's token; the Host header must name the
 * endpoint; no CORS headers. */
Test(http, tokens_host_and_cors, .timeout = 120) {
  job j;
  const char *extra[] = {"--records", "10M", "--keys", "1000", "--rate", "100k", NULL};
  job_start(&j, NULL, extra);
  char tpath[600];
  snprintf(tpath, sizeof tpath, "%s/http-token", j.state);
  struct stat sb;
  cr_assert_eq(stat(tpath, &sb), 0, "no DIR/http-token");
  cr_expect_eq(sb.st_mode & 0777, 0600, "DIR/http-token mode %o", (unsigned)(sb.st_mode & 0777));
  char *token = th_read_file(tpath, NULL);
  cr_assert_not_null(token);
  cr_assert_eq(strlen(token), 65, "a 32-byte hex token and a newline: '%s'", token);
  token[64] = '\0';

  resp r;
  /* Reads are open on loopback without --http-token. */
  r = get_ok(&j, "/metrics");
  resp_free(&r);
  /* POST without a token: 401; with another one: 403. */
  cr_assert_eq(request(j.addr, "POST", "/api/v1/stop", NULL, NULL, &r), 0);
  cr_expect_eq(r.status, 401, "%d %s", r.status, r.body);
  cr_expect(strstr(r.head, "WWW-Authenticate: Bearer"), "%s", r.head);
  resp_free(&r);
  cr_assert_eq(request(j.addr, "POST", "/api/v1/savepoints", NULL,
                       "Authorization: Bearer 0123456789abcdef0123456789abcdef\r\n", &r),
               0);
  cr_expect_eq(r.status, 403, "%d %s", r.status, r.body);
  resp_free(&r);
  cr_assert_eq(
      request(j.addr, "POST", "/api/v1/stop", NULL, "Authorization: Basic Zm9vOmJhcg==\r\n", &r),
      0);
  cr_expect_eq(r.status, 403, "%d %s", r.status, r.body);
  resp_free(&r);
  /* The right token gets through: a savepoint, its file named in the
   * answer; an unknown resource is 404. */
  char auth[200];
  snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token);
  cr_assert_eq(request(j.addr, "POST", "/api/v1/savepoints", NULL, auth, &r), 0);
  cr_expect_eq(r.status, 200, "%d %s", r.status, r.body);
  char want[700];
  snprintf(want, sizeof want, "\"path\": \"%s/savepoints/", j.state);
  const char *at = strstr(r.body, want);
  cr_expect_not_null(at, "%s", r.body);
  if (at) {
    char sp[700];
    snprintf(sp, sizeof sp, "%s", at + 9);
    sp[strcspn(sp, "\"")] = '\0';
    cr_expect_eq(access(sp, R_OK), 0, "savepoint file %s", sp);
  }
  resp_free(&r);
  cr_assert_eq(request(j.addr, "POST", "/api/v1/nothing", NULL, auth, &r), 0);
  cr_expect_eq(r.status, 404, "%d %s", r.status, r.body);
  resp_free(&r);

  /* Host: a DNS name (rebinding) or another port is refused; localhost
   * and IP literals with our port are not. */
  const char *port = strrchr(j.addr, ':') + 1;
  char host[200];
  snprintf(host, sizeof host, "attacker.example:%s", port);
  cr_assert_eq(request(j.addr, "GET", "/api/v1/job", host, NULL, &r), 0);
  cr_expect_eq(r.status, 400, "Host %s: %d", host, r.status);
  resp_free(&r);
  cr_assert_eq(request(j.addr, "POST", "/api/v1/stop", host, auth, &r), 0);
  cr_expect_eq(r.status, 400, "Host %s on a POST: %d", host, r.status);
  resp_free(&r);
  cr_assert_eq(request(j.addr, "GET", "/metrics", "127.0.0.1:1", NULL, &r), 0);
  cr_expect_eq(r.status, 400, "another port: %d", r.status);
  resp_free(&r);
  snprintf(host, sizeof host, "localhost:%s", port);
  cr_assert_eq(request(j.addr, "GET", "/metrics", host, NULL, &r), 0);
  cr_expect_eq(r.status, 200, "Host %s: %d", host, r.status);
  resp_free(&r);

  /* No CORS: a request from another origin gets no Access-Control header. */
  cr_assert_eq(
      request(j.addr, "GET", "/api/v1/metrics", NULL, "Origin: http://attacker.example\r\n", &r),
      0);
  cr_expect_eq(r.status, 200);
  cr_expect(!has_header(r.head, "Access-Control-"), "%s", r.head);
  resp_free(&r);
  cr_assert_eq(request(j.addr, "OPTIONS", "/api/v1/stop", NULL,
                       "Origin: http://attacker.example\r\nAccess-Control-Request-Method: POST\r\n",
                       &r),
               0);
  cr_expect_neq(r.status, 200, "a preflight must not succeed");
  cr_expect(!has_header(r.head, "Access-Control-"), "%s", r.head);
  resp_free(&r);
  cr_assert_eq(request(j.addr, "GET", "/nothing", NULL, NULL, &r), 0);
  cr_expect_eq(r.status, 404);
  resp_free(&r);

  /* SIGTERM: a clean stop, and the files go. */
  kill(j.pid, SIGTERM);
  cr_expect_eq(job_wait(&j, 60), 0);
  cr_expect_neq(access(tpath, F_OK), 0, "DIR/http-token left behind");
  free(token);
  job_end(&j);
}

/* --http-token FILE: every request but the page needs it. */
Test(http, token_file_guards_reads, .timeout = 120) {
  job j;
  char *dir = th_tmpdir();
  char tfile[600];
  snprintf(tfile, sizeof tfile, "%s/token", dir);
  const char *tok = "s3cret-token-of-the-operator";
  cr_assert_eq(th_write_file(tfile, tok, strlen(tok)), 0);
  const char *extra[] = {"--records", "10M",          "--keys", "1000", "--rate",
                         "100k",      "--http-token", tfile,    NULL};
  job_start(&j, NULL, extra);
  char tpath[600];
  snprintf(tpath, sizeof tpath, "%s/http-token", j.state);
  cr_expect_neq(access(tpath, F_OK), 0, "no token of its own with --http-token");
  resp r;
  cr_assert_eq(request(j.addr, "GET", "/metrics", NULL, NULL, &r), 0);
  cr_expect_eq(r.status, 401, "%d", r.status);
  resp_free(&r);
  cr_assert_eq(
      request(j.addr, "GET", "/api/v1/job", NULL, "Authorization: Bearer wrong-one\r\n", &r), 0);
  cr_expect_eq(r.status, 403, "%d", r.status);
  resp_free(&r);
  char auth[200];
  snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", tok);
  cr_assert_eq(request(j.addr, "GET", "/metrics", NULL, auth, &r), 0);
  cr_expect_eq(r.status, 200, "%d", r.status);
  resp_free(&r);
  /* The page holds no data: it loads without the token (and sends the
   * one in its #token= fragment with its requests). */
  cr_assert_eq(request(j.addr, "GET", "/", NULL, NULL, &r), 0);
  cr_expect_eq(r.status, 200, "%d", r.status);
  cr_expect(strstr(r.body, "<title>weir</title>"), "not the dashboard");
  resp_free(&r);
  /* Stop with a savepoint through the endpoint: its path, then a clean
   * exit. */
  cr_assert_eq(request(j.addr, "POST", "/api/v1/stop?savepoint=1", NULL, auth, &r), 0);
  cr_expect_eq(r.status, 200, "%d %s", r.status, r.body);
  cr_expect(strstr(r.body, "/savepoints/"), "%s", r.body);
  resp_free(&r);
  cr_expect_eq(job_wait(&j, 60), 0);
  job_end(&j);
  th_rmrf(dir);
  free(dir);
}

/* Event time: every subtask's watermark, and its lag, once watermarks
 * flow. */
Test(http, watermarks_of_event_time, .timeout = 120) {
  job j;
  const char *extra[] = {"--records", "10M",          "--keys", "1000", "--rate",
                         "100k",      "--event-rate", "100k",   NULL};
  job_start_named(&j, "windows", NULL, extra);
  resp r = {0};
  int seen = 0;
  for (int i = 0; i < 1000 && !seen; i++) {
    r = get_ok(&j, "/metrics");
    seen =
        strstr(r.body, "weir_operator_watermark_milliseconds{job=\"windows\",operator=\"window\","
                       "subtask=\"1\"} ") != NULL;
    if (!seen) {
      resp_free(&r);
      th_sleep_ms(10);
    }
  }
  cr_assert(seen, "no watermark of the window operator in /metrics");
  cr_expect(strstr(r.body, "weir_operator_watermark_lag_milliseconds{job=\"windows\""),
            "no watermark lag");
  const char *w = strstr(r.body, "operator=\"window\",subtask=\"1\"} ");
  cr_expect(w && atoll(strchr(w, '}') + 2) > 0, "the watermark did not move");
  char *out = NULL;
  cr_expect_eq(prom_check(&j, r.body, NULL, &out), 0, "%s", out);
  free(out);
  resp_free(&r);
  r = get_ok(&j, "/api/v1/metrics");
  int numeric = 0;
  for (const char *p = strstr(r.body, "\"watermark\": "); p && !numeric;
       p = strstr(p + 1, "\"watermark\": "))
    numeric = p[13] >= '0' && p[13] <= '9';
  cr_expect(numeric, "no watermark in /api/v1/metrics: %s", r.body);
  resp_free(&r);
  kill(j.pid, SIGTERM);
  cr_expect_eq(job_wait(&j, 60), 0);
  job_end(&j);
}

/* Credentials in names never reach an answer or a label: a job module
 * (tests/named_job.c) whose operators are named after its arguments. */
Test(http, credentials_redacted, .timeout = 120) {
  job j;
  job_init(&j);
  const char *sink = "out postgresql://alice:hunter2@db.example:5432/x?password=hunter2&user=alice";
  const char *op = "enrich https://bob:hunter3@api.example/v1?api_key=hunter4&mode=fast";
  const char *argv[] = {WEIR_BINARY, "run",         "--workers",
                        "2",         "--state-dir", j.state,
                        "--http",    "127.0.0.1:0", WEIR_JOBS_DIR "/named_job.so",
                        op,          sink,          NULL};
  job_spawn(&j, argv, NULL);
  const char *paths[] = {"/metrics", "/api/v1/job", "/api/v1/metrics", "/api/v1/checkpoints"};
  for (size_t i = 0; i < 4; i++) {
    resp r = get_ok(&j, paths[i]);
    cr_expect_null(strstr(r.body, "hunter"), "%s shows a credential:\n%s", paths[i], r.body);
    if (i < 3) {
      cr_expect(strstr(r.body, "postgresql://alice:***@db.example:5432/x?password=***&user=alice"),
                "%s: the sink's name not redacted as expected:\n%.3000s", paths[i], r.body);
      cr_expect(strstr(r.body, "https://bob:***@api.example/v1?api_key=***&mode=fast"),
                "%s: the operator's name not redacted as expected:\n%.3000s", paths[i], r.body);
    }
    resp_free(&r);
  }
  kill(j.pid, SIGTERM);
  cr_expect_eq(job_wait(&j, 60), 0);
  job_end(&j);
}

/* Usage errors: refused before the job runs, exit 2. */
Test(http, refused_at_start) {
  char *dir = th_tmpdir();
  char state[600];
  snprintf(state, sizeof state, "%s/state", dir);
  struct {
    const char *http, *token, *says;
  } cases[] = {
      {"0.0.0.0:0", NULL, "not a loopback address"},
      {"[::]:0", NULL, "not a loopback address"},
      {"127.0.0.1", NULL, "not HOST:PORT"},
      {"127.0.0.1:99999", NULL, "too large"},
      {NULL, "/nonexistent", "needs --http"},
      {"127.0.0.1:0", "/nonexistent/token", "cannot read"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *argv[16] = {WEIR_BINARY, "run", "counter", "--records", "1k", "--state-dir", state};
    int n = 7;
    if (cases[i].http) {
      argv[n++] = "--http";
      argv[n++] = cases[i].http;
    }
    if (cases[i].token) {
      argv[n++] = "--http-token";
      argv[n++] = cases[i].token;
    }
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = th_run(argv, dir, &out, &err, 60);
    cr_expect_eq(rc, 2, "%s %s: exit %d: %s", cases[i].http, cases[i].token, rc, err);
    cr_expect(strstr(err, cases[i].says), "%s: '%s' not in: %s", cases[i].http, cases[i].says, err);
    /* Nothing ran: no checkpoint store was made. */
    char store[700];
    snprintf(store, sizeof store, "%s/store", state);
    cr_expect_neq(access(store, F_OK), 0, "the job ran despite the refusal");
    free(out);
    free(err);
  }
  th_rmrf(dir);
  free(dir);
}

/* ---- the dashboard in a browser ------------------------------------------------- */

static const char *chromium_path(void) {
  static const char *const paths[] = {
      "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome",
      "/Applications/Chromium.app/Contents/MacOS/Chromium",
      "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"};
  const char *env = getenv("WEIR_CHROMIUM");
  if (env && *env) return env;
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
    if (access(paths[i], X_OK) == 0) return paths[i];
  return NULL;
}

/* Runs the browser headless on url with `what` (--dump-dom, or
 * --screenshot=PATH); returns its exit code, the DOM in *out. */
static int browse(const char *chrome, const char *profile, const char *what, const char *url,
                  char **out, char **err) {
  char prof[700];
  snprintf(prof, sizeof prof, "--user-data-dir=%s", profile);
  const char *argv[16] = {chrome,
                          "--headless",
                          "--disable-gpu",
                          "--no-first-run",
                          "--hide-scrollbars",
                          "--window-size=1280,1100",
                          "--virtual-time-budget=4000",
                          prof};
  int n = 8;
  /* As root Chromium refuses to start without --no-sandbox. */
  if (geteuid() == 0) argv[n++] = "--no-sandbox";
  argv[n++] = what;
  argv[n++] = url;
  argv[n] = NULL;
  return th_run(argv, NULL, out, err, 90);
}

Test(http, dashboard_in_chromium, .timeout = 180) {
  const char *chrome = chromium_path();
  if (!chrome) {
    cr_assert(!th_in_ci(), "Chromium is required under CI=true (Debian: apt-get install chromium)");
    cr_skip_test("Chromium is not installed (Debian: apt-get install chromium; as root it runs "
                 "with --no-sandbox): the dashboard's browser test is skipped");
  }
  job j;
  const char *extra[] = {"--records", "10M", "--keys", "1000", "--rate", "200k", NULL};
  job_start(&j, NULL, extra);
  /* A checkpoint first, so that the page has a row to show. */
  int seen = 0;
  for (int i = 0; i < 500 && !seen; i++) {
    resp r = get_ok(&j, "/api/v1/checkpoints");
    seen = strstr(r.body, "\"duration_ms\"") != NULL;
    resp_free(&r);
    if (!seen) th_sleep_ms(10);
  }
  cr_assert(seen, "no checkpoint completed");
  char url[200], profile[600];
  snprintf(url, sizeof url, "http://%s/", j.addr);
  path_in(&j, "chromium-profile", profile, sizeof profile);
  char *dom = NULL, *err = NULL;
  int rc = browse(chrome, profile, "--dump-dom", url, &dom, &err);
  cr_assert_eq(rc, 0, "chromium exit %d: %s", rc, err);
  /* Every operator listed with a rate above zero, a checkpoint row. */
  const char *ops[] = {"gen", "count", "sink"};
  for (size_t i = 0; i < 3; i++) {
    char pat[100];
    snprintf(pat, sizeof pat, "class=\"op-row\" data-op=\"%s\"", ops[i]);
    const char *row = strstr(dom, pat);
    cr_assert_not_null(row, "operator %s not in the page:\n%.4000s", ops[i], dom);
    const char *rate = strstr(row, "data-rate=\"");
    cr_assert_not_null(rate);
    double v = strtod(rate + 11, NULL);
    cr_expect_gt(v, 0, "operator %s has rate %f", ops[i], v);
  }
  cr_expect(strstr(dom, "class=\"ckpt-row\""), "no checkpoint row in the page");
  cr_expect(strstr(dom, "class=\"ckpt-bar\""), "no checkpoint in the chart");
  cr_expect(strstr(dom, "class=\"counter-row\" data-op=\"sink\" data-counter=\"commits\""),
            "no sink counters in the page");
  cr_expect(strstr(dom, "class=\"node\""), "no job graph");
  cr_expect(strstr(dom, ">running<"), "state not shown as running");
  free(dom);
  free(err);
  /* A screenshot, kept in the build directory. */
  char shot[700];
  snprintf(shot, sizeof shot, "--screenshot=%s/dashboard.png", WEIR_TEST_OUT);
  dom = err = NULL;
  rc = browse(chrome, profile, shot, url, &dom, &err);
  cr_expect_eq(rc, 0, "chromium --screenshot exit %d: %s", rc, err);
  struct stat sb;
  cr_expect_eq(stat(shot + strlen("--screenshot="), &sb), 0, "no screenshot");
  cr_expect_gt(sb.st_size, 10000, "screenshot of %lld bytes", (long long)sb.st_size);
  free(dom);
  free(err);
  kill(j.pid, SIGTERM);
  cr_expect_eq(job_wait(&j, 60), 0);
  job_end(&j);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, NULL);
}
