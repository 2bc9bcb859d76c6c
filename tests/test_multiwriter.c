/* test_multiwriter: several daemons on one PostgreSQL ledger (issue 17).
 * Three `forum serve` processes, each with its own data dir whose
 * store.json names the same database and ledger (and the same checkpoint
 * key), take appends at once from client threads, and runs; then the
 * ledger verifies, every acknowledged entry is there with the hash it was
 * acknowledged with, the seqs are contiguous, and the root is the one the
 * same entries give when one writer appends them (export, import into a
 * fresh SQLite ledger). A daemon SIGKILLed with runs in flight: another
 * claims them once their leases expire and finishes them, and the fake
 * model's call count shows no witnessed step made twice. PostgreSQL
 * restarted under load: the daemons report errors, reconnect, and lose
 * nothing they acknowledged. The event stream of one daemon shows every
 * daemon's entries, once, in order (its reads on its workers).
 *
 * Each test starts its own PostgreSQL (tu_pg.h) and skips, saying so,
 * only when the server binaries are absent. */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <libpq-fe.h>

#include "ledger/fo_json.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_pg.h"

#define NDAEMONS 3

struct mw {
    struct tu_pg pg;
    char db[64];
    char conninfo[512];
    char *dirs[NDAEMONS];
    struct tu_daemon d[NDAEMONS];
    int up[NDAEMONS];
};

static void copy_file(const char *from_dir, const char *to_dir,
                      const char *name)
{
    char a[512], b[512];
    snprintf(a, sizeof(a), "%s/%s", from_dir, name);
    snprintf(b, sizeof(b), "%s/%s", to_dir, name);
    size_t n = 0;
    char *data = tu_read_file(a, &n);
    cr_assert_not_null(data, "%s", a);
    FILE *f = fopen(b, "wb");
    cr_assert_not_null(f, "%s", b);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    chmod(b, 0600);
    free(data);
}

/* A PostgreSQL, a database, and NDAEMONS data dirs on its one ledger,
 * sharing dir 0's checkpoint key. */
static void mw_init(struct mw *m)
{
    memset(m, 0, sizeof(*m));
    char why[2048] = "";
    int rc = tu_pg_start(&m->pg, why, sizeof(why));
    if (rc > 0)
        cr_skip_test("PostgreSQL binaries not found: %s", why);
    cr_assert_eq(rc, 0, "PostgreSQL did not start: %s", why);
    cr_assert_eq(tu_pg_createdb(&m->pg, m->db, sizeof(m->db), why, sizeof(why)),
                 0, "%s", why);
    tu_pg_conninfo(&m->pg, m->db, m->conninfo, sizeof(m->conninfo));
    for (int i = 0; i < NDAEMONS; i++) {
        m->dirs[i] = tu_tmpdir();
        struct tu_run r =
            tu_forumv(NULL, "--ledger", m->dirs[i], "ledger", "init",
                      "--postgres", m->conninfo, (char *)NULL);
        cr_assert_eq(r.status, 0, "init %d: %s%s", i, r.out, r.err);
        tu_run_free(&r);
        if (i == 0) {
            r = tu_forumv(NULL, "--ledger", m->dirs[0], "ledger", "key",
                          (char *)NULL);
            cr_assert_eq(r.status, 0, "key: %s", r.err);
            tu_run_free(&r);
        } else {
            copy_file(m->dirs[0], m->dirs[i], "checkpoint.key");
            copy_file(m->dirs[0], m->dirs[i], "checkpoint.vkey");
        }
    }
}

static void mw_start(struct mw *m, int i, const struct tu_fakebin *f)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f ? f->port : 1);
    if (f)
        tu_daemon_start(&m->d[i], m->dirs[i], "--lease-s", "1",
                        "--checkpoint-ms", "200", "--chat-url", url, "--model",
                        "fake", (char *)NULL);
    else
        tu_daemon_start(&m->d[i], m->dirs[i], "--lease-s", "1",
                        "--checkpoint-ms", "200", (char *)NULL);
    m->up[i] = 1;
}

static void mw_stop(struct mw *m, int i)
{
    if (!m->up[i])
        return;
    cr_assert_eq(tu_daemon_signal_wait(&m->d[i], SIGTERM, 60000), 0,
                 "daemon %d did not stop cleanly", i);
    m->up[i] = 0;
}

static void mw_free(struct mw *m)
{
    for (int i = 0; i < NDAEMONS; i++) {
        mw_stop(m, i);
        tu_rmrf(m->dirs[i]);
    }
    tu_pg_destroy(&m->pg);
}

/* ---- appends from client threads ---------------------------------------- */

#define ACK_MAX 20000

struct acks {
    pthread_mutex_t mu;
    int64_t seq[ACK_MAX];
    char hash[ACK_MAX][65];
    size_t n;
    atomic_long failed; /* answered with an error, or no answer */
};

struct client {
    const struct tu_daemon *d;
    struct acks *acks;
    int id, count;
    int tolerate; /* errors allowed (the database restarts) */
    atomic_int *stop;
};

static void *client_main(void *arg)
{
    struct client *c = arg;
    for (int k = 0; k < c->count && !(c->stop && atomic_load(c->stop)); k++) {
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"actor\":\"client-%d\",\"kind\":\"note\","
                 "\"payload\":{\"port\":%d,\"k\":%d}}",
                 c->id, c->d->port, k);
        char *reply = NULL;
        int st = tu_http(c->d, "POST", "/append", body, 1, &reply);
        cJSON *j = NULL;
        struct fo_err err;
        if (st == 200 && reply &&
            fo_json_parse(reply, strlen(reply), &j, &err) == FO_OK) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "seq");
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "hash");
            pthread_mutex_lock(&c->acks->mu);
            if (cJSON_IsNumber(s) && cJSON_IsString(h) &&
                c->acks->n < ACK_MAX) {
                c->acks->seq[c->acks->n] = (int64_t)s->valuedouble;
                snprintf(c->acks->hash[c->acks->n], 65, "%s", h->valuestring);
                c->acks->n++;
            }
            pthread_mutex_unlock(&c->acks->mu);
        } else {
            atomic_fetch_add(&c->acks->failed, 1);
            if (c->tolerate)
                usleep(20000);
        }
        cJSON_Delete(j);
        free(reply);
    }
    return NULL;
}

static void acks_init(struct acks *a)
{
    memset(a, 0, sizeof(*a));
    pthread_mutex_init(&a->mu, NULL);
    atomic_init(&a->failed, 0);
}

/* Every acknowledged entry is there, with its hash; no seq acked twice. */
static void acks_check(const struct acks *a, const char *dir)
{
    char *seen = calloc(1 << 20, 1);
    cr_assert_not_null(seen);
    for (size_t i = 0; i < a->n; i++) {
        cr_assert_lt(a->seq[i], 1 << 20);
        cr_assert_eq(seen[a->seq[i]], 0, "seq %lld acknowledged twice",
                     (long long)a->seq[i]);
        seen[a->seq[i]] = 1;
    }
    free(seen);
    /* one read of the whole log: export, then look each ack up */
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "export", (char *)NULL);
    cr_assert_eq(r.status, 0, "export: %s", r.err);
    size_t cap = 1 << 20;
    char(*hash)[65] = calloc(cap, 65);
    cr_assert_not_null(hash);
    long long entries = 0;
    for (char *line = r.out; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        cJSON *j = NULL;
        struct fo_err err;
        if (fo_json_parse(line, strlen(line), &j, &err) == FO_OK) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "entry");
            const cJSON *src = e ? e : j;
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(src, "seq");
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(src, "hash");
            if (cJSON_IsNumber(s) && cJSON_IsString(h) &&
                s->valuedouble < (double)cap) {
                cr_assert_eq((long long)s->valuedouble, entries,
                             "seqs not contiguous at %lld", entries);
                snprintf(hash[(size_t)s->valuedouble], 65, "%s",
                         h->valuestring);
                entries++;
            }
        }
        cJSON_Delete(j);
        line = nl ? nl + 1 : NULL;
    }
    cr_assert_gt(entries, 0, "the export held no entries: %.200s", r.out);
    for (size_t i = 0; i < a->n; i++) {
        cr_assert_lt(a->seq[i], entries, "acknowledged seq %lld is missing",
                     (long long)a->seq[i]);
        cr_assert_str_eq(hash[a->seq[i]], a->hash[i],
                         "seq %lld: not the hash acknowledged",
                         (long long)a->seq[i]);
    }
    free(hash);
    tu_run_free(&r);
}

static void verify_deep(const char *dir)
{
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify",
                                "--deep", (char *)NULL);
    cr_assert_eq(r.status, 0, "verify --deep: %s%s", r.out, r.err);
    tu_run_free(&r);
}

/* The root at size n, from `ledger prove 0 --size n`. */
static void root_at(const char *dir, long long n, char out[65])
{
    char size[32];
    snprintf(size, sizeof(size), "%lld", n);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "prove", "0", "--size", size, (char *)NULL);
    cr_assert_eq(r.status, 0, "prove: %s%s", r.out, r.err);
    cJSON *j = tu_run_json(&r);
    snprintf(out, 65, "%s", tu_str(j, "root"));
    cJSON_Delete(j);
    tu_run_free(&r);
}

static long long count_of(const char *dir)
{
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "summary", (char *)NULL);
    cr_assert_eq(r.status, 0, "summary: %s", r.err);
    cJSON *j = tu_run_json(&r);
    long long n = tu_num(j, "entries");
    cJSON_Delete(j);
    tu_run_free(&r);
    return n;
}

/* The same entries appended by one writer (an import into a new SQLite
 * ledger re-hashes each and rebuilds the tree) give the same root. */
static void same_root_as_one_writer(const char *dir)
{
    char *exp = tu_tmpdir();
    char file[512];
    snprintf(file, sizeof(file), "%s/export.jsonl", exp);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "export", "-o",
                                file, (char *)NULL);
    cr_assert_eq(r.status, 0, "export: %s", r.err);
    tu_run_free(&r);
    char *sq = tu_tmpdir();
    char sqdir[512];
    snprintf(sqdir, sizeof(sqdir), "%s/one", sq);
    r = tu_forumv(NULL, "--ledger", sqdir, "ledger", "import", file,
                  (char *)NULL);
    cr_assert_eq(r.status, 0, "import: %s%s", r.out, r.err);
    tu_run_free(&r);
    long long n = count_of(dir);
    cr_assert_eq(count_of(sqdir), n);
    char a[65], b[65];
    root_at(dir, n, a);
    root_at(sqdir, n, b);
    cr_assert_str_eq(a, b, "PostgreSQL root %s, one writer's %s", a, b);
    tu_rmrf(sq);
    tu_rmrf(exp);
}

/* ---- runs --------------------------------------------------------------- */

static int64_t run_start(const struct tu_daemon *d, const char *text)
{
    char body[256];
    snprintf(body, sizeof(body), "{\"request\":\"%s\"}", text);
    cJSON *s = tu_http_json(d, "POST", "/runs", body, 200);
    int64_t run = tu_num(s, "run");
    cJSON_Delete(s);
    return run;
}

/* GET /runs/{run} from d until its state is one of the ends. */
static cJSON *run_wait(const struct tu_daemon *d, int64_t run, int ms)
{
    return tu_daemon_run_wait(d, (long long)run, ms);
}

/* Waits (a minute at most, else the test fails saying why) until the
 * fake model's counter key reaches n. */
static void fake_wait(const struct tu_fakebin *f, const char *key, long long n,
                      const char *why)
{
    int64_t t0 = tu_now_ms();
    while (tu_fakebin_stat(f, key) < n) {
        cr_assert_lt(tu_now_ms() - t0, 60000, "%s", why);
        usleep(20000);
    }
}

/* How many entries of kind run's entries hold. */
static int kinds_in(const cJSON *g, const char *kind)
{
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach (v, cJSON_GetObjectItemCaseSensitive(g, "entries"))
        n += !strcmp(tu_str(v, "kind"), kind);
    return n;
}

/* ---- the tests ---------------------------------------------------------- */

Test(multiwriter, three_daemons_append_at_once_one_chain, .timeout = 300)
{
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    struct tu_fakebin f;
    tu_fakebin_start(&f, 0, "20");
    for (int i = 0; i < NDAEMONS; i++)
        mw_start(&m, i, &f);
    static struct acks acks;
    acks_init(&acks);
    enum { THREADS = 4, EACH = 150 };
    pthread_t t[NDAEMONS * THREADS];
    struct client c[NDAEMONS * THREADS];
    for (int i = 0; i < NDAEMONS * THREADS; i++) {
        c[i] = (struct client){
            .d = &m.d[i % NDAEMONS], .acks = &acks, .id = i, .count = EACH};
        cr_assert_eq(pthread_create(&t[i], NULL, client_main, &c[i]), 0);
    }
    /* runs on every daemon while the appends go on */
    int64_t runs[NDAEMONS * 2];
    for (int i = 0; i < NDAEMONS * 2; i++)
        runs[i] = run_start(&m.d[i % NDAEMONS], "make the schema");
    for (int i = 0; i < NDAEMONS * THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(atomic_load(&acks.failed), 0, "appends failed");
    cr_assert_eq(acks.n, (size_t)NDAEMONS * THREADS * EACH);
    /* each run ends done, seen from every daemon alike */
    for (int i = 0; i < NDAEMONS * 2; i++) {
        cJSON *g = run_wait(&m.d[(i + 1) % NDAEMONS], runs[i], 60000);
        cr_assert_str_eq(tu_str(g, "state"), "done", "run %lld",
                         (long long)runs[i]);
        cr_assert_eq(kinds_in(g, "answer"), 1);
        cJSON_Delete(g);
    }
    for (int i = 0; i < NDAEMONS; i++)
        mw_stop(&m, i);
    verify_deep(m.dirs[0]);
    verify_deep(m.dirs[2]);
    acks_check(&acks, m.dirs[1]);
    same_root_as_one_writer(m.dirs[0]);
    /* the checkpoints the three signed with the one shared key verify */
    struct tu_run r = tu_forumv(NULL, "--ledger", m.dirs[2], "ledger",
                                "checkpoint", (char *)NULL);
    cr_assert_eq(r.status, 0, "checkpoint: %s%s", r.out, r.err);
    tu_run_free(&r);
    tu_fakebin_stop(&f);
    mw_free(&m);
}

Test(multiwriter, a_killed_daemons_runs_are_claimed_and_finished_elsewhere,
     .timeout = 300)
{
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    struct tu_fakebin f;
    tu_fakebin_start(&f, 0, "0");
    for (int i = 0; i < NDAEMONS; i++)
        mw_start(&m, i, &f);
    /* one run through, to know how many calls a whole run makes */
    int64_t one = run_start(&m.d[1], "make the schema");
    cJSON *g = run_wait(&m.d[1], one, 60000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    long long per_run = tu_fakebin_stat(&f, "calls");
    cr_assert_gt(per_run, 0);
    tu_fakebin_stop(&f);
    /* a fresh fake that holds every call until let go: the daemons are told of
     * it by restarting them (the model's URL is a flag) */
    for (int i = 0; i < NDAEMONS; i++)
        mw_stop(&m, i);
    tu_fakebin_start(&f, 1, "0");
    for (int i = 0; i < NDAEMONS; i++)
        mw_start(&m, i, &f);
    enum { K = 4 };
    int64_t runs[K];
    for (int i = 0; i < K; i++)
        runs[i] = run_start(&m.d[0], "make the schema");
    /* each is held in its first model call, running on daemon 0, and so
     * seen from the others */
    fake_wait(&f, "held", K, "the runs did not start");
    char inst0[64];
    for (int i = 0; i < K; i++) {
        char path[64];
        snprintf(path, sizeof(path), "/runs/%lld", (long long)runs[i]);
        g = tu_http_json(&m.d[2], "GET", path, NULL, 200);
        cr_assert_str_eq(tu_str(g, "state"), "running", "run %lld",
                         (long long)runs[i]);
        snprintf(inst0, sizeof(inst0), "%s", tu_str(g, "instance"));
        cJSON_Delete(g);
    }
    /* daemon 0 dies: its K calls in flight are lost (made, never
     * witnessed), and let go so they do not hold the fake */
    cr_assert_eq(tu_daemon_signal_wait(&m.d[0], SIGKILL, 10000), 128 + SIGKILL);
    m.up[0] = 0;
    cr_assert_eq(kill(f.pid, SIGUSR2), 0);
    /* the others claim the runs once the leases expire, and call again */
    fake_wait(&f, "calls", 2 * K, "nobody claimed the runs");
    cr_assert_eq(kill(f.pid, SIGUSR1), 0); /* now every call goes through */
    for (int i = 0; i < K; i++) {
        g = run_wait(&m.d[1 + i % 2], runs[i], 60000);
        cr_assert_str_eq(tu_str(g, "state"), "done", "run %lld",
                         (long long)runs[i]);
        cr_assert_str_neq(tu_str(g, "instance"), inst0);
        cr_assert_eq(kinds_in(g, "resume"), 1);
        cr_assert_eq(kinds_in(g, "plan"), 1);
        cr_assert_eq(kinds_in(g, "answer"), 1);
        cJSON_Delete(g);
    }
    /* every witnessed call made once; the K in flight at the kill once
     * more */
    cr_assert_eq(tu_fakebin_stat(&f, "calls"), K * per_run + K,
                 "calls %lld, expected %lld", tu_fakebin_stat(&f, "calls"),
                 K * per_run + K);
    /* daemon 0 comes back: nothing of its runs is left to do */
    mw_start(&m, 0, &f);
    usleep(1500 * 1000);
    cr_assert_eq(tu_fakebin_stat(&f, "calls"), K * per_run + K);
    for (int i = 0; i < NDAEMONS; i++)
        mw_stop(&m, i);
    verify_deep(m.dirs[1]);
    tu_fakebin_stop(&f);
    mw_free(&m);
}

/* The value of metric name in d's GET /metrics (-1 when absent). */
static long long metric(const struct tu_daemon *d, const char *name)
{
    char *body = NULL;
    long long v = -1;
    if (tu_http(d, "GET", "/metrics", NULL, 1, &body) == 200 && body) {
        size_t n = strlen(name);
        for (char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
            if (!strncmp(p, name, n) && p[n] == ' ')
                v = strtoll(p + n + 1, NULL, 10);
    }
    free(body);
    return v;
}

/* Which of the live daemons integrates (-1: none, -2: more than one). */
static int integrator_of(const struct mw *m)
{
    int who = -1;
    for (int i = 0; i < NDAEMONS; i++)
        if (m->up[i] && metric(&m->d[i], "forum_integrator") == 1)
            who = who == -1 ? i : -2;
    return who;
}

/* Appends from three daemons are staged and sequenced by one integrator:
 * one daemon holds the lease, the others stage (their appends count as
 * staged, the integrator's as integrated). The integrator is SIGKILLed
 * under load: another daemon takes the lease over within the lease time
 * and integrates what was staged, the writers' clients go on, and nothing
 * acknowledged is lost (every acked entry is in the chain with its hash,
 * the ledger verifies deep, and its root is the one a single writer
 * makes of the same entries). */
Test(multiwriter, the_integrator_killed_another_takes_over_nothing_acked_lost,
     .timeout = 300)
{
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    for (int i = 0; i < NDAEMONS; i++)
        mw_start(&m, i, NULL);
    int64_t t0 = tu_now_ms();
    int first;
    while ((first = integrator_of(&m)) < 0) {
        cr_assert_lt(tu_now_ms() - t0, 60000, "no integrator (%d)", first);
        usleep(20000);
    }
    static struct acks acks;
    acks_init(&acks);
    atomic_int stop;
    atomic_init(&stop, 0);
    enum { THREADS = 2, EACH = 100000 };
    pthread_t t[NDAEMONS * THREADS];
    struct client c[NDAEMONS * THREADS];
    for (int i = 0; i < NDAEMONS * THREADS; i++) {
        c[i] = (struct client){.d = &m.d[i % NDAEMONS],
                               .acks = &acks,
                               .id = i,
                               .count = EACH,
                               .tolerate = i % NDAEMONS == first,
                               .stop = &stop};
        cr_assert_eq(pthread_create(&t[i], NULL, client_main, &c[i]), 0);
    }
    t0 = tu_now_ms();
    for (;;) {
        pthread_mutex_lock(&acks.mu);
        size_t n = acks.n;
        pthread_mutex_unlock(&acks.mu);
        if (n >= 600)
            break;
        cr_assert_lt(tu_now_ms() - t0, 60000, "no appends");
        usleep(10000);
    }
    /* the others staged, the integrator integrated what they staged */
    for (int i = 0; i < NDAEMONS; i++) {
        if (i == first)
            continue;
        cr_assert_gt(metric(&m.d[i], "forum_appends_staged_total"), 0,
                     "daemon %d staged nothing", i);
        cr_assert_eq(metric(&m.d[i], "forum_appends_integrated_total"), 0);
    }
    cr_assert_gt(metric(&m.d[first], "forum_appends_integrated_total"), 0);
    /* the integrator dies mid-load */
    cr_assert_eq(tu_daemon_signal_wait(&m.d[first], SIGKILL, 10000),
                 128 + SIGKILL);
    m.up[first] = 0;
    pthread_mutex_lock(&acks.mu);
    size_t at_kill = acks.n;
    pthread_mutex_unlock(&acks.mu);
    t0 = tu_now_ms();
    int next;
    while ((next = integrator_of(&m)) < 0) {
        cr_assert_lt(tu_now_ms() - t0, 60000, "nobody took the lease over");
        usleep(20000);
    }
    cr_assert_neq(next, first);
    /* the survivors' appends go on */
    for (;;) {
        pthread_mutex_lock(&acks.mu);
        size_t n = acks.n;
        pthread_mutex_unlock(&acks.mu);
        if (n >= at_kill + 600)
            break;
        cr_assert_lt(tu_now_ms() - t0, 60000, "no appends after the kill");
        usleep(10000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NDAEMONS * THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NDAEMONS; i++)
        mw_stop(&m, i);
    verify_deep(m.dirs[next]);
    acks_check(&acks, m.dirs[next]);
    same_root_as_one_writer(m.dirs[next]);
    /* nothing was left staged: the staging table is empty */
    char staged[32] = "";
    cr_assert_eq(tu_pg_query(&m.pg, m.db, "SELECT count(*) FROM forum.staged",
                             staged, sizeof(staged)),
                 0);
    cr_assert_str_eq(staged, "0");
    mw_free(&m);
}

/* The rows staged by a daemon that dies before it answers: the integrator
 * is held (SIGSTOP) so a writer's batches stay staged, the writer is
 * SIGKILLed with them staged and unanswered, the integrator goes on
 * (SIGCONT): what the dead writer staged is integrated, once (nothing is
 * left staged), every entry acknowledged is there with its hash, the
 * chain verifies and has the root one writer gives it. */
Test(multiwriter, a_writer_killed_between_stage_and_ack_loses_nothing_acked,
     .timeout = 300)
{
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    for (int i = 0; i < NDAEMONS; i++)
        mw_start(&m, i, NULL);
    int64_t t0 = tu_now_ms();
    int in;
    while ((in = integrator_of(&m)) < 0) {
        cr_assert_lt(tu_now_ms() - t0, 60000, "no integrator (%d)", in);
        usleep(20000);
    }
    int w = (in + 1) % NDAEMONS; /* the writer that dies */
    static struct acks acks;
    acks_init(&acks);
    atomic_int stop;
    atomic_init(&stop, 0);
    enum { THREADS = 2, EACH = 100000 };
    pthread_t t[NDAEMONS * THREADS];
    struct client c[NDAEMONS * THREADS];
    for (int i = 0; i < NDAEMONS * THREADS; i++) {
        c[i] = (struct client){.d = &m.d[i % NDAEMONS],
                               .acks = &acks,
                               .id = i,
                               .count = EACH,
                               .tolerate = 1,
                               .stop = &stop};
        cr_assert_eq(pthread_create(&t[i], NULL, client_main, &c[i]), 0);
    }
    t0 = tu_now_ms();
    for (;;) {
        pthread_mutex_lock(&acks.mu);
        size_t n = acks.n;
        pthread_mutex_unlock(&acks.mu);
        if (n >= 300)
            break;
        cr_assert_lt(tu_now_ms() - t0, 60000, "no appends");
        usleep(10000);
    }
    cr_assert_gt(metric(&m.d[w], "forum_appends_staged_total"), 0);
    /* hold the integrator: what the writers stage now stays staged */
    cr_assert_eq(kill(m.d[in].pid, SIGSTOP), 0);
    /* both writers' batches wait, the one that dies among them */
    char staged[32] = "0";
    t0 = tu_now_ms();
    while (strtol(staged, NULL, 10) < 2) {
        cr_assert_lt(tu_now_ms() - t0, 60000, "nothing staged");
        cr_assert_eq(tu_pg_query(&m.pg, m.db,
                                 "SELECT count(DISTINCT submitter) FROM"
                                 " forum.staged",
                                 staged, sizeof(staged)),
                     0);
    }
    /* the writer dies with batches staged and not answered */
    cr_assert_eq(tu_daemon_signal_wait(&m.d[w], SIGKILL, 10000), 128 + SIGKILL);
    m.up[w] = 0;
    cr_assert_eq(kill(m.d[in].pid, SIGCONT), 0);
    pthread_mutex_lock(&acks.mu);
    size_t at_kill = acks.n;
    pthread_mutex_unlock(&acks.mu);
    t0 = tu_now_ms();
    for (;;) {
        pthread_mutex_lock(&acks.mu);
        size_t n = acks.n;
        pthread_mutex_unlock(&acks.mu);
        if (n >= at_kill + 300)
            break;
        cr_assert_lt(tu_now_ms() - t0, 60000, "no appends after the kill");
        usleep(10000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NDAEMONS * THREADS; i++)
        pthread_join(t[i], NULL);
    int other = 3 - in - w;
    for (int i = 0; i < NDAEMONS; i++)
        mw_stop(&m, i);
    /* the dead writer's staged rows went in: nothing is left staged */
    cr_assert_eq(tu_pg_query(&m.pg, m.db, "SELECT count(*) FROM forum.staged",
                             staged, sizeof(staged)),
                 0);
    cr_assert_str_eq(staged, "0");
    char dead[32] = "";
    cr_assert_eq(tu_pg_query(&m.pg, m.db,
                             "SELECT count(*) FROM forum.staged_out", dead,
                             sizeof(dead)),
                 0);
    cr_assert_neq(strcmp(dead, "0"), 0,
                  "the dead writer's outcomes wait to be pruned");
    verify_deep(m.dirs[other]);
    acks_check(&acks, m.dirs[other]);
    cr_assert_gt(count_of(m.dirs[other]), (long long)acks.n,
                 "entries staged and never acknowledged went in too");
    same_root_as_one_writer(m.dirs[other]);
    mw_free(&m);
}

/* A daemon that stalls (SIGSTOP) longer than a lease: the others claim its
 * runs and finish them; when it goes on (SIGCONT), its lease thread finds
 * the leases taken over and the runs are dropped there without a write
 * (one answer each, written by the daemon that took it over). */
Test(multiwriter, a_stalled_daemon_drops_the_runs_taken_over, .timeout = 300)
{
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    struct tu_fakebin f;
    tu_fakebin_start(&f, 1, "0"); /* every call held until SIGUSR1 */
    char logp[700], url[64];
    snprintf(logp, sizeof(logp), "%s/daemon.log", m.dirs[0]);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f.port);
    tu_daemon_start(&m.d[0], m.dirs[0], "--lease-s", "1", "--checkpoint-ms",
                    "200", "--chat-url", url, "--model", "fake", "--log-file",
                    logp, (char *)NULL);
    m.up[0] = 1;
    for (int i = 1; i < NDAEMONS; i++)
        mw_start(&m, i, &f);
    enum { K = 2 };
    int64_t runs[K];
    for (int i = 0; i < K; i++)
        runs[i] = run_start(&m.d[0], "make the schema");
    fake_wait(&f, "held", K, "the runs did not start");
    /* daemon 0 stalls: its leases expire, the others claim the runs and
     * call the model again (held too) */
    cr_assert_eq(kill(m.d[0].pid, SIGSTOP), 0);
    fake_wait(&f, "held", 2 * K, "nobody claimed the runs");
    /* it goes on: its calls are still held, so only the lease thread can
     * tell it the runs are no longer its own */
    cr_assert_eq(kill(m.d[0].pid, SIGCONT), 0);
    int64_t t0 = tu_now_ms();
    for (;;) {
        char *log = tu_read_file(logp, NULL);
        int dropped = 0;
        for (const char *p = log; p && (p = strstr(p, "dropped here")); p++)
            dropped++;
        free(log);
        if (dropped >= K)
            break;
        cr_assert_lt(tu_now_ms() - t0, 60000, "daemon 0 kept the runs");
        usleep(50000);
    }
    cr_assert_eq(kill(f.pid, SIGUSR1), 0); /* now every call goes through */
    for (int i = 0; i < K; i++) {
        cJSON *g = run_wait(&m.d[1], runs[i], 60000);
        cr_assert_str_eq(tu_str(g, "state"), "done", "run %lld",
                         (long long)runs[i]);
        cr_assert_eq(kinds_in(g, "resume"), 1);
        cr_assert_eq(kinds_in(g, "answer"), 1);
        cJSON_Delete(g);
    }
    /* daemon 0 is well, and its late answers from the model wrote nothing */
    cr_assert_eq(tu_http(&m.d[0], "GET", "/health", NULL, 0, NULL), 200);
    for (int i = 0; i < NDAEMONS; i++)
        mw_stop(&m, i);
    cr_assert_eq(tu_kind_count(m.dirs[1], "answer"), K);
    verify_deep(m.dirs[1]);
    tu_fakebin_stop(&f);
    mw_free(&m);
}

/* Lets go of a table lock after a while (the test's way out when the
 * daemon's loop is stuck behind it). */
struct unlocker {
    PGconn *c;
    atomic_int released, now;
};

static void *unlock_later(void *arg)
{
    struct unlocker *u = arg;
    for (int i = 0; i < 160 && !atomic_load(&u->now); i++)
        usleep(50000); /* 8 s at the most */
    atomic_store(&u->released, 1);
    PQclear(PQexec(u->c, "COMMIT"));
    return NULL;
}

/* The lease round trips are off the event loop: while the leases' table is
 * locked (every renewal waits on the server), the daemon still answers
 * GET /health, before the lock is let go. */
Test(multiwriter, a_lease_renewal_that_waits_does_not_hold_the_loop,
     .timeout = 120)
{
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    struct tu_fakebin f;
    tu_fakebin_start(&f, 1, "0"); /* the run waits in its model call */
    mw_start(&m, 0, &f);
    int64_t run = run_start(&m.d[0], "make the schema");
    fake_wait(&f, "held", 1, "the run did not start");
    /* lock the leases; wait until a renewal waits for the lock */
    char ci[600];
    tu_pg_conninfo(&m.pg, m.db, ci, sizeof(ci));
    struct unlocker u = {.c = PQconnectdb(ci)};
    cr_assert_eq(PQstatus(u.c), CONNECTION_OK, "%s", PQerrorMessage(u.c));
    PGresult *res = PQexec(u.c, "BEGIN; LOCK TABLE forum.run_leases IN "
                                "ACCESS EXCLUSIVE MODE");
    cr_assert_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s",
                 PQerrorMessage(u.c));
    PQclear(res);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, unlock_later, &u), 0);
    char waiting[32] = "0";
    while (!atomic_load(&u.released)) {
        cr_assert_eq(tu_pg_query(&m.pg, m.db,
                                 "SELECT count(*) FROM pg_stat_activity "
                                 "WHERE wait_event_type = 'Lock' AND query "
                                 "LIKE '%run_leases%'",
                                 waiting, sizeof(waiting)),
                     0);
        if (strcmp(waiting, "0") != 0)
            break;
        usleep(20000);
    }
    cr_assert(!atomic_load(&u.released), "no renewal came to wait");
    /* the loop answers while the renewal still waits */
    int st = tu_http(&m.d[0], "GET", "/health", NULL, 0, NULL);
    int released = atomic_load(&u.released);
    cr_assert_eq(st, 200);
    cr_assert(!released, "GET /health waited for the lease renewal");
    atomic_store(&u.now, 1);
    pthread_join(th, NULL);
    PQfinish(u.c);
    cr_assert_eq(kill(f.pid, SIGUSR1), 0);
    cJSON *g = run_wait(&m.d[0], run, 60000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    mw_stop(&m, 0);
    tu_fakebin_stop(&f);
    mw_free(&m);
}

Test(multiwriter, postgres_restarted_under_load_loses_no_acknowledged_entry,
     .timeout = 300)
{
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    struct tu_fakebin f;
    tu_fakebin_start(&f, 0, "300");
    for (int i = 0; i < NDAEMONS; i++)
        mw_start(&m, i, &f);
    static struct acks acks;
    acks_init(&acks);
    atomic_int stop;
    atomic_init(&stop, 0);
    enum { THREADS = 2, EACH = 100000 };
    pthread_t t[NDAEMONS * THREADS];
    struct client c[NDAEMONS * THREADS];
    for (int i = 0; i < NDAEMONS * THREADS; i++) {
        c[i] = (struct client){.d = &m.d[i % NDAEMONS],
                               .acks = &acks,
                               .id = i,
                               .count = EACH,
                               .tolerate = 1,
                               .stop = &stop};
        cr_assert_eq(pthread_create(&t[i], NULL, client_main, &c[i]), 0);
    }
    /* under load: the server goes (an immediate stop, as a crash), then
     * comes back on the same data */
    int64_t t0 = tu_now_ms();
    for (;;) {
        pthread_mutex_lock(&acks.mu);
        size_t n = acks.n;
        pthread_mutex_unlock(&acks.mu);
        if (n >= 300)
            break;
        cr_assert_lt(tu_now_ms() - t0, 60000, "no appends");
        usleep(10000);
    }
    /* runs in flight too */
    int64_t runs[NDAEMONS];
    for (int i = 0; i < NDAEMONS; i++)
        runs[i] = run_start(&m.d[i], "make the schema");
    usleep(100 * 1000);
    cr_assert_eq(tu_pg_stop(&m.pg), 0);
    usleep(300 * 1000);
    char why[2048];
    cr_assert_eq(tu_pg_restart(&m.pg, why, sizeof(why)), 0, "%s", why);
    /* the daemons go on: appends succeed again on each */
    pthread_mutex_lock(&acks.mu);
    size_t after = acks.n;
    pthread_mutex_unlock(&acks.mu);
    t0 = tu_now_ms();
    for (;;) {
        pthread_mutex_lock(&acks.mu);
        size_t n = acks.n;
        pthread_mutex_unlock(&acks.mu);
        if (n >= after + 300)
            break;
        cr_assert_lt(tu_now_ms() - t0, 60000, "no appends after the restart");
        usleep(10000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NDAEMONS * THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_gt(atomic_load(&acks.failed), 0,
                 "no append failed while the server was away");
    /* each daemon's health says ok again once its store answers (a probe
     * within a second or two of its last failed write: it said store_down
     * while the server was away) */
    for (int i = 0; i < NDAEMONS; i++) {
        int st = 0;
        int64_t h0 = tu_now_ms();
        while ((st = tu_http(&m.d[i], "GET", "/health", NULL, 0, NULL)) !=
               200) {
            cr_assert_lt(tu_now_ms() - h0, 30000, "daemon %d: health %d", i,
                         st);
            usleep(50 * 1000);
        }
    }
    /* the runs a failed write stopped are resumed (here or elsewhere) and
     * end done, each with one answer */
    for (int i = 0; i < NDAEMONS; i++) {
        cJSON *g = run_wait(&m.d[(i + 1) % NDAEMONS], runs[i], 60000);
        cr_assert_str_eq(tu_str(g, "state"), "done", "run %lld",
                         (long long)runs[i]);
        cr_assert_eq(kinds_in(g, "answer"), 1);
        cJSON_Delete(g);
    }
    for (int i = 0; i < NDAEMONS; i++)
        mw_stop(&m, i);
    verify_deep(m.dirs[0]);
    acks_check(&acks, m.dirs[0]);
    same_root_as_one_writer(m.dirs[1]);
    tu_fakebin_stop(&f);
    mw_free(&m);
}

/* ---- the event stream over PostgreSQL ----------------------------------- */

/* GET /events on d (path), its raw bytes read into buf until `want` ids
 * were seen or WAIT (a failure detector); the ids, in the order they came,
 * into ids. */
static int sse_ids(int fd, char *buf, size_t cap, size_t *len, long long *ids,
                   int want)
{
    int n = 0;
    int64_t t0 = tu_now_ms();
    while (n < want && tu_now_ms() - t0 < 60000) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t r = recv(fd, buf + *len, cap - 1 - *len, 0);
        if (r <= 0)
            break;
        *len += (size_t)r;
        buf[*len] = 0;
        n = 0;
        for (const char *q = strstr(buf, "\nid: "); q && n < want;
             q = strstr(q + 1, "\nid: ")) {
            if (!strchr(q + 5, '\n'))
                break; /* not whole yet */
            ids[n++] = atoll(q + 5);
        }
    }
    return n;
}

static int sse_connect(const struct tu_daemon *d, const char *path)
{
    int fd = tu_connect_loopback(d->port, 0);
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
                     "Bearer %s\r\n\r\n",
                     path, d->token);
    cr_assert_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    return fd;
}

static long long append_one(const struct tu_daemon *d, int k)
{
    char body[160];
    snprintf(body, sizeof(body),
             "{\"actor\":\"t\",\"kind\":\"note\",\"payload\":{\"k\":%d}}", k);
    cJSON *e = tu_http_json(d, "POST", "/append", body, 200);
    long long seq = tu_num(e, "seq");
    cJSON_Delete(e);
    return seq;
}

Test(multiwriter, one_daemons_event_stream_shows_every_daemons_entries,
     .timeout = 180)
{
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    mw_start(&m, 0, NULL);
    mw_start(&m, 1, NULL);
    long long first = append_one(&m.d[0], -1);
    static char buf[1 << 18];
    size_t len = 0;
    int fd = sse_connect(&m.d[0], "/events");
    /* its hello names where it starts: the head, after `first` */
    for (int64_t t0 = tu_now_ms(); !strstr(buf, "from seq");) {
        cr_assert_lt(tu_now_ms() - t0, 60000, "no hello: %s", buf);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) > 0) {
            ssize_t r = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
            cr_assert_gt(r, 0);
            len += (size_t)r;
            buf[len] = 0;
        }
    }
    cr_assert(strstr(buf, "text/event-stream"), "%s", buf);
    long long acked[20];
    for (int k = 0; k < 20; k++) /* the other daemon's: seen by the poll */
        acked[k] = append_one(&m.d[k % 2], k);
    long long ids[40];
    int n = sse_ids(fd, buf, sizeof(buf), &len, ids, 20);
    cr_assert_eq(n, 20, "%d of 20 events came: %s", n, buf);
    for (int k = 0; k < 20; k++)
        cr_assert_eq(ids[k], acked[k], "event %d: %lld, appended %lld", k,
                     ids[k], acked[k]);
    close(fd);
    /* from the start: pages read behind the ring, then the ring, each
     * entry once and in order */
    len = 0;
    buf[0] = 0;
    fd = sse_connect(&m.d[1], "/events?from=0");
    n = sse_ids(fd, buf, sizeof(buf), &len, ids, 21);
    cr_assert_eq(n, 21, "%d of 21 events came: %s", n, buf);
    cr_assert_eq(ids[0], first);
    for (int k = 0; k < 20; k++)
        cr_assert_eq(ids[k + 1], acked[k]);
    close(fd);
    mw_free(&m);
}

/* ---- a session's reads over PostgreSQL ---------------------------------- */

/* A session's turns on two daemons of one PostgreSQL ledger: the second
 * turn's session reads run on daemon 0's worker threads (their shared read
 * handle, with the owner checks on). While they wait on a slow store (test
 * builds: FORUM_TEST_SESSION_READ_HOLD), daemon 0 answers /health; then
 * the turn ends done, and the session holds both turns under one start. */
Test(multiwriter, a_session_read_over_postgres_does_not_hold_the_loop,
     .timeout = 300)
{
#ifndef FORUM_TEST_SEAMS
    cr_skip_test("built without the test seams");
#endif
    struct mw m;
    mw_init(&m);
    struct tu_hold h;
    tu_hold_init(&h);
    setenv("FORUM_TEST_SESSION_READ_HOLD", h.path, 1);
    mw_start(&m, 0, NULL);
    unsetenv("FORUM_TEST_SESSION_READ_HOLD");
    mw_start(&m, 1, NULL);
    const char *t1 = "{\"request\":\"turn one of s1\",\"session\":\"s1\"}";
    cJSON *s = tu_http_json(&m.d[1], "POST", "/runs", t1, 200);
    cJSON *g = run_wait(&m.d[1], tu_num(s, "run"), 60000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    cJSON_Delete(s);
    tu_hold_set(&h);
    const char *t2 = "{\"request\":\"turn two of s1\",\"session\":\"s1\"}";
    s = tu_http_json(&m.d[0], "POST", "/runs", t2, 200);
    long long run = tu_num(s, "run");
    cJSON_Delete(s);
    tu_hold_wait(&h, 60000, "the session was never read");
    char *b = NULL;
    cr_assert_eq(tu_http(&m.d[0], "GET", "/health", NULL, 1, &b), 200);
    free(b);
    cr_assert(!tu_hold_expired(&h), "/health waited for the session read");
    tu_hold_release(&h);
    g = run_wait(&m.d[0], run, 60000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cJSON_Delete(g);
    struct tu_run r = tu_forumv(NULL, "--ledger", m.dirs[1], "--json",
                                "session", "show", "s1", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *ss = tu_run_json(&r);
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(ss, "turns");
    cr_assert_eq(cJSON_GetArraySize(turns), 2, "%s", r.out);
    cr_assert_eq(tu_num(cJSON_GetArrayItem(turns, 1), "run"), run);
    cJSON_Delete(ss);
    tu_run_free(&r);
    mw_free(&m);
    tu_hold_free(&h);
}

/* The claim of a dead daemon's run is folded off the loop: while daemon
 * 1's claim job waits on a slow store (test builds: the resume job holds
 * while the file FORUM_TEST_RESUME_HOLD names exists), daemon 1 answers
 * /health; then it resumes the run, which ends done there with one resume
 * entry. */
Test(multiwriter, a_claim_over_postgres_does_not_hold_the_loop, .timeout = 300)
{
#ifndef FORUM_TEST_SEAMS
    cr_skip_test("built without the test seams");
#endif
    signal(SIGPIPE, SIG_IGN);
    struct mw m;
    mw_init(&m);
    struct tu_hold h;
    tu_hold_init(&h);
    struct tu_fakebin f;
    tu_fakebin_start(&f, 1, "0");
    mw_start(&m, 0, &f);
    setenv("FORUM_TEST_RESUME_HOLD", h.path, 1); /* no file yet: no hold */
    mw_start(&m, 1, &f);
    unsetenv("FORUM_TEST_RESUME_HOLD");
    int64_t run = run_start(&m.d[0], "make the schema");
    fake_wait(&f, "held", 1, "the run did not start");
    tu_hold_set(&h);
    cr_assert_eq(tu_daemon_signal_wait(&m.d[0], SIGKILL, 10000), 128 + SIGKILL);
    m.up[0] = 0;
    cr_assert_eq(kill(f.pid, SIGUSR2), 0); /* the dead daemon's call goes */
    tu_hold_wait(&h, 60000, "nobody claimed the run");
    char *b = NULL;
    cr_assert_eq(tu_http(&m.d[1], "GET", "/health", NULL, 1, &b), 200);
    free(b);
    cr_assert(!tu_hold_expired(&h), "/health waited for the claim");
    cr_assert_eq(kill(f.pid, SIGUSR1), 0); /* now every call goes through */
    tu_hold_release(&h);
    cJSON *g = run_wait(&m.d[1], run, 60000);
    cr_assert_str_eq(tu_str(g, "state"), "done");
    cr_assert_eq(kinds_in(g, "resume"), 1);
    cr_assert_eq(kinds_in(g, "answer"), 1);
    cJSON_Delete(g);
    cr_assert(!tu_hold_expired(&h));
    mw_stop(&m, 1);
    verify_deep(m.dirs[1]);
    tu_fakebin_stop(&f);
    mw_free(&m);
    tu_hold_free(&h);
}
