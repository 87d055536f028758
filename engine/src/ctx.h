/* ctx.h: what ctx.c (operator contexts) gives the other engine files. The
 * context itself (struct weir_ctx) is laid out in task.h; the operators'
 * API to it is in weir/job.h.
 */
#ifndef WEIR_CTX_H
#define WEIR_CTX_H

#include <stdint.h>

#include "graph.h"

weir_ctx *weir__ctx_create(weir__task *t, weir__node *node, uint32_t subtask);
void weir__ctx_destroy(weir_ctx *ctx);
/* Records an operator error in the job with the operator's name. */
int weir__ctx_report(weir_ctx *ctx, int err, const char *what);

#endif
