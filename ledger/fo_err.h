/* fo_err: the project's one error enum. Every fallible function returns one
 * of these codes (FO_OK = 0) and writes detail into a caller-owned struct
 * fo_err, so the error path never allocates. Codes are never renumbered. */
#ifndef FO_ERR_H
#define FO_ERR_H

#include <stdarg.h>

enum fo_code {
    FO_OK = 0,
    FO_E_NOMEM = 1,         /* out of memory */
    FO_E_INVALID = 2,       /* bad input from the caller */
    FO_E_JSON = 3,          /* input is not strict JSON, or not representable */
    FO_E_TOO_LARGE = 4,     /* a body over the body limit */
    FO_E_NOT_FOUND = 5,     /* no such entry, body, file or route */
    FO_E_REDACTED = 6,      /* the body was redacted */
    FO_E_IO = 7,            /* an I/O, fsync or storage error */
    FO_E_CORRUPT = 8,       /* a damaged or truncated database */
    FO_E_FOREIGN = 9,       /* a file that is not a forum ledger */
    FO_E_TOO_NEW = 10,      /* a ledger of a newer format */
    FO_E_BUSY = 11,         /* the database stayed locked past the timeout */
    FO_E_VERIFY = 12,       /* a verification failed */
    FO_E_USAGE = 13,        /* bad command line */
    FO_E_EXISTS = 14,       /* already exists */
    FO_E_UNAUTHORIZED = 15, /* no or wrong token */
    FO_E_METHOD = 16,       /* wrong HTTP method */
    FO_E_DRAINING = 17,     /* shutting down */
    FO_E_UPSTREAM = 18,     /* a model or upstream answered nonsense */
    FO_E_INTERNAL = 19,     /* a bug */
    FO_E_LOCKED = 20,       /* another daemon holds the ledger */
    FO_E_INPUT_TOO_LARGE = 21, /* a request over the method's input cap */
    FO_E_TIMEOUT = 22,         /* an operation ran past its deadline */
    FO_E_UNAVAILABLE = 23,     /* an upstream could not be reached */
    FO_E_BUDGET = 24,          /* a run budget was spent */
    FO_E_NOT_A_RUN = 25,       /* an entry that is not a run's request */
    FO_E_RUN_ELSEWHERE = 26,   /* a run this process does not run */
    /* The ledger's database, WAL or shared-memory file was deleted,
     * replaced or truncated under an open handle: the handle refuses every
     * later write (sticky) until it is closed; a daemon until restarted. */
    FO_E_STORAGE_MOVED = 27,
    FO_E_NO_GATE = 28,          /* no gate waits at that run and wave */
    FO_E_GATE_DECIDED = 29,     /* the gate was decided already */
    FO_E_MEDIA_TYPE = 30,       /* a write not sent as application/json */
    FO_E_FORBIDDEN_ORIGIN = 31, /* a cross-site request (Origin) */
    FO_E_MISDIRECTED = 32,      /* a Host this server does not answer as */
    /* The store failed to write or read (a full disk, a database gone):
     * writes are refused, and /health fails, until a probe succeeds. */
    FO_E_STORE_DOWN = 33,
    FO_E__COUNT
};

#define FO_ERR_MSG_MAX 256

struct fo_err {
    int code;
    char msg[FO_ERR_MSG_MAX];
};

/* The stable snake_case name of a code, as it goes on the wire ("not_found").
 * Unknown codes give "internal". */
const char *fo_code_name(int code);

/* A short lower-case sentence for a code ("no such entry"). */
const char *fo_code_message(int code);

/* The CLI exit class of a code: 0 ok, 1 verification failed or
 * not found, 2 usage or bad input, 3 I/O or storage error. */
int fo_code_exit(int code);

/* Sets err (when not NULL) to code and a formatted message; returns code so a
 * caller may write `return fo_err_set(err, FO_E_INVALID, "seq %d", n);`.
 * With fmt NULL the code's own message is used. Truncates long messages. */
int fo_err_set(struct fo_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int fo_err_setv(struct fo_err *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Prefixes err->msg with "prefix: " (for adding context on the way up). */
void fo_err_prefix(struct fo_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears err to FO_OK and an empty message. */
void fo_err_clear(struct fo_err *err);

#endif
