/* jobs/http.c: owns the HTTP endpoint of a running job (http.h): binding,
 * the security rules, the routes, Prometheus text and the JSON API, the
 * embedded dashboard page, and the files that tell tools where it is.
 *
 * DESIGN. Rules (docs: README, "Operating a job"):
 *   - Loopback only, unless --http-token FILE is given: a non-loopback
 *     address without it is refused before the job runs (exit 2).
 *   - With --http-token every request but the static page (GET /, which
 *     holds no data) needs `Authorization: Bearer <token>`; without it the
 *     GETs are open (to local users only). Mutating requests (POST) always
 *     need a token: the file's, or one made per run (32 random bytes, hex)
 *     and written to DIR/http-token with mode 0600, so that only the
 *     directory's owner can stop or savepoint the job. 401 without a
 *     token, 403 with another one; tokens are compared in constant time.
 *   - The Host header must name localhost or an IP address (the port must
 *     be ours): a DNS rebinding attack reaches a loopback port through a
 *     page of a name the attacker controls, whose Host header carries that
 *     name. No CORS headers are sent, so another origin's page cannot read
 *     an answer or send the Authorization header.
 *   - Every string that comes from the job (names, counters, the error) is
 *     redacted of credentials (URI user info, password-like parameters)
 *     before it reaches a response or a label.
 * Requests run on libmicrohttpd's threads, one per connection, so a
 * blocking savepoint does not hold up a scrape. What they read of the job
 * is safe while it runs (jobs/http.h); the endpoint's own state (the
 * checkpoint histograms) is under a mutex.
 *
 * DIR/http (the bound address, "HOST:PORT") and DIR/http-token are
 * written once the run holds the directory's lease (the job's state leaves
 * "created"), by a thread of the endpoint that watches for it: a second
 * run that the lease refuses must not overwrite the owner's files.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h> /* before sys/random.h (macOS) */
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__APPLE__)
#include <mach/mach.h>
#endif

#include "base/alloc.h"
#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"
#include "base/platform.h"
#include "cli.h"

/* The embedded dashboard (generated from jobs/dashboard.html by CMake). */
extern const unsigned char weir_dashboard_html[];
extern const size_t weir_dashboard_html_len;

#define HTTP_CONN_LIMIT 64
#define HTTP_CONN_TIMEOUT_S 30
#define HTTP_MAX_BODY 65536
/* Checkpoints /api/v1/checkpoints returns at most (the latest). */
#define HTTP_HISTORY 200
#define TOKEN_BYTES 32

/* Histogram bounds (le): seconds for durations, bytes for sizes. */
static const double dur_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double size_le[] = {1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10};
#define NDUR (sizeof dur_le / sizeof dur_le[0])
#define NSIZE (sizeof size_le / sizeof size_le[0])

typedef struct hist {
  uint64_t bucket[16]; /* counts per bound (not cumulative); the last: above all */
  double sum;
  uint64_t count;
} hist;

struct cli_http {
  weir_job *job;
  struct MHD_Daemon *daemon;
  cli_http_actions actions;
  int have_actions;
  char addr[160]; /* bound, "HOST:PORT" */
  unsigned port;
  int token_required; /* --http-token: every request but GET / */
  char token[256];    /* the bearer token of mutating requests ("" if none) */
  uint64_t total_records;
  /* Files: DIR/http and DIR/http-token, written by the watcher thread. */
  char *path_addr, *path_token;
  int wrote_addr, wrote_token;
  pthread_t watcher;
  int watching;
  pthread_mutex_t mu; /* below, and the watcher's stop */
  pthread_cond_t cv;
  int stopping;
  /* Checkpoint histograms over the run's completed checkpoints, updated
   * at each scrape from the ones not seen yet (under mu). */
  uint64_t seen;
  hist h_dur, h_align, h_size;
};

/* ---- small helpers -------------------------------------------------------- */

/* Credentials out of s: the user info of a URI (scheme://user:pass@host
 * keeps "user:***@"), and the values of password-like parameters
 * (password=, passwd=, pass=, token=, secret=, auth=, key=, sig=), into
 * out (always NUL-terminated, truncated if need be). */
static void redact(const char *s, char *out, size_t cap) {
  static const char *const keys[] = {"password", "passwd", "pass", "token",
                                     "secret",   "auth",   "key",  "sig"};
  size_t o = 0;
  if (!cap) return;
  for (size_t i = 0; s[i] && o + 1 < cap;) {
    if (s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/') {
      /* The authority ends at '/', '?', '#' or a space; user info before '@'. */
      size_t a = i + 3, e = a, at = 0;
      while (s[e] && s[e] != '/' && s[e] != '?' && s[e] != '#' && s[e] != ' ') {
        if (s[e] == '@') at = e;
        e++;
      }
      for (size_t k = i; k < a && o + 1 < cap; k++) out[o++] = s[k];
      i = a;
      if (at) {
        size_t colon = a;
        while (colon < at && s[colon] != ':') colon++;
        for (size_t k = a; k < colon && o + 1 < cap; k++) out[o++] = s[k];
        const char *mask = colon < at ? ":***@" : "@";
        for (const char *m = mask; *m && o + 1 < cap; m++) out[o++] = *m;
        i = at + 1;
      }
      continue;
    }
    if ((s[i] == '?' || s[i] == '&' || s[i] == ';') && o + 1 < cap) {
      out[o++] = s[i++];
      for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        size_t n = strlen(keys[k]);
        size_t j = i;
        /* A key that ends in one of them: api_key, x-auth, access_token. */
        while (s[j] && s[j] != '=' && s[j] != '&' && s[j] != ' ') j++;
        if (s[j] != '=' || j - i < n || strncasecmp(s + j - n, keys[k], n) != 0) continue;
        for (size_t m = i; m <= j && o + 1 < cap; m++) out[o++] = s[m];
        for (const char *m = "***"; *m && o + 1 < cap; m++) out[o++] = *m;
        i = j + 1;
        while (s[i] && s[i] != '&' && s[i] != ' ' && s[i] != '#') i++;
        break;
      }
      continue;
    }
    out[o++] = s[i++];
  }
  out[o] = '\0';
}

static void json_str(FILE *f, const char *s) {
  char buf[2048];
  redact(s ? s : "", buf, sizeof buf);
  weir_json_string(f, buf);
}

/* A Prometheus label value: redacted, with \, " and newlines escaped. */
static void prom_str(FILE *f, const char *s) {
  char buf[2048];
  redact(s ? s : "", buf, sizeof buf);
  fputc('"', f);
  for (const char *p = buf; *p; p++) {
    if (*p == '\\' || *p == '"')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static const char *state_name(weir_job_state s) {
  switch (s) {
  case WEIR_JOB_CREATED:
    return "created";
  case WEIR_JOB_RUNNING:
    return "running";
  case WEIR_JOB_STOPPING:
    return "stopping";
  case WEIR_JOB_FINISHED:
    return "finished";
  case WEIR_JOB_STOPPED:
    return "stopped";
  case WEIR_JOB_FAILED:
    return "failed";
  }
  return "unknown";
}

/* Equal in time independent of where they differ (the lengths may show). */
static int token_equal(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  unsigned char d = (unsigned char)(la != lb);
  for (size_t i = 0; i < la; i++) d |= (unsigned char)(a[i] ^ (i < lb ? b[i] : 0));
  return d == 0;
}

/* The process's resident memory now, in bytes; -1 where the system cannot
 * say cheaply (then only the peak is reported). */
static int64_t resident_bytes(void) {
#if WEIR_HAVE_PROC_FS
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  unsigned long long size = 0, res = 0;
  int n = fscanf(f, "%llu %llu", &size, &res);
  fclose(f);
  return n == 2 ? (int64_t)(res * (unsigned long long)sysconf(_SC_PAGESIZE)) : -1;
#elif defined(__APPLE__)
  struct mach_task_basic_info info;
  mach_msg_type_number_t count = MACH_TASK_BASIC_INFO_COUNT;
  if (task_info(mach_task_self(), MACH_TASK_BASIC_INFO, (task_info_t)&info, &count) != KERN_SUCCESS)
    return -1;
  return (int64_t)info.resident_size;
#else
  return -1;
#endif
}

typedef struct proc_stats {
  double cpu_s;
  int64_t rss, max_rss;
} proc_stats;

static proc_stats process_stats(void) {
  proc_stats p = {0, resident_bytes(), 0};
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    p.cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
              (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
#if defined(__APPLE__)
    p.max_rss = (int64_t)ru.ru_maxrss; /* bytes there, KiB on Linux */
#else
    p.max_rss = (int64_t)ru.ru_maxrss * 1024;
#endif
  }
  return p;
}

/* ---- snapshots of the job ------------------------------------------------- */

typedef struct snap {
  weir_job_metrics m;
  weir_subtask_metrics *st;
  weir_plan_operator *ops;
  size_t nops;
  weir_plan_edge *edges;
  size_t nedges;
} snap;

static void snap_take(const cli_http *h, snap *s) {
  memset(s, 0, sizeof *s);
  s->m.size = sizeof s->m;
  weir_job_metrics_read(h->job, &s->m, NULL, 0);
  if (s->m.nsubtasks) {
    s->st = weir_calloc(s->m.nsubtasks, sizeof *s->st);
    size_t n = s->m.nsubtasks;
    weir_job_metrics_read(h->job, &s->m, s->st, n);
    if (s->m.nsubtasks > n) s->m.nsubtasks = n; /* does not change during a run */
  }
  size_t no = 0, ne = 0;
  if (weir_job_plan(h->job, NULL, 0, &no, NULL, 0, &ne) == 0) {
    s->ops = weir_calloc(no ? no : 1, sizeof *s->ops);
    s->edges = weir_calloc(ne ? ne : 1, sizeof *s->edges);
    weir_job_plan(h->job, s->ops, no, &s->nops, s->edges, ne, &s->nedges);
    if (s->nops > no) s->nops = no;
    if (s->nedges > ne) s->nedges = ne;
  }
}

static void snap_free(snap *s) {
  weir_free(s->st);
  weir_free(s->ops);
  weir_free(s->edges);
}

static const char *op_name(const snap *s, uint32_t op) {
  return op < s->nops ? s->ops[op].name : "?";
}

static void hist_add(hist *h, const double *le, size_t n, double v) {
  size_t i = 0;
  while (i < n && v > le[i]) i++;
  h->bucket[i]++;
  h->sum += v;
  h->count++;
}

/* Adds the checkpoints completed since the last scrape to the histograms
 * (under h->mu). */
static void hist_update(cli_http *h) {
  weir_checkpoint_stat buf[256];
  for (;;) {
    size_t got = weir_job_checkpoint_stats(h->job, h->seen, buf, sizeof buf / sizeof buf[0]);
    if (!got) break;
    for (size_t i = 0; i < got; i++) {
      hist_add(&h->h_dur, dur_le, NDUR, (double)buf[i].duration_us / 1e6);
      hist_add(&h->h_align, dur_le, NDUR, (double)buf[i].alignment_us / 1e6);
      hist_add(&h->h_size, size_le, NSIZE, (double)buf[i].bytes);
    }
    h->seen += got;
  }
}

/* ---- Prometheus text ------------------------------------------------------ */

static void prom_head(FILE *f, const char *name, const char *type, const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{job="...",operator="...",subtask="N"[,counter="..."]} */
static void prom_series(FILE *f, const char *name, const char *job, const snap *s,
                        const weir_subtask_metrics *t) {
  fprintf(f, "%s{job=", name);
  prom_str(f, job);
  fputs(",operator=", f);
  prom_str(f, op_name(s, t->op));
  fprintf(f, ",subtask=\"%u\"", t->subtask);
}

static void prom_hist(FILE *f, const char *name, const char *help, const char *job, const hist *h,
                      const double *le, size_t n) {
  prom_head(f, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i <= n; i++) {
    cum += h->bucket[i];
    fprintf(f, "%s_bucket{job=", name);
    prom_str(f, job);
    if (i < n)
      fprintf(f, ",le=\"%g\"} %llu\n", le[i], (unsigned long long)cum);
    else
      fprintf(f, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
  }
  fprintf(f, "%s_sum{job=", name);
  prom_str(f, job);
  fprintf(f, "} %.6f\n%s_count{job=", h->sum, name);
  prom_str(f, job);
  fprintf(f, "} %llu\n", (unsigned long long)h->count);
}

/* A per-subtask metric: one series per operator subtask for which cond
 * holds (`t` is the subtask), with the value of expr; a family without
 * any series is left out. */
#define PROM_EACH(f, s, job, name, type, help, cond, fmt, expr)                                    \
  do {                                                                                             \
    int head_ = 0;                                                                                 \
    for (size_t i_ = 0; i_ < (s)->m.nsubtasks; i_++) {                                             \
      const weir_subtask_metrics *t = &(s)->st[i_];                                                \
      if (!(cond)) continue;                                                                       \
      if (!head_++) prom_head(f, name, type, help);                                                \
      prom_series(f, name, job, s, t);                                                             \
      fprintf(f, "} " fmt "\n", expr);                                                             \
    }                                                                                              \
  } while (0)

static void write_prometheus(cli_http *h, FILE *f) {
  snap s;
  snap_take(h, &s);
  const char *job = weir_job_name(h->job);
  const weir_job_metrics *m = &s.m;
  prom_head(f, "weir_job_info", "gauge", "The job: its id and state (value 1).");
  fputs("weir_job_info{job=", f);
  prom_str(f, job);
  fputs(",job_id=", f);
  prom_str(f, m->job_id);
  fprintf(f, ",state=\"%s\"} 1\n", state_name(m->state));
  prom_head(f, "weir_job_uptime_seconds", "gauge", "Time since the run started.");
  fputs("weir_job_uptime_seconds{job=", f);
  prom_str(f, job);
  fprintf(f, "} %.3f\n", (double)m->uptime_ns / 1e9);
  if (h->total_records) {
    prom_head(f, "weir_job_source_records_expected", "gauge",
              "Records the sources emit in all (a bounded job).");
    fputs("weir_job_source_records_expected{job=", f);
    prom_str(f, job);
    fprintf(f, "} %llu\n", (unsigned long long)h->total_records);
  }

  PROM_EACH(f, &s, job, "weir_operator_records_in_total", "counter",
            "Records an operator subtask received.", 1, "%llu", (unsigned long long)t->records_in);
  PROM_EACH(f, &s, job, "weir_operator_records_out_total", "counter",
            "Records an operator subtask emitted.", 1, "%llu", (unsigned long long)t->records_out);
  PROM_EACH(f, &s, job, "weir_operator_busy_seconds_total", "counter",
            "Time the subtask's task spent running (every operator of a chain shows its "
            "chain's).",
            1, "%.6f", (double)t->busy_ns / 1e9);
  PROM_EACH(f, &s, job, "weir_operator_backpressured_seconds_total", "counter",
            "Time the subtask's task could not hand on its output because an output channel "
            "was full.",
            1, "%.6f", (double)t->backpressured_ns / 1e9);
  PROM_EACH(f, &s, job, "weir_operator_input_queue_batches", "gauge",
            "Batches waiting in the subtask's input channels (chain heads).", t->in_capacity, "%u",
            t->in_queued);
  PROM_EACH(f, &s, job, "weir_operator_input_queue_capacity_batches", "gauge",
            "Bound of the subtask's input channels in batches (chain heads).", t->in_capacity, "%u",
            t->in_capacity);
  PROM_EACH(f, &s, job, "weir_operator_output_queue_fill_ratio", "gauge",
            "Fill of the subtask's fullest output channel, 0 to 1 (chain tails).", t->out_capacity,
            "%.4f", (double)t->out_queued / (double)t->out_capacity);
  PROM_EACH(f, &s, job, "weir_operator_watermark_milliseconds", "gauge",
            "The subtask's event-time clock (jobs with event time, once a watermark came).",
            t->has_watermark && t->watermark > WEIR_WATERMARK_MIN, "%lld", (long long)t->watermark);
  int64_t wall = weir_clock_wall_ms();
  PROM_EACH(f, &s, job, "weir_operator_watermark_lag_milliseconds", "gauge",
            "Wall clock minus the subtask's event-time clock (event time in ms since the epoch).",
            t->has_watermark && t->watermark > WEIR_WATERMARK_MIN &&
                t->watermark < WEIR_WATERMARK_MAX,
            "%lld", (long long)(wall - t->watermark));
  int counters = 0;
  for (size_t i = 0; i < s.m.nsubtasks; i++) {
    const weir_subtask_metrics *t = &s.st[i];
    for (uint32_t k = 0; k < t->ncounters; k++) {
      if (!counters++)
        prom_head(f, "weir_operator_counter_total", "counter",
                  "An operator subtask's named counter (a sink's attempts, requests, responses, "
                  "duplicates, rejections, commits, aborts, recovered, ...).");
      prom_series(f, "weir_operator_counter_total", job, &s, t);
      fputs(",counter=", f);
      prom_str(f, t->counter_names[k]);
      fprintf(f, "} %llu\n", (unsigned long long)t->counter_values[k]);
    }
  }

  pthread_mutex_lock(&h->mu);
  hist_update(h);
  hist hd = h->h_dur, ha = h->h_align, hs = h->h_size;
  pthread_mutex_unlock(&h->mu);
  prom_head(f, "weir_checkpoints_completed_total", "counter", "Checkpoints this run completed.");
  fputs("weir_checkpoints_completed_total{job=", f);
  prom_str(f, job);
  fprintf(f, "} %llu\n", (unsigned long long)m->checkpoints_completed);
  prom_head(f, "weir_checkpoints_failed_total", "counter",
            "Checkpoints of this run that failed (declined, timed out).");
  fputs("weir_checkpoints_failed_total{job=", f);
  prom_str(f, job);
  fprintf(f, "} %llu\n", (unsigned long long)m->checkpoints_failed);
  prom_hist(f, "weir_checkpoint_duration_seconds", "Trigger to durable, per checkpoint.", job, &hd,
            dur_le, NDUR);
  prom_hist(f, "weir_checkpoint_alignment_seconds",
            "The longest barrier alignment of any task, per checkpoint.", job, &ha, dur_le, NDUR);
  prom_hist(f, "weir_checkpoint_size_bytes", "Bytes stored, per checkpoint.", job, &hs, size_le,
            NSIZE);
  prom_head(f, "weir_checkpoint_last_id", "gauge", "The latest completed checkpoint (0: none).");
  fputs("weir_checkpoint_last_id{job=", f);
  prom_str(f, job);
  fprintf(f, "} %llu\n", (unsigned long long)m->last_checkpoint_id);
  if (m->last_checkpoint_id && m->last_checkpoint_age_ns) {
    prom_head(f, "weir_checkpoint_last_age_seconds", "gauge",
              "Time since the latest checkpoint completed.");
    fputs("weir_checkpoint_last_age_seconds{job=", f);
    prom_str(f, job);
    fprintf(f, "} %.3f\n", (double)m->last_checkpoint_age_ns / 1e9);
  }
  prom_head(f, "weir_restore_checkpoint_id", "gauge",
            "The checkpoint this run restored (0: started from the beginning).");
  fputs("weir_restore_checkpoint_id{job=", f);
  prom_str(f, job);
  fprintf(f, "} %llu\n", (unsigned long long)m->restored_from);
  prom_head(f, "weir_restore_duration_seconds", "gauge", "Wall time of the restore (0: none).");
  fputs("weir_restore_duration_seconds{job=", f);
  prom_str(f, job);
  fprintf(f, "} %.3f\n", m->restore_ms / 1e3);
  prom_head(f, "weir_lease_epoch", "gauge",
            "The run's fencing epoch of its state directory (0: no state directory).");
  fputs("weir_lease_epoch{job=", f);
  prom_str(f, job);
  fprintf(f, "} %llu\n", (unsigned long long)m->lease_epoch);

  proc_stats p = process_stats();
  prom_head(f, "weir_process_cpu_seconds_total", "counter", "User and system CPU time.");
  fputs("weir_process_cpu_seconds_total{job=", f);
  prom_str(f, job);
  fprintf(f, "} %.3f\n", p.cpu_s);
  if (p.rss >= 0) {
    prom_head(f, "weir_process_resident_memory_bytes", "gauge", "Resident memory now.");
    fputs("weir_process_resident_memory_bytes{job=", f);
    prom_str(f, job);
    fprintf(f, "} %lld\n", (long long)p.rss);
  }
  prom_head(f, "weir_process_max_resident_memory_bytes", "gauge", "Peak resident memory.");
  fputs("weir_process_max_resident_memory_bytes{job=", f);
  prom_str(f, job);
  fprintf(f, "} %lld\n", (long long)p.max_rss);
  snap_free(&s);
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_job_head(cli_http *h, FILE *f, const snap *s) {
  fputs("\"job\": ", f);
  json_str(f, weir_job_name(h->job));
  fputs(", \"id\": ", f);
  json_str(f, s->m.job_id);
  fprintf(f, ", \"state\": \"%s\", \"uptime_s\": %.3f, \"lease_epoch\": %llu",
          state_name(s->m.state), (double)s->m.uptime_ns / 1e9,
          (unsigned long long)s->m.lease_epoch);
  if (s->m.state == WEIR_JOB_FAILED) {
    fputs(", \"error\": ", f);
    json_str(f, weir_job_error(h->job));
  }
}

/* Records the sources emitted so far. */
static uint64_t source_records(const snap *s) {
  uint64_t n = 0;
  for (size_t i = 0; i < s->m.nsubtasks; i++)
    if (s->st[i].op < s->nops && strcmp(s->ops[s->st[i].op].kind, "source") == 0)
      n += s->st[i].records_out;
  return n;
}

static void write_job(cli_http *h, FILE *f) {
  snap s;
  snap_take(h, &s);
  fputs("{", f);
  json_job_head(h, f, &s);
  uint64_t src = source_records(&s);
  fprintf(
      f, ", \"progress\": {\"source_records\": %llu, \"total_records\": ", (unsigned long long)src);
  if (h->total_records)
    fprintf(f, "%llu, \"fraction\": %.4f}", (unsigned long long)h->total_records,
            src >= h->total_records ? 1.0 : (double)src / (double)h->total_records);
  else
    fputs("null, \"fraction\": null}", f);
  fputs(", \"operators\": [", f);
  for (size_t i = 0; i < s.nops; i++) {
    const weir_plan_operator *o = &s.ops[i];
    fprintf(f, "%s\n  {\"index\": %zu, \"name\": ", i ? "," : "", i);
    json_str(f, o->name);
    fprintf(f,
            ", \"kind\": \"%s\", \"parallelism\": %d, \"chain\": %u, \"chain_pos\": %u, "
            "\"keyed\": %s}",
            o->kind, o->parallelism, o->chain, o->chain_pos, o->keyed ? "true" : "false");
  }
  fputs("], \"edges\": [", f);
  for (size_t i = 0; i < s.nedges; i++) {
    const weir_plan_edge *e = &s.edges[i];
    fprintf(f,
            "%s\n  {\"from\": %u, \"to\": %u, \"port\": %u, \"partitioning\": \"%s\", "
            "\"chained\": %s, \"feedback\": %s}",
            i ? "," : "", e->from, e->to, e->port, e->partitioning, e->chained ? "true" : "false",
            e->feedback ? "true" : "false");
  }
  /* Chains: the operators of each, in chain order. */
  fputs("], \"chains\": [", f);
  uint32_t nchains = 0;
  for (size_t i = 0; i < s.nops; i++)
    if (s.ops[i].chain + 1 > nchains) nchains = s.ops[i].chain + 1;
  for (uint32_t c = 0; c < nchains; c++) {
    fprintf(f, "%s[", c ? ", " : "");
    int first = 1;
    for (uint32_t pos = 0; pos < s.nops; pos++)
      for (size_t i = 0; i < s.nops; i++)
        if (s.ops[i].chain == c && s.ops[i].chain_pos == pos) {
          fprintf(f, "%s%zu", first ? "" : ", ", i);
          first = 0;
        }
    fputs("]", f);
  }
  fputs("]}\n", f);
  snap_free(&s);
}

static void write_checkpoints(cli_http *h, FILE *f, unsigned limit) {
  snap s;
  snap_take(h, &s);
  uint64_t n = s.m.checkpoints_completed;
  uint64_t first = n > limit ? n - limit : 0;
  weir_checkpoint_stat *cs = weir_calloc(limit ? limit : 1, sizeof *cs);
  size_t got = weir_job_checkpoint_stats(h->job, first, cs, limit);
  fputs("{", f);
  json_job_head(h, f, &s);
  fprintf(f,
          ", \"completed\": %llu, \"failed\": %llu, \"last_id\": %llu, \"last_age_s\": %.3f, "
          "\"history_limit\": %u, \"checkpoints\": [",
          (unsigned long long)n, (unsigned long long)s.m.checkpoints_failed,
          (unsigned long long)s.m.last_checkpoint_id, (double)s.m.last_checkpoint_age_ns / 1e9,
          HTTP_HISTORY);
  for (size_t i = 0; i < got; i++) {
    const weir_checkpoint_stat *c = &cs[i];
    fprintf(f,
            "%s\n  {\"id\": %llu, \"started_s\": %.3f, \"duration_ms\": %.3f, "
            "\"alignment_ms\": %.3f, \"bytes\": %llu, \"channel_state_bytes\": %llu, "
            "\"unaligned\": %s, \"final\": %s, \"after_stop\": %s}",
            i ? "," : "", (unsigned long long)c->id, (double)c->started_us / 1e6,
            (double)c->duration_us / 1e3, (double)c->alignment_us / 1e3,
            (unsigned long long)c->bytes, (unsigned long long)c->channel_state_bytes,
            c->flags & WEIR_CHECKPOINT_UNALIGNED ? "true" : "false",
            c->flags & WEIR_CHECKPOINT_FINAL ? "true" : "false",
            c->flags & WEIR_CHECKPOINT_AFTER_STOP ? "true" : "false");
  }
  fputs("]}\n", f);
  weir_free(cs);
  snap_free(&s);
}

static void write_metrics_json(cli_http *h, FILE *f) {
  snap s;
  snap_take(h, &s);
  const weir_job_metrics *m = &s.m;
  proc_stats p = process_stats();
  fputs("{", f);
  json_job_head(h, f, &s);
  fprintf(f,
          ", \"checkpoints\": {\"completed\": %llu, \"failed\": %llu, \"last_id\": %llu, "
          "\"last_age_s\": %.3f}, \"restore\": {\"checkpoint\": %llu, \"ms\": %.3f}, "
          "\"process\": {\"cpu_s\": %.3f, \"rss_bytes\": %lld, \"max_rss_bytes\": %lld}, "
          "\"source_records\": %llu, \"total_records\": ",
          (unsigned long long)m->checkpoints_completed, (unsigned long long)m->checkpoints_failed,
          (unsigned long long)m->last_checkpoint_id, (double)m->last_checkpoint_age_ns / 1e9,
          (unsigned long long)m->restored_from, m->restore_ms, p.cpu_s, (long long)p.rss,
          (long long)p.max_rss, (unsigned long long)source_records(&s));
  if (h->total_records)
    fprintf(f, "%llu", (unsigned long long)h->total_records);
  else
    fputs("null", f);
  fputs(", \"operators\": [", f);
  for (size_t i = 0; i < s.nops; i++) {
    uint64_t in = 0, out = 0;
    fprintf(f, "%s\n  {\"index\": %zu, \"name\": ", i ? "," : "", i);
    json_str(f, s.ops[i].name);
    fprintf(f, ", \"kind\": \"%s\", \"subtasks\": [", s.ops[i].kind);
    int first = 1;
    for (size_t k = 0; k < m->nsubtasks; k++) {
      const weir_subtask_metrics *t = &s.st[k];
      if (t->op != i) continue;
      in += t->records_in;
      out += t->records_out;
      fprintf(f,
              "%s{\"subtask\": %u, \"records_in\": %llu, \"records_out\": %llu, "
              "\"busy_ms\": %.3f, \"backpressured_ms\": %.3f, \"in_queued\": %u, "
              "\"in_capacity\": %u, \"out_queued\": %u, \"out_capacity\": %u, \"watermark\": ",
              first ? "" : ", ", t->subtask, (unsigned long long)t->records_in,
              (unsigned long long)t->records_out, (double)t->busy_ns / 1e6,
              (double)t->backpressured_ns / 1e6, t->in_queued, t->in_capacity, t->out_queued,
              t->out_capacity);
      if (t->has_watermark && t->watermark > WEIR_WATERMARK_MIN)
        fprintf(f, "%lld", (long long)t->watermark);
      else
        fputs("null", f);
      fputs(", \"counters\": {", f);
      for (uint32_t c = 0; c < t->ncounters; c++) {
        fputs(c ? ", " : "", f);
        json_str(f, t->counter_names[c]);
        fprintf(f, ": %llu", (unsigned long long)t->counter_values[c]);
      }
      fputs("}}", f);
      first = 0;
    }
    fprintf(f, "], \"records_in\": %llu, \"records_out\": %llu}", (unsigned long long)in,
            (unsigned long long)out);
  }
  fputs("]}\n", f);
  snap_free(&s);
}

/* ---- requests ---------------------------------------------------------------- */

typedef struct req {
  size_t body; /* bytes of body seen (discarded) */
} req;

/* Answers with body (taken over: malloc'd) and the headers every answer
 * carries; no CORS header, ever. */
static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *type,
                              char *body, size_t len, int must_free) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      len, body, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!r) {
    if (must_free) free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "X-Frame-Options", "DENY");
  if (status == MHD_HTTP_UNAUTHORIZED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"weir\"");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

/* {"error": msg} with the status. */
static enum MHD_Result answer_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result answer_error(struct MHD_Connection *c, unsigned status, const char *fmt,
                                    ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return MHD_NO;
  fputs("{\"error\": ", f);
  json_str(f, msg);
  fputs("}\n", f);
  fclose(f);
  return answer(c, status, "application/json", buf, len, 1);
}

/* Writes a document with fn into memory and answers 200 with it. */
static enum MHD_Result answer_doc(struct MHD_Connection *c, const char *type, cli_http *h,
                                  void (*fn)(cli_http *, FILE *)) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
  fn(h, f);
  if (fclose(f) != 0) {
    free(buf);
    return answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
  }
  return answer(c, MHD_HTTP_OK, type, buf, len, 1);
}

static unsigned history_limit(struct MHD_Connection *c) {
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
  if (!v || !*v) return HTTP_HISTORY;
  char *end = NULL;
  unsigned long n = strtoul(v, &end, 10);
  if (*end || n == 0) return HTTP_HISTORY;
  return n < HTTP_HISTORY ? (unsigned)n : HTTP_HISTORY;
}

static void write_checkpoints_default(cli_http *h, FILE *f) {
  write_checkpoints(h, f, HTTP_HISTORY);
}

/* Whether host (a Host header) names this endpoint: localhost or an IP
 * literal, with our port. A DNS name is what a rebinding attack comes
 * with; an IP literal cannot be rebound. */
static int host_ok(const cli_http *h, const char *host) {
  if (!host || !*host) return 0;
  char name[256];
  const char *port = NULL;
  size_t n;
  if (host[0] == '[') {
    const char *close = strchr(host, ']');
    if (!close) return 0;
    n = (size_t)(close - host - 1);
    if (n >= sizeof name) return 0;
    memcpy(name, host + 1, n);
    name[n] = '\0';
    if (close[1] == ':')
      port = close + 2;
    else if (close[1])
      return 0;
  } else {
    const char *colon = strrchr(host, ':');
    n = colon ? (size_t)(colon - host) : strlen(host);
    if (n >= sizeof name) return 0;
    memcpy(name, host, n);
    name[n] = '\0';
    if (colon) port = colon + 1;
  }
  char want[16];
  snprintf(want, sizeof want, "%u", h->port);
  if (port ? strcmp(port, want) != 0 : h->port != 80) return 0;
  if (strcasecmp(name, "localhost") == 0) return 1;
  unsigned char a[16];
  return inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1;
}

/* The bearer token of the request: 0 none, 1 ours, -1 another. */
static int bearer(const cli_http *h, struct MHD_Connection *c) {
  const char *au = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!au) return 0;
  if (strncasecmp(au, "Bearer ", 7) != 0) return -1;
  au += 7;
  while (*au == ' ') au++;
  return h->token[0] && token_equal(au, h->token) ? 1 : -1;
}

static enum MHD_Result do_post(cli_http *h, struct MHD_Connection *c, const char *url) {
  char path[4096] = "", err[1024] = "";
  int rc;
  if (strcmp(url, "/api/v1/savepoints") == 0) {
    if (!h->actions.savepoint)
      return answer_error(c, MHD_HTTP_NOT_IMPLEMENTED,
                          "savepoints cannot be taken through this endpoint in this run");
    const char *out = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "out");
    rc = h->actions.savepoint(h->actions.user, out && *out ? out : NULL, path, sizeof path, err,
                              sizeof err);
  } else if (strcmp(url, "/api/v1/stop") == 0) {
    if (!h->actions.stop)
      return answer_error(c, MHD_HTTP_NOT_IMPLEMENTED,
                          "the job cannot be stopped through this endpoint in this run");
    const char *sp = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "savepoint");
    const char *dr = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "drain");
    int want_sp = sp && (strcmp(sp, "1") == 0 || strcmp(sp, "true") == 0);
    int want_drain = dr && (strcmp(dr, "1") == 0 || strcmp(dr, "true") == 0);
    rc = h->actions.stop(h->actions.user, want_sp, want_drain, path, sizeof path, err, sizeof err);
  } else {
    return answer_error(c, MHD_HTTP_NOT_FOUND, "no such resource: POST %s", url);
  }
  if (rc < 0) /* WEIR_ESTATE: not now (stopping, another savepoint under way) */
    return answer_error(c, rc == WEIR_ESTATE ? MHD_HTTP_CONFLICT : MHD_HTTP_INTERNAL_SERVER_ERROR,
                        "%s", err[0] ? err : weir_strerror(rc));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return MHD_NO;
  fputs("{\"ok\": true, \"path\": ", f);
  json_str(f, path);
  fputs("}\n", f);
  fclose(f);
  return answer(c, MHD_HTTP_OK, "application/json", buf, len, 1);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  (void)version;
  (void)upload_data;
  cli_http *h = cls;
  req *r = *con_cls;
  if (!r) { /* the headers: answer once the body (if any) is in */
    r = weir_calloc(1, sizeof *r);
    *con_cls = r;
    return MHD_YES;
  }
  if (*upload_data_size) {
    r->body += *upload_data_size;
    *upload_data_size = 0;
    return r->body > HTTP_MAX_BODY ? MHD_NO : MHD_YES;
  }
  const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
  if (!host_ok(h, host))
    return answer_error(c, MHD_HTTP_BAD_REQUEST,
                        "the Host header '%s' does not name this endpoint: use localhost or an "
                        "IP address with port %u",
                        host ? host : "", h->port);
  int get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  int post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
  if (!get && !post) return answer_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET or POST");
  int page = get && (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0);
  if (post || (h->token_required && !page)) {
    int b = bearer(h, c);
    if (b == 0)
      return answer_error(c, MHD_HTTP_UNAUTHORIZED,
                          "%s needs 'Authorization: Bearer <token>' (the token is in "
                          "DIR/http-token, or the --http-token file)",
                          post ? "a mutating request" : "this endpoint");
    if (b < 0) {
      if (post && !h->token[0])
        return answer_error(c, MHD_HTTP_FORBIDDEN,
                            "this run has no token for mutating requests: run it with a state "
                            "directory or --http-token FILE");
      return answer_error(c, MHD_HTTP_FORBIDDEN, "the token is not this job's");
    }
  }
  if (post) return do_post(h, c, url);
  if (page)
    return answer(c, MHD_HTTP_OK, "text/html; charset=utf-8", (char *)weir_dashboard_html,
                  weir_dashboard_html_len, 0);
  if (strcmp(url, "/metrics") == 0)
    return answer_doc(c, "text/plain; version=0.0.4; charset=utf-8", h, write_prometheus);
  if (strcmp(url, "/api/v1/job") == 0) return answer_doc(c, "application/json", h, write_job);
  if (strcmp(url, "/api/v1/metrics") == 0)
    return answer_doc(c, "application/json", h, write_metrics_json);
  if (strcmp(url, "/api/v1/checkpoints") == 0) {
    unsigned limit = history_limit(c);
    if (limit == HTTP_HISTORY)
      return answer_doc(c, "application/json", h, write_checkpoints_default);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return MHD_NO;
    write_checkpoints(h, f, limit);
    fclose(f);
    return answer(c, MHD_HTTP_OK, "application/json", buf, len, 1);
  }
  return answer_error(c, MHD_HTTP_NOT_FOUND,
                      "no such resource: %s (see /, /metrics, /api/v1/job, /api/v1/metrics, "
                      "/api/v1/checkpoints)",
                      url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  weir_free(*con_cls);
  *con_cls = NULL;
}

/* ---- start, files, stop -------------------------------------------------------- */

static int is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return 1;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return 0;
}

/* Binds spec ("HOST:PORT", "[v6]:PORT"); returns the listening socket, or
 * WEIR_EINVAL after a usage message, or another negative code after an
 * error message. */
static int bind_listen(cli_http *h, const char *spec) {
  const char *colon = strrchr(spec, ':');
  if (!colon || colon == spec || !colon[1]) {
    cli_usage("--http: '%s' is not HOST:PORT (e.g. 127.0.0.1:0)", spec);
    return WEIR_EINVAL;
  }
  char host[256];
  size_t hl = (size_t)(colon - spec);
  const char *hs = spec;
  if (hs[0] == '[' && hl >= 2 && hs[hl - 1] == ']') {
    hs++;
    hl -= 2;
  }
  if (hl == 0 || hl >= sizeof host) {
    cli_usage("--http: '%s' is not HOST:PORT", spec);
    return WEIR_EINVAL;
  }
  memcpy(host, hs, hl);
  host[hl] = '\0';
  uint64_t port = 0;
  if (cli_parse_u64("--http", colon + 1, 65535, &port) < 0) return WEIR_EINVAL;
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int g = getaddrinfo(host, colon + 1, &hints, &ai);
  if (g != 0) {
    cli_usage("--http: cannot use '%s': %s", spec, gai_strerror(g));
    return WEIR_EINVAL;
  }
  for (struct addrinfo *p = ai; p; p = p->ai_next)
    if (!is_loopback(p->ai_addr) && !h->token_required) {
      freeaddrinfo(ai);
      cli_usage("--http: '%s' is not a loopback address: another host could reach the job; "
                "binding it needs --http-token FILE (a bearer token every request must carry)",
                spec);
      return WEIR_EINVAL;
    }
  int err = 0;
  int fd = cli_listen(ai, 64, &err);
  freeaddrinfo(ai);
  if (fd < 0) {
    cli_error("--http: cannot listen on %s: %s", spec, strerror(err));
    return -err ? -err : WEIR_EIO;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char hb[128] = "?", pb[16] = "0";
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    getnameinfo((struct sockaddr *)&ss, sl, hb, sizeof hb, pb, sizeof pb,
                NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf(h->addr, sizeof h->addr, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hb, pb);
  h->port = (unsigned)strtoul(pb, NULL, 10);
  return fd;
}

/* The token of --http-token FILE: its first line, without surrounding
 * white space. Returns 0, or WEIR_EINVAL after a usage message. */
static int read_token(cli_http *h, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    cli_usage("--http-token: cannot read '%s': %s", path, strerror(errno));
    return WEIR_EINVAL;
  }
  char line[sizeof h->token + 2];
  if (!fgets(line, sizeof line, f)) line[0] = '\0';
  fclose(f);
  size_t n = strlen(line);
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = '\0';
  const char *s = line;
  while (*s == ' ' || *s == '\t') s++;
  if (strlen(s) < 16 || strlen(s) >= sizeof h->token) {
    cli_usage("--http-token: '%s' must hold a token of 16 to %zu characters on its first line",
              path, sizeof h->token - 1);
    return WEIR_EINVAL;
  }
  memcpy(h->token, s, strlen(s) + 1); /* fits: checked above */
  return 0;
}

static int make_token(cli_http *h) {
  unsigned char b[TOKEN_BYTES];
  if (getentropy(b, sizeof b) != 0) {
    cli_error("--http: no random bytes for the endpoint's token: %s", strerror(errno));
    return -errno ? -errno : WEIR_EIO;
  }
  for (size_t i = 0; i < sizeof b; i++) snprintf(h->token + 2 * i, 3, "%02x", b[i]);
  return 0;
}

/* Writes text to path through a temporary file and a rename, with mode. */
static int write_file(const char *path, const char *text, mode_t mode) {
  size_t n = strlen(path) + 32;
  char *tmp = weir_malloc(n);
  snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  int rc = 0;
  if (fd < 0) {
    rc = -errno;
  } else {
    size_t len = strlen(text);
    if (fchmod(fd, mode) != 0 || write(fd, text, len) != (ssize_t)len) rc = -errno;
    if (close(fd) != 0 && !rc) rc = -errno;
    if (!rc && rename(tmp, path) != 0) rc = -errno;
    if (rc) unlink(tmp);
  }
  weir_free(tmp);
  return rc;
}

/* Writes `text` and a newline to path: 1, or 0 after a warning. */
static int write_line(const char *path, const char *text, mode_t mode) {
  char line[300];
  snprintf(line, sizeof line, "%s\n", text);
  int rc = write_file(path, line, mode);
  if (rc) WEIR_LOG_W("http: cannot write '%s': %s", path, weir_strerror(rc));
  return rc == 0;
}

/* Writes DIR/http and DIR/http-token once the run holds the directory's
 * lease (the job left "created"), or gives up when the endpoint stops. */
static void *watch(void *arg) {
  cli_http *h = arg;
  pthread_mutex_lock(&h->mu);
  while (!h->stopping) {
    weir_job_metrics m = {.size = sizeof m};
    weir_job_metrics_read(h->job, &m, NULL, 0);
    if (m.job_id[0]) { /* set once the run started, under the lease */
      /* The token first: whoever finds DIR/http finds the token with it. */
      if (h->path_token) h->wrote_token = write_line(h->path_token, h->token, 0600);
      h->wrote_addr = write_line(h->path_addr, h->addr, 0644);
      break;
    }
    if (m.state == WEIR_JOB_FAILED) break; /* refused before it ran: not ours */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = weir_malloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static void http_free(cli_http *h) {
  if (!h) return;
  weir_free(h->path_addr);
  weir_free(h->path_token);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  memset(h->token, 0, sizeof h->token);
  weir_free(h);
}

int cli_http_start(cli_http **out, weir_job *job, const cli_http_opts *o,
                   const cli_http_actions *actions) {
  *out = NULL;
  cli_http *h = weir_calloc(1, sizeof *h);
  h->job = job;
  h->total_records = o->total_records;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  if (actions) h->actions = *actions;
  int rc = 0;
  if (o->token_file) {
    h->token_required = 1;
    rc = read_token(h, o->token_file);
  } else if (o->state_dir) {
    rc = make_token(h);
  }
  if (rc) {
    http_free(h);
    return rc;
  }
  int fd = bind_listen(h, o->listen);
  if (fd < 0) {
    http_free(h);
    return fd;
  }
  if (o->state_dir) {
    h->path_addr = join(o->state_dir, "http");
    if (!o->token_file) h->path_token = join(o->state_dir, "http-token");
  }
  /* A client that goes away mid-answer must not end the process. */
  signal(SIGPIPE, SIG_IGN);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO;
  h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
                               MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_CONN_TIMEOUT_S,
                               MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONN_LIMIT,
                               MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
  if (!h->daemon) {
    close(fd);
    cli_error("--http: cannot start the HTTP endpoint on %s", h->addr);
    http_free(h);
    return WEIR_EIO;
  }
  if (h->path_addr) {
    if (pthread_create(&h->watcher, NULL, watch, h) == 0)
      h->watching = 1;
    else
      WEIR_LOG_W("http: cannot start the thread that writes '%s'", h->path_addr);
  }
  WEIR_LOG_I("http endpoint on http://%s/ (metrics: /metrics; API: /api/v1/)", h->addr);
  *out = h;
  return 0;
}

void cli_http_stop(cli_http *h) {
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->stopping = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  if (h->watching) pthread_join(h->watcher, NULL);
  MHD_stop_daemon(h->daemon); /* joins every connection thread; closes the socket */
  if (h->wrote_addr) unlink(h->path_addr);
  if (h->wrote_token) unlink(h->path_token);
  http_free(h);
}
