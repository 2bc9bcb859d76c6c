/* banned.h: functions this project never calls. Included last by every .c
 * file through fo_buf.h; a use becomes a compile error naming the reason. */
#ifndef FO_BANNED_H
#define FO_BANNED_H

/* The headers that declare (or define inline) the banned functions come
 * first, so their own definitions are not rewritten by the macros below. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FO_BANNED(func) sorry_##func##_is_banned_see_STYLE_md

#undef strcpy
#define strcpy(x, y) FO_BANNED(strcpy)
#undef strcat
#define strcat(x, y) FO_BANNED(strcat)
#undef sprintf
#define sprintf(...) FO_BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) FO_BANNED(vsprintf)
#undef strtok
#define strtok(x, y) FO_BANNED(strtok)
#undef atoi
#define atoi(x) FO_BANNED(atoi)
#undef atol
#define atol(x) FO_BANNED(atol)
#undef gets
#define gets(x) FO_BANNED(gets)

#endif
