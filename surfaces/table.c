/* table: the method table built from data. Each method is described in
 * surfaces/methods/<name>.json (embedded at build time); this file parses
 * every one once, checks every field (a bad file is an error naming it and
 * the field, never a default), joins it to the handler of the same name
 * (surfaces/methods.c) and serves the rows, the aliases and the schemas. */
#include "surfaces/table.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"

#define DIR_PREFIX "surfaces/methods/"
/* What the HTTP router holds of a route (surfaces/http_route.c). */
#define ROUTE_MAX 128
#define ROUTE_SEGMENTS 8
/* The largest input cap a method may declare. */
#define INPUT_CAP_MAX (256u << 20)

/* Sets err to "<path>: <message>" with FO_E_INTERNAL. */
static int bad(struct fo_err *err, const char *path, const char *fmt, ...)
{
    char msg[FO_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return fo_err_set(err, FO_E_INTERNAL, "%s: %s", path, msg);
}

static const cJSON *member(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* Every key of o is one of keys[n]; what names o in a message. */
static int only_keys(const cJSON *o, const char *const *keys, size_t n,
                     const char *path, const char *what, struct fo_err *err)
{
    const cJSON *k;
    cJSON_ArrayForEach (k, o) {
        size_t i = 0;
        while (i < n && strcmp(keys[i], k->string) != 0)
            i++;
        if (i == n)
            return bad(err, path, "%s%s%s: unknown field", what,
                       *what ? "." : "", k->string);
    }
    return FO_OK;
}

/* A required non-empty string member of o (what names o: "" at the top). */
static int need_str(const cJSON *o, const char *what, const char *key,
                    const char **out, const char *path, struct fo_err *err)
{
    const cJSON *v = member(o, key);
    const char *dot = *what ? "." : "";
    if (!v)
        return bad(err, path, "%s%s%s: required", what, dot, key);
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return bad(err, path, "%s%s%s: must be a non-empty string", what, dot,
                   key);
    *out = v->valuestring;
    return FO_OK;
}

static int known_type(const char *t)
{
    static const char *const types[] = {"object", "array",  "string", "boolean",
                                        "null",   "number", "integer"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcmp(t, types[i]))
            return 1;
    return 0;
}

/* A property of the input schema: the keywords the dispatcher checks
 * (surf.c: type, minimum, maximum, enum of strings, minLength, maxLength)
 * must be what it understands; the others are guidance for readers. */
static int check_prop(const cJSON *p, const char *path, struct fo_err *err)
{
    const char *name = p->string;
    if (!cJSON_IsObject(p))
        return bad(err, path, "input_schema.%s: must be an object", name);
    const cJSON *t = member(p, "type");
    if (t && cJSON_IsString(t) && !known_type(t->valuestring))
        return bad(err, path, "input_schema.%s.type: %s is not a JSON type",
                   name, t->valuestring);
    if (t && cJSON_IsArray(t)) {
        const cJSON *x;
        cJSON_ArrayForEach (x, t)
            if (!cJSON_IsString(x) || !known_type(x->valuestring))
                return bad(err, path,
                           "input_schema.%s.type: not a list of JSON types",
                           name);
    } else if (t && !cJSON_IsString(t)) {
        return bad(err, path,
                   "input_schema.%s.type: must be a string or a list", name);
    }
    static const char *const nums[] = {"minimum", "maximum", "minLength",
                                       "maxLength"};
    for (size_t i = 0; i < 4; i++) {
        const cJSON *v = member(p, nums[i]);
        if (v && !cJSON_IsNumber(v))
            return bad(err, path, "input_schema.%s.%s: must be a number", name,
                       nums[i]);
    }
    const cJSON *en = member(p, "enum"), *x;
    if (en && !cJSON_IsArray(en))
        return bad(err, path, "input_schema.%s.enum: must be a list", name);
    cJSON_ArrayForEach (x, en)
        if (!cJSON_IsString(x))
            return bad(err, path, "input_schema.%s.enum: strings only", name);
    return FO_OK;
}

/* {"type": "object", "properties": {...}, "required": [names of them]}. */
static int check_input(const cJSON *s, const char *path, struct fo_err *err)
{
    if (!s)
        return bad(err, path, "input_schema: required");
    const cJSON *t = member(s, "type");
    if (!cJSON_IsObject(s) || !cJSON_IsString(t) ||
        strcmp(t->valuestring, "object") != 0)
        return bad(err, path, "input_schema: must be {\"type\": \"object\"}");
    const cJSON *props = member(s, "properties");
    if (!cJSON_IsObject(props))
        return bad(err, path, "input_schema.properties: must be an object");
    const cJSON *p;
    cJSON_ArrayForEach (p, props) {
        int rc = check_prop(p, path, err);
        if (rc)
            return rc;
    }
    const cJSON *req = member(s, "required");
    if (req && !cJSON_IsArray(req))
        return bad(err, path, "input_schema.required: must be a list");
    cJSON_ArrayForEach (p, req)
        if (!cJSON_IsString(p) || !member(props, p->valuestring))
            return bad(err, path, "input_schema.required: %s is not a property",
                       cJSON_IsString(p) ? p->valuestring : "a non-string");
    return FO_OK;
}

/* True when name is listed in the schema's "required". */
static int required(const cJSON *schema, const char *name)
{
    const cJSON *r;
    cJSON_ArrayForEach (r, member(schema, "required"))
        if (cJSON_IsString(r) && !strcmp(r->valuestring, name))
            return 1;
    return 0;
}

/* "http": {"method": GET|POST, "path": "/a/{x}"}: a path the router holds,
 * each {x} a required input property. */
static int check_http(const cJSON *http, const cJSON *schema,
                      struct surf_method *m, const char *path,
                      struct fo_err *err)
{
    static const char *const keys[] = {"method", "path"};
    if (!http)
        return bad(err, path, "http: required");
    if (!cJSON_IsObject(http))
        return bad(err, path, "http: must be {\"method\", \"path\"}");
    int rc = only_keys(http, keys, 2, path, "http", err);
    if (!rc)
        rc = need_str(http, "http", "method", &m->http_method, path, err);
    if (!rc)
        rc = need_str(http, "http", "path", &m->http_path, path, err);
    if (rc)
        return rc;
    if (strcmp(m->http_method, "GET") && strcmp(m->http_method, "POST"))
        return bad(err, path, "http.method: %s is not GET or POST",
                   m->http_method);
    const char *p = m->http_path;
    if (p[0] != '/' || strlen(p) >= ROUTE_MAX)
        return bad(err, path,
                   "http.path: must start with / and be under %d "
                   "bytes",
                   ROUTE_MAX);
    int segs = 0;
    for (const char *s = p; s && *s; s = strchr(s + 1, '/')) {
        const char *seg = s + 1, *end = strchr(seg, '/');
        size_t len = end ? (size_t)(end - seg) : strlen(seg);
        segs++;
        if (len == 0 && (end || s != p))
            return bad(err, path, "http.path: an empty segment");
        if (len > 2 && seg[0] == '{' && seg[len - 1] == '}') {
            char name[ROUTE_MAX];
            snprintf(name, sizeof(name), "%.*s", (int)(len - 2), seg + 1);
            if (!member(member(schema, "properties"), name) ||
                !required(schema, name))
                return bad(err, path,
                           "http.path: {%s} is not a required input property",
                           name);
        } else {
            for (size_t i = 0; i < len; i++)
                if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789_-.", seg[i]))
                    return bad(err, path,
                               "http.path: %.*s: not a plain "
                               "segment (a-z 0-9 _ - .) or {field}",
                               (int)len, seg);
        }
    }
    if (segs > ROUTE_SEGMENTS)
        return bad(err, path, "http.path: over %d segments", ROUTE_SEGMENTS);
    return FO_OK;
}

/* "flags": ["read" or "write", then "admin" and "long" as they apply]. */
static int check_flags(const cJSON *f, unsigned *out, const char *path,
                       struct fo_err *err)
{
    static const struct {
        const char *name;
        unsigned bit;
    } known[] = {{"read", SURF_READ},
                 {"write", SURF_WRITE},
                 {"admin", SURF_ADMIN},
                 {"long", SURF_LONG}};
    if (!f)
        return bad(err, path, "flags: required");
    if (!cJSON_IsArray(f))
        return bad(err, path, "flags: must be a list");
    unsigned bits = 0;
    const cJSON *x;
    cJSON_ArrayForEach (x, f) {
        size_t i = 0;
        while (i < 4 &&
               !(cJSON_IsString(x) && !strcmp(x->valuestring, known[i].name)))
            i++;
        if (i == 4)
            return bad(err, path, "flags: %s is not read, write, admin or long",
                       cJSON_IsString(x) ? x->valuestring : "a non-string");
        if (bits & known[i].bit)
            return bad(err, path, "flags: %s twice", known[i].name);
        bits |= known[i].bit;
    }
    if (!(bits & SURF_READ) == !(bits & SURF_WRITE))
        return bad(err, path, "flags: exactly one of read and write");
    *out = bits;
    return FO_OK;
}

/* "runs_on": where the method runs (enum surf_where), against its
 * handler: "run" exactly when the handler row has the engine's way in. */
static int check_where(const cJSON *w, const struct surf_handler *h, int *out,
                       const char *path, struct fo_err *err)
{
    static const char *const names[] = {"worker", "loop", "commit", "run"};
    if (!w)
        return bad(err, path, "runs_on: required");
    int i = 0;
    while (i < 4 && !(cJSON_IsString(w) && !strcmp(w->valuestring, names[i])))
        i++;
    if (i == 4)
        return bad(err, path, "runs_on: must be worker, loop, commit or run");
    if ((i == SURF_ON_RUN) != (h->start != NULL))
        return bad(err, path,
                   i == SURF_ON_RUN ? "runs_on: run, but the handler of %s in "
                                      "surfaces/methods.c has no engine start"
                                    : "runs_on: %s has an engine start in "
                                      "surfaces/methods.c: it runs on run",
                   h->name);
    if ((i == SURF_ON_RUN) != (h->handler == NULL))
        return bad(err, path,
                   i == SURF_ON_RUN ? "runs_on: run, but %s has a blocking "
                                      "handler in surfaces/methods.c (a run "
                                      "has one entry: the engine's)"
                                    : "runs_on: %s has no handler in "
                                      "surfaces/methods.c",
                   h->name);
    *out = i;
    return FO_OK;
}

/* "annotations": MCP's four hints, each a boolean; readOnlyHint is the
 * read flag. */
static int check_annotations(const cJSON *a, unsigned flags, const char *path,
                             struct fo_err *err)
{
    static const char *const hints[] = {"readOnlyHint", "destructiveHint",
                                        "idempotentHint", "openWorldHint"};
    if (!a)
        return bad(err, path, "annotations: required");
    if (!cJSON_IsObject(a))
        return bad(err, path, "annotations: must be an object");
    int rc = only_keys(a, hints, 4, path, "annotations", err);
    for (size_t i = 0; !rc && i < 4; i++)
        if (!cJSON_IsBool(member(a, hints[i])))
            rc =
                bad(err, path, "annotations.%s: required, a boolean", hints[i]);
    if (!rc && cJSON_IsTrue(member(a, "readOnlyHint")) != !(flags & SURF_WRITE))
        rc = bad(err, path,
                 "annotations.readOnlyHint: must be %s for a %s "
                 "method",
                 flags & SURF_WRITE ? "false" : "true",
                 flags & SURF_WRITE ? "write" : "read");
    return rc;
}

/* "aliases": [the reference's names], each [A-Za-z0-9_.]. */
static int check_aliases(const cJSON *a, const char *path, struct fo_err *err)
{
    if (!a)
        return bad(err, path, "aliases: required (an empty list: none)");
    if (!cJSON_IsArray(a))
        return bad(err, path, "aliases: must be a list");
    const cJSON *x;
    cJSON_ArrayForEach (x, a) {
        if (!cJSON_IsString(x) || !x->valuestring[0] ||
            strlen(x->valuestring) > 64)
            return bad(err, path, "aliases: names of 1..64 bytes");
        for (const char *c = x->valuestring; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyz"
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.",
                        *c))
                return bad(err, path, "aliases: %s: not [A-Za-z0-9_.]",
                           x->valuestring);
    }
    return FO_OK;
}

/* "name": the file's own name, [a-z_], with a handler. */
static int check_name(const cJSON *doc, const struct surf_handler *h,
                      struct surf_method *m, const char *path,
                      struct fo_err *err)
{
    int rc = need_str(doc, "", "name", &m->name, path, err);
    if (rc)
        return rc;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(m->name);
    if (strncmp(base, m->name, n) != 0 || strcmp(base + n, ".json") != 0)
        return bad(err, path, "name: %s, but the file is %s", m->name, base);
    for (const char *c = m->name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || *c == '_'))
            return bad(err, path, "name: %s: only a-z and _", m->name);
    if (!h || strcmp(h->name, m->name) != 0)
        return bad(err, path, "name: %s has no handler in surfaces/methods.c",
                   m->name);
    return FO_OK;
}

static int check_doc(const cJSON *doc, const struct surf_handler *h,
                     struct surf_method *m, const char *path,
                     struct fo_err *err)
{
    static const char *const keys[] = {
        "name",    "title",        "description",  "http",
        "runs_on", "flags",        "max_input",    "annotations",
        "aliases", "input_schema", "output_schema"};
    if (!cJSON_IsObject(doc))
        return bad(err, path, "must be a JSON object");
    int rc =
        only_keys(doc, keys, sizeof(keys) / sizeof(keys[0]), path, "", err);
    if (!rc)
        rc = check_name(doc, h, m, path, err);
    if (!rc)
        rc = need_str(doc, "", "title", &m->title, path, err);
    if (!rc)
        rc = need_str(doc, "", "description", &m->summary, path, err);
    if (!rc)
        rc = check_input(member(doc, "input_schema"), path, err);
    if (!rc)
        rc = check_http(member(doc, "http"), member(doc, "input_schema"), m,
                        path, err);
    if (!rc)
        rc = check_flags(member(doc, "flags"), &m->flags, path, err);
    if (!rc)
        rc = check_where(member(doc, "runs_on"), h, &m->where, path, err);
    const cJSON *cap = member(doc, "max_input");
    if (!rc && (!cJSON_IsNumber(cap) || cap->valuedouble < 1 ||
                cap->valuedouble > INPUT_CAP_MAX ||
                cap->valuedouble != (double)(size_t)cap->valuedouble))
        rc = bad(err, path, "max_input: required, bytes in 1..%u",
                 INPUT_CAP_MAX);
    if (!rc)
        rc = check_annotations(member(doc, "annotations"), m->flags, path, err);
    if (!rc)
        rc = check_aliases(member(doc, "aliases"), path, err);
    const cJSON *os = member(doc, "output_schema");
    const cJSON *ot = member(os, "type");
    if (!rc && os &&
        (!cJSON_IsObject(os) || !cJSON_IsString(ot) ||
         strcmp(ot->valuestring, "object") != 0))
        rc = bad(err, path, "output_schema: must be {\"type\": \"object\"}");
    if (rc)
        return rc;
    m->max_input = (size_t)cap->valuedouble;
    m->input_schema = member(doc, "input_schema");
    m->output_schema = os;
    m->annotations = member(doc, "annotations");
    m->handler = h->handler;
    m->start = h->start;
    return FO_OK;
}

int surf_method_parse(const char *path, const char *text, size_t len,
                      const struct surf_handler *h, struct surf_method *m,
                      cJSON **doc, struct fo_err *err)
{
    cJSON *d = NULL;
    struct fo_err perr;
    if (fo_json_parse(text, len, &d, &perr) != FO_OK)
        return bad(err, path, "%s", perr.msg);
    struct surf_method row = {0};
    int rc = check_doc(d, h, &row, path, err);
    if (rc) {
        cJSON_Delete(d);
        return rc;
    }
    *m = row;
    *doc = d;
    return FO_OK;
}

/* ---- the whole table ----------------------------------------------------- */

static const struct surf_handler *handler_of(const struct surf_handler *hs,
                                             size_t nh, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (size_t i = 0; i < nh; i++) {
        size_t n = strlen(hs[i].name);
        if (!strncmp(base, hs[i].name, n) && !strcmp(base + n, ".json"))
            return &hs[i];
    }
    return NULL;
}

/* Every alias once, and none the name of a method. */
static int collect_aliases(struct surf_method *rows, cJSON **docs, size_t nh,
                           struct surf_alias **out, size_t *nout,
                           struct fo_err *err)
{
    size_t n = 0, k = 0;
    for (size_t i = 0; i < nh; i++)
        n += (size_t)cJSON_GetArraySize(member(docs[i], "aliases"));
    struct surf_alias *a = calloc(n ? n : 1, sizeof(*a));
    if (!a)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; i < nh; i++) {
        const cJSON *x;
        cJSON_ArrayForEach (x, member(docs[i], "aliases")) {
            const char *clash = NULL;
            for (size_t j = 0; j < nh && !clash; j++)
                if (!strcmp(rows[j].name, x->valuestring))
                    clash = "a method's name";
            for (size_t j = 0; j < k && !clash; j++)
                if (!strcmp(a[j].name, x->valuestring))
                    clash = a[j].method;
            if (clash) {
                free(a);
                return fo_err_set(err, FO_E_INTERNAL,
                                  DIR_PREFIX "%s.json: aliases: %s is also "
                                             "%s%s",
                                  rows[i].name, x->valuestring,
                                  strchr(clash, ' ') ? "" : "an alias of ",
                                  clash);
            }
            a[k++] = (struct surf_alias){x->valuestring, rows[i].name};
        }
    }
    *out = a;
    *nout = k;
    return FO_OK;
}

/* No two methods answer the same HTTP method and path. */
static int routes_unique(const struct surf_method *rows, size_t n,
                         struct fo_err *err)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(rows[i].http_method, rows[j].http_method) &&
                !strcmp(rows[i].http_path, rows[j].http_path))
                return fo_err_set(err, FO_E_INTERNAL,
                                  DIR_PREFIX "%s.json: http: %s %s is also "
                                             "%s's route",
                                  rows[i].name, rows[i].http_method,
                                  rows[i].http_path, rows[j].name);
    return FO_OK;
}

void surf_table_release(struct surf_method *rows, struct surf_alias *aliases,
                        cJSON **docs, size_t nhandlers)
{
    for (size_t i = 0; docs && i < nhandlers; i++)
        cJSON_Delete(docs[i]);
    free(docs);
    free(rows);
    free(aliases);
}

int surf_table_build(const struct surf_method_file *files, size_t nfiles,
                     const struct surf_handler *hs, size_t nh,
                     struct surf_method **rows_out, struct surf_alias **aliases,
                     size_t *naliases, cJSON ***docs_out, struct fo_err *err)
{
    struct surf_method *rows = calloc(nh ? nh : 1, sizeof(*rows));
    cJSON **docs = calloc(nh ? nh : 1, sizeof(*docs));
    struct surf_alias *al = NULL;
    size_t nal = 0;
    int rc = rows && docs ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; !rc && i < nh; i++)
        for (size_t j = 0; !rc && j < i; j++)
            if (!strcmp(hs[i].name, hs[j].name))
                rc = fo_err_set(err, FO_E_INTERNAL,
                                "surfaces/methods.c: %s: two handlers",
                                hs[i].name);
    /* every file has a handler, and each is parsed into its row */
    for (size_t f = 0; !rc && f < nfiles; f++) {
        const struct surf_handler *h = handler_of(hs, nh, files[f].path);
        size_t i = h ? (size_t)(h - hs) : 0;
        if (h && docs[i])
            rc = fo_err_set(err, FO_E_INTERNAL, "%s: embedded twice",
                            files[f].path);
        else
            rc = surf_method_parse(files[f].path, files[f].text, files[f].len,
                                   h, &rows[i], &docs[i], err);
    }
    /* and every handler a file */
    for (size_t i = 0; !rc && i < nh; i++)
        if (!docs[i])
            rc = fo_err_set(err, FO_E_INTERNAL,
                            DIR_PREFIX "%s.json: missing: the handler %s "
                                       "(surfaces/methods.c) has no data file",
                            hs[i].name, hs[i].name);
    if (!rc)
        rc = routes_unique(rows, nh, err);
    if (!rc)
        rc = collect_aliases(rows, docs, nh, &al, &nal, err);
    if (rc) {
        surf_table_release(rows, NULL, docs, nh);
        return rc;
    }
    *rows_out = rows;
    *aliases = al;
    *naliases = nal;
    *docs_out = docs;
    return FO_OK;
}

/* ---- the process's table -------------------------------------------------
 * Built once from the embedded files and kept for the process's life. */

static struct {
    struct surf_method *rows;
    size_t n;
    struct surf_alias *aliases;
    size_t naliases;
    cJSON **docs;
    int rc;
    struct fo_err err;
} table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_load(void)
{
    size_t nh;
    const struct surf_handler *hs = surf_handlers(&nh);
    table.rc = surf_table_build(surf_method_files, surf_method_nfiles, hs, nh,
                                &table.rows, &table.aliases, &table.naliases,
                                &table.docs, &table.err);
    table.n = table.rc ? 0 : nh;
}

int surf_table_check(struct fo_err *err)
{
    pthread_once(&table_once, table_load);
    if (table.rc && err)
        *err = table.err;
    return table.rc;
}

/* The table, or the end of a process whose build embedded a bad one. */
static void loaded(void)
{
    struct fo_err err;
    if (surf_table_check(&err) != FO_OK) {
        fprintf(stderr, "forum: the method table: %s\n", err.msg);
        abort();
    }
}

const struct surf_method *surf_methods(size_t *n)
{
    loaded();
    *n = table.n;
    return table.rows;
}

const struct surf_alias *surf_aliases(size_t *n)
{
    loaded();
    *n = table.naliases;
    return table.aliases;
}

const struct surf_method *surf_find(const char *name)
{
    loaded();
    for (size_t i = 0; i < table.n; i++)
        if (strcmp(table.rows[i].name, name) == 0)
            return &table.rows[i];
    for (size_t i = 0; i < table.naliases; i++)
        if (strcmp(table.aliases[i].name, name) == 0)
            return surf_find(table.aliases[i].method);
    return NULL;
}

const cJSON *surf_schema(const struct surf_method *m)
{
    return m->input_schema;
}

const cJSON *surf_output_schema(const struct surf_method *m)
{
    return m->output_schema;
}
