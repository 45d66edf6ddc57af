"""Values a careless user gives that used to hang, crash or train nothing (an audit, field by field): each is now
one ``error:`` line before anything runs, and a run whose weights diverge says so in every domain."""

from __future__ import annotations

import pytest

from harness.cli import main

GRAPH = ["run", "--domain", "graph", "--loss", "infonce", "--seeds", "0", "--tracker", "none"]


@pytest.mark.parametrize(("args", "message"), [
    # built modules until the memory ran out, deaf to SIGTERM
    ([*GRAPH, "--set", "layers=1000000000000"], "layers=1000000000000: must be less than or equal to 64"),
    ([*GRAPH, "--set", "svm_jobs=1000000000000"], "svm_jobs=1000000000000: must be less than or equal to 1024"),
    (["run", "--domain", "vision", "--loss", "infonce", "--seeds", "0", "--set", "n_views=1000000000000"],
     "n_views=1000000000000: must be less than or equal to 64"),
    (["run", "--domain", "vision", "--loss", "infonce", "--seeds", "0", "--set", "image_size=100000"],
     "image_size=100000: must be less than or equal to 1024"),
    (["run", "--domain", "text", "--loss", "infonce", "--seeds", "0", "--set", "synthetic_documents=1000000000000"],
     "synthetic_documents=1000000000000: must be less than or equal to 100000"),  # was a 7 TiB array
    (["run", "--domain", "rl", "--loss", "infonce", "--seeds", "0", "--set", "batch_size=1"],
     "batch_size=1: must be greater than or equal to 2"),  # no negative: the loss core's refusal at the first update
])
def test_a_value_past_a_fields_bound_is_refused_before_the_run(tmp_path, run_main, args, message):
    out = run_main(main, *args, "--results", str(tmp_path))
    assert out.returncode == 2 and out.stderr == f"error: --set {message}\n"
    assert not list(tmp_path.glob("*.json"))


def test_an_rl_crop_too_small_for_the_convolutions_is_refused_at_the_least_that_fits(tmp_path, run_main):
    """The encoder's 3x3 convolutions, the first of stride 2, leave no pixel of a smaller crop: torch's error came
    at the first update. 15 pixels fit four layers; 14 do not."""
    import torch

    from domains.rl.models import make_convs

    assert make_convs(3, 4, 4)(torch.zeros(1, 3, 15, 15)).shape[1] == 4
    with pytest.raises(RuntimeError):
        make_convs(3, 4, 4)(torch.zeros(1, 3, 14, 14))
    out = run_main(main, "run", "--domain", "rl", "--loss", "dcl", "--seeds", "0", "--set", "crop_size=14",
                   "--results", str(tmp_path))
    assert out.returncode == 2 and out.stderr.endswith(
        "crop_size must be >= 15 for 4 conv layers (each 3x3 layer shrinks the image, the first halves it; "
        "4*num_conv_layers-1), got 14\n"), out.stderr


@pytest.mark.usefixtures("rendering")
def test_an_rl_image_larger_than_the_tasks_framebuffer_names_the_largest_that_fits():
    from domains.errors import UserError
    from domains.rl.env import DMControlEnv

    with pytest.raises(UserError, match=r"image_size 481 does not fit cartpole-swingup's offscreen framebuffer "
                                        r"\(640x480\): at most 480"):
        DMControlEnv("cartpole", "swingup", 0, image_size=481)


def test_an_rl_run_whose_random_steps_take_it_all_is_refused(tmp_path, run_main):
    """300 environment steps at cartpole's action repeat 8 are 38 agent steps, all random: the run recorded an
    untrained agent's return under the loss's name (updates: 0)."""
    pytest.importorskip("dm_control")
    out = run_main(main, "run", "--domain", "rl", "--loss", "dcl", "--seeds", "0", "--set", "num_env_steps=300",
                   "--set", "seed_agent_steps=100", "--results", str(tmp_path))
    assert out.returncode == 2 and out.stderr == (
        "error: seed_agent_steps=100 random-action steps take the whole run (num_env_steps=300 at action_repeat 8 is "
        "38 agent steps): no update would run; raise num_env_steps or lower seed_agent_steps\n")
    assert not list(tmp_path.glob("*.json"))


def test_a_vision_run_that_diverges_says_so_as_graph_does(tmp_path, run_main):
    """The loss core's refusal of non-finite logits was a crash line ("NonFiniteError: ...", exit 1)."""
    pytest.importorskip("sklearn")
    out = run_main(main, "run", "--domain", "vision", "--loss", "infonce", "--seeds", "0", "--set", "lr=1e12",
                   "--set", "epochs=1", "--set", "linear_epochs=1", "--set", "knn_every=0", "--quiet",
                   "--tracker", "none", "--results", str(tmp_path))
    assert out.returncode == 2, out.stderr
    assert "training diverged; try a lower learning rate (now --set lr=1e+12)" in out.stderr
    assert "NonFiniteError" not in out.stderr
