/* jobs/receiver.h: the `weir receiver` verb (private to jobs/), a reference
 * HTTP destination that honours Idempotency-Key and counts requests and
 * accepted effects apart. See receiver.c for what it does and why.
 */
#ifndef WEIR_JOBS_RECEIVER_H
#define WEIR_JOBS_RECEIVER_H

#include <stdio.h>

/* `weir receiver ...` (argv[0] = "receiver"): serves, or with "stats" /
 * "effects" as argv[1] reads a receiver's database. Returns the exit code. */
int cli_cmd_receiver(int argc, char **argv);

/* Prints the help of `weir receiver` on out. */
void cli_help_receiver(FILE *out);

#endif
