/* orch_doctor: the runtime inspection, the doctor's checks and the status
 * envelope (orch_views.h). */
#include "daemon/orch_views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "daemon/orch.h"
#include "daemon/orch_int.h"
#include "daemon/orch_model.h"
#include "daemon/orch_sandbox.h"
#include "ledger/fo_json.h"
#include "ledger/fo_version.h"
#include "ledger/proof.h"

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

static const char *const tier_names[] = {"cheap", "capable", "frontier"};

/* ---- the envelope ------------------------------------------------------ */

cJSON *orch_envelope(const char *command, const char *status, cJSON *native)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o && native &&
             cJSON_AddStringToObject(o, "schema",
                                     "project-telos.flagship-action/v1") &&
             cJSON_AddStringToObject(o, "tool", "forum") &&
             cJSON_AddStringToObject(o, "tool_version", FO_VERSION) &&
             cJSON_AddStringToObject(o, "command", command) &&
             cJSON_AddStringToObject(o, "status", status) &&
             cJSON_AddArrayToObject(o, "inputs") &&
             cJSON_AddArrayToObject(o, "outputs") &&
             cJSON_AddArrayToObject(o, "receipts") &&
             cJSON_AddArrayToObject(o, "next_actions") &&
             cJSON_AddArrayToObject(o, "diagnostics");
    if (ok) {
        cJSON_AddItemToObject(o, "native", native);
        return o;
    }
    cJSON_Delete(o);
    cJSON_Delete(native);
    return NULL;
}

static int next_action(cJSON *env, const char *tool, const char *act,
                       const char *reason)
{
    cJSON *a = cJSON_CreateObject();
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(env, "next_actions");
    if (!a || !cJSON_AddItemToArray(arr, a))
        return cJSON_Delete(a), 0;
    return cJSON_AddStringToObject(a, "tool", tool) &&
           cJSON_AddStringToObject(a, "action", act) &&
           cJSON_AddStringToObject(a, "reason", reason) &&
           cJSON_AddArrayToObject(a, "inputs") &&
           cJSON_AddStringToObject(a, "priority", "normal");
}

/* ---- runtime inspection ------------------------------------------------- */

/* {kind, id, source, detail} of one executor. */
static cJSON *spec(const char *kind, const char *id, const char *source,
                   const char *tier)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *d = o ? cJSON_AddObjectToObject(o, "detail") : NULL;
    if (!d || !cJSON_AddStringToObject(o, "kind", kind) ||
        !cJSON_AddStringToObject(o, "id", id) ||
        !cJSON_AddStringToObject(o, "source", source) ||
        (tier && !cJSON_AddStringToObject(d, "tier", tier))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The executor a tier's lanes and roles get: a provider of that tier, one
 * of another tier (fallback), the command, or the stub. */
static cJSON *tier_spec(const struct orch *o, int t)
{
    int a = o->default_api == ORCH_EXEC_ANTHROPIC;
    const char *api = a ? "anthropic" : "chat";
    if (o->models && o->model_has[a][t])
        return spec(api, o->model_names[a][t], "provider", tier_names[t]);
    if (o->models)
        for (int u = 0; u < 3; u++)
            if (o->model_has[a][u])
                return spec("fallback", o->model_names[a][u], tier_names[u],
                            tier_names[t]);
    if (o->argv)
        return spec("cli", o->model, "cmd", tier_names[t]);
    return spec("stub", "stub", "none", tier_names[t]);
}

static cJSON *policy_json(const struct orch *o)
{
    cJSON *p = cJSON_CreateObject();
    cJSON *cats = p ? cJSON_AddArrayToObject(p, "allowed_categories") : NULL;
    int ok =
        cats && fo_json_add_int(p, "max_parallel", o->max_parallel) &&
        cJSON_AddStringToObject(
            p, "sandbox", o->sandbox == ORCH_SANDBOX_NONE ? "none" : "bwrap");
    for (size_t i = 0; ok && i < o->n_allowed; i++)
        ok = cJSON_AddItemToArray(cats, cJSON_CreateString(o->allowed[i]));
    if (!ok) {
        cJSON_Delete(p);
        return NULL;
    }
    return p;
}

int orch_runtime_inspect(const struct orch *o, cJSON **out, struct fo_err *err)
{
    const struct orch_roster *r = orch_roster(o);
    long long counts[3] = {0};
    for (size_t i = 0; i < r->n; i++)
        if (r->lanes[i].tier >= 0 && r->lanes[i].tier < 3)
            counts[r->lanes[i].tier]++;
    cJSON *res = cJSON_CreateObject();
    cJSON *tiers = cJSON_CreateObject();
    cJSON *roster = cJSON_CreateObject();
    cJSON *rt = roster ? cJSON_AddObjectToObject(roster, "tiers") : NULL;
    cJSON *issues = cJSON_CreateArray();
    cJSON *dflt = tier_spec(o, ORCH_TIER_CAPABLE);
    int ok = res && tiers && rt && issues && dflt &&
             fo_json_add_int(roster, "agents", (long long)r->n);
    if (ok) /* the control roles' own executor: no tier detail */
        cJSON_DeleteItemFromObjectCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(dflt, "detail"), "tier");
    for (int t = 0; ok && t < 3; t++)
        ok = cJSON_AddItemToObject(tiers, tier_names[t], tier_spec(o, t)) &&
             fo_json_add_int(rt, tier_names[t], counts[t]);
    if (ok && !o->models && !o->argv)
        ok = cJSON_AddItemToArray(
            issues, cJSON_CreateString("no model provider or command is "
                                       "configured: every role and lane runs "
                                       "on the deterministic stub"));
    cJSON *pol = ok ? policy_json(o) : NULL;
    ok = ok && pol &&
         cJSON_AddStringToObject(res, "schema", "forum.runtime.inspect/v1") &&
         cJSON_AddBoolToObject(res, "ready", cJSON_GetArraySize(issues) == 0);
    if (!ok) {
        cJSON_Delete(res);
        cJSON_Delete(tiers);
        cJSON_Delete(roster);
        cJSON_Delete(issues);
        cJSON_Delete(dflt);
        cJSON_Delete(pol);
        return nomem(err);
    }
    cJSON_AddItemToObject(res, "default", dflt);
    cJSON_AddItemToObject(res, "tiers", tiers);
    cJSON_AddItemToObject(res, "roster", roster);
    cJSON_AddItemToObject(res, "policy", pol);
    cJSON_AddItemToObject(res, "issues", issues);
    *out = res;
    return FO_OK;
}

/* ---- the doctor ---------------------------------------------------------- */

/* Adds a check {name, status, detail, ...extra} and, when it failed, a
 * diagnostic {code, message}. Returns 0 when out of memory. */
static int check(cJSON *checks, cJSON *diags, const char *name, int pass,
                 const char *detail, cJSON *extra)
{
    cJSON *c = extra ? extra : cJSON_CreateObject();
    if (!c || !cJSON_AddItemToArray(checks, c))
        return cJSON_Delete(c), 0;
    if (!cJSON_AddStringToObject(c, "name", name) ||
        !cJSON_AddStringToObject(c, "status", pass ? "MATCH" : "DRIFT") ||
        !cJSON_AddStringToObject(c, "detail", detail))
        return 0;
    if (pass)
        return 1;
    cJSON *d = cJSON_CreateObject();
    if (!d || !cJSON_AddItemToArray(diags, d))
        return cJSON_Delete(d), 0;
    return cJSON_AddStringToObject(d, "code", name) &&
           cJSON_AddStringToObject(d, "message", detail);
}

static int check_providers(const struct orch *o, int timeout_ms, cJSON *checks,
                           cJSON *diags)
{
    size_t n = orch_model_providers(o->models);
    int ok = 1;
    if (!n)
        return check(checks, diags, "providers", 1,
                     "no model provider is configured: every role runs on "
                     "the stub",
                     NULL);
    for (size_t i = 0; ok && i < n; i++) {
        char url[1024], detail[FO_ERR_MSG_MAX + 1600];
        orch_model_provider_url(o->models, i, url, sizeof(url));
        struct orch_model_reply rep;
        struct fo_err e;
        fo_err_clear(&e);
        int rc = orch_model_probe(o->models, i, timeout_ms, &rep, &e);
        if (rc)
            snprintf(detail, sizeof(detail),
                     "provider %zu (%s) at %s does not answer: %s", i,
                     rep.provider[0] ? rep.provider : rep.model, url,
                     e.msg[0] ? e.msg : fo_code_message(rc));
        else
            snprintf(detail, sizeof(detail), "provider %zu (%s) at %s answered",
                     i, rep.provider, url);
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddStringToObject(x, "url", url) &&
             fo_json_add_int(x, "provider", (long long)i) &&
             fo_json_add_int(x, "http_status", rep.http_status);
        if (ok)
            ok = check(checks, diags, "provider", rc == FO_OK, detail, x);
        else
            cJSON_Delete(x);
        orch_model_reply_release(&rep);
    }
    return ok;
}

/* A file of the data dir must not be readable by group or others. */
static int check_mode(const char *dir, const char *file, cJSON *checks,
                      cJSON *diags)
{
    char path[4096], detail[4300];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int pass = 1;
    if (stat(path, &st) != 0) {
        snprintf(detail, sizeof(detail), "%s: not made yet", path);
    } else {
        pass = !(st.st_mode & 077);
        snprintf(detail, sizeof(detail), "%s: mode %04o%s", path,
                 (unsigned)(st.st_mode & 07777),
                 pass ? "" : ": group or others may read it (chmod 600)");
    }
    return check(checks, diags,
                 !strcmp(file, "token") ? "token_mode" : "key_mode", pass,
                 detail, NULL);
}

static int check_store(struct ledger *l, cJSON *checks, cJSON *diags)
{
    struct ledger_verify_result res;
    struct fo_err e;
    char detail[FO_ERR_MSG_MAX + 128];
    int rc = ledger_verify(l, 0, NULL, NULL, &res, &e);
    if (rc)
        snprintf(detail, sizeof(detail), "the store cannot be read: %s", e.msg);
    else if (!res.ok)
        snprintf(detail, sizeof(detail),
                 "the chain does not verify: %s at seq %lld", res.reason,
                 (long long)res.first_bad_seq);
    else
        snprintf(detail, sizeof(detail), "%s store opens; %lld entries verify",
                 ledger_store_name(l), (long long)res.entries);
    return check(checks, diags, "store", !rc && res.ok, detail, NULL);
}

static int check_disk(const char *dir, cJSON *checks, cJSON *diags)
{
    struct statvfs vs;
    char detail[4300];
    int pass = 0;
    long long free_b = -1;
    if (statvfs(dir, &vs) == 0) {
        free_b = (long long)vs.f_bavail * (long long)vs.f_frsize;
        pass = free_b >= ORCH_DOCTOR_DISK_MIN;
    }
    snprintf(detail, sizeof(detail), "%s: %lld MiB free (at least %lld wanted)",
             dir, free_b < 0 ? -1 : free_b >> 20, ORCH_DOCTOR_DISK_MIN >> 20);
    cJSON *x = cJSON_CreateObject();
    if (!x || !fo_json_add_int(x, "free_bytes", free_b))
        return cJSON_Delete(x), 0;
    return check(checks, diags, "disk", pass, detail, x);
}

int orch_doctor(const struct orch *o, struct ledger *l, int timeout_ms,
                cJSON **out, struct fo_err *err)
{
    const char *dir = ledger_dir(l);
    cJSON *native = cJSON_CreateObject();
    cJSON *checks = native ? cJSON_AddArrayToObject(native, "checks") : NULL;
    cJSON *diags = cJSON_CreateArray();
    int ok = checks && diags &&
             check_providers(o, timeout_ms ? timeout_ms : 15000, checks, diags);
    if (ok && o->sandbox == ORCH_SANDBOX_NONE) {
        ok = check(checks, diags, "sandbox", 1,
                   "sandbox none (configured): run_command runs programs "
                   "unconfined",
                   NULL);
    } else if (ok) {
        char why[512] = "", detail[600];
        int can = orch_sandbox_available(why, sizeof(why));
        snprintf(detail, sizeof(detail), "%s%s",
                 can ? "bubblewrap makes a sandbox"
                     : "no sandbox can be made: ",
                 can ? "" : why);
        ok = check(checks, diags, "sandbox", can, detail, NULL);
    }
    ok = ok && check_store(l, checks, diags) &&
         check_mode(dir, "token", checks, diags) &&
         check_mode(dir, "checkpoint.key", checks, diags) &&
         check_disk(dir, checks, diags);
    int drift = cJSON_GetArraySize(diags) > 0;
    cJSON *env =
        ok ? orch_envelope("doctor", drift ? "DRIFT" : "MATCH", native) : NULL;
    if (!ok)
        cJSON_Delete(native);
    if (env) {
        cJSON_ReplaceItemInObjectCaseSensitive(env, "diagnostics", diags);
        diags = NULL;
    }
    cJSON_Delete(diags);
    if (!env || !next_action(env, "forum", drift ? "doctor" : "status",
                             drift ? "fix the checks that drift, then run "
                                     "forum doctor again"
                                   : "every check passes")) {
        cJSON_Delete(env);
        return nomem(err);
    }
    *out = env;
    return FO_OK;
}

/* ---- status ------------------------------------------------------------ */

/* The reference's MCP tool names that forum answers (surfaces/methods_ref.c
 * holds the aliases). */
static const char *const ref_tools[] = {
    "forum.route",           "forum.submit",           "forum.prose.humanize",
    "forum.prose.contract",  "forum.status",           "forum.doctor",
    "forum.ledger.summary",  "forum.ledger.capsule",   "forum.run.room",
    "forum.runtime.inspect", "forum.context.preflight"};
static const char *const ref_commands[] = {"status", "doctor", "demo", "mcp"};

struct runs {
    struct ledger *l;
    int64_t seqs[ORCH_STATUS_RUNS];
    size_t n;
};

static int a_run(void *arg, const struct ledger_entry *e)
{
    struct runs *r = arg;
    r->seqs[r->n % ORCH_STATUS_RUNS] = e->seq;
    r->n++;
    return 0;
}

static int strings_into(cJSON *o, const char *k, const char *const *s, size_t n)
{
    cJSON *a = cJSON_AddArrayToObject(o, k);
    for (size_t i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateString(s[i])))
            return 0;
    return a != NULL;
}

/* runs by state among the last ORCH_STATUS_RUNS requests. */
static int runs_by_state(struct ledger *l, cJSON *native, struct fo_err *err)
{
    struct runs *r = calloc(1, sizeof(*r));
    if (!r)
        return nomem(err);
    int rc = ledger_requests(l, 0, a_run, r, err);
    cJSON *by = rc ? NULL : cJSON_AddObjectToObject(native, "runs");
    size_t k = r->n < ORCH_STATUS_RUNS ? r->n : ORCH_STATUS_RUNS;
    for (size_t i = 0; !rc && by && i < k; i++) {
        cJSON *g = NULL;
        struct fo_err e;
        if (orch_run_get(l, r->seqs[(r->n - k + i) % ORCH_STATUS_RUNS], &g,
                         &e) != FO_OK)
            continue; /* a plan's request: not a run */
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(g, "state");
        const char *s = cJSON_IsString(st) ? st->valuestring : "unknown";
        cJSON *c = cJSON_GetObjectItemCaseSensitive(by, s);
        if (c)
            cJSON_SetNumberValue(c, c->valuedouble + 1);
        else if (!fo_json_add_int(by, s, 1))
            rc = nomem(err);
        cJSON_Delete(g);
    }
    if (!rc && !by)
        rc = nomem(err);
    free(r);
    return rc;
}

int orch_operator_status(struct ledger *l, cJSON **out, struct fo_err *err)
{
    int64_t n = 0;
    uint8_t root[32];
    char hex[65];
    int rc = ledger_tree_head(l, &n, root, err);
    if (rc)
        return rc;
    fo_hex(root, 32, hex);
    cJSON *native = cJSON_CreateObject();
    cJSON *gl = NULL;
    if (!native)
        return nomem(err);
    rc = runs_by_state(l, native, err);
    if (!rc)
        rc = orch_gate_list(l, -1, &gl, err);
    int ok =
        !rc &&
        cJSON_AddStringToObject(native, "role", "orchestration-routing") &&
        cJSON_AddStringToObject(native, "ledger", "forum-ledger/1") &&
        fo_json_add_int(native, "entries", n) &&
        cJSON_AddStringToObject(native, "checkpoint", hex) &&
        fo_json_add_int(native, "gates_waiting",
                        cJSON_GetArraySize(
                            cJSON_GetObjectItemCaseSensitive(gl, "gates"))) &&
        strings_into(native, "operator_commands", ref_commands,
                     sizeof(ref_commands) / sizeof(*ref_commands)) &&
        strings_into(native, "mcp_tools", ref_tools,
                     sizeof(ref_tools) / sizeof(*ref_tools));
    cJSON_Delete(gl);
    if (rc) {
        cJSON_Delete(native);
        return rc;
    }
    cJSON *env = ok ? orch_envelope("status", "MATCH", native) : NULL;
    if (!ok)
        cJSON_Delete(native);
    if (!env || !next_action(env, "forum", "doctor",
                             "check the providers, sandbox, store and disk")) {
        cJSON_Delete(env);
        return nomem(err);
    }
    *out = env;
    return FO_OK;
}
