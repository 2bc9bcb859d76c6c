/* tiles: the log as C2SP tlog-tiles (c2sp.org/tlog-tiles), static files any
 * web server or CDN can serve: tile/<L>/<N>[.p/<W>] (Merkle tree hashes,
 * 256 to a full tile), tile/entries/<N>[.p/<W>] (entry bundles) and the
 * signed checkpoint. A writer over a ledger (or any leaf source, for tests),
 * and a reader that answers merkle_node_fn calls from fetched tiles alone,
 * so proofs can be made and checked with no database.
 *
 * Forum's leaf data is the 32-byte entry hash (the leaf =
 * SHA-256(0x00 || entry_hash)), so an entry bundle holds, per entry, the
 * big-endian uint16 length 32 and the 32 raw bytes of the entry hash:
 * hashed as an RFC 6962 leaf, each gives the level-0 tile hash, as the spec
 * requires. docs/LEDGER.md, "Static tiles". */
#ifndef LEDGER_TILES_H
#define LEDGER_TILES_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/fo_err.h"
#include "ledger/ledger.h"
#include "ledger/merkle.h"

struct fo_buf;

#define TILE_HEIGHT 8
#define TILE_WIDTH 256 /* hashes (or entries) in a full tile */
#define TILE_HASH_LEN 32
/* One entry of a bundle: uint16 length, then the 32-byte entry hash. */
#define TILE_BUNDLE_ENTRY_LEN (2 + TILE_HASH_LEN)
/* The level that names entry bundles in tile_path(). */
#define TILE_LEVEL_ENTRIES (-1)
/* Longest path tile_path() writes, with its NUL. */
#define TILE_PATH_MAX 96

/* The path of a tile relative to the log's prefix: "tile/<L>/<N>" with N in
 * 3-digit groups, all but the last prefixed "x" (1234067 is
 * "x001/x234/067"), and ".p/<W>" when 0 < w < 256 (w 0 or 256: a full
 * tile); level TILE_LEVEL_ENTRIES gives "tile/entries/...". FO_E_INVALID
 * for a level outside -1..63 or w > 256. */
int tile_path(int level, uint64_t n, unsigned w, char out[TILE_PATH_MAX],
              struct fo_err *err);

/* The width of tile n at level (>= 0) in a tree of size leaves: 256 for a
 * full tile, 1..255 for the partial one, 0 when the tree has no such
 * tile. */
unsigned tile_width(int level, uint64_t n, uint64_t size);

/* ---- writing ------------------------------------------------------------ */

/* Fills data[0..n) with the leaf data (entry hashes) of leaves start ..
 * start + n - 1. */
typedef int (*tile_leaves_fn)(void *ctx, uint64_t start, size_t n,
                              uint8_t (*data)[TILE_HASH_LEN],
                              struct fo_err *err);

/* Where the tiles come from: leaf data, and complete subtree hashes at
 * levels 8, 16, ... (node is called with level = 8 * L). */
struct tile_source {
    tile_leaves_fn leaves;
    merkle_node_fn node;
    void *ctx;
};

struct tiles_stats {
    uint64_t size;   /* the tree size written */
    int64_t written; /* tiles and bundles written */
    int64_t kept;    /* already there with the right length: not rewritten */
};

/* Writes every tile and entry bundle of the tree of size leaves under dir
 * (created as needed). A file already there with the right length is kept
 * (full tiles never change; a partial tile of a given width neither), so a
 * re-run writes only what is new. Each file is written to a temp name and
 * renamed into place: a reader never sees half a tile. Does not write the
 * checkpoint. FO_E_IO naming the file on failure. */
int tiles_write(const char *dir, uint64_t size, const struct tile_source *src,
                struct tiles_stats *st, struct fo_err *err);

/* Writes rel (a path under dir, directories made as needed) holding len
 * bytes of data, atomically (temp file and rename). */
int tiles_put_file(const char *dir, const char *rel, const void *data,
                   size_t len, struct fo_err *err);

/* Writes the tiles and entry bundles of the ledger's tree at size (at most
 * its entry count) under dir, as tiles_write, in one read snapshot: no
 * checkpoint is signed or written. What the daemon's public log (GET
 * /tlog/) writes after each checkpoint. */
int ledger_tiles_update(struct ledger *l, const char *dir, uint64_t size,
                        struct tiles_stats *st, struct fo_err *err);

/* The ledger's tiles: signs a checkpoint at the current size (or takes the
 * stored one of that size), writes the tiles of that size under dir, then
 * dir/checkpoint (the signed note, with any stored witness cosignatures
 * appended), last, so a reader that sees a checkpoint finds its tiles. A
 * dir holding the checkpoint of another log, or of a history this ledger's
 * tree does not extend, is refused (FO_E_INVALID) before anything is
 * written. The ledger must be writable (the checkpoint is stored). */
int ledger_tiles_write(struct ledger *l, const char *dir,
                       struct tiles_stats *st, struct fo_err *err);

/* ---- reading ------------------------------------------------------------ */

/* Appends the resource at path (relative to the log's prefix) to out.
 * FO_E_NOT_FOUND when the source has no such resource. */
typedef int (*tile_fetch_fn)(void *ctx, const char *path, struct fo_buf *out,
                             struct fo_err *err);

struct tile_reader;

/* A reader of the tiles of a tree of size leaves (the size of a checkpoint
 * the caller has verified). Tiles are fetched on demand and kept. */
int tile_reader_create(tile_fetch_fn fetch, void *ctx, uint64_t size,
                       struct tile_reader **out, struct fo_err *err);
void tile_reader_free(struct tile_reader *r);

/* A merkle_node_fn (ctx: the reader): the hash of complete subtree (level,
 * index) of the tree, from the one tile that holds its descendants at the
 * tile level below it. FO_E_VERIFY when a fetched tile has the wrong length
 * for its width, FO_E_NOT_FOUND when it is missing, FO_E_INVALID for a
 * subtree that is not complete in the tree. Nothing fetched is trusted:
 * a caller checks what it derives against a signed root. */
int tile_reader_node(void *r, unsigned level, uint64_t index,
                     uint8_t out[TILE_HASH_LEN], struct fo_err *err);

/* The leaf data (entry hash) of leaf index, from its entry bundle, checked
 * against the level-0 tile (FO_E_VERIFY when it does not hash to it). */
int tile_reader_leaf_data(struct tile_reader *r, uint64_t index,
                          uint8_t out[TILE_HASH_LEN], struct fo_err *err);

/* How many resources the reader fetched. */
uint64_t tile_reader_fetches(const struct tile_reader *r);

#endif
