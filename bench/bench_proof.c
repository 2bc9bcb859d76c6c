/* bench_proof: latency of a tree root, an inclusion proof and a consistency
 * proof read from the stored tree, at N entries (default 1,000,000).
 * Usage: bench_proof [--entries N] [--dir DIR] [--samples K]
 * Fills a ledger (batches of 1000 small entries; reuses DIR when it already
 * holds N), then times K random requests of each kind and prints the median
 * and p99 in microseconds. Not a test: it asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/ledger.h"
#include "ledger/proof.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int k)
{
    qsort(t, (size_t)k, sizeof(*t), cmp_double);
    printf("%-22s median %8.1f us   p99 %8.1f us\n", what, t[k / 2],
           t[(k * 99) / 100]);
}

static long long arg_num(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    return *end || v <= 0 ? -1 : v;
}

int main(int argc, char **argv)
{
    long long n = 1000000, k = 1000;
    const char *dir = "/tmp/forum-bench-proof";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--entries"))
            n = arg_num(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--samples"))
            k = arg_num(argv[i + 1]);
    }
    if (n < 2 || k < 1) {
        fprintf(stderr, "usage: bench_proof [--entries N] [--dir DIR] "
                        "[--samples K]\n");
        return 2;
    }
    struct ledger *l = NULL;
    struct fo_err err;
    if (ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err)) {
        fprintf(stderr, "bench_proof: %s\n", err.msg);
        return 3;
    }
    int64_t count = 0;
    ledger_count(l, &count, &err);
    enum { BATCH = 1000 };
    static struct ledger_append reqs[BATCH];
    double t0 = now_us();
    while (count < n) {
        size_t b = (size_t)(n - count < BATCH ? n - count : BATCH);
        for (size_t i = 0; i < b; i++)
            reqs[i] = (struct ledger_append){.actor = "bench",
                                             .kind = "step",
                                             .parent = LEDGER_NO_PARENT,
                                             .body = "{\"x\":1}",
                                             .body_len = 7};
        if (ledger_append_batch(l, reqs, b, &err)) {
            fprintf(stderr, "bench_proof: append: %s\n", err.msg);
            return 3;
        }
        count += (int64_t)b;
    }
    printf("ledger %s: %lld entries (filled in %.1f s)\n", dir,
           (long long)count, (now_us() - t0) / 1e6);
    double *t = malloc((size_t)k * sizeof(*t));
    struct ledger_inclusion *ip = malloc(sizeof(*ip));
    struct ledger_consistency *cp = malloc(sizeof(*cp));
    if (!t || !ip || !cp)
        return 3;
    srand(7);
    uint8_t root[32];
    for (long long i = 0; i < k; i++) {
        int64_t s =
            1 + (int64_t)((double)rand() / RAND_MAX * (double)(count - 1));
        double a = now_us();
        if (ledger_root(l, s, root, &err))
            return 3;
        t[i] = now_us() - a;
    }
    report("root (random size)", t, (int)k);
    for (long long i = 0; i < k; i++) {
        int64_t idx =
            (int64_t)((double)rand() / RAND_MAX * (double)(count - 1));
        double a = now_us();
        if (ledger_prove_inclusion(l, idx, -1, ip, &err))
            return 3;
        t[i] = now_us() - a;
    }
    report("inclusion (at N)", t, (int)k);
    for (long long i = 0; i < k; i++) {
        int64_t f =
            1 + (int64_t)((double)rand() / RAND_MAX * (double)(count - 2));
        double a = now_us();
        if (ledger_prove_consistency(l, f, -1, cp, &err))
            return 3;
        t[i] = now_us() - a;
    }
    report("consistency (to N)", t, (int)k);
    free(t);
    free(ip);
    free(cp);
    ledger_close(l);
    return 0;
}
