/* orch_campaign: campaigns declared, reduced, dispatched and reported
 * (orch_campaign.h). */
#include "daemon/orch_campaign.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define MARK "campaign "

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, "out of memory");
}

static const char *str(const cJSON *o, const char *k, const char *def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : def;
}

static long long num(const cJSON *o, const char *k)
{
    long long v = 0;
    return fo_json_get_int(o, k, -1000000000LL, 1000000000LL, &v) == FO_OK ? v
                                                                           : 0;
}

static int good_id(const char *s);

int orch_campaign_id_ok(const char *s)
{
    return good_id(s);
}

/* 1..ORCH_CAMPAIGN_ID_MAX bytes of A-Za-z0-9._- */
static int good_id(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (!n || n > ORCH_CAMPAIGN_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

static int owned_by_forum(const cJSON *p)
{
    return !strcmp(str(p, "owner", "forum"), "forum");
}

/* ---- validation ---------------------------------------------------------- */

/* Optional members of their types. */
static int check_opt(const cJSON *o, const char *what, const char *id,
                     struct fo_err *err)
{
    static const char *const strs[] = {"title", "agent", "instruction",
                                       "owner"};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, strs[i]);
        if (v && !cJSON_IsString(v))
            return fo_err_set(err, FO_E_INVALID, "%s %s: %s: a string", what,
                              id, strs[i]);
    }
    long long p;
    if (cJSON_GetObjectItemCaseSensitive(o, "priority") &&
        fo_json_get_int(o, "priority", -1000000000LL, 1000000000LL, &p))
        return fo_err_set(err, FO_E_INVALID, "%s %s: priority: an integer",
                          what, id);
    static const char *const lists[] = {"depends_on", "done_when"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, lists[i]), *x;
        if (a && !cJSON_IsArray(a))
            return fo_err_set(err, FO_E_INVALID, "%s %s: %s: an array", what,
                              id, lists[i]);
        cJSON_ArrayForEach (x, a)
            if (!cJSON_IsString(x))
                return fo_err_set(err, FO_E_INVALID, "%s %s: %s: strings only",
                                  what, id, lists[i]);
    }
    return FO_OK;
}

/* The features of c in file order into f (at most ORCH_CAMPAIGN_FEATURES_MAX),
 * each checked and distinct. */
static int collect(const cJSON *c, const cJSON **f, size_t *n,
                   struct fo_err *err)
{
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(c, "projects"), *p, *x;
    if (!cJSON_IsArray(ps) || !cJSON_GetArraySize(ps))
        return fo_err_set(err, FO_E_INVALID, "projects: a non-empty array");
    *n = 0;
    cJSON_ArrayForEach (p, ps) {
        const char *pid = str(p, "project_id", NULL);
        if (!cJSON_IsObject(p) || !good_id(pid))
            return fo_err_set(err, FO_E_INVALID,
                              "projects: each needs a project_id of 1..%d "
                              "of A-Za-z0-9._-",
                              ORCH_CAMPAIGN_ID_MAX);
        for (const cJSON *q = ps->child; q != p; q = q->next)
            if (!strcmp(str(q, "project_id", ""), pid))
                return fo_err_set(err, FO_E_INVALID, "duplicate project id %s",
                                  pid);
        int rc = check_opt(p, "project", pid, err);
        if (rc)
            return rc;
        const cJSON *fs = cJSON_GetObjectItemCaseSensitive(p, "features");
        if (fs && !cJSON_IsArray(fs))
            return fo_err_set(err, FO_E_INVALID,
                              "project %s: features: an "
                              "array",
                              pid);
        cJSON_ArrayForEach (x, fs) {
            const char *fid = str(x, "feature_id", NULL);
            if (!cJSON_IsObject(x) || !good_id(fid))
                return fo_err_set(err, FO_E_INVALID,
                                  "project %s: each feature needs a "
                                  "feature_id of 1..%d of A-Za-z0-9._-",
                                  pid, ORCH_CAMPAIGN_ID_MAX);
            if (*n == ORCH_CAMPAIGN_FEATURES_MAX)
                return fo_err_set(err, FO_E_INVALID, "at most %d features",
                                  ORCH_CAMPAIGN_FEATURES_MAX);
            for (size_t k = 0; k < *n; k++)
                if (!strcmp(str(f[k], "feature_id", ""), fid))
                    return fo_err_set(err, FO_E_INVALID,
                                      "duplicate feature id %s", fid);
            if ((rc = check_opt(x, "feature", fid, err)))
                return rc;
            f[(*n)++] = x;
        }
    }
    return FO_OK;
}

static long find(const cJSON **f, size_t n, const char *id)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(str(f[k], "feature_id", ""), id))
            return (long)k;
    return -1;
}

/* Names a cycle among the features not layered (each has a dependency
 * among them): follows the first such dependency until one repeats. */
static int name_cycle(const cJSON **f, size_t n, const unsigned char *done,
                      struct fo_err *err)
{
    long *seen = malloc(n * sizeof(*seen));
    size_t *path = malloc((n + 1) * sizeof(*path));
    if (!seen || !path) {
        free(seen);
        free(path);
        return nomem(err);
    }
    for (size_t k = 0; k < n; k++)
        seen[k] = -1;
    size_t at = 0, len = 0;
    while (done[at])
        at++;
    while (seen[at] < 0) {
        seen[at] = (long)len;
        path[len++] = at;
        const cJSON *d;
        cJSON_ArrayForEach (
            d, cJSON_GetObjectItemCaseSensitive(f[at], "depends_on")) {
            long j = find(f, n, d->valuestring);
            if (!done[j]) {
                at = (size_t)j;
                break;
            }
        }
    }
    struct fo_buf b;
    fo_buf_init(&b, 4096);
    for (size_t k = (size_t)seen[at]; k < len; k++)
        fo_buf_printf(&b, "%s -> ", str(f[path[k]], "feature_id", ""));
    fo_buf_printf(&b, "%s", str(f[at], "feature_id", ""));
    fo_err_set(err, FO_E_INVALID, "dependency cycle: %s",
               b.data ? b.data : "?");
    fo_buf_release(&b);
    free(seen);
    free(path);
    return FO_E_INVALID;
}

int orch_campaign_validate(const cJSON *c, struct fo_err *err)
{
    if (!cJSON_IsObject(c) || !good_id(str(c, "campaign_id", NULL)))
        return fo_err_set(err, FO_E_INVALID,
                          "campaign_id: 1..%d of A-Za-z0-9._-",
                          ORCH_CAMPAIGN_ID_MAX);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "title");
    if (t && !cJSON_IsString(t))
        return fo_err_set(err, FO_E_INVALID, "title: a string");
    const cJSON **f = malloc(ORCH_CAMPAIGN_FEATURES_MAX * sizeof(*f));
    unsigned char *done = calloc(ORCH_CAMPAIGN_FEATURES_MAX, 1);
    size_t n = 0;
    int rc = f && done ? collect(c, f, &n, err) : nomem(err);
    for (size_t k = 0; !rc && k < n; k++) {
        const cJSON *d;
        cJSON_ArrayForEach (
            d, cJSON_GetObjectItemCaseSensitive(f[k], "depends_on")) {
            if (find(f, n, d->valuestring) < 0) {
                rc = fo_err_set(err, FO_E_INVALID,
                                "feature %s depends on unknown feature %s",
                                str(f[k], "feature_id", ""), d->valuestring);
                break;
            }
        }
    }
    /* Kahn layering: a feature is layered once all it depends on is */
    size_t left = n;
    for (int moved = 1; !rc && left && moved;) {
        moved = 0;
        for (size_t k = 0; k < n; k++) {
            if (done[k])
                continue;
            int ready = 1;
            const cJSON *d;
            cJSON_ArrayForEach (
                d, cJSON_GetObjectItemCaseSensitive(f[k], "depends_on"))
                if (!done[find(f, n, d->valuestring)])
                    ready = 0;
            if (ready) {
                done[k] = 1;
                left--;
                moved = 1;
            }
        }
    }
    if (!rc && left)
        rc = name_cycle(f, n, done, err);
    free(f);
    free(done);
    return rc;
}

/* ---- the reduction ------------------------------------------------------- */

struct scan {
    const char *id;
    cJSON *declared; /* the campaign_declared body */
    int64_t declared_seq;
    cJSON *dispatch; /* feature_id -> run (the latest dispatch) */
    cJSON *fstat;    /* feature_id -> its latest feature_status */
    cJSON *pstat;    /* project_id -> its latest project_status */
    cJSON *orphans;  /* feature_id -> run of the first marked request */
    char last[ORCH_CAMPAIGN_ID_MAX + 1]; /* id NULL: the latest declared */
    struct fo_err *err;
};

static int interesting(const struct ledger_entry *e)
{
    return !strcmp(e->kind, "campaign_declared") ||
           !strcmp(e->kind, "campaign_dispatch") ||
           !strcmp(e->kind, "feature_status") ||
           !strcmp(e->kind, "project_status") ||
           (!strcmp(e->kind, "request") && e->parent == LEDGER_NO_PARENT);
}

static int put(cJSON *map, const char *key, cJSON *v)
{
    if (!v)
        return 0;
    if (cJSON_GetObjectItemCaseSensitive(map, key))
        return cJSON_ReplaceItemInObjectCaseSensitive(map, key, v);
    return cJSON_AddItemToObject(map, key, v);
}

/* A run's request whose first line is "campaign ID feature FID". */
static int on_request(struct scan *s, const struct ledger_entry *e,
                      const cJSON *b)
{
    const char *r = str(b, "request", ""), *v = str(b, "via", "");
    size_t il = strlen(s->id);
    if (strcmp(v, "run_start") || strncmp(r, MARK, strlen(MARK)) ||
        strncmp(r + strlen(MARK), s->id, il) ||
        strncmp(r + strlen(MARK) + il, " feature ", 9) || !s->declared ||
        e->seq < s->declared_seq)
        return 1;
    const char *fid = r + strlen(MARK) + il + 9, *nl = strchr(fid, '\n');
    size_t fl = nl ? (size_t)(nl - fid) : strlen(fid);
    char key[ORCH_CAMPAIGN_ID_MAX + 1];
    if (!fl || fl > ORCH_CAMPAIGN_ID_MAX)
        return 1;
    memcpy(key, fid, fl);
    key[fl] = '\0';
    if (cJSON_GetObjectItemCaseSensitive(s->orphans, key))
        return 1;
    return put(s->orphans, key, cJSON_CreateNumber((double)e->seq));
}

static int on_entry(void *ctx, const struct ledger_entry *e, const char *body,
                    size_t len)
{
    struct scan *s = ctx;
    cJSON *b = NULL;
    struct fo_err perr;
    if (!body || !interesting(e) || fo_json_parse(body, len, &b, &perr))
        return 0;
    const char *cid = str(b, "campaign_id", "");
    int ok = 1;
    if (!s->id) { /* the first pass: the latest declared id */
        if (!strcmp(e->kind, "campaign_declared") && good_id(cid))
            snprintf(s->last, sizeof(s->last), "%s", cid);
    } else if (!strcmp(e->kind, "request")) {
        ok = on_request(s, e, b);
    } else if (strcmp(cid, s->id)) {
        ok = 1;
    } else if (!strcmp(e->kind, "campaign_declared")) {
        if (!s->declared) {
            s->declared = b;
            s->declared_seq = e->seq;
            b = NULL;
        }
    } else if (!strcmp(e->kind, "campaign_dispatch")) {
        long long run = num(b, "run");
        ok = put(s->dispatch, str(b, "feature_id", ""),
                 cJSON_CreateNumber((double)run));
    } else {
        int feat = !strcmp(e->kind, "feature_status");
        if (!fo_json_add_int(b, "seq", e->seq))
            ok = 0;
        else if ((ok = put(feat ? s->fstat : s->pstat,
                           str(b, feat ? "feature_id" : "project_id", ""), b)))
            b = NULL;
    }
    cJSON_Delete(b);
    if (!ok) {
        nomem(s->err);
        return FO_E_NOMEM;
    }
    return 0;
}

static void scan_free(struct scan *s)
{
    cJSON_Delete(s->declared);
    cJSON_Delete(s->dispatch);
    cJSON_Delete(s->fstat);
    cJSON_Delete(s->pstat);
    cJSON_Delete(s->orphans);
}

static int scan(struct ledger *l, const char *id, struct scan *s,
                struct fo_err *err)
{
    memset(s, 0, sizeof(*s));
    s->err = err;
    int rc;
    if (!id) {
        if ((rc = ledger_range_bodies(l, 0, -1, on_entry, s, err)))
            return rc;
        if (!s->last[0])
            return fo_err_set(err, FO_E_NOT_FOUND, "no campaign is declared");
        id = s->last;
    }
    s->id = id;
    s->dispatch = cJSON_CreateObject();
    s->fstat = cJSON_CreateObject();
    s->pstat = cJSON_CreateObject();
    s->orphans = cJSON_CreateObject();
    if (!s->dispatch || !s->fstat || !s->pstat || !s->orphans)
        rc = nomem(err);
    else
        rc = ledger_range_bodies(l, 0, -1, on_entry, s, err);
    if (!rc && !s->declared)
        rc = fo_err_set(err, FO_E_NOT_FOUND, "no campaign %s is declared", id);
    if (rc)
        scan_free(s);
    return rc;
}

/* done, failed or running, from the run's own entries. */
static const char *run_state(struct ledger *l, int64_t run, char *got,
                             size_t cap)
{
    cJSON *g = NULL;
    struct fo_err e;
    if (orch_run_get(l, run, &g, &e) != FO_OK) {
        snprintf(got, cap, "%s",
                 e.code == FO_E_NOT_A_RUN ? "not_a_run" : "not_found");
        return "failed";
    }
    snprintf(got, cap, "%s", str(g, "state", "unknown"));
    cJSON_Delete(g);
    if (!strcmp(got, "done"))
        return "done";
    /* an interrupted or stopped run resumes in its daemon; one waiting at
     * a gate goes on once the gate is decided */
    if (!strcmp(got, "running") || !strcmp(got, "waiting") ||
        !strcmp(got, "stopped") || !strcmp(got, "interrupted") ||
        !strcmp(got, "unknown"))
        return "running";
    return "failed";
}

/* One feature's row before its dependencies are weighed: state "pending"
 * for a forum feature not dispatched. */
static cJSON *feature_row(struct ledger *l, const struct scan *s,
                          const cJSON *p, const cJSON *f)
{
    const char *fid = str(f, "feature_id", "");
    cJSON *o = cJSON_CreateObject();
    const cJSON *deps = cJSON_GetObjectItemCaseSensitive(f, "depends_on");
    int ok =
        o && cJSON_AddStringToObject(o, "feature_id", fid) &&
        cJSON_AddStringToObject(o, "project_id", str(p, "project_id", "")) &&
        cJSON_AddStringToObject(o, "owner", str(p, "owner", "forum")) &&
        cJSON_AddStringToObject(o, "title", str(f, "title", "")) &&
        cJSON_AddStringToObject(o, "agent", str(f, "agent", "")) &&
        fo_json_add_int(o, "priority", num(f, "priority")) &&
        cJSON_AddItemToObject(o, "depends_on",
                              deps ? cJSON_Duplicate(deps, 1)
                                   : cJSON_CreateArray());
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    const char *state = "pending";
    if (!owned_by_forum(p)) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(s->fstat, fid);
        state = r ? str(r, "status", "unreported") : "unreported";
        if (r && !cJSON_AddItemToObject(o, "reported", cJSON_Duplicate(r, 1)))
            ok = 0;
    } else {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(s->dispatch, fid);
        int witnessed = d != NULL;
        if (!d)
            d = cJSON_GetObjectItemCaseSensitive(s->orphans, fid);
        if (d) {
            char got[32];
            state = run_state(l, (int64_t)d->valuedouble, got, sizeof(got));
            ok = fo_json_add_int(o, "run", (long long)d->valuedouble) &&
                 cJSON_AddStringToObject(o, "run_state", got) &&
                 cJSON_AddBoolToObject(o, "dispatch_witnessed", witnessed);
        }
    }
    if (!ok || !cJSON_AddStringToObject(o, "state", state)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *row_of(cJSON *rows, const char *fid)
{
    cJSON *r;
    cJSON_ArrayForEach (r, rows)
        if (!strcmp(str(r, "feature_id", ""), fid))
            return r;
    return NULL;
}

/* Weighs the dependencies of every pending row, in layers (the graph was
 * validated acyclic): blocked, runnable or waiting. */
static int weigh(cJSON *rows)
{
    for (int moved = 1; moved;) {
        moved = 0;
        cJSON *r;
        cJSON_ArrayForEach (r, rows) {
            if (strcmp(str(r, "state", ""), "pending"))
                continue;
            int all_done = 1, bad = 0, unsettled = 0;
            const cJSON *d;
            cJSON_ArrayForEach (
                d, cJSON_GetObjectItemCaseSensitive(r, "depends_on")) {
                const char *ds = str(row_of(rows, d->valuestring), "state", "");
                unsettled |= !strcmp(ds, "pending");
                bad |= !strcmp(ds, "failed") || !strcmp(ds, "blocked");
                all_done &= !strcmp(ds, "done");
            }
            const char *now = bad         ? "blocked"
                              : all_done  ? "runnable"
                              : unsettled ? NULL
                                          : "waiting";
            if (!now)
                continue;
            cJSON_ReplaceItemInObjectCaseSensitive(r, "state",
                                                   cJSON_CreateString(now));
            moved = 1;
        }
    }
    return 0;
}

static const char *const states[] = {"done",        "running",   "runnable",
                                     "waiting",     "blocked",   "failed",
                                     "in_progress", "unreported"};

static cJSON *counts_of(const cJSON *rows, int *complete)
{
    cJSON *c = cJSON_CreateObject();
    *complete = 1;
    for (size_t k = 0; c && k < sizeof(states) / sizeof(states[0]); k++) {
        long long n = 0;
        const cJSON *r;
        cJSON_ArrayForEach (r, rows)
            n += !strcmp(str(r, "state", ""), states[k]);
        if (!fo_json_add_int(c, states[k], n)) {
            cJSON_Delete(c);
            return NULL;
        }
    }
    const cJSON *r;
    cJSON_ArrayForEach (r, rows)
        if (!strcmp(str(r, "owner", ""), "forum") &&
            strcmp(str(r, "state", ""), "done"))
            *complete = 0;
    return c;
}

static cJSON *projects_of(const struct scan *s)
{
    cJSON *a = cJSON_CreateArray();
    const cJSON *p;
    cJSON_ArrayForEach (
        p, cJSON_GetObjectItemCaseSensitive(s->declared, "projects")) {
        const char *pid = str(p, "project_id", "");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(s->pstat, pid), *f;
        cJSON *o = cJSON_CreateObject(), *ids = cJSON_CreateArray();
        cJSON_ArrayForEach (f, cJSON_GetObjectItemCaseSensitive(p, "features"))
            cJSON_AddItemToArray(ids,
                                 cJSON_CreateString(str(f, "feature_id", "")));
        if (!a || !o || !ids || !cJSON_AddItemToArray(a, o) ||
            !cJSON_AddStringToObject(o, "project_id", pid) ||
            !cJSON_AddStringToObject(o, "owner", str(p, "owner", "forum")) ||
            !fo_json_add_int(o, "priority", num(p, "priority")) ||
            !cJSON_AddItemToObject(o, "features", ids) ||
            !cJSON_AddItemToObject(o, "reported",
                                   r ? cJSON_Duplicate(r, 1)
                                     : cJSON_CreateNull())) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static int reduce(struct ledger *l, const char *id, struct scan *s, cJSON **out,
                  struct fo_err *err)
{
    int rc = scan(l, id, s, err);
    if (rc)
        return rc;
    cJSON *o = cJSON_CreateObject(), *rows = cJSON_CreateArray();
    int ok = o && rows && cJSON_AddItemToObject(o, "features", rows);
    if (!ok)
        cJSON_Delete(rows);
    const cJSON *p, *f;
    cJSON_ArrayForEach (
        p, cJSON_GetObjectItemCaseSensitive(s->declared, "projects"))
        cJSON_ArrayForEach (f, cJSON_GetObjectItemCaseSensitive(p, "features"))
            ok = ok && cJSON_AddItemToArray(rows, feature_row(l, s, p, f));
    int complete = 0;
    cJSON *counts = ok && !weigh(rows) ? counts_of(rows, &complete) : NULL;
    ok = ok && counts && cJSON_AddItemToObject(o, "counts", counts);
    if (!ok)
        cJSON_Delete(counts);
    ok = ok &&
         cJSON_AddStringToObject(o, "campaign_id",
                                 str(s->declared, "campaign_id", "")) &&
         cJSON_AddStringToObject(o, "title", str(s->declared, "title", "")) &&
         fo_json_add_int(o, "declared_seq", s->declared_seq) &&
         cJSON_AddBoolToObject(o, "complete", complete) &&
         cJSON_AddItemToObject(o, "projects", projects_of(s));
    if (!ok) {
        cJSON_Delete(o);
        scan_free(s);
        return nomem(err);
    }
    *out = o;
    return FO_OK;
}

int orch_campaign_status(struct ledger *l, const char *id, cJSON **out,
                         struct fo_err *err)
{
    struct scan s;
    int rc = reduce(l, id, &s, out, err);
    if (!rc)
        scan_free(&s);
    return rc;
}

/* ---- next, dispatch, ingest, declare ------------------------------------ */

char *orch_campaign_request(const char *campaign_id, const cJSON *f)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int bad = fo_buf_printf(&b, MARK "%s feature %s\n\n%s\n\n%s\n", campaign_id,
                            str(f, "feature_id", ""), str(f, "title", ""),
                            str(f, "instruction", ""));
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(f, "done_when"), *x;
    if (cJSON_GetArraySize(w))
        bad |= fo_buf_printf(&b, "\nDone when:\n");
    cJSON_ArrayForEach (x, w)
        bad |= fo_buf_printf(&b, "- %s\n", x->valuestring);
    if (bad) {
        fo_buf_release(&b);
        return NULL;
    }
    return fo_buf_detach(&b, NULL);
}

static const cJSON *declared_feature(const cJSON *c, const char *fid,
                                     const cJSON **project)
{
    const cJSON *p, *f;
    cJSON_ArrayForEach (p, cJSON_GetObjectItemCaseSensitive(c, "projects"))
        cJSON_ArrayForEach (f, cJSON_GetObjectItemCaseSensitive(p, "features"))
            if (!strcmp(str(f, "feature_id", ""), fid)) {
                if (project)
                    *project = p;
                return f;
            }
    return NULL;
}

static int prio_cmp(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    long long px = num(x, "priority"), py = num(y, "priority");
    if (px != py)
        return px > py ? -1 : 1;
    return strcmp(str(x, "feature_id", ""), str(y, "feature_id", ""));
}

static cJSON *pick(const cJSON *rows, const struct scan *s, const char *state,
                   int want_witnessed)
{
    const cJSON *v[ORCH_CAMPAIGN_FEATURES_MAX], *r;
    size_t n = 0;
    cJSON_ArrayForEach (r, rows) {
        const cJSON *w =
            cJSON_GetObjectItemCaseSensitive(r, "dispatch_witnessed");
        if (!strcmp(str(r, "state", ""), state) &&
            (want_witnessed < 0 || (w && cJSON_IsTrue(w) == want_witnessed)) &&
            n < ORCH_CAMPAIGN_FEATURES_MAX)
            v[n++] = r;
    }
    qsort(v, n, sizeof(v[0]), prio_cmp);
    cJSON *a = cJSON_CreateArray();
    for (size_t k = 0; a && k < n; k++) {
        cJSON *o = cJSON_Duplicate(v[k], 1);
        if (!strcmp(state, "runnable") && o) {
            char *req = orch_campaign_request(
                s->id,
                declared_feature(s->declared, str(o, "feature_id", ""), NULL));
            cJSON *rs = req ? cJSON_CreateString(req) : NULL;
            free(req);
            if (!rs || !cJSON_AddItemToObject(o, "request", rs)) {
                cJSON_Delete(rs);
                cJSON_Delete(o);
                o = NULL;
            }
        }
        if (!o || !cJSON_AddItemToArray(a, o)) {
            cJSON_Delete(o);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

int orch_campaign_next(struct ledger *l, const char *id, cJSON **out,
                       struct fo_err *err)
{
    struct scan s;
    cJSON *st = NULL;
    int rc = reduce(l, id, &s, &st, err);
    if (rc)
        return rc;
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(st, "features");
    cJSON *o = cJSON_CreateObject();
    /* an unwitnessed run is listed whatever its state */
    cJSON *un = cJSON_CreateArray();
    const cJSON *r;
    cJSON_ArrayForEach (r, rows) {
        const cJSON *w =
            cJSON_GetObjectItemCaseSensitive(r, "dispatch_witnessed");
        if (w && cJSON_IsFalse(w))
            cJSON_AddItemToArray(un, cJSON_Duplicate(r, 1));
    }
    int ok =
        o && un && cJSON_AddStringToObject(o, "campaign_id", s.id) &&
        cJSON_AddItemToObject(o, "runnable", pick(rows, &s, "runnable", -1)) &&
        cJSON_AddItemToObject(o, "running", pick(rows, &s, "running", 1)) &&
        cJSON_AddItemToObject(o, "unwitnessed", un) &&
        cJSON_AddItemToObject(o, "blocked", pick(rows, &s, "blocked", -1)) &&
        cJSON_AddBoolToObject(
            o, "complete",
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "complete")));
    if (!ok && !cJSON_GetObjectItemCaseSensitive(o, "unwitnessed"))
        cJSON_Delete(un);
    cJSON_Delete(st);
    scan_free(&s);
    if (!ok) {
        cJSON_Delete(o);
        return nomem(err);
    }
    *out = o;
    return FO_OK;
}

static int append(struct ledger *l, orch_append_fn fn, void *hook,
                  const char *actor, const char *kind, const cJSON *body,
                  struct ledger_entry *out, struct fo_err *err)
{
    struct fo_buf b;
    fo_buf_init(&b, ledger_max_body(l));
    int rc = fo_json_canon(body, &b, err);
    if (!rc) {
        struct ledger_append req = {.actor = actor,
                                    .kind = kind,
                                    .parent = LEDGER_NO_PARENT,
                                    .body = b.data,
                                    .body_len = b.len};
        rc = fn ? fn(hook, &req, err) : ledger_append_batch(l, &req, 1, err);
        if (!rc && req.rc) {
            rc = req.rc;
            *err = req.err;
        }
        if (!rc)
            *out = req.entry;
    }
    fo_buf_release(&b);
    return rc;
}

/* *out {campaign_id, feature_id?, seq, existing}. */
static int answer(cJSON **out, const char *cid, const char *key,
                  const char *val, int64_t seq, int existing,
                  struct fo_err *err)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "campaign_id", cid) ||
        (key && !cJSON_AddStringToObject(o, key, val)) ||
        !fo_json_add_int(o, "seq", seq) ||
        !cJSON_AddBoolToObject(o, "existing", existing)) {
        cJSON_Delete(o);
        return nomem(err);
    }
    *out = o;
    return FO_OK;
}

int orch_campaign_declare(struct ledger *l, orch_append_fn fn, void *hook,
                          const cJSON *c, cJSON **out, struct fo_err *err)
{
    int rc = orch_campaign_validate(c, err);
    if (rc)
        return rc;
    const char *id = str(c, "campaign_id", "");
    struct scan s;
    rc = scan(l, id, &s, err);
    if (rc == FO_OK) {
        int same = cJSON_Compare(s.declared, c, 1);
        int64_t seq = s.declared_seq;
        scan_free(&s);
        if (!same)
            return fo_err_set(err, FO_E_EXISTS,
                              "campaign %s is declared already (seq %lld) "
                              "with other content",
                              id, (long long)seq);
        return answer(out, id, NULL, NULL, seq, 1, err);
    }
    if (rc != FO_E_NOT_FOUND)
        return rc;
    struct ledger_entry e;
    if ((rc = append(l, fn, hook, "campaign", "campaign_declared", c, &e, err)))
        return rc;
    return answer(out, id, NULL, NULL, e.seq, 0, err);
}

static int dispatch_check(struct ledger *l, const struct scan *s,
                          const char *fid, int64_t run, const cJSON **p,
                          struct fo_err *err)
{
    if (!declared_feature(s->declared, fid, p))
        return fo_err_set(err, FO_E_NOT_FOUND, "campaign %s has no feature %s",
                          s->id, fid);
    if (!owned_by_forum(*p))
        return fo_err_set(err, FO_E_INVALID,
                          "feature %s belongs to %s: forum does not run it",
                          fid, str(*p, "owner", ""));
    cJSON *g = NULL;
    int rc = orch_run_get(l, run, &g, err);
    cJSON_Delete(g);
    return rc;
}

int orch_campaign_dispatch(struct ledger *l, orch_append_fn fn, void *hook,
                           const char *id, const char *fid, int64_t run,
                           cJSON **out, struct fo_err *err)
{
    struct scan s;
    int rc = scan(l, id, &s, err);
    if (rc)
        return rc;
    const cJSON *p = NULL;
    rc = dispatch_check(l, &s, fid, run, &p, err);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(s.dispatch, fid);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(s.orphans, fid);
    int existing = 0;
    if (!rc && d && (int64_t)d->valuedouble == run)
        existing = 1;
    else if (!rc && (d || (o && (int64_t)o->valuedouble != run)))
        rc = fo_err_set(err, FO_E_EXISTS,
                        "feature %s was dispatched already (run %lld)", fid,
                        (long long)(d ? d->valuedouble : o->valuedouble));
    cJSON *body = NULL;
    struct ledger_entry e = {.seq = existing ? (int64_t)d->valuedouble : 0};
    if (!rc && !existing) {
        body = cJSON_CreateObject();
        if (!body || !cJSON_AddStringToObject(body, "campaign_id", s.id) ||
            !cJSON_AddStringToObject(body, "project_id",
                                     str(p, "project_id", "")) ||
            !cJSON_AddStringToObject(body, "feature_id", fid) ||
            !fo_json_add_int(body, "run", run))
            rc = nomem(err);
        else
            rc = append(l, fn, hook, "campaign", "campaign_dispatch", body, &e,
                        err);
    }
    if (!rc &&
        (rc = answer(out, s.id, "feature_id", fid, e.seq, existing, err)) ==
            FO_OK &&
        !fo_json_add_int(*out, "run", run)) {
        cJSON_Delete(*out);
        *out = NULL;
        rc = nomem(err);
    }
    cJSON_Delete(body);
    scan_free(&s);
    return rc;
}

static int ingest_body(const struct scan *s, const char *project,
                       const char *feature, const char *status,
                       const char *source, const char *reason, cJSON **body,
                       struct fo_err *err)
{
    const cJSON *p = NULL, *q;
    cJSON_ArrayForEach (
        q, cJSON_GetObjectItemCaseSensitive(s->declared, "projects"))
        if (!strcmp(str(q, "project_id", ""), project ? project : ""))
            p = q;
    const cJSON *fp = NULL;
    if (!p)
        return fo_err_set(err, FO_E_NOT_FOUND, "campaign %s has no project %s",
                          s->id, project ? project : "(none)");
    if (owned_by_forum(p))
        return fo_err_set(err, FO_E_INVALID,
                          "project %s is owned by forum: its state comes from "
                          "its runs, not from a report",
                          project);
    if (feature && (!declared_feature(s->declared, feature, &fp) || fp != p))
        return fo_err_set(err, FO_E_NOT_FOUND, "project %s has no feature %s",
                          project, feature);
    static const char *const ok[] = {"done", "in_progress", "blocked",
                                     "failed"};
    int known = 0;
    for (size_t k = 0; k < 4; k++)
        known |= status && !strcmp(status, ok[k]);
    if (!known)
        return fo_err_set(err, FO_E_INVALID,
                          "status %s: done, in_progress, blocked or failed",
                          status ? status : "(none)");
    cJSON *b = cJSON_CreateObject();
    *body = b;
    if (!b || !cJSON_AddStringToObject(b, "campaign_id", s->id) ||
        !cJSON_AddStringToObject(b, "project_id", project) ||
        (feature && !cJSON_AddStringToObject(b, "feature_id", feature)) ||
        !cJSON_AddStringToObject(b, "status", status) ||
        !cJSON_AddStringToObject(b, "source",
                                 source ? source : str(p, "owner", "")) ||
        !cJSON_AddStringToObject(b, "reason", reason ? reason : ""))
        return nomem(err);
    return FO_OK;
}

int orch_campaign_ingest(struct ledger *l, orch_append_fn fn, void *hook,
                         const char *id, const char *project,
                         const char *feature, const char *status,
                         const char *source, const char *reason, cJSON **out,
                         struct fo_err *err)
{
    struct scan s;
    int rc = scan(l, id, &s, err);
    if (rc)
        return rc;
    cJSON *body = NULL;
    struct ledger_entry e;
    rc = ingest_body(&s, project, feature, status, source, reason, &body, err);
    if (!rc)
        rc = append(l, fn, hook, "operator",
                    feature ? "feature_status" : "project_status", body, &e,
                    err);
    if (!rc)
        rc = answer(out, s.id, "kind",
                    feature ? "feature_status" : "project_status", e.seq, 0,
                    err);
    cJSON_Delete(body);
    scan_free(&s);
    return rc;
}
