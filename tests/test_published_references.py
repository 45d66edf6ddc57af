"""The published rows of the leaderboards against the sources they cite, where a source was found and read (the
text of each source is quoted beside its numbers). Rows whose source could not be read are not pinned here, and
their pages say so: "(unchecked)" after the source."""

from __future__ import annotations

import domains
from harness.pages.tables import protocol_marks, reference_row


def _rows(domain: str, source_start: str) -> dict[str, tuple[float, float | None]]:
    return {r.dataset: (r.value, r.std) for r in domains.get(domain).references if r.source.startswith(source_start)}


def test_infograph_rows_carry_the_papers_mean_and_std():
    # InfoGraph's unsupervised table as THUDM/GraphMAE's README quotes it (its InfoGraph row): IMDB-B 73.03±0.87,
    # MUTAG 89.01±1.13, REDDIT-B 82.50±1.42; a draft of DGL's InfoGraph example README ("Accuract Reported") gives
    # these and PTC-MR 61.65±1.43, and dmlc/dgl's examples/pytorch/infograph/README.md the same means
    assert _rows("graph", "InfoGraph (Sun et al.") == {
        "MUTAG": (89.01, 1.13), "PTC_MR": (61.65, 1.43), "REDDIT-BINARY": (82.50, 1.42), "IMDB-BINARY": (73.03, 0.87)}


def test_lightly_row_is_the_table_it_cites():
    # lightly-ai/lightly, docs/source/getting_started/benchmarks/cifar10_benchmark.py as "Updated: 18.02.2022":
    # "| SimCLR | 512 | 200 | 0.828 |"; 0.848 is the same row of its later table ("Updated: 27.03.2023")
    assert _rows("vision", "lightly's CIFAR-10 benchmark (table of 18.02.2022)") == {"cifar10": (82.8, None)}


def test_curl_rows_are_its_100k_table():
    # CURL (arXiv 2004.04136), Table 1, "100K STEP SCORES", CURL column (mean & std over 10 seeds): FINGER, SPIN
    # 767±56; CARTPOLE, SWINGUP 582±146; REACHER, EASY 538±233; CHEETAH, RUN 299±48; WALKER, WALK 403±24; BALL IN
    # CUP, CATCH 769±43 (its 500K rows are 926, 841, 929, 518, 902, 959)
    assert _rows("rl", "CURL paper") == {
        "finger-spin": (767, 56), "cartpole-swingup": (582, 146), "reacher-easy": (538, 233),
        "cheetah-run": (299, 48), "walker-walk": (403, 24), "ball_in_cup-catch": (769, 43)}


def test_biased_mnist_rows_are_the_table_3_that_was_read():
    # Barbano et al., "Unbiased Supervised Contrastive Learning", OpenReview submission ("Paper under double-blind
    # review"), Table 3 "Top-1 accuracy (%) on Biased-MNIST. Reference results from Hong & Yang (2021).", columns
    # 0.999 0.997 0.995 0.99: "ε-SupInfoNCE + FairKL 89.55±1.43 94.08±0.10 97.00±0.06 97.86±0.02" and
    # "CE Hong & Yang (2021) 11.8±0.7 62.5±2.9 79.5±0.1 90.8±0.3"; the table has no SupCon row
    rows = {(r.loss, r.label.rpartition("(rho ")[2].rstrip(")")): (r.value, r.std)
            for r in domains.get("vision").references if r.dataset == "biased-mnist"}
    assert rows == {
        ("eps_supinfonce", "0.999"): (89.55, 1.43), ("eps_supinfonce", "0.997"): (94.08, 0.10),
        ("eps_supinfonce", "0.995"): (97.00, 0.06), ("eps_supinfonce", "0.99"): (97.86, 0.02),
        ("ce", "0.999"): (11.8, 0.7), ("ce", "0.997"): (62.5, 2.9), ("ce", "0.995"): (79.5, 0.1),
        ("ce", "0.99"): (90.8, 0.3)}


# The sources whose numbers were read (each pinned by a test above, quoting what was read), by domain.
PINNED = {"graph": ("InfoGraph (Sun et al.",), "rl": ("CURL paper",),
          "vision": ("lightly's CIFAR-10 benchmark (table of 18.02.2022)",
                     "Barbano et al. 2023 (OpenReview submission)")}


def test_the_rows_marked_checked_are_the_pinned_ones_and_the_page_says_unchecked_of_the_rest():
    for name in ("graph", "vision", "text", "rl"):
        for ref in domains.get(name).references:
            assert ref.checked == ref.source.startswith(PINNED.get(name, ())), (name, ref.source)
    unchecked = next(r for r in domains.get("graph").references if not r.checked)
    cells = reference_row(unchecked, protocol_marks([unchecked]), 6)
    assert cells[3] == f"{unchecked.source} (unchecked)"
    checked = next(r for r in domains.get("graph").references if r.checked)
    assert reference_row(checked, protocol_marks([checked]), 6)[3] == checked.source
