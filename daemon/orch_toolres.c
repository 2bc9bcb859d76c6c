/* orch_toolres: a tool's result, capped for the model and kept whole on
 * the ledger while it fits (see orch_toolres.h). */
#include "daemon/orch_toolres.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch_tools.h"
#include "daemon/orch_types_int.h"
#include "ledger/fo_err.h"
#include "ledger/fo_json.h"

size_t orch_json_str_len(const char *s, size_t n)
{
    size_t len = 2;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' ||
            c == '\r' || c == '\t')
            len += 2;
        else if (c < 0x20)
            len += 6;
        else
            len++;
    }
    return len;
}

/* The longest prefix of s (n bytes, UTF-8) whose JSON form takes at most
 * budget bytes, cut at a character boundary. */
static size_t json_prefix(const char *s, size_t n, size_t budget)
{
    if (budget < 2)
        return 0;
    size_t len = 2, i = 0;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        size_t w = (c == '"' || c == '\\' || c == '\b' || c == '\f' ||
                    c == '\n' || c == '\r' || c == '\t')
                       ? 2
                   : c < 0x20 ? 6
                              : 1;
        if (len + w > budget)
            break;
        len += w;
    }
    return orch_utf8_prefix(s, n, i);
}

/* Canonical bytes of v. */
static size_t canon_len(const cJSON *v)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    size_t n = fo_json_canon(v, &b, NULL) ? (size_t)-1 / 2 : b.len;
    fo_buf_release(&b);
    return n;
}

static cJSON *dropped(const cJSON *a)
{
    cJSON *d = cJSON_CreateObject();
    static const char *keep[] = {"type", "mimeType", "uri", "name"};
    for (size_t i = 0; d && i < sizeof(keep) / sizeof(keep[0]); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, keep[i]);
        if (cJSON_IsString(v) && strlen(v->valuestring) <= 2048 &&
            !cJSON_AddStringToObject(d, keep[i], v->valuestring)) {
            cJSON_Delete(d);
            return NULL;
        }
    }
    if (d && !cJSON_AddStringToObject(d, "dropped",
                                      "over the ledger's body limit")) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

static int add_attachments(cJSON *o, const cJSON *attach, size_t *used)
{
    if (!cJSON_IsArray(attach) || !attach->child)
        return FO_OK;
    cJSON *arr = cJSON_AddArrayToObject(o, "attachments");
    if (!arr)
        return FO_E_NOMEM;
    *used += 16;
    const cJSON *a;
    cJSON_ArrayForEach (a, attach) {
        size_t n = canon_len(a) + 1;
        cJSON *c = *used + n <= ORCH_TOOLRES_BODY_MAX ? cJSON_Duplicate(a, 1)
                                                      : dropped(a);
        if (!c)
            return FO_E_NOMEM;
        *used += canon_len(c) + 1;
        cJSON_AddItemToArray(arr, c);
    }
    return FO_OK;
}

int orch_toolres_fields(cJSON *o, const char *out, const cJSON *attach)
{
    if (!out)
        out = "";
    size_t len = strlen(out);
    /* a tool that cut its own output (read_file) stays under the slack */
    size_t cut = len > ORCH_TOOL_OUTPUT_MAX + ORCH_TOOLRES_SLACK
                     ? orch_utf8_prefix(out, len, ORCH_TOOL_OUTPUT_MAX)
                     : len;
    size_t used = canon_len(o) + 1024; /* the fields to come, their names */
    if (cut == len) {
        if (!cJSON_AddStringToObject(o, "output", out))
            return FO_E_NOMEM;
        used += orch_json_str_len(out, len);
        return add_attachments(o, attach, &used);
    }
    /* the model's copy: a prefix and where the rest is */
    size_t mlen = orch_json_str_len(out, cut) + 160;
    size_t budget = used + mlen < ORCH_TOOLRES_BODY_MAX
                        ? ORCH_TOOLRES_BODY_MAX - used - mlen
                        : 0;
    size_t full = json_prefix(out, len, budget);
    char marker[160];
    if (full == len)
        snprintf(marker, sizeof(marker),
                 "\n[forum: cut at %zu of %zu bytes; the whole output is on "
                 "the ledger]",
                 cut, len);
    else
        snprintf(marker, sizeof(marker),
                 "\n[forum: cut at %zu of %zu bytes; the first %zu bytes are "
                 "on the ledger]",
                 cut, len, full);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int bad = fo_buf_append(&b, out, cut) || fo_buf_puts(&b, marker) ||
              !cJSON_AddStringToObject(o, "output", b.data) ||
              !fo_json_add_int(o, "output_bytes", (long long)len);
    fo_buf_release(&b);
    if (bad)
        return FO_E_NOMEM;
    char *copy = malloc(full + 1);
    if (!copy)
        return FO_E_NOMEM;
    memcpy(copy, out, full);
    copy[full] = '\0';
    bad = !cJSON_AddStringToObject(o, "output_full", copy);
    free(copy);
    if (bad)
        return FO_E_NOMEM;
    if (full < len && !cJSON_AddTrueToObject(o, "output_full_cut"))
        return FO_E_NOMEM;
    used += mlen + orch_json_str_len(out, full);
    return add_attachments(o, attach, &used);
}
