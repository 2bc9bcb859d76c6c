/* test_table: the method table as data. Every file of surfaces/methods/ is
 * embedded as it is on disk and loads; every handler has a file and every
 * file a handler; a bad file is an error that names it and the field, at
 * start (surfaces/table.c) and, for what the build can see, at build time
 * (cmake/embed_methods.cmake). */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "surfaces/surf.h"
#include "surfaces/table.h"
#include "tests/testutil.h"

#define DIR_REL "surfaces/methods/"

/* The file of method name as embedded, or NULL. */
static const struct surf_method_file *embedded(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), DIR_REL "%s.json", name);
    for (size_t i = 0; i < surf_method_nfiles; i++)
        if (!strcmp(surf_method_files[i].path, path))
            return &surf_method_files[i];
    return NULL;
}

static const struct surf_handler *handler(const char *name)
{
    size_t n;
    const struct surf_handler *h = surf_handlers(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(h[i].name, name))
            return &h[i];
    return NULL;
}

Test(surf_table_data, every_file_on_disk_is_embedded_and_loads)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/" DIR_REL, FORUM_SRC);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    size_t files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        files++;
        char path[1024], name[256];
        snprintf(path, sizeof(path), "%s%s", dir, e->d_name);
        snprintf(name, sizeof(name), "%.*s", (int)(l - 5), e->d_name);
        size_t len = 0;
        char *text = tu_read_file(path, &len);
        cr_assert_not_null(text, "%s", path);
        const struct surf_method_file *f = embedded(name);
        cr_assert_not_null(f, "%s is not embedded: rebuild", path);
        cr_assert(f->len == len && !memcmp(f->text, text, len),
                  "%s differs from the embedded copy: rebuild", path);
        struct surf_method m;
        cJSON *doc = NULL;
        struct fo_err err;
        cr_assert_eq(surf_method_parse(f->path, text, len, handler(name), &m,
                                       &doc, &err),
                     FO_OK, "%s", err.msg);
        cr_assert_str_eq(m.name, name);
        cJSON_Delete(doc);
        free(text);
    }
    closedir(d);
    cr_assert_eq(files, surf_method_nfiles);
}

Test(surf_table_data, every_handler_has_a_file_and_every_file_a_handler)
{
    size_t nh, n;
    const struct surf_handler *h = surf_handlers(&nh);
    for (size_t i = 0; i < nh; i++)
        cr_assert_not_null(embedded(h[i].name), "%s: no " DIR_REL "%s.json",
                           h[i].name, h[i].name);
    for (size_t i = 0; i < surf_method_nfiles; i++) {
        const char *base = surf_method_files[i].path + strlen(DIR_REL);
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(strlen(base) - 5), base);
        cr_assert_not_null(handler(name), "%s: no handler",
                           surf_method_files[i].path);
    }
    struct fo_err err;
    cr_assert_eq(surf_table_check(&err), FO_OK, "%s", err.msg);
    const struct surf_method *t = surf_methods(&n);
    cr_assert_eq(n, nh);
    cr_assert_eq(n, surf_method_nfiles);
    /* the rows are the handlers', in the handlers' order, with their data */
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(t[i].name, h[i].name);
        cr_assert_eq(t[i].handler, h[i].handler);
        cr_assert_eq(t[i].start, h[i].start);
        cr_assert_not_null(t[i].title);
        cr_assert_not_null(t[i].annotations);
    }
}

/* submit.json with one change: set (or, with value NULL, delete) the
 * member key of the object at dotted path under the top. */
static char *mutated(const char *name, const char *obj, const char *key,
                     const char *value)
{
    const struct surf_method_file *f = embedded(name);
    cJSON *doc = NULL;
    struct fo_err err;
    cr_assert_eq(fo_json_parse(f->text, f->len, &doc, &err), FO_OK);
    cJSON *o = doc;
    if (obj)
        o = cJSON_GetObjectItemCaseSensitive(doc, obj);
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    if (value) {
        cJSON *v = NULL;
        cr_assert_eq(fo_json_parse(value, strlen(value), &v, &err), FO_OK, "%s",
                     value);
        cJSON_AddItemToObject(o, key, v);
    }
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_write(doc, 0, &b, &err), FO_OK);
    cJSON_Delete(doc);
    return b.data;
}

/* The error of parsing text as method name's file. */
static void refused(const char *name, const char *text, const char *want)
{
    char path[512];
    snprintf(path, sizeof(path), DIR_REL "%s.json", name);
    struct surf_method m;
    cJSON *doc = NULL;
    struct fo_err err;
    cr_assert_eq(surf_method_parse(path, text, strlen(text), handler(name), &m,
                                   &doc, &err),
                 FO_E_INTERNAL, "%s: accepted: %s", want, text);
    cr_assert_null(doc);
    char head[600];
    snprintf(head, sizeof(head), "%s: ", path);
    cr_assert(!strncmp(err.msg, head, strlen(head)), "no path in: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, want), "want \"%s\" in: %s", want,
                       err.msg);
}

static void refused_change(const char *name, const char *obj, const char *key,
                           const char *value, const char *want)
{
    char *text = mutated(name, obj, key, value);
    refused(name, text, want);
    free(text);
}

Test(surf_table_data, a_bad_file_is_named_with_its_field)
{
    refused("submit", "{\"name\": \"submit\",}", "submit.json: ");
    refused("submit", "[]", "must be a JSON object");
    refused_change("submit", NULL, "colour", "\"red\"",
                   "colour: unknown field");
    refused_change("submit", NULL, "title", NULL, "title: required");
    refused_change("submit", NULL, "description", "\"\"",
                   "description: must be a non-empty string");
    refused_change("submit", NULL, "name", "\"plan\"",
                   "name: plan, but the "
                   "file is submit.json");
    refused_change("submit", NULL, "flags", "[\"write\",\"root\"]",
                   "flags: root is not");
    refused_change("submit", NULL, "flags", "[\"long\"]",
                   "flags: exactly one of read and write");
    refused_change("submit", NULL, "flags", NULL, "flags: required");
    refused_change("submit", NULL, "runs_on", "\"worker\"",
                   "runs_on: submit has an engine start");
    refused_change("ledger_get", NULL, "runs_on", "\"run\"",
                   "runs_on: run, but the handler of ledger_get");
    refused_change("submit", NULL, "runs_on", "\"cloud\"",
                   "runs_on: must be worker, loop, commit or run");
    refused_change("submit", NULL, "max_input", "0", "max_input: required");
    refused_change("submit", NULL, "max_input", "1.5", "max_input: required");
    refused_change("submit", "http", "method", "\"PUT\"",
                   "http.method: PUT is not GET or POST");
    refused_change("submit", "http", "path", "\"submit\"",
                   "http.path: must start with /");
    refused_change("submit", "http", "path", "\"/runs/{nope}\"",
                   "http.path: {nope} is not a required input property");
    refused_change("ledger_get", "http", "path", "\"/ledger/{seq}/x y\"",
                   "http.path: x y: not a plain segment");
    refused_change("submit", "http", "verb", "\"POST\"",
                   "http.verb: unknown field");
    refused_change("submit", NULL, "annotations", "{\"readOnlyHint\":true}",
                   "annotations.destructiveHint: required");
    refused_change("submit", "annotations", "readOnlyHint", "true",
                   "annotations.readOnlyHint: must be false for a write");
    refused_change("submit", NULL, "aliases", NULL, "aliases: required");
    refused_change("submit", NULL, "aliases", "[\"forum submit\"]",
                   "aliases: forum submit: not [A-Za-z0-9_.]");
    refused_change("submit", NULL, "input_schema", "{\"type\":\"array\"}",
                   "input_schema: must be {\"type\": \"object\"}");
    refused_change("submit", "input_schema", "required", "[\"nope\"]",
                   "input_schema.required: nope is not a property");
    refused_change("submit", "input_schema", "properties",
                   "{\"request\":{\"type\":\"text\"}}",
                   "input_schema.request.type: text is not a JSON type");
    refused_change("submit", NULL, "output_schema", "{\"type\":\"string\"}",
                   "output_schema: must be {\"type\": \"object\"}");
}

/* The whole table from files: a handler without its file, a file without
 * its handler, an alias twice, a route twice: each named. */
static void build_refused(const struct surf_method_file *files, size_t n,
                          const char *want)
{
    size_t nh, nal;
    const struct surf_handler *h = surf_handlers(&nh);
    struct surf_method *rows = NULL;
    struct surf_alias *al = NULL;
    cJSON **docs = NULL;
    struct fo_err err;
    cr_assert_eq(
        surf_table_build(files, n, h, nh, &rows, &al, &nal, &docs, &err),
        FO_E_INTERNAL, "accepted (want %s)", want);
    cr_assert_not_null(strstr(err.msg, want), "want \"%s\" in: %s", want,
                       err.msg);
}

Test(surf_table_data, the_table_is_refused_whole)
{
    size_t n = surf_method_nfiles, nh, nal;
    struct surf_method_file *files = calloc(n + 1, sizeof(*files));
    memcpy(files, surf_method_files, n * sizeof(*files));
    /* as embedded: builds */
    const struct surf_handler *h = surf_handlers(&nh);
    struct surf_method *rows = NULL;
    struct surf_alias *al = NULL;
    cJSON **docs = NULL;
    struct fo_err err;
    cr_assert_eq(
        surf_table_build(files, n, h, nh, &rows, &al, &nal, &docs, &err), FO_OK,
        "%s", err.msg);
    surf_table_release(rows, al, docs, nh);
    /* without submit.json */
    size_t k = 0;
    while (strcmp(files[k].path, DIR_REL "submit.json"))
        k++;
    struct surf_method_file keep = files[k];
    files[k] = files[n - 1];
    build_refused(files, n - 1,
                  DIR_REL "submit.json: missing: the handler submit");
    files[k] = keep;
    /* a file no handler answers */
    static const char extra[] = "{\"name\": \"nope\"}";
    files[n] = (struct surf_method_file){DIR_REL "nope.json", extra,
                                         sizeof(extra) - 1};
    build_refused(files, n + 1, DIR_REL "nope.json: name: nope has no handler");
    /* plan.json claiming submit's alias, then submit's route */
    k = 0;
    while (strcmp(files[k].path, DIR_REL "plan.json"))
        k++;
    keep = files[k];
    char *text = mutated("plan", NULL, "aliases", "[\"forum.submit\"]");
    files[k].text = text;
    files[k].len = strlen(text);
    build_refused(files, n, "aliases: forum.submit is also an alias of");
    free(text);
    text = mutated("plan", "http", "path", "\"/submit\"");
    files[k].text = text;
    files[k].len = strlen(text);
    build_refused(files, n, "http: POST /submit is also");
    free(text);
    text = mutated("plan", NULL, "aliases", "[\"submit\"]");
    files[k].text = text;
    files[k].len = strlen(text);
    build_refused(files, n, "aliases: submit is also a method's name");
    free(text);
    files[k] = keep;
    free(files);
}

/* cmake/embed_methods.cmake on a directory with one bad file: the build
 * stops, naming it. */
static char *embed(const char *dir, int *status)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "'%s' -DDIR='%s' -DOUT='%s/out.c' -P "
             "'%s/cmake/embed_methods.cmake' 2>&1",
             FORUM_CMAKE, dir, dir, FORUM_SRC);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    static char out[8192];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    *status = pclose(p);
    return out;
}

Test(surf_table_data, the_build_stops_at_a_broken_file)
{
    static const struct {
        const char *file, *text, *want;
    } cases[] = {
        /* (CMake's reader lets a trailing comma by: the strict reader at
         * start refuses it, a_bad_file_is_named_with_its_field) */
        {"a.json", "{\"name\": \"a\"", "a.json: not a method file"},
        {"b.json", "{\"name\": \"c\"}", "b.json: \"name\" is \"c\""},
        {"d.json", "{\"name\": \"d\", \"title\": \"\xc3\xa9\"}",
         "d.json: not ASCII"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *dir = tu_tmpdir();
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, cases[i].file);
        cr_assert_eq(tu_write_file(path, cases[i].text, strlen(cases[i].text)),
                     0);
        int status;
        const char *out = embed(dir, &status);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0, "%s: %s",
                  cases[i].file, out);
        cr_assert_not_null(strstr(out, cases[i].want), "want %s in: %s",
                           cases[i].want, out);
        tu_rmrf(dir);
    }
    /* and a good one embeds */
    char *dir = tu_tmpdir();
    char path[1024];
    snprintf(path, sizeof(path), "%s/ok.json", dir);
    cr_assert_eq(tu_write_file(path, "{\"name\": \"ok\"}", 14), 0);
    int status;
    const char *out = embed(dir, &status);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
    snprintf(path, sizeof(path), "%s/out.c", dir);
    cr_assert(tu_file_has(path, "surfaces/methods/ok.json"));
    tu_rmrf(dir);
}
