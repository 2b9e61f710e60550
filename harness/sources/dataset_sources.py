"""Evaluation data from local files: CIFAR-10/100 batches, an ImageNet folder + list, tensor files.

A dataset *source* is one string (``--dataset`` or ``dataset =`` in a CONFIG.toml):

=====================================  ==========================================================
``digits``                             the embedded 8×8 digits test split (``attackaudit.sources.subset``)
``cifar10:DIR``                        CIFAR-10 test set: ``DIR`` is the ``cifar-10-batches-py``
                                       folder of the python version (or a folder holding it);
                                       ``test_batch`` is read
``cifar100:DIR``                       CIFAR-100 test set (``cifar-100-python/test``, fine labels)
``imagenet:ROOT:LIST[:CROP[:RESIZE]]`` ImageNet-style images: ``LIST`` has one
                                       ``relative/path.JPEG LABEL`` per line (blank lines and
                                       ``#`` comments skipped), paths relative to ``ROOT``; each
                                       image is resized (shorter side to ``RESIZE``, bilinear) and
                                       center-cropped to ``CROP``×``CROP``; defaults 224 and 256
                                       (``RESIZE`` defaults to ``CROP``·256/224)
``tensors:FILE``                       one ``.npz`` / ``.pt`` holding inputs and labels (keys
                                       ``x``/``inputs``/``images``/``data`` and
                                       ``y``/``labels``/``targets``, or a ``.pt`` pair ``(x, y)``)
``tensors:INPUTS:LABELS``              two files (``.npy``, ``.npz`` or ``.pt``), one array each
=====================================  ==========================================================

Every source gives inputs N×C×H×W float32 in [0, 1] (uint8 data is divided by 255) and labels
N int64. Nothing is ever downloaded. A missing or malformed path raises ``DataSourceError`` with
one line naming what was expected where. Pickled CIFAR batches are read by an unpickler that only
admits numpy arrays and plain containers, so a batch file cannot run code.
"""
from __future__ import annotations

import pickle
import warnings
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from attackaudit.errors import InputError

#: the source kinds, as documented above
KINDS = ("digits", "cifar10", "cifar100", "imagenet", "tensors")
INPUT_KEYS = ("x", "inputs", "images", "data", "x_test")
LABEL_KEYS = ("y", "labels", "targets", "y_test")


class DataSourceError(InputError):
    """A dataset source is malformed or its files are missing; the message is one line."""


@dataclass(frozen=True)
class DataSource:
    """A parsed dataset source (syntax only: nothing is read)."""

    text: str
    kind: str
    paths: tuple[str, ...] = ()
    crop: int = 224
    resize: int = 256

    @property
    def family(self) -> str | None:
        """The benchmark this data belongs to (``cifar10``, ``cifar100``, ``imagenet``), if known."""
        return self.kind if self.kind in ("cifar10", "cifar100", "imagenet") else None


def parse_source(text: str) -> DataSource:
    """Parse a dataset source string (see the module docstring); raises DataSourceError."""
    if not isinstance(text, str) or not text.strip():
        raise DataSourceError("empty dataset source; use digits, cifar10:DIR, imagenet:ROOT:LIST or tensors:FILE")
    text = text.strip()
    kind, sep, rest = text.partition(":")
    if kind == "digits" and not sep:
        return DataSource(text, "digits")
    if kind not in KINDS or not sep:
        raise DataSourceError(
            f"unknown dataset source {text!r}; use digits, cifar10:DIR, cifar100:DIR, "
            "imagenet:ROOT:LIST[:CROP[:RESIZE]], tensors:FILE or tensors:INPUTS:LABELS")
    parts = rest.split(":")
    if any(not p for p in parts):
        raise DataSourceError(f"dataset source {text!r} has an empty field")
    if kind in ("cifar10", "cifar100"):
        if len(parts) != 1:
            raise DataSourceError(f"dataset source {text!r}: expected {kind}:DIR")
        return DataSource(text, kind, (parts[0],))
    if kind == "tensors":
        if len(parts) not in (1, 2):
            raise DataSourceError(f"dataset source {text!r}: expected tensors:FILE or tensors:INPUTS:LABELS")
        return DataSource(text, kind, tuple(parts))
    # imagenet
    if len(parts) < 2 or len(parts) > 4:
        raise DataSourceError(f"dataset source {text!r}: expected imagenet:ROOT:LIST[:CROP[:RESIZE]]")
    sizes = []
    for p in parts[2:]:
        if not p.isdigit() or int(p) <= 0:
            raise DataSourceError(f"dataset source {text!r}: image size {p!r} is not a positive integer")
        sizes.append(int(p))
    crop = sizes[0] if sizes else 224
    resize = sizes[1] if len(sizes) > 1 else int(round(crop * 256 / 224))
    if resize < crop:
        raise DataSourceError(f"dataset source {text!r}: RESIZE {resize} is smaller than CROP {crop}")
    return DataSource(text, kind, (parts[0], parts[1]), crop, resize)


# -- datasets ----------------------------------------------------------------------------------
class _Dataset:
    """A source opened for reading: ``len`` samples, ``load(indices)`` -> (inputs, labels)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def load(self, indices: np.ndarray) -> tuple[Tensor, Tensor]:
        raise NotImplementedError


class _ArrayDataset(_Dataset):
    def __init__(self, x: np.ndarray | Tensor, y: np.ndarray | Tensor, where: str) -> None:
        self.x, self.y = _check_arrays(x, y, where)

    def __len__(self) -> int:
        return len(self.y)

    def load(self, indices: np.ndarray) -> tuple[Tensor, Tensor]:
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        return _to_unit_float(self.x[idx]), self.y[idx].clone()


class _ImageListDataset(_Dataset):
    def __init__(self, root: Path, items: list[tuple[str, int]], crop: int, resize: int, list_path: Path):
        self.root, self.items, self.crop, self.resize, self.list_path = root, items, crop, resize, list_path

    def __len__(self) -> int:
        return len(self.items)

    def load(self, indices: np.ndarray) -> tuple[Tensor, Tensor]:
        xs = [self._image(int(i)) for i in indices]
        x = torch.stack(xs) if xs else torch.zeros(0, 3, self.crop, self.crop)
        y = torch.tensor([self.items[int(i)][1] for i in indices], dtype=torch.int64)
        return x, y

    def _image(self, i: int) -> Tensor:
        from PIL import Image, UnidentifiedImageError

        rel, _ = self.items[i]
        path = self.root / rel
        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
                img = resize_shorter(img, self.resize)
                img = center_crop(img, self.crop)
                arr = np.asarray(img, dtype=np.uint8)
        except FileNotFoundError:
            raise DataSourceError(f"image {path} listed in {self.list_path} does not exist") from None
        except DataSourceError as exc:
            raise DataSourceError(f"image {path}: {exc}") from None
        except (UnidentifiedImageError, OSError) as exc:
            raise DataSourceError(f"image {path} listed in {self.list_path} is not a readable image: "
                                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        return torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div_(255.0)


def resize_shorter(img, size: int):
    """Resize a PIL image so its shorter side is ``size`` (bilinear), as torchvision's Resize(size)."""
    from PIL import Image

    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    if short == size:
        return img
    new_short, new_long = size, int(size * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return img.resize((new_w, new_h), Image.BILINEAR)


def center_crop(img, size: int):
    """Center-crop a PIL image to size×size, as torchvision's CenterCrop(size)."""
    w, h = img.size
    if w < size or h < size:  # pad like torchvision would not; the resize makes this rare
        raise DataSourceError(f"an image of {w}×{h} is smaller than the crop {size}; raise RESIZE")
    top = int(round((h - size) / 2.0))
    left = int(round((w - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


#: fixed split of scikit-learn's 1,797 digits: 70% train, 30% test, stratified
DIGITS_SPLIT_SEED = 0
DIGITS_TEST_FRACTION = 0.3


@lru_cache(maxsize=None)
def _digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=DIGITS_TEST_FRACTION,
                                              random_state=DIGITS_SPLIT_SEED, stratify=y)
    return x_tr, y_tr, x_te, y_te


def digits(split: str = "test") -> tuple[Tensor, Tensor]:
    """The 8×8 digits as (N×1×8×8 float32 in [0, 1], N int64); ``split`` is train or test."""
    x_tr, y_tr, x_te, y_te = _digits_split()
    if split == "train":
        return torch.from_numpy(x_tr.copy()), torch.from_numpy(y_tr.copy())
    if split == "test":
        return torch.from_numpy(x_te.copy()), torch.from_numpy(y_te.copy())
    raise ValueError(f"digits split {split!r} does not exist; use 'train' or 'test'")


def open_source(source: str | DataSource) -> _Dataset:
    """Open a dataset source for reading (files are checked here); raises DataSourceError."""
    src = parse_source(source) if isinstance(source, str) else source
    if src.kind == "digits":
        x, y = digits("test")
        return _ArrayDataset(x, y, "digits")
    if src.kind in ("cifar10", "cifar100"):
        return _ArrayDataset(*_read_cifar(src), src.text)
    if src.kind == "imagenet":
        return _open_image_list(src)
    return _ArrayDataset(*_read_tensors(src), src.text)


def load_dataset(source: str) -> tuple[Tensor, Tensor]:
    """All samples of ``source``: (N×C×H×W float32 in [0, 1], N int64)."""
    ds = open_source(source)
    return ds.load(np.arange(len(ds)))


def family(source: str) -> str | None:
    """``cifar10`` / ``cifar100`` / ``imagenet`` for those sources, else None (no I/O)."""
    try:
        return parse_source(source).family
    except DataSourceError:
        return None


# -- CIFAR ---------------------------------------------------------------------------------------
class _SafeUnpickler(pickle.Unpickler):
    """Admits numpy arrays and builtins only: a CIFAR batch is data, never code."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a data batch")
        if module.startswith("numpy.core"):
            module = "numpy._core" + module[len("numpy.core"):]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return super().find_class(module, name)


def _read_cifar(src: DataSource) -> tuple[np.ndarray, np.ndarray]:
    folder_name, file_name, label_key, expected = (
        ("cifar-10-batches-py", "test_batch", "labels", "the cifar-10-batches-py folder")
        if src.kind == "cifar10" else
        ("cifar-100-python", "test", "fine_labels", "the cifar-100-python folder"))
    given = Path(src.paths[0]).expanduser()
    if not given.is_dir():
        raise DataSourceError(f"{src.kind} folder {given} does not exist; expected {expected} "
                              "of the python version")
    candidates = [given / file_name, given / folder_name / file_name]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise DataSourceError(f"no {src.kind} batch file {file_name!r} in {given} (nor in "
                              f"{given / folder_name}); expected {expected} of the python version")
    try:
        with open(path, "rb") as f:
            batch = _SafeUnpickler(f, encoding="latin1").load()
    except Exception as exc:
        raise DataSourceError(f"{path} is not a {src.kind} python batch file: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if not isinstance(batch, dict):
        raise DataSourceError(f"{path} is not a {src.kind} python batch file: holds a {type(batch).__name__}, "
                              "expected a dict with 'data' and labels")
    batch = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in batch.items()}
    if "data" not in batch or label_key not in batch:
        raise DataSourceError(f"{path} is not a {src.kind} python batch file: keys {sorted(map(str, batch))}, "
                              f"expected 'data' and {label_key!r}")
    data = np.asarray(batch["data"])
    labels = np.asarray(batch[label_key])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataSourceError(f"{path}: 'data' is {data.dtype} {data.shape}, expected uint8 N×3072 "
                              "(32×32 RGB, channel-major)")
    if len(labels) != len(data):
        raise DataSourceError(f"{path}: {len(data)} images but {len(labels)} labels")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


# -- ImageNet-style folder + list ----------------------------------------------------------------
def _open_image_list(src: DataSource) -> _ImageListDataset:
    root, list_path = Path(src.paths[0]).expanduser(), Path(src.paths[1]).expanduser()
    if not root.is_dir():
        raise DataSourceError(f"imagenet root folder {root} does not exist; expected the folder the "
                              "list's relative paths start from")
    if not list_path.is_file():
        raise DataSourceError(f"imagenet sample list {list_path} does not exist; expected a text file "
                              "with one 'relative/path.JPEG LABEL' per line")
    items: list[tuple[str, int]] = []
    for number, line in enumerate(list_path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.rsplit(None, 1)
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit() or int(fields[1]) < 0:
            raise DataSourceError(f"{list_path} line {number}: {line[:80]!r} is not "
                                  "'relative/path LABEL' with a non-negative integer label")
        items.append((fields[0], int(fields[1])))
    if not items:
        raise DataSourceError(f"imagenet sample list {list_path} lists no images")
    return _ImageListDataset(root, items, src.crop, src.resize, list_path)


# -- tensor files --------------------------------------------------------------------------------
def _read_array_file(path: Path, role: str, src: str) -> object:
    if not path.is_file():
        raise DataSourceError(f"{role} file {path} of dataset {src!r} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        if suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if suffix in (".pt", ".pth"):
            return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, ValueError, RuntimeError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataSourceError(f"{role} file {path} is not a readable {suffix} file of plain tensors: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    raise DataSourceError(f"{role} file {path} has suffix {suffix!r}; expected .npz, .npy or .pt")


def _pick(container: dict, keys: tuple[str, ...], path: Path, what: str):
    for k in keys:
        if k in container:
            return container[k]
    raise DataSourceError(f"{path} holds keys {sorted(map(str, container))}; expected {what} under one of "
                          f"{', '.join(keys)}")


def _read_tensors(src: DataSource):
    if len(src.paths) == 1:
        path = Path(src.paths[0]).expanduser()
        obj = _read_array_file(path, "tensors", src.text)
        if isinstance(obj, (tuple, list)) and len(obj) == 2:
            return obj[0], obj[1]
        if isinstance(obj, dict):
            return _pick(obj, INPUT_KEYS, path, "inputs"), _pick(obj, LABEL_KEYS, path, "labels")
        raise DataSourceError(f"{path} holds a {type(obj).__name__}; expected a dict with inputs and labels "
                              "or a pair (inputs, labels)")
    xs = []
    for p, role, keys in ((src.paths[0], "inputs", INPUT_KEYS), (src.paths[1], "labels", LABEL_KEYS)):
        path = Path(p).expanduser()
        obj = _read_array_file(path, role, src.text)
        if isinstance(obj, dict):
            obj = obj[next(iter(obj))] if len(obj) == 1 else _pick(obj, keys, path, role)
        xs.append(obj)
    return xs[0], xs[1]


def _check_arrays(x, y, where: str) -> tuple[Tensor, Tensor]:
    """Inputs as an N×C×H×W tensor (uint8 or float), labels N int64; one-line errors."""
    if not isinstance(x, (np.ndarray, Tensor)) or not isinstance(y, (np.ndarray, Tensor)):
        raise DataSourceError(f"dataset {where!r}: inputs and labels must be arrays, got "
                              f"{type(x).__name__} and {type(y).__name__}")
    x = torch.as_tensor(np.asarray(x)) if isinstance(x, np.ndarray) else x.detach().cpu()
    y = torch.as_tensor(np.asarray(y)) if isinstance(y, np.ndarray) else y.detach().cpu()
    if x.dim() == 3:  # N×H×W: one channel
        x = x.unsqueeze(1)
    if x.dim() != 4:
        raise DataSourceError(f"dataset {where!r}: inputs have shape {tuple(x.shape)}, expected N×C×H×W")
    if x.shape[1] not in (1, 3, 4) and x.shape[-1] in (1, 3, 4):  # N×H×W×C
        x = x.permute(0, 3, 1, 2)
    if y.dim() != 1 or len(y) != len(x):
        raise DataSourceError(f"dataset {where!r}: labels have shape {tuple(y.shape)}, expected ({len(x)},)")
    if y.dtype.is_floating_point or y.dtype == torch.bool:
        if y.dtype == torch.bool or not torch.equal(y, y.round()):
            raise DataSourceError(f"dataset {where!r}: labels are {y.dtype}, expected integer class indices")
    y = y.to(torch.int64)
    if len(y) and int(y.min()) < 0:
        raise DataSourceError(f"dataset {where!r}: negative label {int(y.min())}")
    if x.dtype == torch.uint8:
        return x.contiguous(), y
    if not x.dtype.is_floating_point:
        raise DataSourceError(f"dataset {where!r}: inputs are {x.dtype}, expected uint8 or float in [0, 1]")
    if len(x) and (not torch.isfinite(x).all() or float(x.min()) < 0 or float(x.max()) > 1):
        raise DataSourceError(f"dataset {where!r}: float inputs must lie in [0, 1] (got "
                              f"[{float(x.min()):.4g}, {float(x.max()):.4g}]); models normalise inside")
    return x.to(torch.float32).contiguous(), y


def _to_unit_float(x: Tensor) -> Tensor:
    return x.to(torch.float32).div_(255.0) if x.dtype == torch.uint8 else x.to(torch.float32).clone()


__all__ = ["DataSource", "DataSourceError", "parse_source", "open_source", "load_dataset", "family",
           "resize_shorter", "center_crop"]
