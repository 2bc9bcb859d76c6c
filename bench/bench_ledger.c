/* bench_ledger: ledger write and verify throughput, printed as a table.
 * Usage: bench_ledger [--entries N] [--dir DIR]
 * Measures, in one run: the disk's fsync ceiling (write+fsync loop), durable
 * appends with one transaction each and in batches of 10, 100 and 1000
 * (the last one filling the ledger to N entries with 256-byte bodies), then
 * verify and deep verify of all N, each in a child process so its peak RSS
 * is its own. Not a test: it asserts nothing. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ledger/ledger.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double fsync_ceiling(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/fsync-probe", dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    char block[4096];
    memset(block, 'x', sizeof(block));
    int n = 0;
    double t0 = now();
    while (now() - t0 < 2.0) {
        if (pwrite(fd, block, sizeof(block), (off_t)(n % 64) * 4096) < 0 ||
            fsync(fd) != 0)
            break;
        n++;
    }
    double rate = n / (now() - t0);
    close(fd);
    unlink(path);
    return rate;
}

static char body[257];

static void make_body(long long i)
{
    int n = snprintf(body, sizeof(body), "{\"i\":%lld,\"pad\":\"", i);
    memset(body + n, 'p', 256 - (size_t)n - 2);
    body[254] = '"';
    body[255] = '}';
    body[256] = '\0';
}

/* Appends n entries in batches of `batch`; returns appends per second. */
static double append_rate(struct ledger *l, long long n, int batch)
{
    struct ledger_append *reqs = calloc((size_t)batch, sizeof(*reqs));
    struct fo_err err;
    double t0 = now();
    long long done = 0;
    while (done < n) {
        int k = (int)(n - done < batch ? n - done : batch);
        make_body(done);
        for (int i = 0; i < k; i++)
            reqs[i] = (struct ledger_append){.actor = "bench",
                                             .kind = "step",
                                             .parent = LEDGER_NO_PARENT,
                                             .body = body,
                                             .body_len = 256};
        if (ledger_append_batch(l, reqs, (size_t)k, &err) != FO_OK) {
            fprintf(stderr, "append: %s\n", err.msg);
            exit(3);
        }
        done += k;
        if (batch >= 1000 && done % 100000 == 0)
            fprintf(stderr, "\r  filled %lld / %lld", done, n);
    }
    if (batch >= 1000)
        fputc('\n', stderr);
    free(reqs);
    return (double)n / (now() - t0);
}

struct verify_figures {
    double seconds;
    long long entries, bodies;
    long rss_kib;
    int ok;
};

static struct verify_figures verify_child(const char *dir, int deep)
{
    struct verify_figures f = {0};
    int fds[2];
    if (pipe(fds) != 0)
        return f;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        struct ledger *l = NULL;
        struct fo_err err;
        if (ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err) != FO_OK)
            _exit(3);
        struct ledger_verify_result r;
        double t0 = now();
        int rc = ledger_verify(l, deep ? LEDGER_VERIFY_DEEP : 0, NULL, NULL, &r,
                               &err);
        f.seconds = now() - t0;
        f.entries = r.entries;
        f.bodies = r.bodies_checked;
        f.ok = rc == FO_OK && r.ok;
        ledger_close(l);
        if (write(fds[1], &f, sizeof(f)) != sizeof(f))
            _exit(3);
        _exit(0);
    }
    close(fds[1]);
    if (read(fds[0], &f, sizeof(f)) != sizeof(f))
        f.ok = 0;
    close(fds[0]);
    int st;
    struct rusage ru;
    wait4(pid, &st, 0, &ru);
    f.rss_kib = ru.ru_maxrss;
    return f;
}

int main(int argc, char **argv)
{
    long long entries = 1000000;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--entries") && i + 1 < argc)
            entries = strtoll(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else {
            fprintf(stderr, "usage: bench_ledger [--entries N] [--dir DIR]\n");
            return 2;
        }
    }
    char tmpl[] = "/tmp/forum-bench-XXXXXX";
    if (!dir && !(dir = mkdtemp(tmpl))) {
        perror("mkdtemp");
        return 3;
    }
    char ldir[4096];
    snprintf(ldir, sizeof(ldir), "%s/ledger", dir);
    printf("forum ledger benchmark: %lld entries, 256-byte bodies, dir %s\n",
           entries, dir);
    double ceiling = fsync_ceiling(dir);
    printf("%-44s %12.0f /s\n", "fsync ceiling (4 KiB write + fsync)", ceiling);

    struct ledger *l = NULL;
    struct fo_err err;
    if (ledger_open(ldir, LEDGER_OPEN_CREATE, NULL, &l, &err) != FO_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 3;
    }
    double r1 = append_rate(l, 3000, 1);
    printf("%-44s %12.0f /s  (%.0f%% of the fsync ceiling)\n",
           "appends, one transaction each", r1, 100 * r1 / ceiling);
    double r10 = append_rate(l, 20000, 10);
    printf("%-44s %12.0f /s\n", "appends, batches of 10", r10);
    double r100 = append_rate(l, 100000, 100);
    printf("%-44s %12.0f /s\n", "appends, batches of 100", r100);
    long long so_far = 3000 + 20000 + 100000;
    long long rest = entries > so_far ? entries - so_far : 0;
    double r1000 = append_rate(l, rest, 1000);
    printf("%-44s %12.0f /s  (to %lld entries)\n", "appends, batches of 1000",
           r1000, entries);
    ledger_close(l);

    struct verify_figures v = verify_child(ldir, 0);
    printf("%-44s %12.0f /s  (%.2f s, %s, peak RSS %ld MiB)\n",
           "verify (chain + tree)", v.entries / v.seconds, v.seconds,
           v.ok ? "ok" : "FAILED", v.rss_kib / 1024);
    struct verify_figures d = verify_child(ldir, 1);
    printf("%-44s %12.0f /s  (%.0f MB/s of bodies, %.2f s, %s, peak RSS "
           "%ld MiB)\n",
           "deep verify (+ every body)", d.entries / d.seconds,
           d.bodies * 256.0 / d.seconds / 1e6, d.seconds,
           d.ok ? "ok" : "FAILED", d.rss_kib / 1024);
    return 0;
}
