/* http_metrics: GET /metrics, the Prometheus text of the counters the
 * replies keep (by route and status, latency), the connections, the
 * committer's and the events tailer's. */
#include "surfaces/http_int.h"

/* ---- metrics ---------------------------------------------------------- */

const char *http_route_label(const struct surf_http *h, int route)
{
    return route == ROUTE_METRICS     ? "metrics"
           : route == ROUTE_UNKNOWN   ? "unknown"
           : route == ROUTE_EVENTS    ? "events"
           : route == ROUTE_DASHBOARD ? "dashboard"
           : route == ROUTE_TLOG      ? "tlog"
           : route == ROUTE_MCP       ? "mcp"
                                      : h->table[route - ROUTE_EXTRA].name;
}

int http_metrics_text(struct surf_http *h, int64_t entries, struct fo_buf *b)
{
    double up = (double)(ledger_now_us() - h->start_us) / 1e6;
    int rc = 0;
    rc |= fo_buf_printf(b,
                        "# HELP forum_build_info The forum that serves.\n"
                        "# TYPE forum_build_info gauge\n"
                        "forum_build_info{version=\"%s\"} 1\n",
                        FO_VERSION);
    rc |= fo_buf_printf(b,
                        "# HELP forum_entries Entries in the ledger.\n"
                        "# TYPE forum_entries gauge\n"
                        "forum_entries %lld\n"
                        "# HELP forum_uptime_seconds Seconds since start.\n"
                        "# TYPE forum_uptime_seconds gauge\n"
                        "forum_uptime_seconds %.3f\n"
                        "# HELP forum_http_inflight Requests in progress.\n"
                        "# TYPE forum_http_inflight gauge\n"
                        "forum_http_inflight %ld\n",
                        (long long)entries, up, h->inflight);
    rc |= fo_buf_printf(
        b,
        "# HELP forum_http_connections Client connections open.\n"
        "# TYPE forum_http_connections gauge\n"
        "forum_http_connections %ld\n"
        "# HELP forum_http_connections_max The most open at once "
        "(max_connections).\n"
        "# TYPE forum_http_connections_max gauge\n"
        "forum_http_connections_max %ld\n"
        "# HELP forum_http_connections_full_total Times accepting stopped "
        "at max_connections.\n"
        "# TYPE forum_http_connections_full_total counter\n"
        "forum_http_connections_full_total %llu\n"
        "# HELP forum_http_accept_errors_total Failed accepts (out of "
        "descriptors or memory), each a pause of %d ms.\n"
        "# TYPE forum_http_accept_errors_total counter\n"
        "forum_http_accept_errors_total %llu\n"
        "# HELP forum_http_request_deadline_total Connections closed "
        "because a request had not arrived whole within the deadline.\n"
        "# TYPE forum_http_request_deadline_total counter\n"
        "forum_http_request_deadline_total %llu\n",
        h->open, h->max_open, h->full_stops, ACCEPT_PAUSE_MS, h->accept_errors,
        h->deadline_closes);
    rc |= fo_buf_printf(b,
                        "# HELP forum_events_streams GET /events streams "
                        "open.\n"
                        "# TYPE forum_events_streams gauge\n"
                        "forum_events_streams %ld\n"
                        "# HELP forum_events_sent_total Events written to "
                        "GET /events streams.\n"
                        "# TYPE forum_events_sent_total counter\n"
                        "forum_events_sent_total %llu\n",
                        h->nstreams, surf_events_sent(h->events));
    if (h->cfg.metrics)
        rc |= h->cfg.metrics(h->cfg.append_hook, b);
    rc |= fo_buf_puts(b, "# HELP forum_http_requests_total Requests answered "
                         "by route and status.\n"
                         "# TYPE forum_http_requests_total counter\n");
    for (size_t r = 0; r < h->nmethods + ROUTE_EXTRA; r++) {
        const char *name = http_route_label(h, (int)r);
        for (size_t s = 0; s < NSTATUS; s++) {
            unsigned long long n = h->counts[r * NSTATUS + s];
            if (!n)
                continue;
            if (statuses[s])
                rc |= fo_buf_printf(b,
                                    "forum_http_requests_total{route=\"%s\","
                                    "status=\"%d\"} %llu\n",
                                    name, statuses[s], n);
            else
                rc |= fo_buf_printf(b,
                                    "forum_http_requests_total{route=\"%s\","
                                    "status=\"other\"} %llu\n",
                                    name, n);
        }
    }
    rc |= fo_buf_puts(b, "# HELP forum_http_request_duration_seconds Time "
                         "from request to reply.\n"
                         "# TYPE forum_http_request_duration_seconds "
                         "histogram\n");
    unsigned long long cum = 0;
    for (size_t i = 0; i < NLAT; i++) {
        cum += h->lat[i];
        rc |= fo_buf_printf(
            b, "forum_http_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
            lat_bounds[i], cum);
    }
    cum += h->lat[NLAT];
    rc |= fo_buf_printf(
        b,
        "forum_http_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
        "forum_http_request_duration_seconds_sum %.6f\n"
        "forum_http_request_duration_seconds_count %llu\n",
        cum, h->lat_sum, cum);
    return rc;
}
