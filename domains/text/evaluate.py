"""Evaluation of a frozen sentence encoder (anything with ``prepare(sentences)`` and ``encode(sentences)``).

- ``synthetic-topics``: the topic of held-out single sentences, with the MR/CR/SUBJ/MPQA protocol (logistic
  regression, its L2 by inner k-fold inside an outer stratified k-fold); the Bayes accuracy and chance are recorded.
- ``books`` / ``hf-text``: the SentEval tasks of ``senteval_tasks``; the primary metric ``accuracy`` is the mean
  of their accuracies, every task's accuracy (and MRPC's F1) is a metric too. All in percent.

Both record the protocol that ran (``details["protocol"]``, ``details["standardized"]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import sparse

from domains.text.config import TextConfig
from domains.text.corpus import synthetic_task
from domains.text.senteval import evaluate_senteval, protocol_details, run_protocol
from domains.text.senteval_tasks import Task
from losses.prior import class_structure


def evaluate_synthetic(encoder, cfg: TextConfig, device: str | Any = "cpu") -> tuple[dict[str, float], dict[str, Any]]:
    sentences, labels, bayes = synthetic_task(cfg)
    encoder.prepare(sentences)
    embeddings = encoder.encode(sentences)
    result = run_protocol(embeddings, labels, None, None, cfg, device)
    k = cfg.synthetic_topics
    details = {"synthetic": result, **protocol_details([result], cfg),
               "primary": "accuracy on the synthetic topic task (percent)",
               "class_prior": [1.0 / k] * k, "chance_accuracy": 100.0 / k, "bayes_accuracy": bayes,
               "class_structure": class_structure(_dense(embeddings), labels)}
    return {"accuracy": result["accuracy"], "bayes_accuracy": bayes}, details


def _dense(embeddings: Any) -> torch.Tensor:
    """The embeddings as a dense tensor: the bag-of-words encoder gives a scipy sparse matrix (small here: the
    synthetic task's sentences by its vocabulary)."""
    return torch.from_numpy(np.asarray(embeddings.toarray() if sparse.issparse(embeddings) else embeddings))


def evaluate_encoder(encoder, dataset: str, cfg: TextConfig, data_root: Path, log=print, device: str | Any = "cpu",
                     tasks: Sequence[Task] | None = None) -> tuple[dict, dict]:
    """Metrics and details of ``encoder`` with the protocol of ``dataset`` (a torch classifier on ``device``), on
    the SentEval ``tasks`` already read (None: read here)."""
    if dataset == "synthetic-topics":
        return evaluate_synthetic(encoder, cfg, device)
    metrics, details = evaluate_senteval(encoder, data_root, cfg, log, device, tasks)
    details["primary"] = f"mean accuracy over the SentEval tasks {', '.join(cfg.senteval_tasks)} (percent)"
    return metrics, details
