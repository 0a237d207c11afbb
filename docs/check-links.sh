#!/bin/sh
# Check that every relative link in README.md and docs/**/*.md resolves: the
# file exists and, for a #fragment into a Markdown file, a heading there has
# that GitHub-style anchor. Links to http(s) and mailto are not checked.
# Usage: sh docs/check-links.sh (from anywhere in the repository).
cd "$(dirname "$0")/.." || exit 2
exec python3 - "$@" <<'PY'
import glob, os, re, sys

def anchors(path):
    seen, out, fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    for m in re.finditer(r'<a (?:id|name)="([^"]+)"', open(path, encoding="utf-8").read()):
        out.add(m.group(1))
    return out

def links(path):
    fence = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for m in re.finditer(r"\]\(([^)\s]+)\)", line):
            yield n, m.group(1)

files = ["README.md"] + sorted(glob.glob("docs/**/*.md", recursive=True))
bad = count = 0
cache = {}
for f in files:
    for n, target in links(f):
        if re.match(r"[a-z]+:", target):
            continue
        count += 1
        dest, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(f), dest)) if dest else f
        if not os.path.exists(dest):
            print(f"{f}:{n}: {target}: no such file {dest}")
            bad += 1
            continue
        if frag and dest.endswith(".md"):
            if dest not in cache:
                cache[dest] = anchors(dest)
            if frag not in cache[dest]:
                print(f"{f}:{n}: {target}: no anchor #{frag} in {dest}")
                bad += 1
print(f"{count} relative links in {len(files)} files, {bad} broken")
sys.exit(1 if bad else 0)
PY
