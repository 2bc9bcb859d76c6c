/* test_grade: grading, the gradable export, `forum mine`, proof lanes,
 * vocabulary gaps and bench-deep-verify, with the cases the reference's
 * own tests state: a grade can fail; one independent check fails
 * --min-checks 2; a producer grading itself does not count; a row
 * re-derives from the ledger's root and a forged grade or body does not;
 * an unknown lane, an over-reaching scope and an unknown domain are
 * refused and witnessed, never dropped; a gap below its threshold
 * witnesses nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "daemon/orch_grade.h"
#include "daemon/orch_lanes.h"
#include "daemon/orch_views.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/proof.h"
#include "tests/testutil.h"

static struct ledger *open_new(char **dir)
{
    *dir = tu_tmpdir();
    struct ledger *l = NULL;
    cr_assert_eq(ledger_open(*dir, LEDGER_OPEN_CREATE, NULL, &l, NULL), FO_OK);
    return l;
}

static int64_t put(struct ledger *l, const char *actor, const char *kind,
                   int64_t parent, const char *body)
{
    struct ledger_entry e;
    struct fo_err err;
    cr_assert_eq(
        ledger_append(l, actor, kind, parent, body, strlen(body), &e, &err),
        FO_OK, "%s", err.msg);
    return e.seq;
}

/* A run as forum's engine writes it: request, result of a lane, the
 * validator's verdict (pass as given), and the synthesizer's answer. */
static int64_t run_with_verdict(struct ledger *l, int pass)
{
    int64_t req = put(l, "client", "request", LEDGER_NO_PARENT,
                      "{\"request\":\"sort a list\",\"via\":\"submit\"}");
    int64_t res = put(l, "backend", "result", req,
                      "{\"id\":\"T1\",\"model\":\"m\",\"ok\":true}");
    put(l, "validator", "verdict", res,
        pass ? "{\"by\":\"validator\",\"id\":\"T1\",\"judged\":true,"
               "\"pass\":true}"
             : "{\"by\":\"validator\",\"id\":\"T1\",\"judged\":true,"
               "\"pass\":false}");
    put(l, "synthesizer", "answer", req, "{\"answer\":\"sorted\"}");
    return req;
}

static const char *label(const cJSON *g)
{
    return cJSON_GetObjectItemCaseSensitive(g, "label")->valuestring;
}

Test(grade, one_independent_check_fails_min_checks_2)
{
    char *dir;
    struct ledger *l = open_new(&dir);
    int64_t run = run_with_verdict(l, 1);
    cJSON *g = NULL;
    struct fo_err err;
    cr_assert_eq(orch_grade(l, run, 2, &g, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(label(g), "FAIL");
    cr_assert_eq(tu_num(g, "checks"), 1);
    cr_assert_eq(tu_num(g, "refuted"), 0);
    cJSON_Delete(g);
    cr_assert_eq(orch_grade(l, run, 1, &g, &err), FO_OK);
    cr_assert_str_eq(label(g), "PASS");
    cJSON_Delete(g);
    /* a second independent check makes the default pass; a refuting one
     * fails it whatever the count */
    put(l, "verifier", "verification", run, "{\"ok\":true,\"source\":\"ci\"}");
    cr_assert_eq(orch_grade(l, run, 2, &g, &err), FO_OK);
    cr_assert_str_eq(label(g), "PASS");
    cJSON_Delete(g);
    put(l, "judge", "intent_judgment", run, "{\"ok\":false}");
    cr_assert_eq(orch_grade(l, run, 2, &g, &err), FO_OK);
    cr_assert_str_eq(label(g), "FAIL");
    cr_assert_eq(tu_num(g, "refuted"), 1);
    cr_assert_float_eq(
        cJSON_GetObjectItemCaseSensitive(g, "reward")->valuedouble, 0.666667,
        1e-9);
    cJSON_Delete(g);
    ledger_close(l);
    /* on the command line: the label says FAIL (exit 0, as the
     * reference's) */
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "grade", "0",
                                "--min-checks", "2", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    g = tu_run_json(&r);
    cr_assert_str_eq(label(g), "FAIL");
    cJSON_Delete(g);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "grade", "2", (char *)NULL);
    cr_assert_eq(r.status, 1, "a verdict is not a run: %s", r.err);
    cr_assert(strstr(r.err, "not a run"), "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(grade, a_producer_grading_itself_is_refused)
{
    char *dir;
    struct ledger *l = open_new(&dir);
    int64_t req = put(l, "client", "request", LEDGER_NO_PARENT,
                      "{\"request\":\"x\",\"via\":\"submit\"}");
    int64_t res =
        put(l, "worker", "result", req, "{\"id\":\"T1\",\"ok\":true}");
    int64_t self =
        put(l, "worker", "verdict", res, "{\"id\":\"T1\",\"ok\":true}");
    /* a synthesizer's answer makes it a producer: its own check is set
     * aside too */
    put(l, "synthesizer", "answer", req, "{\"answer\":\"done\"}");
    put(l, "synthesizer", "verification", req, "{\"ok\":true}");
    cJSON *g = NULL;
    cr_assert_eq(orch_grade(l, req, 0, &g, NULL), FO_OK);
    cr_assert_str_eq(label(g), "UNVERIFIABLE");
    cr_assert_eq(tu_num(g, "checks"), 0);
    const cJSON *sg = cJSON_GetObjectItemCaseSensitive(g, "self_graded");
    cr_assert_eq(cJSON_GetArraySize(sg), 2);
    cr_assert_eq(cJSON_GetArrayItem(sg, 0)->valuedouble, (double)self);
    cJSON_Delete(g);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(grade, a_stub_run_is_unverifiable_not_pass)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "submit",
                                "fix the crash in the parser", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "grade", (char *)NULL);
    cr_assert_eq(r.status, 0);
    cJSON *g = tu_run_json(&r);
    /* the stub's verdict says nobody judged: integrity is not success */
    cr_assert_str_eq(label(g), "UNVERIFIABLE");
    cr_assert_eq(tu_num(g, "run"), 0);
    cJSON_Delete(g);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* Seals a changed row again (what a forger would do). */
static void reseal(cJSON *row)
{
    cJSON_DeleteItemFromObjectCaseSensitive(row, "row_hash");
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(row, &b, NULL), FO_OK);
    uint8_t h[32];
    char hex[65];
    fo_sha256(b.data, b.len, h);
    fo_hex(h, 32, hex);
    cJSON_AddStringToObject(row, "row_hash", hex);
    fo_buf_release(&b);
}

static void expect_forged(const cJSON *row, const char *what)
{
    struct fo_err err;
    cr_assert_eq(orch_gradable_check(row, &err), FO_E_VERIFY, "%s passed",
                 what);
    cr_assert(strstr(err.msg, what), "%s: %s", what, err.msg);
}

Test(grade, export_rows_verify_against_the_ledgers_root)
{
    char *dir;
    struct ledger *l = open_new(&dir);
    run_with_verdict(l, 0); /* another run first: proofs are not trivial */
    int64_t run = run_with_verdict(l, 1);
    put(l, "verifier", "verification", run, "{\"ok\":true}");
    cJSON *row = NULL;
    struct fo_err err;
    cr_assert_eq(orch_gradable(l, run, 2, &row, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(row, "schema"), "forum.gradable-trajectory/1");
    cr_assert_str_eq(tu_str(row, "prompt"), "sort a list");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(row, "oracle");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(row, "trajectory");
    cr_assert_str_eq(tu_str(t, "answer"), "sorted");
    cr_assert_str_eq(label(cJSON_GetObjectItemCaseSensitive(row, "grade")),
                     "PASS");
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "entries")), 5);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(row, "witnessed"));
    /* the row holds on its own, and its root is the ledger's */
    cr_assert_eq(orch_gradable_check(row, &err), FO_OK, "%s", err.msg);
    uint8_t root[32];
    char hex[65];
    cr_assert_eq(ledger_root(l, tu_num(o, "size"), root, NULL), FO_OK);
    fo_hex(root, 32, hex);
    cr_assert_str_eq(hex, tu_str(o, "root"));
    /* the same ledger gives the same row */
    cJSON *again = NULL;
    cr_assert_eq(orch_gradable(l, run, 2, &again, NULL), FO_OK);
    cr_assert_str_eq(tu_str(again, "row_hash"), tu_str(row, "row_hash"));
    cJSON_Delete(again);
    /* a signed checkpoint that covers the run goes in the row */
    struct ledger_checkpoint cp = {0};
    cr_assert_eq(ledger_checkpoint_sign(l, -1, &cp, NULL), FO_OK);
    cr_assert_eq(orch_gradable(l, run, 2, &again, NULL), FO_OK);
    cr_assert_str_eq(
        tu_str(cJSON_GetObjectItemCaseSensitive(again, "oracle"), "checkpoint"),
        cp.note);
    cr_assert_eq(orch_gradable_check(again, NULL), FO_OK);
    ledger_checkpoint_release(&cp);
    cJSON_Delete(again);

    /* forgeries, each sealed again: a flipped check body */
    cJSON *f = cJSON_Duplicate(row, 1);
    cJSON *body = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetObjectItemCaseSensitive(f, "oracle"),
                               "check_payloads"),
                           0),
        "body");
    cJSON_ReplaceItemInObjectCaseSensitive(body, "pass", cJSON_CreateFalse());
    reseal(f);
    expect_forged(f, "body");
    cJSON_Delete(f);
    /* a better label than the bound checks give */
    f = cJSON_Duplicate(row, 1);
    cJSON *g = cJSON_GetObjectItemCaseSensitive(f, "grade");
    cJSON_ReplaceItemInObjectCaseSensitive(g, "min_checks",
                                           cJSON_CreateNumber(3));
    reseal(f);
    expect_forged(f, "grade");
    cJSON_Delete(f);
    /* a refuting check left out */
    f = cJSON_Duplicate(row, 1);
    cJSON_DeleteItemFromArray(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(f, "oracle"), "check_payloads"),
        0);
    reseal(f);
    expect_forged(f, "check_payloads");
    cJSON_Delete(f);
    /* an entry's actor changed (the grader made the producer) */
    f = cJSON_Duplicate(row, 1);
    cJSON *e = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(f, "trajectory"), "entries"),
        2);
    cJSON_ReplaceItemInObjectCaseSensitive(e, "actor",
                                           cJSON_CreateString("backend"));
    reseal(f);
    expect_forged(f, "entry hash");
    cJSON_Delete(f);
    /* not sealed again */
    f = cJSON_Duplicate(row, 1);
    cJSON_ReplaceItemInObjectCaseSensitive(f, "prompt",
                                           cJSON_CreateString("other"));
    expect_forged(f, "row_hash");
    cJSON_Delete(f);
    cJSON_Delete(row);
    ledger_close(l);

    /* the CLI: a file of rows checked against this ledger's root */
    char out[4096];
    snprintf(out, sizeof(out), "%s/rows.jsonl", dir);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "export-gradable", "4",
                                "--out", out, (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "export-gradable", "--check", out,
                  (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "the ledger's root"), "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(grade, mine_folds_a_generic_trace_into_a_graded_row)
{
    char *dir = tu_tmpdir();
    char trace[4096], out[4096];
    snprintf(trace, sizeof(trace), "%s/trace.json", dir);
    snprintf(out, sizeof(out), "%s/data.jsonl", dir);
    /* the reference's generic trace: a JSON array of events */
    const char *t =
        "[{\"actor\":\"client\",\"kind\":\"request\",\"id\":\"r\","
        "\"payload\":{\"text\":\"add two ints\"}},\n"
        " {\"actor\":\"worker\",\"kind\":\"result\",\"id\":\"t1\","
        "\"parent\":\"r\",\"payload\":{\"id\":\"t1\",\"ok\":true,"
        "\"model\":\"m\"}},\n"
        " {\"actor\":\"validator\",\"kind\":\"verdict\",\"id\":\"v\","
        "\"parent\":\"t1\",\"payload\":{\"id\":\"t1\",\"ok\":true}},\n"
        " {\"actor\":\"verifier\",\"kind\":\"verification\",\"id\":\"w\","
        "\"parent\":\"t1\",\"payload\":{\"ok\":true}},\n"
        " {\"actor\":\"worker\",\"kind\":\"verdict\",\"id\":\"s\","
        "\"parent\":\"t1\",\"payload\":{\"ok\":false}}]\n";
    cr_assert_eq(tu_write_file(trace, t, strlen(t)), 0);
    for (int i = 0; i < 2; i++) {
        struct tu_run r =
            tu_forumv(NULL, "--ledger", dir, "mine", trace, "--format",
                      "generic", "--out", out, (char *)NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        cr_assert(strstr(r.out, "grade=PASS"), "%s", r.out);
        tu_run_free(&r);
    }
    cr_assert_eq(tu_file_lines(out), 2);
    char *text = tu_read_file(out, NULL);
    *strchr(text, '\n') = '\0';
    cJSON *row = tu_json_parse(text);
    cr_assert_str_eq(tu_str(row, "prompt"), "add two ints");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(row, "grade");
    cr_assert_eq(tu_num(g, "checks"), 2); /* the worker's own verdict: no */
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(row, "oracle"), "grade_inputs")),
        2);
    cJSON_Delete(row);
    free(text);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "export-gradable",
                                "--check", out, (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    /* a missing file is bad input, not a crash */
    r = tu_forumv(NULL, "--ledger", dir, "mine", "/nonexistent/trace.json",
                  (char *)NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    tu_run_free(&r);
    /* agentops is refused, not guessed */
    r = tu_forumv(NULL, "--ledger", dir, "mine", trace, "--format", "agentops",
                  (char *)NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- proof lanes --------------------------------------------------------- */

static int64_t count(struct ledger *l)
{
    int64_t n = 0;
    cr_assert_eq(ledger_count(l, &n, NULL), FO_OK);
    return n;
}

static cJSON *body_at(struct ledger *l, int64_t seq, struct ledger_entry *e)
{
    char *b;
    size_t len;
    cr_assert_eq(ledger_get(l, seq, e, NULL, NULL), FO_OK);
    cr_assert_eq(ledger_body(l, seq, &b, &len, NULL), FO_OK);
    cJSON *o = tu_json_parse(b);
    free(b);
    return o;
}

static void expect_rejection(struct ledger *l, const struct orch_lane_claim *c,
                             int64_t parent, const char *violation,
                             const char *excess)
{
    int64_t before = count(l);
    cJSON *out = NULL;
    struct fo_err err;
    cr_assert_eq(orch_lane_witness(l, NULL, NULL, c, parent, &out, &err),
                 FO_E_INVALID);
    cr_assert_null(out);
    cr_assert(strstr(err.msg, violation), "%s", err.msg);
    /* refused, and witnessed: never dropped */
    cr_assert_eq(count(l), before + 1);
    struct ledger_entry e;
    cJSON *b = body_at(l, before, &e);
    cr_assert_str_eq(e.kind, "lane_rejection");
    cr_assert_str_eq(e.actor, "router");
    cr_assert_eq(e.parent, parent);
    cr_assert_str_eq(tu_str(b, "violation"), violation);
    char *ex =
        cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(b, "excess"));
    cr_assert_str_eq(ex, excess);
    free(ex);
    cJSON_Delete(b);
}

Test(lanes, an_unknown_or_over_reaching_route_is_refused_and_witnessed)
{
    char *dir;
    struct ledger *l = open_new(&dir);
    int64_t req = put(l, "client", "request", LEDGER_NO_PARENT,
                      "{\"request\":\"inspect the run\"}");
    static const char *const read[] = {"read"}, *const read_run[] = {"read",
                                                                     "run"};
    static const char *const judge_approved[] = {"judge", "approved"};
    struct orch_lane_claim c = {.task = "inspect the run",
                                .lane = "root",
                                .scopes = read,
                                .n_scopes = 1};
    expect_rejection(l, &c, req, "unknown_lane", "[\"read\"]");
    c.lane = "observe";
    c.scopes = read_run;
    c.n_scopes = 2;
    expect_rejection(l, &c, LEDGER_NO_PARENT, "over_routed", "[\"run\"]");
    /* a scope string cannot certify itself */
    c.lane = "validate";
    c.scopes = judge_approved;
    expect_rejection(l, &c, LEDGER_NO_PARENT, "over_routed", "[\"approved\"]");
    /* a valid domain never launders a scope */
    c.lane = "observe";
    c.scopes = read_run;
    c.domain = "formal-proof";
    expect_rejection(l, &c, LEDGER_NO_PARENT, "over_routed", "[\"run\"]");
    /* an unknown domain */
    c.scopes = read;
    c.n_scopes = 1;
    c.domain = "archive-federation";
    c.has_confidence = 1;
    c.confidence = 0.12;
    expect_rejection(l, &c, req, "unknown_domain", "[]");
    /* a well-formed two-axis route passes and is witnessed */
    c.lane = "execute";
    c.scopes = read_run;
    c.n_scopes = 2;
    c.domain = "scientific-runtime";
    cJSON *out = NULL;
    cr_assert_eq(orch_lane_witness(l, NULL, NULL, &c, req, &out, NULL), FO_OK);
    struct ledger_entry e;
    cJSON *b = body_at(l, tu_num(out, "seq"), &e);
    cr_assert_str_eq(e.kind, "lane_route");
    char *s = cJSON_PrintUnformatted(b);
    cr_assert_str_eq(s,
                     "{\"confidence\":0.12,\"domain\":\"scientific-runtime\","
                     "\"lane\":\"execute\",\"scopes\":[\"read\",\"run\"],"
                     "\"task\":\"inspect the run\"}");
    free(s);
    cJSON_Delete(b);
    cJSON_Delete(out);
    /* a malformed claim is bad input, not a route: nothing witnessed */
    int64_t before = count(l);
    c.lane = "";
    cr_assert_eq(orch_lane_witness(l, NULL, NULL, &c, req, &out, NULL),
                 FO_E_INVALID);
    cr_assert_eq(count(l), before);
    struct ledger_verify_result vr;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &vr, NULL),
                 FO_OK);
    cr_assert(vr.ok);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(lanes, the_vocabularies_are_closed_and_the_frame_uses_them)
{
    size_t n, nd;
    const struct orch_proof_lane *p = orch_proof_lanes(&n);
    const struct orch_domain_lane *d = orch_domain_lanes(&nd);
    cr_assert_eq(n, 5);
    cr_assert_eq(nd, 10);
    for (size_t i = 0; i < n; i++) {
        cr_assert(orch_proof_lane_known(p[i].name), "%s", p[i].name);
        int reads = 0;
        for (const char *const *s = p[i].scopes; *s; s++)
            reads |= !strcmp(*s, "read");
        cr_assert(reads, "%s cannot read the record", p[i].name);
    }
    for (size_t i = 0; i < nd; i++)
        cr_assert(orch_domain_lane_known(d[i].name), "%s", d[i].name);
    cr_assert_not(orch_domain_lane_known("archive-federation"));
}

static int64_t route(struct ledger *l, int decided, double conf)
{
    char b[128];
    snprintf(b, sizeof(b),
             "{\"confidence\":%g,\"decided\":%s,\"task\":\"sync mirrors\"}",
             conf, decided ? "\"backend\"" : "null");
    return put(l, "router", "route", LEDGER_NO_PARENT, b);
}

Test(lanes, a_vocabulary_gap_fires_only_at_its_threshold)
{
    char *dir;
    struct ledger *l = open_new(&dir);
    route(l, 0, 0.1);
    route(l, 0, 0.1);
    route(l, 1, 0.9); /* a decided route ends the streak */
    route(l, 0, 0.0);
    route(l, 0, 0.05);
    int64_t before = count(l);
    cJSON *out = NULL;
    cr_assert_eq(orch_vocab_gap_witness(l, NULL, NULL, 0, "source-federation",
                                        3, &out, NULL),
                 FO_OK);
    cr_assert(
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(out, "witnessed")));
    cr_assert_eq(tu_num(out, "trailing_undecided"), 2);
    cr_assert_eq(count(l), before); /* nothing witnessed below it */
    cJSON_Delete(out);
    int64_t last = route(l, 0, 0.154);
    cr_assert_eq(orch_vocab_gap_witness(l, NULL, NULL, 0, "source-federation",
                                        3, &out, NULL),
                 FO_OK);
    struct ledger_entry e;
    cJSON *b = body_at(l, tu_num(out, "seq"), &e);
    cr_assert_str_eq(e.kind, "vocabulary_gap");
    cr_assert_eq(e.parent, last);
    char *s = cJSON_PrintUnformatted(b);
    cr_assert_str_eq(s,
                     "{\"confidence_ceiling\":0.154,"
                     "\"consecutive_escalations\":3,\"domain_signal\":"
                     "\"source-federation\",\"first_seq\":3,\"last_seq\":5}");
    free(s);
    cJSON_Delete(b);
    cJSON_Delete(out);
    /* the receipt creates no lane */
    cr_assert_not(orch_domain_lane_known("source-federation-2"));
    struct fo_err err;
    cr_assert_eq(orch_vocab_gap_witness(l, NULL, NULL, 0, "x", 0, &out, &err),
                 FO_E_INVALID);
    ledger_close(l);
    /* the CLI: an unknown lane is exit 2 and on record */
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "lane", "route", "x", "--lane", "root",
                  "--scope", "read", (char *)NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "lane_rejection seq 7"), "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- bench-deep-verify -------------------------------------------------- */

Test(bench, deep_verify_receipt_reports_redacted_and_present_bodies)
{
    char *dir = tu_tmpdir();
    setenv("TMPDIR", dir, 1);
    struct tu_run r =
        tu_forumv(NULL, "--json", "bench-deep-verify", "--entries", "3",
                  "--payload-bytes", "32", "--redaction-ratio", "0,1",
                  "--warmups", "0", "--repeats", "1", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *p = tu_run_json(&r);
    cr_assert_str_eq(tu_str(p, "schema"), "forum.deep-verify-benchmark/v1");
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(p, "cases");
    cr_assert_eq(cJSON_GetArraySize(cs), 2);
    const cJSON *a = cJSON_GetArrayItem(cs, 0), *b = cJSON_GetArrayItem(cs, 1);
    cr_assert_eq(tu_num(a, "entry_count"), 3);
    cr_assert_eq(tu_num(a, "payloads_present"), 3);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(a, "verify_deep"), "ok")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(a, "verify_payloads"), "ok")));
    cr_assert_eq(tu_num(b, "payloads_redacted"), 3);
    cr_assert_eq(tu_num(b, "payloads_present"), 0);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(b, "verify_deep"), "ok")));
    cJSON_Delete(p);
    tu_run_free(&r);
    /* every case's ledger is gone */
    r = tu_forumv(NULL, "bench-deep-verify", "--storage", "memory",
                  (char *)NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "in-memory"), "%s", r.err);
    tu_run_free(&r);
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", dir);
    cr_assert_eq(system(cmd), 0, "a case's ledger was left in %s", dir);
    tu_rmrf(dir);
}
