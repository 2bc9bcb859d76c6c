/* test_tiles: C2SP tlog-tiles. Path encoding, widths, a known-answer
 * vector made by Go's golang.org/x/mod/sumdb/tlog (tests/vectors/
 * tiles-kat-70000.txt, tests/interop/tiles_check.go -kat 70000), proofs
 * made from tiles alone, and `forum ledger tiles` / `forum verify --tiles`
 * on a real ledger, checked again by tlog (tiles_check.go). */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_sha.h"
#include "ledger/ledger.h"
#include "ledger/merkle.h"
#include "ledger/tiles.h"
#include "tests/testutil.h"

/* ---- paths and widths ---- */

static void path_is(int level, uint64_t n, unsigned w, const char *want)
{
    char p[TILE_PATH_MAX];
    struct fo_err err;
    cr_assert_eq(tile_path(level, n, w, p, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(p, want);
}

Test(tiles, path_encoding_as_the_spec)
{
    path_is(4, 1234067, 1, "tile/4/x001/x234/067.p/1");
    path_is(4, 1234067, 256, "tile/4/x001/x234/067");
    path_is(0, 0, 0, "tile/0/000");
    path_is(0, 999, 255, "tile/0/999.p/255");
    path_is(0, 1000, 256, "tile/0/x001/000");
    path_is(1, 123456789, 0, "tile/1/x123/x456/789");
    path_is(TILE_LEVEL_ENTRIES, 5, 256, "tile/entries/005");
    path_is(TILE_LEVEL_ENTRIES, 273, 112, "tile/entries/273.p/112");
    path_is(63, UINT64_MAX, 0, "tile/63/x018/x446/x744/x073/x709/x551/615");
    char p[TILE_PATH_MAX];
    struct fo_err err;
    cr_assert_eq(tile_path(64, 0, 0, p, &err), FO_E_INVALID);
    cr_assert_eq(tile_path(-2, 0, 0, p, &err), FO_E_INVALID);
    cr_assert_eq(tile_path(0, 0, 257, p, &err), FO_E_INVALID);
}

Test(tiles, widths_of_the_spec_example)
{
    /* "a tree of size 70,000 will be represented by 273 full level 0
     * tiles, one partial level 0 tile of width 112, one full level 1 tile,
     * one partial level 1 tile of width 17, and one partial level 2 tile
     * of width 1" */
    for (uint64_t n = 0; n < 273; n++)
        cr_assert_eq(tile_width(0, n, 70000), 256);
    cr_assert_eq(tile_width(0, 273, 70000), 112);
    cr_assert_eq(tile_width(0, 274, 70000), 0);
    cr_assert_eq(tile_width(1, 0, 70000), 256);
    cr_assert_eq(tile_width(1, 1, 70000), 17);
    cr_assert_eq(tile_width(1, 2, 70000), 0);
    cr_assert_eq(tile_width(2, 0, 70000), 1);
    cr_assert_eq(tile_width(3, 0, 70000), 0);
    /* "a tree of size 256 will be represented by a full level 0 tile and a
     * partial level 1 tile of width 1" */
    cr_assert_eq(tile_width(0, 0, 256), 256);
    cr_assert_eq(tile_width(0, 1, 256), 0);
    cr_assert_eq(tile_width(1, 0, 256), 1);
    cr_assert_eq(tile_width(0, 0, 0), 0);
}

/* ---- a synthetic log: record i = SHA-256("forum tile vector <i>") ---- */

struct synth {
    uint64_t n;
    uint8_t (*data)[32];
    uint8_t (*leaf)[32];
    struct fo_sha *sha;
};

static void synth_init(struct synth *s, uint64_t n)
{
    s->n = n;
    s->data = malloc(n * 32);
    s->leaf = malloc(n * 32);
    s->sha = fo_sha_create();
    cr_assert(s->data && s->leaf && s->sha);
    for (uint64_t i = 0; i < n; i++) {
        char txt[64];
        int k = snprintf(txt, sizeof(txt), "forum tile vector %llu",
                         (unsigned long long)i);
        fo_sha256(txt, (size_t)k, s->data[i]);
        merkle_leaf_hash(s->sha, s->data[i], 32, s->leaf[i]);
    }
}

static void synth_free(struct synth *s)
{
    free(s->data);
    free(s->leaf);
    fo_sha_free(s->sha);
}

static int synth_node(void *ctx, unsigned level, uint64_t index,
                      uint8_t out[32], struct fo_err *err)
{
    struct synth *s = ctx;
    if (((index + 1) << level) > s->n)
        return fo_err_set(err, FO_E_INVALID, "synth: %u/%llu", level,
                          (unsigned long long)index);
    if (level == 0) {
        memcpy(out, s->leaf[index], 32);
        return FO_OK;
    }
    uint8_t l[32], r[32];
    synth_node(ctx, level - 1, 2 * index, l, err);
    synth_node(ctx, level - 1, 2 * index + 1, r, err);
    merkle_node_hash(s->sha, l, r, out);
    return FO_OK;
}

static int synth_leaves(void *ctx, uint64_t start, size_t n,
                        uint8_t (*data)[32], struct fo_err *err)
{
    struct synth *s = ctx;
    (void)err;
    memcpy(data, s->data[start], n * 32);
    return FO_OK;
}

static int dir_fetch(void *ctx, const char *path, struct fo_buf *out,
                     struct fo_err *err)
{
    char full[1024];
    snprintf(full, sizeof(full), "%s/%s", (const char *)ctx, path);
    size_t len = 0;
    char *d = tu_read_file(full, &len);
    if (!d)
        return fo_err_set(err, FO_E_NOT_FOUND, "%s", full);
    int rc = fo_buf_append(out, d, len);
    free(d);
    return rc;
}

static void file_sha_hex(const char *dir, const char *rel, char hex[65])
{
    char full[1024];
    snprintf(full, sizeof(full), "%s/%s", dir, rel);
    size_t len = 0;
    char *d = tu_read_file(full, &len);
    cr_assert_not_null(d, "missing %s", rel);
    uint8_t h[32];
    fo_sha256(d, len, h);
    fo_hex(h, 32, hex);
    free(d);
}

static int count_files(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "find '%s' -type f | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    cr_assert(p && fscanf(p, "%d", &n) == 1);
    pclose(p);
    return n;
}

Test(tiles, known_answer_vector_of_go_tlog, .timeout = 120)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tiles-kat-70000.txt", FORUM_VECTORS);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    unsigned long long size = 0;
    char root_hex[65] = {0};
    cr_assert_eq(fscanf(f, "size %llu root %64s\n", &size, root_hex), 2);
    struct synth s;
    synth_init(&s, size);
    char *dir = tu_tmpdir();
    struct tile_source src = {synth_leaves, synth_node, &s};
    struct tiles_stats st = {0};
    struct fo_err err;
    cr_assert_eq(tiles_write(dir, size, &src, &st, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(st.size, size);
    cr_assert_eq(st.kept, 0);
    char rel[256], want[65], got[65];
    int lines = 0;
    while (fscanf(f, "%255s %64s\n", rel, want) == 2) {
        file_sha_hex(dir, rel, got);
        cr_assert_str_eq(got, want, "%s differs from Go's tlog", rel);
        lines++;
    }
    fclose(f);
    cr_assert_eq(lines, 551);
    cr_assert_eq(st.written, lines);
    cr_assert_eq(count_files(dir), lines, "no file beyond the vector's");

    /* Again: nothing to write. */
    struct tiles_stats st2 = {0};
    cr_assert_eq(tiles_write(dir, size, &src, &st2, &err), FO_OK);
    cr_assert_eq(st2.written, 0);
    cr_assert_eq(st2.kept, lines);

    /* A reader of the tiles alone gives Go's root and the proofs the
     * in-memory tree gives. */
    struct tile_reader *r = NULL;
    cr_assert_eq(tile_reader_create(dir_fetch, dir, size, &r, &err), FO_OK);
    uint8_t root[32];
    char hex[65];
    cr_assert_eq(merkle_root(tile_reader_node, r, size, root, &err), FO_OK,
                 "%s", err.msg);
    fo_hex(root, 32, hex);
    cr_assert_str_eq(hex, root_hex);
    static const uint64_t idx[] = {0, 1, 255, 256, 65535, 65536, 69999};
    for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++) {
        uint8_t p1[MERKLE_MAX_PATH][32], p2[MERKLE_MAX_PATH][32], d[32];
        size_t n1 = 0, n2 = 0;
        cr_assert_eq(merkle_inclusion_proof(tile_reader_node, r, idx[i], size,
                                            p1, &n1, &err),
                     FO_OK, "%s", err.msg);
        cr_assert_eq(
            merkle_inclusion_proof(synth_node, &s, idx[i], size, p2, &n2, &err),
            FO_OK);
        cr_assert_eq(n1, n2);
        cr_assert_eq(memcmp(p1, p2, n1 * 32), 0);
        cr_assert_eq(merkle_verify_inclusion(s.leaf[idx[i]], idx[i], size,
                                             (const uint8_t(*)[32])p1, n1, root,
                                             &err),
                     FO_OK);
        cr_assert_eq(tile_reader_leaf_data(r, idx[i], d, &err), FO_OK, "%s",
                     err.msg);
        cr_assert_eq(memcmp(d, s.data[idx[i]], 32), 0);
    }
    static const uint64_t first[] = {1, 255, 256, 257, 65536, 69000};
    for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
        uint8_t p1[MERKLE_MAX_PATH][32], r1[32];
        size_t n1 = 0;
        cr_assert_eq(merkle_consistency_proof(tile_reader_node, r, first[i],
                                              size, p1, &n1, &err),
                     FO_OK, "%s", err.msg);
        cr_assert_eq(merkle_root(synth_node, &s, first[i], r1, &err), FO_OK);
        cr_assert_eq(merkle_verify_consistency(first[i], size, r1, root,
                                               (const uint8_t(*)[32])p1, n1,
                                               &err),
                     FO_OK, "%llu: %s", (unsigned long long)first[i], err.msg);
    }
    cr_assert_lt(tile_reader_fetches(r), 64, "tiles are fetched once");
    tile_reader_free(r);

    /* A damaged tile: the wrong length is refused, a changed hash gives a
     * proof that fails against the root. */
    char full[1024];
    snprintf(full, sizeof(full), "%s/tile/0/100", dir);
    size_t len = 0;
    char *t = tu_read_file(full, &len);
    cr_assert_eq(len, 8192);
    cr_assert_eq(tu_write_file(full, t, len - 1), 0);
    cr_assert_eq(tile_reader_create(dir_fetch, dir, size, &r, &err), FO_OK);
    uint8_t p1[MERKLE_MAX_PATH][32];
    size_t n1 = 0;
    cr_assert_eq(merkle_inclusion_proof(tile_reader_node, r, 100 * 256 + 7,
                                        size, p1, &n1, &err),
                 FO_E_VERIFY);
    tile_reader_free(r);
    t[100] ^= 1;
    cr_assert_eq(tu_write_file(full, t, len), 0);
    cr_assert_eq(tile_reader_create(dir_fetch, dir, size, &r, &err), FO_OK);
    cr_assert_eq(merkle_inclusion_proof(tile_reader_node, r, 100 * 256 + 7,
                                        size, p1, &n1, &err),
                 FO_OK);
    uint8_t leaf[32];
    cr_assert_eq(tile_reader_node(r, 0, 100 * 256 + 7, leaf, &err), FO_OK);
    cr_assert_eq(merkle_verify_inclusion(leaf, 100 * 256 + 7, size,
                                         (const uint8_t(*)[32])p1, n1, root,
                                         &err),
                 FO_E_VERIFY);
    tile_reader_free(r);
    free(t);
    synth_free(&s);
    tu_rmrf(dir);
}

/* ---- a real ledger: forum ledger tiles, forum verify --tiles ---- */

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    int found = 0;
    while (!found && *path) {
        size_t n = strcspn(path, ":");
        char full[1024];
        snprintf(full, sizeof(full), "%.*s/%s", (int)n, n ? path : ".", prog);
        found = access(full, X_OK) == 0;
        path += n + (path[n] == ':');
    }
    return found;
}

/* Appends n entries to the ledger in dir, in batches. */
static void fill(const char *dir, int n)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    struct ledger_append *reqs = calloc(1000, sizeof(*reqs));
    char body[64];
    int done = 0;
    while (done < n) {
        int k = n - done > 1000 ? 1000 : n - done;
        for (int i = 0; i < k; i++) {
            int len = snprintf(body, sizeof(body), "{\"i\":%d}", done + i);
            reqs[i] = (struct ledger_append){.actor = "t",
                                             .kind = "tile",
                                             .parent = LEDGER_NO_PARENT,
                                             .body = strdup(body),
                                             .body_len = (size_t)len};
        }
        cr_assert_eq(ledger_append_batch(l, reqs, (size_t)k, &err), FO_OK, "%s",
                     err.msg);
        for (int i = 0; i < k; i++)
            free((char *)reqs[i].body);
        done += k;
    }
    free(reqs);
    ledger_close(l);
}

static cJSON *forum_json(int want, const char *a, ...)
{
    const char *argv[32];
    int n = 0;
    va_list ap;
    va_start(ap, a);
    for (const char *s = a; s && n < 31; s = va_arg(ap, const char *))
        argv[n++] = s;
    va_end(ap);
    argv[n] = NULL;
    struct tu_run r = tu_forum(NULL, 0, argv);
    cr_assert_eq(r.status, want, "forum %s %s: exit %d\n%s%s", argv[2], argv[3],
                 r.status, r.out, r.err);
    cJSON *j = r.out_len && r.out[0] == '{' ? tu_run_json(&r) : NULL;
    tu_run_free(&r);
    return j;
}

/* Runs tiles_check.go on dir; returns its exit status, output in *log. */
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

static int file_ino(const char *dir, const char *rel, ino_t *ino)
{
    char full[1024];
    struct stat st;
    snprintf(full, sizeof(full), "%s/%s", dir, rel);
    if (stat(full, &st) != 0)
        return -1;
    *ino = st.st_ino;
    return 0;
}

/* A static file server on 127.0.0.1 for the http:// source (https:// with
 * tls): one child, one request per connection, files under root. */
static pid_t serve_files_tls(const char *root, SSL_CTX *tls, int *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    cr_assert(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
              listen(s, 16) == 0 &&
              getsockname(s, (struct sockaddr *)&a, &al) == 0);
    *port = ntohs(a.sin_port);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid > 0) {
        close(s);
        return pid;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with a test that failed */
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        SSL *ssl = NULL;
        if (tls) {
            ssl = SSL_new(tls);
            SSL_set_fd(ssl, c);
            if (SSL_accept(ssl) != 1) { /* a client that refused us */
                SSL_free(ssl);
                close(c);
                continue;
            }
        }
        char req[2048];
        int n = ssl ? SSL_read(ssl, req, (int)sizeof(req) - 1)
                    : (int)recv(c, req, sizeof(req) - 1, 0);
        char path[1024] = "";
        if (n > 0) {
            req[n] = '\0';
            sscanf(req, "GET %1000s", path);
        }
        char full[2048];
        snprintf(full, sizeof(full), "%s%s", root,
                 strncmp(path, "/log", 4) ? "/nowhere" : path + 4);
        size_t len = 0;
        char *d = tu_read_file(full, &len);
        char hdr[256];
        int h = d ? snprintf(hdr, sizeof(hdr),
                             "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
                             "Connection: close\r\n\r\n",
                             len)
                  : snprintf(hdr, sizeof(hdr),
                             "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                             "Connection: close\r\n\r\n");
        if (ssl) {
            if (SSL_write(ssl, hdr, h) == h && d && len)
                SSL_write(ssl, d, (int)len);
            SSL_shutdown(ssl);
            SSL_free(ssl);
        } else if (send(c, hdr, (size_t)h, MSG_NOSIGNAL) == h && d) {
            send(c, d, len, MSG_NOSIGNAL);
        }
        free(d);
        close(c);
    }
}

static pid_t serve_files(const char *root, int *port)
{
    return serve_files_tls(root, NULL, port);
}

/* forum verify --tiles over https: a static TLS server with a test CA,
 * trusted by --ca-file or SSL_CERT_FILE, refused otherwise. */
Test(tiles, verify_tiles_over_https_with_a_test_ca, .timeout = 120)
{
    char *work = tu_tmpdir();
    char led[256], out[256], vkey[512], pem[512], url[128];
    snprintf(led, sizeof(led), "%s/ledger", work);
    snprintf(out, sizeof(out), "%s/tiles", work);
    snprintf(pem, sizeof(pem), "%s/ca.pem", work);
    snprintf(vkey, sizeof(vkey), "@%s/checkpoint.vkey", led);
    fill(led, 300);
    cJSON_Delete(forum_json(0, "--ledger", led, "--json", "ledger", "tiles",
                            "--out", out, NULL));
    SSL_CTX *tls = tu_tls_server("IP:127.0.0.1", pem);
    int port = 0;
    pid_t srv = serve_files_tls(out, tls, &port);
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/log/", port);
    /* trusted by --ca-file: the whole check runs over https */
    cJSON *j = forum_json(0, "--json", "verify", "--tiles", url, "--vkey", vkey,
                          "--ca-file", pem, "--index", "299", NULL);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    cJSON *inc = cJSON_GetObjectItemCaseSensitive(j, "inclusion");
    cr_assert_eq(tu_num(inc, "index"), 299);
    cr_assert_gt(tu_num(j, "fetches"), 2);
    cJSON_Delete(j);
    /* the system store does not know the test CA: a source that cannot be
     * read (3), saying why */
    const char *argv[] = {"verify", "--tiles", url, "--vkey", vkey, NULL};
    struct tu_run r = tu_forum(NULL, 0, argv);
    cr_assert_eq(r.status, 3, "%s%s", r.out, r.err);
    cr_assert(strstr(r.err, "did not verify"), "%s", r.err);
    tu_run_free(&r);
    /* SSL_CERT_FILE replaces the system store */
    setenv("SSL_CERT_FILE", pem, 1);
    j = forum_json(0, "--json", "verify", "--tiles", url, "--vkey", vkey, NULL);
    unsetenv("SSL_CERT_FILE");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    cJSON_Delete(j);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    SSL_CTX_free(tls);
    /* usage: --ca-file without https, a URL with user info or port 0 */
    forum_json(2, "verify", "--tiles", out, "--vkey", vkey, "--ca-file", pem,
               NULL);
    forum_json(2, "verify", "--tiles", "https://u@127.0.0.1:1/log", "--vkey",
               vkey, NULL);
    forum_json(2, "verify", "--tiles", "https://127.0.0.1:0/log", "--vkey",
               vkey, NULL);
    /* a CA file that is not there: cannot be read */
    forum_json(3, "verify", "--tiles", url, "--vkey", vkey, "--ca-file",
               "/nonexistent/ca.pem", NULL);
    tu_rmrf(work);
}

Test(tiles, ledger_tiles_incremental_verified_from_tiles_alone, .timeout = 300)
{
    char *work = tu_tmpdir();
    char led[256], out[256], vkey[512], old[512], cp[512];
    snprintf(led, sizeof(led), "%s/ledger", work);
    snprintf(out, sizeof(out), "%s/tiles", work);
    snprintf(old, sizeof(old), "%s/old.note", work);
    snprintf(cp, sizeof(cp), "%s/checkpoint", out);
    snprintf(vkey, sizeof(vkey), "@%s/checkpoint.vkey", led);

    fill(led, 300);
    cJSON *j = forum_json(0, "--ledger", led, "--json", "ledger", "tiles",
                          "--out", out, NULL);
    cr_assert_eq(tu_num(j, "size"), 300);
    cr_assert_eq(tu_num(j, "written"), 5); /* 0/000, 0/001.p/44, 1/000.p/1,
                                              entries/000, entries/001.p/44 */
    cr_assert_eq(tu_num(j, "kept"), 0);
    cJSON_Delete(j);
    size_t len = 0;
    char *note = tu_read_file(cp, &len);
    cr_assert_eq(tu_write_file(old, note, len), 0);
    free(note);
    ino_t full0 = 0, full0b = 0;
    cr_assert_eq(file_ino(out, "tile/0/000", &full0), 0);

    /* Past two tile levels: 66,000 entries. */
    fill(led, 65700);
    j = forum_json(0, "--ledger", led, "--json", "ledger", "tiles", "--out",
                   out, NULL);
    cr_assert_eq(tu_num(j, "size"), 66000);
    cr_assert_eq(tu_num(j, "kept"), 2, "the two full tiles of size 300");
    cJSON_Delete(j);
    cr_assert_eq(file_ino(out, "tile/0/000", &full0b), 0);
    cr_assert_eq(full0, full0b, "a full tile is never rewritten");
    cr_assert_eq(file_ino(out, "tile/2/000.p/1", &full0b), 0);
    /* Run again: only the checkpoint. */
    j = forum_json(0, "--ledger", led, "--json", "ledger", "tiles", "--out",
                   out, NULL);
    cr_assert_eq(tu_num(j, "written"), 0);
    cJSON_Delete(j);

    /* forum verify from the tiles: a random entry, a given one, and the
     * consistency of the old checkpoint with the new. */
    j = forum_json(0, "--json", "verify", "--tiles", out, "--vkey", vkey,
                   "--old", old, NULL);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    cJSON *con = cJSON_GetObjectItemCaseSensitive(j, "consistency");
    cr_assert_eq(tu_num(con, "first"), 300);
    cr_assert_eq(tu_num(con, "second"), 66000);
    cr_assert_lt(tu_num(j, "fetches"), 40);
    cJSON_Delete(j);
    j = forum_json(0, "--json", "verify", "--tiles", out, "--vkey", vkey,
                   "--index", "65536", NULL);
    cJSON *inc = cJSON_GetObjectItemCaseSensitive(j, "inclusion");
    cJSON *e = forum_json(0, "--ledger", led, "--json", "ledger", "get",
                          "65536", NULL);
    cr_assert_str_eq(tu_str(inc, "entry_hash"), tu_str(e, "hash"));
    cJSON_Delete(e);
    cJSON_Delete(j);

    /* Go's tlog reads the same tiles: every file, the root, an inclusion
     * and the consistency proof through tlog.TileHashReader. */
    if (on_path("go")) {
        char vk[600];
        snprintf(vk, sizeof(vk), "%s/checkpoint.vkey", led);
        const char *args[] = {"-dir", out,      "-vkey", vk,  "-old",
                              old,    "-index", "65999", NULL};
        char *log = NULL;
        int st = go_check(work, args, &log);
        cr_assert_eq(st, 0, "tiles_check.go: %s", log);
        cr_assert(strstr(log, "inclusion of record 65999: ok"), "%s", log);
        cr_assert(strstr(log, "consistency 300 -> 66000: ok"), "%s", log);
        free(log);
    } else {
        fprintf(stderr, "tiles: Go check skipped: `go` is not on PATH "
                        "(install golang-go golang-golang-x-mod-dev)\n");
    }

    /* Over http://, from a static server. */
    int port = 0;
    pid_t srv = serve_files(out, &port);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/log/", port);
    j = forum_json(0, "--json", "verify", "--tiles", url, "--vkey", vkey,
                   "--old", old, NULL);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    cJSON_Delete(j);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);

    /* Damage: a changed bundle entry, a changed tile, a missing tile. */
    char path[1024];
    snprintf(path, sizeof(path), "%s/tile/entries/001", out);
    char *b = tu_read_file(path, &len);
    b[2 + 34 * 5] ^= 1; /* entry 261's hash */
    cr_assert_eq(tu_write_file(path, b, len), 0);
    j = forum_json(1, "--json", "verify", "--tiles", out, "--vkey", vkey,
                   "--index", "261", NULL);
    cr_assert_str_eq(tu_str(j, "reason"), "inclusion");
    cJSON_Delete(j);
    b[2 + 34 * 5] ^= 1;
    cr_assert_eq(tu_write_file(path, b, len), 0);
    free(b);
    /* A changed level-1 hash: the proof through it fails. */
    snprintf(path, sizeof(path), "%s/tile/1/000", out);
    b = tu_read_file(path, &len);
    b[0] ^= 1; /* level-8 node 0: the sibling of entry 300's subtree */
    cr_assert_eq(tu_write_file(path, b, len), 0);
    j = forum_json(1, "--json", "verify", "--tiles", out, "--vkey", vkey,
                   "--index", "300", NULL);
    cr_assert_str_eq(tu_str(j, "reason"), "inclusion");
    cJSON_Delete(j);
    free(b);
    unlink(path);
    j = forum_json(1, "--json", "verify", "--tiles", out, "--vkey", vkey,
                   "--index", "300", NULL);
    cr_assert_str_eq(tu_str(j, "reason"), "missing_tile");
    cJSON_Delete(j);
    /* A changed level-2 hash: the tiles give another root. */
    snprintf(path, sizeof(path), "%s/tile/2/000.p/1", out);
    b = tu_read_file(path, &len);
    b[0] ^= 1;
    cr_assert_eq(tu_write_file(path, b, len), 0);
    j = forum_json(1, "--json", "verify", "--tiles", out, "--vkey", vkey, NULL);
    cr_assert_str_eq(tu_str(j, "reason"), "root_mismatch");
    cJSON_Delete(j);
    free(b);
    /* Another log's key: bad_signature. */
    char other[256], ovkey[512];
    snprintf(other, sizeof(other), "%s/other", work);
    snprintf(ovkey, sizeof(ovkey), "@%s/checkpoint.vkey", other);
    fill(other, 3);
    forum_json(0, "--ledger", other, "ledger", "key", NULL);
    j = forum_json(1, "--json", "verify", "--tiles", out, "--vkey", ovkey,
                   NULL);
    cr_assert_str_eq(tu_str(j, "reason"), "bad_signature");
    cJSON_Delete(j);
    /* Tiles of another log in DIR: refused, nothing written. */
    j = forum_json(2, "--ledger", other, "ledger", "tiles", "--out", out, NULL);
    cr_assert_eq(file_ino(out, "tile/0/000", &full0b), 0);
    cr_assert_eq(full0, full0b);
    /* Usage */
    forum_json(2, "verify", "--tiles", out, NULL);
    forum_json(2, "--ledger", led, "ledger", "tiles", NULL);
    forum_json(0, "verify", "--help", NULL);
    forum_json(0, "ledger", "tiles", "--help", NULL);
    tu_rmrf(work);
}
