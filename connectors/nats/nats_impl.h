/* nats_impl.h: private to connectors/nats/: what the NATS JetStream sink (nats.c) and
 * source (nats_source.c) share (nats_conn.c): their URL, a connection with
 * bounded timeouts, and the stream that covers a subject.
 *
 * A NATS URL is nats://HOST:PORT/SUBJECT[?stream=NAME][&...]: the server is
 * nats://HOST:PORT, SUBJECT is where records go (sink) or come from
 * (source), and stream= names the JetStream stream that holds SUBJECT
 * (default WEIR). Each user takes its own further parameters out. The
 * server may be a list, nats://HOST:PORT,HOST:PORT,.../SUBJECT (the
 * servers of one cluster): libnats connects to one of them and moves to
 * another when it fails.
 */
#ifndef WEIR_NATS_IMPL_H
#define WEIR_NATS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weir/error.h"

#define WEIR__NATS_DEFAULT_STREAM "WEIR"
#define WEIR__NATS_MAX_SPLITS 1024
#define WEIR__NATS_MAX_TASKS 1024
#define WEIR__NATS_MAX_REPLICAS 5 /* JetStream's own bound on a stream's replicas */

/* A parsed NATS URL. Strings are owned (weir__nats_url_free). */
typedef struct weir__nats_url {
  char *spec;     /* the whole specification, for messages */
  char *server;   /* nats://HOST:PORT, or nats://HOST:PORT,HOST:PORT,... */
  char **servers; /* with a list: each nats://HOST:PORT of it, else NULL */
  int nservers;   /* entries of servers (0: one server, `server`) */
  char *subject;  /* SUBJECT */
  char *stream;   /* stream=, or WEIR__NATS_DEFAULT_STREAM */
  /* sink (and stage edge) parameters */
  uint64_t duplicates_ms; /* duplicates=DURATION: the window of a stream it creates, 0 = server's */
  uint32_t pending;       /* pending=N: acks awaited at most at once, 0 = default */
  uint32_t replicas;      /* replicas=N: the replicas of a stream it creates (1 to 5, default 1) */
  /* source parameters */
  uint64_t rate;   /* rate=R: messages/s over all subtasks, 0 = unlimited */
  uint32_t splits; /* splits=N: the splits a wildcard subject's subjects spread over (>= 1) */
  /* both: tasks=N makes the URL a stage edge (nats_stage.c) into N tasks */
  uint32_t tasks;
} weir__nats_url;

/* Parses spec. Returns 0, or WEIR_ESINK with a message naming the problem in
 * err (errlen bytes). `source` selects which parameters are accepted. */
int weir__nats_url_parse(const char *spec, int source, weir__nats_url *u, char *err, size_t errlen);
void weir__nats_url_free(weir__nats_url *u);

/* Nonzero if subject has a wildcard token (* or >). */
int weir__nats_subject_wild(const char *subj);

/* The input side of a stage edge (u->tasks > 0), nats_stage_source.c. u is
 * borrowed: it must outlive the job. */
struct weir_job;
struct weir_stream *weir__nats_stage_source(struct weir_job *job, const char *name,
                                            weir__nats_url *u, int parallelism);

/* Nonzero if weir was built with libnats. */
int weir__nats_available(void);

#ifdef WEIR_HAVE_NATS
#include <nats/nats.h>

/* Connects to u->server (one of u->servers, with a list) and makes a
 * JetStream context (js options `jo`, may be NULL), with a 2 s connect
 * timeout and reconnects for about a minute.
 * Returns 0, or WEIR_EIO with a message naming the URL in err. Blocks. */
int weir__nats_connect(const weir__nats_url *u, jsOptions *jo, natsConnection **nc, jsCtx **js,
                       char *err, size_t errlen);
/* Adds stream u->stream holding `subject`, with file storage, u's
 * duplicates= window (else the server's) and u's replicas= replicas:
 * js_AddStream's answer. Only a stream that does not exist is added: the
 * callers leave a stream that exists as it is, with its own duplicate
 * window and replica count, whatever the URL says. */
natsStatus weir__nats_add_stream(jsCtx *js, const weir__nats_url *u, const char *subject,
                                 jsStreamInfo **si, jsErrCode *jerr);
/* Closes and frees both (either may be NULL). */
void weir__nats_disconnect(natsConnection *nc, jsCtx *js);
/* The error text of a failed libnats call: the server's message if there is
 * one, else the status text. */
const char *weir__nats_errtext(natsStatus s);
/* Nonzero if subject pattern `pat` (with * and > wildcards) covers `subj`. */
int weir__nats_subject_covers(const char *pat, const char *subj);
#endif

#endif
