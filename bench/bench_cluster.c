/* bench_cluster.c: the counter job in one process against the same job run
 * by three cluster members through JetStream (docs/scale-out.md §3.1), in
 * one invocation, each repetition running the variants back to back.
 *
 *   throughput  --sink null, unpaced: records/s over the wall time until
 *               every process exited, and per CPU second of them
 *               (getrusage of the children: members and stage runs);
 *   latency     --rate R into the nats sink; a subscriber to the output
 *               stream takes each record's arrival (its sink epoch
 *               committed and published). Record i = (count - 1) * K + key
 *               was generated at t0 + i / R; t0 is not observable from
 *               outside, so it is taken from the fastest record (the one
 *               with the smallest arrival - i / R): the figures are
 *               latencies above the fastest record's, which is one
 *               checkpoint's commit at least;
 *   takeover    the latency run of the cluster with the member that runs
 *               task 1.0 (of the stage with the sink) SIGKILLed halfway:
 *               the longest silence of one key after the kill (lease
 *               expiry, claim, restore from the committed checkpoint,
 *               replay; a key's records come every keys / rate seconds).
 *
 * Every process at --workers W and parallelism W, the members' stages cut
 * into --tasks T tasks (default W; each task a process of its own, its
 * operators at one subtask), checkpoints every second in the throughput
 * runs (as bench_stage) and every --interval MS in the others. Needs
 * NATS_URL; the jobs' buckets and streams are deleted.
 *
 *   bench_cluster [--records N] [--keys K] [--rate R] [--interval MS]
 *                 [--workers W] [--tasks T] [--reps R] [--weir PATH]
 *                 [--json FILE]
 */
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"

#ifdef WEIR_BENCH_NATS
#include <nats/nats.h>

#include "weir/cluster.h"

extern char **environ;

#define MEMBERS 3
#define LEASE "1500"

static char tmpl[] = "/tmp/weir-bench-cluster-XXXXXX";
static const char *weir = WEIR_BINARY, *nats;
static unsigned long long records = 20000000, keys = 10000, rate = 20000, paced = 200000;
static int workers = 1, interval = 200, tasks = 0; /* tasks 0: as many as workers */

static void rmrf(const char *dir) {
  pid_t pid;
  char *argv[] = {"rm", "-rf", (char *)dir, NULL};
  if (posix_spawnp(&pid, "rm", NULL, NULL, argv, environ) == 0) waitpid(pid, NULL, 0);
}

static double cpu_of_children(void) {
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The command line of one process: one job (member NULL) or a member. */
typedef struct cmd {
  char *argv[48];
  char buf[8][700];
} cmd;

static void make_cmd(cmd *c, const char *dir, const char *member, const char *job,
                     unsigned long long n, unsigned long long r, const char *sink, int ckpt_ms) {
  int k = 0, b = 0;
  c->argv[k++] = (char *)weir;
  c->argv[k++] = "run";
  snprintf(c->buf[b], sizeof c->buf[b], "%s/%s", dir, member ? member : "one");
  c->argv[k++] = "--state-dir";
  c->argv[k++] = c->buf[b++];
  if (member) {
    c->argv[k++] = "--cluster";
    c->argv[k++] = (char *)nats;
    c->argv[k++] = "--member";
    c->argv[k++] = (char *)member;
    c->argv[k++] = "--job";
    c->argv[k++] = (char *)job;
    c->argv[k++] = "--lease-ms";
    c->argv[k++] = LEASE;
    snprintf(c->buf[b], sizeof c->buf[b], "%d", tasks ? tasks : workers);
    c->argv[k++] = "--tasks";
    c->argv[k++] = c->buf[b++];
  }
  c->argv[k++] = "counter";
  snprintf(c->buf[b], sizeof c->buf[b], "%llu", n);
  c->argv[k++] = "--records";
  c->argv[k++] = c->buf[b++];
  snprintf(c->buf[b], sizeof c->buf[b], "%llu", keys);
  c->argv[k++] = "--keys";
  c->argv[k++] = c->buf[b++];
  snprintf(c->buf[b], sizeof c->buf[b], "%llu", r);
  c->argv[k++] = "--rate";
  c->argv[k++] = c->buf[b++];
  snprintf(c->buf[b], sizeof c->buf[b], "%d", workers);
  c->argv[k++] = "--workers";
  c->argv[k++] = c->buf[b];
  if (!member) { /* a member's stage runs as --tasks tasks */
    c->argv[k++] = "--parallelism";
    c->argv[k++] = c->buf[b];
  }
  b++;
  snprintf(c->buf[b], sizeof c->buf[b], "%d", ckpt_ms);
  c->argv[k++] = "--checkpoint-interval";
  c->argv[k++] = c->buf[b++];
  c->argv[k++] = "--sink";
  c->argv[k++] = (char *)sink;
  c->argv[k++] = "--quiet";
  c->argv[k] = NULL;
}

static natsConnection *nc;
static jsCtx *js;

static void drop(const char *job, const char *out_stream) {
  char err[256];
  if (job) (void)weir_cluster_delete(nats, job, err, sizeof err);
  if (out_stream) js_DeleteStream(js, out_stream, NULL, NULL);
}

/* Which member (index) holds task `task` ("<stage>.<task>") of job, -1 if
 * none. */
static int holder(const char *job, const char *task) {
  char err[256], name[64];
  weir_cluster *c = NULL;
  if (weir_cluster_open(&c, nats, job, 1500, -1, err, sizeof err) != 0) return -1;
  int who =
      weir_cluster_holder(c, task, name, sizeof name) == 0 && name[0] == 'm' ? atoi(name + 1) : -1;
  weir_cluster_close(c);
  return who;
}

typedef struct run_out {
  double wall, cpu;
  double p50_ms, p99_ms, max_ms;
  double takeover_s; /* 0: no kill */
} run_out;

/* One run: n processes (1: one job; MEMBERS: a cluster), paced when r > 0,
 * the output read when `sink` is a stream of ours. kill_at > 0: SIGKILL the
 * holder of task 1.0 (the sink's stage has one task) after that many
 * seconds. Returns 0 or -1. */
static int run(const char *dir, const char *job, int n, unsigned long long nrec,
               unsigned long long r, const char *subject, const char *stream, double kill_at,
               run_out *out) {
  char sink[900];
  if (subject)
    snprintf(sink, sizeof sink, "%s/%s?stream=%s", nats, subject, stream);
  else
    snprintf(sink, sizeof sink, "null");
  static cmd cmds[MEMBERS];
  char names[MEMBERS][8];
  pid_t pids[MEMBERS];
  natsSubscription *sub = NULL;
  memset(out, 0, sizeof *out);
  double c0 = cpu_of_children();
  uint64_t t0 = weir_clock_mono_ns();
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "m%d", i);
    make_cmd(&cmds[i], dir, n > 1 ? names[i] : NULL, job, nrec, r, sink, r ? interval : 1000);
    if (posix_spawn(&pids[i], cmds[i].argv[0], NULL, NULL, cmds[i].argv, environ) != 0) return -1;
  }
  double *lat = NULL;
  uint64_t got = 0, kill_ns = 0, resume_ns = 0 /* longest silence after the kill */, last_ns = 0;
  uint64_t *key_last = NULL; /* each key's last arrival */
  int ok = 1;
  if (subject) {
    /* The stream may not exist yet: the sink makes it. */
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Ordered = true;
    for (int t = 0; t < 300 && !sub; t++) {
      if (js_SubscribeSync(&sub, js, subject, NULL, &so, NULL) != NATS_OK) {
        sub = NULL;
        weir_sleep_us(20000);
      }
    }
    if (!sub) ok = 0;
    lat = calloc(nrec, sizeof *lat);
    key_last = calloc(keys, sizeof *key_last);
    if (!lat || !key_last) ok = 0;
    while (ok && got < nrec) {
      natsMsg *m = NULL;
      natsStatus s = natsSubscription_NextMsg(&m, sub, 100);
      uint64_t now = weir_clock_mono_ns();
      if (kill_at > 0 && !kill_ns && now - t0 >= (uint64_t)(kill_at * 1e9)) {
        int who = holder(job, "1.0");
        if (who >= 0) {
          kill(pids[who], SIGKILL);
          waitpid(pids[who], NULL, 0);
          pids[who] = 0;
          kill_ns = now;
        }
      }
      if (s == NATS_TIMEOUT) {
        if (now - (last_ns ? last_ns : t0) > 60ull * 1000000000ull) ok = 0;
        continue;
      }
      if (s != NATS_OK) {
        ok = 0;
        break;
      }
      unsigned long long k = 0, c = 0;
      char line[64];
      int len = natsMsg_GetDataLength(m);
      if (len > 0 && len < (int)sizeof line) {
        memcpy(line, natsMsg_GetData(m), (size_t)len);
        line[len] = '\0';
        if (sscanf(line, "%llu %llu", &k, &c) == 2 && c > 0 && k < keys) {
          unsigned long long i = (c - 1) * keys + k;
          if (i < nrec) lat[i] = (double)(now - t0) / 1e9 - (double)i / (double)r;
          /* The takeover: the longest silence of one key after the kill
           * (what was published before it may still arrive at first): the
           * keys of the killed task's are silent until another member
           * runs it, the others' at most a key's interval, keys / rate. */
          uint64_t since = key_last[k] > kill_ns ? key_last[k] : kill_ns;
          if (kill_ns && now > since && now - since > resume_ns) resume_ns = now - since;
          key_last[k] = now;
        }
      }
      natsMsg_Destroy(m);
      last_ns = now;
      got++;
    }
    natsSubscription_Destroy(sub);
  }
  for (int i = 0; i < n; i++) {
    int st = 0;
    if (!pids[i]) continue;
    if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
  }
  out->wall = (double)(weir_clock_mono_ns() - t0) / 1e9;
  out->cpu = cpu_of_children() - c0;
  if (lat && ok) {
    double lo = lat[0];
    for (unsigned long long i = 1; i < nrec; i++)
      if (lat[i] < lo) lo = lat[i];
    for (unsigned long long i = 0; i < nrec; i++) lat[i] = (lat[i] - lo) * 1e3;
    qsort(lat, nrec, sizeof *lat, cmp);
    out->p50_ms = lat[nrec / 2];
    out->p99_ms = lat[nrec * 99 / 100];
    out->max_ms = lat[nrec - 1];
  }
  if (kill_ns) out->takeover_s = (double)resume_ns / 1e9;
  free(lat);
  free(key_last);
  return ok ? 0 : -1;
}

int main(int argc, char **argv) {
  int reps = 3;
  const char *json = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--records"))
      records = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--keys"))
      keys = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--rate"))
      rate = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--paced"))
      paced = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--interval"))
      interval = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--workers"))
      workers = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--tasks"))
      tasks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--weir"))
      weir = argv[i + 1];
    else if (!strcmp(argv[i], "--json"))
      json = argv[i + 1];
    else {
      fprintf(stderr, "bench_cluster: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  nats = getenv("NATS_URL");
  if (!nats || !*nats) {
    fprintf(stderr, "bench_cluster: NATS_URL is not set (scripts/services starts nats-server)\n");
    return 3;
  }
  if (reps < 1 || reps > 20 || workers < 1 || workers > 64 || tasks < 0 || tasks > 64 || !records ||
      !keys || !rate || !paced || interval < 1)
    return 2;
  if (natsConnection_ConnectTo(&nc, nats) != NATS_OK ||
      natsConnection_JetStream(&js, nc, NULL) != NATS_OK) {
    fprintf(stderr, "bench_cluster: cannot connect to %s\n", nats);
    return 3;
  }
  setenv("WEIR_LOG", "warn", 0);
  char *base = mkdtemp(tmpl);
  if (!base) return 1;
  double one_t[20], clu_t[20], one_c[20], clu_c[20], one_p50[20], one_p99[20], clu_p50[20],
      clu_p99[20], take[20];
  int bad = 0;
  for (int rep = 0; rep < reps && !bad; rep++) {
    char dir[700], job[64], subj[128], stream[64];
    run_out o;
    /* Throughput. */
    snprintf(dir, sizeof dir, "%s/t1-%d", base, rep);
    bad |= run(dir, NULL, 1, records, 0, NULL, NULL, 0, &o);
    one_t[rep] = (double)records / o.wall;
    one_c[rep] = (double)records / o.cpu;
    rmrf(dir);
    snprintf(dir, sizeof dir, "%s/t3-%d", base, rep);
    snprintf(job, sizeof job, "bct%d_%d", (int)getpid(), rep);
    bad |= run(dir, job, MEMBERS, records, 0, NULL, NULL, 0, &o);
    clu_t[rep] = (double)records / o.wall;
    clu_c[rep] = (double)records / o.cpu;
    drop(job, NULL);
    rmrf(dir);
    /* Latency. */
    snprintf(dir, sizeof dir, "%s/l1-%d", base, rep);
    snprintf(subj, sizeof subj, "bcl.%d.%d.one", (int)getpid(), rep);
    snprintf(stream, sizeof stream, "BCL1_%d_%d", (int)getpid(), rep);
    bad |= run(dir, NULL, 1, paced, rate, subj, stream, 0, &o);
    one_p50[rep] = o.p50_ms;
    one_p99[rep] = o.p99_ms;
    drop(NULL, stream);
    rmrf(dir);
    snprintf(dir, sizeof dir, "%s/l3-%d", base, rep);
    snprintf(job, sizeof job, "bcl%d_%d", (int)getpid(), rep);
    snprintf(subj, sizeof subj, "bcl.%d.%d.three", (int)getpid(), rep);
    snprintf(stream, sizeof stream, "BCL3_%d_%d", (int)getpid(), rep);
    bad |= run(dir, job, MEMBERS, paced, rate, subj, stream, 0, &o);
    clu_p50[rep] = o.p50_ms;
    clu_p99[rep] = o.p99_ms;
    drop(job, stream);
    rmrf(dir);
    /* Takeover. */
    snprintf(dir, sizeof dir, "%s/k3-%d", base, rep);
    snprintf(job, sizeof job, "bck%d_%d", (int)getpid(), rep);
    snprintf(subj, sizeof subj, "bck.%d.%d", (int)getpid(), rep);
    snprintf(stream, sizeof stream, "BCK_%d_%d", (int)getpid(), rep);
    bad |=
        run(dir, job, MEMBERS, paced, rate, subj, stream, (double)paced / (double)rate / 2.0, &o);
    take[rep] = o.takeover_s;
    drop(job, stream);
    rmrf(dir);
    if (bad) {
      fprintf(stderr, "bench_cluster: rep %d: a run failed\n", rep + 1);
      break;
    }
    printf("rep %d: throughput one %.0f rec/s (%.0f per CPU s), three members %.0f rec/s (%.0f "
           "per CPU s); latency p50/p99 one %.0f/%.0f ms, three %.0f/%.0f ms; takeover %.2f s\n",
           rep + 1, one_t[rep], one_c[rep], clu_t[rep], clu_c[rep], one_p50[rep], one_p99[rep],
           clu_p50[rep], clu_p99[rep], take[rep]);
    fflush(stdout);
  }
  rmrf(base);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  if (bad) return 1;
  double a = median(one_t, reps), b = median(clu_t, reps), ac = median(one_c, reps),
         bc = median(clu_c, reps), l1 = median(one_p50, reps), l1p = median(one_p99, reps),
         l3 = median(clu_p50, reps), l3p = median(clu_p99, reps), tk = median(take, reps);
  printf("counter job, %d workers, %d tasks a stage, medians of %d: throughput (%llu records, %llu "
         "keys, null "
         "sink, 1 s checkpoints) one process %.0f rec/s, three members %.0f rec/s (%.3fx); per "
         "CPU second %.0f vs %.0f (%.3fx); latency above the fastest record (%llu records at "
         "%llu/s into the nats sink, %d ms checkpoints) p50 %.0f vs %.0f ms, p99 %.0f vs %.0f ms; "
         "takeover after a "
         "SIGKILL of the member running task 1.0 (lease %s ms) %.2f s\n",
         workers, tasks ? tasks : workers, reps, records, keys, a, b, b / a, ac, bc, bc / ac, paced,
         rate, interval, l1, l3, l1p, l3p, LEASE, tk);
  if (json) {
    FILE *f = fopen(json, "w");
    if (f) {
      fprintf(f,
              "{\"records\": %llu, \"keys\": %llu, \"workers\": %d, \"tasks\": %d, \"reps\": %d, "
              "\"interval_ms\": %d, \"one_per_s\": %.1f, \"three_per_s\": %.1f, "
              "\"one_per_cpu_s\": %.1f, \"three_per_cpu_s\": %.1f, \"paced\": %llu, "
              "\"rate\": %llu, \"one_p50_ms\": %.1f, \"one_p99_ms\": %.1f, "
              "\"three_p50_ms\": %.1f, \"three_p99_ms\": %.1f, \"takeover_s\": %.3f}\n",
              records, keys, workers, tasks ? tasks : workers, reps, interval, a, b, ac, bc, paced,
              rate, l1, l1p, l3, l3p, tk);
      fclose(f);
    }
  }
  return 0;
}

#else

int main(void) {
  fprintf(stderr, "bench_cluster: built without libnats\n");
  return 3;
}

#endif
