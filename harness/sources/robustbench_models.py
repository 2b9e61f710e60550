"""RobustBench model sources: the local checkpoint layout, RobustBench's own registry when the
``robustbench`` package imports, and ``BUILTIN_ROBUSTBENCH``, the ids attackaudit builds itself
without it. Nothing is downloaded unless ``allow_download``.
"""
from __future__ import annotations

import difflib
import pickle
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping

from torch import nn

from attackaudit.sources.architectures import CifarResNet50, DMWideResNet, PreActResNet18, WideResNet
from attackaudit.sources.checkpoints import (ModelSourceError, load_checkpoint, load_weights, one_line, state_dict_of,
                                             strip_prefix, torch_load_policy)
from attackaudit.sources.model_source import LoadOptions, ModelSource, normalize_threat_model
from attackaudit.sources.normalization import (CIFAR10_MEAN, CIFAR10_STD, IMAGENET_MEAN, IMAGENET_STD, Normalized,
                                               PerSampleStandardized)

DEFAULT_MODEL_DIR = "models"


def robustbench_path(model_dir: str, dataset: str, threat_model: str, name: str) -> Path:
    """RobustBench's layout: ``<model_dir>/<dataset>/<threat_model>/<name>.pt``."""
    return Path(model_dir or DEFAULT_MODEL_DIR).expanduser() / dataset / threat_model / f"{name}.pt"


def _robustbench_target(src: ModelSource, opts: LoadOptions) -> tuple[str, str]:
    from attackaudit.sources.dataset_sources import family

    dataset = src.dataset or family(opts.dataset) or "cifar10"
    threat = src.threat_model or normalize_threat_model(opts.threat_model) or "Linf"
    return dataset, threat


@lru_cache(maxsize=1)
def _robustbench_registry():
    """RobustBench's model registry ``{dataset: {threat: {name: entry}}}``, or None without it."""
    try:
        from robustbench.model_zoo.models import model_dicts
    except Exception:  # not installed, or installed without its dependencies
        return None
    return {ds.value: {tm.value: models for tm, models in threats.items()} for ds, threats in model_dicts.items()}


def load_robustbench(src: ModelSource, opts: LoadOptions) -> nn.Module:
    """The RobustBench model ``src`` names (``robustbench:[[DATASET/]THREAT/]NAME``), not yet in eval mode."""
    dataset, threat = _robustbench_target(src, opts)
    name = src.name
    path = robustbench_path(opts.model_dir, dataset, threat, name)
    where = f"RobustBench model {dataset}/{threat}/{name}"
    registry = _robustbench_registry()
    builtin = BUILTIN_ROBUSTBENCH.get((dataset, threat, name))
    if registry is not None:
        models = registry.get(dataset, {}).get(threat, {})
        if name not in models:
            close = difflib.get_close_matches(name, list(models), n=3)
            raise ModelSourceError(f"{where} is not in RobustBench's model zoo"
                                   + (f"; did you mean {', '.join(close)}?" if close else ""))
        entry = models[name]
        gdrive = entry.get("gdrive_id")
        if isinstance(gdrive, list):  # an ensemble: one file per member, loaded by RobustBench itself
            files = [Path(f"{path}_m{i}.pt") for i in range(len(gdrive))]
            missing = [f for f in files if not f.is_file()]
            if missing and not opts.allow_download:
                raise ModelSourceError(f"{where} (an ensemble) needs {len(files)} files; {missing[0]} not found "
                                       "(RobustBench layout <model_dir>/<dataset>/<threat_model>/<name>.pt_m<i>.pt); "
                                       "put them there or pass --allow-download")
            return _robustbench_load_model(name, opts, dataset, threat, where)
        # RobustBench's constructor for ImageNet "Standard" models downloads torchvision weights
        downloads_on_build = dataset == "imagenet" and "Standard" in name
        if gdrive is None or (downloads_on_build and builtin is None):
            if not opts.allow_download:
                raise ModelSourceError(f"{where} has no checkpoint file RobustBench can read locally (its "
                                       "weights come from a hub); pass --allow-download")
            return _robustbench_load_model(name, opts, dataset, threat, where)
        build = builtin if downloads_on_build else entry["model"]
    elif builtin is not None:
        build = builtin
    else:
        known = sorted(n for (d, t, n) in BUILTIN_ROBUSTBENCH if (d, t) == (dataset, threat))
        raise ModelSourceError(f"{where}: without the robustbench package attackaudit builds only "
                               f"{', '.join(known) or 'none'} for {dataset}/{threat}; pip install robustbench "
                               "for every RobustBench id")
    if not path.is_file():
        if opts.allow_download:
            return _robustbench_load_model(name, opts, dataset, threat, where)
        raise ModelSourceError(f"{where}: checkpoint {path} not found; put it there (RobustBench layout "
                               "<model_dir>/<dataset>/<threat_model>/<name>.pt, --model-dir sets model_dir) "
                               "or pass --allow-download")
    obj = load_checkpoint(path, opts.trust_checkpoint, "RobustBench checkpoint")
    if isinstance(obj, Mapping) and ("Kireev2021Effectiveness" in name or name == "Andriushchenko2020Understanding") \
            and "last" in obj:
        obj = obj["last"]
    state = state_dict_of(obj, f"RobustBench checkpoint {path}")
    if isinstance(state, nn.Module):
        return state
    state = strip_prefix(strip_prefix(state, "module."), "model.")
    try:
        model = build()
    except Exception as exc:
        raise ModelSourceError(f"{where}: building the architecture failed: {one_line(exc)}") from None
    return load_weights(model, state, f"RobustBench checkpoint {path}")


def _robustbench_load_model(name: str, opts: LoadOptions, dataset: str, threat: str, where: str) -> nn.Module:
    """RobustBench's own ``load_model`` (it downloads what is missing: only with allow_download)."""
    try:
        from robustbench.utils import load_model
    except Exception as exc:
        raise ModelSourceError(f"{where} needs the robustbench package ({one_line(exc)}); pip install robustbench") from None
    try:
        with torch_load_policy(opts.trust_checkpoint):
            return load_model(name, model_dir=opts.model_dir or DEFAULT_MODEL_DIR, dataset=dataset,
                              threat_model=threat)
    except pickle.UnpicklingError as exc:
        raise ModelSourceError(f"{where}: a checkpoint is not a plain weights file ({one_line(exc)}); if you trust "
                               "it, pass --trust-checkpoint") from None
    except Exception as exc:
        raise ModelSourceError(f"{where}: robustbench.load_model failed: {type(exc).__name__}: {one_line(exc)}") from None


class _Built:
    """A RobustBench architecture: a bare network, wrapped in its input normalisation."""

    def __init__(self, net: Callable[[], nn.Module], mean=None, std=None, standardize: bool = False) -> None:
        self.net, self.mean, self.std, self.standardize = net, mean, std, standardize

    def __call__(self) -> nn.Module:
        net = self.net()
        if self.standardize:
            return PerSampleStandardized(net)
        return Normalized(net, self.mean, self.std) if self.mean is not None else net


def _tv(arch: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        try:
            import torchvision.models as tvm
        except ImportError:
            raise ModelSourceError("RobustBench ImageNet models need torchvision; pip install torchvision") from None
        return getattr(tvm, arch)(weights=None)
    return build


def _wrn(depth: int, width: int, sub: bool = False) -> Callable[[], nn.Module]:
    return lambda: WideResNet(depth, width, sub_block1=sub)


def _dm(depth: int, width: int) -> Callable[[], nn.Module]:
    return lambda: DMWideResNet(depth, width)


_ENGSTROM = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
_AUGUSTIN = ((0.4913997551666284, 0.48215855929893703, 0.4465309133731618),
             (0.24703225141799082, 0.24348516474564, 0.26158783926049628))
_RONY = ((0.491, 0.482, 0.447), (0.247, 0.243, 0.262))
_C10 = (CIFAR10_MEAN, CIFAR10_STD)
_IN = (IMAGENET_MEAN, IMAGENET_STD)

#: (dataset, threat model, RobustBench id) -> architecture, for use without the robustbench package
BUILTIN_ROBUSTBENCH: dict[tuple[str, str, str], _Built] = {
    ("cifar10", "Linf", "Standard"): _Built(_wrn(28, 10)),
    ("cifar10", "Linf", "Carmon2019Unlabeled"): _Built(_wrn(28, 10, True)),
    ("cifar10", "Linf", "Sehwag2020Hydra"): _Built(_wrn(28, 10, True)),
    ("cifar10", "Linf", "Wang2020Improving"): _Built(_wrn(28, 10, True)),
    ("cifar10", "Linf", "Zhang2019Theoretically"): _Built(_wrn(34, 10, True)),
    ("cifar10", "Linf", "Huang2020Self"): _Built(_wrn(34, 10, True)),
    ("cifar10", "Linf", "Rice2020Overfitting"): _Built(_wrn(34, 20), *_C10),
    ("cifar10", "Linf", "Engstrom2019Robustness"): _Built(CifarResNet50, *_ENGSTROM),
    ("cifar10", "Linf", "Wong2020Fast"): _Built(PreActResNet18, *_C10),
    ("cifar10", "Linf", "Ding2020MMA"): _Built(_wrn(28, 4), standardize=True),
    ("cifar10", "Linf", "Gowal2020Uncovering_70_16"): _Built(_dm(70, 16), *_C10),
    ("cifar10", "Linf", "Gowal2020Uncovering_70_16_extra"): _Built(_dm(70, 16), *_C10),
    ("cifar10", "Linf", "Gowal2020Uncovering_34_20"): _Built(_dm(34, 20), *_C10),
    ("cifar10", "Linf", "Gowal2020Uncovering_28_10_extra"): _Built(_dm(28, 10), *_C10),
    ("cifar10", "Linf", "Gowal2021Improving_70_16_ddpm_100m"): _Built(_dm(70, 16), *_C10),
    ("cifar10", "Linf", "Gowal2021Improving_28_10_ddpm_100m"): _Built(_dm(28, 10), *_C10),
    ("cifar10", "L2", "Standard"): _Built(_wrn(28, 10)),
    ("cifar10", "L2", "Augustin2020Adversarial"): _Built(CifarResNet50, *_AUGUSTIN),
    ("cifar10", "L2", "Engstrom2019Robustness"): _Built(CifarResNet50, *_ENGSTROM),
    ("cifar10", "L2", "Rice2020Overfitting"): _Built(lambda: PreActResNet18(v2=True), *_C10),
    ("cifar10", "L2", "Rony2019Decoupling"): _Built(_wrn(28, 10), *_RONY),
    ("cifar10", "L2", "Ding2020MMA"): _Built(_wrn(28, 4), standardize=True),
    ("cifar10", "L2", "Gowal2020Uncovering"): _Built(_dm(70, 16), *_C10),
    ("cifar10", "L2", "Gowal2020Uncovering_extra"): _Built(_dm(70, 16), *_C10),
    ("imagenet", "Linf", "Standard_R50"): _Built(_tv("resnet50"), *_IN),
    ("imagenet", "Linf", "Wong2020Fast"): _Built(_tv("resnet50"), *_IN),
    ("imagenet", "Linf", "Engstrom2019Robustness"): _Built(_tv("resnet50"), *_IN),
    ("imagenet", "Linf", "Salman2020Do_R50"): _Built(_tv("resnet50"), *_IN),
    ("imagenet", "Linf", "Salman2020Do_R18"): _Built(_tv("resnet18"), *_IN),
    ("imagenet", "Linf", "Salman2020Do_50_2"): _Built(_tv("wide_resnet50_2"), *_IN),
}
