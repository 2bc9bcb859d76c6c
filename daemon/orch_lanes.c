/* orch_lanes: proof lanes, scope grants and vocabulary-gap receipts
 * (orch_lanes.h). */
#include "daemon/orch_lanes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

/* ---- the vocabularies --------------------------------------------------- */

static const char *const s_read[] = {"read", NULL};
static const char *const s_run[] = {"read", "run", NULL};
static const char *const s_judge[] = {"judge", "read", NULL};
static const char *const s_combine[] = {"combine", "read", NULL};
static const char *const s_attest[] = {"attest", "read", NULL};

static const struct orch_proof_lane proof_lanes[] = {
    {"observe", "looks at what is on record and changes nothing", s_read},
    {"execute", "does a task and leaves its result on record", s_run},
    {"validate", "judges a result already on record", s_judge},
    {"synthesize", "joins results on record into one answer", s_combine},
    {"verify", "checks an answer against something outside the run", s_attest},
};

static const struct orch_domain_lane domain_lanes[] = {
    {"frontier-foundry", "new capabilities, evaluated behind gates"},
    {"research-foundry", "research gathered from recorded sources and "
                         "summarised"},
    {"model-foundry", "models trained, evaluated and promoted behind gates"},
    {"scientific-runtime", "computations whose results can be run again"},
    {"formal-proof", "proofs a machine checks, and the checkers' verdicts"},
    {"bio-evidence", "biological evidence kept with its provenance"},
    {"robotics-control", "physical actions within set limits"},
    {"visual-truth", "images and rendered output compared with ground "
                     "truth"},
    {"learning-forge", "teaching material made and graded from recorded "
                       "runs"},
    {"source-federation", "outside sources joined, each with its own "
                          "receipt"},
};

#define N(a) (sizeof(a) / sizeof(*(a)))

const struct orch_proof_lane *orch_proof_lanes(size_t *n)
{
    *n = N(proof_lanes);
    return proof_lanes;
}

const struct orch_domain_lane *orch_domain_lanes(size_t *n)
{
    *n = N(domain_lanes);
    return domain_lanes;
}

static const struct orch_proof_lane *lane_find(const char *name)
{
    for (size_t i = 0; i < N(proof_lanes); i++)
        if (!strcmp(proof_lanes[i].name, name))
            return &proof_lanes[i];
    return NULL;
}

static int domain_known(const char *name)
{
    for (size_t i = 0; i < N(domain_lanes); i++)
        if (!strcmp(domain_lanes[i].name, name))
            return 1;
    return 0;
}

static int granted(const struct orch_proof_lane *l, const char *scope)
{
    for (const char *const *s = l->scopes; *s; s++)
        if (!strcmp(*s, scope))
            return 1;
    return 0;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every scope some lane grants, sorted and distinct, into v (cap >= 16). */
static size_t all_scopes(const char **v)
{
    size_t n = 0;
    for (size_t i = 0; i < N(proof_lanes); i++)
        for (const char *const *s = proof_lanes[i].scopes; *s; s++) {
            size_t j = 0;
            while (j < n && strcmp(v[j], *s))
                j++;
            if (j == n)
                v[n++] = *s;
        }
    qsort(v, n, sizeof(*v), str_cmp);
    return n;
}

static cJSON *str_array(const char *const *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateString(v[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

static size_t count_scopes(const struct orch_proof_lane *l)
{
    size_t n = 0;
    while (l->scopes[n])
        n++;
    return n;
}

cJSON *orch_lanes_json(void)
{
    const char *sc[16];
    size_t ns = all_scopes(sc);
    cJSON *o = cJSON_CreateObject();
    cJSON *pl = o ? cJSON_AddArrayToObject(o, "proof_lanes") : NULL;
    cJSON *dl = o ? cJSON_AddArrayToObject(o, "domain_lanes") : NULL;
    int ok = pl && dl && cJSON_AddItemToObject(o, "scopes", str_array(sc, ns));
    for (size_t i = 0; ok && i < N(proof_lanes); i++) {
        cJSON *x = cJSON_CreateObject();
        ok =
            x && cJSON_AddItemToArray(pl, x) &&
            cJSON_AddStringToObject(x, "name", proof_lanes[i].name) &&
            cJSON_AddStringToObject(x, "authority", proof_lanes[i].authority) &&
            cJSON_AddItemToObject(x, "scopes",
                                  str_array(proof_lanes[i].scopes,
                                            count_scopes(&proof_lanes[i])));
    }
    for (size_t i = 0; ok && i < N(domain_lanes); i++) {
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(dl, x) &&
             cJSON_AddStringToObject(x, "name", domain_lanes[i].name) &&
             cJSON_AddStringToObject(x, "charter", domain_lanes[i].charter);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- judging a claim ---------------------------------------------------- */

static int name_ok(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    return n >= 1 && n <= max && fo_utf8_valid(s, n);
}

static int claim_ok(const struct orch_lane_claim *c, struct fo_err *err)
{
    if (!c->task || !*c->task || !fo_utf8_valid(c->task, strlen(c->task)))
        return fo_err_set(err, FO_E_INVALID, "task: a non-empty text");
    if (!name_ok(c->lane, 64))
        return fo_err_set(err, FO_E_INVALID, "lane: a name of 1-64 bytes");
    if (c->domain && !name_ok(c->domain, 64))
        return fo_err_set(err, FO_E_INVALID, "domain: a name of 1-64 bytes");
    if (c->n_scopes > ORCH_LANE_SCOPES_MAX)
        return fo_err_set(err, FO_E_INVALID, "scopes: at most %d",
                          ORCH_LANE_SCOPES_MAX);
    for (size_t i = 0; i < c->n_scopes; i++)
        if (!name_ok(c->scopes[i], 64))
            return fo_err_set(err, FO_E_INVALID,
                              "scopes[%zu]: a name of 1-64 bytes", i);
    if (c->has_confidence && !isfinite(c->confidence))
        return fo_err_set(err, FO_E_INVALID, "confidence: a finite number");
    return FO_OK;
}

int orch_lane_judge(const struct orch_lane_claim *c, const char **kind,
                    cJSON **body, struct fo_err *err)
{
    int rc = claim_ok(c, err);
    if (rc)
        return rc;
    const char *sc[ORCH_LANE_SCOPES_MAX + 1], *ex[ORCH_LANE_SCOPES_MAX + 1];
    size_t n = 0, nx = 0;
    for (size_t i = 0; i < c->n_scopes; i++)
        sc[n++] = c->scopes[i];
    qsort(sc, n, sizeof(*sc), str_cmp);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (!w || strcmp(sc[w - 1], sc[i]))
            sc[w++] = sc[i];
    n = w;
    const struct orch_proof_lane *l = lane_find(c->lane);
    const char *violation = NULL;
    for (size_t i = 0; i < n; i++)
        if (!l || !granted(l, sc[i]))
            ex[nx++] = sc[i];
    if (!l)
        violation = "unknown_lane";
    else if (nx)
        violation = "over_routed";
    else if (c->domain && !domain_known(c->domain))
        violation = "unknown_domain";
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "task", c->task) &&
             cJSON_AddStringToObject(o, "lane", c->lane) &&
             cJSON_AddItemToObject(o, "domain",
                                   c->domain ? cJSON_CreateString(c->domain)
                                             : cJSON_CreateNull()) &&
             cJSON_AddItemToObject(o, "scopes", str_array(sc, n)) &&
             cJSON_AddItemToObject(o, "confidence",
                                   c->has_confidence
                                       ? cJSON_CreateNumber(c->confidence)
                                       : cJSON_CreateNull());
    if (ok && violation)
        ok = cJSON_AddStringToObject(o, "violation", violation) &&
             cJSON_AddItemToObject(o, "excess", str_array(ex, nx)) &&
             cJSON_AddItemToObject(o, "granted",
                                   l ? str_array(l->scopes, count_scopes(l))
                                     : str_array(ex, 0));
    if (!ok) {
        cJSON_Delete(o);
        return nomem(err);
    }
    *kind = violation ? "lane_rejection" : "lane_route";
    *body = o;
    return FO_OK;
}

/* Appends one entry of actor "router" through fn (NULL: straight to l). */
static int append(struct ledger *l, orch_append_fn fn, void *hook,
                  const char *kind, int64_t parent, const cJSON *body,
                  struct ledger_entry *out, struct fo_err *err)
{
    struct fo_buf b;
    fo_buf_init(&b, ledger_max_body(l));
    int rc = fo_json_canon(body, &b, err);
    if (!rc) {
        struct ledger_append req = {.actor = "router",
                                    .kind = kind,
                                    .parent = parent,
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

static void list_text(const cJSON *a, char *out, size_t cap)
{
    size_t n = 0;
    const cJSON *x;
    out[0] = '\0';
    cJSON_ArrayForEach (x, a) {
        int w =
            snprintf(out + n, cap - n, "%s%s", n ? ", " : "", x->valuestring);
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    if (!n)
        snprintf(out, cap, "nothing");
}

int orch_lane_witness(struct ledger *l, orch_append_fn fn, void *hook,
                      const struct orch_lane_claim *c, int64_t parent,
                      cJSON **out, struct fo_err *err)
{
    const char *kind = NULL;
    cJSON *body = NULL;
    struct ledger_entry e;
    int rc = orch_lane_judge(c, &kind, &body, err);
    if (!rc)
        rc = append(l, fn, hook, kind, parent, body, &e, err);
    if (rc) {
        cJSON_Delete(body);
        return rc;
    }
    if (!strcmp(kind, "lane_rejection")) {
        char ex[160], gr[160];
        list_text(cJSON_GetObjectItemCaseSensitive(body, "excess"), ex,
                  sizeof(ex));
        list_text(cJSON_GetObjectItemCaseSensitive(body, "granted"), gr,
                  sizeof(gr));
        const char *v =
            cJSON_GetObjectItemCaseSensitive(body, "violation")->valuestring;
        if (!strcmp(v, "unknown_domain"))
            fo_err_set(err, FO_E_INVALID,
                       "lane_rejection seq %lld: unknown_domain: %.64s is not "
                       "a domain lane",
                       (long long)e.seq, c->domain);
        else
            fo_err_set(err, FO_E_INVALID,
                       "lane_rejection seq %lld: %s: lane %.64s grants %s; "
                       "not granted: %s",
                       (long long)e.seq, v, c->lane, gr, ex);
        cJSON_Delete(body);
        return FO_E_INVALID;
    }
    if (!cJSON_AddTrueToObject(body, "accepted") ||
        !cJSON_AddStringToObject(body, "kind", kind) ||
        !fo_json_add_int(body, "seq", e.seq)) {
        cJSON_Delete(body);
        return nomem(err);
    }
    *out = body;
    return FO_OK;
}

/* ---- vocabulary gaps ---------------------------------------------------- */

/* The trailing run of undecided routes: its start in o, and its length. */
static size_t trailing(const struct orch_route_outcome *o, size_t n,
                       size_t *start)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len = o[i].decided ? 0 : len + 1;
    *start = n - len;
    return len;
}

int orch_vocab_gap_derive(const struct orch_route_outcome *o, size_t n,
                          const char *signal, int min, cJSON **gap,
                          struct fo_err *err)
{
    *gap = NULL;
    if (min < 1)
        return fo_err_set(err, FO_E_INVALID,
                          "min_escalations: at least 1, got %d", min);
    if (!name_ok(signal, 128))
        return fo_err_set(err, FO_E_INVALID,
                          "domain_signal: a name of 1-128 bytes");
    size_t start = 0, len = trailing(o, n, &start);
    if (len < (size_t)min)
        return FO_OK;
    double ceiling = o[start].confidence;
    for (size_t i = start; i < n; i++)
        if (o[i].confidence > ceiling)
            ceiling = o[i].confidence;
    cJSON *g = cJSON_CreateObject();
    if (!g || !cJSON_AddStringToObject(g, "domain_signal", signal) ||
        !fo_json_add_int(g, "consecutive_escalations", (long long)len) ||
        !cJSON_AddNumberToObject(g, "confidence_ceiling",
                                 orch_round6(ceiling)) ||
        !fo_json_add_int(g, "first_seq", o[start].seq) ||
        !fo_json_add_int(g, "last_seq", o[n - 1].seq)) {
        cJSON_Delete(g);
        return nomem(err);
    }
    *gap = g;
    return FO_OK;
}

struct outcomes {
    struct orch_route_outcome *v;
    size_t n, cap;
};

static int route_of(void *arg, const struct ledger_entry *e, const char *body,
                    size_t len)
{
    struct outcomes *r = arg;
    if (strcmp(e->kind, "route"))
        return 0;
    cJSON *b = NULL;
    if (body && fo_json_parse(body, len, &b, NULL) != FO_OK)
        b = NULL;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        struct orch_route_outcome *v = realloc(r->v, cap * sizeof(*v));
        if (!v) {
            cJSON_Delete(b);
            return FO_E_NOMEM;
        }
        r->v = v;
        r->cap = cap;
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(b, "decided");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "confidence");
    /* a redacted route counts as decided: nothing says it escalated */
    r->v[r->n++] = (struct orch_route_outcome){
        .seq = e->seq,
        .decided = !b || (d && !cJSON_IsNull(d)),
        .confidence = cJSON_IsNumber(c) ? c->valuedouble : 0,
    };
    cJSON_Delete(b);
    return 0;
}

int orch_vocab_gap_witness(struct ledger *l, orch_append_fn fn, void *hook,
                           int64_t since, const char *signal, int min,
                           cJSON **out, struct fo_err *err)
{
    struct outcomes r = {0};
    cJSON *gap = NULL;
    int rc =
        ledger_range_bodies(l, since < 0 ? 0 : since, -1, route_of, &r, err);
    if (rc == FO_E_NOMEM)
        rc = nomem(err);
    if (!rc)
        rc = orch_vocab_gap_derive(r.v, r.n, signal, min, &gap, err);
    struct ledger_entry e;
    if (!rc && gap)
        rc = append(l, fn, hook, "vocabulary_gap", r.v[r.n - 1].seq, gap, &e,
                    err);
    size_t start = 0, len = trailing(r.v, r.n, &start);
    cJSON *o = rc ? NULL : cJSON_CreateObject();
    if (!rc &&
        (!o || !cJSON_AddBoolToObject(o, "witnessed", gap != NULL) ||
         (gap && !fo_json_add_int(o, "seq", e.seq)) ||
         !fo_json_add_int(o, "routes_read", (long long)r.n) ||
         !fo_json_add_int(o, "trailing_undecided", (long long)len) ||
         !fo_json_add_int(o, "min_escalations", min) ||
         !cJSON_AddItemToObject(o, "gap", gap ? gap : cJSON_CreateNull())))
        rc = nomem(err);
    else if (!rc)
        gap = NULL; /* owned by o */
    cJSON_Delete(gap);
    free(r.v);
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}
