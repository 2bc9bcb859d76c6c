/* orch_types: the vocabulary every part of the orchestrator shares: the
 * limits, the roster (tiers, executor kinds, lanes and their hooks), the
 * router's decision, the planner's tasks and plans, and the executors
 * (their configuration, results and jobs).
 *
 * It sits below the run engine. The roster, the router, the planner, the
 * executors, the model client and the tools include it (and
 * daemon/orch_types_int.h for their helpers), never daemon/orch.h (the
 * orchestrator's handle, its runs and their readers) or the engine's
 * headers: tests/vocab.sh checks it. daemon/orch.h includes it. */
#ifndef ORCH_TYPES_H
#define ORCH_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_err.h"

struct orch_sandbox; /* daemon/orch_sandbox.h */

/* ---- limits and defaults ---------------------------------------------- */

#define ORCH_NAME_MAX 64      /* lane and category names, task ids */
#define ORCH_KEYWORD_MAX 64   /* one keyword */
#define ORCH_KEYWORDS_MAX 256 /* keywords of one lane */
#define ORCH_LANES_MAX 1024   /* lanes of one roster */
#define ORCH_DOMAIN_MAX 256   /* one-line domain */
#define ORCH_TASKS_MAX 10000  /* tasks of one plan */
#define ORCH_DEPS_MAX 256     /* depends_on of one task */
#define ORCH_INSTRUCTION_MAX (64u * 1024u)
#define ORCH_ROUTE_TEXT_MAX (64u * 1024u)
#define ORCH_MAX_PARALLEL_MAX 256
#define ORCH_MAX_PARALLEL_DEFAULT 4
#define ORCH_TIMEOUT_MS_DEFAULT 300000
#define ORCH_OUTPUT_MAX_DEFAULT (256u * 1024u) /* per stream of a child */
#define ORCH_INJECT_MAX_DEFAULT (16u * 1024u)  /* per upstream output */
#define ORCH_MAX_TURNS_DEFAULT 10
#define ORCH_MAX_RETRIES_MAX 10 /* a lane's same-tier retries */
#define ORCH_MODEL_MAX 128

/* ---- roster ------------------------------------------------------------ */

enum orch_tier { ORCH_TIER_CHEAP, ORCH_TIER_CAPABLE, ORCH_TIER_FRONTIER };

enum orch_exec_kind {
    ORCH_EXEC_DEFAULT,   /* "default": whatever the run was given */
    ORCH_EXEC_CLI,       /* "cli": the subprocess executor */
    ORCH_EXEC_CHAT,      /* "chat": OpenAI-compatible chat completions */
    ORCH_EXEC_ANTHROPIC, /* "anthropic": the Messages API */
    ORCH_EXEC_STUB,
};

/* A lane's verifier or reviser hook (orch_hooks.c): an external command
 * (run as `argv... INPUT`, in the sandbox unless it is configured off) or
 * a URL (POSTed INPUT); INPUT is the JSON of the task and its answer. An
 * https URL's server is verified against the system store (SSL_CERT_FILE
 * and SSL_CERT_DIR replace it), with the engine's one TLS context. */
struct orch_hook {
    char **argv; /* NULL-terminated, or NULL */
    char *url;   /* http:// or https://, or NULL */
    int tls;     /* url is https:// */
    int timeout_ms;
};
#define ORCH_HOOK_TIMEOUT_MS 60000
#define ORCH_HOOK_ARGS_MAX 32

struct orch_lane {
    char *name;
    char *category;
    char *domain;
    char **keywords;
    size_t n_keywords;
    int tier;      /* enum orch_tier */
    int executor;  /* enum orch_exec_kind */
    int max_turns; /* model turns of a task that calls tools */
    /* The tools its tasks may call (built-in names or "server.tool" of an
     * MCP server), those that must have been called before an answer is
     * accepted, what the guardrails do with a finding (1: the task fails;
     * 0: it is redacted) and whether run_command may use the network. */
    char **tools;
    size_t n_tools;
    char **required_tools;
    size_t n_required;
    int guard_block;
    int network;
    /* Same-tier retries of a task whose checks failed, each with the
     * failed checks in its prompt, before a tier escalation (0..10). */
    int max_retries;
    /* A verifier checks a task whose verdict passed (a failing one is a
     * failed check); a reviser rewrites a task's output before its
     * verdict. kind 0 (no argv, no url): none. */
    struct orch_hook verifier, reviser;
};

/* The lane's "verifier" or "reviser" (field): {"command": [argv...]} or
 * {"url": "http(s)://..."}, with "timeout_s" (1..3600, default 60). Absent:
 * h zeroed, FO_OK. FO_E_INVALID naming the lane and field. */
int orch_hook_parse(const cJSON *lane, const char *label, const char *field,
                    struct orch_hook *h, struct fo_err *err);
void orch_hook_release(struct orch_hook *h);
/* {"command": [...]} or {"url"}, with "timeout_s"; NULL when none or out
 * of memory. */
cJSON *orch_hook_json(const struct orch_hook *h);

struct orch_roster {
    struct orch_lane *lanes;
    size_t n;
};

/* Parses and validates a roster: {"lanes": [{name, category, domain,
 * keywords, model_tier, executor, max_turns?, tools?, required_tools?,
 * guardrails?: "redact"|"block", network?}]} (other top-level members
 * are ignored). Every error is FO_E_INVALID (FO_E_JSON for text that is
 * not strict JSON) and names the lane (by name, or by index when it has no
 * name) and the field: missing field, empty or non-list keywords, a
 * keyword that is not one [a-z0-9]+ token, a duplicate keyword, a bad
 * tier, an unknown executor, a duplicate lane name, a multi-line domain.
 * *out is freed with orch_roster_free. */
int orch_roster_parse(const char *json, size_t len, struct orch_roster **out,
                      struct fo_err *err);

/* The roster compiled into the binary (daemon/roster-default.json). */
int orch_roster_default(struct orch_roster **out, struct fo_err *err);

/* Reads and parses a roster file (at most 4 MiB). */
int orch_roster_load(const char *path, struct orch_roster **out,
                     struct fo_err *err);

void orch_roster_free(struct orch_roster *r);

/* The lane called name, or NULL. */
const struct orch_lane *orch_roster_find(const struct orch_roster *r,
                                         const char *name);

/* {"schema": "forum.roster/v1", "lanes": [...]} with every field explicit.
 * NULL when out of memory. */
cJSON *orch_roster_json(const struct orch_roster *r);

/* Names for the enums ("capable", "cli"). */
const char *orch_tier_name(int tier);
const char *orch_exec_name(int kind);

/* ---- router ------------------------------------------------------------ */

struct orch_candidate {
    const char *agent; /* the lane name, owned by the roster */
    double score;      /* hits / keywords */
    size_t hits;
};

struct orch_route {
    const char *decided; /* the lane, or NULL when it escalates */
    double confidence;
    int needs_escalation;
    struct orch_candidate *candidates; /* every lane, in decision order */
    size_t n;
};

/* Routes text exactly as the reference: the tokens are the
 * maximal [a-z0-9]+ runs of the ASCII-lowercased text; score = hits /
 * keywords; candidates by (score desc, name asc); then the margin rule, the
 * hit-count floor, and escalation with the margin as confidence. The
 * decision compares the raw doubles (as the reference's Python floats do);
 * the numbers are rounded to 6 decimals only when printed (orch_route_json),
 * so a margin of 0.6 - 0.4 prints as 0.2. Never depends on roster order.
 * out->candidates is malloc'd: release with orch_route_release. Errors:
 * FO_E_INVALID (text over ORCH_ROUTE_TEXT_MAX), FO_E_NOMEM. */
int orch_route(const struct orch_roster *r, const char *text, size_t len,
               struct orch_route *out, struct fo_err *err);

void orch_route_release(struct orch_route *rt);

/* {"decided", "confidence", "needs_escalation", "candidates": [{"agent",
 * "score"}]}, the reference's shape. NULL when out of memory. */
cJSON *orch_route_json(const struct orch_route *rt);

/* A double rounded to 6 decimals: the form every served score takes. */
double orch_round6(double d);

/* ---- planner ----------------------------------------------------------- */

enum orch_edge { ORCH_EDGE_DATA, ORCH_EDGE_ORDER };

struct orch_dep {
    char *id;
    int type; /* enum orch_edge */
};

struct orch_task {
    char *id;
    char *agent;
    char *instruction;
    char *done_when; /* a plain-text done_when, else NULL */
    cJSON *done;     /* done_when as given (string, assertion object or a
                        list of them), NULL when none */
    struct orch_dep *deps;
    size_t n_deps;
    size_t *dep_index; /* deps[i] is tasks[dep_index[i]] */
};

struct orch_plan {
    struct orch_task *tasks; /* in the order given */
    size_t n;
    size_t *order;      /* task indexes, wave after wave, each wave by id */
    size_t *wave_start; /* wave w is order[wave_start[w] .. wave_start[w+1]) */
    size_t n_waves;
};

/* Compiles {"tasks": [{"id", "agent", "instruction", "depends_on"?: ["T1",
 * {"id": "T2", "type": "order"|"data"}], "done_when"?}]} into waves by Kahn
 * layering, each wave sorted by id in byte order (done_when: text, an
 * assertion object of orch_assert_check, or a list of them; a malformed
 * assertion is an error naming the task). roster may be NULL (then
 * agents are not checked). Errors, all FO_E_INVALID and naming the tasks:
 * a malformed task or field, a duplicate id, an unknown dependency, an
 * unknown agent, a cycle (every task left unscheduled is named). *out is
 * freed with orch_plan_free. */
int orch_plan_compile(const cJSON *plan, const struct orch_roster *roster,
                      struct orch_plan **out, struct fo_err *err);

void orch_plan_free(struct orch_plan *p);

/* {"waves": [[ids]], "edges": [{"from", "to", "type"}]} plus the tasks as
 * given. NULL when out of memory. */
cJSON *orch_plan_json(const struct orch_plan *p);

/* ---- executors --------------------------------------------------------- */

struct orch_model; /* daemon/orch_model.h: the model client */

struct orch_exec_config {
    int kind;                /* ORCH_EXEC_STUB, _CLI, _CHAT or _ANTHROPIC */
    const char *const *argv; /* CLI: the command, NULL-terminated; the
                                prompt is added as the last argument */
    const char *const *env;  /* CLI: the whole environment, NULL-terminated */
    int timeout_ms;          /* 0: ORCH_TIMEOUT_MS_DEFAULT */
    size_t output_max;       /* per stream; 0: ORCH_OUTPUT_MAX_DEFAULT */
    const char *model;       /* recorded in results */
    /* CHAT, ANTHROPIC: the client (daemon/orch_model.h) and the tier that
     * picks its provider (enum orch_tier, or ORCH_TIER_ANY = -1). Model
     * tasks are not jobs: the engine calls the model client on its loop
     * (orch_model_call_start); timeout_ms and output_max do not apply (the
     * client has its own deadline and response cap). */
    const struct orch_model *models;
    int tier;
    const char *cwd; /* CLI: the child's working directory; NULL: ours */
    /* CLI: run argv (and the prompt) in this sandbox (daemon/orch_sandbox.h;
     * cwd is then the sandbox's); NULL: unconfined */
    const struct orch_sandbox *box;
};

struct orch_result {
    int ok;        /* exit status 0 and no timeout */
    int timed_out; /* killed (with its process group) at the timeout */
    int exit_code; /* -1 when killed by a signal or never started */
    int signal;    /* the signal that ended it, else 0 */
    int truncated; /* an output stream hit the cap (a marker is appended) */
    char *output;  /* stdout, valid UTF-8 (bad bytes become U+FFFD) */
    size_t output_len;
    char *errout; /* stderr, the same way */
    size_t errout_len;
    char error[FO_ERR_MSG_MAX]; /* why not ok, "" when ok */
    char model[ORCH_MODEL_MAX + 1];
    int64_t elapsed_us;
    /* the tokens a model provider said the answer took (has_tokens: it
     * said; -1 for a count it left out) */
    int has_tokens;
    int64_t tokens_in, tokens_out;
};

void orch_result_release(struct orch_result *res);

/* ---- jobs: one task execution in flight on an event loop --------------
 *
 * A job runs one stub or subprocess task on a caller's event_base without
 * holding a thread: thousands may be in flight on one loop thread. The
 * subprocess is spawned with posix_spawnp (never a
 * shell; stdin /dev/null; its own process group; cfg->env and no other
 * fds). Its stdout and stderr are non-blocking pipes read by EV_READ events,
 * its exit is an EV_READ event on a pidfd (on a kernel without pidfd_open,
 * a timer polls waitid(WNOHANG) every 50 ms; never SIGCHLD, never a blocking
 * wait on a live child), and the timeout is a timer that SIGKILLs the whole
 * group. When the child has exited, whatever is left of its group is killed
 * and the child reaped; the job then waits at most 1 s for the pipes to
 * close (a descendant that left the group may hold them) and ends.
 *
 * Memory: a job in flight is under 1 KiB of heap (a 344-byte struct with
 * the model name, and four 128-byte libevent events; the stub: one event)
 * and three descriptors (two pipes and the pidfd), plus its output: each
 * stream's buffer starts empty and grows (doubling) as output arrives, to
 * at most output_max + 1 bytes. Output past the cap is read through a
 * 64 KiB stack chunk and dropped, so a chatty child costs no more. A read
 * callback takes at most 256 KiB per wake-up, so one child cannot starve
 * the others. (The kernel's pipe buffers, up to 64 KiB each, come on top.)
 *
 * Every call below, and every callback, runs on the thread that runs base.
 * Jobs on a base do not lock: a base is one thread's. */
struct orch_job;
struct event_base; /* <event2/event.h> */

/* Called exactly once, on the base's thread, when a started job ends (never
 * from inside orch_job_start, and never after orch_job_cancel). res is never
 * NULL and is owned by the job until done returns: done may take
 * res->output and res->errout (setting them NULL; the job frees what is
 * left). rc FO_OK: res is filled (ok, exit_code, signal, timed_out,
 * truncated, output, errout, error, model, elapsed_us), err is clear. Else
 * rc is FO_E_NOMEM (the result could not be built; the child is reaped
 * all the same), err says so, and res has the status fields with output
 * and errout NULL. Once done returns the job is freed: orch_job_cancel on
 * it from inside done is a no-op, and after done returns is a use after
 * free. done may start and cancel other jobs on the base. */
typedef void (*orch_job_done_fn)(void *arg, int rc, struct orch_result *res,
                                 const struct fo_err *err);

/* Starts prompt on cfg (copied: cfg and its strings may go once start
 * returns) on base. ORCH_EXEC_STUB computes its result here and ends on the
 * next turn of the loop (an active event); ORCH_EXEC_CLI spawns argv +
 * prompt as above. On FO_OK *out is the job, and done will be called once
 * unless the job is cancelled first. On an error nothing was started, done
 * is never called and *out is untouched: FO_E_INVALID (CHAT and ANTHROPIC:
 * the model client is called directly, not through a job; an unknown kind;
 * a CLI config without argv), FO_E_NOT_FOUND naming the binary when it
 * cannot be run (missing, not executable, not a program), FO_E_IO (pipes,
 * the spawn itself), FO_E_NOMEM. Never blocks beyond posix_spawnp (the
 * child's exec). */
int orch_job_start(const struct orch_exec_config *cfg, struct event_base *base,
                   const char *prompt, orch_job_done_fn done, void *arg,
                   struct orch_job **out, struct fo_err *err);

/* Cancels j: SIGKILL to its process group (and to the child), closes its
 * pipes and drops its output; done is not called. j is invalid on return.
 * A child not yet reaped is reaped later by the job's pidfd event (or its
 * polling timer), which then frees what is left (about 0.6 KiB): so keep
 * running base until it is done (event_base_dispatch returns only then,
 * and a host that stops its loop first calls orch_jobs_reap_wait); freeing
 * base earlier leaks it and leaves a zombie. NULL-safe; callable from
 * any callback on base's thread. */
void orch_job_cancel(struct orch_job *j);

/* Cancelled jobs on base whose child is not reaped yet; and a wait (the
 * base's loop run without blocking, at most max_ms) until there are none:
 * for a host that stops running base, before it frees it. Any thread. */
size_t orch_jobs_reaping(const struct event_base *base);
void orch_jobs_reap_wait(struct event_base *base, int max_ms);

/* The checks every entry point of the executors makes (orch_job_start):
 * FO_E_INVALID for an unknown kind or a CLI config without argv; model
 * kinds pass only with models_ok (their caller runs them through the
 * model client), and then only with models set. */
int orch_exec_config_check(const struct orch_exec_config *cfg, int models_ok,
                           struct fo_err *err);

/* Splits cmd into argv with shell-like quoting: blanks separate words;
 * '...' is literal; "..." keeps \" \\ \$ \` and \newline escapes; a
 * backslash outside quotes escapes the next byte. Nothing is expanded ($,
 * *, ~ and the like stay literal). *argv is one malloc'd block, NULL-
 * terminated, freed with free(). FO_E_INVALID for an unterminated quote, a
 * trailing backslash or no words; at most 256 words of 64 KiB in all. */
int orch_split_argv(const char *cmd, char ***argv, size_t *argc,
                    struct fo_err *err);

#endif
