/* orch_toolname: the names tools are offered to a model provider under.
 * OpenAI and Anthropic accept only ^[a-zA-Z0-9_-]{1,64}$, while a roster
 * names an MCP server's tool "server.tool": the provider is offered a
 * valid name made from it, and the name the model calls is mapped back,
 * so everything else (the roster, the ledger, the engine) keeps
 * "server.tool". The mapping is a pure function of the list of tools
 * offered, so every call of a conversation maps the same way. */
#include "daemon/orch_model.h"

#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"

struct orch_toolnames {
    size_t n;
    char **name;                         /* as the roster has it */
    char (*wire)[ORCH_TOOLNAME_MAX + 1]; /* as the provider sees it */
    char scratch[ORCH_TOOLNAME_MAX + 1]; /* a name not offered, made valid */
};

static int valid_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

int orch_toolname_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > ORCH_TOOLNAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!valid_char((unsigned char)s[i]))
            return 0;
    return 1;
}

/* name made valid: '.' as "__", any other character outside the set as
 * '_', at most max bytes. */
static void sanitize(const char *name, char *out, size_t max)
{
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && k < max;
         p++) {
        if (valid_char(*p)) {
            out[k++] = (char)*p;
        } else if (*p == '.' && k + 2 <= max) {
            out[k++] = '_';
            out[k++] = '_';
        } else if ((*p & 0xc0) != 0x80) { /* one '_' a character */
            out[k++] = '_';
        }
    }
    out[k] = '\0';
}

/* 1 when w is taken: another tool's own name, or a wire name given to
 * one of the first i tools. */
static int taken(const struct orch_toolnames *t, size_t i, const char *w)
{
    for (size_t j = 0; j < t->n; j++)
        if (j != i && !strcmp(t->name[j], w))
            return 1;
    for (size_t j = 0; j < i; j++)
        if (!strcmp(t->wire[j], w))
            return 1;
    return 0;
}

static void make_wire(struct orch_toolnames *t, size_t i)
{
    char *w = t->wire[i];
    const char *name = t->name[i];
    if (orch_toolname_valid(name) && !taken(t, i, name)) {
        memcpy(w, name, strlen(name) + 1);
        return;
    }
    sanitize(name, w, ORCH_TOOLNAME_MAX);
    if (w[0] && !taken(t, i, w))
        return;
    /* a clash (or nothing left): a short hash of the name makes it
     * unique; on the rare clash of hashes, the next one */
    uint8_t h[FO_SHA256_LEN];
    fo_sha256(name, strlen(name), h);
    static const char hex[] = "0123456789abcdef";
    sanitize(name, w, ORCH_TOOLNAME_MAX - 9);
    size_t k = strlen(w);
    for (size_t off = 0; off + 4 <= FO_SHA256_LEN; off++) {
        w[k] = '_';
        for (size_t b = 0; b < 4; b++) {
            w[k + 1 + 2 * b] = hex[h[off + b] >> 4];
            w[k + 2 + 2 * b] = hex[h[off + b] & 15];
        }
        w[k + 9] = '\0';
        if (!taken(t, i, w))
            return;
    }
}

int orch_toolnames_make(const char *tools, struct orch_toolnames **out)
{
    struct orch_toolnames *t = calloc(1, sizeof(*t));
    cJSON *a = NULL;
    int rc = FO_E_NOMEM;
    if (!t)
        return rc;
    if (tools && fo_json_parse(tools, strlen(tools), &a, NULL) == FO_E_NOMEM)
        goto out;
    size_t n = cJSON_IsArray(a) ? (size_t)cJSON_GetArraySize(a) : 0;
    if (n) {
        t->name = calloc(n, sizeof(*t->name));
        t->wire = calloc(n, sizeof(*t->wire));
        if (!t->name || !t->wire)
            goto out;
    }
    const cJSON *e;
    cJSON_ArrayForEach (e, a) {
        if (!n)
            break;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (!cJSON_IsString(name))
            continue;
        if (!(t->name[t->n] = strdup(name->valuestring)))
            goto out;
        t->n++;
    }
    for (size_t i = 0; i < t->n; i++)
        make_wire(t, i);
    *out = t;
    t = NULL;
    rc = FO_OK;
out:
    cJSON_Delete(a);
    orch_toolnames_free(t);
    return rc;
}

const char *orch_toolnames_wire(struct orch_toolnames *t, const char *name)
{
    for (size_t i = 0; t && i < t->n; i++)
        if (!strcmp(t->name[i], name))
            return t->wire[i];
    if (!t || orch_toolname_valid(name))
        return name;
    /* a name the model made up, in the history: made valid too, or the
     * provider refuses the whole conversation */
    sanitize(name, t->scratch, ORCH_TOOLNAME_MAX);
    if (!t->scratch[0])
        memcpy(t->scratch, "unknown_tool", sizeof("unknown_tool"));
    return t->scratch;
}

const char *orch_toolnames_name(const struct orch_toolnames *t,
                                const char *wire)
{
    for (size_t i = 0; t && i < t->n; i++)
        if (!strcmp(t->wire[i], wire))
            return t->name[i];
    return wire;
}

void orch_toolnames_free(struct orch_toolnames *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->name[i]);
    free(t->name);
    free(t->wire);
    free(t);
}
