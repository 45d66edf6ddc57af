"""domains.graphed: whole-step graphs. Without a GPU, ReplayBackend stands in for CUDA graphs: it checks the
static buffers, the recapture on a new key, the eager fallbacks and the warm-up against a plain eager loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from domains.graphed import GraphedStep, ReplayBackend, learning_rates, make_capturable


def _trainer(seed: int = 0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)

    def step(x, y):
        loss = ((net(x) - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    return net, opt, sched, step


def _batches(n: int, size: int = 16):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 4, generator=gen), torch.randn(size, 1, generator=gen)) for _ in range(n)]


def _train(graphed: bool, batches, backend=None):
    net, opt, sched, step = _trainer()
    run = GraphedStep(step, torch.device("cpu"), enabled=graphed, key=lambda: learning_rates(opt), warmup=2,
                      backend=backend)
    losses = []
    for i, (x, y) in enumerate(batches):
        losses.append(float(run(x, y)))  # read before the next call: the output is static
        if i % 2 == 1:
            sched.step()
    return losses, [p.detach().clone() for p in net.parameters()], run


def test_replayed_steps_equal_the_eager_loop():
    batches = _batches(12)
    eager_losses, eager_params, _ = _train(False, batches)
    backend = ReplayBackend()
    losses, params, run = _train(True, batches, backend)
    assert losses == eager_losses
    assert all(torch.equal(a, b) for a, b in zip(params, eager_params))
    # 2 warm-up steps, then 10 replays; the lr halves after the 8th batch (4 scheduler steps): one recapture
    assert run.replays == backend.replays == 10
    assert backend.captures == 2  # lr 1e-2 for steps 3-8, 5e-3 from step 9


def test_outputs_are_static_between_replays():
    backend = ReplayBackend()
    net, opt, sched, step = _trainer()
    run = GraphedStep(step, torch.device("cpu"), warmup=1, backend=backend)
    (x1, y1), (x2, y2), (x3, y3) = _batches(3)
    run(x1, y1)
    first = run(x2, y2)
    value = first.clone()
    second = run(x3, y3)
    assert second is first and not torch.equal(first, value)  # overwritten in place, as a graph's output is


def test_another_shape_runs_eagerly_and_keeps_the_graph():
    backend = ReplayBackend()
    _, _, _, step = _trainer()
    run = GraphedStep(step, torch.device("cpu"), warmup=1, backend=backend)
    big, small = _batches(3), _batches(1, size=5)
    run(*big[0])
    run(*big[1])
    assert run.captured
    run(*small[0])
    assert not run.captured and backend.captures == 1
    run(*big[2])
    assert run.captured and backend.captures == 1


def test_a_failed_capture_warns_once_and_trains_eagerly():
    batches = _batches(6)
    eager_losses, eager_params, _ = _train(False, batches)
    messages = []
    net, opt, sched, step = _trainer()
    refusal = RuntimeError("operation not permitted when stream is capturing\nmore")
    run = GraphedStep(step, torch.device("cpu"), warmup=2, log=messages.append, backend=ReplayBackend(fail=refusal))
    with pytest.warns(RuntimeWarning, match="capture of the training step failed .RuntimeError: operation not"):
        losses = []
        for i, (x, y) in enumerate(batches):
            losses.append(float(run(x, y)))
            if i % 2 == 1:
                sched.step()
    assert losses == eager_losses and not run.active and run.replays == 0
    assert len(messages) == 1 and messages[0].endswith("running it eagerly")
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), eager_params))


def test_cpu_steps_run_eagerly_without_a_backend():
    _, _, _, step = _trainer()
    run = GraphedStep(step, torch.device("cpu"))
    assert not run.active
    for x, y in _batches(4):
        run(x, y)
    assert run.replays == 0


def test_warmup_must_build_the_optimizer_state():
    with pytest.raises(ValueError, match="warmup must be at least 1"):
        GraphedStep(lambda: None, torch.device("cpu"), warmup=0)


def test_make_capturable_moves_host_step_counts_to_the_parameters():
    net = nn.Linear(2, 1)
    adam = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.ones(1, 2)).sum().backward()
    adam.step()
    make_capturable(adam)
    assert all(g["capturable"] for g in adam.param_groups)
    assert all(s["step"].device == p.device and s["step"].dtype == torch.float32
               for p, s in adam.state.items())
    sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    make_capturable(sgd)  # nothing to do: SGD keeps no step count
    assert "capturable" not in sgd.param_groups[0]


def test_make_capturable_false_lets_a_restored_capturable_adam_step_on_the_cpu():
    net = nn.Linear(2, 1)
    adam = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.ones(1, 2)).sum().backward()
    adam.step()
    saved = adam.state_dict()
    saved["param_groups"][0]["capturable"] = True  # as a graphed run on a GPU checkpoints it
    restored = torch.optim.Adam(net.parameters(), lr=0.1)
    restored.load_state_dict(saved)
    with pytest.raises(AssertionError, match="capturable"):
        restored.step()  # what a resumed run hit before the flag was put back
    make_capturable(restored, False)
    restored.step()
    assert not restored.param_groups[0]["capturable"]
