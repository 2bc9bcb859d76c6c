/* orch_rescue: tool calls a model wrote as text, found and made real
 * calls (the forge layer of the tool loop). Pure functions: no I/O, no
 * state; the tool loop (orch_forge.c) decides what to do with them. */
#ifndef ORCH_RESCUE_H
#define ORCH_RESCUE_H

#include <stddef.h>

#include <cJSON.h>

#include "ledger/fo_err.h"

/* longer text is not scanned */
#define ORCH_RESCUE_TEXT_MAX (1024u * 1024u)
/* calls taken from one reply; the ones after are refused */
#define ORCH_RESCUE_CALLS_MAX 16

/* The forms a call is rescued from, as the ledger names them:
 *   "tool_call_tag"  <tool_call>{"name": N, "arguments": {...}}</tool_call>
 *                    (the closing tag may be missing at the end of the text)
 *   "function_tag"   <function=N>{...}</function>, or its parameters
 *                    written <parameter=K>V</parameter> (V a string, or the
 *                    array or object it spells), alone or inside a
 *                    <tool_call> tag
 *   "fenced_block"   a ```json, ```tool_call or bare ``` block holding
 *                    exactly one call object
 *   "bare_json"      the whole text is exactly one call object
 * A call object has two members: "name" or "tool", and "arguments", "args"
 * or "parameters" (an object, or a string holding one). Inside a tag the
 * arguments may be left out ({}). */

/* What a scan found. Every member is NULL when there was nothing. */
struct orch_rescue {
    /* the calls, as orch_model_msg.tool_calls: [{"id", "name",
     * "arguments" (canonical JSON text of an object), "rescued" (the
     * form)}], ids "<id_prefix><n>" from 1, in the order of the text */
    cJSON *calls;
    /* the text with the rescued calls cut out, trimmed (malloc'd); NULL
     * when no call was rescued */
    char *text;
    /* calls to a tool not in the list: [{"form", "tool", "reason"}]; their
     * text stays in place */
    cJSON *refused;
    /* tags that hold no readable call: [{"form", "error"}], error a
     * sentence fit to send back to the model; their text stays in place */
    cJSON *malformed;
};

/* Scans text (len bytes, UTF-8) for calls to the tools named in tools
 * (n_tools names). A tag's body is read as one balanced JSON value (braces
 * and "</tool_call>" inside strings do not end it); a fenced block or the
 * whole text counts only when it is exactly a call object (other JSON is
 * left as text). Text over ORCH_RESCUE_TEXT_MAX is not scanned. FO_OK
 * (out filled; release it) or FO_E_NOMEM. */
int orch_rescue_scan(const char *text, size_t len, const char *const *tools,
                     size_t n_tools, const char *id_prefix,
                     struct orch_rescue *out, struct fo_err *err);

/* Frees what a scan made; NULL-safe, leaves r zeroed. */
void orch_rescue_release(struct orch_rescue *r);

/* The answer of a respond call's arguments text: the "answer" string of
 * an object {"answer": string} (other members ignored), malloc'd; NULL
 * when args is not such (why says what is wrong, for the model). */
char *orch_rescue_respond_answer(const char *args, char *why, size_t n);

#endif
