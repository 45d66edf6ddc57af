"""The ``hf-text`` corpus: a text dataset read with Hugging Face ``datasets`` (imported only when asked for).

``hf_dataset`` names a folder or a single file, as given or under the data root (as the vision domain's ``hf:``
does, :func:`domains.hub_datasets.locate`), else a hub id. A folder or file is read as ``datasets`` reads it (.txt,
.csv, .json/.jsonl, .parquet; a single file is the ``train`` split); a folder written by ``save_to_disk`` with
``load_from_disk``. Its identity is the sha256 of every file read (a hub id: the file URLs, each pinned to a
commit), so changed data is a new run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domains.base import require
from domains.errors import UserError
from domains.files import hash_files
from domains.hub_datasets import (
    Wording,
    builder_for,
    check_inside,
    display_name,
    file_identities,
    find_column,
    locate,
    prepare_splits,
    progress_bars,
)
from domains.text.config import TextConfig

WORDING = Wording("--set", "hf_dataset=", "a local text dataset is a folder (or one file) of .txt, .csv, .json, "
                                          ".jsonl or .parquet files, or a folder written by save_to_disk")
# What datasets' save_to_disk writes beside the Arrow files: a Dataset's state, or a DatasetDict's split list.
SAVED_MARKERS = ("state.json", "dataset_dict.json")


@dataclass(frozen=True)
class Source:
    """What ``hf_dataset`` names, resolved once for both the data's identity (:func:`file_hashes`) and its rows
    (:func:`read_split`): the folder or file (:func:`domains.hub_datasets.locate`), or the hub id; and, but for a
    ``save_to_disk`` folder, the ``datasets`` builder with its files resolved (for a hub id, one request to the
    hub), so the hashes are of the very files the rows come from."""

    where: Path | str
    builder: Any = None


def resolve(cfg: TextConfig, data_root: Path) -> Source:
    """The folder or file ``hf_dataset`` names (as given, else under the data root), or a hub id, with its
    builder."""
    if not cfg.hf_dataset:
        raise UserError("dataset hf-text needs --set hf_dataset=NAME_OR_PATH (a Hugging Face dataset)")
    where = locate(cfg.hf_dataset, data_root, WORDING, files=True)
    if _is_saved(where):
        return Source(where)
    return Source(where, builder_for(require("datasets", "text"), where, WORDING))


def _is_saved(where: Path | str) -> bool:
    return isinstance(where, Path) and any((where / marker).is_file() for marker in SAVED_MARKERS)


def file_hashes(source: Source) -> dict[str, str]:
    """What identifies the data, without reading its rows: the sha256 of each file ``datasets`` reads (by its path
    inside the folder; a ``save_to_disk`` folder: every file in it), or each hub file's URL, which names the
    commit it is pinned to."""
    where = source.where
    if source.builder is None:
        return {str(p.relative_to(where)): hash_files([p]) for p in sorted(where.rglob("*")) if p.is_file()}
    return file_identities(source.builder, where)


def _saved_split(datasets: Any, folder: Path, split: str, bars: bool) -> Any:
    """The split of a ``save_to_disk`` folder: a saved DatasetDict's ``split``, or a saved Dataset whole."""
    try:
        with progress_bars(datasets, shown=bars):
            saved = datasets.load_from_disk(str(folder))
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder}: datasets' load_from_disk cannot read it ({' '.join(str(exc).split())})") \
            from None
    # Each split's state.json names its Arrow files, "../" too: only the folder's own are hashed (file_hashes).
    splits = saved.cache_files.values() if isinstance(saved, datasets.DatasetDict) else [saved.cache_files]
    check_inside(folder, [f["filename"] for files in splits for f in files], "its state.json names")
    return _split(saved, split, folder) if isinstance(saved, datasets.DatasetDict) else saved


def _split(splits: Any, split: str, source: Path | str) -> Any:
    if split not in splits:
        raise UserError(f"{display_name(source)} has no split '{split}' (--set hf_split); its splits: "
                        f"{', '.join(splits)}")
    return splits[split]


def read_split(source: Source, split: str, bars: bool) -> tuple[Any, str]:
    """The rows of ``split`` and how messages name the dataset; ``bars``: ``datasets``' own progress bars show
    (not under ``--quiet``)."""
    datasets = require("datasets", "text")
    where = source.where
    if source.builder is None:
        return _saved_split(datasets, where, split, bars), display_name(where)
    splits = prepare_splits(datasets, source.builder, where, file_identities(source.builder, where), bars)
    return _split(splits, split, where), display_name(where)


def text_rows(cfg: TextConfig, source: Source, log: Callable[[str], None], bars: bool) -> Iterator[tuple[Any, str]]:
    """(document, text) of each row of ``source`` in order, rows without text left out (the log says how many);
    UserError, before any row is read, where ``hf_text_field`` or ``hf_doc_field`` names no column of the split."""
    rows, name = read_split(source, cfg.hf_split, bars)
    text_column = find_column(rows.features, cfg.hf_text_field, ("text",), _is_string, "text", "hf_text_field", name)
    doc_column = cfg.hf_doc_field and find_column(rows.features, cfg.hf_doc_field, (), _is_string, "document",
                                                  "hf_doc_field", name)
    nulls = rows.data.column(text_column).null_count
    if nulls:
        # A null would be read as the sentence "None"; the row is no sentence at all.
        log(f"{name}: skipped {nulls} of {len(rows)} rows whose '{text_column}' is null")
    for row in rows:
        if row[text_column] is not None:
            yield (row[doc_column] if doc_column else None), str(row[text_column])


def _is_string(feature: Any) -> bool:
    return getattr(feature, "dtype", None) in ("string", "large_string")
