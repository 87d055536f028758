/* tools/tools.h: the verbs of the `weir` command that are test tooling
 * rather than jobs: `weir receiver`, a reference HTTP destination that
 * honours Idempotency-Key and counts requests and accepted effects apart
 * (receiver.c), and `weir verify`, which shows the failure window of an
 * effect (verify.c). Private to jobs/ and tools/.
 *
 * The receiver needs libmicrohttpd and SQLite; a weir built without them
 * has a `weir receiver` that says so (receiver_missing.c).
 */
#ifndef WEIR_TOOLS_H
#define WEIR_TOOLS_H

#include <stdio.h>

/* `weir receiver ...` (argv[0] = "receiver"): serves, or with "stats" /
 * "effects" as argv[1] reads a receiver's database. Returns the exit code. */
int cli_cmd_receiver(int argc, char **argv);

/* Prints the help of `weir receiver` on out. */
void cli_help_receiver(FILE *out);

/* `weir verify` (argv[0] = "verify"; argv0 = the command's own argv[0], a
 * fallback to find this executable), and its help. */
int cli_cmd_verify(int argc, char **argv, const char *argv0);
void cli_help_verify(FILE *out);

#endif
