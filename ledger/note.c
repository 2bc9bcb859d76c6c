/* note: C2SP signed notes and tlog checkpoints with Ed25519 (OpenSSL 3.0
 * EVP, one-shot sign and verify), with our own strict base64, UTF-8 and
 * line parsing: EVP_DecodeBlock is too loose for a format that is signed. */
#include "ledger/fo_ossl.h"
#include "ledger/note.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_sha.h"

#define ALG_ED25519 0x01
#define SEED_LEN 32
#define SIG_LEN 64
#define KEY_ID_LEN 4
/* The longest decoded signature (key id included) note_open reads. Ed25519
 * needs 68 bytes; room is left for the post-quantum signatures of others,
 * which the spec says can approach 5 kB, since unknown signers' lines must
 * still parse. */
#define SIG_DECODED_MAX 8192
/* "— " : U+2014 EM DASH and a space. */
static const char sig_prefix[] = "\xe2\x80\x94 ";
#define SIG_PREFIX_LEN 4
static const char private_prefix[] = "PRIVATE+KEY+";
#define PRIVATE_PREFIX_LEN 12

struct note_signer {
    char name[NOTE_NAME_MAX + 1];
    uint32_t id;
    uint8_t seed[SEED_LEN];
    uint8_t pub[NOTE_ED25519_PUBLIC_LEN];
    EVP_PKEY *pkey;
};

struct note_verifier {
    char name[NOTE_NAME_MAX + 1];
    uint32_t id;
    uint8_t pub[NOTE_ED25519_PUBLIC_LEN];
    EVP_PKEY *pkey;
};

/* ---- text rules ---- */

/* Decodes one UTF-8 sequence of at most n bytes at p into *cp. Returns its
 * length, or 0 when it is not well-formed (truncated, overlong, a surrogate
 * or above U+10FFFF), as RFC 3629 defines it. */
static size_t utf8_next(const unsigned char *p, size_t n, uint32_t *cp)
{
    uint32_t c = p[0], min;
    size_t len;

    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if ((c & 0xe0) == 0xc0) {
        len = 2;
        c &= 0x1f;
        min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        c &= 0x0f;
        min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        c &= 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

/* The code points Go's unicode.IsSpace reports, which key names exclude. */
static int is_unicode_space(uint32_t c)
{
    switch (c) {
    case '\t':
    case '\n':
    case '\v':
    case '\f':
    case '\r':
    case ' ':
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000:
        return 1;
    default:
        return c >= 0x2000 && c <= 0x200a;
    }
}

/* FO_OK when s is valid UTF-8 with no control character (below U+0020)
 * other than newline; newline too is refused unless allow_newline. what
 * names the input in the message. */
static int check_text(const char *s, size_t len, int allow_newline,
                      const char *what, struct fo_err *err)
{
    const unsigned char *p = (const unsigned char *)s;

    for (size_t i = 0; i < len;) {
        uint32_t c;
        size_t n = utf8_next(p + i, len - i, &c);
        if (n == 0)
            return fo_err_set(err, FO_E_INVALID,
                              "%s: invalid UTF-8 at byte %zu", what, i);
        if (c < 0x20 && !(c == '\n' && allow_newline))
            return fo_err_set(err, FO_E_INVALID,
                              "%s: control character 0x%02x at byte %zu", what,
                              (unsigned)c, i);
        i += n;
    }
    return FO_OK;
}

int note_name_check(const char *name, size_t len, struct fo_err *err)
{
    const unsigned char *p = (const unsigned char *)name;

    if (len == 0)
        return fo_err_set(err, FO_E_INVALID, "key name: empty");
    if (len > NOTE_NAME_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "key name: %zu bytes, over the maximum %d", len,
                          NOTE_NAME_MAX);
    for (size_t i = 0; i < len;) {
        uint32_t c;
        size_t n = utf8_next(p + i, len - i, &c);
        if (n == 0)
            return fo_err_set(err, FO_E_INVALID,
                              "key name: invalid UTF-8 at byte %zu", i);
        if (is_unicode_space(c))
            return fo_err_set(err, FO_E_INVALID, "key name: space at byte %zu",
                              i);
        if (c < 0x20)
            return fo_err_set(err, FO_E_INVALID,
                              "key name: control character at byte %zu", i);
        if (c == '+')
            return fo_err_set(err, FO_E_INVALID, "key name: '+' at byte %zu",
                              i);
        i += n;
    }
    return FO_OK;
}

/* ---- base64 (RFC 4648 §4), strict ---- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

static int b64_encode(struct fo_buf *out, const uint8_t *in, size_t len)
{
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        char q[4] = {b64_alphabet[(v >> 18) & 63], b64_alphabet[(v >> 12) & 63],
                     i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=',
                     i + 2 < len ? b64_alphabet[v & 63] : '='};
        int rc = fo_buf_append(out, q, sizeof(q));
        if (rc != FO_OK)
            return rc;
    }
    return FO_OK;
}

/* Decodes canonical base64 into out (cap bytes). Returns 0 and sets *outlen,
 * or -1 when src is empty, not a multiple of 4 long, holds a byte outside
 * the alphabet (whitespace included), has '=' anywhere but one or two final
 * padding places, has non-zero bits under the padding (a second spelling of
 * the same bytes), or decodes to more than cap bytes. */
static int b64_decode(const char *src, size_t len, uint8_t *out, size_t cap,
                      size_t *outlen)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t pad = 0;

    if (len == 0 || len % 4 != 0)
        return -1;
    if (s[len - 1] == '=')
        pad = s[len - 2] == '=' ? 2 : 1;
    size_t n = len / 4 * 3 - pad;
    if (n > cap)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int last = i + 4 == len;
        for (size_t j = 0; j < 4; j++) {
            if (last && j >= 4 - pad) {
                v[j] = 0; /* '=' checked above */
                continue;
            }
            v[j] = b64_value(s[i + j]);
            if (v[j] < 0)
                return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                     (uint32_t)v[2] << 6 | (uint32_t)v[3];
        if (last && pad == 2 && (v[1] & 0x0f))
            return -1;
        if (last && pad == 1 && (v[2] & 0x03))
            return -1;
        out[o++] = (uint8_t)(w >> 16);
        if (!(last && pad == 2))
            out[o++] = (uint8_t)(w >> 8);
        if (!(last && pad >= 1))
            out[o++] = (uint8_t)w;
    }
    *outlen = o;
    return 0;
}

int note_b64_encode(struct fo_buf *out, const uint8_t *in, size_t len)
{
    return b64_encode(out, in, len);
}

int note_b64_decode(const char *src, size_t len, uint8_t *out, size_t cap,
                    size_t *outlen)
{
    return b64_decode(src, len, out, cap, outlen);
}

/* ---- keys ---- */

uint32_t note_key_id(const char *name, size_t name_len, uint8_t alg,
                     const uint8_t pub[NOTE_ED25519_PUBLIC_LEN])
{
    uint8_t buf[NOTE_NAME_MAX + 2 + NOTE_ED25519_PUBLIC_LEN];
    uint8_t h[FO_SHA256_LEN];

    memcpy(buf, name, name_len);
    buf[name_len] = '\n';
    buf[name_len + 1] = alg;
    memcpy(buf + name_len + 2, pub, NOTE_ED25519_PUBLIC_LEN);
    fo_sha256(buf, name_len + 2 + NOTE_ED25519_PUBLIC_LEN, h);
    return (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 |
           (uint32_t)h[3];
}

static uint32_t key_id(const char *name, size_t name_len,
                       const uint8_t pub[NOTE_ED25519_PUBLIC_LEN])
{
    return note_key_id(name, name_len, ALG_ED25519, pub);
}

/* Makes s->pkey and s->pub from s->seed. */
static int signer_from_seed(struct note_signer *s, struct fo_err *err)
{
    size_t publen = sizeof(s->pub);

    s->pkey =
        EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, s->seed, SEED_LEN);
    if (!s->pkey)
        return fo_err_ossl(err, "ed25519 private key");
    if (EVP_PKEY_get_raw_public_key(s->pkey, s->pub, &publen) != 1 ||
        publen != sizeof(s->pub))
        return fo_err_ossl(err, "ed25519 public key");
    return FO_OK;
}

static int verifier_from_pub(struct note_verifier *v, struct fo_err *err)
{
    v->pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, v->pub,
                                          NOTE_ED25519_PUBLIC_LEN);
    if (!v->pkey)
        return fo_err_ossl(err, "ed25519 public key");
    return FO_OK;
}

int note_signer_generate(const char *name, struct note_signer **out,
                         struct fo_err *err)
{
    size_t name_len = strlen(name);
    int rc = note_name_check(name, name_len, err);
    if (rc != FO_OK)
        return rc;
    struct note_signer *s = calloc(1, sizeof(*s));
    if (!s)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    memcpy(s->name, name, name_len);
    if (RAND_priv_bytes(s->seed, SEED_LEN) != 1) {
        rc = fo_err_ossl(err, "random seed");
        goto out;
    }
    rc = signer_from_seed(s, err);
    if (rc != FO_OK)
        goto out;
    s->id = key_id(s->name, name_len, s->pub);
    *out = s;
    s = NULL;
out:
    note_signer_free(s);
    return rc;
}

static int parse_hex8(const char *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = p[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

int note_key_parse(const char *p, size_t len, const char *what, uint8_t alg,
                   const char *alg_name, size_t *name_len, uint32_t *id,
                   uint8_t key[1 + NOTE_ED25519_PUBLIC_LEN], struct fo_err *err)
{
    const char *plus = memchr(p, '+', len);
    size_t dec_len = 0;

    if (!plus)
        return fo_err_set(err, FO_E_INVALID, "%s: no '+' after the name", what);
    *name_len = (size_t)(plus - p);
    int rc = note_name_check(p, *name_len, err);
    if (rc != FO_OK) {
        fo_err_prefix(err, "%s", what);
        return rc;
    }
    size_t rest = len - *name_len - 1;
    const char *hex = plus + 1;
    if (rest < 9 || hex[8] != '+' || parse_hex8(hex, id) != 0)
        return fo_err_set(err, FO_E_INVALID,
                          "%s: key id is not 8 lowercase hex digits and '+'",
                          what);
    if (b64_decode(hex + 9, rest - 9, key, 1 + NOTE_ED25519_PUBLIC_LEN,
                   &dec_len) != 0 ||
        dec_len != 1 + NOTE_ED25519_PUBLIC_LEN)
        return fo_err_set(err, FO_E_INVALID,
                          "%s: key is not canonical base64 of 33 bytes", what);
    if (key[0] != alg)
        return fo_err_set(err, FO_E_INVALID,
                          "%s: unknown algorithm 0x%02x (want 0x%02x, %s)",
                          what, key[0], alg, alg_name);
    return FO_OK;
}

/* The note form of the key text: Ed25519 (0x01). */
static int parse_key_text(const char *p, size_t len, const char *what,
                          size_t *name_len, uint32_t *id,
                          uint8_t key[1 + SEED_LEN], struct fo_err *err)
{
    return note_key_parse(p, len, what, ALG_ED25519, "Ed25519", name_len, id,
                          key, err);
}

int note_signer_parse(const char *text, size_t len, struct note_signer **out,
                      struct fo_err *err)
{
    uint8_t key[1 + SEED_LEN];
    size_t name_len = 0;
    uint32_t id = 0;
    struct note_signer *s = NULL;
    int rc;

    if (len < PRIVATE_PREFIX_LEN ||
        memcmp(text, private_prefix, PRIVATE_PREFIX_LEN) != 0) {
        rc = fo_err_set(err, FO_E_INVALID,
                        "signer key: does not start with PRIVATE+KEY+");
        goto out;
    }
    rc = parse_key_text(text + PRIVATE_PREFIX_LEN, len - PRIVATE_PREFIX_LEN,
                        "signer key", &name_len, &id, key, err);
    if (rc != FO_OK)
        goto out;
    s = calloc(1, sizeof(*s));
    if (!s) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    memcpy(s->name, text + PRIVATE_PREFIX_LEN, name_len);
    memcpy(s->seed, key + 1, SEED_LEN);
    rc = signer_from_seed(s, err);
    if (rc != FO_OK)
        goto out;
    s->id = key_id(s->name, name_len, s->pub);
    if (s->id != id) {
        rc = fo_err_set(err, FO_E_INVALID,
                        "signer key: key id %08" PRIx32
                        " does not match the key (%08" PRIx32 ")",
                        id, s->id);
        goto out;
    }
    *out = s;
    s = NULL;
out:
    OPENSSL_cleanse(key, sizeof(key));
    note_signer_free(s);
    return rc;
}

/* Appends "<name>+<id>+<base64(0x01 || key)>" to b. */
static int put_key_text(struct fo_buf *b, const char *name, uint32_t id,
                        const uint8_t key32[32])
{
    uint8_t key[1 + 32];
    key[0] = ALG_ED25519;
    memcpy(key + 1, key32, 32);
    int rc = fo_buf_printf(b, "%s+%08" PRIx32 "+", name, id);
    if (rc == FO_OK)
        rc = b64_encode(b, key, sizeof(key));
    OPENSSL_cleanse(key, sizeof(key));
    return rc;
}

/* Reports a buffer's refusal to grow (FO_E_NOMEM, FO_E_TOO_LARGE). */
static int buf_fail(int rc, struct fo_err *err)
{
    return fo_err_set(err, rc, "note: output: %s", fo_code_message(rc));
}

/* Outputs are built in a local buffer and appended to the caller's in one
 * piece, so a failure leaves the caller's buffer as it was. rc is FO_OK, or
 * a failure already reported in err. Wipes and releases tmp. */
static int hand_over(struct fo_buf *tmp, struct fo_buf *out, int rc,
                     struct fo_err *err)
{
    if (rc == FO_OK) {
        rc = fo_buf_append(out, tmp->data, tmp->len);
        if (rc != FO_OK)
            buf_fail(rc, err);
    }
    if (tmp->data)
        OPENSSL_cleanse(tmp->data, tmp->len);
    fo_buf_release(tmp);
    return rc;
}

int note_signer_format(const struct note_signer *s, struct fo_buf *out,
                       struct fo_err *err)
{
    struct fo_buf tmp;
    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    int rc = fo_buf_puts(&tmp, private_prefix);
    if (rc == FO_OK)
        rc = put_key_text(&tmp, s->name, s->id, s->seed);
    if (rc != FO_OK)
        buf_fail(rc, err);
    return hand_over(&tmp, out, rc, err);
}

int note_signer_format_verifier(const struct note_signer *s, struct fo_buf *out,
                                struct fo_err *err)
{
    struct fo_buf tmp;
    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    int rc = put_key_text(&tmp, s->name, s->id, s->pub);
    if (rc != FO_OK)
        buf_fail(rc, err);
    return hand_over(&tmp, out, rc, err);
}

int note_signer_verifier(const struct note_signer *s,
                         struct note_verifier **out, struct fo_err *err)
{
    struct note_verifier *v = calloc(1, sizeof(*v));
    if (!v)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    memcpy(v->name, s->name, sizeof(v->name));
    v->id = s->id;
    memcpy(v->pub, s->pub, sizeof(v->pub));
    int rc = verifier_from_pub(v, err);
    if (rc != FO_OK) {
        note_verifier_free(v);
        return rc;
    }
    *out = v;
    return FO_OK;
}

const char *note_signer_name(const struct note_signer *s)
{
    return s->name;
}

uint32_t note_signer_id(const struct note_signer *s)
{
    return s->id;
}

void note_signer_free(struct note_signer *s)
{
    if (!s)
        return;
    EVP_PKEY_free(s->pkey);
    OPENSSL_cleanse(s, sizeof(*s));
    free(s);
}

int note_verifier_parse(const char *text, size_t len,
                        struct note_verifier **out, struct fo_err *err)
{
    uint8_t key[1 + NOTE_ED25519_PUBLIC_LEN];
    size_t name_len = 0;
    uint32_t id = 0;

    int rc =
        parse_key_text(text, len, "verifier key", &name_len, &id, key, err);
    if (rc != FO_OK)
        return rc;
    uint32_t want = key_id(text, name_len, key + 1);
    if (want != id)
        return fo_err_set(err, FO_E_INVALID,
                          "verifier key: key id %08" PRIx32
                          " does not match the key (%08" PRIx32 ")",
                          id, want);
    struct note_verifier *v = calloc(1, sizeof(*v));
    if (!v)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    memcpy(v->name, text, name_len);
    v->id = id;
    memcpy(v->pub, key + 1, NOTE_ED25519_PUBLIC_LEN);
    rc = verifier_from_pub(v, err);
    if (rc != FO_OK) {
        note_verifier_free(v);
        return rc;
    }
    *out = v;
    return FO_OK;
}

int note_verifier_format(const struct note_verifier *v, struct fo_buf *out,
                         struct fo_err *err)
{
    struct fo_buf tmp;
    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    int rc = put_key_text(&tmp, v->name, v->id, v->pub);
    if (rc != FO_OK)
        buf_fail(rc, err);
    return hand_over(&tmp, out, rc, err);
}

const char *note_verifier_name(const struct note_verifier *v)
{
    return v->name;
}

uint32_t note_verifier_id(const struct note_verifier *v)
{
    return v->id;
}

void note_verifier_public_key(const struct note_verifier *v,
                              uint8_t out[NOTE_ED25519_PUBLIC_LEN])
{
    memcpy(out, v->pub, NOTE_ED25519_PUBLIC_LEN);
}

void note_verifier_free(struct note_verifier *v)
{
    if (!v)
        return;
    EVP_PKEY_free(v->pkey);
    free(v);
}

/* ---- signing and opening ---- */

static int check_note_text(const char *text, size_t len, struct fo_err *err)
{
    if (len == 0)
        return fo_err_set(err, FO_E_INVALID, "note text: empty");
    if (len > NOTE_MAX_LEN)
        return fo_err_set(err, FO_E_INVALID,
                          "note text: %zu bytes, over the maximum %d", len,
                          NOTE_MAX_LEN);
    if (text[len - 1] != '\n')
        return fo_err_set(err, FO_E_INVALID,
                          "note text: does not end in a newline");
    return check_text(text, len, 1, "note text", err);
}

int note_sign(const struct note_signer *s, const char *text, size_t len,
              struct fo_buf *out, struct fo_err *err)
{
    uint8_t sig[KEY_ID_LEN + SIG_LEN];
    size_t siglen = SIG_LEN;
    EVP_MD_CTX *ctx = NULL;
    struct fo_buf tmp;

    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    int rc = check_note_text(text, len, err);
    if (rc != FO_OK)
        goto out;
    ctx = EVP_MD_CTX_new();
    if (!ctx) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    /* Ed25519 signs the message itself: no digest, one call. */
    if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, s->pkey) != 1 ||
        EVP_DigestSign(ctx, sig + KEY_ID_LEN, &siglen,
                       (const unsigned char *)text, len) != 1 ||
        siglen != SIG_LEN) {
        rc = fo_err_ossl(err, "ed25519 sign");
        goto out;
    }
    sig[0] = (uint8_t)(s->id >> 24);
    sig[1] = (uint8_t)(s->id >> 16);
    sig[2] = (uint8_t)(s->id >> 8);
    sig[3] = (uint8_t)s->id;

    rc = fo_buf_append(&tmp, text, len);
    if (rc == FO_OK)
        rc = fo_buf_putc(&tmp, '\n');
    if (rc == FO_OK)
        rc = fo_buf_puts(&tmp, sig_prefix);
    if (rc == FO_OK)
        rc = fo_buf_printf(&tmp, "%s ", s->name);
    if (rc == FO_OK)
        rc = b64_encode(&tmp, sig, sizeof(sig));
    if (rc == FO_OK)
        rc = fo_buf_putc(&tmp, '\n');
    if (rc != FO_OK)
        buf_fail(rc, err);
out:
    EVP_MD_CTX_free(ctx);
    return hand_over(&tmp, out, rc, err);
}

/* Sets *ok to 1 when sig (siglen bytes) is v's Ed25519 signature of msg,
 * else 0. Fails only when OpenSSL does. */
static int ed25519_ok(const struct note_verifier *v, const uint8_t *sig,
                      size_t siglen, const char *msg, size_t len,
                      struct fo_err *err, int *ok)
{
    *ok = 0;
    if (siglen != SIG_LEN)
        return FO_OK;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_OK;
    if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, v->pkey) != 1) {
        rc = fo_err_ossl(err, "ed25519 verify");
    } else {
        *ok = EVP_DigestVerify(ctx, sig, siglen, (const unsigned char *)msg,
                               len) == 1;
        ERR_clear_error(); /* a bad signature leaves an error queued */
    }
    EVP_MD_CTX_free(ctx);
    return rc;
}

int note_open(const char *msg, size_t len,
              const struct note_verifier *const *known, size_t n,
              struct fo_buf *text, struct fo_err *err)
{
    if (len > NOTE_MAX_LEN)
        return fo_err_set(err, FO_E_INVALID,
                          "note: %zu bytes, over the maximum %d", len,
                          NOTE_MAX_LEN);
    int rc = check_text(msg, len, 1, "note", err);
    if (rc != FO_OK)
        return rc;
    if (len == 0 || msg[len - 1] != '\n')
        return fo_err_set(err, FO_E_INVALID, "note: does not end in a newline");

    /* The text ends before the last blank line; signature lines can hold
     * no blank line, so the last "\n\n" is the separator. */
    size_t split = len;
    for (size_t i = len - 1; i-- > 0;)
        if (msg[i] == '\n' && msg[i + 1] == '\n') {
            split = i;
            break;
        }
    if (split == len)
        return fo_err_set(err, FO_E_INVALID,
                          "note: no blank line before the signatures");
    size_t text_len = split + 1;
    size_t pos = split + 2;
    if (pos == len)
        return fo_err_set(err, FO_E_INVALID, "note: no signatures");

    uint8_t *sig = malloc(SIG_DECODED_MAX);
    if (!sig)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    unsigned lines = 0, verified = 0;
    const struct note_verifier *bad = NULL;
    while (pos < len) {
        const char *line = msg + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t line_len = (size_t)(nl - line);
        pos += line_len + 1;
        lines++;
        if (lines > NOTE_MAX_SIGS) {
            rc = fo_err_set(err, FO_E_INVALID, "note: more than %d signatures",
                            NOTE_MAX_SIGS);
            goto out;
        }
        if (line_len < SIG_PREFIX_LEN ||
            memcmp(line, sig_prefix, SIG_PREFIX_LEN) != 0) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "note: signature line %u does not start with an "
                            "em dash and a space",
                            lines);
            goto out;
        }
        const char *name = line + SIG_PREFIX_LEN;
        size_t rest = line_len - SIG_PREFIX_LEN;
        const char *sp = memchr(name, ' ', rest);
        if (!sp) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "note: signature line %u has no space after the "
                            "key name",
                            lines);
            goto out;
        }
        size_t name_len = (size_t)(sp - name);
        rc = note_name_check(name, name_len, err);
        if (rc != FO_OK) {
            fo_err_prefix(err, "note: signature line %u", lines);
            goto out;
        }
        size_t siglen = 0;
        const char *b64 = sp + 1;
        size_t b64_len = rest - name_len - 1;
        if (b64_decode(b64, b64_len, sig, SIG_DECODED_MAX, &siglen) != 0 ||
            siglen <= KEY_ID_LEN) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "note: signature line %u: signature is not "
                            "canonical base64 of a key id and a signature",
                            lines);
            goto out;
        }
        uint32_t id = (uint32_t)sig[0] << 24 | (uint32_t)sig[1] << 16 |
                      (uint32_t)sig[2] << 8 | (uint32_t)sig[3];
        for (size_t k = 0; k < n; k++) {
            const struct note_verifier *v = known[k];
            if (v->id != id || strlen(v->name) != name_len ||
                memcmp(v->name, name, name_len) != 0)
                continue;
            int ok = 0;
            rc = ed25519_ok(v, sig + KEY_ID_LEN, siglen - KEY_ID_LEN, msg,
                            text_len, err, &ok);
            if (rc != FO_OK)
                goto out;
            if (ok)
                verified++;
            else if (!bad)
                bad = v;
        }
    }
    if (bad) {
        rc = fo_err_set(err, FO_E_VERIFY,
                        "note: invalid signature by %s+%08" PRIx32, bad->name,
                        bad->id);
        goto out;
    }
    if (verified == 0) {
        rc = fo_err_set(err, FO_E_VERIFY, "note: no signature by a known key");
        goto out;
    }
    rc = fo_buf_append(text, msg, text_len);
    if (rc != FO_OK)
        buf_fail(rc, err);
out:
    free(sig);
    return rc;
}

/* ---- checkpoints ---- */

int note_checkpoint_format(const struct note_checkpoint *c, struct fo_buf *out,
                           struct fo_err *err)
{
    size_t olen = strnlen(c->origin, sizeof(c->origin));
    struct fo_buf tmp;

    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    if (olen == 0 || olen > NOTE_NAME_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "checkpoint: origin empty or over %d bytes",
                          NOTE_NAME_MAX);
    int rc = check_text(c->origin, olen, 0, "checkpoint origin", err);
    if (rc != FO_OK)
        return rc;
    rc = fo_buf_printf(&tmp, "%s\n%" PRIu64 "\n", c->origin, c->size);
    if (rc == FO_OK)
        rc = b64_encode(&tmp, c->root, NOTE_ROOT_LEN);
    if (rc == FO_OK)
        rc = fo_buf_putc(&tmp, '\n');
    if (rc != FO_OK)
        buf_fail(rc, err);
    return hand_over(&tmp, out, rc, err);
}

/* The next line of text from *pos: sets *line and *line_len (without the
 * newline) and moves *pos past it. 0, or -1 at the end of the text. The
 * text is known to end in a newline. */
static int next_line(const char *text, size_t len, size_t *pos,
                     const char **line, size_t *line_len)
{
    if (*pos >= len)
        return -1;
    const char *p = text + *pos;
    const char *nl = memchr(p, '\n', len - *pos);
    *line = p;
    *line_len = (size_t)(nl - p);
    *pos += *line_len + 1;
    return 0;
}

static int parse_size(const char *p, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    if (len == 0 || len > 20 || (len > 1 && p[0] == '0'))
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int note_checkpoint_parse(const char *text, size_t len,
                          struct note_checkpoint *out, struct fo_err *err)
{
    struct note_checkpoint c;
    const char *line;
    size_t line_len, pos = 0, root_len = 0;

    memset(&c, 0, sizeof(c));
    if (len > NOTE_MAX_LEN)
        return fo_err_set(err, FO_E_INVALID, "checkpoint: too long");
    int rc = check_text(text, len, 1, "checkpoint", err);
    if (rc != FO_OK)
        return rc;
    if (len == 0 || text[len - 1] != '\n')
        return fo_err_set(err, FO_E_INVALID,
                          "checkpoint: does not end in a newline");

    if (next_line(text, len, &pos, &line, &line_len) != 0 || line_len == 0)
        return fo_err_set(err, FO_E_INVALID, "checkpoint: empty origin");
    if (line_len > NOTE_NAME_MAX)
        return fo_err_set(err, FO_E_INVALID, "checkpoint: origin over %d bytes",
                          NOTE_NAME_MAX);
    memcpy(c.origin, line, line_len);

    if (next_line(text, len, &pos, &line, &line_len) != 0)
        return fo_err_set(err, FO_E_INVALID, "checkpoint: no size line");
    if (parse_size(line, line_len, &c.size) != 0)
        return fo_err_set(err, FO_E_INVALID,
                          "checkpoint: size is not a decimal number below "
                          "2^64 without leading zeros");

    if (next_line(text, len, &pos, &line, &line_len) != 0)
        return fo_err_set(err, FO_E_INVALID, "checkpoint: no root line");
    if (b64_decode(line, line_len, c.root, NOTE_ROOT_LEN, &root_len) != 0 ||
        root_len != NOTE_ROOT_LEN)
        return fo_err_set(err, FO_E_INVALID,
                          "checkpoint: root is not canonical base64 of 32 "
                          "bytes");

    /* Extension lines: opaque, ignored, but never empty. */
    while (next_line(text, len, &pos, &line, &line_len) == 0)
        if (line_len == 0)
            return fo_err_set(err, FO_E_INVALID,
                              "checkpoint: empty extension line");
    *out = c;
    return FO_OK;
}

int note_checkpoint_sign(const struct note_signer *s,
                         const struct note_checkpoint *c, struct fo_buf *out,
                         struct fo_err *err)
{
    struct fo_buf body;
    fo_buf_init(&body, FO_BUF_UNLIMITED);
    int rc = note_checkpoint_format(c, &body, err);
    if (rc == FO_OK)
        rc = note_sign(s, body.data, body.len, out, err);
    fo_buf_release(&body);
    return rc;
}

int note_checkpoint_open(const char *msg, size_t len,
                         const struct note_verifier *v,
                         struct note_checkpoint *out, struct fo_err *err)
{
    struct note_checkpoint c;
    struct fo_buf text;
    fo_buf_init(&text, NOTE_MAX_LEN);
    int rc = note_open(msg, len, &v, 1, &text, err);
    if (rc != FO_OK)
        goto out;
    rc = note_checkpoint_parse(text.data, text.len, &c, err);
    if (rc != FO_OK)
        goto out;
    if (strcmp(c.origin, v->name) != 0) {
        rc = fo_err_set(err, FO_E_VERIFY,
                        "checkpoint: origin '%s' is not the key name '%s'",
                        c.origin, v->name);
        goto out;
    }
    *out = c;
out:
    fo_buf_release(&text);
    return rc;
}
