"""The parity table: every case, what the local Slurm and each real Slurm gave, and whether they agree.

    python -m tests.parity.report [--version V]... [pytest args]
                                            run the parity suite against each real lane V (22.05, 24.11;
                                            default: $HPCNB_REAL_SLURM or 22.05), then print the table
    python -m tests.parity.report --no-run  print the table of the last runs (test-artifacts/parity-*.json)

Each run of the suite writes ``test-artifacts/parity-VERSION.json`` and ``parity.md``: one table
with a column per real version that has results.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def _cell(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def load() -> dict[str, list[dict]]:
    """``{version: records}`` of every lane's last run, oldest version first."""
    found = {}
    for path in sorted(ARTIFACTS.glob("parity-*.json")):
        version = path.stem.removeprefix("parity-")
        found[version] = json.loads(path.read_text())
    return dict(sorted(found.items(), key=lambda item: [int(x) for x in item[0].split(".") if x.isdigit()]))


def _ok(verdict: str) -> bool:
    return verdict == "equal" or verdict.startswith("intentional")


def run_times() -> dict[str, str]:
    """``{version: when its results were written}``."""
    return {path.stem.removeprefix("parity-"): time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
            for path in ARTIFACTS.glob("parity-*.json")}


def _summary(version: str, records: list[dict], when: str | None) -> str:
    equal = sum(r["verdict"] == "equal" for r in records)
    intentional = sum(r["verdict"].startswith("intentional") for r in records)
    bad = sum(not _ok(r["verdict"]) for r in records)
    stamp = f" (run {when})" if when else ""
    return (f"- real Slurm {version}{stamp}: {len(records)} cases, {equal} equal, {intentional} intentionally "
            f"different, {bad} different.")


def render(by_version: dict[str, list[dict]], stamp: str | None = None, when: dict[str, str] | None = None) -> str:
    """Markdown: a summary per version (``when`` it ran), the table, and the reason for every
    intentional difference."""
    from .harness import INTENTIONAL

    versions = list(by_version)
    cases: dict[str, dict[str, dict]] = {}
    for version, records in by_version.items():
        for rec in records:
            cases.setdefault(rec["case"], {})[version] = rec
    lines = [f"# Parity: local Slurm vs real Slurm {', '.join(versions) or '(no results)'}", "",
             f"{stamp or time.strftime('%Y-%m-%d %H:%M:%S')}", ""]
    lines += [_summary(v, by_version[v], (when or {}).get(v)) for v in versions]
    head = ["case", "local"] + [f"{part} {v}" for v in versions for part in ("real", "verdict")]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in sorted(cases):
        row = cases[case]
        local = next(iter(row.values()))["local"]
        cells = [case, local]
        for version in versions:
            rec = row.get(version)
            cells += [rec["real"], rec["verdict"]] if rec else ["", "not run"]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    used = sorted({r["verdict"][len("intentional ("):-1] for rs in by_version.values() for r in rs
                   if r["verdict"].startswith("intentional")})
    if used:
        lines += ["", "## Intentional differences", ""]
        lines += [f"- **{key}**: {INTENTIONAL[key]}" for key in used if key in INTENTIONAL]
    notes = [(v, r) for v, rs in by_version.items() for r in rs
             if r.get("note") and not r["verdict"].startswith("intentional")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {r['case']} [{v}]: {r['note']}" for v, r in notes]
    return "\n".join(lines) + "\n"


def _versions(args: list[str]) -> tuple[list[str], list[str]]:
    """(--version values, the other arguments)."""
    versions, rest = [], []
    it = iter(args)
    for arg in it:
        if arg == "--version":
            versions.append(next(it, ""))
        elif arg.startswith("--version="):
            versions.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return versions or [os.environ.get("HPCNB_REAL_SLURM") or "22.05"], rest


def main(argv: list[str] | None = None) -> int:
    versions, args = _versions(list(sys.argv[1:] if argv is None else argv))
    rc = 0
    if "--no-run" not in args:
        for version in versions:
            env = {**os.environ, "HPCNB_REAL_SLURM": version}
            rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/parity",
                                  *args], cwd=ROOT, env=env) or rc
    results = load()
    if not results:
        print("no parity results (test-artifacts/parity-*.json): is a real Slurm up? `bash ci/real-slurm.sh up "
              "[22.05|24.11]`", file=sys.stderr)
        return rc or 1
    print(render(results, when=run_times()))
    return rc


if __name__ == "__main__":
    sys.exit(main())
