"""Importing submitit (``harness sweep --executor slurm``) leaves the process's logging alone.

submitit's own import runs ``logging.config.dictConfig``, which closes every logging handler of the process. absl's
handler (dm_control imports absl) closes the stream it was created with unless that is the current ``sys.stderr``:
after an in-process RL test that stream is pytest's capture file, so a later test that imports submitit under
``capsys`` closed it and pytest itself failed (test_stop's CURL test before
test_harness_sweep::test_slurm_falls_back_to_local_without_slurm). Each check runs in a fresh interpreter: submitit
is imported once per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("submitit")

SCRIPT = textwrap.dedent("""
    import io, logging, os, sys
    closed = []

    class Recording(logging.Handler):  # as a host program's handler, or absl's, which closes its stream
        def close(self):
            closed.append(self)
            super().close()

    handler = Recording()
    logging.getLogger("host").addHandler(handler)
    captured = io.StringIO()  # the stream a handler was bound to, no longer sys.stderr
    stream_handler = logging.StreamHandler(captured)
    sys.stderr = io.StringIO()
    from harness.sweep.cluster import import_submitit

    submitit = import_submitit()
    assert not closed, "importing submitit closed the process's logging handlers"
    assert logging.getLogger("host").handlers == [handler]
    assert not logging.getLogger("submitit").handlers, "submitit bound its handlers to this moment's streams"
    assert os.environ.get("SUBMITIT_LOG_LEVEL") == os.environ.get("GIVEN"), "the environment was not put back"
    print("level", logging.getLogger("submitit").level)
""")


@pytest.mark.parametrize("given", [None, "DEBUG"])
def test_importing_submitit_closes_no_logging_handler_and_binds_none(given):
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("SUBMITIT_LOG_LEVEL", "GIVEN")}
    if given:
        env.update(SUBMITIT_LOG_LEVEL=given, GIVEN=given)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["level", "10" if given else "0"]  # a level given still applies


def test_absl_keeps_the_stream_it_was_given_when_the_sweep_imports_submitit(tmp_path):
    """The reported failure itself, without pytest: absl's handler made while stderr was a capture file, then
    stderr replaced (capsys), then the Slurm executor's import."""
    pytest.importorskip("absl.logging")
    script = textwrap.dedent("""
        import io, sys, tempfile
        capture = tempfile.TemporaryFile("w+")
        sys.stderr = capture
        import absl.logging  # noqa: F401  (its handler takes the stderr of this moment)
        sys.stderr = io.StringIO()
        import argparse
        from harness.sweep.cluster import run_slurm
        import os
        os.environ["PATH"] = sys.argv[1]  # no srun on it: submitit finds no Slurm
        args = argparse.Namespace(results=sys.argv[1], timeout_min=10, device="cpu", slurm_partition=None)
        assert run_slurm([], 1, args, []) is None  # no Slurm here: the local executor takes over
        assert not capture.closed, "the capture file was closed"
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_submitit_log_level_that_is_no_level_is_one_error_line():
    script = ("from harness.sweep.cluster import import_submitit\n"
              "from domains.base import UserError\n"
              "try:\n    import_submitit()\nexcept UserError as exc:\n    print('error:', exc)\n")
    env = {**__import__("os").environ, "SUBMITIT_LOG_LEVEL": "verbose"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("error: SUBMITIT_LOG_LEVEL='verbose' is not a logging level"), done.stdout
