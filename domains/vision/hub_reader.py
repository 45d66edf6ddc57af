"""A Hugging Face dataset's files and splits as ``datasets`` reads them, for :mod:`domains.vision.hub`: the
builder, what identifies the files read, the checks of the parquet shards, and a split's image and label columns in
Arrow form (never row by row in Python)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from domains.errors import UserError
from domains.files import cache_dir, hash_files
from domains.hub_network import no_network_note, offline_without_network
from domains.vision.image_decoding import Blob


def display_name(source: Path | str) -> str:
    """How messages name ``source``: the folder, or the hub id."""
    return str(source) if isinstance(source, Path) else f"hub dataset '{source}'"


def builder_for(datasets: Any, source: Path | str) -> Any:
    """``datasets.load_dataset_builder`` for a folder or a hub id, its files resolved; UserError when there is
    nothing ``datasets`` can read there, or no network for a hub id."""
    offline = contextlib.nullcontext(False) if isinstance(source, Path) else offline_without_network()
    try:
        with offline as no_network:
            return datasets.load_dataset_builder(str(source), cache_dir=str(cache_dir() / "hf-datasets"))
    except (OSError, ValueError) as exc:  # ConnectionError, DatasetNotFoundError, EmptyDatasetError, bad ids
        reason = no_network_note() if no_network else " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(source, Path):
            raise UserError(f"{source}: no dataset files that datasets can read ({reason}); a Hugging Face image "
                            "dataset is a folder of parquet shards, e.g. data/train-00000-of-00001.parquet") from None
        raise UserError(f"cannot load '{source}' from the Hugging Face hub ({reason}); without a network, download "
                        f"it where there is one (huggingface-cli download {source} --repo-type dataset --local-dir "
                        "<folder>) and pass --dataset hf:<folder>") from None


def file_identities(builder: Any, source: Path | str) -> dict[str, str]:
    """What identifies the files the builder reads: each local file's sha256 (by its path inside the folder),
    or each hub file's URL, which names the commit it is pinned to."""
    data_files = builder.config.data_files or {}
    names = sorted({str(f) for split in data_files.values() for f in split})
    if not names:
        raise UserError(f"{display_name(source)}: datasets found no data files")
    if isinstance(source, Path):
        _check_inside(source, names)
        return {os.path.relpath(f, source): hash_files([Path(f)]) for f in names}
    return {f: "pinned by the URL's commit" for f in names}


def _check_inside(source: Path, names: list[str]) -> None:
    """UserError naming the files outside the folder ``source`` that ``datasets`` would read (a ``README.md``'s
    ``configs: data_files`` may name any path): a dataset is its folder, so that a name under the data root never
    reaches outside it. ``datasets`` resolves the folder's links, not those inside it (a hub snapshot's files)."""
    folder = Path(os.path.realpath(source))
    outside = [f for f in names if not Path(os.path.abspath(f)).is_relative_to(folder)]
    if outside:
        more = f" and {len(outside) - 1} more" if len(outside) > 1 else ""
        raise UserError(f"{source}: its README.md's data_files name {outside[0]}{more}, outside the dataset's folder; "
                        "a dataset's files are inside its folder")


def _check_shards(source: Path, files: dict[str, str]) -> None:
    """Read each parquet shard's footer: a truncated or damaged file is named before ``datasets`` fails on it."""
    import pyarrow
    import pyarrow.parquet as pq

    for rel in files:
        if rel.endswith(".parquet"):
            try:
                pq.read_metadata(source / rel)
            except (OSError, pyarrow.ArrowException) as exc:
                raise UserError(f"{source / rel} is not a readable parquet file ({exc}); download it again") from None


def _bad_shard(source: Path, files: dict[str, str]) -> str:
    """The first shard whose pages pyarrow cannot read in full (a damage the footer does not show), or ''."""
    import pyarrow
    import pyarrow.parquet as pq

    for rel in files:
        try:
            pq.read_table(source / rel)
        except (OSError, pyarrow.ArrowException) as exc:
            return f"{source / rel} is damaged ({exc}); download it again"
    return ""


def prepare_splits(datasets: Any, builder: Any, source: Path | str, files: dict[str, str]) -> Any:
    """The builder's DatasetDict, prepared (Arrow files in the cache); datasets' own bars off (ours follows)."""
    if isinstance(source, Path):
        _check_shards(source, files)
    bars_were_off = datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        builder.download_and_prepare()
        return builder.as_dataset()
    except datasets.exceptions.DatasetGenerationError as exc:
        reason = _bad_shard(source, files) if isinstance(source, Path) else ""
        raise UserError(reason or f"{display_name(source)}: datasets could not read it ({exc.__cause__ or exc})") \
            from None
    except OSError as exc:
        raise UserError(f"{display_name(source)}: cannot download or read it ({exc})") from None
    finally:
        if not bars_were_off:
            datasets.enable_progress_bars()


SHARD_NAME = re.compile(r"(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet")


def check_complete(source: Path) -> None:
    """UserError naming the shards missing from a numbered series (``train-00003-of-00005.parquet``): without one,
    ``datasets`` would read the others as a smaller split without a word."""
    series: dict[tuple[Path, str, int], set[int]] = {}
    for shard in source.glob("**/*.parquet"):
        match = SHARD_NAME.fullmatch(shard.name)
        if match:
            key = (shard.parent, match["stem"], int(match["count"]))
            series.setdefault(key, set()).add(int(match["index"]))
    for (folder, stem, count), present in sorted(series.items()):
        missing = [i for i in range(count) if i not in present]
        if missing:
            names = ", ".join(f"{stem}-{i:05d}-of-{count:05d}.parquet" for i in missing[:3])
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise UserError(f"{folder}: {len(missing)} of {count} shards of {stem} missing ({names}{more}); "
                            "the split would be read without them, so download them again")


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


def split_labels(split: Any, column: str, name: str) -> np.ndarray:
    """The split's class indices (int64); -1 for every row of a split without the column (unlabelled images)."""
    if column not in split.column_names:
        return np.full(len(split), -1, dtype=np.int64)
    values = split.data.column(column).to_numpy(zero_copy_only=False)
    if not np.issubdtype(values.dtype, np.integer):
        raise UserError(f"{name}: the label column '{column}' holds {split.features[column]}, not class indices; "
                        "name another with --set label_column=<column>")
    return values.astype(np.int64)


def split_blobs(split: Any, column: str, name: str) -> list[Blob]:
    """The encoded images of a split's column: its bytes, or its path where a row has no bytes (an image folder's:
    :func:`check_image_paths` says which paths may be read)."""
    import pyarrow as pa

    out: list[Blob] = []
    for chunk in split.data.column(column).chunks:
        if pa.types.is_struct(chunk.type) and chunk.type.get_field_index("bytes") >= 0:
            paths = chunk.field("path").to_pylist() if chunk.type.get_field_index("path") >= 0 else [None] * len(chunk)
            out += [b if b is not None else p for b, p in zip(chunk.field("bytes").to_pylist(), paths)]
        elif pa.types.is_binary(chunk.type) or pa.types.is_large_binary(chunk.type):
            out += chunk.to_pylist()
        else:
            raise UserError(f"{name}: the image column '{column}' holds {split.features[column]}, not encoded "
                            "images; name another with --set image_column=<column>")
    if any(b is None for b in out):
        raise UserError(f"{name}: the image column '{column}' has empty rows")
    return out


def check_image_paths(builder: Any, source: Path | str, split: str, blobs: list[Blob]) -> None:
    """UserError naming the first row of ``split`` whose image is the path of a file that is not one of the
    dataset's own files. An image folder's rows hold its own images' paths, which the fingerprint and the
    decoded-image cache key hash; a parquet row may name any file on the machine (absolute, or relative to the
    working folder), which neither would, so that an edited image would be served from the cache as before."""
    own = ({os.path.abspath(f) for files in builder.config.data_files.values() for f in files}
           if isinstance(source, Path) else set())
    bad = next((i for i, blob in enumerate(blobs) if isinstance(blob, str) and os.path.abspath(blob) not in own), None)
    if bad is None:
        return
    fix = ("write each image's bytes into its row" if isinstance(source, Path) else
           f"download it (huggingface-cli download {source} --repo-type dataset --local-dir <folder>) and pass "
           "--dataset hf:<folder>")
    raise UserError(f"{row_file(builder, source, split, bad)} holds no bytes but the path {blobs[bad]}, which is "
                    f"not one of the dataset's own files (those alone are in its fingerprint); {fix}")


def row_file(builder: Any, source: Path | str, split: str, index: int, what: str = "image") -> str:
    """Where row ``index`` of ``split`` is stored: the shard and its row (a local folder), else the split's row."""
    if isinstance(source, Path):
        import pyarrow.parquet as pq

        start = 0
        for f in builder.config.data_files.get(split, []):
            rows = pq.read_metadata(f).num_rows if str(f).endswith(".parquet") else 0
            if index < start + rows:
                return f"{f}: the {what} in row {index - start}"
            start += rows
    return f"{display_name(source)}: {what} {index} of the {split} split"
