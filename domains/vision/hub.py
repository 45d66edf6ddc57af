"""Image datasets in the Hugging Face format: a hub id, or a local folder of the hub's parquet shards (each
image PNG or JPEG bytes, as the hub stores ``cifar10``, ``cifar100``, ``stl10``, ``mnist`` and most image
sets), read with the ``datasets`` library and decoded once into a uint8 tensor cache.

- **Loading.** ``datasets.load_dataset_builder`` resolves the files (split names from the hub's file names,
  e.g. ``plain_text/train-00000-of-00001.parquet``), then ``download_and_prepare`` / ``as_dataset``, which is
  what ``datasets.load_dataset`` does; the split is read in Arrow form, never row by row in Python. A local
  folder needs no network; a hub id needs one the first time (``datasets`` caches it under the harness cache).
- **Columns.** The image column is ``img`` or ``image`` (else any ``Image`` feature), the label column
  ``label``, ``fine_label`` or ``labels`` (else any ``ClassLabel``); ``--set image_column=...`` and
  ``--set label_column=...`` name others.
- **Splits.** ``train`` and ``test``; without a test split the ``validation`` split, and without either a
  seeded, stratified 20% of ``train`` (a warning says which). An ``unlabeled`` split (STL-10) is kept for
  pretraining. A parquet file of the folder from which ``datasets`` reads no split (a split name it knows only
  from the dataset's README) is named in a warning.
- **Decoding.** PIL decodes each image (grey, palette and RGBA become RGB); one of another size than the
  target (``image_size``, else the first image's shorter side) is resized as :class:`images.FolderImages` does
  (shorter side, bilinear with antialiasing, centre crop). Chunks of images are decoded in parallel, in
  forked processes where the platform has them (32x32 PNGs are decoded faster than Python threads can share
  one interpreter), with a progress bar on a terminal.
- **Cache.** The tensors are saved under ``cache_dir()/vision-hub/`` (atomically), keyed by the sha256 of
  every file read (for a hub id: the file URLs, each pinned to a commit), the columns and the size; a second
  run reads them back and decodes nothing. The same digests are the data fingerprint a record stores. A cache
  file that cannot be read back, or holds other files' images, is named in a warning and decoded again.
- **Checks.** A numbered series of shards (``train-00000-of-00005.parquet``) must be complete, and every label of
  a labelled split a class index: a missing shard or a label out of range is named, never a smaller or mislabelled
  set.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from domains.base import require
from domains.errors import UserError
from domains.files import cache_dir, hash_files, hash_jsonable, write_atomic

PREFIX = "hf:"
HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")  # <name> or <owner>/<name>, as the hub spells ids
IMAGE_COLUMNS = ("img", "image")
LABEL_COLUMNS = ("label", "fine_label", "labels")
TEST_FRACTION = 0.2  # of train, held out (stratified, seed SPLIT_SEED) where a dataset has no test split
SPLIT_SEED = 0
CHUNK = 1024  # images per decoding task
CACHE_VERSION = 1  # bump when the cached tensors would change for the same files

Blob = bytes | str  # encoded bytes, or the path of a local image file (image-folder datasets)
_BLOBS: list[Blob] = []  # the images being decoded; forked workers inherit the list instead of receiving it


class UndecodableImage(UserError):
    """An image that PIL cannot decode: its position in its split, for the caller to name the file."""

    def __init__(self, index: int, split: str, reason: str):
        super().__init__(f"image {index} of the {split} split cannot be decoded ({reason})")
        self.index, self.split, self.reason = index, split, reason


@dataclass
class HubImages:
    """The decoded splits (uint8 ``[N, 3, S, S]`` and long labels, -1 unlabelled) of one hub dataset."""

    train: tuple[Tensor, Tensor]
    test: tuple[Tensor, Tensor]
    unlabeled: tuple[Tensor, Tensor] | None
    num_classes: int
    image_size: int
    mean: tuple[float, float, float]  # per-channel statistics of the training pixels in [0, 1]
    std: tuple[float, float, float]
    source: dict[str, Any]  # what the fingerprint records: the files read (sha256) and how the test set was made


def is_hub_name(name: str) -> bool:
    """``hf:<hub id or folder>``: a dataset name the vision domain reads through ``datasets``."""
    return name.startswith(PREFIX) and len(name) > len(PREFIX)


def locate(target: str, root: Path) -> Path | str:
    """The folder ``target`` names (as given, else under the data root), or ``target`` as a hub id; UserError for a
    path (absolute, ``./``, ``~``) that is no folder, and for a target that is neither a folder nor a hub id. Only
    a relative path without ``..`` is looked for under the data root: a name never reaches outside it."""
    given = Path(target).expanduser()
    inside = not target.startswith("~") and not given.is_absolute() and ".." not in given.parts
    candidates = list(dict.fromkeys((given, *([Path(root) / target] if inside else []))))
    for folder in candidates:
        if folder.is_dir():
            return folder.resolve()
    if target.startswith(("/", ".", "~")):
        raise UserError(f"no folder {' nor '.join(map(str, candidates))}; a local Hugging Face dataset is a folder "
                        "of its parquet shards, e.g. plain_text/train-00000-of-00001.parquet")
    if not HUB_ID.fullmatch(target) or ".." in target:
        raise UserError(f"'{PREFIX}{target}' is neither a folder nor a hub id (<name> or <owner>/<name>: letters, "
                        "digits, '-', '_' and '.'); a folder's path starts with /, ./, ../ or ~")
    return target


def shard_folder(candidates: list[Path]) -> Path | None:
    """The first of ``candidates`` that holds parquet shards, else None."""
    return next((c for c in candidates if c.is_dir() and next(c.glob("**/*.parquet"), None) is not None), None)


def load(source: Path | str, *, image_size: int = 0, image_column: str = "", label_column: str = "") -> HubImages:
    """The dataset in folder ``source`` (a Path) or at hub id ``source`` (a str), decoded at ``image_size``
    (0: the first image's shorter side), from the cache when the same files were decoded before."""
    datasets = require("datasets", "vision")
    builder = _builder(datasets, source)
    files = _files(builder, source)
    unread = sorted({os.path.relpath(p, source) for p in Path(source).glob("**/*.parquet")} - set(files)
                    if isinstance(source, Path) else ())
    if unread:
        warnings.warn(f"{source}: datasets reads no split from {', '.join(unread)} (a split name it does not know "
                      "without the dataset's README.md; data/<split>-00000-of-00001.parquet names any split)",
                      UserWarning, stacklevel=2)
    if isinstance(source, Path):
        _check_complete(source)
    key = hash_jsonable({"version": CACHE_VERSION, "files": files, "image_size": image_size,
                         "image_column": image_column, "label_column": label_column})
    path = cache_dir() / "vision-hub" / f"{key[:32]}.pt"
    cached = _read_cache(path, files)
    if cached is None:
        cached = _decode_dataset(datasets, builder, source, files, image_size, image_column, label_column)
        write_atomic(path, lambda fh: torch.save(vars(cached), fh))
    if cached.source["test_split"] != "test":
        warnings.warn(f"{_name(source)} has no test split: the test set is {cached.source['test_split']}",
                      UserWarning, stacklevel=2)
    return cached


SHARD_NAME = re.compile(r"(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet")


def _check_complete(source: Path) -> None:
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


def _read_cache(path: Path, files: dict[str, str]) -> HubImages | None:
    """The decoded set cached at ``path`` when it is sound and was decoded from ``files``; None when there is none,
    or (with a warning naming the file and what is wrong) when it is damaged or foreign: it is then decoded again."""
    if not path.is_file():
        return None
    try:
        fields = torch.load(path, weights_only=True)
        if not isinstance(fields, dict) or set(fields) != set(HubImages.__dataclass_fields__):
            raise ValueError("not the fields of a decoded set")
        cached = HubImages(**fields)
        if not isinstance(cached.source, dict) or cached.source.get("files") != files:
            raise ValueError("decoded from other files")
        size = cached.image_size
        for split in ("train", "test", "unlabeled"):
            pair = getattr(cached, split)
            if pair is None and split == "unlabeled":
                continue
            images, labels = pair
            if images.dtype != torch.uint8 or images.ndim != 4 or tuple(images.shape[1:]) != (3, size, size) \
                    or labels.dtype != torch.int64 or labels.shape != (images.shape[0],):
                raise ValueError(f"the {split} split has tensors of the wrong type or shape")
        return cached
    except Exception as exc:  # noqa: BLE001 - torch.load fails in many ways on a damaged file; rebuilt all the same
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        warnings.warn(f"the decoded-image cache {path} is damaged or was not written by the harness ({reason}); "
                      "decoding the images again", UserWarning, stacklevel=3)
        return None


def _name(source: Path | str) -> str:
    return str(source) if isinstance(source, Path) else f"hub dataset '{source}'"


def _builder(datasets: Any, source: Path | str) -> Any:
    """``datasets.load_dataset_builder`` for a folder or a hub id, its files resolved; UserError when there is
    nothing ``datasets`` can read there, or no network for a hub id."""
    try:
        return datasets.load_dataset_builder(str(source), cache_dir=str(cache_dir() / "hf-datasets"))
    except (OSError, ValueError) as exc:  # ConnectionError, DatasetNotFoundError, EmptyDatasetError, bad ids
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(source, Path):
            raise UserError(f"{source}: no dataset files that datasets can read ({reason}); a Hugging Face image "
                            "dataset is a folder of parquet shards, e.g. data/train-00000-of-00001.parquet") from None
        raise UserError(f"cannot load '{source}' from the Hugging Face hub ({reason}); without a network, download "
                        f"it where there is one (huggingface-cli download {source} --repo-type dataset --local-dir "
                        "<folder>) and pass --dataset hf:<folder>") from None


def _files(builder: Any, source: Path | str) -> dict[str, str]:
    """What identifies the files the builder reads: each local file's sha256 (by its path inside the folder),
    or each hub file's URL, which names the commit it is pinned to."""
    data_files = builder.config.data_files or {}
    names = sorted({str(f) for split in data_files.values() for f in split})
    if not names:
        raise UserError(f"{_name(source)}: datasets found no data files")
    if isinstance(source, Path):
        return {os.path.relpath(f, source): hash_files([Path(f)]) for f in names}
    return {f: "pinned by the URL's commit" for f in names}


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


def _prepare(datasets: Any, builder: Any, source: Path | str, files: dict[str, str]) -> Any:
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
        raise UserError(reason or f"{_name(source)}: datasets could not read it ({exc.__cause__ or exc})") from None
    except OSError as exc:
        raise UserError(f"{_name(source)}: cannot download or read it ({exc})") from None
    finally:
        if not bars_were_off:
            datasets.enable_progress_bars()


def _column(features: dict, given: str, preferred: tuple[str, ...], kind: Callable[[Any], bool], what: str,
            option: str, name: str) -> str:
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


def _labels(split: Any, column: str, name: str) -> np.ndarray:
    """The split's class indices (int64); -1 for every row of a split without the column (unlabelled images)."""
    if column not in split.column_names:
        return np.full(len(split), -1, dtype=np.int64)
    values = split.data.column(column).to_numpy(zero_copy_only=False)
    if not np.issubdtype(values.dtype, np.integer):
        raise UserError(f"{name}: the label column '{column}' holds {split.features[column]}, not class indices; "
                        "name another with --set label_column=<column>")
    return values.astype(np.int64)


def _blobs(split: Any, column: str, name: str) -> list[Blob]:
    """The encoded images of a split's column: its bytes, or its path where a row has no bytes."""
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


def _decode_dataset(datasets: Any, builder: Any, source: Path | str, files: dict[str, str], image_size: int,
                    image_column: str, label_column: str) -> HubImages:
    name = _name(source)
    splits = _prepare(datasets, builder, source, files)
    if "train" not in splits:
        raise UserError(f"{name} has no train split (its splits: {', '.join(splits)})")
    train = splits["train"]
    features = dict(train.features)
    img_col = _column(features, image_column, IMAGE_COLUMNS, lambda f: isinstance(f, datasets.Image), "image",
                      "image_column", name)
    lab_col = _column(features, label_column, LABEL_COLUMNS, lambda f: isinstance(f, datasets.ClassLabel), "label",
                      "label_column", name)
    label_feature = features[lab_col]
    test_key = next((s for s in ("test", "validation") if s in splits), None)
    wanted = ["train", *([test_key] if test_key else []), *(["unlabeled"] if "unlabeled" in splits else [])]
    y = {s: _labels(splits[s], lab_col, name) for s in wanted}
    classes = (label_feature.num_classes if isinstance(label_feature, datasets.ClassLabel)
               else int(max(v.max(initial=-1) for v in y.values())) + 1)
    for s in wanted:  # a labelled split's labels are class indices; -1 (no label) belongs to unlabeled only
        bad = np.flatnonzero((y[s] < 0) | (y[s] >= classes)) if s != "unlabeled" else ()
        if len(bad):
            raise UserError(f"{_row_file(builder, source, s, int(bad[0]), 'label')}: label {int(y[s][bad[0]])} "
                            f"is not a class index 0..{classes - 1} ({len(bad)} such rows in the {s} split)")
    blobs = {s: _blobs(splits[s], img_col, name) for s in wanted}
    size = image_size or _first_size(blobs["train"][0])
    try:
        decoded = {s: decode(blobs[s], size, s) for s in wanted}
    except UndecodableImage as exc:
        raise UserError(f"{_row_file(builder, source, exc.split, exc.index)} cannot be decoded ({exc.reason}); "
                        "download it again") from None
    if test_key is None:
        keep, held = _seeded_split(y["train"])
        test_key, test_split = "test", (f"a seeded, stratified {TEST_FRACTION:.0%} of train (seed {SPLIT_SEED}, "
                                        f"{len(held)} images, the rest trains)")
        decoded["test"], decoded["train"] = decoded["train"][held], decoded["train"][keep]
        y["test"], y["train"] = y["train"][held], y["train"][keep]
    else:
        test_split = "test" if test_key == "test" else "the validation split"
    mean, std = _channel_stats(decoded["train"])
    source_info = {"files": files, "columns": [img_col, lab_col], "test_split": test_split}
    if not isinstance(source, Path):
        source_info["hub_id"] = source
    pair = {s: (decoded[s], torch.from_numpy(y[s])) for s in decoded}
    return HubImages(train=pair["train"], test=pair[test_key], unlabeled=pair.get("unlabeled"), num_classes=classes,
                     image_size=size, mean=mean, std=std, source=source_info)


def _row_file(builder: Any, source: Path | str, split: str, index: int, what: str = "image") -> str:
    """Where row ``index`` of ``split`` is stored: the shard and its row (a local folder), else the split's row."""
    if isinstance(source, Path):
        import pyarrow.parquet as pq

        start = 0
        for f in builder.config.data_files.get(split, []):
            rows = pq.read_metadata(f).num_rows if str(f).endswith(".parquet") else 0
            if index < start + rows:
                return f"{f}: the {what} in row {index - start}"
            start += rows
    return f"{_name(source)}: {what} {index} of the {split} split"


def _seeded_split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held-out) indices of ``train``, stratified by label where every class has two images."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labels))
    try:
        keep, held = train_test_split(index, test_size=TEST_FRACTION, stratify=labels, random_state=SPLIT_SEED)
    except ValueError:  # a class with a single image cannot be stratified
        keep, held = train_test_split(index, test_size=TEST_FRACTION, random_state=SPLIT_SEED)
    return np.sort(keep), np.sort(held)


def _channel_stats(images: Tensor) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Per-channel mean and std of uint8 images, in [0, 1] (sums in float64, in chunks)."""
    total = torch.zeros(3, dtype=torch.float64)
    squares = torch.zeros(3, dtype=torch.float64)
    for chunk in torch.split(images, 4096):
        x = chunk.double().div_(255.0)
        total += x.sum(dim=(0, 2, 3))
        squares += x.square().sum(dim=(0, 2, 3))
    n = max(1, images.numel() // 3)
    mean = total / n
    std = (squares / n - mean.square()).clamp_min(0).sqrt()
    return tuple(mean.tolist()), tuple(std.tolist())


def _open(blob: Blob):
    from PIL import Image

    return Image.open(io.BytesIO(blob) if isinstance(blob, bytes) else blob)


def _first_size(blob: Blob) -> int:
    try:
        with _open(blob) as img:
            return min(img.size)
    except (OSError, ValueError) as exc:
        raise UserError(f"the first training image cannot be decoded ({exc})") from None


def _pixels(blob: Blob, size: int) -> np.ndarray:
    """One image as uint8 ``[size, size, 3]``, or ``[size, size, 1]`` for a grey one (its value is every RGB
    channel's, as PIL's conversion gives), resized (shorter side) and centre-cropped where needed."""
    with _open(blob) as img:
        if img.mode not in ("L", "RGB"):
            img = img.convert("RGB")
        if img.size != (size, size):
            tvf = require("torchvision.transforms.functional", "vision")
            img = tvf.center_crop(tvf.resize(img, size), size)  # PIL images: PIL does the work, as FolderImages
        pixels = np.asarray(img)
    return pixels[..., None] if pixels.ndim == 2 else pixels


def _decode_range(lo: int, hi: int, size: int) -> np.ndarray | tuple[int, str]:
    """Images ``lo:hi`` of ``_BLOBS``, or (index, reason) of the first that cannot be decoded."""
    from PIL import UnidentifiedImageError

    out = np.empty((hi - lo, size, size, 3), np.uint8)
    for i in range(lo, hi):
        try:
            out[i - lo] = _pixels(_BLOBS[i], size)
        except UnidentifiedImageError:
            return i, "not in an image format PIL knows"
        except (OSError, ValueError, SyntaxError) as exc:  # what PIL raises for damaged data
            return i, f"{type(exc).__name__}: {exc}"
    return out


def _workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _executor(workers: int) -> Executor:
    """Forked processes (each inherits ``_BLOBS``; a worker touches PIL and numpy only, never torch's thread
    pools), else threads where the platform cannot fork."""
    import multiprocessing

    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    return ThreadPoolExecutor(workers)


def decode(blobs: list[Blob], size: int, split: str = "train", workers: int = 0) -> Tensor:
    """uint8 ``[N, 3, size, size]`` from the encoded images of ``split``, ``CHUNK`` at a time on ``workers``
    processes (0: every core this process may use), with a progress bar on a terminal; UserError naming the
    first image that cannot be decoded."""
    from tqdm.auto import tqdm

    global _BLOBS
    require("torchvision.transforms.functional", "vision")  # imported once here, inherited by forked workers
    out = np.empty((len(blobs), size, size, 3), np.uint8)
    chunks = [(lo, min(lo + CHUNK, len(blobs))) for lo in range(0, len(blobs), CHUNK)]
    _BLOBS = blobs
    try:
        with _executor(min(workers or _workers(), len(chunks))) as pool, \
                tqdm(total=len(blobs), desc=f"decoding {split}", unit="img", leave=False, disable=None) as bar:
            tasks = {pool.submit(_decode_range, lo, hi, size): lo for lo, hi in chunks}
            for task in as_completed(tasks):
                result = task.result()
                if isinstance(result, tuple):
                    for pending in tasks:
                        pending.cancel()
                    raise UndecodableImage(result[0], split, result[1])
                lo = tasks[task]
                out[lo:lo + len(result)] = result
                bar.update(len(result))
    finally:
        _BLOBS = []
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()
