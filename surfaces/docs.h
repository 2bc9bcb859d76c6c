/* docs: docs/HTTP.md and docs/MCP.md, generated from the handler table and
 * the error table, so the reference pages cannot drift from the code. */
#ifndef SURF_DOCS_H
#define SURF_DOCS_H

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"

/* Appends the markdown page `which` ("http": docs/HTTP.md, "mcp":
 * docs/MCP.md) to out: the hand-written prose kept in docs.c, the error
 * codes, then one section per method (name, summary, access, route or tool
 * name, input cap, input schema as indented JSON). The output depends only
 * on the tables, never on the time or the machine. Returns FO_OK,
 * FO_E_INVALID for another `which`, or out's FO_E_NOMEM / FO_E_TOO_LARGE
 * (out may then hold part of the page). */
int surf_docs_markdown(const char *which, struct fo_buf *out,
                       struct fo_err *err);

#endif
