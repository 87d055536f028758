/* tests/test_windows_job.c: the `windows` job (jobs/windows.c) end to end
 * with the weir binary: its output against a reference computed here,
 * conservation with late records, crash tests (random SIGKILLs, restores
 * at other parallelisms) with the exact output, a negative control that
 * restores without timers, and its command line.
 *
 * DESIGN. The reference does not use weir's window operator: it recomputes
 * every record's timestamp from the formula documented in weir/operators.h
 * (weir_gen_timed; splitmix64 written out again here) and counts, per key
 * and window, the records whose ts falls in [start, start + size). A run
 * writes with the file sink into OUT: results "<key> <start> <end>
 * <count>" in sink-*.txt, late records "<key> <ts>" in late-*.txt; any
 * other file (a .pending part: unpublished output) is a problem.
 *
 * - Without late records (--late-fraction 0) no record is ever late (the
 *   watermarks' bound is the disorder), so with lateness 0 every window
 *   fires exactly once: the output lines are exactly the reference's set,
 *   each once, and no late line. This is the check of the crash tests too:
 *   a duplicate (replayed and not rolled back) or a missing window fails.
 * - With late records: for every key and window, the last (largest) count
 *   written plus the late lines of that key whose ts the window holds
 *   plus the missed lines of that window (sliding: a record late for some
 *   of its windows only) equals the reference count; and every late or
 *   missed line is a record the formula chose late.
 * - The negative control kills a run right after a checkpoint, copies the
 *   directory, restores one copy with timers.skip_restore (every subtask
 *   drops its restored timers) and the other normally: the copy must be
 *   exact and the one without timers must not (windows missing).
 *
 * Runs use --workers 2 and checkpoints every 100 ms; --rate keeps a run at
 * a couple of seconds so kills land mid-run. Like the other crash tests
 * the program forces Criterion's --jobs 1. WEIR_TEST_SEED=N replays the
 * random kills; WEIR_TEST_KEEP=1 keeps a failed test's directory.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crash.h"
#include "helpers.h"

typedef unsigned long long ull;

/* One configuration of the job. */
typedef struct params {
  uint64_t records, keys, rate, event_rate;       /* event_rate 0: the job's default, 10 * keys */
  uint64_t disorder, size, slide, lateness, seed; /* slide 0: tumbling */
  const char *late_fraction;                      /* NULL: 0 */
} params;

typedef struct wjob {
  crash_job c; /* first: the harness's */
  params p;
} wjob;

/* ---- the reference ----------------------------------------------------------- */

static uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Record i's timestamp (weir/operators.h: weir_gen_timed, with the job's
 * late lag of 3 * size); *late says whether the formula chose it late. */
static int64_t ts_of(const params *p, double fraction, uint64_t i, int *late) {
  uint64_t e = p->event_rate ? p->event_rate : 10 * p->keys;
  int64_t base = (int64_t)((unsigned __int128)i * 1000u / e);
  uint64_t h = splitmix64(splitmix64(p->seed) ^ i);
  int64_t ts = base - (int64_t)(h % (p->disorder + 1));
  *late = (double)(splitmix64(h) >> 11) < fraction * 9007199254740992.0;
  if (*late) ts -= (int64_t)(p->disorder + 3 * p->size);
  return ts;
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

typedef struct ref {
  params p;
  double fraction;
  int64_t slide, smin; /* windows start at smin + k * slide, k < nw */
  uint64_t nw;
  uint64_t *count;     /* [key * nw + k]: the reference */
  uint64_t *got;       /* the largest count written */
  uint32_t *lines;     /* lines written */
  uint64_t *late;      /* late lines that the window holds */
  uint64_t n_late_ref; /* records the formula chose late */
  int64_t *late_ts;    /* their (key, ts), sorted, to match late lines */
  uint64_t *late_key;
  uint8_t *late_used;
} ref;

static int64_t slide_of(const params *p) {
  return (int64_t)(p->slide ? p->slide : p->size);
}

/* The windows holding ts: k from *first to *last (indexes). */
static void windows_of(const ref *r, int64_t ts, int64_t *first, int64_t *last) {
  int64_t s = floor_div(ts, r->slide) * r->slide; /* the last start holding ts */
  *last = (s - r->smin) / r->slide;
  *first = *last - ((int64_t)r->p.size / r->slide - 1);
}

static void ref_init(ref *r, const params *p) {
  memset(r, 0, sizeof *r);
  r->p = *p;
  r->fraction = p->late_fraction ? strtod(p->late_fraction, NULL) : 0.0;
  r->slide = slide_of(p);
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (uint64_t i = 0; i < p->records; i++) {
    int late;
    int64_t ts = ts_of(p, r->fraction, i, &late);
    if (ts < lo) lo = ts;
    if (ts > hi) hi = ts;
    r->n_late_ref += (uint64_t)late;
  }
  r->smin = floor_div(lo, r->slide) * r->slide - (int64_t)p->size;
  r->nw = (uint64_t)((hi - r->smin) / r->slide + 2);
  size_t n = p->keys * r->nw;
  r->count = calloc(n, sizeof *r->count);
  r->got = calloc(n, sizeof *r->got);
  r->lines = calloc(n, sizeof *r->lines);
  r->late = calloc(n, sizeof *r->late);
  r->late_key = calloc(r->n_late_ref + 1, sizeof *r->late_key);
  r->late_ts = calloc(r->n_late_ref + 1, sizeof *r->late_ts);
  r->late_used = calloc(r->n_late_ref + 1, 1);
  cr_assert(r->count && r->got && r->lines && r->late && r->late_key && r->late_ts && r->late_used);
  uint64_t nl = 0;
  for (uint64_t i = 0; i < p->records; i++) {
    int late;
    int64_t ts = ts_of(p, r->fraction, i, &late), first, last;
    uint64_t key = i % p->keys;
    windows_of(r, ts, &first, &last);
    for (int64_t k = first; k <= last; k++) r->count[key * r->nw + (uint64_t)k]++;
    if (late) {
      r->late_key[nl] = key;
      r->late_ts[nl++] = ts;
    }
  }
}

static void ref_clear_output(ref *r) {
  size_t n = r->p.keys * r->nw;
  memset(r->got, 0, n * sizeof *r->got);
  memset(r->lines, 0, n * sizeof *r->lines);
  memset(r->late, 0, n * sizeof *r->late);
  memset(r->late_used, 0, r->n_late_ref + 1);
}

static void ref_free(ref *r) {
  free(r->count);
  free(r->got);
  free(r->lines);
  free(r->late);
  free(r->late_key);
  free(r->late_ts);
  free(r->late_used);
}

/* ---- reading the output ------------------------------------------------------ */

typedef struct outcome {
  uint64_t problems, results, late_lines, missed_lines, windows_missing;
  char why[400];
} outcome;

static void problem(outcome *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(outcome *o, const char *fmt, ...) {
  if (!o->problems++) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->why, sizeof o->why, fmt, ap);
    va_end(ap);
  }
}

static int has_prefix_txt(const char *name, const char *prefix) {
  size_t n = strlen(name), p = strlen(prefix);
  return n > p + 4 && !strncmp(name, prefix, p) && !strcmp(name + n - 4, ".txt");
}

/* A late line "<key> <ts>": one of the records the formula chose late,
 * each at most once. */
static void take_late(ref *r, outcome *o, const char *file, uint64_t key, int64_t ts) {
  for (uint64_t i = 0; i < r->n_late_ref; i++) {
    if (r->late_key[i] != key || r->late_ts[i] != ts || r->late_used[i]) continue;
    r->late_used[i] = 1;
    int64_t first, last;
    windows_of(r, ts, &first, &last);
    for (int64_t k = first; k <= last; k++) r->late[key * r->nw + (uint64_t)k]++;
    return;
  }
  problem(o, "%s: late line '%llu %lld' is no record chosen late (or one twice)", file, (ull)key,
          (long long)ts);
}

/* A missed line "<key> <start> <end> <ts>": one of the records the formula
 * chose late, late for the window [start, end) only (of its windows). */
static void take_missed(ref *r, outcome *o, const char *file, uint64_t key, int64_t start,
                        int64_t end, int64_t ts) {
  int64_t first, last, w = floor_div(start - r->smin, r->slide);
  windows_of(r, ts, &first, &last);
  int chosen = 0;
  for (uint64_t i = 0; i < r->n_late_ref && !chosen; i++)
    chosen = r->late_key[i] == key && r->late_ts[i] == ts;
  if (!chosen || end - start != (int64_t)r->p.size || w < first || w > last) {
    problem(o, "%s: missed line '%llu %lld %lld %lld' is no window of a record chosen late", file,
            (ull)key, (long long)start, (long long)end, (long long)ts);
    return;
  }
  o->missed_lines++;
  r->late[key * r->nw + (uint64_t)w]++;
}

static void read_file(ref *r, outcome *o, const char *dir, const char *name) {
  int results = has_prefix_txt(name, "sink-"), late = has_prefix_txt(name, "late-");
  int missed = has_prefix_txt(name, "missed-");
  if (!results && !late && !missed) {
    problem(o, "unexpected file %s in the sink directory", name);
    return;
  }
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *text = th_read_file(path, NULL);
  if (!text) {
    problem(o, "cannot read %s", path);
    return;
  }
  for (char *s = text, *nl; *s; s = nl + 1) {
    nl = strchr(s, '\n');
    if (!nl) {
      problem(o, "%s: last line without a newline: '%.40s'", name, s);
      break;
    }
    *nl = '\0';
    ull key, v;
    long long a, b;
    char extra;
    if (missed) {
      long long c;
      if (sscanf(s, "%llu %lld %lld %lld%c", &key, &a, &b, &c, &extra) != 4 || key >= r->p.keys) {
        problem(o, "%s: bad missed line '%.80s'", name, s);
        continue;
      }
      take_missed(r, o, name, key, a, b, c);
      continue;
    }
    if (late) {
      if (sscanf(s, "%llu %lld%c", &key, &a, &extra) != 2 || key >= r->p.keys) {
        problem(o, "%s: bad late line '%.80s'", name, s);
        continue;
      }
      o->late_lines++;
      take_late(r, o, name, key, a);
      continue;
    }
    if (sscanf(s, "%llu %lld %lld %llu%c", &key, &a, &b, &v, &extra) != 4 || key >= r->p.keys ||
        b - a != (long long)r->p.size ||
        floor_div(a - r->smin, r->slide) * r->slide != a - r->smin || a < r->smin ||
        (uint64_t)((a - r->smin) / r->slide) >= r->nw) {
      problem(o, "%s: bad result line '%.80s'", name, s);
      continue;
    }
    o->results++;
    size_t w = key * r->nw + (uint64_t)((a - r->smin) / r->slide);
    r->lines[w]++;
    if (v > r->got[w]) r->got[w] = v;
  }
  free(text);
}

/* Reads OUT and compares it with the reference. exact: every window with
 * records written once with its count, no late line; otherwise
 * conservation: last count + late lines = reference, per window. */
static void check_output(ref *r, const char *out, int exact, outcome *o) {
  memset(o, 0, sizeof *o);
  ref_clear_output(r);
  DIR *d = opendir(out);
  if (!d) {
    problem(o, "no sink directory %s", out);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) read_file(r, o, out, e->d_name);
  closedir(d);
  if (exact && o->late_lines)
    problem(o, "%llu late lines without late records", (ull)o->late_lines);
  for (uint64_t key = 0; key < r->p.keys; key++)
    for (uint64_t k = 0; k < r->nw; k++) {
      size_t w = key * r->nw + k;
      long long start = (long long)(r->smin + (int64_t)k * r->slide);
      if (exact) {
        if (r->count[w] && !r->lines[w]) o->windows_missing++;
        if (r->count[w] && !r->lines[w])
          problem(o, "window %llu [%lld, %lld) missing (reference %llu)", (ull)key, start,
                  start + (long long)r->p.size, (ull)r->count[w]);
        else if (r->lines[w] > 1)
          problem(o, "window %llu [%lld, ...) written %u times", (ull)key, start, r->lines[w]);
        else if (r->got[w] != r->count[w])
          problem(o, "window %llu [%lld, ...): %llu, reference %llu", (ull)key, start,
                  (ull)r->got[w], (ull)r->count[w]);
      } else if (r->got[w] + r->late[w] != r->count[w]) {
        problem(o, "window %llu [%lld, ...): last count %llu + %llu late != reference %llu",
                (ull)key, start, (ull)r->got[w], (ull)r->late[w], (ull)r->count[w]);
      }
    }
}

/* ---- jobs ------------------------------------------------------------------------ */

static wjob *wjob_new(const params *p, int par) {
  wjob *j = (wjob *)crash_new("windows", sizeof(wjob));
  j->p = *p;
  crash_par(&j->c, par);
  j->c.interval = "100";
  j->c.timeout_s = 120;
  crash_arg(&j->c, "--records", "%llu", (ull)p->records);
  crash_arg(&j->c, "--keys", "%llu", (ull)p->keys);
  if (p->rate) crash_arg(&j->c, "--rate", "%llu", (ull)p->rate);
  if (p->event_rate) crash_arg(&j->c, "--event-rate", "%llu", (ull)p->event_rate);
  crash_arg(&j->c, "--disorder", "%llu", (ull)p->disorder);
  crash_arg(&j->c, "--size", "%llu", (ull)p->size);
  if (p->slide) crash_arg(&j->c, "--slide", "%llu", (ull)p->slide);
  if (p->lateness) crash_arg(&j->c, "--lateness", "%llu", (ull)p->lateness);
  crash_arg(&j->c, "--seed", "%llu", (ull)p->seed);
  if (p->late_fraction) crash_arg(&j->c, "--late-fraction", "%s", p->late_fraction);
  return j;
}

static void assert_exact(wjob *j, ref *r, const char *what) {
  outcome o;
  check_output(r, j->c.out, 1, &o);
  cr_assert_eq(o.problems, 0, "%s: %llu problems, first: %s\nhistory: %s", what, (ull)o.problems,
               o.why, j->c.history);
  cr_assert_gt(o.results, 0, "%s: no results\nhistory: %s", what, j->c.history);
}

/* Tumbling 1 s windows over 20 keys, 150 s of event time, 100 ms of
 * disorder. */
static const params TUMBLING = {
    .records = 30000, .keys = 20, .rate = 15000, .disorder = 100, .size = 1000, .seed = 7};
/* Sliding 2 s windows every 500 ms. */
static const params SLIDING = {.records = 30000,
                               .keys = 20,
                               .rate = 15000,
                               .disorder = 300,
                               .size = 2000,
                               .slide = 500,
                               .seed = 11};

/* ---- against the reference ---------------------------------------------------- */

TestSuite(windows_job, .timeout = 200, .fini = crash_fini);

static void run_exact(const params *p, int par, const char *what) {
  ref r;
  ref_init(&r, p);
  wjob *j = wjob_new(p, par);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s: exit %d: %s", what, rc, err);
  free(err);
  assert_exact(j, &r, what);
  crash_free(&j->c);
  ref_free(&r);
}

/* As fast as it goes (no --rate), at parallelism 1 and 3: exact. */
Test(windows_job, tumbling_exact) {
  params p = TUMBLING;
  p.rate = 0;
  run_exact(&p, 1, "tumbling P=1");
  run_exact(&p, 3, "tumbling P=3");
}

Test(windows_job, sliding_exact) {
  params p = SLIDING;
  p.rate = 0;
  run_exact(&p, 1, "sliding P=1");
  run_exact(&p, 3, "sliding P=3");
}

/* Event time moves slowly against the wall clock here (10k records per
 * event second, 5k per wall second): the watermark trails the newest
 * records by about a tenth of a second of event time, while late records
 * lag D + 3 * size, so they come behind every window they belong to. */
/* Returns the missed lines. */
static uint64_t run_conservation(const params *p, const char *what) {
  ref r;
  ref_init(&r, p);
  cr_assert_gt(r.n_late_ref, 100, "too few late records to test: %llu", (ull)r.n_late_ref);
  wjob *j = wjob_new(p, 2);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s: exit %d: %s", what, rc, err);
  free(err);
  outcome o;
  check_output(&r, j->c.out, 0, &o);
  fprintf(stderr,
          "windows_job: %s: %llu results, %llu late lines of %llu records chosen late, %llu "
          "missed lines\n",
          what, (ull)o.results, (ull)o.late_lines, (ull)r.n_late_ref, (ull)o.missed_lines);
  cr_assert_eq(o.problems, 0, "%s: %llu problems, first: %s\nhistory: %s", what, (ull)o.problems,
               o.why, j->c.history);
  /* The records chosen late at the very start come before any watermark
   * and count in their windows; most must be late. */
  cr_assert_gt(o.late_lines, r.n_late_ref / 2, "%s: only %llu of %llu records late", what,
               (ull)o.late_lines, (ull)r.n_late_ref);
  crash_free(&j->c);
  ref_free(&r);
  return o.missed_lines;
}

Test(windows_job, late_tumbling_conservation) {
  params p = {.records = 20000,
              .keys = 10,
              .rate = 5000,
              .event_rate = 10000,
              .disorder = 20,
              .size = 200,
              .seed = 3,
              .late_fraction = "0.05"};
  run_conservation(&p, "tumbling");
  /* Allowed lateness: windows fire again; the last count conserves. */
  p.lateness = 300;
  p.seed = 4;
  run_conservation(&p, "tumbling, lateness 300");
}

/* A sliding record late for only some of its windows counts in the others
 * and is written once per window it missed (sink 'missed'): conservation
 * holds per window whatever the timing. */
Test(windows_job, late_sliding_conservation) {
  params p = {.records = 20000,
              .keys = 10,
              .rate = 5000,
              .event_rate = 10000,
              .disorder = 20,
              .size = 400,
              .slide = 100,
              .seed = 5,
              .late_fraction = "0.05"};
  run_conservation(&p, "sliding");
  /* Event time at twice the wall clock's pace: the watermark lags more
   * event time, and records often miss some of their windows only (how
   * many depends on timing: 480-607 in runs here, none in another build;
   * test_windows sliding_late_and_missed_conserve_counts makes them by the
   * disorder itself). The count is conserved either way. */
  p.event_rate = 2500;
  p.seed = 6;
  run_conservation(&p, "sliding, fast event time");
}

/* ---- crashes ------------------------------------------------------------------- */

static int kill_delay(crash_job *j, int attempt, int killing, void *rng) {
  (void)j;
  if (!killing) return -1;
  /* A run takes about 2 s; a restore has less left to do. */
  return attempt ? 200 + (int)(th_splitmix64(rng) % 700) : 300 + (int)(th_splitmix64(rng) % 1400);
}

static void random_kills(const params *p, const char *what) {
  uint64_t seed = crash_seed(what), rng = seed;
  ref r;
  ref_init(&r, p);
  int kills = 0;
  for (int n = 0; n < 2; n++) {
    wjob *j = wjob_new(p, 2);
    crash_hist(&j->c, "seed %llu: ", (ull)seed);
    crash_schedule s = {
        .kills = 1 + n, .restore = 1, .max_attempts = 8, .delay = kill_delay, .user = &rng};
    kills += crash_kill_randomly(&j->c, &s, NULL);
    assert_exact(j, &r, what);
    crash_free(&j->c);
  }
  fprintf(stderr, "%s: %d kills landed\n", what, kills);
  cr_assert_gt(kills, 0, "%s: no kill landed", what);
  ref_free(&r);
}

Test(windows_job, tumbling_random_kills) {
  random_kills(&TUMBLING, "windows_job::tumbling_random_kills");
}

Test(windows_job, sliding_random_kills) {
  random_kills(&SLIDING, "windows_job::sliding_random_kills");
}

/* Killed at parallelism from, restored from a checkpoint at parallelism
 * to (window state and timers move with their keys), then exact. */
static void rescale(const params *p, int from, int to, const char *what) {
  uint64_t seed = crash_seed(what), rng = seed;
  ref r;
  ref_init(&r, p);
  for (int attempt = 0;; attempt++) {
    cr_assert_lt(attempt, 6, "%s: no restore from a mid-run checkpoint in 6 attempts", what);
    wjob *j = wjob_new(p, from);
    int delay = 400 + (int)(th_splitmix64(&rng) % 1000);
    char *err = NULL;
    int rc = crash_run(&j->c, NULL, delay, &err, NULL);
    free(err);
    if (rc != CRASH_KILLED) { /* it ended before the kill */
      crash_free(&j->c);
      continue;
    }
    crash_par(&j->c, to);
    long long at = crash_restore_to_end(&j->c, 1, NULL, NULL, NULL);
    if (at <= 0) { /* no checkpoint yet, or the final one: no rescale */
      crash_free(&j->c);
      continue;
    }
    fprintf(stderr, "%s: killed at %d ms, restored checkpoint %lld at P=%d\n", what, delay, at, to);
    assert_exact(j, &r, what);
    crash_free(&j->c);
    break;
  }
  ref_free(&r);
}

Test(windows_job, rescale_tumbling_2_to_3) {
  rescale(&TUMBLING, 2, 3, "windows_job::rescale_tumbling_2_to_3");
}

Test(windows_job, rescale_tumbling_3_to_1) {
  rescale(&TUMBLING, 3, 1, "windows_job::rescale_tumbling_3_to_1");
}

Test(windows_job, rescale_sliding_3_to_1) {
  rescale(&SLIDING, 3, 1, "windows_job::rescale_sliding_3_to_1");
}

Test(windows_job, rescale_sliding_2_to_3) {
  rescale(&SLIDING, 2, 3, "windows_job::rescale_sliding_2_to_3");
}

/* The tumbling job at parallelism 2, killed after its 6th checkpoint. */
static wjob *tumbling_killed_mid_run(void) {
  wjob *j = wjob_new(&TUMBLING, 2);
  char *err = NULL;
  crash_kill_at(&j->c, "ckpt.after_meta_commit", 6, 0, &err, NULL);
  free(err);
  return j;
}

/* The exact check sees lost timers: restored without them (failpoint
 * timers.skip_restore on every subtask), windows are missing; the twin
 * restored from the same checkpoint with them is exact. */
Test(windows_job, negative_control_timers_not_restored) {
  ref r;
  ref_init(&r, &TUMBLING);
  wjob *j = tumbling_killed_mid_run();
  char *err = NULL;
  wjob *twin = (wjob *)crash_twin(&j->c, sizeof(wjob));

  long long at = crash_restore_to_end(&j->c, 1, "timers.skip_restore=error+", &err, NULL);
  cr_assert_gt(at, 0, "did not resume from a checkpoint: %s", err);
  free(err);
  outcome o;
  check_output(&r, j->c.out, 1, &o);
  fprintf(stderr,
          "windows_job::negative_control: without timers: %llu problems, %llu windows missing "
          "(%s)\n",
          (ull)o.problems, (ull)o.windows_missing, o.problems ? o.why : "none");
  cr_assert_gt(o.windows_missing, 0,
               "restored without its timers, the job still wrote every window: the exact check "
               "cannot see lost timers\nhistory: %s",
               j->c.history);

  long long at2 = crash_restore_to_end(&twin->c, 1, NULL, &err, NULL);
  cr_assert_eq(at2, at, "the twin resumed elsewhere: %s", err);
  free(err);
  assert_exact(twin, &r, "twin restored with its timers");
  crash_free(&twin->c);
  crash_free(&j->c);
  ref_free(&r);
}

/* Windows without lateness keep 8-byte counts in namespaced state, with
 * lateness in byte-string entries: a restore with lateness switched on is
 * refused (exit 2, nothing changed), not run with its windows unseen; the
 * restore as the job was is then exact. */
Test(windows_job, restore_with_other_lateness_is_refused) {
  ref r;
  ref_init(&r, &TUMBLING);
  wjob *j = tumbling_killed_mid_run();
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, "--restore", "latest", "--lateness", "500", NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "other layout") && strstr(err, "allowed lateness"), "%s", err);
  free(err);
  long long at = crash_restore_to_end(&j->c, 1, NULL, &err, NULL);
  cr_assert_gt(at, 0, "did not resume from a checkpoint: %s", err);
  free(err);
  assert_exact(j, &r, "restored as it was after the refusal");
  crash_free(&j->c);
  ref_free(&r);
}

/* ---- the command line ------------------------------------------------------------ */

static int weir(char **out, char **err, const char *const *args) {
  const char *argv[32] = {WEIR_BINARY};
  size_t n = 1;
  for (; args[n - 1]; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  return th_run(argv, NULL, out, err, 60);
}

Test(windows_job, usage_errors) {
  static const struct {
    const char *args[8];
    const char *says;
  } cases[] = {
      {{"run", "windows", "--slide", "300", "--size", "1000", NULL}, "does not divide --size"},
      {{"run", "windows", "--slide", "2000", NULL}, "longer than --size"},
      {{"run", "windows", "--slide", "0", NULL}, "--slide: must be at least 1"},
      {{"run", "windows", "--size", "0", NULL}, "--size: must be at least 1"},
      {{"run", "windows", "--size", "-1000", NULL}, "--size: '-1000' is negative"},
      {{"run", "windows", "--disorder", "-5", NULL}, "--disorder: '-5' is negative"},
      {{"run", "windows", "--lateness", "-1", NULL}, "--lateness: '-1' is negative"},
      {{"run", "windows", "--late-fraction", "-0.1", NULL}, "--late-fraction: '-0.1' is negative"},
      {{"run", "windows", "--late-fraction", "2", NULL}, "--late-fraction: '2' is above 1"},
      {{"run", "windows", "--late-fraction", "1e-3", NULL}, "is not a decimal fraction"},
      {{"run", "windows", "--event-rate", "0", NULL}, "--event-rate: must be at least 1"},
      {{"run", "windows", "--keys", "0", NULL}, "--keys: must be at least 1"},
      {{"run", "windows", "--gap", "10", NULL}, "unknown flag '--gap' for job 'windows'"},
      {{"run", "nosuchjob", NULL}, "windows"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL, *err = NULL;
    int rc = weir(&out, &err, cases[i].args);
    cr_assert_eq(rc, 2, "%s %s: exit %d, stderr: %s", cases[i].args[2],
                 cases[i].args[3] ? cases[i].args[3] : "", rc, err);
    cr_assert(strstr(err, cases[i].says), "%s: no '%s' in stderr: %s", cases[i].args[2],
              cases[i].says, err);
    free(out);
    free(err);
  }
}

Test(windows_job, help_names_every_flag) {
  static const char *const flags[] = {"--records",  "--keys",          "--rate", "--event-rate",
                                      "--disorder", "--late-fraction", "--size", "--slide",
                                      "--lateness", "--seed",          "--sink", "--parallelism",
                                      "supersedes"};
  static const char *const help[] = {"help", "run", "windows", NULL};
  char *out = NULL, *err = NULL;
  int rc = weir(&out, &err, help);
  cr_assert_eq(rc, 0, "weir help run windows: exit %d: %s", rc, err);
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    cr_assert(strstr(out, flags[i]), "'weir help run windows' does not name %s:\n%s", flags[i],
              out);
  free(out);
  free(err);
  /* The job is in the list of built-in jobs. */
  static const char *const run_help[] = {"help", "run", NULL};
  rc = weir(&out, &err, run_help);
  cr_assert_eq(rc, 0);
  cr_assert(strstr(out, "  windows "), "'weir help run' does not list windows:\n%s", out);
  free(out);
  free(err);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, "info");
}
