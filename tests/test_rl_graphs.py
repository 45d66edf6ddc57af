"""CURL's update as a CUDA graph, checked on the CPU: an update (replay sampling included) reads no device value
on the host when it runs as on CUDA, replayed updates (domains.graphed's ReplayBackend standing in for CUDA graphs)
equal eager ones over both kinds of update while the replay buffer grows, sampling follows the buffer's
device-side size, and a seed gives the same updates again. tests/test_rl_gpu.py checks real graphs on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import losses
import losses._core
import losses.checks
import losses.scores
from domains.base import runtime_fields
from domains.graphed import ReplayBackend
from domains.rl.config import CurlConfig
from domains.rl.curl import CurlSac
from domains.rl.graphed_updates import GraphedUpdates
from domains.rl.replay import ReplayBuffer

# Ops that read a tensor's value on the host: each one waits for the device, and a CUDA graph refuses it.
HOST_READS = ("aten._local_scalar_dense", "aten.nonzero", "aten.item", "aten.is_nonzero", "aten.equal",
              "aten.masked_select")
SIZE, CROP = 24, 20


class HostReads(TorchDispatchMode):
    """Every op dispatched inside; ``reads``: those of them that read a value on the host."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))

    @property
    def reads(self) -> list[str]:
        return [op for op in self.ops if op.startswith(HOST_READS)]


def agent_and_buffer(loss: str = "dcl", transitions: int = 5, seed: int = 0, **cfg) -> tuple[CurlSac, ReplayBuffer]:
    """A tiny agent and a replay buffer (capacity 64, episodes of 8 steps) holding ``transitions``."""
    config = CurlConfig(image_size=SIZE, crop_size=CROP, hidden_dim=16, feature_dim=8, num_filters=4, batch_size=6,
                        **cfg)
    torch.manual_seed(seed)
    loss_fn = losses.get("dcl", tau_plus=0.1) if loss == "dcl" else losses.get(loss)
    agent = CurlSac(config, action_dim=2, lr=1e-3, loss_fn=loss_fn, device=torch.device("cpu"))
    buffer = ReplayBuffer(64, (3, SIZE, SIZE), config.frame_stack, 2, 8)
    grow(buffer, np.random.default_rng(seed), transitions)
    return agent, buffer


def grow(buffer: ReplayBuffer, rng: np.random.Generator, transitions: int) -> None:
    """Add random transitions, starting a new episode every 8."""
    for _ in range(transitions):
        if buffer.idx % 8 == 0:
            buffer.start_episode(rng.integers(0, 256, size=(9, SIZE, SIZE), dtype=np.uint8))
        next_obs = rng.integers(0, 256, size=(9, SIZE, SIZE), dtype=np.uint8)
        buffer.add(rng.uniform(-1, 1, 2), float(rng.normal()), next_obs, 1.0)


def accelerator_path(monkeypatch, agent: CurlSac) -> None:
    """Run the update on the CPU as it runs on CUDA: the loss core's accelerator path (positives on the dense
    mask, value checks queued with ``_assert_async``) and fused Adam (it keeps its step count in a tensor its
    kernel reads, as Adam does on CUDA, where the agent's optimisers are fused)."""
    monkeypatch.setattr(losses._core, "PAIRS_FROM_MASK_ON", frozenset())
    for module in (losses.checks, losses._core, losses.scores):  # the latter two import the function by name
        monkeypatch.setattr(module, "reads_values_now", lambda t: False)
    for opt in agent.optimisers():
        for group in opt.param_groups:
            group["fused"] = True


@pytest.mark.parametrize("loss,num_positives,bf16", [("infonce", 1, False), ("dcl", 1, False), ("dcl", 2, False),
                                                     ("infonce", 1, True)])
def test_an_update_reads_no_device_value(monkeypatch, loss, num_positives, bf16):
    agent, buffer = agent_and_buffer(loss, num_positives=num_positives, encoder_bf16=bf16)
    accelerator_path(monkeypatch, agent)
    updates = GraphedUpdates(agent, buffer, enabled=False)
    for step in (0, 1):  # with the actor, α and EMA parts, then without
        w = agent.W.detach().clone()
        with HostReads() as mode:
            stats = updates(step)
        assert mode.reads == [], f"step {step}"
        assert set(stats) == set(agent.schedule(step).stats) and not torch.equal(agent.W, w)  # it did update
        assert "aten._assert_async.msg" in mode.ops  # the loss core's checks are queued on the device instead


def test_the_monitor_sees_the_cpu_paths_host_reads():
    # Without the accelerator path the CPU update reads values (Adam's step count, the Scores' checks): the
    # test above would see them.
    agent, buffer = agent_and_buffer()
    with HostReads() as mode:
        GraphedUpdates(agent, buffer, enabled=False)(0)
    assert "aten._local_scalar_dense.default" in mode.reads


def train(backend: ReplayBackend | None, updates: int = 12, log=None) -> tuple[CurlSac, list[dict], GraphedUpdates]:
    """``updates`` updates, 3 transitions added between two; graphed through ``backend`` (None: eager)."""
    agent, buffer = agent_and_buffer(transitions=5)
    rng = np.random.default_rng(1)
    runner = GraphedUpdates(agent, buffer, enabled=backend is not None, backend=backend, log=log)
    torch.manual_seed(1)
    stats = []
    for step in range(updates):
        stats.append(runner(step))
        grow(buffer, rng, 3)
    assert len(buffer) == 5 + 3 * updates
    return agent, stats, runner


def assert_same_training(a: tuple[CurlSac, list[dict], GraphedUpdates], b: tuple[CurlSac, list[dict], GraphedUpdates]):
    (agent_a, stats_a, _), (agent_b, stats_b, _) = a, b
    assert [list(s) for s in stats_a] == [list(s) for s in stats_b]
    for step, (sa, sb) in enumerate(zip(stats_a, stats_b)):
        assert all(torch.equal(sa[k], sb[k]) for k in sa), f"update {step}: {sa} != {sb}"
    state_a, state_b = agent_a.state_dict(), agent_b.state_dict()
    for net in ("actor", "critic", "critic_target"):
        for name, tensor in state_a[net].items():
            assert torch.equal(tensor, state_b[net][name]), f"{net}.{name}"
    assert torch.equal(state_a["W"], state_b["W"]) and torch.equal(state_a["log_alpha"], state_b["log_alpha"])


def test_replayed_updates_equal_eager_updates_as_the_buffer_grows():
    eager = train(None)
    backend = ReplayBackend()
    replayed = train(backend)
    assert_same_training(replayed, eager)
    # Two kinds of update (with and without the actor and EMA), 6 calls each: 3 eager warm-ups, one capture,
    # then 3 replays.
    assert backend.captures == 2 and replayed[2].replays == backend.replays == 6 and eager[2].replays == 0
    # Statistics outlive the next replay (a graph's outputs are overwritten in place): the first replayed
    # update's losses differ from the last's.
    assert not torch.equal(replayed[1][6]["critic_loss"], replayed[1][10]["critic_loss"])


def test_a_failed_capture_logs_once_per_kind_and_trains_eagerly():
    eager = train(None)
    messages = []
    with pytest.warns(RuntimeWarning, match="capture of the CURL update .* failed"):
        failed = train(ReplayBackend(fail=RuntimeError("operation not permitted when stream is capturing")),
                       log=messages.append)
    assert_same_training(failed, eager)
    assert failed[2].replays == 0 and len(messages) == 2 and all(m.endswith("running it eagerly") for m in messages)


def test_a_seed_gives_the_same_updates_again():
    assert_same_training(train(ReplayBackend()), train(ReplayBackend()))
    assert_same_training(train(None), train(None))


def test_sampling_follows_the_device_side_size():
    _, buffer = agent_and_buffer(transitions=20)
    assert int(buffer.count) == len(buffer) == 20
    buffer.count.fill_(3)  # what a graph reads: the Python size is not consulted
    assert int(buffer.sample(500, CROP).index.max()) == 2
    restored = ReplayBuffer(64, (3, SIZE, SIZE), 3, 2, 8)
    restored.load_state_dict(buffer.state_dict())
    assert int(restored.count) == 20
    # floor(u·size) reaches every index, the last one included.
    assert sorted(set(restored.sample(2000, CROP).index.tolist())) == list(range(20))


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_update_statistics_come_in_the_schedules_order(step):
    agent, buffer = agent_and_buffer(curl_update_freq=3)
    stats = agent.update(buffer.sample(6, CROP), step)
    assert tuple(stats) == agent.schedule(step).stats


def test_cuda_graph_is_a_runtime_setting():
    # Graphs batch the launches of the same updates: the setting is recorded, not part of the run's identity.
    assert "cuda_graph" in runtime_fields(CurlConfig)
    assert CurlConfig().cuda_graph


def test_bf16_encoder_features_are_float32_and_near_the_float32_ones():
    agent, buffer = agent_and_buffer()
    bf16, _ = agent_and_buffer(encoder_bf16=True)  # the same initial weights (same seed)
    obs = buffer.sample(6, CROP).obs
    exact, approx = agent.critic.encoder(obs), bf16.critic.encoder(obs)
    assert approx.dtype == torch.float32 and not torch.equal(approx, exact)
    # LayerNorm'd features of order 1; bf16 keeps ~3 significant digits through 4 convolutions.
    torch.testing.assert_close(approx, exact, rtol=0.05, atol=0.05)
    assert CurlConfig().encoder_bf16 is False and "encoder_bf16" not in runtime_fields(CurlConfig)
