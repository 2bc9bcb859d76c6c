/* orch_views: the context capsule and the run room (orch_views.h), read
 * from the ledger alone. Both are deterministic: the same ledger gives the
 * same bytes, whatever the process or the time. */
#include "daemon/orch_views.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"
#include "ledger/proof.h"

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

/* s cut to max characters (code points): "..." ends a cut text; max <= 3
 * gives max dots. Never splits a character. NULL when out of memory. */
static char *clip(const char *s, int max)
{
    if (!s)
        s = "";
    size_t chars = 0, cut = 0;
    int keep = max > 3 ? max - 3 : 0;
    for (const char *p = s; *p; p++)
        if (((unsigned char)*p & 0xC0) != 0x80) {
            if ((int)chars == keep)
                cut = (size_t)(p - s);
            chars++;
        }
    if ((long long)chars <= max)
        return strdup(s);
    if (max <= 3) {
        char *d = calloc((size_t)max + 1, 1);
        if (d)
            memset(d, '.', (size_t)max);
        return d;
    }
    char *d = malloc(cut + 4);
    if (d) {
        memcpy(d, s, cut);
        memcpy(d + cut, "...", 4);
    }
    return d;
}

static int add_clip(cJSON *o, const char *k, const char *s, int max)
{
    char *c = clip(s, max);
    int ok = c && cJSON_AddStringToObject(o, k, c);
    free(c);
    return ok;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jfalse(const cJSON *o, const char *k)
{
    return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, k));
}

static int jtrue(const cJSON *o, const char *k)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* A verdict's ok as the reference had it: ok itself, or forum's pass when
 * the validator judged; absent (-1) when nobody judged. */
static int verdict_ok(const cJSON *v)
{
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(v, "ok");
    if (cJSON_IsBool(ok))
        return cJSON_IsTrue(ok);
    if (jfalse(v, "judged"))
        return -1;
    const cJSON *pass = cJSON_GetObjectItemCaseSensitive(v, "pass");
    return cJSON_IsBool(pass) ? cJSON_IsTrue(pass) : -1;
}

/* ---- signals ----------------------------------------------------------- */

struct signals {
    long long budget_stops, context_checks, context_saved, failed_results,
        failed_verdicts, flagged_delivery, profile_checks, flagged_profiles,
        flagged_intent, refuted, verifications_ran, intent_drift;
};

/* Counts one entry of kind with body b (may be NULL) into s. */
static void signal_of(struct signals *s, const char *kind, const cJSON *b)
{
    long long v;
    if (!strcmp(kind, "budget")) {
        s->budget_stops++;
    } else if (!strcmp(kind, "context_budget")) {
        s->context_checks++;
        long long from = 0, to = 0;
        if (fo_json_get_int(b, "original_tokens", 0, INT64_MAX, &v) == FO_OK ||
            fo_json_get_int(b, "tokens", 0, INT64_MAX, &v) == FO_OK)
            from = v;
        if (fo_json_get_int(b, "admitted_tokens", 0, INT64_MAX, &v) == FO_OK ||
            fo_json_get_int(b, "kept_tokens", 0, INT64_MAX, &v) == FO_OK)
            to = v;
        s->context_saved += from - to;
    } else if (!strcmp(kind, "result")) {
        s->failed_results += jstr(b, "id") && jfalse(b, "ok");
    } else if (!strcmp(kind, "verdict")) {
        s->failed_verdicts += verdict_ok(b) == 0;
    } else if (!strcmp(kind, "delivery_check")) {
        s->flagged_delivery += jtrue(b, "flagged");
    } else if (!strcmp(kind, "delivery_profile_check")) {
        s->profile_checks++;
        s->flagged_profiles += jtrue(b, "flagged");
    } else if (!strcmp(kind, "intent_check")) {
        s->flagged_intent += jtrue(b, "flagged");
    } else if (!strcmp(kind, "verification")) {
        s->refuted += jfalse(b, "ok");
        s->verifications_ran +=
            cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(b, "ok"));
    } else if (!strcmp(kind, "intent_judgment")) {
        s->intent_drift += jfalse(b, "ok");
    }
}

static cJSON *signals_json(const struct signals *s, int room)
{
    cJSON *o = cJSON_CreateObject();
    int ok =
        o && fo_json_add_int(o, "budget_stops", s->budget_stops) &&
        fo_json_add_int(o, "context_budget_checks", s->context_checks) &&
        fo_json_add_int(o, "context_tokens_saved", s->context_saved) &&
        fo_json_add_int(o, "failed_results", s->failed_results) &&
        fo_json_add_int(o, "failed_verdicts", s->failed_verdicts) &&
        fo_json_add_int(o, "flagged_delivery", s->flagged_delivery) &&
        fo_json_add_int(o, "flagged_delivery_profiles", s->flagged_profiles) &&
        fo_json_add_int(o, "flagged_intent", s->flagged_intent) &&
        fo_json_add_int(o, "refuted_verifications", s->refuted) &&
        (!room ||
         (fo_json_add_int(o, "delivery_profile_checks", s->profile_checks) &&
          fo_json_add_int(o, "verifications_ran", s->verifications_ran) &&
          fo_json_add_int(o, "intent_drift_judged", s->intent_drift)));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Whether a kind's body is read at all (the others are only counted). */
static int body_wanted(const char *kind)
{
    static const char *const kinds[] = {
        "request",        "answer",
        "result",         "verdict",
        "budget",         "context_budget",
        "delivery_check", "delivery_profile_check",
        "intent_check",   "verification",
        "intent_judgment"};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(*kinds); i++)
        if (!strcmp(kind, kinds[i]))
            return 1;
    return 0;
}

static int count_kind(cJSON *counts, const char *kind)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(counts, kind);
    if (c) {
        cJSON_SetNumberValue(c, c->valuedouble + 1);
        return 1;
    }
    return fo_json_add_int(counts, kind, 1) != NULL;
}

/* ---- the capsule ------------------------------------------------------- */

struct capsule {
    int max_items, max_text;
    int64_t first, last;
    cJSON *counts;
    char *request, *answer; /* clipped */
    cJSON **ring;           /* the last max_items task results */
    size_t ring_n, ring_at;
    struct signals sig;
    int oom;
};

static void keep_text(char **slot, const char *s, int max, int *oom)
{
    char *c = clip(s, max);
    if (!c) {
        *oom = 1;
        return;
    }
    free(*slot);
    *slot = c;
}

static void keep_task(struct capsule *c, const struct ledger_entry *e,
                      const cJSON *b)
{
    if (!c->max_items)
        return;
    cJSON *t = cJSON_CreateObject();
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(b, "ok");
    const char *agent = jstr(b, "agent");
    int good =
        t && fo_json_add_int(t, "seq", e->seq) &&
        cJSON_AddStringToObject(t, "id", jstr(b, "id")) &&
        cJSON_AddStringToObject(t, "agent", agent ? agent : e->actor) &&
        (cJSON_IsBool(ok) ? cJSON_AddBoolToObject(t, "ok", cJSON_IsTrue(ok))
                          : cJSON_AddNullToObject(t, "ok")) &&
        cJSON_AddStringToObject(t, "model",
                                jstr(b, "model") ? jstr(b, "model") : "") &&
        add_clip(t, "output", jstr(b, "output"), c->max_text);
    if (!good) {
        cJSON_Delete(t);
        c->oom = 1;
        return;
    }
    size_t slot = c->ring_at % (size_t)c->max_items;
    cJSON_Delete(c->ring[slot]);
    c->ring[slot] = t;
    c->ring_at++;
    if (c->ring_n < (size_t)c->max_items)
        c->ring_n++;
}

static int capsule_entry(void *arg, const struct ledger_entry *e,
                         const char *body, size_t len)
{
    struct capsule *c = arg;
    if (c->first < 0)
        c->first = e->seq;
    c->last = e->seq;
    if (!count_kind(c->counts, e->kind))
        return FO_E_NOMEM;
    if (!body || !body_wanted(e->kind))
        return c->oom ? FO_E_NOMEM : 0;
    cJSON *b = NULL;
    struct fo_err perr;
    if (fo_json_parse(body, len, &b, &perr) != FO_OK)
        return 0; /* a body forum did not write: counted, not read */
    const char *text;
    if (!strcmp(e->kind, "request") &&
        ((text = jstr(b, "request")) || (text = jstr(b, "text"))))
        keep_text(&c->request, text, c->max_text, &c->oom);
    else if ((!strcmp(e->kind, "answer") || !strcmp(e->kind, "result")) &&
             (text = jstr(b, "answer")))
        keep_text(&c->answer, text, c->max_text, &c->oom);
    if (!strcmp(e->kind, "result") && jstr(b, "id"))
        keep_task(c, e, b);
    signal_of(&c->sig, e->kind, b);
    cJSON_Delete(b);
    return c->oom ? FO_E_NOMEM : 0;
}

static int tree_root(struct ledger *l, int64_t *n, char hex[65],
                     struct fo_err *err)
{
    uint8_t root[32];
    int rc = ledger_tree_head(l, n, root, err);
    if (!rc)
        fo_hex(root, 32, hex);
    return rc;
}

static int chain_ok(struct ledger *l, int *ok, struct fo_err *err)
{
    struct ledger_verify_result res;
    int rc = ledger_verify(l, 0, NULL, NULL, &res, err);
    *ok = !rc && res.ok;
    return rc;
}

static int add_range(cJSON *o, int64_t first, int64_t last)
{
    cJSON *r = cJSON_AddArrayToObject(o, "entry_range");
    if (!r)
        return 0;
    for (int i = 0; i < 2; i++) {
        int64_t v = i ? last : first;
        if (!cJSON_AddItemToArray(r, first < 0 ? cJSON_CreateNull()
                                               : cJSON_CreateNumber((double)v)))
            return 0;
    }
    return 1;
}

static int capsule_build(struct capsule *c, const char *root, int verified,
                         cJSON **out)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tasks = cJSON_CreateArray();
    cJSON *sig = signals_json(&c->sig, 0);
    int ok =
        o && tasks && sig &&
        cJSON_AddStringToObject(o, "schema", "forum.context-capsule/v1") &&
        cJSON_AddStringToObject(o, "checkpoint", root) &&
        cJSON_AddBoolToObject(o, "verified", verified) &&
        add_range(o, c->first, c->last) &&
        cJSON_AddStringToObject(o, "latest_request",
                                c->request ? c->request : "") &&
        cJSON_AddStringToObject(o, "latest_answer", c->answer ? c->answer : "");
    for (size_t i = 0; ok && i < c->ring_n; i++) {
        size_t at = (c->ring_at - c->ring_n + i) % (size_t)c->max_items;
        ok = cJSON_AddItemToArray(tasks, c->ring[at]);
        if (ok)
            c->ring[at] = NULL;
    }
    if (ok) {
        cJSON_AddItemToObject(o, "counts", c->counts);
        cJSON_AddItemToObject(o, "tasks", tasks);
        cJSON_AddItemToObject(o, "signals", sig);
        c->counts = tasks = sig = NULL;
        struct fo_buf t;
        fo_buf_init(&t, FO_BUF_UNLIMITED);
        ok = orch_capsule_text(o, &t) == FO_OK;
        size_t chars = 0;
        for (size_t i = 0; i < t.len; i++)
            chars += ((unsigned char)t.data[i] & 0xC0) != 0x80;
        ok = ok && fo_json_add_int(o, "context_text_chars", (long long)chars);
        fo_buf_release(&t);
    }
    cJSON_Delete(tasks);
    cJSON_Delete(sig);
    if (!ok) {
        cJSON_Delete(o);
        return FO_E_NOMEM;
    }
    *out = o;
    return FO_OK;
}

int orch_capsule(struct ledger *l, int max_items, int max_text, cJSON **out,
                 struct fo_err *err)
{
    if (max_items < 0 || max_items > ORCH_VIEW_ITEMS_MAX || max_text < 0 ||
        max_text > ORCH_VIEW_TEXT_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "max_items 0..%d, max_text_chars 0..%d",
                          ORCH_VIEW_ITEMS_MAX, ORCH_VIEW_TEXT_MAX);
    struct capsule c = {
        .max_items = max_items, .max_text = max_text, .first = -1, .last = -1};
    int64_t n = 0;
    char root[65];
    int verified = 0;
    int rc = tree_root(l, &n, root, err);
    if (!rc)
        rc = chain_ok(l, &verified, err);
    c.counts = cJSON_CreateObject();
    c.ring = calloc((size_t)max_items + 1, sizeof(*c.ring));
    if (!rc && (!c.counts || !c.ring))
        rc = nomem(err);
    /* the entries the root covers, not one appended since */
    if (!rc && n > 0)
        rc = ledger_range_bodies(l, 0, n, capsule_entry, &c, err);
    if (rc == FO_E_NOMEM)
        nomem(err);
    if (!rc && capsule_build(&c, root, verified, out))
        rc = nomem(err);
    for (int i = 0; c.ring && i < max_items; i++)
        cJSON_Delete(c.ring[i]);
    free(c.ring);
    free(c.request);
    free(c.answer);
    cJSON_Delete(c.counts);
    return rc;
}

int orch_capsule_text(const cJSON *cap, struct fo_buf *b)
{
    const char *req = jstr(cap, "latest_request"),
               *ans = jstr(cap, "latest_answer");
    int rc =
        fo_buf_printf(b,
                      "Forum context capsule\ncheckpoint: %s\n"
                      "verified: %s",
                      jstr(cap, "checkpoint") ? jstr(cap, "checkpoint") : "",
                      jtrue(cap, "verified") ? "True" : "False");
    if (req && *req)
        rc |= fo_buf_printf(b, "\nlatest request: %s", req);
    if (ans && *ans)
        rc |= fo_buf_printf(b, "\nlatest answer: %s", ans);
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(cap, "tasks"), *t;
    if (cJSON_GetArraySize(tasks) > 0)
        rc |= fo_buf_printf(b, "\ntasks:");
    cJSON_ArrayForEach (t, tasks) {
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(t, "ok");
        rc |= fo_buf_printf(b, "\n- %s/%s ok=%s model=%s: %s", jstr(t, "id"),
                            jstr(t, "agent"),
                            cJSON_IsTrue(ok)    ? "True"
                            : cJSON_IsFalse(ok) ? "False"
                                                : "None",
                            jstr(t, "model"), jstr(t, "output"));
    }
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(cap, "signals"), *s;
    if (cJSON_GetArraySize(sig) > 0) {
        rc |= fo_buf_printf(b, "\nsignals:");
        /* sorted by name, as the reference prints them */
        const char *names[32];
        int n = 0;
        cJSON_ArrayForEach (s, sig)
            if (n < 32)
                names[n++] = s->string;
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
                const char *x = names[j];
                names[j] = names[j - 1];
                names[j - 1] = x;
            }
        for (int i = 0; i < n; i++)
            rc |= fo_buf_printf(
                b, " %s=%lld", names[i],
                (long long)cJSON_GetObjectItemCaseSensitive(sig, names[i])
                    ->valuedouble);
    }
    return rc ? FO_E_NOMEM : FO_OK;
}

/* ---- the run room ------------------------------------------------------ */

struct latest {
    int64_t seq[16];
    size_t n;
};

static int latest_request(void *arg, const struct ledger_entry *e)
{
    struct latest *t = arg;
    t->seq[t->n % 16] = e->seq;
    t->n++;
    return 0;
}

struct kinds {
    cJSON *counts;
    int64_t first, last;
    struct ledger *l; /* to read the wave checkpoints (may be NULL) */
    cJSON *cps;       /* {wave, seq, size, root} of each, or NULL */
};

static int run_kind(void *arg, const struct ledger_entry *e)
{
    struct kinds *k = arg;
    if (k->first < 0)
        k->first = e->seq;
    k->last = e->seq;
    if (k->l && k->cps && !strcmp(e->kind, "wave_checkpoint")) {
        char *body = NULL;
        size_t len = 0;
        cJSON *b = NULL, *x = NULL;
        struct fo_err ignore;
        if (ledger_body(k->l, e->seq, &body, &len, &ignore) == FO_OK &&
            fo_json_parse(body, len, &b, &ignore) == FO_OK &&
            (x = cJSON_CreateObject())) {
            const char *keys[] = {"wave", "size", "root"};
            for (int i = 0; i < 3; i++) {
                cJSON *v = cJSON_GetObjectItemCaseSensitive(b, keys[i]);
                if (v)
                    cJSON_AddItemToObject(x, keys[i], cJSON_Duplicate(v, 1));
            }
            fo_json_add_int(x, "seq", e->seq);
            cJSON_AddItemToArray(k->cps, x);
        }
        free(body); /* a redacted one is left out */
        cJSON_Delete(b);
    }
    return count_kind(k->counts, e->kind) ? 0 : FO_E_NOMEM;
}

static cJSON *action(const char *id, const char *kind, const char *priority,
                     const char *label, const char *reason, cJSON *target)
{
    cJSON *a = cJSON_CreateObject();
    if (!target)
        target = cJSON_CreateObject();
    if (!a || !target || !cJSON_AddStringToObject(a, "id", id) ||
        !cJSON_AddStringToObject(a, "kind", kind) ||
        !cJSON_AddStringToObject(a, "priority", priority) ||
        !cJSON_AddStringToObject(a, "label", label) ||
        !cJSON_AddStringToObject(a, "reason", reason) ||
        !cJSON_AddItemToObject(a, "target", target)) {
        cJSON_Delete(a);
        cJSON_Delete(target);
        return NULL;
    }
    return a;
}

static cJSON *target2(const char *k1, long long v1, const char *k2,
                      long long v2)
{
    cJSON *t = cJSON_CreateObject();
    if (t &&
        (!fo_json_add_int(t, k1, v1) || (k2 && !fo_json_add_int(t, k2, v2)))) {
        cJSON_Delete(t);
        return NULL;
    }
    return t;
}

/* The room's tasks from a run_show's: the reference's fields. */
static cJSON *room_tasks(const cJSON *show, int max_text)
{
    cJSON *arr = cJSON_CreateArray();
    const cJSON *t;
    cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(show, "tasks")) {
        const cJSON *task = cJSON_GetObjectItemCaseSensitive(t, "task");
        const cJSON *tb = cJSON_GetObjectItemCaseSensitive(task, "body");
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(t, "result");
        const cJSON *rb = cJSON_GetObjectItemCaseSensitive(res, "body");
        const cJSON *ver = cJSON_GetObjectItemCaseSensitive(t, "verdict");
        const cJSON *vb = cJSON_GetObjectItemCaseSensitive(ver, "body");
        const cJSON *dw = cJSON_GetObjectItemCaseSensitive(tb, "done_when");
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o))
            return cJSON_Delete(o), cJSON_Delete(arr), NULL;
        long long seq = -1;
        fo_json_get_int(task, "seq", 0, INT64_MAX, &seq);
        int ok =
            fo_json_add_int(o, "seq", seq) &&
            cJSON_AddStringToObject(o, "id",
                                    jstr(t, "id") ? jstr(t, "id") : "") &&
            cJSON_AddStringToObject(o, "agent",
                                    jstr(t, "agent") ? jstr(t, "agent") : "") &&
            add_clip(o, "instruction", jstr(t, "instruction"), max_text) &&
            cJSON_AddItemToObject(o, "done_when",
                                  cJSON_IsArray(dw) ? cJSON_Duplicate(dw, 1)
                                                    : cJSON_CreateArray()) &&
            cJSON_AddStringToObject(o, "state",
                                    jstr(t, "state") ? jstr(t, "state") : "");
        if (ok && rb) {
            cJSON *r = cJSON_AddObjectToObject(o, "result");
            long long rs = -1;
            fo_json_get_int(res, "seq", 0, INT64_MAX, &rs);
            const cJSON *rok = cJSON_GetObjectItemCaseSensitive(rb, "ok");
            ok = r && fo_json_add_int(r, "seq", rs) &&
                 cJSON_AddItemToObject(r, "ok",
                                       cJSON_IsBool(rok)
                                           ? cJSON_Duplicate(rok, 0)
                                           : cJSON_CreateNull()) &&
                 cJSON_AddStringToObject(
                     r, "model", jstr(rb, "model") ? jstr(rb, "model") : "") &&
                 add_clip(r, "output", jstr(rb, "output"), max_text);
        }
        if (ok && vb) {
            cJSON *v = cJSON_AddObjectToObject(o, "verdict");
            int vo = verdict_ok(vb);
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(vb, "score");
            ok = v &&
                 cJSON_AddItemToObject(v, "ok",
                                       vo < 0 ? cJSON_CreateNull()
                                              : cJSON_CreateBool(vo)) &&
                 cJSON_AddItemToObject(v, "score",
                                       cJSON_IsNumber(sc)
                                           ? cJSON_Duplicate(sc, 0)
                                           : cJSON_CreateNull()) &&
                 add_clip(v, "reason", jstr(vb, "reason"), max_text);
        }
        if (!ok)
            return cJSON_Delete(arr), NULL;
    }
    return arr;
}

/* The next actions (the reference's rules): a failed result or verdict is a
 * retry, a budget stop a raise-budget, each waiting gate a review, all
 * high; an answer with nothing high is an export. */
static cJSON *room_actions(const cJSON *tasks, const cJSON *gates,
                           const struct signals *s, const cJSON *answer)
{
    cJSON *arr = cJSON_CreateArray();
    const cJSON *t;
    char id[160], label[160];
    int ok = arr != NULL;
    cJSON_ArrayForEach (t, tasks) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "result");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "verdict");
        int bad_r = jfalse(r, "ok"), bad_v = jfalse(v, "ok");
        if (!ok || (!bad_r && !bad_v))
            continue;
        snprintf(id, sizeof(id), "retry-task:%s", jstr(t, "id"));
        snprintf(label, sizeof(label), "Retry %s", jstr(t, "id"));
        long long seq = -1;
        fo_json_get_int(bad_r ? r : t, "seq", 0, INT64_MAX, &seq);
        cJSON *tg = cJSON_CreateObject();
        ok = tg && cJSON_AddStringToObject(tg, "task_id", jstr(t, "id")) &&
             fo_json_add_int(tg, bad_r ? "result_seq" : "task_seq", seq) &&
             cJSON_AddItemToArray(
                 arr, action(id, "retry_task", "high", label,
                             bad_r ? "the task's latest result failed"
                                   : "the task's latest verdict failed",
                             tg));
    }
    if (ok && s->budget_stops > 0)
        ok = cJSON_AddItemToArray(
            arr, action("raise-budget", "raise_budget", "high",
                        "Raise or revise the run's budget",
                        "the run stopped on its budget", NULL));
    const cJSON *g;
    cJSON_ArrayForEach (g, gates) {
        long long run = -1, wave = -1;
        fo_json_get_int(g, "run_seq", 0, INT64_MAX, &run);
        fo_json_get_int(g, "wave", 0, INT64_MAX, &wave);
        snprintf(id, sizeof(id), "review-gate:%lld:%lld", run, wave);
        snprintf(label, sizeof(label), "Review the gate on wave %lld", wave);
        ok = ok && cJSON_AddItemToArray(
                       arr, action(id, "review_gate", "high", label,
                                   "a wave waits for a human's approval",
                                   target2("run_seq", run, "wave", wave)));
    }
    int high = cJSON_GetArraySize(arr) > 0;
    if (ok && (s->flagged_delivery || s->flagged_profiles))
        ok = cJSON_AddItemToArray(
            arr, action("revise-delivery", "revise_delivery", "normal",
                        "Review or revise the delivery",
                        "delivery checks flagged the answer", NULL));
    if (ok && s->flagged_intent)
        ok = cJSON_AddItemToArray(
            arr, action("judge-intent", "judge_intent", "normal",
                        "Judge the answer's intent",
                        "the intent check flagged a possible drift", NULL));
    if (ok && s->refuted)
        ok = cJSON_AddItemToArray(
            arr, action("review-verification", "review_verification", "normal",
                        "Review the verifier's refutation",
                        "an outside verification refuted the answer", NULL));
    long long aseq = -1;
    if (ok && cJSON_IsObject(answer) && !high &&
        fo_json_get_int(answer, "seq", 0, INT64_MAX, &aseq) == FO_OK)
        ok = cJSON_AddItemToArray(
            arr, action("export-receipt", "export_receipt", "normal",
                        "Export the run's receipt",
                        "the answer is there and nothing blocks it",
                        target2("answer_seq", aseq, NULL, 0)));
    if (!ok) {
        cJSON_Delete(arr);
        return NULL;
    }
    return arr;
}

/* The signals of a run: its entries' bodies read once. */
struct run_sig {
    struct ledger *l;
    struct signals s;
};

static int run_signal(void *arg, const struct ledger_entry *e)
{
    struct run_sig *r = arg;
    if (!body_wanted(e->kind) || !strcmp(e->kind, "request"))
        return 0;
    char *body = NULL;
    size_t len = 0;
    struct fo_err err;
    cJSON *b = NULL;
    if (ledger_body(r->l, e->seq, &body, &len, &err) == FO_OK)
        fo_json_parse(body, len, &b, &err);
    signal_of(&r->s, e->kind, b);
    cJSON_Delete(b);
    free(body);
    return 0;
}

static cJSON *room_empty(const char *root, int verified)
{
    cJSON *o = cJSON_CreateObject();
    struct signals s = {0};
    cJSON *sig = signals_json(&s, 1);
    cJSON *acts = cJSON_CreateArray();
    int ok =
        o && sig && acts &&
        cJSON_AddStringToObject(o, "schema", "forum.run-room/v1") &&
        cJSON_AddNullToObject(o, "run") &&
        cJSON_AddStringToObject(o, "checkpoint", root) &&
        cJSON_AddBoolToObject(o, "verified", verified) &&
        add_range(o, -1, -1) && cJSON_AddObjectToObject(o, "counts") &&
        cJSON_AddNullToObject(o, "request") &&
        cJSON_AddArrayToObject(o, "tasks") &&
        cJSON_AddArrayToObject(o, "pending_gates") &&
        cJSON_AddNullToObject(o, "answer") &&
        fo_json_add_int(sig, "pending_gates", 0) &&
        cJSON_AddItemToArray(acts, action("submit-request", "submit_request",
                                          "normal", "Submit a request",
                                          "the ledger holds no run", NULL));
    if (ok) {
        cJSON_AddItemToObject(o, "signals", sig);
        cJSON_AddItemToObject(o, "next_actions", acts);
        return o;
    }
    cJSON_Delete(o);
    cJSON_Delete(sig);
    cJSON_Delete(acts);
    return NULL;
}

/* The newest request that is a run (run_show takes it), or -1. */
static int64_t latest_run(struct ledger *l, struct fo_err *err, int *rc)
{
    struct latest t = {.n = 0};
    *rc = ledger_requests(l, 0, latest_request, &t, err);
    for (size_t i = 0; !*rc && i < t.n && i < 16; i++) {
        int64_t seq = t.seq[(t.n - 1 - i) % 16];
        cJSON *show = NULL;
        struct fo_err e;
        if (orch_run_show(NULL, l, seq, &show, &e) == FO_OK) {
            cJSON_Delete(show);
            return seq;
        }
    }
    return -1;
}

static int room_fill(struct ledger *l, cJSON *o, const cJSON *show,
                     int max_text, struct fo_err *err);

int orch_room(struct ledger *l, int64_t run, int max_text, cJSON **out,
              struct fo_err *err)
{
    if (max_text < 0 || max_text > ORCH_VIEW_TEXT_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_text_chars: 0..%d",
                          ORCH_VIEW_TEXT_MAX);
    int64_t n = 0;
    char root[65];
    int verified = 0;
    int rc = tree_root(l, &n, root, err);
    if (!rc)
        rc = chain_ok(l, &verified, err);
    if (!rc && run < 0)
        run = latest_run(l, err, &rc);
    if (rc)
        return rc;
    if (run < 0) {
        *out = room_empty(root, verified);
        return *out ? FO_OK : nomem(err);
    }
    cJSON *show = NULL;
    rc = orch_run_show(NULL, l, run, &show, err);
    if (rc)
        return rc;
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "schema", "forum.run-room/v1") &&
             fo_json_add_int(o, "run", run) &&
             cJSON_AddStringToObject(
                 o, "state", jstr(show, "state") ? jstr(show, "state") : "") &&
             cJSON_AddStringToObject(o, "checkpoint", root) &&
             cJSON_AddBoolToObject(o, "verified", verified);
    rc = ok ? room_fill(l, o, show, max_text, err) : nomem(err);
    cJSON_Delete(show);
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}

/* The room's request, plan, answer and route from run_show's. */
static int room_parts(cJSON *o, const cJSON *show, int max_text)
{
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(show, "plan");
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(show, "answer");
    const cJSON *route = cJSON_GetObjectItemCaseSensitive(show, "route");
    long long run = -1;
    fo_json_get_int(show, "run", 0, INT64_MAX, &run);
    cJSON *req = cJSON_AddObjectToObject(o, "request");
    int ok =
        req && fo_json_add_int(req, "seq", run) &&
        add_clip(req, "text", jstr(show, "request"), max_text) &&
        cJSON_AddItemToObject(o, "route",
                              route ? cJSON_Duplicate(route, 1)
                                    : cJSON_CreateNull()) &&
        cJSON_AddItemToObject(
            o, "plan", plan ? cJSON_Duplicate(plan, 1) : cJSON_CreateNull()) &&
        cJSON_AddArrayToObject(o, "checkpoints");
    if (ok && cJSON_IsObject(ans)) {
        cJSON *a = cJSON_AddObjectToObject(o, "answer");
        long long seq = -1;
        fo_json_get_int(ans, "seq", 0, INT64_MAX, &seq);
        ok = a && fo_json_add_int(a, "seq", seq) &&
             add_clip(a, "text", jstr(ans, "text"), max_text);
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "answer") != NULL;
    }
    return ok;
}

static int room_fill(struct ledger *l, cJSON *o, const cJSON *show,
                     int max_text, struct fo_err *err)
{
    long long run = -1;
    fo_json_get_int(show, "run", 0, INT64_MAX, &run);
    struct kinds k = {.counts = cJSON_CreateObject(),
                      .first = -1,
                      .last = -1,
                      .l = l,
                      .cps = cJSON_CreateArray()};
    if (!k.counts || !k.cps) {
        cJSON_Delete(k.counts);
        cJSON_Delete(k.cps);
        return nomem(err);
    }
    int rc = ledger_descendants(l, run, -1, run_kind, &k, err);
    struct run_sig rs = {.l = l};
    if (!rc)
        rc = ledger_descendants(l, run, -1, run_signal, &rs, err);
    cJSON *gl = NULL;
    if (!rc)
        rc = orch_gate_list(l, run, &gl, err);
    if (rc) {
        cJSON_Delete(k.counts);
        cJSON_Delete(k.cps);
        return rc == FO_E_NOMEM ? nomem(err) : rc;
    }
    cJSON *gates = cJSON_DetachItemFromObjectCaseSensitive(gl, "gates");
    cJSON_Delete(gl);
    if (!gates)
        gates = cJSON_CreateArray();
    cJSON *tasks = room_tasks(show, max_text);
    cJSON *sig = signals_json(&rs.s, 1);
    int ok = gates && tasks && sig && add_range(o, k.first, k.last) &&
             fo_json_add_int(sig, "pending_gates", cJSON_GetArraySize(gates)) &&
             room_parts(o, show, max_text) &&
             cJSON_ReplaceItemInObjectCaseSensitive(o, "checkpoints", k.cps);
    if (ok)
        k.cps = NULL; /* the room's per-wave checkpoints, in seq order */
    cJSON_Delete(k.cps);
    cJSON *acts =
        ok ? room_actions(tasks, gates, &rs.s,
                          cJSON_GetObjectItemCaseSensitive(o, "answer"))
           : NULL;
    if (acts) {
        cJSON_AddItemToObject(o, "counts", k.counts);
        cJSON_AddItemToObject(o, "tasks", tasks);
        cJSON_AddItemToObject(o, "pending_gates", gates);
        cJSON_AddItemToObject(o, "signals", sig);
        cJSON_AddItemToObject(o, "next_actions", acts);
        return FO_OK;
    }
    cJSON_Delete(k.counts);
    cJSON_Delete(tasks);
    cJSON_Delete(gates);
    cJSON_Delete(sig);
    return nomem(err);
}
