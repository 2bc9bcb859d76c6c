/* orch_sandbox: where an agent's program runs (the run_command tool) and
 * where a --cmd model program runs.
 *
 * With bubblewrap (bwrap): new user, mount, pid, network, ipc, uts and
 * cgroup namespaces; uid and gid 65534 inside; the system directories
 * (/usr, /bin, /sbin, /lib*) read-only and, of /etc, only what programs
 * read (the loader's cache, passwd and group, nsswitch, hosts, TLS
 * certificates, time zone, alternatives; resolv.conf when networked):
 * nothing else of the host (no /home, /root, /var, /srv, no /etc/shadow,
 * no data dir: the token and keys are not there to read); a fresh /tmp,
 * /proc and /dev; the workspace the only writable path and the working
 * directory; no network unless the lane allows it; a new session; every
 * capability dropped and no new privileges; the environment cleared to
 * PATH, HOME (the workspace) and LANG. Inside, prlimit (util-linux) sets
 * the rlimits before the program runs: CPU seconds, address space,
 * processes, file size, open files. The sandbox dies with the process
 * that started it, so the job's wall-clock timeout, which kills that
 * process, ends every process inside.
 *
 * The data dir is never mounted: a workspace or writable directory that
 * holds it (or lies inside it) is refused, and a read-only directory that
 * holds it gets an empty tmpfs over it.
 *
 * As root, bubblewrap's user namespace would map the sandbox's uid to
 * root outside (every root-only file it can see would be its own): the
 * child that execs bwrap drops first (setgroups,
 * setgid, setuid): to the owner of a configured workspace when that is
 * not root, else to ORCH_SANDBOX_UID/GID. The caller's paths bound in
 * (workspace, state and read dirs, the program) are opened before the
 * drop and mounted at /tmp/<n> in a mount namespace of the child's own,
 * where bwrap binds them from, so they need not be reachable by that
 * user; a workspace the daemon made (a run's own) is handed over to
 * that user before each command, so the sandbox can write in it.
 *
 * The model profile (a --cmd program): the network shared, no workspace
 * unless one is configured (the working directory is then a fresh /tmp),
 * its state directories (forum.json "cmd_sandbox".state_dirs) writable,
 * its read_dirs and its own program read-only, its environment PATH,
 * HOME, LANG and the variables named in "cmd_sandbox".env; no CPU or
 * address-space limit (the job's timeout bounds it). */
#ifndef ORCH_SANDBOX_H
#define ORCH_SANDBOX_H

#include <stddef.h>
#include <sys/types.h>

#include <cJSON.h>

#include "ledger/fo_err.h"

enum orch_sandbox_mode {
    ORCH_SANDBOX_BWRAP, /* the default */
    ORCH_SANDBOX_NONE,  /* configured: programs run unconfined (witnessed) */
};

enum orch_sandbox_profile {
    ORCH_SANDBOX_TOOL,  /* run_command: the default */
    ORCH_SANDBOX_MODEL, /* a --cmd model program */
};

#define ORCH_SANDBOX_CPU_S 60
#define ORCH_SANDBOX_AS_BYTES (2ll << 30)
#define ORCH_SANDBOX_NPROC 128
#define ORCH_SANDBOX_FSIZE_BYTES (256ll << 20)
#define ORCH_SANDBOX_NOFILE 256
/* the user a root daemon's sandboxes run as (nobody/nogroup on Debian) */
#define ORCH_SANDBOX_UID 65534
#define ORCH_SANDBOX_GID 65534
#define ORCH_SANDBOX_DIRS_MAX 16 /* state_dirs, read_dirs, env each */

struct orch_sandbox {
    /* absolute; writable; the working directory. NULL only in the model
     * profile (the working directory is then /tmp). */
    const char *workspace;
    int network; /* share the host's network (the model profile always) */
    long long cpu_s, as_bytes, nproc, fsize_bytes, nofile; /* 0: default */
    int profile;          /* enum orch_sandbox_profile */
    const char *data_dir; /* resolved; never mounted (see above); NULL: none */
    int own_workspace;    /* the daemon made it: handed to the sandbox user */
    /* the model profile: directories bound writable and read-only, each
     * NULL-terminated (NULL: none); absent ones are left out */
    const char *const *write_dirs;
    const char *const *read_dirs;
    /* NAME=VALUE strings set inside besides PATH, HOME and LANG (PATH=
     * and HOME= here replace those); NULL-terminated or NULL */
    const char *const *env;
};

/* A command made ready by orch_sandbox_prepare: one malloc'd block. */
struct orch_boxed {
    char **argv;  /* bwrap's, NULL-terminated */
    char **opens; /* opened O_PATH in the child as fds 3, 4, ... */
    size_t n_opens;
    char **env; /* bwrap's own environment */
    int drop;   /* the daemon is root: drop to uid/gid before exec */
    uid_t uid;
    gid_t gid;
    int hand_fd; /* >= 0: the fd (one of opens) whose tree is handed to
                    uid/gid before the drop */
};

/* 1 when bwrap can make a sandbox here (checked once by running one, as
 * the user the sandboxes run as), else 0 and why (bwrap missing, user
 * namespaces refused). */
int orch_sandbox_available(char *why, size_t n);

/* The command that runs argv (NULL-terminated), then last when not NULL
 * (a prompt: never looked at), in the sandbox. In the model profile
 * argv[0] is looked up on PATH first, and it and the absolute paths of
 * regular files in argv (a script for an interpreter) are bound
 * read-only. *out is malloc'd, one block (free it). FO_E_INVALID (no
 * workspace, not an absolute path, a workspace or writable dir that
 * holds the data dir or lies in it), FO_E_NOT_FOUND (a model program not
 * on PATH), FO_E_NOMEM. */
int orch_sandbox_prepare(const struct orch_sandbox *sb, const char *const *argv,
                         const char *last, struct orch_boxed **out,
                         struct fo_err *err);

/* Forks the child that runs b: stdin /dev/null, out_w and err_w as its
 * stdout and stderr, a process group of its own, default signals, no
 * other descriptor than b's; as root, it drops to b's uid/gid before
 * exec. Never blocks beyond the fork. FO_E_IO when fork fails. */
int orch_sandbox_spawn(const struct orch_boxed *b, int out_w, int err_w,
                       pid_t *pid, struct fo_err *err);

/* "bwrap" or "none" from forum.json / --sandbox; -1 when neither. */
int orch_sandbox_mode_parse(const char *s);

/* Where path lies against the data dir, both resolved (symlinks, "..";
 * a path that does not exist yet is resolved as far as it exists):
 * FO_E_INVALID naming both when path is the data dir, holds it or lies
 * inside it; FO_OK otherwise. what names path in the message
 * ("workspace"). */
int orch_sandbox_check_path(const char *what, const char *path,
                            const char *data_dir, struct fo_err *err);

/* path resolved as orch_sandbox_check_path does, into out (PATH_MAX).
 * FO_E_INVALID when not absolute or too long. */
int orch_sandbox_resolve(const char *path, char *out, struct fo_err *err);

/* The model profile's configuration (forum.json "cmd_sandbox"):
 * {"sandbox": "bwrap"|"none", "state_dirs": [...], "read_dirs": [...],
 * "env": ["NAME", ...]}; directories absolute or "~/..." (the daemon's
 * HOME). Parsed into owned, NULL-terminated lists (free with
 * orch_cmd_box_release). FO_E_INVALID naming the field. */
struct orch_cmd_box {
    int mode;                              /* enum orch_sandbox_mode */
    char **write_dirs, **read_dirs, **env; /* "NAME=VALUE" from ours */
};
int orch_cmd_box_parse(const cJSON *v, struct orch_cmd_box *out,
                       struct fo_err *err);
void orch_cmd_box_release(struct orch_cmd_box *b);

#endif
