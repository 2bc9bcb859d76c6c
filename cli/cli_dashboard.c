/* `forum dashboard`: the link that opens the daemon's web page signed in.
 * The token and the checkpoint verifier key ride in the URL's fragment,
 * which a browser never sends to a server (so never into a log); the page
 * moves them into the tab's storage and clears the address bar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "ledger/proof.h"

static const char help[] =
    "usage: forum dashboard [--open] [--json]\n"
    "The link to the web dashboard of the daemon serving the data dir: runs\n"
    "live, a run's plan as a graph, gates to approve, the ledger, verify, and\n"
    "an inclusion check your browser does itself. The link carries the\n"
    "token (and the verifier key) after '#': the browser keeps them in the\n"
    "tab and never sends them to the server in the URL. Treat the link as\n"
    "the token: anyone with it can use the daemon.\n"
    "  --open   also open it with xdg-open\n"
    "  --json   {url, address}\n"
    "example:\n"
    "  forum serve start && forum dashboard --open\n";

/* Percent-encodes s into a fragment value (the token is hex, the key
 * base64 and '+'). */
static void frag(const char *s, char *out, size_t n)
{
    size_t o = 0;
    for (; *s && o + 4 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' ||
            ch == '/')
            out[o++] = (char)ch;
        else
            o += (size_t)snprintf(out + o, n - o, "%%%02X", ch);
    }
    out[o] = '\0';
}

int cli_dashboard(struct cli *c, int argc, char **argv)
{
    int open_it = 0;
    const struct cli_opt opts[] = {
        {"--open", NULL, CLI_OPT_BOOL, &open_it, 0, 0, NULL, NULL,
         "open it in the browser"},
        CLI_OPT_END,
    };
    int ex = cli_parse(c, "dashboard", argc, argv, opts, NULL, 0, NULL);
    if (ex)
        return ex == CLI_PARSE_HELP ? cli_help(help) : ex;
    struct cli_daemon d;
    struct fo_err err;
    if (cli_daemon_find(c, &d, &err) != FO_OK)
        return cli_fail(c, &err);
    if (!d.has_token) {
        fo_err_set(&err, FO_E_IO, "%s/token: cannot be read", c->ledger_dir);
        return cli_fail(c, &err);
    }
    /* the verifier key, when the ledger has one (read only: never made
     * here) */
    char *vkey = NULL;
    struct ledger *l = NULL;
    if (ledger_open(c->ledger_dir, LEDGER_OPEN_READONLY, NULL, &l, &err) ==
        FO_OK) {
        if (ledger_verifier_key(l, &vkey, &err) != FO_OK)
            vkey = NULL;
        ledger_close(l);
    }
    const char *host = d.host;
    if (!strcmp(host, "0.0.0.0") || !*host)
        host = "127.0.0.1";
    else if (!strcmp(host, "::"))
        host = "::1";
    char address[300], tok[400], key[400] = "", url[1200];
    snprintf(address, sizeof(address),
             strchr(host, ':') ? "http://[%s]:%d/" : "http://%s:%d/", host,
             d.port);
    frag(d.token, tok, sizeof(tok));
    if (vkey)
        frag(vkey, key, sizeof(key));
    snprintf(url, sizeof(url), "%s#token=%s%s%s", address, tok,
             vkey ? "&vkey=" : "", key);
    free(vkey);
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "url", url);
        cJSON_AddStringToObject(o, "address", address);
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else {
        printf("%s\n", url);
    }
    if (!open_it)
        return 0;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execlp("xdg-open", "xdg-open", url, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) ||
        WEXITSTATUS(st) != 0) {
        fprintf(stderr, "forum: dashboard: could not open a browser "
                        "(xdg-open); open the link above\n");
        return 1;
    }
    return 0;
}
