/* orch_wavecp: a signed checkpoint after every wave of a run that asked
 * for it (checkpoint_each_wave). When a wave's every task is final, a
 * worker thread (orch_work) signs a C2SP checkpoint of the tree as it is
 * then, on a ledger handle of its own (signing takes the write lock and
 * an fsync: never on the loop), and the run witnesses it as
 * `wave_checkpoint` {wave, size, root, note} under its plan before the
 * next wave begins. */
#include "daemon/orch_engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cp_job {
    struct orch_engine *e;
    int64_t run;
    size_t wave;
    char *dir;
    int rc;
    struct fo_err err;
    struct ledger_checkpoint cp;
};

static void cp_work(void *arg, const atomic_int *cancel)
{
    struct cp_job *j = arg;
    struct ledger *l = NULL;
    if (atomic_load(cancel)) {
        j->rc = fo_err_set(&j->err, FO_E_INTERNAL, "cancelled");
        return;
    }
    j->rc = ledger_open(j->dir, 0, NULL, &l, &j->err);
    if (!j->rc)
        j->rc = ledger_checkpoint_sign(l, -1, &j->cp, &j->err);
    ledger_close(l);
}

static int cp_entry(struct run *r, const struct cp_job *j, struct fo_err *err)
{
    char hex[65];
    fo_hex(j->cp.root, 32, hex);
    cJSON *e = cJSON_CreateObject();
    if (!e || !fo_json_add_int(e, "wave", (long long)j->wave) ||
        !fo_json_add_int(e, "size", j->cp.size) ||
        !cJSON_AddStringToObject(e, "root", hex) ||
        !cJSON_AddStringToObject(e, "note", j->cp.note ? j->cp.note : "")) {
        cJSON_Delete(e);
        return oe_nomem(err);
    }
    int64_t parent = r->plan_seq >= 0 ? r->plan_seq : r->id;
    return oe_witness(r, "loop", "wave_checkpoint", parent, e, -1, 0, 0, err);
}

static void cp_done(void *arg, int cancelled)
{
    struct cp_job *j = arg;
    struct run *r = oe_run_find(j->e, j->run);
    if (r && !r->ended) {
        struct fo_err err;
        int rc = FO_OK;
        if (cancelled || r->halt || r->failed_rc)
            r->cp_busy = 0; /* the run stops: no checkpoint entry */
        else if (j->rc)
            rc = j->rc, err = j->err;
        else
            rc = cp_entry(r, j, &err); /* cp_busy until it lands */
        if (rc) {
            r->cp_busy = 0;
            fo_err_prefix(&err, "the checkpoint of wave %zu", j->wave);
            oe_fail(r, rc, &err);
        }
        oe_step(r);
    }
    ledger_checkpoint_release(&j->cp);
    free(j->dir);
    free(j);
}

int oe_wave_checkpoint(struct run *r, struct fo_err *err)
{
    if (r->cp_waves > r->wave)
        return 1;
    if (r->cp_busy)
        return 0;
    struct orch_engine *e = r->e;
    struct cp_job *j = calloc(1, sizeof(*j));
    char *dir = orch_strdup(ledger_dir(e->cfg.ledger));
    int rc = j && dir ? FO_OK : oe_nomem(err);
    if (!rc && !e->work)
        rc = orch_work_create(e->cfg.base, &e->work, err);
    if (!rc) {
        *j = (struct cp_job){.e = e, .run = r->id, .wave = r->wave, .dir = dir};
        rc = orch_work_post(e->work, cp_work, cp_done, j, NULL, err);
    }
    if (rc) {
        free(dir);
        free(j);
        return -rc;
    }
    r->cp_busy = 1;
    return 0;
}

int oe_apply_wave_cp(struct run *r, int64_t seq, const cJSON *b,
                     struct fo_err *err)
{
    long long wave = 0, size = 0;
    const char *root = oe_str_of(b, "root");
    if (fo_json_get_int(b, "wave", 0, INT32_MAX, &wave) != FO_OK ||
        fo_json_get_int(b, "size", 0, INT64_MAX, &size) != FO_OK || !root)
        return fo_err_set(err, FO_E_CORRUPT,
                          "entry %lld: a wave checkpoint without its wave, "
                          "size or root",
                          (long long)seq);
    cJSON *x = cJSON_CreateObject();
    if (!x || (!r->checkpoints && !(r->checkpoints = cJSON_CreateArray())) ||
        !fo_json_add_int(x, "wave", wave) || !fo_json_add_int(x, "seq", seq) ||
        !fo_json_add_int(x, "size", size) ||
        !cJSON_AddStringToObject(x, "root", root)) {
        cJSON_Delete(x);
        return oe_nomem(err);
    }
    cJSON_AddItemToArray(r->checkpoints, x);
    if ((size_t)wave + 1 > r->cp_waves)
        r->cp_waves = (size_t)wave + 1;
    r->cp_busy = 0;
    return FO_OK;
}
