/* cosig: C2SP tlog-cosignature (c2sp.org/tlog-cosignature) Ed25519
 * cosignatures, "cosignature/v1": a witness's statement that, at a time, a
 * checkpoint was the largest consistent tree head it had seen of that log.
 *
 * A cosignature is one more signature line on the checkpoint's signed note,
 *
 *     — <witness name> base64(key id || u64 timestamp || Ed25519 signature)
 *
 * where the key id is the first 4 bytes of SHA-256(name || 0x0A || 0x04 ||
 * public key), the timestamp is POSIX seconds, big-endian, and the signature
 * is over "cosignature/v1\ntime <timestamp>\n" followed by the checkpoint's
 * note text (its lines up to and including the last newline before the
 * blank line). Keys use the signed-note text forms with algorithm byte 0x04:
 * verifier "<name>+<8 hex id>+<base64(0x04 || public key)>", signer
 * "PRIVATE+KEY+<name>+<8 hex id>+<base64(0x04 || seed)>". Parsers are as
 * strict as note.h's. Errors as in note.h: FO_E_INVALID malformed,
 * FO_E_VERIFY does not verify. Nothing here blocks. */
#ifndef LEDGER_COSIG_H
#define LEDGER_COSIG_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/fo_err.h"
#include "ledger/note.h"

struct fo_buf;

#define COSIG_ALG_ED25519 0x04
/* The largest timestamp the format allows (2^63 - 1). */
#define COSIG_TIME_MAX INT64_MAX

struct cosig_signer;   /* a witness's private key and name */
struct cosig_verifier; /* a witness's public key and name */

/* A fresh random witness key named name. */
int cosig_signer_generate(const char *name, struct cosig_signer **out,
                          struct fo_err *err);
/* Parses "PRIVATE+KEY+<name>+<id>+<base64(0x04 || seed)>" exactly. */
int cosig_signer_parse(const char *text, size_t len, struct cosig_signer **out,
                       struct fo_err *err);
/* The signer key text (secret; wipe it) and the verifier key text, no
 * newline, appended to out. */
int cosig_signer_format(const struct cosig_signer *s, struct fo_buf *out,
                        struct fo_err *err);
int cosig_signer_format_verifier(const struct cosig_signer *s,
                                 struct fo_buf *out, struct fo_err *err);
const char *cosig_signer_name(const struct cosig_signer *s);
void cosig_signer_free(struct cosig_signer *s);

/* Parses "<name>+<id>+<base64(0x04 || public key)>" exactly. */
int cosig_verifier_parse(const char *text, size_t len,
                         struct cosig_verifier **out, struct fo_err *err);
int cosig_verifier_format(const struct cosig_verifier *v, struct fo_buf *out,
                          struct fo_err *err);
const char *cosig_verifier_name(const struct cosig_verifier *v);
uint32_t cosig_verifier_id(const struct cosig_verifier *v);
void cosig_verifier_free(struct cosig_verifier *v);

/* The cosigned message for text (len bytes, a note text ending in a
 * newline) at time ts, appended to out. */
int cosig_message(const char *text, size_t len, uint64_t ts, struct fo_buf *out,
                  struct fo_err *err);

/* Cosigns the note text (len bytes) at time ts (at most COSIG_TIME_MAX) and
 * appends the signature line, with its newline, to out. Deterministic. */
int cosig_sign(const struct cosig_signer *s, const char *text, size_t len,
               uint64_t ts, struct fo_buf *out, struct fo_err *err);

/* A signed note taken apart, without verifying anything: text_len bytes of
 * text (from the start of the note, with its last newline), then n
 * signature lines, each at msg + line_off[i], line_len[i] bytes without
 * its newline, whose key name is name_len[i] bytes after the dash and
 * whose decoded signature (key id first) is not kept. Strict as
 * note_open. */
struct cosig_lines {
    size_t text_len;
    size_t n;
    size_t line_off[NOTE_MAX_SIGS];
    size_t line_len[NOTE_MAX_SIGS];
};
int cosig_split(const char *msg, size_t len, struct cosig_lines *out,
                struct fo_err *err);

/* Checks one signature line (line_len bytes, no newline) against witness
 * v over text: FO_E_NOT_FOUND when the line is not by v (another name or
 * key id), FO_E_VERIFY when it is by v but does not verify (or is not a
 * cosignature/v1: wrong length), FO_OK with *ts when it holds. */
int cosig_verify_line(const struct cosig_verifier *v, const char *text,
                      size_t text_len, const char *line, size_t line_len,
                      uint64_t *ts, struct fo_err *err);

/* The witnesses of a note: for each of the n witnesses, whether the note
 * (msg, len bytes; a whole signed note) carries a valid cosignature by it
 * (ok[i], ts[i]). *valid counts them. FO_E_VERIFY when a line by a named
 * witness does not verify (a forged or damaged cosignature is never
 * skipped silently), FO_E_INVALID for a malformed note. */
int cosig_check_note(const char *msg, size_t len,
                     const struct cosig_verifier *const *w, size_t n, int *ok,
                     uint64_t *ts, size_t *valid, struct fo_err *err);

#endif
