/* cosig: C2SP tlog-cosignature/v1 (Ed25519) cosignatures: witness keys,
 * signing, and checking k of n witnesses on a checkpoint. See cosig.h. */
#include "ledger/cosig.h"
#include "ledger/fo_ossl.h"

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

#define KEY_LEN 32
#define SIG_LEN 64
#define ID_LEN 4
#define TS_LEN 8
#define COSIG_LEN (ID_LEN + TS_LEN + SIG_LEN)
/* "— " : U+2014 EM DASH and a space. */
static const char dash[] = "\xe2\x80\x94 ";
#define DASH_LEN 4
static const char private_prefix[] = "PRIVATE+KEY+";
#define PRIVATE_PREFIX_LEN 12

struct cosig_signer {
    char name[NOTE_NAME_MAX + 1];
    uint32_t id;
    uint8_t seed[KEY_LEN];
    uint8_t pub[KEY_LEN];
    EVP_PKEY *pkey;
};

struct cosig_verifier {
    char name[NOTE_NAME_MAX + 1];
    uint32_t id;
    uint8_t pub[KEY_LEN];
    EVP_PKEY *pkey;
};

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

/* The key id (note_key_id) of a cosignature/v1 key. */
static uint32_t key_id(const char *name, size_t name_len,
                       const uint8_t pub[KEY_LEN])
{
    return note_key_id(name, name_len, COSIG_ALG_ED25519, pub);
}

static int signer_from_seed(struct cosig_signer *s, struct fo_err *err)
{
    size_t publen = KEY_LEN;
    s->pkey =
        EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, s->seed, KEY_LEN);
    if (!s->pkey)
        return fo_err_ossl(err, "ed25519 private key");
    if (EVP_PKEY_get_raw_public_key(s->pkey, s->pub, &publen) != 1 ||
        publen != KEY_LEN)
        return fo_err_ossl(err, "ed25519 public key");
    s->id = key_id(s->name, strlen(s->name), s->pub);
    return FO_OK;
}

int cosig_signer_generate(const char *name, struct cosig_signer **out,
                          struct fo_err *err)
{
    size_t name_len = strlen(name);
    int rc = note_name_check(name, name_len, err);
    if (rc)
        return rc;
    struct cosig_signer *s = calloc(1, sizeof(*s));
    if (!s)
        return nomem(err);
    memcpy(s->name, name, name_len);
    if (RAND_priv_bytes(s->seed, KEY_LEN) != 1)
        rc = fo_err_ossl(err, "random seed");
    if (!rc)
        rc = signer_from_seed(s, err);
    if (rc) {
        cosig_signer_free(s);
        return rc;
    }
    *out = s;
    return FO_OK;
}

/* "<name>+<8 hex>+<base64(0x04 || 32 bytes)>" into name_len, id, key. */
static int parse_key_text(const char *p, size_t len, const char *what,
                          size_t *name_len, uint32_t *id,
                          uint8_t key[1 + KEY_LEN], struct fo_err *err)
{
    return note_key_parse(p, len, what, COSIG_ALG_ED25519, "cosignature/v1",
                          name_len, id, key, err);
}

int cosig_signer_parse(const char *text, size_t len, struct cosig_signer **out,
                       struct fo_err *err)
{
    uint8_t key[1 + KEY_LEN];
    size_t name_len = 0;
    uint32_t id = 0;
    struct cosig_signer *s = NULL;
    int rc;
    if (len < PRIVATE_PREFIX_LEN ||
        memcmp(text, private_prefix, PRIVATE_PREFIX_LEN) != 0)
        return fo_err_set(err, FO_E_INVALID,
                          "witness key: does not start with PRIVATE+KEY+");
    rc = parse_key_text(text + PRIVATE_PREFIX_LEN, len - PRIVATE_PREFIX_LEN,
                        "witness key", &name_len, &id, key, err);
    if (rc)
        goto out;
    if (!(s = calloc(1, sizeof(*s)))) {
        rc = nomem(err);
        goto out;
    }
    memcpy(s->name, text + PRIVATE_PREFIX_LEN, name_len);
    memcpy(s->seed, key + 1, KEY_LEN);
    rc = signer_from_seed(s, err);
    if (!rc && s->id != id)
        rc = fo_err_set(err, FO_E_INVALID,
                        "witness key: key id %08" PRIx32
                        " does not match the key (%08" PRIx32 ")",
                        id, s->id);
    if (!rc) {
        *out = s;
        s = NULL;
    }
out:
    OPENSSL_cleanse(key, sizeof(key));
    cosig_signer_free(s);
    return rc;
}

static int put_key(struct fo_buf *tmp, const char *name, uint32_t id,
                   const uint8_t k[KEY_LEN])
{
    uint8_t key[1 + KEY_LEN];
    key[0] = COSIG_ALG_ED25519;
    memcpy(key + 1, k, KEY_LEN);
    int rc = fo_buf_printf(tmp, "%s+%08" PRIx32 "+", name, id);
    if (!rc)
        rc = note_b64_encode(tmp, key, sizeof(key));
    OPENSSL_cleanse(key, sizeof(key));
    return rc;
}

/* Appends tmp to out in one piece (so a failure leaves out as it was),
 * then wipes and releases tmp. */
static int hand_over(struct fo_buf *tmp, struct fo_buf *out, int rc,
                     struct fo_err *err)
{
    if (rc)
        rc =
            fo_err_set(err, rc, "cosignature: output: %s", fo_code_message(rc));
    else if ((rc = fo_buf_append(out, tmp->data, tmp->len)) != FO_OK)
        rc =
            fo_err_set(err, rc, "cosignature: output: %s", fo_code_message(rc));
    if (tmp->data)
        OPENSSL_cleanse(tmp->data, tmp->len);
    fo_buf_release(tmp);
    return rc;
}

int cosig_signer_format(const struct cosig_signer *s, struct fo_buf *out,
                        struct fo_err *err)
{
    struct fo_buf tmp;
    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    int rc = fo_buf_puts(&tmp, private_prefix);
    if (!rc)
        rc = put_key(&tmp, s->name, s->id, s->seed);
    return hand_over(&tmp, out, rc, err);
}

int cosig_signer_format_verifier(const struct cosig_signer *s,
                                 struct fo_buf *out, struct fo_err *err)
{
    struct fo_buf tmp;
    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    return hand_over(&tmp, out, put_key(&tmp, s->name, s->id, s->pub), err);
}

const char *cosig_signer_name(const struct cosig_signer *s)
{
    return s->name;
}

void cosig_signer_free(struct cosig_signer *s)
{
    if (!s)
        return;
    EVP_PKEY_free(s->pkey);
    OPENSSL_cleanse(s, sizeof(*s));
    free(s);
}

int cosig_verifier_parse(const char *text, size_t len,
                         struct cosig_verifier **out, struct fo_err *err)
{
    uint8_t key[1 + KEY_LEN];
    size_t name_len = 0;
    uint32_t id = 0;
    int rc = parse_key_text(text, len, "witness verifier key", &name_len, &id,
                            key, err);
    if (rc)
        return rc;
    uint32_t want = key_id(text, name_len, key + 1);
    if (want != id)
        return fo_err_set(err, FO_E_INVALID,
                          "witness verifier key: key id %08" PRIx32
                          " does not match the key (%08" PRIx32 ")",
                          id, want);
    struct cosig_verifier *v = calloc(1, sizeof(*v));
    if (!v)
        return nomem(err);
    memcpy(v->name, text, name_len);
    v->id = id;
    memcpy(v->pub, key + 1, KEY_LEN);
    v->pkey =
        EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, v->pub, KEY_LEN);
    if (!v->pkey) {
        cosig_verifier_free(v);
        return fo_err_ossl(err, "ed25519 public key");
    }
    *out = v;
    return FO_OK;
}

int cosig_verifier_format(const struct cosig_verifier *v, struct fo_buf *out,
                          struct fo_err *err)
{
    struct fo_buf tmp;
    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    return hand_over(&tmp, out, put_key(&tmp, v->name, v->id, v->pub), err);
}

const char *cosig_verifier_name(const struct cosig_verifier *v)
{
    return v->name;
}

uint32_t cosig_verifier_id(const struct cosig_verifier *v)
{
    return v->id;
}

void cosig_verifier_free(struct cosig_verifier *v)
{
    if (!v)
        return;
    EVP_PKEY_free(v->pkey);
    free(v);
}

/* ---- signing and checking ---------------------------------------------- */

static int check_text(const char *text, size_t len, struct fo_err *err)
{
    if (len == 0 || text[len - 1] != '\n')
        return fo_err_set(err, FO_E_INVALID,
                          "cosignature: the note text must end in a newline");
    if (len > NOTE_MAX_LEN)
        return fo_err_set(err, FO_E_INVALID,
                          "cosignature: note text over %d bytes", NOTE_MAX_LEN);
    return FO_OK;
}

int cosig_message(const char *text, size_t len, uint64_t ts, struct fo_buf *out,
                  struct fo_err *err)
{
    int rc = check_text(text, len, err);
    if (rc)
        return rc;
    if (ts > (uint64_t)COSIG_TIME_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "cosignature: timestamp over 2^63 - 1");
    rc = fo_buf_printf(out, "cosignature/v1\ntime %" PRIu64 "\n", ts);
    if (!rc)
        rc = fo_buf_append(out, text, len);
    return rc ? fo_err_set(err, rc, "cosignature: %s", fo_code_message(rc))
              : FO_OK;
}

int cosig_sign(const struct cosig_signer *s, const char *text, size_t len,
               uint64_t ts, struct fo_buf *out, struct fo_err *err)
{
    uint8_t sig[COSIG_LEN];
    size_t siglen = SIG_LEN;
    struct fo_buf msg, tmp;
    fo_buf_init(&msg, NOTE_MAX_LEN + 64);
    fo_buf_init(&tmp, FO_BUF_UNLIMITED);
    EVP_MD_CTX *ctx = NULL;
    int rc = cosig_message(text, len, ts, &msg, err);
    if (rc)
        goto out;
    if (!(ctx = EVP_MD_CTX_new())) {
        rc = nomem(err);
        goto out;
    }
    if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, s->pkey) != 1 ||
        EVP_DigestSign(ctx, sig + ID_LEN + TS_LEN, &siglen,
                       (const unsigned char *)msg.data, msg.len) != 1 ||
        siglen != SIG_LEN) {
        rc = fo_err_ossl(err, "ed25519 sign");
        goto out;
    }
    for (int i = 0; i < ID_LEN; i++)
        sig[i] = (uint8_t)(s->id >> (8 * (ID_LEN - 1 - i)));
    for (int i = 0; i < TS_LEN; i++)
        sig[ID_LEN + i] = (uint8_t)(ts >> (8 * (TS_LEN - 1 - i)));
    rc = fo_buf_puts(&tmp, dash);
    if (!rc)
        rc = fo_buf_printf(&tmp, "%s ", s->name);
    if (!rc)
        rc = note_b64_encode(&tmp, sig, sizeof(sig));
    if (!rc)
        rc = fo_buf_putc(&tmp, '\n');
    rc = hand_over(&tmp, out, rc, err);
out:
    fo_buf_release(&tmp);
    fo_buf_release(&msg);
    EVP_MD_CTX_free(ctx);
    return rc;
}

int cosig_split(const char *msg, size_t len, struct cosig_lines *out,
                struct fo_err *err)
{
    if (len == 0 || len > NOTE_MAX_LEN || msg[len - 1] != '\n')
        return fo_err_set(err, FO_E_INVALID,
                          "note: empty, too long or not ending in a newline");
    if (memchr(msg, '\0', len))
        return fo_err_set(err, FO_E_INVALID, "note: holds a NUL byte");
    size_t split = len;
    for (size_t i = len - 1; i-- > 0;)
        if (msg[i] == '\n' && msg[i + 1] == '\n') {
            split = i;
            break;
        }
    if (split == len)
        return fo_err_set(err, FO_E_INVALID,
                          "note: no blank line before the signatures");
    out->text_len = split + 1;
    out->n = 0;
    size_t pos = split + 2;
    if (pos == len)
        return fo_err_set(err, FO_E_INVALID, "note: no signatures");
    while (pos < len) {
        const char *line = msg + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = (size_t)(nl - line);
        if (out->n == NOTE_MAX_SIGS)
            return fo_err_set(err, FO_E_INVALID,
                              "note: more than %d signatures", NOTE_MAX_SIGS);
        const char *sp =
            ll > DASH_LEN ? memchr(line + DASH_LEN, ' ', ll - DASH_LEN) : NULL;
        if (ll <= DASH_LEN || memcmp(line, dash, DASH_LEN) != 0 || !sp)
            return fo_err_set(err, FO_E_INVALID,
                              "note: signature line %zu is not \"— <name> "
                              "<base64>\"",
                              out->n + 1);
        out->line_off[out->n] = pos;
        out->line_len[out->n] = ll;
        out->n++;
        pos += ll + 1;
    }
    return FO_OK;
}

int cosig_verify_line(const struct cosig_verifier *v, const char *text,
                      size_t text_len, const char *line, size_t line_len,
                      uint64_t *ts, struct fo_err *err)
{
    if (line_len <= DASH_LEN || memcmp(line, dash, DASH_LEN) != 0)
        return fo_err_set(err, FO_E_INVALID,
                          "cosignature: not a signature "
                          "line");
    const char *name = line + DASH_LEN;
    size_t rest = line_len - DASH_LEN;
    const char *sp = memchr(name, ' ', rest);
    if (!sp)
        return fo_err_set(err, FO_E_INVALID,
                          "cosignature: no space after the key name");
    size_t name_len = (size_t)(sp - name);
    if (name_len != strlen(v->name) || memcmp(name, v->name, name_len) != 0)
        return FO_E_NOT_FOUND;
    uint8_t sig[COSIG_LEN + 1];
    size_t n = 0;
    const char *b64 = sp + 1;
    size_t b64_len = rest - name_len - 1;
    if (note_b64_decode(b64, b64_len, sig, sizeof(sig), &n) != 0 || n < ID_LEN)
        return fo_err_set(err, FO_E_INVALID,
                          "cosignature by %s: not canonical base64", v->name);
    uint32_t id = (uint32_t)sig[0] << 24 | (uint32_t)sig[1] << 16 |
                  (uint32_t)sig[2] << 8 | (uint32_t)sig[3];
    if (id != v->id)
        return FO_E_NOT_FOUND;
    if (n != COSIG_LEN)
        return fo_err_set(err, FO_E_VERIFY,
                          "cosignature by %s+%08" PRIx32
                          ": %zu bytes, not a cosignature/v1",
                          v->name, v->id, n);
    uint64_t t = 0;
    for (int i = 0; i < TS_LEN; i++)
        t = t << 8 | sig[ID_LEN + i];
    if (t > (uint64_t)COSIG_TIME_MAX)
        return fo_err_set(err, FO_E_VERIFY,
                          "cosignature by %s+%08" PRIx32
                          ": timestamp over 2^63 - 1",
                          v->name, v->id);
    struct fo_buf msg;
    fo_buf_init(&msg, NOTE_MAX_LEN + 64);
    int rc = cosig_message(text, text_len, t, &msg, err);
    EVP_MD_CTX *ctx = NULL;
    if (!rc && !(ctx = EVP_MD_CTX_new()))
        rc = nomem(err);
    if (!rc) {
        if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, v->pkey) != 1) {
            rc = fo_err_ossl(err, "ed25519 verify");
        } else {
            int ok =
                EVP_DigestVerify(ctx, sig + ID_LEN + TS_LEN, SIG_LEN,
                                 (const unsigned char *)msg.data, msg.len) == 1;
            ERR_clear_error();
            if (!ok)
                rc = fo_err_set(err, FO_E_VERIFY,
                                "invalid cosignature by %s+%08" PRIx32, v->name,
                                v->id);
        }
    }
    EVP_MD_CTX_free(ctx);
    fo_buf_release(&msg);
    if (!rc)
        *ts = t;
    return rc;
}

int cosig_check_note(const char *msg, size_t len,
                     const struct cosig_verifier *const *w, size_t n, int *ok,
                     uint64_t *ts, size_t *valid, struct fo_err *err)
{
    struct cosig_lines *sl = malloc(sizeof(*sl));
    if (!sl)
        return nomem(err);
    int rc = cosig_split(msg, len, sl, err);
    *valid = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        ok[i] = 0;
        ts[i] = 0;
        for (size_t j = 0; !rc && j < sl->n; j++) {
            uint64_t t = 0;
            int r = cosig_verify_line(w[i], msg, sl->text_len,
                                      msg + sl->line_off[j], sl->line_len[j],
                                      &t, err);
            if (r == FO_E_NOT_FOUND)
                continue;
            if (r) {
                rc = r;
                break;
            }
            if (!ok[i])
                (*valid)++;
            ok[i] = 1;
            ts[i] = t > ts[i] ? t : ts[i];
        }
    }
    free(sl);
    return rc;
}
