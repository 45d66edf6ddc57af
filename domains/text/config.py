"""The text domain's configuration: one pydantic dataclass whose defaults are the quick CPU setting. Every range
and choice is a constraint on its field, and the rules joining fields are :meth:`TextConfig._check_combinations`,
all checked when the config is built.

Paper values (Logeswaran & Lee 2018, quick-thought; the DCL paper's sentence experiment): vocabulary 50k,
word embeddings 620, GRU 1200, batch 400 contiguous sentences, max length 30, Adam lr 5e-4, clipping 5.0.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Annotated, Literal, get_args

from pydantic import ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator
from pydantic.dataclasses import dataclass

from domains.base import ADDED, RUNTIME

Task = Literal["MR", "CR", "SUBJ", "MPQA", "TREC", "MRPC"]
TASKS: tuple[str, ...] = get_args(Task)
Objective = Literal["spec", "authors"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)
AtLeast2 = Annotated[int, Field(ge=2)]
# a seed numpy's legacy seeding takes (0..2**32 - 1): SentEval's folds need it; the synthetic corpus's uses the same
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


@dataclass(config=ConfigDict(extra="forbid"))
class TextConfig:
    # --- corpus ---
    books: tuple[str, ...] = ()  # book file names without .txt under <data root>/books; empty: every book
    max_sentences: NonNegativeInt = 20000  # training sentences kept (a contiguous prefix of each document); 0: all
    # dataset "hf-text": a path (folder or file) as given, else under the data root, else a Hugging Face hub id
    hf_dataset: str = ""
    hf_split: str = "train"  # the split read (a single file is a train split)
    hf_text_field: str = "text"  # the text column; "": "text", else the first string column
    hf_doc_field: str = ""  # consecutive rows with the same value form a document; "": one document
    hf_split_sentences: bool = False  # rows hold paragraphs: split them into sentences
    synthetic_topics: AtLeast2 = 4  # the number of classes C: a known class prior 1/C (balanced topics)
    # 0: max(160, 8 per topic) rounded up to a multiple of synthetic_topics (160 for C <= 20, 400 for C = 50), so
    # that every topic has as many documents and enough of them (domains.text.corpus.synthetic_documents)
    synthetic_documents: Annotated[int, Field(ge=0, le=100_000)] = 0
    synthetic_sentences_per_doc: PositiveInt = 25
    # the chance that a content word comes from the document's topic
    synthetic_topic_word_prob: Annotated[float, Field(gt=0.0, le=1.0)] = 0.4
    synthetic_eval_sentences: Annotated[int, Field(ge=1, le=1_000_000)] = 2000
    synthetic_seed: Seed = 1234  # the synthetic corpus is fixed; the run seed does not change it
    # --- tokenizer ---
    vocab_size: PositiveInt = 20000
    min_frequency: PositiveInt = 1
    max_len: PositiveInt = 30
    lowercase: bool = True
    # --- GRU encoders f and g (method quickthought) ---
    word_dim: PositiveInt = 128
    hidden_dim: PositiveInt = 256  # the output size of each encoder; bidirectional: hidden_dim // 2 per direction
    bidirectional: bool = False
    word_vectors: str = ""  # a word2vec / GloVe text file: initialises the GRU word embeddings (and the bow baseline)
    # --- BERT-style encoders f and g (method quickthought-bert), trained from scratch ---
    bert_layers: PositiveInt = 2
    bert_heads: PositiveInt = 4
    bert_hidden: PositiveInt = 128
    bert_intermediate: PositiveInt = 512
    bert_pooling: Literal["mean", "cls"] = "mean"
    # --- quick-thought objective ---
    similarity: Literal["dot", "cosine"] = "dot"  # dot: raw f(s)·g(s') as quick-thought; cosine: normalised
    temperature: PositiveFloat = 1.0  # logits are similarity / temperature
    context: PositiveInt = 1  # positives: the sentences within this distance in the same document (M = 2·context)
    # spec: the loss core's layout (domains.text.quickthought.qt_scores); authors: quick-thought's own, as its code
    # (lajanugen/S2V, build_loss) scores a batch: one softmax per context sentence over every sentence of the batch,
    # the anchor kept at logit 0, context across documents (domains.text.quickthought.s2v_scores)
    objective: Objective = field(default="spec", metadata={ADDED: True})
    # --- training ---
    batch_size: PositiveInt = 100  # paper: 400; smaller batches give a CPU run more updates
    lr: PositiveFloat = 2e-3  # paper: 5e-4
    grad_clip: PositiveFloat = 5.0
    epochs: PositiveInt = 3
    max_steps: NonNegativeInt = 0  # stop after this many optimiser steps; 0: run every epoch
    amp: bool = False  # bf16 autocast for the encoders on CUDA (ignored on the CPU)
    # Runtime fields (recorded, not hashed): how often the loss is read and logged (the curve's granularity; the
    # training does not depend on it) and checkpointed (a resumed run continues exactly).
    log_every: PositiveInt = field(default=10, metadata={RUNTIME: True})
    checkpoint_every: PositiveInt = field(default=200, metadata={RUNTIME: True})
    # --- evaluation ---
    senteval_tasks: Annotated[tuple[Task, ...], Field(min_length=1)] = TASKS
    kfold: AtLeast2 = 10
    # subsample each task (train and test) to this size, for smoke tests; 0: all
    senteval_max_samples: NonNegativeInt = 0
    eval_seed: Seed = 1111  # SentEval's seed: the folds do not change with the run seed
    # torch: SentEval's PyTorch logistic regression (Adam, L2 grid 1e-5..1e-2, early stopping), every model of a
    # task batched, on the run's device; sklearn: scikit-learn's LogisticRegression (C grid), on the CPU. Sparse
    # features (bag-of-words counts) and the senteval package always run scikit-learn: resolved so in the record
    classifier: Literal["torch", "sklearn"] = "torch"
    probe_batch_size: PositiveInt = 64  # SentEval's batch
    probe_epoch_size: PositiveInt = 4  # passes over the training set between two early-stopping checks
    probe_tenacity: NonNegativeInt = 5  # epochs without a better dev accuracy tolerated (SentEval's count, never reset)
    probe_max_epoch: PositiveInt = 200  # at most this many passes
    # z-score each dense feature with the mean and std of the rows each fit learns from, never a held-out row (both
    # classifiers). Off: SentEval's protocol, raw features. It was on by default, for torch only, until 2026-11-24:
    # TextDomain.recorded_config says what an older record ran
    probe_standardize: bool = False
    eval_solver: Literal["auto", "liblinear", "lbfgs"] = "auto"  # auto: liblinear on sparse, lbfgs on dense
    eval_max_iter: PositiveInt = 1000
    # parallel scikit-learn fits: speed only (bounded: joblib cannot take a number past a C int)
    eval_jobs: Annotated[int, Field(ge=1, le=1024)] = field(default=1, metadata={RUNTIME: True})
    # sentences encoded at once (each independently of the others): memory and speed only
    eval_batch_size: PositiveInt = field(default=256, metadata={RUNTIME: True})
    use_senteval_package: bool = False  # run the original `senteval` package when importable
    hf_model_dir: str = ""  # method hf: a local Hugging Face model directory

    @model_validator(mode="after")
    def _check_combinations(self) -> TextConfig:
        """The rules a single field's constraint cannot say."""
        least = self.synthetic_topics * _per_class_for_nested_folds(self.kfold)
        if self.synthetic_eval_sentences < least:
            raise ValueError(f"synthetic_eval_sentences must be >= {least} ({least // self.synthetic_topics} per topic "
                             f"at kfold={self.kfold}): the probe splits each of its kfold training folds into kfold "
                             f"folds again, and each must hold every topic; got {self.synthetic_eval_sentences}")
        if self.batch_size < 2 * self.context + 1:
            raise ValueError(f"batch_size must be >= 2*context+1 = {2 * self.context + 1}")
        if self.bidirectional and self.hidden_dim % 2:
            raise ValueError("hidden_dim must be even with bidirectional=true (hidden_dim // 2 per direction)")
        if self.probe_standardize and self.use_senteval_package:
            raise ValueError("probe_standardize=true cannot be used with use_senteval_package=true (the package "
                             "feeds its classifier raw features)")
        if self.senteval_max_samples and self.use_senteval_package:
            raise ValueError("senteval_max_samples cannot be used with use_senteval_package=true (the package reads "
                             "every sentence of its files)")
        if self.bert_hidden % self.bert_heads:
            raise ValueError("bert_hidden must be a multiple of bert_heads")
        return self


def _per_class_for_nested_folds(k: int) -> int:
    """The fewest members m of a class for which a stratified k-fold's every training part (m minus a held-out
    share of at most ceil(m / k)) still has k members, as the probe's inner k-fold on it needs (scikit-learn's
    StratifiedKFold refuses fewer; the evaluation's labels are balanced: ``domains.text.corpus.synthetic_corpus``)."""
    m = k
    while m - math.ceil(m / k) < k:
        m += 1
    return m
