/* tools/receiver_missing.c: `weir receiver` in a weir built without
 * libmicrohttpd or SQLite (tools/CMakeLists.txt compiles this file instead of
 * receiver.c then): it says what is missing and how to get it, instead of
 * the verb being unknown.
 */
#include "tools.h"

#include "cli.h"

static const char missing[] =
    "weir receiver: this weir was built without libmicrohttpd and SQLite, so the receiver is "
    "not available (install their development files: scripts/setup, or Debian's "
    "libmicrohttpd-dev and libsqlite3-dev, or Homebrew's libmicrohttpd and sqlite; then "
    "rebuild)\n";

int cli_cmd_receiver(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fputs(missing, stderr);
  return CLI_EXIT_USAGE;
}

void cli_help_receiver(FILE *out) {
  fputs(missing, out);
}
