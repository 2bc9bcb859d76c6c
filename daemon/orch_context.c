/* orch_context: a session turn's context, and compaction by summary. */
#include "daemon/orch_engine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static size_t summary_max(const struct run *r);
static void on_summary(struct run *r, long task, int rc,
                       struct orch_model_reply *rep, const struct fo_err *serr);
static int compaction_step(struct run *r);

static const char classifier_system[] =
    "You are the classifier of forum. Pick the one agent best suited to the "
    "user's request from this list:\n{{lanes}}\n"
    "Answer with one JSON object and nothing else: {\"lane\": \"<agent "
    "name>\"}.";

static const char summarizer_system[] =
    "You are the summarizer of forum. Below are the earlier turns of a "
    "session (and the summary so far, when there is one), which no longer "
    "fit in what its next turns are shown. Summarise them for those turns: "
    "keep the decisions, facts, names, numbers and open questions, drop the "
    "rest. Answer in plain text of at most {{words}} words.";

/* ---- a session's turn: its context --------------------------------------- */

/* r->context and r->prompt from text (taken): what the session's earlier
 * turns and facts give this turn within its budget. */
static int ctx_set(struct run *r, char *text, struct fo_err *err)
{
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
        if (!r->prompt)
            return oe_nomem(err);
    }
    return FO_OK;
}

/* The same read for resume (orch_resume.c), on a resume job's thread: r
 * is then a shell engine's, whose ledger is the job's handle. *slices
 * (may be NULL) gets the budget's account of every slice. */
int oe_session_context(struct run *r, cJSON **slices, struct fo_err *err)
{
    char *text = NULL;
    cJSON *sl = NULL;
    int rc = orch_session_context(r->e->cfg.ledger, r->session, r->request,
                                  r->id, &r->lim, &text, &sl, err);
    if (!rc)
        rc = ctx_set(r, text, err);
    if (!rc && slices)
        *slices = sl;
    else
        cJSON_Delete(sl);
    return rc;
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
        oe_elog(r->e, "run %lld: no summary of session %s: %s",
                (long long)r->id, r->session,
                serr ? serr->msg : "the model call failed");
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
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    rc = oe_witness(r, "summarizer", "compaction", r->session_start, o, -1, 1,
                    1, &err);
    if (rc)
        oe_fail(r, rc, &err);
}

/* Asks for a summary when the history would drop turns: 1 when it did
 * (the context step waits for it), 0 to go on without one. */
static int compaction_step(struct run *r)
{
    struct fo_err err;
    if (summary_max(r) < 4) {
        r->compacted = 1;
        return 0; /* no room for a summary either */
    }
    /* what the history drops, read on a worker; the step comes back */
    struct oe_read *rd = oe_ctx_take(r, OE_RD_COMPACTION);
    if (!rd) {
        int rc = oe_ctx_read(r, OE_RD_COMPACTION, &err);
        if (rc) {
            r->compacted = 1;
            oe_fail(r, rc, &err);
        }
        return 1;
    }
    r->compacted = 1; /* once per turn, whatever comes of it */
    char *text = rd->text;
    cJSON *replaces = rd->a, *runs = rd->b;
    int rc = rd->rc;
    err = rd->err;
    rd->text = NULL;
    rd->a = rd->b = NULL;
    oe_read_free(rd);
    if (rc) {
        oe_fail(r, rc, &err);
        return 1;
    }
    if (!text)
        return 0; /* nothing is dropped */
    if (!oe_spend(r, "summarizer", 0)) {
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
        rc = oe_role_start(r, R_SUMMARIZER, -1, m, 2, stub, on_summary, &err);
    }
    free(system);
    free(text);
    cJSON_Delete(replaces);
    cJSON_Delete(runs);
    if (rc) {
        r->reserved--;
        oe_fail(r, rc, &err);
    }
    return 1;
}

/* Before the route: the session exists (its first turn writes
 * session_started, once, whatever runs of it start together), then the
 * `turn` entry, with a `context_budget` entry per slice of context. */
void oe_context_step(struct run *r)
{
    struct orch_engine *e = r->e;
    struct fo_err err;
    int rc = FO_OK;
    if (r->waiting_session || r->creating_session)
        return;
    if (r->session_start < 0) {
        /* the session's start, read on a worker: the step comes back */
        struct oe_read *rd = oe_ctx_take(r, OE_RD_SESSION);
        if (!rd) {
            rc = oe_ctx_read(r, OE_RD_SESSION, &err);
            if (rc)
                oe_fail(r, rc, &err);
            return;
        }
        int64_t start = rd->n;
        uint64_t gen = rd->gen;
        rc = rd->rc;
        err = rd->err;
        oe_read_free(rd);
        if (rc == FO_E_NOT_FOUND && gen != e->sessions_landed) {
            /* a session_started landed since the read began: read again */
            rc = oe_ctx_read(r, OE_RD_SESSION, &err);
            if (rc)
                oe_fail(r, rc, &err);
            return;
        }
        if (rc == FO_OK) {
            r->session_start = start;
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
                oe_fail(r, oe_nomem(&err), &err);
                return;
            }
            r->creating_session = 1;
            rc = oe_witness(r, "session", "session_started", LEDGER_NO_PARENT,
                            b, -1, 1, 0, &err);
            if (rc) {
                r->creating_session = 0;
                oe_fail(r, rc, &err);
            }
            return;
        } else {
            oe_fail(r, rc, &err);
            return;
        }
    }
    if (r->lim.summary && !r->compacted && compaction_step(r))
        return; /* the summary first */
    /* the context, read on a worker: the step comes back */
    struct oe_read *rd = oe_ctx_take(r, OE_RD_CONTEXT);
    if (!rd) {
        rc = oe_ctx_read(r, OE_RD_CONTEXT, &err);
        if (rc)
            oe_fail(r, rc, &err);
        return;
    }
    cJSON *slices = rd->a;
    char *text = rd->text;
    rc = rd->rc;
    err = rd->err;
    rd->a = NULL;
    rd->text = NULL;
    oe_read_free(rd);
    if (!rc)
        rc = ctx_set(r, text, &err);
    else
        free(text);
    if (rc) {
        cJSON_Delete(slices);
        oe_fail(r, rc, &err);
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
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    /* under the request, so a resumed run finds it among its entries (the
     * session finds its turns through the index of turns) */
    rc = oe_witness(r, "session", "turn", r->id, t, -1, 1, 0, &err);
    /* what the budget made of each slice: sizes and actions, never text */
    cJSON *sl = slices ? slices->child : NULL;
    while (!rc && sl) {
        cJSON *next = sl->next;
        cJSON *one = cJSON_DetachItemViaPointer(slices, sl);
        if (!fo_json_add_int(one, "run", r->id)) {
            cJSON_Delete(one);
            rc = oe_nomem(&err);
            break;
        }
        rc = oe_witness(r, "context", "context_budget", r->id, one, -1, 0, 0,
                        &err);
        sl = next;
    }
    cJSON_Delete(slices);
    if (rc)
        oe_fail(r, rc, &err);
}

void oe_route_step(struct run *r)
{
    struct fo_err err;
    struct orch_route rt = {0};
    const struct orch_roster *ro = orch_roster(r->e->o);
    int rc = orch_route(ro, r->request, strlen(r->request), &rt, &err);
    if (rc) {
        oe_fail(r, rc, &err);
        return;
    }
    if (rt.n == 0) {
        rc = fo_err_set(&err, FO_E_INVALID, "the roster has no lanes");
    } else if (rt.decided) {
        rc = oe_route_entry(r, &rt, rt.decided, "router", NULL, 0, &err);
    } else if (!r->e->o->models || r->cls.n >= ORCH_JSON_ATTEMPTS) {
        rc = oe_route_entry(r, &rt, rt.candidates[0].agent, "top_candidate",
                            NULL, 0, &err);
    } else if (oe_spend(r, "classifier", 0)) {
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
        rc = rc ? oe_nomem(&err)
                : orch_template_render(classifier_system, v, 1, PROMPT_MAX,
                                       &text, &err);
        if (!rc)
            rc = oe_json_role_start(r, R_CLASSIFIER, -1, text, r->request, "",
                                    &r->cls, oe_on_classifier, &err);
        free(text);
        fo_buf_release(&lanes);
        if (rc)
            r->reserved--;
    }
    orch_route_release(&rt);
    if (rc)
        oe_fail(r, rc, &err);
}

/* The most bytes of an upstream's output a task's prompt takes: forum's
 * cap, the run's per-upstream budget, and what the task's budget has left
 * (*why names the binding one). */
size_t oe_upstream_room(const struct run *r, size_t left, const char **why)
{
    size_t cap = r->e->o->inject_max;
    *why = NULL;
    if (r->lim.upstream > 0 && (size_t)r->lim.upstream * 4 < cap) {
        cap = (size_t)r->lim.upstream * 4;
        *why = "upstream_token_budget";
    }
    if (r->lim.task > 0 && left < cap) {
        cap = left;
        *why = "task_context_token_budget";
    }
    return cap;
}
