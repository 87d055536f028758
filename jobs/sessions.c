/* jobs/sessions.c: owns the built-in `sessions` job: its flags, its graph
 * and its report line.
 *
 * DESIGN. gen_timed (in burst mode) -> key_by -> session window (count) ->
 * sink, and the window's "late" side output -> format-late ->
 * late: the windows job's shape (jobs/windows.c, whose formatters and
 * sinks' line format it shares through cli.h) with session windows of gap
 * --gap. The generator is weir_gen_timed with session_gap_ms = --gap: the
 * timestamps of the windows job's formula, and keys moved into per-key
 * bursts (weir/operators.h) that rest 2 * gap ms slots, so that a key has
 * many sessions and a session many records. A --late-fraction of the
 * records lags D + 3 * gap ms more: behind every session it could join at
 * the paces that keep event time near the wall clock.
 *
 * The default gap, 1000 ms, fits the default pace: with E = 10 * K a key's
 * own records are 100 ms apart and --disorder 100 moves them by at most
 * 100 ms, far below the gap, so a burst is one session; bursts are apart by
 * more than 2 * gap - D. The default size (1M records over 1000 keys: 100 s
 * of event time, about a dozen sessions per key) keeps both well away from
 * one session per key and one per record.
 *
 * Lines: "<key> <session start> <session end> <count>" (sink "sink", end =
 * the last record's ts + gap) and "<key> <ts>" (sink "late"), as the
 * windows job's; with --sink file:DIR both sinks' parts are in DIR.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

typedef unsigned long long ull;

/* Bounds of the times (ms), so that D + 3 * gap and session ends stay far
 * from int64 overflow. */
#define MAX_MS 1000000000000ull

typedef struct sessions_cfg {
  uint64_t records, keys;
  uint64_t rate;       /* wall-clock records/s over all generators, 0 = unlimited */
  uint64_t event_rate; /* records per event-time second, 0 = 10 * keys */
  uint64_t disorder, gap, lateness, seed;
  double late_fraction;
  const char *sink;
} sessions_cfg;

static void sessions_help(FILE *out) {
  fputs("usage: weir run sessions [--records N] [--keys K] [--rate R] [--event-rate R]\n"
        "                         [--disorder MS] [--late-fraction F] [--gap MS]\n"
        "                         [--lateness MS] [--seed S] [--sink SPEC]\n"
        "                         [--parallelism P] [--workers W] [--summary-json FILE]\n"
        "                         [CHECKPOINT OPTIONS] [--quiet]\n"
        "\n"
        "Counts records per key and event-time session: a record at ts makes the\n"
        "window [ts, ts + GAP), and the windows of a key that overlap merge into\n"
        "one session (a record GAP or more after a session's last record starts a\n"
        "new one). A generator emits records i = 0 .. N-1 with event time, in\n"
        "milliseconds,\n"
        "\n"
        "  ts_i = floor(i * 1000 / E) - h_i mod (D + 1) - (late_i ? D + 3 * GAP : 0)\n"
        "\n"
        "where E = --event-rate, D = --disorder, GAP = --gap, h_i =\n"
        "splitmix64(splitmix64(S) ^ i) with S = --seed, and late_i holds when\n"
        "(splitmix64(h_i) >> 11) < F * 2^53 with F = --late-fraction (splitmix64(x):\n"
        "z = x + 0x9e3779b97f4a7c15, z = (z ^ z>>30) * 0xbf58476d1ce4e5b9,\n"
        "z = (z ^ z>>27) * 0x94d049bb133111eb, z ^ z>>31; weir/operators.h,\n"
        "weir_gen_timed), as the windows job's. Keys come in per-key bursts: event\n"
        "time is cut into slots of 2 * GAP ms, record i is in slot\n"
        "s_i = floor(floor(i * 1000 / E) / (2 * GAP)), and key k is on in slot s when\n"
        "\n"
        "  splitmix64(splitmix64(S) ^ splitmix64(k ^ splitmix64(s))) is odd\n"
        "\n"
        "Record i's key is the first of i mod K, i mod K + 1, ... (mod K) that is on\n"
        "in s_i (i mod K if no key is). So about half the keys are on in a slot and\n"
        "take the records of the keys that rest; a key's bursts are more than\n"
        "2 * GAP - D ms apart (separate sessions while D < GAP) and its records in a\n"
        "burst at most about K * 1000 / E + D ms apart (one session when that is\n"
        "below GAP). Every record i is emitted: N is the number of records.\n"
        "Watermarks allow D ms of disorder (bounded out-of-orderness, per generator\n"
        "split), so only the records chosen late can be late. A session fires when\n"
        "the watermark passes its end.\n"
        "\n"
        "Output, two sinks of the one job: each session firing as a line\n"
        "\"<key> <session start ms> <session end ms> <count>\" (sink 'sink'; end =\n"
        "the last record's ts + GAP), and each record that came too late for its\n"
        "session as \"<key> <ts ms>\" (sink 'late'). With --sink file:DIR both write\n"
        "their parts into DIR: sink-<s>-<n>.txt and late-<s>-<n>.txt. Under allowed\n"
        "lateness a session that a late record joins (possibly merging sessions)\n"
        "fires again at once with the higher count: that line supersedes the\n"
        "earlier lines of the sessions it covers.\n"
        "\n"
        "  --records N      records to generate (default 1M)\n"
        "  --keys K         distinct keys (default 1000)\n"
        "  --rate R         records per second of wall-clock time over all\n"
        "                   generators, 0 = as fast as possible (default 0)\n"
        "  --event-rate R   records per second of event time (default 10 * K:\n"
        "                   about 10 records per key and second of its own)\n"
        "  --disorder MS    records are up to MS early: the watermarks' bound of\n"
        "                   out-of-orderness (default 100)\n"
        "  --late-fraction F  this fraction of the records (0 .. 1, a decimal\n"
        "                   such as 0.01) lags D + 3 * GAP ms more: late records\n"
        "                   (default 0). Whether one comes behind the watermark\n"
        "                   depends on timing: watermarks go out every 200 ms of\n"
        "                   wall-clock time, so use --rate and --event-rate to keep\n"
        "                   event time at about the wall clock's pace\n"
        "  --gap MS         session gap, and half the generator's slot (default\n"
        "                   1000: above the default K * 1000 / E + D = 200 ms)\n"
        "  --lateness MS    allowed lateness: a session keeps its count MS ms of\n"
        "                   event time after it fired, and a late record within\n"
        "                   that fires it again (default 0)\n"
        "  --seed S         seed of the disorder, the late records and the bursts\n"
        "                   (default 1)\n"
        "  --sink SPEC      null (default), print, file:DIR, http://HOST:PORT/PATH\n"
        "                   or nats://HOST:PORT/SUBJECT (see README.md, Sinks), for\n"
        "                   both outputs\n"
        "Engine options (--parallelism, --workers, --summary-json, --quiet, ...) and\n"
        "checkpoint options (--state-dir, --checkpoint-interval, --restore, ...):\n"
        "see 'weir help run' (state under ./state by default). Session state and\n"
        "timers are checkpointed and move with their keys when a checkpoint is\n"
        "restored at another --parallelism.\n"
        "Numbers take a k, M or G suffix (x1000): --records 20M.\n",
        out);
}

static int sessions_parse(cli_args *a, cli_engine *eng, void **out) {
  sessions_cfg *c = calloc(1, sizeof *c);
  if (c == NULL) return cli_usage("out of memory");
  c->records = 1000000;
  c->keys = 1000;
  c->disorder = 100;
  c->gap = 1000;
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
        (r = cli_take_u64(a, "--gap", MAX_MS, &c->gap)) != 0 ||
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
    cli_unknown_arg(a, "sessions");
    goto fail;
  }
  if (c->records == 0) {
    cli_usage("--records: must be at least 1 (the sessions job's input is bounded)");
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
  if (c->gap == 0) {
    cli_usage("--gap: must be at least 1 ms");
    goto fail;
  }
  if (cli_check_sink(c->sink, eng) < 0) goto fail;
  eng->total_records = c->records; /* the progress line's total */
  *out = c;
  return 0;
fail:
  free(c);
  return -1;
}

static int sessions_build(weir_job *job, const cli_engine *eng, void *cfg) {
  sessions_cfg *c = cfg;
  int p = eng->parallelism;
  weir_gen_opts g = {.records = c->records, .keys = c->keys, .rate = c->rate};
  weir_gen_time t = {.size = sizeof t,
                     .event_rate = c->event_rate,
                     .disorder_ms = c->disorder,
                     .late_fraction = c->late_fraction,
                     .late_lag_ms = 3 * c->gap,
                     .seed = c->seed,
                     .session_gap_ms = c->gap};
  weir_stream *s = weir_gen_timed(job, "gen", &g, &t, p);
  weir_window_spec w = {.size = sizeof w,
                        .kind = WEIR_WINDOW_SESSION,
                        .time = WEIR_EVENT_TIME,
                        .length = (int64_t)c->gap,
                        .allowed_lateness = (int64_t)c->lateness};
  weir_stream *counts =
      weir_window_aggregate(weir_key_by(s), "session", &w, &weir_agg_count, NULL, p);
  weir_stream *late = weir_side_output(counts, WEIR_TAG_LATE);
  weir_sink_conf results = {.fmt = weir_format_window, .opid = weir_opid_window};
  int rc = weir_sink_to_conf(counts, "sink", c->sink, &results, p);
  if (rc) return rc;
  weir_sink_conf sc = {.fmt = cli_key_and_text};
  return weir_sink_to_conf(weir_flat_map(late, "format-late", cli_format_late, NULL, p), "late",
                           c->sink, &sc, p);
}

static void sessions_report(const weir_job *job, void *cfg, cli_outcome *o, FILE *out) {
  (void)cfg;
  cli_report_windowed(job, "sessions", "sessionized", "session", o, out);
}

static void sessions_free(void *cfg) {
  free(cfg);
}

const cli_builtin cli_sessions_job = {
    .name = "sessions",
    .synopsis = "count records per key and event-time session (session windows, --gap)",
    .help = sessions_help,
    .parse = sessions_parse,
    .build = sessions_build,
    .report = sessions_report,
    .free_cfg = sessions_free,
};
