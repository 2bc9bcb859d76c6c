/* orch_reads: the engine's ledger reads, off the loop thread. A read is
 * posted from the loop, runs on an orch_work thread with the engine's
 * shared read handle (e->rl, under rl_mu: whoever holds the mutex takes
 * the handle over), and its done continues on the loop. Over PostgreSQL
 * each read is a round trip or a scan: on the loop it would stall every
 * run and every client the daemon serves. */
#include "daemon/orch_engine_int.h"

#include "ledger/fo_file.h"

#include <stdlib.h>
#include <string.h>

int oe_rl_lock(struct orch_engine *e, struct fo_err *err)
{
    pthread_mutex_lock(&e->rl_mu);
    if (e->rl) { /* the workers share it: whoever holds rl_mu owns it */
        ledger_set_owner(e->rl);
        return FO_OK;
    }
    return ledger_open(ledger_dir(e->cfg.ledger), LEDGER_OPEN_READONLY, NULL,
                       &e->rl, err);
}

void oe_rl_unlock(struct orch_engine *e)
{
    pthread_mutex_unlock(&e->rl_mu);
}

/* On a worker: the read, on the shared handle. */
static void read_work(void *arg, const atomic_int *cancel)
{
    struct oe_read *rd = arg;
    struct orch_engine *e = rd->e;
    if (atomic_load(cancel)) {
        rd->rc = fo_err_set(&rd->err, FO_E_DRAINING, "the run was stopped");
        return;
    }
    rd->rc = oe_rl_lock(e, &rd->err);
    if (!rd->rc)
        rd->rc = rd->fn(e->rl, rd, &rd->err);
    oe_rl_unlock(e);
}

static void read_done(void *arg, int cancelled)
{
    struct oe_read *rd = arg;
    struct run *r = rd->r;
    if (r) { /* off the run's list */
        struct oe_read **p = &r->reads;
        while (*p && *p != rd)
            p = &(*p)->next;
        if (*p)
            *p = rd->next;
        rd->next = NULL;
    }
    if (cancelled && !rd->rc)
        rd->rc = fo_err_set(&rd->err, FO_E_DRAINING, "the run was stopped");
    rd->done(rd);
}

int oe_read_post(struct orch_engine *e, struct run *r, struct oe_read *rd,
                 struct fo_err *err)
{
    int rc = FO_OK;
    rd->e = e;
    rd->r = r;
    if (!e->work)
        rc = orch_work_create(e->cfg.base, &e->work, err);
    if (!rc)
        rc = orch_work_post(e->work, read_work, read_done, rd, NULL, err);
    if (rc)
        return rc;
    if (r) {
        rd->next = r->reads;
        r->reads = rd;
    }
    return FO_OK;
}

void oe_read_free(struct oe_read *rd)
{
    if (!rd)
        return;
    free(rd->session);
    free(rd->request);
    free(rd->text);
    cJSON_Delete(rd->a);
    cJSON_Delete(rd->b);
    free(rd);
}

void oe_reads_drop(struct run *r)
{
    for (struct oe_read *rd = r->reads, *next; rd; rd = next) {
        next = rd->next;
        rd->r = NULL;
        rd->next = NULL;
    }
    r->reads = NULL;
    oe_read_free(r->ctx_res);
    r->ctx_res = NULL;
}

/* ---- a session turn's reads (orch_context.c) ----------------------------
 * One at a time, while the run's phase is PH_CONTEXT: posted with
 * r->busy set (the run waits, a halt or a failure waits for it), and
 * its outcome kept in r->ctx_res until the context step takes it. */

static int read_session(struct ledger *l, struct oe_read *rd,
                        struct fo_err *err)
{
    struct orch_session *s = NULL;
    int rc = orch_session_read(l, rd->session, -1, &s, err);
    if (!rc)
        rd->n = orch_session_start(s);
    orch_session_free(s);
    return rc;
}

static int read_compaction(struct ledger *l, struct oe_read *rd,
                           struct fo_err *err)
{
    return orch_session_compaction(l, rd->session, rd->request, rd->before,
                                   &rd->lim, &rd->text, &rd->a, &rd->b, err);
}

static int read_context(struct ledger *l, struct oe_read *rd,
                        struct fo_err *err)
{
    return orch_session_context(l, rd->session, rd->request, rd->before,
                                &rd->lim, &rd->text, &rd->a, err);
}

static void ctx_done(struct oe_read *rd)
{
    struct run *r = rd->r;
    if (!r) {
        oe_read_free(rd);
        return;
    }
    r->busy = 0;
    oe_read_free(r->ctx_res);
    r->ctx_res = rd;
    oe_step(r);
}

int oe_ctx_read(struct run *r, int what, struct fo_err *err)
{
    struct oe_read *rd = calloc(1, sizeof(*rd));
    if (!rd)
        return oe_nomem(err);
    rd->what = what;
    rd->fn = what == OE_RD_SESSION      ? read_session
             : what == OE_RD_COMPACTION ? read_compaction
                                        : read_context;
    rd->done = ctx_done;
    rd->before = r->id;
    rd->lim = r->lim;
    rd->gen = r->e->sessions_landed;
    rd->session = orch_strdup(r->session);
    rd->request = orch_strdup(r->request ? r->request : "");
    int rc = rd->session && rd->request ? FO_OK : oe_nomem(err);
    if (!rc)
        rc = oe_read_post(r->e, r, rd, err);
    if (rc) {
        oe_read_free(rd);
        return rc;
    }
    r->busy = 1;
    return FO_OK;
}

struct oe_read *oe_ctx_take(struct run *r, int what)
{
    struct oe_read *rd = r->ctx_res;
    if (!rd)
        return NULL;
    r->ctx_res = NULL;
    if (rd->what == what)
        return rd;
    oe_read_free(rd); /* another step's: stale */
    return NULL;
}

/* ---- the tree head a run's result names --------------------------------- */

static int read_head(struct ledger *l, struct oe_read *rd, struct fo_err *err)
{
#ifdef FORUM_TEST_SEAMS
    fo_test_hold(getenv("FORUM_TEST_HEAD_HOLD"));
#endif
    return ledger_tree_head(l, &rd->n, rd->root, err);
}

static void head_done(struct oe_read *rd)
{
    if (rd->r)
        oe_run_result(rd->r, rd->rc, rd->n, rd->root, &rd->err);
    oe_read_free(rd);
}

int oe_head_read(struct run *r, struct fo_err *err)
{
    struct oe_read *rd = calloc(1, sizeof(*rd));
    if (!rd)
        return oe_nomem(err);
    rd->fn = read_head;
    rd->done = head_done;
    int rc = oe_read_post(r->e, r, rd, err);
    if (rc)
        oe_read_free(rd);
    return rc;
}
