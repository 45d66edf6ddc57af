"""The graph domain's configuration: defaults are the quick CPU setting; the paper preset follows
InfoGraph (Sun et al., ICLR 2020) and its public code (batch 128, 20 epochs, Adam lr 1e-3, GIN with
hidden size 32 and 3 layers, the setting of HCL's and PUCL's graph experiments)."""

from __future__ import annotations

from dataclasses import dataclass, field

from domains.base import RUNTIME, UserError

ANCHORS = ("node", "graph")
FEATURELESS = ("degree", "constant")
C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3)


@dataclass
class GraphConfig:
    # Pretraining
    epochs: int = 5
    batch_size: int = 128
    lr: float = 1e-3
    hidden: int = 32
    layers: int = 3
    # "node": each node contrasts its own graph against the other graphs of the batch (M=1);
    # "graph": each graph contrasts its own nodes against the other graphs' nodes.
    anchor: str = "node"
    # Cosine temperature of every loss but jsd; jsd scores raw dot products (InfoGraph) and ignores it.
    temperature: float = 0.5
    # Node features of sets without any: "degree" = one-hot degree when the largest degree is below
    # degree_onehot_limit, else the standardised degree (the rule of HCL's/GraphCL's InfoGraph code);
    # "constant" = a single feature 1 (InfoGraph's own code).
    featureless: str = "degree"
    degree_onehot_limit: int = 1000
    # Evaluation: SVC (RBF) with C from C_GRID chosen by an inner stratified CV on each training fold
    # of an outer stratified CV. InfoGraph's evaluate_embedding does not rescale the embeddings.
    svm_folds: int = 10
    svm_inner_folds: int = 5
    standardize: bool = False
    svm_jobs: int = field(default=1, metadata={RUNTIME: True})  # parallel SVM fits: speed only
    # Try PyG's download when a TU set is not under <data root>/TU/<NAME>/raw/.
    download: bool = field(default=True, metadata={RUNTIME: True})  # where the files come from, not what they are
    # synthetic-motifs only: the number of classes C (motifs), a known class prior 1/C; 2 is the house/bowtie set
    # (domains/graph/synthetic.py says how C > 2 is built).
    synthetic_classes: int = 2

    def check(self) -> None:
        """Raise UserError for a value that cannot run."""
        positive = {"epochs": self.epochs + 1, "batch_size": self.batch_size - 1, "lr": self.lr,
                    "hidden": self.hidden, "layers": self.layers, "temperature": self.temperature,
                    "degree_onehot_limit": self.degree_onehot_limit, "svm_jobs": self.svm_jobs}
        bad = [k for k, v in positive.items() if not v > 0]
        if bad:
            raise UserError(f"graph config: {', '.join(bad)} out of range (epochs >= 0, batch_size >= 2, "
                            "the others > 0)")
        if self.anchor not in ANCHORS:
            raise UserError(f"graph config: anchor must be one of {', '.join(ANCHORS)}, got {self.anchor!r}")
        if self.featureless not in FEATURELESS:
            raise UserError(f"graph config: featureless must be one of {', '.join(FEATURELESS)}, "
                            f"got {self.featureless!r}")
        if self.svm_folds < 2 or self.svm_inner_folds < 2:
            raise UserError("graph config: svm_folds and svm_inner_folds must be >= 2")
        if self.synthetic_classes < 2:
            raise UserError(f"graph config: synthetic_classes must be >= 2, got {self.synthetic_classes}")
