/* orch_grade: the outcome grade of a run and its gradable-trajectory row
 * (orch_grade.h). Reads the ledger only; deterministic. */
#include "daemon/orch_grade.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/proof.h"

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *const check_kinds[] = {"verdict", "verification",
                                          "intent_judgment"};
#define N_CHECK_KINDS (sizeof(check_kinds) / sizeof(*check_kinds))

static const char derivation[] =
    "PASS when every counted check passed and there are at least "
    "min_checks; UNVERIFIABLE when no check counts; FAIL otherwise. A check "
    "is a verdict, verification or intent_judgment whose actor produced no "
    "result or answer in the run, with a boolean ok";

static int is_check(const char *k)
{
    for (size_t i = 0; i < N_CHECK_KINDS; i++)
        if (!strcmp(k, check_kinds[i]))
            return 1;
    return 0;
}

static int producer_kind(const char *k)
{
    return !strcmp(k, "result") || !strcmp(k, "answer");
}

/* The kind an entry is graded as, and its graded body (*gbody): an
 * imported event is what its source called it (record.kind), with the
 * record's payload as its body (the reference's generic trace). */
static const char *graded_kind(const char *kind, const cJSON *body,
                               const cJSON **gbody)
{
    *gbody = body;
    if (strcmp(kind, "event") || !body)
        return kind;
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(body, "record");
    const char *k = jstr(rec, "kind");
    if (!k)
        return kind;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(rec, "payload");
    *gbody = cJSON_IsObject(p) ? p : rec;
    return k;
}

/* A check's ok: 1, 0, or -1 when it counts neither way (no boolean ok,
 * forum's verdict that nobody judged, or no body). A forum verdict says
 * pass and judged where the reference said ok. */
static int check_ok(const cJSON *b)
{
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(b, "ok");
    if (cJSON_IsBool(ok))
        return cJSON_IsTrue(ok);
    if (ok || !b)
        return -1;
    if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "judged")))
        return -1;
    const cJSON *pass = cJSON_GetObjectItemCaseSensitive(b, "pass");
    return cJSON_IsBool(pass) ? cJSON_IsTrue(pass) : -1;
}

/* ---- the entries of a run ---------------------------------------------- */

struct gent {
    struct ledger_entry e;
    cJSON *body;      /* NULL when redacted */
    char *canon;      /* the stored canonical body, NULL when redacted */
    size_t canon_len; /* its length */
    const char *kind; /* graded kind */
    const cJSON *gbody;
};

struct scope {
    struct gent *v;
    size_t n, cap;
    int64_t root;
};

static void scope_free(struct scope *s)
{
    for (size_t i = 0; i < s->n; i++) {
        cJSON_Delete(s->v[i].body);
        free(s->v[i].canon);
    }
    free(s->v);
    memset(s, 0, sizeof(*s));
}

static int add_entry(void *arg, const struct ledger_entry *e)
{
    struct scope *s = arg;
    if (s->n == ORCH_GRADE_MAX_ENTRIES)
        return FO_E_TOO_LARGE;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct gent *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return FO_E_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    memset(&s->v[s->n], 0, sizeof(s->v[s->n]));
    s->v[s->n++].e = *e;
    return 0;
}

static int last_request(void *arg, const struct ledger_entry *e)
{
    *(int64_t *)arg = e->seq;
    return 0;
}

static int resolve_root(struct ledger *l, int64_t *root, struct fo_err *err)
{
    if (*root < 0) {
        int rc = ledger_requests(l, 0, last_request, root, err);
        if (rc)
            return rc;
        if (*root < 0)
            return fo_err_set(err, FO_E_NOT_FOUND, "no run on record to grade");
    }
    struct ledger_entry e;
    int rc = ledger_get(l, *root, &e, NULL, err);
    if (rc)
        return rc;
    if (e.parent != LEDGER_NO_PARENT ||
        (strcmp(e.kind, "request") && strcmp(e.kind, "import")))
        return fo_err_set(err, FO_E_NOT_A_RUN,
                          "entry %lld is a %s, not a run's request or an "
                          "import",
                          (long long)*root, e.kind);
    return FO_OK;
}

static int scope_load(struct ledger *l, int64_t root, struct scope *s,
                      struct fo_err *err)
{
    memset(s, 0, sizeof(*s));
    int rc = resolve_root(l, &root, err);
    if (rc)
        return rc;
    s->root = root;
    rc = ledger_descendants(l, root, -1, add_entry, s, err);
    if (rc == FO_E_TOO_LARGE)
        return fo_err_set(err, rc, "run %lld has more than %d entries",
                          (long long)root, ORCH_GRADE_MAX_ENTRIES);
    if (rc == FO_E_NOMEM)
        return nomem(err);
    for (size_t i = 0; !rc && i < s->n; i++) {
        struct gent *g = &s->v[i];
        struct fo_err e2;
        int brc = ledger_body(l, g->e.seq, &g->canon, &g->canon_len, &e2);
        if (brc == FO_E_REDACTED) {
            g->canon = NULL;
        } else if (brc) {
            *err = e2;
            rc = brc;
        } else if ((rc =
                        fo_json_parse(g->canon, g->canon_len, &g->body, err))) {
            fo_err_prefix(err, "entry %lld", (long long)g->e.seq);
        }
        if (!rc)
            g->kind = graded_kind(g->e.kind, g->body, &g->gbody);
    }
    return rc;
}

/* ---- the grade --------------------------------------------------------- */

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The sorted, distinct actors that produced a result or an answer. */
static const char **producers_of(const struct scope *s, size_t *n)
{
    const char **p = malloc((s->n + 1) * sizeof(*p));
    *n = 0;
    if (!p)
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        if (producer_kind(s->v[i].kind))
            p[(*n)++] = s->v[i].e.actor;
    qsort(p, *n, sizeof(*p), str_cmp);
    size_t w = 0;
    for (size_t i = 0; i < *n; i++)
        if (!w || strcmp(p[w - 1], p[i]))
            p[w++] = p[i];
    *n = w;
    return p;
}

static int in_sorted(const char **v, size_t n, const char *s)
{
    return n && bsearch(&s, v, n, sizeof(*v), str_cmp) != NULL;
}

static const char *label_of(long long passed, long long refuted, int min_checks)
{
    long long count = passed + refuted;
    if (!count)
        return "UNVERIFIABLE";
    return !refuted && count >= min_checks ? "PASS" : "FAIL";
}

static int add_input(cJSON *inputs, const struct gent *g, int ok)
{
    char ph[65];
    fo_hex(g->e.payload, 32, ph);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(inputs, o))
        return cJSON_Delete(o), 0;
    return cJSON_AddStringToObject(o, "actor", g->e.actor) &&
           cJSON_AddBoolToObject(o, "ok", ok) &&
           cJSON_AddStringToObject(o, "kind", g->kind) &&
           fo_json_add_int(o, "seq", g->e.seq) &&
           cJSON_AddStringToObject(o, "payload_hash", ph);
}

static cJSON *grade_of(const struct scope *s, int min_checks)
{
    size_t np = 0;
    const char **prod = producers_of(s, &np);
    cJSON *o = cJSON_CreateObject();
    cJSON *ps = o ? cJSON_AddArrayToObject(o, "producers") : NULL;
    cJSON *gr = o ? cJSON_AddArrayToObject(o, "graders") : NULL;
    cJSON *self = o ? cJSON_AddArrayToObject(o, "self_graded") : NULL;
    cJSON *in = o ? cJSON_AddArrayToObject(o, "grade_inputs") : NULL;
    int ok = prod && ps && gr && self && in;
    for (size_t i = 0; ok && i < np; i++)
        ok = cJSON_AddItemToArray(ps, cJSON_CreateString(prod[i]));
    long long passed = 0, refuted = 0;
    for (size_t k = 0; ok && k < N_CHECK_KINDS; k++)
        for (size_t i = 0; ok && i < s->n; i++) {
            const struct gent *g = &s->v[i];
            if (strcmp(g->kind, check_kinds[k]))
                continue;
            if (in_sorted(prod, np, g->e.actor)) {
                ok = cJSON_AddItemToArray(self,
                                          cJSON_CreateNumber((double)g->e.seq));
                continue;
            }
            int v = check_ok(g->gbody);
            if (v < 0)
                continue;
            passed += v;
            refuted += !v;
            ok = add_input(in, g, v) &&
                 cJSON_AddItemToArray(gr, cJSON_CreateString(g->e.actor));
        }
    long long count = passed + refuted;
    ok = ok && fo_json_add_int(o, "run", s->root) &&
         cJSON_AddNumberToObject(
             o, "reward", count ? orch_round6((double)passed / count) : 0) &&
         cJSON_AddStringToObject(o, "label",
                                 label_of(passed, refuted, min_checks)) &&
         fo_json_add_int(o, "checks", count) &&
         fo_json_add_int(o, "refuted", refuted) &&
         fo_json_add_int(o, "min_checks", min_checks) &&
         cJSON_AddStringToObject(o, "derivation", derivation);
    free(prod);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int check_min(int min_checks, struct fo_err *err)
{
    if (min_checks < 0 || min_checks > ORCH_GRADE_MIN_CHECKS_MAX)
        return fo_err_set(err, FO_E_INVALID, "min_checks: 0 to %d",
                          ORCH_GRADE_MIN_CHECKS_MAX);
    return FO_OK;
}

int orch_grade(struct ledger *l, int64_t root, int min_checks, cJSON **out,
               struct fo_err *err)
{
    struct scope s;
    int rc = check_min(min_checks, err);
    if (!rc)
        rc = scope_load(l, root, &s, err);
    else
        memset(&s, 0, sizeof(s));
    if (!rc && !(*out = grade_of(&s, min_checks)))
        rc = nomem(err);
    scope_free(&s);
    return rc;
}

/* ---- the row ------------------------------------------------------------ */

/* 16 hex digits of the SHA-256 of text with its white space collapsed,
 * trimmed and ASCII lower-cased. */
static void task_id(const char *text, char out[17])
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int space = 0;
    for (const char *p = text; *p; p++) {
        if (isspace((unsigned char)*p)) {
            space = b.len > 0;
            continue;
        }
        if (space)
            fo_buf_putc(&b, ' ');
        space = 0;
        fo_buf_putc(&b, (char)tolower((unsigned char)*p));
    }
    uint8_t h[32];
    fo_sha256(b.data ? b.data : "", b.len, h);
    char hex[65];
    fo_hex(h, 32, hex);
    memcpy(out, hex, 16);
    out[16] = '\0';
    fo_buf_release(&b);
}

/* The request's text (forum's `request`, the reference's `text`), the
 * latest answer (forum's answer entry, or the reference's result with an
 * answer that is not a revision), the last plan's payload hash, and the
 * model calls (the answer's own count, else the results naming a model). */
struct facts {
    const char *prompt, *answer;
    char plan_hash[65];
    int has_plan;
    long long model_calls, payload_bytes;
};

static void facts_of(const struct scope *s, struct facts *f)
{
    memset(f, 0, sizeof(*f));
    long long from_answer = -1;
    for (size_t i = 0; i < s->n; i++) {
        const struct gent *g = &s->v[i];
        f->payload_bytes += (long long)g->canon_len;
        if (!strcmp(g->kind, "request") && !f->prompt)
            f->prompt = jstr(g->gbody, "request") ? jstr(g->gbody, "request")
                                                  : jstr(g->gbody, "text");
        else if (!strcmp(g->kind, "plan")) {
            fo_hex(g->e.payload, 32, f->plan_hash);
            f->has_plan = 1;
        } else if (producer_kind(g->kind) && jstr(g->gbody, "answer") &&
                   !cJSON_GetObjectItemCaseSensitive(g->gbody,
                                                     "revised_from")) {
            f->answer = jstr(g->gbody, "answer");
            long long v;
            if (fo_json_get_int(g->gbody, "model_calls", 0, INT64_MAX, &v) ==
                FO_OK)
                from_answer = v;
        }
        if (!strcmp(g->kind, "result") &&
            cJSON_GetObjectItemCaseSensitive(g->gbody, "model"))
            f->model_calls++;
    }
    if (from_answer >= 0)
        f->model_calls = from_answer;
    if (!f->prompt)
        f->prompt = "";
}

static int add_payload(cJSON *arr, const struct gent *g)
{
    char ph[65];
    fo_hex(g->e.payload, 32, ph);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o))
        return cJSON_Delete(o), 0;
    return fo_json_add_int(o, "seq", g->e.seq) &&
           cJSON_AddStringToObject(o, "payload_hash", ph) &&
           cJSON_AddItemToObject(o, "body",
                                 g->body ? cJSON_Duplicate(g->body, 1)
                                         : cJSON_CreateNull());
}

/* Where the proofs go: the latest signed checkpoint when it covers the
 * run (its note goes in the row), else the current tree. */
static int proof_size(struct ledger *l, const struct scope *s, int64_t *size,
                      uint8_t root[32], char **note, struct fo_err *err)
{
    struct ledger_checkpoint cp = {0};
    struct fo_err e2;
    int64_t last = s->n ? s->v[s->n - 1].e.seq : s->root;
    *note = NULL;
    if (ledger_checkpoint_latest(l, &cp, &e2) == FO_OK && cp.size > last) {
        *size = cp.size;
        memcpy(root, cp.root, 32);
        *note = cp.note;
        return FO_OK;
    }
    ledger_checkpoint_release(&cp);
    return ledger_tree_head(l, size, root, err);
}

static const char recheck[] =
    "For each entry: recompute its hash (SHA-256 of the RFC 8785 form of v, "
    "seq, ts, actor, kind, parent, payload, prev), its leaf SHA-256(0x00 || "
    "hash), and check its inclusion proof (RFC 9162) against oracle.root at "
    "oracle.size; compare oracle.root with the ledger's root at that size, "
    "or check oracle.checkpoint's signature with the ledger's verifier key. "
    "For each check payload: the SHA-256 of the body's RFC 8785 form must be "
    "the payload of the entry with that seq; read ok from that body and "
    "recompute the grade, skipping checks whose entry's actor produced a "
    "result or answer. Changing any entry or body breaks a hash.";

static int add_oracle(struct ledger *l, const struct scope *s, cJSON *row,
                      const cJSON *grade, struct fo_err *err)
{
    int64_t size = 0;
    uint8_t root[32];
    char *note = NULL, hex[65];
    int rc = proof_size(l, s, &size, root, &note, err);
    struct ledger_verify_result vr;
    if (!rc)
        rc = ledger_verify(l, 0, NULL, NULL, &vr, err);
    if (rc) {
        free(note);
        return rc;
    }
    fo_hex(root, 32, hex);
    cJSON *o = cJSON_AddObjectToObject(row, "oracle");
    cJSON *cps = o ? cJSON_CreateArray() : NULL;
    cJSON *pps = o ? cJSON_CreateArray() : NULL;
    cJSON *inc = o ? cJSON_CreateArray() : NULL;
    int ok =
        o && cps && pps && inc &&
        cJSON_AddStringToObject(o, "kind", "ledger-inclusion") &&
        fo_json_add_int(o, "size", size) &&
        cJSON_AddStringToObject(o, "root", hex) &&
        cJSON_AddItemToObject(o, "checkpoint",
                              note ? cJSON_CreateString(note)
                                   : cJSON_CreateNull()) &&
        cJSON_AddBoolToObject(o, "verified", vr.ok) &&
        cJSON_AddItemToObject(
            o, "grade_inputs",
            cJSON_Duplicate(
                cJSON_GetObjectItemCaseSensitive(grade, "grade_inputs"), 1));
    free(note);
    for (size_t i = 0; ok && i < s->n; i++) {
        const struct gent *g = &s->v[i];
        if (is_check(g->kind))
            ok = add_payload(cps, g);
        else if (strcmp(g->kind, g->e.kind) && producer_kind(g->kind))
            ok = add_payload(pps, g);
        struct ledger_inclusion p;
        if (ok && (rc = ledger_prove_inclusion(l, g->e.seq, size, &p, err)))
            break;
        ok = ok && cJSON_AddItemToArray(inc, ledger_inclusion_json(&p));
    }
    if (!rc && ok) {
        cJSON_AddItemToObject(o, "check_payloads", cps);
        cJSON_AddItemToObject(o, "producer_payloads", pps);
        cJSON_AddItemToObject(o, "inclusion", inc);
        return cJSON_AddStringToObject(o, "recheck", recheck) ? FO_OK
                                                              : nomem(err);
    }
    cJSON_Delete(cps);
    cJSON_Delete(pps);
    cJSON_Delete(inc);
    return rc ? rc : nomem(err);
}

static int add_trajectory(const struct scope *s, const struct facts *f,
                          cJSON *row)
{
    cJSON *t = cJSON_AddObjectToObject(row, "trajectory");
    cJSON *es = t ? cJSON_CreateArray() : NULL;
    int ok =
        t && es &&
        cJSON_AddItemToObject(t, "plan_hash",
                              f->has_plan ? cJSON_CreateString(f->plan_hash)
                                          : cJSON_CreateNull()) &&
        cJSON_AddItemToObject(t, "answer",
                              f->answer ? cJSON_CreateString(f->answer)
                                        : cJSON_CreateNull()) &&
        cJSON_AddItemToObject(t, "entries", es);
    if (!ok)
        cJSON_Delete(es);
    for (size_t i = 0; ok && i < s->n; i++)
        ok = cJSON_AddItemToArray(es, ledger_entry_json(&s->v[i].e));
    return ok;
}

static int add_grade(cJSON *row, const cJSON *g)
{
    static const char *const keep[] = {"reward",     "label",     "checks",
                                       "refuted",    "producers", "graders",
                                       "min_checks", "derivation"};
    cJSON *o = cJSON_AddObjectToObject(row, "grade");
    int ok = o != NULL;
    for (size_t i = 0; ok && i < sizeof(keep) / sizeof(*keep); i++)
        ok = cJSON_AddItemToObject(
            o, keep[i],
            cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(g, keep[i]), 1));
    return ok;
}

/* row_hash: the SHA-256 of the row's canonical JSON without row_hash. */
static int row_hash(const cJSON *row, char hex[65], struct fo_err *err)
{
    cJSON *c = cJSON_Duplicate(row, 1);
    if (!c)
        return nomem(err);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "row_hash");
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_json_canon(c, &b, err);
    cJSON_Delete(c);
    if (!rc) {
        uint8_t h[32];
        fo_sha256(b.data, b.len, h);
        fo_hex(h, 32, hex);
    }
    fo_buf_release(&b);
    return rc;
}

int orch_gradable(struct ledger *l, int64_t root, int min_checks, cJSON **out,
                  struct fo_err *err)
{
    struct scope s;
    int rc = check_min(min_checks, err);
    if (rc)
        return rc;
    if ((rc = scope_load(l, root, &s, err))) {
        scope_free(&s);
        return rc;
    }
    struct facts f;
    facts_of(&s, &f);
    char tid[17], rh[65];
    task_id(f.prompt, tid);
    cJSON *g = grade_of(&s, min_checks);
    cJSON *row = g ? cJSON_CreateObject() : NULL;
    cJSON *bud = NULL;
    int ok = row &&
             cJSON_AddStringToObject(row, "schema", ORCH_GRADABLE_SCHEMA) &&
             fo_json_add_int(row, "run", s.root) &&
             cJSON_AddStringToObject(row, "task_id", tid) &&
             cJSON_AddStringToObject(row, "prompt", f.prompt) &&
             add_trajectory(&s, &f, row) && add_grade(row, g) &&
             (bud = cJSON_AddObjectToObject(row, "budget")) &&
             fo_json_add_int(bud, "model_calls", f.model_calls) &&
             fo_json_add_int(bud, "payload_bytes", f.payload_bytes) &&
             fo_json_add_int(bud, "entries", (long long)s.n);
    rc = ok ? add_oracle(l, &s, row, g, err) : nomem(err);
    if (!rc && (rc = row_hash(row, rh, err)) == FO_OK &&
        !cJSON_AddStringToObject(row, "row_hash", rh))
        rc = nomem(err);
    cJSON_Delete(g);
    scope_free(&s);
    if (rc) {
        cJSON_Delete(row);
        return rc;
    }
    *out = row;
    return FO_OK;
}

/* ---- re-deriving a row -------------------------------------------------- */

struct rrow {
    struct ledger_entry *v;
    size_t n;
    const char **prod;
    size_t np;
};

static const struct ledger_entry *rrow_find(const struct rrow *r, int64_t seq)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->v[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n && r->v[lo].seq == seq ? &r->v[lo] : NULL;
}

/* Each entry's hash from its fields and its inclusion proof at size. */
static int check_entries(const cJSON *es, const cJSON *inc, int64_t size,
                         const uint8_t root[32], struct rrow *r,
                         struct fo_err *err)
{
    int n = cJSON_GetArraySize(es);
    if (!cJSON_IsArray(es) || !cJSON_IsArray(inc) ||
        cJSON_GetArraySize(inc) != n)
        return fo_err_set(err, FO_E_INVALID,
                          "trajectory.entries and oracle.inclusion: two "
                          "arrays of the same length");
    if (!(r->v = calloc((size_t)n + 1, sizeof(*r->v))))
        return nomem(err);
    for (int i = 0; i < n; i++) {
        struct ledger_entry *e = &r->v[i];
        struct ledger_inclusion p;
        int rc = ledger_entry_from_json(cJSON_GetArrayItem(es, i), e, err);
        if (!rc)
            rc =
                ledger_inclusion_from_json(cJSON_GetArrayItem(inc, i), &p, err);
        if (rc) {
            fo_err_prefix(err, "entries[%d]", i);
            return FO_E_INVALID;
        }
        if (i && e->seq <= r->v[i - 1].seq)
            return fo_err_set(err, FO_E_INVALID,
                              "entries[%d]: not in seq order", i);
        r->n++;
        uint8_t h[32], leaf_in[33] = {0}, leaf[32];
        ledger_entry_hash(e, h);
        if (memcmp(h, e->hash, 32))
            return fo_err_set(err, FO_E_VERIFY,
                              "entry hash: entry %lld does not hash to its "
                              "hash",
                              (long long)e->seq);
        memcpy(leaf_in + 1, h, 32);
        fo_sha256(leaf_in, sizeof(leaf_in), leaf);
        if (p.index != e->seq || p.size != size || memcmp(p.root, root, 32) ||
            memcmp(p.leaf_hash, leaf, 32))
            return fo_err_set(err, FO_E_VERIFY,
                              "proof: the proof of entry %lld is not of that "
                              "entry at oracle.size and oracle.root",
                              (long long)e->seq);
        if (merkle_verify_inclusion(leaf, (uint64_t)p.index, (uint64_t)size,
                                    (const uint8_t(*)[32])p.path, p.path_len,
                                    root, err)) {
            fo_err_prefix(err, "proof: entry %lld", (long long)e->seq);
            return FO_E_VERIFY;
        }
    }
    return FO_OK;
}

/* A payload item {seq, payload_hash, body} bound to its entry: the body's
 * canonical SHA-256 is the entry's payload. *e the entry; *body NULL
 * when the row shows the body as redacted. */
static int bind(const struct rrow *r, const cJSON *it,
                const struct ledger_entry **e, const cJSON **body,
                struct fo_err *err)
{
    long long seq;
    const char *ph = jstr(it, "payload_hash");
    uint8_t want[32];
    if (fo_json_get_int(it, "seq", 0, INT64_MAX, &seq) || !ph ||
        fo_unhex(ph, want, 32) || !cJSON_GetObjectItemCaseSensitive(it, "body"))
        return fo_err_set(err, FO_E_INVALID,
                          "a payload item is {seq, payload_hash, body}");
    if (!(*e = rrow_find(r, seq)) || memcmp((*e)->payload, want, 32))
        return fo_err_set(err, FO_E_VERIFY,
                          "body: the payload of seq %lld is not an entry's "
                          "payload in the trajectory",
                          seq);
    *body = cJSON_GetObjectItemCaseSensitive(it, "body");
    if (cJSON_IsNull(*body)) {
        *body = NULL;
        return FO_OK;
    }
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_json_canon(*body, &b, err);
    uint8_t h[32];
    if (!rc)
        fo_sha256(b.data, b.len, h);
    fo_buf_release(&b);
    if (rc)
        return rc;
    if (memcmp(h, want, 32))
        return fo_err_set(err, FO_E_VERIFY,
                          "body: the body of seq %lld does not hash to its "
                          "entry's payload",
                          seq);
    return FO_OK;
}

/* The producers: entries of kind result or answer, and imported events
 * whose bound body says so. */
static int row_producers(struct rrow *r, const cJSON *pps, struct fo_err *err)
{
    size_t cap = r->n + (size_t)cJSON_GetArraySize(pps) + 1;
    if (!(r->prod = malloc(cap * sizeof(*r->prod))))
        return nomem(err);
    for (size_t i = 0; i < r->n; i++)
        if (producer_kind(r->v[i].kind))
            r->prod[r->np++] = r->v[i].actor;
    const cJSON *it;
    cJSON_ArrayForEach (it, pps) {
        const struct ledger_entry *e;
        const cJSON *body, *gb;
        int rc = bind(r, it, &e, &body, err);
        if (rc)
            return rc;
        if (body && producer_kind(graded_kind(e->kind, body, &gb)))
            r->prod[r->np++] = e->actor;
    }
    qsort(r->prod, r->np, sizeof(*r->prod), str_cmp);
    return FO_OK;
}

/* The grade recomputed from the bound check bodies, against the row's. */
static int regrade(const struct rrow *r, const cJSON *cps, const cJSON *grade,
                   struct fo_err *err)
{
    long long passed = 0, refuted = 0, min = 0, listed = 0;
    const cJSON *it;
    cJSON_ArrayForEach (it, cps) {
        const struct ledger_entry *e;
        const cJSON *body, *gb = NULL;
        int rc = bind(r, it, &e, &body, err);
        if (rc)
            return rc;
        const char *k = body ? graded_kind(e->kind, body, &gb) : e->kind;
        if (!is_check(k))
            return fo_err_set(err, FO_E_VERIFY,
                              "body: seq %lld is a %s, not a check",
                              (long long)e->seq, k);
        if (in_sorted(r->prod, r->np, e->actor))
            continue;
        int v = check_ok(gb);
        passed += v == 1;
        refuted += v == 0;
    }
    for (size_t i = 0; i < r->n; i++)
        listed += is_check(r->v[i].kind);
    if (listed > cJSON_GetArraySize(cps))
        return fo_err_set(err, FO_E_VERIFY,
                          "body: a check entry of the trajectory has no body "
                          "in oracle.check_payloads");
    if (fo_json_get_int(grade, "min_checks", 0, ORCH_GRADE_MIN_CHECKS_MAX,
                        &min))
        return fo_err_set(err, FO_E_INVALID, "grade.min_checks");
    long long count = passed + refuted, checks = -1, ref = -1;
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(grade, "reward");
    double reward = count ? orch_round6((double)passed / count) : 0;
    fo_json_get_int(grade, "checks", 0, INT64_MAX, &checks);
    fo_json_get_int(grade, "refuted", 0, INT64_MAX, &ref);
    const char *label = jstr(grade, "label");
    if (checks != count || ref != refuted || !cJSON_IsNumber(rw) ||
        fabs(rw->valuedouble - reward) > 1e-9 || !label ||
        strcmp(label, label_of(passed, refuted, (int)min)))
        return fo_err_set(err, FO_E_VERIFY,
                          "grade: the bound checks give %s (%lld of %lld "
                          "passed), not what the row says",
                          label_of(passed, refuted, (int)min), passed, count);
    return FO_OK;
}

int orch_gradable_check(const cJSON *row, struct fo_err *err)
{
    const char *rh = jstr(row, "row_hash");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(row, "oracle");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(row, "trajectory");
    const char *root_hex = jstr(o, "root");
    long long size = 0;
    uint8_t root[32];
    char hex[65];
    if (!cJSON_IsObject(row) || !rh || !root_hex ||
        fo_unhex(root_hex, root, 32) ||
        fo_json_get_int(o, "size", 1, INT64_MAX, &size) ||
        strcmp(jstr(row, "schema") ? jstr(row, "schema") : "",
               ORCH_GRADABLE_SCHEMA))
        return fo_err_set(err, FO_E_INVALID,
                          "not a %s row (schema, row_hash, oracle.root, "
                          "oracle.size)",
                          ORCH_GRADABLE_SCHEMA);
    int rc = row_hash(row, hex, err);
    if (rc)
        return rc;
    if (strcmp(hex, rh))
        return fo_err_set(err, FO_E_VERIFY,
                          "row_hash: the row does not hash to its row_hash");
    struct rrow r = {0};
    rc = check_entries(cJSON_GetObjectItemCaseSensitive(t, "entries"),
                       cJSON_GetObjectItemCaseSensitive(o, "inclusion"), size,
                       root, &r, err);
    if (!rc)
        rc = row_producers(
            &r, cJSON_GetObjectItemCaseSensitive(o, "producer_payloads"), err);
    if (!rc)
        rc = regrade(&r, cJSON_GetObjectItemCaseSensitive(o, "check_payloads"),
                     cJSON_GetObjectItemCaseSensitive(row, "grade"), err);
    free(r.v);
    free(r.prod);
    return rc;
}
