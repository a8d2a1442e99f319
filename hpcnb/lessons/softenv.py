"""Lesson 3b (how a job gets its software): a module tree over the course's environment, and a wheelhouse.

* :func:`modulefile` — the text of an Lmod (Lua) modulefile: help, whatis, dependencies, paths, variables;
* :func:`write_course_modules` — ``python/X.Y`` (this kernel's environment first on ``PATH``) and
  ``pytorch/X.Y`` (depends on it; moves the caches it causes off ``$HOME``) under a module tree;
* :func:`build_wheel` — a pure-Python wheel, made without pip or a network, for a wheelhouse that
  ``pip install --no-index --find-links=WHEELHOUSE`` installs from on a compute node;
* :func:`without_course_environment` — this environment as a shell that never activated the
  course's environment nor loaded Lmod would have it (exercises 3b submit from it).

Module files name this kernel's interpreter (``sys.executable``), never a fixed path, so the same
lesson writes a tree that works in any checkout, venv or conda environment.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

__all__ = ["CACHE_VARIABLES", "build_wheel", "modulefile", "without_course_environment", "write_course_modules"]

#: What the ``pytorch`` module points off ``$HOME`` (each a folder below the cache root), and who writes there.
CACHE_VARIABLES: dict[str, str] = {
    "XDG_CACHE_HOME": "xdg",        # ~/.cache: the default of many tools (matplotlib, ...)
    "PIP_CACHE_DIR": "pip",         # ~/.cache/pip: every wheel pip downloads
    "TORCH_HOME": "torch",          # ~/.cache/torch: torch.hub and pretrained weights
    "HF_HOME": "huggingface",       # ~/.cache/huggingface: Hugging Face models and datasets
    "TRITON_CACHE_DIR": "triton",   # ~/.triton/cache: GPU kernels Triton compiles (torch.compile)
}

_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")   # a module, package or version word
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")                    # an importable Python name
_EPOCH = (1980, 1, 1, 0, 0, 0)                                       # fixed zip times: the same wheel every run


def _lua(text: str) -> str:
    """``text`` as a double-quoted Lua string."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _check_word(what: str, value: str) -> None:
    if not _NAME.match(value):
        raise ValueError(f"{what} {value!r}: use letters, digits, '.', '_' or '-' (starting and ending "
                         f"with a letter or digit)")


def modulefile(help: str, whatis: str, *, depends_on: Sequence[str] = (),
               prepend_path: Mapping[str, str] | None = None, setenv: Mapping[str, str] | None = None) -> str:
    """The text of a Lua modulefile: ``module help``/``module spider`` show ``help`` and ``whatis``;
    loading it loads ``depends_on`` first, then prepends paths and sets variables (unloading undoes all)."""
    lines = [f"help({_lua(help)})", f"whatis({_lua('Description: ' + whatis)})"]
    lines += [f"depends_on({_lua(name)})" for name in depends_on]
    lines += [f"prepend_path({_lua(k)}, {_lua(v)})" for k, v in (prepend_path or {}).items()]
    lines += [f"setenv({_lua(k)}, {_lua(v)})" for k, v in (setenv or {}).items()]
    return "\n".join(lines) + "\n"


def _major_minor(version: str) -> str:
    found = re.match(r"^(\d+)\.(\d+)", version)
    if not found:
        raise ValueError(f"version {version!r} does not start with MAJOR.MINOR")
    return f"{found.group(1)}.{found.group(2)}"


def _write_module(root: Path, name: str, version: str, text: str) -> Path:
    path = root / name / f"{version}.lua"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_course_modules(root: str | Path, cache: str | Path, *, bin_dir: str | Path | None = None,
                         python_version: str | None = None, torch_version: str | None = None) -> list[Path]:
    """Write ``python/X.Y`` and ``pytorch/X.Y`` under the module tree ``root``; returns their paths.

    ``python`` prepends ``bin_dir`` (default: the folder of this kernel's interpreter) to ``PATH``;
    ``pytorch`` depends on it and sets :data:`CACHE_VARIABLES` to folders below ``cache`` (a scratch
    or project folder, not ``$HOME``). Versions default to this interpreter's and torch's (without
    importing torch)."""
    root, cache = Path(root), Path(cache)
    if not root.is_absolute() or not cache.is_absolute():
        raise ValueError(f"module tree and cache folder must be absolute paths (a job runs elsewhere): "
                         f"{root}, {cache}")
    bin_dir = Path(bin_dir) if bin_dir is not None else Path(sys.executable).parent
    py = _major_minor(python_version or f"{sys.version_info[0]}.{sys.version_info[1]}")
    torch = _major_minor(torch_version or importlib.metadata.version("torch"))
    python_text = modulefile(f"Python {py}: the course's environment, {bin_dir.parent}",
                             f"Python {py} with the course's packages (torch, Lightning, ...)",
                             prepend_path={"PATH": str(bin_dir)})
    torch_text = modulefile(f"PyTorch {torch} from the course's environment; its caches go to {cache}, not $HOME",
                            f"PyTorch {torch} (loads python/{py})", depends_on=[f"python/{py}"],
                            setenv={var: str(cache / sub) for var, sub in CACHE_VARIABLES.items()})
    return [_write_module(root, "python", py, python_text), _write_module(root, "pytorch", torch, torch_text)]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _check_module_path(path: str) -> None:
    parts = PurePosixPath(path).parts
    if (not path.endswith(".py") or path.startswith("/") or not parts
            or not all(_MODULE.match(p.removesuffix(".py")) for p in parts)):
        raise ValueError(f"module file {path!r}: give a relative path of Python names ending in .py "
                         f"(e.g. 'hello.py' or 'pkg/__init__.py')")


def build_wheel(dest: str | Path, name: str, version: str, modules: Mapping[str, str], summary: str = "") -> Path:
    """Write ``{name}-{version}-py3-none-any.whl`` into ``dest`` (made if missing) and return its path.

    ``modules`` maps file names inside the wheel (``"hello.py"``, ``"pkg/__init__.py"``) to their
    source. The wheel holds them, its METADATA, WHEEL and a RECORD with each file's sha256, as
    ``pip wheel`` would make it; the same input gives the same bytes."""
    _check_word("package name", name)
    _check_word("version", version)
    if not modules:
        raise ValueError(f"wheel {name}: give at least one module file")
    for path in modules:
        _check_module_path(path)
    stem = re.sub(r"[-_.]+", "_", name)
    info = f"{stem}-{version}.dist-info"
    files = {path: source.encode() for path, source in modules.items()}
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 f"Summary: {summary}\n").encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: hpcnb.lessons.softenv\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    out = Path(dest) / f"{stem}-{version}-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, _EPOCH)
            entry.external_attr = 0o644 << 16
            whl.writestr(entry, data, zipfile.ZIP_DEFLATED)
    return out


#: What Lmod (or Environment Modules) puts into a shell's environment: the ``module`` function and its state.
_MODULE_VARIABLES = re.compile(r"^(BASH_FUNC_(module|ml|_module_raw)%%|BASH_ENV$|MODULEPATH|MODULESHOME$|LMOD_|"
                               r"_LMFILES_$|LOADEDMODULES$|__LMOD_)")


def without_course_environment(env: Mapping[str, str], bin_dir: str | Path | None = None) -> dict[str, str]:
    """``env`` as a shell would have it that neither activated the course's environment nor set up
    Lmod: without ``bin_dir`` (default: this kernel's interpreter's folder) on ``PATH``, without
    ``VIRTUAL_ENV``, and without the ``module`` function and its variables. A job submitted from it
    with ``--export=ALL`` finds neither the course's ``python`` nor ``module``; one that starts from
    the login environment (``--export=NONE``) and loads its modules does not care (exercises 3b)."""
    bin_dir = str(Path(bin_dir) if bin_dir is not None else Path(sys.executable).parent)
    out = {k: v for k, v in env.items() if not _MODULE_VARIABLES.match(k) and k != "VIRTUAL_ENV"}
    out["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if p and p.rstrip("/") != bin_dir.rstrip("/"))
    return out
