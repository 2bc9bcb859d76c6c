/* gateway_anthropic: Anthropic Messages over an OpenAI-compatible chat
 * provider, for the gateway's POST /v1/messages when no Anthropic provider
 * serves the model. Pure functions over cJSON: the request one way
 * (system, messages with text, image, tool_use and tool_result blocks,
 * tools, tool_choice and the sampling fields), the answer the other
 * (content blocks, stop reason, usage), and a streaming translator that
 * turns each chat completion chunk into the Anthropic event sequence as it
 * comes. docs/GATEWAY.md says what maps to what. */
#ifndef SURF_GATEWAY_ANTHROPIC_H
#define SURF_GATEWAY_ANTHROPIC_H

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"

/* The chat completions request for the Anthropic request req, asking the
 * provider for model (req's own "model" is not sent on). Streams ask for
 * the usage too (stream_options.include_usage). *out is a new tree the
 * caller frees. FO_E_INVALID with a sentence when req is not a Messages
 * request (no "messages" array, a role or block it does not know, a
 * tool_use without a name), FO_E_NOMEM. */
int surf_gwa_request(const cJSON *req, const char *model, cJSON **out,
                     struct fo_err *err);

/* The Anthropic message for the chat completion ans, with model as the
 * client asked for it. stops is the request's "stop_sequences" (NULL when
 * none): a provider that says which one ended the answer (a choice's
 * "stop_reason" string, as vLLM gives it) gets stop_reason
 * "stop_sequence". *out is a new tree the caller frees. FO_E_UPSTREAM when
 * ans has no choices[0].message, FO_E_NOMEM. */
int surf_gwa_response(const cJSON *ans, const char *model, const cJSON *stops,
                      cJSON **out, struct fo_err *err);

/* The Anthropic error type for a provider's HTTP status. */
const char *surf_gwa_error_type(int status);

/* An Anthropic error body ({"type": "error", "error": {...}}) for a
 * provider's error answer (status, and its body when it is JSON: its
 * error.message is kept). malloc'd into *out (len in *len); FO_E_NOMEM. */
int surf_gwa_error_body(int status, const char *body, size_t body_len,
                        char **out, size_t *len);

#define SURF_GWA_TOOLS_MAX 128

/* A chat completion stream being turned into Anthropic events. */
struct surf_gwa_stream {
    char model[256];
    char id[128];
    const cJSON *stops; /* borrowed: the request's stop_sequences */
    int started;        /* message_start was written */
    int finished;       /* message_stop was written */
    int open;           /* the index of the open content block, -1 none */
    int open_tool;      /* the open block is a tool_use */
    int next;           /* the next block's index */
    int n_tools;        /* tool_use blocks opened */
    int tool_block[SURF_GWA_TOOLS_MAX]; /* a tool call's block, -1 none */
    const char *stop_reason;            /* from the last finish_reason */
    char stop_sequence[256];
    long long tokens_in, tokens_out;
};

/* model: as the client asked for it; stops: as for surf_gwa_response,
 * kept by the caller while the stream lives. */
void surf_gwa_stream_init(struct surf_gwa_stream *s, const char *model,
                          const cJSON *stops);

/* One event's data (len bytes) of the chat stream: the Anthropic events
 * it makes are appended to out as SSE ("event: T\ndata: JSON\n\n"). The
 * first chunk writes message_start; text deltas text_delta events, tool
 * call deltas input_json_delta events, each in a content block opened and
 * closed in order; "[DONE]" ends the message (surf_gwa_stream_finish).
 * Data that is not JSON is skipped. FO_OK, or out's FO_E_NOMEM /
 * FO_E_TOO_LARGE. */
int surf_gwa_stream_event(struct surf_gwa_stream *s, const char *data,
                          size_t len, struct fo_buf *out);

/* Ends the message (once): the open block's content_block_stop, then
 * message_delta (stop_reason, stop_sequence, usage) and message_stop.
 * A stream that never started gets its message_start first. */
int surf_gwa_stream_finish(struct surf_gwa_stream *s, struct fo_buf *out);

#endif
