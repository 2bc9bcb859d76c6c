/* methods_orch: the orchestrator's handlers: route, run_get, run_cancel,
 * the run views, gates and sessions, and the run methods' one entry each
 * (plan, plan_run, submit, run_start, the gate decisions: surf_s_*, on the
 * run engine). The reads use ctx->orch when the host built one, else a
 * default orchestrator (default roster, stub executor) made for the
 * call. */
#include "surfaces/surf.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "daemon/orch_engine.h"
#include "daemon/orch_views.h"
#include "ledger/fo_json.h"
#include "surfaces/surf_int.h"

/* ctx->orch, or a default one in *own (the caller frees it). */
static struct orch_witness ctx_witness(const struct surf_ctx *ctx);

static int get_orch(struct surf_ctx *ctx, struct orch **own,
                    const struct orch **out, struct fo_err *err)
{
    *own = NULL;
    if (ctx->orch) {
        *out = ctx->orch;
        return FO_OK;
    }
    int rc = orch_create(NULL, own, err);
    if (rc == FO_OK)
        *out = *own;
    return rc;
}

int surf_h_route(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err)
{
    const char *text = surf_in_str(in, "text");
    struct orch *own = NULL;
    const struct orch *o = NULL;
    struct orch_route rt = {0};
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc)
        rc = orch_route(orch_roster(o), text, strlen(text), &rt, err);
    if (!rc) {
        *out = orch_route_json(&rt);
        /* the reference's route frame beside the decision */
        cJSON *frame =
            *out ? orch_route_frame(orch_roster(o), text, &rt) : NULL;
        if (!frame || !cJSON_AddItemToObject(*out, "frame", frame)) {
            cJSON_Delete(frame);
            cJSON_Delete(*out);
            *out = NULL;
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        }
    }
    orch_route_release(&rt);
    orch_free(own);
    return rc;
}

static struct orch_witness ctx_witness(const struct surf_ctx *ctx)
{
    return (struct orch_witness){
        .ledger = ctx->ledger,
        .append = ctx->append,
        .hook = ctx->append_hook,
    };
}

/* A run's context limits and delivery profile, the reference's budget
 * fields included: *own (NULL or made here) is the caller's to delete. */
static int run_opts(const cJSON *in, struct orch_submit_opts *o, cJSON **own,
                    struct fo_err *err)
{
    *own = NULL;
    if (surf_ref_context(in, own) != FO_OK)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (*own)
        o->context = *own;
    o->delivery_profile = surf_in_str(in, "delivery_profile");
    o->claim_lane = surf_in_bool(in, "claim_lane", 0);
    return FO_OK;
}

int surf_h_run_get(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err)
{
    return orch_run_get(ctx->ledger, surf_in_int(in, "run", 0), out, err);
}

int surf_h_run_cancel(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err)
{
    int64_t run = surf_in_int(in, "run", 0);
    if (ctx->engine && orch_engine_cancel(ctx->engine, run) == FO_OK) {
        *out = cJSON_CreateObject();
        if (!*out || !fo_json_add_int(*out, "run", run) ||
            !cJSON_AddStringToObject(*out, "state", "running") ||
            !cJSON_AddStringToObject(*out, "cancel", "requested")) {
            cJSON_Delete(*out);
            *out = NULL;
            return fo_err_set(err, FO_E_NOMEM, NULL);
        }
        return FO_OK;
    }
    /* without an orchestrator of the host no run is in progress here */
    return orch_run_cancel(ctx->orch, ctx->ledger, surf_in_int(in, "run", 0),
                           out, err);
}

/* ---- on the run engine (SURF_ON_RUN) ------------------------------------ */

struct run_call {
    surf_reply_fn reply;
    void *arg;
    int start_only; /* run_start: the reply is the start */
    int replied;
};

static void on_run_done(void *arg, int rc, cJSON *out, const struct fo_err *err)
{
    struct run_call *c = arg;
    if (!c->replied)
        c->reply(c->arg, rc, out, err);
    else
        cJSON_Delete(out);
    free(c);
}

static void on_run_started(void *arg, int64_t run)
{
    struct run_call *c = arg;
    if (!c->start_only)
        return;
    c->replied = 1;
    struct fo_err err;
    cJSON *o = cJSON_CreateObject();
    if (!o || !fo_json_add_int(o, "run", run) ||
        !cJSON_AddStringToObject(o, "state", "running")) {
        cJSON_Delete(o);
        c->reply(c->arg, fo_err_set(&err, FO_E_NOMEM, NULL), NULL, &err);
        return;
    }
    c->reply(c->arg, FO_OK, o, NULL);
}

static int start_run(struct surf_ctx *ctx, const char *via, const cJSON *in,
                     int start_only, surf_reply_fn reply, void *arg,
                     struct fo_err *err)
{
    struct run_call *c = calloc(1, sizeof(*c));
    if (!c)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    *c =
        (struct run_call){.reply = reply, .arg = arg, .start_only = start_only};
    struct orch_run_req req = {
        .via = via,
        .request = surf_in_str(in, "request"),
        .plan = cJSON_GetObjectItemCaseSensitive(in, "plan"),
        .opts = {.max_model_calls = (int)surf_in_int(in, "max_model_calls", 0),
                 .max_seconds = (int)surf_in_int(in, "max_seconds", 0),
                 .gates = cJSON_GetObjectItemCaseSensitive(in, "gates"),
                 .session = surf_in_str(in, "session"),
                 .context = cJSON_GetObjectItemCaseSensitive(in, "context"),
                 .intent_judge = surf_in_bool(in, "intent_judge", 0),
                 .checkpoint_each_wave =
                     surf_in_bool(in, "checkpoint_each_wave", 0),
                 .use_capsule_context =
                     surf_in_bool(in, "use_capsule_context", 0)},
        .on_event = ctx->run_event,
        .event_arg = ctx->run_hook,
    };
    cJSON *lim = NULL;
    int rc = run_opts(in, &req.opts, &lim, err);
    if (!rc)
        rc = orch_engine_start(ctx->engine, &req, on_run_started, on_run_done,
                               c, err);
    cJSON_Delete(lim);
    if (rc)
        free(c);
    return rc;
}

int surf_s_plan_run(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                    void *arg, struct fo_err *err)
{
    return start_run(ctx, "plan_run", in, 0, reply, arg, err);
}

int surf_s_plan(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                void *arg, struct fo_err *err)
{
    return start_run(ctx, "plan", in, 0, reply, arg, err);
}

int surf_s_submit(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                  void *arg, struct fo_err *err)
{
    return start_run(ctx, "submit", in, 0, reply, arg, err);
}

int surf_s_run_start(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                     void *arg, struct fo_err *err)
{
    return start_run(ctx, "run_start", in, 1, reply, arg, err);
}

/* ---- approval gates ----------------------------------------------------- */

int surf_h_gate_list(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                     struct fo_err *err)
{
    return orch_gate_list(ctx->ledger, surf_in_int(in, "run", -1), out, err);
}

static struct orch_gate_decision decision_of(const cJSON *in,
                                             const char *decision)
{
    return (struct orch_gate_decision){
        .run = surf_in_int(in, "run_seq", -1),
        .wave = surf_in_int(in, "wave", -1),
        .decision = decision,
        .approver = surf_in_str(in, "approver"),
        .note = surf_in_str(in, "note"),
        .reason = surf_in_str(in, "reason"),
        .edits = cJSON_GetObjectItemCaseSensitive(in, "edits"),
    };
}

static int gate_s(struct surf_ctx *ctx, const cJSON *in, const char *decision,
                  surf_reply_fn reply, void *arg, struct fo_err *err)
{
    struct orch_gate_decision d = decision_of(in, decision);
    return orch_engine_gate(ctx->engine, &d, reply, arg, err);
}

int surf_s_gate_approve(struct surf_ctx *ctx, const cJSON *in,
                        surf_reply_fn reply, void *arg, struct fo_err *err)
{
    return gate_s(ctx, in, "approve", reply, arg, err);
}

int surf_s_gate_edit(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                     void *arg, struct fo_err *err)
{
    return gate_s(ctx, in, "edit", reply, arg, err);
}

int surf_s_gate_reject(struct surf_ctx *ctx, const cJSON *in,
                       surf_reply_fn reply, void *arg, struct fo_err *err)
{
    return gate_s(ctx, in, "reject", reply, arg, err);
}

/* ---- sessions ----------------------------------------------------------- */

int surf_h_session_list(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                        struct fo_err *err)
{
    (void)in;
    return orch_session_list(ctx->ledger, out, err);
}

int surf_h_session_show(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                        struct fo_err *err)
{
    return orch_session_show(ctx->ledger, surf_in_str(in, "session"), out, err);
}

int surf_h_session_fork(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                        struct fo_err *err)
{
    struct orch_witness w = ctx_witness(ctx);
    return orch_session_fork(&w, surf_in_str(in, "session"),
                             surf_in_int(in, "at", -1), surf_in_str(in, "into"),
                             out, err);
}

int surf_h_session_remember(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                            struct fo_err *err)
{
    struct orch_witness w = ctx_witness(ctx);
    if (!orch_session_name_ok(surf_in_str(in, "session")))
        return fo_err_set(err, FO_E_INVALID,
                          "session: 1..64 of [A-Za-z0-9._-]");
    return orch_session_remember(&w, surf_in_str(in, "session"),
                                 surf_in_str(in, "key"),
                                 surf_in_str(in, "value"), out, err);
}

int surf_h_session_forget(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                          struct fo_err *err)
{
    struct orch_witness w = ctx_witness(ctx);
    return orch_session_forget(&w, surf_in_str(in, "session"),
                               surf_in_str(in, "key"), out, err);
}

int surf_h_context_preflight(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                             struct fo_err *err)
{
    struct orch_ctx_limits lim;
    orch_ctx_limits_default(&lim);
    const char *session = surf_in_str(in, "session");
    if (session && !orch_session_name_ok(session))
        return fo_err_set(err, FO_E_INVALID,
                          "session: 1..64 of [A-Za-z0-9._-]");
    int rc = orch_ctx_limits_parse(
        cJSON_GetObjectItemCaseSensitive(in, "context"), &lim, err);
    char *text = NULL;
    cJSON *slices = NULL;
    if (!rc)
        rc = orch_session_context(ctx->ledger, session,
                                  surf_in_str(in, "request"), -1, &lim, &text,
                                  &slices, err);
    if (rc)
        return rc;
    long long total = 0;
    const cJSON *x;
    cJSON_ArrayForEach (x, slices) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(x, "kept_tokens");
        total += cJSON_IsNumber(k) ? (long long)k->valuedouble : 0;
    }
    free(text);
    *out = cJSON_CreateObject();
    if (!*out || !fo_json_add_int(*out, "tokens", total) ||
        !fo_json_add_int(*out, "max_total_tokens", lim.total) ||
        !cJSON_AddItemToObject(*out, "slices", slices)) {
        cJSON_Delete(*out);
        *out = NULL;
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return FO_OK;
}

/* ---- run views ---------------------------------------------------------- */

int surf_h_run_list(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    return orch_run_list(ctx->ledger, surf_in_str(in, "state"),
                         surf_in_str(in, "type"), surf_in_int(in, "before", -1),
                         surf_in_int(in, "since", -1),
                         (int)surf_in_int(in, "limit", 50), out, err);
}

int surf_h_run_show(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err)
{
    struct orch *own = NULL;
    const struct orch *o = NULL;
    int rc = get_orch(ctx, &own, &o, err);
    if (!rc) /* the engine's reducer, against the host's roster */
        rc = orch_run_show(o, ctx->ledger, surf_in_int(in, "run", 0), out, err);
    orch_free(own);
    return rc;
}

/* ---- the model gateway's sessions (daemon/orch_gw.c) -------------------- */

int surf_h_gw_session(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err)
{
    return orch_gw_session_show(ctx->ledger, surf_in_str(in, "session"), out,
                                err);
}
