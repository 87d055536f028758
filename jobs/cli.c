/* jobs/cli.c: owns the parsing of command-line flags and numbers for the
 * `weir` CLI, and the small formatting and file-system helpers its jobs share.
 *
 * DESIGN. Flags are "--name VALUE" or "--name=VALUE". Numbers are strict:
 * decimal digits only (an optional k/M/G suffix multiplies by 1000), no sign,
 * no spaces, checked for overflow, so "-5", "12x" and "1e9" are refused
 * instead of being read as something else. Every refusal names the flag and
 * the value and ends with the hint "see 'weir help run'".
 */
#include "cli.h"

#include "base/log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_usage(const char *fmt, ...) {
  va_list ap;
  fputs("weir: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nsee 'weir help run'\n", stderr);
  return -1;
}

void cli_error(const char *fmt, ...) {
  va_list ap;
  fputs("weir: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int cli_is_help(const cli_args *a) {
  const char *s = a->argv[a->i];
  return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0;
}

/* If argv[i] is `flag` or `flag=...`, returns 1 with the value in *val (NULL
 * when the value is missing); otherwise 0. Advances i past what it used. */
static int take_raw(cli_args *a, const char *flag, const char **val) {
  const char *s = a->argv[a->i];
  size_t n = strlen(flag);
  if (strncmp(s, flag, n) != 0) return 0;
  if (s[n] == '=') {
    *val = s + n + 1;
    a->i++;
    return 1;
  }
  if (s[n] != '\0') return 0;
  a->i++;
  *val = a->i < a->argc ? a->argv[a->i++] : NULL;
  return 1;
}

int cli_take_str(cli_args *a, const char *flag, const char **out) {
  const char *v = NULL;
  if (!take_raw(a, flag, &v)) return 0;
  if (v == NULL) return cli_usage("%s: missing value for %s", a->what, flag);
  if (*v == '\0') return cli_usage("%s: empty value for %s", a->what, flag);
  *out = v;
  return 1;
}

int cli_parse_u64(const char *flag, const char *s, uint64_t max, uint64_t *out) {
  const char *p = s;
  if (*p == '-') return cli_usage("%s: '%s' is negative; expected a whole number >= 0", flag, s);
  if (*p < '0' || *p > '9') return cli_usage("%s: '%s' is not a whole number", flag, s);
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno == ERANGE) return cli_usage("%s: '%s' is too large", flag, s);
  uint64_t mult = 1;
  if (*end != '\0') {
    switch (*end) {
    case 'k':
    case 'K':
      mult = 1000;
      break;
    case 'm':
    case 'M':
      mult = 1000000;
      break;
    case 'g':
    case 'G':
      mult = 1000000000;
      break;
    default:
      return cli_usage("%s: '%s' is not a whole number", flag, s);
    }
    if (end[1] != '\0') return cli_usage("%s: '%s' is not a whole number", flag, s);
  }
  if ((uint64_t)v > UINT64_MAX / mult || (uint64_t)v * mult > max) {
    return cli_usage("%s: '%s' is too large (at most %llu)", flag, s, (unsigned long long)max);
  }
  *out = (uint64_t)v * mult;
  return 0;
}

int cli_take_u64(cli_args *a, const char *flag, uint64_t max, uint64_t *out) {
  const char *v = NULL;
  int r = cli_take_str(a, flag, &v);
  if (r <= 0) return r;
  if (cli_parse_u64(flag, v, max, out) < 0) return -1;
  return 1;
}

int cli_take_int(cli_args *a, const char *flag, int max, int *out) {
  uint64_t v = 0;
  int r = cli_take_u64(a, flag, (uint64_t)max, &v);
  if (r <= 0) return r;
  *out = (int)v;
  return 1;
}

int cli_take_bool(cli_args *a, const char *flag, int *out) {
  const char *s = a->argv[a->i];
  size_t n = strlen(flag);
  if (strncmp(s, flag, n) != 0) return 0;
  if (s[n] == '=') return cli_usage("%s: %s takes no value", a->what, flag);
  if (s[n] != '\0') return 0;
  a->i++;
  *out = 1;
  return 1;
}

/* Larger values are certainly typos; the engine refuses what it cannot do. */
#define CLI_MAX_THREADS 4096

int cli_take_engine(cli_args *a, cli_engine *eng) {
  int r;
  if ((r = cli_take_int(a, "--workers", CLI_MAX_THREADS, &eng->workers)) != 0) return r;
  if ((r = cli_take_int(a, "--parallelism", CLI_MAX_THREADS, &eng->parallelism)) != 0) return r;
  if ((r = cli_take_str(a, "--summary-json", &eng->summary_json)) != 0) return r;
  if ((r = cli_take_int(a, "--batch-records", 1 << 20, &eng->batch_records)) != 0) return r;
  if ((r = cli_take_int(a, "--channel-batches", 1 << 20, &eng->channel_batches)) != 0) return r;
  if ((r = cli_take_u64(a, "--buffer-timeout", 10000000, &eng->buffer_timeout)) != 0) {
    eng->buffer_timeout_set = r > 0;
    return r;
  }
  if ((r = cli_take_bool(a, "--quiet", &eng->quiet)) != 0) return r;
  const char *level = NULL;
  if ((r = cli_take_str(a, "--log-level", &level)) != 0) {
    if (r < 0) return r;
    if ((eng->log_level = weir_log_level_parse(level)) < 0)
      return cli_usage("%s: --log-level '%s': use error, warn, info or debug", a->what, level);
    return r;
  }
  if ((r = cli_take_u64(a, "--loop-memory", UINT64_MAX, &eng->loop_memory)) != 0) return r;
  if ((r = cli_take_str(a, "--spill-dir", &eng->spill_dir)) != 0) return r;
  if ((r = cli_take_str(a, "--state-dir", &eng->state_dir)) != 0) return r;
  if ((r = cli_take_u64(a, "--checkpoint-interval", UINT32_MAX, &eng->checkpoint_interval)) != 0)
    return r;
  if ((r = cli_take_u64(a, "--checkpoint-timeout", UINT32_MAX, &eng->checkpoint_timeout)) != 0)
    return r;
  if ((r = cli_take_int(a, "--retain", 1000000, &eng->retain)) != 0) return r;
  if ((r = cli_take_str(a, "--restore", &eng->restore)) != 0) return r;
  if ((r = cli_take_bool(a, "--fresh", &eng->fresh)) != 0) return r;
  if ((r = cli_take_bool(a, "--allow-sink-change", &eng->allow_sink_change)) != 0) return r;
  if ((r = cli_take_bool(a, "--allow-non-restored-state", &eng->allow_non_restored_state)) != 0)
    return r;
  if ((r = cli_take_str(a, "--checkpoint-mode", &eng->checkpoint_mode)) != 0) return r;
  if ((r = cli_take_u64(a, "--alignment-timeout", 3600000, &eng->alignment_timeout)) != 0) return r;
  if ((r = cli_take_u64(a, "--lease-ms", 3600000, &eng->lease_ms)) != 0) return r;
  if ((r = cli_take_bool(a, "--wait", &eng->lease_wait)) != 0) return r;
  if ((r = cli_take_str(a, "--tolerable-checkpoint-failures", &eng->tolerable)) != 0) return r;
  if ((r = cli_take_u64(a, "--max-store-size", UINT64_MAX, &eng->max_store_size)) != 0) return r;
  if ((r = cli_take_str(a, "--from-savepoint", &eng->from_savepoint)) != 0) return r;
  if ((r = cli_take_str(a, "--http-token", &eng->http_token)) != 0) return r;
  if ((r = cli_take_str(a, "--http", &eng->http)) != 0) return r;
  if ((r = cli_take_str(a, "--cluster", &eng->cluster)) != 0) return r;
  if ((r = cli_take_str(a, "--member", &eng->member)) != 0) return r;
  if ((r = cli_take_str(a, "--job", &eng->cluster_job)) != 0) return r;
  if ((r = cli_take_u64(a, "--tasks", 1024, &eng->tasks)) != 0) return r;
  if ((r = cli_take_int(a, "--replicas", 5, &eng->replicas)) != 0) return r;
  if ((r = cli_take_int(a, "--cluster-stage", 63, &eng->cluster_stage)) != 0) return r;
  if ((r = cli_take_int(a, "--cluster-task", 1023, &eng->cluster_task)) != 0) return r;
  if ((r = cli_take_u64(a, "--cluster-epoch", UINT64_MAX, &eng->cluster_epoch)) != 0) return r;
  if ((r = cli_take_int(a, "--cluster-parent-fd", 1 << 20, &eng->cluster_parent_fd)) != 0) return r;
  return 0;
}

int cli_check_sink(const char *sink, cli_engine *eng) {
  char err[256] = "";
  if (weir_sink_spec_check(sink, err, sizeof err) != 0)
    return cli_usage("--sink: %s", err[0] ? err : "invalid sink specification");
  eng->prints_records = strcmp(sink, "print") == 0;
  eng->sink = sink;
  return 0;
}

int cli_unknown_arg(const cli_args *a, const char *job) {
  const char *s = a->argv[a->i];
  if (s[0] == '-') return cli_usage("unknown flag '%s' for job '%s'", s, job);
  return cli_usage("unexpected argument '%s' for job '%s'", s, job);
}

void cli_engine_init(cli_engine *eng) {
  memset(eng, 0, sizeof *eng);
  eng->state_dir = "./state";
  eng->checkpoint_interval = 1000;
  eng->checkpoint_mode = "aligned";
  eng->log_level = -1;
  eng->cluster_stage = -1;
  eng->cluster_task = -1;
  eng->cluster_parent_fd = -1;
}

int cli_checkpoint_opts(const cli_engine *eng, weir_run_opts *o) {
  if (strcmp(eng->state_dir, "none") == 0) {
    if (eng->restore || eng->fresh) return cli_usage("--restore and --fresh need a --state-dir");
    if (eng->from_savepoint) return cli_usage("--from-savepoint needs a --state-dir");
    if (eng->allow_sink_change || eng->allow_non_restored_state)
      return cli_usage("--allow-sink-change and --allow-non-restored-state need a --state-dir");
    if (eng->lease_ms || eng->lease_wait)
      return cli_usage("--lease-ms and --wait need a --state-dir");
    return 0;
  }
  if (eng->lease_ms && eng->lease_ms < 30) return cli_usage("--lease-ms: at least 30");
  o->lease_ms = (uint32_t)eng->lease_ms;
  o->lease_wait = eng->lease_wait;
  o->state_dir = eng->state_dir;
  o->checkpoint_interval_ms = (uint32_t)eng->checkpoint_interval;
  o->checkpoint_timeout_ms = (uint32_t)eng->checkpoint_timeout;
  o->retain = (uint32_t)eng->retain;
  o->allow_sink_change = eng->allow_sink_change;
  o->allow_non_restored_state = eng->allow_non_restored_state;
  if (strcmp(eng->checkpoint_mode, "aligned") == 0 ||
      strcmp(eng->checkpoint_mode, "exactly-once") == 0)
    o->at_least_once = 0;
  else if (strcmp(eng->checkpoint_mode, "at-least-once") == 0)
    o->at_least_once = 1;
  else if (strcmp(eng->checkpoint_mode, "sync") == 0)
    o->sync_checkpoints = 1;
  else if (strcmp(eng->checkpoint_mode, "unaligned") == 0)
    o->unaligned = 1;
  else
    return cli_usage(
        "--checkpoint-mode: '%s' is not one of aligned, unaligned, at-least-once, sync",
        eng->checkpoint_mode);
  if (eng->alignment_timeout && (o->at_least_once || o->sync_checkpoints))
    return cli_usage("--alignment-timeout: only with --checkpoint-mode aligned or unaligned");
  o->alignment_timeout_ms = (uint32_t)eng->alignment_timeout;
  if (eng->tolerable) {
    uint64_t n;
    if (strcmp(eng->tolerable, "unlimited") == 0)
      o->tolerable_checkpoint_failures = WEIR_TOLERATE_ANY;
    else if (cli_parse_u64("--tolerable-checkpoint-failures", eng->tolerable, 1000000, &n) < 0)
      return -1;
    else
      o->tolerable_checkpoint_failures = n ? (int)n : WEIR_TOLERATE_NONE;
  }
  if (eng->max_store_size) {
    /* LMDB maps whole pages; below 1 MB not even the job record and one
     * small checkpoint fit. */
    if (eng->max_store_size < 1000000)
      return cli_usage("--max-store-size: %llu bytes is too small (at least 1M)",
                       (unsigned long long)eng->max_store_size);
    o->store_max_bytes = (eng->max_store_size + 65535) / 65536 * 65536;
  }
  if (eng->restore && eng->fresh) return cli_usage("--restore and --fresh exclude each other");
  if (eng->from_savepoint && (eng->restore || eng->fresh))
    return cli_usage("--from-savepoint restores the savepoint: it excludes --restore and --fresh");
  o->from_savepoint = eng->from_savepoint;
  if (eng->fresh) o->restore = WEIR_RESTORE_FRESH;
  if (eng->restore) {
    if (strcmp(eng->restore, "latest") == 0) {
      o->restore = WEIR_RESTORE_LATEST;
    } else {
      uint64_t id;
      if (cli_parse_u64("--restore", eng->restore, UINT64_MAX, &id) < 0 || id == 0)
        return cli_usage("--restore: expected 'latest' or a checkpoint id, got '%s'", eng->restore);
      o->restore = WEIR_RESTORE_ID;
      o->restore_id = id;
    }
  }
  return 0;
}

int cli_exit_for(int rc) {
  switch (rc) {
  case 0:
    return CLI_EXIT_OK;
  case WEIR_ECORRUPT:
  case WEIR_EFORMAT:
  case WEIR_ECKPTLIMIT:
    return CLI_EXIT_STORE;
  case WEIR_EUNFINISHED:
  case WEIR_ENOCKPT:
  case WEIR_EMISMATCH:
    return CLI_EXIT_USAGE;
  case WEIR_EOWNED:
  case WEIR_EFENCED:
    return CLI_EXIT_OWNED;
  case WEIR_EREFUSED:
  case WEIR_ERETENTION:
    return CLI_EXIT_REFUSED;
  default:
    return CLI_EXIT_RUNTIME;
  }
}

/* A graph that cannot be built or planned is the user's to fix, like a bad
 * flag: 2. An OS condition met while building (an input file that cannot
 * be read) stays a runtime error, as everywhere: "a file could not be
 * used" is 1. */
int cli_exit_for_build(int rc) {
  if (rc < 0 && rc > -4096 && rc != WEIR_EINVAL) return CLI_EXIT_RUNTIME;
  return CLI_EXIT_USAGE;
}

const char *cli_human(double n, char *buf, size_t cap) {
  static const char *const suffix[] = {"", "k", "M", "G", "T", "P"};
  int s = 0;
  while (n >= 999.5 && s < 5) {
    n /= 1000.0;
    s++;
  }
  if (s == 0) {
    snprintf(buf, cap, "%.0f", n);
  } else {
    snprintf(buf, cap, n < 9.995 ? "%.2f%s" : n < 99.95 ? "%.1f%s" : "%.0f%s", n, suffix[s]);
  }
  return buf;
}

int cli_mkdir_p(const char *dir) {
  size_t n = strlen(dir);
  char *p = malloc(n + 1);
  if (p == NULL) return -ENOMEM;
  memcpy(p, dir, n + 1);
  int rc = 0;
  for (size_t i = 1; i <= n && rc == 0; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) rc = -errno;
    p[i] = c;
  }
  if (rc == 0) {
    struct stat st;
    if (stat(dir, &st) != 0) {
      rc = -errno;
    } else if (!S_ISDIR(st.st_mode)) {
      rc = -ENOTDIR;
    }
  }
  free(p);
  return rc;
}
