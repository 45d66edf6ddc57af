"""Bad settings are one line that names them: a duration names the option it was given to (``tools/campaign run
--time 7x`` said "--time-limit '7x' is not a duration", an option that command does not have), and a sweep's
OMP_NUM_THREADS that is no number of threads is refused before any job."""

from __future__ import annotations

import pytest

from domains.errors import UserError
from harness.run.stopping import parse_duration
from harness.suites.campaign import main


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--time", "7x", "error: --time '7x' is not a duration such as 90m"),
    ("--time", "0m", "error: --time '0m' must be longer than 0 s"),
    ("--budget", "lots", "error: --budget 'lots' is not a duration such as 90m"),
])
def test_the_campaigns_bad_durations_name_their_option(tmp_path, capsys, option, value, message):
    assert main(["run", "2-biased-table3", "--dry-run", "--stage", str(tmp_path), option, value]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(message) and "--time-limit" not in line


def test_the_time_limit_stays_the_default_option():
    with pytest.raises(UserError, match="^--time-limit '2x' is not a duration"):
        parse_duration("2x")
    assert parse_duration("1h30m", "--time") == 5400


@pytest.mark.parametrize("value", ["abc", "0", "-2", "2.5"])
def test_a_bad_omp_num_threads_is_one_error_line_before_any_job(tmp_path, capsys, monkeypatch, value):
    """It was a traceback (``int('abc')``) or, for 0, every job failing in a worker that could not start."""
    import tiny_domain  # noqa: F401  (registers the tiny domain in this process)

    from harness.cli import main as harness_main

    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert harness_main(["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0", "--tracker", "none",
                         "--results", str(tmp_path)]) == 2
    assert f"error: OMP_NUM_THREADS='{value}' is not a number of threads" in capsys.readouterr().err
    # harness run too: OpenMP only warned of it, and the run trained on every core (a new user, session 33)
    assert harness_main(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--tracker", "none",
                         "--results", str(tmp_path)]) == 2
    assert f"error: OMP_NUM_THREADS='{value}' is not a number of threads" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))


def test_an_omp_list_gives_its_first_count():
    from harness.sweep.local import threads

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "3,1")
        assert threads(2) == 3
        mp.setenv("OMP_NUM_THREADS", "")
        assert threads(10 ** 6) == 1


def test_a_campaign_run_gets_what_is_left_of_time_less_its_start_up():
    """A run's --time-limit counts from after its imports: given all that was left, it ended past --time (a run of
    a 70 s campaign took 72 s here). Under a minute left, no run starts."""
    from harness.suites.campaign import MIN_START_S, STARTUP_S, run_time_limit

    assert run_time_limit(420.0) == f"{int(420 - STARTUP_S)}s"
    assert run_time_limit(MIN_START_S + 0.5) == f"{int(MIN_START_S + 0.5 - STARTUP_S)}s"
    assert run_time_limit(MIN_START_S - 0.5) is None
