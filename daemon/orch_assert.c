/* orch_assert: done_when assertions a machine can check without a model
 * (contains, not_contains, regex, json, max_words, exit_code); plain-text
 * items are left for the validator. */
#include "daemon/orch_model.h"

#include <regex.h>
#include <string.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define QUOTE_MAX 80                    /* bytes of a string we repeat */
#define REGEX_INPUT_MAX (1024u * 1024u) /* bytes of output a regex sees */

void orch_verdict_release(struct orch_verdict *v)
{
    if (!v)
        return;
    cJSON_Delete(v->failed);
    cJSON_Delete(v->validator);
    v->failed = v->validator = NULL;
}

static int add_str(cJSON *arr, const char *s)
{
    cJSON *x = cJSON_CreateString(s);
    if (!x)
        return FO_E_NOMEM;
    cJSON_AddItemToArray(arr, x);
    return FO_OK;
}

/* "<what> \"<s, cut>\": <why>" added to the failures. */
static int fail(struct orch_verdict *v, const char *what, const char *s,
                const char *why)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    size_t n = strlen(s);
    size_t cut = n > QUOTE_MAX ? QUOTE_MAX : n;
    while (cut < n && cut > 0 && ((unsigned char)s[cut] & 0xc0) == 0x80)
        cut--; /* do not split a character */
    int rc = fo_buf_printf(&b, "%s ", what);
    if (!rc)
        rc = fo_json_string(s, cut, &b);
    if (!rc && cut < n)
        rc = fo_buf_puts(&b, "...");
    if (!rc)
        rc = fo_buf_printf(&b, ": %s", why);
    if (!rc)
        rc = add_str(v->failed, b.data);
    fo_buf_release(&b);
    v->pass = 0;
    return rc == FO_E_JSON ? FO_OK : rc;
}

static size_t count_words(const char *s, size_t len)
{
    size_t n = 0;
    int in = 0;
    for (size_t i = 0; i < len; i++) {
        int blank = s[i] == ' ' || s[i] == '\t' || s[i] == '\n' ||
                    s[i] == '\r' || s[i] == '\f' || s[i] == '\v';
        if (!blank && !in)
            n++;
        in = !blank;
    }
    return n;
}

static int check_regex(const char *where, const char *re, const char *output,
                       size_t len, struct orch_verdict *v, struct fo_err *err)
{
    if (strlen(re) > ORCH_REGEX_MAX)
        return fo_err_set(err, FO_E_INVALID, "%s: regex over %d bytes", where,
                          ORCH_REGEX_MAX);
    /* back-references (a glibc extension to ERE) can take exponential time */
    for (const char *p = re; *p; p++)
        if (p[0] == '\\' && p[1]) {
            if (p[1] >= '1' && p[1] <= '9')
                return fo_err_set(err, FO_E_INVALID,
                                  "%s: regex back-references are not allowed",
                                  where);
            p++;
        }
    regex_t rx;
    int e = regcomp(&rx, re, REG_EXTENDED | REG_NOSUB);
    if (e) {
        char msg[128];
        regerror(e, &rx, msg, sizeof(msg));
        return fo_err_set(err, FO_E_INVALID, "%s: regex does not compile: %s",
                          where, msg);
    }
    size_t n = len > REGEX_INPUT_MAX ? REGEX_INPUT_MAX : len;
    const char *nul = memchr(output, '\0', n);
    if (nul)
        n = (size_t)(nul - output);
    char *copy = malloc(n + 1);
    int rc = FO_OK;
    if (!copy) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    } else {
        memcpy(copy, output, n);
        copy[n] = '\0';
        if (regexec(&rx, copy, 0, NULL, 0) != 0)
            rc = fail(v, "regex", re, "no match in the output");
        if (rc)
            fo_err_set(err, rc, NULL);
    }
    free(copy);
    regfree(&rx);
    return rc;
}

static int check_item(const cJSON *it, size_t i, const char *output, size_t len,
                      int exit_code, struct orch_verdict *v, struct fo_err *err)
{
    char where[48];
    snprintf(where, sizeof(where), "done_when[%zu]", i);
    if (cJSON_IsString(it))
        return add_str(v->validator, it->valuestring)
                   ? fo_err_set(err, FO_E_NOMEM, NULL)
                   : FO_OK;
    if (!cJSON_IsObject(it) || cJSON_GetArraySize(it) != 1)
        return fo_err_set(err, FO_E_INVALID,
                          "%s: must be a string or an object with one of "
                          "contains, not_contains, regex, json, max_words, "
                          "exit_code",
                          where);
    const cJSON *a = it->child;
    const char *k = a->string;
    char buf[96];
    int rc = FO_OK;
    if (strcmp(k, "contains") == 0 || strcmp(k, "not_contains") == 0) {
        if (!cJSON_IsString(a) || !a->valuestring[0])
            return fo_err_set(err, FO_E_INVALID,
                              "%s: %s: must be a non-empty string", where, k);
        const char *s = a->valuestring;
        int found = memmem(output, len, s, strlen(s)) != NULL;
        if (k[0] == 'c' && !found)
            rc = fail(v, k, s, "not found in the output");
        else if (k[0] == 'n' && found)
            rc = fail(v, k, s, "found in the output");
    } else if (strcmp(k, "regex") == 0) {
        if (!cJSON_IsString(a))
            return fo_err_set(err, FO_E_INVALID, "%s: regex: must be a string",
                              where);
        return check_regex(where, a->valuestring, output, len, v, err);
    } else if (strcmp(k, "json") == 0) {
        if (!cJSON_IsBool(a))
            return fo_err_set(err, FO_E_INVALID, "%s: json: must be a boolean",
                              where);
        cJSON *j = NULL;
        struct fo_err je;
        int jrc = orch_json_extract(output, len, &j, &je);
        cJSON_Delete(j);
        if (jrc == FO_E_NOMEM)
            return fo_err_set(err, jrc, NULL);
        if (cJSON_IsTrue(a) && jrc != FO_OK) {
            struct fo_buf b;
            fo_buf_init(&b, FO_BUF_UNLIMITED);
            rc = fo_buf_printf(&b, "json true: %s", je.msg);
            if (!rc)
                rc = add_str(v->failed, b.data);
            fo_buf_release(&b);
            v->pass = 0;
        } else if (cJSON_IsFalse(a) && jrc == FO_OK) {
            rc = add_str(v->failed, "json false: the output holds a JSON "
                                    "object");
            v->pass = 0;
        }
    } else if (strcmp(k, "max_words") == 0 || strcmp(k, "exit_code") == 0) {
        long long n;
        int ew = k[0] == 'm';
        if (fo_json_get_int(it, k, ew ? 0 : -1, ew ? 1000000000LL : 255, &n))
            return fo_err_set(err, FO_E_INVALID,
                              "%s: %s: must be an integer %s", where, k,
                              ew ? ">= 0" : "-1..255");
        if (ew) {
            size_t w = count_words(output, len);
            if ((long long)w > n) {
                snprintf(buf, sizeof(buf),
                         "max_words %lld: the output has %zu words", n, w);
                rc = add_str(v->failed, buf);
                v->pass = 0;
            }
        } else if (exit_code != n) {
            snprintf(buf, sizeof(buf), "exit_code %lld: the exit code was %d",
                     n, exit_code);
            rc = add_str(v->failed, buf);
            v->pass = 0;
        }
    } else {
        return fo_err_set(err, FO_E_INVALID, "%s: unknown assertion \"%.32s\"",
                          where, k);
    }
    return rc ? fo_err_set(err, rc, NULL) : FO_OK;
}

int orch_assert_check(const cJSON *done_when, const char *output, size_t len,
                      int exit_code, struct orch_verdict *out,
                      struct fo_err *err)
{
    struct orch_verdict v = {.pass = 1,
                             .failed = cJSON_CreateArray(),
                             .validator = cJSON_CreateArray()};
    int rc = FO_OK;
    if (!v.failed || !v.validator) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    if (!output)
        output = "";
    if (done_when && !cJSON_IsNull(done_when)) {
        if (cJSON_IsArray(done_when)) {
            if (cJSON_GetArraySize(done_when) > ORCH_ASSERT_MAX) {
                rc = fo_err_set(err, FO_E_INVALID,
                                "done_when: more than %d items",
                                ORCH_ASSERT_MAX);
                goto out;
            }
            /* no criteria is not a pass (plans drop an empty list, so
             * a task without criteria is unjudged; this is the guard) */
            if (!done_when->child) {
                v.pass = 0;
                if (add_str(v.failed, "done_when: no criteria to pass")) {
                    rc = fo_err_set(err, FO_E_NOMEM, NULL);
                    goto out;
                }
            }
            size_t i = 0;
            const cJSON *it;
            cJSON_ArrayForEach (it, done_when) {
                rc = check_item(it, i++, output, len, exit_code, &v, err);
                if (rc)
                    goto out;
            }
        } else {
            rc = check_item(done_when, 0, output, len, exit_code, &v, err);
            if (rc)
                goto out;
        }
    }
    *out = v;
    v = (struct orch_verdict){0};
out:
    orch_verdict_release(&v);
    return rc;
}
