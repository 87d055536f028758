/* jobs/components.c: owns the built-in `components` job: connected components
 * of a generated graph by label propagation, a loop that runs for many
 * rounds (an iteration with a feedback edge and keyed state in the loop).
 *
 * DESIGN. gen (records 0 .. N+M-1) -> input (record i < N: "vertex i";
 * i = N + e: edge e, as one record per direction) -> key_by vertex ->
 * iteration head -> label -> { again: label offers, key_by vertex, fed back
 * into the head; out: one result per vertex, leaving the loop -> sink }.
 *
 * The `label` operator is chained to the head, so records reach the
 * subtask that owns their vertex (both edges into the head hash by vertex)
 * and the loop has no edge but the feedback: no alignment inside the loop
 * body. Its state per vertex, in a table of its own that its snapshot
 * callback writes whole into every checkpoint: the current label (at first
 * the vertex's own id) and the adjacency list (the neighbours' ids). Loop
 * records are 16 bytes, a kind and a value, keyed by the vertex they are
 * for:
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
 * Why not managed keyed state: an operator is keyed only behind a hash
 * edge, and a hash edge from the head into the body makes the body align
 * barriers from several heads inside the loop. That can deadlock: with
 * barrier n forwarded by one head, the body blocks that head's channel
 * while it waits for n from another head, whose barrier waits in its
 * external input behind the loop's admission limit, which the blocked
 * body keeps full. A table snapshotted by the operator avoids the edge;
 * its price is that a checkpoint restores only with the same parallelism
 * (the engine refuses another one, naming `label`).
 *
 * Output: at end of input (finish, after the loop drained) the operator
 * emits one 8-byte "<vertex> <label>" record per vertex it owns, which the
 * `out` filter lets leave the loop (the 16-byte offers go round again). The
 * table is in every checkpoint and offers in flight on the feedback edge
 * are in the back-edge log, so a restore resumes the propagation exactly;
 * the file sink truncates back to its cut, and the table remembers whether
 * finish emitted the results (a checkpoint can come after it), so a
 * restored run writes every vertex exactly once. The summary counts the
 * components (vertices whose label is their own id) and the offers that
 * lowered a label; a run restored after finish emitted counts none.
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

/* One vertex of a label subtask's table. */
typedef struct cc_vertex {
  uint64_t id;
  uint64_t label;
  uint64_t *adj; /* neighbours; NULL when none */
  uint32_t nadj, cap;
} cc_vertex;

/* A label subtask's vertices: open addressing on the id, linear probing,
 * at most half full. `used` marks taken slots. */
typedef struct cc_table {
  cc_vertex *slots;
  uint8_t *used;
  uint64_t cap, n;
  uint64_t emitted; /* finish emitted the results (kept in checkpoints) */
} cc_table;

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
        "its component; the summary gives the number of components. A checkpoint\n"
        "restores only with the same --parallelism (the label table is the loop\n"
        "operator's own state).\n"
        "\n"
        "  --vertices N  vertices 0..N-1 (default 100000)\n"
        "  --edges M     random edges (default 100000): edge e joins\n"
        "                h(S, 2e) mod N and h(S, 2e+1) mod N, h = splitmix64\n"
        "  --seed S      the graph's seed (default 1)\n"
        "  --sink SPEC   null (default), print, file:DIR or http://HOST:PORT/PATH\n",
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

static uint64_t slot_of(const cc_table *t, uint64_t id) {
  return (id * 0x9e3779b97f4a7c15ull) & (t->cap - 1);
}

static void table_free(cc_table *t) {
  for (uint64_t i = 0; i < t->cap; i++)
    if (t->used[i]) free(t->slots[i].adj);
  free(t->slots);
  free(t->used);
  memset(t, 0, sizeof *t);
}

/* Doubles the table (or makes the first one). Returns 0 or WEIR_ENOMEM. */
static int table_grow(cc_table *t) {
  uint64_t cap = t->cap ? t->cap * 2 : 1024;
  cc_table g = {calloc(cap, sizeof *g.slots), calloc(cap, 1), cap, t->n, t->emitted};
  if (!g.slots || !g.used) {
    free(g.slots);
    free(g.used);
    return WEIR_ENOMEM;
  }
  for (uint64_t i = 0; i < t->cap; i++) {
    if (!t->used[i]) continue;
    uint64_t j = slot_of(&g, t->slots[i].id);
    while (g.used[j]) j = (j + 1) & (cap - 1);
    g.used[j] = 1;
    g.slots[j] = t->slots[i];
  }
  free(t->slots);
  free(t->used);
  *t = g;
  return 0;
}

/* The vertex `id`, added with its own id as label if absent; NULL when out
 * of memory. */
static cc_vertex *table_get(cc_table *t, uint64_t id) {
  if (2 * (t->n + 1) > t->cap && table_grow(t) < 0) return NULL;
  uint64_t j = slot_of(t, id);
  while (t->used[j]) {
    if (t->slots[j].id == id) return &t->slots[j];
    j = (j + 1) & (t->cap - 1);
  }
  t->used[j] = 1;
  t->slots[j] = (cc_vertex){.id = id, .label = id};
  t->n++;
  return &t->slots[j];
}

static int adj_add(cc_vertex *x, uint64_t w) {
  if (x->nadj == x->cap) {
    if (x->cap >= UINT32_MAX / 2) return WEIR_ENOMEM;
    uint32_t cap = x->cap ? x->cap * 2 : 4;
    uint64_t *a = realloc(x->adj, cap * sizeof *a);
    if (a == NULL) return WEIR_ENOMEM;
    x->adj = a;
    x->cap = cap;
  }
  x->adj[x->nadj++] = w;
  return 0;
}

static int label_open(weir_ctx *ctx) {
  cc_table *t = calloc(1, sizeof *t);
  if (t == NULL || table_grow(t) < 0) {
    free(t);
    return weir_ctx_fail(ctx, WEIR_ENOMEM, "out of memory");
  }
  weir_ctx_set_user(ctx, t);
  return 0;
}

static void label_close(weir_ctx *ctx) {
  cc_table *t = weir_ctx_user(ctx);
  if (t) table_free(t);
  free(t);
  weir_ctx_set_user(ctx, NULL);
}

static int label_process(weir_ctx *ctx, const weir_record *r) {
  cc_table *t = weir_ctx_user(ctx);
  cc_rec l;
  if (r->len != sizeof l) return weir_ctx_fail(ctx, WEIR_EBADREC, "bad loop record");
  memcpy(&l, r->payload, sizeof l);
  cc_vertex *x = table_get(t, r->key);
  if (x == NULL) return weir_ctx_fail(ctx, WEIR_ENOMEM, "out of memory");
  switch (l.kind) {
  case CC_VERTEX:
    return 0;
  case CC_EDGE:
    if (adj_add(x, l.value) < 0) return weir_ctx_fail(ctx, WEIR_ENOMEM, "out of memory");
    return emit_rec(ctx, l.value, CC_OFFER, x->label);
  case CC_OFFER:
    if (l.value >= x->label) return 0; /* nothing changes: the offer ends here */
    x->label = l.value;
    weir_ctx_count(ctx, "label_updates", 1);
    /* Emitting never touches the table: x stays valid. */
    for (uint32_t k = 0; k < x->nadj; k++) {
      int rc = emit_rec(ctx, x->adj[k], CC_OFFER, l.value);
      if (rc < 0) return rc;
    }
    return 0;
  default:
    return weir_ctx_fail(ctx, WEIR_EBADREC, "loop record of unknown kind %llu",
                         (unsigned long long)l.kind);
  }
}

/* The loop drained: every label is final. Once only: a checkpoint taken
 * after this (the job's other tasks still finishing) has the results before
 * its cut already, and a restore of it must not emit them again. */
static int label_finish(weir_ctx *ctx) {
  cc_table *t = weir_ctx_user(ctx);
  if (t->emitted) return 0;
  t->emitted = 1;
  for (uint64_t i = 0; i < t->cap; i++) {
    if (!t->used[i]) continue;
    const cc_vertex *x = &t->slots[i];
    if (x->label == x->id) weir_ctx_count(ctx, "components", 1);
    int rc = weir_emit_u64(ctx, x->id, x->label);
    if (rc < 0) return rc;
  }
  return 0;
}

/* The whole table: its size and the emitted flag, then per vertex id,
 * label, degree and the neighbours, as u64s in host byte order (a
 * checkpoint is read back on the machine that wrote it). */
static int label_snapshot(weir_ctx *ctx, uint64_t id, weir_snapshot_writer *w) {
  (void)id;
  cc_table *t = weir_ctx_user(ctx);
  uint64_t top[2] = {t->n, t->emitted};
  int rc = weir_snapshot_write(w, top, sizeof top);
  for (uint64_t i = 0; i < t->cap && rc == 0; i++) {
    if (!t->used[i]) continue;
    const cc_vertex *x = &t->slots[i];
    uint64_t head[3] = {x->id, x->label, x->nadj};
    rc = weir_snapshot_write(w, head, sizeof head);
    if (rc == 0 && x->nadj) rc = weir_snapshot_write(w, x->adj, x->nadj * sizeof *x->adj);
  }
  return rc;
}

static int label_restore(weir_ctx *ctx, weir_snapshot_reader *r) {
  cc_table *t = weir_ctx_user(ctx);
  size_t len = 0;
  const uint8_t *p = weir_snapshot_data(r, &len);
  uint64_t top[2], n, off = sizeof top;
  if (len < sizeof top) goto corrupt;
  memcpy(top, p, sizeof top);
  n = top[0];
  if (top[1] > 1) goto corrupt;
  t->emitted = top[1];
  for (uint64_t k = 0; k < n; k++) {
    uint64_t head[3];
    if (len - off < sizeof head) goto corrupt;
    memcpy(head, p + off, sizeof head);
    off += sizeof head;
    if (head[2] > (len - off) / sizeof(uint64_t)) goto corrupt;
    cc_vertex *x = table_get(t, head[0]);
    if (x == NULL) return weir_ctx_fail(ctx, WEIR_ENOMEM, "out of memory");
    if (x->nadj || x->label != x->id) goto corrupt; /* the same vertex twice */
    x->label = head[1];
    for (uint64_t a = 0; a < head[2]; a++, off += sizeof(uint64_t)) {
      uint64_t v;
      memcpy(&v, p + off, sizeof v);
      if (adj_add(x, v) < 0) return weir_ctx_fail(ctx, WEIR_ENOMEM, "out of memory");
    }
  }
  if (off != len) goto corrupt;
  return 0;
corrupt:
  return weir_ctx_fail(ctx, WEIR_ECORRUPT, "checkpointed label table of %zu bytes is malformed",
                       len);
}

static const weir_operator_vt label_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "label",
                                          .open = label_open,
                                          .process = label_process,
                                          .finish = label_finish,
                                          .close = label_close,
                                          .snapshot = label_snapshot,
                                          .restore = label_restore};

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
  weir_iteration *it = weir_iterate(weir_key_by(s), "loop", p, &body);
  weir_stream *lab = weir_process(body, "label", &label_vt, NULL, p);
  weir_stream *again = weir_filter(lab, "again", is_offer, NULL, p);
  weir_stream *out = weir_filter(lab, "out", is_result, NULL, p);
  int rc = weir_iteration_close(it, weir_key_by(again));
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
