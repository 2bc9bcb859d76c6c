/* events: the live stream of new ledger entries behind GET /events.
 *
 * One tailer on the loop thread follows the ledger's head: woken at once
 * by surf_events_notify (the committer calls it after each transaction)
 * and, as a fallback for writers it does not hear from (another process,
 * the run engine's own handle), by a poll of the head every
 * SURF_EVENTS_POLL_MS while anyone listens. It holds no ledger handle:
 * every read (the head, the new entries, the pages of a subscriber behind
 * the ring) is posted to a thread with a handle of its own (the reader:
 * the HTTP surface's workers), one read at a time, and the loop only
 * frames and writes what came back. Each new entry is read and formatted
 * once into a ring of recent events, its run worked out once;
 * subscribers are served from the ring, and one that is further behind
 * (resuming from an old Last-Event-ID) gets pages read for it until it
 * catches up. The append path pays one event_active per transaction,
 * whatever the number of subscribers.
 *
 * The transport (http_stream.c) owns the connections: it gives each
 * subscriber a sink to write to and says when a blocked one may be written
 * again. */
#ifndef SURF_EVENTS_H
#define SURF_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "ledger/fo_err.h"
#include "ledger/ledger.h"

#define SURF_EVENTS_POLL_MS 200
#define SURF_EVENTS_KINDS_MAX 16
/* Output held for a subscriber before it is paused (until written). */
#define SURF_EVENTS_HIGH (256 * 1024)

struct surf_events;
struct surf_events_sub;

/* What a subscriber asked for. */
struct surf_events_filter {
    int64_t run;   /* only the entries of this run (-1: all) */
    int64_t start; /* the first seq to consider (-1: the head) */
    int nkinds;    /* only entries of these kinds (0: all) */
    char kinds[SURF_EVENTS_KINDS_MAX][LEDGER_KIND_MAX + 1];
};

struct surf_events_sink {
    /* Writes data (whole SSE events); non-zero when the subscriber is
     * gone. */
    int (*write)(void *arg, const char *data, size_t len);
    /* Bytes written but not yet sent to the peer. */
    size_t (*pending)(void *arg);
    /* The stream cannot go on (the ledger cannot be read, a write
     * failed): the transport ends it and unsubscribes. Called from the
     * events module's own callbacks, never from inside surf_events_*. */
    void (*close)(void *arg);
};

/* Where the tailer's reads run. post runs read(arg, l) on a thread with
 * a ledger handle of its own (l NULL when that thread has none), then
 * done(arg) on the loop thread; non-zero when it cannot (then neither is
 * called). */
struct surf_events_reader {
    int (*post)(void *hook, void (*read)(void *arg, struct ledger *l),
                void (*done)(void *arg), void *arg);
    void *hook;
};

int surf_events_create(struct event_base *base,
                       const struct surf_events_reader *rd, int keepalive_s,
                       struct surf_events **out, struct fo_err *err);

/* Reads a filter from a URL query (run=N, kind=a,b, from=SEQ) and the
 * Last-Event-ID header (resume after that seq; wins over from). Unknown
 * parameters, a kind forum never writes and the ledger does not hold, a
 * run that is not a run's request: FO_E_INVALID (400), FO_E_NOT_A_RUN.
 * Reads l (a run's request, the kinds held): any thread owning l, off the
 * loop (the HTTP surface calls it on a worker). */
int surf_events_filter_parse(struct ledger *l, const char *query,
                             const char *last_event_id,
                             struct surf_events_filter *f, struct fo_err *err);

/* Starts a subscriber. The stream's first bytes (a retry hint and a
 * comment naming where it starts) are written when the next read has
 * found the head; when it cannot, an error event, and the stream ends.
 * NULL on failure. */
struct surf_events_sub *surf_events_subscribe(
    struct surf_events *ev, const struct surf_events_filter *f,
    const struct surf_events_sink *sink, void *arg, struct fo_err *err);

/* The transport wrote out what was pending: a paused subscriber goes on. */
void surf_events_writable(struct surf_events *ev, struct surf_events_sub *s);

/* Forgets a subscriber (its connection closed); its sink is not called
 * again. */
void surf_events_unsubscribe(struct surf_events *ev, struct surf_events_sub *s);

/* New entries may be there: any thread. */
void surf_events_notify(struct surf_events *ev);

/* Subscribers now; events written since start. */
size_t surf_events_subscribers(const struct surf_events *ev);
unsigned long long surf_events_sent(const struct surf_events *ev);

/* Frees everything; subscribers must have been unsubscribed. NULL-safe. */
void surf_events_free(struct surf_events *ev);

#endif
