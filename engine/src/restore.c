/* restore.c: owns loading a checkpoint into a job's operator contexts
 * before the run starts: checking that it belongs to the job's graph,
 * streaming each subtask's state on parallel threads (with the tables
 * prefaulted while the store's probe runs), redistributing the state of
 * operators whose parallelism or key groups changed (rescale.c), and the
 * channel state of unaligned checkpoints. The contexts install what is
 * loaded when their tasks open (checkpoint.c, weir__ctx_restore).
 */
#include "restore.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "rescale.h"
#include "base/alloc.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "snapshot/store.h"
#include "graph.h"
#include "task.h"

static void atomic_max(_Atomic uint64_t *a, uint64_t v) {
  uint64_t was = atomic_load(a);
  while (v > was && !atomic_compare_exchange_weak(a, &was, v)) {
  }
}

void weir__restore_note(weir__restore_stats *st, uint64_t install_ns, uint64_t stream_ns) {
  atomic_max(&st->install_ns, install_ns);
  atomic_max(&st->build_ns, install_ns + stream_ns);
}

/* Subtask states to load, shared by the threads that load them. */
typedef struct load_item {
  weir__node *node;
  int subtask;
  weir_subtask_snapshot *snap;
  int rc;
  /* Keyed operators: u64 state goes straight into the subtask's table. */
  weir__u64_build build;
  uint64_t build_ns; /* time spent filling the table */
  uint64_t entries;  /* u64 entries the metadata records */
  /* The table prefaulted for them (owned until the build takes it). */
  uint64_t *table, table_bytes;
} load_item;

typedef struct loader {
  weir_store *store;
  uint64_t id;
  load_item *items;
  size_t n;
  atomic_size_t next;
} loader;

static void sink_begin(void *user, uint64_t entries) {
  load_item *it = user;
  uint64_t t0 = uv_hrtime();
  weir__u64_build_begin(&it->build, &it->node->ctx[it->subtask]->state.u, entries, it->table,
                        it->table_bytes);
  it->table = NULL; /* the build's now */
  it->build_ns += uv_hrtime() - t0;
}

static void sink_chunk(void *user, const uint64_t *keys, const uint64_t *values, size_t n) {
  load_item *it = user;
  uint64_t t0 = uv_hrtime();
  weir__u64_build_add(&it->build, keys, values, n);
  it->build_ns += uv_hrtime() - t0;
}

/* Loads one item: a keyed operator's u64 state streams into its table as
 * the chunks are read and checked (no intermediate arrays; reading and
 * building alternate per chunk on this thread), the rest (byte-string
 * entries, positions, blobs: small) into the snapshot installed at open. */
static void load_one(loader *l, load_item *it) {
  weir_ctx *c = it->node->ctx[it->subtask];
  int stream = it->node->keyed && !c->state.u.slots && !c->state.u.cow;
  weir_store_u64_sink sink = {sink_begin, sink_chunk, it};
  it->snap = weir_calloc(1, sizeof *it->snap);
  it->rc = weir_store_load_stream(l->store, l->id, it->node->name, (uint32_t)it->subtask,
                                  stream ? &sink : NULL, it->snap);
  if (stream && it->build.m) {
    uint64_t t0 = uv_hrtime();
    if (it->rc == 0)
      weir__u64_build_end(&it->build);
    else { /* entries of a checkpoint that failed a later check */
      weir__state_close(&c->state);
      weir__state_init(&c->state);
    }
    it->build_ns += uv_hrtime() - t0;
  }
  c->restore_stream_ns = it->build_ns;
  if (it->rc) {
    weir_free(it->snap);
    it->snap = NULL;
  }
}

/* Prefaulting the tables of the items while the probe child runs: one
 * thread per worker (the caller only waits for the child meanwhile). The
 * probe forks while they run: each is started (weir_thread_start) and
 * ends (held at `gate` until prefault_join) away from that fork. */
typedef struct prefaulter {
  load_item *items;
  size_t n;
  atomic_size_t next;
  pthread_t th[64];
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int gate; /* 1 once the probe's fork is over: the threads may end */
} prefaulter;

static void *prefault_items(void *p) {
  prefaulter *pf = p;
  for (size_t i; (i = atomic_fetch_add(&pf->next, 1)) < pf->n;) {
    load_item *it = &pf->items[i];
    if (!it->entries) continue;
    weir_fork_hold(); /* the probe forks meanwhile: see weir/alloc.h */
    it->table = weir__u64_table_prefault(it->entries, &it->table_bytes);
    weir_fork_release();
  }
  pthread_mutex_lock(&pf->mu);
  while (!pf->gate) pthread_cond_wait(&pf->cv, &pf->mu);
  pthread_mutex_unlock(&pf->mu);
  return NULL;
}

static void prefault_start(prefaulter *pf, load_item *items, size_t n, int threads) {
  memset(pf, 0, sizeof *pf);
  pf->items = items;
  pf->n = n;
  atomic_init(&pf->next, 0);
  pthread_mutex_init(&pf->mu, NULL);
  pthread_cond_init(&pf->cv, NULL);
  for (int t = 0; t < threads && t < 64 && (size_t)t < n; t++) {
    if (weir_thread_start(&pf->th[pf->started], prefault_items, pf) != 0) break;
    pf->started++;
  }
}

static void prefault_join(prefaulter *pf) {
  pthread_mutex_lock(&pf->mu);
  pf->gate = 1;
  pthread_cond_broadcast(&pf->cv);
  pthread_mutex_unlock(&pf->mu);
  for (int t = 0; t < pf->started; t++) pthread_join(pf->th[t], NULL);
  pthread_cond_destroy(&pf->cv);
  pthread_mutex_destroy(&pf->mu);
}

static void *load_items(void *p) {
  loader *l = p;
  for (size_t i; (i = atomic_fetch_add(&l->next, 1)) < l->n;) load_one(l, &l->items[i]);
  return NULL;
}

/* Loads the items on up to `threads` threads (the caller's included), each
 * with its own read transaction: reading, checking and building a large
 * state is the bulk of a restore, and each subtask's state is independent.
 * Hands each state to its subtask; the first error (but WEIR_ENOENT:
 * nothing stored) fails the job, and then every table built here is
 * dropped again. */
static int load_parallel(weir_job *job, uint64_t id, load_item *items, size_t n, int threads) {
  loader l = {job->store, id, items, n, 0};
  pthread_t th[64];
  int started = 0;
  for (int t = 1; t < threads && t < 64 && (size_t)t < n; t++) {
    if (pthread_create(&th[started], NULL, load_items, &l) != 0) break;
    started++;
  }
  load_items(&l);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    load_item *it = &items[i];
    if (it->snap) {
      it->node->ctx[it->subtask]->restore = it->snap;
    } else if (it->rc != WEIR_ENOENT && !rc) {
      rc = it->rc;
      weir__job_store_failed(job, rc, "cannot restore");
    }
  }
  if (rc)
    for (size_t i = 0; i < n; i++) {
      weir_ctx *c = items[i].node->ctx[items[i].subtask];
      weir__state_close(&c->state);
      weir__state_init(&c->state);
    }
  return rc;
}

/* Loads every stored subtask state of node n in checkpoint id and
 * redistributes them among n's current subtasks (rescale.c). */
static int load_rescaled(weir_job *job, uint64_t id, weir__node *n, uint32_t p0,
                         uint32_t key_groups) {
  weir_subtask_snapshot **old = weir_calloc(p0, sizeof *old);
  weir_subtask_snapshot **out = weir_calloc((size_t)n->parallelism, sizeof *out);
  int rc = 0;
  for (uint32_t k = 0; k < p0 && !rc; k++) {
    old[k] = weir_calloc(1, sizeof *old[k]);
    rc = weir_store_load(job->store, id, n->name, k, old[k]);
    if (rc == WEIR_ENOENT) {
      weir_free(old[k]);
      old[k] = NULL;
      rc = 0;
    } else if (rc) {
      weir__job_store_failed(job, rc, "cannot restore");
    }
  }
  if (!rc) {
    weir__rescale_kind kind = {.keyed = n->keyed,
                               .rescalable_source = n->svt && n->svt->rescalable,
                               .loop_head = n->head_of != NULL,
                               .rescalable_blob = n->ovt && n->ovt->rescalable,
                               .broadcast = n->bcast_in2};
    char msg[400];
    rc = weir__rescale(n->name, &kind, key_groups, old, p0, (uint32_t)n->parallelism, out, msg,
                       sizeof msg);
    if (rc)
      weir__job_failed(job, rc, "cannot restore checkpoint %llu with parallelism %d: %s",
                       (unsigned long long)id, n->parallelism, msg);
  }
  for (uint32_t k = 0; k < p0; k++) {
    if (!old[k]) continue;
    weir_subtask_snapshot_free(old[k]);
    weir_free(old[k]);
  }
  for (int s = 0; s < n->parallelism; s++) n->ctx[s]->restore = rc ? NULL : out[s];
  if (rc)
    for (int s = 0; s < n->parallelism; s++)
      if (out[s]) {
        weir_subtask_snapshot_free(out[s]);
        weir_free(out[s]);
      }
  weir_free(old);
  weir_free(out);
  return rc;
}

/* What a restore loads, decided from the checkpoint's metadata. */
typedef struct restore_plan {
  uint64_t id;
  int notified_only;
  uint32_t kg, old_kg; /* key groups now, and when the checkpoint was taken */
  uint32_t *p0;        /* per node: its parallelism in the checkpoint (0: nothing stored) */
  uint32_t *pc;        /* per node: its channel state's parallelism (0: none) */
  int channels;        /* the checkpoint is unaligned (holds channel state) */
  load_item *items;    /* loaded with their own parallelism (load_parallel) */
  size_t nitems;
  weir__node **resc; /* redistributed (load_rescaled) */
  uint32_t nresc;
} restore_plan;

/* The node of `name` (or of the channel state stored under it), or
 * job->nnodes. */
static uint32_t node_of(const weir_job *job, const char *name, int is_chan) {
  size_t len = strlen(name) - (is_chan ? strlen(WEIR__CHANNELS_SUFFIX) : 0);
  uint32_t k = 0;
  while (k < job->nnodes &&
         (strlen(job->nodes[k]->name) != len || strncmp(job->nodes[k]->name, name, len) != 0))
    k++;
  return k;
}

/* Where the checkpoint's entries go in this job's graph: fills p0 and pc
 * (entries of operators the job lacks are left out: see below). */
static int match_graph(weir_job *job, restore_plan *pl, const weir_store_ckpt_info *info) {
  for (uint32_t i = 0; i < info->nsubtasks; i++) {
    const weir_store_subtask_info *st = &info->subtasks[i];
    size_t ol = strlen(st->op), sl = strlen(WEIR__CHANNELS_SUFFIX);
    int is_chan = ol > sl && strcmp(st->op + ol - sl, WEIR__CHANNELS_SUFFIX) == 0;
    uint32_t k = node_of(job, st->op, is_chan);
    if (k < job->nnodes && is_chan) {
      if (job->nodes[k]->chain_pos != 0) {
        weir__job_failed(job, WEIR_EPLAN,
                         "checkpoint %llu holds channel state of operator '%.*s', which does not "
                         "start a task in this job: is it the same job?",
                         (unsigned long long)pl->id, (int)(ol - sl), st->op);
        return WEIR_EPLAN;
      }
      pl->pc[k] = st->parallelism;
      pl->channels = 1;
      continue;
    }
    /* An operator this job lacks: identity.c refused the run already if
     * its state mattered (weir__identity_check_restore), so here it is
     * stateless, or its state is dropped on purpose. */
    if (k == job->nnodes) continue;
    pl->p0[k] = st->parallelism;
  }
  return 0;
}

/* What to load, and how: operators restored with their own parallelism
 * (and key groups) stream on parallel threads (load_parallel); the others
 * are redistributed (load_rescaled). */
static void plan_loads(weir_job *job, restore_plan *pl, const weir_store_ckpt_info *info) {
  for (uint32_t k = 0; k < job->nnodes; k++) {
    weir__node *n = job->nodes[k];
    if (!pl->p0[k]) continue;
    if (pl->notified_only && !(n->ovt && n->ovt->checkpoint_complete)) continue;
    if (pl->p0[k] != (uint32_t)n->parallelism || (n->keyed && pl->old_kg != pl->kg)) {
      pl->resc[pl->nresc++] = n;
      continue;
    }
    pl->items = weir_realloc(pl->items, (pl->nitems + (size_t)n->parallelism) * sizeof *pl->items);
    for (int s = 0; s < n->parallelism; s++) {
      load_item *it = &pl->items[pl->nitems++];
      *it = (load_item){.node = n, .subtask = s};
      for (uint32_t i = 0; i < info->nsubtasks && n->keyed; i++)
        if (info->subtasks[i].subtask == (uint32_t)s && !strcmp(info->subtasks[i].op, n->name))
          it->entries = info->subtasks[i].u64_entries;
    }
  }
}

/* Channel state holds records per output channel and in flight to each
 * subtask: it restores only into the same tasks and channels (the same
 * parallelism everywhere, the same key groups). Loads it into the chain
 * heads' contexts. */
static int load_channels(weir_job *job, const restore_plan *pl) {
  for (uint32_t k = 0; k < job->nnodes; k++) {
    weir__node *n = job->nodes[k];
    uint32_t had = pl->pc[k] ? pl->pc[k] : pl->p0[k];
    if ((had && had != (uint32_t)n->parallelism) || pl->old_kg != pl->kg) {
      weir__job_failed(job, WEIR_EPLAN,
                       "checkpoint %llu is unaligned (it holds channel state): it restores only "
                       "with the parallelism and key groups it was taken with (operator '%s' had "
                       "%u subtasks, now %d; key groups %u, now %u); restore an aligned "
                       "checkpoint to rescale",
                       (unsigned long long)pl->id, n->name, had, n->parallelism, pl->old_kg,
                       pl->kg);
      return WEIR_EPLAN;
    }
  }
  for (uint32_t k = 0; k < job->nnodes; k++) {
    weir__node *n = job->nodes[k];
    if (!pl->pc[k]) continue;
    char op[512];
    snprintf(op, sizeof op, "%s" WEIR__CHANNELS_SUFFIX, n->name);
    for (int s = 0; s < n->parallelism; s++) {
      weir_subtask_snapshot *snap = weir_calloc(1, sizeof *snap);
      int rc = weir_store_load(job->store, pl->id, op, (uint32_t)s, snap);
      if (rc == WEIR_ENOENT) {
        weir_free(snap);
        continue;
      }
      if (rc) {
        weir_free(snap);
        return weir__job_store_failed(job, rc, "cannot restore");
      }
      n->ctx[s]->restore_chan = snap;
    }
  }
  return 0;
}

/* Loads checkpoint id into the contexts (installed when tasks open),
 * redistributing the state of operators whose parallelism changed, or of
 * every keyed operator if the number of key groups did. notified_only: only
 * the operators that hear of completed checkpoints (a finished job's
 * restore, which runs nothing but those notifications). */
int weir__restore_load(weir_job *job, uint64_t id, int notified_only) {
  uint64_t t0 = uv_hrtime();
  /* The metadata first: weir_store_open's child already walked every
   * metadata value (probe_child in store.c), so reading it cannot fault. */
  weir_store_ckpt_info *info = NULL;
  int rc = weir_store_info(job->store, id, &info);
  if (rc) return weir__job_store_failed(job, rc, "cannot restore");
  restore_plan pl = {.id = id, .notified_only = notified_only};
  pl.kg = (uint32_t)job->opts.max_parallelism;
  /* Checkpoints that did not record it were taken with the default. */
  pl.old_kg = info->key_groups ? info->key_groups : WEIR_DEFAULT_MAX_PARALLELISM;
  job->info.restored_bytes = info->ckpt.bytes;
  pl.p0 = weir_calloc(job->nnodes, sizeof *pl.p0);
  pl.pc = weir_calloc(job->nnodes, sizeof *pl.pc);
  pl.resc = weir_calloc(job->nnodes, sizeof *pl.resc);
  rc = match_graph(job, &pl, info);
  if (!rc) plan_loads(job, &pl, info);
  weir_store_ckpt_info_free(info);
  /* Only the pages, in a child: the values are checked as they are loaded
   * (in parallel, below), and a damaged one fails the restore there. While
   * the child walks, this process has nothing to read: it has the kernel
   * zero the tables the load will fill (prefault). */
  if (!rc) {
    prefaulter pf;
    prefault_start(&pf, pl.items, pl.nitems, (int)job->plan.nworkers);
    rc = weir_store_probe(job->store, id);
    job->info.restore_probe_ms = (double)(uv_hrtime() - t0) / 1e6;
    prefault_join(&pf);
    if (rc) weir__job_store_failed(job, rc, "cannot restore");
  }
  if (!rc && pl.channels && !notified_only) rc = load_channels(job, &pl);
  for (uint32_t r = 0; r < pl.nresc && !rc; r++) {
    weir__node *n = pl.resc[r];
    WEIR_LOG_I("checkpoint %llu: redistributing the state of '%s' from %u to %d subtasks",
               (unsigned long long)id, n->name, pl.p0[n->index], n->parallelism);
    rc = load_rescaled(job, id, n, pl.p0[n->index], pl.kg);
  }
  if (!rc) rc = load_parallel(job, id, pl.items, pl.nitems, (int)job->plan.nworkers);
  for (size_t i = 0; i < pl.nitems; i++) /* tables prefaulted for a load that did not run */
    weir__u64_table_free(pl.items[i].table, pl.items[i].table_bytes);
  weir_free(pl.items);
  weir_free(pl.resc);
  weir_free(pl.pc);
  weir_free(pl.p0);
  if (rc) return rc;
  job->info.restore_read_ms = (double)(uv_hrtime() - t0) / 1e6;
  return weir_failpoint("ckpt.during_restore");
}
