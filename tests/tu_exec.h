/* tu_exec: the executors' jobs driven to their end on a private event
 * base, for tests (tu_exec.c). */
#ifndef TU_EXEC_H
#define TU_EXEC_H

#include "daemon/orch_types.h"

/* ---- runners: a dispatch's jobs, waited for one at a time ------------- */

/* A runner holds the jobs in flight of one dispatch on a private event_base
 * of its own: start never blocks on the child; next runs that loop until
 * some job ends. All on one thread (any thread, one at a time). */
struct tu_runner;

int tu_runner_create(const struct orch_exec_config *cfg, struct tu_runner **out,
                     struct fo_err *err);

/* Kills (SIGKILL to the process group) and reaps every job still running,
 * then frees (NULL-safe). Blocks only until the killed children are gone. */
void tu_runner_free(struct tu_runner *r);

/* Starts one job for prompt (an orch_job on the runner's base); tag comes
 * back from next. The stub's output is a digest of the prompt and its
 * first line; it fails when the prompt contains "#stub-fail", for tests.
 * A model job (CHAT, ANTHROPIC) runs here, synchronously (see
 * orch_exec_config). Errors as orch_job_start: a binary that cannot be run
 * is FO_E_NOT_FOUND naming it. */
int tu_runner_start(struct tu_runner *r, size_t tag, const char *prompt,
                    struct fo_err *err);

/* Jobs started and not yet returned by next. */
size_t tu_runner_active(const struct tu_runner *r);

/* Waits until a job ends (exit, or its timeout: the group is killed) and
 * fills *res (release it) and *tag. Output beyond cfg->output_max is read
 * and dropped, and a marker line says so. FO_E_NOT_FOUND when no job is
 * active; FO_E_IO when the event loop fails; FO_E_NOMEM (with *tag set)
 * when the job's result could not be built. */
int tu_runner_next(struct tu_runner *r, size_t *tag, struct orch_result *res,
                   struct fo_err *err);

/* One job, start to end, on this thread: stub and CLI jobs run as an
 * orch_job on a private event_base, CHAT and ANTHROPIC call the model
 * client. Errors as orch_job_start (FO_E_INVALID for a model kind without
 * models), and FO_E_IO when the event loop fails. */
int tu_exec_once(const struct orch_exec_config *cfg, const char *prompt,
                 struct orch_result *res, struct fo_err *err);

#endif
