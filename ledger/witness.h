/* witness: witness cosignatures on the ledger's checkpoints (ledger/cosig.h
 * is the format). The witnesses a ledger accepts are named in the data dir,
 * in DIR/witnesses: one witness verifier key
 * ("<name>+<id>+<base64(0x04 || public key)>") per line; blank lines and
 * lines starting with '#' are ignored. Accepted cosignatures are stored
 * with the checkpoint they sign and served appended to it. */
#ifndef LEDGER_WITNESS_H
#define LEDGER_WITNESS_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/cosig.h"
#include "ledger/fo_err.h"
#include "ledger/ledger.h"

struct fo_buf;

#define LEDGER_WITNESSES_FILE "witnesses"
#define LEDGER_WITNESSES_MAX 64

/* The witnesses the ledger accepts, from DIR/witnesses (none when the file
 * is absent): *out is a malloc'd array of *n verifiers; free it with
 * ledger_witnesses_free. FO_E_INVALID naming the line for a bad key, a key
 * given twice or more than LEDGER_WITNESSES_MAX keys. */
int ledger_witnesses(struct ledger *l, struct cosig_verifier ***out, size_t *n,
                     struct fo_err *err);
void ledger_witnesses_free(struct cosig_verifier **w, size_t n);

/* Adds a witness verifier key (checked) to DIR/witnesses, atomically
 * (temp file and rename). FO_E_EXISTS when the key is there already. */
int ledger_witness_add(struct ledger *l, const char *vkey, size_t len,
                       struct fo_err *err);

/* Accepts cosignatures: note (len bytes) is a checkpoint this ledger signed
 * and stored, with the log's signature line and one or more cosignature
 * lines after it. The text must be byte for byte the stored checkpoint's
 * and its log signature must verify; every other line must be a valid
 * cosignature/v1 by a witness of DIR/witnesses over that text, with a
 * timestamp at most 10 minutes in the future. Anything else refuses the
 * whole note: FO_E_VERIFY for a line by an unknown key ("unknown witness
 * key"), a cosignature that does not verify (one made over another
 * checkpoint), or a checkpoint the ledger never signed; FO_E_INVALID for
 * a malformed note. Stores them in one write transaction (blocks on the
 * write lock and fsync) and gives {"size", "root", "accepted": [{"witness",
 * "key_id", "timestamp"}], "cosignatures": count now stored for that
 * checkpoint, "note": the checkpoint with every stored cosignature}. */
int ledger_cosign(struct ledger *l, const char *note, size_t len, cJSON **out,
                  struct fo_err *err);

/* The stored checkpoint of size (size < 0: the latest) with its stored
 * cosignature lines appended (sorted by witness key), into out.
 * *count (may be NULL) is how many were appended. FO_E_NOT_FOUND when no
 * checkpoint of that size was signed. */
int ledger_checkpoint_cosigned(struct ledger *l, int64_t size,
                               struct fo_buf *out, struct fo_err *err);
int ledger_checkpoint_cosigned_n(struct ledger *l, int64_t size,
                                 struct fo_buf *out, size_t *count,
                                 struct fo_err *err);

#endif
