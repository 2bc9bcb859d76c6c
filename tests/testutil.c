/* testutil: shared helpers for the Criterion tests. */
#include "tests/testutil.h"

#include "daemon/orch_engine.h"
#include "daemon/service.h"
#include "surfaces/surf.h"
#include "ledger/ledger.h"

#include "ledger/fo_json.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

char *tu_tmpdir(void)
{
    char tmpl[] = "/tmp/forum-test-XXXXXX";
    if (!mkdtemp(tmpl))
        cr_assert_fail("mkdtemp: %s", strerror(errno));
    return strdup(tmpl);
}

void tu_rmrf(char *path)
{
    if (!path)
        return;
    if (strncmp(path, "/tmp/forum-test-", 16) == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            execlp("rm", "rm", "-rf", path, (char *)NULL);
            _exit(127);
        }
        if (pid > 0)
            waitpid(pid, NULL, 0);
    }
    free(path);
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

int tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = fwrite(data, 1, len, f) == len ? 0 : -1;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

cJSON *tu_vector(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", FORUM_VECTORS, name);
    char *text = tu_read_file(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    cJSON *v = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(v, "cannot parse %s", path);
    return v;
}

static void drain(int fd, char **buf, size_t *len, size_t *cap)
{
    if (*len + 65536 + 1 > *cap) {
        *cap = (*len + 65536 + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    ssize_t r = read(fd, *buf + *len, *cap - *len - 1);
    if (r > 0)
        *len += (size_t)r;
    (*buf)[*len] = '\0';
}

struct tu_run tu_forum(const char *stdin_data, size_t stdin_len,
                       const char *const *argv)
{
    struct tu_run r = {0};
    int in[2], out[2], err[2];
    cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
    size_t argc = 0;
    while (argv[argc])
        argc++;
    const char **args = calloc(argc + 2, sizeof(*args));
    args[0] = FORUM_BIN;
    for (size_t i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        execv(FORUM_BIN, (char *const *)args);
        _exit(127);
    }
    free(args);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    size_t out_cap = 0, err_cap = 0, written = 0;
    r.out = calloc(1, 1);
    r.err = calloc(1, 1);
    if (!stdin_data || stdin_len == 0) {
        close(in[1]);
        in[1] = -1;
    }
    signal(SIGPIPE, SIG_IGN);
    int open_fds = 2;
    while (open_fds > 0 || in[1] >= 0) {
        struct pollfd p[3];
        int n = 0;
        p[n++] = (struct pollfd){.fd = out[0], .events = POLLIN};
        p[n++] = (struct pollfd){.fd = err[0], .events = POLLIN};
        if (in[1] >= 0)
            p[n++] = (struct pollfd){.fd = in[1], .events = POLLOUT};
        if (poll(p, (nfds_t)n, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            size_t before = i == 0 ? r.out_len : r.err_len;
            if (i == 0)
                drain(out[0], &r.out, &r.out_len, &out_cap);
            else
                drain(err[0], &r.err, &r.err_len, &err_cap);
            size_t after = i == 0 ? r.out_len : r.err_len;
            if (after == before) {
                close(p[i].fd);
                if (i == 0)
                    out[0] = -1;
                else
                    err[0] = -1;
                open_fds--;
            }
        }
        if (out[0] < 0 && err[0] < 0)
            open_fds = 0;
        if (n == 3 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = write(in[1], stdin_data + written, stdin_len - written);
            if (w > 0)
                written += (size_t)w;
            if (w < 0 || written == stdin_len) {
                close(in[1]);
                in[1] = -1;
            }
        }
        if (open_fds == 0 && in[1] >= 0) {
            close(in[1]);
            in[1] = -1;
        }
        /* poll again only on the fds still open */
        if (out[0] < 0 && err[0] < 0)
            break;
        if (out[0] < 0)
            p[0].fd = -1;
    }
    if (out[0] >= 0)
        close(out[0]);
    if (err[0] >= 0)
        close(err[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return r;
}

struct tu_run tu_forumv(const char *stdin_data, const char *arg, ...)
{
    const char *argv[64];
    size_t n = 0;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    return tu_forum(stdin_data, stdin_data ? strlen(stdin_data) : 0, argv);
}

void tu_run_free(struct tu_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

cJSON *tu_run_json(const struct tu_run *r)
{
    cJSON *v = cJSON_Parse(r->out);
    cr_assert_not_null(v, "not JSON (exit %d): stdout=[%s] stderr=[%s]",
                       r->status, r->out, r->err);
    return v;
}

struct tu_run tu_forum_file(const char *stdin_path, const char *const *argv)
{
    struct tu_run r = {0};
    char *dir = tu_tmpdir();
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof(out_path), "%s/stdout", dir);
    snprintf(err_path, sizeof(err_path), "%s/stderr", dir);
    size_t argc = 0;
    while (argv[argc])
        argc++;
    const char **args = calloc(argc + 2, sizeof(*args));
    cr_assert_not_null(args);
    args[0] = FORUM_BIN;
    for (size_t i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int in = open(stdin_path, O_RDONLY);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 ||
            dup2(out, 1) < 0 || dup2(err, 2) < 0)
            _exit(127);
        execv(FORUM_BIN, (char *const *)args);
        _exit(127);
    }
    free(args);
    int st = 0;
    waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = tu_read_file(out_path, &r.out_len);
    r.err = tu_read_file(err_path, &r.err_len);
    if (!r.out)
        r.out = calloc(1, 1);
    if (!r.err)
        r.err = calloc(1, 1);
    tu_rmrf(dir);
    return r;
}

long long tu_num(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    cr_assert(cJSON_IsNumber(v), "no number %s", k);
    return (long long)v->valuedouble;
}

const char *tu_str(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    cr_assert(cJSON_IsString(v), "no string %s", k);
    return v->valuestring;
}

int tu_listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(listen(fd, 16), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

int tu_connect_loopback(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    if (rcvbuf > 0)
        cr_assert_eq(
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

int64_t tu_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

cJSON *tu_json_parse(const char *text)
{
    cJSON *o = NULL;
    struct fo_err err;
    cr_assert_not_null(text);
    cr_assert_eq(fo_json_parse(text, strlen(text), &o, &err), FO_OK,
                 "not JSON (%s): %s", err.msg, text);
    return o;
}

int tu_file_has(const char *path, const char *needle)
{
    size_t len = 0;
    char *d = tu_read_file(path, &len);
    int hit = d && memmem(d, len, needle, strlen(needle)) != NULL;
    free(d);
    return hit;
}

long long tu_cpu_ticks(int pid)
{
    char path[64], s[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(s, 1, sizeof(s) - 1, f);
    fclose(f);
    s[n] = '\0';
    const char *p = strrchr(s, ')'); /* the name may hold spaces */
    cr_assert_not_null(p);
    unsigned long long ut = 0, st = 0;
    /* after ") ": state, then fields 4..13, then utime (14), stime (15) */
    cr_assert_eq(sscanf(p + 2,
                        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                        &ut, &st),
                 2);
    return (long long)(ut + st);
}

long tu_file_lines(const char *path)
{
    size_t len = 0;
    char *t = tu_read_file(path, &len);
    long n = 0;
    for (size_t i = 0; t && i < len; i++)
        n += t[i] == '\n';
    free(t);
    return n;
}

/* A self-signed P-256 certificate for san ("IP:127.0.0.1" or
 * "DNS:other.example"); its PEM goes to pem_path when not NULL. */
SSL_CTX *tu_tls_server(const char *san, const char *pem_path)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    cr_assert_not_null(k);
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, k);
    X509_NAME *nm = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC,
                               (const unsigned char *)"forum test", -1, -1, 0);
    X509_set_issuer_name(x, nm);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *ext =
        X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
    cr_assert_not_null(ext);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "CA:TRUE");
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    cr_assert(X509_sign(x, k, EVP_sha256()) > 0);
    if (pem_path) {
        FILE *fp = fopen(pem_path, "w");
        cr_assert_not_null(fp);
        PEM_write_X509(fp, x);
        fclose(fp);
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    cr_assert_eq(SSL_CTX_use_certificate(ctx, x), 1);
    cr_assert_eq(SSL_CTX_use_PrivateKey(ctx, k), 1);
    X509_free(x);
    EVP_PKEY_free(k);
    return ctx;
}

/* ---- runs on an engine hosted for the call ------------------------------ */

#define TU_HOSTS 8
static struct {
    struct surf_ctx *ctx;
    struct daemon_config dc;
    struct daemon_embed *e;
} hosts[TU_HOSTS];

void tu_host(struct surf_ctx *ctx)
{
    int i = 0;
    while (i < TU_HOSTS && hosts[i].ctx)
        i++;
    cr_assert_lt(i, TU_HOSTS, "tu_host: too many hosts");
    daemon_config_init(&hosts[i].dc);
    hosts[i].dc.dir = ledger_dir(ctx->ledger);
    hosts[i].dc.orch = ctx->orch;
    struct fo_err err;
    cr_assert_eq(daemon_embed_start(&hosts[i].dc, 0, &hosts[i].e, &err), FO_OK,
                 "%s", err.msg);
    hosts[i].ctx = ctx;
    ctx->host_call = daemon_embed_call;
    ctx->host_hook = hosts[i].e;
}

void tu_unhost(struct surf_ctx *ctx)
{
    for (int i = 0; i < TU_HOSTS; i++)
        if (hosts[i].ctx == ctx) {
            struct fo_err err;
            daemon_embed_stop(hosts[i].e, &err);
            hosts[i].ctx = NULL;
            ctx->host_call = NULL;
            ctx->host_hook = NULL;
        }
}

int tu_engine_run(const struct orch *o, const struct orch_witness *w,
                  const struct orch_run_req *req, cJSON **out,
                  struct fo_err *err)
{
    struct daemon_config dc;
    daemon_config_init(&dc);
    dc.dir = ledger_dir(w->ledger);
    dc.orch = (struct orch *)o;
    struct daemon_embed *host = NULL;
    int rc = daemon_embed_start(&dc, 0, &host, err);
    if (rc)
        return rc;
    rc = daemon_embed_run(host, req, out, err);
    struct fo_err serr;
    if (daemon_embed_stop(host, &serr) != FO_OK && rc == FO_OK) {
        cJSON_Delete(*out);
        *out = NULL;
        *err = serr;
        rc = serr.code;
    }
    return rc;
}

int tu_submit(const struct orch *o, const struct orch_witness *w,
              const char *request, const struct orch_submit_opts *opts,
              cJSON **out, struct fo_err *err)
{
    struct orch_run_req req = {.via = "submit", .request = request};
    if (opts)
        req.opts = *opts;
    return tu_engine_run(o, w, &req, out, err);
}

int tu_run_plan(const struct orch *o, const struct orch_witness *w,
                const cJSON *plan, const char *request, cJSON **out,
                struct fo_err *err)
{
    struct orch_run_req req = {
        .via = "plan_run", .request = request, .plan = plan};
    return tu_engine_run(o, w, &req, out, err);
}

int tu_plan_request(const struct orch *o, const struct orch_witness *w,
                    const char *request, cJSON **out, struct fo_err *err)
{
    struct orch_run_req req = {.via = "plan", .request = request};
    return tu_engine_run(o, w, &req, out, err);
}

/* ---- test seams' holds ---------------------------------------------- */

static int path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

void tu_hold_init(struct tu_hold *h)
{
    h->dir = tu_tmpdir();
    snprintf(h->path, sizeof(h->path), "%s/hold", h->dir);
    snprintf(h->held, sizeof(h->held), "%s.held", h->path);
    snprintf(h->expired, sizeof(h->expired), "%s.expired", h->path);
}

void tu_hold_set(const struct tu_hold *h)
{
    cr_assert_eq(tu_write_file(h->path, "", 0), 0);
}

void tu_hold_wait(const struct tu_hold *h, int ms, const char *what)
{
    for (int64_t t0 = tu_now_ms(); !path_exists(h->held);) {
        cr_assert_lt(tu_now_ms() - t0, ms, "%s", what);
        usleep(10 * 1000);
    }
}

void tu_hold_release(const struct tu_hold *h)
{
    cr_assert_eq(unlink(h->path), 0);
}

int tu_hold_expired(const struct tu_hold *h)
{
    return path_exists(h->expired);
}

void tu_hold_free(struct tu_hold *h)
{
    tu_rmrf(h->dir);
    h->dir = NULL;
}
