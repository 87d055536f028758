/* bench_receiver.c: what `weir receiver` sustains by itself, without a job
 * in front: C client threads, each POSTing a small body with a fresh
 * Idempotency-Key over a fresh connection as soon as its previous answer
 * came, for S seconds, against a receiver started for each repetition
 * (a fresh database) with the given --latency and --fsync.
 *
 *   bench_receiver [--clients C] [--seconds S] [--reps R]
 *                  [--latency MS[:JITTER]] [--fsync] [--weir PATH]
 *
 * Prints, per repetition and as medians: requests/s (201 answers), the
 * ideal C / latency where a latency is set, p50 and p99 of the answer
 * time, and requests per commit (`weir receiver stats`: group commit).
 * The clients share the machine with the receiver: on a small machine
 * they bound what the receiver shows (docs/sinks.md §6).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "receiver.h"

#ifndef WEIR_BINARY
#define WEIR_BINARY "weir"
#endif

#define MAX_CLIENTS 1024
#define MAX_SAMPLES 4000000

static int port;
static atomic_int stop;
static atomic_long answered, failed, nsamples;
static float *samples; /* answer times, ms */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One request over a fresh connection: 1 if answered 201. */
static int request(long client, long n, char *buf, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return 0;
  }
  char body[64];
  int bl = snprintf(body, sizeof body, "%ld %ld\n", client, n);
  int hl = snprintf(buf, cap,
                    "POST /effects HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n"
                    "Idempotency-Key: b%d-c%ld-%ld\r\nConnection: close\r\n\r\n%s",
                    bl, (int)getpid(), client, n, body);
  int ok = 0;
  if (write(fd, buf, (size_t)hl) == hl) {
    size_t len = 0;
    ssize_t r;
    while (len < cap - 1 && (r = read(fd, buf + len, cap - 1 - len)) > 0) len += (size_t)r;
    buf[len] = '\0';
    ok = strncmp(buf, "HTTP/1.1 201", 12) == 0;
  }
  close(fd);
  return ok;
}

static void *client_main(void *arg) {
  long id = (long)arg, n = 0;
  char buf[4096];
  while (!atomic_load(&stop)) {
    double t0 = now_s();
    if (!request(id, n++, buf, sizeof buf)) {
      atomic_fetch_add(&failed, 1);
      continue;
    }
    atomic_fetch_add(&answered, 1);
    long i = atomic_fetch_add(&nsamples, 1);
    if (i < MAX_SAMPLES) samples[i] = (float)((now_s() - t0) * 1000.0);
  }
  return NULL;
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int usage(void) {
  fprintf(stderr, "usage: bench_receiver [--clients C] [--seconds S] [--reps R] "
                  "[--latency MS[:JITTER]] [--fsync] [--weir PATH]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *weir = WEIR_BINARY, *latency = NULL;
  int clients = 64, seconds = 8, reps = 3, fsync_ = 0;
  for (int i = 1; i < argc;) {
    const char *opt = argv[i++];
    if (!strcmp(opt, "--fsync")) {
      fsync_ = 1;
      continue;
    }
    const char *v = i < argc ? argv[i++] : NULL;
    if (!v) return usage();
    if (!strcmp(opt, "--clients"))
      clients = atoi(v);
    else if (!strcmp(opt, "--seconds"))
      seconds = atoi(v);
    else if (!strcmp(opt, "--reps"))
      reps = atoi(v);
    else if (!strcmp(opt, "--latency"))
      latency = v;
    else if (!strcmp(opt, "--weir"))
      weir = v;
    else
      return usage();
  }
  if (clients < 1 || clients > MAX_CLIENTS || seconds < 1 || reps < 1 || reps > 99) return usage();
  signal(SIGPIPE, SIG_IGN);
  samples = malloc(MAX_SAMPLES * sizeof *samples);
  double rate[99], p50[99], p99[99], per_commit[99];
  double ideal = latency ? clients / (atof(latency) / 1000.0) : 0;
  printf("bench_receiver: %d clients, %d s, --latency %s%s\n", clients, seconds,
         latency ? latency : "0", fsync_ ? ", --fsync" : "");
  for (int r = 0; r < reps; r++) {
    char db[] = "/tmp/bench_receiver.XXXXXX";
    int fd = mkstemp(db);
    if (fd < 0) return 1;
    close(fd);
    unlink(db);
    const char *extra[] = {latency ? "--latency" : NULL, latency, NULL, NULL};
    if (fsync_) extra[latency ? 2 : 0] = "--fsync";
    pid_t recv_pid;
    port = bench_receiver_start(weir, db, extra, &recv_pid);
    if (port <= 0) {
      fprintf(stderr, "bench_receiver: cannot start '%s receiver'\n", weir);
      return 1;
    }
    atomic_store(&stop, 0);
    atomic_store(&answered, 0);
    atomic_store(&failed, 0);
    atomic_store(&nsamples, 0);
    pthread_t th[MAX_CLIENTS];
    double t0 = now_s();
    for (long c = 0; c < clients; c++) pthread_create(&th[c], NULL, client_main, (void *)c);
    sleep((unsigned)seconds);
    atomic_store(&stop, 1);
    for (int c = 0; c < clients; c++) pthread_join(th[c], NULL);
    double took = now_s() - t0;
    long n = atomic_load(&nsamples) < MAX_SAMPLES ? atomic_load(&nsamples) : MAX_SAMPLES;
    qsort(samples, (size_t)n, sizeof *samples, cmp_f);
    rate[r] = (double)atomic_load(&answered) / took;
    p50[r] = n ? samples[n / 2] : 0;
    p99[r] = n ? samples[(long)(n * 0.99)] : 0;
    long long requests = bench_receiver_stat(weir, db, "requests");
    long long commits = bench_receiver_stat(weir, db, "commits");
    per_commit[r] = commits > 0 ? (double)requests / (double)commits : 0;
    bench_receiver_stop(recv_pid);
    char side[300];
    unlink(db);
    snprintf(side, sizeof side, "%s-wal", db);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", db);
    unlink(side);
    printf("  rep %d: %.0f requests/s, p50 %.1f ms, p99 %.1f ms, %.1f requests per commit, "
           "%ld failed\n",
           r + 1, rate[r], p50[r], p99[r], per_commit[r], atomic_load(&failed));
  }
  double m = median(rate, reps);
  printf("  median: %.0f requests/s", m);
  if (ideal > 0) printf(" (%.2f of the ideal %.0f = clients / latency)", m / ideal, ideal);
  printf(", p50 %.1f ms, p99 %.1f ms, %.1f requests per commit\n", median(p50, reps),
         median(p99, reps), median(per_commit, reps));
  free(samples);
  return 0;
}
