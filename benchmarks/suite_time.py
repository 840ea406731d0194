"""Per-file seconds of two pytest runs of the suite side by side (issue #40): the 'before' and 'after' logs are
pytest's `--durations=0` output (one `12.34s call tests/x.py::test` line per phase) plus its final summary line.

    python benchmarks/suite_time.py BEFORE.txt AFTER.txt > table.md
"""
import re
import sys
from collections import defaultdict

LINE = re.compile(r"^([0-9.]+)s (setup|call|teardown)\s+(\S+)")
SUMMARY = re.compile(r"in ([0-9.]+)s")


def per_file(path: str) -> tuple:
    """({test file: seconds over every phase}, pytest's own wall seconds or None)."""
    files, wall = defaultdict(float), None
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if m:
                files[m.group(3).split("::")[0]] += float(m.group(1))
            elif " passed" in line or " failed" in line:
                s = SUMMARY.search(line)
                wall = float(s.group(1)) if s else wall
    return dict(files), wall


def table(before: str, after: str, top: int = 40) -> str:
    (b, b_wall), (a, a_wall) = per_file(before), per_file(after)
    names = sorted(set(b) | set(a), key=lambda n: -max(b.get(n, 0.0), a.get(n, 0.0)))
    lines = ["| test file | before s | after s | change |", "|---|---|---|---|"]
    for name in names[:top]:
        x, y = b.get(name, 0.0), a.get(name, 0.0)
        lines.append(f"| {name} | {x:.1f} | {y:.1f} | {y - x:+.1f} |")
    rest_b = sum(b.get(n, 0.0) for n in names[top:])
    rest_a = sum(a.get(n, 0.0) for n in names[top:])
    lines.append(f"| {len(names) - top} other files | {rest_b:.1f} | {rest_a:.1f} | {rest_a - rest_b:+.1f} |")
    lines.append(f"| **sum of phases** | {sum(b.values()):.1f} | {sum(a.values()):.1f} | "
                 f"{sum(a.values()) - sum(b.values()):+.1f} |")
    if b_wall and a_wall:
        lines.append(f"| **pytest wall** | {b_wall:.1f} | {a_wall:.1f} | {a_wall / b_wall:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(sys.argv[1], sys.argv[2]))
