"""The rl domain's page text, its published rows and notes: read by the pages alone (Domain.published_module)."""

from __future__ import annotations

from domains.base import Reference

_CURL = "CURL paper (Srinivas et al. 2020), Table 1, 100k env steps"
_DCL = "DCL paper (Chuang et al. 2020), Table 3"
# CURL's rows are its 100k benchmark (our preset `paper`); a row of ours shows its own budget.
_PROTOCOL = ("100k environment steps, batch 512, 10 evaluation episodes (our preset `paper`); batch 512 on every task "
             "is the authors' word for their final runs (MishaLaskin/curl issue 15: the paper's hyper-parameter table "
             "\"needs to be updated\"), where that table and their repository's scripts (`--batch_size 128`) give "
             "smaller batches. Our rows trained for the environment steps in their setting column.")
_DCL_PROTOCOL = ("DCL's CURL (InfoNCE) rows differ from CURL's own 100k rows by up to a factor of 2.5 either way "
                 "(cartpole 850 against 582, finger 310 against 767), which the paper does not explain, and DCL's RL "
                 "code is not public: their budget and settings are not checked. Our rows trained for the "
                 "environment steps in their setting column.")
_TASK_ORDER = ("finger-spin", "cartpole-swingup", "reacher-easy", "cheetah-run", "walker-walk", "ball_in_cup-catch")


def _rows(source: str, label: str, loss: str, values: tuple[tuple[float, float], ...],
          protocol: str = _PROTOCOL, checked: bool = False) -> tuple[Reference, ...]:
    return tuple(Reference(source, task, label, value, std, method="curl", loss=loss, protocol=protocol,
                           checked=checked)
                 for task, (value, std) in zip(_TASK_ORDER, values))


REFERENCES: tuple[Reference, ...] = (
    *_rows(_CURL, "CURL (InfoNCE)", "infonce",
           ((767, 56), (582, 146), (538, 233), (299, 48), (403, 24), (769, 43)), checked=True),
    *_rows(_DCL, "Biased (CURL, InfoNCE)", "infonce",
           ((310, 33), (850, 20), (918, 96), (266, 41), (623, 120), (928, 47)), _DCL_PROTOCOL),
    *_rows(_DCL, "Debiased (DCL, tau+ 0.1)", "dcl",
           ((364, 36), (860, 4), (868, 177), (302, 29), (594, 33), (951, 11)), _DCL_PROTOCOL),
)

NOTES: dict[str, str] = {}
