"""CURL end to end through the domain API on a tiny network (rendering needed): the record's metrics and
learning curve, and that a run killed after a checkpoint and resumed ends exactly where an uninterrupted
one does (networks, optimisers, replay buffer and random states all restored)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from support import Killed, KilledAfterCheckpoint, mistyped_extra, tamper_extra

import domains
from domains.base import RunSpec
from domains.context import RunContext
from domains.errors import UserError
from domains.rl.config import CurlConfig

# 100 repeats: an episode is 10 agent steps, so a few episodes render quickly.
TINY = dict(num_env_steps=2000, eval_freq=1000, eval_episodes=1, checkpoint_freq=1000, seed_agent_steps=5,
            action_repeat=100, image_size=24, crop_size=20, hidden_dim=16, feature_dim=8, num_filters=4,
            batch_size=4)


pytestmark = pytest.mark.usefixtures("rendering")


def spec(loss: str = "dcl", **overrides) -> RunSpec:
    cfg = CurlConfig(**{**TINY, **overrides})
    return RunSpec("rl", "curl", "cartpole-swingup", loss, {"tau_plus": 0.1} if loss == "dcl" else {}, "quick",
                   0, cfg)


def context(work_dir: Path, cls=RunContext, resume: bool = False) -> RunContext:
    return cls(seed=0, device=torch.device("cpu"), data_root=work_dir, work_dir=work_dir, resume=resume, quiet=True)


def run(s: RunSpec, ctx: RunContext):
    domain = domains.get("rl")
    task = domain.prepare(s, ctx).data
    torch.manual_seed(s.seed)  # the harness seeds torch before pretrain
    pretrained = domain.pretrain(s, ctx, task)
    return pretrained, domain.evaluate(s, pretrained, ctx, task)


class _Tracker:
    """A live tracker that keeps what it is handed."""

    def __init__(self) -> None:
        self.logged: list[tuple[int, str, float]] = []

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.logged += [(step, tag, value) for tag, value in scalars.items()]


@pytest.fixture(scope="module")
def unsaved(rendering, tmp_path_factory):
    """One run that saves no checkpoint, with a live tracker, read by several tests: its work folder, the tracker,
    and what it pretrained and evaluated."""
    work, tracker = tmp_path_factory.mktemp("unsaved"), _Tracker()
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=work, work_dir=work, quiet=True,
                     trackers=[tracker])
    return work, tracker, *run(spec(checkpoint_freq=0), ctx)


@pytest.fixture(scope="module")
def straight(rendering, tmp_path_factory):
    """An uninterrupted run (checkpoints on), what a resumed one must end as."""
    return run(spec(), context(tmp_path_factory.mktemp("straight")))


@pytest.fixture(scope="module")
def killed(rendering, tmp_path_factory) -> Path:
    """The work folder of a run killed right after its first checkpoint; each test resumes a copy of it."""
    work = tmp_path_factory.mktemp("killed")
    with pytest.raises(Killed):
        run(spec(), context(work, KilledAfterCheckpoint))
    return work


def test_run_records_return_and_learning_curve(unsaved):
    work, _, pretrained, result = unsaved
    assert set(result.metrics) >= {"return", "return_std"}
    assert 0.0 <= result.metrics["return"] <= 1000.0
    d = result.details
    assert (d["env_steps"], d["agent_steps"], d["action_repeat"]) == (2000, 20, 100)
    assert d["step_unit"].startswith("environment steps")
    assert len(d["episode_returns"]) == 1 and d["episode_returns"][0] == pytest.approx(result.metrics["return"])
    assert [p["env_steps"] for p in d["learning_curve"]] == [1000, 2000]
    assert d["updates"] == 20 - 5
    assert "curl_loss" in pretrained.curve[-1] and pretrained.throughput["updates_per_s"] > 0
    assert pretrained.info["cuda_graph"] == {"replayed_updates": 0, "eager_updates": 15}  # the CPU: no graphs
    assert not (work / "checkpoint.pt").exists()


@pytest.mark.parametrize("saved_on", ["cpu", "graphed gpu"])
def test_resume_after_kill_matches_uninterrupted_run(tmp_path, straight, killed, saved_on):
    """Also from a checkpoint whose Adam groups say ``capturable`` (as a graphed run on a GPU saves them), which
    PyTorch refuses to step on the CPU unless the resumed run puts the flag back."""
    work = shutil.copytree(killed, tmp_path / "b")
    path = work / "checkpoint.pt"
    state = torch.load(path, weights_only=False)
    assert state["extra"]["env_steps"] == 1000 and len(state["objects"]["buffer"]["slots"]) == 10
    if saved_on == "graphed gpu":
        agent = state["objects"]["agent"]
        groups = [g for name in ("actor_opt", "critic_opt", "alpha_opt", "encoder_opt", "curl_opt")
                  for g in agent[name]["param_groups"]]
        assert groups and all("capturable" in g for g in groups)
        for g in groups:
            g["capturable"] = True
        torch.save(state, path)
    resumed = run(spec(), context(work, resume=True))
    assert resumed[1].metrics == straight[1].metrics
    assert resumed[0].curve == straight[0].curve
    a, b = straight[0].model.agent.state_dict(), resumed[0].model.agent.state_dict()
    for key in ("actor", "critic", "critic_target"):
        for name, tensor in a[key].items():
            assert torch.equal(tensor, b[key][name]), f"{key}.{name}"
    assert torch.equal(a["W"], b["W"]) and torch.equal(a["log_alpha"], b["log_alpha"])


@pytest.mark.parametrize("name, value", [("returns", ["x"]), ("recent", {"curl_loss": [0.5]})])
def test_a_checkpoint_extra_of_the_wrong_type_is_the_clean_error(tmp_path, killed, name, value):
    work = shutil.copytree(killed, tmp_path / "b")
    tamper_extra(work / "checkpoint.pt", name, value)
    with pytest.raises(UserError, match=mistyped_extra(name)):
        run(spec(), context(work, resume=True))


def test_live_tags_name_the_contrastive_loss_loss_as_every_domain_does_and_keep_one_value_a_step(unsaved):
    _, tracker, pretrained, _ = unsaved
    tags = {tag for _, tag, _ in tracker.logged}
    # the contrastive loss under the tag the other domains give theirs (tests/test_tracking.py), SAC's its own
    assert {"loss", "critic_loss", "actor_loss", "alpha", "train_return", "eval_return"} <= tags
    assert "curl_loss" not in tags
    steps_tags = [(step, tag) for step, tag, _ in tracker.logged]
    assert len(steps_tags) == len(set(steps_tags))  # TensorBoard draws a second value at a step as a zigzag
    [point] = [p for p in pretrained.curve if p["env_steps"] == 1000]
    assert [(s, v) for s, tag, v in tracker.logged if tag == "eval_return"] == [(1000, point["eval_return"])]
