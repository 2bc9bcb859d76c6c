/* test_cli: the `forum` command run as a user runs it: bad input refused
 * before anything is written, damaged files refused untouched, the exit codes
 * of the four exit classes, --help everywhere, and --json output anyone can
 * recompute. */
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <sqlite3.h>

#include "cli/cli.h"
#include "ledger/fo_buf.h"
#include "ledger/ledger.h"
#include "tests/testutil.h"
#include "tests/tu_model.h"

#define ZERO_HASH                                                              \
    "0000000000000000000000000000000000000000000000000000000000000000"

/* ------------------------------------------------------------ helpers */

/* tu_forumv with stdin given as bytes and a length, so it may hold NUL. */
static struct tu_run run_in(const char *in, size_t in_len, const char *arg, ...)
{
    const char *argv[64];
    size_t n = 0;
    va_list ap;

    va_start(ap, arg);
    for (const char *a = arg; a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    return tu_forum(in, in_len, argv);
}

/* Runs `forum --ledger DIR PRE... ARGS...` (both NULL-terminated lists). */
static struct tu_run run_list(const char *dir, const char *in, size_t in_len,
                              const char *const *pre, const char *const *args)
{
    const char *argv[64];
    size_t n = 0;

    argv[n++] = "--ledger";
    argv[n++] = dir;
    for (size_t i = 0; pre && pre[i]; i++) {
        cr_assert_lt(n, 60);
        argv[n++] = pre[i];
    }
    for (size_t i = 0; args && args[i]; i++) {
        cr_assert_lt(n, 60);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    return tu_forum(in, in_len, argv);
}

static void path_in(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);

    cr_assert(n > 0 && (size_t)n < cap, "path too long: %s/%s", dir, name);
}

static int exists(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0;
}

static void must_contain(const char *hay, const char *needle, const char *what)
{
    cr_assert_not_null(strstr(hay, needle), "%s does not mention [%s]: [%s]",
                       what, needle, hay);
}

/* `forum ledger append --json` that must succeed; returns the entry. */
static cJSON *append_ok(const char *dir, const char *actor, const char *kind,
                        const char *payload)
{
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--json",
                  "--actor", actor, "--kind", kind, "--payload", payload, NULL);

    cr_assert_eq(r.status, 0, "append %s failed (%d): %s", payload, r.status,
                 r.err);
    cJSON *e = tu_run_json(&r);
    tu_run_free(&r);
    return e;
}

/* A fresh temp dir holding a ledger with N entries {"n":i}. */
static char *ledger_with(int n)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", NULL);

    cr_assert_eq(r.status, 0, "init failed (%d): %s", r.status, r.err);
    tu_run_free(&r);
    for (int i = 0; i < n; i++) {
        char payload[64];
        snprintf(payload, sizeof(payload), "{\"n\":%d}", i);
        cJSON_Delete(append_ok(dir, "alice", "note", payload));
    }
    return dir;
}

/* `ledger summary --json`: its text in *text (malloc'd), its entry count. */
static int64_t summary(const char *dir, char **text)
{
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "summary", "--json", NULL);

    cr_assert_eq(r.status, 0, "summary failed (%d): %s", r.status, r.err);
    cJSON *s = tu_run_json(&r);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "entries");
    cr_assert(cJSON_IsNumber(n), "summary has no entries: %s", r.out);
    int64_t count = (int64_t)n->valuedouble;
    cJSON_Delete(s);
    if (text)
        *text = strdup(r.out);
    tu_run_free(&r);
    return count;
}

/* The {"error","code"} object --json prints on stderr: the last stderr line
 * that is a JSON object. */
static cJSON *err_json(const struct tu_run *r)
{
    const char *last = NULL;

    for (const char *p = r->err; *p;) {
        if (*p == '{')
            last = p;
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        p = nl + 1;
    }
    cr_assert_not_null(last, "no JSON error object on stderr: [%s]", r->err);
    const char *end = strchr(last, '\n');
    size_t len = end ? (size_t)(end - last) : strlen(last);
    cJSON *v = cJSON_ParseWithLength(last, len);
    cr_assert_not_null(v, "stderr line is not JSON: [%.*s]", (int)len, last);
    cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(v, "error")),
              "no \"error\" string: [%.*s]", (int)len, last);
    cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(v, "code")),
              "no \"code\" string: [%.*s]", (int)len, last);
    return v;
}

static void expect_code(const struct tu_run *r, const char *code)
{
    cJSON *e = err_json(r);
    const char *got = cJSON_GetObjectItemCaseSensitive(e, "code")->valuestring;

    cr_assert_str_eq(got, code, "code %s, want %s; stderr: %s", got, code,
                     r->err);
    cJSON_Delete(e);
}

/* Runs `forum --ledger D ledger append --json ARGS...` (stdin IN) on a fresh
 * ledger of two entries and requires exit 2, NEEDLE on stderr, the --json
 * error CODE (NULL: "usage" or "invalid_input"), and the ledger exactly as
 * before. */
static void expect_append_refused(const char *in, size_t in_len,
                                  const char *needle, const char *code,
                                  const char *const *args)
{
    static const char *const pre[] = {"ledger", "append", "--json", NULL};
    char *dir = ledger_with(2);
    char *before = NULL, *after = NULL;

    cr_assert_eq(summary(dir, &before), 2);
    struct tu_run r = run_list(dir, in, in_len, pre, args);
    cr_assert_eq(r.status, 2, "exit %d, want 2; stdout [%s] stderr [%s]",
                 r.status, r.out, r.err);
    cr_assert_eq(r.out_len, 0, "stdout not empty on error: %s", r.out);
    must_contain(r.err, needle, "stderr");
    if (code) {
        expect_code(&r, code);
    } else {
        cJSON *e = err_json(&r);
        const char *got =
            cJSON_GetObjectItemCaseSensitive(e, "code")->valuestring;
        cr_assert(strcmp(got, "usage") == 0 ||
                      strcmp(got, "invalid_input") == 0,
                  "code %s, want usage or invalid_input", got);
        cJSON_Delete(e);
    }
    cr_assert_eq(summary(dir, &after), 2, "the refused append was written");
    cr_assert_str_eq(after, before, "the ledger changed");
    free(before);
    free(after);
    tu_run_free(&r);
    tu_rmrf(dir);
}

#define REFUSE_ARGS(needle, code, ...)                                         \
    expect_append_refused(NULL, 0, needle, code,                               \
                          (const char *const[]){__VA_ARGS__, NULL})

/* A payload given inline that must be refused as invalid JSON. */
static void refuse_payload(const char *payload, const char *needle)
{
    REFUSE_ARGS(needle, "invalid_json", "--actor", "a", "--kind", "k",
                "--payload", payload);
}

/* A payload given on stdin (`--payload -`) that must be refused. */
static void refuse_stdin(const char *in, size_t len, const char *needle,
                         const char *code)
{
    expect_append_refused(in, len, needle, code,
                          (const char *const[]){"--actor", "a", "--kind", "k",
                                                "--payload", "-", NULL});
}

/* N nested arrays: [[...[]...]] with N levels. */
static char *nested_arrays(int n)
{
    char *s = malloc((size_t)n * 2 + 1);

    cr_assert_not_null(s);
    memset(s, '[', (size_t)n);
    memset(s + n, ']', (size_t)n);
    s[2 * n] = '\0';
    return s;
}

/* {"x":"aaa..."} with N a's. */
static char *big_body(size_t n, size_t *len)
{
    static const char head[] = "{\"x\":\"", tail[] = "\"}";
    size_t total = sizeof(head) - 1 + n + sizeof(tail) - 1;
    char *s = malloc(total + 1);

    cr_assert_not_null(s);
    memcpy(s, head, sizeof(head) - 1);
    memset(s + sizeof(head) - 1, 'a', n);
    memcpy(s + sizeof(head) - 1 + n, tail, sizeof(tail));
    *len = total;
    return s;
}

static void sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;

    cr_assert_eq(EVP_Digest(data, len, md, &md_len, EVP_sha256(), NULL), 1);
    cr_assert_eq(md_len, 32);
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    char *msg = NULL;
    int rc = sqlite3_open_v2(path, &db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);

    cr_assert_eq(rc, SQLITE_OK, "open %s: %s", path, sqlite3_errmsg(db));
    rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    cr_assert_eq(sqlite3_close(db), SQLITE_OK);
}

/* ------------------------------------------------ a tiny JCS for entries */

struct sbuf {
    char *p;
    size_t n, cap;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* RFC 8785 string: only '"', '\\' and control characters are escaped. */
static void sb_string(struct sbuf *b, const char *s)
{
    sb_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        switch (*c) {
        case '"':
            sb_puts(b, "\\\"");
            break;
        case '\\':
            sb_puts(b, "\\\\");
            break;
        case '\b':
            sb_puts(b, "\\b");
            break;
        case '\f':
            sb_puts(b, "\\f");
            break;
        case '\n':
            sb_puts(b, "\\n");
            break;
        case '\r':
            sb_puts(b, "\\r");
            break;
        case '\t':
            sb_puts(b, "\\t");
            break;
        default:
            if (*c < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", *c);
                sb_puts(b, esc);
            } else {
                sb_add(b, (const char *)c, 1);
            }
        }
    }
    sb_puts(b, "\"");
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* JCS of a flat entry object (strings, integers, null), without "hash" and
 * "body". Keys are ASCII, so byte order is UTF-16 order. Malloc'd. */
static char *jcs_entry(const cJSON *e)
{
    const char *names[16];
    size_t n = 0;
    const cJSON *it;
    struct sbuf b = {0};

    cJSON_ArrayForEach (it, e) {
        if (strcmp(it->string, "hash") == 0 || strcmp(it->string, "body") == 0)
            continue;
        cr_assert_lt(n, 16);
        names[n++] = it->string;
    }
    cr_assert_eq(n, 8, "an entry hashes exactly 8 fields, got %zu", n);
    qsort(names, n, sizeof(names[0]), cmp_names);
    sb_puts(&b, "{");
    for (size_t i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, names[i]);
        if (i > 0)
            sb_puts(&b, ",");
        sb_string(&b, names[i]);
        sb_puts(&b, ":");
        if (cJSON_IsString(v)) {
            sb_string(&b, v->valuestring);
        } else if (cJSON_IsNull(v)) {
            sb_puts(&b, "null");
        } else {
            cr_assert(cJSON_IsNumber(v), "field %s: unexpected type", names[i]);
            long long x = (long long)v->valuedouble;
            cr_assert((double)x == v->valuedouble && x >= 0 && x < (1LL << 53),
                      "field %s: not a safe integer", names[i]);
            char num[32];
            snprintf(num, sizeof(num), "%lld", x);
            sb_puts(&b, num);
        }
    }
    sb_puts(&b, "}");
    return b.p;
}

static const char *str_field(const cJSON *e, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);

    cr_assert(cJSON_IsString(v), "field %s is not a string", key);
    return v->valuestring;
}

static int64_t int_field(const cJSON *e, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);

    cr_assert(cJSON_IsNumber(v), "field %s is not a number", key);
    return (int64_t)v->valuedouble;
}

static void expect_hash_recomputes(const cJSON *e)
{
    char *canon = jcs_entry(e);
    char hex[65];

    sha256_hex(canon, strlen(canon), hex);
    cr_assert_str_eq(hex, str_field(e, "hash"), "hash of %s", canon);
    free(canon);
}

/* Every "ts": in raw output must be followed by plain digits. */
static int count_plain_ts(const char *text)
{
    int n = 0;

    for (const char *p = strstr(text, "\"ts\":"); p;
         p = strstr(p + 1, "\"ts\":")) {
        const char *d = p + 5;
        const char *start = d;
        while (*d >= '0' && *d <= '9')
            d++;
        cr_assert(d > start && (*d == ',' || *d == '}'),
                  "ts not a plain integer in: %.60s", p);
        n++;
    }
    return n;
}

/* ------------------------------------------------- 1. bad input, exit 2 */

Test(cli_bad_input, rejects_invalid_json)
{
    refuse_payload("{", "invalid JSON");
    refuse_payload("{\"a\":}", "invalid JSON");
}

Test(cli_bad_input, rejects_trailing_garbage)
{
    refuse_payload("{} x", "trailing");
}

Test(cli_bad_input, rejects_nan)
{
    refuse_payload("NaN", "NaN");
}

Test(cli_bad_input, rejects_infinity)
{
    refuse_payload("Infinity", "Infinity");
    refuse_payload("-Infinity", "invalid JSON");
}

Test(cli_bad_input, rejects_number_overflowing_to_infinity)
{
    refuse_payload("1e400", "out of range");
    refuse_payload("[-1E400]", "out of range");
}

Test(cli_bad_input, rejects_lone_surrogate)
{
    refuse_payload("\"\\ud800\"", "surrogate");
    refuse_payload("\"\\udc00\"", "surrogate");
    refuse_payload("\"\\ud800\\u0041\"", "surrogate");
}

Test(cli_bad_input, rejects_invalid_utf8_on_stdin)
{
    static const char ff[] = "{\"s\":\"a\xff"
                             "b\"}";
    static const char overlong[] = "\"\xc0\x80\"";
    static const char cut[] = "\"\xe2\x82\"";

    refuse_stdin(ff, sizeof(ff) - 1, "UTF-8", "invalid_json");
    refuse_stdin(overlong, sizeof(overlong) - 1, "UTF-8", "invalid_json");
    refuse_stdin(cut, sizeof(cut) - 1, "UTF-8", "invalid_json");
}

Test(cli_bad_input, rejects_raw_tab_in_string)
{
    refuse_payload("{\"s\":\"a\tb\"}", "control character");
}

Test(cli_bad_input, rejects_raw_control_byte_in_string)
{
    refuse_payload("{\"s\":\"a\x01"
                   "b\"}",
                   "control character");
}

Test(cli_bad_input, rejects_raw_nul_on_stdin)
{
    static const char in_string[] = "\"a\0b\"";
    static const char after_value[] = "{\"a\":1}\0";

    refuse_stdin(in_string, sizeof(in_string) - 1, "invalid JSON",
                 "invalid_json");
    /* a NUL must not silently end the input, as a C string would */
    refuse_stdin(after_value, sizeof(after_value) - 1, "invalid JSON",
                 "invalid_json");
}

Test(cli_bad_input, rejects_escaped_nul)
{
    refuse_payload("{\"s\":\"a\\u0000b\"}", "\\u0000");
}

Test(cli_bad_input, rejects_duplicate_keys)
{
    refuse_payload("{\"a\":1,\"a\":2}", "duplicate");
    refuse_payload("{\"a\":1,\"\\u0061\":2}", "duplicate");
    refuse_payload("{\"o\":{\"k\":1,\"k\":1}}", "duplicate");
}

Test(cli_bad_input, rejects_leading_zero)
{
    refuse_payload("01", "leading zero");
    refuse_payload("{\"n\":-012}", "leading zero");
}

Test(cli_bad_input, rejects_empty_payload)
{
    refuse_payload("", "empty");
    refuse_stdin(NULL, 0, "empty", "invalid_json");
}

Test(cli_bad_input, rejects_nesting_of_65)
{
    char *deep = nested_arrays(65);

    refuse_payload(deep, "nesting");
    free(deep);
}

Test(cli_bad_input, accepts_nesting_of_64)
{
    char *dir = ledger_with(2);
    char *deep = nested_arrays(64);
    cJSON *e = append_ok(dir, "a", "k", deep);

    cr_assert_eq(int_field(e, "seq"), 2);
    cr_assert_eq(summary(dir, NULL), 3);
    cJSON_Delete(e);
    free(deep);
    tu_rmrf(dir);
}

Test(cli_bad_input, rejects_kind_with_capitals)
{
    REFUSE_ARGS("kind", "invalid_input", "--actor", "a", "--kind", "Note",
                "--payload", "{}");
}

Test(cli_bad_input, rejects_kind_with_space)
{
    REFUSE_ARGS("kind", "invalid_input", "--actor", "a", "--kind", "a b",
                "--payload", "{}");
}

Test(cli_bad_input, rejects_kind_over_64_bytes)
{
    char kind[66];

    memset(kind, 'k', 65);
    kind[65] = '\0';
    REFUSE_ARGS("kind", "invalid_input", "--actor", "a", "--kind", kind,
                "--payload", "{}");
}

Test(cli_bad_input, rejects_empty_kind)
{
    REFUSE_ARGS("kind", "invalid_input", "--actor", "a", "--kind", "",
                "--payload", "{}");
}

Test(cli_bad_input, rejects_actor_of_129_bytes)
{
    char actor[130];

    memset(actor, 'a', 129);
    actor[129] = '\0';
    REFUSE_ARGS("actor", "invalid_input", "--actor", actor, "--kind", "k",
                "--payload", "{}");
}

Test(cli_bad_input, accepts_actor_of_128_bytes_and_kind_of_64)
{
    char actor[129], kind[65];
    char *dir = ledger_with(0);

    memset(actor, 'a', 128);
    actor[128] = '\0';
    memset(kind, 'k', 64);
    kind[64] = '\0';
    cJSON *e = append_ok(dir, actor, kind, "{}");
    cr_assert_str_eq(str_field(e, "actor"), actor);
    cr_assert_str_eq(str_field(e, "kind"), kind);
    cJSON_Delete(e);
    tu_rmrf(dir);
}

Test(cli_bad_input, rejects_empty_actor)
{
    REFUSE_ARGS("actor", "invalid_input", "--actor", "", "--kind", "k",
                "--payload", "{}");
}

Test(cli_bad_input, rejects_actor_with_invalid_utf8)
{
    REFUSE_ARGS("actor", "invalid_input", "--actor", "a\xff", "--kind", "k",
                "--payload", "{}");
}

Test(cli_bad_input, rejects_body_over_1mib_on_stdin)
{
    size_t len = 0;
    char *body = big_body(1100000, &len);

    refuse_stdin(body, len, "1048576", "body_too_large");
    free(body);
}

Test(cli_bad_input, rejects_body_one_byte_over_1mib)
{
    size_t len = 0;
    /* {"x":""} is 8 bytes: 1048569 a's make 1 MiB + 1 of canonical JSON */
    char *body = big_body(1048569, &len);

    refuse_stdin(body, len, "1048576", "body_too_large");
    free(body);
}

Test(cli_bad_input, accepts_body_of_exactly_1mib)
{
    size_t len = 0;
    char *body = big_body(1048568, &len);
    char *dir = ledger_with(0);
    struct tu_run r =
        run_in(body, len, "--ledger", dir, "ledger", "append", "--json",
               "--actor", "a", "--kind", "k", "--payload", "-", NULL);

    cr_assert_eq(len, 1048576);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cJSON *e = tu_run_json(&r);
    char hex[65];
    sha256_hex(body, len, hex);
    cr_assert_str_eq(str_field(e, "payload"), hex);
    cJSON_Delete(e);
    tu_run_free(&r);
    free(body);
    tu_rmrf(dir);
}

Test(cli_bad_input, limit_applies_to_canonical_form_not_raw_text)
{
    /* raw text over 1 MiB, canonical form under it: accepted */
    size_t n = 1048560;
    size_t len = 6 + n + 13;
    char *raw = malloc(len + 1);
    char *dir = ledger_with(0);

    memcpy(raw, "{\"x\":\"", 6);
    memset(raw + 6, 'a', n);
    memcpy(raw + 6 + n, "\" , \"y\" : 1 }", 14);
    cr_assert_gt(len, 1048576);
    struct tu_run r =
        run_in(raw, len, "--ledger", dir, "ledger", "append", "--json",
               "--actor", "a", "--kind", "k", "--payload", "-", NULL);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    tu_run_free(&r);
    cr_assert_eq(summary(dir, NULL), 1);
    free(raw);
    tu_rmrf(dir);
}

Test(cli_bad_input, rejects_stdin_over_the_read_limit)
{
    size_t len = 20u << 20;
    char *in = malloc(len);

    memset(in, ' ', len);
    refuse_stdin(in, len, "payload", "body_too_large");
    free(in);
}

Test(cli_bad_input, rejects_parent_equal_to_next_seq)
{
    REFUSE_ARGS("parent", "invalid_input", "--actor", "a", "--kind", "k",
                "--payload", "{}", "--parent", "2");
}

Test(cli_bad_input, rejects_parent_beyond_next_seq)
{
    REFUSE_ARGS("parent", "invalid_input", "--actor", "a", "--kind", "k",
                "--payload", "{}", "--parent", "1000");
}

Test(cli_bad_input, rejects_negative_parent)
{
    REFUSE_ARGS("parent", NULL, "--actor", "a", "--kind", "k", "--payload",
                "{}", "--parent", "-1");
}

Test(cli_bad_input, rejects_non_numeric_parent)
{
    REFUSE_ARGS("parent", NULL, "--actor", "a", "--kind", "k", "--payload",
                "{}", "--parent", "abc");
    REFUSE_ARGS("parent", NULL, "--actor", "a", "--kind", "k", "--payload",
                "{}", "--parent", "1x");
    REFUSE_ARGS("parent", NULL, "--actor", "a", "--kind", "k", "--payload",
                "{}", "--parent", "");
    REFUSE_ARGS("parent", NULL, "--actor", "a", "--kind", "k", "--payload",
                "{}", "--parent", "99999999999999999999999");
}

/* "+1" is refused as not a seq; " 1" must be too (strtoll skips blanks). */
Test(cli_bad_input, rejects_parent_with_leading_space)
{
    REFUSE_ARGS("parent", NULL, "--actor", "a", "--kind", "k", "--payload",
                "{}", "--parent", " 1");
}

Test(cli_bad_input, rejects_seq_with_leading_space)
{
    char *dir = ledger_with(2);
    struct tu_run plus =
        tu_forumv(NULL, "--ledger", dir, "ledger", "get", "+1", NULL);
    struct tu_run space =
        tu_forumv(NULL, "--ledger", dir, "ledger", "get", " 1", NULL);

    cr_assert_eq(plus.status, 2, "get +1: exit %d", plus.status);
    cr_assert_eq(space.status, 2, "get \" 1\": exit %d, stdout [%s]",
                 space.status, space.out);
    tu_run_free(&plus);
    tu_run_free(&space);
    tu_rmrf(dir);
}

Test(cli_bad_input, rejects_missing_payload_file)
{
    REFUSE_ARGS("/nonexistent-forum-test/p.json", NULL, "--actor", "a",
                "--kind", "k", "--payload", "@/nonexistent-forum-test/p.json");
}

/* --------------------------------------------- 2. --json error objects */

Test(cli_json_error, invalid_json_code)
{
    char *dir = ledger_with(0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--json",
                  "--actor", "a", "--kind", "k", "--payload", "[1,]", NULL);

    cr_assert_eq(r.status, 2);
    expect_code(&r, "invalid_json");
    cJSON *e = err_json(&r);
    must_contain(cJSON_GetObjectItemCaseSensitive(e, "error")->valuestring,
                 "invalid JSON", "error");
    cJSON_Delete(e);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_json_error, invalid_input_code)
{
    char *dir = ledger_with(0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--json",
                  "--actor", "a", "--kind", "BAD", "--payload", "{}", NULL);

    cr_assert_eq(r.status, 2);
    expect_code(&r, "invalid_input");
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_json_error, body_too_large_code)
{
    size_t len = 0;
    char *body = big_body(1100000, &len);
    char *dir = ledger_with(0);
    struct tu_run r =
        run_in(body, len, "--ledger", dir, "ledger", "append", "--json",
               "--actor", "a", "--kind", "k", "--payload", "-", NULL);

    cr_assert_eq(r.status, 2);
    expect_code(&r, "body_too_large");
    tu_run_free(&r);
    free(body);
    tu_rmrf(dir);
}

Test(cli_json_error, global_json_flag_also_prints_error_object)
{
    char *dir = ledger_with(1);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "get", "7", NULL);

    cr_assert_eq(r.status, 1);
    expect_code(&r, "not_found");
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_json_error, no_error_object_without_json)
{
    char *dir = ledger_with(0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                  "--kind", "k", "--payload", "{", NULL);

    cr_assert_eq(r.status, 2);
    must_contain(r.err, "invalid JSON", "stderr");
    cr_assert_null(strchr(r.err, '{'), "JSON on stderr without --json: %s",
                   r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* A script reading `tail -n1` of stderr gets the JSON object, for usage
 * errors too (the hint line must come before it, or not at all). */
Test(cli_json_error, error_object_is_last_stderr_line)
{
    char *dir = ledger_with(0);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "append",
                                "--json", "--actor", "a", "--kind", "k",
                                "--payload", "{}", "--parent", "abc", NULL);

    cr_assert_eq(r.status, 2);
    size_t n = r.err_len;
    while (n > 0 && r.err[n - 1] == '\n')
        n--;
    size_t start = n;
    while (start > 0 && r.err[start - 1] != '\n')
        start--;
    cJSON *v = cJSON_ParseWithLength(r.err + start, n - start);
    cr_assert_not_null(v, "last stderr line is not JSON: [%.*s]",
                       (int)(n - start), r.err + start);
    cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(v, "code")));
    cJSON_Delete(v);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* --------------------------------------------- 3. damaged or foreign files */

static const char *const file_cmds[][10] = {
    {"ledger", "verify", NULL},
    {"ledger", "verify", "--deep", NULL},
    {"ledger", "show", NULL},
    {"ledger", "summary", NULL},
    {"ledger", "get", "0", NULL},
    {"ledger", "body", "0", NULL},
    {"ledger", "append", "--actor", "a", "--kind", "k", "--payload", "{}",
     NULL},
    {"ledger", "redact", "0", "--reason", "r", NULL},
    {"ledger", "init", NULL},
};

/* Sorted names in DIR, one a line (malloc'd), to see what a command adds. */
static char *dir_listing(const char *dir)
{
    char *names[64];
    size_t n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    struct sbuf b = {0};

    cr_assert_not_null(d, "opendir %s", dir);
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        cr_assert_lt(n, 64);
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_names);
    sb_puts(&b, "");
    for (size_t i = 0; i < n; i++) {
        sb_puts(&b, names[i]);
        sb_puts(&b, "\n");
        free(names[i]);
    }
    return b.p;
}

static void expect_no_sidecars(const char *dir)
{
    static const char *const side[] = {"ledger.db-wal", "ledger.db-shm",
                                       "ledger.db-journal"};
    char path[PATH_MAX];

    for (size_t i = 0; i < sizeof(side) / sizeof(side[0]); i++) {
        path_in(path, sizeof(path), dir, side[i]);
        cr_assert(!exists(path), "%s was created", side[i]);
    }
}

/* Every command on DIR exits 3 with NEEDLE and CODE, never crashes, and
 * leaves ledger.db byte for byte as it was, with nothing beside it. */
static void expect_file_refused(const char *dir, const char *needle,
                                const char *code)
{
    char db[PATH_MAX];
    size_t len0 = 0, len1 = 0;

    path_in(db, sizeof(db), dir, "ledger.db");
    expect_no_sidecars(dir);
    char *bytes0 = tu_read_file(db, &len0);
    char *list0 = dir_listing(dir);
    cr_assert_not_null(bytes0);
    for (size_t i = 0; i < sizeof(file_cmds) / sizeof(file_cmds[0]); i++) {
        static const char *const json[] = {"--json", NULL};
        for (int with_json = 0; with_json < 2; with_json++) {
            struct tu_run r =
                run_list(dir, NULL, 0, with_json ? json : NULL, file_cmds[i]);
            cr_assert_lt(r.status, 128, "`%s %s` crashed: %d: %s",
                         file_cmds[i][0], file_cmds[i][1], r.status, r.err);
            cr_assert_eq(r.status, 3, "`%s %s`: exit %d, want 3: %s",
                         file_cmds[i][0], file_cmds[i][1], r.status, r.err);
            must_contain(r.err, needle, file_cmds[i][1]);
            if (with_json)
                expect_code(&r, code);
            tu_run_free(&r);
            char *bytes1 = tu_read_file(db, &len1);
            cr_assert_not_null(bytes1, "ledger.db vanished after %s",
                               file_cmds[i][1]);
            cr_assert(len1 == len0 && memcmp(bytes0, bytes1, len0) == 0,
                      "`%s` changed ledger.db (%zu -> %zu bytes)",
                      file_cmds[i][1], len0, len1);
            free(bytes1);
            expect_no_sidecars(dir);
            char *list1 = dir_listing(dir);
            cr_assert_str_eq(list1, list0, "`%s` created files",
                             file_cmds[i][1]);
            free(list1);
        }
    }
    free(list0);
    free(bytes0);
}

Test(cli_files, foreign_sqlite_database_is_refused_untouched)
{
    char *dir = tu_tmpdir();
    char db[PATH_MAX];

    path_in(db, sizeof(db), dir, "ledger.db");
    sql_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES('mine');");
    expect_file_refused(dir, "not a forum ledger", "foreign_database");
    tu_rmrf(dir);
}

/* A FIFO named ledger.db: opening it would block until a writer came, so
 * the file type is checked first and verify fails at once. */
Test(cli_files, fifo_is_refused_without_blocking, .timeout = 30)
{
    char *dir = tu_tmpdir();
    char db[PATH_MAX];

    path_in(db, sizeof(db), dir, "ledger.db");
    cr_assert_eq(mkfifo(db, 0600), 0);
    /* a hang would run into the test's own timeout */
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--json", NULL);
    cr_assert_eq(r.status, 3, "exit %d: %s", r.status, r.err);
    must_contain(r.err, "not a regular file", "verify");
    expect_code(&r, "foreign_database");
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_files, newer_format_is_refused_untouched)
{
    char *dir = ledger_with(3);
    char db[PATH_MAX];

    path_in(db, sizeof(db), dir, "ledger.db");
    sql_exec(db, "PRAGMA user_version=99;");
    expect_file_refused(dir, "newer", "newer_format");
    tu_rmrf(dir);
}

Test(cli_files, truncated_file_is_refused_untouched)
{
    char *dir = tu_tmpdir();
    char db[PATH_MAX];
    char pad[401];
    size_t len = 0;
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", NULL);

    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    memset(pad, 'p', 400);
    pad[400] = '\0';
    for (int i = 0; i < 200; i++) {
        char payload[500];
        snprintf(payload, sizeof(payload), "{\"i\":%d,\"pad\":\"%s\"}", i, pad);
        r = tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                      "--kind", "k", "--payload", payload, NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        tu_run_free(&r);
    }
    path_in(db, sizeof(db), dir, "ledger.db");
    sql_exec(db, "PRAGMA wal_checkpoint(TRUNCATE);");
    expect_no_sidecars(dir);
    char *bytes = tu_read_file(db, &len);
    cr_assert_gt(len, 64 * 1024, "ledger.db has only %zu bytes", len);
    cr_assert_eq(tu_write_file(db, bytes, len / 2), 0);
    free(bytes);
    expect_file_refused(dir, "truncated", "corrupt");
    tu_rmrf(dir);
}

Test(cli_files, garbage_file_is_refused_untouched)
{
    char *dir = tu_tmpdir();
    char db[PATH_MAX];
    unsigned char junk[8192];
    uint64_t x = 0x9e3779b97f4a7c15u;

    for (size_t i = 0; i < sizeof(junk); i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        junk[i] = (unsigned char)(x >> 24);
    }
    path_in(db, sizeof(db), dir, "ledger.db");
    cr_assert_eq(tu_write_file(db, junk, sizeof(junk)), 0);
    expect_file_refused(dir, "not a forum ledger", "foreign_database");
    tu_rmrf(dir);
}

Test(cli_files, empty_file_is_refused_untouched)
{
    char *dir = tu_tmpdir();
    char db[PATH_MAX];

    path_in(db, sizeof(db), dir, "ledger.db");
    cr_assert_eq(tu_write_file(db, "", 0), 0);
    expect_file_refused(dir, "empty", "corrupt");
    tu_rmrf(dir);
}

/* ------------------------------------------------------- 4. exit codes */

Test(cli_exit, get_of_missing_seq_is_1)
{
    char *dir = ledger_with(2);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "get", "999",
                                "--json", NULL);

    cr_assert_eq(r.status, 1, "exit %d: %s", r.status, r.err);
    cr_assert_eq(r.out_len, 0, "stdout: %s", r.out);
    must_contain(r.err, "999", "stderr");
    expect_code(&r, "not_found");
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_exit, body_of_missing_seq_is_1)
{
    char *dir = ledger_with(2);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "body", "2", NULL);

    cr_assert_eq(r.status, 1, "exit %d: %s", r.status, r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_exit, body_of_redacted_entry_is_1_with_code_redacted)
{
    char *dir = ledger_with(2);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "redact", "0",
                                "--reason", "gdpr", "--json", NULL);

    cr_assert_eq(r.status, 0, "redact: %d %s", r.status, r.err);
    cJSON *red = tu_run_json(&r);
    cr_assert_str_eq(str_field(red, "kind"), "redaction");
    cr_assert_str_eq(str_field(red, "actor"), "admin");
    cr_assert_eq(int_field(red, "parent"), 0);
    cr_assert_eq(int_field(red, "seq"), 2);
    cJSON_Delete(red);
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "ledger", "body", "0", NULL);
    cr_assert_eq(r.status, 1, "body of redacted: exit %d", r.status);
    cr_assert_eq(r.out_len, 0, "stdout: %s", r.out);
    must_contain(r.err, "redacted", "stderr");
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "ledger", "body", "0", "--json", NULL);
    cr_assert_eq(r.status, 1);
    expect_code(&r, "redacted");
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "ledger", "get", "0", "--json", NULL);
    cr_assert_eq(r.status, 0);
    cJSON *e = tu_run_json(&r);
    cr_assert_str_eq(str_field(e, "body"), "redacted");
    expect_hash_recomputes(e);
    cJSON_Delete(e);
    tu_run_free(&r);

    /* the other body is still there; a redacted body is not a failure */
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "body", "1", "--json", NULL);
    cr_assert_eq(r.status, 0, "body 1: %s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--deep", "--json",
                  NULL);
    cr_assert_eq(r.status, 0, "deep verify after redact: %s %s", r.out, r.err);
    cJSON *v = tu_run_json(&r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "ok")));
    cr_assert_eq(int_field(v, "bodies_redacted"), 1);
    cJSON_Delete(v);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_exit, verify_of_good_ledger_is_0_with_ok_true)
{
    char *dir = ledger_with(3);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--json", NULL);

    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cJSON *v = tu_run_json(&r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "ok")), "%s",
              r.out);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "chain")));
    cr_assert_eq(int_field(v, "entries"), 3);
    cr_assert(
        cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(v, "first_bad_seq")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(v, "reason")));
    cJSON_Delete(v);
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--deep", "--json",
                  NULL);
    cr_assert_eq(r.status, 0, "deep: exit %d: %s", r.status, r.err);
    v = tu_run_json(&r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "ok")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "deep")));
    cr_assert_eq(int_field(v, "bodies_checked"), 3);
    cr_assert_eq(int_field(v, "bodies_bad"), 0);
    cJSON_Delete(v);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* Internals: this edits the entries table behind forum's back. */
Test(cli_exit, verify_of_tampered_entry_is_1)
{
    char *dir = ledger_with(3);
    char db[PATH_MAX];

    path_in(db, sizeof(db), dir, "ledger.db");
    sql_exec(db, "UPDATE entries SET actor='mallory' WHERE seq=1;");
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--json", NULL);
    cr_assert_eq(r.status, 1, "exit %d: %s %s", r.status, r.out, r.err);
    cJSON *v = tu_run_json(&r);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "ok")));
    cr_assert_eq(int_field(v, "first_bad_seq"), 1, "%s", r.out);
    cr_assert_str_eq(str_field(v, "reason"), "hash_mismatch");
    cJSON_Delete(v);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_exit, deep_verify_of_tampered_body_is_1)
{
    char *dir = ledger_with(3);
    char db[PATH_MAX];

    path_in(db, sizeof(db), dir, "ledger.db");
    sql_exec(db, "UPDATE bodies SET body=CAST('{\"n\":666}' AS BLOB)"
                 " WHERE seq=2;");
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--json", NULL);
    cr_assert_eq(r.status, 0, "chain verify does not read bodies: %s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--deep", "--json",
                  NULL);
    cr_assert_eq(r.status, 1, "exit %d: %s %s", r.status, r.out, r.err);
    cJSON *v = tu_run_json(&r);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "ok")));
    cr_assert_eq(int_field(v, "bodies_bad"), 1, "%s", r.out);
    cr_assert_eq(int_field(v, "first_bad_body_seq"), 2, "%s", r.out);
    cJSON_Delete(v);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_exit, unknown_command_is_2)
{
    char *dir = ledger_with(0);
    struct tu_run top = tu_forumv(NULL, "--ledger", dir, "frobnicate", NULL);
    struct tu_run sub =
        tu_forumv(NULL, "--ledger", dir, "ledger", "frobnicate", NULL);
    struct tu_run none = tu_forumv(NULL, "--ledger", dir, NULL);

    cr_assert_eq(top.status, 2, "forum frobnicate: %d", top.status);
    must_contain(top.err, "frobnicate", "stderr");
    cr_assert_eq(sub.status, 2, "forum ledger frobnicate: %d", sub.status);
    must_contain(sub.err, "frobnicate", "stderr");
    cr_assert_eq(none.status, 2, "forum without a command: %d", none.status);
    tu_run_free(&top);
    tu_run_free(&sub);
    tu_run_free(&none);
    tu_rmrf(dir);
}

Test(cli_exit, unknown_option_is_2)
{
    char *dir = ledger_with(1);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--bogus", NULL);

    cr_assert_eq(r.status, 2, "exit %d", r.status);
    must_contain(r.err, "--bogus", "stderr");
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_exit, missing_required_option_is_2)
{
    char *dir = ledger_with(2);
    struct tu_run no_payload =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                  "--kind", "k", NULL);
    struct tu_run no_reason =
        tu_forumv(NULL, "--ledger", dir, "ledger", "redact", "0", NULL);
    struct tu_run no_seq =
        tu_forumv(NULL, "--ledger", dir, "ledger", "get", NULL);
    struct tu_run no_value =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                  "--kind", "k", "--payload", NULL);

    cr_assert_eq(no_payload.status, 2, "append without --payload: %d",
                 no_payload.status);
    must_contain(no_payload.err, "--payload", "stderr");
    cr_assert_eq(no_reason.status, 2, "redact without --reason: %d",
                 no_reason.status);
    must_contain(no_reason.err, "--reason", "stderr");
    cr_assert_eq(no_seq.status, 2, "get without SEQ: %d", no_seq.status);
    cr_assert_eq(no_value.status, 2, "--payload without value: %d",
                 no_value.status);
    cr_assert_eq(summary(dir, NULL), 2, "something was written");
    tu_run_free(&no_payload);
    tu_run_free(&no_reason);
    tu_run_free(&no_seq);
    tu_run_free(&no_value);
    tu_rmrf(dir);
}

Test(cli_exit, verify_without_ledger_is_3_and_creates_nothing)
{
    char *dir = tu_tmpdir();
    char missing[PATH_MAX], db[PATH_MAX];

    path_in(missing, sizeof(missing), dir, "none");
    path_in(db, sizeof(db), dir, "ledger.db");
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--json", NULL);
    cr_assert_eq(r.status, 3, "exit %d, want 3: %s", r.status, r.err);
    must_contain(r.err, "no ledger", "stderr");
    expect_code(&r, "io_error");
    cr_assert(!exists(db), "verify created ledger.db");
    tu_run_free(&r);

    static const char *const reads[][4] = {{"ledger", "verify", NULL},
                                           {"ledger", "show", NULL},
                                           {"ledger", "get", "0", NULL},
                                           {"ledger", "summary", NULL}};
    for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
        r = run_list(missing, NULL, 0, NULL, reads[i]);
        cr_assert_eq(r.status, 3, "%s on a missing dir: exit %d: %s",
                     reads[i][1], r.status, r.err);
        cr_assert(!exists(missing), "%s created the dir", reads[i][1]);
        tu_run_free(&r);
    }
    tu_rmrf(dir);
}

/* ------------------------------------------------------------- 5. --help */

static void expect_usage(const char *const *argv, const char *what)
{
    struct tu_run r = tu_forum(NULL, 0, argv);

    cr_assert_eq(r.status, 0, "%s: exit %d: %s", what, r.status, r.err);
    int found = strncmp(r.out, "usage:", 6) == 0 || strstr(r.out, "\nusage:");
    cr_assert(found, "%s: no line starting with usage: in [%s]", what, r.out);
    tu_run_free(&r);
}

/* The command names of a help text: lines "  name ..." after "commands:". */
static size_t help_commands(const char *text, char names[][32], size_t max)
{
    const char *p = strstr(text, "\ncommands:\n");
    size_t n = 0;

    cr_assert_not_null(p, "no commands: section in [%s]", text);
    p = strchr(p + 1, '\n') + 1;
    while (*p && *p != '\n') {
        const char *nl = strchr(p, '\n');
        if (p[0] == ' ' && p[1] == ' ' && p[2] >= 'a' && p[2] <= 'z') {
            size_t len = strcspn(p + 2, " \n");
            cr_assert_lt(len, 32);
            cr_assert_lt(n, max);
            memcpy(names[n], p + 2, len);
            names[n][len] = '\0';
            n++;
        }
        if (!nl)
            break;
        p = nl + 1;
    }
    return n;
}

Test(cli_help, forum_help)
{
    expect_usage((const char *const[]){"--help", NULL}, "forum --help");
    expect_usage((const char *const[]){"-h", NULL}, "forum -h");
}

Test(cli_help, ledger_help)
{
    expect_usage((const char *const[]){"ledger", "--help", NULL},
                 "forum ledger --help");
}

Test(cli_help, every_ledger_command_has_help)
{
    struct tu_run r = tu_forumv(NULL, "ledger", "--help", NULL);
    char names[32][32];

    cr_assert_eq(r.status, 0);
    size_t n = help_commands(r.out, names, 32);
    cr_assert_geq(n, 10, "only %zu commands listed in [%s]", n, r.out);
    static const char *const want[] = {"init",  "append", "get",    "body",
                                       "show",  "verify", "redact", "summary",
                                       "chain", "replay"};
    for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++) {
        int seen = 0;
        for (size_t i = 0; i < n; i++)
            seen |= strcmp(names[i], want[w]) == 0;
        cr_assert(seen, "%s not listed in forum ledger --help", want[w]);
    }
    for (size_t i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof(what), "forum ledger %s --help", names[i]);
        expect_usage((const char *const[]){"ledger", names[i], "--help", NULL},
                     what);
        /* help must not need a ledger, nor create one */
        struct tu_run h = tu_forumv(NULL, "--ledger", "/nonexistent-forum-test",
                                    "ledger", names[i], "--help", NULL);
        cr_assert_eq(h.status, 0, "%s without a ledger: %d", what, h.status);
        must_contain(h.out, names[i], what);
        tu_run_free(&h);
    }
    tu_run_free(&r);
}

Test(cli_help, every_top_level_command_has_help)
{
    struct tu_run r = tu_forumv(NULL, "--help", NULL);
    char names[64][32];

    cr_assert_eq(r.status, 0);
    size_t n = help_commands(r.out, names, 64);
    cr_assert_geq(n, 1, "no commands listed in [%s]", r.out);
    for (size_t i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof(what), "forum %s --help", names[i]);
        expect_usage((const char *const[]){names[i], "--help", NULL}, what);
    }
    tu_run_free(&r);
}

/* ------------------------------------------------------ 6. --json output */

static const char *const entry_keys[] = {
    "v", "seq", "ts", "actor", "kind", "parent", "payload", "prev", "hash"};

static void expect_keys(const cJSON *e, const char *extra)
{
    size_t want = sizeof(entry_keys) / sizeof(entry_keys[0]) + (extra ? 1 : 0);

    cr_assert_eq((size_t)cJSON_GetArraySize(e), want, "%zu keys, want %zu",
                 (size_t)cJSON_GetArraySize(e), want);
    for (size_t i = 0; i < sizeof(entry_keys) / sizeof(entry_keys[0]); i++)
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(e, entry_keys[i]),
                           "no %s", entry_keys[i]);
    if (extra)
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(e, extra), "no %s",
                           extra);
}

static int is_hex64(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return 0;
    return 1;
}

Test(cli_json, append_prints_exactly_the_entry_fields)
{
    char *dir = ledger_with(0);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "append",
                                "--json", "--actor", "client", "--kind",
                                "request", "--payload", "{\"q\":1}", NULL);

    cr_assert_eq(r.status, 0, "%s", r.err);
    /* one object, one line */
    cr_assert_eq(r.out[r.out_len - 1], '\n');
    cr_assert_null(memchr(r.out, '\n', r.out_len - 1), "more than one line");
    cJSON *e = tu_run_json(&r);
    expect_keys(e, NULL);
    cr_assert_eq(int_field(e, "v"), 1);
    cr_assert_eq(int_field(e, "seq"), 0);
    cr_assert_str_eq(str_field(e, "actor"), "client");
    cr_assert_str_eq(str_field(e, "kind"), "request");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "parent")));
    cr_assert_str_eq(str_field(e, "prev"), ZERO_HASH);
    cr_assert(is_hex64(str_field(e, "payload")));
    cr_assert(is_hex64(str_field(e, "hash")));
    int64_t ts = int_field(e, "ts");
    int64_t now = (int64_t)time(NULL) * 1000000;
    cr_assert(ts > now - 3600LL * 1000000 && ts < now + 3600LL * 1000000,
              "ts %lld is not microseconds near now", (long long)ts);
    expect_hash_recomputes(e);
    cJSON_Delete(e);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_json, get_adds_body_present)
{
    char *dir = ledger_with(0);
    cJSON *a = append_ok(dir, "alice", "note", "{\"x\":[1,2]}");
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "get", "0", "--json", NULL);

    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *g = tu_run_json(&r);
    expect_keys(g, "body");
    cr_assert_str_eq(str_field(g, "body"), "present");
    for (size_t i = 0; i < sizeof(entry_keys) / sizeof(entry_keys[0]); i++)
        cr_assert(cJSON_Compare(
                      cJSON_GetObjectItemCaseSensitive(a, entry_keys[i]),
                      cJSON_GetObjectItemCaseSensitive(g, entry_keys[i]), 1),
                  "get and append differ on %s", entry_keys[i]);
    cJSON_Delete(g);
    cJSON_Delete(a);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_json, entry_hash_recomputes_with_escapes_and_parent)
{
    char *dir = ledger_with(2);
    /* UTF-8, a quote, a backslash, a newline and a control byte */
    cJSON *e = append_ok(dir, "Zo\xc3\xab \"q\" \\ \n\x01", "a.b-c_9", "[]");
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "append",
                                "--json", "--actor", "bob", "--kind", "result",
                                "--payload", "{}", "--parent", "1", NULL);

    cr_assert_eq(int_field(e, "seq"), 2);
    expect_hash_recomputes(e);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *c = tu_run_json(&r);
    cr_assert_eq(int_field(c, "parent"), 1);
    cr_assert_str_eq(str_field(c, "prev"), str_field(e, "hash"));
    expect_hash_recomputes(c);
    cJSON_Delete(c);
    cJSON_Delete(e);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_json, show_entries_chain_and_recompute)
{
    char *dir = ledger_with(4);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "redact", "1",
                                "--reason", "test", NULL);

    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "show", "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *doc = tu_run_json(&r);
    cJSON *list = cJSON_GetObjectItemCaseSensitive(doc, "entries");
    cr_assert(cJSON_IsArray(list));
    cr_assert_eq(cJSON_GetArraySize(list), 5);
    const char *prev = ZERO_HASH;
    int64_t seq = 0, ts = 0;
    const cJSON *e;
    cJSON_ArrayForEach (e, list) {
        cr_assert_eq(int_field(e, "seq"), seq);
        cr_assert_str_eq(str_field(e, "prev"), prev, "seq %lld",
                         (long long)seq);
        cr_assert_geq(int_field(e, "ts"), ts, "ts went backwards");
        expect_hash_recomputes(e);
        prev = str_field(e, "hash");
        ts = int_field(e, "ts");
        seq++;
    }
    cr_assert_eq(count_plain_ts(r.out), 5);
    cJSON_Delete(doc);
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "ledger", "show", "--limit", "2",
                  "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    doc = tu_run_json(&r);
    list = cJSON_GetObjectItemCaseSensitive(doc, "entries");
    cr_assert_eq(cJSON_GetArraySize(list), 2, "--limit 2: the last two");
    cr_assert_eq(int_field(cJSON_GetArrayItem(list, 0), "seq"), 3);
    cr_assert_eq(int_field(cJSON_GetArrayItem(list, 1), "seq"), 4);
    cJSON_Delete(doc);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_json, payload_is_hash_of_canonical_body)
{
    static const char canon[] = "{\"a\":1,\"b\":2}";
    char *dir = ledger_with(0);
    cJSON *e = append_ok(dir, "a", "k", "{\"b\":2,\"a\":1}");
    char hex[65];

    sha256_hex(canon, sizeof(canon) - 1, hex);
    cr_assert_str_eq(
        hex,
        "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777");
    cr_assert_str_eq(str_field(e, "payload"), hex);
    cJSON_Delete(e);
    tu_rmrf(dir);
}

Test(cli_json, payload_canonicalizes_numbers_and_strings)
{
    /* JCS: 1e2 -> 100, 2.50 -> 2.5, -0 -> 0, \u00e9 raw, \u000a -> \n,
     * \/ -> /, nested keys sorted */
    static const char in[] = "{\"z\":[1e2,2.50,-0,\"\\u00e9\\u000a\\/\"],"
                             "\"a\":{\"y\":true,\"b\":null}}";
    static const char canon[] = "{\"a\":{\"b\":null,\"y\":true},"
                                "\"z\":[100,2.5,0,\"\xc3\xa9\\n/\"]}";
    char *dir = ledger_with(0);
    cJSON *e = append_ok(dir, "a", "k", in);
    char hex[65];

    sha256_hex(canon, sizeof(canon) - 1, hex);
    cr_assert_str_eq(str_field(e, "payload"), hex);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "body", "0", "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, canon, "body --json");
    cJSON_Delete(e);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_json, ts_is_never_in_exponent_form)
{
    char *dir = ledger_with(0);
    struct tu_run a =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--json",
                  "--actor", "a", "--kind", "k", "--payload", "{}", NULL);
    struct tu_run g =
        tu_forumv(NULL, "--ledger", dir, "ledger", "get", "0", "--json", NULL);
    struct tu_run s =
        tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "show", NULL);
    struct tu_run h = tu_forumv(NULL, "--ledger", dir, "ledger", "get", "0",
                                NULL); /* the human form too */

    cr_assert_eq(a.status, 0);
    cr_assert_eq(count_plain_ts(a.out), 1, "append: %s", a.out);
    cr_assert_eq(count_plain_ts(g.out), 1, "get: %s", g.out);
    cr_assert_eq(count_plain_ts(s.out), 1, "show: %s", s.out);
    cr_assert_null(strstr(h.out, "e+"), "exponent in: %s", h.out);
    cr_assert_null(strstr(a.out, "e+"), "exponent in: %s", a.out);
    tu_run_free(&a);
    tu_run_free(&g);
    tu_run_free(&s);
    tu_run_free(&h);
    tu_rmrf(dir);
}

/* ------------------------------------------ 7. payload sources, new dirs */

static cJSON *body_of(const char *dir, const char *seq)
{
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "body", seq, "--json", NULL);

    cr_assert_eq(r.status, 0, "body %s: %s", seq, r.err);
    cJSON *doc = tu_run_json(&r);
    cJSON *b = cJSON_DetachItemFromObjectCaseSensitive(doc, "body");
    cr_assert_not_null(b, "no body in %s", r.out);
    cJSON_Delete(doc);
    tu_run_free(&r);
    return b;
}

Test(cli_payload, from_file_stdin_and_inline_agree)
{
    static const char text[] = "{ \"from\" : [\"somewhere\", 3] }\n";
    char *dir = ledger_with(0);
    char file[PATH_MAX], at[PATH_MAX + 1];

    path_in(file, sizeof(file), dir, "payload.json");
    cr_assert_eq(tu_write_file(file, text, sizeof(text) - 1), 0);
    snprintf(at, sizeof(at), "@%s", file);
    cJSON *f = append_ok(dir, "a", "k", at);
    struct tu_run r =
        run_in(text, sizeof(text) - 1, "--ledger", dir, "ledger", "append",
               "--json", "--actor", "a", "--kind", "k", "--payload", "-", NULL);
    cr_assert_eq(r.status, 0, "stdin: %s", r.err);
    cJSON *s = tu_run_json(&r);
    cJSON *i = append_ok(dir, "a", "k", "{\"from\":[\"somewhere\",3]}");
    char hex[65];
    static const char canon[] = "{\"from\":[\"somewhere\",3]}";

    sha256_hex(canon, sizeof(canon) - 1, hex);
    cr_assert_str_eq(str_field(f, "payload"), hex, "@FILE");
    cr_assert_str_eq(str_field(s, "payload"), hex, "stdin");
    cr_assert_str_eq(str_field(i, "payload"), hex, "inline");
    cr_assert_eq(int_field(f, "seq"), 0);
    cr_assert_eq(int_field(s, "seq"), 1);
    cr_assert_eq(int_field(i, "seq"), 2);

    cJSON *want = cJSON_Parse(canon);
    for (int n = 0; n < 3; n++) {
        char seq[4];
        snprintf(seq, sizeof(seq), "%d", n);
        cJSON *b = body_of(dir, seq);
        cr_assert(cJSON_Compare(b, want, 1), "body %d differs", n);
        cJSON_Delete(b);
    }
    cJSON_Delete(want);
    cJSON_Delete(f);
    cJSON_Delete(s);
    cJSON_Delete(i);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli_payload, large_body_from_stdin_round_trips)
{
    size_t len = 0;
    char *body = big_body(500000, &len);
    char *dir = ledger_with(0);
    struct tu_run r =
        run_in(body, len, "--ledger", dir, "ledger", "append", "--json",
               "--actor", "a", "--kind", "k", "--payload", "-", NULL);

    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    cJSON *b = body_of(dir, "0");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, "x");
    cr_assert(cJSON_IsString(x));
    cr_assert_eq(strlen(x->valuestring), 500000);
    cJSON_Delete(b);
    free(body);
    tu_rmrf(dir);
}

Test(cli_payload, append_creates_missing_ledger_dir)
{
    char *tmp = tu_tmpdir();
    char dir[PATH_MAX], db[PATH_MAX];

    path_in(dir, sizeof(dir), tmp, "fresh");
    path_in(db, sizeof(db), dir, "ledger.db");
    cr_assert(!exists(dir));
    cJSON *e = append_ok(dir, "a", "k", "{\"first\":true}");
    cr_assert_eq(int_field(e, "seq"), 0);
    cr_assert_str_eq(str_field(e, "prev"), ZERO_HASH);
    cr_assert(exists(db), "no ledger.db after append");
    cr_assert_eq(summary(dir, NULL), 1);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", NULL);
    cr_assert_eq(r.status, 0, "verify: %s %s", r.out, r.err);
    tu_run_free(&r);
    cJSON_Delete(e);
    tu_rmrf(tmp);
}

Test(cli_payload, ledger_env_names_the_dir)
{
    /* FORUM_LEDGER is inherited by the child */
    char *dir = ledger_with(1);
    char *old = getenv("FORUM_LEDGER") ? strdup(getenv("FORUM_LEDGER")) : NULL;

    cr_assert_eq(setenv("FORUM_LEDGER", dir, 1), 0);
    struct tu_run r = tu_forumv(NULL, "ledger", "summary", "--json", NULL);
    if (old)
        setenv("FORUM_LEDGER", old, 1);
    else
        unsetenv("FORUM_LEDGER");
    free(old);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *s = tu_run_json(&r);
    cr_assert_eq(int_field(s, "entries"), 1);
    cJSON_Delete(s);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(cli, did_you_mean_the_verify_alias_and_version_json)
{
    struct tu_run r = tu_forumv(NULL, "ledgr", "show", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "did you mean `forum ledger`"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "ledger", "shwo", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "did you mean `forum ledger show`"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "frobnicate", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(!strstr(r.err, "did you mean"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--json", "version", NULL);
    cr_assert_eq(r.status, 0);
    cJSON *v = tu_run_json(&r);
    cr_assert_not_null(tu_str(v, "version"));
    cJSON_Delete(v);
    tu_run_free(&r);
    char *dir = tu_tmpdir();
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    v = tu_run_json(&r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "ok")));
    cJSON_Delete(v);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* Batch ingest: every line an entry, a batch a transaction; a bad line
 * is named and nothing of its batch is written. */
Test(cli, append_jsonl_names_a_bad_line_and_writes_nothing_of_its_batch)
{
    char *dir = tu_tmpdir();
    char path[4096];
    snprintf(path, sizeof(path), "%s/in.jsonl", dir);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    for (int i = 0; i < 5000; i++)
        cr_assert_eq(fo_buf_printf(&b,
                                   "{\"actor\":\"agent\",\"kind\":\"step\","
                                   "\"payload\":{\"i\":%d}}\n\n",
                                   i),
                     FO_OK);
    cr_assert_eq(tu_write_file(path, b.data, b.len), 0);
    char ld[4096];
    snprintf(ld, sizeof(ld), "%s/l", dir);
    struct tu_run r = tu_forumv(NULL, "--ledger", ld, "--json", "ledger",
                                "append", "--jsonl", path, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o = tu_run_json(&r);
    cr_assert_eq(tu_num(o, "appended"), 5000);
    cJSON_Delete(o);
    tu_run_free(&r);
    /* a bad kind on line 4 of a new file: its batch is not written */
    const char *bad = "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":1}\n"
                      "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":2,"
                      "\"parent\":4999}\n"
                      "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":3}\n"
                      "{\"actor\":\"a\",\"kind\":\"NO GOOD\",\"payload\":4}\n";
    r = tu_forumv(bad, "--ledger", ld, "ledger", "append", "--jsonl", "-",
                  NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "line 4"), "%s", r.err);
    tu_run_free(&r);
    /* a parent that is not on record yet, and an unknown field */
    r = tu_forumv("{\"actor\":\"a\",\"kind\":\"k\",\"payload\":1,"
                  "\"parent\":5000}\n",
                  "--ledger", ld, "ledger", "append", "--jsonl", "-", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "line 1") && strstr(r.err, "parent"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv("{\"actor\":\"a\",\"kind\":\"k\",\"payload\":1,\"x\":1}\n",
                  "--ledger", ld, "ledger", "append", "--jsonl", "-", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", ld, "--json", "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    o = tu_run_json(&r);
    cr_assert_eq(tu_num(o, "entries"), 5000);
    cJSON_Delete(o);
    tu_run_free(&r);
    fo_buf_release(&b);
    tu_rmrf(dir);
}

/* Backup while a daemon serves (and takes appends), restore that checks
 * first: a tampered copy replaces nothing. */
Test(cli, backup_online_and_restore_verifies_first)
{
    char *root = tu_tmpdir();
    char dir[4096], dir2[4096], bk[4096], bad[4096];
    snprintf(dir, sizeof(dir), "%s/l", root);
    snprintf(dir2, sizeof(dir2), "%s/l2", root);
    snprintf(bk, sizeof(bk), "%s/b.db", root);
    snprintf(bad, sizeof(bad), "%s/bad.db", root);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "serve", "start", "--port", "0", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    for (int i = 0; i < 20; i++) {
        r = tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                      "--kind", "k", "--payload", "{\"i\":1}", NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        tu_run_free(&r);
    }
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "backup", bk,
                  NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o = tu_run_json(&r);
    cr_assert_eq(tu_num(o, "entries"), 20);
    cJSON_Delete(o);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "backup", bk, NULL);
    cr_assert_eq(r.status, 2, "an existing FILE is kept: %s", r.err);
    tu_run_free(&r);
    /* not while a daemon serves the dir */
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "restore", bk, "--replace",
                  NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "stop it first"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "stop", NULL);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir2, "ledger", "restore", bk, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir2, "--json", "verify", "--deep", NULL);
    o = tu_run_json(&r);
    cr_assert_eq(tu_num(o, "entries"), 20);
    cJSON_Delete(o);
    tu_run_free(&r);
    /* a tampered copy: an entry's actor changed in the file */
    size_t n = 0;
    char *data = tu_read_file(bk, &n);
    cr_assert_not_null(data);
    sqlite3 *db = NULL;
    cr_assert_eq(tu_write_file(bad, data, n), 0);
    free(data);
    cr_assert_eq(sqlite3_open(bad, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "UPDATE entries SET actor='z' WHERE seq=3",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);
    r = tu_forumv(NULL, "--ledger", dir2, "ledger", "restore", bad, "--replace",
                  NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "nothing was replaced"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir2, "verify", NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(root);
}

/* A command whose output cannot be written fails (exit 3, a reason on
 * stderr), as git does: `forum ledger show --json > /dev/full`. */
Test(cli, output_that_cannot_be_written_is_an_error)
{
    char *dir = tu_tmpdir();
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                  "--kind", "k", "--payload", "{}", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    const char *cmds[] = {"ledger show --json", "ledger show", "--help",
                          "version --json", "ledger verify"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        char sh[2048], errp[700];
        snprintf(errp, sizeof(errp), "%s/err.txt", dir);
        snprintf(sh, sizeof(sh), "%s --ledger %s %s > /dev/full 2> %s",
                 FORUM_BIN, dir, cmds[i], errp);
        int st = system(sh);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3,
                  "forum %s > /dev/full: status %d", cmds[i], st);
        cr_assert(tu_file_has(errp, "cannot write the output"), "%s", cmds[i]);
    }
    tu_rmrf(dir);
}

/* export → import makes a ledger with the same hashes and root; a changed
 * body, a cut file or an existing ledger are refused and leave nothing. */
Test(cli, export_import_round_trip_and_tampering)
{
    char *dir = tu_tmpdir();
    char a[600], b[600], x[600], y[600], db[700];
    snprintf(a, sizeof(a), "%s/a", dir);
    snprintf(b, sizeof(b), "%s/b", dir);
    snprintf(x, sizeof(x), "%s/x.jsonl", dir);
    snprintf(y, sizeof(y), "%s/y.jsonl", dir);
    for (int i = 0; i < 5; i++) {
        char p[64];
        snprintf(p, sizeof(p), "{\"n\":%d,\"s\":\"caf\\u00e9\"}", i);
        struct tu_run r =
            tu_forumv(NULL, "--ledger", a, "ledger", "append", "--actor", "a",
                      "--kind", "k", "--payload", p, NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        tu_run_free(&r);
    }
    struct tu_run r = tu_forumv(NULL, "--ledger", a, "ledger", "redact", "1",
                                "--reason", "test", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", a, "ledger", "export", "-o", x, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", b, "--json", "ledger", "import", x, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    /* the same entries, hashes and root; the redacted body stays redacted */
    struct tu_run ha =
        tu_forumv(NULL, "--ledger", a, "--json", "ledger", "checkpoint", NULL);
    struct tu_run hb =
        tu_forumv(NULL, "--ledger", b, "--json", "ledger", "checkpoint", NULL);
    cJSON *ca = tu_run_json(&ha), *cb = tu_run_json(&hb);
    cr_assert_str_eq(tu_str(ca, "root"), tu_str(cb, "root"));
    cr_assert_eq(tu_num(ca, "size"), 6);
    cJSON_Delete(ca);
    cJSON_Delete(cb);
    tu_run_free(&ha);
    tu_run_free(&hb);
    r = tu_forumv(NULL, "--ledger", b, "ledger", "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "1 redacted"), "%s", r.out);
    tu_run_free(&r);
    /* into a data dir that has a ledger: refused */
    r = tu_forumv(NULL, "--ledger", b, "ledger", "import", x, NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    tu_run_free(&r);
    /* a changed body: exit 1, naming the entry; nothing is left */
    char *text = tu_read_file(x, NULL);
    char *at = strstr(text, "\"n\":3");
    cr_assert_not_null(at);
    at[4] = '7';
    cr_assert_eq(tu_write_file(y, text, strlen(text)), 0);
    char c[600];
    snprintf(c, sizeof(c), "%s/c", dir);
    r = tu_forumv(NULL, "--ledger", c, "ledger", "import", y, NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "entry 3"), "%s", r.err);
    tu_run_free(&r);
    snprintf(db, sizeof(db), "%s/ledger.db", c);
    cr_assert_neq(access(db, F_OK), 0, "a failed import left a ledger");
    /* a cut file (no end line): exit 2 */
    at[4] = '3';
    *strrchr(text, '{') = '\0';
    cr_assert_eq(tu_write_file(y, text, strlen(text)), 0);
    r = tu_forumv(NULL, "--ledger", c, "ledger", "import", y, NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "no end line"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_neq(access(db, F_OK), 0, "a failed import left a ledger");
    /* a line that is not JSON names its line */
    cr_assert_eq(tu_write_file(y,
                               "{\"forum_export\":1,\"origin\":\"o\","
                               "\"from\":0}\nnot json\n",
                               48),
                 0);
    r = tu_forumv(NULL, "--ledger", c, "ledger", "import", y, NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "line 2"), "%s", r.err);
    tu_run_free(&r);
    free(text);
    tu_rmrf(dir);
}

/* A ledger in a directory the reader cannot write (a backup mounted
 * read-only, an auditor's account): verify and show read it; a ledger the
 * reader may not read is a permission error, not "damaged" (issue 18,
 * defect 6). */
Test(cli, a_read_only_data_dir_is_read_and_permissions_are_named)
{
    char *dir = tu_tmpdir();
    char led[700], db[720], sh[2400], outp[740];
    snprintf(led, sizeof(led), "%s/ro", dir);
    snprintf(db, sizeof(db), "%s/ledger.db", led);
    snprintf(outp, sizeof(outp), "%s/out.txt", dir);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", led, "ledger", "append", "--actor", "a",
                  "--kind", "k", "--payload", "{}", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    /* as root, read as an unprivileged user (root may write anywhere) */
    const char *as = geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 "
                                      "--clear-groups "
                                    : "";
    cr_assert_eq(chmod(dir, 0755), 0);
    cr_assert_eq(chmod(db, 0444), 0);
    cr_assert_eq(chmod(led, 0555), 0);
    snprintf(sh, sizeof(sh), "%s%s --ledger %s ledger verify > %s 2>&1", as,
             FORUM_BIN, led, outp);
    int st = system(sh);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st,
              tu_read_file(outp, NULL));
    cr_assert(tu_file_has(outp, "ok: 1 entries verified"));
    /* not readable: named as a permission problem */
    if (geteuid() == 0) {
        cr_assert_eq(chmod(db, 0400), 0);
        st = system(sh);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3, "status %d", st);
        cr_assert(tu_file_has(outp, "permission denied"), "%s",
                  tu_read_file(outp, NULL));
    }
    cr_assert_eq(chmod(led, 0700), 0);
    tu_rmrf(dir);
}

/* summary, get and chain print text for people; --json the objects. */
Test(cli, summary_get_and_chain_print_text_for_people)
{
    char *dir = tu_tmpdir();
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "alice",
                  "--kind", "note", "--payload", "{}", NULL);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "bob",
                  "--kind", "reply", "--payload", "{\"x\":1}", "--parent", "0",
                  NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "summary", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "entries   2, head ") &&
                  strstr(r.out, "by kind    note 1, reply 1") &&
                  strstr(r.out, "by actor   alice 1, bob 1"),
              "%s", r.out);
    cr_assert_null(strchr(r.out, '{'), "JSON without --json: %s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "get", "1", NULL);
    cr_assert(
        strstr(r.out, "seq      1\n") && strstr(r.out, "actor    bob\n") &&
            strstr(r.out, "parent   0\n") &&
            strstr(r.out, "body     present\n") && strstr(r.out, "time     20"),
        "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "chain", "1", NULL);
    cr_assert(!strncmp(r.out, "0  note  alice  ", 16) &&
                  strstr(r.out, "\n  -> 1  reply  bob  "),
              "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "summary", NULL);
    cJSON *o = tu_run_json(&r);
    cr_assert_eq(tu_num(o, "entries"), 2);
    cJSON_Delete(o);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* A data dir whose files would not fit PATH_MAX is refused where it comes
 * in (never a path cut short): by the CLI, and by ledger_open for callers
 * that are not the CLI. */
Test(cli, an_over_long_data_dir_is_refused)
{
    char dir[3200] = "/tmp/";
    for (size_t n = 5; n + 11 < 3150; n += 11)
        memcpy(dir + n, "abcdefghij/", 12);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "at most 3072"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "--check", NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    tu_run_free(&r);
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err),
                 FO_E_INVALID);
    cr_assert_null(l);
    cr_assert(strstr(err.msg, "3072"), "%s", err.msg);
}

/* A command line that is a usage error, and what stderr must say (NULL:
 * "unknown option" with no guess). */
struct usage_case {
    const char *argv[10];
    const char *says;
};

/* Runs each case on the data dir missing with stdin in (may be NULL): exit
 * 2, the message on stderr, nothing on stdout, and no data dir made. */
static void expect_usage_errors(const struct usage_case *cs, size_t n,
                                const char *missing, const char *in)
{
    for (size_t i = 0; i < n; i++) {
        struct tu_run r =
            run_list(missing, in, in ? strlen(in) : 0, NULL, cs[i].argv);
        cr_assert_eq(r.status, 2, "%s %s: exit %d: %s", cs[i].argv[0],
                     cs[i].argv[1], r.status, r.err);
        if (cs[i].says) {
            must_contain(r.err, cs[i].says, cs[i].argv[1]);
        } else {
            cr_assert_null(strstr(r.err, "did you mean"), "%s", r.err);
            must_contain(r.err, "unknown option", cs[i].argv[1]);
        }
        cr_assert_eq(r.out_len, 0, "%s", r.out);
        tu_run_free(&r);
        cr_assert(!exists(missing), "%s %s made the data dir", cs[i].argv[0],
                  cs[i].argv[1]);
    }
}

/* A mistyped option names the one meant, exit 2, before anything is opened
 * or written; a known option without its value and --X=V say so; an option
 * nothing is near gets no guess. */
Test(cli, did_you_mean_for_options)
{
    static const struct usage_case cases[] = {
        {{"ledger", "show", "--limt", "5"},
         "ledger show: unknown option --limt; did you mean --limit?"},
        {{"ledger", "replay", "3", "--form", "0"}, "did you mean --from?"},
        {{"ledger", "verify", "--dep"}, "did you mean --deep?"},
        {{"ledger", "append", "--actr", "a"}, "did you mean --actor?"},
        {{"ledger", "tail", "--knd", "request"}, "did you mean --kind?"},
        {{"ledger", "get", "--jsno"}, "did you mean --json?"},
        {{"ledger", "export", "-limit"}, "unknown option -limit"},
        {{"run", "list", "--stat", "done"},
         "run list: unknown option --stat; did you mean --state?"},
        {{"run", "wait", "3", "--timeuot", "5"}, "did you mean --timeout?"},
        {{"submit", "--chat-ur", "http://127.0.0.1:1", "--model", "m", "hi"},
         "submit: unknown option --chat-ur; did you mean --chat-url?"},
        {{"plan", "--roaster", "f.json", "hi"}, "did you mean --roster?"},
        {{"serve", "--prot", "8080"},
         "serve: unknown option --prot; did you mean --port?"},
        {{"serve", "strat"}, "did you mean `forum serve start`?"},
        {{"gate", "approve", "1", "0", "--aprover", "bob"},
         "gate approve: unknown option --aprover; did you mean "
         "--approver?"},
        {{"gate", "list", "--rn", "3"}, "did you mean --run?"},
        {{"session", "fork", "s", "--att", "1", "--into", "t"},
         "did you mean --at?"},
        {{"session", "lst"}, "did you mean `forum session list`?"},
        {{"run", "strat", "x"},
         "run: unknown command strat; did you mean "
         "`forum run start`?"},
        {{"gate", "aprove", "1", "0"}, "did you mean `forum gate approve`?"},
        {{"witness", "cosgn"}, "did you mean `forum witness cosign`?"},
        {{"run", "zzzzzz"},
         "run: unknown command zzzzzz (start, get, cancel, wait, list or "
         "show)"},
        {{"mcp", "--admn"},
         "mcp: unknown option --admn; did you mean --admin?"},
        {{"ledger", "show", "--limit"}, "ledger show: --limit needs a value"},
        {{"ledger", "show", "--limit=5"},
         "ledger show: give the value after a space: --limit 5"},
        {{"ledger", "show", "--json=1"}, "--json takes no value here"},
        /* nothing near: no guess */
        {{"ledger", "show", "--frobnicate"}, NULL},
        {{"run", "list", "--zzz", "1"}, NULL},
        {{"serve", "--qqqqqq", "1"}, NULL},
        {{"ledger", "tail", "-x"}, NULL},
    };
    char *dir = tu_tmpdir();
    char missing[PATH_MAX];
    path_in(missing, sizeof(missing), dir, "none");
    expect_usage_errors(cases, sizeof(cases) / sizeof(cases[0]), missing, NULL);
    /* with --json the error object is the last line, code usage */
    const char *const args[] = {"--json", "run", "list", "--stat", "x", NULL};
    struct tu_run r = run_list(missing, NULL, 0, NULL, args);
    cr_assert_eq(r.status, 2);
    const char *last = strstr(r.err, "{\"code\":\"usage\"");
    cr_assert_not_null(last, "%s", r.err);
    must_contain(last, "did you mean --state?", "--json error");
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* The tables of run start, route, run-plan, bench, import, export, docs
 * and version: a misspelt flag gets a did-you-mean from the table, a
 * missing value and a value out of range are usage errors (exit 2, no data
 * dir made); run start still refuses the daemon's flags with the reason
 * (hidden rows: parsed, but neither suggested nor completed); a page of
 * docs takes no options, and completion its shell. */
Test(cli, option_table_orch)
{
    static const struct usage_case cases[] = {
        {{"run", "start", "x", "--max-sconds", "3"},
         "run start: unknown option --max-sconds; did you mean "
         "--max-seconds?"},
        {{"run", "start", "x", "--sesion", "a"}, "did you mean --session?"},
        {{"route", "--rostr", "f", "x"},
         "route: unknown option --rostr; did you mean --roster?"},
        {{"run-plan", "p.json", "--max-paralel", "2"},
         "run-plan: unknown option --max-paralel; did you mean "
         "--max-parallel?"},
        {{"import", "otel", "f.json", "--nam", "n"},
         "import: unknown option --nam; did you mean --name?"},
        {{"version", "--jsn"}, "version: unknown option --jsn"},
        {{"run", "start", "x", "--max-seconds"},
         "run start: --max-seconds needs a value"},
        {{"run", "start", "x", "--max-total-tokens"},
         "run start: --max-total-tokens needs a value"},
        {{"run-plan", "p.json", "--env"}, "run-plan: --env needs a value"},
        {{"export", "otel", "1", "-o"}, "export: -o needs a value"},
        {{"import", "otel", "f.json", "--name"},
         "import: --name needs a value"},
        {{"run", "start", "x", "--max-model-calls", "0"},
         "run start: --max-model-calls 0: 1 to 1000"},
        {{"run", "start", "x", "--max-seconds", "86401"},
         "run start: --max-seconds 86401: 1 to 86400"},
        {{"run-plan", "p.json", "--timeout", "0"},
         "run-plan: --timeout 0: 1 to 86400"},
        {{"run-plan", "p.json", "--max-parallel", "0"},
         "run-plan: --max-parallel 0: 1 to "},
        {{"run", "start", "x", "--compaction", "keep"},
         "run start: --compaction: drop or summary"},
        {{"run", "start", "x", "--gate", "nope"}, "run start: --gate nope"},
        /* the daemon's flags, refused with the reason, value or not */
        {{"run", "start", "x", "--cmd", "echo"},
         "run start: --cmd: the daemon runs the request with its own "
         "configuration; give --cmd to `forum serve`"},
        {{"run", "start", "--api", "x"}, "run start: --api: the daemon runs"},
        {{"run", "start", "x", "--cmd=echo"},
         "run start: --cmd: the daemon runs"},
        {{"run", "start", "x", "--timeout"},
         "run start: --timeout: the daemon runs"},
        {{"run", "start"}, "run start: no REQUEST"},
        {{"route", "--roster", "f"}, "route: no TEXT"},
        {{"run-plan", "a", "b"}, "run-plan: more than one FILE"},
        {{"run-plan", "a", "--env", "=x"}, "run-plan: --env =x: NAME[=VALUE]"},
        {{"run-plan", "a", "--allow", ","}, "run-plan: --allow: no category"},
        {{"bench", "a"}, "bench: needs two ledger dirs A B"},
        {{"bench", "a", "b", "c"}, "bench: unexpected argument c"},
        {{"import", "otle", "f.json"}, "did you mean otel?"},
        {{"import", "otel", "a", "b"}, "import: unexpected argument b"},
        {{"export", "otel", "x"}, "export: x: not a run id"},
        {{"export", "otel", "1", "2"}, "export: unexpected argument 2"},
        {{"version", "now"}, "version: unexpected argument now"},
        {{"docs", "http", "mcp"}, "docs http: unexpected argument mcp"},
        {{"docs", "man", "--deep"}, "docs man: unknown option --deep"},
        {{"docs", "completion", "fish"}, "docs completion: bash or zsh"},
        {{"docs", "completion"}, "docs completion: bash or zsh"},
        {{"docs", "completion", "bash", "zsh"},
         "docs completion: unexpected argument zsh"},
        {{"docs", "rpc"}, "docs: rpc: not a page"},
        {{"docs"}, "docs: which page?"},
    };
    char *dir = tu_tmpdir();
    char missing[PATH_MAX];
    path_in(missing, sizeof(missing), dir, "none");
    expect_usage_errors(cases, sizeof(cases) / sizeof(cases[0]), missing, NULL);
    /* a hidden row is never suggested */
    const char *const near[] = {"run", "start", "x", "--chat-ur", "u", NULL};
    struct tu_run r = run_list(missing, NULL, 0, NULL, near);
    cr_assert_eq(r.status, 2, "%s", r.err);
    must_contain(r.err, "run start: unknown option --chat-ur", "--chat-ur");
    cr_assert_null(strstr(r.err, "--chat-url"), "%s", r.err);
    tu_run_free(&r);
    /* help wins; a valid line still runs: the words are joined */
    const char *const help[] = {"run", "start", "--cmd", "--help", NULL};
    r = run_list(missing, NULL, 0, NULL, help);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "usage: forum run start REQUEST...", "help");
    tu_run_free(&r);
    const char *const route[] = {"--json", "route",    "add", "a",
                                 "login",  "endpoint", NULL};
    r = run_list(missing, NULL, 0, NULL, route);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "\"decided\"", "route");
    tu_run_free(&r);
    const char *const ver[] = {"--json", "version", NULL};
    r = run_list(missing, NULL, 0, NULL, ver);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "{\"version\":", "version --json");
    tu_run_free(&r);
    cr_assert(!exists(missing));
    /* the completions list the tables' flags, never the hidden ones */
    const char *const comp[] = {"docs", "completion", "bash", NULL};
    r = run_list(missing, NULL, 0, NULL, comp);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out,
                 "\"run start\") w=\"--max-model-calls --max-seconds --gate",
                 "completion");
    must_contain(r.out, "\"import otel\") w=\"--name\"", "completion");
    must_contain(r.out, "\"export otel\") w=\"-o\"", "completion");
    must_contain(r.out, "\"route \"*) w=\"--roster\"", "completion");
    const char *arm = strstr(r.out, "\"run start\")");
    cr_assert_not_null(arm);
    char line[1024];
    snprintf(line, sizeof(line), "%.*s", (int)strcspn(arm, "\n"), arm);
    cr_assert_null(strstr(line, "--cmd"), "%s", line);
    cr_assert_null(strstr(line, "--api"), "%s", line);
    tu_run_free(&r);
    /* the man page lists import's --name once, with its help */
    const char *const man[] = {"docs", "man", NULL};
    r = run_list(missing, NULL, 0, NULL, man);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *imp = strstr(r.out, ".SS import\n");
    cr_assert_not_null(imp);
    const char *exp = strstr(imp, ".SS export\n");
    cr_assert_not_null(exp);
    const char *opts =
        strstr(imp, "Options (from its table):\n.nf\n  --name NAME");
    cr_assert(opts && opts < exp, "import lists no --name");
    const char *again = strstr(opts + 1, "Options (from its table)");
    cr_assert(!again || again > exp, "import lists its options twice");
    cr_assert_null(strstr(r.out, ".SS import otel"), "import otel repeated");
    tu_run_free(&r);
    cr_assert(!exists(missing));
    tu_rmrf(dir);
}

/* The proof and witness commands parse through tables (ledger append,
 * consistency, cosign, witness; verify-bundle; witness keygen|cosign; forum
 * verify, one table for the ledger form and --tiles): a misspelt flag gets
 * its did-you-mean, a missing value, a value out of range and the
 * exclusions are usage errors before anything is written or made (no data
 * dir, no key); valid calls still work; the man page and the completions
 * list verify's --tiles flags. */
Test(cli, option_table_proof)
{
    static const struct usage_case cases[] = {
        {{"ledger", "append", "--actr", "a"},
         "ledger append: unknown option --actr; did you mean --actor?"},
        {{"ledger", "append", "--actor", "a", "--parent"},
         "ledger append: --parent needs a value"},
        {{"ledger", "append", "--actor", "a", "--kind", "k", "--payload", "{}",
          "--parent", "x"},
         "ledger append: --parent x: not a seq"},
        {{"ledger", "append", "--jsonl", "-", "--actor", "a"},
         "append: --jsonl takes its entries from the file"},
        {{"ledger", "append", "--payload", "-", "--kind", "k"},
         "append: --actor, --kind and --payload are required"},
        {{"ledger", "consistency", "1", "2", "3"},
         "ledger consistency: unexpected argument 3"},
        {{"ledger", "consistency", "x"},
         "ledger consistency: unexpected argument x"},
        {{"ledger", "cosign", "n", "--jsno"},
         "ledger cosign: unknown option --jsno; did you mean --json?"},
        {{"ledger", "witness", "lst"},
         "ledger witness: unknown command lst; did you mean `forum ledger "
         "witness list`?"},
        {{"ledger", "witness", "add"}, "witness add: one VKEY is needed"},
        {{"ledger", "witness", "list", "x"},
         "ledger witness list: unexpected argument x"},
        {{"verify-bundle", "b.json", "--vkye", "k"},
         "verify-bundle: unknown option --vkye; did you mean --vkey?"},
        {{"verify-bundle", "b.json", "--vkey"},
         "verify-bundle: --vkey needs a value"},
        {{"verify-bundle", "b.json"},
         "verify-bundle: FILE and --vkey KEY are required"},
        {{"witness", "keygen", "w.example/w1", "--ot", "k"},
         "witness keygen: unknown option --ot; did you mean --out?"},
        {{"witness", "keygen", "w.example/w1", "--out"},
         "witness keygen: --out needs a value"},
        {{"witness", "cosign", "--key", "@k", "--vkey", "v", "n", "--tim", "3"},
         "witness cosign: unknown option --tim; did you mean --time?"},
        {{"witness", "cosign", "--key", "@k", "--vkey", "v", "n", "--time",
          "-1"},
         "witness cosign: --time -1: POSIX seconds"},
        {{"witness", "cosign", "--key", "@k", "n"},
         "witness cosign: --key KEY, --vkey LOGKEY and NOTE are required"},
        {{"verify", "--tile", "d", "--vkey", "k"},
         "verify: unknown option --tile; did you mean --tiles?"},
        {{"verify", "--tiles", "d", "--vkey"}, "verify: --vkey needs a value"},
        {{"verify", "--tiles", "d", "--vkey", "k", "--witness", "w",
          "--min-witnesses", "65"},
         "verify: --min-witnesses 65: 0 to 64"},
        {{"verify", "--tiles", "d", "--vkey", "k", "--index", "x"},
         "verify: --index x: not a seq"},
        {{"verify", "--tiles", "d", "--vkey", "k", "--witness", "w",
          "--min-witnesses", "2"},
         "verify: --min-witnesses 2 of 1 named"},
        {{"verify", "--tiles", "d"}, "verify: --tiles and --vkey are required"},
        {{"verify", "--tiles", "d", "--vkey", "k", "--deep"},
         "verify: --deep checks a ledger, not --tiles"},
        {{"verify", "--old", "n"}, "verify: --old needs --tiles"},
        /* the ledger form keeps its own rules */
        {{"verify", "--witness", "w"}, "verify: --witness needs --checkpoint"},
        {{"verify", "--dep"},
         "verify: unknown option --dep; did you mean --deep?"},
    };
    char *dir = tu_tmpdir();
    char missing[PATH_MAX], key[PATH_MAX];
    path_in(missing, sizeof(missing), dir, "none");
    path_in(key, sizeof(key), dir, "k");
    /* stdin holds an entry nobody may read on a usage error */
    expect_usage_errors(cases, sizeof(cases) / sizeof(cases[0]), missing,
                        "{\"actor\":\"a\",\"kind\":\"k\"}\n");
    /* a usage error makes no key */
    const char *kg[] = {"witness", "keygen", "w.example/w1", "--out", key,
                        "--ott",   NULL};
    struct tu_run r = run_list(missing, NULL, 0, NULL, kg);
    cr_assert_eq(r.status, 2, "%s", r.err);
    must_contain(r.err, "did you mean --out?", "keygen");
    tu_run_free(&r);
    cr_assert(!exists(key), "keygen made %s on a usage error", key);
    /* valid calls still work: append with --parent and --payload -,
     * consistency A B, keygen */
    char *led = ledger_with(3);
    const char *const app[] = {"--json", "ledger",    "append", "--actor",
                               "a",      "--kind",    "note",   "--parent",
                               "1",      "--payload", "-",      NULL};
    r = run_list(led, "{\"n\":9}", 7, NULL, app);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *e = tu_run_json(&r);
    cr_assert_eq(cJSON_GetObjectItem(e, "parent")->valuedouble, 1);
    cJSON_Delete(e);
    tu_run_free(&r);
    const char *const con[] = {"ledger", "consistency", "1", "4", NULL};
    r = run_list(led, NULL, 0, NULL, con);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "size 1 is a prefix of the tree of size 4",
                 "consistency");
    tu_run_free(&r);
    kg[5] = NULL;
    r = run_list(missing, NULL, 0, NULL, kg);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "w.example/w1+", "keygen");
    tu_run_free(&r);
    cr_assert(exists(key));
    /* verify's one table: the man page and the completions list --tiles */
    const char *const man[] = {"docs", "man", NULL};
    r = run_list(missing, NULL, 0, NULL, man);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "forum verify --tiles DIR|URL --vkey KEY", "man");
    must_contain(r.out, "  --tiles DIR|URL", "man");
    must_contain(r.out, "  --index I", "man");
    tu_run_free(&r);
    const char *const comp[] = {"docs", "completion", "bash", NULL};
    r = run_list(missing, NULL, 0, NULL, comp);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out,
                 "\"verify \"*) w=\"--deep --checkpoint --tiles --ca-file "
                 "--vkey --index --old --witness --min-witnesses\"",
                 "completion");
    must_contain(r.out, "\"witness cosign\") w=\"--key --vkey --time\"",
                 "completion");
    tu_run_free(&r);
    cr_assert(!exists(missing));
    tu_rmrf(led);
    tu_rmrf(dir);
}

/* serve, its subcommands and mcp parse through tables: each subcommand
 * takes only its own flags (stop --timeout, logs -n, status none; start the
 * daemon's, which it passes on, but not the hidden --ready-fd), the values
 * are checked as before, and nothing is made on a usage error. */
Test(cli, option_table_serve)
{
    static const struct usage_case cases[] = {
        {{"serve", "--chek"},
         "serve: unknown option --chek; did you mean --check?"},
        {{"serve", "start", "--wrokers", "2"},
         "serve start: unknown option --wrokers; did you mean --workers?"},
        {{"serve", "stop", "--timout", "3"},
         "serve stop: unknown option --timout; did you mean --timeout?"},
        {{"mcp", "--rooster", "f.json"},
         "mcp: unknown option --rooster; did you mean --roster?"},
        {{"serve", "--port"}, "serve: --port needs a value"},
        {{"serve", "logs", "-n"}, "serve logs: -n needs a value"},
        {{"mcp", "--print-config"}, "mcp: --print-config needs a value"},
        {{"serve", "--port", "65536"},
         "serve: --port 65536: not a port (0-65535)"},
        {{"serve", "--workers", "0"}, "serve: --workers 0: 1 to 64"},
        {{"serve", "--checkpoint-ms", "86400001"},
         "serve: --checkpoint-ms 86400001: 0 to 86400000"},
        {{"serve", "start", "--lease-s", "3601"},
         "serve start: --lease-s 3601: 1 to 3600"},
        {{"serve", "stop", "--timeout", "0"},
         "serve stop: --timeout 0: 1 to 3600"},
        {{"serve", "logs", "-n", "0"}, "serve logs: -n 0: 1 to 1000000"},
        /* each subcommand has its own flags */
        {{"serve", "stop", "--port", "1"}, "serve stop: unknown option --port"},
        {{"serve", "status", "-n", "3"}, "serve status: unknown option -n"},
        {{"serve", "logs", "--timeout", "3"},
         "serve logs: unknown option --timeout"},
        {{"serve", "--timeout", "3"}, "serve: unknown option --timeout"},
        /* the daemon's fd is start's to give, never a user's */
        {{"serve", "start", "--ready-fd", "5"},
         "serve start: unknown option --ready-fd"},
        {{"serve", "--ready-fd", "2"}, "serve: --ready-fd 2: bad fd"},
        /* the checks after the table still hold */
        {{"serve", "--workspace", "rel", "--check"},
         "serve: --workspace rel: an absolute path"},
        {{"serve", "start", "--host", ""}, "serve start: --host: empty"},
        {{"serve", "--sandbox", "docker"},
         "serve: --sandbox docker: bwrap or none"},
        {{"serve", "--gate", "lane:", "--check"}, "serve: --gate lane:"},
        {{"mcp", "--print-config", "emacs"},
         "mcp: --print-config emacs: claude-desktop, vscode, cursor or "
         "claude-code"},
        {{"mcp", "now"}, "mcp: unexpected argument now"},
    };
    char *dir = tu_tmpdir();
    char missing[PATH_MAX];
    path_in(missing, sizeof(missing), dir, "none");
    expect_usage_errors(cases, sizeof(cases) / sizeof(cases[0]), missing, NULL);
    /* valid flags still pass: --check with the daemon's flags (0: no
     * checkpoints), and --help after a subcommand's flags */
    const char *const ok[] = {
        "serve",           "--check",    "--port",    "0",    "--no-auth",
        "--checkpoint-ms", "0",          "--sandbox", "none", "--workspace",
        "/opt/project",    "--max-runs", "5",         NULL};
    struct tu_run r = run_list(missing, NULL, 0, NULL, ok);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "configuration ok", "serve --check");
    tu_run_free(&r);
    const char *const help[] = {"serve", "logs", "-n", "3", "--help", NULL};
    r = run_list(missing, NULL, 0, NULL, help);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "usage: forum serve", "serve logs --help");
    tu_run_free(&r);
    /* the completions: serve's own flags in a catch-all arm, after an arm
     * for each subcommand (status's empty), so `serve status -` is not
     * offered the daemon's flags */
    const char *const comp[] = {"docs", "completion", "bash", NULL};
    r = run_list(missing, NULL, 0, NULL, comp);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *st = strstr(r.out, "\"serve status\") w=\"\" ;;");
    const char *all = strstr(r.out, "\"serve \"*) w=\"--check --host");
    cr_assert(st && all && st < all, "%s", r.out);
    tu_run_free(&r);
    cr_assert(!exists(missing), "serve --check or --help made the data dir");
    tu_rmrf(dir);
}

/* `ledger migrate` into a new SQLite dir: the same entries (a redacted one
 * too) and root, the companions copied 0600; a dir that holds a ledger, the
 * data dir itself and a missing --into are refused, and leave nothing. */
Test(cli, ledger_migrate_copies_the_ledger_and_its_files)
{
    char *src = ledger_with(5);
    struct tu_run r = tu_forumv(NULL, "--ledger", src, "ledger", "redact", "2",
                                "--reason", "test", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    char tok[PATH_MAX];
    path_in(tok, sizeof(tok), src, "token");
    cr_assert_eq(tu_write_file(tok, "t0k", 3), 0);
    char *dir = tu_tmpdir();
    char into[PATH_MAX];
    path_in(into, sizeof(into), dir, "copy");
    r = tu_forumv(NULL, "--ledger", src, "--json", "ledger", "migrate",
                  "--into", into, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = tu_run_json(&r);
    cr_assert_eq(tu_num(j, "entries"), 6);
    cr_assert_str_eq(tu_str(j, "store"), "sqlite");
    cJSON_Delete(j);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", into, "ledger", "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s %s", r.out, r.err);
    must_contain(r.out, "1 redacted", "verify");
    tu_run_free(&r);
    char *a = NULL, *b = NULL;
    cr_assert_eq(summary(src, &a), summary(into, &b));
    free(a);
    free(b);
    char copied[PATH_MAX];
    path_in(copied, sizeof(copied), into, "token");
    struct stat st;
    cr_assert_eq(stat(copied, &st), 0, "the token was not copied");
    cr_assert_eq(st.st_mode & 0777, 0600);
    /* refusals */
    char other[PATH_MAX];
    path_in(other, sizeof(other), dir, "other");
    const char *const again[] = {"ledger", "migrate", "--into", into, NULL};
    r = run_list(src, NULL, 0, NULL, again);
    cr_assert_eq(r.status, 2);
    must_contain(r.err, "holds a ledger already", "again");
    tu_run_free(&r);
    const char *const self[] = {"ledger", "migrate", "--into", src, NULL};
    r = run_list(src, NULL, 0, NULL, self);
    cr_assert_eq(r.status, 2);
    must_contain(r.err, "is the data dir itself", "self");
    tu_run_free(&r);
    const char *const none[] = {"ledger", "migrate", NULL};
    r = run_list(src, NULL, 0, NULL, none);
    cr_assert_eq(r.status, 2);
    must_contain(r.err, "--into DIR is required", "none");
    tu_run_free(&r);
    /* a file of the same name in the new dir stops it before anything is
     * kept: the file stays, no ledger is left */
    char keep[PATH_MAX], kept_db[PATH_MAX];
    char *dir2 = tu_tmpdir();
    path_in(keep, sizeof(keep), dir2, "token");
    cr_assert_eq(tu_write_file(keep, "mine", 4), 0);
    const char *const clash[] = {"ledger", "migrate", "--into", dir2, NULL};
    r = run_list(src, NULL, 0, NULL, clash);
    cr_assert_eq(r.status, 3, "%d %s", r.status, r.err);
    must_contain(r.err, "token", "clash");
    tu_run_free(&r);
    char *k = tu_read_file(keep, NULL);
    cr_assert_str_eq(k, "mine");
    free(k);
    path_in(kept_db, sizeof(kept_db), dir2, "ledger.db");
    cr_assert(!exists(kept_db), "a failed migrate left %s", kept_db);
    tu_rmrf(dir2);
    /* from a data dir with no ledger: nothing made */
    char missing[PATH_MAX];
    path_in(missing, sizeof(missing), dir, "missing");
    const char *const from_none[] = {"ledger", "migrate", "--into", other,
                                     NULL};
    r = run_list(missing, NULL, 0, NULL, from_none);
    cr_assert_neq(r.status, 0);
    tu_run_free(&r);
    cr_assert(!exists(other), "a failed migrate made %s", other);
    tu_rmrf(dir);
    tu_rmrf(src);
}

/* Every command and subcommand has a help of its own words: a usage line
 * and an example (exit 0, nothing on stderr). */
Test(cli, every_help_has_a_usage_and_an_example)
{
    char *dir = tu_tmpdir();
    char missing[PATH_MAX];
    path_in(missing, sizeof(missing), dir, "none");
    for (size_t i = 0; i < cli_n_commands; i++) {
        const struct cli_command *k = &cli_commands[i];
        const char *s = k->subs;
        do {
            char sub[32] = "";
            if (s) {
                size_t w = strcspn(s, " ");
                snprintf(sub, sizeof(sub), "%.*s", (int)w, s);
                s += w;
                while (*s == ' ')
                    s++;
            }
            const char *argv[] = {k->name, sub[0] ? sub : "--help",
                                  sub[0] ? "--help" : NULL, NULL};
            struct tu_run r = run_list(missing, NULL, 0, NULL, argv);
            cr_expect_eq(r.status, 0, "%s %s --help: exit %d: %s", k->name, sub,
                         r.status, r.err);
            cr_expect(strstr(r.out, "usage: forum") != NULL,
                      "%s %s --help: no usage line", k->name, sub);
            cr_expect(strstr(r.out, "example") != NULL,
                      "%s %s --help: no example", k->name, sub);
            cr_expect_eq(r.err_len, 0, "%s %s --help: %s", k->name, sub, r.err);
            tu_run_free(&r);
        } while (s && *s);
    }
    cr_assert(!exists(missing), "a --help made the data dir");
    tu_rmrf(dir);
}

/* Every command and subcommand parses through an option table (cli_opt.h),
 * so the flags the man page and the completions list are the ones parsed;
 * asking for the tables writes nothing (no data dir appears). */
Test(cli, every_command_has_an_option_table)
{
    char *dir = tu_tmpdir();
    char missing[PATH_MAX];
    path_in(missing, sizeof(missing), dir, "none");
    struct cli c = {.ledger_dir = missing, .json = 0};
    struct fo_buf out;
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    cr_assert_eq(cli_docs_untabled(&c, &out), 0);
    cr_expect_eq(out.len, 0, "parsed by hand, not from a table:\n%.*s",
                 (int)out.len, out.data ? out.data : "");
    struct stat st;
    cr_expect(stat(missing, &st) != 0, "listing the tables made %s", missing);
    fo_buf_release(&out);
    tu_rmrf(dir);
}

/* The option parser (cli/cli_opt.c) of the commands that declare their
 * options in a table: a mistyped flag is matched against the table's names,
 * a missing value, a value out of range, one --x=v, a value for a switch,
 * too many of a repeatable flag and one positional too many are usage
 * errors (exit 2, nothing opened); --help wins wherever it is; repeated
 * flags all count; the hidden flag `forum docs` lists a table with is an
 * unknown option on the command line. The completions list the tables'
 * flags. */
Test(cli, option_table_parser)
{
    static const struct usage_case cases[] = {
        /* every name of the table is a candidate, -f and --follow both */
        {{"ledger", "tail", "--folow"},
         "ledger tail: unknown option --folow; did you mean --follow?"},
        {{"gate", "edit", "1", "0", "--sett", "T1=x"},
         "gate edit: unknown option --sett; did you mean --set?"},
        {{"session", "fork", "s", "--intoo", "t", "--at", "1"},
         "did you mean --into?"},
        /* a row only one subcommand has is not the others' */
        {{"gate", "approve", "1", "0", "--reason", "r"},
         "gate approve: unknown option --reason"},
        {{"run", "list", "--state"}, "run list: --state needs a value"},
        {{"ledger", "tail", "--run"}, "ledger tail: --run needs a value"},
        {{"ledger", "show", "--limit", "0"},
         "ledger show: --limit 0: 1 to 1000"},
        {{"ledger", "tail", "-n", "10001"},
         "ledger tail: -n 10001: 0 to 10000"},
        {{"ledger", "replay", "1", "--from", "x"},
         "ledger replay: --from x: not a seq"},
        {{"run", "list", "--before=3"},
         "run list: give the value after a space: --before 3"},
        {{"ledger", "verify", "--deep=1"},
         "ledger verify: --deep takes no value"},
        {{"ledger", "replay", "1", "2"},
         "ledger replay: unexpected argument 2"},
        {{"ledger", "import", "a", "b"},
         "ledger import: unexpected argument b"},
        {{"dashboard", "now"}, "dashboard: unexpected argument now"},
        {{"ledger", "show", "--forum-list-options"},
         "ledger show: unknown option --forum-list-options"},
    };
    char *dir = tu_tmpdir();
    char missing[PATH_MAX];
    path_in(missing, sizeof(missing), dir, "none");
    expect_usage_errors(cases, sizeof(cases) / sizeof(cases[0]), missing, NULL);
    /* a repeatable flag: at most as many as the table holds (16 --kind) */
    const char *kinds[40] = {"ledger", "tail"};
    size_t nk = 2;
    for (int k = 0; k < 17; k++) {
        kinds[nk++] = "--kind";
        kinds[nk++] = "request";
    }
    kinds[nk] = NULL;
    struct tu_run r = run_list(missing, NULL, 0, NULL, kinds);
    cr_assert_eq(r.status, 2, "%s", r.err);
    must_contain(r.err, "ledger tail: at most 16 --kind", "17 --kind");
    tu_run_free(&r);
    /* help wins over a mistake before it */
    const char *const help[] = {"ledger", "show", "--limt", "--help", NULL};
    r = run_list(missing, NULL, 0, NULL, help);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "usage: forum ledger show [--limit N]", "help");
    tu_run_free(&r);
    cr_assert(!exists(missing));
    /* each --kind counts: both kinds are shown, no other */
    char *led = ledger_with(0);
    cJSON_Delete(append_ok(led, "a", "request", "{}"));
    cJSON_Delete(append_ok(led, "b", "note", "{}"));
    cJSON_Delete(append_ok(led, "c", "other", "{}"));
    const char *const two[] = {"ledger", "tail", "--kind", "request",
                               "--kind", "note", NULL};
    r = run_list(led, NULL, 0, NULL, two);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "request", "--kind request");
    must_contain(r.out, "note", "--kind note");
    cr_assert_null(strstr(r.out, "other"), "%s", r.out);
    tu_run_free(&r);
    /* the completions list the tables' flags */
    const char *const comp[] = {"docs", "completion", "bash", NULL};
    r = run_list(missing, NULL, 0, NULL, comp);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "\"ledger show\") w=\"--limit\"", "completion");
    must_contain(
        r.out,
        "\"gate edit\") w=\"--approver --note --run-seq --wave --set --edit\"",
        "completion");
    cr_assert_eq(r.err_len, 0, "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(led);
    tu_rmrf(dir);
}

/* The coordinator's plan for plan_text: three tasks in two waves, a data
 * and an order dependency, done_when as text and as an assertion. */
static const char *plan_script(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":["
               "{\"id\":\"T1\",\"agent\":\"backend\",\"instruction\":"
               "\"Add the /login endpoint to the API server:\\n check the "
               "password hash, issue a session token, answer 401 on a bad "
               "password.\",\"done_when\":\"POST /login answers 200 with a "
               "token\"},"
               "{\"id\":\"T2\",\"agent\":\"frontend\",\"instruction\":"
               "\"Add the login form\",\"depends_on\":[\"T1\"],"
               "\"done_when\":[{\"contains\":\"<form\"}]},"
               "{\"id\":\"T3\",\"agent\":\"technical-writing\","
               "\"instruction\":\"Document the login flow\",\"depends_on\":"
               "[{\"id\":\"T1\",\"type\":\"order\"}]}]}";
    return "{\"lane\":\"backend\"}";
}

/* forum plan prints the plan for people: the route, then each wave's
 * tasks aligned (id, agent, the instruction's start on one line), what a
 * task waits for and its done_when; --json keeps the object. */
Test(cli, plan_prints_waves_and_tasks_for_people)
{
    struct fake *f = fake_start(plan_script);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
    char *dir = tu_tmpdir();
    const char *const args[] = {"plan",     "add",        "a", "login",
                                "endpoint", "--chat-url", url, "--model",
                                "m",        NULL};
    struct tu_run r = run_list(dir, NULL, 0, NULL, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *want[] = {
        "plan: 3 tasks in 2 waves; lane ",
        "model m\n",
        "witnessed: request seq 0, plan seq ",
        "\nwave 1\n"
        "  ID  AGENT              INSTRUCTION\n"
        "  T1  backend            Add the /login endpoint to the API "
        "server: check...\n"
        "                         done when: POST /login answers 200 with "
        "a "
        "token\n"
        "\nwave 2\n"
        "  ID  AGENT              INSTRUCTION\n"
        "  T2  frontend           Add the login form\n"
        "                         after T1\n"
        "                         done when: [{\"contains\":\"<form\"}]\n"
        "  T3  technical-writing  Document the login flow\n"
        "                         after T1 (order only)\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        must_contain(r.out, want[i], "forum plan");
    cr_assert_neq(r.out[0], '{', "%s", r.out); /* not JSON */
    cr_assert_null(strstr(r.err, "stub planner"), "%s", r.err);
    tu_run_free(&r);

    /* --json: the method's object, as POST /plan serves it */
    const char *const jargs[] = {"--json",     "plan", "add",     "a", "login",
                                 "--chat-url", url,    "--model", "m", NULL};
    r = run_list(dir, NULL, 0, NULL, jargs);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o = tu_run_json(&r);
    cJSON *plan = cJSON_GetObjectItemCaseSensitive(o, "plan");
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(plan, "tasks")), 3);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(plan, "waves")), 2);
    cr_assert_str_eq(tu_str(o, "model"), "m");
    cJSON_Delete(o);
    tu_run_free(&r);
    fake_stop(f);
    fake_free(f);

    /* no model: the stub's one task, and a note on stderr */
    const char *const sargs[] = {"plan", "write", "the", "docs", NULL};
    r = run_list(dir, NULL, 0, NULL, sargs);
    cr_assert_eq(r.status, 0, "%s", r.err);
    must_contain(r.out, "plan: 1 task in 1 wave;", "stub plan");
    must_contain(r.out, "  T1  ", "stub plan");
    must_contain(r.err, "stub planner", "stub plan");
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* --compaction drop|summary reaches the request's context (and so the
 * engine and any resume); anything else is a usage error. */
Test(cli, compaction_flag_reaches_the_request)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "submit", "--session",
                                "s1", "--compaction", "summary", "hello", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "body", "0", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *b = cJSON_Parse(r.out);
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(b, "body"), "context");
    cr_assert_str_eq(tu_str(ctx, "compaction"), "summary", "%s", r.out);
    cJSON_Delete(b);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "submit", "--compaction", "bogus", "x",
                  NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "drop or summary"), "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- ledger content on a terminal ---------------------------------------- */

#include <fcntl.h>
#include <poll.h>

/* Runs FORUM_BIN with args (NULL-ended) with stdout on a new terminal
 * (a pty) and returns what it printed there (malloc'd). */
static char *on_a_tty(const char *const *args)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    cr_assert_geq(m, 0);
    cr_assert_eq(grantpt(m), 0);
    cr_assert_eq(unlockpt(m), 0);
    char name[128];
    cr_assert_eq(ptsname_r(m, name, sizeof(name)), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int s = open(name, O_RDWR | O_NOCTTY);
        int null = open("/dev/null", O_RDWR);
        if (s < 0 || null < 0)
            _exit(126);
        dup2(s, 1);
        dup2(null, 0);
        dup2(null, 2);
        const char *argv[32] = {FORUM_BIN};
        for (int i = 0; args[i] && i < 30; i++)
            argv[i + 1] = args[i];
        execv(FORUM_BIN, (char *const *)argv);
        _exit(127);
    }
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    for (;;) {
        struct pollfd p = {.fd = m, .events = POLLIN};
        if (poll(&p, 1, 20000) <= 0)
            break;
        char buf[4096];
        ssize_t n = read(m, buf, sizeof(buf));
        if (n <= 0)
            break; /* EIO once the child closed its end */
        cr_assert_eq(fo_buf_append(&b, buf, (size_t)n), 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    close(m);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    cr_assert_eq(fo_buf_putc(&b, '\0'), 0);
    return fo_buf_detach(&b, NULL);
}

static void no_raw_controls(const char *out)
{
    cr_assert_null(strchr(out, '\033'), "an ESC reached the terminal: %s", out);
    cr_assert_null(strchr(out, '\007'), "a BEL reached the terminal");
    cr_assert_null(strstr(out, "\xc2\x9b"), "a C1 CSI reached the terminal");
    cr_assert_null(strstr(out, "\xe2\x80\xae"), "a bidi override reached it");
}

/* A body, a request and an answer holding terminal escapes (an OSC that
 * sets the title, a CSI, a C1 CSI, a bidi override) are shown on a
 * terminal as \uXXXX, never sent to it: ledger tail, --json ledger get
 * of a run, submit's answer and run get. Piped, the bytes are the data. */
Test(cli_tty, ledger_content_cannot_drive_the_terminal, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", NULL);
    tu_run_free(&r);
    const char *evil = "{\"t\":\"a\\u001b]0;pwned\\u0007 b\\u009b31m c"
                       "\\u202e d\"}";
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                  "--kind", "note", "--payload", evil, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    const char *tail[] = {"--ledger", dir, "ledger", "tail", NULL};
    char *out = on_a_tty(tail);
    no_raw_controls(out);
    cr_assert(strstr(out, "\\u009b31m") && strstr(out, "\\u202e"), "%s", out);
    free(out);
    /* the stub's answer echoes the request: escapes and all */
    const char *sub[] = {"--ledger", dir, "submit",
                         "hello \033]0;pwned\007 there \033[2J", NULL};
    out = on_a_tty(sub);
    no_raw_controls(out);
    cr_assert(strstr(out, "hello \\u001b]0;pwned\\u0007 there"), "%s", out);
    free(out);
    const char *get[] = {"--ledger", dir, "run", "get", "1", NULL};
    out = on_a_tty(get);
    no_raw_controls(out);
    cr_assert(strstr(out, "request: hello \\u001b]0;pwned"), "%s", out);
    free(out);
    const char *gj[] = {"--ledger", dir, "--json", "run", "get", "1", NULL};
    out = on_a_tty(gj);
    no_raw_controls(out);
    free(out);
    /* piped: the data as it is */
    r = tu_forumv(NULL, "--ledger", dir, "run", "get", "1", NULL);
    cr_assert(strstr(r.out, "hello \033]0;pwned\007 there"), "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* Ctrl-C while `forum submit` runs its run in this process: the exit
 * status of an interrupt, and a line saying what happened and where the
 * run's steps are (before, it exited 130 without a word); the run then
 * reads as interrupted. */
Test(cli_tty, ctrl_c_during_submit_says_what_happened, .timeout = 60)
{
    signal(SIGPIPE, SIG_IGN);
    atomic_store(&tu_held_hold, 1);
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir(), url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    int ep[2];
    cr_assert_eq(pipe(ep), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(ep[1], 2);
        close(ep[0]);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        execl(FORUM_BIN, FORUM_BIN, "--ledger", dir, "submit", "--chat-url",
              url, "--model", "fake", "make the schema", (char *)NULL);
        _exit(127);
    }
    close(ep[1]);
    tu_held_wait_coord(1); /* the run is in flight */
    cr_assert_eq(kill(pid, SIGINT), 0);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 130, "status %d", st);
    char err[2048];
    ssize_t n = read(ep[0], err, sizeof(err) - 1);
    close(ep[0]);
    err[n > 0 ? n : 0] = '\0';
    cr_assert(strstr(err, "forum: interrupted: the run stopped with this "
                          "process"),
              "%s", err);
    atomic_store(&tu_held_hold, 0);
    fake_stop(f);
    fake_free(f);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "run", "list", "--state",
                                "interrupted", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "make the schema"), "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}
