/* fake_mcp: an MCP server on stdio for the tests of forum's MCP client.
 * Tools: shout {text} answers the text upper-cased; die {} exits at once
 * (the client must start it again); fail {} answers isError. With the
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

int main(int argc, char **argv)
{
    int garbage = argc > 1 && !strcmp(argv[1], "garbage");
    static char line[1 << 20];
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
                "\"fails\",\"inputSchema\":{\"type\":\"object\"}}]}");
            reply(id, r);
        } else if (!strcmp(method->valuestring, "tools/call")) {
            const cJSON *p = cJSON_GetObjectItem(m, "params");
            const char *name = cJSON_GetObjectItem(p, "name")->valuestring;
            char note[256];
            snprintf(note, sizeof(note), "call %s", name);
            logf_line(note);
            if (!strcmp(name, "die"))
                exit(3);
            if (!strcmp(name, "fail")) {
                reply(id, text_result("it failed", 1));
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
