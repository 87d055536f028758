/* tests/install/run_embedded.c: a program that runs a job itself, linked
 * against the installed library: gen (N records) -> a filter that counts
 * what it sees -> the null sink. Prints "records N" and exits 0 when the
 * job ran and saw every record. */
#include <weir/weir.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static int count(void *user, const weir_record *in) {
  (void)in;
  atomic_fetch_add((atomic_ullong *)user, 1);
  return 1;
}

int main(int argc, char **argv) {
  unsigned long long n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000;
  atomic_ullong seen = 0;
  weir_job *job = NULL;
  int rc = weir_job_create(&job, "embedded");
  if (rc < 0) {
    fprintf(stderr, "weir_job_create: %s\n", weir_strerror(rc));
    return 1;
  }
  weir_gen_opts g = {.records = n, .keys = 3};
  weir_stream *s = weir_filter(weir_gen(job, "gen", &g, 0), "seen", count, &seen, 0);
  weir_sink_to(s, "out", "null", NULL, 0);
  weir_run_opts o = {.workers = 2};
  rc = weir_job_run(job, &o);
  if (rc < 0) {
    fprintf(stderr, "weir_job_run: %s\n", weir_strerror(rc));
    weir_job_destroy(job);
    return 1;
  }
  weir_job_destroy(job);
  printf("records %llu\n", (unsigned long long)seen);
  return seen == n ? 0 : 1;
}
