/* jobs/cli.h: what the pieces of the `weir` command line share (private to
 * jobs/): exit codes, engine options, argument parsing helpers, the built-in
 * job table and the .so loader.
 *
 * DESIGN. main.c owns the verbs and the exit code; cli.c owns the parsing of
 * flags and numbers; each built-in job (counter.c, windows.c, ...) owns its own
 * flags, graph and one-line report; loader.c owns dlopen. Helpers here print
 * their own message on stderr and return a negative code, so a caller only
 * turns "failed" into an exit code. Nothing here calls exit().
 */
#ifndef WEIR_JOBS_CLI_H
#define WEIR_JOBS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "weir/weir.h"

/* Exit codes (docs/architecture.md §6). */
enum {
  CLI_EXIT_OK = 0,      /* success, or stopped cleanly */
  CLI_EXIT_RUNTIME = 1, /* the job failed, or a file could not be used */
  CLI_EXIT_USAGE = 2,   /* bad command line, a job that cannot be built (build or plan
                           error), or a run that does not fit the state dir */
  CLI_EXIT_STORE = 3,   /* store or checkpoint refused: corrupt, truncated, unknown format,
                           or checkpoints failing (full disk) beyond the tolerance */
  CLI_EXIT_OWNED = 4,   /* the state directory is held by a live owner, or this run lost it */
  CLI_EXIT_REFUSED = 5  /* a destination refused an effect permanently, or a replay
                           would go beyond its idempotency key retention */
};

/* The exit code for an error returned by the engine. */
int cli_exit_for(int rc);
/* The exit code for a job that could not be built (a build function's
 * error, or weir_job_build_error after weir_job_run). */
int cli_exit_for_build(int rc);

/* Reports a fatal signal (abort, fault) with its call stack on stderr before
 * the signal ends the process (crash.c). Called first thing in main(). */
void cli_crash_install(void);

/* Options every job kind understands, before or (built-in jobs) after the
 * job name. */
typedef struct cli_engine {
  int workers;              /* 0 = number of cores */
  int parallelism;          /* 0 = number of workers */
  const char *summary_json; /* NULL = none */
  int quiet;                /* no progress, no summary line, warnings and errors only */
  int log_level;            /* --log-level (WEIR_LOG_*), -1: WEIR_LOG or the default */
  /* Set by a built-in job that knows how many records its sources emit
   * (0: unbounded or unknown): the progress line shows a share and an ETA. */
  uint64_t total_records;
  uint64_t loop_memory;  /* bytes per feedback queue / back-edge log; 0 = default */
  const char *spill_dir; /* NULL = the state directory */
  /* Set by a built-in job whose sink prints records on stdout: no live
   * progress line then, when stdout is a terminal too. */
  int prints_records;
  /* Batching and channel bounds (0 = engine defaults): for tests and
   * experiments with backpressure. */
  int batch_records;
  int channel_batches;
  /* --buffer-timeout US, if given (0: send every batch at once). */
  int buffer_timeout_set;
  uint64_t buffer_timeout;
  /* Checkpoints. */
  const char *state_dir;        /* default ./state; "none" = no checkpoints */
  uint64_t checkpoint_interval; /* ms; default 1000; 0 = only the final one */
  uint64_t checkpoint_timeout;  /* ms; 0 = engine default */
  int retain;                   /* 0 = engine default (3) */
  const char *restore;          /* NULL, "latest" or an id */
  int fresh;
  int allow_sink_change;        /* --allow-sink-change: a movable sink may restore elsewhere */
  int allow_non_restored_state; /* --allow-non-restored-state: drop state of operators gone */
  const char *checkpoint_mode;  /* "aligned" (default), "unaligned", "at-least-once" or "sync" */
  uint64_t alignment_timeout;   /* ms; 0 = none */
  uint64_t lease_ms;            /* ms; 0 = engine default (6000) */
  int lease_wait;               /* --wait: take over when a live owner's lease expires */
  const char *tolerable;        /* --tolerable-checkpoint-failures: N or "unlimited" */
  uint64_t max_store_size;      /* bytes; 0 = engine default */
  const char *from_savepoint;   /* --from-savepoint PATH */
  /* The HTTP endpoint (http.h): --http HOST:PORT (NULL: none) and
   * --http-token FILE. */
  const char *http;
  const char *http_token;
  /* Cluster mode (cluster.h): --cluster URL (NULL: none), --member NAME,
   * --job NAME (default: the job's own name), --tasks T (tasks of each
   * stage edge, 0 = 4), --replicas N (of the streams and buckets made, 0 =
   * 1); and what a member gives the run of one of its tasks:
   * --cluster-stage K (-1: not a task's run), --cluster-task T (task T of
   * stage K), --cluster-epoch E, --cluster-parent-fd FD (-1: none). */
  const char *cluster;
  const char *member;
  const char *sink; /* the job's --sink, as cli_check_sink saw it (NULL: none) */
  const char *cluster_job;
  uint64_t tasks;
  int replicas;
  int cluster_stage;
  int cluster_task;
  uint64_t cluster_epoch;
  int cluster_parent_fd;
} cli_engine;

/* Listens on the first of the addresses `ai` (a getaddrinfo list) that
 * takes a socket, bind and listen (SO_REUSEADDR, close-on-exec): the
 * socket, or -1 with the last errno in *err. For `weir receiver` and
 * `--http`. */
struct addrinfo;
int cli_listen(const struct addrinfo *ai, int backlog, int *err);

/* The control socket of a running job (control.c). */
typedef struct cli_control cli_control;
/* Listens on <state_dir>/control for `weir savepoint` and `weir stop`;
 * NULL (after a warning) when it cannot. Call it once the run owns the
 * state directory. */
cli_control *cli_control_start(weir_job *job, const char *state_dir);
/* Stops listening after the run ended, tells the waiting `weir stop`s the
 * exit code, removes the socket if it is still this run's. NULL: no-op. */
void cli_control_end(cli_control *c, int exit_code);
/* <state_dir>/control into out: 0, or -1 if it does not fit. */
int cli_control_path(const char *state_dir, char *out, size_t cap);
int cli_cmd_savepoint(int argc, char **argv);
int cli_cmd_stop(int argc, char **argv);
void cli_help_savepoint(FILE *out);
void cli_help_stop(FILE *out);

/* Checks a job's --sink value (printing a usage message naming the
 * problem; returns -1) and notes in eng whether it prints records. */
int cli_check_sink(const char *sink, cli_engine *eng);

/* Fills the checkpoint fields of o from eng; returns 0 or -1 after a usage
 * message (bad --restore or --checkpoint-mode, --restore with --fresh). */
int cli_checkpoint_opts(const cli_engine *eng, weir_run_opts *o);
/* Sets the defaults of the engine options. */
void cli_engine_init(cli_engine *eng);

/* A cursor over the arguments of one command. `what` names the command in
 * messages ("run", "job 'counter'"). */
typedef struct cli_args {
  int argc;
  char **argv;
  int i; /* the argument being looked at */
  const char *what;
} cli_args;

/* Prints "weir: <message>" and the hint "see 'weir help run'" on stderr and
 * returns -1 (usage error). */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "weir: <message>" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Each cli_take_* looks at argv[i]. If it is `flag` ("--records VALUE" or
 * "--records=VALUE"), stores the value, advances i past it and returns 1; if
 * it is another argument, returns 0 and changes nothing; on a missing or bad
 * value prints a usage message and returns -1. */
int cli_take_str(cli_args *a, const char *flag, const char **out);
/* A whole number: decimal digits with an optional k/M/G suffix (x1000), no
 * sign, no spaces, at most `max`. */
int cli_take_u64(cli_args *a, const char *flag, uint64_t max, uint64_t *out);
int cli_take_int(cli_args *a, const char *flag, int max, int *out);
/* A flag without a value ("--quiet"); sets *out = 1. */
int cli_take_bool(cli_args *a, const char *flag, int *out);
/* The usage message for an argument a job does not know; returns -1. */
int cli_unknown_arg(const cli_args *a, const char *job);
/* Nonzero if argv[i] is "--help" or "-h". */
int cli_is_help(const cli_args *a);

/* Parses a number as cli_take_u64 does; returns 0 or -1 with a message
 * naming `flag` printed. */
int cli_parse_u64(const char *flag, const char *s, uint64_t max, uint64_t *out);

/* Engine options (--workers, --parallelism, --summary-json, --quiet):
 * returns 1 if argv[i] was one (and takes it), 0 if not, -1 on a bad value. */
int cli_take_engine(cli_args *a, cli_engine *eng);

/* Formats n with three significant digits and a k/M/G suffix ("12.3M") into
 * buf; returns buf. */
const char *cli_human(double n, char *buf, size_t cap);

/* Creates `dir` and its missing parents (mode 0777 & ~umask). Returns 0 or a
 * negative errno. */
int cli_mkdir_p(const char *dir);

/* How a run ended, for a job's report line. */
typedef struct cli_outcome {
  double elapsed_s; /* wall time of weir_job_run */
  int stopped;      /* stopped early by SIGINT/SIGTERM, as far as report() can tell */
} cli_outcome;

/* A built-in job. parse() reads the job's flags (and engine flags) into a
 * config it allocates, printing its own message on a usage error (returns
 * -1). build() adds the graph to `job` and returns 0 or the job's build
 * error. report() prints the one-line human summary. */
typedef struct cli_builtin {
  const char *name;
  const char *synopsis; /* one line for `weir help run` */
  void (*help)(FILE *out);
  int (*parse)(cli_args *a, cli_engine *eng, void **cfg);
  int (*build)(weir_job *job, const cli_engine *eng, void *cfg);
  /* Called after the run; may refine o->stopped. */
  void (*report)(const weir_job *job, void *cfg, cli_outcome *o, FILE *out);
  void (*free_cfg)(void *cfg);
} cli_builtin;

extern const cli_builtin cli_counter_job;
extern const cli_builtin cli_wordcount_job;
extern const cli_builtin cli_collatz_job;
extern const cli_builtin cli_components_job;
extern const cli_builtin cli_windows_job;
extern const cli_builtin cli_sessions_job;
extern const cli_builtin cli_nexmark_job;

/* Shared by the windows and sessions jobs (defined in windows.c). A
 * --late-fraction style flag: a decimal 0 .. 1 without sign or exponent
 * (cli_take_* conventions). */
int cli_take_fraction(cli_args *a, const char *flag, double *out);
/* A flat_map function: a late record's payload becomes the text "<ts>"
 * (same key). (Window results go to their sink as they are, written by
 * weir_format_window with weir_opid_window's ids.) */
int cli_format_late(weir_ctx *ctx, void *user, const weir_record *in);
/* The sinks' formatter for those: "<key> <payload text>". */
size_t cli_key_and_text(const weir_record *r, char *buf, size_t cap);
/* The windows and sessions jobs' report line: "<what>: <done> N records in
 * T s: R <results_of> results, L late records" and where it resumed. */
void cli_report_windowed(const weir_job *job, const char *what, const char *done,
                         const char *results_of, cli_outcome *o, FILE *out);

/* A job shared object, opened with cli_job_load. */
typedef struct cli_loaded {
  void *handle;
  weir_job_build_fn build;
} cli_loaded;

/* Nonzero if `name` names a job .so rather than a built-in job: it contains
 * a '/' or ends in ".so". */
int cli_is_job_path(const char *name);

/* Opens the job .so at `path` and checks its exports and ABI version.
 * Returns 0, or -1 after printing why not. */
int cli_job_load(const char *path, cli_loaded *out);
/* Closes it (after weir_job_destroy: the job may point into the .so). */
void cli_job_unload(cli_loaded *l);

/* checkpoints.c: `weir checkpoints` and `weir inspect` (argv[0] = verb). */
int cli_cmd_checkpoints(int argc, char **argv);
int cli_cmd_inspect(int argc, char **argv);

#endif
