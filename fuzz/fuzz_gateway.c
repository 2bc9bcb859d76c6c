/* fuzz_gateway: the gateway's Anthropic <-> chat translation
 * (surfaces/gateway_anthropic.c) on any input. The first byte picks what
 * the rest is: an Anthropic request, a chat completion answer, a provider's
 * error body, or a chat stream whose events are the lines of the input.
 * Whatever it is given, each function returns FO_OK or its documented
 * error, and what it writes is strict JSON (a stream: "event:"/"data:"
 * pairs whose data parses, ending with message_stop once finished). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "surfaces/gateway_anthropic.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static void must_be_json(const char *s, size_t len)
{
    cJSON *j = NULL;
    struct fo_err err;
    if (fo_json_parse(s, len, &j, &err) != FO_OK)
        abort();
    cJSON_Delete(j);
}

static void tree_is_json(const cJSON *o)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (fo_json_canon(o, &b, &err) != FO_OK)
        abort();
    must_be_json(b.data, b.len);
    fo_buf_release(&b);
}

/* Every event of out: "event: T\ndata: JSON\n\n", the data strict. */
static void events_are_json(const struct fo_buf *out)
{
    const char *p = out->data ? out->data : "", *end = p + out->len;
    while (p < end) {
        if (strncmp(p, "event: ", 7) != 0)
            abort();
        const char *d = strstr(p, "\ndata: ");
        const char *e = d ? strstr(d, "\n\n") : NULL;
        if (!e)
            abort();
        must_be_json(d + 7, (size_t)(e - d - 7));
        p = e + 2;
    }
}

static void stream(const char *s, size_t len)
{
    struct surf_gwa_stream st;
    struct fo_buf out;
    surf_gwa_stream_init(&st, "m", NULL);
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    const char *p = s, *end = s + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (surf_gwa_stream_event(&st, p, l, &out) != FO_OK)
            abort();
        p += l + 1;
    }
    if (surf_gwa_stream_finish(&st, &out) != FO_OK || !st.finished)
        abort();
    events_are_json(&out);
    const char *last = "event: message_stop\ndata: {\"type\":\"message_stop\"}"
                       "\n\n";
    if (out.len < strlen(last) ||
        strcmp(out.data + out.len - strlen(last), last) != 0)
        abort();
    fo_buf_release(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1)
        return 0;
    const char *s = (const char *)data + 1;
    size_t len = n - 1;
    if (data[0] % 4 == 3) {
        stream(s, len);
        return 0;
    }
    if (data[0] % 4 == 2) {
        char *b = NULL;
        size_t bl = 0;
        if (surf_gwa_error_body(data[0] * 3, s, len, &b, &bl) != FO_OK)
            abort();
        must_be_json(b, bl);
        free(b);
        return 0;
    }
    cJSON *j = NULL, *o = NULL;
    struct fo_err err;
    if (fo_json_parse(s, len, &j, &err) != FO_OK)
        return 0;
    int rc =
        data[0] % 4 == 0
            ? surf_gwa_request(j, "m", &o, &err)
            : surf_gwa_response(
                  j, "m", cJSON_GetObjectItemCaseSensitive(j, "stop_sequences"),
                  &o, &err);
    if (rc == FO_OK)
        tree_is_json(o);
    else if (rc != FO_E_INVALID && rc != FO_E_UPSTREAM)
        abort();
    cJSON_Delete(o);
    cJSON_Delete(j);
    return 0;
}
