# Turns a file into a C array: cmake -DIN=file -DOUT=file.c -DNAME=SYMBOL -P embed.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR n "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," arr "${hex}")
file(WRITE ${OUT} "/* generated at build time from ${IN}; do not edit */\n#include <stddef.h>\n"
     "const unsigned char ${NAME}[] = {${arr} 0x00};\nconst size_t ${NAME}_LEN = ${n};\n")
