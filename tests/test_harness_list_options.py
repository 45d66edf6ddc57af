"""``harness list options``: every config field of every domain, with its default, range or choices and the
comment its config's source gives it; the comments read from the source by tokenize (a '#' inside a string is no
comment), section headings left out."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Literal

from pydantic import PositiveInt
from pydantic.dataclasses import dataclass
from tiny_domain import harness

import domains
from domains.base import RUNTIME
from harness.listing import field_comments


@dataclass
class Planted:
    # Pretraining
    epochs: PositiveInt = 5
    # The width of each layer; twice this in
    # the last one.
    width: int = 8  # must be even
    tag: str = "#not a comment"  # the tag
    # --- evaluation, a heading of many words above its fields ---
    folds: int = 10
    plain: bool = False

    mode: Literal["a", "b"] = field(default="a",
                                    metadata={RUNTIME: True})  # how fast


def test_each_field_gets_the_comment_above_it_and_the_one_ending_its_line():
    assert field_comments(Planted) == {
        "width": "The width of each layer; twice this in the last one.; must be even",
        "tag": "the tag",
        "mode": "how fast",
    }


def test_list_options_names_every_field_of_every_domain_with_its_default_and_comment():
    out = harness("list", "options")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    names = [line.split()[0] for line in lines]
    listed = {n.split(".")[0] for n in names}  # the subprocess's domains (a test may register more in this one)
    assert {"graph", "rl", "text", "vision"} <= listed
    for name in listed:
        fields = dataclasses.fields(domains.get(name).config_class)
        assert [n for n in names if n.startswith(f"{name}.")] == [f"{name}.{f.name}" for f in fields]
    line = next(line for line in lines if line.startswith("vision.knn_every "))
    assert line.split(None, 1)[1] == ("= 5 (integer >= 0); kNN monitor every N epochs (and at the last); 0: off. The "
                                      "final evaluation reports knn_top1 either way")
    assert any(line.startswith("vision.optimizer ") and "(one of adam, sgd)" in line for line in lines)
    assert any(line.startswith("graph.svm_jobs ") and line.endswith("[runtime: not part of the run's identity]")
               for line in lines)
    assert not any(line.startswith("graph.epochs ") and "Pretraining" in line for line in lines)
