/* table: the method table's two halves before they are joined. The data:
 * one JSON file a method (surfaces/methods/<name>.json), embedded at build
 * time by cmake/embed_methods.cmake. The code: name -> handler
 * (surfaces/methods.c). surfaces/table.c parses and checks each file and
 * joins it to its handler; surf.h serves the result. Only surfaces/ and
 * the tests include this header. */
#ifndef SURF_TABLE_H
#define SURF_TABLE_H

#include <stddef.h>

#include "surfaces/surf.h"

/* One embedded method file: its path in the source tree
 * ("surfaces/methods/submit.json") and its bytes (NUL-terminated). */
struct surf_method_file {
    const char *path;
    const char *text;
    size_t len;
};

/* The embedded files, sorted by path (generated: surf_method_files.c in
 * the build tree). */
extern const struct surf_method_file surf_method_files[];
extern const size_t surf_method_nfiles;

/* The code half of a row: a method's name, its blocking handler, and for
 * a method that runs on the run engine ("runs_on": "run") its way in. */
struct surf_handler {
    const char *name;
    surf_handler_fn handler;
    surf_start_fn start; /* NULL unless the method runs on the engine */
};

/* The handler table, in the order of the method table (methods.c). */
const struct surf_handler *surf_handlers(size_t *n);

/* Parses and checks one method file (path names it in every message) and
 * joins it to h, the handler row of the same name (NULL: there is none,
 * which is an error). On success *m is the row and *doc the parsed file
 * that m's strings and schemas point into (the caller keeps it while m is
 * used and frees it with cJSON_Delete). On failure FO_E_INTERNAL with err
 * "<path>: <field>: what is wrong"; *m and *doc untouched. Aliases are
 * checked for form here and for clashes across files by the loader. */
int surf_method_parse(const char *path, const char *text, size_t len,
                      const struct surf_handler *h, struct surf_method *m,
                      cJSON **doc, struct fo_err *err);

/* Builds a table from the given files and handlers, as the process does
 * once from the embedded ones (surf_table_check): every handler needs a
 * file and every file a handler, no two methods share a route, no alias
 * is another method's name or alias. On success *rows (n_handlers rows, in
 * the handlers' order), *aliases (*naliases) and *docs (n_handlers parsed
 * files) are the caller's to free with surf_table_release. */
int surf_table_build(const struct surf_method_file *files, size_t nfiles,
                     const struct surf_handler *handlers, size_t nhandlers,
                     struct surf_method **rows, struct surf_alias **aliases,
                     size_t *naliases, cJSON ***docs, struct fo_err *err);
void surf_table_release(struct surf_method *rows, struct surf_alias *aliases,
                        cJSON **docs, size_t nhandlers);

#endif
