"""CURL's pieces without rendering: the crops, the EMA update, the contrastive scores, the replay buffer
and one agent update (which parameters each loss moves)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import domains
import losses
from domains.rl.config import CurlConfig
from domains.rl.curl import CurlSac, ReplayBuffer, center_crop, curl_scores, ema_update, random_crop

# --------------------------------------------------------------------------------------------- crops


def position_images(batch: int, channels: int = 2, size: int = 100) -> torch.Tensor:
    """Pixel value = its flat position, so a crop reveals its own offset."""
    grid = torch.arange(size * size, dtype=torch.int64).reshape(size, size)
    return grid.expand(batch, channels, size, size).clone()


def test_random_crop_shape_offsets_and_content():
    x = position_images(64)
    out = random_crop(x, 84, generator=torch.Generator().manual_seed(0))
    assert out.shape == (64, 2, 84, 84)
    tops, lefts = out[:, 0, 0, 0] // 100, out[:, 0, 0, 0] % 100
    assert int(tops.min()) >= 0 and int(tops.max()) <= 16 and int(lefts.min()) >= 0 and int(lefts.max()) <= 16
    assert len({(int(t), int(le)) for t, le in zip(tops, lefts)}) > 32  # one offset per sample, not per batch
    for b in range(64):
        t, le = int(tops[b]), int(lefts[b])
        assert torch.equal(out[b], x[b, :, t:t + 84, le:le + 84])


def test_random_crop_keeps_uint8_and_reaches_every_offset():
    x = torch.zeros(2000, 1, 20, 20, dtype=torch.uint8)
    x[:, :, 0, 0] = 1  # visible in the crop only at offset (0, 0)
    out = random_crop(x, 16, generator=torch.Generator().manual_seed(1))
    assert out.dtype == torch.uint8
    at_origin = (out[:, 0, 0, 0] == 1).float().mean().item()
    assert 0.0 < at_origin < 0.2  # 1/25 expected: offsets cover 0..4 in both axes


def test_center_crop_is_the_middle_window_and_deterministic():
    x = position_images(3)
    out = center_crop(x, 84)
    assert torch.equal(out, x[:, :, 8:92, 8:92])
    assert torch.equal(out, center_crop(x, 84))
    assert torch.equal(center_crop(x[0], 84), out[0])  # also for one [C, H, W] observation


# --------------------------------------------------------------------------------------------- EMA


def test_ema_update_exact_formula():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    target = copy.deepcopy(net)
    with torch.no_grad():
        for p in target.parameters():
            p.add_(torch.randn_like(p))
    expected = [0.05 * p.detach() + 0.95 * tp.detach() for p, tp in zip(net.parameters(), target.parameters())]
    ema_update(net, target, 0.05)
    for e, tp in zip(expected, target.parameters()):
        torch.testing.assert_close(tp.detach(), e, rtol=1e-6, atol=1e-7)  # 1 ulp: lerp rounds differently
    ema_update(net, target, 1.0)
    for p, tp in zip(net.parameters(), target.parameters()):
        assert torch.equal(p, tp)


# --------------------------------------------------------------------------------------------- scores


def test_curl_scores_bilinear_diagonal_raw():
    torch.manual_seed(0)
    q, k, W = torch.randn(5, 4), torch.randn(5, 4), torch.randn(4, 4)
    scores = curl_scores(q, [k], W)
    naive = torch.tensor([[float(q[i] @ W @ k[j]) for j in range(5)] for i in range(5)])
    torch.testing.assert_close(scores.logits, naive)
    assert torch.equal(scores.pos_mask, torch.eye(5, dtype=torch.bool))
    assert torch.equal(scores.neg_mask, ~torch.eye(5, dtype=torch.bool))
    assert scores.min_logit is None and scores.max_logit is None
    # infonce is CURL's cross-entropy with the diagonal as labels, after its row-max shift.
    shifted = naive - naive.max(dim=1, keepdim=True).values
    expected = F.cross_entropy(shifted, torch.arange(5))
    torch.testing.assert_close(losses.get("infonce")(scores), expected)
    torch.testing.assert_close(losses.get("dcl", tau_plus=0.0)(scores), expected)


def test_curl_scores_two_positives():
    torch.manual_seed(1)
    b = 4
    q, k1, k2, W = torch.randn(b, 3), torch.randn(b, 3), torch.randn(b, 3), torch.randn(3, 3)
    scores = curl_scores(q, [k1, k2], W)
    assert scores.logits.shape == (b, 2 * b)
    keys = torch.cat([k1, k2])
    torch.testing.assert_close(scores.logits, q @ W @ keys.T)
    for i in range(b):
        assert scores.pos_mask[i].nonzero().flatten().tolist() == [i, b + i]
    # infonce with M=2: the mean over both positives, each against the 2B-2 negatives (naive loop).
    total = 0.0
    for i in range(b):
        row = scores.logits[i]
        negatives = [row[j] for j in range(2 * b) if j not in (i, b + i)]
        for p in (i, b + i):
            total += -(row[p] - torch.logsumexp(torch.stack([row[p], *negatives]), 0))
    torch.testing.assert_close(losses.get("infonce")(scores), total / (2 * b))


# --------------------------------------------------------------------------------------------- replay buffer


class AllIndices:
    """Stands in for a numpy Generator: 'samples' every stored index in order."""

    def integers(self, low, high, size):
        return np.arange(low, high)


def fill(buffer: ReplayBuffer, episodes: int, length: int, stack: int, rng) -> list[tuple]:
    """Run fake episodes into ``buffer``; return every transition with its full stacks (the reference)."""
    transitions = []
    for _ in range(episodes):
        obs = rng.integers(0, 256, size=(3 * stack, 2, 2), dtype=np.uint8)
        buffer.start_episode(obs)
        for _ in range(length):
            frame = rng.integers(0, 256, size=(3, 2, 2), dtype=np.uint8)
            next_obs = np.concatenate([obs[3:], frame])
            action, reward, not_done = rng.uniform(-1, 1, 2).astype(np.float32), float(rng.normal()), 1.0
            buffer.add(action, reward, next_obs, not_done)
            transitions.append((obs, action, reward, next_obs, not_done))
            obs = next_obs
    return transitions


@pytest.mark.parametrize("capacity,length,stack", [(7, 3, 3), (5, 1, 3), (10, 4, 1), (3, 5, 4), (1, 2, 2)])
def test_replay_buffer_wraparound_matches_naive(capacity, length, stack):
    rng = np.random.default_rng(capacity * 100 + length * 10 + stack)
    buffer = ReplayBuffer(capacity, (3, 2, 2), stack, 2, length)
    transitions = fill(buffer, episodes=6, length=length, stack=stack, rng=rng)
    assert len(buffer) == min(capacity, len(transitions))
    obs, actions, rewards, next_obs, not_dones = buffer.sample(0, AllIndices())
    # Slot i holds the latest transition n with n % capacity == i.
    for i in range(len(buffer)):
        n = max(n for n in range(len(transitions)) if n % capacity == i)
        t_obs, t_action, t_reward, t_next, t_nd = transitions[n]
        assert np.array_equal(obs[i], t_obs) and np.array_equal(next_obs[i], t_next)
        assert np.array_equal(actions[i], t_action) and rewards[i, 0] == np.float32(t_reward)
        assert not_dones[i, 0] == t_nd


def test_replay_buffer_sample_shapes_dtypes_and_state_round_trip():
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(20, (3, 2, 2), 3, 2, 4)
    fill(buffer, episodes=3, length=4, stack=3, rng=rng)
    obs, actions, rewards, next_obs, not_dones = buffer.sample(8, np.random.default_rng(1))
    assert obs.shape == next_obs.shape == (8, 9, 2, 2) and obs.dtype == next_obs.dtype == np.uint8
    assert buffer.frames.dtype == np.uint8
    assert actions.shape == (8, 2) and rewards.shape == not_dones.shape == (8, 1)
    copy_ = ReplayBuffer(20, (3, 2, 2), 3, 2, 4)
    copy_.load_state_dict(buffer.state_dict())
    # Both continue identically, including the episode in progress.
    fill(buffer, 4, 4, 3, np.random.default_rng(5))
    fill(copy_, 4, 4, 3, np.random.default_rng(5))
    for a, b in zip(buffer.sample(0, AllIndices()), copy_.sample(0, AllIndices())):
        assert np.array_equal(a, b)


# --------------------------------------------------------------------------------------------- agent


def tiny_agent(**kw) -> tuple[CurlSac, CurlConfig]:
    cfg = CurlConfig(image_size=24, crop_size=20, hidden_dim=16, feature_dim=8, num_filters=4, batch_size=6, **kw)
    torch.manual_seed(0)
    return CurlSac(cfg, action_dim=2, lr=1e-3, loss_fn=losses.get("dcl", tau_plus=0.1),
                   device=torch.device("cpu")), cfg


def tiny_batch(cfg: CurlConfig, b: int = 6) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, size=(b, 9, cfg.image_size, cfg.image_size), dtype=np.uint8)
    return (obs, rng.uniform(-1, 1, (b, 2)).astype(np.float32), rng.normal(size=(b, 1)).astype(np.float32),
            np.roll(obs, 1, axis=-1), np.ones((b, 1), np.float32))


def snapshot(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def changed(before: list[torch.Tensor], module: nn.Module) -> bool:
    return any(not torch.equal(b, p) for b, p in zip(before, module.parameters()))


def test_actor_update_never_trains_the_convolutions_or_the_critic():
    agent, cfg = tiny_agent()
    obs = torch.as_tensor(tiny_batch(cfg)[0][:, :, :20, :20]).float()
    assert agent.actor.encoder.convs is agent.critic.encoder.convs  # shared, as CURL ties them
    convs, critic, trunk = snapshot(agent.critic.encoder.convs), snapshot(agent.critic), snapshot(agent.actor.trunk)
    head, alpha = snapshot(agent.actor.encoder.fc), agent.log_alpha.item()
    agent.update_actor_and_alpha(obs)
    assert not changed(convs, agent.critic.encoder.convs) and not changed(critic, agent.critic)
    assert changed(trunk, agent.actor.trunk) and changed(head, agent.actor.encoder.fc)
    assert agent.log_alpha.item() != alpha


def test_update_schedule_and_key_encoder_ema():
    # step 2: actor and target updates happen (every 2nd), the contrastive one does not (every 3rd).
    agent, cfg = tiny_agent(curl_update_freq=3)
    target_before = copy.deepcopy(agent.critic_target)
    w_before = agent.W.detach().clone()
    stats = agent.update(tiny_batch(cfg), step=2)
    assert set(stats) == {"critic_loss", "actor_loss", "alpha"} and torch.equal(agent.W, w_before)
    for online, target, old, tau in ((agent.critic.encoder, agent.critic_target.encoder, target_before.encoder, 0.05),
                                     (agent.critic.q1, agent.critic_target.q1, target_before.q1, 0.01)):
        for p, tp, op in zip(online.parameters(), target.parameters(), old.parameters()):
            torch.testing.assert_close(tp, tau * p.detach() + (1 - tau) * op, rtol=1e-6, atol=1e-7)
    # step 3: critic and contrastive only; the target does not move; W and the encoder learn.
    target_before = copy.deepcopy(agent.critic_target)
    encoder = snapshot(agent.critic.encoder)
    stats = agent.update(tiny_batch(cfg), step=3)
    assert set(stats) == {"critic_loss", "curl_loss"} and np.isfinite(stats["curl_loss"])
    assert not changed(snapshot(target_before), agent.critic_target)
    assert not torch.equal(agent.W, w_before) and changed(encoder, agent.critic.encoder)


def test_two_positive_crops_run():
    agent, cfg = tiny_agent(num_positives=2)
    stats = agent.update(tiny_batch(cfg), step=0)
    assert set(stats) == {"critic_loss", "actor_loss", "alpha", "curl_loss"} and np.isfinite(stats["curl_loss"])


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="crop_size"):
        CurlConfig(image_size=64, crop_size=84)
    with pytest.raises(ValueError, match="num_positives"):
        CurlConfig(num_positives=3)
    with pytest.raises(ValueError, match="batch_size"):
        CurlConfig(batch_size=0)


def test_presets_are_valid_configs():
    domain = domains.get("rl")
    for name, preset in domain.presets.items():
        cfg = dataclasses.replace(CurlConfig(), **preset.overrides)
        assert cfg.num_env_steps >= cfg.eval_freq, name
    assert domain.presets["paper"].overrides["num_env_steps"] == 100_000
    assert domain.presets["paper"].overrides["batch_size"] == 512
