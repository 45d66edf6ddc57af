"""The graph domain's page text, its published rows and notes: read by the pages alone (Domain.published_module)."""

from __future__ import annotations

from domains.base import Reference

_INFOGRAPH = "InfoGraph (Sun et al., ICLR 2020), Table 2"
# How the published runs differ from our `paper` preset (GIN 3x32, Adam lr 1e-3, batch 128, 20 epochs, the SVM
# scored once, after the last epoch), from the public code behind them.
_INFOGRAPH_PROTOCOL = (
    "InfoGraph's public code (sunfanyunn/InfoGraph, unsupervised/go.sh and main.py) runs each set at GIN 3, 5, 8 "
    "and 16 layers and lr 1e-2 and 1e-3, 5 runs each, and scores the 10-fold SVM after every one of its 20 "
    "epochs: a figure taken from such a sweep is optimistic against our one fixed setting, scored once. Its "
    "SVM is `SVC()`, whose RBF width was 1 / n_features before scikit-learn 0.22 (December 2019) and is "
    "1 / (n_features Var(X)) in ours (`--set svm_gamma=auto` runs the older one). On sets without node features "
    "(IMDB-BINARY, REDDIT-BINARY) its code gives every node the constant feature 1, where ours give HCL's rule "
    "(one-hot degree, the standardised degree past 1,000; `--set featureless=constant` runs InfoGraph's, the rows "
    "so marked). It draws its batches once (the set shuffled once, then a DataLoader without shuffling); ours are "
    "drawn again every epoch.")
_PUCL = "PUCL (Wang et al. 2024, arXiv 2401.08690), Table 2"
_PUCL_PROTOCOL = (
    "PUCL's graph code is not among the public code we could read; the public code of HCL's graph experiments "
    "(joshr17/HCL, graph/deepinfomax.py and launch.sh), the baseline PUCL compares with, trains the same GIN 3x32 "
    "at lr 1e-3 and batch 128 but for 200 epochs (ours: InfoGraph's 20), scoring the SVM after epoch 200, "
    "10 repeats. Its SVM is `SVC()` under an unpinned scikit-learn, so its RBF width (1 / n_features before "
    "0.22, 1 / (n_features Var(X)) since, and in ours) is not known.")
_PUCL_DATASETS = ("PTC_MR", "ENZYMES", "DD", "REDDIT-BINARY")


def _pucl_rows(label: str, loss: str, values: tuple[float, ...]) -> tuple[Reference, ...]:
    return tuple(Reference(_PUCL, ds, label, v, method="infograph", loss=loss, protocol=_PUCL_PROTOCOL)
                 for ds, v in zip(_PUCL_DATASETS, values))


# Written from the records of the paper-hcl rows (issue 31's "protocol stated"); rerun, reread, rewrite.
NOTES: dict[str, str] = {
    "IMDB-BINARY": (
        "The node features, tested: with InfoGraph's own (`featureless=constant`, every node the feature 1; 10 "
        "seeds), jsd reaches 69.06 ± 2.88, 3.7 points below our rows' degree features (72.73 ± 1.07, records of "
        "other code) and 4.0 below the published 73.03, with a seed as low as 61.7. So it is not the features that "
        "keep our rows within a point of the published figure, which InfoGraph's code reached with constant ones; "
        "its selection over layers, learning rates and epochs (§1) is not tested here."),
    "ENZYMES": (
        "At HCL's 200 epochs (`paper-hcl`, 10 seeds), jsd reaches 51.50 ± 2.17, 1.2 points above the "
        "published InfoGraph 50.33, and dcl, hcl and pucl reach 56.0 to 56.6, each 4.4 to 5.1 points above jsd "
        "(paired t, p < 0.05) and within 0.6 of each other. PUCL's published +PUCL figure (56.21) is matched "
        "(55.95 ± 1.56); its +DEB (51.21) and +HCL (51.35) are not matched by our dcl and hcl, the loss core's "
        "InfoNCE-form losses on cosine / temperature scores. They are matched by HCL's own graph objective, "
        "`jsd_hard`: the JSD form of joshr17/HCL's graph code, run as that code runs it (tau+ 0.5 and its beta "
        "grid 0, 1, 2, 10; it departs from the HCL paper where that code does, see the README). It reaches "
        "50.28, 50.50, 50.48 and 49.92 in that order, each 1.0 to 1.6 points below jsd (not significant) and "
        "within 1.5 of PUCL's +DEB and +HCL. So tested, our explanation: PUCL's +DEB and +HCL rows are of that "
        "form, which does not move InfoGraph on ENZYMES, and against the InfoNCE forms PUCL's lead is gone. "
        "PUCL's code is not public: which form it ran is inferred from these numbers, not read."),
    "REDDIT-BINARY": (
        "In every one of the 210 outer folds of these runs (the records' `chosen_C`), the inner search chose "
        "C = 1e3, the top of InfoGraph's grid: on these unstandardised embeddings the SVM is held by the grid. "
        "Tested on jsd at commit 65723f6 (3 seeds; history.md keeps that code's row), each seed's embeddings "
        "scored with both grids (one code, the same training): "
        "InfoGraph's grid gives 85.20 (85.15, 85.45, 85.00; again 1e3 in all 30 folds), the grid extended to "
        "1e6 (`--set svm_c_top=6`, the row with `svm_c_top=6`) gives 89.97 (89.30, 90.00, 90.60), +4.8 points "
        "(+4.15, +4.55, +5.60: every seed), and chose 1e6, its new top, in 29 of 30 folds: the figure is still "
        "held by the grid, at every top tried. The SVM's search took 8 to 10 times as long (202 to 297 s a "
        "seed against 26 to 28). So every REDDIT-BINARY figure here, and the published ones that use "
        "InfoGraph's grid, understate what these embeddings separate. We keep InfoGraph's grid and raw "
        "embeddings as the protocol, since its paper and PUCL's rows use them; `--set standardize=true` is the "
        "other option (not tested here). Elsewhere the top of the grid is chosen in 0 to 30% of folds (DD 0%, "
        "PROTEINS 2%, ENZYMES 30%, in the rows shown). The node features, tested as on IMDB-BINARY: with "
        "InfoGraph's own (`featureless=constant`, 10 seeds), jsd reaches 82.61 ± 2.77, against 82.35 ± 4.56 with "
        "our degree features (3 seeds, records of other code) and the published 82.50: no difference these seeds "
        "can show (the search chose C = 1e3, the grid's top, in all 100 of its folds)."),
    "PTC_MR": (
        "At HCL's 200 epochs (`paper-hcl`, 10 seeds), dcl (57.43) and hcl (58.24) gain over jsd (55.19; +2.2 "
        "and +3.1, p < 0.05) and pucl with alpha 0.1 less (56.72, +1.5, not significant). PUCL's published "
        "order (+PUCL 58.90 above +HCL 56.20 and +DEB 55.74) is not reproduced at either budget: at 200 "
        "epochs hcl leads, at 20 epochs pucl leads only with alpha 0.5 (58.37). jsd at 200 epochs is 1.4 "
        "points below the published InfoGraph 56.63. HCL's own graph objective (`jsd_hard`, tau+ 0.5, beta 0, "
        "1, 2, 10; see ENZYMES) reaches 55.91, 55.78, 55.42 and 54.72, not significantly apart from jsd and "
        "within 1.5 of PUCL's +DEB (55.74) and +HCL (56.20), closer than our dcl and hcl are; here the gaps "
        "are small against the seeds' spread (sd 2.1 to 2.6), so PTC_MR alone would not tell the forms apart."),
}

REFERENCES: tuple[Reference, ...] = (
    *(Reference(_INFOGRAPH, ds, "InfoGraph (paper)", v, std, method="infograph", loss="jsd",
                protocol=_INFOGRAPH_PROTOCOL, checked=True)
      for ds, v, std in (("MUTAG", 89.01, 1.13), ("PTC_MR", 61.65, 1.43), ("REDDIT-BINARY", 82.50, 1.42),
                         ("IMDB-BINARY", 73.03, 0.87))),
    *_pucl_rows("InfoGraph", "jsd", (56.63, 50.33, 73.16, 82.99)),
    *_pucl_rows("InfoGraph+DEB", "dcl", (55.74, 51.21, 70.58, 84.89)),
    *_pucl_rows("InfoGraph+HCL", "hcl", (56.20, 51.35, 71.61, 85.07)),
    *_pucl_rows("InfoGraph+PUCL (alpha 0.1)", "pucl", (58.90, 56.21, 77.62, 87.08)),
)
