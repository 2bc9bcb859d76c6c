/* test_store: the storage interface (ledger/store.h) case by case, over
 * both stores: every case runs on SQLite (store_sqlite) and on a real
 * PostgreSQL (store_pg) started for this run in a temp dir (tu_pg.h). The
 * same calls must give the same answers. Then the PostgreSQL store's own
 * promises (writers serialised across handles, a lost connection fails
 * cleanly and is reset, a foreign or newer database is refused untouched),
 * and the CLI end to end on PostgreSQL (init, append, verify, export from
 * SQLite and import into PostgreSQL with the same root). */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <sqlite3.h>

#include "ledger/fo_err.h"
#include "ledger/ledger.h"
#include "ledger/proof.h"
#include "ledger/store.h"
#include "tests/testutil.h"
#include "tests/tu_pg.h"

/* ------------------------------------------------------- the server */

/* One PostgreSQL for the whole run, started before the first test and
 * handed to the test processes through the environment. */
static struct tu_pg server;

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    char why[2048] = "";
    int rc = tu_pg_start(&server, why, sizeof(why));
    tu_pg_share(&server, rc, why);
    if (rc > 0)
        fprintf(stderr, "test_store: PostgreSQL cases skipped: %s\n", why);
    else if (rc < 0)
        fprintf(stderr, "test_store: PostgreSQL did not start: %s\n", why);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    tu_pg_destroy(&server);
}

/* The shared server in a test: skips the test (saying why) when the
 * binaries are absent, fails it when the server did not start. */
static void need_pg(struct tu_pg *pg)
{
    char why[2048];
    int skip = 0;
    int rc = tu_pg_shared(pg, &skip, why, sizeof(why));
    if (rc == 0 && skip)
        cr_skip_test("PostgreSQL not available: %s", why);
    cr_assert_eq(rc, 1, "PostgreSQL: %s", why);
}

/* ------------------------------------------------------- the fixture */

/* PG_OWN: a server of the test's own, for a test that stops it (the
 * shared one serves the tests running beside it) */
enum { SQ, PG, PG_OWN };

struct fx {
    int kind;
    int own_pg; /* pg is this test's own server: destroyed at the end */
    const struct store_ops *ops;
    char *dir;
    struct tu_pg pg;
    char db[64];
    char conninfo[512];
    struct store *s;
};

/* A data dir for a new ledger: for PostgreSQL a fresh database, named in
 * DIR/store.json. */
static void fx_init(struct fx *f, int kind)
{
    memset(f, 0, sizeof(*f));
    if (kind == PG_OWN) {
        char why[2048] = "";
        int rc = tu_pg_start(&f->pg, why, sizeof(why));
        if (rc > 0)
            cr_skip_test("PostgreSQL not available: %s", why);
        cr_assert_eq(rc, 0, "PostgreSQL: %s", why);
        f->own_pg = 1;
        kind = PG;
    } else if (kind == PG) {
        need_pg(&f->pg);
    }
    f->kind = kind;
    f->ops = kind == PG ? &store_pg_ops : &store_sqlite_ops;
    f->dir = tu_tmpdir();
    if (kind == PG) {
        char why[1024];
        cr_assert_eq(
            tu_pg_createdb(&f->pg, f->db, sizeof(f->db), why, sizeof(why)), 0,
            "%s", why);
        tu_pg_conninfo(&f->pg, f->db, f->conninfo, sizeof(f->conninfo));
        struct store_conf c = {.postgres = 1, .conninfo = f->conninfo};
        struct fo_err err;
        cr_assert_eq(store_conf_write(f->dir, &c, &err), FO_OK, "%s", err.msg);
    }
}

static int fx_open(struct fx *f, unsigned flags, struct store **out,
                   struct fo_err *err)
{
    fo_err_clear(err);
    return f->ops->open(f->dir, flags, 2000, out, err);
}

/* Opens (creating) into f->s. */
static void fx_create(struct fx *f)
{
    struct fo_err err;
    int rc = fx_open(f, STORE_CREATE, &f->s, &err);
    cr_assert_eq(rc, FO_OK, "open: %s", err.msg);
}

static void fx_fini(struct fx *f)
{
    if (f->s)
        f->ops->close(f->s);
    f->s = NULL;
    tu_rmrf(f->dir);
    f->dir = NULL;
    if (f->own_pg)
        tu_pg_destroy(&f->pg);
}

#define STORE_CASE(name)                                                       \
    static void case_##name(struct fx *f);                                     \
    Test(store_sqlite, name)                                                   \
    {                                                                          \
        struct fx f;                                                           \
        fx_init(&f, SQ);                                                       \
        case_##name(&f);                                                       \
        fx_fini(&f);                                                           \
    }                                                                          \
    Test(store_pg, name)                                                       \
    {                                                                          \
        struct fx f;                                                           \
        fx_init(&f, PG);                                                       \
        case_##name(&f);                                                       \
        fx_fini(&f);                                                           \
    }                                                                          \
    static void case_##name(struct fx *f)

#define OK(call)                                                               \
    do {                                                                       \
        struct fo_err e_;                                                      \
        fo_err_clear(&e_);                                                     \
        int rc_ = (call);                                                      \
        (void)e_;                                                              \
        cr_assert_eq(rc_, FO_OK, "%s: %d %s", #call, rc_, e_.msg);             \
    } while (0)

/* ------------------------------------------------------- records */

static struct store_rec mkrec(int64_t seq, const char *actor, const char *kind,
                              int64_t parent, uint8_t payload_fill)
{
    struct store_rec r;
    memset(&r, 0, sizeof(r));
    r.seq = seq;
    r.ts = 1700000000000000 + seq;
    r.parent = parent;
    r.actor_len = strlen(actor);
    memcpy(r.actor, actor, r.actor_len);
    r.kind_len = strlen(kind);
    memcpy(r.kind, kind, r.kind_len);
    memset(r.payload, payload_fill, 32);
    for (int i = 0; i < 32; i++) {
        r.prev[i] = (uint8_t)(seq * 7 + i);
        r.hash[i] = (uint8_t)(seq * 13 + i + 1);
    }
    return r;
}

/* Puts entry seq (inside a write transaction); body may be NULL. */
static void put(struct fx *f, int64_t seq, const char *actor, const char *kind,
                int64_t parent, const char *body)
{
    struct store_rec r = mkrec(seq, actor, kind, parent, (uint8_t)seq);
    struct fo_err e;
    int rc = f->ops->put_entry(f->s, &r, body, body ? strlen(body) : 0, &e);
    cr_assert_eq(rc, FO_OK, "put %lld: %s", (long long)seq, e.msg);
}

static void begin_w(struct fx *f)
{
    struct fo_err e;
    cr_assert_eq(f->ops->begin_write(f->s, &e), FO_OK, "begin: %s", e.msg);
}

static void commit(struct fx *f)
{
    struct fo_err e;
    cr_assert_eq(f->ops->commit(f->s, &e), FO_OK, "commit: %s", e.msg);
}

/* n plain entries 0..n-1 ("note" by alice), even ones with a body. */
static void fill(struct fx *f, int n)
{
    begin_w(f);
    for (int i = 0; i < n; i++) {
        char body[64];
        snprintf(body, sizeof(body), "{\"n\":%d}", i);
        put(f, i, "alice", "note", -1, i % 2 == 0 ? body : NULL);
    }
    commit(f);
}

static void same_rec(const struct store_rec *a, const struct store_rec *b)
{
    cr_assert_eq(a->seq, b->seq);
    cr_assert_eq(a->ts, b->ts);
    cr_assert_eq(a->parent, b->parent);
    cr_assert_eq(a->actor_len, b->actor_len);
    cr_assert_eq(memcmp(a->actor, b->actor, a->actor_len), 0);
    cr_assert_eq(a->kind_len, b->kind_len);
    cr_assert_eq(memcmp(a->kind, b->kind, a->kind_len), 0);
    cr_assert_eq(memcmp(a->payload, b->payload, 32), 0);
    cr_assert_eq(memcmp(a->prev, b->prev, 32), 0);
    cr_assert_eq(memcmp(a->hash, b->hash, 32), 0);
}

/* Collects the seqs (and body lengths) a stream hands over. */
struct seen {
    int64_t seq[4096];
    long body[4096]; /* -1: no body */
    int n;
    int stop_at; /* return 42 at the n-th row (0: never) */
};

static int see(void *ctx, const struct store_row *row)
{
    struct seen *s = ctx;
    cr_assert_lt(s->n, 4096);
    s->seq[s->n] = row->rec.seq;
    s->body[s->n] = row->body ? (long)row->body_len : -1;
    s->n++;
    return s->stop_at && s->n == s->stop_at ? 42 : 0;
}

/* ------------------------------------------------------- open */

STORE_CASE(open_without_create_is_not_found)
{
    struct store *s = NULL;
    struct fo_err e;
    cr_assert_eq(fx_open(f, 0, &s, &e), FO_E_NOT_FOUND);
    cr_assert_neq(e.msg[0], '\0');
    cr_assert_eq(fx_open(f, STORE_READONLY, &s, &e), FO_E_NOT_FOUND);
}

STORE_CASE(create_then_reopen_keeps_meta)
{
    fx_create(f);
    struct fo_err e;
    char *v = NULL;
    cr_assert_eq(f->ops->meta_get(f->s, "ledger_id", &v, &e), FO_E_NOT_FOUND);
    begin_w(f);
    OK(f->ops->meta_set(f->s, "ledger_id", "abc", &e_));
    OK(f->ops->meta_set(f->s, "ledger_id", "0123456789abcdef", &e_));
    commit(f);
    f->ops->close(f->s);
    f->s = NULL;
    struct store *ro = NULL;
    OK(fx_open(f, STORE_READONLY, &ro, &e_));
    OK(f->ops->meta_get(ro, "ledger_id", &v, &e_));
    cr_assert_str_eq(v, "0123456789abcdef");
    free(v);
    /* read-only: no write transaction */
    cr_assert_eq(f->ops->begin_write(ro, &e), FO_E_INVALID);
    f->ops->close(ro);
    /* a second create of the same store opens it as it is */
    fx_create(f);
    OK(f->ops->meta_get(f->s, "ledger_id", &v, &e_));
    cr_assert_str_eq(v, "0123456789abcdef");
    free(v);
}

/* Runs sql on the fixture's database behind the store's back: sq on
 * DIR/ledger.db, pg on the PostgreSQL database. */
static void fx_exec(const struct fx *f, const char *sq, const char *pg)
{
    if (f->kind == SQ) {
        char path[512];
        snprintf(path, sizeof(path), "%s/ledger.db", f->dir);
        sqlite3 *db = NULL;
        cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
        cr_assert_eq(sqlite3_exec(db, sq, NULL, NULL, NULL), SQLITE_OK, "%s",
                     sq);
        sqlite3_close(db);
    } else {
        char why[1024];
        cr_assert_eq(tu_pg_exec(&f->pg, f->db, pg, why, sizeof(why)), 0, "%s",
                     why);
    }
}

/* Something that is not a forum ledger: refused, and left as it was. */
STORE_CASE(refuses_a_foreign_database_untouched)
{
    struct store *s = NULL;
    struct fo_err e;
    fx_exec(f, "CREATE TABLE meta(a INTEGER)",
            "CREATE SCHEMA forum; CREATE TABLE forum.meta(a int); INSERT "
            "INTO forum.meta VALUES (7)");
    cr_assert_eq(fx_open(f, STORE_CREATE, &s, &e), FO_E_FOREIGN, "%s", e.msg);
    cr_assert_eq(fx_open(f, STORE_READONLY, &s, &e), FO_E_FOREIGN, "%s", e.msg);
    cr_assert(strstr(e.msg, "not a forum ledger"), "%s", e.msg);
    if (f->kind == PG) {
        /* the schema was not touched: one table, the same row */
        char out[64];
        cr_assert_eq(tu_pg_query(&f->pg, f->db,
                                 "SELECT count(*) FROM pg_class c JOIN "
                                 "pg_namespace n ON n.oid = c.relnamespace "
                                 "WHERE n.nspname = 'forum'",
                                 out, sizeof(out)),
                     0);
        cr_assert_str_eq(out, "1");
        cr_assert_eq(tu_pg_query(&f->pg, f->db, "SELECT a FROM forum.meta", out,
                                 sizeof(out)),
                     0);
        cr_assert_str_eq(out, "7");
        /* other tables in schema forum: refused too */
        cr_assert_eq(tu_pg_exec(&f->pg, f->db,
                                "DROP TABLE forum.meta; CREATE TABLE "
                                "forum.other(x int)",
                                NULL, 0),
                     0);
        cr_assert_eq(fx_open(f, STORE_CREATE, &s, &e), FO_E_FOREIGN, "%s",
                     e.msg);
        cr_assert_eq(tu_pg_query(&f->pg, f->db,
                                 "SELECT to_regclass('forum.meta') IS NULL",
                                 out, sizeof(out)),
                     0);
        cr_assert_str_eq(out, "t");
    }
}

STORE_CASE(refuses_a_newer_format)
{
    fx_create(f);
    f->ops->close(f->s);
    f->s = NULL;
    fx_exec(f, "PRAGMA user_version=2",
            "UPDATE forum.meta SET value = '2' WHERE key = 'store_format'");
    struct store *s = NULL;
    struct fo_err e;
    cr_assert_eq(fx_open(f, 0, &s, &e), FO_E_TOO_NEW, "%s", e.msg);
    cr_assert(strstr(e.msg, "newer"), "%s", e.msg);
}

/* ------------------------------------------------------- entries */

STORE_CASE(head_counts_and_returns_the_last_entry)
{
    fx_create(f);
    int64_t n = -1;
    struct store_rec last;
    OK(f->ops->head(f->s, &n, &last, &e_));
    cr_assert_eq(n, 0);
    fill(f, 5);
    OK(f->ops->head(f->s, &n, &last, &e_));
    cr_assert_eq(n, 5);
    struct store_rec want = mkrec(4, "alice", "note", -1, 4);
    same_rec(&last, &want);
    OK(f->ops->head(f->s, &n, NULL, &e_));
    cr_assert_eq(n, 5);
}

STORE_CASE(put_and_get_entries_bodies_and_nodes)
{
    fx_create(f);
    begin_w(f);
    put(f, 0, "alice", "request", -1, "{\"q\":\"hi\"}");
    put(f, 1, "bob \xc3\xa9", "reply", 0, NULL);
    put(f, 2, "carol", "empty", 1, "");
    uint8_t h[32];
    memset(h, 0xab, 32);
    struct fo_err e;
    OK(f->ops->put_node(f->s, (3 << 6) | 1, h, &e_));
    commit(f);

    for (int64_t i = 0; i < 3; i++) {
        struct store_rec got;
        int has = -1;
        OK(f->ops->get_entry(f->s, i, &got, &has, &e_));
        struct store_rec want = mkrec(i,
                                      i == 0   ? "alice"
                                      : i == 1 ? "bob \xc3\xa9"
                                               : "carol",
                                      i == 0   ? "request"
                                      : i == 1 ? "reply"
                                               : "empty",
                                      i - 1, (uint8_t)i);
        same_rec(&got, &want);
        cr_assert_eq(has, i != 1, "entry %lld has_body %d", (long long)i, has);
    }
    void *b = NULL;
    size_t len = 0;
    OK(f->ops->get_body(f->s, 0, &b, &len, &e_));
    cr_assert_eq(len, 10);
    cr_assert_str_eq((char *)b, "{\"q\":\"hi\"}");
    free(b);
    OK(f->ops->get_body(f->s, 2, &b, &len, &e_));
    cr_assert_eq(len, 0);
    cr_assert_str_eq((char *)b, "");
    free(b);
    cr_assert_eq(f->ops->get_body(f->s, 1, &b, &len, &e), FO_E_NOT_FOUND);
    struct store_rec r;
    cr_assert_eq(f->ops->get_entry(f->s, 3, &r, NULL, &e), FO_E_NOT_FOUND);
    uint8_t got[32];
    OK(f->ops->get_node(f->s, (3 << 6) | 1, got, &e_));
    cr_assert_eq(memcmp(got, h, 32), 0);
    cr_assert_eq(f->ops->get_node(f->s, 64, got, &e), FO_E_CORRUPT);
    /* a second entry at a taken seq is refused (and rolled back): at once,
     * or at the commit where puts go out in bulk (PostgreSQL) */
    begin_w(f);
    struct store_rec dup = mkrec(1, "x", "y", -1, 9);
    int drc = f->ops->put_entry(f->s, &dup, NULL, 0, &e);
    if (drc == FO_OK)
        drc = f->ops->commit(f->s, &e);
    cr_assert_eq(drc, FO_E_CORRUPT, "%d %s", drc, e.msg);
    f->ops->rollback(f->s);
    OK(f->ops->get_entry(f->s, 1, &r, NULL, &e_));
    cr_assert_eq(r.payload[0], 1);
}

STORE_CASE(big_bodies_round_trip)
{
    fx_create(f);
    size_t n = (1u << 20) + 17;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + i % 26);
    big[n] = '\0';
    begin_w(f);
    put(f, 0, "a", "k", -1, big);
    commit(f);
    void *b = NULL;
    size_t len = 0;
    OK(f->ops->get_body(f->s, 0, &b, &len, &e_));
    cr_assert_eq(len, n);
    cr_assert_eq(memcmp(b, big, n), 0);
    free(b);
    free(big);
}

STORE_CASE(scan_with_and_without_bodies)
{
    fx_create(f);
    fill(f, 2100); /* past the PostgreSQL store's chunks (1024, 64) */
    struct seen *s = calloc(1, sizeof(*s));
    OK(f->ops->scan(f->s, 0, -1, 0, see, s, &e_));
    cr_assert_eq(s->n, 2100);
    for (int i = 0; i < s->n; i++) {
        cr_assert_eq(s->seq[i], i);
        cr_assert_eq(s->body[i], -1);
    }
    memset(s, 0, sizeof(*s));
    OK(f->ops->scan(f->s, 5, 10, 0, see, s, &e_));
    cr_assert_eq(s->n, 10);
    cr_assert_eq(s->seq[0], 5);
    cr_assert_eq(s->seq[9], 14);
    memset(s, 0, sizeof(*s));
    OK(f->ops->scan(f->s, 1000, 200, 1, see, s, &e_));
    cr_assert_eq(s->n, 200);
    for (int i = 0; i < s->n; i++) {
        int64_t seq = 1000 + i;
        char body[64];
        snprintf(body, sizeof(body), "{\"n\":%lld}", (long long)seq);
        cr_assert_eq(s->seq[i], seq);
        cr_assert_eq(s->body[i], seq % 2 ? -1 : (long)strlen(body));
    }
    memset(s, 0, sizeof(*s));
    OK(f->ops->scan(f->s, 2090, -1, 1, see, s, &e_));
    cr_assert_eq(s->n, 10);
    memset(s, 0, sizeof(*s));
    OK(f->ops->scan(f->s, 3000, -1, 1, see, s, &e_));
    cr_assert_eq(s->n, 0);
    memset(s, 0, sizeof(*s));
    OK(f->ops->scan(f->s, 0, 0, 0, see, s, &e_));
    cr_assert_eq(s->n, 0);
    /* fn's non-zero return stops the scan and is returned */
    memset(s, 0, sizeof(*s));
    s->stop_at = 1500;
    struct fo_err e;
    cr_assert_eq(f->ops->scan(f->s, 0, -1, 1, see, s, &e), 42);
    cr_assert_eq(s->n, 1500);
    free(s);
}

/* A callback may use the store while a scan runs (verify does). */
struct nested {
    struct fx *f;
    int rows;
};

static int nested_get(void *ctx, const struct store_row *row)
{
    struct nested *n = ctx;
    struct store_rec r;
    struct fo_err e;
    int rc = n->f->ops->get_entry(n->f->s, row->rec.seq, &r, NULL, &e);
    cr_assert_eq(rc, FO_OK, "%s", e.msg);
    cr_assert_eq(r.seq, row->rec.seq);
    n->rows++;
    return 0;
}

STORE_CASE(a_scan_callback_may_use_the_store)
{
    fx_create(f);
    fill(f, 1100);
    struct nested n = {f, 0};
    struct fo_err e;
    OK(f->ops->begin_read(f->s, &e_));
    OK(f->ops->scan(f->s, 0, -1, 1, nested_get, &n, &e_));
    f->ops->rollback(f->s);
    cr_assert_eq(n.rows, 1100);
    (void)e;
}

STORE_CASE(descendants_follow_the_parent_chain)
{
    fx_create(f);
    begin_w(f);
    put(f, 0, "a", "request", -1, NULL);
    put(f, 1, "a", "note", -1, NULL);
    put(f, 2, "a", "plan", 0, NULL);
    put(f, 3, "a", "task", 2, NULL);
    put(f, 4, "a", "other", 1, NULL);
    put(f, 5, "a", "result", 3, NULL);
    put(f, 6, "a", "result", 0, NULL);
    commit(f);
    struct seen s = {0};
    OK(f->ops->descendants(f->s, 0, -1, see, &s, &e_));
    int64_t want[] = {0, 2, 3, 5, 6};
    cr_assert_eq(s.n, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(s.seq[i], want[i]);
    memset(&s, 0, sizeof(s));
    OK(f->ops->descendants(f->s, 0, 3, see, &s, &e_));
    cr_assert_eq(s.n, 3);
    cr_assert_eq(s.seq[2], 3);
    memset(&s, 0, sizeof(s));
    OK(f->ops->descendants(f->s, 2, -1, see, &s, &e_));
    cr_assert_eq(s.n, 3);
    memset(&s, 0, sizeof(s));
    OK(f->ops->descendants(f->s, 99, -1, see, &s, &e_));
    cr_assert_eq(s.n, 0);
}

STORE_CASE(requests_gates_and_marked)
{
    fx_create(f);
    begin_w(f);
    put(f, 0, "a", "request", -1, NULL);
    put(f, 1, "a", "request", 0, NULL); /* not a root: not a run */
    put(f, 2, "a", "gate_requested", 0, NULL);
    put(f, 3, "a", "session_started", -1, NULL);
    put(f, 4, "a", "turn", 3, NULL);
    put(f, 5, "a", "request", -1, NULL);
    put(f, 6, "a", "turn", 3, NULL);
    put(f, 7, "a", "gate_requested", 5, NULL);
    commit(f);
    struct seen s = {0};
    OK(f->ops->requests(f->s, 0, see, &s, &e_));
    cr_assert_eq(s.n, 2);
    cr_assert_eq(s.seq[0], 0);
    cr_assert_eq(s.seq[1], 5);
    memset(&s, 0, sizeof(s));
    OK(f->ops->requests(f->s, 1, see, &s, &e_));
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.seq[0], 5);
    memset(&s, 0, sizeof(s));
    OK(f->ops->gates(f->s, 0, see, &s, &e_));
    cr_assert_eq(s.n, 2);
    cr_assert_eq(s.seq[0], 2);
    cr_assert_eq(s.seq[1], 7);
    memset(&s, 0, sizeof(s));
    OK(f->ops->gates(f->s, 3, see, &s, &e_));
    cr_assert_eq(s.n, 1);
    memset(&s, 0, sizeof(s));
    OK(f->ops->marked(f->s, 0, 0, see, &s, &e_));
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.seq[0], 3);
    memset(&s, 0, sizeof(s));
    OK(f->ops->marked(f->s, 1, 0, see, &s, &e_));
    cr_assert_eq(s.n, 2);
    cr_assert_eq(s.seq[0], 4);
    cr_assert_eq(s.seq[1], 6);
    memset(&s, 0, sizeof(s));
    OK(f->ops->marked(f->s, 1, 5, see, &s, &e_));
    cr_assert_eq(s.n, 1);
    /* a stopping callback */
    memset(&s, 0, sizeof(s));
    s.stop_at = 1;
    struct fo_err e;
    cr_assert_eq(f->ops->requests(f->s, 0, see, &s, &e), 42);
}

/* ------------------------------------------------------- tree nodes */

STORE_CASE(nodes_cursor_walks_beside_a_scan)
{
    fx_create(f);
    fill(f, 10);
    begin_w(f);
    int64_t pos[1500];
    for (int i = 0; i < 1500; i++) {
        uint8_t h[32];
        memset(h, (uint8_t)i, 32);
        pos[i] = ((int64_t)i << 6) | 1;
        OK(f->ops->put_node(f->s, pos[i], h, &e_));
    }
    commit(f);
    OK(f->ops->begin_read(f->s, &e_));
    OK(f->ops->nodes_begin(f->s, INT64_MIN, &e_));
    struct seen *s = calloc(1, sizeof(*s));
    for (int i = 0; i < 1500; i++) {
        int64_t p = -1;
        uint8_t h[32];
        OK(f->ops->nodes_next(f->s, &p, h, &e_));
        cr_assert_eq(p, pos[i]);
        cr_assert_eq(h[0], (uint8_t)i);
        if (i == 700) /* a scan in the middle, as verify does */
            OK(f->ops->scan(f->s, 0, -1, 1, see, s, &e_));
    }
    int64_t p;
    uint8_t h[32];
    struct fo_err e;
    cr_assert_eq(f->ops->nodes_next(f->s, &p, h, &e), FO_E_NOT_FOUND);
    f->ops->nodes_end(f->s);
    cr_assert_eq(s->n, 10);
    /* from a position */
    OK(f->ops->nodes_begin(f->s, pos[1490], &e_));
    int n = 0;
    while (f->ops->nodes_next(f->s, &p, h, &e) == FO_OK)
        n++;
    cr_assert_eq(n, 10);
    f->ops->nodes_end(f->s);
    f->ops->rollback(f->s);
    free(s);
}

/* ------------------------------------------------------- checkpoints */

static int see_cp(void *ctx, int64_t size, const uint8_t root[32],
                  const char *note)
{
    struct seen *s = ctx;
    s->seq[s->n] = size;
    s->body[s->n] = (long)strlen(note);
    cr_assert_eq(root[0], (uint8_t)size);
    s->n++;
    return 0;
}

STORE_CASE(checkpoints_one_per_size_kept)
{
    fx_create(f);
    struct fo_err e;
    int64_t size;
    uint8_t root[32];
    char *note = NULL;
    cr_assert_eq(f->ops->get_checkpoint(f->s, -1, &size, root, &note, &e),
                 FO_E_NOT_FOUND);
    begin_w(f);
    int64_t sizes[] = {3, 10, 7};
    for (int i = 0; i < 3; i++) {
        uint8_t r[32];
        memset(r, (uint8_t)sizes[i], 32);
        char n[64];
        snprintf(n, sizeof(n), "note of %lld\n", (long long)sizes[i]);
        OK(f->ops->put_checkpoint(f->s, sizes[i], 100 + i, r, n, &e_));
    }
    /* a second one for a size is ignored: the first stays */
    uint8_t other[32];
    memset(other, 10, 32);
    OK(f->ops->put_checkpoint(f->s, 10, 999, other, "another\n", &e_));
    commit(f);
    OK(f->ops->get_checkpoint(f->s, -1, &size, root, &note, &e_));
    cr_assert_eq(size, 10);
    cr_assert_str_eq(note, "note of 10\n");
    free(note);
    OK(f->ops->get_checkpoint(f->s, 9, &size, root, &note, &e_));
    cr_assert_eq(size, 7);
    cr_assert_eq(root[0], 7);
    free(note);
    OK(f->ops->get_checkpoint(f->s, 3, &size, root, NULL, &e_));
    cr_assert_eq(size, 3);
    cr_assert_eq(f->ops->get_checkpoint(f->s, 2, &size, root, &note, &e),
                 FO_E_NOT_FOUND);
    struct seen s = {0};
    OK(f->ops->scan_checkpoints(f->s, see_cp, &s, &e_));
    cr_assert_eq(s.n, 3);
    cr_assert_eq(s.seq[0], 3);
    cr_assert_eq(s.seq[1], 7);
    cr_assert_eq(s.seq[2], 10);
}

struct cosigs {
    char keys[8][64];
    char lines[8][128];
    int64_t ts[8];
    int n;
};

static int see_cosig(void *ctx, const char *key, int64_t ts, const char *line)
{
    struct cosigs *c = ctx;
    cr_assert_lt(c->n, 8);
    snprintf(c->keys[c->n], 64, "%s", key);
    snprintf(c->lines[c->n], 128, "%s", line);
    c->ts[c->n] = ts;
    c->n++;
    return 0;
}

STORE_CASE(cosignatures_replace_by_key)
{
    fx_create(f);
    struct cosigs c = {0};
    OK(f->ops->scan_cosignatures(f->s, 5, see_cosig, &c, &e_));
    cr_assert_eq(c.n, 0);
    begin_w(f);
    OK(f->ops->put_cosignature(f->s, 5, "w2+0000abcd", 1, "— w2 AAA", &e_));
    OK(f->ops->put_cosignature(f->s, 5, "W1+00001234", 2, "— W1 BBB", &e_));
    OK(f->ops->put_cosignature(f->s, 5, "w2+0000abcd", 3, "— w2 CCC", &e_));
    OK(f->ops->put_cosignature(f->s, 6, "w2+0000abcd", 4, "— w2 DDD", &e_));
    commit(f);
    OK(f->ops->scan_cosignatures(f->s, 5, see_cosig, &c, &e_));
    cr_assert_eq(c.n, 2);
    /* by key, in byte order ('W' < 'w') */
    cr_assert_str_eq(c.keys[0], "W1+00001234");
    cr_assert_str_eq(c.keys[1], "w2+0000abcd");
    cr_assert_str_eq(c.lines[1], "— w2 CCC");
    cr_assert_eq(c.ts[1], 3);
}

/* ------------------------------------------------------- the rest */

static int see_seq(void *ctx, int64_t seq)
{
    struct seen *s = ctx;
    s->seq[s->n++] = seq;
    return 0;
}

STORE_CASE(find_payload_lists_every_copy)
{
    fx_create(f);
    begin_w(f);
    struct store_rec a = mkrec(0, "a", "k", -1, 0x55);
    struct store_rec b = mkrec(1, "a", "k", -1, 0x66);
    struct store_rec c = mkrec(2, "a", "k", -1, 0x55);
    OK(f->ops->put_entry(f->s, &a, "{}", 2, &e_));
    OK(f->ops->put_entry(f->s, &b, "{}", 2, &e_));
    OK(f->ops->put_entry(f->s, &c, NULL, 0, &e_));
    commit(f);
    struct seen s = {0};
    OK(f->ops->find_payload(f->s, a.payload, see_seq, &s, &e_));
    cr_assert_eq(s.n, 2);
    int64_t lo = s.seq[0] < s.seq[1] ? s.seq[0] : s.seq[1];
    int64_t hi = s.seq[0] < s.seq[1] ? s.seq[1] : s.seq[0];
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 2);
    memset(&s, 0, sizeof(s));
    uint8_t none[32] = {0};
    OK(f->ops->find_payload(f->s, none, see_seq, &s, &e_));
    cr_assert_eq(s.n, 0);
}

struct counts {
    char key[8][64];
    int64_t n[8];
    int len;
};

static int see_count(void *ctx, const char *key, int64_t n)
{
    struct counts *c = ctx;
    cr_assert_lt(c->len, 8);
    snprintf(c->key[c->len], 64, "%s", key);
    c->n[c->len++] = n;
    return 0;
}

STORE_CASE(delete_body_and_counts)
{
    fx_create(f);
    begin_w(f);
    put(f, 0, "bob", "note", -1, "{\"a\":1}");
    put(f, 1, "alice", "note", -1, "{\"a\":2}");
    put(f, 2, "bob", "Zeta", -1, NULL);
    put(f, 3, "bob", "alpha", -1, "{}");
    commit(f);
    int64_t present = -1;
    OK(f->ops->count_bodies(f->s, &present, &e_));
    cr_assert_eq(present, 3);
    begin_w(f);
    OK(f->ops->delete_body(f->s, 1, &e_));
    OK(f->ops->delete_body(f->s, 2, &e_)); /* none there: no error */
    commit(f);
    OK(f->ops->count_bodies(f->s, &present, &e_));
    cr_assert_eq(present, 2);
    void *b;
    size_t len;
    struct fo_err e;
    cr_assert_eq(f->ops->get_body(f->s, 1, &b, &len, &e), FO_E_NOT_FOUND);
    struct store_rec r;
    int has = -1;
    OK(f->ops->get_entry(f->s, 1, &r, &has, &e_));
    cr_assert_eq(has, 0);
    OK(f->ops->wal_truncate(f->s, &e_));

    struct counts c = {0};
    OK(f->ops->group_counts(f->s, "kind", see_count, &c, &e_));
    cr_assert_eq(c.len, 3);
    cr_assert_str_eq(c.key[0], "Zeta"); /* byte order */
    cr_assert_str_eq(c.key[1], "alpha");
    cr_assert_str_eq(c.key[2], "note");
    cr_assert_eq(c.n[2], 2);
    memset(&c, 0, sizeof(c));
    OK(f->ops->group_counts(f->s, "actor", see_count, &c, &e_));
    cr_assert_eq(c.len, 2);
    cr_assert_str_eq(c.key[0], "alice");
    cr_assert_eq(c.n[1], 3);
    cr_assert_eq(f->ops->group_counts(f->s, "payload", see_count, &c, &e),
                 FO_E_INTERNAL);
}

STORE_CASE(rollback_leaves_nothing)
{
    fx_create(f);
    fill(f, 2);
    begin_w(f);
    put(f, 2, "a", "k", -1, "{\"x\":1}");
    uint8_t h[32] = {1};
    OK(f->ops->put_node(f->s, 2 << 6 | 1, h, &e_));
    OK(f->ops->put_checkpoint(f->s, 3, 1, h, "n\n", &e_));
    OK(f->ops->meta_set(f->s, "k", "v", &e_));
    f->ops->rollback(f->s);
    int64_t n;
    OK(f->ops->head(f->s, &n, NULL, &e_));
    cr_assert_eq(n, 2);
    struct fo_err e;
    struct store_rec r;
    cr_assert_eq(f->ops->get_entry(f->s, 2, &r, NULL, &e), FO_E_NOT_FOUND);
    uint8_t got[32];
    cr_assert_eq(f->ops->get_node(f->s, 2 << 6 | 1, got, &e), FO_E_CORRUPT);
    int64_t size;
    cr_assert_eq(f->ops->get_checkpoint(f->s, -1, &size, got, NULL, &e),
                 FO_E_NOT_FOUND);
    char *v = NULL;
    cr_assert_eq(f->ops->meta_get(f->s, "k", &v, &e), FO_E_NOT_FOUND);
    int64_t present;
    OK(f->ops->count_bodies(f->s, &present, &e_));
    cr_assert_eq(present, 1);

    /* a commit that fails (the fault seam) leaves nothing either */
    f->ops->fail_commit_after(f->s, 1);
    begin_w(f);
    put(f, 2, "a", "k", -1, "{\"x\":2}");
    cr_assert_eq(f->ops->commit(f->s, &e), FO_E_IO);
    OK(f->ops->head(f->s, &n, NULL, &e_));
    cr_assert_eq(n, 2);
    /* and the store goes on */
    begin_w(f);
    put(f, 2, "a", "k", -1, "{\"x\":3}");
    commit(f);
    OK(f->ops->head(f->s, &n, NULL, &e_));
    cr_assert_eq(n, 3);
}

STORE_CASE(a_read_transaction_sees_one_snapshot)
{
    fx_create(f);
    fill(f, 3);
    struct store *w = NULL;
    OK(fx_open(f, 0, &w, &e_));
    OK(f->ops->begin_read(f->s, &e_));
    int64_t n;
    OK(f->ops->head(f->s, &n, NULL, &e_));
    cr_assert_eq(n, 3);
    /* another handle appends meanwhile */
    OK(f->ops->begin_write(w, &e_));
    struct store_rec r = mkrec(3, "a", "k", -1, 3);
    OK(f->ops->put_entry(w, &r, NULL, 0, &e_));
    OK(f->ops->commit(w, &e_));
    OK(f->ops->head(f->s, &n, NULL, &e_));
    cr_assert_eq(n, 3, "the read transaction saw a later commit");
    f->ops->rollback(f->s);
    OK(f->ops->head(f->s, &n, NULL, &e_));
    cr_assert_eq(n, 4);
    f->ops->close(w);
}

STORE_CASE(writers_are_serialised_across_handles)
{
    fx_create(f);
    struct store *w = NULL;
    struct fo_err e;
    fo_err_clear(&e);
    /* the second handle waits 300 ms for the write lock, then gives up */
    cr_assert_eq(f->ops->open(f->dir, 0, 300, &w, &e), FO_OK, "%s", e.msg);
    begin_w(f);
    cr_assert_eq(f->ops->begin_write(w, &e), FO_E_BUSY, "%s", e.msg);
    commit(f);
    OK(f->ops->begin_write(w, &e_));
    int64_t n;
    OK(f->ops->head(w, &n, NULL, &e_));
    OK(f->ops->commit(w, &e_));
    f->ops->close(w);
}

STORE_CASE(check_passes_on_a_healthy_store)
{
    fx_create(f);
    fill(f, 1);
    OK(f->ops->check(f->s, &e_));
}

/* ------------------------------------------------------- PostgreSQL only */

static void pg_fx(struct fx *f)
{
    fx_init(f, PG);
    fx_create(f);
}

/* Ends the store's server connection from outside (as a restart or a
 * network cut would). */
static void kill_backends(struct fx *f)
{
    char sql[256], why[1024];
    snprintf(sql, sizeof(sql),
             "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
             "datname = '%s' AND pid <> pg_backend_pid()",
             f->db);
    cr_assert_eq(tu_pg_exec(&f->pg, "postgres", sql, why, sizeof(why)), 0, "%s",
                 why);
}

Test(store_pg_only, a_lost_connection_fails_cleanly_then_resets)
{
    struct fx f; /* it stops its server: one of its own */
    fx_init(&f, PG_OWN);
    fx_create(&f);
    fill(&f, 2);
    begin_w(&f);
    put(&f, 2, "a", "k", -1, "{\"lost\":true}");
    kill_backends(&f);
    struct fo_err e;
    fo_err_clear(&e);
    struct store_rec r = mkrec(3, "a", "k", -1, 3);
    int rc = f.ops->put_entry(f.s, &r, NULL, 0, &e);
    if (rc == FO_OK) /* the statement may have been sent before the cut */
        rc = f.ops->commit(f.s, &e);
    cr_assert_eq(rc, FO_E_IO, "%d %s", rc, e.msg);
    cr_assert(strstr(e.msg, "connection lost"), "%s", e.msg);
    cr_assert(strstr(e.msg, f.db), "the message names the database: %s", e.msg);
    f.ops->rollback(f.s);
    /* the next transaction reconnects; nothing of the lost one is there */
    begin_w(&f);
    int64_t n;
    OK(f.ops->head(f.s, &n, NULL, &e_));
    cr_assert_eq(n, 2);
    put(&f, 2, "a", "k", -1, NULL);
    commit(&f);
    /* outside a transaction: a read finds it lost, reconnects, goes on */
    kill_backends(&f);
    OK(f.ops->head(f.s, &n, NULL, &e_));
    cr_assert_eq(n, 3);
    /* and so do a write transaction's begin and the health check */
    kill_backends(&f);
    begin_w(&f);
    put(&f, 3, "a", "k", -1, NULL);
    commit(&f);
    kill_backends(&f);
    OK(f.ops->check(f.s, &e_));
    kill_backends(&f);
    OK(f.ops->begin_read(f.s, &e_));
    OK(f.ops->head(f.s, &n, NULL, &e_));
    cr_assert_eq(n, 4);
    f.ops->rollback(f.s);
    /* the server down (stopped as by a crash): begin fails, naming it;
     * once it is back, the next begin reconnects */
    cr_assert_eq(tu_pg_stop(&f.pg), 0);
    struct fo_err e2;
    rc = f.ops->begin_write(f.s, &e2);
    char why[2048] = "";
    int up = tu_pg_restart(&f.pg, why, sizeof(why));
    cr_assert_eq(up, 0, "restart: %s", why);
    cr_assert_eq(rc, FO_E_IO, "%d %s", rc, e2.msg);
    cr_assert(strstr(e2.msg, "reconnecting failed"), "%s", e2.msg);
    cr_assert(strstr(e2.msg, f.pg.dir), "names the socket dir: %s", e2.msg);
    begin_w(&f);
    OK(f.ops->head(f.s, &n, NULL, &e_));
    cr_assert_eq(n, 4);
    f.ops->rollback(f.s);
    fx_fini(&f);
}

Test(store_pg_only, an_unreachable_server_names_the_socket)
{
    struct fx f;
    fx_init(&f, PG);
    char ci[512];
    snprintf(ci, sizeof(ci),
             "host=%s/nowhere port=5999 dbname=x user=forum "
             "connect_timeout=5",
             f.dir);
    struct store_conf c = {.postgres = 1, .conninfo = ci};
    struct fo_err e;
    OK(store_conf_write(f.dir, &c, &e_));
    struct store *s = NULL;
    cr_assert_eq(fx_open(&f, STORE_CREATE, &s, &e), FO_E_IO);
    cr_assert(strstr(e.msg, "cannot connect"), "%s", e.msg);
    cr_assert(strstr(e.msg, "/nowhere"), "%s", e.msg);
    cr_assert(strstr(e.msg, ".s.PGSQL.5999"), "%s", e.msg);
    fx_fini(&f);
}

Test(store_pg_only, a_database_holding_another_ledger_is_refused)
{
    struct fx f;
    pg_fx(&f);
    begin_w(&f);
    OK(f.ops->meta_set(f.s, "ledger_id", "1111111111111111", &e_));
    commit(&f);
    f.ops->close(f.s);
    f.s = NULL;
    /* a database whose ledger changes under an open store: the check
     * says the storage moved, and writes stop (sticky) */
    struct store *w = NULL;
    OK(fx_open(&f, 0, &w, &e_));
    OK(f.ops->check(w, &e_));
    cr_assert_eq(tu_pg_exec(&f.pg, f.db,
                            "UPDATE forum.meta SET value = '3333333333333333' "
                            "WHERE key = 'ledger_id'",
                            NULL, 0),
                 0);
    {
        struct fo_err e;
        cr_assert_eq(f.ops->check(w, &e), FO_OK, "not pinned yet: %s", e.msg);
    }
    f.ops->close(w);
    char pin1[] = "1111111111111111";
    struct store_conf c1 = {
        .postgres = 1, .conninfo = f.conninfo, .ledger_id = pin1};
    OK(store_conf_write(f.dir, &c1, &e_));
    cr_assert_eq(tu_pg_exec(&f.pg, f.db,
                            "UPDATE forum.meta SET value = '1111111111111111' "
                            "WHERE key = 'ledger_id'",
                            NULL, 0),
                 0);
    OK(fx_open(&f, 0, &w, &e_));
    OK(f.ops->check(w, &e_));
    cr_assert_eq(tu_pg_exec(&f.pg, f.db,
                            "UPDATE forum.meta SET value = '3333333333333333' "
                            "WHERE key = 'ledger_id'",
                            NULL, 0),
                 0);
    {
        struct fo_err e;
        cr_assert_eq(f.ops->check(w, &e), FO_E_STORAGE_MOVED, "%s", e.msg);
        cr_assert_eq(f.ops->begin_write(w, &e), FO_E_STORAGE_MOVED);
        cr_assert_eq(f.ops->check(w, &e), FO_E_STORAGE_MOVED);
    }
    f.ops->close(w);
    cr_assert_eq(tu_pg_exec(&f.pg, f.db,
                            "UPDATE forum.meta SET value = '1111111111111111' "
                            "WHERE key = 'ledger_id'",
                            NULL, 0),
                 0);
    char pinned[] = "2222222222222222";
    struct store_conf c = {
        .postgres = 1, .conninfo = f.conninfo, .ledger_id = pinned};
    OK(store_conf_write(f.dir, &c, &e_));
    struct store *s = NULL;
    struct fo_err e;
    cr_assert_eq(fx_open(&f, 0, &s, &e), FO_E_FOREIGN);
    cr_assert(strstr(e.msg, "1111111111111111"), "%s", e.msg);
    /* and a pinned ledger whose database was emptied is not re-made */
    char other[64], why[1024];
    cr_assert_eq(tu_pg_createdb(&f.pg, other, sizeof(other), why, sizeof(why)),
                 0);
    char ci[512];
    tu_pg_conninfo(&f.pg, other, ci, sizeof(ci));
    c.conninfo = ci;
    OK(store_conf_write(f.dir, &c, &e_));
    cr_assert_eq(fx_open(&f, STORE_CREATE, &s, &e), FO_E_NOT_FOUND, "%s",
                 e.msg);
    char out[16];
    cr_assert_eq(tu_pg_query(&f.pg, other,
                             "SELECT count(*) FROM pg_namespace WHERE "
                             "nspname = 'forum'",
                             out, sizeof(out)),
                 0);
    cr_assert_str_eq(out, "0");
    fx_fini(&f);
}

Test(store_pg_only, session_settings_and_what_is_not_supported)
{
    struct fx f;
    pg_fx(&f);
    struct fo_err e;
    fo_err_clear(&e);
    char path[600];
    snprintf(path, sizeof(path), "%s/copy.db", f.dir);
    cr_assert_eq(f.ops->backup(f.s, path, &e), FO_E_INVALID);
    cr_assert(strstr(e.msg, "export"), "%s", e.msg);
    /* the store's own session: synchronous_commit on, seen by the server */
    char sql[300], out[64];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' "
             "AND application_name = 'forum'",
             f.db);
    cr_assert_eq(tu_pg_query(&f.pg, "postgres", sql, out, sizeof(out)), 0);
    cr_assert_str_eq(out, "1");
    cr_assert_eq(store_pg_check_conninfo("host=/x password=secret", &e),
                 FO_E_INVALID);
    cr_assert(strstr(e.msg, "PGPASSFILE"), "%s", e.msg);
    cr_assert_eq(
        store_pg_check_conninfo("postgresql://forum:secret@localhost/db", &e),
        FO_E_INVALID);
    cr_assert_eq(store_pg_check_conninfo("host=/x nonsense=1", &e),
                 FO_E_INVALID);
    OK(store_pg_check_conninfo("postgresql:///forum?host=/run/postgresql",
                               &e_));
    fx_fini(&f);
}

/* ------------------------------------------------------- the CLI */

static struct tu_run forum_in(const char *dir, const char *a1, const char *a2,
                              const char *a3, const char *a4, const char *a5,
                              const char *a6, const char *a7)
{
    const char *argv[] = {"--ledger", dir, a1, a2, a3, a4, a5, a6, a7, NULL};
    return tu_forum(NULL, 0, argv);
}

/* `ledger summary --json` without the ledger id (each ledger has its own). */
static char *summary_sans_id(const char *dir)
{
    struct tu_run r =
        forum_in(dir, "ledger", "summary", "--json", NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "summary: %s", r.err);
    cJSON *j = tu_run_json(&r);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "ledger_id");
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    tu_run_free(&r);
    return s;
}

Test(store_cli, init_append_verify_and_import_on_postgres)
{
    struct tu_pg pg;
    need_pg(&pg);
    char db[64], why[1024], ci[512];
    cr_assert_eq(tu_pg_createdb(&pg, db, sizeof(db), why, sizeof(why)), 0, "%s",
                 why);
    tu_pg_conninfo(&pg, db, ci, sizeof(ci));
    char *dir = tu_tmpdir();
    char pdir[600];
    snprintf(pdir, sizeof(pdir), "%s/pg", dir);
    struct tu_run r = forum_in(pdir, "ledger", "init", "--postgres", ci,
                               "--origin", "test/pg", "--json");
    cr_assert_eq(r.status, 0, "init: %s", r.err);
    cJSON *j = tu_run_json(&r);
    cr_assert_str_eq(tu_str(j, "store"), "postgres");
    char id[64];
    snprintf(id, sizeof(id), "%s", tu_str(j, "ledger_id"));
    cJSON_Delete(j);
    tu_run_free(&r);
    /* store.json names the database and pins the ledger; no ledger.db */
    char p[700];
    snprintf(p, sizeof(p), "%s/store.json", pdir);
    cr_assert(tu_file_has(p, "\"store\":\"postgres\""));
    cr_assert(tu_file_has(p, id));
    snprintf(p, sizeof(p), "%s/ledger.db", pdir);
    cr_assert_neq(access(p, F_OK), 0);
    /* init again: the same ledger */
    r = forum_in(pdir, "ledger", "init", "--postgres", ci, "--json", NULL,
                 NULL);
    cr_assert_eq(r.status, 0, "init again: %s", r.err);
    j = tu_run_json(&r);
    cr_assert_str_eq(tu_str(j, "ledger_id"), id);
    cJSON_Delete(j);
    tu_run_free(&r);

    /* the same appends into a SQLite ledger and the PostgreSQL one */
    char sdir[600];
    snprintf(sdir, sizeof(sdir), "%s/sq", dir);
    r = forum_in(sdir, "ledger", "init", "--origin", "test/pg", NULL, NULL,
                 NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    for (int i = 0; i < 6; i++) {
        char payload[64];
        snprintf(payload, sizeof(payload), "{\"i\":%d,\"s\":\"\\u00e9\"}", i);
        const char *d[2] = {pdir, sdir};
        for (int k = 0; k < 2; k++) {
            const char *argv[] = {"--ledger",  d[k],
                                  "ledger",    "append",
                                  "--actor",   i % 2 ? "bob" : "alice",
                                  "--kind",    i == 4 ? "request" : "note",
                                  "--payload", payload,
                                  NULL};
            r = tu_forum(NULL, 0, argv);
            cr_assert_eq(r.status, 0, "append: %s", r.err);
            tu_run_free(&r);
        }
    }
    r = forum_in(pdir, "ledger", "verify", "--deep", NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "verify: %s %s", r.out, r.err);
    tu_run_free(&r);
    r = forum_in(pdir, "ledger", "redact", "2", "--reason", "test", NULL, NULL);
    cr_assert_eq(r.status, 0, "redact: %s", r.err);
    tu_run_free(&r);
    r = forum_in(pdir, "ledger", "verify", "--deep", NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "verify after redaction: %s %s", r.out, r.err);
    tu_run_free(&r);
    r = forum_in(pdir, "ledger", "checkpoint", "--sign", NULL, NULL, NULL,
                 NULL);
    cr_assert_eq(r.status, 0, "checkpoint: %s", r.err);
    tu_run_free(&r);
    r = forum_in(pdir, "ledger", "prove", "3", NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "prove: %s", r.err);
    tu_run_free(&r);
    /* a file backup is not what PostgreSQL has: refused, bad input */
    snprintf(p, sizeof(p), "%s/b.db", dir);
    r = forum_in(pdir, "ledger", "backup", p, NULL, NULL, NULL, NULL);
    cr_assert_neq(r.status, 0);
    tu_run_free(&r);

    /* export the SQLite ledger, import it into a new PostgreSQL one: the
     * same entries, root and summary */
    char exp[700];
    snprintf(exp, sizeof(exp), "%s/export.jsonl", dir);
    r = forum_in(sdir, "ledger", "export", "-o", exp, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "export: %s", r.err);
    tu_run_free(&r);
    char db2[64], ci2[512], idir[600];
    cr_assert_eq(tu_pg_createdb(&pg, db2, sizeof(db2), why, sizeof(why)), 0);
    tu_pg_conninfo(&pg, db2, ci2, sizeof(ci2));
    snprintf(idir, sizeof(idir), "%s/imp", dir);
    r = forum_in(idir, "ledger", "init", "--postgres", ci2, "--origin",
                 "test/pg", NULL);
    cr_assert_eq(r.status, 0, "init: %s", r.err);
    tu_run_free(&r);
    /* an import that fails at its end (the end line's root is not the
     * entries'): one transaction held it all, so nothing of it is kept and
     * the same ledger takes the good file after */
    size_t xl = 0;
    char *x = tu_read_file(exp, &xl);
    cr_assert(x);
    char *rt = strstr(x, "\"root\":\"");
    cr_assert(rt, "%s", x);
    rt += 8;
    *rt = *rt == '0' ? '1' : '0';
    char bad[720];
    snprintf(bad, sizeof(bad), "%s.bad", exp);
    cr_assert_eq(tu_write_file(bad, x, xl), 0);
    free(x);
    r = forum_in(idir, "ledger", "import", bad, NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 1, "%d %s", r.status, r.err);
    cr_assert(strstr(r.err, "tree root"), "%s", r.err);
    tu_run_free(&r);
    r = forum_in(idir, "ledger", "summary", "--json", NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *sj = tu_run_json(&r);
    cr_assert_eq(tu_num(sj, "entries"), 0, "kept after a failed import: %s",
                 r.out);
    cJSON_Delete(sj);
    tu_run_free(&r);
    r = forum_in(idir, "ledger", "import", exp, NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "import: %s", r.err);
    tu_run_free(&r);
    /* a ledger that holds entries takes no import, and keeps them */
    r = forum_in(idir, "ledger", "import", exp, NULL, NULL, NULL, NULL);
    cr_assert_neq(r.status, 0);
    cr_assert(strstr(r.err, "already holds 6 entries"), "%s", r.err);
    tu_run_free(&r);
    r = forum_in(idir, "ledger", "verify", "--deep", NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "verify: %s %s", r.out, r.err);
    tu_run_free(&r);
    char *a = summary_sans_id(sdir), *b = summary_sans_id(idir);
    cr_assert_str_eq(a, b);
    free(a);
    free(b);
    struct tu_run ra = forum_in(sdir, "ledger", "checkpoint", "--sign",
                                "--json", NULL, NULL, NULL);
    struct tu_run rb = forum_in(idir, "ledger", "checkpoint", "--sign",
                                "--json", NULL, NULL, NULL);
    cr_assert_eq(ra.status, 0, "%s", ra.err);
    cr_assert_eq(rb.status, 0, "%s", rb.err);
    cJSON *ja = tu_run_json(&ra), *jb = tu_run_json(&rb);
    cr_assert_str_eq(tu_str(ja, "root"), tu_str(jb, "root"));
    cr_assert_eq(tu_num(ja, "size"), tu_num(jb, "size"));
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    tu_run_free(&ra);
    tu_run_free(&rb);

    /* ledger migrate, in one step: SQLite into a new PostgreSQL database
     * (the same entries and root, the key beside it), and back into SQLite */
    char db3[64], ci3[512], mdir[600], bdir[600];
    cr_assert_eq(tu_pg_createdb(&pg, db3, sizeof(db3), why, sizeof(why)), 0);
    tu_pg_conninfo(&pg, db3, ci3, sizeof(ci3));
    snprintf(mdir, sizeof(mdir), "%s/mig", dir);
    snprintf(bdir, sizeof(bdir), "%s/back", dir);
    r = forum_in(sdir, "ledger", "migrate", "--into", mdir, "--postgres", ci3,
                 "--json");
    cr_assert_eq(r.status, 0, "migrate: %s", r.err);
    cJSON *mj = tu_run_json(&r);
    cr_assert_eq(tu_num(mj, "entries"), 6);
    cr_assert_str_eq(tu_str(mj, "store"), "postgres");
    cr_assert(strstr(r.out, "checkpoint.key"), "%s", r.out);
    cJSON_Delete(mj);
    tu_run_free(&r);
    r = forum_in(mdir, "ledger", "verify", "--deep", NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "verify: %s %s", r.out, r.err);
    tu_run_free(&r);
    a = summary_sans_id(sdir);
    b = summary_sans_id(mdir);
    cr_assert_str_eq(a, b);
    free(b);
    r = forum_in(mdir, "ledger", "migrate", "--into", bdir, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "migrate back: %s", r.err);
    tu_run_free(&r);
    b = summary_sans_id(bdir);
    cr_assert_str_eq(a, b);
    free(a);
    free(b);
    /* a database that holds a ledger takes no migration, and keeps it;
     * nothing is left in the dir asked for */
    char ndir[600];
    snprintf(ndir, sizeof(ndir), "%s/none", dir);
    r = forum_in(sdir, "ledger", "migrate", "--into", ndir, "--postgres", ci3,
                 NULL);
    cr_assert_neq(r.status, 0);
    cr_assert(strstr(r.err, "holds a ledger of 6 entries"), "%s", r.err);
    tu_run_free(&r);
    struct stat nst;
    cr_assert(stat(ndir, &nst) != 0, "a failed migrate left %s", ndir);
    r = forum_in(mdir, "ledger", "verify", NULL, NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "%s %s", r.out, r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(store_cli, refusals_and_exit_codes)
{
    struct tu_pg pg;
    need_pg(&pg);
    char *dir = tu_tmpdir();
    char d[600], ci[600];
    /* unreachable: exit 3, naming the socket */
    snprintf(d, sizeof(d), "%s/a", dir);
    snprintf(ci, sizeof(ci), "host=%s/none port=5999 dbname=x user=forum", dir);
    struct tu_run r =
        forum_in(d, "ledger", "init", "--postgres", ci, NULL, NULL, NULL);
    cr_assert_eq(r.status, 3, "%d %s", r.status, r.err);
    cr_assert(strstr(r.err, "/none/.s.PGSQL.5999"), "%s", r.err);
    tu_run_free(&r);
    r = forum_in(d, "ledger", "verify", NULL, NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 3, "%d %s", r.status, r.err);
    tu_run_free(&r);
    /* a mistyped conninfo is fixed by running init again */
    char db0[64], why0[1024], ci0[512];
    cr_assert_eq(tu_pg_createdb(&pg, db0, sizeof(db0), why0, sizeof(why0)), 0);
    tu_pg_conninfo(&pg, db0, ci0, sizeof(ci0));
    r = forum_in(d, "ledger", "init", "--postgres", ci0, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "%d %s", r.status, r.err);
    tu_run_free(&r);
    r = forum_in(d, "ledger", "verify", NULL, NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0, "%d %s", r.status, r.err);
    tu_run_free(&r);
    /* then it is pinned: another database is refused */
    r = forum_in(d, "ledger", "init", "--postgres", ci, NULL, NULL, NULL);
    cr_assert_eq(r.status, 2, "%d %s", r.status, r.err);
    cr_assert(strstr(r.err, "another PostgreSQL database"), "%s", r.err);
    tu_run_free(&r);
    /* a password in the conninfo: bad input, nothing written */
    snprintf(d, sizeof(d), "%s/b", dir);
    r = forum_in(d, "ledger", "init", "--postgres",
                 "host=/tmp dbname=x password=hunter2", NULL, NULL, NULL);
    cr_assert_eq(r.status, 2, "%d %s", r.status, r.err);
    cr_assert(!strstr(r.err, "hunter2"), "%s", r.err);
    tu_run_free(&r);
    char p[700];
    snprintf(p, sizeof(p), "%s/store.json", d);
    cr_assert_neq(access(p, F_OK), 0);
    /* a data dir holding a SQLite ledger keeps it */
    snprintf(d, sizeof(d), "%s/c", dir);
    r = forum_in(d, "ledger", "init", NULL, NULL, NULL, NULL, NULL);
    cr_assert_eq(r.status, 0);
    tu_run_free(&r);
    char db[64], why[1024], ci2[512];
    cr_assert_eq(tu_pg_createdb(&pg, db, sizeof(db), why, sizeof(why)), 0);
    tu_pg_conninfo(&pg, db, ci2, sizeof(ci2));
    r = forum_in(d, "ledger", "init", "--postgres", ci2, NULL, NULL, NULL);
    cr_assert_neq(r.status, 0);
    cr_assert(strstr(r.err, "ledger.db"), "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* A `ledger init --postgres` that cannot reach its database leaves nothing
 * behind: no store.json naming it, no new data dir (before, store.json
 * stayed and every later command went to the unreachable database); an
 * existing dir and its files are left as they were. */
Test(store_conf, a_failed_postgres_init_leaves_no_store_json)
{
    char *base = tu_tmpdir();
    char dir[600], conf[700];
    snprintf(dir, sizeof(dir), "%s/new", base);
    snprintf(conf, sizeof(conf), "%s/store.json", dir);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "init", "--postgres",
                  "host=/nonexistent-forum-dir dbname=forum", NULL);
    cr_assert_eq(r.status, 3, "%s", r.err);
    cr_assert(strstr(r.err, "cannot connect"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_neq(access(conf, F_OK), 0, "store.json was left behind");
    cr_assert_neq(access(dir, F_OK), 0, "the new data dir was left behind");
    /* an existing dir: kept, without the store.json */
    cr_assert_eq(mkdir(dir, 0700), 0);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", "--postgres",
                  "host=/nonexistent-forum-dir dbname=forum", NULL);
    cr_assert_eq(r.status, 3, "%s", r.err);
    tu_run_free(&r);
    cr_assert_neq(access(conf, F_OK), 0, "store.json was left behind");
    cr_assert_eq(access(dir, F_OK), 0);
    tu_rmrf(base);
}

/* ------------------------------------------- decisions made once */

/* A gate's decision goes in once however writers race: two in one batch,
 * and two handles (two daemons) each appending one after the other has
 * committed; the loser is told which entry won, the batch goes on. */
STORE_CASE(a_sole_decision_goes_in_once)
{
    struct ledger *a = NULL, *b = NULL;
    struct fo_err err;
    OK(ledger_open(f->dir, LEDGER_OPEN_CREATE, NULL, &a, &err));
    OK(ledger_open(f->dir, 0, NULL, &b, &err));
    static const char *const sole[] = {"gate_approved", "gate_rejected", NULL};
    struct ledger_append g = {.actor = "gate",
                              .kind = "gate_requested",
                              .parent = LEDGER_NO_PARENT,
                              .body = "{}",
                              .body_len = 2};
    OK(ledger_append_batch(a, &g, 1, &err));
    cr_assert_eq(g.rc, FO_OK);
    int64_t gate = g.entry.seq;
    struct ledger_append two[3] = {
        {.actor = "human",
         .kind = "gate_approved",
         .parent = gate,
         .body = "{}",
         .body_len = 2,
         .sole_kinds = sole},
        {.actor = "human",
         .kind = "gate_rejected",
         .parent = gate,
         .body = "{}",
         .body_len = 2,
         .sole_kinds = sole},
        {.actor = "x",
         .kind = "note",
         .parent = gate,
         .body = "{}",
         .body_len = 2},
    };
    OK(ledger_append_batch(a, two, 3, &err));
    cr_assert_eq(two[0].rc, FO_OK);
    cr_assert_eq(two[1].rc, FO_E_EXISTS, "%s", two[1].err.msg);
    cr_assert_eq(two[1].entry.seq, two[0].entry.seq, "names the winner");
    cr_assert_eq(two[2].rc, FO_OK, "the batch went on");
    /* another handle, after the first committed */
    struct ledger_append late = {.actor = "human",
                                 .kind = "gate_rejected",
                                 .parent = gate,
                                 .body = "{}",
                                 .body_len = 2,
                                 .sole_kinds = sole};
    OK(ledger_append_batch(b, &late, 1, &err));
    cr_assert_eq(late.rc, FO_E_EXISTS);
    int64_t count = 0;
    OK(ledger_count(a, &count, &err));
    cr_assert_eq(count, 3, "gate, one decision, the note");
    ledger_close(a);
    ledger_close(b);
}

/* ------------------------------------------- staged appends (PostgreSQL) */

struct got_outcome {
    int64_t batch;
    char *text;
    int calls;
};

static int got_outcome(void *ctx, int64_t batch, const char *outcome)
{
    struct got_outcome *g = ctx;
    g->calls++;
    g->batch = batch;
    free(g->text);
    g->text = strdup(outcome);
    return 0;
}

/* Collects batch's outcome (it must be there) and applies it to reqs. */
static void collect_into(struct ledger *l, int64_t batch,
                         struct ledger_append *reqs, size_t n)
{
    struct got_outcome g = {.batch = -1};
    struct fo_err err;
    OK(ledger_stage_collect(l, &batch, 1, got_outcome, &g, &err));
    cr_assert_eq(g.calls, 1, "batch %lld: no outcome", (long long)batch);
    cr_assert_eq(g.batch, batch);
    OK(ledger_stage_outcome(g.text, reqs, n, &err));
    /* read again until forgotten (an answer lost on the way) */
    g.calls = 0;
    OK(ledger_stage_collect(l, &batch, 1, got_outcome, &g, &err));
    cr_assert_eq(g.calls, 1, "an outcome lost before it was forgotten");
    int64_t none = 0;
    OK(ledger_stage(l, NULL, 0, "ff", &batch, 1, &none, &err));
    cr_assert_eq(none, -1);
    g.calls = 0;
    OK(ledger_stage_collect(l, &batch, 1, got_outcome, &g, &err));
    cr_assert_eq(g.calls, 0, "an outcome forgotten is gone");
    free(g.text);
}

static struct ledger_append note(const char *actor, int64_t parent,
                                 const char *body)
{
    return (struct ledger_append){.actor = actor,
                                  .kind = "note",
                                  .parent = parent,
                                  .body = body,
                                  .body_len = strlen(body)};
}

/* Two writers stage without a lock between them; nothing is in the chain
 * until the integrator sequences the staged batches, each whole and in
 * order, with its own appends; each writer then reads its entries (the
 * hashes it is told are those of the chain) and the ledger verifies deep,
 * with the root a single writer gives the same entries. */
Test(store_pg_stage, writers_stage_and_one_integrator_sequences)
{
    struct fx f;
    pg_fx(&f);
    struct ledger *w1 = NULL, *w2 = NULL, *in = NULL;
    struct fo_err err;
    OK(ledger_open(f.dir, LEDGER_OPEN_CREATE, NULL, &in, &err));
    OK(ledger_open(f.dir, 0, NULL, &w1, &err));
    OK(ledger_open(f.dir, 0, NULL, &w2, &err));
    cr_assert(ledger_can_stage(w1));
    OK(ledger_append(in, "a", "note", LEDGER_NO_PARENT, "{}", 2, NULL, &err));
    int fd = -1;
    OK(ledger_stage_listen(w1, &fd, &err));
    cr_assert_geq(fd, 0);
    ledger_stage_notes(w1); /* the first call says "maybe missed" */
    struct ledger_append b1[3] = {note("w1", 0, "{\"k\":1}"),
                                  note("w1", LEDGER_NO_PARENT, "{\"k\":2}"),
                                  note("w1", LEDGER_NO_PARENT, "{\"k\":3}")};
    b1[2].parent_back = 1; /* the entry before it, in the same batch */
    struct ledger_append b2[2] = {note("", 0, "{}"), /* refused now */
                                  note("w2", 0, "{\"k\":4}")};
    int64_t id1 = -1, id2 = -1;
    OK(ledger_stage(w1, b1, 3, "a1", NULL, 0, &id1, &err));
    OK(ledger_stage(w2, b2, 2, "b2", NULL, 0, &id2, &err));
    cr_assert_geq(id1, 0);
    cr_assert_gt(id2, id1);
    cr_assert_eq(b1[0].rc, FO_OK);
    cr_assert_eq(b1[0].entry.seq, -1, "staged, not in the chain yet");
    cr_assert_eq(b2[0].rc, FO_E_INVALID, "a bad actor is refused at once");
    int64_t count = 0;
    OK(ledger_count(in, &count, &err));
    cr_assert_eq(count, 1, "staged entries are not in the chain");
    /* not integrated: no outcome yet */
    struct got_outcome g = {.batch = -1};
    OK(ledger_stage_collect(w1, &id1, 1, got_outcome, &g, &err));
    cr_assert_eq(g.calls, 0);
    /* the integrator: the staged batches first, then its own */
    struct ledger_append own = note("in", LEDGER_NO_PARENT, "{\"own\":1}");
    size_t took = 0;
    OK(ledger_integrate(in, &own, 1, 4096, &took, &err));
    cr_assert_eq(took, 4, "three rows of one batch and one of the other");
    cr_assert_eq(own.rc, FO_OK);
    cr_assert_eq(own.entry.seq, 5);
    /* the writer is notified: its connection turns readable */
    unsigned notes = 0;
    for (int i = 0; i < 600 && !(notes & LEDGER_NOTE_INTEGRATED); i++) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        poll(&pf, 1, 100);
        notes |= ledger_stage_notes(w1);
    }
    cr_assert(notes & LEDGER_NOTE_INTEGRATED, "no note of the integration");
    collect_into(w1, id1, b1, 3);
    collect_into(w2, id2, b2, 2);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(b1[i].rc, FO_OK, "%d: %s", i, b1[i].err.msg);
    cr_assert_eq(b1[0].entry.seq, 1);
    cr_assert_eq(b1[1].entry.seq, 2);
    cr_assert_eq(b1[2].entry.seq, 3);
    cr_assert_eq(b1[2].entry.parent, 2, "parent_back resolved");
    cr_assert_eq(b2[0].rc, FO_E_INVALID);
    cr_assert_eq(b2[1].rc, FO_OK);
    cr_assert_eq(b2[1].entry.seq, 4);
    /* what the writers were told is what the chain holds, bodies too */
    for (int i = 0; i < 3; i++) {
        struct ledger_entry e;
        OK(ledger_get(in, b1[i].entry.seq, &e, NULL, &err));
        cr_assert_eq(memcmp(e.hash, b1[i].entry.hash, 32), 0);
        char *body = NULL;
        size_t len = 0;
        OK(ledger_body(w2, b1[i].entry.seq, &body, &len, &err));
        cr_assert_str_eq(body, b1[i].body);
        free(body);
    }
    /* nothing is left staged */
    OK(ledger_integrate(in, NULL, 0, 4096, &took, &err));
    cr_assert_eq(took, 0);
    struct ledger_verify_result res;
    OK(ledger_verify(w1, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err));
    cr_assert(res.ok, "%s at %lld", res.reason ? res.reason : "",
              (long long)res.first_bad_seq);
    cr_assert_eq(res.entries, 6);
    /* one writer appending the same entries makes the same root */
    char *sq = tu_tmpdir();
    struct ledger *one = NULL;
    OK(ledger_open(sq, LEDGER_OPEN_CREATE, NULL, &one, &err));
    for (int64_t s = 0; s < 6; s++) {
        struct ledger_entry e;
        char *body = NULL;
        size_t len = 0;
        OK(ledger_get(in, s, &e, NULL, &err));
        OK(ledger_body(in, s, &body, &len, &err));
        struct ledger_append r = {.actor = e.actor,
                                  .kind = e.kind,
                                  .parent = e.parent,
                                  .body = body,
                                  .body_len = len,
                                  .import = &e};
        OK(ledger_append_batch(one, &r, 1, &err));
        cr_assert_eq(r.rc, FO_OK, "%lld: %s", (long long)s, r.err.msg);
        free(body);
    }
    uint8_t ra[32], rb[32];
    int64_t na = 0, nb = 0;
    OK(ledger_tree_head(in, &na, ra, &err));
    OK(ledger_tree_head(one, &nb, rb, &err));
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(ra, rb, 32), 0, "not the root one writer makes");
    ledger_close(one);
    tu_rmrf(sq);
    ledger_close(w1);
    ledger_close(w2);
    ledger_close(in);
    fx_fini(&f);
}

/* The checks that need the head are made when integrating: a sole
 * decision staged by two writers goes in once (the loser told which entry
 * won), an entry of a run whose lease another owner holds is refused
 * (RUN_ELSEWHERE), a request entry takes its run's lease, and a parent
 * that does not exist yet is refused. */
Test(store_pg_stage, head_checks_are_made_at_integration)
{
    struct fx f;
    pg_fx(&f);
    struct ledger *w1 = NULL, *w2 = NULL, *in = NULL;
    struct fo_err err;
    OK(ledger_open(f.dir, LEDGER_OPEN_CREATE, NULL, &in, &err));
    OK(ledger_open(f.dir, 0, NULL, &w1, &err));
    OK(ledger_open(f.dir, 0, NULL, &w2, &err));
    static const char *const sole[] = {"gate_approved", "gate_rejected", NULL};
    struct ledger_append req = note("client", LEDGER_NO_PARENT, "{}");
    req.kind = "request";
    req.lease_owner = "aa";
    req.lease_run = -1;
    req.lease_ms = 60000;
    int64_t id0;
    OK(ledger_stage(w1, &req, 1, "a1", NULL, 0, &id0, &err));
    size_t took = 0;
    OK(ledger_integrate(in, NULL, 0, 100, &took, &err));
    collect_into(w1, id0, &req, 1);
    cr_assert_eq(req.rc, FO_OK, "%s", req.err.msg);
    int64_t run = req.entry.seq;
    char owner[65];
    int live = 0;
    OK(ledger_lease_get(in, run, owner, sizeof(owner), &live, &err));
    cr_assert_str_eq(owner, "aa", "the request took its run's lease");
    cr_assert(live);
    struct ledger_append a = note("human", run, "{}"),
                         b = note("human", run, "{\"no\":1}");
    a.kind = "gate_approved";
    a.sole_kinds = sole;
    b.kind = "gate_rejected";
    b.sole_kinds = sole;
    struct ledger_append fenced[2] = {note("bb", run, "{}"),
                                      note("aa", run, "{}")};
    fenced[0].lease_owner = "bb";
    fenced[0].lease_run = run;
    fenced[1].lease_owner = "aa";
    fenced[1].lease_run = run;
    struct ledger_append orphan = note("x", 999, "{}");
    int64_t ia, ib, ic, id;
    OK(ledger_stage(w1, &a, 1, "a1", NULL, 0, &ia, &err));
    OK(ledger_stage(w2, &b, 1, "b2", NULL, 0, &ib, &err));
    OK(ledger_stage(w2, fenced, 2, "b2", NULL, 0, &ic, &err));
    OK(ledger_stage(w1, &orphan, 1, "a1", NULL, 0, &id, &err));
    OK(ledger_integrate(in, NULL, 0, 100, &took, &err));
    cr_assert_eq(took, 5);
    collect_into(w1, ia, &a, 1);
    collect_into(w2, ib, &b, 1);
    collect_into(w2, ic, fenced, 2);
    collect_into(w1, id, &orphan, 1);
    cr_assert_eq(a.rc, FO_OK, "%s", a.err.msg);
    cr_assert_eq(b.rc, FO_E_EXISTS, "%s", b.err.msg);
    cr_assert_eq(b.entry.seq, a.entry.seq, "names the winner");
    cr_assert(strstr(b.err.msg, "already decided"), "%s", b.err.msg);
    cr_assert_eq(fenced[0].rc, FO_E_RUN_ELSEWHERE, "%s", fenced[0].err.msg);
    cr_assert_eq(fenced[1].rc, FO_OK, "%s", fenced[1].err.msg);
    cr_assert_eq(orphan.rc, FO_E_INVALID, "%s", orphan.err.msg);
    int64_t count = 0;
    OK(ledger_count(in, &count, &err));
    cr_assert_eq(count, 3, "the request, one decision, the fenced-in note");
    ledger_close(w1);
    ledger_close(w2);
    ledger_close(in);
    fx_fini(&f);
}

/* One integrator at a time, on the server's clock: a claim while another
 * holds the lease live fails, a release lets the next claim win at once,
 * and an unrenewed lease expires for the others. */
Test(store_pg_stage, the_integration_lease_has_one_holder)
{
    struct fx f;
    pg_fx(&f);
    struct ledger *a = NULL, *b = NULL;
    struct fo_err err;
    OK(ledger_open(f.dir, LEDGER_OPEN_CREATE, NULL, &a, &err));
    OK(ledger_open(f.dir, 0, NULL, &b, &err));
    int held = 0;
    char who[65];
    OK(ledger_integrator_lease(a, LEDGER_ILEASE_GET, "aa", 0, &held, who,
                               sizeof(who), &err));
    cr_assert_eq(held, 0);
    cr_assert_str_eq(who, "");
    OK(ledger_integrator_lease(a, LEDGER_ILEASE_CLAIM, "aa", 60000, &held, who,
                               sizeof(who), &err));
    cr_assert_eq(held, 1);
    OK(ledger_integrator_lease(b, LEDGER_ILEASE_CLAIM, "bb", 60000, &held, who,
                               sizeof(who), &err));
    cr_assert_eq(held, 0);
    cr_assert_str_eq(who, "aa");
    OK(ledger_integrator_lease(a, LEDGER_ILEASE_RENEW, "aa", 60000, &held, who,
                               sizeof(who), &err));
    cr_assert_eq(held, 1);
    OK(ledger_integrator_lease(a, LEDGER_ILEASE_RELEASE, "aa", 0, &held, who,
                               sizeof(who), &err));
    OK(ledger_integrator_lease(b, LEDGER_ILEASE_CLAIM, "bb", 300, &held, who,
                               sizeof(who), &err));
    cr_assert_eq(held, 1, "a released lease is claimed at once");
    OK(ledger_integrator_lease(a, LEDGER_ILEASE_RENEW, "aa", 60000, &held, who,
                               sizeof(who), &err));
    cr_assert_eq(held, 0, "a lease taken over is not renewed");
    OK(ledger_integrator_lease(a, LEDGER_ILEASE_CLAIM, "aa", 60000, &held, who,
                               sizeof(who), &err));
    cr_assert_eq(held, 0);
    /* bb stops renewing: after its 300 ms, aa's claim wins */
    int64_t t0 = tu_now_ms();
    while (!held) {
        cr_assert_lt(tu_now_ms() - t0, 30000, "the lease never expired");
        usleep(50000);
        OK(ledger_integrator_lease(a, LEDGER_ILEASE_CLAIM, "aa", 60000, &held,
                                   who, sizeof(who), &err));
    }
    ledger_close(a);
    ledger_close(b);
    fx_fini(&f);
}

/* A failed integration keeps the staged rows staged: the next one takes
 * them (nothing is lost, nothing doubled). */
Test(store_pg_stage, a_failed_integration_leaves_them_staged)
{
    struct fx f;
    pg_fx(&f);
    struct ledger *w = NULL, *in = NULL;
    struct fo_err err;
    OK(ledger_open(f.dir, LEDGER_OPEN_CREATE, NULL, &in, &err));
    OK(ledger_open(f.dir, 0, NULL, &w, &err));
    struct ledger_append r[2] = {note("w", LEDGER_NO_PARENT, "{\"a\":1}"),
                                 note("w", LEDGER_NO_PARENT, "{\"a\":2}")};
    int64_t id;
    OK(ledger_stage(w, r, 2, "cc", NULL, 0, &id, &err));
    ledger_fail_commit_after(in, 1);
    size_t took = 0;
    struct ledger_append own = note("in", LEDGER_NO_PARENT, "{}");
    cr_assert_eq(ledger_integrate(in, &own, 1, 100, &took, &err), FO_E_IO);
    cr_assert_eq(own.rc, FO_E_IO);
    struct got_outcome g = {.batch = -1};
    OK(ledger_stage_collect(w, &id, 1, got_outcome, &g, &err));
    cr_assert_eq(g.calls, 0, "an outcome of a transaction that failed");
    OK(ledger_integrate(in, NULL, 0, 100, &took, &err));
    cr_assert_eq(took, 2);
    collect_into(w, id, r, 2);
    cr_assert_eq(r[0].entry.seq, 0);
    cr_assert_eq(r[1].entry.seq, 1);
    int64_t count = 0;
    OK(ledger_count(in, &count, &err));
    cr_assert_eq(count, 2);
    ledger_close(w);
    ledger_close(in);
    fx_fini(&f);
}

/* An integration takes whole batches in batch order while the rows
 * before a batch are fewer than its limit (one batch at least, however
 * large); what is left waits for the next, in order. */
Test(store_pg_stage, an_integration_takes_whole_batches_up_to_its_limit)
{
    struct fx f;
    pg_fx(&f);
    struct ledger *w = NULL, *in = NULL;
    struct fo_err err;
    OK(ledger_open(f.dir, LEDGER_OPEN_CREATE, NULL, &in, &err));
    OK(ledger_open(f.dir, 0, NULL, &w, &err));
    static const size_t sizes[4] = {3, 2, 4, 1};
    struct ledger_append r[4][4];
    int64_t id[4];
    char bodies[4][4][64];
    for (int b = 0; b < 4; b++) {
        for (size_t i = 0; i < sizes[b]; i++) {
            snprintf(bodies[b][i], sizeof(bodies[b][i]), "{\"b\":%d,\"i\":%zu}",
                     b, i);
            r[b][i] = note("w", LEDGER_NO_PARENT, bodies[b][i]);
        }
        OK(ledger_stage(w, r[b], sizes[b], "dd", NULL, 0, &id[b], &err));
    }
    size_t took = 0;
    /* 3 rows before the second batch (< 4), 5 before the third */
    OK(ledger_integrate(in, NULL, 0, 4, &took, &err));
    cr_assert_eq(took, 5, "the first two batches whole, not %zu", took);
    /* a limit below the next batch's size still takes it whole */
    OK(ledger_integrate(in, NULL, 0, 1, &took, &err));
    cr_assert_eq(took, 4);
    OK(ledger_integrate(in, NULL, 0, 4096, &took, &err));
    cr_assert_eq(took, 1);
    OK(ledger_integrate(in, NULL, 0, 4096, &took, &err));
    cr_assert_eq(took, 0);
    int64_t next = 0;
    for (int b = 0; b < 4; b++) {
        collect_into(w, id[b], r[b], sizes[b]);
        for (size_t i = 0; i < sizes[b]; i++, next++) {
            cr_assert_eq(r[b][i].rc, FO_OK, "%s", r[b][i].err.msg);
            cr_assert_eq(r[b][i].entry.seq, next, "staging order kept");
            char *body = NULL;
            size_t len = 0;
            OK(ledger_body(in, next, &body, &len, &err));
            cr_assert_str_eq(body, bodies[b][i], "the staged body moved");
            free(body);
        }
    }
    struct ledger_verify_result res;
    OK(ledger_verify(in, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err));
    cr_assert(res.ok, "%s", res.reason ? res.reason : "");
    ledger_close(w);
    ledger_close(in);
    fx_fini(&f);
}

/* SQLite stays one writer: no staging there. */
Test(store_sqlite, stages_nothing)
{
    char *dir = tu_tmpdir();
    struct ledger *l = NULL;
    struct fo_err err;
    OK(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err));
    cr_assert_eq(ledger_can_stage(l), 0);
    struct ledger_append r = note("w", LEDGER_NO_PARENT, "{}");
    int64_t id;
    cr_assert_eq(ledger_stage(l, &r, 1, "aa", NULL, 0, &id, &err),
                 FO_E_INVALID);
    ledger_close(l);
    tu_rmrf(dir);
}

/* ------------------------------------------------- the owner checks */

/* This suite runs with the owner checks on (FORUM_OWNER_ASSERTS, on in
 * every build with the tests): a PostgreSQL ledger handle used by a
 * thread that does not own it aborts the process, naming the call. */

static void *count_main(void *arg)
{
    struct ledger *l = arg;
    struct fo_err err;
    int64_t n = 0;
    ledger_count(l, &n, &err);
    return NULL;
}

Test(store_pg_only, a_handle_used_off_its_owner_thread_aborts)
{
#ifndef FORUM_OWNER_ASSERTS
    cr_assert_fail("built without FORUM_OWNER_ASSERTS: the PostgreSQL suite "
                   "must run with the owner checks on");
#endif
    struct fx f;
    fx_init(&f, PG);
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(f.dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    int64_t n = -1;
    cr_assert_eq(ledger_count(l, &n, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(n, 0);
    ledger_close(l);
    char errpath[512];
    snprintf(errpath, sizeof(errpath), "%s/child.err", f.dir);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        if (!freopen(errpath, "w", stderr) ||
            ledger_open(f.dir, 0, NULL, &l, &err) != FO_OK)
            _exit(10);
        pthread_t th;
        if (pthread_create(&th, NULL, count_main, l) != 0)
            _exit(11);
        pthread_join(th, NULL);
        _exit(0);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    char *msg = tu_read_file(errpath, NULL);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
              "the child was not aborted (status %#x): %s", st, msg ? msg : "");
    cr_assert(msg && strstr(msg, "ledger_count: ledger handle"), "%s",
              msg ? msg : "(no stderr)");
    free(msg);
    fx_fini(&f);
}
