/* orch_memtools: the memory tools, remember and forget, of a session's
 * run: their reads on the engine's worker threads (orch_reads.c), their
 * entries witnessed through the committer (see struct mem_op). */
#include "daemon/orch_engine_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mem_answer(struct run *r, size_t t, int forget, const char *key,
                       int64_t fact_seq);
static void mem_landed(void *arg, struct run *r, int rc, int64_t seq,
                       const struct fo_err *err);
static void forget_redacted(void *arg, struct run *r, int rc, int64_t seq,
                            const struct fo_err *rerr);

static void mem_answer(struct run *r, size_t t, int forget, const char *key,
                       int64_t fact_seq)
{
    char out[ORCH_FACT_KEY_MAX + ORCH_SESSION_NAME_MAX + 160];
    if (forget)
        snprintf(out, sizeof(out),
                 "forgot \"%s\" of session %s (fact %lld): its text is "
                 "deleted and later turns no longer see it",
                 key, r->session, (long long)fact_seq);
    else
        snprintf(out, sizeof(out),
                 "remembered \"%s\" in session %s (fact %lld): later turns "
                 "of the session see it",
                 key, r->session, (long long)fact_seq);
    oe_tool_result(r, t, 1, out, NULL, 0);
}

static void mem_landed(void *arg, struct run *r, int rc, int64_t seq,
                       const struct fo_err *err)
{
    struct mem_op *op = arg;
    (void)err;
    if (!rc) /* else the run fails: a write of it did */
        mem_answer(r, op->t, op->fact_seq >= 0, op->key,
                   op->fact_seq >= 0 ? op->fact_seq : seq);
    free(op);
}

static void forget_redacted(void *arg, struct run *r, int rc, int64_t seq,
                            const struct fo_err *rerr)
{
    struct mem_op *op = arg;
    struct task *s = &r->t[op->t];
    struct fo_err err;
    (void)seq;
    if (rc && rc != FO_E_REDACTED) { /* gone already: the tombstone next */
        char why[FO_ERR_MSG_MAX + 64];
        snprintf(why, sizeof(why), "the fact could not be forgotten: %s",
                 rerr ? rerr->msg : "redaction failed");
        oe_tool_result(r, op->t, 0, NULL, why, 0);
        free(op);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "session", r->session) ||
        !cJSON_AddStringToObject(o, "key", op->key) ||
        !fo_json_add_int(o, "fact_seq", op->fact_seq) ||
        !fo_json_add_int(o, "call_seq", s->await)) {
        cJSON_Delete(o);
        free(op);
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    rc = oe_witness_cb(r, "session", "fact_forgotten", r->session_start, o,
                       (long)op->t, 0, 0, mem_landed, op, &err);
    if (rc) {
        free(op);
        oe_fail(r, rc, &err);
    }
}

/* What a remember or forget reads, on the engine's worker threads
 * (orch_reads.c): whether the call was done before (a resumed call), then
 * the fact to forget or the session's start. */
struct mem_read {
    struct mem_op *op; /* NULL once handed on */
    char *value;       /* remember's value (taken), NULL for forget */
    int forget;
    int64_t call_seq;
    int64_t start; /* the run's session_start when posted */
    int prior_rc, fact_rc;
    int64_t prior, fseq;
    cJSON *pb;
    struct fo_err perr, ferr;
};

static int mem_read(struct ledger *l, struct oe_read *rd, struct fo_err *err)
{
    struct mem_read *m = rd->arg;
    (void)err;
    m->prior = m->fseq = -1;
    m->prior_rc = m->fact_rc = FO_E_NOT_FOUND;
    if (m->forget || !m->value)
        m->prior_rc = orch_session_by_call(
            l, rd->session, m->forget ? "fact_forgotten" : "fact", m->call_seq,
            &m->prior, &m->pb, &m->perr);
    if ((m->prior_rc && m->prior_rc != FO_E_NOT_FOUND) || m->prior >= 0 ||
        (!m->forget && !m->value))
        return FO_OK; /* nothing more is needed */
    if (m->forget || m->start < 0)
        m->fact_rc =
            orch_session_fact(l, rd->session, m->forget ? m->op->key : "",
                              &m->fseq, &m->start, &m->ferr);
    else
        m->fact_rc = FO_OK;
    return FO_OK;
}

/* Back on the loop: the call is answered, or its entries are written. */
static void mem_go(struct run *r, struct mem_read *m)
{
    struct mem_op *op = m->op;
    size_t t = op->t;
    struct task *s = &r->t[t];
    struct fo_err err;
    int forget = m->forget;
    if (m->prior_rc && m->prior_rc != FO_E_NOT_FOUND) {
        oe_fail(r, m->prior_rc, &m->perr);
        return;
    }
    if (m->prior >= 0) { /* done before (a resumed call) */
        long long fseq = m->prior;
        if (forget)
            fo_json_get_int(m->pb, "fact_seq", 0, INT64_MAX / 2, &fseq);
        mem_answer(r, t, forget, op->key, fseq);
        return;
    }
    if (!forget && !m->value) {
        oe_tool_result(r, t, 0, NULL,
                       "the fact was not kept: the run was restarted "
                       "before it was written; call remember again",
                       0);
        return;
    }
    int64_t start = r->session_start, fseq = -1;
    if (forget || start < 0) {
        int rc = m->fact_rc;
        start = m->start;
        fseq = m->fseq;
        err = m->ferr;
        if (rc == FO_E_NOT_FOUND && start >= 0 && !forget)
            rc = FO_OK; /* only the start was wanted */
        if (rc == FO_E_NOT_FOUND && forget) {
            oe_tool_result(r, t, 0, NULL, err.msg, 0);
            return;
        }
        if (rc) {
            oe_fail(r, rc, &err);
            return;
        }
        r->session_start = start;
    }
    int rc;
    m->op = NULL; /* the callbacks' now */
    if (forget) {
        op->fact_seq = fseq;
        rc = oe_redact_cb(r, fseq, "forgotten (session fact)", (long)t,
                          forget_redacted, op, &err);
    } else {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "session", r->session) ||
            !cJSON_AddStringToObject(o, "key", op->key) ||
            !cJSON_AddStringToObject(o, "value", m->value) ||
            !fo_json_add_int(o, "call_seq", s->await)) {
            cJSON_Delete(o);
            rc = oe_nomem(&err);
        } else {
            rc = oe_witness_cb(r, "session", "fact", start, o, (long)t, 0, 0,
                               mem_landed, op, &err);
        }
    }
    if (rc) {
        free(op);
        oe_fail(r, rc, &err);
    }
}

static void mem_read_done(struct oe_read *rd)
{
    struct mem_read *m = rd->arg;
    struct run *r = rd->r;
    if (r) {
        r->t[m->op->t].busy = 0;
        if (rd->rc)
            oe_fail(r, rd->rc, &rd->err);
        else if (!r->halt && !r->failed_rc)
            mem_go(r, m); /* halted meanwhile: the halt answers the task */
        oe_step(r);
    }
    free(m->op);
    free(m->value);
    cJSON_Delete(m->pb);
    free(m);
    oe_read_free(rd);
}

/* Runs a remember or forget call (its arguments checked): its reads go
 * to a worker, the task busy meanwhile. */
void oe_mem_run(struct run *r, size_t t, const char *tool, const cJSON *args)
{
    struct task *s = &r->t[t];
    struct fo_err err;
    char why[FO_ERR_MSG_MAX + 64];
    int forget = !strcmp(tool, "forget");
    char *value = forget ? NULL : s->mem_value; /* taken */
    free(forget ? s->mem_value : NULL);
    s->mem_value = NULL;
    const char *key = oe_str_of(args, "key");
    if (!r->session) {
        free(value);
        oe_tool_result(r, t, 0, NULL,
                       "this run belongs to no session: remember and "
                       "forget keep the facts of a session (a run started "
                       "with a session, e.g. forum submit --session NAME)",
                       0);
        return;
    }
    int rc = orch_fact_check(key, forget || !value ? NULL : value, &err);
    if (rc) {
        free(value);
        snprintf(why, sizeof(why),
                 "%s: %s; call it again with arguments that match its schema",
                 tool, err.msg);
        oe_tool_result(r, t, 0, NULL, why, 1);
        return;
    }
    struct mem_op *op = calloc(1, sizeof(*op));
    struct mem_read *m = op ? calloc(1, sizeof(*m)) : NULL;
    struct oe_read *rd = m ? calloc(1, sizeof(*rd)) : NULL;
    if (rd)
        rd->session = orch_strdup(r->session);
    if (!rd || !rd->session) {
        free(rd);
        free(m);
        free(op);
        free(value);
        oe_fail(r, oe_nomem(&err), &err);
        return;
    }
    op->t = t;
    op->fact_seq = -1;
    snprintf(op->key, sizeof(op->key), "%s", key);
    *m = (struct mem_read){.op = op,
                           .value = value,
                           .forget = forget,
                           .call_seq = s->await,
                           .start = r->session_start};
    rd->fn = mem_read;
    rd->done = mem_read_done;
    rd->arg = m;
    if (!forget && value && r->session_start >= 0) {
        /* nothing to read: the fact is written at once */
        m->prior = m->fseq = -1;
        m->prior_rc = m->fact_rc = FO_E_NOT_FOUND;
        mem_go(r, m);
        free(m->op);
        free(m->value);
        free(m);
        oe_read_free(rd);
        return;
    }
    rc = oe_read_post(r->e, r, rd, &err);
    if (rc) {
        free(op);
        free(value);
        free(m);
        oe_read_free(rd);
        oe_fail(r, rc, &err);
        return;
    }
    s->busy = 1;
}
