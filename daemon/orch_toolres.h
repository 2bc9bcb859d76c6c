/* orch_toolres: how a tool's result is recorded on a tool_result entry and
 * what of it reaches the model. A result of any size must neither kill a
 * run (an entry over the ledger's body limit cannot be witnessed) nor
 * flood the model: the model gets at most ORCH_TOOL_OUTPUT_MAX bytes, the
 * entry keeps the whole result while it fits. */
#ifndef ORCH_TOOLRES_H
#define ORCH_TOOLRES_H

#include <stddef.h>

#include <cJSON.h>

/* The most a tool_result payload may take in canonical form: the ledger's
 * default body limit less room for the entry's other fields. */
#define ORCH_TOOLRES_BODY_MAX ((1u << 20) - 16u * 1024u)

/* Bytes over ORCH_TOOL_OUTPUT_MAX a result may have and still go to the
 * model whole: room for the marker of a tool that cut its own output. */
#define ORCH_TOOLRES_SLACK 1024

/* Bytes of s[0..n) as a canonical JSON string, quotes included. */
size_t orch_json_str_len(const char *s, size_t n);

/* Adds to o, a tool_result payload, the result out (UTF-8, guarded
 * already) and attach (NULL, or an array of objects: images, audio,
 * resource links and blobs an MCP tool gave):
 * - "output": what the model is given: out, or when over
 *   ORCH_TOOL_OUTPUT_MAX + ORCH_TOOLRES_SLACK bytes its prefix of
 *   ORCH_TOOL_OUTPUT_MAX with a marker saying where it
 *   was cut and that the rest is on the ledger;
 * - when cut: "output_bytes" (out's length) and "output_full": out whole,
 *   or its longest prefix that keeps the payload within
 *   ORCH_TOOLRES_BODY_MAX, then "output_full_cut": true;
 * - "attachments": attach's items while the payload stays within that
 *   limit; one that does not fit is kept as its type, MIME type and URI
 *   with "dropped" saying why.
 * FO_OK or FO_E_NOMEM. */
int orch_toolres_fields(cJSON *o, const char *out, const cJSON *attach);

#endif
