/* commit: the group committer. One thread, one ledger handle, a queue
 * guarded by one mutex; see commit.h for the contract. */
#include "daemon/commit.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "ledger/proof.h"

#define PROBE_BAD_MS 1000  /* a write probe while the store fails */
#define PROBE_IDLE_MS 2000 /* a read probe while nothing is written */
#define MAX_BATCH_DEFAULT 4096
#define SIGN_INTERVAL_DEFAULT_MS 1000
#define LEASE_MS_DEFAULT 10000
/* Staging (PostgreSQL): a writer with batches staged asks who integrates
 * this often (a read; it claims the lease once it expired), and collects
 * outcomes at least this often even without a note; an idle integrator
 * looks at the staging table at least this often. */
#define STAGE_LEASE_CHECK_MS 50
#define STAGE_COLLECT_MS 100
#define STAGE_POLL_MS 100
#define STAGE_PRUNE_MS 60000

/* A batch staged by this writer, waiting for its outcome. */
struct pend {
    int64_t batch;
    size_t n;
    int done; /* its outcome came (the requests hold it) */
    struct ledger_queued_append **taken;
    struct ledger_append *reqs;
    struct pend *next;
};

struct daemon_commit {
    struct ledger *ledger;
    struct daemon_commit_config cfg;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ledger_queued_append *head, *tail;
    size_t queued;
    struct daemon_commit_redact *red_head, *red_tail; /* redactions */
    int stopping;
    int stopped;
    struct daemon_commit_stats stats;
    /* Staging (a store that stages: PostgreSQL). The committer either
     * holds the integration lease (integrator: it sequences its own
     * appends and everything staged) or stages its batches and waits for
     * their outcomes (pend). It sleeps in poll() on wakefd (a submit while
     * it sleeps writes it) and its connection (the notes). */
    int staging;
    int integrator;
    char owner[33];
    int wakefd;
    int sleeping;        /* under mu */
    int fd_idle;         /* the connection was readable with nothing on it */
    unsigned notes_kept; /* notes read while about to sleep */
    int last_took;       /* the last integration took staged rows */
    struct pend *pend, *pend_tail;
    int64_t forget[256]; /* outcomes answered, to drop from the table */
    size_t nforget;
    int64_t lease_due_us, collect_due_us, poll_due_us, prune_due_us;
    /* Set once for good (daemon_commit_refuse): the committer writes no
     * more, every request fails with refused. */
    int refusing;
    struct fo_err refused;
    /* The store's last word (c->mu): bad once a transaction or a probe
     * failed on I/O (a full disk, a database gone), good again once one
     * succeeds; /health says so. While bad, writes are refused and the
     * committer probes with a write every PROBE_BAD_MS; while good and
     * idle, with a read every PROBE_IDLE_MS. */
    int store_bad;
    struct fo_err store_err;
    int64_t last_contact_us; /* committer thread */
    /* committer-thread state */
    struct ledger_append *scratch;
    struct ledger_queued_append **taken;
    int64_t signed_size;
    int64_t last_sign_us;
};

static void logf_(struct daemon_commit *c, const char *what,
                  const struct fo_err *err)
{
    if (c->cfg.log)
        c->cfg.log(c->cfg.log_hook, "%s: %s", what, err->msg);
}

void daemon_commit_refuse(struct daemon_commit *c, const struct fo_err *why)
{
    pthread_mutex_lock(&c->mu);
    int first = !c->refusing;
    if (first) {
        c->refusing = 1;
        c->refused = *why;
    }
    pthread_mutex_unlock(&c->mu);
    if (first && c->cfg.log)
        c->cfg.log(c->cfg.log_hook, "ledger storage lost (%s): %s",
                   fo_code_name(why->code), why->msg);
}

int daemon_commit_health(struct daemon_commit *c, struct fo_err *err)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->refusing ? c->refused.code : FO_OK;
    if (rc && err)
        *err = c->refused;
    if (!rc && c->store_bad) {
        rc = c->store_err.code;
        if (err)
            *err = c->store_err;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* What an outcome of the store says of its health (committer thread):
 * I/O-class failures make it bad, a success good. Logged on a change. */
static void store_note(struct daemon_commit *c, int rc, const char *what,
                       const struct fo_err *err)
{
    int bad = rc == FO_E_IO || rc == FO_E_UNAVAILABLE || rc == FO_E_CORRUPT;
    if (rc && !bad)
        return; /* bad input, a busy lock: the store itself is fine */
    c->last_contact_us = ledger_now_us();
    pthread_mutex_lock(&c->mu);
    int was = c->store_bad;
    c->store_bad = bad;
    if (bad)
        fo_err_set(&c->store_err, FO_E_STORE_DOWN,
                   "the ledger cannot be %s: %s", what, err->msg);
    pthread_mutex_unlock(&c->mu);
    if (c->cfg.log && bad && !was)
        c->cfg.log(c->cfg.log_hook,
                   "the ledger cannot be %s (health fails until it can): %s",
                   what, err->msg);
    else if (c->cfg.log && !bad && was)
        c->cfg.log(c->cfg.log_hook, "the ledger can be written again");
}

/* The store's health for a write (committer thread): a refusing
 * committer refuses for good; a store marked bad is tried again at most
 * every PROBE_BAD_MS (the write is the probe, so a busy daemon recovers
 * without going idle), and refused at once in between. */
static int write_health(struct daemon_commit *c, struct fo_err *err)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->refusing ? c->refused.code : FO_OK;
    if (rc && err)
        *err = c->refused;
    if (!rc && c->store_bad &&
        ledger_now_us() - c->last_contact_us < PROBE_BAD_MS * 1000ll) {
        rc = c->store_err.code;
        if (err)
            *err = c->store_err;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Idle: asks the store how it is, when due (committer thread). */
static void store_probe(struct daemon_commit *c)
{
    pthread_mutex_lock(&c->mu);
    int bad = c->store_bad, refusing = c->refusing;
    pthread_mutex_unlock(&c->mu);
    int64_t since = ledger_now_us() - c->last_contact_us;
    if (refusing || since < (bad ? PROBE_BAD_MS : PROBE_IDLE_MS) * 1000ll)
        return;
    struct fo_err err;
    int rc = ledger_probe(c->ledger, bad, &err);
    store_note(c, rc, bad ? "written" : "read", &err);
}

static int hist_bucket(size_t n)
{
    int b = 0;
    while (n > 1 && b < 7) {
        n >>= 1;
        b++;
    }
    return b;
}

/* Signs a checkpoint when the tree grew and the interval has passed (or
 * always, when force). Runs on the committer thread. */
static void maybe_sign(struct daemon_commit *c, int force)
{
    if (c->cfg.sign_interval_ms < 0 || daemon_commit_health(c, NULL))
        return;
    int64_t now = ledger_now_us();
    if (!force &&
        now - c->last_sign_us < (int64_t)c->cfg.sign_interval_ms * 1000)
        return;
    struct fo_err err;
    int64_t count = 0;
    if (ledger_count(c->ledger, &count, &err) != FO_OK) {
        logf_(c, "checkpoint", &err);
        return;
    }
    if (count <= c->signed_size || count == 0)
        return;
    struct ledger_checkpoint cp = {0};
    c->last_sign_us = now;
    if (ledger_checkpoint_sign(c->ledger, -1, &cp, &err) != FO_OK) {
        logf_(c, "checkpoint", &err);
        return;
    }
    c->signed_size = cp.size;
    ledger_checkpoint_release(&cp);
    pthread_mutex_lock(&c->mu);
    c->stats.checkpoints++;
    pthread_mutex_unlock(&c->mu);
    if (c->cfg.signed_cb)
        c->cfg.signed_cb(c->cfg.committed_hook);
}

/* Hands the outcome of a batch to its requests (taken[i] gets reqs[i]'s
 * result; rc the batch's), counts it and answers each. */
static void answer(struct daemon_commit *c, struct ledger_queued_append **taken,
                   const struct ledger_append *reqs, size_t n, int rc,
                   const struct fo_err *err)
{
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        struct ledger_queued_append *r = taken[i];
        r->a.rc = reqs[i].rc;
        r->a.err = reqs[i].err;
        r->a.entry = reqs[i].entry;
        ok += r->a.rc == FO_OK;
    }
    if (rc == FO_E_STORAGE_MOVED)
        daemon_commit_refuse(c, err); /* logs it, once */
    else if (rc)
        logf_(c, "commit failed", err);
    pthread_mutex_lock(&c->mu);
    if (rc) {
        c->stats.failed++;
    } else {
        c->stats.commits++;
        c->stats.batch_hist[hist_bucket(n)]++;
        c->stats.batch_sum += n;
    }
    c->stats.appends += ok;
    c->stats.rejected += n - ok;
    pthread_mutex_unlock(&c->mu);
    /* Answer only now: the transaction has committed (or failed). A run of
     * requests sharing a flush is flushed once, after its last done (read
     * first: done may free the request). */
    void (*flush)(void *) = NULL;
    void *flush_arg = NULL;
    for (size_t i = 0; i < n; i++) {
        struct ledger_queued_append *r = taken[i];
        void (*f)(void *) = r->flush;
        void *fa = r->flush_arg;
        if (flush && (flush != f || flush_arg != fa))
            flush(flush_arg);
        flush = f;
        flush_arg = fa;
        r->done(r);
    }
    if (flush)
        flush(flush_arg);
    if (!rc && ok && c->cfg.committed)
        c->cfg.committed(c->cfg.committed_hook);
}

static void commit_batch(struct daemon_commit *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c->scratch[i] = c->taken[i]->a;
    struct fo_err err;
    int rc = write_health(c, &err);
    if (rc == FO_OK) {
        rc = ledger_append_batch(c->ledger, c->scratch, n, &err);
        store_note(c, rc, "written", &err);
    } else /* refusing, or the store failed: nothing reaches the ledger */
        for (size_t i = 0; i < n; i++) {
            c->scratch[i].rc = rc;
            c->scratch[i].err = err;
        }
    answer(c, c->taken, c->scratch, n, rc, &err);
}

/* The redactions queued, in order, on the committer thread (c->mu held on
 * entry and on return). */
static void redact_queued(struct daemon_commit *c)
{
    while (c->red_head) {
        struct daemon_commit_redact *r = c->red_head;
        c->red_head = r->next;
        if (!c->red_head)
            c->red_tail = NULL;
        pthread_mutex_unlock(&c->mu);
        r->rc = write_health(c, &r->err);
        if (r->rc == FO_OK)
            r->rc = ledger_redact(c->ledger, r->seq, r->reason, NULL, &r->err);
        if (r->rc == FO_E_STORAGE_MOVED)
            daemon_commit_refuse(c, &r->err);
        int grew = r->rc == FO_OK;
        r->done(r);                   /* may free r */
        if (grew && c->cfg.committed) /* its redaction entry */
            c->cfg.committed(c->cfg.committed_hook);
        pthread_mutex_lock(&c->mu);
    }
}

/* Moves the next batch from the queue into c->taken (c->mu held): whole
 * groups, at most max_batch requests. */
static size_t take_queue(struct daemon_commit *c)
{
    size_t n = 0;
    while (c->head && n < c->cfg.max_batch) {
        /* a group goes whole into one transaction */
        size_t g = c->head->group > 1 ? c->head->group : 1;
        if (n > 0 && n + g > c->cfg.max_batch)
            break;
        for (size_t k = 0; k < g && c->head; k++) {
            c->taken[n++] = c->head;
            c->head = c->head->next;
        }
    }
    if (!c->head)
        c->tail = NULL;
    c->queued -= n;
    return n;
}

/* ---- staging (PostgreSQL: several daemons, one integrator) ------------ */

static int64_t mono_ms_after(int ms)
{
    return ledger_mono_us() + (int64_t)ms * 1000;
}

static int lease_ms(const struct daemon_commit *c)
{
    return c->cfg.lease_ms > 0 ? c->cfg.lease_ms : LEASE_MS_DEFAULT;
}

static void set_integrator(struct daemon_commit *c, int on)
{
    if (c->integrator == on)
        return;
    c->integrator = on;
    pthread_mutex_lock(&c->mu);
    c->stats.integrator = on;
    pthread_mutex_unlock(&c->mu);
    if (c->cfg.log)
        c->cfg.log(c->cfg.log_hook,
                   on ? "integrating the ledger's staged appends (%s)"
                      : "no longer integrating (%s): staging appends",
                   c->owner);
    c->poll_due_us = 0;
}

/* The integration lease, when due: the integrator renews it every third
 * of a lease; a writer asks who holds it (a read), often while batches of
 * its own wait, and claims it once it expired. */
static void lease_tick(struct daemon_commit *c, int force)
{
    int64_t now = ledger_mono_us();
    if (!force && now < c->lease_due_us)
        return;
    struct fo_err err;
    int held = 0, ttl = lease_ms(c);
    char who[65];
    int op = c->integrator ? LEDGER_ILEASE_RENEW : LEDGER_ILEASE_CLAIM;
    int rc = ledger_integrator_lease(c->ledger, op, c->owner, ttl, &held, who,
                                     sizeof(who), &err);
    if (rc == FO_OK)
        set_integrator(c, held);
    /* a failed renewal keeps the role: the transactions still check
     * nothing of it, and the lease row decides at the next tick */
    int next = c->integrator ? ttl / 3
               : c->pend     ? STAGE_LEASE_CHECK_MS
                             : ttl / 3;
    c->lease_due_us = now + (int64_t)(next > 0 ? next : 1) * 1000;
}

/* The integrator's turn: its own n queued appends and what is staged,
 * in one transaction. 1 when it did something. */
static int integrate_step(struct daemon_commit *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c->scratch[i] = c->taken[i]->a;
    struct fo_err err;
    size_t took = 0;
    int rc = write_health(c, &err);
    if (rc == FO_OK) {
        rc = ledger_integrate(c->ledger, c->scratch, n, c->cfg.max_batch, &took,
                              &err);
        store_note(c, rc, "written", &err);
    } else
        for (size_t i = 0; i < n; i++) {
            c->scratch[i].rc = rc;
            c->scratch[i].err = err;
        }
    c->last_took = took > 0;
    c->poll_due_us = mono_ms_after(STAGE_POLL_MS);
    if (took) {
        pthread_mutex_lock(&c->mu);
        c->stats.integrated += took;
        pthread_mutex_unlock(&c->mu);
    }
    if (n)
        answer(c, c->taken, c->scratch, n, rc, &err);
    else if (rc && rc != FO_E_BUSY)
        logf_(c, "integration failed", &err);
    if (rc == FO_OK && took && c->cfg.committed)
        c->cfg.committed(c->cfg.committed_hook);
    return n > 0 || took > 0;
}

/* A writer's turn: stages the n queued appends (its own short
 * transaction); they are answered once integrated (collect). */
static void stage_step(struct daemon_commit *c, size_t n)
{
    struct pend *p = calloc(1, sizeof(*p));
    struct fo_err err;
    int rc = FO_OK;
    if (p) {
        p->taken = malloc(n * sizeof(*p->taken));
        p->reqs = malloc(n * sizeof(*p->reqs));
    }
    if (!p || !p->taken || !p->reqs) {
        rc = fo_err_set(&err, FO_E_NOMEM, NULL);
        for (size_t i = 0; i < n; i++) {
            c->scratch[i] = c->taken[i]->a;
            c->scratch[i].rc = rc;
            c->scratch[i].err = err;
        }
        answer(c, c->taken, c->scratch, n, rc, &err);
        if (p) {
            free(p->taken);
            free(p->reqs);
            free(p);
        }
        return;
    }
    p->n = n;
    for (size_t i = 0; i < n; i++) {
        p->taken[i] = c->taken[i];
        p->reqs[i] = c->taken[i]->a;
    }
    rc = write_health(c, &err);
    if (rc == FO_OK) {
        rc = ledger_stage(c->ledger, p->reqs, n, c->owner, c->forget,
                          c->nforget, &p->batch, &err);
        store_note(c, rc, "written", &err);
        if (rc == FO_OK)
            c->nforget = 0;
    } else
        for (size_t i = 0; i < n; i++) {
            p->reqs[i].rc = rc;
            p->reqs[i].err = err;
        }
    if (rc || p->batch < 0) { /* failed, or every request refused now */
        answer(c, p->taken, p->reqs, n, rc, &err);
        free(p->taken);
        free(p->reqs);
        free(p);
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->stats.staged += n;
    pthread_mutex_unlock(&c->mu);
    if (c->pend_tail)
        c->pend_tail->next = p;
    else
        c->pend = p;
    c->pend_tail = p;
    if (!c->collect_due_us)
        c->collect_due_us = mono_ms_after(STAGE_COLLECT_MS);
}

/* Drops the outcomes answered from the table (without waiting for the
 * disk; one that comes back after a crash is pruned later). */
static void forget_now(struct daemon_commit *c)
{
    if (!c->nforget)
        return;
    struct fo_err err;
    int64_t none;
    if (ledger_stage(c->ledger, NULL, 0, c->owner, c->forget, c->nforget, &none,
                     &err) == FO_OK)
        c->nforget = 0;
}

static int on_outcome(void *ctx, int64_t batch, const char *outcome)
{
    struct daemon_commit *c = ctx;
    for (struct pend *p = c->pend; p; p = p->next) {
        if (p->batch != batch || p->done)
            continue;
        struct fo_err err;
        if (ledger_stage_outcome(outcome, p->reqs, p->n, &err) != FO_OK) {
            logf_(c, "staged outcome", &err);
            for (size_t i = 0; i < p->n; i++)
                if (p->reqs[i].rc == FO_OK && p->reqs[i].entry.seq < 0) {
                    p->reqs[i].rc = err.code;
                    p->reqs[i].err = err;
                }
        }
        p->done = 1;
    }
    return 0;
}

/* Collects the outcomes of the staged batches and answers those done. */
static void collect(struct daemon_commit *c)
{
    int64_t ids[256];
    size_t k = 0;
    for (struct pend *p = c->pend; p && k < 256; p = p->next)
        ids[k++] = p->batch;
    c->collect_due_us = k ? mono_ms_after(STAGE_COLLECT_MS) : 0;
    if (!k)
        return;
    struct fo_err err;
    int rc = ledger_stage_collect(c->ledger, ids, k, on_outcome, c, &err);
    store_note(c, rc, "read", &err);
    if (rc)
        return;
    struct pend **pp = &c->pend, *last = NULL;
    while (*pp) {
        struct pend *p = *pp;
        if (!p->done) {
            last = p;
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        if (c->nforget == sizeof(c->forget) / sizeof(c->forget[0]))
            forget_now(c);
        c->forget[c->nforget++] = p->batch;
        answer(c, p->taken, p->reqs, p->n, FO_OK, NULL);
        free(p->taken);
        free(p->reqs);
        free(p);
    }
    c->pend_tail = last;
    if (!c->pend)
        c->collect_due_us = 0;
}

/* Sleeps until a submit, a note on the connection, or timeout_ms. */
static void stage_wait(struct daemon_commit *c, int timeout_ms)
{
    pthread_mutex_lock(&c->mu);
    if (c->head || c->red_head || (c->stopping && !c->pend)) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    /* notes read off the connection by the statements since the last look
     * (a collect, a staging) do not make it readable again */
    c->notes_kept |= ledger_stage_notes(c->ledger);
    if (c->notes_kept)
        return;
    pthread_mutex_lock(&c->mu);
    if (c->head || c->red_head || c->stopping) { /* came meanwhile */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->sleeping = 1;
    pthread_mutex_unlock(&c->mu);
    struct pollfd pf[2] = {{.fd = c->wakefd, .events = POLLIN},
                           {.fd = -1, .events = POLLIN}};
    struct fo_err err;
    int fd = -1;
    if (!c->fd_idle && ledger_stage_listen(c->ledger, &fd, &err) == FO_OK)
        pf[1].fd = fd;
    c->fd_idle = 0;
    int got = poll(pf, pf[1].fd >= 0 ? 2 : 1, timeout_ms);
    if (got > 0 && (pf[0].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = read(c->wakefd, &v, sizeof(v));
        (void)r;
    }
    /* readable with nothing to read (a connection closed under it): do
     * not spin on it, sleep the next wait out */
    c->fd_idle = got > 0 && pf[1].fd >= 0 && (pf[1].revents & ~POLLIN) != 0;
    pthread_mutex_lock(&c->mu);
    c->sleeping = 0;
    pthread_mutex_unlock(&c->mu);
}

/* How long the committer may sleep (ms). */
static int stage_timeout(struct daemon_commit *c)
{
    int64_t now = ledger_mono_us(), due = c->lease_due_us;
    if (c->pend && c->collect_due_us && c->collect_due_us < due)
        due = c->collect_due_us;
    if (c->integrator && c->poll_due_us < due)
        due = c->poll_due_us;
    int64_t ms = (due - now) / 1000 + 1;
    int cap = c->cfg.sign_interval_ms > 0 ? c->cfg.sign_interval_ms : 1000;
    return ms < 1 ? 1 : ms > cap ? cap : (int)ms;
}

static void *run_staged(void *arg)
{
    struct daemon_commit *c = arg;
    /* opened by daemon_commit_start; only this thread uses it from here */
    ledger_set_owner(c->ledger);
    lease_tick(c, 1);
    for (;;) {
        pthread_mutex_lock(&c->mu);
        redact_queued(c);
        if (c->stopping && !c->head && !c->pend) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        size_t n = take_queue(c);
        pthread_mutex_unlock(&c->mu);
        unsigned notes = ledger_stage_notes(c->ledger) | c->notes_kept;
        c->notes_kept = 0;
        int64_t now = ledger_mono_us();
        int busy = n > 0;
        /* a writer answers what was integrated before it stages more
         * (a staging waits for the disk) */
        int due =
            c->pend && (c->integrator || (notes & LEDGER_NOTE_INTEGRATED) ||
                        now >= c->collect_due_us);
        if (due && !c->integrator) {
            collect(c);
            due = 0;
        }
        if (c->integrator &&
            (n || c->last_took || (notes & LEDGER_NOTE_STAGED) ||
             now >= c->poll_due_us))
            busy = integrate_step(c, n);
        else if (n)
            stage_step(c, n);
        if (due)
            collect(c);
        lease_tick(c, 0);
        if (c->integrator && now >= c->prune_due_us) {
            struct fo_err err;
            ledger_stage_prune(c->ledger, &err);
            c->prune_due_us = mono_ms_after(STAGE_PRUNE_MS);
        }
        maybe_sign(c, 0);
        if (!busy) {
            forget_now(c);
            if (!c->pend)
                store_probe(c);
            stage_wait(c, stage_timeout(c));
        }
    }
    if (c->integrator) { /* another daemon takes over at once */
        struct fo_err err;
        int held;
        ledger_integrator_lease(c->ledger, LEDGER_ILEASE_RELEASE, c->owner, 0,
                                &held, NULL, 0, &err);
        set_integrator(c, 0);
    }
    forget_now(c);
    maybe_sign(c, 1); /* the last checkpoint, on shutdown */
    return NULL;
}

static void *run(void *arg);

/* Wakes the committer when it sleeps in poll() (c->mu held). */
static void wake(struct daemon_commit *c)
{
    pthread_cond_signal(&c->cv);
    if (c->staging && c->sleeping) {
        uint64_t one = 1;
        ssize_t r = write(c->wakefd, &one, sizeof(one));
        (void)r;
    }
}

static void *run(void *arg)
{
    struct daemon_commit *c = arg;
    /* opened by daemon_commit_start; only this thread uses it from here */
    ledger_set_owner(c->ledger);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        redact_queued(c);
        while (!c->head && !c->red_head && !c->stopping) {
            if (c->cfg.sign_interval_ms >= 0) {
                pthread_mutex_unlock(&c->mu);
                maybe_sign(c, 0);
                store_probe(c);
                pthread_mutex_lock(&c->mu);
                if (c->head || c->red_head || c->stopping)
                    break;
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                int ms = c->cfg.sign_interval_ms > 0 ? c->cfg.sign_interval_ms
                                                     : 1000;
                ts.tv_sec += ms / 1000;
                ts.tv_nsec += (long)(ms % 1000) * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            } else {
                pthread_cond_wait(&c->cv, &c->mu);
            }
        }
        if (c->red_head)
            continue; /* before the next batch */
        if (!c->head && c->stopping)
            break;
        size_t n = take_queue(c);
        pthread_mutex_unlock(&c->mu);
        commit_batch(c, n);
        maybe_sign(c, 0);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    maybe_sign(c, 1); /* the last checkpoint, on shutdown */
    return NULL;
}

int daemon_commit_create(const char *dir,
                         const struct daemon_commit_config *cfg,
                         struct daemon_commit **out, struct fo_err *err)
{
    int rc = FO_E_NOMEM;
    struct daemon_commit *c = calloc(1, sizeof(*c));
    if (!c)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    c->wakefd = -1;
    if (cfg)
        c->cfg = *cfg;
    if (!c->cfg.max_batch)
        c->cfg.max_batch = MAX_BATCH_DEFAULT;
    if (!c->cfg.sign_interval_ms)
        c->cfg.sign_interval_ms = SIGN_INTERVAL_DEFAULT_MS;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->scratch = calloc(c->cfg.max_batch, sizeof(*c->scratch));
    c->taken = calloc(c->cfg.max_batch, sizeof(*c->taken));
    if (!c->scratch || !c->taken) {
        fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    rc = ledger_open(dir, 0, NULL, &c->ledger, err);
    if (rc)
        goto out;
    c->staging = ledger_can_stage(c->ledger);
    if (c->staging) {
        unsigned char raw[16];
        c->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (c->wakefd < 0 || RAND_bytes(raw, sizeof(raw)) != 1) {
            rc = fo_err_set(err, FO_E_INTERNAL,
                            "commit: no eventfd or "
                            "random bytes");
            goto out;
        }
        fo_hex(raw, sizeof(raw), c->owner);
    }
    struct ledger_checkpoint cp = {0};
    struct fo_err e2;
    if (ledger_checkpoint_latest(c->ledger, &cp, &e2) == FO_OK)
        c->signed_size = cp.size;
    ledger_checkpoint_release(&cp);
    c->last_sign_us = 0;
    if (pthread_create(&c->thread, NULL, c->staging ? run_staged : run, c) !=
        0) {
        rc = fo_err_set(err, FO_E_INTERNAL, "cannot start the commit thread");
        goto out;
    }
    c->started = 1;
    *out = c;
    return FO_OK;
out:
    daemon_commit_free(c);
    return rc;
}

int daemon_commit_submit(struct daemon_commit *c,
                         struct ledger_queued_append *r, struct fo_err *err)
{
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        pthread_mutex_unlock(&c->mu);
        return fo_err_set(err, FO_E_DRAINING, "the daemon is shutting down");
    }
    r->next = NULL;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    c->queued++;
    wake(c);
    pthread_mutex_unlock(&c->mu);
    return FO_OK;
}

int daemon_commit_redact(struct daemon_commit *c,
                         struct daemon_commit_redact *r, struct fo_err *err)
{
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        pthread_mutex_unlock(&c->mu);
        return fo_err_set(err, FO_E_DRAINING, "the daemon is shutting down");
    }
    r->next = NULL;
    if (c->red_tail)
        c->red_tail->next = r;
    else
        c->red_head = r;
    c->red_tail = r;
    wake(c);
    pthread_mutex_unlock(&c->mu);
    return FO_OK;
}

size_t daemon_commit_max_batch(const struct daemon_commit *c)
{
    return c->cfg.max_batch;
}

int daemon_commit_submit_group(struct daemon_commit *c,
                               struct ledger_queued_append *reqs, size_t n,
                               struct fo_err *err)
{
    if (n == 0 || n > c->cfg.max_batch)
        return fo_err_set(err, FO_E_INVALID,
                          "a batch of 1..%zu entries, not %zu",
                          c->cfg.max_batch, n);
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        pthread_mutex_unlock(&c->mu);
        return fo_err_set(err, FO_E_DRAINING, "the daemon is shutting down");
    }
    for (size_t i = 0; i < n; i++) {
        reqs[i].group = i == 0 ? n : 0;
        reqs[i].next = i + 1 < n ? &reqs[i + 1] : NULL;
    }
    if (c->tail)
        c->tail->next = &reqs[0];
    else
        c->head = &reqs[0];
    c->tail = &reqs[n - 1];
    c->queued += n;
    wake(c);
    pthread_mutex_unlock(&c->mu);
    return FO_OK;
}

struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};

static void sync_done(struct ledger_queued_append *r)
{
    struct sync_wait *w = r->arg;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int daemon_commit_append_sync(void *hook, struct ledger_append *req,
                              struct fo_err *err)
{
    struct daemon_commit *c = hook;
    struct sync_wait w = {.done = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    struct ledger_queued_append r = {.a = *req, .done = sync_done, .arg = &w};
    int rc = daemon_commit_submit(c, &r, err);
    if (rc == FO_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        *req = r.a;
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

void daemon_commit_stats(struct daemon_commit *c,
                         struct daemon_commit_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    out->queued = c->queued;
    pthread_mutex_unlock(&c->mu);
}

void daemon_commit_stop(struct daemon_commit *c)
{
    if (!c || c->stopped)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    wake(c);
    pthread_mutex_unlock(&c->mu);
    if (c->started)
        pthread_join(c->thread, NULL);
    c->stopped = 1;
}

void daemon_commit_free(struct daemon_commit *c)
{
    if (!c)
        return;
    daemon_commit_stop(c);
    ledger_close(c->ledger);
    if (c->wakefd >= 0)
        close(c->wakefd);
    free(c->scratch);
    free(c->taken);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Counts the group's requests done; the last wakes the waiter. */
static void group_done(struct ledger_queued_append *r)
{
    struct sync_wait *w = r->arg;
    pthread_mutex_lock(&w->mu);
    w->done--;
    if (w->done == 0)
        pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int daemon_commit_append_batch_sync(void *hook, struct ledger_append *reqs,
                                    size_t n, struct fo_err *err)
{
    struct daemon_commit *c = hook;
    struct ledger_queued_append *rs = calloc(n ? n : 1, sizeof(*rs));
    if (!rs)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    struct sync_wait w = {.done = (int)n};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    for (size_t i = 0; i < n; i++)
        rs[i] = (struct ledger_queued_append){
            .a = reqs[i], .done = group_done, .arg = &w};
    int rc = daemon_commit_submit_group(c, rs, n, err);
    if (rc == FO_OK) {
        pthread_mutex_lock(&w.mu);
        while (w.done > 0)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        for (size_t i = 0; i < n; i++)
            reqs[i] = rs[i].a;
        /* a failed transaction fails every request alike */
        for (size_t i = 0; i < n && !rc; i++)
            if (reqs[i].rc == FO_E_STORAGE_MOVED || reqs[i].rc == FO_E_IO ||
                reqs[i].rc == FO_E_BUSY || reqs[i].rc == FO_E_CORRUPT ||
                reqs[i].rc == FO_E_DRAINING) {
                rc = reqs[i].rc;
                if (err)
                    *err = reqs[i].err;
            }
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    free(rs);
    return rc;
}

int daemon_commit_metrics(struct daemon_commit *c, struct fo_buf *b)
{
    struct daemon_commit_stats s;
    daemon_commit_stats(c, &s);
    int rc = fo_buf_printf(
        b,
        "# HELP forum_appends_total Appends committed.\n"
        "# TYPE forum_appends_total counter\n"
        "forum_appends_total %llu\n"
        "# HELP forum_appends_rejected_total Appends refused.\n"
        "# TYPE forum_appends_rejected_total counter\n"
        "forum_appends_rejected_total %llu\n"
        "# HELP forum_commits_total Transactions committed.\n"
        "# TYPE forum_commits_total counter\n"
        "forum_commits_total %llu\n"
        "# HELP forum_commit_failures_total Transactions that failed.\n"
        "# TYPE forum_commit_failures_total counter\n"
        "forum_commit_failures_total %llu\n"
        "# HELP forum_checkpoints_signed_total Checkpoints signed.\n"
        "# TYPE forum_checkpoints_signed_total counter\n"
        "forum_checkpoints_signed_total %llu\n"
        "# HELP forum_commit_queue Appends waiting for a commit.\n"
        "# TYPE forum_commit_queue gauge\n"
        "forum_commit_queue %llu\n"
        "# HELP forum_appends_staged_total Appends staged for the "
        "integrator (PostgreSQL).\n"
        "# TYPE forum_appends_staged_total counter\n"
        "forum_appends_staged_total %llu\n"
        "# HELP forum_appends_integrated_total Staged appends this daemon "
        "integrated.\n"
        "# TYPE forum_appends_integrated_total counter\n"
        "forum_appends_integrated_total %llu\n"
        "# HELP forum_integrator 1 while this daemon holds the integration "
        "lease.\n"
        "# TYPE forum_integrator gauge\n"
        "forum_integrator %d\n"
        "# HELP forum_commit_batch_size Appends per transaction.\n"
        "# TYPE forum_commit_batch_size histogram\n",
        (unsigned long long)s.appends, (unsigned long long)s.rejected,
        (unsigned long long)s.commits, (unsigned long long)s.failed,
        (unsigned long long)s.checkpoints, (unsigned long long)s.queued,
        (unsigned long long)s.staged, (unsigned long long)s.integrated,
        s.integrator);
    unsigned long long cum = 0;
    for (int i = 0; i < 8; i++) {
        cum += s.batch_hist[i];
        if (i < 7)
            rc |= fo_buf_printf(b,
                                "forum_commit_batch_size_bucket{le=\"%d\"} "
                                "%llu\n",
                                (2 << i) - 1, cum);
    }
    rc |= fo_buf_printf(b,
                        "forum_commit_batch_size_bucket{le=\"+Inf\"} %llu\n"
                        "forum_commit_batch_size_sum %llu\n"
                        "forum_commit_batch_size_count %llu\n",
                        cum, (unsigned long long)s.batch_sum, cum);
    return rc ? FO_E_NOMEM : FO_OK;
}
