/* jobs/components.c: owns the built-in `components` job: connected components
 * of a generated graph by label propagation, a loop that runs for many
 * rounds (an iteration with a feedback edge and keyed state in the loop).
 *
 * DESIGN. gen (records 0 .. N+M-1) -> input (record i < N: "vertex i";
 * i = N + e: edge e, as one record per direction) -> iteration head ->
 * key_by vertex -> label -> { again: label offers, fed back into the head;
 * out: one result per vertex, leaving the loop -> sink }.
 *
 * The `label` operator is keyed by vertex. Its state per vertex: the
 * current label (u64 map; absent = the vertex's own id) and the adjacency
 * list (byte map, the neighbours' ids). Loop records are 16 bytes, a kind
 * and a value, keyed by the vertex they are for:
 *   VERTEX        makes the vertex exist (so isolated vertices get output);
 *   EDGE w        adds w to the adjacency and offers the current label to w;
 *   OFFER l       if l is lower than the label, the label becomes l and l
 *                 is offered to every neighbour; otherwise it is dropped.
 * Every value a label takes is thus offered to every neighbour (a neighbour
 * added later gets the label current then), so when nothing is in flight
 * the two ends of every edge hold the same label, and labels only ever hold
 * ids of the component: every vertex holds its component's smallest id.
 * The loop drains because labels only go down, and the engine ends it when
 * no record is in flight and the input ended.
 *
 * Output: at end of input (finish, after the loop drained) the operator
 * emits one 8-byte "<vertex> <label>" record per vertex it owns, which the
 * `out` filter lets leave the loop (the 16-byte offers go round again). The
 * labels and adjacency are managed state and offers in flight on the
 * feedback edge are in the back-edge log, so a restore resumes the
 * propagation exactly; results are emitted only after the last regular
 * checkpoint, and the file sink truncates back to its cut, so a restored
 * run writes every vertex exactly once. The summary counts the components
 * (vertices whose label is their own id) and the offers that lowered a
 * label.
 *
 * Edge e joins u = h(seed, 2e) mod N and v = h(seed, 2e + 1) mod N, with h
 * the splitmix64 finaliser of (seed * 0x9e3779b97f4a7c15 + x): uniform
 * random edges (self-loops and repeats included), the same for every
 * parallelism, resumed at the generator's split positions on restore.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* Sizes far beyond memory are typos; the bound keeps N + M in a u64. */
#define CC_MAX ((uint64_t)1 << 40)

typedef struct cc_cfg {
  uint64_t vertices, edges, seed;
  const char *sink;
} cc_cfg;

enum { CC_VERTEX = 1, CC_EDGE = 2, CC_OFFER = 3 };

/* A record inside the loop: keyed by the vertex it is for. */
typedef struct cc_rec {
  uint64_t kind; /* CC_* */
  uint64_t value;
} cc_rec;

/* Per-subtask scratch space for rewriting an adjacency list. */
typedef struct cc_scratch {
  uint64_t *buf;
  size_t cap; /* entries */
} cc_scratch;

static void cc_help(FILE *out) {
  fputs("usage: weir run components [--vertices N] [--edges M] [--seed S]\n"
        "                           [--parallelism P] [--workers W]\n"
        "                           [--sink null|print|file:DIR] [CHECKPOINT OPTIONS]\n"
        "\n"
        "Connected components of a random graph by label propagation in a loop:\n"
        "every vertex starts with its own id as label, offers its label to its\n"
        "neighbours round an iteration with a feedback edge, and takes any lower\n"
        "label offered, until no label changes. The sink writes one line\n"
        "\"<vertex> <label>\" per vertex, the label being the smallest vertex id of\n"
        "its component; the summary gives the number of components.\n"
        "\n"
        "  --vertices N  vertices 0..N-1 (default 100000)\n"
        "  --edges M     random edges (default 100000): edge e joins\n"
        "                h(S, 2e) mod N and h(S, 2e+1) mod N, h = splitmix64\n"
        "  --seed S      the graph's seed (default 1)\n"
        "  --sink SPEC   null (default), print, or file:DIR\n",
        out);
}

static int cc_parse(cli_args *a, cli_engine *eng, void **out) {
  cc_cfg *c = calloc(1, sizeof *c);
  if (c == NULL) return cli_usage("out of memory");
  c->vertices = 100000;
  c->edges = 100000;
  c->seed = 1;
  c->sink = "null";
  while (a->i < a->argc) {
    int r;
    if ((r = cli_take_engine(a, eng)) != 0 ||
        (r = cli_take_u64(a, "--vertices", CC_MAX, &c->vertices)) != 0 ||
        (r = cli_take_u64(a, "--edges", CC_MAX, &c->edges)) != 0 ||
        (r = cli_take_u64(a, "--seed", UINT64_MAX, &c->seed)) != 0 ||
        (r = cli_take_str(a, "--sink", &c->sink)) != 0) {
      if (r < 0) goto fail;
      continue;
    }
    cli_unknown_arg(a, "components");
    goto fail;
  }
  if (c->vertices == 0) {
    cli_usage("--vertices: must be at least 1");
    goto fail;
  }
  if (cli_check_sink(c->sink, eng) < 0) goto fail;
  *out = c;
  return 0;
fail:
  free(c);
  return -1;
}

/* The endpoint hash; tests recompute the graph with the same formula. */
static uint64_t cc_hash(uint64_t seed, uint64_t x) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + x;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int emit_rec(weir_ctx *ctx, uint64_t vertex, uint64_t kind, uint64_t value) {
  cc_rec l = {kind, value};
  return weir_emit(ctx, vertex, &l, sizeof l);
}

/* Generator record i -> VERTEX i, or the two directions of edge i - N. */
static int input_fn(weir_ctx *ctx, void *user, const weir_record *in) {
  const cc_cfg *c = user;
  uint64_t i = in->key;
  if (i < c->vertices) return emit_rec(ctx, i, CC_VERTEX, 0);
  uint64_t e = i - c->vertices;
  uint64_t u = cc_hash(c->seed, 2 * e) % c->vertices;
  uint64_t v = cc_hash(c->seed, 2 * e + 1) % c->vertices;
  if (u == v) return 0; /* a self-loop joins nothing */
  int rc = emit_rec(ctx, u, CC_EDGE, v);
  return rc ? rc : emit_rec(ctx, v, CC_EDGE, u);
}

static int label_open(weir_ctx *ctx) {
  cc_scratch *s = calloc(1, sizeof *s);
  if (s == NULL) return weir_ctx_fail(ctx, WEIR_ENOMEM, "out of memory");
  weir_ctx_set_user(ctx, s);
  return 0;
}

static void label_close(weir_ctx *ctx) {
  cc_scratch *s = weir_ctx_user(ctx);
  if (s) free(s->buf);
  free(s);
  weir_ctx_set_user(ctx, NULL);
}

/* Appends w to v's adjacency list (a byte-map value of u64s). */
static int adj_add(weir_ctx *ctx, uint64_t v, uint64_t w) {
  cc_scratch *s = weir_ctx_user(ctx);
  const void *val = NULL;
  size_t len = 0;
  int rc = weir_state_get_bytes(ctx, &v, sizeof v, &val, &len);
  if (rc < 0) return rc;
  size_t n = len / sizeof(uint64_t);
  if (n + 1 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    while (cap < n + 1) cap *= 2;
    uint64_t *b = realloc(s->buf, cap * sizeof *b);
    if (b == NULL) return weir_ctx_fail(ctx, WEIR_ENOMEM, "out of memory");
    s->buf = b;
    s->cap = cap;
  }
  if (n) memcpy(s->buf, val, n * sizeof(uint64_t));
  s->buf[n] = w;
  return weir_state_put_bytes(ctx, &v, sizeof v, s->buf, (n + 1) * sizeof(uint64_t));
}

static int label_process(weir_ctx *ctx, const weir_record *r) {
  cc_rec l;
  if (r->len != sizeof l) return weir_ctx_fail(ctx, WEIR_EBADREC, "bad loop record");
  memcpy(&l, r->payload, sizeof l);
  uint64_t v = r->key, label = v;
  int rc = weir_state_get_u64(ctx, v, &label);
  if (rc < 0) return rc;
  if (rc == 0) label = v;
  switch (l.kind) {
  case CC_VERTEX:
    return rc == 0 ? weir_state_put_u64(ctx, v, v) : 0;
  case CC_EDGE:
    if (rc == 0 && (rc = weir_state_put_u64(ctx, v, v)) < 0) return rc;
    if ((rc = adj_add(ctx, v, l.value)) < 0) return rc;
    return emit_rec(ctx, l.value, CC_OFFER, label);
  case CC_OFFER: {
    if (l.value >= label) return 0; /* nothing changes: the offer ends here */
    if ((rc = weir_state_put_u64(ctx, v, l.value)) < 0) return rc;
    weir_ctx_count(ctx, "label_updates", 1);
    const void *val = NULL;
    size_t len = 0;
    if ((rc = weir_state_get_bytes(ctx, &v, sizeof v, &val, &len)) < 0) return rc;
    /* Emitting copies the record and makes no state call: val stays valid. */
    const uint8_t *p = val;
    for (size_t k = 0; k + sizeof(uint64_t) <= len; k += sizeof(uint64_t)) {
      uint64_t w;
      memcpy(&w, p + k, sizeof w);
      if ((rc = emit_rec(ctx, w, CC_OFFER, l.value)) < 0) return rc;
    }
    return 0;
  }
  default:
    return weir_ctx_fail(ctx, WEIR_EBADREC, "loop record of unknown kind %llu",
                         (unsigned long long)l.kind);
  }
}

static int emit_result(void *user, uint64_t v, uint64_t label) {
  weir_ctx *ctx = user;
  if (label == v) weir_ctx_count(ctx, "components", 1);
  return weir_emit_u64(ctx, v, label);
}

/* The loop drained: every label is final. */
static int label_finish(weir_ctx *ctx) {
  return weir_state_each_u64(ctx, emit_result, ctx);
}

static const weir_operator_vt label_vt = {.name = "label",
                                          .open = label_open,
                                          .process = label_process,
                                          .finish = label_finish,
                                          .close = label_close};

/* Offers are 16 bytes and go round again; results are 8 and leave. */
static int is_offer(void *user, const weir_record *r) {
  (void)user;
  return r->len == sizeof(cc_rec);
}
static int is_result(void *user, const weir_record *r) {
  (void)user;
  return r->len == sizeof(uint64_t);
}

static int cc_build(weir_job *job, const cli_engine *eng, void *cfg) {
  cc_cfg *c = cfg;
  int p = eng->parallelism;
  uint64_t total = c->vertices + c->edges;
  weir_gen_opts g = {.records = total, .keys = total};
  weir_stream *s = weir_flat_map(weir_gen(job, "gen", &g, p), "input", input_fn, c, p);
  weir_stream *body = NULL;
  weir_iteration *it = weir_iterate(weir_rebalance(s), "loop", p, &body);
  weir_stream *lab = weir_process(weir_key_by(body), "label", &label_vt, NULL, p);
  weir_stream *again = weir_filter(lab, "again", is_offer, NULL, p);
  weir_stream *out = weir_filter(lab, "out", is_result, NULL, p);
  /* Forward: the head re-keys everything it forwards. */
  int rc = weir_iteration_close(it, again);
  if (rc) return rc;
  return weir_sink_to(out, "sink", c->sink, NULL, p);
}

static void cc_report(const weir_job *job, void *cfg, cli_outcome *o, FILE *out) {
  cc_cfg *c = cfg;
  uint64_t in = 0, results = 0, components = 0, updates = 0;
  weir_job_operator_counts(job, "out", &in, &results);
  weir_job_counter(job, "label", "components", &components);
  weir_job_counter(job, "label", "label_updates", &updates);
  o->stopped = weir_job_stopped(job);
  const weir_run_info *ri = weir_job_run_info(job);
  fprintf(out,
          "components: %s %llu vertices, %llu edges in %.2f s: %llu components, %llu label "
          "updates (this run)",
          o->stopped ? "stopped; labelled" : "finished", (unsigned long long)results,
          (unsigned long long)c->edges, o->elapsed_s, (unsigned long long)components,
          (unsigned long long)updates);
  if (ri->restored_from)
    fprintf(out, ", resumed from checkpoint %llu", (unsigned long long)ri->restored_from);
  fputc('\n', out);
}

static void cc_free(void *cfg) {
  free(cfg);
}

const cli_builtin cli_components_job = {
    .name = "components",
    .synopsis = "connected components of a random graph by label propagation (an iteration)",
    .help = cc_help,
    .parse = cc_parse,
    .build = cc_build,
    .report = cc_report,
    .free_cfg = cc_free,
};
