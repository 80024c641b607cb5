#!/usr/bin/env python3
"""The exported symbols of the installed shared libraries against the public headers.

Usage: abi_symbols.py INCLUDE_DIR LIBRARY.so...

Reads every function declared at file scope in INCLUDE_DIR/*.h (comments, preprocessor lines,
typedefs and struct, union and enum definitions left out) and every symbol each library defines
and exports (`nm -D --defined-only`), and fails, naming the offenders, if
  - a library exports a symbol that no public header declares (an internal function that leaked:
    it lacks `static`, or the library was built without hidden visibility);
  - a public declaration lacks RP_API (include/replicator/api.h): under hidden visibility its
    function would not be exported, and a program calling it would not link;
  - a declared function is exported by none of the libraries (a missing definition, or a mark
    the compiler did not see).
"""
import glob
import os
import re
import subprocess
import sys

# What the linker defines in every shared library; not the library's API.
LINKER_SYMBOLS = {"_init", "_fini", "__bss_start", "_edata", "_end"}


def strip(text):
    """The header's C declarations: no comments, no C++ guards, no preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    # extern "C" { ... } sits between #ifdef __cplusplus and #endif: the C compiler never sees it.
    text = re.sub(r"#\s*ifdef\s+__cplusplus.*?#\s*endif", " ", text, flags=re.S)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)


def statements(text):
    """File-scope statements: split at ';' outside braces and parentheses."""
    out, cur, depth = [], [], 0
    for ch in text:
        cur.append(ch)
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == ";" and depth == 0:
            out.append("".join(cur).strip())
            cur = []
    rest = "".join(cur).strip()
    if rest:
        out.append(rest)
    return out


def declarations(include_dir):
    """{function name: (header, whether its declaration carries RP_API)}."""
    found = {}
    headers = sorted(glob.glob(os.path.join(include_dir, "*.h")))
    if not headers:
        sys.exit(f"FAIL: no headers in {include_dir}")
    for path in headers:
        with open(path, encoding="utf-8") as f:
            text = strip(f.read())
        for st in statements(text):
            words = st.split()
            if not words or words[0] in ("typedef", "struct", "union", "enum"):
                continue
            # A function: the identifier before the first '(' (outside attributes' own).
            m = re.match(r"^(.*?)\b([A-Za-z_]\w*)\s*\(", st, flags=re.S)
            if not m or m.group(2) == "__attribute__":
                continue
            name = m.group(2)
            has_api = re.search(r"\bRP_API\b", m.group(1)) is not None
            found[name] = (os.path.basename(path), has_api)
    return found


def exported(lib):
    """The symbols `lib` defines and exports, by name."""
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-1] not in LINKER_SYMBOLS:
            names.add(parts[-1].split("@")[0])
    return names


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    decls = declarations(sys.argv[1])
    problems = []
    every = set()
    for lib in sys.argv[2:]:
        names = exported(lib)
        every |= names
        leaked = sorted(n for n in names if n not in decls)
        for n in leaked:
            problems.append(f"{os.path.basename(lib)} exports {n}, which no public header declares")
        print(f"{os.path.basename(lib)}: {len(names)} exported symbols, {len(leaked)} not in the headers")
    for name, (header, has_api) in sorted(decls.items()):
        if not has_api:
            problems.append(f"{header}: {name} is declared without RP_API")
        if name not in every:
            problems.append(f"{header}: {name} is declared but no library exports it")
    print(f"{len(decls)} functions declared in {sys.argv[1]}")
    for p in problems:
        print("FAIL:", p)
    if problems:
        sys.exit(1)
    print("PASS: the libraries export exactly the public headers' functions")


if __name__ == "__main__":
    main()
