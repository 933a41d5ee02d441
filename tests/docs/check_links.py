#!/usr/bin/env python3
"""Every relative link of the repository's Markdown resolves.

    check_links.py [FILE.md ...]     (default: every *.md that git tracks)

A link [text](target), an image ![alt](target) or a reference [name]: target that is not a
URL (http:, https:, mailto:) must name a file or directory that exists, relative to the
page; a #anchor must be a heading of the page it points to, spelled as GitHub spells its
anchors (lowercase; punctuation other than '-' and '_' dropped; spaces become '-'; a repeated
heading gets -1, -2, ...). Code blocks and `inline code` are not read. Prints FILE:LINE and
what is wrong for each broken link; exits 1 when there is one.
"""
import os
import re
import subprocess
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def text_lines(path):
    """(line number, text) of the lines outside fenced code blocks, inline code removed."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fence = None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):]:
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, INLINE_CODE.sub("", line)


def slug(heading):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = []
    for ch in text:
        category = unicodedata.category(ch)
        if ch in "-_" or category[0] in "LNM":
            kept.append(ch)
        elif ch == " ":
            kept.append("-")
    return "".join(kept)


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, found = {}, set()
        for _, line in text_lines(path):
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        with open(path, encoding="utf-8") as f:  # explicit anchors: <a name="x"> / id="x"
            found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", f.read()))
        _anchors[path] = found
    return _anchors[path]


def problems(path):
    for number, line in text_lines(path):
        targets = [m.group(1) for m in LINK.finditer(line)]
        m = REFERENCE.match(line)
        if m:
            targets.append(m.group(1))
        for target in targets:
            if EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(resolved):
                yield number, f"{target}: {os.path.relpath(resolved, ROOT)} does not exist"
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                yield number, f"{target}: {os.path.relpath(resolved, ROOT)} has no heading with the anchor #{anchor}"


def tracked_markdown():
    listed = subprocess.run(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "*.md"],
                            stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    return [os.path.join(ROOT, p) for p in listed if os.path.exists(os.path.join(ROOT, p))]


def main(argv):
    files = [os.path.abspath(p) for p in argv] or tracked_markdown()
    broken = 0
    for path in files:
        for number, what in problems(path):
            print(f"{os.path.relpath(path, ROOT)}:{number}: broken link {what}")
            broken += 1
    print(f"check_links: {len(files)} file(s), {broken} broken link(s)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
