"""The text domain's configuration: one dataclass whose defaults are the quick CPU setting.

Paper values (Logeswaran & Lee 2018, quick-thought; the DCL paper's sentence experiment): vocabulary 50k,
word embeddings 620, GRU 1200, batch 400 contiguous sentences, max length 30, Adam lr 5e-4, clipping 5.0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from domains.base import RUNTIME

TASKS = ("MR", "CR", "SUBJ", "MPQA", "TREC", "MRPC")


@dataclass
class TextConfig:
    # --- corpus ---
    books: tuple[str, ...] = ()  # book file names without .txt under <data root>/books; empty: every book
    max_sentences: int = 20000  # training sentences kept (a contiguous prefix of each document); 0: all
    hf_dataset: str = ""  # dataset "hf-text": a Hugging Face dataset name or local path
    hf_split: str = "train"
    hf_text_field: str = "text"
    hf_doc_field: str = ""  # consecutive rows with the same value form a document; "": one document
    hf_split_sentences: bool = False  # rows hold paragraphs: split them into sentences
    synthetic_topics: int = 4  # the number of classes C: a known class prior 1/C (balanced topics)
    # 0: max(160, 8 per topic) rounded up to a multiple of synthetic_topics (160 for C <= 20, 400 for C = 50), so
    # that every topic has as many documents and enough of them (domains.text.corpus.synthetic_documents)
    synthetic_documents: int = 0
    synthetic_sentences_per_doc: int = 25
    synthetic_topic_word_prob: float = 0.4  # chance that a content word comes from the document's topic
    synthetic_eval_sentences: int = 2000
    synthetic_seed: int = 1234  # the synthetic corpus is fixed; the run seed does not change it
    # --- tokenizer ---
    vocab_size: int = 20000
    min_frequency: int = 1
    max_len: int = 30
    lowercase: bool = True
    # --- GRU encoders f and g (method quickthought) ---
    word_dim: int = 128
    hidden_dim: int = 256  # the output size of each encoder; bidirectional: hidden_dim // 2 per direction
    bidirectional: bool = False
    word_vectors: str = ""  # a word2vec / GloVe text file: initialises the GRU word embeddings (and the bow baseline)
    # --- BERT-style encoders f and g (method quickthought-bert), trained from scratch ---
    bert_layers: int = 2
    bert_heads: int = 4
    bert_hidden: int = 128
    bert_intermediate: int = 512
    bert_pooling: Literal["mean", "cls"] = "mean"
    # --- quick-thought objective ---
    similarity: Literal["dot", "cosine"] = "dot"  # dot: raw f(s)·g(s') as quick-thought; cosine: normalised
    temperature: float = 1.0  # logits are similarity / temperature
    context: int = 1  # positives: the sentences within this distance in the same document (M = 2·context)
    # --- training ---
    batch_size: int = 100  # paper: 400; smaller batches give a CPU run more updates
    lr: float = 2e-3  # paper: 5e-4
    grad_clip: float = 5.0
    epochs: int = 3
    max_steps: int = 0  # stop after this many optimiser steps; 0: run every epoch
    amp: bool = False  # bf16 autocast for the encoders on CUDA (ignored on the CPU)
    # Runtime fields (recorded, not hashed): how often the loss is read and logged (the curve's granularity; the
    # training does not depend on it) and checkpointed (a resumed run continues exactly).
    log_every: int = field(default=10, metadata={RUNTIME: True})
    checkpoint_every: int = field(default=200, metadata={RUNTIME: True})
    # --- evaluation ---
    senteval_tasks: tuple[str, ...] = TASKS
    kfold: int = 10
    senteval_max_samples: int = 0  # subsample each task (train and test) to this size, for smoke tests; 0: all
    eval_seed: int = 1111  # SentEval's seed: the folds do not change with the run seed
    # torch: SentEval's PyTorch logistic regression (Adam, L2 grid 1e-5..1e-2, early stopping), every model of a
    # task batched, on the run's device; sklearn: scikit-learn's LogisticRegression (C grid), on the CPU
    classifier: Literal["torch", "sklearn"] = "torch"
    probe_batch_size: int = 64  # SentEval's batch
    probe_epoch_size: int = 4  # passes over the training set between two early-stopping checks
    probe_tenacity: int = 5  # epochs without a better dev accuracy tolerated (SentEval's count, never reset)
    probe_max_epoch: int = 200  # at most this many passes
    probe_standardize: bool = True  # z-score each feature first (SentEval does not; see torch_probe.standardized)
    eval_solver: Literal["auto", "liblinear", "lbfgs"] = "auto"  # auto: liblinear on sparse, lbfgs on dense
    eval_max_iter: int = 1000
    eval_jobs: int = field(default=1, metadata={RUNTIME: True})  # parallel scikit-learn fits: speed only
    # sentences encoded at once (each independently of the others): memory and speed only
    eval_batch_size: int = field(default=256, metadata={RUNTIME: True})
    use_senteval_package: bool = False  # run the original `senteval` package when importable
    hf_model_dir: str = ""  # method hf: a local Hugging Face model directory

    def __post_init__(self) -> None:
        positive = ("max_len", "vocab_size", "word_dim", "hidden_dim", "batch_size", "epochs", "context",
                    "log_every", "checkpoint_every", "synthetic_topics",
                    "synthetic_sentences_per_doc", "synthetic_eval_sentences", "bert_layers", "bert_heads",
                    "bert_hidden", "bert_intermediate", "eval_batch_size", "eval_max_iter", "eval_jobs",
                    "min_frequency", "probe_batch_size", "probe_epoch_size", "probe_max_epoch")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.classifier not in ("torch", "sklearn"):
            raise ValueError(f"classifier must be 'torch' or 'sklearn', got {self.classifier!r}")
        for name in ("max_sentences", "max_steps", "senteval_max_samples", "probe_tenacity"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: no limit), got {getattr(self, name)}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not self.lr > 0 or not self.grad_clip > 0:
            raise ValueError("lr and grad_clip must be > 0")
        if not 0 < self.synthetic_topic_word_prob <= 1:
            raise ValueError(f"synthetic_topic_word_prob must lie in (0, 1], got {self.synthetic_topic_word_prob}")
        if self.synthetic_topics < 2:
            raise ValueError("synthetic_topics must be >= 2 (it is the number of classes)")
        if self.synthetic_documents < 0:
            raise ValueError(f"synthetic_documents must be >= 0 (0: sized by synthetic_topics), got "
                             f"{self.synthetic_documents}")
        if self.synthetic_eval_sentences < self.kfold * self.synthetic_topics:
            raise ValueError(f"synthetic_eval_sentences must be >= kfold * synthetic_topics = "
                             f"{self.kfold * self.synthetic_topics}, so that every fold holds every topic; got "
                             f"{self.synthetic_eval_sentences}")
        if self.batch_size < 2 * self.context + 1:
            raise ValueError(f"batch_size must be >= 2*context+1 = {2 * self.context + 1}")
        if self.bidirectional and self.hidden_dim % 2:
            raise ValueError("hidden_dim must be even with bidirectional=true (hidden_dim // 2 per direction)")
        if self.bert_hidden % self.bert_heads:
            raise ValueError("bert_hidden must be a multiple of bert_heads")
        if self.kfold < 2:
            raise ValueError(f"kfold must be >= 2, got {self.kfold}")
        unknown = [t for t in self.senteval_tasks if t not in TASKS]
        if unknown or not self.senteval_tasks:
            raise ValueError(f"senteval_tasks must be a non-empty subset of {','.join(TASKS)}, got "
                             f"{','.join(self.senteval_tasks) or 'nothing'}")
        self.senteval_tasks = tuple(self.senteval_tasks)
        self.books = tuple(self.books)
