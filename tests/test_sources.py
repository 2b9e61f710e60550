"""Local datasets and model sources: CIFAR-10 batches, an ImageNet-style folder, tensor files,
RobustBench's layout, torchvision/timm weights, module:callable, checkpoint trust, model checks.

Everything is built in temporary folders: tiny images, tiny architectures, two samples per attack.
"""
import argparse
import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import attackaudit
from attackaudit.sources import model_loader as M
from attackaudit.sources import robustbench_models as RB
from attackaudit.sources.subset import load_subset
from attackaudit.sources.dataset_sources import DataSourceError, load_dataset, parse_source
from attackaudit.run.job import attack_with_tracker
from attackaudit.sources.model_checks import ModelCheckWarning, check_model
from attackaudit.sources.model_loader import ModelSourceError, Normalized, load_model_source, parse_model_source
from attackaudit.results.schema import parse_model_name

TINY_WRN = "Tiny2024Test"  # a RobustBench-style id registered by the tests, a WRN-10-1


# -- builders ------------------------------------------------------------------------------------
def write_cifar_batch(folder: Path, n: int = 12, seed: int = 0, name: str = "test_batch") -> tuple[np.ndarray, list]:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, 10, size=n)]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "wb") as f:  # the python version's format: a protocol-2 dict pickle
        pickle.dump({"batch_label": "testing batch 1 of 1", "data": data, "labels": labels,
                     "filenames": [f"img{i}.png" for i in range(n)]}, f, protocol=2)
    return data, labels


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("sources")
    cifar = root / "cifar-10-batches-py"
    data, labels = write_cifar_batch(cifar)
    # ImageNet-style: class folders of differently sized images and a list file
    img_root = root / "imagenet"
    rng = np.random.default_rng(1)
    lines = ["# relative path, label"]
    for i, (w, h) in enumerate([(40, 30), (24, 36), (20, 20), (33, 21)]):
        rel = Path("val") / f"n0{i % 2}" / f"ILSVRC2012_val_{i:08d}.JPEG"
        (img_root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).save(img_root / rel, format="PNG")
        lines.append(f"{rel.as_posix()} {i % 3}")
    (root / "list.txt").write_text("\n".join(lines) + "\n\n")
    # tensors: one npz; a .pt pair; two .npy files (uint8, channel-last)
    x = torch.rand(6, 3, 8, 8)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    np.savez(root / "set.npz", x=x.numpy(), y=y.numpy())
    torch.save((x, y), root / "pair.pt")
    np.save(root / "x.npy", (x.permute(0, 2, 3, 1) * 255).round().to(torch.uint8).numpy())
    np.save(root / "y.npy", y.numpy())
    return {"root": root, "cifar": cifar, "cifar_data": data, "cifar_labels": labels, "img_root": img_root,
            "list": root / "list.txt", "x": x, "y": y}


@pytest.fixture
def tiny_robustbench(monkeypatch):
    """A tiny WideResNet registered as a RobustBench id attackaudit builds itself."""
    monkeypatch.setitem(M.BUILTIN_ROBUSTBENCH, ("cifar10", "Linf", TINY_WRN),
                        RB._Built(lambda: M.WideResNet(10, 1), *RB._C10))
    monkeypatch.setattr(RB, "_robustbench_registry", lambda: None)


def ddn(scale: float = 0.05):
    from attackaudit.adapters import load_library

    entry = load_library("adv_lib")
    assert entry.available, entry.reason
    return next(s for s in entry.specs if s.key == "adv_lib/ddn/l2").scaled(scale)


def attack_two(model, x, y):
    spec = ddn()
    tracker, returned, error = attack_with_tracker(spec, model, x[:2], y[:2], budget=200)
    assert error == ""
    assert isinstance(returned, torch.Tensor) and returned.shape == x[:2].shape
    assert float(returned.min()) >= 0 and float(returned.max()) <= 1
    assert (tracker.forwards > 0).all() and (tracker.backwards > 0).all()
    return tracker


def one_line_error(exc_type, fn, *args, **kw) -> str:
    with pytest.raises(exc_type) as info:
        fn(*args, **kw)
    message = str(info.value)
    assert message and "\n" not in message, message
    return message


# -- datasets ------------------------------------------------------------------------------------
def test_cifar10_batches_are_read_exactly(files):
    x, y = load_dataset(f"cifar10:{files['cifar']}")
    assert x.shape == (12, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    expected = torch.from_numpy(files["cifar_data"].reshape(-1, 3, 32, 32).astype(np.float32) / 255)
    assert torch.equal(x, expected) and y.tolist() == files["cifar_labels"]
    # the folder holding cifar-10-batches-py works too, and the subset is the seeded one
    sub = load_subset(f"cifar10:{files['root']}", 5, 0)
    assert len(sub) == 5 and sub.inputs.shape == (5, 3, 32, 32)
    assert torch.equal(sub.inputs, expected[torch.from_numpy(sub.indices)])
    assert sub.hash == load_subset(f"cifar10:{files['root']}", 5, 0).hash
    assert sub.dataset == f"cifar10:{files['root']}"


def test_imagenet_folder_matches_torchvision_preprocessing(files):
    from PIL import Image
    from torchvision import transforms

    source = f"imagenet:{files['img_root']}:{files['list']}:16:18"
    x, y = load_dataset(source)
    assert x.shape == (4, 3, 16, 16) and y.tolist() == [0, 1, 2, 0]
    tf = transforms.Compose([transforms.Resize(18), transforms.CenterCrop(16), transforms.ToTensor()])
    rel = sorted((files["img_root"] / "val").rglob("*.JPEG"))
    by_name = {p.name: p for p in rel}
    first = by_name["ILSVRC2012_val_00000000.JPEG"]
    with Image.open(first) as img:
        assert torch.allclose(x[0], tf(img.convert("RGB")), atol=1e-6)
    assert parse_source(f"imagenet:{files['img_root']}:{files['list']}").crop == 224
    assert parse_source(f"imagenet:{files['img_root']}:{files['list']}").resize == 256
    sub = load_subset(source, 2, 3)  # only the chosen images are decoded
    assert sub.inputs.shape == (2, 3, 16, 16)


def test_tensor_files(files):
    root = files["root"]
    for source in (f"tensors:{root / 'set.npz'}", f"tensors:{root / 'pair.pt'}"):
        x, y = load_dataset(source)
        assert torch.allclose(x, files["x"]) and torch.equal(y, files["y"])
    x, y = load_dataset(f"tensors:{root / 'x.npy'}:{root / 'y.npy'}")  # uint8 N×H×W×C
    assert x.shape == (6, 3, 8, 8) and torch.allclose(x, files["x"], atol=0.5 / 255 + 1e-6)


def test_bad_data_sources_give_one_line(files, tmp_path):
    root = files["root"]
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "test_batch").write_bytes(b"not a pickle at all")
    (tmp_path / "evil").mkdir()
    with open(tmp_path / "evil" / "test_batch", "wb") as f:
        pickle.dump({"data": os.getcwd, "labels": []}, f)  # a global that is not data
    (tmp_path / "bad_list.txt").write_text("val/n00/ILSVRC2012_val_00000000.JPEG zero\n")
    (tmp_path / "missing_list.txt").write_text("val/n00/nope.JPEG 1\n")
    np.savez(tmp_path / "nokeys.npz", a=np.zeros((2, 3, 4, 4)))
    np.savez(tmp_path / "range.npz", x=np.full((2, 3, 4, 4), 255.0), y=np.zeros(2, dtype=np.int64))
    cases = [
        ("cifar10", "cifar10:DIR"),
        (f"cifar10:{tmp_path / 'nowhere'}", "does not exist"),
        (f"cifar10:{tmp_path / 'empty'}", "'test_batch'"),
        (f"cifar10:{tmp_path / 'garbage'}", "not a cifar10 python batch file"),
        (f"cifar10:{tmp_path / 'evil'}", "is not allowed"),
        (f"imagenet:{files['img_root']}", "imagenet:ROOT:LIST"),
        (f"imagenet:{files['img_root']}:{tmp_path / 'no.txt'}", "sample list"),
        (f"imagenet:{files['img_root']}:{tmp_path / 'bad_list.txt'}", "line 1"),
        (f"imagenet:{files['img_root']}:{tmp_path / 'missing_list.txt'}", "does not exist"),
        (f"imagenet:{files['img_root']}:{files['list']}:x", "not a positive integer"),
        (f"tensors:{root / 'absent.npz'}", "does not exist"),
        (f"tensors:{tmp_path / 'nokeys.npz'}", "expected inputs"),
        (f"tensors:{tmp_path / 'range.npz'}", "[0, 1]"),
        ("mnist:/data", "unknown dataset source"),
    ]
    for source, expected in cases:
        message = one_line_error(DataSourceError, load_dataset, source)
        assert expected in message, (source, message)
    # load_subset raises the same error (a ValueError)
    assert "does not exist" in one_line_error(ValueError, load_subset, f"cifar10:{tmp_path / 'x'}", 2, 0)


# -- model sources -------------------------------------------------------------------------------
def test_source_syntax():
    assert parse_model_source("digits-cnn").kind == "zoo"
    s = parse_model_source(parse_model_name("robustbench:cifar10/L2/Augustin2020Adversarial~shift"))
    assert (s.kind, s.dataset, s.threat_model, s.name, s.shift) == ("robustbench", "cifar10", "L2",
                                                                     "Augustin2020Adversarial", True)
    s = parse_model_source("torchvision:resnet18:/w/r18.pt:cifar10")
    assert (s.name, s.target, s.norm) == ("resnet18", "/w/r18.pt", "cifar10")
    s = parse_model_source("module:tests.helpers:make")
    assert (s.target, s.name) == ("tests.helpers", "make")
    for bad in ("robustbench:", "robustbench:a/b/c/d", "robustbench:l1/Standard", "torchvision:resnet18",
                "hub:resnet", "module:nocallable", ""):
        one_line_error(ModelSourceError, parse_model_source, bad)


def test_robustbench_layout_loads_and_attacks(files, tmp_path, tiny_robustbench):
    torch.manual_seed(0)
    reference = M.WideResNet(10, 1)
    path = M.robustbench_path(str(tmp_path), "cifar10", "Linf", TINY_WRN)
    path.parent.mkdir(parents=True)
    # RobustBench checkpoints often hold {'state_dict': ...} with DataParallel's 'module.' prefix
    torch.save({"state_dict": {f"module.{k}": v for k, v in reference.state_dict().items()}}, path)
    sub = load_subset(f"cifar10:{files['cifar']}", 2, 0)
    model = load_model_source(f"robustbench:{TINY_WRN}", model_dir=str(tmp_path), dataset=f"cifar10:{files['cifar']}")
    assert isinstance(model, Normalized) and not model.training
    expected = reference.eval()((sub.inputs - model.mean) / model.std)
    assert torch.allclose(model(sub.inputs), expected, atol=1e-6)
    attack_two(model, sub.inputs, sub.labels)
    # the qualified form names dataset and threat model itself; the twin is log-softmax
    twin = load_model_source(parse_model_name(f"robustbench:cifar10/linf/{TINY_WRN}~shift"), model_dir=str(tmp_path))
    assert torch.allclose(twin(sub.inputs), torch.log_softmax(expected, 1), atol=1e-5)
    # a missing checkpoint names the expected path and the way out; nothing is downloaded
    message = one_line_error(ModelSourceError, load_model_source, f"robustbench:L2/{TINY_WRN}",
                             model_dir=str(tmp_path))
    assert "without the robustbench package" in message
    message = one_line_error(ModelSourceError, load_model_source, f"robustbench:{TINY_WRN}",
                             model_dir=str(tmp_path / "elsewhere"))
    assert str(tmp_path / "elsewhere" / "cifar10" / "Linf" / f"{TINY_WRN}.pt") in message
    assert "--allow-download" in message


def test_a_real_robustbench_id_builds_and_loads(tmp_path):
    """Ding2020MMA (WRN-28-4, per-sample standardisation) through the built-in table."""
    build = M.BUILTIN_ROBUSTBENCH[("cifar10", "L2", "Ding2020MMA")]
    torch.manual_seed(0)
    net = build()
    path = M.robustbench_path(str(tmp_path), "cifar10", "L2", "Ding2020MMA")
    path.parent.mkdir(parents=True)
    torch.save(net.model.state_dict(), path)
    model = load_model_source("robustbench:Ding2020MMA", model_dir=str(tmp_path), threat_model="l2")
    x = torch.rand(2, 3, 32, 32)
    assert torch.allclose(model(x), net.eval()(x), atol=1e-5)


def test_robustbench_registry_is_used_when_robustbench_imports(tmp_path, monkeypatch):
    """With RobustBench installed, its registry builds the architecture; our loader reads the file."""
    made = []

    def build():
        made.append(1)
        return M.WideResNet(10, 1)

    registry = {"cifar10": {"Linf": {"Fake2024": {"model": build, "gdrive_id": "x"},
                                     "Hub2024": {"model": build, "gdrive_id": None}}}}
    monkeypatch.setattr(RB, "_robustbench_registry", lambda: registry)
    path = M.robustbench_path(str(tmp_path), "cifar10", "Linf", "Fake2024")
    path.parent.mkdir(parents=True)
    torch.save(M.WideResNet(10, 1).state_dict(), path)
    load_model_source("robustbench:Fake2024", model_dir=str(tmp_path))
    assert made == [1]
    assert "did you mean Fake2024" in one_line_error(ModelSourceError, load_model_source,
                                                     "robustbench:Fake2042", model_dir=str(tmp_path))
    assert "--allow-download" in one_line_error(ModelSourceError, load_model_source, "robustbench:Hub2024",
                                                model_dir=str(tmp_path))


def test_torchvision_weights_file(files, tmp_path):
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.mobilenet_v3_small(num_classes=3).eval()
    torch.save(net.state_dict(), tmp_path / "mnv3.pt")
    source = f"imagenet:{files['img_root']}:{files['list']}:16:18"
    sub = load_subset(source, 4, 0)
    model = load_model_source(f"torchvision:mobilenet_v3_small:{tmp_path / 'mnv3.pt'}", dataset=source)
    mean, std = torch.tensor(M.IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(M.IMAGENET_STD).view(1, 3, 1, 1)
    assert torch.allclose(model(sub.inputs), net((sub.inputs - mean) / std), atol=1e-5)
    attack_two(model, sub.inputs, sub.labels)
    raw = load_model_source(f"torchvision:mobilenet_v3_small:{tmp_path / 'mnv3.pt'}:none")
    assert not isinstance(raw, Normalized)
    assert "no architecture" in one_line_error(ModelSourceError, load_model_source,
                                               f"torchvision:mobilenet_v9:{tmp_path / 'mnv3.pt'}")
    assert "does not exist" in one_line_error(ModelSourceError, load_model_source,
                                              f"torchvision:resnet18:{tmp_path / 'none.pt'}")
    assert "does not fit" in one_line_error(ModelSourceError, load_model_source,
                                            f"torchvision:resnet18:{tmp_path / 'mnv3.pt'}")
    # a weights name is looked up in the local cache only
    assert "--allow-download" in one_line_error(ModelSourceError, load_model_source,
                                                "torchvision:resnet18:IMAGENET1K_V1")


def test_timm_weights_file(files, tmp_path):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    net = timm.create_model("test_resnet", pretrained=False, num_classes=5).eval()
    torch.save(net.state_dict(), tmp_path / "t.pt")
    model = load_model_source(f"timm:test_resnet:{tmp_path / 't.pt'}")
    x, y = load_dataset(f"tensors:{files['root'] / 'set.npz'}")
    mean = torch.tensor(net.pretrained_cfg["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(net.pretrained_cfg["std"]).view(1, 3, 1, 1)
    assert torch.allclose(model(x), net((x - mean) / std), atol=1e-5)
    attack_two(model, x, y)


def make_tiny_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(16, 5))


def test_module_callable(files, tmp_path):
    plugin = tmp_path / "mymodels.py"
    plugin.write_text("import torch\nfrom torch import nn\n"
                      "def tiny():\n    torch.manual_seed(0)\n"
                      "    return nn.Sequential(nn.Flatten(), nn.Linear(192, 5))\n"
                      "def not_a_model():\n    return 3\n")
    model = load_model_source(f"module:{plugin}:tiny")
    x, y = load_dataset(f"tensors:{files['root'] / 'set.npz'}")
    attack_two(model, x, y)
    model = load_model_source(f"module:{__name__}:make_tiny_cnn")
    assert model(x).shape == (6, 5)
    assert "not an nn.Module" in one_line_error(ModelSourceError, load_model_source, f"module:{plugin}:not_a_model")
    assert "has no callable" in one_line_error(ModelSourceError, load_model_source, f"module:{plugin}:absent")
    assert "cannot import" in one_line_error(ModelSourceError, load_model_source, "module:no_such_pkg.mod:f")


def test_untrusted_pickle_is_refused_unless_trusted(tmp_path):
    import torchvision

    net = torchvision.models.mobilenet_v3_small(num_classes=3)
    # a training checkpoint with more than tensors in it: its args pickle a Namespace
    torch.save({"state_dict": net.state_dict(), "args": argparse.Namespace(lr=0.1), "epoch": 3},
               tmp_path / "ckpt.pth")
    source = f"torchvision:mobilenet_v3_small:{tmp_path / 'ckpt.pth'}"
    message = one_line_error(ModelSourceError, load_model_source, source)
    assert "--trust-checkpoint" in message and "argparse.Namespace" in message
    model = load_model_source(source, trust_checkpoint=True)
    assert model(torch.rand(1, 3, 16, 16)).shape == (1, 3)
    # the same holds in RobustBench's layout
    path = M.robustbench_path(str(tmp_path), "cifar10", "Linf", "Standard")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00garbage")
    assert "not a readable PyTorch checkpoint" in one_line_error(
        ModelSourceError, load_model_source, "robustbench:Standard", model_dir=str(tmp_path))


# -- model checks --------------------------------------------------------------------------------
class Softmaxed(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return torch.softmax(self.model(x), 1)


class AlwaysDropout(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return nn.functional.dropout(self.model(x), 0.5, training=True)


def test_model_checks(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = check_model(cnn, x, y, name="digits-cnn")
    assert ok["logits"] and ok["deterministic"] and ok["warnings"] == [] and ok["num_classes"] == 10
    assert ok["clean_accuracy"] == float((cnn(x).argmax(1) == y).float().mean())
    with pytest.warns(ModelCheckWarning, match="probabilities"):
        soft = check_model(Softmaxed(cnn), x, y, name="soft")
    assert not soft["logits"]
    dropout = nn.Sequential(cnn, nn.Dropout(0.5)).train()
    with pytest.warns(ModelCheckWarning, match="training mode: .*Dropout"):
        result = check_model(dropout, x, y, name="dropout")
    assert not result["deterministic"]
    with pytest.warns(ModelCheckWarning, match="differ"):
        assert not check_model(AlwaysDropout(cnn), x, y)["deterministic"]
    with pytest.raises(ValueError, match="label 9 .* 5 classes"):
        check_model(nn.Sequential(nn.Flatten(), nn.Linear(64, 5)), x, torch.full_like(y, 9))


# -- end to end ------------------------------------------------------------------------------------
FAKE_ROBUSTBENCH = '''
from enum import Enum
from attackaudit.sources.model_loader import WideResNet


class BenchmarkDataset(Enum):
    cifar_10 = "cifar10"


class ThreatModel(Enum):
    Linf = "Linf"


model_dicts = {BenchmarkDataset.cifar_10: {ThreatModel.Linf: {
    "Tiny2024Test": {"model": lambda: WideResNet(10, 1), "gdrive_id": "x"}}}}
'''


def test_cli_grid_on_local_files(files, tmp_path):
    """Two attacks × two models from local files on the CIFAR-10 batch, through `attackaudit run`."""
    import torchvision

    fake = tmp_path / "site"  # RobustBench's registry, as the installed package would provide it
    (fake / "robustbench" / "model_zoo").mkdir(parents=True)
    (fake / "robustbench" / "__init__.py").write_text("")
    (fake / "robustbench" / "model_zoo" / "__init__.py").write_text("")
    (fake / "robustbench" / "model_zoo" / "models.py").write_text(FAKE_ROBUSTBENCH)
    torch.manual_seed(0)
    ckpt = M.robustbench_path(str(tmp_path / "models"), "cifar10", "Linf", TINY_WRN)
    ckpt.parent.mkdir(parents=True)
    torch.save(M.WideResNet(10, 1).state_dict(), ckpt)
    torch.save(torchvision.models.mobilenet_v3_small(num_classes=10).state_dict(), tmp_path / "mnv3.pt")
    out = tmp_path / "run"
    models = [f"robustbench:{TINY_WRN}", f"torchvision:mobilenet_v3_small:{tmp_path / 'mnv3.pt'}:cifar10"]
    args = ["run", "--dataset", f"cifar10:{files['cifar']}", "--models", *models, "--model-dir",
            str(tmp_path / "models"), "--threat-model", "linf", "--libraries", "adv_lib", "--attacks",
            "adv_lib/ddn", "adv_lib/fmn", "--norms", "l2", "--samples", "2", "--steps-scale", "0.02",
            "--device", "auto", "--batch-size", "1", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "attackaudit", *args], capture_output=True, text=True,
                         timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    df = attackaudit.load_run(out)
    assert len(df) == 2 * 2 * 2 and set(df["status"]) == {"ok"}, df[["model", "status", "error"]]
    assert set(df["model"]) == set(models) and set(df["dataset"]) == {f"cifar10:{files['cifar']}"}
    assert (df["forwards"] > 0).all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["model_checks"]) == set(models)
    assert all(c["deterministic"] and c["logits"] and c["num_classes"] == 10
               for c in manifest["model_checks"].values())
    assert manifest["config"]["threat_model"] == "Linf" and manifest["device"] in ("cpu", "cuda")


def test_cli_stops_on_a_bad_source_with_one_line(files, tmp_path, tiny_robustbench, capsys):
    from attackaudit.cli import main

    common = ["run", "--models", f"robustbench:{TINY_WRN}", "--libraries", "adv_lib", "--attacks",
              "adv_lib/ddn", "--norms", "l2", "--samples", "2", "--quiet"]
    # a missing checkpoint stops the run before any job
    code = main([*common, "--dataset", f"cifar10:{files['cifar']}", "--model-dir", str(tmp_path / "nowhere"),
                 "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "not found" in err and "--allow-download" in err
    assert not (tmp_path / "a" / "jobs").exists() or not any((tmp_path / "a" / "jobs").iterdir())
    # so does a missing dataset folder
    code = main([*common, "--dataset", f"cifar10:{tmp_path / 'no-cifar'}", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "does not exist" in err, err
