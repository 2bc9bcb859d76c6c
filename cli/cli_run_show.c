/* cli_run_show: `forum run show ID` for people: the run's fields, then
 * every step (each model call and tool call, with its time from the run's
 * start, its duration, and in short what went in and came out), the tasks,
 * gates and answer. A text longer than its column is cut at a word
 * boundary and says so, naming the command that prints it whole (`--full`,
 * or `forum ledger body SEQ`). */
#include "cli/cli.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ledger/fo_buf.h"

#define SHOW_ARGS 60    /* a tool's arguments, in short */
#define SHOW_OUTPUT 100 /* an output, a result, in short */

/* Prints s on one line (whitespace runs as one space), at most max bytes
 * unless full; a longer text is cut after its last whole word (or whole
 * UTF-8 character, for one long word) with " ... [cut: whole with --full
 * or forum ledger body SEQ]". */
static void short_text(const char *s, size_t max, int full, long long seq)
{
    char buf[512] = "";
    size_t n = 0, out = 0, last_space = 0;
    int space = 0, word_end = 0;
    if (!s)
        return;
    if (full) {
        fputs(s, stdout);
        return;
    }
    if (max > sizeof(buf) - 1)
        max = sizeof(buf) - 1;
    for (; s[n]; n++) {
        if (s[n] == ' ' || s[n] == '\n' || s[n] == '\r' || s[n] == '\t') {
            space = out > 0;
            continue;
        }
        if (space) {
            if (out + 2 > max) {
                word_end = 1; /* the cut falls between two words */
                break;
            }
            last_space = out;
            buf[out++] = ' ';
            space = 0;
        }
        if (out + 1 > max)
            break;
        buf[out++] = s[n];
    }
    int cut = s[n] != '\0';
    if (cut && !word_end) {
        if (last_space > 0)
            out = last_space; /* never mid-word */
        else
            while (out > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
                out--, n--; /* one long word: at a character boundary */
    }
    fwrite(buf, 1, out, stdout);
    if (cut)
        printf(" ... [cut: whole with --full or forum ledger body %lld]", seq);
}

static void print_step(const cJSON *st, long long t0, int full)
{
    const char *kind = cli_str_or(st, "kind", "?");
    long long seq = cli_int_or(st, "seq", -1);
    long long start = (cli_int_or(st, "start_ts", t0) - t0) / 1000;
    const cJSON *end = cJSON_GetObjectItemCaseSensitive(st, "end_ts");
    char dur[32] = "running";
    if (end)
        snprintf(dur, sizeof(dur), "%lld ms", cli_int_or(st, "duration_ms", 0));
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(st, "ok");
    printf("  %7lld ms %10s  %-10s %-5s %-16s", start, dur, kind,
           cJSON_IsFalse(ok) ? "FAIL" : "", cli_str_or(st, "name", "?"));
    if (!strcmp(kind, "tool")) {
        printf(" ");
        short_text(cli_str_or(st, "arguments", ""), SHOW_ARGS, full,
                   cli_int_or(st, "start_seq", seq));
    } else if (!strcmp(kind, "model")) {
        const cJSON *tk = cJSON_GetObjectItemCaseSensitive(st, "tokens");
        printf(" %s", cli_str_or(st, "model", ""));
        if (tk)
            printf(", %lld+%lld tokens", cli_int_or(tk, "input", 0),
                   cli_int_or(tk, "output", 0));
    } else if (!strcmp(kind, "gate")) {
        printf(" %s", cli_str_or(st, "decision", ""));
    } else {
        printf(" %s", cli_str_or(st, "reason", cli_str_or(st, "tier", "")));
    }
    printf("  (seq %lld)\n", seq);
    const char *o = cli_str_or(st, "output", NULL);
    if (!o)
        o = cli_str_or(st, "error", NULL);
    if (o && *o) {
        printf("%34s-> ", "");
        short_text(o, SHOW_OUTPUT, full, seq);
        putchar('\n');
    }
}

static void print_steps(const cJSON *out, int full)
{
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(out, "steps");
    long long t0 = cli_int_or(out, "started_ts", 0), models = 0, tools = 0;
    const cJSON *st;
    cJSON_ArrayForEach (st, steps) {
        models += !strcmp(cli_str_or(st, "kind", ""), "model");
        tools += !strcmp(cli_str_or(st, "kind", ""), "tool");
    }
    printf("steps: %lld model call%s, %lld tool call%s\n", models,
           models == 1 ? "" : "s", tools, tools == 1 ? "" : "s");
    printf("  %10s %10s  %-10s %-5s %-16s %s\n", "AT", "TOOK", "KIND", "",
           "NAME", "DETAIL");
    cJSON_ArrayForEach (st, steps)
        print_step(st, t0, full);
}

void cli_run_show_print(const cJSON *out, long long id, int full)
{
    printf("run %lld: %s, %lld entries over %lld ms\n", id,
           cli_str_or(out, "state", "?"), cli_int_or(out, "entries", 0),
           cli_int_or(out, "duration_ms", 0));
    printf("request: %s\n", cli_str_or(out, "request", "(redacted)"));
    if (cli_str_or(out, "session", NULL))
        printf("session: %s\n", cli_str_or(out, "session", ""));
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(out, "route");
    if (rt)
        printf("route: %s (by %s)\n", cli_str_or(rt, "lane", "?"),
               cli_str_or(rt, "by", "?"));
    print_steps(out, full);
    const cJSON *t;
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(out, "tasks");
    if (cJSON_GetArraySize(tasks))
        printf("tasks:\n");
    cJSON_ArrayForEach (t, tasks) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "result");
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(r, "body");
        const char *outp = cli_str_or(res, "output", "");
        printf("  %-6s %-10s %-18s ", cli_str_or(t, "id", "?"),
               cli_str_or(t, "state", "?"), cli_str_or(t, "agent", "?"));
        short_text(
            cli_str_or(t, "instruction", ""), SHOW_OUTPUT, full,
            cli_int_or(cJSON_GetObjectItemCaseSensitive(t, "task"), "seq", -1));
        putchar('\n');
        if (*outp) {
            printf("         -> ");
            short_text(outp, SHOW_OUTPUT, full, cli_int_or(r, "seq", -1));
            putchar('\n');
        }
    }
    cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(out, "gates"))
        printf("  gate: %s (seq %lld)\n", cli_str_or(t, "kind", "?"),
               cli_int_or(t, "seq", -1));
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(out, "answer");
    if (ans)
        printf("answer: %s\n", cli_str_or(ans, "text", ""));
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(out, "intent");
    if (cJSON_IsObject(in) && cli_str_or(in, "covers", NULL)) {
        printf("intent judge: covers %s", cli_str_or(in, "covers", "?"));
        const cJSON *m;
        int i = 0;
        cJSON_ArrayForEach (m, cJSON_GetObjectItemCaseSensitive(in, "missing"))
            if (cJSON_IsString(m))
                printf("%s%s", i++ ? "; " : " (missing: ", m->valuestring);
        printf("%s\n", i ? ")" : "");
    } else if (cJSON_IsObject(in)) {
        printf("intent judge: not run (%s)\n",
               cli_str_or(in, "skipped", "no verdict"));
    }
    const cJSON *cp;
    cJSON_ArrayForEach (cp,
                        cJSON_GetObjectItemCaseSensitive(out, "checkpoints"))
        printf("checkpoint after wave %lld: size %lld, root %s\n",
               cli_int_or(cp, "wave", -1), cli_int_or(cp, "size", -1),
               cli_str_or(cp, "root", "?"));
}
