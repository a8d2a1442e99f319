"""The parity table: every case, what each Slurm gave, and whether they agree.

    python -m tests.parity.report            run the parity suite (pytest tests/parity), then print the table
    python -m tests.parity.report --no-run   print the table of the last run (test-artifacts/parity.json)

The suite itself writes ``test-artifacts/parity.md`` and ``parity.json`` when it ends.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def _cell(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def render(records: list[dict], stamp: str | None = None) -> str:
    """Markdown: a summary, the table, and the reason for every intentional difference."""
    from .harness import INTENTIONAL

    equal = sum(r["verdict"] == "equal" for r in records)
    intentional = [r for r in records if r["verdict"].startswith("intentional")]
    bad = [r for r in records if not (r["verdict"] == "equal" or r["verdict"].startswith("intentional"))]
    lines = [
        "# Parity: local Slurm vs real Slurm 22.05",
        "",
        f"{stamp or time.strftime('%Y-%m-%d %H:%M:%S')}: {len(records)} cases, {equal} equal, "
        f"{len(intentional)} intentionally different, {len(bad)} different.",
        "",
        "| case | local | real | verdict |",
        "|---|---|---|---|",
    ]
    for rec in records:
        lines.append(f"| {_cell(rec['case'])} | {_cell(rec['local'])} | {_cell(rec['real'])} | {_cell(rec['verdict'])} |")
    used = sorted({r["verdict"][len("intentional ("):-1] for r in intentional})
    if used:
        lines += ["", "## Intentional differences", ""]
        lines += [f"- **{key}**: {INTENTIONAL[key]}" for key in used if key in INTENTIONAL]
    notes = [r for r in records if r.get("note") and not r["verdict"].startswith("intentional")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {r['case']}: {r['note']}" for r in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rc = 0
    if "--no-run" not in args:
        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/parity",
                              *[a for a in args if a != "--no-run"]], cwd=ROOT)
    data = ARTIFACTS / "parity.json"
    if not data.exists():
        print("no parity results (test-artifacts/parity.json): is the real Slurm up? `bash ci/real-slurm.sh up`",
              file=sys.stderr)
        return rc or 1
    print(render(json.loads(data.read_text()), time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.stat().st_mtime))))
    return rc


if __name__ == "__main__":
    sys.exit(main())
