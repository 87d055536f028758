/* jobs/cluster.h: cluster mode of `weir run` (cluster.c; docs/scale-out.md),
 * private to jobs/.
 */
#ifndef WEIR_JOBS_CLUSTER_H
#define WEIR_JOBS_CLUSTER_H

#include "cli.h"

/* main()'s arguments: a member runs each task as its own command line
 * with the task added. */
extern int cli_main_argc;
extern char **cli_main_argv;

/* Checks the cluster flags of eng for a job named job_name; returns 0 or
 * -1 after a usage message. */
int cli_cluster_check(const cli_engine *eng, const char *job_name);

/* Runs this process as member eng->member of the cluster until every task
 * of the built job finished, or it is stopped: the exit code. */
int cli_cluster_member(weir_job *job, const cli_engine *eng);

/* A task's run (eng->cluster_stage >= 0, eng->cluster_task): cuts the
 * job to the task, takes its commit point over and points eng at the
 * task's state directory and the checkpoint to restore. Returns an exit code (0: go on
 * with *t, which cli_cluster_task_opts puts into the run's options and
 * cli_cluster_task_end frees after the run). */
typedef struct cli_cluster_task cli_cluster_task;
int cli_cluster_task_prepare(weir_job *job, cli_engine *eng, cli_cluster_task **t);
void cli_cluster_task_opts(cli_cluster_task *t, weir_run_opts *o);
void cli_cluster_task_end(cli_cluster_task *t);

/* weir cluster status|delete. */
int cli_cmd_cluster(int argc, char **argv);
void cli_help_cluster(FILE *out);

#endif
