"""The probed profile (:func:`hpcnb.sites.probe.probe_site`'s data) written as a site profile TOML file:
each value after its source (``# from: ...``), each open question as ``# QUESTION: ...``, what failed
or looked odd as ``# PROBLEM: ...`` at the top."""
from __future__ import annotations

import json
from typing import Any

__all__ = ["render_toml", "toml_value"]

_TOP_KEYS = ("name", "title", "source", "login_hosts", "cluster_name", "slurm_version", "gpu_request",
             "account_directive", "account_required", "accounts", "required_directives", "home_forbidden_for", "jupyter",
             "slurm_tmpdir", "shebang", "def_mem_per_cpu_mb", "kill_wait_s", "notes")
_TABLES = ("storage", "partitions", "nodes", "gpu_types", "rules")


def toml_value(value: Any) -> str:
    """One TOML value: a string (JSON's escapes are TOML's), a bool, a number, a list of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        if len(value) > 2 or sum(len(str(v)) for v in value) > 60:
            return "[\n" + "".join(f"  {toml_value(v)},\n" for v in value) + "]"
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _comments(lines: list[str], prefix: str, texts: Any) -> None:
    for text in [texts] if isinstance(texts, str) else texts:
        lines.extend(f"# {prefix}{line}" for line in str(text).splitlines() or [""])


def _table(lines: list[str], table: dict[str, Any], keys: Any) -> None:
    """The keys of one table, each after its source and question; questions about absent keys last."""
    sources, questions = table.get("_from", {}), table.get("_questions", {})
    for key in keys:
        if key in table and not key.startswith("_"):
            if key in sources:
                _comments(lines, "from: ", sources[key])
            if key in questions:
                _comments(lines, "QUESTION: ", questions[key])
            lines.append(f"{key} = {toml_value(table[key])}")
    for key, question in questions.items():
        if key not in table and key != "modules":
            _comments(lines, "QUESTION: ", f"{key}: {question}")


def render_toml(data: dict[str, Any]) -> str:
    """The profile file's text (a file ``hpcnb.sites.load_profile`` reads, named ``<data['name']>.toml``)."""
    lines = ["# A site profile written by `hpcnb site probe` from what this Slurm's commands said.",
             "# Answer the QUESTION lines from the site's guide; use it with HPCNB_PROFILE=/path/to/this.toml."]
    _comments(lines, "PROBLEM: ", data.get("_problems", []))
    lines.append("")
    _table(lines, data, [k for k in _TOP_KEYS if k in data] + [k for k in data if k not in _TOP_KEYS
                                                                and k not in _TABLES and k != "modules"])
    lines += ["", "[modules]"]
    if "modules" in data.get("_questions", {}):
        _comments(lines, "QUESTION: ", data["_questions"]["modules"])
    lines += [f"{k} = {toml_value(v)}" for k, v in data.get("modules", {}).items()]
    for section in _TABLES:
        for table in data.get(section, []):
            lines += ["", f"[[{section}]]"]
            _table(lines, table, list(table))
    return "\n".join(lines) + "\n"
