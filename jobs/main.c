/* jobs/main.c: owns the `weir` command: its verbs (run, help, version), the
 * run of a job (options, live progress, summary, outcome) and the exit code.
 *
 * DESIGN. `weir run [ENGINE OPTIONS] JOB [JOB OPTIONS]`. Engine options
 * (--workers, --parallelism, --summary-json, --quiet) go before the job name
 * for every kind of job; a built-in job also accepts them after its name,
 * among its own flags. Everything after a job .so's path is the job's own
 * argv. Only this file decides exit codes (docs/architecture.md §6): 0 success (a job
 * stopped by SIGINT/SIGTERM that drained and ended cleanly is a success), 1
 * runtime error (a drain abandoned by a second signal is one), 2 usage
 * error, a job that cannot be built (cli_exit_for_build) or a run that does
 * not fit the state directory (WEIR_EMISMATCH), 3 store
 * refused, 4 state directory held by another run (or this run lost it), 5
 * a destination's permanent refusal (cli.c, cli_exit_for).
 * Human output (progress, summary) goes to stderr; stdout belongs to the
 * job's `print` sink.
 */
#include "cli.h"
#include "cluster.h"
#include "http.h"
#include "tools.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/failpoint.h"
#include "base/log.h"

#ifndef WEIR_VERSION
#define WEIR_VERSION "0.1.0"
#endif

static const cli_builtin *const builtins[] = {
    &cli_counter_job, &cli_wordcount_job, &cli_collatz_job, &cli_components_job,
    &cli_windows_job, &cli_sessions_job,  &cli_nexmark_job};
#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

static const cli_builtin *find_builtin(const char *name) {
  for (size_t i = 0; i < N_BUILTINS; i++) {
    if (strcmp(builtins[i]->name, name) == 0) return builtins[i];
  }
  return NULL;
}

/* "counter, wordcount, ...": the built-in jobs' names, for messages. */
static const char *builtin_names(void) {
  static char names[256];
  if (!names[0])
    for (size_t i = 0; i < N_BUILTINS; i++) {
      size_t n = strlen(names);
      snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", builtins[i]->name);
    }
  return names;
}

/* ------------------------------------------------------------------------ */
/* Help                                                                     */

static void help_main(FILE *out) {
  fputs("weir: a dataflow engine with asynchronous barrier snapshots\n"
        "\n"
        "usage:\n"
        "  weir run [ENGINE OPTIONS] JOB [JOB OPTIONS]   run a job to the end of its input\n"
        "  weir checkpoints [--state-dir DIR] [--json]   list completed checkpoints\n"
        "                   [--verify]                   (--verify: check each)\n"
        "  weir inspect ID [--state-dir DIR] [--json]    show one checkpoint\n"
        "  weir receiver --listen HOST:PORT --db FILE    a reference HTTP destination\n"
        "  weir receiver stats --db FILE [--json]        its requests, effects, duplicates\n"
        "  weir verify [--repeat R] [--json FILE]        show the failure window: kills,\n"
        "                                                pauses, takeovers, duplicates\n"
        "  weir savepoint [--state-dir DIR] [--out PATH] savepoint a running job\n"
        "  weir stop [--state-dir DIR] [--savepoint]     stop a running job (and\n"
        "            [--drain] [--timeout S]             savepoint it), wait for its end\n"
        "  weir cluster status|delete --cluster URL      a cluster mode job's state in\n"
        "               --job NAME                       NATS (see 'weir help cluster')\n"
        "  weir help [run [JOB] | receiver | verify | savepoint | stop | cluster]\n"
        "                                                show help\n"
        "  weir version                                  show the version\n"
        "\n"
        "Jobs: counter, wordcount, collatz, components, windows, sessions, nexmark, or\n"
        "a path to a job .so.\n"
        "See 'weir help run'.\n",
        out);
}

static void help_run(FILE *out) {
  fputs("usage: weir run [ENGINE OPTIONS] JOB [JOB OPTIONS]\n"
        "\n"
        "Runs JOB to the end of its input, or until SIGINT/SIGTERM stops it cleanly.\n"
        "\n"
        "Engine options (before the job name; built-in jobs also take them after it):\n"
        "  --workers W          worker threads (default 0: one per core)\n"
        "  --parallelism P      subtasks per operator (default 0: one per worker)\n"
        "  --summary-json FILE  write the run's summary (per operator records in/out,\n"
        "                       counters, elapsed time) as JSON to FILE\n"
        "  --quiet              no progress line and no summary line on stderr, and\n"
        "                       only warnings and errors in the log\n"
        "  --log-level LEVEL    error, warn, info (default) or debug; the environment\n"
        "                       variable WEIR_LOG sets it too (the option wins)\n"
        "  --loop-memory BYTES  memory of each loop feedback queue and back-edge log\n"
        "                       before it continues in a scratch file (default 64M)\n"
        "  --spill-dir DIR      where scratch files go (default: the state directory,\n"
        "                       or $TMPDIR); they are unlinked as soon as created\n"
        "  --batch-records N    records per batch (default 1024)\n"
        "  --channel-batches N  channel bound in batches (default 8)\n"
        "  --buffer-timeout US  a partly filled batch is sent at most this long after\n"
        "                       the last send (default 1000; 0: at once, lowest latency,\n"
        "                       less throughput; docs/latency.md)\n"
        "  --http HOST:PORT     serve the running job over HTTP (default: off; port 0:\n"
        "                       a free one, logged and written to DIR/http): GET /\n"
        "                       (dashboard), /metrics (Prometheus), /api/v1/job,\n"
        "                       /api/v1/metrics, /api/v1/checkpoints; POST\n"
        "                       /api/v1/savepoints and /api/v1/stop with a bearer token\n"
        "                       (the run's, in DIR/http-token, mode 0600). Loopback\n"
        "                       addresses only, unless --http-token is given\n"
        "  --http-token FILE    the bearer token (first line of FILE, 16+ characters)\n"
        "                       every request but GET / then needs; required to bind\n"
        "                       a non-loopback address. The Host header must be\n"
        "                       localhost or an IP address; no CORS headers are sent\n"
        "\n"
        "Checkpoint options (engine options too):\n"
        "  --state-dir DIR      the job's checkpoint store, created if missing\n"
        "                       (default ./state; 'none' = no checkpoints)\n"
        "  --checkpoint-interval MS  between checkpoints (default 1000; 0 = only\n"
        "                       the final checkpoint at the end of the input)\n"
        "  --checkpoint-timeout MS   abort a checkpoint that takes longer (default 600000)\n"
        "  --checkpoint-mode M  aligned (exactly-once state, default), at-least-once\n"
        "                       (barriers never block an input), or sync: stop the\n"
        "                       world (sources pause, every record in flight is\n"
        "                       processed, every operator snapshots, sources resume\n"
        "                       when the checkpoint is durable), a baseline for\n"
        "                       benchmarks; its checkpoints restore like aligned ones;\n"
        "                       or unaligned: a barrier overtakes the records buffered\n"
        "                       in channels, each task snapshots when it first sees\n"
        "                       it, and the records it overtook are stored as channel\n"
        "                       state, replayed first on restore (checkpoints do not\n"
        "                       wait for backpressure; a checkpoint with channel state\n"
        "                       restores only with the same parallelism; jobs with\n"
        "                       loops checkpoint aligned)\n"
        "  --alignment-timeout MS  start every checkpoint aligned; a task whose\n"
        "                       alignment has taken MS (from its first sight of the\n"
        "                       barrier) switches to an unaligned cut (with aligned or\n"
        "                       unaligned mode; default 0: none)\n"
        "  --tolerable-checkpoint-failures N|unlimited  consecutive failed checkpoints\n"
        "                       (full disk, I/O error, timeout) the job runs on after\n"
        "                       (default 3); the next one stops it (exit 3). A failed\n"
        "                       checkpoint is declined: the last completed one stays\n"
        "                       the restore point, and the next interval tries again\n"
        "  --max-store-size BYTES  largest size of the store (default 64G); a\n"
        "                       checkpoint that does not fit is declined\n"
        "  --retain K           completed checkpoints kept (default 3)\n"
        "  --restore latest|ID  continue the job from its latest (or the given)\n"
        "                       completed checkpoint; from the beginning if none\n"
        "                       completed yet; nothing to do if the job finished\n"
        "  --fresh              start a new instance even if the last one did not\n"
        "                       finish (checkpoint ids continue)\n"
        "  --allow-sink-change  restore although a sink writes elsewhere than when\n"
        "                       the checkpoint was taken, where the sink can move:\n"
        "                       file:DIR commits the checkpoint's pending parts in\n"
        "                       the old directory and writes the epochs after it to\n"
        "                       the new one (the two together hold every record once);\n"
        "                       postgresql, nats and http sinks refuse (their pending\n"
        "                       epochs can only be completed at the old destination)\n"
        "  --allow-non-restored-state  restore although the checkpoint holds state\n"
        "                       of an operator this job no longer has (it is dropped)\n"
        "  --from-savepoint PATH  start from a savepoint file (weir savepoint, weir stop\n"
        "                       --savepoint): it is copied into the state directory\n"
        "                       (an empty one, or the job's own), the job id, lease\n"
        "                       epoch and checkpoint ids continue above the savepoint's,\n"
        "                       and sinks recover as with --restore; the job may be a\n"
        "                       new version (state is matched by operator name);\n"
        "                       not with --restore or --fresh. A damaged file: exit 3\n"
        "A run without --restore on a state directory whose job did not finish is\n"
        "refused (exit 2), naming --restore latest and --fresh. A state directory\n"
        "holds one job: its name, graph and sink destinations are recorded, and a\n"
        "run of another job, or a restore into another sink destination or without\n"
        "an operator that has state, is refused before anything runs (exit 2),\n"
        "naming both sides and the way out (--fresh, another --state-dir, or the\n"
        "flags above). Operators added since the checkpoint start empty; another\n"
        "--parallelism rescales.\n"
        "\n"
        "Ownership (engine options too): a run holds the lease of its state\n"
        "directory, renewed every third of its duration; a second run on the same\n"
        "directory is refused (exit 4, naming the owner and its epoch) while the\n"
        "owner lives, and takes over at once after the owner released the lease\n"
        "(end of the job, SIGTERM) or, on the same host, after its process is gone.\n"
        "  --lease-ms MS        lease duration (default 6000): a stopped or\n"
        "                       unreachable owner is taken over after it\n"
        "  --wait               when a live owner holds the lease, wait for it to\n"
        "                       expire and take over, instead of exit 4\n"
        "An owner that lost its lease (taken over while it was paused, or unable to\n"
        "renew it in time) commits nothing more and exits with 4.\n"
        "\n"
        "Cluster mode (engine options; docs/scale-out.md): one job run by several\n"
        "processes, on one host or several, through NATS JetStream. The job's graph\n"
        "is cut at its key-by edges into stages, and each stage into --tasks tasks\n"
        "(task t reads the keys of task t, or split t of the sources); each member\n"
        "takes tasks nobody runs (leases and fencing epochs in a NATS key-value\n"
        "bucket) and runs each in a child process; a task's checkpoint counts once\n"
        "it is stored in NATS and its commit point moved there, so another member\n"
        "takes a dead member's task over from it. Start the same command on every\n"
        "member, with its name.\n"
        "  --cluster URL        nats://HOST:PORT[,HOST:PORT...]: the NATS servers\n"
        "  --member NAME        this member's name (letters, digits, - and _)\n"
        "  --job NAME           the job's name in the cluster (default: the job's\n"
        "                       own); a finished job does not run again under its\n"
        "                       name until 'weir cluster delete'\n"
        "  --tasks T            tasks of each stage (default 4; every member the same):\n"
        "                       a stage's parallelism (each task runs it at one\n"
        "                       subtask, so --parallelism above 1 is refused)\n"
        "  --replicas N         replicas of the streams and buckets it makes (1-5,\n"
        "                       default 1; 3 on a three-node NATS cluster)\n"
        "The lease (--lease-ms) is the tasks' too; --state-dir holds each task's\n"
        "local store (<dir>/task<K>.<T>), emptied when the task starts here;\n"
        "with --http HOST:PORT, task T of stage K serves on PORT + K * tasks + T\n"
        "(give each member on a host its own PORT range). The\n"
        "file sink is refused (a task may move to another host). A member whose\n"
        "task was taken over kills that task's run at once; a task's run whose\n"
        "member died ends itself. A failed run is started again after a backoff\n"
        "(2 heartbeats, doubling up to 32); runs failing for 40 leases end the\n"
        "member.\n"
        "\n"
        "Sinks (--sink SPEC of the built-in jobs; weir_sink_to in the C API):\n"
        "  null, print          discard; print to stdout (at-least-once)\n"
        "  file:DIR             exactly-once: two-phase commit of one part file per\n"
        "                       sink subtask and checkpoint\n"
        "  http://HOST:PORT/PATH[?retention=D][&idempotency=off][&inflight=N][&buffer=B]\n"
        "                       exactly-once at a destination honouring\n"
        "                       Idempotency-Key; N requests at once per subtask\n"
        "                       (default 64; 1: in order); at most B bytes of\n"
        "                       unanswered epochs per subtask (default 64M), then\n"
        "                       the sink takes no input until they land;\n"
        "                       https:// over TLS ([&cacert=FILE]); credentials from\n"
        "                       [&auth_file=PATH] or [&auth_env=NAME]: the value of\n"
        "                       an Authorization header, never logged\n"
        "  postgresql://USER@HOST:PORT/DB[?table=T][&markers=N][&...]  exactly-once:\n"
        "                       rows (key, value, operation id) into table T\n"
        "                       (default weir_output, created if missing) by PREPARE\n"
        "                       TRANSACTION / COMMIT PREPARED per subtask and\n"
        "                       checkpoint; marker rows of the last N checkpoints\n"
        "                       kept (default 100, at least --retain); needs\n"
        "                       max_prepared_transactions >= 2 per subtask; the\n"
        "                       rest of the URI goes to libpq\n"
        "\n"
        "Built-in jobs:\n",
        out);
  for (size_t i = 0; i < N_BUILTINS; i++) {
    fprintf(out, "  %-10s %s\n", builtins[i]->name, builtins[i]->synopsis);
  }
  fputs("\n"
        "Job shared objects: a JOB that contains a '/' or ends in .so is loaded with\n"
        "dlopen; it must be built against <weir/weir.h> and export its build function\n"
        "with WEIR_JOB_EXPORT. Every argument after its path is passed to the build\n"
        "function (argv[0] is the path); a build that fails with WEIR_EINVAL is\n"
        "reported as a usage error.\n"
        "\n"
        "While stderr is a terminal, a progress line is shown; at the end a one-line\n"
        "summary is printed on stderr. Records of the 'print' sink go to stdout.\n"
        "\n"
        "SIGINT or SIGTERM stops the sources and lets the job drain and end cleanly;\n"
        "a second one abandons the drain.\n"
        "\n"
        "Exit codes: 0 success (also after a clean stop by SIGINT/SIGTERM, and\n"
        "--restore of a finished job), 1 runtime error (also a drain abandoned by a\n"
        "second signal), 2 usage error, a job that cannot be built (a build or\n"
        "plan error), or a run that does not fit the state directory (another\n"
        "job, another sink destination, state of an operator the job lacks), 3\n"
        "store or checkpoint refused (corrupt, truncated, unknown\n"
        "format, another job's, or more checkpoints failed in a row than\n"
        "--tolerable-checkpoint-failures allows), 4 the state directory is\n"
        "held by a live owner, or this run lost its ownership (fenced), 5 a\n"
        "destination refused an effect permanently (an idempotency key reused with\n"
        "another payload), or a replay would go beyond the destination's key\n"
        "retention (retention=) or a NATS stream's duplicate window, or a NATS\n"
        "source would resume at a sequence its stream no longer holds.\n"
        "\n"
        "Sinks (--sink): null, print, file:DIR, http[s]://HOST:PORT/PATH and\n"
        "nats://HOST:PORT/SUBJECT[?stream=S&duplicates=D&pending=N&replicas=R]\n"
        "(JetStream, one message \"<key> <value>\" per record with Nats-Msg-Id = its\n"
        "operation id; stream S, default WEIR, created if missing, with R replicas,\n"
        "default 1, also on a stage edge; HOST:PORT may be a list H1:P1,H2:P2,... of\n"
        "a cluster's servers). Sources (--source, counter and\n"
        "wordcount): nats://HOST:PORT/SUBJECT[?stream=S&rate=R&splits=N], the\n"
        "messages of SUBJECT up to its last one when the job first started; with a\n"
        "wildcard SUBJECT and splits=N, its concrete subjects spread over N splits\n"
        "that up to --parallelism subtasks read; stream sequences per split are the\n"
        "checkpointed positions, restorable at another parallelism. With tasks=T,\n"
        "the same nats:// URL is a stage edge between two jobs: as a sink it sends\n"
        "records by key to T tasks in batches, as a source task t reads its\n"
        "batches exactly once (counter: --stage-out). See README.md, Sinks,\n"
        "Sources and \"A job across two processes\".\n"
        "\n"
        "See 'weir help run JOB' for each built-in job ('weir help run windows').\n",
        out);
}

static int cmd_help(int argc, char **argv) {
  /* weir help [run [JOB]] */
  if (argc <= 1) {
    help_main(stdout);
    return CLI_EXIT_OK;
  }
  const char *topic = argv[1];
  if (strcmp(topic, "receiver") == 0 && argc == 2) {
    cli_help_receiver(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(topic, "savepoint") == 0 && argc == 2) {
    cli_help_savepoint(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(topic, "cluster") == 0 && argc == 2) {
    cli_help_cluster(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(topic, "stop") == 0 && argc == 2) {
    cli_help_stop(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(topic, "verify") == 0 && argc == 2) {
    cli_help_verify(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(topic, "run") == 0 && argc == 2) {
    help_run(stdout);
    return CLI_EXIT_OK;
  }
  const char *job = strcmp(topic, "run") == 0 && argc == 3 ? argv[2] : argc == 2 ? topic : NULL;
  const cli_builtin *b = job ? find_builtin(job) : NULL;
  if (b != NULL) {
    b->help(stdout);
    return CLI_EXIT_OK;
  }
  fprintf(stderr, "weir: no help for '%s'\nsee 'weir help'\n", job ? job : argv[argc - 1]);
  return CLI_EXIT_USAGE;
}

/* ------------------------------------------------------------------------ */
/* Running a job                                                            */

typedef struct progress_line {
  double last_s;
  uint64_t last_n;
  uint64_t total; /* records the sources emit in all, 0: unknown */
  int shown;
} progress_line;

/* The live line on a terminal, kept below the log lines (weir_log_status):
 * "records 12.3M of 20M (61%)  9.87M rec/s  elapsed 1.2s  ETA 0.8s", the
 * rate over the last interval; the share and the ETA when the job knows
 * its total. Runs on the thread of weir_job_run. */
static void on_progress(void *user, const weir_progress *p) {
  progress_line *pl = user;
  double dt = p->elapsed_s - pl->last_s;
  double rate = dt > 0 && p->source_records >= pl->last_n
                    ? (double)(p->source_records - pl->last_n) / dt
                    : 0.0;
  pl->last_s = p->elapsed_s;
  pl->last_n = p->source_records;
  char n[32], r[32], t[32], of[64] = "", eta[32] = "", ck[48] = "", line[256];
  if (pl->total) {
    double share = (double)p->source_records / (double)pl->total;
    snprintf(of, sizeof of, " of %s (%.0f%%)", cli_human((double)pl->total, t, sizeof t),
             100.0 * (share < 1 ? share : 1));
    if (rate > 0 && p->source_records < pl->total)
      snprintf(eta, sizeof eta, "  ETA %.1fs", (double)(pl->total - p->source_records) / rate);
  }
  if (p->last_checkpoint)
    snprintf(ck, sizeof ck, "  checkpoint %llu", (unsigned long long)p->last_checkpoint);
  snprintf(line, sizeof line, "records %s%s  %s rec/s  elapsed %.1fs%s%s",
           cli_human((double)p->source_records, n, sizeof n), of, cli_human(rate, r, sizeof r),
           p->elapsed_s, eta, ck);
  weir_log_status(line);
  pl->shown = 1;
}

/* --log-level, else with --quiet warnings and errors only (unless WEIR_LOG
 * says otherwise). */
static void apply_log_level(const cli_engine *eng) {
  if (eng->log_level >= 0)
    weir_log_set_level(eng->log_level);
  else if (eng->quiet && getenv("WEIR_LOG") == NULL)
    weir_log_set_level(WEIR_LOG_WARN);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Fail-stop on a lost lease: another run owns the state directory now, so
 * this process ends at once, before any operator's close() can flush what
 * it buffered into a destination the new owner writes to. */
static void on_lease_lost(void *user, const char *msg) {
  (void)user;
  char line[1200];
  int n = snprintf(line, sizeof line, "weir: %s\n", msg);
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) {
  }
  _exit(CLI_EXIT_OWNED);
}

/* Around weir_job_run (which handles them itself while it runs),
 * SIGINT/SIGTERM are stop requests too: before the run they stop the job as
 * soon as it starts; after it they change nothing, so that a job that ended
 * well exits 0 even if a stop arrives while it reports. */
static _Atomic(weir_job *) signal_job;
static atomic_int signal_inside; /* handlers between loading signal_job and done */

static void on_stop_signal(int signum) {
  (void)signum;
  int saved_errno = errno;
  atomic_fetch_add(&signal_inside, 1);
  weir_job *job = atomic_load(&signal_job);
  if (job != NULL) weir_job_stop(job);
  atomic_fetch_sub(&signal_inside, 1);
  errno = saved_errno;
}

/* Sends SIGINT/SIGTERM to weir_job_stop(job), or, with NULL, ignores them
 * from now to the exit (before the job is destroyed). */
static void stop_signals_to(weir_job *job) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = job != NULL ? on_stop_signal : SIG_IGN;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (job != NULL) atomic_store(&signal_job, job);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  if (job == NULL) {
    atomic_store(&signal_job, NULL);
    while (atomic_load(&signal_inside)) sched_yield();
  }
}

static int execute_run(weir_job *job, const cli_engine *eng, const cli_builtin *kind, void *cfg);
static int execute_run_with(weir_job *job, const cli_engine *eng, const cli_builtin *kind,
                            void *cfg, cli_control **ctl);
/* The state directory of the run (for its control socket). */
static const char *job_state_dir;
/* The run of a cluster member's stage (cluster.h), or NULL. */
static cli_cluster_task *cluster_task;

/* POST /api/v1/savepoints and /api/v1/stop: what `weir savepoint` and
 * `weir stop` ask through the control socket (control.c). */
static int http_savepoint(void *user, const char *out, char *path, size_t path_len, char *err,
                          size_t err_len) {
  weir_savepoint_result res;
  int rc = weir_job_savepoint(user, out, 0, &res);
  snprintf(path, path_len, "%s", rc ? "" : res.path);
  snprintf(err, err_len, "%s", res.error);
  return rc;
}

static int http_stop(void *user, int savepoint, int drain, char *path, size_t path_len, char *err,
                     size_t err_len) {
  weir_job *job = user;
  path[0] = err[0] = '\0';
  if (!savepoint) {
    if (drain)
      weir_job_drain(job);
    else
      weir_job_stop(job);
    return 0;
  }
  weir_savepoint_result res;
  unsigned flags = WEIR_SAVEPOINT_STOP | (drain ? WEIR_SAVEPOINT_DRAIN : 0);
  int rc = weir_job_savepoint(job, NULL, flags, &res);
  snprintf(path, path_len, "%s", rc ? "" : res.path);
  snprintf(err, err_len, "%s", res.error);
  return rc;
}

/* --http: the endpoint serves the job from before its run to after its
 * report (http.h). Returns an exit code. */
static int http_start(weir_job *job, const cli_engine *eng, cli_http **http) {
  if (eng->http_token && !eng->http) {
    cli_usage("--http-token FILE needs --http HOST:PORT");
    return CLI_EXIT_USAGE;
  }
  if (!eng->http) return CLI_EXIT_OK;
  apply_log_level(eng);
  cli_http_opts ho = {.listen = eng->http,
                      .token_file = eng->http_token,
                      .state_dir = strcmp(eng->state_dir, "none") ? eng->state_dir : NULL,
                      .total_records = eng->total_records};
  cli_http_actions act = {.savepoint = http_savepoint, .stop = http_stop, .user = job};
  int rc = cli_http_start(http, job, &ho, &act);
  return rc == 0 ? CLI_EXIT_OK : rc == WEIR_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
}

/* Runs a built job and reports; kind is NULL for a job .so. Returns the exit
 * code. */
static int execute(weir_job *job, const cli_engine *eng, const cli_builtin *kind, void *cfg) {
  cli_http *http = NULL;
  int code = http_start(job, eng, &http);
  if (code == CLI_EXIT_OK) code = execute_run(job, eng, kind, cfg);
  cli_http_stop(http);
  stop_signals_to(NULL);
  return code;
}

/* The run owns its state directory: the control socket may listen. */
static void on_started(void *user, weir_job *job) {
  cli_control **ctl = user;
  *ctl = cli_control_start(job, job_state_dir);
}

static int execute_run(weir_job *job, const cli_engine *eng, const cli_builtin *kind, void *cfg) {
  cli_control *ctl = NULL;
  int code = execute_run_with(job, eng, kind, cfg, &ctl);
  cli_control_end(ctl, code);
  return code;
}

static int execute_run_with(weir_job *job, const cli_engine *eng, const cli_builtin *kind,
                            void *cfg, cli_control **ctl) {
  apply_log_level(eng);
  weir_run_opts o = {0};
  o.workers = eng->workers;
  o.default_parallelism = eng->parallelism;
  o.loop_memory_bytes = eng->loop_memory;
  o.spill_dir = eng->spill_dir;
  o.batch_records = (uint32_t)eng->batch_records;
  o.channel_batches = (uint32_t)eng->channel_batches;
  if (eng->buffer_timeout_set)
    o.buffer_timeout_us = eng->buffer_timeout ? (uint32_t)eng->buffer_timeout : WEIR_FLUSH_AT_ONCE;
  o.handle_signals = 1;
  o.lease_lost = on_lease_lost;
  if (cluster_task) cli_cluster_task_opts(cluster_task, &o);
  if (cli_checkpoint_opts(eng, &o) < 0) return CLI_EXIT_USAGE;
  if (o.state_dir) {
    job_state_dir = o.state_dir;
    o.started = on_started;
    o.started_user = ctl;
  }
  if (o.state_dir) {
    int m = cli_mkdir_p(o.state_dir);
    if (m < 0) {
      cli_error("cannot create the state directory '%s': %s", o.state_dir, weir_strerror(m));
      return CLI_EXIT_RUNTIME;
    }
  }
  progress_line pl = {.total = eng->total_records};
  if (!eng->quiet && isatty(STDERR_FILENO) && !(eng->prints_records && isatty(STDOUT_FILENO))) {
    o.progress_ms = 500;
    o.progress = on_progress;
    o.progress_user = &pl;
  }
  double t0 = now_s();
  stop_signals_to(job);
  int rc = weir_job_run(job, &o);
  weir_failpoint("cli.reporting");
  /* A first SIGINT/SIGTERM drains the job and weir_job_run returns 0; a
   * second one abandons the drain (WEIR_ECANCELED): not a clean end. */
  cli_outcome out = {.elapsed_s = now_s() - t0};
  if (pl.shown) weir_log_status(NULL);
  fflush(stdout);

  int code = CLI_EXIT_OK;
  if (eng->summary_json != NULL) {
    int s = weir_job_write_summary(job, eng->summary_json);
    if (s < 0) {
      cli_error("cannot write summary '%s': %s", eng->summary_json, weir_strerror(s));
      code = CLI_EXIT_RUNTIME;
    }
  }
  if (rc != 0) {
    const char *e = weir_job_error(job);
    /* Errors found before anything ran (options, the frozen graph) are
     * build errors; a restore refused by the plan stays a runtime error. */
    int x = weir_job_build_error(job) ? cli_exit_for_build(rc) : cli_exit_for(rc);
    cli_error("%s%s", x == CLI_EXIT_RUNTIME ? "job failed: " : "",
              e != NULL && *e ? e : weir_strerror(rc));
    return x;
  }
  const weir_run_info *ri = weir_job_run_info(job);
  if (ri->already_finished) {
    if (!eng->quiet)
      fprintf(stderr, "weir: job %s already finished (instance %llu): nothing to do\n", ri->job_id,
              (unsigned long long)ri->instance);
    return CLI_EXIT_OK;
  }
  if (!eng->quiet) {
    if (kind != NULL) {
      kind->report(job, cfg, &out, stderr);
    } else {
      fprintf(stderr, "%s: %s in %.2f s\n", weir_job_name(job), out.stopped ? "stopped" : "done",
              out.elapsed_s);
    }
    if (out.stopped) fputs("weir: stopped; the job drained and ended cleanly\n", stderr);
  }
  return code;
}

/* A build function's error as a message: the job's, or, without one, the
 * code with what may have left the job without a message. */
static const char *build_message(weir_job *job, int rc, char *buf, size_t len) {
  const char *e = job ? weir_job_error(job) : NULL;
  if (e != NULL && *e) return e;
  if (job == NULL) return weir_strerror(rc);
  snprintf(buf, len,
           "%s (%s, and no builder call recorded why: one given a NULL stream cannot reach "
           "the job, so check the stream each builder call returns)",
           weir_strerror(rc), weir_err_name(rc));
  return buf;
}

/* Reports a build error and returns the exit code for it. */
static int build_failed(weir_job *job, int rc, const char *what) {
  char buf[512];
  cli_error("%s%s", what, build_message(job, rc, buf, sizeof buf));
  return job ? cli_exit_for_build(rc) : CLI_EXIT_RUNTIME;
}

/* Cluster mode (cluster.h): a member, or the run of one of its tasks. */
static int execute_cluster(weir_job *job, cli_engine *eng, const cli_builtin *kind, void *cfg) {
  if (cli_cluster_check(eng, weir_job_name(job)) < 0) return CLI_EXIT_USAGE;
  if (eng->cluster_stage < 0) return cli_cluster_member(job, eng);
  int code = cli_cluster_task_prepare(job, eng, &cluster_task);
  if (code == CLI_EXIT_OK) code = execute(job, eng, kind, cfg);
  cli_cluster_task_end(cluster_task);
  cluster_task = NULL;
  return code;
}

static int run_builtin(const cli_builtin *b, cli_engine *eng, cli_args *a) {
  for (int i = a->i; i < a->argc; i++) {
    cli_args h = *a;
    h.i = i;
    if (cli_is_help(&h)) {
      b->help(stdout);
      return CLI_EXIT_OK;
    }
  }
  void *cfg = NULL;
  if (b->parse(a, eng, &cfg) < 0) return CLI_EXIT_USAGE;
  weir_job *job = NULL;
  int code;
  int rc = weir_job_create(&job, b->name);
  if (rc < 0) {
    code = build_failed(NULL, rc, "cannot create job: ");
  } else if ((rc = b->build(job, eng, cfg)) != 0) {
    code = build_failed(job, rc, "");
  } else if (eng->cluster || eng->member || eng->cluster_stage >= 0) {
    code = execute_cluster(job, eng, b, cfg);
  } else {
    code = execute(job, eng, b, cfg);
  }
  weir_job_destroy(job);
  b->free_cfg(cfg);
  return code;
}

static int run_shared_object(cli_engine *eng, const char *path, int argc, char **argv) {
  cli_loaded l;
  if (cli_job_load(path, &l) < 0) return CLI_EXIT_RUNTIME;
  /* The job's name: the file name without directory and ".so". */
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 3 && strcmp(base + n - 3, ".so") == 0) n -= 3;
  char *name = malloc(n + 1);
  char **jargv = malloc(((size_t)argc + 2) * sizeof *jargv);
  int code;
  weir_job *job = NULL;
  if (name == NULL || jargv == NULL) {
    cli_error("out of memory");
    code = CLI_EXIT_RUNTIME;
    goto done;
  }
  memcpy(name, base, n);
  name[n] = '\0';
  jargv[0] = (char *)path;
  for (int i = 0; i < argc; i++) jargv[i + 1] = argv[i];
  jargv[argc + 1] = NULL;
  int rc = weir_job_create(&job, name);
  if (rc < 0) {
    code = build_failed(NULL, rc, "cannot create job: ");
    goto done;
  }
  rc = l.build(job, argc + 1, jargv);
  if (rc != 0) {
    char buf[512];
    const char *msg = build_message(job, rc, buf, sizeof buf);
    if (rc == WEIR_EINVAL)
      fprintf(stderr, "weir: job '%s': %s\n", path, msg);
    else
      cli_error("job '%s' could not be built: %s", path, msg);
    code = cli_exit_for_build(rc);
    goto done;
  }
  if (eng->cluster || eng->member || eng->cluster_stage >= 0)
    code = execute_cluster(job, eng, NULL, NULL);
  else
    code = execute(job, eng, NULL, NULL);
done:
  weir_job_destroy(job); /* before dlclose: the job may point into the .so */
  free(jargv);
  free(name);
  cli_job_unload(&l);
  return code;
}

static int cmd_run(int argc, char **argv) {
  cli_engine eng;
  cli_engine_init(&eng);
  cli_args a = {.argc = argc, .argv = argv, .i = 1, .what = "run"};
  while (a.i < argc) {
    if (cli_is_help(&a)) {
      help_run(stdout);
      return CLI_EXIT_OK;
    }
    int r = cli_take_engine(&a, &eng);
    if (r < 0) return CLI_EXIT_USAGE;
    if (r > 0) continue;
    if (argv[a.i][0] == '-') {
      cli_usage("unknown option '%s' for 'weir run' (job options go after the job name)",
                argv[a.i]);
      return CLI_EXIT_USAGE;
    }
    break;
  }
  if (a.i >= argc) {
    cli_usage("run: missing job name (built-in jobs: %s; or a path to a job .so)", builtin_names());
    return CLI_EXIT_USAGE;
  }
  const char *name = argv[a.i++];
  if (cli_is_job_path(name)) return run_shared_object(&eng, name, argc - a.i, argv + a.i);
  const cli_builtin *b = find_builtin(name);
  if (b == NULL) {
    cli_usage("unknown job '%s' (built-in jobs: %s; or a path to a job .so)", name,
              builtin_names());
    return CLI_EXIT_USAGE;
  }
  char what[64];
  snprintf(what, sizeof what, "job '%s'", b->name);
  a.what = what;
  return run_builtin(b, &eng, &a);
}

int main(int argc, char **argv) {
  cli_crash_install();
  cli_main_argc = argc;
  cli_main_argv = argv;
  if (argc < 2) {
    help_main(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *verb = argv[1];
  if (strcmp(verb, "run") == 0) return cmd_run(argc - 1, argv + 1);
  if (strcmp(verb, "help") == 0) return cmd_help(argc - 1, argv + 1);
  if (strcmp(verb, "checkpoints") == 0) return cli_cmd_checkpoints(argc - 1, argv + 1);
  if (strcmp(verb, "inspect") == 0) return cli_cmd_inspect(argc - 1, argv + 1);
  if (strcmp(verb, "receiver") == 0) return cli_cmd_receiver(argc - 1, argv + 1);
  if (strcmp(verb, "verify") == 0) return cli_cmd_verify(argc - 1, argv + 1, argv[0]);
  if (strcmp(verb, "savepoint") == 0) return cli_cmd_savepoint(argc - 1, argv + 1);
  if (strcmp(verb, "stop") == 0) return cli_cmd_stop(argc - 1, argv + 1);
  if (strcmp(verb, "cluster") == 0) return cli_cmd_cluster(argc - 1, argv + 1);
  if (strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
    help_main(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(verb, "version") == 0 || strcmp(verb, "--version") == 0) {
    printf("weir %s (job ABI %u)\n", WEIR_VERSION, (unsigned)WEIR_ABI_VERSION);
    return CLI_EXIT_OK;
  }
  fprintf(stderr, "weir: unknown command '%s'\nsee 'weir help'\n", verb);
  return CLI_EXIT_USAGE;
}
