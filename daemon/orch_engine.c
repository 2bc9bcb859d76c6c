/* orch_engine: the run engine (daemon/orch_engine.h). A run is a fold over
 * its witnessed entries (apply) and the engine's next moves are decided from
 * that state alone (step); model calls, tasks and commits are events on one
 * loop. The control loop's semantics are the reference's: request → route
 * frame → plan (coordinator) → tasks wave by wave (a sliding window of
 * max_parallel) → verdicts → escalation up the tiers → synthesis → intent
 * coverage → answer, every step witnessed, under a run budget. Without
 * model providers each role is a deterministic stub. */
#include "daemon/orch_engine.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>

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
#define BAD_CALLS_MAX 3 /* malformed tool calls in a row a task survives */
#define COMMAND_TIMEOUT_MS 120000 /* run_command without timeout_s */

enum role {
    R_COORDINATOR,
    R_CLASSIFIER,
    R_VALIDATOR,
    R_SYNTHESIZER,
    R_SUMMARIZER
};

static const char *const role_name[] = {
    "coordinator", "classifier", "validator", "synthesizer", "summarizer"};
/* the tier each role asks for first */
static const int role_tier[] = {ORCH_TIER_CAPABLE, ORCH_TIER_CHEAP,
                                ORCH_TIER_CHEAP, ORCH_TIER_CAPABLE,
                                ORCH_TIER_CHEAP};

static const char coord_system[] =
    "You are the coordinator of forum, an orchestrator of AI agents. Break "
    "the user's request into tasks for the agents listed below. Answer with "
    "one JSON object and nothing else:\n"
    "{\"tasks\": [{\"id\": \"T1\", \"agent\": \"<agent name>\", "
    "\"instruction\": \"<what to do>\", \"depends_on\": [\"<task ids>\"], "
    "\"done_when\": [\"<a criterion>\", {\"contains\": \"<text>\"}]}]}\n"
    "depends_on and done_when are optional. Use as few tasks as the request "
    "needs, and only these agents:\n{{lanes}}\n"
    "The router suggests the agent \"{{lane}}\".";

static const char classifier_system[] =
    "You are the classifier of forum. Pick the one agent best suited to the "
    "user's request from this list:\n{{lanes}}\n"
    "Answer with one JSON object and nothing else: {\"lane\": \"<agent "
    "name>\"}.";

static const char validator_system[] =
    "You are the validator of forum. Judge whether the result meets its "
    "instruction and every criterion. Answer with one JSON object and "
    "nothing else: {\"pass\": true or false, \"reason\": \"<one sentence>\"}.";

static const char validator_user[] =
    "Instruction:\n{{instruction}}\n\nCriteria:\n{{criteria}}\n\n"
    "Result:\n{{output}}";

static const char synth_system[] =
    "You are the synthesizer of forum. Write one answer to the user's "
    "request from the results of the agents below. Answer in plain text.";

static const char summarizer_system[] =
    "You are the summarizer of forum. Below are the earlier turns of a "
    "session (and the summary so far, when there is one), which no longer "
    "fit in what its next turns are shown. Summarise them for those turns: "
    "keep the decisions, facts, names, numbers and open questions, drop the "
    "rest. Answer in plain text of at most {{words}} words.";

static const char synth_user[] =
    "Request:\n{{request}}\n\nResults:\n{{results}}";

/* "- name (category): domain" for every lane, capped. */
static int lanes_text(const struct orch *o, struct fo_buf *b)
{
    const struct orch_roster *r = orch_roster(o);
    for (size_t i = 0; i < r->n; i++) {
        const struct orch_lane *ln = &r->lanes[i];
        int rc = fo_buf_printf(b, "- %s (%s): %s\n", ln->name, ln->category,
                               ln->domain);
        if (rc == FO_E_TOO_LARGE) /* a long roster: the lanes that fit */
            return FO_OK;
        if (rc)
            return rc;
    }
    return FO_OK;
}

struct run;
static const char *run_lane(const struct run *r);
static const char *run_request(const struct run *r);

/* The stub coordinator: one task on the routed lane, the request as its
 * instruction. */
static char *stub_plan(const struct run *l)
{
    cJSON *pl = cJSON_CreateObject();
    cJSON *tasks = pl ? cJSON_AddArrayToObject(pl, "tasks") : NULL;
    cJSON *t = cJSON_CreateObject();
    char *s = NULL;
    if (tasks && t && cJSON_AddStringToObject(t, "id", "T1") &&
        cJSON_AddStringToObject(t, "agent", run_lane(l)) &&
        cJSON_AddStringToObject(t, "instruction", run_request(l))) {
        cJSON_AddItemToArray(tasks, t);
        t = NULL;
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (!fo_json_canon(pl, &b, NULL))
            s = fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
    }
    cJSON_Delete(t);
    cJSON_Delete(pl);
    return s;
}

static char *dispatch_key(const struct orch_task *k,
                          const struct orch_exec_config *ex)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    char *s = NULL;
    if (!fo_buf_printf(&b, "%s%c%s%c%s:%s:%d", k->agent, 0x1f, k->instruction,
                       0x1f, orch_exec_name(ex->kind), ex->model, ex->tier))
        s = fo_buf_detach(&b, NULL);
    fo_buf_release(&b);
    return s;
}

static int is_stopword(const char *w)
{
    static const char *const stop[] = {
        "about",  "after", "also",   "been",  "before", "being", "could",
        "does",   "each",  "from",   "have",  "into",   "just",  "like",
        "make",   "more",  "most",   "much",  "only",   "other", "over",
        "please", "same",  "should", "some",  "such",   "than",  "that",
        "their",  "them",  "then",   "there", "these",  "they",  "this",
        "those",  "very",  "want",   "what",  "when",   "where", "which",
        "while",  "will",  "with",   "would", "your"};
    for (size_t i = 0; i < sizeof(stop) / sizeof(stop[0]); i++)
        if (!strcmp(stop[i], w))
            return 1;
    return 0;
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static int alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* The intent coverage: the salient words of the request (the [a-z0-9]+
 * tokens of 4+ bytes, stopwords aside, at most SALIENT_MAX distinct) and
 * the share of them the answer contains (as a substring of its lowercased
 * text, so "tests" covers "test"... and "databases" covers "database"). */
static cJSON *coverage(const char *request, const char *answer)
{
    size_t alen = strlen(answer);
    char *low = malloc(alen + 1);
    cJSON *o = cJSON_CreateObject();
    cJSON *missing = o ? cJSON_AddArrayToObject(o, "missing") : NULL;
    char words[SALIENT_MAX][ORCH_KEYWORD_MAX + 1];
    size_t nw = 0, covered = 0, nmiss = 0;
    if (!low || !missing) {
        free(low);
        cJSON_Delete(o);
        return NULL;
    }
    for (size_t i = 0; i <= alen; i++)
        low[i] = lower(answer[i]);
    for (const char *p = request; *p && nw < SALIENT_MAX;) {
        while (*p && !alnum(lower(*p)))
            p++;
        char w[ORCH_KEYWORD_MAX + 1];
        size_t n = 0;
        while (*p && alnum(lower(*p))) {
            if (n < ORCH_KEYWORD_MAX)
                w[n++] = lower(*p);
            p++;
        }
        w[n] = '\0';
        if (n < 4 || is_stopword(w))
            continue;
        int dup = 0;
        for (size_t k = 0; k < nw && !dup; k++)
            dup = !strcmp(words[k], w);
        if (dup)
            continue;
        memcpy(words[nw++], w, n + 1);
        if (strstr(low, w)) {
            covered++;
        } else if (nmiss++ < MISSING_SHOWN) {
            cJSON *s = cJSON_CreateString(w);
            if (s)
                cJSON_AddItemToArray(missing, s);
        }
    }
    free(low);
    double score = nw ? (double)covered / (double)nw : 1.0;
    if (!cJSON_AddNumberToObject(o, "score", orch_round6(score)) ||
        !fo_json_add_int(o, "salient", (long long)nw) ||
        !fo_json_add_int(o, "covered", (long long)covered) ||
        !cJSON_AddBoolToObject(o, "flagged", score < ORCH_COVERAGE_MIN) ||
        !cJSON_AddNumberToObject(o, "threshold", ORCH_COVERAGE_MIN)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- the state of a run ------------------------------------------------- */

enum phase { PH_CONTEXT, PH_ROUTE, PH_PLAN, PH_WAVES, PH_SYNTH, PH_END };

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
    /* the caller */
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

static void gate_off_free(struct gate_off *g)
{
    free(g->body);
    cJSON_Delete(g->held);
    free(g);
}

/* A model call or a job in flight. */
enum eff_kind { E_ROLE, E_TASK_MODEL, E_TASK_JOB };
struct role_call_ctx;
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
    struct orch_live live; /* the lock this engine holds */
    int have_instance;
    /* commits done on other threads come back here */
    pthread_mutex_t mu;
    struct wr *doneq;
    struct event *wake;
    struct event *stop_ev;
    struct event *grace_ev; /* a shutdown's grace: then work is abandoned */
    struct orch_live *poll_live; /* the blocking host's run in the registry */
    struct event *gate_ev;       /* while gates wait: decisions, deadlines */
    struct gate_off *offq;       /* decisions on runs not here, committed */
    struct orch_mcpc *mcpc;      /* the MCP servers' clients, or NULL */
    struct orch_work *work;      /* the file tools' worker threads */
    struct event *disk_ev;       /* while commands run: the disk's reserve */
    int n_cmds;                  /* run_command jobs in flight */
    /* counters for /metrics (loop thread only) */
    uint64_t m_runs_started, m_calls_ok, m_calls_failed;
    uint64_t m_lat[10]; /* model call latency buckets, see LAT_BOUNDS */
    uint64_t m_tokens_in, m_tokens_out; /* as the providers reported */
    double m_lat_sum;
    int64_t gate_cursor; /* entries below it were looked at for decisions */
    /* run leases: on when cfg.lease_ms > 0 and the ledger keeps them */
    int leases;
    struct event *lease_ev;       /* renew, then claim expired ones */
    struct orch_lease_worker *lw; /* their round trips, off the loop */
    int mcp_closing, mcp_closed;  /* the MCP sessions ended at the stop */
    int lease_failing;            /* the last renewal failed (logged once) */
};

static const char *run_lane(const struct run *r)
{
    return r->lane;
}

/* What the models are asked: the request, after the session's context
 * when the run is a turn of one. */
static const char *run_prompt(const struct run *r)
{
    return r->prompt ? r->prompt : r->request;
}

static const char *run_request(const struct run *r)
{
    return r->request;
}

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

static void elog(struct orch_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void elog(struct orch_engine *e, const char *fmt, ...)
{
    if (!e->cfg.log)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    e->cfg.log(e->cfg.log_hook, "%s", line);
}

static void attempts_release(struct attempts *a)
{
    free(a->last);
    a->last = NULL;
}

static void run_free(struct run *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->t && r->p && i < r->p->n; i++) {
        free(r->t[i].output);
        cJSON_Delete(r->t[i].failed);
        attempts_release(&r->t[i].val);
        cJSON_Delete(r->t[i].conv);
        cJSON_Delete(r->t[i].pending);
        free(r->t[i].pending_text);
        free(r->t[i].mem_value);
        free(r->t[i].raw_args);
    }
    free(r->t);
    if (r->end_retry)
        event_free(r->end_retry);
    if (r->ws_fd >= 0)
        close(r->ws_fd);
    free(r->ws_path);
    free(r->g);
    cJSON_Delete(r->gates);
    free(r->session);
    cJSON_Delete(r->cmp_replaces);
    cJSON_Delete(r->cmp_runs);
    free(r->context);
    free(r->prompt);
    for (size_t i = 0; i < r->n_keys; i++)
        free(r->keys[i].key);
    free(r->keys);
    orch_plan_free(r->p);
    cJSON_Delete(r->given);
    attempts_release(&r->cls);
    attempts_release(&r->coord);
    free(r->request);
    free(r->answer);
    cJSON_Delete(r->coverage);
    free(r);
}

static struct run *run_find(const struct orch_engine *e, int64_t id)
{
    for (struct run *r = e->runs; r; r = r->next)
        if (r->id == id && id >= 0)
            return r;
    return NULL;
}

static void run_unlink(struct run *r)
{
    struct orch_engine *e = r->e;
    if (r->prev)
        r->prev->next = r->next;
    else
        e->runs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    e->n_runs--;
}

static long task_by_id(const struct run *r, const char *id)
{
    for (size_t i = 0; r->p && id && i < r->p->n; i++)
        if (!strcmp(r->p->tasks[i].id, id))
            return (long)i;
    return -1;
}

static long task_by_result(const struct run *r, int64_t seq)
{
    for (size_t i = 0; r->t && i < r->p->n; i++)
        if (r->t[i].result_seq == seq)
            return (long)i;
    return -1;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The run's time, less what it spent waiting for a human at its gates. */
static int64_t elapsed_ms(const struct run *r)
{
    return (now_us() - r->t0_us - r->wait_us) / 1000;
}

static void step(struct run *r);
static const char *str_of(const cJSON *b, const char *k);
static void step_name(const struct run *r, char *out, size_t size);

/* ---- writes ------------------------------------------------------------- */

static void wr_free(struct wr *w)
{
    if (!w)
        return;
    free(w->body);
    cJSON_Delete(w->payload);
    free(w);
}

static void on_committed(void *arg)
{
    struct wr *w = arg;
    struct orch_engine *e = w->r->e;
    pthread_mutex_lock(&e->mu);
    w->next = e->doneq;
    e->doneq = w;
    pthread_mutex_unlock(&e->mu);
    event_active(e->wake, EV_READ, 0);
}

static int apply(struct run *r, const char *actor, const char *kind,
                 int64_t seq, int64_t parent, const cJSON *b,
                 struct fo_err *err);
static void fail(struct run *r, int rc, const struct fo_err *err);
static int error_write(struct run *r);
static int end_retry(struct run *r, int rc);
static void run_end(struct run *r);

/* A committed (or failed) write, on the loop thread. */
static void gate_take(struct run *r, int64_t seq);

static void wr_landed(struct wr *w)
{
    struct run *r = w->r;
    r->writes--;
    if (w->spent)
        r->reserved--;
    if (w->task >= 0) { /* busy until its last write lands */
        struct task *s = &r->t[w->task];
        s->writes--;
        s->busy = s->writes > 0 || s->eff;
    }
    if (w->phase_busy)
        r->busy = 0;
    if (w->redact) { /* applies nothing: its caller decides */
        if (w->landed)
            w->landed(w->landed_arg, r, w->a.rc, -1, &w->a.err);
        wr_free(w);
        step(r);
        return;
    }
    if (w->a.rc == FO_E_EXISTS && w->a.sole_kinds) {
        /* a gate decision that lost a race (another request, another
         * daemon): not this run's failure; the decision that won is the
         * one the run takes */
        int64_t won = w->a.entry.seq;
        if (w->landed)
            w->landed(w->landed_arg, r, w->a.rc, -1, &w->a.err);
        wr_free(w);
        gate_take(r, won);
        return;
    }
    if (w->a.rc && r->failed_rc && !strcmp(w->a.kind, "error") &&
        end_retry(r, w->a.rc)) {
        wr_free(w);
        return;
    }
    int rc = w->a.rc;
    struct fo_err err = w->a.err;
    if (rc == FO_OK) {
        if (!strcmp(w->a.kind, "answer") || !strcmp(w->a.kind, "error"))
            r->end_on_record = 1;
        if (!strcmp(w->a.kind, "request")) {
            r->id = w->a.entry.seq;
            r->leased = w->a.lease_owner != NULL;
            if (r->resumable)
                elog(r->e, "run %lld: started (%s)", (long long)r->id, r->via);
            if (r->started)
                r->started(r->arg, r->id);
        }
        r->cur_ts = w->a.entry.ts;
        rc = apply(r, w->a.actor, w->a.kind, w->a.entry.seq, w->a.parent,
                   w->payload, &err);
    }
    if (w->landed)
        w->landed(w->landed_arg, r, w->a.rc ? w->a.rc : rc,
                  w->a.rc ? -1 : w->a.entry.seq, w->a.rc ? &w->a.err : &err);
    if (!strcmp(w->a.kind, "session_started")) {
        r->creating_session = 0; /* landed or failed: the others go on */
        for (;;) { /* from the head each time: a step may end a run */
            struct run *o = r->e->runs;
            while (o && !(o != r && o->waiting_session && o->session &&
                          r->session && !strcmp(o->session, r->session)))
                o = o->next;
            if (!o)
                break;
            o->waiting_session = 0;
            step(o);
        }
    }
    wr_free(w);
    if (rc)
        fail(r, rc, &err);
    step(r);
}

static void gate_off_landed(struct orch_engine *e, struct gate_off *g);
static int gate_lost(int64_t run, int64_t wave, const struct fo_err *why,
                     struct fo_err *err);

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    pthread_mutex_lock(&e->mu);
    struct wr *list = e->doneq;
    e->doneq = NULL;
    struct gate_off *off = e->offq;
    e->offq = NULL;
    pthread_mutex_unlock(&e->mu);
    while (off) {
        struct gate_off *n = off->next;
        gate_off_landed(e, off);
        off = n;
    }
    /* the queue is LIFO: land them in the order they were committed */
    struct wr *rev = NULL;
    while (list) {
        struct wr *n = list->next;
        list->next = rev;
        rev = list;
        list = n;
    }
    while (rev) {
        struct wr *n = rev->next;
        wr_landed(rev);
        rev = n;
    }
}

/* Witnesses payload (taken) as kind by actor under parent; the state
 * changes when it is committed. task >= 0 marks that task busy until then;
 * phase_busy the run's phase. */
/* A run another daemon may resume: leased while it runs here. */
static int leasable(const struct run *r)
{
    return r->e->leases && r->resumable &&
           (!strcmp(r->via, "submit") || !strcmp(r->via, "run_start") ||
            !strcmp(r->via, "plan_run"));
}

static int witness_cb(struct run *r, const char *actor, const char *kind,
                      int64_t parent, cJSON *payload, long task, int phase_busy,
                      int spent,
                      void (*landed)(void *, struct run *, int, int64_t,
                                     const struct fo_err *),
                      void *landed_arg, struct fo_err *err)
{
    struct orch_engine *e = r->e;
    struct wr *w = calloc(1, sizeof(*w));
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = w && payload ? fo_json_canon(payload, &b, err) : nomem(err);
    if (rc) {
        fo_buf_release(&b);
        cJSON_Delete(payload);
        free(w);
        return rc;
    }
    w->r = r;
    w->payload = payload;
    w->body = fo_buf_detach(&b, &w->a.body_len);
    fo_buf_release(&b);
    w->a.actor = actor;
    w->a.kind = kind;
    w->a.parent = parent;
    w->a.body = w->body;
    w->a.sole_kinds = orch_gate_sole(kind); /* a gate is decided once */
    if (r->id < 0 && !strcmp(kind, "request") && leasable(r)) {
        w->a.lease_owner = e->instance; /* leased with its request */
        w->a.lease_run = -1;
        w->a.lease_ms = e->cfg.lease_ms;
    } else if (r->leased) { /* written only while the lease is ours */
        w->a.lease_owner = e->instance;
        w->a.lease_run = r->id;
    }
    w->task = task;
    w->phase_busy = phase_busy;
    w->spent = spent;
    w->landed = landed;
    w->landed_arg = landed_arg;
    r->writes++;
    if (task >= 0) {
        r->t[task].busy = 1;
        r->t[task].writes++;
    }
    if (phase_busy)
        r->busy = 1;
    if (e->cfg.append) {
        rc = e->cfg.append(e->cfg.hook, &w->a, on_committed, w, err);
        if (rc) {
            r->writes--;
            if (task >= 0) {
                struct task *s = &r->t[task];
                s->writes--;
                s->busy = s->writes > 0 || s->eff;
            }
            if (phase_busy)
                r->busy = 0;
            wr_free(w);
        }
        return rc;
    }
    /* straight to the ledger: committed now, landed on the next turn */
    ledger_append_batch(e->cfg.ledger, &w->a, 1, &w->a.err);
    on_committed(w);
    return FO_OK;
}

static int witness(struct run *r, const char *actor, const char *kind,
                   int64_t parent, cJSON *payload, long task, int phase_busy,
                   int spent, struct fo_err *err)
{
    return witness_cb(r, actor, kind, parent, payload, task, phase_busy, spent,
                      NULL, NULL, err);
}

/* Redacts the body of entry seq for task (busy until it is done), never on
 * the loop thread when the host gave a redact hook (the daemon: its
 * committer thread, which owns a write handle and would otherwise contend
 * with the loop for the write lock and the WAL checkpoint); without one
 * (the CLI's private loop) here, as its appends are. landed gets the
 * outcome (FO_E_REDACTED: it was gone already) on the loop thread. */
static int redact_cb(struct run *r, int64_t seq, const char *reason, long task,
                     void (*landed)(void *, struct run *, int, int64_t,
                                    const struct fo_err *),
                     void *landed_arg, struct fo_err *err)
{
    struct orch_engine *e = r->e;
    struct wr *w = calloc(1, sizeof(*w));
    if (!w)
        return nomem(err);
    w->r = r;
    w->redact = 1;
    w->a.kind = "redaction";
    w->task = task;
    w->landed = landed;
    w->landed_arg = landed_arg;
    r->writes++;
    if (task >= 0) {
        r->t[task].busy = 1;
        r->t[task].writes++;
    }
    if (e->cfg.redact) {
        int rc = e->cfg.redact(e->cfg.hook, seq, reason, &w->a.rc, &w->a.err,
                               on_committed, w, err);
        if (rc) {
            r->writes--;
            if (task >= 0) {
                struct task *s = &r->t[task];
                s->writes--;
                s->busy = s->writes > 0 || s->eff;
            }
            free(w);
        }
        return rc;
    }
    w->a.rc = ledger_redact(e->cfg.ledger, seq, reason, NULL, &w->a.err);
    on_committed(w); /* landed on the next turn, like an append */
    return FO_OK;
}

/* ---- budget and halts --------------------------------------------------- */

static const char *halt_name(int h, const char *reason)
{
    return h == H_CANCEL ? "cancelled" : h == H_SHUTDOWN ? "shutdown" : reason;
}

static void effect_cancel(struct effect *f);

/* Abandons every effect in flight (cancel, shutdown): a task's job or
 * model call, a role's model call. */
static void abandon(struct run *r)
{
    if (r->eff) {
        effect_cancel(r->eff);
        r->eff = NULL;
        r->busy = 0;
        r->reserved = 0;
    }
    for (size_t i = 0; r->t && i < r->p->n; i++)
        if (r->t[i].eff) {
            effect_cancel(r->t[i].eff);
            r->t[i].eff = NULL;
            r->t[i].busy = 0;
        }
}

static void set_halt(struct run *r, int h, const char *reason,
                     const char *before)
{
    if (r->ended)
        return;
    /* a cancel overrides a spent budget whose entry is not written yet:
     * what the budget lets finish (a long command) is abandoned too */
    if (r->halt && !(h == H_CANCEL && r->halt == H_BUDGET && r->budget_seq < 0))
        return;
    r->halt = h;
    r->dirty = 1;
    r->halt_reason = halt_name(h, reason);
    snprintf(r->stopped_before, sizeof(r->stopped_before), "%s",
             before ? before : "");
    if (h == H_CANCEL) /* a shutdown abandons its work after the grace */
        abandon(r);
}

/* 1 when the run may make one more model call now (then reserved), else
 * the run halts (0). A stub task only checks for a cancel or a stop. */
static int spend(struct run *r, const char *before, int free_step)
{
    if (r->halt)
        return 0;
    if (free_step)
        return 1;
    if (r->calls + r->reserved >= r->max_calls)
        set_halt(r, H_BUDGET, "max_model_calls", before);
    else if (r->max_seconds && elapsed_ms(r) >= (int64_t)r->max_seconds * 1000)
        set_halt(r, H_BUDGET, "max_seconds", before);
    if (r->halt)
        return 0;
    r->reserved++;
    return 1;
}

/* ---- model calls and jobs ----------------------------------------------- */

static void effect_cancel(struct effect *f)
{
    if (!f)
        return;
    if (f->call)
        orch_model_call_cancel(f->call);
    if (f->job)
        orch_job_cancel(f->job);
    if (f->mcp)
        orch_mcpc_cancel(f->mcp);
    if (f->cmd)
        f->r->e->n_cmds--;
    if (f->tool) { /* the thread finishes on its own; its result is dropped */
        f->tool->f = NULL;
        orch_work_cancel(f->tool->job);
    }
    if (f->stub) {
        event_free(f->stub->ev);
        free(f->stub->text);
        free(f->stub);
    }
    free(f); /* the first member of its context */
}

typedef void (*role_done_fn)(struct run *r, long task, int rc,
                             struct orch_model_reply *rep,
                             const struct fo_err *err);

struct role_call_ctx {
    struct effect f;
    role_done_fn fn;
};

/* The bounds (seconds) of the model-call latency histogram of /metrics. */
static const double lat_bounds[9] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

/* A model call (a provider's or the command's, never the stub's) ended;
 * rep (may be NULL) says how long it took and the tokens it used. */
static void record_call(struct orch_engine *e, int ok,
                        const struct orch_model_reply *rep)
{
    int64_t elapsed_us = rep ? rep->elapsed_us : 0;
    if (ok && rep && rep->tokens_in > 0)
        e->m_tokens_in += (uint64_t)rep->tokens_in;
    if (ok && rep && rep->tokens_out > 0)
        e->m_tokens_out += (uint64_t)rep->tokens_out;
    double sec = (double)elapsed_us / 1e6;
    size_t i = 0;
    while (i < 9 && sec > lat_bounds[i])
        i++;
    e->m_lat[i]++;
    e->m_lat_sum += sec;
    if (ok)
        e->m_calls_ok++;
    else
        e->m_calls_failed++;
}

static int guard_role(struct run *r, int role, long task, const char *text,
                      char **clean, struct fo_err *err);

/* Text a model's server wrote beside the reply (the model field, an
 * error's body) is scanned like the reply: what the guardrails find is
 * replaced in place (cap bytes, cut on a character) before any entry or
 * log line holds it. */
static void scrub_in_place(const struct orch *o, char *s, size_t cap)
{
    if (!s || !s[0])
        return;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (orch_guard_scan(orch_guardrails(o), s, strlen(s), &b, NULL) > 0 &&
        b.data) {
        size_t n = orch_utf8_prefix(b.data, b.len, cap - 1);
        memcpy(s, b.data, n);
        s[n] = '\0';
    }
    fo_buf_release(&b);
}

/* A reply's side texts scrubbed (scrub_in_place); *err_out the error to
 * use (a scrubbed copy of err, or NULL). */
static const struct fo_err *reply_scrub(const struct orch *o,
                                        struct orch_model_reply *rep,
                                        const struct fo_err *err,
                                        struct fo_err *copy)
{
    if (rep)
        scrub_in_place(o, rep->model, sizeof(rep->model));
    if (!err)
        return NULL;
    *copy = *err;
    scrub_in_place(o, copy->msg, sizeof(copy->msg));
    return copy;
}

static void on_role_reply(void *arg, int rc, struct orch_model_reply *rep,
                          const struct fo_err *err)
{
    struct role_call_ctx *c = arg;
    struct run *r = c->f.r;
    struct fo_err scrubbed;
    err = reply_scrub(r->e->o, rep, err, &scrubbed);
    long task = c->f.task;
    int role = c->f.role, model = !c->f.stub;
    if (model) /* the stub is no model call */
        record_call(r->e, rc == FO_OK, rep);
    role_done_fn fn = c->fn;
    if (task >= 0) {
        r->t[task].eff = NULL;
        r->t[task].busy = 0;
    } else {
        r->eff = NULL;
        r->busy = 0;
    }
    free(c);
    /* a model's reply passes the guardrails before any of it is witnessed
     * (a plan, a verdict's reason, an answer, a rejected attempt) */
    char *clean = NULL, *was = rep ? rep->text : NULL;
    struct fo_err gerr;
    int g = model && rc == FO_OK && was
                ? guard_role(r, role, task, was, &clean, &gerr)
                : 0;
    if (g < 0) {
        fail(r, -g, &gerr);
        step(r);
        return;
    }
    if (clean) {
        rep->text = clean;
        rep->text_len = strlen(clean);
    }
    fn(r, task, rc, rep, err);
    if (clean) {
        if (rep->text == clean) /* not taken */
            free(clean);
        rep->text = was;
        rep->text_len = was ? strlen(was) : 0;
    }
    step(r);
}

/* The tier to ask for a role: its own when a provider serves it, else the
 * nearest above, else below. */
static int pick_tier(const struct orch *o, int want)
{
    static const int order[3][3] = {{0, 1, 2}, {1, 2, 0}, {2, 1, 0}};
    for (int i = 0; i < 3; i++) {
        int t = order[want][i];
        if (o->model_has[0][t] || o->model_has[1][t])
            return t;
    }
    return want;
}

/* Starts a role's model call (the budget was spent for it). With no
 * providers the stub answers stub_text on the next turn of the loop. */
static int role_start(struct run *r, int role, long task,
                      const struct orch_model_msg *m, size_t n,
                      const char *stub_text, role_done_fn fn,
                      struct fo_err *err);

static void on_stub_reply(evutil_socket_t fd, short what, void *arg)
{
    struct stub_reply *s = arg;
    (void)fd, (void)what;
    struct orch_model_reply rep = {0};
    rep.text = s->text;
    rep.text_len = strlen(s->text);
    snprintf(rep.model, sizeof(rep.model), "stub");
    struct role_call_ctx *c = s->c;
    event_free(s->ev);
    free(s);
    on_role_reply(c, FO_OK, &rep, NULL);
    free(rep.text);
}

/* A role answered by the --cmd command: its stdout is the reply. */
static void on_role_job(void *arg, int rc, struct orch_result *res,
                        const struct fo_err *jerr)
{
    struct role_call_ctx *c = arg;
    struct orch_model_reply rep = {0};
    struct fo_err err;
    fo_err_clear(&err);
    snprintf(rep.model, sizeof(rep.model), "%s", res->model);
    rep.elapsed_us = res->elapsed_us;
    rep.attempts = 1;
    if (rc == FO_OK && res->ok) {
        rep.text = res->output;
        rep.text_len = res->output_len;
    } else if (rc == FO_OK) {
        size_t el = res->errout
                        ? orch_utf8_prefix(res->errout, res->errout_len, 300)
                        : 0;
        rc = res->timed_out ? FO_E_TIMEOUT : FO_E_UPSTREAM;
        fo_err_set(&err, rc, "the command %s%s%.*s",
                   res->error[0] ? res->error : "failed", el ? ": " : "",
                   (int)el, el ? res->errout : "");
    } else {
        err = *jerr;
    }
    int gave = rep.text != NULL;
    on_role_reply(c, rc, &rep, &err);
    if (gave && !rep.text) /* the role took the output */
        res->output = NULL;
}

static int role_start(struct run *r, int role, long task,
                      const struct orch_model_msg *m, size_t n,
                      const char *stub_text, role_done_fn fn,
                      struct fo_err *err)
{
    const struct orch *o = r->e->o;
    struct role_call_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return nomem(err);
    c->f = (struct effect){.kind = E_ROLE, .r = r, .role = role, .task = task};
    c->fn = fn;
    int rc = FO_OK;
    if (!o->models && o->argv) { /* --cmd answers every role */
        struct fo_buf prompt;
        fo_buf_init(&prompt, PROMPT_MAX);
        for (size_t i = 0; i < n && !rc; i++)
            rc = fo_buf_printf(&prompt, "%s%s", i ? "\n\n" : "", m[i].content);
        if (!rc)
            rc = orch_job_start(&o->exec, r->e->cfg.base, prompt.data,
                                on_role_job, c, &c->f.job, err);
        else
            rc = fo_err_set(err, rc,
                            rc == FO_E_TOO_LARGE
                                ? "the role's prompt is over 1 MiB"
                                : NULL);
        fo_buf_release(&prompt);
        if (rc) {
            free(c);
            return rc;
        }
    } else if (!o->models) {
        struct stub_reply *s = calloc(1, sizeof(*s));
        char *text = orch_strdup(stub_text);
        struct event *ev =
            s ? event_new(r->e->cfg.base, -1, 0, on_stub_reply, s) : NULL;
        if (!s || !text || !ev) {
            free(s);
            free(text);
            if (ev)
                event_free(ev);
            free(c);
            return nomem(err);
        }
        *s = (struct stub_reply){.ev = ev, .c = c, .text = text};
        c->f.stub = s;
        event_active(ev, EV_TIMEOUT, 0);
    } else {
        rc = orch_model_call_start(o->models, r->e->cfg.base, r->e->cfg.dns,
                                   ORCH_EXEC_DEFAULT,
                                   pick_tier(o, role_tier[role]), m, n,
                                   on_role_reply, c, &c->f.call, err);
        if (rc) {
            free(c);
            return rc;
        }
    }
    if (task >= 0) {
        r->t[task].eff = &c->f;
        r->t[task].busy = 1;
    } else {
        r->eff = &c->f;
        r->busy = 1;
    }
    return FO_OK;
}

/* A role whose reply must be JSON: the messages of attempt a->n + 1 (the
 * last rejected reply and what was wrong, when there is one). */
static int json_role_start(struct run *r, int role, long task,
                           const char *system, const char *user,
                           const char *stub_text, const struct attempts *a,
                           role_done_fn fn, struct fo_err *err)
{
    char fix[FO_ERR_MSG_MAX + 160];
    struct orch_model_msg m[4] = {{.role = "system", .content = system},
                                  {.role = "user", .content = user}};
    size_t n = 2;
    if (a->last) {
        snprintf(fix, sizeof(fix),
                 "That reply was rejected: %s. Answer again with only the "
                 "corrected JSON object.",
                 a->why);
        m[n++] =
            (struct orch_model_msg){.role = "assistant", .content = a->last};
        m[n++] = (struct orch_model_msg){.role = "user", .content = fix};
    }
    return role_start(r, role, task, m, n, stub_text, fn, err);
}

/* The `<role>_attempt` entry of a rejected reply. */
static cJSON *attempt_json(int role, int attempt, const char *why,
                           const char *model, const char *text)
{
    cJSON *e = cJSON_CreateObject();
    size_t len = strlen(text);
    size_t keep = orch_utf8_prefix(text, len, REPLY_KEEP);
    char *cut = malloc(keep + 1);
    if (cut) {
        memcpy(cut, text, keep);
        cut[keep] = '\0';
    }
    int ok = e && cut && cJSON_AddStringToObject(e, "role", role_name[role]) &&
             fo_json_add_int(e, "attempt", attempt) &&
             cJSON_AddFalseToObject(e, "ok") &&
             cJSON_AddStringToObject(e, "error", why) &&
             cJSON_AddStringToObject(e, "model", model) &&
             cJSON_AddStringToObject(e, "reply", cut) &&
             (keep == len || cJSON_AddTrueToObject(e, "reply_truncated"));
    free(cut);
    if (!ok) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

/* Witnesses a rejected reply as `<role>_attempt`; the role's step counts
 * them (its attempts) and gives up after ORCH_JSON_ATTEMPTS. */
static int rejected(struct run *r, int role, long task, int64_t parent,
                    const struct attempts *a, const char *why,
                    const char *model, const char *text, struct fo_err *err)
{
    /* the kind outlives this call (the write lands later): a constant */
    static const char *const kinds[] = {
        "coordinator_attempt", "classifier_attempt", "validator_attempt",
        "synthesizer_attempt"};
    cJSON *e = attempt_json(role, a->n + 1, why, model, text);
    if (!e)
        return nomem(err);
    return witness(r, role_name[role], kinds[role], parent, e, task, task < 0,
                   1, err);
}

/* ---- route -------------------------------------------------------------- */

static int route_entry(struct run *r, struct orch_route *rt, const char *lane,
                       const char *by, int spent, struct fo_err *err)
{
    cJSON *e = orch_route_json(rt);
    cJSON *c = e ? cJSON_GetObjectItemCaseSensitive(e, "candidates") : NULL;
    while (c && cJSON_GetArraySize(c) > ROUTE_SHOWN)
        cJSON_DeleteItemFromArray(c, cJSON_GetArraySize(c) - 1);
    if (!e || !cJSON_AddStringToObject(e, "lane", lane) ||
        !cJSON_AddStringToObject(e, "by", by)) {
        cJSON_Delete(e);
        return nomem(err);
    }
    return witness(r, "router", "route", r->id, e, -1, 1, spent, err);
}

static void on_classifier(struct run *r, long task, int rc,
                          struct orch_model_reply *rep,
                          const struct fo_err *cerr)
{
    (void)task;
    struct fo_err err;
    struct orch_route rt = {0};
    const struct orch_roster *ro = orch_roster(r->e->o);
    if (rc) {
        fail(r, rc, cerr);
        return;
    }
    rc = orch_route(ro, r->request, strlen(r->request), &rt, &err);
    if (rc) {
        fail(r, rc, &err);
        return;
    }
    cJSON *j = NULL;
    struct fo_err why;
    fo_err_clear(&why);
    const struct orch_lane *ln = NULL;
    if (!orch_json_extract(rep->text, rep->text_len, &j, &why)) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "lane");
        if (!cJSON_IsString(v))
            fo_err_set(&why, FO_E_INVALID, "\"lane\" must be a string");
        else if (!(ln = orch_roster_find(ro, v->valuestring)))
            fo_err_set(&why, FO_E_INVALID, "no agent named \"%.64s\"",
                       v->valuestring);
    }
    cJSON_Delete(j);
    if (ln)
        rc = route_entry(r, &rt, ln->name, "classifier", 1, &err);
    else /* after ORCH_JSON_ATTEMPTS of these, route_step takes the top
          * candidate */
        rc = rejected(r, R_CLASSIFIER, -1, r->id, &r->cls, why.msg, rep->model,
                      rep->text, &err);
    orch_route_release(&rt);
    if (rc)
        fail(r, rc, &err);
}

/* ---- a session's turn: its context --------------------------------------- */

/* r->context and r->prompt from the ledger (reads only): what the
 * session's earlier turns and facts give this turn within its budget.
 * *slices (may be NULL) gets the budget's account of every slice. */
static int session_context(struct run *r, cJSON **slices, struct fo_err *err)
{
    char *text = NULL;
    cJSON *sl = NULL;
    int rc = orch_session_context(r->e->cfg.ledger, r->session, r->request,
                                  r->id, &r->lim, &text, &sl, err);
    if (rc)
        return rc;
    free(r->context);
    free(r->prompt);
    r->context = text;
    r->prompt = NULL;
    if (text) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (fo_buf_printf(&b, "%s\nThe request of this turn:\n%s", text,
                          r->request) == FO_OK)
            r->prompt = fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
        if (!r->prompt) {
            cJSON_Delete(sl);
            return nomem(err);
        }
    }
    if (slices)
        *slices = sl;
    else
        cJSON_Delete(sl);
    return FO_OK;
}

/* ---- compaction by summary
 * ---------------------------------------------------
 *
 * With "compaction": "summary" in a turn's context limits, the turns its
 * history has no room for are not only left out: before the turn entry,
 * the summarizer role (cheap tier, on the async model path like every
 * role: the loop thread never waits for it) is asked to summarise them
 * (and the summary so far), and the summary is witnessed as a
 * `compaction` entry under the session's session_started {session, run,
 * replaces: the turn entries' seqs, runs, summary, model}. The session's
 * reader (orch_session_context) then shows that summary instead of those
 * turns, in this turn and every later one, and after a restart, since it
 * is read back from the ledger; nothing is deleted. A failed summary call
 * leaves the turn to the budget as before (the turns are dropped). */

/* The longest summary kept: half the history budget. */
static size_t summary_max(const struct run *r)
{
    return (size_t)r->lim.history * 4 / 2;
}

static void on_summary(struct run *r, long task, int rc,
                       struct orch_model_reply *rep, const struct fo_err *serr)
{
    struct fo_err err;
    (void)task;
    cJSON *replaces = r->cmp_replaces, *runs = r->cmp_runs;
    r->cmp_replaces = r->cmp_runs = NULL;
    if (rc) { /* the budget drops the turns, as without a summary */
        elog(r->e, "run %lld: no summary of session %s: %s", (long long)r->id,
             r->session, serr ? serr->msg : "the model call failed");
        r->reserved--;
        cJSON_Delete(replaces);
        cJSON_Delete(runs);
        return;
    }
    size_t keep = orch_utf8_prefix(rep->text, rep->text_len, summary_max(r));
    char *sum = malloc(keep + 1);
    cJSON *o = sum ? cJSON_CreateObject() : NULL;
    if (sum) {
        memcpy(sum, rep->text, keep);
        sum[keep] = '\0';
    }
    int ok = o && cJSON_AddStringToObject(o, "session", r->session) &&
             fo_json_add_int(o, "run", r->id) &&
             cJSON_AddItemToObject(o, "replaces", replaces) &&
             ((replaces = NULL), cJSON_AddItemToObject(o, "runs", runs)) &&
             ((runs = NULL), cJSON_AddStringToObject(o, "summary", sum)) &&
             (keep == rep->text_len ||
              cJSON_AddTrueToObject(o, "summary_truncated")) &&
             cJSON_AddStringToObject(o, "model", rep->model);
    free(sum);
    cJSON_Delete(replaces);
    cJSON_Delete(runs);
    if (!ok) {
        cJSON_Delete(o);
        r->reserved--;
        fail(r, nomem(&err), &err);
        return;
    }
    rc = witness(r, "summarizer", "compaction", r->session_start, o, -1, 1, 1,
                 &err);
    if (rc)
        fail(r, rc, &err);
}

/* Asks for a summary when the history would drop turns: 1 when it did
 * (the context step waits for it), 0 to go on without one. */
static int compaction_step(struct run *r)
{
    struct fo_err err;
    char *text = NULL;
    cJSON *replaces = NULL, *runs = NULL;
    r->compacted = 1; /* once per turn, whatever comes of it */
    if (summary_max(r) < 4)
        return 0; /* no room for a summary either */
    int rc =
        orch_session_compaction(r->e->cfg.ledger, r->session, r->request, r->id,
                                &r->lim, &text, &replaces, &runs, &err);
    if (rc) {
        fail(r, rc, &err);
        return 1;
    }
    if (!text)
        return 0; /* nothing is dropped */
    if (!spend(r, "summarizer", 0)) {
        free(text);
        cJSON_Delete(replaces);
        cJSON_Delete(runs);
        return 1; /* the run halts */
    }
    char words[32], *system = NULL;
    snprintf(words, sizeof(words), "%zu", summary_max(r) / 6 + 1);
    struct orch_tmpl_var v[] = {{"words", words}};
    rc = orch_template_render(summarizer_system, v, 1, PROMPT_MAX, &system,
                              &err);
    /* the stub (no model): the newest part of the text that fits */
    size_t len = strlen(text), max = summary_max(r);
    const char *stub = text;
    if (len > max) {
        stub = text + (len - max);
        while (*stub && ((unsigned char)*stub & 0xC0) == 0x80)
            stub++;
    }
    if (!rc) {
        struct orch_model_msg m[2] = {{.role = "system", .content = system},
                                      {.role = "user", .content = text}};
        cJSON_Delete(r->cmp_replaces);
        cJSON_Delete(r->cmp_runs);
        r->cmp_replaces = replaces;
        r->cmp_runs = runs;
        replaces = runs = NULL;
        rc = role_start(r, R_SUMMARIZER, -1, m, 2, stub, on_summary, &err);
    }
    free(system);
    free(text);
    cJSON_Delete(replaces);
    cJSON_Delete(runs);
    if (rc) {
        r->reserved--;
        fail(r, rc, &err);
    }
    return 1;
}

/* Before the route: the session exists (its first turn writes
 * session_started, once, whatever runs of it start together), then the
 * `turn` entry, with a `context_budget` entry per slice of context. */
static void context_step(struct run *r)
{
    struct orch_engine *e = r->e;
    struct fo_err err;
    int rc = FO_OK;
    if (r->waiting_session || r->creating_session)
        return;
    if (r->session_start < 0) {
        struct orch_session *s = NULL;
        rc = orch_session_read(e->cfg.ledger, r->session, -1, &s, &err);
        if (rc == FO_OK) {
            r->session_start = orch_session_start(s);
            orch_session_free(s);
        } else if (rc == FO_E_NOT_FOUND) {
            for (struct run *o = e->runs; o; o = o->next)
                if (o != r && o->creating_session && o->session &&
                    !strcmp(o->session, r->session)) {
                    r->waiting_session = 1; /* woken when it lands */
                    return;
                }
            cJSON *b = cJSON_CreateObject();
            if (!b || !cJSON_AddStringToObject(b, "session", r->session)) {
                cJSON_Delete(b);
                fail(r, nomem(&err), &err);
                return;
            }
            r->creating_session = 1;
            rc = witness(r, "session", "session_started", LEDGER_NO_PARENT, b,
                         -1, 1, 0, &err);
            if (rc) {
                r->creating_session = 0;
                fail(r, rc, &err);
            }
            return;
        } else {
            fail(r, rc, &err);
            return;
        }
    }
    if (r->lim.summary && !r->compacted && compaction_step(r))
        return; /* the summary first */
    cJSON *slices = NULL;
    rc = session_context(r, &slices, &err);
    if (rc) {
        fail(r, rc, &err);
        return;
    }
    long long turn = 1;
    const cJSON *x;
    cJSON_ArrayForEach (x, slices) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(x, "source");
        long long n = 0;
        turn += cJSON_IsString(src) && !strcmp(src->valuestring, "history");
        if (cJSON_IsString(src) && !strcmp(src->valuestring, "summary") &&
            fo_json_get_int(x, "turns", 0, INT32_MAX, &n) == FO_OK)
            turn += n;
    }
    cJSON *t = cJSON_CreateObject();
    if (!t || !cJSON_AddStringToObject(t, "session", r->session) ||
        !fo_json_add_int(t, "run", r->id) ||
        !fo_json_add_int(t, "turn", turn)) {
        cJSON_Delete(t);
        cJSON_Delete(slices);
        fail(r, nomem(&err), &err);
        return;
    }
    /* under the request, so a resumed run finds it among its entries (the
     * session finds its turns through the index of turns) */
    rc = witness(r, "session", "turn", r->id, t, -1, 1, 0, &err);
    /* what the budget made of each slice: sizes and actions, never text */
    cJSON *sl = slices ? slices->child : NULL;
    while (!rc && sl) {
        cJSON *next = sl->next;
        cJSON *one = cJSON_DetachItemViaPointer(slices, sl);
        if (!fo_json_add_int(one, "run", r->id)) {
            cJSON_Delete(one);
            rc = nomem(&err);
            break;
        }
        rc =
            witness(r, "context", "context_budget", r->id, one, -1, 0, 0, &err);
        sl = next;
    }
    cJSON_Delete(slices);
    if (rc)
        fail(r, rc, &err);
}

static void route_step(struct run *r)
{
    struct fo_err err;
    struct orch_route rt = {0};
    const struct orch_roster *ro = orch_roster(r->e->o);
    int rc = orch_route(ro, r->request, strlen(r->request), &rt, &err);
    if (rc) {
        fail(r, rc, &err);
        return;
    }
    if (rt.n == 0) {
        rc = fo_err_set(&err, FO_E_INVALID, "the roster has no lanes");
    } else if (rt.decided) {
        rc = route_entry(r, &rt, rt.decided, "router", 0, &err);
    } else if (!r->e->o->models || r->cls.n >= ORCH_JSON_ATTEMPTS) {
        rc = route_entry(r, &rt, rt.candidates[0].agent, "top_candidate", 0,
                         &err);
    } else if (spend(r, "classifier", 0)) {
        struct fo_buf lanes;
        fo_buf_init(&lanes, LANES_TEXT_MAX);
        for (size_t i = 0; !rc && i < rt.n && i < ROUTE_SHOWN; i++) {
            const struct orch_lane *ln =
                orch_roster_find(ro, rt.candidates[i].agent);
            rc = fo_buf_printf(&lanes, "- %s (%s): %s\n", ln->name,
                               ln->category, ln->domain);
        }
        char *text = NULL;
        struct orch_tmpl_var v[] = {{"lanes", lanes.data ? lanes.data : ""}};
        rc = rc ? nomem(&err)
                : orch_template_render(classifier_system, v, 1, PROMPT_MAX,
                                       &text, &err);
        if (!rc)
            rc = json_role_start(r, R_CLASSIFIER, -1, text, r->request, "",
                                 &r->cls, on_classifier, &err);
        free(text);
        fo_buf_release(&lanes);
        if (rc)
            r->reserved--;
    }
    orch_route_release(&rt);
    if (rc)
        fail(r, rc, &err);
}

/* ---- plan --------------------------------------------------------------- */

static cJSON *plan_entry_json(struct run *r, const struct orch_plan *p,
                              const char *model, int attempts)
{
    cJSON *e = orch_plan_json(p);
    if (!e || !fo_json_add_int(e, "max_parallel", r->e->o->max_parallel) ||
        (model && !cJSON_AddStringToObject(e, "model", model)) ||
        (attempts && !fo_json_add_int(e, "attempts", attempts)) ||
        (r->route_seq >= 0 && !fo_json_add_int(e, "route_seq", r->route_seq))) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

static void on_coordinator(struct run *r, long task, int rc,
                           struct orch_model_reply *rep,
                           const struct fo_err *cerr)
{
    (void)task;
    struct fo_err err;
    if (rc) {
        struct fo_err e2 = *cerr;
        fo_err_prefix(&e2, "coordinator");
        fail(r, rc, &e2);
        return;
    }
    cJSON *j = NULL;
    struct orch_plan *p = NULL;
    struct fo_err why;
    fo_err_clear(&why);
    rc = orch_json_extract(rep->text, rep->text_len, &j, &why);
    if (!rc)
        rc = orch_plan_compile(j, orch_roster(r->e->o), &p, &why);
    cJSON_Delete(j);
    if (rc == FO_E_NOMEM) {
        fail(r, rc, &why);
        return;
    }
    if (!rc) {
        cJSON *e = plan_entry_json(r, p, rep->model, r->coord.n + 1);
        orch_plan_free(p);
        rc = e ? witness(r, "coordinator", "plan", r->id, e, -1, 1, 1, &err)
               : nomem(&err);
    } else {
        rc = rejected(r, R_COORDINATOR, -1, r->id, &r->coord, why.msg,
                      rep->model, rep->text, &err);
    }
    if (rc)
        fail(r, rc, &err);
}

static void plan_step(struct run *r)
{
    struct fo_err err;
    int rc = FO_OK;
    if (r->given) { /* plan_run: the plan given is the plan */
        struct orch_plan *p = NULL;
        rc = orch_plan_compile(r->given, orch_roster(r->e->o), &p, &err);
        cJSON *e = rc ? NULL : plan_entry_json(r, p, NULL, 0);
        orch_plan_free(p);
        if (!rc)
            rc = e ? witness(r, "planner", "plan", r->id, e, -1, 1, 0, &err)
                   : nomem(&err);
        if (rc)
            fail(r, rc, &err);
        return;
    }
    if (r->coord.n >= ORCH_JSON_ATTEMPTS) {
        fo_err_set(&err, FO_E_UPSTREAM,
                   "coordinator: no valid reply after %d attempts: %s",
                   r->coord.n, r->coord.why);
        fail(r, FO_E_UPSTREAM, &err);
        return;
    }
    if (!spend(r, "coordinator", 0))
        return;
    struct fo_buf lanes;
    fo_buf_init(&lanes, LANES_TEXT_MAX);
    char *system = NULL, *stub = NULL;
    rc = lanes_text(r->e->o, &lanes);
    struct orch_tmpl_var v[] = {{"lanes", lanes.data ? lanes.data : ""},
                                {"lane", r->lane}};
    if (rc)
        rc = nomem(&err);
    else
        rc =
            orch_template_render(coord_system, v, 2, PROMPT_MAX, &system, &err);
    if (!rc && !(stub = stub_plan(r)))
        rc = nomem(&err);
    if (!rc)
        rc = json_role_start(r, R_COORDINATOR, -1, system, run_prompt(r), stub,
                             &r->coord, on_coordinator, &err);
    free(system);
    free(stub);
    fo_buf_release(&lanes);
    if (rc) {
        r->reserved--;
        fail(r, rc, &err);
    }
}

/* ---- tasks -------------------------------------------------------------- */

/* The api index and tier of a model executor, or -1. */
static int model_slot(const struct orch *o, const struct orch_exec_config *ex,
                      int *api, int *tier)
{
    for (int a = 0; a < 2; a++)
        for (int t = 0; t < 3; t++)
            if (ex == &o->model_exec[a][t]) {
                *api = a;
                *tier = t;
                return 0;
            }
    return -1;
}

static long key_seen(const struct run *r, const char *key)
{
    for (size_t i = 0; i < r->n_keys; i++)
        if (!strcmp(r->keys[i].key, key))
            return (long)r->keys[i].task;
    return -1;
}

/* Records key (taken, freed on failure) as dispatched by task. */
static int key_add(struct run *r, char *key, size_t task)
{
    struct dkey *k = realloc(r->keys, (r->n_keys + 1) * sizeof(*k));
    if (!k) {
        free(key);
        return FO_E_NOMEM;
    }
    r->keys = k;
    r->keys[r->n_keys++] = (struct dkey){key, task};
    return FO_OK;
}

/* The prompt: the instruction, the outputs of data upstreams that ran ok
 * (capped, marked), and on an escalation what the last attempt failed. */
static int build_prompt(const struct run *r, size_t t, const cJSON *failed,
                        struct fo_buf *b, cJSON *injected)
{
    const struct orch_task *k = &r->p->tasks[t];
    int rc = fo_buf_puts(b, k->instruction);
    for (size_t d = 0; !rc && d < k->n_deps; d++) {
        const struct task *u = &r->t[k->dep_index[d]];
        if (k->deps[d].type != ORCH_EDGE_DATA || !u->output)
            continue;
        size_t n =
            orch_utf8_prefix(u->output, u->output_len, r->e->o->inject_max);
        rc =
            fo_buf_printf(b, "\n\n--- upstream %s output ---\n", k->deps[d].id);
        if (!rc)
            rc = fo_buf_append(b, u->output, n);
        if (!rc && n < u->output_len)
            rc = fo_buf_printf(b,
                               "\n[forum: upstream output truncated at %zu of "
                               "%zu bytes]",
                               n, u->output_len);
        if (!rc)
            rc = fo_buf_printf(b, "\n--- end upstream %s ---", k->deps[d].id);
        if (!rc && injected) {
            cJSON *s = cJSON_CreateString(k->deps[d].id);
            if (!s)
                return FO_E_NOMEM;
            cJSON_AddItemToArray(injected, s);
        }
    }
    if (!rc && failed && cJSON_GetArraySize(failed) > 0) {
        rc = fo_buf_puts(b, "\n\n[forum: a previous attempt did not pass "
                            "these checks:");
        const cJSON *f;
        cJSON_ArrayForEach (f, failed)
            if (!rc && cJSON_IsString(f))
                rc = fo_buf_printf(b, "\n- %s", f->valuestring);
        if (!rc)
            rc = fo_buf_puts(b, "\nMake this attempt meet every one.]");
    }
    return rc;
}

/* Witnesses the `task` entry of task t's next attempt on ex (parent: the
 * plan, or the escalation that re-runs it). */
static int task_begin(struct run *r, size_t t,
                      const struct orch_exec_config *ex, int64_t parent,
                      struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    int api = -1, tier = -1;
    model_slot(r->e->o, ex, &api, &tier);
    cJSON *o = cJSON_CreateObject();
    cJSON *inj = o ? cJSON_AddArrayToObject(o, "injected") : NULL;
    struct fo_buf scratch;
    fo_buf_init(&scratch, FO_BUF_UNLIMITED);
    int rc = inj ? build_prompt(r, t, NULL, &scratch, inj) : FO_E_NOMEM;
    fo_buf_release(&scratch);
    int ok =
        !rc && cJSON_AddStringToObject(o, "id", k->id) &&
        cJSON_AddStringToObject(o, "agent", k->agent) &&
        cJSON_AddStringToObject(o, "instruction", k->instruction) &&
        (!k->done ||
         cJSON_AddItemToObject(o, "done_when", cJSON_Duplicate(k->done, 1))) &&
        fo_json_add_int(o, "wave", (long long)r->wave) &&
        cJSON_AddStringToObject(o, "executor", orch_exec_name(ex->kind)) &&
        cJSON_AddStringToObject(o, "model", ex->model) &&
        (tier < 0 || cJSON_AddStringToObject(o, "tier", orch_tier_name(tier)));
    if (!ok) {
        cJSON_Delete(o);
        return nomem(err);
    }
    r->t[t].slot = 1;
    return witness(r, k->agent, "task", parent, o, (long)t, 0,
                   ex->kind != ORCH_EXEC_STUB, err);
}

/* "tokens": {"input", "output"} as the provider reported them (a count it
 * left out is absent). */
static int add_tokens(cJSON *o, const struct orch_result *res)
{
    cJSON *t = cJSON_AddObjectToObject(o, "tokens");
    return t &&
           (res->tokens_in < 0 ||
            fo_json_add_int(t, "input", res->tokens_in)) &&
           (res->tokens_out < 0 ||
            fo_json_add_int(t, "output", res->tokens_out));
}

/* The result entry's payload: the output cut (with a marker) until the
 * body fits the ledger's limit. */
static cJSON *result_json(const struct run *r, const char *id,
                          const struct orch_result *res)
{
    size_t max = ledger_max_body(r->e->cfg.ledger);
    size_t out_len = res->output_len;
    for (;;) {
        cJSON *o = cJSON_CreateObject();
        size_t n = orch_utf8_prefix(res->output, res->output_len, out_len);
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        int rc = fo_buf_append(&b, res->output ? res->output : "", n);
        if (!rc && n < res->output_len)
            rc = fo_buf_printf(&b,
                               "\n[forum: output cut to %zu of %zu bytes to "
                               "fit the ledger's body limit]",
                               n, res->output_len);
        char *cut = rc ? NULL : fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
        size_t el = res->errout ? orch_utf8_prefix(res->errout, res->errout_len,
                                                   STDERR_KEEP)
                                : 0;
        char *errtail = malloc(el + 1);
        if (errtail) {
            if (el)
                memcpy(errtail, res->errout, el);
            errtail[el] = '\0';
        }
        int ok = o && cut && errtail && cJSON_AddStringToObject(o, "id", id) &&
                 cJSON_AddBoolToObject(o, "ok", res->ok) &&
                 cJSON_AddStringToObject(o, "output", cut) &&
                 cJSON_AddStringToObject(o, "model", res->model) &&
                 fo_json_add_int(o, "elapsed_ms", res->elapsed_us / 1000) &&
                 (res->ok ||
                  (cJSON_AddStringToObject(o, "error", res->error) &&
                   cJSON_AddBoolToObject(o, "timed_out", res->timed_out) &&
                   fo_json_add_int(o, "exit_code", res->exit_code))) &&
                 (!res->truncated || cJSON_AddTrueToObject(o, "truncated")) &&
                 (el == 0 || cJSON_AddStringToObject(o, "stderr", errtail)) &&
                 (!res->has_tokens || add_tokens(o, res));
        free(cut);
        free(errtail);
        if (!ok) {
            cJSON_Delete(o);
            return NULL;
        }
        struct fo_buf c;
        fo_buf_init(&c, FO_BUF_UNLIMITED);
        int fits = !fo_json_canon(o, &c, NULL) && c.len <= max;
        fo_buf_release(&c);
        if (fits || out_len == 0)
            return o;
        cJSON_Delete(o);
        out_len /= 2;
    }
}

/* ---- guardrails -----------------------------------------------------------
 */

static const struct orch_lane *task_lane(const struct run *r, size_t t)
{
    return orch_roster_find(orch_roster(r->e->o), r->p->tasks[t].agent);
}

/* Scans text for secrets and personal data. Nothing found: 0 and *clean
 * NULL. Else 1, *clean the redacted text (malloc'd) and a `guardrail`
 * entry (parent: parent) says what kind was found where, never the value;
 * with the lane's guardrails "block", *blocked is set. An error: minus its
 * code, err set. */
static int guard(struct run *r, size_t t, const char *source,
                 const char *call_id, int64_t parent, const char *text,
                 char **clean, int *blocked, struct fo_err *err)
{
    *clean = NULL;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *found = NULL;
    long n = orch_guard_scan(orch_guardrails(r->e->o), text ? text : "",
                             text ? strlen(text) : 0, &b, &found);
    if (n <= 0) {
        fo_buf_release(&b);
        cJSON_Delete(found);
        return n < 0 ? -nomem(err) : 0;
    }
    const struct orch_lane *ln = task_lane(r, t);
    int block = ln && ln->guard_block;
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "id", r->p->tasks[t].id) &&
             cJSON_AddStringToObject(o, "source", source) &&
             (!call_id || cJSON_AddStringToObject(o, "call_id", call_id)) &&
             cJSON_AddStringToObject(o, "action", block ? "block" : "redact");
    if (ok)
        cJSON_AddItemToObject(o, "found", found);
    else
        cJSON_Delete(found);
    *clean = ok ? fo_buf_detach(&b, NULL) : NULL;
    fo_buf_release(&b);
    if (!*clean) {
        cJSON_Delete(o);
        return -nomem(err);
    }
    if (blocked && block)
        *blocked = 1;
    int rc =
        witness(r, "guardrail", "guardrail", parent, o, (long)t, 0, 0, err);
    if (rc) {
        free(*clean);
        *clean = NULL;
        return -rc;
    }
    return 1;
}

/* The result entry of task t's attempt: its parent is the last step of its
 * tool loop (or the task). stop (NULL: none) says why a tool loop ended;
 * spent: the entry witnesses a reserved model call. A model's output passes
 * the guardrails first. */
/* The guardrails on a role's own reply (a model's or the --cmd's): what
 * it holds is replaced before the role's entry is made of it, and a
 * `guardrail` entry under the parent that entry will have says what was
 * found, never the value. Roles have no lane, so nothing blocks: 0 (nothing
 * found), 1 (*clean the redacted text, malloc'd), or minus an error code. */
static int guard_role(struct run *r, int role, long task, const char *text,
                      char **clean, struct fo_err *err)
{
    static const char *const kinds[] = {"plan", "route", "verdict", "answer"};
    *clean = NULL;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *found = NULL;
    long n = orch_guard_scan(orch_guardrails(r->e->o), text, strlen(text), &b,
                             &found);
    if (n <= 0) {
        fo_buf_release(&b);
        cJSON_Delete(found);
        return n < 0 ? -nomem(err) : 0;
    }
    int64_t parent = role == R_VALIDATOR && task >= 0 ? r->t[task].result_seq
                     : role == R_SYNTHESIZER && r->plan_seq >= 0 ? r->plan_seq
                                                                 : r->id;
    cJSON *o = cJSON_CreateObject();
    int ok =
        o &&
        (task < 0 || cJSON_AddStringToObject(o, "id", r->p->tasks[task].id)) &&
        cJSON_AddStringToObject(o, "source", kinds[role]) &&
        cJSON_AddStringToObject(o, "role", role_name[role]) &&
        cJSON_AddStringToObject(o, "action", "redact");
    if (ok)
        cJSON_AddItemToObject(o, "found", found);
    else
        cJSON_Delete(found);
    *clean = ok ? fo_buf_detach(&b, NULL) : NULL;
    fo_buf_release(&b);
    if (!*clean) {
        cJSON_Delete(o);
        return -nomem(err);
    }
    int rc = witness(r, "guardrail", "guardrail", parent, o, task, 0, 0, err);
    if (rc) {
        free(*clean);
        *clean = NULL;
        return -rc;
    }
    return 1;
}

static void task_result_ex(struct run *r, size_t t, struct orch_result *res,
                           const char *stop, int spent)
{
    struct fo_err err;
    struct task *s = &r->t[t];
    const struct orch_task *k = &r->p->tasks[t];
    int64_t parent = s->conv ? s->conv_last : s->task_seq;
    char *clean = NULL;
    int blocked = 0, rc = FO_OK;
    int model = s->ex->kind == ORCH_EXEC_CHAT ||
                s->ex->kind == ORCH_EXEC_ANTHROPIC ||
                (s->ex->kind == ORCH_EXEC_CLI && r->e->o->argv); /* --cmd */
    struct orch_result cp = *res;
    if (model && res->ok && res->output) {
        rc = guard(r, t, "result", NULL, parent, res->output, &clean, &blocked,
                   &err);
        if (rc < 0) {
            fail(r, -rc, &err);
            return;
        }
        rc = FO_OK;
        if (clean) {
            static char none[] = "";
            cp.output = blocked ? none : clean;
            cp.output_len = strlen(cp.output);
        }
        if (blocked) {
            cp.ok = 0;
            snprintf(cp.error, sizeof(cp.error), "%s",
                     "the guardrails blocked the answer: it held secrets or "
                     "personal data");
            stop = "guardrail";
        }
    }
    cJSON *o = result_json(r, k->id, &cp);
    free(clean);
    int turns = s->turn > 0 ? s->turn : 0;
    if (o && s->conv &&
        (!fo_json_add_int(o, "turns", turns) ||
         !fo_json_add_int(o, "tool_calls", s->n_calls))) {
        cJSON_Delete(o);
        o = NULL;
    }
    if (o && stop && !cJSON_AddStringToObject(o, "stop_reason", stop)) {
        cJSON_Delete(o);
        o = NULL;
    }
    if (o && turns >= 2 && !s->conv && !fo_json_add_int(o, "turns", turns)) {
        cJSON_Delete(o);
        o = NULL;
    }
    rc = o ? witness(r, k->agent, "result", parent, o, (long)t, 0, spent, &err)
           : nomem(&err);
    if (rc)
        fail(r, rc, &err);
}

static void task_result(struct run *r, size_t t, struct orch_result *res)
{
    task_result_ex(r, t, res, NULL, 0);
}

static void on_job_done(void *arg, int rc, struct orch_result *res,
                        const struct fo_err *jerr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    struct orch_result none = {.exit_code = -1};
    if (rc) { /* could not start: an ok:false result */
        snprintf(none.error, sizeof(none.error), "%s",
                 jerr ? jerr->msg : "the task could not run");
        snprintf(none.model, sizeof(none.model), "%s", r->t[t].ex->model);
        res = &none;
    }
    task_result(r, t, res);
    step(r);
}

static void tool_reply(struct run *r, size_t t, int rc,
                       struct orch_model_reply *rep, const struct fo_err *cerr);

static void on_task_model(void *arg, int rc, struct orch_model_reply *rep,
                          const struct fo_err *cerr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    const struct orch_exec_config *ex = r->t[t].ex;
    int tools = f->tools;
    struct fo_err scrubbed;
    cerr = reply_scrub(r->e->o, rep, cerr, &scrubbed);
    record_call(r->e, rc == FO_OK, rep);
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    if (tools) {
        tool_reply(r, t, rc, rep, cerr);
        step(r);
        return;
    }
    struct orch_result res = {.exit_code = -1};
    snprintf(res.model, sizeof(res.model), "%s",
             rep && rep->model[0] ? rep->model : ex->model);
    res.elapsed_us = rep ? rep->elapsed_us : 0;
    if (rc == FO_OK && (rep->tokens_in >= 0 || rep->tokens_out >= 0)) {
        res.has_tokens = 1;
        res.tokens_in = rep->tokens_in;
        res.tokens_out = rep->tokens_out;
    }
    res.ok = rc == FO_OK;
    res.timed_out = rc == FO_E_TIMEOUT;
    res.exit_code = res.ok ? 0 : -1;
    if (res.ok) {
        res.output = rep->text;
        res.output_len = rep->text_len;
    } else {
        snprintf(res.error, sizeof(res.error), "%s",
                 cerr ? cerr->msg : "the model call failed");
    }
    task_result(r, t, &res);
    step(r);
}

/* ---- the tool loop ----------------------------------------------------------
 *
 * A task whose lane has tools, on a model executor, is a conversation: the
 * model is offered the lane's tools; each call it makes is witnessed
 * (`tool_call`, parent the previous step), run, and its result witnessed
 * (`tool_result`, parent the call) and fed back, until the model answers in
 * text (the `result`, parent the last step) or max_turns is reached. Every
 * decision is made from the witnessed steps (apply keeps them in
 * task.conv), so a resumed run rebuilds the conversation from the ledger
 * and never re-runs a call whose result is on record. */

static int tool_task(const struct run *r, size_t t)
{
    const struct orch_lane *ln = task_lane(r, t);
    const struct orch_exec_config *ex = r->t[t].ex;
    return ln && ln->n_tools > 0 && ex && ex->models &&
           (ex->kind == ORCH_EXEC_CHAT || ex->kind == ORCH_EXEC_ANTHROPIC);
}

static int lane_has_tool(const struct orch_lane *ln, const char *name)
{
    for (size_t i = 0; name && i < ln->n_tools; i++)
        if (!strcmp(ln->tools[i], name))
            return 1;
    return 0;
}

/* The tools offered to the lane's model, as orch_model_call_tools_start
 * takes them: the built-ins it names (an MCP server's tools are offered
 * once their servers are known). */
static char *tools_json(const struct run *r, const struct orch_lane *ln)
{
    cJSON *a = cJSON_CreateArray();
    int ok = a != NULL;
    for (size_t i = 0; ok && i < ln->n_tools; i++) {
        const struct orch_tool_def *d = orch_tool_builtin(ln->tools[i]);
        if (!d) { /* an MCP server's, when it is up */
            cJSON *m = orch_mcpc_tool(r->e->mcpc, ln->tools[i]);
            if (m)
                cJSON_AddItemToArray(a, m);
            continue;
        }
        cJSON *o = cJSON_CreateObject(), *sch = NULL;
        ok = o &&
             fo_json_parse(d->schema, strlen(d->schema), &sch, NULL) == FO_OK;
        if (o)
            cJSON_AddItemToArray(a, o);
        ok = ok && cJSON_AddStringToObject(o, "name", d->name) &&
             cJSON_AddStringToObject(o, "description", d->description) &&
             cJSON_AddItemToObject(o, "input_schema", sch);
        if (!ok)
            cJSON_Delete(sch);
    }
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    char *out =
        ok && !fo_json_canon(a, &b, NULL) ? fo_buf_detach(&b, NULL) : NULL;
    fo_buf_release(&b);
    cJSON_Delete(a);
    return out;
}

/* The tools of the lane that must be called (with an ok result) before an
 * answer is taken, and were not: "a, b" into out; 0 when none is missing. */
static int missing_tools(const struct run *r, size_t t, struct fo_buf *out)
{
    const struct orch_lane *ln = task_lane(r, t);
    int n = 0;
    for (size_t i = 0; ln && i < ln->n_required; i++) {
        int called = 0;
        const cJSON *c;
        cJSON_ArrayForEach (c, r->t[t].conv) {
            const char *tool = str_of(c, "tool"), *k = str_of(c, "k");
            called |= k && !strcmp(k, "tool_result") && tool &&
                      !strcmp(tool, ln->required_tools[i]) &&
                      cJSON_IsTrue(cJSON_GetObjectItem(c, "ok"));
        }
        if (!called) {
            if (fo_buf_printf(out, "%s%s", n ? ", " : "",
                              ln->required_tools[i]))
                return -1;
            n++;
        }
    }
    return n;
}

struct conv_msgs {
    struct orch_model_msg *m;
    size_t n;
    char **own; /* strings made for the messages */
    size_t n_own;
};

static void conv_msgs_release(struct conv_msgs *c)
{
    for (size_t i = 0; i < c->n_own; i++)
        free(c->own[i]);
    free(c->own);
    free(c->m);
}

static char *conv_own(struct conv_msgs *c, char *s)
{
    if (s)
        c->own[c->n_own++] = s;
    return s;
}

/* The conversation so far: the system text, the prompt, then each step. */
static int conv_build(const struct run *r, size_t t, const char *prompt,
                      struct conv_msgs *c)
{
    const struct orch_lane *ln = task_lane(r, t);
    const struct task *s = &r->t[t];
    size_t steps = s->conv ? (size_t)cJSON_GetArraySize(s->conv) : 0;
    *c = (struct conv_msgs){0};
    c->m = calloc(2 + 2 * steps, sizeof(*c->m));
    c->own = calloc(2 + 2 * steps, sizeof(*c->own));
    if (!c->m || !c->own)
        return FO_E_NOMEM;
    struct fo_buf sys;
    fo_buf_init(&sys, FO_BUF_UNLIMITED);
    int rc = fo_buf_printf(
        &sys,
        "You are the %s agent: %s\nYou work in a workspace directory with "
        "the tools offered (paths are relative to it). Call them as the task "
        "needs, one step at a time; when the task is done, answer with your "
        "final result as plain text, without calling a tool.",
        ln->name, ln->domain);
    if (!rc && ln->n_required) {
        rc = fo_buf_puts(&sys, " Before you answer you must have called:");
        for (size_t i = 0; !rc && i < ln->n_required; i++)
            rc = fo_buf_printf(&sys, " %s", ln->required_tools[i]);
        if (!rc)
            rc = fo_buf_putc(&sys, '.');
    }
    char *st = rc ? NULL : fo_buf_detach(&sys, NULL);
    fo_buf_release(&sys);
    if (!conv_own(c, st))
        return FO_E_NOMEM;
    c->m[c->n++] = (struct orch_model_msg){.role = "system", .content = st};
    c->m[c->n++] = (struct orch_model_msg){.role = "user", .content = prompt};
    const cJSON *e;
    cJSON_ArrayForEach (e, s->conv) {
        const char *k = str_of(e, "k");
        if (!strcmp(k, "tool_call")) {
            cJSON *a = cJSON_CreateArray(), *o = cJSON_CreateObject();
            if (o)
                cJSON_AddItemToArray(a, o);
            struct fo_buf b;
            fo_buf_init(&b, FO_BUF_UNLIMITED);
            char *calls =
                a && o &&
                        cJSON_AddStringToObject(o, "id",
                                                str_of(e, "call_id")) &&
                        cJSON_AddStringToObject(o, "name", str_of(e, "tool")) &&
                        cJSON_AddStringToObject(o, "arguments",
                                                str_of(e, "arguments")) &&
                        !fo_json_canon(a, &b, NULL)
                    ? fo_buf_detach(&b, NULL)
                    : NULL;
            fo_buf_release(&b);
            cJSON_Delete(a);
            if (!conv_own(c, calls))
                return FO_E_NOMEM;
            const char *text = str_of(e, "text");
            c->m[c->n++] = (struct orch_model_msg){.role = "assistant",
                                                   .content = text ? text : "",
                                                   .tool_calls = calls};
        } else if (!strcmp(k, "tool_result")) {
            int ok = cJSON_IsTrue(cJSON_GetObjectItem(e, "ok"));
            const char *out = str_of(e, "output"), *why = str_of(e, "error");
            char *text = NULL;
            if (!ok) {
                struct fo_buf b;
                fo_buf_init(&b, FO_BUF_UNLIMITED);
                if (!fo_buf_printf(&b, "error: %s%s%s", why ? why : "failed",
                                   out && out[0] ? "\n" : "", out ? out : ""))
                    text = fo_buf_detach(&b, NULL);
                fo_buf_release(&b);
                if (!conv_own(c, text))
                    return FO_E_NOMEM;
            }
            c->m[c->n++] =
                (struct orch_model_msg){.role = "tool",
                                        .content = ok ? (out ? out : "") : text,
                                        .tool_call_id = str_of(e, "call_id"),
                                        .is_error = !ok};
        } else { /* tool_rescue */
            const char *text = str_of(e, "text"), *miss = str_of(e, "missing");
            struct fo_buf b;
            fo_buf_init(&b, FO_BUF_UNLIMITED);
            char *fix = !fo_buf_printf(&b,
                                       "[forum: that answer was not taken: "
                                       "call %s first, then answer.]",
                                       miss ? miss : "the required tools")
                            ? fo_buf_detach(&b, NULL)
                            : NULL;
            fo_buf_release(&b);
            if (!conv_own(c, fix))
                return FO_E_NOMEM;
            c->m[c->n++] = (struct orch_model_msg){
                .role = "assistant", .content = text && text[0] ? text : "-"};
            c->m[c->n++] =
                (struct orch_model_msg){.role = "user", .content = fix};
        }
    }
    return FO_OK;
}

/* A result of the tool loop that ends the task without an answer. */
static void tool_end(struct run *r, size_t t, const char *stop, const char *why,
                     int spent)
{
    struct orch_result res = {.exit_code = -1};
    snprintf(res.model, sizeof(res.model), "%s",
             r->t[t].model[0] ? r->t[t].model : r->t[t].ex->model);
    snprintf(res.error, sizeof(res.error), "%s", why);
    task_result_ex(r, t, &res, stop, spent);
}

/* The model's reply in the tool loop. */
static void tool_reply(struct run *r, size_t t, int rc,
                       struct orch_model_reply *rep, const struct fo_err *cerr)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    int spent = s->turn >= 2 && s->turn > s->turn_seen;
    if (rep && rep->model[0])
        snprintf(s->model, sizeof(s->model), "%s", rep->model);
    if (rc != FO_OK) {
        struct orch_result res = {.exit_code = -1};
        snprintf(res.model, sizeof(res.model), "%s",
                 rep && rep->model[0] ? rep->model : s->ex->model);
        res.timed_out = rc == FO_E_TIMEOUT;
        res.elapsed_us = rep ? rep->elapsed_us : 0;
        snprintf(res.error, sizeof(res.error), "%s",
                 cerr ? cerr->msg : "the model call failed");
        task_result_ex(r, t, &res, "model_error", spent);
        return;
    }
    if (rep->tool_calls) {
        cJSON *calls = NULL;
        if (fo_json_parse(rep->tool_calls, strlen(rep->tool_calls), &calls,
                          NULL) != FO_OK) {
            fail(r, nomem(&err), &err);
            return;
        }
        cJSON_Delete(s->pending);
        free(s->pending_text);
        s->pending = calls;
        s->pending_text = rep->text;
        rep->text = NULL;
        return; /* step witnesses them one by one */
    }
    struct fo_buf miss;
    fo_buf_init(&miss, FO_BUF_UNLIMITED);
    const struct orch_lane *ln = task_lane(r, t);
    int n = missing_tools(r, t, &miss);
    if (n < 0) {
        fo_buf_release(&miss);
        fail(r, nomem(&err), &err);
        return;
    }
    if (n > 0 && s->turn < ln->max_turns) {
        /* the answer is not taken yet: the model is told what is missing */
        char *clean = NULL;
        int g = guard(r, t, "tool_rescue", NULL, s->conv_last, rep->text,
                      &clean, NULL, &err);
        cJSON *o = g >= 0 ? cJSON_CreateObject() : NULL;
        int ok = o && cJSON_AddStringToObject(o, "id", r->p->tasks[t].id) &&
                 fo_json_add_int(o, "turn", s->turn) &&
                 cJSON_AddStringToObject(o, "reason", "required_tools") &&
                 cJSON_AddStringToObject(o, "missing", miss.data) &&
                 cJSON_AddStringToObject(o, "text", clean ? clean : rep->text);
        free(clean);
        fo_buf_release(&miss);
        if (!ok) {
            cJSON_Delete(o);
            fail(r, g < 0 ? -g : nomem(&err), &err);
            return;
        }
        int wrc = witness(r, "loop", "tool_rescue", s->conv_last, o, (long)t, 0,
                          spent, &err);
        if (wrc)
            fail(r, wrc, &err);
        return;
    }
    if (n > 0) {
        char why[FO_ERR_MSG_MAX];
        snprintf(why, sizeof(why),
                 "max_turns reached and the required tools were never "
                 "called: %s",
                 miss.data);
        fo_buf_release(&miss);
        tool_end(r, t, "required_tools_missing", why, spent);
        return;
    }
    fo_buf_release(&miss);
    struct orch_result res = {.ok = 1, .exit_code = 0};
    snprintf(res.model, sizeof(res.model), "%s",
             rep->model[0] ? rep->model : s->ex->model);
    res.elapsed_us = rep->elapsed_us;
    res.output = rep->text;
    res.output_len = rep->text_len;
    task_result_ex(r, t, &res, "answer", spent);
}

/* What a remember call's value is replaced by in its tool_call entry. */
#define REMEMBER_KEPT "[kept in the session's fact]"

/* The arguments of a remember call as its tool_call entry records them:
 * the value replaced by REMEMBER_KEPT and held in s->mem_value until its
 * fact is written, so that the fact is the one copy of it on the ledger
 * and a forget (one redaction, as `forum session forget` makes) leaves no
 * text of it behind. NULL (the text is recorded as written) when it is
 * not an object with a string value: such a call is rejected anyway. */
static char *remember_mask(struct task *s, const char *text)
{
    cJSON *a = NULL;
    if (!text || fo_json_parse(text, strlen(text), &a, NULL) != FO_OK)
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "value");
    char *out = NULL, *keep = NULL;
    if (cJSON_IsObject(a) && cJSON_IsString(v) &&
        (keep = orch_strdup(v->valuestring))) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        cJSON *mark = cJSON_CreateString(REMEMBER_KEPT);
        if (mark && cJSON_ReplaceItemInObjectCaseSensitive(a, "value", mark))
            out = fo_json_canon(a, &b, NULL) ? NULL : fo_buf_detach(&b, NULL);
        else
            cJSON_Delete(mark);
        fo_buf_release(&b);
    }
    if (out)
        s->mem_value = keep;
    else
        free(keep);
    cJSON_Delete(a);
    return out;
}

/* Witnesses the next call of the last reply. */
static void tool_call_write(struct run *r, size_t t)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    cJSON *c = cJSON_DetachItemFromArray(s->pending, 0);
    int first = s->turn > s->turn_seen;
    char *args = NULL, *text = NULL;
    int ga = guard(r, t, "tool_call", str_of(c, "id"), s->conv_last,
                   str_of(c, "arguments"), &args, NULL, &err);
    int gt = ga >= 0 && first && s->pending_text
                 ? guard(r, t, "tool_call", str_of(c, "id"), s->conv_last,
                         s->pending_text, &text, NULL, &err)
                 : 0;
    free(s->mem_value);
    s->mem_value = NULL;
    free(s->raw_args);
    s->raw_args = NULL;
    /* the witnessed copy (and so what the model sees again) is scrubbed;
     * the tool runs with what the model wrote, kept here, off the ledger */
    if (ga > 0 && !(s->raw_args = orch_strdup(str_of(c, "arguments"))))
        ga = -nomem(&err);
    /* the model's own name and id of the call are text it wrote too */
    char *name = NULL, *cid = NULL;
    int gn = ga >= 0 ? guard(r, t, "tool_call", str_of(c, "id"), s->conv_last,
                             str_of(c, "name"), &name, NULL, &err)
                     : 0;
    int gi = gn >= 0 && ga >= 0
                 ? guard(r, t, "tool_call", str_of(c, "id"), s->conv_last,
                         str_of(c, "id"), &cid, NULL, &err)
                 : 0;
    if (gn < 0 || gi < 0)
        ga = gn < 0 ? gn : gi;
    if (ga >= 0 && str_of(c, "name") &&
        !strcmp(str_of(c, "name"), "remember")) {
        char *masked = remember_mask(s, args ? args : str_of(c, "arguments"));
        if (masked) {
            free(args);
            args = masked;
        }
    }
    cJSON *o = ga >= 0 && gt >= 0 ? cJSON_CreateObject() : NULL;
    const char *tx = text ? text : s->pending_text;
    int ok =
        c && o && cJSON_AddStringToObject(o, "id", r->p->tasks[t].id) &&
        fo_json_add_int(o, "turn", s->turn) &&
        cJSON_AddStringToObject(o, "call_id", cid ? cid : str_of(c, "id")) &&
        cJSON_AddStringToObject(o, "tool", name ? name : str_of(c, "name")) &&
        cJSON_AddStringToObject(o, "arguments",
                                args ? args : str_of(c, "arguments")) &&
        (!s->raw_args ||
         cJSON_AddTrueToObject(o, "arguments_redacted") != NULL) &&
        (!first || !tx || !tx[0] || cJSON_AddStringToObject(o, "text", tx)) &&
        cJSON_AddStringToObject(o, "model",
                                s->model[0] ? s->model : s->ex->model);
    free(args);
    free(text);
    free(name);
    free(cid);
    cJSON_Delete(c);
    if (first) {
        free(s->pending_text);
        s->pending_text = NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        int rc = ga < 0 ? -ga : gt < 0 ? -gt : nomem(&err);
        fail(r, rc, &err);
        return;
    }
    int spent = first && s->turn >= 2;
    s->live_call = 1;
    int rc = witness(r, r->p->tasks[t].agent, "tool_call", s->conv_last, o,
                     (long)t, 0, spent, &err);
    if (rc)
        fail(r, rc, &err);
}

/* Witnesses the result of the call awaiting one; sandbox (NULL: not a
 * program) says where a program ran; attach (NULL: none) what an MCP tool
 * gave besides text. The model gets at most ORCH_TOOL_OUTPUT_MAX bytes of
 * output; the entry keeps the rest while it fits (orch_toolres.h). */
static void tool_result_full(struct run *r, size_t t, int ok,
                             const char *output, const char *why, int rejected,
                             int exit_code, const char *sandbox,
                             const cJSON *attach)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    const cJSON *call =
        cJSON_GetArrayItem(s->conv, cJSON_GetArraySize(s->conv) - 1);
    const char *call_id = str_of(call, "call_id");
    char *clean = NULL;
    int blocked = 0;
    int g = output && output[0] ? guard(r, t, "tool_result", call_id, s->await,
                                        output, &clean, &blocked, &err)
                                : 0;
    /* an error's text may come from outside too (an MCP server's
     * JSON-RPC error, a program): scanned the same way */
    char *why_clean = NULL;
    int gw = g >= 0 && why && why[0]
                 ? guard(r, t, "tool_error", call_id, s->await, why, &why_clean,
                         NULL, &err)
                 : 0;
    if (g < 0 || gw < 0) {
        free(clean);
        fail(r, g < 0 ? -g : -gw, &err);
        return;
    }
    if (why_clean)
        why = why_clean;
    free(s->raw_args); /* the call is answered: its raw text goes */
    s->raw_args = NULL;
    s->live_call = 0;
    const char *out = blocked ? "" : clean ? clean : output ? output : "";
    cJSON *o = cJSON_CreateObject();
    int good =
        o && cJSON_AddStringToObject(o, "id", r->p->tasks[t].id) &&
        cJSON_AddStringToObject(o, "call_id", call_id) &&
        cJSON_AddStringToObject(o, "tool", str_of(call, "tool")) &&
        cJSON_AddBoolToObject(o, "ok", ok && !blocked) &&
        (!why || cJSON_AddStringToObject(o, "error", why)) &&
        (!blocked || (cJSON_AddTrueToObject(o, "blocked") &&
                      cJSON_AddStringToObject(o, "error",
                                              "the guardrails blocked this "
                                              "output"))) &&
        (!rejected || cJSON_AddTrueToObject(o, "rejected")) &&
        (exit_code == INT32_MIN ||
         fo_json_add_int(o, "exit_code", exit_code)) &&
        (!sandbox || cJSON_AddStringToObject(o, "sandbox", sandbox)) &&
        orch_toolres_fields(o, out, blocked ? NULL : attach) == FO_OK;
    free(clean);
    free(why_clean);
    if (!good) {
        cJSON_Delete(o);
        fail(r, nomem(&err), &err);
        return;
    }
    int rc =
        witness(r, "tool", "tool_result", s->await, o, (long)t, 0, 0, &err);
    if (rc)
        fail(r, rc, &err);
}

static void tool_result_write_ex(struct run *r, size_t t, int ok,
                                 const char *output, const char *why,
                                 int rejected, int exit_code,
                                 const char *sandbox)
{
    tool_result_full(r, t, ok, output, why, rejected, exit_code, sandbox, NULL);
}

static void tool_result_write(struct run *r, size_t t, int ok,
                              const char *output, const char *why, int rejected,
                              int exit_code)
{
    tool_result_write_ex(r, t, ok, output, why, rejected, exit_code, NULL);
}

/* The run's workspace: the configured directory, or a fresh one per run
 * under the workspace root. */
static int workspace(struct run *r, struct fo_err *err)
{
    if (r->ws_fd >= 0)
        return FO_OK;
    const struct orch *o = r->e->o;
    const char *dir = orch_workspace_dir(o), *root = orch_workspace_root(o);
    char path[4096];
    int create = 0;
    if (dir) {
        snprintf(path, sizeof(path), "%s", dir);
    } else if (root) {
        if (mkdir(root, 0700) != 0 && errno != EEXIST)
            return fo_err_set(err, FO_E_IO, "workspaces %s: %s", root,
                              strerror(errno));
        int w =
            snprintf(path, sizeof(path), "%s/run-%lld", root, (long long)r->id);
        if (w < 0 || (size_t)w >= sizeof(path))
            return fo_err_set(err, FO_E_INVALID, "workspace path too long");
        create = 1;
    } else {
        return fo_err_set(err, FO_E_INVALID,
                          "no workspace: tools need a data dir or --workspace");
    }
    int rc = orch_workspace_open(path, create, &r->ws_fd, err);
    char abs[PATH_MAX];
    if (!rc && !realpath(path, abs)) /* the sandbox binds it by this name */
        rc =
            fo_err_set(err, FO_E_IO, "workspace %s: %s", path, strerror(errno));
    if (rc && r->ws_fd >= 0) {
        close(r->ws_fd);
        r->ws_fd = -1;
    }
    if (!rc && !(r->ws_path = orch_strdup(abs))) {
        close(r->ws_fd);
        r->ws_fd = -1;
        rc = nomem(err);
    }
    return rc;
}

static void on_command_done(void *arg, int rc, struct orch_result *res,
                            const struct fo_err *jerr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    r->e->n_cmds--;
    free(f);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int brc = FO_OK;
    if (rc == FO_OK) {
        if (res->timed_out)
            brc = fo_buf_puts(&b, "timed out: the command and its processes "
                                  "were killed\n");
        else if (res->signal)
            brc = fo_buf_printf(&b, "killed by signal %d\n", res->signal);
        else
            brc = fo_buf_printf(&b, "exit code %d\n", res->exit_code);
        if (!brc && res->output_len)
            brc = fo_buf_printf(&b, "--- stdout ---\n%s\n", res->output);
        if (!brc && res->errout_len)
            brc = fo_buf_printf(&b, "--- stderr ---\n%s\n", res->errout);
    }
    if (brc) {
        fo_buf_release(&b);
        struct fo_err err;
        fail(r, nomem(&err), &err);
        step(r);
        return;
    }
    const char *sb =
        orch_sandbox_mode(r->e->o) == ORCH_SANDBOX_NONE ? "none" : "bwrap";
    if (rc == FO_OK)
        tool_result_write_ex(
            r, t, res->ok, b.data ? b.data : "", NULL, 0,
            res->timed_out || res->signal ? -1 : res->exit_code, sb);
    else
        tool_result_write_ex(r, t, 0, "",
                             jerr ? jerr->msg : "the command failed", 0,
                             INT32_MIN, sb);
    fo_buf_release(&b);
    step(r);
}

static void on_mcp_done(void *arg, int rc, const char *text, int is_error,
                        const cJSON *attach, const struct fo_err *merr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    if (rc == FO_OK)
        tool_result_full(r, t, !is_error, text ? text : "",
                         is_error ? "the tool reported an error" : NULL, 0,
                         INT32_MIN, NULL, attach);
    else
        tool_result_write(r, t, 0, NULL, merr ? merr->msg : "failed", 0,
                          INT32_MIN);
    step(r);
}

/* The arguments of a call checked against its tool's schema: 0 and *args,
 * or 1 when the call was answered (a rejected result the model is told to
 * correct) or the run failed (out of memory). */
static int tool_args(struct run *r, size_t t, const struct orch_tool_def *d,
                     const char *text, cJSON **args)
{
    struct fo_err err;
    int rc = orch_tool_args(d, text, args, &err);
    if (rc == FO_E_NOMEM) {
        fail(r, rc, &err);
        return 1;
    }
    if (rc) {
        char why[FO_ERR_MSG_MAX + 64];
        snprintf(why, sizeof(why),
                 "%s: %s; call it again with arguments that match its "
                 "schema",
                 d->name, err.msg);
        tool_result_write(r, t, 0, NULL, why, 1, INT32_MIN);
        return 1;
    }
    return 0;
}

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
 * (the session's facts) are the loop handle's, as context_step's are.
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

static void mem_answer(struct run *r, size_t t, int forget, const char *key,
                       int64_t fact_seq)
{
    char out[ORCH_FACT_KEY_MAX + ORCH_SESSION_NAME_MAX + 160];
    if (forget)
        snprintf(out, sizeof(out),
                 "forgot \"%s\" of session %s (fact %lld): its text is "
                 "deleted and later turns no longer see it",
                 key, r->session, (long long)fact_seq);
    else
        snprintf(out, sizeof(out),
                 "remembered \"%s\" in session %s (fact %lld): later turns "
                 "of the session see it",
                 key, r->session, (long long)fact_seq);
    tool_result_write(r, t, 1, out, NULL, 0, INT32_MIN);
}

static void mem_landed(void *arg, struct run *r, int rc, int64_t seq,
                       const struct fo_err *err)
{
    struct mem_op *op = arg;
    (void)err;
    if (!rc) /* else the run fails: a write of it did */
        mem_answer(r, op->t, op->fact_seq >= 0, op->key,
                   op->fact_seq >= 0 ? op->fact_seq : seq);
    free(op);
}

static void forget_redacted(void *arg, struct run *r, int rc, int64_t seq,
                            const struct fo_err *rerr)
{
    struct mem_op *op = arg;
    struct task *s = &r->t[op->t];
    struct fo_err err;
    (void)seq;
    if (rc && rc != FO_E_REDACTED) { /* gone already: the tombstone next */
        char why[FO_ERR_MSG_MAX + 64];
        snprintf(why, sizeof(why), "the fact could not be forgotten: %s",
                 rerr ? rerr->msg : "redaction failed");
        tool_result_write(r, op->t, 0, NULL, why, 0, INT32_MIN);
        free(op);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "session", r->session) ||
        !cJSON_AddStringToObject(o, "key", op->key) ||
        !fo_json_add_int(o, "fact_seq", op->fact_seq) ||
        !fo_json_add_int(o, "call_seq", s->await)) {
        cJSON_Delete(o);
        free(op);
        fail(r, nomem(&err), &err);
        return;
    }
    rc = witness_cb(r, "session", "fact_forgotten", r->session_start, o,
                    (long)op->t, 0, 0, mem_landed, op, &err);
    if (rc) {
        free(op);
        fail(r, rc, &err);
    }
}

/* Runs a remember or forget call (its arguments checked). */
static void mem_run(struct run *r, size_t t, const char *tool,
                    const cJSON *args)
{
    struct task *s = &r->t[t];
    struct ledger *l = r->e->cfg.ledger;
    struct fo_err err;
    char why[FO_ERR_MSG_MAX + 64];
    int forget = !strcmp(tool, "forget");
    char *value = forget ? NULL : s->mem_value; /* taken */
    free(forget ? s->mem_value : NULL);
    s->mem_value = NULL;
    const char *key = str_of(args, "key");
    if (!r->session) {
        free(value);
        tool_result_write(r, t, 0, NULL,
                          "this run belongs to no session: remember and "
                          "forget keep the facts of a session (a run started "
                          "with a session, e.g. forum submit --session NAME)",
                          0, INT32_MIN);
        return;
    }
    int rc = orch_fact_check(key, forget || !value ? NULL : value, &err);
    if (rc) {
        free(value);
        snprintf(why, sizeof(why),
                 "%s: %s; call it again with arguments that match its schema",
                 tool, err.msg);
        tool_result_write(r, t, 0, NULL, why, 1, INT32_MIN);
        return;
    }
    struct mem_op *op = calloc(1, sizeof(*op));
    if (!op) {
        free(value);
        fail(r, nomem(&err), &err);
        return;
    }
    op->t = t;
    op->fact_seq = -1;
    snprintf(op->key, sizeof(op->key), "%s", key);
    /* done before? (a resumed call: its result was never witnessed) */
    int64_t prior = -1;
    cJSON *pb = NULL;
    if (forget || !value) {
        rc = orch_session_by_call(l, r->session,
                                  forget ? "fact_forgotten" : "fact", s->await,
                                  &prior, &pb, &err);
        if (rc && rc != FO_E_NOT_FOUND) {
            free(value);
            free(op);
            fail(r, rc, &err);
            return;
        }
    }
    if (prior >= 0) {
        long long fseq = prior;
        if (forget)
            fo_json_get_int(pb, "fact_seq", 0, INT64_MAX / 2, &fseq);
        cJSON_Delete(pb);
        free(value);
        free(op);
        mem_answer(r, t, forget, key, fseq);
        return;
    }
    cJSON_Delete(pb);
    if (!forget && !value) {
        free(op);
        tool_result_write(r, t, 0, NULL,
                          "the fact was not kept: the run was restarted "
                          "before it was written; call remember again",
                          0, INT32_MIN);
        return;
    }
    int64_t start = r->session_start, fseq = -1;
    if (forget || start < 0) {
        rc = orch_session_fact(l, r->session, forget ? key : "", &fseq, &start,
                               &err);
        if (rc == FO_E_NOT_FOUND && start >= 0 && !forget)
            rc = FO_OK; /* only the start was wanted */
        if (rc == FO_E_NOT_FOUND && forget) {
            free(op);
            tool_result_write(r, t, 0, NULL, err.msg, 0, INT32_MIN);
            return;
        }
        if (rc) {
            free(value);
            free(op);
            fail(r, rc, &err);
            return;
        }
        r->session_start = start;
    }
    if (forget) {
        op->fact_seq = fseq;
        rc = redact_cb(r, fseq, "forgotten (session fact)", (long)t,
                       forget_redacted, op, &err);
    } else {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "session", r->session) ||
            !cJSON_AddStringToObject(o, "key", key) ||
            !cJSON_AddStringToObject(o, "value", value) ||
            !fo_json_add_int(o, "call_seq", s->await)) {
            cJSON_Delete(o);
            rc = nomem(&err);
        } else {
            rc = witness_cb(r, "session", "fact", start, o, (long)t, 0, 0,
                            mem_landed, op, &err);
        }
        free(value);
    }
    if (rc) {
        free(op);
        fail(r, rc, &err);
    }
}

/* A tool of an MCP server ("server.tool"). */
static void mcp_run(struct run *r, size_t t, const char *tool,
                    const char *args_text)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    char why[FO_ERR_MSG_MAX + 64];
    const char *dot = strchr(tool, '.');
    char server[64];
    snprintf(server, sizeof(server), "%.*s", dot ? (int)(dot - tool) : 0, tool);
    if (!dot || !orch_mcpc_has(r->e->mcpc, server)) {
        snprintf(why, sizeof(why),
                 "tool \"%s\": no MCP server \"%s\" is configured "
                 "(forum.json mcp_servers)",
                 tool, server);
        tool_result_write(r, t, 0, NULL, why, 0, INT32_MIN);
        return;
    }
    cJSON *def = orch_mcpc_tool(r->e->mcpc, tool);
    cJSON *args = NULL;
    struct orch_tool_def d = {.name = tool};
    char *schema = NULL;
    if (def)
        schema = cJSON_PrintUnformatted(
            cJSON_GetObjectItemCaseSensitive(def, "input_schema"));
    d.schema = schema;
    int rc = tool_args(r, t, &d, args_text, &args);
    free(schema);
    cJSON_Delete(def);
    if (rc)
        return;
    struct effect *f = calloc(1, sizeof(*f));
    if (!f) {
        cJSON_Delete(args);
        fail(r, nomem(&err), &err);
        return;
    }
    *f = (struct effect){.r = r, .task = (long)t, .kind = E_TASK_JOB};
    rc = orch_mcpc_call(r->e->mcpc, tool, args, on_mcp_done, f, &f->mcp, &err);
    cJSON_Delete(args);
    if (rc) {
        free(f);
        if (rc == FO_E_NOMEM)
            fail(r, rc, &err);
        else
            tool_result_write(r, t, 0, NULL, err.msg, 0, INT32_MIN);
        return;
    }
    s->eff = f;
    s->busy = 1;
}

static int64_t now_ms(void);
static void disk_watch(struct orch_engine *e);

static void tool_job_free(struct tool_job *j)
{
    if (j->ws >= 0)
        close(j->ws);
    cJSON_Delete(j->args);
    fo_buf_release(&j->out);
    free(j);
}

/* On a worker thread: the tool, within its time and a cancel. */
static void file_tool_work(void *arg, const atomic_int *cancel)
{
    struct tool_job *j = arg;
    struct orch_tool_budget b = {.deadline_ms = now_ms() + ORCH_TOOL_TIME_MS,
                                 .cancel = cancel};
    j->rc = orch_tool_run_file(j->ws, j->tool, j->args, &b, &j->out, &j->err);
}

/* Back on the loop: the result is witnessed, unless the run let go. */
static void file_tool_done(void *arg, int cancelled)
{
    struct tool_job *j = arg;
    struct effect *f = j->f;
    if (cancelled || !f) {
        if (f) /* the pool stopped under a live effect: it is let go */
            f->tool = NULL;
        tool_job_free(j);
        return;
    }
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    if (j->rc == FO_E_NOMEM) {
        fail(r, j->rc, &j->err);
    } else {
        tool_result_write(r, t, j->rc == FO_OK,
                          j->rc ? NULL : (j->out.data ? j->out.data : ""),
                          j->rc ? j->err.msg : NULL, 0, INT32_MIN);
    }
    tool_job_free(j);
    step(r);
}

/* Starts a file tool on the engine's worker threads (args taken): the
 * loop never reads or writes the workspace itself. */
static void file_tool_start(struct run *r, size_t t, const char *tool,
                            cJSON *args)
{
    struct fo_err err;
    struct tool_job *j = calloc(1, sizeof(*j));
    struct effect *f = j ? calloc(1, sizeof(*f)) : NULL;
    int rc = f ? FO_OK : nomem(&err);
    if (j) {
        j->ws = -1;
        j->args = args;
        args = NULL;
        fo_buf_init(&j->out, FO_BUF_UNLIMITED);
        snprintf(j->tool, sizeof(j->tool), "%s", tool);
    }
    if (!rc && (j->ws = fcntl(r->ws_fd, F_DUPFD_CLOEXEC, 0)) < 0)
        rc = fo_err_set(&err, FO_E_IO, "workspace: %s", strerror(errno));
    if (!rc && !r->e->work)
        rc = orch_work_create(r->e->cfg.base, &r->e->work, &err);
    if (!rc) {
        *f = (struct effect){
            .r = r, .task = (long)t, .kind = E_TASK_JOB, .tool = j};
        j->f = f;
        rc = orch_work_post(r->e->work, file_tool_work, file_tool_done, j,
                            &j->job, &err);
    }
    if (rc) {
        cJSON_Delete(args);
        free(f);
        if (j)
            tool_job_free(j);
        if (rc == FO_E_NOMEM)
            fail(r, rc, &err);
        else
            tool_result_write(r, t, 0, NULL, err.msg, 0, INT32_MIN);
        return;
    }
    r->t[t].eff = f;
    r->t[t].busy = 1;
}

/* ---- the ledger's disk ---------------------------------------------------
 * An agent's writes share a filesystem with the ledger when its workspace
 * is on the data dir's: below the reserve (orch_disk_reserve_mb) a command
 * or a file write is refused, and a command running is killed below half
 * of it, so the ledger can still witness what happened. */

/* 1 (why says so) when path is on the data dir's filesystem and that has
 * less than the reserve free (times 1/div). statvfs and stat: no open. */
static int disk_low(struct orch_engine *e, const char *path, int div, char *why,
                    size_t n)
{
    const char *dir = ledger_dir(e->cfg.ledger);
    struct stat a, b;
    struct statvfs vs;
    if (!path || !dir || stat(path, &a) != 0 || stat(dir, &b) != 0 ||
        a.st_dev != b.st_dev || statvfs(dir, &vs) != 0)
        return 0;
    uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
    uint64_t keep = (uint64_t)orch_disk_reserve_mb(e->o) * 1048576u / div;
    if (avail >= keep)
        return 0;
    snprintf(why, n,
             "refused: the disk that holds the ledger has %llu MiB free, "
             "below the %llu MiB kept so the ledger can go on witnessing "
             "(disk_reserve_mb); free space, or give workspaces a "
             "filesystem of their own",
             (unsigned long long)(avail >> 20),
             (unsigned long long)(keep >> 20));
    return 1;
}

#define DISK_WATCH_MS 250

static void on_disk_watch(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    if (e->n_cmds <= 0)
        return; /* no command runs: the watch sleeps */
    /* the commands still running whose workspace runs the disk low; each
     * kill is witnessed and stepped, which may end runs: from the top */
again:
    for (struct run *r = e->runs; r; r = r->next) {
        char why[FO_ERR_MSG_MAX];
        for (size_t t = 0; r->t && r->p && t < r->p->n; t++) {
            struct effect *f = r->t[t].eff;
            if (!f || !f->cmd || !disk_low(e, r->ws_path, 2, why, sizeof(why)))
                continue;
            effect_cancel(f); /* kills its process group */
            r->t[t].eff = NULL;
            r->t[t].busy = 0;
            char msg[FO_ERR_MSG_MAX + 32];
            snprintf(msg, sizeof(msg), "killed: %s", why + strlen("refused: "));
            tool_result_write_ex(r, t, 0, "", msg, 0, -1,
                                 orch_sandbox_mode(e->o) == ORCH_SANDBOX_NONE
                                     ? "none"
                                     : "bwrap");
            step(r);
            goto again;
        }
    }
    disk_watch(e);
}

/* Arms the watch while commands run. */
static void disk_watch(struct orch_engine *e)
{
    if (e->n_cmds <= 0)
        return;
    if (!e->disk_ev &&
        !(e->disk_ev = evtimer_new(e->cfg.base, on_disk_watch, e)))
        return;
    if (evtimer_pending(e->disk_ev, NULL))
        return;
    struct timeval tv = {0, DISK_WATCH_MS * 1000};
    evtimer_add(e->disk_ev, &tv);
}

/* Runs the call awaiting its result. */
static void tool_run(struct run *r, size_t t)
{
    struct task *s = &r->t[t];
    const struct orch_lane *ln = task_lane(r, t);
    const cJSON *call =
        cJSON_GetArrayItem(s->conv, cJSON_GetArraySize(s->conv) - 1);
    const char *tool = str_of(call, "tool");
    struct fo_err err;
    char why[FO_ERR_MSG_MAX + 64];
    if (!lane_has_tool(ln, tool)) {
        struct fo_buf names;
        fo_buf_init(&names, 2048);
        for (size_t i = 0; i < ln->n_tools; i++)
            fo_buf_printf(&names, "%s%s", i ? ", " : "", ln->tools[i]);
        snprintf(why, sizeof(why),
                 "unknown tool \"%s\": this agent's tools are %s", tool,
                 names.data ? names.data : "none");
        fo_buf_release(&names);
        tool_result_write(r, t, 0, NULL, why, 1, INT32_MIN);
        return;
    }
    const struct orch_tool_def *d = orch_tool_builtin(tool);
    /* the tool gets the arguments the model wrote; the ledger and the
     * model's next turn got them scrubbed (tool_call_write). The session
     * tools work from the witnessed copy: what they keep is witnessed. */
    if (!s->live_call && !(d && d->session)) {
        /* found on resume: it may or may not have run before the daemon
         * stopped; it is not run again behind the model's back (a command
         * that filled the disk would fill it again) */
        tool_result_write(r, t, 0, NULL,
                          "interrupted: the daemon stopped before this call's "
                          "result was witnessed, so it may or may not have "
                          "run; it was not run again: check, and call again "
                          "if it is still needed",
                          0, INT32_MIN);
        return;
    }
    const char *atext = str_of(call, "arguments");
    if (cJSON_IsTrue(
            cJSON_GetObjectItemCaseSensitive(call, "arguments_redacted")) &&
        !(d && d->session)) {
        if (!s->raw_args) { /* resumed: the ledger never had them */
            tool_result_write(r, t, 0, NULL,
                              "this call's arguments held what the "
                              "guardrails keep off the ledger, and were lost "
                              "when the daemon restarted: make the call again",
                              0, INT32_MIN);
            return;
        }
        atext = s->raw_args;
    }
    if (!d) {
        mcp_run(r, t, tool, atext);
        return;
    }
    cJSON *args = NULL;
    int rc = tool_args(r, t, d, atext, &args);
    if (rc)
        return;
    if (d->session) { /* no workspace: the run's session */
        mem_run(r, t, tool, args);
        cJSON_Delete(args);
        return;
    }
    rc = workspace(r, &err);
    if (rc) {
        cJSON_Delete(args);
        tool_result_write(r, t, 0, NULL, err.msg, 0, INT32_MIN);
        return;
    }
    /* what writes (a command, a file) leaves the ledger's disk its room */
    if ((d->program || !strcmp(tool, "write_file") ||
         !strcmp(tool, "apply_patch")) &&
        disk_low(r->e, r->ws_path, 1, why, sizeof(why))) {
        cJSON_Delete(args);
        tool_result_write(r, t, 0, NULL, why, 0, INT32_MIN);
        return;
    }
    if (!d->program) {
        file_tool_start(r, t, tool, args);
        return;
    }
    const char **argv = NULL;
    int timeout_ms = 0;
    int none = orch_sandbox_mode(r->e->o) == ORCH_SANDBOX_NONE;
    char sbwhy[256];
    if (!none && !orch_sandbox_available(sbwhy, sizeof(sbwhy))) {
        cJSON_Delete(args);
        snprintf(
            why, sizeof(why),
            "refused: the sandbox cannot be made (%.200s); the operator may "
            "set \"sandbox\": \"none\" in forum.json to run commands "
            "unconfined",
            sbwhy);
        tool_result_write_ex(r, t, 0, NULL, why, 0, INT32_MIN, "unavailable");
        return;
    }
    rc = orch_tool_command_argv(args, &argv, &timeout_ms, &err);
    struct orch_sandbox sb;
    orch_tool_sandbox(r->e->o, r->ws_path, ln->network, &sb);
    struct effect *f = rc ? NULL : calloc(1, sizeof(*f));
    if (!rc && !f)
        rc = nomem(&err);
    if (!rc) {
        *f = (struct effect){.r = r, .task = (long)t, .kind = E_TASK_JOB};
        struct orch_exec_config cfg = {
            .kind = ORCH_EXEC_CLI,
            .argv = argv,
            .box = none ? NULL : &sb,
            .env = orch_child_env(r->e->o),
            .timeout_ms = timeout_ms ? timeout_ms : COMMAND_TIMEOUT_MS,
            .output_max = ORCH_TOOL_OUTPUT_MAX / 2,
            .model = "run_command",
            .cwd = r->ws_path,
        };
        rc = orch_job_start(&cfg, r->e->cfg.base, NULL, on_command_done, f,
                            &f->job, &err);
    }
    free(argv);
    cJSON_Delete(args);
    if (rc == FO_E_NOMEM) {
        free(f);
        fail(r, rc, &err);
        return;
    }
    if (rc) {
        free(f);
        tool_result_write_ex(r, t, 0, NULL, err.msg, 0, INT32_MIN,
                             none ? "none" : "bwrap");
        return;
    }
    f->cmd = 1;
    r->e->n_cmds++;
    disk_watch(r->e);
    s->eff = f;
    s->busy = 1;
}

static void on_mcp_ready(void *arg, int rc, const char *text, int is_error,
                         const cJSON *attach, const struct fo_err *merr)
{
    struct effect *f = arg;
    struct run *r = f->r;
    size_t t = (size_t)f->task;
    (void)rc, (void)text, (void)is_error, (void)attach, (void)merr;
    r->t[t].eff = NULL;
    r->t[t].busy = 0;
    free(f);
    /* a server that could not start: its tools are not offered this turn,
     * and a call to one is answered with the server's error */
    step(r);
}

/* Before a model turn: starts the first MCP server of the lane's tools that
 * is not up and was not tried for this turn. 1 when one was started (the
 * task waits), 0 when every one is up or was tried. */
static int mcp_prepare(struct run *r, size_t t)
{
    struct task *s = &r->t[t];
    const struct orch_lane *ln = task_lane(r, t);
    if (!r->e->mcpc)
        return 0;
    if (s->mcp_turn != s->turn + 1) {
        s->mcp_turn = s->turn + 1;
        s->mcp_tried = 0;
    }
    for (size_t i = 0; i < ln->n_tools && i < 64; i++) {
        const char *dot = strchr(ln->tools[i], '.');
        char server[64];
        if (!dot || orch_tool_builtin(ln->tools[i]) ||
            (s->mcp_tried & ((uint64_t)1 << i)))
            continue;
        snprintf(server, sizeof(server), "%.*s", (int)(dot - ln->tools[i]),
                 ln->tools[i]);
        s->mcp_tried |= (uint64_t)1 << i;
        if (!orch_mcpc_has(r->e->mcpc, server) ||
            orch_mcpc_is_ready(r->e->mcpc, server))
            continue;
        struct effect *f = calloc(1, sizeof(*f));
        struct fo_err err;
        if (!f)
            return 0;
        *f = (struct effect){.r = r, .task = (long)t, .kind = E_TASK_JOB};
        if (orch_mcpc_ready(r->e->mcpc, server, on_mcp_ready, f, &f->mcp,
                            &err) != FO_OK) {
            free(f);
            elog(r->e, "run %lld: %s", (long long)r->id, err.msg);
            continue;
        }
        s->eff = f;
        s->busy = 1;
        return 1;
    }
    return 0;
}

/* The next move of a tool task's attempt (its task entry is on record). */
static void tool_exec(struct run *r, size_t t, const char *prompt)
{
    struct task *s = &r->t[t];
    const struct orch_lane *ln = task_lane(r, t);
    struct fo_err err;
    char why[FO_ERR_MSG_MAX];
    if (s->blocked) {
        tool_end(r, t, "guardrail",
                 "the guardrails blocked a tool's output: it held secrets "
                 "or personal data",
                 0);
        return;
    }
    if (s->await >= 0) {
        tool_run(r, t);
        return;
    }
    if (s->pending && cJSON_GetArraySize(s->pending) > 0) {
        tool_call_write(r, t);
        return;
    }
    if (s->bad_calls >= BAD_CALLS_MAX) {
        snprintf(why, sizeof(why),
                 "%d malformed or unknown tool calls in a row", s->bad_calls);
        tool_end(r, t, "malformed_tool_calls", why, 0);
        return;
    }
    if (s->turn >= ln->max_turns) {
        snprintf(why, sizeof(why), "max_turns (%d) reached without an answer",
                 ln->max_turns);
        tool_end(r, t, "max_turns", why, 0);
        return;
    }
    if (mcp_prepare(r, t))
        return; /* a server is being started: the turn waits for it */
    char what[ORCH_NAME_MAX + 24];
    snprintf(what, sizeof(what), "task %s turn %d", r->p->tasks[t].id,
             s->turn + 1);
    if (s->turn >= 1 && !spend(r, what, 0)) {
        /* the run halts: a spent budget ends this task here, with the
         * calls it made witnessed (a cancel's halt writes its own result;
         * a shutdown leaves the task to resume) */
        if (r->halt == H_BUDGET) {
            snprintf(why, sizeof(why),
                     "the run's budget was spent (%s) before turn %d",
                     r->halt_reason, s->turn + 1);
            tool_end(r, t, "budget", why, 0);
        }
        return;
    }
    s->turn++;
    struct conv_msgs c;
    char *tools = tools_json(r, ln);
    struct effect *f = calloc(1, sizeof(*f));
    int rc = tools && f ? conv_build(r, t, prompt, &c) : FO_E_NOMEM;
    if (!rc) {
        *f = (struct effect){
            .r = r, .task = (long)t, .kind = E_TASK_MODEL, .tools = 1};
        rc = orch_model_call_tools_start(
            s->ex->models, r->e->cfg.base, r->e->cfg.dns, s->ex->kind,
            s->ex->tier, tools, c.m, c.n, on_task_model, f, &f->call, &err);
    } else {
        c = (struct conv_msgs){0};
        nomem(&err);
    }
    conv_msgs_release(&c);
    free(tools);
    if (rc) {
        free(f);
        if (rc == FO_E_NOMEM) {
            if (s->turn >= 2)
                r->reserved--;
            fail(r, rc, &err);
            return;
        }
        tool_end(r, t, "model_error", err.msg, s->turn >= 2);
        return;
    }
    s->eff = f;
    s->busy = 1;
}

/* Runs task t's current attempt (its task entry is on record). */
static void task_exec(struct run *r, size_t t)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    struct fo_buf prompt;
    fo_buf_init(&prompt, FO_BUF_UNLIMITED);
    if (tool_task(r, t)) {
        int rc = build_prompt(r, t, s->esc_seq >= 0 ? s->failed : NULL, &prompt,
                              NULL);
        if (rc)
            fail(r, nomem(&err), &err);
        else
            tool_exec(r, t, prompt.data ? prompt.data : "");
        fo_buf_release(&prompt);
        return;
    }
    struct effect *f = calloc(1, sizeof(*f));
    int rc = f ? build_prompt(r, t, s->esc_seq >= 0 ? s->failed : NULL, &prompt,
                              NULL)
               : FO_E_NOMEM;
    if (rc) {
        free(f);
        fo_buf_release(&prompt);
        fail(r, nomem(&err), &err);
        return;
    }
    *f = (struct effect){.r = r, .task = (long)t};
    const char *text = prompt.data ? prompt.data : "";
    if (s->ex->kind == ORCH_EXEC_CHAT || s->ex->kind == ORCH_EXEC_ANTHROPIC) {
        struct orch_model_msg m = {.role = "user", .content = text};
        f->kind = E_TASK_MODEL;
        rc =
            s->ex->models
                ? orch_model_call_start(s->ex->models, r->e->cfg.base,
                                        r->e->cfg.dns, s->ex->kind, s->ex->tier,
                                        &m, 1, on_task_model, f, &f->call, &err)
                : fo_err_set(&err, FO_E_INVALID,
                             "executor %s: no model configured",
                             orch_exec_name(s->ex->kind));
    } else {
        f->kind = E_TASK_JOB;
        rc = orch_job_start(s->ex, r->e->cfg.base, text, on_job_done, f,
                            &f->job, &err);
    }
    fo_buf_release(&prompt);
    if (rc == FO_E_NOMEM) {
        free(f);
        fail(r, rc, &err);
        return;
    }
    if (rc) { /* could not start: an ok:false result */
        free(f);
        struct orch_result none = {.exit_code = -1};
        snprintf(none.error, sizeof(none.error), "%s", err.msg);
        snprintf(none.model, sizeof(none.model), "%s", s->ex->model);
        task_result(r, t, &none);
        return;
    }
    s->eff = f;
    s->busy = 1;
}

static int simple_entry(struct run *r, size_t t, const char *actor,
                        const char *kind, const char *k1, const char *v1,
                        const char *k2, const char *v2, const char *k3,
                        const char *v3, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "id", k->id) ||
        (k1 && !cJSON_AddStringToObject(o, k1, v1)) ||
        (k2 && !cJSON_AddStringToObject(o, k2, v2)) ||
        (k3 && !cJSON_AddStringToObject(o, k3, v3))) {
        cJSON_Delete(o);
        return nomem(err);
    }
    return witness(r, actor, kind, r->plan_seq, o, (long)t, 0, 0, err);
}

/* A pending task of the wave: refused, skipped as a repeat, or begun. */
static int dispatch_task(struct run *r, size_t t, struct fo_err *err)
{
    const struct orch *o = r->e->o;
    const struct orch_task *k = &r->p->tasks[t];
    const struct orch_lane *ln = orch_roster_find(orch_roster(o), k->agent);
    if (!ln)
        return fo_err_set(err, FO_E_INTERNAL, "no lane %s", k->agent);
    if (!orch_category_allowed(o, ln->category))
        return simple_entry(r, t, "policy", "refusal", "agent", k->agent,
                            "category", ln->category, "reason",
                            "category_not_allowed", err);
    const struct orch_exec_config *ex = orch_exec_for_lane(o, ln);
    char *key = dispatch_key(k, ex);
    if (!key)
        return nomem(err);
    long dup = key_seen(r, key);
    free(key);
    if (dup >= 0)
        return simple_entry(r, t, "loop", "skip", "duplicate_of",
                            r->p->tasks[dup].id, "reason",
                            "same agent, instruction and executor already "
                            "dispatched",
                            NULL, NULL, err);
    char what[ORCH_NAME_MAX + 8];
    snprintf(what, sizeof(what), "task %s", k->id);
    if (!spend(r, what, ex->kind == ORCH_EXEC_STUB))
        return FO_OK;
    /* the key is taken now, so a repeat later in this wave is a skip even
     * before this task's entry lands */
    key = dispatch_key(k, ex);
    if (!key || key_add(r, key, t)) {
        if (ex->kind != ORCH_EXEC_STUB)
            r->reserved--;
        return nomem(err);
    }
    int rc = task_begin(r, t, ex, r->plan_seq, err);
    if (rc && ex->kind != ORCH_EXEC_STUB)
        r->reserved--;
    return rc;
}

/* ---- verdicts and escalation -------------------------------------------- */

static int verdict_entry(struct run *r, size_t t, int pass, const char *by,
                         const cJSON *failed, const char *reason,
                         const char *model, int spent, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    const struct task *s = &r->t[t];
    cJSON *e = cJSON_CreateObject();
    int ok =
        e && cJSON_AddStringToObject(e, "id", k->id) &&
        cJSON_AddBoolToObject(e, "pass", pass) &&
        cJSON_AddBoolToObject(e, "judged", strcmp(by, "unjudged")) &&
        cJSON_AddStringToObject(e, "by", by) &&
        cJSON_AddItemToObject(e, "failed",
                              failed ? cJSON_Duplicate(failed, 1)
                                     : cJSON_CreateArray()) &&
        (!reason || !*reason || cJSON_AddStringToObject(e, "reason", reason)) &&
        (!model || !*model || cJSON_AddStringToObject(e, "model", model)) &&
        cJSON_AddStringToObject(e, "result_model", s->model) &&
        (s->tier < 0 ||
         cJSON_AddStringToObject(e, "tier", orch_tier_name(s->tier)));
    if (!ok) {
        cJSON_Delete(e);
        return nomem(err);
    }
    return witness(r, "validator", "verdict", s->result_seq, e, (long)t, 0,
                   spent, err);
}

static void on_validator(struct run *r, long task, int rc,
                         struct orch_model_reply *rep,
                         const struct fo_err *cerr)
{
    size_t t = (size_t)task;
    struct task *s = &r->t[t];
    struct fo_err err;
    if (rc) {
        struct fo_err e2 = *cerr;
        fo_err_prefix(&e2, "validator");
        fail(r, rc, &e2);
        return;
    }
    cJSON *j = NULL;
    struct fo_err why;
    fo_err_clear(&why);
    int pass = 0;
    char reason[512] = "";
    rc = orch_json_extract(rep->text, rep->text_len, &j, &why);
    if (!rc) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pass");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(j, "reason");
        if (!cJSON_IsBool(p)) {
            rc = fo_err_set(&why, FO_E_INVALID,
                            "\"pass\" must be true or false");
        } else {
            pass = cJSON_IsTrue(p);
            snprintf(reason, sizeof(reason), "%s",
                     cJSON_IsString(re) ? re->valuestring : "");
        }
    }
    cJSON_Delete(j);
    if (rc) {
        rc = rejected(r, R_VALIDATOR, task, s->result_seq, &s->val, why.msg,
                      rep->model, rep->text, &err);
    } else {
        cJSON *failed = cJSON_CreateArray();
        if (failed && !pass) {
            char line[700];
            snprintf(line, sizeof(line), "validator: %s", reason);
            cJSON *f = cJSON_CreateString(line);
            if (f)
                cJSON_AddItemToArray(failed, f);
        }
        rc = failed ? verdict_entry(r, t, pass, "validator", failed, reason,
                                    rep->model, 1, &err)
                    : nomem(&err);
        cJSON_Delete(failed);
    }
    if (rc)
        fail(r, rc, &err);
}

/* Judges task t's last result: a failed task fails without asking; then
 * the done_when assertions; only plain-text criteria go to the validator
 * model; with nothing to judge by the verdict is `unjudged`. */
static int judge(struct run *r, size_t t, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    struct task *s = &r->t[t];
    if (!s->ran_ok) {
        cJSON *f = cJSON_CreateArray();
        cJSON *one = cJSON_CreateString("the task failed (no result)");
        if (!f || !one) {
            cJSON_Delete(f);
            cJSON_Delete(one);
            return nomem(err);
        }
        cJSON_AddItemToArray(f, one);
        int rc = verdict_entry(r, t, 0, "task_failed", f,
                               "the task did not finish ok", NULL, 0, err);
        cJSON_Delete(f);
        return rc;
    }
    struct orch_verdict v = {0};
    int rc = orch_assert_check(k->done, s->output, s->output_len, s->exit_code,
                               &v, err);
    if (rc)
        return rc;
    int plain = v.validator && cJSON_GetArraySize(v.validator) > 0;
    if (!v.pass) {
        rc = verdict_entry(r, t, 0, "assertions", v.failed, NULL, NULL, 0, err);
    } else if (!k->done || (plain && !r->e->o->models)) {
        rc = verdict_entry(r, t, 0, "unjudged", NULL,
                           !k->done ? "the task has no done_when criteria"
                                    : "no model is configured to judge its "
                                      "plain-text criteria",
                           NULL, 0, err);
    } else if (plain) {
        if (s->val.n >= ORCH_JSON_ATTEMPTS) {
            cJSON *f = cJSON_CreateArray();
            cJSON *one = cJSON_CreateString(
                "validator: the validator gave no valid verdict");
            if (f && one)
                cJSON_AddItemToArray(f, one);
            else
                cJSON_Delete(one);
            rc = f ? verdict_entry(r, t, 0, "validator", f,
                                   "the validator gave no valid verdict", NULL,
                                   0, err)
                   : nomem(err);
            cJSON_Delete(f);
        } else if (spend(r, "validator", 0)) {
            struct fo_buf crit;
            fo_buf_init(&crit, FO_BUF_UNLIMITED);
            const cJSON *c;
            cJSON_ArrayForEach (c, v.validator)
                if (!rc && cJSON_IsString(c))
                    rc = fo_buf_printf(&crit, "- %s\n", c->valuestring);
            size_t on =
                orch_utf8_prefix(s->output, s->output_len, r->e->o->inject_max);
            char *outcut = malloc(on + 1);
            if (outcut) {
                memcpy(outcut, s->output, on);
                outcut[on] = '\0';
            }
            char *user = NULL;
            struct orch_tmpl_var tv[] = {
                {"instruction", k->instruction},
                {"criteria", crit.data ? crit.data : ""},
                {"output", outcut ? outcut : ""}};
            if (rc || !outcut)
                rc = nomem(err);
            else
                rc = orch_template_render(validator_user, tv, 3, PROMPT_MAX,
                                          &user, err);
            if (!rc)
                rc = json_role_start(r, R_VALIDATOR, (long)t, validator_system,
                                     user,
                                     "{\"pass\": true, \"reason\": \"stub "
                                     "validator\"}",
                                     &s->val, on_validator, err);
            if (rc)
                r->reserved--;
            free(user);
            free(outcut);
            fo_buf_release(&crit);
        }
    } else {
        rc = verdict_entry(r, t, 1, "assertions", NULL, NULL, NULL, 0, err);
    }
    orch_verdict_release(&v);
    return rc;
}

/* The next stronger executor of task t's api with a provider that this run
 * has not dispatched the task on, or NULL. */
static const struct orch_exec_config *next_tier(const struct run *r, size_t t)
{
    const struct orch *o = r->e->o;
    const struct task *s = &r->t[t];
    int api = -1, tier = -1;
    if (!s->ex || model_slot(o, s->ex, &api, &tier) != 0)
        return NULL;
    for (int up = tier + 1; up <= ORCH_TIER_FRONTIER; up++) {
        if (!o->model_has[api][up])
            continue;
        char *key = dispatch_key(&r->p->tasks[t], &o->model_exec[api][up]);
        long seen = key ? key_seen(r, key) : 0;
        free(key);
        if (seen < 0)
            return &o->model_exec[api][up];
    }
    return NULL;
}

static int escalate(struct run *r, size_t t, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    struct task *s = &r->t[t];
    const struct orch_exec_config *next = next_tier(r, t);
    if (!next) { /* cannot happen: apply saw one */
        s->st = TS_FINAL;
        return FO_OK;
    }
    char what[ORCH_NAME_MAX + 16];
    snprintf(what, sizeof(what), "escalation of %s", k->id);
    /* the budget is checked before the escalation is witnessed, so a spent
     * budget never leaves an escalation without its task */
    if (!spend(r, what, 0))
        return FO_OK;
    r->reserved--; /* the task entry takes it */
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddStringToObject(e, "id", k->id) ||
        !cJSON_AddStringToObject(e, "agent", k->agent) ||
        !cJSON_AddStringToObject(e, "from", orch_tier_name(s->tier)) ||
        !cJSON_AddStringToObject(e, "to", orch_tier_name(next->tier)) ||
        !cJSON_AddStringToObject(e, "model", next->model) ||
        !cJSON_AddItemToObject(e, "because",
                               s->failed ? cJSON_Duplicate(s->failed, 1)
                                         : cJSON_CreateArray())) {
        cJSON_Delete(e);
        return nomem(err);
    }
    return witness(r, "loop", "tier_escalation", s->verdict_seq, e, (long)t, 0,
                   0, err);
}

/* ---- waves -------------------------------------------------------------- */

static int final_state(const struct run *r, size_t t)
{
    const struct task *s = &r->t[t];
    if (s->busy)
        return 0;
    if (s->st == TS_FINAL || s->st == TS_REFUSED)
        return 1;
    if (s->st == TS_SKIPPED)
        return s->dup_of >= 0 && final_state(r, (size_t)s->dup_of);
    return 0;
}

/* Copies what the original of a skipped repeat gave. */
static int copy_dup(struct run *r, size_t t, struct fo_err *err)
{
    struct task *s = &r->t[t], *d = &r->t[s->dup_of];
    s->copied = 1;
    s->pass = d->pass;
    s->unjudged = d->unjudged;
    if (d->output) {
        s->output = malloc(d->output_len + 1);
        if (!s->output)
            return nomem(err);
        memcpy(s->output, d->output, d->output_len + 1);
        s->output_len = d->output_len;
    }
    return FO_OK;
}

static int gate_step(struct run *r, struct fo_err *err);

/* Moves the tasks of the current wave on; 1 when the wave is complete. */
static int wave_step(struct run *r, struct fo_err *err)
{
    const struct orch_plan *p = r->p;
    size_t lo = p->wave_start[r->wave], hi = p->wave_start[r->wave + 1];
    size_t lim = r->e->o->max_parallel > 0 ? (size_t)r->e->o->max_parallel : 1;
    size_t active = 0;
    for (size_t i = lo; i < hi; i++)
        active += r->t[p->order[i]].slot;
    int complete = 1;
    for (size_t i = lo; i < hi && !r->halt && !r->ended; i++) {
        size_t t = p->order[i];
        struct task *s = &r->t[t];
        if (!final_state(r, t))
            complete = 0;
        if (s->busy)
            continue;
        int rc = FO_OK;
        switch (s->st) {
        case TS_PENDING:
            if (active >= lim)
                break;
            rc = dispatch_task(r, t, err);
            active += s->slot;
            break;
        case TS_RUN:
            task_exec(r, t);
            break;
        case TS_RESULT:
            rc = judge(r, t, err);
            break;
        case TS_VERDICT:
            rc = escalate(r, t, err);
            break;
        case TS_ESC:
            if (active >= lim)
                break;
            if (spend(r, "escalated task", 0)) {
                rc = task_begin(r, t, s->ex, s->esc_seq, err);
                if (rc)
                    r->reserved--;
            }
            active += s->slot;
            break;
        case TS_SKIPPED:
            if (!s->copied && final_state(r, t))
                rc = copy_dup(r, t, err);
            break;
        default:
            break;
        }
        if (rc)
            return -rc;
    }
    return complete && !r->halt;
}

static void waves_step(struct run *r)
{
    struct fo_err err;
    while (r->phase == PH_WAVES && !r->halt && !r->ended) {
        if (r->wave >= r->p->n_waves) {
            r->phase = !strcmp(r->via, "plan") ? PH_END : PH_SYNTH;
            r->dirty = 1;
            return;
        }
        char what[32];
        snprintf(what, sizeof(what), "wave %zu", r->wave);
        if (!spend(r, what, 1))
            return;
        int g = gate_step(r, &err);
        if (g < 0) {
            fail(r, -g, &err);
            return;
        }
        if (!g)
            return;
        int w = wave_step(r, &err);
        if (w < 0) {
            fail(r, -w, &err);
            return;
        }
        if (!w)
            return;
        /* every task of the wave is final: copy the repeats, next wave */
        const struct orch_plan *p = r->p;
        for (size_t i = p->wave_start[r->wave]; i < p->wave_start[r->wave + 1];
             i++) {
            size_t t = p->order[i];
            if (r->t[t].st == TS_SKIPPED && !r->t[t].copied &&
                copy_dup(r, t, &err)) {
                fail(r, FO_E_NOMEM, &err);
                return;
            }
        }
        r->wave++;
    }
}

/* ---- synthesis and the answer ------------------------------------------- */

static int results_text(const struct run *r, int stub, struct fo_buf *b)
{
    int rc = FO_OK, any = 0;
    for (size_t i = 0; !rc && i < r->p->n; i++) {
        size_t t = r->p->order[i];
        const struct task *s = &r->t[t];
        const struct orch_task *k = &r->p->tasks[t];
        size_t n = s->output ? orch_utf8_prefix(s->output, s->output_len,
                                                r->e->o->inject_max)
                             : 0;
        if (stub) {
            if (!s->output || s->st == TS_SKIPPED)
                continue;
            rc = fo_buf_puts(b, any++ ? "\n\n" : "");
            if (!rc)
                rc = fo_buf_append(b, s->output, n);
            continue;
        }
        const char *state = s->st == TS_REFUSED   ? "refused by policy"
                            : s->st == TS_SKIPPED ? "a repeat, skipped"
                            : s->pass             ? "passed"
                            : s->unjudged         ? "not judged"
                            : s->ran_ok           ? "did not pass"
                                                  : "failed";
        rc = fo_buf_printf(b, "[%s, agent %s: %s]\n", k->id, k->agent, state);
        if (!rc && s->output && s->st != TS_SKIPPED)
            rc = fo_buf_append(b, s->output, n);
        if (!rc)
            rc = fo_buf_puts(b, "\n\n");
    }
    if (!rc && stub && !any)
        rc = fo_buf_puts(b, "forum: no task produced a result.");
    return rc;
}

static void on_synth(struct run *r, long task, int rc,
                     struct orch_model_reply *rep, const struct fo_err *cerr)
{
    (void)task;
    struct fo_err err;
    if (rc) {
        struct fo_err e2 = *cerr;
        fo_err_prefix(&e2, "synthesizer");
        fail(r, rc, &e2);
        return;
    }
    cJSON *cov = coverage(r->request, rep->text);
    cJSON *e = cJSON_CreateObject();
    int64_t parent = r->plan_seq >= 0 ? r->plan_seq : r->id;
    int ok = cov && e && cJSON_AddStringToObject(e, "answer", rep->text) &&
             cJSON_AddStringToObject(e, "model", rep->model) &&
             cJSON_AddItemToObject(e, "coverage", cov) &&
             fo_json_add_int(e, "model_calls", r->calls + 1);
    if (!ok) {
        if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(e, "coverage")))
            cJSON_Delete(cov);
        cJSON_Delete(e);
        fail(r, nomem(&err), &err);
        return;
    }
    rc = witness(r, "synthesizer", "answer", parent, e, -1, 1, 1, &err);
    if (rc)
        fail(r, rc, &err);
}

static void synth_step(struct run *r)
{
    struct fo_err err;
    if (!spend(r, "synthesizer", 0))
        return;
    struct fo_buf res, stub;
    fo_buf_init(&res, FO_BUF_UNLIMITED);
    fo_buf_init(&stub, FO_BUF_UNLIMITED);
    char *user = NULL;
    const struct orch *o = r->e->o;
    /* Without a model the answer says so first, whatever the tasks ran on
     * (the stub, or a --cmd): no reader should take it for a model's. */
    int rc =
        (!o->models && !o->argv && fo_buf_puts(&stub, ORCH_NO_MODEL_NOTE)) ||
                results_text(r, 0, &res) || results_text(r, 1, &stub)
            ? nomem(&err)
            : FO_OK;
    struct orch_tmpl_var v[] = {{"request", run_prompt(r)},
                                {"results", res.data ? res.data : ""}};
    if (!rc)
        rc = orch_template_render(synth_user, v, 2, 0, &user, &err);
    struct orch_model_msg m[] = {{.role = "system", .content = synth_system},
                                 {.role = "user", .content = user}};
    if (!rc)
        rc = role_start(r, R_SYNTHESIZER, -1, m, 2, stub.data ? stub.data : "",
                        on_synth, &err);
    free(user);
    fo_buf_release(&res);
    fo_buf_release(&stub);
    if (rc) {
        r->reserved--;
        fail(r, rc, &err);
    }
}

/* The fixed answer of a run the budget, a cancel or a shutdown stopped. */
static const char *stop_answer(const struct run *r)
{
    const char *s = r->halt_reason ? r->halt_reason : "";
    return !strcmp(s, "shutdown")        ? ORCH_STOPPED_ANSWER
           : !strcmp(s, "cancelled")     ? ORCH_CANCELLED_ANSWER
           : !strcmp(s, "gate_rejected") ? ORCH_REJECTED_ANSWER
           : !strcmp(s, "gate_expired")  ? ORCH_EXPIRED_ANSWER
                                         : ORCH_BUDGET_ANSWER;
}

/* A halted run, once nothing it started is in flight: a cancel or the
 * budget write `budget` and the fixed answer; a shutdown writes `stop` and
 * leaves the run to be resumed. Tasks abandoned by a cancel get a result
 * first, so no task entry is left without one. */
static void halt_step(struct run *r)
{
    struct fo_err err;
    int rc = FO_OK;
    if (r->writes > 0 || r->busy || r->eff)
        return;
    for (size_t i = 0; r->t && i < r->p->n; i++)
        if (r->t[i].busy)
            return;
    int64_t parent = r->plan_seq >= 0 ? r->plan_seq : r->id;
    if (r->halt == H_SHUTDOWN) {
        if (r->halt_written || r->id < 0) {
            r->ended = 1;
            return;
        }
        cJSON *e = cJSON_CreateObject();
        rc = e && cJSON_AddStringToObject(e, "reason", "shutdown") &&
                     fo_json_add_int(e, "last_seq", r->last_seq) &&
                     cJSON_AddStringToObject(e, "instance", r->e->instance)
                 ? witness(r, "loop", "stop", r->id, e, -1, 1, 0, &err)
                 : nomem(&err);
        if (rc) {
            cJSON_Delete(e);
            r->ended = 1;
        }
        r->halt_written = 1;
        return;
    }
    /* the budget: a task witnessed still runs, gets its result and is
     * judged (without a model: no call is left) */
    if (r->halt == H_BUDGET)
        for (size_t i = 0; r->t && i < r->p->n; i++) {
            struct task *s = &r->t[i];
            if (s->st == TS_RUN) {
                task_exec(r, i);
                return;
            }
            if (s->st == TS_RESULT && !s->halt_judged) {
                s->halt_judged = 1;
                rc = judge(r, i, &err);
                if (rc) {
                    fail(r, rc, &err);
                    return;
                }
                if (s->busy || r->writes)
                    return;
            }
        }
    if (r->halt == H_CANCEL)
        for (size_t i = 0; r->t && i < r->p->n; i++)
            if (r->t[i].st == TS_RUN) {
                struct orch_result res = {.exit_code = -1};
                snprintf(res.error, sizeof(res.error), "cancelled");
                snprintf(res.model, sizeof(res.model), "%s",
                         r->t[i].ex ? r->t[i].ex->model : "");
                task_result(r, i, &res);
                return;
            }
    if (r->budget_seq < 0) {
        cJSON *e = cJSON_CreateObject();
        int ok =
            e && cJSON_AddStringToObject(e, "reason", r->halt_reason) &&
            cJSON_AddStringToObject(e, "stopped_before", r->stopped_before) &&
            fo_json_add_int(e, "model_calls", r->calls) &&
            fo_json_add_int(e, "max_model_calls", r->max_calls) &&
            fo_json_add_int(e, "max_seconds", r->max_seconds) &&
            fo_json_add_int(e, "elapsed_ms", elapsed_ms(r)) &&
            fo_json_add_int(e, "last_seq", r->last_seq);
        rc = ok ? witness(r, "loop", "budget", parent, e, -1, 1, 0, &err)
                : nomem(&err);
        if (!ok)
            cJSON_Delete(e);
    } else if (r->answer_seq < 0) {
        cJSON *e = cJSON_CreateObject();
        int ok = e && cJSON_AddStringToObject(e, "answer", stop_answer(r)) &&
                 fo_json_add_int(e, "model_calls", r->calls) &&
                 cJSON_AddTrueToObject(e, "budget_spent");
        rc = ok ? witness(r, "synthesizer", "answer", parent, e, -1, 1, 0, &err)
                : nomem(&err);
        if (!ok)
            cJSON_Delete(e);
    }
    if (rc)
        fail(r, rc, &err);
}

/* ---- apply: an entry of the run into its state -------------------------- */

static const char *str_of(const cJSON *b, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int bad(struct fo_err *err, int64_t seq, const char *what)
{
    return fo_err_set(err, FO_E_CORRUPT, "run history: entry %lld: %s",
                      (long long)seq, what);
}

/* ---- approval gates ----------------------------------------------------- */

static int64_t now_ms(void)
{
    return now_us() / 1000;
}

static long gate_by_req(const struct run *r, int64_t seq)
{
    for (size_t w = 0; r->g && w < r->p->n_waves; w++)
        if (r->g[w].st >= G_PENDING && r->g[w].req_seq == seq)
            return (long)w;
    return -1;
}

/* 1 when a gate of the run was rejected (or expired into rejection). */
static int gate_rejected(const struct run *r)
{
    for (size_t w = 0; r->g && w < r->p->n_waves; w++)
        if (r->g[w].st == G_REJECTED)
            return 1;
    return 0;
}

static int wave_has(const struct run *r, size_t wave, long t)
{
    const struct orch_plan *p = r->p;
    for (size_t i = p->wave_start[wave]; i < p->wave_start[wave + 1]; i++)
        if ((long)p->order[i] == t)
            return 1;
    return 0;
}

/* Checks edits ({task id: instruction}) against the tasks of wave. */
static int edits_check(const struct run *r, size_t wave, const cJSON *edits,
                       struct fo_err *err)
{
    if (!cJSON_IsObject(edits) || !edits->child)
        return fo_err_set(err, FO_E_INVALID,
                          "edits: must be an object of {task id: "
                          "instruction}, not empty");
    const cJSON *x;
    cJSON_ArrayForEach (x, edits) {
        long t = task_by_id(r, x->string);
        if (t < 0 || !wave_has(r, wave, t))
            return fo_err_set(err, FO_E_INVALID,
                              "edits: task \"%.64s\" is not in wave %zu",
                              x->string, wave);
        if (!cJSON_IsString(x) || !*x->valuestring ||
            strlen(x->valuestring) > ORCH_GATE_EDIT_MAX)
            return fo_err_set(err, FO_E_INVALID,
                              "edits.%.64s: must be an instruction of 1..%d "
                              "bytes",
                              x->string, ORCH_GATE_EDIT_MAX);
    }
    return FO_OK;
}

/* A gate's entries into the run's state. The first decision on record
 * counts; later ones change nothing. */
static int apply_gate(struct run *r, const char *kind, int64_t seq,
                      int64_t parent, const cJSON *b, struct fo_err *err)
{
    if (!strcmp(kind, "gate_requested")) {
        long long w = 0;
        if (!r->g || fo_json_get_int(b, "wave", 0, (long long)r->p->n_waves - 1,
                                     &w) != FO_OK)
            return bad(err, seq, "a gate of no wave of the plan");
        long long dl = 0;
        if (fo_json_get_int(b, "deadline_ms", 0, INT64_MAX / 2, &dl) != FO_OK)
            return bad(err, seq, "a gate without its deadline");
        struct gate *g = &r->g[w];
        if (g->st >= G_PENDING)
            return FO_OK; /* asked twice: the first counts */
        g->st = G_PENDING;
        g->writing = 0;
        g->req_seq = seq;
        g->req_ts_us = r->cur_ts;
        g->deadline_ms = dl;
        const char *ox = str_of(b, "on_expiry");
        g->approve_on_expiry = ox && !strcmp(ox, "approve");
        return FO_OK;
    }
    long w = gate_by_req(r, parent);
    if (w < 0)
        return bad(err, seq, "a gate decision of no gate");
    struct gate *g = &r->g[w];
    if (g->st != G_PENDING)
        return FO_OK;
    int approve = 1;
    if (!strcmp(kind, "gate_edited")) {
        const cJSON *edits = cJSON_GetObjectItemCaseSensitive(b, "edits");
        struct fo_err why;
        if (edits_check(r, (size_t)w, edits, &why))
            return bad(err, seq, why.msg);
        const cJSON *x;
        cJSON_ArrayForEach (x, edits) {
            struct orch_task *k = &r->p->tasks[task_by_id(r, x->string)];
            char *s = orch_strdup(x->valuestring);
            if (!s)
                return nomem(err);
            free(k->instruction);
            k->instruction = s;
        }
    } else if (!strcmp(kind, "gate_rejected")) {
        approve = 0;
    } else if (!strcmp(kind, "gate_expired")) {
        const char *a = str_of(b, "action");
        approve = a && !strcmp(a, "approved");
    }
    g->st = approve ? G_APPROVED : G_REJECTED;
    g->writing = 0;
    g->decided_seq = seq;
    if (r->cur_ts > g->req_ts_us)
        r->wait_us += r->cur_ts - g->req_ts_us;
    if (!approve) {
        char before[32];
        snprintf(before, sizeof(before), "wave %ld", w);
        set_halt(r, H_GATE, kind[5] == 'e' ? "gate_expired" : "gate_rejected",
                 before);
    }
    return FO_OK;
}

static void gate_arm(struct orch_engine *e)
{
    if (!e->gate_ev || evtimer_pending(e->gate_ev, NULL))
        return;
    struct timeval tv = {ORCH_GATE_POLL_MS / 1000,
                         (ORCH_GATE_POLL_MS % 1000) * 1000};
    evtimer_add(e->gate_ev, &tv);
}

static int gate_expire(struct run *r, size_t wave, struct fo_err *err)
{
    struct gate *g = &r->g[wave];
    char when[ORCH_TIME_MAX];
    orch_time_rfc3339(g->deadline_ms, when);
    cJSON *o = cJSON_CreateObject();
    int ok = o && fo_json_add_int(o, "run", r->id) &&
             fo_json_add_int(o, "wave", (long long)wave) &&
             cJSON_AddStringToObject(o, "deadline", when) &&
             cJSON_AddStringToObject(
                 o, "on_expiry", g->approve_on_expiry ? "approve" : "reject") &&
             cJSON_AddStringToObject(
                 o, "action", g->approve_on_expiry ? "approved" : "rejected");
    if (!ok) {
        cJSON_Delete(o);
        return nomem(err);
    }
    g->writing = 1;
    int rc = witness(r, "gate", "gate_expired", g->req_seq, o, -1, 0, 0, err);
    if (rc)
        g->writing = 0;
    return rc;
}

static int gate_request(struct run *r, const char *rule, struct fo_err *err)
{
    const struct orch_plan *p = r->p;
    struct gate *g = &r->g[r->wave];
    int64_t dl = orch_gate_deadline(r->gates, now_ms());
    char when[ORCH_TIME_MAX];
    orch_time_rfc3339(dl, when);
    const char *q = str_of(r->gates, "question");
    char question[160];
    size_t n = p->wave_start[r->wave + 1] - p->wave_start[r->wave];
    snprintf(question, sizeof(question),
             "Approve wave %zu of run %lld (%zu task%s) before it runs?",
             r->wave, (long long)r->id, n, n == 1 ? "" : "s");
    cJSON *o = cJSON_CreateObject();
    cJSON *tasks = o ? cJSON_AddArrayToObject(o, "tasks") : NULL;
    int ok = tasks != NULL;
    for (size_t i = p->wave_start[r->wave];
         ok && i < p->wave_start[r->wave + 1]; i++) {
        const struct orch_task *k = &p->tasks[p->order[i]];
        cJSON *t = cJSON_CreateObject();
        ok = t && cJSON_AddItemToArray(tasks, t) &&
             cJSON_AddStringToObject(t, "id", k->id) &&
             cJSON_AddStringToObject(t, "agent", k->agent) &&
             cJSON_AddStringToObject(t, "instruction", k->instruction);
    }
    ok = ok && fo_json_add_int(o, "run", r->id) &&
         fo_json_add_int(o, "wave", (long long)r->wave) &&
         cJSON_AddStringToObject(o, "question", q ? q : question) &&
         cJSON_AddStringToObject(o, "rule", rule) &&
         cJSON_AddStringToObject(o, "deadline", when) &&
         fo_json_add_int(o, "deadline_ms", dl) &&
         cJSON_AddStringToObject(
             o, "on_expiry",
             orch_gate_on_expiry_approve(r->gates) ? "approve" : "reject");
    if (!ok) {
        cJSON_Delete(o);
        return nomem(err);
    }
    g->writing = 1;
    int rc =
        witness(r, "gate", "gate_requested", r->plan_seq, o, -1, 0, 0, err);
    if (rc)
        g->writing = 0;
    else
        elog(r->e, "run %lld: wave %zu waits for approval (%s)",
             (long long)r->id, r->wave, rule);
    return rc;
}

/* Before the current wave runs: 1 when it may, 0 while it waits for its
 * gate (or its gate ended the run), -rc on an error. */
static int gate_step(struct run *r, struct fo_err *err)
{
    if (!r->g)
        return 1;
    struct gate *g = &r->g[r->wave];
    if (g->st == G_OPEN || g->st == G_APPROVED)
        return 1;
    if (g->st == G_REJECTED || g->writing)
        return 0;
    if (g->st == G_PENDING) {
        if (now_ms() >= g->deadline_ms) {
            int rc = gate_expire(r, r->wave, err);
            return rc ? -rc : 0;
        }
        gate_arm(r->e);
        return 0;
    }
    /* asked once, before the wave's first task (a wave begun before is
     * not stopped now) */
    const struct orch_plan *p = r->p;
    for (size_t i = p->wave_start[r->wave]; i < p->wave_start[r->wave + 1]; i++)
        if (r->t[p->order[i]].st != TS_PENDING) {
            g->st = G_OPEN;
            return 1;
        }
    char rule[ORCH_NAME_MAX + 16];
    if (!orch_gate_rule(r->gates, orch_roster(r->e->o), p, r->wave, rule,
                        sizeof(rule))) {
        g->st = G_OPEN;
        return 1;
    }
    int rc = gate_request(r, rule, err);
    return rc ? -rc : 0;
}

/* Decisions other processes wrote (`forum gate approve` on the ledger):
 * the entries since the last look, at most one read per tick for them
 * all; then the deadlines. */
struct gate_seen {
    int64_t *seq, *parent;
    size_t n, cap;
    int64_t last;
};

static int gate_seen_entry(void *ctx, const struct ledger_entry *en)
{
    struct gate_seen *g = ctx;
    g->last = en->seq;
    if (strncmp(en->kind, "gate_", 5) != 0 ||
        !strcmp(en->kind, "gate_requested") || en->parent < 0)
        return 0;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        int64_t *a = realloc(g->seq, cap * sizeof(*a));
        if (a)
            g->seq = a;
        int64_t *b = a ? realloc(g->parent, cap * sizeof(*b)) : NULL;
        if (!a || !b)
            return FO_E_NOMEM;
        g->parent = b;
        g->cap = cap;
    }
    g->seq[g->n] = en->seq;
    g->parent[g->n++] = en->parent;
    return 0;
}

/* Applies decision seq of run r when its gate still waits. */
static void gate_take(struct run *r, int64_t seq)
{
    struct ledger_entry en;
    struct fo_err err;
    char *body = NULL;
    size_t len = 0;
    cJSON *b = NULL;
    if (ledger_get(r->e->cfg.ledger, seq, &en, NULL, &err) ||
        ledger_body(r->e->cfg.ledger, seq, &body, &len, &err) ||
        fo_json_parse(body, len, &b, &err)) {
        free(body);
        return; /* redacted or unreadable: the deadline decides */
    }
    free(body);
    r->cur_ts = en.ts;
    int rc = apply(r, en.actor, en.kind, en.seq, en.parent, b, &err);
    cJSON_Delete(b);
    if (rc)
        fail(r, rc, &err);
    step(r);
}

static void on_gate_tick(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    struct gate_seen seen = {.last = e->gate_cursor - 1};
    struct fo_err err;
    int rc = ledger_range(e->cfg.ledger, e->gate_cursor, 100000,
                          gate_seen_entry, &seen, &err);
    if (rc == FO_OK)
        e->gate_cursor = seen.last + 1;
    int64_t now = now_ms();
    int waiting = 0;
    /* what to do is found first: acting may end runs */
    size_t nact = 0, cap = 0;
    int64_t(*act)[2] = NULL;
    for (struct run *r = e->runs; r; r = r->next)
        for (size_t w = 0; r->g && !r->ended && w < r->p->n_waves; w++) {
            struct gate *g = &r->g[w];
            if (g->st != G_PENDING || g->writing)
                continue;
            int64_t take = -1;
            for (size_t i = 0; i < seen.n && take < 0; i++)
                if (seen.parent[i] == g->req_seq)
                    take = seen.seq[i];
            waiting = 1;
            if (take < 0 && now < g->deadline_ms)
                continue;
            if (nact == cap) {
                size_t c = cap ? cap * 2 : 8;
                int64_t(*a)[2] = realloc(act, c * sizeof(*a));
                if (!a)
                    break; /* the next tick */
                act = a;
                cap = c;
            }
            act[nact][0] = r->id;
            act[nact++][1] = take;
        }
    for (size_t i = 0; i < nact; i++) {
        struct run *r = run_find(e, act[i][0]);
        if (!r || r->ended)
            continue;
        if (act[i][1] >= 0)
            gate_take(r, act[i][1]);
        else
            step(r);
    }
    free(act);
    free(seen.seq);
    free(seen.parent);
    if (waiting)
        gate_arm(e);
}

static void attempts_note(struct attempts *a, const cJSON *b)
{
    a->n++;
    free(a->last);
    const char *reply = str_of(b, "reply"), *why = str_of(b, "error");
    a->last = orch_strdup(reply ? reply : "");
    snprintf(a->why, sizeof(a->why), "%s", why ? why : "");
}

/* The executor a task entry names: its api and tier when it is a model
 * tier, else the lane's. */
static const struct orch_exec_config *
exec_named(const struct run *r, const struct orch_lane *ln, const cJSON *b)
{
    const struct orch *o = r->e->o;
    const char *ex = str_of(b, "executor"), *tier = str_of(b, "tier");
    int a = ex && !strcmp(ex, "anthropic") ? 1
            : ex && !strcmp(ex, "chat")    ? 0
                                           : -1;
    if (a >= 0 && tier && o->models)
        for (int t = 0; t < 3; t++)
            if (!strcmp(tier, orch_tier_name(t)) && o->model_has[a][t])
                return &o->model_exec[a][t];
    return orch_exec_for_lane(o, ln);
}

static int apply_plan(struct run *r, int64_t seq, const char *actor,
                      const cJSON *b, struct fo_err *err)
{
    struct orch_plan *p = NULL;
    cJSON *given = cJSON_CreateObject();
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(b, "tasks");
    if (!given || !tasks ||
        !cJSON_AddItemToObject(given, "tasks", cJSON_Duplicate(tasks, 1))) {
        cJSON_Delete(given);
        return tasks ? nomem(err) : bad(err, seq, "a plan without tasks");
    }
    int rc = orch_plan_compile(given, orch_roster(r->e->o), &p, err);
    cJSON_Delete(given);
    if (rc)
        return rc == FO_E_NOMEM ? rc : bad(err, seq, err->msg);
    r->t = calloc(p->n ? p->n : 1, sizeof(*r->t));
    if (!r->t) {
        orch_plan_free(p);
        return nomem(err);
    }
    for (size_t i = 0; i < p->n; i++) {
        struct task *s = &r->t[i];
        s->task_seq = s->result_seq = s->verdict_seq = s->esc_seq = -1;
        s->tier = -1;
        s->dup_of = -1;
        s->exit_code = -1;
        s->await = -1;
    }
    free(r->g);
    r->g = NULL;
    if (r->gates &&
        !(r->g = calloc(p->n_waves ? p->n_waves : 1, sizeof(*r->g)))) {
        orch_plan_free(p);
        return nomem(err);
    }
    orch_plan_free(r->p);
    r->p = p;
    r->plan_seq = seq;
    r->wave = 0;
    r->phase = !strcmp(r->via, "plan") ? PH_END : PH_WAVES;
    snprintf(r->plan_model, sizeof(r->plan_model), "%s",
             str_of(b, "model") ? str_of(b, "model") : "");
    if (!strcmp(actor, "coordinator"))
        r->calls++;
    return FO_OK;
}

static int apply_task(struct run *r, int64_t seq, int64_t parent,
                      const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, str_of(b, "id"));
    if (t < 0 || r->phase != PH_WAVES)
        return bad(err, seq, "a task that is not in the plan");
    struct task *s = &r->t[t];
    const struct orch_lane *ln =
        orch_roster_find(orch_roster(r->e->o), r->p->tasks[t].agent);
    if (!ln)
        return bad(err, seq, "a task on an unknown lane");
    if (parent != r->plan_seq && parent != s->esc_seq)
        return bad(err, seq, "a task whose parent is not its plan");
    s->ex = exec_named(r, ln, b);
    int api = -1, tier = -1;
    model_slot(r->e->o, s->ex, &api, &tier);
    s->tier = tier;
    s->task_seq = seq;
    s->result_seq = -1;
    s->st = TS_RUN;
    s->slot = 1;
    cJSON_Delete(s->conv);
    cJSON_Delete(s->pending);
    free(s->pending_text);
    s->conv = s->pending = NULL;
    s->pending_text = NULL;
    s->conv_last = seq;
    s->await = -1;
    s->turn = s->turn_seen = s->n_calls = s->bad_calls = s->blocked = 0;
    /* the wave the task is in is the one that runs (resume) */
    for (size_t w = 0; w < r->p->n_waves; w++)
        for (size_t i = r->p->wave_start[w]; i < r->p->wave_start[w + 1]; i++)
            if (r->p->order[i] == (size_t)t && w > r->wave)
                r->wave = w;
    char *key = dispatch_key(&r->p->tasks[t], s->ex);
    if (!key)
        return nomem(err);
    if (key_seen(r, key) >= 0)
        free(key);
    else if (key_add(r, key, (size_t)t))
        return nomem(err);
    if (s->ex->kind != ORCH_EXEC_STUB)
        r->calls++;
    return FO_OK;
}

static int apply_result(struct run *r, int64_t seq, int64_t parent,
                        const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, str_of(b, "id"));
    if (t < 0 || r->t[t].st != TS_RUN ||
        (r->t[t].task_seq != parent && r->t[t].conv_last != parent))
        return bad(err, seq, "a result without its task");
    struct task *s = &r->t[t];
    const char *out = str_of(b, "output"), *model = str_of(b, "model");
    long long turns = 0;
    if (fo_json_get_int(b, "turns", 1, 1000000, &turns) == FO_OK &&
        turns >= 2 && turns > s->turn_seen)
        r->calls++; /* the turn that answered (the first is the task's) */
    s->slot = 0;
    s->result_seq = seq;
    s->ran_ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ok"));
    long long ec = 0;
    s->exit_code = fo_json_get_int(b, "exit_code", -1, 255, &ec) == FO_OK
                       ? (int)ec
                       : (s->ran_ok ? 0 : -1);
    snprintf(s->model, sizeof(s->model), "%s", model ? model : "");
    free(s->output);
    s->output = NULL;
    s->output_len = 0;
    if (s->ran_ok && out) {
        s->output = orch_strdup(out);
        if (!s->output)
            return nomem(err);
        s->output_len = strlen(out);
    }
    s->st = TS_RESULT;
    s->val.n = 0;
    attempts_release(&s->val);
    return FO_OK;
}

static int apply_verdict(struct run *r, int64_t seq, int64_t parent,
                         const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, str_of(b, "id"));
    if (t < 0 || r->t[t].result_seq != parent || r->t[t].st != TS_RESULT)
        return bad(err, seq, "a verdict without its result");
    struct task *s = &r->t[t];
    const char *by = str_of(b, "by");
    s->verdict_seq = seq;
    s->pass = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "pass"));
    s->unjudged = by && !strcmp(by, "unjudged");
    if (by && !strcmp(by, "validator") && str_of(b, "model"))
        r->calls++;
    cJSON_Delete(s->failed);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(b, "failed");
    s->failed = cJSON_IsArray(f) ? cJSON_Duplicate(f, 1) : cJSON_CreateArray();
    if (!s->failed)
        return nomem(err);
    s->st = !s->pass && !s->unjudged && next_tier(r, (size_t)t) ? TS_VERDICT
                                                                : TS_FINAL;
    return FO_OK;
}

static int apply_escalation(struct run *r, int64_t seq, int64_t parent,
                            const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, str_of(b, "id"));
    if (t < 0 || r->t[t].verdict_seq != parent)
        return bad(err, seq, "an escalation without its verdict");
    struct task *s = &r->t[t];
    const char *to = str_of(b, "to");
    int api = -1, tier = -1;
    if (!s->ex || model_slot(r->e->o, s->ex, &api, &tier) != 0 || !to)
        return bad(err, seq, "an escalation of a task not on a model tier");
    const struct orch_exec_config *next = NULL;
    for (int up = 0; up < 3; up++)
        if (!strcmp(to, orch_tier_name(up)) && r->e->o->model_has[api][up])
            next = &r->e->o->model_exec[api][up];
    if (!next)
        return bad(err, seq, "an escalation to a tier with no provider");
    s->ex = next;
    s->esc_seq = seq;
    s->st = TS_ESC;
    r->escalations++;
    return FO_OK;
}

/* A step of a task's tool loop: kept for the next model turn. */
static int apply_conv(struct run *r, const char *kind, int64_t seq,
                      int64_t parent, const cJSON *b, struct fo_err *err)
{
    long t = task_by_id(r, str_of(b, "id"));
    if (t < 0 || r->t[t].st != TS_RUN)
        return bad(err, seq, "a tool step of no running task");
    struct task *s = &r->t[t];
    int result = !strcmp(kind, "tool_result");
    if (result ? parent != s->await : parent != s->conv_last)
        return bad(err, seq, "a tool step out of order");
    long long turn = 0;
    if (!result) {
        if (fo_json_get_int(b, "turn", 1, 1000000, &turn) != FO_OK)
            return bad(err, seq, "a tool step without its turn");
        if (turn > s->turn_seen) {
            if (turn >= 2)
                r->calls++; /* the model turn it witnesses */
            s->turn_seen = (int)turn;
        }
        if (turn > s->turn)
            s->turn = (int)turn;
    }
    cJSON *c = cJSON_Duplicate(b, 1);
    if (!c || (!s->conv && !(s->conv = cJSON_CreateArray())) ||
        !cJSON_AddStringToObject(c, "k", kind)) {
        cJSON_Delete(c);
        return nomem(err);
    }
    cJSON_AddItemToArray(s->conv, c);
    s->conv_last = seq;
    if (!strcmp(kind, "tool_call")) {
        s->await = seq;
        s->n_calls++;
    } else if (result) {
        s->await = -1;
        s->bad_calls = cJSON_IsTrue(cJSON_GetObjectItem(b, "rejected"))
                           ? s->bad_calls + 1
                           : 0;
        if (cJSON_IsTrue(cJSON_GetObjectItem(b, "blocked")))
            s->blocked = 1;
    }
    return FO_OK;
}

static int apply(struct run *r, const char *actor, const char *kind,
                 int64_t seq, int64_t parent, const cJSON *b,
                 struct fo_err *err)
{
    if (!strcmp(kind, "fact") || !strcmp(kind, "fact_forgotten"))
        return FO_OK; /* a session's (the remember and forget tools) */
    if (!strcmp(kind, "compaction")) { /* under the session, seen live */
        r->compacted = 1;
        r->calls++;
        return FO_OK;
    }
    r->last_seq = seq;
    if (!strcmp(kind, "route")) {
        const struct orch_lane *ln =
            orch_roster_find(orch_roster(r->e->o), str_of(b, "lane"));
        if (!ln)
            return bad(err, seq, "a route to an unknown lane");
        r->lane = ln->name;
        snprintf(r->lane_by, sizeof(r->lane_by), "%s",
                 str_of(b, "by") ? str_of(b, "by") : "");
        if (!strcmp(r->lane_by, "classifier"))
            r->calls++;
        r->route_seq = seq;
        r->phase = PH_PLAN;
    } else if (!strcmp(kind, "classifier_attempt")) {
        attempts_note(&r->cls, b);
        r->calls++;
    } else if (!strcmp(kind, "coordinator_attempt")) {
        attempts_note(&r->coord, b);
        r->calls++;
    } else if (!strcmp(kind, "plan")) {
        return apply_plan(r, seq, actor, b, err);
    } else if (!strcmp(kind, "task")) {
        return apply_task(r, seq, parent, b, err);
    } else if (!strcmp(kind, "result")) {
        return apply_result(r, seq, parent, b, err);
    } else if (!strcmp(kind, "tool_call") || !strcmp(kind, "tool_result") ||
               !strcmp(kind, "tool_rescue")) {
        return apply_conv(r, kind, seq, parent, b, err);
    } else if (!strcmp(kind, "validator_attempt")) {
        long t = task_by_result(r, parent);
        if (t < 0)
            return bad(err, seq, "a validator attempt without its result");
        attempts_note(&r->t[t].val, b);
        r->calls++;
    } else if (!strcmp(kind, "verdict")) {
        return apply_verdict(r, seq, parent, b, err);
    } else if (!strcmp(kind, "tier_escalation")) {
        return apply_escalation(r, seq, parent, b, err);
    } else if (!strcmp(kind, "refusal") || !strcmp(kind, "skip")) {
        long t = task_by_id(r, str_of(b, "id"));
        if (t < 0)
            return bad(err, seq, "a refusal or skip of no task");
        struct task *s = &r->t[t];
        s->result_seq = seq;
        if (kind[0] == 'r') {
            s->st = TS_REFUSED;
        } else {
            s->st = TS_SKIPPED;
            s->dup_of = task_by_id(r, str_of(b, "duplicate_of"));
            if (s->dup_of < 0)
                return bad(err, seq, "a skip of no task");
        }
    } else if (!strncmp(kind, "gate_", 5) && (!strcmp(kind, "gate_requested") ||
                                              !strcmp(kind, "gate_approved") ||
                                              !strcmp(kind, "gate_edited") ||
                                              !strcmp(kind, "gate_rejected") ||
                                              !strcmp(kind, "gate_expired"))) {
        return apply_gate(r, kind, seq, parent, b, err);
    } else if (!strcmp(kind, "session_started")) {
        if (r->creating_session) {
            r->creating_session = 0;
            r->session_start = seq;
        }
    } else if (!strcmp(kind, "turn")) {
        r->turn_seq = seq;
        if (r->phase == PH_CONTEXT)
            r->phase = r->after_context;
    } else if (!strcmp(kind, "budget")) {
        r->budget_seq = seq;
        r->budget_spent = 1;
        if (!r->halt) {
            r->halt = H_BUDGET;
            const char *why = str_of(b, "reason");
            r->halt_reason = !why                            ? "max_model_calls"
                             : !strcmp(why, "cancelled")     ? "cancelled"
                             : !strcmp(why, "shutdown")      ? "shutdown"
                             : !strcmp(why, "max_seconds")   ? "max_seconds"
                             : !strcmp(why, "gate_rejected") ? "gate_rejected"
                             : !strcmp(why, "gate_expired")  ? "gate_expired"
                                                            : "max_model_calls";
        }
    } else if (!strcmp(kind, "answer")) {
        const char *a = str_of(b, "answer"), *m = str_of(b, "model");
        free(r->answer);
        r->answer = orch_strdup(a ? a : "");
        if (!r->answer)
            return nomem(err);
        snprintf(r->answer_model, sizeof(r->answer_model), "%s", m ? m : "");
        if (m && !r->budget_spent)
            r->calls++;
        cJSON_Delete(r->coverage);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "coverage");
        r->coverage = c ? cJSON_Duplicate(c, 1) : NULL;
        r->answer_seq = seq;
        r->phase = PH_END;
    } else if (!strcmp(kind, "error")) {
        const char *msg = str_of(b, "error");
        if (!r->failed_rc) {
            r->failed_rc = FO_E_INTERNAL;
            fo_err_set(&r->err, FO_E_INTERNAL, "%s", msg ? msg : "error");
        }
        r->phase = PH_END;
    }
    /* request, stop, resume and entries of other kinds change nothing */
    return FO_OK;
}

/* ---- failure, the end, the result object -------------------------------- */

static void fail(struct run *r, int rc, const struct fo_err *err)
{
    if (r->failed_rc || r->ended)
        return;
    r->failed_rc = rc;
    if (err)
        r->err = *err;
    r->err.code = rc;
    abandon(r);
    if (rc == FO_E_RUN_ELSEWHERE)
        r->lease_lost = 1; /* another daemon runs it now: nothing written */
    /* a leased run whose write failed on the database (a lost
     * connection): no error on record, it stops here and is resumed from
     * its entries by whichever daemon claims its lease */
    int resume_later = r->leased && (rc == FO_E_IO || rc == FO_E_STORE_DOWN);
    if (resume_later)
        elog(r->e, "run %lld: stopped by a storage error, to be resumed: %s",
             (long long)r->id, r->err.msg);
    if (r->id < 0 || r->e->stopping || r->lease_lost || resume_later) {
        r->phase = PH_END;
        return;
    }
    if (error_write(r) == FO_OK)
        return; /* its landing moves the run to its end */
    r->phase = PH_END;
}

/* Witnesses the run's failure (r->err) as its `error` entry. */
static int error_write(struct run *r)
{
    struct fo_err ignore;
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddStringToObject(o, "error", r->err.msg) &&
        cJSON_AddStringToObject(o, "code", fo_code_name(r->failed_rc)))
        return witness(r, "loop", "error", r->id, o, -1, 0, 0, &ignore);
    cJSON_Delete(o);
    return FO_E_NOMEM;
}

#define END_RETRY_MS 1000

static void on_end_retry(evutil_socket_t fd, short what, void *arg)
{
    struct run *r = arg;
    (void)fd, (void)what;
    r->busy = 0;
    if (r->e->stopping || error_write(r) != FO_OK)
        r->phase = PH_END; /* stopping: resumed on the next start */
    step(r);
}

/* A run's error entry could not be written (the store is down, the disk
 * full): the run keeps its place in memory, says so, and tries again each
 * second until the entry is on record (or the daemon stops), so it never
 * shows as running on a ledger it has left. 1 when a retry was armed. */
static int end_retry(struct run *r, int rc)
{
    if (!(rc == FO_E_IO || rc == FO_E_STORE_DOWN) || r->e->stopping ||
        r->leased)
        return 0;
    if (!r->end_retry &&
        !(r->end_retry = evtimer_new(r->e->cfg.base, on_end_retry, r)))
        return 0;
    struct timeval tv = {END_RETRY_MS / 1000, (END_RETRY_MS % 1000) * 1000};
    if (evtimer_add(r->end_retry, &tv) != 0)
        return 0;
    if (!r->end_retries++)
        elog(r->e,
             "run %lld: failed, and its error entry cannot be written yet "
             "(%s): trying again each second",
             (long long)r->id, r->err.msg);
    r->busy = 1;
    return 1;
}

static cJSON *tasks_json(const struct run *r, int *all_pass, int *unjudged)
{
    cJSON *a = cJSON_CreateArray();
    *all_pass = 1;
    *unjudged = 0;
    for (size_t i = 0; a && r->p && r->t && i < r->p->n; i++) {
        size_t t = r->p->order[i];
        const struct task *s = &r->t[t];
        const struct orch_task *k = &r->p->tasks[t];
        const char *state = s->st == TS_REFUSED   ? "refused"
                            : s->st == TS_SKIPPED ? "skipped"
                            : s->st == TS_PENDING ? "not_run"
                            : s->pass             ? "passed"
                            : s->unjudged         ? "unjudged"
                                                  : "failed";
        *all_pass &= s->pass;
        *unjudged += s->unjudged;
        cJSON *e = cJSON_CreateObject();
        int done = s->st != TS_PENDING && s->st != TS_REFUSED &&
                   s->st != TS_SKIPPED && s->result_seq >= 0;
        if (!e || !cJSON_AddStringToObject(e, "id", k->id) ||
            !cJSON_AddStringToObject(e, "agent", k->agent) ||
            !cJSON_AddStringToObject(e, "state", state) ||
            !cJSON_AddBoolToObject(e, "pass", s->pass) ||
            (done && (!cJSON_AddStringToObject(e, "model", s->model) ||
                      !fo_json_add_int(e, "result_seq", s->result_seq) ||
                      (s->verdict_seq >= 0 &&
                       !fo_json_add_int(e, "verdict_seq", s->verdict_seq))))) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

/* plan_run's own fields, as before the engine: {"waves", "results":
 * [{"id", "agent", "ok", "model", "task_seq", "seq", "output"} or a
 * refused one], "refused": [ids], "ok": every task ran ok}. */
static int plan_run_fields(const struct run *r, cJSON *res)
{
    cJSON *pj = orch_plan_json(r->p);
    cJSON *waves =
        pj ? cJSON_DetachItemFromObjectCaseSensitive(pj, "waves") : NULL;
    cJSON_Delete(pj);
    if (!waves)
        return FO_E_NOMEM;
    cJSON_AddItemToObject(res, "waves", waves);
    cJSON *results = cJSON_AddArrayToObject(res, "results");
    cJSON *refused = cJSON_AddArrayToObject(res, "refused");
    if (!results || !refused)
        return FO_E_NOMEM;
    int all_ok = 1;
    for (size_t i = 0; i < r->p->n; i++) {
        size_t t = r->p->order[i];
        const struct task *s = &r->t[t];
        const struct orch_task *k = &r->p->tasks[t];
        int ran = s->st != TS_REFUSED && s->st != TS_SKIPPED &&
                  s->st != TS_PENDING && s->result_seq >= 0;
        const struct task *src =
            s->st == TS_SKIPPED && s->dup_of >= 0 ? &r->t[s->dup_of] : s;
        int ok = src->ran_ok && s->st != TS_REFUSED && s->st != TS_PENDING;
        all_ok &= ok;
        size_t n = s->output
                       ? orch_utf8_prefix(s->output, s->output_len, 64u * 1024u)
                       : 0;
        cJSON *o = cJSON_CreateObject();
        char *cut = malloc(n + 1);
        if (cut) {
            if (n)
                memcpy(cut, s->output, n);
            cut[n] = '\0';
        }
        int good =
            o && cut && cJSON_AddStringToObject(o, "id", k->id) &&
            cJSON_AddStringToObject(o, "agent", k->agent) &&
            cJSON_AddBoolToObject(o, "ok", ok) &&
            (s->st == TS_REFUSED
                 ? cJSON_AddTrueToObject(o, "refused") != NULL
                 : cJSON_AddStringToObject(o, "model", src->model) &&
                       (!ran || fo_json_add_int(o, "task_seq", s->task_seq))) &&
            fo_json_add_int(o, "seq", s->result_seq) &&
            cJSON_AddStringToObject(o, "output", cut) &&
            (n == (s->output ? s->output_len : 0) ||
             cJSON_AddTrueToObject(o, "output_truncated"));
        free(cut);
        if (o)
            cJSON_AddItemToArray(results, o);
        if (!good)
            return FO_E_NOMEM;
        if (s->st == TS_REFUSED) {
            cJSON *x = cJSON_CreateString(k->id);
            if (!x)
                return FO_E_NOMEM;
            cJSON_AddItemToArray(refused, x);
        }
    }
    cJSON_DeleteItemFromObjectCaseSensitive(res, "ok");
    return cJSON_AddBoolToObject(res, "ok", all_ok) ? FO_OK : FO_E_NOMEM;
}

static cJSON *result_object(struct run *r, struct fo_err *err)
{
    int64_t size = 0;
    uint8_t root[32];
    char hex[65];
    int rc = ledger_tree_head(r->e->cfg.ledger, &size, root, err);
    if (rc)
        return NULL;
    fo_hex(root, 32, hex);
    cJSON *res = cJSON_CreateObject();
    if (!res) {
        nomem(err);
        return NULL;
    }
    int ok = 1;
    if (!strcmp(r->via, "plan")) {
        cJSON *pj = orch_plan_json(r->p);
        ok = pj && cJSON_AddItemToObject(res, "plan", pj) &&
             cJSON_AddStringToObject(res, "lane", r->lane) &&
             cJSON_AddStringToObject(res, "lane_by", r->lane_by) &&
             cJSON_AddStringToObject(res, "model", r->plan_model) &&
             fo_json_add_int(res, "attempts", r->coord.n + 1) &&
             fo_json_add_int(res, "request_seq", r->id) &&
             fo_json_add_int(res, "plan_seq", r->plan_seq);
        if (!ok) {
            cJSON_Delete(res);
            nomem(err);
            return NULL;
        }
        return res;
    }
    int all_pass = 0, unjudged = 0;
    cJSON *tasks = tasks_json(r, &all_pass, &unjudged);
    const char *answer =
        r->budget_spent ? stop_answer(r) : (r->answer ? r->answer : "");
    ok = tasks && cJSON_AddStringToObject(res, "answer", answer) &&
         cJSON_AddStringToObject(res, "checkpoint", hex) &&
         fo_json_add_int(res, "request_seq", r->id) &&
         fo_json_add_int(res, "answer_seq", r->answer_seq) &&
         (r->plan_seq < 0
              ? cJSON_AddNullToObject(res, "plan_seq") != NULL
              : fo_json_add_int(res, "plan_seq", r->plan_seq) != NULL) &&
         cJSON_AddStringToObject(res, "lane", r->lane ? r->lane : "") &&
         cJSON_AddBoolToObject(res, "ok",
                               !r->budget_spent && r->p && all_pass) &&
         fo_json_add_int(res, "unjudged", unjudged) &&
         cJSON_AddBoolToObject(res, "models",
                               r->e->o->models != NULL || r->e->o->argv) &&
         cJSON_AddBoolToObject(res, "budget_spent", r->budget_spent) &&
         (!r->budget_spent ||
          cJSON_AddStringToObject(res, "budget_reason", r->halt_reason)) &&
         fo_json_add_int(res, "model_calls", r->calls) &&
         fo_json_add_int(res, "escalations", r->escalations) &&
         (r->budget_spent || !r->coverage
              ? cJSON_AddNullToObject(res, "coverage") != NULL
              : cJSON_AddItemToObject(res, "coverage",
                                      cJSON_Duplicate(r->coverage, 1)));
    if (ok) {
        cJSON_AddItemToObject(res, "tasks", tasks);
        tasks = NULL;
    }
    if (ok && !strcmp(r->via, "plan_run") && r->p)
        ok = plan_run_fields(r, res) == FO_OK;
    cJSON_Delete(tasks);
    if (!ok) {
        cJSON_Delete(res);
        nomem(err);
        return NULL;
    }
    return res;
}

/* The run is over (or stopped): its caller hears, and it leaves memory. */
static void run_end(struct run *r)
{
    struct orch_engine *e = r->e;
    r->ended = 1;
    if (r->leased && !r->lease_lost) {
        /* over: the lease goes; stopped (a shutdown, a lost database):
         * it expires now, so a live daemon resumes the run at once */
        struct fo_err lerr;
        if (ledger_lease_release(e->cfg.ledger, r->id, e->instance,
                                 r->end_on_record, &lerr) != FO_OK)
            elog(e, "run %lld: its lease stays until it expires: %s",
                 (long long)r->id, lerr.msg);
    }
    if (r->id >= 0 && r->resumable)
        elog(e, "run %lld: %s (%d model call%s, %lld ms)", (long long)r->id,
             r->failed_rc                ? "failed"
             : r->halt == H_SHUTDOWN     ? "stopped, to resume on the next "
                                           "start"
             : r->halt && r->halt_reason ? r->halt_reason
                                         : "done",
             r->calls, r->calls == 1 ? "" : "s", (long long)elapsed_ms(r));
    orch_run_done_fn done = r->done;
    void *arg = r->arg;
    struct fo_err err = r->err;
    int rc = r->failed_rc;
    cJSON *out = NULL;
    if (!rc && r->halt == H_SHUTDOWN)
        rc = fo_err_set(&err, FO_E_DRAINING,
                        "the daemon is stopping: run %lld will resume on the "
                        "next start",
                        (long long)r->id);
    if (!rc && done) {
        out = result_object(r, &err);
        if (!out)
            rc = err.code ? err.code : FO_E_NOMEM;
    }
    run_unlink(r);
    run_free(r);
    if (done)
        done(arg, rc, out, &err);
    else
        cJSON_Delete(out);
    if (e->stopping && !e->runs && e->stopped) {
        if (e->grace_ev)
            event_del(e->grace_ev);
        void (*fn)(void *) = e->stopped;
        e->stopped = NULL;
        fn(e->stopped_arg);
    }
}

/* ---- step: what the state asks for next --------------------------------- */

static void step(struct run *r)
{
    if (r->ended)
        return;
    if (r->stepping) {
        r->dirty = 1;
        return;
    }
    r->stepping = 1;
    if (r->e->poll_live && r->id >= 0 && !r->halt) {
        /* a run of the blocking host: its cancel flag and the process's
         * stop, seen at each step (and by the host's poll in between) */
        if (atomic_load(&r->e->poll_live->cancel)) {
            char where[ORCH_NAME_MAX + 32];
            step_name(r, where, sizeof(where));
            set_halt(r, H_CANCEL, "cancelled", where);
        } else if (orch_runs_stopping(r->e->o)) {
            set_halt(r, H_BUDGET, "shutdown", "shutdown");
        }
    }
    do {
        r->dirty = 0;
        if (r->failed_rc || r->phase == PH_END) {
            /* wait for what is in flight, then end */
            int busy = r->writes > 0 || r->busy || r->eff;
            for (size_t i = 0; !busy && r->t && i < r->p->n; i++)
                busy = r->t[i].busy;
            if (!busy) {
                r->stepping = 0;
                run_end(r);
                return;
            }
            break;
        }
        if (r->halt) {
            halt_step(r);
            if (r->ended) {
                r->stepping = 0;
                run_end(r);
                return;
            }
            continue;
        }
        if (r->id < 0)
            break; /* the request entry is not committed yet */
        if (r->phase == PH_WAVES) {
            waves_step(r);
            continue;
        }
        if (r->busy)
            break;
        if (r->phase == PH_CONTEXT)
            context_step(r);
        else if (r->phase == PH_ROUTE)
            route_step(r);
        else if (r->phase == PH_PLAN)
            plan_step(r);
        else if (r->phase == PH_SYNTH)
            synth_step(r);
    } while (r->dirty);
    r->stepping = 0;
}

/* ---- the engine --------------------------------------------------------- */

static void on_lease_tick(evutil_socket_t fd, short what, void *arg);
static void on_lease_done(void *arg);

int orch_engine_create(const struct orch *o,
                       const struct orch_engine_config *cfg,
                       struct orch_engine **out, struct fo_err *err)
{
    if (!o || !cfg || !cfg->base || !cfg->ledger)
        return fo_err_set(err, FO_E_INVALID, "engine: no loop or ledger");
    if (cfg->max_runs > ORCH_ENGINE_RUNS_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_runs: must be 1..%d",
                          ORCH_ENGINE_RUNS_MAX);
    struct orch_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return nomem(err);
    e->o = o;
    e->cfg = *cfg;
    if (!e->cfg.max_runs)
        e->cfg.max_runs = ORCH_ENGINE_RUNS_DEFAULT;
    if (pthread_mutex_init(&e->mu, NULL) != 0) {
        free(e);
        return fo_err_set(err, FO_E_INTERNAL, "engine: no mutex");
    }
    e->wake = event_new(cfg->base, -1, EV_PERSIST, on_wake, e);
    e->gate_ev = evtimer_new(cfg->base, on_gate_tick, e);
    e->leases = cfg->lease_ms > 0 && ledger_leases(cfg->ledger);
    int rc = FO_OK;
    if (e->leases)
        rc = orch_lease_worker_create(cfg->base, ledger_dir(cfg->ledger),
                                      on_lease_done, e, &e->lw, err);
    if (e->leases && !rc) {
        int every = cfg->lease_ms / 3 > 50 ? cfg->lease_ms / 3 : 50;
        struct timeval tv = {every / 1000, (every % 1000) * 1000};
        e->lease_ev = event_new(cfg->base, -1, EV_PERSIST, on_lease_tick, e);
        if (e->lease_ev && event_add(e->lease_ev, &tv) != 0) {
            event_free(e->lease_ev);
            e->lease_ev = NULL;
        }
    }
    int64_t count = 0;
    struct fo_err ignore;
    if (ledger_count(cfg->ledger, &count, &ignore) != FO_OK)
        count = 0; /* decisions already on record come in by replay */
    e->gate_cursor = count;
    if (!rc && (!e->wake || !e->gate_ev || (e->leases && !e->lease_ev)))
        rc = nomem(err);
    if (!rc && orch_mcp_servers(o))
        rc = orch_mcpc_create(orch_mcp_servers(o), cfg->base, &e->mcpc, err);
    if (rc) {
        if (e->wake)
            event_free(e->wake);
        if (e->gate_ev)
            event_free(e->gate_ev);
        if (e->lease_ev)
            event_free(e->lease_ev);
        orch_lease_worker_free(e->lw);
        pthread_mutex_destroy(&e->mu);
        free(e);
        return rc;
    }
    *out = e;
    return FO_OK;
}

void orch_engine_free(struct orch_engine *e)
{
    if (!e)
        return;
    orch_lease_worker_free(e->lw); /* a round trip under way ends first */
    e->lw = NULL;
    while (e->runs) {
        struct run *r = e->runs;
        abandon(r);
        run_unlink(r);
        run_free(r);
    }
    orch_mcpc_free(e->mcpc);
    orch_work_free(e->work); /* waits for a tool still running */
    if (e->disk_ev)
        event_free(e->disk_ev);
    /* writes still queued belong to runs that are gone */
    pthread_mutex_lock(&e->mu);
    struct wr *w = e->doneq;
    e->doneq = NULL;
    pthread_mutex_unlock(&e->mu);
    while (w) {
        struct wr *n = w->next;
        if (w->landed) {
            struct fo_err err;
            fo_err_set(&err, FO_E_DRAINING, "the engine stopped");
            w->landed(w->landed_arg, NULL, FO_E_DRAINING, -1, &err);
        }
        wr_free(w);
        w = n;
    }
    struct gate_off *off = e->offq;
    e->offq = NULL;
    while (off) {
        struct gate_off *n = off->next;
        struct fo_err err;
        fo_err_set(&err, FO_E_DRAINING, "the engine stopped");
        if (off->done)
            off->done(off->arg, FO_E_DRAINING, NULL, &err);
        gate_off_free(off);
        off = n;
    }
    event_free(e->gate_ev);
    if (e->lease_ev)
        event_free(e->lease_ev);
    if (e->stop_ev)
        event_free(e->stop_ev);
    if (e->grace_ev)
        event_free(e->grace_ev);
    event_free(e->wake);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

size_t orch_engine_active(const struct orch_engine *e)
{
    return e ? e->n_runs : 0;
}

int orch_engine_metrics(const struct orch_engine *e, struct fo_buf *b)
{
    size_t waiting = 0;
    for (const struct run *r = e->runs; r; r = r->next)
        for (size_t w = 0; r->g && r->p && w < r->p->n_waves; w++)
            waiting += r->g[w].st == G_PENDING;
    int rc = fo_buf_printf(
        b,
        "# HELP forum_runs_in_flight Runs in memory: running or waiting.\n"
        "# TYPE forum_runs_in_flight gauge\n"
        "forum_runs_in_flight %zu\n"
        "# HELP forum_runs_started_total Runs started or resumed here.\n"
        "# TYPE forum_runs_started_total counter\n"
        "forum_runs_started_total %llu\n"
        "# HELP forum_gates_waiting Approval gates waiting for a decision.\n"
        "# TYPE forum_gates_waiting gauge\n"
        "forum_gates_waiting %zu\n"
        "# HELP forum_model_calls_total Model calls (providers and --cmd; "
        "not the stub) by outcome.\n"
        "# TYPE forum_model_calls_total counter\n"
        "forum_model_calls_total{outcome=\"ok\"} %llu\n"
        "forum_model_calls_total{outcome=\"error\"} %llu\n"
        "# HELP forum_model_call_seconds Model call latency, retries "
        "included.\n"
        "# TYPE forum_model_call_seconds histogram\n",
        e->n_runs, (unsigned long long)e->m_runs_started, waiting,
        (unsigned long long)e->m_calls_ok,
        (unsigned long long)e->m_calls_failed);
    unsigned long long cum = 0;
    for (size_t i = 0; i < 10; i++) {
        cum += e->m_lat[i];
        if (i < 9)
            rc |= fo_buf_printf(b,
                                "forum_model_call_seconds_bucket{le=\"%g\"} "
                                "%llu\n",
                                lat_bounds[i], cum);
    }
    rc |= fo_buf_printf(b,
                        "forum_model_call_seconds_bucket{le=\"+Inf\"} %llu\n"
                        "forum_model_call_seconds_sum %.6f\n"
                        "forum_model_call_seconds_count %llu\n"
                        "# HELP forum_model_tokens_total Tokens of model "
                        "calls as the providers reported them (their usage "
                        "objects), by direction.\n"
                        "# TYPE forum_model_tokens_total counter\n"
                        "forum_model_tokens_total{direction=\"input\"} %llu\n"
                        "forum_model_tokens_total{direction=\"output\"} "
                        "%llu\n",
                        cum, e->m_lat_sum, cum,
                        (unsigned long long)e->m_tokens_in,
                        (unsigned long long)e->m_tokens_out);
    return rc ? FO_E_NOMEM : FO_OK;
}

/* Makes sure this engine holds its process's run lock in the ledger's dir
 * (DIR/runs/<instance>.lock): a run's request names the instance, and
 * orch_run_get reads "running" while the lock is held. */
/* The limits a turn ran with, all of them, so a resumed run uses the same
 * whatever forum.json says by then. */
static int limits_add(cJSON *b, const struct orch_ctx_limits *l)
{
    cJSON *c = cJSON_AddObjectToObject(b, "context");
    return c && fo_json_add_int(c, "max_total_tokens", l->total) &&
           fo_json_add_int(c, "max_request_tokens", l->request) &&
           fo_json_add_int(c, "max_history_tokens", l->history) &&
           fo_json_add_int(c, "max_facts_tokens", l->facts) &&
           fo_json_add_int(c, "max_tool_results_tokens", l->tools) &&
           (!l->summary || cJSON_AddStringToObject(c, "compaction", "summary"));
}

static int hold_instance(struct orch_engine *e, struct fo_err *err)
{
    if (e->have_instance)
        return FO_OK;
    int rc = orch_runs_hold(e->o, ledger_dir(e->cfg.ledger), e->instance,
                            &e->live, err);
    if (!rc)
        e->have_instance = 1;
    return rc;
}

static struct run *run_new(struct orch_engine *e, const char *via)
{
    struct run *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    e->m_runs_started++;
    r->e = e;
    r->id = -1;
    r->route_seq = r->plan_seq = r->budget_seq = r->answer_seq = -1;
    r->session_start = r->turn_seq = -1;
    r->last_seq = -1;
    r->ws_fd = -1;
    r->resumable = 1;
    snprintf(r->via, sizeof(r->via), "%s", via);
    r->phase = PH_ROUTE;
    r->t0_us = now_us();
    r->next = e->runs;
    if (e->runs)
        e->runs->prev = r;
    e->runs = r;
    e->n_runs++;
    return r;
}

/* Runs that go past a plan (a `plan` request only plans). */
static int is_run_via(const char *via)
{
    return strcmp(via, "plan") != 0;
}

static int via_valid(const char *via)
{
    return via && (!strcmp(via, "submit") || !strcmp(via, "run_start") ||
                   !strcmp(via, "plan_run") || !strcmp(via, "plan"));
}

/* The engine's sync host marks its runs as not resumable: the process
 * that runs them goes away with them (the CLI, `forum mcp`). */
static int start_run(struct orch_engine *e, const struct orch_run_req *req,
                     int resumable, orch_run_started_fn started,
                     orch_run_done_fn done, void *arg, struct fo_err *err)
{
    if (!via_valid(req->via))
        return fo_err_set(err, FO_E_INVALID, "via: not a kind of run");
    int is_plan_run = !strcmp(req->via, "plan_run");
    const char *text = req->request;
    if (is_plan_run && (!text || !*text))
        text = "(a plan given to plan_run)";
    int rc = orch_submit_check(text, &req->opts, err);
    if (rc)
        return rc;
    struct orch_plan *check = NULL;
    if (is_plan_run) { /* a bad plan is refused before anything is written */
        if (!req->plan)
            return fo_err_set(err, FO_E_INVALID, "plan: required");
        rc = orch_plan_compile(req->plan, orch_roster(e->o), &check, err);
        orch_plan_free(check);
        if (rc)
            return rc;
    }
    rc = orch_gate_policy_check(req->opts.gates, orch_roster(e->o), now_ms(),
                                err);
    if (rc)
        return rc;
    struct orch_ctx_limits lim;
    orch_ctx_limits_default(&lim);
    if (req->opts.session && !orch_session_name_ok(req->opts.session))
        return fo_err_set(err, FO_E_INVALID, "session: 1..%d of [A-Za-z0-9._-]",
                          ORCH_SESSION_NAME_MAX);
    if ((rc = orch_ctx_limits_parse(orch_context_defaults(e->o), &lim, err)) ||
        (rc = orch_ctx_limits_parse(req->opts.context, &lim, err)))
        return rc;
    cJSON *gates = NULL;
    if (is_run_via(req->via) &&
        (rc =
             orch_gate_policy_merge(e->o->gates, req->opts.gates, &gates, err)))
        return rc;
    if (e->stopping) {
        cJSON_Delete(gates);
        return fo_err_set(err, FO_E_DRAINING, "the daemon is stopping");
    }
    if (e->n_runs >= e->cfg.max_runs) {
        cJSON_Delete(gates);
        return fo_err_set(err, FO_E_BUSY, "%zu runs are in progress (max_runs)",
                          e->n_runs);
    }
    int is_run = strcmp(req->via, "plan") != 0;
    if (is_run) {
        rc = hold_instance(e, err);
        if (rc) {
            cJSON_Delete(gates);
            return rc;
        }
    }
    struct run *r = run_new(e, req->via);
    if (!r) {
        cJSON_Delete(gates);
        return nomem(err);
    }
    r->gates = gates;
    r->lim = lim;
    int with_session = req->opts.session && is_run_via(req->via);
    r->resumable = resumable;
    r->request = orch_strdup(text);
    r->given = is_plan_run ? cJSON_Duplicate(req->plan, 1) : NULL;
    int calls = req->opts.max_model_calls;
    r->max_calls = calls ? calls : ORCH_SUBMIT_CALLS_DEFAULT;
    r->max_seconds = req->opts.max_seconds;
    r->started = started;
    r->done = done;
    r->arg = arg;
    if (is_plan_run)
        r->phase = PH_PLAN;
    if (with_session) {
        r->session = orch_strdup(req->opts.session);
        r->after_context = r->phase;
        r->phase = PH_CONTEXT;
    }
    cJSON *b = cJSON_CreateObject();
    int ok =
        r->request && (!is_plan_run || r->given) && b &&
        cJSON_AddStringToObject(b, "request", r->request) &&
        cJSON_AddStringToObject(b, "via", req->via) &&
        (!is_run || cJSON_AddStringToObject(b, "instance", e->instance)) &&
        (!is_run || resumable || cJSON_AddFalseToObject(b, "resumable")) &&
        (!calls || fo_json_add_int(b, "max_model_calls", calls)) &&
        (!r->max_seconds ||
         fo_json_add_int(b, "max_seconds", r->max_seconds)) &&
        (!gates ||
         cJSON_AddItemToObject(b, "gates", cJSON_Duplicate(gates, 1))) &&
        (!with_session ||
         (r->session && cJSON_AddStringToObject(b, "session", r->session))) &&
        (!with_session || limits_add(b, &lim));
    if (!ok) {
        cJSON_Delete(b);
        run_unlink(r);
        run_free(r);
        return nomem(err);
    }
    rc = witness(r, "client", "request", LEDGER_NO_PARENT, b, -1, 0, 0, err);
    if (rc) {
        run_unlink(r);
        run_free(r);
    }
    return rc;
}

int orch_engine_start(struct orch_engine *e, const struct orch_run_req *req,
                      orch_run_started_fn started, orch_run_done_fn done,
                      void *arg, struct fo_err *err)
{
    return start_run(e, req, 1, started, done, arg, err);
}

/* The step a run is at, for the record of where a cancel stopped it. */
static void step_name(const struct run *r, char *out, size_t size)
{
    switch (r->phase) {
    case PH_ROUTE:
        snprintf(out, size, "%s", r->eff ? "classifier" : "route");
        break;
    case PH_PLAN:
        snprintf(out, size, "%s", r->given ? "plan" : "coordinator");
        break;
    case PH_WAVES:
        snprintf(out, size, "wave %zu", r->wave);
        break;
    default:
        snprintf(out, size, "synthesizer");
        break;
    }
}

int orch_engine_cancel(struct orch_engine *e, int64_t run)
{
    struct run *r = run_find(e, run);
    if (!r || r->ended || r->phase == PH_END || r->failed_rc)
        return FO_E_NOT_FOUND;
    char where[ORCH_NAME_MAX + 32];
    step_name(r, where, sizeof(where));
    set_halt(r, H_CANCEL, "cancelled", where);
    step(r);
    return FO_OK;
}

/* ---- a human's decision on a gate of a run here ------------------------- */

static void gate_off_committed(void *arg)
{
    struct gate_off *g = arg;
    struct orch_engine *e = g->e;
    pthread_mutex_lock(&e->mu);
    g->next = e->offq;
    e->offq = g;
    pthread_mutex_unlock(&e->mu);
    event_active(e->wake, EV_READ, 0);
}

static void gate_off_landed(struct orch_engine *e, struct gate_off *g)
{
    struct fo_err err = g->a.err;
    int rc = g->a.rc;
    cJSON *o = NULL;
    if (rc == FO_E_EXISTS)
        rc = gate_lost(g->d.run, g->d.wave, &g->a.err, &err);
    if (!rc)
        rc = orch_gate_first(e->cfg.ledger, &g->d, g->gate_seq, g->a.entry.seq,
                             &err);
    if (!rc && !(o = orch_gate_reply(&g->d, g->a.entry.seq)))
        rc = nomem(&err);
    if (g->done)
        g->done(g->arg, rc, o, rc ? &err : NULL);
    else
        cJSON_Delete(o);
    gate_off_free(g);
}

static int gate_offline(struct orch_engine *e,
                        const struct orch_gate_decision *d,
                        orch_run_done_fn done, void *arg, struct fo_err *err)
{
    int64_t gseq = -1;
    int rc = orch_gate_check(e->cfg.ledger, d, &gseq, err);
    if (rc)
        return rc;
    struct gate_off *g = calloc(1, sizeof(*g));
    cJSON *o = g ? orch_gate_decision_json(d) : NULL;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (!o || fo_json_canon(o, &b, err)) {
        fo_buf_release(&b);
        cJSON_Delete(o);
        free(g);
        return nomem(err);
    }
    g->e = e;
    g->held = o; /* the decision's strings live on in its body object */
    g->d = *d;
    g->d.approver = str_of(o, "approver");
    g->d.note = str_of(o, "note");
    g->d.reason = str_of(o, "reason");
    g->d.edits = cJSON_GetObjectItemCaseSensitive(o, "edits");
    g->d.decision = orch_gate_kind(d->decision) + 5; /* approved... */
    g->body = fo_buf_detach(&b, &g->a.body_len);
    fo_buf_release(&b);
    g->a.actor = "human";
    g->a.kind = orch_gate_kind(d->decision);
    g->a.sole_kinds = orch_gate_decided_kinds;
    g->a.parent = gseq;
    g->a.body = g->body;
    g->gate_seq = gseq;
    g->done = done;
    g->arg = arg;
    if (e->cfg.append) {
        rc = e->cfg.append(e->cfg.hook, &g->a, gate_off_committed, g, err);
        if (rc)
            gate_off_free(g);
        return rc;
    }
    ledger_append_batch(e->cfg.ledger, &g->a, 1, &g->a.err);
    gate_off_committed(g);
    return FO_OK;
}

/* A decision the store refused because another came first: the caller
 * hears gate_decided, naming the one that won (from the store's message). */
static int gate_lost(int64_t run, int64_t wave, const struct fo_err *why,
                     struct fo_err *err)
{
    return fo_err_set(err, FO_E_GATE_DECIDED,
                      "run %lld wave %lld: the gate was decided already (%s)",
                      (long long)run, (long long)wave,
                      why ? why->msg : "another decision came first");
}

struct gate_call {
    orch_run_done_fn done;
    void *arg;
    int64_t run, wave;
    char decision[16]; /* approved, edited, rejected */
};

static void gate_landed(void *arg, struct run *r, int rc, int64_t seq,
                        const struct fo_err *err)
{
    struct gate_call *c = arg;
    struct fo_err e2;
    cJSON *o = NULL;
    if (rc == FO_E_EXISTS) /* the store saw another decision first */
        rc = gate_lost(c->run, c->wave, err, &e2), err = &e2;
    if (!rc && r && r->g && r->g[c->wave].decided_seq != seq)
        rc = fo_err_set(&e2, FO_E_GATE_DECIDED,
                        "run %lld wave %lld: another decision (seq %lld) "
                        "came first",
                        (long long)c->run, (long long)c->wave,
                        (long long)r->g[c->wave].decided_seq),
        err = &e2;
    if (!rc) {
        o = cJSON_CreateObject();
        if (!o || !fo_json_add_int(o, "run_seq", c->run) ||
            !fo_json_add_int(o, "wave", c->wave) ||
            !cJSON_AddStringToObject(o, "decision", c->decision) ||
            !fo_json_add_int(o, "seq", seq)) {
            cJSON_Delete(o);
            o = NULL;
            rc = fo_err_set(&e2, FO_E_NOMEM, NULL);
            err = &e2;
        }
    }
    if (c->done)
        c->done(c->arg, rc, o, rc ? err : NULL);
    else
        cJSON_Delete(o);
    free(c);
}

struct gate_child {
    int64_t gate, seq;
};

static int gate_child_entry(void *ctx, const struct ledger_entry *en)
{
    struct gate_child *c = ctx;
    if (en->parent == c->gate && !strncmp(en->kind, "gate_", 5) &&
        strcmp(en->kind, "gate_requested") != 0) {
        c->seq = en->seq;
        return 1;
    }
    return 0;
}

static int check_text(const char *name, const char *v, int required,
                      struct fo_err *err)
{
    if (!v)
        return required ? fo_err_set(err, FO_E_INVALID, "%s: required", name)
                        : FO_OK;
    size_t n = strlen(v);
    if (n == 0 || n > ORCH_GATE_TEXT_MAX || !fo_utf8_valid(v, n))
        return fo_err_set(err, FO_E_INVALID, "%s: must be text of 1..%d bytes",
                          name, ORCH_GATE_TEXT_MAX);
    return FO_OK;
}

int orch_gate_decision_check(const struct orch_gate_decision *d,
                             struct fo_err *err)
{
    if (!d->decision || (strcmp(d->decision, "approve") != 0 &&
                         strcmp(d->decision, "edit") != 0 &&
                         strcmp(d->decision, "reject") != 0))
        return fo_err_set(err, FO_E_INVALID,
                          "decision: approve, edit or reject");
    int rc = check_text("approver", d->approver, 1, err);
    if (!rc)
        rc = check_text("note", d->note, 0, err);
    if (!rc)
        rc = check_text("reason", d->reason, 0, err);
    if (!rc && d->decision[0] != 'e' && d->edits)
        rc = fo_err_set(err, FO_E_INVALID,
                        "edits: only for an edit (gate_edit)");
    if (!rc && d->decision[0] == 'e' && !d->edits)
        rc = fo_err_set(err, FO_E_INVALID, "edits: required for an edit");
    return rc;
}

cJSON *orch_gate_decision_json(const struct orch_gate_decision *d)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o && fo_json_add_int(o, "run", d->run) &&
             fo_json_add_int(o, "wave", d->wave) &&
             cJSON_AddStringToObject(o, "approver", d->approver) &&
             (!d->note || cJSON_AddStringToObject(o, "note", d->note)) &&
             (!d->reason || cJSON_AddStringToObject(o, "reason", d->reason)) &&
             (!d->edits ||
              cJSON_AddItemToObject(o, "edits", cJSON_Duplicate(d->edits, 1)));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

const char *orch_gate_kind(const char *decision)
{
    return decision[0] == 'a'   ? "gate_approved"
           : decision[0] == 'e' ? "gate_edited"
                                : "gate_rejected";
}

int orch_engine_gate(struct orch_engine *e, const struct orch_gate_decision *d,
                     orch_run_done_fn done, void *arg, struct fo_err *err)
{
    int rc = orch_gate_decision_check(d, err);
    if (rc)
        return rc;
    struct run *r = run_find(e, d->run);
    if (!r || r->ended) /* not here: the ledger's way */
        return gate_offline(e, d, done, arg, err);
    if (!r->g || r->phase < PH_WAVES || d->wave < 0 ||
        d->wave >= (int64_t)r->p->n_waves || r->g[d->wave].st < G_PENDING)
        return fo_err_set(
            err, FO_E_NO_GATE, "run %lld: no gate at wave %lld (waiting: %s)",
            (long long)d->run, (long long)d->wave,
            r->g && r->wave < r->p->n_waves && r->g[r->wave].st == G_PENDING
                ? "another wave"
                : "none");
    struct gate *g = &r->g[d->wave];
    if (g->st == G_PENDING && !g->writing) { /* decided elsewhere since? */
        struct gate_child c = {.gate = g->req_seq, .seq = -1};
        struct fo_err ignore;
        ledger_descendants(e->cfg.ledger, g->req_seq, 16, gate_child_entry, &c,
                           &ignore);
        if (c.seq >= 0) {
            gate_take(r, c.seq);
            r = run_find(e, d->run);
            g = r && r->g ? &r->g[d->wave] : NULL;
        }
    }
    if (!g || g->st != G_PENDING || g->writing)
        return fo_err_set(err, FO_E_GATE_DECIDED,
                          "run %lld wave %lld: the gate was decided already%s",
                          (long long)d->run, (long long)d->wave,
                          g && g->writing ? " (it expired)" : "");
    if (now_ms() >= g->deadline_ms) {
        step(r); /* it expires now */
        return fo_err_set(err, FO_E_GATE_DECIDED,
                          "run %lld wave %lld: the gate's deadline passed",
                          (long long)d->run, (long long)d->wave);
    }
    if (d->decision[0] == 'e' &&
        (rc = edits_check(r, (size_t)d->wave, d->edits, err)))
        return rc;
    struct gate_call *c = calloc(1, sizeof(*c));
    cJSON *o = c ? orch_gate_decision_json(d) : NULL;
    if (!o) {
        free(c);
        return nomem(err);
    }
    c->done = done;
    c->arg = arg;
    c->run = d->run;
    c->wave = d->wave;
    snprintf(c->decision, sizeof(c->decision), "%s",
             d->decision[0] == 'a'   ? "approved"
             : d->decision[0] == 'e' ? "edited"
                                     : "rejected");
    rc = witness_cb(r, "human", orch_gate_kind(d->decision), g->req_seq, o, -1,
                    0, 0, gate_landed, c, err);
    if (rc)
        free(c);
    return rc;
}

static void on_mcp_closed(void *arg)
{
    struct orch_engine *e = arg;
    e->mcp_closed = 1;
    if (e->stop_ev)
        event_active(e->stop_ev, EV_TIMEOUT, 0);
}

static void on_stop_check(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    if (!e->runs && e->stopped) {
        if (e->grace_ev)
            event_del(e->grace_ev);
        /* no run calls an MCP server any more: end their sessions first */
        if (!e->mcp_closed) {
            if (e->mcp_closing)
                return; /* on_mcp_closed comes back here */
            e->mcp_closing = 1;
            if (orch_mcpc_close(e->mcpc, on_mcp_closed, e))
                return;
            e->mcp_closed = 1;
        }
        void (*fn)(void *) = e->stopped;
        e->stopped = NULL;
        fn(e->stopped_arg);
    }
}

/* The grace is over: what is still in flight is abandoned (redone on
 * resume), and each run writes its stop. */
static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    struct run *r = e->runs;
    while (r) {
        struct run *next = r->next;
        if (!r->ended) {
            abandon(r);
            step(r);
        }
        r = next;
    }
}

void orch_engine_stop(struct orch_engine *e, void (*stopped)(void *arg),
                      void *arg)
{
    e->stopping = 1;
    int grace =
        e->cfg.stop_grace_ms ? e->cfg.stop_grace_ms : ORCH_ENGINE_STOP_GRACE_MS;
    if (!e->grace_ev)
        e->grace_ev = event_new(e->cfg.base, -1, 0, on_grace, e);
    if (e->grace_ev) {
        struct timeval tv = {grace / 1000, (grace % 1000) * 1000};
        event_add(e->grace_ev, grace < 0 ? &(struct timeval){0, 0} : &tv);
    }
    e->stopped = stopped;
    e->stopped_arg = arg;
    struct run *r = e->runs;
    while (r) {
        struct run *next = r->next; /* r may end and go */
        if (!r->ended && r->phase != PH_END && !r->failed_rc) {
            set_halt(r, H_SHUTDOWN, "shutdown", "shutdown");
            step(r);
        }
        r = next;
    }
    /* "at once when none", but never from inside this call */
    if (!e->stop_ev)
        e->stop_ev = event_new(e->cfg.base, -1, 0, on_stop_check, e);
    if (e->stop_ev)
        event_active(e->stop_ev, EV_TIMEOUT, 0);
}

/* ---- resume ------------------------------------------------------------- */

struct collect {
    int64_t *seqs;
    size_t n, cap;
};

static int collect_request(void *ctx, const struct ledger_entry *en)
{
    struct collect *c = ctx;
    if (en->parent != LEDGER_NO_PARENT || strcmp(en->kind, "request") != 0)
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        int64_t *s = realloc(c->seqs, cap * sizeof(*s));
        if (!s)
            return FO_E_NOMEM;
        c->seqs = s;
        c->cap = cap;
    }
    c->seqs[c->n++] = en->seq;
    return 0;
}

struct replay {
    struct run *r;
    int rc;
    struct fo_err err;
    int ended;
    char last_kind[LEDGER_KIND_MAX + 1];
};

static int replay_entry(void *ctx, const struct ledger_entry *en)
{
    struct replay *p = ctx;
    struct run *r = p->r;
    if (p->rc || en->seq == r->id)
        return 0;
    if (!strcmp(en->kind, "answer") || !strcmp(en->kind, "error")) {
        p->ended = 1;
        return 1;
    }
    char *body = NULL;
    size_t len = 0;
    struct fo_err err;
    int rc = ledger_body(r->e->cfg.ledger, en->seq, &body, &len, &err);
    cJSON *b = NULL;
    if (!rc)
        rc = fo_json_parse(body, len, &b, &err);
    free(body);
    r->cur_ts = en->ts;
    if (!rc)
        rc = apply(r, en->actor, en->kind, en->seq, en->parent, b, &err);
    cJSON_Delete(b);
    if (rc) {
        p->rc = rc;
        p->err = err;
        fo_err_prefix(&p->err, "entry %lld (%s)", (long long)en->seq, en->kind);
        return 1;
    }
    snprintf(p->last_kind, sizeof(p->last_kind), "%s", en->kind);
    return 0;
}

/* The run of request seq, when it has no end and nobody live holds it:
 * rebuilt from its entries and set going again. *resumed 1 when it was. */
static int resume_one(struct orch_engine *e, int64_t seq, int *resumed,
                      struct run **out, struct fo_err *err)
{
    *resumed = 0;
    *out = NULL;
    struct ledger *l = e->cfg.ledger;
    char *body = NULL;
    size_t len = 0;
    cJSON *b = NULL;
    struct fo_err ignore;
    if (ledger_body(l, seq, &body, &len, &ignore) ||
        fo_json_parse(body, len, &b, &ignore)) {
        free(body);
        return FO_OK; /* redacted or foreign: not ours to resume */
    }
    free(body);
    const char *via = str_of(b, "via"), *text = str_of(b, "request");
    const char *inst = str_of(b, "instance");
    int resumable =
        !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "resumable"));
    if (!via || !text || !inst || !resumable ||
        (strcmp(via, "submit") && strcmp(via, "run_start") &&
         strcmp(via, "plan_run"))) {
        cJSON_Delete(b);
        return FO_OK;
    }
    struct run *r = run_new(e, via);
    if (!r) {
        cJSON_Delete(b);
        return nomem(err);
    }
    r->id = seq;
    r->request = orch_strdup(text);
    long long n = 0;
    r->max_calls = fo_json_get_int(b, "max_model_calls", 1,
                                   ORCH_SUBMIT_CALLS_MAX, &n) == FO_OK
                       ? (int)n
                       : ORCH_SUBMIT_CALLS_DEFAULT;
    r->max_seconds = fo_json_get_int(b, "max_seconds", 1,
                                     ORCH_SUBMIT_SECONDS_MAX, &n) == FO_OK
                         ? (int)n
                         : 0;
    cJSON *gates = cJSON_DetachItemFromObjectCaseSensitive(b, "gates");
    if (cJSON_IsObject(gates))
        r->gates = gates;
    else
        cJSON_Delete(gates);
    const char *sess = str_of(b, "session");
    orch_ctx_limits_default(&r->lim);
    struct fo_err lerr;
    if (sess && orch_session_name_ok(sess) &&
        orch_ctx_limits_parse(cJSON_GetObjectItemCaseSensitive(b, "context"),
                              &r->lim, &lerr) == FO_OK)
        r->session = orch_strdup(sess);
    cJSON_Delete(b);
    struct ledger_entry req;
    if (!r->request || ledger_get(l, seq, &req, NULL, err)) {
        int code = r->request ? err->code : nomem(err);
        run_unlink(r);
        run_free(r);
        return code;
    }
    r->t0_us = req.ts;
    if (!strcmp(r->via, "plan_run")) /* via was in the freed body */
        r->phase = PH_PLAN;
    if (r->session) { /* its turn entry moves it on */
        r->after_context = r->phase;
        r->phase = PH_CONTEXT;
    }
    struct replay p = {.r = r};
    int rc =
        ledger_descendants(l, seq, ORCH_RUN_SCAN_MAX, replay_entry, &p, err);
    if (rc < 0 || (rc && !p.ended && !p.rc)) {
        run_unlink(r);
        run_free(r);
        return rc < 0 ? -rc : rc;
    }
    if (p.ended) {
        run_unlink(r);
        run_free(r);
        return FO_OK;
    }
    /* in flight at the crash: a job is not running now, a role call is
     * made again */
    r->reserved = 0;
    r->halt = H_NONE;
    if (r->budget_seq >= 0) /* the budget is on record: only the answer */
        r->halt = H_BUDGET;
    else if (gate_rejected(r)) /* a gate ended it: the budget entry next */
        r->halt = H_GATE;
    *resumed = 1;
    if (p.rc) { /* its entries do not reduce to a state */
        elog(e, "run %lld: cannot resume: %s", (long long)seq, p.err.msg);
        fail(r, FO_E_CORRUPT, &p.err);
        step(r);
        return FO_OK;
    }
    snprintf(r->stopped_before, sizeof(r->stopped_before), "%s",
             p.last_kind[0] ? p.last_kind : "request");
    /* a turn past its context: the same context again, nothing written */
    struct fo_err cerr;
    if (r->session && r->phase != PH_CONTEXT &&
        session_context(r, NULL, &cerr) != FO_OK)
        elog(e, "run %lld: its session's context cannot be read: %s",
             (long long)seq, cerr.msg);
    *out = r;
    return FO_OK;
}

/* The `resume` entries of runs rebuilt from their entries, in one
 * transaction (one fsync for them all, before the daemon says it is
 * ready), then each run goes on. */
static int resume_batch(struct orch_engine *e, struct run **rs, size_t n,
                        struct fo_err *err)
{
    struct ledger_append *reqs = calloc(n ? n : 1, sizeof(*reqs));
    char **bodies = calloc(n ? n : 1, sizeof(*bodies));
    int rc = reqs && bodies ? FO_OK : nomem(err);
    for (size_t i = 0; !rc && i < n; i++) {
        struct run *r = rs[i];
        cJSON *o = cJSON_CreateObject();
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (!o || !fo_json_add_int(o, "last_seq", r->last_seq) ||
            !cJSON_AddStringToObject(o, "last_kind", r->stopped_before) ||
            !cJSON_AddStringToObject(o, "instance", e->instance) ||
            fo_json_canon(o, &b, err))
            rc = nomem(err);
        cJSON_Delete(o);
        bodies[i] = rc ? NULL : fo_buf_detach(&b, &reqs[i].body_len);
        fo_buf_release(&b);
        reqs[i].actor = "loop";
        reqs[i].kind = "resume";
        reqs[i].parent = r->id;
        reqs[i].body = bodies[i];
        if (r->leased) {
            reqs[i].lease_owner = e->instance;
            reqs[i].lease_run = r->id;
        }
    }
    if (!rc && n)
        rc = ledger_append_batch(e->cfg.ledger, reqs, n, err);
    for (size_t i = 0; i < n; i++) {
        struct run *r = rs[i];
        r->stopped_before[0] = '\0';
        if (rc || reqs[i].rc) { /* not resumed: it stays as it was */
            run_unlink(r);
            run_free(r);
            continue;
        }
        r->last_seq = reqs[i].entry.seq;
        elog(e, "run %lld: resumed", (long long)r->id);
        step(r);
    }
    for (size_t i = 0; bodies && i < n; i++)
        free(bodies[i]);
    free(bodies);
    free(reqs);
    return rc;
}

/* With run leases, a run is resumed only by the engine that claims its
 * lease: one with a live lease is another daemon's; one with an expired
 * lease is claimed, then read; one with none (made before leases, or
 * over) is read first, and claimed only when it has no end. */
static int claim_resume(struct orch_engine *e, int64_t seq, int *resumed,
                        struct run **out, struct fo_err *err)
{
    *resumed = 0;
    *out = NULL;
    if (!e->leases)
        return resume_one(e, seq, resumed, out, err);
    struct ledger *l = e->cfg.ledger;
    char owner[65];
    int live = 0;
    int rc = ledger_lease_get(l, seq, owner, sizeof(owner), &live, err);
    if (rc && rc != FO_E_NOT_FOUND)
        return rc;
    if (rc == FO_OK && live)
        return FO_OK; /* another daemon runs it */
    if (rc == FO_E_NOT_FOUND) {
        rc = resume_one(e, seq, resumed, out, err);
        if (rc || !*out)
            return rc;
        run_unlink(*out); /* read again once it is ours */
        run_free(*out);
        *out = NULL;
        *resumed = 0;
    }
    int got = 0;
    rc = ledger_lease_claim(l, seq, e->instance, e->cfg.lease_ms, &got, err);
    if (rc || !got)
        return rc;
    rc = resume_one(e, seq, resumed, out, err);
    struct fo_err lerr;
    if (!rc && *out)
        (*out)->leased = 1;
    else if (!rc && !*resumed) /* over, or not a run to resume */
        ledger_lease_release(l, seq, e->instance, 1, &lerr);
    return rc;
}

int orch_engine_resume_all(struct orch_engine *e, size_t *n, struct fo_err *err)
{
    if (n)
        *n = 0;
    struct collect c = {0};
    int rc = ledger_requests(e->cfg.ledger, 0, collect_request, &c, err);
    if (rc > 0 && rc != FO_OK) {
        free(c.seqs);
        return rc == FO_E_NOMEM ? nomem(err) : rc;
    }
    rc = FO_OK;
    struct run **rs = calloc(c.n ? c.n : 1, sizeof(*rs));
    size_t nr = 0;
    if (!rs)
        rc = nomem(err);
    for (size_t i = 0; !rc && i < c.n; i++) {
        if (run_find(e, c.seqs[i]))
            continue;
        /* a run some live process holds is theirs */
        if (orch_run_held(e->o, e->cfg.ledger, c.seqs[i]))
            continue;
        if (!e->have_instance && (rc = hold_instance(e, err)))
            break;
        int resumed = 0;
        struct run *r = NULL;
        rc = claim_resume(e, c.seqs[i], &resumed, &r, err);
        if (!rc && resumed && n)
            (*n)++;
        if (r)
            rs[nr++] = r;
    }
    if (rs) {
        int brc = resume_batch(e, rs, nr, err);
        if (!rc)
            rc = brc;
    }
    free(rs);
    free(c.seqs);
    return rc;
}

/* ---- run leases (several daemons on one ledger) ------------------------ */

/* Posts to the lease thread (orch_lease.c) the renewal of the leases of
 * the runs here and, unless stopping, the listing of the expired ones; a
 * tick while the last job is under way posts nothing. on_lease_done reads
 * what it found. */
static void on_lease_tick(evutil_socket_t fd, short what, void *arg)
{
    struct orch_engine *e = arg;
    (void)fd, (void)what;
    size_t n = 0;
    for (struct run *r = e->runs; r; r = r->next)
        n += r->leased && !r->ended && !r->lease_lost;
    int64_t *ids = n ? calloc(n, sizeof(*ids)) : NULL;
    if (n && !ids)
        return;
    size_t k = 0;
    for (struct run *r = e->runs; r && k < n; r = r->next)
        if (r->leased && !r->ended && !r->lease_lost)
            ids[k++] = r->id;
    if (orch_lease_worker_post(e->lw, e->instance, ids, k, e->cfg.lease_ms,
                               !e->stopping) < 0)
        elog(e, "run leases: out of memory (the next tick tries again)");
    free(ids);
}

/* What the lease thread found, on the loop: a run whose lease was not
 * renewed was taken over by another daemon and is dropped here, without a
 * write; runs whose lease expired (their daemon died, or lost the database
 * for longer than a lease) are claimed and resumed. */
static void on_lease_done(void *arg)
{
    struct orch_engine *e = arg;
    const struct orch_lease_result *x = orch_lease_worker_result(e->lw);
    struct fo_err err;
    if (x->rc) {
        if (!e->lease_failing)
            elog(e,
                 "run leases: cannot renew (runs go on; another daemon "
                 "may take over those whose lease expires): %s",
                 x->err.msg);
        e->lease_failing = 1;
        return; /* the database is away: no claims either */
    }
    for (size_t i = 0; i < x->n; i++) {
        struct run *r = run_find(e, x->ids[i]);
        if (!r || x->ok[i] || !r->leased || r->ended || r->lease_lost)
            continue;
        struct fo_err lerr;
        fo_err_set(&lerr, FO_E_RUN_ELSEWHERE,
                   "run %lld: its lease was taken over by another daemon",
                   (long long)r->id);
        elog(e, "%s: dropped here", lerr.msg);
        fail(r, FO_E_RUN_ELSEWHERE, &lerr);
        step(r);
        return; /* the list may have changed: the rest next time */
    }
    if (!x->listed || e->stopping)
        return;
    if (x->exp_rc) {
        if (!e->lease_failing)
            elog(e, "run leases: cannot read the leases: %s", x->exp_err.msg);
        e->lease_failing = 1;
        return;
    }
    if (e->lease_failing)
        elog(e, "run leases: the database answers again");
    e->lease_failing = 0;
    struct run *rs[ORCH_LEASE_EXPIRED_MAX];
    size_t nr = 0;
    for (size_t i = 0; i < x->nexp; i++) {
        if (run_find(e, x->expired[i]) || e->n_runs >= e->cfg.max_runs)
            continue;
        if (!e->have_instance && hold_instance(e, &err) != FO_OK) {
            elog(e, "run leases: %s", err.msg);
            break;
        }
        int resumed = 0;
        struct run *r = NULL;
        int rc = claim_resume(e, x->expired[i], &resumed, &r, &err);
        if (rc)
            elog(e, "run %lld: cannot claim: %s", (long long)x->expired[i],
                 err.msg);
        else if (r) {
            elog(e, "run %lld: claimed (its lease had expired)",
                 (long long)x->expired[i]);
            rs[nr++] = r;
        }
    }
    if (nr && resume_batch(e, rs, nr, &err) != FO_OK)
        elog(e, "run leases: resume: %s", err.msg);
}

/* ---- a whole run on the calling thread ---------------------------------- */

struct sync_ctx {
    const struct orch_witness *w;
    struct event_base *base;
    int finished, rc;
    cJSON *out;
    struct fo_err err;
    int64_t run;
    struct orch_engine *e;
    struct event *poll;
    struct orch_live *live;
};

static int sync_append(void *hook, struct ledger_append *a,
                       void (*done)(void *arg), void *arg, struct fo_err *err)
{
    struct sync_ctx *s = hook;
    (void)err;
    int rc = s->w->append ? s->w->append(s->w->hook, a, &a->err)
                          : ledger_append_batch(s->w->ledger, a, 1, &a->err);
    if (rc && a->rc == FO_OK) {
        a->rc = rc;
    }
    done(arg);
    return FO_OK;
}

static void sync_done(void *arg, int rc, cJSON *out, const struct fo_err *err)
{
    struct sync_ctx *s = arg;
    s->finished = 1;
    s->rc = rc;
    s->out = out;
    if (rc && err)
        s->err = *err;
    event_base_loopbreak(s->base);
}

static void sync_started(void *arg, int64_t run)
{
    struct sync_ctx *s = arg;
    s->run = run;
    if (s->live) {
        s->live->seq = run;
        orch_runs_enter(s->e->o, s->live);
    }
}

/* A cancel (orch_run_cancel from another thread) or a stop
 * (orch_runs_stop) of a run on this thread, seen every 50 ms. */
static void sync_poll(evutil_socket_t fd, short what, void *arg)
{
    struct sync_ctx *s = arg;
    (void)fd, (void)what;
    if (s->run < 0)
        return;
    struct run *r = run_find(s->e, s->run);
    if (r)
        step(r); /* step looks at the cancel flag and the stop */
}

int orch_engine_run_sync(const struct orch *o, const struct orch_witness *w,
                         const struct orch_run_req *req, cJSON **out,
                         struct fo_err *err)
{
    return orch_engine_run_sync_live(o, w, req, NULL, NULL, NULL, NULL, out,
                                     err);
}

struct sync_started_fwd {
    struct sync_ctx *s;
    void (*fn)(void *arg, int64_t run);
    void *arg;
};

static void sync_started_fwd(void *arg, int64_t run)
{
    struct sync_started_fwd *f = arg;
    sync_started(f->s, run);
    if (f->fn)
        f->fn(f->arg, run);
}

static void sync_done_fwd(void *arg, int rc, cJSON *out,
                          const struct fo_err *err)
{
    struct sync_started_fwd *f = arg;
    sync_done(f->s, rc, out, err);
}

int orch_engine_run_sync_live(const struct orch *o,
                              const struct orch_witness *w,
                              const struct orch_run_req *req,
                              struct orch_live *live, int64_t *run_out,
                              void (*started)(void *arg, int64_t run),
                              void *started_arg, cJSON **out,
                              struct fo_err *err)
{
    struct sync_ctx s = {.w = w, .run = -1, .live = live};
    struct sync_started_fwd fwd = {&s, started, started_arg};
    int rc = FO_OK;
    s.base = event_base_new();
    if (!s.base)
        return fo_err_set(err, FO_E_NOMEM, "no event base");
    struct evdns_base *dns = NULL;
    struct fo_err derr;
    if (o->models && orch_model_dns_create(s.base, &dns, &derr) != FO_OK)
        dns = NULL; /* IP addresses and localhost still work */
    struct orch_engine_config cfg = {.base = s.base,
                                     .dns = dns,
                                     .ledger = w->ledger,
                                     .append = sync_append,
                                     .hook = &s};
    rc = orch_engine_create(o, &cfg, &s.e, err);
    if (!rc) {
        s.poll = event_new(s.base, -1, EV_PERSIST, sync_poll, &s);
        struct timeval tv = {0, 50000};
        if (!s.poll || event_add(s.poll, &tv))
            rc = nomem(err);
    }
    if (!rc) {
        s.e->poll_live = live;
        rc = start_run(s.e, req, 0, sync_started_fwd, sync_done_fwd, &fwd, err);
    }
    if (!rc) {
        while (!s.finished && event_base_dispatch(s.base) == 0)
            ;
        if (run_out)
            *run_out = s.run;
        rc = s.rc;
        if (rc) {
            if (err)
                *err = s.err;
            cJSON_Delete(s.out);
        } else {
            *out = s.out;
        }
    }
    if (live && live->seq >= 0 && s.run >= 0)
        orch_runs_leave(o, live);
    if (s.poll)
        event_free(s.poll);
    /* the run is over: end the MCP servers' sessions (a bounded wait) */
    if (s.e && orch_mcpc_close(s.e->mcpc, on_mcp_closed, s.e))
        while (!s.e->mcp_closed && event_base_loop(s.base, EVLOOP_ONCE) == 0)
            ;
    orch_engine_free(s.e);
    if (dns) { /* cancelled lookups are answered on one more turn */
        event_base_loop(s.base, EVLOOP_NONBLOCK);
        evdns_base_free(dns, 0);
    }
    event_base_free(s.base);
    return rc;
}

/* ---- the blocking entry points (the CLI, `forum mcp`, tests) ------------ */

int orch_submit_check(const char *request, const struct orch_submit_opts *opts,
                      struct fo_err *err)
{
    if (!request || !*request || strlen(request) > ORCH_REQUEST_MAX)
        return fo_err_set(err, FO_E_INVALID, "request: must be 1-%u bytes",
                          ORCH_REQUEST_MAX);
    if (!fo_utf8_valid(request, strlen(request)))
        return fo_err_set(err, FO_E_INVALID, "request: not valid UTF-8");
    int calls = opts ? opts->max_model_calls : 0;
    int secs = opts ? opts->max_seconds : 0;
    if (calls < 0 || calls > ORCH_SUBMIT_CALLS_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_model_calls: must be 1..%d",
                          ORCH_SUBMIT_CALLS_MAX);
    if (secs < 0 || secs > ORCH_SUBMIT_SECONDS_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_seconds: must be 1..%d",
                          ORCH_SUBMIT_SECONDS_MAX);
    return FO_OK;
}

/* A blocking run in the registry, so orch_run_cancel from another thread
 * finds it. */
static int run_registered(const struct orch *o, const struct orch_witness *w,
                          const struct orch_run_req *req, cJSON **out,
                          struct fo_err *err)
{
    struct orch_live live;
    char inst[ORCH_INSTANCE_HEX + 1];
    int rc = req->request || strcmp(req->via, "plan_run") != 0
                 ? orch_submit_check(req->request, &req->opts, err)
                 : FO_OK;
    if (!rc)
        rc = orch_runs_hold(o, ledger_dir(w->ledger), inst, &live, err);
    if (!rc)
        rc = orch_engine_run_sync_live(o, w, req, &live, NULL, w->started,
                                       w->started_arg, out, err);
    return rc;
}

int orch_submit(const struct orch *o, const struct orch_witness *w,
                const char *request, const struct orch_submit_opts *opts,
                cJSON **out, struct fo_err *err)
{
    struct orch_run_req req = {.via = "submit", .request = request};
    if (opts)
        req.opts = *opts;
    return run_registered(o, w, &req, out, err);
}

int orch_plan_request(const struct orch *o, const struct orch_witness *w,
                      const char *request, cJSON **out, struct fo_err *err)
{
    struct orch_run_req req = {.via = "plan", .request = request};
    return orch_engine_run_sync(o, w, &req, out, err);
}

int orch_run_plan(const struct orch *o, const struct orch_witness *w,
                  const cJSON *plan, const char *request, cJSON **out,
                  struct fo_err *err)
{
    struct orch_run_req req = {
        .via = "plan_run", .request = request, .plan = plan};
    return run_registered(o, w, &req, out, err);
}
