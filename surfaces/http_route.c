/* http_route: the request path. http_handle is evhttp's one callback: the
 * transport and auth checks, the route (a method of the table by its HTTP
 * verb and path), the input object (path, query or body), then the method
 * where its row says it runs: the loop, a worker, the committer or the
 * run engine. */
#include "surfaces/http_int.h"

/* ---- routing ---------------------------------------------------------- */

static int split_path(char *p, char **seg, int max)
{
    int n = 0;
    if (*p != '/')
        return -1;
    p++;
    if (!*p)
        return 0; /* "/" */
    for (;;) {
        if (n == max)
            return -1;
        seg[n++] = p;
        char *s = strchr(p, '/');
        if (!s)
            break;
        *s = '\0';
        p = s + 1;
    }
    return n;
}

/* A method's route, split once at start: literal segments, and the input
 * field each {x} segment binds (NULL for a literal). */

int http_route_compile(struct route *r, const char *pattern)
{
    if (snprintf(r->buf, sizeof(r->buf), "%s", pattern) >= (int)sizeof(r->buf))
        return -1;
    r->nseg = split_path(r->buf, r->seg, MAX_SEGMENTS);
    for (int i = 0; i < r->nseg; i++) {
        size_t l = strlen(r->seg[i]);
        r->bind[i] = NULL;
        if (r->seg[i][0] == '{' && l > 2 && r->seg[i][l - 1] == '}') {
            r->seg[i][l - 1] = '\0';
            r->bind[i] = r->seg[i] + 1;
        }
    }
    return r->nseg < 0 ? -1 : 0;
}

/* Does the route match the path segments? Binds {x} segments into in.
 * Returns 1 on a match, 0 when not, -1 when a bound value is malformed (err
 * set). */
static int match(const struct surf_method *m, const struct route *r, char **seg,
                 int nseg, cJSON *in, struct fo_err *err)
{
    if (r->nseg != nseg)
        return 0;
    for (int i = 0; i < nseg; i++)
        if (!r->bind[i] && strcmp(r->seg[i], seg[i]) != 0)
            return 0;
    for (int i = 0; in && i < nseg; i++) {
        if (!r->bind[i])
            continue;
        if (cJSON_GetObjectItemCaseSensitive(in, r->bind[i])) {
            /* a POST body naming what the path binds */
            fo_err_set(err, FO_E_INVALID,
                       "%s: given by the path; leave it out of the body",
                       r->bind[i]);
            return -1;
        }
        size_t dlen = 0;
        char *dec = evhttp_uridecode(seg[i], 0, &dlen);
        cJSON *v =
            dec && strlen(dec) == dlen
                ? surf_param_value(m, r->bind[i], dec,
                                   strcmp(dec, seg[i]) ? SURF_PARAM_DECODED : 0)
                : NULL;
        free(dec);
        if (!v) {
            fo_err_set(err, FO_E_INVALID, "%s: not a valid value", r->bind[i]);
            return -1;
        }
        cJSON_AddItemToObject(in, r->bind[i], v);
    }
    return 1;
}

/* 1 when the query's raw value for key was percent- or plus-encoded (an
 * integer has one spelling: "from=%31" is not "from=1"). */
static int raw_encoded(const char *query, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = query; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if (n > kl && !strncmp(p, key, kl) && p[kl] == '=' &&
            (memchr(p + kl + 1, '%', n - kl - 1) ||
             memchr(p + kl + 1, '+', n - kl - 1)))
            return 1;
        p = amp ? amp + 1 : p + n;
    }
    return 0;
}

/* Builds the input object of a GET from the query string. */
static int query_input(const struct surf_method *m, const char *query,
                       cJSON *in, struct fo_err *err)
{
    if (!query || !*query)
        return FO_OK;
    struct evkeyvalq kv;
    kv.tqh_first = NULL;
    kv.tqh_last = &kv.tqh_first;
    if (evhttp_parse_query_str(query, &kv) != 0) {
        evhttp_clear_headers(&kv);
        return fo_err_set(err, FO_E_INVALID, "query: malformed");
    }
    int rc = FO_OK;
    for (struct evkeyval *p = kv.tqh_first; p; p = p->next.tqe_next) {
        if (cJSON_GetObjectItemCaseSensitive(in, p->key)) {
            rc = fo_err_set(err, FO_E_INVALID, "%.64s: given twice", p->key);
            break;
        }
        cJSON *v = surf_param_value(
            m, p->key, p->value,
            raw_encoded(query, p->key) ? SURF_PARAM_DECODED : 0);
        if (!v) {
            rc = fo_err_set(err, FO_E_INVALID, "%.64s: not a valid value",
                            p->key);
            break;
        }
        cJSON_AddItemToObject(in, p->key, v);
    }
    evhttp_clear_headers(&kv);
    return rc;
}

/* Two Content-Length headers that disagree (libevent uses the first). */
static int conflicting_length(struct evhttp_request *req)
{
    const char *first = NULL;
    struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    for (struct evkeyval *p = ih->tqh_first; p; p = p->next.tqe_next) {
        if (strcasecmp(p->key, "Content-Length") != 0)
            continue;
        if (first && strcmp(first, p->value) != 0)
            return 1;
        first = p->value;
    }
    return 0;
}

static int token_ok(struct surf_http *h, struct evhttp_request *req)
{
    if (!h->cfg.token)
        return 0;
    const char *a = evhttp_find_header(evhttp_request_get_input_headers(req),
                                       "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7) != 0)
        return 0;
    a += 7;
    while (*a == ' ')
        a++;
    size_t la = strlen(a), lt = strlen(h->cfg.token);
    /* Constant time over the token's length whatever was sent. */
    int same = la == lt;
    return CRYPTO_memcmp(same ? a : h->cfg.token, h->cfg.token, lt) == 0 &&
           same;
}

const char *http_method_name(enum evhttp_cmd_type c)
{
    switch (c) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_HEAD:
        return "HEAD";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    case EVHTTP_REQ_OPTIONS:
        return "OPTIONS";
    case EVHTTP_REQ_TRACE:
        return "TRACE";
    case EVHTTP_REQ_CONNECT:
        return "CONNECT";
    case EVHTTP_REQ_PATCH:
        return "PATCH";
    }
    return "?";
}

static int query_has_token(const char *q)
{
    for (const char *p = q; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if ((n >= 6 && !strncasecmp(p, "token=", 6)) ||
            (n == 5 && !strncasecmp(p, "token", 5)) ||
            (n >= 13 && !strncasecmp(p, "access_token=", 13)))
            return 1;
        p = amp ? amp + 1 : p + n;
    }
    return 0;
}

/* ---- the dashboard: GET / and its assets -------------------------------- */

extern const char surf_dash_html[], surf_dash_js[], surf_dash_css[],
    surf_dash_chart[];
extern const size_t surf_dash_html_len, surf_dash_js_len, surf_dash_css_len,
    surf_dash_chart_len;

/* The page and its assets need no token: they hold no data. Every call the
 * page makes carries the token it keeps in the browser's session storage.
 * 1 when path was one of them (answered). */
static int dashboard(struct surf_http *h, struct evhttp_request *req,
                     const char *path, const char *verb, int64_t t0)
{
    const char *data = NULL, *ctype = NULL;
    size_t len = 0;
    if (!strcmp(path, "/") || !strcmp(path, "/index.html")) {
        data = surf_dash_html;
        len = surf_dash_html_len;
        ctype = "text/html; charset=utf-8";
    } else if (!strcmp(path, "/assets/app.js")) {
        data = surf_dash_js;
        len = surf_dash_js_len;
        ctype = "text/javascript; charset=utf-8";
    } else if (!strcmp(path, "/assets/chart.js")) {
        data = surf_dash_chart;
        len = surf_dash_chart_len;
        ctype = "text/javascript; charset=utf-8";
    } else if (!strcmp(path, "/assets/app.css")) {
        data = surf_dash_css;
        len = surf_dash_css_len;
        ctype = "text/css; charset=utf-8";
    } else {
        return 0;
    }
    if (strcmp(verb, "GET") != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET");
        http_send_errorf(h, req, FO_E_METHOD, "the dashboard: use GET", 0,
                         ROUTE_DASHBOARD, t0);
        return 1;
    }
    char *copy = malloc(len ? len : 1);
    if (!copy) {
        http_send_errorf(h, req, FO_E_NOMEM, "out of memory", 0,
                         ROUTE_DASHBOARD, t0);
        return 1;
    }
    memcpy(copy, data, len);
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    /* everything from this origin, nothing inline, never framed */
    evhttp_add_header(oh, "Content-Security-Policy",
                      "default-src 'none'; script-src 'self'; style-src "
                      "'self'; connect-src 'self'; img-src 'self' data:; "
                      "base-uri 'none'; form-action 'none'; frame-ancestors "
                      "'none'");
    evhttp_add_header(oh, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(oh, "Referrer-Policy", "no-referrer");
    evhttp_add_header(oh, "Cache-Control", "no-cache");
    http_send_raw(h, req, 200, ctype, copy, len, 0, ROUTE_DASHBOARD, t0);
    return 1;
}

/* Host and Origin (http_guard.h), on every route, with or without a
 * token: 1 when the request may go on, else it was answered. */
static int guard_hosts(struct surf_http *h, struct evhttp_request *req,
                       int64_t t0)
{
    struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    const char *host = NULL, *origin = NULL;
    int n_host = 0;
    for (struct evkeyval *p = ih->tqh_first; p; p = p->next.tqe_next) {
        if (!strcasecmp(p->key, "Host")) {
            host = p->value;
            n_host++;
        } else if (!strcasecmp(p->key, "Origin") && !origin) {
            origin = p->value;
        }
    }
    struct surf_http_hosts hs = {.listen = h->cfg.host,
                                 .port = h->port,
                                 .names = h->cfg.allowed_hosts,
                                 .n_names = h->cfg.n_allowed_hosts};
    struct fo_err err;
    if (surf_http_guard_hosts(&hs, host, n_host, origin, &err) == FO_OK)
        return 1;
    http_send_error(h, req, &err, 0, ROUTE_UNKNOWN, t0);
    return 0;
}

/* How a step of the request path ended: the request goes on to the next
 * step, was answered (the caller frees its input and calls
 * http_finished), or is in flight and answered later (a stream, a job, a
 * parked run, the extra hook). */
enum { STEP_NEXT, STEP_ANSWERED, STEP_KEPT };

/* One request in the request path: what each step finds out. */
struct req_path {
    struct surf_http *h;
    struct evhttp_request *req;
    int64_t t0;
    const struct evhttp_uri *uri;
    const char *upath; /* as sent, for messages */
    char path[1024];   /* split in place by find_method */
    const char *verb;  /* HEAD counts as GET */
    char *seg[MAX_SEGMENTS];
    int nseg;
    const struct surf_method *m;
    int route; /* the metrics label: the method's row + ROUTE_EXTRA */
};

static void answer_errorf(struct req_path *rp, int code, const char *msg,
                          int close)
{
    http_send_errorf(rp->h, rp->req, code, msg, close,
                     rp->m ? rp->route : ROUTE_UNKNOWN, rp->t0);
}

static void answer_error(struct req_path *rp, const struct fo_err *err,
                         int close)
{
    http_send_error(rp->h, rp->req, err, close,
                    rp->m ? rp->route : ROUTE_UNKNOWN, rp->t0);
}

/* GET /metrics on a worker: the ledger's entries (a round trip over
 * PostgreSQL, never on the loop). */
static void metrics_count(struct job *j, struct surf_ctx *ctx)
{
    struct fo_err err;
    j->entries = -1;
    if (ctx && ctx->ledger &&
        ledger_count(ctx->ledger, &j->entries, &err) != FO_OK)
        j->entries = -1;
}

/* Loop: the Prometheus text, with the count the worker read. */
static void metrics_answer(struct job *j)
{
    struct surf_http *h = j->h;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (http_metrics_text(h, j->entries, &b) != 0) {
        fo_buf_release(&b);
        http_send_errorf(h, j->req, FO_E_NOMEM, "out of memory", 0,
                         ROUTE_METRICS, j->t0);
    } else {
        size_t len = 0;
        char *t = fo_buf_detach(&b, &len);
        http_send_raw(h, j->req, 200, "text/plain; version=0.0.4", t, len, 0,
                      ROUTE_METRICS, j->t0);
    }
    http_job_free(j);
    http_finished(h);
}

/* GET /metrics: the Prometheus text, once a worker counted the entries.
 * 1 when in flight, 0 when answered. */
static int serve_metrics(struct req_path *rp)
{
    struct surf_http *h = rp->h;
    if (strcmp(rp->verb, "GET") != 0) {
        http_send_errorf(h, rp->req, FO_E_METHOD, "/metrics: use GET", 0,
                         ROUTE_METRICS, rp->t0);
        return 0;
    }
    struct job *j = http_job_new(h, rp->req, NULL, ROUTE_METRICS, rp->t0, NULL);
    if (!j) {
        http_send_errorf(h, rp->req, FO_E_NOMEM, "out of memory", 0,
                         ROUTE_METRICS, rp->t0);
        return 0;
    }
    j->work = metrics_count;
    j->finish = metrics_answer;
    http_job_post(h, j);
    return 1;
}

/* Step 1, before any route: the transport's framing, the drain, the path,
 * a token in the query, Host and Origin, the dashboard, the extra hook
 * (/tlog/), the bearer token, and the three routes outside the table
 * (/events, /metrics, /mcp). */
static int check_transport(struct req_path *rp)
{
    struct surf_http *h = rp->h;
    struct evhttp_request *req = rp->req;
    if (conflicting_length(req)) {
        answer_errorf(rp, FO_E_INVALID, "conflicting Content-Length headers",
                      1);
        return STEP_ANSWERED;
    }
    if (h->draining) {
        answer_errorf(rp, FO_E_DRAINING, "the daemon is shutting down", 1);
        return STEP_ANSWERED;
    }
    rp->uri = evhttp_request_get_evhttp_uri(req);
    rp->upath = rp->uri ? evhttp_uri_get_path(rp->uri) : NULL;
    if (!rp->upath || !*rp->upath)
        rp->upath = "/";
    size_t plen = strlen(rp->upath);
    if (plen >= sizeof(rp->path)) {
        answer_errorf(rp, FO_E_NOT_FOUND, "no such route", 0);
        return STEP_ANSWERED;
    }
    memcpy(rp->path, rp->upath, plen + 1);
    rp->verb = http_method_name(evhttp_request_get_command(req));
    /* HEAD is a GET whose body is not sent (http_send_raw) */
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD)
        rp->verb = "GET";
    if (query_has_token(rp->uri ? evhttp_uri_get_query(rp->uri) : NULL)) {
        answer_errorf(rp, FO_E_INVALID,
                      "a token in the query string is refused: send it as "
                      "Authorization: Bearer <token>",
                      0);
        return STEP_ANSWERED;
    }
    if (!guard_hosts(h, req, rp->t0) ||
        dashboard(h, req, rp->path, rp->verb, rp->t0))
        return STEP_ANSWERED;
    if (h->cfg.extra &&
        h->cfg.extra(h->cfg.extra_hook, h, req, rp->path, rp->verb,
                     h->cfg.no_auth || token_ok(h, req), rp->t0))
        return STEP_KEPT; /* answered, now or later, by surf_http_reply */
    int is_health = strcmp(rp->path, "/health") == 0;
    int open_metrics =
        h->cfg.metrics_public && strcmp(rp->path, "/metrics") == 0;
    if (!is_health && !open_metrics && !h->cfg.no_auth && !token_ok(h, req)) {
        answer_errorf(rp, FO_E_UNAUTHORIZED,
                      "missing or wrong bearer token (Authorization: Bearer "
                      "<DIR/token>)",
                      0);
        return STEP_ANSWERED;
    }
    if (strcmp(rp->path, "/events") == 0)
        /* in flight until the stream ends, or answered with an error */
        return http_stream_open(h, req, rp->verb, rp->t0) ? STEP_KEPT
                                                          : STEP_ANSWERED;
    if (strcmp(rp->path, "/metrics") == 0)
        return serve_metrics(rp) ? STEP_KEPT : STEP_ANSWERED;
    if (strcmp(rp->path, "/mcp") == 0)
        return http_mcp_handle(h, req, rp->verb, token_ok(h, req), rp->t0)
                   ? STEP_KEPT
                   : STEP_ANSWERED;
    return STEP_NEXT;
}

/* Step 2: the table's row for the verb and path (each row's route split
 * once at start), then what the row asks of the caller: the token for an
 * admin method, a JSON Content-Type for a body. A path that exists under
 * another verb is 405 with Allow. */
static int find_method(struct req_path *rp)
{
    struct surf_http *h = rp->h;
    rp->nseg = split_path(rp->path, rp->seg, MAX_SEGMENTS);
    const char *allow = NULL;
    for (size_t i = 0; rp->nseg >= 0 && i < h->nmethods; i++) {
        if (match(&h->table[i], &h->routes[i], rp->seg, rp->nseg, NULL, NULL) !=
            1)
            continue;
        if (strcmp(h->table[i].http_method, rp->verb) == 0) {
            rp->m = &h->table[i];
            break;
        }
        allow = h->table[i].http_method;
    }
    if (!rp->m) {
        if (allow) {
            evhttp_add_header(evhttp_request_get_output_headers(rp->req),
                              "Allow", allow);
            char msg[160];
            snprintf(msg, sizeof(msg), "%s: use %s, not %s", rp->upath, allow,
                     rp->verb);
            answer_errorf(rp, FO_E_METHOD, msg, 0);
        } else {
            answer_errorf(rp, FO_E_NOT_FOUND, "no such route", 0);
        }
        return STEP_ANSWERED;
    }
    rp->route = (int)(rp->m - h->table) + ROUTE_EXTRA;
    if ((rp->m->flags & SURF_ADMIN) && !token_ok(h, rp->req)) {
        answer_errorf(rp, FO_E_UNAUTHORIZED,
                      "an admin method: the bearer token is required", 0);
        return STEP_ANSWERED;
    }
    struct fo_err err;
    if (strcmp(rp->verb, "GET") != 0 &&
        surf_http_guard_ctype(
            evhttp_find_header(evhttp_request_get_input_headers(rp->req),
                               "Content-Type"),
            &err) != FO_OK) {
        answer_error(rp, &err, 0);
        return STEP_ANSWERED;
    }
    return STEP_NEXT;
}

/* Step 3: the input object, within the method's input cap: the body of a
 * POST (strict JSON, an object), the query of a GET (converted by the
 * schema's types), and the path's {x} bindings. *in is the caller's. */
static int read_input(struct req_path *rp, cJSON **in)
{
    const struct surf_method *m = rp->m;
    struct fo_err err;
    struct evbuffer *ib = evhttp_request_get_input_buffer(rp->req);
    size_t blen = evbuffer_get_length(ib);
    if (blen > m->max_input) {
        char msg[128];
        snprintf(msg, sizeof(msg), "request body over %zu bytes for %s",
                 m->max_input, m->name);
        answer_errorf(rp, FO_E_INPUT_TOO_LARGE, msg, 0);
        return STEP_ANSWERED;
    }
    if (strcmp(rp->verb, "POST") == 0 && blen > 0) {
        const char *data = (const char *)evbuffer_pullup(ib, -1);
        if (!data || fo_json_parse(data, blen, in, &err) != FO_OK) {
            if (!data)
                fo_err_set(&err, FO_E_NOMEM, NULL);
            answer_error(rp, &err, 0);
            return STEP_ANSWERED;
        }
        if (!cJSON_IsObject(*in)) {
            answer_errorf(rp, FO_E_INVALID,
                          "input: the body must be a JSON object", 0);
            return STEP_ANSWERED;
        }
    } else {
        *in = cJSON_CreateObject();
        if (!*in) {
            answer_errorf(rp, FO_E_NOMEM, "out of memory", 0);
            return STEP_ANSWERED;
        }
        if (strcmp(rp->verb, "GET") == 0 &&
            query_input(m, evhttp_uri_get_query(rp->uri), *in, &err) != FO_OK) {
            answer_error(rp, &err, 0);
            return STEP_ANSWERED;
        }
    }
    if (match(m, &rp->h->routes[m - rp->h->table], rp->seg, rp->nseg, *in,
              &err) < 0) {
        answer_error(rp, &err, 0);
        return STEP_ANSWERED;
    }
    return STEP_NEXT;
}

/* SURF_ON_COMMIT with a committer: validated and canonicalised here on the
 * loop, answered (http_append_done, then on_done in http.c) once the
 * committer has made the entry durable. */
static int start_append(struct req_path *rp, cJSON *in)
{
    struct surf_http *h = rp->h;
    struct fo_err err;
    if (surf_validate(rp->m, in, &err) != FO_OK) {
        answer_error(rp, &err, 0);
        return STEP_ANSWERED;
    }
    struct job *j = calloc(1, sizeof(*j));
    if (!j) {
        answer_errorf(rp, FO_E_NOMEM, "out of memory", 0);
        return STEP_ANSWERED;
    }
    *j = (struct job){
        .h = h, .req = rp->req, .m = rp->m, .route = rp->route, .t0 = rp->t0};
    if (surf_append_prepare(h->cfg.loop_ctx, in, &j->creq.a, &j->cbody, &err) !=
        FO_OK) {
        free(j);
        answer_error(rp, &err, 0);
        return STEP_ANSWERED;
    }
    j->creq.done = http_append_done;
    j->creq.arg = j;
    j->creq.flush = http_append_flush;
    j->creq.flush_arg = h;
    if (h->cfg.append_submit(h->cfg.append_hook, &j->creq, &err) != FO_OK) {
        http_job_free(j);
        answer_error(rp, &err, 1);
        return STEP_ANSWERED;
    }
    j->in = in; /* actor and kind point into it until the reply */
    return STEP_KEPT;
}

/* Step 4: the method where its row says it runs (surf.h, enum
 * surf_where). STEP_KEPT: in (and the request) now belong to a job. */
static int run_method(struct req_path *rp, cJSON *in)
{
    struct surf_http *h = rp->h;
    const struct surf_method *m = rp->m;
    struct fo_err err;
    if (m->where == SURF_ON_RUN && h->cfg.loop_ctx->engine) {
        /* The run engine: parked, holding no thread, answered at its end
         * by http_run_reply */
        struct job *j = http_job_new(h, rp->req, m, rp->route, rp->t0, in);
        if (!j) {
            answer_errorf(rp, FO_E_NOMEM, "out of memory", 0);
            return STEP_ANSWERED;
        }
        /* a run that ends with the call learns its id from its first
         * step: a client that hangs up then cancels it */
        struct surf_ctx ctx = *h->cfg.loop_ctx;
        j->watch_gone = (m->flags & SURF_LONG) != 0;
        if (j->watch_gone) {
            ctx.run_event = http_run_event;
            ctx.run_hook = j;
        }
        if (surf_start(&ctx, m, in, http_run_reply, j, &err) != FO_OK) {
            j->in = NULL;
            http_job_free(j);
            answer_error(rp, &err, 0);
            return STEP_ANSWERED;
        }
        if (j->watch_gone)
            http_conn_on_hup(h, rp->req, http_run_gone, j);
        return STEP_KEPT;
    }
    if (m->where == SURF_ON_COMMIT && h->cfg.append_submit)
        return start_append(rp, in);
    if (m->where == SURF_ON_LOOP && h->loop_reads) {
        cJSON *out = NULL;
        int rc = surf_call(h->cfg.loop_ctx, m, in, &out, &err);
        int status;
        char *body;
        size_t len;
        http_result_text(rc, out, &err, &status, &body, &len);
        cJSON_Delete(out);
        http_send_raw(h, rp->req, status, "application/json", body, len, 0,
                      rp->route, rp->t0);
        return STEP_ANSWERED;
    }
    /* a worker thread with its own ledger handle: answered by on_done */
    struct job *j = http_job_new(h, rp->req, m, rp->route, rp->t0, in);
    if (!j) {
        answer_errorf(rp, FO_E_NOMEM, "out of memory", 0);
        return STEP_ANSWERED;
    }
    pthread_mutex_lock(&h->mu);
    http_q_push(&h->work, j);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return STEP_KEPT;
}

/* evhttp's one callback: every request walks the four steps above and
 * leaves with exactly one reply, now or later. */
void http_handle(struct evhttp_request *req, void *arg)
{
    struct surf_http *h = arg;
    struct conn *c = http_conn_find(h, evhttp_request_get_connection(req));
    if (c && c->refused)
        return; /* answered 400 as its headers came; closing */
    h->inflight++;
    http_conn_request(h, req);
    struct req_path rp = {.h = h, .req = req, .t0 = ledger_now_us()};
    cJSON *in = NULL;
    int step = check_transport(&rp);
    if (step == STEP_NEXT)
        step = find_method(&rp);
    if (step == STEP_NEXT)
        step = read_input(&rp, &in);
    if (step == STEP_NEXT)
        step = run_method(&rp, in);
    if (step == STEP_KEPT)
        return;
    cJSON_Delete(in);
    http_finished(h);
}
