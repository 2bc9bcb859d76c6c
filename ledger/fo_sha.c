/* fo_sha: SHA-256 through OpenSSL's SHA256_CTX: a plain struct, no
 * allocation and no provider dispatch per hash, so hashing cannot fail
 * (not even out of memory) and costs the least a call can. The
 * SHA256_Init/Update/Final functions are marked deprecated in OpenSSL 3
 * in favour of EVP, whose reused context still allocates in
 * EVP_DigestInit_ex (found by tests/test_nomem.c: out of memory, an
 * append aborted); they are the same assembly, and this file alone asks
 * for them. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "ledger/fo_sha.h"

#include <stdlib.h>

#include <openssl/sha.h>

struct fo_sha {
    SHA256_CTX ctx;
};

struct fo_sha *fo_sha_create(void)
{
    return calloc(1, sizeof(struct fo_sha));
}

void fo_sha_free(struct fo_sha *s)
{
    free(s);
}

/* SHA256_Init, _Update and _Final only return 0 for a NULL context. */
void fo_sha_begin(struct fo_sha *s)
{
    SHA256_Init(&s->ctx);
}

void fo_sha_update(struct fo_sha *s, const void *data, size_t len)
{
    SHA256_Update(&s->ctx, data, len);
}

void fo_sha_final(struct fo_sha *s, uint8_t out[FO_SHA256_LEN])
{
    SHA256_Final(out, &s->ctx);
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
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, data, len);
    SHA256_Final(out, &c);
}
