/* tu_exec: the executors' jobs driven to their end on a private event
 * base, for the tests of the executors (the engine drives the same jobs,
 * orch_job_start, on its own loop): a runner (jobs in flight, waited for
 * one at a time) and one job start to end. A model kind calls the model
 * client (orch_model_call) and fills a result as the other executors do. */
#include "tests/tu_exec.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/orch_model.h"
#include "ledger/ledger.h"

/* One model job (CHAT, ANTHROPIC with cfg->models): the prompt as the one
 * user message, cfg->tier picking the provider. FO_OK unless out of
 * memory (a failed call is a result with ok 0). */
static int tu_model_exec(const struct orch_exec_config *cfg, const char *prompt,
                         struct orch_result *res, struct fo_err *err)
{
    struct orch_model_reply rep;
    struct fo_err cerr;
    fo_err_clear(&cerr);
    *res = (struct orch_result){.exit_code = -1};
    struct orch_model_msg msg = {.role = "user", .content = prompt};
    int rc = FO_OK;
    int crc = cfg->models ? orch_model_call(cfg->models, cfg->kind, cfg->tier,
                                            &msg, 1, &rep, &cerr)
                          : fo_err_set(&cerr, FO_E_INVALID,
                                       "executor %s: no model configured",
                                       orch_exec_name(cfg->kind));
    if (!cfg->models)
        rep = (struct orch_model_reply){0};
    if (crc == FO_E_NOMEM) {
        rc = fo_err_set(err, crc, NULL);
        goto out;
    }
    snprintf(res->model, sizeof(res->model), "%s",
             rep.model[0] ? rep.model : (cfg->model ? cfg->model : "model"));
    res->elapsed_us = rep.elapsed_us;
    res->ok = crc == FO_OK;
    res->timed_out = crc == FO_E_TIMEOUT;
    res->exit_code = res->ok ? 0 : -1;
    if (!res->ok)
        snprintf(res->error, sizeof(res->error), "%s", cerr.msg);
    if (res->ok) {
        res->output = rep.text;
        res->output_len = rep.text_len;
        rep.text = NULL;
    } else {
        res->output = malloc(1);
        if (res->output)
            res->output[0] = '\0';
    }
    res->errout = malloc(1);
    if (!res->output || !res->errout) {
        orch_result_release(res);
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    res->errout[0] = '\0';
out:
    orch_model_reply_release(&rep);
    return rc;
}

/* ---- runners: jobs on a private base ------------------------------------ */

/* A base driven by one thread at a time: no locks, and no EVENT_NO*
 * variables choosing a backend (select would cap the descriptors). NULL
 * when out of memory. */
static struct event_base *private_base(void)
{
    struct event_config *c = event_config_new();
    struct event_base *b = NULL;
    if (c && event_config_set_flag(c, EVENT_BASE_FLAG_NOLOCK |
                                          EVENT_BASE_FLAG_IGNORE_ENV) == 0)
        b = event_base_new_with_config(c);
    if (c)
        event_config_free(c);
    return b;
}

struct runner_job { /* one job of a runner in flight */
    struct tu_runner *r;
    size_t tag;
    size_t slot; /* its index in r->flying */
    struct orch_job *job;
};

struct runner_done { /* one ended job, not yet returned by next */
    size_t tag;
    int rc;
    struct orch_result res;
    struct fo_err err;
};

struct tu_runner {
    struct orch_exec_config cfg;
    struct event_base *base;
    struct runner_job **flying;
    size_t n_flying, cap_flying;
    struct runner_done *ready; /* first in, first out */
    size_t n_ready, cap_ready;
};

int tu_runner_create(const struct orch_exec_config *cfg, struct tu_runner **out,
                     struct fo_err *err)
{
    int rc = orch_exec_config_check(cfg, 1, err);
    if (rc)
        return rc;
    struct tu_runner *r = calloc(1, sizeof(*r));
    if (!r)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    r->cfg = *cfg;
    r->base = private_base();
    if (!r->base) {
        free(r);
        return fo_err_set(err, FO_E_NOMEM, "executor: no event base");
    }
    *out = r;
    return FO_OK;
}

void tu_runner_free(struct tu_runner *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_flying; i++) {
        orch_job_cancel(r->flying[i]->job);
        free(r->flying[i]);
    }
    for (size_t i = 0; i < r->n_ready; i++)
        orch_result_release(&r->ready[i].res);
    /* the cancelled children are reaped by their events: run until none is
     * left (SIGKILLed, they go at once); on a loop error, nothing better
     * can be done than to let them go */
    (void)event_base_dispatch(r->base);
    event_base_free(r->base);
    free(r->flying);
    free(r->ready);
    free(r);
}

size_t tu_runner_active(const struct tu_runner *r)
{
    return r->n_flying + r->n_ready;
}

static void runner_job_done(void *arg, int rc, struct orch_result *res,
                            const struct fo_err *err)
{
    struct runner_job *rj = arg;
    struct tu_runner *r = rj->r;
    /* start made room for it */
    struct runner_done *d = &r->ready[r->n_ready++];
    d->tag = rj->tag;
    d->rc = rc;
    d->res = *res;
    res->output = res->errout = NULL;
    d->err = *err;
    struct runner_job *last = r->flying[--r->n_flying];
    r->flying[rj->slot] = last;
    last->slot = rj->slot;
    free(rj);
}

static int grow(void **v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return FO_OK;
    size_t n = *cap ? 2 * *cap : 8;
    while (n < need)
        n *= 2;
    void *p = realloc(*v, n * size);
    if (!p)
        return FO_E_NOMEM;
    *v = p;
    *cap = n;
    return FO_OK;
}

int tu_runner_start(struct tu_runner *r, size_t tag, const char *prompt,
                    struct fo_err *err)
{
    /* room for every job's end, so that done never allocates */
    void *ready = r->ready, *flying = r->flying;
    int rc = grow(&ready, &r->cap_ready, r->n_ready + r->n_flying + 1,
                  sizeof(*r->ready));
    r->ready = ready;
    if (!rc)
        rc = grow(&flying, &r->cap_flying, r->n_flying + 1, sizeof(*r->flying));
    r->flying = flying;
    if (rc)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (r->cfg.kind == ORCH_EXEC_CHAT || r->cfg.kind == ORCH_EXEC_ANTHROPIC) {
        /* a model job runs here: see orch_exec_config */
        struct runner_done *d = &r->ready[r->n_ready];
        *d = (struct runner_done){.tag = tag};
        rc = tu_model_exec(&r->cfg, prompt, &d->res, err);
        if (rc) {
            orch_result_release(&d->res);
            return rc;
        }
        r->n_ready++;
        return FO_OK;
    }
    struct runner_job *rj = calloc(1, sizeof(*rj));
    if (!rj)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    rj->r = r;
    rj->tag = tag;
    rc = orch_job_start(&r->cfg, r->base, prompt, runner_job_done, rj, &rj->job,
                        err);
    if (rc) {
        free(rj);
        return rc;
    }
    rj->slot = r->n_flying;
    r->flying[r->n_flying++] = rj;
    return FO_OK;
}

int tu_runner_next(struct tu_runner *r, size_t *tag, struct orch_result *res,
                   struct fo_err *err)
{
    if (r->n_ready == 0 && r->n_flying == 0)
        return fo_err_set(err, FO_E_NOT_FOUND, "executor: no job running");
    while (r->n_ready == 0) {
        int lrc = event_base_loop(r->base, EVLOOP_ONCE);
        if (lrc < 0)
            return fo_err_set(err, FO_E_IO, "executor: event loop failed");
        if (lrc > 0 && r->n_ready == 0) /* a job without events: a bug */
            return fo_err_set(err, FO_E_INTERNAL,
                              "executor: jobs in flight but no events");
    }
    struct runner_done d = r->ready[0];
    memmove(&r->ready[0], &r->ready[1], (r->n_ready - 1) * sizeof(d));
    r->n_ready--;
    *tag = d.tag;
    if (d.rc) {
        orch_result_release(&d.res);
        return fo_err_set(err, d.rc, "%s", d.err.msg);
    }
    *res = d.res;
    return FO_OK;
}

/* ---- one job, start to end ---------------------------------------------- */

struct once {
    int ended, rc;
    struct orch_result *res;
    struct fo_err *err;
};

static void once_done(void *arg, int rc, struct orch_result *res,
                      const struct fo_err *err)
{
    struct once *o = arg;
    o->ended = 1;
    o->rc = rc;
    *o->res = *res;
    res->output = res->errout = NULL;
    if (rc)
        fo_err_set(o->err, rc, "%s", err->msg);
}

int tu_exec_once(const struct orch_exec_config *cfg, const char *prompt,
                 struct orch_result *res, struct fo_err *err)
{
    int rc = orch_exec_config_check(cfg, 1, err);
    if (rc)
        return rc;
    if (cfg->kind == ORCH_EXEC_CHAT || cfg->kind == ORCH_EXEC_ANTHROPIC)
        return tu_model_exec(cfg, prompt, res, err);
    struct event_base *base = private_base();
    if (!base)
        return fo_err_set(err, FO_E_NOMEM, "executor: no event base");
    struct once st = {.res = res, .err = err};
    struct orch_job *j = NULL;
    rc = orch_job_start(cfg, base, prompt, once_done, &st, &j, err);
    if (!rc) {
        (void)event_base_dispatch(base); /* returns once the job is gone */
        if (st.ended) {
            rc = st.rc;
        } else { /* the loop failed */
            orch_job_cancel(j);
            (void)event_base_dispatch(base); /* its reaper, if it can */
            rc = fo_err_set(err, FO_E_IO, "executor: event loop failed");
        }
    }
    event_base_free(base);
    return rc;
}
