"""Shared test fixtures. Tests run on the CPU with one thread: the machine has two cores."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parent.parent


def _data_root() -> Path:
    env = os.environ.get("HARNESS_DATA_ROOT")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The real data beside the repo (``../shared/data`` or HARNESS_DATA_ROOT); skips when absent."""
    root = _data_root()
    if not root.is_dir():
        pytest.skip(f"real data not found at {root} (set HARNESS_DATA_ROOT)")
    return root


@pytest.fixture(scope="session")
def data_set(data_root: Path):
    """``data_set("TU", "MUTAG", "raw")``: that folder of the data root; skips the test when it is absent (a data
    root holds only some sets: the GPU machine gets only the sets a call staged)."""

    def folder(*parts: str) -> Path:
        path = data_root.joinpath(*parts)
        if not path.is_dir():
            pytest.skip(f"{'/'.join(parts)} not in the data root {data_root}")
        return path

    return folder


@pytest.fixture(scope="session")
def rendering() -> str:
    """The MuJoCo rendering backend (egl or osmesa); skips when dm_control cannot render here."""
    from domains.errors import UserError
    from domains.rl.env import rendering_backend

    try:
        return rendering_backend()
    except UserError as exc:
        pytest.skip(f"dm_control cannot render here: {exc}")


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    """The CUDA device, for tests marked ``gpu``; skips where torch sees no CUDA."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device("cuda")


@pytest.fixture
def run_main(capsys, monkeypatch) -> Callable[..., subprocess.CompletedProcess]:
    """``run_main(main, *args)``: a command's ``main`` called in this process from the repository root, seen as its
    subprocess would be (the exit status, argparse's refusals included, and what it printed). For checks of what
    only plans or refuses, without a fresh interpreter's seconds of imports; each command keeps a subprocess test."""
    monkeypatch.chdir(REPO)

    def call(main: Callable[[list[str]], int], *args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
        said = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, said.out, said.err)

    return call


@pytest.fixture
def suite_in_process(run_main, monkeypatch) -> Callable[..., subprocess.CompletedProcess]:
    """``suite_in_process(*ARGS, **env)``: ``tools/regression-suite ARGS`` called in this process (``run_main``), the
    runs and the comparison it starts (subprocesses) with the tiny domain plugged in and ``env`` set: without the
    script's interpreter of seconds of imports. The script itself runs once in a dry run, and in the slow end-to-end
    tests (tests/test_regression_suite.py)."""
    from tiny_domain import harness_env

    from harness.suites.__main__ import main as suite_main

    for name in ("HARNESS_PLUGINS", "PYTHONPATH", "PYTHONUNBUFFERED"):
        monkeypatch.setenv(name, harness_env()[name])

    def call(*args: str, **env: str) -> subprocess.CompletedProcess:
        with monkeypatch.context() as scoped:
            for name, value in env.items():
                scoped.setenv(name, value)
            return run_main(suite_main, *args)

    return call


@pytest.fixture
def plugins_afresh(monkeypatch) -> Callable[[str], None]:
    """``plugins_afresh(NAMES)``: the next command called in this process loads ``HARNESS_PLUGINS=NAMES`` as a fresh
    process would (the plugins it loaded already stay registered)."""
    import domains

    def load(names: str) -> None:
        monkeypatch.setenv("HARNESS_PLUGINS", names)
        monkeypatch.setattr(domains, "_plugins_loaded", False)

    return load
