"""Lesson 2 (storage tiers): the small-files problem, measured: three dataset layouts, inode
counting, staging.

A cluster filesystem (Lustre, GPFS, NFS) pays a metadata round trip for every
file it creates or opens, and quotas count files as well as bytes (CSCS's Piz
Daint, since retired: 1M files on $SCRATCH). This module writes the same
synthetic dataset three ways,

* ``small_files``: one ``.bin`` + one ``.cls`` label file per sample,
* ``tar``: one tar shard written with :mod:`tarfile`,
* ``webdataset``: several shards written with ``webdataset.ShardWriter``,

reads every sample back with a checksum check, and times both directions.
``metadata_latency_s`` adds a ``time.sleep`` per file create/open (per file for
``small_files``, per shard for the tar layouts) to *simulate* the metadata cost
of a network filesystem on a laptop; results carry it as
``simulated_latency_s`` so a printout can never pass it off as a real
measurement. Times without it are real, but local: the files were just written
and are read back from the page cache.

``stage_in`` / ``stage_out`` implement the "copy one archive to node-local
``$SLURM_TMPDIR``, extract, work, pack results back" pattern, refusing archive
members that would escape the destination.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import random
import shutil
import stat
import statistics
import tarfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path, PurePosixPath

from . import markdown
from .spread import ratio_range

__all__ = [
    "Sample", "LayoutResult", "LayoutTable", "DiskUsage", "StageResult",
    "ChecksumMismatchError", "UnsafeArchiveError",
    "make_samples", "digest_samples",
    "write_small_files", "read_small_files", "write_tar", "read_tar",
    "write_webdataset", "read_webdataset", "compare_layouts", "read_ratio",
    "count_files", "du", "stage_in", "stage_out",
]

LAYOUTS = ("small_files", "tar", "webdataset")


class ChecksumMismatchError(RuntimeError):
    """Data read back differs from what was written."""


class UnsafeArchiveError(ValueError):
    """An archive member would be written outside the destination directory."""


@dataclass(frozen=True)
class Sample:
    """One synthetic training sample: a key, a payload and an integer label."""

    key: str
    data: bytes
    label: int


def make_samples(n: int, size_bytes: int, seed: int = 0, num_classes: int = 10) -> list[Sample]:
    """Return ``n`` deterministic pseudo-random samples of ``size_bytes`` each."""
    _check_positive_int("n", n)
    _check_positive_int("size_bytes", size_bytes)
    _check_positive_int("num_classes", num_classes)
    rng = random.Random(seed)
    return [
        Sample(key=f"sample{i:07d}", data=rng.randbytes(size_bytes), label=rng.randrange(num_classes))
        for i in range(n)
    ]


def digest_samples(samples: Iterable[Sample]) -> str:
    """Order-independent SHA-256 over every sample's key, payload and label."""
    per_sample = sorted(
        f"{s.key}:{hashlib.sha256(s.data).hexdigest()}:{s.label}" for s in samples
    )
    return hashlib.sha256("\n".join(per_sample).encode()).hexdigest()


@dataclass(frozen=True)
class ReadBack:
    """What a reader found: sample count, payload bytes, digest, time, files opened."""

    samples: int
    payload_bytes: int
    digest: str
    seconds: float
    files_opened: int


@dataclass(frozen=True)
class LayoutResult:
    """Measurements for one layout; ``read_s`` is None until it was read back, then the median of
    ``read_runs`` (every read-back's seconds) when it was read more than once."""

    layout: str
    path: str
    samples: int
    payload_bytes: int
    files: int
    bytes: int
    disk_bytes: int
    write_s: float
    read_s: float | None
    simulated_latency_s: float
    digest: str
    read_runs: tuple[float, ...] = ()

    @property
    def mb_per_s_range(self) -> tuple[float, float] | None:
        """Slowest and fastest read throughput of the repeated reads (MB/s)."""
        if not self.read_runs:
            return None
        return self.payload_bytes / 1e6 / max(self.read_runs), self.payload_bytes / 1e6 / min(self.read_runs)

    @property
    def files_per_s(self) -> float | None:
        """Files opened per second while reading (the metadata rate)."""
        return None if not self.read_s else self.files / self.read_s

    @property
    def samples_per_s(self) -> float | None:
        """Samples read per second."""
        return None if not self.read_s else self.samples / self.read_s

    @property
    def mb_per_s(self) -> float | None:
        """Read throughput of sample payload in MB/s (10^6 bytes; tar headers excluded)."""
        return None if not self.read_s else self.payload_bytes / 1e6 / self.read_s

    def as_dict(self) -> dict[str, object]:
        """Flat dict row including the derived rates."""
        row = asdict(self)
        row.update(files_per_s=self.files_per_s, samples_per_s=self.samples_per_s,
                   mb_per_s=self.mb_per_s)
        return row


class LayoutTable(list):
    """A list of :class:`LayoutResult` rows that prints as a Markdown table."""

    def as_dicts(self) -> list[dict[str, object]]:
        """Rows as plain dicts (e.g. for ``csv.DictWriter``)."""
        return [r.as_dict() for r in self]

    def to_markdown(self) -> str:
        """Markdown table; a note above it flags simulated metadata latency."""
        runs = max((len(r.read_runs) for r in self), default=0)
        read = f"read s (median of {runs}, range)" if runs > 1 else "read s"
        head = ["layout", "files", "MB apparent", "MB allocated", "write s", read,
                "files/s", "samples/s", "payload MB/s", "simulated latency"]
        rows = []
        for r in self:
            spread = f" ({min(r.read_runs):.3f}–{max(r.read_runs):.3f})" if len(r.read_runs) > 1 else ""
            cells = [r.layout, str(r.files), f"{r.bytes / 1e6:.2f}", f"{r.disk_bytes / 1e6:.2f}",
                     f"{r.write_s:.3f}", _fmt(r.read_s, ".3f") + spread, _fmt(r.files_per_s, ",.0f"),
                     _fmt(r.samples_per_s, ",.0f"), _fmt(r.mb_per_s, ".1f"),
                     f"{r.simulated_latency_s * 1e3:g} ms (simulated)" if r.simulated_latency_s
                     else "none"]
            rows.append(cells)
        lines = [markdown.table(head, rows)]
        sim = sorted({r.simulated_latency_s for r in self if r.simulated_latency_s})
        if sim:
            ms = ", ".join(f"{s * 1e3:g} ms" for s in sim)
            lines.insert(0, f"**Simulated** metadata latency of {ms} (a time.sleep per file "
                            "create/open) is included in these times; it is not a real "
                            "network-filesystem measurement.\n")
        lines.append("\nReads follow the writes directly, so they come from the warm page cache.")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_markdown()

    def _repr_markdown_(self) -> str:  # Jupyter renders this
        return self.to_markdown()


# --------------------------------------------------------------------------- layouts

def write_small_files(samples: Sequence[Sample], dest: str | os.PathLike,
                      metadata_latency_s: float = 0.0) -> LayoutResult:
    """Write one ``<key>.bin`` and one ``<key>.cls`` file per sample into ``dest``."""
    dest = _fresh_dir(dest)
    _check_latency(metadata_latency_s)
    t0 = time.perf_counter()
    for s in samples:
        for suffix, payload in ((".bin", s.data), (".cls", str(s.label).encode())):
            _simulate(metadata_latency_s)
            (dest / f"{s.key}{suffix}").write_bytes(payload)
    return _result("small_files", dest, samples, time.perf_counter() - t0, metadata_latency_s)


def read_small_files(src: str | os.PathLike, expected_digest: str | None = None,
                     metadata_latency_s: float = 0.0) -> ReadBack:
    """Read every ``.bin``/``.cls`` pair in ``src``; verify against ``expected_digest``."""
    src = Path(src)
    _check_latency(metadata_latency_s)
    t0 = time.perf_counter()
    keys = sorted(p.name[:-4] for p in os.scandir(src) if p.name.endswith(".bin"))
    samples, opened = [], 0
    for key in keys:
        _simulate(metadata_latency_s)
        data = (src / f"{key}.bin").read_bytes()
        _simulate(metadata_latency_s)
        label = _parse_label((src / f"{key}.cls").read_bytes(), f"{src / key}.cls")
        opened += 2
        samples.append(Sample(key, data, label))
    return _readback(samples, time.perf_counter() - t0, opened, expected_digest, src)


def write_tar(samples: Sequence[Sample], dest: str | os.PathLike,
              metadata_latency_s: float = 0.0, name: str = "data.tar") -> LayoutResult:
    """Write all samples as ``<key>.bin``/``<key>.cls`` members of one tar in ``dest``."""
    dest = _fresh_dir(dest)
    _check_latency(metadata_latency_s)
    t0 = time.perf_counter()
    _simulate(metadata_latency_s)
    with tarfile.open(dest / name, "w", format=tarfile.USTAR_FORMAT) as tf:
        for s in samples:
            for suffix, payload in ((".bin", s.data), (".cls", str(s.label).encode())):
                info = tarfile.TarInfo(f"{s.key}{suffix}")
                info.size, info.mode, info.mtime = len(payload), 0o444, 0
                tf.addfile(info, io.BytesIO(payload))
    return _result("tar", dest, samples, time.perf_counter() - t0, metadata_latency_s)


def read_tar(src: str | os.PathLike, expected_digest: str | None = None,
             metadata_latency_s: float = 0.0) -> ReadBack:
    """Stream every ``*.tar`` in ``src`` sequentially (mode ``r|``) and verify."""
    src = Path(src)
    _check_latency(metadata_latency_s)
    t0 = time.perf_counter()
    shards = sorted(src.glob("*.tar"))
    parts: dict[str, dict[str, bytes]] = {}
    for shard in shards:
        _simulate(metadata_latency_s)
        with tarfile.open(shard, "r|") as tf:
            for m in tf:
                if not m.isfile():
                    continue
                key, _, ext = m.name.rpartition(".")
                parts.setdefault(key, {})[ext] = tf.extractfile(m).read()
    samples = [_sample_from_parts(k, v, src) for k, v in sorted(parts.items())]
    return _readback(samples, time.perf_counter() - t0, len(shards), expected_digest, src)


def write_webdataset(samples: Sequence[Sample], dest: str | os.PathLike, maxcount: int = 500,
                     metadata_latency_s: float = 0.0) -> LayoutResult:
    """Write samples with ``webdataset.ShardWriter`` into ``shard-%06d.tar`` files."""
    import webdataset as wds

    _check_positive_int("maxcount", maxcount)
    dest = _fresh_dir(dest)
    _check_latency(metadata_latency_s)

    def opener(fname: str) -> str:  # ShardWriter calls this once per new shard
        _simulate(metadata_latency_s)
        return fname

    t0 = time.perf_counter()
    with wds.ShardWriter(str(dest / "shard-%06d.tar"), maxcount=maxcount, verbose=0,
                         opener=opener, mtime=0) as sink:
        for s in samples:
            sink.write({"__key__": s.key, "bin": s.data, "cls": str(s.label).encode()})
    return _result("webdataset", dest, samples, time.perf_counter() - t0, metadata_latency_s)


def read_webdataset(src: str | os.PathLike, expected_digest: str | None = None,
                    metadata_latency_s: float = 0.0) -> ReadBack:
    """Iterate ``webdataset.WebDataset`` over every shard in ``src`` and verify.

    Node/worker splitting and shuffling are off: a verifier must see every sample.
    The simulated latency is charged when the first sample of a new shard appears.
    """
    import webdataset as wds

    src = Path(src)
    _check_latency(metadata_latency_s)
    urls = [str(p) for p in sorted(src.glob("*.tar"))]
    if not urls:
        raise FileNotFoundError(f"no *.tar shards in {src}; write them with write_webdataset()")
    t0 = time.perf_counter()
    ds = wds.WebDataset(urls, shardshuffle=False, nodesplitter=None, workersplitter=None)
    samples, current = [], None
    for rec in ds:
        if rec["__url__"] != current:
            current = rec["__url__"]
            _simulate(metadata_latency_s)
        samples.append(_sample_from_parts(rec["__key__"], rec, src))
    return _readback(samples, time.perf_counter() - t0, len(urls), expected_digest, src)


def compare_layouts(root: str | os.PathLike, n: int = 1000, size: int = 8192,
                    metadata_latency_s: float = 0.0, maxcount: int = 250,
                    seed: int = 0, repeats: int = 5) -> LayoutTable:
    """Write, read back and verify the same ``n`` samples in all three layouts.

    Writes into ``root/small_files``, ``root/tar`` and ``root/webdataset`` (each
    must be absent or empty), then reads each layout back ``repeats`` times, the
    layouts taking turns (so a slow moment of the machine falls on all of them);
    ``read_s`` is the median, ``read_runs`` every time. Defaults (1000 x 8 KiB,
    4 webdataset shards, 5 reads) take about 3 s on a 2-core laptop (most of it
    importing webdataset); ``metadata_latency_s=0.001`` adds 2 ms per small file
    and read (2000 files: 2 s a read).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    root = Path(root)
    samples = make_samples(n, size, seed)
    layouts = {
        "small_files": (lambda d: write_small_files(samples, d, metadata_latency_s), read_small_files),
        "tar": (lambda d: write_tar(samples, d, metadata_latency_s), read_tar),
        "webdataset": (lambda d: write_webdataset(samples, d, maxcount, metadata_latency_s), read_webdataset),
    }
    written = {name: write(root / name) for name, (write, _) in layouts.items()}
    runs: dict[str, list[float]] = {name: [] for name in layouts}
    for _ in range(repeats):
        for name, (_, read) in layouts.items():
            res = written[name]
            runs[name].append(read(res.path, res.digest, metadata_latency_s).seconds)
    return LayoutTable(replace(written[name], read_s=statistics.median(runs[name]), read_runs=tuple(runs[name]))
                       for name in layouts)


def read_ratio(a: LayoutResult, b: LayoutResult) -> tuple[float, float, float]:
    """How many times ``b``'s read throughput ``a`` has: (median, lowest, highest), the range from
    the slowest read of ``a`` against the fastest of ``b`` and the other way round (lesson 2)."""
    return ratio_range(b.read_runs or (b.read_s,), a.read_runs or (a.read_s,))  # throughput: 1 / seconds


# --------------------------------------------------------------------------- quotas

@dataclass(frozen=True)
class DiskUsage:
    """Like ``du -s`` (apparent and allocated bytes) plus ``find | wc -l`` (inodes)."""

    path: str
    bytes: int
    disk_bytes: int
    inodes: int
    files: int

    def __str__(self) -> str:
        return (f"{self.path}: {self.bytes / 1e6:.2f} MB apparent, {self.disk_bytes / 1e6:.2f} MB "
                f"allocated, {self.inodes} inodes ({self.files} regular files)")


def du(path: str | os.PathLike) -> DiskUsage:
    """Bytes and inodes under ``path`` without following symlinks; hard links count once.

    ``inodes`` counts ``path`` itself and every entry below it, like
    ``find PATH | wc -l``; this is what a file-count quota charges.
    """
    root = Path(path)
    if not root.exists() and not root.is_symlink():
        raise FileNotFoundError(f"du: {root} does not exist")
    seen: set[tuple[int, int]] = set()
    apparent = allocated = inodes = files = 0
    for p in _walk(root):
        st = p.lstat()
        inodes += 1
        if stat.S_ISREG(st.st_mode):
            files += 1
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        if not stat.S_ISDIR(st.st_mode):
            apparent += st.st_size
        allocated += st.st_blocks * 512
    return DiskUsage(str(root), apparent, allocated, inodes, files)


def count_files(path: str | os.PathLike) -> int:
    """Number of regular files under ``path`` (``find PATH -type f | wc -l``)."""
    return du(path).files


# --------------------------------------------------------------------------- staging

@dataclass(frozen=True)
class StageResult:
    """Outcome of a stage-in or stage-out: where, how many files and bytes, how long."""

    src: str
    dest: str
    files: int
    bytes: int
    seconds: float


def stage_in(src_archive: str | os.PathLike, dest_dir: str | os.PathLike,
             keep_archive: bool = False) -> StageResult:
    """Copy a tar to node-local ``dest_dir`` (e.g. ``$SLURM_TMPDIR``) and extract it there.

    Every member is checked first: absolute paths, ``..`` components, links
    pointing outside ``dest_dir`` and device files raise
    :class:`UnsafeArchiveError` and nothing is extracted. Extraction also uses
    ``filter='data'`` where this Python provides it.
    """
    src, dest = Path(src_archive), Path(dest_dir)
    if not src.is_file():
        raise FileNotFoundError(f"stage_in: src_archive {src} does not exist or is not a file")
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    local = dest / src.name
    shutil.copyfile(src, local)  # one big sequential read from the shared filesystem
    try:
        with tarfile.open(local) as tf:
            members = tf.getmembers()
            for m in members:
                _check_member(m, src)
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:  # pragma: no cover - Pythons without PEP 706
                tf.extractall(dest)
    finally:
        if not keep_archive:
            local.unlink(missing_ok=True)
    files = [m for m in members if m.isfile()]
    return StageResult(str(src), str(dest), len(files), sum(m.size for m in files),
                       time.perf_counter() - t0)


def stage_out(src_dir: str | os.PathLike, dest_archive: str | os.PathLike,
              compression: str = "") -> StageResult:
    """Pack ``src_dir`` into one tar at ``dest_archive`` (written to ``.partial``, then renamed).

    ``compression`` is ``""``, ``"gz"``, ``"bz2"`` or ``"xz"``. Member names are
    relative to ``src_dir``, so :func:`stage_in` recreates the same tree.
    """
    src, dest = Path(src_dir), Path(dest_archive)
    if not src.is_dir():
        raise NotADirectoryError(f"stage_out: src_dir {src} is not a directory")
    if compression not in ("", "gz", "bz2", "xz"):
        raise ValueError(f"stage_out: compression={compression!r}; use '', 'gz', 'bz2' or 'xz'")
    if dest.resolve().is_relative_to(src.resolve()):
        raise ValueError(f"stage_out: dest_archive {dest} is inside src_dir {src}; "
                         "write the archive somewhere else")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    t0 = time.perf_counter()
    nfiles = nbytes = 0
    with tarfile.open(partial, f"w:{compression}" if compression else "w") as tf:
        for p in sorted(_walk(src)):
            if p == src:
                continue
            tf.add(p, arcname=p.relative_to(src).as_posix(), recursive=False)
            if p.is_file() and not p.is_symlink():
                nfiles += 1
                nbytes += p.stat().st_size
    os.replace(partial, dest)  # a killed job never leaves a truncated archive under dest
    return StageResult(str(src), str(dest), nfiles, nbytes, time.perf_counter() - t0)


# --------------------------------------------------------------------------- helpers

def _check_member(m: tarfile.TarInfo, archive: Path) -> None:
    """Raise UnsafeArchiveError if member ``m`` could land outside the destination."""
    fix = "re-create the archive with relative paths (e.g. with stage_out or `tar -C dir -cf`)"
    name = PurePosixPath(m.name)
    if name.is_absolute() or m.name.startswith(("/", "\\")):
        raise UnsafeArchiveError(f"{archive}: member {m.name!r} has an absolute path; {fix}")
    if ".." in name.parts:
        raise UnsafeArchiveError(f"{archive}: member {m.name!r} contains '..'; {fix}")
    if m.issym() or m.islnk():
        target = PurePosixPath(m.linkname)
        resolved = target if m.islnk() else name.parent / target
        if target.is_absolute() or ".." in _normalise(resolved):
            raise UnsafeArchiveError(f"{archive}: link {m.name!r} -> {m.linkname!r} points "
                                     f"outside the destination; {fix}")
    if m.ischr() or m.isblk() or m.isfifo():
        raise UnsafeArchiveError(f"{archive}: member {m.name!r} is a device or FIFO; {fix}")


def _normalise(p: PurePosixPath) -> tuple[str, ...]:
    """Collapse ``a/../b`` lexically; a leading ``..`` survives and marks an escape."""
    out: list[str] = []
    for part in p.parts:
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            else:
                out.append("..")
        elif part != ".":
            out.append(part)
    return tuple(out)


def _walk(root: Path) -> Iterator[Path]:
    """Yield ``root`` and everything below it, never following symlinks."""
    yield root
    if root.is_dir() and not root.is_symlink():
        for dirpath, dirnames, filenames in os.walk(root):
            base = Path(dirpath)
            for name in dirnames + filenames:
                yield base / name


def _fresh_dir(dest: str | os.PathLike) -> Path:
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty; pass a new or empty directory "
                              "(layouts are measured from scratch)")
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def _result(layout: str, dest: Path, samples: Sequence[Sample], seconds: float,
            latency: float) -> LayoutResult:
    usage = du(dest)
    return LayoutResult(layout, str(dest), len(samples), sum(len(s.data) for s in samples),
                        usage.files, usage.bytes,
                        usage.disk_bytes, seconds, None, latency, digest_samples(samples))


def _readback(samples: list[Sample], seconds: float, opened: int, expected: str | None,
              src: Path) -> ReadBack:
    digest = digest_samples(samples)
    if expected is not None and digest != expected:
        raise ChecksumMismatchError(
            f"{src}: read {len(samples)} samples whose checksum {digest[:12]}... differs from "
            f"the expected {expected[:12]}...; the data is corrupt or incomplete - rewrite it")
    return ReadBack(len(samples), sum(len(s.data) for s in samples), digest, seconds, opened)


def _sample_from_parts(key: str, parts: dict, src: Path) -> Sample:
    if "bin" not in parts or "cls" not in parts:
        raise ChecksumMismatchError(f"{src}: sample {key!r} lacks a .bin or .cls member "
                                    f"(has {sorted(k for k in parts if not k.startswith('__'))})")
    return Sample(key, bytes(parts["bin"]), _parse_label(parts["cls"], f"{src}:{key}.cls"))


def _parse_label(raw: bytes, where: str) -> int:
    try:
        return int(raw.decode().strip())
    except ValueError:
        raise ChecksumMismatchError(f"{where}: label {raw[:20]!r} is not an integer") from None


def _simulate(latency: float) -> None:
    if latency:
        time.sleep(latency)


def _check_latency(latency: float) -> None:
    if not isinstance(latency, (int, float)) or not math.isfinite(latency) or latency < 0:
        raise ValueError(f"metadata_latency_s must be a finite number >= 0 seconds, got {latency!r}")


def _check_positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
