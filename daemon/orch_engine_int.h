/* orch_engine_int: what the run engine's files share (daemon/orch_engine.c
 * and the orch_*.c files of the engine: orch_run_state.c, the reducer;
 * orch_writes.c; orch_flow.c; orch_roles.c; orch_context.c;
 * orch_toolloop.c; orch_forge.c; orch_gates_run.c; orch_resume.c). No
 * other module includes it: the engine's API is daemon/orch_engine.h. */
#ifndef ORCH_ENGINE_INT_H
#define ORCH_ENGINE_INT_H

#include "daemon/orch_engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "daemon/httpc.h"
#include "daemon/orch_guard.h"
#include "daemon/orch_int.h"
#include "daemon/orch_lease.h"
#include "daemon/orch_mcpc.h"
#include "daemon/orch_model.h"
#include "daemon/orch_sandbox.h"
#include "daemon/orch_tools.h"
#include "daemon/orch_toolres.h"
#include "daemon/orch_work.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/proof.h"
#define STDERR_KEEP (8u * 1024u)     /* stderr kept in a result entry */
#define REPLY_KEEP (4u * 1024u)      /* of a rejected reply, in its entry */
#define LANES_TEXT_MAX (32u * 1024u) /* the lane list in a prompt */
#define PROMPT_MAX (1024u * 1024u)
#define SALIENT_MAX 64
#define MISSING_SHOWN 20
#define ROUTE_SHOWN 5
#define COMMAND_TIMEOUT_MS 120000 /* run_command without timeout_s */
enum role {
    R_COORDINATOR,
    R_CLASSIFIER,
    R_VALIDATOR,
    R_SYNTHESIZER,
    R_SUMMARIZER,
    R_JUDGE /* the intent judge (orch_judge.c) */
};
/* ---- the state of a run ------------------------------------------------- */

enum phase {
    PH_CONTEXT,
    PH_ROUTE,
    PH_PLAN,
    PH_WAVES,
    PH_SYNTH,
    PH_PROFILE, /* the answer is on record; its delivery profile check */
    PH_JUDGE,   /* the intent judge's turn */
    PH_END
};
/* Where a task stands, as its entries say. */
enum tst {
    TS_PENDING, /* nothing witnessed */
    TS_RUN,     /* `task` witnessed, no `result`: its executor must run */
    TS_RESULT,  /* `result` witnessed: it must be judged */
    TS_VERDICT, /* a failed verdict with a stronger tier left: escalate */
    TS_ESC,     /* `tier_escalation` witnessed: the task again, one up */
    TS_FINAL,   /* judged for good */
    TS_REFUSED,
    TS_SKIPPED,
    TS_VERIFY, /* its verdict passed: the lane's verifier checks it */
};
enum halt { H_NONE, H_BUDGET, H_CANCEL, H_SHUTDOWN, H_GATE };
/* A wave's approval gate, as its entries say. */
enum gst {
    G_NONE,     /* not looked at yet */
    G_OPEN,     /* the policy does not gate it (or it began before) */
    G_PENDING,  /* `gate_requested` witnessed: the run waits */
    G_APPROVED, /* approved, edited or expired into approval */
    G_REJECTED, /* rejected, or expired into rejection: the run ends */
};
struct gate {
    int st;      /* enum gst */
    int writing; /* its gate_requested or gate_expired is in flight */
    int approve_on_expiry;
    int64_t req_seq, decided_seq;
    int64_t req_ts_us;   /* when it was requested */
    int64_t deadline_ms; /* unix ms */
};
/* A role's JSON reply in progress: rejected attempts so far, the last
 * reply and why it was rejected (for the corrective prompt). */
struct attempts {
    int n;
    char *last;
    char why[FO_ERR_MSG_MAX];
};
struct task {
    int st;          /* enum tst */
    int busy;        /* a write or an effect of this task is in flight */
    int writes;      /* its writes in flight */
    int slot;        /* holds one of the wave's max_parallel slots */
    int ran_ok;      /* the last result was ok */
    int pass;        /* the last verdict passed */
    int unjudged;    /* the last verdict had nothing to judge by */
    int copied;      /* a skip: the original's outcome is copied */
    int halt_judged; /* judged (or tried) while the run halts */
    int retries;     /* same-tier retries on the current tier */
    int revised;     /* the lane's reviser saw its last result */
    long dup_of;     /* a skip: the task it repeats, else -1 */
    int tier;        /* of the current attempt, -1 when not a model tier */
    const struct orch_exec_config *ex; /* the current attempt's executor */
    int64_t task_seq, result_seq, verdict_seq, esc_seq;
    int exit_code;
    char *output; /* the last ok output, for downstream tasks */
    size_t output_len;
    cJSON *failed; /* what the last failed verdict named */
    struct attempts val;
    struct effect *eff; /* the job or model call in flight */
    char model[ORCH_MODEL_MAX + 1];
    /* the tool loop of a task whose lane has tools (apply keeps it) */
    cJSON *conv;       /* tool_call, tool_result, tool_rescue payloads, each
                          with "k": its kind, in order */
    int64_t conv_last; /* the last of them, else the task: the next parent */
    int64_t await;     /* a tool_call witnessed without its result, or -1 */
    int turn;          /* model turns begun in this attempt */
    int turn_seen;     /* the last turn an entry witnessed */
    int n_calls;       /* tool calls witnessed */
    int live_call;     /* the call awaiting its result was made by this
                          process (not one found on resume) */
    int bad_calls;     /* rejected tool calls in a row */
    int blocked;       /* a guardrail blocked a tool's output */
    cJSON *pending;    /* calls of the last reply not yet witnessed */
    char *pending_text;
    int mcp_turn;       /* the turn whose MCP servers were made ready */
    uint64_t mcp_tried; /* lane tools whose server was tried that turn */
    char *mem_value;    /* the value of the remember call awaiting its fact
                           (never in the tool_call entry: see mem_run) */
    char *raw_args;     /* the arguments the model wrote for the call
                           awaiting its result, when the guardrails changed
                           the witnessed copy: the tool runs with these */
    cJSON *forge_note;  /* what the forge layer did with the last reply
                           (orch_forge.h), for the next entry of the turn */
};
struct dkey { /* one (agent, instruction, executor) dispatched */
    char *key;
    size_t task;
};
struct run {
    struct orch_engine *e;
    struct event *end_retry; /* the error entry, tried again (a full disk) */
    int64_t id;              /* the request's seq; -1 until it is committed */
    char *request;
    char via[16];
    int resumable;
    int end_retries; /* tries of the error entry that failed */
    int max_calls, max_seconds;
    int64_t t0_us; /* the request's ts */
    int calls;     /* model calls witnessed */
    int reserved;  /* model calls begun, not yet witnessed */
    int escalations;
    int retries; /* same-tier retries witnessed */
    int phase;
    int busy;   /* the phase's own write or model call is in flight */
    int writes; /* entries in flight */
    int stepping, dirty;
    struct effect *eff; /* the role call in flight */
    int halt;           /* enum halt */
    const char *halt_reason;
    char stopped_before[ORCH_NAME_MAX + 32];
    int halt_written; /* the budget or stop entry is on record */
    /* run leases (several daemons on one ledger): this engine holds the
     * run's lease; the renewal saw it; another daemon took it over; its
     * answer or error is on record (the lease goes with it) */
    int leased, lease_lost, end_on_record;
    /* route */
    const char *lane; /* owned by the roster */
    char lane_by[16];
    int64_t route_seq;
    struct attempts cls;
    /* plan */
    cJSON *given; /* plan_run: the plan as given */
    struct orch_plan *p;
    int64_t plan_seq;
    char plan_model[ORCH_MODEL_MAX + 1];
    struct attempts coord;
    struct task *t;
    size_t wave;
    struct dkey *keys;
    size_t n_keys;
    /* a session's turn */
    char *session;              /* NULL: not a turn of a session */
    struct orch_ctx_limits lim; /* its context budget */
    char *context;              /* what earlier turns and facts give */
    char *prompt;               /* context + request, for the models */
    int after_context;          /* the phase that follows PH_CONTEXT */
    int creating_session;       /* its session_started is being written */
    int waiting_session;        /* another run writes that first */
    int64_t session_start, turn_seq;
    int compacted;       /* a compaction was asked for this turn */
    cJSON *cmp_replaces; /* what the compaction in flight replaces */
    cJSON *cmp_runs;
    /* the workspace of its tools, opened at the first tool call */
    char *ws_path;
    int ws_fd;
    /* approval gates */
    cJSON *gates;    /* the run's policy, NULL: none */
    struct gate *g;  /* per wave, once planned (with a policy) */
    int64_t wait_us; /* spent waiting for decided gates */
    int64_t cur_ts;  /* the ts of the entry being applied */
    /* end */
    int ended, failed_rc;
    struct fo_err err;
    int64_t budget_seq, answer_seq, last_seq;
    char *answer;
    char answer_model[ORCH_MODEL_MAX + 1];
    cJSON *coverage;
    int budget_spent;
    /* judgement (orch_judge.c): the intent judge asked for; its attempts,
     * its entry and verdict {covers, ok, missing, ...} */
    int judge;
    struct attempts judge_att;
    int64_t judge_seq;
    cJSON *intent;
    /* a signed checkpoint after every wave: asked for; the wave whose
     * checkpoint is on record (or in flight); their entries' payloads */
    int cp_each_wave;
    size_t cp_waves;
    int cp_busy;
    cJSON *checkpoints;
    /* the proof lane claim asked for; its entry, body and verdict */
    int claim_lane, lane_rejected;
    int64_t lane_seq;
    cJSON *lane_claim;
    /* the delivery profile asked for ("" none) and its check's payload */
    char profile[16];
    cJSON *profile_check;
    /* the ledger's capsule as the run's context: its SHA-256 (hex) */
    char capsule_hash[65];
    struct cap_job *cap_job; /* its read in flight */
    /* its ledger reads on the engine's workers (orch_reads.c), and the
     * outcome of the session read its context step waits for */
    struct oe_read *reads;
    struct oe_read *ctx_res;
    /* for the action receipt: the payload hashes of the request and the
     * answer entries (hex, as they landed or were read) */
    char req_payload[65], answer_payload[65];
    /* the caller */
    orch_run_event_fn on_event; /* each step as it lands (may be NULL) */
    void *event_arg;
    int n_events;
    orch_run_started_fn started;
    orch_run_done_fn done;
    void *arg;
    struct run *prev, *next;
};
/* A write to the ledger in flight. */
struct wr {
    struct ledger_append a;
    char *body;
    struct run *r;
    cJSON *payload; /* applied once committed */
    int spent;      /* it witnesses a reserved model call */
    long task;      /* the task whose busy flag it clears, or -1 */
    int phase_busy; /* it clears r->busy */
    int redact;     /* a redaction (a.rc, a.err), not an append */
    /* called once it landed, after it was applied (may be NULL) */
    void (*landed)(void *arg, struct run *r, int rc, int64_t seq,
                   const struct fo_err *err);
    void *landed_arg;
    int rc;
    struct wr *next;
};
/* A decision on a run this engine does not hold (another process runs it,
 * or nothing does now): checked on the ledger, written through the
 * engine's append, answered once committed. */
struct gate_off {
    struct orch_engine *e;
    struct ledger_append a;
    char *body;
    struct orch_gate_decision d; /* the strings point into held */
    cJSON *held;
    int64_t gate_seq;
    orch_run_done_fn done;
    void *arg;
    struct gate_off *next;
};
/* A model call or a job in flight. */
enum eff_kind { E_ROLE, E_TASK_MODEL, E_TASK_JOB };
struct stub_reply {
    struct event *ev;
    struct role_call_ctx *c;
    char *text;
};
struct effect {
    int kind;
    int tools; /* a model turn of the tool loop */
    struct run *r;
    int role;
    long task; /* -1 for the route, plan and synthesis roles */
    struct orch_model_call *call;
    struct orch_job *job;
    struct orch_mcpc_op *mcp;
    struct stub_reply *stub; /* a stub role's reply, due next turn */
    struct tool_job *tool;   /* a file tool on a worker thread */
    int cmd;                 /* a run_command job (the disk watch) */
    struct httpc_req *http;  /* a hook's request (orch_hooks.c) */
};
/* A file tool call on the engine's worker threads (orch_work.h): what the
 * thread reads is copied here, so the run may go (a cancel) while the
 * thread still works; f is NULL once its effect was abandoned. */
struct tool_job {
    struct effect *f;
    struct orch_work_job *job;
    int ws; /* a dup of the run's workspace fd */
    char tool[ORCH_TOOL_NAME_MAX];
    cJSON *args;
    int rc;
    struct fo_err err;
    struct fo_buf out;
};
struct orch_engine {
    const struct orch *o;
    struct orch_engine_config cfg;
    struct run *runs; /* in memory */
    size_t n_runs;
    int stopping;
    void (*stopped)(void *arg);
    void *stopped_arg;
    char instance[ORCH_INSTANCE_HEX + 1];
    int have_instance;
    /* commits done on other threads come back here */
    pthread_mutex_t mu;
    struct wr *doneq;
    struct event *wake;
    struct event *stop_ev;
    struct event *grace_ev;     /* a shutdown's grace: then work is abandoned */
    struct event *gate_ev;      /* while gates wait: decisions, deadlines */
    struct gate_off *offq;      /* decisions on runs not here, committed */
    struct orch_mcpc *mcpc;     /* the MCP servers' clients, or NULL */
    struct httpc_tls *hook_tls; /* https hooks' (the system store), or NULL */
    struct orch_work *work;     /* the file tools' worker threads */
    struct event *disk_ev;      /* while commands run: the disk's reserve */
    int n_cmds;                 /* run_command jobs in flight */
    /* counters for /metrics (loop thread only) */
    uint64_t m_runs_started, m_calls_ok, m_calls_failed;
    uint64_t m_lat[10]; /* model call latency buckets, see LAT_BOUNDS */
    uint64_t m_tokens_in, m_tokens_out; /* as the providers reported */
    double m_lat_sum;
    int64_t gate_cursor; /* entries below it were looked at for decisions */
    int gate_scanning;   /* a scan is on a worker thread */
    /* the engine's own read handle for work off the loop (the gates'
     * scans): opened on first use by a worker, used under rl_mu */
    struct ledger *rl;
    pthread_mutex_t rl_mu;
    uint64_t sessions_landed; /* session_started entries written */
    /* run leases: on when cfg.lease_ms > 0 and the ledger keeps them */
    int leases;
    struct event *lease_ev;       /* renew, then claim expired ones */
    struct orch_lease_worker *lw; /* their round trips, off the loop */
    int mcp_closing, mcp_closed;  /* the MCP sessions ended at the stop */
    int lease_failing;            /* the last renewal failed (logged once) */
    struct oe_resume *resume;     /* the resume job under way (orch_resume.c) */
    int64_t gate_rewind; /* >= 0: the scan under way ends with the cursor
                          * put back there (oe_gate_rewind) */
};
typedef void (*role_done_fn)(struct run *r, long task, int rc,
                             struct orch_model_reply *rep,
                             const struct fo_err *err);
struct role_call_ctx {
    struct effect f;
    role_done_fn fn;
};
struct conv_msgs {
    struct orch_model_msg *m;
    size_t n;
    char **own; /* strings made for the messages */
    size_t n_own;
};
/* What a remember call's value is replaced by in its tool_call entry. */
#define REMEMBER_KEPT "[kept in the session's fact]"
/* ---- the session tools: remember and forget ---------------------------------
 *
 * They write what `forum session remember` and `forget` write: a `fact`
 * {session, key, value} under the session's session_started; a redaction
 * of the fact's body, then a `fact_forgotten` {session, key, fact_seq}
 * tombstone; each also names its call (call_seq). The call's tool_result
 * comes after them. Nothing here blocks the loop thread: the entries go
 * through witness() (the daemon's group committer), the redaction through
 * redact_cb (the committer's thread), and each next step is taken when
 * the one before has landed (mem_op carries the call through). The reads
 * (was the call done before, the fact, the session's start) are made on
 * the engine's worker threads (orch_reads.c), the task busy meanwhile, as
 * context_step's are.
 *
 * Resume: a call on record without its result looks for what it wrote by
 * its call_seq (orch_session_by_call) and, finding it, only answers, so a
 * witnessed remember or forget is never done twice. A forget whose
 * redaction ran but whose tombstone did not is done again: the redaction
 * finds the body gone (FO_E_REDACTED) and the tombstone is written. A
 * remember whose fact never landed cannot be made again (its value was
 * never on the ledger, see remember_mask): it is answered with an error
 * the model can act on. */

struct mem_op {
    size_t t;
    int64_t fact_seq;
    char key[ORCH_FACT_KEY_MAX + 1];
};
/* Runs a remember or forget call of task t (its arguments checked). */
void oe_mem_run(struct run *r, size_t t, const char *tool, const cJSON *args);
/* Task t's tool_result: ok with output, or why not (rejected: its
 * arguments did not match the tool's schema). */
void oe_tool_result(struct run *r, size_t t, int ok, const char *output,
                    const char *why, int rejected);
#define DISK_WATCH_MS 250
/* Decisions other processes wrote (`forum gate approve` on the ledger):
 * the entries since the last look, at most one read per tick for them
 * all; then the deadlines. */
/* A gate decision read off the loop (orch_gates_run.c's scan): the entry
 * and its parsed body, handed to the loop to apply. */
struct gate_dec {
    int64_t seq, parent, ts;
    char actor[LEDGER_ACTOR_MAX + 1];
    char kind[LEDGER_KIND_MAX + 1];
    cJSON *body;
};
/* A read of the ledger for the gates, on a worker thread: the decisions
 * at or after from (from < 0: only entry `one`). */
struct gate_scan {
    struct orch_engine *e;
    int64_t from, one;
    int64_t last; /* the last seq looked at */
    struct gate_dec *d;
    size_t n, cap;
    int rc;
    struct fo_err err;
};
#define END_RETRY_MS 1000
struct gate_call {
    orch_run_done_fn done;
    void *arg;
    int64_t run, wave;
    char decision[16]; /* approved, edited, rejected */
};
/* ---- resume ------------------------------------------------------------- */

struct collect {
    int64_t *seqs;
    size_t n, cap;
};
struct replay {
    struct run *r;
    int rc;
    struct fo_err err;
    int ended;
    char last_kind[LEDGER_KIND_MAX + 1];
};
/* ---- shared data ---- */
extern const char *const oe_role_name[];
extern const double oe_lat_bounds[9];

/* ---- shared functions ---- */
char *oe_dispatch_key(const struct orch_task *k,
                      const struct orch_exec_config *ex);
void oe_gate_off_free(struct gate_off *g);
const char *oe_run_lane(const struct run *r);
const char *oe_run_prompt(const struct run *r);
const char *oe_run_request(const struct run *r);
int oe_nomem(struct fo_err *err);
void oe_elog(struct orch_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void oe_run_free(struct run *r);
struct run *oe_run_find(const struct orch_engine *e, int64_t id);
void oe_run_unlink(struct run *r);
int64_t oe_now_us(void);
int64_t oe_elapsed_ms(const struct run *r);
void oe_wr_free(struct wr *w);
void oe_on_wake(evutil_socket_t fd, short what, void *arg);
int oe_witness_cb(struct run *r, const char *actor, const char *kind,
                  int64_t parent, cJSON *payload, long task, int phase_busy,
                  int spent,
                  void (*landed)(void *, struct run *, int, int64_t,
                                 const struct fo_err *),
                  void *landed_arg, struct fo_err *err);
int oe_witness(struct run *r, const char *actor, const char *kind,
               int64_t parent, cJSON *payload, long task, int phase_busy,
               int spent, struct fo_err *err);
int oe_redact_cb(struct run *r, int64_t seq, const char *reason, long task,
                 void (*landed)(void *, struct run *, int, int64_t,
                                const struct fo_err *),
                 void *landed_arg, struct fo_err *err);
void oe_abandon(struct run *r);
void oe_set_halt(struct run *r, int h, const char *reason, const char *before);
int oe_spend(struct run *r, const char *before, int free_step);
void oe_effect_cancel(struct effect *f);
void oe_record_call(struct orch_engine *e, int ok,
                    const struct orch_model_reply *rep);
const struct fo_err *oe_reply_scrub(const struct orch *o,
                                    struct orch_model_reply *rep,
                                    const struct fo_err *err,
                                    struct fo_err *copy);
int oe_role_start(struct run *r, int role, long task,
                  const struct orch_model_msg *m, size_t n,
                  const char *stub_text, role_done_fn fn, struct fo_err *err);
int oe_json_role_start(struct run *r, int role, long task, const char *system,
                       const char *user, const char *stub_text,
                       const struct attempts *a, role_done_fn fn,
                       struct fo_err *err);
int oe_rejected(struct run *r, int role, long task, int64_t parent,
                const struct attempts *a, const char *why, const char *model,
                const char *text, struct fo_err *err);
int oe_route_entry(struct run *r, struct orch_route *rt, const char *lane,
                   const char *by, const char *model, int spent,
                   struct fo_err *err);
void oe_on_classifier(struct run *r, long task, int rc,
                      struct orch_model_reply *rep, const struct fo_err *cerr);
int oe_session_context(struct run *r, cJSON **slices, struct fo_err *err);
void oe_context_step(struct run *r);
void oe_route_step(struct run *r);
void oe_plan_step(struct run *r);
int oe_model_slot(const struct orch *o, const struct orch_exec_config *ex,
                  int *api, int *tier);
long oe_key_seen(const struct run *r, const char *key);
int oe_key_add(struct run *r, char *key, size_t task);
int oe_task_begin(struct run *r, size_t t, const struct orch_exec_config *ex,
                  int64_t parent, struct fo_err *err);
int oe_guard_role(struct run *r, int role, long task, const char *text,
                  char **clean, struct fo_err *err);
void oe_task_result(struct run *r, size_t t, struct orch_result *res);
void oe_task_exec(struct run *r, size_t t);
int oe_dispatch_task(struct run *r, size_t t, struct fo_err *err);
int oe_judge(struct run *r, size_t t, struct fo_err *err);
const struct orch_exec_config *oe_next_tier(const struct run *r, size_t t);
int oe_escalate(struct run *r, size_t t, struct fo_err *err);
void oe_synth_step(struct run *r);
const char *oe_stop_answer(const struct run *r);
void oe_halt_step(struct run *r);
const char *oe_str_of(const cJSON *b, const char *k);
int64_t oe_now_ms(void);
int oe_gate_rejected(const struct run *r);
int oe_edits_check(const struct run *r, size_t wave, const cJSON *edits,
                   struct fo_err *err);
int oe_gate_step(struct run *r, struct fo_err *err);
void oe_gate_take(struct run *r, int64_t seq);
void oe_on_gate_tick(evutil_socket_t fd, short what, void *arg);
int oe_apply(struct run *r, const char *actor, const char *kind, int64_t seq,
             int64_t parent, const cJSON *b, struct fo_err *err);
void oe_fail(struct run *r, int rc, const struct fo_err *err);
int oe_end_retry(struct run *r, int rc);
void oe_step(struct run *r);
int oe_hold_instance(struct orch_engine *e, struct fo_err *err);
struct run *oe_run_new(struct orch_engine *e, const char *via);
void oe_step_name(const struct run *r, char *out, size_t size);
void oe_gate_off_landed(struct orch_engine *e, struct gate_off *g);
void oe_on_mcp_closed(void *arg);
void oe_on_lease_tick(evutil_socket_t fd, short what, void *arg);
void oe_on_lease_done(void *arg);
/* A stop: the resume job's fold, when under way, is cancelled. */
void oe_resume_stop(struct orch_engine *e);
/* The engine's end: a resume job left (its entries committed, never
 * landed) goes, its runs with it. */
void oe_resume_free(struct orch_engine *e);
/* The gates' next scan starts again at cursor (at most): decisions written
 * while a resume job read are looked at once its runs are here. */
void oe_gate_rewind(struct orch_engine *e, int64_t cursor);

/* ---- judgement, retries, receipts (orch_judge.c) ---- */

/* 1 when task t's lane allows one more same-tier retry. */
int oe_retry_left(const struct run *r, size_t t);
/* Witnesses `retry` {id, agent, attempt, max_retries, tier?, model,
 * because} under the failed verdict; the task runs again on the same
 * executor with the failed checks in its prompt. */
int oe_retry(struct run *r, size_t t, struct fo_err *err);
/* The intent judge's step (PH_JUDGE): a model call, or an entry saying
 * why it was skipped. */
void oe_judge_step(struct run *r);
/* The delivery profile's step (PH_PROFILE): the answer checked, witnessed
 * as `delivery_profile_check` under it; and its entry applied. */
void oe_profile_step(struct run *r);
/* The run's proof lane claim, before its plan: 1 when the plan step must
 * wait (the claim is being witnessed, or a rejection failed the run). */
int oe_lane_step(struct run *r);
int oe_apply_lane(struct run *r, int64_t seq, const char *kind, const cJSON *b,
                  struct fo_err *err);
int oe_apply_profile_check(struct run *r, int64_t seq, const cJSON *b,
                           struct fo_err *err);
/* Folds an `intent_judgment` entry. */
int oe_apply_judgment(struct run *r, int64_t seq, const cJSON *b,
                      struct fo_err *err);
/* The request entry's options (intent_judge, checkpoint_each_wave,
 * capsule) into r: live, on resume and in the views' fold. */
void oe_request_opts(struct run *r, const cJSON *b);
/* An entry's payload hash, kept for the receipt (request and answer). */
void oe_note_payload(struct run *r, const char *kind, const uint8_t *payload);
/* The forum.action-receipt/v1 of a finished run (size and root: the tree
 * head the result names). NULL when out of memory. */
cJSON *oe_receipt(const struct run *r, int64_t size, const char *root_hex);
/* A wave of a run that asked for checkpoint_each_wave is complete: 1 when
 * its checkpoint is on record (go on), 0 while it is being made. */
int oe_wave_checkpoint(struct run *r, struct fo_err *err);
/* Folds a `wave_checkpoint` entry. */
int oe_apply_wave_cp(struct run *r, int64_t seq, const cJSON *b,
                     struct fo_err *err);
/* The ledger's capsule as the run's context: read on a worker thread
 * (one pass over the ledger, on a read handle of its own), then
 * {"capsule": {"schema", "hash", "chars", "text"}} is added to the request
 * body b (taken, freed on an error) and the request is witnessed; a
 * failure then ends the run (oe_fail). oe_capsule_drop: the run goes
 * first (oe_run_free), the read's outcome is dropped. */
int oe_capsule_start(struct run *r, cJSON *b, struct fo_err *err);
void oe_capsule_drop(struct run *r);
/* ---- ledger reads off the loop (orch_reads.c) ---- */

/* A read on the engine's worker threads: fn runs there on the shared
 * read handle (e->rl), then done on the loop (rd->r: the run, or NULL
 * when it went meanwhile; done frees rd, oe_read_free). */
struct oe_read {
    struct orch_engine *e;
    struct run *r;
    int what;
    int (*fn)(struct ledger *l, struct oe_read *rd, struct fo_err *err);
    void (*done)(struct oe_read *rd);
    /* what the read is given */
    char *session, *request;
    int64_t before;
    struct orch_ctx_limits lim;
    uint64_t gen;
    void *arg;
    /* what it gives back */
    int rc;
    struct fo_err err;
    int64_t n;
    uint8_t root[32];
    char *text;
    cJSON *a, *b;
    struct oe_read *next; /* the run's reads in flight */
};
/* Takes the engine's shared read handle (on a worker; FO_OK or the open's
 * error) and gives it back (in both cases). */
int oe_rl_lock(struct orch_engine *e, struct fo_err *err);
void oe_rl_unlock(struct orch_engine *e);
/* Posts rd (for run r, or NULL): FO_E_NOMEM, nothing posted. */
int oe_read_post(struct orch_engine *e, struct run *r, struct oe_read *rd,
                 struct fo_err *err);
void oe_read_free(struct oe_read *rd);
/* The run goes: its reads' outcomes are dropped. */
void oe_reads_drop(struct run *r);
/* A session turn's reads: the session's start (n), the compaction's
 * text, replaces (a) and runs (b), the context's text and slices (a).
 * oe_ctx_read posts one and sets r->busy; once done the run steps and
 * oe_ctx_take gives it (NULL: not read yet). */
enum { OE_RD_SESSION = 1, OE_RD_COMPACTION, OE_RD_CONTEXT };
int oe_ctx_read(struct run *r, int what, struct fo_err *err);
struct oe_read *oe_ctx_take(struct run *r, int what);
/* The tree head a run's result names, read for run r (ended, still
 * listed): then oe_run_result (orch_flow.c) with it. */
int oe_head_read(struct run *r, struct fo_err *err);
/* The end of run r: its result (rc FO_OK: with the tree head size and
 * root; else why), its caller told, the run unlinked and freed. */
void oe_run_result(struct run *r, int rc, int64_t size, const uint8_t *root,
                   const struct fo_err *why);

/* The run's judgement for views and results: {"intent": ..., "retries"}. */
int oe_judgement_json(const struct run *r, cJSON *o);

/* ---- verifier and reviser hooks (orch_hooks.c) ---- */

/* The lane of task t. */
const struct orch_lane *oe_task_lane(const struct run *r, size_t t);
/* Starts task t's reviser (before its verdict, once per result) or
 * verifier (TS_VERIFY); the effect ends in a `revision` or `verification`
 * entry. */
int oe_hook_start(struct run *r, size_t t, int verifier, struct fo_err *err);
int oe_apply_revision(struct run *r, int64_t seq, int64_t parent,
                      const cJSON *b, struct fo_err *err);
int oe_apply_verification(struct run *r, int64_t seq, int64_t parent,
                          const cJSON *b, struct fo_err *err);

/* The run's state as JSON (what `forum run show` and the dashboard show of
 * it): {phase, lane, plan_seq, model_calls, escalations, answer_seq,
 * budget_seq, budget_spent, answer?, tasks: [{id, agent, instruction (as
 * edited at a gate), state, task_seq, result_seq, tool_calls, model?}],
 * gates: [{wave, state, request_seq, decided_seq}]}. Pure: the same for
 * the engine's live run and for one folded from the ledger. NULL when out
 * of memory. */
cJSON *oe_run_view(const struct run *r);

/* Entry en of run r, read from l (its body) and applied: resume and the
 * views' fold. rc of the read, the parse or apply; err names the entry
 * (FO_E_REDACTED: its body was redacted, err not prefixed). */
int oe_apply_stored(struct run *r, struct ledger *l,
                    const struct ledger_entry *en, struct fo_err *err);

/* orch_context.c: the most bytes of an upstream's output a task's prompt
 * takes, left bytes remaining of the task's budget; *why names the binding
 * budget (NULL: forum's own cap). */
size_t oe_upstream_room(const struct run *r, size_t left, const char **why);

#endif
