/* bench_rtt: the machine's floor for one HTTP connection. Two threads of
 * this process bounce one byte over a loopback TCP connection (blocking
 * write, blocking read, TCP_NODELAY) and it prints the round trip's p50
 * and p99 and the rate one connection could reach if the server cost
 * nothing. bench/http.sh prints it beside its c=1 rows. Not a test:
 * asserts nothing.
 * Usage: bench_rtt [--rounds N] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ledger/ledger.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The echo side: sends back every byte until the peer hangs up. */
static void *echo(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char b[64];
    for (;;) {
        ssize_t n = read(fd, b, sizeof(b));
        if (n <= 0 || write(fd, b, (size_t)n) != n)
            break;
    }
    close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    long rounds = 20000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = strtol(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: bench_rtt [--rounds N]\n");
            return 2;
        }
    }
    if (rounds < 100 || rounds > 10000000) {
        fprintf(stderr, "bench_rtt: --rounds must be 100..10000000\n");
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) != 0) {
        perror("bench_rtt: listen");
        return 1;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, echo, &lfd) != 0) {
        fprintf(stderr, "bench_rtt: cannot start a thread\n");
        return 1;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        perror("bench_rtt: connect");
        return 1;
    }
    double *d = malloc((size_t)rounds * sizeof(*d));
    if (!d) {
        fprintf(stderr, "bench_rtt: out of memory\n");
        return 1;
    }
    char c = 'x';
    for (long i = 0; i < rounds; i++) {
        double t0 = (double)ledger_mono_us();
        if (write(fd, &c, 1) != 1 || read(fd, &c, 1) != 1) {
            perror("bench_rtt: round trip");
            return 1;
        }
        d[i] = (double)ledger_mono_us() - t0;
    }
    close(fd);
    pthread_join(th, NULL);
    close(lfd);
    qsort(d, (size_t)rounds, sizeof(*d), cmp);
    double p50 = d[rounds / 2], p99 = d[rounds * 99 / 100];
    printf("loopback round trip between two threads (%ld rounds): p50 %.1f "
           "us, p99 %.1f us; one connection at most %.0f round trips/s\n",
           rounds, p50, p99, 1e6 / p50);
    free(d);
    return 0;
}
