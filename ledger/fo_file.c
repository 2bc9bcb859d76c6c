/* fo_file: atomic creation of small files (see fo_file.h). */
#include "ledger/fo_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "ledger/fo_buf.h"

int fo_file_create(const char *dir, const char *path, const void *data,
                   size_t len, mode_t mode, struct fo_err *err)
{
    char tmp[4096];
    unsigned char rnd[8];
    char rhex[17];
    if (RAND_bytes(rnd, sizeof(rnd)) != 1)
        return fo_err_set(err, FO_E_INTERNAL, "no randomness");
    fo_hex(rnd, sizeof(rnd), rhex);
    int n =
        snprintf(tmp, sizeof(tmp), "%s.tmp-%ld-%s", path, (long)getpid(), rhex);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
    int rc = FO_OK;
    if (fchmod(fd, mode) != 0) /* the umask must not widen nor narrow it */
        rc = fo_err_set(err, FO_E_IO, "%s: chmod: %s", tmp, strerror(errno));
    size_t off = 0;
    while (!rc && off <= len) {
        const char *p = off < len ? (const char *)data + off : "\n";
        size_t want = off < len ? len - off : 1;
        ssize_t w = write(fd, p, want);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc =
                fo_err_set(err, FO_E_IO, "%s: write: %s", tmp, strerror(errno));
            break;
        }
        off += (size_t)w;
    }
    if (!rc && fsync(fd) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = fo_err_set(err, FO_E_IO, "%s: close: %s", tmp, strerror(errno));
    if (!rc && link(tmp, path) != 0) {
        if (errno == EEXIST)
            rc = fo_err_set(err, FO_E_EXISTS, "%s: exists", path);
        else
            rc =
                fo_err_set(err, FO_E_IO, "%s: link: %s", path, strerror(errno));
    }
    unlink(tmp);
    if (!rc) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) != 0)
                rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", dir,
                                strerror(errno));
            close(dfd);
        }
    }
    return rc;
}

int fo_file_check_private(int fd, const char *path, struct fo_err *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return fo_err_set(err, FO_E_IO, "%s: fstat: %s", path, strerror(errno));
    if (st.st_mode & 077)
        return fo_err_set(err, FO_E_INVALID,
                          "%s: mode %04o lets others read it; run "
                          "`chmod 600 %s`",
                          path, (unsigned)(st.st_mode & 07777), path);
    return FO_OK;
}

/* The pid of a temp file name "<name>.tmp-<pid>-<16 hex>", or -1. */
static long temp_pid(const char *ent, const char *name)
{
    size_t nl = strlen(name);
    if (strncmp(ent, name, nl) != 0 || strncmp(ent + nl, ".tmp-", 5) != 0)
        return -1;
    const char *p = ent + nl + 5;
    if (*p < '1' || *p > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (errno || pid <= 0 || *end != '-')
        return -1;
    size_t hex = strspn(end + 1, "0123456789abcdef");
    if (hex != 16 || end[17] != '\0')
        return -1;
    return pid;
}

int fo_file_clean_temps(const char *dir, const char *name)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = temp_pid(e->d_name, name);
        if (pid < 0 || (pid_t)pid != pid)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its maker may still be writing it */
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            n++;
    }
    closedir(d);
    return n;
}

int fo_dir_check(const char *dir, struct fo_err *err)
{
    size_t n = dir ? strlen(dir) : 0;
    if (n == 0)
        return fo_err_set(err, FO_E_INVALID, "the data dir is empty");
    if (n > FO_DIR_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "the data dir's path is %zu bytes; at most %d "
                          "(the files in it must fit PATH_MAX)",
                          n, FO_DIR_MAX);
    return FO_OK;
}

#ifdef FORUM_TEST_SEAMS
void fo_test_hold(const char *path)
{
    struct stat st;
    char mark[600];
    if (!path || stat(path, &st) != 0)
        return;
    snprintf(mark, sizeof(mark), "%s.held", path);
    FILE *f = fopen(mark, "w");
    if (f)
        fclose(f);
    for (int i = 0; i < 3000 && stat(path, &st) == 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    if (stat(path, &st) == 0) {
        snprintf(mark, sizeof(mark), "%s.expired", path);
        if ((f = fopen(mark, "w")) != NULL)
            fclose(f);
    }
}
#endif
