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

#endif
