/* orch_int: shared by the files of the orchestrator (daemon/orch*.c) and
 * nothing else: the body of struct orch and small helpers. */
#ifndef ORCH_INT_H
#define ORCH_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "daemon/orch.h"
#include "daemon/orch_guard.h"
#include "daemon/orch_sandbox.h"
#include "daemon/orch_types_int.h"
#include "ledger/fo_buf.h"

struct orch_run_lock; /* orch_runs.c: DIR/runs/<instance>.lock, held */

/* The runs of an orchestrator: the one part of struct orch that changes
 * after orch_create, behind its own mutex. */
struct orch_runs {
    pthread_mutex_t mu;
    /* this orchestrator's instance: ORCH_INSTANCE_HEX digits, made with
     * its first lock (under mu), and the lock files it holds, one per
     * ledger dir */
    char instance[ORCH_INSTANCE_HEX + 1];
    struct orch_run_lock *locks;
};

struct orch {
    struct orch_roster *roster;
    char **allowed; /* allowed categories; n_allowed 0: every category */
    size_t n_allowed;
    int max_parallel;
    int max_runs; /* orch_config's (0: the engine's default) */
    size_t inject_max;
    char **argv; /* one block from orch_split_argv; NULL for the stub */
    char **env;  /* owned strings, NULL-terminated */
    char model[ORCH_MODEL_MAX + 1];
    struct orch_exec_config exec; /* points into the fields above */
    struct orch_exec_config stub; /* for lanes whose executor is "stub" */
    struct orch_model *models;    /* NULL: no model executors */
    /* [0] chat, [1] anthropic, by tier; kind 0 where no provider */
    struct orch_exec_config model_exec[2][3];
    char model_names[2][3][ORCH_MODEL_MAX + 1];
    int default_api; /* ORCH_EXEC_CHAT/_ANTHROPIC for "default" lanes, or 0 */
    unsigned char model_has[2][3]; /* a provider serves that api and tier */
    struct orch_runs *runs;        /* never NULL once created */
    cJSON *gates;            /* the standing approval-gate policy, or NULL */
    struct orch_guard guard; /* secrets the guardrails look for */
    char *workspace;         /* every run's tools act here, or NULL */
    char *workspace_root;    /* else a fresh run-<id> under it, or NULL */
    cJSON *mcp_servers;      /* forum.json's, checked; or NULL */
    cJSON *context;          /* forum.json's context limits, or NULL */
    int sandbox;             /* enum orch_sandbox_mode */
    int64_t disk_reserve_mb; /* orch_config's, or the default */
    char *data_dir;          /* resolved, or NULL */
    /* the --cmd program's sandbox (the model profile), exec.box when on */
    struct orch_cmd_box cmd_box;
    struct orch_sandbox cmd_sb;
    const char **cmd_env; /* env then cmd_box.env, pointers only */
};

/* The sandbox run_command runs in: the run's workspace ws (own: the
 * daemon made it), the lane's network, the data dir kept out. */
void orch_tool_sandbox(const struct orch *o, const char *ws, int network,
                       struct orch_sandbox *sb);

int orch_sandbox_mode(const struct orch *o);
/* MiB kept free on the data dir's filesystem (orch_config's). */
int64_t orch_disk_reserve_mb(const struct orch *o);
#define ORCH_DISK_RESERVE_MB_DEFAULT 256

const cJSON *orch_context_defaults(const struct orch *o);

const cJSON *orch_mcp_servers(const struct orch *o);

const struct orch_guard *orch_guardrails(const struct orch *o);
const char *orch_workspace_dir(const struct orch *o);
const char *orch_workspace_root(const struct orch *o);
const char *const *orch_child_env(const struct orch *o);
const char *orch_data_dir(const struct orch *o);

/* orch_runs.c: allocates o->runs (FO_E_NOMEM); on free, lets go of (and
 * removes) its lock files, then frees it. */
int orch_runs_init(struct orch *o, struct fo_err *err);
void orch_runs_free(struct orch *o);

/* Before a run's request is written: makes sure this orchestrator holds
 * its lock file in dir (DIR/runs/<instance>.lock, made on first use; the
 * stale lock files of dead processes found there are removed) and copies
 * the instance into inst. FO_E_IO naming the file when it cannot be made. */
int orch_runs_hold(const struct orch *o, const char *dir,
                   char inst[ORCH_INSTANCE_HEX + 1], struct fo_err *err);

/* Checks a request and its options as orch_engine_start does, writing
 * nothing. */
int orch_submit_check(const char *request, const struct orch_submit_opts *opts,
                      struct fo_err *err);

/* The executor a lane runs on: the stub for "stub" lanes; the model
 * executor of the lane's api (or, for "default" lanes without a cmd, the
 * first provider's api) and tier when models are configured; else the
 * run's executor. Never NULL. */
const struct orch_exec_config *orch_exec_for_lane(const struct orch *o,
                                                  const struct orch_lane *l);

/* Canonicalises payload and appends it as one entry (through w->append
 * when set); *seq (may be NULL) is the new entry's seq. A body over the
 * ledger's limit is FO_E_TOO_LARGE naming the kind. Blocks on the commit. */
int orch_witness_json(const struct orch_witness *w, const char *actor,
                      const char *kind, int64_t parent, const cJSON *payload,
                      int64_t *seq, struct fo_err *err);

/* 1 when a live process (its lock held) runs run: the instance of its
 * last `resume` entry, else of its request. */
int orch_run_held(const struct orch *o, struct ledger *l, int64_t run);

/* The policy verdict for a lane: 1 when its category may run. */
int orch_category_allowed(const struct orch *o, const char *category);

#endif
