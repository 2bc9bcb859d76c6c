/* test_planner: plans compiled into waves (Kahn layering, byte order), and
 * every kind of bad plan refused with the tasks named. */
#include <string.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"
#include "tests/testutil.h"

static struct orch_roster *roster;

static void setup(void)
{
    struct fo_err err;
    cr_assert_eq(orch_roster_default(&roster, &err), FO_OK);
}

static void teardown(void)
{
    orch_roster_free(roster);
}

static int compile(const char *json, struct orch_plan **p, struct fo_err *err)
{
    cJSON *plan = NULL;
    cr_assert_eq(fo_json_parse(json, strlen(json), &plan, err), FO_OK, "%s",
                 json);
    fo_err_clear(err);
    int rc = orch_plan_compile(plan, roster, p, err);
    cJSON_Delete(plan);
    return rc;
}

/* The waves as "[[T1,T3],[T2],[T4]]". */
static void waves_str(const struct orch_plan *p, char *out, size_t size)
{
    size_t n = (size_t)snprintf(out, size, "[");
    for (size_t w = 0; w < p->n_waves; w++) {
        n += (size_t)snprintf(out + n, size - n, "%s[", w ? "," : "");
        for (size_t k = p->wave_start[w]; k < p->wave_start[w + 1]; k++)
            n += (size_t)snprintf(out + n, size - n, "%s%s",
                                  k > p->wave_start[w] ? "," : "",
                                  p->tasks[p->order[k]].id);
        n += (size_t)snprintf(out + n, size - n, "]");
    }
    snprintf(out + n, size - n, "]");
}

#define T(id, deps)                                                            \
    "{\"id\":\"" id "\",\"agent\":\"backend\",\"instruction\":\"do " id        \
    "\",\"depends_on\":" deps "}"

static void expect_waves(const char *json, const char *want)
{
    struct orch_plan *p = NULL;
    struct fo_err err;
    cr_assert_eq(compile(json, &p, &err), FO_OK, "%s", err.msg);
    char got[1024];
    waves_str(p, got, sizeof(got));
    cr_assert_str_eq(got, want);
    orch_plan_free(p);
}

static void expect_error(const char *json, const char *want1, const char *want2)
{
    struct orch_plan *p = NULL;
    struct fo_err err;
    cr_assert_eq(compile(json, &p, &err), FO_E_INVALID, "accepted %s", json);
    cr_assert(strstr(err.msg, want1), "want %s in: %s", want1, err.msg);
    if (want2)
        cr_assert(strstr(err.msg, want2), "want %s in: %s", want2, err.msg);
}

TestSuite(planner, .init = setup, .fini = teardown);

Test(planner, golden_waves)
{
    expect_waves("{\"tasks\":[" T("T1", "[]") "," T("T2", "[\"T1\"]") "," T(
                     "T3", "[]") "," T("T4", "[\"T2\",\"T3\"]") "]}",
                 "[[T1,T3],[T2],[T4]]");
    /* given in another order: the same waves */
    expect_waves("{\"tasks\":[" T("T4", "[\"T2\",\"T3\"]") "," T(
                     "T3", "[]") "," T("T2", "[\"T1\"]") "," T("T1", "[]") "]}",
                 "[[T1,T3],[T2],[T4]]");
}

Test(planner, waves_sort_by_id_in_byte_order)
{
    expect_waves("{\"tasks\":[" T("T2", "[]") "," T("T10", "[]") "," T(
                     "a", "[]") "," T("B", "[]") "]}",
                 "[[B,T10,T2,a]]");
}

Test(planner, order_edges_and_typed_json)
{
    struct orch_plan *p = NULL;
    struct fo_err err;
    cr_assert_eq(
        compile("{\"tasks\":[" T("A", "[]") "," T(
                    "B",
                    "[{\"id\":\"A\",\"type\":"
                    "\"order\"}]") "," T("C", "[\"A\",{\"id\":\"B\"}]") "]}",
                &p, &err),
        FO_OK, "%s", err.msg);
    char got[256];
    waves_str(p, got, sizeof(got));
    cr_assert_str_eq(got, "[[A],[B],[C]]");
    cJSON *j = orch_plan_json(p);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(
        fo_json_canon(cJSON_GetObjectItemCaseSensitive(j, "edges"), &b, NULL),
        FO_OK);
    cr_assert_str_eq(b.data,
                     "[{\"from\":\"A\",\"to\":\"B\",\"type\":\"order\"},"
                     "{\"from\":\"A\",\"to\":\"C\",\"type\":\"data\"},"
                     "{\"from\":\"B\",\"to\":\"C\",\"type\":\"data\"}]");
    fo_buf_release(&b);
    cJSON_Delete(j);
    orch_plan_free(p);
}

Test(planner, cycles_are_named)
{
    /* T3 only hangs below the cycle: it is not named */
    expect_error(
        "{\"tasks\":[" T("T1", "[\"T2\"]") "," T("T2", "[\"T1\"]") "," T(
            "T3", "[\"T1\"]") "," T("T0", "[]") "]}",
        "cycle among tasks T1, T2", NULL);
    struct orch_plan *p = NULL;
    struct fo_err err;
    cr_assert_eq(compile("{\"tasks\":[" T("T1", "[\"T2\"]") "," T(
                             "T2", "[\"T1\"]") "," T("T3", "[\"T1\"]") "]}",
                         &p, &err),
                 FO_E_INVALID);
    cr_assert_null(strstr(err.msg, "T3"), "%s", err.msg);
    expect_error("{\"tasks\":[" T("S", "[\"S\"]") "]}", "cycle among tasks S",
                 NULL);
}

Test(planner, unknown_dependency_duplicate_id_unknown_agent)
{
    expect_error("{\"tasks\":[" T("T1", "[]") "," T("T2", "[\"T9\"]") "]}",
                 "task \"T2\"", "unknown task \"T9\"");
    expect_error(
        "{\"tasks\":[" T("T1", "[]") "," T("T2", "[]") "," T("T1", "[]") "]}",
        "duplicate task id \"T1\"", "#1 and #3");
    expect_error("{\"tasks\":[{\"id\":\"T1\",\"agent\":\"wizard\","
                 "\"instruction\":\"x\"}]}",
                 "task \"T1\"", "unknown agent \"wizard\"");
}

Test(planner, malformed_plans)
{
    expect_error("{\"tasks\":[]}", "tasks: must be a non-empty list", NULL);
    expect_error("{\"steps\":[]}", "tasks: must be a non-empty list", NULL);
    expect_error("{\"tasks\":[7]}", "task #1", "must be an object");
    expect_error("{\"tasks\":[{\"agent\":\"backend\",\"instruction\":\"x\"}]}",
                 "task #1", "id: missing");
    expect_error("{\"tasks\":[{\"id\":\"A\",\"agent\":\"backend\"}]}",
                 "task \"A\"", "instruction: missing");
    expect_error("{\"tasks\":[{\"id\":\"A\",\"agent\":\"backend\","
                 "\"instruction\":\"\"}]}",
                 "task \"A\"", "instruction");
    expect_error("{\"tasks\":[" T("A", "\"B\"") "]}", "task \"A\"",
                 "depends_on: must be a list");
    expect_error("{\"tasks\":[" T("A", "[]") "," T(
                     "B", "[{\"id\":\"A\",\"type\":\"soft\"}]") "]}",
                 "task \"B\"", "type must be");
    expect_error("{\"tasks\":[" T("A", "[]") "," T("B", "[\"A\",\"A\"]") "]}",
                 "task \"B\"", "\"A\" twice");
    expect_error("{\"tasks\":[" T("A", "[5]") "]}", "task \"A\"",
                 "depends_on[0]");
}

Test(planner, large_chain_and_fan)
{
    /* 2000 tasks: T0000 <- T0001 <- ... in a chain of 1000, 1000 in wave 0 */
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    fo_buf_puts(&b, "{\"tasks\":[");
    for (int i = 0; i < 2000; i++) {
        if (i < 1000 && i > 0)
            fo_buf_printf(&b,
                          "%s{\"id\":\"C%04d\",\"agent\":\"backend\","
                          "\"instruction\":\"x\",\"depends_on\":[\"C%04d\"]}",
                          i ? "," : "", i, i - 1);
        else
            fo_buf_printf(&b,
                          "%s{\"id\":\"%c%04d\",\"agent\":\"backend\","
                          "\"instruction\":\"x\"}",
                          i ? "," : "", i < 1000 ? 'C' : 'F', i);
    }
    fo_buf_puts(&b, "]}");
    struct orch_plan *p = NULL;
    struct fo_err err;
    cr_assert_eq(compile(b.data, &p, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(p->n_waves, 1000);
    cr_assert_eq(p->wave_start[1] - p->wave_start[0], 1001);
    orch_plan_free(p);
    fo_buf_release(&b);
}
