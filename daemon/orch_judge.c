/* orch_judge: judgement beside the control loop. Same-tier informed
 * retries (a lane's max_retries, before a tier escalation), the intent
 * judge (a model's verdict on whether the answer covers the request, its
 * own `intent_judgment` entry), a signed checkpoint after every wave
 * (`checkpoint_each_wave`), the ledger's capsule as a run's context
 * (`use_capsule_context`) and the action receipt of a finished run. Every
 * step is an entry like any other, folded by the reducer. */
#include "daemon/orch_engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch_lanes.h"
#include "daemon/orch_views.h"
#include "ledger/fo_sha.h"

#define JUDGE_ANSWER_MAX (64u * 1024u) /* of the answer, in the prompt */

static const char judge_system[] =
    "You are the judge of forum. Decide whether the answer covers what the "
    "user's request asks for: every point of it, not only its topic. Reply "
    "with only a JSON object: {\"covers\": \"yes\" | \"no\" | \"partial\", "
    "\"missing\": [the points of the request the answer leaves out, each a "
    "short phrase], \"reason\": \"one sentence\"}.";

static const char judge_user[] =
    "The request:\n{{request}}\n\nThe answer:\n{{answer}}\n\nDoes the answer "
    "cover the request?";

/* ---- same-tier retries -------------------------------------------------- */

int oe_retry_left(const struct run *r, size_t t)
{
    const struct orch_lane *ln =
        orch_roster_find(orch_roster(r->e->o), r->p->tasks[t].agent);
    return ln && r->t[t].retries < ln->max_retries;
}

int oe_retry(struct run *r, size_t t, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    struct task *s = &r->t[t];
    const struct orch_lane *ln =
        orch_roster_find(orch_roster(r->e->o), k->agent);
    int stub = !s->ex || s->ex->kind == ORCH_EXEC_STUB;
    char what[ORCH_NAME_MAX + 16];
    snprintf(what, sizeof(what), "retry of %s", k->id);
    /* the budget is checked before the retry is witnessed, so a spent
     * budget never leaves a retry without its task */
    if (!oe_spend(r, what, stub))
        return FO_OK;
    if (!stub)
        r->reserved--; /* the task entry takes it */
    cJSON *e = cJSON_CreateObject();
    int ok =
        e && cJSON_AddStringToObject(e, "id", k->id) &&
        cJSON_AddStringToObject(e, "agent", k->agent) &&
        fo_json_add_int(e, "attempt", s->retries + 1) &&
        fo_json_add_int(e, "max_retries", ln ? ln->max_retries : 0) &&
        (s->tier < 0 ||
         cJSON_AddStringToObject(e, "tier", orch_tier_name(s->tier))) &&
        cJSON_AddStringToObject(e, "model", s->ex ? s->ex->model : s->model) &&
        cJSON_AddStringToObject(e, "reason", "its checks failed") &&
        cJSON_AddItemToObject(e, "because",
                              s->failed ? cJSON_Duplicate(s->failed, 1)
                                        : cJSON_CreateArray());
    if (!ok) {
        cJSON_Delete(e);
        return oe_nomem(err);
    }
    return oe_witness(r, "loop", "retry", s->verdict_seq, e, (long)t, 0, 0,
                      err);
}

/* ---- the intent judge ---------------------------------------------------- */

/* The `intent_judgment` entry: a verdict (covers given), or why there is
 * none (skipped). ok is covers == "yes"; a skipped judgment has no ok, so
 * a grade counts it neither way. */
static int judgment_entry(struct run *r, const char *covers,
                          const cJSON *missing, const char *reason,
                          const char *model, int spent, const char *skipped,
                          struct fo_err *err)
{
    cJSON *e = cJSON_CreateObject();
    const cJSON *score =
        r->coverage ? cJSON_GetObjectItemCaseSensitive(r->coverage, "score")
                    : NULL;
    int ok = e && cJSON_AddBoolToObject(e, "judged", covers != NULL) &&
             fo_json_add_int(e, "answer_seq", r->answer_seq);
    if (ok && covers)
        ok = cJSON_AddStringToObject(e, "covers", covers) &&
             cJSON_AddBoolToObject(e, "ok", !strcmp(covers, "yes")) &&
             cJSON_AddItemToObject(e, "missing",
                                   missing ? cJSON_Duplicate(missing, 1)
                                           : cJSON_CreateArray());
    if (ok && skipped)
        ok = cJSON_AddStringToObject(e, "skipped", skipped) != NULL;
    if (ok && reason && *reason)
        ok = cJSON_AddStringToObject(e, "reason", reason) != NULL;
    if (ok && model)
        ok = cJSON_AddStringToObject(e, "model", model) != NULL;
    if (ok && cJSON_IsNumber(score))
        ok = cJSON_AddItemToObject(e, "coverage_score",
                                   cJSON_Duplicate(score, 1));
    if (!ok) {
        cJSON_Delete(e);
        return oe_nomem(err);
    }
    return oe_witness(r, "judge", "intent_judgment", r->answer_seq, e, -1, 1,
                      spent, err);
}

/* The reply's verdict: covers (a constant), missing (borrowed from j). */
static int parse_verdict(const cJSON *j, const char **covers,
                         const cJSON **missing, const char **reason,
                         struct fo_err *why)
{
    static const char *const words[] = {"yes", "no", "partial"};
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "covers");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "missing");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(j, "reason");
    *covers = NULL;
    for (size_t i = 0; cJSON_IsString(c) && i < 3; i++)
        if (!strcmp(c->valuestring, words[i]))
            *covers = words[i];
    if (!*covers)
        return fo_err_set(why, FO_E_INVALID,
                          "\"covers\" must be \"yes\", \"no\" or \"partial\"");
    if (m && !cJSON_IsArray(m))
        return fo_err_set(why, FO_E_INVALID,
                          "\"missing\" must be a list of strings");
    const cJSON *x;
    cJSON_ArrayForEach (x, m)
        if (!cJSON_IsString(x))
            return fo_err_set(why, FO_E_INVALID,
                              "\"missing\" must be a list of strings");
    *missing = m;
    *reason = cJSON_IsString(re) ? re->valuestring : NULL;
    return FO_OK;
}

static void on_judge(struct run *r, long task, int rc,
                     struct orch_model_reply *rep, const struct fo_err *cerr)
{
    (void)task;
    struct fo_err err;
    if (rc) { /* the answer stands: the judgment says the call failed */
        char why[FO_ERR_MSG_MAX + 32];
        snprintf(why, sizeof(why), "the judge's call failed: %s", cerr->msg);
        rc = judgment_entry(r, NULL, NULL, NULL,
                            rep && rep->model[0] ? rep->model : "", 1, why,
                            &err);
        if (rc)
            oe_fail(r, rc, &err);
        return;
    }
    cJSON *j = NULL;
    struct fo_err why;
    fo_err_clear(&why);
    const char *covers = NULL, *reason = NULL;
    const cJSON *missing = NULL;
    rc = orch_json_extract(rep->text, rep->text_len, &j, &why);
    if (!rc)
        rc = parse_verdict(j, &covers, &missing, &reason, &why);
    if (rc)
        rc = oe_rejected(r, R_JUDGE, -1, r->answer_seq, &r->judge_att, why.msg,
                         rep->model, rep->text, &err);
    else
        rc = judgment_entry(r, covers, missing, reason, rep->model, 1, NULL,
                            &err);
    cJSON_Delete(j);
    if (rc)
        oe_fail(r, rc, &err);
}

void oe_judge_step(struct run *r)
{
    const struct orch *o = r->e->o;
    struct fo_err err;
    const char *skip = NULL;
    if (!o->models)
        skip = "no model provider is configured: the intent judge did not "
               "run";
    else if (r->judge_att.n >= ORCH_JSON_ATTEMPTS)
        skip = "the judge gave no valid verdict";
    else if (r->calls + r->reserved >= r->max_calls)
        skip = "the run's max_model_calls is spent";
    else if (r->max_seconds &&
             oe_elapsed_ms(r) >= (int64_t)r->max_seconds * 1000)
        skip = "the run's max_seconds is spent";
    int rc;
    if (skip) {
        rc = judgment_entry(r, NULL, NULL, NULL, NULL, 0, skip, &err);
        if (rc)
            oe_fail(r, rc, &err);
        return;
    }
    size_t an =
        orch_utf8_prefix(r->answer ? r->answer : "",
                         r->answer ? strlen(r->answer) : 0, JUDGE_ANSWER_MAX);
    char *cut = malloc(an + 1);
    char *user = NULL;
    if (!cut) {
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    if (an)
        memcpy(cut, r->answer, an);
    cut[an] = '\0';
    struct orch_tmpl_var v[] = {{"request", oe_run_request(r)},
                                {"answer", cut}};
    r->reserved++;
    rc = orch_template_render(judge_user, v, 2, PROMPT_MAX, &user, &err);
    if (!rc)
        rc = oe_json_role_start(r, R_JUDGE, -1, judge_system, user, "{}",
                                &r->judge_att, on_judge, &err);
    free(user);
    free(cut);
    if (rc) {
        r->reserved--;
        oe_fail(r, rc, &err);
    }
}

int oe_apply_judgment(struct run *r, int64_t seq, const cJSON *b,
                      struct fo_err *err)
{
    cJSON_Delete(r->intent);
    r->intent = cJSON_Duplicate(b, 1);
    if (!r->intent)
        return oe_nomem(err);
    r->judge_seq = seq;
    if (oe_str_of(b, "model"))
        r->calls++; /* the judge's model call */
    if (r->phase == PH_JUDGE)
        r->phase = PH_END;
    return FO_OK;
}

/* ---- the run's proof lane ----------------------------------------------- */

/* The claim's entry: the route frame's lanes, the scopes of doing tasks. */
static int lane_claim(struct run *r, struct fo_err *err)
{
    const struct orch_roster *ro = orch_roster(r->e->o);
    struct orch_route rt = {0};
    int rc = orch_route(ro, r->request, strlen(r->request), &rt, err);
    cJSON *frame = rc ? NULL : orch_route_frame(ro, r->request, &rt);
    if (!rc && !frame)
        rc = oe_nomem(err);
    static const char *const scopes[] = {"read", "run"};
    const char *pl = rc ? NULL : oe_str_of(frame, "proof_lane");
    struct orch_lane_claim c = {.task = r->request,
                                .lane = pl ? pl : "execute",
                                .domain = oe_str_of(frame, "domain_lane"),
                                .scopes = scopes,
                                .n_scopes = 2,
                                .has_confidence = 1,
                                .confidence = rt.confidence};
    const char *kind = NULL;
    cJSON *body = NULL;
    if (!rc)
        rc = orch_lane_judge(&c, &kind, &body, err);
    cJSON_Delete(frame);
    orch_route_release(&rt);
    if (!rc)
        rc = oe_witness(r, "router", kind,
                        r->route_seq >= 0 ? r->route_seq : r->id, body, -1, 1,
                        0, err);
    return rc;
}

int oe_lane_step(struct run *r)
{
    struct fo_err err;
    if (!r->claim_lane)
        return 0;
    if (r->lane_seq < 0) {
        int rc = lane_claim(r, &err);
        if (rc)
            oe_fail(r, rc, &err);
        return 1;
    }
    if (!r->lane_rejected)
        return 0;
    char gr[160] = "";
    size_t n = 0;
    const cJSON *x;
    cJSON_ArrayForEach (
        x, cJSON_GetObjectItemCaseSensitive(r->lane_claim, "granted")) {
        int w = cJSON_IsString(x) ? snprintf(gr + n, sizeof(gr) - n, "%s%s",
                                             n ? ", " : "", x->valuestring)
                                  : 0;
        if (w < 0 || (size_t)w >= sizeof(gr) - n)
            break;
        n += (size_t)w;
    }
    const char *v = oe_str_of(r->lane_claim, "violation");
    const char *ln = oe_str_of(r->lane_claim, "lane");
    fo_err_set(&err, FO_E_INVALID,
               "lane_rejection seq %lld: %s: lane %.64s grants %s; the run "
               "does tasks (read, run)",
               (long long)r->lane_seq, v ? v : "rejected", ln ? ln : "?",
               n ? gr : "nothing");
    oe_fail(r, FO_E_INVALID, &err);
    return 1;
}

int oe_apply_lane(struct run *r, int64_t seq, const char *kind, const cJSON *b,
                  struct fo_err *err)
{
    cJSON_Delete(r->lane_claim);
    r->lane_claim = cJSON_Duplicate(b, 1);
    if (!r->lane_claim ||
        !cJSON_AddStringToObject(r->lane_claim, "kind", kind) ||
        !fo_json_add_int(r->lane_claim, "seq", seq))
        return oe_nomem(err);
    r->lane_seq = seq;
    r->lane_rejected = !strcmp(kind, "lane_rejection");
    return FO_OK;
}

/* ---- the delivery profile ----------------------------------------------- */

/* Deterministic and without a model: the answer's check is computed here
 * and again identically by anyone who reads the answer entry. */
void oe_profile_step(struct run *r)
{
    struct fo_err err;
    cJSON *e = NULL;
    int rc =
        orch_profile_check(r->answer ? r->answer : "", r->profile, &e, &err);
    if (!rc && !fo_json_add_int(e, "answer_seq", r->answer_seq))
        rc = oe_nomem(&err);
    if (!rc)
        rc = oe_witness(r, "delivery-profile", "delivery_profile_check",
                        r->answer_seq, e, -1, 1, 0, &err);
    else
        cJSON_Delete(e);
    if (rc)
        oe_fail(r, rc, &err);
}

int oe_apply_profile_check(struct run *r, int64_t seq, const cJSON *b,
                           struct fo_err *err)
{
    (void)seq;
    cJSON_Delete(r->profile_check);
    r->profile_check = cJSON_Duplicate(b, 1);
    if (!r->profile_check)
        return oe_nomem(err);
    if (r->phase == PH_PROFILE)
        r->phase = r->judge ? PH_JUDGE : PH_END;
    return FO_OK;
}

/* ---- the request's options ---------------------------------------------- */

void oe_request_opts(struct run *r, const cJSON *b)
{
    r->judge =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "intent_judge"));
    r->cp_each_wave = cJSON_IsTrue(
        cJSON_GetObjectItemCaseSensitive(b, "checkpoint_each_wave"));
    r->claim_lane =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "claim_lane"));
    long long v = 0;
    if (fo_json_get_int(b, "max_task_tokens", 0, ORCH_CTX_TOKENS_MAX, &v) ==
        FO_OK)
        r->lim.task = (int)v;
    if (fo_json_get_int(b, "max_upstream_tokens", 0, ORCH_CTX_TOKENS_MAX, &v) ==
        FO_OK)
        r->lim.upstream = (int)v;
    const char *dp = oe_str_of(b, "delivery_profile");
    snprintf(r->profile, sizeof(r->profile), "%s",
             dp && orch_profile_known(dp) ? dp : "");
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(b, "capsule");
    const char *text = oe_str_of(cap, "text"), *hash = oe_str_of(cap, "hash");
    if (!text || !hash || r->session)
        return;
    snprintf(r->capsule_hash, sizeof(r->capsule_hash), "%s", hash);
    struct fo_buf p;
    fo_buf_init(&p, FO_BUF_UNLIMITED);
    free(r->prompt);
    r->prompt = NULL;
    const char *act =
        oe_str_of(cJSON_GetObjectItemCaseSensitive(cap, "budget"), "action");
    int cut = act && strcmp(act, "retained") != 0;
    if (fo_buf_printf(&p,
                      "Context (a capsule of the ledger, sha256 %s%s):\n%s\n\n"
                      "The request:\n%s",
                      hash, cut ? ", cut to the run's context budget" : "",
                      text, r->request ? r->request : "") == FO_OK)
        r->prompt = fo_buf_detach(&p, NULL);
    fo_buf_release(&p);
}

struct cap_job {
    struct run *r; /* NULL once the run went */
    char *dir;
    cJSON *b;                   /* the request body */
    cJSON *cap;                 /* {schema, hash, chars, text, budget} */
    struct orch_ctx_limits lim; /* the run's: the capsule is admitted */
    int rc;
    struct fo_err err;
};

/* On a worker: the capsule of the ledger as committed, on a read handle
 * of its own. */
static void cap_work(void *arg, const atomic_int *cancel)
{
    struct cap_job *j = arg;
    struct ledger *l = NULL;
    cJSON *cap = NULL;
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    if (atomic_load(cancel))
        j->rc = fo_err_set(&j->err, FO_E_DRAINING, "the run was stopped");
    if (!j->rc)
        j->rc = ledger_open(j->dir, LEDGER_OPEN_READONLY, NULL, &l, &j->err);
    if (!j->rc)
        j->rc = orch_capsule(l, ORCH_VIEW_ITEMS_DEFAULT, ORCH_VIEW_TEXT_DEFAULT,
                             &cap, &j->err);
    ledger_close(l);
    if (!j->rc && orch_capsule_text(cap, &t) != FO_OK)
        j->rc = oe_nomem(&j->err);
    cJSON_Delete(cap);
    uint8_t h[32];
    char hex[65];
    fo_sha256(t.data ? t.data : "", t.len, h);
    fo_hex(h, 32, hex);
    /* the models see what the run's context budget admits of it, cut at a
     * character; the budget entry says how much was cut */
    struct orch_ctx_slice s = {.source = "request",
                               .ref = -1,
                               .text = t.data ? t.data : "",
                               .len = t.len};
    orch_ctx_admit(&s, 1, &j->lim);
    char *kept = j->rc ? NULL : malloc(s.len + 1);
    if (kept) {
        memcpy(kept, s.text, s.len);
        kept[s.len] = '\0';
    }
    cJSON *c = kept ? cJSON_CreateObject() : NULL;
    cJSON *bu = c ? cJSON_AddObjectToObject(c, "budget") : NULL;
    if (!j->rc &&
        !(bu &&
          cJSON_AddStringToObject(c, "schema", "forum.context-capsule/v1") &&
          cJSON_AddStringToObject(c, "hash", hex) &&
          fo_json_add_int(c, "chars", (long long)s.len) &&
          cJSON_AddStringToObject(c, "text", kept) &&
          cJSON_AddStringToObject(bu, "schema", "forum.context-pressure/v1") &&
          cJSON_AddStringToObject(bu, "source", "request") &&
          cJSON_AddStringToObject(bu, "label", "capsule") &&
          cJSON_AddStringToObject(bu, "action", s.action) &&
          cJSON_AddStringToObject(bu, "reason",
                                  s.reason ? s.reason : "under_budget") &&
          fo_json_add_int(bu, "original_bytes", (long long)t.len) &&
          fo_json_add_int(bu, "admitted_bytes", (long long)s.len) &&
          fo_json_add_int(bu, "original_tokens", s.tokens) &&
          fo_json_add_int(bu, "admitted_tokens", s.kept))) {
        cJSON_Delete(c);
        c = NULL;
        j->rc = oe_nomem(&j->err);
    }
    free(kept);
    j->cap = c;
    fo_buf_release(&t);
}

static void cap_done(void *arg, int cancelled)
{
    struct cap_job *j = arg;
    struct run *r = j->r;
    if (r) {
        r->cap_job = NULL;
        struct fo_err err = j->err;
        int rc = j->rc;
        if (!rc && (cancelled || r->halt || r->e->stopping))
            rc = fo_err_set(&err, FO_E_DRAINING, "the run was stopped");
        if (!rc) {
            cJSON_AddItemToObject(j->b, "capsule", j->cap);
            j->cap = NULL;
            rc = oe_witness(r, "client", "request", LEDGER_NO_PARENT, j->b, -1,
                            0, 0, &err);
            j->b = NULL; /* taken */
        }
        if (rc) {
            fo_err_prefix(&err, "use_capsule_context");
            oe_fail(r, rc, &err); /* nothing written: the run ends */
            oe_step(r);
        }
    }
    cJSON_Delete(j->b);
    cJSON_Delete(j->cap);
    free(j->dir);
    free(j);
}

int oe_capsule_start(struct run *r, cJSON *b, struct fo_err *err)
{
    struct orch_engine *e = r->e;
    struct cap_job *j = calloc(1, sizeof(*j));
    char *dir = orch_strdup(ledger_dir(e->cfg.ledger));
    int rc = j && dir ? FO_OK : oe_nomem(err);
    if (!rc && !e->work)
        rc = orch_work_create(e->cfg.base, &e->work, err);
    if (!rc) {
        *j = (struct cap_job){.r = r, .dir = dir, .b = b, .lim = r->lim};
        rc = orch_work_post(e->work, cap_work, cap_done, j, NULL, err);
    }
    if (rc) {
        cJSON_Delete(b);
        free(dir);
        free(j);
        return rc;
    }
    r->cap_job = j;
    return FO_OK;
}

void oe_capsule_drop(struct run *r)
{
    if (r->cap_job)
        r->cap_job->r = NULL;
    r->cap_job = NULL;
}

/* ---- the action receipt ------------------------------------------------- */

void oe_note_payload(struct run *r, const char *kind, const uint8_t *payload)
{
    if (!strcmp(kind, "request"))
        fo_hex(payload, 32, r->req_payload);
    else if (!strcmp(kind, "answer"))
        fo_hex(payload, 32, r->answer_payload);
}

static int add_model(cJSON *models, const char *m)
{
    if (!m || !*m)
        return 1;
    const cJSON *x;
    cJSON_ArrayForEach (x, models)
        if (!strcmp(x->valuestring, m))
            return 1;
    cJSON *s = cJSON_CreateString(m);
    if (!s)
        return 0;
    cJSON_AddItemToArray(models, s);
    return 1;
}

static int add_hex_or_null(cJSON *o, const char *k, const char *hex)
{
    return hex[0] ? cJSON_AddStringToObject(o, k, hex) != NULL
                  : cJSON_AddNullToObject(o, k) != NULL;
}

/* The receipt's verdict: the run's own (ok, unjudged tasks) and the
 * intent judge's when it judged. */
static int receipt_verdict(const struct run *r, cJSON *v)
{
    int all = r->p != NULL && !r->budget_spent && !r->failed_rc;
    int unjudged = 0;
    for (size_t i = 0; r->p && r->t && i < r->p->n; i++) {
        all &= r->t[i].pass;
        unjudged += r->t[i].unjudged;
    }
    const cJSON *j = r->intent;
    int judged =
        j && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "judged"));
    return cJSON_AddBoolToObject(v, "ok", all) &&
           fo_json_add_int(v, "unjudged", unjudged) &&
           fo_json_add_int(v, "escalations", r->escalations) &&
           fo_json_add_int(v, "retries", r->retries) &&
           (judged ? cJSON_AddStringToObject(v, "intent",
                                             oe_str_of(j, "covers")) != NULL
                   : cJSON_AddNullToObject(v, "intent") != NULL) &&
           (r->judge_seq >= 0
                ? fo_json_add_int(v, "intent_seq", r->judge_seq) != NULL
                : cJSON_AddNullToObject(v, "intent_seq") != NULL);
}

cJSON *oe_receipt(const struct run *r, int64_t size, const char *root_hex)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *ph = o ? cJSON_AddObjectToObject(o, "payload_hashes") : NULL;
    cJSON *models = o ? cJSON_AddArrayToObject(o, "models") : NULL;
    cJSON *cp = o ? cJSON_AddObjectToObject(o, "checkpoint") : NULL;
    cJSON *bu = o ? cJSON_AddObjectToObject(o, "budget") : NULL;
    cJSON *v = o ? cJSON_AddObjectToObject(o, "verdict") : NULL;
    int ok = ph && models && cp && bu && v &&
             cJSON_AddStringToObject(o, "schema", "forum.action-receipt/v1") &&
             fo_json_add_int(o, "run_id", r->id) &&
             fo_json_add_int(o, "first_seq", r->id) &&
             fo_json_add_int(o, "last_seq", r->last_seq) &&
             (r->answer_seq >= 0
                  ? fo_json_add_int(o, "answer_seq", r->answer_seq) != NULL
                  : cJSON_AddNullToObject(o, "answer_seq") != NULL) &&
             add_hex_or_null(ph, "request", r->req_payload) &&
             add_hex_or_null(ph, "answer", r->answer_payload) &&
             fo_json_add_int(cp, "size", size) &&
             cJSON_AddStringToObject(cp, "root", root_hex) &&
             fo_json_add_int(bu, "model_calls", r->calls) &&
             fo_json_add_int(bu, "max_model_calls", r->max_calls) &&
             fo_json_add_int(bu, "max_seconds", r->max_seconds) &&
             cJSON_AddBoolToObject(bu, "spent", r->budget_spent) &&
             receipt_verdict(r, v);
    for (size_t i = 0; ok && r->p && r->t && i < r->p->n; i++)
        ok = add_model(models, r->t[r->p->order[i]].model);
    ok = ok && add_model(models, r->answer_model) &&
         add_model(models, r->intent ? oe_str_of(r->intent, "model") : NULL);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int oe_judgement_json(const struct run *r, cJSON *o)
{
    int ok = fo_json_add_int(o, "retries", r->retries) != NULL;
    if (ok && r->intent)
        ok = cJSON_AddItemToObject(o, "intent", cJSON_Duplicate(r->intent, 1));
    else if (ok)
        ok = cJSON_AddNullToObject(o, "intent") != NULL;
    if (ok && r->checkpoints)
        ok = cJSON_AddItemToObject(o, "checkpoints",
                                   cJSON_Duplicate(r->checkpoints, 1));
    if (ok && r->capsule_hash[0])
        ok =
            cJSON_AddStringToObject(o, "capsule_hash", r->capsule_hash) != NULL;
    if (ok && r->lane_claim)
        ok = cJSON_AddItemToObject(o, "lane_claim",
                                   cJSON_Duplicate(r->lane_claim, 1));
    if (ok && r->profile_check)
        ok = cJSON_AddItemToObject(o, "delivery_profile",
                                   cJSON_Duplicate(r->profile_check, 1));
    return ok ? FO_OK : FO_E_NOMEM;
}
