/* note: C2SP signed notes (c2sp.org/signed-note) with Ed25519 keys, and the
 * C2SP tlog-checkpoint text they carry. Keys, notes and checkpoints are the
 * same bytes Go's golang.org/x/mod/sumdb/note reads and writes.
 *
 * A signed note is a text (non-empty, valid UTF-8, no control characters but
 * newline, ending in a newline), a blank line, and one or more signature
 * lines "— <key name> <base64(4-byte key id || signature)>\n". A key is named
 * (non-empty, valid UTF-8, no Unicode space, no '+', no control character, at
 * most NOTE_NAME_MAX bytes) and identified by its name and a 32-bit key id,
 * the first 4 bytes (big-endian) of SHA-256(name || 0x0A || 0x01 || public
 * key). Every parser here is strict: base64 must be canonical standard
 * base64 with correct padding and no whitespace, and input is taken as
 * (pointer, length) so a NUL byte is an ordinary, rejected, control byte.
 *
 * Errors: FO_E_INVALID for malformed input (with a message saying what),
 * FO_E_VERIFY when a well-formed note does not verify, FO_E_NOMEM, and the
 * fo_buf codes when an output buffer refuses to grow. Outputs are appended
 * to a caller's struct fo_buf, and only on success. Nothing here blocks. */
#ifndef NOTE_H
#define NOTE_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/fo_err.h"

struct fo_buf;

/* The longest key name, and checkpoint origin, in bytes. */
#define NOTE_NAME_MAX 255
/* The largest note note_open reads, and the largest text note_sign signs. */
#define NOTE_MAX_LEN (1024 * 1024)
/* note_open refuses notes with more signature lines than this. */
#define NOTE_MAX_SIGS 100

#define NOTE_ED25519_PUBLIC_LEN 32
#define NOTE_ROOT_LEN 32

/* A private Ed25519 key with its name. Opaque; the seed is wiped on free. */
struct note_signer;
/* A public Ed25519 key with its name. Opaque. */
struct note_verifier;

/* FO_OK when name (len bytes) is a valid key name, else FO_E_INVALID with a
 * message saying why. */
int note_name_check(const char *name, size_t len, struct fo_err *err);

/* Creates a signer for a fresh random Ed25519 key (RAND_priv_bytes) named
 * name (NUL-terminated). *out is set on success; free it with
 * note_signer_free(). */
int note_signer_generate(const char *name, struct note_signer **out,
                         struct fo_err *err);

/* Parses a signer key in Go's text form
 * "PRIVATE+KEY+<name>+<8 lowercase hex key id>+<base64(0x01 || 32-byte
 * seed)>": exactly that, no surrounding whitespace (a caller reading a key
 * file strips its one trailing newline first). The key id must be the one
 * the name and the derived public key give. *out is set on success. */
int note_signer_parse(const char *text, size_t len, struct note_signer **out,
                      struct fo_err *err);

/* Appends the signer key text (the private key!) to out, in the form
 * note_signer_parse() reads, without a newline. The caller owns the secret
 * bytes in out and should wipe them (OPENSSL_cleanse) before releasing. */
int note_signer_format(const struct note_signer *s, struct fo_buf *out,
                       struct fo_err *err);

/* Appends the verifier key text of the signer's public key to out:
 * "<name>+<8 hex key id>+<base64(0x01 || 32-byte public key)>", no
 * newline. This is what `forum ledger key` prints. */
int note_signer_format_verifier(const struct note_signer *s, struct fo_buf *out,
                                struct fo_err *err);

/* Creates the verifier for the signer's public key. *out is set on
 * success; free it with note_verifier_free(). */
int note_signer_verifier(const struct note_signer *s,
                         struct note_verifier **out, struct fo_err *err);

/* The signer's name (owned by s) and key id. */
const char *note_signer_name(const struct note_signer *s);
uint32_t note_signer_id(const struct note_signer *s);

/* Wipes and frees the signer. NULL-safe. */
void note_signer_free(struct note_signer *s);

/* Parses a verifier key "<name>+<8 lowercase hex key id>+<base64(0x01 ||
 * 32-byte public key)>", exactly, with the same rules as
 * note_signer_parse(). *out is set on success. */
int note_verifier_parse(const char *text, size_t len,
                        struct note_verifier **out, struct fo_err *err);

/* Appends the verifier key text to out (no newline); parsing it gives the
 * same key, and a parsed key formats back to the same bytes. */
int note_verifier_format(const struct note_verifier *v, struct fo_buf *out,
                         struct fo_err *err);

/* The verifier's name (owned by v), key id and raw public key. */
const char *note_verifier_name(const struct note_verifier *v);
uint32_t note_verifier_id(const struct note_verifier *v);
void note_verifier_public_key(const struct note_verifier *v,
                              uint8_t out[NOTE_ED25519_PUBLIC_LEN]);

/* Frees the verifier. NULL-safe. */
void note_verifier_free(struct note_verifier *v);

/* Signs text (len bytes, a valid note text: see the top of this file, at
 * most NOTE_MAX_LEN) with s and appends the signed note, the text followed
 * by "\n" and one signature line, to out. Ed25519 is deterministic: the same
 * key and text always give the same bytes. */
int note_sign(const struct note_signer *s, const char *text, size_t len,
              struct fo_buf *out, struct fo_err *err);

/* Opens the signed note msg (len bytes): parses it strictly and verifies
 * it against the n known verifiers. The text is everything before the last
 * blank line; after it come 1 to NOTE_MAX_SIGS signature lines and nothing
 * else. A signature whose key name and key id both match a known verifier
 * must verify (else FO_E_VERIFY naming the key); signatures by other keys
 * are ignored; at least one must be by a known key (else FO_E_VERIFY). A
 * malformed note is FO_E_INVALID. On FO_OK the text (with its final newline)
 * is appended to text. */
int note_open(const char *msg, size_t len,
              const struct note_verifier *const *known, size_t n,
              struct fo_buf *text, struct fo_err *err);

/* A C2SP tlog-checkpoint: the text "<origin>\n<size>\n<base64 root>\n",
 * optionally followed by non-empty extension lines, which are not kept. */
struct note_checkpoint {
    char origin[NOTE_NAME_MAX + 1]; /* NUL-terminated, non-empty */
    uint64_t size;                  /* tree size, in leaves */
    uint8_t root[NOTE_ROOT_LEN];    /* RFC 6962 root at that size */
};

/* Appends the checkpoint text of c to out. FO_E_INVALID when the origin is
 * empty, too long, not valid UTF-8 or holds a control character. */
int note_checkpoint_format(const struct note_checkpoint *c, struct fo_buf *out,
                           struct fo_err *err);

/* Parses a checkpoint text (as note_open() gives it): origin non-empty and
 * at most NOTE_NAME_MAX bytes, size in decimal with no sign or leading zero
 * (but "0") and below 2^64, root canonical base64 of exactly 32 bytes, then
 * any number of non-empty extension lines (ignored); every line ends in a
 * newline. Fills *out on success. */
int note_checkpoint_parse(const char *text, size_t len,
                          struct note_checkpoint *out, struct fo_err *err);

/* Formats c and signs it with s, appending the signed note to out. The key
 * name should equal the origin; this is not enforced here. */
int note_checkpoint_sign(const struct note_signer *s,
                         const struct note_checkpoint *c, struct fo_buf *out,
                         struct fo_err *err);

/* The strict base64 of this file, for the other signed-note formats
 * (cosignatures, ledger/cosig.h): encode appends to out; decode is
 * note_open's strict reader (canonical, padded, no whitespace) and returns
 * 0 and *outlen, or -1. */
int note_b64_encode(struct fo_buf *out, const uint8_t *in, size_t len);
int note_b64_decode(const char *src, size_t len, uint8_t *out, size_t cap,
                    size_t *outlen);

/* The key text of the signed-note formats, shared with the cosignatures
 * (ledger/cosig.h), which differ only in the algorithm byte alg (0x01
 * Ed25519 notes, 0x04 cosignature/v1). note_key_id is the key id:
 * SHA-256(name || "\n" || alg || pub)[:4], big-endian. note_key_parse
 * splits "<name>+<8 hex>+<base64(alg || 32 bytes)>" (the verifier form,
 * and the signer form after its "PRIVATE+KEY+"): checks the name, reads
 * the id, and decodes the key to exactly alg followed by 32 bytes into key;
 * what prefixes every message, alg_name names alg in them. */
uint32_t note_key_id(const char *name, size_t name_len, uint8_t alg,
                     const uint8_t pub[NOTE_ED25519_PUBLIC_LEN]);
int note_key_parse(const char *p, size_t len, const char *what, uint8_t alg,
                   const char *alg_name, size_t *name_len, uint32_t *id,
                   uint8_t key[1 + NOTE_ED25519_PUBLIC_LEN],
                   struct fo_err *err);

/* Opens a signed checkpoint with the one verifier v and parses it, and also
 * requires that the origin equal v's key name (FO_E_VERIFY otherwise): the
 * check `forum ledger verify --checkpoint` wants. Fills *out on success. */
int note_checkpoint_open(const char *msg, size_t len,
                         const struct note_verifier *v,
                         struct note_checkpoint *out, struct fo_err *err);

#endif
