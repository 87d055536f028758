/* jobs/http.h: the HTTP endpoint of a running job (`weir run ... --http
 * HOST:PORT`): Prometheus metrics, the JSON API, the dashboard page, and the
 * mutating requests (savepoint, stop) handed to callbacks of the caller.
 *
 * DESIGN. The endpoint runs on libmicrohttpd's threads (one per
 * connection) and reads the job only through calls that are safe while it
 * runs (weir_job_metrics_read, weir_job_plan, weir_job_checkpoint_stats).
 * It is started before weir_job_run and stopped after it returned, before
 * weir_job_destroy. The rules it enforces (loopback by default, bearer
 * tokens, the Host check, no CORS) are in http.c. In a weir built without
 * libmicrohttpd, http_missing.c stands in: cli_http_start refuses with a
 * message that says what to install.
 */
#ifndef WEIR_JOBS_HTTP_H
#define WEIR_JOBS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "weir/weir.h"

/* What POST /api/v1/savepoints and POST /api/v1/stop do: blocking calls
 * made on the HTTP connection's thread, each returning 0 (with the
 * savepoint's path in `path`, "" if none) or a negative WEIR_E* code with
 * a message in `err` (NUL-terminated). A NULL callback answers 501 with a
 * message. `out_path_or_null` is the request's `out` parameter. */
typedef struct cli_http_actions {
  int (*savepoint)(void *user, const char *out_path_or_null, char *path, size_t path_len, char *err,
                   size_t err_len);
  int (*stop)(void *user, int savepoint, int drain, char *path, size_t path_len, char *err,
              size_t err_len);
  void *user;
} cli_http_actions;

typedef struct cli_http_opts {
  const char *listen;     /* HOST:PORT (--http); port 0: a free one */
  const char *token_file; /* --http-token FILE, or NULL */
  /* The state directory (NULL: none): the bound address goes to DIR/http
   * and the run's token to DIR/http-token (mode 0600) once the run holds
   * the directory's lease; both are removed when the endpoint stops. */
  const char *state_dir;
  uint64_t total_records; /* records the sources emit in all, 0: unknown */
} cli_http_opts;

typedef struct cli_http cli_http;

/* Binds o->listen and starts serving `job` (which must outlive the
 * endpoint). actions may be NULL (every mutating request answers 501).
 * Returns 0 with *out set, WEIR_EINVAL after a usage message on stderr (a
 * bad address, a non-loopback address without --http-token, an empty or
 * unreadable token file: exit 2), or another negative code after a
 * message (the address is busy: exit 1). Logs the bound address. */
int cli_http_start(cli_http **out, weir_job *job, const cli_http_opts *o,
                   const cli_http_actions *actions);

/* Stops serving (waits for requests in progress, a blocking action
 * included) and removes DIR/http and DIR/http-token if it wrote them.
 * NULL: no-op. */
void cli_http_stop(cli_http *h);

#endif
