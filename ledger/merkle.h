/* merkle: the RFC 6962 / RFC 9162 Merkle tree over arbitrary leaf data,
 * independent of storage. leaf = SHA-256(0x00 || data), node =
 * SHA-256(0x01 || left || right), the empty tree's root is SHA-256("").
 *
 * Storage is reached through a callback that returns the hash of a complete
 * subtree: (level L, index i) covers leaves [i * 2^L, (i + 1) * 2^L). Level 0
 * is the leaf hashes. Root and proofs make O(log n) callback calls. */
#ifndef MERKLE_H
#define MERKLE_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/fo_err.h"
#include "ledger/fo_sha.h"

#define MERKLE_HASH_LEN 32
/* The longest proof path for any tree size below 2^64 (a consistency
 * proof can take 65 hashes once the second size passes 2^63). */
#define MERKLE_MAX_PATH 65

/* Returns FO_OK and the hash of the complete subtree (level, index), or an
 * error code (with err set) that the proof functions pass up. */
typedef int (*merkle_node_fn)(void *ctx, unsigned level, uint64_t index,
                              uint8_t out[MERKLE_HASH_LEN], struct fo_err *err);

/* Hashing primitives. sha may be NULL (a one-shot hash is used then). */
void merkle_leaf_hash(struct fo_sha *sha, const void *data, size_t len,
                      uint8_t out[MERKLE_HASH_LEN]);
void merkle_node_hash(struct fo_sha *sha, const uint8_t left[MERKLE_HASH_LEN],
                      const uint8_t right[MERKLE_HASH_LEN],
                      uint8_t out[MERKLE_HASH_LEN]);
void merkle_empty_root(uint8_t out[MERKLE_HASH_LEN]);

/* The root of the tree of the first `size` leaves. */
int merkle_root(merkle_node_fn get, void *ctx, uint64_t size,
                uint8_t out[MERKLE_HASH_LEN], struct fo_err *err);

/* The inclusion proof of leaf `index` in the tree of `size` leaves (RFC 9162
 * §2.1.3.1). path holds MERKLE_MAX_PATH hashes; *path_len is set. FO_E_INVALID
 * when index >= size. */
int merkle_inclusion_proof(merkle_node_fn get, void *ctx, uint64_t index,
                           uint64_t size, uint8_t path[][MERKLE_HASH_LEN],
                           size_t *path_len, struct fo_err *err);

/* The consistency proof between tree sizes first and second (RFC 9162
 * §2.1.4.1). FO_E_INVALID when first is 0 (refused: a proof from the empty
 * tree proves nothing) or first > second. first == second gives an empty
 * path. */
int merkle_consistency_proof(merkle_node_fn get, void *ctx, uint64_t first,
                             uint64_t second, uint8_t path[][MERKLE_HASH_LEN],
                             size_t *path_len, struct fo_err *err);

/* Verification (RFC 9162 §2.1.3.2 and §2.1.4.2), needing no tree. FO_OK when
 * the proof holds; FO_E_VERIFY (with a message saying what failed: index
 * beyond size, wrong path length, root mismatch) when it does not;
 * FO_E_INVALID for a refused request (first 0, first > second). */
int merkle_verify_inclusion(const uint8_t leaf_hash[MERKLE_HASH_LEN],
                            uint64_t index, uint64_t size,
                            const uint8_t path[][MERKLE_HASH_LEN],
                            size_t path_len,
                            const uint8_t root[MERKLE_HASH_LEN],
                            struct fo_err *err);
int merkle_verify_consistency(uint64_t first, uint64_t second,
                              const uint8_t root1[MERKLE_HASH_LEN],
                              const uint8_t root2[MERKLE_HASH_LEN],
                              const uint8_t path[][MERKLE_HASH_LEN],
                              size_t path_len, struct fo_err *err);

/* The right edge of a growing tree: the hashes of the perfect subtrees that
 * make up the first `size` leaves, one per set bit of size, largest first.
 * Appending a leaf completes zero or more subtrees; each is reported through
 * emit (level >= 1 only: leaves are the caller's) so storage can keep it. */
struct merkle_frontier {
    uint64_t size;
    unsigned count;                                 /* popcount(size) */
    uint8_t hash[MERKLE_MAX_PATH][MERKLE_HASH_LEN]; /* largest subtree first */
};

typedef int (*merkle_emit_fn)(void *ctx, unsigned level, uint64_t index,
                              const uint8_t hash[MERKLE_HASH_LEN]);

/* Sets f to the empty tree. */
void merkle_frontier_init(struct merkle_frontier *f);

/* Loads the frontier of a tree of `size` leaves from storage (popcount(size)
 * callback calls). */
int merkle_frontier_load(struct merkle_frontier *f, merkle_node_fn get,
                         void *ctx, uint64_t size, struct fo_err *err);

/* Appends one leaf hash; calls emit for every subtree of level >= 1 it
 * completes, in increasing level. Returns the first non-zero emit result. */
int merkle_frontier_push(struct merkle_frontier *f, struct fo_sha *sha,
                         const uint8_t leaf_hash[MERKLE_HASH_LEN],
                         merkle_emit_fn emit, void *ctx);

/* The root of the tree the frontier describes. */
void merkle_frontier_root(const struct merkle_frontier *f, struct fo_sha *sha,
                          uint8_t out[MERKLE_HASH_LEN]);

#endif
