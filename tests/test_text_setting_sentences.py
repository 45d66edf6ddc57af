"""The text page's setting column names the training sentences a run had: the synthetic corpus's count (its size
follows from its config), else, on the user's own files (books, hf-text), the cap ``max_sentences`` as "at most"
(a cap is no count: a smaller corpus trains on fewer). It said "20k sentences" of synthetic-topics runs on 4,000."""

from __future__ import annotations

import math
import re
from dataclasses import asdict

import pytest
from test_committed_pages import BOARD, domain_tables, listed_records

from domains.text import TextDomain
from domains.text.config import TextConfig
from domains.text.corpus import synthetic_corpus

TEXT = TextDomain()
SENTENCES = re.compile(r", (at most )?(\d+(?:\.\d+)?)(k?) sentences?,")


def claimed(note: str) -> tuple[bool, float]:
    """Whether the note gives a cap ("at most"; "all sentences": none), and the number of sentences it names."""
    if ", all sentences," in note:
        return True, math.inf
    found = SENTENCES.search(note)
    assert found, note
    return bool(found.group(1)), float(found.group(2)) * (1000 if found.group(3) else 1)


@pytest.mark.parametrize("fields", [
    {},  # the quick preset: 160 documents of 25, under the 20k cap
    {"max_sentences": 1000},  # 6 of each document's 25
    {"max_sentences": 0, "synthetic_topics": 50},  # 400 documents
    {"synthetic_documents": 7, "synthetic_sentences_per_doc": 3, "max_sentences": 20},
])
def test_the_synthetic_count_is_the_generated_corpus(fields):
    cfg = TEXT.resolve_config(TextConfig(**fields), "quickthought", "synthetic-topics")
    cap, count = claimed(TEXT.setting_note(asdict(cfg), "quickthought", "synthetic-topics"))
    assert not cap and count == len(synthetic_corpus(cfg))


def test_own_files_give_the_cap_as_a_cap():
    config = asdict(TextConfig())
    for dataset in ("books", "hf-text"):
        assert ", at most 20k sentences," in TEXT.setting_note(config, "quickthought", dataset)
        assert ", all sentences," in TEXT.setting_note({**config, "max_sentences": 0}, "quickthought", dataset)


def test_the_committed_text_rows_are_true_of_their_records():
    """Each text row's sentences against its records' ``info.train_sentences`` (the runs that recorded it): the
    count itself, or no more than the cap."""
    tables, problems = domain_tables(BOARD, listed_records(BOARD, BOARD / "results"))
    assert not problems
    checked = 0
    for table in (t for t in tables if t.domain == "text"):
        for row in (r for r in table.rows if r.first.method in ("quickthought", "quickthought-bert")):
            trained = {r.info["train_sentences"] for r in row.records if "train_sentences" in r.info}
            cap, count = claimed(row.cells["setting"])
            assert all(n <= count for n in trained) if cap else trained <= {count}, (row.first.run_id, trained)
            checked += bool(trained)
    assert checked >= 10
