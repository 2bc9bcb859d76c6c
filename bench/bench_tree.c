/* bench_tree: what the Merkle tree costs on the write path. Appends the
 * same N entries (256-byte bodies, batches of 1000) to two fresh ledgers,
 * one with the tree kept in the append transaction and one without
 * (ledger_bench_skip_tree), alternating rounds so disk noise hits both, and
 * prints the median rates and the overhead. Not a test: asserts nothing.
 * Usage: bench_tree [--entries N] [--rounds R] [--dir DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ledger/ledger.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { BATCH = 1000 };
static struct ledger_append reqs[BATCH];
static char bodies[BATCH][257];

/* Appends n entries to a fresh ledger in dir; returns appends/s. */
static double fill(const char *dir, long long n, int skip_tree)
{
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        return 0;
    struct ledger *l = NULL;
    struct fo_err err;
    if (ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err)) {
        fprintf(stderr, "bench_tree: %s\n", err.msg);
        exit(3);
    }
    ledger_bench_skip_tree(l, skip_tree);
    double t0 = now();
    for (long long done = 0; done < n;) {
        size_t b = (size_t)(n - done < BATCH ? n - done : BATCH);
        for (size_t i = 0; i < b; i++) {
            int k = snprintf(bodies[i], 257, "{\"i\":%lld,\"pad\":\"",
                             done + (long long)i);
            memset(bodies[i] + k, 'p', 254 - (size_t)k);
            memcpy(bodies[i] + 254, "\"}", 3);
            reqs[i] = (struct ledger_append){.actor = "bench",
                                             .kind = "step",
                                             .parent = LEDGER_NO_PARENT,
                                             .body = bodies[i],
                                             .body_len = 256};
        }
        if (ledger_append_batch(l, reqs, b, &err)) {
            fprintf(stderr, "bench_tree: append: %s\n", err.msg);
            exit(3);
        }
        done += (long long)b;
    }
    double rate = (double)n / (now() - t0);
    ledger_close(l);
    return rate;
}

int main(int argc, char **argv)
{
    long long n = 200000;
    int rounds = 5;
    const char *base = "/tmp/forum-bench-tree";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--entries"))
            n = strtoll(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = (int)strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--dir"))
            base = argv[i + 1];
    }
    if (n < 1 || rounds < 1 || rounds > 100) {
        fprintf(stderr, "usage: bench_tree [--entries N] [--rounds R] "
                        "[--dir DIR]\n");
        return 2;
    }
    char with[4096], without[4096];
    snprintf(with, sizeof(with), "%s-with", base);
    snprintf(without, sizeof(without), "%s-without", base);
    double a[100], b[100];
    printf("tree upkeep: %lld appends of 256-byte bodies in batches of %d, "
           "%d rounds\n",
           n, BATCH, rounds);
    for (int r = 0; r < rounds; r++) {
        a[r] = fill(with, n, 0);
        b[r] = fill(without, n, 1);
        printf("  round %d: with tree %.0f/s, without %.0f/s\n", r + 1, a[r],
               b[r]);
        fflush(stdout);
    }
    qsort(a, (size_t)rounds, sizeof(a[0]), cmp);
    qsort(b, (size_t)rounds, sizeof(b[0]), cmp);
    double ma = a[rounds / 2], mb = b[rounds / 2];
    printf("median: with tree %.0f appends/s, without %.0f appends/s\n", ma,
           mb);
    printf("tree upkeep: %.1f%% of the append cost (target < 15%%)\n",
           (1.0 / ma - 1.0 / mb) / (1.0 / ma) * 100.0);
    char cmd[9000];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", with, without);
    return system(cmd) == 0 ? 0 : 3;
}
