/* orch_plan: the planner's compiler: a plan's tasks and their
 * typed dependencies into waves by Kahn layering, each wave sorted by id in
 * byte order; bad plans are refused with the tasks named. */
#include "daemon/orch_types.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/orch_model.h"
#include "daemon/orch_types_int.h"
#include "ledger/fo_json.h"

static void task_release(struct orch_task *t)
{
    free(t->id);
    free(t->agent);
    free(t->instruction);
    free(t->done_when);
    cJSON_Delete(t->done);
    for (size_t i = 0; t->deps && i < t->n_deps; i++)
        free(t->deps[i].id);
    free(t->deps);
    free(t->dep_index);
}

void orch_plan_free(struct orch_plan *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        task_release(&p->tasks[i]);
    free(p->tasks);
    free(p->order);
    free(p->wave_start);
    free(p);
}

static void task_label(const cJSON *t, size_t i, char *out, size_t size)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(t, "id");
    if (cJSON_IsString(id) && orch_name_valid(id->valuestring, ORCH_NAME_MAX))
        snprintf(out, size, "task \"%s\"", id->valuestring);
    else
        snprintf(out, size, "task #%zu", i + 1);
}

static int task_string(const cJSON *t, const char *label, const char *field,
                       size_t max, int required, int name_rules, char **out,
                       struct fo_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, field);
    if (!v || (!required && cJSON_IsNull(v)))
        return required ? fo_err_set(err, FO_E_INVALID, "plan: %s: %s: missing",
                                     label, field)
                        : FO_OK;
    if (!cJSON_IsString(v))
        return fo_err_set(err, FO_E_INVALID, "plan: %s: %s: must be a string",
                          label, field);
    size_t n = strlen(v->valuestring);
    if (name_rules ? !orch_name_valid(v->valuestring, max) : n == 0 || n > max)
        return fo_err_set(err, FO_E_INVALID,
                          "plan: %s: %s: must be 1-%zu bytes%s", label, field,
                          max, name_rules ? " without controls" : "");
    *out = orch_strdup(v->valuestring);
    return *out ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
}

static int task_deps(const cJSON *t, const char *label, struct orch_task *k,
                     struct fo_err *err)
{
    const cJSON *deps = cJSON_GetObjectItemCaseSensitive(t, "depends_on");
    if (!deps || cJSON_IsNull(deps))
        return FO_OK;
    if (!cJSON_IsArray(deps))
        return fo_err_set(err, FO_E_INVALID,
                          "plan: %s: depends_on: must be a list", label);
    int n = cJSON_GetArraySize(deps);
    if (n > ORCH_DEPS_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "plan: %s: depends_on: more than %d", label,
                          ORCH_DEPS_MAX);
    k->deps = calloc((size_t)(n ? n : 1), sizeof(*k->deps));
    k->dep_index = calloc((size_t)(n ? n : 1), sizeof(*k->dep_index));
    if (!k->deps || !k->dep_index)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    const cJSON *d;
    cJSON_ArrayForEach (d, deps) {
        const cJSON *id = d;
        int type = ORCH_EDGE_DATA;
        if (cJSON_IsObject(d)) {
            id = cJSON_GetObjectItemCaseSensitive(d, "id");
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(d, "type");
            if (ty &&
                !(cJSON_IsString(ty) && (!strcmp(ty->valuestring, "data") ||
                                         !strcmp(ty->valuestring, "order"))))
                return fo_err_set(err, FO_E_INVALID,
                                  "plan: %s: depends_on[%zu]: type must be "
                                  "\"data\" or \"order\"",
                                  label, k->n_deps);
            if (ty && !strcmp(ty->valuestring, "order"))
                type = ORCH_EDGE_ORDER;
        }
        if (!cJSON_IsString(id) ||
            !orch_name_valid(id->valuestring, ORCH_NAME_MAX))
            return fo_err_set(err, FO_E_INVALID,
                              "plan: %s: depends_on[%zu]: must be a task id "
                              "or {\"id\", \"type\"}",
                              label, k->n_deps);
        for (size_t j = 0; j < k->n_deps; j++)
            if (!strcmp(k->deps[j].id, id->valuestring))
                return fo_err_set(err, FO_E_INVALID,
                                  "plan: %s: depends on \"%s\" twice", label,
                                  id->valuestring);
        k->deps[k->n_deps].id = orch_strdup(id->valuestring);
        if (!k->deps[k->n_deps].id)
            return fo_err_set(err, FO_E_NOMEM, NULL);
        k->deps[k->n_deps].type = type;
        k->n_deps++;
    }
    return FO_OK;
}

/* done_when: a string (for the validator), or an assertion object, or a
 * list of both; checked here (orch_assert_check on an empty output) so a
 * malformed item is a bad plan, never a failure in the middle of a run. */
static int task_done(const cJSON *t, const char *label, struct orch_task *k,
                     struct fo_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "done_when");
    /* an empty list is no criteria, as an absent one: nothing to pass */
    if (!v || cJSON_IsNull(v) ||
        (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
        return FO_OK;
    if (cJSON_IsString(v)) {
        int rc = task_string(t, label, "done_when", ORCH_INSTRUCTION_MAX, 0, 0,
                             &k->done_when, err);
        if (rc)
            return rc;
    } else if (!cJSON_IsArray(v) && !cJSON_IsObject(v)) {
        return fo_err_set(err, FO_E_INVALID,
                          "plan: %s: done_when: must be a string, an "
                          "assertion object or a list of them",
                          label);
    }
    struct orch_verdict vd = {0};
    struct fo_err aerr;
    fo_err_clear(&aerr);
    int rc = orch_assert_check(v, "", 0, 0, &vd, &aerr);
    orch_verdict_release(&vd);
    if (rc == FO_E_NOMEM)
        return fo_err_set(err, rc, NULL);
    if (rc)
        return fo_err_set(err, FO_E_INVALID, "plan: %s: %s", label, aerr.msg);
    k->done = cJSON_Duplicate(v, 1);
    return k->done ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
}

static int parse_task(const cJSON *t, size_t i, struct orch_task *k,
                      struct fo_err *err)
{
    char label[96];
    task_label(t, i, label, sizeof(label));
    if (!cJSON_IsObject(t))
        return fo_err_set(err, FO_E_INVALID, "plan: %s: must be an object",
                          label);
    int rc = task_string(t, label, "id", ORCH_NAME_MAX, 1, 1, &k->id, err);
    if (!rc)
        rc =
            task_string(t, label, "agent", ORCH_NAME_MAX, 1, 1, &k->agent, err);
    if (!rc)
        rc = task_string(t, label, "instruction", ORCH_INSTRUCTION_MAX, 1, 0,
                         &k->instruction, err);
    if (!rc)
        rc = task_done(t, label, k, err);
    if (!rc)
        rc = task_deps(t, label, k, err);
    return rc;
}

static int cmp_idx(const void *a, const void *b, void *ctx)
{
    const struct orch_plan *p = ctx;
    return strcmp(p->tasks[*(const size_t *)a].id,
                  p->tasks[*(const size_t *)b].id);
}

static void sort_by_id(const struct orch_plan *p, size_t *v, size_t n)
{
    qsort_r(v, n, sizeof(*v), cmp_idx, (void *)(uintptr_t)p);
}

static long find_id(const struct orch_plan *p, const size_t *by_id,
                    const char *id)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(p->tasks[by_id[mid]].id, id);
        if (c == 0)
            return (long)by_id[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Appends the ids of the tasks in v (n of them) to msg as "A, B, C",
 * stopping with ", ..." before the message would be cut. */
static void name_tasks(const struct orch_plan *p, const size_t *v, size_t n,
                       char *msg, size_t size)
{
    size_t len = strlen(msg);
    for (size_t i = 0; i < n; i++) {
        const char *id = p->tasks[v[i]].id;
        if (len + strlen(id) + 8 >= size) {
            snprintf(msg + len, size - len, "%s...", i ? ", " : "");
            return;
        }
        int w = snprintf(msg + len, size - len, "%s%s", i ? ", " : "", id);
        if (w < 0)
            return;
        len += (size_t)w;
    }
}

/* Kahn layering. succ is the CSR list of dependents. */
static int layer(struct orch_plan *p, struct fo_err *err)
{
    size_t n = p->n, nedges = 0;
    for (size_t i = 0; i < n; i++)
        nedges += p->tasks[i].n_deps;
    size_t *indeg = calloc(n, sizeof(size_t));
    size_t *outdeg = calloc(n, sizeof(size_t));
    size_t *start = calloc(n + 1, sizeof(size_t));
    size_t *succ = calloc(nedges ? nedges : 1, sizeof(size_t));
    size_t *fill = calloc(n, sizeof(size_t));
    p->order = calloc(n, sizeof(size_t));
    p->wave_start = calloc(n + 1, sizeof(size_t));
    int rc = FO_OK;
    if (!indeg || !outdeg || !start || !succ || !fill || !p->order ||
        !p->wave_start) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        indeg[i] = p->tasks[i].n_deps;
        for (size_t d = 0; d < p->tasks[i].n_deps; d++)
            start[p->tasks[i].dep_index[d] + 1]++;
    }
    for (size_t i = 0; i < n; i++)
        start[i + 1] += start[i];
    for (size_t i = 0; i < n; i++)
        for (size_t d = 0; d < p->tasks[i].n_deps; d++) {
            size_t u = p->tasks[i].dep_index[d];
            succ[start[u] + fill[u]++] = i;
        }
    size_t done = 0;
    for (size_t i = 0; i < n; i++)
        if (indeg[i] == 0)
            p->order[done++] = i;
    p->n_waves = 0;
    size_t wave_begin = 0;
    while (done > wave_begin) {
        size_t wave_end = done;
        sort_by_id(p, p->order + wave_begin, wave_end - wave_begin);
        p->wave_start[p->n_waves++] = wave_begin;
        for (size_t k = wave_begin; k < wave_end; k++) {
            size_t u = p->order[k];
            for (size_t s = start[u]; s < start[u + 1]; s++)
                if (--indeg[succ[s]] == 0)
                    p->order[done++] = succ[s];
        }
        wave_begin = wave_end;
    }
    p->wave_start[p->n_waves] = done;
    if (done < n) {
        /* A cycle. Peel off the tasks that only hang below one (no
         * unscheduled dependents), so the message names the cycle. */
        size_t *left = fill; /* reuse: the unscheduled tasks */
        size_t nleft = 0;
        for (size_t i = 0; i < n; i++)
            outdeg[i] = 0;
        for (size_t i = 0; i < n; i++)
            if (indeg[i] > 0)
                for (size_t d = 0; d < p->tasks[i].n_deps; d++)
                    outdeg[p->tasks[i].dep_index[d]]++;
        int changed = 1;
        while (changed) {
            changed = 0;
            for (size_t i = 0; i < n; i++)
                if (indeg[i] > 0 && outdeg[i] == 0) {
                    indeg[i] = 0; /* drop it */
                    for (size_t d = 0; d < p->tasks[i].n_deps; d++)
                        outdeg[p->tasks[i].dep_index[d]]--;
                    changed = 1;
                }
        }
        for (size_t i = 0; i < n; i++)
            if (indeg[i] > 0)
                left[nleft++] = i;
        sort_by_id(p, left, nleft);
        char msg[FO_ERR_MSG_MAX] = "plan: dependency cycle among tasks ";
        name_tasks(p, left, nleft, msg, sizeof(msg));
        rc = fo_err_set(err, FO_E_INVALID, "%s", msg);
    }
out:
    free(indeg);
    free(outdeg);
    free(start);
    free(succ);
    free(fill);
    return rc;
}

int orch_plan_compile(const cJSON *plan, const struct orch_roster *roster,
                      struct orch_plan **out, struct fo_err *err)
{
    struct orch_plan *p = NULL;
    size_t *by_id = NULL;
    int rc;
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(plan, "tasks");
    int n = cJSON_IsArray(tasks) ? cJSON_GetArraySize(tasks) : 0;
    if (!cJSON_IsObject(plan) || n == 0) {
        rc = fo_err_set(err, FO_E_INVALID,
                        "plan: tasks: must be a non-empty list");
        goto out;
    }
    if (n > ORCH_TASKS_MAX) {
        rc = fo_err_set(err, FO_E_INVALID, "plan: tasks: more than %d",
                        ORCH_TASKS_MAX);
        goto out;
    }
    p = calloc(1, sizeof(*p));
    if (p)
        p->tasks = calloc((size_t)n, sizeof(*p->tasks));
    by_id = calloc((size_t)n, sizeof(*by_id));
    if (!p || !p->tasks || !by_id) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    const cJSON *t;
    cJSON_ArrayForEach (t, tasks) {
        p->n++;
        rc = parse_task(t, p->n - 1, &p->tasks[p->n - 1], err);
        if (rc)
            goto out;
    }
    for (size_t i = 0; i < p->n; i++)
        by_id[i] = i;
    sort_by_id(p, by_id, p->n);
    for (size_t i = 0; i + 1 < p->n; i++)
        if (!strcmp(p->tasks[by_id[i]].id, p->tasks[by_id[i + 1]].id)) {
            size_t a = by_id[i], b = by_id[i + 1];
            rc = fo_err_set(err, FO_E_INVALID,
                            "plan: duplicate task id \"%s\" (tasks #%zu and "
                            "#%zu)",
                            p->tasks[a].id, (a < b ? a : b) + 1,
                            (a < b ? b : a) + 1);
            goto out;
        }
    for (size_t i = 0; i < p->n; i++) {
        struct orch_task *k = &p->tasks[i];
        if (roster && !orch_roster_find(roster, k->agent)) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "plan: task \"%s\": unknown agent \"%s\"", k->id,
                            k->agent);
            goto out;
        }
        for (size_t d = 0; d < k->n_deps; d++) {
            long j = find_id(p, by_id, k->deps[d].id);
            if (j < 0) {
                rc = fo_err_set(err, FO_E_INVALID,
                                "plan: task \"%s\": depends on unknown task "
                                "\"%s\"",
                                k->id, k->deps[d].id);
                goto out;
            }
            k->dep_index[d] = (size_t)j;
        }
    }
    rc = layer(p, err);
    if (rc)
        goto out;
    *out = p;
    p = NULL;
out:
    orch_plan_free(p);
    free(by_id);
    return rc;
}

cJSON *orch_plan_json(const struct orch_plan *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tasks = o ? cJSON_AddArrayToObject(o, "tasks") : NULL;
    cJSON *waves = o ? cJSON_AddArrayToObject(o, "waves") : NULL;
    cJSON *edges = o ? cJSON_AddArrayToObject(o, "edges") : NULL;
    int ok = tasks && waves && edges;
    for (size_t i = 0; ok && i < p->n; i++) {
        const struct orch_task *k = &p->tasks[i];
        cJSON *t = cJSON_CreateObject();
        cJSON *deps = t ? cJSON_AddArrayToObject(t, "depends_on") : NULL;
        ok = deps && cJSON_AddStringToObject(t, "id", k->id) &&
             cJSON_AddStringToObject(t, "agent", k->agent) &&
             cJSON_AddStringToObject(t, "instruction", k->instruction) &&
             (!k->done || cJSON_AddItemToObject(t, "done_when",
                                                cJSON_Duplicate(k->done, 1)));
        if (t)
            cJSON_AddItemToArray(tasks, t);
        for (size_t d = 0; ok && d < k->n_deps; d++) {
            const char *type =
                k->deps[d].type == ORCH_EDGE_ORDER ? "order" : "data";
            cJSON *dj = cJSON_CreateObject(), *e = cJSON_CreateObject();
            ok = dj && e && cJSON_AddStringToObject(dj, "id", k->deps[d].id) &&
                 cJSON_AddStringToObject(dj, "type", type) &&
                 cJSON_AddStringToObject(e, "from", k->deps[d].id) &&
                 cJSON_AddStringToObject(e, "to", k->id) &&
                 cJSON_AddStringToObject(e, "type", type);
            if (dj)
                cJSON_AddItemToArray(deps, dj);
            if (e)
                cJSON_AddItemToArray(edges, e);
        }
    }
    for (size_t w = 0; ok && w < p->n_waves; w++) {
        cJSON *wave = cJSON_CreateArray();
        ok = wave != NULL;
        for (size_t k = p->wave_start[w]; ok && k < p->wave_start[w + 1]; k++) {
            cJSON *s = cJSON_CreateString(p->tasks[p->order[k]].id);
            ok = s != NULL;
            if (s)
                cJSON_AddItemToArray(wave, s);
        }
        if (wave)
            cJSON_AddItemToArray(waves, wave);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
