/* tlog: the public log and its witnessing (see tlog.h). The thread half
 * (publish, proofs, cosignatures, the witness's answers) first, then the
 * loop half (serving, submissions). */
#include "daemon/tlog.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "daemon/httpc.h"
#include "daemon/tlog_witness.h"
#include "ledger/cosig.h"
#include "ledger/fo_file.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "ledger/note.h"
#include "ledger/proof.h"
#include "ledger/tiles.h"
#include "ledger/witness.h"

#define POLL_MS 1000     /* the thread looks for a checkpoint this often */
#define CACHE_SLOTS 1024 /* full tiles kept in memory (~9 MiB at most) */
#define TRIES_409 3      /* resubmissions after a 409, per checkpoint */
#define BACKOFF_MAX_MS 60000
#define TIMEOUT_DEFAULT_MS 10000

enum job_kind { J_WITNESS_ADD, J_BODY, J_COSIGN };

struct wclient;

struct job {
    enum job_kind kind;
    struct job *next;
    /* J_WITNESS_ADD: the request and its answer */
    char *in;
    size_t in_len;
    daemon_tlog_reply_fn done;
    void *arg;
    int status;
    const char *ctype;
    char *out;
    size_t out_len;
    /* J_BODY, J_COSIGN: a submission to witness w */
    struct wclient *w;
    uint64_t old, size;
    char *note; /* the checkpoint submitted */
    int rc;
    char log[600]; /* a line for the daemon's log, or "" */
};

/* The longest witness reply read, and written. */
#define TLOG_BODY_MAX (64 * 1024)

struct wclient {
    struct daemon_tlog *t;
    char *url;
    char *vkey;
    struct cosig_verifier *v;
    uint64_t known;    /* its size as far as we know (0: ask) */
    uint64_t cosigned; /* the largest size it cosigned for us */
    int busy, tries;
    int backoff_ms;
    struct event *retry;
    struct httpc_url hurl; /* url, its path that of add-checkpoint */
    struct httpc_req *http;
    uint64_t sent_size; /* the checkpoint in flight */
    char *sent_note;
    uint64_t ok, failed; /* metrics */
};

struct cache_slot {
    char path[TILE_PATH_MAX];
    char *data;
    size_t len;
};

struct daemon_tlog {
    struct daemon_tlog_config cfg;
    char dir[FO_DIR_MAX + 1];
    char tdir[FO_DIR_MAX + 16]; /* DIR/tlog */
    /* the thread's */
    pthread_t thread;
    int started;
    struct ledger *ledger;
    struct tlog_witness *witness;
    struct httpc_tls *tls; /* the loop's, for https witnesses */
    uint64_t tiles_size;   /* tiles written up to this size */
    uint64_t pruned[8];    /* partial tiles of full ones removed below */
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *jobs, *jobs_tail;
    struct job *done, *done_tail;
    int kicked, stopping;
    int published;        /* a checkpoint was published since the loop looked */
    struct fo_buf served; /* the checkpoint with its cosignatures */
    uint64_t pub_size;
    char *pub_note; /* the log's own note of pub_size (for submissions) */
    /* the loop's */
    struct event *done_ev;
    uint64_t loop_size;
    char *loop_note;
    struct wclient *wc;
    size_t nwc;
    struct cache_slot *cache;
    uint64_t tiles_served, cache_hits, witness_answers, forks;
};

static void tlogf(struct daemon_tlog *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tlogf(struct daemon_tlog *t, const char *fmt, ...)
{
    if (!t->cfg.log)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    t->cfg.log(t->cfg.log_hook, "%s", line);
}

static void job_free(struct job *j)
{
    if (!j)
        return;
    free(j->in);
    free(j->out);
    free(j->note);
    free(j);
}

/* ---- configuration ---------------------------------------------------- */

/* A witness's URL, "http(s)://HOST[:PORT][/PREFIX]" (no query): checked,
 * and when out is not NULL split with the path of PREFIX/add-checkpoint. */
static int witness_url(const char *url, struct httpc_url *out,
                       struct fo_err *err)
{
    struct httpc_url u = {0};
    int rc = httpc_url_parse(url, &u, err);
    if (!rc && strchr(u.path, '?'))
        rc = fo_err_set(err, FO_E_INVALID, "a query is not taken");
    if (!rc && out) {
        struct fo_buf p;
        fo_buf_init(&p, HTTPC_URL_MAX + 32);
        size_t n = strlen(u.path);
        while (n > 0 && u.path[n - 1] == '/')
            n--;
        if (fo_buf_append(&p, u.path, n) ||
            fo_buf_puts(&p, "/add-checkpoint")) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        } else {
            free(u.path);
            u.path = fo_buf_detach(&p, NULL);
            rc = u.path ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
        }
        fo_buf_release(&p);
    }
    if (rc == FO_E_INVALID)
        fo_err_prefix(err, "url \"%s\"", url);
    if (!rc && out)
        *out = u;
    else
        httpc_url_release(&u);
    return rc;
}

int daemon_tlog_config_check(const cJSON *witnesses, const cJSON *witness_of,
                             struct fo_err *err)
{
    if (witness_of) {
        int rc = tlog_witness_config_check(witness_of, err);
        if (rc)
            return rc;
    }
    if (!witnesses)
        return FO_OK;
    if (!cJSON_IsArray(witnesses) || cJSON_GetArraySize(witnesses) < 1 ||
        cJSON_GetArraySize(witnesses) > TLOG_WITNESSES_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "witnesses: an array of 1-%d {\"url\", \"vkey\"}",
                          TLOG_WITNESSES_MAX);
    int i = 0;
    const cJSON *w;
    cJSON_ArrayForEach (w, witnesses) {
        static const char *const keys[] = {"url", "vkey"};
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(w, "url");
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(w, "vkey");
        struct cosig_verifier *v = NULL;
        int rc =
            !cJSON_IsObject(w) || !cJSON_IsString(u) || !cJSON_IsString(k)
                ? fo_err_set(err, FO_E_INVALID, "an object {\"url\", \"vkey\"}")
                : fo_json_only_keys(w, keys, 2, err);
        if (!rc)
            rc = witness_url(u->valuestring, NULL, err);
        if (!rc)
            rc = cosig_verifier_parse(k->valuestring, strlen(k->valuestring),
                                      &v, err);
        cosig_verifier_free(v);
        const cJSON *o;
        int j = 0;
        const cJSON *all = rc ? NULL : witnesses;
        cJSON_ArrayForEach (o, all) {
            const cJSON *ok = cJSON_GetObjectItemCaseSensitive(o, "vkey");
            if (j++ < i && cJSON_IsString(ok) &&
                !strcmp(ok->valuestring, k->valuestring))
                rc = fo_err_set(err, FO_E_INVALID, "the same key twice");
        }
        if (rc) {
            fo_err_prefix(err, "witnesses[%d]", i);
            return rc;
        }
        i++;
    }
    return FO_OK;
}

/* ---- the thread: publishing -------------------------------------------- */

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_DP)
        rmdir(p);
    else
        unlink(p);
    return 0;
}

/* Partial tiles whose full tile is there: the spec lets them go. */
static void prune(struct daemon_tlog *t, uint64_t size)
{
    for (int level = 0; level < 8; level++) {
        uint64_t full = (size >> (TILE_HEIGHT * (unsigned)level)) / TILE_WIDTH;
        for (uint64_t n = t->pruned[level]; n < full; n++) {
            for (int e = 0; e < (level == 0 ? 2 : 1); e++) {
                char rel[TILE_PATH_MAX], path[4096];
                if (tile_path(e ? TILE_LEVEL_ENTRIES : level, n, 0, rel,
                              NULL) != FO_OK)
                    continue;
                snprintf(path, sizeof(path), "%s/%s.p", t->tdir, rel);
                nftw(path, rm_one, 8, FTW_DEPTH | FTW_PHYS);
            }
        }
        t->pruned[level] = full;
    }
}

/* DIR/tlog left by an earlier run must be this ledger's history: else it
 * is moved aside (DIR/tlog.stale-<time>) and written again. */
static void check_dir(struct daemon_tlog *t)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/checkpoint", t->tdir);
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    FILE *f = fopen(path, "rb");
    char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *blank = strstr(buf, "\n\n");
    struct note_checkpoint cp;
    struct fo_err err;
    int ok = blank &&
             note_checkpoint_parse(buf, (size_t)(blank - buf) + 1, &cp, &err) ==
                 FO_OK &&
             !strcmp(cp.origin, ledger_origin(t->ledger));
    uint8_t root[32];
    ok = ok && ledger_root(t->ledger, (int64_t)cp.size, root, &err) == FO_OK &&
         !memcmp(root, cp.root, 32);
    if (ok)
        return;
    char aside[4096 + 32];
    snprintf(aside, sizeof(aside), "%s.stale-%lld", t->tdir,
             (long long)time(NULL));
    if (rename(t->tdir, aside) == 0)
        tlogf(t,
              "tlog: %s held the tiles of another history; moved to %s, "
              "written again",
              t->tdir, aside);
    else
        tlogf(t, "tlog: %s: cannot move aside: %s", t->tdir, strerror(errno));
}

static void push_done(struct daemon_tlog *t, struct job *j)
{
    pthread_mutex_lock(&t->mu);
    if (j) {
        j->next = NULL;
        if (t->done_tail)
            t->done_tail->next = j;
        else
            t->done = j;
        t->done_tail = j;
    }
    event_active(t->done_ev, 0, 0);
    pthread_mutex_unlock(&t->mu);
}

/* Writes what the latest signed checkpoint needs and serves it. force:
 * serve it again even at the same size (new cosignatures). */
static void publish(struct daemon_tlog *t, int force)
{
    struct ledger_checkpoint cp = {0};
    struct fo_err err;
    int rc = ledger_checkpoint_latest(t->ledger, &cp, &err);
    if (rc) {
        if (rc != FO_E_NOT_FOUND)
            tlogf(t, "tlog: checkpoint: %s", err.msg);
        return;
    }
    uint64_t size = (uint64_t)cp.size;
    if (size <= t->pub_size && t->pub_note && !force) {
        ledger_checkpoint_release(&cp);
        return;
    }
    struct fo_buf note;
    fo_buf_init(&note, NOTE_MAX_LEN * 2);
    if (size > t->tiles_size || !t->pub_note) {
        struct tiles_stats st = {0};
        rc = ledger_tiles_update(t->ledger, t->tdir, size, &st, &err);
        if (rc) {
            tlogf(t, "tlog: tiles of size %llu: %s", (unsigned long long)size,
                  err.msg);
            goto out;
        }
        t->tiles_size = size;
        prune(t, size);
    }
    rc = ledger_checkpoint_cosigned(t->ledger, cp.size, &note, &err);
    if (!rc)
        rc = tiles_put_file(t->tdir, "checkpoint", note.data, note.len, &err);
    if (rc) {
        tlogf(t, "tlog: checkpoint %llu: %s", (unsigned long long)size,
              err.msg);
        goto out;
    }
    pthread_mutex_lock(&t->mu);
    fo_buf_reset(&t->served);
    if (fo_buf_append(&t->served, note.data, note.len) == FO_OK) {
        free(t->pub_note);
        t->pub_note = cp.note;
        cp.note = NULL;
        t->pub_size = size;
        t->published = 1;
    }
    pthread_mutex_unlock(&t->mu);
    push_done(t, NULL);
out:
    fo_buf_release(&note);
    ledger_checkpoint_release(&cp);
}

/* ---- the thread: jobs ------------------------------------------------- */

/* The add-checkpoint body for witness j->w: the old size, the proof from
 * it, the checkpoint. */
static void job_body(struct daemon_tlog *t, struct job *j)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, NOTE_MAX_LEN * 2);
    int rc = fo_buf_printf(&b, "old %llu\n", (unsigned long long)j->old);
    if (!rc && j->old > 0 && j->old < j->size) {
        struct ledger_consistency p;
        rc = ledger_prove_consistency(t->ledger, (int64_t)j->old,
                                      (int64_t)j->size, &p, &err);
        for (size_t i = 0; !rc && i < p.path_len; i++) {
            rc = note_b64_encode(&b, p.path[i], 32);
            if (!rc)
                rc = fo_buf_putc(&b, '\n');
        }
        if (rc && !j->log[0])
            snprintf(j->log, sizeof(j->log),
                     "tlog: consistency proof %llu..%llu: %s",
                     (unsigned long long)j->old, (unsigned long long)j->size,
                     err.msg);
    }
    if (!rc)
        rc = fo_buf_putc(&b, '\n');
    if (!rc)
        rc = fo_buf_puts(&b, j->note);
    j->rc = rc;
    if (!rc)
        j->out = fo_buf_detach(&b, &j->out_len);
    fo_buf_release(&b);
    if (!rc && !j->out)
        j->rc = FO_E_NOMEM;
}

/* Keeps the cosignature lines of j->out that are j->w's and verify, on
 * the checkpoint j->note, then serves it again. */
static void job_cosign(struct daemon_tlog *t, struct job *j)
{
    struct fo_buf b;
    struct fo_err err;
    struct cosig_lines cl;
    fo_buf_init(&b, NOTE_MAX_LEN * 2);
    j->rc = FO_E_VERIFY;
    if (cosig_split(j->note, strlen(j->note), &cl, &err) != FO_OK ||
        fo_buf_puts(&b, j->note) != FO_OK) {
        snprintf(j->log, sizeof(j->log), "tlog: checkpoint: %s", err.msg);
        goto out;
    }
    size_t kept = 0;
    for (char *p = j->out, *nl; p && (nl = strchr(p, '\n')); p = nl + 1) {
        uint64_t ts = 0;
        if (cosig_verify_line(j->w->v, j->note, cl.text_len, p,
                              (size_t)(nl - p), &ts, &err) != FO_OK)
            continue; /* another key's, or not over this checkpoint */
        if (fo_buf_append(&b, p, (size_t)(nl - p) + 1) == FO_OK)
            kept++;
    }
    if (!kept) {
        snprintf(j->log, sizeof(j->log),
                 "tlog: witness %s answered 200 without a valid cosignature "
                 "of checkpoint %llu",
                 j->w->url, (unsigned long long)j->size);
        goto out;
    }
    cJSON *res = NULL;
    j->rc = ledger_cosign(t->ledger, b.data, b.len, &res, &err);
    cJSON_Delete(res);
    if (j->rc)
        snprintf(j->log, sizeof(j->log), "tlog: cosignature of %s: %s",
                 j->w->url, err.msg);
    else
        publish(t, 1);
out:
    fo_buf_release(&b);
}

static void job_witness(struct daemon_tlog *t, struct job *j)
{
    struct tlog_witness_reply r;
    fo_buf_init(&r.body, TLOG_BODY_MAX);
    tlog_witness_add(t->witness, j->in, j->in_len, (uint64_t)time(NULL), &r);
    j->status = r.status;
    j->ctype = r.ctype;
    j->out = fo_buf_detach(&r.body, &j->out_len);
    fo_buf_release(&r.body);
    if (r.log[0])
        snprintf(j->log, sizeof(j->log), "%s", r.log);
    if (r.fork)
        j->rc = 1; /* counted on the loop */
}

static void *thread_main(void *arg)
{
    struct daemon_tlog *t = arg;
    /* opened by daemon_tlog_create; only this thread uses it from here */
    ledger_set_owner(t->ledger);
    check_dir(t);
    publish(t, 0);
    pthread_mutex_lock(&t->mu);
    while (!t->stopping || t->jobs) {
        if (!t->jobs && !t->kicked) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += POLL_MS / 1000;
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        }
        struct job *j = t->jobs;
        t->jobs = t->jobs_tail = NULL;
        t->kicked = 0;
        int stopping = t->stopping;
        pthread_mutex_unlock(&t->mu);
        while (j) {
            struct job *next = j->next;
            if (j->kind == J_WITNESS_ADD)
                job_witness(t, j);
            else if (stopping)
                j->rc = FO_E_DRAINING;
            else if (j->kind == J_BODY)
                job_body(t, j);
            else
                job_cosign(t, j);
            push_done(t, j);
            j = next;
        }
        if (!stopping)
            publish(t, 0);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void queue_job(struct daemon_tlog *t, struct job *j)
{
    pthread_mutex_lock(&t->mu);
    j->next = NULL;
    if (t->jobs_tail)
        t->jobs_tail->next = j;
    else
        t->jobs = j;
    t->jobs_tail = j;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void daemon_tlog_kick(struct daemon_tlog *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->kicked = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* ---- the loop: submissions to witnesses --------------------------------- */

static void wc_next(struct wclient *w);

static void wc_later(struct wclient *w)
{
    w->backoff_ms = w->backoff_ms ? w->backoff_ms * 2 : 1000;
    if (w->backoff_ms > BACKOFF_MAX_MS)
        w->backoff_ms = BACKOFF_MAX_MS;
    struct timeval tv = {w->backoff_ms / 1000, (w->backoff_ms % 1000) * 1000};
    evtimer_add(w->retry, &tv);
}

static void wc_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wclient *w = arg;
    w->tries = 0;
    wc_next(w);
}

/* Loop thread: the witness answered (or did not). */
static void wc_reply(void *arg, int status, const char *body, size_t len,
                     const char *why)
{
    struct wclient *w = arg;
    struct daemon_tlog *t = w->t;
    w->http = NULL;
    if (status == 200) {
        struct job *j = calloc(1, sizeof(*j));
        if (j && (j->out = strndup(body, len)) != NULL) {
            j->kind = J_COSIGN;
            j->w = w;
            j->size = w->sent_size;
            j->note = w->sent_note;
            w->sent_note = NULL;
            queue_job(t, j);
            return; /* still busy, until it is stored */
        }
        job_free(j);
        w->busy = 0;
        wc_later(w);
        return;
    }
    w->busy = 0;
    if (status == 409) {
        char *end = NULL;
        errno = 0;
        unsigned long long n = strtoull(body, &end, 10);
        if (!errno && end != body && *end == '\n' && end + 1 == body + len) {
            w->known = n;
            if (++w->tries <= TRIES_409) {
                wc_next(w);
                return;
            }
        }
    }
    w->failed++;
    char shown[200];
    size_t n = len < sizeof(shown) - 1 ? len : sizeof(shown) - 1;
    memcpy(shown, body, n);
    shown[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (shown[i] == '\n' || shown[i] == '\r')
            shown[i] = ' ';
    if (status < 0)
        tlogf(t, "tlog: witness %s: checkpoint %llu: %s", w->url,
              (unsigned long long)w->sent_size, why);
    else
        tlogf(t, "tlog: witness %s refused checkpoint %llu: %d %s", w->url,
              (unsigned long long)w->sent_size, status, shown);
    wc_later(w);
}

/* Loop thread: the submission's request ended. */
static void wc_done(void *arg, struct httpc_result *res)
{
    struct wclient *w = arg;
    w->http = NULL; /* httpc frees it when this returns */
    size_t len = evbuffer_get_length(res->body);
    char *body = malloc(len + 1);
    int status = res->end == HTTPC_END_OK ? res->status : -1;
    if (!body) {
        len = 0;
        status = -1;
    } else {
        evbuffer_remove(res->body, body, len);
        body[len] = '\0';
    }
    wc_reply(w, status, body ? body : "", len,
             body ? res->err.msg : "out of memory");
    free(body);
}

/* Submits the latest checkpoint to w when it has not cosigned it. */
static void wc_next(struct wclient *w)
{
    struct daemon_tlog *t = w->t;
    if (w->busy || t->stopping || !t->loop_note ||
        w->cosigned >= t->loop_size || w->known > t->loop_size)
        return;
    struct job *j = calloc(1, sizeof(*j));
    if (!j || !(j->note = strdup(t->loop_note))) {
        job_free(j);
        wc_later(w);
        return;
    }
    j->kind = J_BODY;
    j->w = w;
    j->old = w->known;
    j->size = t->loop_size;
    w->busy = 1;
    evtimer_del(w->retry);
    queue_job(t, j);
}

/* Loop thread: a job of the thread is done. */
static void job_landed(struct daemon_tlog *t, struct job *j)
{
    struct wclient *w = j->w;
    struct fo_err err;
    if (j->log[0])
        tlogf(t, "%s", j->log);
    if (j->kind == J_WITNESS_ADD) {
        t->witness_answers++;
        t->forks += j->rc == 1;
        char *out = j->out;
        j->out = NULL;
        j->done(j->arg, j->status, j->ctype, out, j->out_len);
    } else if (j->kind == J_BODY && (j->rc || t->stopping)) {
        w->busy = 0;
        if (!t->stopping)
            wc_later(w);
    } else if (j->kind == J_BODY) {
        free(w->sent_note);
        w->sent_note = j->note;
        j->note = NULL;
        w->sent_size = j->size;
        static const struct httpc_header ct[] = {
            {"Content-Type", "text/plain; charset=utf-8"}};
        struct httpc_spec spec = {.method = HTTPC_POST,
                                  .url = &w->hurl,
                                  .headers = ct,
                                  .n_headers = 1,
                                  .body = j->out,
                                  .body_len = j->out_len,
                                  .tls = t->tls,
                                  .dns = t->cfg.dns,
                                  .timeout_ms = t->cfg.timeout_ms,
                                  .body_max = TLOG_BODY_MAX,
                                  .done = wc_done,
                                  .arg = w};
        if (httpc_req_start(t->cfg.base, &spec, &w->http, &err) != FO_OK) {
            tlogf(t, "tlog: witness %s: %s", w->url, err.msg);
            w->busy = 0;
            wc_later(w);
        }
    } else { /* J_COSIGN */
        w->busy = 0;
        if (j->rc == FO_OK) {
            w->ok++;
            w->known = w->cosigned = j->size;
            w->backoff_ms = 0;
            w->tries = 0;
            wc_next(w); /* a newer one may be there */
        } else if (!t->stopping) {
            w->failed++;
            wc_later(w);
        }
    }
    job_free(j);
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct daemon_tlog *t = arg;
    pthread_mutex_lock(&t->mu);
    struct job *j = t->done;
    t->done = t->done_tail = NULL;
    int published = t->published;
    t->published = 0;
    char *note = published && t->pub_note ? strdup(t->pub_note) : NULL;
    uint64_t size = t->pub_size;
    pthread_mutex_unlock(&t->mu);
    while (j) {
        struct job *next = j->next;
        job_landed(t, j);
        j = next;
    }
    if (note) {
        free(t->loop_note);
        t->loop_note = note;
        t->loop_size = size;
        for (size_t i = 0; i < t->nwc; i++) {
            t->wc[i].tries = 0;
            wc_next(&t->wc[i]);
        }
    }
}

/* ---- lifecycle -------------------------------------------------------- */

static int witnesses_open(struct daemon_tlog *t, struct fo_err *err)
{
    const cJSON *w;
    int n = t->cfg.witnesses ? cJSON_GetArraySize(t->cfg.witnesses) : 0;
    if (n > 0 && !(t->wc = calloc((size_t)n, sizeof(*t->wc))))
        return fo_err_set(err, FO_E_NOMEM, NULL);
    cJSON_ArrayForEach (w, t->cfg.witnesses) {
        struct wclient *c = &t->wc[t->nwc];
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(w, "url");
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(w, "vkey");
        c->t = t;
        c->url = strdup(u->valuestring);
        c->vkey = strdup(k->valuestring);
        c->retry = evtimer_new(t->cfg.base, wc_retry, c);
        if (!c->url || !c->vkey || !c->retry)
            return fo_err_set(err, FO_E_NOMEM, NULL);
        int urc = witness_url(c->url, &c->hurl, err);
        if (!urc && c->hurl.tls && !t->tls)
            urc = httpc_tls_create(NULL, &t->tls, err);
        if (urc)
            return urc;
        t->nwc++;
        int rc = cosig_verifier_parse(c->vkey, strlen(c->vkey), &c->v, err);
        /* its cosignatures are accepted by the ledger (DIR/witnesses) */
        if (!rc)
            rc = ledger_witness_add(t->ledger, c->vkey, strlen(c->vkey), err);
        if (rc && rc != FO_E_EXISTS)
            return rc;
    }
    return FO_OK;
}

int daemon_tlog_create(const struct daemon_tlog_config *cfg,
                       struct daemon_tlog **out, struct fo_err *err)
{
    int rc = daemon_tlog_config_check(cfg->witnesses, cfg->witness_of, err);
    if (rc)
        return rc;
    struct daemon_tlog *t = calloc(1, sizeof(*t));
    if (!t)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    t->cfg = *cfg;
    if (!t->cfg.timeout_ms)
        t->cfg.timeout_ms = TIMEOUT_DEFAULT_MS;
    snprintf(t->dir, sizeof(t->dir), "%s", cfg->dir);
    snprintf(t->tdir, sizeof(t->tdir), "%s/%s", cfg->dir, TLOG_DIR);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    fo_buf_init(&t->served, NOTE_MAX_LEN * 2);
    t->done_ev = event_new(cfg->base, -1, 0, on_done, t);
    t->cache = calloc(CACHE_SLOTS, sizeof(*t->cache));
    if (!t->done_ev || !t->cache) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto fail;
    }
    rc = ledger_open(cfg->dir, 0, NULL, &t->ledger, err);
    if (!rc)
        rc = witnesses_open(t, err);
    if (!rc && cfg->witness_of) {
        char name[NOTE_NAME_MAX + 1];
        if (cfg->witness_name)
            snprintf(name, sizeof(name), "%s", cfg->witness_name);
        else
            snprintf(name, sizeof(name), "%s/witness",
                     ledger_origin(t->ledger));
        rc = tlog_witness_open(cfg->dir, cfg->witness_of, name, &t->witness,
                               err);
        if (!rc)
            tlogf(t, "witness of %d log%s; its key: %s",
                  cJSON_GetArraySize(cfg->witness_of),
                  cJSON_GetArraySize(cfg->witness_of) == 1 ? "" : "s",
                  tlog_witness_vkey(t->witness));
    }
    if (rc)
        goto fail;
    t->cfg.witnesses = t->cfg.witness_of = NULL; /* read: not kept */
    if (pthread_create(&t->thread, NULL, thread_main, t) != 0) {
        rc = fo_err_set(err, FO_E_INTERNAL, "cannot start the tlog thread");
        goto fail;
    }
    t->started = 1;
    *out = t;
    return FO_OK;
fail:
    daemon_tlog_free(t);
    return rc;
}

void daemon_tlog_free(struct daemon_tlog *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->started)
        pthread_join(t->thread, NULL);
    for (size_t i = 0; i < t->nwc; i++) {
        struct wclient *w = &t->wc[i];
        httpc_req_cancel(w->http);
        httpc_url_release(&w->hurl);
        if (w->retry)
            event_free(w->retry);
        cosig_verifier_free(w->v);
        free(w->url);
        free(w->vkey);
        free(w->sent_note);
    }
    free(t->wc);
    httpc_tls_free(t->tls);
    /* what the thread finished: the witness's answers still go out */
    struct job *j = t->done;
    t->done = NULL;
    while (j) {
        struct job *next = j->next;
        if (j->kind == J_WITNESS_ADD) {
            char *o = j->out;
            j->out = NULL;
            j->done(j->arg, j->status, j->ctype, o, j->out_len);
        }
        job_free(j);
        j = next;
    }
    if (t->done_ev)
        event_free(t->done_ev);
    for (size_t i = 0; t->cache && i < CACHE_SLOTS; i++)
        free(t->cache[i].data);
    free(t->cache);
    tlog_witness_free(t->witness);
    ledger_close(t->ledger);
    fo_buf_release(&t->served);
    free(t->pub_note);
    free(t->loop_note);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ---- the loop: serving --------------------------------------------------- */

int daemon_tlog_open(const struct daemon_tlog *t)
{
    return t->cfg.open;
}

int daemon_tlog_hashes_only(const struct daemon_tlog *t)
{
    return t->cfg.hashes_only;
}

int daemon_tlog_is_witness(const struct daemon_tlog *t)
{
    return t->witness != NULL;
}

int daemon_tlog_checkpoint(struct daemon_tlog *t, struct fo_buf *out,
                           struct fo_err *err)
{
    pthread_mutex_lock(&t->mu);
    int rc = t->served.len ? fo_buf_append(out, t->served.data, t->served.len)
                           : fo_err_set(err, FO_E_NOT_FOUND,
                                        "no checkpoint published yet");
    pthread_mutex_unlock(&t->mu);
    if (rc == FO_E_NOMEM || rc == FO_E_TOO_LARGE)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    return rc;
}

/* Parses a canonical C2SP tile path: 1 with level, n and w (0: full). */
static int tile_parse(const char *rel, int *level, uint64_t *n, unsigned *w)
{
    const char *p = rel;
    if (strncmp(p, "tile/", 5) != 0)
        return 0;
    p += 5;
    if (!strncmp(p, "entries/", 8)) {
        *level = TILE_LEVEL_ENTRIES;
        p += 8;
    } else {
        char *end;
        errno = 0;
        long l = strtol(p, &end, 10);
        if (errno || end == p || *end != '/' || l < 0 || l > 63)
            return 0;
        *level = (int)l;
        p = end + 1;
    }
    uint64_t v = 0;
    for (;;) {
        int x = *p == 'x';
        p += x;
        for (int i = 0; i < 3; i++, p++) {
            if (*p < '0' || *p > '9' || v > UINT64_MAX / 10 - 10)
                return 0;
            v = v * 10 + (uint64_t)(*p - '0');
        }
        if (!x)
            break;
        if (*p++ != '/')
            return 0;
    }
    *n = v;
    *w = 0;
    if (*p) {
        char *end;
        if (strncmp(p, ".p/", 3) != 0)
            return 0;
        errno = 0;
        unsigned long ww = strtoul(p + 3, &end, 10);
        if (errno || *end || ww < 1 || ww > 255)
            return 0;
        *w = (unsigned)ww;
    }
    char canon[TILE_PATH_MAX]; /* leading zeros and the like: not ours */
    return tile_path(*level, *n, *w, canon, NULL) == FO_OK &&
           strcmp(canon, rel) == 0;
}

static size_t slot_of(const char *rel)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *p = rel; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return (size_t)(h % CACHE_SLOTS);
}

int daemon_tlog_tile(struct daemon_tlog *t, const char *rel, struct fo_buf *out,
                     struct fo_err *err)
{
    int level;
    uint64_t n;
    unsigned w;
    if (!tile_parse(rel, &level, &n, &w))
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "not a tile path (tile/<L>/<N>[.p/<W>] or "
                          "tile/entries/<N>[.p/<W>], N in x-prefixed groups "
                          "of 3 digits)");
    if (level == TILE_LEVEL_ENTRIES && t->cfg.hashes_only)
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "entry bundles are withheld here (tlog_hashes_only): "
                          "the tiles are served, the entry hashes are not");
    t->tiles_served++;
    struct cache_slot *s = &t->cache[slot_of(rel)];
    if (w == 0 && s->data && !strcmp(s->path, rel)) {
        t->cache_hits++;
        return fo_buf_append(out, s->data, s->len) ? FO_E_NOMEM : FO_OK;
    }
    size_t want =
        (size_t)(w ? w : TILE_WIDTH) *
        (level == TILE_LEVEL_ENTRIES ? TILE_BUNDLE_ENTRY_LEN : TILE_HASH_LEN);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", t->tdir, rel);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return fo_err_set(err, FO_E_NOT_FOUND, "%s: not published", rel);
    struct stat st;
    char buf[TILE_WIDTH * TILE_BUNDLE_ENTRY_LEN];
    ssize_t got = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (size_t)st.st_size == want)
        got = pread(fd, buf, want, 0);
    close(fd);
    if (got != (ssize_t)want)
        return fo_err_set(err, FO_E_NOT_FOUND, "%s: not published", rel);
    if (w == 0) { /* a full tile never changes: kept in memory */
        char *copy = malloc(want);
        if (copy) {
            memcpy(copy, buf, want);
            free(s->data);
            s->data = copy;
            s->len = want;
            snprintf(s->path, sizeof(s->path), "%s", rel);
        }
    }
    return fo_buf_append(out, buf, want) ? FO_E_NOMEM : FO_OK;
}

int daemon_tlog_witness_submit(struct daemon_tlog *t, const char *body,
                               size_t len, daemon_tlog_reply_fn done, void *arg,
                               struct fo_err *err)
{
    if (!t->witness)
        return fo_err_set(err, FO_E_NOT_FOUND, "this daemon witnesses no log");
    struct job *j = calloc(1, sizeof(*j));
    if (!j || !(j->in = malloc(len ? len : 1))) {
        free(j);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    memcpy(j->in, body, len);
    j->in_len = len;
    j->kind = J_WITNESS_ADD;
    j->done = done;
    j->arg = arg;
    queue_job(t, j);
    return FO_OK;
}

int daemon_tlog_metrics(struct daemon_tlog *t, struct fo_buf *out)
{
    pthread_mutex_lock(&t->mu);
    uint64_t size = t->pub_size;
    pthread_mutex_unlock(&t->mu);
    int rc = fo_buf_printf(
        out,
        "# HELP forum_tlog_size The size of the checkpoint /tlog/ serves.\n"
        "# TYPE forum_tlog_size gauge\n"
        "forum_tlog_size %llu\n"
        "# HELP forum_tlog_tiles_served_total Tiles and bundles asked for.\n"
        "# TYPE forum_tlog_tiles_served_total counter\n"
        "forum_tlog_tiles_served_total %llu\n"
        "# HELP forum_tlog_tile_cache_hits_total Full tiles served from "
        "memory.\n"
        "# TYPE forum_tlog_tile_cache_hits_total counter\n"
        "forum_tlog_tile_cache_hits_total %llu\n",
        (unsigned long long)size, (unsigned long long)t->tiles_served,
        (unsigned long long)t->cache_hits);
    for (size_t i = 0; !rc && i < t->nwc; i++)
        rc = fo_buf_printf(out,
                           "forum_tlog_witness_cosigned_size{witness=\"%s\"} "
                           "%llu\n"
                           "forum_tlog_witness_failures_total{witness=\"%s\"} "
                           "%llu\n",
                           cosig_verifier_name(t->wc[i].v),
                           (unsigned long long)t->wc[i].cosigned,
                           cosig_verifier_name(t->wc[i].v),
                           (unsigned long long)t->wc[i].failed);
    if (!rc && t->witness)
        rc = fo_buf_printf(out,
                           "# HELP forum_witness_requests_total add-checkpoint "
                           "requests answered.\n"
                           "# TYPE forum_witness_requests_total counter\n"
                           "forum_witness_requests_total %llu\n"
                           "# HELP forum_witness_forks_total Checkpoints "
                           "refused as a fork.\n"
                           "# TYPE forum_witness_forks_total counter\n"
                           "forum_witness_forks_total %llu\n",
                           (unsigned long long)t->witness_answers,
                           (unsigned long long)t->forks);
    return rc;
}
