"""The tiny test domain with faults a run's own code cannot catch, for the tests of what ``harness sweep`` and
``harness run`` report when they happen (``HARNESS_PLUGINS=faulty_domain`` with ``tests/`` on the path).

- dataset ``damaged``: preparing the data raises a JSONDecodeError, as a damaged cache file does; the sweep's
  own process never sees it, since the fingerprint is computed without the data, as real domains hash files;
- dataset ``unhashable``: computing its fingerprint raises the same, in the sweep's own process too;
- ``--set tag=kill``: the process running the job is killed during pretraining (as by the OOM killer);
- ``--set tag=nan``: the primary metric of the odd seeds is NaN.

It accepts only the losses of two views (no labels), so that beside the tiny domain a selection can name a loss
one of them has and a dataset only the other has.
"""

from __future__ import annotations

import json
import os
import signal

import torch
from tiny_domain import TinyDomain

import losses
from domains import register
from domains.base import DatasetSpec, EvalResult, Prepared, PretrainResult, RunSpec, Supplies
from domains.context import RunContext

FINGERPRINT = {"generator": "gaussian mixture, numpy seed 0"}  # what TinyDomain.prepare gives, with the dataset


@register
class FaultyDomain(TinyDomain):
    name = "faulty"
    description = "the tiny domain with planted faults (tests only)"
    datasets = {"blobs": DatasetSpec("blobs", "3 well separated Gaussians", needs_download=False),
                "damaged": DatasetSpec("damaged", "a dataset whose cache file is damaged", needs_download=False),
                "unhashable": DatasetSpec("unhashable", "a dataset whose files cannot be hashed", needs_download=False)}
    supplies = Supplies(positives={losses.VIEWS})
    method_baselines = {}

    def data_fingerprint(self, spec: RunSpec, ctx: RunContext) -> dict:
        if spec.dataset == "unhashable":
            json.loads('{"sha256": "0')  # a checksum file cut short
        return {"dataset": spec.dataset, **FINGERPRINT}

    def prepare(self, spec: RunSpec, ctx: RunContext) -> Prepared:
        if spec.dataset == "damaged":
            json.loads('{"features": [0.1, 0.')  # a cache file cut short
        return super().prepare(spec, ctx)

    def pretrain(self, spec: RunSpec, ctx: RunContext, data: tuple[torch.Tensor, torch.Tensor]) -> PretrainResult:
        if spec.config.tag == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return super().pretrain(spec, ctx, data)

    def evaluate(self, spec: RunSpec, pretrained: PretrainResult, ctx: RunContext,
                 data: tuple[torch.Tensor, torch.Tensor]) -> EvalResult:
        result = super().evaluate(spec, pretrained, ctx, data)
        if spec.config.tag == "nan" and spec.seed % 2:
            result.metrics["accuracy"] = float("nan")
        return result
