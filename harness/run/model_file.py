"""The trained model a run keeps with ``--save-model``: ``<results>/models/<run id>.pt``, written once the seed
completes (:func:`save_model`), and read back into freshly built networks (:func:`load_model`).

The file is a dict that ``torch.load(path, weights_only=True)`` reads: what identifies the run (its id, domain,
method, dataset, loss and its hyper-parameters, seed, config hash), the config its record holds (experiment and
runtime fields), ``build`` (what rebuilding the networks needs besides the config: :class:`domains.base.KeptModel`)
and ``modules``, each kept network's name -> its ``state_dict()`` on the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import domains
from domains.base import Domain, PretrainResult, RunSpec
from domains.files import write_atomic
from harness.records import RunRecord

MODELS = "models"  # the folder of a results folder that holds the models: never read as records


def model_path(results: Path, rid: str) -> Path:
    return results / MODELS / f"{rid}.pt"


def save_model(domain: Domain, spec: RunSpec, pretrained: PretrainResult, record: RunRecord, results: Path) -> str:
    """Write the model of a completed seed (atomically: a reader never sees half a file) and return the line
    that says where; for a method that keeps no network, the line that says so, and nothing is written.
    UnwritableFileError (a UserError) when the system refuses the file."""
    kept = domain.trained_modules(spec, pretrained)
    if kept is None or not kept.modules:
        return (f"no model saved: method '{spec.method}' of domain '{spec.domain}' trains no network to keep "
                "(--save-model has nothing to write)")
    saved = {
        "run_id": record.run_id, "domain": record.domain, "method": record.method, "dataset": record.dataset,
        "loss": record.loss, "loss_params": record.loss_params, "preset": record.preset, "seed": record.seed,
        "config_hash": record.config_hash, "config": record.config, "runtime": record.runtime,
        "build": kept.build, "modules": {name: _on_cpu(module.state_dict()) for name, module in kept.modules.items()},
    }
    path = model_path(results, record.run_id)
    write_atomic(path, lambda fh: torch.save(saved, fh))
    return f"model -> {path}"


def _on_cpu(state: dict[str, Any]) -> dict[str, Any]:
    return {key: value.detach().cpu() if isinstance(value, torch.Tensor) else value for key, value in state.items()}


def skipped_note(results: Path, rid: str) -> str:
    """What ``--save-model`` says of a seed skipped as done: no training ran, so there is no model to save."""
    path = model_path(results, rid)
    if path.is_file():
        return f"model: {path} (saved by an earlier run of it)"
    return "no model saved: the run was skipped, its record exists; rerun with --force to train it again and save it"


def load_model(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.nn.Module]]:
    """A saved model's file (its values, ``modules`` included) and its networks, built afresh by its domain
    (:meth:`domains.base.Domain.build_modules`, from the saved config) with the saved weights loaded
    (``strict=True``), on the CPU and in eval mode. A plugin's domain needs its plugin (``HARNESS_PLUGINS``)."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    domain = domains.get(saved["domain"])
    config = domain.config_class(**{**saved["runtime"], **saved["config"]})
    spec = RunSpec(domain=saved["domain"], method=saved["method"], dataset=saved["dataset"], loss=saved["loss"],
                   loss_params=saved["loss_params"], preset=saved["preset"], seed=saved["seed"], config=config)
    modules = domain.build_modules(spec, saved["build"])
    if set(modules) != set(saved["modules"]):
        raise ValueError(f"{path}: holds the networks {sorted(saved['modules'])}, but domain '{domain.name}' builds "
                         f"{sorted(modules)}")
    for name, module in modules.items():
        module.load_state_dict(saved["modules"][name], strict=True)
        module.eval()
    return saved, modules
