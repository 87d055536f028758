/* jobs/examples/orders_job.c: owns an example job shared object in event
 * time, written only against <weir/weir.h>: a two-input join, timers and a
 * side output.
 *
 * DESIGN. Two generators in event time: orders (record i: customer
 * i mod 100, at i ms) and payments (record j: customer j mod 100, at 2j ms).
 * An interval join pairs each order with the payments of its customer
 * within 500 ms after it ("paid"). A keyed operator counts each customer's
 * pairs per second of event time with its own timers: one byte-string
 * entry per (customer, second), an event-time timer at the second's last
 * millisecond that emits the count and drops the entry. A second with more
 * than BUSY pairs also goes to the side output "busy". Records late for
 * the join (none with this generator: it sends them in order) go to two
 * more sinks.
 *
 * Arguments: [ORDERS [SINK]]: ORDERS defaults to 100000 (payments: half as
 * many), SINK (null, print, file:DIR) to print. Sinks: "sink" with lines
 * "<customer> <second> <pairs>", "busy" with the same lines for the busy
 * seconds, "late1" and "late2" with "<customer> <ts>" per late order and
 * payment.
 *
 * Build it by hand as example_job.c says, or let CMake build it into
 * <build>/jobs/orders_job.so. Run it:
 *   weir run ./orders_job.so 100000 print
 *   weir run --parallelism 2 ./orders_job.so 1000000 file:out
 */
#include <weir/weir.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUSTOMERS 100
#define WITHIN_MS 500 /* a payment counts within this long after its order */
#define BUSY 25       /* pairs in one second that make it busy */

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* A pair: emitted at the payment's time (the later one), no payload. */
static int paid(weir_ctx *ctx, void *user, const weir_record *order, const weir_record *payment) {
  (void)user;
  (void)payment;
  return weir_emit(ctx, order->key, NULL, 0);
}

/* ---- pairs per customer and second, by timers ------------------------------------- */

static int64_t second_of(int64_t ts) {
  return ts >= 0 ? ts / 1000 : -((-ts + 999) / 1000);
}

/* The count of (key, second) so far (0: none) and its state key in k. */
static int count_of(weir_ctx *ctx, uint64_t key, int64_t sec, unsigned char k[16], uint64_t *n) {
  put64(k, key);
  put64(k + 8, (uint64_t)sec);
  const void *cur = NULL;
  size_t len = 0;
  int rc = weir_state_get_bytes(ctx, k, 16, &cur, &len);
  *n = rc == 1 && len == 8 ? get64(cur) : 0;
  return rc < 0 ? rc : 0;
}

static int count_process(weir_ctx *ctx, const weir_record *r) {
  unsigned char k[16], v[8];
  int64_t sec = second_of(r->ts);
  uint64_t n;
  int rc = count_of(ctx, r->key, sec, k, &n);
  if (rc < 0) return rc;
  put64(v, n + 1);
  rc = weir_state_put_bytes(ctx, k, sizeof k, v, sizeof v);
  if (rc < 0) return rc;
  /* The second's last millisecond: registering it again is a no-op. */
  return weir_timer_register(ctx, WEIR_EVENT_TIME, sec * 1000 + 999);
}

static int count_timer(weir_ctx *ctx, const weir_timer *t) {
  unsigned char k[16], out[16];
  int64_t sec = second_of(t->ts);
  uint64_t n;
  int rc = count_of(ctx, t->key, sec, k, &n);
  if (rc < 0 || n == 0) return rc;
  put64(out, (uint64_t)sec);
  put64(out + 8, n);
  rc = weir_state_del_bytes(ctx, k, sizeof k);
  if (rc < 0) return rc;
  rc = weir_emit(ctx, t->key, out, sizeof out);
  if (!rc && n > BUSY) rc = weir_emit_side(ctx, "busy", t->key, WEIR_TS_DEFAULT, out, sizeof out);
  return rc;
}

static const weir_operator_vt count_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "per_second",
                                          .process = count_process,
                                          .on_timer = count_timer};

/* "<customer> <second> <pairs>" */
static size_t format_count(const weir_record *r, char *buf, size_t cap) {
  const unsigned char *p = r->payload;
  if (r->len != 16) return (size_t)snprintf(buf, cap, "%llu ?", (unsigned long long)r->key);
  return (size_t)snprintf(buf, cap, "%llu %lld %llu", (unsigned long long)r->key,
                          (long long)get64(p), (unsigned long long)get64(p + 8));
}

/* "<customer> <ts>" */
static size_t format_late(const weir_record *r, char *buf, size_t cap) {
  return (size_t)snprintf(buf, cap, "%llu %lld", (unsigned long long)r->key, (long long)r->ts);
}

static int build(weir_job *job, int argc, char **argv) {
  uint64_t orders = 100000;
  const char *sink = "print";
  if (argc > 3) return weir_job_fail(job, WEIR_EINVAL, "usage: %s [ORDERS [SINK]]", argv[0]);
  if (argc > 1) {
    const char *s = argv[1];
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno == ERANGE)
      return weir_job_fail(job, WEIR_EINVAL, "ORDERS: '%s' is not a whole number", s);
    orders = v;
  }
  if (argc > 2) sink = argv[2];

  weir_gen_opts go = {.records = orders, .keys = CUSTOMERS};
  weir_gen_opts gp = {.records = orders / 2, .keys = CUSTOMERS};
  weir_gen_time to = {.size = sizeof to, .event_rate = 1000};
  weir_gen_time tp = {.size = sizeof tp, .event_rate = 500};
  weir_stream *o = weir_key_by(weir_gen_timed(job, "orders", &go, &to, 0));
  weir_stream *p = weir_key_by(weir_gen_timed(job, "payments", &gp, &tp, 0));
  weir_stream *pairs = weir_interval_join(o, p, "paid", 0, WITHIN_MS, paid, NULL, 0);

  static const char *const tags[] = {"busy"};
  weir_op_opts co = {.size = sizeof co,
                     .flags = WEIR_OP_EVENT_TIMERS | WEIR_OP_KEYED_STATE,
                     .ntags = 1,
                     .tags = tags};
  weir_stream *counts =
      weir_process_opts(weir_key_by(pairs), "per_second", &count_vt, NULL, 0, &co);
  int rc = weir_sink_to(counts, "sink", sink, format_count, 0);
  if (!rc) rc = weir_sink_to(weir_side_output(counts, "busy"), "busy", sink, format_count, 0);
  if (!rc)
    rc = weir_sink_to(weir_side_output(pairs, WEIR_TAG_LATE1), "late1", sink, format_late, 0);
  if (!rc)
    rc = weir_sink_to(weir_side_output(pairs, WEIR_TAG_LATE2), "late2", sink, format_late, 0);
  return rc;
}

WEIR_JOB_EXPORT(build)
