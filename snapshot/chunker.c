/* chunker.c: owns the cutting of one subtask write into chunk values, and
 * the shared-keys memo: which earlier write holds an operator subtask's u64
 * keys, so that a later write of the same keys stores only its values.
 */
#include <string.h>

#include "writer_impl.h"
#include "base/alloc.h"
#include "base/assert.h"

typedef unsigned long long ull;

/* ---- shared keys ------------------------------------------------------------
 *
 * A keyed operator's keys change far less often than its values (a counter's
 * not at all once every key was seen), and 8-byte keys are most of what its
 * u64 chunks hold. So the writer remembers, per operator subtask, the last
 * write that stored its keys (the holder): the key set's version (the
 * engine's promise: the same version, the same keys; store.h) and how that
 * write cut them into chunks. A later write of the same version stores only
 * its values, one U64Values chunk per chunk of the holder's with the same
 * entries, and its metadata names the holder's record (format 3). Debug
 * builds keep the holder's keys too and check every such write against
 * them (comparing 8 MB of keys per million cost more in a release build
 * than writing them). Only a committed holder is shared: an uncommitted
 * one may still be discarded. A write of another version stores its keys
 * whole and becomes the holder.
 *
 * The holder's chunks outlive its metadata while anything names them: a
 * retained checkpoint, a pending write, or this memory (a later write may
 * still share them); weir__collect_orphans (retention.c) deletes the rest. A restart forgets
 * the memo: the first checkpoint after it stores every key again, and the
 * old holder goes once no retained checkpoint names it. */

static weir__keys_memo *memo_find(weir_store *s, const char *op, uint32_t subtask) {
  for (size_t i = 0; i < s->nmemo; i++)
    if (s->memo[i]->subtask == subtask && strcmp(s->memo[i]->op, op) == 0) return s->memo[i];
  return NULL;
}

static void memo_clear(weir__keys_memo *k) {
  weir_free(k->op);
  if (k->keys) k->release(k->keys);
  weir_free(k->counts);
  memset(k, 0, sizeof *k);
}

void weir__memo_drop(weir_store *s, const char *op, uint32_t subtask) {
  for (size_t i = 0; i < s->nmemo; i++) {
    weir__keys_memo *k = s->memo[i];
    if (k->subtask != subtask || strcmp(k->op, op) != 0) continue;
    memo_clear(k);
    weir_free(k);
    s->memo[i] = s->memo[--s->nmemo];
    return;
  }
}

void weir__memo_free_all(weir_store *s) {
  while (s->nmemo) weir__memo_drop(s, s->memo[0]->op, s->memo[0]->subtask);
  weir_free(s->memo);
  s->memo = NULL;
}

/* The holder whose keys sn may share: committed, the same keys, chunks
 * whose values always fit a values-only chunk; else NULL. */
const weir__keys_memo *weir__keys_share(weir_store *s, const weir_subtask_snapshot *sn) {
  weir__keys_memo *k = memo_find(s, sn->op, sn->subtask);
  if (!k || !k->committed || sn->n_u64 == 0 || sn->u64_keys_version == 0 ||
      k->version != sn->u64_keys_version || k->n != sn->n_u64 || k->parallelism != sn->parallelism)
    return NULL;
  WEIR_DEBUG_ASSERT(memcmp(k->keys, sn->u64_keys, sn->n_u64 * sizeof *k->keys) == 0);
  /* The planner cut the holder's chunks so that any values fit
   * (WEIR__U64_SHAREABLE): no pass over the values is needed here. */
#ifdef WEIR_DEBUG
  for (uint32_t i = 0; i < k->nchunks; i++) WEIR_DEBUG_ASSERT(k->counts[i] <= WEIR__U64_SHAREABLE);
#endif
  return k;
}

/* sn's keys, stored whole by its write for checkpoint id (record `record`,
 * in nchunks chunks of counts[i] entries), are its holder's now: the memo
 * takes the keys from sn and owns counts. */
void weir__memo_keep(weir_store *s, uint64_t id, uint32_t record, weir_subtask_snapshot *sn,
                     uint32_t *counts, uint32_t nchunks) {
  weir__keys_memo *k = memo_find(s, sn->op, sn->subtask);
  if (k) {
    memo_clear(k);
  } else {
    s->memo = weir_realloc(s->memo, (s->nmemo + 1) * sizeof *s->memo);
    k = s->memo[s->nmemo++] = weir_calloc(1, sizeof *k);
  }
  k->op = weir_strdup(sn->op);
  k->subtask = sn->subtask;
  k->parallelism = sn->parallelism;
  k->n = sn->n_u64;
  k->version = sn->u64_keys_version;
#ifdef WEIR_DEBUG
  k->keys = sn->u64_keys;
  k->release = sn->u64_release ? sn->u64_release : weir_free;
  sn->u64_keys = NULL;
#endif
  k->holder = id;
  k->record = record;
  k->nchunks = nchunks;
  k->counts = counts;
  k->committed = 0;
}

/* Checkpoint id committed: the holders it wrote may be shared. */
void weir__memo_committed(weir_store *s, uint64_t id) {
  for (size_t i = 0; i < s->nmemo; i++)
    if (s->memo[i]->holder == id) s->memo[i]->committed = 1;
}

/* ---- packing a subtask into chunks ---------------------------------------- */

/* Broadcast state is stored as a byte-string stream whose routes are all 0
 * (it belongs to no key): the routes of a chunk's entries, never written. */
static const uint64_t zero_routes[WEIR__MAX_BYTES_PER_CHUNK];

/* The next chunk of a byte-string stream of n entries (route may be NULL:
 * all 0), continuing from c->i, c->d and c->dend into buf. Headers go into
 * the chunk where their entry's data starts; data fills every chunk's
 * remaining room. */
static size_t bytes_stream_next(weir__chunker *c, uint64_t n, const uint64_t *route,
                                const uint32_t *klen, const uint32_t *vlen, const uint8_t *data,
                                uint8_t *buf) {
  const uint64_t budget = WEIR__CHUNK_BUDGET;
  uint64_t e0 = c->i, d0 = c->d, used = 0;
  for (;;) {
    if (c->d < c->dend) {
      uint64_t take = c->dend - c->d;
      if (take > budget - used) take = budget - used;
      c->d += take;
      used += take;
      if (used == budget) break;
    } else if (c->i < n) {
      uint64_t h = 8 + weir__varint_len(klen[c->i]) + weir__varint_len(vlen[c->i]);
      if (used + h > budget) break;
      used += h;
      c->dend += (uint64_t)klen[c->i] + vlen[c->i];
      c->i++;
    } else {
      break;
    }
  }
  size_t k = (size_t)(c->i - e0);
  return weir__bytes_chunk_encode(c->id, k ? (route ? route + e0 : zero_routes) : NULL,
                                  k ? klen + e0 : NULL, k ? vlen + e0 : NULL, k, data + d0,
                                  (size_t)(c->d - d0), buf);
}

/* The next chunk: returns 1 with *len, or 0 when there is none left. A u64
 * chunk with keys or a blob chunk is planned (c->planned; weir__chunker_write
 * encodes it into its destination), any other encoded into buf. */
int weir__chunker_next(weir__chunker *c, uint8_t *buf, size_t *len) {
  const weir_subtask_snapshot *sn = c->snap;
  const uint64_t budget = WEIR__CHUNK_BUDGET;
  c->planned = 0;
  for (;;) {
    switch (c->phase) {
    case 0: {
      if (c->i >= sn->n_u64) {
        c->phase = 1;
        c->i = c->d = c->dend = 0;
        continue;
      }
      if (c->share) {
        c->pn = c->share->counts[c->chunks[0]];
        *len = weir__u64_values_encode(c->id, sn->u64_values + c->i, c->pn, buf);
      } else {
        *len = weir__u64_chunk_plan(c->id, sn->u64_values + c->i, (size_t)(sn->n_u64 - c->i),
                                    &c->pn, &c->pvlen);
        if (c->chunks[0] == c->counts_cap) {
          c->counts_cap = c->counts_cap ? 2 * c->counts_cap : 64;
          c->counts = weir_realloc(c->counts, c->counts_cap * sizeof *c->counts);
        }
        c->counts[c->chunks[0]] = (uint32_t)c->pn;
        c->planned = 1;
      }
      c->i += c->pn;
      c->chunks[0]++;
      c->id.seq++;
      return 1;
    }
    case 1: {
      if (c->i >= sn->n_bytes && c->d >= sn->b_data_len) {
        c->phase = 2;
        c->d = 0;
        continue;
      }
      *len =
          bytes_stream_next(c, sn->n_bytes, sn->b_route, sn->b_klen, sn->b_vlen, sn->b_data, buf);
      c->chunks[1]++;
      c->id.seq++;
      return 1;
    }
    case 2: {
      if (c->d >= sn->blob_len) {
        c->phase = 3;
        c->i = 0;
        continue;
      }
      uint64_t take = sn->blob_len - c->d;
      if (take > budget) take = budget;
      /* Planned, like a u64 chunk with keys: the blob goes straight
       * into its page (channel state is most of an unaligned checkpoint). */
      *len = weir__blob_chunk_len(c->id, (size_t)take);
      c->planned = 1;
      c->pn = (size_t)take;
      c->d += take;
      c->chunks[2]++;
      c->id.seq++;
      return 1;
    }
    case 3: {
      if (c->i >= sn->n_ns) {
        c->phase = 4;
        c->i = 0;
        continue;
      }
      /* As many entries as fit the budget: 16 bytes of key and ns, the
       * value's varint. */
      size_t n = 0;
      for (uint64_t used = 0; c->i + n < sn->n_ns; n++) {
        uint64_t h = 16 + weir__varint_len(sn->ns_values[c->i + n]);
        if (used + h > budget) break;
        used += h;
      }
      *len = weir__ns_chunk_encode(c->id, sn->ns_keys + c->i, sn->ns_ns + c->i,
                                   sn->ns_values + c->i, n, buf);
      c->i += n;
      c->chunks[3]++;
      c->id.seq++;
      return 1;
    }
    case 4: {
      if (c->i >= sn->n_timers) {
        c->phase = 5;
        c->i = c->d = c->dend = 0;
        continue;
      }
      size_t n = (size_t)(sn->n_timers - c->i);
      if (n > WEIR__MAX_TIMERS_PER_CHUNK) n = WEIR__MAX_TIMERS_PER_CHUNK;
      for (size_t k = 0; k < n; k++) c->dom[k] = sn->tm_domain[c->i + k];
      *len = weir__timer_chunk_encode(c->id, sn->tm_keys + c->i, sn->tm_ts + c->i, c->dom, n, buf);
      c->i += n;
      c->chunks[4]++;
      c->id.seq++;
      return 1;
    }
    case 5: {
      if (c->i >= sn->n_bcast && c->d >= sn->bc_data_len) {
        c->phase = 6;
        continue;
      }
      *len = bytes_stream_next(c, sn->n_bcast, NULL, sn->bc_klen, sn->bc_vlen, sn->bc_data, buf);
      c->chunks[5]++;
      c->id.seq++;
      return 1;
    }
    default:
      return 0;
    }
  }
}

/* Encodes the chunk weir__chunker_next planned into dst (*len bytes). */
void weir__chunker_write(const weir__chunker *c, uint8_t *dst) {
  const weir_subtask_snapshot *sn = c->snap;
  weir__chunk_id id = {c->id.ckpt, c->id.record, c->id.seq - 1};
  if (c->phase == 2) {
    weir__blob_chunk_write(id, sn->blob + (c->d - c->pn), c->pn, dst);
    return;
  }
  uint64_t at = c->i - c->pn;
  weir__u64_chunk_write(id, sn->u64_keys + at, sn->u64_values + at, c->pn, c->pvlen, dst);
}

/* The bytes the chunks of a subtask take (values and keys, without LMDB's
 * page overhead): encodes them all again, into buf, for a failure message. */
uint64_t weir__subtask_bytes(uint64_t id, uint32_t record, const weir_subtask_snapshot *sn,
                             const weir__keys_memo *share, uint8_t *buf) {
  weir__chunker c = {.snap = sn, .share = share, .id = {id, record, 0}};
  uint64_t total = 0;
  size_t len = 0;
  while (weir__chunker_next(&c, buf, &len)) total += len + WEIR__CHUNK_KEY;
  weir_free(c.counts);
  return total;
}
