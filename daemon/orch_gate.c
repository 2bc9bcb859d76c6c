/* orch_gate: the approval-gate policy (which waves wait for a human), its
 * checks and merges, and the timestamps gates are written with. The run
 * engine (orch_engine.c) writes and follows the gate entries; orch_runs.c
 * reads them back for gate_list, run_get and decisions made on the ledger
 * alone. */
#include "daemon/orch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/orch_int.h"
#include "ledger/fo_json.h"

static const char *const policy_keys[] = {
    "all",       "lanes",    "categories", "waves",
    "timeout_s", "deadline", "on_expiry",  "question",
};

static int names(const cJSON *v, const char *field,
                 const struct orch_roster *roster, int lanes,
                 struct fo_err *err)
{
    if (!cJSON_IsArray(v))
        return fo_err_set(err, FO_E_INVALID, "gates.%s: must be a list", field);
    int n = cJSON_GetArraySize(v);
    if (n > ORCH_GATE_NAMES_MAX)
        return fo_err_set(err, FO_E_INVALID, "gates.%s: more than %d names",
                          field, ORCH_GATE_NAMES_MAX);
    const cJSON *x;
    cJSON_ArrayForEach (x, v) {
        if (!cJSON_IsString(x) ||
            !orch_name_valid(x->valuestring, ORCH_NAME_MAX))
            return fo_err_set(err, FO_E_INVALID,
                              "gates.%s: every item must be a name", field);
        if (lanes && roster && !orch_roster_find(roster, x->valuestring))
            return fo_err_set(err, FO_E_INVALID,
                              "gates.lanes: \"%s\": no such lane",
                              x->valuestring);
    }
    return FO_OK;
}

int orch_gate_policy_check(const cJSON *p, const struct orch_roster *roster,
                           int64_t now_ms, struct fo_err *err)
{
    if (!p || cJSON_IsNull(p))
        return FO_OK;
    if (!cJSON_IsObject(p))
        return fo_err_set(err, FO_E_INVALID, "gates: must be an object");
    int rc = fo_json_only_keys(
        p, policy_keys, sizeof(policy_keys) / sizeof(policy_keys[0]), err);
    if (rc) {
        fo_err_prefix(err, "gates");
        return rc;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "all");
    if (v && !cJSON_IsBool(v))
        return fo_err_set(err, FO_E_INVALID, "gates.all: must be a boolean");
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "lanes")) &&
        (rc = names(v, "lanes", roster, 1, err)))
        return rc;
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "categories")) &&
        (rc = names(v, "categories", roster, 0, err)))
        return rc;
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "waves"))) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > ORCH_GATE_NAMES_MAX)
            return fo_err_set(err, FO_E_INVALID,
                              "gates.waves: must be a list of at most %d "
                              "wave numbers",
                              ORCH_GATE_NAMES_MAX);
        const cJSON *x;
        cJSON_ArrayForEach (x, v)
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 ||
                x->valuedouble > ORCH_GATE_WAVE_MAX ||
                x->valuedouble != (double)(long long)x->valuedouble)
                return fo_err_set(err, FO_E_INVALID,
                                  "gates.waves: every item must be a wave "
                                  "number 0..%d",
                                  ORCH_GATE_WAVE_MAX);
    }
    long long n = 0;
    rc = fo_json_get_int(p, "timeout_s", 1, ORCH_GATE_TIMEOUT_MAX_S, &n);
    if (rc == FO_E_INVALID)
        return fo_err_set(err, FO_E_INVALID,
                          "gates.timeout_s: must be an integer 1..%d",
                          ORCH_GATE_TIMEOUT_MAX_S);
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "deadline"))) {
        int64_t ms = 0;
        if (!cJSON_IsString(v) || orch_time_parse(v->valuestring, &ms))
            return fo_err_set(err, FO_E_INVALID,
                              "gates.deadline: not a time (RFC 3339, e.g. "
                              "2026-01-31T18:00:00Z)");
        if (ms <= now_ms)
            return fo_err_set(err, FO_E_INVALID,
                              "gates.deadline: %.40s is in the past",
                              v->valuestring);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "on_expiry")) &&
        (!cJSON_IsString(v) || (strcmp(v->valuestring, "reject") != 0 &&
                                strcmp(v->valuestring, "approve") != 0)))
        return fo_err_set(err, FO_E_INVALID,
                          "gates.on_expiry: must be \"reject\" or "
                          "\"approve\"");
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "question")) &&
        (!cJSON_IsString(v) || !*v->valuestring ||
         strlen(v->valuestring) > ORCH_GATE_TEXT_MAX))
        return fo_err_set(err, FO_E_INVALID,
                          "gates.question: must be text of 1..%d bytes",
                          ORCH_GATE_TEXT_MAX);
    return FO_OK;
}

/* Adds to list the items of add it does not hold yet. */
static int union_into(cJSON *dst, const char *key, const cJSON *add)
{
    if (!add)
        return 1;
    cJSON *list = cJSON_GetObjectItemCaseSensitive(dst, key);
    if (!list && !(list = cJSON_AddArrayToObject(dst, key)))
        return 0;
    const cJSON *x;
    cJSON_ArrayForEach (x, add) {
        int have = 0;
        const cJSON *y;
        cJSON_ArrayForEach (y, list)
            if (cJSON_Compare(x, y, 1))
                have = 1;
        if (!have && !cJSON_AddItemToArray(list, cJSON_Duplicate(x, 1)))
            return 0;
    }
    return 1;
}

static int has_rule(const cJSON *p)
{
    static const char *const lists[] = {"lanes", "categories", "waves"};
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "all")))
        return 1;
    for (size_t i = 0; i < 3; i++)
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, lists[i])))
            return 1;
    return 0;
}

int orch_gate_policy_merge(const cJSON *base, const cJSON *req, cJSON **out,
                           struct fo_err *err)
{
    *out = NULL;
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    const cJSON *src[2] = {cJSON_IsObject(base) ? base : NULL,
                           cJSON_IsObject(req) ? req : NULL};
    int ok = 1;
    for (int i = 0; i < 2 && ok; i++) {
        if (!src[i])
            continue;
        const cJSON *v;
        cJSON_ArrayForEach (v, src[i]) {
            if (cJSON_IsArray(v)) {
                ok = union_into(m, v->string, v);
            } else if (!strcmp(v->string, "all")) {
                if (cJSON_IsTrue(v)) {
                    cJSON_DeleteItemFromObjectCaseSensitive(m, "all");
                    ok = cJSON_AddTrueToObject(m, "all") != NULL;
                }
            } else { /* scalars: the request's win */
                cJSON_DeleteItemFromObjectCaseSensitive(m, v->string);
                ok = cJSON_AddItemToObject(m, v->string, cJSON_Duplicate(v, 1));
            }
            if (!ok)
                break;
        }
    }
    if (!ok) {
        cJSON_Delete(m);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (!has_rule(m)) { /* nothing gated: no policy */
        cJSON_Delete(m);
        return FO_OK;
    }
    *out = m;
    return FO_OK;
}

static int in_list(const cJSON *p, const char *key, const char *name)
{
    const cJSON *x;
    cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(p, key))
        if (cJSON_IsString(x) && !strcmp(x->valuestring, name))
            return 1;
    return 0;
}

int orch_gate_rule(const cJSON *policy, const struct orch_roster *roster,
                   const struct orch_plan *p, size_t wave, char *rule,
                   size_t size)
{
    if (!policy || wave >= p->n_waves)
        return 0;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(policy, "all"))) {
        snprintf(rule, size, "all");
        return 1;
    }
    const cJSON *x;
    cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(policy, "waves"))
        if (cJSON_IsNumber(x) && x->valuedouble == (double)wave) {
            snprintf(rule, size, "wave:%zu", wave);
            return 1;
        }
    for (size_t i = p->wave_start[wave]; i < p->wave_start[wave + 1]; i++) {
        const struct orch_task *k = &p->tasks[p->order[i]];
        if (in_list(policy, "lanes", k->agent)) {
            snprintf(rule, size, "lane:%s", k->agent);
            return 1;
        }
        const struct orch_lane *ln =
            roster ? orch_roster_find(roster, k->agent) : NULL;
        if (ln && in_list(policy, "categories", ln->category)) {
            snprintf(rule, size, "category:%s", ln->category);
            return 1;
        }
    }
    return 0;
}

int64_t orch_gate_deadline(const cJSON *policy, int64_t now_ms)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(policy, "deadline");
    int64_t ms = 0;
    if (cJSON_IsString(d) && !orch_time_parse(d->valuestring, &ms))
        return ms;
    long long s = 0;
    if (fo_json_get_int(policy, "timeout_s", 1, ORCH_GATE_TIMEOUT_MAX_S, &s))
        s = ORCH_GATE_TIMEOUT_DEFAULT_S;
    return now_ms + (int64_t)s * 1000;
}

int orch_gate_on_expiry_approve(const cJSON *policy)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(policy, "on_expiry");
    return cJSON_IsString(v) && !strcmp(v->valuestring, "approve");
}

int orch_gate_flag(cJSON *policy, const char *spec, struct fo_err *err)
{
    const char *colon = strchr(spec, ':');
    if (!strcmp(spec, "all")) {
        cJSON_DeleteItemFromObjectCaseSensitive(policy, "all");
        return cJSON_AddTrueToObject(policy, "all")
                   ? FO_OK
                   : fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (!colon || !colon[1])
        return fo_err_set(err, FO_E_INVALID,
                          "--gate %s: expected all, lane:NAME, "
                          "category:NAME or wave:N",
                          spec);
    size_t klen = (size_t)(colon - spec);
    const char *val = colon + 1;
    const char *key = klen == 4 && !strncmp(spec, "lane", 4) ? "lanes"
                      : klen == 8 && !strncmp(spec, "category", 8)
                          ? "categories"
                      : klen == 4 && !strncmp(spec, "wave", 4) ? "waves"
                                                               : NULL;
    if (!key)
        return fo_err_set(err, FO_E_INVALID,
                          "--gate %s: expected all, lane:NAME, "
                          "category:NAME or wave:N",
                          spec);
    cJSON *item = NULL;
    if (key[0] == 'w') {
        char *end = NULL;
        errno = 0;
        long w = strtol(val, &end, 10);
        if (errno || *end || w < 0 || w > ORCH_GATE_WAVE_MAX ||
            (val[0] == '0' && val[1]) || val[0] < '0' || val[0] > '9')
            return fo_err_set(err, FO_E_INVALID,
                              "--gate %s: wave must be a number 0..%d", spec,
                              ORCH_GATE_WAVE_MAX);
        item = cJSON_CreateNumber((double)w);
    } else {
        if (!orch_name_valid(val, ORCH_NAME_MAX))
            return fo_err_set(err, FO_E_INVALID, "--gate %s: not a name", spec);
        item = cJSON_CreateString(val);
    }
    cJSON *list = cJSON_GetObjectItemCaseSensitive(policy, key);
    if (!list)
        list = cJSON_AddArrayToObject(policy, key);
    if (!item || !list || !cJSON_AddItemToArray(list, item)) {
        cJSON_Delete(item);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return FO_OK;
}

void orch_time_rfc3339(int64_t ms, char out[ORCH_TIME_MAX])
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&s, &tm)) {
        snprintf(out, ORCH_TIME_MAX, "1970-01-01T00:00:00Z");
        return;
    }
    int y = tm.tm_year + 1900;
    if (y < 0 || y > 9999) /* four digits, as RFC 3339 has them */
        y = y < 0 ? 0 : 9999;
    snprintf(out, ORCH_TIME_MAX, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", y,
             (tm.tm_mon + 1) % 100, tm.tm_mday % 100, tm.tm_hour % 100,
             tm.tm_min % 100, tm.tm_sec % 100, (int)(ms % 1000 + 1000) % 1000);
}

static int digits(const char **s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        char c = (*s)[i];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *s += n;
    *out = v;
    return 0;
}

int orch_time_parse(const char *s, int64_t *ms)
{
    int y, mo, d, h, mi, sec, frac = 0;
    if (!s || digits(&s, 4, &y) || *s++ != '-' || digits(&s, 2, &mo) ||
        *s++ != '-' || digits(&s, 2, &d) || (*s != 'T' && *s != 't'))
        return -1;
    s++;
    if (digits(&s, 2, &h) || *s++ != ':' || digits(&s, 2, &mi) || *s++ != ':' ||
        digits(&s, 2, &sec))
        return -1;
    if (*s == '.') { /* up to milliseconds kept; more digits allowed */
        s++;
        int n = 0;
        if (*s < '0' || *s > '9')
            return -1;
        while (*s >= '0' && *s <= '9') {
            if (n < 3)
                frac = frac * 10 + (*s - '0');
            n++;
            s++;
        }
        for (; n < 3; n++)
            frac *= 10;
    }
    int off = 0;
    if (*s == 'Z' || *s == 'z') {
        s++;
    } else if (*s == '+' || *s == '-') {
        int sign = *s++ == '-' ? -1 : 1, oh, om;
        if (digits(&s, 2, &oh) || *s++ != ':' || digits(&s, 2, &om) ||
            oh > 23 || om > 59)
            return -1;
        off = sign * (oh * 60 + om);
    } else {
        return -1;
    }
    static const int mdays[12] = {31, 29, 31, 30, 31, 30,
                                  31, 31, 30, 31, 30, 31};
    if (*s || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
        h > 23 || mi > 59 || sec > 60)
        return -1;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo == 2 && d == 29 && !leap)
        return -1;
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = d,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = sec > 59 ? 59 : sec};
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    *ms = ((int64_t)t - (int64_t)off * 60) * 1000 + frac;
    return 0;
}

const char *const orch_gate_decided_kinds[] = {
    "gate_approved", "gate_edited", "gate_rejected", "gate_expired", NULL};

const char *const *orch_gate_sole(const char *kind)
{
    for (const char *const *k = orch_gate_decided_kinds; kind && *k; k++)
        if (!strcmp(kind, *k))
            return orch_gate_decided_kinds;
    return NULL;
}
