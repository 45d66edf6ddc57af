"""The vision datasets, loaded (:func:`load`) as :mod:`domains.vision.images` holds them: uint8 tensors
``[N, 3, H, W]`` (or image folders streamed at a fixed size), with class labels (-1: unlabelled) and, for the
biased-data track, bias labels.

- ``digits``: scikit-learn's 1,797 handwritten 8x8 digits (shipped in the package), upsampled, with a
  fixed stratified 70/30 split. ``biased-digits``: the same digits on a background colour tied to the
  class with probability ``rho`` (test: rho 0.1), built as Biased-MNIST. ``first_classes`` C (the config's
  ``classes``) keeps the digits 0..C-1 of both, for a known class prior: τ+ = Σ_c p_c², about 1/C (the
  digits' classes are nearly balanced); the colouring of the kept images is the one of the ten-class set.
- Biased-MNIST (Bahng et al., ICML 2020), coloured as Barbano et al. ran it (:mod:`domains.vision.colouring`);
  the unbiased test set uses rho = 0.1. Difference: the colouring is one draw (``colour_seed``, 0 by default) for
  every seed of a run, where theirs is redrawn with each trial's seed; ``colour_seed`` k draws the k-th colouring.
- CIFAR-10/100, STL-10 (pretraining on train + unlabeled), MNIST in either layout under the data root:
  torchvision's files, or a folder of the Hugging Face hub's parquet shards of that set (``cifar10/``,
  ``cifar100/``, ``stl10/``, ``mnist/``, or the hub id's path, e.g. ``uoft-cs/cifar10/``), read by
  :mod:`domains.vision.hub`; torchvision's is used where both are. ImageNet-100 (the CMC class list),
  Corrupted CIFAR-10 and bFFHQ (the layouts of Barbano et al.) as image folders.
- ``hf:<hub id or folder>``: any Hugging Face image dataset with class labels (:mod:`domains.vision.hub`),
  normalised with its training pixels' per-channel mean and std.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from domains.base import DatasetSpec, require
from domains.errors import DatasetMissingError, UserError
from domains.files import hash_files, hash_jsonable
from domains.vision import hub
from domains.vision.colouring import biased, biased_mnist
from domains.vision.images import FolderImages, ImageSet, VisionData
from domains.vision.mnist import read_mnist

DATASETS = {
    "digits": DatasetSpec("digits", "scikit-learn's 1,797 handwritten 8x8 digits, upsampled (embedded); "
                          "--set classes=C keeps the digits 0..C-1", False),
    "biased-digits": DatasetSpec("biased-digits", "the digits on a class-tied background colour (rho), "
                                 "unbiased test with rho 0.1 (embedded)", False),
    "cifar10": DatasetSpec("cifar10", "CIFAR-10, <data root>/cifar-10-batches-py (torchvision) or the hub's "
                           "parquet shards in <data root>/cifar10"),
    "cifar100": DatasetSpec("cifar100", "CIFAR-100 (fine labels), <data root>/cifar-100-python (torchvision) or "
                            "the hub's parquet shards in <data root>/cifar100"),
    "stl10": DatasetSpec("stl10", "STL-10, pretraining on train+unlabeled, <data root>/stl10_binary (torchvision) "
                         "or the hub's parquet shards in <data root>/stl10"),
    "mnist": DatasetSpec("mnist", "MNIST as RGB, <data root>/MNIST/raw (torchvision) or the hub's parquet shards "
                         "in <data root>/mnist"),
    "imagenet100": DatasetSpec("imagenet100", "ImageNet-100 (CMC class list), <data root>/imagenet100/{train,val}",
                               needs_download=False),
    "biased-mnist": DatasetSpec("biased-mnist", "Biased-MNIST (Bahng et al. 2020) from <data root>/MNIST/raw or the "
                                "hub's parquet shards in <data root>/mnist"),
    "corrupted-cifar10": DatasetSpec("corrupted-cifar10", "Corrupted CIFAR-10 with bias labels, "
                                     "<data root>/cifar10c/<bias_percent>/{align,conflict} and test",
                                     needs_download=False),
    "bffhq": DatasetSpec("bffhq", "bFFHQ with bias labels, <data root>/bffhq/<bias_percent>/{align,conflict} and test",
                         needs_download=False),
}
BIASED = ("biased-digits", "biased-mnist", "corrupted-cifar10", "bffhq")
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
CIFAR_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
HALF_STATS = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
MNIST_STATS = ((0.1307, 0.1307, 0.1307), (0.3081, 0.3081, 0.3081))
# The sets that load in either layout: torchvision's folder under the data root and how to get it; the hub id.
TORCHVISION = {
    "cifar10": ("cifar-10-batches-py", "extract https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz there"),
    "cifar100": ("cifar-100-python", "extract https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz there"),
    "stl10": ("stl10_binary", "extract https://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz there"),
    "mnist": ("MNIST/raw", "put train-images-idx3-ubyte(.gz), train-labels-idx1-ubyte(.gz), "
              "t10k-images-idx3-ubyte(.gz) and t10k-labels-idx1-ubyte(.gz) there"),
}
HUB_IDS = {"cifar10": "uoft-cs/cifar10", "cifar100": "uoft-cs/cifar100", "stl10": "tanganke/stl10",
           "mnist": "ylecun/mnist"}
# ImageNet-100: the 100 WordNet ids of Tian et al. (CMC, imagenet100.txt); class i is the i-th when sorted.
IMAGENET100 = tuple(sorted("""
    n02869837 n01749939 n02488291 n02107142 n13037406 n02091831 n04517823 n04589890 n03062245 n01773797
    n01735189 n07831146 n07753275 n03085013 n04485082 n02105505 n01983481 n02788148 n03530642 n04435653
    n02086910 n02859443 n13040303 n03594734 n02085620 n02099849 n01558993 n04493381 n02109047 n04111531
    n02877765 n04429376 n02009229 n01978455 n02106550 n01820546 n01692333 n07714571 n02974003 n02114855
    n03785016 n03764736 n03775546 n02087046 n07836838 n04099969 n04592741 n03891251 n02701002 n03379051
    n02259212 n07715103 n03947888 n04026417 n02326432 n03637318 n01980166 n02113799 n02086240 n03903868
    n02483362 n04127249 n02089973 n03017168 n02093428 n02804414 n02396427 n04418357 n02172182 n01729322
    n02113978 n03787032 n02089867 n02119022 n03777754 n04238763 n02231487 n03032252 n02138441 n02104029
    n03837869 n03494278 n04136333 n03794056 n03492542 n02018207 n04067472 n03930630 n03584829 n02123045
    n04229816 n02100583 n03642806 n04336792 n03259280 n02116738 n02108089 n03424325 n01855672 n02090622
""".split()))
SPLIT_SEED = 0  # the digits split is fixed, and the colouring is the config's draw: seeds vary training only
UNBIASED_TEST_RHO = 0.1


def _colour_seeds(colour_seed: int) -> tuple[int, int]:
    """The generator seeds of the training and the test colouring of draw ``colour_seed`` (0: 0 and 1, the draw
    of every run before the option)."""
    return SPLIT_SEED + 2 * colour_seed, SPLIT_SEED + 2 * colour_seed + 1


def _digits(size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gray digits ``[N, 1, size, size]`` in [0, 1] and labels, split 70/30 (stratified, fixed)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    gray = torch.from_numpy(bunch.images.astype(np.float32) / 16.0)[:, None]
    gray = F.interpolate(gray, size=(size, size), mode="bilinear", align_corners=False).clamp(0, 1)
    labels = torch.from_numpy(bunch.target.astype(np.int64))
    tr, te = train_test_split(np.arange(len(labels)), test_size=0.3, stratify=bunch.target,
                              random_state=SPLIT_SEED)
    tr, te = torch.from_numpy(tr), torch.from_numpy(te)
    return gray[tr], labels[tr], gray[te], labels[te]


def _first_classes(images: ImageSet, classes: int) -> ImageSet:
    """The images of the classes 0..classes-1, in their order."""
    keep = images.labels < classes
    return ImageSet(images.images[keep], images.labels[keep], None if images.bias is None else images.bias[keep])


def _gray_to_rgb(gray: Tensor) -> Tensor:
    return (gray * 255.0).round().to(torch.uint8).expand(-1, 3, -1, -1).contiguous()


def _resize(images: Tensor, size: int) -> Tensor:
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    out = F.interpolate(images.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return out.round().clamp(0, 255).to(torch.uint8)


def _missing(name: str, where: Path, how: str) -> DatasetMissingError:
    return DatasetMissingError(f"{name} not found under {where}: {how}")


def _missing_layouts(name: str, root: Path) -> DatasetMissingError:
    """The error for a set of :data:`TORCHVISION` in neither layout: where each is looked for, how to get it."""
    folder, how = TORCHVISION[name]
    hub_id = HUB_IDS[name]
    return DatasetMissingError(
        f"{name} not found under {root}, in either layout. torchvision's: {how} ({root / folder}), or pass "
        f"--set download=true where the network allows. The Hugging Face hub's: the parquet shards of {hub_id} in "
        f"{root / name} or {root / hub_id} (huggingface-cli download {hub_id} --repo-type dataset --local-dir "
        f"{root / name})")


def _named(name: str, root: Path, download: bool, image_size: int, image_column: str,
           label_column: str) -> tuple[tuple[ImageSet, ImageSet, ImageSet], dict | None]:
    """A set of :data:`TORCHVISION` from torchvision's files, else from the hub's parquet shards under the data
    root; the hub source's description (files read, for the fingerprint) or None."""
    shards = hub.shard_folder([root / name, root / HUB_IDS[name]])
    if shards is None or (root / TORCHVISION[name][0]).is_dir():
        try:
            return _torchvision(name, root, download), None
        except DatasetMissingError:
            if shards is None:
                raise
    found = hub.load(shards, image_size=image_size, image_column=image_column, label_column=label_column)
    return _hub_parts(found), found.source


def _hub_parts(found: hub.HubImages) -> tuple[ImageSet, ImageSet, ImageSet]:
    """(pretrain, train, test) of a hub set; an ``unlabeled`` split joins pretraining with label -1 (STL-10)."""
    train, test = ImageSet(*found.train), ImageSet(*found.test)
    if found.unlabeled is None:
        return train, train, test
    images, labels = found.unlabeled
    pretrain = ImageSet(torch.cat([train.images, images]), torch.cat([train.labels, torch.full_like(labels, -1)]))
    return pretrain, train, test


def _torchvision(name: str, root: Path, download: bool) -> tuple[ImageSet, ImageSet, ImageSet]:
    if name == "mnist":
        d_tr, y_tr, d_te, y_te = read_mnist(root, download, lambda: _missing_layouts("mnist", root))
        train, test = (ImageSet(d[:, None].expand(-1, 3, -1, -1), y) for d, y in ((d_tr, y_tr), (d_te, y_te)))
        return train, train, test
    tvd = require("torchvision.datasets", "vision")
    cls = {"cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100, "stl10": tvd.STL10}[name]
    try:
        if name == "stl10":
            parts = [cls(str(root), split=s, download=download) for s in ("train+unlabeled", "train", "test")]
            return tuple(ImageSet(torch.from_numpy(p.data), torch.as_tensor(p.labels, dtype=torch.long))
                         for p in parts)
        train, test = (cls(str(root), train=t, download=download) for t in (True, False))
    except (RuntimeError, OSError, ValueError) as exc:  # torchvision: "Dataset not found or corrupted"; no network
        folder = root / TORCHVISION[name][0]
        if folder.is_dir() and not download:  # there, but a file is missing or damaged: not "not found"
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise UserError(f"{folder}: torchvision cannot read it ({reason}): a file is missing, truncated or "
                            f"damaged (torchvision checks each file's md5); {TORCHVISION[name][1][:1].lower()}"
                            f"{TORCHVISION[name][1][1:]} again") from None
        raise _missing_layouts(name, root) from exc
    train, test = (ImageSet(torch.from_numpy(d.data).permute(0, 3, 1, 2).contiguous(),
                            torch.as_tensor(d.targets, dtype=torch.long)) for d in (train, test))
    return train, train, test


def _mnist(root: Path, download: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, dict | None]:
    """uint8 digits ``[N, 28, 28]`` and labels of the MNIST train and test sets, from either layout, and the
    hub source (or None)."""
    (train, _, test), source = _named("mnist", root, download, 0, "", "")
    return train.images[:, 0], train.labels, test.images[:, 0], test.labels, source


def _imagenet100(root: Path, size: int) -> tuple[ImageSet, ImageSet, ImageSet]:
    wnids = IMAGENET100
    base = next((root / d for d in ("imagenet100", "imagenet") if (root / d / "train").is_dir()), None)
    if base is None:
        raise _missing("ImageNet-100", root / "imagenet100", "make train/ and val/ with one folder per class "
                       "(the WordNet ids of IMAGENET100 in domains/vision/data.py); a full ImageNet under "
                       "<data root>/imagenet/ works too")
    out = []
    for split in ("train", "val"):
        absent = [w for w in wnids if not (base / split / w).is_dir()]
        if absent:
            raise _missing("ImageNet-100", base / split, f"{len(absent)} class folders missing, e.g. {absent[0]}")
        files = [(p, c) for c, w in enumerate(wnids) for p in sorted((base / split / w).iterdir()) if p.is_file()]
        out.append(ImageSet(FolderImages([p for p, _ in files], size), torch.tensor([c for _, c in files])))
    return out[0], out[0], out[1]


def _bias_folder(name: str, root: Path, percent: str, size: int) -> tuple[ImageSet, ImageSet, ImageSet]:
    """LfF / Barbano et al. layout: ``<name>/<percent>/{align,conflict}/<class>/*_<label>_<bias>.png`` and
    ``<name>/test/...``; label and bias are read from the file names."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", percent) or ".." in percent:
        raise UserError(f"bias_percent '{percent}' is not a folder name (letters, digits, '.', '_', '-'; e.g. 0.5pct): "
                        f"it names a folder under the set's folder, never a path")
    folder = {"corrupted-cifar10": "cifar10c", "bffhq": "bffhq"}[name]
    base = root / folder

    def load(paths: list[Path]) -> ImageSet:
        labels, bias = [], []
        for path in paths:
            parts = path.stem.split("_")
            if len(parts) < 2 or not (parts[-2].isdigit() and parts[-1].isdigit()):
                raise UserError(f"{path}: the file name does not end in _<label>_<bias> (digits), as every image of "
                                f"{base} must (<id>_<label>_<bias>.<ext>); move other files out of the folder")
            labels.append(int(parts[-2]))
            bias.append(int(parts[-1]))
        return ImageSet(FolderImages(paths, size), torch.tensor(labels), torch.tensor(bias))

    train = sorted(p for sub in ("align", "conflict") for p in (base / percent / sub).glob("**/*.*") if p.is_file())
    test = sorted(p for p in (base / "test").glob("**/*.*") if p.is_file())
    if not train or not test:
        raise _missing(name, base, f"put {percent}/align/, {percent}/conflict/ and test/ there with files "
                       "named <id>_<label>_<bias>.<ext> (the layout of Barbano et al. / LfF)")
    train_set = load(train)
    return train_set, train_set, load(test)


def load(name: str, root: Path, *, image_size: int = 0, rho: float = 0.99, bias_percent: str = "0.5pct",
         download: bool = False, first_classes: int = 0, image_column: str = "",
         label_column: str = "", colour_seed: int = 0) -> VisionData:
    """The dataset ``name`` at ``image_size`` (0: its own size); digits and biased digits: only the classes
    0..``first_classes``-1 (0: all ten); biased digits and Biased-MNIST: the colouring's draw ``colour_seed``."""
    root = Path(root)
    if colour_seed and name not in BIASED[:2]:
        raise UserError(f"colour_seed={colour_seed}: only biased-digits and biased-mnist are coloured here, not "
                        f"{name} (leave colour_seed at 0)")
    train_seed, test_seed = _colour_seeds(colour_seed)
    stats = CIFAR_STATS
    source: dict | None = None  # a set read in the hub's format: the files read (their sha256), the columns
    if first_classes and name not in ("digits", "biased-digits"):
        raise UserError(f"classes={first_classes}: only digits and biased-digits keep their first classes; "
                        f"{name} has all of its own (classes=0)")
    if first_classes and not 2 <= first_classes <= 10:
        raise UserError(f"classes must lie in 2..10 (digits has 10 classes; 0 keeps all), got {first_classes}")
    if name in ("digits", "biased-digits"):
        size = image_size or 16  # twice the original 8x8: crops keep sub-pixel detail, a CPU stays quick
        g_tr, y_tr, g_te, y_te = _digits(size)
        stats, classes = HALF_STATS, 10
        if name == "digits":
            train, test = ImageSet(_gray_to_rgb(g_tr), y_tr), ImageSet(_gray_to_rgb(g_te), y_te)
        else:
            train, test = biased(g_tr, y_tr, rho, train_seed), biased(g_te, y_te, UNBIASED_TEST_RHO, test_seed)
        if first_classes:
            classes = first_classes
            train, test = _first_classes(train, classes), _first_classes(test, classes)
        parts = (train, train, test)
    elif name == "biased-mnist":
        size, stats, classes = image_size or 28, HALF_STATS, 10
        d_tr, y_tr, d_te, y_te, source = _mnist(root, download)
        train, test = biased_mnist(d_tr, y_tr, rho, train_seed), biased_mnist(d_te, y_te, UNBIASED_TEST_RHO,
                                                                              test_seed)
        train, test = (ImageSet(_resize(p.images, size), p.labels, p.bias) for p in (train, test))
        parts = (train, train, test)
    elif name in TORCHVISION:
        parts, source = _named(name, root, download, image_size, image_column, label_column)
        size = image_size or parts[0].images.shape[-1]
        resized = {id(p): ImageSet(_resize(p.images, size), p.labels) for p in parts}  # a shared split stays so
        parts = tuple(resized[id(p)] for p in parts)
        classes = int(parts[1].labels.max()) + 1
        stats = {"stl10": IMAGENET_STATS, "mnist": MNIST_STATS}.get(name, CIFAR_STATS)
    elif hub.is_hub_name(name):
        found = hub.load(hub.locate(name[len(hub.PREFIX):], root), image_size=image_size,
                         image_column=image_column, label_column=label_column)
        parts, source = _hub_parts(found), found.source
        size, classes, stats = found.image_size, found.num_classes, (found.mean, found.std)
    elif name == "imagenet100":
        size, stats, classes = image_size or 224, IMAGENET_STATS, 100
        parts = _imagenet100(root, size * 8 // 7)  # stored at 256 for 224, cropped on the device
    elif name in ("corrupted-cifar10", "bffhq"):
        size = image_size or (32 if name == "corrupted-cifar10" else 224)
        parts = _bias_folder(name, root, bias_percent, size)
        classes = int(parts[1].labels.max()) + 1
        stats = CIFAR_STATS if name == "corrupted-cifar10" else IMAGENET_STATS
    else:
        raise DatasetMissingError(f"unknown vision dataset '{name}'; available: {', '.join(DATASETS)}")
    data = VisionData(name, *parts, num_classes=classes, image_size=size, mean=stats[0], std=stats[1])
    data.fingerprint = fingerprint(data, rho=rho if name in BIASED[:2] else None,
                                   classes=first_classes if 0 < first_classes < 10 else None,
                                   colour_seed=colour_seed or None)
    if source is not None:
        data.fingerprint["source"] = source
    return data


def fingerprint(data: VisionData, **params) -> dict:
    """sha256 of the pixels and labels (in-memory sets) or of the file list (folders), and sizes."""
    parts, seen = [], {}
    for split in (data.pretrain, data.train, data.test):
        if id(split) in seen:  # STL-10 aside, pretraining and linear evaluation share the train set
            parts.append(seen[id(split)])
            continue
        if isinstance(split.images, Tensor):
            pixels = _tensor_hash(split.images)
        else:
            pixels = _folder_hash(split.images.paths)
        bias = None if split.bias is None else _tensor_hash(split.bias)
        seen[id(split)] = {"n": len(split), "pixels": pixels, "labels": _tensor_hash(split.labels), "bias": bias}
        parts.append(seen[id(split)])
    return {"dataset": data.name, "image_size": data.image_size, "splits": parts,
            **{k: v for k, v in params.items() if v is not None}}


def _folder_hash(paths: list[Path]) -> str:
    """sha256 of the image files of a folder set: their paths below the folder the set shares, in order (not where
    the data root is on this machine), and their bytes (:func:`hash_files`, computed once per process), so that a
    changed image changes it."""
    import os

    common = Path(os.path.commonpath([str(p) for p in paths])) if paths else Path()
    common = common.parent if len(paths) == 1 else common
    return hash_jsonable({"files": [Path(p).relative_to(common).as_posix() for p in paths],
                          "sha256": hash_files(paths)})


def _tensor_hash(t: Tensor) -> str:
    import hashlib

    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
