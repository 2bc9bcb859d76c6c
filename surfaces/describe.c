/* describe: what a model (or a person) reads about each method: a title,
 * a description for every input property, and the nested shapes of the
 * inputs the validator takes as plain objects (a plan, a gate policy,
 * edits). Laid over the table's schemas when they are parsed, so
 * tools/list, GET /methods and the generated docs all carry them. The
 * validator checks the top level only; the nested shapes are guidance. */
#include "surfaces/surf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "surfaces/surf_int.h"

struct text {
    const char *method; /* NULL: any method */
    const char *prop;
    const char *text;
};

/* Method-specific rows first: the first row that matches wins. */
static const struct text props[] = {
    {"humanize", "text", "The model's or agent's prose to make plainer."},
    {"prose_contract", "text",
     "The request whose route gives the communication contract."},
    {"run_room", "run", "The run to show (default: the latest)."},
    {"ledger_body", "seq", "The entry whose JSON body to read."},
    {"ledger_replay", "seq",
     "The last entry of the ledger as it stood: entries 0..seq."},
    {"ledger_chain", "seq",
     "The entry whose causal chain (parent links to the root) to read."},
    {"ledger_redact", "seq", "The entry whose body to delete."},
    {"ledger_prove", "seq", "The entry to prove included."},
    {"ledger_prove", "size",
     "The tree size to prove against (default: the current size)."},
    {"ledger_range", "from", "The first seq to read (default 0)."},
    {"ledger_replay", "from", "The first seq of the page (default 0)."},
    {"ledger_consistency", "first", "The older tree size (>= 1)."},
    {"ledger_consistency", "second",
     "The newer tree size (default: the current size)."},
    {"ledger_redact", "reason",
     "Why the body is deleted; kept in the redaction entry."},
    {"gate_reject", "reason",
     "Why the wave is rejected; kept in the gate_rejected entry."},
    {"run_get", "run", "The run's id: the seq of its request entry."},
    {"run_cancel", "run", "The run's id: the seq of its request entry."},
    {"gate_list", "run", "Only this run's gates (its request's seq)."},
    {"plan", "request", "The request to plan, in plain language."},
    {"plan_run", "request",
     "The request the plan answers (recorded with it; optional)."},
    {"ledger_cosign", "note",
     "The checkpoint's signed note with the witnesses' cosignature lines "
     "(C2SP cosignature/v1) after the log's own signature."},
    {NULL, "session",
     "A session's name (1..64 of A-Za-z0-9._-): the run is a turn of it, "
     "and sees its earlier turns and facts."},
    {"session_show", "session", "The session's name."},
    {"session_fork", "session", "The session to fork."},
    {"session_fork", "at", "The turn (its run id) the fork starts after."},
    {NULL, "into", "The new session's name."},
    {NULL, "key", "The fact's key (1..128 bytes)."},
    {NULL, "value", "The fact (1..4096 bytes)."},
    {NULL, "context",
     "Context token limits: {max_total_tokens, max_request_tokens, "
     "max_history_tokens, max_facts_tokens, max_tool_results_tokens} (4 "
     "bytes of UTF-8 a token), and compaction: drop (default) or summary "
     "(turns over the history limit are summarised by a model)."},
    {"run_show", "run", "The run's id: the seq of its request entry."},
    {"run_export_otel", "run", "The run's id: the seq of its request entry."},
    {"ledger_import", "format",
     "The source's format: otel (OTLP/JSON resourceSpans), langsmith (a "
     "JSON array or JSONL of runs) or jsonl (one event object a line: id, "
     "parent?, kind?, actor?, ts?, ...)."},
    {"ledger_import", "data",
     "The source file's text (UTF-8, at most 64 MiB); its SHA-256 is kept "
     "in the import entry."},
    {"ledger_import", "name",
     "The source file's name, kept in the import entry."},
    {"run_list", "state",
     "Only runs in this state (running, waiting, done, failed, ...)."},
    {"run_list", "before", "Only runs with an id below this (paging)."},
    {"run_list", "since", "Only runs with an id at or above this."},
    {"run_list", "limit", "At most this many runs (default 50)."},
    {NULL, "entries",
     "The steps, in order: [{actor, kind, payload, parent?}] (1..4096)."},
    {NULL, "seq", "An entry's sequence number (0 is the first entry)."},
    {NULL, "deep",
     "Also re-hash every stored body (slower; proves the bodies too)."},
    {NULL, "limit", "At most this many entries (1..1000)."},
    {NULL, "actor", "Who did the step (an agent, a tool, a person)."},
    {NULL, "kind",
     "What kind of step it is (e.g. request, tool_call, result)."},
    {NULL, "payload",
     "The step's content: any JSON value, stored content-addressed."},
    {NULL, "parent",
     "The seq of the entry that caused this one (null or absent: none)."},
    {NULL, "text", "The request text to route to a lane."},
    {NULL, "request", "What is asked, in plain language."},
    {NULL, "max_model_calls",
     "The run's budget of model calls; when spent the run stops with a "
     "witnessed budget entry."},
    {NULL, "max_seconds", "The run's wall-clock budget in seconds."},
    {NULL, "gates",
     "Approval gates this run adds: which waves wait for a human "
     "(see gate_approve)."},
    {NULL, "plan", "The plan to run: {tasks: [...]}."},
    {NULL, "run_seq", "The run's id: the seq of its request entry."},
    {NULL, "wave", "The wave (from 0) whose gate is decided."},
    {NULL, "approver", "Who decides; recorded in the decision entry."},
    {NULL, "note", "A note kept with the decision."},
    {NULL, "edits",
     "New instructions for tasks of the wave: {task id: instruction}."},
    /* the reference's fields (docs/COMPATIBILITY.md) */
    {NULL, "context_token_budget",
     "The reference's run-wide context budget in tokens (as "
     "context.max_total_tokens)."},
    {NULL, "request_context_token_budget",
     "The reference's request budget in tokens (as "
     "context.max_request_tokens)."},
    {NULL, "task_context_token_budget",
     "The reference's per-task budget in tokens (accepted; not yet acted "
     "on)."},
    {NULL, "upstream_token_budget",
     "The reference's per-upstream budget in tokens (accepted; not yet "
     "acted on)."},
    {NULL, "checkpoint_each_wave",
     "The reference's signed checkpoint after every wave (accepted; not yet "
     "acted on)."},
    {NULL, "delivery_profile",
     "The delivery profile the answer is held to: operator, engineer, "
     "researcher or executive (accepted; not yet acted on)."},
    {NULL, "profile",
     "A delivery profile: operator (default), engineer, researcher or "
     "executive."},
    {NULL, "audience", "Who reads it (default operator)."},
    {NULL, "use_capsule_context",
     "Also count the ledger's context capsule (its size as capsule)."},
    {NULL, "max_items", "Task results kept in the capsule (default 8)."},
    {"grade", "run",
     "The run's id (its request's seq) or an import's seq (default: the "
     "latest request)."},
    {"export_gradable", "run",
     "The run's id (its request's seq) or an import's seq (default: the "
     "latest request)."},
    {NULL, "min_checks",
     "Independent checks a PASS needs (default 2, as the reference's)."},
    {"lane_route", "task", "The work the route is for, in plain language."},
    {"lane_route", "lane",
     "The proof lane claimed: observe, execute, validate, synthesize or "
     "verify."},
    {"lane_route", "scopes",
     "The scopes claimed (read, run, judge, combine, attest); each must be "
     "one the lane grants."},
    {"lane_route", "domain",
     "The domain lane claimed (GET /lanes lists them); null or absent for "
     "none."},
    {"lane_route", "confidence",
     "The router's score for the route, kept with it; null or absent."},
    {"lane_route", "parent",
     "The entry the route answers (a request), if any."},
    {"vocabulary_gap", "domain_signal",
     "The name the operator gives the work the routes escalated on."},
    {"vocabulary_gap", "min_escalations",
     "Undecided routes in a row that make a gap (default 3)."},
    {"vocabulary_gap", "since", "Read route entries from this seq on."},
    {NULL, "max_text_chars",
     "Characters kept of each text field (default 240)."},
    {NULL, "timeout_s", "Seconds each model provider has to answer."},
};

static const struct {
    const char *method, *title;
} titles[] = {
    {"health", "Health"},
    {"status", "Ledger and daemon status"},
    {"methods", "List the methods"},
    {"ledger_verify", "Verify the ledger"},
    {"ledger_get", "Read an entry"},
    {"ledger_body", "Read an entry's body"},
    {"ledger_range", "Read entries in order"},
    {"ledger_replay", "Replay the ledger as it stood"},
    {"ledger_chain", "Read an entry's causal chain"},
    {"ledger_summary", "Summarize the ledger"},
    {"ledger_append", "Witness a step"},
    {"ledger_append_batch", "Witness many steps at once"},
    {"ledger_redact", "Redact an entry's body"},
    {"ledger_checkpoint", "Latest signed checkpoint"},
    {"ledger_prove", "Prove an entry is included"},
    {"ledger_consistency", "Prove two tree sizes consistent"},
    {"ledger_cosign", "Add witness cosignatures to a checkpoint"},
    {"route", "Route a request to a lane"},
    {"plan_run", "Run a given plan"},
    {"plan", "Plan a request"},
    {"submit", "Answer a request end to end"},
    {"run_start", "Start a background run"},
    {"run_get", "Read a run's state"},
    {"run_cancel", "Cancel a run"},
    {"run_list", "List the runs"},
    {"run_show", "Show a whole run, step by step"},
    {"run_export_otel", "Export a run as an OpenTelemetry trace"},
    {"ledger_import", "Import an external trace"},
    {"gate_list", "List the gates waiting"},
    {"session_list", "List the sessions"},
    {"session_show", "Show a session"},
    {"session_fork", "Fork a session at a turn"},
    {"session_remember", "Remember a fact in a session"},
    {"session_forget", "Forget a fact of a session"},
    {"context_preflight", "Estimate what a request would send"},
    {"gate_approve", "Approve a gate"},
    {"gate_edit", "Approve a gate with edited instructions"},
    {"gate_reject", "Reject a gate"},
    {"ledger_capsule", "Brief the ledger as a context capsule"},
    {"run_room", "Show a run's room: steps, gates, next actions"},
    {"runtime_inspect", "Inspect what would run"},
    {"operator_status", "Operator status envelope"},
    {"doctor", "Check providers, sandbox, store and disk"},
    {"humanize", "Make prose plainer"},
    {"prose_contract", "Communication contract of a request"},
    {"grade", "Grade a run from its independent checks"},
    {"export_gradable", "Export a run as a provable gradable row"},
    {"lanes", "List the proof lanes and domain lanes"},
    {"lane_route", "Judge and witness a route claim"},
    {"vocabulary_gap", "Witness a vocabulary-gap receipt"},
};

static const char plan_shape[] =
    "{\"type\":\"object\",\"required\":[\"tasks\"],\"properties\":{"
    "\"tasks\":{\"type\":\"array\",\"description\":\"The tasks; waves are "
    "derived from depends_on.\",\"items\":{\"type\":\"object\","
    "\"required\":[\"id\",\"agent\",\"instruction\"],\"properties\":{"
    "\"id\":{\"type\":\"string\",\"description\":\"A task id, unique in "
    "the plan (e.g. T1).\"},"
    "\"agent\":{\"type\":\"string\",\"description\":\"The lane that runs "
    "it (forum roster lists them).\"},"
    "\"instruction\":{\"type\":\"string\",\"description\":\"What the task "
    "must do.\"},"
    "\"depends_on\":{\"type\":\"array\",\"description\":\"Task ids whose "
    "results it needs, or {id, type: order|data}.\"},"
    "\"done_when\":{\"description\":\"How its result is judged: text for "
    "the validator, or assertion objects.\"}}}}}}";

static const char gates_shape[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"all\":{\"type\":\"boolean\",\"description\":\"Gate every wave.\"},"
    "\"lanes\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
    "\"description\":\"Gate waves holding a task on these lanes.\"},"
    "\"categories\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
    "\"description\":\"Gate waves holding a task of these lane "
    "categories.\"},"
    "\"waves\":{\"type\":\"array\",\"items\":{\"type\":\"integer\","
    "\"minimum\":0},\"description\":\"Gate these waves (from 0).\"},"
    "\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,\"description\":"
    "\"Seconds an undecided gate waits (default 86400).\"},"
    "\"deadline\":{\"type\":\"string\",\"description\":\"When an undecided "
    "gate expires (RFC 3339, in the future).\"},"
    "\"on_expiry\":{\"type\":\"string\",\"enum\":[\"reject\",\"approve\"],"
    "\"description\":\"What happens at the deadline (default reject).\"},"
    "\"question\":{\"type\":\"string\",\"description\":\"The question "
    "shown to whoever decides.\"}}}";

static const char edits_shape[] =
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\","
    "\"description\":\"The task's new instruction.\"}}";

static const char entries_shape[] =
    "{\"items\":{\"type\":\"object\",\"required\":[\"actor\",\"kind\","
    "\"payload\"],\"properties\":{\"actor\":{\"type\":\"string\"},"
    "\"kind\":{\"type\":\"string\"},\"payload\":{},\"parent\":{"
    "\"type\":[\"integer\",\"null\"]}}}}";

static const char *text_of(const char *method, const char *prop)
{
    for (size_t i = 0; i < sizeof(props) / sizeof(props[0]); i++)
        if ((!props[i].method || !strcmp(props[i].method, method)) &&
            !strcmp(props[i].prop, prop))
            return props[i].text;
    return NULL;
}

/* Lays the nested shape over prop (keeping its own keys). */
static void shape(cJSON *prop, const char *json)
{
    cJSON *s = NULL;
    struct fo_err err;
    if (fo_json_parse(json, strlen(json), &s, &err) != FO_OK)
        return;
    cJSON *k = s->child;
    while (k) {
        cJSON *next = k->next;
        if (!cJSON_GetObjectItemCaseSensitive(prop, k->string))
            cJSON_AddItemToObject(prop, k->string,
                                  cJSON_DetachItemViaPointer(s, k));
        k = next;
    }
    cJSON_Delete(s);
}

void surf_describe(const char *method, cJSON *schema)
{
    cJSON *p;
    cJSON_ArrayForEach (
        p, cJSON_GetObjectItemCaseSensitive(schema, "properties")) {
        if (!strcmp(p->string, "plan"))
            shape(p, plan_shape);
        else if (!strcmp(p->string, "gates"))
            shape(p, gates_shape);
        else if (!strcmp(p->string, "edits"))
            shape(p, edits_shape);
        else if (!strcmp(p->string, "entries"))
            shape(p, entries_shape);
        const char *t = text_of(method, p->string);
        if (t && !cJSON_GetObjectItemCaseSensitive(p, "description"))
            cJSON_AddStringToObject(p, "description", t);
    }
}

const char *surf_title(const struct surf_method *m)
{
    for (size_t i = 0; i < sizeof(titles) / sizeof(titles[0]); i++)
        if (!strcmp(titles[i].method, m->name))
            return titles[i].title;
    return NULL;
}

/* ---- output schemas ------------------------------------------------------
 * The JSON Schema of a method's result where it is structured and stable:
 * MCP's outputSchema (2025-06-18), the shape of the tool's
 * structuredContent. The fields every result carries are required; those
 * only some carry (a daemon's extras, a gate's optional parts, deep
 * verification) are described, not required; and no schema refuses a
 * field it does not name, so a result may grow without breaking a client.
 * Every property is described, as the inputs are. */

/* One entry as the ledger serves it (ledger_entry_json). */
#define ENTRY_OBJ                                                              \
    "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\","        \
    "\"description\":\"The entry format's version.\"},"                        \
    "\"seq\":{\"type\":\"integer\",\"minimum\":0,"                             \
    "\"description\":\"The entry's sequence number (0 is the first).\"},"      \
    "\"ts\":{\"type\":\"integer\",\"description\":\"When it was appended: "    \
    "microseconds since the Unix epoch (UTC).\"},"                             \
    "\"actor\":{\"type\":\"string\",\"description\":\"Who did the step.\"},"   \
    "\"kind\":{\"type\":\"string\",\"description\":\"What kind of step it "    \
    "is.\"},\"parent\":{\"type\":[\"integer\",\"null\"],"                      \
    "\"description\":\"The seq of the entry that caused it, or null.\"},"      \
    "\"payload\":{\"type\":\"string\",\"description\":\"SHA-256 of the "       \
    "body's canonical JSON (hex); it stays when the body is redacted.\"},"     \
    "\"prev\":{\"type\":\"string\",\"description\":\"The previous entry's "    \
    "hash (hex; zeros for entry 0).\"},\"hash\":{\"type\":\"string\","         \
    "\"description\":\"The entry's hash (hex),"                                \
    " chained into the next entry's prev.\"}},\"required\":[\"v\",\"seq\","    \
    "\"ts\",\"actor\",\"kind\",\"parent\",\"payload\",\"prev\",\"hash\"]}"

static const char entries_out[] =
    "{\"type\":\"object\",\"properties\":{\"entries\":{\"type\":\"array\","
    "\"description\":\"The entries, in seq order.\",\"items\":" ENTRY_OBJ
    "}},\"required\":[\"entries\"]}";

static const struct {
    const char *method, *schema;
} outputs[] = {
    {"health",
     "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\","
     "\"description\":\"True: the process serves,"
     " and its ledger's files are the ones it opened.\"}},"
     "\"required\":[\"ok\"]}"},
    {"status",
     "{\"type\":\"object\",\"properties\":{\"entries\":{\"type\":\"integer\","
     "\"description\":\"Entries in the ledger.\"},"
     "\"size\":{\"type\":\"integer\",\"description\":\"The live tree's size "
     "(equal to entries).\"},\"checkpoint\":{\"type\":\"string\","
     "\"description\":\"The live tree's root (hex).\"},"
     "\"signed_size\":{\"type\":\"integer\","
     "\"description\":\"The size of the latest signed checkpoint (0: "
     "none).\"},\"origin\":{\"type\":\"string\","
     "\"description\":\"The log's origin line, naming its checkpoints.\"},"
     "\"uptime_s\":{\"type\":\"integer\",\"description\":\"Seconds since the "
     "server started.\"},\"runs_in_flight\":{\"type\":\"integer\","
     "\"description\":\"The daemon only: runs in its memory.\"},"
     "\"providers\":{\"type\":\"array\",\"items\":{\"type\":\"object\"},"
     "\"description\":\"The daemon only: its model providers {api, model,"
     " url, tier}, never a key.\"}},\"required\":[\"entries\",\"size\","
     "\"checkpoint\",\"signed_size\",\"origin\",\"uptime_s\"]}"},
    {"ledger_verify",
     "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\","
     "\"description\":\"True when everything checked verifies.\"},"
     "\"chain\":{\"type\":\"boolean\",\"description\":\"True when the chain "
     "and the tree verify.\"},\"entries\":{\"type\":\"integer\","
     "\"description\":\"Entries verified before any break.\"},"
     "\"first_bad_seq\":{\"type\":[\"integer\",\"null\"],"
     "\"description\":\"Where the chain breaks, or null.\"},"
     "\"reason\":{\"type\":[\"string\",\"null\"],"
     "\"description\":\"Why it breaks (docs/LEDGER.md), or null.\"},"
     "\"deep\":{\"type\":[\"boolean\",\"null\"],"
     "\"description\":\"Whether the bodies were re-hashed (null: not "
     "asked).\"},\"bodies_checked\":{\"type\":\"integer\","
     "\"description\":\"deep: bodies re-hashed.\"},"
     "\"bodies_redacted\":{\"type\":\"integer\","
     "\"description\":\"deep: bodies redacted (nothing to re-hash).\"},"
     "\"bodies_bad\":{\"type\":\"integer\","
     "\"description\":\"deep: bodies that do not match their payload "
     "hash.\"},\"first_bad_body_seq\":{\"type\":[\"integer\",\"null\"],"
     "\"description\":\"deep: the first of them, or null.\"}},"
     "\"required\":[\"ok\",\"chain\",\"entries\",\"first_bad_seq\","
     "\"reason\",\"deep\"]}"},
    {"ledger_get",
     "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\","
     "\"description\":\"The entry format's version.\"},"
     "\"seq\":{\"type\":\"integer\",\"minimum\":0,"
     "\"description\":\"The entry's sequence number (0 is the first).\"},"
     "\"ts\":{\"type\":\"integer\",\"description\":\"When it was appended: "
     "microseconds since the Unix epoch (UTC).\"},"
     "\"actor\":{\"type\":\"string\",\"description\":\"Who did the step.\"},"
     "\"kind\":{\"type\":\"string\",\"description\":\"What kind of step it "
     "is.\"},\"parent\":{\"type\":[\"integer\",\"null\"],"
     "\"description\":\"The seq of the entry that caused it, or null.\"},"
     "\"payload\":{\"type\":\"string\",\"description\":\"SHA-256 of the "
     "body's canonical JSON (hex); it stays when the body is redacted.\"},"
     "\"prev\":{\"type\":\"string\",\"description\":\"The previous entry's "
     "hash (hex; zeros for entry 0).\"},\"hash\":{\"type\":\"string\","
     "\"description\":\"The entry's hash (hex),"
     " chained into the next entry's prev.\"},\"body\":{\"type\":\"string\","
     "\"description\":\"Whether the entry's body is still stored.\","
     "\"enum\":[\"present\",\"redacted\"]}},\"required\":[\"v\",\"seq\","
     "\"ts\",\"actor\",\"kind\",\"parent\",\"payload\",\"prev\",\"hash\","
     "\"body\"]}"},
    {"ledger_body",
     "{\"type\":\"object\",\"properties\":{\"seq\":{\"type\":\"integer\","
     "\"minimum\":0,\"description\":\"The entry.\"},"
     "\"payload\":{\"type\":\"string\",\"description\":\"SHA-256 of the "
     "body's canonical JSON (hex).\"},\"body\":{\"description\":\"The body: "
     "any JSON value.\"}},\"required\":[\"seq\",\"payload\",\"body\"]}"},
    {"ledger_range", entries_out},
    {"ledger_replay", entries_out},
    {"ledger_chain", entries_out},
    {"ledger_summary",
     "{\"type\":\"object\",\"properties\":{\"entries\":{\"type\":\"integer\","
     "\"description\":\"Entries in the ledger.\"},"
     "\"head\":{\"type\":[\"string\",\"null\"],"
     "\"description\":\"The last entry's hash (hex), or null when empty.\"},"
     "\"origin\":{\"type\":\"string\",\"description\":\"The log's origin "
     "line.\"},\"ledger_id\":{\"type\":\"string\","
     "\"description\":\"The ledger's id.\"},"
     "\"bodies_present\":{\"type\":\"integer\","
     "\"description\":\"Entries whose body is stored.\"},"
     "\"bodies_redacted\":{\"type\":\"integer\","
     "\"description\":\"Entries whose body was redacted.\"},"
     "\"by_kind\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"i"
     "nteger\"},\"description\":\"Entries by kind: {kind: count}.\"},"
     "\"by_actor\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\""
     "integer\"},\"description\":\"Entries by actor: {actor: count}.\"},"
     "\"runs\":{\"type\":\"object\",\"description\":\"What the runs did: "
     "requests, plans, tasks, results_ok, results_failed, results_redacted,"
     " refusals, model_calls.\"}},\"required\":[\"entries\",\"head\","
     "\"origin\",\"ledger_id\",\"bodies_present\",\"bodies_redacted\","
     "\"by_kind\",\"by_actor\"]}"},
    {"ledger_append", ENTRY_OBJ},
    {"ledger_checkpoint",
     "{\"type\":\"object\",\"properties\":{\"checkpoint\":{\"type\":\"string"
     "\",\"description\":\"The signed root (hex), as root.\"},"
     "\"size\":{\"type\":\"integer\",\"description\":\"The tree size it "
     "signs.\"},\"root\":{\"type\":\"string\","
     "\"description\":\"The tree's root at size (hex).\"},"
     "\"note\":{\"type\":[\"string\",\"null\"],"
     "\"description\":\"The signed note (C2SP checkpoint),"
     " witness cosignatures appended.\"}},\"required\":[\"checkpoint\","
     "\"size\",\"root\",\"note\"]}"},
    {"ledger_prove",
     "{\"type\":\"object\",\"properties\":{\"index\":{\"type\":\"integer\","
     "\"description\":\"The entry's leaf index (its seq).\"},"
     "\"size\":{\"type\":\"integer\",\"description\":\"The tree size the "
     "proof is for.\"},\"leaf_hash\":{\"type\":\"string\","
     "\"description\":\"The entry's leaf hash (RFC 6962, hex).\"},"
     "\"root\":{\"type\":\"string\",\"description\":\"The tree's root at "
     "size (hex).\"},\"path\":{\"type\":\"array\","
     "\"items\":{\"type\":\"string\"},\"description\":\"The audit path,"
     " leaf to root (hex hashes).\"}},\"required\":[\"index\",\"size\","
     "\"leaf_hash\",\"root\",\"path\"]}"},
    {"ledger_consistency",
     "{\"type\":\"object\",\"properties\":{\"first\":{\"type\":\"integer\","
     "\"description\":\"The older tree size.\"},"
     "\"second\":{\"type\":\"integer\",\"description\":\"The newer tree "
     "size.\"},\"root1\":{\"type\":\"string\","
     "\"description\":\"The root at first (hex).\"},"
     "\"root2\":{\"type\":\"string\",\"description\":\"The root at second "
     "(hex).\"},\"path\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
     "\"description\":\"The consistency proof (RFC 6962, hex hashes).\"}},"
     "\"required\":[\"first\",\"second\",\"root1\",\"root2\",\"path\"]}"},
    {"route",
     "{\"type\":\"object\",\"properties\":{\"decided\":{\"type\":[\"string\","
     "\"null\"],\"description\":\"The lane chosen,"
     " or null when none fits.\"},\"confidence\":{\"type\":\"number\","
     "\"description\":\"The chosen lane's score, 0..1.\"},"
     "\"needs_escalation\":{\"type\":\"boolean\","
     "\"description\":\"True when the rules are unsure and a model should "
     "decide.\"},\"candidates\":{\"type\":\"array\","
     "\"items\":{\"type\":\"object\",\"properties\":{\"agent\":{\"type\":\"st"
     "ring\",\"description\":\"The lane.\"},\"score\":{\"type\":\"number\","
     "\"description\":\"Its score, 0..1.\"}},\"required\":[\"agent\","
     "\"score\"]},\"description\":\"Every lane with its score,"
     " best first.\"}},\"required\":[\"decided\",\"confidence\","
     "\"needs_escalation\",\"candidates\"]}"},
    {"run_start",
     "{\"type\":\"object\",\"properties\":{\"run\":{\"type\":\"integer\","
     "\"minimum\":0,\"description\":\"The run's id: the seq of its request "
     "entry.\"},\"state\":{\"type\":\"string\","
     "\"description\":\"running: follow it with run_get.\"}},"
     "\"required\":[\"run\",\"state\"]}"},
    {"run_get",
     "{\"type\":\"object\",\"properties\":{\"run\":{\"type\":\"integer\","
     "\"minimum\":0,\"description\":\"The run's id: the seq of its request "
     "entry.\"},\"state\":{\"type\":\"string\",\"description\":\"running,"
     " waiting (at a gate), done, failed, cancelled, rejected, expired,"
     " budget, stopped, interrupted or unknown.\"},"
     "\"request\":{\"type\":[\"string\",\"null\"],"
     "\"description\":\"The request (null: redacted).\"},"
     "\"via\":{\"type\":[\"string\",\"null\"],"
     "\"description\":\"What started it: submit, run_start,"
     " plan or plan_run.\"},\"instance\":{\"type\":[\"string\",\"null\"],"
     "\"description\":\"The process that holds it, or null.\"},"
     "\"count\":{\"type\":\"integer\",\"description\":\"Its entries so "
     "far.\"},\"truncated\":{\"type\":\"boolean\","
     "\"description\":\"True when entries holds only the first of them.\"},"
     "\"answer\":{\"type\":[\"string\",\"null\"],"
     "\"description\":\"The answer once done, or null.\"},"
     "\"answer_seq\":{\"type\":[\"integer\",\"null\"],"
     "\"description\":\"The answer's entry, or null.\"},"
     "\"gate\":{\"type\":[\"object\",\"null\"],"
     "\"description\":\"The gate it waits at (as gate_list shows it),"
     " or null.\"},\"error\":{\"type\":[\"object\",\"null\"],"
     "\"description\":\"Why it failed: {error, code}, or null.\"},"
     "\"entries\":{\"type\":\"array\",\"description\":\"Its entries,"
     " request first.\",\"items\":" ENTRY_OBJ
     "}},\"required\":[\"run\",\"state\",\"request\",\"via\",\"instance\","
     "\"count\",\"truncated\",\"answer\",\"answer_seq\",\"gate\",\"error\","
     "\"entries\"]}"},
    {"run_list",
     "{\"type\":\"object\",\"properties\":{\"runs\":{\"type\":\"array\","
     "\"items\":{\"type\":\"object\",\"properties\":{\"run\":{\"type\":\"inte"
     "ger\",\"minimum\":0,\"description\":\"The run's id.\"},"
     "\"state\":{\"type\":\"string\",\"description\":\"As run_get says "
     "it.\"},\"via\":{\"type\":\"string\","
     "\"description\":\"What started it.\"},"
     "\"request\":{\"type\":[\"string\",\"null\"],"
     "\"description\":\"Its request's first 200 bytes (null: redacted).\"},"
     "\"started_ts\":{\"type\":\"integer\","
     "\"description\":\"When it started: microseconds since the Unix "
     "epoch.\"},\"entries\":{\"type\":\"integer\","
     "\"description\":\"Its entries so far.\"}},\"required\":[\"run\","
     "\"state\",\"via\",\"request\",\"started_ts\",\"entries\"]},"
     "\"description\":\"The runs, newest first.\"},"
     "\"next\":{\"type\":[\"integer\",\"null\"],"
     "\"description\":\"More runs: pass before = next + 1 (null: no "
     "more).\"}},\"required\":[\"runs\",\"next\"]}"},
    {"gate_list",
     "{\"type\":\"object\",\"properties\":{\"gates\":{\"type\":\"array\","
     "\"items\":{\"type\":\"object\",\"properties\":{\"run_seq\":{\"type\":\""
     "integer\",\"minimum\":0,\"description\":\"The run waiting.\"},"
     "\"wave\":{\"type\":\"integer\",\"description\":\"The wave it waits "
     "before (from 0).\"},\"requested_seq\":{\"type\":\"integer\","
     "\"minimum\":0,\"description\":\"The gate_requested entry.\"},"
     "\"tasks\":{\"type\":\"array\",\"description\":\"The wave's tasks.\"},"
     "\"question\":{\"type\":\"string\",\"description\":\"The question for "
     "whoever decides.\"},\"rule\":{\"type\":\"string\","
     "\"description\":\"The policy rule that gated the wave.\"},"
     "\"deadline\":{\"type\":\"string\",\"description\":\"When it expires "
     "(RFC 3339).\"},\"on_expiry\":{\"type\":\"string\","
     "\"description\":\"What happens then: reject or approve.\"}},"
     "\"required\":[\"run_seq\",\"wave\",\"requested_seq\"]},"
     "\"description\":\"The gates waiting for a decision.\"}},"
     "\"required\":[\"gates\"]}"},
    {"session_list",
     "{\"type\":\"object\",\"properties\":{\"sessions\":{\"type\":\"array\","
     "\"items\":{\"type\":\"object\",\"properties\":{\"session\":{\"type\":\""
     "string\",\"description\":\"Its name.\"},"
     "\"started_seq\":{\"type\":\"integer\",\"minimum\":0,"
     "\"description\":\"The entry that started it.\"},"
     "\"turns\":{\"type\":\"integer\",\"description\":\"Its turns (runs).\"},"
     "\"forked_from\":{\"type\":\"string\","
     "\"description\":\"The session it was forked from.\"}},"
     "\"required\":[\"session\",\"started_seq\",\"turns\"]},"
     "\"description\":\"The sessions, oldest first.\"}},"
     "\"required\":[\"sessions\"]}"},
};

static cJSON **out_schemas; /* by the method's row in the table */
static pthread_once_t out_once = PTHREAD_ONCE_INIT;

static void parse_outputs(void)
{
    size_t n;
    const struct surf_method *t = surf_methods(&n);
    out_schemas = calloc(n, sizeof(*out_schemas));
    if (!out_schemas)
        abort();
    for (size_t i = 0; i < sizeof(outputs) / sizeof(outputs[0]); i++) {
        const struct surf_method *m = surf_find(outputs[i].method);
        struct fo_err err;
        if (!m || fo_json_parse(outputs[i].schema, strlen(outputs[i].schema),
                                &out_schemas[m - t], &err) != FO_OK)
            abort(); /* a bug in the table: caught by every test */
    }
}

const cJSON *surf_output_schema(const struct surf_method *m)
{
    pthread_once(&out_once, parse_outputs);
    size_t n;
    const struct surf_method *t = surf_methods(&n);
    return out_schemas[m - t];
}
