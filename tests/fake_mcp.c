/* fake_mcp: an MCP server on stdio for the tests of forum's MCP client.
 * Tools: shout {text} answers the text upper-cased; die {} exits at once
 * (the client must start it again); fail {} answers isError; big {bytes}
 * answers that many bytes of text; pic {} an image, a resource link and an
 * embedded text resource; rpcerr {} a JSON-RPC error. With the
 * argument "garbage" it answers every request with a line that is not
 * JSON. Each start and call is appended to the file $FAKE_MCP_LOG. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

static void logf_line(const char *what)
{
    const char *p = getenv("FAKE_MCP_LOG");
    FILE *f = p ? fopen(p, "a") : NULL;
    if (f) {
        fprintf(f, "%s\n", what);
        fclose(f);
    }
}

static void reply(const cJSON *id, cJSON *result)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "jsonrpc", "2.0");
    cJSON_AddItemToObject(o, "id", cJSON_Duplicate(id, 1));
    cJSON_AddItemToObject(o, "result", result);
    char *t = cJSON_PrintUnformatted(o);
    printf("%s\n", t);
    fflush(stdout);
    free(t);
    cJSON_Delete(o);
}

static cJSON *text_result(const char *text, int is_error)
{
    cJSON *r = cJSON_CreateObject();
    cJSON *c = cJSON_AddArrayToObject(r, "content");
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "type", "text");
    cJSON_AddStringToObject(t, "text", text);
    cJSON_AddItemToArray(c, t);
    if (is_error)
        cJSON_AddTrueToObject(r, "isError");
    return r;
}

static void reply_error(const cJSON *id, int code, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "jsonrpc", "2.0");
    cJSON_AddItemToObject(o, "id", cJSON_Duplicate(id, 1));
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddNumberToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    char *t = cJSON_PrintUnformatted(o);
    printf("%s\n", t);
    fflush(stdout);
    free(t);
    cJSON_Delete(o);
}

/* big: n bytes of text, lines of a counter, ending "END-OF-BIG" */
static cJSON *big_result(long n)
{
    char *t = malloc((size_t)n + 1);
    for (long i = 0; i < n; i++)
        t[i] = (char)('a' + i % 26);
    for (long i = 63; i < n; i += 64)
        t[i] = '\n';
    if (n >= 10)
        memcpy(t + n - 10, "END-OF-BIG", 10);
    t[n] = '\0';
    cJSON *r = text_result(t, 0);
    free(t);
    return r;
}

static cJSON *pic_result(void)
{
    return cJSON_Parse(
        "{\"content\":[{\"type\":\"text\",\"text\":\"a picture\"},"
        "{\"type\":\"image\",\"mimeType\":\"image/png\",\"data\":"
        "\"iVBORw0KGgo=\"},{\"type\":\"resource_link\",\"uri\":"
        "\"file:///srv/report.pdf\",\"name\":\"report\",\"mimeType\":"
        "\"application/pdf\"},{\"type\":\"resource\",\"resource\":{"
        "\"uri\":\"file:///srv/notes.txt\",\"mimeType\":\"text/plain\","
        "\"text\":\"the notes\"}}]}");
}

int main(int argc, char **argv)
{
    int garbage = argc > 1 && !strcmp(argv[1], "garbage");
    static char line[1 << 22];
    logf_line("start");
    while (fgets(line, sizeof(line), stdin)) {
        cJSON *m = cJSON_Parse(line);
        const cJSON *id = cJSON_GetObjectItem(m, "id");
        const cJSON *method = cJSON_GetObjectItem(m, "method");
        if (!m || !cJSON_IsString(method) || !id) {
            cJSON_Delete(m);
            continue;
        }
        if (garbage) {
            printf("this is not json\n");
            fflush(stdout);
        } else if (!strcmp(method->valuestring, "initialize")) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "protocolVersion", "2025-06-18");
            cJSON_AddObjectToObject(cJSON_AddObjectToObject(r, "capabilities"),
                                    "tools");
            cJSON *si = cJSON_AddObjectToObject(r, "serverInfo");
            cJSON_AddStringToObject(si, "name", "fake_mcp");
            cJSON_AddStringToObject(si, "version", "1");
            reply(id, r);
        } else if (!strcmp(method->valuestring, "tools/list")) {
            cJSON *r = cJSON_Parse(
                "{\"tools\":[{\"name\":\"shout\",\"description\":\"upper-"
                "cases a text\",\"inputSchema\":{\"type\":\"object\","
                "\"properties\":{\"text\":{\"type\":\"string\"}},"
                "\"required\":[\"text\"],\"additionalProperties\":false}},"
                "{\"name\":\"die\",\"description\":\"exits\",\"inputSchema\":"
                "{\"type\":\"object\"}},{\"name\":\"fail\",\"description\":"
                "\"fails\",\"inputSchema\":{\"type\":\"object\"}},"
                "{\"name\":\"big\",\"description\":\"a long text\","
                "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
                "\"bytes\":{\"type\":\"integer\"}}}},{\"name\":\"pic\","
                "\"description\":\"a picture\",\"inputSchema\":{\"type\":"
                "\"object\"}},{\"name\":\"rpcerr\",\"description\":"
                "\"errs\",\"inputSchema\":{\"type\":\"object\"}}]}");
            reply(id, r);
        } else if (!strcmp(method->valuestring, "tools/call")) {
            const cJSON *p = cJSON_GetObjectItem(m, "params");
            const char *name = cJSON_GetObjectItem(p, "name")->valuestring;
            char note[256];
            snprintf(note, sizeof(note), "call %s", name);
            logf_line(note);
            if (!strcmp(name, "die"))
                exit(3);
            const cJSON *args = cJSON_GetObjectItem(p, "arguments");
            const cJSON *nb = cJSON_GetObjectItem(args, "bytes");
            if (!strcmp(name, "fail")) {
                reply(id, text_result("it failed", 1));
            } else if (!strcmp(name, "big")) {
                reply(id, big_result(cJSON_IsNumber(nb) ? (long)nb->valuedouble
                                                        : 1000));
            } else if (!strcmp(name, "pic")) {
                reply(id, pic_result());
            } else if (!strcmp(name, "rpcerr")) {
                reply_error(id, -32603, "internal error in the server");
            } else {
                const cJSON *a = cJSON_GetObjectItem(p, "arguments");
                const cJSON *t = cJSON_GetObjectItem(a, "text");
                char *u = strdup(cJSON_IsString(t) ? t->valuestring : "");
                for (char *c = u; *c; c++)
                    *c = (char)toupper((unsigned char)*c);
                reply(id, text_result(u, 0));
                free(u);
            }
        }
        cJSON_Delete(m);
    }
    return 0;
}
