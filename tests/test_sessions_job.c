/* tests/test_sessions_job.c: the `sessions` job (jobs/sessions.c) end to
 * end with the weir binary: its output against sessions computed here,
 * conservation with late records, crash tests (random SIGKILLs, restores
 * at other parallelisms) with the exact output, and its command line.
 *
 * DESIGN. The reference does not use weir's window operator nor its
 * generator: it recomputes every record's timestamp and key from the
 * formulas documented in weir/operators.h (weir_gen_timed with
 * session_gap_ms; splitmix64 written out again here), sorts each key's
 * timestamps and cuts them into sessions: a timestamp at or after the
 * current session's end (its last timestamp + gap) starts a new one. A
 * run writes with the file sink into OUT: sessions "<key> <start> <end>
 * <count>" in sink-*.txt, late records "<key> <ts>" in late-*.txt; any
 * other file (a .pending part: unpublished output) is a problem.
 *
 * - Without late records no record is ever late (the watermarks' bound is
 *   the disorder), so with lateness 0 every session fires exactly once:
 *   the sorted output lines equal the reference's sorted sessions. This is
 *   the check of the crash tests too: a duplicate (replayed and not rolled
 *   back), a missing or a wrongly merged session fails. The reference must
 *   also have many sessions per key and many records per session, or the
 *   generator's bursts are not doing their work.
 * - The negative control kills a run right after a checkpoint, copies the
 *   directory, restores one copy with timers.skip_restore (every subtask
 *   drops its restored timers) and the other normally: the copy must be
 *   exact and the one without timers must not (sessions missing).
 * - With late records and lateness 0: every record is counted in exactly
 *   one session or written as late, so the counts plus the late lines make
 *   the records; every late line is a record the formula chose late.
 *
 * Runs use --workers 2 and checkpoints every 100 ms; --rate keeps a crash
 * run at about two seconds so kills land mid-run. Like the other crash
 * tests the program forces Criterion's --jobs 1. WEIR_TEST_SEED=N replays
 * the random kills; WEIR_TEST_KEEP=1 keeps a failed test's directory.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crash.h"
#include "helpers.h"
#include "weir/operators.h"
#include "weir/weir.h"

typedef unsigned long long ull;

/* One configuration of the job. */
typedef struct params {
  uint64_t records, keys, rate, event_rate; /* event_rate 0: the job's default, 10 * keys */
  uint64_t disorder, gap, seed;
  const char *late_fraction; /* NULL: 0 */
} params;

typedef struct sjob {
  crash_job c; /* first: the harness's */
  params p;
} sjob;

/* ---- the reference ----------------------------------------------------------- */

static uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t event_rate(const params *p) {
  return p->event_rate ? p->event_rate : 10 * p->keys;
}

/* Record i's timestamp (weir/operators.h: weir_gen_timed, with the job's
 * late lag of 3 * gap); *late says whether the formula chose it late. */
static int64_t ts_of(const params *p, double fraction, uint64_t i, int *late) {
  int64_t base = (int64_t)((unsigned __int128)i * 1000u / event_rate(p));
  uint64_t h = splitmix64(splitmix64(p->seed) ^ i);
  int64_t ts = base - (int64_t)(h % (p->disorder + 1));
  *late = (double)(splitmix64(h) >> 11) < fraction * 9007199254740992.0;
  if (*late) ts -= (int64_t)(p->disorder + 3 * p->gap);
  return ts;
}

/* Record i's key in burst mode: the first key from i mod K on, cyclically,
 * that is on in i's slot of 2 * gap ms of base time. */
static uint64_t key_of(const params *p, uint64_t i) {
  uint64_t base = (uint64_t)((unsigned __int128)i * 1000u / event_rate(p));
  uint64_t s = base / (2 * p->gap);
  for (uint64_t n = 0; n < p->keys; n++) {
    uint64_t k = (i % p->keys + n) % p->keys;
    if (splitmix64(splitmix64(p->seed) ^ splitmix64(k ^ splitmix64(s))) & 1) return k;
  }
  return i % p->keys;
}

/* A session line, or a late record (start = ts, end = count = 0). */
typedef struct line {
  uint64_t key;
  int64_t start, end;
  uint64_t count;
} line;

static int line_cmp(const void *a, const void *b) {
  const line *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->count < y->count ? -1 : x->count > y->count;
}

typedef struct ref {
  params p;
  double fraction;
  line *sessions; /* of the records not chosen late, sorted */
  uint64_t n_sessions;
  line *late; /* the records chosen late (key, ts), sorted */
  uint64_t n_late;
} ref;

/* The reference: every record's (key, ts), per key sorted and cut into
 * sessions (the records chosen late apart: with late records the test
 * checks conservation only). */
static void ref_init(ref *r, const params *p) {
  memset(r, 0, sizeof *r);
  r->p = *p;
  r->fraction = p->late_fraction ? strtod(p->late_fraction, NULL) : 0.0;
  line *rec = calloc(p->records, sizeof *rec);
  r->late = calloc(p->records + 1, sizeof *r->late);
  r->sessions = calloc(p->records + 1, sizeof *r->sessions);
  cr_assert(rec && r->late && r->sessions);
  uint64_t n = 0;
  for (uint64_t i = 0; i < p->records; i++) {
    int late;
    int64_t ts = ts_of(p, r->fraction, i, &late);
    line l = {.key = key_of(p, i), .start = ts};
    if (late)
      r->late[r->n_late++] = l;
    else
      rec[n++] = l;
  }
  qsort(rec, n, sizeof *rec, line_cmp);
  qsort(r->late, r->n_late, sizeof *r->late, line_cmp);
  for (uint64_t i = 0; i < n; i++) {
    line *cur = r->n_sessions ? &r->sessions[r->n_sessions - 1] : NULL;
    if (cur && cur->key == rec[i].key && rec[i].start < cur->end) {
      cur->end = rec[i].start + (int64_t)p->gap;
      cur->count++;
      continue;
    }
    r->sessions[r->n_sessions++] =
        (line){rec[i].key, rec[i].start, rec[i].start + (int64_t)p->gap, 1};
  }
  free(rec);
}

static void ref_free(ref *r) {
  free(r->sessions);
  free(r->late);
}

/* ---- reading the output ------------------------------------------------------ */

typedef struct outcome {
  uint64_t problems;
  line *results, *late;
  uint64_t n_results, n_late, cap_results, cap_late;
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

static void push(line **a, uint64_t *n, uint64_t *cap, line l) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 1024;
    *a = realloc(*a, *cap * sizeof **a);
    cr_assert(*a);
  }
  (*a)[(*n)++] = l;
}

static int has_prefix_txt(const char *name, const char *prefix) {
  size_t n = strlen(name), p = strlen(prefix);
  return n > p + 4 && !strncmp(name, prefix, p) && !strcmp(name + n - 4, ".txt");
}

static void read_part(const params *p, outcome *o, const char *dir, const char *name) {
  int results = has_prefix_txt(name, "sink-"), late = has_prefix_txt(name, "late-");
  if (!results && !late) {
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
    if (late) {
      if (sscanf(s, "%llu %lld%c", &key, &a, &extra) != 2 || key >= p->keys)
        problem(o, "%s: bad late line '%.80s'", name, s);
      else
        push(&o->late, &o->n_late, &o->cap_late, (line){key, a, 0, 0});
      continue;
    }
    if (sscanf(s, "%llu %lld %lld %llu%c", &key, &a, &b, &v, &extra) != 4 || key >= p->keys ||
        b - a < (long long)p->gap || v == 0)
      problem(o, "%s: bad session line '%.80s'", name, s);
    else
      push(&o->results, &o->n_results, &o->cap_results, (line){key, a, b, v});
  }
  free(text);
}

/* Reads OUT, both sinks' lines sorted into o. */
static void read_output(const params *p, const char *out, outcome *o) {
  memset(o, 0, sizeof *o);
  DIR *d = opendir(out);
  if (!d) {
    problem(o, "no sink directory %s", out);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) read_part(p, o, out, e->d_name);
  closedir(d);
  /* (qsort of no lines: its array may be NULL, which qsort may not get) */
  if (o->n_results) qsort(o->results, o->n_results, sizeof *o->results, line_cmp);
  if (o->n_late) qsort(o->late, o->n_late, sizeof *o->late, line_cmp);
}

static void outcome_free(outcome *o) {
  free(o->results);
  free(o->late);
}

/* Exact: the sessions written are the reference's, each once, and no
 * late line. */
static void check_exact(const ref *r, const char *out, outcome *o) {
  read_output(&r->p, out, o);
  if (o->n_late) problem(o, "%llu late lines without late records", (ull)o->n_late);
  uint64_t i = 0, j = 0;
  while (i < r->n_sessions || j < o->n_results) {
    int c = i == r->n_sessions  ? 1
            : j == o->n_results ? -1
                                : line_cmp(&r->sessions[i], &o->results[j]);
    if (c == 0) {
      i++, j++;
      continue;
    }
    const line *l = c < 0 ? &r->sessions[i++] : &o->results[j++];
    problem(o, "session %llu [%lld, %lld) count %llu %s", (ull)l->key, (long long)l->start,
            (long long)l->end, (ull)l->count,
            c < 0 ? "missing from the output" : "written but not in the reference (or twice)");
  }
}

/* Conservation: the counts and the late lines make the records, and every
 * late line is a record chosen late (each once). */
static void check_conserved(const ref *r, const char *out, outcome *o) {
  read_output(&r->p, out, o);
  uint64_t sum = 0;
  for (uint64_t j = 0; j < o->n_results; j++) sum += o->results[j].count;
  if (sum + o->n_late != r->p.records)
    problem(o, "counts %llu + late lines %llu != records %llu", (ull)sum, (ull)o->n_late,
            (ull)r->p.records);
  uint64_t i = 0;
  for (uint64_t j = 0; j < o->n_late; j++) {
    while (i < r->n_late && line_cmp(&r->late[i], &o->late[j]) < 0) i++;
    if (i == r->n_late || line_cmp(&r->late[i], &o->late[j]) != 0) {
      problem(o, "late line '%llu %lld' is no record chosen late (or one twice)",
              (ull)o->late[j].key, (long long)o->late[j].start);
      continue;
    }
    i++;
  }
}

/* ---- jobs ------------------------------------------------------------------------ */

static sjob *sjob_new(const params *p, int par) {
  sjob *j = (sjob *)crash_new("sessions", sizeof(sjob));
  j->p = *p;
  crash_par(&j->c, par);
  j->c.interval = "100";
  j->c.timeout_s = 120;
  crash_arg(&j->c, "--records", "%llu", (ull)p->records);
  crash_arg(&j->c, "--keys", "%llu", (ull)p->keys);
  if (p->rate) crash_arg(&j->c, "--rate", "%llu", (ull)p->rate);
  if (p->event_rate) crash_arg(&j->c, "--event-rate", "%llu", (ull)p->event_rate);
  crash_arg(&j->c, "--disorder", "%llu", (ull)p->disorder);
  crash_arg(&j->c, "--gap", "%llu", (ull)p->gap);
  crash_arg(&j->c, "--seed", "%llu", (ull)p->seed);
  if (p->late_fraction) crash_arg(&j->c, "--late-fraction", "%s", p->late_fraction);
  return j;
}

static void assert_exact(sjob *j, const ref *r, const char *what) {
  outcome o;
  check_exact(r, j->c.out, &o);
  cr_assert_eq(o.problems, 0,
               "%s: %llu problems (%llu sessions written, reference %llu), first: "
               "%s\nhistory: %s",
               what, (ull)o.problems, (ull)o.n_results, (ull)r->n_sessions, o.why, j->c.history);
  outcome_free(&o);
}

/* 30k records over 20 keys at the default event rate (10 per key and
 * second: 150 s of event time), 100 ms of disorder, the default gap: a
 * key's bursts hold tens of records, and it has about twenty of them. */
static const params BURSTS = {
    .records = 30000, .keys = 20, .rate = 15000, .disorder = 100, .gap = 1000, .seed = 7};

/* ---- against the reference ---------------------------------------------------- */

TestSuite(sessions_job, .timeout = 200, .fini = crash_fini);

/* The generator's bursts make sessions of many records, and many per key;
 * the reference itself is checked for that, so that an exact match says
 * something. */
Test(sessions_job, reference_has_bursts) {
  ref r;
  ref_init(&r, &BURSTS);
  fprintf(stderr, "sessions_job: reference: %llu sessions of %llu records over %llu keys\n",
          (ull)r.n_sessions, (ull)BURSTS.records, (ull)BURSTS.keys);
  cr_assert_gt(r.n_sessions, 5 * BURSTS.keys, "%llu sessions: about one per key",
               (ull)r.n_sessions);
  cr_assert_lt(r.n_sessions, BURSTS.records / 20, "%llu sessions: about one per record",
               (ull)r.n_sessions);
  /* Every key has sessions of its own (the bursts move records between
   * keys, they must not starve one). */
  uint64_t keys_seen = 0;
  for (uint64_t i = 0; i < r.n_sessions; i++)
    if (i == 0 || r.sessions[i].key != r.sessions[i - 1].key) keys_seen++;
  cr_assert_eq(keys_seen, BURSTS.keys);
  ref_free(&r);
}

static void run_exact(const params *p, int par, const char *what) {
  ref r;
  ref_init(&r, p);
  sjob *j = sjob_new(p, par);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s: exit %d: %s", what, rc, err);
  free(err);
  assert_exact(j, &r, what);
  crash_free(&j->c);
  ref_free(&r);
}

/* As fast as it goes (no --rate), at parallelism 1 and 3: exact. */
Test(sessions_job, exact) {
  params p = BURSTS;
  p.rate = 0;
  run_exact(&p, 1, "P=1");
  run_exact(&p, 3, "P=3");
  /* Another seed, more disorder (still below the gap), smaller gap. */
  p.seed = 12;
  p.disorder = 300;
  p.gap = 600;
  run_exact(&p, 3, "P=3, disorder 300, gap 600");
}

/* Event time at half the wall clock's pace (5000 records/s, 10000 per
 * event-time second): the watermark (every 200 ms) trails the newest
 * records by about 100 ms of event time, while late records lag
 * D + 3 * gap = 320 ms, so those after the first few hundred ms of event
 * time (no watermark behind them yet) are behind their session: about two
 * thirds of them. Conservation holds whichever they are. */
Test(sessions_job, late_conservation) {
  params p = {.records = 12000,
              .keys = 10,
              .rate = 5000,
              .event_rate = 10000,
              .disorder = 20,
              .gap = 100,
              .seed = 3,
              .late_fraction = "0.05"};
  ref r;
  ref_init(&r, &p);
  cr_assert_gt(r.n_late, 100, "too few late records to test: %llu", (ull)r.n_late);
  sjob *j = sjob_new(&p, 2);
  char *err = NULL;
  int rc = crash_run(&j->c, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  free(err);
  outcome o;
  check_conserved(&r, j->c.out, &o);
  fprintf(stderr,
          "sessions_job: late: %llu sessions, %llu late lines of %llu records chosen late\n",
          (ull)o.n_results, (ull)o.n_late, (ull)r.n_late);
  cr_assert_eq(o.problems, 0, "%llu problems, first: %s\nhistory: %s", (ull)o.problems, o.why,
               j->c.history);
  cr_assert_gt(o.n_late, r.n_late / 3, "only %llu of %llu records late", (ull)o.n_late,
               (ull)r.n_late);
  outcome_free(&o);
  crash_free(&j->c);
  ref_free(&r);
}

/* ---- crashes ------------------------------------------------------------------- */

static int kill_delay(crash_job *j, int attempt, int killing, void *rng) {
  (void)j;
  if (!killing) return -1;
  /* A run takes about 2 s; a restore has less left to do. */
  return attempt ? 200 + (int)(th_splitmix64(rng) % 700) : 300 + (int)(th_splitmix64(rng) % 1400);
}

Test(sessions_job, random_kills) {
  const char *what = "sessions_job::random_kills";
  uint64_t seed = crash_seed(what), rng = seed;
  ref r;
  ref_init(&r, &BURSTS);
  int kills = 0;
  for (int n = 0; n < 2; n++) {
    sjob *j = sjob_new(&BURSTS, 2);
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

/* Killed at parallelism from, restored from a mid-run checkpoint at
 * parallelism to (session state and timers move with their keys), then
 * exact. */
static void rescale(int from, int to, const char *what) {
  uint64_t seed = crash_seed(what), rng = seed;
  ref r;
  ref_init(&r, &BURSTS);
  for (int attempt = 0;; attempt++) {
    cr_assert_lt(attempt, 6, "%s: no restore from a mid-run checkpoint in 6 attempts", what);
    sjob *j = sjob_new(&BURSTS, from);
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

Test(sessions_job, rescale_2_to_3) {
  rescale(2, 3, "sessions_job::rescale_2_to_3");
}

Test(sessions_job, rescale_3_to_1) {
  rescale(3, 1, "sessions_job::rescale_3_to_1");
}

/* The exact check sees lost timers: restored without them (failpoint
 * timers.skip_restore on every subtask), sessions open at the cut never
 * fire; the twin restored from the same checkpoint with them is exact. */
Test(sessions_job, negative_control_timers_not_restored) {
  ref r;
  ref_init(&r, &BURSTS);
  sjob *j = sjob_new(&BURSTS, 2);
  char *err = NULL;
  crash_kill_at(&j->c, "ckpt.after_meta_commit", 6, 0, &err, NULL);
  free(err);
  sjob *twin = (sjob *)crash_twin(&j->c, sizeof(sjob));

  long long at = crash_restore_to_end(&j->c, 1, "timers.skip_restore=error+", &err, NULL);
  cr_assert_gt(at, 0, "did not resume from a checkpoint: %s", err);
  free(err);
  outcome o;
  check_exact(&r, j->c.out, &o);
  fprintf(stderr, "sessions_job::negative_control: without timers: %llu problems (%s)\n",
          (ull)o.problems, o.problems ? o.why : "none");
  cr_assert_gt(o.problems, 0,
               "restored without its timers, the job still wrote every session: the exact check "
               "cannot see lost timers\nhistory: %s",
               j->c.history);
  outcome_free(&o);

  long long at2 = crash_restore_to_end(&twin->c, 1, NULL, &err, NULL);
  cr_assert_eq(at2, at, "the twin resumed elsewhere: %s", err);
  free(err);
  assert_exact(twin, &r, "twin restored with its timers");
  crash_free(&twin->c);
  crash_free(&j->c);
  ref_free(&r);
}

/* ---- the generator's struct ------------------------------------------------------ */

/* weir_gen_time is size-versioned: a struct sized before session_gap_ms
 * (what a job built against the earlier header passes) is taken, without
 * bursts, whatever lies beyond its size; a shorter one, or a gap that
 * would overflow the slots, is a build error. */
Test(sessions_job, gen_time_sizes) {
  const weir_gen_opts g = {.records = 10, .keys = 2};
  const size_t old = offsetof(weir_gen_time, session_gap_ms);
  static const struct {
    size_t size;
    uint64_t gap;
    int ok;
  } cases[] = {{0, 5, 1}, {1, 5, 1}, {2, 5, 0}, {1, UINT64_MAX / 2, 0}, {0, UINT64_MAX / 2, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* size: 0 = the earlier struct, 1 = today's, 2 = one byte short. */
    size_t size = cases[i].size == 0 ? old : cases[i].size == 1 ? sizeof(weir_gen_time) : old - 1;
    weir_gen_time t = {.size = size, .disorder_ms = 10, .session_gap_ms = cases[i].gap};
    weir_job *job = NULL;
    cr_assert_eq(weir_job_create(&job, "sizes"), 0);
    weir_stream *s = weir_gen_timed(job, "gen", &g, &t, 1);
    if (cases[i].ok) {
      cr_assert(s != NULL, "case %zu: refused: %s", i, weir_job_error(job));
      cr_assert_eq(weir_job_build_error(job), 0, "case %zu", i);
    } else {
      cr_assert(s == NULL, "case %zu: accepted", i);
      cr_assert_eq(weir_job_build_error(job), WEIR_EINVAL, "case %zu: %s", i, weir_job_error(job));
    }
    weir_job_destroy(job);
  }
}

/* ---- the command line ------------------------------------------------------------ */

static int weir(char **out, char **err, const char *const *args) {
  const char *argv[32] = {WEIR_BINARY};
  size_t n = 1;
  for (; args[n - 1]; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  return th_run(argv, NULL, out, err, 60);
}

Test(sessions_job, usage_errors) {
  static const struct {
    const char *args[8];
    const char *says;
  } cases[] = {
      {{"run", "sessions", "--gap", "0", NULL}, "--gap: must be at least 1"},
      {{"run", "sessions", "--gap", "-100", NULL}, "--gap: '-100' is negative"},
      {{"run", "sessions", "--gap", NULL}, "--gap"},
      {{"run", "sessions", "--disorder", "-5", NULL}, "--disorder: '-5' is negative"},
      {{"run", "sessions", "--lateness", "-1", NULL}, "--lateness: '-1' is negative"},
      {{"run", "sessions", "--late-fraction", "-0.1", NULL}, "--late-fraction: '-0.1' is negative"},
      {{"run", "sessions", "--late-fraction", "2", NULL}, "--late-fraction: '2' is above 1"},
      {{"run", "sessions", "--late-fraction", "1e-3", NULL}, "is not a decimal fraction"},
      {{"run", "sessions", "--event-rate", "0", NULL}, "--event-rate: must be at least 1"},
      {{"run", "sessions", "--keys", "0", NULL}, "--keys: must be at least 1"},
      {{"run", "sessions", "--records", "0", NULL}, "--records: must be at least 1"},
      {{"run", "sessions", "--size", "1000", NULL}, "unknown flag '--size' for job 'sessions'"},
      {{"run", "sessions", "--sink", "nosuch:x", NULL}, "nosuch:x"},
      {{"run", "nosuchjob", NULL}, "sessions"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL, *err = NULL;
    int rc = weir(&out, &err, cases[i].args);
    cr_assert_eq(rc, 2, "%s %s: exit %d, stderr: %s", cases[i].args[1],
                 cases[i].args[2] ? cases[i].args[2] : "", rc, err);
    cr_assert(strstr(err, cases[i].says), "%s %s: no '%s' in stderr: %s", cases[i].args[1],
              cases[i].args[2] ? cases[i].args[2] : "", cases[i].says, err);
    free(out);
    free(err);
  }
}

Test(sessions_job, help_names_every_flag) {
  static const char *const flags[] = {
      "--records", "--keys",     "--rate", "--event-rate", "--disorder",    "--late-fraction",
      "--gap",     "--lateness", "--seed", "--sink",       "--parallelism", "splitmix64(k ^"};
  static const char *const help[] = {"help", "run", "sessions", NULL};
  char *out = NULL, *err = NULL;
  int rc = weir(&out, &err, help);
  cr_assert_eq(rc, 0, "weir help run sessions: exit %d: %s", rc, err);
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    cr_assert(strstr(out, flags[i]), "'weir help run sessions' does not name %s:\n%s", flags[i],
              out);
  free(out);
  free(err);
  /* The job is in the list of built-in jobs. */
  static const char *const run_help[] = {"help", "run", NULL};
  rc = weir(&out, &err, run_help);
  cr_assert_eq(rc, 0);
  cr_assert(strstr(out, "  sessions "), "'weir help run' does not list sessions:\n%s", out);
  free(out);
  free(err);
}

int main(int argc, char *argv[]) {
  return crash_main(argc, argv, "info");
}
