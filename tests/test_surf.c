/* test_surf: the handler table: every row well formed, the dispatcher's
 * schema checks before any handler runs, and the shapes of a few results. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"

static struct ledger *open_dir(const char *dir)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK);
    return l;
}

static int call(struct ledger *l, const char *method, const char *input,
                cJSON **out, struct fo_err *err)
{
    const struct surf_method *m = surf_find(method);
    cr_assert_not_null(m, "no method %s", method);
    cJSON *in = NULL;
    if (input)
        cr_assert_eq(fo_json_parse(input, strlen(input), &in, err), FO_OK);
    struct surf_ctx ctx = {.ledger = l};
    *out = NULL;
    int rc = surf_call(&ctx, m, in, out, err);
    cJSON_Delete(in);
    return rc;
}

Test(surf_table, rows_are_well_formed)
{
    size_t n;
    const struct surf_method *t = surf_methods(&n);
    cr_assert_gt(n, 10);
    for (size_t i = 0; i < n; i++) {
        for (const char *p = t[i].name; *p; p++)
            cr_assert((*p >= 'a' && *p <= 'z') || *p == '_', "%s", t[i].name);
        const cJSON *s = surf_schema(&t[i]);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
        cr_assert(cJSON_IsString(type) && !strcmp(type->valuestring, "object"),
                  "%s: input schema must be an object schema", t[i].name);
        cr_assert(t[i].max_input > 0);
        cr_assert(!strcmp(t[i].http_method, "GET") ||
                  !strcmp(t[i].http_method, "POST"));
        cr_assert_eq(t[i].http_path[0], '/');
        cr_assert_eq(surf_find(t[i].name), &t[i], "duplicate %s", t[i].name);
    }
}

Test(surf_table, validator_refuses_before_the_handler)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir);
    cJSON *out = NULL;
    struct fo_err err;
    cr_assert_eq(call(l, "ledger_get", "{}", &out, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "seq: required"), "%s", err.msg);
    cr_assert_eq(call(l, "ledger_get", "{\"seq\":\"1\"}", &out, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "seq: must be integer"), "%s", err.msg);
    cr_assert_eq(call(l, "ledger_get", "{\"seq\":1.5}", &out, &err),
                 FO_E_INVALID);
    cr_assert_eq(call(l, "ledger_get", "{\"seq\":-1}", &out, &err),
                 FO_E_INVALID);
    cr_assert_eq(call(l, "ledger_get", "{\"seq\":1,\"x\":1}", &out, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "x: unknown field"), "%s", err.msg);
    cr_assert_eq(call(l, "ledger_range", "{\"limit\":1001}", &out, &err),
                 FO_E_INVALID);
    cr_assert_eq(call(l, "ledger_append",
                      "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":1,"
                      "\"parent\":\"0\"}",
                      &out, &err),
                 FO_E_INVALID);
    int64_t count = -1;
    cr_assert_eq(ledger_count(l, &count, &err), FO_OK);
    cr_assert_eq(count, 0, "nothing was appended");
    ledger_close(l);
    tu_rmrf(dir);
}

Test(surf_methods, status_and_append_shapes)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir);
    cJSON *out = NULL;
    struct fo_err err;
    cr_assert_eq(call(l, "ledger_append",
                      "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":{\"x\":1},"
                      "\"parent\":null}",
                      &out, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_eq(cJSON_GetArraySize(out), 9);
    cJSON_Delete(out);
    cr_assert_eq(call(l, "status", NULL, &out, &err), FO_OK, "%s", err.msg);
    const char *keys[] = {"entries", "checkpoint", "size", "signed_size",
                          "uptime_s"};
    for (size_t i = 0; i < 5; i++)
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(out, keys[i]),
                           "status lacks %s", keys[i]);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(out, "entries")->valuedouble,
                 1);
    cr_assert_eq(
        strlen(
            cJSON_GetObjectItemCaseSensitive(out, "checkpoint")->valuestring),
        64);
    cJSON_Delete(out);
    cr_assert_eq(call(l, "health", NULL, &out, &err), FO_OK);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cJSON_Delete(out);
    cr_assert_eq(call(l, "ledger_verify", "{\"deep\":true}", &out, &err),
                 FO_OK);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "deep")));
    cJSON_Delete(out);
    ledger_close(l);
    tu_rmrf(dir);
}

/* Without a host hook (forum mcp, the CLI) `health` checks the ledger's
 * own files: once ledger.db is gone from under the handle, it says so, as
 * every write then does. */
Test(surf_methods, health_fails_once_the_ledger_files_are_gone)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir);
    cJSON *out = NULL;
    struct fo_err err;
    cr_assert_eq(call(l, "ledger_append",
                      "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":{}}", &out,
                      &err),
                 FO_OK, "%s", err.msg);
    cJSON_Delete(out);
    cr_assert_eq(call(l, "health", NULL, &out, &err), FO_OK);
    cJSON_Delete(out);
    char p[512];
    snprintf(p, sizeof(p), "%s/ledger.db", dir);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(call(l, "health", NULL, &out, &err), FO_E_STORAGE_MOVED);
    cr_assert_null(out);
    cr_assert(strstr(err.msg, "ledger.db"), "%s", err.msg);
    cr_assert_eq(call(l, "ledger_append",
                      "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":{}}", &out,
                      &err),
                 FO_E_STORAGE_MOVED);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(surf_methods, list_hides_admin_unless_asked)
{
    cJSON *pub = surf_methods_json(0), *all = surf_methods_json(1);
    int n_pub =
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(pub, "methods"));
    int n_all =
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(all, "methods"));
    cr_assert_lt(n_pub, n_all, "ledger_redact is admin-only");
    cJSON_Delete(pub);
    cJSON_Delete(all);
}

Test(surf_errors, a_message_cut_by_the_buffer_stays_valid_utf8)
{
    /* 300 copies of a 3-byte character: the 256-byte buffer cuts one */
    char big[1024];
    size_t n = 0;
    for (int i = 0; i < 300; i++) {
        memcpy(big + n, "\xe2\x82\xac", 3);
        n += 3;
    }
    big[n] = '\0';
    for (int shift = 0; shift < 3; shift++) {
        struct fo_err err;
        fo_err_set(&err, FO_E_INVALID, "%.*s%s", shift, "xx", big);
        cr_assert(fo_utf8_valid(err.msg, strlen(err.msg)),
                  "shift %d: invalid UTF-8 left", shift);
        cr_assert_gt(strlen(err.msg), 250);
        cJSON *o = surf_error_json(&err);
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        cr_assert_eq(fo_json_canon(o, &b, NULL), FO_OK);
        fo_buf_release(&b);
        cJSON_Delete(o);
    }
}

/* The HTTP status of each code lives in the surfaces (surf_code_http), not
 * the ledger: spot checks, and unknown codes are 500. */
Test(surf, http_status_of_codes)
{
    cr_assert_eq(surf_code_http(FO_OK), 200);
    cr_assert_eq(surf_code_http(FO_E_INVALID), 400);
    cr_assert_eq(surf_code_http(FO_E_UNAUTHORIZED), 401);
    cr_assert_eq(surf_code_http(FO_E_NOT_FOUND), 404);
    cr_assert_eq(surf_code_http(FO_E_METHOD), 405);
    cr_assert_eq(surf_code_http(FO_E_RUN_ELSEWHERE), 409);
    cr_assert_eq(surf_code_http(FO_E_REDACTED), 410);
    cr_assert_eq(surf_code_http(FO_E_INPUT_TOO_LARGE), 413);
    cr_assert_eq(surf_code_http(FO_E_UPSTREAM), 502);
    cr_assert_eq(surf_code_http(FO_E_STORAGE_MOVED), 503);
    cr_assert_eq(surf_code_http(FO_E_TIMEOUT), 504);
    cr_assert_eq(surf_code_http(-1), 500);
    cr_assert_eq(surf_code_http(FO_E__COUNT), 500);
}

/* ledger_verify reports its progress where the host shares it (the
 * dashboard polls `status` for it): done and total at the end, reports
 * along the way, nothing running once it returned. */
Test(surf_methods, verify_reports_its_progress)
{
    char *dir = tu_tmpdir();
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK);
    enum { N = 20000, B = 1000 };
    static struct ledger_append reqs[B];
    for (int k = 0; k < N / B; k++) {
        for (int i = 0; i < B; i++)
            reqs[i] = (struct ledger_append){.actor = "t",
                                             .kind = "step",
                                             .parent = LEDGER_NO_PARENT,
                                             .body = "{}",
                                             .body_len = 2};
        cr_assert_eq(ledger_append_batch(l, reqs, B, &err), FO_OK);
    }
    struct surf_verify_progress p = {0};
    struct surf_ctx ctx = {.ledger = l, .verify = &p};
    cJSON *out = NULL;
    cJSON *in = cJSON_Parse("{\"deep\":true}");
    cr_assert_eq(surf_call(&ctx, surf_find("ledger_verify"), in, &out, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    cr_assert_eq(atomic_load(&p.done), N);
    cr_assert_eq(atomic_load(&p.total), N);
    cr_assert_geq(atomic_load(&p.reports), 3, "reports: %lld",
                  (long long)atomic_load(&p.reports));
    cr_assert_eq(atomic_load(&p.running), 0);
    cr_assert_eq(atomic_load(&p.deep), 1);
    cJSON_Delete(out);
    /* with nothing running, status says nothing of it */
    cr_assert_eq(surf_call(&ctx, surf_find("status"), NULL, &out, &err), FO_OK);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(out, "verify"));
    cJSON_Delete(out);
    /* and while one runs, it does */
    atomic_store(&p.running, 1);
    cr_assert_eq(surf_call(&ctx, surf_find("status"), NULL, &out, &err), FO_OK);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(out, "verify");
    cr_assert_not_null(v);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(v, "total")->valuedouble, N);
    cJSON_Delete(out);
    cJSON_Delete(in);
    ledger_close(l);
    tu_rmrf(dir);
}

/* GET /methods (the `methods` method) serves each declared output schema
 * beside the input schema, as MCP's tools/list does. */
Test(surf_table, methods_carry_output_schemas)
{
    cJSON *o = surf_methods_json(1);
    cr_assert_not_null(o);
    int with = 0, without = 0;
    const cJSON *m;
    cJSON_ArrayForEach (m, cJSON_GetObjectItemCaseSensitive(o, "methods")) {
        const char *name =
            cJSON_GetObjectItemCaseSensitive(m, "name")->valuestring;
        const cJSON *os = cJSON_GetObjectItemCaseSensitive(m, "output_schema");
        const cJSON *want = surf_output_schema(surf_find(name));
        cr_assert_eq(os != NULL, want != NULL, "%s", name);
        if (os)
            cr_assert(cJSON_Compare(os, want, 1), "%s", name);
        with += os != NULL;
        without += os == NULL;
    }
    cr_assert_gt(with, 10);
    cr_assert_gt(without, 0);
    cJSON_Delete(o);
}
