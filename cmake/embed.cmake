# cmake/embed.cmake: writes the bytes of a file as a C array, so that a
# page (jobs/dashboard.html) is part of the weir binary and needs no file
# at run time. Run as a script at build time:
#   cmake -DIN=FILE -DOUT=FILE.c -DNAME=SYMBOL -P cmake/embed.cmake
# defines `const unsigned char SYMBOL[]` (NUL-terminated) and
# `const size_t SYMBOL_len` (without the NUL).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" digits)
math(EXPR len "${digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" body "${body}")
get_filename_component(src "${IN}" NAME)
file(WRITE "${OUT}.tmp"
  "/* Generated from ${src} by cmake/embed.cmake at build time: do not edit. */\n"
  "#include <stddef.h>\n"
  "const unsigned char ${NAME}[] = {\n${body}0x00};\n"
  "const size_t ${NAME}_len = ${len};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
