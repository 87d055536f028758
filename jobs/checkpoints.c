/* jobs/checkpoints.c: owns the read-only verbs over a state directory:
 * `weir checkpoints` (the completed checkpoints) and `weir inspect ID` (one
 * checkpoint's operators, subtasks, sizes and source positions).
 *
 * DESIGN. Both open the store read-only: they never write, never collect
 * anything, and work while a job runs on the same directory (LMDB readers do
 * not block the writer, and see the last committed state). A damaged store
 * is reported with exit code 3, like a refused restore.
 */
#include "cli.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/alloc.h"
#include "base/json.h"
#include "snapshot/lease.h"
#include "weir/sink.h"
#include "snapshot/store.h"

static void help_checkpoints(FILE *out) {
  fputs("usage: weir checkpoints [--state-dir DIR] [--json] [--verify]\n"
        "\n"
        "Lists the completed checkpoints retained in DIR (default ./state), oldest\n"
        "first: id, completion time, stored bytes, duration, alignment time, mode\n"
        "(aligned, or unaligned when some subtask took an unaligned cut) and the\n"
        "bytes of channel state (records the barriers overtook).\n"
        "Read-only; safe while the job runs. --json prints\n"
        "{\"job\": ID, \"finished\": BOOL, \"checkpoints\": [{\"id\": N, \"time\": MS,\n"
        "\"bytes\": B, \"duration_ms\": D, \"alignment_ms\": A, \"mode\": M,\n"
        "\"unaligned_subtasks\": U, \"channel_state_bytes\": C}, ...]}.\n"
        "\n"
        "--verify reads and checks every value of every retained checkpoint (in a\n"
        "child process, so that a damaged page cannot crash the command) and prints\n"
        "one line each: '<id> ok' or '<id> damaged: <reason>'; exit 0 when all are\n"
        "intact, 3 otherwise. Restore an intact one with 'weir run ... --restore ID'.\n",
        out);
}

static void help_inspect(FILE *out) {
  fputs("usage: weir inspect ID [--state-dir DIR] [--json]\n"
        "\n"
        "Shows checkpoint ID: per operator and subtask, the stored bytes and chunks,\n"
        "keyed-state entries, operator state size and source positions (split:offset);\n"
        "where a subtask's u64 keys did not change since an earlier checkpoint, that\n"
        "checkpoint holds them (\"keys of checkpoint N\"; its bytes are not counted\n"
        "here); whether it is aligned or unaligned, and each task's channel state (an entry\n"
        "named after the task's first operator + ~channels: the records its cut\n"
        "overtook, replayed first on restore).\n"
        "For a two-phase sink subtask (file:, http://), its counters kept apart, as\n"
        "totals over every run of the job up to this checkpoint (attempts, requests,\n"
        "responses, duplicates, rejections, commits, aborts, recovered), and the\n"
        "epochs it had pre-committed and not yet seen committed (JSON: \"sink\").\n"
        "Read-only; safe while the job runs.\n",
        out);
}

typedef struct ro_args {
  const char *state_dir;
  int json, verify;
  const char *id;
} ro_args;

static int parse(int argc, char **argv, ro_args *r, int want_id, void (*help)(FILE *)) {
  cli_args a = {.argc = argc, .argv = argv, .i = 1, .what = argv[0]};
  r->state_dir = "./state";
  while (a.i < argc) {
    if (cli_is_help(&a)) {
      help(stdout);
      return 1;
    }
    int k;
    if ((k = cli_take_str(&a, "--state-dir", &r->state_dir)) != 0 ||
        (k = cli_take_bool(&a, "--json", &r->json)) != 0 ||
        (!want_id && (k = cli_take_bool(&a, "--verify", &r->verify)) != 0)) {
      if (k < 0) return -1;
      continue;
    }
    const char *s = argv[a.i];
    if (want_id && !r->id && s[0] != '-') {
      r->id = s;
      a.i++;
      continue;
    }
    return cli_usage("%s: unexpected argument '%s'", argv[0], s);
  }
  if (want_id && !r->id)
    return cli_usage("%s: which checkpoint? (an id from 'weir checkpoints')", argv[0]);
  return 0;
}

/* Opens DIR's store read-only. Returns 1 if there is none yet, 0 if opened,
 * or an exit code > 1 after a message. */
static int open_ro(const char *dir, weir_store **s) {
  weir_store_opts o = {.read_only = 1};
  int rc = weir_store_open(s, dir, &o);
  if (rc == WEIR_ENOENT) return 1;
  if (rc) {
    char msg[512];
    cli_error("cannot read the state directory '%s': %s", dir,
              *s ? weir_store_error(*s, msg, sizeof msg) : weir_strerror(rc));
    weir_store_close(*s);
    *s = NULL;
    return rc == WEIR_ECORRUPT || rc == WEIR_EFORMAT ? CLI_EXIT_STORE : CLI_EXIT_RUNTIME;
  }
  return 0;
}

/* Nonzero if st is a task's channel state (an unaligned cut). */
static int is_channel_state(const weir_store_subtask_info *st) {
  size_t n = strlen(st->op), k = strlen(WEIR_STORE_CHANNELS_SUFFIX);
  return n > k && strcmp(st->op + n - k, WEIR_STORE_CHANNELS_SUFFIX) == 0;
}

/* What checkpoint `id` says about unaligned cuts: the subtasks that took
 * one (each stored channel state) and the bytes of overtaken records. */
typedef struct channel_sum {
  uint32_t unaligned;
  uint64_t bytes;
} channel_sum;

static channel_sum channel_sum_of(const weir_store_ckpt_info *info) {
  channel_sum c = {0, 0};
  for (uint32_t i = 0; i < info->nsubtasks; i++) {
    const weir_store_subtask_info *st = &info->subtasks[i];
    if (!is_channel_state(st)) continue;
    c.unaligned++;
    if (st->blob_len > WEIR_STORE_CHANNELS_HEADER)
      c.bytes += st->blob_len - WEIR_STORE_CHANNELS_HEADER;
  }
  return c;
}

static channel_sum channel_sum_at(weir_store *s, uint64_t id) {
  weir_store_ckpt_info *info = NULL;
  channel_sum c = {0, 0};
  if (weir_store_info(s, id, &info) == 0) c = channel_sum_of(info);
  weir_store_ckpt_info_free(info);
  return c;
}

static int store_error(weir_store *s, int rc, const char *what) {
  char msg[512];
  cli_error("%s: %s", what, weir_store_error(s, msg, sizeof msg));
  weir_store_close(s);
  return cli_exit_for(rc);
}

/* --verify: every retained checkpoint checked, a line each. */
static int verify_all(weir_store *s, const weir_store_ckpt *list, size_t n) {
  int damaged = 0;
  for (size_t i = 0; i < n; i++) {
    int rc = list[i].status ? list[i].status : weir_store_verify(s, list[i].id);
    if (rc == 0) {
      printf("%llu ok\n", (unsigned long long)list[i].id);
      continue;
    }
    char msg[512];
    if (list[i].status) {
      weir_store_ckpt_info *info = NULL;
      (void)weir_store_info(s, list[i].id, &info); /* sets the store's message */
      weir_store_ckpt_info_free(info);
    }
    printf("%llu damaged: %s\n", (unsigned long long)list[i].id,
           weir_store_error(s, msg, sizeof msg));
    damaged++;
  }
  return damaged ? CLI_EXIT_STORE : CLI_EXIT_OK;
}

/* The savepoint files in <dir>/savepoints (weir savepoint), each checked
 * whole: `weir checkpoints` lists them after the checkpoints, since
 * retention never removes them. */
typedef struct sp_entry {
  uint64_t id;
  int status; /* 0, or why the file cannot be used */
  weir_savepoint_info info;
  char err[300];
} sp_entry;

static int cmp_sp(const void *a, const void *b) {
  const sp_entry *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

static size_t list_savepoints(const char *dir, sp_entry **out) {
  char path[4200];
  snprintf(path, sizeof path, "%s/savepoints", dir);
  *out = NULL;
  DIR *d = opendir(path);
  if (d == NULL) return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    unsigned long long id = strtoull(e->d_name, &end, 10);
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || *end) continue;
    sp_entry *grown = realloc(*out, (n + 1) * sizeof **out);
    if (grown == NULL) break;
    *out = grown;
    sp_entry *s = &(*out)[n++];
    memset(s, 0, sizeof *s);
    s->id = id;
    snprintf(path, sizeof path, "%s/savepoints/%s", dir, e->d_name);
    s->status = weir_savepoint_check(path, &s->info, s->err, sizeof s->err);
  }
  closedir(d);
  if (n) qsort(*out, n, sizeof **out, cmp_sp);
  return n;
}

static void print_savepoints(const char *dir, const sp_entry *sp, size_t n, int json) {
  if (json) {
    printf(", \"savepoints\": [");
    for (size_t i = 0; i < n; i++) {
      char path[4200];
      snprintf(path, sizeof path, "%s/savepoints/%llu", dir, (unsigned long long)sp[i].id);
      printf("%s{\"id\": %llu, \"path\": ", i ? ", " : "", (unsigned long long)sp[i].id);
      weir_json_string(stdout, path);
      printf(", \"bytes\": %llu, \"time\": %lld, \"intact\": %s}",
             (unsigned long long)sp[i].info.bytes, (long long)sp[i].info.time_ms,
             sp[i].status ? "false" : "true");
    }
    printf("]");
    return;
  }
  if (!n) return;
  printf("savepoints in %s/savepoints (removed only by 'weir savepoint --delete ID'):\n", dir);
  for (size_t i = 0; i < n; i++) {
    char when[32] = "?";
    time_t t = (time_t)(sp[i].info.time_ms / 1000);
    struct tm tm;
    if (!sp[i].status && gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    if (sp[i].status)
      printf("%10llu  damaged: %s\n", (unsigned long long)sp[i].id, sp[i].err);
    else
      printf("%10llu %6llu  %-24s %14llu  job '%s'\n", (unsigned long long)sp[i].id,
             (unsigned long long)sp[i].info.epoch, when, (unsigned long long)sp[i].info.bytes,
             sp[i].info.job_name);
  }
}

int cli_cmd_checkpoints(int argc, char **argv) {
  ro_args r = {0};
  int p = parse(argc, argv, &r, 0, help_checkpoints);
  if (p) return p > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  if (r.verify && r.json) {
    cli_usage("%s: --verify prints lines, not JSON", argv[0]);
    return CLI_EXIT_USAGE;
  }
  weir_store *s = NULL;
  int o = open_ro(r.state_dir, &s);
  if (o > 1) return o;
  weir_store_job job = {0};
  int exists = 0;
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  weir_lease_state ls;
  int have_lease = weir_lease_read(r.state_dir, &ls) > 0;
  if (o == 0) {
    exists = weir_store_job_get(s, &job);
    if (exists < 0) return store_error(s, exists, "cannot read the job record");
    int rc = weir_store_list(s, &list, &n);
    if (rc) return store_error(s, rc, "cannot list checkpoints");
  }
  if (r.verify) {
    int x = o == 0 ? verify_all(s, list, n) : CLI_EXIT_OK;
    if (!n) printf("no completed checkpoint in '%s'\n", r.state_dir);
    weir_free(list);
    weir_store_close(s);
    return x;
  }
  sp_entry *sps = NULL;
  size_t nsp = list_savepoints(r.state_dir, &sps);
  if (r.json) {
    printf("{\"job\": ");
    if (exists)
      weir_json_string(stdout, job.job_id);
    else
      printf("null");
    printf(", \"finished\": %s, \"checkpoints\": [", exists && job.finished ? "true" : "false");
    for (size_t i = 0; i < n; i++) {
      channel_sum cs = channel_sum_at(s, list[i].id);
      printf("%s{\"id\": %llu, \"time\": %lld, \"bytes\": %llu, \"duration_ms\": %llu, "
             "\"alignment_ms\": %llu, \"epoch\": %llu, \"mode\": \"%s\", "
             "\"unaligned_subtasks\": %u, \"channel_state_bytes\": %llu}",
             i ? ", " : "", (unsigned long long)list[i].id, (long long)list[i].time_ms,
             (unsigned long long)list[i].bytes, (unsigned long long)list[i].duration_ms,
             (unsigned long long)list[i].alignment_ms, (unsigned long long)list[i].epoch,
             cs.unaligned ? "unaligned" : "aligned", cs.unaligned, (unsigned long long)cs.bytes);
    }
    printf("]");
    print_savepoints(r.state_dir, sps, nsp, 1);
    if (have_lease) { /* who holds the state directory (lease.c) */
      printf(", \"lease\": {\"epoch\": %llu, \"pid\": %lld, \"host\": ",
             (unsigned long long)ls.epoch, (long long)ls.owner.pid);
      weir_json_string(stdout, ls.owner.host);
      printf(", \"lease_ms\": %u, \"released\": %s, \"age_ms\": %lld}", ls.lease_ms,
             ls.released ? "true" : "false", (long long)ls.age_ms);
    }
    printf("}\n");
  } else if (!exists) {
    printf("no job in '%s'\n", r.state_dir);
  } else {
    printf("job %s, instance %llu, %s\n", job.job_id, (unsigned long long)job.instance,
           job.finished ? "finished" : "not finished");
    if (have_lease) {
      char age[48] = "";
      if (ls.age_ms >= 0) snprintf(age, sizeof age, ", renewed %lld ms ago", (long long)ls.age_ms);
      printf("lease: epoch %llu, pid %lld on %s, %u ms%s%s\n", (unsigned long long)ls.epoch,
             (long long)ls.owner.pid, ls.owner.host, ls.lease_ms, ls.released ? ", released" : "",
             ls.released ? "" : age);
    }
    if (!n)
      printf("no completed checkpoint\n");
    else
      printf("%10s %6s  %-24s %14s %12s %13s %-9s %14s\n", "id", "epoch", "completed (UTC)",
             "bytes", "duration ms", "alignment ms", "mode", "channel bytes");
    for (size_t i = 0; i < n; i++) {
      char when[32] = "?";
      time_t t = (time_t)(list[i].time_ms / 1000);
      struct tm tm;
      if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
      channel_sum cs = channel_sum_at(s, list[i].id);
      printf("%10llu %6llu  %-24s %14llu %12llu %13llu %-9s %14llu%s\n",
             (unsigned long long)list[i].id, (unsigned long long)list[i].epoch, when,
             (unsigned long long)list[i].bytes, (unsigned long long)list[i].duration_ms,
             (unsigned long long)list[i].alignment_ms, cs.unaligned ? "unaligned" : "aligned",
             (unsigned long long)cs.bytes, list[i].final ? "  final" : "");
    }
  }
  if (!r.json) print_savepoints(r.state_dir, sps, nsp, 0);
  free(sps);
  weir_free(list);
  weir_store_close(s);
  return CLI_EXIT_OK;
}

/* A two-phase sink subtask's state (weir/sink.h): 1 and *out if st is
 * one (only subtasks without keyed state and with operator state are
 * loaded), else 0. */
static int sink_state(weir_store *s, uint64_t id, const weir_store_subtask_info *st,
                      weir_sink_state_info *out) {
  if (st->u64_entries || st->bytes_entries || st->blob_len < 4) return 0;
  weir_subtask_snapshot snap;
  memset(&snap, 0, sizeof snap);
  int rc = weir_store_load(s, id, st->op, st->subtask, &snap);
  int ok = rc == 0 && weir_sink_state_decode(snap.blob, (size_t)snap.blob_len, out) == 0;
  weir_subtask_snapshot_free(&snap);
  return ok;
}

static void print_sink_json(const weir_sink_state_info *si) {
  printf(", \"sink\": {\"checkpoint\": %llu", (unsigned long long)si->checkpoint);
  for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++)
    printf(", \"%s\": %llu", weir_sink_counter_names[k], (unsigned long long)si->counters[k]);
  printf(", \"pending\": %u, \"pending_epochs\": [", si->npending);
  for (uint32_t k = 0; k < si->npending && k < 16; k++)
    printf("%s%llu", k ? ", " : "", (unsigned long long)si->pending_epochs[k]);
  printf("], \"pending_bytes\": %llu}", (unsigned long long)si->pending_bytes);
}

static void print_sink_text(const weir_sink_state_info *si) {
  printf("    sink:");
  for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++)
    printf("%s %s %llu", k ? "," : "", weir_sink_counter_names[k],
           (unsigned long long)si->counters[k]);
  printf("; pending epochs:");
  for (uint32_t k = 0; k < si->npending && k < 16; k++)
    printf(" %llu", (unsigned long long)si->pending_epochs[k]);
  if (si->npending > 16) printf(" ... (%u)", si->npending);
  if (!si->npending) printf(" none");
  printf("\n");
}

int cli_cmd_inspect(int argc, char **argv) {
  ro_args r = {0};
  int p = parse(argc, argv, &r, 1, help_inspect);
  if (p) return p > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  uint64_t id;
  if (cli_parse_u64("checkpoint id", r.id, UINT64_MAX, &id) < 0) return CLI_EXIT_USAGE;
  weir_store *s = NULL;
  int o = open_ro(r.state_dir, &s);
  if (o > 1) return o;
  if (o == 1) {
    cli_error("no job in '%s'", r.state_dir);
    return CLI_EXIT_USAGE;
  }
  weir_store_ckpt_info *info = NULL;
  int rc = weir_store_info(s, id, &info);
  if (rc == WEIR_ENOENT) {
    cli_error("checkpoint %llu is not in '%s' (see 'weir checkpoints')", (unsigned long long)id,
              r.state_dir);
    weir_store_close(s);
    return CLI_EXIT_USAGE;
  }
  if (rc) return store_error(s, rc, "cannot read the checkpoint");
  channel_sum cs = channel_sum_of(info);
  if (r.json) {
    printf("{\"id\": %llu, \"job\": ", (unsigned long long)info->ckpt.id);
    weir_json_string(stdout, info->job_id);
    printf(", \"format\": %u, \"epoch\": %llu, \"instance\": %llu, \"time\": %lld, "
           "\"bytes\": %llu, \"duration_ms\": %llu, "
           "\"alignment_ms\": %llu, \"final\": %s, \"mode\": \"%s\", "
           "\"unaligned_subtasks\": %u, \"channel_state_bytes\": %llu, \"subtasks\": [",
           info->format_version, (unsigned long long)info->ckpt.epoch,
           (unsigned long long)info->ckpt.instance, (long long)info->ckpt.time_ms,
           (unsigned long long)info->ckpt.bytes, (unsigned long long)info->ckpt.duration_ms,
           (unsigned long long)info->ckpt.alignment_ms, info->ckpt.final ? "true" : "false",
           cs.unaligned ? "unaligned" : "aligned", cs.unaligned, (unsigned long long)cs.bytes);
    for (uint32_t i = 0; i < info->nsubtasks; i++) {
      weir_store_subtask_info *st = &info->subtasks[i];
      printf("%s{\"operator\": ", i ? ", " : "");
      weir_json_string(stdout, st->op);
      printf(", \"subtask\": %u, \"parallelism\": %u, \"bytes\": %llu, \"chunks\": %llu, "
             "\"u64_entries\": %llu, \"bytes_entries\": %llu, \"operator_state\": %llu, "
             "\"keys_of_checkpoint\": %llu, \"positions\": [",
             st->subtask, st->parallelism, (unsigned long long)st->bytes,
             (unsigned long long)st->chunks, (unsigned long long)st->u64_entries,
             (unsigned long long)st->bytes_entries, (unsigned long long)st->blob_len,
             (unsigned long long)st->keys_ckpt);
      for (uint32_t k = 0; k < st->npos; k++)
        printf("%s{\"split\": %u, \"offset\": %llu}", k ? ", " : "", st->pos[k].split,
               (unsigned long long)st->pos[k].offset);
      printf("], \"ns_entries\": %llu, \"timers\": %llu, \"broadcast_entries\": %llu",
             (unsigned long long)st->ns, (unsigned long long)st->timers,
             (unsigned long long)st->bcast);
      if (st->has_clock) printf(", \"clock\": %lld", (long long)st->clock);
      if (st->state_version) printf(", \"state_version\": %u", st->state_version);
      if (is_channel_state(st)) printf(", \"channel_state\": true");
      weir_sink_state_info si;
      if (!is_channel_state(st) && sink_state(s, id, st, &si)) print_sink_json(&si);
      printf("}");
    }
    printf("]}\n");
  } else {
    printf("checkpoint %llu of job %s (format %u)%s\n", (unsigned long long)info->ckpt.id,
           info->job_id, info->format_version, info->ckpt.final ? ", final" : "");
    printf("  instance %llu, committed by lease epoch %llu\n",
           (unsigned long long)info->ckpt.instance, (unsigned long long)info->ckpt.epoch);
    printf("  %llu bytes, duration %llu ms, alignment %llu ms\n",
           (unsigned long long)info->ckpt.bytes, (unsigned long long)info->ckpt.duration_ms,
           (unsigned long long)info->ckpt.alignment_ms);
    if (cs.unaligned)
      printf("  unaligned: %u subtasks stored channel state, %llu bytes of overtaken records "
             "(operators named *" WEIR_STORE_CHANNELS_SUFFIX ")\n",
             cs.unaligned, (unsigned long long)cs.bytes);
    else
      printf("  aligned: no channel state\n");
    printf("  %-16s %8s %12s %7s %12s %12s %10s  %s\n", "operator", "subtask", "bytes", "chunks",
           "u64 keys", "byte keys", "op state", "positions");
    for (uint32_t i = 0; i < info->nsubtasks; i++) {
      weir_store_subtask_info *st = &info->subtasks[i];
      printf("  %-16s %4u/%-3u %12llu %7llu %12llu %12llu %10llu ", st->op, st->subtask,
             st->parallelism, (unsigned long long)st->bytes, (unsigned long long)st->chunks,
             (unsigned long long)st->u64_entries, (unsigned long long)st->bytes_entries,
             (unsigned long long)st->blob_len);
      for (uint32_t k = 0; k < st->npos && k < 8; k++)
        printf(" %u:%llu", st->pos[k].split, (unsigned long long)st->pos[k].offset);
      if (st->npos > 8) printf(" ... (%u splits)", st->npos);
      if (st->keys_ckpt) printf("  keys of checkpoint %llu", (unsigned long long)st->keys_ckpt);
      if (st->ns) printf("  %llu namespaced entries", (unsigned long long)st->ns);
      if (st->timers) printf("  %llu timers", (unsigned long long)st->timers);
      if (st->bcast) printf("  %llu broadcast entries", (unsigned long long)st->bcast);
      if (st->state_version) printf("  state version %u", st->state_version);
      if (st->has_clock) {
        if (st->clock == INT64_MIN)
          printf("  clock: no watermark yet");
        else
          printf("  clock %lld", (long long)st->clock);
      }
      printf("\n");
      weir_sink_state_info si;
      if (!is_channel_state(st) && sink_state(s, id, st, &si)) print_sink_text(&si);
    }
  }
  weir_store_ckpt_info_free(info);
  weir_store_close(s);
  return CLI_EXIT_OK;
}
