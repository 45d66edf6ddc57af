"""The text domain: quick-thought sentence embeddings (Logeswaran & Lee 2018) trained with any unsupervised loss
of the core, evaluated with SentEval's protocol (Conneau & Kiela 2018), as in the sentence experiment of the
DCL paper (Chuang et al. 2020, Table 2).

Methods: ``quickthought`` (GRU encoders f, g), ``quickthought-bert`` (BERT-style encoders from a config, trained
from scratch), and two evaluation-only methods that ignore the loss (the record says so in ``info``):
``bow`` (bag-of-words baseline) and ``hf`` (a local Hugging Face model directory). Modules: ``config``,
``corpus``, ``files`` (the checks of a plain-text file every reader makes), ``tokenize``, ``models``,
``quickthought`` (scores and training), ``senteval_tasks`` (SentEval's readers), ``senteval`` (protocol, bag of
words), ``torch_probe`` (SentEval's PyTorch logistic regression, batched, on any device), ``evaluate``, ``bench``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from domains import register
from domains.base import (
    BenchPart,
    DatasetSpec,
    Domain,
    EvalResult,
    KeptModel,
    Prepared,
    Preset,
    PretrainResult,
    RunSpec,
    Supplies,
    counted,
    label_prior,
)
from domains.context import RunContext
from domains.errors import UserError
from domains.files import hash_files
from domains.text.config import TASKS, TextConfig
from domains.text.corpus import (
    Corpus,
    book_paths,
    load_corpus,
    sentence_labels,
    synthetic_fingerprint,
    synthetic_sentences,
)
from domains.text.hf_text import Source, file_hashes, resolve
from domains.text.senteval import checked_tasks, classifiers_ran, senteval_engine
from domains.text.senteval_tasks import Task

TRAINED = ("quickthought", "quickthought-bert")
# What the class prior (``details["label_prior"]``) of a trained run counts: the pretraining sentences' classes. The
# SentEval tasks are not the pretraining data, so on books the class of a sentence is the book it comes from.
_LABELS_OF_SENTENCES = {"synthetic-topics": "the topic of each training sentence",
                        "books": "the book each training sentence comes from"}
_CLASSIFIER_LABELS = {"torch": "torch", "sklearn": "scikit-learn"}


@dataclass(frozen=True)
class TextData:
    """What ``prepare`` hands every seed of a run: the pretraining corpus (None for bow and hf, which train nothing)
    and the SentEval tasks, read and checked once for all the seeds (None on synthetic-topics, whose task is
    generated, and for the senteval package, which reads its files itself). Kept through the training: the six
    tasks take about 8 MB, where reading them again took about a second a run."""

    corpus: Corpus | None
    tasks: list[Task] | None


@register
class TextDomain(Domain):
    name = "text"
    description = ("Quick-thought sentence embeddings with any unsupervised loss; SentEval's protocol "
                   "(MR, CR, SUBJ, MPQA, TREC, MRPC; raw features), its logistic regression in torch on the run's "
                   "device")
    config_class = TextConfig
    methods = {
        "quickthought": "quick-thought: GRU encoders f and g over word embeddings; embedding [f(s), g(s)]",
        "quickthought-bert": "quick-thought with two small BERT-style encoders built from a config, trained "
                             "from scratch",
        "bow": "bag-of-words baseline: no training, evaluation only (the loss is ignored)",
        "hf": "evaluate a local Hugging Face model directory (--set hf_model_dir=DIR): no training, the loss is "
              "ignored",
    }
    default_method = "quickthought"
    loss_free_methods = frozenset({"bow", "hf"})
    # quick-thought's own objective (objective=authors, S2V's) and the spec's layout are two objectives around a
    # loss: the pages show them in one setting, as the loss's hyper-parameters (a dcl row's Δ is against the
    # infonce row of its own objective)
    method_objective_keys = {method: frozenset({"objective"}) for method in TRAINED}
    datasets = {
        "synthetic-topics": DatasetSpec("synthetic-topics", "embedded: documents that each follow one latent topic, "
                                        "sentences from a small grammar; evaluated on a topic task with a known "
                                        "prior", needs_download=False),
        "books": DatasetSpec("books", "plain-text books under <data root>/books (one document per file); "
                             "evaluated on the SentEval tasks under <data root>/senteval", needs_download=False),
        "hf-text": DatasetSpec("hf-text", "a Hugging Face text dataset, or a folder or file of your own, through "
                               "`datasets` (--set hf_dataset=HUB_ID_OR_PATH; a relative path is looked for under "
                               "<data root> too); evaluated on SentEval under <data root>/senteval"),
    }
    default_dataset = "synthetic-topics"
    supplies = Supplies()  # quick-thought: neighbouring sentences as views, cosine / temperature; no labels
    presets = {
        "quick": Preset("small GRUs (word 128, hidden 256), batch 100, lr 2e-3, 3 epochs over at most 20k "
                       "sentences: on the embedded synthetic-topics about 15 s a seed on one CPU core, under a "
                       "minute for the 3 seeds; on books (20k sentences, 6 SentEval tasks) about 6 minutes a seed"),
        "paper": Preset("quick-thought's sizes (Logeswaran & Lee 2018) on every book, for a GPU: vocabulary up to "
                        "50k, word 620, GRU 1200, batch 400, max length 30, Adam 5e-4, clip 5.0, bf16 autocast. "
                        "Differs from the paper: the corpus is the 15 Gutenberg books under <data root>/books (about "
                        "69k sentences, a vocabulary below 50k) instead of BookCorpus (74M sentences), so one pass "
                        "is 173 steps instead of ~185k; it runs 100 epochs (17k steps, ~1/10 of the paper's "
                        "updates) and still sees every sentence 100 times, where the paper saw each once. "
                        "Estimated 5-10 min of training on an H100 (1.4M tokens an epoch, ~80 MFLOP a token "
                        "for both GRUs forward and backward, latency-bound recurrence); the run logs its own "
                        "estimate after its first steps",
                        {"vocab_size": 50000, "word_dim": 620, "hidden_dim": 1200, "batch_size": 400, "max_len": 30,
                         "lr": 5e-4, "grad_clip": 5.0, "max_sentences": 0, "epochs": 100, "amp": True,
                         "log_every": 50, "checkpoint_every": 2000, "eval_batch_size": 1024}),
        "regression": Preset("the regression suite's setting (harness/suites/regression.txt): quick's on "
                             "synthetic-topics (4 topics), 5 seeds; about 18 s of CPU a seed on one core. dcl "
                             "measured 83.4 +- 2.7 (5 seeds), so 5 seeds against 5 detect a drop of about 3 points",
                             {}, tuple(range(5))),
    }
    primary_metric = "accuracy"
    higher_is_better = True
    baseline_loss = "infonce"
    # Its published rows and notes: page text, kept out of the run's code (Domain.published_module).
    published_module = "domains.text.published"
    leaderboard_metrics = ("MR", "CR", "SUBJ", "MPQA", "TREC", "MRPC", "MRPC_f1", "bayes_accuracy")

    def recorded_config(self, config: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
        """What a record written before its protocol said whether it standardised (no ``details["standardized"]``)
        ran. ``classifier`` and ``probe_standardize`` came with the torch classifier (commit 9a2f4cc): a record
        without them ran scikit-learn on raw features. Until the default changed to SentEval's raw features
        (2026-11-24), ``probe_standardize`` (then on by default) z-scored the torch classifier's features only, with
        statistics of every row of a cross-validated task (of the training set for TREC and MRPC); scikit-learn
        never standardised. So such a record ran z-scored features where, and only where, a torch classifier ran
        with the field on. Those records join today's z-scored runs, whose statistics come from each fit's
        training rows only: the same option, relabelled, not the same statistics."""
        if "standardized" in details:
            return config
        ran = classifiers_ran(details)  # bag-of-words counts ran scikit-learn whatever ``classifier`` said
        classifier = next(iter(ran)) if len(ran) == 1 else config.get("classifier", "torch")
        return {**config, "classifier": classifier,
                "probe_standardize": bool(config.get("probe_standardize", False)) and "torch" in ran}

    def setting_note(self, config: dict[str, Any], method: str, dataset: str) -> str:
        """The budget and model of a trained method, with its training sentences (the synthetic corpus's count, which
        its config gives; on the user's own files the cap, "at most"), and the evaluation protocol: the classifier
        that ran, on raw features (SentEval's protocol) or z-scored ones."""
        parts = []
        if method in TRAINED:
            steps = f" (at most {config['max_steps']} steps)" if config.get("max_steps") else ""
            if dataset == "synthetic-topics":  # its size follows from the config (synthetic_documents resolved)
                sentences = _sentences(synthetic_sentences(config["synthetic_documents"],
                                                           config["synthetic_sentences_per_doc"],
                                                           config["max_sentences"]))
            elif config.get("max_sentences"):
                # books and hf-text read the user's files, of any size: the cap is no count (a record's
                # info.train_sentences is, which this note does not see)
                sentences = f"at most {_sentences(config['max_sentences'])}"
            else:
                sentences = "all sentences"
            model = (f"BERT {config['bert_layers']}x{config['bert_hidden']}" if method == "quickthought-bert"
                     else f"GRU word {config['word_dim']}, hidden {config['hidden_dim']}")
            parts.append(f"{counted(config['epochs'], 'epoch')}{steps}, {sentences}, batch {config['batch_size']}, "
                         f"{model}")
        if config.get("classifier") in _CLASSIFIER_LABELS:
            features = "z-scored features" if config.get("probe_standardize") else "SentEval's protocol"
            parts.append(f"{features} ({_CLASSIFIER_LABELS[config['classifier']]})")
        return ", ".join(parts)

    def resolve_config(self, config: TextConfig, method: str, dataset: str) -> TextConfig:
        """The synthetic corpus's document count, and the classifier that runs: scikit-learn for sparse features
        (the bag of words without word vectors) and for the senteval package, whatever ``classifier`` says."""
        from domains.text.corpus import synthetic_documents

        sparse = method == "bow" and not config.word_vectors
        classifier = "sklearn" if sparse or config.use_senteval_package else config.classifier
        return replace(config, synthetic_documents=synthetic_documents(config), classifier=classifier)

    def unused_fields(self, config: TextConfig, method: str, dataset: str, loss: str) -> dict[str, str]:
        unused: dict[str, str] = {}

        def ignore(keys: str, reason: str) -> None:
            unused.update(dict.fromkeys(keys.split(), reason))

        if method not in TRAINED:
            ignore("books hf_text_field hf_doc_field hf_split_sentences max_sentences vocab_size min_frequency "
                   "max_len similarity temperature context objective batch_size lr grad_clip epochs max_steps amp",
                   f"method {method} trains nothing (its evaluation reads no pretraining corpus)")
            if dataset == "synthetic-topics":  # the evaluation's sentences are generated apart from the documents
                ignore("synthetic_documents synthetic_sentences_per_doc", f"method {method} trains nothing")
        if method == "hf":
            ignore("lowercase", "method hf tokenizes as its model does")
        if method != "quickthought":
            ignore("word_dim hidden_dim bidirectional", f"method {method} has no GRU (quickthought only)")
        if method != "quickthought-bert":
            ignore("bert_layers bert_heads bert_intermediate bert_hidden bert_pooling",
                   f"method {method} has no BERT encoder (quickthought-bert only)")
        if method != "hf":
            ignore("hf_model_dir", f"method {method} loads no Hugging Face model (hf only)")
        if dataset != "books":
            ignore("books", f"{dataset} is not the books corpus")
        if dataset != "hf-text":
            ignore("hf_dataset hf_split hf_text_field hf_doc_field hf_split_sentences",
                   f"{dataset} is not read from the hub (hf-text only)")
        if dataset == "synthetic-topics":
            ignore("senteval_tasks senteval_max_samples", "synthetic-topics is evaluated on its topics, not SentEval")
        else:
            ignore("synthetic_topics synthetic_documents synthetic_sentences_per_doc synthetic_topic_word_prob "
                   "synthetic_eval_sentences synthetic_seed", f"{dataset} is not the synthetic corpus")
        if config.classifier == "sklearn":  # resolved: bow's sparse counts and the senteval package are sklearn's
            ignore("probe_batch_size probe_epoch_size probe_tenacity probe_max_epoch",
                   "the probe is scikit-learn's here (classifier=torch only)")
        if config.classifier == "torch" or config.use_senteval_package:
            ignore("eval_solver eval_max_iter", "scikit-learn's probe does not run here (classifier=sklearn only)")
        return unused

    def validate(self, spec: RunSpec) -> None:
        cfg: TextConfig = spec.config
        if spec.method == "hf" and not (cfg.hf_model_dir and Path(cfg.hf_model_dir).expanduser().is_dir()):
            raise UserError(f"method hf needs --set hf_model_dir=DIR, an existing local Hugging Face model "
                            f"directory (got '{cfg.hf_model_dir}')")
        if spec.method == "quickthought-bert" and cfg.word_vectors:
            raise UserError("word_vectors initialises the GRU word embeddings: use it with method quickthought or bow")
        if spec.dataset == "hf-text" and not cfg.hf_dataset:
            raise UserError("dataset hf-text needs --set hf_dataset=NAME_OR_PATH")
        if spec.method == "bow" and not cfg.word_vectors and cfg.probe_standardize:
            raise UserError("probe_standardize=true needs dense features: method bow without word_vectors gives "
                            "sparse word counts (z-scoring would make them dense)")
        if spec.dataset == "synthetic-topics" and cfg.use_senteval_package:
            raise UserError("use_senteval_package applies to the SentEval tasks: use --dataset books or hf-text")

    def prepare(self, spec: RunSpec, ctx: RunContext) -> Prepared:
        """The run's :class:`TextData` and the fingerprint. The evaluation's SentEval tasks are read here, before
        the training, so that labels the protocol cannot score stop the run then
        (:func:`domains.text.senteval.checked_tasks`), as does a `senteval` package that does not import; the
        fingerprint hashes their files."""
        source = _hf_source(spec, ctx)  # resolved once: the corpus and the fingerprint read the same files
        tasks = None
        if spec.config.use_senteval_package:
            senteval_engine()  # a package that does not import stops the run here, not after the training
        elif spec.dataset != "synthetic-topics":
            tasks = checked_tasks(ctx.data_root, spec.config)
        corpus = load_corpus(spec.dataset, spec.config, ctx, source) if spec.method in TRAINED else None
        return Prepared(TextData(corpus, tasks), self._fingerprint(spec, ctx, source))

    def pretrain(self, spec: RunSpec, ctx: RunContext, data: TextData) -> PretrainResult:
        from domains.text.models import HFEncoder, QuickThoughtEncoder, build_model
        from domains.text.senteval import BowEncoder

        cfg: TextConfig = spec.config
        if spec.method == "bow":
            return PretrainResult(BowEncoder(cfg.word_vectors, cfg.lowercase), info={"trained": False},
                                  loss_used=False)
        if spec.method == "hf":
            return PretrainResult(HFEncoder(cfg.hf_model_dir, ctx.device, cfg.eval_batch_size),
                                  info={"trained": False, "hf_model_dir": cfg.hf_model_dir}, loss_used=False)
        from domains.text.quickthought import QuickThoughtExtras, train
        from domains.text.tokenize import SentenceTokenizer, train_tokenizer

        corpus = data.corpus
        bert = spec.method == "quickthought-bert"
        kind = _tokenizer_kind(spec.method)
        saved = ctx.saved_extras(QuickThoughtExtras)
        if saved is not None:  # the vocabulary the saved weights were trained with
            tokenizer = SentenceTokenizer.from_str(saved["tokenizer"], kind, cfg.max_len)
        else:
            tokenizer = train_tokenizer(corpus.sentences, kind, cfg.vocab_size, cfg.max_len, cfg.lowercase,
                                        cfg.min_frequency)
        model, model_info = build_model(spec.method, cfg, tokenizer)
        ctx.log(f"quick-thought ({spec.method}, {spec.loss}) on {len(corpus)} sentences of "
                f"{len(corpus.doc_names)} documents, vocabulary {tokenizer.vocab_size}")
        curve, throughput, info = train(model, tokenizer, corpus, cfg, spec.make_loss(), ctx)
        info.update(model_info, trained=True, parameters=sum(p.numel() for p in model.parameters()))
        encoder = QuickThoughtEncoder(model, tokenizer, ctx.device, cfg.eval_batch_size, truncate=bert)
        return PretrainResult(encoder, curve, throughput, info)

    def evaluate(self, spec: RunSpec, pretrained: PretrainResult, ctx: RunContext, data: TextData) -> EvalResult:
        """The protocol of the dataset (``domains.text.evaluate``). A trained run's details also give the class
        prior of its pretraining sentences (``label_prior``, Σ p², and ``label_classes``): on synthetic-topics
        their topic, on books the book each sentence comes from (``label_prior_of`` says which)."""
        from domains.text.evaluate import evaluate_encoder

        metrics, details = evaluate_encoder(pretrained.model, spec.dataset, spec.config, ctx.data_root, ctx.log,
                                            ctx.device, data.tasks)
        if data.corpus is not None and spec.dataset in _LABELS_OF_SENTENCES:
            details.update(label_prior(sentence_labels(data.corpus)),
                           label_prior_of=_LABELS_OF_SENTENCES[spec.dataset])
        return EvalResult(metrics, details)

    def trained_modules(self, spec: RunSpec, pretrained: PretrainResult) -> KeptModel | None:
        """Quick-thought's two encoders, f and g (a sentence's vector is [f(s), g(s)]: ``QuickThought.embed``), and
        the tokenizer they read (its JSON: ``SentenceTokenizer.from_str``). None for bow and hf, which train
        nothing."""
        from domains.text.models import QuickThoughtEncoder

        if not isinstance(pretrained.model, QuickThoughtEncoder):
            return None
        return KeptModel(dict(pretrained.model.model.named_children()),
                         {"tokenizer": pretrained.model.tokenizer.to_str()})

    def build_modules(self, spec: RunSpec, build: dict[str, Any]) -> dict[str, torch.nn.Module]:
        """Without reading ``word_vectors``: they only initialised the weights the saved state replaces."""
        from domains.text.models import build_model
        from domains.text.tokenize import SentenceTokenizer

        if spec.method not in TRAINED:
            raise UserError(f"text method '{spec.method}' trains no network: there is none to rebuild")
        cfg: TextConfig = spec.config
        tokenizer = SentenceTokenizer.from_str(build["tokenizer"], _tokenizer_kind(spec.method), cfg.max_len)
        model, _ = build_model(spec.method, replace(cfg, word_vectors=""), tokenizer)
        return dict(model.named_children())

    def data_fingerprint(self, spec: RunSpec, ctx: RunContext) -> dict[str, Any]:
        """Without parsing the corpus: the generator's parameters, or the hashes of the files; and the word vectors'
        hash, since they are data too (a missing file stops the run here, before it starts, with no record)."""
        return self._fingerprint(spec, ctx, _hf_source(spec, ctx))

    def _fingerprint(self, spec: RunSpec, ctx: RunContext, source: Source | None) -> dict[str, Any]:
        """:meth:`data_fingerprint`, with hf-text's ``source`` resolved (:func:`_hf_source`)."""
        cfg: TextConfig = spec.config
        out: dict[str, Any] = {"dataset": spec.dataset}
        if spec.dataset == "synthetic-topics":
            out["generator_sha256"] = synthetic_fingerprint(cfg)
        else:
            from domains.text.senteval_tasks import task_files

            out["senteval_sha256"] = hash_files(task_files(ctx.data_root, cfg.senteval_tasks))
        if spec.dataset == "books" and spec.method in TRAINED:
            paths = book_paths(ctx.data_root, cfg.books)
            out.update(books=[p.stem for p in paths], books_sha256=hash_files(paths))
        elif spec.dataset == "hf-text":
            out.update(hf_dataset=cfg.hf_dataset, hf_split=cfg.hf_split)
            if source is not None:
                out["hf_files"] = file_hashes(source)
        if cfg.word_vectors:
            from domains.text.models import word_vectors_file

            out["word_vectors_sha256"] = hash_files([word_vectors_file(cfg.word_vectors)])
        return out

    def benchmark(self, device: torch.device, data_root: Path, quick: bool) -> list[BenchPart]:
        from domains.text.bench import benchmark

        return benchmark(device, data_root, quick)


def _hf_source(spec: RunSpec, ctx: RunContext) -> Source | None:
    """``hf_dataset`` resolved (:func:`domains.text.hf_text.resolve`: for a hub id, a request to the hub) for a
    trained run on hf-text, once per run (``ctx.found``: the harness's skip check takes the fingerprint, then
    ``prepare`` reads the rows); None otherwise: bow and hf read no corpus, so theirs is neither resolved nor
    hashed."""
    if spec.dataset != "hf-text" or spec.method not in TRAINED:
        return None
    key = f"hf-text source {spec.config.hf_dataset}"
    if key not in ctx.found:
        ctx.found[key] = resolve(spec.config, ctx.data_root)
    return ctx.found[key]


def _sentences(count: int) -> str:
    """A count of sentences, short: "4k sentences", "960 sentences"."""
    return f"{count / 1000:g}k sentences" if count >= 1000 else counted(count, "sentence")


def _tokenizer_kind(method: str) -> str:
    """The tokenizer a trained method reads: BERT's word pieces, or the GRU's words."""
    return "wordpiece" if method == "quickthought-bert" else "word"


__all__ = ["TASKS", "TextConfig", "TextDomain"]
