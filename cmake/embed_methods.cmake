# Turns surfaces/methods/*.json (DIR) into one C source (OUT): the method
# table's data, which surfaces/table.c parses and checks field by field at
# start. Checked here too, so a broken file stops the build with its path:
# it must be ASCII (write \uXXXX escapes), parse as JSON, and name itself
# ("name" is the file's base name).
file(GLOB FILES ${DIR}/*.json)
list(SORT FILES)
set(body "")
set(rows "")
set(i 0)
foreach(f ${FILES})
  get_filename_component(base ${f} NAME_WE)
  file(READ ${f} TEXT)
  string(JSON name ERROR_VARIABLE jerr GET "${TEXT}" name)
  if(jerr)
    message(FATAL_ERROR "${f}: not a method file: ${jerr}")
  endif()
  if(NOT name STREQUAL base)
    message(FATAL_ERROR "${f}: \"name\" is \"${name}\", not the file's name")
  endif()
  file(READ ${f} HEX HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," BYTES "${HEX}")
  if(BYTES MATCHES "0x[89a-f]")
    message(FATAL_ERROR "${f}: not ASCII (write \\uXXXX escapes)")
  endif()
  string(APPEND body "static const char f${i}[] = {${BYTES} 0x00};\n")
  string(APPEND rows
    "    {\"surfaces/methods/${base}.json\", f${i}, sizeof(f${i}) - 1},\n")
  math(EXPR i "${i} + 1")
endforeach()
if(i EQUAL 0)
  message(FATAL_ERROR "${DIR}: no method files")
endif()
file(WRITE ${OUT} "/* generated from the files of surfaces/methods/ by "
  "cmake/embed_methods.cmake; do not edit */\n"
  "#include \"surfaces/table.h\"\n\n${body}\n"
  "const struct surf_method_file surf_method_files[] = {\n${rows}};\n"
  "const size_t surf_method_nfiles = ${i};\n")
