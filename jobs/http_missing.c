/* jobs/http_missing.c: the HTTP endpoint in a weir built without
 * libmicrohttpd (jobs/CMakeLists.txt compiles this file instead of http.c
 * then): --http is refused with a message that says what to install,
 * before the job runs.
 */
#include "http.h"

#include "cli.h"

int cli_http_start(cli_http **out, weir_job *job, const cli_http_opts *o,
                   const cli_http_actions *actions) {
  (void)job;
  (void)o;
  (void)actions;
  *out = NULL;
  cli_usage("--http: this weir was built without libmicrohttpd, so it has no HTTP endpoint "
            "(install its development files: scripts/setup, or Debian's libmicrohttpd-dev, or "
            "Homebrew's libmicrohttpd; then rebuild)");
  return WEIR_EINVAL;
}

void cli_http_stop(cli_http *h) {
  (void)h;
}
