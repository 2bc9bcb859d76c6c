/* test_note: signed notes and checkpoints against the published vectors
 * (the Go test key must reproduce its signature byte for byte), key text
 * round trips, every rejection of the strict parsers, and interop with Go's
 * golang.org/x/mod/sumdb/note through tests/interop/run.sh. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_buf.h"
#include "ledger/note.h"
#include "tests/testutil.h"

/* ---- helpers ---- */

static struct note_verifier *vkey(const char *text)
{
    struct note_verifier *v = NULL;
    struct fo_err err = {0};
    int rc = note_verifier_parse(text, strlen(text), &v, &err);
    cr_assert_eq(rc, FO_OK, "verifier %s: %s", text, err.msg);
    return v;
}

static struct note_signer *skey(const char *text)
{
    struct note_signer *s = NULL;
    struct fo_err err = {0};
    int rc = note_signer_parse(text, strlen(text), &s, &err);
    cr_assert_eq(rc, FO_OK, "signer: %s", err.msg);
    return s;
}

static struct note_signer *gen(const char *name)
{
    struct note_signer *s = NULL;
    struct fo_err err = {0};
    cr_assert_eq(note_signer_generate(name, &s, &err), FO_OK, "%s", err.msg);
    return s;
}

static struct note_verifier *verifier_of(const struct note_signer *s)
{
    struct note_verifier *v = NULL;
    struct fo_err err = {0};
    cr_assert_eq(note_signer_verifier(s, &v, &err), FO_OK, "%s", err.msg);
    return v;
}

/* Signs a NUL-terminated text; returns the malloc'd signed note. */
static char *sign(const struct note_signer *s, const char *text)
{
    struct fo_buf b;
    struct fo_err err = {0};
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(note_sign(s, text, strlen(text), &b, &err), FO_OK, "%s",
                 err.msg);
    return fo_buf_detach(&b, NULL);
}

/* Opens msg with the given verifiers; returns the rc, fills err, and on
 * success requires the text to be want_text (when not NULL). */
static int open_n(const char *msg, size_t len,
                  const struct note_verifier *const *known, size_t n,
                  const char *want_text, struct fo_err *err)
{
    struct fo_buf text;
    fo_buf_init(&text, FO_BUF_UNLIMITED);
    fo_buf_puts(&text, "keep:");
    int rc = note_open(msg, len, known, n, &text, err);
    if (rc == FO_OK) {
        cr_assert_eq(strncmp(text.data, "keep:", 5), 0);
        if (want_text)
            cr_assert_str_eq(text.data + 5, want_text);
    } else {
        cr_assert_eq(text.len, 5, "text changed on failure");
        cr_assert_eq(err->code, rc);
    }
    fo_buf_release(&text);
    return rc;
}

static int open1(const char *msg, const struct note_verifier *v,
                 struct fo_err *err)
{
    return open_n(msg, strlen(msg), &v, 1, NULL, err);
}

static char *str_concat(const char *a, const char *b)
{
    struct fo_buf buf;
    fo_buf_init(&buf, FO_BUF_UNLIMITED);
    fo_buf_puts(&buf, a);
    fo_buf_puts(&buf, b);
    return fo_buf_detach(&buf, NULL);
}

/* A copy of s with the first occurrence of from replaced by to. */
static char *str_replace1(const char *s, const char *from, const char *to)
{
    const char *at = strstr(s, from);
    cr_assert_not_null(at, "'%s' not in '%s'", from, s);
    struct fo_buf buf;
    fo_buf_init(&buf, FO_BUF_UNLIMITED);
    fo_buf_append(&buf, s, (size_t)(at - s));
    fo_buf_puts(&buf, to);
    fo_buf_puts(&buf, at + strlen(from));
    return fo_buf_detach(&buf, NULL);
}

static const char *jstr(cJSON *o, const char *key)
{
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

struct pair {
    struct note_signer *s;
    struct note_verifier *v;
};

static struct pair pair_new(const char *name)
{
    struct pair p;
    p.s = gen(name);
    p.v = verifier_of(p.s);
    return p;
}

static void pair_free(struct pair *p)
{
    note_signer_free(p->s);
    note_verifier_free(p->v);
}

/* ---- the published vectors ---- */

#define PETER_SKEY                                                             \
    "PRIVATE+KEY+PeterNeumann+c74f20a3+"                                       \
    "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
#define PETER_VKEY                                                             \
    "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
#define ENOCH_VKEY                                                             \
    "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"

/* Every case: its verifier keys parse and format back to themselves, the
 * note opens with all of them (and with each alone) to the case's text, the
 * note is exactly the text, a blank line and the signature lines, and where
 * the case gives a signer key, signing reproduces its line byte for byte. */
Test(note_vectors, every_case)
{
    cJSON *v = tu_vector("signed-note.json");
    cJSON *cases = cJSON_GetObjectItemCaseSensitive(v, "cases");
    int ncases = 0, nsigned = 0;
    cJSON *c;
    cJSON_ArrayForEach (c, cases) {
        const char *name = jstr(c, "name");
        const char *text = jstr(c, "text");
        const char *note = jstr(c, "note");
        cr_assert(name && text && note);
        cJSON *verified = cJSON_GetObjectItemCaseSensitive(c, "verified");
        cr_assert(cJSON_IsTrue(verified), "%s", name);

        /* the vkeys */
        const char *vkeys[8];
        size_t nv = 0;
        if (jstr(c, "vkey"))
            vkeys[nv++] = jstr(c, "vkey");
        cJSON *arr = cJSON_GetObjectItemCaseSensitive(c, "vkeys"), *k;
        cJSON_ArrayForEach (k, arr)
            vkeys[nv++] = k->valuestring;
        cr_assert_gt(nv, 0, "%s", name);
        struct note_verifier *vs[8];
        for (size_t i = 0; i < nv; i++) {
            vs[i] = vkey(vkeys[i]);
            struct fo_buf b;
            struct fo_err err = {0};
            fo_buf_init(&b, FO_BUF_UNLIMITED);
            cr_assert_eq(note_verifier_format(vs[i], &b, &err), FO_OK);
            cr_assert_str_eq(b.data, vkeys[i]);
            fo_buf_release(&b);
        }

        /* the note's shape */
        struct fo_buf shape;
        fo_buf_init(&shape, FO_BUF_UNLIMITED);
        fo_buf_puts(&shape, text);
        fo_buf_putc(&shape, '\n');
        cJSON *line;
        cJSON_ArrayForEach (
            line, cJSON_GetObjectItemCaseSensitive(c, "signature_lines")) {
            fo_buf_puts(&shape, line->valuestring);
            fo_buf_putc(&shape, '\n');
        }
        cr_assert_str_eq(shape.data, note, "%s", name);
        fo_buf_release(&shape);

        /* opens with all the keys and with each alone */
        struct fo_err err = {0};
        cr_assert_eq(open_n(note, strlen(note),
                            (const struct note_verifier *const *)vs, nv, text,
                            &err),
                     FO_OK, "%s: %s", name, err.msg);
        for (size_t i = 0; i < nv; i++)
            cr_assert_eq(open_n(note, strlen(note),
                                (const struct note_verifier *const *)&vs[i], 1,
                                text, &err),
                         FO_OK, "%s key %zu: %s", name, i, err.msg);

        /* re-signs byte for byte */
        const char *sk = jstr(c, "signer_key_PUBLISHED_TEST_KEY");
        if (sk) {
            struct note_signer *s = skey(sk);
            char *signed_note = sign(s, text);
            /* the line for this signer */
            char *want = NULL;
            cJSON_ArrayForEach (
                line, cJSON_GetObjectItemCaseSensitive(c, "signature_lines")) {
                char prefix[300];
                snprintf(prefix, sizeof(prefix), "\xe2\x80\x94 %s ",
                         note_signer_name(s));
                if (strncmp(line->valuestring, prefix, strlen(prefix)) == 0) {
                    char *t = str_concat(text, "\n");
                    char *t2 = str_concat(t, line->valuestring);
                    want = str_concat(t2, "\n");
                    free(t);
                    free(t2);
                }
            }
            cr_assert_not_null(want, "%s: no line for the signer", name);
            cr_assert_str_eq(signed_note, want, "%s", name);
            free(want);
            free(signed_note);
            note_signer_free(s);
            nsigned++;
        }
        for (size_t i = 0; i < nv; i++)
            note_verifier_free(vs[i]);
        ncases++;
    }
    cr_assert_eq(ncases, 2);
    cr_assert_eq(nsigned, 1);
    cJSON_Delete(v);
}

Test(note_vectors, go_test_key_signs_exactly)
{
    struct note_signer *s = skey(PETER_SKEY);
    cr_assert_str_eq(note_signer_name(s), "PeterNeumann");
    cr_assert_eq(note_signer_id(s), 0xc74f20a3u);

    struct fo_buf b;
    struct fo_err err = {0};
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(note_signer_format(s, &b, &err), FO_OK);
    cr_assert_str_eq(b.data, PETER_SKEY);
    fo_buf_reset(&b);
    cr_assert_eq(note_signer_format_verifier(s, &b, &err), FO_OK);
    cr_assert_str_eq(b.data, PETER_VKEY);
    fo_buf_release(&b);

    char *n = sign(s, "If you think cryptography is the answer to your "
                      "problem,\nthen you don't know what your problem is.\n");
    cr_assert_str_eq(n, "If you think cryptography is the answer to your "
                        "problem,\nthen you don't know what your problem is.\n"
                        "\n\xe2\x80\x94 PeterNeumann x08go/"
                        "ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2p"
                        "ZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n");
    free(n);
    note_signer_free(s);
}

/* The open rules the Go tests state (signed-note.json,
 * open_rules_from_upstream_tests). */
Test(note_vectors, go_open_rules)
{
    cJSON *v = tu_vector("signed-note.json");
    cJSON *c =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(v, "cases"), 1);
    const char *note = jstr(c, "note");
    const char *text = jstr(c, "text");
    struct note_verifier *peter = vkey(PETER_VKEY);
    struct note_verifier *enoch = vkey(ENOCH_VKEY);
    struct fo_err err = {0};

    /* only PeterNeumann known: EnochRoot's signature is ignored */
    cr_assert_eq(open_n(note, strlen(note),
                        (const struct note_verifier *const *)&peter, 1, text,
                        &err),
                 FO_OK, "%s", err.msg);
    /* no known keys */
    cr_assert_eq(open_n(note, strlen(note), NULL, 0, NULL, &err), FO_E_VERIFY);
    cr_assert(strstr(err.msg, "no signature by a known key"), "%s", err.msg);

    /* more than 100 signatures */
    struct fo_buf many;
    fo_buf_init(&many, FO_BUF_UNLIMITED);
    fo_buf_puts(&many, note);
    const char *enoch_line = strstr(note, "\xe2\x80\x94 EnochRoot");
    for (int i = 0; i < 98; i++) /* 2 + 98 = 100 */
        fo_buf_puts(&many, enoch_line);
    cr_assert_eq(open_n(many.data, many.len,
                        (const struct note_verifier *const *)&peter, 1, text,
                        &err),
                 FO_OK, "100 signatures: %s", err.msg);
    fo_buf_puts(&many, enoch_line);
    cr_assert_eq(open_n(many.data, many.len,
                        (const struct note_verifier *const *)&peter, 1, NULL,
                        &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "more than 100"), "%s", err.msg);
    fo_buf_release(&many);

    /* a known key whose signature does not verify */
    char *bad = str_replace1(note, "x08go/ZJ", "x08go/ZK");
    cr_assert_eq(open1(bad, peter, &err), FO_E_VERIFY);
    cr_assert(strstr(err.msg, "invalid signature by PeterNeumann+c74f20a3"),
              "%s", err.msg);
    /* ...even when another known key's signature verifies */
    const struct note_verifier *both[] = {peter, enoch};
    cr_assert_eq(open_n(bad, strlen(bad), both, 2, NULL, &err), FO_E_VERIFY);
    /* but with only EnochRoot known, PeterNeumann's line is just unknown */
    cr_assert_eq(open1(bad, enoch, &err), FO_OK, "%s", err.msg);
    free(bad);

    note_verifier_free(peter);
    note_verifier_free(enoch);
    cJSON_Delete(v);
}

/* ---- keys ---- */

Test(note_keys, generate_format_parse_round_trip)
{
    struct note_signer *s = gen("forum/0123abcd");
    struct note_signer *s2 = gen("forum/0123abcd");
    cr_assert_str_eq(note_signer_name(s), "forum/0123abcd");
    cr_assert_neq(note_signer_id(s), note_signer_id(s2), "same random key");

    struct fo_buf sk, vk;
    struct fo_err err = {0};
    fo_buf_init(&sk, FO_BUF_UNLIMITED);
    fo_buf_init(&vk, FO_BUF_UNLIMITED);
    cr_assert_eq(note_signer_format(s, &sk, &err), FO_OK);
    cr_assert_eq(note_signer_format_verifier(s, &vk, &err), FO_OK);
    cr_assert_eq(strncmp(sk.data, "PRIVATE+KEY+forum/0123abcd+", 27), 0, "%s",
                 sk.data);
    char idhex[9];
    snprintf(idhex, sizeof(idhex), "%08" PRIx32, note_signer_id(s));
    cr_assert_eq(strncmp(sk.data + 27, idhex, 8), 0);
    cr_assert_eq(sk.len, 27 + 8 + 1 + 44);
    cr_assert_eq(vk.len, 15 + 8 + 1 + 44);

    struct note_signer *p = skey(sk.data);
    cr_assert_str_eq(note_signer_name(p), note_signer_name(s));
    cr_assert_eq(note_signer_id(p), note_signer_id(s));
    struct note_verifier *v = vkey(vk.data);
    cr_assert_eq(note_verifier_id(v), note_signer_id(s));
    cr_assert_str_eq(note_verifier_name(v), "forum/0123abcd");
    struct note_verifier *v2 = verifier_of(p);
    uint8_t a[32], b[32];
    note_verifier_public_key(v, a);
    note_verifier_public_key(v2, b);
    cr_assert_eq(memcmp(a, b, 32), 0);
    struct fo_buf vk2;
    fo_buf_init(&vk2, FO_BUF_UNLIMITED);
    cr_assert_eq(note_verifier_format(v2, &vk2, &err), FO_OK);
    cr_assert_str_eq(vk2.data, vk.data);

    /* what the parsed signer signs, the generated key's verifier opens */
    char *n = sign(p, "hello\n");
    cr_assert_eq(open1(n, v, &err), FO_OK, "%s", err.msg);
    struct note_verifier *other = verifier_of(s2);
    cr_assert_eq(open1(n, other, &err), FO_E_VERIFY);
    free(n);

    fo_buf_release(&sk);
    fo_buf_release(&vk);
    fo_buf_release(&vk2);
    note_verifier_free(v);
    note_verifier_free(v2);
    note_verifier_free(other);
    note_signer_free(p);
    note_signer_free(s);
    note_signer_free(s2);
    note_signer_free(NULL);
    note_verifier_free(NULL);
}

Test(note_keys, name_rules)
{
    static const char *const good[] = {
        "a",
        "example.com/foo",
        "forum/0123",
        "\xc3\xbcnic\xc3\xb6\x64\x65", /* "ünicöde" */
        "PeterNeumann",
        "x\x7fy", /* DEL is not a control below U+0020 */
    };
    static const char *const bad[] = {
        "",
        "a b",
        "a+b",
        "+",
        "a\tb",
        "a\nb",
        "a\x01\x62",
        "a\xc2\xa0\x62",     /* U+00A0 no-break space */
        "a\xc2\x85\x62",     /* U+0085 next line */
        "a\xe3\x80\x80\x62", /* U+3000 ideographic space */
        "a\xe2\x80\x82\x62", /* U+2002 en space */
        "a\xe2\x80\xa8\x62", /* U+2028 line separator */
        "\xff",
        "\xc0\xaf",         /* overlong '/' */
        "\xed\xa0\x80",     /* surrogate */
        "\xe2\x80",         /* truncated */
        "\xf4\x90\x80\x80", /* above U+10FFFF */
    };
    struct fo_err err = {0};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        cr_assert_eq(note_name_check(good[i], strlen(good[i]), &err), FO_OK,
                     "'%s': %s", good[i], err.msg);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(note_name_check(bad[i], strlen(bad[i]), &err),
                     FO_E_INVALID, "'%s' accepted", bad[i]);
        struct note_signer *s = NULL;
        cr_assert_eq(note_signer_generate(bad[i], &s, &err), FO_E_INVALID);
        cr_assert_null(s);
    }
    cr_assert_eq(note_name_check("a\0b", 3, &err), FO_E_INVALID);
    char longname[NOTE_NAME_MAX + 2];
    memset(longname, 'n', sizeof(longname));
    cr_assert_eq(note_name_check(longname, NOTE_NAME_MAX, &err), FO_OK);
    cr_assert_eq(note_name_check(longname, NOTE_NAME_MAX + 1, &err),
                 FO_E_INVALID);
}

Test(note_keys, verifier_parse_rejections)
{
    static const char *const bad[] = {
        "",
        "PeterNeumann",
        "PeterNeumann+c74f20a3",
        "PeterNeumann+c74f20a3+",
        "+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        /* id: wrong, upper case, short, long, not hex */
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a30+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20ag+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        /* whitespace anywhere, and a trailing newline */
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW\n",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW ",
        " PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbz\nhKqiBfsVkmqq/LDE4izWy10TW",
        /* key: one byte short, one too many, a foreign byte */
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10",
        ("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/"
         "LDE4izWy10TWAA=="),
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T*",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq_LDE4izWy10TW",
        /* algorithm byte 0x02 with the same key (id then mismatches too) */
        "PeterNeumann+c74f20a3+Ahpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    };
    struct fo_err err = {0};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct note_verifier *v = NULL;
        cr_assert_eq(note_verifier_parse(bad[i], strlen(bad[i]), &v, &err),
                     FO_E_INVALID, "accepted: %s", bad[i]);
        cr_assert_null(v);
    }
    struct note_verifier *v = NULL;
    cr_assert_eq(
        note_verifier_parse(PETER_VKEY, strlen(PETER_VKEY) - 1, &v, &err),
        FO_E_INVALID);
    /* a NUL inside the name */
    cr_assert_eq(note_verifier_parse("Pe\0erNeumann+c74f20a3+ARpc2QcUPDhMQ"
                                     "egwxbzhKqiBfsVkmqq/LDE4izWy10TW",
                                     67, &v, &err),
                 FO_E_INVALID);
    cr_assert_eq(note_verifier_parse(PETER_VKEY, strlen(PETER_VKEY), &v, &err),
                 FO_OK);
    note_verifier_free(v);

    /* the id check names both ids; the algorithm check names the byte */
    cr_assert_eq(note_verifier_parse(bad[6], strlen(bad[6]), &v, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "does not match"), "%s", err.msg);
    cr_assert_eq(note_verifier_parse(bad[19], strlen(bad[19]), &v, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "algorithm 0x02"), "%s", err.msg);
}

Test(note_keys, base64_must_be_canonical)
{
    /* A signature (4 + 64 bytes) encodes to 92 chars ending in one '=': the
     * last data char carries two unused bits that must be zero. Respell the
     * same bytes with those bits set: a second spelling of one signature is
     * malformed, not merely unverified. */
    struct pair p = pair_new("canon");
    char *n = sign(p.s, "text\n");
    size_t len = strlen(n);
    cr_assert_eq(n[len - 2], '=');
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char last = n[len - 3];
    int idx = (int)(strchr(alphabet, last) - alphabet);
    cr_assert_eq(idx & 3, 0, "canonical encodings leave the bits zero");
    struct fo_err err = {0};
    for (int bits = 1; bits < 4; bits++) {
        n[len - 3] = alphabet[idx | bits];
        cr_assert_eq(open1(n, p.v, &err), FO_E_INVALID,
                     "non-canonical base64 accepted");
    }
    n[len - 3] = last;
    cr_assert_eq(open1(n, p.v, &err), FO_OK, "%s", err.msg);
    /* padding dropped, or doubled */
    char *t = str_replace1(n, "=\n", "\n");
    cr_assert_eq(open1(t, p.v, &err), FO_E_INVALID);
    free(t);
    t = str_replace1(n, "=\n", "==\n");
    cr_assert_eq(open1(t, p.v, &err), FO_E_INVALID);
    free(t);
    t = str_replace1(n, "=\n", "=====\n");
    cr_assert_eq(open1(t, p.v, &err), FO_E_INVALID);
    free(t);

    /* keys (33 bytes, 44 chars, no padding): a padding quad appended */
    struct fo_buf vk;
    fo_buf_init(&vk, FO_BUF_UNLIMITED);
    cr_assert_eq(note_signer_format_verifier(p.s, &vk, &err), FO_OK);
    fo_buf_puts(&vk, "====");
    struct note_verifier *v = NULL;
    cr_assert_eq(note_verifier_parse(vk.data, vk.len, &v, &err), FO_E_INVALID);
    cr_assert_eq(note_verifier_parse(vk.data, vk.len - 4, &v, &err), FO_OK);
    note_verifier_free(v);
    fo_buf_release(&vk);
    free(n);
    pair_free(&p);
}

Test(note_keys, signer_parse_rejections)
{
    static const char *const bad[] = {
        "",
        "PRIVATE+KEY+",
        "private+key+PeterNeumann+c74f20a3+"
        "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz",
        "PRIVATE+KEYPeterNeumann+c74f20a3+"
        "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz",
        /* the verifier key in the signer's place */
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        /* wrong id */
        "PRIVATE+KEY+PeterNeumann+c74f20a4+"
        "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz",
        /* another name for the same key: the id no longer matches */
        "PRIVATE+KEY+PeterNeumanm+c74f20a3+"
        "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz",
        /* algorithm byte 0x02 */
        "PRIVATE+KEY+PeterNeumann+c74f20a3+"
        "AoEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz",
        /* short key, trailing newline */
        "PRIVATE+KEY+PeterNeumann+c74f20a3+"
        "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXH",
        "PRIVATE+KEY+PeterNeumann+c74f20a3+"
        "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz\n",
    };
    struct fo_err err = {0};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct note_signer *s = NULL;
        cr_assert_eq(note_signer_parse(bad[i], strlen(bad[i]), &s, &err),
                     FO_E_INVALID, "accepted: %s", bad[i]);
        cr_assert_null(s);
    }
}

/* ---- signing and opening ---- */

Test(note_sign, round_trips)
{
    static const char *const texts[] = {
        "hello\n",
        "\n",
        "a\n\nb\n",            /* a blank line inside the text */
        "a\n\n",               /* a text ending in a blank line */
        "a\n\n\n",             /* two */
        "— not a signature\n", /* a text line that looks like one */
        "a\n\n\xe2\x80\x94 x AAAAAAA=\n",
        "origin\n42\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\nextra\n",
        "\xc3\xbcnicode \xf0\x9f\x94\x92 text\x7f\n",
    };
    struct pair p = pair_new("example.com/log");
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        char *n = sign(p.s, texts[i]);
        struct fo_err err = {0};
        cr_assert_eq(open_n(n, strlen(n),
                            (const struct note_verifier *const *)&p.v, 1,
                            texts[i], &err),
                     FO_OK, "text %zu: %s", i, err.msg);
        /* deterministic */
        char *again = sign(p.s, texts[i]);
        cr_assert_str_eq(n, again);
        free(again);
        free(n);
    }
    pair_free(&p);
}

Test(note_sign, rejects_bad_text)
{
    struct pair p = pair_new("example.com/log");
    struct {
        const char *text;
        size_t len;
    } bad[] = {
        {"", 0},
        {"no newline", 10},
        {"tab\there\n", 10},
        {"cr\r\n", 4},
        {"nul\0x\n", 6},
        {"esc\x1b\n", 5},
        {"bad \xff utf8\n", 11},
        {"overlong \xc0\xaf\n", 12},
        {"surrogate \xed\xa0\x80\n", 14},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct fo_buf b;
        struct fo_err err = {0};
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        cr_assert_eq(note_sign(p.s, bad[i].text, bad[i].len, &b, &err),
                     FO_E_INVALID, "text %zu signed", i);
        cr_assert_eq(b.len, 0);
        fo_buf_release(&b);
    }
    /* an output buffer too small refuses, and is left as it was */
    struct fo_buf small;
    struct fo_err err = {0};
    fo_buf_init(&small, 20);
    fo_buf_puts(&small, "x");
    cr_assert_eq(note_sign(p.s, "hello\n", 6, &small, &err), FO_E_TOO_LARGE);
    cr_assert_eq(small.len, 1);
    fo_buf_release(&small);
    pair_free(&p);
}

Test(note_open, rejections)
{
    struct pair p = pair_new("example.com/log");
    struct pair q = pair_new("example.com/log"); /* same name, other key */
    char *n = sign(p.s, "line one\nline two\n");
    const char *sigline = strstr(n, "\xe2\x80\x94 ");
    struct fo_err err = {0};
    cr_assert_eq(open1(n, p.v, &err), FO_OK, "%s", err.msg);

    struct ocase {
        const char *what;
        char *msg;
        int want;
    } cases[32];
    size_t nc = 0;
#define CASE(w, m, code) cases[nc++] = (struct ocase){w, m, code}
    /* missing final newline */
    CASE("no final newline", strndup(n, strlen(n) - 1), FO_E_INVALID);
    /* control characters, bad UTF-8, in the text or a signature line */
    CASE("control char",
         str_replace1(n, "one",
                      "o\x01"
                      "e"),
         FO_E_INVALID);
    CASE("tab", str_replace1(n, "one", "o\te"), FO_E_INVALID);
    CASE("carriage return", str_replace1(n, "one\n", "one\r\n"), FO_E_INVALID);
    CASE("bad UTF-8",
         str_replace1(n, "one",
                      "o\xff"
                      "e"),
         FO_E_INVALID);
    CASE("truncated UTF-8",
         str_replace1(n, "one",
                      "o\xe2\x80"
                      "e"),
         FO_E_INVALID);
    CASE("bad UTF-8 in name",
         str_replace1(n, "example.com/log", "example.com/l\xc3"), FO_E_INVALID);
    /* signature lines */
    CASE("key name with a space",
         str_replace1(n, "example.com/log", "example.com log"), FO_E_INVALID);
    CASE("key name with a plus",
         str_replace1(n, "example.com/log", "example.com+log"), FO_E_INVALID);
    CASE("empty key name", str_replace1(n, "example.com/log ", " "),
         FO_E_INVALID);
    CASE("hyphen for em dash", str_replace1(n, "\xe2\x80\x94 ", "- "),
         FO_E_INVALID);
    CASE("no space after dash",
         str_replace1(n, "\xe2\x80\x94 ", "\xe2\x80\x94"), FO_E_INVALID);
    CASE("two spaces", str_replace1(n, "log ", "log  "), FO_E_INVALID);
    CASE("no signature", str_replace1(n, "log ", "log"), FO_E_INVALID);
    CASE("signature with a space inside", str_replace1(n, "log ", "log A"),
         FO_E_INVALID);
    CASE("signature unpadded", str_replace1(n, "=\n", "\n"), FO_E_INVALID);
    CASE("signature with trailing space", str_replace1(n, "=\n", "= \n"),
         FO_E_INVALID);
    CASE("signature too short to hold an id",
         str_replace1(n, sigline, "\xe2\x80\x94 example.com/log AAAA\n"),
         FO_E_INVALID);
    /* structure */
    CASE("lines after the signatures", str_concat(n, "trailing\n"),
         FO_E_INVALID);
    CASE("blank line after the signatures", str_concat(n, "\n"), FO_E_INVALID);
    CASE("no blank line before the signatures",
         str_replace1(n, "two\n\n", "two\n"), FO_E_INVALID);
    CASE("no signatures", strndup(n, (size_t)(sigline - n)), FO_E_INVALID);
    CASE("nothing", strdup(""), FO_E_INVALID);
    /* well-formed but not verifying */
    CASE("tampered text", str_replace1(n, "line one", "line 0ne"), FO_E_VERIFY);
    CASE("tampered text, extra line", str_replace1(n, "two\n", "two\nthree\n"),
         FO_E_VERIFY);
    {
        /* flip one signature byte: decode position 10 of the base64 */
        char *t = strdup(n);
        char *b64 = strstr(t, "log ") + 4;
        b64[10] = b64[10] == 'A' ? 'B' : 'A';
        CASE("tampered signature", t, FO_E_VERIFY);
        /* change the key id bytes: the line becomes an unknown key's */
        char *u = strdup(n);
        b64 = strstr(u, "log ") + 4;
        b64[0] = b64[0] == 'A' ? 'B' : 'A';
        CASE("wrong key id", u, FO_E_VERIFY);
    }
    for (size_t i = 0; i < nc; i++) {
        cr_assert_eq(open1(cases[i].msg, p.v, &err), cases[i].want,
                     "%s: got %d (%s)", cases[i].what, err.code, err.msg);
        free(cases[i].msg);
    }

    /* the right name but another key: the line is an unknown key's */
    cr_assert_eq(open1(n, q.v, &err), FO_E_VERIFY);
    cr_assert(strstr(err.msg, "no signature by a known key"), "%s", err.msg);
    /* a NUL byte inside the text */
    char *z = strdup(n);
    z[4] = '\0';
    cr_assert_eq(open_n(z, strlen(n), (const struct note_verifier *const *)&p.v,
                        1, NULL, &err),
                 FO_E_INVALID);
    free(z);
    /* the message said what */
    char *t = str_replace1(n, "line one", "line 0ne");
    cr_assert_eq(open1(t, p.v, &err), FO_E_VERIFY);
    char want[128];
    snprintf(want, sizeof(want),
             "invalid signature by example.com/log+%08" PRIx32,
             note_verifier_id(p.v));
    cr_assert(strstr(err.msg, want), "%s", err.msg);
    free(t);
    free(n);
    pair_free(&p);
    pair_free(&q);
}

Test(note_open, several_signers)
{
    struct pair a = pair_new("a.example/log");
    struct pair b = pair_new("b.example/witness");
    const char *text = "shared text\n";
    char *na = sign(a.s, text);
    char *nb = sign(b.s, text);
    /* a's note with b's line appended: both sign the same text */
    char *both = str_concat(na, strstr(nb, "\xe2\x80\x94 "));
    struct fo_err err = {0};
    cr_assert_eq(open1(both, a.v, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(open1(both, b.v, &err), FO_OK, "%s", err.msg);
    const struct note_verifier *ab[] = {a.v, b.v};
    cr_assert_eq(open_n(both, strlen(both), ab, 2, text, &err), FO_OK);
    /* a repeated valid line is fine */
    char *twice = str_concat(both, strstr(nb, "\xe2\x80\x94 "));
    cr_assert_eq(open_n(twice, strlen(twice), ab, 2, text, &err), FO_OK);
    /* b's signature over another text appended to a's note: b is known, so
     * its failure fails the note even though a's verifies */
    char *nb2 = sign(b.s, "other text\n");
    char *mixed = str_concat(na, strstr(nb2, "\xe2\x80\x94 "));
    cr_assert_eq(open1(mixed, a.v, &err), FO_OK, "b unknown: ignored");
    cr_assert_eq(open_n(mixed, strlen(mixed), ab, 2, NULL, &err), FO_E_VERIFY);
    free(na);
    free(nb);
    free(nb2);
    free(both);
    free(twice);
    free(mixed);
    pair_free(&a);
    pair_free(&b);
}

/* ---- checkpoints ---- */

Test(note_checkpoint, format_parse_round_trip)
{
    cJSON *v = tu_vector("rfc6962.json");
    cJSON *r;
    cJSON_ArrayForEach (r, cJSON_GetObjectItemCaseSensitive(v, "roots")) {
        struct note_checkpoint c = {.origin = "example.com/log"};
        c.size =
            (uint64_t)cJSON_GetObjectItemCaseSensitive(r, "size")->valuedouble;
        cr_assert_eq(fo_unhex(jstr(r, "root"), c.root, 32), FO_OK);
        struct fo_buf b;
        struct fo_err err = {0};
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        cr_assert_eq(note_checkpoint_format(&c, &b, &err), FO_OK);
        char want[200];
        snprintf(want, sizeof(want), "example.com/log\n%" PRIu64 "\n%s\n",
                 c.size, jstr(r, "root_b64"));
        cr_assert_str_eq(b.data, want);
        struct note_checkpoint d;
        cr_assert_eq(note_checkpoint_parse(b.data, b.len, &d, &err), FO_OK,
                     "%s", err.msg);
        cr_assert_str_eq(d.origin, c.origin);
        cr_assert_eq(d.size, c.size);
        cr_assert_eq(memcmp(d.root, c.root, 32), 0);
        fo_buf_release(&b);
    }
    cJSON_Delete(v);

    /* the largest size */
    struct note_checkpoint c = {.origin = "o", .size = UINT64_MAX}, d;
    memset(c.root, 0xff, 32);
    struct fo_buf b;
    struct fo_err err = {0};
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(note_checkpoint_format(&c, &b, &err), FO_OK);
    cr_assert_str_eq(b.data, "o\n18446744073709551615\n"
                             "//////////////////////////////////////////8=\n");
    cr_assert_eq(note_checkpoint_parse(b.data, b.len, &d, &err), FO_OK);
    cr_assert_eq(d.size, UINT64_MAX);
    fo_buf_release(&b);
}

Test(note_checkpoint, parses_c2sp_example_and_extensions)
{
    static const char cp[] = "example.com/behind-the-sofa\n20852163\n"
                             "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
    struct note_checkpoint c;
    struct fo_err err = {0};
    cr_assert_eq(note_checkpoint_parse(cp, strlen(cp), &c, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_str_eq(c.origin, "example.com/behind-the-sofa");
    cr_assert_eq(c.size, 20852163);
    cr_assert_eq(c.root[0], 0x0a);
    cr_assert_eq(c.root[31], 0x62);

    char *ext = str_concat(cp, "extension one\n\xe2\x80\x94 two\n");
    struct note_checkpoint e;
    cr_assert_eq(note_checkpoint_parse(ext, strlen(ext), &e, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_eq(memcmp(&c, &e, sizeof(c)), 0);
    free(ext);

    /* an origin that is not a key name is still an origin */
    static const char odd[] = "my log+1\n0\n"
                              "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n";
    cr_assert_eq(note_checkpoint_parse(odd, strlen(odd), &c, &err), FO_OK);
    cr_assert_str_eq(c.origin, "my log+1");
    cr_assert_eq(c.size, 0);
}

Test(note_checkpoint, parse_rejections)
{
#define ROOT "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    static const char *const bad[] = {
        "",
        "\n",
        "o",
        "o\n",
        "o\n1\n",
        "o\n1\n" ROOT,       /* no final newline */
        "\n1\n" ROOT "\n",   /* empty origin */
        "o\n\n" ROOT "\n",   /* empty size */
        "o\n01\n" ROOT "\n", /* leading zero */
        "o\n00\n" ROOT "\n",
        "o\n-1\n" ROOT "\n",
        "o\n+1\n" ROOT "\n",
        "o\n 1\n" ROOT "\n",
        "o\n1 \n" ROOT "\n",
        "o\n1e3\n" ROOT "\n",
        "o\n0x10\n" ROOT "\n",
        "o\n18446744073709551616\n" ROOT "\n", /* 2^64 */
        "o\n99999999999999999999\n" ROOT "\n",
        "o\n100000000000000000000\n" ROOT "\n",                 /* 21 digits */
        "o\n1\n\n",                                             /* empty root */
        "o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU\n",  /* unpadded */
        "o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFV=\n", /* bits */
        "o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuA==\n", /* 31 B */
        "o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFUA\n", /* 33 B */
        "o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=AAAA\n",
        "o\n1\n47DEQpj8HBSa-_TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n", /* url b64 */
        "o\n1\n 47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n",
        "o\n1\n" ROOT " \n",
        "o\n1\n" ROOT "\n\n", /* empty extension line */
        "o\n1\n" ROOT "\next\n\n",
        "o\n1\n" ROOT "\next",  /* extension without newline */
        "o\x01\n1\n" ROOT "\n", /* control char */
        "o\r\n1\n" ROOT "\n",
        "\xff\n1\n" ROOT "\n", /* bad UTF-8 */
    };
    struct fo_err err = {0};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct note_checkpoint c;
        cr_assert_eq(note_checkpoint_parse(bad[i], strlen(bad[i]), &c, &err),
                     FO_E_INVALID, "accepted case %zu: %s", i, bad[i]);
    }
    /* origin length */
    char big[NOTE_NAME_MAX + 64];
    memset(big, 'o', NOTE_NAME_MAX + 1);
    snprintf(big + NOTE_NAME_MAX + 1, sizeof(big) - NOTE_NAME_MAX - 1,
             "\n1\n%s\n", ROOT);
    struct note_checkpoint c;
    cr_assert_eq(note_checkpoint_parse(big, strlen(big), &c, &err),
                 FO_E_INVALID);
    memmove(big, big + 1, strlen(big));
    cr_assert_eq(note_checkpoint_parse(big, strlen(big), &c, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_eq(strlen(c.origin), NOTE_NAME_MAX);
    /* a NUL byte */
    static const char nul[] = "o\0\n1\n" ROOT "\n";
    cr_assert_eq(note_checkpoint_parse(nul, sizeof(nul) - 1, &c, &err),
                 FO_E_INVALID);
#undef ROOT
}

Test(note_checkpoint, format_rejections)
{
    struct fo_buf b;
    struct fo_err err = {0};
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    struct note_checkpoint c = {.origin = "", .size = 1};
    cr_assert_eq(note_checkpoint_format(&c, &b, &err), FO_E_INVALID);
    snprintf(c.origin, sizeof(c.origin), "two\nlines");
    cr_assert_eq(note_checkpoint_format(&c, &b, &err), FO_E_INVALID);
    snprintf(c.origin, sizeof(c.origin), "bad \xff");
    cr_assert_eq(note_checkpoint_format(&c, &b, &err), FO_E_INVALID);
    memset(c.origin, 'o', sizeof(c.origin)); /* no NUL */
    cr_assert_eq(note_checkpoint_format(&c, &b, &err), FO_E_INVALID);
    cr_assert_eq(b.len, 0);
    fo_buf_release(&b);
}

Test(note_checkpoint, sign_and_open)
{
    struct pair p = pair_new("forum/5eed");
    struct note_checkpoint c = {.origin = "forum/5eed", .size = 1234}, d;
    for (int i = 0; i < 32; i++)
        c.root[i] = (uint8_t)(i * 9);
    struct fo_buf b;
    struct fo_err err = {0};
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(note_checkpoint_sign(p.s, &c, &b, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(strncmp(b.data, "forum/5eed\n1234\n", 16), 0);
    cr_assert_eq(note_checkpoint_open(b.data, b.len, p.v, &d, &err), FO_OK,
                 "%s", err.msg);
    cr_assert_eq(memcmp(&c, &d, sizeof(c)), 0);

    /* a checkpoint whose origin is not the key's name */
    struct pair q = pair_new("forum/other");
    fo_buf_reset(&b);
    cr_assert_eq(note_checkpoint_sign(q.s, &c, &b, &err), FO_OK);
    cr_assert_eq(note_checkpoint_open(b.data, b.len, q.v, &d, &err),
                 FO_E_VERIFY);
    cr_assert(strstr(err.msg, "origin"), "%s", err.msg);
    cr_assert_eq(note_checkpoint_open(b.data, b.len, p.v, &d, &err),
                 FO_E_VERIFY);
    /* a signed note that is not a checkpoint */
    char *n = sign(p.s, "forum/5eed\n12x\n");
    cr_assert_eq(note_checkpoint_open(n, strlen(n), p.v, &d, &err),
                 FO_E_INVALID);
    free(n);
    fo_buf_release(&b);
    pair_free(&p);
    pair_free(&q);
}

/* ---- interop with Go ---- */

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    char *copy = strdup(path);
    int found = 0;
    for (char *dir = copy, *next; dir && !found; dir = next) {
        next = strchr(dir, ':');
        if (next)
            *next++ = '\0';
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", *dir ? dir : ".", prog);
        found = access(full, X_OK) == 0;
    }
    free(copy);
    return found;
}

static void write_str(const char *dir, const char *name, const char *data,
                      size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    cr_assert_eq(tu_write_file(path, data, len), 0, "write %s", path);
}

static char *read_in(const char *dir, const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    char *d = tu_read_file(path, len);
    cr_assert_not_null(d, "Go did not write %s", path);
    return d;
}

/* Runs sh script args... with output to dir/log; returns the exit status. */
static int run_script(const char *dir, const char *const *argv)
{
    char log[512];
    snprintf(log, sizeof(log), "%s/log", dir);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execv("/bin/sh", (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(note_interop, go_opens_ours_and_we_open_go_s)
{
    if (!on_path("go")) {
        fprintf(stderr, "note_interop: skipped: `go` is not on PATH (install "
                        "golang-go golang-golang-x-mod-dev to check Go "
                        "interop)\n");
        cr_skip("go is not on PATH: Go interop not checked");
    }
    char *dir = tu_tmpdir();
    struct pair p = pair_new("forum.example/interop");
    struct note_checkpoint c = {.origin = "forum.example/interop", .size = 77};
    for (int i = 0; i < 32; i++)
        c.root[i] = (uint8_t)(255 - i);
    struct fo_buf note, vk, sk;
    struct fo_err err = {0};
    fo_buf_init(&note, FO_BUF_UNLIMITED);
    fo_buf_init(&vk, FO_BUF_UNLIMITED);
    fo_buf_init(&sk, FO_BUF_UNLIMITED);
    cr_assert_eq(note_checkpoint_sign(p.s, &c, &note, &err), FO_OK);
    cr_assert_eq(note_signer_format_verifier(p.s, &vk, &err), FO_OK);
    fo_buf_putc(&vk, '\n');
    cr_assert_eq(note_signer_format(p.s, &sk, &err), FO_OK);
    fo_buf_putc(&sk, '\n');
    write_str(dir, "forum.note", note.data, note.len);
    write_str(dir, "forum.vkey", vk.data, vk.len);
    write_str(dir, "forum.skey", sk.data, sk.len);

    char script[512], n_arg[512], v_arg[512], s_arg[512];
    snprintf(script, sizeof(script), "%s/tests/interop/run.sh", FORUM_SRC);
    snprintf(n_arg, sizeof(n_arg), "%s/forum.note", dir);
    snprintf(v_arg, sizeof(v_arg), "%s/forum.vkey", dir);
    snprintf(s_arg, sizeof(s_arg), "%s/forum.skey", dir);
    const char *argv[] = {"sh", script, "-n", n_arg, "-v", v_arg,
                          "-s", s_arg,  "-o", dir,   NULL};
    int status = run_script(dir, argv);
    char *log = read_in(dir, "log", NULL);
    cr_assert_eq(status, 0, "run.sh exit %d:\n%s", status, log);
    cr_assert(strstr(log, "verified: 1 signature(s) by forum.example/interop+"),
              "%s", log);
    cr_assert(strstr(log, "re-signed: identical bytes"), "%s", log);
    free(log);

    /* Go's note, signed by a key Go made, opened here */
    size_t gn_len = 0, gv_len = 0, gc_len = 0;
    char *gn = read_in(dir, "go.note", &gn_len);
    char *gv = read_in(dir, "go.vkey", &gv_len);
    char *gc = read_in(dir, "go-cosigned.note", &gc_len);
    cr_assert_gt(gv_len, 1);
    cr_assert_eq(gv[gv_len - 1], '\n');
    struct note_verifier *go = NULL;
    cr_assert_eq(note_verifier_parse(gv, gv_len - 1, &go, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_str_eq(note_verifier_name(go), "go.example/interop");
    struct fo_buf text;
    fo_buf_init(&text, FO_BUF_UNLIMITED);
    cr_assert_eq(note_open(gn, gn_len, (const struct note_verifier *const *)&go,
                           1, &text, &err),
                 FO_OK, "%s", err.msg);
    struct note_checkpoint d;
    cr_assert_eq(note_checkpoint_parse(text.data, text.len, &d, &err), FO_OK);
    cr_assert_eq(memcmp(&c, &d, sizeof(c)), 0);
    /* Go's note is not ours */
    cr_assert_eq(open_n(gn, gn_len, (const struct note_verifier *const *)&p.v,
                        1, NULL, &err),
                 FO_E_VERIFY);
    /* cosigned by both: each key alone opens it, the other line unknown */
    cr_assert_eq(note_checkpoint_open(gc, gc_len, p.v, &d, &err), FO_OK, "%s",
                 err.msg);
    const struct note_verifier *both[] = {go, p.v};
    cr_assert_eq(open_n(gc, gc_len, both, 2, text.data, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_eq(open_n(gc, gc_len, (const struct note_verifier *const *)&go, 1,
                        text.data, &err),
                 FO_OK, "%s", err.msg);

    /* and Go rejects a note we tampered with */
    char *bad = str_replace1(note.data, "\n77\n", "\n78\n");
    write_str(dir, "bad.note", bad, strlen(bad));
    snprintf(n_arg, sizeof(n_arg), "%s/bad.note", dir);
    const char *argv2[] = {"sh", script, "-n", n_arg, "-v", v_arg, NULL};
    status = run_script(dir, argv2);
    log = read_in(dir, "log", NULL);
    cr_assert_eq(status, 1, "Go accepted a tampered note:\n%s", log);
    free(log);
    free(bad);

    free(gn);
    free(gv);
    free(gc);
    fo_buf_release(&text);
    fo_buf_release(&note);
    fo_buf_release(&vk);
    fo_buf_release(&sk);
    note_verifier_free(go);
    pair_free(&p);
    tu_rmrf(dir);
}
