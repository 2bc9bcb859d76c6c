/* cli_docs: `forum docs http|mcp|man|completion`: docs/HTTP.md and
 * docs/MCP.md as generated from the handler table (scripts/gen-docs.sh
 * writes them), the man page forum(1) from the commands' own help texts,
 * and shell completions from the command table (the build installs
 * both). */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "ledger/fo_version.h"

#include "surfaces/docs.h"

static const char docs_usage[] =
    "usage: forum docs http|mcp|man|completion bash|zsh\n"
    "\n"
    "Prints the reference page generated from the handler table: http is\n"
    "docs/HTTP.md (routes), mcp is docs/MCP.md (tools). scripts/gen-docs.sh\n"
    "writes both into docs/. man prints the man page forum(1) (roff) made\n"
    "of every command's --help; completion prints a bash or zsh completion\n"
    "script for the commands and their subcommands. `cmake --install`\n"
    "installs both.\n"
    "example:\n"
    "  forum docs man | man -l -\n";

/* What a command prints for --help (argv NULL-terminated), captured. */
static int help_of(struct cli *c, const struct cli_command *k, const char *sub,
                   struct fo_buf *out)
{
    char a0[64], a1[64], a2[] = "--help";
    snprintf(a0, sizeof(a0), "%s", k->name);
    snprintf(a1, sizeof(a1), "%s", sub ? sub : "--help");
    char *argv[] = {a0, a1, sub ? a2 : NULL, NULL};
    FILE *t = tmpfile();
    if (!t)
        return -1;
    fflush(stdout);
    int saved = dup(1);
    if (saved < 0 || dup2(fileno(t), 1) < 0) {
        fclose(t);
        return -1;
    }
    struct cli sc = *c;
    sc.json = 0;
    if (k->alias) {
        char l0[] = "ledger", l1[16], l2[] = "--help";
        snprintf(l1, sizeof(l1), "%s", k->alias);
        char *lv[] = {l0, l1, l2, NULL};
        cli_ledger(&sc, 3, lv);
    } else {
        k->fn(&sc, sub ? 3 : 2, argv);
    }
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    rewind(t);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), t)) > 0)
        if (fo_buf_append(out, buf, n)) {
            fclose(t);
            return -1;
        }
    fclose(t);
    return 0;
}

/* The options of `forum NAME [SUB]` from its table (cli_opt.h), one a line
 * ("--limit N<TAB>its help"), into out: nothing for a command that does not
 * parse through a table (it refuses the flag as unknown, before doing anything;
 * what it prints is thrown away). Returns 1 when a table was listed, 0 when
 * not, -1 on an error. */
static int options_of(struct cli *c, const struct cli_command *k,
                      const char *sub, struct fo_buf *out)
{
    char a0[64], a1[64], a2[] = CLI_OPT_LIST_FLAG;
    snprintf(a0, sizeof(a0), "%s", k->alias ? "ledger" : k->name);
    snprintf(a1, sizeof(a1), "%s",
             k->alias ? k->alias
             : sub    ? sub
                      : CLI_OPT_LIST_FLAG);
    char *argv[] = {a0, a1, a2, NULL};
    int argc = k->alias || sub ? 3 : 2;
    fflush(stdout);
    fflush(stderr);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int so = dup(1), se = dup(2);
    if (null < 0 || so < 0 || se < 0 || dup2(null, 1) < 0 ||
        dup2(null, 2) < 0) {
        if (so >= 0)
            dup2(so, 1), close(so);
        if (se >= 0)
            dup2(se, 2), close(se);
        if (null >= 0)
            close(null);
        return -1;
    }
    struct cli sc = *c;
    sc.json = 0;
    cli_opt_sink = out;
    cli_opt_listed = 0;
    (k->alias ? cli_ledger : k->fn)(&sc, argc, argv);
    cli_opt_sink = NULL;
    int listed = cli_opt_listed;
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    close(null);
    return listed;
}

int cli_docs_untabled(struct cli *c, struct fo_buf *out)
{
    struct fo_buf o;
    fo_buf_init(&o, FO_BUF_UNLIMITED);
    int rc = 0;
    for (size_t i = 0; !rc && i < cli_n_commands; i++) {
        const struct cli_command *k = &cli_commands[i];
        const char *s = k->subs;
        if (!s) {
            fo_buf_reset(&o);
            int t = options_of(c, k, NULL, &o);
            rc = t < 0 ? -1 : !t ? fo_buf_printf(out, "%s\n", k->name) : 0;
        }
        while (!rc && s && *s) {
            size_t w = strcspn(s, " ");
            char sub[32];
            snprintf(sub, sizeof(sub), "%.*s", (int)w, s);
            fo_buf_reset(&o);
            int t = options_of(c, k, sub, &o);
            rc = t < 0 ? -1
                 : !t  ? fo_buf_printf(out, "%s %s\n", k->name, sub)
                       : 0;
            s += w;
            while (*s == ' ')
                s++;
        }
    }
    fo_buf_release(&o);
    return rc;
}

/* The options of `forum NAME [SUB]` as flag names only, space-separated
 * ("--limit --from"), into out (reset first). */
static int option_names(struct cli *c, const struct cli_command *k,
                        const char *sub, struct fo_buf *out)
{
    struct fo_buf o;
    fo_buf_init(&o, FO_BUF_UNLIMITED);
    fo_buf_reset(out);
    int rc = options_of(c, k, sub, &o) < 0 ? -1 : 0;
    for (size_t i = 0; !rc && i < o.len;) {
        size_t w = strcspn(o.data + i, " \t\n");
        rc = fo_buf_printf(out, "%s%.*s", out->len ? " " : "", (int)w,
                           o.data + i);
        i += strcspn(o.data + i, "\n") + 1;
    }
    fo_buf_release(&o);
    return rc;
}

/* text as roff lines in a no-fill block: backslashes doubled, a line
 * that starts with . or ' protected. */
static int roff_block(struct fo_buf *b, const char *text, size_t len)
{
    int rc = fo_buf_puts(b, ".nf\n");
    int bol = 1;
    for (size_t i = 0; !rc && i < len; i++) {
        char ch = text[i];
        if (bol && (ch == '.' || ch == '\''))
            rc = fo_buf_puts(b, "\\&");
        if (!rc)
            rc = ch == '\\' ? fo_buf_puts(b, "\\e") : fo_buf_putc(b, ch);
        bol = ch == '\n';
    }
    if (!rc && !bol)
        rc = fo_buf_putc(b, '\n');
    return rc ? rc : fo_buf_puts(b, ".fi\n");
}

/* The options of `forum NAME [SUB]` from its table, as a block after its
 * help; with head, under a heading of its own (a subcommand whose help is
 * its command's), unless they are the command's own, listed already
 * (import's formats). Nothing for a command without a table. */
static int man_options(struct cli *c, struct fo_buf *b,
                       const struct cli_command *k, const char *sub, int head)
{
    struct fo_buf o, own;
    fo_buf_init(&o, FO_BUF_UNLIMITED);
    fo_buf_init(&own, FO_BUF_UNLIMITED);
    struct fo_buf t; /* "  --limit N          its help" */
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    int rc = options_of(c, k, sub, &o) < 0 ? -1 : 0;
    if (!rc && head && o.len)
        rc = options_of(c, k, NULL, &own) < 0 ? -1 : 0;
    if (!rc && own.len == o.len && o.len && !memcmp(own.data, o.data, o.len))
        fo_buf_reset(&o); /* the command's own, listed with its help */
    fo_buf_release(&own);
    for (size_t i = 0; !rc && i < o.len;) {
        size_t tab = strcspn(o.data + i, "\t\n");
        size_t end = tab + strcspn(o.data + i + tab, "\n");
        const char *h = o.data + i + tab + (o.data[i + tab] == '\t');
        int hn = (int)(o.data + i + end - h);
        if (tab < 19)
            rc = fo_buf_printf(&t, "  %-19.*s%.*s\n", (int)tab, o.data + i, hn,
                               h);
        else
            rc = fo_buf_printf(&t, "  %.*s\n%21s%.*s\n", (int)tab, o.data + i,
                               "", hn, h);
        i += end + 1;
    }
    if (!rc && t.len && head)
        rc = fo_buf_printf(b, ".SS %s %s\n", k->name, sub);
    if (!rc && t.len)
        rc = fo_buf_puts(b, ".PP\nOptions (from its table):\n");
    if (!rc && t.len)
        rc = roff_block(b, t.data, t.len);
    fo_buf_release(&t);
    fo_buf_release(&o);
    return rc < 0 ? -1 : rc;
}

static int man_page(struct cli *c, struct fo_buf *b)
{
    int rc = fo_buf_printf(b,
                           ".TH FORUM 1 \"\" \"forum %s\" \"User Commands\"\n"
                           ".SH NAME\n"
                           "forum \\- orchestrates AI agents and witnesses "
                           "every step in a verifiable ledger\n"
                           ".SH SYNOPSIS\n"
                           ".B forum\n"
                           "[\\fB\\-\\-ledger\\fR \\fIDIR\\fR] "
                           "[\\fB\\-\\-json\\fR] \\fIcommand\\fR "
                           "[\\fIargs\\fR]\n"
                           ".SH DESCRIPTION\n",
                           FO_VERSION);
    if (!rc)
        rc = roff_block(b, cli_usage_text, strlen(cli_usage_text));
    if (!rc)
        rc = fo_buf_puts(b, ".SH COMMANDS\n");
    for (size_t i = 0; !rc && i < cli_n_commands; i++) {
        const struct cli_command *k = &cli_commands[i];
        struct fo_buf h;
        fo_buf_init(&h, FO_BUF_UNLIMITED);
        rc = fo_buf_printf(b, ".SS %s\n", k->name);
        if (!rc && help_of(c, k, NULL, &h) == 0 && h.len)
            rc = roff_block(b, h.data, h.len);
        if (!rc) /* the command's own (serve's, before its subcommands') */
            rc = man_options(c, b, k, NULL, 0);
        /* the subcommands' own pages, where they have them */
        const char *s = k->subs;
        while (!rc && s && *s) {
            size_t w = strcspn(s, " ");
            char sub[32];
            snprintf(sub, sizeof(sub), "%.*s", (int)w, s);
            struct fo_buf sh;
            fo_buf_init(&sh, FO_BUF_UNLIMITED);
            if (strcmp(k->name, "docs") != 0 && help_of(c, k, sub, &sh) == 0 &&
                sh.len &&
                (h.len != sh.len || memcmp(h.data, sh.data, h.len) != 0)) {
                rc = fo_buf_printf(b, ".SS %s %s\n", k->name, sub);
                if (!rc)
                    rc = roff_block(b, sh.data, sh.len);
                if (!rc)
                    rc = man_options(c, b, k, sub, 0);
            } else if (strcmp(k->name, "docs") != 0) {
                rc = man_options(c, b, k, sub, 1);
            }
            fo_buf_release(&sh);
            s += w;
            while (*s == ' ')
                s++;
        }
        fo_buf_release(&h);
    }
    if (!rc)
        rc = fo_buf_puts(b, ".SH FILES\n"
                            "The data dir (\\fB\\-\\-ledger\\fR, "
                            "FORUM_LEDGER, ./forum-ledger) holds ledger.db, "
                            "the token, the checkpoint key and forum.json.\n"
                            ".SH SEE ALSO\n"
                            "The documents installed in share/doc/forum: "
                            "OPERATIONS.md, HTTP.md, MCP.md, LEDGER.md.\n");
    return rc;
}

/* The case arms that complete the options of every command (and
 * subcommand) that parses through a table: bash `"ledger show") w="..."
 * ;;`, zsh `"ledger show") cmds=(...) ;;`; a command with no subcommands
 * matches with any word after it ("verify "*). */
/* One case arm: `"name sub")` for a subcommand, `"name "*)` for the
 * command's own options (any word after it), completing names. */
static int arm(struct fo_buf *b, int bash, const char *name, const char *sub,
               const struct fo_buf *names)
{
    return fo_buf_printf(b, "    \"%s %s\"%s) %s%.*s%s ;;\n", name,
                         sub ? sub : "", sub ? "" : "*",
                         bash ? "w=\"" : "cmds=(", (int)names->len,
                         names->data ? names->data : "", bash ? "\"" : ")");
}

static int option_arms(struct cli *c, int bash, struct fo_buf *b)
{
    struct fo_buf names, own;
    fo_buf_init(&names, FO_BUF_UNLIMITED);
    fo_buf_init(&own, FO_BUF_UNLIMITED);
    int rc = 0;
    for (size_t i = 0; !rc && i < cli_n_commands; i++) {
        const struct cli_command *k = &cli_commands[i];
        if (!strcmp(k->name, "docs"))
            continue;
        rc = option_names(c, k, NULL, &own);
        /* the subcommands' arms come first: a command with options of its
         * own (serve) ends in a catch-all arm, so each subcommand needs an
         * arm before it, empty or not */
        const char *s = k->subs;
        while (!rc && s && *s) {
            size_t w = strcspn(s, " ");
            char sub[32];
            snprintf(sub, sizeof(sub), "%.*s", (int)w, s);
            rc = option_names(c, k, sub, &names);
            if (!rc && (names.len || own.len))
                rc = arm(b, bash, k->name, sub, &names);
            s += w;
            while (*s == ' ')
                s++;
        }
        if (!rc && own.len)
            rc = arm(b, bash, k->name, NULL, &own);
    }
    fo_buf_release(&names);
    fo_buf_release(&own);
    return rc;
}

static int completion(struct cli *c, const char *shell, struct fo_buf *b)
{
    int bash = !strcmp(shell, "bash");
    int rc = bash ? fo_buf_puts(b, "# bash completion for forum (generated by "
                                   "`forum docs completion bash`)\n"
                                   "_forum() {\n"
                                   "  local cur=${COMP_WORDS[COMP_CWORD]} "
                                   "cmd=\"\" sub=\"\" w=\"\" i\n"
                                   "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
                                   "    case ${COMP_WORDS[i]} in\n"
                                   "      --ledger) ((i++)) ;;\n"
                                   "      -*) ;;\n"
                                   "      *) if [ -z \"$cmd\" ]; then "
                                   "cmd=${COMP_WORDS[i]}; else "
                                   "sub=${COMP_WORDS[i]}; break; fi ;;\n"
                                   "    esac\n"
                                   "  done\n"
                                   "  # the options of a command's table\n"
                                   "  case \"$cmd $sub\" in\n")
                  : fo_buf_puts(b, "#compdef forum\n"
                                   "# zsh completion for forum (generated by "
                                   "`forum docs completion zsh`)\n"
                                   "local -a cmds\n"
                                   "if (( CURRENT > 2 )) && [[ $PREFIX == -* "
                                   "]]; then\n"
                                   "  # the options of a command's table\n"
                                   "  case \"$words[2] $words[3]\" in\n");
    if (!rc)
        rc = option_arms(c, bash, b);
    if (!rc)
        rc = bash ? fo_buf_puts(b, "  esac\n"
                                   "  if [ -n \"$w\" ] && [[ $cur == -* ]]; "
                                   "then\n"
                                   "    COMPREPLY=($(compgen -W \"$w --help\" "
                                   "-- \"$cur\"))\n"
                                   "    return\n"
                                   "  fi\n"
                                   "  [ -n \"$sub\" ] && cmd=\"$cmd $sub\"\n"
                                   "  case $cmd in\n")
                  : fo_buf_puts(b, "    *) cmds=() ;;\n"
                                   "  esac\n"
                                   "  if (( ${#cmds} )); then\n"
                                   "    _describe option cmds\n"
                                   "    return\n"
                                   "  fi\n"
                                   "fi\n"
                                   "if (( CURRENT == 2 )); then\n"
                                   "  cmds=(");
    if (bash) {
        for (size_t i = 0; !rc && i < cli_n_commands; i++)
            if (cli_commands[i].subs)
                rc = fo_buf_printf(b,
                                   "    %s) COMPREPLY=($(compgen -W \"%s "
                                   "--help\" -- \"$cur\")) ;;\n",
                                   cli_commands[i].name, cli_commands[i].subs);
        if (!rc)
            rc = fo_buf_puts(b, "    \"\") COMPREPLY=($(compgen -W \"");
        for (size_t i = 0; !rc && i < cli_n_commands; i++)
            rc = fo_buf_printf(b, "%s ", cli_commands[i].name);
        if (!rc)
            rc = fo_buf_puts(b, "--ledger --json --help\" -- \"$cur\")) ;;\n"
                                "    *) COMPREPLY=($(compgen -f -W "
                                "\"--help --json\" -- \"$cur\")) ;;\n"
                                "  esac\n"
                                "}\n"
                                "complete -F _forum forum\n");
        return rc;
    }
    for (size_t i = 0; !rc && i < cli_n_commands; i++)
        rc = fo_buf_printf(b, "%s%s", i ? " " : "", cli_commands[i].name);
    if (!rc)
        rc = fo_buf_puts(b, ")\n  _describe command cmds\n"
                            "elif (( CURRENT == 3 )); then\n"
                            "  case $words[2] in\n");
    for (size_t i = 0; !rc && i < cli_n_commands; i++)
        if (cli_commands[i].subs)
            rc = fo_buf_printf(b, "    %s) cmds=(%s) ;;\n",
                               cli_commands[i].name, cli_commands[i].subs);
    if (!rc)
        rc = fo_buf_puts(b, "    *) _files; return ;;\n"
                            "  esac\n"
                            "  _describe subcommand cmds\n"
                            "else\n"
                            "  _files\n"
                            "fi\n");
    return rc;
}

int cli_docs(struct cli *c, int argc, char **argv)
{
    static const char *const pages[] = {"http", "mcp", "man", "completion"};
    const struct cli_opt none[] = {CLI_OPT_END}; /* no page takes options */
    const char *which = argc > 1 ? argv[1] : NULL, *shell = NULL;
    size_t k = 0;
    while (which && k < 4 && strcmp(which, pages[k]))
        k++;
    if (!which || k == 4) {
        /* no page, or not one: help and unknown options as any command */
        const char *pos[1];
        int npos = 0;
        int pe = cli_parse(c, "docs", argc, argv, none, pos, 1, &npos);
        if (pe)
            return pe == CLI_PARSE_HELP ? cli_help(docs_usage) : pe;
        if (!npos)
            return cli_usage_error(c, "docs: which page? http, mcp, man or "
                                      "completion");
        const char *near = cli_closest(pos[0], pages, 4);
        return cli_usage_error(c,
                               "docs: %s: not a page (http, mcp, man or "
                               "completion)%s%s%s",
                               pos[0], near ? "; did you mean " : "",
                               near ? near : "", near ? "?" : "");
    }
    /* the page's own (empty) table; completion takes the shell */
    char name[32];
    snprintf(name, sizeof(name), "docs %s", which);
    int is_comp = k == 3, npos = 0;
    int pe =
        cli_parse(c, name, argc - 1, argv + 1, none, &shell, is_comp, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(docs_usage) : pe;
    if (is_comp &&
        (!shell || (strcmp(shell, "bash") != 0 && strcmp(shell, "zsh") != 0)))
        return cli_usage_error(c, "docs completion: bash or zsh");
    struct fo_buf out;
    struct fo_err err;
    fo_err_clear(&err);
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    int rc = !strcmp(which, "man") ? man_page(c, &out)
             : shell               ? completion(c, shell, &out)
                                   : surf_docs_markdown(which, &out, &err);
    if (rc && !err.code)
        rc = fo_err_set(&err, FO_E_NOMEM, NULL);
    if (rc == FO_OK && (fwrite(out.data, 1, out.len, stdout) != out.len ||
                        fflush(stdout) != 0))
        rc = fo_err_set(&err, FO_E_IO, "docs: cannot write the output");
    fo_buf_release(&out);
    return rc ? cli_fail(c, &err) : 0;
}
