/* test_tlog: the daemon's public log (GET /tlog/, C2SP tlog-tiles) read by
 * an independent verifier (Go's golang.org/x/mod/sumdb/tlog, through
 * tests/interop/tiles_check.go -url) over HTTP, a tampered tile refused,
 * the token and hashes-only modes; and witnessing by protocol (C2SP
 * tlog-witness): two daemons, one the other's witness. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ledger/fo_buf.h"
#include "ledger/note.h"
#include "testutil.h"
#include "tu_daemon.h"

/* Appends n entries over HTTP. */
static void append_n(const struct tu_daemon *d, int n, const char *tag)
{
    for (int i = 0; i < n; i++) {
        char body[160];
        snprintf(body, sizeof(body),
                 "{\"actor\":\"t\",\"kind\":\"k\",\"payload\":{\"%s\":%d}}",
                 tag, i);
        cr_assert_eq(tu_http(d, "POST", "/append", body, 1, NULL), 200);
    }
}

/* The size line of a checkpoint note. */
static long long note_size(const char *note)
{
    const char *nl = note ? strchr(note, '\n') : NULL;
    return nl ? strtoll(nl + 1, NULL, 10) : -1;
}

/* Polls GET /tlog/checkpoint (no token) until its size is at least size
 * and it has at least lines signature lines; returns the note. */
static char *wait_checkpoint(const struct tu_daemon *d, long long size,
                             int lines)
{
    for (int i = 0; i < 3000; i++) {
        char *b = NULL;
        int st = tu_http(d, "GET", "/tlog/checkpoint", NULL, 0, &b);
        int sigs = 0;
        for (const char *p = b; p && (p = strstr(p, "\n\xe2\x80\x94 ")); p++)
            sigs++;
        if (st == 200 && note_size(b) >= size && sigs >= lines)
            return b;
        free(b);
        usleep(10000);
    }
    cr_assert_fail("no checkpoint of size %lld with %d signatures", size,
                   lines);
    return NULL;
}

/* Runs tiles_check.go with args; its exit status, output in *log. */
static int go_check(const char *work, const char *const *args, char **log)
{
    char script[512], out[512];
    snprintf(script, sizeof(script), "%s/tests/interop/go-run.sh", FORUM_SRC);
    snprintf(out, sizeof(out), "%s/go.log", work);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        const char *argv[32] = {"sh", script, "tiles_check.go"};
        int n = 3;
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execv("/bin/sh", (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    *log = tu_read_file(out, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int have_go(void)
{
    return system("command -v go >/dev/null 2>&1") == 0;
}

/* A proxy on 127.0.0.1 in front of the daemon at port up: one request per
 * connection, relayed with "Connection: close"; the body of the reply to
 * GET tamper (when not NULL) has its last byte flipped. */
static pid_t proxy_start(int up, const char *tamper, int *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    cr_assert(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
              listen(s, 64) == 0 &&
              getsockname(s, (struct sockaddr *)&a, &al) == 0);
    *port = ntohs(a.sin_port);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid > 0) {
        close(s);
        return pid;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    static char req[8192], resp[1 << 20];
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        size_t n = 0;
        ssize_t r;
        while (n < sizeof(req) - 1 &&
               (r = read(c, req + n, sizeof(req) - 1 - n)) > 0) {
            n += (size_t)r;
            req[n] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        char path[1024] = "";
        sscanf(req, "GET %1023s", path);
        int u = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in ua = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)up),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        char fwd[1200];
        int fl = snprintf(fwd, sizeof(fwd),
                          "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                          "close\r\n\r\n",
                          path);
        size_t got = 0;
        if (connect(u, (struct sockaddr *)&ua, sizeof(ua)) == 0 &&
            write(u, fwd, (size_t)fl) == fl)
            while (got < sizeof(resp) &&
                   (r = read(u, resp + got, sizeof(resp) - got)) > 0)
                got += (size_t)r;
        close(u);
        if (tamper && got > 0 && strstr(path, tamper) &&
            strlen(strstr(path, tamper)) == strlen(tamper))
            resp[got - 1] ^= 0x01;
        for (size_t off = 0; off < got;) {
            ssize_t w = write(c, resp + off, got - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        close(c);
    }
}

static void proxy_stop(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

Test(tlog, the_go_verifier_reads_the_live_log_and_refuses_a_tampered_tile,
     .timeout = 300)
{
    if (!have_go()) {
        fprintf(stderr, "tlog: skipped: `go` is not on PATH (install "
                        "golang-go golang-golang-x-mod-dev)\n");
        cr_skip("go is not on PATH");
    }
    char *work = tu_tmpdir();
    char dir[512], vkey[600], old[600], url[128];
    snprintf(dir, sizeof(dir), "%s/d", work);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--checkpoint-ms", "50", NULL);
    append_n(&d, 300, "a");
    char *first = wait_checkpoint(&d, 300, 1);
    snprintf(old, sizeof(old), "%s/old.note", work);
    tu_write_file(old, first, strlen(first));
    append_n(&d, 390, "b"); /* 690: 2 full tiles, partial ones at 2 levels */
    free(wait_checkpoint(&d, 690, 1));
    snprintf(vkey, sizeof(vkey), "%s/checkpoint.vkey", dir);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/tlog", d.port);
    char *log = NULL;
    const char *args[] = {"-url", url,      "-vkey", vkey, "-old",
                          old,    "-index", "7",     NULL};
    int st = go_check(work, args, &log);
    cr_assert_eq(st, 0, "tiles_check -url: %s", log ? log : "");
    cr_assert(strstr(log, "all match tlog") && strstr(log, "at size 690") &&
                  strstr(log, "consistency 300 -> 690: ok") &&
                  strstr(log, "inclusion of record 7: ok"),
              "%s", log);
    free(log);

    /* through a proxy that relays faithfully: still verified */
    int pport = 0;
    pid_t px = proxy_start(d.port, NULL, &pport);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/tlog", pport);
    st = go_check(work, args, &log);
    proxy_stop(px);
    cr_assert_eq(st, 0, "through the proxy: %s", log ? log : "");
    free(log);
    /* one bit of the level-0 tile of record 7 flipped: refused */
    px = proxy_start(d.port, "/tlog/tile/0/000", &pport);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/tlog", pport);
    st = go_check(work, args, &log);
    proxy_stop(px);
    cr_assert_eq(st, 1, "a tampered tile was accepted: %s", log ? log : "");
    cr_assert(strstr(log, "ProveRecord") || strstr(log, "CheckRecord") ||
                  strstr(log, "inconsistent"),
              "%s", log);
    free(log);
    free(first);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(work);
}

Test(tlog, served_without_a_token_with_the_spec_s_headers)
{
    char *work = tu_tmpdir();
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/d", work);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--checkpoint-ms", "50", NULL);
    append_n(&d, 260, "a");
    free(wait_checkpoint(&d, 260, 1));
    char *b = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/tlog/tile/0/000", NULL, 0, &b), 200);
    free(b);
    /* a full tile from memory the second time (the cache's metric) */
    cr_assert_eq(tu_http(&d, "GET", "/tlog/tile/0/000", NULL, 0, NULL), 200);
    cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 1, &b), 200);
    cr_assert(strstr(b, "forum_tlog_tile_cache_hits_total 1\n") &&
                  strstr(b, "forum_tlog_size 260\n"),
              "%s", b);
    free(b);
    /* headers: raw, to see them */
    const char get[] =
        "GET /tlog/tile/0/001.p/4 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Connection: close\r\n\r\n";
    char *reply = NULL;
    int closed = 0;
    cr_assert_eq(
        tu_http_raw(d.port, get, sizeof(get) - 1, 5000, &closed, &reply), 200);
    cr_assert(strstr(reply, "Cache-Control: public, max-age=31536000, "
                            "immutable") &&
                  strstr(reply, "Content-Type: application/octet-stream") &&
                  strstr(reply, "Content-Length: 128\r\n"),
              "%s", reply);
    free(reply);
    const char getc[] = "GET /tlog/checkpoint HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Connection: close\r\n\r\n";
    cr_assert_eq(
        tu_http_raw(d.port, getc, sizeof(getc) - 1, 5000, &closed, &reply),
        200);
    cr_assert(strstr(reply, "Cache-Control: no-cache") &&
                  strstr(reply, "Content-Type: text/plain; charset=utf-8"),
              "%s", reply);
    free(reply);
    /* not the canonical path: not served */
    cr_assert_eq(tu_http(&d, "GET", "/tlog/tile/0/0", NULL, 0, NULL), 404);
    cr_assert_eq(tu_http(&d, "GET", "/tlog/tile/00/000", NULL, 0, NULL), 404);
    cr_assert_eq(tu_http(&d, "GET", "/tlog/tile/0/x000/000", NULL, 0, NULL),
                 404);
    cr_assert_eq(tu_http(&d, "GET", "/tlog/tile/0/001.p/5", NULL, 0, NULL),
                 404);
    cr_assert_eq(tu_http(&d, "POST", "/tlog/checkpoint", "{}", 0, NULL), 405);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);

    /* --no-tlog-public: the token; --tlog-hashes-only: no bundles */
    tu_daemon_start(&d, dir, "--no-tlog-public", "--tlog-hashes-only", NULL);
    cr_assert_eq(tu_http(&d, "GET", "/tlog/checkpoint", NULL, 0, NULL), 401);
    cr_assert_eq(tu_http(&d, "GET", "/tlog/tile/0/000", NULL, 1, NULL), 200);
    cr_assert_eq(tu_http(&d, "GET", "/tlog/tile/entries/000", NULL, 1, &b),
                 404);
    cr_assert(strstr(b, "withheld"), "%s", b);
    free(b);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(work);
}

/* ---- witnessing ------------------------------------------------------- */

static char *file_text(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    char *t = tu_read_file(p, NULL);
    cr_assert_not_null(t, "%s", p);
    t[strcspn(t, "\n")] = '\0';
    return t;
}

static void write_conf(const char *dir, const char *json)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    cr_assert_eq(tu_write_file(p, json, strlen(json)), 0);
}

/* forum --ledger dir ledger init, and the log's verifier key. */
static char *log_init(const char *dir)
{
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "key", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    return file_text(dir, "checkpoint.vkey");
}

/* forum verify --tiles (the log's live /tlog/) --vkey LOG --witness WKEY:
 * the exit code. note: the checkpoint the caller saw (it must be the one
 * served: the log does not grow meanwhile). */
static int verify_cosigned(const char *work, const struct tu_daemon *l,
                           const char *note, const char *lvkey,
                           const char *wvkey)
{
    char lk[600], wk[600], url[128];
    snprintf(lk, sizeof(lk), "%s/log.vkey", work);
    tu_write_file(lk, lvkey, strlen(lvkey));
    snprintf(wk, sizeof(wk), "%s/w.vkey", work);
    tu_write_file(wk, wvkey, strlen(wvkey));
    char lka[620], wka[620];
    snprintf(lka, sizeof(lka), "@%s", lk);
    snprintf(wka, sizeof(wka), "@%s", wk);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/tlog", l->port);
    struct tu_run r = tu_forumv(NULL, "--json", "verify", "--tiles", url,
                                "--vkey", lka, "--witness", wka, NULL);
    int st = r.status;
    cJSON *j = st == 0 ? tu_run_json(&r) : NULL;
    if (st)
        fprintf(stderr, "forum verify: %s%s\n", r.out, r.err);
    else if (tu_num(cJSON_GetObjectItemCaseSensitive(j, "checkpoint"),
                    "size") != note_size(note))
        st = 99;
    cJSON_Delete(j);
    tu_run_free(&r);
    return st;
}

/* The witness W of log L: W's dir, its key, its daemon. */
struct pair {
    char *work;
    char ldir[512], wdir[512], wlog[600];
    char *lvkey, *wvkey;
    struct tu_daemon l, w;
};

static void witness_start(struct pair *p)
{
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "{\"witness_of\": [\"%s\"], \"witness_name\": "
             "\"witness.test/w1\"}",
             p->lvkey);
    mkdir(p->wdir, 0700);
    write_conf(p->wdir, conf);
    tu_daemon_start(&p->w, p->wdir, "--log-file", p->wlog, NULL);
}

static void pair_start(struct pair *p)
{
    p->work = tu_tmpdir();
    snprintf(p->ldir, sizeof(p->ldir), "%s/log", p->work);
    snprintf(p->wdir, sizeof(p->wdir), "%s/witness", p->work);
    snprintf(p->wlog, sizeof(p->wlog), "%s/witness.log", p->work);
    p->lvkey = log_init(p->ldir);
    witness_start(p);
    p->wvkey = file_text(p->wdir, "witness.vkey");
    cr_assert(!strncmp(p->wvkey, "witness.test/w1+", 16), "%s", p->wvkey);
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "{\"witnesses\": [{\"url\": \"http://127.0.0.1:%d\", \"vkey\": "
             "\"%s\"}]}",
             p->w.port, p->wvkey);
    write_conf(p->ldir, conf);
    tu_daemon_start(&p->l, p->ldir, "--checkpoint-ms", "50", NULL);
}

static void pair_stop(struct pair *p)
{
    if (p->l.pid)
        cr_assert_eq(tu_daemon_signal_wait(&p->l, SIGTERM, 10000), 0);
    if (p->w.pid)
        cr_assert_eq(tu_daemon_signal_wait(&p->w, SIGTERM, 10000), 0);
    free(p->lvkey);
    free(p->wvkey);
    tu_rmrf(p->work);
}

Test(witness, cosigned_checkpoints_appear_without_a_person, .timeout = 120)
{
    struct pair p = {0};
    pair_start(&p);
    append_n(&p.l, 10, "a");
    /* the log's signature and the witness's cosignature */
    char *note = wait_checkpoint(&p.l, 10, 2);
    cr_assert_eq(verify_cosigned(p.work, &p.l, note, p.lvkey, p.wvkey), 0, "%s",
                 note);
    free(note);
    /* it goes on as the log grows: consistency from the witness's size */
    append_n(&p.l, 290, "b");
    note = wait_checkpoint(&p.l, 300, 2);
    cr_assert_eq(verify_cosigned(p.work, &p.l, note, p.lvkey, p.wvkey), 0, "%s",
                 note);
    /* the witness recorded it, durably */
    char *st = file_text(p.wdir, "witness-state.json");
    cr_assert(strstr(st, "\"size\":300"), "%s", st);
    free(st);
    /* and the ledger keeps it: GET /checkpoint carries it too */
    char *b = NULL;
    cr_assert_eq(tu_http(&p.l, "GET", "/checkpoint", NULL, 1, &b), 200);
    cr_assert(strstr(b, "witness.test/w1"), "%s", b);
    free(b);
    free(note);
    pair_stop(&p);
}

/* POST /add-checkpoint of body to the witness: status, reply in *out. */
static int add_checkpoint(const struct tu_daemon *w, const char *body,
                          char **out)
{
    return tu_http(w, "POST", "/add-checkpoint", body, 0, out);
}

Test(witness, restarts_keep_its_state, .timeout = 120)
{
    struct pair p = {0};
    pair_start(&p);
    append_n(&p.l, 20, "a");
    char *note = wait_checkpoint(&p.l, 20, 2);
    long long size = note_size(note);
    /* the log only: its own signature line */
    char *sig2 = strstr(note, "\n\xe2\x80\x94 ");
    sig2 = sig2 ? strstr(sig2 + 1, "\n\xe2\x80\x94 ") : NULL;
    cr_assert_not_null(sig2);
    sig2[1] = '\0';
    cr_assert_eq(tu_daemon_signal_wait(&p.l, SIGTERM, 10000), 0);
    cr_assert_eq(tu_daemon_signal_wait(&p.w, SIGTERM, 10000), 0);
    witness_start(&p);
    /* "old 0" to a witness that cosigned size N: 409 and N, from disk */
    struct fo_buf req;
    fo_buf_init(&req, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_printf(&req, "old 0\n\n%s", note), 0);
    char *r = NULL;
    cr_assert_eq(add_checkpoint(&p.w, req.data, &r), 409, "%s", r);
    char want[32];
    snprintf(want, sizeof(want), "%lld\n", size);
    cr_assert_str_eq(r, want);
    free(r);
    /* the right old size: cosigned again (same size, same root) */
    fo_buf_reset(&req);
    cr_assert_eq(fo_buf_printf(&req, "old %lld\n\n%s", size, note), 0);
    cr_assert_eq(add_checkpoint(&p.w, req.data, &r), 200, "%s", r);
    cr_assert(!strncmp(r, "\xe2\x80\x94 witness.test/w1 ", 20), "%s", r);
    free(r);
    /* an unknown log, a bad signature, junk */
    fo_buf_reset(&req);
    cr_assert_eq(
        fo_buf_printf(&req, "old 0\n\nother/log%s", strchr(note, '\n')), 0);
    cr_assert_eq(add_checkpoint(&p.w, req.data, &r), 404, "%s", r);
    free(r);
    cr_assert_eq(add_checkpoint(&p.w, "nonsense", &r), 400, "%s", r);
    free(r);
    fo_buf_release(&req);
    free(note);
    pair_stop(&p);
}

Test(witness, refuses_a_fork_and_says_so, .timeout = 120)
{
    struct pair p = {0};
    pair_start(&p);
    append_n(&p.l, 5, "a");
    free(wait_checkpoint(&p.l, 5, 2));
    cr_assert_eq(tu_daemon_signal_wait(&p.l, SIGTERM, 10000), 0);
    /* a copy of the log at 5 entries, same key: the other history */
    char fork_dir[600], cmd[2048];
    snprintf(fork_dir, sizeof(fork_dir), "%s/fork", p.work);
    snprintf(cmd, sizeof(cmd), "cp -a %s %s && rm -f %s/forum.json", p.ldir,
             fork_dir, fork_dir);
    cr_assert_eq(system(cmd), 0);
    tu_daemon_start(&p.l, p.ldir, "--checkpoint-ms", "50", NULL);
    append_n(&p.l, 10, "b");
    free(wait_checkpoint(&p.l, 15, 2)); /* the witness cosigned 15 */
    cr_assert_eq(tu_daemon_signal_wait(&p.l, SIGTERM, 10000), 0);
    /* the fork grows another way to 30 and asks the witness */
    struct tu_daemon f;
    tu_daemon_start(&f, fork_dir, "--checkpoint-ms", "50", NULL);
    append_n(&f, 25, "other");
    char *note = wait_checkpoint(&f, 30, 1);
    cJSON *proof = tu_http_json(
        &f, "GET", "/proof/consistency?first=15&second=30", NULL, 200);
    struct fo_buf req;
    fo_buf_init(&req, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_puts(&req, "old 15\n"), 0);
    const cJSON *h;
    cJSON_ArrayForEach (h, cJSON_GetObjectItemCaseSensitive(proof, "path")) {
        uint8_t raw[32];
        cr_assert_eq(fo_unhex(h->valuestring, raw, 32), 0);
        cr_assert_eq(note_b64_encode(&req, raw, 32), 0);
        cr_assert_eq(fo_buf_putc(&req, '\n'), 0);
    }
    cr_assert_eq(fo_buf_printf(&req, "\n%s", note), 0);
    char *r = NULL;
    cr_assert_eq(add_checkpoint(&p.w, req.data, &r), 422, "%s", r);
    cr_assert(strstr(r, "fork") && strstr(r, "not consistent"), "%s", r);
    free(r);
    /* said in the witness's log, the evidence kept, nothing cosigned */
    char *wl = tu_read_file(p.wlog, NULL);
    cr_assert(wl && strstr(wl, "FORK refused"), "%s", wl ? wl : "");
    free(wl);
    char *ev = file_text(p.wdir, "witness-forks.txt");
    free(ev);
    char *st = file_text(p.wdir, "witness-state.json");
    cr_assert(strstr(st, "\"size\":15"), "%s", st);
    free(st);
    cJSON_Delete(proof);
    fo_buf_release(&req);
    free(note);
    cr_assert_eq(tu_daemon_signal_wait(&f, SIGTERM, 10000), 0);
    pair_stop(&p);
}
