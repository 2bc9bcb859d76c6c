/* bench_multiwriter: several daemons on one PostgreSQL ledger.
 * Prints figures, asserts nothing.
 *
 *   bench_multiwriter [--seconds S] [--conns C] [--split] [--rounds R]
 *                     [--loader-cpu N] [--kills K]
 *
 * Starts a throwaway PostgreSQL (tests/tu_pg.c: initdb in a temp dir, Unix
 * socket), then:
 *   - appends/s with 1, 2 and 3 `forum serve` daemons on one PostgreSQL
 *     ledger (each its own data dir and a fresh database per row), C
 *     keep-alive connections per daemon (default 64) each sending POST
 *     /append one after the other for S seconds (default 10); and one
 *     daemon on SQLite for comparison. --split: C connections in all,
 *     split across the daemons. --rounds R: the three PostgreSQL rows R
 *     times (at most 15), the median of each. --loader-cpu N: the load
 *     generator's threads pinned to CPU N. Each row also gives the entries
 *     per sequencing transaction (/metrics) and the cores the daemons, the
 *     server's processes and the load generator used (/proc);
 *   - run failover: two daemons (--lease-s 1) and the fake model
 *     (build/fake_model, 200 ms a call); a run is started on daemon A, A
 *     is SIGKILLed once the run is under way, and the time from the kill
 *     until daemon B has resumed the run (its resume entry names B) is
 *     taken; K times (default 20), A restarted each time. p50 / p99;
 *   - integrator failover: two daemons (--lease-s 1); the one holding the
 *     integration lease is SIGKILLed and the time until the other's next
 *     append is acknowledged (it took the lease over) is taken, K times.
 * The 1, 2 and 3 daemon rows run in one process, one after the other, on
 * one server: compare them with each other, not with another run.
 * FORUM_BIN (default: forum beside this binary) is the daemon. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "ledger/fo_json.h"
#include "tests/tu_pg.h"

static char forum_bin[1100], fake_bin[1100];
static int loader_cpu = -1; /* the load generator's one CPU (-1: any) */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int run_cmd(const char *const argv[])
{
    pid_t p = fork();
    if (p == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *mkdtemp_dir(void)
{
    char *d = strdup("/tmp/forum-bench-mw-XXXXXX");
    if (!d || !mkdtemp(d)) {
        perror("mkdtemp");
        exit(1);
    }
    return d;
}

static void rmrf(const char *dir)
{
    const char *argv[] = {"/bin/rm", "-rf", dir, NULL};
    run_cmd(argv);
}

static void copy_key(const char *from, const char *to, const char *name)
{
    char a[1024], b[1024];
    snprintf(a, sizeof(a), "%s/%s", from, name);
    snprintf(b, sizeof(b), "%s/%s", to, name);
    const char *argv[] = {"/bin/cp", a, b, NULL};
    run_cmd(argv);
}

struct daemon {
    pid_t pid;
    int port;
    char token[128];
    char dir[512];
};

/* forum --ledger dir serve --port 0 [extra...]: waits for its line. */
static int daemon_start(struct daemon *d, const char *dir, const char *extra[])
{
    const char *argv[32];
    int n = 0;
    argv[n++] = forum_bin;
    argv[n++] = "--ledger";
    argv[n++] = dir;
    argv[n++] = "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    for (int i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    int p[2];
    if (pipe(p))
        return -1;
    d->pid = fork();
    if (d->pid == 0) {
        dup2(p[1], 1);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        close(p[0]);
        execv(forum_bin, (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(p[1]);
    char line[256] = "";
    size_t got = 0;
    while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        if (poll(&pf, 1, 20000) <= 0)
            break;
        ssize_t r = read(p[0], line + got, sizeof(line) - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(p[0]);
    const char *colon = strrchr(line, ':');
    if (!colon) {
        fprintf(stderr, "daemon on %s did not start\n", dir);
        return -1;
    }
    d->port = (int)strtol(colon + 1, NULL, 10);
    snprintf(d->dir, sizeof(d->dir), "%s", dir);
    char tp[600];
    snprintf(tp, sizeof(tp), "%s/token", dir);
    FILE *f = fopen(tp, "r");
    if (!f || !fgets(d->token, sizeof(d->token), f))
        return -1;
    fclose(f);
    d->token[strcspn(d->token, "\n")] = '\0';
    return 0;
}

static void daemon_stop(struct daemon *d, int sig)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, sig);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
}

/* ---- a keep-alive HTTP/1.1 client ------------------------------------- */

static int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One request on fd; the status, the body into body (cap). -1 on a
 * broken connection. */
static int http_do(int fd, const struct daemon *d, const char *method,
                   const char *path, const char *json, char *body, size_t cap)
{
    char req[2048];
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Authorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, d->token, json ? strlen(json) : 0,
                     json ? json : "");
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        return -1;
    char buf[65536];
    size_t len = 0;
    char *end = NULL;
    while (!end) {
        ssize_t r = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (r <= 0)
            return -1;
        len += (size_t)r;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    int status = (int)strtol(buf + 9, NULL, 10);
    const char *cl = strcasestr(buf, "content-length:");
    size_t want = cl ? (size_t)strtol(cl + 15, NULL, 10) : 0;
    size_t hdr = (size_t)(end + 4 - buf);
    while (len - hdr < want) {
        ssize_t r = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (r <= 0)
            return -1;
        len += (size_t)r;
    }
    if (body && cap) {
        size_t m = want < cap - 1 ? want : cap - 1;
        memcpy(body, buf + hdr, m);
        body[m] = '\0';
    }
    return status;
}

static int http_once(const struct daemon *d, const char *method,
                     const char *path, const char *json, char *body, size_t cap)
{
    int fd = connect_port(d->port);
    if (fd < 0)
        return -1;
    int st = http_do(fd, d, method, path, json, body, cap);
    close(fd);
    return st;
}

/* ---- appends/s -------------------------------------------------------- */

struct loader {
    const struct daemon *d;
    double until;
    long ok, failed;
};

static void *load_main(void *arg)
{
    struct loader *l = arg;
    int fd = connect_port(l->d->port);
    char body[256];
    snprintf(body, sizeof(body),
             "{\"actor\":\"bench\",\"kind\":\"note\",\"payload\":{\"text\":"
             "\"an entry of about two hundred bytes, as bench/http.sh "
             "sends\",\"n\":%d}}",
             l->d->port);
    while (fd >= 0 && now_s() < l->until) {
        int st = http_do(fd, l->d, "POST", "/append", body, NULL, 0);
        if (st == 200)
            l->ok++;
        else
            l->failed++;
        if (st < 0) {
            close(fd);
            fd = connect_port(l->d->port);
        }
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static double measure(struct daemon *ds, int n, int conns, double secs,
                      long *failed)
{
    int total = n * conns;
    pthread_t *t = calloc((size_t)total, sizeof(*t));
    struct loader *l = calloc((size_t)total, sizeof(*l));
    double t0 = now_s(), until = t0 + secs;
    for (int i = 0; i < total; i++) {
        l[i] = (struct loader){.d = &ds[i % n], .until = until};
        pthread_attr_t at;
        pthread_attr_init(&at);
        if (loader_cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(loader_cpu, &set);
            pthread_attr_setaffinity_np(&at, sizeof(set), &set);
        }
        pthread_create(&t[i], &at, load_main, &l[i]);
        pthread_attr_destroy(&at);
    }
    long ok = 0;
    *failed = 0;
    for (int i = 0; i < total; i++) {
        pthread_join(t[i], NULL);
        ok += l[i].ok;
        *failed += l[i].failed;
    }
    double el = now_s() - t0;
    free(t);
    free(l);
    return (double)ok / el;
}

/* ---- CPU accounting --------------------------------------------------- */

/* utime + stime of pid (with its reaped children when kids), in ticks. */
static long long cpu_ticks(pid_t pid, int kids, pid_t *ppid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    long long v[16] = {0};
    int k = 0;
    for (p = p ? p + 2 : buf; *p && k < 16; k++) { /* fields 3..18 */
        char *end;
        v[k] = strtoll(p, &end, 10);
        if (k == 0) /* the state: a letter */
            end = (char *)strchr(p, ' ');
        if (!end || *end != ' ')
            break;
        p = end + 1;
    }
    if (ppid)
        *ppid = (pid_t)v[1];
    return v[11] + v[12] + (kids ? v[13] + v[14] : 0);
}

/* The server's CPU: the postmaster (with the backends it reaped) and
 * every process it started that still runs. */
static long long pg_ticks(const struct tu_pg *pg)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/data/postmaster.pid", pg->dir);
    FILE *f = fopen(path, "r");
    long pm = 0;
    if (!f || fscanf(f, "%ld", &pm) != 1) {
        if (f)
            fclose(f);
        return 0;
    }
    fclose(f);
    long long t = cpu_ticks((pid_t)pm, 1, NULL);
    FILE *ls = popen("ls /proc", "r");
    char name[64];
    while (ls && fgets(name, sizeof(name), ls)) {
        pid_t pid = (pid_t)strtol(name, NULL, 10), pp = 0;
        if (pid <= 0 || pid == (pid_t)pm)
            continue;
        long long c = cpu_ticks(pid, 0, &pp);
        if (pp == (pid_t)pm)
            t += c;
    }
    if (ls)
        pclose(ls);
    return t;
}

static double self_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A counter of d's /metrics (0 when absent). */
static double metric(const struct daemon *d, const char *name)
{
    static char m[65536];
    if (http_once(d, "GET", "/metrics", NULL, m, sizeof(m)) != 200)
        return 0;
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = strstr(m, key);
    return p ? strtod(p + strlen(key), NULL) : 0;
}

/* Cores used over a row: daemons, server, load generator. */
struct cpu_use {
    double daemons, server, loader;
};

/* n daemons on a fresh database of pg (or one on SQLite when pg NULL);
 * conns per daemon. The appends/s; cpu gets the cores each side used. */
static double row(struct tu_pg *pg, int n, int conns, double secs,
                  struct cpu_use *cpu)
{
    struct daemon ds[3] = {0};
    char *dirs[3] = {0};
    char conninfo[512] = "";
    if (pg) {
        char db[64], why[1024];
        if (tu_pg_createdb(pg, db, sizeof(db), why, sizeof(why))) {
            fprintf(stderr, "createdb: %s\n", why);
            exit(1);
        }
        tu_pg_conninfo(pg, db, conninfo, sizeof(conninfo));
    }
    const char *extra[] = {"--workers", "2", NULL};
    for (int i = 0; i < n; i++) {
        dirs[i] = mkdtemp_dir();
        char sub[600];
        snprintf(sub, sizeof(sub), "%s/d", dirs[i]);
        free(dirs[i]);
        dirs[i] = strdup(sub);
        const char *init_pg[] = {forum_bin, "--ledger",   dirs[i],  "ledger",
                                 "init",    "--postgres", conninfo, NULL};
        const char *init_sq[] = {forum_bin, "--ledger", dirs[i],
                                 "ledger",  "init",     NULL};
        if (run_cmd(pg ? init_pg : init_sq) != 0) {
            fprintf(stderr, "init %s failed\n", dirs[i]);
            exit(1);
        }
        const char *key[] = {forum_bin, "--ledger", dirs[0],
                             "ledger",  "key",      NULL};
        if (i == 0)
            run_cmd(key);
        else {
            copy_key(dirs[0], dirs[i], "checkpoint.key");
            copy_key(dirs[0], dirs[i], "checkpoint.vkey");
        }
        if (daemon_start(&ds[i], dirs[i], extra))
            exit(1);
    }
    long failed = 0;
    double hz = (double)sysconf(_SC_CLK_TCK), t0 = now_s();
    long long d0 = 0, d1 = 0, s0 = pg ? pg_ticks(pg) : 0;
    for (int i = 0; i < n; i++)
        d0 += cpu_ticks(ds[i].pid, 0, NULL);
    double l0 = self_cpu();
    double rate = measure(ds, n, conns, secs, &failed);
    double l1 = self_cpu(), el = now_s() - t0;
    for (int i = 0; i < n; i++)
        d1 += cpu_ticks(ds[i].pid, 0, NULL);
    long long s1 = pg ? pg_ticks(pg) : 0;
    cpu->daemons = (double)(d1 - d0) / hz / el;
    cpu->server = (double)(s1 - s0) / hz / el;
    cpu->loader = (l1 - l0) / el;
    double txns = 0, entries = 0;
    for (int i = 0; i < n; i++) { /* the transactions that sequence */
        txns += metric(&ds[i], "forum_commits_total");
        entries += metric(&ds[i], "forum_commit_batch_size_sum") +
                   metric(&ds[i], "forum_appends_integrated_total");
    }
    for (int i = 0; i < n; i++)
        daemon_stop(&ds[i], SIGTERM);
    const char *verify[] = {forum_bin, "--ledger", dirs[0],
                            "ledger",  "verify",   NULL};
    int v = run_cmd(verify);
    printf("| %-10s | %d | %4d | %9.0f | %6ld | %s | %.0f | %.2f | %.2f | "
           "%.2f |\n",
           pg ? "postgres" : "sqlite", n, conns * n, rate, failed,
           v == 0 ? "ok" : "FAILED", txns ? entries / txns : 0, cpu->daemons,
           cpu->server, cpu->loader);
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        char *slash = strrchr(dirs[i], '/');
        *slash = '\0';
        rmrf(dirs[i]);
        free(dirs[i]);
    }
    return v == 0 ? rate : 0;
}

/* ---- failover --------------------------------------------------------- */

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void failover(struct tu_pg *pg, int kills)
{
    /* the fake model */
    int p[2];
    if (pipe(p))
        return;
    pid_t fake = fork();
    if (fake == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl(fake_bin, fake_bin, "--port", "0", "--delay-ms", "200",
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[64] = "";
    FILE *in = fdopen(p[0], "r");
    if (!in || !fgets(line, sizeof(line), in)) {
        fprintf(stderr, "fake_model did not start\n");
        return;
    }
    fclose(in);
    int fport = 0;
    sscanf(line, "port %d", &fport);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", fport);
    char db[64], why[1024], conninfo[512];
    if (tu_pg_createdb(pg, db, sizeof(db), why, sizeof(why)))
        return;
    tu_pg_conninfo(pg, db, conninfo, sizeof(conninfo));
    char *dirs[2];
    struct daemon ds[2] = {0};
    const char *extra[] = {"--lease-s", "1",    "--chat-url", url,
                           "--model",   "fake", NULL};
    for (int i = 0; i < 2; i++) {
        dirs[i] = mkdtemp_dir();
        const char *init_pg[] = {forum_bin, "--ledger",   dirs[i],  "ledger",
                                 "init",    "--postgres", conninfo, NULL};
        run_cmd(init_pg);
        const char *key[] = {forum_bin, "--ledger", dirs[0],
                             "ledger",  "key",      NULL};
        if (i == 0)
            run_cmd(key);
        else {
            copy_key(dirs[0], dirs[i], "checkpoint.key");
            copy_key(dirs[0], dirs[i], "checkpoint.vkey");
        }
        if (daemon_start(&ds[i], dirs[i], extra))
            return;
    }
    double *t = calloc((size_t)kills, sizeof(*t));
    int done = 0;
    for (int k = 0; k < kills; k++) {
        char body[4096];
        if (http_once(&ds[0], "POST", "/runs",
                      "{\"request\":\"make the schema\"}", body,
                      sizeof(body)) != 200)
            break;
        cJSON *j = NULL;
        struct fo_err err;
        long long run = -1;
        if (fo_json_parse(body, strlen(body), &j, &err) == FO_OK) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "run");
            run = cJSON_IsNumber(r) ? (long long)r->valuedouble : -1;
        }
        cJSON_Delete(j);
        usleep(100 * 1000); /* under way: in its first model call */
        daemon_stop(&ds[0], SIGKILL);
        double t0 = now_s();
        char path[64];
        snprintf(path, sizeof(path), "/runs/%lld", run);
        for (;;) {
            if (http_once(&ds[1], "GET", path, NULL, body, sizeof(body)) ==
                    200 &&
                strstr(body, "\"kind\":\"resume\"")) {
                t[done++] = now_s() - t0;
                break;
            }
            if (now_s() - t0 > 60) {
                fprintf(stderr, "run %lld not resumed\n", run);
                break;
            }
            usleep(5000);
        }
        if (daemon_start(&ds[0], dirs[0], extra))
            break;
    }
    for (int i = 0; i < 2; i++)
        daemon_stop(&ds[i], SIGTERM);
    kill(fake, SIGTERM);
    waitpid(fake, NULL, 0);
    qsort(t, (size_t)done, sizeof(*t), cmpd);
    if (done)
        printf("\nrun failover (lease 1 s, two daemons, %d kills): "
               "kill -> resumed p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
               done, t[done / 2] * 1000,
               t[(int)((done - 1) * 0.99 + 0.5)] * 1000, t[done - 1] * 1000);
    free(t);
    for (int i = 0; i < 2; i++) {
        rmrf(dirs[i]);
        free(dirs[i]);
    }
}

/* ---- integrator failover ---------------------------------------------- */

/* 1 when d's /metrics says it integrates. */
static int integrates(const struct daemon *d)
{
    static char m[65536];
    if (http_once(d, "GET", "/metrics", NULL, m, sizeof(m)) != 200)
        return 0;
    return strstr(m, "\nforum_integrator 1\n") != NULL;
}

/* Two daemons (--lease-s 1) on one ledger: the integrator is SIGKILLed
 * and the other one's appends (one after another on one connection) are
 * timed from the kill until the first append sent after it is
 * acknowledged (the survivor took the lease over and integrated it); K
 * times, the killed one restarted each time (it comes back a writer, so
 * the roles alternate). */
static void integrator_failover(struct tu_pg *pg, int kills)
{
    char db[64], why[1024], conninfo[512];
    if (tu_pg_createdb(pg, db, sizeof(db), why, sizeof(why)))
        return;
    tu_pg_conninfo(pg, db, conninfo, sizeof(conninfo));
    char *dirs[2];
    struct daemon ds[2] = {0};
    const char *extra[] = {"--lease-s", "1", NULL};
    for (int i = 0; i < 2; i++) {
        dirs[i] = mkdtemp_dir();
        const char *init_pg[] = {forum_bin, "--ledger",   dirs[i],  "ledger",
                                 "init",    "--postgres", conninfo, NULL};
        run_cmd(init_pg);
        if (daemon_start(&ds[i], dirs[i], extra))
            return;
    }
    double *t = calloc((size_t)kills, sizeof(*t));
    int done = 0;
    const char *note = "{\"actor\":\"bench\",\"kind\":\"note\","
                       "\"payload\":{\"failover\":true}}";
    for (int k = 0; k < kills; k++) {
        int who = -1;
        for (double w0 = now_s(); who < 0 && now_s() - w0 < 30;) {
            for (int i = 0; i < 2 && who < 0; i++)
                if (integrates(&ds[i]))
                    who = i;
            if (who < 0)
                usleep(10000);
        }
        if (who < 0) {
            fprintf(stderr, "no integrator\n");
            break;
        }
        struct daemon *w = &ds[1 - who];
        /* the writer stages and is answered through the integrator */
        if (http_once(w, "POST", "/append", note, NULL, 0) != 200)
            break;
        daemon_stop(&ds[who], SIGKILL);
        double t0 = now_s();
        int fd = connect_port(w->port);
        int st = fd < 0 ? -1 : http_do(fd, w, "POST", "/append", note, NULL, 0);
        if (fd >= 0)
            close(fd);
        if (st != 200) {
            fprintf(stderr, "append after the kill: %d\n", st);
            break;
        }
        t[done++] = now_s() - t0;
        if (daemon_start(&ds[who], dirs[who], extra))
            break;
    }
    for (int i = 0; i < 2; i++)
        daemon_stop(&ds[i], SIGTERM);
    const char *verify[] = {forum_bin, "--ledger", dirs[0], "ledger",
                            "verify",  "--deep",   NULL};
    int v = run_cmd(verify);
    qsort(t, (size_t)done, sizeof(*t), cmpd);
    if (done)
        printf("\nintegrator failover (lease 1 s, two daemons, %d kills): "
               "kill -> the survivor's next append acknowledged p50 %.0f ms, "
               "p99 %.0f ms, max %.0f ms; verify --deep %s\n",
               done, t[done / 2] * 1000,
               t[(int)((done - 1) * 0.99 + 0.5)] * 1000, t[done - 1] * 1000,
               v == 0 ? "ok" : "FAILED");
    free(t);
    for (int i = 0; i < 2; i++) {
        rmrf(dirs[i]);
        free(dirs[i]);
    }
}

int main(int argc, char **argv)
{
    double secs = 10;
    int conns = 64, kills = 20, rounds = 1, split = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(argv[i], "--split")) {
            split = 1;
            continue;
        }
        if (!strcmp(argv[i], "--seconds"))
            secs = strtod(v, NULL);
        else if (!strcmp(argv[i], "--conns"))
            conns = (int)strtol(v, NULL, 10);
        else if (!strcmp(argv[i], "--kills"))
            kills = (int)strtol(v, NULL, 10);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = (int)strtol(v, NULL, 10);
        else if (!strcmp(argv[i], "--loader-cpu"))
            loader_cpu = (int)strtol(v, NULL, 10);
        else {
            fprintf(stderr, "bench_multiwriter: unknown option %s\n", argv[i]);
            return 2;
        }
        i++;
    }
    if (rounds < 1 || rounds > 15)
        rounds = 1;
    signal(SIGPIPE, SIG_IGN);
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    const char *fb = getenv("FORUM_BIN");
    snprintf(forum_bin, sizeof(forum_bin), "%s", fb ? fb : "");
    if (!fb)
        snprintf(forum_bin, sizeof(forum_bin), "%s/forum", self);
    snprintf(fake_bin, sizeof(fake_bin), "%s/fake_model", self);
    struct tu_pg pg;
    char why[2048];
    int rc = tu_pg_start(&pg, why, sizeof(why));
    if (rc) {
        fprintf(stderr, "bench_multiwriter: no PostgreSQL: %s\n", why);
        return rc > 0 ? 0 : 1;
    }
    printf("POST /append, %d keep-alive connections %s, %.0f s a row, "
           "%d round(s), load generator on %s\n\n",
           conns, split ? "in all, split across the daemons" : "per daemon",
           secs, rounds, loader_cpu >= 0 ? "one CPU" : "any CPU");
    printf("| store      | daemons | conns | appends/s | failed | verify |"
           " entries a sequencing txn | cores: daemons | server | load |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    struct cpu_use cu;
    row(NULL, 1, conns, secs, &cu);
    double rates[3][15];
    for (int r = 0; r < rounds; r++)
        for (int d = 1; d <= 3; d++)
            rates[d - 1][r] =
                row(&pg, d, split ? (conns + d - 1) / d : conns, secs, &cu);
    if (rounds > 1) {
        double med[3];
        for (int d = 0; d < 3; d++) {
            qsort(rates[d], (size_t)rounds, sizeof(double), cmpd);
            med[d] = rates[d][rounds / 2];
        }
        printf("\nmedian of %d rounds: 1 / 2 / 3 daemons %.0f / %.0f / %.0f "
               "appends/s; 2 / 1 = %.2f, 3 / 1 = %.2f\n",
               rounds, med[0], med[1], med[2], med[1] / med[0],
               med[2] / med[0]);
    }
    if (kills > 0)
        integrator_failover(&pg, kills);
    if (kills > 0 && !getenv("BENCH_NO_RUN_FAILOVER"))
        failover(&pg, kills);
    tu_pg_destroy(&pg);
    return 0;
}
