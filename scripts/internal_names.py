#!/usr/bin/env python3
"""internal_names.py - the library's internal names stay out of the API's `rp_` namespace.

The rule (docs/architecture.md, "Internal names"): `rp_` belongs to the public API, the names
declared in include/replicator/ (every `rp_` identifier in their code, macros included). A name
that the library's sources in src/ declare or define (a function, static or not, a typedef, a
struct, union or enum tag, a global variable, a lower-case macro or enum constant) and that no
public header declares is internal, and takes its layer's prefix instead: the table RULES below.
Upper-case `RP_` macros and enum values are left alone (they are not in the `rp_` namespace of
linker symbols and types, and the public headers share them).

models/, cli/, examples/, tests/, bench/ and fuzz/ only use names; the rename reaches them, and
docs/*.md, with a word-boundary replacement. A name that src/ uses but declares nowhere, no
rule renames: it is listed, and --check fails on it. (The code that protoc-c generates at build
time from proto/*.proto takes its names' prefix from the package, io_onnx_pb and io_tb.)

Usage:
  scripts/internal_names.py            the renames it would make, and the names it leaves
  scripts/internal_names.py --apply    make them, in every text file of the tree's source folders
  scripts/internal_names.py --check    exit 1, naming them, if src/ declares an internal `rp_` name,
                                       uses an `rp_` name that neither it nor the API declares,
                                       or a file still uses an old name (the CTest entry
                                       abi_internal_names)
Options: --root DIR (the source tree; default: this script's parent folder's parent).

--apply records the old names it renamed in scripts/internal_names.txt (commit it with the
rename), so re-running it after merging a branch written before the rename is safe: a use of a
recorded name anywhere, or a declaration the merge brought back, is renamed like the rest; a new
internal `rp_` name is renamed by the table. It refuses, changing nothing, if a new name already
exists in the tree's code (a collision) and its old name is not recorded, if two names would get
the same new name, or if an internal name has no rule.
"""
import argparse
import os
import re
import sys

# Old name -> new name. A key ending in '_' is a prefix: every name starting with it. Any other
# key is a stem: the name itself and every name starting with key + '_' (the rest is kept). The
# longest matching key wins, so a more specific entry overrides a general one.
RULES = {
    # kernels (src/kernels): the shared interface of kernels.h, bn_bf16.h and host_mem.c takes
    # kernels_; each backend its own k-prefix (kcpu_, kref_, kstrict_, kcuda_): plain cpu_, ref_
    # or cuda_ would read as the tests' reference values (ref_loss) and CUDA's own API.
    "rp_kernels": "kernels_table",  # the table type itself; rp_kernels_* below
    "rp_kernels_": "kernels_",
    "rp_act": "kernels_act",
    "rp_binop": "kernels_binop",
    "rp_conv_desc": "kernels_conv_desc",
    "rp_pool_desc": "kernels_pool_desc",
    "rp_staging": "kernels_staging",
    "rp_host_mem_": "kernels_host_mem_",
    "rp_bn_": "kernels_bn_",
    "rp_cpu_": "kcpu_",
    "rp_ref_": "kref_",
    "rp_strict_": "kstrict_",
    "rp_cuda_": "kcuda_",
    "rp_dev_": "kcuda_dev_",
    "rp_cublas": "kcuda_cublas",
    # comm (src/comm): comm_; the fault injector's own names already say fault_.
    "rp_comm_": "comm_",
    "rp_coll": "comm_coll",
    "rp_p2p": "comm_p2p",
    "rp_mpi_": "comm_mpi_",
    "rp_flight_": "comm_flight_",
    "rp_reduce_block": "comm_reduce_block",
    "rp_fault_": "fault_",
    # the replicator runtime (src/replicator): strategies (strategy.h) strategy_, the gradient
    # reducer (grad_reducer.c) reducer_, the rest of replicator_internal.h runtime_ (the layer's
    # name in docs/architecture.md; repl_ would read as a read-eval-print loop).
    "rp_strategy": "strategy_table",  # the table type; rp_strategy_* below
    "rp_strategy_": "strategy_",
    "rp_bucket_": "strategy_bucket_",
    "rp_grad_reducer": "reducer",
    "rp_grad_": "reducer_",
    "rp_sync": "sync_ctx",  # each strategy's context per wrapped optimizer (strategy_*.c)
    "rp_async": "async_ctx",
    "rp_zero": "zero_ctx",
    "rp_grouped": "grouped_ctx",
    "rp_topology_": "runtime_topology_",
    "rp_layout": "runtime_layout",
    "rp_report": "runtime_report",
    # parameter servers (src/ps)
    "rp_ps_": "ps_",
    # rl (src/rl): the sum tree's other functions are rl_sumtree_*
    "rp_sumtree": "rl_sumtree",
}

# Where the library is (its declarations decide what is internal), where the API is, and where
# names are only used. The rename reaches all of them but include/ (whose code holds only public
# names; its comments may mention an internal one).
LIBRARY = ["src"]
PUBLIC = ["include/replicator"]
USERS = ["tests", "bench", "models", "cli", "examples", "fuzz"]
DOCS = ["docs"]  # *.md directly under docs/
RECORD = "scripts/internal_names.txt"  # the old names --apply renamed, one a line
C_EXT = (".c", ".h", ".cu", ".cuh")
TEXT_EXT = C_EXT + (".py", ".sh", ".md", ".txt", ".cmake", ".in", ".json", ".supp", ".proto")

NAME = re.compile(r"\brp_\w+")
WILDCARD = re.compile(r"\b(rp_\w+_)\*")
WORD = re.compile(r"\b[A-Za-z_]\w*")


def strip_code(text):
    """C or CUDA text with comments and the insides of string and character literals blanked
    (newlines kept, so line starts stay line starts)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def files(root, folders, exts, recursive=True):
    for folder in folders:
        top = os.path.join(root, folder)
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            if not recursive:
                dirnames[:] = []
            for f in sorted(filenames):
                if f.endswith(exts) or f == "CMakeLists.txt":
                    yield os.path.join(dirpath, f)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# What declares a name, in code with comments and strings blanked.
DECLARATIONS = [
    re.compile(r"^[ \t]*#[ \t]*define[ \t]+(rp_\w+)", re.M),  # a macro
    re.compile(r"\b(?:struct|union|enum)\s+(rp_\w+)\s*[{;]"),  # a tag, defined or declared
    re.compile(r"\}\s*(rp_\w+)\s*[;,\[]"),  # the name a typedef gives a struct, union or enum
    re.compile(r"\btypedef\b[^;{}]*?\(\s*\*\s*(rp_\w+)\s*\)"),  # a function pointer type
    re.compile(r"\btypedef\b[^;{}()]*?\b(rp_\w+)\s*(?:\[[^;]*)?;"),  # a plain typedef
    # At file scope (clang-format starts them in column 0): a function declared or defined, or a
    # variable, after its type: `static inline void rp_x(`, `const rp_strategy rp_strategy_zero =`,
    # `__global__ void rp_x(`, `template <typename T> __device__ T rp_x(`.
    re.compile(r"^(?!return\b|case\b|goto\b|else\b|do\b|sizeof\b)[A-Za-z_][\w \t*<>,:\"]*?"
               r"[\s*](rp_\w+)\s*(?:\(|\[|=|;|,)", re.M),
]
ENUM_BODY = re.compile(r"\benum\b[^{;]*\{([^}]*)\}")
ENUM_CONSTANT = re.compile(r"(?:^|,)\s*(rp_\w+)\s*(?==|,|$)")


def declared(code):
    """The rp_ names that `code` (stripped) declares or defines."""
    names = set()
    for pattern in DECLARATIONS:
        names.update(pattern.findall(code))
    for body in ENUM_BODY.findall(code):
        names.update(ENUM_CONSTANT.findall(body.strip()))
    return names


def new_name(old):
    """The table's name for `old`, or None if no rule covers it."""
    best = None
    for key in RULES:
        if key.endswith("_"):
            hit = old.startswith(key)
        else:
            hit = old == key or old.startswith(key + "_")
        if hit and (best is None or len(key) > len(best)):
            best = key
    if best is None:
        return None
    if best.endswith("_"):
        return RULES[best] + old[len(best):]
    # A stem: its new name, then the rest (rp_conv_desc_init -> kernels_conv_desc_init). Where
    # a stem names a type (rp_kernels -> kernels_table), a longer prefix key (rp_kernels_) takes
    # its other names.
    return RULES[best] + old[len(best):]


class Tree:
    def __init__(self, root):
        self.root = root
        self.public = set()
        for path in files(root, PUBLIC, (".h",)):
            self.public.update(NAME.findall(strip_code(read(path))))
        if not self.public:
            sys.exit(f"internal_names: no public rp_ names under {root}/include/replicator")
        self.declared = {}  # rp_ name declared in src/ -> the first file declaring it
        self.used = {}  # rp_ name used in src/ code -> its first file
        for path in files(root, LIBRARY, C_EXT):
            code = strip_code(read(path))
            rel = os.path.relpath(path, root)
            for name in declared(code):
                self.declared.setdefault(name, rel)
            for name in NAME.findall(code):
                self.used.setdefault(name, rel)
        # Every identifier in the code of the C and CUDA files (comments and strings left out),
        # for collisions, with one file it is in.
        self.words = {}
        for path in files(root, LIBRARY + PUBLIC + USERS, C_EXT):
            rel = os.path.relpath(path, root)
            for w in WORD.findall(strip_code(read(path))):
                self.words.setdefault(w, rel)
        self.record = set()
        record = os.path.join(root, RECORD)
        if os.path.exists(record):
            for line in read(record).splitlines():
                if line.strip() and not line.startswith("#"):
                    self.record.add(line.strip())

    def internal(self):
        return sorted(n for n in self.declared if n not in self.public)

    def plan(self):
        """(renames {old: new}, problems [text], left [(name, why)])."""
        renames, problems, left = {}, [], []
        for old in self.internal():
            new = new_name(old)
            if new is None:
                problems.append(f"{old} ({self.declared[old]}): no rule in RULES; add one")
                continue
            # A recorded name's new name exists: the rename made it (a merge brought the old
            # declaration back).
            if new in self.words and old not in self.record:
                problems.append(f"{old} -> {new}: {new} already exists ({self.words[new]})")
                continue
            renames[old] = new
        # Uses of names renamed before (a branch merged after the rename still says rp_...).
        done = self.record - self.public
        for path in self.all_text_files():
            for old in set(NAME.findall(read(path))) & done:
                new = new_name(old)
                if new is None:
                    problems.append(f"{old} (recorded in {RECORD}): no rule in RULES any more")
                else:
                    renames.setdefault(old, new)
        # Mentions of a family, `rp_cpu_conv2d_*`, in comments and docs: renamed when its names are
        # (or were) renamed and no public name starts so (`rp_cpu_*` also covers rp_cpu_count).
        names = done | set(renames)
        for path in self.all_text_files():
            for prefix in set(WILDCARD.findall(read(path))):
                new = new_name(prefix)
                if new is None or any(p.startswith(prefix) for p in self.public):
                    continue
                if any(o.startswith(prefix) for o in names):
                    renames[prefix + "*"] = new + "*"
        by_new = {}
        for old, new in renames.items():
            by_new.setdefault(new, []).append(old)
        for new, olds in sorted(by_new.items()):
            if len(olds) > 1:
                problems.append(f"{' and '.join(sorted(olds))} would all be {new}")
        for name in sorted(set(self.used) - self.public - set(self.declared) - set(renames)):
            left.append((name, f"used in {self.used[name]}, declared neither in src/ nor in the "
                               "API (generated code, or another library's name)"))
        return renames, problems, left

    def all_text_files(self):
        yield from files(self.root, LIBRARY + PUBLIC + USERS, TEXT_EXT)
        yield from files(self.root, DOCS, (".md",), recursive=False)
        readme = os.path.join(self.root, "README.md")
        if os.path.exists(readme):
            yield readme

    def apply(self, renames):
        if not renames:
            return 0, 0
        # Longest first; a family (`rp_x_*`) ends in '*', after which \b would not hold.
        keys = sorted(renames, key=len, reverse=True)
        pattern = re.compile(r"\b(" + "|".join(
            re.escape(k) if k.endswith("*") else re.escape(k) + r"\b" for k in keys) + ")")
        names = sorted(self.record | {k for k in renames if not k.endswith("*")})
        with open(os.path.join(self.root, RECORD), "w", encoding="utf-8") as f:
            f.write("# The old names that scripts/internal_names.py --apply renamed, one a line:\n"
                    "# a re-run renames their uses in branches merged after the rename.\n")
            f.write("".join(n + "\n" for n in names))
        changed, count = 0, 0
        for path in self.all_text_files():
            text = read(path)
            new, k = pattern.subn(lambda m: renames[m.group(1)], text)
            if k:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
                changed += 1
                count += k
        return changed, count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--apply", action="store_true")
    mode.add_argument("--check", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="no list of renames")
    args = ap.parse_args()

    tree = Tree(args.root)
    renames, problems, left = tree.plan()
    if args.check:
        bad = [f"{old} ({tree.declared.get(old, 'an old name still used')}) should be {new}"
               for old, new in sorted(renames.items())]
        bad += [f"{name}: {why}" for name, why in left]
        for line in bad + problems:
            print(f"FAIL: {line}")
        if bad or problems:
            print("FAIL: internal names use the API's rp_ prefix; run scripts/internal_names.py "
                  "--apply (docs/architecture.md, \"Internal names\")")
            return 1
        print(f"ok: {len(tree.public)} public rp_ names; src/ declares and uses no other rp_ name")
        return 0
    if problems:
        for line in problems:
            print(f"refused: {line}", file=sys.stderr)
        return 1
    if not args.quiet:
        for old, new in sorted(renames.items()):
            print(f"{old} -> {new}")
        for name, why in left:
            print(f"left: {name}: {why}")
    families = sum(1 for k in renames if k.endswith("*"))
    what = f"{len(renames) - families} names and {families} mentions of a family (rp_x_*)"
    if args.apply:
        changed, count = tree.apply(renames)
        print(f"renamed {what}: {count} occurrences in {changed} files")
    else:
        print(f"{what} to rename (--apply makes the change)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
