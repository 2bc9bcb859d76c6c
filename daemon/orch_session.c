/* orch_session: sessions (multi-turn work), their facts, and the context
 * budget that decides what of them a turn's models see. A session is
 * nothing but ledger entries: `session_started` {session, forked_from?,
 * at?}, a `turn` {session, run, turn} under each run that belongs to it,
 * `fact` {session, key, value} and `fact_forgotten` {session, key,
 * fact_seq} under its session_started, so it survives restarts and is
 * verifiable and redactable like everything else. */
#include "daemon/orch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "daemon/orch_int.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_file.h"
#include "ledger/fo_json.h"

int orch_session_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > ORCH_SESSION_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

/* ---- the budget --------------------------------------------------------- */

void orch_ctx_limits_default(struct orch_ctx_limits *l)
{
    *l = (struct orch_ctx_limits){
        .total = ORCH_CTX_TOTAL_DEFAULT,
        .request = ORCH_CTX_REQUEST_DEFAULT,
        .history = ORCH_CTX_HISTORY_DEFAULT,
        .facts = ORCH_CTX_FACTS_DEFAULT,
        .tools = ORCH_CTX_TOOLS_DEFAULT,
    };
}

int orch_ctx_limits_parse(const cJSON *o, struct orch_ctx_limits *l,
                          struct fo_err *err)
{
    static const char *const keys[] = {
        "max_total_tokens",        "max_request_tokens",
        "max_history_tokens",      "max_facts_tokens",
        "max_tool_results_tokens", "max_task_tokens",
        "max_upstream_tokens",     "compaction"};
    int *fields[] = {&l->total, &l->request, &l->history, &l->facts,
                     &l->tools, &l->task,    &l->upstream};
    if (!o || cJSON_IsNull(o))
        return FO_OK;
    if (!cJSON_IsObject(o))
        return fo_err_set(err, FO_E_INVALID, "context: must be an object");
    int rc = fo_json_only_keys(o, keys, 8, err);
    if (rc) {
        fo_err_prefix(err, "context");
        return rc;
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "compaction");
    if (c && !(cJSON_IsString(c) && (!strcmp(c->valuestring, "drop") ||
                                     !strcmp(c->valuestring, "summary"))))
        return fo_err_set(err, FO_E_INVALID,
                          "context.compaction: \"drop\" or \"summary\"");
    if (c)
        l->summary = !strcmp(c->valuestring, "summary");
    for (size_t i = 0; i < 7; i++) {
        long long v = 0;
        rc = fo_json_get_int(o, keys[i], 0, ORCH_CTX_TOKENS_MAX, &v);
        if (rc == FO_E_INVALID)
            return fo_err_set(err, FO_E_INVALID, "context.%s: an integer 0..%d",
                              keys[i], ORCH_CTX_TOKENS_MAX);
        if (rc == FO_OK)
            *fields[i] = (int)v;
    }
    return FO_OK;
}

int orch_ctx_tokens(size_t bytes)
{
    return (int)((bytes + 3) / 4);
}

/* One slice admitted, trimmed or omitted against its source's remaining
 * limit and the total's: the smaller binds, and names the reason. */
static void admit(struct orch_ctx_slice *s, int *src_left, int *total_left,
                  const char *src_reason)
{
    int allowed = *src_left < *total_left ? *src_left : *total_left;
    const char *why =
        *src_left <= *total_left ? src_reason : "max_total_tokens";
    s->tokens = orch_ctx_tokens(s->len);
    if (s->tokens <= allowed) {
        s->action = "retained";
        s->reason = NULL;
        s->kept = s->tokens;
    } else if (allowed > 0) {
        s->action = "trimmed";
        s->reason = why;
        s->len = orch_utf8_prefix(s->text, s->len, (size_t)allowed * 4);
        s->kept = orch_ctx_tokens(s->len);
    } else {
        s->action = "omitted";
        s->reason = why;
        s->len = 0;
        s->kept = 0;
    }
    *src_left -= s->kept;
    *total_left -= s->kept;
}

void orch_ctx_admit(struct orch_ctx_slice *s, size_t n,
                    const struct orch_ctx_limits *lim)
{
    int total = lim->total;
    int left[4] = {lim->request, lim->facts, lim->history, lim->tools};
    static const char *const reasons[4] = {
        "max_request_tokens", "max_facts_tokens", "max_history_tokens",
        "max_tool_results_tokens"};
    for (size_t i = 0; i < n; i++) {
        int k = !strcmp(s[i].source, "request")   ? 0
                : !strcmp(s[i].source, "facts")   ? 1
                : !strcmp(s[i].source, "history") ? 2
                : !strcmp(s[i].source, "summary") ? 2
                                                  : 3;
        admit(&s[i], &left[k], &total, reasons[k]);
    }
}

/* ---- a session read back from the ledger -------------------------------- */

struct turn {
    int64_t run, seq;
};

struct fact {
    char *key, *value;
    int64_t seq;
};

struct orch_session {
    char name[ORCH_SESSION_NAME_MAX + 1];
    int64_t start;   /* the first session_started; -1: none */
    int64_t *starts; /* every session_started of the name */
    size_t n_starts;
    char parent[ORCH_SESSION_NAME_MAX + 1]; /* forked from, or "" */
    int64_t at;         /* the parent's last run taken, when forked */
    struct turn *turns; /* in seq order */
    size_t n_turns;
    struct fact *facts; /* the current set, by key */
    size_t n_facts;
    /* the latest compaction: its summary and the turns it replaces */
    char *summary;
    int64_t summary_seq;
    int64_t *replaced; /* turn seqs */
    size_t n_replaced;
};

void orch_session_free(struct orch_session *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_facts; i++) {
        free(s->facts[i].key);
        free(s->facts[i].value);
    }
    free(s->facts);
    free(s->turns);
    free(s->starts);
    free(s->summary);
    free(s->replaced);
    free(s);
}

static cJSON *body_json(struct ledger *l, int64_t seq)
{
    char *b = NULL;
    size_t n = 0;
    struct fo_err err;
    cJSON *j = NULL;
    if (ledger_body(l, seq, &b, &n, &err) == FO_OK)
        fo_json_parse(b, n, &j, &err);
    free(b);
    return j;
}

static const char *str_in(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

struct scan_ctx {
    struct ledger *l;
    struct orch_session *s;
    int64_t before;
    int rc;
};

static int on_start(void *ctx, const struct ledger_entry *e)
{
    struct scan_ctx *c = ctx;
    cJSON *b = body_json(c->l, e->seq);
    const char *name = str_in(b, "session");
    if (name && !strcmp(name, c->s->name)) {
        int64_t *a =
            realloc(c->s->starts, (c->s->n_starts + 1) * sizeof(*c->s->starts));
        if (!a) {
            cJSON_Delete(b);
            return FO_E_NOMEM;
        }
        c->s->starts = a;
        a[c->s->n_starts++] = e->seq;
        if (c->s->start < 0) {
            c->s->start = e->seq;
            const char *p = str_in(b, "forked_from");
            long long at = -1;
            if (p && orch_session_name_ok(p) &&
                fo_json_get_int(b, "at", 0, INT64_MAX / 2, &at) == FO_OK) {
                snprintf(c->s->parent, sizeof(c->s->parent), "%s", p);
                c->s->at = at;
            }
        }
    }
    cJSON_Delete(b);
    return 0;
}

static int on_turn(void *ctx, const struct ledger_entry *e)
{
    struct scan_ctx *c = ctx;
    cJSON *b = body_json(c->l, e->seq);
    const char *name = str_in(b, "session");
    long long run = -1;
    if (name && !strcmp(name, c->s->name) &&
        fo_json_get_int(b, "run", 0, INT64_MAX / 2, &run) == FO_OK &&
        run < c->before) {
        struct turn *t =
            realloc(c->s->turns, (c->s->n_turns + 1) * sizeof(*c->s->turns));
        if (!t) {
            cJSON_Delete(b);
            return FO_E_NOMEM;
        }
        c->s->turns = t;
        t[c->s->n_turns++] = (struct turn){.run = run, .seq = e->seq};
    }
    cJSON_Delete(b);
    return 0;
}

static long fact_find(const struct orch_session *s, const char *key)
{
    for (size_t i = 0; i < s->n_facts; i++)
        if (!strcmp(s->facts[i].key, key))
            return (long)i;
    return -1;
}

/* A compaction covers the ones before it: the latest one stands. One
 * made by the turn being read (run: before, after its request) counts. */
static int on_compaction(struct scan_ctx *c, const struct ledger_entry *e)
{
    struct orch_session *s = c->s;
    cJSON *b = body_json(c->l, e->seq); /* NULL when redacted: ignored */
    long long run = -1;
    fo_json_get_int(b, "run", 0, INT64_MAX / 2, &run);
    if (e->seq >= c->before && run != c->before) {
        cJSON_Delete(b);
        return 0;
    }
    const char *sum = str_in(b, "summary");
    const cJSON *rep = cJSON_GetObjectItemCaseSensitive(b, "replaces");
    int n = cJSON_IsArray(rep) ? cJSON_GetArraySize(rep) : 0;
    if (!sum || n <= 0) {
        cJSON_Delete(b);
        return 0;
    }
    char *text = orch_strdup(sum);
    int64_t *seqs = calloc((size_t)n, sizeof(*seqs));
    if (!text || !seqs) {
        free(text);
        free(seqs);
        cJSON_Delete(b);
        return FO_E_NOMEM;
    }
    size_t k = 0;
    const cJSON *x;
    cJSON_ArrayForEach (x, rep)
        if (cJSON_IsNumber(x))
            seqs[k++] = (int64_t)x->valuedouble;
    free(s->summary);
    free(s->replaced);
    s->summary = text;
    s->summary_seq = e->seq;
    s->replaced = seqs;
    s->n_replaced = k;
    cJSON_Delete(b);
    return 0;
}

static int on_fact(void *ctx, const struct ledger_entry *e)
{
    struct scan_ctx *c = ctx;
    struct orch_session *s = c->s;
    if (!strcmp(e->kind, "compaction"))
        return on_compaction(c, e);
    if (e->seq >= c->before)
        return 0;
    if (strcmp(e->kind, "fact") != 0 && strcmp(e->kind, "fact_forgotten") != 0)
        return 0;
    cJSON *b = body_json(c->l, e->seq); /* a forgotten fact: redacted */
    const char *key = str_in(b, "key"), *value = str_in(b, "value");
    long i = key ? fact_find(s, key) : -1;
    if (key && !strcmp(e->kind, "fact_forgotten") && i >= 0) {
        free(s->facts[i].key);
        free(s->facts[i].value);
        s->facts[i] = s->facts[--s->n_facts];
    } else if (key && value && !strcmp(e->kind, "fact")) {
        char *k = orch_strdup(key), *v = orch_strdup(value);
        struct fact *f =
            i >= 0 ? s->facts
                   : realloc(s->facts, (s->n_facts + 1) * sizeof(*s->facts));
        if (!k || !v || !f) {
            free(k);
            free(v);
            cJSON_Delete(b);
            return FO_E_NOMEM;
        }
        s->facts = f;
        if (i < 0)
            i = (long)s->n_facts++;
        else {
            free(f[i].key);
            free(f[i].value);
        }
        f[i] = (struct fact){.key = k, .value = v, .seq = e->seq};
    }
    cJSON_Delete(b);
    return 0;
}

static int read_one(struct ledger *l, const char *name, int64_t before,
                    int depth, struct orch_session **out, struct fo_err *err)
{
    *out = NULL;
    struct orch_session *s = calloc(1, sizeof(*s));
    if (!s)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->start = -1;
    s->at = -1;
    struct scan_ctx c = {.l = l, .s = s, .before = before};
    int rc = ledger_marked(l, LEDGER_SESSIONS, 0, on_start, &c, err);
    if (!rc && s->start < 0)
        rc = fo_err_set(err, FO_E_NOT_FOUND, "session %s: no such session",
                        name);
    if (!rc && s->parent[0] && depth < 8) {
        /* a fork: the parent's turns up to the fork, its facts as they
         * stood when the fork was made */
        struct orch_session *p = NULL;
        rc = read_one(l, s->parent, s->at + 1, depth + 1, &p, err);
        if (!rc) {
            s->turns = p->turns;
            s->n_turns = p->n_turns;
            p->turns = NULL;
            s->facts = p->facts;
            s->n_facts = p->n_facts;
            p->facts = NULL;
            p->n_facts = 0;
            s->summary = p->summary;
            s->summary_seq = p->summary_seq;
            s->replaced = p->replaced;
            s->n_replaced = p->n_replaced;
            p->summary = NULL;
            p->replaced = NULL;
            p->n_replaced = 0;
        }
        orch_session_free(p);
    }
    if (!rc)
        rc = ledger_marked(l, LEDGER_TURNS, s->start, on_turn, &c, err);
    for (size_t i = 0; !rc && i < s->n_starts; i++)
        rc = ledger_descendants(l, s->starts[i], -1, on_fact, &c, err);
    if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (rc) {
        orch_session_free(s);
        return rc;
    }
    *out = s;
    return FO_OK;
}

int orch_session_read(struct ledger *l, const char *name, int64_t before,
                      struct orch_session **out, struct fo_err *err)
{
#ifdef FORUM_TEST_SEAMS
    fo_test_hold(getenv("FORUM_TEST_SESSION_READ_HOLD"));
#endif
    if (!orch_session_name_ok(name))
        return fo_err_set(err, FO_E_INVALID, "session: 1..%d of [A-Za-z0-9._-]",
                          ORCH_SESSION_NAME_MAX);
    return read_one(l, name, before < 0 ? INT64_MAX : before, 0, out, err);
}

int64_t orch_session_start(const struct orch_session *s)
{
    return s->start;
}

size_t orch_session_turns(const struct orch_session *s)
{
    return s->n_turns;
}

/* ---- the context of a turn ---------------------------------------------- */

static char *run_field(struct ledger *l, int64_t run, const char *k,
                       char **state)
{
    cJSON *g = NULL;
    struct fo_err err;
    char *v = NULL;
    if (orch_run_get(l, run, &g, &err) == FO_OK) {
        const char *s = str_in(g, k);
        v = s ? orch_strdup(s) : NULL;
        if (state && str_in(g, "state"))
            *state = orch_strdup(str_in(g, "state"));
    }
    cJSON_Delete(g);
    return v;
}

struct tool_results_ctx {
    struct ledger *l;
    struct fo_buf *b;
    int n;
};

static int on_tool_result(void *ctx, const struct ledger_entry *e)
{
    struct tool_results_ctx *c = ctx;
    if (strcmp(e->kind, "tool_result"))
        return 0;
    cJSON *b = body_json(c->l, e->seq);
    const char *tool = str_in(b, "tool"), *out = str_in(b, "output");
    const char *why = str_in(b, "error");
    if (tool) {
        const char *text = out && out[0] ? out : why ? why : "";
        size_t n =
            orch_utf8_prefix(text, strlen(text), ORCH_CTX_TOOL_OUTPUT_MAX);
        fo_buf_printf(c->b, "- %s%s: %.*s%s\n", tool,
                      cJSON_IsTrue(cJSON_GetObjectItem(b, "ok")) ? ""
                                                                 : " (failed)",
                      (int)n, text, n < strlen(text) ? " [cut]" : "");
        c->n++;
    }
    cJSON_Delete(b);
    return 0;
}

/* "Tool results of turn N:" and one line each, or NULL when it had none. */
static char *tool_results(struct ledger *l, int64_t run, size_t turn)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    fo_buf_printf(&b, "Tool results of turn %zu:\n", turn);
    struct tool_results_ctx c = {l, &b, 0};
    struct fo_err err;
    ledger_descendants(l, run, ORCH_RUN_SCAN_MAX, on_tool_result, &c, &err);
    char *s = c.n ? fo_buf_detach(&b, NULL) : NULL;
    fo_buf_release(&b);
    return s;
}

static int add_seq(cJSON *arr, int64_t v)
{
    cJSON *n = cJSON_CreateNumber((double)v);
    if (!n || !cJSON_AddItemToArray(arr, n)) {
        cJSON_Delete(n);
        return 0;
    }
    return 1;
}

static int replaced(const struct orch_session *s, int64_t turn_seq)
{
    for (size_t i = 0; s && i < s->n_replaced; i++)
        if (s->replaced[i] == turn_seq)
            return 1;
    return 0;
}

/* The slices of a turn's context, admitted against lim. */
struct ctx_parts {
    struct orch_session *s;
    struct orch_ctx_slice *sl;
    char **own;   /* the texts made for slices */
    size_t *turn; /* the index in s->turns of a history slice */
    size_t n, k;  /* slots, slices */
    size_t first_tools;
};

static void parts_release(struct ctx_parts *p)
{
    for (size_t i = 0; p->own && i < p->n; i++)
        free(p->own[i]);
    free(p->own);
    free(p->sl);
    free(p->turn);
    orch_session_free(p->s);
}

static int ctx_parts(struct ledger *l, const char *session, const char *request,
                     int64_t before, const struct orch_ctx_limits *lim,
                     struct ctx_parts *p, struct fo_err *err)
{
    *p = (struct ctx_parts){0};
    int rc = FO_OK;
    if (session) {
        rc = orch_session_read(l, session, before, &p->s, err);
        if (rc == FO_E_NOT_FOUND) /* its first turn: nothing before it */
            rc = FO_OK;
        if (rc)
            return rc;
    }
    struct orch_session *s = p->s;
    size_t nt = s ? s->n_turns : 0, nf = s ? s->n_facts : 0;
    p->n = 2 + nf + 2 * nt;
    p->sl = calloc(p->n, sizeof(*p->sl));
    p->own = calloc(p->n, sizeof(*p->own));
    p->turn = calloc(p->n, sizeof(*p->turn));
    if (!p->sl || !p->own || !p->turn) {
        parts_release(p);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    struct orch_ctx_slice *sl = p->sl;
    char **own = p->own;
    size_t k = 0;
    sl[k++] = (struct orch_ctx_slice){.source = "request",
                                      .ref = -1,
                                      .text = request,
                                      .len = strlen(request)};
    for (size_t i = 0; i < nf; i++) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        fo_buf_printf(&b, "- %s: %s\n", s->facts[i].key, s->facts[i].value);
        own[k] = fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
        sl[k] = (struct orch_ctx_slice){.source = "facts",
                                        .ref = s->facts[i].seq,
                                        .key = s->facts[i].key,
                                        .text = own[k] ? own[k] : "",
                                        .len = own[k] ? strlen(own[k]) : 0};
        k++;
    }
    /* the summary of the turns a compaction replaced, before the turns
     * themselves: it stands for the oldest of them */
    if (s && s->summary) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        fo_buf_printf(&b, "%s\n", s->summary);
        own[k] = fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
        sl[k] = (struct orch_ctx_slice){.source = "summary",
                                        .ref = s->summary_seq,
                                        .text = own[k] ? own[k] : "",
                                        .len = own[k] ? strlen(own[k]) : 0};
        k++;
    }
    /* history newest first: the oldest turns go first when it is full */
    for (size_t j = nt; j-- > 0;) {
        if (replaced(s, s->turns[j].seq))
            continue;
        char *req = run_field(l, s->turns[j].run, "request", NULL);
        char *ans = run_field(l, s->turns[j].run, "answer", NULL);
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        fo_buf_printf(&b, "Turn %zu (run %lld)\nrequest: %s\nanswer: %s\n",
                      j + 1, (long long)s->turns[j].run,
                      req ? req : "(redacted)", ans ? ans : "(none)");
        free(req);
        free(ans);
        own[k] = fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
        sl[k] = (struct orch_ctx_slice){.source = "history",
                                        .ref = s->turns[j].run,
                                        .text = own[k] ? own[k] : "",
                                        .len = own[k] ? strlen(own[k]) : 0};
        p->turn[k] = j;
        k++;
    }
    /* then each turn's tool results, newest first: they go before the
     * turns themselves when the total is short */
    p->first_tools = k;
    for (size_t j = nt; j-- > 0;) {
        if (replaced(s, s->turns[j].seq))
            continue;
        char *tr = tool_results(l, s->turns[j].run, j + 1);
        if (!tr)
            continue;
        own[k] = tr;
        sl[k] = (struct orch_ctx_slice){.source = "tool_results",
                                        .ref = s->turns[j].run,
                                        .text = tr,
                                        .len = strlen(tr)};
        k++;
    }
    p->k = k;
    orch_ctx_admit(sl, k, lim);
    return FO_OK;
}

int orch_session_context(struct ledger *l, const char *session,
                         const char *request, int64_t before,
                         const struct orch_ctx_limits *lim, char **text,
                         cJSON **slices, struct fo_err *err)
{
    *text = NULL;
    *slices = NULL;
    struct ctx_parts p;
    int rc = ctx_parts(l, session, request, before, lim, &p, err);
    if (rc)
        return rc;
    struct orch_ctx_slice *sl = p.sl;
    size_t k = p.k;
    /* the text models see: facts, the summary, then the turns oldest
     * first, each with its tool results */
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    int any_f = 0, any_h = 0, any_s = 0;
    for (size_t i = 1; i < k; i++) {
        if (!sl[i].len || strcmp(sl[i].source, "facts") != 0)
            continue;
        if (!any_f++)
            fo_buf_puts(&t, "Facts of this session:\n");
        fo_buf_append(&t, sl[i].text, sl[i].len);
    }
    for (size_t i = 1; i < k; i++) {
        if (!sl[i].len || strcmp(sl[i].source, "summary") != 0)
            continue;
        any_s++;
        fo_buf_printf(&t,
                      "Summary of the earlier turns of this session (%zu "
                      "turns):\n",
                      p.s->n_replaced);
        fo_buf_append(&t, sl[i].text, sl[i].len);
        if (sl[i].action[0] == 't')
            fo_buf_puts(&t, " [trimmed]\n");
    }
    for (size_t i = k; i-- > 1;) {
        if (!sl[i].len || strcmp(sl[i].source, "history") != 0)
            continue;
        if (!any_h++)
            fo_buf_puts(&t, "Earlier turns of this session (oldest "
                            "first):\n");
        fo_buf_append(&t, sl[i].text, sl[i].len);
        if (sl[i].action[0] == 't')
            fo_buf_puts(&t, " [trimmed]\n");
        for (size_t q = p.first_tools; q < k; q++)
            if (sl[q].ref == sl[i].ref && sl[q].len) {
                fo_buf_append(&t, sl[q].text, sl[q].len);
                if (sl[q].action[0] == 't')
                    fo_buf_puts(&t, " [trimmed]\n");
            }
    }
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr && i < k; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o))
            break;
        cJSON_AddStringToObject(o, "source", sl[i].source);
        if (sl[i].ref >= 0)
            fo_json_add_int(o, "ref", sl[i].ref);
        if (sl[i].key)
            cJSON_AddStringToObject(o, "key", sl[i].key);
        if (!strcmp(sl[i].source, "summary"))
            fo_json_add_int(o, "turns", (long long)p.s->n_replaced);
        fo_json_add_int(o, "tokens", sl[i].tokens);
        fo_json_add_int(o, "kept_tokens", sl[i].kept);
        cJSON_AddStringToObject(o, "action", sl[i].action);
        if (sl[i].reason)
            cJSON_AddStringToObject(o, "reason", sl[i].reason);
    }
    size_t tl = 0;
    *text = any_f || any_h || any_s ? fo_buf_detach(&t, &tl) : NULL;
    fo_buf_release(&t);
    *slices = arr;
    parts_release(&p);
    if (!arr)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    return FO_OK;
}

/* What a summary is asked of at most (bytes): the oldest text goes. */
#define COMPACTION_INPUT_MAX (256 * 1024)

int orch_session_compaction(struct ledger *l, const char *session,
                            const char *request, int64_t before,
                            const struct orch_ctx_limits *lim, char **text,
                            cJSON **replaces, cJSON **runs, struct fo_err *err)
{
    *text = NULL;
    *replaces = *runs = NULL;
    struct ctx_parts p;
    int rc = ctx_parts(l, session, request, before, lim, &p, err);
    if (rc)
        return rc;
    struct orch_session *s = p.s;
    struct orch_ctx_slice *sl = p.sl;
    int any = 0;
    for (size_t i = 1; i < p.first_tools; i++)
        any |= !strcmp(sl[i].source, "history") && sl[i].action[0] != 'r';
    if (!any) {
        parts_release(&p);
        return FO_OK;
    }
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    cJSON *rep = cJSON_CreateArray(), *rr = cJSON_CreateArray();
    int ok = rep && rr;
    for (size_t i = 0; ok && i < s->n_replaced; i++)
        ok = add_seq(rep, s->replaced[i]);
    if (ok && s->summary)
        ok = !fo_buf_printf(&t, "Summary so far:\n%s\n\n", s->summary);
    /* the turns it drops (omitted or trimmed), oldest first, whole */
    for (size_t i = p.first_tools; ok && i-- > 1;) {
        if (strcmp(sl[i].source, "history") != 0 || sl[i].action[0] == 'r')
            continue;
        size_t j = p.turn[i];
        ok = add_seq(rep, s->turns[j].seq) && add_seq(rr, s->turns[j].run) &&
             !fo_buf_puts(&t, p.own[i] ? p.own[i] : "");
        char *tr = ok ? tool_results(l, s->turns[j].run, j + 1) : NULL;
        if (tr)
            ok = !fo_buf_puts(&t, tr);
        free(tr);
    }
    size_t len = 0;
    char *all = ok ? fo_buf_detach(&t, &len) : NULL;
    fo_buf_release(&t);
    parts_release(&p);
    if (!all) {
        cJSON_Delete(rep);
        cJSON_Delete(rr);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (len > COMPACTION_INPUT_MAX) { /* the newest part is kept */
        size_t cut = len - COMPACTION_INPUT_MAX;
        while (cut < len && (all[cut] & 0xC0) == 0x80)
            cut++;
        memmove(all, all + cut, len - cut + 1);
    }
    *text = all;
    *replaces = rep;
    *runs = rr;
    return FO_OK;
}

/* ---- list, show, fork, remember, forget --------------------------------- */

struct list_ctx {
    struct ledger *l;
    cJSON *arr;
};

static int on_list(void *ctx, const struct ledger_entry *e)
{
    struct list_ctx *c = ctx;
    cJSON *b = body_json(c->l, e->seq);
    const char *name = str_in(b, "session");
    int dup = 0;
    const cJSON *x;
    cJSON_ArrayForEach (x, c->arr)
        if (name && str_in(x, "session") && !strcmp(str_in(x, "session"), name))
            dup = 1;
    if (name && !dup) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(c->arr, o)) {
            cJSON_Delete(o);
            cJSON_Delete(b);
            return FO_E_NOMEM;
        }
        cJSON_AddStringToObject(o, "session", name);
        fo_json_add_int(o, "started_seq", e->seq);
        if (str_in(b, "forked_from"))
            cJSON_AddStringToObject(o, "forked_from", str_in(b, "forked_from"));
    }
    cJSON_Delete(b);
    return 0;
}

int orch_session_list(struct ledger *l, cJSON **out, struct fo_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "sessions") : NULL;
    if (!arr) {
        cJSON_Delete(o);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    struct list_ctx c = {.l = l, .arr = arr};
    int rc = ledger_marked(l, LEDGER_SESSIONS, 0, on_list, &c, err);
    cJSON *x;
    cJSON_ArrayForEach (x, arr) {
        struct orch_session *s = NULL;
        if (!rc &&
            !(rc = orch_session_read(l, str_in(x, "session"), -1, &s, err)))
            fo_json_add_int(x, "turns", (long long)s->n_turns);
        orch_session_free(s);
    }
    if (rc) {
        cJSON_Delete(o);
        return rc == FO_E_NOMEM ? fo_err_set(err, rc, NULL) : rc;
    }
    *out = o;
    return FO_OK;
}

int orch_session_show(struct ledger *l, const char *name, cJSON **out,
                      struct fo_err *err)
{
    struct orch_session *s = NULL;
    int rc = orch_session_read(l, name, -1, &s, err);
    if (rc)
        return rc;
    cJSON *o = cJSON_CreateObject();
    cJSON *turns = o ? cJSON_AddArrayToObject(o, "turns") : NULL;
    cJSON *facts = o ? cJSON_AddObjectToObject(o, "facts") : NULL;
    if (!turns || !facts) {
        cJSON_Delete(o);
        orch_session_free(s);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    cJSON_AddStringToObject(o, "session", s->name);
    fo_json_add_int(o, "started_seq", s->start);
    if (s->parent[0]) {
        cJSON_AddStringToObject(o, "forked_from", s->parent);
        fo_json_add_int(o, "at", s->at);
    }
    for (size_t i = 0; i < s->n_turns; i++) {
        cJSON *t = cJSON_CreateObject();
        if (!t || !cJSON_AddItemToArray(turns, t))
            break;
        char *state = NULL;
        char *req = run_field(l, s->turns[i].run, "request", &state);
        char *ans = run_field(l, s->turns[i].run, "answer", NULL);
        fo_json_add_int(t, "turn", (long long)i + 1);
        fo_json_add_int(t, "run", s->turns[i].run);
        if (req)
            cJSON_AddStringToObject(t, "request", req);
        else
            cJSON_AddNullToObject(t, "request");
        if (ans)
            cJSON_AddStringToObject(t, "answer", ans);
        else
            cJSON_AddNullToObject(t, "answer");
        cJSON_AddStringToObject(t, "state", state ? state : "unknown");
        free(req);
        free(ans);
        free(state);
    }
    for (size_t i = 0; i < s->n_facts; i++)
        cJSON_AddStringToObject(facts, s->facts[i].key, s->facts[i].value);
    orch_session_free(s);
    *out = o;
    return FO_OK;
}

static int witness_obj(const struct orch_witness *w, const char *actor,
                       const char *kind, int64_t parent, cJSON *o, int64_t *seq,
                       struct fo_err *err)
{
    int rc = o ? orch_witness_json(w, actor, kind, parent, o, seq, err)
               : fo_err_set(err, FO_E_NOMEM, NULL);
    cJSON_Delete(o);
    return rc;
}

int orch_session_fork(const struct orch_witness *w, const char *name,
                      int64_t at, const char *into, cJSON **out,
                      struct fo_err *err)
{
    struct orch_session *s = NULL, *t = NULL;
    if (!orch_session_name_ok(into))
        return fo_err_set(err, FO_E_INVALID, "into: 1..%d of [A-Za-z0-9._-]",
                          ORCH_SESSION_NAME_MAX);
    int rc = orch_session_read(w->ledger, name, -1, &s, err);
    if (rc)
        return rc;
    int found = 0;
    for (size_t i = 0; i < s->n_turns; i++)
        found |= s->turns[i].run == at;
    orch_session_free(s);
    if (!found)
        return fo_err_set(err, FO_E_INVALID,
                          "at: %lld is not a turn (run) of session %s",
                          (long long)at, name);
    if (orch_session_read(w->ledger, into, -1, &t, err) == FO_OK) {
        orch_session_free(t);
        return fo_err_set(err, FO_E_EXISTS, "session %s exists already", into);
    }
    cJSON *o = cJSON_CreateObject();
    int64_t seq = -1;
    if (o) {
        cJSON_AddStringToObject(o, "session", into);
        cJSON_AddStringToObject(o, "forked_from", name);
        fo_json_add_int(o, "at", at);
    }
    rc = witness_obj(w, "session", "session_started", LEDGER_NO_PARENT, o, &seq,
                     err);
    if (rc)
        return rc;
    return orch_session_show(w->ledger, into, out, err);
}

int orch_fact_check(const char *key, const char *value, struct fo_err *err)
{
    size_t kl = key ? strlen(key) : 0, vl = value ? strlen(value) : 0;
    if (kl < 1 || kl > ORCH_FACT_KEY_MAX || !fo_utf8_valid(key, kl))
        return fo_err_set(err, FO_E_INVALID, "key: 1..%d bytes of text",
                          ORCH_FACT_KEY_MAX);
    if (value &&
        (vl < 1 || vl > ORCH_FACT_VALUE_MAX || !fo_utf8_valid(value, vl)))
        return fo_err_set(err, FO_E_INVALID, "value: 1..%d bytes of text",
                          ORCH_FACT_VALUE_MAX);
    return FO_OK;
}

int orch_session_fact(struct ledger *l, const char *name, const char *key,
                      int64_t *fact_seq, int64_t *start, struct fo_err *err)
{
    struct orch_session *s = NULL;
    int rc = orch_session_read(l, name, -1, &s, err);
    if (rc)
        return rc;
    long i = key ? fact_find(s, key) : -1;
    *start = s->start;
    *fact_seq = i >= 0 ? s->facts[i].seq : -1;
    orch_session_free(s);
    if (i < 0)
        return fo_err_set(err, FO_E_NOT_FOUND, "session %s has no fact %.128s",
                          name, key ? key : "");
    return FO_OK;
}

struct by_call_ctx {
    struct ledger *l;
    const char *kind;
    int64_t call, seq;
    cJSON *body;
};

static int on_by_call(void *ctx, const struct ledger_entry *e)
{
    struct by_call_ctx *c = ctx;
    if (strcmp(e->kind, c->kind) != 0)
        return 0;
    cJSON *b = body_json(c->l, e->seq); /* NULL when redacted */
    long long call = -1;
    if (fo_json_get_int(b, "call_seq", 0, INT64_MAX / 2, &call) == FO_OK &&
        call == c->call) {
        c->seq = e->seq;
        c->body = b;
        return 1;
    }
    cJSON_Delete(b);
    return 0;
}

int orch_session_by_call(struct ledger *l, const char *name, const char *kind,
                         int64_t call_seq, int64_t *seq, cJSON **body,
                         struct fo_err *err)
{
    struct orch_session *s = NULL;
    int rc = orch_session_read(l, name, -1, &s, err);
    if (rc)
        return rc;
    struct by_call_ctx c = {.l = l, .kind = kind, .call = call_seq, .seq = -1};
    for (size_t i = 0; !rc && c.seq < 0 && i < s->n_starts; i++)
        rc = ledger_descendants(l, s->starts[i], -1, on_by_call, &c, err);
    orch_session_free(s);
    if (c.seq >= 0) /* found: the scan stopped there */
        rc = FO_OK;
    if (rc)
        return rc;
    if (c.seq < 0)
        return fo_err_set(err, FO_E_NOT_FOUND, "no %s of call %lld", kind,
                          (long long)call_seq);
    *seq = c.seq;
    if (body)
        *body = c.body;
    else
        cJSON_Delete(c.body);
    return FO_OK;
}

int orch_session_remember(const struct orch_witness *w, const char *name,
                          const char *key, const char *value, cJSON **out,
                          struct fo_err *err)
{
    int frc = orch_fact_check(key, value ? value : "", err);
    if (frc)
        return frc;
    struct orch_session *s = NULL;
    int64_t start = -1, seq = -1;
    int rc = orch_session_read(w->ledger, name, -1, &s, err);
    if (rc == FO_E_NOT_FOUND) { /* a fact begins a session too */
        cJSON *o = cJSON_CreateObject();
        if (o)
            cJSON_AddStringToObject(o, "session", name);
        rc = witness_obj(w, "session", "session_started", LEDGER_NO_PARENT, o,
                         &start, err);
    } else if (!rc) {
        start = s->start;
    }
    orch_session_free(s);
    if (rc)
        return rc;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "session", name);
        cJSON_AddStringToObject(o, "key", key);
        cJSON_AddStringToObject(o, "value", value);
    }
    rc = witness_obj(w, "session", "fact", start, o, &seq, err);
    if (rc)
        return rc;
    *out = cJSON_CreateObject();
    if (!*out || !cJSON_AddStringToObject(*out, "session", name) ||
        !cJSON_AddStringToObject(*out, "key", key) ||
        !fo_json_add_int(*out, "seq", seq)) {
        cJSON_Delete(*out);
        *out = NULL;
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return FO_OK;
}

int orch_session_forget(const struct orch_witness *w, const char *name,
                        const char *key, cJSON **out, struct fo_err *err)
{
    struct orch_session *s = NULL;
    int rc = orch_session_read(w->ledger, name, -1, &s, err);
    if (rc)
        return rc;
    long i = key ? fact_find(s, key) : -1;
    if (i < 0) {
        orch_session_free(s);
        return fo_err_set(err, FO_E_NOT_FOUND, "session %s: no fact %.128s",
                          name, key ? key : "");
    }
    int64_t fseq = s->facts[i].seq, start = s->start;
    orch_session_free(s);
    /* the fact's body goes (every copy of it), witnessed as a redaction;
     * then the tombstone, which names the key only */
    struct ledger_entry red;
    rc = ledger_redact(w->ledger, fseq, "forgotten (session fact)", &red, err);
    if (rc && rc != FO_E_REDACTED)
        return rc;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "session", name);
        cJSON_AddStringToObject(o, "key", key);
        fo_json_add_int(o, "fact_seq", fseq);
    }
    int64_t seq = -1;
    rc = witness_obj(w, "session", "fact_forgotten", start, o, &seq, err);
    if (rc)
        return rc;
    *out = cJSON_CreateObject();
    if (!*out || !cJSON_AddStringToObject(*out, "session", name) ||
        !cJSON_AddStringToObject(*out, "key", key) ||
        !fo_json_add_int(*out, "fact_seq", fseq) ||
        !fo_json_add_int(*out, "seq", seq)) {
        cJSON_Delete(*out);
        *out = NULL;
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return FO_OK;
}
