"""Tests for hpcnb.lessons.storage: real writes, real reads, checksums, inode counts, staging safety."""

from __future__ import annotations

import io
import math
import os
import tarfile
import time
from pathlib import Path

import pytest

from hpcnb.lessons import storage as st

N, SIZE, MAXCOUNT = 60, 256, 16


@pytest.fixture(scope="module")
def samples() -> list[st.Sample]:
    return st.make_samples(N, SIZE, seed=7)


def test_make_samples_is_deterministic_and_sized() -> None:
    a, b = st.make_samples(5, 100, seed=1), st.make_samples(5, 100, seed=1)
    c = st.make_samples(5, 100, seed=2)
    assert a == b
    assert a != c
    assert all(len(s.data) == 100 for s in a)
    assert len({s.key for s in a}) == 5
    assert st.digest_samples(a) == st.digest_samples(list(reversed(a)))
    assert st.digest_samples(a) != st.digest_samples(c)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_make_samples_rejects_bad_sizes(bad: object) -> None:
    with pytest.raises(ValueError, match="n must be a positive integer"):
        st.make_samples(bad, 10)  # type: ignore[arg-type]


def test_small_files_round_trip(tmp_path: Path, samples: list[st.Sample]) -> None:
    res = st.write_small_files(samples, tmp_path / "sf")
    assert res.files == 2 * N >= N  # one payload + one label file per sample
    assert len(list((tmp_path / "sf").iterdir())) == res.files
    assert res.payload_bytes == N * SIZE
    back = st.read_small_files(res.path, res.digest)
    assert (back.samples, back.payload_bytes, back.files_opened) == (N, N * SIZE, 2 * N)
    assert back.digest == st.digest_samples(samples)


def test_tar_round_trip(tmp_path: Path, samples: list[st.Sample]) -> None:
    res = st.write_tar(samples, tmp_path / "tar")
    assert res.files == 1
    with tarfile.open(tmp_path / "tar" / "data.tar") as tf:
        assert len(tf.getmembers()) == 2 * N
    back = st.read_tar(res.path, res.digest)
    assert back.samples == N and back.files_opened == 1


def test_webdataset_round_trip_and_shard_count(tmp_path: Path, samples: list[st.Sample]) -> None:
    res = st.write_webdataset(samples, tmp_path / "wds", maxcount=MAXCOUNT)
    shards = sorted((tmp_path / "wds").glob("shard-*.tar"))
    assert res.files == len(shards) == math.ceil(N / MAXCOUNT) == 4
    back = st.read_webdataset(res.path, res.digest)
    assert back.samples == N and back.files_opened == len(shards)
    assert back.digest == st.digest_samples(samples)


def test_corruption_is_detected(tmp_path: Path, samples: list[st.Sample]) -> None:
    res = st.write_small_files(samples, tmp_path / "sf")
    victim = tmp_path / "sf" / f"{samples[3].key}.bin"
    data = bytearray(victim.read_bytes())
    data[0] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(st.ChecksumMismatchError, match="checksum"):
        st.read_small_files(res.path, res.digest)


def test_missing_sample_is_detected_in_webdataset(tmp_path: Path, samples: list[st.Sample]) -> None:
    res = st.write_webdataset(samples, tmp_path / "wds", maxcount=MAXCOUNT)
    sorted((tmp_path / "wds").glob("*.tar"))[-1].unlink()
    with pytest.raises(st.ChecksumMismatchError):
        st.read_webdataset(res.path, res.digest)


def test_writers_refuse_non_empty_directory(tmp_path: Path, samples: list[st.Sample]) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "old").write_text("leftover")
    with pytest.raises(FileExistsError, match="not empty"):
        st.write_tar(samples, tmp_path / "x")


def test_latency_knob_adds_at_least_n_times_latency(tmp_path: Path, samples: list[st.Sample]) -> None:
    lat = 0.002
    fast = st.write_small_files(samples, tmp_path / "a")
    slow = st.write_small_files(samples, tmp_path / "b", metadata_latency_s=lat)
    assert slow.write_s >= N * lat  # a sleep per file, each at least lat (not a difference of two timings)
    assert slow.simulated_latency_s == lat and fast.simulated_latency_s == 0
    t0 = time.perf_counter()
    back = st.read_small_files(slow.path, slow.digest, metadata_latency_s=lat)
    assert back.seconds >= back.files_opened * lat >= N * lat
    assert time.perf_counter() - t0 >= N * lat
    # a tar shard pays the latency once per file it writes, not per sample
    tar = st.write_tar(samples, tmp_path / "c", metadata_latency_s=lat)
    assert tar.files == 1 < N <= slow.files


def test_latency_must_be_non_negative(tmp_path: Path, samples: list[st.Sample]) -> None:
    with pytest.raises(ValueError, match="metadata_latency_s"):
        st.write_small_files(samples, tmp_path / "a", metadata_latency_s=-1)


def test_compare_layouts_table(tmp_path: Path) -> None:
    table = st.compare_layouts(tmp_path, n=40, size=128, maxcount=10)
    assert [r.layout for r in table] == ["small_files", "tar", "webdataset"]
    assert [r.files for r in table] == [80, 1, 4]
    for r in table:
        assert r.samples == 40 and r.read_s is not None and r.read_s > 0 and r.write_s > 0
        assert r.mb_per_s == pytest.approx(40 * 128 / 1e6 / r.read_s)
        assert r.files_per_s == pytest.approx(r.files / r.read_s)
        assert r.simulated_latency_s == 0
    md = table.to_markdown()
    assert sum(line.startswith("| ") for line in md.splitlines()) == 4  # header + 3 rows
    assert "(simulated)" not in md and "**Simulated**" not in md
    assert table.as_dicts()[1]["layout"] == "tar"


def test_compare_layouts_repeats_the_reads_and_gives_their_spread(tmp_path: Path) -> None:
    table = st.compare_layouts(tmp_path, n=40, size=128, maxcount=10, repeats=3)
    for r in table:
        assert len(r.read_runs) == 3 and r.read_s == sorted(r.read_runs)[1]
        low, high = r.mb_per_s_range
        assert low == pytest.approx(40 * 128 / 1e6 / max(r.read_runs)) and low <= r.mb_per_s <= high
    assert "read s (median of 3, range)" in table.to_markdown()
    with pytest.raises(ValueError, match="repeats"):
        st.compare_layouts(tmp_path / "none", n=4, repeats=0)


def test_read_ratio_spans_the_slowest_and_fastest_reads() -> None:
    def result(runs: tuple[float, ...]) -> st.LayoutResult:
        return st.LayoutResult("x", "p", 10, 1_000_000, 1, 0, 0, 0.1, sorted(runs)[len(runs) // 2], 0.0, "d", runs)

    ratio, low, high = st.read_ratio(result((1.0, 2.0, 4.0)), result((1.0, 1.0, 1.0)))
    assert (ratio, low, high) == (0.5, 0.25, 1.0)  # "a" has half "b"'s median rate; 1x is in reach
    assert st.read_ratio(result((1.0,)), result((2.0,))) == (2.0, 2.0, 2.0)  # one read each: no range


def test_compare_layouts_says_simulated(tmp_path: Path) -> None:
    table = st.compare_layouts(tmp_path, n=10, size=64, maxcount=5, metadata_latency_s=0.001)
    md = str(table)
    assert md.startswith("**Simulated**")
    assert md.count("1 ms (simulated)") == 3
    small = table[0]
    assert small.write_s >= small.files * 0.001 and small.read_s >= small.files * 0.001


def test_du_and_count_files(tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_bytes(b"x" * 1000)
    (tmp_path / "d" / "e" / "b.txt").write_bytes(b"y" * 10)
    os.link(tmp_path / "d" / "a.txt", tmp_path / "d" / "hard.txt")
    os.symlink("a.txt", tmp_path / "d" / "link")
    usage = st.du(tmp_path / "d")
    # find d | wc -l -> d, e, a.txt, b.txt, hard.txt, link
    assert usage.inodes == 6
    assert usage.files == 3 == st.count_files(tmp_path / "d")
    assert usage.bytes == 1000 + 10 + len("a.txt")  # hard link counted once
    assert usage.disk_bytes >= usage.bytes - len("a.txt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        st.du(tmp_path / "nope")


def test_stage_out_then_stage_in_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "results"
    (src / "ckpt").mkdir(parents=True)
    (src / "ckpt" / "model.pt").write_bytes(b"\x00" * 5000)
    (src / "log.txt").write_text("epoch 1\n")
    out = st.stage_out(src, tmp_path / "project" / "results.tar.gz", compression="gz")
    assert (out.files, out.bytes) == (2, 5008)
    assert not (tmp_path / "project" / "results.tar.gz.partial").exists()
    scratch = tmp_path / "slurm_tmpdir"
    res = st.stage_in(out.dest, scratch)
    assert (res.files, res.bytes) == (2, 5008)
    assert (scratch / "ckpt" / "model.pt").read_bytes() == b"\x00" * 5000
    assert (scratch / "log.txt").read_text() == "epoch 1\n"
    assert not (scratch / "results.tar.gz").exists()  # the copied archive is removed


def _evil_tar(path: Path, name: str, *, linkname: str | None = None,
              kind: bytes = tarfile.REGTYPE) -> Path:
    with tarfile.open(path, "w") as tf:
        info = tarfile.TarInfo(name)
        info.type = kind
        if linkname is not None:
            info.linkname = linkname
            tf.addfile(info)
        else:
            info.size = 4
            tf.addfile(info, io.BytesIO(b"evil"))
    return path


@pytest.mark.parametrize("name, linkname, kind, message", [
    ("../escape.txt", None, tarfile.REGTYPE, r"contains '\.\.'"),
    ("a/../../escape.txt", None, tarfile.REGTYPE, r"contains '\.\.'"),
    ("/tmp/abs.txt", None, tarfile.REGTYPE, "absolute path"),
    ("link", "/etc/passwd", tarfile.SYMTYPE, "points outside"),
    ("sub/link", "../../etc", tarfile.SYMTYPE, "points outside"),
])
def test_stage_in_rejects_traversal(tmp_path: Path, name: str, linkname: str | None,
                                    kind: bytes, message: str) -> None:
    archive = _evil_tar(tmp_path / "evil.tar", name, linkname=linkname, kind=kind)
    dest = tmp_path / "scratch" / "inner"
    with pytest.raises(st.UnsafeArchiveError, match=message):
        st.stage_in(archive, dest)
    assert list(dest.iterdir()) == []  # nothing extracted, copied archive removed
    assert not (tmp_path / "scratch" / "escape.txt").exists()


def test_stage_in_allows_internal_symlink(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "data" / "x.bin").write_bytes(b"123")
    os.symlink("data/x.bin", src / "latest")
    st.stage_out(src, tmp_path / "a.tar")
    st.stage_in(tmp_path / "a.tar", tmp_path / "out")
    assert (tmp_path / "out" / "latest").read_bytes() == b"123"


def test_stage_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="src_archive"):
        st.stage_in(tmp_path / "missing.tar", tmp_path / "d")
    with pytest.raises(NotADirectoryError, match="src_dir"):
        st.stage_out(tmp_path / "missing", tmp_path / "a.tar")
    (tmp_path / "s").mkdir()
    with pytest.raises(ValueError, match="inside src_dir"):
        st.stage_out(tmp_path / "s", tmp_path / "s" / "a.tar")
    with pytest.raises(ValueError, match="compression"):
        st.stage_out(tmp_path / "s", tmp_path / "a.tar", compression="zip")
