/* bench_loop: the control loop's overhead with instant models. N callers
 * (default 100 threads) each run R small submits (default 20) at once on
 * the engine `forum serve` runs, hosted in this process (daemon_embed_*),
 * on one ledger, every role and task a stub (an instant model), every
 * entry through the group committer. Prints runs, entries and model calls
 * per second. Usage: bench_loop [DIR [THREADS [RUNS]]]. Asserts nothing. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "daemon/orch_engine.h"
#include "daemon/service.h"
#include "ledger/fo_json.h"

#define THREADS_MAX 1000

struct shared {
    const char *dir;
    const struct orch *o;
    struct daemon_embed *host;
    int runs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready, go;
};

struct worker {
    struct shared *s;
    pthread_t th;
    long calls, failed;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    struct shared *s = w->s;
    struct fo_err err;
    pthread_mutex_lock(&s->mu); /* start together */
    s->ready++;
    pthread_cond_broadcast(&s->cv);
    while (!s->go)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    struct orch_run_req req = {.via = "submit",
                               .request = "echo the ledger entry back"};
    for (int i = 0; i < s->runs; i++) {
        cJSON *out = NULL;
        if (daemon_embed_run(s->host, &req, &out, &err) != FO_OK) {
            if (!w->failed++)
                fprintf(stderr, "submit: %s\n", err.msg);
            continue;
        }
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(out, "model_calls");
        w->calls += cJSON_IsNumber(c) ? (long)c->valuedouble : 0;
        cJSON_Delete(out);
    }
    return NULL;
}

static int one(const char *dir, struct orch *o, int threads, int runs)
{
    struct fo_err err;
    struct ledger *l = NULL;
    int64_t before = 0, after = 0;
    if (ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err) ||
        ledger_count(l, &before, &err)) {
        fprintf(stderr, "%s: %s\n", dir, err.msg);
        ledger_close(l);
        return 1;
    }
    struct shared s = {.dir = dir, .o = o, .runs = runs};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    struct daemon_config dc;
    daemon_config_init(&dc);
    dc.dir = dir;
    dc.orch = o;
    dc.max_runs = threads;
    if (daemon_embed_start(&dc, 0, &s.host, &err)) {
        fprintf(stderr, "host: %s\n", err.msg);
        ledger_close(l);
        return 1;
    }
    struct worker *w = calloc((size_t)threads, sizeof(*w));
    int started = 0;
    for (int i = 0; w && i < threads; i++) {
        w[i].s = &s;
        if (pthread_create(&w[i].th, NULL, work, &w[i]) != 0)
            break;
        started++;
    }
    pthread_mutex_lock(&s.mu);
    while (s.ready < started)
        pthread_cond_wait(&s.cv, &s.mu);
    double t0 = now_s();
    s.go = 1;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    long calls = 0, failed = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(w[i].th, NULL);
        calls += w[i].calls;
        failed += w[i].failed;
    }
    double dt = now_s() - t0;
    daemon_embed_stop(s.host, &err);
    ledger_count(l, &after, &err);
    long n_runs = (long)started * runs - failed;
    double entries = (double)(after - before);
    printf("%3d callers x %d runs: %ld runs (%ld failed), %.0f entries, "
           "%ld model calls in %.2f s\n",
           started, runs, n_runs, failed, entries, calls, dt);
    printf("  %.0f runs/s, %.0f entries/s, %.0f model calls/s; "
           "%.0f us of loop and witness per model call",
           n_runs / dt, entries / dt, calls / dt, dt / (double)calls * 1e6);
    printf("\n");
    free(w);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    ledger_close(l);
    return failed != 0;
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/forum-bench-loop-XXXXXX";
    const char *dir = argc > 1 && *argv[1] ? argv[1] : mkdtemp(tmpl);
    int threads = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 100;
    int runs = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 20;
    if (!dir || threads < 1 || threads > THREADS_MAX || runs < 1) {
        fprintf(stderr, "usage: bench_loop [DIR [THREADS [RUNS]]]\n");
        return 2;
    }
    struct orch *o = NULL;
    struct fo_err err;
    if (orch_create(NULL, &o, &err)) {
        fprintf(stderr, "orch: %s\n", err.msg);
        return 1;
    }
    printf("bench_loop: %s; each run: request route plan task result "
           "verdict answer, stub roles and lane\n",
           dir);
    int rc = one(dir, o, threads, runs);
    orch_free(o);
    return rc;
}
