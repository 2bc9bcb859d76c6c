/* bench_ledger: ledger write and verify throughput, printed as a table.
 * Usage: bench_ledger [--entries N] [--dir DIR]
 * Measures, in one run: durable appends with one transaction each, in five
 * rounds that each also measure the disk's fsync ceiling (write+fsync loop)
 * and a bare SQLite writer (the same pragmas, an entry row and a body row
 * per transaction, no hashing), so the ratios compare like with like on a
 * disk whose rate drifts; then appends in batches of 10, 100 and 1000 (the
 * last one filling the ledger to N entries with 256-byte bodies), then
 * verify and deep verify of all N, each in a child process so its peak RSS
 * is its own. Not a test: it asserts nothing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "ledger/ledger.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double fsync_ceiling(const char *dir, double seconds)
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
    while (now() - t0 < seconds) {
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

/* A bare SQLite writer with the ledger's pragmas: one transaction per
 * append writing a 150-byte entry row and a 256-byte body row, no hashing.
 * What SQLite itself allows on this disk, for comparison. */
struct probe {
    sqlite3 *db;
    sqlite3_stmt *q[4]; /* begin, entry, body, commit */
    char path[4096];
    int next;
};

static void probe_close(struct probe *p)
{
    for (int i = 0; i < 4; i++)
        sqlite3_finalize(p->q[i]);
    sqlite3_close(p->db);
    static const char *const sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char f[4200];
        snprintf(f, sizeof(f), "%s%s", p->path, sfx[i]);
        unlink(f);
    }
}

static int probe_open(struct probe *p, const char *dir)
{
    static const char *const sql[4] = {
        "BEGIN IMMEDIATE", "INSERT INTO e VALUES(?1, ?2)",
        "INSERT INTO b VALUES(?1, ?2)", "COMMIT"};
    memset(p, 0, sizeof(*p));
    snprintf(p->path, sizeof(p->path), "%s/sqlite-probe.db", dir);
    if (sqlite3_open(p->path, &p->db) != SQLITE_OK ||
        sqlite3_exec(p->db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     " CREATE TABLE e(seq INTEGER PRIMARY KEY, row BLOB);"
                     " CREATE TABLE b(seq INTEGER PRIMARY KEY, body BLOB);",
                     NULL, NULL, NULL) != SQLITE_OK)
        return -1;
    for (int i = 0; i < 4; i++)
        if (sqlite3_prepare_v2(p->db, sql[i], -1, &p->q[i], NULL) != SQLITE_OK)
            return -1;
    return 0;
}

/* Returns transactions per second, 0 on an error. */
static double probe_rate(struct probe *p, int n)
{
    static const char row[150] = {1};
    static const char bodyb[256] = {2};
    double t0 = now();
    for (int i = 0; i < n; i++, p->next++) {
        sqlite3_bind_int(p->q[1], 1, p->next);
        sqlite3_bind_blob(p->q[1], 2, row, sizeof(row), SQLITE_STATIC);
        sqlite3_bind_int(p->q[2], 1, p->next);
        sqlite3_bind_blob(p->q[2], 2, bodyb, sizeof(bodyb), SQLITE_STATIC);
        for (int k = 0; k < 4; k++) {
            if (sqlite3_step(p->q[k]) != SQLITE_DONE)
                return 0;
            sqlite3_reset(p->q[k]);
        }
    }
    return n / (now() - t0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_ledger: %s: %s\n", dir, strerror(errno));
        return 3;
    }
    char ldir[4096];
    snprintf(ldir, sizeof(ldir), "%s/ledger", dir);
    printf("forum ledger benchmark: %lld entries, 256-byte bodies, dir %s\n",
           entries, dir);

    struct ledger *l = NULL;
    struct fo_err err;
    if (ledger_open(ldir, LEDGER_OPEN_CREATE, NULL, &l, &err) != FO_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 3;
    }
    enum { ROUNDS = 5, SINGLE = 1000 };
    double ceil_r[ROUNDS], led_r[ROUNDS], sql_r[ROUNDS];
    double led_ratio[ROUNDS], sql_ratio[ROUNDS];
    struct probe probe;
    if (probe_open(&probe, dir) != 0) {
        fprintf(stderr, "sqlite probe: %s\n", sqlite3_errmsg(probe.db));
        return 3;
    }
    /* A first round, not counted, takes both WAL files past their first
     * growth (appends that extend a file cost more than overwrites). */
    append_rate(l, 2 * SINGLE, 1);
    probe_rate(&probe, 2 * SINGLE);
    printf("one transaction per append, %d rounds of %d after %d of warm-up:"
           "\n",
           ROUNDS, SINGLE, 2 * SINGLE);
    printf("  %-5s %14s %14s %14s %9s %9s\n", "round", "fsync/s", "ledger/s",
           "sqlite/s", "ledger%", "sqlite%");
    for (int r = 0; r < ROUNDS; r++) {
        ceil_r[r] = fsync_ceiling(dir, 1.0);
        led_r[r] = append_rate(l, SINGLE, 1);
        sql_r[r] = probe_rate(&probe, SINGLE);
        led_ratio[r] = 100 * led_r[r] / ceil_r[r];
        sql_ratio[r] = 100 * sql_r[r] / ceil_r[r];
        printf("  %-5d %14.0f %14.0f %14.0f %8.0f%% %8.0f%%\n", r + 1,
               ceil_r[r], led_r[r], sql_r[r], led_ratio[r], sql_ratio[r]);
    }
    probe_close(&probe);
    double ceiling = median(ceil_r, ROUNDS);
    printf("%-44s %12.0f /s\n", "fsync ceiling (4 KiB write + fsync), median",
           ceiling);
    printf("%-44s %12.0f /s  (median %.0f%% of the fsync ceiling)\n",
           "appends, one transaction each", median(led_r, ROUNDS),
           median(led_ratio, ROUNDS));
    printf("%-44s %12.0f /s  (median %.0f%% of the fsync ceiling)\n",
           "bare SQLite, one transaction each", median(sql_r, ROUNDS),
           median(sql_ratio, ROUNDS));
    double r10 = append_rate(l, 20000, 10);
    printf("%-44s %12.0f /s\n", "appends, batches of 10", r10);
    double r100 = append_rate(l, 100000, 100);
    printf("%-44s %12.0f /s\n", "appends, batches of 100", r100);
    long long so_far = (ROUNDS + 2) * SINGLE + 20000 + 100000;
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
