/* jobs/windows.c: owns the built-in `windows` job: its flags, its graph and
 * its report line.
 *
 * DESIGN. gen_timed -> key_by -> window (count) -> sink, the window's "late"
 * side output -> format-late -> late, and with --slide its "missed" side
 * output -> format-missed -> missed: one job, two or three sinks.
 * The generator is the counter job's (record i, key i mod K) with event
 * times from weir_gen_timed's documented formula (weir/operators.h): E
 * records per event-time second, each up to --disorder ms early, and a
 * --late-fraction of them a further D + 3 * size ms behind, far beyond the
 * watermark's bound (--disorder) and beyond every window they belong to
 * plus a window (so that, at a steady pace, a late record is late for all
 * its windows or for none). Windows are tumbling of --size ms, or sliding
 * by --slide ms, with --lateness ms of allowed lateness; the aggregate is
 * the count.
 *
 * Lines: the window results as "<key> <start> <end> <count>" (sink "sink"),
 * the late records as "<key> <ts>" (sink "late"); with --sink file:DIR both
 * sinks' parts are in DIR (sink-<s>-<n>.txt, late-<s>-<n>.txt). The results
 * sink writes the window's records with weir_format_window, and at an
 * idempotent destination their operation ids are weir_opid_window's
 * "<key>.<end>.<firing>": a window fired again under lateness is a new
 * effect, a replayed firing the same one. The format operators of the side
 * outputs emit the text after the key as the payload, which their sinks
 * write as "<key> <payload>" (weir_format_default would read an 8-byte text
 * as a number), with write-ahead ids.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

typedef unsigned long long ull;

/* Bounds of the times (ms), so that D + 3 * size and window ends stay far
 * from int64 overflow. */
#define MAX_MS 1000000000000ull

typedef struct windows_cfg {
  uint64_t records, keys;
  uint64_t rate;       /* wall-clock records/s over all generators, 0 = unlimited */
  uint64_t event_rate; /* records per event-time second, 0 = 10 * keys */
  uint64_t disorder, size, slide, lateness, seed;
  int sliding;
  double late_fraction;
  const char *sink;
} windows_cfg;

static void windows_help(FILE *out) {
  fputs("usage: weir run windows [--records N] [--keys K] [--rate R] [--event-rate R]\n"
        "                        [--disorder MS] [--late-fraction F] [--size MS]\n"
        "                        [--slide MS] [--lateness MS] [--seed S] [--sink SPEC]\n"
        "                        [--parallelism P] [--workers W] [--summary-json FILE]\n"
        "                        [CHECKPOINT OPTIONS] [--quiet]\n"
        "\n"
        "Counts records per key and event-time window. A generator emits records\n"
        "i = 0 .. N-1 with key i mod K (as the counter job's) and event time, in\n"
        "milliseconds,\n"
        "\n"
        "  ts_i = floor(i * 1000 / E) - h_i mod (D + 1) - (late_i ? D + 3 * SIZE : 0)\n"
        "\n"
        "where E = --event-rate, D = --disorder, SIZE = --size, h_i =\n"
        "splitmix64(splitmix64(S) ^ i) with S = --seed, and late_i holds when\n"
        "(splitmix64(h_i) >> 11) < F * 2^53 with F = --late-fraction (splitmix64(x):\n"
        "z = x + 0x9e3779b97f4a7c15, z = (z ^ z>>30) * 0xbf58476d1ce4e5b9,\n"
        "z = (z ^ z>>27) * 0x94d049bb133111eb, z ^ z>>31; weir/operators.h,\n"
        "weir_gen_timed). Watermarks allow D ms of disorder (bounded\n"
        "out-of-orderness, per generator split), so only the records chosen late\n"
        "can be late. A keyed window counts each key's records per window and\n"
        "fires when the watermark passes the window's end.\n"
        "\n"
        "Output, sinks of the one job: each window firing as a line\n"
        "\"<key> <window start ms> <window end ms> <count>\" (sink 'sink'), and\n"
        "each record that came too late for every window it belongs to as\n"
        "\"<key> <ts ms>\" (sink 'late'); with --slide, a record late for some of\n"
        "its windows only counts in the others and is written once per window it\n"
        "missed as \"<key> <window start ms> <window end ms> <ts ms>\" (sink\n"
        "'missed'). With --sink file:DIR they write their parts into DIR:\n"
        "sink-<s>-<n>.txt, late-<s>-<n>.txt, missed-<s>-<n>.txt. Under allowed\n"
        "lateness a window that a late record joins fires again at once and\n"
        "writes a new line with the higher count: the later firing supersedes\n"
        "the earlier (the last line of a key and window is its final count).\n"
        "\n"
        "  --records N      records to generate (default 10M)\n"
        "  --keys K         distinct keys (default 100k)\n"
        "  --rate R         records per second of wall-clock time over all\n"
        "                   generators, 0 = as fast as possible (default 0)\n"
        "  --event-rate R   records per second of event time (default 10 * K:\n"
        "                   about 10 records per key and second)\n"
        "  --disorder MS    records are up to MS early: the watermarks' bound of\n"
        "                   out-of-orderness (default 100)\n"
        "  --late-fraction F  this fraction of the records (0 .. 1, a decimal\n"
        "                   such as 0.01) lags D + 3 * SIZE ms more: late records\n"
        "                   (default 0). Whether one comes behind the watermark\n"
        "                   depends on timing: watermarks go out every 200 ms of\n"
        "                   wall-clock time, so use --rate and --event-rate to keep\n"
        "                   event time at about the wall clock's pace\n"
        "  --size MS        window length (default 1000): tumbling windows\n"
        "                   [k * SIZE, (k + 1) * SIZE)\n"
        "  --slide MS       sliding windows instead, [k * SLIDE, k * SLIDE + SIZE);\n"
        "                   SLIDE must divide SIZE (default: tumbling)\n"
        "  --lateness MS    allowed lateness: a window keeps its count MS ms of\n"
        "                   event time after it fired, and a late record within\n"
        "                   that fires it again (default 0)\n"
        "  --seed S         seed of the disorder and of the late records (default 1)\n"
        "  --sink SPEC      null (default), print, file:DIR, http://HOST:PORT/PATH\n"
        "                   or nats://HOST:PORT/SUBJECT (see README.md, Sinks), for\n"
        "                   both outputs\n"
        "Engine options (--parallelism, --workers, --summary-json, --quiet, ...) and\n"
        "checkpoint options (--state-dir, --checkpoint-interval, --restore, ...):\n"
        "see 'weir help run' (state under ./state by default). Window state and\n"
        "timers are checkpointed and move with their keys when a checkpoint is\n"
        "restored at another --parallelism.\n"
        "Numbers take a k, M or G suffix (x1000): --records 20M.\n",
        out);
}

/* --late-fraction: a decimal number 0 .. 1 ("0", "0.05", "1", ".5"),
 * without sign or exponent. Shared with the sessions job (cli.h). */
int cli_take_fraction(cli_args *a, const char *flag, double *out) {
  const char *v = NULL;
  int r = cli_take_str(a, flag, &v);
  if (r <= 0) return r;
  if (*v == '-') return cli_usage("%s: '%s' is negative; expected a fraction 0 .. 1", flag, v);
  size_t digits = strspn(v, "0123456789"), n = digits;
  if (v[n] == '.') {
    size_t frac = strspn(v + n + 1, "0123456789");
    digits += frac;
    n += 1 + frac;
  }
  if (digits == 0 || v[n] != '\0')
    return cli_usage("%s: '%s' is not a decimal fraction such as 0.01", flag, v);
  double f = strtod(v, NULL);
  if (!(f >= 0.0 && f <= 1.0)) return cli_usage("%s: '%s' is above 1", flag, v);
  *out = f;
  return 1;
}

static int windows_parse(cli_args *a, cli_engine *eng, void **out) {
  windows_cfg *c = calloc(1, sizeof *c);
  if (c == NULL) return cli_usage("out of memory");
  c->records = 10000000;
  c->keys = 100000;
  c->disorder = 100;
  c->size = 1000;
  c->seed = 1;
  c->sink = "null";
  int event_rate_set = 0;
  while (a->i < a->argc) {
    int r;
    if ((r = cli_take_engine(a, eng)) != 0 ||
        (r = cli_take_u64(a, "--records", UINT64_MAX, &c->records)) != 0 ||
        (r = cli_take_u64(a, "--keys", UINT64_MAX, &c->keys)) != 0 ||
        (r = cli_take_u64(a, "--rate", UINT64_MAX, &c->rate)) != 0 ||
        (r = cli_take_u64(a, "--disorder", MAX_MS, &c->disorder)) != 0 ||
        (r = cli_take_fraction(a, "--late-fraction", &c->late_fraction)) != 0 ||
        (r = cli_take_u64(a, "--size", MAX_MS, &c->size)) != 0 ||
        (r = cli_take_u64(a, "--lateness", MAX_MS, &c->lateness)) != 0 ||
        (r = cli_take_u64(a, "--seed", UINT64_MAX, &c->seed)) != 0 ||
        (r = cli_take_str(a, "--sink", &c->sink)) != 0) {
      if (r < 0) goto fail;
      continue;
    }
    if ((r = cli_take_u64(a, "--event-rate", UINT64_MAX, &c->event_rate)) != 0) {
      if (r < 0) goto fail;
      event_rate_set = 1;
      continue;
    }
    if ((r = cli_take_u64(a, "--slide", MAX_MS, &c->slide)) != 0) {
      if (r < 0) goto fail;
      c->sliding = 1;
      continue;
    }
    cli_unknown_arg(a, "windows");
    goto fail;
  }
  if (c->records == 0) {
    cli_usage("--records: must be at least 1 (the windows job's input is bounded)");
    goto fail;
  }
  if (c->keys == 0) {
    cli_usage("--keys: must be at least 1");
    goto fail;
  }
  if (event_rate_set && c->event_rate == 0) {
    cli_usage("--event-rate: must be at least 1 (records per second of event time)");
    goto fail;
  }
  if (c->size == 0) {
    cli_usage("--size: must be at least 1 ms");
    goto fail;
  }
  if (c->sliding) {
    if (c->slide == 0) {
      cli_usage("--slide: must be at least 1 ms");
      goto fail;
    }
    if (c->slide > c->size) {
      cli_usage("--slide %llu is longer than --size %llu: a slide must not exceed the window",
                (ull)c->slide, (ull)c->size);
      goto fail;
    }
    if (c->size % c->slide != 0) {
      cli_usage("--slide %llu does not divide --size %llu: the window length must be a "
                "multiple of the slide",
                (ull)c->slide, (ull)c->size);
      goto fail;
    }
  }
  if (cli_check_sink(c->sink, eng) < 0) goto fail;
  eng->total_records = c->records; /* the progress line's total */
  *out = c;
  return 0;
fail:
  free(c);
  return -1;
}

/* Writes v in decimal (with a sign) at p; returns the characters written. */
static size_t put_i64(char *p, int64_t v) {
  char d[24];
  size_t n = 0;
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  do {
    d[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  size_t k = 0;
  if (v < 0) p[k++] = '-';
  while (n) p[k++] = d[--n];
  return k;
}

/* A late record: its payload becomes "<ts>". */
int cli_format_late(weir_ctx *ctx, void *user, const weir_record *in) {
  (void)user;
  char line[24];
  return weir_emit(ctx, in->key, line, put_i64(line, in->ts));
}

/* A record that missed a window: its payload becomes "<start> <end> <ts>". */
static int format_missed(weir_ctx *ctx, void *user, const weir_record *in) {
  (void)user;
  weir_window_result m;
  if (weir_window_missed_parse(in, &m) < 0)
    return weir_ctx_fail(ctx, WEIR_EBADREC, "not a missed-window record (%u bytes)",
                         (unsigned)in->len);
  char line[72];
  size_t k = put_i64(line, m.start);
  line[k++] = ' ';
  k += put_i64(line + k, m.end);
  line[k++] = ' ';
  k += put_i64(line + k, in->ts);
  return weir_emit(ctx, in->key, line, k);
}

/* "<key> <payload>": the text the format operators made. */
size_t cli_key_and_text(const weir_record *r, char *buf, size_t cap) {
  char d[24];
  size_t kn = 0;
  uint64_t k = r->key;
  do {
    d[kn++] = (char)('0' + k % 10);
    k /= 10;
  } while (k);
  size_t total = kn + 1 + r->len;
  if (total >= cap) return total;
  for (size_t i = 0; i < kn; i++) buf[i] = d[kn - 1 - i];
  buf[kn] = ' ';
  if (r->len) memcpy(buf + kn + 1, r->payload, r->len);
  buf[total] = '\0';
  return total;
}

static int windows_build(weir_job *job, const cli_engine *eng, void *cfg) {
  windows_cfg *c = cfg;
  int p = eng->parallelism;
  weir_gen_opts g = {.records = c->records, .keys = c->keys, .rate = c->rate};
  weir_gen_time t = {.size = sizeof t,
                     .event_rate = c->event_rate,
                     .disorder_ms = c->disorder,
                     .late_fraction = c->late_fraction,
                     .late_lag_ms = 3 * c->size,
                     .seed = c->seed};
  weir_stream *s = weir_gen_timed(job, "gen", &g, &t, p);
  weir_window_spec w = {.size = sizeof w,
                        .kind = c->sliding ? WEIR_WINDOW_SLIDING : WEIR_WINDOW_TUMBLING,
                        .time = WEIR_EVENT_TIME,
                        .length = (int64_t)c->size,
                        .slide = (int64_t)c->slide,
                        .allowed_lateness = (int64_t)c->lateness};
  weir_stream *counts =
      weir_window_aggregate(weir_key_by(s), "window", &w, &weir_agg_count, NULL, p);
  weir_stream *late = weir_side_output(counts, WEIR_TAG_LATE);
  weir_sink_conf results = {.fmt = weir_format_window, .opid = weir_opid_window};
  int rc = weir_sink_to_conf(counts, "sink", c->sink, &results, p);
  if (rc) return rc;
  weir_sink_conf sc = {.fmt = cli_key_and_text};
  rc = weir_sink_to_conf(weir_flat_map(late, "format-late", cli_format_late, NULL, p), "late",
                         c->sink, &sc, p);
  if (rc || !c->sliding) return rc;
  weir_stream *missed = weir_side_output(counts, WEIR_TAG_MISSED);
  return weir_sink_to_conf(weir_flat_map(missed, "format-missed", format_missed, NULL, p), "missed",
                           c->sink, &sc, p);
}

/* The report line of the windows and sessions jobs (cli.h). */
void cli_report_windowed(const weir_job *job, const char *what, const char *done,
                         const char *results_of, cli_outcome *o, FILE *out) {
  uint64_t in = 0, records = 0, results = 0, late = 0;
  weir_job_operator_counts(job, "gen", &in, &records);
  weir_job_operator_counts(job, "sink", &results, &in);
  weir_job_operator_counts(job, "format-late", &in, &late);
  o->stopped = weir_job_stopped(job);
  const weir_run_info *ri = weir_job_run_info(job);
  char n[32];
  fprintf(out, "%s: %s %s records in %.2f s: %llu %s results, %llu late records", what,
          o->stopped ? "stopped after" : done, cli_human((double)records, n, sizeof n),
          o->elapsed_s, (ull)results, results_of, (ull)late);
  if (ri->restored_from)
    fprintf(out, " (this run, resumed from checkpoint %llu)", (ull)ri->restored_from);
  if (ri->last_checkpoint) fprintf(out, ", last checkpoint %llu", (ull)ri->last_checkpoint);
  fputc('\n', out);
}

static void windows_report(const weir_job *job, void *cfg, cli_outcome *o, FILE *out) {
  (void)cfg;
  cli_report_windowed(job, "windows", "windowed", "window", o, out);
}

static void windows_free(void *cfg) {
  free(cfg);
}

const cli_builtin cli_windows_job = {
    .name = "windows",
    .synopsis = "count records per key and event-time window (tumbling or sliding)",
    .help = windows_help,
    .parse = windows_parse,
    .build = windows_build,
    .report = windows_report,
    .free_cfg = windows_free,
};
