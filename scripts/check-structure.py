#!/usr/bin/env python3
"""Checks the tree's structural rules (CONTRIBUTING.md), each a line naming what breaks it:

- no Rust file under a `src/` over 900 lines, counting its inline tests;
- no two Rust files of one crate that import each other, directly or around a loop (a file
  imports another when it names a path into it: `use crate::a::b::C`, `super::x::f()`, or a
  `pub use` that re-exports from it; declaring a child with `mod` is not an import);
- no source file, README or doc that points to a file outside the repository;
- no doc or README that names a file of the repository that does not exist.

Usage: scripts/check-structure.py [ROOT]   (default: the repository holding this script)
"""

import re
import subprocess
import sys
from pathlib import Path

MAX_LINES = 900
# Crate roots: every Cargo package's src/ in the repository (the workspace, the guest, fuzz).
PATH_RE = re.compile(r"\b((?:crate|super|self)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)")
OUTSIDE_RE = re.compile(r"\.\./shared|shared/papers|DESIGN\.md|/work/|/home/[a-z]")


def tracked(root):
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [root / p for p in out.splitlines() if (root / p).is_file()]


def module_of(src, path):
    """The module path of a file under `src` (`a/b.rs` and `a/b/mod.rs` are `a::b`)."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip_comments(text):
    """The code of a file without its comments, and its string and character literals emptied
    (so neither a `use` in a message nor a brace in a format string counts)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r(#*)"', text[i:]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            close = '"' + hashes
            j = text.find(close, i + 2 + len(hashes))
            out.append('""')
            i = n if j < 0 else j + len(close)
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.|[^'\\])'", text[i:]):
            m = re.match(r"'(\\.|[^'\\])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


USE_RE = re.compile(r"\buse\s+((?:::)?[A-Za-z_][^;]*);", re.S)


def expand(tree):
    """The paths of a `use` tree: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`."""
    tree = re.sub(r"\s+as\s+", " as ", tree.strip())
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree)
    depth, start = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
    if start is None:
        return [re.sub(r" as \w+$", "", tree).rstrip(":")]
    prefix, inner = tree[:start], tree[start + 1 : tree.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for part in filter(None, parts):
        out += [prefix + q for q in expand(part)]
    return [q.replace("::self", "") for q in out]


def inline_modules(text):
    """The spans of inline `mod NAME { ... }` blocks, where `super` is the file's own module."""
    spans = []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", text):
        depth = 0
        for i in range(m.end() - 1, len(text)):
            depth += text[i] == "{"
            depth -= text[i] == "}"
            if depth == 0:
                spans.append((m.start(), i, m.group(1)))
                break
    return spans


def named_paths(text):
    """Every path into the crate a file names, in `use` trees and in code, each with the
    inline modules it stands in (so `super` in `mod tests` is the file itself)."""
    spans = inline_modules(text)

    def inside(pos):
        return [name for start, end, name in spans if start < pos < end]

    paths = [(m.group(1), inside(m.start())) for m in PATH_RE.finditer(text)]
    for m in USE_RE.finditer(text):
        paths += [(q, inside(m.start())) for q in expand(m.group(1))]
    return paths


PUB_USE_RE = re.compile(r"\bpub(?:\([a-z]+\))?\s+use\s+([^;]*);", re.S)


def reexports(text):
    """What a file re-exports: the name it gives to the path it names (`pub use a::B as C`)."""
    out = {}
    for m in PUB_USE_RE.finditer(text):
        for path in expand(m.group(1)):
            out[path.split("::")[-1]] = path
    return out


def crate_graph(src, files):
    """Edges between the files of one crate, as the paths they name; a name a file only
    re-exports leads on to the file that defines it."""
    modules = {module_of(src, f): f for f in files}
    texts = {f: strip_comments(f.read_text()) for f in files}
    exported = {f: reexports(texts[f]) for f in files}

    def resolve(base, path, depth=0):
        words = [w for w in path.split("::") if w and w != "*"]
        if not words:
            return None
        if words[0] == "crate":
            target, rest = [], words[1:]
        elif words[0] in ("self", "super"):
            target, rest = list(base), words
            while rest and rest[0] in ("self", "super"):
                if rest[0] == "super":
                    if not target:
                        return None
                    target.pop()
                rest = rest[1:]
        else:
            # A path relative to the module (`pub use state::X` in lib.rs).
            target, rest = list(base), words
        best, used = None, 0
        for i in range(len(rest) + 1):
            key = tuple(target + rest[:i])
            if key in modules:
                best, used = modules[key], i
        if best is None:
            return None
        left = rest[used:]
        if left and depth < 8 and left[0] in exported[best]:
            again = resolve(module_of(src, best), exported[best][left[0]], depth + 1)
            if again is not None:
                return again
        return best

    edges = {f: set() for f in files}
    for f in files:
        base = module_of(src, f)
        for path, inner in named_paths(texts[f]):
            to = resolve(base + tuple(inner), path)
            if to is not None and to != f:
                edges[f].add(to)
        for path in exported[f].values():
            to = resolve(base, path)
            if to is not None and to != f:
                edges[f].add(to)
    return edges


def circles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    root = root.resolve()
    files = tracked(root)
    problems = []

    rust = [f for f in files if f.suffix == ".rs" and "/src/" in f.as_posix()]
    for f in rust:
        n = len(f.read_text().splitlines())
        if n > MAX_LINES:
            problems.append(f"{f.relative_to(root)}: {n} lines (at most {MAX_LINES})")

    srcs = sorted({p.parent / "src" for p in root.rglob("Cargo.toml")
                   if (p.parent / "src").is_dir() and "target" not in p.parts})
    for src in srcs:
        crate_files = [f for f in rust if src in f.parents]
        for comp in circles(crate_graph(src, crate_files)):
            names = ", ".join(str(f.relative_to(root)) for f in comp)
            problems.append(f"an import circle: {names}")

    for f in files:
        rel = f.relative_to(root).as_posix()
        if rel == "scripts/check-structure.py" or f.suffix not in (
            ".rs", ".md", ".sh", ".py", ".toml", ".js", ".html"
        ):
            continue
        for no, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE_RE.search(line):
                problems.append(f"{rel}:{no}: points outside the repository: {line.strip()}")

    named = re.compile(r"(?<![\w/.])((?:crates|scripts|examples|guest|fuzz|docs)/[\w./-]*\.(?:rs|sh|py|toml|md|json|svg|png))")
    for f in files:
        if f.suffix != ".md":
            continue
        for no, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for m in named.finditer(line):
                path = m.group(1)
                if not (root / path).exists() and not (f.parent / path).exists():
                    rel = f.relative_to(root).as_posix()
                    problems.append(f"{rel}:{no}: names {path}, which does not exist")

    for p in problems:
        print(f"check-structure: {p}")
    if problems:
        print("check-structure: see CONTRIBUTING.md", file=sys.stderr)
        sys.exit(1)
    print(f"check-structure: {len(rust)} source files, {len(srcs)} crates: no file over "
          f"{MAX_LINES} lines, no import circle, nothing points outside the repository")


if __name__ == "__main__":
    main()
