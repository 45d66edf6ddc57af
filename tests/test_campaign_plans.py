"""Every run of every committed campaign plan, as the exact ``harness run`` command ``tools/campaign run`` starts on
the GPU machine, read by the harness's own command line and resolved to its run without running it: the flags the
campaign adds are the harness's, and each ``key=value`` of a line is in force in the run's resolved config or loss
(a preset or a domain's resolution that overrode it would spend device minutes on another experiment). The data
is not loaded: the CPU rehearsal of each line (README "The GPU campaign") does that."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.parser import build_parser
from harness.run import request_from_args, time_limit, tracking
from harness.run.config import LOSS_PREFIX, format_value, parse_assignments
from harness.run.runner import plan
from harness.suites.campaign import PLANS, harness_run, load_plan


def _in_force(value: object, text: str) -> bool:
    """Whether the resolved ``value`` is what the plan's ``text`` says (``alpha=1`` is 1.0 once resolved)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return math.isclose(value, float(text))
    return format_value(value) == text


@pytest.mark.parametrize("name", sorted(path.stem for path in PLANS.glob("*.txt")))
def test_every_run_of_a_plan_is_a_harness_command_that_resolves_with_its_overrides_in_force(name):
    the_plan = load_plan(PLANS / f"{name}.txt")
    for setting, seed in the_plan.runs([]):
        where = f"{name}:{setting.line} seed {seed}"
        command = harness_run(setting, seed, "cuda", Path("/nonexistent/stage") / the_plan.records)
        assert command[1:4] == ["-m", "harness", "run"], where
        # what prepare() adds before a run starts: a time limit, and --resume where a checkpoint waits
        args = build_parser().parse_args([*command[3:], "--time-limit", "405s", "--resume"])
        assert time_limit(args) == 405 and args.device == "cuda" and args.quiet, where
        request = request_from_args(args)
        assert request.trackers == [] and request.resume, where  # --tracker none: nothing to import on the GPU
        tracking.check(request.trackers)
        (spec,) = plan(request).specs
        assert (spec.domain, spec.method, spec.dataset, spec.loss, spec.preset, spec.seed) == (
            setting.domain, setting.method, setting.dataset, setting.loss, setting.preset, seed), where
        for key, text in parse_assignments(list(setting.sets)).items():
            if key.startswith(LOSS_PREFIX):
                value = spec.loss_params[key[len(LOSS_PREFIX):]]
            else:
                value = getattr(spec.config, key)
            assert _in_force(value, text), f"{where}: {key}={text} resolved to {value!r}"
