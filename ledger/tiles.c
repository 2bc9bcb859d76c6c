/* tiles: C2SP tlog-tiles, written from a ledger and read back to make
 * proofs with no database. See tiles.h and docs/LEDGER.md. */
#include "ledger/tiles.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger/fo_buf.h"
#include "ledger/ledger_int.h"
#include "ledger/note.h"
#include "ledger/proof.h"
#include "ledger/witness.h"

#define TILE_BYTES (TILE_WIDTH * TILE_HASH_LEN)

/* ---- paths -------------------------------------------------------------- */

int tile_path(int level, uint64_t n, unsigned w, char out[TILE_PATH_MAX],
              struct fo_err *err)
{
    if (level < TILE_LEVEL_ENTRIES || level > 63 || w > TILE_WIDTH)
        return fo_err_set(err, FO_E_INVALID, "tile level %d width %u: invalid",
                          level, w);
    /* N in groups of three digits, most significant first. */
    unsigned groups[8];
    int g = 0;
    uint64_t v = n;
    do {
        groups[g++] = (unsigned)(v % 1000);
        v /= 1000;
    } while (v > 0);
    size_t len = 0;
    int k;
    if (level == TILE_LEVEL_ENTRIES)
        k = snprintf(out, TILE_PATH_MAX, "tile/entries/");
    else
        k = snprintf(out, TILE_PATH_MAX, "tile/%d/", level);
    len = (size_t)k;
    for (int i = g - 1; i >= 0; i--) {
        k = snprintf(out + len, TILE_PATH_MAX - len, "%s%03u%s",
                     i > 0 ? "x" : "", groups[i], i > 0 ? "/" : "");
        len += (size_t)k;
    }
    if (w > 0 && w < TILE_WIDTH) {
        k = snprintf(out + len, TILE_PATH_MAX - len, ".p/%u", w);
        len += (size_t)k;
    }
    return len < TILE_PATH_MAX ? FO_OK
                               : fo_err_set(err, FO_E_INTERNAL, "tile path");
}

unsigned tile_width(int level, uint64_t n, uint64_t size)
{
    if (level < 0 || level > 7)
        return 0;
    uint64_t count = size >> (TILE_HEIGHT * (unsigned)level);
    if (n >= (count + TILE_WIDTH - 1) / TILE_WIDTH)
        return 0;
    uint64_t left = count - n * TILE_WIDTH;
    return left >= TILE_WIDTH ? TILE_WIDTH : (unsigned)left;
}

/* ---- files -------------------------------------------------------------- */

/* mkdir -p of the directories in path (up to its last '/'). */
static int make_parents(char *path, struct fo_err *err)
{
    for (char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = '\0';
        int bad = mkdir(path, 0755) != 0 && errno != EEXIST;
        int e = errno;
        *p = '/';
        if (bad)
            return fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(e));
    }
    return FO_OK;
}

int tiles_put_file(const char *dir, const char *rel, const void *data,
                   size_t len, struct fo_err *err)
{
    char path[4096], tmp[4096 + 32];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, rel);
    if (n < 0 || (size_t)n >= sizeof(path))
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", dir);
    int rc = make_parents(path, err);
    if (rc)
        return rc;
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (close(fd) != 0 && !rc)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

/* 1 when dir/rel is a regular file of exactly len bytes. */
static int have_file(const char *dir, const char *rel, size_t len)
{
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof(path), "%s/%s", dir, rel);
    if (n < 0 || (size_t)n >= sizeof(path) || stat(path, &st) != 0)
        return 0;
    return S_ISREG(st.st_mode) && (size_t)st.st_size == len;
}

/* ---- writing ------------------------------------------------------------ */

int tiles_write(const char *dir, uint64_t size, const struct tile_source *src,
                struct tiles_stats *st, struct fo_err *err)
{
    uint8_t(*buf)[TILE_HASH_LEN] = malloc(TILE_BYTES);
    uint8_t *bundle = malloc(TILE_WIDTH * TILE_BUNDLE_ENTRY_LEN);
    struct fo_sha *sha = NULL;
    int rc = FO_OK;
    if (!buf || !bundle || !(sha = fo_sha_create())) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    st->size = size;
    for (int level = 0; level < 8 && (size >> (TILE_HEIGHT * level)) > 0;
         level++) {
        uint64_t count = size >> (TILE_HEIGHT * (unsigned)level);
        uint64_t tiles = (count + TILE_WIDTH - 1) / TILE_WIDTH;
        for (uint64_t n = 0; n < tiles; n++) {
            unsigned w = tile_width(level, n, size);
            char path[TILE_PATH_MAX], bpath[TILE_PATH_MAX];
            rc = tile_path(level, n, w, path, err);
            if (!rc && level == 0)
                rc = tile_path(TILE_LEVEL_ENTRIES, n, w, bpath, err);
            if (rc)
                goto out;
            int have = have_file(dir, path, (size_t)w * TILE_HASH_LEN);
            int have_b =
                level > 0 ||
                have_file(dir, bpath, (size_t)w * TILE_BUNDLE_ENTRY_LEN);
            st->kept += have + (level == 0 ? have_b : 0);
            if (have && have_b)
                continue;
            uint64_t first = n * TILE_WIDTH;
            if (level == 0) {
                rc = src->leaves(src->ctx, first, w, buf, err);
                for (unsigned i = 0; !rc && i < w; i++) {
                    uint8_t *e = bundle + (size_t)i * TILE_BUNDLE_ENTRY_LEN;
                    e[0] = 0;
                    e[1] = TILE_HASH_LEN;
                    memcpy(e + 2, buf[i], TILE_HASH_LEN);
                    merkle_leaf_hash(sha, buf[i], TILE_HASH_LEN, buf[i]);
                }
                if (!rc && !have_b) {
                    rc = tiles_put_file(dir, bpath, bundle,
                                        (size_t)w * TILE_BUNDLE_ENTRY_LEN, err);
                    st->written += !rc;
                }
            } else {
                for (unsigned i = 0; !rc && i < w; i++)
                    rc = src->node(src->ctx, TILE_HEIGHT * (unsigned)level,
                                   first + i, buf[i], err);
            }
            if (!rc && !have) {
                rc = tiles_put_file(dir, path, buf, (size_t)w * TILE_HASH_LEN,
                                    err);
                st->written += !rc;
            }
            if (rc)
                goto out;
        }
    }
out:
    fo_sha_free(sha);
    free(bundle);
    free(buf);
    return rc;
}

/* The ledger as a tile source, inside a read transaction. */
struct scan_ctx {
    uint8_t (*data)[TILE_HASH_LEN];
    uint64_t start;
    size_t n, got;
};

static int scan_one(void *ctx, const struct store_row *row)
{
    struct scan_ctx *s = ctx;
    if (row->rec.seq != (int64_t)(s->start + s->got) || s->got >= s->n)
        return FO_E_CORRUPT;
    memcpy(s->data[s->got++], row->rec.hash, TILE_HASH_LEN);
    return FO_OK;
}

static int ledger_leaves(void *ctx, uint64_t start, size_t n,
                         uint8_t (*data)[TILE_HASH_LEN], struct fo_err *err)
{
    struct ledger *l = ctx;
    struct scan_ctx s = {.data = data, .start = start, .n = n};
    int rc = l->ops->scan(l->store, (int64_t)start, (int64_t)n, 0, scan_one, &s,
                          err);
    if (rc == FO_E_CORRUPT || (!rc && s.got != n))
        return fo_err_set(
            err, FO_E_CORRUPT, "entries %llu..%llu: a seq is missing",
            (unsigned long long)start, (unsigned long long)(start + n - 1));
    return rc;
}

/* Refuses a dir whose checkpoint is of another log or another history. */
static int check_old_checkpoint(struct ledger *l, const char *dir,
                                uint64_t size, struct fo_err *err)
{
    char path[4096];
    int n = snprintf(path, sizeof(path), "%s/checkpoint", dir);
    if (n < 0 || (size_t)n >= sizeof(path))
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT
                   ? FO_OK
                   : fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    struct fo_buf b;
    fo_buf_init(&b, NOTE_MAX_LEN);
    char chunk[4096];
    size_t got;
    int rc = FO_OK;
    while (!rc && (got = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = fo_buf_append(&b, chunk, got);
    fclose(f);
    /* The text is everything before the blank line. */
    const char *text = b.data ? b.data : "";
    const char *blank = strstr(text, "\n\n");
    struct note_checkpoint cp;
    if (rc || !blank ||
        note_checkpoint_parse(text, (size_t)(blank - text) + 1, &cp, err))
        rc = fo_err_set(err, FO_E_INVALID,
                        "%s: not a checkpoint; refusing to write tiles over "
                        "it (give an empty directory)",
                        path);
    else if (strcmp(cp.origin, l->origin) != 0)
        rc = fo_err_set(err, FO_E_INVALID,
                        "%s: the tiles of another log (origin \"%s\"); give "
                        "an empty directory",
                        path, cp.origin);
    else if (cp.size > size)
        rc = fo_err_set(err, FO_E_INVALID,
                        "%s: size %llu is beyond this ledger's checkpoint "
                        "(%llu): the tiles of another history",
                        path, (unsigned long long)cp.size,
                        (unsigned long long)size);
    else {
        uint8_t root[32];
        rc = merkle_root(ledger_tree_node, l, cp.size, root, err);
        if (!rc && memcmp(root, cp.root, 32) != 0)
            rc = fo_err_set(err, FO_E_INVALID,
                            "%s: its root at size %llu is not this ledger's: "
                            "the tiles of another history",
                            path, (unsigned long long)cp.size);
    }
    fo_buf_release(&b);
    return rc;
}

int ledger_tiles_update(struct ledger *l, const char *dir, uint64_t size,
                        struct tiles_stats *st, struct fo_err *err)
{
    LEDGER_OWNED(l);
    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        return rc;
    int64_t count = 0;
    rc = l->ops->head(l->store, &count, NULL, err);
    if (!rc && (uint64_t)count < size)
        rc = fo_err_set(err, FO_E_INVALID,
                        "tiles of size %llu: the log has %lld entries",
                        (unsigned long long)size, (long long)count);
    if (!rc) {
        struct tile_source src = {ledger_leaves, ledger_tree_node, l};
        rc = tiles_write(dir, size, &src, st, err);
    }
    l->ops->rollback(l->store);
    return rc;
}

int ledger_tiles_write(struct ledger *l, const char *dir,
                       struct tiles_stats *st, struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct ledger_checkpoint cp = {0};
    struct fo_buf note;
    fo_buf_init(&note, NOTE_MAX_LEN * 2);
    int rc = ledger_checkpoint_sign(l, -1, &cp, err);
    if (rc)
        return rc;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        rc = fo_err_set(err, FO_E_IO, "%s: %s", dir, strerror(errno));
        goto out;
    }
    rc = l->ops->begin_read(l->store, err);
    if (rc)
        goto out;
    rc = check_old_checkpoint(l, dir, (uint64_t)cp.size, err);
    l->ops->rollback(l->store);
    if (!rc)
        rc = ledger_tiles_update(l, dir, (uint64_t)cp.size, st, err);
    if (!rc)
        rc = ledger_checkpoint_cosigned(l, cp.size, &note, err);
    if (!rc)
        rc = tiles_put_file(dir, "checkpoint", note.data, note.len, err);
out:
    fo_buf_release(&note);
    ledger_checkpoint_release(&cp);
    return rc;
}

/* ---- reading ------------------------------------------------------------ */

#define READER_CACHE 64

struct cached_tile {
    char path[TILE_PATH_MAX];
    struct fo_buf data;
};

struct tile_reader {
    tile_fetch_fn fetch;
    void *ctx;
    uint64_t size;
    uint64_t fetches;
    unsigned next; /* round-robin slot to replace */
    struct fo_sha *sha;
    struct cached_tile cache[READER_CACHE];
};

int tile_reader_create(tile_fetch_fn fetch, void *ctx, uint64_t size,
                       struct tile_reader **out, struct fo_err *err)
{
    struct tile_reader *r = calloc(1, sizeof(*r));
    if (!r || !(r->sha = fo_sha_create())) {
        free(r);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    r->fetch = fetch;
    r->ctx = ctx;
    r->size = size;
    for (int i = 0; i < READER_CACHE; i++)
        fo_buf_init(&r->cache[i].data, TILE_WIDTH * TILE_BUNDLE_ENTRY_LEN);
    *out = r;
    return FO_OK;
}

void tile_reader_free(struct tile_reader *r)
{
    if (!r)
        return;
    for (int i = 0; i < READER_CACHE; i++)
        fo_buf_release(&r->cache[i].data);
    fo_sha_free(r->sha);
    free(r);
}

uint64_t tile_reader_fetches(const struct tile_reader *r)
{
    return r->fetches;
}

/* The tile (or bundle) n at level, of width w, exactly want bytes long. */
static int get_tile(struct tile_reader *r, int level, uint64_t n, unsigned w,
                    size_t want, const uint8_t **data, struct fo_err *err)
{
    char path[TILE_PATH_MAX];
    int rc = tile_path(level, n, w, path, err);
    if (rc)
        return rc;
    for (int i = 0; i < READER_CACHE; i++)
        if (!strcmp(r->cache[i].path, path)) {
            *data = (const uint8_t *)r->cache[i].data.data;
            return FO_OK;
        }
    struct cached_tile *c = &r->cache[r->next];
    r->next = (r->next + 1) % READER_CACHE;
    c->path[0] = '\0';
    fo_buf_reset(&c->data);
    r->fetches++;
    rc = r->fetch(r->ctx, path, &c->data, err);
    if (rc == FO_E_TOO_LARGE)
        rc = fo_err_set(err, FO_E_VERIFY, "%s: longer than %zu bytes", path,
                        want);
    if (rc)
        return rc;
    if (c->data.len != want)
        return fo_err_set(err, FO_E_VERIFY,
                          "%s: %zu bytes, a tile of width %u has %zu", path,
                          c->data.len, w, want);
    memcpy(c->path, path, sizeof(path));
    *data = (const uint8_t *)c->data.data;
    return FO_OK;
}

/* The subtree hash over the 2^k hashes at h (k levels above them). */
static void fold(struct fo_sha *sha, const uint8_t *h, unsigned k,
                 uint8_t out[TILE_HASH_LEN])
{
    if (k == 0) {
        memcpy(out, h, TILE_HASH_LEN);
        return;
    }
    uint8_t left[TILE_HASH_LEN], right[TILE_HASH_LEN];
    size_t half = (size_t)1 << (k - 1);
    fold(sha, h, k - 1, left);
    fold(sha, h + half * TILE_HASH_LEN, k - 1, right);
    merkle_node_hash(sha, left, right, out);
}

int tile_reader_node(void *ctx, unsigned level, uint64_t index,
                     uint8_t out[TILE_HASH_LEN], struct fo_err *err)
{
    struct tile_reader *r = ctx;
    if (level > 63 || ((index + 1) << level) > r->size ||
        (index + 1) << level >> level != index + 1)
        return fo_err_set(err, FO_E_INVALID,
                          "subtree %u/%llu: not complete in a tree of %llu",
                          level, (unsigned long long)index,
                          (unsigned long long)r->size);
    int tl = (int)(level / TILE_HEIGHT);
    unsigned k = level % TILE_HEIGHT;
    uint64_t first = index << k; /* the first hash at the tile level */
    uint64_t n = first / TILE_WIDTH;
    unsigned w = tile_width(tl, n, r->size);
    const uint8_t *data = NULL;
    int rc = get_tile(r, tl, n, w, (size_t)w * TILE_HASH_LEN, &data, err);
    if (rc)
        return rc;
    fold(r->sha, data + (first % TILE_WIDTH) * TILE_HASH_LEN, k, out);
    return FO_OK;
}

int tile_reader_leaf_data(struct tile_reader *r, uint64_t index,
                          uint8_t out[TILE_HASH_LEN], struct fo_err *err)
{
    if (index >= r->size)
        return fo_err_set(
            err, FO_E_INVALID, "entry %llu: not in a tree of %llu",
            (unsigned long long)index, (unsigned long long)r->size);
    uint64_t n = index / TILE_WIDTH;
    unsigned w = tile_width(0, n, r->size);
    const uint8_t *b = NULL;
    int rc = get_tile(r, TILE_LEVEL_ENTRIES, n, w,
                      (size_t)w * TILE_BUNDLE_ENTRY_LEN, &b, err);
    if (rc)
        return rc;
    const uint8_t *e = b + (index % TILE_WIDTH) * TILE_BUNDLE_ENTRY_LEN;
    /* Every entry of a forum bundle is 32 bytes long. */
    for (unsigned i = 0; i < w; i++)
        if (b[i * TILE_BUNDLE_ENTRY_LEN] != 0 ||
            b[i * TILE_BUNDLE_ENTRY_LEN + 1] != TILE_HASH_LEN)
            return fo_err_set(err, FO_E_VERIFY,
                              "entry bundle %llu: entry %u is not 32 bytes "
                              "long",
                              (unsigned long long)n, i);
    uint8_t leaf[TILE_HASH_LEN], want[TILE_HASH_LEN];
    merkle_leaf_hash(r->sha, e + 2, TILE_HASH_LEN, leaf);
    rc = tile_reader_node(r, 0, index, want, err);
    if (rc)
        return rc;
    if (memcmp(leaf, want, TILE_HASH_LEN) != 0)
        return fo_err_set(err, FO_E_VERIFY,
                          "entry %llu: its bundle entry does not hash to its "
                          "level-0 tile hash",
                          (unsigned long long)index);
    memcpy(out, e + 2, TILE_HASH_LEN);
    return FO_OK;
}
