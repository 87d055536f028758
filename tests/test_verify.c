/* tests/test_verify.c: owns the test of `weir verify` (tools/verify.c): it
 * runs the harness with R = 2 on a small job, then checks its report against
 * the destination's own records, and against what each scenario must show.
 *
 * DESIGN. verify keeps its work directory (--dir), so every repetition's
 * receiver database is still there: the test asks the receiver itself
 * (`weir receiver stats --json`, `weir receiver effects`) and compares with
 * verify's JSON run by run (requests, effects, duplicates, repeated
 * payloads and effects), recomputes exactness from the effects, and checks
 * the figures each scenario is about: the second process refused with exit
 * 4, a kill in the window gives 2 requests and 2 effects for that operation
 * without a key and 2 requests and 1 effect with one, a paused owner taken
 * over lands nothing and exits 4, an orderly release is taken over well
 * under the lease. One test, one verify run (about 20 s in the plain
 * build); ctest runs it alone with test_lease (RESOURCE_LOCK), since its
 * takeover times are timed.
 *
 * weir is started by its bare name, found in PATH, as a user types it: where
 * there is no /proc/self/exe (macOS, and the build with
 * WEIR_FORCE_FALLBACKS), verify finds the binary to start its workers with
 * from that name alone.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define N 20   /* records */
#define K 4    /* keys */
#define REPS 2 /* repetitions */
#define LEASE 2000

static int64_t jint(const char *text, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = text ? strstr(text, pat) : NULL;
  cr_assert_not_null(p, "no %s in %s", key, text ? text : "(null)");
  p += strlen(pat);
  while (*p == ' ') p++;
  if (strncmp(p, "null", 4) == 0) return -1;
  return strtoll(p, NULL, 10);
}

/* Runs `weir ARGS...` as a shell does when `weir` is typed: the name alone
 * as argv[0], found in PATH (the build's jobs/ first). th_run's result. */
static int run_weir_by_name(const char *const args[], char **out, char **err, int timeout_s) {
  char bindir[4096];
  snprintf(bindir, sizeof bindir, "%s", WEIR_BINARY);
  char *slash = strrchr(bindir, '/');
  cr_assert_not_null(slash);
  *slash = '\0';
  cr_assert_str_eq(slash + 1, "weir");
  const char *argv[32] = {"/bin/sh", "-c", "PATH=\"$0:$PATH\" exec weir \"$@\"", bindir};
  size_t n = 4;
  for (size_t i = 0; args[i]; i++) {
    cr_assert_lt(n + 1, sizeof argv / sizeof argv[0]);
    argv[n++] = args[i];
  }
  argv[n] = NULL;
  return th_run(argv, NULL, out, err, timeout_s);
}

/* The line of run `rep` of scenario `sc` in verify's JSON (malloc'd). */
static char *run_line(const char *json, const char *sc, int rep) {
  char pat[128];
  snprintf(pat, sizeof pat, "{\"name\": \"%s\"", sc);
  const char *s = strstr(json, pat);
  cr_assert_not_null(s, "scenario %s missing", sc);
  snprintf(pat, sizeof pat, "{\"rep\": %d,", rep);
  const char *r = strstr(s, pat);
  cr_assert_not_null(r, "%s rep %d missing", sc, rep);
  const char *e = strchr(r, '\n');
  size_t n = e ? (size_t)(e - r) : strlen(r);
  char *line = malloc(n + 1);
  memcpy(line, r, n);
  line[n] = '\0';
  return line;
}

/* `weir receiver stats|effects --db DB [--json]`: stdout (malloc'd). */
static char *receiver(const char *what, const char *db) {
  const char *argv[] = {WEIR_BINARY, "receiver", what, "--db", db, NULL, NULL};
  if (strcmp(what, "stats") == 0) argv[5] = "--json";
  char *out = NULL, *err = NULL;
  int rc = th_run(argv, NULL, &out, &err, 60);
  cr_assert_eq(rc, 0, "receiver %s %s: %d %s", what, db, rc, err);
  free(err);
  return out;
}

/* Each expected body "k c" exactly once, nothing else. */
static int exact(const char *effects) {
  int seen[K][N + 1];
  memset(seen, 0, sizeof seen);
  int bad = 0;
  for (const char *p = effects; *p;) {
    unsigned k, c;
    if (sscanf(p, "%u %u", &k, &c) == 2 && k < K && c >= 1 && c <= N / K)
      seen[k][c]++;
    else
      bad++;
    const char *e = strchr(p, '\n');
    p = e ? e + 1 : p + strlen(p);
  }
  for (int k = 0; k < K; k++)
    for (int c = 1; c <= N / K; c++)
      if (seen[k][c] != 1) bad++;
  return bad == 0;
}

Test(verify, r2_counts_match_the_receiver_and_each_scenario, .timeout = 300) {
  char *dir = th_tmpdir();
  cr_assert_not_null(dir);
  char json_path[4096], work[4096];
  snprintf(json_path, sizeof json_path, "%s/verify.json", dir);
  snprintf(work, sizeof work, "%s/work", dir);
  char reps[16], recs[16], keys[16], lease[16];
  snprintf(reps, sizeof reps, "%d", REPS);
  snprintf(recs, sizeof recs, "%d", N);
  snprintf(keys, sizeof keys, "%d", K);
  snprintf(lease, sizeof lease, "%d", LEASE);
  const char *args[] = {"verify",  "--repeat", reps, "--records",  recs,  "--keys",
                        keys,      "--rate",   "20", "--lease-ms", lease, "--json",
                        json_path, "--dir",    work, NULL};
  char *out = NULL, *err = NULL;
  int64_t t0 = th_mono_ms();
  int rc = run_weir_by_name(args, &out, &err, 280);
  fprintf(stderr, "weir verify --repeat %d: %lld ms\n%s", REPS, (long long)(th_mono_ms() - t0),
          out);
  cr_assert_eq(rc, 0, "weir verify exited %d\n%s\n%s", rc, out, err);
  cr_assert(strstr(out, "every expectation held"), "%s", out);
  char *json = th_read_file(json_path, NULL);
  cr_assert_not_null(json);

  static const char *const names[] = {"clean",     "second-owner",   "kill-no-key", "kill-key",
                                      "pause-key", "pause-no-dedup", "release"};
  for (size_t s = 0; s < sizeof names / sizeof names[0]; s++) {
    const char *sc = names[s];
    for (int rep = 1; rep <= REPS; rep++) {
      char *line = run_line(json, sc, rep);
      char db[4200];
      snprintf(db, sizeof db, "%s/%s-%d/receiver.db", work, sc, rep);
      char *st = receiver("stats", db);
      char *eff = receiver("effects", db);
      /* verify's counts are the receiver's own. */
      cr_assert_eq(jint(line, "requests"), jint(st, "requests"), "%s %d: %s | %s", sc, rep, line,
                   st);
      cr_assert_eq(jint(line, "effects"), jint(st, "effects"), "%s %d", sc, rep);
      cr_assert_eq(jint(line, "duplicates"), jint(st, "duplicates"), "%s %d", sc, rep);
      cr_assert_eq(jint(line, "fenced"), jint(st, "fenced"), "%s %d", sc, rep);
      cr_assert_eq(jint(line, "rejections"), jint(st, "rejections") + jint(st, "fenced"), "%s %d",
                   sc, rep);
      cr_assert_eq(jint(line, "repeated_payloads"), jint(st, "repeated_payloads"), "%s %d", sc,
                   rep);
      cr_assert_eq(jint(line, "repeated_effects"), jint(st, "repeated_effects"), "%s %d", sc, rep);
      int ex = exact(eff);
      cr_assert_eq(strstr(line, "\"exact\": true") != NULL, ex, "%s %d: %s", sc, rep, line);
      cr_assert(strstr(line, "\"met\": true"), "%s %d: %s", sc, rep, line);

      /* What each scenario is about, checked here on the receiver's figures. */
      int64_t req = jint(st, "requests"), e = jint(st, "effects");
      if (!strcmp(sc, "clean")) {
        cr_assert(req == N && e == N && ex);
      } else if (!strcmp(sc, "second-owner")) {
        cr_assert_eq(jint(line, "successor"), 4, "%s", line);
        cr_assert_eq(jint(line, "owner"), 0, "%s", line);
        cr_assert_eq(jint(line, "attempts"), 1, "%s", line);
        cr_assert(req == N && e == N && ex);
      } else if (!strcmp(sc, "kill-no-key")) {
        /* The operation accepted before the kill: 2 requests, 2 effects. */
        cr_assert_eq(jint(line, "owner"), 128 + 9, "%s", line);
        cr_assert(req == N + 1 && e == N + 1, "%s", st);
        cr_assert(jint(st, "repeated_payloads") == 1 && jint(st, "repeated_effects") == 1, "%s",
                  st);
        cr_assert(!ex);
      } else if (!strcmp(sc, "kill-key")) {
        /* 2 requests, 1 effect: the second was a replay. */
        cr_assert_eq(jint(line, "owner"), 128 + 9, "%s", line);
        cr_assert(req == N + 1 && e == N && jint(st, "duplicates") == 1, "%s", st);
        cr_assert(jint(st, "repeated_payloads") == 1 && jint(st, "repeated_effects") == 0, "%s",
                  st);
        cr_assert(ex);
      } else if (!strcmp(sc, "pause-key")) {
        cr_assert_eq(jint(line, "owner_resumed"), 4, "%s", line);
        cr_assert(e == N && ex, "%s", st);
        cr_assert(jint(line, "takeover_ms") > 0, "%s", line);
      } else if (!strcmp(sc, "pause-no-dedup")) {
        /* Fencing stops the stale owner; it cannot undo what it sent. */
        cr_assert_eq(jint(line, "owner_resumed"), 4, "%s", line);
        cr_assert(e == N + 1 && jint(st, "repeated_effects") == 1, "%s", st);
        cr_assert(!ex);
      } else if (!strcmp(sc, "release")) {
        int64_t to = jint(line, "takeover_ms");
        cr_assert(to >= 0 && to < LEASE / 2, "%s", line);
        cr_assert(e == N && ex, "%s", st);
      }
      free(line);
      free(st);
      free(eff);
    }
  }
  free(json);
  free(out);
  free(err);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* verify finds its own binary from a bare argv[0] (looked up in PATH) before
 * it does anything else: here it goes on to the work directory, which cannot
 * be made, rather than stopping at "cannot find the weir executable". */
Test(verify, finds_itself_when_started_by_name) {
  const char *args[] = {"verify", "--dir", "/dev/null/work", NULL};
  char *out = NULL, *err = NULL;
  int rc = run_weir_by_name(args, &out, &err, 60);
  cr_assert_neq(rc, 0, "%s%s", out, err);
  cr_assert_null(strstr(err, "cannot find the weir executable"), "%s", err);
  cr_assert(strstr(err, "cannot create '/dev/null/work'"), "%s", err);
  free(out);
  free(err);
  cr_assert_eq(th_leak_check(), 0);
}
