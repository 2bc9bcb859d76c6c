/* orch_guard: secret and personal-data scanning (orch_guard.h). */
#include "daemon/orch_guard.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/orch_types_int.h"
#include "ledger/fo_err.h"
#include "ledger/fo_json.h"

int orch_guard_add_secret(struct orch_guard *g, const char *value)
{
    if (!value || strlen(value) < ORCH_GUARD_SECRET_MIN)
        return FO_OK;
    for (size_t i = 0; i < g->n; i++)
        if (!strcmp(g->secrets[i], value))
            return FO_OK;
    if (g->n == ORCH_GUARD_SECRETS_MAX)
        return FO_E_TOO_LARGE;
    char *c = orch_strdup(value);
    if (!c)
        return FO_E_NOMEM;
    g->secrets[g->n++] = c;
    return FO_OK;
}

int orch_guard_add_env(struct orch_guard *g, const char *name)
{
    return name ? orch_guard_add_secret(g, getenv(name)) : FO_OK;
}

void orch_guard_release(struct orch_guard *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->secrets[i]);
    g->n = 0;
}

/* ---- matchers: each says how many bytes at s[i] are a finding ---------- */

struct span {
    size_t at, len;
    const char *kind;
};

static int word(unsigned char c)
{
    return isalnum(c) || c == '_' || c == '-';
}

static size_t run_of(const char *s, size_t len, size_t i, const char *set)
{
    size_t n = 0;
    while (i + n < len &&
           (isalnum((unsigned char)s[i + n]) || strchr(set, s[i + n])) &&
           s[i + n])
        n++;
    return n;
}

/* A provider key: a known prefix and enough key characters. */
static size_t api_key(const char *s, size_t len, size_t i)
{
    static const struct {
        const char *prefix;
        size_t min;
        const char *extra;
    } k[] = {
        {"sk-", 20, "_-"},    {"AKIA", 16, ""},   {"ASIA", 16, ""},
        {"ghp_", 30, ""},     {"gho_", 30, ""},   {"ghs_", 30, ""},
        {"ghu_", 30, ""},     {"ghr_", 30, ""},   {"github_pat_", 30, "_"},
        {"xoxb-", 10, "-"},   {"xoxp-", 10, "-"}, {"xoxa-", 10, "-"},
        {"xoxr-", 10, "-"},   {"xoxs-", 10, "-"}, {"AIza", 30, "_-"},
        {"glpat-", 20, "_-"}, {"hf_", 30, ""},    {"sk_live_", 20, ""},
        {"rk_live_", 20, ""}, {"fk_", 48, ""}, /* forum's client keys */
    };
    /* the scan asks at every byte: the prefixes' first letters first (every
     * prefix of k[] starts with one of these: keep them in step) */
    if (!s[i] || !strchr("sAgxhrf", s[i]) ||
        (i > 0 && word((unsigned char)s[i - 1])))
        return 0;
    for (size_t j = 0; j < sizeof(k) / sizeof(k[0]); j++) {
        if (s[i] != k[j].prefix[0])
            continue;
        size_t pl = strlen(k[j].prefix);
        if (i + pl > len || memcmp(s + i, k[j].prefix, pl))
            continue;
        size_t n = run_of(s, len, i + pl, k[j].extra);
        if (n >= k[j].min)
            return pl + n;
    }
    return 0;
}

static size_t private_key(const char *s, size_t len, size_t i)
{
    static const char begin[] = "-----BEGIN ";
    if (s[i] != '-' || i + sizeof(begin) - 1 > len ||
        memcmp(s + i, begin, sizeof(begin) - 1))
        return 0;
    const char *eol = memchr(s + i, '\n', len - i);
    size_t hl = eol ? (size_t)(eol - (s + i)) : len - i;
    const char *pk = NULL;
    for (size_t p = i; p + 16 <= i + hl; p++)
        if (!memcmp(s + p, "PRIVATE KEY-----", 16) ||
            (p + 22 <= i + hl &&
             !memcmp(s + p, "PRIVATE KEY BLOCK-----", 22))) { /* PGP */
            pk = s + p;
            break;
        }
    if (!pk)
        return 0;
    for (size_t p = i + hl; p + 9 <= len; p++)
        if (!memcmp(s + p, "-----END ", 9)) {
            const char *e = memchr(s + p + 9, '-', len - p - 9);
            size_t end = e ? (size_t)(e - s) : len;
            while (end < len && s[end] == '-')
                end++;
            return end - i;
        }
    return len - i; /* no end: all that follows is the key */
}

static size_t bearer(const char *s, size_t len, size_t i)
{
    if ((s[i] | 0x20) != 'b' || i + 7 > len ||
        strncasecmp(s + i, "bearer ", 7) ||
        (i > 0 && word((unsigned char)s[i - 1])))
        return 0;
    size_t n = run_of(s, len, i + 7, "._~+/=-");
    return n >= 16 ? 7 + n : 0;
}

static int local_char(unsigned char c)
{
    return isalnum(c) || (c && strchr("._%+-", c));
}

/* An email address whose @ is at s[at]; *start is where it begins. */
static size_t email(const char *s, size_t len, size_t at, size_t *start)
{
    if (s[at] != '@')
        return 0;
    size_t b = at;
    while (b > 0 && local_char((unsigned char)s[b - 1]))
        b--;
    if (b == at)
        return 0;
    size_t e = at + 1, dot = 0;
    while (e < len &&
           (isalnum((unsigned char)s[e]) || s[e] == '-' ||
            (s[e] == '.' && e + 1 < len && isalnum((unsigned char)s[e + 1])))) {
        if (s[e] == '.')
            dot = e;
        e++;
    }
    if (!dot || e - dot - 1 < 2)
        return 0;
    for (size_t p = dot + 1; p < e; p++)
        if (!isalpha((unsigned char)s[p]))
            return 0;
    *start = b;
    return e - b;
}

static int luhn(const char *digits, size_t n)
{
    int sum = 0;
    for (size_t k = 0; k < n; k++) {
        int d = digits[n - 1 - k] - '0';
        if (k % 2 == 1) {
            d *= 2;
            if (d > 9)
                d -= 9;
        }
        sum += d;
    }
    return sum % 10 == 0;
}

/* The issuer prefixes of the common card networks (Visa, Mastercard,
 * American Express, Discover, JCB, Diners): a 13-digit millisecond time
 * or a long id that happens to pass Luhn is not taken for a card. */
static int card_prefix(const char *d)
{
    int two = (d[0] - '0') * 10 + (d[1] - '0');
    int four = two * 100 + (d[2] - '0') * 10 + (d[3] - '0');
    return d[0] == '4' || (two >= 51 && two <= 55) ||
           (four >= 2221 && four <= 2720) || two == 34 || two == 37 ||
           four == 6011 || two == 65 || two == 35 || two == 36 ||
           (two == 30 && d[2] <= '5');
}

/* A card number or a phone number starting at s[i]. */
static size_t number(const char *s, size_t len, size_t i, const char **kind)
{
    if (i > 0 && (isalnum((unsigned char)s[i - 1]) || s[i - 1] == '.' ||
                  s[i - 1] == '+' || s[i - 1] == '/' || s[i - 1] == ':'))
        return 0;
    size_t p = i;
    int plus = 0, paren = 0;
    if (s[p] == '+') {
        plus = 1;
        p++;
    } else if (s[p] == '(') {
        paren = 1;
        p++;
    }
    if (p >= len || !isdigit((unsigned char)s[p]))
        return 0;
    char digits[24];
    size_t nd = 0, groups = 1, end = p;
    while (end < len) {
        unsigned char c = (unsigned char)s[end];
        if (isdigit(c)) {
            if (nd == sizeof(digits))
                return 0;
            digits[nd++] = (char)c;
            end++;
            continue;
        }
        /* one separator between digits */
        if ((c == ' ' || c == '-' || c == ')') && end + 1 < len &&
            (isdigit((unsigned char)s[end + 1]) ||
             (c == ')' && s[end + 1] == ' ' && end + 2 < len &&
              isdigit((unsigned char)s[end + 2])))) {
            end += (c == ')' && s[end + 1] == ' ') ? 2 : 1;
            groups++;
            continue;
        }
        break;
    }
    if (end < len && (isalnum((unsigned char)s[end]) || s[end] == '@'))
        return 0;
    if (nd >= 13 && nd <= 19 && !plus && !paren && luhn(digits, nd) &&
        groups <= 5 && card_prefix(digits)) {
        *kind = "card_number";
        return end - i;
    }
    if (nd >= 10 && nd <= 15 && (plus || paren || groups >= 3) && groups <= 6) {
        *kind = "phone";
        return end - i;
    }
    return 0;
}

static int add_span(struct span **v, size_t *n, size_t *cap, size_t at,
                    size_t len, const char *kind)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        struct span *nv = realloc(*v, nc * sizeof(*nv));
        if (!nv)
            return -1;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = (struct span){at, len, kind};
    return 0;
}

static int note(cJSON **found, const char *kind, size_t at)
{
    if (!*found && !(*found = cJSON_CreateArray()))
        return -1;
    cJSON *k = NULL, *it;
    cJSON_ArrayForEach (it, *found) {
        const cJSON *kk = cJSON_GetObjectItemCaseSensitive(it, "kind");
        if (cJSON_IsString(kk) && !strcmp(kk->valuestring, kind))
            k = it;
    }
    if (!k) {
        k = cJSON_CreateObject();
        if (!k)
            return -1;
        cJSON_AddItemToArray(*found, k);
        if (!cJSON_AddStringToObject(k, "kind", kind) ||
            !fo_json_add_int(k, "count", 0) || !cJSON_AddArrayToObject(k, "at"))
            return -1;
    }
    cJSON *c = cJSON_GetObjectItemCaseSensitive(k, "count");
    cJSON_SetNumberValue(c, c->valuedouble + 1);
    cJSON *a = cJSON_GetObjectItemCaseSensitive(k, "at");
    if (cJSON_GetArraySize(a) < 16) {
        cJSON *o = cJSON_CreateNumber((double)at);
        if (!o)
            return -1;
        cJSON_AddItemToArray(a, o);
    }
    return 0;
}

long orch_guard_scan(const struct orch_guard *g, const char *s, size_t len,
                     struct fo_buf *out, cJSON **found)
{
    struct span *v = NULL;
    size_t n = 0, cap = 0;
    long count = -1;
    size_t i = 0;
    while (i < len) {
        size_t m = 0, start = i;
        const char *kind = NULL;
        for (size_t k = 0; g && k < g->n && !m; k++) {
            if (s[i] != g->secrets[k][0]) /* secrets are not empty */
                continue;
            size_t kl = strlen(g->secrets[k]);
            if (i + kl <= len && !memcmp(s + i, g->secrets[k], kl)) {
                m = kl;
                kind = "configured_secret";
            }
        }
        if (!m && (m = private_key(s, len, i)))
            kind = "private_key";
        if (!m && (m = api_key(s, len, i)))
            kind = "api_key";
        if (!m && (m = bearer(s, len, i)))
            kind = "bearer_token";
        if (!m && s[i] == '@' && (m = email(s, len, i, &start))) {
            kind = "email";
            /* the local part was copied as text already: take it back */
            while (n && v[n - 1].at >= start)
                n--;
        }
        if (!m && (isdigit((unsigned char)s[i]) || s[i] == '+' || s[i] == '('))
            m = number(s, len, i, &kind);
        if (m) {
            if (add_span(&v, &n, &cap, start, m, kind))
                goto out;
            i = start + m;
            continue;
        }
        /* skip the rest of a word, so a pattern never starts inside one */
        if (isalnum((unsigned char)s[i])) {
            size_t j = i + 1;
            while (j < len && isalnum((unsigned char)s[j]) && s[j] != '@')
                j++;
            /* a configured secret may start inside a word: then each byte
             * is looked at (an email's @ ends the word either way) */
            i = g && g->n ? i + 1 : j;
        } else {
            i++;
        }
    }
    count = 0;
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        if (v[k].at < at)
            continue; /* overlaps one replaced already */
        if (fo_buf_append(out, s + at, v[k].at - at) ||
            fo_buf_printf(out, "[redacted:%s]", v[k].kind) ||
            note(found, v[k].kind, v[k].at)) {
            count = -1;
            goto out;
        }
        at = v[k].at + v[k].len;
        count++;
    }
    if (fo_buf_append(out, s + at, len - at))
        count = -1;
out:
    free(v);
    return count;
}
