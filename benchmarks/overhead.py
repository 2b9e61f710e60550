"""Overhead of attackaudit (adapter + QueryTracker) over calling each library directly.

For each library, the same attack on the same model and inputs runs directly through the library
and through attackaudit's adapter on a QueryTracker, alternating, several repetitions; prints the
median wall-time ratio per library. Models: the digits CNN (8×8) and a ResNet-18 shape on 32×32
inputs (random weights: only timing matters).

    python benchmarks/overhead.py [--device cpu|cuda] [--reps N] [--models digits cifar] [--threads 1]
                                  [--profile]

``--profile`` then shows what remains: each tracked call once more under cProfile, with the share
of its time spent in attackaudit's own code (the adapter and the QueryTracker, counting the torch
calls they make themselves, not the model's forwards and backwards they pass on) and the
functions that spend it.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from attackaudit.adapters import load_library
from attackaudit.measure.tracker import QueryTracker


def cifar_resnet18() -> nn.Module:
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)  # the CIFAR stem: 32×32 inputs
    model.maxpool = nn.Identity()
    return model.eval()


def direct_calls(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> dict[str, Callable[[], object]]:
    """Each library called the way its documentation shows, on the raw model, with the
    hyperparameters of the spec in ``SPECS`` (so both sides do the same work)."""
    calls: dict[str, Callable[[], object]] = {}
    eps = 0.03
    alpha = 2.5 * eps / steps  # the specs' step rule: Madry et al.'s 2.5·ε/steps

    def adv_lib_call():
        from adv_lib.attacks import ddn
        return ddn(model, x, y, steps=steps)
    calls["adv_lib"] = adv_lib_call

    def torchattacks_call():
        import torchattacks
        return torchattacks.PGD(model, eps=eps, alpha=alpha, steps=steps, random_start=True)(x, y)
    calls["torchattacks"] = torchattacks_call

    def foolbox_call():
        import foolbox as fb
        fmodel = fb.PyTorchModel(model, bounds=(0, 1), device=x.device)
        return fb.attacks.LinfPGD(steps=steps)(fmodel, x, y, epsilons=eps)[1]  # foolbox's own step
    calls["foolbox"] = foolbox_call

    def art_call():
        from art.attacks.evasion import ProjectedGradientDescent
        from art.estimators.classification import PyTorchClassifier
        clf = PyTorchClassifier(model, nn.CrossEntropyLoss(), tuple(x.shape[1:]), 10, clip_values=(0, 1),
                                device_type="gpu" if x.is_cuda else "cpu")
        atk = ProjectedGradientDescent(clf, eps=eps, eps_step=alpha, max_iter=steps, batch_size=len(x),
                                       verbose=False)
        return atk.generate(x.cpu().numpy(), y.cpu().numpy())
    calls["art"] = art_call

    def cleverhans_call():
        from cleverhans.torch.attacks.projected_gradient_descent import projected_gradient_descent
        return projected_gradient_descent(model, x, eps, alpha, steps, float("inf"), clip_min=0.0, clip_max=1.0,
                                          y=y, rand_init=True)
    calls["cleverhans"] = cleverhans_call
    return calls


#: the spec used through attackaudit for each library, and its params for the same work
SPECS = {
    "adv_lib": ("adv_lib/ddn/l2", lambda steps: {"steps": steps}, None),
    "torchattacks": ("torchattacks/PGD/linf", lambda steps: {"steps": steps}, 0.03),
    "foolbox": ("foolbox/LinfProjectedGradientDescentAttack/linf", lambda steps: {"steps": steps}, 0.03),
    "art": ("art/ProjectedGradientDescent/linf", lambda steps: {"max_iter": steps}, 0.03),
    "cleverhans": ("cleverhans/projected_gradient_descent/linf", lambda steps: {"nb_iter": steps}, 0.03),
}


def tracked_call(library: str, model: nn.Module, x, y, steps: int) -> Callable[[], object] | None:
    key, params, eps = SPECS[library]
    entry = load_library(library)
    spec = next((s for s in entry.specs if s.key == key), None)
    if spec is None:
        return None
    steps_param = spec.steps_param
    spec = spec.with_params(**{steps_param: steps}) if steps_param else spec

    # the harness computes the clean logits once per model and worker, not once per job
    with torch.no_grad():
        clean = model(x)

    def call():
        tracker = QueryTracker(model, x, y, norm=spec.norm, budget=10**9, clean_logits=clean)
        kw = {"eps": eps} if spec.kind == "fixed" else {}
        adv = spec.run(tracker, x.clone(), y, **kw)
        # what the harness reads after every job (this finishes the tracker's deferred work)
        return adv, tracker.best_distance, tracker.best_adversarial, tracker.queries
    return call


def timed(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def bench(name: str, model: nn.Module, x, y, steps: int, reps: int, device, libraries) -> dict[str, float]:
    """Alternate single direct and tracked calls ``reps`` times per library (the order flips each
    time); print and return the median of the per-pair ratios. Pairs of adjacent calls see the
    same machine load, which on a shared machine drifts by more than the overhead itself."""
    direct = direct_calls(model, x, y, steps)
    print(f"\n{name}: batch {tuple(x.shape)}, {steps} steps, {reps} alternating pairs, device {device}, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"{'library':14s} {'direct s':>9s} {'tracked s':>9s} {'ratio':>7s} {'IQR':>13s}   "
          "(seconds per attack call, medians)")
    result = {}
    for lib in libraries:
        tracked = tracked_call(lib, model, x, y, steps)
        if tracked is None:
            print(f"{lib:14s} spec {SPECS[lib][0]} not in catalogue")
            continue
        torch.manual_seed(0)
        timed(direct[lib], device), timed(tracked, device)  # warm-up
        ratios, d_times, t_times = [], [], []
        for r in range(reps):
            torch.manual_seed(r)
            if r % 2:
                t1 = timed(tracked, device); d1 = timed(direct[lib], device)
            else:
                d1 = timed(direct[lib], device); t1 = timed(tracked, device)
            ratios.append(t1 / d1)
            d_times.append(d1)
            t_times.append(t1)
        q1, median, q3 = statistics.quantiles(ratios, n=4) if reps > 1 else (ratios[0],) * 3
        print(f"{lib:14s} {statistics.median(d_times):9.3f} {statistics.median(t_times):9.3f} "
              f"{statistics.median(ratios):7.3f}   {q1:5.3f}-{q3:5.3f}", flush=True)
        result[lib] = statistics.median(ratios)
    return result


def _package_dirs() -> tuple[str, ...]:
    import attackaudit
    import attackaudit.adapters

    return tuple(str(Path(m.__file__).resolve().parent) + "/" for m in (attackaudit, attackaudit.adapters))


OWN_DIRS = _package_dirs()  # the tracker's and the adapters' files (installed editable or not)


def _own_code(filename: str) -> bool:
    return filename.startswith(OWN_DIRS)


def _label(func: tuple[str, int, str]) -> str:
    """A pstats function key (file, line, name) as ``package/module.py:line name``."""
    filename, line, name = func
    return f"{Path(filename).parent.name}/{Path(filename).name}:{line} {name}"


def profile_own_time(name: str, model: nn.Module, x, y, steps: int, libraries, calls: int = 3,
                     top: int = 6) -> dict[str, float]:
    """Share of a tracked call's profiled time spent in attackaudit's own code, per library.

    Own time is the ``tottime`` of functions in the project's files plus that of the built-in
    functions (torch ops, copies) they call directly; the model's own forwards and backwards run
    in torch's Python and C++ code and are not counted. The profiler slows Python code more than
    C++ kernels, so the share is an upper bound on the overhead."""
    import cProfile
    import pstats

    print(f"\n{name}: profile of {calls} tracked calls per library (share of profiled time in attackaudit's code)")
    shares = {}
    for lib in libraries:
        tracked = tracked_call(lib, model, x, y, steps)
        if tracked is None:
            continue
        tracked()  # warm-up
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            tracked()
        prof.disable()
        stats = pstats.Stats(prof).stats
        total = sum(tt for (_, _, tt, _, _) in stats.values())
        own: dict[str, float] = {}
        for func, (_, _, tt, _, callers) in stats.items():
            if _own_code(func[0]):
                own[_label(func)] = own.get(_label(func), 0.0) + tt
            elif func[0] == "~":  # a built-in: charge the part called from our code to the caller
                for caller, (_, _, ctt, _) in callers.items():
                    if _own_code(caller[0]):
                        own[_label(caller)] = own.get(_label(caller), 0.0) + ctt
        share = sum(own.values()) / total if total else 0.0
        shares[lib] = share
        print(f"{lib:14s} {100 * share:5.1f}% of {total / calls:.3f} s per profiled call")
        for key, tt in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
            print(f"{'':16s}{100 * tt / total:5.1f}%  {key}")
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--reps", type=int, default=None,
                        help="alternating pairs per library (default 31 on the digits CNN, 7 on the ResNet)")
    parser.add_argument("--models", nargs="+", default=["digits", "cifar"], choices=["digits", "cifar"])
    parser.add_argument("--libraries", nargs="+", default=list(SPECS))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: what each of the harness's workers gets on a 2-core machine)")
    parser.add_argument("--profile", action="store_true",
                        help="then profile each tracked call: the share of its time in attackaudit's own code")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    if "digits" in args.models:
        from attackaudit.sources.subset import load_subset
        from attackaudit.sources.zoo import load_model

        sub = load_subset("digits", 64, 0)
        model, x, y = load_model("digits-cnn", device), sub.inputs.to(device), sub.labels.to(device)
        bench("digits-cnn", model, x, y, 100, args.reps or 31, device, args.libraries)
        if args.profile:
            profile_own_time("digits-cnn", model, x, y, 100, args.libraries)
    if "cifar" in args.models:
        n = 16 if device.type == "cpu" else 256
        x = torch.rand(n, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (n,), device=device)
        # the tracker costs one uncounted clean forward up front: fewer than ~20 steps overstate it
        model, steps = cifar_resnet18().to(device), 20 if device.type == "cpu" else 50
        bench("resnet18-32x32", model, x, y, steps, args.reps or 7, device, args.libraries)
        if args.profile:
            profile_own_time("resnet18-32x32", model, x, y, steps, args.libraries, calls=1)


if __name__ == "__main__":
    main()
