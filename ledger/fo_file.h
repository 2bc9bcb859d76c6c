/* fo_file: files made once and never half-seen (keys, tokens). */
#ifndef FO_FILE_H
#define FO_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "ledger/fo_err.h"

/* Creates path (in directory dir) holding data + "\n" atomically: a temp
 * file made with O_EXCL and mode, written and fsynced, then link()ed into
 * place and the directory fsynced, so readers never see a partial file and
 * two processes racing keep one. FO_E_EXISTS when path already exists (the
 * caller reads it then); FO_E_IO otherwise. May block on fsync. */
int fo_file_create(const char *dir, const char *path, const void *data,
                   size_t len, mode_t mode, struct fo_err *err);

/* Refuses a secret file whose permissions let anyone but its owner in:
 * fstat()s the open descriptor fd (of path, named in the message) and gives
 * FO_E_INVALID with the fix (`chmod 600 path`) when its mode grants any
 * permission to group or others; FO_E_IO when fstat fails. */
int fo_file_check_private(int fd, const char *path, struct fo_err *err);

/* Removes what fo_file_create leaves behind when killed mid-way: files in
 * dir named "<name>.tmp-<pid>-<16 hex>" whose process is gone (a temp file
 * of a live process is still being made). Only that exact pattern is
 * touched. Best effort: returns how many it removed. */
int fo_file_clean_temps(const char *dir, const char *name);

/* The longest data dir path forum takes. Every file forum names in a data
 * dir is the dir plus at most a few hundred bytes, built into buffers of
 * 4096 (PATH_MAX): with the dir checked once where it comes in (the CLI,
 * ledger_open, the daemon's configuration), no such path is ever cut. */
#define FO_DIR_MAX 3072

/* FO_OK, or FO_E_INVALID naming the limit when dir is longer than
 * FO_DIR_MAX bytes (or empty). */
int fo_dir_check(const char *dir, struct fo_err *err);

#ifdef FORUM_TEST_SEAMS
/* Test builds: while the file path names exists (path may be NULL: no
 * wait), the caller waits, as on a slow store, having made PATH.held; it
 * gives up after 30 s, making PATH.expired. The read seams of the tests
 * (FORUM_TEST_EVENTS_HOLD, FORUM_TEST_SESSION_READ_HOLD,
 * FORUM_TEST_RESUME_HOLD, FORUM_TEST_HEAD_HOLD). */
void fo_test_hold(const char *path);
#endif

#endif
