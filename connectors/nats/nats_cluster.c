/* nats_cluster.c: owns a job's shared state in NATS for cluster mode
 * (weir/cluster.h; docs/scale-out.md §3-§4): the two key-value buckets
 * (live keys that expire, durable keys that stay) and the stream of
 * replicated checkpoints.
 *
 * Why two buckets: a lease is a key that dies when its holder stops
 * writing it, which a bucket's TTL gives without trusting any member's
 * clock; a fencing epoch and a commit point must outlive every holder.
 * Compare-and-set on revisions (kvStore_Create: only if absent;
 * kvStore_Update: only at the revision last seen) is the one way state
 * changes hands.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "nats_impl.h"
#include "weir/cluster.h"

#ifndef WEIR_HAVE_NATS

int weir_cluster_open(weir_cluster **out, const char *servers, const char *job, uint32_t lease_ms,
                      int replicas, char *err, size_t errlen) {
  (void)servers, (void)job, (void)lease_ms, (void)replicas;
  *out = NULL;
  snprintf(err, errlen, "cluster mode needs NATS, and this weir was built without libnats");
  return WEIR_EINVAL;
}
void weir_cluster_close(weir_cluster *c) {
  (void)c;
}
int weir_cluster_agree(weir_cluster *c, uint64_t f, int n, int t, char *err, size_t errlen) {
  (void)c, (void)f, (void)n, (void)t, (void)err, (void)errlen;
  return WEIR_EINVAL;
}
int weir_cluster_heartbeat(weir_cluster *c, const char *m) {
  (void)c, (void)m;
  return WEIR_EINVAL;
}
int weir_cluster_members(weir_cluster *c, char ***names, int *n) {
  (void)c, (void)names, (void)n;
  return WEIR_EINVAL;
}
void weir_cluster_leave(weir_cluster *c, const char *m) {
  (void)c, (void)m;
}
void weir_cluster_free_names(char **names, int n) {
  (void)names, (void)n;
}
int weir_cluster_claim(weir_cluster *c, const char *s, const char *m, uint64_t *e, uint64_t *r) {
  (void)c, (void)s, (void)m, (void)e, (void)r;
  return WEIR_EINVAL;
}
int weir_cluster_renew(weir_cluster *c, const char *s, const char *m, uint64_t *r) {
  (void)c, (void)s, (void)m, (void)r;
  return WEIR_EINVAL;
}
void weir_cluster_release(weir_cluster *c, const char *s, uint64_t r) {
  (void)c, (void)s, (void)r;
}
int weir_cluster_holder(weir_cluster *c, const char *s, char *name, size_t len) {
  (void)c, (void)s, (void)name, (void)len;
  return WEIR_EINVAL;
}
int weir_cluster_set_done(weir_cluster *c, const char *s) {
  (void)c, (void)s;
  return WEIR_EINVAL;
}
int weir_cluster_done(weir_cluster *c, const char *s) {
  (void)c, (void)s;
  return WEIR_EINVAL;
}
int weir_cluster_take(weir_cluster *c, const char *s, uint64_t e, const char *p, uint64_t *id,
                      char *err, size_t errlen) {
  (void)c, (void)s, (void)e, (void)p, (void)id, (void)err, (void)errlen;
  return WEIR_EINVAL;
}
int weir_cluster_commit(weir_cluster *c, const char *s, uint64_t id, const char *p, uint64_t b,
                        char *err, size_t errlen) {
  (void)c, (void)s, (void)id, (void)p, (void)b, (void)err, (void)errlen;
  return WEIR_EINVAL;
}

int weir_cluster_graph(weir_cluster *c, uint64_t *f, int *n, int *t) {
  (void)c, (void)f, (void)n, (void)t;
  return WEIR_EINVAL;
}
int weir_cluster_committed(weir_cluster *c, const char *s, uint64_t *e, uint64_t *id) {
  (void)c, (void)s, (void)e, (void)id;
  return WEIR_EINVAL;
}
int weir_cluster_edge_backlog(weir_cluster *c, int edge, int task,
                              void (*fn)(void *user, const char *subject, uint64_t msgs),
                              void *user) {
  (void)c, (void)edge, (void)task, (void)fn, (void)user;
  return WEIR_EINVAL;
}
int weir_cluster_delete(const char *servers, const char *job, char *err, size_t errlen) {
  (void)servers, (void)job;
  snprintf(err, errlen, "cluster mode needs NATS, and this weir was built without libnats");
  return WEIR_EINVAL;
}

#else

/* A checkpoint travels in chunks below NATS's default largest message. */
#define CHUNK_BYTES (512u * 1024u)

struct weir_cluster {
  natsConnection *nc;
  jsCtx *js;
  kvStore *live, *keep;
  char job[128];
  char stream[160]; /* WEIR_<job>_CKPT */
  /* The commit point as this owner last wrote it (weir_cluster_take and
   * weir_cluster_commit): its revision and the subject of the chunks it
   * names (purged once a later one counts). */
  uint64_t ckpt_rev;
  uint64_t epoch; /* the owner's fencing epoch, as weir_cluster_take wrote it */
  char ckpt_subject[256];
};

static int valid_job(const char *job) {
  if (!job || !*job || strlen(job) > 100) return 0;
  for (const char *p = job; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_'))
      return 0;
  return 1;
}

/* Checks job's name and connects to `servers` for it. */
static int connect_job(const char *servers, const char *job, natsConnection **nc, jsCtx **js,
                       char *err, size_t errlen) {
  if (!valid_job(job)) {
    snprintf(err, errlen, "job name '%s': letters, digits, - and _ only (at most 100)",
             job ? job : "");
    return WEIR_EINVAL;
  }
  char spec[1024];
  snprintf(spec, sizeof spec, "%s/weir.%s.ctl", servers, job);
  weir__nats_url u;
  int rc = weir__nats_url_parse(spec, 0, &u, err, errlen);
  if (rc) return rc;
  rc = weir__nats_connect(&u, NULL, nc, js, err, errlen);
  weir__nats_url_free(&u);
  return rc;
}

/* Whether a failed compare-and-set lost the race (the key moved on) rather
 * than went unanswered. */
static int lost_race(natsStatus s) {
  return s == NATS_ERR || s == NATS_NOT_FOUND;
}

static int bucket(weir_cluster *c, kvStore **kv, const char *name, int64_t ttl_ms, int replicas,
                  char *err, size_t errlen) {
  natsStatus s = js_KeyValue(kv, c->js, name);
  if (s == NATS_OK) return 0;
  if (replicas < 0) {
    snprintf(err, errlen, "job '%s' has nothing in NATS (no bucket %s)", c->job, name);
    return WEIR_ENOENT;
  }
  kvConfig cfg;
  kvConfig_Init(&cfg);
  cfg.Bucket = name;
  cfg.History = 1;
  cfg.TTL = ttl_ms * 1000000; /* nanoseconds, as a stream's MaxAge */
  cfg.StorageType = js_FileStorage;
  cfg.Replicas = replicas;
  /* Unanswered requests are asked again for a while: a cluster making
   * other members' replicated buckets at the same moment, or electing a
   * leader, answers late. */
  for (int tries = 0; tries < 4; tries++) {
    if (tries) weir_sleep_us(500000);
    s = js_CreateKeyValue(kv, c->js, &cfg);
    if (s == NATS_OK || js_KeyValue(kv, c->js, name) == NATS_OK) return 0;
    if (s != NATS_TIMEOUT && s != NATS_NO_RESPONDERS) break;
  }
  snprintf(err, errlen, "cannot open or make the key-value bucket %s: %s", name,
           weir__nats_errtext(s));
  return WEIR_EIO;
}

int weir_cluster_open(weir_cluster **out, const char *servers, const char *job, uint32_t lease_ms,
                      int replicas, char *err, size_t errlen) {
  *out = NULL;
  weir_cluster *c = weir_calloc(1, sizeof *c);
  int rc = connect_job(servers, job, &c->nc, &c->js, err, errlen);
  snprintf(c->job, sizeof c->job, "%s", job ? job : "");
  snprintf(c->stream, sizeof c->stream, "WEIR_%s_CKPT", c->job);
  char name[160];
  if (!rc) {
    snprintf(name, sizeof name, "weir_%s_live", job);
    rc = bucket(c, &c->live, name, lease_ms, replicas, err, errlen);
  }
  if (!rc) {
    snprintf(name, sizeof name, "weir_%s", job);
    rc = bucket(c, &c->keep, name, 0, replicas, err, errlen);
  }
  if (!rc) {
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    if (replicas > 0 && js_GetStreamInfo(&si, c->js, c->stream, NULL, &jerr) != NATS_OK) {
      char subj[160];
      snprintf(subj, sizeof subj, "weir.%s.ckpt.>", job);
      const char *subjects[1] = {subj};
      jsStreamConfig cfg;
      jsStreamConfig_Init(&cfg);
      cfg.Name = c->stream;
      cfg.Subjects = subjects;
      cfg.SubjectsLen = 1;
      cfg.Storage = js_FileStorage;
      cfg.Replicas = replicas;
      natsStatus s = js_AddStream(&si, c->js, &cfg, NULL, &jerr);
      if (s != NATS_OK && js_GetStreamInfo(&si, c->js, c->stream, NULL, &jerr) != NATS_OK) {
        snprintf(err, errlen, "cannot make the checkpoint stream %s: %s", c->stream,
                 weir__nats_errtext(s));
        rc = WEIR_EIO;
      }
    }
    jsStreamInfo_Destroy(si);
  }
  if (rc) {
    weir_cluster_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void weir_cluster_close(weir_cluster *c) {
  if (!c) return;
  kvStore_Destroy(c->live);
  kvStore_Destroy(c->keep);
  weir__nats_disconnect(c->nc, c->js);
  weir_free(c);
}

/* The value of key in kv into buf (NUL-terminated) and its revision:
 * 1 if there is one, 0 if not, WEIR_EIO. */
static int get(kvStore *kv, const char *key, char *buf, size_t cap, uint64_t *rev) {
  kvEntry *e = NULL;
  natsStatus s = kvStore_Get(&e, kv, key);
  if (s == NATS_NOT_FOUND) return 0;
  if (s != NATS_OK) return WEIR_EIO;
  int n = kvEntry_ValueLen(e);
  if (n < 0 || (size_t)n >= cap) n = cap ? (int)cap - 1 : 0;
  if (buf && cap) {
    memcpy(buf, kvEntry_Value(e), (size_t)n);
    buf[n] = '\0';
  }
  if (rev) *rev = kvEntry_Revision(e);
  kvEntry_Destroy(e);
  return 1;
}

int weir_cluster_agree(weir_cluster *c, uint64_t fingerprint, int nstages, int tasks, char *err,
                       size_t errlen) {
  char mine[64], theirs[64];
  snprintf(mine, sizeof mine, "%016llx %d %d", (unsigned long long)fingerprint, nstages, tasks);
  /* A bucket just made on a cluster answers once its replicas elected a
   * leader: unanswered reads are tried again for a while. */
  for (int tries = 0; tries < 40; tries++) {
    int g = get(c->keep, "graph", theirs, sizeof theirs, NULL);
    if (g < 0) {
      weir_sleep_us(250000);
      continue;
    }
    if (g == 1) {
      if (strcmp(mine, theirs) == 0) return 0;
      snprintf(err, errlen,
               "job '%s' runs another graph in this cluster (fingerprint, stages and tasks "
               "of each: %s; this member's: %s): run the same job with the same --tasks, or give "
               "this one another --job name",
               c->job, theirs, mine);
      return WEIR_EMISMATCH;
    }
    uint64_t rev;
    if (kvStore_CreateString(&rev, c->keep, "graph", mine) == NATS_OK) return 0;
  }
  snprintf(err, errlen, "cannot read or record the job's graph in NATS (tried for 10 s)");
  return WEIR_EIO;
}

int weir_cluster_heartbeat(weir_cluster *c, const char *member) {
  char key[160];
  snprintf(key, sizeof key, "member.%s", member);
  uint64_t rev;
  return kvStore_PutString(&rev, c->live, key, member) == NATS_OK ? 0 : WEIR_EIO;
}

void weir_cluster_leave(weir_cluster *c, const char *member) {
  char key[160];
  snprintf(key, sizeof key, "member.%s", member);
  (void)kvStore_Delete(c->live, key);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int weir_cluster_members(weir_cluster *c, char ***names, int *n) {
  *names = NULL;
  *n = 0;
  kvKeysList l = {0};
  natsStatus s = kvStore_Keys(&l, c->live, NULL);
  if (s == NATS_NOT_FOUND) return 0;
  if (s != NATS_OK) return WEIR_EIO;
  char **v = weir_calloc((size_t)l.Count + 1, sizeof *v);
  int k = 0;
  for (int i = 0; i < l.Count; i++)
    if (!strncmp(l.Keys[i], "member.", 7)) v[k++] = weir_strdup(l.Keys[i] + 7);
  kvKeysList_Destroy(&l);
  qsort(v, (size_t)k, sizeof *v, cmp_str);
  *names = v;
  *n = k;
  return 0;
}

void weir_cluster_free_names(char **names, int n) {
  for (int i = 0; i < n; i++) weir_free(names[i]);
  weir_free(names);
}

int weir_cluster_claim(weir_cluster *c, const char *task, const char *member, uint64_t *epoch,
                       uint64_t *rev) {
  char key[64], val[64];
  snprintf(key, sizeof key, "lease.%s", task);
  natsStatus s = kvStore_CreateString(rev, c->live, key, member);
  if (s != NATS_OK) return lost_race(s) ? 0 : WEIR_EIO;
  /* The lease is ours: the next epoch, by compare-and-set too (a holder
   * that lost its lease never gets past the create above). */
  snprintf(key, sizeof key, "epoch.%s", task);
  for (int tries = 0; tries < 5; tries++) {
    uint64_t erev = 0;
    int g = get(c->keep, key, val, sizeof val, &erev);
    if (g < 0) break;
    uint64_t e = g ? strtoull(val, NULL, 10) + 1 : 1, r;
    snprintf(val, sizeof val, "%llu", (unsigned long long)e);
    s = g ? kvStore_UpdateString(&r, c->keep, key, val, erev)
          : kvStore_CreateString(&r, c->keep, key, val);
    if (s == NATS_OK) {
      *epoch = e;
      return 1;
    }
  }
  weir_cluster_release(c, task, *rev);
  return WEIR_EIO;
}

int weir_cluster_renew(weir_cluster *c, const char *task, const char *member, uint64_t *rev) {
  char key[64];
  snprintf(key, sizeof key, "lease.%s", task);
  uint64_t r;
  natsStatus s = kvStore_UpdateString(&r, c->live, key, member, *rev);
  if (s == NATS_OK) {
    *rev = r;
    return 0;
  }
  return lost_race(s) ? WEIR_EFENCED : WEIR_EIO;
}

void weir_cluster_release(weir_cluster *c, const char *task, uint64_t rev) {
  char key[64];
  snprintf(key, sizeof key, "lease.%s", task);
  uint64_t r;
  /* Only if still ours: overwrite with a tombstone-like empty value at
   * our revision, then delete it (a delete has no revision check). */
  if (kvStore_UpdateString(&r, c->live, key, "", rev) == NATS_OK)
    (void)kvStore_Delete(c->live, key);
}

int weir_cluster_holder(weir_cluster *c, const char *task, char *name, size_t len) {
  char key[64];
  snprintf(key, sizeof key, "lease.%s", task);
  int g = get(c->live, key, name, len, NULL);
  if (g == 0 && len) name[0] = '\0';
  return g < 0 ? g : 0;
}

int weir_cluster_set_done(weir_cluster *c, const char *task) {
  char key[64];
  snprintf(key, sizeof key, "done.%s", task);
  uint64_t r;
  return kvStore_PutString(&r, c->keep, key, "1") == NATS_OK ? 0 : WEIR_EIO;
}

int weir_cluster_done(weir_cluster *c, const char *task) {
  char key[64];
  snprintf(key, sizeof key, "done.%s", task);
  return get(c->keep, key, NULL, 0, NULL);
}

/* ckpt.<task>: "<epoch> <id> <bytes> <n> <seq>..." */
typedef struct commit_rec {
  uint64_t epoch, id, bytes;
  uint32_t n;
  uint64_t *seqs;
} commit_rec;

static int rec_parse(const char *s, commit_rec *r) {
  char *end;
  memset(r, 0, sizeof *r);
  r->epoch = strtoull(s, &end, 10);
  r->id = strtoull(end, &end, 10);
  r->bytes = strtoull(end, &end, 10);
  unsigned long long n = strtoull(end, &end, 10);
  if (n > (1u << 24)) return WEIR_ECORRUPT;
  r->n = (uint32_t)n;
  r->seqs = weir_calloc(r->n + 1, sizeof *r->seqs);
  for (uint32_t i = 0; i < r->n; i++) {
    char *p = end;
    r->seqs[i] = strtoull(p, &end, 10);
    if (end == p) return WEIR_ECORRUPT;
  }
  return 0;
}

/* The record as text, allocated. */
static char *rec_text(const commit_rec *r) {
  size_t cap = 96 + (size_t)r->n * 21;
  char *s = weir_malloc(cap);
  size_t o = (size_t)snprintf(s, cap, "%llu %llu %llu %u", (unsigned long long)r->epoch,
                              (unsigned long long)r->id, (unsigned long long)r->bytes, r->n);
  for (uint32_t i = 0; i < r->n; i++)
    o += (size_t)snprintf(s + o, cap - o, " %llu", (unsigned long long)r->seqs[i]);
  return s;
}

/* The commit point's value, allocated (NULL: none), and its revision. */
static int get_commit(weir_cluster *c, const char *task, char **val, uint64_t *rev) {
  char key[64];
  snprintf(key, sizeof key, "ckpt.%s", task);
  *val = NULL;
  kvEntry *e = NULL;
  natsStatus s = kvStore_Get(&e, c->keep, key);
  if (s == NATS_NOT_FOUND) return 0;
  if (s != NATS_OK) return WEIR_EIO;
  int n = kvEntry_ValueLen(e);
  *val = weir_malloc((size_t)n + 1);
  memcpy(*val, kvEntry_Value(e), (size_t)n);
  (*val)[n] = '\0';
  *rev = kvEntry_Revision(e);
  kvEntry_Destroy(e);
  return 1;
}

static int fetch(weir_cluster *c, const char *task, const commit_rec *r, const char *path,
                 char *err, size_t errlen) {
  char subj[256];
  snprintf(subj, sizeof subj, "weir.%s.ckpt.%s.%llu", c->job, task, (unsigned long long)r->id);
  FILE *f = fopen(path, "wb");
  if (!f) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return -errno;
  }
  int rc = 0;
  uint64_t got = 0;
  for (uint32_t i = 0; i < r->n && !rc; i++) {
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetMsg(&m, c->js, c->stream, r->seqs[i], NULL, &jerr);
    if (s != NATS_OK) {
      snprintf(err, errlen, "checkpoint %llu of task %s: chunk %u (sequence %llu) is missing: %s",
               (unsigned long long)r->id, task, i, (unsigned long long)r->seqs[i],
               weir__nats_errtext(s));
      rc = s == NATS_NOT_FOUND || jerr ? WEIR_ECORRUPT : WEIR_EIO;
      break;
    }
    if (strcmp(natsMsg_GetSubject(m), subj) != 0) {
      snprintf(err, errlen, "checkpoint %llu of task %s: sequence %llu is not its chunk",
               (unsigned long long)r->id, task, (unsigned long long)r->seqs[i]);
      rc = WEIR_ECORRUPT;
    } else {
      size_t n = (size_t)natsMsg_GetDataLength(m);
      if (fwrite(natsMsg_GetData(m), 1, n, f) != n) rc = -EIO;
      got += n;
    }
    natsMsg_Destroy(m);
  }
  if (fclose(f) != 0 && !rc) rc = -EIO;
  if (!rc && got != r->bytes) {
    snprintf(err, errlen, "checkpoint %llu of task %s: %llu bytes of %llu",
             (unsigned long long)r->id, task, (unsigned long long)got,
             (unsigned long long)r->bytes);
    rc = WEIR_ECORRUPT;
  }
  if (rc == -EIO) snprintf(err, errlen, "cannot write %s", path);
  return rc;
}

int weir_cluster_take(weir_cluster *c, const char *task, uint64_t epoch, const char *path,
                      uint64_t *id, char *err, size_t errlen) {
  char key[64];
  snprintf(key, sizeof key, "ckpt.%s", task);
  *id = 0;
  for (int tries = 0; tries < 5; tries++) {
    char *val = NULL;
    uint64_t rev = 0, r;
    int g = get_commit(c, task, &val, &rev);
    for (int w = 0; g < 0 && w < 40; w++) { /* unanswered: a leader being elected */
      weir_sleep_us(250000);
      g = get_commit(c, task, &val, &rev);
    }
    if (g < 0) {
      snprintf(err, errlen, "cannot read the commit point of task %s", task);
      return g;
    }
    commit_rec rec = {0};
    int rc = g ? rec_parse(val, &rec) : 0;
    weir_free(val);
    if (rc) {
      weir_free(rec.seqs);
      snprintf(err, errlen, "the commit point of task %s is damaged", task);
      return rc;
    }
    if (rec.epoch > epoch) {
      weir_free(rec.seqs);
      snprintf(err, errlen, "task %s was taken over by epoch %llu (this owner's: %llu)", task,
               (unsigned long long)rec.epoch, (unsigned long long)epoch);
      return WEIR_EFENCED;
    }
    rec.epoch = epoch;
    char *text = rec_text(&rec);
    natsStatus s = g ? kvStore_UpdateString(&r, c->keep, key, text, rev)
                     : kvStore_CreateString(&r, c->keep, key, text);
    weir_free(text);
    if (s != NATS_OK) {
      weir_free(rec.seqs);
      if (lost_race(s)) continue; /* a commit came between: read it again */
      snprintf(err, errlen, "cannot write the commit point of task %s: %s", task,
               weir__nats_errtext(s));
      return WEIR_EIO;
    }
    c->ckpt_rev = r;
    c->epoch = epoch;
    snprintf(c->ckpt_subject, sizeof c->ckpt_subject, "weir.%s.ckpt.%s.%llu", c->job, task,
             (unsigned long long)rec.id);
    rc = rec.id ? fetch(c, task, &rec, path, err, errlen) : 0;
    if (!rc) *id = rec.id;
    weir_free(rec.seqs);
    return rc;
  }
  snprintf(err, errlen, "the commit point of task %s keeps moving", task);
  return WEIR_EFENCED;
}

int weir_cluster_commit(weir_cluster *c, const char *task, uint64_t id, const char *path,
                        uint64_t bytes, char *err, size_t errlen) {
  char subj[256], key[64];
  snprintf(subj, sizeof subj, "weir.%s.ckpt.%s.%llu", c->job, task, (unsigned long long)id);
  snprintf(key, sizeof key, "ckpt.%s", task);
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return -errno;
  }
  commit_rec rec = {.id = id, .bytes = bytes};
  uint32_t cap = (uint32_t)(bytes / CHUNK_BYTES + 2);
  rec.seqs = weir_calloc(cap, sizeof *rec.seqs);
  char *buf = weir_malloc(CHUNK_BYTES);
  int rc = 0;
  uint64_t sent = 0;
  /* The same subject again (a checkpoint id committed by an owner that
   * died after publishing): start clean. */
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Stream.Purge.Subject = subj;
  jsErrCode jerr = 0;
  (void)js_PurgeStream(c->js, c->stream, &jo, &jerr);
  while (!rc) {
    size_t n = fread(buf, 1, CHUNK_BYTES, f);
    if (n == 0) break;
    jsPubAck *ack = NULL;
    natsStatus s = js_Publish(&ack, c->js, subj, buf, (int)n, NULL, &jerr);
    if (s != NATS_OK || rec.n >= cap) {
      snprintf(err, errlen, "checkpoint %llu of task %s: cannot store it in %s: %s",
               (unsigned long long)id, task, c->stream, weir__nats_errtext(s));
      rc = WEIR_EIO;
    } else {
      rec.seqs[rec.n++] = ack->Sequence;
      sent += n;
    }
    jsPubAck_Destroy(ack);
  }
  fclose(f);
  weir_free(buf);
  if (!rc && sent != bytes) {
    snprintf(err, errlen, "checkpoint %llu of task %s: read %llu bytes of %llu",
             (unsigned long long)id, task, (unsigned long long)sent, (unsigned long long)bytes);
    rc = WEIR_EIO;
  }
  if (!rc) {
    /* At the revision this owner last wrote: a takeover since moved it. */
    rec.epoch = c->epoch;
    char *text = rec_text(&rec);
    uint64_t r;
    natsStatus s = kvStore_UpdateString(&r, c->keep, key, text, c->ckpt_rev);
    weir_free(text);
    if (s == NATS_OK)
      c->ckpt_rev = r;
    else
      rc = lost_race(s) ? WEIR_EFENCED : WEIR_EIO;
    if (rc == WEIR_EFENCED)
      snprintf(err, errlen,
               "task %s was taken over by another owner: checkpoint %llu does "
               "not count",
               task, (unsigned long long)id);
    else if (rc)
      snprintf(err, errlen, "checkpoint %llu of task %s: the commit point was not written",
               (unsigned long long)id, task);
  }
  weir_free(rec.seqs);
  if (rc) return rc;
  /* The previous checkpoint's chunks are no longer named. */
  if (c->ckpt_subject[0] && strcmp(c->ckpt_subject, subj) != 0) {
    jsOptions_Init(&jo);
    jo.Stream.Purge.Subject = c->ckpt_subject;
    (void)js_PurgeStream(c->js, c->stream, &jo, &jerr);
  }
  snprintf(c->ckpt_subject, sizeof c->ckpt_subject, "%s", subj);
  return 0;
}

int weir_cluster_graph(weir_cluster *c, uint64_t *fingerprint, int *nstages, int *tasks) {
  char v[64];
  int g = get(c->keep, "graph", v, sizeof v, NULL);
  if (g <= 0) return g;
  unsigned long long f = 0;
  if (sscanf(v, "%llx %d %d", &f, nstages, tasks) != 3) return WEIR_ECORRUPT;
  *fingerprint = f;
  return 1;
}

int weir_cluster_committed(weir_cluster *c, const char *task, uint64_t *epoch, uint64_t *id) {
  char *val = NULL;
  uint64_t rev;
  *epoch = *id = 0;
  int g = get_commit(c, task, &val, &rev);
  if (g <= 0) return g;
  commit_rec r;
  int rc = rec_parse(val, &r);
  weir_free(val);
  if (!rc) {
    *epoch = r.epoch;
    *id = r.id;
  }
  weir_free(r.seqs);
  return rc;
}

int weir_cluster_edge_backlog(weir_cluster *c, int edge, int task,
                              void (*fn)(void *user, const char *subject, uint64_t msgs),
                              void *user) {
  char name[160], filter[200];
  snprintf(name, sizeof name, "WEIR_%s_E%d", c->job, edge);
  snprintf(filter, sizeof filter, "weir.%s.e%d.*.%d", c->job, edge, task);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Stream.Info.SubjectsFilter = filter;
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_GetStreamInfo(&si, c->js, name, &jo, &jerr);
  if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr) return WEIR_ENOENT;
  if (s != NATS_OK) return WEIR_EIO;
  jsStreamStateSubjects *subs = si->State.Subjects;
  for (int i = 0; subs && i < subs->Count; i++) fn(user, subs->List[i].Subject, subs->List[i].Msgs);
  jsStreamInfo_Destroy(si);
  return 0;
}

int weir_cluster_delete(const char *servers, const char *job, char *err, size_t errlen) {
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  int rc = connect_job(servers, job, &nc, &js, err, errlen);
  if (rc) return rc;
  char name[160];
  int nstages = 0;
  kvStore *kv = NULL;
  snprintf(name, sizeof name, "weir_%s", job);
  if (js_KeyValue(&kv, js, name) == NATS_OK) {
    char v[64];
    unsigned long long f;
    if (get(kv, "graph", v, sizeof v, NULL) == 1 && sscanf(v, "%llx %d", &f, &nstages) != 2)
      nstages = 0;
    kvStore_Destroy(kv);
  }
  (void)js_DeleteKeyValue(js, name);
  snprintf(name, sizeof name, "weir_%s_live", job);
  (void)js_DeleteKeyValue(js, name);
  snprintf(name, sizeof name, "WEIR_%s_CKPT", job);
  (void)js_DeleteStream(js, name, NULL, NULL);
  for (int k = 1; k < nstages; k++) {
    snprintf(name, sizeof name, "WEIR_%s_E%d", job, k);
    (void)js_DeleteStream(js, name, NULL, NULL);
  }
  weir__nats_disconnect(nc, js);
  return 0;
}

#endif
