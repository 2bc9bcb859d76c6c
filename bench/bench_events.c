/* bench_events: what GET /events costs a running daemon. Not a test: it
 * asserts nothing, it prints figures (bench/events.sh drives it).
 *
 * Phases, against the daemon at 127.0.0.1:PORT with TOKEN:
 *  1. appends/s at c = C (POST /append on keep-alive connections, one
 *     thread each, for SECONDS), with no subscriber, then with IDLE idle
 *     subscribers (streams filtered to a kind nothing appends, so they are
 *     open and receive nothing but keep-alive comments), alternating
 *     ROUNDS times; the table prints every run and the medians;
 *  2. delivery latency: ACTIVE subscribers to every entry while C4 = 4
 *     appenders run for SECONDS; a sample is the time from an entry's ts
 *     (stamped when the committer sequences it, before its commit) to a
 *     subscriber reading its event; p50 and p99 over all samples.
 *
 * Usage: bench_events PORT TOKEN [--conns C] [--seconds S] [--idle N]
 *                     [--active N] [--rounds R] */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ledger/banned.h"

static int port;
static const char *token;

static int64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("bench_events: connect");
        exit(1);
    }
    return fd;
}

/* ---- appenders -------------------------------------------------------- */

static atomic_int stop;
static atomic_long appended;

static void *appender(void *arg)
{
    (void)arg;
    int fd = dial();
    char req[1024], buf[8192];
    long n = 0;
    while (!atomic_load(&stop)) {
        char body[256];
        int bl = snprintf(body, sizeof(body),
                          "{\"actor\":\"bench\",\"kind\":\"bench_note\","
                          "\"payload\":{\"n\":%ld,\"pad\":\"%0120d\"}}",
                          n++, 0);
        int rl = snprintf(req, sizeof(req),
                          "POST /append HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Authorization: Bearer %s\r\nContent-Type: "
                          "application/json\r\nContent-Length: %d\r\n\r\n%s",
                          token, bl, body);
        if (send(fd, req, (size_t)rl, MSG_NOSIGNAL) != rl)
            break;
        /* one reply: headers, then Content-Length bytes */
        size_t have = 0;
        long want = -1;
        for (;;) {
            ssize_t r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
            if (r <= 0)
                goto out;
            have += (size_t)r;
            buf[have] = 0;
            char *e = strstr(buf, "\r\n\r\n");
            if (!e)
                continue;
            if (want < 0) {
                char *cl = strcasestr(buf, "Content-Length:");
                want = cl ? strtol(cl + 15, NULL, 10) : 0;
            }
            if ((long)(have - (size_t)(e + 4 - buf)) >= want)
                break;
        }
        if (strncmp(buf, "HTTP/1.1 200", 12) != 0) {
            fprintf(stderr, "bench_events: append: %.80s\n", buf);
            break;
        }
        atomic_fetch_add(&appended, 1);
    }
out:
    close(fd);
    return NULL;
}

static double run_appenders(int c, int seconds)
{
    pthread_t *t = calloc((size_t)c, sizeof(*t));
    atomic_store(&stop, 0);
    atomic_store(&appended, 0);
    int64_t t0 = now_us();
    for (int i = 0; i < c; i++)
        pthread_create(&t[i], NULL, appender, NULL);
    sleep((unsigned)seconds);
    atomic_store(&stop, 1);
    long n = atomic_load(&appended);
    int64_t t1 = now_us();
    for (int i = 0; i < c; i++)
        pthread_join(t[i], NULL);
    free(t);
    return (double)n / ((double)(t1 - t0) / 1e6);
}

/* ---- subscribers ------------------------------------------------------ */

static int subscribe(const char *query)
{
    int fd = dial();
    char req[512];
    int n =
        snprintf(req, sizeof(req),
                 "GET /events%s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
                 "Bearer %s\r\n\r\n",
                 query, token);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        perror("bench_events: subscribe");
        exit(1);
    }
    char b[512];
    ssize_t r = recv(fd, b, sizeof(b) - 1, 0); /* the headers */
    if (r <= 0 || strncmp(b, "HTTP/1.1 200", 12) != 0) {
        fprintf(stderr, "bench_events: subscribe: %.*s\n", r > 0 ? (int)r : 0,
                b);
        exit(1);
    }
    return fd;
}

struct lat {
    int *fds;
    int n;
    int64_t *samples;
    size_t ns, cap;
};

/* Reads every active stream until stop; a sample per "ts": seen. */
static void *reader(void *arg)
{
    struct lat *L = arg;
    struct pollfd *p = calloc((size_t)L->n, sizeof(*p));
    for (int i = 0; i < L->n; i++)
        p[i] = (struct pollfd){.fd = L->fds[i], .events = POLLIN};
    static char buf[1 << 16];
    while (!atomic_load(&stop)) {
        if (poll(p, (nfds_t)L->n, 100) <= 0)
            continue;
        for (int i = 0; i < L->n; i++) {
            if (!(p[i].revents & POLLIN))
                continue;
            ssize_t r = recv(p[i].fd, buf, sizeof(buf) - 1, 0);
            if (r <= 0)
                continue;
            int64_t t = now_us();
            buf[r] = 0;
            /* chunk framing may split an event: count only whole "ts": */
            for (char *s = buf; (s = strstr(s, "\"ts\":")) != NULL; s += 5) {
                char *end = NULL;
                long long ts = strtoll(s + 5, &end, 10);
                if (end == s + 5 || *end != ',')
                    continue;
                if (L->ns == L->cap) {
                    L->cap = L->cap ? 2 * L->cap : 1 << 16;
                    L->samples = realloc(L->samples, L->cap * sizeof(int64_t));
                }
                L->samples[L->ns++] = t - ts;
            }
        }
    }
    free(p);
    return NULL;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A whole number in [lo, hi], else -1. */
static int arg_int(const char *s, int lo, int hi)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    return (int)v;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_events PORT TOKEN [--conns C] "
                    "[--seconds S] [--idle N] [--active N] [--rounds R]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (port = arg_int(argv[1], 1, 65535)) < 0)
        return usage();
    token = argv[2];
    int conns = 64, seconds = 5, idle = 1000, active = 100, rounds = 3;
    for (int i = 3; i < argc; i += 2) {
        int *dest = !strcmp(argv[i], "--conns")     ? &conns
                    : !strcmp(argv[i], "--seconds") ? &seconds
                    : !strcmp(argv[i], "--idle")    ? &idle
                    : !strcmp(argv[i], "--active")  ? &active
                    : !strcmp(argv[i], "--rounds")  ? &rounds
                                                    : NULL;
        if (!dest || i + 1 >= argc ||
            (*dest = arg_int(argv[i + 1], 1, 100000)) < 0)
            return usage();
    }
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);

    double *with0 = calloc((size_t)rounds, sizeof(double));
    double *withN = calloc((size_t)rounds, sizeof(double));
    int *fds = calloc((size_t)(idle > active ? idle : active), sizeof(int));
    printf("| round | subscribers | appends/s at c=%d |\n|---|---|---|\n",
           conns);
    for (int r = 0; r < rounds; r++) {
        with0[r] = run_appenders(conns, seconds);
        printf("| %d | 0 | %.0f |\n", r + 1, with0[r]);
        fflush(stdout);
        for (int i = 0; i < idle; i++)
            fds[i] = subscribe("?kind=verdict");
        withN[r] = run_appenders(conns, seconds);
        printf("| %d | %d idle | %.0f |\n", r + 1, idle, withN[r]);
        fflush(stdout);
        for (int i = 0; i < idle; i++)
            close(fds[i]);
        usleep(500 * 1000); /* the daemon forgets them */
    }
    /* the machine drifts: each round's idle run is compared with the
     * same round's run without subscribers, and the ratios' median is the
     * figure */
    double *ratio = calloc((size_t)rounds, sizeof(double));
    for (int r = 0; r < rounds; r++)
        ratio[r] = withN[r] / with0[r];
    qsort(with0, (size_t)rounds, sizeof(double), cmpd);
    qsort(withN, (size_t)rounds, sizeof(double), cmpd);
    qsort(ratio, (size_t)rounds, sizeof(double), cmpd);
    double m0 = with0[rounds / 2], mN = withN[rounds / 2];
    printf("\nmedian appends/s: %.0f with 0 subscribers, %.0f with %d idle; "
           "median of the rounds' ratios %.1f%% (min %.1f%%, max %.1f%%)\n",
           m0, mN, idle, 100.0 * ratio[rounds / 2], 100.0 * ratio[0],
           100.0 * ratio[rounds - 1]);
    free(ratio);

    struct lat L = {.fds = fds, .n = active};
    for (int i = 0; i < active; i++)
        fds[i] = subscribe("");
    atomic_store(&stop, 0);
    pthread_t rt;
    pthread_create(&rt, NULL, reader, &L);
    double rate = run_appenders(4, seconds);
    usleep(300 * 1000);
    atomic_store(&stop, 1);
    pthread_join(rt, NULL);
    for (int i = 0; i < active; i++)
        close(fds[i]);
    if (L.ns) {
        qsort(L.samples, L.ns, sizeof(int64_t), cmp64);
        printf("\ndelivery to %d active subscribers (4 appenders, %.0f "
               "appends/s): %zu events, latency p50 %.2f ms, p99 %.2f ms "
               "(entry ts to read)\n",
               active, rate, L.ns, (double)L.samples[L.ns / 2] / 1000.0,
               (double)L.samples[L.ns * 99 / 100] / 1000.0);
    } else {
        printf("\ndelivery: no events read\n");
    }
    free(L.samples);
    free(fds);
    free(with0);
    free(withN);
    return 0;
}
