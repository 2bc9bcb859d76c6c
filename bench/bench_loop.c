/* bench_loop: the control loop's overhead with instant models. N threads
 * (default 100) each run R small submits (default 20) at once in one process
 * on one ledger, every role and task a stub (an instant model), writing
 * either through the daemon's group committer (as the daemon's workers and
 * background runs do) or with plain appends (each entry its own
 * transaction). Prints runs, entries and model calls per second.
 * Usage: bench_loop [DIR [THREADS [RUNS]]]. Asserts nothing. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/commit.h"
#include "daemon/orch.h"
#include "ledger/fo_json.h"

#define THREADS_MAX 1000

struct shared {
    const char *dir;
    const struct orch *o;
    struct daemon_commit *commit; /* NULL: plain appends */
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
    struct ledger *l = NULL;
    struct fo_err err;
    if (ledger_open(s->dir, 0, NULL, &l, &err)) {
        fprintf(stderr, "open: %s\n", err.msg);
        w->failed = s->runs;
    }
    pthread_mutex_lock(&s->mu); /* start together */
    s->ready++;
    pthread_cond_broadcast(&s->cv);
    while (!s->go)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    struct orch_witness wit = {.ledger = l};
    if (s->commit) {
        wit.append = daemon_commit_append_sync;
        wit.hook = s->commit;
    }
    for (int i = 0; l && i < s->runs; i++) {
        cJSON *out = NULL;
        if (orch_submit(s->o, &wit, "echo the ledger entry back", NULL, &out,
                        &err) != FO_OK) {
            if (!w->failed++)
                fprintf(stderr, "submit: %s\n", err.msg);
            continue;
        }
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(out, "model_calls");
        w->calls += cJSON_IsNumber(c) ? (long)c->valuedouble : 0;
        cJSON_Delete(out);
    }
    ledger_close(l);
    return NULL;
}

static int one(const char *dir, const struct orch *o, int group, int threads,
               int runs)
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
    struct daemon_commit_config cc = {.sign_interval_ms = -1};
    if (group && daemon_commit_create(dir, &cc, &s.commit, &err)) {
        fprintf(stderr, "commit: %s\n", err.msg);
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
    struct daemon_commit_stats st = {0};
    if (s.commit) {
        daemon_commit_stats(s.commit, &st);
        daemon_commit_free(s.commit);
    }
    ledger_count(l, &after, &err);
    long n_runs = (long)started * runs - failed;
    double entries = (double)(after - before);
    printf("%-14s %3d threads x %d runs: %ld runs (%ld failed), %.0f entries, "
           "%ld model calls in %.2f s\n",
           group ? "group commit:" : "plain appends:", started, runs, n_runs,
           failed, entries, calls, dt);
    printf("  %.0f runs/s, %.0f entries/s, %.0f model calls/s; "
           "%.0f us of loop and witness per model call",
           n_runs / dt, entries / dt, calls / dt, dt / (double)calls * 1e6);
    if (s.commit && st.commits)
        printf("; %.1f appends per commit",
               (double)st.batch_sum / (double)st.commits);
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
    int rc = one(dir, o, 1, threads, runs);
    rc |= one(dir, o, 0, threads, runs);
    orch_free(o);
    return rc;
}
