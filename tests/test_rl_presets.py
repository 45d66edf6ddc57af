"""Every rl preset longer than the quick smoke run checkpoints before its end: an interrupted run (Ctrl-C, a kill)
resumed with --resume goes on from a checkpoint instead of silently starting over."""

from __future__ import annotations

import pytest

from domains.rl.config import PRESETS, CurlConfig


@pytest.mark.parametrize("name", sorted(set(PRESETS) - {"quick"}))
def test_preset_checkpoints_before_its_end(name: str) -> None:
    cfg = CurlConfig(**PRESETS[name].overrides)
    assert 0 < cfg.checkpoint_freq < cfg.num_env_steps, \
        f"preset {name}: checkpoint_freq {cfg.checkpoint_freq} never saves within {cfg.num_env_steps} env steps"
