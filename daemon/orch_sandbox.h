/* orch_sandbox: where an agent's program runs (the run_command tool).
 *
 * With bubblewrap (bwrap): new user, mount, pid, network, ipc, uts and
 * cgroup namespaces; uid and gid 65534 inside; the system directories
 * (/usr, /bin, /sbin, /lib*, /etc) read-only and nothing else of the host
 * (no /home, /root, /var, /srv, no data dir: the token and keys are not
 * there to read); a fresh /tmp, /proc and /dev; the workspace the only
 * writable path and the working directory; no network unless the lane
 * allows it; a new session; every capability dropped and no new
 * privileges; the environment cleared to PATH, HOME (the workspace) and
 * LANG. Inside, prlimit (util-linux) sets the rlimits before the program
 * runs: CPU seconds, address space, processes, file size, open files. The
 * sandbox dies with the process that started it, so the job's wall-clock
 * timeout, which kills that process, ends every process inside. */
#ifndef ORCH_SANDBOX_H
#define ORCH_SANDBOX_H

#include <stddef.h>

#include "ledger/fo_err.h"

enum orch_sandbox_mode {
    ORCH_SANDBOX_BWRAP, /* the default */
    ORCH_SANDBOX_NONE,  /* configured: programs run unconfined (witnessed) */
};

#define ORCH_SANDBOX_CPU_S 60
#define ORCH_SANDBOX_AS_BYTES (2ll << 30)
#define ORCH_SANDBOX_NPROC 128
#define ORCH_SANDBOX_FSIZE_BYTES (256ll << 20)
#define ORCH_SANDBOX_NOFILE 256

struct orch_sandbox {
    const char *workspace; /* absolute; the only writable path */
    int network;           /* share the host's network */
    long long cpu_s, as_bytes, nproc, fsize_bytes, nofile; /* 0: default */
};

/* 1 when bwrap can make a sandbox here (checked once by running one),
 * else 0 and why (bwrap missing, user namespaces refused). */
int orch_sandbox_available(char *why, size_t n);

/* The argv that runs argv (NULL-terminated) in the sandbox: malloc'd, one
 * block, NULL-terminated (free it). FO_E_INVALID (no workspace, not an
 * absolute path), FO_E_NOMEM. */
int orch_sandbox_argv(const struct orch_sandbox *sb, const char *const *argv,
                      char ***out, struct fo_err *err);

/* "bwrap" or "none" from forum.json / --sandbox; -1 when neither. */
int orch_sandbox_mode_parse(const char *s);

#endif
