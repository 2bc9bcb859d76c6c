/* orch_template: prompt templates with {{name}} placeholders, filled in one
 * pass so text inside a value can never become a placeholder. */
#include "daemon/orch_model.h"

#include <string.h>

#include "ledger/fo_buf.h"

#define NAME_MAX_LEN 64

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

int orch_template_render(const char *tmpl, const struct orch_tmpl_var *vars,
                         size_t n_vars, size_t max, char **out,
                         struct fo_err *err)
{
    struct fo_buf b;
    fo_buf_init(&b, max ? max : FO_BUF_UNLIMITED);
    int rc = FO_OK;
    const char *p = tmpl;
    while (*p) {
        const char *open = strstr(p, "{{");
        if (!open) {
            rc = fo_buf_puts(&b, p);
            break;
        }
        size_t n = 0;
        while (name_char(open[2 + n]) && n <= NAME_MAX_LEN)
            n++;
        int is_ph = n > 0 && n <= NAME_MAX_LEN && open[2 + n] == '}' &&
                    open[3 + n] == '}';
        /* text up to the braces (and one brace when they do not open a
         * placeholder, so "{{{x}}}" is a brace around x) is copied as is */
        rc = fo_buf_append(&b, p, (size_t)(open - p) + (is_ph ? 0 : 1));
        if (rc)
            break;
        if (!is_ph) {
            p = open + 1;
            continue;
        }
        const struct orch_tmpl_var *v = NULL;
        for (size_t i = 0; i < n_vars && !v; i++)
            if (strlen(vars[i].name) == n &&
                memcmp(vars[i].name, open + 2, n) == 0)
                v = &vars[i];
        if (!v) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "template: unknown placeholder {{%.*s}}", (int)n,
                            open + 2);
            goto out;
        }
        rc = fo_buf_puts(&b, v->value ? v->value : "");
        if (rc)
            break;
        p = open + 4 + n;
    }
    if (rc) {
        rc = rc == FO_E_TOO_LARGE
                 ? fo_err_set(err, rc, "template: output over %zu bytes", max)
                 : fo_err_set(err, rc, NULL);
        goto out;
    }
    *out = fo_buf_detach(&b, NULL);
    if (!*out)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
out:
    fo_buf_release(&b);
    return rc;
}
