"""``harness run``'s last lines and exit status where not every seed simply completes: an interrupted ``--force``
and the command its hint gives, a non-finite primary metric, a seed busy in another process. In-process, on the
tiny domain and its faulty variant (tests/faulty_domain.py)."""

from __future__ import annotations

import json
import math
import shlex
import statistics
from pathlib import Path

import faulty_domain  # noqa: F401  (registers the faulty domain, and the tiny one, in this process)
from filelock import FileLock
from tiny_domain import TinyDomain

from harness.cli import main
from harness.numbers import mean_std, spread
from harness.run import as_found, data_root_prefix
from harness.run.stopping import EXIT_STOPPED

TINY = ["run", "--domain", "tiny", "--loss", "infonce", "--set", "epochs=3", "--quiet"]


def _by_seed(results: Path) -> dict[int, dict]:
    return {r["seed"]: r for r in (json.loads(p.read_text()) for p in results.glob("*.json"))}


def _hint_args(hint: str) -> list[str]:
    """The arguments of the in-process hint ``... continue with: [HARNESS_DATA_ROOT=...] harness run ...``
    (the data root where it is not the built-in one, as in CI: harness.run.data_root_prefix)."""
    words, prefix = shlex.split(hint.split("continue with: ")[1]), shlex.split(data_root_prefix(None))
    assert words[:len(prefix) + 1] == [*prefix, "harness"], hint
    return words[len(prefix) + 1:]


def test_resuming_an_interrupted_force_run_redoes_only_the_seeds_it_had_not_redone(tmp_path, capsys, monkeypatch):
    args = [*TINY, "--seeds", "0-2", "--results", str(tmp_path)]
    assert main(args) == 0
    before = _by_seed(tmp_path)
    pretrain = TinyDomain.pretrain

    def stopped_in_seed_1(self, spec, ctx, data):
        if spec.seed == 1:  # as if SIGTERM came during its first epoch: it stops at the checkpoint after it
            asked = iter(range(100))
            ctx.stop_reason = lambda: "SIGTERM" if next(asked) >= 1 else None
        return pretrain(self, spec, ctx, data)

    monkeypatch.setattr(TinyDomain, "pretrain", stopped_in_seed_1)
    capsys.readouterr()
    assert main([*args, "--force"]) == EXIT_STOPPED
    hint = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--force" in hint and hint.endswith(" --resume"), hint
    forced = _by_seed(tmp_path)
    assert forced[0]["timings"] != before[0]["timings"]  # seed 0 was redone
    assert forced[1] == before[1] and forced[2] == before[2]
    monkeypatch.setattr(TinyDomain, "pretrain", pretrain)

    # --resume without --force keeps the old records, and says that the interrupted --force had seeds 1-2 to redo
    assert main([*args, "--resume"]) == 0 and _by_seed(tmp_path) == forced
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  note: ")]
    assert notes == ["  note: an interrupted --force left this seed to redo: add --force to redo it (--force --resume)"
                     ] * 2
    assert main(_hint_args(hint)) == 0
    out = capsys.readouterr().out
    after = _by_seed(tmp_path)
    assert after[0] == forced[0] and f"[skipped] {after[0]['run_id']}" in out  # what the --force redid is kept
    assert after[1]["info"]["start_epoch"] == 1 and after[1]["resumed"] is True  # its checkpoint goes on
    assert after[2]["info"]["start_epoch"] == 0 and after[2]["timings"] != before[2]["timings"]  # redone
    assert after[2]["resumed"] is False  # --resume found no checkpoint of it: it started fresh
    assert not [p.name for p in (tmp_path / ".work").iterdir() if not p.name.endswith(".lock")]
    assert main(_hint_args(hint)) == 0 and _by_seed(tmp_path) == after  # a forced rerun is done once


def test_the_summary_takes_the_finite_seeds_and_counts_the_others(tmp_path, capsys):
    args = ["run", "--domain", "faulty", "--loss", "infonce", "--seeds", "0-2", "--set", "tag=nan",
            "--set", "epochs=1", "--results", str(tmp_path), "--quiet"]
    assert main(args) == 0  # every seed completed; the line says which are non-finite
    records = _by_seed(tmp_path)
    assert records[1]["metrics"]["accuracy"] is None  # NaN, written as null
    finite = [records[s]["metrics"]["accuracy"] for s in (0, 2)]
    assert all(math.isfinite(v) for v in finite)
    # as the pages print a mean ± std: both to the mean's decimals, which are 2 for a mean from 1 to 1000
    assert all(1 <= v <= 100 for v in finite)
    line = f"accuracy: {statistics.mean(finite):.2f} ± {statistics.stdev(finite):.2f} over 2 of 3 seeds; " \
           "1 non-finite (null in the record)"
    out = capsys.readouterr().out
    assert line in out.splitlines() and "accuracy=null (non-finite)" in out
    assert main(args) == 0 and line in capsys.readouterr().out.splitlines()  # read back from the records
    assert main([*args, "--seeds", "1,3"]) == 0
    assert "accuracy: non-finite on all 2 seeds (null in the records)" in capsys.readouterr().out.splitlines()


def test_a_seed_busy_in_another_process_is_not_done_exit_75(tmp_path, capsys):
    args = [*TINY, "--seeds", "0,1", "--results", str(tmp_path)]
    assert main([*TINY, "--seeds", "0", "--results", str(tmp_path)]) == 0
    [record] = _by_seed(tmp_path).values()
    capsys.readouterr()
    with FileLock(str(tmp_path / ".work" / f"{record['run_id']}.lock")):
        assert main([*args, "--force"]) == EXIT_STOPPED
    out, err = capsys.readouterr()
    assert f"[busy] {record['run_id']}: another process is running it; not run here" in out
    hint = err.strip().splitlines()[-1]
    assert hint.startswith("not finished: 1 seed busy in another process; once it is done, continue with: "), hint
    assert sorted(_by_seed(tmp_path)) == [0, 1]  # the other seed ran
    assert main(_hint_args(hint)) == 0  # once the lock is free, the hint's command redoes the busy seed
    assert _by_seed(tmp_path)[0]["timings"] != record["timings"]


def test_an_empty_seed_list_is_a_user_error(tmp_path, capsys):
    assert main([*TINY, "--seeds", "", "--results", str(tmp_path)]) == 2
    assert "--seeds expects comma-separated integers" in capsys.readouterr().err


def test_a_run_that_fails_on_a_seed_says_which_seeds_it_did_not_run(tmp_path, capsys):
    """A run stops at its first failed seed; a new user (session 33) saw seed 0 fail and no word of seeds 1 and 2."""
    code = main([*TINY, "--seeds", "0-2", "--set", "fail=true", "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and "planted failure" in err
    assert err.rstrip().endswith("; seed(s) 1,2 not run: a run stops at its first failed seed")
    assert sorted(_by_seed(tmp_path)) == [0]  # seed 0's failed record alone


def test_the_printed_commands_name_this_installation_where_the_shell_would_not_find_it(tmp_path, monkeypatch):
    """``continue with: python -m harness ...`` ran the system's python, which lacks torch (a new user, session 33,
    with the venv not activated): a program the shell's PATH does not find as this very file is named by its path."""
    venv, system = tmp_path / "venv" / "bin", tmp_path / "usr" / "bin"
    for folder in (venv, system):
        folder.mkdir(parents=True)
        (folder / "python").write_text("#!/bin/sh\n")
        (folder / "python").chmod(0o755)
    (venv / "harness").symlink_to(system / "python")  # a link to another program is not that program
    monkeypatch.setenv("PATH", str(system))
    assert as_found(str(venv / "python")) == str(venv / "python")
    assert as_found(str(system / "python")) == "python"
    assert as_found(str(venv / "harness")) == str(venv / "harness")
    monkeypatch.setenv("PATH", f"{venv}:{system}")  # the venv activated
    assert as_found(str(venv / "python")) == "python" and as_found(str(venv / "harness")) == "harness"


def test_mean_std_gives_the_std_to_the_means_decimals():
    """The one mean ± std of the run summary and the pages (harness.numbers.mean_std): 4 decimals below 1, 2 from
    1 to 1000, 1 above, for the mean and its std alike."""
    assert mean_std(87.0, 0.3515) == "87.00 ± 0.35"  # the run summary printed 87 ± 0.3515
    assert mean_std(97.13333, 1.677) == "97.13 ± 1.68"
    assert mean_std(0.8712, 0.01234) == "0.8712 ± 0.0123"
    assert mean_std(1234.56, 12.34) == "1234.6 ± 12.3"
    assert mean_std(-0.5, 0.25) == "-0.5000 ± 0.2500"
    assert mean_std(5.0, math.nan) == "5.00 ± –"


def test_spread_is_the_mean_std_of_numbers_that_are_no_group():
    """The run summary's and the prior page's mean ± std of a list (harness.numbers.spread): as mean_std prints a
    group's, so a prior below 1 keeps 4 decimals where an accuracy gets 2; one value alone, none a dash."""
    assert spread([98.0, 98.2, 95.2]) == "97.13 ± 1.68"  # the README's main command: its three seeds
    assert spread([0.5062, 0.4993, 0.5101]) == "0.5052 ± 0.0055"  # a prior estimate over three seeds
    assert spread([95.2]) == "95.20" and spread([0.25]) == "0.2500"
    assert spread([]) == "–"
