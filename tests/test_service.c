/* test_service: `forum serve` as a service against the real binary:
 * start/stop/status/logs, one daemon per ledger, SIGHUP, and durability:
 * SIGKILL during a burst of concurrent appends (every 200 survives, the
 * ledger verifies) and SIGTERM during a burst (exit 0, nothing lost). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "ledger/proof.h"
#include "daemon/service.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

Test(service, start_status_logs_stop, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "serve",
                                "start", "--port", "0", (char *)NULL);
    cr_assert_eq(r.status, 0, "start: %s", r.err);
    cJSON *st = tu_run_json(&r);
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(st, "pid");
    cr_assert(cJSON_IsNumber(pid) && pid->valuedouble > 0);
    cJSON_Delete(st);
    tu_run_free(&r);
    /* a second one refuses, started or in the foreground */
    r = tu_forumv(NULL, "--ledger", dir, "serve", "start", "--port", "0",
                  (char *)NULL);
    cr_assert_eq(r.status, 3);
    cr_assert(strstr(r.err, "another forum daemon"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "--port", "0", (char *)NULL);
    cr_assert_eq(r.status, 3);
    cr_assert(strstr(r.err, "another forum daemon"), "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "serve", "status",
                  (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    st = tu_run_json(&r);
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(st, "health")->valuestring, "ok");
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(st, "entries")));
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(st, "uptime_s")));
    cr_assert_eq(tu_num(st, "runs_in_flight"), 0);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "providers")),
        0);
    cJSON_Delete(st);
    tu_run_free(&r);
    /* the log names what serves: the address, then the model providers
     * (here none), then the sandbox of agents' commands */
    r = tu_forumv(NULL, "--ledger", dir, "serve", "logs", "-n", "2",
                  (char *)NULL);
    cr_assert_eq(r.status, 0);
    char *nl = strchr(r.out, '\n');
    cr_assert_not_null(nl, "%s", r.out);
    cr_assert(strstr(r.out, "no model provider") &&
                  strstr(r.out, "no model provider") < nl,
              "%s", r.out);
    cr_assert(strstr(nl, "sandbox: "), "%s", r.out);
    cr_assert_eq(strchr(nl + 1, '\n') - r.out + 1, (long)r.out_len,
                 "not two lines: %s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "logs", (char *)NULL);
    cr_assert(strstr(r.out, "serving"), "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "stop", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    /* stopped: the pid and state files are gone, status and stop say so */
    char p[512];
    snprintf(p, sizeof(p), "%s/forum.pid", dir);
    cr_assert_neq(access(p, F_OK), 0);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "status", (char *)NULL);
    cr_assert_eq(r.status, 1);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "stop", (char *)NULL);
    cr_assert_eq(r.status, 1);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "logs", (char *)NULL);
    cr_assert(strstr(r.out, "drained"), "%s", r.out);
    tu_run_free(&r);
    /* the token was made 0600 */
    struct stat sb;
    snprintf(p, sizeof(p), "%s/token", dir);
    cr_assert_eq(stat(p, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0600);
    tu_rmrf(dir);
}

Test(service, start_reports_why_it_cannot_start)
{
    char *dir = tu_tmpdir();
    char p[512];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    cr_assert_eq(tu_write_file(p, "{\"port\":\"x\"}", 12), 0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "serve", "--check", (char *)NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "port"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(tu_write_file(p, "{\"port\":0}", 10), 0);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "--check", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    /* a port taken by someone else: start fails with the reason */
    struct tu_daemon d;
    char *other = tu_tmpdir();
    tu_daemon_start(&d, other, NULL);
    char port[16];
    snprintf(port, sizeof(port), "%d", d.port);
    r = tu_forumv(NULL, "--ledger", dir, "serve", "start", "--port", port,
                  (char *)NULL);
    cr_assert_eq(r.status, 3);
    cr_assert(strstr(r.err, "cannot listen"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(other);
    tu_rmrf(dir);
}

/* A relative data dir is the working directory's: `./run.sh` and a plain
 * `forum serve` use ./forum-ledger (serve refused it: "not an absolute
 * path"). */
Test(service, a_relative_data_dir_is_the_working_directorys)
{
    char *dir = tu_tmpdir();
    cr_assert_eq(chdir(dir), 0);
    unsetenv("FORUM_LEDGER");
    struct tu_run r =
        tu_forumv(NULL, "--ledger", "rel", "serve", "--check", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "configuration ok"), "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "serve", "--check", (char *)NULL); /* ./forum-ledger */
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(chdir("/"), 0);
    tu_rmrf(dir);
}

/* A token others may read is a leaked token: the daemon refuses to start,
 * naming the file and the fix, in the foreground and through start. */
Test(service, refuses_a_token_others_can_read, .timeout = 60)
{
    char *dir = tu_tmpdir();
    char p[512];
    snprintf(p, sizeof(p), "%s/token", dir);
    cr_assert_eq(tu_write_file(p, "0123456789abcdef0123456789abcdef", 32), 0);
    cr_assert_eq(chmod(p, 0644), 0);
    const char *modes[] = {"start", "--check"};
    for (size_t i = 0; i < 2; i++) {
        struct tu_run r = tu_forumv(NULL, "--ledger", dir, "serve", modes[i],
                                    "--port", "0", (char *)NULL);
        int status = r.status;
        if (status == 0) { /* before the fix: stop what started */
            struct tu_run s =
                tu_forumv(NULL, "--ledger", dir, "serve", "stop", (char *)NULL);
            tu_run_free(&s);
        }
        /* start reports a daemon that failed to start as exit 3 */
        cr_assert_eq(status, i == 0 ? 3 : 2, "serve %s: exit %d: %s", modes[i],
                     status, r.err);
        cr_assert(strstr(r.err, p), "%s", r.err);
        cr_assert(strstr(r.err, "chmod 600"), "%s", r.err);
        tu_run_free(&r);
    }
    tu_rmrf(dir);
}

/* A token creation killed mid-way leaves a whole token in token.tmp-PID-HEX:
 * the daemon removes it when it starts. */
Test(service, stale_temp_tokens_are_removed_on_start, .timeout = 60)
{
    char *dir = tu_tmpdir();
    pid_t dead = fork();
    cr_assert_geq(dead, 0);
    if (dead == 0)
        _exit(0);
    cr_assert_eq(waitpid(dead, NULL, 0), dead);
    char p[512];
    snprintf(p, sizeof(p), "%s/token.tmp-%ld-0123456789abcdef", dir,
             (long)dead);
    cr_assert_eq(tu_write_file(p, "0123456789abcdef0123456789abcdef", 32), 0);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    int gone = access(p, F_OK) != 0;
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cr_assert(gone, "%s is still there", p);
    tu_rmrf(dir);
}

Test(service, sighup_reopens_the_log)
{
    char *dir = tu_tmpdir();
    char log[512], old[512];
    snprintf(log, sizeof(log), "%s/forum.log", dir);
    snprintf(old, sizeof(old), "%s/forum.log.1", dir);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--log-file", log, NULL);
    cr_assert_eq(rename(log, old), 0);
    kill(d.pid, SIGHUP);
    char *text = NULL;
    for (int i = 0; i < 200 && !(text && strstr(text, "reopened")); i++) {
        free(text);
        usleep(10000);
        text = tu_read_file(log, NULL);
    }
    cr_assert(text && strstr(text, "log reopened"), "new log: %s", text);
    free(text);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

/* ---- bursts ------------------------------------------------------------ */

#define WRITERS 6
#define MAX_ACKS 20000

struct writer {
    const struct tu_daemon *d;
    int id;
    int acked;
    int refused;
    int64_t seq[MAX_ACKS];
    char hash[MAX_ACKS][65];
};

static void *write_loop(void *arg)
{
    struct writer *w = arg;
    for (int i = 0; w->acked < MAX_ACKS; i++) {
        char body[160];
        snprintf(body, sizeof(body),
                 "{\"actor\":\"w%d\",\"kind\":\"burst\",\"payload\":"
                 "{\"w\":%d,\"i\":%d}}",
                 w->id, w->id, i);
        char *reply = NULL;
        int st = tu_http(w->d, "POST", "/append", body, 1, &reply);
        if (st == 200) {
            cJSON *o = NULL;
            struct fo_err err;
            cr_assert_eq(fo_json_parse(reply, strlen(reply), &o, &err), FO_OK);
            w->seq[w->acked] =
                (int64_t)cJSON_GetObjectItemCaseSensitive(o, "seq")
                    ->valuedouble;
            snprintf(w->hash[w->acked], 65, "%s",
                     cJSON_GetObjectItemCaseSensitive(o, "hash")->valuestring);
            w->acked++;
            cJSON_Delete(o);
        } else {
            /* killed or draining: 503, a reset, a refused connection */
            cr_assert(st == 503 || st == -1, "status %d: %s", st, reply);
            w->refused++;
            free(reply);
            return NULL;
        }
        free(reply);
    }
    return NULL;
}

/* Every acknowledged entry is there with its hash; the ledger verifies. */
static int check_acked(const char *dir, struct writer *w, int n)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    int total = 0;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < w[i].acked; k++) {
            struct ledger_entry e;
            cr_assert_eq(ledger_get(l, w[i].seq[k], &e, NULL, &err), FO_OK,
                         "acknowledged seq %lld lost: %s",
                         (long long)w[i].seq[k], err.msg);
            char hex[65];
            fo_hex(e.hash, 32, hex);
            cr_assert_str_eq(hex, w[i].hash[k]);
            total++;
        }
    }
    struct ledger_verify_result res;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err),
                 FO_OK);
    cr_assert(res.ok, "verify: %s at %lld", res.reason,
              (long long)res.first_bad_seq);
    ledger_close(l);
    return total;
}

static struct writer *burst(const struct tu_daemon *d, pthread_t *th)
{
    struct writer *w = calloc(WRITERS, sizeof(*w));
    cr_assert_not_null(w);
    for (int i = 0; i < WRITERS; i++) {
        w[i].d = d;
        w[i].id = i;
        cr_assert_eq(pthread_create(&th[i], NULL, write_loop, &w[i]), 0);
    }
    return w;
}

Test(service, sigkill_during_a_burst_loses_no_acknowledged_append,
     .timeout = 240)
{
    char *dir = tu_tmpdir();
    int total = 0;
    for (int round = 0; round < 10; round++) {
        struct tu_daemon d;
        tu_daemon_start(&d, dir, "--checkpoint-ms", "50", NULL);
        pthread_t th[WRITERS];
        struct writer *w = burst(&d, th);
        usleep((useconds_t)(150000 + 37000 * round));
        cr_assert_eq(tu_daemon_signal_wait(&d, SIGKILL, 10000), 128 + SIGKILL);
        for (int i = 0; i < WRITERS; i++)
            pthread_join(th[i], NULL);
        int acked = check_acked(dir, w, WRITERS);
        cr_assert_gt(acked, 0, "round %d: nothing acknowledged", round);
        total += acked;
        free(w);
    }
    cr_log_info("10 rounds, %d acknowledged appends all present", total);
    /* and the CLI agrees */
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify",
                                "--deep", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(service, sigterm_during_a_burst_drains_and_exits_0, .timeout = 120)
{
    char *dir = tu_tmpdir();
    for (int round = 0; round < 3; round++) {
        struct tu_daemon d;
        tu_daemon_start(&d, dir, NULL);
        pthread_t th[WRITERS];
        struct writer *w = burst(&d, th);
        /* six writers at once share transactions: fewer commits than
         * appends (the group commit at work). Waits for the writers' first
         * 100 appends, however slow the machine is today. */
        char *m = NULL;
        long long appends = 0, commits = 0;
        for (int t = 0; t < 600 && appends <= 100; t++) {
            free(m);
            m = NULL;
            usleep(50000);
            cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 1, &m), 200);
            const char *pa = strstr(m, "\nforum_appends_total ");
            const char *pc = strstr(m, "\nforum_commits_total ");
            cr_assert(pa && pc, "%s", m);
            appends = strtoll(pa + 21, NULL, 10);
            commits = strtoll(pc + 21, NULL, 10);
        }
        cr_assert_gt(appends, 100, "%s", m);
        cr_assert_lt(commits, appends,
                     "no batching: %lld commits for %lld "
                     "appends",
                     commits, appends);
        free(m);
        cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 20000), 0,
                     "exit status after SIGTERM");
        for (int i = 0; i < WRITERS; i++)
            pthread_join(th[i], NULL);
        int acked = check_acked(dir, w, WRITERS);
        cr_assert_gt(acked, 0);
        free(w);
    }
    /* a last checkpoint was signed on shutdown, covering everything */
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "summary", (char *)NULL);
    cr_assert_eq(r.status, 0);
    cJSON *s = tu_run_json(&r);
    long long entries =
        (long long)cJSON_GetObjectItemCaseSensitive(s, "entries")->valuedouble;
    cJSON_Delete(s);
    tu_run_free(&r);
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK);
    struct ledger_checkpoint cp = {0};
    cr_assert_eq(ledger_checkpoint_latest(l, &cp, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(cp.size, entries);
    ledger_checkpoint_release(&cp);
    ledger_close(l);
    tu_rmrf(dir);
}

struct plan_call {
    const struct tu_daemon *d;
    int status;
    char *reply;
    atomic_int done; /* the plan's reply has come */
};

static void *plan_thread(void *arg)
{
    struct plan_call *pc = arg;
    pc->status = tu_http(pc->d, "POST", "/plan/run",
                         "{\"plan\":{\"tasks\":[{\"id\":\"T1\",\"agent\":"
                         "\"backend\",\"instruction\":\"wait\","
                         "\"depends_on\":[]}]}}",
                         1, &pc->reply);
    atomic_store(&pc->done, 1);
    return NULL;
}

Test(service, health_answers_while_a_long_plan_runs, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--cmd", "sh -c 'sleep 5; echo done' x", NULL);
    struct plan_call pc = {&d, 0, NULL, 0};
    pthread_t th;
    int64_t t0 = tu_now_ms();
    cr_assert_eq(pthread_create(&th, NULL, plan_thread, &pc), 0);
    usleep(300000);
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, NULL), 200);
        cr_assert_eq(tu_http(&d, "GET", "/status", NULL, 1, NULL), 200);
        usleep(100000);
    }
    /* all twenty pairs were answered before the plan's reply came */
    cr_assert_not(atomic_load(&pc.done), "the plan ended first");
    pthread_join(th, NULL);
    int64_t plan_ms = tu_now_ms() - t0;
    cr_assert_eq(pc.status, 200, "%s", pc.reply);
    cr_assert(strstr(pc.reply, "done"), "%s", pc.reply);
    cr_assert_geq(plan_ms, 5000, "the plan did not take its 5 s");
    free(pc.reply);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_rmrf(dir);
}

Test(service, draining_answers_503_on_open_connections, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--cmd", "sh -c 'sleep 2; echo done' x", NULL);
    /* a keep-alive connection that has already been served once */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)d.port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    const char *get = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    char buf[4096];
    cr_assert_eq(send(fd, get, strlen(get), 0), (ssize_t)strlen(get));
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    cr_assert(strstr(buf, "200 OK"), "%s", buf);
    /* a plan in flight, then SIGTERM */
    struct plan_call pc = {&d, 0, NULL, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, plan_thread, &pc), 0);
    /* wait until the daemon has the plan in hand (in flight: it and the
     * metrics request asking) */
    int inflight = 0;
    for (int i = 0; i < 500 && inflight < 2; i++) {
        char *m = NULL;
        cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 1, &m), 200);
        const char *p = strstr(m, "\nforum_http_inflight ");
        inflight = p ? (int)strtol(p + 21, NULL, 10) : 0;
        free(m);
        if (inflight < 2)
            usleep(10000);
    }
    cr_assert_geq(inflight, 2, "the plan never reached the daemon");
    /* and its task is running (request plan task): a shutdown lets it
     * finish within its grace, so the drain lasts that long */
    int tasked = 0;
    for (int i = 0; i < 500 && !tasked; i++) {
        char *b = NULL;
        tasked = tu_http(&d, "GET", "/ledger/2", NULL, 1, &b) == 200 &&
                 strstr(b, "\"kind\":\"task\"");
        free(b);
        if (!tasked)
            usleep(10000);
    }
    cr_assert(tasked, "the plan's task never began");
    kill(d.pid, SIGTERM);
    usleep(200000);
    /* the open connection gets 503 draining and is closed */
    cr_assert_eq(send(fd, get, strlen(get), MSG_NOSIGNAL),
                 (ssize_t)strlen(get));
    n = recv(fd, buf, sizeof(buf) - 1, 0);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    cr_assert(strstr(buf, "HTTP/1.1 503"), "%s", buf);
    cr_assert(strstr(buf, "\"code\":\"draining\""), "%s", buf);
    close(fd);
    /* a new connection is refused: the listener is closed */
    int fd2 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_neq(connect(fd2, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd2);
    /* the plan in flight finishes its task within the shutdown's grace,
     * stops (on record, to resume at the next start) and is answered 503;
     * then exit 0 */
    pthread_join(th, NULL);
    cr_assert_eq(pc.status, 503, "%s", pc.reply);
    cr_assert(strstr(pc.reply, "resume"), "%s", pc.reply);
    free(pc.reply);
    cr_assert_eq(tu_daemon_signal_wait(&d, 0, 10000), 0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- the control loop through the daemon and MCP, with a fake model ---- */

static const char *widget_script(struct fake *f, const char *role, int n,
                                 const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "Here is the plan:\n```json\n{\"tasks\":[{\"id\":\"T1\","
               "\"agent\":\"backend\",\"instruction\":\"design the widget "
               "endpoint\",\"done_when\":[\"it names the endpoint\"]}]}\n```";
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"named\"}";
    if (!strcmp(role, "synthesizer"))
        return "The endpoint is POST /v1/widgets.";
    if (!strcmp(role, "classifier"))
        return "{\"lane\": \"backend\"}";
    return "POST /v1/widgets";
}

Test(service, submit_uses_the_configured_model_over_http_and_mcp, .timeout = 60)
{
    struct fake *f = fake_start(widget_script);
    char *dir = tu_tmpdir();
    char p[512], cfg[512];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    int n = snprintf(cfg, sizeof(cfg),
                     "{\"models\":{\"providers\":[{\"api\":\"chat\","
                     "\"url\":\"http://127.0.0.1:%d\",\"model\":\"fake-1\"}],"
                     "\"backoff_ms\":10}}",
                     f->port);
    cr_assert_eq(tu_write_file(p, cfg, (size_t)n), 0);
    const char *req = "build the api database server endpoint";
    /* over HTTP, the providers from forum.json */
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    char *b = NULL;
    char body[256];
    snprintf(body, sizeof(body), "{\"request\":\"%s\"}", req);
    cr_assert_eq(tu_http(&d, "POST", "/submit", body, 1, &b), 200, "%s", b);
    cr_assert(strstr(b, "\"answer\":\"The endpoint is POST /v1/widgets.\""),
              "%s", b);
    cr_assert(strstr(b, "\"request_seq\":0"), "%s", b);
    free(b);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cr_assert(strstr(f->log, "coordinator:fake-1"), "%s", f->log);
    cr_assert(strstr(f->log, "synthesizer:fake-1"), "%s", f->log);
    /* over MCP, the same configuration */
    snprintf(body, sizeof(body), "{\"request\":\"%s\"}", req);
    cJSON *sc = tu_mcp_call(dir, 0, "submit", body);
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(sc, "answer");
    cr_assert(cJSON_IsString(ans));
    cr_assert_str_eq(ans->valuestring, "The endpoint is POST /v1/widgets.");
    cJSON_Delete(sc);
    /* serve flags win over forum.json */
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    tu_daemon_start(&d, dir, "--chat-url", url, "--model", "fake-2", NULL);
    cr_assert_eq(tu_http(&d, "POST", "/submit", body, 1, &b), 200, "%s", b);
    free(b);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    cr_assert(strstr(f->log, "coordinator:fake-2"), "%s", f->log);
    /* every step witnessed: request .. answer, three runs, all verify */
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "verify", "--deep", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "summary",
                  (char *)NULL);
    cJSON *s = tu_run_json(&r);
    const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(s, "kinds");
    if (!kinds)
        kinds = cJSON_GetObjectItemCaseSensitive(s, "by_kind");
    const cJSON *answers = cJSON_GetObjectItemCaseSensitive(kinds, "answer");
    cr_assert(cJSON_IsNumber(answers) && answers->valuedouble == 3, "%s",
              r.out);
    cJSON_Delete(s);
    tu_run_free(&r);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* Another process that opens and closes the ledger read-write (here a
 * `forum mcp` session) while the daemon serves it must not cost the
 * daemon's later acknowledged appends, even at a SIGKILL. */
Test(service, an_mcp_session_beside_the_daemon_loses_no_append, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    const char *e = "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":{}}";
    cr_assert_eq(tu_http(&d, "POST", "/append", e, 1, NULL), 200);
    cJSON *v = tu_mcp_call(dir, 0, "ledger_verify", "{}");
    cJSON_Delete(v);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(tu_http(&d, "POST", "/append", e, 1, NULL), 200);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "summary", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *s = cJSON_Parse(r.out);
    cr_assert_eq(tu_num(s, "entries"), 3, "another process sees: %s", r.out);
    cJSON_Delete(s);
    tu_run_free(&r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGKILL, 10000), 128 + SIGKILL);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "verify", "--deep",
                  (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    s = cJSON_Parse(r.out);
    cr_assert_eq(tu_num(s, "entries"), 3, "after SIGKILL: %s", r.out);
    cJSON_Delete(s);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- the ledger's files going from under the daemon -------------------- */

static const char *const an_append =
    "{\"actor\":\"a\",\"kind\":\"k\",\"payload\":{\"n\":1}}";

/* The reply must be 503 storage_moved naming file; returns nothing. */
static void assert_storage_moved(const struct tu_daemon *d, const char *method,
                                 const char *path, const char *json,
                                 const char *file)
{
    char *body = NULL;
    int st = tu_http(d, method, path, json, 1, &body);
    cr_assert_eq(st, 503, "%s %s: %d %s", method, path, st, body);
    cJSON *j = tu_json_parse(body);
    cr_assert_str_eq(tu_str(j, "code"), "storage_moved", "%s", body);
    cr_assert(strstr(tu_str(j, "error"), file), "%s", body);
    cJSON_Delete(j);
    free(body);
}

static int count_in(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* rm DIR/ledger.db under a serving daemon: SQLite would go on writing to
 * the unlinked file. The daemon must stop acknowledging at once, say why
 * (reply, /health, serve status, the log once), and keep refusing, even
 * when another process has made a new ledger at the path meanwhile (else
 * the same seqs would be handed out twice). */
Test(service, a_deleted_ledger_db_stops_every_acknowledgement, .timeout = 60)
{
    char *dir = tu_tmpdir();
    char log[512], p[512];
    snprintf(log, sizeof(log), "%s/forum.log", dir);
    snprintf(p, sizeof(p), "%s/ledger.db", dir);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, "--log-file", log, NULL);
    cJSON *e = tu_http_json(&d, "POST", "/append", an_append, 200);
    cr_assert_eq(tu_num(e, "seq"), 0);
    cJSON_Delete(e);
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, NULL), 200);
    /* another process with the ledger open (as a `forum mcp` session) */
    struct ledger *other = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &other, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(unlink(p), 0);
    assert_storage_moved(&d, "POST", "/append", an_append, "ledger.db");
    assert_storage_moved(&d, "GET", "/health", NULL, "ledger.db");
    cr_assert_eq(ledger_append(other, "o", "k", -1, "{}", 2, NULL, &err),
                 FO_E_STORAGE_MOVED, "%s", err.msg);
    ledger_close(other);
    /* a process starting now makes no new ledger beside the old WAL (it
     * would take the WAL's frames, and hand out the same seqs again) */
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                  "--kind", "k", "--payload", "{}", (char *)NULL);
    cr_assert_eq(r.status, 3, "%s%s", r.out, r.err);
    cr_assert(strstr(r.err, "missing, but its -wal is there"), "%s", r.err);
    tu_run_free(&r);
    for (int i = 0; i < 3; i++)
        assert_storage_moved(&d, "POST", "/append", an_append, "ledger.db");
    assert_storage_moved(&d, "GET", "/health", NULL, "ledger.db");
    /* reads go on */
    cr_assert_eq(tu_http(&d, "GET", "/status", NULL, 1, NULL), 200);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "serve", "status",
                  (char *)NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    cJSON *s = tu_run_json(&r);
    cr_assert_str_eq(tu_str(s, "health"), "unhealthy");
    cr_assert(strstr(tu_str(s, "error"), "ledger.db"), "%s", r.out);
    cJSON_Delete(s);
    tu_run_free(&r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    char *text = tu_read_file(log, NULL);
    cr_assert_eq(count_in(text, "ledger storage lost"), 1, "log: %s", text);
    free(text);
    tu_rmrf(dir);
}

/* /health finds the files gone without a write; the daemon then refuses
 * writes until it is restarted, even once the file is back; after a
 * restart it serves the ledger on. */
Test(service, health_finds_it_and_writes_stay_refused_until_restart,
     .timeout = 60)
{
    char *dir = tu_tmpdir();
    char p[512], q[512];
    snprintf(p, sizeof(p), "%s/ledger.db", dir);
    snprintf(q, sizeof(q), "%s/ledger.db.away", dir);
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    cr_assert_eq(tu_http(&d, "POST", "/append", an_append, 1, NULL), 200);
    cr_assert_eq(rename(p, q), 0);
    assert_storage_moved(&d, "GET", "/health", NULL, "ledger.db");
    cr_assert_eq(rename(q, p), 0);
    assert_storage_moved(&d, "POST", "/append", an_append, "renamed away");
    assert_storage_moved(&d, "GET", "/health", NULL, "renamed away");
    /* the other writes too, whichever thread and ledger handle they use */
    assert_storage_moved(&d, "POST", "/redact", "{\"seq\":0,\"reason\":\"r\"}",
                         "renamed away");
    assert_storage_moved(&d, "POST", "/submit", "{\"request\":\"hello\"}",
                         "renamed away");
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    tu_daemon_start(&d, dir, NULL);
    cr_assert_eq(tu_http(&d, "GET", "/health", NULL, 0, NULL), 200);
    cJSON *e = tu_http_json(&d, "POST", "/append", an_append, 200);
    cr_assert_eq(tu_num(e, "seq"), 1);
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify",
                                "--deep", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* The WAL truncated or deleted under the daemon: refused, not 200 with
 * the ledger left malformed. */
Test(service, a_truncated_or_deleted_wal_stops_every_acknowledgement,
     .timeout = 60)
{
    for (int del = 0; del < 2; del++) {
        char *dir = tu_tmpdir();
        char p[512];
        snprintf(p, sizeof(p), "%s/ledger.db-wal", dir);
        struct tu_daemon d;
        tu_daemon_start(&d, dir, NULL);
        for (int i = 0; i < 5; i++)
            cr_assert_eq(tu_http(&d, "POST", "/append", an_append, 1, NULL),
                         200);
        if (del)
            cr_assert_eq(unlink(p), 0);
        else
            cr_assert_eq(truncate(p, 0), 0);
        for (int i = 0; i < 2; i++)
            assert_storage_moved(&d, "POST", "/append", an_append,
                                 del ? "deleted" : "truncated");
        assert_storage_moved(&d, "GET", "/health", NULL, "ledger.db-wal");
        tu_daemon_signal_wait(&d, SIGKILL, 10000);
        tu_rmrf(dir);
    }
}

/* Every path makes the data dir 0700 and its files 0600, whatever the
 * umask; a start that fails leaves no new dir behind. */
Test(service, data_dirs_are_private_and_a_failed_start_leaves_nothing)
{
    mode_t old = umask(022);
    char *root = tu_tmpdir();
    char dir[4096], bad[4096], port_s[16];
    snprintf(dir, sizeof(dir), "%s/d", root);
    snprintf(bad, sizeof(bad), "%s/never", root);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "serve", "start", "--port", "0", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    struct stat st;
    cr_assert_eq(stat(dir, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700, "dir %o", st.st_mode & 0777);
    static const char *const files[] = {
        "ledger.db", "ledger.db-wal", "ledger.db-shm",   "token",
        "forum.log", "forum.pid",     "forum.state.json"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
        cr_assert_eq(stat(p, &st), 0, "%s", files[i]);
        cr_assert_eq(st.st_mode & 0777, 0600, "%s is %o", files[i],
                     st.st_mode & 0777);
    }
    r = tu_forumv(NULL, "--ledger", dir, "serve", "stop", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    /* the port is taken: neither start leaves a dir */
    int port = 0;
    int fd = tu_listen_loopback(&port);
    snprintf(port_s, sizeof(port_s), "%d", port);
    r = tu_forumv(NULL, "--ledger", bad, "serve", "start", "--port", port_s,
                  NULL);
    cr_assert_eq(r.status, 3, "%s", r.err);
    cr_assert(strstr(r.err, "in use"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_neq(stat(bad, &st), 0, "serve start left %s", bad);
    r = tu_forumv(NULL, "--ledger", bad, "serve", "--port", port_s, NULL);
    cr_assert_neq(r.status, 0);
    tu_run_free(&r);
    cr_assert_neq(stat(bad, &st), 0, "serve left %s", bad);
    close(fd);
    umask(old);
    tu_rmrf(root);
}

/* A forum.json that fails late leaves the config as it was: no field
 * points into the freed file (issue 18, defect 15). */
Test(service, a_config_file_that_fails_late_leaves_nothing_dangling)
{
    char *dir = tu_tmpdir();
    char path[600];
    snprintf(path, sizeof(path), "%s/forum.json", dir);
    const char *text =
        "{\"host\":\"example.test\",\"models\":{\"providers\":[{\"api\":"
        "\"chat\",\"url\":\"http://127.0.0.1:9\",\"model\":\"m\"}]},"
        "\"workspace\":\"/srv/ws\",\"bogus\":1}";
    cr_assert_eq(tu_write_file(path, text, strlen(text)), 0);
    struct daemon_config cfg;
    daemon_config_init(&cfg);
    cfg.dir = dir;
    struct fo_err err;
    cr_assert_eq(daemon_config_load(&cfg, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "bogus"), "%s", err.msg);
    cr_assert_null(cfg.host);
    cr_assert_null(cfg.workspace);
    cr_assert_eq(cfg.has_models, 0);
    cr_assert_null(cfg.providers_owned);
    daemon_config_release(&cfg);
    tu_rmrf(dir);
}
