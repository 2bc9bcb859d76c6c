/* orch_gw: the model gateway's sessions as read views. The gateway
 * (surfaces/gateway.c) writes one `gateway_call` entry per call, its body
 * naming the client's X-Forum-Session header in "session". Here those
 * entries are folded, through the ledger's index of them alone
 * (ledger_marked LEDGER_GATEWAY), into sessions: what GET /runs lists
 * beside the runs, and what GET /gateway/sessions/NAME shows call by call.
 * Calls without the header group per UTC day, into the session named
 * "~YYYY-MM-DD" of the day their entry was written. Read-only: any thread
 * with its own ledger handle (the surfaces run these on a worker); the
 * fold is kept between calls (the cache below), so each read reads only
 * the calls that came since the last. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/orch.h"
#include "daemon/orch_int.h"
#include "ledger/fo_json.h"

struct gw_seqs {
    struct ledger_entry *v;
    size_t n, cap;
};

static int on_call(void *ctx, const struct ledger_entry *e)
{
    struct gw_seqs *c = ctx;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        struct ledger_entry *a = realloc(c->v, cap * sizeof(*a));
        if (!a)
            return FO_E_NOMEM;
        c->v = a;
        c->cap = cap;
    }
    c->v[c->n++] = *e;
    return 0;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static long long jnum(const cJSON *o, const char *k, long long def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : def;
}

void orch_gw_session_of(const cJSON *body, int64_t ts_us, char *out,
                        size_t size)
{
    const char *s = jstr(body, "session");
    if (s && *s) {
        snprintf(out, size, "%s", s);
        return;
    }
    time_t t = (time_t)(ts_us / 1000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, size, "~%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday);
}

int orch_gw_call_failed(const cJSON *body)
{
    long long st = jnum(body, "status", 0);
    return !body || jstr(body, "error_class") || st < 200 || st >= 300;
}

/* One call read back: its entry and body (NULL when redacted), and the
 * session it belongs to. */
struct gw_one {
    struct ledger_entry e;
    cJSON *body;
    char name[ORCH_GW_SESSION_MAX + 16];
};

typedef int (*gw_fn)(void *ctx, const struct gw_one *c);

/* Reads one call back: fn(ctx, the call). */
static int gw_read(struct ledger *l, const struct ledger_entry *e, gw_fn fn,
                   void *ctx, struct fo_err *err)
{
    struct gw_one c = {.e = *e, .body = NULL};
    char *body = NULL;
    size_t len = 0;
    struct fo_err berr;
    int rc = FO_OK, brc = ledger_body(l, e->seq, &body, &len, &berr);
    if (brc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    else if (brc == FO_OK && fo_json_parse(body, len, &c.body, NULL) != FO_OK)
        c.body = NULL;
    else if (brc != FO_OK && brc != FO_E_REDACTED)
        rc = fo_err_set(err, brc, "%s", berr.msg);
    free(body);
    orch_gw_session_of(c.body, c.e.ts, c.name, sizeof(c.name));
    if (!rc)
        rc = fn(ctx, &c);
    cJSON_Delete(c.body);
    return rc;
}

/* ---- the sessions, summed ----------------------------------------------- */

struct gw_sum {
    char *name;
    int64_t first_seq, last_seq, start_ts, last_ts;
    long long calls, errors, tin, tout;
    cJSON *models;
    int64_t *seqs; /* its calls (in the cache only) */
    size_t nseq, capseq;
};

struct gw_list {
    struct gw_sum *v;
    size_t n, cap;
    size_t hint; /* the last session added to: calls of one come in runs */
};

static struct gw_sum *find_or_add(struct gw_list *g, const char *name)
{
    if (g->hint < g->n && !strcmp(g->v[g->hint].name, name))
        return &g->v[g->hint];
    for (size_t i = g->n; i-- > 0;)
        if (!strcmp(g->v[i].name, name)) {
            g->hint = i;
            return &g->v[i];
        }
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct gw_sum *v = realloc(g->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        g->v = v;
        g->cap = cap;
    }
    struct gw_sum *s = &g->v[g->n];
    memset(s, 0, sizeof(*s));
    s->name = orch_strdup(name);
    s->models = cJSON_CreateArray();
    if (!s->name || !s->models) {
        free(s->name);
        cJSON_Delete(s->models);
        return NULL;
    }
    s->first_seq = -1;
    g->hint = g->n++;
    return s;
}

static int add_model(cJSON *models, const char *m)
{
    const cJSON *x;
    cJSON_ArrayForEach (x, models)
        if (cJSON_IsString(x) && !strcmp(x->valuestring, m))
            return 1;
    return cJSON_AddItemToArray(models, cJSON_CreateString(m));
}

static int sum_one(void *ctx, const struct gw_one *c)
{
    struct gw_sum *s = find_or_add(ctx, c->name);
    if (!s)
        return FO_E_NOMEM;
    int64_t start = c->e.ts - jnum(c->body, "latency_us", 0);
    if (s->first_seq < 0) {
        s->first_seq = c->e.seq;
        s->start_ts = start;
    }
    if (start < s->start_ts)
        s->start_ts = start;
    s->last_seq = c->e.seq;
    s->last_ts = c->e.ts;
    s->calls++;
    s->errors += orch_gw_call_failed(c->body);
    s->tin +=
        jnum(c->body, "tokens_in", 0) > 0 ? jnum(c->body, "tokens_in", 0) : 0;
    s->tout +=
        jnum(c->body, "tokens_out", 0) > 0 ? jnum(c->body, "tokens_out", 0) : 0;
    const char *m = jstr(c->body, "model");
    if (m && !add_model(s->models, m))
        return FO_E_NOMEM;
    return 0;
}

/* The summary of s: what GET /runs lists and the session view heads with. */
static cJSON *sum_json(const struct gw_sum *s)
{
    cJSON *x = cJSON_CreateObject();
    size_t idn = strlen(s->name) + 9;
    char *id = malloc(idn);
    cJSON *tk = x ? cJSON_CreateObject() : NULL;
    int ok = x && id && tk;
    if (ok)
        snprintf(id, idn, "session:%s", s->name);
    ok = ok && cJSON_AddStringToObject(x, "type", "gateway_session") &&
         cJSON_AddStringToObject(x, "id", id) &&
         cJSON_AddStringToObject(x, "session", s->name) &&
         cJSON_AddBoolToObject(x, "headerless", s->name[0] == '~') &&
         fo_json_add_int(x, "calls", s->calls) &&
         fo_json_add_int(x, "errors", s->errors) &&
         fo_json_add_int(tk, "input", s->tin) &&
         fo_json_add_int(tk, "output", s->tout) &&
         cJSON_AddItemToObject(x, "tokens", tk);
    if (!ok && tk && !cJSON_GetObjectItemCaseSensitive(x, "tokens"))
        cJSON_Delete(tk);
    cJSON *models = ok ? cJSON_Duplicate(s->models, 1) : NULL;
    ok = ok && models && cJSON_AddItemToObject(x, "models", models);
    if (!ok && models && !cJSON_GetObjectItemCaseSensitive(x, "models"))
        cJSON_Delete(models);
    ok = ok && fo_json_add_int(x, "started_ts", s->start_ts) &&
         fo_json_add_int(x, "last_ts", s->last_ts) &&
         fo_json_add_int(x, "first_seq", s->first_seq) &&
         fo_json_add_int(x, "last_seq", s->last_seq) &&
         fo_json_add_int(x, "entries", s->calls);
    free(id);
    if (!ok) {
        cJSON_Delete(x);
        return NULL;
    }
    return x;
}

static void list_free(struct gw_list *g)
{
    for (size_t i = 0; i < g->n; i++) {
        free(g->v[i].name);
        cJSON_Delete(g->v[i].models);
        free(g->v[i].seqs);
    }
    free(g->v);
    memset(g, 0, sizeof(*g));
}

/* ---- the cache ---------------------------------------------------------
 * The sums of every session, and each one's call seqs, up to seq upto of
 * one ledger (by its id): each read folds only the calls that came since,
 * so a dashboard that reloads the list on every call costs the new calls,
 * not all of them. A ledger that got shorter (a restore) starts it over.
 * A call redacted after it was folded stays counted as it was. */

static struct {
    pthread_mutex_t mu;
    char id[80];
    int64_t upto;
    struct gw_list list;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int cache_one(void *ctx, const struct gw_one *c)
{
    int rc = sum_one(ctx, c);
    struct gw_sum *s = rc ? NULL : find_or_add(ctx, c->name);
    if (!rc && !s)
        rc = FO_E_NOMEM;
    if (!rc && s->nseq == s->capseq) {
        size_t cap = s->capseq ? s->capseq * 2 : 8;
        int64_t *v = realloc(s->seqs, cap * sizeof(*v));
        if (!v)
            return FO_E_NOMEM;
        s->seqs = v;
        s->capseq = cap;
    }
    if (!rc)
        s->seqs[s->nseq++] = c->e.seq;
    return rc;
}

/* Brings the cache to l's head; with cache.mu held. */
static int cache_update(struct ledger *l, struct fo_err *err)
{
    int64_t count = 0;
    int rc = ledger_count(l, &count, err);
    if (rc)
        return rc;
    if (strcmp(cache.id, ledger_id(l)) != 0 || count < cache.upto) {
        list_free(&cache.list);
        snprintf(cache.id, sizeof(cache.id), "%s", ledger_id(l));
        cache.upto = 0;
    }
    struct gw_seqs s = {0};
    rc = ledger_marked(l, LEDGER_GATEWAY, cache.upto, on_call, &s, err);
    if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; !rc && i < s.n; i++) {
        rc = gw_read(l, &s.v[i], cache_one, &cache.list, err);
        if (rc == FO_E_NOMEM)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        if (!rc)
            cache.upto = s.v[i].seq + 1;
    }
    free(s.v);
    if (rc) { /* a partial fold is not kept */
        list_free(&cache.list);
        cache.id[0] = '\0';
        cache.upto = 0;
    }
    return rc;
}

static int by_last_desc(const void *a, const void *b)
{
    int64_t x = (*(const struct gw_sum *const *)a)->last_seq;
    int64_t y = (*(const struct gw_sum *const *)b)->last_seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

int orch_gw_sessions(struct ledger *l, cJSON **out, struct fo_err *err)
{
    pthread_mutex_lock(&cache.mu);
    int rc = cache_update(l, err);
    size_t n = cache.list.n;
    struct gw_sum **v = rc ? NULL : malloc((n ? n : 1) * sizeof(*v));
    if (!rc && !v)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; !rc && i < n; i++)
        v[i] = &cache.list.v[i];
    if (!rc && n)
        qsort(v, n, sizeof(*v), by_last_desc);
    cJSON *arr = rc ? NULL : cJSON_CreateArray();
    if (!rc && !arr)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; !rc && i < n; i++) {
        cJSON *x = sum_json(v[i]);
        if (!x || !cJSON_AddItemToArray(arr, x)) {
            cJSON_Delete(x);
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        }
    }
    pthread_mutex_unlock(&cache.mu);
    free(v);
    if (rc) {
        cJSON_Delete(arr);
        return rc;
    }
    *out = arr;
    return FO_OK;
}

/* ---- one session, call by call ------------------------------------------ */

struct gw_show {
    const char *name;
    struct gw_list sum; /* the one session's summary */
    cJSON *steps;
    long long shown;
};

/* A call as a timeline step (the shape of run_show's steps): a model call
 * from its start (the entry's time less its latency) to its entry. */
static cJSON *call_step(const struct gw_one *c)
{
    const cJSON *b = c->body;
    const char *m = jstr(b, "model");
    long long lat = jnum(b, "latency_us", 0);
    cJSON *x = cJSON_CreateObject();
    cJSON *en = x ? cJSON_AddArrayToObject(x, "entries") : NULL;
    int ok = en && cJSON_AddStringToObject(x, "kind", "model") &&
             cJSON_AddStringToObject(x, "name", m ? m : "gateway_call") &&
             fo_json_add_int(x, "seq", c->e.seq) &&
             fo_json_add_int(x, "start_seq", c->e.seq) &&
             fo_json_add_int(x, "start_ts", c->e.ts - lat) &&
             fo_json_add_int(x, "end_ts", c->e.ts) &&
             fo_json_add_int(x, "duration_ms", lat / 1000) &&
             cJSON_AddItemToArray(en, cJSON_CreateNumber((double)c->e.seq)) &&
             cJSON_AddBoolToObject(x, "ok", !orch_gw_call_failed(b));
    const char *keys[] = {"model", "provider", "api", "error_class", "error"};
    for (int i = 0; ok && i < 5; i++)
        if (jstr(b, keys[i]))
            ok = cJSON_AddStringToObject(x, keys[i], jstr(b, keys[i])) != NULL;
    ok = ok && fo_json_add_int(x, "status", jnum(b, "status", 0)) &&
         cJSON_AddBoolToObject(
             x, "stream",
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "stream")));
    if (ok && jnum(b, "ttft_us", -1) >= 0)
        ok =
            fo_json_add_int(x, "ttft_ms", jnum(b, "ttft_us", 0) / 1000) != NULL;
    if (ok &&
        (jnum(b, "tokens_in", -1) >= 0 || jnum(b, "tokens_out", -1) >= 0)) {
        cJSON *t = cJSON_AddObjectToObject(x, "tokens");
        ok = t &&
             (jnum(b, "tokens_in", -1) < 0 ||
              fo_json_add_int(t, "input", jnum(b, "tokens_in", 0))) &&
             (jnum(b, "tokens_out", -1) < 0 ||
              fo_json_add_int(t, "output", jnum(b, "tokens_out", 0)));
    }
    if (ok && !b)
        ok = cJSON_AddTrueToObject(x, "redacted") != NULL;
    if (!ok) {
        cJSON_Delete(x);
        return NULL;
    }
    return x;
}

static int show_one(void *ctx, const struct gw_one *c)
{
    struct gw_show *s = ctx;
    if (strcmp(c->name, s->name) != 0)
        return 0;
    int rc = sum_one(&s->sum, c);
    if (rc || s->shown >= ORCH_GW_STEPS_MAX)
        return rc;
    cJSON *x = call_step(c);
    if (!x || !cJSON_AddItemToArray(s->steps, x)) {
        cJSON_Delete(x);
        return FO_E_NOMEM;
    }
    s->shown++;
    return 0;
}

/* The seqs of session name's calls (malloc'd, *n of them; NULL and 0
 * when none), from the cache. */
static int session_seqs(struct ledger *l, const char *name, int64_t **out,
                        size_t *n, struct fo_err *err)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&cache.mu);
    int rc = cache_update(l, err);
    for (size_t i = 0; !rc && i < cache.list.n; i++) {
        const struct gw_sum *g = &cache.list.v[i];
        if (strcmp(g->name, name) != 0)
            continue;
        *out = malloc(g->nseq * sizeof(**out));
        if (!*out)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        else
            memcpy(*out, g->seqs, g->nseq * sizeof(**out));
        *n = *out ? g->nseq : 0;
        break;
    }
    pthread_mutex_unlock(&cache.mu);
    return rc;
}

int orch_gw_session_show(struct ledger *l, const char *name, cJSON **out,
                         struct fo_err *err)
{
    struct gw_show s = {.name = name, .steps = cJSON_CreateArray()};
    if (!s.steps)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int64_t *seqs = NULL;
    size_t n = 0;
    int rc = session_seqs(l, name, &seqs, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        struct ledger_entry e;
        rc = ledger_get(l, seqs[i], &e, NULL, err);
        if (!rc)
            rc = gw_read(l, &e, show_one, &s, err);
    }
    free(seqs);
    if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc && !s.sum.n)
        rc = fo_err_set(err, FO_E_NOT_FOUND,
                        "gateway session %.200s: no gateway_call entry names "
                        "it (GET /runs lists the sessions)",
                        name);
    cJSON *o = rc ? NULL : sum_json(&s.sum.v[0]);
    if (!rc && !o)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc &&
        (!fo_json_add_int(o, "duration_ms",
                          (s.sum.v[0].last_ts - s.sum.v[0].start_ts) / 1000) ||
         !cJSON_AddBoolToObject(o, "truncated", s.shown < s.sum.v[0].calls) ||
         !cJSON_AddItemToObject(o, "steps", s.steps)))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    else if (!rc)
        s.steps = NULL;
    cJSON_Delete(s.steps);
    list_free(&s.sum);
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}
