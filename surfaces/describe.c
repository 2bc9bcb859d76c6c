/* describe: what a model (or a person) reads about each method: a title,
 * a description for every input property, and the nested shapes of the
 * inputs the validator takes as plain objects (a plan, a gate policy,
 * edits). Laid over the table's schemas when they are parsed, so
 * tools/list, GET /methods and the generated docs all carry them. The
 * validator checks the top level only; the nested shapes are guidance. */
#include "surfaces/surf.h"

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
