/* tlog: the public log over HTTP, outside the handler table (its replies
 * are not JSON): GET /tlog/checkpoint, /tlog/tile/<L>/<N>[.p/<W>] and
 * /tlog/tile/entries/<N>[.p/<W>] (C2SP tlog-tiles), and POST
 * /add-checkpoint (C2SP tlog-witness) when the daemon is a witness. The
 * surf_http_config extra hook (hook: the daemon's struct daemon_tlog). */
#ifndef SURF_TLOG_H
#define SURF_TLOG_H

#include <stdint.h>

#include <event2/http.h>

#include "surfaces/http.h"

int surf_tlog_route(void *hook, struct surf_http *h, struct evhttp_request *req,
                    const char *path, const char *verb, int authed, int64_t t0);

#endif
