/* orch_route: the reference's lexical router, exactly: token
 * set, per-lane hits and score, the margin rule, the hit-count floor, and
 * escalation with the margin as its confidence. */
#include "daemon/orch_types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch_types_int.h"
#include "ledger/fo_json.h"

#define TOP_MIN 0.5
#define MARGIN_MIN 0.15
#define HITS_MIN 3
#define HITS_LEAD 2

/* The token set: the maximal [a-z0-9]+ runs of the lowercased text, as
 * offsets into a lowercased copy, sorted and deduplicated for bsearch. */
struct tokens {
    char *text; /* lowercased copy, each token NUL-terminated in place */
    const char **v;
    size_t n;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int tokens_build(const char *text, size_t len, struct tokens *t)
{
    t->text = malloc(len + 1);
    t->v = malloc((len / 2 + 1) * sizeof(*t->v));
    t->n = 0;
    if (!t->text || !t->v)
        return FO_E_NOMEM;
    int in_token = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        int word = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        t->text[i] = word ? (char)c : '\0';
        if (word && !in_token)
            t->v[t->n++] = &t->text[i];
        in_token = word;
    }
    t->text[len] = '\0';
    qsort(t->v, t->n, sizeof(*t->v), cmp_str);
    size_t w = 0;
    for (size_t i = 0; i < t->n; i++)
        if (w == 0 || strcmp(t->v[w - 1], t->v[i]) != 0)
            t->v[w++] = t->v[i];
    t->n = w;
    return FO_OK;
}

static void tokens_release(struct tokens *t)
{
    free(t->text);
    free(t->v);
}

static int has_token(const struct tokens *t, const char *kw)
{
    return t->n > 0 && bsearch(&kw, t->v, t->n, sizeof(*t->v), cmp_str) != NULL;
}

/* (score desc, name asc): names are unique, so the order is total and the
 * result never depends on the roster's order. */
static int by_score(const void *a, const void *b)
{
    const struct orch_candidate *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return strcmp(x->agent, y->agent);
}

/* (hits desc, name asc). */
static int by_hits(const void *a, const void *b)
{
    const struct orch_candidate *x = a, *y = b;
    if (x->hits != y->hits)
        return x->hits > y->hits ? -1 : 1;
    return strcmp(x->agent, y->agent);
}

/* The hit test of rules 2 and 3: at least 3 hits and 2 more than next. */
static int hits_lead(size_t first, size_t next)
{
    return first >= HITS_MIN && first >= next + HITS_LEAD;
}

/* Moves candidate at index i to the head, keeping the others in order. */
static void to_head(struct orch_candidate *c, size_t i)
{
    struct orch_candidate x = c[i];
    memmove(&c[1], &c[0], i * sizeof(*c));
    c[0] = x;
}

int orch_route(const struct orch_roster *r, const char *text, size_t len,
               struct orch_route *out, struct fo_err *err)
{
    struct tokens t = {0};
    struct orch_candidate *c = NULL, *h = NULL;
    int rc;
    if (len > ORCH_ROUTE_TEXT_MAX) {
        rc = fo_err_set(err, FO_E_INVALID, "text: over %u bytes",
                        ORCH_ROUTE_TEXT_MAX);
        goto out;
    }
    c = calloc(r->n ? r->n : 1, sizeof(*c));
    h = calloc(r->n ? r->n : 1, sizeof(*h));
    if (!c || !h || tokens_build(text, len, &t) != FO_OK) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    for (size_t i = 0; i < r->n; i++) {
        const struct orch_lane *l = &r->lanes[i];
        size_t hits = 0;
        for (size_t k = 0; k < l->n_keywords; k++)
            hits += (size_t)has_token(&t, l->keywords[k]);
        c[i].agent = l->name;
        c[i].hits = hits;
        c[i].score = (double)hits / (double)l->n_keywords;
    }
    qsort(c, r->n, sizeof(*c), by_score);
    double top = r->n > 0 ? c[0].score : 0.0;
    double second = r->n > 1 ? c[1].score : 0.0;
    *out = (struct orch_route){.candidates = c, .n = r->n};
    if (r->n > 0 && top >= TOP_MIN && top - second >= MARGIN_MIN) {
        /* (1) a clear winner by score */
        out->decided = c[0].agent;
        out->confidence = top;
    } else {
        memcpy(h, c, r->n * sizeof(*c));
        qsort(h, r->n, sizeof(*h), by_hits);
        size_t next = r->n > 1 ? h[1].hits : 0;
        if (r->n > 0 && hits_lead(h[0].hits, next)) {
            /* (2) a clear winner by hit count: moves to the head */
            size_t i = 0;
            while (strcmp(c[i].agent, h[0].agent) != 0)
                i++;
            to_head(c, i);
            out->decided = c[0].agent;
            out->confidence = fmax(c[0].score, TOP_MIN);
        } else if (r->n > 0 && hits_lead(c[0].hits, r->n > 1 ? c[1].hits : 0)) {
            /* (3) the top-scored leads the second-scored on hits */
            out->decided = c[0].agent;
            out->confidence = fmax(top, TOP_MIN);
        } else {
            /* (4) escalate: the classifier picks; confidence the margin */
            out->needs_escalation = 1;
            out->confidence = top - second;
        }
    }
    c = NULL;
    rc = FO_OK;
out:
    tokens_release(&t);
    free(c);
    free(h);
    return rc;
}

void orch_route_release(struct orch_route *rt)
{
    if (!rt)
        return;
    free(rt->candidates);
    rt->candidates = NULL;
    rt->n = 0;
}

double orch_round6(double d)
{
    /* round() of d * 1e6 is exact for |d| <= 2^53 / 1e6; the division then
     * gives the double nearest the 6-decimal value, which the JCS number
     * writer prints in its shortest form: 0.39999999999999997 → 0.4. */
    double r = round(d * 1e6) / 1e6;
    return r == 0.0 ? 0.0 : r; /* no -0 */
}

cJSON *orch_route_json(const struct orch_route *rt)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "candidates") : NULL;
    int ok =
        arr &&
        (rt->decided
             ? cJSON_AddStringToObject(o, "decided", rt->decided) != NULL
             : cJSON_AddNullToObject(o, "decided") != NULL) &&
        cJSON_AddNumberToObject(o, "confidence", orch_round6(rt->confidence)) &&
        cJSON_AddBoolToObject(o, "needs_escalation", rt->needs_escalation);
    for (size_t i = 0; ok && i < rt->n; i++) {
        cJSON *c = cJSON_CreateObject();
        ok = c &&
             cJSON_AddStringToObject(c, "agent", rt->candidates[i].agent) &&
             cJSON_AddNumberToObject(c, "score",
                                     orch_round6(rt->candidates[i].score));
        if (c)
            cJSON_AddItemToArray(arr, c);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
