/* jobs/examples/example_job.c: owns an example job shared object, written
 * only against <weir/weir.h>: the running sum of squares of keys, per key.
 *
 * DESIGN. gen -> square (map) -> key_by -> sum (reduce) -> sink.
 * The generator emits records i = 0 .. N-1 with key i mod 10 and no
 * payload; `square` gives each record the payload key * key (a u64); the
 * keyed reduce adds the payloads of each key and emits (key, sum so far) for
 * every record. So key k, which occurs n_k times (n_k = the number of i < N
 * with i mod 10 = k), is written with the sums k*k, 2*k*k, ..., n_k*k*k, one
 * line "<key> <sum>" each, and its final sum is n_k*k*k.
 *
 * Arguments: [RECORDS [SINK]]: RECORDS defaults to 100000, SINK (null, print,
 * file:DIR) to print.
 *
 * Build it by hand (it links against nothing: the weir binary that loads it
 * provides every weir_* function):
 *   cc -std=c11 -O2 -shared -fPIC -I include \
 *      jobs/examples/example_job.c -o example_job.so
 * (on macOS add -undefined dynamic_lookup), or let CMake build it into
 * <build>/jobs/example_job.so. Run it:
 *   weir run ./example_job.so 1000 print
 *   weir run --workers 2 --parallelism 2 ./example_job.so 1000000 file:out
 */
#include <weir/weir.h>

#include <errno.h>
#include <stdlib.h>

#define KEYS 10

/* The map's new payload must stay valid until the map function is called
 * again, and the subtasks of `square` call it from different worker threads
 * at the same time: one buffer per thread. */
static _Thread_local unsigned char square_buf[8];

static int square(void *user, const weir_record *in, weir_record *out) {
  uint64_t v = in->key * in->key;
  for (int i = 0; i < 8; i++) square_buf[i] = (unsigned char)(v >> (8 * i));
  out->payload = square_buf;
  out->len = 8;
  return 0;
}

static uint64_t sum(void *user, uint64_t acc, uint64_t value) {
  return acc + value;
}

static int build(weir_job *job, int argc, char **argv) {
  uint64_t records = 100000;
  const char *sink = "print";
  if (argc > 3) return weir_job_fail(job, WEIR_EINVAL, "usage: %s [RECORDS [SINK]]", argv[0]);
  if (argc > 1) {
    const char *s = argv[1];
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno == ERANGE) {
      return weir_job_fail(job, WEIR_EINVAL, "RECORDS: '%s' is not a whole number", s);
    }
    records = v;
  }
  if (argc > 2) sink = argv[2];

  weir_gen_opts g = {.records = records, .keys = KEYS};
  weir_stream *s = weir_gen(job, "gen", &g, 0);
  s = weir_map(s, "square", square, NULL, 0);
  s = weir_reduce(weir_key_by(s), "sum", sum, NULL, 0);
  return weir_sink_to(s, "sink", sink, NULL, 0);
}

WEIR_JOB_EXPORT(build)
