/* mcp_res: MCP resources (forum://entry/{seq}, forum://run/{id},
 * forum://checkpoint/latest, forum://status) and prompts (audit_run,
 * explain_verify_failure) for `forum mcp`. */
#ifndef MCP_RES_H
#define MCP_RES_H

#include <cJSON.h>

#include "ledger/fo_err.h"

struct surf_ctx;

/* The results of resources/list, resources/templates/list, prompts/list. */
cJSON *mcp_resources_list(void);
cJSON *mcp_resource_templates(void);
cJSON *mcp_prompts_list(void);

/* resources/read of uri: *out {"contents": [{uri, mimeType, text}]}.
 * FO_E_NOT_FOUND for a uri that names nothing (or an entry or run that is
 * not there), other codes as the methods behind it. */
int mcp_resource_read(struct surf_ctx *ctx, const char *uri, cJSON **out,
                      struct fo_err *err);

/* prompts/get: *out {"description", "messages"}. FO_E_NOT_FOUND for an
 * unknown prompt, FO_E_INVALID for bad arguments. */
int mcp_prompt_get(struct surf_ctx *ctx, const char *name, const cJSON *args,
                   cJSON **out, struct fo_err *err);

#endif
