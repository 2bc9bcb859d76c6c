/* `forum mcp` as a long-running surface, driven through pipes as a client
 * does: a ping sent while a submit runs is answered at once, the submit's
 * progress arrives as notifications/progress, notifications/cancelled
 * stops its run (witnessed) with no reply, and a gate of a run this
 * session started is asked through elicitation/create. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ledger/fo_buf.h"
#include "testutil.h"
#include "tu_daemon.h"

#define fake tu_fakebin
#define fake_stat tu_fakebin_stat

static void fake_start(struct fake *f)
{
    tu_fakebin_start(f, 1, "0");
}

/* forum mcp on pipes */
struct mcp {
    pid_t pid;
    int in, out; /* its stdin (we write), its stdout (we read) */
    struct fo_buf buf;
};

static void mcp_start(struct mcp *m, const char *dir, const char *url)
{
    int a[2], b[2];
    cr_assert_eq(pipe(a), 0);
    cr_assert_eq(pipe(b), 0);
    m->pid = fork();
    cr_assert_geq(m->pid, 0);
    if (m->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(a[0], 0);
        dup2(b[1], 1);
        close(a[0]);
        close(a[1]);
        close(b[0]);
        close(b[1]);
        if (url)
            execl(FORUM_BIN, FORUM_BIN, "--ledger", dir, "mcp", "--init",
                  "--chat-url", url, "--model", "fake", (char *)NULL);
        else
            execl(FORUM_BIN, FORUM_BIN, "--ledger", dir, "mcp", "--init",
                  (char *)NULL);
        _exit(127);
    }
    close(a[0]);
    close(b[1]);
    m->in = a[1];
    m->out = b[0];
    fo_buf_init(&m->buf, FO_BUF_UNLIMITED);
}

static void mcp_send(struct mcp *m, const char *line)
{
    size_t n = strlen(line);
    cr_assert_eq(write(m->in, line, n), (ssize_t)n);
    cr_assert_eq(write(m->in, "\n", 1), 1);
}

/* The next message, or NULL when none came within ms. */
static cJSON *mcp_read(struct mcp *m, int ms)
{
    for (;;) {
        char *nl = m->buf.len ? memchr(m->buf.data, '\n', m->buf.len) : NULL;
        if (nl) {
            size_t len = (size_t)(nl - m->buf.data);
            char *line = strndup(m->buf.data, len);
            memmove(m->buf.data, nl + 1, m->buf.len - len - 1);
            m->buf.len -= len + 1;
            cJSON *j = tu_json_parse(line);
            free(line);
            return j;
        }
        struct pollfd p = {.fd = m->out, .events = POLLIN};
        if (poll(&p, 1, ms) <= 0)
            return NULL;
        char chunk[65536];
        ssize_t r = read(m->out, chunk, sizeof(chunk));
        if (r <= 0)
            return NULL;
        cr_assert_eq(fo_buf_append(&m->buf, chunk, (size_t)r), FO_OK);
    }
}

static int id_is(const cJSON *j, int id)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "id");
    return cJSON_IsNumber(v) && v->valuedouble == id;
}

static int method_is(const cJSON *j, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "method");
    return cJSON_IsString(v) && !strcmp(v->valuestring, name);
}

static int mcp_end(struct mcp *m)
{
    close(m->in);
    while (mcp_read(m, 20000)) /* drain to EOF */
        ;
    int st = 0;
    waitpid(m->pid, &st, 0);
    close(m->out);
    fo_buf_release(&m->buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define INIT(caps)                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"     \
    "\"protocolVersion\":\"2025-11-25\",\"capabilities\":" caps ","            \
    "\"clientInfo\":{\"name\":\"editor\",\"version\":\"1\"}}}"

#define kind_count tu_kind_count

/* The held fake model, a fresh dir, a daemon on it when beside (with
 * that model), and `forum mcp` initialized (with the model itself when
 * not beside). The dir. */
static char *session_open(int beside, struct fake *f, struct tu_daemon *d,
                          struct mcp *m)
{
    signal(SIGPIPE, SIG_IGN);
    fake_start(f);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    char *dir = tu_tmpdir();
    if (beside)
        tu_daemon_start(d, dir, "--chat-url", url, "--model", "fake", NULL);
    mcp_start(m, dir, beside ? NULL : url);
    mcp_send(m, INIT("{}"));
    cJSON *j = mcp_read(m, 10000);
    cr_assert(j && id_is(j, 1));
    cJSON_Delete(j);
    mcp_send(m,
             "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    return dir;
}

/* beside: a daemon serves the ledger (with the held model), and `forum
 * mcp` is its client (through its /mcp): the same steps, the same cancel. */
static void ping_progress_cancel(int beside)
{
    struct fake f;
    struct tu_daemon d;
    struct mcp m;
    char *dir = session_open(beside, &f, &d, &m);
    cJSON *j = NULL;
    mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"submit\",\"_meta\":{\"progressToken\":"
                 "\"tok\"},\"arguments\":{\"request\":\"build the api "
                 "database server\"}}}");
    /* the run waits on the (held) model: a ping is answered meanwhile */
    int64_t t0 = tu_now_ms();
    while (fake_stat(&f, "held") < 1) {
        cr_assert_lt(tu_now_ms() - t0, 30000, "the model was never called");
        usleep(10000);
    }
    mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}");
    int progress = 0, pong = 0;
    while (!pong && (j = mcp_read(&m, 10000))) {
        cr_assert(!id_is(j, 2), "the submit answered while its model held");
        if (id_is(j, 3))
            pong = 1;
        if (method_is(j, "notifications/progress")) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "params");
            cr_assert_str_eq(tu_str(p, "progressToken"), "tok");
            cr_assert_not_null(tu_str(p, "message"));
            progress++;
        }
        cJSON_Delete(j);
    }
    cr_assert(pong, "no answer to the ping while the submit ran");
    /* the progress names steps: at least the request was reported */
    while (!progress && (j = mcp_read(&m, 2000))) {
        progress += method_is(j, "notifications/progress");
        cJSON_Delete(j);
    }
    cr_assert_gt(progress, 0, "no notifications/progress");
    /* the client gives up: the run is cancelled, witnessed, no reply */
    mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                 "\"params\":{\"requestId\":2,\"reason\":\"user\"}}");
    t0 = tu_now_ms();
    while (kind_count(dir, "answer") < 1) {
        cr_assert_lt(tu_now_ms() - t0, 30000, "the cancel never ended it");
        usleep(50000);
    }
    mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}");
    pong = 0;
    while (!pong && (j = mcp_read(&m, 10000))) {
        cr_assert(!id_is(j, 2), "a cancelled call was answered");
        pong = id_is(j, 4);
        cJSON_Delete(j);
    }
    cr_assert(pong);
    cr_assert_eq(mcp_end(&m), 0);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "run", "get",
                                "0", (char *)NULL);
    cJSON *g = tu_run_json(&r);
    cr_assert_str_eq(tu_str(g, "state"), "cancelled");
    cJSON_Delete(g);
    tu_run_free(&r);
    cr_assert_eq(kind_count(dir, "budget"), 1, "the cancel witnessed once");
    kill(f.pid, SIGUSR1); /* the held call answered, then the fake goes */
    while (fake_stat(&f, "held") > 0)
        usleep(10000);
    kill(f.pid, SIGTERM);
    waitpid(f.pid, NULL, 0);
    if (beside)
        cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(mcp_live, ping_while_a_submit_runs_progress_and_cancel, .timeout = 90)
{
    ping_progress_cancel(0);
}

Test(mcp_live, beside_a_daemon_progress_and_cancel_go_through_its_mcp,
     .timeout = 90)
{
    ping_progress_cancel(1);
}

Test(mcp_live, a_gate_is_asked_through_elicitation, .timeout = 90)
{
    signal(SIGPIPE, SIG_IGN);
    char *dir = tu_tmpdir();
    struct mcp m;
    mcp_start(&m, dir, NULL);
    mcp_send(&m, INIT("{\"elicitation\":{}}"));
    cJSON *j = mcp_read(&m, 10000);
    cr_assert(j && id_is(j, 1));
    cJSON_Delete(j);
    mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"submit\",\"arguments\":{\"request\":"
                 "\"build the api database server\",\"gates\":{\"all\":true}"
                 "}}}");
    char eid[64] = "";
    while (!eid[0] && (j = mcp_read(&m, 20000))) {
        cr_assert(!id_is(j, 2), "answered before its gate was decided");
        if (method_is(j, "elicitation/create")) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "params");
            cr_assert(strstr(tu_str(p, "message"), "wave 0"), "%s",
                      tu_str(p, "message"));
            const cJSON *props = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(p, "requestedSchema"),
                "properties");
            cr_assert_not_null(
                cJSON_GetObjectItemCaseSensitive(props, "decision"));
            cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(props, "T1"));
            snprintf(eid, sizeof(eid), "%s", tu_str(j, "id"));
        }
        cJSON_Delete(j);
    }
    cr_assert(eid[0], "no elicitation/create came");
    char answer[512];
    snprintf(answer, sizeof(answer),
             "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"result\":{\"action\":"
             "\"accept\",\"content\":{\"decision\":\"edit\",\"T1\":\"write "
             "the edited schema\"}}}",
             eid);
    mcp_send(&m, answer);
    const char *ans = NULL;
    cJSON *reply = NULL;
    while (!reply && (j = mcp_read(&m, 30000))) {
        if (id_is(j, 2))
            reply = j;
        else
            cJSON_Delete(j);
    }
    cr_assert_not_null(reply, "the submit never answered");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(reply, "result"), "structuredContent");
    ans = tu_str(sc, "answer");
    cr_assert(ans && strstr(ans, "write the edited schema"), "%s",
              ans ? ans : "(none)");
    cJSON_Delete(reply);
    cr_assert_eq(mcp_end(&m), 0);
    cr_assert_eq(kind_count(dir, "gate_edited"), 1);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify",
                                "--deep", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* A run of a few milliseconds (the stub) still reports every step, in
 * order, before its result: progress 1..N, one per entry of the run, the
 * first its request and the last its answer (the engine's own events; a
 * poll of the ledger every 200 ms reported none of them). */
Test(mcp_live, a_fast_runs_progress_lists_every_step_before_its_result,
     .timeout = 60)
{
    signal(SIGPIPE, SIG_IGN);
    char *dir = tu_tmpdir();
    struct mcp m;
    mcp_start(&m, dir, NULL);
    mcp_send(&m, INIT("{}"));
    cJSON *j = mcp_read(&m, 10000);
    cr_assert(j && id_is(j, 1));
    cJSON_Delete(j);
    mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"submit\",\"_meta\":{\"progressToken\":"
                 "7},\"arguments\":{\"request\":\"build the api database "
                 "server\"}}}");
    int steps = 0;
    char first[128] = "", last[128] = "";
    long long run = -1;
    while ((j = mcp_read(&m, 10000)) && !id_is(j, 2)) {
        cr_assert(method_is(j, "notifications/progress"));
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "params");
        cr_assert_eq(tu_num(p, "progressToken"), 7);
        cr_assert_eq(tu_num(p, "progress"), steps + 1, "in order, none lost");
        snprintf(steps ? last : first, sizeof(first), "%s",
                 tu_str(p, "message"));
        steps++;
        cJSON_Delete(j);
    }
    cr_assert_not_null(j, "no result");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "result"), "structuredContent");
    run = tu_num(sc, "request_seq");
    cJSON_Delete(j);
    cr_assert_eq(mcp_end(&m), 0);
    cr_assert_str_eq(first, "request received");
    cr_assert_str_eq(last, "answer");
    /* one step per entry of the run */
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "run", "get",
                                "0", (char *)NULL);
    cJSON *g = tu_run_json(&r);
    cr_assert_eq(run, 0);
    cr_assert_eq(tu_num(g, "count"), steps, "%d steps reported", steps);
    cJSON_Delete(g);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* The threads of process pid (/proc/PID/task). */
static int threads_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "%s", path);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* 50 run_start calls, each run then waiting on the (held) model: no
 * thread more in `forum mcp` (an engine of its own, or the daemon's
 * bridge) nor in the daemon; a run holds memory, never a thread. */
static void fifty_runs_no_thread(int beside)
{
    struct fake f;
    struct tu_daemon d;
    struct mcp m;
    char *dir = session_open(beside, &f, &d, &m);
    cJSON *j = NULL;
    /* status says whose engine answers */
    mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"status\",\"arguments\":{}}}");
    j = mcp_read(&m, 10000);
    cr_assert(j && id_is(j, 2));
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "result"), "structuredContent");
    cr_assert_str_eq(tu_str(st, "engine"), beside ? "daemon" : "in process");
    cJSON_Delete(j);
    int m0 = threads_of(m.pid), d0 = beside ? threads_of(d.pid) : 0;
    for (int i = 0; i < 50; i++) {
        char line[256];
        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"run_start\",\"arguments\":{"
                 "\"request\":\"build the api database server %d\"}}}",
                 100 + i, i);
        mcp_send(&m, line);
    }
    int replies = 0;
    while (replies < 50 && (j = mcp_read(&m, 20000))) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
        if (cJSON_IsNumber(id) && id->valuedouble >= 100) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "result");
            cr_assert(
                cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "isError")),
                "%s", tu_str(j, "id"));
            replies++;
        }
        cJSON_Delete(j);
    }
    cr_assert_eq(replies, 50);
    int64_t t0 = tu_now_ms();
    while (fake_stat(&f, "held") < 50) {
        cr_assert_lt(tu_now_ms() - t0, 30000, "%lld runs at the model",
                     fake_stat(&f, "held"));
        usleep(10000);
    }
    cr_assert_eq(threads_of(m.pid), m0, "forum mcp: threads");
    if (beside)
        cr_assert_eq(threads_of(d.pid), d0, "the daemon: threads");
    kill(f.pid, SIGUSR1); /* the held calls answered: the runs go on */
    if (beside) {
        cr_assert_eq(mcp_end(&m), 0);
        cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    } else {
        cr_assert_eq(mcp_end(&m), 0); /* after its session's runs ended */
        cr_assert_eq(kind_count(dir, "answer"), 50);
    }
    while (fake_stat(&f, "held") > 0)
        usleep(10000);
    kill(f.pid, SIGTERM);
    waitpid(f.pid, NULL, 0);
    tu_rmrf(dir);
}

Test(mcp_live, fifty_run_starts_add_no_thread, .timeout = 120)
{
    fifty_runs_no_thread(0);
}

Test(mcp_live, fifty_run_starts_beside_a_daemon_add_no_thread, .timeout = 120)
{
    fifty_runs_no_thread(1);
}

/* The structuredContent of tools/call name (arguments args) as call id. */
static cJSON *tool_call(struct mcp *m, int id, const char *name,
                        const char *args)
{
    char line[512];
    snprintf(line, sizeof(line),
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"%s\",\"arguments\":%s}}",
             id, name, args);
    mcp_send(m, line);
    cJSON *j;
    while ((j = mcp_read(m, 20000)) && !id_is(j, id))
        cJSON_Delete(j); /* progress and the like */
    cr_assert_not_null(j, "no answer to %s", name);
    cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "result");
    cr_assert(cJSON_IsObject(r), "%s: not a result", name);
    cr_assert(!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "isError")),
              "%s: an error", name);
    cJSON *sc = cJSON_DetachItemFromObjectCaseSensitive(r, "structuredContent");
    cJSON_Delete(j);
    return sc;
}

/* `forum mcp` beside a daemon that stops: its next calls are answered,
 * not refused, by an engine it starts for the rest of the session
 * (status says "in process"), and a run started there ends done before
 * the session does. */
Test(mcp_live, beside_a_daemon_that_stops_the_calls_run_here, .timeout = 90)
{
    struct fake f;
    struct tu_daemon d;
    struct mcp m;
    char *dir = session_open(1, &f, &d, &m);
    cJSON *st = tool_call(&m, 2, "status", "{}");
    cr_assert_str_eq(tu_str(st, "engine"), "daemon");
    cJSON_Delete(st);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    st = tool_call(&m, 3, "status", "{}");
    cr_assert_str_eq(tu_str(st, "engine"), "in process");
    cJSON_Delete(st);
    st = tool_call(&m, 4, "run_start",
                   "{\"request\":\"build the api database server\"}");
    long long run = tu_num(st, "run");
    cJSON_Delete(st);
    cr_assert_eq(mcp_end(&m), 0); /* after the run it began ended */
    char path[64];
    snprintf(path, sizeof(path), "%lld", run);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "--json", "run", "get", path, NULL);
    cJSON *g = tu_run_json(&r);
    cr_assert_str_eq(tu_str(g, "state"), "done", "%s", r.out);
    cJSON_Delete(g);
    tu_run_free(&r);
    kill(f.pid, SIGTERM);
    waitpid(f.pid, NULL, 0);
    tu_rmrf(dir);
}
