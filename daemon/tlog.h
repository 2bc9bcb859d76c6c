/* tlog: the daemon's public log (C2SP tlog-tiles) and its witnessing (C2SP
 * tlog-witness), kept current without a cron.
 *
 * One thread of its own, with its own ledger handle, does the slow part:
 * after each checkpoint the committer signs it writes the new tiles and
 * entry bundles under DIR/tlog (ledger_tiles_update: full tiles once, as
 * they complete), then DIR/tlog/checkpoint, and only then serves that
 * checkpoint; it makes the add-checkpoint requests (with their consistency
 * proofs), stores the cosignatures witnesses return, and answers the
 * add-checkpoint requests of the logs this daemon witnesses
 * (daemon/tlog_witness.h). The loop thread serves: the checkpoint from
 * memory, tiles from a cache in memory or from DIR/tlog (never from the
 * database), and sends the submissions with the HTTP client (daemon/httpc.h).
 * docs/LEDGER.md, "The public log" and "Witnessing by protocol". */
#ifndef DAEMON_TLOG_H
#define DAEMON_TLOG_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>
#include <event2/dns.h>
#include <event2/event.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"

#define TLOG_DIR "tlog" /* under the data dir */
#define TLOG_WITNESSES_MAX 16

struct daemon_tlog;

struct daemon_tlog_config {
    const char *dir; /* the data dir */
    struct event_base *base;
    struct evdns_base *dns;   /* for witness host names; may be NULL */
    int open;                 /* /tlog/ without the token */
    int hashes_only;          /* entry bundles withheld */
    const cJSON *witnesses;   /* forum.json "witnesses", or NULL */
    const cJSON *witness_of;  /* forum.json "witness_of", or NULL */
    const char *witness_name; /* a new witness key's name; NULL: derived */
    int timeout_ms;           /* per submission; 0: 10000 */
    void (*log)(void *hook, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    void *log_hook;
};

/* Checks forum.json's "witnesses" ([{"url": "http://...", "vkey":
 * "<witness verifier key>"}], 1..TLOG_WITNESSES_MAX, no key twice) and
 * "witness_of" (tlog_witness_config_check); either may be NULL.
 * FO_E_INVALID naming the item. */
int daemon_tlog_config_check(const cJSON *witnesses, const cJSON *witness_of,
                             struct fo_err *err);

/* Starts the thread (it opens its own ledger handle on cfg->dir, names the
 * configured witnesses in DIR/witnesses, and publishes the latest signed
 * checkpoint at once). The config is copied; its cJSON is read here only.
 * Loop thread. FO_E_INVALID for a bad configuration, FO_E_CORRUPT for a
 * damaged witness state. */
int daemon_tlog_create(const struct daemon_tlog_config *cfg,
                       struct daemon_tlog **out, struct fo_err *err);

/* A checkpoint may have been signed: the thread looks now. Any thread;
 * NULL-safe. (It also looks every second on its own.) */
void daemon_tlog_kick(struct daemon_tlog *t);

/* What the HTTP side asks. Loop thread. */
int daemon_tlog_open(const struct daemon_tlog *t); /* public */
int daemon_tlog_hashes_only(const struct daemon_tlog *t);
int daemon_tlog_is_witness(const struct daemon_tlog *t);

/* The served checkpoint (with its cosignatures) appended to out.
 * FO_E_NOT_FOUND before the first is published. */
int daemon_tlog_checkpoint(struct daemon_tlog *t, struct fo_buf *out,
                           struct fo_err *err);

/* The tile or entry bundle at rel ("tile/<L>/<N>[.p/<W>]" or
 * "tile/entries/<N>[.p/<W>]", the canonical C2SP form only) appended to
 * out, from memory or DIR/tlog. FO_E_NOT_FOUND when it is not a tile path
 * or not published (yet); bundles are FO_E_NOT_FOUND in hashes-only mode
 * (the message says so). */
int daemon_tlog_tile(struct daemon_tlog *t, const char *rel, struct fo_buf *out,
                     struct fo_err *err);

/* An add-checkpoint request for the witness: body (len bytes, copied) is
 * answered on the thread, then done(arg, status, ctype, body, len) runs
 * on the loop thread (body malloc'd, the callee's). FO_E_NOT_FOUND when
 * this daemon witnesses no log. */
typedef void (*daemon_tlog_reply_fn)(void *arg, int status, const char *ctype,
                                     char *body, size_t len);
int daemon_tlog_witness_submit(struct daemon_tlog *t, const char *body,
                               size_t len, daemon_tlog_reply_fn done, void *arg,
                               struct fo_err *err);

/* Prometheus lines (forum_tlog_*) appended to out. Loop thread. */
int daemon_tlog_metrics(struct daemon_tlog *t, struct fo_buf *out);

/* Stops the thread (finishing the job in hand), cancels the submissions
 * in flight, and frees. Requests still waiting for the witness get 503.
 * Loop thread; NULL-safe. */
void daemon_tlog_free(struct daemon_tlog *t);

#endif
