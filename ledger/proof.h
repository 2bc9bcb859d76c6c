/* proof: what the ledger proves to others. Tree roots at any size,
 * RFC 6962 inclusion and consistency proofs in the JSON shapes of
 * docs/LEDGER.md, C2SP checkpoints signed with the ledger's Ed25519 key,
 * verification against a signed checkpoint, and self-contained bundles (one
 * entry, its body, a checkpoint and the proof that ties them) anyone can check.
 */
#ifndef LEDGER_PROOF_H
#define LEDGER_PROOF_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_err.h"
#include "ledger/ledger.h"
#include "ledger/merkle.h"

/* The key files in the ledger dir: the private signer key (mode 0600, Go's
 * "PRIVATE+KEY+<name>+<id>+<base64>" text and a newline) and the public
 * verifier key ("<name>+<id>+<base64>" and a newline). */
#define LEDGER_KEY_FILE "checkpoint.key"
#define LEDGER_VKEY_FILE "checkpoint.vkey"

/* ---- roots and proofs ------------------------------------------------- */

/* The root of the tree of the first `size` entries (0 <= size <= count)
 * into out. O(log size) storage reads in one read snapshot. FO_E_INVALID
 * when size is negative or beyond the log; FO_E_CORRUPT when a stored node
 * is missing; FO_E_IO. */
int ledger_root(struct ledger *l, int64_t size, uint8_t out[32],
                struct fo_err *err);

/* The current tree head: *size = the entry count and its root, read in one
 * snapshot. */
int ledger_tree_head(struct ledger *l, int64_t *size, uint8_t root[32],
                     struct fo_err *err);

/* An inclusion proof (RFC 9162 §2.1.3) with everything a verifier needs. */
struct ledger_inclusion {
    int64_t index, size;
    uint8_t leaf_hash[32]; /* SHA-256(0x00 || entry hash) */
    uint8_t root[32];      /* the tree root at size */
    size_t path_len;
    uint8_t path[MERKLE_MAX_PATH][32];
};

/* A consistency proof (RFC 9162 §2.1.4) between two tree sizes. */
struct ledger_consistency {
    int64_t first, second;
    uint8_t root1[32], root2[32];
    size_t path_len;
    uint8_t path[MERKLE_MAX_PATH][32];
};

/* Proves that entry index is in the tree of size entries (size < 0: the
 * current size), in one read snapshot. FO_E_INVALID when size is beyond the
 * log or index >= size (the message says which). */
int ledger_prove_inclusion(struct ledger *l, int64_t index, int64_t size,
                           struct ledger_inclusion *out, struct fo_err *err);

/* Proves that the tree of `first` entries is a prefix of the tree of
 * `second` (second < 0: the current size), in one read snapshot.
 * FO_E_INVALID for first 0 (a proof from the empty tree proves nothing:
 * refused), first > second, or second beyond the log. */
int ledger_prove_consistency(struct ledger *l, int64_t first, int64_t second,
                             struct ledger_consistency *out,
                             struct fo_err *err);

/* The JSON shapes of docs/LEDGER.md: {"index", "size", "leaf_hash", "root",
 * "path": [hex...]} and {"first", "second", "root1", "root2", "path"}.
 * NULL when out of memory. The caller frees with cJSON_Delete. */
cJSON *ledger_inclusion_json(const struct ledger_inclusion *p);
cJSON *ledger_consistency_json(const struct ledger_consistency *p);

/* Reads an inclusion proof object back. FO_E_INVALID naming the field. */
int ledger_inclusion_from_json(const cJSON *obj, struct ledger_inclusion *p,
                               struct fo_err *err);

/* ---- signed checkpoints ----------------------------------------------- */

/* A signed checkpoint as stored. note is malloc'd: the whole signed note
 * text. Release with ledger_checkpoint_release. */
struct ledger_checkpoint {
    int64_t size;
    uint8_t root[32];
    char *note;
};

/* Frees c->note (NULL-safe, idempotent). */
void ledger_checkpoint_release(struct ledger_checkpoint *c);

/* The verifier key text (no newline) into *out (malloc'd; the caller
 * frees). The key pair is created on first use in the ledger dir when the
 * ledger is writable (atomically: two processes never make two keys);
 * FO_E_NOT_FOUND when there is none and the ledger is read-only. May block
 * on fsync when it creates the key. */
int ledger_verifier_key(struct ledger *l, char **out, struct fo_err *err);

/* Signs a C2SP checkpoint of the tree at size entries (size < 0: the
 * current size) with the ledger key (created on first use) and stores it,
 * in one write transaction. Signing a size that was signed before returns
 * the stored checkpoint unchanged. FO_E_INVALID when size is beyond the log
 * or the ledger is read-only. Blocks on the write lock and fsync. */
int ledger_checkpoint_sign(struct ledger *l, int64_t size,
                           struct ledger_checkpoint *out, struct fo_err *err);

/* The latest (largest) stored signed checkpoint. FO_E_NOT_FOUND when none
 * was signed yet. */
int ledger_checkpoint_latest(struct ledger *l, struct ledger_checkpoint *out,
                             struct fo_err *err);

/* The latest signed checkpoint, or, when none exists and the ledger is
 * writable, a fresh one signed at the current size (what GET /checkpoint
 * serves). FO_E_NOT_FOUND when none exists on a read-only ledger. */
int ledger_checkpoint_get(struct ledger *l, struct ledger_checkpoint *out,
                          struct fo_err *err);

/* {"checkpoint": root hex, "size", "root": root hex, "note": text or null}.
 * NULL when out of memory. */
cJSON *ledger_checkpoint_json(const struct ledger_checkpoint *c);

/* ---- verify against a checkpoint --------------------------------------- */

/* The fixed reasons a checkpoint check fails with (snake_case, on the wire
 * and in docs/LEDGER.md): "bad_signature" (not signed by the given key, or
 * its origin is not the key name), "origin_mismatch" (a checkpoint of
 * another log), "checkpoint_beyond_log" (the log is shorter than the
 * checkpoint: truncated), "checkpoint_mismatch" (the log's root at that size
 * differs: rewritten), "stored_checkpoint_mismatch" (a checkpoint the
 * ledger signed earlier no longer matches the tree). */
struct ledger_checkpoint_result {
    struct ledger_verify_result base; /* the normal verify */
    int ok;                           /* base.ok and the checkpoint holds */
    const char *reason;               /* NULL when ok */
    const char *cp_reason;            /* the checkpoint's own verdict */
    char detail[FO_ERR_MSG_MAX];      /* a sentence on what failed */
    int64_t size;                     /* the checkpoint's size (-1 unread) */
    uint8_t root[32];                 /* the checkpoint's root */
    int64_t stored_checked;           /* stored checkpoints compared */
    int64_t first_bad_checkpoint;     /* size of the first bad one, -1 */
};

/* Runs ledger_verify (flags as there), then checks the signed note (len
 * bytes) with the verifier key text vkey (vkey_len bytes, no newline), that
 * its size is within the log and that the log's root at that size equals
 * the checkpoint's root, and that every checkpoint the ledger stored
 * matches the tree at its size. Returns FO_OK when the check ran (res->ok
 * tells), FO_E_INVALID for a malformed key or note (bad input), or an I/O
 * error. */
int ledger_verify_checkpoint(struct ledger *l, unsigned flags, const char *note,
                             size_t len, const char *vkey, size_t vkey_len,
                             ledger_progress_fn progress, void *pctx,
                             struct ledger_checkpoint_result *res,
                             struct fo_err *err);

/* The verify object of docs/LEDGER.md with "ok" and "reason" covering the
 * checkpoint too, plus "checkpoint": {"ok", "reason", "size", "root",
 * "detail", "stored_checked"}. NULL when out of memory. */
cJSON *ledger_checkpoint_result_json(const struct ledger_checkpoint_result *r);

/* ---- bundles ------------------------------------------------------------ */

/* A self-contained proof of one entry: {"entry": the served entry with its
 * hash, "body": the JSON body or null when redacted, "checkpoint": the
 * signed note text, "proof": the inclusion proof at the checkpoint's size,
 * "vkey": the verifier key text (informational)}. Uses the latest signed
 * checkpoint when it covers seq, else signs a fresh one (so the ledger must
 * be writable then). FO_E_NOT_FOUND when there is no entry seq. */
int ledger_bundle(struct ledger *l, int64_t seq, cJSON **out,
                  struct fo_err *err);

/* Checks a bundle with no ledger: the entry hash recomputed from its
 * fields, the body against the payload hash (when present), the proof's
 * leaf, size and root against the entry and the checkpoint, the inclusion
 * proof, and the checkpoint's signature by the key vkey (vkey_len bytes of
 * verifier key text: the caller's, never the bundle's own). FO_OK when all
 * hold; FO_E_VERIFY with a message starting with what failed ("entry hash",
 * "body", "proof", "root", "size", "signature"); FO_E_INVALID for a bundle
 * or key that is malformed. */
int ledger_bundle_verify(const cJSON *bundle, const char *vkey, size_t vkey_len,
                         struct fo_err *err);

#endif
