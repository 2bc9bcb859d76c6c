/* orch_exec: the executors behind one interface: the stub (deterministic
 * output from the prompt) and the subprocess executor (posix_spawnp, argv
 * only, never a shell; stdin /dev/null; capped output; a timeout that
 * kills the process group). A runner polls all its children from the
 * calling thread, so dispatch needs no threads. */
#include "daemon/orch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/orch_int.h"
#include "daemon/orch_model.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"

#define SPLIT_WORDS_MAX 256
#define SPLIT_BYTES_MAX (64u * 1024u)
#define STUB_LINE_MAX 200
#define TICK_MS 50    /* child-exit polling when pidfd_open is missing */
#define DRAIN_MS 1000 /* after the child is gone, for pipes to close */
#define READ_CHUNK 65536

/* ---- UTF-8 helpers ----------------------------------------------------- */

static size_t seq_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return 2;
    if (c >= 0xe0 && c <= 0xef)
        return 3;
    if (c >= 0xf0 && c <= 0xf4)
        return 4;
    return 0;
}

/* Length of the well-formed sequence at s, or 0. */
static size_t good_seq(const char *s, size_t left)
{
    size_t n = seq_len((unsigned char)s[0]);
    if (n == 0 || n > left || (n == 1 && s[0] == '\0'))
        return 0;
    return n == 1 || fo_utf8_valid(s, n) ? n : 0;
}

int orch_utf8_clean(const char *in, size_t len, struct fo_buf *out)
{
    size_t i = 0;
    while (i < len) {
        size_t run = i;
        size_t n;
        while (run < len && (n = good_seq(in + run, len - run)) > 0)
            run += n;
        int rc = fo_buf_append(out, in + i, run - i);
        if (rc)
            return rc;
        if (run < len) {
            rc = fo_buf_append(out, "\xef\xbf\xbd", 3);
            if (rc)
                return rc;
            run++;
        }
        i = run;
    }
    return FO_OK;
}

size_t orch_utf8_prefix(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    /* back up over continuation bytes to the start of a character */
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
        n--;
    return n;
}

/* ---- argv splitting ---------------------------------------------------- */

int orch_split_argv(const char *cmd, char ***argv, size_t *argc,
                    struct fo_err *err)
{
    size_t len = strlen(cmd);
    if (len > SPLIT_BYTES_MAX)
        return fo_err_set(err, FO_E_INVALID, "cmd: over %u bytes",
                          SPLIT_BYTES_MAX);
    /* One block: the pointer array, then the words (each no longer than
     * the input, plus a NUL per word). */
    size_t ptrs = (SPLIT_WORDS_MAX + 1) * sizeof(char *);
    char **v = malloc(ptrs + 2 * len + 2);
    if (!v)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    char *w = (char *)v + ptrs;
    size_t n = 0;
    size_t i = 0;
    int rc = FO_OK;
    for (;;) {
        while (i < len && (cmd[i] == ' ' || cmd[i] == '\t' || cmd[i] == '\n'))
            i++;
        if (i >= len)
            break;
        if (n == SPLIT_WORDS_MAX) {
            rc = fo_err_set(err, FO_E_INVALID, "cmd: more than %d words",
                            SPLIT_WORDS_MAX);
            goto out;
        }
        v[n++] = w;
        while (i < len && cmd[i] != ' ' && cmd[i] != '\t' && cmd[i] != '\n') {
            char c = cmd[i++];
            if (c == '\\') {
                if (i >= len) {
                    rc = fo_err_set(err, FO_E_INVALID,
                                    "cmd: trailing backslash");
                    goto out;
                }
                if (cmd[i] != '\n') /* backslash-newline joins lines */
                    *w++ = cmd[i];
                i++;
            } else if (c == '\'') {
                while (i < len && cmd[i] != '\'')
                    *w++ = cmd[i++];
                if (i >= len) {
                    rc = fo_err_set(err, FO_E_INVALID,
                                    "cmd: unterminated single quote");
                    goto out;
                }
                i++;
            } else if (c == '"') {
                while (i < len && cmd[i] != '"') {
                    if (cmd[i] == '\\' && i + 1 < len &&
                        strchr("\"\\$`\n", cmd[i + 1])) {
                        if (cmd[i + 1] != '\n')
                            *w++ = cmd[i + 1];
                        i += 2;
                    } else {
                        *w++ = cmd[i++];
                    }
                }
                if (i >= len) {
                    rc = fo_err_set(err, FO_E_INVALID,
                                    "cmd: unterminated double quote");
                    goto out;
                }
                i++;
            } else {
                *w++ = c;
            }
        }
        *w++ = '\0';
    }
    if (n == 0) {
        rc = fo_err_set(err, FO_E_INVALID, "cmd: no command");
        goto out;
    }
    v[n] = NULL;
    *argv = v;
    if (argc)
        *argc = n;
    v = NULL;
out:
    free(v);
    return rc;
}

/* ---- jobs and the runner ----------------------------------------------- */

struct job {
    size_t tag;
    pid_t pid; /* 0 for a finished or stub job */
    int pidfd; /* -1 when none */
    int fd[2]; /* stdout, stderr read ends; -1 when closed */
    struct fo_buf buf[2];
    size_t dropped[2];
    int exited, status, timed_out;
    int64_t start_us, deadline_us, drain_us;
    int done;               /* the result is ready */
    struct orch_result res; /* filled when done (the stub, a spawn error) */
};

struct orch_runner {
    struct orch_exec_config cfg;
    struct job **jobs;
    size_t n, cap;
};

void orch_result_release(struct orch_result *res)
{
    if (!res)
        return;
    free(res->output);
    free(res->errout);
    res->output = res->errout = NULL;
    res->output_len = res->errout_len = 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void job_free(struct job *j)
{
    if (!j)
        return;
    if (j->pid > 0) {
        kill(-j->pid, SIGKILL);
        kill(j->pid, SIGKILL);
        while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    close_fd(&j->fd[0]);
    close_fd(&j->fd[1]);
    close_fd(&j->pidfd);
    fo_buf_release(&j->buf[0]);
    fo_buf_release(&j->buf[1]);
    orch_result_release(&j->res);
    free(j);
}

int orch_runner_create(const struct orch_exec_config *cfg,
                       struct orch_runner **out, struct fo_err *err)
{
    if (cfg->kind == ORCH_EXEC_CLI && (!cfg->argv || !cfg->argv[0]))
        return fo_err_set(err, FO_E_INVALID, "executor: no command");
    if ((cfg->kind == ORCH_EXEC_CHAT || cfg->kind == ORCH_EXEC_ANTHROPIC) &&
        !cfg->models)
        return fo_err_set(err, FO_E_INVALID, "executor %s: no model configured",
                          orch_exec_name(cfg->kind));
    if (cfg->kind != ORCH_EXEC_CLI && cfg->kind != ORCH_EXEC_STUB &&
        cfg->kind != ORCH_EXEC_CHAT && cfg->kind != ORCH_EXEC_ANTHROPIC)
        return fo_err_set(err, FO_E_INVALID, "executor %s: not built",
                          orch_exec_name(cfg->kind));
    struct orch_runner *r = calloc(1, sizeof(*r));
    if (!r)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    r->cfg = *cfg;
    if (!r->cfg.timeout_ms)
        r->cfg.timeout_ms = ORCH_TIMEOUT_MS_DEFAULT;
    if (!r->cfg.output_max)
        r->cfg.output_max = ORCH_OUTPUT_MAX_DEFAULT;
    *out = r;
    return FO_OK;
}

void orch_runner_free(struct orch_runner *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        job_free(r->jobs[i]);
    free(r->jobs);
    free(r);
}

size_t orch_runner_active(const struct orch_runner *r)
{
    return r->n;
}

static void set_model(struct orch_result *res, const struct orch_exec_config *c)
{
    const char *m =
        c->model ? c->model : (c->kind == ORCH_EXEC_STUB ? "stub" : "cmd");
    snprintf(res->model, sizeof(res->model), "%s", m);
}

/* The stub: "stub <16 hex of SHA-256(prompt)>: <first line, capped>". */
static int stub_run(const struct orch_exec_config *cfg, const char *prompt,
                    struct orch_result *res, struct fo_err *err)
{
    uint8_t h[FO_SHA256_LEN];
    char hex[2 * FO_SHA256_LEN + 1];
    size_t len = strlen(prompt);
    fo_sha256(prompt, len, h);
    fo_hex(h, FO_SHA256_LEN, hex);
    size_t line = strcspn(prompt, "\n");
    line = orch_utf8_prefix(prompt, line, STUB_LINE_MAX);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_buf_printf(&b, "stub %.16s: ", hex);
    if (!rc)
        rc = orch_utf8_clean(prompt, line, &b);
    if (rc) {
        fo_buf_release(&b);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    res->ok = strstr(prompt, "#stub-fail") == NULL;
    res->exit_code = res->ok ? 0 : 1;
    if (!res->ok)
        snprintf(res->error, sizeof(res->error), "stub: asked to fail");
    res->output = fo_buf_detach(&b, &res->output_len);
    res->errout = malloc(1);
    if (!res->output || !res->errout) {
        orch_result_release(res);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    res->errout[0] = '\0';
    set_model(res, cfg);
    return FO_OK;
}

static int spawn_child(struct orch_runner *r, struct job *j, const char *prompt,
                       struct fo_err *err)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int fa_ok = 0, at_ok = 0, rc = FO_OK;
    size_t argc = 0;
    while (r->cfg.argv[argc])
        argc++;
    char **argv = calloc(argc + 2, sizeof(char *));
    if (!argv)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    /* posix_spawn's argv is char *const[] but it never writes the strings */
    for (size_t i = 0; i < argc; i++)
        argv[i] = (char *)(uintptr_t)r->cfg.argv[i];
    argv[argc] = (char *)(uintptr_t)prompt;
    argv[argc + 1] = NULL;
    if (pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        rc = fo_err_set(err, FO_E_IO, "executor: pipe: %s", strerror(errno));
        goto out;
    }
    int e = posix_spawn_file_actions_init(&fa);
    fa_ok = e == 0;
    if (!e)
        e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!e)
        e = posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
    if (!e)
        e = posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
    if (!e) /* nothing of ours leaks into the child, CLOEXEC or not */
        e = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (!e) {
        e = posix_spawnattr_init(&at);
        at_ok = e == 0;
    }
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    int dfl_sigs[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP,
                      SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2};
    for (size_t k = 0; k < sizeof(dfl_sigs) / sizeof(dfl_sigs[0]); k++)
        sigaddset(&dfl, dfl_sigs[k]);
    if (!e)
        e = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP |
                                              POSIX_SPAWN_SETSIGMASK |
                                              POSIX_SPAWN_SETSIGDEF);
    if (!e)
        e = posix_spawnattr_setpgroup(&at, 0);
    if (!e)
        e = posix_spawnattr_setsigmask(&at, &none);
    if (!e)
        e = posix_spawnattr_setsigdefault(&at, &dfl);
    if (e) {
        rc = fo_err_set(err, FO_E_IO, "executor: spawn setup: %s", strerror(e));
        goto out;
    }
    pid_t pid;
    e = posix_spawnp(&pid, argv[0], &fa, &at, argv,
                     (char *const *)(uintptr_t)r->cfg.env);
    if (e) {
        rc = fo_err_set(
            err,
            e == ENOENT || e == EACCES || e == ENOEXEC ? FO_E_NOT_FOUND
                                                       : FO_E_IO,
            "executor: cannot run \"%s\": %s", argv[0], strerror(e));
        goto out;
    }
    j->pid = pid;
    j->pidfd = pidfd_open(pid, 0); /* -1 (old kernel): poll with a tick */
    if (j->pidfd >= 0 && fcntl(j->pidfd, F_SETFD, FD_CLOEXEC) < 0)
        close_fd(&j->pidfd);
    j->fd[0] = outp[0];
    j->fd[1] = errp[0];
    outp[0] = errp[0] = -1;
    for (int k = 0; k < 2; k++)
        if (fcntl(j->fd[k], F_SETFL, fcntl(j->fd[k], F_GETFL) | O_NONBLOCK) <
            0) {
            rc = fo_err_set(err, FO_E_IO, "executor: fcntl: %s",
                            strerror(errno));
            goto out;
        }
out:
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (at_ok)
        posix_spawnattr_destroy(&at);
    close_fd(&outp[0]);
    close_fd(&outp[1]);
    close_fd(&errp[0]);
    close_fd(&errp[1]);
    free(argv);
    return rc;
}

int orch_runner_start(struct orch_runner *r, size_t tag, const char *prompt,
                      struct fo_err *err)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        struct job **v = realloc(r->jobs, cap * sizeof(*v));
        if (!v)
            return fo_err_set(err, FO_E_NOMEM, NULL);
        r->jobs = v;
        r->cap = cap;
    }
    struct job *j = calloc(1, sizeof(*j));
    if (!j)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    j->tag = tag;
    j->pidfd = j->fd[0] = j->fd[1] = -1;
    j->res.exit_code = -1;
    fo_buf_init(&j->buf[0], r->cfg.output_max);
    fo_buf_init(&j->buf[1], r->cfg.output_max);
    j->start_us = ledger_mono_us();
    j->deadline_us = j->start_us + (int64_t)r->cfg.timeout_ms * 1000;
    /* the stub and the model executors finish inside start: a model call
     * blocks this thread for its HTTP exchange (see orch_exec_config) */
    int sync = r->cfg.kind != ORCH_EXEC_CLI;
    int rc = r->cfg.kind == ORCH_EXEC_STUB
                 ? stub_run(&r->cfg, prompt, &j->res, err)
             : sync ? orch_model_exec(&r->cfg, prompt, &j->res, err)
                    : spawn_child(r, j, prompt, err);
    if (rc) {
        job_free(j);
        return rc;
    }
    j->done = sync;
    r->jobs[r->n++] = j;
    return FO_OK;
}

/* Reads what is there; past the cap, reads and drops. EOF closes. */
static void drain(struct job *j, int k)
{
    char chunk[READ_CHUNK];
    for (;;) {
        ssize_t n = read(j->fd[k], chunk, sizeof(chunk));
        if (n > 0) {
            size_t room = j->buf[k].max - j->buf[k].len;
            size_t take = (size_t)n < room ? (size_t)n : room;
            if (take && fo_buf_append(&j->buf[k], chunk, take) != FO_OK)
                take = 0; /* out of memory: count it as dropped */
            j->dropped[k] += (size_t)n - take;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        close_fd(&j->fd[k]); /* EOF or a read error */
        return;
    }
}

/* The child has exited (not yet reaped): kill what is left of its group,
 * then reap it. */
static void reap(struct job *j, int64_t now)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)j->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
        si.si_pid == 0)
        return;
    kill(-j->pid, SIGKILL); /* the leader's pid still names the group */
    int status = 0;
    while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR)
        ;
    j->status = status;
    j->exited = 1;
    j->pid = 0;
    close_fd(&j->pidfd);
    j->drain_us = now + (int64_t)DRAIN_MS * 1000;
}

static int finish_stream(struct job *j, int k, const struct orch_exec_config *c,
                         char **out, size_t *len)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = orch_utf8_clean(j->buf[k].data ? j->buf[k].data : "",
                             j->buf[k].len, &b);
    if (!rc && j->dropped[k])
        rc = fo_buf_printf(&b,
                           "\n[forum: output truncated: %zu bytes over the "
                           "%zu-byte cap were dropped]\n",
                           j->dropped[k], c->output_max);
    if (rc) {
        fo_buf_release(&b);
        return FO_E_NOMEM;
    }
    *out = fo_buf_detach(&b, len);
    return *out ? FO_OK : FO_E_NOMEM;
}

static int finish(struct job *j, const struct orch_exec_config *c,
                  struct orch_result *res, struct fo_err *err)
{
    *res = (struct orch_result){.exit_code = -1};
    set_model(res, c);
    res->timed_out = j->timed_out;
    res->truncated = j->dropped[0] || j->dropped[1];
    if (WIFEXITED(j->status))
        res->exit_code = WEXITSTATUS(j->status);
    else if (WIFSIGNALED(j->status))
        res->signal = WTERMSIG(j->status);
    res->ok = !j->timed_out && res->exit_code == 0;
    if (j->timed_out)
        snprintf(res->error, sizeof(res->error),
                 "timed out after %d ms: process group killed", c->timeout_ms);
    else if (res->signal)
        snprintf(res->error, sizeof(res->error), "killed by signal %d",
                 res->signal);
    else if (res->exit_code != 0)
        snprintf(res->error, sizeof(res->error), "exit status %d",
                 res->exit_code);
    if (finish_stream(j, 0, c, &res->output, &res->output_len) ||
        finish_stream(j, 1, c, &res->errout, &res->errout_len)) {
        orch_result_release(res);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    res->elapsed_us = ledger_mono_us() - j->start_us;
    return FO_OK;
}

static int job_ready(const struct job *j)
{
    return j->done || (j->exited && j->fd[0] < 0 && j->fd[1] < 0);
}

static int take(struct orch_runner *r, size_t i, size_t *tag,
                struct orch_result *res, struct fo_err *err)
{
    struct job *j = r->jobs[i];
    int rc = FO_OK;
    if (j->done) {
        *res = j->res;
        res->elapsed_us = ledger_mono_us() - j->start_us;
        j->res = (struct orch_result){0};
    } else {
        rc = finish(j, &r->cfg, res, err);
    }
    *tag = j->tag;
    r->jobs[i] = r->jobs[--r->n];
    job_free(j);
    return rc;
}

int orch_runner_next(struct orch_runner *r, size_t *tag,
                     struct orch_result *res, struct fo_err *err)
{
    if (r->n == 0)
        return fo_err_set(err, FO_E_NOT_FOUND, "executor: no job running");
    struct pollfd *pf = calloc(3 * r->n, sizeof(*pf));
    if (!pf)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_OK;
    for (;;) {
        int64_t now = ledger_mono_us();
        int64_t wait = -1;
        size_t np = 0;
        for (size_t i = 0; i < r->n; i++) {
            struct job *j = r->jobs[i];
            if (job_ready(j)) {
                rc = take(r, i, tag, res, err);
                goto out;
            }
            if (!j->exited && now >= j->deadline_us && !j->timed_out) {
                j->timed_out = 1;
                kill(-j->pid, SIGKILL);
                kill(j->pid, SIGKILL);
            }
            if (j->exited && now >= j->drain_us) {
                /* a descendant escaped the group and holds the pipe */
                close_fd(&j->fd[0]);
                close_fd(&j->fd[1]);
                rc = take(r, i, tag, res, err);
                goto out;
            }
            int64_t until = j->exited ? j->drain_us : j->deadline_us;
            if (!j->exited && j->timed_out)
                until = now + (int64_t)TICK_MS * 1000;
            if (!j->exited && j->pidfd < 0)
                until = now + (int64_t)TICK_MS * 1000;
            int64_t ms = (until - now + 999) / 1000;
            if (wait < 0 || ms < wait)
                wait = ms;
            for (int k = 0; k < 2; k++)
                if (j->fd[k] >= 0)
                    pf[np++] =
                        (struct pollfd){.fd = j->fd[k], .events = POLLIN};
            if (!j->exited && j->pidfd >= 0)
                pf[np++] = (struct pollfd){.fd = j->pidfd, .events = POLLIN};
        }
        if (wait > 60000)
            wait = 60000;
        int p = poll(pf, (nfds_t)np, (int)(wait < 0 ? 0 : wait));
        if (p < 0 && errno != EINTR) {
            rc =
                fo_err_set(err, FO_E_IO, "executor: poll: %s", strerror(errno));
            goto out;
        }
        now = ledger_mono_us();
        for (size_t i = 0; i < r->n; i++) {
            struct job *j = r->jobs[i];
            for (int k = 0; k < 2; k++)
                if (j->fd[k] >= 0)
                    drain(j, k);
            if (!j->exited)
                reap(j, now);
        }
    }
out:
    free(pf);
    return rc;
}

int orch_exec_once(const struct orch_exec_config *cfg, const char *prompt,
                   struct orch_result *res, struct fo_err *err)
{
    struct orch_runner *r = NULL;
    size_t tag;
    int rc = orch_runner_create(cfg, &r, err);
    if (!rc)
        rc = orch_runner_start(r, 0, prompt, err);
    if (!rc)
        rc = orch_runner_next(r, &tag, res, err);
    orch_runner_free(r);
    return rc;
}
