"""hpcnb.slurm: Slurm's time specs, sizes, job states and GPU requests, written once.

Accepted times and their values are what the real ``sbatch --time=...`` 22.05 takes (``sbatch -v``
shows the limit); printed forms follow Slurm's ``secs2time_str``, squeue's ``_print_secs``, sacct's
``_elapsed_time`` and ``convert_num_unit`` (src/common/parse_time.c, src/sacct/print.c).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcnb import jobs, sites, slurm_options
from hpcnb.slurm import constraints, gpus, sizes, states, times
from hpcnb.slurm.bounds import MAX_EPOCH
from hpcnb.slurm.sizes import SizeError, format_size, parse_bytes, parse_mem, parse_printed_size
from hpcnb.slurm.times import (
    TimeSpecError,
    format_cpu_time,
    format_elapsed,
    format_limit,
    format_squeue_time,
    parse_printed,
    parse_time,
)

# ------------------------------------------------------------------------------------ times

GOOD_TIMES = [
    ("10", 600), ("10:30", 630), ("1:00:00", 3600), ("99:59", 5999), ("0", 0),
    ("1-0", 86400), ("1-12", 129600), ("1-12:30", 131400), ("1-12:30:15", 131415),
    ("7-00:00", 7 * 86400), ("120:00:00", 120 * 3600), ("1-", 86400),
    # Slurm does not range-check the fields (the old site-profile parser refused these):
    ("1-25", 86400 + 25 * 3600), ("00:61:00", 61 * 60), ("1:90", 150),
    ("1:99:00", 2 * 3600 + 39 * 60), ("0:60", 60), ("1-1:60", 86400 + 3600 + 3600),
]
BAD_TIMES = ["abc", "1:2:3:4", "", " 5", "5 ", "5x", "1--2", "01:00:00.5", "1:", ":30", "1-2:", "1::2",
             "1:2-3", "1-2-3", "-5", "1h", "²", "10\n"]


@pytest.mark.parametrize("text, seconds", GOOD_TIMES)
def test_times_slurm_accepts(text: str, seconds: int) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["INFINITE", "unlimited", "Infinite", "-1", "UNLIMITED"])
def test_unlimited_is_none(text: str) -> None:
    assert parse_time(text) is None


@pytest.mark.parametrize("text", BAD_TIMES)
def test_garbage_gets_slurms_error(text: str) -> None:
    with pytest.raises(TimeSpecError, match=r"^Invalid --time specification: .* is not a Slurm time \(INFINITE, MM"):
        parse_time(text)


def test_error_names_the_option() -> None:
    with pytest.raises(ValueError, match=r"^Invalid --time-min specification"):
        parse_time("soon", "--time-min")


@pytest.mark.parametrize("text, limit", [
    (str(2**32 - 2), "UNLIMITED"), (str(2**32 - 1), "00:00:00"), (str(2**32), "00:00:00"),
    ("99999999999", "2981813-22:48:00"), ("9" * 20, "00:00:00"), (str(2**31), "00:00:00"),
    ("9" * 5000, "00:00:00"), ("35791393", "24855-03:13:00"),
])
def test_limits_past_an_int_wrap_as_slurm_computes_them(text: str, limit: str) -> None:
    """C ``int`` seconds, rounded to 32-bit minutes: as ``scontrol update TimeLimit=`` shows them
    on a real 22.05 (measured, but for the last two; sbatch reads the 0 as no limit)."""
    assert format_limit(parse_time(text)) == limit


def test_job_limits_round_up_to_minutes() -> None:
    assert [times.minutes(s) for s in (None, 0, 1, 60, 61)] == [None, 0, 1, 1, 2]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**8))
def test_printed_times_parse_back(seconds: int) -> None:
    assert parse_time(format_limit(seconds)) == seconds
    assert parse_printed(format_elapsed(seconds)) == seconds
    assert parse_printed(format_squeue_time(seconds)) == seconds
    assert parse_printed(format_cpu_time(seconds + 0.25)) == seconds


@pytest.mark.parametrize("seconds, limit, squeue, cpu", [
    (0, "00:00:00", "0:00", "00:00:00"),
    (7, "00:00:07", "0:07", "00:00:07"),
    (65.5, "00:01:05", "1:05", "01:05.500"),
    (3725, "01:02:05", "1:02:05", "01:02:05"),
    (90061, "1-01:01:01", "1-01:01:01", "1-01:01:01"),
])
def test_printers(seconds: float, limit: str, squeue: str, cpu: str) -> None:
    assert (format_limit(seconds), format_squeue_time(seconds), format_cpu_time(seconds)) == (limit, squeue, cpu)
    assert format_elapsed(seconds) == limit


def test_unlimited_prints_as_slurm_does() -> None:
    assert format_limit(None) == "UNLIMITED"
    assert parse_time(format_limit(None)) is None


@pytest.mark.parametrize("text, seconds", [
    ("00:00:07", 7), ("01:02:03", 3723), ("2-00:00:01", 172801), ("12:34", 754), ("0:02.345", 2),
    ("1:05", 65), ("", None), ("INVALID", None), ("UNLIMITED", None), ("Partition_Limit", None), ("300", None),
])
def test_parse_printed(text: str, seconds: int | None) -> None:
    assert parse_printed(text) == seconds


# A fixed "now" (local time, as Slurm reads calendar times): 2026-03-10 14:30:00.
NOW = __import__("datetime").datetime(2026, 3, 10, 14, 30).timestamp()


@pytest.mark.parametrize("text, offset", [
    ("now", 0), ("NOW+90", 90), ("now+5minutes", 300), ("now+2hours", 7200), ("now-1day", -86400),
    ("now+1week", 604800), ("noon", 86400 - 2.5 * 3600), ("teatime", 1.5 * 3600), ("15:00", 1800),
    ("14:00", 86400 - 1800), ("3:00pm", 1800), ("today", -14.5 * 3600), ("tomorrow", 9.5 * 3600),
    ("2026-03-11", 9.5 * 3600), ("2026-03-10T15:00", 1800), ("2026-03-10T15:00:30", 1830), ("03/11", 9.5 * 3600),
])
def test_calendar_times_as_slurm_reads_them(text: str, offset: float) -> None:
    """--begin, --deadline and scontrol update StartTime= (Slurm's parse_time)."""
    assert times.parse_calendar(text, NOW) == NOW + offset


@pytest.mark.parametrize("text, pos", [
    ("garbage", 0), ("now+abc", 3), ("now+5x", 4), ("now+5m", 4), ("now+5s", 4), ("12:99", 3),
    ("2030-13-01", 5), ("25:00", 0),
])
def test_bad_calendar_times_get_slurms_position(text: str, pos: int) -> None:
    """Slurm's unit names are whole words: ``now+5m`` is refused (pos=4), as by a real parse_time."""
    with pytest.raises(times.CalendarTimeError) as err:
        times.parse_calendar(text, NOW)
    assert str(err.value) == f"Invalid time specification (pos={pos}): {text}"


def test_calendar_times_far_away_are_clamped() -> None:
    assert times.parse_calendar("now+" + "9" * 30, NOW) == float(MAX_EPOCH)
    assert times.parse_calendar("now-" + "9" * 30, NOW) == 0.0


# ------------------------------------------------------------------------------------ sizes

@pytest.mark.parametrize("text, mb", [
    ("100", 100), ("500M", 500), ("500m", 500), ("2G", 2048), ("2GB", 2048), ("1T", 1024**2), ("0", 0),
    ("1K", 1), ("1500K", 2), ("1024K", 1), ("+5", 5), (" 7", 7), ("4gb", 4096),
])
def test_mem_as_slurm_reads_it(text: str, mb: int) -> None:
    assert parse_mem(text) == mb


@pytest.mark.parametrize("text", ["", "lots", "1.5G", "-1", "5B", "2X", "2G ", "2 G", "G"])
def test_mem_garbage(text: str) -> None:
    with pytest.raises(SizeError, match=r"^Invalid --mem-per-cpu specification"):
        parse_mem(text, "--mem-per-cpu")


@pytest.mark.parametrize("text, size", [
    ("15464K", 15464 * 1024), ("1.50M", 1572864), ("2G", 2 * 1024**3), ("0", 0), ("512", 512),
    ("7.2T", round(7.2 * 1024**4)), ("50GB", 50 * 1024**3), ("1 TiB", 1024**4), ("500m", 500 * 1024**2),
])
def test_sizes_with_units(text: str, size: int) -> None:
    assert parse_bytes(text) == size
    assert parse_printed_size(text) == size


@pytest.mark.parametrize("text", ["", "-1G", "G", "1X", "lots"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(SizeError):
        parse_bytes(text)
    assert parse_printed_size(text) is None


@pytest.mark.parametrize("value, unit, text", [
    (15835136, "", "15464K"), (2 * 1024**2, "", "2M"), (1536 * 1024, "", "1.50M"), (512, "", "512"),
    (1024, "M", "1G"), (1536, "M", "1.50G"), (8000, "M", "8000M"), (500, "M", "500M"), (0, "M", "0"),
    (3 * 1024**2, "M", "3T"),
])
def test_sizes_print_exactly_as_slurm(value: int, unit: str, text: str) -> None:
    assert format_size(value, unit) == text


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**50))
def test_printed_sizes_parse_back(nbytes: int) -> None:
    kb = nbytes // 1024 * 1024  # MaxRSS: whole KB
    assert abs(parse_bytes(format_size(kb)) - kb) <= kb * 0.005  # "%.2f" keeps 3 figures


def test_units() -> None:
    assert sizes.UNITS == ("", "K", "M", "G", "T", "P")


# ----------------------------------------------------------------------------------- states

def test_one_list_of_states() -> None:
    assert list(states.BASE)[:4] == ["PENDING", "RUNNING", "SUSPENDED", "COMPLETED"]
    assert states.FINAL == {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                            "DEADLINE", "OUT_OF_MEMORY"}
    assert states.CODES["OUT_OF_MEMORY"] == "OOM" and states.CODES["COMPLETING"] == "CG"
    assert len(set(states.CODES.values())) == len(states.CODES)


@pytest.mark.parametrize("text, base, final", [
    ("CANCELLED by 0", "CANCELLED", True), ("CANCELLED by 1000", "CANCELLED", True), ("CANCELLED+", "CANCELLED", True),
    ("COMPLETED", "COMPLETED", True), (" RUNNING ", "RUNNING", False), ("PENDING", "PENDING", False),
    ("COMPLETING", "COMPLETING", False), ("REQUEUED", "REQUEUED", False), ("DEADLINE", "DEADLINE", True),
])
def test_base_state(text: str, base: str, final: bool) -> None:
    assert states.base_state(text) == base
    assert states.is_final(text) is final


# --------------------------------------------------------------------- the old names still work

def test_old_names() -> None:
    assert slurm_options.parse_slurm_time is parse_time and slurm_options.format_slurm_time is format_limit
    assert slurm_options.parse_args is not None and "parse_slurm_time" in slurm_options.__all__
    assert sites.parse_time_limit("1:90") == 150 and sites.parse_time_limit("INFINITE") is None
    assert jobs.parse_elapsed("1-00:00:02") == 86402 and jobs.parse_size("15464K") == 15464 * 1024
    assert jobs.FINISHED_STATES is states.FINAL


# ------------------------------------------------------------------------------------- GPUs

@pytest.mark.parametrize("value, option, wanted", [
    ("gpu", "--gres", (1, None)), ("gpu:2", "--gres", (2, None)), ("gpu:a100:2", "--gres", (2, "a100")),
    ("2", "--gpus-per-node", (2, None)), ("a100:4", "--gpus-per-node", (4, "a100")), ("-1", "--gpus", (1, None)),
])
def test_gpu_requests(value: str, option: str, wanted: tuple[int, str | None]) -> None:
    assert gpus.parse_gpus(value, option) == wanted


@pytest.mark.parametrize("value, option, error", [
    ("mps:2", "--gres", gpus.NotAGpu), ("gpu:a100", "--gres", ValueError), ("gpu:a:b:1", "--gres", ValueError),
    ("many", "--gpus-per-node", ValueError), ("a:b:1", "--gpus", ValueError),
])
def test_bad_gpu_requests(value: str, option: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        gpus.parse_gpus(value, option)


def test_a_record_copies_its_defaults_refuses_unknown_fields_and_round_trips() -> None:
    from hpcnb.slurm.record import Record

    class Request(Record):
        name: str | None = None
        given: list[str] = []
        env: dict[str, str] = {}

    one, two = Request(name="a"), Request()
    one.given.append("x")
    one.env["K"] = "v"
    assert two.given == [] and two.env == {}  # no default is shared
    assert Request.FIELDS == ("name", "given", "env")
    assert Request.from_dict({**one.to_dict(), "from_a_newer_version": 1}) == one
    copied = one.to_dict()
    copied["given"].append("y")
    assert one.given == ["x"]  # to_dict copies
    with pytest.raises(TypeError, match="unknown field"):
        Request(nmae="typo")


# ------------------------------------------------------------------------------ constraints

NODE_FEATURES = {"n1": {"gpu", "fast", "rack1"}, "n2": {"gpu", "rack2"}, "n3": {"cpu", "rack2"}}


@pytest.mark.parametrize(("text", "matching"), [
    ("gpu", ["n1", "n2"]),
    ("gpu&fast", ["n1"]),
    ("cpu|fast", ["n1", "n3"]),
    ("fast|cpu&rack2", ["n3"]),  # left to right, as slurmctld: (fast|cpu)&rack2
    ("fast|(cpu&rack2)", ["n1", "n3"]),
    ("[rack1|rack2]", ["n1", "n2", "n3"]),
    ("gpu&rack1*1", ["n1", "n2"]),  # a counted feature does not bind each node
    ("gpu,fast", ["n1"]),  # a comma is an AND
    ("gpu&", ["n1", "n2"]),  # one operator may end it (22.05)
    ("cpu*1|gpu", ["n1", "n2", "n3"]),
])
def test_constraint_matches_nodes_left_to_right(text: str, matching: list[str]) -> None:
    group = constraints.parse_constraint(text)
    assert [n for n, feats in NODE_FEATURES.items() if constraints.node_matches(group, feats)] == matching


def test_matching_or_puts_every_node_on_one_alternative_and_counts_are_met() -> None:
    group = constraints.parse_constraint("gpu&[rack1|rack2]")
    options = [[n for n, feats in NODE_FEATURES.items() if constraints.node_matches(v, feats)]
               for v in constraints.variants(group)]
    assert options == [["n1"], ["n2"]]
    counted = constraints.parse_constraint("[rack1*1&rack2*2]")
    assert constraints.counts_met(counted, [NODE_FEATURES[n] for n in ("n1", "n2", "n3")])
    assert not constraints.counts_met(counted, [NODE_FEATURES[n] for n in ("n1", "n2")])
    either = constraints.parse_constraint("rack1*2|gpu")  # met by the count or by every node's gpu
    assert constraints.counts_met(either, [NODE_FEATURES["n1"], NODE_FEATURES["n2"]])
    assert not constraints.counts_met(either, [NODE_FEATURES["n1"], NODE_FEATURES["n3"]])


@pytest.mark.parametrize(("text", "misplaced"), [
    ("v100*2", False), ("[v100*2]", False), ("[gpu*1&v100*1]", False), ("[gpu*1&v100*1]&gpu", False),
    ("gpu&v100", False), ("v100*2|gpu", True), ("gpu&v100*2", True), ("(v100*2)", True), ("[gpu*1|v100*1]", True),
    ("[gpu&v100*2]", True),
])
def test_counts_where_slurm_2411_refuses_them(text: str, misplaced: bool) -> None:
    assert constraints.counts_misplaced(constraints.parse_constraint(text)) is misplaced  # measured on 24.11


def test_unknown_features_are_named() -> None:
    group = constraints.parse_constraint("(gpu&nosuch)|[a|rack1]")
    assert constraints.unknown_features(group, {"gpu", "rack1"}) == ["nosuch", "a"]


@pytest.mark.parametrize("text", [
    "", "&gpu", "gpu||fast", "gpu&|fast", "gpu&(", "gpu&&", "(gpu", "gpu)", "[gpu|fast", "[[gpu]]", "gpu*0",
    "gpu*", "gpu fast(", "a*2x",
])
def test_bad_constraints_are_refused(text: str) -> None:
    with pytest.raises(constraints.ConstraintError):
        constraints.parse_constraint(text)


@pytest.mark.parametrize("text, counts", [("2(x2),1", [2, 2, 1]), ("4", [4]), ("1,3(x3)", [1, 3, 3, 3])])
def test_per_node_counts_round_trip(text: str, counts: list[int]) -> None:
    from hpcnb.slurm.counts import compress_counts, expand_counts

    assert expand_counts(text) == counts and compress_counts(counts) == text


def test_per_node_counts_refuse_other_text() -> None:
    from hpcnb.slurm.counts import expand_counts

    with pytest.raises(ValueError, match="not a Slurm per-node count: '2x2'"):
        expand_counts("2x2")


def test_array_specs_give_task_ids_and_throttle() -> None:
    from hpcnb.slurm.arrays import parse_array

    assert parse_array("0-5") == ([0, 1, 2, 3, 4, 5], None)
    assert parse_array("1-10:2%3") == ([1, 3, 5, 7, 9], 3)
    assert parse_array("7,1,4,4") == ([1, 4, 7], None)
    for bad in ("5-1", "1-3:0", "0-1001", "a", "1-"):
        with pytest.raises(ValueError, match="Invalid job array specification"):
            parse_array(bad)


def test_field_widths_are_read_as_the_real_commands_read_them() -> None:
    """squeue's and sinfo's ``_parse_token`` wrap in a C ``int``; sacct's ``atoi`` saturates first; a
    width past the real command's stack (where it dies) is refused in one line, whatever its digits."""
    from hpcnb.slurm.bounds import FIELD_WIDTH_MAX, c_int, field_width

    assert [field_width(t) for t in ("0", "12", "4294967298", "4294967295", "2147483648")] == [0, 12, 2, -1, -2**31]
    assert field_width("9" * 30, wraps=False) == -1 and field_width("-7", wraps=False, signed=True) == -7
    assert field_width(str(FIELD_WIDTH_MAX)) == FIELD_WIDTH_MAX
    wrapped = (pow(10, 100000, 2**32) - 1) % 2**32  # 100000 nines, as an int adds them up
    if wrapped <= FIELD_WIDTH_MAX:
        assert field_width("9" * 100000) == c_int(wrapped)
    for text, kw in (("2000000000", {}), ("99999999999", {}), ("-2000000000", {"wraps": False, "signed": True})):
        with pytest.raises(ValueError, match=r"^Field width .{1,30} is too large \(at most 8388608\)$"):
            field_width(text, **kw)
