"""Datasets read with Hugging Face ``datasets``, for the vision domain's ``hf:<name>`` and the text domain's
``hf-text``: where a name points (a local folder or file, as given or under the data root, else a hub id), the
builder ``datasets`` makes for it, what identifies the files it reads (the data fingerprint), its splits prepared,
and a named column checked."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domains.errors import UserError
from domains.files import cache_dir, hash_files
from domains.hub_network import no_network_note, offline_without_network

# The files datasets reads by their suffix (text's hf_dataset): a name that ends so is a file, never a hub id.
DATA_FILE_SUFFIXES = (".txt", ".csv", ".json", ".jsonl", ".parquet")
HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")  # <name> or <owner>/<name>, as the hub spells ids
# datasets' RuntimeError for a dataset script (datasets/load.py: "... no longer supported, but found <name>.py")
SCRIPT_REFUSED = "Dataset scripts are no longer supported"
HUB_CACHE = "hf-datasets"  # under cache_dir(): the cache datasets downloads and prepares into (builder_for)


@dataclass(frozen=True)
class Wording:
    """How a domain's messages name its datasets: the option and prefix a user names one with (``--dataset hf:``,
    ``--set hf_dataset=``), and what a local dataset is (the end of a sentence)."""

    option: str
    prefix: str
    layout: str


def display_name(source: Path | str) -> str:
    """How messages name ``source``: the folder or file, or the hub id."""
    return str(source) if isinstance(source, Path) else f"hub dataset '{source}'"


def locate(target: str, root: Path, wording: Wording, files: bool = False) -> Path | str:
    """The folder ``target`` names (or, with ``files``, the file), as given, else under the data root; else
    ``target`` as a hub id. UserError for a path (absolute, ``./``, ``~``) that is not there, with ``files`` for a
    name that ends in a data file's suffix (:data:`DATA_FILE_SUFFIXES`) and is not there, and for a target that
    is neither there nor a hub id. Only a relative path without ``..`` is looked for under the data root: a name
    never reaches outside it."""
    given = Path(target).expanduser()
    inside = not target.startswith("~") and not given.is_absolute() and ".." not in given.parts
    candidates = list(dict.fromkeys((given, *([Path(root) / target] if inside else []))))
    for path in candidates:
        if path.is_dir() or (files and path.is_file()):
            return path.resolve()
    what = "file or folder" if files else "folder"
    if target.startswith(("/", ".", "~")):
        raise UserError(f"no {what} {' nor '.join(map(str, candidates))}; {wording.layout}")
    if files and target.lower().endswith(DATA_FILE_SUFFIXES):  # a file's name, not a hub id: it is missing
        raise UserError(f"no file {' or '.join(map(str, candidates))}; {wording.layout}")
    if not HUB_ID.fullmatch(target) or ".." in target:
        raise UserError(f"'{wording.prefix}{target}' is neither a {what} nor a hub id (<name> or <owner>/<name>: "
                        "letters, digits, '-', '_' and '.'); a path starts with /, ./, ../ or ~")
    return target


def _folder(source: Path) -> Path:
    """The folder a local source's files are named from: the source itself, or a single file's folder."""
    return source if source.is_dir() else source.parent


def builder_for(datasets: Any, source: Path | str, wording: Wording) -> Any:
    """``datasets.load_dataset_builder`` for a folder, a single file (its one split, ``train``) or a hub id, its
    files resolved; UserError when there is nothing ``datasets`` can read there, or no network for a hub id."""
    offline = contextlib.nullcontext(False) if isinstance(source, Path) else offline_without_network()
    single_file = source.name if isinstance(source, Path) and source.is_file() else None
    try:
        with offline as no_network:
            return datasets.load_dataset_builder(str(_folder(source) if single_file else source),
                                                 data_files=single_file, cache_dir=str(cache_dir() / HUB_CACHE))
    # ConnectionError, DatasetNotFoundError, EmptyDatasetError, bad ids; RuntimeError: a dataset script (a folder's
    # or a hub set's <name>.py), which datasets no longer runs: it names the script, and no code ran. Any other
    # RuntimeError is a fault, not the user's input: it surfaces as itself.
    except (OSError, ValueError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and not str(exc).startswith(SCRIPT_REFUSED):
            raise
        reason = no_network_note() if no_network else " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(source, Path):
            raise UserError(f"{source}: no dataset files that datasets can read ({reason}); {wording.layout}") \
                from None
        raise UserError(f"cannot load '{source}' from the Hugging Face hub ({reason}); without a network, download "
                        f"it where there is one (huggingface-cli download {source} --repo-type dataset --local-dir "
                        f"<folder>) and pass {wording.option} {wording.prefix}<folder>") from None


def file_identities(builder: Any, source: Path | str) -> dict[str, str]:
    """What identifies the files the builder reads: each local file's sha256 (by its path inside the folder),
    or each hub file's URL, which names the commit it is pinned to."""
    data_files = builder.config.data_files or {}
    names = sorted({str(f) for split in data_files.values() for f in split})
    if not names:
        raise UserError(f"{display_name(source)}: datasets found no data files")
    if isinstance(source, Path):
        check_inside(_folder(source), names, "its README.md's data_files name")
        return {os.path.relpath(f, _folder(source)): hash_files([Path(f)]) for f in names}
    return {f: "pinned by the URL's commit" for f in names}


def check_inside(source: Path, names: list[str], naming: str) -> None:
    """UserError naming the files outside the folder ``source`` that ``datasets`` would read (a ``README.md``'s
    ``configs: data_files``, a ``save_to_disk`` folder's ``state.json``, may name any path; ``naming`` says which,
    as the start of a sentence's predicate): a dataset is its folder, so that a name under the data root never
    reaches outside it, and the folder's files, which its fingerprint hashes, are all the data a run reads.
    ``datasets`` resolves the folder's links, not those inside it (a hub snapshot's files)."""
    folder = Path(os.path.realpath(source))
    outside = [f for f in names if not Path(os.path.abspath(f)).is_relative_to(folder)]
    if outside:
        more = f" and {len(outside) - 1} more" if len(outside) > 1 else ""
        raise UserError(f"{source}: {naming} {outside[0]}{more}, outside the dataset's folder; a dataset's files are "
                        "inside its folder")


def _check_shards(folder: Path, files: dict[str, str]) -> None:
    """Read each parquet shard's footer: a truncated or damaged file is named before ``datasets`` fails on it."""
    import pyarrow
    import pyarrow.parquet as pq

    for rel in files:
        if rel.endswith(".parquet"):
            try:
                pq.read_metadata(folder / rel)
            except (OSError, pyarrow.ArrowException) as exc:
                raise UserError(f"{folder / rel} is not a readable parquet file ({exc}); download it again") from None


def _bad_shard(folder: Path, files: dict[str, str]) -> str:
    """The first shard whose pages pyarrow cannot read in full (a damage the footer does not show), or ''."""
    import pyarrow
    import pyarrow.parquet as pq

    for rel in files:
        try:
            pq.read_table(folder / rel)
        except (OSError, pyarrow.ArrowException) as exc:
            return f"{folder / rel} is damaged ({exc}); download it again"
    return ""


@contextlib.contextmanager
def progress_bars(datasets: Any, shown: bool) -> Iterator[None]:
    """Within: ``datasets``' own progress bars ("Generating train split") off unless ``shown``; put back after."""
    hide = not shown and not datasets.utils.are_progress_bars_disabled()
    if hide:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if hide:
            datasets.enable_progress_bars()


def prepare_splits(datasets: Any, builder: Any, source: Path | str, files: dict[str, str], bars: bool) -> Any:
    """The builder's DatasetDict, prepared (Arrow files in the cache), with ``datasets``' own bars where ``bars``."""
    if isinstance(source, Path):
        _check_shards(_folder(source), files)
    try:
        with progress_bars(datasets, shown=bars):
            builder.download_and_prepare()
            return builder.as_dataset()
    except datasets.exceptions.DatasetGenerationError as exc:
        reason = _bad_shard(_folder(source), files) if isinstance(source, Path) else ""
        raise UserError(reason or f"{display_name(source)}: datasets could not read it ({exc.__cause__ or exc})") \
            from None
    except OSError as exc:
        raise UserError(f"{display_name(source)}: cannot download or read it ({exc})") from None


def find_column(features: dict, given: str, preferred: tuple[str, ...], kind: Callable[[Any], bool], what: str,
                option: str, name: str) -> str:
    """The column ``given`` (with ``--set <option>``), else the first of ``preferred``, else the first feature of
    ``kind``; UserError naming the columns there are."""
    if given:
        if given not in features:
            raise UserError(f"{name} has no column '{given}' ({option}); its columns: {', '.join(features)}")
        return given
    found = next((c for c in preferred if c in features), None) or next(
        (c for c, f in features.items() if kind(f)), None)
    if found is None:
        raise UserError(f"{name} has no {what} column (looked for {', '.join(preferred)}); its columns: "
                        f"{', '.join(features)}; name it with --set {option}=<column>")
    return found
