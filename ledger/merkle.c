/* merkle: RFC 9162 §2.1 tree hashes, inclusion and consistency proofs, their
 * verification, and the frontier (compact range) of a growing tree. Storage
 * is reached only through merkle_node_fn, one call per complete subtree. */
#include "ledger/merkle.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_buf.h"

/* Leaf data up to this size is hashed from a stack copy when no hasher is
 * given; larger data takes a temporary hasher. */
#define LEAF_STACK_MAX 256

void merkle_leaf_hash(struct fo_sha *sha, const void *data, size_t len,
                      uint8_t out[MERKLE_HASH_LEN])
{
    static const uint8_t prefix = 0x00;

    if (sha) {
        fo_sha_begin(sha);
        fo_sha_update(sha, &prefix, 1);
        fo_sha_update(sha, data, len);
        fo_sha_final(sha, out);
        return;
    }
    if (len <= LEAF_STACK_MAX) {
        uint8_t buf[1 + LEAF_STACK_MAX];
        buf[0] = prefix;
        if (len)
            memcpy(buf + 1, data, len);
        fo_sha256(buf, 1 + len, out);
        return;
    }
    /* A void function cannot report out-of-memory; like fo_sha on an
     * OpenSSL failure, abort rather than return a wrong hash. */
    struct fo_sha *tmp = fo_sha_create();
    if (!tmp)
        abort();
    merkle_leaf_hash(tmp, data, len, out);
    fo_sha_free(tmp);
}

void merkle_node_hash(struct fo_sha *sha, const uint8_t left[MERKLE_HASH_LEN],
                      const uint8_t right[MERKLE_HASH_LEN],
                      uint8_t out[MERKLE_HASH_LEN])
{
    uint8_t buf[1 + 2 * MERKLE_HASH_LEN];

    buf[0] = 0x01;
    memcpy(buf + 1, left, MERKLE_HASH_LEN);
    memcpy(buf + 1 + MERKLE_HASH_LEN, right, MERKLE_HASH_LEN);
    if (sha)
        fo_sha_digest(sha, buf, sizeof(buf), out);
    else
        fo_sha256(buf, sizeof(buf), out);
}

void merkle_empty_root(uint8_t out[MERKLE_HASH_LEN])
{
    fo_sha256("", 0, out);
}

/* The largest power of two strictly less than n (n >= 2). */
static uint64_t split_point(uint64_t n)
{
    assert(n >= 2);
    uint64_t k = 1;
    while (k < n - k)
        k <<= 1;
    return k;
}

static int is_pow2(uint64_t n)
{
    return n != 0 && (n & (n - 1)) == 0;
}

static unsigned log2_exact(uint64_t n)
{
    unsigned l = 0;
    while (n > 1) {
        n >>= 1;
        l++;
    }
    return l;
}

/* The hash of leaves [begin, begin + n), n >= 1. A perfect subtree aligned
 * on its own size is one callback call; a ragged range is split at the
 * largest power of two below n, as MTH does. Ranges reached from the proof
 * recursion always start at a multiple of a power of two >= n, so the left
 * part of each split is one call and only the right edge recurses: at most
 * popcount(n) calls and log2(n) levels of recursion. */
static int range_hash(merkle_node_fn get, void *ctx, struct fo_sha *sha,
                      uint64_t begin, uint64_t n, uint8_t out[MERKLE_HASH_LEN],
                      struct fo_err *err)
{
    if (is_pow2(n) && begin % n == 0) {
        unsigned level = log2_exact(n);
        return get(ctx, level, begin >> level, out, err);
    }
    uint64_t k = split_point(n);
    uint8_t left[MERKLE_HASH_LEN], right[MERKLE_HASH_LEN];
    int rc = range_hash(get, ctx, sha, begin, k, left, err);
    if (rc != FO_OK)
        return rc;
    rc = range_hash(get, ctx, sha, begin + k, n - k, right, err);
    if (rc != FO_OK)
        return rc;
    merkle_node_hash(sha, left, right, out);
    return FO_OK;
}

/* A hasher for the O(log n) hashes of one call. Creating and freeing one
 * costs less than one one-shot fo_sha256 (about 190 ns against 300 ns here),
 * and each hash after that is about three times cheaper. NULL when it cannot
 * be made; every hash then falls back to the one-shot form, so callers never
 * fail for want of it. */
static struct fo_sha *hasher(void)
{
    return fo_sha_create();
}

int merkle_root(merkle_node_fn get, void *ctx, uint64_t size,
                uint8_t out[MERKLE_HASH_LEN], struct fo_err *err)
{
    if (size == 0) {
        merkle_empty_root(out);
        return FO_OK;
    }
    struct fo_sha *sha = hasher();
    int rc = range_hash(get, ctx, sha, 0, size, out, err);
    fo_sha_free(sha);
    return rc;
}

/* The proofs of RFC 9162 §2.1.3.1 and §2.1.4.1 are defined recursively; the
 * recursion appends each level's sibling after the deeper part of the path,
 * so a walk down from the root meets the path in reverse. The walks below
 * record each element as a leaf range (begin, n), so a path's length is known
 * without hashing (the verifiers use that) and its hashes are fetched after. */
struct span {
    uint64_t begin;
    uint64_t n;
};

/* An inclusion path has at most one hash per level of the tree: 64 below
 * 2^64 leaves. A consistency path can have one more (the subtree at the old
 * tree's edge and its 64 siblings) once second > 2^63; the generator refuses
 * those since callers' path arrays hold MERKLE_MAX_PATH, the verifier takes
 * them. */
#define SPAN_MAX (MERKLE_MAX_PATH + 1)

/* The subtrees whose hashes form the inclusion path of leaf index in a tree
 * of size leaves, root level first. Returns the count. */
static size_t inclusion_spans(uint64_t index, uint64_t size,
                              struct span spans[SPAN_MAX])
{
    uint64_t begin = 0, n = size, m = index;
    size_t count = 0;

    while (n > 1) {
        uint64_t k = split_point(n);
        assert(count < SPAN_MAX);
        if (m < k) {
            spans[count++] = (struct span){begin + k, n - k};
            n = k;
        } else {
            spans[count++] = (struct span){begin, k};
            begin += k;
            m -= k;
            n -= k;
        }
    }
    return count;
}

/* The subtrees of the consistency proof between sizes first and second
 * (0 < first <= second), root level first. Returns the count. */
static size_t consistency_spans(uint64_t first, uint64_t second,
                                struct span spans[SPAN_MAX])
{
    uint64_t begin = 0, n = second, m = first;
    int whole = 1; /* SUBPROOF's b: the subtree is the whole old tree */
    size_t count = 0;

    for (;;) {
        assert(count < SPAN_MAX);
        if (m == n) {
            if (!whole)
                spans[count++] = (struct span){begin, m};
            break;
        }
        uint64_t k = split_point(n);
        if (m <= k) {
            spans[count++] = (struct span){begin + k, n - k};
            n = k;
        } else {
            spans[count++] = (struct span){begin, k};
            begin += k;
            m -= k;
            n -= k;
            whole = 0;
        }
    }
    return count;
}

/* Fetches the hashes of spans into path in reverse (RFC) order. */
static int fetch_spans(merkle_node_fn get, void *ctx, struct fo_sha *sha,
                       const struct span *spans, size_t count,
                       uint8_t path[][MERKLE_HASH_LEN], struct fo_err *err)
{
    for (size_t i = 0; i < count; i++) {
        const struct span *s = &spans[count - 1 - i];
        int rc = range_hash(get, ctx, sha, s->begin, s->n, path[i], err);
        if (rc != FO_OK)
            return rc;
    }
    return FO_OK;
}

/* Fetches the hashes of spans into path and sets *path_len on success. */
static int build_path(merkle_node_fn get, void *ctx, const struct span *spans,
                      size_t count, uint8_t path[][MERKLE_HASH_LEN],
                      size_t *path_len, struct fo_err *err)
{
    struct fo_sha *sha = hasher();
    int rc = fetch_spans(get, ctx, sha, spans, count, path, err);
    fo_sha_free(sha);
    if (rc == FO_OK)
        *path_len = count;
    return rc;
}

int merkle_inclusion_proof(merkle_node_fn get, void *ctx, uint64_t index,
                           uint64_t size, uint8_t path[][MERKLE_HASH_LEN],
                           size_t *path_len, struct fo_err *err)
{
    struct span spans[SPAN_MAX];

    if (index >= size)
        return fo_err_set(err, FO_E_INVALID,
                          "inclusion proof: index %llu not below size %llu",
                          (unsigned long long)index, (unsigned long long)size);
    size_t count = inclusion_spans(index, size, spans);
    return build_path(get, ctx, spans, count, path, path_len, err);
}

int merkle_consistency_proof(merkle_node_fn get, void *ctx, uint64_t first,
                             uint64_t second, uint8_t path[][MERKLE_HASH_LEN],
                             size_t *path_len, struct fo_err *err)
{
    struct span spans[SPAN_MAX];

    if (first == 0)
        return fo_err_set(err, FO_E_INVALID,
                          "consistency proof: first size 0 refused");
    if (first > second)
        return fo_err_set(err, FO_E_INVALID,
                          "consistency proof: first %llu above second %llu",
                          (unsigned long long)first,
                          (unsigned long long)second);
    if (first == second) {
        *path_len = 0;
        return FO_OK;
    }
    size_t count = consistency_spans(first, second, spans);
    if (count > MERKLE_MAX_PATH)
        return fo_err_set(err, FO_E_INVALID,
                          "consistency proof: %zu hashes, over the maximum %d",
                          count, MERKLE_MAX_PATH);
    return build_path(get, ctx, spans, count, path, path_len, err);
}

static int hash_eq(const uint8_t a[MERKLE_HASH_LEN],
                   const uint8_t b[MERKLE_HASH_LEN])
{
    return memcmp(a, b, MERKLE_HASH_LEN) == 0;
}

int merkle_verify_inclusion(const uint8_t leaf_hash[MERKLE_HASH_LEN],
                            uint64_t index, uint64_t size,
                            const uint8_t path[][MERKLE_HASH_LEN],
                            size_t path_len,
                            const uint8_t root[MERKLE_HASH_LEN],
                            struct fo_err *err)
{
    struct span spans[SPAN_MAX];

    if (index >= size)
        return fo_err_set(err, FO_E_VERIFY,
                          "inclusion: index %llu beyond size %llu",
                          (unsigned long long)index, (unsigned long long)size);
    /* The shape of the proof depends only on (index, size): a path of any
     * other length is wrong before any hashing. */
    size_t want = inclusion_spans(index, size, spans);
    if (path_len != want)
        return fo_err_set(err, FO_E_VERIFY,
                          "inclusion: wrong path length %zu (want %zu)",
                          path_len, want);

    /* RFC 9162 §2.1.3.2. */
    struct fo_sha *sha = hasher();
    int rc = FO_E_VERIFY;
    uint64_t fn = index, sn = size - 1;
    uint8_t r[MERKLE_HASH_LEN];
    memcpy(r, leaf_hash, MERKLE_HASH_LEN);
    for (size_t i = 0; i < path_len; i++) {
        if (sn == 0) {
            fo_err_set(err, rc, "inclusion: path too long");
            goto out;
        }
        if ((fn & 1) || fn == sn) {
            merkle_node_hash(sha, path[i], r, r);
            while (fn != 0 && !(fn & 1)) {
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            merkle_node_hash(sha, r, path[i], r);
        }
        fn >>= 1;
        sn >>= 1;
    }
    if (sn != 0) {
        fo_err_set(err, rc, "inclusion: path too short");
        goto out;
    }
    if (!hash_eq(r, root)) {
        fo_err_set(err, rc, "inclusion: root mismatch");
        goto out;
    }
    rc = FO_OK;
out:
    fo_sha_free(sha);
    return rc;
}

int merkle_verify_consistency(uint64_t first, uint64_t second,
                              const uint8_t root1[MERKLE_HASH_LEN],
                              const uint8_t root2[MERKLE_HASH_LEN],
                              const uint8_t path[][MERKLE_HASH_LEN],
                              size_t path_len, struct fo_err *err)
{
    struct span spans[SPAN_MAX];

    if (first == 0)
        return fo_err_set(err, FO_E_INVALID,
                          "consistency: first size 0 refused");
    if (first > second)
        return fo_err_set(
            err, FO_E_INVALID, "consistency: first %llu above second %llu",
            (unsigned long long)first, (unsigned long long)second);
    if (first == second) {
        if (path_len != 0)
            return fo_err_set(err, FO_E_VERIFY,
                              "consistency: wrong path length %zu (want 0)",
                              path_len);
        if (!hash_eq(root1, root2))
            return fo_err_set(err, FO_E_VERIFY, "consistency: root mismatch");
        return FO_OK;
    }
    size_t want = consistency_spans(first, second, spans);
    if (path_len != want)
        return fo_err_set(err, FO_E_VERIFY,
                          "consistency: wrong path length %zu (want %zu)",
                          path_len, want);

    /* RFC 9162 §2.1.4.2. When first is a power of two the old root is a
     * subtree of the new tree and the proof leaves it out: it is the seed. */
    size_t i = 0;
    const uint8_t *seed;
    if (is_pow2(first)) {
        seed = root1;
    } else {
        seed = path[0];
        i = 1;
    }
    uint64_t fn = first - 1, sn = second - 1;
    while (fn & 1) {
        fn >>= 1;
        sn >>= 1;
    }
    struct fo_sha *sha = hasher();
    int rc = FO_E_VERIFY;
    uint8_t fr[MERKLE_HASH_LEN], sr[MERKLE_HASH_LEN];
    memcpy(fr, seed, MERKLE_HASH_LEN);
    memcpy(sr, seed, MERKLE_HASH_LEN);
    for (; i < path_len; i++) {
        if (sn == 0) {
            fo_err_set(err, rc, "consistency: path too long");
            goto out;
        }
        if ((fn & 1) || fn == sn) {
            merkle_node_hash(sha, path[i], fr, fr);
            merkle_node_hash(sha, path[i], sr, sr);
            while (fn != 0 && !(fn & 1)) {
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            merkle_node_hash(sha, sr, path[i], sr);
        }
        fn >>= 1;
        sn >>= 1;
    }
    if (sn != 0) {
        fo_err_set(err, rc, "consistency: path too short");
        goto out;
    }
    if (!hash_eq(fr, root1)) {
        fo_err_set(err, rc, "consistency: first root mismatch");
        goto out;
    }
    if (!hash_eq(sr, root2)) {
        fo_err_set(err, rc, "consistency: second root mismatch");
        goto out;
    }
    rc = FO_OK;
out:
    fo_sha_free(sha);
    return rc;
}

void merkle_frontier_init(struct merkle_frontier *f)
{
    memset(f, 0, sizeof(*f));
}

int merkle_frontier_load(struct merkle_frontier *f, merkle_node_fn get,
                         void *ctx, uint64_t size, struct fo_err *err)
{
    struct merkle_frontier tmp;
    uint64_t begin = 0;

    merkle_frontier_init(&tmp);
    for (unsigned level = 64; level-- > 0;) {
        uint64_t width = (uint64_t)1 << level;
        if (!(size & width))
            continue;
        int rc = get(ctx, level, begin >> level, tmp.hash[tmp.count], err);
        if (rc != FO_OK)
            return rc;
        tmp.count++;
        begin += width;
    }
    tmp.size = size;
    *f = tmp;
    return FO_OK;
}

int merkle_frontier_push(struct merkle_frontier *f, struct fo_sha *sha,
                         const uint8_t leaf_hash[MERKLE_HASH_LEN],
                         merkle_emit_fn emit, void *ctx)
{
    uint8_t h[MERKLE_HASH_LEN];
    unsigned count = f->count;
    unsigned level = 0;

    if (f->size == UINT64_MAX)
        return FO_E_INVALID; /* no tree of 2^64 leaves */
    memcpy(h, leaf_hash, MERKLE_HASH_LEN);
    /* Each set low bit of size is a perfect subtree of that level which the
     * new leaf's subtree now completes into one of the next level. Emit
     * before touching f, so a failing emit leaves the frontier as it was. */
    while (f->size & ((uint64_t)1 << level)) {
        assert(count > 0);
        merkle_node_hash(sha, f->hash[count - 1], h, h);
        count--;
        level++;
        if (emit) {
            int rc = emit(ctx, level, f->size >> level, h);
            if (rc != 0)
                return rc;
        }
    }
    memcpy(f->hash[count], h, MERKLE_HASH_LEN);
    f->count = count + 1;
    f->size++;
    return FO_OK;
}

void merkle_frontier_root(const struct merkle_frontier *f, struct fo_sha *sha,
                          uint8_t out[MERKLE_HASH_LEN])
{
    if (f->count == 0) {
        merkle_empty_root(out);
        return;
    }
    uint8_t h[MERKLE_HASH_LEN];
    memcpy(h, f->hash[f->count - 1], MERKLE_HASH_LEN);
    for (unsigned i = f->count - 1; i-- > 0;)
        merkle_node_hash(sha, f->hash[i], h, h);
    memcpy(out, h, MERKLE_HASH_LEN);
}
