"""``harness bench text``: quick-thought training speed (sentences per second) and SentEval time per task.

Training runs on the Gutenberg books when ``<data root>/books`` exists, else on the embedded synthetic corpus;
the SentEval rows (only when ``<data root>/senteval`` exists) time each task's encoding and protocol with the
encoder just trained (the torch classifier, on the same device). ``quick``: a few steps and tasks subsampled to
1000 samples; otherwise a longer run and the full tasks.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import losses
from domains.base import BenchPart
from domains.context import RunContext
from domains.text.config import TASKS, TextConfig
from domains.text.corpus import load_corpus
from domains.text.models import QuickThoughtEncoder, build_model
from domains.text.quickthought import train
from domains.text.senteval import evaluate_task, load_tasks
from domains.text.tokenize import train_tokenizer


def benchmark(device: torch.device, data_root: Path, quick: bool) -> list[BenchPart]:
    """One part per method: its training rows and, for ``quickthought``, the SentEval rows of its encoder."""
    methods = ("quickthought",) if quick else ("quickthought", "quickthought-bert")
    return [BenchPart(method, lambda method=method: method_rows(method, device, Path(data_root), quick))
            for method in methods]


def method_rows(method: str, device: torch.device, data_root: Path, quick: bool) -> list[dict[str, Any]]:
    dataset = "books" if (data_root / "books").is_dir() else "synthetic-topics"
    cfg = TextConfig(max_sentences=4000 if quick else 40000, max_steps=5 if quick else 50, epochs=100,
                     log_every=1000, checkpoint_every=10 ** 9, senteval_max_samples=1000 if quick else 0)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(seed=0, device=device, data_root=data_root, work_dir=Path(tmp) / method, quiet=True)
        corpus = load_corpus(dataset, cfg, ctx)
        kind = "wordpiece" if method == "quickthought-bert" else "word"
        tokenizer = train_tokenizer(corpus.sentences, kind, cfg.vocab_size, cfg.max_len)
        model, _ = build_model(method, cfg, tokenizer)
        _, throughput, info = train(model, tokenizer, corpus, cfg, losses.get("infonce"), ctx)
    rows: list[dict[str, Any]] = [{"benchmark": "train", "method": method, "dataset": dataset, "device": str(device),
                                   "batch_size": cfg.batch_size, "steps": info["steps"],
                                   "sentences_per_s": round(throughput["sentences_per_s"], 1)}]
    if method != "quickthought" or not (data_root / "senteval").is_dir():
        return rows
    encoder = QuickThoughtEncoder(model, tokenizer, device, cfg.eval_batch_size, truncate=False)
    for task in load_tasks(data_root, replace(cfg, senteval_tasks=TASKS)):
        result = evaluate_task(encoder, task, cfg, device)
        rows.append({"benchmark": "senteval", "task": task.name, "classifier": result["classifier"],
                     "device": str(device), "n_train": result["n_train"],
                     "features": result["features"], "encode_s": round(result["encode_s"], 2),
                     "seconds": round(result["seconds"], 2), "accuracy": round(result["accuracy"], 2)})
    return rows
