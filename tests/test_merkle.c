/* test_merkle: the RFC 6962 tree against published vectors, against a naive
 * recursive reference for every proof up to size 64, every rejection of the
 * verifiers, the frontier as the ledger will use it, and the O(log n) cost of
 * root and proofs at sizes no one could hash leaf by leaf. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_sha.h"
#include "ledger/merkle.h"
#include "tests/testutil.h"

#define HL MERKLE_HASH_LEN
/* Room for the longest consistency path (65, see merkle.c) and a spare. */
#define REF_MAX 70

static void hexof(const uint8_t h[HL], char out[2 * HL + 1])
{
    fo_hex(h, HL, out);
}

static void assert_hash_eq(const uint8_t got[HL], const uint8_t want[HL],
                           const char *what)
{
    char g[2 * HL + 1], w[2 * HL + 1];
    hexof(got, g);
    hexof(want, w);
    cr_assert_str_eq(g, w, "%s: got %s want %s", what, g, w);
}

static void unhex32(const char *hex, uint8_t out[HL])
{
    cr_assert_eq(fo_unhex(hex, out, HL), FO_OK, "bad hex %s", hex);
}

/* ---- reference trees: MTH over a range, by plain recursion ---- */

typedef void (*mth_fn)(const void *tree, uint64_t begin, uint64_t n,
                       uint8_t out[HL]);

struct ref_tree {
    mth_fn mth;
    const void *tree;
};

static uint64_t ref_split(uint64_t n)
{
    uint64_t k = 1;
    while (k < n - k)
        k <<= 1;
    return k;
}

/* A tree held as an array of leaf hashes. */
struct dense {
    uint8_t (*leaf)[HL];
    uint64_t n;
};

static void dense_mth(const void *tree, uint64_t begin, uint64_t n,
                      uint8_t out[HL])
{
    const struct dense *d = tree;
    cr_assert_leq(begin + n, d->n);
    if (n == 0) {
        merkle_empty_root(out);
        return;
    }
    if (n == 1) {
        memcpy(out, d->leaf[begin], HL);
        return;
    }
    uint64_t k = ref_split(n);
    uint8_t l[HL], r[HL];
    dense_mth(tree, begin, k, l);
    dense_mth(tree, begin + k, n - k, r);
    merkle_node_hash(NULL, l, r, out);
}

/* A huge tree whose leaves are all the same hash except a few special
 * ones; any subtree without a special leaf has the precomputed hash of its
 * shape, so MTH of any range costs O(64 * specials). */
struct sparse {
    uint64_t special[8];
    size_t nspecial;
    uint8_t plain[64][HL]; /* perfect subtree of 2^L plain leaves */
};

static void sparse_leaf(uint64_t i, uint8_t out[HL])
{
    uint8_t data[9] = {'s'};
    for (int b = 0; b < 8; b++)
        data[1 + b] = (uint8_t)(i >> (8 * b));
    merkle_leaf_hash(NULL, data, sizeof(data), out);
}

static void sparse_init(struct sparse *s)
{
    memset(s, 0, sizeof(*s));
    merkle_leaf_hash(NULL, "plain", 5, s->plain[0]);
    for (unsigned l = 1; l < 64; l++)
        merkle_node_hash(NULL, s->plain[l - 1], s->plain[l - 1], s->plain[l]);
}

static void sparse_add(struct sparse *s, uint64_t i)
{
    cr_assert_lt(s->nspecial, 8);
    s->special[s->nspecial++] = i;
}

static void sparse_mth(const void *tree, uint64_t begin, uint64_t n,
                       uint8_t out[HL])
{
    const struct sparse *s = tree;
    int has = 0;
    for (size_t j = 0; j < s->nspecial; j++)
        if (s->special[j] >= begin && s->special[j] - begin < n)
            has = 1;
    if (n == 0) {
        merkle_empty_root(out);
        return;
    }
    if (n == 1) {
        if (has)
            sparse_leaf(begin, out);
        else
            memcpy(out, s->plain[0], HL);
        return;
    }
    if (!has && (n & (n - 1)) == 0) {
        unsigned l = 0;
        while (((uint64_t)1 << l) != n)
            l++;
        memcpy(out, s->plain[l], HL);
        return;
    }
    uint64_t k = ref_split(n);
    uint8_t l[HL], r[HL];
    sparse_mth(tree, begin, k, l);
    sparse_mth(tree, begin + k, n - k, r);
    merkle_node_hash(NULL, l, r, out);
}

/* RFC 9162 PATH(m, D[begin:begin+n]), written as the recursion reads. */
static void ref_path(const struct ref_tree *t, uint64_t m, uint64_t begin,
                     uint64_t n, uint8_t path[][HL], size_t *len)
{
    if (n == 1)
        return;
    uint64_t k = ref_split(n);
    cr_assert_lt(*len, REF_MAX);
    if (m < k) {
        ref_path(t, m, begin, k, path, len);
        t->mth(t->tree, begin + k, n - k, path[(*len)++]);
    } else {
        ref_path(t, m - k, begin + k, n - k, path, len);
        t->mth(t->tree, begin, k, path[(*len)++]);
    }
}

/* RFC 9162 SUBPROOF(m, D[begin:begin+n], b). */
static void ref_subproof(const struct ref_tree *t, uint64_t m, uint64_t begin,
                         uint64_t n, int b, uint8_t path[][HL], size_t *len)
{
    cr_assert_lt(*len, REF_MAX);
    if (m == n) {
        if (!b)
            t->mth(t->tree, begin, m, path[(*len)++]);
        return;
    }
    uint64_t k = ref_split(n);
    if (m <= k) {
        ref_subproof(t, m, begin, k, b, path, len);
        t->mth(t->tree, begin + k, n - k, path[(*len)++]);
    } else {
        ref_subproof(t, m - k, begin + k, n - k, 0, path, len);
        t->mth(t->tree, begin, k, path[(*len)++]);
    }
}

/* ---- node sources for the library ---- */

/* Serves (level, index) from a reference tree, checking that every request
 * is a complete subtree inside the tree, and counting calls. */
struct src {
    const struct ref_tree *t;
    uint64_t size;
    unsigned calls;
    int fail_at; /* when > 0, the fail_at-th call fails */
};

static int src_get(void *ctx, unsigned level, uint64_t index, uint8_t out[HL],
                   struct fo_err *err)
{
    struct src *s = ctx;
    s->calls++;
    if (s->fail_at > 0 && s->calls == (unsigned)s->fail_at)
        return fo_err_set(err, FO_E_IO, "node (%u, %" PRIu64 "): disk on fire",
                          level, index);
    cr_assert_lt(level, 64, "level %u", level);
    cr_assert_lt(index, s->size >> level,
                 "(%u, %" PRIu64 ") is not a complete subtree of size %" PRIu64,
                 level, index, s->size);
    s->t->mth(s->t->tree, index << level, (uint64_t)1 << level, out);
    return FO_OK;
}

/* ---- known answers ---- */

static void vector_leaves(cJSON *v, uint8_t leaf[8][HL])
{
    cJSON *hexes = cJSON_GetObjectItemCaseSensitive(v, "leaves_hex");
    cJSON *want = cJSON_GetObjectItemCaseSensitive(v, "leaf_hashes");
    cr_assert_eq(cJSON_GetArraySize(hexes), 8);
    struct fo_sha *sha = fo_sha_create();
    cr_assert_not_null(sha);
    for (int i = 0; i < 8; i++) {
        const char *hex = cJSON_GetArrayItem(hexes, i)->valuestring;
        size_t n = strlen(hex) / 2;
        unsigned char data[64];
        cr_assert_leq(n, sizeof(data));
        if (n)
            cr_assert_eq(fo_unhex(hex, data, n), FO_OK);
        uint8_t w[HL], other[HL];
        unhex32(cJSON_GetArrayItem(want, i)->valuestring, w);
        merkle_leaf_hash(NULL, data, n, leaf[i]);
        merkle_leaf_hash(sha, data, n, other);
        assert_hash_eq(leaf[i], w, "leaf hash");
        assert_hash_eq(other, w, "leaf hash with hasher");
    }
    fo_sha_free(sha);
}

Test(merkle_hash, leaf_hashes_vectors)
{
    cJSON *v = tu_vector("rfc6962.json");
    uint8_t leaf[8][HL];
    vector_leaves(v, leaf);
    cJSON_Delete(v);
}

Test(merkle_hash, large_leaf_with_and_without_hasher)
{
    static unsigned char big[5000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 7);
    uint8_t a[HL], b[HL], c[HL];
    unsigned char *copy = malloc(sizeof(big) + 1);
    copy[0] = 0;
    memcpy(copy + 1, big, sizeof(big));
    fo_sha256(copy, sizeof(big) + 1, c);
    free(copy);
    struct fo_sha *sha = fo_sha_create();
    merkle_leaf_hash(NULL, big, sizeof(big), a);
    merkle_leaf_hash(sha, big, sizeof(big), b);
    fo_sha_free(sha);
    assert_hash_eq(a, c, "no hasher");
    assert_hash_eq(b, c, "hasher");
}

Test(merkle_hash, empty_root)
{
    uint8_t h[HL], w[HL];
    merkle_empty_root(h);
    unhex32("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            w);
    assert_hash_eq(h, w, "empty root");
}

Test(merkle_root, vectors)
{
    cJSON *v = tu_vector("rfc6962.json");
    uint8_t leaf[8][HL];
    vector_leaves(v, leaf);
    struct dense d = {leaf, 8};
    struct ref_tree t = {dense_mth, &d};
    cJSON *roots = cJSON_GetObjectItemCaseSensitive(v, "roots");
    int seen = 0;
    cJSON *r;
    cJSON_ArrayForEach (r, roots) {
        uint64_t size =
            (uint64_t)cJSON_GetObjectItemCaseSensitive(r, "size")->valuedouble;
        uint8_t want[HL], got[HL];
        unhex32(cJSON_GetObjectItemCaseSensitive(r, "root")->valuestring, want);
        struct src s = {&t, size, 0, 0};
        struct fo_err err = {0};
        cr_assert_eq(merkle_root(src_get, &s, size, got, &err), FO_OK, "%s",
                     err.msg);
        assert_hash_eq(got, want, "root");
        seen++;
    }
    cr_assert_eq(seen, 9);
    cJSON_Delete(v);
}

static size_t json_path(cJSON *arr, uint8_t path[][HL])
{
    size_t n = 0;
    cJSON *h;
    cJSON_ArrayForEach (h, arr) {
        cr_assert_lt(n, MERKLE_MAX_PATH);
        unhex32(h->valuestring, path[n++]);
    }
    return n;
}

static uint64_t json_u64(cJSON *o, const char *key)
{
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(x), "no number %s", key);
    return (uint64_t)x->valuedouble;
}

Test(merkle_proof, inclusion_vectors)
{
    cJSON *v = tu_vector("rfc6962.json");
    uint8_t leaf[8][HL];
    vector_leaves(v, leaf);
    struct dense d = {leaf, 8};
    struct ref_tree t = {dense_mth, &d};
    int seen = 0;
    cJSON *p;
    cJSON_ArrayForEach (
        p, cJSON_GetObjectItemCaseSensitive(v, "inclusion_proofs")) {
        uint64_t index = json_u64(p, "index"), size = json_u64(p, "size");
        uint8_t want[MERKLE_MAX_PATH][HL], got[MERKLE_MAX_PATH][HL];
        uint8_t lh[HL], root[HL];
        size_t want_len =
            json_path(cJSON_GetObjectItemCaseSensitive(p, "path"), want);
        unhex32(cJSON_GetObjectItemCaseSensitive(p, "leaf_hash")->valuestring,
                lh);
        unhex32(cJSON_GetObjectItemCaseSensitive(p, "root")->valuestring, root);
        assert_hash_eq(lh, leaf[index], "vector leaf hash");

        struct src s = {&t, size, 0, 0};
        struct fo_err err = {0};
        size_t len = 99;
        cr_assert_eq(
            merkle_inclusion_proof(src_get, &s, index, size, got, &len, &err),
            FO_OK, "%s", err.msg);
        cr_assert_eq(len, want_len, "index %" PRIu64 " size %" PRIu64, index,
                     size);
        for (size_t i = 0; i < len; i++)
            assert_hash_eq(got[i], want[i], "inclusion path");
        cr_assert_eq(merkle_verify_inclusion(lh, index, size,
                                             (const uint8_t(*)[HL])want,
                                             want_len, root, &err),
                     FO_OK, "%s", err.msg);
        seen++;
    }
    cr_assert_eq(seen, 5);
    cJSON_Delete(v);
}

Test(merkle_proof, consistency_vectors)
{
    cJSON *v = tu_vector("rfc6962.json");
    uint8_t leaf[8][HL];
    vector_leaves(v, leaf);
    struct dense d = {leaf, 8};
    struct ref_tree t = {dense_mth, &d};
    int seen = 0;
    cJSON *p;
    cJSON_ArrayForEach (
        p, cJSON_GetObjectItemCaseSensitive(v, "consistency_proofs")) {
        uint64_t first = json_u64(p, "size1"), second = json_u64(p, "size2");
        uint8_t want[MERKLE_MAX_PATH][HL], got[MERKLE_MAX_PATH][HL];
        uint8_t r1[HL], r2[HL];
        size_t want_len =
            json_path(cJSON_GetObjectItemCaseSensitive(p, "path"), want);
        unhex32(cJSON_GetObjectItemCaseSensitive(p, "root1")->valuestring, r1);
        unhex32(cJSON_GetObjectItemCaseSensitive(p, "root2")->valuestring, r2);

        struct src s = {&t, second, 0, 0};
        struct fo_err err = {0};
        size_t len = 99;
        cr_assert_eq(merkle_consistency_proof(src_get, &s, first, second, got,
                                              &len, &err),
                     FO_OK, "%s", err.msg);
        cr_assert_eq(len, want_len, "%" PRIu64 " -> %" PRIu64, first, second);
        for (size_t i = 0; i < len; i++)
            assert_hash_eq(got[i], want[i], "consistency path");
        cr_assert_eq(merkle_verify_consistency(first, second, r1, r2,
                                               (const uint8_t(*)[HL])want,
                                               want_len, &err),
                     FO_OK, "%s", err.msg);
        seen++;
    }
    cr_assert_eq(seen, 5);
    cJSON_Delete(v);
}

/* ---- every proof up to size 64, and every one-byte change rejected ---- */

#define EX_N 64

static void make_leaves(uint8_t leaf[][HL], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char data[2] = {(unsigned char)i, (unsigned char)(i * 31)};
        merkle_leaf_hash(NULL, data, 1 + i % 2, leaf[i]);
    }
}

Test(merkle_proof, inclusion_every_index_and_size_to_64)
{
    static uint8_t leaf[EX_N][HL];
    make_leaves(leaf, EX_N);
    struct dense d = {leaf, EX_N};
    struct ref_tree t = {dense_mth, &d};
    unsigned long rejected = 0;

    for (uint64_t size = 1; size <= EX_N; size++) {
        uint8_t root[HL];
        dense_mth(&d, 0, size, root);
        for (uint64_t index = 0; index < size; index++) {
            uint8_t got[MERKLE_MAX_PATH][HL], want[REF_MAX][HL];
            size_t len = 0, want_len = 0;
            struct src s = {&t, size, 0, 0};
            struct fo_err err = {0};
            cr_assert_eq(merkle_inclusion_proof(src_get, &s, index, size, got,
                                                &len, &err),
                         FO_OK, "%s", err.msg);
            ref_path(&t, index, 0, size, want, &want_len);
            cr_assert_eq(len, want_len);
            cr_assert_eq(memcmp(got, want, len * HL), 0,
                         "path of %" PRIu64 " in %" PRIu64, index, size);
            cr_assert_eq(merkle_verify_inclusion(leaf[index], index, size,
                                                 (const uint8_t(*)[HL])got, len,
                                                 root, &err),
                         FO_OK, "%" PRIu64 "/%" PRIu64 ": %s", index, size,
                         err.msg);

            /* Every byte of every path hash, of the leaf and of the root. */
            uint8_t lh[HL], rt[HL];
            memcpy(lh, leaf[index], HL);
            memcpy(rt, root, HL);
            for (size_t h = 0; h < len + 2; h++) {
                uint8_t *target = h < len ? got[h] : h == len ? lh : rt;
                for (size_t b = 0; b < HL; b++) {
                    target[b] ^= 0x01;
                    int rc = merkle_verify_inclusion(lh, index, size,
                                                     (const uint8_t(*)[HL])got,
                                                     len, rt, NULL);
                    target[b] ^= 0x01;
                    cr_assert_eq(rc, FO_E_VERIFY,
                                 "%" PRIu64 "/%" PRIu64
                                 " hash %zu byte %zu accepted",
                                 index, size, h, b);
                    rejected++;
                }
            }
            /* The right proof for another index, or another size, fails. */
            if (size > 1) {
                uint64_t other = (index + 1) % size;
                cr_assert_eq(merkle_verify_inclusion(leaf[index], other, size,
                                                     (const uint8_t(*)[HL])got,
                                                     len, root, NULL),
                             FO_E_VERIFY);
            }
        }
    }
    cr_assert_gt(rejected, 100000);
}

Test(merkle_proof, consistency_every_pair_to_64)
{
    static uint8_t leaf[EX_N][HL];
    static uint8_t roots[EX_N + 1][HL];
    make_leaves(leaf, EX_N);
    struct dense d = {leaf, EX_N};
    struct ref_tree t = {dense_mth, &d};
    for (uint64_t n = 0; n <= EX_N; n++)
        dense_mth(&d, 0, n, roots[n]);
    unsigned long rejected = 0;

    for (uint64_t second = 1; second <= EX_N; second++) {
        for (uint64_t first = 1; first <= second; first++) {
            uint8_t got[MERKLE_MAX_PATH][HL], want[REF_MAX][HL];
            size_t len = 99, want_len = 0;
            struct src s = {&t, second, 0, 0};
            struct fo_err err = {0};
            cr_assert_eq(merkle_consistency_proof(src_get, &s, first, second,
                                                  got, &len, &err),
                         FO_OK, "%s", err.msg);
            if (first < second)
                ref_subproof(&t, first, 0, second, 1, want, &want_len);
            cr_assert_eq(len, want_len, "%" PRIu64 " -> %" PRIu64, first,
                         second);
            cr_assert_eq(memcmp(got, want, len * HL), 0,
                         "%" PRIu64 " -> %" PRIu64, first, second);
            cr_assert_eq(merkle_verify_consistency(
                             first, second, roots[first], roots[second],
                             (const uint8_t(*)[HL])got, len, &err),
                         FO_OK, "%" PRIu64 " -> %" PRIu64 ": %s", first, second,
                         err.msg);

            uint8_t r1[HL], r2[HL];
            memcpy(r1, roots[first], HL);
            memcpy(r2, roots[second], HL);
            for (size_t h = 0; h < len + 2; h++) {
                uint8_t *target = h < len ? got[h] : h == len ? r1 : r2;
                for (size_t b = 0; b < HL; b++) {
                    target[b] ^= 0x80;
                    int rc = merkle_verify_consistency(
                        first, second, r1, r2, (const uint8_t(*)[HL])got, len,
                        NULL);
                    target[b] ^= 0x80;
                    cr_assert_eq(rc, FO_E_VERIFY,
                                 "%" PRIu64 " -> %" PRIu64
                                 " hash %zu byte %zu accepted",
                                 first, second, h, b);
                    rejected++;
                }
            }
            /* Proofs do not transfer to neighbouring sizes. */
            if (first < second && first > 1)
                cr_assert_eq(merkle_verify_consistency(
                                 first - 1, second, roots[first - 1],
                                 roots[second], (const uint8_t(*)[HL])got, len,
                                 NULL),
                             FO_E_VERIFY);
        }
    }
    cr_assert_gt(rejected, 100000);
}

/* ---- every rejection, by name ---- */

struct fixture {
    uint8_t leaf[16][HL];
    struct dense d;
    struct ref_tree t;
};

static void fixture_init(struct fixture *f)
{
    make_leaves(f->leaf, 16);
    f->d = (struct dense){f->leaf, 16};
    f->t = (struct ref_tree){dense_mth, &f->d};
}

Test(merkle_verify, inclusion_rejections)
{
    struct fixture f;
    fixture_init(&f);
    uint8_t path[MERKLE_MAX_PATH + 1][HL], root[HL];
    size_t len = 0;
    struct src s = {&f.t, 11, 0, 0};
    struct fo_err err = {0};
    dense_mth(&f.d, 0, 11, root);
    cr_assert_eq(merkle_inclusion_proof(src_get, &s, 5, 11, path, &len, &err),
                 FO_OK);
    cr_assert_eq(len, 4);
    const uint8_t(*cp)[HL] = (const uint8_t(*)[HL])path;

    cr_assert_eq(merkle_verify_inclusion(f.leaf[5], 5, 11, cp, len, root, &err),
                 FO_OK);
    /* index beyond size, and index == size */
    cr_assert_eq(
        merkle_verify_inclusion(f.leaf[5], 11, 11, cp, len, root, &err),
        FO_E_VERIFY);
    cr_assert(strstr(err.msg, "beyond size"), "%s", err.msg);
    cr_assert_eq(
        merkle_verify_inclusion(f.leaf[5], 12, 11, cp, len, root, &err),
        FO_E_VERIFY);
    cr_assert_eq(merkle_verify_inclusion(f.leaf[5], 0, 0, cp, 0, root, &err),
                 FO_E_VERIFY);
    /* path too long, too short, empty */
    memcpy(path[len], path[0], HL);
    cr_assert_eq(
        merkle_verify_inclusion(f.leaf[5], 5, 11, cp, len + 1, root, &err),
        FO_E_VERIFY);
    cr_assert(strstr(err.msg, "path length"), "%s", err.msg);
    cr_assert_eq(
        merkle_verify_inclusion(f.leaf[5], 5, 11, cp, len - 1, root, &err),
        FO_E_VERIFY);
    cr_assert(strstr(err.msg, "path length"), "%s", err.msg);
    cr_assert_eq(merkle_verify_inclusion(f.leaf[5], 5, 11, cp, 0, root, &err),
                 FO_E_VERIFY);
    /* size 1: the path must be empty and the leaf is the root */
    cr_assert_eq(
        merkle_verify_inclusion(f.leaf[0], 0, 1, cp, 0, f.leaf[0], &err),
        FO_OK);
    cr_assert_eq(
        merkle_verify_inclusion(f.leaf[0], 0, 1, cp, 1, f.leaf[0], &err),
        FO_E_VERIFY);
    /* root mismatch: the root of another size, another leaf */
    uint8_t root10[HL];
    dense_mth(&f.d, 0, 10, root10);
    cr_assert_eq(
        merkle_verify_inclusion(f.leaf[5], 5, 11, cp, len, root10, &err),
        FO_E_VERIFY);
    cr_assert(strstr(err.msg, "root mismatch"), "%s", err.msg);
    cr_assert_eq(merkle_verify_inclusion(f.leaf[4], 5, 11, cp, len, root, &err),
                 FO_E_VERIFY);
    /* swapped path elements */
    uint8_t tmp[HL];
    memcpy(tmp, path[0], HL);
    memcpy(path[0], path[1], HL);
    memcpy(path[1], tmp, HL);
    cr_assert_eq(merkle_verify_inclusion(f.leaf[5], 5, 11, cp, len, root, &err),
                 FO_E_VERIFY);
}

Test(merkle_verify, consistency_rejections)
{
    struct fixture f;
    fixture_init(&f);
    uint8_t path[MERKLE_MAX_PATH + 1][HL], r[17][HL];
    for (uint64_t n = 0; n <= 16; n++)
        dense_mth(&f.d, 0, n, r[n]);
    size_t len = 0;
    struct src s = {&f.t, 13, 0, 0};
    struct fo_err err = {0};
    cr_assert_eq(merkle_consistency_proof(src_get, &s, 6, 13, path, &len, &err),
                 FO_OK);
    const uint8_t(*cp)[HL] = (const uint8_t(*)[HL])path;
    cr_assert_eq(merkle_verify_consistency(6, 13, r[6], r[13], cp, len, &err),
                 FO_OK, "%s", err.msg);

    /* refused requests */
    cr_assert_eq(merkle_verify_consistency(0, 13, r[0], r[13], cp, len, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "0"), "%s", err.msg);
    cr_assert_eq(merkle_verify_consistency(0, 0, r[0], r[0], cp, 0, &err),
                 FO_E_INVALID);
    cr_assert_eq(merkle_verify_consistency(13, 6, r[13], r[6], cp, len, &err),
                 FO_E_INVALID);
    /* first == second: empty path and equal roots only */
    cr_assert_eq(merkle_verify_consistency(6, 6, r[6], r[6], cp, 0, &err),
                 FO_OK);
    cr_assert_eq(merkle_verify_consistency(6, 6, r[6], r[6], cp, 1, &err),
                 FO_E_VERIFY);
    cr_assert(strstr(err.msg, "path length"), "%s", err.msg);
    cr_assert_eq(merkle_verify_consistency(6, 6, r[6], r[7], cp, 0, &err),
                 FO_E_VERIFY);
    cr_assert(strstr(err.msg, "root mismatch"), "%s", err.msg);
    /* first < second needs a path */
    cr_assert_eq(merkle_verify_consistency(6, 13, r[6], r[13], cp, 0, &err),
                 FO_E_VERIFY);
    /* too long, too short */
    memcpy(path[len], path[0], HL);
    cr_assert_eq(
        merkle_verify_consistency(6, 13, r[6], r[13], cp, len + 1, &err),
        FO_E_VERIFY);
    cr_assert(strstr(err.msg, "path length"), "%s", err.msg);
    cr_assert_eq(
        merkle_verify_consistency(6, 13, r[6], r[13], cp, len - 1, &err),
        FO_E_VERIFY);
    cr_assert(strstr(err.msg, "path length"), "%s", err.msg);
    /* mismatched roots: either side, or both swapped */
    cr_assert_eq(merkle_verify_consistency(6, 13, r[5], r[13], cp, len, &err),
                 FO_E_VERIFY);
    cr_assert(strstr(err.msg, "root mismatch"), "%s", err.msg);
    cr_assert_eq(merkle_verify_consistency(6, 13, r[6], r[12], cp, len, &err),
                 FO_E_VERIFY);
    cr_assert(strstr(err.msg, "root mismatch"), "%s", err.msg);
    cr_assert_eq(merkle_verify_consistency(6, 13, r[13], r[6], cp, len, &err),
                 FO_E_VERIFY);
    /* a power-of-two first size: the proof leaves root1 out */
    cr_assert_eq(merkle_consistency_proof(src_get, &s, 4, 13, path, &len, &err),
                 FO_OK);
    cr_assert_eq(merkle_verify_consistency(4, 13, r[4], r[13], cp, len, &err),
                 FO_OK);
    cr_assert_eq(merkle_verify_consistency(4, 13, r[5], r[13], cp, len, &err),
                 FO_E_VERIFY);
}

Test(merkle_proof, generation_rejections)
{
    struct fixture f;
    fixture_init(&f);
    uint8_t path[MERKLE_MAX_PATH][HL];
    size_t len = 77;
    struct src s = {&f.t, 16, 0, 0};
    struct fo_err err = {0};

    cr_assert_eq(merkle_inclusion_proof(src_get, &s, 16, 16, path, &len, &err),
                 FO_E_INVALID);
    cr_assert_eq(merkle_inclusion_proof(src_get, &s, 0, 0, path, &len, &err),
                 FO_E_INVALID);
    cr_assert_eq(merkle_consistency_proof(src_get, &s, 0, 16, path, &len, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "0"), "%s", err.msg);
    cr_assert_eq(merkle_consistency_proof(src_get, &s, 0, 0, path, &len, &err),
                 FO_E_INVALID);
    cr_assert_eq(merkle_consistency_proof(src_get, &s, 9, 8, path, &len, &err),
                 FO_E_INVALID);
    cr_assert_eq(len, 77, "path_len set on failure");
    cr_assert_eq(s.calls, 0);
    cr_assert_eq(merkle_consistency_proof(src_get, &s, 9, 9, path, &len, &err),
                 FO_OK);
    cr_assert_eq(len, 0);
    cr_assert_eq(s.calls, 0);
    /* root of the empty tree needs no storage */
    uint8_t root[HL], empty[HL];
    cr_assert_eq(merkle_root(src_get, &s, 0, root, &err), FO_OK);
    merkle_empty_root(empty);
    assert_hash_eq(root, empty, "empty root");
    cr_assert_eq(s.calls, 0);
}

Test(merkle_proof, callback_errors_pass_up)
{
    struct fixture f;
    fixture_init(&f);
    uint8_t path[MERKLE_MAX_PATH][HL], root[HL];
    size_t len = 0;
    for (int at = 1; at <= 3; at++) {
        struct fo_err err = {0};
        struct src s = {&f.t, 13, 0, at};
        cr_assert_eq(merkle_root(src_get, &s, 13, root, &err), FO_E_IO);
        cr_assert(strstr(err.msg, "disk on fire"), "%s", err.msg);
        s = (struct src){&f.t, 13, 0, at};
        cr_assert_eq(
            merkle_inclusion_proof(src_get, &s, 3, 13, path, &len, &err),
            FO_E_IO);
        s = (struct src){&f.t, 13, 0, at};
        cr_assert_eq(
            merkle_consistency_proof(src_get, &s, 3, 13, path, &len, &err),
            FO_E_IO);
        struct merkle_frontier fr;
        merkle_frontier_init(&fr);
        s = (struct src){&f.t, 13, 0, at};
        cr_assert_eq(merkle_frontier_load(&fr, src_get, &s, 13, &err), FO_E_IO);
        cr_assert_eq(fr.size, 0, "frontier changed by a failed load");
    }
}

/* ---- the frontier, as the ledger uses it ---- */

#define FR_N 1000
#define FR_LEVELS 10 /* 2^10 > FR_N */

/* The ledger's view: level 0 from the leaf table, levels >= 1 from the
 * subtree hashes the frontier emitted. */
struct store {
    uint8_t leaf[FR_N][HL];
    uint8_t node[FR_LEVELS + 1][FR_N][HL];
    unsigned char have[FR_LEVELS + 1][FR_N];
    uint64_t size;       /* leaves stored */
    unsigned last_level; /* of the latest emit in this push */
    unsigned emitted;
    int fail_at; /* fail the emit of this level */
    unsigned calls;
};

static int store_emit(void *ctx, unsigned level, uint64_t index,
                      const uint8_t hash[HL])
{
    struct store *st = ctx;
    if (st->fail_at && (int)level == st->fail_at)
        return FO_E_IO;
    cr_assert_geq(level, 1);
    cr_assert_leq(level, FR_LEVELS);
    cr_assert_gt(level, st->last_level, "emits not in increasing level");
    cr_assert_lt(index, FR_N);
    cr_assert_not(st->have[level][index], "(%u, %" PRIu64 ") emitted twice",
                  level, index);
    /* The subtree is complete once the pushed leaf (st->size - 1) is in. */
    cr_assert_eq((index + 1) << level, st->size,
                 "(%u, %" PRIu64 ") does not end at the new leaf", level,
                 index);
    /* Its hash is the MTH of its leaves. */
    struct dense d = {st->leaf, st->size};
    uint8_t want[HL];
    dense_mth(&d, index << level, (uint64_t)1 << level, want);
    assert_hash_eq(hash, want, "emitted subtree");
    memcpy(st->node[level][index], hash, HL);
    st->have[level][index] = 1;
    st->last_level = level;
    st->emitted++;
    return 0;
}

static int store_get(void *ctx, unsigned level, uint64_t index, uint8_t out[HL],
                     struct fo_err *err)
{
    struct store *st = ctx;
    (void)err;
    st->calls++;
    if (level == 0) {
        cr_assert_lt(index, st->size);
        memcpy(out, st->leaf[index], HL);
        return FO_OK;
    }
    cr_assert_leq(level, FR_LEVELS);
    cr_assert(index < FR_N && st->have[level][index],
              "(%u, %" PRIu64 ") asked for but never emitted (size %" PRIu64
              ")",
              level, index, st->size);
    memcpy(out, st->node[level][index], HL);
    return FO_OK;
}

Test(merkle_frontier, push_matches_root_and_emits_complete_subtrees)
{
    struct store *st = calloc(1, sizeof(*st));
    struct fo_sha *sha = fo_sha_create();
    struct merkle_frontier f;
    merkle_frontier_init(&f);
    uint8_t r[HL], want[HL];
    merkle_frontier_root(&f, sha, r);
    merkle_empty_root(want);
    assert_hash_eq(r, want, "empty frontier");

    for (uint64_t n = 1; n <= FR_N; n++) {
        unsigned char data[4] = {(unsigned char)n, (unsigned char)(n >> 8), 'x',
                                 'y'};
        merkle_leaf_hash(sha, data, sizeof(data), st->leaf[n - 1]);
        st->size = n;
        st->last_level = 0;
        cr_assert_eq(merkle_frontier_push(&f, n % 2 ? sha : NULL,
                                          st->leaf[n - 1], store_emit, st),
                     0);
        cr_assert_eq(f.size, n);
        cr_assert_eq(f.count, (unsigned)__builtin_popcountll(n));

        /* Exactly the complete subtrees of level >= 1 have been emitted. */
        unsigned expect = 0;
        for (unsigned l = 1; l <= FR_LEVELS; l++)
            expect += (unsigned)(n >> l);
        cr_assert_eq(st->emitted, expect, "size %" PRIu64, n);

        /* Root three ways: frontier, storage, naive. */
        struct dense d = {st->leaf, n};
        dense_mth(&d, 0, n, want);
        merkle_frontier_root(&f, n % 3 ? sha : NULL, r);
        assert_hash_eq(r, want, "frontier root");
        struct fo_err err = {0};
        st->calls = 0;
        cr_assert_eq(merkle_root(store_get, st, n, r, &err), FO_OK);
        assert_hash_eq(r, want, "stored root");
        cr_assert_eq(st->calls, (unsigned)__builtin_popcountll(n));

        /* Loading the frontier back from storage gives the same frontier. */
        struct merkle_frontier g;
        cr_assert_eq(merkle_frontier_load(&g, store_get, st, n, &err), FO_OK);
        cr_assert_eq(g.size, f.size);
        cr_assert_eq(g.count, f.count);
        cr_assert_eq(memcmp(g.hash, f.hash, f.count * HL), 0);
    }

    /* Proofs served from storage agree with proofs from the leaves alone. */
    struct dense d = {st->leaf, FR_N};
    struct ref_tree t = {dense_mth, &d};
    for (uint64_t size = 1; size <= FR_N; size += 37) {
        uint8_t root[HL];
        dense_mth(&d, 0, size, root);
        for (uint64_t index = 0; index < size; index += 1 + size / 5) {
            uint8_t a[MERKLE_MAX_PATH][HL], b[MERKLE_MAX_PATH][HL];
            size_t alen = 0, blen = 0;
            struct src s = {&t, size, 0, 0};
            struct fo_err err = {0};
            st->size = size;
            cr_assert_eq(merkle_inclusion_proof(store_get, st, index, size, a,
                                                &alen, &err),
                         FO_OK);
            cr_assert_eq(merkle_inclusion_proof(src_get, &s, index, size, b,
                                                &blen, &err),
                         FO_OK);
            cr_assert_eq(alen, blen);
            cr_assert_eq(memcmp(a, b, alen * HL), 0);
            cr_assert_eq(merkle_verify_inclusion(st->leaf[index], index, size,
                                                 (const uint8_t(*)[HL])a, alen,
                                                 root, &err),
                         FO_OK);
            uint64_t first = index + 1;
            uint8_t r1[HL];
            dense_mth(&d, 0, first, r1);
            cr_assert_eq(merkle_consistency_proof(store_get, st, first, size, a,
                                                  &alen, &err),
                         FO_OK);
            cr_assert_eq(merkle_verify_consistency(first, size, r1, root,
                                                   (const uint8_t(*)[HL])a,
                                                   alen, &err),
                         FO_OK, "%s", err.msg);
        }
    }
    st->size = FR_N;
    fo_sha_free(sha);
    free(st);
}

Test(merkle_frontier, failed_emit_leaves_frontier_unchanged)
{
    struct store *st = calloc(1, sizeof(*st));
    struct merkle_frontier f, before;
    merkle_frontier_init(&f);
    for (uint64_t n = 1; n <= 7; n++) {
        merkle_leaf_hash(NULL, &n, sizeof(n), st->leaf[n - 1]);
        st->size = n;
        st->last_level = 0;
        cr_assert_eq(
            merkle_frontier_push(&f, NULL, st->leaf[n - 1], store_emit, st), 0);
    }
    /* The 8th leaf completes levels 1, 2 and 3; fail the level-2 emit. */
    merkle_leaf_hash(NULL, "8", 1, st->leaf[7]);
    st->size = 8;
    st->last_level = 0;
    st->fail_at = 2;
    before = f;
    cr_assert_eq(merkle_frontier_push(&f, NULL, st->leaf[7], store_emit, st),
                 FO_E_IO);
    cr_assert_eq(memcmp(&f, &before, sizeof(f)), 0);
    /* Retrying after the fault works (level 1 is emitted again: storage
     * must accept a repeated identical node, as an upsert). */
    st->fail_at = 0;
    st->last_level = 0;
    st->have[1][3] = 0;
    cr_assert_eq(merkle_frontier_push(&f, NULL, st->leaf[7], store_emit, st),
                 0);
    cr_assert_eq(f.size, 8);
    cr_assert_eq(f.count, 1);
    /* No emit callback at all is allowed. */
    cr_assert_eq(merkle_frontier_push(&f, NULL, st->leaf[0], NULL, NULL), 0);
    cr_assert_eq(f.size, 9);
    free(st);
}

/* ---- cost: O(log n) callback calls at sizes beyond hashing ---- */

static void check_large(uint64_t size, const uint64_t *idx, size_t nidx,
                        const uint64_t (*pairs)[2], size_t npairs)
{
    struct sparse *sp = calloc(1, sizeof(*sp));
    sparse_init(sp);
    for (size_t i = 0; i < nidx; i++)
        sparse_add(sp, idx[i]);
    struct ref_tree t = {sparse_mth, sp};
    struct fo_err err = {0};
    uint8_t root[HL], want[HL];

    struct src s = {&t, size, 0, 0};
    cr_assert_eq(merkle_root(src_get, &s, size, root, &err), FO_OK);
    sparse_mth(sp, 0, size, want);
    assert_hash_eq(root, want, "large root");
    cr_assert_eq(s.calls, (unsigned)__builtin_popcountll(size));

    for (size_t i = 0; i < nidx; i++) {
        uint8_t path[MERKLE_MAX_PATH][HL], ref[REF_MAX][HL], leaf[HL];
        size_t len = 0, rlen = 0;
        s = (struct src){&t, size, 0, 0};
        cr_assert_eq(
            merkle_inclusion_proof(src_get, &s, idx[i], size, path, &len, &err),
            FO_OK, "%s", err.msg);
        cr_assert_leq(s.calls, 2 * 64, "inclusion %" PRIu64 ": %u calls",
                      idx[i], s.calls);
        ref_path(&t, idx[i], 0, size, ref, &rlen);
        cr_assert_eq(len, rlen);
        cr_assert_eq(memcmp(path, ref, len * HL), 0);
        sparse_mth(sp, idx[i], 1, leaf);
        cr_assert_eq(merkle_verify_inclusion(leaf, idx[i], size,
                                             (const uint8_t(*)[HL])path, len,
                                             root, &err),
                     FO_OK, "%s", err.msg);
        leaf[0] ^= 1;
        cr_assert_eq(merkle_verify_inclusion(leaf, idx[i], size,
                                             (const uint8_t(*)[HL])path, len,
                                             root, &err),
                     FO_E_VERIFY);
    }
    for (size_t i = 0; i < npairs; i++) {
        uint64_t first = pairs[i][0], second = pairs[i][1];
        uint8_t path[MERKLE_MAX_PATH][HL], ref[REF_MAX][HL], r1[HL], r2[HL];
        size_t len = 0, rlen = 0;
        s = (struct src){&t, second, 0, 0};
        cr_assert_eq(merkle_consistency_proof(src_get, &s, first, second, path,
                                              &len, &err),
                     FO_OK, "%s", err.msg);
        cr_assert_leq(s.calls, 2 * 64,
                      "consistency %" PRIu64 " -> %" PRIu64 ": %u calls", first,
                      second, s.calls);
        ref_subproof(&t, first, 0, second, 1, ref, &rlen);
        cr_assert_eq(len, rlen);
        cr_assert_eq(memcmp(path, ref, len * HL), 0);
        sparse_mth(sp, 0, first, r1);
        sparse_mth(sp, 0, second, r2);
        cr_assert_eq(merkle_verify_consistency(first, second, r1, r2,
                                               (const uint8_t(*)[HL])path, len,
                                               &err),
                     FO_OK, "%s", err.msg);
        r1[5] ^= 1;
        cr_assert_eq(merkle_verify_consistency(first, second, r1, r2,
                                               (const uint8_t(*)[HL])path, len,
                                               &err),
                     FO_E_VERIFY);
    }
    free(sp);
}

Test(merkle_cost, logarithmic_calls_at_2_40_minus_3)
{
    const uint64_t size = ((uint64_t)1 << 40) - 3;
    const uint64_t idx[] = {0,        12345,    size / 2 + 7,
                            size - 2, size - 1, ((uint64_t)1 << 39) - 1};
    const uint64_t pairs[][2] = {{1, size},
                                 {3, size},
                                 {size - 1, size},
                                 {(uint64_t)1 << 39, size},
                                 {((uint64_t)1 << 39) + 1, size},
                                 {12346, size / 2 + 8},
                                 {size / 2 + 8, size}};
    check_large(size, idx, sizeof(idx) / sizeof(idx[0]), pairs,
                sizeof(pairs) / sizeof(pairs[0]));
}

Test(merkle_cost, sizes_near_2_64)
{
    const uint64_t size = UINT64_MAX;
    const uint64_t idx[] = {0, 2, (uint64_t)1 << 63, size - 1};
    const uint64_t pairs[][2] = {{(uint64_t)1 << 63, size},
                                 {size - 1, size},
                                 {((uint64_t)1 << 63) + 2, size}};
    check_large(size, idx, 4, pairs, 3);

    /* An inclusion path of 64 hashes, the maximum. */
    struct sparse *sp = calloc(1, sizeof(*sp));
    sparse_init(sp);
    sparse_add(sp, 2);
    struct ref_tree t = {sparse_mth, sp};
    struct src s = {&t, size, 0, 0};
    uint8_t path[MERKLE_MAX_PATH][HL], ref[REF_MAX][HL], r1[HL], r2[HL];
    size_t len = 0, rlen = 0;
    struct fo_err err = {0};
    cr_assert_eq(merkle_inclusion_proof(src_get, &s, 0, size, path, &len, &err),
                 FO_OK);
    cr_assert_eq(len, 64);

    /* A consistency path from 3 to 2^64 - 1 has 65 hashes: exactly what a
     * MERKLE_MAX_PATH array holds, and it matches the reference. */
    s = (struct src){&t, size, 0, 0};
    cr_assert_eq(
        merkle_consistency_proof(src_get, &s, 3, size, path, &len, &err), FO_OK,
        "%s", err.msg);
    cr_assert_eq(len, 65);
    ref_subproof(&t, 3, 0, size, 1, ref, &rlen);
    cr_assert_eq(rlen, 65);
    cr_assert_eq(memcmp(path, ref, 65 * HL), 0);
    sparse_mth(sp, 0, 3, r1);
    sparse_mth(sp, 0, size, r2);
    cr_assert_eq(merkle_verify_consistency(
                     3, size, r1, r2, (const uint8_t(*)[HL])ref, rlen, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_eq(merkle_verify_consistency(3, size, r1, r2,
                                           (const uint8_t(*)[HL])ref, 64, &err),
                 FO_E_VERIFY);
    free(sp);
}
