/* orch_tools: the tools an agent may call, and the workspace they act in.
 *
 * Built-in tools act on one directory, the run's workspace: read_file,
 * write_file, list_dir, search_text, apply_patch (file tools: bounded in
 * bytes and time, run by the engine on a worker thread) and run_command (a
 * program, run by the engine as a job in the sandbox). Every path a tool is
 * given is resolved by the kernel beneath the workspace (openat2
 * RESOLVE_BENEATH): an absolute path, a ".." that climbs out, or a symlink that
 * points out fails however it is spelled, because the check is made on the
 * resolved path, not on the string. Two more act on the run's session instead
 * (remember, forget: its facts, written by the engine; docs/AGENTS.md).
 *
 * Arguments are checked against the tool's input schema before anything
 * runs; the errors are written for the model to correct its call. */
#ifndef ORCH_TOOLS_H
#define ORCH_TOOLS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"

#define ORCH_TOOL_NAME_MAX 128        /* "server.tool" */
#define ORCH_TOOL_OUTPUT_MAX 65536    /* bytes of a result given to the model */
#define ORCH_TOOL_FILE_MAX (1u << 20) /* read, write, patch, search */
#define ORCH_TOOL_TIME_MS 10000       /* a file tool's time limit */

struct orch_tool_def {
    const char *name;
    const char *description;
    const char *schema; /* JSON Schema text of the arguments object */
    int program;        /* runs a program: run_command */
    int session;        /* acts on the run's session: remember, forget (the
                           engine runs them; no workspace) */
};

/* The built-in tools, n of them. */
const struct orch_tool_def *orch_tools_builtin(size_t *n);

/* The built-in called name, or NULL. */
const struct orch_tool_def *orch_tool_builtin(const char *name);

/* Checks args (a JSON value) against schema (JSON Schema text), for the
 * subset tools use: type object with properties, required and
 * additionalProperties false; types string, integer, number, boolean,
 * array (with items), object; enum of strings; minLength, maxLength
 * (bytes), minItems.
 * FO_E_INVALID with a message naming the argument ("path: must be a
 * string", "unknown argument \"x\""). */
int orch_tool_schema_check(const char *schema, const cJSON *args,
                           struct fo_err *err);

/* Parses the arguments text a model wrote into an object and checks it
 * against def's schema. FO_E_INVALID with a message for the model ("the
 * arguments are not a JSON object: ..."). */
int orch_tool_args(const struct orch_tool_def *def, const char *text,
                   cJSON **out, struct fo_err *err);

/* What a file tool may spend: it stops (FO_E_TIMEOUT) past deadline_ms
 * (CLOCK_MONOTONIC; 0: none) or once *cancel is set (cancel may be NULL).
 * Bytes are bounded by the tools themselves: 1 MiB a file, 64 MiB and
 * 20,000 entries a search. */
struct orch_tool_budget {
    int64_t deadline_ms;
    const atomic_int *cancel;
};

/* Runs a file tool (not run_command) on args (checked) in the workspace
 * whose directory fd is ws, within budget (NULL: no time limit). Only
 * regular files and directories are opened, never blocking (a FIFO or a
 * device is refused); patches are matched in linear time. May take a
 * while on a large tree: the engine runs it on a worker thread
 * (orch_work.h), never on its loop. The result text goes to out (at most
 * ORCH_TOOL_OUTPUT_MAX bytes, cut with a marker). FO_OK; or an error whose
 * message is the tool's failure, for the model (FO_E_INVALID: a path
 * outside the workspace, not a regular file, a patch that does not apply;
 * FO_E_NOT_FOUND; FO_E_IO; FO_E_TIMEOUT: the budget ran out), or
 * FO_E_NOMEM. */
int orch_tool_run_file(int ws, const char *tool, const cJSON *args,
                       const struct orch_tool_budget *budget,
                       struct fo_buf *out, struct fo_err *err);

/* The argv of a run_command call (pointers into args, NULL-terminated,
 * malloc'd array) and its timeout in ms (0: the caller's default). */
int orch_tool_command_argv(const cJSON *args, const char ***argv,
                           int *timeout_ms, struct fo_err *err);

/* Opens (creating it 0700 when missing, and its parent, which must exist)
 * a workspace directory; *fd is an O_PATH directory fd. */
int orch_workspace_open(const char *dir, int create, int *fd,
                        struct fo_err *err);

#endif
