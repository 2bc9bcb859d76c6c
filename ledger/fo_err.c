/* fo_err: the table behind the project's error codes. */
#include "ledger/fo_err.h"

#include <stdio.h>
#include <string.h>

struct code_info {
    const char *name;
    const char *message;
    int exit_class;
};

static const struct code_info codes[FO_E__COUNT] = {
    [FO_OK] = {"ok", "ok", 0},
    [FO_E_NOMEM] = {"out_of_memory", "out of memory", 3},
    [FO_E_INVALID] = {"invalid_input", "invalid input", 2},
    [FO_E_JSON] = {"invalid_json", "invalid JSON", 2},
    [FO_E_TOO_LARGE] = {"body_too_large", "body over the size limit", 2},
    [FO_E_NOT_FOUND] = {"not_found", "not found", 1},
    [FO_E_REDACTED] = {"redacted", "the body was redacted", 1},
    [FO_E_IO] = {"io_error", "I/O or storage error", 3},
    [FO_E_CORRUPT] = {"corrupt", "the database is damaged", 3},
    [FO_E_FOREIGN] = {"foreign_database", "not a forum ledger", 3},
    [FO_E_TOO_NEW] = {"newer_format", "ledger written by a newer forum", 3},
    [FO_E_BUSY] = {"busy", "the database is busy", 3},
    [FO_E_VERIFY] = {"verification_failed", "verification failed", 1},
    [FO_E_USAGE] = {"usage", "bad usage", 2},
    [FO_E_EXISTS] = {"exists", "already exists", 2},
    [FO_E_UNAUTHORIZED] = {"unauthorized", "missing or wrong token", 2},
    [FO_E_METHOD] = {"method_not_allowed", "method not allowed", 2},
    [FO_E_DRAINING] = {"draining", "shutting down", 3},
    [FO_E_UPSTREAM] = {"bad_upstream", "upstream answered nonsense", 3},
    [FO_E_INTERNAL] = {"internal", "internal error", 3},
    [FO_E_LOCKED] = {"ledger_locked", "another daemon holds the ledger", 3},
    [FO_E_INPUT_TOO_LARGE] = {"input_too_large", "input over the size limit",
                              2},
    [FO_E_TIMEOUT] = {"timeout", "timed out", 3},
    [FO_E_UNAVAILABLE] = {"unavailable", "upstream unavailable", 3},
    [FO_E_BUDGET] = {"budget_exhausted", "run budget exhausted", 1},
    [FO_E_NOT_A_RUN] = {"not_a_run", "not a run", 1},
    [FO_E_RUN_ELSEWHERE] = {"run_elsewhere",
                            "the run is not in progress in this process", 1},
    [FO_E_STORAGE_MOVED] = {"storage_moved",
                            "the ledger's files were moved, replaced or "
                            "truncated under this process; restart it",
                            3},
    [FO_E_NO_GATE] = {"no_gate", "no gate waits for a decision there", 2},
    [FO_E_GATE_DECIDED] = {"gate_decided", "the gate was decided already", 2},
    [FO_E_MEDIA_TYPE] = {"unsupported_media_type",
                         "a write must be Content-Type: application/json", 2},
    [FO_E_FORBIDDEN_ORIGIN] = {"forbidden_origin",
                               "a cross-site request is refused", 2},
    [FO_E_MISDIRECTED] = {"misdirected_request",
                          "a Host this daemon does not answer as", 2},
    [FO_E_STORE_DOWN] = {"store_down",
                         "the ledger's store cannot be written or read", 3},
};

static const struct code_info *info(int code)
{
    if (code < 0 || code >= FO_E__COUNT || !codes[code].name)
        return &codes[FO_E_INTERNAL];
    return &codes[code];
}

const char *fo_code_name(int code)
{
    return info(code)->name;
}

const char *fo_code_message(int code)
{
    return info(code)->message;
}

int fo_code_exit(int code)
{
    return code == FO_OK ? 0 : info(code)->exit_class;
}

/* A message cut by the buffer may end inside a UTF-8 sequence: drop the
 * partial character so the message stays valid UTF-8 (it goes on the wire
 * as JSON). */
static void trim_partial_utf8(char *s)
{
    size_t len = strlen(s);
    size_t i = len;
    /* back over continuation bytes to the lead byte of the last char */
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    if (len - (i - 1) < need)
        s[i - 1] = '\0';
}

int fo_err_setv(struct fo_err *err, int code, const char *fmt, va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    if (!fmt) {
        snprintf(err->msg, sizeof(err->msg), "%s", fo_code_message(code));
        return code;
    }
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    if (n < 0)
        snprintf(err->msg, sizeof(err->msg), "%s", fo_code_message(code));
    else if ((size_t)n >= sizeof(err->msg))
        trim_partial_utf8(err->msg);
    return code;
}

int fo_err_set(struct fo_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fo_err_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void fo_err_prefix(struct fo_err *err, const char *fmt, ...)
{
    if (!err)
        return;
    char pre[FO_ERR_MSG_MAX], old[FO_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(pre, sizeof(pre), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    memcpy(old, err->msg, sizeof(old));
    if (snprintf(err->msg, sizeof(err->msg), "%s: %s", pre, old) < 0)
        memcpy(err->msg, old, sizeof(old));
}

void fo_err_clear(struct fo_err *err)
{
    if (!err)
        return;
    err->code = FO_OK;
    err->msg[0] = '\0';
}
