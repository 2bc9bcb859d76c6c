/* http: the HTTP surface's lifecycle and its work queues. surf_http_create
 * binds the listener and sends every request to one evhttp callback
 * (http_handle, http_route.c); the methods that run on a worker, the
 * group committer or the run engine hand their replies back to the loop
 * thread here. Replies, metrics and the drain all happen on the loop
 * thread. The files of the surface: http_int.h lists them. */
#include "surfaces/http_int.h"

#include "daemon/orch.h"
#include "daemon/orch_engine.h"

void http_logm(struct surf_http *h, const char *what, const char *detail)
{
    if (h->cfg.log)
        h->cfg.log(h->cfg.hook, "%s: %s", what, detail);
}

void http_q_push(struct queue *q, struct job *j)
{
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

static struct job *q_pop(struct queue *q)
{
    struct job *j = q->head;
    if (j) {
        q->head = j->next;
        if (!q->head)
            q->tail = NULL;
    }
    return j;
}

/* A job that owns in from here on (NULL when out of memory). */
struct job *http_job_new(struct surf_http *h, struct evhttp_request *req,
                         const struct surf_method *m, int route, int64_t t0,
                         cJSON *in)
{
    struct job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    *j = (struct job){.h = h,
                      .req = req,
                      .m = m,
                      .route = route,
                      .t0 = t0,
                      .in = in,
                      .run = -1};
    fo_buf_init(&j->cbody, 0);
    return j;
}

void http_job_free(struct job *j)
{
    if (!j)
        return;
    cJSON_Delete(j->in);
    if (j->free_arg)
        free(j->arg);
    free(j->body);
    fo_buf_release(&j->cbody);
    free(j);
}

/* ---- workers ---------------------------------------------------------- */

static void *worker(void *arg)
{
    struct surf_http *h = arg;
    struct surf_ctx *ctx = NULL;
    struct fo_err err;
    if (h->cfg.ctx_open(h->cfg.hook, &ctx, &err) != FO_OK) {
        http_logm(h, "worker: cannot open the ledger", err.msg);
        ctx = NULL;
    }
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->work.head && !h->stopping)
            pthread_cond_wait(&h->cv, &h->mu);
        struct job *j = q_pop(&h->work);
        if (!j)
            break;
        pthread_mutex_unlock(&h->mu);
        if (j->work) {
            j->work(j, ctx);
        } else {
            cJSON *out = NULL;
            int rc = ctx ? surf_call(ctx, j->m, j->in, &out, &err)
                         : fo_err_set(&err, FO_E_IO, "worker has no ledger");
            http_result_text(rc, out, &err, &j->status, &j->body, &j->body_len);
            cJSON_Delete(out);
        }
        pthread_mutex_lock(&h->mu);
        http_q_push(&h->done, j);
        event_active(h->done_ev, 0, 0);
    }
    pthread_mutex_unlock(&h->mu);
    if (ctx)
        h->cfg.ctx_close(h->cfg.hook, ctx);
    return NULL;
}

/* Committer thread: an append's transaction ended. The reply is written
 * here, off the loop thread: the served entry directly in its canonical
 * form (ledger_entry_text), or the error; queued for append_flush. */
void http_append_done(struct ledger_queued_append *r)
{
    struct job *j = r->arg;
    struct surf_http *h = j->h;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (j->creq.a.rc == FO_OK && fo_buf_reserve(&b, 640) == 0 &&
        ledger_entry_text(&j->creq.a.entry, &b) == 0 &&
        fo_buf_putc(&b, '\n') == 0) {
        j->body = fo_buf_detach(&b, &j->body_len);
        j->status = 200;
    } else {
        fo_buf_release(&b);
        struct fo_err e2;
        const struct fo_err *err = &j->creq.a.err;
        int rc = j->creq.a.rc;
        if (rc == FO_OK) {
            rc = fo_err_set(&e2, FO_E_NOMEM, NULL);
            err = &e2;
        }
        http_result_text(rc, NULL, err, &j->status, &j->body, &j->body_len);
    }
    http_q_push(&h->committed, j); /* handed over by append_flush */
}

/* Committer thread: a batch's answers are written; one lock and one wake-up
 * of the loop for all of them. */
void http_append_flush(void *arg)
{
    struct surf_http *h = arg;
    if (!h->committed.head)
        return;
    pthread_mutex_lock(&h->mu);
    if (h->done.tail)
        h->done.tail->next = h->committed.head;
    else
        h->done.head = h->committed.head;
    h->done.tail = h->committed.tail;
    event_active(h->done_ev, 0, 0);
    pthread_mutex_unlock(&h->mu);
    h->committed = (struct queue){NULL, NULL};
}

/* Loop thread: answer every finished job. */
static void on_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct surf_http *h = arg;
    pthread_mutex_lock(&h->mu);
    struct queue done = h->done; /* all of them, in one lock */
    h->done = (struct queue){NULL, NULL};
    pthread_mutex_unlock(&h->mu);
    struct job *j;
    while ((j = q_pop(&done)) != NULL) {
        if (j->finish) {
            j->finish(j);
            continue;
        }
        char *body = j->body;
        j->body = NULL;
        http_send_raw(h, j->req, j->status, "application/json", body,
                      j->body_len, 0, j->route, j->t0);
        http_job_free(j);
        http_finished(h);
    }
}

/* Queues j for the workers (loop thread). */
void http_job_post(struct surf_http *h, struct job *j)
{
    pthread_mutex_lock(&h->mu);
    http_q_push(&h->work, j);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* The event stream's reads (surf_events_reader) on a worker, with the
 * worker's own ledger handle; their done on the loop. */
static void events_read_work(struct job *j, struct surf_ctx *ctx)
{
    j->read(j->arg, ctx ? ctx->ledger : NULL);
}

static void events_read_finish(struct job *j)
{
    void (*done)(void *) = j->read_done;
    void *arg = j->arg;
    http_job_free(j);
    done(arg);
}

static int events_post(void *hook, void (*read)(void *arg, struct ledger *l),
                       void (*done)(void *arg), void *arg)
{
    struct surf_http *h = hook;
    struct job *j = http_job_new(h, NULL, NULL, ROUTE_EVENTS, 0, NULL);
    if (!j)
        return -1;
    j->work = events_read_work;
    j->finish = events_read_finish;
    j->read = read;
    j->read_done = done;
    j->arg = arg;
    http_job_post(h, j);
    return 0;
}

/* Loop thread: a run started on the engine ended (or began, for
 * run_start). */
/* A cancel a turn later (never inside a connection's teardown): by the
 * run's id, so the call may be answered and freed meanwhile. */
struct run_cancel {
    struct surf_http *h;
    int64_t run;
};

static void run_cancel_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct run_cancel *c = arg;
    struct surf_http *h = c->h;
    if (orch_engine_cancel(h->cfg.loop_ctx->engine, c->run) == FO_OK &&
        h->cfg.log)
        h->cfg.log(h->cfg.hook,
                   "run %lld: cancelled: its client hung up before the answer",
                   (long long)c->run);
    free(c);
}

static void cancel_later(struct job *j)
{
    struct run_cancel *c = malloc(sizeof(*c));
    struct timeval now = {0, 0};
    j->cancel_sent = 1;
    if (c) {
        *c = (struct run_cancel){j->h, j->run};
        if (event_base_once(j->h->base, -1, EV_TIMEOUT, run_cancel_cb, c,
                            &now) == 0)
            return;
        free(c);
    }
    if (j->h->cfg.log)
        j->h->cfg.log(j->h->cfg.hook,
                      "run %lld: its client hung up, and it "
                      "cannot be cancelled: out of memory",
                      (long long)j->run);
}

/* A step of a parked call's run (orch_run_event_fn): its id; a client
 * that hung up before the first step cancels it now. */
void http_run_event(void *arg, const struct orch_run_event *ev)
{
    struct job *j = arg;
    j->run = ev->run;
    if (j->hung_up && !j->cancel_sent)
        cancel_later(j);
}

/* The connection of a parked run call went away (surf_http_on_gone): its
 * run is cancelled through the engine's one path; the answer, when it
 * comes, only frees the request. */
void http_run_gone(void *arg)
{
    struct job *j = arg;
    j->watch_gone = 0;
    j->hung_up = 1;
    if (j->run >= 0 && !j->cancel_sent)
        cancel_later(j);
}

void http_run_reply(void *arg, int rc, cJSON *out, const struct fo_err *err)
{
    struct job *j = arg;
    struct surf_http *h = j->h;
    if (j->watch_gone) /* answered: its connection is no longer watched */
        http_conn_on_hup(h, j->req, NULL, NULL);
    int status;
    char *body;
    size_t len;
    http_result_text(rc, out, err, &status, &body, &len);
    cJSON_Delete(out);
    http_send_raw(h, j->req, status, "application/json", body, len, 0, j->route,
                  j->t0);
    http_job_free(j);
    http_finished(h);
}

static void on_drained(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct surf_http *h = arg;
    int forced = what == EV_TIMEOUT;
    if (forced && h->cfg.log && h->unsent)
        h->cfg.log(h->cfg.hook,
                   "drain: %ld replies still unwritten after the "
                   "grace period",
                   h->unsent);
    if (h->inflight == 0 && (h->unsent == 0 || forced) && h->drained) {
        void (*cb)(void *) = h->drained;
        h->drained = NULL;
        cb(h->drained_arg);
    }
}

/* ---- lifecycle -------------------------------------------------------- */

int surf_http_create(struct event_base *base,
                     const struct surf_http_config *cfg, struct surf_http **out,
                     struct fo_err *err)
{
    struct surf_http *h = calloc(1, sizeof(*h));
    if (!h)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_E_NOMEM;
    h->cfg = *cfg;
    if (!h->cfg.host)
        h->cfg.host = "127.0.0.1";
    if (!h->cfg.body_max)
        h->cfg.body_max = BODY_MAX_DEFAULT;
    if (!h->cfg.header_max)
        h->cfg.header_max = HEADER_MAX_DEFAULT;
    if (h->cfg.timeout_s <= 0)
        h->cfg.timeout_s = TIMEOUT_DEFAULT_S;
    if (h->cfg.workers <= 0)
        h->cfg.workers = WORKERS_DEFAULT;
    h->base = base;
    h->start_us = ledger_now_us();
    h->table = surf_methods(&h->nmethods);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->routes = calloc(h->nmethods, sizeof(*h->routes));
    if (!h->routes) {
        fo_err_set(err, FO_E_NOMEM, NULL);
        goto fail;
    }
    for (size_t i = 0; i < h->nmethods; i++) {
        if (http_route_compile(&h->routes[i], h->table[i].http_path) != 0) {
            rc = fo_err_set(err, FO_E_INTERNAL, "method %s: bad route %s",
                            h->table[i].name, h->table[i].http_path);
            goto fail;
        }
    }
    h->counts =
        calloc((h->nmethods + ROUTE_EXTRA) * NSTATUS, sizeof(*h->counts));
    h->threads = calloc((size_t)h->cfg.workers, sizeof(*h->threads));
    h->done_ev = event_new(base, -1, 0, on_done, h);
    h->drain_ev = event_new(base, -1, 0, on_drained, h);
    h->drain_timer = evtimer_new(base, on_drained, h);
    h->adopt_ev = event_new(base, -1, 0, http_adopt, h);
    h->pause_ev = evtimer_new(base, http_accept_resume, h);
    h->trim_ev = evtimer_new(base, http_trim_memory, h);
    h->http = evhttp_new(base);
    if (!h->counts || !h->threads || !h->done_ev || !h->drain_ev ||
        !h->drain_timer || !h->adopt_ev || !h->pause_ev || !h->trim_ev ||
        !h->http) {
        fo_err_set(err, FO_E_NOMEM, NULL);
        goto fail;
    }
    h->pins_on = (event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE) != 0;
    h->deadline_plain = (struct timeval){h->cfg.timeout_s, 0};
    h->deadline_tv = event_base_init_common_timeout(base, &h->deadline_plain);
    if (!h->deadline_tv)
        h->deadline_tv = &h->deadline_plain;
    long long fd_limit = -1;
    h->max_open = surf_http_connections_default(&fd_limit);
    if (h->cfg.max_connections > 0) {
        h->max_open = h->cfg.max_connections;
        if (fd_limit >= 0 && h->max_open > fd_limit - FD_RESERVE && h->cfg.log)
            h->cfg.log(h->cfg.hook,
                       "http: max_connections %ld leaves fewer than %d of "
                       "the %lld descriptors allowed (RLIMIT_NOFILE) to the "
                       "rest of the daemon; when they run out, accepts "
                       "pause",
                       h->max_open, FD_RESERVE, fd_limit);
    }
    evhttp_set_bevcb(h->http, http_born, h);
    evhttp_set_max_body_size(h->http, (ev_ssize_t)h->cfg.body_max);
    evhttp_set_max_headers_size(h->http, (ev_ssize_t)h->cfg.header_max);
    evhttp_set_timeout(h->http, h->cfg.timeout_s);
    /* Every method reaches us, so a wrong one is our 405, not a 501. */
    evhttp_set_allowed_methods(
        h->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                     EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                     EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    /* An early 413 must not reach the client as a reset. */
    evhttp_set_flags(h->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_gencb(h->http, http_handle, h);
    h->bound = evhttp_bind_socket_with_handle(h->http, h->cfg.host,
                                              (ev_uint16_t)h->cfg.port);
    if (!h->bound) {
        rc = fo_err_set(err, FO_E_IO, "cannot listen on %s:%d: %s", h->cfg.host,
                        h->cfg.port, strerror(errno));
        goto fail;
    }
    h->listener = evhttp_bound_socket_get_listener(h->bound);
    h->accepting = 1; /* evhttp_bind_listener enabled it */
    evconnlistener_set_error_cb(h->listener, http_accept_failed);
    http_owner_add(h);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(evhttp_bound_socket_get_fd(h->bound),
                    (struct sockaddr *)&ss, &sl) != 0) {
        rc = fo_err_set(err, FO_E_IO, "getsockname: %s", strerror(errno));
        goto fail;
    }
    if (ss.ss_family == AF_INET)
        h->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
        h->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    for (int i = 0; i < h->cfg.workers; i++) {
        if (pthread_create(&h->threads[i], NULL, worker, h) != 0) {
            rc = fo_err_set(err, FO_E_INTERNAL, "cannot start a worker");
            goto fail;
        }
        h->nthreads++;
    }
    h->loop_reads =
        !h->cfg.loop_ctx || !h->cfg.loop_ctx->ledger ||
        !strcmp(ledger_store_name(h->cfg.loop_ctx->ledger), "sqlite");
    fo_buf_init(&h->alog, FO_BUF_UNLIMITED);
    if (h->cfg.access_on) {
        struct timeval one = {1, 0};
        h->alog_ev = event_new(base, -1, EV_PERSIST, http_alog_tick, h);
        if (!h->alog_ev || event_add(h->alog_ev, &one) != 0) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
            goto fail;
        }
    }
    struct surf_events_reader rd = {.post = events_post, .hook = h};
    if (h->cfg.loop_ctx && h->cfg.loop_ctx->ledger &&
        surf_events_create(base, &rd, h->cfg.keepalive_s, &h->events, err) !=
            FO_OK) {
        rc = err->code;
        goto fail;
    }
    *out = h;
    return FO_OK;
fail:
    surf_http_free(h);
    return rc;
}

int surf_http_port(const struct surf_http *h)
{
    return h->port;
}

unsigned long long surf_http_requests(const struct surf_http *h)
{
    return h->requests;
}

long surf_http_connections_default(long long *fd_limit)
{
    struct rlimit rl;
    long long lim = -1;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        lim = (long long)rl.rlim_cur;
    if (fd_limit)
        *fd_limit = lim;
    if (lim < 0 || lim - FD_RESERVE > CONNECTIONS_CEIL)
        return CONNECTIONS_CEIL;
    if (lim - FD_RESERVE < CONNECTIONS_FLOOR)
        return CONNECTIONS_FLOOR;
    return (long)(lim - FD_RESERVE);
}

long surf_http_max_connections(const struct surf_http *h)
{
    return h->max_open;
}

void surf_http_drain(struct surf_http *h, void (*done)(void *arg), void *arg)
{
    if (!h->draining && h->bound) {
        evhttp_del_accept_socket(h->http, h->bound);
        h->bound = NULL;
        h->listener = NULL; /* freed with it */
        evtimer_del(h->pause_ev);
    }
    h->draining = 1;
    h->drained = done;
    h->drained_arg = arg;
    /* the streams end now (a client reconnects elsewhere, or later, with
     * its Last-Event-ID) */
    while (h->streams)
        http_stream_end(h->streams);
    http_mcp_drain(h); /* and the MCP sessions' GET streams */
    http_drain_check(h);
}

void surf_http_notify(struct surf_http *h)
{
    if (h)
        surf_events_notify(h->events);
}

long surf_http_streams(const struct surf_http *h)
{
    return h->nstreams;
}

void surf_http_free(struct surf_http *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < h->nthreads; i++)
        pthread_join(h->threads[i], NULL);
    /* Jobs never answered (free without a drain): drop them. */
    struct job *j;
    while ((j = q_pop(&h->work)) != NULL)
        http_job_free(j);
    while ((j = q_pop(&h->done)) != NULL)
        http_job_free(j);
    http_owner_remove(h);
    /* evhttp_free frees the listener first, then each connection (our
     * conn_closed runs for each) */
    h->listener = NULL;
    if (h->http)
        evhttp_free(h->http);
    while (h->streams) { /* none: each went with its connection */
        struct stream *st = h->streams;
        h->streams = st->next;
        surf_events_unsubscribe(h->events, st->sub);
        evbuffer_free(st->tmp);
        free(st);
    }
    surf_events_free(h->events);
    http_mcp_free(h);
    surf_http_access_flush(h);
    fo_buf_release(&h->alog);
    if (h->alog_ev)
        event_free(h->alog_ev);
    free(h->conns); /* empty now */
    for (size_t i = 0; i < h->nborn; i++)
        bufferevent_decref(h->born[i]);
    free(h->born);
    if (h->adopt_ev)
        event_free(h->adopt_ev);
    if (h->pause_ev)
        event_free(h->pause_ev);
    if (h->trim_ev)
        event_free(h->trim_ev);
    if (h->done_ev)
        event_free(h->done_ev);
    if (h->drain_ev)
        event_free(h->drain_ev);
    if (h->drain_timer)
        event_free(h->drain_timer);
    free(h->threads);
    free(h->counts);
    free(h->routes);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
