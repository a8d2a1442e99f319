"""Tests for hpcnb.sites: shipped profiles, the local shape, validation errors, quotas, compare."""
from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from hpcnb import sites
from hpcnb.sites import (
    NodeGroup, Partition, Profile, ProfileError, compare, expand_hostlist, list_profiles,
    load_profile, parse_bytes, parse_file_count, parse_time_limit,
)

SHIPPED = {"local", "stability", "narval", "ulysses", "alvis", "hpc2n", "pizdaint", "cscs-alps"}

# A minimal valid profile; tests break it one field at a time.
MINIMAL = textwrap.dedent("""\
    name = "{name}"
    title = "Test site"
    source = "unit test"
    login_hosts = ["login.example.org"]
    gpu_request = "--gres=gpu:1"
    account_required = false
    jupyter = ""
    slurm_tmpdir = false

    [[storage]]
    name = "home"
    path = "$HOME"
    quota_bytes = "50G"
    quota_files = "500k"
    node_local = false
    use = "code"

    [[partitions]]
    name = "main"
    max_time = "1-00:00:00"
    default = true
    nodes = "n[1-2]"

    [[partitions]]
    name = "quick"
    max_time = "00:30:00"

    [[nodes]]
    names = "n[1-2]"
    cpus = 2
    memory_mb = 4000
    """)


def write(tmp_path: Path, text: str, name: str = "site") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace("{name}", name))
    return path


def broken(tmp_path: Path, old: str, new: str) -> Path:
    assert old in MINIMAL, f"test bug: {old!r} not in MINIMAL"
    return write(tmp_path, MINIMAL.replace(old, new, 1))


def error_for(path: Path) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert path.name in message, f"error does not name the file: {message}"
    assert "Fix:" in message, f"error gives no fix: {message}"
    return info.value


# --------------------------------------------------------------------------- shipped profiles


def test_all_expected_profiles_are_shipped() -> None:
    assert SHIPPED <= set(list_profiles())


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_profile_loads_and_is_consistent(name: str) -> None:
    p = load_profile(name)
    assert isinstance(p, Profile) and p.name == name
    assert p.default_partition().default
    assert p.partition() is p.default_partition()
    hosts = [h for g in p.nodes for h in g.hostnames]
    assert len(hosts) == len(set(hosts))
    # local emulation stays laptop-sized
    assert hosts, f"{name} has no nodes"
    assert len(hosts) <= 6, f"{name} has {len(hosts)} nodes"
    assert all(g.cpus <= 4 for g in p.nodes)
    for part in p.partitions:
        members = expand_hostlist(part.nodes) if part.nodes else hosts
        assert set(members) <= set(hosts)
        assert part.max_seconds is None or part.max_seconds > 0
    declared = {g.name for g in p.gpu_types}
    assert all(g.gpu_type is None or g.gpu_type in declared for g in p.nodes)
    if p.account_required:
        assert p.account_directive
    assert set(p.home_forbidden_for) <= {"data", "venv", "cache"}
    assert all(line.startswith("module load ") for line in p.modules.values())
    assert all(r.text and r.source for r in p.rules)


def test_profiles_never_point_at_shared_reference_tree() -> None:
    for path in sites.SITES_DIR.glob("*.toml"):
        assert "/work/shared" not in path.read_text(), path


def test_local_profile_shape_is_exact() -> None:
    p = load_profile("local")
    assert p.nodes == (NodeGroup(names="node[1-2]", cpus=2, memory_mb=8000, gpus=2, gpu_type="v100",
                                 features=("gpu", "v100")),)
    assert p.nodes[0].hostnames == ("node1", "node2")
    assert [part.name for part in p.partitions] == ["debug", "short", "long"]
    debug, short, long = p.partitions
    assert debug.default and debug.max_time == "INFINITE" and debug.max_seconds is None
    assert not short.default and short.max_time == "00:10:00" and short.max_seconds == 600
    assert short.preemptible is False and debug.nodes is None and short.nodes is None
    # ci/real-slurm/slurm.conf's third partition: PartitionName=long DefaultTime=01:00:00 MaxTime=2-00:00:00 MaxNodes=1
    assert (long.max_time, long.default_time, long.max_nodes) == ("2-00:00:00", "01:00:00", 1)
    assert (debug.default_time, debug.max_nodes) == (None, None)
    assert p.accounts == ("course", "research")  # ci/real-slurm.sh's accounts, course the default
    assert p.slurm_tmpdir is True
    assert (p.def_mem_per_cpu_mb, p.kill_wait_s, p.cluster_name) == (500, 2, "hpcnb")
    assert p.slurm_version == "24.11" and p.guide_slurm_version is None  # the release most sites run
    assert p.account_required is False and p.account_directive is None
    tiers = {t.name: t for t in p.storage}
    assert tiers["home"].path == "$HOME"
    assert tiers["scratch"].path.startswith("/tmp/") and "$USER" in tiers["scratch"].path
    assert tiers["node-local"].path == "$SLURM_TMPDIR" and tiers["node-local"].node_local
    assert tiers["ramdisk"].path == "/dev/shm"
    assert all(t.quota_bytes is None and t.quota_files is None for t in p.storage)
    assert len(p.rules) >= 5


def test_site_facts_from_the_guides() -> None:
    narval = load_profile("narval")
    scratch = narval.tier("scratch")
    assert (scratch.quota_bytes, scratch.quota_files) == (20 * 2**40, 10**6)
    assert scratch.backed_up is False and "60 days" in scratch.purged
    assert narval.tier("home").quota_bytes == 50 * 2**30
    assert narval.tier("home").quota_files == 500_000
    assert narval.slurm_tmpdir and narval.default_partition().max_time == "7-00:00:00"
    assert narval.jupyter == ""  # guide 001 is silent about Jupyter

    daint = load_profile("pizdaint")
    assert daint.required_directives == ("--constraint=gpu",)
    assert daint.tier("scratch").quota_files == 10**6 and daint.tier("scratch").quota_bytes is None
    assert daint.default_partition().name == "normal"
    assert daint.login_hosts == ("ela.cscs.ch", "daint.cscs.ch")

    stab = load_profile("stability")
    assert stab.account_directive == "--comment=<project>" and stab.account_required
    assert set(stab.home_forbidden_for) == {"data", "venv", "cache"}
    assert stab.default_partition().name == "gpu"
    assert {"jupyter", "cpu"} <= {part.name for part in stab.partitions}

    uly = load_profile("ulysses")
    assert uly.tier("home").backed_up is True and uly.tier("home").quota_bytes == 200 * 2**30
    assert uly.tier("scratch").purged is None and uly.default_partition().max_time == "12:00:00"

    alvis = load_profile("alvis")
    assert {g.name: g.memory_gb for g in alvis.gpu_types} == {
        "T4": 16.0, "A40": 48.0, "V100": 32.0, "A100": 40.0, "A100fat": 80.0}
    assert alvis.gpu_request == "--gpus-per-node=V100:1"

    hpc2n = load_profile("hpc2n")
    assert hpc2n.login_hosts == () and hpc2n.storage == () and hpc2n.gpu_request == ""
    assert hpc2n.nodes[0].features == ("skylake",)


def test_cscs_alps_facts_from_cscs_docs() -> None:
    """Today's Daint on Alps, from CSCS's documentation (docs/clusters/daint.md, docs/running/slurm.md...)."""
    alps = load_profile("cscs-alps")
    gh200, = alps.gpu_types
    assert (gh200.name, gh200.per_node, gh200.memory_gb) == ("GH200", 4, None)  # no HBM figure in the docs
    assert alps.gpu_request == "--gpus-per-node=4"
    assert alps.slurm_version == "24.05"  # docs/access/firecrest.md: 24.05.4
    assert alps.account_directive == "--account=<project>"
    assert alps.account_required is False  # docs/running/slurm.md: --account "no longer required"
    limits = {part.name: part.max_time for part in alps.partitions}
    assert limits == {"normal": "1-00:00:00", "debug": "00:30:00", "xfer": "1-00:00:00", "low": "1-00:00:00"}
    assert alps.default_partition().name == "normal"
    scratch = alps.tier("scratch")
    assert (scratch.quota_bytes, scratch.quota_files) == (150 * 2**40, 10**6)
    assert scratch.backed_up is False and "30 days" in scratch.purged
    assert alps.tier("home").quota_files == 500_000 and alps.tier("store").backed_up is True
    assert not alps.slurm_tmpdir and alps.tier("ramdisk").node_local
    assert "jupyter-daint.cscs.ch" in alps.jupyter
    assert alps.login_hosts == ("ela.cscs.ch", "daint.alps.cscs.ch")
    text = (sites.SITES_DIR / "cscs-alps.toml").read_text()
    assert all(r.source.startswith("docs/") for r in alps.rules)
    assert text.count("docs/") >= 20  # every fact names its file in CSCS's docs
    assert any("cscs-alps" in note for note in load_profile("pizdaint").notes)  # the retired XC points here


def test_partition_and_tier_lookups() -> None:
    p = load_profile("local")
    assert p.partition("short").max_time == "00:10:00"
    assert p.partition(None).name == "debug"
    with pytest.raises(ProfileError, match=r"debug, short, long"):
        p.partition("gpu")
    assert p.tier("home").path == "$HOME"
    with pytest.raises(ProfileError, match=r"home, scratch"):
        p.tier("project")


def test_storage_tier_expand() -> None:
    tier = load_profile("local").tier("scratch")
    assert tier.expand({"USER": "ada"}) == "/tmp/hpcnb-ada/scratch"
    assert load_profile("local").tier("node-local").expand({}) == "$SLURM_TMPDIR"


# --------------------------------------------------------------------------- validation


def test_minimal_profile_is_valid(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, MINIMAL))
    assert p.name == "site" and p.partition("quick").max_seconds == 1800
    assert p.tier("home").quota_bytes == 50 * 2**30 and p.tier("home").quota_files == 500_000
    assert p.modules == {} and p.account_directive is None and p.def_mem_per_cpu_mb == 500


def test_typo_key_is_rejected_with_suggestion(tmp_path: Path) -> None:
    err = error_for(broken(tmp_path, 'max_time = "00:30:00"', 'max_tme = "00:30:00"'))
    assert err.field == "partitions[1].max_tme"
    assert "unknown key" in str(err) and "max_time" in str(err)


def test_typo_top_level_key_is_rejected(tmp_path: Path) -> None:
    err = error_for(broken(tmp_path, "slurm_tmpdir = false", "slurm_tmpdir = false\nslurm_tempdir = true"))
    assert err.field == "slurm_tempdir" and "slurm_tmpdir" in str(err)


@pytest.mark.parametrize("old, new, field", [
    ("cpus = 2\n", "", "nodes[0].cpus"),
    ('title = "Test site"\n', "", "title"),
    ('jupyter = ""\n', "", "jupyter"),
    ('login_hosts = ["login.example.org"]\n', "", "login_hosts"),
    ('use = "code"\n', "", "storage[0].use"),
])
def test_missing_field_is_named(tmp_path: Path, old: str, new: str, field: str) -> None:
    err = error_for(broken(tmp_path, old, new))
    assert err.field == field and f"'{field}'" in str(err) and "missing" in str(err)


@pytest.mark.parametrize("shebang", ["bash", "#!bash", "#!/bin/bash; rm -rf ~"])
def test_a_shebang_that_is_no_absolute_interpreter_is_refused(tmp_path: Path, shebang: str) -> None:
    err = error_for(broken(tmp_path, "slurm_tmpdir = false", f"slurm_tmpdir = false\nshebang = {shebang!r}"))
    assert err.field == "shebang" and "#!/bin/bash -l" in str(err)


def test_missing_nodes_section(tmp_path: Path) -> None:
    text = MINIMAL[: MINIMAL.index("[[nodes]]")].replace('nodes = "n[1-2]"\n', "")
    err = error_for(write(tmp_path, text))
    assert err.field == "nodes"


def test_two_default_partitions(tmp_path: Path) -> None:
    err = error_for(broken(tmp_path, 'max_time = "00:30:00"', 'max_time = "00:30:00"\ndefault = true'))
    assert err.field == "partitions.default" and "main, quick" in str(err)


def test_no_default_partition(tmp_path: Path) -> None:
    err = error_for(broken(tmp_path, "default = true\n", ""))
    assert err.field == "partitions.default" and "found 0" in str(err)


@pytest.mark.parametrize("bad", ["1:2:3:4", "abc", "-5", "0", "1 day", ""])
def test_bad_time_is_rejected(tmp_path: Path, bad: str) -> None:
    err = error_for(broken(tmp_path, '"00:30:00"', f'"{bad}"'))
    assert err.field == "partitions[1].max_time"


@pytest.mark.parametrize("text, seconds", [("1-25:00:00", 49 * 3600), ("10:61", 661), ("1:90", 150)])
def test_time_fields_are_not_range_checked_as_in_slurm(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


def test_time_written_as_number_is_rejected(tmp_path: Path) -> None:
    err = error_for(broken(tmp_path, '"00:30:00"', "30"))
    assert err.field == "partitions[1].max_time" and "quotes" in str(err)


def test_partition_limits_and_accounts_are_read(tmp_path: Path) -> None:
    p = load_profile(broken(tmp_path, 'max_time = "00:30:00"',
                            'max_time = "00:30:00"\ndefault_time = "10:00"\nmax_nodes = 1'))
    assert (p.partition("quick").default_time, p.partition("quick").max_nodes) == ("10:00", 1)
    assert p.accounts == ()  # no account rule unless the profile gives one
    assert load_profile(broken(tmp_path, "slurm_tmpdir = false", 'slurm_tmpdir = false\naccounts = ["a", "b"]')
                        ).accounts == ("a", "b")


@pytest.mark.parametrize("old, new, field, words", [
    ('max_time = "00:30:00"', 'max_time = "00:30:00"\ndefault_time = "01:00:00"', "partitions[1].default_time",
     "within the partition's max_time"),
    ('max_time = "00:30:00"', 'max_time = "00:30:00"\ndefault_time = "0"', "partitions[1].default_time", "within"),
    ('max_time = "00:30:00"', 'max_time = "00:30:00"\ndefault_time = "soon"', "partitions[1].default_time", "soon"),
    ('max_time = "00:30:00"', 'max_time = "00:30:00"\nmax_nodes = 0', "partitions[1].max_nodes", "positive"),
    ("slurm_tmpdir = false", 'slurm_tmpdir = false\naccounts = ["a", "a"]', "accounts[1]", "twice"),
    ("slurm_tmpdir = false", 'slurm_tmpdir = false\naccounts = ["my project"]', "accounts[0]", "not an account"),
])
def test_bad_partition_limits_and_accounts_are_named(tmp_path: Path, old: str, new: str, field: str,
                                                     words: str) -> None:
    err = error_for(broken(tmp_path, old, new))
    assert err.field == field and words in str(err)


def test_partition_naming_unknown_node(tmp_path: Path) -> None:
    err = error_for(broken(tmp_path, 'nodes = "n[1-2]"', 'nodes = "n[1-3]"'))
    assert err.field == "partitions[0].nodes" and "n3" in str(err)


def test_bad_hostlist_in_nodes(tmp_path: Path) -> None:
    err = error_for(broken(tmp_path, 'names = "n[1-2]"', 'names = "n[2-"'))
    assert err.field == "nodes[0].names"


def test_duplicate_node_names(tmp_path: Path) -> None:
    text = MINIMAL + '\n[[nodes]]\nnames = "n2"\ncpus = 1\nmemory_mb = 100\n'
    err = error_for(write(tmp_path, text))
    assert err.field == "nodes[1].names" and "n2" in str(err)


@pytest.mark.parametrize("old, new, field", [
    ("cpus = 2", "cpus = 0", "nodes[0].cpus"),
    ("memory_mb = 4000", "memory_mb = -1", "nodes[0].memory_mb"),
    ("cpus = 2", 'cpus = "2"', "nodes[0].cpus"),
    ("cpus = 2", "cpus = true", "nodes[0].cpus"),
    ("account_required = false", 'account_required = "no"', "account_required"),
    ('quota_bytes = "50G"', "quota_bytes = -1", "storage[0].quota_bytes"),
    ('quota_files = "500k"', 'quota_files = "-5"', "storage[0].quota_files"),
    ('quota_bytes = "50G"', 'quota_bytes = "fifty"', "storage[0].quota_bytes"),
    ('name = "{name}"', 'name = "other"', "name"),
    ("account_required = false", "account_required = true", "account_directive"),
    ("cpus = 2", 'cpus = 2\ngpu_type = "V100"\ngpus = 1', "nodes[0].gpu_type"),
    ("cpus = 2", 'cpus = 2\ngpu_type = "V100"', "nodes[0].gpu_type"),
    ('jupyter = ""', 'jupyter = ""\nhome_forbidden_for = ["code"]', "home_forbidden_for[0]"),
    ('jupyter = ""', 'jupyter = ""\n[modules]\npython = "python/3.11"\n', "modules.python"),
    ('name = "quick"', 'name = "main"', "partitions[1].name"),
    ('jupyter = ""', 'jupyter = ""\nslurm_version = "23.2"', "slurm_version"),
    ('jupyter = ""', 'jupyter = ""\nslurm_version = "24.11.5"', "slurm_version"),
    ('jupyter = ""', 'jupyter = ""\nslurm_version = "24.13"', "slurm_version"),
    ('jupyter = ""', 'jupyter = ""\nslurm_version = 24.11', "slurm_version"),
    ('jupyter = ""', 'jupyter = ""\nguide_slurm_version = "latest"', "guide_slurm_version"),
])
def test_invalid_values_name_the_field(tmp_path: Path, old: str, new: str, field: str) -> None:
    err = error_for(broken(tmp_path, old, new))
    assert err.field == field, str(err)


def test_toml_syntax_error(tmp_path: Path) -> None:
    err = error_for(write(tmp_path, MINIMAL + "\nthis is not toml\n"))
    assert "not valid TOML" in str(err)


def test_unknown_name_lists_shipped_profiles() -> None:
    with pytest.raises(ProfileError, match="narval") as info:
        load_profile("no-such-site")
    assert "no-such-site" in str(info.value)


def test_missing_path() -> None:
    with pytest.raises(ProfileError, match="not found"):
        load_profile("/nonexistent/dir/site.toml")


# --------------------------------------------------------------------------- parsers


@pytest.mark.parametrize("text, expected", [
    ("50G", 50 * 2**30), ("1T", 2**40), ("20T", 20 * 2**40), ("500M", 500 * 2**20),
    ("1k", 1024), ("50GB", 50 * 2**30), ("50GiB", 50 * 2**30), ("50g", 50 * 2**30),
    ("0.5T", 2**39), ("123", 123), ("123B", 123), (42, 42), (0, 0),
])
def test_parse_bytes(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("500k", 500_000), ("500K", 500_000), ("1M", 10**6), ("5000", 5000), (5000, 5000),
    ("1.5k", 1500), ("0", 0),
])
def test_parse_file_count(text: str | int, expected: int) -> None:
    assert parse_file_count(text) == expected


@pytest.mark.parametrize("bad", ["-1", -1, "1.2345k", "lots", "1T", True, 1.5])
def test_parse_file_count_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_file_count(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["-1G", -1, "G", "1X", False, 2.0])
def test_parse_bytes_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, seconds", [
    ("INFINITE", None), ("infinite", None), ("UNLIMITED", None),
    ("10", 600), ("10:30", 630), ("01:00:00", 3600), ("36:00:00", 36 * 3600),
    ("2-12", 2 * 86400 + 12 * 3600), ("1-00:30", 86400 + 1800), ("7-00:00:00", 7 * 86400),
    ("0-00:00:01", 1),
])
def test_parse_time_limit(text: str, seconds: int | None) -> None:
    assert parse_time_limit(text) == seconds


# --------------------------------------------------------------------------- loading behaviour


def test_hpcnb_profile_env_selects_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(sites.ENV_VAR, raising=False)
    assert load_profile().name == "local"
    monkeypatch.setenv(sites.ENV_VAR, "narval")
    assert load_profile().name == "narval"
    assert load_profile("local").name == "local"  # an explicit name wins
    path = write(tmp_path, MINIMAL, name="mysite")
    monkeypatch.setenv(sites.ENV_VAR, str(path))
    assert load_profile().name == "mysite"


def test_cache_returns_same_object_and_reloads_on_change(tmp_path: Path) -> None:
    assert load_profile("narval") is load_profile("narval")
    path = write(tmp_path, MINIMAL)
    first = load_profile(path)
    assert load_profile(str(path)) is first
    path.write_text(MINIMAL.replace("{name}", "site").replace('"Test site"', '"Changed title"'))
    later = path.stat().st_mtime_ns + 10**9  # a distinct mtime even on coarse clocks
    os.utime(path, ns=(later, later))
    assert load_profile(path).title == "Changed title"


def test_profiles_are_frozen_and_hashable() -> None:
    p = load_profile("local")
    with pytest.raises(AttributeError):
        p.name = "x"  # type: ignore[misc]
    assert isinstance(hash(p), int)
    assert isinstance(p.partitions, tuple) and isinstance(p.nodes[0].features, tuple)


# --------------------------------------------------------------------------- compare


def test_compare_gives_one_row_per_profile() -> None:
    names = list_profiles()
    rows = compare(None, "storage")
    assert [r["profile"] for r in rows] == names
    assert len({tuple(r) for r in rows}) == 1  # same columns in every row
    assert rows[0] and "home" in rows[0]
    narval = next(r for r in rows if r["profile"] == "narval")
    assert "50 GiB" in narval["home"] and "500k files" in narval["home"]
    assert next(r for r in rows if r["profile"] == "hpc2n")["home"] is None


def test_compare_mixed_inputs_and_subfields() -> None:
    rows = compare(["narval", load_profile("ulysses")], "storage.quota_bytes")
    assert len(rows) == 2
    assert rows[0]["scratch"] == 20 * 2**40 and rows[1]["scratch"] == 5 * 2**40
    assert rows[1]["project"] is None
    assert compare(["local", "pizdaint"], "gpu_request") == [
        {"profile": "local", "gpu_request": "--gres=gpu:1"},
        {"profile": "pizdaint", "gpu_request": "--constraint=gpu"},
    ]
    parts = compare(["local"], "partitions")
    assert parts == [{"profile": "local", "debug": "max INFINITE (default)", "short": "max 00:10:00",
                      "long": "max 2-00:00:00"}]
    assert compare(["alvis"], "modules.pytorch")[0]["pytorch"].startswith("module load PyTorch")
    rules = compare(["hpc2n"], "rules")[0]["rules"]
    assert rules.count("\n") == len(load_profile("hpc2n").rules) - 1


def test_compare_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="unknown field"):
        compare(["local"], "storag")
    with pytest.raises(ValueError, match="no field"):
        compare(["local"], "storage.quota")
    with pytest.raises(ValueError, match="no sub-fields"):
        compare(["local"], "title.x")


def test_partition_dataclass_defaults() -> None:
    part = Partition(name="p", max_time="1:00:00")
    assert (part.default, part.nodes, part.preemptible, part.description) == (False, None, False, "")
    assert part.max_seconds == 3600


# ------------------------------------------------------------------ Slurm releases


@pytest.mark.parametrize("release, emulated", [
    ("19.05", "24.11"), ("21.08", "24.11"), ("22.05", "22.05"), ("23.02", "22.05"),
    ("23.11", "24.11"), ("24.05", "24.11"), ("24.11", "24.11"), ("25.05", "24.11"), ("25.11", "24.11"),
])
def test_emulated_version_follows_srun_cpus_inheritance(release: str, emulated: str) -> None:
    """22.05 to 23.02 (srun does not inherit --cpus-per-task) are emulated as 22.05, all others as 24.11."""
    assert sites.emulated_version(release) == emulated
    assert emulated in sites.SLURM_VERSIONS


@pytest.mark.parametrize("text", ["24.11.5", "24", "v24.11", "24.00", "24.13", ""])
def test_slurm_release_must_be_a_major_version(text: str) -> None:
    with pytest.raises(ValueError, match="YY.MM"):
        sites.emulated_version(text)


def test_every_seed_profile_states_its_release() -> None:
    """Each shipped profile names the release its site runs, with the source or the doubt in a comment."""
    for name in list_profiles():
        text = (sites.SITES_DIR / f"{name}.toml").read_text()
        assert re.search(r'^slurm_version = "\d\d\.\d\d"$', text, re.M), name
        head = text[:text.index("slurm_version =")]
        assert "# The Slurm release the site runs" in head, name
    assert load_profile("local").slurm_version == "24.11"
    assert load_profile("pizdaint").slurm_version == "24.05"  # Alps (CSCS's docs), not the retired XC
    assert load_profile("stability").guide_slurm_version == "21.08"  # ParallelCluster 3.2.0's Slurm
