/* orch_json_lenient: finds the JSON object a model meant in its reply
 * (the whole text, a fenced block, the first balanced object in prose),
 * with one safe repair (comments, trailing commas), and says what was
 * wrong when there is none, for the corrective retry prompt. */
#include "daemon/orch_model.h"

#include <string.h>

#include "daemon/orch_types_int.h"
#include "ledger/fo_json.h"

#define TEXT_MAX (1024u * 1024u)
#define STARTS_MAX 16 /* '{' positions tried in prose */

struct find {
    int found_any;       /* some candidate was tried */
    struct fo_err first; /* why the first candidate failed */
    int have_first;
};

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Drops comments outside strings, then commas that only white space
 * separates from a closing } or ]. Returns a malloc'd copy or NULL. */
static char *repair(const char *s, size_t len, size_t *out_len)
{
    struct fo_buf a, b;
    fo_buf_init(&a, len + 1);
    fo_buf_init(&b, len + 1);
    int in_str = 0, rc = FO_OK;
    for (size_t i = 0; !rc && i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\' && i + 1 < len) {
                rc = fo_buf_append(&a, s + i, 2);
                i++;
                continue;
            }
            if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '/' && i + 1 < len && s[i + 1] == '/') {
            while (i < len && s[i] != '\n')
                i++;
            if (i < len)
                rc = fo_buf_putc(&a, '\n');
            continue;
        } else if (c == '/' && i + 1 < len && s[i + 1] == '*') {
            const char *end = NULL;
            for (size_t k = i + 2; k + 1 < len; k++)
                if (s[k] == '*' && s[k + 1] == '/') {
                    end = s + k;
                    break;
                }
            if (!end)
                break; /* unterminated: leave the rest to the parser */
            i = (size_t)(end - s) + 1;
            rc = fo_buf_putc(&a, ' ');
            continue;
        }
        rc = fo_buf_putc(&a, c);
    }
    in_str = 0;
    for (size_t i = 0; !rc && i < a.len; i++) {
        char c = a.data[i];
        if (in_str) {
            if (c == '\\' && i + 1 < a.len) {
                rc = fo_buf_append(&b, a.data + i, 2);
                i++;
                continue;
            }
            if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == ',') {
            size_t k = i + 1;
            while (k < a.len && is_blank(a.data[k]))
                k++;
            if (k < a.len && (a.data[k] == '}' || a.data[k] == ']'))
                continue;
        }
        rc = fo_buf_putc(&b, c);
    }
    char *r = rc ? NULL : fo_buf_detach(&b, out_len);
    fo_buf_release(&a);
    fo_buf_release(&b);
    return r;
}

/* Parses one candidate strictly, then repaired. FO_OK with *out an
 * object; else records why in f. */
static int try_one(const char *s, size_t len, cJSON **out, struct find *f)
{
    struct fo_err e;
    cJSON *j = NULL;
    int rc = fo_json_parse(s, len, &j, &e);
    if (rc == FO_E_NOMEM)
        return rc;
    if (rc) {
        size_t rl = 0;
        char *r = repair(s, len, &rl);
        if (!r)
            return FO_E_NOMEM;
        struct fo_err e2;
        if (rl != len || memcmp(r, s, len) != 0)
            rc = fo_json_parse(r, rl, &j, &e2);
        free(r);
        if (rc == FO_E_NOMEM)
            return rc;
    }
    if (rc == FO_OK && !cJSON_IsObject(j)) {
        fo_err_set(&e, FO_E_JSON, "the JSON is %s, not an object",
                   cJSON_IsArray(j) ? "an array" : "a scalar");
        cJSON_Delete(j);
        j = NULL;
        rc = FO_E_JSON;
    }
    f->found_any = 1;
    if (rc == FO_OK) {
        *out = j;
        return FO_OK;
    }
    if (!f->have_first) {
        f->first = e;
        f->have_first = 1;
    }
    return FO_E_JSON;
}

/* The end (one past the closing brace) of the balanced object that
 * starts at s[start], or 0 when it is not closed. */
static size_t balanced_end(const char *s, size_t len, size_t start)
{
    int depth = 0, in_str = 0;
    for (size_t i = start; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > FO_JSON_MAX_DEPTH + 1)
                return 0;
        } else if (c == '}' || c == ']') {
            if (--depth == 0)
                return c == '}' ? i + 1 : 0;
            if (depth < 0)
                return 0;
        }
    }
    return 0;
}

int orch_json_extract(const char *text, size_t len, cJSON **out,
                      struct fo_err *err)
{
    struct find f = {0};
    cJSON *j = NULL;
    int rc;
    if (len > TEXT_MAX)
        return fo_err_set(err, FO_E_INVALID, "the reply is over %u bytes",
                          TEXT_MAX);
    /* 1: the whole text, when it looks like JSON */
    size_t a = 0, b = len;
    while (a < b && is_blank(text[a]))
        a++;
    while (b > a && is_blank(text[b - 1]))
        b--;
    if (a < b && (text[a] == '{' || text[a] == '[')) {
        rc = try_one(text + a, b - a, &j, &f);
        if (rc != FO_E_JSON)
            goto done;
    }
    /* 2: fenced blocks: ```json or a bare ``` */
    const char *p = text, *end = text + len;
    while ((p = memmem(p, (size_t)(end - p), "```", 3)) != NULL) {
        const char *tag = p + 3;
        const char *nl = memchr(tag, '\n', (size_t)(end - tag));
        if (!nl)
            break;
        size_t tl = (size_t)(nl - tag);
        while (tl > 0 && is_blank(tag[tl - 1]))
            tl--;
        const char *body = nl + 1;
        const char *close = memmem(body, (size_t)(end - body), "```", 3);
        if (!close)
            close = end; /* an unclosed fence runs to the end */
        if (tl == 0 || (tl == 4 && strncasecmp(tag, "json", 4) == 0) ||
            (tl == 5 && strncasecmp(tag, "jsonc", 5) == 0)) {
            size_t s = 0, e = (size_t)(close - body);
            while (s < e && is_blank(body[s]))
                s++;
            while (e > s && is_blank(body[e - 1]))
                e--;
            if (s < e) {
                rc = try_one(body + s, e - s, &j, &f);
                if (rc != FO_E_JSON)
                    goto done;
            }
        }
        if (close == end)
            break;
        p = close + 3;
    }
    /* 3: the first balanced {...} in the prose (then the next, a few) */
    size_t unclosed = (size_t)-1;
    const char *q = text;
    for (int tries = 0; tries < STARTS_MAX; tries++) {
        q = memchr(q, '{', (size_t)(end - q));
        if (!q)
            break;
        size_t start = (size_t)(q - text);
        size_t stop = balanced_end(text, len, start);
        if (!stop) {
            if (unclosed == (size_t)-1)
                unclosed = start;
            q++;
            continue;
        }
        rc = try_one(text + start, stop - start, &j, &f);
        if (rc != FO_E_JSON)
            goto done;
        q++;
    }
    if (f.have_first)
        rc = fo_err_set(err, FO_E_JSON, "the JSON object does not parse: %s",
                        f.first.msg);
    else if (unclosed != (size_t)-1)
        rc = fo_err_set(err, FO_E_JSON,
                        "unbalanced braces: the object at byte %zu is not "
                        "closed",
                        unclosed);
    else
        rc = fo_err_set(err, FO_E_JSON,
                        "no JSON object found in the reply (answer with one "
                        "JSON object)");
    return rc;
done:
    if (rc == FO_OK)
        *out = j;
    else
        fo_err_set(err, rc, NULL);
    return rc;
}
