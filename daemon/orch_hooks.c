/* orch_hooks: a lane's verifier and reviser, the plug-in points of the
 * control loop. Each is an external command or an http(s):// URL given the
 * task and its answer as one JSON object (forum.hook-input/v1): the
 * command as its last argument (run like run_command: an event-driven job
 * in its own process group under the sandbox, never a shell, never on a
 * thread of the loop), the URL as a POST body (the HTTP client on the
 * loop; an https server verified with the engine's TLS context, made at
 * its start when a lane has an https hook). Nothing either says is
 * trusted: a reply that is not the expected JSON is a failure, and every
 * call is witnessed.
 *
 * The reviser runs once per result, before its verdict: `revision`
 * [reviser] → result {id, ok, by, hook, output | error}; an ok revision's
 * output is what the verdict judges and what downstream tasks get. The
 * verifier runs on a passed verdict: `verification` [verifier] → verdict
 * {id, ok, by, hook, reason?, failed}; a failing or broken verifier is a
 * failed check (a same-tier retry, then a tier escalation, as a failed
 * verdict). */
#include "daemon/orch_engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define HOOK_INPUT_TEXT (64u * 1024u) /* of the output and the request */
#define HOOK_REPLY_MAX (1024u * 1024u)
#define HOOK_OUTPUT_MAX (256u * 1024u)

/* ---- configuration ------------------------------------------------------ */

void orch_hook_release(struct orch_hook *h)
{
    for (size_t i = 0; h->argv && h->argv[i]; i++)
        free(h->argv[i]);
    free(h->argv);
    free(h->url);
    memset(h, 0, sizeof(*h));
}

static int hook_bad(struct fo_err *err, const char *label, const char *field,
                    const char *why)
{
    return fo_err_set(err, FO_E_INVALID, "roster: %s: %s: %s", label, field,
                      why);
}

static int hook_command(const cJSON *c, const char *label, const char *field,
                        struct orch_hook *h, struct fo_err *err)
{
    int n = cJSON_GetArraySize(c);
    if (!cJSON_IsArray(c) || n < 1 || n > ORCH_HOOK_ARGS_MAX)
        return hook_bad(err, label, field,
                        "command: must be a list of 1..32 strings");
    h->argv = calloc((size_t)n + 1, sizeof(char *));
    if (!h->argv)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    for (int i = 0; i < n; i++) {
        const cJSON *a = cJSON_GetArrayItem(c, i);
        if (!cJSON_IsString(a) || !a->valuestring[0] ||
            strlen(a->valuestring) > 4096)
            return hook_bad(err, label, field,
                            "command: each argument a string of 1..4096 "
                            "bytes");
        if (!(h->argv[i] = orch_strdup(a->valuestring)))
            return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return FO_OK;
}

int orch_hook_parse(const cJSON *lane, const char *label, const char *field,
                    struct orch_hook *h, struct fo_err *err)
{
    memset(h, 0, sizeof(*h));
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(lane, field);
    if (!o)
        return FO_OK;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "command");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "url");
    if (!cJSON_IsObject(o) || !c == !u)
        return hook_bad(err, label, field,
                        "must be {\"command\": [...]} or {\"url\": ...}");
    const cJSON *x;
    cJSON_ArrayForEach (x, o)
        if (strcmp(x->string, "command") && strcmp(x->string, "url") &&
            strcmp(x->string, "timeout_s"))
            return hook_bad(err, label, field,
                            "unknown key (command, url, timeout_s)");
    long long ts = ORCH_HOOK_TIMEOUT_MS / 1000;
    int g = fo_json_get_int(o, "timeout_s", 1, 3600, &ts);
    if (g != FO_OK && g != FO_E_NOT_FOUND)
        return hook_bad(err, label, field, "timeout_s: 1..3600");
    h->timeout_ms = (int)ts * 1000;
    int rc;
    if (c) {
        rc = hook_command(c, label, field, h, err);
    } else {
        struct httpc_url pu;
        struct fo_err uerr;
        if (!cJSON_IsString(u) ||
            httpc_url_parse(u->valuestring, &pu, &uerr) != FO_OK)
            return hook_bad(err, label, field,
                            "url: not an http:// or https:// URL");
        h->tls = pu.tls;
        httpc_url_release(&pu);
        rc = (h->url = orch_strdup(u->valuestring))
                 ? FO_OK
                 : fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (rc)
        orch_hook_release(h);
    return rc;
}

cJSON *orch_hook_json(const struct orch_hook *h)
{
    if (!h->argv && !h->url)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    if (ok && h->url) {
        ok = cJSON_AddStringToObject(o, "url", h->url) != NULL;
    } else if (ok) {
        cJSON *a = cJSON_AddArrayToObject(o, "command");
        ok = a != NULL;
        for (size_t i = 0; ok && h->argv[i]; i++) {
            cJSON *s = cJSON_CreateString(h->argv[i]);
            ok = s != NULL;
            if (s)
                cJSON_AddItemToArray(a, s);
        }
    }
    ok = ok && fo_json_add_int(o, "timeout_s", h->timeout_ms / 1000);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- a hook call -------------------------------------------------------- */

struct hook_ctx {
    struct effect f; /* first: oe_effect_cancel frees it */
    int verifier;
    struct httpc_url url; /* during the request's start only */
};

const struct orch_lane *oe_task_lane(const struct run *r, size_t t)
{
    return orch_roster_find(orch_roster(r->e->o), r->p->tasks[t].agent);
}

static long task_named(const struct run *r, const char *id)
{
    for (size_t i = 0; id && r->p && i < r->p->n; i++)
        if (!strcmp(r->p->tasks[i].id, id))
            return (long)i;
    return -1;
}

static int add_cut(cJSON *o, const char *k, const char *s, size_t len)
{
    size_t n = orch_utf8_prefix(s ? s : "", s ? len : 0, HOOK_INPUT_TEXT);
    char *c = malloc(n + 1);
    if (!c)
        return 0;
    if (n)
        memcpy(c, s, n);
    c[n] = '\0';
    int ok = cJSON_AddStringToObject(o, k, c) != NULL &&
             (n == len || cJSON_AddTrueToObject(o, "truncated"));
    free(c);
    return ok;
}

/* The hook's input: {schema, hook, run, request, task: {id, agent,
 * instruction, done_when?}, answer}, canonical JSON. */
static int hook_input(const struct run *r, size_t t, int verifier,
                      struct fo_buf *out, struct fo_err *err)
{
    const struct orch_task *k = &r->p->tasks[t];
    const struct task *s = &r->t[t];
    cJSON *o = cJSON_CreateObject();
    cJSON *tk = o ? cJSON_AddObjectToObject(o, "task") : NULL;
    int ok =
        tk && cJSON_AddStringToObject(o, "schema", "forum.hook-input/v1") &&
        cJSON_AddStringToObject(o, "hook", verifier ? "verifier" : "reviser") &&
        fo_json_add_int(o, "run", r->id) &&
        add_cut(o, "request", r->request,
                r->request ? strlen(r->request) : 0) &&
        cJSON_AddStringToObject(tk, "id", k->id) &&
        cJSON_AddStringToObject(tk, "agent", k->agent) &&
        cJSON_AddStringToObject(tk, "instruction", k->instruction) &&
        (!k->done ||
         cJSON_AddItemToObject(tk, "done_when", cJSON_Duplicate(k->done, 1))) &&
        fo_json_add_int(tk, "exit_code", s->exit_code) &&
        add_cut(o, "answer", s->output, s->output_len);
    int rc = ok ? fo_json_canon(o, out, err) : oe_nomem(err);
    cJSON_Delete(o);
    return rc;
}

/* The entry: a verification or a revision. */
static void hook_entry(struct run *r, size_t t, int verifier, int ok,
                       const char *text, const char *reason,
                       const cJSON *failed)
{
    const struct orch_lane *ln = oe_task_lane(r, t);
    const struct orch_hook *h = verifier ? &ln->verifier : &ln->reviser;
    struct task *s = &r->t[t];
    struct fo_err err;
    cJSON *e = cJSON_CreateObject();
    int good =
        e && cJSON_AddStringToObject(e, "id", r->p->tasks[t].id) &&
        cJSON_AddBoolToObject(e, "ok", ok) &&
        cJSON_AddStringToObject(e, "by", h->url ? "url" : "command") &&
        cJSON_AddStringToObject(e, "hook", h->url ? h->url : h->argv[0]) &&
        (!reason || !*reason || cJSON_AddStringToObject(e, "reason", reason));
    if (good && verifier) {
        cJSON *f = failed ? cJSON_Duplicate(failed, 1) : cJSON_CreateArray();
        if (f && !ok && cJSON_GetArraySize(f) == 0) {
            char line[600];
            snprintf(line, sizeof(line), "verifier: %s",
                     reason && *reason ? reason : "it did not pass");
            cJSON *one = cJSON_CreateString(line);
            if (one)
                cJSON_AddItemToArray(f, one);
        }
        good = f && cJSON_AddItemToObject(e, "failed", f);
    } else if (good) {
        good = ok ? cJSON_AddStringToObject(e, "output", text) != NULL
                  : cJSON_AddStringToObject(e, "error", text) != NULL;
    }
    int rc = good ? oe_witness(r, verifier ? "verifier" : "reviser",
                               verifier ? "verification" : "revision",
                               verifier ? s->verdict_seq : s->result_seq, e,
                               (long)t, 0, 0, &err)
                  : (cJSON_Delete(e), oe_nomem(&err));
    if (rc)
        oe_fail(r, rc, &err);
}

/* What the hook said (its stdout or response body): a verdict {ok,
 * reason?, failed?} or a revision {answer}. */
static void hook_reply(struct run *r, size_t t, int verifier, const char *text,
                       size_t len)
{
    cJSON *j = NULL;
    struct fo_err why;
    const char *what = verifier ? "the verifier" : "the reviser";
    char msg[FO_ERR_MSG_MAX + 64];
    if (fo_json_parse(text, len, &j, &why) != FO_OK || !cJSON_IsObject(j)) {
        snprintf(msg, sizeof(msg), "%s's reply is not a JSON object", what);
        hook_entry(r, t, verifier, 0, msg, msg, NULL);
        cJSON_Delete(j);
        return;
    }
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(j, "ok");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(j, "reason");
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(j, "failed");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(j, "answer");
    const char *reason = cJSON_IsString(re) ? re->valuestring : NULL;
    int fl_ok = !fl || cJSON_IsArray(fl);
    const cJSON *x;
    cJSON_ArrayForEach (x, fl)
        fl_ok &= cJSON_IsString(x);
    if (verifier && (!cJSON_IsBool(ok) || !fl_ok)) {
        snprintf(msg, sizeof(msg),
                 "the verifier's reply is not a verdict ({\"ok\": true|false, "
                 "\"reason\"?, \"failed\"?: [strings]})");
        hook_entry(r, t, 1, 0, msg, msg, NULL);
    } else if (verifier) {
        hook_entry(r, t, 1, cJSON_IsTrue(ok), NULL, reason, fl);
    } else if (!cJSON_IsString(an) ||
               strlen(an->valuestring) > HOOK_OUTPUT_MAX) {
        snprintf(msg, sizeof(msg),
                 "the reviser's reply has no \"answer\" string (of at most "
                 "%u bytes)",
                 HOOK_OUTPUT_MAX);
        hook_entry(r, t, 0, 0, msg, NULL, NULL);
    } else {
        hook_entry(r, t, 0, 1, an->valuestring, reason, NULL);
    }
    cJSON_Delete(j);
}

static void hook_over(struct hook_ctx *c, struct run **r, size_t *t,
                      int *verifier)
{
    *r = c->f.r;
    *t = (size_t)c->f.task;
    *verifier = c->verifier;
    (*r)->t[*t].eff = NULL;
    (*r)->t[*t].busy = 0;
    free(c);
}

static void on_hook_job(void *arg, int rc, struct orch_result *res,
                        const struct fo_err *jerr)
{
    struct run *r;
    size_t t;
    int v;
    hook_over(arg, &r, &t, &v);
    char msg[FO_ERR_MSG_MAX + 400];
    const char *what = v ? "the verifier" : "the reviser";
    if (rc != FO_OK) {
        snprintf(msg, sizeof(msg), "%s could not run: %s", what,
                 jerr ? jerr->msg : "failed");
        hook_entry(r, t, v, 0, msg, msg, NULL);
    } else if (!res->ok) {
        size_t el = res->errout
                        ? orch_utf8_prefix(res->errout, res->errout_len, 300)
                        : 0;
        if (res->timed_out)
            snprintf(msg, sizeof(msg), "%s timed out", what);
        else
            snprintf(msg, sizeof(msg), "%s exited with %d%s%.*s", what,
                     res->exit_code, el ? ": " : "", (int)el,
                     el ? res->errout : "");
        hook_entry(r, t, v, 0, msg, msg, NULL);
    } else {
        hook_reply(r, t, v, res->output ? res->output : "", res->output_len);
    }
    oe_step(r);
}

static void on_hook_http(void *arg, struct httpc_result *res)
{
    struct run *r;
    size_t t;
    int v;
    hook_over(arg, &r, &t, &v);
    char msg[FO_ERR_MSG_MAX + 64];
    const char *what = v ? "the verifier" : "the reviser";
    size_t len = evbuffer_get_length(res->body);
    if (res->end != HTTPC_END_OK) {
        snprintf(msg, sizeof(msg), "%s: %s", what, res->err.msg);
        hook_entry(r, t, v, 0, msg, msg, NULL);
    } else if (res->status != 200) {
        snprintf(msg, sizeof(msg), "%s answered HTTP %d", what, res->status);
        hook_entry(r, t, v, 0, msg, msg, NULL);
    } else {
        const char *body = (const char *)evbuffer_pullup(res->body, -1);
        hook_reply(r, t, v, body ? body : "", body ? len : 0);
    }
    oe_step(r);
}

static int hook_command_start(struct run *r, struct hook_ctx *c,
                              const struct orch_hook *h, const char *input,
                              struct fo_err *err)
{
    const struct orch *o = r->e->o;
    int none = orch_sandbox_mode(o) == ORCH_SANDBOX_NONE;
    char why[256];
    if (!none && !orch_sandbox_available(why, sizeof(why)))
        return fo_err_set(err, FO_E_UNAVAILABLE,
                          "the sandbox cannot be made (%.200s)", why);
    struct orch_sandbox sb;
    orch_tool_sandbox(o, NULL, 0, &sb);
    sb.profile = ORCH_SANDBOX_MODEL; /* no workspace: a fresh /tmp */
    struct orch_exec_config cfg = {
        .kind = ORCH_EXEC_CLI,
        .argv = (const char *const *)h->argv,
        .box = none ? NULL : &sb,
        .env = orch_child_env(o),
        .timeout_ms = h->timeout_ms,
        .output_max = HOOK_REPLY_MAX,
        .model = "hook",
    };
    return orch_job_start(&cfg, r->e->cfg.base, input, on_hook_job, c,
                          &c->f.job, err);
}

static int hook_url_start(struct run *r, struct hook_ctx *c,
                          const struct orch_hook *h, const struct fo_buf *in,
                          struct fo_err *err)
{
    int rc = httpc_url_parse(h->url, &c->url, err);
    if (rc)
        return rc;
    static const struct httpc_header hdr[] = {
        {"Content-Type", "application/json"}, {"Accept", "application/json"}};
    struct httpc_spec spec = {.method = HTTPC_POST,
                              .url = &c->url,
                              .headers = hdr,
                              .n_headers = 2,
                              .body = in->data,
                              .body_len = in->len,
                              .dns = r->e->cfg.dns,
                              .tls = r->e->hook_tls,
                              .timeout_ms = h->timeout_ms,
                              .body_max = HOOK_REPLY_MAX,
                              .done = on_hook_http,
                              .arg = c};
    rc = httpc_req_start(r->e->cfg.base, &spec, &c->f.http, err);
    httpc_url_release(&c->url); /* read during the start only */
    return rc;
}

int oe_hook_start(struct run *r, size_t t, int verifier, struct fo_err *err)
{
    const struct orch_lane *ln = oe_task_lane(r, t);
    const struct orch_hook *h = verifier ? &ln->verifier : &ln->reviser;
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    int rc = hook_input(r, t, verifier, &in, err);
    struct hook_ctx *c = rc ? NULL : calloc(1, sizeof(*c));
    if (!rc && !c)
        rc = oe_nomem(err);
    if (!rc) {
        c->f = (struct effect){.kind = E_TASK_JOB, .r = r, .task = (long)t};
        c->verifier = verifier;
        rc = h->url ? hook_url_start(r, c, h, &in, err)
                    : hook_command_start(r, c, h, in.data, err);
    }
    fo_buf_release(&in);
    if (rc == FO_E_NOMEM) {
        free(c);
        return rc;
    }
    if (rc) { /* a hook that cannot start is a failed call, witnessed */
        free(c);
        char msg[FO_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof(msg), "the %s could not start: %s",
                 verifier ? "verifier" : "reviser", err->msg);
        hook_entry(r, t, verifier, 0, msg, msg, NULL);
        return FO_OK;
    }
    r->t[t].eff = &c->f;
    r->t[t].busy = 1;
    return FO_OK;
}

/* ---- the reducer's part ------------------------------------------------- */

int oe_apply_revision(struct run *r, int64_t seq, int64_t parent,
                      const cJSON *b, struct fo_err *err)
{
    long t = task_named(r, oe_str_of(b, "id"));
    if (t < 0 || r->t[t].result_seq != parent || r->t[t].st != TS_RESULT)
        return fo_err_set(err, FO_E_CORRUPT,
                          "run history: entry %lld: a revision without its "
                          "result",
                          (long long)seq);
    struct task *s = &r->t[t];
    s->revised = 1;
    const char *out = oe_str_of(b, "output");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ok")) && out &&
        s->ran_ok) {
        char *copy = orch_strdup(out);
        if (!copy)
            return oe_nomem(err);
        free(s->output);
        s->output = copy;
        s->output_len = strlen(copy);
    }
    return FO_OK;
}

int oe_apply_verification(struct run *r, int64_t seq, int64_t parent,
                          const cJSON *b, struct fo_err *err)
{
    long t = task_named(r, oe_str_of(b, "id"));
    if (t < 0 || r->t[t].verdict_seq != parent || r->t[t].st != TS_VERIFY)
        return fo_err_set(err, FO_E_CORRUPT,
                          "run history: entry %lld: a verification without "
                          "its passed verdict",
                          (long long)seq);
    struct task *s = &r->t[t];
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ok"))) {
        s->st = TS_FINAL;
        return FO_OK;
    }
    /* a failed check: the verification is the verdict a retry or an
     * escalation answers */
    s->pass = 0;
    s->verdict_seq = seq;
    cJSON_Delete(s->failed);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(b, "failed");
    s->failed = cJSON_IsArray(f) ? cJSON_Duplicate(f, 1) : cJSON_CreateArray();
    if (!s->failed)
        return oe_nomem(err);
    s->st = oe_retry_left(r, (size_t)t) || oe_next_tier(r, (size_t)t)
                ? TS_VERDICT
                : TS_FINAL;
    return FO_OK;
}
