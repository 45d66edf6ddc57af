"""Corpora, tokenisers, encoders and the quick-thought training loop (checkpoint and resume)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from support import mistyped_extra, tamper_extra

import domains
import losses
from domains.base import RunSpec
from domains.context import RunContext
from domains.errors import UserError
from domains.text.config import TextConfig
from domains.text.corpus import (
    book_sentences,
    from_documents,
    keep_prefixes,
    load_books,
    split_sentences,
    synthetic_corpus,
    synthetic_task,
)
from domains.text.models import GRUEncoder, QuickThoughtEncoder, build_model
from domains.text.quickthought import negative_same_class_fraction, train
from domains.text.tokenize import train_tokenizer

SMALL = TextConfig(synthetic_documents=12, synthetic_sentences_per_doc=10, synthetic_eval_sentences=200,
                   word_dim=16, hidden_dim=24, batch_size=20, epochs=1, log_every=1, checkpoint_every=2)


def test_synthetic_corpus_is_deterministic_and_topical():
    a, b = synthetic_corpus(SMALL), synthetic_corpus(SMALL)
    assert a.sentences == b.sentences and np.array_equal(a.doc_ids, b.doc_ids)
    assert len(a) == 120 and np.all(np.diff(a.doc_ids) >= 0)
    assert np.bincount(a.doc_labels).tolist() == [3, 3, 3, 3]  # balanced topics: the prior is 1/K
    sentences, labels, bayes = synthetic_task(SMALL)
    assert np.bincount(labels).tolist() == [50] * 4
    assert 25 < bayes < 100  # above chance (1/K), below certainty: some sentences have no topic word


def test_keep_prefixes_is_proportional_and_ordered():
    docs = [[f"a{i}" for i in range(100)], [f"b{i}" for i in range(50)]]
    kept = keep_prefixes(docs, 30)
    assert kept == [docs[0][:20], docs[1][:10]]
    assert keep_prefixes(docs, 0) is docs


def test_sentence_splitting_unwraps_paragraphs():
    text = "Mr. Smith went\nto Washington. He\nsaw it!\n\nA new paragraph? Yes.\r\n"
    assert split_sentences(text) == ["Mr. Smith went to Washington.", "He saw it!", "A new paragraph?", "Yes."]


def test_two_books_are_two_documents_in_order(data_root, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    corpus = load_books(data_root, replace(SMALL, books=("blake-poems", "carroll-alice"), max_sentences=0))
    assert corpus.doc_names == ["blake-poems", "carroll-alice"]
    assert set(corpus.doc_ids.tolist()) == {0, 1} and np.all(np.diff(corpus.doc_ids) >= 0)
    alice = [s for s, d in zip(corpus.sentences, corpus.doc_ids) if d == 1]
    assert alice[0].startswith("[Alice's Adventures in Wonderland")
    assert any(p.suffix == ".json" for p in (tmp_path / "text").iterdir())  # the split is cached
    with pytest.raises(UserError, match="unknown book"):
        load_books(data_root, replace(SMALL, books=("no-such-book",)))


@pytest.mark.parametrize("damage", ['["a sentence", "anoth', '{"not": "a list"}', '[1, 2]'])
def test_a_damaged_sentence_cache_is_named_and_rebuilt(tmp_path, monkeypatch, damage):
    book = tmp_path / "books" / "tiny.txt"
    book.parent.mkdir()
    book.write_text("First sentence here. Second one!\n\nA third.")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    assert book_sentences(book) == ["First sentence here.", "Second one!", "A third."]
    (cached,) = (tmp_path / "cache" / "text").iterdir()
    cached.write_text(damage)
    with pytest.warns(UserWarning, match=f"sentence cache {cached} is damaged"):
        assert book_sentences(book) == ["First sentence here.", "Second one!", "A third."]
    assert book_sentences(book) == ["First sentence here.", "Second one!", "A third."]  # rewritten: no warning


def test_packed_gru_ignores_padding():
    torch.manual_seed(0)
    enc = GRUEncoder(50, 8, 12, bidirectional=True, pad_id=0).eval()
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    with torch.no_grad():
        batched = enc(ids, torch.tensor([3, 5]))
        alone = enc(ids[:1, :3], torch.tensor([3]))
    assert batched.shape == (2, 12)
    assert torch.allclose(batched[0], alone[0], atol=1e-6)


def test_word_vectors_initialise_the_embeddings(tmp_path):
    tok = train_tokenizer(["the cat sat", "the dog"], "word", 100, 30)
    path = tmp_path / "vectors.txt"
    path.write_text("cat 1 2 3\nzebra 4 5 6\n")  # GloVe format, no header
    model, info = build_model("quickthought", replace(SMALL, word_vectors=str(path), word_dim=3), tok)
    assert torch.equal(model.f.embed.weight[tok.vocab()["cat"]], torch.tensor([1.0, 2.0, 3.0]))
    assert info["word_vectors_coverage"] == pytest.approx(1 / tok.vocab_size)
    with pytest.raises(UserError, match="word_dim=3"):
        build_model("quickthought", replace(SMALL, word_vectors=str(path), word_dim=16), tok)


def _train(cfg: TextConfig, work: Path, resume: bool = False, seed: int = 0):
    corpus = synthetic_corpus(cfg)
    tok = train_tokenizer(corpus.sentences, "word", cfg.vocab_size, cfg.max_len)
    torch.manual_seed(seed)
    model, _ = build_model("quickthought", cfg, tok)
    ctx = RunContext(seed=seed, device=torch.device("cpu"), data_root=Path("."), work_dir=work, resume=resume,
                     quiet=True)
    curve, throughput, info = train(model, tok, corpus, cfg, losses.get("dcl", tau_plus=0.01), ctx)
    return model, tok, curve, throughput, info


def test_training_resumes_from_its_checkpoint(tmp_path):
    full, _, curve, throughput, info = _train(replace(SMALL, max_steps=4), tmp_path / "a")
    assert info["steps"] == 4 and [p["step"] for p in curve] == [1, 2, 3, 4]
    assert throughput["sentences_per_s"] > 0 and info["positives_per_anchor"] == 2
    assert 0 < info["negative_same_topic_fraction"] < 1
    half, *_ = _train(replace(SMALL, max_steps=2), tmp_path / "b")  # "killed" after its checkpoint at step 2
    assert not torch.allclose(half.f.embed.weight, full.f.embed.weight)
    resumed, _, curve_b, _, info_b = _train(replace(SMALL, max_steps=4), tmp_path / "b", resume=True, seed=0)
    assert info_b["steps"] == 4 and [p["step"] for p in curve_b] == [1, 2, 3, 4]
    for (name, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name


def test_the_authors_objective_trains_where_no_document_has_a_neighbour(tmp_path):
    """One-sentence documents: the spec's layout has no positive pair in any batch and trains nothing; S2V's
    context crosses documents, so objective=authors trains on every batch."""
    lone = replace(SMALL, synthetic_documents=40, synthetic_sentences_per_doc=1, max_steps=2)
    _, _, curve, _, info = _train(lone, tmp_path / "spec")
    assert info["skipped_batches"] == 2 and curve == []
    _, _, curve, _, info = _train(replace(lone, objective="authors"), tmp_path / "authors")
    assert info["skipped_batches"] == 0 and [p["step"] for p in curve] == [1, 2]
    assert all(np.isfinite(p["loss"]) for p in curve) and 0 < info["negative_same_topic_fraction"] < 1


def test_the_objective_sits_with_the_loss_on_the_pages():
    """objective=authors and the spec's layout are two objectives around one loss: one setting, so that the page
    shows their rows side by side (harness.groups, Domain.objective_keys). Rows of the baseline loss are each a
    baseline there: a dcl row takes its Δ against the infonce row of its own objective."""
    text = domains.get("text")
    assert text.objective_keys("quickthought") == text.objective_keys("quickthought-bert") == {"objective"}
    assert text.objective_keys("bow") == frozenset()  # it trains nothing: no objective


@pytest.mark.parametrize("name, value", [("sentences_seen", "40"), ("tokenizer", 5)])  # the loop's; the domain's
def test_a_checkpoint_extra_of_the_wrong_type_is_the_clean_error(tmp_path, name, value):
    text = domains.get("text")
    spec = RunSpec("text", "quickthought", "synthetic-topics", "dcl", {"tau_plus": 0.01}, "quick", 0,
                   replace(SMALL, max_steps=2))

    def ctx(resume: bool) -> RunContext:
        return RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path, resume=resume,
                          quiet=True)

    data = text.prepare(spec, ctx(False)).data
    text.pretrain(spec, ctx(False), data)  # "killed" after its checkpoint at step 2
    tamper_extra(tmp_path / "checkpoint.pt", name, value)
    with pytest.raises(UserError, match=mistyped_extra(name)):
        text.pretrain(replace(spec, config=replace(SMALL, max_steps=4)), ctx(True), data)


def test_encoder_gives_concatenated_embeddings(tmp_path):
    model, tok, *_ = _train(replace(SMALL, max_steps=1), tmp_path)
    enc = QuickThoughtEncoder(model, tok, torch.device("cpu"), batch_size=7, truncate=False)
    sentences = synthetic_task(SMALL)[0][:20] + [""]
    out = enc.encode(sentences)
    assert out.shape == (21, 2 * SMALL.hidden_dim) and np.isfinite(out).all()
    assert np.allclose(out[3], enc.encode([sentences[3]])[0], atol=1e-5)  # independent of the batch


def test_bert_encoder_builds_from_a_config_and_trains():
    pytest.importorskip("transformers")
    cfg = replace(SMALL, bert_layers=1, bert_heads=2, bert_hidden=16, bert_intermediate=32)
    corpus = synthetic_corpus(cfg)
    tok = train_tokenizer(corpus.sentences, "wordpiece", 300, cfg.max_len)
    model, _ = build_model("quickthought-bert", cfg, tok)
    ids, lengths = tok.batch(corpus.sentences[:5])
    assert ids[0, 0] == tok.tokenizer.token_to_id("[CLS]")
    u, v = model(ids, lengths)
    assert u.shape == v.shape == (5, 16)
    enc = QuickThoughtEncoder(model, tok, torch.device("cpu"), 4, truncate=True)
    assert enc.encode(["a " * 100]).shape == (1, 32)  # truncated to the position limit


def test_hf_text_without_datasets_is_a_user_error(monkeypatch, tmp_path):
    from domains.text.hf_text import resolve

    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # as if not installed; never downloads
    with pytest.raises(UserError, match=r"package 'datasets' .*pip install 'contrastive-harness\[text\]'"):
        resolve(replace(SMALL, hf_dataset="bookcorpus"), tmp_path)
    with pytest.raises(UserError, match="hf_dataset"):
        resolve(SMALL, tmp_path)


def test_hf_text_without_network_fails_at_once_with_what_to_do(monkeypatch, tmp_path):
    """Where the hub's host does not resolve, datasets retried each request for 25 s before it failed."""
    pytest.importorskip("datasets")
    from domains import hub_network
    from domains.text.hf_text import resolve

    monkeypatch.setattr(hub_network, "hub_unreachable", lambda: True)
    with pytest.raises(UserError, match=r"'someone/some-books' from the Hugging Face hub \(no network: .* does not "
                                        r"resolve, so only datasets' cache was read\); without a network, download it"
                                        r" .* --set hf_dataset=<folder>"):
        resolve(replace(SMALL, hf_dataset="someone/some-books"), tmp_path)


@pytest.mark.slow
def test_benchmark_rows(data_root):
    from domains.text.bench import benchmark

    parts = benchmark(torch.device("cpu"), data_root, quick=True)
    assert [part.name for part in parts] == ["quickthought"]
    rows = parts[0].measure()
    assert rows[0]["benchmark"] == "train" and rows[0]["sentences_per_s"] > 0
    assert [r["task"] for r in rows if r["benchmark"] == "senteval"] == ["MR", "CR", "SUBJ", "MPQA", "TREC", "MRPC"]


def test_hf_encoder_reads_a_local_model_directory(tmp_path):
    transformers = pytest.importorskip("transformers")
    from domains.text.models import HFEncoder

    sentences = synthetic_corpus(SMALL).sentences
    tok = train_tokenizer(sentences, "wordpiece", 200, 30)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok.tokenizer, unk_token="[UNK]",
                                                pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]")
    config = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    transformers.BertModel(config).save_pretrained(tmp_path)
    fast.save_pretrained(tmp_path)
    enc = HFEncoder(str(tmp_path), torch.device("cpu"), batch_size=3)
    out = enc.encode(sentences[:5])
    assert out.shape == (5, 16) and np.isfinite(out).all()
    assert np.allclose(out[1], enc.encode([sentences[1]])[0], atol=1e-5)  # padding does not leak into the mean
    with pytest.raises(UserError, match="hf_model_dir"):
        HFEncoder(str(tmp_path / "missing"), torch.device("cpu"), 3)


def test_the_same_class_share_of_the_negatives_counts_by_topic_else_by_document():
    """Two documents of three sentences in one batch, context 1: of the 36 pairs, each document's 3 self-pairs
    and 4 neighbour pairs are positives or the anchor itself, leaving 22 negatives; 4 of them (each document's
    first and last sentence, both ways) share the document. With the documents on one topic all 22 do."""
    documents = [["a0", "a1", "a2"], ["b0", "b1", "b2"]]
    assert negative_same_class_fraction(from_documents(["A", "B"], documents), [slice(0, 6)], 1) == 4 / 22
    same_topic = from_documents(["A", "B"], documents, doc_labels=np.array([7, 7]))
    assert negative_same_class_fraction(same_topic, [slice(0, 6)], 1) == 1.0
    two_topics = from_documents(["A", "B"], documents, doc_labels=np.array([0, 1]))
    assert negative_same_class_fraction(two_topics, [slice(0, 6)], 1) == 4 / 22
    assert negative_same_class_fraction(two_topics, [slice(0, 1)], 1) is None  # one sentence: no negative
