/* orch_types_int: the small helpers shared by the files below the run
 * engine (the roster, router, planner, executors, model client and tools:
 * see daemon/orch_types.h) and by the orchestrator above them, and nothing
 * else. daemon/orch_int.h includes it. */
#ifndef ORCH_TYPES_INT_H
#define ORCH_TYPES_INT_H

#include <stddef.h>

#include "daemon/orch_types.h"
#include "ledger/fo_buf.h"

/* malloc'd copy of s, NULL when out of memory. */
char *orch_strdup(const char *s);

/* 1 when s is 1..max bytes of [a-z0-9]. */
int orch_token_valid(const char *s, size_t max);

/* 1 when s is 1..max bytes without control characters. */
int orch_name_valid(const char *s, size_t max);

/* Appends len bytes to out as valid UTF-8: each byte that does not start a
 * well-formed sequence, and each NUL, becomes U+FFFD. FO_OK, or the
 * buffer's FO_E_TOO_LARGE / FO_E_NOMEM. */
int orch_utf8_clean(const char *in, size_t len, struct fo_buf *out);

/* The longest prefix of s (len bytes of UTF-8) of at most max bytes that
 * does not cut a character. */
size_t orch_utf8_prefix(const char *s, size_t len, size_t max);

/* Tests only: stops watching the job's child through its pidfd, so its
 * exit is found by polling (waitid WNOHANG every 50 ms) as on a kernel
 * without pidfd_open. FO_OK, or FO_E_NOMEM (the job then cannot end). */
int orch_job_drop_pidfd(struct orch_job *j);

#endif
