#!/usr/bin/env python3
"""Every `Note [name]` a source or doc points to is written somewhere.

A Note is written where a comment line starts with it (`// Note [name]` or
`# Note [name]`) or where it is introduced inline as `Note [name]:`. A
pointer to a Note nobody writes (renamed, or removed with its code) sends the
reader nowhere: this test names each such pointer. Usage:
notes_resolve.py SOURCE_ROOT
"""
import pathlib
import re
import sys

FOLDERS = ("compiler", "passes", "runtime", "tools", "frontend", "models", "tests",
           "docs", "scripts")
SUFFIXES = {".cc", ".h", ".md", ".sh", ".py", ".ir", ".js", ".cmake", ".txt", ""}
NOTE = re.compile(r"Note \[([^\]\n]+)\]")


def main(root: pathlib.Path) -> int:
  written, pointers = set(), []
  for folder in FOLDERS:
    for path in sorted((root / folder).rglob("*")):
      if not path.is_file() or path.suffix not in SUFFIXES or path.samefile(__file__):
        continue
      try:
        text = path.read_text(encoding="utf-8")
      except (UnicodeDecodeError, OSError):
        continue
      for number, line in enumerate(text.splitlines(), 1):
        for match in NOTE.finditer(line):
          head = line[:match.start()].strip()
          tail = line[match.end():]
          if head in ("//", "#", "///") or tail.startswith(":"):
            written.add(match.group(1))
          else:
            pointers.append((path.relative_to(root), number, match.group(1)))
  missing = [p for p in pointers if p[2] not in written]
  for path, number, name in missing:
    print(f"{path}:{number}: Note [{name}] is written nowhere")
  if missing:
    print("notes_resolve: write the Note or point to the one that replaced it")
    return 1
  print(f"notes_resolve: all {len(pointers)} pointers reach one of {len(written)} Notes")
  return 0


if __name__ == "__main__":
  sys.exit(main(pathlib.Path(sys.argv[1])))
