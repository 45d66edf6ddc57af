"""``harness compare`` as CI runs it: copies of the baseline's records in the candidate's folder never stand in for
the candidate's code, and a side's name that reads two ways is refused. Each test is a way an audit (session 36) got
exit 0, or a code it did not name, for a candidate that was 20 points down. The first comparison runs in a subprocess,
as CI's does; the others, decisions of the same command, are called in this process (conftest's ``run_main``)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from support import git_repo
from tiny_domain import harness, synthetic_record, write_records

from harness import version
from harness.cli import main

GOOD = [85.9, 82.45, 86.6, 81.2, 80.9]
BAD = [v - 20 for v in GOOD]
# The baseline's code, and the candidate's: a branch committed before it (its records are older by commit date).
BASE = {"source_digest": "b" * 64, "git_commit": "b" * 40, "git_commit_date": "2026-11-26T08:00:00+00:00"}
CAND = {"source_digest": "c" * 64, "git_commit": "c" * 40, "git_commit_date": "2026-11-20T08:00:00+00:00"}


def _records(values: list[float], software: dict, dataset: str = "blobs") -> list[dict]:
    return [synthetic_record("infonce", s, v, software=software, dataset=dataset) for s, v in enumerate(values)]


@pytest.fixture
def in_process(run_main) -> Callable:
    """``in_process(*ARGS)``: ``harness ARGS`` called in this process, seen as its subprocess (``harness``) would be."""
    return functools.partial(run_main, main)


def _compare(through: Callable, tmp_path, base: list[dict], cand: list[dict], *extra: str) -> tuple[int, str]:
    """Exit status and stdout and stderr of ``harness compare`` (through ``through``: the ``harness`` subprocess, or
    ``in_process``) of the folders holding ``base`` and ``cand``."""
    write_records(tmp_path / "base", base)
    write_records(tmp_path / "cand", cand)
    done = through("compare", "--baseline", str(tmp_path / "base"), "--candidate", str(tmp_path / "cand"), *extra)
    return done.returncode, done.stdout + done.stderr


def test_allow_missing_never_waives_a_group_the_candidates_code_ran_behind_copies(tmp_path, in_process):
    """The candidate's folder was seeded with a copy of the baseline's blobs; its code, committed before the
    baseline's, then ran blobs 20 points down, and rings. The copies are blobs' newest code, so blobs was missing
    ("held only as the baseline's records") and --allow-missing passed it, the candidate's own result unseen."""
    base = _records(GOOD, BASE) + _records(GOOD, BASE, "rings")
    cand = _records(GOOD, BASE) + _records(BAD, CAND) + _records(GOOD, CAND, "rings")
    code, out = _compare(harness, tmp_path, base, cand, "--allow-missing")
    assert code == 1 and "PASS" not in out, out
    assert "the candidate's code(s) ccccccc ran it, unjudged (never waived)" in out
    assert "1 run by a side's code that copies of the other side's records shadow: never waived" in out
    # Named, the candidate's code is judged: blobs regressed.
    done = in_process("compare", "--baseline", str(tmp_path / "base"), "--candidate", f"{tmp_path / 'cand'}@cccc")
    assert done.returncode == 1 and "Regressions (1)" in done.stdout


def test_allow_missing_never_waives_a_group_whose_candidate_records_were_copied_into_the_baselines_folder(
        tmp_path, in_process):
    """The candidate's blobs, 20 points down, were copied into the baseline's folder, where they shadow the
    baseline's own code (committed before the candidate's): blobs was missing, compared with itself, and
    --allow-missing passed it."""
    late = {**CAND, "git_commit_date": "2026-11-27T08:00:00+00:00"}
    bad = _records(BAD, late)
    code, out = _compare(in_process, tmp_path, _records(GOOD, BASE) + _records(GOOD, BASE, "rings") + bad,
                         bad + _records(GOOD, late, "rings"), "--allow-missing")
    assert code == 1 and "PASS" not in out, out
    assert "the baseline's code(s) bbbbbbb ran it, unjudged (never waived)" in out


def test_copies_never_stand_for_groups_the_candidates_code_did_not_run(tmp_path, in_process):
    """The candidate's code, committed before the baseline's, ran only a new group (moons) in a folder seeded with
    the baseline's records: the copies were its newest code, and the gate passed blobs and rings, "compared and
    held", against themselves."""
    base = _records(GOOD, BASE) + _records(GOOD, BASE, "rings")
    cand = [*base, *_records(BAD, CAND, "moons")]
    code, out = _compare(in_process, tmp_path, base, cand)
    assert code == 2 and "PASS" not in out, out
    assert "while the candidate holds other code(s) too (ccccccc)" in out
    # Copies alone are one code on both sides (the candidate's run of the same code reused them): compared.
    code, out = _compare(in_process, tmp_path / "same", base, base)
    assert code == 0 and "PASS: every baseline group compared and held" in out, out


def test_a_commit_prefix_of_two_commits_is_refused_where_records_have_no_source_digest(tmp_path, in_process):
    """Records without a source digest are one code class per version: 'abcd' named two commits of it, and the
    gate judged both as one baseline, naming only the first."""
    one = {"git_commit": "abcd1" + "1" * 35, "git_commit_date": "2026-11-20T08:00:00+00:00"}
    two = {"git_commit": "abcd2" + "2" * 35, "git_commit_date": "2026-11-21T08:00:00+00:00"}
    cand = {"git_commit": "f" * 40, "git_commit_date": "2026-11-22T08:00:00+00:00"}
    records = [*_records(GOOD, one), *_records(GOOD, two, "rings"), *_records(GOOD, cand),
               *_records(GOOD, cand, "rings")]
    for record in records:  # one version, three commits: run ids apart
        record["software"]["contrastive_harness"] = "0.0.9"
        record["run_id"] = record["run_id"].replace("-s", f"-{record['software']['git_commit'][:5]}-s")
    write_records(tmp_path / "all", records)
    done = in_process("compare", "--results", str(tmp_path / "all"), "--baseline", "abcd", "--candidate", "ffff")
    assert done.returncode == 2 and "'abcd' is ambiguous" in done.stderr, done.stdout + done.stderr
    assert "abcd111" in done.stderr and "abcd222" in done.stderr
    done = in_process("compare", "--results", str(tmp_path / "all"), "--baseline", "abcd2", "--candidate", "ffff")
    assert done.returncode == 0 and "rings" in done.stdout and "blobs" not in done.stdout.split("## Added")[0]


def test_a_name_that_is_a_commit_in_git_and_the_first_digits_of_another_codes_digest_is_refused(
        tmp_path, monkeypatch, capsys):
    """git resolved the name to a commit, and the gate judged that commit's records (as bad as the candidate: a
    pass), never seeing the code whose source digest the name began, the baseline meant."""
    git = git_repo(tmp_path / "repo")
    git("commit", "-q", "--allow-empty", "-m", "one")
    commit = git("rev-parse", "HEAD")
    monkeypatch.setattr(version, "ROOT", tmp_path / "repo")  # the checkout whose refs the gate's names resolve in
    of_commit = _records(BAD, {"source_digest": "1" * 64, "git_commit": commit})
    meant = _records(GOOD, {"source_digest": commit[:8] + "9" * 56, "git_commit": "e" * 40})
    cand = _records(BAD, {"source_digest": "2" * 64, "git_commit": "f" * 40})
    for record in of_commit + meant + cand:
        record["run_id"] = record["run_id"].replace("-s", f"-{record['software']['source_digest'][:5]}-s")
    write_records(tmp_path / "all", of_commit + meant + cand)
    compare = ["compare", "--results", str(tmp_path / "all"), "--candidate", "2222", "--baseline"]
    assert main([*compare, commit[:8]]) == 2
    assert f"'{commit[:8]}' is ambiguous" in capsys.readouterr().err
    assert main([*compare, commit[:8] + "99"]) == 1  # the digest, named unambiguously: the candidate regressed


def test_a_version_that_begins_another_codes_source_digest_is_refused(tmp_path, in_process):
    """A version is read before anything else: the records of version 'cafe' were judged, never those whose source
    digest 'cafe' begins."""
    versioned = _records(BAD, {"source_digest": "1" * 64})
    meant = _records(GOOD, {"source_digest": "cafe" + "9" * 60})
    cand = _records(BAD, {"source_digest": "2" * 64})
    for record in versioned:
        record["software"]["contrastive_harness"] = "cafe"
    for record in versioned + meant + cand:
        record["run_id"] = record["run_id"].replace("-s", f"-{record['software']['source_digest'][:5]}-s")
    write_records(tmp_path / "all", versioned + meant + cand)
    done = in_process("compare", "--results", str(tmp_path / "all"), "--baseline", "cafe", "--candidate", "2222")
    assert done.returncode == 2 and "'cafe' is ambiguous" in done.stderr, done.stdout + done.stderr
