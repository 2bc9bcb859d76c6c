/* test_docs: docs/HTTP.md and docs/MCP.md are what the generator writes from
 * the handler table, and `forum docs` prints the same. */
#include <string.h>

#include <criterion/criterion.h>

#include "surfaces/docs.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"

static void check_page(const char *which, const char *file)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(surf_docs_markdown(which, &b, &err), FO_OK, "%s", err.msg);
    char path[512];
    snprintf(path, sizeof(path), "%s/docs/%s", FORUM_SRC, file);
    size_t len = 0;
    char *text = tu_read_file(path, &len);
    cr_assert_not_null(text, "docs/%s is missing: run scripts/gen-docs.sh",
                       file);
    cr_assert(len == b.len && memcmp(text, b.data, len) == 0,
              "docs/%s differs from the handler table: run "
              "scripts/gen-docs.sh and commit the result",
              file);
    /* Every method of the table has its section. */
    size_t n;
    const struct surf_method *t = surf_methods(&n);
    for (size_t i = 0; i < n; i++) {
        char head[128];
        snprintf(head, sizeof(head), "### `%s`\n", t[i].name);
        cr_assert_not_null(strstr(text, head), "docs/%s: no section for %s",
                           file, t[i].name);
    }
    free(text);
    fo_buf_release(&b);
}

Test(docs, http_md_is_generated_from_the_table)
{
    check_page("http", "HTTP.md");
}

Test(docs, mcp_md_is_generated_from_the_table)
{
    check_page("mcp", "MCP.md");
}

Test(docs, routes_and_tool_names_appear)
{
    struct fo_buf h, m;
    struct fo_err err;
    fo_buf_init(&h, FO_BUF_UNLIMITED);
    fo_buf_init(&m, FO_BUF_UNLIMITED);
    cr_assert_eq(surf_docs_markdown("http", &h, &err), FO_OK);
    cr_assert_eq(surf_docs_markdown("mcp", &m, &err), FO_OK);
    size_t n;
    const struct surf_method *t = surf_methods(&n);
    for (size_t i = 0; i < n; i++) {
        char route[256];
        snprintf(route, sizeof(route), "- route: `%s %s`", t[i].http_method,
                 t[i].http_path);
        cr_assert_not_null(strstr(h.data, route), "%s", route);
        char tool[128];
        snprintf(tool, sizeof(tool), "- tool: `%s`", t[i].name);
        cr_assert_not_null(strstr(m.data, tool), "%s", tool);
    }
    cr_assert_not_null(strstr(h.data, "Authorization: Bearer"));
    cr_assert_not_null(strstr(m.data, "--admin"));
    fo_buf_release(&h);
    fo_buf_release(&m);
}

Test(docs, refuses_an_unknown_page)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(surf_docs_markdown("rpc", &b, &err), FO_E_INVALID);
    cr_assert_eq(surf_docs_markdown(NULL, &b, &err), FO_E_INVALID);
    fo_buf_release(&b);
}

Test(docs, cli_prints_the_same_pages)
{
    const char *pages[][2] = {{"http", "HTTP.md"}, {"mcp", "MCP.md"}};
    for (size_t i = 0; i < 2; i++) {
        struct tu_run r = tu_forumv(NULL, "docs", pages[i][0], NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        struct fo_buf b;
        struct fo_err err;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        cr_assert_eq(surf_docs_markdown(pages[i][0], &b, &err), FO_OK);
        cr_assert(r.out_len == b.len && !memcmp(r.out, b.data, b.len));
        fo_buf_release(&b);
        tu_run_free(&r);
    }
    struct tu_run r = tu_forumv(NULL, "docs", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    r = tu_forumv(NULL, "docs", "rpc", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    r = tu_forumv(NULL, "docs", "http", "mcp", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    r = tu_forumv(NULL, "docs", "--help", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert_not_null(strstr(r.out, "usage: forum docs"));
    tu_run_free(&r);
}
