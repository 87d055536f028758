/* codec.c: owns the translation between weir's stored values (weir.proto in
 * an envelope) and the plain structs of codec.h, and the meaning checks of
 * every decoded value.
 *
 * DESIGN: the store never trusts a value because its checksum matched: a
 * value can be well-formed and still wrong (a bug in an older writer, a
 * value moved under another key, a hand-edited store). So every decode runs
 * three layers: the envelope (damage and format), protobuf-c's unpacker
 * (wire syntax, bounded by the payload), then semantic checks that make
 * every later use safe: counts agree with array lengths, bounds hold before
 * anything is allocated from a stored count, orderings that the writer
 * guarantees are re-checked. The generated structs stay in this file;
 * decoded metadata is copied into weir-owned structs, decoded chunks are
 * handed out as read-only views into the unpacked message. protobuf-c
 * allocates through pbc_alloc, where a test can make an allocation fail
 * (weir__codec_fail_alloc_after); tests/fuzz feeds every decoder hostile
 * bytes and checks each of these promises.
 */
#include "codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir.pb-c.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "weir/error.h"

static int fail(int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(int rc, char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return rc;
}

/* ---- protobuf-c's allocator ------------------------------------------------ */

/* Every unpack and free_unpacked goes through `pbc_alloc`, so that a test can
 * make protobuf-c's allocations fail (weir__codec_fail_alloc_after). Real
 * exhaustion still aborts in weir_malloc (weir/alloc.h: one policy); only an
 * armed hook makes an allocation fail softly, which exercises the paths
 * where protobuf-c gives up half-way through a message (as it does on
 * malformed input). The hook's state is per thread, so a test that arms it
 * does not disturb decodes on other threads. The hook exists in test builds
 * only (WEIR_TEST_HOOKS). */
#ifdef WEIR_TEST_HOOKS
static _Thread_local long fail_countdown;         /* > 0: allocations until one fails */
static _Thread_local unsigned long injected;      /* allocations the hook made fail */
static _Thread_local unsigned long injected_seen; /* `injected` at the hook's last call */
#else
static const unsigned long injected = 0; /* no hook: every failure is the input's */
#endif

static void *pbc_malloc(void *data, size_t size) {
  (void)data;
#ifdef WEIR_TEST_HOOKS
  if (__builtin_expect(fail_countdown > 0, 0) && --fail_countdown == 0) {
    injected++;
    return NULL;
  }
#endif
  return weir_malloc(size);
}

static void pbc_free(void *data, void *p) {
  (void)data;
  weir_free(p);
}

static ProtobufCAllocator pbc_alloc = {pbc_malloc, pbc_free, NULL};

#ifdef WEIR_TEST_HOOKS
int weir__codec_fail_alloc_after(long n) {
  int fired = injected != injected_seen;
  injected_seen = injected;
  fail_countdown = n >= 0 ? n + 1 : 0;
  return fired;
}
#endif

/* The error for an unpack that returned NULL, `before` being `injected` as it
 * was before the unpack: out of memory if the test hook made an allocation
 * fail meanwhile, else a malformed message. */
static int undecodable(unsigned long before, const char *what, size_t n, char *err, size_t errlen) {
  if (injected != before)
    return fail(WEIR_ENOMEM, err, errlen, "%s: out of memory decoding %zu bytes (injected)", what,
                n);
  return fail(WEIR_ECORRUPT, err, errlen, "%s: undecodable (%zu bytes)", what, n);
}

/* Packs msg behind an envelope of `kind` into a weir_malloc'd value. */
static void seal_message(const ProtobufCMessage *msg, uint16_t kind, uint8_t **out, size_t *len) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  WEIR_ASSERT(n <= UINT32_MAX);
  uint8_t *v = weir_malloc(WEIR__ENV_HDR + n);
  size_t packed = protobuf_c_message_pack(msg, v + WEIR__ENV_HDR);
  WEIR_ASSERT(packed == n);
  weir__env_seal(v, WEIR_STORE_FORMAT, kind, (uint32_t)n);
  *out = v;
  *len = WEIR__ENV_HDR + n;
}

/* Packs msg behind an envelope into buf (WEIR__CHUNK_MAX bytes). */
static size_t seal_chunk(const ProtobufCMessage *msg, uint16_t kind, uint8_t *buf) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  /* The planners keep within WEIR__CHUNK_BUDGET: exceeding the maximum is a
   * bug in weir, not in the data. */
  WEIR_ASSERT(n + WEIR__ENV_HDR <= WEIR__CHUNK_MAX);
  size_t packed = protobuf_c_message_pack(msg, buf + WEIR__ENV_HDR);
  WEIR_ASSERT(packed == n);
  weir__env_seal(buf, WEIR_STORE_FORMAT, kind, (uint32_t)n);
  return WEIR__ENV_HDR + n;
}

/* Opens the envelope and checks that it holds a `want` value. */
static int open_kind(const void *value, size_t len, uint16_t want, const char *what,
                     const uint8_t **payload, size_t *plen, uint16_t *kind_out, char *err,
                     size_t errlen) {
  char why[200];
  uint16_t kind = 0;
  int rc = weir__env_open(value, len, &kind, payload, plen, why, sizeof why);
  if (rc < 0) return fail(rc, err, errlen, "%s: %s", what, why);
  if (want != 0 && kind != want)
    return fail(WEIR_ECORRUPT, err, errlen, "%s: holds a value of kind %u, expected %u", what, kind,
                want);
  if (kind_out) *kind_out = kind;
  return 0;
}

int weir__uuid_valid(const char *s) {
  if (s == NULL || strlen(s) != 36) return 0;
  for (int i = 0; i < 36; i++) {
    char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return 0;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return 0;
    }
  }
  return 1;
}

/* ---- job record ---------------------------------------------------------- */

void weir__job_encode(const weir__job_rec *j, uint8_t **out, size_t *len) {
  Weirpb__Job m = WEIRPB__JOB__INIT;
  m.job_id = (char *)j->job_id;
  m.instance = j->instance;
  m.id_limit = j->id_limit;
  m.latest = j->latest;
  m.finished = j->finished != 0;
  m.created_ms = j->created_ms;
  m.name = (char *)j->name;
  seal_message(&m.base, WEIR__KIND_JOB, out, len);
}

int weir__job_decode(const void *value, size_t len, weir__job_rec *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const uint8_t *p;
  size_t n;
  int rc = open_kind(value, len, WEIR__KIND_JOB, "job record", &p, &n, NULL, err, errlen);
  if (rc < 0) return rc;
  unsigned long inj = injected;
  Weirpb__Job *m = weirpb__job__unpack(&pbc_alloc, n, p);
  if (m == NULL) return undecodable(inj, "job record", n, err, errlen);
  if (!weir__uuid_valid(m->job_id)) {
    rc = fail(WEIR_ECORRUPT, err, errlen, "job record: job id is not a UUID");
  } else if (m->instance < 1 || m->id_limit < 1) {
    rc = fail(WEIR_ECORRUPT, err, errlen,
              "job record of job %s: instance %llu, id limit %llu (both must be >= 1)", m->job_id,
              (unsigned long long)m->instance, (unsigned long long)m->id_limit);
  } else if (m->latest >= m->id_limit) {
    rc = fail(WEIR_ECORRUPT, err, errlen,
              "job record of job %s: latest checkpoint %llu was never handed out (limit %llu)",
              m->job_id, (unsigned long long)m->latest, (unsigned long long)m->id_limit);
  } else if (m->finished && m->latest == 0) {
    rc = fail(WEIR_ECORRUPT, err, errlen,
              "job record of job %s: finished without a final checkpoint", m->job_id);
  } else if (m->name && strlen(m->name) > WEIR_STORE_NAME_MAX) {
    rc = fail(WEIR_ECORRUPT, err, errlen, "job record of job %s: a job name of %zu bytes",
              m->job_id, strlen(m->name));
  } else {
    memcpy(out->job_id, m->job_id, 37);
    out->instance = m->instance;
    out->id_limit = m->id_limit;
    out->latest = m->latest;
    out->finished = m->finished != 0;
    out->created_ms = m->created_ms;
    if (m->name) memcpy(out->name, m->name, strlen(m->name) + 1);
  }
  weirpb__job__free_unpacked(m, &pbc_alloc);
  return rc;
}

/* ---- checkpoint metadata ------------------------------------------------- */

void weir__meta_encode(const weir__ckpt_meta *mm, uint8_t **out, size_t *len) {
  Weirpb__Checkpoint m = WEIRPB__CHECKPOINT__INIT;
  m.format_version = mm->format_version;
  m.min_reader_version = mm->min_reader_version;
  m.job_id = (char *)mm->job_id;
  m.instance = mm->instance;
  m.id = mm->id;
  m.trigger_ms = mm->trigger_ms;
  m.complete_ms = mm->complete_ms;
  m.epoch = mm->epoch;
  m.duration_ms = mm->duration_ms;
  m.alignment_ms = mm->alignment_ms;
  m.key_groups = mm->key_groups;
  m.is_final = mm->final != 0;
  m.total_bytes = mm->total_bytes;
  m.total_chunks = mm->total_chunks;
  m.job_name = mm->job_name ? mm->job_name : (char *)"";
  m.graph_fingerprint = mm->fingerprint;
  Weirpb__Destination *dests = weir_calloc(mm->ndest ? mm->ndest : 1, sizeof *dests);
  Weirpb__Destination **dptrs = weir_calloc(mm->ndest ? mm->ndest : 1, sizeof *dptrs);
  for (uint32_t i = 0; i < mm->ndest; i++) {
    weirpb__destination__init(&dests[i]);
    dests[i].op = mm->dests[i].op;
    dests[i].id = mm->dests[i].id;
    dptrs[i] = &dests[i];
  }
  m.n_destinations = mm->ndest;
  m.destinations = dptrs;
  Weirpb__Subtask *subs = weir_calloc(mm->nsub ? mm->nsub : 1, sizeof *subs);
  Weirpb__Subtask **ptrs = weir_calloc(mm->nsub ? mm->nsub : 1, sizeof *ptrs);
  uint64_t npos = 0;
  for (uint32_t i = 0; i < mm->nsub; i++) npos += mm->subs[i].npos;
  uint32_t *split = weir_malloc((npos ? npos : 1) * sizeof *split);
  uint64_t *offset = weir_malloc((npos ? npos : 1) * sizeof *offset);
  uint64_t at = 0;
  for (uint32_t i = 0; i < mm->nsub; i++) {
    const weir__sub_entry *e = &mm->subs[i];
    Weirpb__Subtask *s = &subs[i];
    weirpb__subtask__init(s);
    s->op = e->op;
    s->subtask = e->subtask;
    s->parallelism = e->parallelism;
    s->record = e->record;
    s->u64_chunks = e->u64_chunks;
    s->bytes_chunks = e->bytes_chunks;
    s->blob_chunks = e->blob_chunks;
    s->bytes = e->bytes;
    s->u64_entries = e->u64_entries;
    s->bytes_entries = e->bytes_entries;
    s->bytes_data_len = e->bytes_data_len;
    s->blob_len = e->blob_len;
    s->keys_ckpt = e->keys_ckpt;
    s->keys_record = e->keys_record;
    s->ns_chunks = e->ns_chunks;
    s->ns_entries = e->ns_entries;
    s->timer_chunks = e->timer_chunks;
    s->timer_entries = e->timer_entries;
    s->bcast_chunks = e->bcast_chunks;
    s->bcast_entries = e->bcast_entries;
    s->has_clock = e->has_clock != 0;
    s->clock = e->clock;
    s->state_version = e->state_version;
    s->n_pos_split = s->n_pos_offset = e->npos;
    s->pos_split = split + at;
    s->pos_offset = offset + at;
    for (uint32_t k = 0; k < e->npos; k++) {
      split[at + k] = e->pos[k].split;
      offset[at + k] = e->pos[k].offset;
    }
    at += e->npos;
    ptrs[i] = s;
  }
  m.n_subtasks = mm->nsub;
  m.subtasks = ptrs;
  seal_message(&m.base, WEIR__KIND_META, out, len);
  weir_free(split);
  weir_free(offset);
  weir_free(ptrs);
  weir_free(subs);
  weir_free(dptrs);
  weir_free(dests);
}

void weir__meta_free(weir__ckpt_meta *m) {
  if (m == NULL) return;
  for (uint32_t i = 0; i < m->nsub; i++) {
    weir_free(m->subs[i].op);
    weir_free(m->subs[i].pos);
  }
  weir_free(m->subs);
  for (uint32_t i = 0; i < m->ndest; i++) {
    weir_free(m->dests[i].op);
    weir_free(m->dests[i].id);
  }
  weir_free(m->dests);
  weir_free(m->job_name);
  memset(m, 0, sizeof *m);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Checks one subtask entry on its own. */
static int check_entry(const Weirpb__Subtask *s, uint64_t id, char *err, size_t errlen) {
#define BAD(...)                                                                                   \
  fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: operator \"%s\" subtask %u: " __VA_ARGS__)
#define CTX (unsigned long long)id, s->op, s->subtask
  if (s->parallelism == 0 || s->subtask >= s->parallelism)
    return BAD("subtask index out of range for parallelism %u", CTX, s->parallelism);
  if ((s->u64_entries == 0) != (s->u64_chunks == 0) || s->u64_chunks > s->u64_entries ||
      s->u64_entries > (uint64_t)s->u64_chunks * WEIR__MAX_U64_PER_CHUNK)
    return BAD("%llu u64 entries cannot fill %u chunks", CTX, (unsigned long long)s->u64_entries,
               s->u64_chunks);
  if ((s->bytes_entries == 0) != (s->bytes_chunks == 0) ||
      (s->bytes_entries == 0 && s->bytes_data_len != 0) ||
      s->bytes_entries > (uint64_t)s->bytes_chunks * WEIR__MAX_BYTES_PER_CHUNK ||
      s->bytes_data_len > (uint64_t)s->bytes_chunks * WEIR__CHUNK_MAX ||
      s->bytes_chunks > s->bytes_entries + s->bytes_data_len)
    return BAD("%llu byte-string entries of %llu bytes cannot fill %u chunks", CTX,
               (unsigned long long)s->bytes_entries, (unsigned long long)s->bytes_data_len,
               s->bytes_chunks);
  if ((s->blob_len == 0) != (s->blob_chunks == 0) || s->blob_chunks > s->blob_len ||
      s->blob_len > (uint64_t)s->blob_chunks * WEIR__CHUNK_MAX)
    return BAD("a blob of %llu bytes cannot fill %u chunks", CTX, (unsigned long long)s->blob_len,
               s->blob_chunks);
  if ((s->ns_entries == 0) != (s->ns_chunks == 0) || s->ns_chunks > s->ns_entries ||
      s->ns_entries > (uint64_t)s->ns_chunks * WEIR__MAX_NS_PER_CHUNK)
    return BAD("%llu namespaced entries cannot fill %u chunks", CTX,
               (unsigned long long)s->ns_entries, s->ns_chunks);
  if ((s->timer_entries == 0) != (s->timer_chunks == 0) || s->timer_chunks > s->timer_entries ||
      s->timer_entries > (uint64_t)s->timer_chunks * WEIR__MAX_TIMERS_PER_CHUNK)
    return BAD("%llu timers cannot fill %u chunks", CTX, (unsigned long long)s->timer_entries,
               s->timer_chunks);
  /* Broadcast state is a byte-string stream without a recorded data
   * length: a chunk may hold only data, so it can have more chunks than
   * entries, but none without an entry. */
  if ((s->bcast_entries == 0) != (s->bcast_chunks == 0) ||
      s->bcast_entries > (uint64_t)s->bcast_chunks * WEIR__MAX_BYTES_PER_CHUNK)
    return BAD("%llu broadcast entries cannot fill %u chunks", CTX,
               (unsigned long long)s->bcast_entries, s->bcast_chunks);
  uint64_t chunks = (uint64_t)s->u64_chunks + s->bytes_chunks + s->blob_chunks + s->ns_chunks +
                    s->timer_chunks + s->bcast_chunks;
  if (chunks > UINT32_MAX)
    return BAD("%llu chunks is more than a record can hold", CTX, (unsigned long long)chunks);
  if (s->bytes < chunks * WEIR__ENV_HDR || s->bytes > chunks * WEIR__CHUNK_MAX)
    return BAD("%llu stored bytes cannot be %llu chunks", CTX, (unsigned long long)s->bytes,
               (unsigned long long)chunks);
  if (s->keys_ckpt != 0 && (s->keys_ckpt >= id || s->u64_entries == 0))
    return BAD("shares the u64 keys of checkpoint %llu, which it cannot", CTX,
               (unsigned long long)s->keys_ckpt);
  if (s->keys_ckpt == 0 && s->keys_record != 0)
    return BAD("names record %u for shared keys but no checkpoint", CTX, s->keys_record);
  /* Each u64 entry takes at least 9 stored bytes (key, 1-byte varint; 1
   * with shared keys), each byte-string entry at least 10 (route, two
   * lengths), data 1 per byte: so no count can claim more than the stored
   * bytes allow (which load bounds by the file's size before allocating). */
  uint64_t least = (s->keys_ckpt ? 1 : 9) * s->u64_entries + 10 * s->bytes_entries +
                   s->bytes_data_len + s->blob_len + WEIR__TIMER_BYTES * s->timer_entries +
                   10 * s->bcast_entries + WEIR__NS_BYTES * s->ns_entries;
  if (least > s->bytes)
    return BAD("its entries need at least %llu bytes, only %llu are stored", CTX,
               (unsigned long long)least, (unsigned long long)s->bytes);
  if (s->n_pos_split != s->n_pos_offset)
    return BAD("%zu position splits but %zu offsets", CTX, s->n_pos_split, s->n_pos_offset);
  if (s->n_pos_split > UINT32_MAX) return BAD("too many positions", CTX);
  for (size_t k = 1; k < s->n_pos_split; k++) {
    if (s->pos_split[k] == s->pos_split[k - 1])
      return BAD("position of split %u appears twice", CTX, s->pos_split[k]);
    if (s->pos_split[k] < s->pos_split[k - 1]) return BAD("positions not ordered by split", CTX);
  }
  return 0;
#undef CTX
#undef BAD
}

int weir__meta_decode(const void *value, size_t len, uint64_t key_id, const char *job_id,
                      weir__ckpt_meta *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const uint8_t *p;
  size_t n;
  char what[64];
  snprintf(what, sizeof what, "checkpoint %llu: metadata", (unsigned long long)key_id);
  int rc = open_kind(value, len, WEIR__KIND_META, what, &p, &n, NULL, err, errlen);
  if (rc < 0) return rc;
  unsigned long inj = injected;
  Weirpb__Checkpoint *m = weirpb__checkpoint__unpack(&pbc_alloc, n, p);
  if (m == NULL) return undecodable(inj, what, n, err, errlen);
  unsigned long long id = key_id;
  uint32_t *records = NULL;
  if (m->min_reader_version > WEIR_STORE_FORMAT) {
    rc = fail(WEIR_EFORMAT, err, errlen,
              "checkpoint %llu: written in store format %u for readers of format %u or newer "
              "(this weir reads formats %u to %u)",
              id, m->format_version, m->min_reader_version, WEIR_STORE_MIN_READER,
              WEIR_STORE_FORMAT);
    goto out;
  }
  if (m->format_version == 0 || m->min_reader_version == 0 ||
      m->min_reader_version > m->format_version) {
    rc = fail(WEIR_ECORRUPT, err, errlen,
              "checkpoint %llu: metadata has format %u for readers of format %u", id,
              m->format_version, m->min_reader_version);
    goto out;
  }
  for (size_t i = 0; i < m->n_subtasks && m->min_reader_version < WEIR_STORE_SHARED_KEYS; i++) {
    if (m->subtasks[i]->keys_ckpt == 0) continue;
    rc = fail(WEIR_ECORRUPT, err, errlen,
              "checkpoint %llu: shares u64 keys but claims readers of format %u can read it", id,
              m->min_reader_version);
    goto out;
  }
  if (m->id != key_id) {
    rc =
        fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: metadata stored under it claims id %llu",
             id, (unsigned long long)m->id);
    goto out;
  }
  if (!weir__uuid_valid(m->job_id)) {
    rc = fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: job id is not a UUID", id);
    goto out;
  }
  if (job_id != NULL && strcmp(job_id, m->job_id) != 0) {
    rc = fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: belongs to job %s, not to job %s", id,
              m->job_id, job_id);
    goto out;
  }
  if (m->instance < 1) {
    rc = fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: instance 0", id);
    goto out;
  }
  if (m->n_subtasks > UINT32_MAX) {
    rc = fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: too many subtasks", id);
    goto out;
  }
  uint64_t bytes = 0, chunks = 0;
  records = weir_malloc((m->n_subtasks ? m->n_subtasks : 1) * sizeof *records);
  for (size_t i = 0; i < m->n_subtasks; i++) {
    const Weirpb__Subtask *s = m->subtasks[i];
    if (s->op == NULL || s->op[0] == '\0' || strlen(s->op) > WEIR__MAX_OP_NAME) {
      rc = fail(WEIR_ECORRUPT, err, errlen,
                "checkpoint %llu: subtask entry %zu has an empty or overlong operator name", id, i);
      goto out;
    }
    if ((rc = check_entry(s, key_id, err, errlen)) < 0) goto out;
    if (i > 0) {
      const Weirpb__Subtask *prev = m->subtasks[i - 1];
      int c = strcmp(prev->op, s->op);
      if (c == 0 && prev->subtask == s->subtask) {
        rc = fail(WEIR_ECORRUPT, err, errlen,
                  "checkpoint %llu: operator \"%s\" subtask %u appears twice", id, s->op,
                  s->subtask);
        goto out;
      }
      if (c > 0 || (c == 0 && prev->subtask > s->subtask)) {
        rc = fail(WEIR_ECORRUPT, err, errlen,
                  "checkpoint %llu: operator \"%s\" subtask %u is out of order", id, s->op,
                  s->subtask);
        goto out;
      }
      if (c == 0 && prev->parallelism != s->parallelism) {
        rc = fail(WEIR_ECORRUPT, err, errlen,
                  "checkpoint %llu: operator \"%s\" has parallelism %u and %u", id, s->op,
                  prev->parallelism, s->parallelism);
        goto out;
      }
    }
    records[i] = s->record;
    bytes += s->bytes;
    chunks += (uint64_t)s->u64_chunks + s->bytes_chunks + s->blob_chunks + s->ns_chunks +
              s->timer_chunks + s->bcast_chunks;
  }
  qsort(records, m->n_subtasks, sizeof *records, cmp_u32);
  for (size_t i = 1; i < m->n_subtasks; i++) {
    if (records[i] == records[i - 1]) {
      rc = fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: two subtasks share record %u", id,
                records[i]);
      goto out;
    }
  }
  if (m->job_name && strlen(m->job_name) > WEIR_STORE_NAME_MAX) {
    rc = fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: a job name of %zu bytes", id,
              strlen(m->job_name));
    goto out;
  }
  if (m->n_destinations > UINT32_MAX) {
    rc = fail(WEIR_ECORRUPT, err, errlen, "checkpoint %llu: too many destinations", id);
    goto out;
  }
  for (size_t i = 0; i < m->n_destinations; i++) {
    const Weirpb__Destination *d = m->destinations[i];
    if (d->op == NULL || d->op[0] == '\0' || strlen(d->op) > WEIR__MAX_OP_NAME || d->id == NULL ||
        strlen(d->id) > WEIR_STORE_DEST_MAX) {
      rc = fail(WEIR_ECORRUPT, err, errlen,
                "checkpoint %llu: destination %zu has an empty or overlong operator name or id", id,
                i);
      goto out;
    }
    if (i > 0 && strcmp(m->destinations[i - 1]->op, d->op) >= 0) {
      rc = fail(WEIR_ECORRUPT, err, errlen,
                "checkpoint %llu: destination of \"%s\" out of order or twice", id, d->op);
      goto out;
    }
  }
  if (bytes != m->total_bytes || chunks != m->total_chunks) {
    rc = fail(WEIR_ECORRUPT, err, errlen,
              "checkpoint %llu: totals (%llu bytes, %llu chunks) disagree with its subtasks "
              "(%llu bytes, %llu chunks)",
              id, (unsigned long long)m->total_bytes, (unsigned long long)m->total_chunks,
              (unsigned long long)bytes, (unsigned long long)chunks);
    goto out;
  }

  out->format_version = m->format_version;
  out->min_reader_version = m->min_reader_version;
  memcpy(out->job_id, m->job_id, 37);
  out->instance = m->instance;
  out->id = m->id;
  out->epoch = m->epoch;
  out->trigger_ms = m->trigger_ms;
  out->complete_ms = m->complete_ms;
  out->duration_ms = m->duration_ms;
  out->alignment_ms = m->alignment_ms;
  out->key_groups = m->key_groups;
  out->final = m->is_final != 0;
  out->total_bytes = m->total_bytes;
  out->total_chunks = m->total_chunks;
  if (m->job_name && m->job_name[0]) out->job_name = weir_strdup(m->job_name);
  out->fingerprint = m->graph_fingerprint;
  out->ndest = (uint32_t)m->n_destinations;
  out->dests = out->ndest ? weir_calloc(out->ndest, sizeof *out->dests) : NULL;
  for (uint32_t i = 0; i < out->ndest; i++) {
    out->dests[i].op = weir_strdup(m->destinations[i]->op);
    out->dests[i].id = weir_strdup(m->destinations[i]->id);
  }
  out->nsub = (uint32_t)m->n_subtasks;
  out->subs = weir_calloc(out->nsub ? out->nsub : 1, sizeof *out->subs);
  for (uint32_t i = 0; i < out->nsub; i++) {
    const Weirpb__Subtask *s = m->subtasks[i];
    weir__sub_entry *e = &out->subs[i];
    e->op = weir_strdup(s->op);
    e->subtask = s->subtask;
    e->parallelism = s->parallelism;
    e->record = s->record;
    e->u64_chunks = s->u64_chunks;
    e->bytes_chunks = s->bytes_chunks;
    e->blob_chunks = s->blob_chunks;
    e->bytes = s->bytes;
    e->u64_entries = s->u64_entries;
    e->bytes_entries = s->bytes_entries;
    e->bytes_data_len = s->bytes_data_len;
    e->blob_len = s->blob_len;
    e->keys_ckpt = s->keys_ckpt;
    e->keys_record = s->keys_record;
    e->ns_chunks = s->ns_chunks;
    e->ns_entries = s->ns_entries;
    e->timer_chunks = s->timer_chunks;
    e->timer_entries = s->timer_entries;
    e->bcast_chunks = s->bcast_chunks;
    e->bcast_entries = s->bcast_entries;
    e->has_clock = s->has_clock;
    e->clock = s->clock;
    e->state_version = s->state_version;
    e->npos = (uint32_t)s->n_pos_split;
    if (e->npos > 0) {
      e->pos = weir_malloc(e->npos * sizeof *e->pos);
      for (uint32_t k = 0; k < e->npos; k++) {
        e->pos[k].split = s->pos_split[k];
        e->pos[k].offset = s->pos_offset[k];
      }
    }
  }
  rc = 0;
out:
  weir_free(records);
  weirpb__checkpoint__free_unpacked(m, &pbc_alloc);
  return rc;
}

/* ---- chunks ------------------------------------------------------------------ */

/* Checkpoints of large tables are mostly u64 chunks, so they are written
 * here directly in protobuf's wire format: protobuf-c's generic packer
 * walks the field descriptors and sizes every varint twice (once for the
 * packed size, once to pack). The bytes are exactly protobuf-c's
 * (weir__u64_chunk_encode_pb; tests compare the two): proto3 leaves out
 * zero scalars and empty repeated fields, fields go in number order. */
static inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
  /* Counts and the like are mostly small: one or two bytes without a loop. */
  if (v < 0x80) {
    *p = (uint8_t)v;
    return p + 1;
  }
  if (v < 0x4000) {
    p[0] = (uint8_t)(v | 0x80);
    p[1] = (uint8_t)(v >> 7);
    return p + 2;
  }
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

static uint8_t *put_scalar(uint8_t *p, uint8_t tag, uint64_t v) {
  if (v == 0) return p;
  *p++ = tag;
  return put_varint(p, v);
}

static size_t scalar_len(uint64_t v) {
  return v ? 1 + weir__varint_len(v) : 0;
}

size_t weir__u64_chunk_plan(weir__chunk_id id, const uint64_t *values, size_t avail, size_t *taken,
                            size_t *vlen) {
  const size_t budget = WEIR__CHUNK_BUDGET;
  size_t n = 0, q = 0;
  if (avail > WEIR__U64_SHAREABLE) avail = WEIR__U64_SHAREABLE;
  for (;;) {
    /* Entries that fit whatever their values (18 bytes at most) go
     * without a test each. */
    size_t sure = (budget - 8 * n - q) / 18;
    if (sure == 0 || n == avail) break;
    size_t end = avail - n < sure ? avail : n + sure;
    for (; n < end; n++) q += weir__varint_len(values[n]);
  }
  while (n < avail && 8 * (n + 1) + q + weir__varint_len(values[n]) <= budget)
    q += weir__varint_len(values[n++]);
  *taken = n;
  *vlen = q;
  size_t len = scalar_len(id.ckpt) + scalar_len(id.record) + scalar_len(id.seq);
  if (n) len += 1 + weir__varint_len(8 * (uint64_t)n) + 8 * n + 1 + weir__varint_len(q) + q;
  return WEIR__ENV_HDR + len;
}

void weir__u64_chunk_write(weir__chunk_id id, const uint64_t *keys, const uint64_t *values,
                           size_t n, size_t vlen, uint8_t *buf) {
  uint8_t *start = buf + WEIR__ENV_HDR, *p = start;
  p = put_scalar(p, 0x08, id.ckpt);   /* 1: checkpoint */
  p = put_scalar(p, 0x10, id.record); /* 2: record */
  p = put_scalar(p, 0x18, id.seq);    /* 3: seq */
  if (n) {
    *p++ = 0x22; /* 4: keys, packed fixed64 */
    p = put_varint(p, 8 * (uint64_t)n);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, keys, 8 * n);
#else
    for (size_t i = 0; i < n; i++)
      for (int b = 0; b < 8; b++) p[8 * i + b] = (uint8_t)(keys[i] >> (8 * b));
#endif
    p += 8 * n;
    *p++ = 0x2a; /* 5: values, packed varint */
    p = put_varint(p, vlen);
    uint8_t *v0 = p;
    for (size_t i = 0; i < n; i++) p = put_varint(p, values[i]);
    WEIR_ASSERT((size_t)(p - v0) == vlen); /* as planned */
  }
  weir__env_seal(buf, WEIR_STORE_FORMAT, WEIR__KIND_U64, (uint32_t)(p - start));
}

/* One pass: the values are encoded past room for the longest length
 * prefix they can need, and moved back the byte or two the prefix did not
 * use (only a short chunk's, a few KB at most). Sizing them first costs a
 * second pass over values that are no longer in the cache: the encoding of
 * a checkpoint's values took twice as long that way. */
_Static_assert(WEIR__CHUNK_BUDGET < (1u << 21), "a values chunk's length prefix takes 3 bytes");
size_t weir__u64_values_encode(weir__chunk_id id, const uint64_t *values, size_t n, uint8_t *buf) {
  WEIR_ASSERT(n > 0);
  uint8_t *start = buf + WEIR__ENV_HDR, *p = start;
  p = put_scalar(p, 0x08, id.ckpt);   /* 1: checkpoint */
  p = put_scalar(p, 0x10, id.record); /* 2: record */
  p = put_scalar(p, 0x18, id.seq);    /* 3: seq */
  *p++ = 0x2a;                        /* 5: values, packed varint */
  uint8_t *v0 = p + 3, *e = v0;
  for (size_t i = 0; i < n; i++) e = put_varint(e, values[i]);
  size_t vlen = (size_t)(e - v0);
  WEIR_ASSERT(vlen <= WEIR__CHUNK_BUDGET);
  uint8_t *at = put_varint(p, vlen);
  if (at != v0) memmove(at, v0, vlen);
  p = at + vlen;
  weir__env_seal(buf, WEIR_STORE_FORMAT, WEIR__KIND_U64_VALUES, (uint32_t)(p - start));
  return (size_t)(p - buf);
}

size_t weir__u64_chunk_fill(weir__chunk_id id, const uint64_t *keys, const uint64_t *values,
                            size_t avail, uint8_t *buf, size_t *taken) {
  size_t vlen = 0;
  size_t len = weir__u64_chunk_plan(id, values, avail, taken, &vlen);
  WEIR_ASSERT(len <= WEIR__CHUNK_MAX);
  weir__u64_chunk_write(id, keys, values, *taken, vlen, buf);
  return len;
}

size_t weir__u64_chunk_encode(weir__chunk_id id, const uint64_t *keys, const uint64_t *values,
                              size_t n, uint8_t *buf) {
  size_t taken = 0;
  size_t len = weir__u64_chunk_fill(id, keys, values, n, buf, &taken);
  /* The caller planned within the budget (above). */
  WEIR_ASSERT(taken == n);
  return len;
}

size_t weir__u64_chunk_encode_pb(weir__chunk_id id, const uint64_t *keys, const uint64_t *values,
                                 size_t n, uint8_t *buf) {
  Weirpb__U64Chunk m = WEIRPB__U64_CHUNK__INIT;
  m.checkpoint = id.ckpt;
  m.record = id.record;
  m.seq = id.seq;
  m.n_keys = m.n_values = n;
  m.keys = (uint64_t *)keys;
  m.values = (uint64_t *)values;
  return seal_chunk(&m.base, WEIR__KIND_U64, buf);
}

size_t weir__bytes_chunk_encode(weir__chunk_id id, const uint64_t *route, const uint32_t *klen,
                                const uint32_t *vlen, size_t n, const uint8_t *data,
                                size_t data_len, uint8_t *buf) {
  Weirpb__BytesChunk m = WEIRPB__BYTES_CHUNK__INIT;
  m.checkpoint = id.ckpt;
  m.record = id.record;
  m.seq = id.seq;
  m.n_route = m.n_klen = m.n_vlen = n;
  m.route = (uint64_t *)route;
  m.klen = (uint32_t *)klen;
  m.vlen = (uint32_t *)vlen;
  m.data.len = data_len;
  m.data.data = (uint8_t *)data;
  return seal_chunk(&m.base, WEIR__KIND_BYTES, buf);
}

size_t weir__blob_chunk_encode(weir__chunk_id id, const uint8_t *data, size_t data_len,
                               uint8_t *buf) {
  Weirpb__BlobChunk m = WEIRPB__BLOB_CHUNK__INIT;
  m.checkpoint = id.ckpt;
  m.record = id.record;
  m.seq = id.seq;
  m.data.len = data_len;
  m.data.data = (uint8_t *)data;
  return seal_chunk(&m.base, WEIR__KIND_BLOB, buf);
}

size_t weir__ns_chunk_encode(weir__chunk_id id, const uint64_t *keys, const uint64_t *ns,
                             const uint64_t *values, size_t n, uint8_t *buf) {
  Weirpb__NsChunk m = WEIRPB__NS_CHUNK__INIT;
  m.checkpoint = id.ckpt;
  m.record = id.record;
  m.seq = id.seq;
  m.n_keys = m.n_ns = m.n_values = n;
  m.keys = (uint64_t *)keys;
  m.ns = (uint64_t *)ns;
  m.values = (uint64_t *)values;
  return seal_chunk(&m.base, WEIR__KIND_NS, buf);
}

size_t weir__timer_chunk_encode(weir__chunk_id id, const uint64_t *keys, const int64_t *ts,
                                const uint32_t *domain, size_t n, uint8_t *buf) {
  Weirpb__TimerChunk m = WEIRPB__TIMER_CHUNK__INIT;
  m.checkpoint = id.ckpt;
  m.record = id.record;
  m.seq = id.seq;
  m.n_keys = m.n_ts = m.n_domain = n;
  m.keys = (uint64_t *)keys;
  m.ts = (int64_t *)ts;
  m.domain = (uint32_t *)domain;
  return seal_chunk(&m.base, WEIR__KIND_TIMERS, buf);
}

static size_t blob_payload_len(weir__chunk_id id, size_t data_len) {
  size_t n = scalar_len(id.ckpt) + scalar_len(id.record) + scalar_len(id.seq);
  return data_len ? n + 1 + weir__varint_len(data_len) + data_len : n;
}

size_t weir__blob_chunk_len(weir__chunk_id id, size_t data_len) {
  return WEIR__ENV_HDR + blob_payload_len(id, data_len);
}

void weir__blob_chunk_write(weir__chunk_id id, const uint8_t *data, size_t data_len, uint8_t *buf) {
  size_t n = blob_payload_len(id, data_len);
  WEIR_ASSERT(WEIR__ENV_HDR + n <= WEIR__CHUNK_MAX);
  uint8_t *p = buf + WEIR__ENV_HDR;
  p = put_scalar(p, 0x08, id.ckpt);   /* 1: checkpoint */
  p = put_scalar(p, 0x10, id.record); /* 2: record */
  p = put_scalar(p, 0x18, id.seq);    /* 3: seq */
  if (data_len) {
    *p++ = 0x22; /* 4: data, bytes */
    p = put_varint(p, data_len);
    memcpy(p, data, data_len);
  }
  weir__env_seal(buf, WEIR_STORE_FORMAT, WEIR__KIND_BLOB, (uint32_t)n);
}

static int check_chunk_id(weir__chunk_id got, weir__chunk_id expect, char *err, size_t errlen) {
  if (got.ckpt == expect.ckpt && got.record == expect.record && got.seq == expect.seq) return 0;
  return fail(WEIR_ECORRUPT, err, errlen,
              "the value claims to be chunk %u of record %u of checkpoint %llu", got.seq,
              got.record, (unsigned long long)got.ckpt);
}

int weir__chunk_decode(const void *value, size_t len, weir__chunk_id expect, weir__chunk *out,
                       char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const uint8_t *p;
  size_t n;
  uint16_t kind;
  int rc = open_kind(value, len, 0, "chunk", &p, &n, &kind, err, errlen);
  if (rc < 0) return rc;
  uint16_t format = weir__env_version(value);
  unsigned long inj = injected;
  switch (kind) {
  case WEIR__KIND_U64: {
    Weirpb__U64Chunk *m = weirpb__u64_chunk__unpack(&pbc_alloc, n, p);
    if (m == NULL) return undecodable(inj, "chunk", n, err, errlen);
    weir__chunk_id got = {m->checkpoint, m->record, m->seq};
    if ((rc = check_chunk_id(got, expect, err, errlen)) < 0) {
    } else if (m->n_keys != m->n_values || m->n_keys == 0) {
      rc = fail(WEIR_ECORRUPT, err, errlen, "u64 chunk with %zu keys and %zu values", m->n_keys,
                m->n_values);
    } else {
      for (size_t i = 1; i < m->n_keys; i++) {
        if (weir__u64_order(format, m->keys[i]) <= weir__u64_order(format, m->keys[i - 1])) {
          rc = fail(WEIR_ECORRUPT, err, errlen, "u64 chunk: key %llu %s key %llu%s",
                    (unsigned long long)m->keys[i],
                    m->keys[i] == m->keys[i - 1] ? "repeats" : "follows",
                    (unsigned long long)m->keys[i - 1], format >= 2 ? " (in hash order)" : "");
          break;
        }
      }
    }
    if (rc < 0) {
      weirpb__u64_chunk__free_unpacked(m, &pbc_alloc);
      return rc;
    }
    out->n = m->n_keys;
    out->keys = m->keys;
    out->values = m->values;
    out->id = got;
    out->msg_ = m;
    break;
  }
  case WEIR__KIND_U64_VALUES: {
    Weirpb__U64Values *m = weirpb__u64_values__unpack(&pbc_alloc, n, p);
    if (m == NULL) return undecodable(inj, "chunk", n, err, errlen);
    weir__chunk_id got = {m->checkpoint, m->record, m->seq};
    if ((rc = check_chunk_id(got, expect, err, errlen)) < 0) {
    } else if (m->n_values == 0) {
      rc = fail(WEIR_ECORRUPT, err, errlen, "u64 values chunk without values");
    }
    if (rc < 0) {
      weirpb__u64_values__free_unpacked(m, &pbc_alloc);
      return rc;
    }
    out->n = m->n_values;
    out->values = m->values;
    out->id = got;
    out->msg_ = m;
    break;
  }
  case WEIR__KIND_BYTES: {
    Weirpb__BytesChunk *m = weirpb__bytes_chunk__unpack(&pbc_alloc, n, p);
    if (m == NULL) return undecodable(inj, "chunk", n, err, errlen);
    weir__chunk_id got = {m->checkpoint, m->record, m->seq};
    if ((rc = check_chunk_id(got, expect, err, errlen)) < 0) {
    } else if (m->n_route != m->n_klen || m->n_route != m->n_vlen) {
      rc = fail(WEIR_ECORRUPT, err, errlen,
                "byte-string chunk with %zu routes, %zu key lengths and %zu value lengths",
                m->n_route, m->n_klen, m->n_vlen);
    } else if (m->n_route == 0 && m->data.len == 0) {
      rc = fail(WEIR_ECORRUPT, err, errlen, "empty byte-string chunk");
    }
    if (rc < 0) {
      weirpb__bytes_chunk__free_unpacked(m, &pbc_alloc);
      return rc;
    }
    out->n = m->n_route;
    out->route = m->route;
    out->klen = m->klen;
    out->vlen = m->vlen;
    out->data = m->data.data;
    out->data_len = m->data.len;
    out->id = got;
    out->msg_ = m;
    break;
  }
  case WEIR__KIND_BLOB: {
    Weirpb__BlobChunk *m = weirpb__blob_chunk__unpack(&pbc_alloc, n, p);
    if (m == NULL) return undecodable(inj, "chunk", n, err, errlen);
    weir__chunk_id got = {m->checkpoint, m->record, m->seq};
    if ((rc = check_chunk_id(got, expect, err, errlen)) < 0) {
    } else if (m->data.len == 0) {
      rc = fail(WEIR_ECORRUPT, err, errlen, "empty blob chunk");
    }
    if (rc < 0) {
      weirpb__blob_chunk__free_unpacked(m, &pbc_alloc);
      return rc;
    }
    out->data = m->data.data;
    out->data_len = m->data.len;
    out->id = got;
    out->msg_ = m;
    break;
  }
  case WEIR__KIND_NS: {
    /* A repeated (key, ns) is found where the entries are inserted (load
     * checks the section as a whole, across chunks). */
    Weirpb__NsChunk *m = weirpb__ns_chunk__unpack(&pbc_alloc, n, p);
    if (m == NULL) return undecodable(inj, "chunk", n, err, errlen);
    weir__chunk_id got = {m->checkpoint, m->record, m->seq};
    if ((rc = check_chunk_id(got, expect, err, errlen)) < 0) {
    } else if (m->n_keys != m->n_ns || m->n_keys != m->n_values || m->n_keys == 0) {
      rc = fail(WEIR_ECORRUPT, err, errlen,
                "namespaced chunk with %zu keys, %zu namespaces and %zu values", m->n_keys, m->n_ns,
                m->n_values);
    }
    if (rc < 0) {
      weirpb__ns_chunk__free_unpacked(m, &pbc_alloc);
      return rc;
    }
    out->n = m->n_keys;
    out->keys = m->keys;
    out->ns = m->ns;
    out->values = m->values;
    out->id = got;
    out->msg_ = m;
    break;
  }
  case WEIR__KIND_TIMERS: {
    Weirpb__TimerChunk *m = weirpb__timer_chunk__unpack(&pbc_alloc, n, p);
    if (m == NULL) return undecodable(inj, "chunk", n, err, errlen);
    weir__chunk_id got = {m->checkpoint, m->record, m->seq};
    if ((rc = check_chunk_id(got, expect, err, errlen)) < 0) {
    } else if (m->n_keys != m->n_ts || m->n_keys != m->n_domain || m->n_keys == 0) {
      rc = fail(WEIR_ECORRUPT, err, errlen, "timer chunk with %zu keys, %zu times and %zu domains",
                m->n_keys, m->n_ts, m->n_domain);
    } else {
      for (size_t i = 0; i < m->n_keys && rc == 0; i++)
        if (m->domain[i] > 1 || m->ts[i] == INT64_MIN)
          rc = fail(WEIR_ECORRUPT, err, errlen, "timer chunk: timer %zu at %lld in domain %u", i,
                    (long long)m->ts[i], m->domain[i]);
    }
    if (rc < 0) {
      weirpb__timer_chunk__free_unpacked(m, &pbc_alloc);
      return rc;
    }
    out->n = m->n_keys;
    out->keys = m->keys;
    out->ts = m->ts;
    out->domain = m->domain;
    out->id = got;
    out->msg_ = m;
    break;
  }
  default:
    return fail(WEIR_ECORRUPT, err, errlen, "chunk: holds a value of kind %u", kind);
  }
  out->kind = kind;
  out->format = format;
  return 0;
}

void weir__chunk_free(weir__chunk *c) {
  if (c == NULL || c->msg_ == NULL) return;
  switch (c->kind) {
  case WEIR__KIND_U64:
    weirpb__u64_chunk__free_unpacked(c->msg_, &pbc_alloc);
    break;
  case WEIR__KIND_U64_VALUES:
    weirpb__u64_values__free_unpacked(c->msg_, &pbc_alloc);
    break;
  case WEIR__KIND_BYTES:
    weirpb__bytes_chunk__free_unpacked(c->msg_, &pbc_alloc);
    break;
  case WEIR__KIND_BLOB:
    weirpb__blob_chunk__free_unpacked(c->msg_, &pbc_alloc);
    break;
  case WEIR__KIND_NS:
    weirpb__ns_chunk__free_unpacked(c->msg_, &pbc_alloc);
    break;
  case WEIR__KIND_TIMERS:
    weirpb__timer_chunk__free_unpacked(c->msg_, &pbc_alloc);
    break;
  }
  memset(c, 0, sizeof *c);
}
