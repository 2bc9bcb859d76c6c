/* fo_sha: SHA-256 through OpenSSL's SHA256_CTX (fo_sha.c says why not
 * EVP): no allocation per hash, so no call here can fail. A hasher is not
 * thread-safe; give each thread its own. */
#ifndef FO_SHA_H
#define FO_SHA_H

#include <stddef.h>
#include <stdint.h>

#define FO_SHA256_LEN 32

struct fo_sha;

/* Creates a hasher; NULL when out of memory. */
struct fo_sha *fo_sha_create(void);
void fo_sha_free(struct fo_sha *s);

/* Incremental use: begin, update any number of times, final. */
void fo_sha_begin(struct fo_sha *s);
void fo_sha_update(struct fo_sha *s, const void *data, size_t len);
void fo_sha_final(struct fo_sha *s, uint8_t out[FO_SHA256_LEN]);

/* One-shot hash of data. */
void fo_sha_digest(struct fo_sha *s, const void *data, size_t len,
                   uint8_t out[FO_SHA256_LEN]);

/* One-shot hash without a hasher. */
void fo_sha256(const void *data, size_t len, uint8_t out[FO_SHA256_LEN]);

#endif
