"""The vision domain's page text, its published rows and notes: read by the pages alone (Domain.published_module)."""

from __future__ import annotations

from domains.base import Reference

# How the published runs differ from ours, as far as the public code behind them shows it.
_PUCL_PROTOCOL = (
    "PUCL's vision code is not among the public code we could read, so its protocol is not checked against "
    "ours; our `paper` preset is DCL's public setting (ResNet-50, batch 256, 400 epochs, linear probe), "
    "`cifar-bench` lightly's (ResNet-18, batch 512, 200 epochs) and `paper-debiased-pos` the positive-debiased "
    "code's (ResNet-18, batch 512, 50 epochs): read the setting column.")
_LIGHTLY_PROTOCOL = (
    "lightly reports the best epoch of its kNN monitor (k 200, temperature 0.1, backbone features), one run: "
    "compare it with our knn_best_top1 (the `cifar-bench` preset), not with top1, our linear probe.")

_BARBANO_PROTOCOL = (
    "Read in the paper's OpenReview submission, the one version whose Table 3 we could read; it sends "
    "Biased-MNIST's setup to a supplement not at hand, and the authors' code holds no Table 3 configuration, so "
    "`paper-biased` states where each of its values is from (`harness list presets`). Their script prints the "
    "best epoch's test accuracy: our `online_best_top1`. Earlier versions of this page showed 90.51 and 96.19 at "
    "rho 0.999 and 0.997 as the published version's; no text read here gives them.")
_HONG_YANG_PROTOCOL = (
    "Hong & Yang's (NeurIPS 2021) cross-entropy runs, which Barbano et al. quote as reference results: other "
    "code and training than the authors' `main_ce.py`, whose model and objective our `ce` follows; our `ce` rows "
    "train on `paper-biased`'s schedule (SGD 1e-3, x0.1 at epochs 26 and 53, 80 epochs), where `main_ce.py` "
    "defaults to SGD 0.01 with cosine decay over 100 epochs.")


def _refs() -> tuple[Reference, ...]:
    pucl = "PUCL (Wang et al. 2024, arXiv 2401.08690), Table 1"
    rows = [Reference("Chuang et al. 2020 (DCL), Table 1", "imagenet100", "CMC (biased)", 73.58, method="cmc",
                      loss="infonce"),
            Reference("Chuang et al. 2020 (DCL), Table 1", "imagenet100", "CMC debiased (tau+ 0.01)", 74.6,
                      method="cmc", loss="dcl")]
    table = {  # (method, loss, label): CIFAR-10, CIFAR-100, STL-10 top-1
        ("simclr", "infonce", "SimCLR"): (90.44, 64.94, 80.50),
        ("simclr", "dcl", "SimCLR+DEB"): (90.21, 66.55, 82.17),
        ("simclr", "hcl", "SimCLR+HCL"): (90.87, 67.10, 83.33),
        ("simclr", "pucl", "SimCLR+PUCL"): (92.14, 68.14, 85.62),
        ("cmc", "infonce", "CMC"): (87.20, 58.97, 77.99),
        ("cmc", "pucl", "CMC+PUCL"): (89.25, 63.16, 81.30),
        ("moco", "infonce", "MoCo"): (85.62, 66.38, 89.13),
        ("moco", "pucl", "MoCo+PUCL"): (90.98, 71.21, 93.68),
    }
    for (method, loss, label), values in table.items():
        rows += [Reference(pucl, ds, label, v, method=method, loss=loss, protocol=_PUCL_PROTOCOL)
                 for ds, v in zip(("cifar10", "cifar100", "stl10"), values)]
    # The table of 18.02.2022 (cifar10_benchmark.py at that date), whose code our `cifar-bench` preset follows: 0.828.
    # Its later table of 27.03.2023, from a later release's code and another run, says 0.848 for the same row.
    rows.append(Reference("lightly's CIFAR-10 benchmark (table of 18.02.2022), batch 512, 200 epochs", "cifar10",
                          "SimCLR (lightly), kNN top-1", 82.8, method="simclr", loss="infonce",
                          protocol=_LIGHTLY_PROTOCOL, checked=True))
    # Table 3 of the paper's OpenReview submission (the search index's markdown copy of it), quoted where
    # tests/test_published_references.py pins these rows. The revised and published texts were not readable here.
    barbano = "Barbano et al. 2023 (OpenReview submission), Table 3"
    for rho, (eps, eps_std), (ce, ce_std) in ((0.999, (89.55, 1.43), (11.8, 0.7)), (0.997, (94.08, 0.10), (62.5, 2.9)),
                                              (0.995, (97.00, 0.06), (79.5, 0.1)), (0.99, (97.86, 0.02), (90.8, 0.3))):
        rows += [Reference(barbano, "biased-mnist", f"eps-SupInfoNCE + FairKL (rho {rho})", eps, eps_std,
                           method="biased", loss="eps_supinfonce", protocol=_BARBANO_PROTOCOL, checked=True),
                 Reference(barbano, "biased-mnist", f"CE, Hong & Yang 2021 as quoted (rho {rho})", ce, ce_std,
                           method="biased", loss="ce", protocol=_HONG_YANG_PROTOCOL, checked=True)]
    return tuple(rows)


REFERENCES: tuple[Reference, ...] = _refs()

NOTES: dict[str, str] = {"biased-mnist": (
    "Our runs follow the authors' code (`--preset paper-biased`; `harness list presets` states each difference), on"
    " an H100 in float32; the published rows are Table 3 of the paper's OpenReview submission, the version we could"
    " read. eps-SupInfoNCE + FairKL: at rho 0.999, three seeds of one code (commit a8efcaa, 2026-11-27, three runs "
    "sharing the GPU) give 85.30, 87.04 and 85.41, 85.92 ± 0.97 (published 89.55 ± 1.43, -3.6), beside seed 0 of "
    "the code before (85.36, on the history page); at rho 0.99 and 0.997 one seed each so far (each resumed once "
    "from its epoch-51/52 checkpoint): 95.53 (published 97.86 ± 0.02, -2.3) and 92.57 (published 94.08 ± 0.10, "
    "-1.5). Not reproduced within 2 points at rho 0.999 and 0.99; at 0.997 one seed lands within 2. Three seeds at "
    "rho 0.999 spread by 1.7 points, so the gap there is not one seed's chance, and their best-over-epochs figure "
    "(`online_best_top1` in the records, what their script prints) is 86.22 on average (95.66 and 92.57 at 0.99 and"
    " 0.997): nor is it which epoch is reported. At rho 0.999 supcon and ce (alpha 1, no FairKL; seed 0) learn the "
    "colour and nothing else: 9.96, every bias-aligned test image right and every conflicting one wrong, at chance "
    "in every one of the 80 epochs (issue 13 saw supcon at chance for 30 epochs at two rho). The table's cross-"
    "entropy row is Hong & Yang's (11.8 ± 0.7 at 0.999, near chance too); it has no SupCon row (SupCon is in the "
    "paper's Fig. 2, a plot). Not run yet: rho 0.995, seeds 1-2 at 0.99 and 0.997, and the baselines at rho 0.997 "
    "to 0.99 (the GPU time of three sessions ran out). The network is theirs: `SupConSimpleConvNet` "
    "(debiasing/models/simpleconvnet.py in their repository) at their script's default `--train_on_head true` (no "
    "projection head, tanh features); their other variant, a head with ReLU features, is the labelled ablation "
    "`paper-biased-head`, since the paper does not say which one its table used. Its first seed (rho 0.999, "
    "2026-11-28, an H200) collapsed: 10.38, at chance from the first epoch, with 53,245 of the 60,000 training "
    "images' features all zero at the end: as we build it, at these weights, that variant does not give the "
    "table's figures (one seed so far). "
    "Why it collapses is not established. Two facts point at FairKL, about 600 times the contrastive term's weight "
    "here, on the normalised ReLU features: it is 0, its least value, where every feature is zero (a random ReLU "
    "batch scores 0.010), and the normalisation's gradient grows as 1/|f| as a row's features shrink (an all-zero "
    "row's reaches 1e22, though its ReLU passes none of it). The plan's next run tests it: the same run without "
    "FairKL. Each epoch's curve point now counts the test images whose features are all zero (`zero_rows` in the "
    "records), so that run, and the next of this one, show when the features die. "
    "Another difference, "
    "untested: our colouring is drawn once, theirs per trial (their script seeds the generator with the trial "
    "before it builds the sets). At rho 0.999 the draw decides much: each class has 6 or 7 bias-conflicting "
    "training images (63 in all), one in each of 6 or 7 of the other nine colours, so training sees 63 of the 90 "
    "class-colour pairs of the unbiased test set (84 at rho 0.997, 80 at 0.995, 89 at 0.99; counted on our "
    "colouring). Drawn per trial, the missing pairs change from seed to seed; drawn once, all our seeds miss the "
    "same 27. The expectation over draws is the same, but our seeds' spread leaves out the draw's, and one draw may"
    " be an unlucky one. `--set colour_seed=k` (k > 0) takes another draw, of the training and the test set; the "
    "campaign plan `2-biased-colouring` measures the spread over four more draws at rho 0.999 (not run yet).")}
