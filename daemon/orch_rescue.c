/* orch_rescue: tool calls written as text (tags, fenced blocks, a bare
 * call object) found in a model's answer and made real calls; see
 * orch_rescue.h for the forms. Pure: no I/O. */
#include "daemon/orch_rescue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch_types_int.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define WHY_MAX 200
#define NAME_MAX_ 64 /* a tool name in <function=NAME> */
/* tags and fences read from one text: each may read to its end, so the
 * work stays linear in the text's length (a hostile reply) */
#define CANDS_MAX (4 * ORCH_RESCUE_CALLS_MAX)

/* One candidate: the span [a, b) of the text and what it holds. */
struct cand {
    size_t a, b;
    const char *form;
    int state;  /* 1: a call (name, args); 0: not a call; -1: malformed */
    char *name; /* malloc'd */
    cJSON *args;
    char why[WHY_MAX];
};

struct scan {
    const char *s;
    size_t len;
    const char *const *tools;
    size_t n_tools;
    const char *prefix;
    struct orch_rescue *out;
    size_t *cut; /* pairs of [a, b) spans cut out, in order */
    size_t n_cut;
    int n_calls;
};

static void cand_release(struct cand *c)
{
    free(c->name);
    cJSON_Delete(c->args);
    c->name = NULL;
    c->args = NULL;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const char *s, size_t len, size_t i)
{
    while (i < len && is_ws(s[i]))
        i++;
    return i;
}

static int at(const char *s, size_t len, size_t i, const char *lit)
{
    size_t n = strlen(lit);
    return i <= len && len - i >= n && !memcmp(s + i, lit, n);
}

/* The end (one past) of the JSON object or array that starts at s[i], its
 * brackets counted outside strings; 0 when it is not closed. */
static size_t json_end(const char *s, size_t len, size_t i)
{
    size_t depth = 0;
    int in_str = 0;
    for (; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"')
            in_str = 1;
        else if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && depth && --depth == 0)
            return i + 1;
    }
    return 0;
}

/* Parses s[a, b) strictly: the value, or NULL (why set). -1: no memory. */
static int parse_slice(const char *s, size_t a, size_t b, cJSON **v, char *why)
{
    struct fo_err perr;
    *v = NULL;
    int rc = fo_json_parse(s + a, b - a, v, &perr);
    if (rc == FO_E_NOMEM)
        return -1;
    if (rc) {
        cJSON_Delete(*v);
        *v = NULL;
        snprintf(why, WHY_MAX, "%.180s", perr.msg);
    }
    return 0;
}

static const char *const name_keys[] = {"name", "tool"};
static const char *const arg_keys[] = {"arguments", "args", "parameters"};

/* The call an object spells into c (state 1), or state 0 (not a call's
 * shape) or -1 (a call whose arguments are not an object). in_tag: the
 * arguments may be left out and other members are ignored. -1: no
 * memory. */
static int call_of(const cJSON *o, int in_tag, struct cand *c)
{
    const cJSON *name = NULL, *args = NULL;
    for (size_t i = 0; i < 2 && !name; i++)
        name = cJSON_GetObjectItemCaseSensitive(o, name_keys[i]);
    for (size_t i = 0; i < 3 && !args; i++)
        args = cJSON_GetObjectItemCaseSensitive(o, arg_keys[i]);
    int members = cJSON_IsObject(o) ? cJSON_GetArraySize(o) : 0;
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !name->valuestring[0] ||
        (!in_tag && (!args || members != 2))) {
        c->state = in_tag ? -1 : 0;
        if (in_tag)
            snprintf(c->why, WHY_MAX,
                     "the tool call is not a JSON object with a \"name\" "
                     "and \"arguments\"");
        return 0;
    }
    c->name = orch_strdup(name->valuestring);
    if (!c->name)
        return -1;
    cJSON *a = NULL;
    if (!args) {
        a = cJSON_CreateObject();
    } else if (cJSON_IsString(args)) { /* arguments as JSON text */
        if (parse_slice(args->valuestring, 0, strlen(args->valuestring), &a,
                        c->why) < 0)
            return -1;
    } else {
        a = cJSON_Duplicate(args, 1);
        if (!a)
            return -1;
    }
    if (!cJSON_IsObject(a)) {
        cJSON_Delete(a);
        c->state = in_tag ? -1 : 0; /* outside a tag: just JSON */
        snprintf(c->why, WHY_MAX,
                 "the arguments of \"%.64s\" are not a JSON object", c->name);
        return 0;
    }
    c->args = a;
    c->state = 1;
    return 0;
}

/* The value of one <parameter=K>V</parameter>: an array or object V
 * spells, else V as a string (one newline either side dropped). */
static cJSON *param_value(const char *s, size_t a, size_t b)
{
    if (a < b && s[a] == '\n')
        a++;
    if (b > a && s[b - 1] == '\n')
        b--;
    size_t x = skip_ws(s, b, a);
    if (x < b && (s[x] == '[' || s[x] == '{')) {
        cJSON *v = NULL;
        struct fo_err perr;
        if (fo_json_parse(s + a, b - a, &v, &perr) == FO_OK)
            return v;
        cJSON_Delete(v);
    }
    char *str = malloc(b - a + 1);
    if (!str)
        return NULL;
    memcpy(str, s + a, b - a);
    str[b - a] = '\0';
    cJSON *v = cJSON_CreateString(str);
    free(str);
    return v;
}

/* <parameter=K>V</parameter>... from s[i] up to </function>: the object
 * into c->args; *end past the last parameter. -1: no memory. */
static int params_of(const struct scan *sc, size_t i, struct cand *c,
                     size_t *end)
{
    const char *s = sc->s;
    size_t len = sc->len;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return -1;
    for (i = skip_ws(s, len, i); at(s, len, i, "<parameter=");
         i = skip_ws(s, len, i)) {
        size_t k = i + strlen("<parameter="), ke = k;
        while (ke < len && s[ke] != '>' && s[ke] != '\n' && ke - k < 128)
            ke++;
        const char *close = ke < len && s[ke] == '>'
                                ? memmem(s + ke, len - ke, "</parameter>",
                                         strlen("</parameter>"))
                                : NULL;
        if (!close || ke == k) {
            cJSON_Delete(o);
            c->state = -1;
            snprintf(c->why, WHY_MAX,
                     "a <parameter=...> of the call is not closed with "
                     "</parameter>");
            return 0;
        }
        char key[129];
        snprintf(key, sizeof(key), "%.*s", (int)(ke - k), s + k);
        cJSON *v = param_value(s, ke + 1, (size_t)(close - s));
        if (!v) {
            cJSON_Delete(o);
            return -1;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(o, key);
        cJSON_AddItemToObject(o, key, v);
        i = (size_t)(close - s) + strlen("</parameter>");
    }
    c->args = o;
    c->state = 1;
    *end = i;
    return 0;
}

/* <function=NAME> at s[i]: its arguments (a JSON object or parameters)
 * and the span up to past </function> (optional at the end of the text).
 * -1: no memory. */
static int function_tag(const struct scan *sc, size_t i, struct cand *c)
{
    const char *s = sc->s;
    size_t len = sc->len, n = i + strlen("<function="), ne = n;
    c->form = "function_tag";
    c->a = i;
    while (ne < len && s[ne] != '>' && ne - n <= NAME_MAX_ &&
           (s[ne] == '_' || s[ne] == '-' || s[ne] == '.' ||
            (s[ne] >= '0' && s[ne] <= '9') || (s[ne] >= 'a' && s[ne] <= 'z') ||
            (s[ne] >= 'A' && s[ne] <= 'Z')))
        ne++;
    if (ne == n || ne >= len || s[ne] != '>') {
        c->state = 0; /* not a tag */
        return 0;
    }
    if (!(c->name = malloc(ne - n + 1)))
        return -1;
    memcpy(c->name, s + n, ne - n);
    c->name[ne - n] = '\0';
    size_t b = skip_ws(s, len, ne + 1), end = b;
    if (b < len && s[b] == '{') {
        size_t e = json_end(s, len, b);
        cJSON *v = NULL;
        if (!e) {
            c->state = -1;
            snprintf(c->why, WHY_MAX,
                     "the arguments of \"%.64s\" are not closed: the JSON "
                     "object has no closing brace",
                     c->name);
            return 0;
        }
        if (parse_slice(s, b, e, &v, c->why) < 0)
            return -1;
        if (!cJSON_IsObject(v)) {
            cJSON_Delete(v);
            c->state = -1;
            if (!c->why[0])
                snprintf(c->why, WHY_MAX,
                         "the arguments of \"%.64s\" are not a JSON object",
                         c->name);
            return 0;
        }
        c->args = v;
        c->state = 1;
        end = e;
    } else if (params_of(sc, b, c, &end) < 0) {
        return -1;
    }
    if (c->state != 1)
        return 0;
    end = skip_ws(s, len, end);
    if (at(s, len, end, "</function>"))
        end += strlen("</function>");
    else if (end < len && !at(s, len, end, "</tool_call>")) {
        c->state = -1;
        snprintf(c->why, WHY_MAX,
                 "the call of \"%.64s\" is not closed with </function>",
                 c->name);
        return 0;
    }
    c->b = end;
    return 0;
}

/* <tool_call> at s[i]: one call object or <function=...> inside, up to
 * past </tool_call> (optional at the end of the text). -1: no memory. */
static int tool_call_tag(const struct scan *sc, size_t i, struct cand *c)
{
    const char *s = sc->s;
    size_t len = sc->len, b = skip_ws(s, len, i + strlen("<tool_call>"));
    size_t end = b;
    c->a = i;
    c->form = "tool_call_tag";
    if (at(s, len, b, "<function=")) {
        if (function_tag(sc, b, c) < 0)
            return -1;
        c->a = i;
        if (c->state == 0) {
            c->state = -1;
            snprintf(c->why, WHY_MAX, "the <function=NAME> tag is not closed");
        }
        if (c->state != 1)
            return 0;
        end = c->b;
    } else {
        size_t e = b < len && s[b] == '{' ? json_end(s, len, b) : 0;
        cJSON *v = NULL;
        if (!e) {
            c->state = -1;
            snprintf(c->why, WHY_MAX,
                     b < len && s[b] == '{'
                         ? "the JSON object in <tool_call> is not closed"
                         : "<tool_call> does not hold a JSON object");
            return 0;
        }
        if (parse_slice(s, b, e, &v, c->why) < 0)
            return -1;
        if (!v) {
            c->state = -1;
            return 0;
        }
        int rc = call_of(v, 1, c);
        cJSON_Delete(v);
        if (rc < 0 || c->state != 1)
            return rc;
        end = e;
    }
    end = skip_ws(s, len, end);
    if (at(s, len, end, "</tool_call>"))
        end += strlen("</tool_call>");
    else if (end < len) {
        cand_release(c);
        c->state = -1;
        snprintf(c->why, WHY_MAX,
                 "the call is not closed with </tool_call> (text follows "
                 "the JSON object)");
        return 0;
    }
    c->b = end;
    return 0;
}

/* A fence at s[i] (at the start of a line): a ```json, ```tool_call or
 * bare ``` block that is exactly one call object. -1: no memory. */
static int fenced(const struct scan *sc, size_t i, struct cand *c)
{
    const char *s = sc->s;
    size_t len = sc->len, l = i + 3, le = l;
    c->a = i;
    c->form = "fenced_block";
    c->state = 0;
    while (le < len && s[le] != '\n')
        le++;
    size_t ll = le - l;
    while (ll && is_ws(s[l + ll - 1]))
        ll--;
    if (!(ll == 0 || (ll == 4 && !memcmp(s + l, "json", 4)) ||
          (ll == 9 && !memcmp(s + l, "tool_call", 9))))
        return 0;
    size_t b = skip_ws(s, len, le);
    size_t e = b < len && s[b] == '{' ? json_end(s, len, b) : 0;
    size_t f = e ? skip_ws(s, len, e) : 0;
    if (!e || !at(s, len, f, "```"))
        return 0;
    cJSON *v = NULL;
    char why[WHY_MAX];
    if (parse_slice(s, b, e, &v, why) < 0)
        return -1;
    if (!v)
        return 0;
    int rc = call_of(v, 0, c);
    cJSON_Delete(v);
    c->b = f + 3;
    return rc;
}

static int tool_offered(const struct scan *sc, const char *name)
{
    for (size_t i = 0; i < sc->n_tools; i++)
        if (sc->tools[i] && !strcmp(sc->tools[i], name))
            return 1;
    return 0;
}

static cJSON *list_add(cJSON **list)
{
    if (!*list && !(*list = cJSON_CreateArray()))
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (o)
        cJSON_AddItemToArray(*list, o);
    return o;
}

/* Files candidate c: a call taken (its span cut), refused or malformed.
 * -1: no memory. */
static int take(struct scan *sc, struct cand *c)
{
    struct orch_rescue *out = sc->out;
    if (c->state < 0) {
        cJSON *o = list_add(&out->malformed);
        return o && cJSON_AddStringToObject(o, "form", c->form) &&
                       cJSON_AddStringToObject(o, "error", c->why)
                   ? 0
                   : -1;
    }
    if (c->state == 0)
        return 0;
    const char *reason = !tool_offered(sc, c->name) ? "not_offered"
                         : sc->n_calls >= ORCH_RESCUE_CALLS_MAX
                             ? "too_many_calls"
                             : NULL;
    if (reason) {
        cJSON *o = list_add(&out->refused);
        return o && cJSON_AddStringToObject(o, "form", c->form) &&
                       cJSON_AddStringToObject(o, "tool", c->name) &&
                       cJSON_AddStringToObject(o, "reason", reason)
                   ? 0
                   : -1;
    }
    struct fo_buf ab;
    fo_buf_init(&ab, FO_BUF_UNLIMITED);
    char id[96];
    snprintf(id, sizeof(id), "%.80s%d", sc->prefix, sc->n_calls + 1);
    char *args =
        fo_json_canon(c->args, &ab, NULL) ? NULL : fo_buf_detach(&ab, NULL);
    fo_buf_release(&ab);
    if (!out->calls)
        out->calls = cJSON_CreateArray();
    cJSON *o = out->calls ? cJSON_CreateObject() : NULL;
    if (o)
        cJSON_AddItemToArray(out->calls, o);
    int ok = o && args && cJSON_AddStringToObject(o, "id", id) &&
             cJSON_AddStringToObject(o, "name", c->name) &&
             cJSON_AddStringToObject(o, "arguments", args) &&
             cJSON_AddStringToObject(o, "rescued", c->form);
    free(args);
    size_t *cut =
        ok ? realloc(sc->cut, (sc->n_cut + 1) * 2 * sizeof(*cut)) : NULL;
    if (!cut)
        return -1;
    sc->cut = cut;
    cut[sc->n_cut * 2] = c->a;
    cut[sc->n_cut * 2 + 1] = c->b;
    sc->n_cut++;
    sc->n_calls++;
    return 0;
}

/* The text without the cut spans, trimmed. */
static char *cut_text(const struct scan *sc)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    size_t from = 0;
    int rc = 0;
    for (size_t k = 0; !rc && k <= sc->n_cut; k++) {
        size_t to = k < sc->n_cut ? sc->cut[k * 2] : sc->len;
        rc = fo_buf_append(&b, sc->s + from, to - from);
        if (k < sc->n_cut)
            from = sc->cut[k * 2 + 1];
    }
    if (!rc)
        rc = fo_buf_putc(&b, '\0');
    char *all = rc ? NULL : fo_buf_detach(&b, NULL);
    fo_buf_release(&b);
    if (!all)
        return NULL;
    size_t a = skip_ws(all, strlen(all), 0), e = strlen(all);
    while (e > a && is_ws(all[e - 1]))
        e--;
    memmove(all, all + a, e - a);
    all[e - a] = '\0';
    return all;
}

/* Past the end of the malformed tag at s[a]: its closing tag, or the end
 * of the text when it has none; i when it is no tag (a fence). */
static size_t after_tag(const char *s, size_t len, size_t a, size_t i)
{
    const char *close = at(s, len, a, "<tool_call>")  ? "</tool_call>"
                        : at(s, len, a, "<function=") ? "</function>"
                                                      : NULL;
    if (!close)
        return i;
    const char *e = memmem(s + a, len - a, close, strlen(close));
    return e ? (size_t)(e - s) + strlen(close) : len;
}

static int scan_text(struct scan *sc)
{
    const char *s = sc->s;
    size_t len = sc->len;
    int tries = 0;
    for (size_t i = 0; i < len && tries < CANDS_MAX;) {
        struct cand c = {.a = i, .b = i};
        int rc = 0, tried = 1;
        if (at(s, len, i, "<tool_call>"))
            rc = tool_call_tag(sc, i, &c);
        else if (at(s, len, i, "<function="))
            rc = function_tag(sc, i, &c);
        else if (at(s, len, i, "```") && (i == 0 || s[i - 1] == '\n'))
            rc = fenced(sc, i, &c);
        else
            tried = 0;
        if (!rc && tried)
            rc = take(sc, &c);
        cand_release(&c);
        if (rc < 0)
            return -1;
        tries += tried;
        i = tried && c.state == 1 && c.b > i ? c.b : i + 1;
        if (tried && c.state < 0) /* what the bad tag holds is not read */
            i = after_tag(s, len, c.a, i);
    }
    if (sc->n_calls || sc->out->refused || sc->out->malformed)
        return 0;
    /* the whole text, exactly one call object */
    size_t a = skip_ws(s, len, 0), e = len;
    while (e > a && is_ws(s[e - 1]))
        e--;
    if (a >= e || s[a] != '{' || json_end(s, len, a) != e)
        return 0;
    struct cand c = {.a = 0, .b = len, .form = "bare_json"};
    cJSON *v = NULL;
    int rc = parse_slice(s, a, e, &v, c.why);
    if (!rc && v)
        rc = call_of(v, 0, &c);
    cJSON_Delete(v);
    if (!rc)
        rc = take(sc, &c);
    cand_release(&c);
    return rc;
}

int orch_rescue_scan(const char *text, size_t len, const char *const *tools,
                     size_t n_tools, const char *id_prefix,
                     struct orch_rescue *out, struct fo_err *err)
{
    *out = (struct orch_rescue){0};
    if (!text || len > ORCH_RESCUE_TEXT_MAX)
        return FO_OK;
    struct scan sc = {.s = text,
                      .len = len,
                      .tools = tools,
                      .n_tools = n_tools,
                      .prefix = id_prefix ? id_prefix : "rescued-",
                      .out = out};
    int rc = scan_text(&sc);
    if (!rc && sc.n_calls && !(out->text = cut_text(&sc)))
        rc = -1;
    free(sc.cut);
    if (rc) {
        orch_rescue_release(out);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return FO_OK;
}

void orch_rescue_release(struct orch_rescue *r)
{
    if (!r)
        return;
    cJSON_Delete(r->calls);
    cJSON_Delete(r->refused);
    cJSON_Delete(r->malformed);
    free(r->text);
    *r = (struct orch_rescue){0};
}

char *orch_rescue_respond_answer(const char *args, char *why, size_t n)
{
    cJSON *a = NULL;
    struct fo_err perr;
    char *out = NULL;
    if (!args || fo_json_parse(args, strlen(args), &a, &perr) != FO_OK) {
        snprintf(why, n,
                 "respond: the arguments are not JSON; call it with "
                 "{\"answer\": \"your final answer\"}");
    } else {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "answer");
        if (!cJSON_IsObject(a) || !cJSON_IsString(v))
            snprintf(why, n,
                     "respond: \"answer\" must be a string; call it with "
                     "{\"answer\": \"your final answer\"}");
        else if (!(out = orch_strdup(v->valuestring)))
            snprintf(why, n, "out of memory");
    }
    cJSON_Delete(a);
    return out;
}
