/* orch_exec: the executors behind one interface: the stub (deterministic
 * output from the prompt) and the subprocess executor (posix_spawnp, argv
 * only, never a shell; stdin /dev/null; capped output; a timeout that
 * kills the process group). Each runs as an orch_job driven by events on a
 * caller's event_base (the engine's loop), so no thread is held while a
 * task runs. */
#include "daemon/orch_types.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/orch_model.h"
#include "daemon/orch_sandbox.h"
#include "daemon/orch_types_int.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/ledger.h" /* ledger_mono_us */

#define SPLIT_WORDS_MAX 256
#define SPLIT_BYTES_MAX (64u * 1024u)
#define STUB_LINE_MAX 200
#define TICK_MS 50    /* child-exit polling when pidfd_open is missing */
#define DRAIN_MS 1000 /* after the child is gone, for pipes to close */
#define READ_CHUNK 65536
#define READS_PER_WAKE 4 /* chunks one stream reads per wake-up */

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

/* ---- results, configurations, the stub ---------------------------------- */

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

static const char *model_of(const struct orch_exec_config *c)
{
    return c->model ? c->model : (c->kind == ORCH_EXEC_STUB ? "stub" : "cmd");
}

int orch_exec_config_check(const struct orch_exec_config *cfg, int models_ok,
                           struct fo_err *err)
{
    switch (cfg->kind) {
    case ORCH_EXEC_STUB:
        return FO_OK;
    case ORCH_EXEC_CLI:
        if (!cfg->argv || !cfg->argv[0])
            return fo_err_set(err, FO_E_INVALID, "executor: no command");
        return FO_OK;
    case ORCH_EXEC_CHAT:
    case ORCH_EXEC_ANTHROPIC:
        if (!models_ok)
            return fo_err_set(err, FO_E_INVALID,
                              "executor %s: a model task calls the model "
                              "client, not a job",
                              orch_exec_name(cfg->kind));
        if (!cfg->models)
            return fo_err_set(err, FO_E_INVALID,
                              "executor %s: no model configured",
                              orch_exec_name(cfg->kind));
        return FO_OK;
    default:
        return fo_err_set(err, FO_E_INVALID, "executor %s: not built",
                          orch_exec_name(cfg->kind));
    }
}

/* The stub's output: "stub <16 hex of SHA-256(prompt)>: <first line,
 * capped>". FO_E_NOMEM or FO_OK. */
static int stub_output(const char *prompt, struct fo_buf *b)
{
    uint8_t h[FO_SHA256_LEN];
    char hex[2 * FO_SHA256_LEN + 1];
    fo_sha256(prompt, strlen(prompt), h);
    fo_hex(h, FO_SHA256_LEN, hex);
    size_t line = strcspn(prompt, "\n");
    line = orch_utf8_prefix(prompt, line, STUB_LINE_MAX);
    int rc = fo_buf_printf(b, "stub %.16s: ", hex);
    if (!rc)
        rc = orch_utf8_clean(prompt, line, b);
    return rc ? FO_E_NOMEM : FO_OK;
}

/* ---- spawning ----------------------------------------------------------- */

/* Spawns cmd + prompt (posix_spawnp, no shell) with stdin /dev/null, out_w
 * and err_w as its stdout and stderr (the caller closes them), in a process
 * group of its own, env as its whole environment, no other descriptor and
 * default signal handling. */
static int spawn_child(const char *const *cmd, const char *const *env,
                       const char *cwd, const char *prompt, int out_w,
                       int err_w, pid_t *pid, struct fo_err *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int fa_ok = 0, at_ok = 0, rc = FO_OK;
    size_t argc = 0;
    while (cmd[argc])
        argc++;
    char **argv = calloc(argc + 2, sizeof(char *));
    if (!argv)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    /* posix_spawn's argv is char *const[] but it never writes the strings */
    for (size_t i = 0; i < argc; i++)
        argv[i] = (char *)(uintptr_t)cmd[i];
    argv[argc] = (char *)(uintptr_t)prompt;
    argv[argc + 1] = NULL;
    int e = posix_spawn_file_actions_init(&fa);
    fa_ok = e == 0;
    if (!e)
        e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!e)
        e = posix_spawn_file_actions_adddup2(&fa, out_w, 1);
    if (!e)
        e = posix_spawn_file_actions_adddup2(&fa, err_w, 2);
    if (!e) /* nothing of ours leaks into the child, CLOEXEC or not */
        e = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (!e && cwd)
        e = posix_spawn_file_actions_addchdir_np(&fa, cwd);
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
    pid_t child = 0;
    e = posix_spawnp(&child, argv[0], &fa, &at, argv,
                     (char *const *)(uintptr_t)env);
    if (!e)
        *pid = child;
    else
        rc = fo_err_set(
            err,
            e == ENOENT || e == EACCES || e == ENOEXEC ? FO_E_NOT_FOUND
                                                       : FO_E_IO,
            "executor: cannot run \"%s\": %s", argv[0], strerror(e));
out:
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (at_ok)
        posix_spawnattr_destroy(&at);
    free(argv);
    return rc;
}

/* Spawns cmd + prompt in the sandbox box (orch_sandbox_prepare, then
 * orch_sandbox_spawn: a fork that drops root before bwrap), with the same
 * stdin, stdout, stderr and process group as spawn_child. */
static int spawn_boxed(const struct orch_sandbox *box, const char *const *cmd,
                       const char *prompt, int out_w, int err_w, pid_t *pid,
                       struct fo_err *err)
{
    struct orch_boxed *b = NULL;
    int rc = orch_sandbox_prepare(box, cmd, prompt, &b, err);
    if (!rc)
        rc = orch_sandbox_spawn(b, out_w, err_w, pid, err);
    free(b);
    return rc;
}

/* A pidfd for the child (close-on-exec, as every pidfd), or -1 when the
 * kernel has no pidfd_open (before 5.3): the job then polls. */
static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    return fd < 0 ? -1 : (int)fd;
#else
    (void)pid;
    return -1;
#endif
}

static void kill_group(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL); /* in case it left its group */
}

/* ---- jobs --------------------------------------------------------------- */

enum job_state {
    JOB_RUNNING,  /* the child runs, or the stub waits for its turn */
    JOB_DRAINING, /* the child is reaped; its pipes are read to EOF */
    JOB_REAPING,  /* cancelled: only the child's reaping is left */
    JOB_ENDING,   /* inside done */
};

struct stream {
    int fd;            /* the read end, non-blocking; -1 once closed */
    struct event *ev;  /* EV_READ | EV_PERSIST on fd */
    struct fo_buf buf; /* the bytes kept, at most output_max */
    size_t dropped;    /* bytes read past the cap */
};

struct orch_job {
    struct event_base *base;
    orch_job_done_fn done;
    void *arg;
    int kind;  /* ORCH_EXEC_STUB or ORCH_EXEC_CLI */
    int state; /* enum job_state */
    pid_t pid; /* the child until it is reaped, else 0 */
    int pidfd; /* -1: none (the stub; reaped; no pidfd_open: polling) */
    struct event *ev_pid; /* EV_READ | EV_PERSIST on pidfd */
    /* the timeout, then the drain limit; the polling tick without a pidfd;
     * for the stub, its turn (made active at start) */
    struct event *timer;
    struct stream s[2]; /* stdout, stderr; the stub's output is s[0].buf */
    int status;         /* the wait status once reaped */
    unsigned char timed_out, lost, stub_fail;
    int timeout_ms;
    size_t output_max;
    int64_t start_us, deadline_us;
    char model[ORCH_MODEL_MAX + 1];
    struct orch_job *reap_next, **reap_prev; /* on the reaping list */
};

/* Jobs cancelled whose child is not reaped yet (their base's loop reaps
 * them): a host that stops its loop waits for them first
 * (orch_jobs_reap_wait), or they would leak and leave zombies. */
static pthread_mutex_t reap_mu = PTHREAD_MUTEX_INITIALIZER;
static struct orch_job *reap_list;

static void reap_link(struct orch_job *j)
{
    pthread_mutex_lock(&reap_mu);
    j->reap_next = reap_list;
    if (reap_list)
        reap_list->reap_prev = &j->reap_next;
    j->reap_prev = &reap_list;
    reap_list = j;
    pthread_mutex_unlock(&reap_mu);
}

static void reap_unlink(struct orch_job *j)
{
    if (!j->reap_prev)
        return;
    pthread_mutex_lock(&reap_mu);
    *j->reap_prev = j->reap_next;
    if (j->reap_next)
        j->reap_next->reap_prev = j->reap_prev;
    j->reap_prev = NULL;
    pthread_mutex_unlock(&reap_mu);
}

size_t orch_jobs_reaping(const struct event_base *base)
{
    size_t n = 0;
    pthread_mutex_lock(&reap_mu);
    for (const struct orch_job *j = reap_list; j; j = j->reap_next)
        n += j->base == base;
    pthread_mutex_unlock(&reap_mu);
    return n;
}

void orch_jobs_reap_wait(struct event_base *base, int max_ms)
{
    for (int waited = 0; orch_jobs_reaping(base) && waited < max_ms;
         waited += 5) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
}

static void stream_close(struct stream *s)
{
    if (s->ev)
        event_free(s->ev);
    s->ev = NULL;
    close_fd(&s->fd);
}

/* Frees the job's events, descriptors and buffers; the child must be
 * reaped already (or never have been spawned). */
static void job_free(struct orch_job *j)
{
    reap_unlink(j);
    for (int k = 0; k < 2; k++) {
        stream_close(&j->s[k]);
        fo_buf_release(&j->s[k].buf);
    }
    if (j->ev_pid)
        event_free(j->ev_pid);
    if (j->timer)
        event_free(j->timer);
    close_fd(&j->pidfd);
    free(j);
}

/* Reaps the child if it has exited, after killing what is left of its group
 * (the leader's pid names the group only until it is reaped). 1 when
 * reaped (or lost: reaped by someone else, as with SIGCHLD ignored), 0
 * while it runs. Never blocks. */
static int try_reap(struct orch_job *j)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    int r;
    do
        r = waitid(P_PID, (id_t)j->pid, &si, WEXITED | WNOHANG | WNOWAIT);
    while (r < 0 && errno == EINTR);
    if (r == 0 && si.si_pid == 0)
        return 0;
    if (r == 0) {
        kill(-j->pid, SIGKILL);
        int status = 0;
        pid_t w;
        do
            w = waitpid(j->pid, &status, WNOHANG);
        while (w < 0 && errno == EINTR);
        if (w == 0)
            return 0; /* not seen: waitid said it has exited */
        if (w == j->pid)
            j->status = status;
        else
            j->lost = 1;
    } else {
        j->lost = 1;
    }
    j->pid = 0;
    return 1;
}

/* Only where no event can be had (a timer that cannot be re-armed): the
 * child is SIGKILLed first, so this waits for the kernel to tear it down,
 * never for the child to finish. */
static void reap_now(struct orch_job *j)
{
    kill_group(j->pid);
    int status = 0;
    pid_t w;
    do
        w = waitpid(j->pid, &status, 0);
    while (w < 0 && errno == EINTR);
    if (w == j->pid)
        j->status = status;
    else
        j->lost = 1;
    j->pid = 0;
}

static int arm(struct event *ev, int64_t us)
{
    if (us < 0)
        us = 0;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000),
                         .tv_usec = (suseconds_t)(us % 1000000)};
    return event_add(ev, &tv);
}

/* One stream, cleaned: valid UTF-8, then the marker when bytes were
 * dropped. */
static int finish_stream(struct orch_job *j, int k, char **out, size_t *len)
{
    struct stream *s = &j->s[k];
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = orch_utf8_clean(s->buf.data ? s->buf.data : "", s->buf.len, &b);
    if (!rc && s->dropped)
        rc = fo_buf_printf(&b,
                           "\n[forum: output truncated: %zu bytes over the "
                           "%zu-byte cap were dropped]\n",
                           s->dropped, j->output_max);
    fo_buf_release(&s->buf); /* the raw bytes are not needed any more */
    if (rc) {
        fo_buf_release(&b);
        return FO_E_NOMEM;
    }
    *out = fo_buf_detach(&b, len);
    return *out ? FO_OK : FO_E_NOMEM;
}

static int child_result(struct orch_job *j, struct orch_result *res)
{
    res->timed_out = j->timed_out;
    res->truncated = j->s[0].dropped || j->s[1].dropped;
    if (j->lost)
        ;
    else if (WIFEXITED(j->status))
        res->exit_code = WEXITSTATUS(j->status);
    else if (WIFSIGNALED(j->status))
        res->signal = WTERMSIG(j->status);
    res->ok = !j->timed_out && res->exit_code == 0;
    if (j->timed_out)
        snprintf(res->error, sizeof(res->error),
                 "timed out after %d ms: process group killed", j->timeout_ms);
    else if (j->lost)
        snprintf(res->error, sizeof(res->error),
                 "exit status lost: the child was reaped elsewhere");
    else if (res->signal)
        snprintf(res->error, sizeof(res->error), "killed by signal %d",
                 res->signal);
    else if (res->exit_code != 0)
        snprintf(res->error, sizeof(res->error), "exit status %d",
                 res->exit_code);
    if (finish_stream(j, 0, &res->output, &res->output_len) ||
        finish_stream(j, 1, &res->errout, &res->errout_len)) {
        orch_result_release(res);
        return FO_E_NOMEM;
    }
    return FO_OK;
}

static int stub_result(struct orch_job *j, struct orch_result *res)
{
    res->ok = !j->stub_fail;
    res->exit_code = res->ok ? 0 : 1;
    if (!res->ok)
        snprintf(res->error, sizeof(res->error), "stub: asked to fail");
    res->output = fo_buf_detach(&j->s[0].buf, &res->output_len);
    res->errout = calloc(1, 1);
    if (!res->output || !res->errout) {
        orch_result_release(res);
        return FO_E_NOMEM;
    }
    return FO_OK;
}

/* The child is reaped (or the stub's turn came) and both pipes are closed:
 * builds the result, hands it to done, frees the job. */
static void job_end(struct orch_job *j)
{
    for (int k = 0; k < 2; k++)
        stream_close(&j->s[k]);
    if (j->ev_pid)
        event_free(j->ev_pid);
    if (j->timer)
        event_free(j->timer);
    j->ev_pid = j->timer = NULL;
    close_fd(&j->pidfd);
    struct orch_result res = {.exit_code = -1};
    struct fo_err err;
    fo_err_clear(&err);
    snprintf(res.model, sizeof(res.model), "%s", j->model);
    int rc = j->kind == ORCH_EXEC_STUB ? stub_result(j, &res)
                                       : child_result(j, &res);
    if (rc)
        fo_err_set(&err, rc, "executor: no memory for the result");
    res.elapsed_us = ledger_mono_us() - j->start_us;
    j->state = JOB_ENDING;
    j->done(j->arg, rc, &res, &err);
    orch_result_release(&res);
    job_free(j);
}

static void drain_limit(struct orch_job *j)
{
    for (int k = 0; k < 2; k++)
        stream_close(&j->s[k]);
    job_end(j);
}

/* The child is reaped: stop watching it, then give the pipes DRAIN_MS to
 * reach EOF (a descendant that left the group may hold them open). */
static void job_exited(struct orch_job *j)
{
    j->state = JOB_DRAINING;
    if (j->ev_pid)
        event_free(j->ev_pid);
    j->ev_pid = NULL;
    close_fd(&j->pidfd);
    if (j->s[0].fd < 0 && j->s[1].fd < 0)
        job_end(j);
    else if (arm(j->timer, (int64_t)DRAIN_MS * 1000) < 0)
        drain_limit(j); /* no timer: do not wait at all */
}

/* Keeps what fits under the cap and counts the rest as dropped. */
static void keep(struct stream *s, const char *chunk, size_t n)
{
    size_t room = s->buf.max - s->buf.len;
    size_t take = n < room ? n : room;
    if (take && fo_buf_append(&s->buf, chunk, take) != FO_OK)
        take = 0; /* out of memory: count it as dropped */
    s->dropped += n - take;
}

/* A pipe is readable: reads at most READS_PER_WAKE chunks (the event fires
 * again while data is left, after the other jobs had their turn). EOF or a
 * read error closes the stream. */
static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct orch_job *j = arg;
    struct stream *s = &j->s[fd == j->s[0].fd ? 0 : 1];
    char chunk[READ_CHUNK];
    (void)what;
    for (int i = 0; i < READS_PER_WAKE; i++) {
        ssize_t n = read(s->fd, chunk, sizeof(chunk));
        if (n > 0) {
            keep(s, chunk, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        stream_close(s);
        if (j->state == JOB_DRAINING) {
            if (j->s[0].fd < 0 && j->s[1].fd < 0)
                job_end(j);
        } else if (j->pidfd < 0 && j->s[0].fd < 0 && j->s[1].fd < 0 &&
                   try_reap(j)) {
            job_exited(j); /* polling: both pipes closed, look at once */
        }
        return;
    }
}

/* The pidfd is readable: the child has exited (or, cancelled, died). */
static void on_pidfd(evutil_socket_t fd, short what, void *arg)
{
    struct orch_job *j = arg;
    (void)fd;
    (void)what;
    if (!try_reap(j))
        return;
    if (j->state == JOB_REAPING)
        job_free(j);
    else
        job_exited(j);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct orch_job *j = arg;
    (void)fd;
    (void)what;
    if (j->state == JOB_DRAINING) {
        drain_limit(j);
        return;
    }
    if (j->state == JOB_REAPING) { /* cancelled, and no pidfd: polling */
        if (!try_reap(j) && arm(j->timer, (int64_t)TICK_MS * 1000) < 0)
            reap_now(j);
        if (!j->pid)
            job_free(j);
        return;
    }
    if (j->pidfd < 0 && try_reap(j)) {
        job_exited(j);
        return;
    }
    int64_t now = ledger_mono_us();
    if (!j->timed_out && now >= j->deadline_us) {
        j->timed_out = 1;
        kill_group(j->pid);
    }
    if (j->pidfd >= 0 && j->timed_out)
        return; /* the pidfd says when it is gone */
    int64_t wait = j->timed_out ? INT64_MAX : j->deadline_us - now;
    if (j->pidfd < 0 && wait > (int64_t)TICK_MS * 1000)
        wait = (int64_t)TICK_MS * 1000;
    if (arm(j->timer, wait) < 0) { /* cannot happen: it was just armed */
        reap_now(j);
        job_exited(j);
    }
}

static void on_stub(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    job_end(arg);
}

static int start_stub(struct orch_job *j, const char *prompt,
                      struct fo_err *err)
{
    j->stub_fail = strstr(prompt, "#stub-fail") != NULL;
    fo_buf_init(&j->s[0].buf, FO_BUF_UNLIMITED);
    if (stub_output(prompt, &j->s[0].buf))
        return fo_err_set(err, FO_E_NOMEM, NULL);
    j->timer = event_new(j->base, -1, 0, on_stub, j);
    if (!j->timer)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    event_active(j->timer, EV_TIMEOUT, 1); /* done runs on the next turn */
    return FO_OK;
}

static int start_child(struct orch_job *j, const struct orch_exec_config *cfg,
                       const char *prompt, struct fo_err *err)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int rc = FO_OK;
    if (pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        rc = fo_err_set(err, FO_E_IO, "executor: pipe: %s", strerror(errno));
        goto out;
    }
    j->s[0].fd = outp[0];
    j->s[1].fd = errp[0];
    outp[0] = errp[0] = -1;
    /* Everything that can fail comes before the spawn, so a job that does
     * not start leaves no child behind. */
    for (int k = 0; k < 2; k++) {
        int fl = fcntl(j->s[k].fd, F_GETFL);
        if (fl < 0 || fcntl(j->s[k].fd, F_SETFL, fl | O_NONBLOCK) < 0) {
            rc = fo_err_set(err, FO_E_IO, "executor: fcntl: %s",
                            strerror(errno));
            goto out;
        }
        j->s[k].ev =
            event_new(j->base, j->s[k].fd, EV_READ | EV_PERSIST, on_read, j);
        if (!j->s[k].ev) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
            goto out;
        }
        if (event_add(j->s[k].ev, NULL) < 0) {
            rc = fo_err_set(err, FO_E_IO, "executor: cannot watch a pipe");
            goto out;
        }
    }
    j->timer = event_new(j->base, -1, 0, on_timer, j);
    if (!j->timer) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    if (arm(j->timer, (int64_t)j->timeout_ms * 1000) < 0) {
        rc = fo_err_set(err, FO_E_NOMEM, "executor: no timer");
        goto out;
    }
    rc = cfg->box ? spawn_boxed(cfg->box, cfg->argv, prompt, outp[1], errp[1],
                                &j->pid, err)
                  : spawn_child(cfg->argv, cfg->env, cfg->cwd, prompt, outp[1],
                                errp[1], &j->pid, err);
    if (rc)
        goto out;
    /* The child runs. Without a pidfd (an old kernel, or no room to watch
     * it) the timer polls instead; re-arming a timer that is pending does
     * not allocate, so nothing below fails in practice. */
    j->pidfd = open_pidfd(j->pid);
    if (j->pidfd >= 0) {
        j->ev_pid =
            event_new(j->base, j->pidfd, EV_READ | EV_PERSIST, on_pidfd, j);
        if (!j->ev_pid || event_add(j->ev_pid, NULL) < 0) {
            if (j->ev_pid)
                event_free(j->ev_pid);
            j->ev_pid = NULL;
            close_fd(&j->pidfd);
        }
    }
    if (j->pidfd < 0 &&
        arm(j->timer,
            (int64_t)(j->timeout_ms < TICK_MS ? j->timeout_ms : TICK_MS) *
                1000) < 0) {
        reap_now(j);
        rc = fo_err_set(err, FO_E_NOMEM, "executor: no timer");
    }
out:
    close_fd(&outp[0]);
    close_fd(&outp[1]);
    close_fd(&errp[0]);
    close_fd(&errp[1]);
    return rc;
}

int orch_job_start(const struct orch_exec_config *cfg, struct event_base *base,
                   const char *prompt, orch_job_done_fn done, void *arg,
                   struct orch_job **out, struct fo_err *err)
{
    /* a CLI job without a prompt runs argv as it is */
    assert(base && done && out && (prompt || cfg->kind == ORCH_EXEC_CLI));
    int rc = orch_exec_config_check(cfg, 0, err);
    if (rc)
        return rc;
    struct orch_job *j = calloc(1, sizeof(*j));
    if (!j)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    j->base = base;
    j->done = done;
    j->arg = arg;
    j->kind = cfg->kind;
    j->state = JOB_RUNNING;
    j->pidfd = j->s[0].fd = j->s[1].fd = -1;
    j->timeout_ms =
        cfg->timeout_ms > 0 ? cfg->timeout_ms : ORCH_TIMEOUT_MS_DEFAULT;
    j->output_max = cfg->output_max ? cfg->output_max : ORCH_OUTPUT_MAX_DEFAULT;
    snprintf(j->model, sizeof(j->model), "%s", model_of(cfg));
    fo_buf_init(&j->s[0].buf, j->output_max);
    fo_buf_init(&j->s[1].buf, j->output_max);
    j->start_us = ledger_mono_us();
    j->deadline_us = j->start_us + (int64_t)j->timeout_ms * 1000;
    rc = cfg->kind == ORCH_EXEC_STUB ? start_stub(j, prompt, err)
                                     : start_child(j, cfg, prompt, err);
    if (rc) {
        job_free(j); /* no child is left: see start_child */
        return rc;
    }
    *out = j;
    return FO_OK;
}

void orch_job_cancel(struct orch_job *j)
{
    if (!j || j->state == JOB_ENDING)
        return;
    assert(j->state != JOB_REAPING); /* cancelled twice */
    for (int k = 0; k < 2; k++) {
        stream_close(&j->s[k]);
        fo_buf_release(&j->s[k].buf);
    }
    if (j->pid <= 0) { /* the stub, or a child already reaped */
        job_free(j);
        return;
    }
    kill_group(j->pid);
    j->state = JOB_REAPING;
    if (try_reap(j)) {
        job_free(j);
        return;
    }
    if (j->ev_pid) { /* on_pidfd reaps and frees */
        event_del(j->timer);
        reap_link(j);
        return;
    }
    if (arm(j->timer, (int64_t)TICK_MS * 1000) < 0) {
        reap_now(j);
        job_free(j);
        return;
    }
    reap_link(j);
}

int orch_job_drop_pidfd(struct orch_job *j)
{
    if (!j->ev_pid)
        return FO_OK;
    event_free(j->ev_pid);
    j->ev_pid = NULL;
    close_fd(&j->pidfd);
    return arm(j->timer, (int64_t)TICK_MS * 1000) < 0 ? FO_E_NOMEM : FO_OK;
}
