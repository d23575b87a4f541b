"""The benchmark's one entry point, `python -m bench <scenario> [args]`: no broker, no Spark.

Every scenario is registered, its `--help` parses, and its smallest arguments (`--smoke` where it
has one) parse into the settings it runs with. The scenarios' smoke runs, which start brokers and
Spark, are tests/test_bench_smoke.py, tests/test_bench_poison_smoke.py and tests/test_scale_out.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import SCENARIOS, main, parser, scenario
from bench.sustained import SustainedSettings

BENCH = Path(__file__).resolve().parent.parent / "bench"
WORK, RESULTS = Path("/tmp/bench-work"), Path("/tmp/bench-results")
PLACES = ["--work-dir", str(WORK), "--results-dir", str(RESULTS)]


def _fields(**want: Any) -> Callable[[Any], None]:
    """A check that the settings (a dataclass or a dict) hold `want`."""

    def check(s: Any) -> None:
        got = {k: s[k] if isinstance(s, dict) else getattr(s, k) for k in want}
        assert got == want

    return check


# scenario -> (its smallest arguments, what its settings must then hold)
SMALLEST: dict[str, tuple[list[str], Callable[[Any], None]]] = {
    "run": (
        ["--smoke", "--set", "batch.max_records=500", *PLACES],
        _fields(
            size="smoke",
            records=3000,
            partitions=(2,),
            failover_records=0,
            work_dir=WORK,
            results_dir=RESULTS,
            keep_work=False,
            sharelake_sets=("batch.max_records=500",),
        ),
    ),
    "cycle": (["--smoke", "--label", "defaults="], _fields(size="smoke", records=3000, partitions=(2,))),
    "storage": (
        ["--records", "1000", "--partitions", "2", "--rounds", "1", "--seconds", "5", "--variants", "local"],
        _fields(size="storage", records=1000, partitions=(2,), latency_partitions=2, latency_seconds=5.0),
    ),
    "formats": (["--smoke", "--keep-work"], _fields(size="smoke", records=3000, partitions=2, runs=1, keep_work=True)),
    "format-decode": (["1000", "1"], lambda s: s == (1000, 1)),
    "sustained": (
        ["--smoke"],
        _fields(size="smoke", rates=(200, 400), partitions=2, contenders=SustainedSettings().contenders),
    ),
    "poison-storm": (
        ["--smoke", "--kinds", "poison", *PLACES],
        _fields(size="smoke", rate=400, rounds=1, kinds=("poison",), bad_every=10, work_dir=WORK, results_dir=RESULTS),
    ),
    "bad-batches": (["100", "1", "1"], lambda s: s == (100, 1, 1)),
    "failover": (
        ["--records", "4000", "--rate", "500", "--backlog", "1000", "--default-fencing", "--set", "pump.members=2"],
        _fields(records=4000, rate=500, backlog=1000, fast_fencing=False, job_sets=("pump.members=2",)),
    ),
    "soak": (
        ["--minutes", "1", "--fault-every-minutes", "0.5", "--rate", "500", "--calibrate-records", "1000"],
        _fields(duration_s=60.0, fault_every_s=30.0, rate=500, calibrate_records=1000, pattern="DBB"),
    ),
    "several-jobs": (
        ["--smoke", "--jobs", "2"],
        _fields(
            size="several-jobs-smoke",
            records=4000,
            partitions=(2,),
            runs=1,
            sharelake_sets=("pump.max_poll_records=250",),
        ),
    ),
    "scale-out": (["--smoke", "--drivers", "1,2"], _fields(rate=500, seconds=10, rounds=1, drivers="1,2")),
    "layouts": (
        ["--records", "1000", "--partitions", "2", "--rounds", "1"],
        _fields(records=1000, partitions=(2,), runs=1, members=0),
    ),
    "upserts": (
        ["--records", "1000", "--partitions", "2", "--rounds", "1", *PLACES],
        _fields(records=1000, partitions=(2,), runs=1, work_dir=WORK, results_dir=RESULTS),
    ),
}


def test_every_scenario_module_is_registered() -> None:
    assert set(SCENARIOS) == set(SMALLEST)
    with_help = {p.stem for p in BENCH.glob("*.py") if re.search(r"^HELP = ", p.read_text(), re.MULTILINE)}
    assert with_help == set(SCENARIOS.values())  # a module with a HELP is a scenario, and every scenario has one
    for name in SCENARIOS:
        module = scenario(name)
        assert module.HELP and callable(module.configure) and callable(module.settings) and callable(module.run)


def test_the_overview_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in SCENARIOS)
    for argv in ([], ["no-such-scenario"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_help_parses(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    assert f"python -m bench {name}" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_smallest_arguments_parse_into_the_settings(name: str) -> None:
    argv, check = SMALLEST[name]
    check(scenario(name).settings(parser(name).parse_args(argv)))


def test_settings_out_of_range_end_with_one_line() -> None:
    for name, argv in [
        ("poison-storm", ["--bad-fraction", "0.9"]),
        ("sustained", ["--contenders", "perf-tool"]),
        ("formats", ["--runs", "0"]),
        ("run", ["--contenders", "nobody"]),
    ]:
        with pytest.raises(SystemExit, match=r"need|unknown"):
            scenario(name).settings(parser(name).parse_args(argv))
