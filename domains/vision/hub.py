"""Image datasets in the Hugging Face format: a hub id, or a local folder of the hub's parquet shards (each
image PNG or JPEG bytes, as the hub stores ``cifar10``, ``cifar100``, ``stl10``, ``mnist`` and most image
sets), read with the ``datasets`` library and decoded once into a uint8 tensor cache. This module loads, checks
and caches a set; :mod:`domains.hub_datasets` (shared with the text domain) finds and reads its files and splits,
:mod:`domains.vision.hub_reader` checks its shards and columns, :mod:`domains.vision.image_decoding` decodes its
images.

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
- **Decoding.** Every image at the target size (``image_size``, else the first image's shorter side), in
  parallel, with a progress bar on a terminal (:mod:`domains.vision.image_decoding`).
- **Cache.** The tensors are saved under ``cache_dir()/vision-hub/`` (atomically), keyed by the sha256 of
  every file read (for a hub id: the file URLs, each pinned to a commit), the columns and the size; a second
  run reads them back and decodes nothing. The same digests are the data fingerprint a record stores. A cache
  file that cannot be read back, or holds other files' images, is named in a warning and decoded again.
- **Checks.** A numbered series of shards (``train-00000-of-00005.parquet``) must be complete, and every label of
  a labelled split a class index: a missing shard or a label out of range is named, never a smaller or mislabelled
  set. Every file read is inside the folder (a ``README.md``'s ``configs: data_files`` may name others), and an
  image is read from a path only where that is one of the dataset's files (an image folder's ``train/<class>/
  *.png``): a parquet row holding another path is refused, since that file is in neither the fingerprint nor the
  cache key. A training set with a constant channel (std 0) cannot be normalised, and is refused.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from domains.base import require
from domains.errors import UserError
from domains.files import cache_dir, hash_jsonable, write_atomic
from domains.hub_datasets import (
    Wording,
    builder_for,
    display_name,
    file_identities,
    find_column,
    prepare_splits,
)
from domains.hub_datasets import locate as locate_dataset
from domains.vision.hub_reader import check_complete, check_image_paths, row_file, split_blobs, split_labels
from domains.vision.image_decoding import Blob, UndecodableImage, decode, open_image

PREFIX = "hf:"
WORDING = Wording("--dataset", PREFIX, "a local Hugging Face image dataset is a folder of its parquet shards, "
                  "e.g. plain_text/train-00000-of-00001.parquet, or a plain image folder, "
                  "train/<class>/*.png and test/<class>/*.png")
IMAGE_COLUMNS = ("img", "image")
LABEL_COLUMNS = ("label", "fine_label", "labels")
TEST_FRACTION = 0.2  # of train, held out (stratified, seed SPLIT_SEED) where a dataset has no test split
SPLIT_SEED = 0
CACHE_VERSION = 1  # bump when the cached tensors would change for the same files


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
    """The folder ``hf:<target>`` names, as given or under the data root, or ``target`` as a hub id
    (:func:`domains.hub_datasets.locate`)."""
    return locate_dataset(target, root, WORDING)


def shard_folder(candidates: list[Path]) -> Path | None:
    """The first of ``candidates`` that holds parquet shards, else None."""
    return next((c for c in candidates if c.is_dir() and next(c.glob("**/*.parquet"), None) is not None), None)


def load(source: Path | str, *, image_size: int = 0, image_column: str = "", label_column: str = "") -> HubImages:
    """The dataset in folder ``source`` (a Path) or at hub id ``source`` (a str), decoded at ``image_size``
    (0: the first image's shorter side), from the cache when the same files were decoded before."""
    datasets = require("datasets", "vision")
    builder = builder_for(datasets, source, WORDING)
    files = file_identities(builder, source)
    unread = sorted({os.path.relpath(p, source) for p in Path(source).glob("**/*.parquet")} - set(files)
                    if isinstance(source, Path) else ())
    if unread:
        warnings.warn(f"{source}: datasets reads no split from {', '.join(unread)} (a split name it does not know "
                      "without the dataset's README.md; data/<split>-00000-of-00001.parquet names any split)",
                      UserWarning, stacklevel=2)
    if isinstance(source, Path):
        check_complete(source)
    key = hash_jsonable({"version": CACHE_VERSION, "files": files, "image_size": image_size,
                         "image_column": image_column, "label_column": label_column})
    path = cache_dir() / "vision-hub" / f"{key[:32]}.pt"
    cached = _read_cache(path, files)
    if cached is None:
        cached = _decode_dataset(datasets, builder, source, files, image_size, image_column, label_column)
        write_atomic(path, lambda fh: torch.save(vars(cached), fh))
    _check_not_constant(cached.train[0], display_name(source))
    if cached.source["test_split"] != "test":
        warnings.warn(f"{display_name(source)} has no test split: the test set is {cached.source['test_split']}",
                      UserWarning, stacklevel=2)
    return cached


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


def _decode_dataset(datasets: Any, builder: Any, source: Path | str, files: dict[str, str], image_size: int,
                    image_column: str, label_column: str) -> HubImages:
    name = display_name(source)
    splits = prepare_splits(datasets, builder, source, files, bars=False)  # ours follows
    if "train" not in splits:
        raise UserError(f"{name} has no train split (its splits: {', '.join(splits)})")
    train = splits["train"]
    features = dict(train.features)
    img_col = find_column(features, image_column, IMAGE_COLUMNS, lambda f: isinstance(f, datasets.Image), "image",
                          "image_column", name)
    lab_col = find_column(features, label_column, LABEL_COLUMNS, lambda f: isinstance(f, datasets.ClassLabel),
                          "label", "label_column", name)
    label_feature = features[lab_col]
    test_key = next((s for s in ("test", "validation") if s in splits), None)
    wanted = ["train", *([test_key] if test_key else []), *(["unlabeled"] if "unlabeled" in splits else [])]
    y = {s: split_labels(splits[s], lab_col, name) for s in wanted}
    classes = (label_feature.num_classes if isinstance(label_feature, datasets.ClassLabel)
               else int(max(v.max(initial=-1) for v in y.values())) + 1)
    for s in wanted:  # a labelled split's labels are class indices; -1 (no label) belongs to unlabeled only
        bad = np.flatnonzero((y[s] < 0) | (y[s] >= classes)) if s != "unlabeled" else ()
        if len(bad):
            raise UserError(f"{row_file(builder, source, s, int(bad[0]), 'label')}: label {int(y[s][bad[0]])} "
                            f"is not a class index 0..{classes - 1} ({len(bad)} such rows in the {s} split)")
    blobs = {s: split_blobs(splits[s], img_col, name) for s in wanted}
    for s in wanted:
        check_image_paths(builder, source, s, blobs[s])
    size = image_size or _first_size(blobs["train"][0])
    try:
        decoded = {s: decode(blobs[s], size, s) for s in wanted}
    except UndecodableImage as exc:
        raise UserError(f"{row_file(builder, source, exc.split, exc.index)} cannot be decoded ({exc.reason}); "
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


def _check_not_constant(images: Tensor, name: str) -> None:
    """UserError for training images of which a channel holds one value: its std is 0, and normalising divides by
    it. Compared as uint8 (the float std of a constant channel may round to a tiny number instead of 0). Checked
    on every load, so that a cache decoded before the check is refused as well."""
    lowest, highest = images.amin(dim=(0, 2, 3)).tolist(), images.amax(dim=(0, 2, 3)).tolist()
    constant = [c for c, lo, hi in zip("RGB", lowest, highest) if lo == hi]
    if constant:
        raise UserError(f"{name}: every training image has the same value in channel {', '.join(constant)} "
                        "(pixel std 0), so the images cannot be normalised; check that they are the right images")


def _first_size(blob: Blob) -> int:
    try:
        with open_image(blob) as img:
            return min(img.size)
    except (OSError, ValueError) as exc:
        raise UserError(f"the first training image cannot be decoded ({exc})") from None
