/* bench_orch: routing throughput over the default roster, and the ledger
 * overhead of witnessing a 1,000-task plan with the stub executor.
 * Usage: bench_orch [DIR] (default: a fresh dir under /tmp). Prints figures;
 * asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "daemon/orch_engine.h"
#include "daemon/service.h"
#include "ledger/fo_json.h"

#define ROUTES 200000
#define TASKS 1000
#define WIDTH 50 /* tasks per wave: 20 waves of 50, each depending on one */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int bench_route(void)
{
    struct orch_roster *r = NULL;
    struct fo_err err;
    if (orch_roster_default(&r, &err)) {
        fprintf(stderr, "roster: %s\n", err.msg);
        return 1;
    }
    const char *texts[] = {
        "build the auth endpoint and the database schema",
        "ship a login API",
        "write a tutorial and a readme for the new sdk package",
        "investigate sources and summarize the evidence for the survey",
        "the shader effect needs a postprocessing pass on the gpu",
        "please make it nicer",
    };
    size_t nt = sizeof(texts) / sizeof(texts[0]);
    size_t decided = 0;
    double t0 = now_s();
    for (int i = 0; i < ROUTES; i++) {
        struct orch_route rt;
        const char *t = texts[(size_t)i % nt];
        if (orch_route(r, t, strlen(t), &rt, &err)) {
            fprintf(stderr, "route: %s\n", err.msg);
            orch_roster_free(r);
            return 1;
        }
        decided += rt.decided != NULL;
        orch_route_release(&rt);
    }
    double dt = now_s() - t0;
    printf("route: %d requests over %zu lanes in %.3f s: %.0f routes/s "
           "(%.2f us each; %zu decided)\n",
           ROUTES, r->n, dt, ROUTES / dt, dt / ROUTES * 1e6, decided);
    orch_roster_free(r);
    return 0;
}

static int bench_plan(const char *dir)
{
    struct ledger *l = NULL;
    struct orch *o = NULL;
    struct fo_err err;
    struct fo_buf b;
    cJSON *plan = NULL, *out = NULL;
    int rc = 1;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err) ||
        orch_create(NULL, &o, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        goto out;
    }
    fo_buf_puts(&b, "{\"tasks\":[");
    for (int i = 0; i < TASKS; i++) {
        int wave = i / WIDTH;
        if (wave == 0)
            fo_buf_printf(&b,
                          "%s{\"id\":\"T%04d\",\"agent\":\"backend\","
                          "\"instruction\":\"task %d\"}",
                          i ? "," : "", i, i);
        else
            fo_buf_printf(&b,
                          ",{\"id\":\"T%04d\",\"agent\":\"backend\","
                          "\"instruction\":\"task %d\",\"depends_on\":"
                          "[\"T%04d\"]}",
                          i, i, i - WIDTH);
    }
    if (fo_buf_puts(&b, "]}") || fo_json_parse(b.data, b.len, &plan, &err)) {
        fprintf(stderr, "plan: %s\n", err.msg);
        goto out;
    }
    int64_t before = 0, after = 0;
    ledger_count(l, &before, NULL);
    /* the engine `forum serve` runs, hosted here (daemon_embed_*) */
    struct daemon_config dc;
    daemon_config_init(&dc);
    dc.dir = dir;
    dc.orch = o;
    struct daemon_embed *host = NULL;
    struct orch_run_req req = {
        .via = "plan_run", .request = "bench", .plan = plan};
    double t0 = now_s();
    int rrc = daemon_embed_start(&dc, 0, &host, &err);
    if (!rrc)
        rrc = daemon_embed_run(host, &req, &out, &err);
    struct fo_err serr;
    daemon_embed_stop(host, &serr);
    if (rrc) {
        fprintf(stderr, "run: %s\n", err.msg);
        goto out;
    }
    double dt = now_s() - t0;
    ledger_count(l, &after, NULL);
    long long n = (long long)(after - before);
    printf("plan_run: %d stub tasks in %d waves, %lld entries witnessed "
           "(group commit) in %.3f s: %.0f entries/s, %.0f tasks/s\n",
           TASKS, TASKS / WIDTH, n, dt, (double)n / dt, TASKS / dt);
    rc = 0;
out:
    cJSON_Delete(plan);
    cJSON_Delete(out);
    fo_buf_release(&b);
    orch_free(o);
    ledger_close(l);
    return rc;
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/forum-bench-orch-XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmpl);
    if (!dir) {
        perror("mkdtemp");
        return 1;
    }
    int rc = bench_route();
    if (!rc)
        rc = bench_plan(dir);
    if (argc <= 1)
        printf("(ledger left in %s)\n", dir);
    return rc;
}
