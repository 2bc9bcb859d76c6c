/* test_import: external traces (OTLP/JSON, LangSmith, JSONL) imported into
 * a ledger in one batch, parents first; malformed sources refused with
 * their position and nothing written; a run exported as OTLP/JSON and
 * imported back with the same shape. Fixtures: tests/vectors/import/. */
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon/import.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/ledger.h"
#include "ledger/proof.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"

static char *fixture(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/import/%s", FORUM_VECTORS, name);
    char *data = tu_read_file(path, len);
    cr_assert_not_null(data, "fixture %s missing", path);
    return data;
}

static struct ledger *open_ledger(const char *dir)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    return l;
}

/* Imports data as format: the result must be want; the result object on
 * FO_OK (else NULL, err set). */
static cJSON *import_text(struct ledger *l, const char *format,
                          const char *data, size_t len, int want,
                          struct fo_err *err)
{
    struct import_source src = {
        .format = format, .data = data, .len = len, .name = "fixture"};
    cJSON *out = NULL;
    fo_err_clear(err);
    int rc = import_run(l, NULL, NULL, &src, &out, err);
    cr_assert_eq(rc, want, "import %s: rc %d, want %d: %s", format, rc, want,
                 err->msg);
    return out;
}

static cJSON *import_fixture(struct ledger *l, const char *format,
                             const char *name, int want, struct fo_err *err)
{
    size_t len = 0;
    char *data = fixture(name, &len);
    cJSON *out = import_text(l, format, data, len, want, err);
    free(data);
    return out;
}

/* The result's entry for the record with original id. */
static const cJSON *entry_of(const cJSON *res, const char *id)
{
    const cJSON *e;
    cJSON_ArrayForEach (e, cJSON_GetObjectItemCaseSensitive(res, "entries"))
        if (!strcmp(tu_str(e, "id"), id))
            return e;
    cr_assert_fail("no entry for id %s", id);
    return NULL;
}

static long long seq_of(const cJSON *res, const char *id)
{
    return tu_num(entry_of(res, id), "seq");
}

/* The ledger's own record of seq's parent (not only the result's). */
static long long ledger_parent(struct ledger *l, long long seq)
{
    struct ledger_entry e;
    struct fo_err err;
    cr_assert_eq(ledger_get(l, seq, &e, NULL, &err), FO_OK, "%s", err.msg);
    return e.parent;
}

static const char *ledger_kind(struct ledger *l, long long seq)
{
    static struct ledger_entry e;
    struct fo_err err;
    cr_assert_eq(ledger_get(l, seq, &e, NULL, &err), FO_OK, "%s", err.msg);
    return e.kind;
}

static const char *ledger_actor(struct ledger *l, long long seq)
{
    static struct ledger_entry e;
    struct fo_err err;
    cr_assert_eq(ledger_get(l, seq, &e, NULL, &err), FO_OK, "%s", err.msg);
    return e.actor;
}

static cJSON *body_of(struct ledger *l, long long seq)
{
    char *b = NULL;
    size_t len = 0;
    struct fo_err err;
    cr_assert_eq(ledger_body(l, seq, &b, &len, &err), FO_OK, "%s", err.msg);
    cJSON *v = tu_json_parse(b);
    free(b);
    return v;
}

static void verifies(struct ledger *l)
{
    struct ledger_verify_result res;
    struct fo_err err;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(res.ok, "verify: %s at %lld", res.reason,
              (long long)res.first_bad_seq);
}

/* Asserts the parent of every imported entry is the seq of its record's
 * parent (pairs of id, parent id; NULL parent: the import entry). */
static void parents_are(struct ledger *l, const cJSON *res,
                        const char *const (*links)[2], size_t n)
{
    long long imp = tu_num(res, "import_seq");
    cr_assert_eq(ledger_parent(l, imp), LEDGER_NO_PARENT);
    cr_assert_str_eq(ledger_kind(l, imp), "import");
    for (size_t i = 0; i < n; i++) {
        long long s = seq_of(res, links[i][0]);
        long long want = links[i][1] ? seq_of(res, links[i][1]) : imp;
        cr_assert_eq(ledger_parent(l, s), want, "%s: parent %lld, want %lld",
                     links[i][0], ledger_parent(l, s), want);
        cr_assert_eq(tu_num(entry_of(res, links[i][0]), "parent"), want);
        cr_assert_lt(want, s, "a parent comes before its child");
    }
}

/* The import entry's body: sha256 of the fixture, format, counts. */
static void import_entry_is(struct ledger *l, const cJSON *res,
                            const char *name, const char *format,
                            long long records, long long dangling)
{
    size_t len = 0;
    char *data = fixture(name, &len);
    uint8_t d[32];
    char hex[65];
    fo_sha256(data, len, d);
    fo_hex(d, 32, hex);
    free(data);
    cJSON *b = body_of(l, tu_num(res, "import_seq"));
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(b, "source");
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(b, "counts");
    cr_assert_str_eq(tu_str(src, "sha256"), hex);
    cr_assert_eq(tu_num(src, "bytes"), (long long)len);
    cr_assert_str_eq(tu_str(b, "format"), format);
    cr_assert_eq(tu_num(counts, "records"), records);
    cr_assert_eq(tu_num(counts, "dangling"), dangling);
    cr_assert_str_eq(tu_str(res, "sha256"), hex);
    cr_assert_eq(tu_num(res, "records"), records);
    cJSON_Delete(b);
}

Test(import, otel_genai_trace)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cJSON *res = import_fixture(l, "otel", "otel-genai.json", FO_OK, &err);
    /* the file lists the tool span and its child before their parents */
    static const char *const links[][2] = {
        {"eee19b7ec3c1b174", NULL},
        {"b2c3d4e5f6a7b8c9", "eee19b7ec3c1b174"},
        {"c3d4e5f6a7b8c9d0", "eee19b7ec3c1b174"},
        {"d4e5f6a7b8c9d0e1", "c3d4e5f6a7b8c9d0"},
    };
    parents_are(l, res, links, 4);
    import_entry_is(l, res, "otel-genai.json", "otel", 4, 0);
    cr_assert_eq(tu_num(res, "roots"), 1);
    long long llm = seq_of(res, "b2c3d4e5f6a7b8c9");
    long long tool = seq_of(res, "c3d4e5f6a7b8c9d0");
    cr_assert_str_eq(ledger_kind(l, llm), "llm_call");
    cr_assert_str_eq(ledger_kind(l, tool), "tool_call");
    cr_assert_str_eq(ledger_kind(l, seq_of(res, "eee19b7ec3c1b174")), "span");
    cr_assert_str_eq(ledger_kind(l, seq_of(res, "d4e5f6a7b8c9d0e1")), "span");
    cr_assert_str_eq(ledger_actor(l, llm), "weather-agent");
    cJSON *b = body_of(l, llm);
    cr_assert_str_eq(tu_str(b, "source"), "otel");
    cr_assert_str_eq(tu_str(b, "id"), "b2c3d4e5f6a7b8c9");
    cr_assert_str_eq(tu_str(b, "parent_id"), "eee19b7ec3c1b174");
    cr_assert_str_eq(tu_str(b, "trace_id"), "5b8efff798038103d269b633813fc60c");
    cr_assert_str_eq(tu_str(b, "model"), "gpt-4o-2024-08-06");
    cr_assert_str_eq(tu_str(b, "system"), "openai");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(b, "tokens");
    cr_assert_eq(tu_num(tok, "input"), 42);
    cr_assert_eq(tu_num(tok, "output"), 17);
    cr_assert_str_eq(tu_str(b, "prompt"), "What is the weather in Lisbon?");
    cr_assert_str_eq(tu_str(b, "completion"),
                     "Calling get_weather(city=Lisbon).");
    /* source times kept as given; attributes flattened */
    cr_assert_str_eq(tu_str(b, "start"), "1700000000050000000");
    cr_assert_str_eq(tu_str(b, "end"), "1700000000250000000");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(b, "attributes");
    cr_assert_str_eq(tu_str(at, "gen_ai.request.model"), "gpt-4o");
    cr_assert_str_eq(
        tu_str(cJSON_GetObjectItemCaseSensitive(b, "resource"), "service.name"),
        "weather-agent");
    cJSON_Delete(b);
    verifies(l);
    cJSON_Delete(res);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(import, otel_genai_events_lift_prompt_and_completion)
{
    static const char doc[] =
        "{\"resourceSpans\":[{\"scopeSpans\":[{\"scope\":{\"name\":\"lib\"},"
        "\"spans\":[{\"traceId\":\"01\",\"spanId\":\"aa\",\"name\":\"chat\","
        "\"attributes\":[{\"key\":\"gen_ai.request.model\",\"value\":{"
        "\"stringValue\":\"m1\"}}],\"events\":["
        "{\"name\":\"gen_ai.system.message\",\"attributes\":[{\"key\":"
        "\"content\",\"value\":{\"stringValue\":\"be brief\"}}]},"
        "{\"name\":\"gen_ai.user.message\",\"attributes\":[{\"key\":"
        "\"content\",\"value\":{\"stringValue\":\"hi\"}}]},"
        "{\"name\":\"gen_ai.choice\",\"attributes\":[{\"key\":\"message\","
        "\"value\":{\"stringValue\":\"hello\"}}]}]}]}]}]}";
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cJSON *res = import_text(l, "otel", doc, strlen(doc), FO_OK, &err);
    long long s = seq_of(res, "aa");
    cr_assert_str_eq(ledger_kind(l, s), "llm_call");
    cr_assert_str_eq(ledger_actor(l, s), "lib"); /* no service: the scope */
    cJSON *b = body_of(l, s);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
    cr_assert_eq(cJSON_GetArraySize(p), 2);
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(p, 0), "role"), "system");
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(p, 1), "content"), "hi");
    cr_assert_str_eq(tu_str(b, "completion"), "hello");
    cr_assert_str_eq(tu_str(b, "model"), "m1");
    cJSON_Delete(b);
    cJSON_Delete(res);
    verifies(l);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(import, langsmith_runs)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    /* entries already on record: the import's seqs start after them */
    cr_assert_eq(
        ledger_append(l, "me", "note", LEDGER_NO_PARENT, "1", 1, NULL, &err),
        FO_OK);
    cJSON *res =
        import_fixture(l, "langsmith", "langsmith-runs.json", FO_OK, &err);
    cr_assert_eq(tu_num(res, "import_seq"), 1);
    static const char *const chain = "7f3e2d10-8a4b-4c5d-9e6f-102030405060";
    static const char *const llm = "0b7c1a52-2f61-4c1e-9b47-3c2f8e6a9d11";
    static const char *const tool = "c91d8e2a-5b6f-4a3e-8d7c-605040302010";
    const char *const links[][2] = {{chain, NULL}, {llm, chain}, {tool, chain}};
    parents_are(l, res, links, 3);
    import_entry_is(l, res, "langsmith-runs.json", "langsmith", 3, 0);
    cr_assert_str_eq(ledger_kind(l, seq_of(res, chain)), "span");
    cr_assert_str_eq(ledger_kind(l, seq_of(res, llm)), "llm_call");
    cr_assert_str_eq(ledger_kind(l, seq_of(res, tool)), "tool_call");
    cr_assert_str_eq(ledger_actor(l, seq_of(res, chain)), "IncidentSummary");
    cr_assert_str_eq(ledger_actor(l, seq_of(res, llm)), "ChatOpenAI");
    cJSON *b = body_of(l, seq_of(res, llm));
    cr_assert_str_eq(tu_str(b, "model"), "gpt-4o-mini");
    cr_assert_str_eq(tu_str(b, "system"), "openai");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(b, "tokens");
    cr_assert_eq(tu_num(tok, "input"), 120);
    cr_assert_eq(tu_num(tok, "output"), 31);
    cr_assert_str_eq(tu_str(b, "completion"),
                     "The outage was caused by an expired certificate.");
    cr_assert(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(b, "prompt")));
    cr_assert_str_eq(tu_str(b, "start"), "2024-05-01T12:00:00.100000");
    cr_assert_str_eq(tu_str(b, "parent_id"), chain);
    /* the run as exported, kept whole */
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(b, "record");
    cr_assert_str_eq(tu_str(rec, "dotted_order"),
                     "20240501T120000000000Z7f3e2d10-8a4b-4c5d-9e6f-"
                     "102030405060.20240501T120000100000Z0b7c1a52-2f61-4c1e-"
                     "9b47-3c2f8e6a9d11");
    cJSON_Delete(b);
    verifies(l);
    cJSON_Delete(res);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(import, langsmith_as_json_lines)
{
    static const char runs[] =
        "{\"id\":\"c\",\"name\":\"T\",\"run_type\":\"tool\","
        "\"parent_run_id\":\"p\"}\n"
        "{\"id\":\"p\",\"name\":\"C\",\"run_type\":\"chain\"}\n";
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cJSON *res = import_text(l, "langsmith", runs, strlen(runs), FO_OK, &err);
    const char *const links[][2] = {{"p", NULL}, {"c", "p"}};
    parents_are(l, res, links, 2);
    cJSON_Delete(res);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(import, jsonl_events)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cJSON *res = import_fixture(l, "jsonl", "events.jsonl", FO_OK, &err);
    const char *const links[][2] = {
        {"req-1", NULL}, {"llm-1", "req-1"}, {"7", "req-1"}, {"note-1", "7"}};
    parents_are(l, res, links, 4);
    import_entry_is(l, res, "events.jsonl", "jsonl", 4, 0);
    cr_assert_str_eq(ledger_kind(l, seq_of(res, "req-1")), "span");
    cr_assert_str_eq(ledger_kind(l, seq_of(res, "llm-1")), "llm_call");
    cr_assert_str_eq(ledger_kind(l, seq_of(res, "7")), "tool_call");
    cr_assert_str_eq(ledger_kind(l, seq_of(res, "note-1")), "event");
    cr_assert_str_eq(ledger_actor(l, seq_of(res, "7")), "ticket-db");
    cr_assert_str_eq(ledger_actor(l, seq_of(res, "note-1")), "jsonl");
    cJSON *b = body_of(l, seq_of(res, "llm-1"));
    cr_assert_str_eq(tu_str(b, "model"), "claude-3-5-haiku");
    cr_assert_eq(tu_num(cJSON_GetObjectItemCaseSensitive(b, "tokens"), "input"),
                 310);
    cr_assert_str_eq(tu_str(b, "prompt"), "Classify: printer offline");
    cr_assert_str_eq(tu_str(b, "completion"), "hardware");
    cr_assert_str_eq(tu_str(b, "start"), "2025-01-10T09:00:01Z");
    cJSON_Delete(b);
    b = body_of(l, seq_of(res, "note-1"));
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(b, "record");
    cr_assert_str_eq(tu_str(rec, "kind"), "comment");
    cr_assert_str_eq(tu_str(rec, "text"), "customer is a VIP");
    cr_assert_str_eq(tu_str(b, "parent_id"), "7");
    cJSON_Delete(b);
    verifies(l);
    cJSON_Delete(res);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(import, a_dangling_parent_is_reported_and_attached_to_the_import)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cJSON *res =
        import_fixture(l, "jsonl", "events-dangling.jsonl", FO_OK, &err);
    const char *const links[][2] = {
        {"a", NULL}, {"b", "a"}, {"c", NULL}, {"d", "c"}};
    parents_are(l, res, links, 4);
    import_entry_is(l, res, "events-dangling.jsonl", "jsonl", 4, 1);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(res, "dangling");
    cr_assert_eq(cJSON_GetArraySize(d), 1);
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(d, 0), "id"), "c");
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(d, 0), "parent_id"),
                     "zzz-not-here");
    cr_assert_eq(tu_num(cJSON_GetArrayItem(d, 0), "seq"), seq_of(res, "c"));
    cJSON *b = body_of(l, seq_of(res, "c"));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "dangling")));
    cJSON_Delete(b);
    b = body_of(l, tu_num(res, "import_seq"));
    const cJSON *bd = cJSON_GetObjectItemCaseSensitive(b, "dangling");
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(bd, 0), "parent_id"),
                     "zzz-not-here");
    cJSON_Delete(b);
    verifies(l);
    cJSON_Delete(res);
    ledger_close(l);
    tu_rmrf(dir);
}

/* The ledger's size and root before and after must match. */
struct head {
    int64_t n;
    uint8_t root[32];
};

static struct head head_of(struct ledger *l)
{
    struct head h;
    struct fo_err err;
    cr_assert_eq(ledger_tree_head(l, &h.n, h.root, &err), FO_OK, "%s", err.msg);
    return h;
}

static void refused(const char *format, const char *name, const char *data,
                    int want, const char *const *needles)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cr_assert_eq(
        ledger_append(l, "me", "note", LEDGER_NO_PARENT, "1", 1, NULL, &err),
        FO_OK);
    struct head before = head_of(l);
    cJSON *res = name ? import_fixture(l, format, name, want, &err)
                      : import_text(l, format, data, strlen(data), want, &err);
    cr_assert_null(res);
    for (size_t i = 0; needles[i]; i++)
        cr_assert_not_null(strstr(err.msg, needles[i]), "%s: \"%s\" not in: %s",
                           name ? name : format, needles[i], err.msg);
    struct head after = head_of(l);
    cr_assert_eq(after.n, before.n, "nothing written");
    cr_assert_eq(memcmp(after.root, before.root, 32), 0);
    verifies(l);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(import, truncated_json_names_the_byte)
{
    const char *const n[] = {"byte 199", NULL};
    refused("otel", "otel-truncated.json", NULL, FO_E_JSON, n);
}

Test(import, a_bad_jsonl_line_is_named)
{
    const char *const n[] = {"line 3", "invalid JSON", NULL};
    refused("jsonl", "events-badline.jsonl", NULL, FO_E_JSON, n);
}

Test(import, a_cycle_is_refused)
{
    const char *const n[] = {"line 2", "cycle", "a -> c -> b -> a", NULL};
    refused("jsonl", "events-cycle.jsonl", NULL, FO_E_INVALID, n);
}

Test(import, a_self_parent_is_a_cycle)
{
    const char *const n[] = {"line 2", "cycle", NULL};
    refused("jsonl", NULL, "{\"id\":1}\n{\"id\":2,\"parent\":2}\n",
            FO_E_INVALID, n);
}

Test(import, a_duplicate_id_is_refused)
{
    const char *const n[] = {"runs[2]", "duplicate id \"r1\"", "runs[0]", NULL};
    refused("langsmith", "langsmith-duplicate.json", NULL, FO_E_INVALID, n);
}

Test(import, the_wrong_format_is_refused)
{
    const char *const a[] = {"not OTLP/JSON", "langsmith", NULL};
    refused("otel", "langsmith-runs.json", NULL, FO_E_INVALID, a);
    const char *const b[] = {"OTLP/JSON", "otel", NULL};
    refused("langsmith", "otel-genai.json", NULL, FO_E_INVALID, b);
    const char *const c[] = {"not JSON lines", "otel", NULL};
    refused("jsonl", "otel-genai.json", NULL, FO_E_INVALID, c);
    const char *const d[] = {"format \"yaml\"", NULL};
    refused("yaml", NULL, "{}", FO_E_INVALID, d);
}

Test(import, records_without_ids_and_empty_sources_are_refused)
{
    const char *const a[] = {"line 2", "no \"id\"", NULL};
    refused("jsonl", NULL, "{\"id\":\"x\"}\n{\"kind\":\"span\"}\n",
            FO_E_INVALID, a);
    const char *const b[] = {"spans[0]", "no spanId", NULL};
    refused("otel", NULL,
            "{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"name\":"
            "\"x\"}]}]}]}",
            FO_E_INVALID, b);
    const char *const c[] = {"no events", NULL};
    refused("jsonl", NULL, "\n\n", FO_E_INVALID, c);
    /* an id must be a string or an exact integer (found by fuzz_import) */
    const char *const e[] = {"line 1", "no \"id\"", NULL};
    refused("jsonl", NULL, "{\"id\": 884444444444444444444444444444444444}\n",
            FO_E_INVALID, e);
    refused("jsonl", NULL, "{\"id\": 1.5}\n", FO_E_INVALID, e);
    const char *const d[] = {"line 1", "actor", NULL};
    refused("jsonl", NULL, "{\"id\":\"x\",\"actor\":\"\"}\n", FO_E_INVALID, d);
}

Test(import, a_body_over_the_limit_is_refused_naming_the_record)
{
    size_t big = LEDGER_BODY_MAX_DEFAULT + 10;
    char *data = malloc(big + 64);
    cr_assert_not_null(data);
    int n = snprintf(data, 64, "{\"id\":\"a\"}\n{\"id\":\"b\",\"x\":\"");
    memset(data + n, 'y', big);
    memcpy(data + n + big, "\"}\n", 4);
    const char *const w[] = {"line 2", "body limit", NULL};
    refused("jsonl", NULL, data, FO_E_TOO_LARGE, w);
    free(data);
}

/* A run-shaped tree: request 0, route and plan under it, a task under
 * the plan, its result, an answer under the plan. */
static void make_run(struct ledger *l)
{
    struct fo_err err;
    static const struct {
        const char *actor, *kind, *body;
        int64_t parent;
    } steps[] = {
        {"client", "request", "{\"request\":\"hi\",\"via\":\"submit\"}", -1},
        {"router", "route", "{\"lane\":\"backend\"}", 0},
        {"coordinator", "plan", "{\"model\":\"stub\",\"tasks\":[]}", 0},
        {"backend", "task", "{\"id\":\"T1\"}", 2},
        {"backend", "result", "{\"id\":\"T1\",\"ok\":true}", 3},
        {"synthesizer", "answer", "{\"answer\":\"42\"}", 2},
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        cr_assert_eq(ledger_append(l, steps[i].actor, steps[i].kind,
                                   steps[i].parent, steps[i].body,
                                   strlen(steps[i].body), NULL, &err),
                     FO_OK, "%s", err.msg);
}

static char *canon(const cJSON *v)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(v, &b, &err), FO_OK, "%s", err.msg);
    return fo_buf_detach(&b, NULL);
}

Test(import, an_exported_run_imports_back_with_the_same_shape)
{
    char *d1 = tu_tmpdir(), *d2 = tu_tmpdir();
    struct ledger *a = open_ledger(d1), *b = open_ledger(d2);
    struct fo_err err;
    make_run(a);
    /* an entry outside the run: not exported */
    cr_assert_eq(
        ledger_append(a, "x", "note", LEDGER_NO_PARENT, "1", 1, NULL, &err),
        FO_OK);
    cJSON *otel = NULL;
    cr_assert_eq(export_otel_run(a, 0, &otel, &err), FO_OK, "%s", err.msg);
    cJSON *again = NULL;
    cr_assert_eq(export_otel_run(a, 0, &again, &err), FO_OK, "%s", err.msg);
    char *text = canon(otel), *text2 = canon(again);
    cr_assert_str_eq(text, text2, "the export is deterministic");
    const cJSON *spans = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(
                    cJSON_GetObjectItemCaseSensitive(otel, "resourceSpans"), 0),
                "scopeSpans"),
            0),
        "spans");
    cr_assert_eq(cJSON_GetArraySize(spans), 6);
    /* ids: the entry hash's first 8 bytes; one trace id for the run */
    struct ledger_entry e;
    char hex[65];
    cr_assert_eq(ledger_get(a, 3, &e, NULL, &err), FO_OK);
    fo_hex(e.hash, 8, hex);
    const cJSON *s3 = cJSON_GetArrayItem(spans, 3);
    cr_assert_str_eq(tu_str(s3, "spanId"), hex);
    cr_assert_str_eq(tu_str(s3, "name"), "task");
    cr_assert_eq(strlen(tu_str(s3, "traceId")), 32);
    cr_assert_str_eq(tu_str(s3, "traceId"),
                     tu_str(cJSON_GetArrayItem(spans, 0), "traceId"));
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(spans, 0), "parentSpanId"));
    /* a parent's span ends no earlier than its children's */
    cr_assert_geq(
        strtoll(tu_str(cJSON_GetArrayItem(spans, 2), "endTimeUnixNano"), NULL,
                10),
        strtoll(tu_str(cJSON_GetArrayItem(spans, 5), "startTimeUnixNano"), NULL,
                10));

    cJSON *res = import_text(b, "otel", text, strlen(text), FO_OK, &err);
    long long imp = tu_num(res, "import_seq");
    /* the imported tree matches the run's: entry i at imp + 1 + i, its
     * parent the image of the run's parent */
    for (int64_t i = 0; i < 6; i++) {
        cr_assert_eq(ledger_get(a, i, &e, NULL, &err), FO_OK);
        fo_hex(e.hash, 8, hex);
        long long s = seq_of(res, hex);
        long long want = e.parent < 0 ? imp : imp + 1 + e.parent;
        cr_assert_eq(ledger_parent(b, s), want, "entry %lld", (long long)i);
        cr_assert_str_eq(ledger_actor(b, s), e.actor);
        cJSON *body = body_of(b, s);
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(body, "attributes");
        cr_assert_str_eq(tu_str(at, "forum.kind"), e.kind);
        cr_assert_eq(tu_num(at, "forum.seq"), i);
        cJSON_Delete(body);
    }
    cr_assert_eq(tu_num(res, "records"), 6);
    verifies(b);
    /* not a run: a route entry, a missing entry */
    cJSON *x = NULL;
    cr_assert_eq(export_otel_run(a, 1, &x, &err), FO_E_NOT_A_RUN);
    cr_assert_eq(export_otel_run(a, 99, &x, &err), FO_E_NOT_FOUND);
    free(text);
    free(text2);
    cJSON_Delete(res);
    cJSON_Delete(otel);
    cJSON_Delete(again);
    ledger_close(a);
    ledger_close(b);
    tu_rmrf(d1);
    tu_rmrf(d2);
}

/* ---- the CLI ---------------------------------------------------------- */

static char *vpath(const char *name)
{
    static char path[8][512];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 512, "%s/import/%s", FORUM_VECTORS, name);
    return p;
}

Test(import, cli_import_and_export)
{
    char *dir = tu_tmpdir(), *dir2 = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "import",
                                "otel", vpath("otel-genai.json"), NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *o = tu_run_json(&r);
    cr_assert_eq(tu_num(o, "records"), 4);
    cr_assert_str_eq(tu_str(o, "name"), "otel-genai.json");
    cJSON_Delete(o);
    tu_run_free(&r);
    /* text for people */
    r = tu_forumv(NULL, "--ledger", dir, "import", "langsmith",
                  vpath("langsmith-runs.json"), NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "imported 3 langsmith records"), "%s",
                       r.out);
    tu_run_free(&r);
    /* bad input: exit 2, the line named, nothing written */
    r = tu_forumv(NULL, "--ledger", dir, "import", "jsonl",
                  vpath("events-badline.jsonl"), NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "events-badline.jsonl: line 3"), "%s",
                       r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "summary", NULL);
    cr_assert_eq(r.status, 0);
    o = tu_run_json(&r);
    cr_assert_eq(tu_num(o, "entries"), 9); /* 5 + 4, nothing of the bad */
    cJSON_Delete(o);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "import", "otle", "x", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_not_null(strstr(r.err, "did you mean otel"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "import", "--help", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert_not_null(strstr(r.out, "example"));
    tu_run_free(&r);
    r = tu_forumv(NULL, "export", "--help", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert_not_null(strstr(r.out, "forum export otel"));
    tu_run_free(&r);

    /* a run made by submit, exported to a file, imported elsewhere */
    r = tu_forumv(NULL, "--ledger", dir2, "submit", "add a login endpoint",
                  NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    char out[600];
    snprintf(out, sizeof(out), "%s/run.json", dir2);
    r = tu_forumv(NULL, "--ledger", dir2, "--json", "export", "otel", "0", "-o",
                  out, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    o = tu_run_json(&r);
    cr_assert_gt(tu_num(o, "spans"), 3);
    long long spans = tu_num(o, "spans");
    cJSON_Delete(o);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "import", "otel", out, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    o = tu_run_json(&r);
    cr_assert_eq(tu_num(o, "records"), spans);
    cJSON_Delete(o);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--deep", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    /* not a run: exit 1 */
    r = tu_forumv(NULL, "--ledger", dir2, "export", "otel", "1", NULL);
    cr_assert_eq(r.status, 1, "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
    tu_rmrf(dir2);
}

Test(import, cli_refuses_a_file_over_64_mib)
{
    char *dir = tu_tmpdir();
    char big[600];
    snprintf(big, sizeof(big), "%s/big.jsonl", dir);
    FILE *f = fopen(big, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(ftruncate(fileno(f), (off_t)IMPORT_MAX_BYTES + 1), 0);
    fclose(f);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "import", "jsonl", big, NULL);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "64 MiB"), "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- parent_back: a batch linking its own entries --------------------- */

Test(import, parent_back_links_within_a_batch)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cr_assert_eq(
        ledger_append(l, "me", "note", LEDGER_NO_PARENT, "0", 1, NULL, &err),
        FO_OK);
    /* another writer's request first (as in a group commit), then ours */
    struct ledger_append r[4] = {
        {.actor = "other",
         .kind = "note",
         .parent = 0,
         .body = "1",
         .body_len = 1},
        {.actor = "imp",
         .kind = "import",
         .parent = LEDGER_NO_PARENT,
         .body = "2",
         .body_len = 1},
        {.actor = "imp",
         .kind = "span",
         .parent_back = 1,
         .body = "3",
         .body_len = 1},
        {.actor = "imp",
         .kind = "span",
         .parent_back = 2,
         .body = "4",
         .body_len = 1},
    };
    cr_assert_eq(ledger_append_batch(l, r, 4, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(r[2].rc, FO_OK);
    cr_assert_eq(r[2].entry.parent, r[1].entry.seq);
    cr_assert_eq(r[3].entry.parent, r[1].entry.seq);
    cr_assert_eq(ledger_parent(l, r[3].entry.seq), r[1].entry.seq);
    /* the entry it points back to was refused: so is it; too far back */
    struct ledger_append s[3] = {
        {.actor = "",
         .kind = "import",
         .parent = LEDGER_NO_PARENT,
         .body = "5",
         .body_len = 1},
        {.actor = "imp",
         .kind = "span",
         .parent_back = 1,
         .body = "6",
         .body_len = 1},
        {.actor = "imp",
         .kind = "span",
         .parent_back = 3,
         .body = "7",
         .body_len = 1},
    };
    cr_assert_eq(ledger_append_batch(l, s, 3, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(s[0].rc, FO_E_INVALID);
    cr_assert_eq(s[1].rc, FO_E_INVALID);
    cr_assert_eq(s[2].rc, FO_E_INVALID);
    cr_assert_not_null(strstr(s[1].err.msg, "parent_back"), "%s", s[1].err.msg);
    verifies(l);
    ledger_close(l);
    tu_rmrf(dir);
}

/* ---- the daemon: POST /ledger/import through the group commit ---------- */

static char *import_request(const char *format, const char *name)
{
    size_t len = 0;
    char *data = fixture(name, &len);
    cJSON *in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "format", format);
    cJSON_AddStringToObject(in, "data", data);
    cJSON_AddStringToObject(in, "name", name);
    free(data);
    char *text = canon(in);
    cJSON_Delete(in);
    return text;
}

Test(import, over_http_through_the_daemon, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    cJSON *a = tu_http_json(&d, "POST", "/append",
                            "{\"actor\":\"me\",\"kind\":\"note\","
                            "\"payload\":1}",
                            200);
    cJSON_Delete(a);
    char *req = import_request("langsmith", "langsmith-runs.json");
    cJSON *res = tu_http_json(&d, "POST", "/ledger/import", req, 200);
    free(req);
    cr_assert_eq(tu_num(res, "import_seq"), 1);
    cr_assert_eq(tu_num(res, "records"), 3);
    static const char *const chain = "7f3e2d10-8a4b-4c5d-9e6f-102030405060";
    const cJSON *e;
    cJSON_ArrayForEach (e, cJSON_GetObjectItemCaseSensitive(res, "entries")) {
        char path[64];
        snprintf(path, sizeof(path), "/ledger/%lld", tu_num(e, "seq"));
        cJSON *g = tu_http_json(&d, "GET", path, NULL, 200);
        long long want =
            !strcmp(tu_str(e, "id"), chain) ? 1 : seq_of(res, chain);
        cr_assert_eq(tu_num(g, "parent"), want, "%s", tu_str(e, "id"));
        cJSON_Delete(g);
    }
    cJSON_Delete(res);
    /* refused: 400, the position named, nothing written */
    req = import_request("jsonl", "events-cycle.jsonl");
    char *body = NULL;
    cr_assert_eq(tu_http(&d, "POST", "/ledger/import", req, 1, &body), 400);
    cr_assert_not_null(strstr(body, "cycle"), "%s", body);
    free(body);
    free(req);
    cJSON *st = tu_http_json(&d, "GET", "/status", NULL, 200);
    cr_assert_eq(tu_num(st, "entries"), 5);
    cJSON_Delete(st);
    /* the run export route answers not_a_run for an import entry */
    body = NULL;
    cr_assert_eq(tu_http(&d, "GET", "/runs/1/otel", NULL, 1, &body), 404);
    cr_assert_not_null(strstr(body, "not_a_run"), "%s", body);
    free(body);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(import, more_records_than_one_batch_takes_are_refused)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    for (int i = 0; i <= IMPORT_MAX_RECORDS; i++)
        cr_assert_eq(fo_buf_printf(&b, "{\"id\":%d}\n", i), FO_OK);
    const char *const w[] = {"line 4096", "more than 4095 records", NULL};
    refused("jsonl", NULL, b.data, FO_E_TOO_LARGE, w);
    /* one fewer fits */
    char *cut = strstr(b.data, "{\"id\":4095}");
    cr_assert_not_null(cut);
    *cut = '\0';
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cJSON *res = import_text(l, "jsonl", b.data, strlen(b.data), FO_OK, &err);
    cr_assert_eq(tu_num(res, "records"), IMPORT_MAX_RECORDS);
    cr_assert_eq(tu_num(res, "last_seq"), IMPORT_MAX_RECORDS);
    cJSON_Delete(res);
    verifies(l);
    ledger_close(l);
    tu_rmrf(dir);
    fo_buf_release(&b);
}

/* A LangSmith tree as one object (child_runs nested): each run is a record
 * of its own under the run it was nested in, and no record repeats its
 * children (before, the tree was one record). */
Test(import, langsmith_child_runs_are_records_of_their_own)
{
    static const char tree[] =
        "{\"id\":\"root\",\"name\":\"Chain\",\"run_type\":\"chain\","
        "\"child_runs\":[{\"id\":\"llm\",\"name\":\"ChatOpenAI\","
        "\"run_type\":\"llm\",\"child_runs\":[]},{\"id\":\"tool\",\"name\":"
        "\"search\",\"run_type\":\"tool\",\"child_runs\":[{\"id\":\"deep\","
        "\"name\":\"fetch\",\"run_type\":\"tool\"}]}]}";
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cJSON *res = import_text(l, "langsmith", tree, strlen(tree), FO_OK, &err);
    const char *const links[][2] = {
        {"root", NULL}, {"llm", "root"}, {"tool", "root"}, {"deep", "tool"}};
    parents_are(l, res, links, 4);
    cr_assert_str_eq(ledger_kind(l, seq_of(res, "llm")), "llm_call");
    cJSON *b = body_of(l, seq_of(res, "root"));
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(b, "record");
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(rec, "child_runs"));
    cr_assert_str_eq(tu_str(rec, "name"), "Chain");
    cJSON_Delete(b);
    verifies(l);
    cJSON_Delete(res);
    ledger_close(l);
    tu_rmrf(dir);
}

/* 300,000 attributes on one span: read in n log n (before, each key was
 * looked up in all the ones before it: 4.5e10 comparisons, minutes), then
 * refused as a body over the limit, naming the span. */
Test(import, a_span_with_many_attributes_is_read_in_n_log_n, .timeout = 60)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_puts(&b, "{\"resourceSpans\":[{\"scopeSpans\":[{"
                                 "\"spans\":[{\"traceId\":\"t\",\"spanId\":"
                                 "\"s1\",\"name\":\"big\",\"attributes\":["),
                 0);
    for (int i = 0; i < 300000; i++)
        cr_assert_eq(fo_buf_printf(&b,
                                   "%s{\"key\":\"k%d\",\"value\":{"
                                   "\"intValue\":\"%d\"}}",
                                   i ? "," : "", i, i),
                     0);
    cr_assert_eq(fo_buf_puts(&b, "]}]}]}]}"), 0);
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    cJSON *res = import_text(l, "otel", b.data, b.len, FO_E_TOO_LARGE, &err);
    cr_assert_null(res);
    cr_assert(strstr(err.msg, "s1") || strstr(err.msg, "span"), "%s", err.msg);
    fo_buf_release(&b);
    ledger_close(l);
    tu_rmrf(dir);
}

/* A run's tool calls and results export as the GenAI conventions'
 * execute_tool spans, named by their tool; an entry that is not a run is
 * named by its kind ("of kind \"import\"", not "a import"). */
Test(import, tool_spans_carry_the_genai_tool_attributes)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_ledger(dir);
    struct fo_err err;
    make_run(l);
    static const char call[] =
        "{\"id\":\"T1\",\"call_id\":\"c1\",\"tool\":\"read_file\","
        "\"arguments\":\"{}\"}";
    cr_assert_eq(ledger_append(l, "backend", "tool_call", 3, call, strlen(call),
                               NULL, &err),
                 FO_OK);
    cJSON *otel = NULL;
    cr_assert_eq(export_otel_run(l, 0, &otel, &err), FO_OK, "%s", err.msg);
    char *text = canon(otel);
    cr_assert(strstr(text, "{\"key\":\"gen_ai.operation.name\",\"value\":{"
                           "\"stringValue\":\"execute_tool\"}}"),
              "%s", text);
    cr_assert(strstr(text, "{\"key\":\"gen_ai.tool.name\",\"value\":{"
                           "\"stringValue\":\"read_file\"}}"),
              "%s", text);
    free(text);
    cJSON_Delete(otel);
    size_t len = 0;
    char *data = fixture("langsmith-runs.json", &len);
    cJSON *res = import_text(l, "langsmith", data, len, FO_OK, &err);
    free(data);
    long long imp = tu_num(res, "import_seq");
    cJSON_Delete(res);
    cr_assert_eq(export_otel_run(l, imp, &otel, &err), FO_E_NOT_A_RUN);
    cr_assert(strstr(err.msg, "of kind \"import\""), "%s", err.msg);
    ledger_close(l);
    tu_rmrf(dir);
}
