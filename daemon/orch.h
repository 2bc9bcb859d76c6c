/* orch: the orchestrator's deterministic core: the roster of
 * lanes, the lexical router, the planner (tasks into waves), the policy
 * (allowed categories, max_parallel), the executors (stub, subprocess) and
 * the witnessed dispatch of a plan. It writes to the ledger only through a
 * struct orch_witness the caller gives; it never includes a surfaces header.
 *
 * A struct orch is immutable once created, but for its lock files
 * (orch_runs.c), which have their own mutex: several threads
 * may route and run plans with one orch at the same time (each run owns its
 * children and its buffers). The ledger handle in a witness belongs to the
 * calling thread, and dispatch writes every entry on that thread. */
#ifndef ORCH_H
#define ORCH_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "daemon/orch_types.h"
#include "ledger/fo_err.h"
#include "ledger/ledger.h"

/* The vocabulary every part shares (the limits, the roster, the router,
 * the planner and the executors) is daemon/orch_types.h, below this
 * header; what follows is the orchestrator built on it: its handle, the
 * witnessed dispatch, submit, gates, sessions and the readers of runs. */

/* ---- the orchestrator handle ------------------------------------------ */

struct orch;
struct orch_model_config; /* daemon/orch_model.h */
struct orch_sandbox;      /* daemon/orch_sandbox.h */

struct orch_config {
    /* The roster: a JSON file, or JSON text, or (both NULL) the default
     * roster compiled into the binary. */
    const char *roster_path;
    const char *roster_json;
    size_t roster_json_len;
    /* Policy: the lane categories a plan may dispatch to (NULL or none:
     * every category) and the most tasks of a wave run at once (0: 4). */
    const char *const *allowed_categories;
    size_t n_allowed_categories;
    int max_parallel;
    /* Executor: cmd NULL runs the stub; else the subprocess executor runs
     * cmd split into argv with shell-like quoting (never by a shell), the
     * prompt appended as the last argument. */
    const char *cmd;
    /* The child's whole environment, "NAME=VALUE" strings, NULL-terminated;
     * NULL: PATH and HOME of this process, LANG=C.UTF-8, nothing else. */
    const char *const *env;
    int timeout_ms;    /* per task; 0: ORCH_TIMEOUT_MS_DEFAULT */
    size_t output_max; /* per stream; 0: ORCH_OUTPUT_MAX_DEFAULT */
    size_t inject_max; /* per upstream; 0: ORCH_INJECT_MAX_DEFAULT */
    const char *model; /* the model id results record; NULL: "stub" or
                          "cmd:<argv joined>" */
    /* Model executors (daemon/orch_model.h; NULL: none). Lanes whose
     * executor is "chat" or "anthropic" call a provider of that api chosen
     * by the lane's tier; with cmd NULL, "default" lanes do too (the api of
     * the first provider). Without models those lanes run on the run's
     * executor, as before. Copied by orch_create. */
    const struct orch_model_config *models;
    /* Runs at once of an engine hosted for this orchestrator's command
     * when its host is not told (orch_max_runs): 1..ORCH_RUNS_MAX; 0: the
     * engine's default. */
    int max_runs;
    /* The approval-gate policy every run starts with (a request may add
     * to it): an object as orch_gate_policy_check takes; NULL: none.
     * Copied. */
    const cJSON *gates;
    /* Where tools act: every run in workspace (a user's project), else
     * each run in a fresh directory run-<id> under workspace_root (made
     * 0700 on first use). Both NULL: tools that need a workspace fail. */
    const char *workspace;
    const char *workspace_root;
    /* Where run_command runs: ORCH_SANDBOX_BWRAP (0, the default) or
     * ORCH_SANDBOX_NONE (daemon/orch_sandbox.h). */
    int sandbox;
    /* The data dir (NULL: none): never mounted into a sandbox; a
     * workspace that holds it or lies inside it is refused (FO_E_INVALID
     * naming both). */
    const char *data_dir;
    /* How cmd runs (forum.json "cmd_sandbox", orch_cmd_box_parse): by
     * default in the sandbox's model profile, refused (FO_E_INVALID) where
     * bwrap cannot run unless its "sandbox" is "none". NULL: defaults. */
    const cJSON *cmd_sandbox;
    /* MiB kept free on the filesystem of the data dir (forum.json
     * "disk_reserve_mb"): an agent's command or file write in a workspace
     * on that filesystem is refused below it, and a command running is
     * killed below half of it. 0: ORCH_DISK_RESERVE_MB_DEFAULT. */
    int64_t disk_reserve_mb;
    /* The context limits every session turn starts from (forum.json
     * "context", as orch_ctx_limits_parse takes; a request's own limits
     * go over them); NULL: the defaults. Copied. */
    const cJSON *context;
    /* MCP servers whose tools lanes may name "server.tool" (forum.json
     * "mcp_servers", see daemon/orch_mcpc.h); NULL: none. Copied. */
    const cJSON *mcp_servers;
};

/* Creates an orchestrator: loads and validates the roster, splits cmd,
 * copies everything it keeps (cfg and its strings may go after the call).
 * cfg may be NULL (default roster, stub, every category). Errors:
 * FO_E_INVALID (a bad roster naming lane and field, a bad cmd, a bad
 * limit), FO_E_NOT_FOUND / FO_E_IO (roster file), FO_E_NOMEM. Does not
 * block beyond reading the roster file. */
int orch_create(const struct orch_config *cfg, struct orch **out,
                struct fo_err *err);

/* Adds a value the guardrails replace wherever it appears in tool or
 * model output (the daemon's token): FO_OK, FO_E_NOMEM, FO_E_TOO_LARGE. */
int orch_add_secret(struct orch *o, const char *value);

/* orch_config's max_runs (0: not given): the runs at once of an engine
 * hosted for the orchestrator's command (daemon_embed_start). */
int orch_max_runs(const struct orch *o);

/* Frees the orchestrator (NULL-safe) and lets go of its lock files: no
 * engine may be using it. */
void orch_free(struct orch *o);

/* Model calls made on base reuse pool's connections (orch_model_set_pool);
 * NULL to stop before the pool is freed. */
struct event_base;
struct httpc_pool;
void orch_set_http_pool(struct orch *o, struct event_base *base,
                        struct httpc_pool *pool);

/* The orchestrator's roster (owned by o). */
const struct orch_roster *orch_roster(const struct orch *o);

/* ---- dispatch ---------------------------------------------------------- */

/* Where the entries go. append (may be NULL) is the daemon's group-commit
 * hook, called like ledger_append_batch for a batch of one; without it the
 * entries go straight to ledger. Used only on the calling thread. */
/* One step of a run as it is witnessed: the engine's own event, raised on
 * its loop thread right after the entry landed and was applied (live;
 * never for entries found on resume), in the run's order, every one of
 * them before the run's end is reported. body is the payload as
 * witnessed, valid during the call. */
struct orch_run_event {
    int64_t run, seq;
    const char *kind, *actor;
    const cJSON *body;
    int step; /* 1, 2, ...: this run's entries so far, here */
};
typedef void (*orch_run_event_fn)(void *arg, const struct orch_run_event *ev);

/* A line naming the step for a person, into out (size bytes): "route:
 * backend", "plan: 3 tasks in 2 waves", "task T1 (backend)", "tool
 * read_file (T1)", "verdict T1: passed", "waiting at the gate of wave 0",
 * "answer", ... */
void orch_run_event_text(const struct orch_run_event *ev, char *out,
                         size_t size);

struct orch_witness {
    struct ledger *ledger;
    int (*append)(void *hook, struct ledger_append *req, struct fo_err *err);
    void *hook;
    /* A run begun through this witness calls started(started_arg, run)
     * on its thread once its request is on record (may be NULL). */
    void (*started)(void *arg, int64_t run);
    void *started_arg;
    /* And event(event_arg, ...) for each step it witnesses (may be NULL):
     * progress as the engine sees it, never polled from the ledger. */
    orch_run_event_fn event;
    void *event_arg;
};

/* A run of via "plan_run" (orch_engine_start): compiles the plan against
 * the roster (a bad plan is FO_E_INVALID,
 * and nothing is written), then witnesses `request` (actor "client",
 * payload {"request", "via": "plan_run"}) → `plan` (actor "planner",
 * {"tasks", "waves", "edges", "max_parallel"}) → for each task in wave
 * order either a `refusal` (actor "policy": its lane's category is not
 * allowed) or a `task` (actor the lane, the original instruction) and its
 * `result` (actor the lane, {"id", "output", "ok", "model", ...}). Each
 * entry's parent is the one that caused it. Tasks of a wave run at once up
 * to max_parallel; a task's prompt is its instruction followed by the
 * outputs of its ok data upstreams, each capped with a marker. A failing
 * or timed-out task is an ok:false result; the rest still run. request
 * may be NULL. On FO_OK *out is {"ok", "request_seq", "plan_seq", "waves",
 * "results": [{"id", "agent", "ok", "model", "seq", "output"}],
 * "refused": [ids]}. A ledger error stops the run (children are killed)
 * and is its result. */

/* ---- the control loop (the run engine: orch_engine.h) ------------------- */

#define ORCH_SUBMIT_CALLS_DEFAULT 32 /* the ceiling when no budget is given */
#define ORCH_SUBMIT_CALLS_MAX 1000   /* the most a budget may allow */
#define ORCH_SUBMIT_SECONDS_MAX 86400
#define ORCH_JSON_ATTEMPTS 3  /* a role's JSON reply: 1 + 2 corrective */
#define ORCH_COVERAGE_MIN 0.5 /* answers covering less are flagged */
#define ORCH_REQUEST_MAX (64u * 1024u)

/* The first line of every answer synthesized with neither a model provider
 * nor a command: the whole run was the deterministic stub. (A --cmd
 * command answers every role, as a model would.) */
#define ORCH_NO_MODEL_NOTE                                                     \
    "[forum: no model is configured, so no model was used: every step ran "    \
    "on the deterministic stub, which echoes its instructions]\n\n"

/* The answer of a run stopped by a shutdown before it could be resumed. */
#define ORCH_STOPPED_ANSWER                                                    \
    "forum: the run stopped because the daemon shut down before an answer "    \
    "was synthesized; the steps it took are in the ledger."

/* The answer of a run stopped by orch_run_cancel. */
#define ORCH_CANCELLED_ANSWER                                                  \
    "forum: the run stopped because it was cancelled before an answer was "    \
    "synthesized; the steps it took are in the ledger."

/* The answer of a run whose budget was spent: fixed, so clients can tell. */
#define ORCH_BUDGET_ANSWER                                                     \
    "forum: the run stopped because its budget was spent before an answer "    \
    "was synthesized; the steps it took are in the ledger."

struct orch_submit_opts {
    /* Model calls the run may make: coordinator attempts, classifier,
     * validator, synthesizer (each counts, stub model or not) and every
     * task dispatched on a cli, chat or anthropic executor (stub lanes do
     * not count). 0: ORCH_SUBMIT_CALLS_DEFAULT; at most _MAX. */
    int max_model_calls;
    /* Wall-clock seconds, checked before each model call (a call in flight
     * is not cut short). 0: no limit but the calls. */
    int max_seconds;
    /* Approval gates this run adds to the orchestrator's policy (see
     * orch_gate_policy_check); NULL: none. */
    const cJSON *gates;
    /* The session this run is a turn of (NULL: none), and its context
     * limits (NULL: the defaults). */
    const char *session;
    const cJSON *context;
    /* After synthesis, a model call asks whether the answer covers the
     * request (an `intent_judgment` entry; skipped, and said so, with no
     * model provider). */
    int intent_judge;
    /* A signed checkpoint after every wave (a `wave_checkpoint` entry). */
    int checkpoint_each_wave;
    /* The ledger's context capsule before the request, for every model
     * (its hash and text in the request entry), admitted against the
     * run's context limits (context.max_request_tokens and
     * max_total_tokens: trimmed at a character, the cut in the capsule's
     * "budget"). */
    int use_capsule_context;
    /* The delivery profile the answer is shaped to and checked against
     * (operator, engineer, researcher, executive; NULL: none): its rules
     * in the synthesizer's prompt, then a `delivery_profile_check` entry
     * under the answer (forum.delivery-profile/v1). */
    const char *delivery_profile;
    /* The engine claims a proof lane for the run before its plan: the
     * route frame's proof lane (execute when it names none) and domain
     * lane, for the scopes a run uses to do tasks (read, run), judged on
     * the vocabularies and witnessed as `lane_route` or `lane_rejection`
     * under the route; a rejected claim fails the run (FO_E_INVALID). */
    int claim_lane;
};

/* A run of via "submit" (orch_engine_start) answers a request end to end,
 * witnessing every step:
 * `request` (actor "client", {"request", "via": "submit", "instance"}: see
 * orch_run_get for the instance and its lock file) → `route`
 * (actor "router": the router's frame and the lane taken; when the router
 * escalates the classifier model picks, without models the top candidate)
 * → `plan` (actor "coordinator": the coordinator model's plan, parsed
 * leniently; each rejected reply is a `plan_attempt` entry and the next
 * attempt is told what was wrong) → per task in wave order `task` and
 * `result` (actor the lane) or a `refusal` (policy) or a `skip` (the same
 * agent, instruction and executor already ran in this run) → `verdict`
 * (actor "validator": done_when assertions first, a failed task or a
 * failed assertion fails without a model, then the validator model for
 * plain-text criteria) → on a failed verdict `tier_escalation` and the
 * task again on the next stronger tier of its api (cheap → capable →
 * frontier, with the failures named in the prompt) until one passes →
 * `answer` (actor "synthesizer": the synthesizer's answer and the intent
 * coverage of the request by it, flagged below ORCH_COVERAGE_MIN). A spent
 * budget writes a `budget` entry and an `answer` with ORCH_BUDGET_ANSWER,
 * and the run ends FO_OK; so does orch_engine_cancel (reason "cancelled",
 * ORCH_CANCELLED_ANSWER). A shutdown (orch_engine_stop) writes a `stop`
 * entry instead, and the next daemon resumes the run. The causal chain of a
 * verdict reads request → plan → task → result → verdict.
 *
 * Without model providers every role is a deterministic stub: the
 * coordinator plans one task on the routed lane with the request as its
 * instruction, the validator passes, the synthesizer joins the outputs.
 *
 * On FO_OK *out is {"answer", "checkpoint" (the live root hex after the
 * run), "request_seq", "answer_seq", "plan_seq", "ok", "budget_spent",
 * "model_calls", "escalations", "coverage", "tasks": [...]}. Errors:
 * FO_E_INVALID (an empty or oversize request, bad opts), FO_E_UPSTREAM
 * (the coordinator gave no valid plan after ORCH_JSON_ATTEMPTS, or a model
 * answered nonsense: HTTP 502), FO_E_UNAVAILABLE / FO_E_TIMEOUT (a model
 * could not be reached), ledger errors; each after an `error` entry when
 * the ledger still takes one; FO_E_IO when the run's lock file (DIR/runs/)
 * cannot be made, before anything is written. */

/* A run of via "plan": the coordinator's plan for a request, not run:
 * witnesses `request`, `route` and `plan` (with its rejected attempts) as
 * a submit does, so the model call is on record. *out is {"plan":
 * {"tasks", "waves", "edges"}, "lane", "model", "request_seq",
 * "plan_seq"}. Errors as a submit's. */

/* ---- approval gates (orch_gate.c) -------------------------------------- */

/* A gate stops a run before a wave until a human approves it (or edits its
 * tasks' instructions, or rejects it) or its deadline passes. The policy is
 * a JSON object: {"all": true} gates every wave; "lanes", "categories"
 * (names) gate a wave holding a task on such a lane; "waves" (numbers from
 * 0) gate those waves; "timeout_s" (default 1 day) or "deadline" (RFC 3339)
 * set when an undecided gate expires, "on_expiry" ("reject", the default,
 * or "approve") what then happens; "question" the text shown. The run's
 * policy is recorded in its request entry, so a resumed run keeps it.
 *
 * Entries: `gate_requested` (actor "gate", parent the plan: {"run", "wave",
 * "tasks": [{"id", "agent", "instruction"}], "question", "rule",
 * "deadline", "deadline_ms", "on_expiry"}), then one decision whose parent
 * is the gate_requested: `gate_approved`, `gate_edited` ("edits": {task id:
 * instruction}, which then run), `gate_rejected` ("reason") by actor
 * "human" with "approver" and "note"?, or `gate_expired` (actor "gate",
 * "action": "approved" or "rejected"). The first decision on record is the
 * one that counts. A rejected or expired-and-rejected gate ends the run:
 * a `budget` entry with reason gate_rejected or gate_expired and a fixed
 * answer. */
#define ORCH_GATE_NAMES_MAX 64
#define ORCH_GATE_WAVE_MAX 9999
#define ORCH_GATE_TIMEOUT_DEFAULT_S 86400
#define ORCH_GATE_TIMEOUT_MAX_S (366 * 86400)
#define ORCH_GATE_TEXT_MAX 4096  /* a question, note, reason or approver */
#define ORCH_GATE_EDIT_MAX 65536 /* one edited instruction */
#define ORCH_GATE_POLL_MS 1000   /* decisions made by other processes */
#define ORCH_TIME_MAX 32
#define ORCH_REJECTED_ANSWER                                                   \
    "The run was stopped at an approval gate: a wave was rejected before "     \
    "it ran."
#define ORCH_EXPIRED_ANSWER                                                    \
    "The run was stopped at an approval gate: nobody decided before its "      \
    "deadline."

/* FO_OK when p is NULL or a valid policy (roster, when given, must know
 * every lane named; a deadline must be after now_ms); else FO_E_INVALID
 * naming the field. */
int orch_gate_policy_check(const cJSON *p, const struct orch_roster *roster,
                           int64_t now_ms, struct fo_err *err);

/* base with req laid over it: lists joined, "all" or-ed, the request's
 * scalars win. *out NULL when nothing at all is gated. */
int orch_gate_policy_merge(const cJSON *base, const cJSON *req, cJSON **out,
                           struct fo_err *err);

/* 1 when wave of p is gated by policy, the rule that gates it in rule
 * ("all", "wave:N", "lane:NAME", "category:NAME"). */
struct orch_plan;
int orch_gate_rule(const cJSON *policy, const struct orch_roster *roster,
                   const struct orch_plan *p, size_t wave, char *rule,
                   size_t size);

/* When a gate requested at now_ms expires (unix ms). */
int64_t orch_gate_deadline(const cJSON *policy, int64_t now_ms);
int orch_gate_on_expiry_approve(const cJSON *policy);

/* Adds a CLI `--gate SPEC` (all, lane:NAME, category:NAME, wave:N) to
 * policy. FO_E_INVALID for a bad SPEC. */
int orch_gate_flag(cJSON *policy, const char *spec, struct fo_err *err);

/* UTC, milliseconds: 2026-01-31T18:00:00.000Z. */
void orch_time_rfc3339(int64_t ms, char out[ORCH_TIME_MAX]);
/* RFC 3339 (Z or an offset; fractions to the millisecond) to unix ms: 0,
 * or -1 when malformed. */
int orch_time_parse(const char *s, int64_t *ms);

/* A human's decision on a gate. */
struct orch_gate_decision {
    int64_t run;
    int64_t wave;
    const char *decision;      /* "approve", "edit" or "reject" */
    const char *approver;      /* who decides: 1..ORCH_GATE_TEXT_MAX bytes */
    const char *note, *reason; /* may be NULL */
    const cJSON *edits;        /* edit: {task id: instruction} */
};

/* Checks a decision's fields (FO_E_INVALID naming the field). */
int orch_gate_decision_check(const struct orch_gate_decision *d,
                             struct fo_err *err);
/* The decision's entry body: {"run", "wave", "approver", "note"?,
 * "reason"?, "edits"?}; NULL when out of memory. */
cJSON *orch_gate_decision_json(const struct orch_gate_decision *d);
/* gate_approved, gate_edited or gate_rejected. */
const char *orch_gate_kind(const char *decision);

/* The kinds that decide a gate (approved, edited, rejected, expired),
 * NULL-terminated: a gate takes one of them, ever. A writer of one sets
 * its append's sole_kinds to orch_gate_sole(kind) (this list, or NULL for
 * any other kind), so racing decisions put exactly one on the ledger. */
extern const char *const orch_gate_decided_kinds[];
const char *const *orch_gate_sole(const char *kind);

/* The gates waiting for a decision ({"gates": [{"run_seq", "wave",
 * "tasks", "question", "rule", "deadline", "deadline_ms", "on_expiry",
 * "requested_seq"}]}), of one run when run >= 0, read from the ledger. */
int orch_gate_list(struct ledger *l, int64_t run, cJSON **out,
                   struct fo_err *err);

/* Decides a gate on the ledger alone (a process without the run in its
 * engine): checks that the gate waits (FO_E_NO_GATE: no such run, wave or
 * gate, the run ended, its deadline passed; FO_E_GATE_DECIDED) and the
 * edits (FO_E_INVALID), then witnesses the decision through w. The process
 * running the run finds it within ORCH_GATE_POLL_MS; a stopped run on its
 * resume. *out {"run_seq", "wave", "decision", "seq"}. */
struct orch_witness;
int orch_gate_decide(const struct orch_witness *w,
                     const struct orch_gate_decision *d, cJSON **out,
                     struct fo_err *err);

/* orch_gate_decide in parts, for hosts that write asynchronously: the
 * checks (*gate_seq: the gate_requested the decision's parent is), then
 * once the decision (seq) is on record FO_OK when it is the first, and
 * the reply. */
int orch_gate_check(struct ledger *l, const struct orch_gate_decision *d,
                    int64_t *gate_seq, struct fo_err *err);
int orch_gate_first(struct ledger *l, const struct orch_gate_decision *d,
                    int64_t gate_seq, int64_t seq, struct fo_err *err);
cJSON *orch_gate_reply(const struct orch_gate_decision *d, int64_t seq);

/* ---- sessions and the context budget (orch_session.c) ----------------- */

#define ORCH_SESSION_NAME_MAX 64
#define ORCH_FACT_KEY_MAX 128
#define ORCH_FACT_VALUE_MAX 4096
#define ORCH_CTX_TOKENS_MAX 1000000
#define ORCH_CTX_TOTAL_DEFAULT 8000
#define ORCH_CTX_REQUEST_DEFAULT 16384
#define ORCH_CTX_HISTORY_DEFAULT 6000
#define ORCH_CTX_FACTS_DEFAULT 1000
#define ORCH_CTX_TOOLS_DEFAULT 2000
#define ORCH_CTX_TOOL_OUTPUT_MAX 1024 /* bytes of one earlier tool result */

/* 1 when s is a session name: 1..ORCH_SESSION_NAME_MAX of [A-Za-z0-9._-]. */
int orch_session_name_ok(const char *s);

/* Token limits of a turn's context: the total and one per source; and
 * what becomes of the turns the history has no room for: dropped (0, the
 * default) or summarised by a model into a `compaction` entry (1). */
struct orch_ctx_limits {
    int total, request, history, facts, tools;
    int summary;
    /* A task's prompt (max_task_tokens) and each upstream output in it
     * (max_upstream_tokens): 0 for no limit beyond forum's own caps (the
     * reference's task_context_token_budget and upstream_token_budget). */
    int task, upstream;
};
void orch_ctx_limits_default(struct orch_ctx_limits *l);
/* Lays {"max_total_tokens", "max_request_tokens", "max_history_tokens",
 * "max_facts_tokens", "max_tool_results_tokens", "max_task_tokens",
 * "max_upstream_tokens"} (integers 0..ORCH_CTX_TOKENS_MAX) and
 * "compaction" ("drop" or "summary") over l. */
int orch_ctx_limits_parse(const cJSON *o, struct orch_ctx_limits *l,
                          struct fo_err *err);
/* Tokens of bytes of UTF-8: ceil(bytes / 4). */
int orch_ctx_tokens(size_t bytes);

/* One slice of context and what the budget made of it. */
struct orch_ctx_slice {
    const char *source; /* "request", "facts", "history", "tool_results" */
    int64_t ref;        /* the fact's seq or the turn's run; -1: none */
    const char *key;    /* a fact's key */
    const char *text;
    size_t len;         /* bytes kept (cut at a character on a trim) */
    int tokens, kept;   /* before and after */
    const char *action; /* "retained", "trimmed" or "omitted" */
    const char *reason; /* NULL, or max_<source>_tokens / max_total_tokens */
};
/* Admits slices in order: each gets at most the smaller of its source's
 * remaining limit and the total's remaining (which then names the
 * reason), trimmed at a character boundary, or omitted when nothing is
 * left. */
void orch_ctx_admit(struct orch_ctx_slice *s, size_t n,
                    const struct orch_ctx_limits *lim);

/* A session as its entries say, as of before (a seq; < 0: now): its
 * turns before that run, its current facts, its fork's parent. */
struct orch_session;
int orch_session_read(struct ledger *l, const char *name, int64_t before,
                      struct orch_session **out, struct fo_err *err);
void orch_session_free(struct orch_session *s);
int64_t orch_session_start(const struct orch_session *s);
size_t orch_session_turns(const struct orch_session *s);

/* The context a turn of session (NULL: none) whose request entry is
 * before sees: *text (NULL when there is none) and *slices, one
 * {source, ref?, key?, tokens, kept_tokens, action, reason?} per slice
 * (the request, each fact, each earlier turn newest first, then the tool
 * results of each earlier turn newest first: when the total runs short,
 * the oldest tool results go first, then the oldest turns). */
int orch_session_context(struct ledger *l, const char *session,
                         const char *request, int64_t before,
                         const struct orch_ctx_limits *lim, char **text,
                         cJSON **slices, struct fo_err *err);

/* Compaction by summary: the session's latest `compaction` entry (under
 * its session_started: {session, run, replaces: [turn seqs], runs: [run
 * ids], summary, model}) stands for the turns it replaces in every later
 * context (a "summary" slice, counted against the history limit, instead
 * of those turns); each compaction covers the one before it too. This is
 * what a turn of session whose request entry is before would have to drop
 * (a history slice omitted or trimmed): *text, the text to summarise (the
 * summary so far, then those turns oldest first, with their tool
 * results), *replaces and *runs, the turns the new compaction covers
 * (the last one's and those); *text NULL when nothing would be dropped. */
int orch_session_compaction(struct ledger *l, const char *session,
                            const char *request, int64_t before,
                            const struct orch_ctx_limits *lim, char **text,
                            cJSON **replaces, cJSON **runs, struct fo_err *err);

/* The sessions of the ledger: {"sessions": [{session, started_seq, turns,
 * forked_from?}]}; one session: {session, started_seq, forked_from?, at?,
 * turns: [{turn, run, request, answer, state}], facts: {key: value}}. */
int orch_session_list(struct ledger *l, cJSON **out, struct fo_err *err);
int orch_session_show(struct ledger *l, const char *name, cJSON **out,
                      struct fo_err *err);

/* Writes through w: a fork of session name as it stood at its turn whose
 * run is at (FO_E_INVALID when no such turn); a fact (key 1..128 bytes,
 * value 1..4096), or a forgotten one (its body redacted, then a
 * fact_forgotten tombstone: FO_E_NOT_FOUND when the key is not set). */
int orch_session_fork(const struct orch_witness *w, const char *name,
                      int64_t at, const char *into, cJSON **out,
                      struct fo_err *err);
int orch_session_remember(const struct orch_witness *w, const char *name,
                          const char *key, const char *value, cJSON **out,
                          struct fo_err *err);
int orch_session_forget(const struct orch_witness *w, const char *name,
                        const char *key, cJSON **out, struct fo_err *err);

/* A fact's key (1..ORCH_FACT_KEY_MAX bytes of UTF-8) and value (NULL: not
 * checked; else 1..ORCH_FACT_VALUE_MAX): FO_OK or FO_E_INVALID. */
int orch_fact_check(const char *key, const char *value, struct fo_err *err);
/* The seq of session name's current fact key and of its first
 * session_started: FO_E_NOT_FOUND when the key is not set (*start still
 * set) or there is no such session. */
int orch_session_fact(struct ledger *l, const char *name, const char *key,
                      int64_t *fact_seq, int64_t *start, struct fo_err *err);
/* The entry of kind ("fact" or "fact_forgotten") under session name that
 * the tool call call_seq wrote (its body says "call_seq"): *seq and *body
 * (may be NULL; the caller's). FO_E_NOT_FOUND when there is none. */
int orch_session_by_call(struct ledger *l, const char *name, const char *kind,
                         int64_t call_seq, int64_t *seq, cJSON **body,
                         struct fo_err *err);

/* ---- counts (orch_counts.c) --------------------------------------------- */

/* The run counts of a ledger: {requests, plans, tasks, refusals,
 * results_ok, results_failed, results_redacted, model_calls: {model:
 * n}}; one scan with bodies. model_calls counts the calls made to models
 * as the engine counts them against a run's budget (each role's attempt
 * and reply, each task and each later turn of its tool loop), never the
 * stub's; a call whose entry names no model is under "(model not
 * recorded)". */
int orch_run_counts(struct ledger *l, cJSON **out, struct fo_err *err);

/* ledger_summary with the run counts as "runs": what `ledger summary`,
 * GET /summary and the ledger_summary tool serve. */
int orch_summary(struct ledger *l, cJSON **out, struct fo_err *err);

/* ---- runs on the ledger (orch_runs.c) ---------------------------------- */

#define ORCH_RUNS_MAX 1000000     /* the most max_runs may allow */
#define ORCH_RUN_ENTRIES_MAX 1000 /* entries orch_run_get shows (last) */
#define ORCH_RUN_SCAN_MAX 1000000 /* a run's entries orch_run_get reads */
#define ORCH_RUNS_DIR "runs"      /* DIR/runs/<instance>.lock */
#define ORCH_INSTANCE_HEX 32      /* an instance: 32 lowercase hex digits */

/* The state of run (the seq of a run's `request` entry), from the ledger
 * and the run's lock file alone (so it answers in any process and after a
 * restart): {"run", "state", "request", "via", "instance", "entries" (the
 * run's entries, flat, in seq order: the request and every entry whose
 * parent chain reaches it, the last ORCH_RUN_ENTRIES_MAX of them), "count"
 * (all of them), "truncated", "answer", "answer_seq", "error"}.
 *
 * A run is a `request` whose body says "via": "submit" or "run_start" (or
 * whose body was redacted). Every process that starts runs holds an
 * exclusive flock on DIR/runs/<instance>.lock for as long as it may write
 * them (made on its first run, removed by orch_free) and records that
 * instance in the request. With no end on record, the state is "running"
 * while that lock is held (a fresh open file description cannot take a
 * shared lock on it), "interrupted" when it is not (its process died: a
 * stale lock file, or none), and "unknown" when the request names no
 * instance (a run written before instances were recorded, or a redacted
 * request) or the lock file cannot be read. The lock is probed before the
 * ledger is read, so a run that ended as its process exited is never read
 * as interrupted. Ended states: "done" (an `answer`), "budget" (the budget
 * stopped it), "stopped" (a shutdown stopped it), "cancelled"
 * (orch_run_cancel), "failed" (an `error` entry; error is then {"error",
 * "code"}). Reads the run's own entries only (ledger_descendants), at most
 * ORCH_RUN_SCAN_MAX.
 * Errors: FO_E_NOT_FOUND (no such entry), FO_E_NOT_A_RUN (an entry of
 * another kind, or a request of plan, plan_run or a client: they have no
 * end on record to wait for), ledger errors. */
int orch_run_get(struct ledger *l, int64_t run, cJSON **out,
                 struct fo_err *err);

/* What a cancel of run (the seq of a run's `request` entry on l) answers
 * where no engine of this process holds it (orch_engine_cancel cancels the
 * runs an engine holds): *out is {"run", "state", "cancel": "ended"} for a
 * run that had ended (its state, unchanged). Errors: FO_E_NOT_FOUND,
 * FO_E_NOT_A_RUN (as orch_run_get), FO_E_RUN_ELSEWHERE (in progress in
 * another live process, waiting at a gate, stopped for the next daemon to
 * resume, or its state "unknown": cancel it where it runs), ledger errors.
 * o (may be NULL) tells this process's own instance from another's. */
int orch_run_cancel(struct orch *o, struct ledger *l, int64_t run, cJSON **out,
                    struct fo_err *err);

/* The runs and the gateway's sessions, newest first: {"runs": [{type:
 * "run", id, run, state, via, request (its first 200 bytes), started_ts,
 * entries} or a gateway session as orch_gw_sessions gives it], "next"}
 * at most limit of them. A run is placed by its id, a session by its last
 * call's seq (last_seq): those < before (< 0: any) and >= since. type
 * (NULL: both) "run" or "gateway_session" keeps one; a state (NULL: any)
 * keeps the runs of that state only (a session has none). next is the
 * before of the next page, or null. */
int orch_run_list(struct ledger *l, const char *state, const char *type,
                  int64_t before, int64_t since, int limit, cJSON **out,
                  struct fo_err *err);

/* ---- the model gateway's sessions (daemon/orch_gw.c) -------------------
 * Each `gateway_call` entry (surfaces/gateway.c) belongs to the session its
 * body's "session" names (the client's X-Forum-Session header), or, without
 * one, to "~YYYY-MM-DD", the UTC day its entry was written. */
#define ORCH_GW_SESSION_MAX 128
#define ORCH_GW_STEPS_MAX 10000 /* calls one session view lists */

/* The session of a gateway_call body (NULL: redacted) written at ts_us. */
void orch_gw_session_of(const cJSON *body, int64_t ts_us, char *out,
                        size_t size);
/* 1 when the call failed: an error_class, no body, or a status not 2xx. */
int orch_gw_call_failed(const cJSON *body);

/* Every gateway session, the most recently called first: an array of
 * {type: "gateway_session", id: "session:NAME", session, headerless,
 * calls, errors, tokens {input, output}, models, started_ts (the first
 * call's start), last_ts (the last call's entry), first_seq, last_seq,
 * entries}. Reads every gateway_call entry (through their index). */
int orch_gw_sessions(struct ledger *l, cJSON **out, struct fo_err *err);

/* One gateway session: its summary (as orch_gw_sessions) with duration_ms,
 * and steps: each call in seq order as a model step (run_show's shape:
 * kind, name, seq, start_ts, end_ts, duration_ms, entries, ok, model,
 * provider, api, status, stream, ttft_ms?, tokens?, error_class?), at most
 * ORCH_GW_STEPS_MAX (truncated says so). FO_E_NOT_FOUND when no call names
 * it. */
int orch_gw_session_show(struct ledger *l, const char *name, cJSON **out,
                         struct fo_err *err);

/* Run `run` as its entries fold through the engine's reducer (the same
 * apply() the engine runs live and on resume), against o's roster: the
 * state as daemon/orch_engine_int.h's oe_run_view gives it (phase, tasks
 * with their instruction as run and state, gates, model calls, answer).
 * FO_E_NOT_A_RUN; the reducer's error (FO_E_INVALID naming the entry)
 * when the entries do not fold, e.g. a plan naming a lane o's roster does
 * not have. Reads the ledger. */
int orch_run_fold(const struct orch *o, struct ledger *l, int64_t run,
                  cJSON **out, struct fo_err *err);

/* A whole run: its request, route, plan (waves), every task with its
 * task/result/verdict/escalation entries and bodies, gates, budget, answer,
 * times, and its steps (orch_run_steps). With o (may be NULL), each task's
 * instruction and state, and the run's phase and model_calls, come from
 * orch_run_fold: what the engine holds (an edit at a gate included); a
 * run that does not fold says why in "fold_error". */
int orch_run_show(const struct orch *orch, struct ledger *l, int64_t run,
                  cJSON **out, struct fo_err *err);

/* The steps of a run from its entries ({seq, ts, kind, parent, body}, in
 * seq order), appended to the array out: one per model call
 * ({"kind": "model"}), tool call ("tool"), command or stub task ("task"),
 * gate ("gate", open while it waits), escalation and retry (markers), each
 * {kind, name, start_seq, start_ts, seq, end_ts?, duration_ms?, entries,
 * task?, model?, tokens?, ok?, tool?, arguments?, output?, ...}; a step
 * without end_ts has not ended. FO_OK or FO_E_NOMEM (daemon/orch_steps.c). */
int orch_run_steps(const cJSON *entries, cJSON *out);

#endif
