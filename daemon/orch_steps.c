/* orch_steps: a run's steps, read from its entries: one step per model
 * call and per tool call, and the gates, escalations and retries between
 * them, each placed in time by the entries that start and end it. The
 * run's timeline (the dashboard) and `forum run show` print these.
 *
 * A step starts at the ts of the entry it followed (a model call's parent:
 * the task, or the tool result fed back to the model) and ends at the ts of
 * the entry that witnessed its outcome; one that has not ended yet has no
 * `end_ts`. Every time is a ledger time (when the entry was committed),
 * so steps of one run are comparable with each other. */
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"

struct ev {
    long long seq, ts, parent; /* parent -1: none */
    const char *kind;
    const cJSON *body, *entry;
};

struct steps {
    struct ev *ev;
    size_t n;
    cJSON *out;
};

static const char *s_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static long long n_of(const cJSON *o, const char *k, long long def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : def;
}

static const struct ev *find(const struct steps *s, long long seq)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ev[mid].seq == seq)
            return &s->ev[mid];
        if (s->ev[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The entry before e in the run (seq order), or e itself. */
static const struct ev *before(const struct steps *s, const struct ev *e)
{
    return e > s->ev ? e - 1 : e;
}

/* Adds {kind, name, start_seq, start_ts, seq, end_ts, duration_ms,
 * entries: [...]} for a step from `from` to `to` (NULL: not ended). */
static cJSON *add(struct steps *s, const char *kind, const char *name,
                  const struct ev *from, const struct ev *to)
{
    cJSON *x = cJSON_CreateObject();
    cJSON *en = x ? cJSON_AddArrayToObject(x, "entries") : NULL;
    if (!en || !cJSON_AddStringToObject(x, "kind", kind) ||
        !cJSON_AddStringToObject(x, "name", name) ||
        !fo_json_add_int(x, "start_seq", from->seq) ||
        !fo_json_add_int(x, "start_ts", from->ts) ||
        !fo_json_add_int(x, "seq", to ? to->seq : from->seq) ||
        (to && !fo_json_add_int(x, "end_ts", to->ts)) ||
        (to &&
         !fo_json_add_int(x, "duration_ms", (to->ts - from->ts) / 1000))) {
        cJSON_Delete(x);
        return NULL;
    }
    cJSON_AddItemToArray(en, cJSON_CreateNumber((double)from->seq));
    if (to && to != from)
        cJSON_AddItemToArray(en, cJSON_CreateNumber((double)to->seq));
    cJSON_AddItemToArray(s->out, x);
    return x;
}

static int copy(cJSON *x, const char *k, const cJSON *from, const char *fk)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, fk);
    if (!v)
        return 1;
    cJSON *d = cJSON_Duplicate(v, 1);
    if (!d)
        return 0;
    cJSON_AddItemToObject(x, k, d);
    return 1;
}

/* The model call an entry witnessed the answer of, or 0: a role's
 * (coordinator, classifier, validator, synthesizer), a task's, or a turn
 * of a tool loop (the first tool_call of the turn). */
static int model_call(const struct steps *s, const struct ev *e,
                      const char **name, const struct ev **from)
{
    const char *k = e->kind, *model = s_of(e->body, "model");
    int real = model && strcmp(model, "stub") != 0;
    const struct ev *p = e->parent >= 0 ? find(s, e->parent) : NULL;
    *from = p ? p : before(s, e);
    if (!strcmp(k, "route")) {
        *name = "classifier";
        return s_of(e->body, "by") && strcmp(s_of(e->body, "by"), "router");
    }
    if (!strcmp(k, "plan")) {
        *name = "coordinator";
        *from = before(s, e); /* after the route */
        return real;
    }
    if (!strcmp(k, "verdict")) {
        *name = "validator";
        return s_of(e->body, "by") && !strcmp(s_of(e->body, "by"), "validator");
    }
    if (!strcmp(k, "intent_judgment")) {
        *name = "judge";
        return real;
    }
    if (!strcmp(k, "answer")) {
        *name = "synthesizer";
        *from = before(s, e); /* after the last verdict */
        return real;
    }
    if (!strcmp(k, "result")) {
        *name = "task";
        return real;
    }
    if (!strcmp(k, "tool_call")) {
        *name = "turn";
        /* the first call of a turn: its parent is not a call of the turn */
        return !p || strcmp(p->kind, "tool_call") != 0;
    }
    return 0;
}

static int model_step(struct steps *s, const struct ev *e, const char *role,
                      const struct ev *from)
{
    char name[160];
    const char *id = s_of(e->body, "id");
    long long turn = n_of(e->body, "turn", 0);
    if (!strcmp(e->kind, "tool_call"))
        snprintf(name, sizeof(name), "%s turn %lld", id ? id : "?", turn);
    else if (id)
        snprintf(name, sizeof(name), "%s %s", role, id);
    else
        snprintf(name, sizeof(name), "%s", role);
    cJSON *x = add(s, "model", name, from, e);
    if (!x)
        return 0;
    const char *mk = !strcmp(e->kind, "verdict") ? "result_model" : "model";
    int ok = copy(x, "model", e->body, mk) &&
             copy(x, "tokens", e->body, "tokens") &&
             copy(x, "task", e->body, "id") &&
             copy(x, "attempts", e->body, "attempts");
    if (!strcmp(e->kind, "result"))
        ok = ok && copy(x, "ok", e->body, "ok") &&
             copy(x, "output", e->body, "output") &&
             copy(x, "stop_reason", e->body, "stop_reason");
    else if (!strcmp(e->kind, "verdict"))
        ok = ok && copy(x, "ok", e->body, "pass");
    else if (!strcmp(e->kind, "answer"))
        ok = ok && copy(x, "output", e->body, "answer");
    else if (!strcmp(e->kind, "tool_call"))
        ok = ok && copy(x, "output", e->body, "text");
    return ok;
}

/* A tool call: from its tool_call to its tool_result (the first entry
 * after it with it as parent), or open. */
static int tool_step(struct steps *s, const struct ev *e)
{
    const struct ev *end = NULL;
    for (const struct ev *q = e + 1; q < s->ev + s->n && !end; q++)
        if (q->parent == e->seq && !strcmp(q->kind, "tool_result"))
            end = q;
    const char *tool = s_of(e->body, "tool");
    cJSON *x = add(s, "tool", tool ? tool : "?", e, end);
    if (!x)
        return 0;
    int ok = copy(x, "task", e->body, "id") &&
             copy(x, "tool", e->body, "tool") &&
             copy(x, "arguments", e->body, "arguments");
    if (end)
        ok = ok && copy(x, "ok", end->body, "ok") &&
             copy(x, "output", end->body, "output") &&
             copy(x, "error", end->body, "error") &&
             copy(x, "blocked", end->body, "blocked");
    return ok;
}

/* A gate: from gate_requested to its decision, or waiting. */
static int gate_step(struct steps *s, const struct ev *e)
{
    const struct ev *end = NULL;
    for (const struct ev *q = e + 1; q < s->ev + s->n && !end; q++)
        if (q->parent == e->seq && !strncmp(q->kind, "gate_", 5))
            end = q;
    char name[64];
    snprintf(name, sizeof(name), "gate wave %lld", n_of(e->body, "wave", 0));
    cJSON *x = add(s, "gate", name, e, end);
    if (!x)
        return 0;
    const char *d = end ? end->kind + 5 : "waiting";
    return cJSON_AddStringToObject(x, "decision", d) &&
           cJSON_AddBoolToObject(
               x, "ok",
               end && (!strcmp(d, "approved") || !strcmp(d, "edited")));
}

/* A task whose model call or command has no result yet: open. The
 * entries that carry a task id, sorted by (id, seq), are walked once per
 * id, so a run of many tasks costs O(n log n). */
struct by_id {
    const char *id;
    const struct ev *e;
};

static int by_id_cmp(const void *a, const void *b)
{
    const struct by_id *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c ? c : (x->e->seq > y->e->seq) - (x->e->seq < y->e->seq);
}

static int open_one(struct steps *s, const struct ev *t, const struct ev *last)
{
    const char *model = s_of(t->body, "model");
    int real = model && strcmp(model, "stub") != 0;
    char name[160];
    const char *id = s_of(t->body, "id");
    snprintf(name, sizeof(name), "task %s", id ? id : "?");
    cJSON *x = add(s, real ? "model" : "task", name, last, NULL);
    return x && copy(x, "task", t->body, "id") &&
           copy(x, "model", t->body, "model");
}

static int open_tasks(struct steps *s)
{
    struct by_id *a = calloc(s->n ? s->n : 1, sizeof(*a));
    size_t m = 0;
    if (!a)
        return 0;
    for (size_t i = 0; i < s->n; i++) {
        const char *k = s->ev[i].kind, *id = s_of(s->ev[i].body, "id");
        if (id && (!strcmp(k, "task") || !strcmp(k, "result") ||
                   !strncmp(k, "tool_", 5)))
            a[m++] = (struct by_id){id, &s->ev[i]};
    }
    qsort(a, m, sizeof(*a), by_id_cmp);
    int ok = 1;
    const struct ev *t = NULL, *last = NULL; /* the open task, its last step */
    for (size_t i = 0; i <= m && ok; i++) {
        if (t && last && (i == m || strcmp(a[i].id, a[i - 1].id) != 0))
            ok = open_one(s, t, last);
        if (i == m)
            break;
        if (i == 0 || strcmp(a[i].id, a[i - 1].id) != 0)
            t = last = NULL;
        const char *k = a[i].e->kind;
        if (!strcmp(k, "task"))
            t = last = a[i].e;
        else if (!strcmp(k, "result"))
            t = last = NULL;
        else if (t && !strcmp(k, "tool_call"))
            last = NULL; /* a tool runs: the tool's step is the open one */
        else if (t)
            last = a[i].e; /* tool_result, tool_rescue: the model's turn */
    }
    free(a);
    return ok;
}

static int marker(struct steps *s, const struct ev *e, const char *kind,
                  const char *name)
{
    cJSON *x = add(s, kind, name, e, e);
    return x && copy(x, "task", e->body, "id") &&
           copy(x, "tier", e->body, "to") &&
           copy(x, "reason", e->body, "reason");
}

static int one(struct steps *s, const struct ev *e)
{
    const char *name;
    const struct ev *from;
    if (model_call(s, e, &name, &from) && !model_step(s, e, name, from))
        return 0;
    if (!strcmp(e->kind, "result") && !model_call(s, e, &name, &from)) {
        cJSON *x =
            add(s, "task", s_of(e->body, "id") ? s_of(e->body, "id") : "task",
                from, e);
        if (!x || !copy(x, "task", e->body, "id") ||
            !copy(x, "ok", e->body, "ok") ||
            !copy(x, "output", e->body, "output"))
            return 0;
    }
    if (!strcmp(e->kind, "tool_call"))
        return tool_step(s, e);
    if (!strcmp(e->kind, "gate_requested"))
        return gate_step(s, e);
    if (!strcmp(e->kind, "tier_escalation"))
        return marker(s, e, "escalation", "escalation");
    if (!strcmp(e->kind, "retry")) /* a same-tier retry (orch_judge.c) */
        return marker(s, e, "retry", "retry");
    if (!strcmp(e->kind, "tool_rescue") || !strcmp(e->kind, "resume"))
        return marker(s, e, "retry",
                      !strcmp(e->kind, "resume") ? "resumed"
                                                 : "answer refused");
    return 1;
}

/* Guardrail marks and other entries that point at a step's entries join
 * that step's list. */
static void attach(struct steps *s)
{
    cJSON *x;
    for (size_t i = 0; i < s->n; i++) {
        const struct ev *e = &s->ev[i];
        if (strcmp(e->kind, "guardrail") != 0 || e->parent < 0)
            continue;
        cJSON_ArrayForEach (x, s->out) {
            const cJSON *v;
            int hit = 0;
            cJSON_ArrayForEach (v,
                                cJSON_GetObjectItemCaseSensitive(x, "entries"))
                hit |= (long long)v->valuedouble == e->parent;
            if (hit) {
                cJSON_AddItemToArray(
                    cJSON_GetObjectItemCaseSensitive(x, "entries"),
                    cJSON_CreateNumber((double)e->seq));
                break;
            }
        }
    }
}

int orch_run_steps(const cJSON *entries, cJSON *out)
{
    struct steps s = {.out = out};
    int n = cJSON_GetArraySize(entries);
    if (!out)
        return FO_E_NOMEM;
    s.ev = calloc(n ? (size_t)n : 1, sizeof(*s.ev));
    if (!s.ev)
        return FO_E_NOMEM;
    const cJSON *e;
    cJSON_ArrayForEach (e, entries) {
        struct ev *v = &s.ev[s.n];
        v->entry = e;
        v->seq = n_of(e, "seq", -1);
        v->ts = n_of(e, "ts", 0);
        v->parent = n_of(e, "parent", -1);
        v->kind = s_of(e, "kind") ? s_of(e, "kind") : "";
        v->body = cJSON_GetObjectItemCaseSensitive(e, "body");
        if (s.n && v->seq <= s.ev[s.n - 1].seq)
            continue; /* not in seq order: not ours to guess */
        s.n++;
    }
    int ok = 1;
    for (size_t i = 0; i < s.n && ok; i++)
        ok = one(&s, &s.ev[i]);
    ok = ok && open_tasks(&s);
    if (ok)
        attach(&s);
    free(s.ev);
    return ok ? FO_OK : FO_E_NOMEM;
}
