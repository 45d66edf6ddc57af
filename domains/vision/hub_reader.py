"""A Hugging Face image dataset's files and splits, for :mod:`domains.vision.hub` (the builder, the identities of
the files and the prepared splits are :mod:`domains.hub_datasets`'): the completeness of a numbered series of
parquet shards, a split's image and label columns in Arrow form (never row by row in Python), and where a row is
stored."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from domains.errors import UserError
from domains.files import cache_dir
from domains.hub_datasets import HUB_CACHE, display_name
from domains.vision.image_decoding import Blob

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
    working folder), which neither would, so that an edited image would be served from the cache as before.
    A hub set's own files are its downloads: ``datasets`` stores a hub image folder's rows as paths into the
    cache the harness gives it (:func:`domains.hub_datasets.builder_for`), copies of the files whose URLs, pinned
    by commit, are the fingerprint's; a path there is read once resolved (``..`` and links), no other."""
    if isinstance(source, Path):
        own = {os.path.abspath(f) for files in builder.config.data_files.values() for f in files}

        def is_own(path: str) -> bool:
            return os.path.abspath(path) in own
    else:
        downloads = Path(os.path.realpath(cache_dir() / HUB_CACHE))

        def is_own(path: str) -> bool:
            return Path(os.path.realpath(path)).is_relative_to(downloads)
    bad = next((i for i, blob in enumerate(blobs) if isinstance(blob, str) and not is_own(blob)), None)
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
