/* orch_roster: the roster of lanes: parsing and validating a
 * roster from JSON, the default roster compiled into the binary, and its
 * JSON form for `forum roster`. */
#include "daemon/orch_types.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch_tools.h"
#include "daemon/orch_types_int.h"
#include "ledger/fo_json.h"

/* Generated from daemon/roster-default.json by cmake/embed.cmake. */
extern const char orch_roster_default_json[];
extern const size_t orch_roster_default_json_len;

#define ROSTER_FILE_MAX (4u << 20)
#define MAX_TURNS_MAX 1000

static const char *const tier_names[] = {"cheap", "capable", "frontier"};
static const char *const exec_names[] = {"default", "cli", "chat", "anthropic",
                                         "stub"};

const char *orch_tier_name(int tier)
{
    if (tier < 0 || tier > ORCH_TIER_FRONTIER)
        return "?";
    return tier_names[tier];
}

const char *orch_exec_name(int kind)
{
    if (kind < 0 || kind > ORCH_EXEC_STUB)
        return "?";
    return exec_names[kind];
}

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

char *orch_strdup(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

int orch_token_valid(const char *s, size_t max)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= '0' && s[n] <= '9')))
            return 0;
    return n > 0 && n <= max;
}

int orch_name_valid(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

static void lane_release(struct orch_lane *l)
{
    free(l->name);
    free(l->category);
    free(l->domain);
    for (size_t i = 0; l->keywords && i < l->n_keywords; i++)
        free(l->keywords[i]);
    free(l->keywords);
    for (size_t i = 0; l->tools && i < l->n_tools; i++)
        free(l->tools[i]);
    free(l->tools);
    for (size_t i = 0; l->required_tools && i < l->n_required; i++)
        free(l->required_tools[i]);
    free(l->required_tools);
    orch_hook_release(&l->verifier);
    orch_hook_release(&l->reviser);
}

/* A built-in tool's name, or "server.tool" of an MCP server. */
static int tool_name_ok(const char *s)
{
    if (orch_tool_builtin(s))
        return 1;
    const char *dot = strchr(s, '.');
    if (!dot || dot == s || !dot[1] || strlen(s) > ORCH_TOOL_NAME_MAX)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' ||
              (*p == '.' && p == dot)))
            return 0;
    return 1;
}

static int lane_names(const cJSON *lane, const char *label, const char *field,
                      char ***out, size_t *n, struct fo_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(lane, field);
    if (!a)
        return FO_OK;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > 64)
        return fo_err_set(err, FO_E_INVALID,
                          "roster: %s: %s: must be a list of at most 64 tool "
                          "names",
                          label, field);
    *out = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof(char *));
    if (!*out)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    const cJSON *t;
    cJSON_ArrayForEach (t, a) {
        if (!cJSON_IsString(t) || !tool_name_ok(t->valuestring))
            return fo_err_set(err, FO_E_INVALID,
                              "roster: %s: %s: \"%s\" is not a tool (the "
                              "built-ins are read_file, write_file, list_dir, "
                              "search_text, apply_patch and run_command; an "
                              "MCP server's tool is server.tool)",
                              label, field,
                              cJSON_IsString(t) ? t->valuestring : "?");
        for (size_t j = 0; j < *n; j++)
            if (!strcmp((*out)[j], t->valuestring))
                return fo_err_set(err, FO_E_INVALID,
                                  "roster: %s: %s: \"%s\" twice", label, field,
                                  t->valuestring);
        if (!((*out)[*n] = orch_strdup(t->valuestring)))
            return fo_err_set(err, FO_E_NOMEM, NULL);
        (*n)++;
    }
    return FO_OK;
}

static int lane_tools(const cJSON *lane, const char *label, struct orch_lane *l,
                      struct fo_err *err)
{
    int rc = lane_names(lane, label, "tools", &l->tools, &l->n_tools, err);
    if (!rc)
        rc = lane_names(lane, label, "required_tools", &l->required_tools,
                        &l->n_required, err);
    for (size_t i = 0; !rc && i < l->n_required; i++) {
        size_t j = 0;
        while (j < l->n_tools && strcmp(l->tools[j], l->required_tools[i]))
            j++;
        if (j == l->n_tools)
            rc = fo_err_set(err, FO_E_INVALID,
                            "roster: %s: required_tools: \"%s\" is not one "
                            "of its tools",
                            label, l->required_tools[i]);
    }
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(lane, "guardrails");
    if (!rc && g &&
        !(cJSON_IsString(g) && (!strcmp(g->valuestring, "redact") ||
                                !strcmp(g->valuestring, "block"))))
        rc = fo_err_set(err, FO_E_INVALID,
                        "roster: %s: guardrails: must be \"redact\" or "
                        "\"block\"",
                        label);
    l->guard_block = !rc && g && !strcmp(g->valuestring, "block");
    const cJSON *net = cJSON_GetObjectItemCaseSensitive(lane, "network");
    if (!rc && net && !cJSON_IsBool(net))
        rc = fo_err_set(err, FO_E_INVALID,
                        "roster: %s: network: must be true or false", label);
    l->network = cJSON_IsTrue(net);
    return rc;
}

void orch_roster_free(struct orch_roster *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        lane_release(&r->lanes[i]);
    free(r->lanes);
    free(r);
}

/* "lane \"backend\"" or "lane #3" (1-based) when it has no usable name. */
static void lane_label(const cJSON *lane, size_t i, char *out, size_t size)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(lane, "name");
    if (cJSON_IsString(name) && orch_name_valid(name->valuestring, 64))
        snprintf(out, size, "lane \"%s\"", name->valuestring);
    else
        snprintf(out, size, "lane #%zu", i + 1);
}

static int lane_string(const cJSON *lane, const char *label, const char *field,
                       size_t max, int one_line, char **out, struct fo_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(lane, field);
    if (!v)
        return fo_err_set(err, FO_E_INVALID, "roster: %s: %s: missing", label,
                          field);
    if (!cJSON_IsString(v))
        return fo_err_set(err, FO_E_INVALID, "roster: %s: %s: must be a string",
                          label, field);
    if (!orch_name_valid(v->valuestring, max))
        return fo_err_set(err, FO_E_INVALID,
                          "roster: %s: %s: must be 1-%zu bytes%s", label, field,
                          max, one_line ? " on one line" : " without controls");
    *out = orch_strdup(v->valuestring);
    return *out ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
}

static int lane_keywords(const cJSON *lane, const char *label,
                         struct orch_lane *l, struct fo_err *err)
{
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(lane, "keywords");
    if (!kw)
        return fo_err_set(err, FO_E_INVALID, "roster: %s: keywords: missing",
                          label);
    int n = cJSON_IsArray(kw) ? cJSON_GetArraySize(kw) : 0;
    if (n == 0)
        return fo_err_set(err, FO_E_INVALID,
                          "roster: %s: keywords: must be a non-empty list",
                          label);
    if (n > ORCH_KEYWORDS_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "roster: %s: keywords: more than %d", label,
                          ORCH_KEYWORDS_MAX);
    l->keywords = calloc((size_t)n, sizeof(*l->keywords));
    if (!l->keywords)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    const cJSON *k;
    cJSON_ArrayForEach (k, kw) {
        if (!cJSON_IsString(k) ||
            !orch_token_valid(k->valuestring, ORCH_KEYWORD_MAX))
            return fo_err_set(err, FO_E_INVALID,
                              "roster: %s: keywords[%zu]: must be one "
                              "lowercase [a-z0-9]+ token of at most %d bytes",
                              label, l->n_keywords, ORCH_KEYWORD_MAX);
        for (size_t j = 0; j < l->n_keywords; j++)
            if (strcmp(l->keywords[j], k->valuestring) == 0)
                return fo_err_set(err, FO_E_INVALID,
                                  "roster: %s: keywords: \"%s\" twice", label,
                                  k->valuestring);
        l->keywords[l->n_keywords] = orch_strdup(k->valuestring);
        if (!l->keywords[l->n_keywords])
            return fo_err_set(err, FO_E_NOMEM, NULL);
        l->n_keywords++;
    }
    return FO_OK;
}

static int lane_enum(const cJSON *lane, const char *label, const char *field,
                     const char *const *names, int n, const char *what,
                     int *out, struct fo_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(lane, field);
    if (!v)
        return fo_err_set(err, FO_E_INVALID, "roster: %s: %s: missing", label,
                          field);
    int i = cJSON_IsString(v) ? lookup(v->valuestring, names, n) : -1;
    if (i < 0)
        return fo_err_set(err, FO_E_INVALID, "roster: %s: %s: %s", label, field,
                          what);
    *out = i;
    return FO_OK;
}

static int parse_lane(const cJSON *lane, size_t idx, struct orch_lane *l,
                      struct fo_err *err)
{
    char label[96];
    lane_label(lane, idx, label, sizeof(label));
    if (!cJSON_IsObject(lane))
        return fo_err_set(err, FO_E_INVALID, "roster: %s: must be an object",
                          label);
    int rc = lane_string(lane, label, "name", ORCH_NAME_MAX, 0, &l->name, err);
    if (!rc)
        rc = lane_string(lane, label, "category", ORCH_NAME_MAX, 0,
                         &l->category, err);
    if (!rc)
        rc = lane_string(lane, label, "domain", ORCH_DOMAIN_MAX, 1, &l->domain,
                         err);
    if (!rc)
        rc = lane_keywords(lane, label, l, err);
    if (!rc)
        rc = lane_enum(lane, label, "model_tier", tier_names, 3,
                       "must be cheap, capable or frontier", &l->tier, err);
    if (!rc)
        rc = lane_enum(lane, label, "executor", exec_names, 5,
                       "unknown executor (cli, chat, anthropic, stub or "
                       "default)",
                       &l->executor, err);
    if (rc)
        return rc;
    l->max_turns = ORCH_MAX_TURNS_DEFAULT;
    long long mt = 0;
    int g = fo_json_get_int(lane, "max_turns", 1, MAX_TURNS_MAX, &mt);
    if (g == FO_OK)
        l->max_turns = (int)mt;
    else if (g != FO_E_NOT_FOUND)
        return fo_err_set(err, FO_E_INVALID,
                          "roster: %s: max_turns: must be an integer in "
                          "1..%d",
                          label, MAX_TURNS_MAX);
    g = fo_json_get_int(lane, "max_retries", 0, ORCH_MAX_RETRIES_MAX, &mt);
    if (g == FO_OK)
        l->max_retries = (int)mt;
    else if (g != FO_E_NOT_FOUND)
        return fo_err_set(err, FO_E_INVALID,
                          "roster: %s: max_retries: must be an integer in "
                          "0..%d",
                          label, ORCH_MAX_RETRIES_MAX);
    int hr = orch_hook_parse(lane, label, "verifier", &l->verifier, err);
    if (!hr)
        hr = orch_hook_parse(lane, label, "reviser", &l->reviser, err);
    if (hr)
        return hr;
    return lane_tools(lane, label, l, err);
}

int orch_roster_parse(const char *json, size_t len, struct orch_roster **out,
                      struct fo_err *err)
{
    cJSON *doc = NULL;
    struct orch_roster *r = NULL;
    int rc = fo_json_parse(json, len, &doc, err);
    if (rc) {
        fo_err_prefix(err, "roster");
        goto out;
    }
    const cJSON *lanes = cJSON_GetObjectItemCaseSensitive(doc, "lanes");
    int n = cJSON_IsArray(lanes) ? cJSON_GetArraySize(lanes) : 0;
    if (!cJSON_IsObject(doc) || n == 0) {
        rc = fo_err_set(err, FO_E_INVALID,
                        "roster: lanes: must be a non-empty list");
        goto out;
    }
    if (n > ORCH_LANES_MAX) {
        rc = fo_err_set(err, FO_E_INVALID, "roster: lanes: more than %d",
                        ORCH_LANES_MAX);
        goto out;
    }
    r = calloc(1, sizeof(*r));
    if (r)
        r->lanes = calloc((size_t)n, sizeof(*r->lanes));
    if (!r || !r->lanes) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    const cJSON *lane;
    cJSON_ArrayForEach (lane, lanes) {
        struct orch_lane *l = &r->lanes[r->n];
        r->n++; /* counted before parsing, so cleanup frees partial lanes */
        rc = parse_lane(lane, r->n - 1, l, err);
        if (rc)
            goto out;
        for (size_t j = 0; j + 1 < r->n; j++)
            if (strcmp(r->lanes[j].name, l->name) == 0) {
                rc = fo_err_set(err, FO_E_INVALID,
                                "roster: lane \"%s\": name: duplicate (lanes "
                                "#%zu and #%zu)",
                                l->name, j + 1, r->n);
                goto out;
            }
    }
    *out = r;
    r = NULL;
    rc = FO_OK;
out:
    orch_roster_free(r);
    cJSON_Delete(doc);
    return rc;
}

int orch_roster_default(struct orch_roster **out, struct fo_err *err)
{
    return orch_roster_parse(orch_roster_default_json,
                             orch_roster_default_json_len, out, err);
}

int orch_roster_load(const char *path, struct orch_roster **out,
                     struct fo_err *err)
{
    struct fo_buf b;
    fo_buf_init(&b, ROSTER_FILE_MAX);
    int rc = FO_OK;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return fo_err_set(err, e == ENOENT ? FO_E_NOT_FOUND : FO_E_IO,
                          "roster %s: %s", path, strerror(e));
    }
    char chunk[16384];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = fo_buf_append(&b, chunk, n);
        if (rc == FO_E_TOO_LARGE)
            rc = fo_err_set(err, FO_E_INVALID, "roster %s: over %u bytes", path,
                            ROSTER_FILE_MAX);
        else if (rc)
            rc = fo_err_set(err, rc, NULL);
        if (rc)
            break;
    }
    if (!rc && ferror(f))
        rc = fo_err_set(err, FO_E_IO, "roster %s: read error", path);
    fclose(f);
    if (!rc)
        rc = orch_roster_parse(b.data ? b.data : "", b.len, out, err);
    fo_buf_release(&b);
    return rc;
}

const struct orch_lane *orch_roster_find(const struct orch_roster *r,
                                         const char *name)
{
    for (size_t i = 0; r && i < r->n; i++)
        if (strcmp(r->lanes[i].name, name) == 0)
            return &r->lanes[i];
    return NULL;
}

cJSON *orch_roster_json(const struct orch_roster *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "lanes") : NULL;
    int ok = arr && cJSON_AddStringToObject(o, "schema", "forum.roster/v1");
    for (size_t i = 0; ok && i < r->n; i++) {
        const struct orch_lane *l = &r->lanes[i];
        cJSON *lo = cJSON_CreateObject();
        cJSON *kw = lo ? cJSON_AddArrayToObject(lo, "keywords") : NULL;
        ok = kw && cJSON_AddStringToObject(lo, "name", l->name) &&
             cJSON_AddStringToObject(lo, "category", l->category) &&
             cJSON_AddStringToObject(lo, "domain", l->domain) &&
             cJSON_AddStringToObject(lo, "model_tier",
                                     orch_tier_name(l->tier)) &&
             cJSON_AddStringToObject(lo, "executor",
                                     orch_exec_name(l->executor)) &&
             fo_json_add_int(lo, "max_turns", l->max_turns) &&
             cJSON_AddStringToObject(lo, "guardrails",
                                     l->guard_block ? "block" : "redact") &&
             cJSON_AddBoolToObject(lo, "network", l->network) &&
             (!l->max_retries ||
              fo_json_add_int(lo, "max_retries", l->max_retries));
        cJSON *hv = ok ? orch_hook_json(&l->verifier) : NULL;
        cJSON *hr = ok ? orch_hook_json(&l->reviser) : NULL;
        if (hv)
            cJSON_AddItemToObject(lo, "verifier", hv);
        if (hr)
            cJSON_AddItemToObject(lo, "reviser", hr);
        cJSON *tl = ok ? cJSON_AddArrayToObject(lo, "tools") : NULL;
        cJSON *rl = tl ? cJSON_AddArrayToObject(lo, "required_tools") : NULL;
        ok = ok && rl;
        for (size_t j = 0; ok && j < l->n_tools; j++) {
            cJSON *s = cJSON_CreateString(l->tools[j]);
            ok = s != NULL;
            if (s)
                cJSON_AddItemToArray(tl, s);
        }
        for (size_t j = 0; ok && j < l->n_required; j++) {
            cJSON *s = cJSON_CreateString(l->required_tools[j]);
            ok = s != NULL;
            if (s)
                cJSON_AddItemToArray(rl, s);
        }
        for (size_t j = 0; ok && j < l->n_keywords; j++) {
            cJSON *s = cJSON_CreateString(l->keywords[j]);
            ok = s != NULL;
            if (s)
                cJSON_AddItemToArray(kw, s);
        }
        if (lo)
            cJSON_AddItemToArray(arr, lo);
        ok = ok && lo;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
