"""The presets and options issue 31's plans need: the positive-debiased paper's protocol, the projection-head
ablation of the biased track, the 100k CURL protocol and the text paper preset, each as the issue states it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

import domains
import losses
from domains.errors import UserError
from domains.rl.config import TASKS
from domains.vision.biased import Biased
from domains.vision.config import PRESETS, VisionConfig, resolved
from domains.vision.method import Batch, DataInfo


def _preset_config(domain: str, preset: str):
    return domains.get(domain).config_class(**domains.get(domain).presets[preset].overrides)


def test_the_positive_debiased_preset_is_the_issues_protocol():
    cfg = resolved(_preset_config("vision", "paper-debiased-pos"), "simclr", "cifar10")
    assert (cfg.arch, cfg.optimizer, cfg.lr, cfg.batch_size, cfg.epochs) == ("resnet18", "adam", 1e-3, 512, 50)
    assert (cfg.temperature, cfg.knn_every, cfg.knn_k, cfg.knn_temperature) == (0.5, 1, 200, 0.5)  # every epoch
    description = PRESETS["paper-debiased-pos"].description
    for fact in ("Troeshestova & Isachenko", "intsystems/2023-Project-123", "top1 and top5", "n_views=M+1"):
        assert fact in description


def test_the_head_ablation_changes_only_the_head():
    plain, head = PRESETS["paper-biased"].overrides, PRESETS["paper-biased-head"].overrides
    assert {k: v for k, v in head.items() if k != "biased_head"} == plain and head["biased_head"] is True
    assert VisionConfig().biased_head is False  # the default is the behaviour before the option


def _biased(loss: str, **fields) -> Biased:
    cfg = resolved(replace(VisionConfig(arch="simpleconvnet"), **fields), "biased", "biased-mnist")
    info = DataInfo(40, torch.arange(40) % 4, 4, 28, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    return Biased(cfg, info, losses.get(loss), True)


def test_the_head_option_puts_a_projection_head_on_the_simpleconvnet():
    assert isinstance(_biased("supcon").head, nn.Identity)
    method = _biased("supcon", biased_head=True)
    assert isinstance(method.head, nn.Sequential) and method.head[-1].out_features == 128
    torch.manual_seed(0)
    images = torch.randint(0, 256, (8, 3, 28, 28), dtype=torch.uint8)
    labels = torch.arange(8) % 4
    loss = method(Batch(torch.arange(8), images, labels, labels))
    loss.backward()
    assert torch.isfinite(loss) and method.head[0].weight.grad is not None  # the loss trains the head
    with pytest.raises(UserError, match="biased_head=true is for the contrastive losses"):
        _biased("ce", biased_head=True)


def test_curl_100k_is_the_papers_batch_and_six_tasks():
    cfg = _preset_config("rl", "100k")
    assert (cfg.num_env_steps, cfg.batch_size, cfg.eval_freq, cfg.eval_episodes) == (100_000, 512, 10_000, 10)
    repeats = {name: task.action_repeat for name, task in TASKS.items()}
    assert repeats == {"cartpole-swingup": 8, "finger-spin": 2, "reacher-easy": 4, "cheetah-run": 4,
                       "walker-walk": 2, "ball_in_cup-catch": 4}  # CURL's Table of action repeats


def test_the_text_paper_preset_is_quick_thoughts_sizes_on_every_book():
    cfg = _preset_config("text", "paper")
    assert (cfg.word_dim, cfg.hidden_dim, cfg.batch_size, cfg.max_len, cfg.lr) == (620, 1200, 400, 30, 5e-4)
    assert cfg.max_sentences == 0 and cfg.books == ()  # every sentence of every book
