/* jobs/wordcount.c: owns the built-in `wordcount` job: its flags, its graph,
 * its word-splitting and exact per-word counting operators, its output
 * format and its report line.
 *
 * DESIGN. file -> split (flat_map) -> key_by -> count_words -> sink.
 * The source emits one record per line; `split` emits one record per word (a
 * maximal run of bytes that are not ASCII whitespace, kept exactly as it is:
 * no case folding, no punctuation stripping) with key = weir_hash_bytes(word)
 * and payload = the word, so equal words meet in one subtask. `count_words`
 * keeps the count of every exact word in the byte-string state map, so two
 * words whose hashes collide still have separate counts, and emits for every
 * occurrence a record whose payload is the running count (8 bytes, little
 * endian) followed by the word. The sink writes "<word> <count>": one line per
 * word occurrence, so a word's final count is the largest written for it.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weir/nats.h"

typedef struct wordcount_cfg {
  const char *input;
  const char *source; /* a nats:// URL instead of input */
  const char *sink;
  int skip_bad;
  const char *dead_letter;
} wordcount_cfg;

static void wordcount_help(FILE *out) {
  fputs("usage: weir run wordcount --input FILE|--source nats://HOST:PORT/SUBJECT\n"
        "                          [--parallelism P] [--workers W]\n"
        "                          [--sink SPEC] [--on-bad-record fail|skip]\n"
        "                          [--dead-letter FILE] [--summary-json FILE] [--quiet]\n"
        "\n"
        "Counts words in a text file. A word is a maximal run of bytes that are not\n"
        "ASCII whitespace, counted exactly as written (\"The\" and \"the\" are two\n"
        "words). The sink gets one line \"<word> <count>\" per word occurrence, with\n"
        "the word's running count, so a word's final count is the largest count\n"
        "written for it, and there are as many lines as words in the input.\n"
        "\n"
        "  --input FILE           the text file to read\n"
        "  --source URL           or read NATS JetStream: each message of SUBJECT in\n"
        "                         stream S (nats://HOST:PORT/SUBJECT?stream=S, default\n"
        "                         WEIR) is text lines, up to the last message of SUBJECT\n"
        "                         when the job first started (splits=N: see 'weir help\n"
        "                         run counter')\n"
        "  --sink SPEC            print (default), null, file:DIR, http://HOST:PORT/PATH\n"
        "                         or nats://HOST:PORT/SUBJECT\n"
        "  --on-bad-record MODE   fail (default): stop at a line that is too long or\n"
        "                         contains a NUL byte; skip: count it and go on\n"
        "  --dead-letter FILE     with skip: write the bad lines and their offsets here\n",
        out);
}

static int wordcount_parse(cli_args *a, cli_engine *eng, void **out) {
  wordcount_cfg *c = calloc(1, sizeof *c);
  if (c == NULL) return cli_usage("out of memory");
  c->sink = "print";
  const char *mode = NULL;
  while (a->i < a->argc) {
    int r;
    if ((r = cli_take_engine(a, eng)) != 0 || (r = cli_take_str(a, "--input", &c->input)) != 0 ||
        (r = cli_take_str(a, "--source", &c->source)) != 0 ||
        (r = cli_take_str(a, "--sink", &c->sink)) != 0 ||
        (r = cli_take_str(a, "--on-bad-record", &mode)) != 0 ||
        (r = cli_take_str(a, "--dead-letter", &c->dead_letter)) != 0) {
      if (r < 0) goto fail;
      continue;
    }
    const char *s = a->argv[a->i];
    if (s[0] == '-') {
      cli_usage("unknown flag '%s' for job 'wordcount'", s);
    } else {
      cli_usage("unexpected argument '%s' for job 'wordcount' (the input is given with --input)",
                s);
    }
    goto fail;
  }
  if ((c->input == NULL) == (c->source == NULL)) {
    cli_usage("job 'wordcount' needs --input FILE or --source nats://HOST:PORT/SUBJECT (one)");
    goto fail;
  }
  if (c->source) {
    char err[512];
    if (weir_nats_source_check(c->source, err, sizeof err) < 0) {
      cli_usage("--source: %s", err);
      goto fail;
    }
  }
  if (mode != NULL) {
    if (strcmp(mode, "skip") == 0) {
      c->skip_bad = 1;
    } else if (strcmp(mode, "fail") != 0) {
      cli_usage("--on-bad-record: '%s' is neither 'fail' nor 'skip'", mode);
      goto fail;
    }
  }
  if (c->dead_letter != NULL && !c->skip_bad) {
    cli_usage("--dead-letter needs --on-bad-record skip");
    goto fail;
  }
  if (cli_check_sink(c->sink, eng) < 0) goto fail;
  *out = c;
  return 0;
fail:
  free(c);
  return -1;
}

/* ------------------------------------------------------------------------ */
/* split: one record per word                                               */

static int is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static int split_words(weir_ctx *ctx, void *user, const weir_record *in) {
  const uint8_t *p = in->payload;
  uint32_t n = in->len, i = 0;
  while (i < n) {
    while (i < n && is_space(p[i])) i++;
    uint32_t start = i;
    while (i < n && !is_space(p[i])) i++;
    if (i > start) {
      int rc = weir_emit(ctx, weir_hash_bytes(p + start, i - start), p + start, i - start);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* count_words: exact per-word counts in keyed byte-string state             */

/* Per-subtask output buffer: the 8-byte count, then the word. Owned by the
 * subtask's thread (weir_ctx_user). */
typedef struct count_buf {
  uint8_t *p;
  size_t cap;
} count_buf;

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static int count_open(weir_ctx *ctx) {
  count_buf *b = calloc(1, sizeof *b);
  if (b == NULL) return WEIR_ENOMEM;
  weir_ctx_set_user(ctx, b);
  return 0;
}

static int count_process(weir_ctx *ctx, const weir_record *r) {
  count_buf *b = weir_ctx_user(ctx);
  const void *val = NULL;
  size_t vlen = 0;
  int rc = weir_state_get_bytes(ctx, r->payload, r->len, &val, &vlen);
  if (rc < 0) return rc;
  uint64_t n = (rc == 1 && vlen == 8) ? get_le64(val) : 0;
  uint8_t cnt[8];
  put_le64(cnt, ++n);
  rc = weir_state_put_bytes(ctx, r->payload, r->len, cnt, sizeof cnt);
  if (rc < 0) return rc;
  size_t need = 8 + (size_t)r->len;
  if (need > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL) return WEIR_ENOMEM;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p, cnt, 8);
  if (r->len) memcpy(b->p + 8, r->payload, r->len);
  return weir_emit(ctx, r->key, b->p, need);
}

static void count_close(weir_ctx *ctx) {
  count_buf *b = weir_ctx_user(ctx);
  if (b != NULL) free(b->p);
  free(b);
  weir_ctx_set_user(ctx, NULL);
}

static const weir_operator_vt count_words_vt = {
    .size = sizeof(weir_operator_vt),
    .name = "count_words",
    .open = count_open,
    .process = count_process,
    .close = count_close,
};

/* "<word> <count>" from a count_words record. */
static size_t format_word_count(const weir_record *r, char *buf, size_t cap) {
  if (r->len < 8) return weir_format_default(r, buf, cap);
  uint64_t n = weir_payload_u64(r);
  const char *word = (const char *)r->payload + 8;
  size_t wlen = r->len - 8;
  char digits[24];
  int d = snprintf(digits, sizeof digits, "%llu", (unsigned long long)n);
  size_t need = wlen + 1 + (size_t)d;
  if (need < cap) {
    memcpy(buf, word, wlen);
    buf[wlen] = ' ';
    memcpy(buf + wlen + 1, digits, (size_t)d + 1);
  }
  return need;
}

static int wordcount_build(weir_job *job, const cli_engine *eng, void *cfg) {
  wordcount_cfg *c = cfg;
  int p = eng->parallelism;
  weir_file_source_opts fo = {.skip_bad = c->skip_bad, .dead_letter_path = c->dead_letter};
  weir_stream *s = c->source ? weir_rebalance(weir_nats_source_par(job, "nats", c->source, p))
                             : weir_file_source(job, "file", c->input, &fo, p);
  s = weir_flat_map(s, "split", split_words, NULL, p);
  weir_op_opts keyed = {.size = sizeof keyed, .flags = WEIR_OP_KEYED_STATE};
  s = weir_process_opts(weir_key_by(s), "count_words", &count_words_vt, NULL, p, &keyed);
  return weir_sink_to(s, "sink", c->sink, format_word_count, p);
}

static void wordcount_report(const weir_job *job, void *cfg, cli_outcome *o, FILE *out) {
  uint64_t lines_in = 0, lines = 0, words_in = 0, words = 0;
  char l[32], w[32], rate[32];
  const char *src = ((wordcount_cfg *)cfg)->source ? "nats" : "file";
  if (weir_job_operator_counts(job, src, &lines_in, &lines) != 0 ||
      weir_job_operator_counts(job, "split", &words_in, &words) != 0) {
    fprintf(out, "wordcount: %s in %.2f s\n", o->stopped ? "stopped" : "done", o->elapsed_s);
    return;
  }
  double secs = o->elapsed_s > 0 ? o->elapsed_s : 1e-9;
  fprintf(out, "wordcount: %s%s lines, %s words in %.2f s (%s words/s)\n",
          o->stopped ? "stopped after " : "", cli_human((double)lines, l, sizeof l),
          cli_human((double)words, w, sizeof w), o->elapsed_s,
          cli_human((double)words / secs, rate, sizeof rate));
}

static void wordcount_free(void *cfg) {
  free(cfg);
}

/* The input is checked here, before the job starts, so that an unreadable
 * file is reported with its path whatever the file source says. */
static int wordcount_check_input(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -errno;
  struct stat st;
  int rc = fstat(fd, &st) != 0 ? -errno : S_ISDIR(st.st_mode) ? -EISDIR : 0;
  close(fd);
  return rc;
}

static int wordcount_build_checked(weir_job *job, const cli_engine *eng, void *cfg) {
  wordcount_cfg *c = cfg;
  if (c->source) return wordcount_build(job, eng, cfg);
  int rc = wordcount_check_input(c->input);
  if (rc < 0) {
    return weir_job_fail(job, rc, "cannot read input '%s': %s", c->input, weir_strerror(rc));
  }
  return wordcount_build(job, eng, cfg);
}

const cli_builtin cli_wordcount_job = {
    .name = "wordcount",
    .synopsis = "count words of a text file (file -> split -> key_by -> count_words -> sink)",
    .help = wordcount_help,
    .parse = wordcount_parse,
    .build = wordcount_build_checked,
    .report = wordcount_report,
    .free_cfg = wordcount_free,
};
