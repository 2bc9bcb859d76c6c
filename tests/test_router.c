/* test_router: the lexical router's golden cases and rules, roster-order
 * independence, every default lane reachable by its own keywords, roster
 * validation errors, and `forum route` / `forum roster` on the CLI. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"
#include "tests/testutil.h"

static struct orch_roster *default_roster(void)
{
    struct orch_roster *r = NULL;
    struct fo_err err;
    cr_assert_eq(orch_roster_default(&r, &err), FO_OK, "%s", err.msg);
    return r;
}

static struct orch_roster *roster_from(const char *json, struct fo_err *err)
{
    struct orch_roster *r = NULL;
    int rc = orch_roster_parse(json, strlen(json), &r, err);
    return rc == FO_OK ? r : NULL;
}

/* Routes text and returns the canonical JSON of the result (malloc'd). */
static char *route_canon(const struct orch_roster *r, const char *text)
{
    struct orch_route rt;
    struct fo_err err;
    cr_assert_eq(orch_route(r, text, strlen(text), &rt, &err), FO_OK, "%s",
                 err.msg);
    cJSON *j = orch_route_json(&rt);
    cr_assert_not_null(j);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(j, &b, &err), FO_OK);
    cJSON_Delete(j);
    orch_route_release(&rt);
    return fo_buf_detach(&b, NULL);
}

/* decided (or "null") and confidence as printed. */
static void expect(const struct orch_roster *r, const char *text,
                   const char *decided, const char *confidence)
{
    char *s = route_canon(r, text);
    cJSON *j = NULL;
    cr_assert_eq(fo_json_parse(s, strlen(s), &j, NULL), FO_OK);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "decided");
    const cJSON *esc = cJSON_GetObjectItemCaseSensitive(j, "needs_escalation");
    if (decided) {
        cr_assert(cJSON_IsString(d), "%s: %s", text, s);
        cr_assert_str_eq(d->valuestring, decided, "%s: %s", text, s);
        cr_assert(cJSON_IsFalse(esc), "%s", s);
    } else {
        cr_assert(cJSON_IsNull(d), "%s: %s", text, s);
        cr_assert(cJSON_IsTrue(esc), "%s", s);
    }
    char want[64];
    snprintf(want, sizeof(want), "\"confidence\":%s,", confidence);
    cr_assert(strstr(s, want), "%s: want %s in %s", text, want, s);
    cJSON_Delete(j);
    free(s);
}

Test(router, golden_cases)
{
    struct orch_roster *r = default_roster();
    expect(r, "build the auth endpoint and the database schema", "backend",
           "0.6");
    expect(r, "build the api database server endpoint", "backend", "0.8");
    expect(r, "ship a login API", NULL, "0.2");
    expect(r, "api and react", NULL, "0");
    expect(r, "please make it nicer", NULL, "0");
    expect(r, "", NULL, "0");
    orch_roster_free(r);
}

Test(router, candidates_list_every_lane_sorted)
{
    struct orch_roster *r = default_roster();
    struct orch_route rt;
    cr_assert_eq(orch_route(r, "api and react", 13, &rt, NULL), FO_OK);
    cr_assert_eq(rt.n, r->n);
    cr_assert_str_eq(rt.candidates[0].agent, "backend"); /* tie: by name */
    cr_assert_str_eq(rt.candidates[1].agent, "frontend");
    for (size_t i = 1; i < rt.n; i++) {
        const struct orch_candidate *a = &rt.candidates[i - 1],
                                    *b = &rt.candidates[i];
        cr_assert(a->score > b->score ||
                  (a->score == b->score && strcmp(a->agent, b->agent) < 0));
    }
    orch_route_release(&rt);
    orch_roster_free(r);
}

Test(router, tokens_are_lowercased_alnum_runs)
{
    struct orch_roster *r = default_roster();
    /* punctuation and case separate and fold; "_" separates too */
    expect(r, "BUILD the API, Database/SERVER & end-point auth!", "backend",
           "0.8");
    expect(r, "apiary databases servers", NULL, "0"); /* whole tokens only */
    /* repeating a keyword counts it once */
    expect(r, "api api api api api", NULL, "0.2");
    orch_roster_free(r);
}

#define LANE(name, kws)                                                        \
    "{\"name\":\"" name "\",\"category\":\"c\",\"domain\":\"d\","              \
    "\"keywords\":" kws ",\"model_tier\":\"cheap\",\"executor\":\"stub\"}"

Test(router, margin_prints_rounded)
{
    /* 0.4 - 0.1 is 0.30000000000000004 in doubles; it is served as 0.3 */
    struct fo_err err;
    struct orch_roster *r = roster_from(
        "{\"lanes\":[" LANE(
            "a",
            "[\"a1\",\"a2\",\"a3\",\"a4\","
            "\"a5\"]") "," LANE("b",
                                "[\"b1\",\"b2\",\"b3\",\"b4\",\"b5\",\"b6\","
                                "\"b7\",\"b8\",\"b9\","
                                "\"b10\"]") "]}",
        &err);
    cr_assert_not_null(r, "%s", err.msg);
    expect(r, "a1 a2 b1", NULL, "0.3");
    cr_assert_eq(orch_round6(0.6 - 0.4), 0.2);
    cr_assert_eq(orch_round6(1.0 / 3.0), 0.333333);
    orch_roster_free(r);
}

Test(router, rule2_hit_count_moves_lane_to_head)
{
    /* b scores 1/3 (top), a 3/10; a has 3 hits, 2 more than b: a decides
     * with max(0.3, 0.5) and moves to the head of the candidates. */
    struct fo_err err;
    struct orch_roster *r = roster_from(
        "{\"lanes\":[" LANE(
            "a", "[\"a1\",\"a2\",\"a3\",\"a4\",\"a5\",\"a6\","
                 "\"a7\",\"a8\",\"a9\",\"a10\"]") "," LANE("b", "[\"b1\","
                                                                "\"b2\","
                                                                "\"b3\"]") "]}",
        &err);
    cr_assert_not_null(r, "%s", err.msg);
    expect(r, "a1 a2 a3 b1", "a", "0.5");
    struct orch_route rt;
    cr_assert_eq(orch_route(r, "a1 a2 a3 b1", 11, &rt, NULL), FO_OK);
    cr_assert_str_eq(rt.candidates[0].agent, "a");
    cr_assert_str_eq(rt.candidates[1].agent, "b");
    orch_route_release(&rt);
    /* only 2 hits: not enough, escalates with the margin 1/3 - 0.2 */
    expect(r, "a1 a2 b1", NULL, "0.133333");
    orch_roster_free(r);
}

Test(router, rule3_top_scored_leads_second_scored_on_hits)
{
    /* t: 4/10 = 0.4 (top score), s: 1/3 (second score), y: 3 hits of 100.
     * Rule 2 fails (t 4 hits, y 3: not 2 more); rule 3 holds (t 4 vs s 1). */
    char json[8192];
    int n = snprintf(
        json, sizeof(json),
        "{\"lanes\":[" LANE(
            "t",
            "[\"k1\",\"k2\",\"k3\",\"k4\","
            "\"t5\",\"t6\",\"t7\",\"t8\","
            "\"t9\",\"t10\"]") "," LANE("s",
                                        "[\"s1\","
                                        "\"s2\","
                                        "\"s3\"]") ","
                                                   "{\"name\":\"y\","
                                                   "\"category\":\"c\","
                                                   "\"domain\":\"d\","
                                                   "\"model_tier\":\"cheap\","
                                                   "\"executor\":\"stub\","
                                                   "\"keywords\":[\"k1\","
                                                   "\"k2\",\"k3\"");
    for (int i = 0; i < 97; i++)
        n += snprintf(json + n, sizeof(json) - (size_t)n, ",\"y%d\"", i);
    snprintf(json + n, sizeof(json) - (size_t)n, "]}]}");
    struct fo_err err;
    struct orch_roster *r = roster_from(json, &err);
    cr_assert_not_null(r, "%s", err.msg);
    expect(r, "k1 k2 k3 k4 s1", "t", "0.5");
    orch_roster_free(r);
}

Test(router, rule1_needs_top_and_margin)
{
    struct fo_err err;
    struct orch_roster *r =
        roster_from("{\"lanes\":[" LANE("a", "[\"a1\",\"a2\"]") "," LANE(
                        "b", "[\"b1\",\"b2\",\"b3\",\"b4\",\"b5\"]") "]}",
                    &err);
    cr_assert_not_null(r, "%s", err.msg);
    expect(r, "a1 a2", "a", "1");
    expect(r, "a1", "a", "0.5");        /* 0.5 >= 0.5 and margin 0.5 */
    expect(r, "a1 b1 b2", NULL, "0.1"); /* 0.5 vs 0.4: margin too small */
    orch_roster_free(r);
    /* one lane: second = 0 */
    r = roster_from("{\"lanes\":[" LANE("solo", "[\"x\",\"y\"]") "]}", &err);
    cr_assert_not_null(r, "%s", err.msg);
    expect(r, "x", "solo", "0.5");
    expect(r, "nothing", NULL, "0");
    orch_roster_free(r);
}

Test(router, every_default_lane_routes_from_its_keywords)
{
    struct orch_roster *r = default_roster();
    cr_assert_eq(r->n, 28);
    for (size_t i = 0; i < r->n; i++) {
        char text[4096] = "";
        size_t len = 0;
        for (size_t k = 0; k < r->lanes[i].n_keywords; k++)
            len += (size_t)snprintf(text + len, sizeof(text) - len, "%s ",
                                    r->lanes[i].keywords[k]);
        struct orch_route rt;
        cr_assert_eq(orch_route(r, text, len, &rt, NULL), FO_OK);
        cr_assert_not_null(rt.decided, "%s: escalated", r->lanes[i].name);
        cr_assert_str_eq(rt.decided, r->lanes[i].name);
        orch_route_release(&rt);
    }
    orch_roster_free(r);
}

Test(router, decision_never_depends_on_roster_order)
{
    struct orch_roster *r = default_roster();
    const char *texts[] = {
        "build the auth endpoint and the database schema",
        "api and react",
        "ship a login API",
        "research the evidence and capture notes in the pipeline",
        "gpu compute kernel shader effect",
        "review the docs",
        "workflow pipeline learn capture research",
    };
    size_t nt = sizeof(texts) / sizeof(texts[0]);
    char *want[sizeof(texts) / sizeof(texts[0])];
    for (size_t t = 0; t < nt; t++)
        want[t] = route_canon(r, texts[t]);
    srand(12345);
    for (int round = 0; round < 50; round++) {
        for (size_t i = r->n - 1; i > 0; i--) { /* Fisher-Yates */
            size_t j = (size_t)rand() % (i + 1);
            struct orch_lane tmp = r->lanes[i];
            r->lanes[i] = r->lanes[j];
            r->lanes[j] = tmp;
        }
        for (size_t t = 0; t < nt; t++) {
            char *got = route_canon(r, texts[t]);
            cr_assert_str_eq(got, want[t], "round %d: %s", round, texts[t]);
            free(got);
        }
    }
    for (size_t t = 0; t < nt; t++)
        free(want[t]);
    orch_roster_free(r);
}

Test(router, refuses_oversized_text)
{
    struct orch_roster *r = default_roster();
    size_t n = ORCH_ROUTE_TEXT_MAX + 1;
    char *big = malloc(n);
    memset(big, 'a', n);
    struct orch_route rt;
    struct fo_err err;
    cr_assert_eq(orch_route(r, big, n, &rt, &err), FO_E_INVALID);
    free(big);
    orch_roster_free(r);
}

/* ---- roster ------------------------------------------------------------ */

Test(roster, default_has_28_lanes_4_categories_and_domains)
{
    struct orch_roster *r = default_roster();
    cr_assert_eq(r->n, 28);
    const char *cats[] = {"engineering", "graphics", "support", "research"};
    for (size_t i = 0; i < r->n; i++) {
        int found = 0;
        for (size_t c = 0; c < 4; c++)
            found |= !strcmp(r->lanes[i].category, cats[c]);
        cr_assert(found, "%s", r->lanes[i].category);
        cr_assert_gt(strlen(r->lanes[i].domain), 10);
        cr_assert_eq(r->lanes[i].max_turns, 10);
    }
    /* its JSON form reads back the same */
    cJSON *j = orch_roster_json(r);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(j, &b, NULL), FO_OK);
    struct orch_roster *r2 = NULL;
    struct fo_err err;
    cr_assert_eq(orch_roster_parse(b.data, b.len, &r2, &err), FO_OK, "%s",
                 err.msg);
    cJSON *j2 = orch_roster_json(r2);
    cr_assert(cJSON_Compare(j, j2, 1));
    cJSON_Delete(j);
    cJSON_Delete(j2);
    fo_buf_release(&b);
    orch_roster_free(r2);
    orch_roster_free(r);
}

static void bad_roster(const char *lane, const char *want1, const char *want2)
{
    char json[2048];
    snprintf(json, sizeof(json), "{\"lanes\":[%s]}", lane);
    struct fo_err err;
    fo_err_clear(&err);
    struct orch_roster *r = NULL;
    cr_assert_eq(orch_roster_parse(json, strlen(json), &r, &err), FO_E_INVALID,
                 "accepted %s", lane);
    cr_assert(strstr(err.msg, want1), "want %s in: %s", want1, err.msg);
    cr_assert(strstr(err.msg, want2), "want %s in: %s", want2, err.msg);
}

#define OK_REST "\"domain\":\"d\",\"model_tier\":\"cheap\",\"executor\":\"cli\""

Test(roster, validation_errors_name_lane_and_field)
{
    bad_roster("{\"name\":\"x\"," OK_REST ",\"keywords\":[\"a\"]}",
               "lane \"x\"", "category: missing");
    bad_roster("{\"category\":\"c\"," OK_REST ",\"keywords\":[\"a\"]}",
               "lane #1", "name: missing");
    bad_roster("{\"name\":\"x\",\"category\":\"c\"," OK_REST
               ",\"keywords\":[]}",
               "lane \"x\"", "keywords: must be a non-empty list");
    bad_roster("{\"name\":\"x\",\"category\":\"c\"," OK_REST
               ",\"keywords\":\"api\"}",
               "lane \"x\"", "keywords: must be a non-empty list");
    bad_roster("{\"name\":\"x\",\"category\":\"c\"," OK_REST "}", "lane \"x\"",
               "keywords: missing");
    bad_roster("{\"name\":\"x\",\"category\":\"c\"," OK_REST
               ",\"keywords\":[\"ok\",\"Two words\"]}",
               "lane \"x\"", "keywords[1]");
    bad_roster("{\"name\":\"x\",\"category\":\"c\"," OK_REST
               ",\"keywords\":[\"API\"]}",
               "lane \"x\"", "keywords[0]");
    bad_roster("{\"name\":\"x\",\"category\":\"c\"," OK_REST
               ",\"keywords\":[\"a\",\"a\"]}",
               "lane \"x\"", "keywords");
    bad_roster("{\"name\":\"x\",\"category\":\"c\",\"domain\":\"d\","
               "\"model_tier\":\"huge\",\"executor\":\"cli\","
               "\"keywords\":[\"a\"]}",
               "lane \"x\"", "model_tier");
    bad_roster("{\"name\":\"x\",\"category\":\"c\",\"domain\":\"d\","
               "\"model_tier\":\"cheap\",\"executor\":\"magic\","
               "\"keywords\":[\"a\"]}",
               "lane \"x\"", "executor: unknown executor");
    bad_roster("{\"name\":\"x\",\"category\":\"c\",\"domain\":\"two\\nlines\","
               "\"model_tier\":\"cheap\",\"executor\":\"cli\","
               "\"keywords\":[\"a\"]}",
               "lane \"x\"", "domain");
    bad_roster("{\"name\":\"x\",\"category\":\"c\"," OK_REST
               ",\"keywords\":[\"a\"],\"max_turns\":0}",
               "lane \"x\"", "max_turns");
    bad_roster(
        "{\"name\":\"x\",\"category\":\"c\"," OK_REST ",\"keywords\":[\"a\"]},"
        "{\"name\":\"x\",\"category\":\"c\"," OK_REST ",\"keywords\":[\"b\"]}",
        "lane \"x\"", "name: duplicate");
    bad_roster("7", "lane #1", "must be an object");
    struct fo_err err;
    struct orch_roster *r = NULL;
    cr_assert_eq(orch_roster_parse("{\"lanes\":[]}", 12, &r, &err),
                 FO_E_INVALID);
    cr_assert_eq(orch_roster_parse("{\"lanes\":[", 10, &r, &err), FO_E_JSON);
    cr_assert_eq(orch_roster_load("/nonexistent/roster.json", &r, &err),
                 FO_E_NOT_FOUND);
}

Test(roster, user_roster_may_use_any_category)
{
    struct fo_err err;
    struct orch_roster *r = roster_from(
        "{\"lanes\":[{\"name\":\"chef\",\"category\":\"kitchen\","
        "\"domain\":\"Cooking\",\"keywords\":[\"soup\"],\"model_tier\":"
        "\"frontier\",\"executor\":\"default\",\"max_turns\":3}]}",
        &err);
    cr_assert_not_null(r, "%s", err.msg);
    cr_assert_eq(r->lanes[0].max_turns, 3);
    cr_assert_eq(r->lanes[0].tier, ORCH_TIER_FRONTIER);
    cr_assert_eq(r->lanes[0].executor, ORCH_EXEC_DEFAULT);
    orch_roster_free(r);
}

/* ---- the CLI ----------------------------------------------------------- */

Test(router_cli, route_json_is_the_method_result)
{
    struct tu_run r = tu_forumv(NULL, "route", "--json",
                                "build the api database server endpoint", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = tu_run_json(&r);
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(j, "decided")->valuestring, "backend");
    cr_assert(strstr(r.out, "\"confidence\":0.8,"), "%s", r.out);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "candidates")),
        28);
    cJSON_Delete(j);
    tu_run_free(&r);
    r = tu_forumv(NULL, "route", "ship", "a", "login", "API", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "escalate"), "%s", r.out);
    cr_assert(strstr(r.out, "0.2"), "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "route", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    r = tu_forumv(NULL, "route", "--help", NULL);
    cr_assert_eq(r.status, 0);
    tu_run_free(&r);
}

Test(router_cli, roster_prints_and_validates)
{
    struct tu_run r = tu_forumv(NULL, "roster", "--json", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = tu_run_json(&r);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "lanes")), 28);
    cJSON_Delete(j);
    tu_run_free(&r);
    char *dir = tu_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/roster.json", dir);
    const char *bad = "{\"lanes\":[{\"name\":\"x\",\"category\":\"c\","
                      "\"domain\":\"d\",\"keywords\":[\"a\"],"
                      "\"model_tier\":\"huge\",\"executor\":\"cli\"}]}";
    cr_assert_eq(tu_write_file(path, bad, strlen(bad)), 0);
    r = tu_forumv(NULL, "roster", "--roster", path, NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "lane \"x\": model_tier"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "route", "--roster", path, "x", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    tu_rmrf(dir);
}
