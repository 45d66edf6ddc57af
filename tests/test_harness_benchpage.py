"""``leaderboards/bench.md`` from hand-written bench files: the cells, the targets' verdicts (worked out by
hand below), missing keys, and what ``harness leaderboard`` does with and without bench files."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain the records below belong to)
from tiny_domain import synthetic_record, write_records

from domains.errors import UserError
from harness.cli import main
from harness.pages.bench import read_benches, write_benches

H100 = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "cpu": "AMD EPYC 9454", "cpu_count": 16,
        "torch_threads": 16, "torch": "2.11.0", "cuda": "13.0", "cudnn": 91000, "python": "3.12.3"}
A100 = {**H100, "device_name": "NVIDIA A100-SXM4-40GB"}
SOFTWARE = {"contrastive_harness": "0.1.0", "git_commit": "0123456789abcdef", "git_dirty": True}


def write_bench_page(bench_dir: Path, out: Path) -> Path:
    """``out/bench.md`` from ``bench_dir``'s files, as ``harness leaderboard`` writes it."""
    return write_benches(read_benches(bench_dir), out)


def bench_file(folder: Path, name: str, rows: list[dict], *, device: str = "cuda", hardware: dict = H100,
               quick: bool = False, stem: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"name": name, "device": device, "quick": quick, "hardware": hardware, "software": SOFTWARE,
            "date": "2030-01-02T03:04:05+00:00", "command": ["harness", "bench", name, "--device", device],
            "columns": list(dict.fromkeys(k for r in rows for k in r)), "rows": rows}
    (folder / f"{stem or f'{name}-{device}'}.json").write_text(json.dumps(data, sort_keys=True))


def vision_row(bf16: bool, harness: float, minimal: float, **extra) -> dict:
    return {"benchmark": "simclr_pretrain", "arch": "resnet18", "image_size": 32, "batch_size": 512, "bf16": bf16,
            "harness_images_per_s": harness, "minimal_images_per_s": minimal, "ratio": harness / minimal, **extra}


def fixtures(folder: Path) -> None:
    bench_file(folder, "losses", [
        {"loss": "nt_xent", "batch_size": 512, "time_ms": 2.0, "time_ratio": 1.0, "memory_ratio": 1.0},
        {"loss": "dcl", "batch_size": 512, "time_ms": 2.4, "time_ratio": 1.2, "memory_ratio": 1.4},
        {"loss": "hcl", "batch_size": 4096, "time_ms": 2.8, "time_ratio": 1.4},  # no memory_ratio: "–"
        # compiled rows: their own targets; the rows above (written before the key was) are the eager ones
        {"loss": "nt_xent", "batch_size": 512, "compiled": True, "time_ms": 1.0, "time_ratio": 1.0},
        {"loss": "dcl", "batch_size": 512, "compiled": True, "time_ms": 1.1, "time_ratio": 1.1},
    ])
    biased = {"benchmark": "biased_pretrain", "batch_size": 256, "bf16": False}
    bench_file(folder, "vision", [vision_row(False, 15_000.0, 15_500.0, cuda_graph=True),
                                  vision_row(True, 26_000.0, 27_000.0, cuda_graph=True),
                                  {**biased, "cuda_graph": True, "epoch_s": 0.28},
                                  {**biased, "cuda_graph": False, "epoch_s": 2.1}])  # eager: not the target's row
    graphed = {"cuda_graph": True, "encoder_bf16": False}  # the target reads the default setting's row only
    bench_file(folder, "rl", [{"what": "updates_per_s", "batch_size": 128, "value": 400.0, **graphed},
                              {"what": "updates_per_s", "batch_size": 512, "value": 240.0, **graphed},
                              {"what": "updates_per_s", "batch_size": 512, "value": 90.0, "cuda_graph": False,
                               "encoder_bf16": False}])
    tasks = ("MR", "CR", "SUBJ", "MPQA", "TREC", "MRPC")
    bench_file(folder, "text", [{"benchmark": "train", "sentences_per_s": 5000.0}]
               + [{"benchmark": "senteval", "task": t, "seconds": 9.5} for t in tasks])
    # On an A100 the img/s target (an H100's) does not apply; a renamed key leaves the ratio target without figure.
    bench_file(folder, "vision", [{**vision_row(True, 20_000.0, 19_000.0), "ratio": None}], hardware=A100,
               stem="vision-cuda-a100")


def tables(page: str) -> dict[str, list[list[dict[str, str]]]]:
    """Each ``## section``'s markdown tables as lists of {column: cell}."""
    out: dict[str, list[list[dict[str, str]]]] = {}
    section, header = "", None
    for line in page.splitlines():
        if line.startswith("## "):
            section, header = line[3:], None
            out[section] = []
        elif line.startswith("|---"):
            continue
        elif line.startswith("| "):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            if header is None:
                header = cells
                out[section].append([])
            else:
                out[section][-1].append(dict(zip(header, cells)))
        else:
            header = None
    return out


@pytest.fixture
def page(tmp_path) -> str:
    fixtures(tmp_path / "bench")
    path = write_bench_page(tmp_path / "bench", tmp_path)
    assert path == tmp_path / "bench.md"
    return path.read_text()


def test_target_summary(page):
    summary = {(r["target"], r["file"]): r for r in tables(page)["Targets"][0]}
    gpu_time = summary["loss step <= 1.3x NT-Xent (GPU, wall time)", "losses-cuda"]
    assert (gpu_time["figure"], gpu_time["met?"]) == ("1.4 (worst of 2 rows)", "no")  # nt_xent itself left out
    compiled = summary["compiled loss step <= 1.3x compiled NT-Xent at B=512 (GPU, wall time)", "losses-cuda"]
    assert (compiled["figure"], compiled["met?"]) == ("1.1", "yes")
    memory = summary["loss peak memory <= 1.5x NT-Xent at B=512", "losses-cuda"]
    assert (memory["figure"], memory["met?"]) == ("1.4", "yes")
    ratio = summary["vision harness loop >= 0.95x the hand-written loop", "vision-cuda"]
    assert (ratio["figure"], ratio["met?"]) == ("0.963 (worst of 2 rows)", "yes")
    rate = summary["SimCLR ResNet-18 32x32 batch 512 bf16 >= 25,000 img/s on an H100", "vision-cuda"]
    assert (rate["figure"], rate["met?"], rate["threshold"]) == ("26000", "yes", "`harness_images_per_s` >= 25000")
    assert ("SimCLR ResNet-18 32x32 batch 512 bf16 >= 25,000 img/s on an H100", "vision-cuda-a100") not in summary
    renamed = summary["vision harness loop >= 0.95x the hand-written loop", "vision-cuda-a100"]
    assert (renamed["figure"], renamed["met?"]) == ("– (no `ratio`)", "–")
    rl = summary["rl >= 250 updates/s at batch 512 (GPU)", "rl-cuda"]
    assert (rl["figure"], rl["met?"]) == ("240", "no")
    text = summary["text SentEval six tasks <= 60 s (GPU)", "text-cuda"]
    assert (text["figure"], text["met?"]) == ("57 (sum of 6 rows)", "yes")
    absent = summary["text SentEval six tasks <= 5 min (CPU)", "–"]
    assert (absent["figure"], absent["met?"]) == ("– (not measured)", "–")
    biased = summary["vision biased track <= 0.3 s per Biased-MNIST epoch on an H100", "vision-cuda"]
    assert (biased["figure"], biased["met?"]) == ("0.28", "yes")


def test_rows_carry_their_targets_beside_their_anchor(page):
    sections = tables(page)
    losses = {r["loss"]: r for r in sections["losses-cuda"][0] if r.get("compiled") != "True"}
    assert list(losses["dcl"]) == ["loss", "batch_size", "time_ms", "time_ratio", "memory_ratio", "target", "met?"]
    assert losses["nt_xent"]["target"] == "" and losses["nt_xent"]["memory_ratio"] == "1"
    assert losses["dcl"]["met?"] == "yes; yes" and losses["hcl"]["met?"] == "no"
    # the kernel count is read from CPU files only (it is counted on the CPU whatever the device)
    assert losses["dcl"]["target"] == "`time_ratio` <= 1.3; `memory_ratio` <= 1.5"
    vision = {r["bf16"]: r for r in sections["vision-cuda"][0] if "minimal_images_per_s" in r}
    assert vision["True"]["minimal_images_per_s"] == "27000" and vision["True"]["ratio"] == "0.963"
    assert vision["True"]["met?"] == "yes; yes" and vision["False"]["met?"] == "yes"
    assert sections["vision-cuda-a100"][0][0]["ratio"] == "–" and sections["vision-cuda-a100"][0][0]["met?"] == "–"
    # Unrelated rows go to separate tables; the text total has no per-row verdict.
    assert [len(t) for t in sections["text-cuda"]] == [1, 6] and "met?" not in sections["text-cuda"][1][0]
    assert "device NVIDIA H100 80GB HBM3 (`cuda`); CPU AMD EPYC 9454, 16 cores" in page
    assert "torch 2.11.0, CUDA 13.0, cuDNN 91000" in page and "commit 0123456789 (dirty)" in page
    assert "date 2030-01-02T03:04:05+00:00" in page and "command `harness bench rl --device cuda`" in page


def test_quick_runs_do_not_count_for_full_run_targets(tmp_path):
    rows = [{"benchmark": "senteval", "task": "MR", "seconds": 1.0}]
    bench_file(tmp_path, "text", rows, device="cpu", quick=True)
    summary = tables(write_bench_page(tmp_path, tmp_path).read_text())["Targets"][0]
    assert {r["file"] for r in summary if r["target"].startswith("text")} == {"–"}


def test_a_partial_file_says_so_and_hides_the_part_key(tmp_path):
    """A benchmark stopped midway: its section says how many parts it holds and which process measured which,
    its targets' file cell says "(partial)", and the rows' ``part`` key is not a column."""
    rows = [{"part": "B=512", "loss": "nt_xent", "batch_size": 512, "time_ratio": 1.0},
            {"part": "B=512", "loss": "dcl", "batch_size": 512, "time_ratio": 1.2}]
    bench_file(tmp_path, "losses", rows)
    path = tmp_path / "losses-cuda.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "parts": ["B=512", "B=4096"], "parts_done": ["B=512"], "complete": False,
                                "sessions": [{"date": "2030-01-02", "git_commit": "aaaaaaaaaaaa", "parts": ["B=512"]},
                                             {"date": "2030-01-03", "git_commit": "bbbbbbbbbbbb", "parts": []}]}))
    page = write_bench_page(tmp_path, tmp_path).read_text()
    assert "**partial**: 1 of 2 parts measured (the same command with `--resume` measures the rest)" in page
    assert "parts measured by aaaaaaaaaa on 2030-01-02 (B=512), bbbbbbbbbb on 2030-01-03 ()" in page
    sections = tables(page)
    assert "losses-cuda (partial)" in {r["file"] for r in sections["Targets"][0]}
    assert "part" not in sections["losses-cuda"][0][0]
    path.write_text(json.dumps({**data, "complete": True}))
    page = write_bench_page(tmp_path, tmp_path).read_text()
    assert "partial" not in page


def test_the_page_is_deterministic_and_old_files_without_metadata_render(tmp_path):
    fixtures(tmp_path / "bench")
    (tmp_path / "bench" / "graph-cpu.json").write_text(json.dumps({"device": "cpu", "rows": [{"a": 1}]}))
    first = write_bench_page(tmp_path / "bench", tmp_path).read_text()
    assert write_bench_page(tmp_path / "bench", tmp_path).read_text() == first
    assert "## graph-cpu" in first and "commit –; date –" in first


def test_a_broken_bench_file_is_named(tmp_path):
    (tmp_path / "losses-cpu.json").write_text("{not json")
    with pytest.raises(UserError, match="losses-cpu.json is not a readable bench file"):
        write_bench_page(tmp_path, tmp_path)
    (tmp_path / "losses-cpu.json").write_text(json.dumps({"rows": [1, 2]}))
    with pytest.raises(UserError, match="expected an object with a list of row objects"):
        write_bench_page(tmp_path, tmp_path)


def test_leaderboard_writes_bench_md_only_when_there_are_bench_files(tmp_path, capsys):
    write_records(tmp_path / "results", [synthetic_record("infonce", s, 80.0 + s) for s in range(2)])
    args = ["leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "lb")]
    assert main(args) == 0
    assert not (tmp_path / "lb" / "bench.md").exists() and "bench.md" not in capsys.readouterr().out
    # An existing page is neither rewritten nor removed while there are no bench files.
    (tmp_path / "lb" / "bench.md").write_text("<!-- generated by `harness leaderboard`; do not edit -->\nkept\n")
    assert main(args) == 0
    assert (tmp_path / "lb" / "bench.md").read_text().endswith("kept\n")
    fixtures(tmp_path / "lb" / "bench")  # the default: OUT/bench
    assert main(args) == 0
    assert "## rl-cuda" in (tmp_path / "lb" / "bench.md").read_text()
    assert f"wrote {tmp_path / 'lb' / 'bench.md'}" in capsys.readouterr().out
    elsewhere = tmp_path / "elsewhere"
    bench_file(elsewhere, "rl", [{"what": "updates_per_s", "batch_size": 512, "value": 300.0}])
    assert main([*args, "--bench", str(elsewhere)]) == 0
    assert "## losses-cuda" not in (tmp_path / "lb" / "bench.md").read_text()


def test_the_biased_targets_note_counts_the_flops_it_quotes():
    """The note's TFLOP of a paper-biased epoch, counted again: FlopCounterMode over one step at batch 256 (on the
    CPU: a count, not a timing), times the 234 full batches of Biased-MNIST's 60,000 training images."""
    from dataclasses import replace

    import torch

    import losses
    from domains.vision.bench import BIASED_MNIST_TRAIN, step_tflop
    from domains.vision.biased import Biased
    from domains.vision.config import PRESETS, VisionConfig, resolved
    from domains.vision.data import HALF_STATS
    from domains.vision.images import ImageSet, VisionData
    from domains.vision.train import data_info
    from harness.pages.bench import BIASED_EPOCH_TFLOP, TARGETS

    batch = 256
    images = ImageSet(torch.zeros(batch, 3, 28, 28, dtype=torch.uint8), torch.arange(batch) % 10,
                      torch.arange(batch) % 10)
    data = VisionData("zeros", images, images, images, 10, 28, *HALF_STATS)
    cfg = resolved(replace(VisionConfig(), **{**PRESETS["paper-biased"].overrides, "num_workers": 0}),
                   "biased", "biased-mnist")
    assert cfg.batch_size == batch
    method = Biased(cfg, data_info(data), losses.get("eps_supinfonce", epsilon=0.5), True)
    epoch = step_tflop(method, data, cfg, torch.device("cpu")) * (BIASED_MNIST_TRAIN // batch)
    assert epoch == pytest.approx(BIASED_EPOCH_TFLOP, abs=0.05)
    note = next(t.note for t in TARGETS if t.label.startswith("vision biased track"))
    assert f"{BIASED_EPOCH_TFLOP} TFLOP" in note and "496 TFLOP/s" in note


def test_target_notes_are_rendered_below_the_table(page):
    assert "- **vision biased track <= 0.3 s per Biased-MNIST epoch on an H100.** It asks for the H100's" in page


def test_the_simclr_and_curl_targets_notes_count_the_flops_they_quote():
    """SimCLR's GFLOP an image (batch 16: ResNet-18's count is linear in the batch) and CURL's TFLOP an update
    at batch 512, counted at batch 32 and scaled (the contrastive B x B term is a rounding error: counted at 512
    directly, the mean was 0.4181 too), the two kinds of update averaged as training alternates them."""
    from dataclasses import replace

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import losses
    from domains.rl.bench import filled_buffer
    from domains.rl.config import CurlConfig
    from domains.rl.curl import CurlSac
    from domains.rl.graphed_updates import GraphedUpdates
    from domains.vision.bench import _random_data, step_tflop
    from domains.vision.config import VisionConfig, resolved
    from domains.vision.simclr import SimCLR
    from domains.vision.train import data_info
    from harness.pages.bench import CURL_UPDATE_TFLOP, SIMCLR_IMAGE_GFLOP

    cpu = torch.device("cpu")
    data = _random_data(16, cpu)
    cfg = resolved(replace(VisionConfig(), arch="resnet18", batch_size=16, knn_every=0, num_workers=0), "simclr",
                   "cifar10")
    method = SimCLR(cfg, data_info(data), losses.get("infonce"), False)
    assert step_tflop(method, data, cfg, cpu) * 1e3 / 16 == pytest.approx(SIMCLR_IMAGE_GFLOP, abs=0.005)

    torch.manual_seed(0)
    cfg = CurlConfig(batch_size=32, cuda_graph=False)
    update = GraphedUpdates(CurlSac(cfg, 1, 1e-3, losses.get("infonce"), cpu), filled_buffer(cfg, 1, cpu, 300),
                            enabled=False)
    for step in (0, 1):  # what is built lazily: the optimizers' state
        update(step)
    with FlopCounterMode(display=False) as counter:
        for step in (2, 3):  # one update of each kind
            update(step)
    assert counter.get_total_flops() / 2 / 1e12 * 512 / 32 == pytest.approx(CURL_UPDATE_TFLOP, abs=0.0005)


def test_the_command_is_shown_as_a_shell_reads_it(tmp_path):
    """The page says to run a partial benchmark's command again: joined with spaces, an argument holding a space or
    a ';' showed as another command (``harness bench x; rm -rf ~``)."""
    bench_file(tmp_path, "losses", [{"loss": "nt_xent", "ms": 1.0}])
    path = tmp_path / "losses-cuda.json"
    argv = ["harness", "bench", "losses; rm -rf ~", "--dim", "a b", "it's"]
    path.write_text(json.dumps({**json.loads(path.read_text()), "command": argv}))
    page = write_bench_page(tmp_path, tmp_path).read_text()
    shown = re.search(r"command (`+) ?(.*?) ?\1\.", page)
    assert shown is not None and shlex.split(shown.group(2)) == argv, page
