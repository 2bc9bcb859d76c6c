/* http_conn: every connection from accept to close (struct conn, by
 * descriptor): the connection cap, the per-request deadline, the header
 * framing evhttp 2.1 lets by, the pin that keeps a socket's read interest,
 * and the pause after a failed accept(). The why of each: http_int.h,
 * "connections". */
#include "surfaces/http_int.h"

/* libevent 2.1 calls a listener's error callback with the listener's
 * argument, which evhttp_bind_listener set to the evhttp, and an evhttp
 * has no way back to its owner: this list is that way back (an exception
 * to "no mutable globals", for want of a user pointer). Written by
 * surf_http_create and surf_http_free, read by accept_failed. */
static pthread_mutex_t owners_mu = PTHREAD_MUTEX_INITIALIZER;
static struct surf_http *owners;

void http_owner_add(struct surf_http *h)
{
    pthread_mutex_lock(&owners_mu);
    h->next_owner = owners;
    owners = h;
    pthread_mutex_unlock(&owners_mu);
}

void http_owner_remove(struct surf_http *h)
{
    pthread_mutex_lock(&owners_mu);
    struct surf_http **o = &owners;
    while (*o && *o != h)
        o = &(*o)->next_owner;
    if (*o)
        *o = h->next_owner;
    pthread_mutex_unlock(&owners_mu);
}

/* 1 when a line may be logged now; held gets what to append to it: how
 * many were held back since the last one (or nothing). */
static int ratelog_due(struct ratelog *r, char *held, size_t size)
{
    int64_t now = ledger_mono_us();
    if (r->logged && now - r->last_us < LOG_EVERY_US) {
        r->held++;
        return 0;
    }
    held[0] = '\0';
    if (r->held)
        snprintf(held, size, " (%lu more since the last such line)", r->held);
    r->held = 0;
    r->logged = 1;
    r->last_us = now;
    return 1;
}

/* Accepting is on unless paused after a failed accept() or at the cap (or
 * draining: then there is no listener). */
static void accept_update(struct surf_http *h)
{
    if (!h->listener)
        return;
    int want = !h->paused && h->open < h->max_open;
    if (want == h->accepting)
        return;
    if ((want ? evconnlistener_enable(h->listener)
              : evconnlistener_disable(h->listener)) != 0)
        return; /* tried again at the next change */
    h->accepting = want;
    if (want || h->paused)
        return;
    h->full_stops++;
    char held[64];
    if (h->cfg.log && ratelog_due(&h->full_log, held, sizeof(held)))
        h->cfg.log(h->cfg.hook,
                   "http: %ld connections open, max_connections: not "
                   "accepting until one closes%s",
                   h->open, held);
}

void http_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct surf_http *h = arg;
    h->paused = 0;
    accept_update(h);
}

/* The listener's error callback: accept() failed with other than EAGAIN,
 * EINTR or ECONNABORTED. */
void http_accept_failed(struct evconnlistener *lev, void *arg)
{
    int e = EVUTIL_SOCKET_ERROR();
    pthread_mutex_lock(&owners_mu);
    struct surf_http *h = owners;
    while (h && h->http != arg)
        h = h->next_owner;
    pthread_mutex_unlock(&owners_mu);
    if (!h) { /* cannot happen; never spin */
        evconnlistener_disable(lev);
        return;
    }
    h->accept_errors++;
    h->paused = 1;
    accept_update(h);
    struct timeval pause = {0, ACCEPT_PAUSE_MS * 1000};
    evtimer_add(h->pause_ev, &pause);
    char held[64];
    if (h->cfg.log && ratelog_due(&h->error_log, held, sizeof(held)))
        h->cfg.log(h->cfg.hook,
                   "http: accept: %s (%ld connections open); pausing "
                   "accepts for %d ms%s",
                   evutil_socket_error_to_string(e), h->open, ACCEPT_PAUSE_MS,
                   held);
}

/* The connection of evcon, when we watch it. */
struct conn *http_conn_find(struct surf_http *h,
                            struct evhttp_connection *evcon)
{
    struct bufferevent *bev =
        evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0 || (size_t)fd >= h->nconns || !h->conns[fd] ||
        h->conns[fd]->evcon != evcon)
        return NULL;
    return h->conns[fd];
}

static int hdr_scan(struct conn *c, struct evbuffer *buf, size_t from);

static void conn_reading(struct conn *c)
{
    c->state = CONN_READING;
    c->hdr_len = 0;
    c->hdr_done = 0;
    evtimer_add(c->deadline, c->h->deadline_tv);
}

/* Two Content-Length values that differ, in the header block so far. */
static int hdr_conflict(const char *h, size_t n)
{
    const char *first = NULL;
    size_t first_len = 0;
    for (size_t i = 0; i < n;) {
        const char *e = memchr(h + i, '\n', n - i);
        size_t ll = e ? (size_t)(e - (h + i)) : n - i;
        if (ll >= 15 && !strncasecmp(h + i, "content-length:", 15)) {
            const char *v = h + i + 15;
            size_t vl = ll - 15;
            while (vl && (*v == ' ' || *v == '\t'))
                v++, vl--;
            while (vl && (v[vl - 1] == '\r' || v[vl - 1] == ' '))
                vl--;
            if (first && (vl != first_len || memcmp(v, first, vl)))
                return 1;
            first = v;
            first_len = vl;
        }
        if (!e)
            break;
        i += ll + 1;
    }
    return 0;
}

/* The Content-Length of a header block (the first one): 1 and *out when
 * there is one made of digits. */
static int hdr_length(const char *h, size_t n, unsigned long long *out)
{
    for (size_t i = 0; i < n;) {
        const char *e = memchr(h + i, '\n', n - i);
        size_t ll = e ? (size_t)(e - (h + i)) : n - i;
        if (ll >= 15 && !strncasecmp(h + i, "content-length:", 15)) {
            const char *v = h + i + 15, *end = h + i + ll;
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            unsigned long long x = 0;
            int digits = 0;
            for (; v < end && *v >= '0' && *v <= '9' && digits < 19; v++)
                x = x * 10 + (unsigned)(*v - '0'), digits++;
            if (!digits)
                return 0;
            *out = v < end && *v >= '0' && *v <= '9' ? ~0ULL : x;
            return 1;
        }
        if (!e)
            break;
        i += ll + 1;
    }
    return 0;
}

/* Answers 400 (or 413) at once and closes: the body could never be
 * framed (or taken). The reply is small and goes straight to the socket
 * (there is no request object yet to answer through). */
static void hdr_refuse(struct conn *c, int status, const char *body)
{
    char reply[512];
    int n =
        snprintf(reply, sizeof(reply),
                 "HTTP/1.1 %d %s\r\nContent-Type: "
                 "application/json\r\nContent-Length: %zu\r\nConnection: "
                 "close\r\n\r\n%s",
                 status, status == 413 ? "Payload Too Large" : "Bad Request",
                 strlen(body), body);
    if (n > 0 && (size_t)n < sizeof(reply))
        (void)!send(c->fd, reply, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    http_count(c->h, ROUTE_UNKNOWN, status, ledger_now_us());
    /* closed from the loop, not from inside libevent's read; a 413 first
     * lingers a moment, the body that follows read and dropped, so the
     * reply is not lost to a reset while the client still sends */
    c->refused = 1;
    static const struct timeval now = {0, 0}, linger = {1, 0};
    if (status == 413)
        shutdown(c->fd, SHUT_WR);
    evtimer_add(c->deadline, status == 413 ? &linger : &now);
}

/* Scans buf from byte `from` on into the header block; 1 when the
 * connection was refused (it closes on the loop's next turn). */
static int hdr_scan(struct conn *c, struct evbuffer *buf, size_t from)
{
    size_t len = evbuffer_get_length(buf);
    if (c->refused || c->hdr_done || from >= len ||
        c->hdr_len >= sizeof(c->hdr))
        return 0;
    size_t take = len - from;
    if (take > sizeof(c->hdr) - c->hdr_len)
        take = sizeof(c->hdr) - c->hdr_len;
    struct evbuffer_ptr p;
    if (evbuffer_ptr_set(buf, &p, from, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(buf, &p, c->hdr + c->hdr_len, take) < 0)
        return 0;
    size_t old = c->hdr_len;
    c->hdr_len += take;
    /* the block ends at the first blank line (looked for from just before
     * the new bytes, which may complete it) */
    size_t start = old >= 3 ? old - 3 : 0;
    for (size_t i = start; i + 1 < c->hdr_len; i++) {
        if (c->hdr[i] == '\n' &&
            (c->hdr[i + 1] == '\n' ||
             (c->hdr[i + 1] == '\r' && i + 2 < c->hdr_len &&
              c->hdr[i + 2] == '\n'))) {
            c->hdr_done = 1;
            c->hdr_len = i + 1;
            break;
        }
    }
    if (c->hdr_done && hdr_conflict(c->hdr, c->hdr_len)) {
        hdr_refuse(c, 400,
                   "{\"code\":\"invalid_input\",\"error\":\"conflicting "
                   "Content-Length headers\"}\n");
        return 1;
    }
    unsigned long long cl = 0;
    if (c->hdr_done && hdr_length(c->hdr, c->hdr_len, &cl) &&
        cl > c->h->cfg.body_max) {
        /* answered now, not after the body (or a stalled client's idle
         * timeout): it could never be taken */
        char body[160];
        snprintf(body, sizeof(body),
                 "{\"code\":\"body_too_large\",\"error\":\"Content-Length "
                 "%llu over the server's %zu-byte cap\"}\n",
                 cl, c->h->cfg.body_max);
        hdr_refuse(c, 413, body);
        return 1;
    }
    return 0;
}

/* The first bytes of a request start its deadline; its header block is
 * checked as it arrives. */
static void input_grew(struct evbuffer *buf,
                       const struct evbuffer_cb_info *info, void *arg)
{
    struct conn *c = arg;
    if (!info->n_added)
        return;
    size_t len = evbuffer_get_length(buf);
    if (c->state == CONN_IDLE) {
        conn_reading(c);
        hdr_scan(c, buf, 0); /* what is there is this request's start */
    } else if (c->state == CONN_READING) {
        hdr_scan(c, buf, len - info->n_added);
    }
}

static void deadline_passed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    if (!c->refused)
        c->h->deadline_closes++;
    evhttp_connection_free(c->evcon); /* conn_closed frees c */
}

/* Stops watching c (its connection is going). */
static void conn_forget(struct conn *c)
{
    struct surf_http *h = c->h;
    if (c->pin)
        event_free(c->pin);
    event_free(c->deadline);
    h->conns[c->fd] = NULL;
    free(c);
    h->open--;
    accept_update(h);
}

static void conn_drop(struct conn *c)
{
    evbuffer_remove_cb_entry(c->in, c->grew); /* the buffer outlives us */
    conn_forget(c);
}

void http_conn_closed(struct evhttp_connection *evcon, void *arg)
{
    struct surf_http *h = arg;
    struct conn *c = http_conn_find(h, evcon);
    if (!c)
        return;
    /* replies the client went away before reading are never written (and
     * never reported written): they are no longer waited for */
    long lost = c->unsent;
    struct stream *st = c->stream;
    void (*gone)(void *) = c->gone;
    void *gone_arg = c->gone_arg;
    void (*hup)(void *) = c->hup;
    void *hup_arg = c->hup_arg;
    conn_drop(c);
    if (st)
        http_stream_lost(st);
    if (gone)
        gone(gone_arg);
    if (hup)
        hup(hup_arg);
    if (lost) {
        h->unsent -= lost;
        http_drain_check(h);
    }
}

static int conn_add(struct surf_http *h, struct evhttp_connection *evcon,
                    struct bufferevent *bev)
{
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd < 0 || fd > SURF_HTTP_CONNECTIONS_MAX)
        return -1;
    if ((size_t)fd >= h->nconns) {
        size_t n = h->nconns ? h->nconns : 64;
        while (n <= (size_t)fd)
            n *= 2;
        struct conn **p = realloc(h->conns, n * sizeof(*p));
        if (!p)
            return -1;
        memset(p + h->nconns, 0, (n - h->nconns) * sizeof(*p));
        h->conns = p;
        h->nconns = n;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -1;
    *c = (struct conn){.h = h,
                       .evcon = evcon,
                       .fd = fd,
                       .in = bufferevent_get_input(bev),
                       .pin_mode = PIN_HUP};
    c->deadline = evtimer_new(h->base, deadline_passed, c);
    c->grew = c->deadline ? evbuffer_add_cb(c->in, input_grew, c) : NULL;
    if (!c->grew) {
        if (c->deadline)
            event_free(c->deadline);
        free(c);
        return -1;
    }
    if (h->conns[fd]) /* gone unseen (no close callback): cannot happen */
        conn_forget(h->conns[fd]);
    h->conns[fd] = c;
    evhttp_connection_set_closecb(evcon, http_conn_closed, h);
    if (evbuffer_get_length(c->in))
        conn_reading(c);
    return 0;
}

/* evhttp's bufferevent maker (evhttp_set_bevcb), called just after
 * accept(). */
struct bufferevent *http_born(struct event_base *base, void *arg)
{
    struct surf_http *h = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    if (!bev)
        return NULL; /* evhttp makes its own: a connection not watched */
    if (h->nborn == h->born_cap) {
        size_t n = h->born_cap ? 2 * h->born_cap : 16;
        struct bufferevent **p = realloc(h->born, n * sizeof(*p));
        if (!p)
            return bev; /* not watched */
        h->born = p;
        h->born_cap = n;
    }
    bufferevent_incref(bev);
    h->born[h->nborn++] = bev;
    h->open++;
    event_active(h->adopt_ev, 0, 0);
    accept_update(h); /* at the cap: no more accept() this turn */
    return bev;
}

void http_adopt(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct surf_http *h = arg;
    for (size_t i = 0; i < h->nborn; i++) {
        struct bufferevent *bev = h->born[i];
        void *evcon = NULL;
        bufferevent_getcb(bev, NULL, NULL, NULL, &evcon);
        /* NULL: evhttp freed it already */
        if (!evcon || conn_add(h, evcon, bev) != 0)
            h->open--;
        bufferevent_decref(bev);
    }
    h->nborn = 0;
    accept_update(h);
}

static void pin_fired(evutil_socket_t fd, short what, void *arg);

static void pin_set(struct conn *c, int mode)
{
    if (c->pin)
        event_free(c->pin);
    c->pin = NULL;
    c->pin_mode = PIN_HUP;
    if (mode == PIN_HUP)
        return;
    short what =
        mode == PIN_READ ? EV_READ | EV_CLOSED | EV_PERSIST : EV_CLOSED;
    c->pin = event_new(c->h->base, c->fd, what, pin_fired, c);
    if (!c->pin || event_add(c->pin, NULL) != 0) {
        if (c->pin)
            event_free(c->pin);
        c->pin = NULL;
        return;
    }
    c->pin_mode = mode;
}

static void pin_fired(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct conn *c = arg;
    if (what & EV_CLOSED) {
        pin_set(c, PIN_HUP);
        if (c->hup) { /* a parked call's client left: told at once */
            void (*hup)(void *) = c->hup;
            c->hup = NULL;
            hup(c->hup_arg);
        }
        if (c->stream) /* nothing will be read: the peer left the stream */
            evhttp_connection_free(c->evcon); /* conn_closed ends it */
        return;
    }
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
    if (c->pin_mode != PIN_READ ||
        (bev && (bufferevent_get_enabled(bev) & EV_READ)))
        return; /* evhttp reads them */
    if (c->fresh) {
        c->fresh = 0; /* most likely the request evhttp has just read */
        return;
    }
    pin_set(c, PIN_QUIET);
}

/* A request has arrived whole (http_handle): its deadline is met; the pin is
 * made, or woken. Best effort: a connection not watched works as before. */
void http_conn_request(struct surf_http *h, struct evhttp_request *req)
{
    struct conn *c = http_conn_find(h, evhttp_request_get_connection(req));
    if (!c)
        return;
    c->state = CONN_BUSY;
    evtimer_del(c->deadline);
    if (!h->pins_on)
        return;
    if (!c->pinned) {
        pin_set(c, PIN_READ);
        c->pinned = c->pin != NULL;
    } else if (c->pin_mode == PIN_QUIET) {
        pin_set(c, PIN_READ);
    }
    c->fresh = 1;
}

/* A reply was handed to libevent on req's connection. */
void http_conn_sent(struct surf_http *h, struct evhttp_request *req)
{
    struct conn *c = http_conn_find(h, evhttp_request_get_connection(req));
    if (c)
        c->unsent++;
}

/* Its reply is written: the next request's deadline starts with its first
 * byte, which may be here already (pipelined). */
void http_conn_replied(struct surf_http *h, struct evhttp_request *req)
{
    struct conn *c = http_conn_find(h, evhttp_request_get_connection(req));
    if (!c)
        return;
    if (c->unsent > 0)
        c->unsent--;
    c->state = CONN_IDLE;
    if (evbuffer_get_length(c->in)) {
        conn_reading(c);
        hdr_scan(c, c->in, 0); /* a pipelined request, already here */
    }
}

/* A reply evhttp has queued, written at once instead of on the loop's next
 * turn: saves that turn and the two epoll changes that turn write interest
 * on and off. Only when all of it fits in the socket; otherwise (or on an
 * error) the bufferevent carries on as usual. Then what the bufferevent
 * would do after its own write: drop write interest, call evhttp's write
 * callback (which finishes the request, and may free the connection). */

void http_conn_on_hup(struct surf_http *h, struct evhttp_request *req,
                      void (*fn)(void *arg), void *arg)
{
    struct conn *c =
        req ? http_conn_find(h, evhttp_request_get_connection(req)) : NULL;
    if (c) {
        c->hup = fn;
        c->hup_arg = arg;
    }
}

void surf_http_on_gone(struct surf_http *h, struct evhttp_request *req,
                       void (*fn)(void *arg), void *arg)
{
    struct conn *c =
        req ? http_conn_find(h, evhttp_request_get_connection(req)) : NULL;
    if (c) {
        c->gone = fn;
        c->gone_arg = arg;
    }
}
