/* gateway_forge: the forge layer on the gateway's way through, opt-in per
 * provider ("gateway_forge": true) or per client key (`forum key add
 * --forge`): a plain answer that calls no tool but whose text holds calls
 * to tools the client offered (written as text: the forms of
 * daemon/orch_rescue.h) is rewritten to carry them as real calls. Pure
 * functions over the bodies; the gateway decides when (docs/GATEWAY.md,
 * "The forge layer"). */
#ifndef SURF_GATEWAY_FORGE_H
#define SURF_GATEWAY_FORGE_H

#include <stddef.h>

#include <cJSON.h>

/* The names of the tools the request req offers, in a new array of
 * strings: a chat request's tools[].function.name or a Messages request's
 * tools[].name. NULL when it offers none (or out of memory). */
cJSON *surf_gwf_tools(const cJSON *req);

/* A chat completion (body, len bytes): each choice whose message has no
 * tool_calls and whose content (a string) holds calls to the tools named
 * in tools gets them as tool_calls (ids "call_<random>_<n>"), its content
 * the text without them (null when none is left) and finish_reason
 * "tool_calls". Returns 1 and *out (malloc'd, *out_len bytes, canonical
 * JSON) with *forms (a new array: each rescued call's form, in order)
 * when a call was rescued; 0 when none was (or body is not such an
 * answer: it is then left as it came); -1 out of memory. */
int surf_gwf_chat(const char *body, size_t len, const cJSON *tools, char **out,
                  size_t *out_len, cJSON **forms);

/* The same for an Anthropic message: with no tool_use block, each text
 * block holding calls becomes its remaining text (when any is left) and
 * tool_use blocks (ids "toolu_<random>_<n>", input the arguments object);
 * stop_reason "tool_use". */
int surf_gwf_messages(const char *body, size_t len, const cJSON *tools,
                      char **out, size_t *out_len, cJSON **forms);

#endif
