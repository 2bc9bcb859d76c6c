/* fo_json: the strict JSON reader and the RFC 8785 (JCS) writer. Every byte
 * the project hashes or serves is read and written here, never by cJSON's
 * own parser or printer (TRAPS.md). */
#include "ledger/fo_json.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- UTF-8 */

/* Length of the well-formed UTF-8 sequence at s (Unicode table 3-7: no
 * overlongs, no surrogates, nothing above U+10FFFF), or 0 when the bytes are
 * not one. Stores the code point in *cp when cp is not NULL. */
static size_t utf8_seq(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF;
    size_t n;
    uint32_t v;

    if (c < 0x80) {
        n = 1;
        v = c;
    } else if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        v = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        v = c & 0x0Fu;
        if (c == 0xE0)
            lo = 0xA0; /* overlong below U+0800 */
        else if (c == 0xED)
            hi = 0x9F; /* U+D800..U+DFFF are surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        v = c & 0x07u;
        if (c == 0xF0)
            lo = 0x90; /* overlong below U+10000 */
        else if (c == 0xF4)
            hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (n > len)
        return 0;
    for (size_t i = 1; i < n; i++) {
        unsigned char t = s[i];
        if (t < lo || t > hi)
            return 0;
        lo = 0x80; /* only the second byte has a narrowed range */
        hi = 0xBF;
        v = (v << 6) | (t & 0x3Fu);
    }
    if (cp)
        *cp = v;
    return n;
}

int fo_utf8_valid(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;

    while (i < len) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = utf8_seq(u + i, len - i, NULL);
        if (n == 0)
            return 0;
        i += n;
    }
    return 1;
}

/* Appends code point cp (a scalar value) as UTF-8. */
static int utf8_put(struct fo_buf *b, uint32_t cp)
{
    char tmp[4];
    size_t n;

    if (cp < 0x80) {
        tmp[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        tmp[0] = (char)(0xC0 | (cp >> 6));
        tmp[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        tmp[0] = (char)(0xE0 | (cp >> 12));
        tmp[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        tmp[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        tmp[0] = (char)(0xF0 | (cp >> 18));
        tmp[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        tmp[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        tmp[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return fo_buf_append(b, tmp, n);
}

/* Copies at most 40 bytes of the valid UTF-8 key k into out for an error
 * message, whole characters only, with controls, quotes and backslashes
 * shown as '?' so the message stays printable. */
static void key_for_msg(const char *k, size_t len, char out[48])
{
    const unsigned char *u = (const unsigned char *)k;
    size_t i = 0, o = 0;

    while (i < len) {
        size_t n = utf8_seq(u + i, len - i, NULL);
        if (n == 0 || o + n > 40)
            break;
        if (n == 1 &&
            (u[i] < 0x20 || u[i] == 0x7F || u[i] == '"' || u[i] == '\\'))
            out[o] = '?';
        else
            memcpy(out + o, u + i, n);
        o += n;
        i += n;
    }
    if (i < len) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

/* Describes byte c for an error message: 'x' when printable, else 0xNN. */
static const char *byte_desc(unsigned char c, char buf[8])
{
    if (c >= 0x21 && c < 0x7F && c != '\'')
        snprintf(buf, 8, "'%c'", c);
    else
        snprintf(buf, 8, "0x%02x", c);
    return buf;
}

/* --------------------------------------------------------------- reader */

/* An object member's key, kept while its object is open so duplicates can
 * be found by sorting once the object closes. */
struct key_ref {
    const char *key;
    size_t len;
    size_t off; /* byte offset of the key's opening quote */
};

struct parser {
    const unsigned char *s;
    size_t len;
    size_t pos;
    int rc;         /* FO_E_JSON or FO_E_NOMEM once failed */
    unsigned flags; /* FO_JSON_NUMBER_TEXT */
    struct fo_err *err;
    struct fo_buf str;    /* the string literal being decoded */
    struct key_ref *keys; /* a stack: members of every open object */
    size_t nkeys;
    size_t capkeys;
};

static void fail(struct parser *p, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(struct parser *p, size_t off, const char *fmt, ...)
{
    char msg[FO_ERR_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    p->rc =
        fo_err_set(p->err, FO_E_JSON, "invalid JSON at byte %zu: %s", off, msg);
}

static void fail_nomem(struct parser *p)
{
    p->rc = fo_err_set(p->err, FO_E_NOMEM, "out of memory parsing JSON");
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static void skip_ws(struct parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int starts_with(const struct parser *p, size_t at, const char *word)
{
    size_t n = strlen(word);
    return p->len - at >= n && memcmp(p->s + at, word, n) == 0;
}

/* Reports the character at p->pos as unexpected, naming the common
 * non-JSON spellings. */
static void fail_unexpected(struct parser *p)
{
    size_t at = p->pos;
    unsigned char c = p->s[at];
    char d[8];

    if (starts_with(p, at, "NaN"))
        fail(p, at, "NaN is not allowed");
    else if (starts_with(p, at, "Infinity"))
        fail(p, at, "Infinity is not allowed");
    else if (c == '+')
        fail(p, at, "a number may not start with '+'");
    else if (c == '.')
        fail(p, at, "a number may not start with '.'");
    else
        fail(p, at, "unexpected character %s", byte_desc(c, d));
}

static int hex4(const unsigned char *s, uint32_t *out)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return -1;
        v = (v << 4) | d;
    }
    *out = v;
    return 0;
}

/* Decodes the escape sequence at p->pos (the backslash) into p->str. */
static int parse_escape(struct parser *p)
{
    size_t at = p->pos;
    const unsigned char *s = p->s;
    uint32_t cp, lo;
    char d[8];
    char c;

    if (p->len - at < 2) {
        fail(p, at, "unterminated string");
        return -1;
    }
    switch (s[at + 1]) {
    case '"':
        c = '"';
        break;
    case '\\':
        c = '\\';
        break;
    case '/':
        c = '/';
        break;
    case 'b':
        c = '\b';
        break;
    case 'f':
        c = '\f';
        break;
    case 'n':
        c = '\n';
        break;
    case 'r':
        c = '\r';
        break;
    case 't':
        c = '\t';
        break;
    case 'u':
        if (p->len - at < 6 || hex4(s + at + 2, &cp) != 0) {
            fail(p, at, "invalid \\u escape");
            return -1;
        }
        p->pos += 6;
        if (cp == 0) {
            fail(p, at, "\\u0000 is not allowed in strings");
            return -1;
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail(p, at, "lone low surrogate \\u%04x", (unsigned)cp);
            return -1;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (p->len - p->pos < 6 || s[p->pos] != '\\' ||
                s[p->pos + 1] != 'u' || hex4(s + p->pos + 2, &lo) != 0 ||
                lo < 0xDC00 || lo > 0xDFFF) {
                fail(p, at, "lone high surrogate \\u%04x", (unsigned)cp);
                return -1;
            }
            p->pos += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (utf8_put(&p->str, cp) != FO_OK) {
            fail_nomem(p);
            return -1;
        }
        return 0;
    default:
        fail(p, at, "invalid escape \\%s", byte_desc(s[at + 1], d));
        return -1;
    }
    p->pos += 2;
    if (fo_buf_putc(&p->str, c) != FO_OK) {
        fail_nomem(p);
        return -1;
    }
    return 0;
}

/* Decodes the string literal at p->pos (its opening quote) into p->str,
 * leaving p->pos after the closing quote. */
static int parse_string(struct parser *p)
{
    const unsigned char *s = p->s;
    size_t start = p->pos;

    fo_buf_reset(&p->str);
    p->pos++;
    for (;;) {
        size_t run = p->pos;
        while (p->pos < p->len) {
            unsigned char c = s[p->pos];
            if (c == '"' || c == '\\' || c < 0x20)
                break;
            if (c < 0x80) {
                p->pos++;
                continue;
            }
            size_t n = utf8_seq(s + p->pos, p->len - p->pos, NULL);
            if (n == 0) {
                fail(p, p->pos, "invalid UTF-8 in string");
                return -1;
            }
            p->pos += n;
        }
        if (p->pos > run &&
            fo_buf_append(&p->str, s + run, p->pos - run) != FO_OK) {
            fail_nomem(p);
            return -1;
        }
        if (p->pos >= p->len) {
            fail(p, start, "unterminated string");
            return -1;
        }
        unsigned char c = s[p->pos];
        if (c == '"') {
            p->pos++;
            return 0;
        }
        if (c < 0x20) {
            fail(p, p->pos, "raw control character 0x%02x in string", c);
            return -1;
        }
        if (parse_escape(p) != 0)
            return -1;
    }
}

static const char *str_data(const struct parser *p)
{
    return p->str.data ? p->str.data : "";
}

static cJSON *parse_number(struct parser *p)
{
    const unsigned char *s = p->s;
    size_t start = p->pos, i = p->pos, n = p->len;
    char small[64];
    char *text = small;
    char *end;
    double d;

    if (s[i] == '-') {
        i++;
        if (i < n && s[i] == 'I') {
            fail(p, start, "-Infinity is not allowed");
            return NULL;
        }
        if (i >= n || !is_digit(s[i])) {
            fail(p, start, "digit expected after '-'");
            return NULL;
        }
    }
    if (s[i] == '0') {
        i++;
        if (i < n && is_digit(s[i])) {
            fail(p, start, "leading zero");
            return NULL;
        }
    } else {
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || !is_digit(s[i])) {
            fail(p, start, "digit expected after the decimal point");
            return NULL;
        }
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= n || !is_digit(s[i])) {
            fail(p, start, "digit expected in the exponent");
            return NULL;
        }
        while (i < n && is_digit(s[i]))
            i++;
    }

    /* The text is validated; strtod needs it NUL-terminated. */
    size_t tlen = i - start;
    if (tlen >= sizeof(small)) {
        text = malloc(tlen + 1);
        if (!text) {
            fail_nomem(p);
            return NULL;
        }
    }
    memcpy(text, s + start, tlen);
    text[tlen] = '\0';
    d = strtod(text, &end);
    int whole = end == text + tlen;
    if (text != small)
        free(text);
    if (!whole) {
        fail(p, start, "malformed number");
        return NULL;
    }
    if (!isfinite(d)) {
        fail(p, start, "number out of range");
        return NULL;
    }
    p->pos = i;
    cJSON *v = cJSON_CreateNumber(d);
    if (v && (p->flags & FO_JSON_NUMBER_TEXT)) {
        /* cJSON_Delete frees valuestring whatever the type */
        v->valuestring = malloc(tlen + 1);
        if (v->valuestring) {
            memcpy(v->valuestring, s + start, tlen);
            v->valuestring[tlen] = '\0';
        } else {
            cJSON_Delete(v);
            v = NULL;
        }
    }
    if (!v)
        fail_nomem(p);
    return v;
}

static cJSON *parse_literal(struct parser *p, const char *word, int type)
{
    if (!starts_with(p, p->pos, word)) {
        fail(p, p->pos, "invalid literal (expected %s)", word);
        return NULL;
    }
    p->pos += strlen(word);
    cJSON *v = type == cJSON_True    ? cJSON_CreateTrue()
               : type == cJSON_False ? cJSON_CreateFalse()
                                     : cJSON_CreateNull();
    if (!v)
        fail_nomem(p);
    return v;
}

/* Links item after *tail in parent, keeping cJSON's invariant that the
 * first child's prev points to the last one; O(1) per member. */
static void link_child(cJSON *parent, cJSON **tail, cJSON *item)
{
    if (!*tail) {
        parent->child = item;
    } else {
        (*tail)->next = item;
        item->prev = *tail;
    }
    parent->child->prev = item;
    *tail = item;
}

static cJSON *parse_value(struct parser *p, int depth);

static cJSON *parse_array(struct parser *p, int depth)
{
    cJSON *arr, *tail = NULL;

    if (depth > FO_JSON_MAX_DEPTH) {
        fail(p, p->pos, "nesting deeper than %d levels", FO_JSON_MAX_DEPTH);
        return NULL;
    }
    arr = cJSON_CreateArray();
    if (!arr) {
        fail_nomem(p);
        return NULL;
    }
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        return arr;
    }
    for (;;) {
        cJSON *item = parse_value(p, depth);
        if (!item)
            goto bad;
        link_child(arr, &tail, item);
        skip_ws(p);
        if (p->pos >= p->len) {
            fail(p, p->pos, "unexpected end of input in array");
            goto bad;
        }
        if (p->s[p->pos] == ']') {
            p->pos++;
            return arr;
        }
        if (p->s[p->pos] != ',') {
            fail(p, p->pos, "expected ',' or ']' in array");
            goto bad;
        }
        p->pos++;
    }
bad:
    cJSON_Delete(arr);
    return NULL;
}

static int cmp_key_ref(const void *a, const void *b)
{
    const struct key_ref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, n);

    if (c != 0)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Checks the keys pushed since base (one object's members) for duplicates,
 * reporting the first duplicate in document order. */
static int check_dup_keys(struct parser *p, size_t base)
{
    struct key_ref *k = p->keys + base;
    size_t n = p->nkeys - base;
    size_t dup = 0;
    int found = 0;

    if (n < 2)
        return 0;
    qsort(k, n, sizeof(*k), cmp_key_ref);
    for (size_t i = 1; i < n; i++) {
        if (k[i].len != k[i - 1].len ||
            memcmp(k[i].key, k[i - 1].key, k[i].len) != 0)
            continue;
        if (!found || k[i].off < k[dup].off)
            dup = i;
        found = 1;
    }
    if (found) {
        char name[48];
        key_for_msg(k[dup].key, k[dup].len, name);
        fail(p, k[dup].off, "duplicate key \"%s\"", name);
        return -1;
    }
    return 0;
}

static int push_key(struct parser *p, const char *key, size_t len, size_t off)
{
    if (p->nkeys == p->capkeys) {
        size_t cap = p->capkeys ? p->capkeys * 2 : 64;
        struct key_ref *k = realloc(p->keys, cap * sizeof(*k));
        if (!k) {
            fail_nomem(p);
            return -1;
        }
        p->keys = k;
        p->capkeys = cap;
    }
    p->keys[p->nkeys].key = key;
    p->keys[p->nkeys].len = len;
    p->keys[p->nkeys].off = off;
    p->nkeys++;
    return 0;
}

static cJSON *parse_object(struct parser *p, int depth)
{
    size_t base = p->nkeys;
    cJSON *obj, *tail = NULL;

    if (depth > FO_JSON_MAX_DEPTH) {
        fail(p, p->pos, "nesting deeper than %d levels", FO_JSON_MAX_DEPTH);
        return NULL;
    }
    obj = cJSON_CreateObject();
    if (!obj) {
        fail_nomem(p);
        return NULL;
    }
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        return obj;
    }
    for (;;) {
        skip_ws(p);
        if (p->pos >= p->len) {
            fail(p, p->pos, "unexpected end of input in object");
            goto bad;
        }
        if (p->s[p->pos] != '"') {
            fail(p, p->pos, "expected a string key in object");
            goto bad;
        }
        size_t koff = p->pos;
        if (parse_string(p) != 0)
            goto bad;
        size_t klen = p->str.len;
        char *key = cJSON_malloc(klen + 1);
        if (!key) {
            fail_nomem(p);
            goto bad;
        }
        memcpy(key, str_data(p), klen + 1);
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':') {
            cJSON_free(key);
            fail(p, p->pos, "expected ':' after object key");
            goto bad;
        }
        p->pos++;
        cJSON *item = parse_value(p, depth);
        if (!item) {
            cJSON_free(key);
            goto bad;
        }
        item->string = key;
        link_child(obj, &tail, item);
        if (push_key(p, key, klen, koff) != 0)
            goto bad;
        skip_ws(p);
        if (p->pos >= p->len) {
            fail(p, p->pos, "unexpected end of input in object");
            goto bad;
        }
        if (p->s[p->pos] == '}') {
            p->pos++;
            break;
        }
        if (p->s[p->pos] != ',') {
            fail(p, p->pos, "expected ',' or '}' in object");
            goto bad;
        }
        p->pos++;
    }
    if (check_dup_keys(p, base) != 0)
        goto bad;
    p->nkeys = base;
    return obj;
bad:
    p->nkeys = base;
    cJSON_Delete(obj);
    return NULL;
}

/* depth counts the arrays and objects around the value; the recursion is
 * bounded because containers deeper than FO_JSON_MAX_DEPTH are refused
 * before anything inside them is read. */
static cJSON *parse_value(struct parser *p, int depth)
{
    cJSON *v;

    skip_ws(p);
    if (p->pos >= p->len) {
        fail(p, p->pos, "unexpected end of input");
        return NULL;
    }
    switch (p->s[p->pos]) {
    case '{':
        return parse_object(p, depth + 1);
    case '[':
        return parse_array(p, depth + 1);
    case '"':
        if (parse_string(p) != 0)
            return NULL;
        v = cJSON_CreateString(str_data(p));
        if (!v)
            fail_nomem(p);
        return v;
    case 't':
        return parse_literal(p, "true", cJSON_True);
    case 'f':
        return parse_literal(p, "false", cJSON_False);
    case 'n':
        return parse_literal(p, "null", cJSON_NULL);
    case '-':
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9':
        return parse_number(p);
    default:
        fail_unexpected(p);
        return NULL;
    }
}

int fo_json_parse(const char *text, size_t len, cJSON **out, struct fo_err *err)
{
    return fo_json_parse_flags(text, len, 0, out, err);
}

int fo_json_parse_flags(const char *text, size_t len, unsigned flags,
                        cJSON **out, struct fo_err *err)
{
    struct parser p = {0};
    cJSON *v = NULL;
    int rc;

    if (!text && len)
        return fo_err_set(err, FO_E_INVALID, "fo_json_parse: NULL text");
    p.s = (const unsigned char *)text;
    p.len = len;
    p.err = err;
    p.flags = flags;
    fo_buf_init(&p.str, FO_BUF_UNLIMITED);

    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        fail(&p, 0, "byte order mark (BOM) is not allowed");
        rc = p.rc;
        goto out;
    }
    skip_ws(&p);
    if (p.pos >= len) {
        fail(&p, p.pos, "empty input");
        rc = p.rc;
        goto out;
    }
    v = parse_value(&p, 0);
    if (!v) {
        rc = p.rc;
        goto out;
    }
    skip_ws(&p);
    if (p.pos != len) {
        char d[8];
        fail(&p, p.pos, "trailing characters after the value (%s)",
             byte_desc(p.s[p.pos], d));
        rc = p.rc;
        cJSON_Delete(v);
        goto out;
    }
    *out = v;
    rc = FO_OK;
out:
    fo_buf_release(&p.str);
    free(p.keys);
    return rc;
}

/* --------------------------------------------------------------- writer */

/* Appends the string literal, leaving whatever was appended on failure. */
static int put_string(struct fo_buf *b, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run;
    int rc;

    if ((rc = fo_buf_putc(b, '"')) != FO_OK)
        return rc;
    while (i < len) {
        run = i;
        while (i < len) {
            unsigned char c = u[i];
            if (c < 0x20 || c == '"' || c == '\\')
                break;
            if (c < 0x80) {
                i++;
                continue;
            }
            size_t n = utf8_seq(u + i, len - i, NULL);
            if (n == 0)
                return FO_E_JSON;
            i += n;
        }
        if (i > run && (rc = fo_buf_append(b, s + run, i - run)) != FO_OK)
            return rc;
        if (i == len)
            break;

        unsigned char c = u[i++];
        char esc[8];
        switch (c) {
        case 0:
            return FO_E_JSON;
        case '"':
            rc = fo_buf_append(b, "\\\"", 2);
            break;
        case '\\':
            rc = fo_buf_append(b, "\\\\", 2);
            break;
        case '\b':
            rc = fo_buf_append(b, "\\b", 2);
            break;
        case '\f':
            rc = fo_buf_append(b, "\\f", 2);
            break;
        case '\n':
            rc = fo_buf_append(b, "\\n", 2);
            break;
        case '\r':
            rc = fo_buf_append(b, "\\r", 2);
            break;
        case '\t':
            rc = fo_buf_append(b, "\\t", 2);
            break;
        default:
            snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)c);
            rc = fo_buf_append(b, esc, 6);
            break;
        }
        if (rc != FO_OK)
            return rc;
    }
    return fo_buf_putc(b, '"');
}

int fo_json_string(const char *s, size_t len, struct fo_buf *out)
{
    size_t start = out->len;
    int rc = put_string(out, s, len);

    if (rc != FO_OK) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
    }
    return rc;
}

/* UTF-16 order of one code point: BMP code points below the surrogates
 * first, then everything beyond the BMP (written as surrogates D800..DFFF),
 * then U+E000..U+FFFF. */
static uint32_t utf16_weight(uint32_t cp)
{
    if (cp >= 0x10000)
        return 0xD800 + (cp - 0x10000);
    if (cp >= 0xE000)
        return cp + 0x100000;
    return cp;
}

/* Compares two valid UTF-8 strings by their UTF-16 code units (RFC 8785
 * 3.2.3). Byte order equals code point order, so only the first differing
 * code point needs a closer look. */
static int utf16_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    const unsigned char *x = (const unsigned char *)a;
    const unsigned char *y = (const unsigned char *)b;
    size_t n = alen < blen ? alen : blen, i = 0;
    uint32_t ca = 0, cb = 0;

    while (i < n && x[i] == y[i])
        i++;
    if (i == n)
        return alen < blen ? -1 : alen > blen;
    /* Both differ inside the same character: back up to its first byte. */
    while (i > 0 && (x[i] & 0xC0) == 0x80)
        i--;
    utf8_seq(x + i, alen - i, &ca);
    utf8_seq(y + i, blen - i, &cb);
    return utf16_weight(ca) < utf16_weight(cb) ? -1 : 1;
}

struct member {
    const char *key;
    size_t len;
    const cJSON *item;
};

static int cmp_member(const void *a, const void *b)
{
    const struct member *x = a, *y = b;

    return utf16_cmp(x->key, x->len, y->key, y->len);
}

struct writer {
    unsigned flags;
    struct fo_buf *out;
    struct fo_err *err;
};

static int wfail(struct writer *w, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int wfail(struct writer *w, int code, const char *fmt, ...)
{
    char msg[FO_ERR_MSG_MAX];
    va_list ap;

    if (code != FO_E_JSON)
        return fo_err_set(w->err, code, NULL);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return fo_err_set(w->err, code, "cannot write JSON: %s", msg);
}

static int put(struct writer *w, const char *s, size_t n)
{
    int rc = fo_buf_append(w->out, s, n);

    return rc == FO_OK ? rc : wfail(w, rc, NULL);
}

/* In pretty mode, a newline and two spaces per level. */
static int newline(struct writer *w, int level)
{
    static const char spaces[] = "                                ";
    size_t n = (size_t)level * 2;
    int rc;

    if (!(w->flags & FO_JSON_PRETTY))
        return FO_OK;
    if ((rc = put(w, "\n", 1)) != FO_OK)
        return rc;
    while (n > 0) {
        size_t k = n < sizeof(spaces) - 1 ? n : sizeof(spaces) - 1;
        if ((rc = put(w, spaces, k)) != FO_OK)
            return rc;
        n -= k;
    }
    return FO_OK;
}

static int write_str(struct writer *w, const char *s, size_t len,
                     const char *what)
{
    int rc = put_string(w->out, s, len);

    if (rc == FO_E_JSON)
        return wfail(w, rc, "invalid UTF-8 in %s", what);
    return rc == FO_OK ? rc : wfail(w, rc, NULL);
}

static int write_value(struct writer *w, const cJSON *v, int depth);

static int write_array(struct writer *w, const cJSON *v, int depth)
{
    const cJSON *c;
    int rc;

    if ((rc = put(w, "[", 1)) != FO_OK)
        return rc;
    for (c = v->child; c; c = c->next) {
        if (c != v->child && (rc = put(w, ",", 1)) != FO_OK)
            return rc;
        if ((rc = newline(w, depth + 1)) != FO_OK ||
            (rc = write_value(w, c, depth + 1)) != FO_OK)
            return rc;
    }
    if (v->child && (rc = newline(w, depth)) != FO_OK)
        return rc;
    return put(w, "]", 1);
}

static int write_object(struct writer *w, const cJSON *v, int depth)
{
    struct member small[16];
    struct member *m = small;
    size_t n = 0, i;
    const cJSON *c;
    int rc;

    for (c = v->child; c; c = c->next)
        n++;
    if (n > sizeof(small) / sizeof(small[0])) {
        m = malloc(n * sizeof(*m));
        if (!m)
            return wfail(w, FO_E_NOMEM, NULL);
    }
    for (c = v->child, i = 0; c; c = c->next, i++) {
        if (!c->string) {
            rc = wfail(w, FO_E_JSON, "object member without a key");
            goto out;
        }
        m[i].key = c->string;
        m[i].len = strlen(c->string);
        m[i].item = c;
        if (!fo_utf8_valid(m[i].key, m[i].len)) {
            rc = wfail(w, FO_E_JSON, "invalid UTF-8 in an object key");
            goto out;
        }
    }
    if (n > 1)
        qsort(m, n, sizeof(*m), cmp_member);
    for (i = 1; i < n; i++) {
        if (m[i].len == m[i - 1].len &&
            memcmp(m[i].key, m[i - 1].key, m[i].len) == 0) {
            char name[48];
            key_for_msg(m[i].key, m[i].len, name);
            rc = wfail(w, FO_E_JSON, "duplicate key \"%s\"", name);
            goto out;
        }
    }

    if ((rc = put(w, "{", 1)) != FO_OK)
        goto out;
    for (i = 0; i < n; i++) {
        if (i > 0 && (rc = put(w, ",", 1)) != FO_OK)
            goto out;
        if ((rc = newline(w, depth + 1)) != FO_OK ||
            (rc = write_str(w, m[i].key, m[i].len, "an object key")) != FO_OK)
            goto out;
        if (w->flags & FO_JSON_PRETTY)
            rc = put(w, ": ", 2);
        else
            rc = put(w, ":", 1);
        if (rc != FO_OK || (rc = write_value(w, m[i].item, depth + 1)) != FO_OK)
            goto out;
    }
    if (n > 0 && (rc = newline(w, depth)) != FO_OK)
        goto out;
    rc = put(w, "}", 1);
out:
    if (m != small)
        free(m);
    return rc;
}

/* depth counts the arrays and objects around v. */
static int write_value(struct writer *w, const cJSON *v, int depth)
{
    char num[FO_JSON_NUM_MAX];
    int n;

    switch (v->type & 0xFF) {
    case cJSON_False:
        return put(w, "false", 5);
    case cJSON_True:
        return put(w, "true", 4);
    case cJSON_NULL:
        return put(w, "null", 4);
    case cJSON_Number:
        n = fo_json_number(v->valuedouble, num);
        if (n < 0)
            return wfail(w, FO_E_JSON, "non-finite number");
        return put(w, num, (size_t)n);
    case cJSON_String:
        if (!v->valuestring)
            return wfail(w, FO_E_JSON, "string node without a value");
        return write_str(w, v->valuestring, strlen(v->valuestring), "a string");
    case cJSON_Array:
    case cJSON_Object:
        if (depth + 1 > FO_JSON_MAX_DEPTH)
            return wfail(w, FO_E_JSON, "nesting deeper than %d levels",
                         FO_JSON_MAX_DEPTH);
        if ((v->type & 0xFF) == cJSON_Array)
            return write_array(w, v, depth);
        return write_object(w, v, depth);
    case cJSON_Raw:
        if ((w->flags & FO_JSON_WRITE_RAW) && v->valuestring)
            return put(w, v->valuestring, strlen(v->valuestring));
        return wfail(w, FO_E_JSON, "raw JSON node cannot be written");
    default:
        return wfail(w, FO_E_JSON, "invalid node type %d", v->type & 0xFF);
    }
}

int fo_json_write(const cJSON *v, unsigned flags, struct fo_buf *out,
                  struct fo_err *err)
{
    struct writer w = {flags, out, err};

    if (!v)
        return fo_err_set(err, FO_E_INVALID, "fo_json_write: NULL value");
    return write_value(&w, v, 0);
}

int fo_json_canon(const cJSON *v, struct fo_buf *out, struct fo_err *err)
{
    return fo_json_write(v, 0, out, err);
}

/* -------------------------------------------------------------- numbers */

/* Decimal digits and exponent of a double: value = 0.d1d2...dk * 10^n,
 * as in ECMAScript Number::toString. */
struct decimal {
    char dig[24];
    int k;
    int n;
};

/* Formats |d| with p significant digits, correctly rounded, into dec. */
static void decimal_of(double d, int p, struct decimal *dec)
{
    char sci[48];
    const char *s = sci;

    snprintf(sci, sizeof(sci), "%.*e", p - 1, fabs(d));
    dec->k = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            dec->dig[dec->k++] = *s;
    dec->n = (int)strtol(s + 1, NULL, 10) + 1;
}

/* The next larger number with the same count of digits. */
static void decimal_next_up(struct decimal *dec)
{
    int i = dec->k - 1;

    while (i >= 0 && dec->dig[i] == '9')
        dec->dig[i--] = '0';
    if (i >= 0) {
        dec->dig[i]++;
    } else {
        dec->dig[0] = '1'; /* 99..9 -> 100..0: one more place */
        dec->n++;
    }
}

static double decimal_value(const struct decimal *dec)
{
    char text[48];

    snprintf(text, sizeof(text), "0.%.*se%d", dec->k, dec->dig, dec->n);
    return strtod(text, NULL);
}

/* Finds a decimal with p digits that reads back as |d|, the closest one when
 * two do. A p-digit value that reads back exists for every p from the
 * shortest up, so the caller may bisect. */
static int decimal_try(double d, int p, struct decimal *dec)
{
    double ad = fabs(d), near;
    uint64_t bits;

    decimal_of(d, p, dec);
    near = decimal_value(dec);
    if (near == ad)
        return 1;
    /* At a power of two the gap to the next double down is half the gap up,
     * so a farther decimal above may read back when the nearest, below, does
     * not (2^803 is 5.334411546303884e+241, not ...883e+241). */
    memcpy(&bits, &ad, sizeof(bits));
    if ((bits & 0x000FFFFFFFFFFFFFull) != 0 || (bits >> 52) <= 1 || near > ad)
        return 0;
    decimal_next_up(dec);
    return decimal_value(dec) == ad;
}

int fo_json_number(double d, char out[FO_JSON_NUM_MAX])
{
    struct decimal dec;
    size_t o = 0;
    int lo = 1, hi = 17, i;

    if (!isfinite(d))
        return -1;
    if (d == 0) { /* and -0 */
        out[0] = '0';
        out[1] = '\0';
        return 1;
    }
    /* Integers are the common case (seqs, timestamps): exact below 2^53. */
    if (fabs(d) < 9007199254740992.0 && d == trunc(d))
        return snprintf(out, FO_JSON_NUM_MAX, "%lld", (long long)d);

    /* Shortest round-trip digits by bisection; 17 always suffice. dec holds
     * the answer for hi once a try has succeeded. */
    int found = 0;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        struct decimal t;
        if (decimal_try(d, mid, &t)) {
            hi = mid;
            dec = t;
            found = 1;
        } else {
            lo = mid + 1;
        }
    }
    if (!found)
        decimal_of(d, 17, &dec);
    while (dec.k > 1 && dec.dig[dec.k - 1] == '0')
        dec.k--;

    int k = dec.k, n = dec.n;
    if (d < 0)
        out[o++] = '-';
    if (k <= n && n <= 21) {
        memcpy(out + o, dec.dig, (size_t)k);
        o += (size_t)k;
        for (i = 0; i < n - k; i++)
            out[o++] = '0';
    } else if (0 < n && n <= 21) {
        memcpy(out + o, dec.dig, (size_t)n);
        o += (size_t)n;
        out[o++] = '.';
        memcpy(out + o, dec.dig + n, (size_t)(k - n));
        o += (size_t)(k - n);
    } else if (-6 < n && n <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (i = 0; i < -n; i++)
            out[o++] = '0';
        memcpy(out + o, dec.dig, (size_t)k);
        o += (size_t)k;
    } else {
        out[o++] = dec.dig[0];
        if (k > 1) {
            out[o++] = '.';
            memcpy(out + o, dec.dig + 1, (size_t)(k - 1));
            o += (size_t)(k - 1);
        }
        int r = snprintf(out + o, FO_JSON_NUM_MAX - o, "e%c%d",
                         n - 1 < 0 ? '-' : '+', abs(n - 1));
        o += (size_t)r;
    }
    out[o] = '\0';
    return (int)o;
}

/* ---------------------------------------------------------- tree helpers */

cJSON *fo_json_add_int(cJSON *obj, const char *key, long long v)
{
    cJSON *n;

    if (!obj || !key)
        return NULL;
    n = cJSON_CreateNumber((double)v);
    if (!n)
        return NULL;
    if (!cJSON_AddItemToObject(obj, key, n)) {
        cJSON_Delete(n);
        return NULL;
    }
    return n;
}

int fo_json_get_int(const cJSON *obj, const char *key, long long min,
                    long long max, long long *out)
{
    const cJSON *v;
    double d;
    long long x;

    if (!obj || !key)
        return FO_E_INVALID;
    v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return FO_E_NOT_FOUND;
    if (!cJSON_IsNumber(v))
        return FO_E_INVALID;
    d = v->valuedouble;
    /* 2^63 is exact as a double; anything outside [-2^63, 2^63) would make
     * the conversion undefined. */
    if (!isfinite(d) || d != trunc(d) || d < -9223372036854775808.0 ||
        d >= 9223372036854775808.0)
        return FO_E_INVALID;
    x = (long long)d;
    if (x < min || x > max)
        return FO_E_INVALID;
    *out = x;
    return FO_OK;
}

int fo_json_only_keys(const cJSON *obj, const char *const *keys, size_t n,
                      struct fo_err *err)
{
    const cJSON *m;
    cJSON_ArrayForEach (m, obj) {
        size_t i = 0;
        while (i < n && strcmp(m->string, keys[i]) != 0)
            i++;
        if (i == n) {
            char name[48];
            key_for_msg(m->string, strlen(m->string), name);
            return fo_err_set(err, FO_E_INVALID, "unknown field \"%s\"", name);
        }
    }
    return FO_OK;
}

void fo_json_drop_number_text(cJSON *v)
{
    if (!v)
        return;
    if (cJSON_IsNumber(v)) {
        free(v->valuestring);
        v->valuestring = NULL;
    }
    cJSON *c;
    cJSON_ArrayForEach (c, v)
        fo_json_drop_number_text(c);
}
