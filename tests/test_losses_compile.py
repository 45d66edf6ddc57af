"""The loss core under ``torch.compile``: every loss on every layout, its constructor included, traces as one
graph (``fullgraph=True``: no graph break, no Python cache, no value read on the host) and gives the eager
value and gradient.

Most cases use AOTAutograd's ``aot_eager`` backend, which traces the forward and the backward as inductor does
but generates no code (about half a second a case); one case goes through inductor itself. The kernels a
compiled step launches are counted in test_losses_benchmark.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo
from loss_layouts import ENTRIES, case, entry_id, layouts, value_and_grads
from torch._dynamo.testing import CompileCounterWithBackend

import losses

LAYOUT_NAMES = list(layouts(0.5))
# By default every loss on the training layout and on dense masks, and every layout under an unsupervised and a
# supervised loss (about 30 s); every pair of them with -m slow.
FAST = {(entry_id(e), layout) for e in ENTRIES for layout in ("pair", "hand-built")} | {
    (name, layout) for name in ("dcl", "supcon") for layout in LAYOUT_NAMES}
CASES = [pytest.param(e, layout, id=f"{entry_id(e)}-{layout}",
                      marks=() if (entry_id(e), layout) in FAST else pytest.mark.slow)
         for e in ENTRIES for layout in LAYOUT_NAMES]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles anew: past dynamo's recompile limit a function would run eagerly, and pass unseen."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("entry, layout", CASES)
def test_compiled_loss_is_one_graph_with_the_eager_value_and_gradient(entry, layout):
    inputs, build = case(entry, layout, 0.5)
    value, grads = value_and_grads(entry, [x.clone() for x in inputs], build)
    counter = CompileCounterWithBackend("aot_eager")
    got, got_grads = value_and_grads(entry, [x.clone() for x in inputs], build, counter)
    assert counter.frame_count == 1  # compiled, in one piece
    assert got.item() == pytest.approx(value.item(), rel=1e-5, abs=1e-6)
    for g, g_eager in zip(got_grads, grads):
        torch.testing.assert_close(g, g_eager, rtol=1e-4, atol=1e-6)


def test_inductor_compiles_a_loss_to_the_eager_value_and_gradient():
    """The generated code itself (C++ on the CPU), on the training layout at a small temperature (shifted rows)."""
    entry = ("dcl", {"tau_plus": 0.1})
    inputs, build = case(entry, "pair", 0.02)
    value, grads = value_and_grads(entry, [x.clone() for x in inputs], build)
    got, got_grads = value_and_grads(entry, [x.clone() for x in inputs], build, "inductor")
    assert got.item() == pytest.approx(value.item(), rel=1e-5)
    for g, g_eager in zip(got_grads, grads):
        torch.testing.assert_close(g, g_eager, rtol=1e-4, atol=1e-6)


def test_compiled_checks_are_queued_and_still_refuse_non_finite_logits():
    """A graph reads no value on the host, so the check is queued (``torch._assert_async``) as on a GPU; on the
    CPU it fails at once, as a RuntimeError with the check's message."""
    z1, z2 = torch.randn(8, 4), torch.randn(8, 4)
    z1[3, 1] = float("nan")
    step = torch.compile(lambda a, b: losses.dcl(losses.pair_scores(a, b, 0.5)), backend="aot_eager",
                         fullgraph=True, dynamic=False)
    with pytest.raises(RuntimeError, match="dcl: the loss is undefined or not finite"):
        step(z1, z2)
    with pytest.raises(losses.NonFiniteError):  # eager, the same input is refused before any loss is computed
        losses.dcl(losses.pair_scores(z1, z2, 0.5))


def test_eager_steps_after_a_compiled_one_still_share_their_layout():
    """Tracing builds the layout in the graph and leaves the eager cache alone: an eager step afterwards gets
    the same cached index tensors as before."""
    z1, z2 = torch.randn(6, 4), torch.randn(6, 4)
    before = losses.pair_scores(z1, z2, 0.5).positives
    step = torch.compile(lambda a, b: losses.infonce(losses.pair_scores(a, b, 0.5)), backend="aot_eager",
                         fullgraph=True, dynamic=False)
    step(z1, z2)
    after = losses.pair_scores(z1, z2, 0.5).positives
    assert all(a is b for a, b in zip(before, after))
    assert not any(t.is_inference() for t in after)


def test_a_compiled_loss_is_one_graph_over_the_steps_of_a_run():
    """``Loss.compile`` (what vision's ``compile=true`` calls): the eager values, one graph for every step of a
    size, copies compiled alike, and ``uncompile`` back to eager."""
    counter = CompileCounterWithBackend("aot_eager")
    loss, eager = losses.get("hcl", tau_plus=0.2, beta=0.5), losses.get("hcl", tau_plus=0.2, beta=0.5)
    assert loss.compile(backend=counter) and loss.compiled and not eager.compiled
    for _ in range(3):
        scores = losses.pair_scores(torch.randn(10, 4), torch.randn(10, 4), 0.5)
        assert loss(scores).item() == pytest.approx(eager(scores).item(), rel=1e-6)
    assert counter.frame_count == 1
    twin = copy.deepcopy(loss)
    assert twin.compiled and twin(scores).item() == pytest.approx(eager(scores).item(), rel=1e-6)
    loss.uncompile()
    assert not loss.compiled and loss(scores).item() == pytest.approx(eager(scores).item(), rel=1e-6)
    assert counter.frame_count == 1  # the copy reuses the graph; eager calls compile nothing


def test_a_loss_with_an_estimated_prior_stays_eager():
    """Its bound prior changes between epochs: each value would be another graph."""
    loss = losses.get("dcl", tau_plus="auto")
    assert loss.compile() is False and not loss.compiled
