/* tlog_witness: the daemon as a witness of other logs (C2SP tlog-witness):
 * the logs it witnesses (forum.json "witness_of": their verifier keys),
 * its key (DIR/witness.key, cosignature/v1, made on first use), and its
 * state, DIR/witness-state.json: per log origin the size, root and note of
 * the latest checkpoint it cosigned, replaced atomically (temp file, fsync,
 * rename, fsync of the dir) before any cosignature leaves. It never
 * cosigns two checkpoints of one log that are not consistent with each
 * other, nor a smaller tree after a larger one, across restarts too.
 * Blocking (fsync): the daemon calls it off the loop. docs/LEDGER.md,
 * "Witnessing by protocol". */
#ifndef DAEMON_TLOG_WITNESS_H
#define DAEMON_TLOG_WITNESS_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"

#define TLOG_WITNESS_KEY_FILE "witness.key"
#define TLOG_WITNESS_VKEY_FILE "witness.vkey"
#define TLOG_WITNESS_STATE_FILE "witness-state.json"
/* Refused checkpoints that contradict one cosigned: the evidence, kept. */
#define TLOG_WITNESS_FORKS_FILE "witness-forks.txt"
#define TLOG_WITNESS_LOGS_MAX 64
/* The largest add-checkpoint request body taken. */
#define TLOG_WITNESS_BODY_MAX (64 * 1024)

struct tlog_witness;

/* Checks forum.json "witness_of": an array of 1..TLOG_WITNESS_LOGS_MAX log
 * verifier keys (strings, "<name>+<id>+<base64(0x01 || key)>"), none
 * twice. FO_E_INVALID naming the item. */
int tlog_witness_config_check(const cJSON *logs, struct fo_err *err);

/* Opens the witness of the data dir dir for the logs of "witness_of":
 * reads DIR/witness.key (making it, 0600, and DIR/witness.vkey when absent,
 * with name name) and DIR/witness-state.json (absent: nothing cosigned
 * yet). A state file that does not parse is FO_E_CORRUPT: a witness that
 * forgot what it cosigned must not go on. May block on fsync. */
int tlog_witness_open(const char *dir, const cJSON *logs, const char *name,
                      struct tlog_witness **out, struct fo_err *err);
void tlog_witness_free(struct tlog_witness *w);

/* The witness's verifier key text (no newline). */
const char *tlog_witness_vkey(const struct tlog_witness *w);

/* The answer to one add-checkpoint request. */
struct tlog_witness_reply {
    int status;         /* 200, 400, 403, 404, 409, 422, 500 */
    const char *ctype;  /* its Content-Type */
    struct fo_buf body; /* the cosignature lines, the size line, or why */
    int fork;           /* 1 when it contradicts a cosigned checkpoint */
    char log[512];      /* a line for the daemon's log, or "" */
};

/* Answers the add-checkpoint request body (len bytes): "old N\n", up to
 * 63 base64 consistency proof lines, an empty line, then the signed
 * checkpoint. Checks the signature (404 unknown origin, 403 no valid
 * signature by the log), the old size against the size it cosigned (409
 * with "<size>\n" as text/x.tlog.size), the consistency proof (422), and
 * on success stores the new state (durably) and answers 200 with its
 * cosignature line, timestamped now_s. Release r->body with
 * fo_buf_release. */
void tlog_witness_add(struct tlog_witness *w, const char *body, size_t len,
                      uint64_t now_s, struct tlog_witness_reply *r);

#endif
