"""Naive float64 references of the loss core, written directly from ``shared/specs/losses.md``.

Independent of ``losses/``: every quantity is a plain Python loop over anchors and candidates with
``math.exp`` / ``math.log`` on Python floats (float64), no log-sum-exp tricks, no vectorisation.
A :class:`Ref` holds what a ``Scores`` holds, as nested lists. ``min_logit`` / ``max_logit`` may be
a float, None (then the row min / max of the logits is used, as the spec says), or one value per
row (used to freeze the detached bounds when differentiating numerically).

The constructors' layouts are written here too (``ref_pair`` ...), from the spec's prose, so the
tests can check the masks and logits the package builds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

Matrix = list[list[float]]
Mask = list[list[bool]]
Bound = float | list[float] | None


@dataclass
class Ref:
    logits: Matrix
    pos: Mask
    neg: Mask
    min_logit: Bound = None
    max_logit: Bound = None
    anchor_labels: list[int] | None = None
    candidate_labels: list[int] | None = None

    @property
    def n_anchors(self) -> int:
        return len(self.logits)

    def positives(self, a: int) -> list[float]:
        return [x for x, p in zip(self.logits[a], self.pos[a]) if p]

    def negatives(self, a: int) -> list[float]:
        return [x for x, n in zip(self.logits[a], self.neg[a]) if n]

    def floor(self, a: int) -> float:
        """``exp(min_logit)``, or ``exp(min_k logits[a, k])`` without a known bound."""
        return math.exp(_bound(self.min_logit, a, min(self.logits[a])))

    def self_term(self, a: int) -> float:
        """``s_a = exp(max_logit)``, or ``exp(max_k logits[a, k])`` without a known bound."""
        return math.exp(_bound(self.max_logit, a, max(self.logits[a])))


def _bound(bound: Bound, a: int, fallback: float) -> float:
    if bound is None:
        return fallback
    return bound[a] if isinstance(bound, list) else bound


def to_ref(scores) -> Ref:
    """A ``losses.Scores`` as nested float64 lists."""
    labels = None if scores.anchor_labels is None else scores.anchor_labels.tolist()
    cand = None if scores.candidate_labels is None else scores.candidate_labels.tolist()
    return Ref(scores.logits.detach().double().tolist(), scores.pos_mask.tolist(), scores.neg_mask.tolist(),
               scores.min_logit, scores.max_logit, labels, cand)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _mean_over_anchors(per_anchor: list[float | None], loss: str) -> float:
    kept = [x for x in per_anchor if x is not None]
    if not kept:
        raise ValueError(f"{loss}: no anchor qualifies")
    return _mean(kept)


# ---------------------------------------------------------------- the losses, one anchor at a time

def infonce(r: Ref) -> float:
    out: list[float | None] = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        if not pos:
            out.append(None)
            continue
        neg_sum = sum(math.exp(x) for x in neg)
        out.append(_mean([-math.log(math.exp(p) / (math.exp(p) + neg_sum)) for p in pos]))
    return _mean_over_anchors(out, "infonce")


def _debiased(r: Ref, name: str, neg_coef: float, pos_coef: float, reweight: float | None = None) -> float:
    """``-log(e_ap / (e_ap + N_a·g_a))`` with ``g_a = max(neg_coef·r_a - pos_coef·pos_mean_a, floor)``;
    ``r_a`` is the plain negative mean, or HCL's reweighted mean when ``reweight`` (beta) is given."""
    out: list[float | None] = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        if not pos or not neg:
            out.append(None)
            continue
        n = len(neg)
        pos_mean = _mean([math.exp(p) for p in pos])
        if reweight is None:
            r_a = _mean([math.exp(x) for x in neg])
        else:
            z = _mean([math.exp(reweight * x) for x in neg])
            weights = [math.exp(reweight * x) / z for x in neg]
            r_a = sum(w * math.exp(x) for w, x in zip(weights, neg)) / n
        g = max(neg_coef * r_a - pos_coef * pos_mean, r.floor(a))
        out.append(_mean([-math.log(math.exp(p) / (math.exp(p) + n * g)) for p in pos]))
    return _mean_over_anchors(out, name)


def dcl(r: Ref, tau_plus: float = 0.1) -> float:
    return _debiased(r, "dcl", 1 / (1 - tau_plus), tau_plus / (1 - tau_plus))


def hcl(r: Ref, tau_plus: float = 0.1, beta: float = 1.0) -> float:
    return _debiased(r, "hcl", 1 / (1 - tau_plus), tau_plus / (1 - tau_plus), reweight=beta)


def pucl(r: Ref, alpha: float = 0.1, c: float = 0.01) -> float:
    return _debiased(r, "pucl", (1 - alpha * c) / (1 - alpha), alpha * (1 - c) / (1 - alpha))


def dcl_floor_rows(r: Ref, tau_plus: float) -> list[bool]:
    """Which anchors have DCL's floor active (``g_a`` = floor); for checking test coverage."""
    rows = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        if pos and neg:
            est = (_mean([math.exp(x) for x in neg]) - tau_plus * _mean([math.exp(p) for p in pos])) / (1 - tau_plus)
            rows.append(est < r.floor(a))
    return rows


def _debiased_pos_parts(r: Ref, a: int, pos: list[float], neg: list[float],
                        tau_plus: float) -> tuple[float, float, float]:
    """The estimate ``P_a - tau_minus·neg_mean_a``, its floor ``tau_plus·floor`` and the denominator.
    ``P_a`` as the authors' code builds it (losses/debiased_pos.py): the mean of the positives in one entry,
    ``(Σ_n e_an + pos_mean_a + s_a) / (N_a + 2)``, where the spec has ``(... + Σ_p e_ap ...) / (N_a + M_a + 1)``."""
    tau_minus = 1 - tau_plus
    n = len(neg)
    neg_mean = _mean([math.exp(x) for x in neg])
    density = (sum(math.exp(x) for x in neg) + _mean([math.exp(p) for p in pos]) + r.self_term(a)) / (n + 2)
    return density - tau_minus * neg_mean, tau_plus * r.floor(a), density + (n * tau_plus - tau_minus) * neg_mean


def _debiased_pos_term(r: Ref, a: int, pos: list[float], neg: list[float], tau_plus: float) -> float:
    estimate, floor, den = _debiased_pos_parts(r, a, pos, neg, tau_plus)
    num = max(estimate, floor)
    # The spec's ratio is undefined when the denominator reaches 0 (very few negatives); losses/
    # documents (debiased_pos.py) that the ratio is then taken as 1, i.e. the loss is 0.
    if den <= 0:
        return 0.0
    return -math.log(num / den)


def debiased_pos_regimes(r: Ref, tau_plus: float) -> list[str]:
    """Per qualifying anchor (grouping): "floor" where the numerator is floored, "guard" where the
    denominator is not positive, else "plain"; for checking test coverage."""
    out = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        if pos and neg:
            estimate, floor, den = _debiased_pos_parts(r, a, pos, neg, tau_plus)
            out.append("guard" if den <= 0 else "floor" if estimate < floor else "plain")
    return out


def debiased_pos(r: Ref, tau_plus: float = 0.1, aggregation: str = "grouping") -> float:
    out: list[float | None] = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        if not pos or not neg:
            out.append(None)
        elif aggregation == "grouping":
            out.append(_debiased_pos_term(r, a, pos, neg, tau_plus))
        else:
            out.append(_mean([_debiased_pos_term(r, a, [p], neg, tau_plus) for p in pos]))
    return _mean_over_anchors(out, "debiased_pos")


def supcon(r: Ref) -> float:
    out: list[float | None] = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        if not pos:
            out.append(None)
            continue
        total = sum(math.exp(x) for x in pos + neg)
        out.append(-_mean([math.log(math.exp(p) / total) for p in pos]))
    return _mean_over_anchors(out, "supcon")


def eps_supcon(r: Ref, epsilon: float = 0.0) -> float:
    out: list[float | None] = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        if not pos:
            out.append(None)
            continue
        den = math.exp(-epsilon) * sum(math.exp(p) for p in pos) + sum(math.exp(x) for x in neg)
        out.append(epsilon - _mean([math.log(math.exp(p) / den) for p in pos]))
    return _mean_over_anchors(out, "eps_supcon")


def eps_supinfonce(r: Ref, epsilon: float = 0.0) -> float:
    out: list[float | None] = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        if not pos:
            out.append(None)
            continue
        neg_sum = sum(math.exp(x) for x in neg)
        out.append(-_mean([math.log(math.exp(p) / (math.exp(-epsilon) * math.exp(p) + neg_sum)) for p in pos]))
    return _mean_over_anchors(out, "eps_supinfonce")


def unbiased(r: Ref) -> float:
    out: list[float | None] = []
    for a in range(r.n_anchors):
        pos = r.positives(a)
        n_all = sum(r.neg[a])
        true_neg = [x for k, x in enumerate(r.logits[a])
                    if r.neg[a][k] and r.candidate_labels[k] != r.anchor_labels[a]]
        if not pos or not true_neg:
            out.append(None)
            continue
        term = n_all / len(true_neg) * sum(math.exp(x) for x in true_neg)
        out.append(_mean([-math.log(math.exp(p) / (math.exp(p) + term)) for p in pos]))
    return _mean_over_anchors(out, "unbiased")


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x)) if x < 30 else x + math.log1p(math.exp(-x))


def jsd(r: Ref) -> float:
    pos_terms, neg_terms = [], []
    for a in range(r.n_anchors):
        for k, x in enumerate(r.logits[a]):
            if r.pos[a][k]:
                pos_terms.append(_softplus(-x))
            elif r.neg[a][k]:
                neg_terms.append(_softplus(x))
    if not pos_terms or not neg_terms:
        raise ValueError("jsd: needs a positive and a negative pair")
    return _mean(pos_terms) + _mean(neg_terms) - 2 * math.log(2)


REFERENCES: dict[str, Callable[..., float]] = {
    "infonce": infonce, "dcl": dcl, "hcl": hcl, "pucl": pucl, "debiased_pos": debiased_pos,
    "supcon": supcon, "eps_supcon": eps_supcon, "eps_supinfonce": eps_supinfonce, "unbiased": unbiased,
    "jsd": jsd,
    "ce": supcon,  # cross-entropy is L_out whose positives are the classes (losses/ce.py)
}


# ---------------------------------------------------------------- the authors' own code, as naive loops
# What the authors' code computes, written from reading it, where it departs from the spec: the loss files
# state each difference and tests/test_losses_authors.py checks it.

def _dot(x: list[float], y: list[float]) -> float:
    return sum(a * b for a, b in zip(x, y))


def authors_debiased_pos(v1: Matrix, v2: Matrix, extra: list[Matrix], t: float, tau_plus: float) -> float:
    """``DebiasedPosLossV3`` of Troeshestova & Isachenko (intsystems/2023-Project-123, ``code/loss.py``) with
    the extra views ``extra`` (``out_m``, their ``pos_grouping``). The 2B rows ``cat(v1, v2)`` (L2-normalised)
    are the anchors and the only columns: ``full[a][k] = exp(z_a·z_k / t)``, itself included, with the entry
    of its other view replaced by the mean of its positives (that view and the anchor's sample in each extra
    view); ``P = mean(full[a])`` over the 2B = N + 2 columns, ``g`` the mean over the N = 2B - 2 other
    samples' columns, and ``-log(o1 / o2)`` as it comes (no floor, no guard), averaged over the 2B anchors."""
    rows, extras, b, tau_minus = _unit(v1) + _unit(v2), [_unit(e) for e in extra], len(v1), 1 - tau_plus
    n = 2 * b - 2
    out = []
    for a, x in enumerate(rows):
        i, other = a % b, (a + b) % (2 * b)
        full = [math.exp(_dot(x, y) / t) for y in rows]
        full[other] = _mean([full[other]] + [math.exp(_dot(x, e[i]) / t) for e in extras])
        p_est = _mean(full)
        g = _mean([full[k] for k in range(2 * b) if k % b != i])
        out.append(-math.log((p_est - tau_minus * g) / (p_est + (n * tau_plus - tau_minus) * g)))
    return _mean(out)


def authors_loss_combination(views: list[Matrix], t: float, tau_plus: float) -> float:
    """Their ``loss_combination`` (``code/main.py``, the default ``m_agg_mode``): the two-view loss of every
    pair of views ``(v, w)``, ``v < w``, each on its own 2B rows, averaged over the pairs."""
    pairs = [(v, w) for v in range(len(views)) for w in range(v + 1, len(views))]
    return _mean([authors_debiased_pos(views[v], views[w], [], t, tau_plus) for v, w in pairs])


def _authors_supervised(r: Ref, log_den: Callable[[float, float, list[float], list[float]], float]) -> float:
    """The frame of Barbano et al.'s ``EpsilonSupInfoNCE`` / ``EpsilonSupCon.forward_out``
    (EIDOSLAB/unbiased-contrastive-learning, ``src/losses.py``): each row shifted by its maximum ``m_a`` (the
    anchor's similarity with itself included), per positive ``log_den(p - m_a, m_a, shifted positives,
    shifted negatives) - (p - m_a)``, their mean over the anchor's positives (0 for an anchor without one), and
    the mean over all anchors. Their ``temperature / base_temperature`` factor is left out (the vision domain
    applies it: ``objective=authors``)."""
    out = []
    for a in range(r.n_anchors):
        m = max(r.logits[a])
        pos, neg = [p - m for p in r.positives(a)], [x - m for x in r.negatives(a)]
        out.append(_mean([log_den(p, m, pos, neg) - p for p in pos]) if pos else 0.0)
    return _mean(out)


def authors_eps_supcon(r: Ref, epsilon: float = 0.0, stab: float = 1e-6) -> float:
    """``EpsilonSupCon`` (``form="out"``): ``-log(e_ap / (exp(-epsilon)·Σ_p' e_ap' + Σ_n e_an + stab))`` on the
    shifted exponentials, without the spec's ``+ epsilon``; ``stab`` is their 1e-6. With ``epsilon = 0`` it is
    their SupCon."""
    def log_den(p: float, m: float, pos: list[float], neg: list[float]) -> float:
        return math.log(math.exp(-epsilon) * sum(math.exp(x) for x in pos) + sum(math.exp(x) for x in neg) + stab)
    return _authors_supervised(r, log_den)


def authors_eps_supinfonce(r: Ref, epsilon: float = 0.0, stab: float = 1e-6) -> float:
    """``EpsilonSupInfoNCE`` (``form="out"``): ``-log(e_ap / (exp(-epsilon)·e_ap + Σ_n e_an + stab))`` on the
    shifted exponentials; ``stab`` is their 1e-6."""
    def log_den(p: float, m: float, pos: list[float], neg: list[float]) -> float:
        return math.log(math.exp(-epsilon) * math.exp(p) + sum(math.exp(x) for x in neg) + stab)
    return _authors_supervised(r, log_den)


def authors_jsd_hard(r: Ref, tau_plus: float = 0.5, beta: float = 1.0) -> float:
    """HCL's graph loss (joshr17/HCL, ``graph/losses.py``, ``local_global_loss_`` with the measure ``JSD_hard`` of
    ``graph/cortex_DIM/functions/gan_losses.py``), written as their code reads: the logits times each mask (every
    other entry a zero), ``E_pos`` the sum of ``log 2 - softplus(-p) - tau_plus/(1 - tau_plus)·(softplus(-p) + p)``
    over the whole matrix divided by the number of rows, ``E_neg`` the sum over the whole matrix of their
    negative expectation divided by the number of negatives (their ``num_nodes·(num_graphs - 1)``), and
    ``E_neg - E_pos``. Their ``max(q.max(), q.min().abs())`` is 0 only if every negative logit is 0; then every
    weight is 1 here."""
    log2, a_n = math.log(2), r.n_anchors
    p = [[x if r.pos[a][k] else 0.0 for k, x in enumerate(row)] for a, row in enumerate(r.logits)]
    q = [[x if r.neg[a][k] else 0.0 for k, x in enumerate(row)] for a, row in enumerate(r.logits)]
    n_neg = sum(sum(row) for row in r.neg)
    if n_neg == 0 or not any(any(row) for row in r.pos):
        raise ValueError("jsd_hard: needs a positive and a negative pair")
    e_pos = sum(log2 - _softplus(-x) - tau_plus / (1 - tau_plus) * (_softplus(-x) + x) for row in p for x in row) / a_n
    if beta == 0:
        e_neg = sum((_softplus(-x) + x - log2) / (1 - tau_plus) for row in q for x in row)
    else:
        e_neg = 0.0
        flat = [x for row in q for x in row]
        s = max(max(flat), abs(min(flat)))
        for row in q:
            reweight = [math.exp(beta * (-2 * x / s)) if s > 0 else 1.0 for x in row]
            mean = _mean(reweight)
            e_neg += sum(w / mean * (_softplus(-x) + x) / (1 - tau_plus) - log2 for w, x in zip(reweight, row))
    return e_neg / n_neg - e_pos


REFERENCES["jsd_hard"] = authors_jsd_hard  # not in the spec: the authors' code is its only definition


# ---------------------------------------------------------------- FairKL

def fairkl(z: Matrix, labels: list[int], bias: list[int], moments: str = "full") -> float:
    norms = [math.sqrt(sum(x * x for x in row)) for row in z]
    unit = [[x / n for x in row] for row, n in zip(z, norms)]
    groups: dict[tuple[bool, bool], list[float]] = {(sl, sb): [] for sl in (True, False) for sb in (True, False)}
    for i in range(len(z)):
        for j in range(len(z)):
            if i != j:
                s = sum(x * y for x, y in zip(unit[i], unit[j]))
                groups[(labels[i] == labels[j], bias[i] == bias[j])].append(s)

    def stats(values: list[float]) -> tuple[float, float]:
        mu = _mean(values)
        return mu, max(_mean([(v - mu) ** 2 for v in values]), 1e-6)

    total = 0.0
    for same_label in (True, False):
        aligned, conflicting = groups[(same_label, True)], groups[(same_label, False)]
        if not aligned or not conflicting:
            continue
        (mu_p, var_p), (mu_q, var_q) = stats(aligned), stats(conflicting)
        if moments == "full":
            total += 0.5 * ((var_p + (mu_p - mu_q) ** 2) / var_q - math.log(var_p / var_q) - 1)
        else:
            total += (mu_p - mu_q) ** 2
    return total


# ---------------------------------------------------------------- numerical gradients

def frozen_bounds(r: Ref) -> Ref:
    """The same Ref with the detached row min / max frozen at their current values (per row)."""
    lo = r.min_logit if r.min_logit is not None else [min(row) for row in r.logits]
    hi = r.max_logit if r.max_logit is not None else [max(row) for row in r.logits]
    return replace(r, min_logit=lo, max_logit=hi)


def numerical_grad(fn: Callable[[Ref], float], r: Ref, h: float = 1e-6) -> Matrix:
    """Central differences of ``fn`` with respect to every logit, the detached bounds held fixed."""
    base = frozen_bounds(r)
    grad = [[0.0] * len(row) for row in r.logits]
    for a, row in enumerate(r.logits):
        for k in range(len(row)):
            values = []
            for step in (h, -h):
                logits = [list(x) for x in r.logits]
                logits[a][k] += step
                values.append(fn(replace(base, logits=logits)))
            grad[a][k] = (values[0] - values[1]) / (2 * h)
    return grad


# ---------------------------------------------------------------- the constructors' layouts

def _unit(z: Matrix) -> Matrix:
    return [[x / math.sqrt(sum(y * y for y in row)) for x in row] for row in z]


def _logits(anchors: Matrix, candidates: Matrix, t: float) -> Matrix:
    return [[sum(x * y for x, y in zip(a, c)) / t for c in candidates] for a in anchors]


def ref_multiview(views: list[Matrix], t: float, normalize: bool = True) -> Ref:
    """Rows view-major (view v, sample i at v·B + i); positives: same sample, other view."""
    b = len(views[0])
    rows = [row for view in views for row in view]
    rows = _unit(rows) if normalize else rows
    n = len(rows)
    pos = [[i != j and i % b == j % b for j in range(n)] for i in range(n)]
    neg = [[i % b != j % b for j in range(n)] for i in range(n)]
    bound = 1 / t if normalize else None
    return Ref(_logits(rows, rows, t), pos, neg, -bound if normalize else None, bound)


def ref_pairwise(views: list[Matrix], t: float, normalize: bool = True) -> Ref:
    """For each pair of views (v, w), v < w, in order, the anchors cat(views[v], views[w]) against the V·B rows
    (view-major): positive the anchor's sample in the pair's other view, negatives the other samples in views
    v and w; the other views are in neither mask."""
    b = len(views[0])
    rows = [row for view in views for row in view]
    rows = _unit(rows) if normalize else rows
    anchors, pos, neg = [], [], []
    for v in range(len(views)):
        for w in range(v + 1, len(views)):
            for view, other in ((v, w), (w, v)):
                for i in range(b):
                    anchors.append(rows[view * b + i])
                    pos.append([k == other * b + i for k in range(len(rows))])
                    neg.append([k // b in (v, w) and k % b != i for k in range(len(rows))])
    bound = 1 / t if normalize else None
    return Ref(_logits(anchors, rows, t), pos, neg, -bound if normalize else None, bound)


def ref_extra_positives(v1: Matrix, v2: Matrix, extra: list[Matrix], t: float) -> Ref:
    """The layout of the authors' ``pos_grouping`` (:func:`authors_debiased_pos`): anchors cat(v1, v2) against
    cat(v1, v2, *extra) (normalised); positives the anchor's sample in the other of v1, v2 and in every extra
    view; negatives the other samples in v1 and v2; the other samples' extra views in neither mask."""
    b, n_views = len(v1), 2 + len(extra)
    rows = _unit([row for view in [v1, v2, *extra] for row in view])
    pos = [[k != a and k % b == a % b for k in range(n_views * b)] for a in range(2 * b)]
    neg = [[k < 2 * b and k % b != a % b for k in range(n_views * b)] for a in range(2 * b)]
    return Ref(_logits(rows[:2 * b], rows, t), pos, neg, -1 / t, 1 / t)


def ref_bank(query: Matrix, key: Matrix, bank: Matrix, t: float, normalize: bool = True) -> Ref:
    """Candidates of query i: [key_i] + bank; column 0 positive, the bank negatives."""
    if normalize:
        query, key, bank = _unit(query), _unit(key), _unit(bank)
    logits = [[sum(x * y for x, y in zip(q, k)) / t] + _logits([q], bank, t)[0] for q, k in zip(query, key)]
    width = 1 + len(bank)
    pos = [[j == 0 for j in range(width)] for _ in query]
    neg = [[j > 0 for j in range(width)] for _ in query]
    bound = 1 / t if normalize else None
    return Ref(logits, pos, neg, -bound if normalize else None, bound)


def ref_label(z: Matrix, labels: list[int], t: float, normalize: bool = True) -> Ref:
    rows = _unit(z) if normalize else z
    n = len(rows)
    pos = [[i != j and labels[i] == labels[j] for j in range(n)] for i in range(n)]
    neg = [[labels[i] != labels[j] for j in range(n)] for i in range(n)]
    bound = 1 / t if normalize else None
    return Ref(_logits(rows, rows, t), pos, neg, -bound if normalize else None, bound, list(labels), list(labels))


def ref_membership(anchors: Matrix, candidates: Matrix, member_of: list[int], t: float,
                   members: str = "candidates", normalize: bool = True) -> Ref:
    if normalize:
        anchors, candidates = _unit(anchors), _unit(candidates)
    if members == "candidates":
        pos = [[member_of[k] == a for k in range(len(candidates))] for a in range(len(anchors))]
    else:
        pos = [[member_of[a] == k for k in range(len(candidates))] for a in range(len(anchors))]
    neg = [[not p for p in row] for row in pos]
    bound = 1 / t if normalize else None
    return Ref(_logits(anchors, candidates, t), pos, neg, -bound if normalize else None, bound)
