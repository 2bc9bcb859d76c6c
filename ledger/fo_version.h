/* fo_version: forum's version, in one place (CLI, MCP serverInfo, the
 * daemon's state file). */
#ifndef FO_VERSION_H
#define FO_VERSION_H

#define FO_VERSION "0.1.0"

#endif
