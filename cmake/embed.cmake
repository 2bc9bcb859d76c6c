# Turns a data file into a C source defining a NUL-terminated char array.
# The file must be ASCII (bytes over 0x7f do not fit a char initializer:
# the build stops with an overflow error; write \uXXXX escapes instead).
file(READ ${IN} HEX HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," BYTES "${HEX}")
file(WRITE ${OUT} "/* generated from ${IN}; do not edit */\n"
  "#include <stddef.h>\n"
  "extern const char ${SYM}[];\nextern const size_t ${SYM}_len;\n"
  "const char ${SYM}[] = {${BYTES} 0x00};\n"
  "const size_t ${SYM}_len = sizeof(${SYM}) - 1;\n")
