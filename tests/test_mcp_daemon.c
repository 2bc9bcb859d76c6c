/* test_mcp_daemon: `forum mcp` beside a daemon that serves the same ledger
 * is that daemon's client: an editor's submit runs on the daemon's engine
 * with the daemon's model (it was answered by the stub, in the MCP
 * process, before), shows in its runs, and stderr says which it is. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_daemon.h"
#include "tu_scene.h"

static const char *answers(struct fake *f, const char *role, int n,
                           const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "synthesizer"))
        return "the daemon's model answered";
    if (tu_scene_control(role))
        return tu_scene_control(role);
    return "made";
}

Test(mcp_daemon, an_editors_submit_runs_on_the_daemon_with_its_model,
     .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, answers, NULL);
    struct tu_daemon d;
    tu_daemon_start(&d, sc.dir, "--chat-url", sc.url, "--model", "m1",
                    "--roster", sc.rpath, NULL);
    const char in[] =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"editor\",\"version\":\"1\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"submit\",\"arguments\":{\"request\":\"edit the "
        "file\"}}}\n";
    struct tu_run r = tu_forumv(in, "--ledger", sc.dir, "mcp", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char where[128];
    snprintf(where, sizeof(where), "the daemon at http://127.0.0.1:%d", d.port);
    cr_assert(strstr(r.err, where), "%s", r.err);
    cr_assert(strstr(r.out, "the daemon's model answered"), "%s", r.out);
    cr_assert_geq(sc.f->count[R_SYNTH], 1, "the daemon's model was asked");
    tu_run_free(&r);
    /* the daemon's own view has the run */
    cJSON *runs = tu_http_json(&d, "GET", "/runs?state=done", NULL, 200);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(runs, "runs")), 1);
    cJSON_Delete(runs);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    /* with no daemon, the calls run in the MCP process (and stderr says) */
    r = tu_forumv(in, "--ledger", sc.dir, "mcp", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "no daemon serves this ledger"), "%s", r.err);
    tu_run_free(&r);
    tu_scene_close(&sc);
}
