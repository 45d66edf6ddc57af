"""``harness list`` and ``harness bench`` (one target, and ``all``) on the tiny domain and the real benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
import torch
from tiny_domain import REPO, RESUMES_WITH, harness, harness_env

from harness import bench
from harness.bench import format_table
from harness.cli import main
from harness.run import stopping


def test_list_everything_in_a_subprocess():
    out = harness("list")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for section in ("domains:", "datasets:", "losses:", "presets:"):
        assert section in text
    assert "tiny " in text and "tiny/blobs " in text and "[default, embedded]" in text
    assert "tiny/absent" in text and "[download]" in text
    assert "tiny/quick" in text and "seeds 0,1" in text
    assert "baseline: infonce; linear2: supcon)" in text


def test_a_plugin_that_cannot_be_imported_is_one_line(run_main, plugins_afresh):
    env = {**harness_env(), "HARNESS_PLUGINS": "tiny_domain, no_such_plugin_module"}
    out = subprocess.run([sys.executable, "-m", "harness", "list", "domains"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: HARNESS_PLUGINS names 'no_such_plugin_module'")
    # run too, through main in this process as a fresh one that loads its plugins
    plugins_afresh(env["HARNESS_PLUGINS"])
    out = run_main(main, "run", "--domain", "graph", "--loss", "pucl")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: HARNESS_PLUGINS names 'no_such_plugin_module'")


def test_list_losses_shows_domains_hparams_labels_and_papers(capsys):
    assert main(["list", "losses"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "alpha=0.1 (0, 1)" in lines["pucl"] and "tiny" in lines["pucl"].split("domains:")[1]
    assert lines["pucl"].endswith("; paper: Wang et al. 2024, Contrastive Learning with Negative Sampling "
                                  "Correction (PUCL)")
    assert "[needs labels]" in lines["supcon"] and "[needs labels]" not in lines["dcl"]
    assert "[needs labels]" in lines["ce"] and "tiny" in lines["ce"].split("domains:")[1]
    assert "tiny" not in lines["jsd"].split("domains:")[1]


def test_list_survives_a_broken_domain(monkeypatch, capsys):
    import domains

    class Broken(tiny_domain.TinyDomain):
        name = "broken"

        def __init__(self):
            raise domains.UserError("this needs the Python package 'nothing'; install it with: pip install x")

    monkeypatch.setitem(domains._REGISTRY, "broken", Broken)
    assert main(["list", "domains"]) == 0
    assert "broken  unavailable: this needs the Python package 'nothing'" in capsys.readouterr().out


def test_bench_domain_prints_and_saves(tmp_path, capsys):
    assert main(["bench", "tiny", "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["tiny: measuring B=64", f"wrote {tmp_path / 'tiny-cpu.json'} (1 of 2 parts)"]
    assert ["batch", "device", "ms", "pid"] in [line.split() for line in out]
    saved = json.loads((tmp_path / "tiny-cpu.json").read_text())
    assert [r["batch"] for r in saved["rows"]] == [64, 256] and saved["device"] == "cpu"
    assert saved["parts"] == saved["parts_done"] == ["B=64", "B=256"] and saved["complete"] is True
    assert [r["part"] for r in saved["rows"]] == ["B=64", "B=256"] and "part" not in saved["columns"]
    assert main(["bench", "nope", "--out", str(tmp_path)]) == 2


def test_bench_losses_calls_the_loss_benchmark(tmp_path, monkeypatch, capsys):
    calls = []

    def run_benchmark(batch_sizes, dim, device):
        calls.append((batch_sizes, dim, device))
        return [{"loss": "infonce", "batch_size": b, "time_ms": 1.5} for b in batch_sizes]

    monkeypatch.setitem(sys.modules, "losses.benchmark", types.SimpleNamespace(run_benchmark=run_benchmark))
    assert main(["bench", "losses", "--batch-sizes", "8,16", "--dim", "4", "--out", str(tmp_path)]) == 0
    assert calls == [([8], 4, "cpu"), ([16], 4, "cpu")]  # a part per batch size
    assert json.loads((tmp_path / "losses-cpu.json").read_text())["rows"][1]["batch_size"] == 16
    assert "infonce" in capsys.readouterr().out



def test_bench_resume_keeps_the_benchmarks_column_order(tmp_path, monkeypatch, capsys):
    """The file writes a row's keys sorted: a resumed benchmark's table and ``columns`` are still in the order
    the benchmark emitted them (first seen, parts in order), as in a run that was never stopped."""
    failing = {16}

    def run_benchmark(batch_sizes, dim, device):
        (b,) = batch_sizes
        if b in failing:
            raise RuntimeError(f"a planted failure at B={b}")
        return [{"loss": "infonce", "time_ms": 1.5, **({"speedup": 2.0} if b == 16 else {}), "batch_size": b}]

    monkeypatch.setitem(sys.modules, "losses.benchmark", types.SimpleNamespace(run_benchmark=run_benchmark))
    args = ["bench", "losses", "--batch-sizes", "8,16", "--dim", "4", "--out", str(tmp_path)]
    assert main(args) == 1  # B=16 failed: the file keeps B=8, its keys sorted
    failing.clear()
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    emitted = ["loss", "time_ms", "batch_size", "speedup"]
    assert emitted in [line.split() for line in capsys.readouterr().out.splitlines()]
    assert json.loads((tmp_path / "losses-cpu.json").read_text())["columns"] == emitted

def test_format_table_aligns_columns():
    table = format_table([{"a": "x", "b": 1.23456}, {"a": "long", "b": 10}])
    assert table.splitlines() == ["a         b", "----  -----", "x     1.235", "long     10"]


def test_format_table_prints_big_and_small_floats_without_exponents_as_the_bench_page_does():
    table = format_table([{"updates/s": 12345.6, "ms": 0.000123456}, {"updates/s": 250.0, "ms": 4.0}])
    assert table.splitlines() == ["  updates/s         ms", "-----------  ---------", "      12346  0.0001235",
                                  "        250          4"]


def test_bench_all_runs_every_named_target_in_one_invocation(tmp_path):
    """The real loss benchmark and the real graph benchmark, through a subprocess; with no data the graph
    datasets are reported as skipped rows, so the exit status is 3 (something was skipped), not a crash."""
    out = harness("bench", "all", "--device", "cpu", "--quick", "--targets", "losses,graph", "--batch-sizes", "8,16",
                  "--data-root", str(tmp_path / "empty"), "--out", str(tmp_path / "bench"), timeout=600)
    assert out.returncode == 3, out.stderr
    assert "skipped graph/MUTAG: TU dataset 'MUTAG' not found" in out.stdout
    assert sorted(p.name for p in (tmp_path / "bench").iterdir()) == ["graph-cpu.json", "losses-cpu.json"]
    saved = json.loads((tmp_path / "bench" / "losses-cpu.json").read_text())
    assert sorted({r["batch_size"] for r in saved["rows"]}) == [8, 16] and saved["name"] == "losses"
    assert saved["command"] == ["harness", "bench", "losses", "--device", "cpu", "--batch-sizes", "8,16",
                                "--dim", "128"]
    assert saved["columns"][:2] == ["loss", "batch_size"] and saved["quick"] is False
    assert saved["hardware"]["cpu"] and saved["hardware"]["torch"] and "git_commit" in saved["software"]
    assert saved["date"].startswith("20")
    graph = json.loads((tmp_path / "bench" / "graph-cpu.json").read_text())
    assert [r["dataset"] for r in graph["rows"]] == ["MUTAG", "REDDIT-BINARY"] and graph["quick"] is True


def _bench_domain(name: str, error: Exception):
    class Failing(tiny_domain.TinyDomain):
        def benchmark(self, device, data_root, quick):
            raise error

    Failing.name = name
    return Failing


def test_bench_all_skips_a_missing_extra_and_survives_a_crash(tmp_path, monkeypatch, capsys):
    import domains
    from domains.errors import DatasetMissingError

    monkeypatch.setitem(domains._REGISTRY, "nodata", _bench_domain("nodata", DatasetMissingError("put X in Y")))
    monkeypatch.setitem(domains._REGISTRY, "noextra", _bench_domain("noextra", ImportError("No module named 'zz'")))
    monkeypatch.setitem(domains._REGISTRY, "buggy", _bench_domain("buggy", RuntimeError("a bug")))
    args = ["bench", "all", "--device", "cpu", "--quick", "--out", str(tmp_path)]
    assert main([*args, "--targets", "nodata,tiny,noextra"]) == 3
    out = capsys.readouterr().out
    assert "skipped nodata: put X in Y" in out and "skipped noextra: No module named 'zz'" in out
    assert "written tiny; skipped nodata, noextra; failed none" in out
    assert [p.name for p in tmp_path.iterdir()] == ["tiny-cpu.json"]
    assert main([*args, "--targets", "buggy,tiny"]) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: a bug" in captured.err and "written tiny; skipped none; failed buggy" in captured.out
    assert main([*args, "--targets", "tiny"]) == 0


def test_bench_all_rejects_unknown_targets_before_running_anything(tmp_path, capsys):
    assert main(["bench", "all", "--targets", "tiny,nope", "--out", str(tmp_path)]) == 2
    assert "unknown target(s) nope" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
    assert main(["bench", "tiny", "--targets", "tiny", "--out", str(tmp_path)]) == 2
    capsys.readouterr()


@pytest.mark.parametrize("args, message", [
    (["all", "--targets", ""], "(none given)"),  # an empty list (an unset variable) is not "every target"
    (["losses", "--dim", "0"], "--dim must be an embedding size of at least 1"),
    (["losses", "--dim", "-4"], "--dim must be an embedding size of at least 1"),
    (["tiny", "--dim", "8"], "--batch-sizes and --dim are for 'losses'"),
    (["tiny", "--batch-sizes", "8"], "--batch-sizes and --dim are for 'losses'"),
    (["losses", "--quick"], "--quick is for a domain's benchmark"),
])
def test_bench_options_that_cannot_apply_are_refused_before_anything_runs(tmp_path, capsys, args, message):
    assert main(["bench", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())


def test_bench_losses_default_batch_sizes_depend_on_the_device(tmp_path, monkeypatch):
    from harness.bench import batch_sizes

    calls = []
    monkeypatch.setitem(sys.modules, "losses.benchmark", types.SimpleNamespace(
        run_benchmark=lambda sizes, dim, device: calls.append(sizes) or []))
    assert main(["bench", "losses", "--out", str(tmp_path)]) == 0
    assert calls == [[256], [512], [1024]]
    assert batch_sizes(None, torch.device("cuda")) == [512, 4096, 16384]
    assert main(["bench", "losses", "--batch-sizes", "8,x", "--out", str(tmp_path)]) == 2


@pytest.mark.gpu
def test_bench_all_on_cuda_records_the_gpu(cuda, tmp_path):
    assert main(["bench", "all", "--device", "cuda", "--targets", "losses", "--batch-sizes", "512",
                 "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "losses-cuda.json").read_text())
    assert saved["hardware"]["device_name"] == torch.cuda.get_device_name(cuda)
    assert saved["hardware"]["cuda"] and saved["hardware"]["cudnn"] and saved["rows"][0]["device"] == "cuda"


@pytest.fixture
def part_clock(monkeypatch) -> None:
    """One clock for the time limit (``stopping``), a part's seconds (``harness.bench``) and the tiny parts' sleep
    (TINY_BENCH_SLEEP), which alone moves it: which parts fit a limit follows from the parts' seconds, not from how
    long a loaded machine takes to set the benchmark up (git, the hardware facts), which the real clock counted."""
    now = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: now[0], perf_counter=lambda: now[0],
                                  sleep=lambda seconds: now.__setitem__(0, now[0] + seconds))
    for module in (stopping, bench, tiny_domain):
        monkeypatch.setattr(module, "time", clock)


def _pids(path) -> dict[str, int]:
    return {row["part"]: row["pid"] for row in json.loads(path.read_text())["rows"]}


def test_a_benchmark_stopped_by_sigterm_keeps_its_parts_and_resumes_with_the_rest(tmp_path, monkeypatch, run_main):
    """SIGTERM during the second of three parts: that part ends, its rows are written, the third is not started,
    exit 75 with the command that goes on; that command measures only the third part, in another process (this
    one: ``main``, what the command calls)."""
    args = ("bench", "tiny", "--device", "cpu", "--out", str(tmp_path))
    monkeypatch.setenv("TINY_BENCH_SIGTERM", "B=256")
    first = harness(*args)
    monkeypatch.delenv("TINY_BENCH_SIGTERM")
    assert first.returncode == 75, first.stderr
    assert "tiny: stopped (SIGTERM) with 2 of 3 parts" in first.stdout
    assert f"continue with: {RESUMES_WITH} bench tiny --device cpu --out {tmp_path} --resume" in first.stdout
    saved = json.loads((tmp_path / "tiny-cpu.json").read_text())
    assert saved["complete"] is False and saved["parts_done"] == ["B=64", "B=256"]
    kept = _pids(tmp_path / "tiny-cpu.json")
    second = run_main(main, *args, "--resume")
    assert second.returncode == 0, second.stderr
    assert "tiny: kept 2 of 3 parts" in second.stdout and second.stdout.count("measuring") == 1
    pids = _pids(tmp_path / "tiny-cpu.json")
    assert [pids["B=64"], pids["B=256"]] == [kept["B=64"], kept["B=256"]] and pids["B=1024"] not in kept.values()
    saved = json.loads((tmp_path / "tiny-cpu.json").read_text())
    assert saved["complete"] is True and [s["parts"] for s in saved["sessions"]] == [["B=64", "B=256"], ["B=1024"]]
    assert set(saved["sessions"][0]["seconds"]) == {"B=64", "B=256"} and saved["sessions"][1]["seconds"]["B=1024"] >= 0
    third = run_main(main, *args, "--resume")  # nothing left: nothing measured, the file unchanged
    assert third.returncode == 0 and "measuring" not in third.stdout and _pids(tmp_path / "tiny-cpu.json") == pids


def test_a_resumed_benchmark_is_a_session_of_its_own_in_the_same_second(tmp_path, monkeypatch, part_clock):
    """Sessions are told apart by the call that measured them, not by their date (to the second): a stopped
    benchmark resumed within the same second (here, its clock stands still) still has two sessions."""
    monkeypatch.setattr(bench, "utc_now", lambda: "2030-01-02T03:04:05+00:00")
    monkeypatch.setenv("TINY_BENCH_SLEEP", "1")
    args = ["bench", "tiny", "--device", "cpu", "--out", str(tmp_path)]
    assert main([*args, "--time-limit", "2.5s"]) == 75
    first = json.loads((tmp_path / "tiny-cpu.json").read_text())["parts_done"]
    monkeypatch.setenv("TINY_BENCH_SLEEP", "0")
    assert main([*args, "--resume"]) == 0
    saved = json.loads((tmp_path / "tiny-cpu.json").read_text())
    assert [s["parts"] for s in saved["sessions"]] == [first, ["B=1024"]] and first == ["B=64", "B=256"]


def test_bench_time_limit_stops_before_a_part_that_would_not_fit(tmp_path, monkeypatch, part_clock):
    """Parts of 1 s under a 2.5 s limit (2.375 s less its margin): a part starts only while the longest part so
    far still fits, so the second starts at 1 s and the third, at 2 s, does not."""
    monkeypatch.setenv("TINY_BENCH_SLEEP", "1")
    args = ["bench", "all", "--targets", "tiny,losses", "--batch-sizes", "8", "--device", "cpu", "--out",
            str(tmp_path)]
    assert main([*args, "--time-limit", "2.5s"]) == 75
    saved = json.loads((tmp_path / "tiny-cpu.json").read_text())
    assert saved["complete"] is False and saved["parts_done"] == ["B=64", "B=256"]
    assert not (tmp_path / "losses-cpu.json").exists()  # 'all' starts no target after a stopped one
    monkeypatch.setenv("TINY_BENCH_SLEEP", "0")
    assert main([*args, "--resume"]) == 0
    assert json.loads((tmp_path / "tiny-cpu.json").read_text())["complete"] is True
    assert (tmp_path / "losses-cpu.json").exists()


def test_bench_time_limit_expects_a_part_to_take_what_it_took_before(tmp_path, monkeypatch, capsys, part_clock):
    """Before a part, the time limit expects the part's own earlier time from the file at --out (measured on this
    kind of machine, by any code), not only the longest part so far: here the second part once took 30 s, so with
    1 s parts and a 2.5 s limit it is not started, where the longest part so far (1 s) would have let it."""
    monkeypatch.setenv("TINY_BENCH_SLEEP", "1")
    args = ["bench", "tiny", "--device", "cpu", "--out", str(tmp_path)]
    assert main(args) == 0
    path = tmp_path / "tiny-cpu.json"
    saved = json.loads(path.read_text())
    saved["software"]["source_digest"] = "0" * 64  # other code: its parts are not kept, its times still count
    saved["sessions"][0]["seconds"]["B=256"] = 30.0
    path.write_text(json.dumps(saved))
    capsys.readouterr()
    assert main([*args, "--time-limit", "2.5s"]) == 75
    assert "tiny: stopped (time limit: the next part may take 30 s) with 1 of 3 parts" in capsys.readouterr().out
    saved["hardware"]["cpu"] = "another CPU"  # another kind of machine: its times say nothing of this one's
    path.write_text(json.dumps(saved))
    assert main([*args, "--time-limit", "2.5s"]) == 75
    assert json.loads(path.read_text())["parts_done"] == ["B=64", "B=256"]


def test_bench_resume_measures_again_what_it_cannot_keep(tmp_path, capsys):
    """Other options, other code, or a file without parts: every part is measured again, and the reason said."""
    path = tmp_path / "tiny-cpu.json"
    assert main(["bench", "tiny", "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    assert main(["bench", "tiny", "--device", "cpu", "--out", str(tmp_path), "--resume"]) == 0  # not --quick
    assert "measured with other options, other code" in capsys.readouterr().out
    assert json.loads(path.read_text())["parts_done"] == ["B=64", "B=256", "B=1024"]
    saved = json.loads(path.read_text())
    saved["software"]["source_digest"] = "0" * 64
    path.write_text(json.dumps(saved))
    assert main(["bench", "tiny", "--device", "cpu", "--out", str(tmp_path), "--resume"]) == 0
    assert "measured with other options, other code" in capsys.readouterr().out
    path.write_text(json.dumps({"rows": [], "command": []}))  # written before benchmarks had parts
    assert main(["bench", "tiny", "--device", "cpu", "--out", str(tmp_path), "--resume"]) == 0
    assert "holds no parts to resume; measuring every part" in capsys.readouterr().out
    assert json.loads(path.read_text())["complete"] is True


def test_bench_all_measures_what_the_targets_read_first():
    """A time limit cuts the end of 'all': the loss core and the domains bench.md's targets read come first."""
    from harness.bench import all_targets

    targets = all_targets(None)  # then the other domains by name (the tests' plugins among them)
    assert targets[:4] == ["losses", "vision", "rl", "text"] and targets[4:] == sorted(targets[4:])
    assert {"graph", "tiny"} <= set(targets[4:])
    assert all_targets("graph,losses") == ["graph", "losses"]  # named targets keep the order given


def test_a_part_that_crashes_leaves_the_others_and_is_measured_again_on_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TINY_BENCH_FAIL", "B=256")
    args = ["bench", "all", "--targets", "tiny,losses", "--batch-sizes", "8", "--device", "cpu", "--out", str(tmp_path)]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: a planted failure of part B=256" in captured.err
    assert "failed tiny: 1 of 3 parts failed (B=256)" in captured.out and "written losses" in captured.out
    saved = json.loads((tmp_path / "tiny-cpu.json").read_text())
    assert saved["parts_done"] == ["B=64", "B=1024"] and saved["complete"] is False
    monkeypatch.delenv("TINY_BENCH_FAIL")
    assert main(["bench", "tiny", "--device", "cpu", "--out", str(tmp_path), "--resume"]) == 0
    assert capsys.readouterr().out.count("measuring") == 1
    assert json.loads((tmp_path / "tiny-cpu.json").read_text())["parts_done"] == ["B=64", "B=256", "B=1024"]
    monkeypatch.setenv("TINY_BENCH_FAIL", "B=64")
    assert main(["bench", "tiny", "--device", "cpu", "--out", str(tmp_path)]) == 1  # one target: exit 1 as well
    assert "error: tiny: 1 of 3 parts failed (B=64)" in capsys.readouterr().err


def test_bench_an_unknown_target_names_the_closest_and_every_target(run_main):
    """It said ``unknown domain 'lossess'. Available: graph, rl, text, vision``: no 'losses', no 'all', no hint."""
    import domains

    out = run_main(main, "bench", "lossess")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (f"error: unknown target 'lossess'; did you mean 'losses'? Available: losses, all, "
                          f"{', '.join(domains.available())}\n")
    assert "did you mean 'graph'?" in run_main(main, "bench", "all", "--targets", "grph").stderr


def test_a_benchmark_stopped_before_its_first_part_says_it_wrote_nothing(tmp_path, run_main, monkeypatch):
    """It said ``0 of 3 parts in <file>`` of a file it never wrote; a file an earlier run left is kept as it was."""
    from harness.run import stopping

    path = tmp_path / "tiny-cpu.json"
    args = ["bench", "tiny", "--device", "cpu", "--out", str(tmp_path)]
    stopping.request_stop("SIGTERM")  # as if it came before the first part (cmd_bench's graceful() resets it)
    try:
        out = run_main(main, *args)
    finally:
        stopping.reset()
    assert out.returncode == 75 and not path.exists()
    assert f"tiny: stopped (SIGTERM) before measuring any of its 3 parts: nothing was written to {path}\n" \
        in out.stdout
    assert run_main(main, *args).returncode == 0
    saved = json.loads(path.read_text())
    saved["sessions"][0]["seconds"]["B=64"] = 30.0  # the first part once took 30 s: a 2.5 s limit starts none
    path.write_text(json.dumps(saved))
    monkeypatch.setenv("TINY_BENCH_SLEEP", "0")
    out = run_main(main, *args, "--time-limit", "2.5s")
    assert out.returncode == 75 and json.loads(path.read_text()) == saved
    assert (f"tiny: stopped (time limit: the next part may take 30 s) before measuring any of its 3 parts: {path} "
            "is left as it was; give a longer --time-limit\n") in out.stdout


NOISY_PLUGIN = """
import warnings

import domains
from domains.base import BenchPart
from tiny_domain import TinyDomain


def _rows():
    # What importing torch_geometric does (torch.jit.script's deprecation), without its seconds of imports.
    warnings.warn("`torch.jit.script` is deprecated.", FutureWarning)
    return [{"rows": 1}]


@domains.register
class Noisy(TinyDomain):
    name = "noisy"

    def benchmark(self, device, data_root, quick):
        return [BenchPart("all", _rows)]
"""


def test_bench_hides_the_profilers_log_lines_and_library_warnings(tmp_path):
    """On a CPU-only machine with torch's CUDA build the loss benchmark's profiler printed ``USDT: ...
    profiler_start/stop`` lines and ``ERROR: ... gpuGetDeviceCount failed``, and a library's FutureWarning showed,
    where ``harness run`` hides them. A subprocess: Kineto reads its level once per process."""
    (tmp_path / "noisy_bench.py").write_text(NOISY_PLUGIN)
    env = harness_env()
    env.pop("KINETO_LOG_LEVEL", None)
    env["HARNESS_PLUGINS"] = "tiny_domain,noisy_bench"
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    out = subprocess.run([sys.executable, "-m", "harness", "bench", "all", "--targets", "losses,noisy", "--quick",
                          "--batch-sizes", "2", "--device", "cpu", "--out", str(tmp_path / "bench")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "written losses, noisy" in out.stdout
    noise = [line for line in out.stderr.splitlines() if line.startswith(("ERROR:", "USDT:", "STAGE:"))
             or "FutureWarning" in line]
    assert not noise, out.stderr


def test_bench_resume_refuses_a_bench_file_that_is_a_symbolic_link(tmp_path, run_main):
    """--resume read its earlier file through a link (whatever JSON it pointed at, its parts kept): refused, as the
    bench pages refuse one, and the linked file left as it was. In this process (``main``, what the command
    calls): bench's exits through the command are the SIGTERM test's."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    (out / "tiny-cpu.json").symlink_to(elsewhere)
    ran = run_main(main, "bench", "tiny", "--quick", "--device", "cpu", "--out", str(out), "--resume")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert f"error: {out / 'tiny-cpu.json'} is a symbolic link" in ran.stderr
    assert elsewhere.read_text() == "{}" and "measuring" not in ran.stdout
