"""``harness list`` and ``harness bench`` on the tiny domain."""

from __future__ import annotations

import json
import sys
import types

import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
from tiny_domain import harness

from harness.bench import format_table
from harness.cli import main


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


def test_list_losses_shows_domains_hparams_and_labels(capsys):
    assert main(["list", "losses"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "alpha=0.1 (0, 1)" in lines["pucl"] and "tiny" in lines["pucl"].split("domains:")[1]
    assert "[needs labels]" in lines["supcon"] and "[needs labels]" not in lines["dcl"]
    assert "objective of domain" in lines["ce"] and "tiny" in lines["ce"]
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
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["batch", "device", "ms"]
    saved = json.loads((tmp_path / "tiny-cpu.json").read_text())
    assert [r["batch"] for r in saved["rows"]] == [64, 256] and saved["device"] == "cpu"
    assert main(["bench", "nope", "--out", str(tmp_path)]) == 2


def test_bench_losses_calls_the_loss_benchmark(tmp_path, monkeypatch, capsys):
    calls = []

    def run_benchmark(batch_sizes, dim, device):
        calls.append((batch_sizes, dim, device))
        return [{"loss": "infonce", "batch_size": b, "time_ms": 1.5} for b in batch_sizes]

    monkeypatch.setitem(sys.modules, "losses.benchmark", types.SimpleNamespace(run_benchmark=run_benchmark))
    assert main(["bench", "losses", "--batch-sizes", "8,16", "--dim", "4", "--out", str(tmp_path)]) == 0
    assert calls == [([8, 16], 4, "cpu")]
    assert json.loads((tmp_path / "losses-cpu.json").read_text())["rows"][1]["batch_size"] == 16
    assert "infonce" in capsys.readouterr().out


def test_format_table_aligns_columns():
    table = format_table([{"a": "x", "b": 1.23456}, {"a": "long", "b": 10}])
    assert table.splitlines() == ["a     b    ", "----  -----", "x     1.235", "long     10"]
