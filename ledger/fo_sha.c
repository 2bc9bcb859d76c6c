/* fo_sha: SHA-256 with a fetched EVP_MD and a reused EVP_MD_CTX. */
#include "ledger/fo_sha.h"

#include <stdlib.h>

#include <openssl/evp.h>

#include "ledger/fo_buf.h"

struct fo_sha {
    EVP_MD *md;
    EVP_MD_CTX *ctx;
};

struct fo_sha *fo_sha_create(void)
{
    struct fo_sha *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->md = EVP_MD_fetch(NULL, "SHA256", NULL);
    s->ctx = EVP_MD_CTX_new();
    if (!s->md || !s->ctx) {
        fo_sha_free(s);
        return NULL;
    }
    return s;
}

void fo_sha_free(struct fo_sha *s)
{
    if (!s)
        return;
    EVP_MD_CTX_free(s->ctx);
    EVP_MD_free(s->md);
    free(s);
}

/* SHA-256 in OpenSSL cannot fail on these calls once the context exists,
 * short of memory corruption: abort rather than hash garbage. */
void fo_sha_begin(struct fo_sha *s)
{
    if (EVP_DigestInit_ex(s->ctx, s->md, NULL) != 1)
        abort();
}

void fo_sha_update(struct fo_sha *s, const void *data, size_t len)
{
    if (EVP_DigestUpdate(s->ctx, data, len) != 1)
        abort();
}

void fo_sha_final(struct fo_sha *s, uint8_t out[FO_SHA256_LEN])
{
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(s->ctx, out, &n) != 1 || n != FO_SHA256_LEN)
        abort();
}

void fo_sha_digest(struct fo_sha *s, const void *data, size_t len,
                   uint8_t out[FO_SHA256_LEN])
{
    fo_sha_begin(s);
    fo_sha_update(s, data, len);
    fo_sha_final(s, out);
}

void fo_sha256(const void *data, size_t len, uint8_t out[FO_SHA256_LEN])
{
    unsigned int n = 0;
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1)
        abort();
}
