"""CURL's networks (as in CURL's public code): the pixel encoder, the SAC actor and twin critic, the EMA of a
network, and CURL's initialisation.

- Encoder: 4 convolutions of 32 filters 3x3 (stride 2, then 1), ReLU, a linear layer to 50, LayerNorm
  (no tanh: CURL builds it with ``output_logits=True``). Actor and critic share the convolutions; each
  has its own linear + LayerNorm head (how they are wired and trained is the algorithm's, ``domains.rl.curl``).
- SAC: twin Q MLPs and a tanh-Gaussian actor MLP of 1024 units (``hidden_dim``).
- Initialisation: orthogonal linear layers, delta-orthogonal convolutions, zero biases.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def weight_init(module: nn.Module) -> None:
    """CURL's initialisation: orthogonal linear layers, delta-orthogonal convolutions, zero biases."""
    if isinstance(module, nn.Linear):
        nn.init.orthogonal_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Conv2d):
        nn.init.zeros_(module.weight)
        nn.init.zeros_(module.bias)
        mid = module.weight.shape[2] // 2
        nn.init.orthogonal_(module.weight.data[:, :, mid, mid], nn.init.calculate_gain("relu"))


def make_convs(in_channels: int, num_filters: int, num_layers: int) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(in_channels, num_filters, 3, stride=2), nn.ReLU()]
    for _ in range(num_layers - 1):
        layers += [nn.Conv2d(num_filters, num_filters, 3, stride=1), nn.ReLU()]
    return nn.Sequential(*layers, nn.Flatten())


class Encoder(nn.Module):
    """pixels/255 -> convolutions -> linear -> LayerNorm. ``convs`` may be shared with another encoder.
    Pixels may come as uint8: the division makes them float32 in the same pass. ``bf16``: the convolutions
    under bf16 autocast, their features back in float32 (see ``CurlConfig.encoder_bf16``)."""

    def __init__(self, obs_shape: tuple[int, int, int], feature_dim: int, num_filters: int, num_layers: int,
                 convs: nn.Sequential | None = None, bf16: bool = False):
        super().__init__()
        self.bf16 = bf16
        self.convs = convs if convs is not None else make_convs(obs_shape[0], num_filters, num_layers)
        weight = next(self.convs.parameters())
        with torch.no_grad():  # probe where the convolutions live (shared ones may already be on the GPU)
            flat = self.convs(weight.new_zeros(1, *obs_shape)).shape[1]
        self.fc = nn.Linear(flat, feature_dim)
        self.ln = nn.LayerNorm(feature_dim)

    def conv_features(self, obs: Tensor) -> Tensor:
        if not self.bf16:
            return self.convs(obs / 255.0)
        # No cache of the weights' casts: it would hold tensors of a CUDA graph's capture past it.
        with torch.autocast(obs.device.type, dtype=torch.bfloat16, cache_enabled=False):
            return self.convs(obs / 255.0).float()

    def head(self, h: Tensor) -> Tensor:
        return self.ln(self.fc(h))

    def forward(self, obs: Tensor) -> Tensor:
        return self.head(self.conv_features(obs))


def mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, out_dim))


class Actor(nn.Module):
    """tanh-squashed Gaussian policy; log σ mapped into [log_std_min, log_std_max] by a tanh."""

    def __init__(self, encoder: Encoder, action_dim: int, hidden: int, log_std_min: float, log_std_max: float):
        super().__init__()
        self.encoder = encoder
        self.trunk = mlp(encoder.ln.normalized_shape[0], hidden, 2 * action_dim)
        self.log_std_min, self.log_std_max = log_std_min, log_std_max

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.policy(self.encoder(obs))

    def policy(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(deterministic action tanh(μ), sampled action, its log-probability [B, 1]) from features z."""
        mu, log_std = self.trunk(z).chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(log_std) + 1)
        noise = torch.randn_like(mu)
        pi = mu + noise * log_std.exp()
        log_pi = (-0.5 * noise.pow(2) - log_std).sum(-1, keepdim=True) - 0.5 * math.log(2 * math.pi) * mu.shape[-1]
        pi = torch.tanh(pi)
        # Change of variables through tanh (SAC, Haarnoja et al. 2018, appendix C).
        log_pi = log_pi - torch.log(F.relu(1 - pi.pow(2)) + 1e-6).sum(-1, keepdim=True)
        return torch.tanh(mu), pi, log_pi


class Critic(nn.Module):
    """Twin Q-functions on the encoder's features."""

    def __init__(self, encoder: Encoder, action_dim: int, hidden: int):
        super().__init__()
        self.encoder = encoder
        feature_dim = encoder.ln.normalized_shape[0]
        self.q1 = mlp(feature_dim + action_dim, hidden, 1)
        self.q2 = mlp(feature_dim + action_dim, hidden, 1)

    def forward(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        return self.q(self.encoder(obs), action)

    def q(self, z: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        h = torch.cat([z, action], dim=1)
        return self.q1(h), self.q2(h)


@torch.no_grad()
def ema_update(net: nn.Module, target: nn.Module, tau: float) -> None:
    """``target ← tau·net + (1 - tau)·target``, parameter by parameter (one fused kernel on the GPU)."""
    torch._foreach_lerp_(list(target.parameters()), list(net.parameters()), tau)
