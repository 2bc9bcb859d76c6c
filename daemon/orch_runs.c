/* orch_runs: runs that go on without their caller (orch_run_start: POST
 * /runs), their state read back from the ledger and the runs' lock files
 * (orch_run_get: GET /runs/{id}), and their cancellation (orch_run_cancel:
 * POST /runs/{id}/cancel). The run id is the seq of the run's `request`
 * entry. */
#include "daemon/orch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "daemon/orch_engine.h"
#include "daemon/orch_int.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define PATH_MAX_LEN 4096
#define LOCK_SUFFIX ".lock"
#define LOCK_TRIES 8 /* a lock file removed under us by a cleaner: again */

struct orch_run_thread {
    struct orch *o;
    pthread_t tid;
    int done; /* under runs->mu: the thread touches nothing after */
    struct ledger *ledger; /* the run's own handle, closed by the thread */
    int (*append)(void *hook, struct ledger_append *req, struct fo_err *err);
    void *hook;
    int64_t request_seq;
    char *request;
    struct orch_submit_opts opts;
    struct orch_live live; /* in runs->live while the run goes on */
    /* the start, under runs->mu: the request is on record (started), or
     * the run ended before it was (start_rc, start_err) */
    pthread_cond_t cv;
    int started, start_done, start_rc;
    struct fo_err start_err;
    struct orch_run_thread *next;
};

/* A lock file this orchestrator holds: an exclusive flock for its life. */
struct orch_run_lock {
    dev_t dev; /* the ledger's dir */
    ino_t ino;
    int fd;
    char path[PATH_MAX_LEN];
    struct orch_run_lock *next;
};

int orch_runs_init(struct orch *o, size_t max_runs, struct fo_err *err)
{
    struct orch_runs *r = calloc(1, sizeof(*r));
    if (!r)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return fo_err_set(err, FO_E_INTERNAL, "runs: no mutex");
    }
    atomic_init(&r->stopping, 0);
    r->max = max_runs;
    o->runs = r;
    return FO_OK;
}

int orch_runs_stopping(const struct orch *o)
{
    return o->runs && atomic_load(&o->runs->stopping);
}

static void thread_free(struct orch_run_thread *t)
{
    if (!t)
        return;
    ledger_close(t->ledger);
    free(t->request);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* Joins every thread of the list (they may still be running). */
static void join_all(struct orch_run_thread *t)
{
    while (t) {
        struct orch_run_thread *next = t->next;
        pthread_join(t->tid, NULL);
        thread_free(t);
        t = next;
    }
}

/* Takes the threads that have finished off the list (under mu): the caller
 * joins them without the lock. */
static struct orch_run_thread *take_done(struct orch_runs *r)
{
    struct orch_run_thread *done = NULL, **p = &r->list;
    while (*p) {
        struct orch_run_thread *t = *p;
        if (t->done) {
            *p = t->next;
            t->next = done;
            done = t;
        } else {
            p = &t->next;
        }
    }
    return done;
}

static void wait_all(struct orch_runs *r)
{
    pthread_mutex_lock(&r->mu);
    struct orch_run_thread *all = r->list;
    r->list = NULL;
    pthread_mutex_unlock(&r->mu);
    join_all(all);
}

void orch_runs_stop(struct orch *o)
{
    if (!o || !o->runs)
        return;
    atomic_store(&o->runs->stopping, 1);
    wait_all(o->runs);
}

void orch_runs_free(struct orch *o)
{
    if (!o->runs)
        return;
    wait_all(o->runs);
    /* Every run of this orchestrator has its end on record: let go of the
     * locks. The file goes first, while still locked, so a reader sees it
     * held or sees none. */
    struct orch_run_lock *k = o->runs->locks;
    while (k) {
        struct orch_run_lock *next = k->next;
        unlink(k->path);
        close(k->fd);
        free(k);
        k = next;
    }
    pthread_mutex_destroy(&o->runs->mu);
    free(o->runs);
    o->runs = NULL;
}

size_t orch_runs_active(struct orch *o)
{
    pthread_mutex_lock(&o->runs->mu);
    size_t n = o->runs->active;
    pthread_mutex_unlock(&o->runs->mu);
    return n;
}

/* ---- the lock files --------------------------------------------------- */

static int is_instance(const char *s, size_t len)
{
    if (len != ORCH_INSTANCE_HEX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int lock_path(char *out, size_t size, const char *dir, const char *inst)
{
    int n = inst ? snprintf(out, size, "%s/%s/%s%s", dir, ORCH_RUNS_DIR, inst,
                            LOCK_SUFFIX)
                 : snprintf(out, size, "%s/%s", dir, ORCH_RUNS_DIR);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/* Removes the lock files of processes that are gone (nobody holds them).
 * A shared lock is enough to tell, and never makes a reader (who takes a
 * shared lock too) see a dead process alive. Best effort. */
static void clean_stale(const char *runs_dir, const char *own)
{
    DIR *d = opendir(runs_dir);
    if (!d)
        return;
    struct dirent *e;
    size_t sl = strlen(LOCK_SUFFIX);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n != ORCH_INSTANCE_HEX + sl || !is_instance(e->d_name, n - sl) ||
            strcmp(e->d_name + n - sl, LOCK_SUFFIX) != 0 ||
            !strncmp(e->d_name, own, ORCH_INSTANCE_HEX))
            continue;
        int fd = openat(dirfd(d), e->d_name,
                        O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_SH | LOCK_NB) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
        close(fd);
    }
    closedir(d);
}

/* Makes and locks dir's lock file for r->instance (under r->mu). */
static int lock_create(struct orch_runs *r, const char *dir,
                       const struct stat *st, struct fo_err *err)
{
    struct orch_run_lock *k = calloc(1, sizeof(*k));
    char runs[PATH_MAX_LEN];
    if (!k)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    k->fd = -1;
    k->dev = st->st_dev;
    k->ino = st->st_ino;
    if (lock_path(runs, sizeof(runs), dir, NULL) ||
        lock_path(k->path, sizeof(k->path), dir, r->instance)) {
        free(k);
        return fo_err_set(err, FO_E_IO, "%s: path too long", dir);
    }
    if (mkdir(runs, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        free(k);
        return fo_err_set(err, FO_E_IO, "%s: %s", runs, strerror(e));
    }
    clean_stale(runs, r->instance);
    int e = EIO;
    for (int i = 0; i < LOCK_TRIES; i++) {
        k->fd = open(k->path,
                     O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (k->fd < 0) {
            e = errno;
            break;
        }
        int rc;
        while ((rc = flock(k->fd, LOCK_EX)) != 0 && errno == EINTR)
            ;
        struct stat fs;
        if (rc != 0 || fstat(k->fd, &fs) != 0) {
            e = errno;
            close(k->fd);
            break;
        }
        if (fs.st_nlink > 0) {
            k->next = r->locks;
            r->locks = k;
            return FO_OK;
        }
        /* another process's cleaner removed it between our create and our
         * lock: make it again */
        close(k->fd);
    }
    int rc = fo_err_set(err, FO_E_IO, "%s: %s", k->path, strerror(e));
    free(k);
    return rc;
}

int orch_runs_hold(const struct orch *o, const char *dir,
                   char inst[ORCH_INSTANCE_HEX + 1], struct orch_live *live,
                   struct fo_err *err)
{
    struct orch_runs *r = o->runs;
    struct stat st;
    if (stat(dir, &st) != 0)
        return fo_err_set(err, FO_E_IO, "%s: %s", dir, strerror(errno));
    int rc = FO_OK;
    pthread_mutex_lock(&r->mu);
    if (!r->instance[0]) {
        unsigned char raw[ORCH_INSTANCE_HEX / 2];
        if (RAND_bytes(raw, sizeof(raw)) != 1)
            rc = fo_err_set(err, FO_E_INTERNAL, "runs: no random bytes");
        else
            fo_hex(raw, sizeof(raw), r->instance);
    }
    struct orch_run_lock *k = r->locks;
    while (k && !(k->dev == st.st_dev && k->ino == st.st_ino))
        k = k->next;
    if (!rc && !k)
        rc = lock_create(r, dir, &st, err);
    if (!rc)
        memcpy(inst, r->instance, ORCH_INSTANCE_HEX + 1);
    pthread_mutex_unlock(&r->mu);
    if (rc)
        return rc;
    live->dev = st.st_dev;
    live->ino = st.st_ino;
    live->seq = -1;
    atomic_init(&live->cancel, 0);
    live->next = NULL;
    return FO_OK;
}

static void live_add(struct orch_runs *r, struct orch_live *live)
{
    live->next = r->live;
    r->live = live;
}

static void live_remove(struct orch_runs *r, struct orch_live *live)
{
    for (struct orch_live **p = &r->live; *p; p = &(*p)->next)
        if (*p == live) {
            *p = live->next;
            return;
        }
}

void orch_runs_enter(const struct orch *o, struct orch_live *live)
{
    pthread_mutex_lock(&o->runs->mu);
    live_add(o->runs, live);
    pthread_mutex_unlock(&o->runs->mu);
}

void orch_runs_leave(const struct orch *o, struct orch_live *live)
{
    pthread_mutex_lock(&o->runs->mu);
    live_remove(o->runs, live);
    pthread_mutex_unlock(&o->runs->mu);
}

enum { LIVE_NO, LIVE_YES, LIVE_UNKNOWN };

/* Is the process of instance inst alive? Its lock file is held (a shared
 * lock on a fresh open file description is refused: flock conflicts even
 * within one process). No file, or a file nobody holds: it is gone. */
static int probe(const char *dir, const char *inst)
{
    char path[PATH_MAX_LEN];
    if (lock_path(path, sizeof(path), dir, inst))
        return LIVE_UNKNOWN;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? LIVE_NO : LIVE_UNKNOWN;
    int live = LIVE_UNKNOWN;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0)
        live = LIVE_NO;
    else if (errno == EWOULDBLOCK)
        live = LIVE_YES;
    close(fd);
    return live;
}

/* ---- run_start ---------------------------------------------------------- */

static void thread_started(void *arg, int64_t run)
{
    struct orch_run_thread *t = arg;
    struct orch_runs *r = t->o->runs;
    pthread_mutex_lock(&r->mu);
    t->request_seq = run;
    t->started = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&r->mu);
}

/* The run on its own thread, on a private engine (orch_engine_run_sync):
 * the request is written there, and orch_run_start waits for it. */
static void *run_main(void *arg)
{
    struct orch_run_thread *t = arg;
    ledger_set_owner(t->ledger); /* opened by orch_run_start for us */
    struct orch_witness w = {
        .ledger = t->ledger, .append = t->append, .hook = t->hook};
    struct orch_run_req req = {
        .via = "run_start", .request = t->request, .opts = t->opts};
    cJSON *out = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    /* an error after the start is on record as the run's `error` entry */
    int rc = orch_engine_run_sync_live(t->o, &w, &req, &t->live, NULL,
                                       thread_started, t, &out, &err);
    cJSON_Delete(out);
    ledger_close(t->ledger);
    t->ledger = NULL;
    struct orch_runs *r = t->o->runs;
    pthread_mutex_lock(&r->mu);
    if (!t->started) {
        t->start_rc = rc ? rc : FO_E_INTERNAL;
        t->start_err = err;
    }
    t->start_done = 1;
    pthread_cond_broadcast(&t->cv);
    t->done = 1;
    r->active--;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int orch_run_start(struct orch *o, const struct orch_witness *w,
                   const char *request, const struct orch_submit_opts *opts,
                   int64_t *run, struct fo_err *err)
{
    struct orch_runs *r = o->runs;
    struct orch_run_thread *t = NULL;
    int reserved = 0;
    int rc = orch_submit_check(request, opts, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&r->mu);
    struct orch_run_thread *done = take_done(r);
    if (atomic_load(&r->stopping))
        rc = fo_err_set(err, FO_E_DRAINING, "runs: shutting down");
    else if (r->active >= r->max)
        rc = fo_err_set(err, FO_E_BUSY,
                        "runs: %zu already in progress (max_runs); try again "
                        "later",
                        r->max);
    else
        r->active++;
    pthread_mutex_unlock(&r->mu);
    join_all(done);
    if (rc)
        return rc;
    reserved = 1;
    t = calloc(1, sizeof(*t));
    if (!t || !(t->request = orch_strdup(request))) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    if (pthread_cond_init(&t->cv, NULL) != 0) {
        rc = fo_err_set(err, FO_E_INTERNAL, "runs: no condition variable");
        goto out;
    }
    t->o = o;
    t->append = w->append;
    t->hook = w->hook;
    if (opts)
        t->opts = *opts;
    char inst[ORCH_INSTANCE_HEX + 1];
    rc = orch_runs_hold(o, ledger_dir(w->ledger), inst, &t->live, err);
    if (!rc)
        rc = ledger_open(ledger_dir(w->ledger), 0, NULL, &t->ledger, err);
    if (rc)
        goto out;
    pthread_mutex_lock(&r->mu);
    if (pthread_create(&t->tid, NULL, run_main, t) != 0) {
        pthread_mutex_unlock(&r->mu);
        rc = fo_err_set(err, FO_E_INTERNAL, "runs: cannot start a thread");
        goto out;
    }
    /* the thread takes the lock before it ends: it finds itself here */
    t->next = r->list;
    r->list = t;
    reserved = 0;
    while (!t->started && !t->start_done)
        pthread_cond_wait(&t->cv, &r->mu);
    if (t->started)
        *run = t->request_seq;
    else {
        rc = t->start_rc;
        if (err)
            *err = t->start_err;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
out:
    if (reserved) {
        pthread_mutex_lock(&r->mu);
        r->active--;
        pthread_mutex_unlock(&r->mu);
    }
    thread_free(t);
    return rc;
}

/* ---- run_get ------------------------------------------------------------ */

/* A private return of the scan callback: the run ended. */
#define SCAN_END 1000

struct scan {
    struct ledger *l;
    int64_t run;
    size_t n;       /* the run's entries seen */
    cJSON *entries; /* the last ORCH_RUN_ENTRIES_MAX (NULL: not kept) */
    size_t shown;
    int64_t answer_seq, budget_seq, error_seq, stop_seq, resume_seq;
    int64_t gate_seq; /* the last gate_requested with no decision, or -1 */
    char inst[ORCH_INSTANCE_HEX + 1]; /* of the last `resume`, else "" */
};

static cJSON *body_of(struct ledger *l, int64_t seq, int *redacted, int *rc,
                      struct fo_err *err);

static int scan_entry(void *ctx, const struct ledger_entry *e)
{
    struct scan *s = ctx;
    s->n++;
    if (s->entries) {
        cJSON *j = ledger_entry_json(e);
        if (!j)
            return FO_E_NOMEM;
        cJSON_AddItemToArray(s->entries, j);
        if (++s->shown > ORCH_RUN_ENTRIES_MAX) {
            cJSON_DeleteItemFromArray(s->entries, 0);
            s->shown--;
        }
    }
    if (e->seq == s->run)
        return FO_OK;
    if (!strcmp(e->kind, "stop") && e->parent == s->run)
        s->stop_seq = e->seq;
    if (!strcmp(e->kind, "resume") && e->parent == s->run) {
        int rc = FO_OK;
        struct fo_err ignore;
        cJSON *b = body_of(s->l, e->seq, NULL, &rc, &ignore);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "instance");
        if (cJSON_IsString(v) &&
            is_instance(v->valuestring, strlen(v->valuestring)))
            snprintf(s->inst, sizeof(s->inst), "%s", v->valuestring);
        cJSON_Delete(b);
        s->resume_seq = e->seq;
    }
    if (!strcmp(e->kind, "budget"))
        s->budget_seq = e->seq;
    if (!strcmp(e->kind, "gate_requested"))
        s->gate_seq = e->seq;
    else if (!strncmp(e->kind, "gate_", 5) && e->parent == s->gate_seq)
        s->gate_seq = -1; /* decided */
    if (!strcmp(e->kind, "answer")) {
        s->answer_seq = e->seq;
        return SCAN_END; /* nothing of the run follows its answer */
    }
    if (!strcmp(e->kind, "error") && e->parent == s->run) {
        s->error_seq = e->seq;
        return SCAN_END;
    }
    return FO_OK;
}

/* The body of seq as JSON; NULL when redacted (*redacted set) or not an
 * object. */
static cJSON *body_of(struct ledger *l, int64_t seq, int *redacted, int *rc,
                      struct fo_err *err)
{
    char *body = NULL;
    size_t len = 0;
    cJSON *j = NULL;
    if (redacted)
        *redacted = 0;
    *rc = ledger_body(l, seq, &body, &len, err);
    if (*rc == FO_E_REDACTED) {
        *rc = FO_OK;
        if (redacted)
            *redacted = 1;
        return NULL;
    }
    if (*rc)
        return NULL;
    struct fo_err ignore;
    if (fo_json_parse(body, len, &j, &ignore) != FO_OK || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
    }
    free(body);
    return j;
}

static int add_str_or_null(cJSON *o, const char *name, const cJSON *from,
                           const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, field);
    return cJSON_IsString(v)
               ? cJSON_AddStringToObject(o, name, v->valuestring) != NULL
               : cJSON_AddNullToObject(o, name) != NULL;
}

/* The request entry of a run: FO_OK and its body in *req (NULL when it was
 * redacted: then it counts as a run), FO_E_NOT_FOUND, or FO_E_NOT_A_RUN
 * for an entry of another kind and for a request that submit or run_start
 * did not write (plan and plan_run write requests too, and so may any
 * client through ledger_append). */
static int run_request(struct ledger *l, int64_t run, cJSON **req,
                       struct fo_err *err)
{
    struct ledger_entry e;
    int redacted = 0;
    int rc = ledger_get(l, run, &e, NULL, err);
    if (rc == FO_E_NOT_FOUND)
        return fo_err_set(err, rc, "run %lld: no such run (no entry %lld)",
                          (long long)run, (long long)run);
    if (rc)
        return rc;
    if (strcmp(e.kind, "request") != 0)
        return fo_err_set(err, FO_E_NOT_A_RUN,
                          "run %lld: not a run (an entry of kind \"%s\")",
                          (long long)run, e.kind);
    cJSON *b = body_of(l, run, &redacted, &rc, err);
    if (rc)
        return rc;
    const cJSON *via = cJSON_GetObjectItemCaseSensitive(b, "via");
    if (!redacted &&
        (!cJSON_IsString(via) || (strcmp(via->valuestring, "submit") != 0 &&
                                  strcmp(via->valuestring, "run_start") != 0 &&
                                  strcmp(via->valuestring, "plan_run") != 0))) {
        rc = cJSON_IsString(via)
                 ? fo_err_set(err, FO_E_NOT_A_RUN,
                              "run %lld: not a run (a request via \"%.64s\"; "
                              "runs are made by submit and run_start)",
                              (long long)run, via->valuestring)
                 : fo_err_set(err, FO_E_NOT_A_RUN,
                              "run %lld: not a run (a request that names no "
                              "\"via\"; runs are made by submit and "
                              "run_start)",
                              (long long)run);
        cJSON_Delete(b);
        return rc;
    }
    *req = b;
    return FO_OK;
}

/* The instance a run's request names, when well formed. */
static const char *request_instance(const cJSON *req)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, "instance");
    return cJSON_IsString(v) &&
                   is_instance(v->valuestring, strlen(v->valuestring))
               ? v->valuestring
               : NULL;
}

/* Reads the run's entries into s (from scratch). */
static int scan_run(struct ledger *l, struct scan *s, int keep,
                    struct fo_err *err)
{
    cJSON_Delete(s->entries);
    *s = (struct scan){.l = l,
                       .run = s->run,
                       .answer_seq = -1,
                       .budget_seq = -1,
                       .error_seq = -1,
                       .stop_seq = -1,
                       .resume_seq = -1,
                       .gate_seq = -1};
    if (keep && !(s->entries = cJSON_CreateArray()))
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc =
        ledger_descendants(l, s->run, ORCH_RUN_SCAN_MAX, scan_entry, s, err);
    if (rc == SCAN_END)
        rc = FO_OK;
    else if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    return rc;
}

/* Who runs run: on a ledger with run leases (several daemons), its lease
 * when it has one (the owner into held); else the lock file of instance
 * inst in the ledger's dir. */
static int liveness(struct ledger *l, int64_t run, const char *inst,
                    char held[ORCH_INSTANCE_HEX + 1])
{
    if (ledger_leases(l)) {
        char owner[65];
        int live = 0;
        struct fo_err err;
        int rc = ledger_lease_get(l, run, owner, sizeof(owner), &live, &err);
        if (rc == FO_OK) {
            if (is_instance(owner, strlen(owner)))
                memcpy(held, owner, ORCH_INSTANCE_HEX + 1);
            return live ? LIVE_YES : LIVE_NO;
        }
        if (rc != FO_E_NOT_FOUND)
            return LIVE_UNKNOWN;
    }
    return inst ? probe(ledger_dir(l), inst) : LIVE_UNKNOWN;
}

int orch_run_held(const struct orch *o, struct ledger *l, int64_t run)
{
    (void)o;
    cJSON *req = NULL;
    struct fo_err err;
    struct scan s = {.run = run};
    if (run_request(l, run, &req, &err))
        return 0;
    const char *inst = request_instance(req);
    int held = 0;
    if (!scan_run(l, &s, 0, &err)) {
        if (s.inst[0])
            inst = s.inst;
        char owner[ORCH_INSTANCE_HEX + 1];
        held = liveness(l, run, inst, owner) == LIVE_YES;
    }
    cJSON_Delete(req);
    return held;
}

static cJSON *gate_view(int64_t seq, const cJSON *b);

int orch_run_get(struct ledger *l, int64_t run, cJSON **out, struct fo_err *err)
{
    struct scan s = {.run = run};
    cJSON *req = NULL, *ans = NULL, *bud = NULL, *fail = NULL, *o = NULL;
    int rc = run_request(l, run, &req, err);
    if (rc)
        return rc;
    rc = scan_run(l, &s, 1, err);
    if (rc)
        goto out;
    /* The process that holds it: the last to resume it, else the one that
     * started it. One seen gone has every entry it will ever write on
     * record, so a second read cannot miss its end. */
    const char *inst = s.inst[0] ? s.inst : request_instance(req);
    char held[ORCH_INSTANCE_HEX + 1] = "";
    if (inst)
        snprintf(held, sizeof(held), "%s", inst);
    int live = liveness(l, run, inst ? held : NULL, held);
    if (live != LIVE_YES && s.answer_seq < 0 && s.error_seq < 0) {
        rc = scan_run(l, &s, 1, err);
        if (rc)
            goto out;
    }
    int resumable =
        !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(req, "resumable"));
    if (s.answer_seq >= 0)
        ans = body_of(l, s.answer_seq, NULL, &rc, err);
    if (!rc && s.budget_seq >= 0)
        bud = body_of(l, s.budget_seq, NULL, &rc, err);
    if (!rc && s.error_seq >= 0)
        fail = body_of(l, s.error_seq, NULL, &rc, err);
    if (rc)
        goto out;
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(bud, "reason");
    const char *why = cJSON_IsString(reason) ? reason->valuestring : "";
    /* With no end on record: "running" while its process holds it; a run
     * a daemon will resume reads "stopped" (by a shutdown or a crash);
     * "interrupted" only where nothing will resume it (a CLI's run). */
    /* A run waiting at a gate reads "waiting" whether or not a process
     * holds it now: the next daemon to start resumes it still waiting. */
    const char *state =
        s.error_seq >= 0    ? "failed"
        : s.answer_seq >= 0 ? s.budget_seq < 0                ? "done"
                              : !strcmp(why, "shutdown")      ? "stopped"
                              : !strcmp(why, "cancelled")     ? "cancelled"
                              : !strcmp(why, "gate_rejected") ? "rejected"
                              : !strcmp(why, "gate_expired")  ? "expired"
                                                              : "budget"
        : s.gate_seq >= 0 && (live == LIVE_YES || resumable) ? "waiting"
        : live == LIVE_YES                                   ? "running"
        : live == LIVE_NO ? (resumable ? "stopped" : "interrupted")
                          : "unknown";
    cJSON *gate = NULL;
    if (!strcmp(state, "waiting")) {
        cJSON *gb = body_of(l, s.gate_seq, NULL, &rc, err);
        if (rc)
            goto out;
        gate = gb ? gate_view(s.gate_seq, gb) : NULL;
        cJSON_Delete(gb);
    }
    inst = held[0] ? held : NULL;
    o = cJSON_CreateObject();
    int ok = o && fo_json_add_int(o, "run", run) &&
             cJSON_AddStringToObject(o, "state", state) &&
             add_str_or_null(o, "request", req, "request") &&
             add_str_or_null(o, "via", req, "via") &&
             (inst ? cJSON_AddStringToObject(o, "instance", inst) != NULL
                   : cJSON_AddNullToObject(o, "instance") != NULL) &&
             fo_json_add_int(o, "count", (long long)s.n) &&
             cJSON_AddBoolToObject(o, "truncated", s.n > s.shown) &&
             add_str_or_null(o, "answer", ans, "answer") &&
             (s.answer_seq >= 0
                  ? fo_json_add_int(o, "answer_seq", s.answer_seq) != NULL
                  : cJSON_AddNullToObject(o, "answer_seq") != NULL);
    if (ok)
        ok = gate ? cJSON_AddItemToObject(o, "gate", gate) != 0
                  : cJSON_AddNullToObject(o, "gate") != NULL;
    if (!ok && gate && !cJSON_GetObjectItemCaseSensitive(o, "gate"))
        cJSON_Delete(gate);
    gate = NULL;
    if (ok && fail) {
        cJSON *f = cJSON_AddObjectToObject(o, "error");
        ok = f && add_str_or_null(f, "error", fail, "error") &&
             add_str_or_null(f, "code", fail, "code");
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "error") != NULL;
    }
    if (!ok) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    cJSON_AddItemToObject(o, "entries", s.entries);
    s.entries = NULL;
    *out = o;
    o = NULL;
out:
    cJSON_Delete(o);
    cJSON_Delete(req);
    cJSON_Delete(ans);
    cJSON_Delete(bud);
    cJSON_Delete(fail);
    cJSON_Delete(s.entries);
    return rc;
}

/* ---- run_cancel --------------------------------------------------------- */

/* Sets the cancel flag of run seq of the ledger in dir st when it is in
 * progress in this process; 1 when it was. */
static int cancel_live(struct orch_runs *r, const struct stat *st, int64_t seq)
{
    int found = 0;
    pthread_mutex_lock(&r->mu);
    for (struct orch_live *v = r->live; v && !found; v = v->next)
        if (v->seq == seq && v->dev == st->st_dev && v->ino == st->st_ino) {
            atomic_store(&v->cancel, 1);
            found = 1;
        }
    pthread_mutex_unlock(&r->mu);
    return found;
}

int orch_run_cancel_here(const struct orch *o, const char *dir, int64_t run)
{
    struct stat st;
    return o && stat(dir, &st) == 0 && cancel_live(o->runs, &st, run);
}

static int is_ours(struct orch_runs *r, const char *inst)
{
    pthread_mutex_lock(&r->mu);
    int ours = inst && r->instance[0] && !strcmp(r->instance, inst);
    pthread_mutex_unlock(&r->mu);
    return ours;
}

int orch_run_cancel(struct orch *o, struct ledger *l, int64_t run, cJSON **out,
                    struct fo_err *err)
{
    cJSON *req = NULL, *g = NULL;
    int rc = run_request(l, run, &req, err);
    cJSON_Delete(req);
    if (rc)
        return rc;
    struct stat st;
    int here = o && stat(ledger_dir(l), &st) == 0;
    const char *state = "running", *cancel = "requested";
    if (!here || !cancel_live(o->runs, &st, run)) {
        rc = orch_run_get(l, run, &g, err);
        if (rc)
            return rc;
        const cJSON *sv = cJSON_GetObjectItemCaseSensitive(g, "state");
        const cJSON *iv = cJSON_GetObjectItemCaseSensitive(g, "instance");
        const char *inst = cJSON_IsString(iv) ? iv->valuestring : NULL;
        state = sv->valuestring;
        cancel = "ended";
        int ours = o && is_ours(o->runs, inst);
        if (!strcmp(state, "running") && ours && here &&
            cancel_live(o->runs, &st, run)) {
            /* its request was on record before it was registered */
            state = "running";
            cancel = "requested";
        } else if (!strcmp(state, "waiting")) {
            rc = fo_err_set(err, FO_E_RUN_ELSEWHERE,
                            "run %lld: waiting at an approval gate, not in "
                            "this process: cancel it where it runs, or "
                            "reject its gate (forum gate reject)",
                            (long long)run);
        } else if (!strcmp(state, "running")) {
            rc = ours ? fo_err_set(err, FO_E_RUN_ELSEWHERE,
                                   "run %lld: no longer in progress in this "
                                   "process, and no end on record",
                                   (long long)run)
                      : fo_err_set(err, FO_E_RUN_ELSEWHERE,
                                   "run %lld: in progress in another process "
                                   "(instance %s): cancel it there",
                                   (long long)run, inst ? inst : "?");
        } else if (!strcmp(state, "stopped") &&
                   cJSON_IsNull(
                       cJSON_GetObjectItemCaseSensitive(g, "answer_seq"))) {
            rc = fo_err_set(err, FO_E_RUN_ELSEWHERE,
                            "run %lld: stopped with no end on record; the "
                            "next daemon to start on this ledger resumes it: "
                            "cancel it there",
                            (long long)run);
        } else if (!strcmp(state, "unknown")) {
            rc = fo_err_set(err, FO_E_RUN_ELSEWHERE,
                            "run %lld: no end on record, and no process "
                            "known to run it (state unknown): nothing here "
                            "can cancel it",
                            (long long)run);
        }
    }
    if (!rc) {
        cJSON *r = cJSON_CreateObject();
        if (r && fo_json_add_int(r, "run", run) &&
            cJSON_AddStringToObject(r, "state", state) &&
            cJSON_AddStringToObject(r, "cancel", cancel)) {
            *out = r;
        } else {
            cJSON_Delete(r);
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        }
    }
    cJSON_Delete(g);
    return rc;
}

/* ---- gates on the ledger ------------------------------------------------ */

struct gate_scan {
    struct ledger *l;
    int64_t run;  /* only this run's gates, when >= 0 */
    int64_t wave; /* only this wave's, when >= 0 */
    cJSON *found; /* [{"seq", "body"}] */
};

static int64_t body_int(const cJSON *b, const char *k)
{
    long long v = -1;
    if (fo_json_get_int(b, k, 0, INT64_MAX / 2, &v) != FO_OK)
        return -1;
    return v;
}

static int gate_found(void *ctx, const struct ledger_entry *e)
{
    struct gate_scan *g = ctx;
    int rc = FO_OK;
    struct fo_err ignore;
    cJSON *b = body_of(g->l, e->seq, NULL, &rc, &ignore);
    if (!b)
        return rc == FO_E_NOMEM ? rc : 0; /* redacted: no gate to show */
    int64_t run = body_int(b, "run"), wave = body_int(b, "wave");
    if (run < 0 || wave < 0 || (g->run >= 0 && run != g->run) ||
        (g->wave >= 0 && wave != g->wave)) {
        cJSON_Delete(b);
        return 0;
    }
    cJSON *item = cJSON_CreateObject();
    if (!item || !fo_json_add_int(item, "seq", e->seq) ||
        !cJSON_AddItemToObject(item, "body", b)) {
        cJSON_Delete(item);
        if (!item)
            cJSON_Delete(b);
        return FO_E_NOMEM;
    }
    cJSON_AddItemToArray(g->found, item);
    return 0;
}

struct gate_decided {
    int64_t gate, seq;
    char kind[LEDGER_KIND_MAX + 1];
};

static int gate_decided_entry(void *ctx, const struct ledger_entry *en)
{
    struct gate_decided *c = ctx;
    if (en->parent == c->gate && !strncmp(en->kind, "gate_", 5) &&
        strcmp(en->kind, "gate_requested") != 0) {
        c->seq = en->seq;
        snprintf(c->kind, sizeof(c->kind), "%s", en->kind);
        return 1;
    }
    return 0;
}

/* The gate_requested entries of run (>= 0) or of every run, wave (>= 0)
 * or every wave: [{"seq", "body"}]. */
static int gates_of(struct ledger *l, int64_t run, int64_t wave, cJSON **out,
                    struct fo_err *err)
{
    struct gate_scan g = {.l = l, .run = run, .wave = wave};
    if (!(g.found = cJSON_CreateArray()))
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = ledger_gates(l, run >= 0 ? run : 0, gate_found, &g, err);
    if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (rc) {
        cJSON_Delete(g.found);
        return rc;
    }
    *out = g.found;
    return FO_OK;
}

/* The decision of gate seq on record: its seq (kind in kind), or -1. */
static int64_t gate_decision(struct ledger *l, int64_t gate,
                             char kind[LEDGER_KIND_MAX + 1])
{
    struct gate_decided c = {.gate = gate, .seq = -1};
    struct fo_err ignore;
    ledger_descendants(l, gate, 64, gate_decided_entry, &c, &ignore);
    if (kind)
        snprintf(kind, LEDGER_KIND_MAX + 1, "%s", c.kind);
    return c.seq;
}

/* 1 when run has an end on record. */
static int run_ended(struct ledger *l, int64_t run, struct fo_err *err)
{
    struct scan s = {.run = run};
    if (scan_run(l, &s, 0, err))
        return -1;
    return s.answer_seq >= 0 || s.error_seq >= 0;
}

/* A pending gate as gate_list shows it. */
static cJSON *gate_view(int64_t seq, const cJSON *b)
{
    static const char *const copy[] = {"tasks",    "question",  "rule",
                                       "deadline", "on_expiry", "deadline_ms"};
    cJSON *o = cJSON_CreateObject();
    if (!o || !fo_json_add_int(o, "run_seq", body_int(b, "run")) ||
        !fo_json_add_int(o, "wave", body_int(b, "wave")) ||
        !fo_json_add_int(o, "requested_seq", seq)) {
        cJSON_Delete(o);
        return NULL;
    }
    for (size_t i = 0; i < sizeof(copy) / sizeof(copy[0]); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, copy[i]);
        if (v && !cJSON_AddItemToObject(o, copy[i], cJSON_Duplicate(v, 1))) {
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

int orch_gate_list(struct ledger *l, int64_t run, cJSON **out,
                   struct fo_err *err)
{
    cJSON *found = NULL;
    int rc = gates_of(l, run, -1, &found, err);
    if (rc)
        return rc;
    cJSON *o = cJSON_CreateObject();
    cJSON *list = o ? cJSON_AddArrayToObject(o, "gates") : NULL;
    if (!list)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    const cJSON *it;
    cJSON_ArrayForEach (it, found) {
        if (rc)
            break;
        int64_t seq = body_int(it, "seq");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(it, "body");
        if (gate_decision(l, seq, NULL) >= 0)
            continue;
        int ended = run_ended(l, body_int(b, "run"), err);
        if (ended < 0) {
            rc = err->code;
            break;
        }
        if (ended)
            continue;
        cJSON *v = gate_view(seq, b);
        if (!v || !cJSON_AddItemToArray(list, v)) {
            cJSON_Delete(v);
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        }
    }
    cJSON_Delete(found);
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}

int orch_gate_check(struct ledger *l, const struct orch_gate_decision *d,
                    int64_t *gate_seq, struct fo_err *err)
{
    int rc = orch_gate_decision_check(d, err);
    if (rc)
        return rc;
    cJSON *req = NULL, *found = NULL;
    rc = run_request(l, d->run, &req, err);
    cJSON_Delete(req);
    if (rc == FO_E_NOT_FOUND || rc == FO_E_NOT_A_RUN)
        return fo_err_set(err, FO_E_NO_GATE, "run %lld: no such run",
                          (long long)d->run);
    if (rc)
        return rc;
    rc = gates_of(l, d->run, d->wave, &found, err);
    if (rc)
        return rc;
    const cJSON *g = cJSON_GetArrayItem(found, 0);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(g, "body");
    int64_t gseq = body_int(g, "seq");
    char kind[LEDGER_KIND_MAX + 1];
    int64_t dseq = g ? gate_decision(l, gseq, kind) : -1;
    int ended = g ? run_ended(l, d->run, err) : 0;
    if (!g)
        rc = fo_err_set(err, FO_E_NO_GATE, "run %lld: no gate at wave %lld",
                        (long long)d->run, (long long)d->wave);
    else if (dseq >= 0)
        rc = fo_err_set(err, FO_E_GATE_DECIDED,
                        "run %lld wave %lld: decided already (%s, seq %lld)",
                        (long long)d->run, (long long)d->wave, kind,
                        (long long)dseq);
    else if (ended < 0)
        rc = err->code;
    else if (ended)
        rc = fo_err_set(err, FO_E_NO_GATE,
                        "run %lld: ended; its gate waits no more",
                        (long long)d->run);
    else if (ledger_now_us() / 1000 >= body_int(b, "deadline_ms"))
        rc = fo_err_set(
            err, FO_E_GATE_DECIDED,
            "run %lld wave %lld: its deadline passed (%.40s): "
            "it expires when its run goes on",
            (long long)d->run, (long long)d->wave,
            cJSON_IsString(cJSON_GetObjectItemCaseSensitive(b, "deadline"))
                ? cJSON_GetObjectItemCaseSensitive(b, "deadline")->valuestring
                : "?");
    if (!rc && d->decision[0] == 'e') {
        if (!cJSON_IsObject(d->edits) || !d->edits->child)
            rc = fo_err_set(err, FO_E_INVALID,
                            "edits: must be an object of {task id: "
                            "instruction}, not empty");
        const cJSON *x;
        cJSON_ArrayForEach (x, d->edits) {
            if (rc)
                break;
            int in_wave = 0;
            const cJSON *t;
            cJSON_ArrayForEach (t,
                                cJSON_GetObjectItemCaseSensitive(b, "tasks")) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(t, "id");
                if (cJSON_IsString(id) && !strcmp(id->valuestring, x->string))
                    in_wave = 1;
            }
            if (!in_wave)
                rc = fo_err_set(err, FO_E_INVALID,
                                "edits: task \"%.64s\" is not in wave %lld",
                                x->string, (long long)d->wave);
            else if (!cJSON_IsString(x) || !*x->valuestring ||
                     strlen(x->valuestring) > ORCH_GATE_EDIT_MAX)
                rc = fo_err_set(err, FO_E_INVALID,
                                "edits.%.64s: must be an instruction of "
                                "1..%d bytes",
                                x->string, ORCH_GATE_EDIT_MAX);
        }
    }
    cJSON_Delete(found);
    if (!rc)
        *gate_seq = gseq;
    return rc;
}

int orch_gate_first(struct ledger *l, const struct orch_gate_decision *d,
                    int64_t gate_seq, int64_t seq, struct fo_err *err)
{
    char kind[LEDGER_KIND_MAX + 1];
    int64_t first = gate_decision(l, gate_seq, kind);
    if (first >= 0 && first != seq)
        return fo_err_set(err, FO_E_GATE_DECIDED,
                          "run %lld wave %lld: another decision (%s, seq "
                          "%lld) came first",
                          (long long)d->run, (long long)d->wave, kind,
                          (long long)first);
    return FO_OK;
}

cJSON *orch_gate_reply(const struct orch_gate_decision *d, int64_t seq)
{
    cJSON *o = cJSON_CreateObject();
    const char *dec = d->decision[0] == 'a'   ? "approved"
                      : d->decision[0] == 'e' ? "edited"
                                              : "rejected";
    if (!o || !fo_json_add_int(o, "run_seq", d->run) ||
        !fo_json_add_int(o, "wave", d->wave) ||
        !cJSON_AddStringToObject(o, "decision", dec) ||
        !fo_json_add_int(o, "seq", seq)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int orch_gate_decide(const struct orch_witness *w,
                     const struct orch_gate_decision *d, cJSON **out,
                     struct fo_err *err)
{
    int64_t gseq = -1, seq = -1;
    int rc = orch_gate_check(w->ledger, d, &gseq, err);
    if (!rc) {
        cJSON *o = orch_gate_decision_json(d);
        rc = o ? orch_witness_json(w, "human", orch_gate_kind(d->decision),
                                   gseq, o, &seq, err)
               : fo_err_set(err, FO_E_NOMEM, NULL);
        cJSON_Delete(o);
        if (rc == FO_E_EXISTS) { /* the store saw another decision first */
            char why[FO_ERR_MSG_MAX];
            snprintf(why, sizeof(why), "%s", err ? err->msg : "");
            rc = fo_err_set(err, FO_E_GATE_DECIDED,
                            "run %lld wave %lld: the gate was decided "
                            "already (%s)",
                            (long long)d->run, (long long)d->wave, why);
        }
    }
    /* another process may have decided in between: the first wins */
    if (!rc)
        rc = orch_gate_first(w->ledger, d, gseq, seq, err);
    if (rc)
        return rc;
    *out = orch_gate_reply(d, seq);
    return *out ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
}

/* ---- run_list and run_show ---------------------------------------------- */

struct req_list {
    int64_t *seq;
    int64_t *ts;
    size_t n, cap;
};

static int on_request(void *ctx, const struct ledger_entry *e)
{
    struct req_list *c = ctx;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        int64_t *a = realloc(c->seq, cap * sizeof(*a));
        if (a)
            c->seq = a;
        int64_t *b = a ? realloc(c->ts, cap * sizeof(*b)) : NULL;
        if (!a || !b)
            return FO_E_NOMEM;
        c->ts = b;
        c->cap = cap;
    }
    c->seq[c->n] = e->seq;
    c->ts[c->n++] = e->ts;
    return 0;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Adds run seq (its request written at ts) to arr (NULL: only checks)
 * when it is a run of state (NULL: any): 1 it is (added), 0 not a run or
 * another state, -1 out of memory (err set). */
static int add_run_item(struct ledger *l, cJSON *arr, int64_t seq, int64_t ts,
                        const char *state, struct fo_err *err)
{
    cJSON *g = NULL;
    struct fo_err gerr;
    if (orch_run_get(l, seq, &g, &gerr) != FO_OK)
        return 0; /* not a run (plan, a client's request) */
    const char *st = jstr(g, "state");
    if (!arr || (state && (!st || strcmp(st, state) != 0))) {
        int is = !state || (st && !strcmp(st, state));
        cJSON_Delete(g);
        return is;
    }
    cJSON *x = cJSON_CreateObject();
    const char *req = jstr(g, "request");
    char cut[201], id[24];
    snprintf(cut, sizeof(cut), "%s", req ? req : "");
    cut[orch_utf8_prefix(cut, strlen(cut), 200)] = '\0';
    snprintf(id, sizeof(id), "%lld", (long long)seq);
    int ok =
        x && cJSON_AddStringToObject(x, "type", "run") &&
        cJSON_AddStringToObject(x, "id", id) &&
        fo_json_add_int(x, "run", seq) &&
        cJSON_AddStringToObject(x, "state", st ? st : "unknown") &&
        cJSON_AddStringToObject(x, "via",
                                jstr(g, "via") ? jstr(g, "via") : "") &&
        (req ? cJSON_AddStringToObject(x, "request", cut)
             : cJSON_AddNullToObject(x, "request")) &&
        fo_json_add_int(x, "started_ts", ts) &&
        fo_json_add_int(x, "entries",
                        (long long)cJSON_GetObjectItemCaseSensitive(g, "count")
                            ->valuedouble) &&
        cJSON_AddItemToArray(arr, x);
    cJSON_Delete(g);
    if (!ok) {
        cJSON_Delete(x);
        fo_err_set(err, FO_E_NOMEM, NULL);
        return -1;
    }
    return 1;
}

static int64_t gw_key(const cJSON *gw, int i)
{
    const cJSON *x = cJSON_GetArrayItem(gw, i);
    return (int64_t)cJSON_GetObjectItemCaseSensitive(x, "last_seq")
        ->valuedouble;
}

int orch_run_list(struct ledger *l, const char *state, const char *type,
                  int64_t before, int64_t since, int limit, cJSON **out,
                  struct fo_err *err)
{
    int want_runs = !type || !strcmp(type, "run");
    int want_gw = (!type || !strcmp(type, "gateway_session")) && !state;
    if (type && !want_runs && strcmp(type, "gateway_session") != 0)
        return fo_err_set(err, FO_E_INVALID,
                          "type: %.40s is neither run nor gateway_session",
                          type);
    struct req_list c = {0};
    cJSON *gw = NULL;
    int rc = want_runs ? ledger_requests(l, since < 0 ? 0 : since, on_request,
                                         &c, err)
                       : FO_OK;
    if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc && want_gw)
        rc = orch_gw_sessions(l, &gw, err);
    cJSON *o = rc ? NULL : cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "runs") : NULL;
    if (!rc && !arr)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    int64_t next = -1;
    int got = 0, ng = cJSON_GetArraySize(gw), gi = 0;
    /* newest first, from before: a run by its id, a gateway session by its
     * last call's seq (one order over both) */
    size_t i = c.n;
    while (!rc) {
        while (i > 0 && before >= 0 && c.seq[i - 1] >= before)
            i--;
        while (gi < ng && before >= 0 && gw_key(gw, gi) >= before)
            gi++;
        int run_next = i > 0, gw_next = gi < ng && gw_key(gw, gi) >= since;
        if (run_next && gw_next)
            run_next = c.seq[i - 1] > gw_key(gw, gi);
        else if (!run_next && !gw_next)
            break;
        int64_t key = run_next ? c.seq[i - 1] : gw_key(gw, gi);
        if (got == limit &&
            (!run_next ||
             add_run_item(l, NULL, key, c.ts[i - 1], state, err) > 0)) {
            next = key + 1;
            break;
        }
        if (run_next) {
            int r = add_run_item(l, arr, key, c.ts[i - 1], state, err);
            i--;
            if (r < 0)
                rc = FO_E_NOMEM;
            got += r > 0;
        } else {
            cJSON *x = cJSON_DetachItemFromArray(gw, gi);
            ng--;
            if (!cJSON_AddItemToArray(arr, x)) {
                cJSON_Delete(x);
                rc = fo_err_set(err, FO_E_NOMEM, NULL);
            }
            got++;
        }
    }
    if (!rc && !(next >= 0 ? fo_json_add_int(o, "next", next - 1) != NULL
                           : cJSON_AddNullToObject(o, "next") != NULL))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    free(c.seq);
    free(c.ts);
    cJSON_Delete(gw);
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}

struct show_ctx {
    struct ledger *l;
    cJSON *entries; /* every entry with its body */
};

static int on_show(void *ctx, const struct ledger_entry *e)
{
    struct show_ctx *c = ctx;
    cJSON *x = ledger_entry_json(e);
    if (!x)
        return FO_E_NOMEM;
    int rc = FO_OK;
    struct fo_err err;
    cJSON *b = body_of(c->l, e->seq, NULL, &rc, &err);
    cJSON_AddItemToObject(x, "body", b ? b : cJSON_CreateNull());
    cJSON_AddItemToArray(c->entries, x);
    return 0;
}

static cJSON *find_task(cJSON *tasks, const char *id)
{
    cJSON *t;
    cJSON_ArrayForEach (t, tasks)
        if (id && jstr(t, "id") && !strcmp(jstr(t, "id"), id))
            return t;
    return NULL;
}

/* Lays the folded state (orch_run_fold) over the view built from the
 * entries: the engine's word on each task's instruction and state. */
static int show_fold(const struct orch *o, struct ledger *l, int64_t run,
                     cJSON *show)
{
    cJSON *f = NULL;
    struct fo_err ferr;
    int rc = orch_run_fold(o, l, run, &f, &ferr);
    if (rc == FO_E_NOMEM)
        return rc;
    if (rc)
        return cJSON_AddStringToObject(show, "fold_error", ferr.msg)
                   ? FO_OK
                   : FO_E_NOMEM;
    cJSON *tasks = cJSON_GetObjectItemCaseSensitive(show, "tasks");
    const cJSON *t;
    int ok = 1;
    cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(f, "tasks")) {
        cJSON *x = find_task(tasks, jstr(t, "id"));
        if (!x)
            continue;
        const char *keys[] = {"instruction", "state"};
        for (int i = 0; i < 2 && ok; i++) {
            cJSON *v = cJSON_Duplicate(
                cJSON_GetObjectItemCaseSensitive(t, keys[i]), 1);
            ok = v && cJSON_ReplaceItemInObjectCaseSensitive(x, keys[i], v);
            if (!ok)
                cJSON_Delete(v);
        }
    }
    /* the judgement (orch_judge.c): retries, the intent judge's verdict,
     * the per-wave checkpoints and the capsule's hash, when there are */
    const char *top[] = {"phase",  "model_calls", "escalations", "retries",
                         "intent", "checkpoints", "capsule_hash"};
    for (int i = 0; i < 7 && ok; i++) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(f, top[i]);
        if (!src && i >= 3)
            continue;
        cJSON *v = cJSON_Duplicate(src, 1);
        ok = v && cJSON_AddItemToObject(show, top[i], v);
        if (!ok)
            cJSON_Delete(v);
    }
    cJSON_Delete(f);
    return ok ? FO_OK : FO_E_NOMEM;
}

int orch_run_show(const struct orch *orch, struct ledger *l, int64_t run,
                  cJSON **out, struct fo_err *err)
{
    cJSON *g = NULL;
    int rc = orch_run_get(l, run, &g, err);
    if (rc)
        return rc;
    struct show_ctx c = {.l = l, .entries = cJSON_CreateArray()};
    cJSON *o = cJSON_CreateObject();
    cJSON *tasks = o ? cJSON_AddArrayToObject(o, "tasks") : NULL;
    cJSON *gates = o ? cJSON_AddArrayToObject(o, "gates") : NULL;
    if (!c.entries || !tasks || !gates) {
        cJSON_Delete(c.entries);
        cJSON_Delete(o);
        cJSON_Delete(g);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    rc = ledger_descendants(l, run, ORCH_RUN_SCAN_MAX, on_show, &c, err);
    if (rc == FO_E_NOMEM)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    fo_json_add_int(o, "run", run);
    cJSON_AddStringToObject(o, "state",
                            jstr(g, "state") ? jstr(g, "state") : "unknown");
    cJSON_AddItemToObject(
        o, "request",
        cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(g, "request"), 1));
    cJSON_AddItemToObject(
        o, "via",
        cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(g, "via"), 1));
    int64_t t0 = -1, t1 = -1;
    const cJSON *e;
    cJSON_ArrayForEach (e, c.entries) {
        const char *kind = jstr(e, "kind");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "body");
        long long seq =
            (long long)cJSON_GetObjectItemCaseSensitive(e, "seq")->valuedouble;
        long long ts =
            (long long)cJSON_GetObjectItemCaseSensitive(e, "ts")->valuedouble;
        if (t0 < 0)
            t0 = ts;
        t1 = ts;
        if (!kind)
            continue;
        if (!strcmp(kind, "request")) {
            if (jstr(b, "session"))
                cJSON_AddStringToObject(o, "session", jstr(b, "session"));
        } else if (!strcmp(kind, "route")) {
            cJSON *r = cJSON_AddObjectToObject(o, "route");
            cJSON_AddItemToObject(
                r, "lane",
                cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(b, "lane"),
                                1));
            cJSON_AddItemToObject(
                r, "by",
                cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(b, "by"), 1));
            fo_json_add_int(r, "seq", seq);
        } else if (!strcmp(kind, "plan")) {
            cJSON *p = cJSON_AddObjectToObject(o, "plan");
            cJSON_AddItemToObject(
                p, "waves",
                cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(b, "waves"),
                                1));
            fo_json_add_int(p, "seq", seq);
            const cJSON *t;
            cJSON_ArrayForEach (t,
                                cJSON_GetObjectItemCaseSensitive(b, "tasks")) {
                cJSON *x = cJSON_CreateObject();
                cJSON_AddItemToArray(tasks, x);
                cJSON_AddItemToObject(
                    x, "id",
                    cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t, "id"),
                                    1));
                cJSON_AddItemToObject(
                    x, "agent",
                    cJSON_Duplicate(
                        cJSON_GetObjectItemCaseSensitive(t, "agent"), 1));
                cJSON_AddItemToObject(
                    x, "instruction",
                    cJSON_Duplicate(
                        cJSON_GetObjectItemCaseSensitive(t, "instruction"), 1));
                cJSON_AddStringToObject(x, "state", "pending");
            }
        } else if (!strcmp(kind, "task") || !strcmp(kind, "result") ||
                   !strcmp(kind, "verdict") || !strcmp(kind, "refusal") ||
                   !strcmp(kind, "skip") || !strcmp(kind, "tier_escalation")) {
            cJSON *x = find_task(tasks, jstr(b, "id"));
            if (!x)
                continue;
            cJSON *step = cJSON_CreateObject();
            fo_json_add_int(step, "seq", seq);
            fo_json_add_int(step, "ts", ts);
            cJSON_AddItemToObject(step, "body", cJSON_Duplicate(b, 1));
            cJSON_DeleteItemFromObjectCaseSensitive(x, kind);
            cJSON_AddItemToObject(x, kind, step);
            cJSON_DeleteItemFromObjectCaseSensitive(x, "state");
            const cJSON *pass = cJSON_GetObjectItemCaseSensitive(b, "pass");
            cJSON_AddStringToObject(
                x, "state",
                !strcmp(kind, "task")              ? "running"
                : !strcmp(kind, "result")          ? "judging"
                : !strcmp(kind, "refusal")         ? "refused"
                : !strcmp(kind, "skip")            ? "skipped"
                : !strcmp(kind, "tier_escalation") ? "escalated"
                : cJSON_IsTrue(pass)               ? "passed"
                : jstr(b, "by") && !strcmp(jstr(b, "by"), "unjudged")
                    ? "unjudged"
                    : "failed");
        } else if (!strncmp(kind, "gate_", 5)) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddItemToArray(gates, x);
            cJSON_AddStringToObject(x, "kind", kind);
            fo_json_add_int(x, "seq", seq);
            cJSON_AddItemToObject(x, "body", cJSON_Duplicate(b, 1));
        } else if (!strcmp(kind, "budget")) {
            cJSON_AddItemToObject(o, "budget", cJSON_Duplicate(b, 1));
        } else if (!strcmp(kind, "answer")) {
            cJSON *a = cJSON_AddObjectToObject(o, "answer");
            cJSON_AddItemToObject(
                a, "text",
                cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(b, "answer"),
                                1));
            fo_json_add_int(a, "seq", seq);
        }
    }
    fo_json_add_int(o, "started_ts", t0);
    fo_json_add_int(o, "last_ts", t1);
    fo_json_add_int(o, "duration_ms", t0 >= 0 ? (t1 - t0) / 1000 : 0);
    fo_json_add_int(o, "entries", cJSON_GetArraySize(c.entries));
    if (!rc && orch_run_steps(c.entries, cJSON_AddArrayToObject(o, "steps")))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc && orch && show_fold(orch, l, run, o) != FO_OK)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    cJSON_Delete(c.entries);
    cJSON_Delete(g);
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}
