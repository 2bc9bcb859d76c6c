/* test_json: the strict reader, the RFC 8785 (JCS) writer and the
 * ECMAScript number form of ledger/fo_json.c. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "tests/testutil.h"

/* A byte string with an explicit length, so inputs may hold NUL. */
#define BYTES(s) s, sizeof(s) - 1

/* How much of an input a failure message shows: Criterion cannot carry a
 * megabyte of message. */
static int shown(size_t len)
{
    return len > 120 ? 120 : (int)len;
}

struct bad_input {
    const char *text;
    size_t len;
    const char *needle; /* must appear in the error message */
};

static cJSON *parse_ok(const char *text, size_t len)
{
    struct fo_err err = {0};
    cJSON *v = NULL;
    int rc = fo_json_parse(text, len, &v, &err);

    cr_assert_eq(rc, FO_OK, "parse of [%.*s] failed: %s", shown(len), text,
                 err.msg);
    cr_assert_not_null(v);
    return v;
}

/* Canonical form of a tree as a malloc'd string. */
static char *canon_tree(const cJSON *v, unsigned flags)
{
    struct fo_buf b;
    struct fo_err err = {0};

    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_json_write(v, flags, &b, &err);
    cr_assert_eq(rc, FO_OK, "write failed: %s", err.msg);
    char *s = fo_buf_detach(&b, NULL);
    cr_assert_not_null(s);
    return s;
}

static char *canon_text(const char *text)
{
    cJSON *v = parse_ok(text, strlen(text));
    char *s = canon_tree(v, 0);
    cJSON_Delete(v);
    return s;
}

static void expect_canon(const char *text, const char *want)
{
    char *got = canon_text(text);
    cr_assert_str_eq(got, want, "canon of [%.120s]", text);
    free(got);
}

static void expect_reject(const char *text, size_t len, const char *needle)
{
    struct fo_err err = {0};
    cJSON *v = NULL;
    int rc = fo_json_parse(text, len, &v, &err);

    cr_assert_eq(rc, FO_E_JSON, "[%.*s] gave %d (%s), want a JSON error",
                 shown(len), text, rc, err.msg);
    cr_assert_null(v, "out must stay unset on failure");
    cr_assert_eq(err.code, FO_E_JSON);
    cr_assert_not_null(strstr(err.msg, "invalid JSON at byte "),
                       "no offset in [%s]", err.msg);
    cr_assert_not_null(strstr(err.msg, needle),
                       "[%.*s]: message [%s] does not mention [%s]", shown(len),
                       text, err.msg, needle);
}

static void reject_all(const struct bad_input *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        expect_reject(t[i].text, t[i].len, t[i].needle);
}

static void expect_write_error(const cJSON *v, const char *needle)
{
    struct fo_buf b;
    struct fo_err err = {0};

    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_json_canon(v, &b, &err);
    cr_assert_eq(rc, FO_E_JSON, "write gave %d (%s), want a JSON error", rc,
                 err.msg);
    cr_assert_not_null(strstr(err.msg, needle),
                       "message [%s] does not mention [%s]", err.msg, needle);
    fo_buf_release(&b);
}

static char *nested(const char *open, const char *inner, const char *close,
                    int n)
{
    struct fo_buf b;

    fo_buf_init(&b, FO_BUF_UNLIMITED);
    for (int i = 0; i < n; i++)
        cr_assert_eq(fo_buf_puts(&b, open), FO_OK);
    cr_assert_eq(fo_buf_puts(&b, inner), FO_OK);
    for (int i = 0; i < n; i++)
        cr_assert_eq(fo_buf_puts(&b, close), FO_OK);
    return fo_buf_detach(&b, NULL);
}

static double from_bits(uint64_t bits)
{
    double d;

    memcpy(&d, &bits, sizeof(d));
    return d;
}

static void expect_number(double d, const char *want)
{
    char out[FO_JSON_NUM_MAX];
    int n = fo_json_number(d, out);

    cr_assert_str_eq(out, want, "%.17g", d);
    cr_assert_eq(n, (int)strlen(want));
}

/* ------------------------------------------------------------ vectors */

Test(json_canon, rfc8785_vectors)
{
    cJSON *doc = tu_vector("jcs.json");
    cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
    const cJSON *c;
    int count = 0;

    cr_assert(cJSON_IsArray(cases));
    cJSON_ArrayForEach (c, cases) {
        const char *name =
            cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
        const char *input =
            cJSON_GetObjectItemCaseSensitive(c, "input")->valuestring;
        const char *want_hex =
            cJSON_GetObjectItemCaseSensitive(c, "canonical_utf8_hex")
                ->valuestring;
        const char *want =
            cJSON_GetObjectItemCaseSensitive(c, "canonical")->valuestring;
        cr_assert_not_null(name);
        cr_assert_not_null(input);
        cr_assert_not_null(want_hex);
        cr_assert_not_null(want);

        char *got = canon_text(input);
        size_t len = strlen(got);
        char *hex = malloc(2 * len + 1);
        cr_assert_not_null(hex);
        fo_hex((const unsigned char *)got, len, hex);
        cr_assert_str_eq(hex, want_hex, "case %s: got %s", name, got);
        cr_assert_str_eq(got, want, "case %s", name);

        /* Canonical output is a fixed point. */
        char *again = canon_text(got);
        cr_assert_str_eq(again, got, "case %s not idempotent", name);
        free(again);
        free(hex);
        free(got);
        count++;
    }
    cr_assert_geq(count, 6, "only %d vectors", count);
    cJSON_Delete(doc);
}

/* ------------------------------------------------------------ numbers */

Test(json_number, rfc8785_table)
{
    static const struct {
        uint64_t bits;
        const char *want;
    } t[] = {
        {0x0000000000000000ull, "0"},
        {0x8000000000000000ull, "0"},
        {0x0000000000000001ull, "5e-324"},
        {0x8000000000000001ull, "-5e-324"},
        {0x7fefffffffffffffull, "1.7976931348623157e+308"},
        {0xffefffffffffffffull, "-1.7976931348623157e+308"},
        {0x4340000000000000ull, "9007199254740992"},
        {0xc340000000000000ull, "-9007199254740992"},
        {0x4430000000000000ull, "295147905179352830000"},
        {0x44b52d02c7e14af5ull, "9.999999999999997e+22"},
        {0x44b52d02c7e14af6ull, "1e+23"},
        {0x44b52d02c7e14af7ull, "1.0000000000000001e+23"},
        {0x444b1ae4d6e2ef4eull, "999999999999999700000"},
        {0x444b1ae4d6e2ef4full, "999999999999999900000"},
        {0x444b1ae4d6e2ef50ull, "1e+21"},
        {0x3eb0c6f7a0b5ed8cull, "9.999999999999997e-7"},
        {0x3eb0c6f7a0b5ed8dull, "0.000001"},
        {0x41b3de4355555553ull, "333333333.3333332"},
        {0x41b3de4355555554ull, "333333333.33333325"},
        {0x41b3de4355555555ull, "333333333.3333333"},
        {0x41b3de4355555556ull, "333333333.3333334"},
        {0x41b3de4355555557ull, "333333333.33333343"},
        {0xbecbf647612f3696ull, "-0.0000033333333333333333"},
        {0x43143ff3c1cb0959ull, "1424953923781206.2"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        expect_number(from_bits(t[i].bits), t[i].want);
}

Test(json_number, non_finite_is_refused)
{
    char out[FO_JSON_NUM_MAX];

    cr_assert_eq(fo_json_number(NAN, out), -1);
    cr_assert_eq(fo_json_number(INFINITY, out), -1);
    cr_assert_eq(fo_json_number(-INFINITY, out), -1);
    cr_assert_eq(fo_json_number(from_bits(0x7ff8000000000001ull), out), -1);
}

Test(json_number, es_layout)
{
    expect_number(1e20, "100000000000000000000");
    expect_number(1e21, "1e+21");
    expect_number(-1e21, "-1e+21");
    expect_number(1.5e21, "1.5e+21");
    expect_number(1e-7, "1e-7");
    expect_number(1.25e-7, "1.25e-7");
    expect_number(0.000001, "0.000001");
    expect_number(0.0000015, "0.0000015");
    expect_number(333333333.3333333, "333333333.3333333");
    expect_number(5e-324, "5e-324");
    expect_number(1.7976931348623157e308, "1.7976931348623157e+308");
    expect_number(0.1, "0.1");
    expect_number(-0.5, "-0.5");
    expect_number(1.5, "1.5");
    expect_number(123.456, "123.456");
    expect_number(1e30, "1e+30");
    expect_number(4.5, "4.5");
    expect_number(0.002, "0.002");
    expect_number(1e-27, "1e-27");
    expect_number(-0.0, "0");
    expect_number(2.2250738585072014e-308, "2.2250738585072014e-308");
}

Test(json_number, integers_never_use_exponent)
{
    expect_number(0, "0");
    expect_number(1, "1");
    expect_number(-1, "-1");
    expect_number(42, "42");
    expect_number(1732000000000000.0, "1732000000000000");
    expect_number(1732000000000123.0, "1732000000000123");
    expect_number(9007199254740991.0, "9007199254740991");
    expect_number(-9007199254740991.0, "-9007199254740991");
    expect_number(9007199254740992.0, "9007199254740992");
    expect_number(9007199254740994.0, "9007199254740994");
    expect_number(4294967296.0, "4294967296");
    expect_number(1e15, "1000000000000000");
    expect_number(123456789012345680000.0, "123456789012345680000");
}

/* At a power of two the double below is closer than the one above, so the
 * shortest decimal that reads back may not be the nearest one at that
 * length (values from Python's repr, which is shortest-unique as JS is). */
Test(json_number, powers_of_two_asymmetric_gap)
{
    expect_number(ldexp(1, 803), "5.334411546303884e+241");
    expect_number(ldexp(1, 976), "6.386688990511104e+293");
    expect_number(ldexp(1, -1017), "7.120236347223045e-307");
    expect_number(-ldexp(1, -1007), "-7.291122019556398e-304");
    expect_number(ldexp(1, -1000), "9.332636185032189e-302");
    expect_number(ldexp(1, 60), "1152921504606847000");
}

/* Every finite double prints in at most 25 bytes, reads back exactly and
 * survives the strict reader and writer unchanged. */
Test(json_number, random_round_trip)
{
    uint64_t x = 0x9E3779B97F4A7C15ull;
    char out[FO_JSON_NUM_MAX];
    int checked = 0;

    for (int i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double d = from_bits(x);
        if (!isfinite(d))
            continue;
        int n = fo_json_number(d, out);
        cr_assert_gt(n, 0);
        cr_assert_leq(n, 25, "%s", out);
        cr_assert_eq((size_t)n, strlen(out));
        char *end;
        double back = strtod(out, &end);
        cr_assert_eq(*end, '\0');
        cr_assert(back == d, "%s does not read back as %.17g", out, d);

        cJSON *v = parse_ok(out, (size_t)n);
        char *again = canon_tree(v, 0);
        cr_assert_str_eq(again, out);
        free(again);
        cJSON_Delete(v);
        checked++;
    }
    cr_assert_gt(checked, 19000);
}

/* ------------------------------------------------------------ reader */

Test(json_parse, accepts_and_decodes)
{
    cJSON *v = parse_ok(
        BYTES(" {\"s\":\"\\u20ac\\n\\/\\\"\\\\\\b\\f\\r\\t\\uD83D\\uDE02\","
              "\"n\":-12.5e1,\"t\":true,\"f\":false,\"z\":null,"
              "\"a\":[1,[],{}],\"big\":1732000000000000} \r\n\t"));
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, "s");
    cr_assert(cJSON_IsString(s));
    cr_assert_str_eq(s->valuestring,
                     "\xE2\x82\xAC\n/\"\\\b\f\r\t\xF0\x9F\x98\x82");
    cr_assert(cJSON_GetObjectItemCaseSensitive(v, "n")->valuedouble == -125.0);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "t")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "f")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(v, "z")));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(v, "a")),
                 3);
    cr_assert(cJSON_GetObjectItemCaseSensitive(v, "big")->valuedouble ==
              1732000000000000.0);
    char *c = canon_tree(v, 0);
    cr_assert_str_eq(c, "{\"a\":[1,[],{}],\"big\":1732000000000000,\"f\":false,"
                        "\"n\":-125,\"s\":\"\xE2\x82\xAC\\n/\\\"\\\\\\b\\f\\r"
                        "\\t\xF0\x9F\x98\x82\",\"t\":true,\"z\":null}");
    free(c);
    cJSON_Delete(v);
}

Test(json_parse, scalars_at_top_level)
{
    expect_canon("0", "0");
    expect_canon("-0", "0");
    expect_canon("-0.0", "0");
    expect_canon(" 1E5 ", "100000");
    expect_canon("1e+5", "100000");
    expect_canon("1.5e-3", "0.0015");
    expect_canon("1e-400", "0");
    expect_canon("9007199254740991", "9007199254740991");
    expect_canon("\"x\"", "\"x\"");
    expect_canon("true", "true");
    expect_canon("null", "null");
    expect_canon("\"\\u007f\\u2028\\u00e9\"", "\"\x7f\xE2\x80\xA8\xC3\xA9\"");
}

Test(json_parse, accepts_utf8_edges)
{
    static const struct {
        const char *text;
        size_t len;
    } t[] = {
        {BYTES("\"\xF4\x8F\xBF\xBF\"")}, /* U+10FFFF */
        {BYTES("\"\xEF\xBF\xBF\"")},     /* U+FFFF */
        {BYTES("\"\xED\x9F\xBF\"")},     /* U+D7FF */
        {BYTES("\"\xEE\x80\x80\"")},     /* U+E000 */
        {BYTES("\"\xEF\xBB\xBF\"")},     /* U+FEFF inside a string */
        {BYTES("\"\xC2\x80\"")},         /* U+0080 */
        {BYTES("\"\xF0\x90\x80\x80\"")}, /* U+10000 */
        {BYTES("\"\x7f\"")},             /* DEL is not a control in JSON */
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        cJSON *v = parse_ok(t[i].text, t[i].len);
        char *c = canon_tree(v, 0);
        cr_assert_eq(strlen(c), t[i].len);
        cr_assert_eq(memcmp(c, t[i].text, t[i].len), 0, "case %zu", i);
        free(c);
        cJSON_Delete(v);
    }
}

Test(json_parse, rejects_invalid_utf8)
{
    static const struct bad_input t[] = {
        {BYTES("\"\xC0\x80\""), "invalid UTF-8"},         /* overlong NUL */
        {BYTES("\"\xC1\xBF\""), "invalid UTF-8"},         /* overlong */
        {BYTES("\"\xE0\x80\xAF\""), "invalid UTF-8"},     /* overlong '/' */
        {BYTES("\"\xE0\x9F\xBF\""), "invalid UTF-8"},     /* overlong */
        {BYTES("\"\xF0\x80\x80\xAF\""), "invalid UTF-8"}, /* overlong */
        {BYTES("\"\xF0\x8F\xBF\xBF\""), "invalid UTF-8"}, /* overlong */
        {BYTES("\"\xED\xA0\x80\""), "invalid UTF-8"},     /* U+D800 */
        {BYTES("\"\xED\xBF\xBF\""), "invalid UTF-8"},     /* U+DFFF */
        {BYTES("\"\xED\xA0\xBD\xED\xB8\x82\""), "invalid UTF-8"}, /* CESU */
        {BYTES("\"\xF4\x90\x80\x80\""), "invalid UTF-8"},         /* U+110000 */
        {BYTES("\"\xF5\x80\x80\x80\""), "invalid UTF-8"},
        {BYTES("\"\xF8\x88\x80\x80\x80\""), "invalid UTF-8"},
        {BYTES("\"\xFF\""), "invalid UTF-8"},
        {BYTES("\"\xFE\""), "invalid UTF-8"},
        {BYTES("\"\x80\""), "invalid UTF-8"}, /* lone continuation */
        {BYTES("\"\xBF\""), "invalid UTF-8"},
        {BYTES("\"\xC3\""), "invalid UTF-8"}, /* truncated */
        {BYTES("\"\xE2\x82\""), "invalid UTF-8"},
        {BYTES("\"\xF0\x9F\x98\""), "invalid UTF-8"},
        {BYTES("\"\xE2\x82"), "invalid UTF-8"}, /* truncated at the end */
        {BYTES("\"\xC3x\""), "invalid UTF-8"},
        {BYTES("{\"\xC0\x80\":1}"), "invalid UTF-8"}, /* in a key */
        {BYTES("\xC3\xA9"), "unexpected character 0xc3"},
    };

    reject_all(t, sizeof(t) / sizeof(t[0]));
}

Test(json_parse, rejects_bom)
{
    expect_reject(BYTES("\xEF\xBB\xBF{}"), "byte order mark");
    expect_reject(BYTES("\xEF\xBB\xBF"), "byte order mark");
    expect_reject(BYTES(" \xEF\xBB\xBF{}"), "unexpected character 0xef");
}

Test(json_parse, rejects_raw_control_characters)
{
    static const struct bad_input t[] = {
        {BYTES("\"a\x01z\""), "raw control character 0x01"},
        {BYTES("\"\x1f\""), "raw control character 0x1f"},
        {BYTES("\"a\tb\""), "raw control character 0x09"},
        {BYTES("\"a\nb\""), "raw control character 0x0a"},
        {BYTES("\"a\rb\""), "raw control character 0x0d"},
        {BYTES("\"a\0b\""), "raw control character 0x00"},
        {BYTES("{\"k\x02\":1}"), "raw control character 0x02"},
    };

    reject_all(t, sizeof(t) / sizeof(t[0]));
}

Test(json_parse, rejects_escaped_nul)
{
    expect_reject(BYTES("\"\\u0000\""), "\\u0000");
    expect_reject(BYTES("\"abc\\u0000def\""), "\\u0000");
    expect_reject(BYTES("{\"\\u0000\":1}"), "\\u0000");
}

Test(json_parse, rejects_lone_surrogates)
{
    static const struct bad_input t[] = {
        {BYTES("\"\\ud800\""), "lone high surrogate"},
        {BYTES("\"\\uDBFF\""), "lone high surrogate"},
        {BYTES("\"\\ud83dx\""), "lone high surrogate"},
        {BYTES("\"\\ud83d\\u0041\""), "lone high surrogate"},
        {BYTES("\"\\ud83d\\ud83d\""), "lone high surrogate"},
        {BYTES("\"\\ud83d\\n\""), "lone high surrogate"},
        {BYTES("\"\\ud83d"), "lone high surrogate"},
        {BYTES("\"\\ud83d\\ue000\""), "lone high surrogate"},
        {BYTES("\"\\ud83d\\udc0"), "lone high surrogate"},
        {BYTES("\"\\udc00\""), "lone low surrogate"},
        {BYTES("\"\\uDFFF\""), "lone low surrogate"},
        {BYTES("\"\\ude02\\ud83d\""), "lone low surrogate"},
    };

    reject_all(t, sizeof(t) / sizeof(t[0]));
}

Test(json_parse, rejects_bad_escapes)
{
    static const struct bad_input t[] = {
        {BYTES("\"\\x41\""), "invalid escape \\'x'"},
        {BYTES("\"\\U0041\""), "invalid escape"},
        {BYTES("\"\\'\""), "invalid escape"},
        {BYTES("\"\\a\""), "invalid escape"},
        {BYTES("\"\\0\""), "invalid escape"},
        {BYTES("\"\\u12\""), "invalid \\u escape"},
        {BYTES("\"\\u123"), "invalid \\u escape"},
        {BYTES("\"\\u12G4\""), "invalid \\u escape"},
        {BYTES("\"\\u-123\""), "invalid \\u escape"},
        {BYTES("\"\\"), "unterminated string"},
        {BYTES("\"abc"), "unterminated string"},
    };

    reject_all(t, sizeof(t) / sizeof(t[0]));
}

Test(json_parse, rejects_duplicate_keys)
{
    static const struct bad_input t[] = {
        {BYTES("{\"a\":1,\"a\":2}"), "duplicate key \"a\""},
        {BYTES("{\"a\":1,\"b\":2,\"a\":1}"), "duplicate key \"a\""},
        {BYTES("{\"a\":1,\"\\u0061\":2}"), "duplicate key \"a\""},
        {BYTES("{\"\xC3\xA9\":1,\"\\u00e9\":2}"), "duplicate key \"\xC3\xA9\""},
        {BYTES("{\"\\ud83d\\ude02\":1,\"\xF0\x9F\x98\x82\":2}"),
         "duplicate key"},
        {BYTES("{\"\":1,\"\":2}"), "duplicate key \"\""},
        {BYTES("{\"x\":{\"b\":1,\"c\":[],\"b\":2}}"), "duplicate key \"b\""},
        {BYTES("[{\"q\":1},{\"q\":1,\"q\":1}]"), "duplicate key \"q\""},
    };

    reject_all(t, sizeof(t) / sizeof(t[0]));

    /* The same key at different levels or in sibling objects is fine. */
    expect_canon("{\"a\":{\"a\":{\"a\":1}},\"b\":{\"a\":2}}",
                 "{\"a\":{\"a\":{\"a\":1}},\"b\":{\"a\":2}}");
    expect_canon("[{\"a\":1},{\"a\":1}]", "[{\"a\":1},{\"a\":1}]");
    expect_canon("{\"a\":1,\"A\":2,\"a \":3}", "{\"A\":2,\"a\":1,\"a \":3}");
}

Test(json_parse, duplicate_reported_at_the_first_repeat)
{
    struct fo_err err = {0};
    cJSON *v = NULL;
    const char *text = "{\"z\":1,\"y\":2,\"y\":3,\"z\":4}";

    cr_assert_eq(fo_json_parse(text, strlen(text), &v, &err), FO_E_JSON);
    cr_assert_str_eq(err.msg, "invalid JSON at byte 13: duplicate key \"y\"");

    /* "a" sorts first, but "b" repeats first. */
    text = "{\"b\":1,\"b\":2,\"a\":3,\"a\":4}";
    cr_assert_eq(fo_json_parse(text, strlen(text), &v, &err), FO_E_JSON);
    cr_assert_str_eq(err.msg, "invalid JSON at byte 7: duplicate key \"b\"");
}

Test(json_parse, rejects_bad_numbers)
{
    static const struct bad_input t[] = {
        {BYTES("01"), "leading zero"},
        {BYTES("-01"), "leading zero"},
        {BYTES("00"), "leading zero"},
        {BYTES("[1,007]"), "leading zero"},
        {BYTES("1."), "digit expected after the decimal point"},
        {BYTES("1.e5"), "digit expected after the decimal point"},
        {BYTES("[1.]"), "digit expected after the decimal point"},
        {BYTES(".5"), "may not start with '.'"},
        {BYTES("+1"), "may not start with '+'"},
        {BYTES("-"), "digit expected after '-'"},
        {BYTES("-.5"), "digit expected after '-'"},
        {BYTES("- 1"), "digit expected after '-'"},
        {BYTES("1e"), "digit expected in the exponent"},
        {BYTES("1e+"), "digit expected in the exponent"},
        {BYTES("1E-x"), "digit expected in the exponent"},
        {BYTES("0x10"), "trailing characters"},
        {BYTES("1e400"), "number out of range"},
        {BYTES("-1e400"), "number out of range"},
        {BYTES("[1.8e308]"), "number out of range"},
        {BYTES("NaN"), "NaN is not allowed"},
        {BYTES("[NaN]"), "NaN is not allowed"},
        {BYTES("Infinity"), "Infinity is not allowed"},
        {BYTES("-Infinity"), "-Infinity is not allowed"},
        {BYTES("{\"a\":Infinity}"), "Infinity is not allowed"},
        {BYTES("nan"), "invalid literal"},
    };

    reject_all(t, sizeof(t) / sizeof(t[0]));

    /* A number too long for the reader's stack copy still overflows. */
    char *huge = nested("", "1", "0", 400);
    expect_reject(huge, strlen(huge), "number out of range");
    free(huge);
    char *tiny = nested("", "0.", "0", 500);
    size_t n = strlen(tiny);
    tiny[n - 1] = '1';
    expect_canon(tiny, "0");
    free(tiny);
}

Test(json_parse, rejects_bad_structure)
{
    static const struct bad_input t[] = {
        {BYTES("[1,]"), "unexpected character ']'"},
        {BYTES("[,1]"), "unexpected character ','"},
        {BYTES("{\"a\":1,}"), "expected a string key"},
        {BYTES("{1:2}"), "expected a string key"},
        {BYTES("{'a':2}"), "expected a string key"},
        {BYTES("{\"a\" 1}"), "expected ':'"},
        {BYTES("{\"a\"}"), "expected ':'"},
        {BYTES("[1 2]"), "expected ',' or ']'"},
        {BYTES("{\"a\":1 \"b\":2}"), "expected ',' or '}'"},
        {BYTES("["), "unexpected end of input"},
        {BYTES("[1"), "unexpected end of input"},
        {BYTES("{\"a\":"), "unexpected end of input"},
        {BYTES("{\"a\":1"), "unexpected end of input"},
        {BYTES("{"), "unexpected end of input"},
        {BYTES("tru"), "invalid literal"},
        {BYTES("True"), "unexpected character 'T'"},
        {BYTES("nul"), "invalid literal"},
        {BYTES("[undefined]"), "unexpected character 'u'"},
        {BYTES("/* c */ 1"), "unexpected character '/'"},
    };

    reject_all(t, sizeof(t) / sizeof(t[0]));
}

Test(json_parse, rejects_trailing_garbage)
{
    static const struct bad_input t[] = {
        {BYTES("{}garbage"), "trailing characters"},
        {BYTES("{} x"), "trailing characters"},
        {BYTES("1 2"), "trailing characters"},
        {BYTES("[]]"), "trailing characters"},
        {BYTES("\"a\"\"b\""), "trailing characters"},
        {BYTES("truefalse"), "trailing characters"},
        {BYTES("{}\0"), "trailing characters"},
        {BYTES("null\x0c"), "trailing characters"}, /* form feed: not ws */
    };

    reject_all(t, sizeof(t) / sizeof(t[0]));
    expect_canon(" [1] \n\t\r ", "[1]");
}

Test(json_parse, rejects_empty_input)
{
    struct fo_err err = {0};
    cJSON *v = NULL;

    cr_assert_eq(fo_json_parse("", 0, &v, &err), FO_E_JSON);
    cr_assert_not_null(strstr(err.msg, "empty input"), "%s", err.msg);
    cr_assert_eq(fo_json_parse(NULL, 0, &v, &err), FO_E_JSON);
    cr_assert_null(v);
    expect_reject(BYTES(" \n\t "), "empty input");
    /* len, not the NUL, ends the input */
    expect_reject("[1,2]", 3, "unexpected end of input");
}

Test(json_parse, reports_byte_offset)
{
    static const struct {
        const char *text;
        const char *want;
    } t[] = {
        {"[1, 01]", "invalid JSON at byte 4: leading zero"},
        {"{\"a\":1,\"a\":2}", "invalid JSON at byte 7: duplicate key \"a\""},
        {"\"ab\x01\"", "invalid JSON at byte 3: raw control character 0x01 "
                       "in string"},
        {"[1] x", "invalid JSON at byte 4: trailing characters after the "
                  "value ('x')"},
        {"[\"\\q\"]", "invalid JSON at byte 2: invalid escape \\'q'"},
        {"  \"\xE2\x82\"", "invalid JSON at byte 3: invalid UTF-8 in string"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct fo_err err = {0};
        cJSON *v = NULL;
        int rc = fo_json_parse(t[i].text, strlen(t[i].text), &v, &err);
        cr_assert_eq(rc, FO_E_JSON);
        cr_assert_str_eq(err.msg, t[i].want);
    }
}

Test(json_parse, depth_limit)
{
    char *ok = nested("[", "", "]", FO_JSON_MAX_DEPTH);
    char *c = canon_text(ok);
    cr_assert_str_eq(c, ok);
    free(c);
    free(ok);

    ok = nested("[", "1", "]", FO_JSON_MAX_DEPTH);
    c = canon_text(ok);
    cr_assert_str_eq(c, ok);
    free(c);
    free(ok);

    ok = nested("{\"a\":", "{}", "}", FO_JSON_MAX_DEPTH - 1);
    c = canon_text(ok);
    cr_assert_str_eq(c, ok);
    free(c);
    free(ok);

    char *bad = nested("[", "", "]", FO_JSON_MAX_DEPTH + 1);
    expect_reject(bad, strlen(bad), "nesting deeper than 64 levels");
    free(bad);

    bad = nested("{\"a\":", "{}", "}", FO_JSON_MAX_DEPTH);
    expect_reject(bad, strlen(bad), "nesting deeper than 64 levels");
    free(bad);

    bad = nested("[{\"a\":", "1", "}]", 33);
    expect_reject(bad, strlen(bad), "nesting deeper than 64 levels");
    free(bad);

    /* Deep input is refused at the limit, never by the stack. */
    bad = nested("[", "", "", 1000000);
    struct fo_err err = {0};
    cJSON *v = NULL;
    cr_assert_eq(fo_json_parse(bad, strlen(bad), &v, &err), FO_E_JSON);
    cr_assert_str_eq(err.msg,
                     "invalid JSON at byte 64: nesting deeper than 64 levels");
    free(bad);
}

Test(json_parse, tree_links_stay_valid)
{
    /* Our reader links children itself; cJSON's own appends and lookups
     * must keep working on the result. */
    cJSON *v = parse_ok(BYTES("{\"a\":[1,2,3],\"b\":2}"));
    cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "a");

    cr_assert(cJSON_AddItemToArray(a, cJSON_CreateNumber(4)));
    cr_assert_eq(cJSON_GetArraySize(a), 4);
    cr_assert(cJSON_GetArrayItem(a, 3)->valuedouble == 4.0);
    cr_assert(cJSON_AddItemToObject(v, "c", cJSON_CreateTrue()));
    cr_assert_null(cJSON_GetArrayItem(v, 2)->next);
    cr_assert_str_eq(cJSON_GetArrayItem(v, 2)->string, "c");
    cJSON_DeleteItemFromArray(a, 0);
    cJSON_DeleteItemFromObjectCaseSensitive(v, "b");
    char *c = canon_tree(v, 0);
    cr_assert_str_eq(c, "{\"a\":[2,3,4],\"c\":true}");
    free(c);
    cJSON_Delete(v);
}

Test(json_parse, large_object)
{
    enum { N = 100000 };
    struct fo_buf b;

    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_putc(&b, '{'), FO_OK);
    for (int i = N - 1; i >= 0; i--)
        cr_assert_eq(
            fo_buf_printf(&b, "%s\"k%d\":%d", i == N - 1 ? "" : ",", i, i),
            FO_OK);
    cr_assert_eq(fo_buf_putc(&b, '}'), FO_OK);

    cJSON *v = parse_ok(b.data, b.len);
    cr_assert_eq(cJSON_GetArraySize(v), N);
    char *c = canon_tree(v, 0);
    const char *head = "{\"k0\":0,\"k1\":1,\"k10\":10,\"k100\":100,"
                       "\"k1000\":1000,\"k10000\":10000,\"k10001\":10001,";
    cr_assert_eq(strncmp(c, head, strlen(head)), 0, "%.80s", c);
    cr_assert_eq(strlen(c), b.len);
    cJSON_Delete(v);

    v = parse_ok(c, strlen(c));
    cr_assert(cJSON_GetObjectItemCaseSensitive(v, "k99999")->valuedouble ==
              99999.0);
    cJSON_Delete(v);
    free(c);

    /* One repeated key among 100k is still found. */
    b.data[b.len - 1] = ',';
    cr_assert_eq(fo_buf_puts(&b, "\"k4242\":0}"), FO_OK);
    expect_reject(b.data, b.len, "duplicate key \"k4242\"");

    /* And a large array. */
    fo_buf_reset(&b);
    cr_assert_eq(fo_buf_putc(&b, '['), FO_OK);
    for (int i = 0; i < N; i++)
        cr_assert_eq(fo_buf_printf(&b, "%s%d", i ? "," : "", i), FO_OK);
    cr_assert_eq(fo_buf_putc(&b, ']'), FO_OK);
    v = parse_ok(b.data, b.len);
    cr_assert_eq(cJSON_GetArraySize(v), N);
    c = canon_tree(v, 0);
    cr_assert(strcmp(c, b.data) == 0, "large array: canonical form differs");
    free(c);
    cJSON_Delete(v);
    fo_buf_release(&b);
}

/* ------------------------------------------------------------ writer */

Test(json_canon, utf16_key_order)
{
    /* UTF-8 byte order would put U+E000 (EE 80 80) before U+1F600
     * (F0 9F 98 80); UTF-16 puts the surrogate pair D83D DE00 first. */
    cJSON *o = cJSON_CreateObject();
    cr_assert_not_null(cJSON_AddNumberToObject(o, "\xEE\x80\x80", 1));
    cr_assert_not_null(cJSON_AddNumberToObject(o, "\xF0\x9F\x98\x80", 2));
    cr_assert_not_null(cJSON_AddNumberToObject(o, "\xEF\xBF\xBF", 3));
    cr_assert_not_null(cJSON_AddNumberToObject(o, "\xC3\xA9", 4));
    cr_assert_not_null(cJSON_AddNumberToObject(o, "z", 5));
    cr_assert_not_null(cJSON_AddNumberToObject(o, "\xF0\x9F\x98\x81", 6));
    cr_assert_not_null(cJSON_AddNumberToObject(o, "\xED\x9F\xBF", 7));
    cr_assert_not_null(cJSON_AddNumberToObject(o, "\xF4\x8F\xBF\xBF", 8));
    cr_assert_not_null(cJSON_AddNumberToObject(o, "\xEE\x80\x80x", 9));
    char *c = canon_tree(o, 0);
    cr_assert_str_eq(c, "{\"z\":5,\"\xC3\xA9\":4,\"\xED\x9F\xBF\":7,"
                        "\"\xF0\x9F\x98\x80\":2,\"\xF0\x9F\x98\x81\":6,"
                        "\"\xF4\x8F\xBF\xBF\":8,\"\xEE\x80\x80\":1,"
                        "\"\xEE\x80\x80x\":9,\"\xEF\xBF\xBF\":3}");
    free(c);
    cJSON_Delete(o);

    /* The same through the reader, keys given as escapes. */
    expect_canon("{\"\\ue000\":1,\"\\ud83d\\ude00\":2,\"a\":3}",
                 "{\"a\":3,\"\xF0\x9F\x98\x80\":2,\"\xEE\x80\x80\":1}");
}

Test(json_canon, prefix_keys_sort_first)
{
    expect_canon("{\"ab\":1,\"a\":2,\"\":3,\"b\":4,\"aa\":5}",
                 "{\"\":3,\"a\":2,\"aa\":5,\"ab\":1,\"b\":4}");
}

Test(json_canon, string_escaping)
{
    for (unsigned c = 1; c < 0x20; c++) {
        char in[2] = {(char)c, 0};
        char want[16];
        switch (c) {
        case '\b':
            snprintf(want, sizeof(want), "\"\\b\"");
            break;
        case '\t':
            snprintf(want, sizeof(want), "\"\\t\"");
            break;
        case '\n':
            snprintf(want, sizeof(want), "\"\\n\"");
            break;
        case '\f':
            snprintf(want, sizeof(want), "\"\\f\"");
            break;
        case '\r':
            snprintf(want, sizeof(want), "\"\\r\"");
            break;
        default:
            snprintf(want, sizeof(want), "\"\\u%04x\"", c);
            break;
        }
        cJSON *s = cJSON_CreateString(in);
        char *got = canon_tree(s, 0);
        cr_assert_str_eq(got, want, "control 0x%02x", c);
        free(got);
        cJSON_Delete(s);
    }
    cJSON *s = cJSON_CreateString("a\"b\\c/d\x7f\xE2\x80\xA8\xC3\xA9<>&'\x1b");
    char *got = canon_tree(s, 0);
    cr_assert_str_eq(got,
                     "\"a\\\"b\\\\c/d\x7f\xE2\x80\xA8\xC3\xA9<>&'\\u001b\"");
    free(got);
    cJSON_Delete(s);
}

Test(json_canon, writer_rejects_what_jcs_cannot_hold)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "k", 1);
    cJSON_AddNumberToObject(o, "k", 2);
    expect_write_error(o, "duplicate key \"k\"");
    cJSON_Delete(o);

    double bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < 3; i++) {
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, cJSON_CreateNumber(bad[i]));
        expect_write_error(a, "non-finite number");
        cJSON_Delete(a);
    }

    cJSON *raw = cJSON_CreateRaw("1");
    expect_write_error(raw, "raw JSON");
    cJSON_Delete(raw);

    cJSON *inv = cJSON_CreateNull();
    inv->type = cJSON_Invalid;
    expect_write_error(inv, "invalid node type");
    cJSON_Delete(inv);

    cJSON *s = cJSON_CreateString("ok\xC0\x80");
    expect_write_error(s, "invalid UTF-8 in a string");
    cJSON_Delete(s);

    o = cJSON_CreateObject();
    cJSON_AddTrueToObject(o, "\xED\xA0\x80");
    expect_write_error(o, "invalid UTF-8 in an object key");
    cJSON_Delete(o);

    o = cJSON_CreateObject();
    cJSON_AddItemToArray(o, cJSON_CreateTrue()); /* a member with no key */
    expect_write_error(o, "without a key");
    cJSON_Delete(o);

    /* Depth: 64 containers are written, 65 are not. */
    cJSON *root = cJSON_CreateArray(), *cur = root;
    for (int i = 1; i < FO_JSON_MAX_DEPTH; i++) {
        cJSON *n = cJSON_CreateArray();
        cJSON_AddItemToArray(cur, n);
        cur = n;
    }
    char *c = canon_tree(root, 0);
    cr_assert_eq(strlen(c), 2 * FO_JSON_MAX_DEPTH);
    free(c);
    cJSON_AddItemToArray(cur, cJSON_CreateObject());
    expect_write_error(root, "nesting deeper than 64 levels");
    cJSON_Delete(root);
}

Test(json_canon, writer_respects_buffer_limit)
{
    cJSON *o = cJSON_CreateObject();
    struct fo_buf b;
    struct fo_err err = {0};

    cJSON_AddStringToObject(o, "a", "bcdefghij");
    fo_buf_init(&b, 8);
    cr_assert_eq(fo_json_canon(o, &b, &err), FO_E_TOO_LARGE);
    cr_assert_eq(err.code, FO_E_TOO_LARGE);
    fo_buf_release(&b);
    cr_assert_eq(fo_json_canon(NULL, &b, &err), FO_E_INVALID);
    cJSON_Delete(o);
}

Test(json_canon, pretty)
{
    cJSON *v = parse_ok(BYTES("{\"b\":[1,2,{}],\"a\":{\"x\":\"y\"},\"c\":[],"
                              "\"n\":1e21,\"t\":1732000000000000}"));
    char *p = canon_tree(v, FO_JSON_PRETTY);
    cr_assert_str_eq(p, "{\n"
                        "  \"a\": {\n"
                        "    \"x\": \"y\"\n"
                        "  },\n"
                        "  \"b\": [\n"
                        "    1,\n"
                        "    2,\n"
                        "    {}\n"
                        "  ],\n"
                        "  \"c\": [],\n"
                        "  \"n\": 1e+21,\n"
                        "  \"t\": 1732000000000000\n"
                        "}");
    /* Pretty output is still strict JSON with the same canonical form. */
    cJSON *back = parse_ok(p, strlen(p));
    char *c1 = canon_tree(v, 0);
    char *c2 = canon_tree(back, 0);
    cr_assert_str_eq(c1, c2);
    cr_assert_str_eq(c1, "{\"a\":{\"x\":\"y\"},\"b\":[1,2,{}],\"c\":[],"
                         "\"n\":1e+21,\"t\":1732000000000000}");
    free(c1);
    free(c2);
    free(p);
    cJSON_Delete(back);
    cJSON_Delete(v);

    v = cJSON_CreateNumber(1e-7);
    p = canon_tree(v, FO_JSON_PRETTY);
    cr_assert_str_eq(p, "1e-7");
    free(p);
    cJSON_Delete(v);
}

/* ------------------------------------------------------------ helpers */

Test(json_string, escapes_and_refuses)
{
    struct fo_buf b;

    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_puts(&b, "x="), FO_OK);
    cr_assert_eq(fo_json_string(BYTES("a\tb\xC3\xA9"), &b), FO_OK);
    cr_assert_str_eq(b.data, "x=\"a\\tb\xC3\xA9\"");

    /* Failures leave the buffer as it was. */
    size_t before = b.len;
    cr_assert_eq(fo_json_string(BYTES("ok\xC0\x80"), &b), FO_E_JSON);
    cr_assert_eq(fo_json_string(BYTES("a\0b"), &b), FO_E_JSON);
    cr_assert_eq(fo_json_string(BYTES("\xED\xA0\x80"), &b), FO_E_JSON);
    cr_assert_eq(b.len, before);
    cr_assert_str_eq(b.data, "x=\"a\\tb\xC3\xA9\"");
    cr_assert_eq(fo_json_string("", 0, &b), FO_OK);
    cr_assert_str_eq(b.data, "x=\"a\\tb\xC3\xA9\"\"\"");
    fo_buf_release(&b);

    fo_buf_init(&b, 6);
    cr_assert_eq(fo_json_string(BYTES("abcdef"), &b), FO_E_TOO_LARGE);
    cr_assert_eq(b.len, 0);
    cr_assert_eq(fo_json_string(BYTES("abcd"), &b), FO_OK);
    cr_assert_str_eq(b.data, "\"abcd\"");
    fo_buf_release(&b);
}

Test(json_utf8, valid_and_invalid)
{
    static const struct {
        const char *s;
        size_t len;
        int valid;
    } t[] = {
        {BYTES(""), 1},
        {BYTES("plain ascii"), 1},
        {BYTES("a\0b"), 1}, /* NUL is valid UTF-8; strings refuse it */
        {BYTES("\xC2\x80"), 1},
        {BYTES("\xDF\xBF"), 1},
        {BYTES("\xE0\xA0\x80"), 1},
        {BYTES("\xED\x9F\xBF"), 1},
        {BYTES("\xEE\x80\x80"), 1},
        {BYTES("\xF0\x90\x80\x80"), 1},
        {BYTES("\xF4\x8F\xBF\xBF"), 1},
        {BYTES("\xC0\x80"), 0},
        {BYTES("\xC1\xBF"), 0},
        {BYTES("\xE0\x9F\xBF"), 0},
        {BYTES("\xED\xA0\x80"), 0},
        {BYTES("\xED\xBF\xBF"), 0},
        {BYTES("\xF0\x8F\xBF\xBF"), 0},
        {BYTES("\xF4\x90\x80\x80"), 0},
        {BYTES("\xF5\x80\x80\x80"), 0},
        {BYTES("\xFF"), 0},
        {BYTES("\x80"), 0},
        {BYTES("a\xC3"), 0},
        {BYTES("\xE2\x82"), 0},
        {BYTES("\xF0\x9F\x98"), 0},
        {BYTES("\xE2\x28\xA1"), 0},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        cr_assert_eq(fo_utf8_valid(t[i].s, t[i].len), t[i].valid, "case %zu",
                     i);
}

Test(json_int, add_and_get)
{
    cJSON *o = cJSON_CreateObject();
    long long x = 0;

    cr_assert_not_null(fo_json_add_int(o, "ts", 1732000000000000LL));
    cr_assert_not_null(fo_json_add_int(o, "neg", -9007199254740991LL));
    cr_assert_not_null(fo_json_add_int(o, "seq", 42));
    cJSON_AddNumberToObject(o, "half", 1.5);
    cJSON_AddStringToObject(o, "str", "7");
    cJSON_AddNumberToObject(o, "huge", 1e300);

    cr_assert_eq(fo_json_get_int(o, "ts", 0, LLONG_MAX, &x), FO_OK);
    cr_assert_eq(x, 1732000000000000LL);
    cr_assert_eq(fo_json_get_int(o, "neg", LLONG_MIN, 0, &x), FO_OK);
    cr_assert_eq(x, -9007199254740991LL);
    cr_assert_eq(fo_json_get_int(o, "seq", 42, 42, &x), FO_OK);
    cr_assert_eq(x, 42);

    x = 5;
    cr_assert_eq(fo_json_get_int(o, "seq", 43, 100, &x), FO_E_INVALID);
    cr_assert_eq(fo_json_get_int(o, "seq", 0, 41, &x), FO_E_INVALID);
    cr_assert_eq(fo_json_get_int(o, "half", 0, 10, &x), FO_E_INVALID);
    cr_assert_eq(fo_json_get_int(o, "str", 0, 10, &x), FO_E_INVALID);
    cr_assert_eq(fo_json_get_int(o, "huge", LLONG_MIN, LLONG_MAX, &x),
                 FO_E_INVALID);
    cr_assert_eq(fo_json_get_int(o, "missing", 0, 10, &x), FO_E_NOT_FOUND);
    cr_assert_eq(fo_json_get_int(o, "SEQ", 0, 100, &x), FO_E_NOT_FOUND);
    cr_assert_eq(x, 5, "out must not change on failure");

    char *c = canon_tree(o, 0);
    cr_assert_str_eq(c, "{\"half\":1.5,\"huge\":1e+300,"
                        "\"neg\":-9007199254740991,\"seq\":42,\"str\":\"7\","
                        "\"ts\":1732000000000000}");
    free(c);
    cJSON_Delete(o);

    /* Read back from parsed text too. */
    o = parse_ok(BYTES("{\"a\":9007199254740993,\"b\":-0,\"c\":1e3}"));
    cr_assert_eq(fo_json_get_int(o, "a", 0, LLONG_MAX, &x), FO_OK);
    cr_assert_eq(x, 9007199254740992LL);
    cr_assert_eq(fo_json_get_int(o, "b", 0, 0, &x), FO_OK);
    cr_assert_eq(x, 0);
    cr_assert_eq(fo_json_get_int(o, "c", 0, 1000, &x), FO_OK);
    cr_assert_eq(x, 1000);
    cJSON_Delete(o);
}

Test(fo_buf, allocation_never_exceeds_the_maximum)
{
    /* doubling would reach 4096 for 2501 bytes; the cap stops it at max+1 */
    struct fo_buf b;
    fo_buf_init(&b, 2500);
    char chunk[100];
    memset(chunk, 'a', sizeof(chunk));
    for (int i = 0; i < 25; i++)
        cr_assert_eq(fo_buf_append(&b, chunk, sizeof(chunk)), FO_OK);
    cr_assert_eq(b.len, 2500);
    cr_assert_eq(b.cap, 2501);
    cr_assert_eq(b.data[2500], '\0');
    cr_assert_eq(fo_buf_putc(&b, 'x'), FO_E_TOO_LARGE);
    fo_buf_release(&b);
    /* small outputs stay small */
    fo_buf_init(&b, 1u << 20);
    cr_assert_eq(fo_buf_puts(&b, "x\n"), FO_OK);
    cr_assert_eq(b.cap, 64);
    fo_buf_release(&b);
}
