/* surf: the dispatcher over the handler table: schema validation before any
 * handler runs, query-string conversion, and the shared error shape. */
#include "surfaces/surf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "surfaces/surf_int.h"

static int type_ok(const cJSON *v, const char *type)
{
    if (strcmp(type, "object") == 0)
        return cJSON_IsObject(v);
    if (strcmp(type, "array") == 0)
        return cJSON_IsArray(v);
    if (strcmp(type, "string") == 0)
        return cJSON_IsString(v);
    if (strcmp(type, "boolean") == 0)
        return cJSON_IsBool(v);
    if (strcmp(type, "null") == 0)
        return cJSON_IsNull(v);
    if (strcmp(type, "number") == 0)
        return cJSON_IsNumber(v);
    if (strcmp(type, "integer") == 0)
        return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
               floor(v->valuedouble) == v->valuedouble &&
               fabs(v->valuedouble) <= 9007199254740992.0;
    return 0;
}

static const char *type_name(const cJSON *v)
{
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsNumber(v))
        return "a number";
    return "invalid";
}

/* "a, b, c" of an enum's strings (one buffer a thread, for a message). */
static const char *enum_list(const cJSON *en)
{
    static _Thread_local char buf[256];
    size_t n = 0;
    const cJSON *x;
    buf[0] = '\0';
    cJSON_ArrayForEach (x, en)
        if (cJSON_IsString(x) && n < sizeof(buf))
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s",
                                  n ? ", " : "", x->valuestring);
    return buf;
}

/* Checks one value against a property schema (no nesting beyond what the
 * table uses: type, minimum, maximum, enum of strings, minLength,
 * maxLength). */
static int check_value(const char *name, const cJSON *v, const cJSON *schema,
                       struct fo_err *err)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (cJSON_IsString(type) && !type_ok(v, type->valuestring))
        return fo_err_set(err, FO_E_INVALID, "%s: must be %s, not %s", name,
                          type->valuestring, type_name(v));
    if (cJSON_IsArray(type)) {
        int any = 0;
        const cJSON *t;
        cJSON_ArrayForEach (t, type)
            any |= cJSON_IsString(t) && type_ok(v, t->valuestring);
        if (!any)
            return fo_err_set(err, FO_E_INVALID, "%s: wrong type (%s)", name,
                              type_name(v));
    }
    const cJSON *lim;
    if (cJSON_IsNumber(v)) {
        lim = cJSON_GetObjectItemCaseSensitive(schema, "minimum");
        if (cJSON_IsNumber(lim) && v->valuedouble < lim->valuedouble)
            return fo_err_set(err, FO_E_INVALID, "%s: must be >= %.0f", name,
                              lim->valuedouble);
        lim = cJSON_GetObjectItemCaseSensitive(schema, "maximum");
        if (cJSON_IsNumber(lim) && v->valuedouble > lim->valuedouble)
            return fo_err_set(err, FO_E_INVALID, "%s: must be <= %.0f", name,
                              lim->valuedouble);
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    if (cJSON_IsArray(en) && cJSON_IsString(v)) {
        int any = 0;
        const cJSON *x;
        cJSON_ArrayForEach (x, en)
            any |= cJSON_IsString(x) && !strcmp(x->valuestring, v->valuestring);
        if (!any)
            return fo_err_set(err, FO_E_INVALID, "%s: %.64s is not one of %s",
                              name, v->valuestring, enum_list(en));
    }
    if (cJSON_IsString(v)) {
        size_t len = strlen(v->valuestring);
        lim = cJSON_GetObjectItemCaseSensitive(schema, "minLength");
        if (cJSON_IsNumber(lim) && (double)len < lim->valuedouble)
            return fo_err_set(err, FO_E_INVALID, "%s: too short", name);
        lim = cJSON_GetObjectItemCaseSensitive(schema, "maxLength");
        if (cJSON_IsNumber(lim) && (double)len > lim->valuedouble)
            return fo_err_set(err, FO_E_INVALID, "%s: longer than %.0f bytes",
                              name, lim->valuedouble);
    }
    return FO_OK;
}

static int validate(const cJSON *in, const cJSON *schema, struct fo_err *err)
{
    if (!cJSON_IsObject(in))
        return fo_err_set(err, FO_E_INVALID, "input: must be a JSON object");
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(schema, "required");
    const cJSON *r;
    cJSON_ArrayForEach (r, req) {
        if (cJSON_IsString(r) &&
            !cJSON_GetObjectItemCaseSensitive(in, r->valuestring))
            return fo_err_set(err, FO_E_INVALID, "%s: required",
                              r->valuestring);
    }
    const cJSON *f;
    cJSON_ArrayForEach (f, in) {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, f->string);
        if (!ps)
            return fo_err_set(err, FO_E_INVALID, "%s: unknown field",
                              f->string);
        int rc = check_value(f->string, f, ps, err);
        if (rc)
            return rc;
    }
    return FO_OK;
}

int surf_validate(const struct surf_method *m, const cJSON *in,
                  struct fo_err *err)
{
    return validate(in, surf_schema(m), err);
}

/* A host that can no longer write (its health hook says why) refuses
 * write methods before they run, with the error /health gives. */
static int writable(struct surf_ctx *ctx, const struct surf_method *m,
                    struct fo_err *err)
{
    if (!(m->flags & SURF_WRITE) || !ctx->health)
        return FO_OK;
    return ctx->health(ctx->health_hook, err);
}

int surf_call(struct surf_ctx *ctx, const struct surf_method *m,
              const cJSON *in, cJSON **out, struct fo_err *err)
{
    cJSON *empty = NULL;
    if (!in) {
        empty = cJSON_CreateObject();
        if (!empty)
            return fo_err_set(err, FO_E_NOMEM, NULL);
        in = empty;
    }
    int rc = surf_validate(m, in, err);
    if (rc == FO_OK)
        rc = writable(ctx, m, err);
    *out = NULL;
    if (rc == FO_OK && m->where == SURF_ON_RUN && !ctx->host_call)
        rc = fo_err_set(err, FO_E_INTERNAL,
                        "%s: runs on the run engine, and none is hosted here",
                        m->name);
    else if (rc == FO_OK && ctx->host_call &&
             (m->where == SURF_ON_RUN || m->where == SURF_ON_LOOP)) {
        rc = ctx->host_call(ctx->host_hook, m, in, out, err);
        if (rc == FO_OK && !*out)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    } else if (rc == FO_OK) {
        rc = m->handler(ctx, in, out, err);
        if (rc == FO_OK && !*out)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    cJSON_Delete(empty);
    return rc;
}

int surf_start(struct surf_ctx *ctx, const struct surf_method *m,
               const cJSON *in, surf_reply_fn reply, void *arg,
               struct fo_err *err)
{
    if (m->where != SURF_ON_RUN || !m->start || !ctx->engine)
        return fo_err_set(err, FO_E_INTERNAL, "%s: not a run of an engine",
                          m->name);
    int rc = surf_validate(m, in, err);
    if (rc == FO_OK)
        rc = writable(ctx, m, err);
    return rc ? rc : m->start(ctx, in, reply, arg, err);
}

/* The integers a JSON number holds exactly: |v| <= 2^53 - 1. */
#define EXACT_MAX 9007199254740991LL

/* Reads text as an integer in its one canonical spelling: [0-9]+ without
 * leading zeros ("0" itself), '-' first only when neg_ok (and never "-0"),
 * nothing else: no '+', no spaces. Returns 0 beyond 2^53 - 1, which a JSON
 * number would round. */
static int exact_int(const char *text, int neg_ok, long long *out)
{
    const char *d = text;
    int neg = *d == '-';
    if (neg && !neg_ok)
        return 0;
    d += neg;
    if (*d < '0' || *d > '9' || (d[0] == '0' && (d[1] || neg)))
        return 0;
    long long v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return 0;
        v = v * 10 + (*d - '0');
        if (v > EXACT_MAX)
            return 0;
    }
    *out = neg ? -v : v;
    return 1;
}

cJSON *surf_param_value(const struct surf_method *m, const char *name,
                        const char *text, unsigned flags)
{
    const cJSON *props =
        cJSON_GetObjectItemCaseSensitive(surf_schema(m), "properties");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, name);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ps, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "string";
    if (strcmp(t, "integer") == 0) {
        const cJSON *min = cJSON_GetObjectItemCaseSensitive(ps, "minimum");
        int neg_ok = !cJSON_IsNumber(min) || min->valuedouble < 0;
        long long v;
        if ((flags & SURF_PARAM_DECODED) || !exact_int(text, neg_ok, &v))
            return NULL;
        return cJSON_CreateNumber((double)v);
    }
    if (strcmp(t, "boolean") == 0) {
        if (!strcmp(text, "1") || !strcmp(text, "true"))
            return cJSON_CreateTrue();
        if (!strcmp(text, "0") || !strcmp(text, "false"))
            return cJSON_CreateFalse();
        return NULL;
    }
    return cJSON_CreateString(text);
}

cJSON *surf_error_json(const struct fo_err *err)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (!cJSON_AddStringToObject(
            o, "error", err->msg[0] ? err->msg : fo_code_message(err->code)) ||
        !cJSON_AddStringToObject(o, "code", fo_code_name(err->code))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *surf_methods_json(int include_admin)
{
    size_t n;
    const struct surf_method *t = surf_methods(&n);
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "methods");
    if (!o || !arr) {
        cJSON_Delete(o);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if ((t[i].flags & SURF_ADMIN) && !include_admin)
            continue;
        cJSON *m = cJSON_CreateObject();
        cJSON *schema = cJSON_Duplicate(surf_schema(&t[i]), 1);
        const char *flag = (t[i].flags & SURF_ADMIN)   ? "admin"
                           : (t[i].flags & SURF_WRITE) ? "write"
                                                       : "read";
        char http[128];
        snprintf(http, sizeof(http), "%s %s", t[i].http_method, t[i].http_path);
        if (!m || !schema || !cJSON_AddStringToObject(m, "name", t[i].name) ||
            !cJSON_AddStringToObject(m, "summary", t[i].summary) ||
            !cJSON_AddStringToObject(m, "access", flag) ||
            !cJSON_AddStringToObject(m, "http", http) ||
            !fo_json_add_int(m, "max_input", (long long)t[i].max_input)) {
            cJSON_Delete(m);
            cJSON_Delete(schema);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(m, "input_schema", schema);
        /* the result's declared shape, where one is (MCP's outputSchema) */
        const cJSON *os = surf_output_schema(&t[i]);
        cJSON *osd = os ? cJSON_Duplicate(os, 1) : NULL;
        if (os && !osd) {
            cJSON_Delete(m);
            cJSON_Delete(o);
            return NULL;
        }
        if (osd)
            cJSON_AddItemToObject(m, "output_schema", osd);
        cJSON_AddItemToArray(arr, m);
    }
    return o;
}

int surf_code_http(int code)
{
    static const int status[FO_E__COUNT] = {
        [FO_OK] = 200,
        [FO_E_NOMEM] = 500,
        [FO_E_INVALID] = 400,
        [FO_E_JSON] = 400,
        [FO_E_TOO_LARGE] = 413,
        [FO_E_NOT_FOUND] = 404,
        [FO_E_REDACTED] = 410,
        [FO_E_IO] = 500,
        [FO_E_CORRUPT] = 500,
        [FO_E_FOREIGN] = 500,
        [FO_E_TOO_NEW] = 500,
        [FO_E_BUSY] = 503,
        [FO_E_VERIFY] = 200,
        [FO_E_USAGE] = 400,
        [FO_E_EXISTS] = 409,
        [FO_E_UNAUTHORIZED] = 401,
        [FO_E_METHOD] = 405,
        [FO_E_DRAINING] = 503,
        [FO_E_UPSTREAM] = 502,
        [FO_E_INTERNAL] = 500,
        [FO_E_LOCKED] = 500,
        [FO_E_INPUT_TOO_LARGE] = 413,
        [FO_E_TIMEOUT] = 504,
        [FO_E_UNAVAILABLE] = 502,
        [FO_E_BUDGET] = 200,
        [FO_E_NOT_A_RUN] = 404,
        [FO_E_RUN_ELSEWHERE] = 409,
        [FO_E_STORAGE_MOVED] = 503,
        [FO_E_NO_GATE] = 400,
        [FO_E_GATE_DECIDED] = 400,
        [FO_E_MEDIA_TYPE] = 415,
        [FO_E_FORBIDDEN_ORIGIN] = 403,
        [FO_E_MISDIRECTED] = 421,
        [FO_E_STORE_DOWN] = 503,
    };
    return code >= 0 && code < FO_E__COUNT && status[code] ? status[code] : 500;
}
