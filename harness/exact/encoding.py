"""Turn a zoo ``nn.Sequential`` into the affine-layer list that ``exact.solver`` solves on.

Supported: Flatten, Linear, ReLU, Conv2d (as its explicit matrix, when it fits), Identity, nested
Sequentials, and the zoo's log-softmax twin (``LogitShift``: it subtracts a per-sample constant
from every logit, so the decision and thus the exact distances are the base model's). Affine
layers not separated by a ReLU are composed into one. Anything else is refused with
``UnsupportedLayer`` naming the layer, since an unencoded nonlinearity would make the "exact"
distances silently wrong.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attackaudit.sources.zoo import LogitShift
from attackaudit.errors import InputError

Layer = tuple[np.ndarray, np.ndarray]  # (W: out×in, b: out), float64
#: largest explicit conv matrix (entries) we build: 8×8 digits CNN layers are ≤ 0.6 M
MAX_CONV_ENTRIES = 50_000_000


class UnsupportedLayer(InputError):
    """The model holds a layer the MILP encoding cannot represent exactly."""


def _modules(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    if isinstance(model, LogitShift):  # log-softmax keeps the argmax: encode the base model
        yield from _modules(model.model)
    elif isinstance(model, nn.Sequential):
        for name, child in model.named_children():
            for sub, mod in _modules(child):
                yield (f"{name}.{sub}" if sub else name), mod
    else:
        yield "", model


def _conv_matrix(conv: nn.Conv2d, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """The conv as W (out×in over C·H·W flattened like nn.Flatten) and b, by probing the basis."""
    if conv.padding_mode != "zeros":
        raise UnsupportedLayer(f"Conv2d with padding_mode={conv.padding_mode!r} is not supported (only zeros)")
    n_in = int(np.prod(shape))
    weight = conv.weight.detach().double().cpu()
    bias = conv.bias.detach().double().cpu() if conv.bias is not None else None

    def apply(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, weight, bias, conv.stride, conv.padding, conv.dilation, conv.groups)

    with torch.no_grad():
        out_shape = tuple(apply(torch.zeros(1, *shape, dtype=torch.float64)).shape[1:])
        if n_in * int(np.prod(out_shape)) > MAX_CONV_ENTRIES:
            raise UnsupportedLayer(f"Conv2d on {shape} → {out_shape} is too large to encode as a matrix")
        b = apply(torch.zeros(1, *shape, dtype=torch.float64)).reshape(-1)
        cols = apply(torch.eye(n_in, dtype=torch.float64).reshape(n_in, *shape)).reshape(n_in, -1) - b
    return cols.T.numpy().copy(), b.numpy().copy(), out_shape


def encode_sequential(model: nn.Module, input_shape: tuple[int, ...]) -> list[Layer]:
    """Affine layers (W, b) with a ReLU between consecutive ones; input ``input_shape`` (C×H×W
    or D, without the batch), flattened in C·H·W order like ``nn.Flatten``."""
    shape = tuple(int(s) for s in input_shape)
    dim = int(np.prod(shape))
    w, b = np.eye(dim), np.zeros(dim)  # the affine map pending since the last ReLU
    pending_identity = True
    layers: list[Layer] = []
    for name, mod in _modules(model):
        where = f"layer {name or '0'} ({type(mod).__name__})"
        if isinstance(mod, nn.Identity):
            continue
        if isinstance(mod, nn.Flatten):
            if mod.start_dim != 1 or mod.end_dim != -1:
                raise UnsupportedLayer(f"{where}: only Flatten(start_dim=1, end_dim=-1) is supported")
            shape = (int(np.prod(shape)),)
        elif isinstance(mod, nn.Linear):
            if len(shape) != 1 or shape[0] != mod.in_features:
                raise UnsupportedLayer(f"{where}: expects {mod.in_features} flat inputs, gets shape {shape}")
            lw, lb = mod.weight.detach().double().cpu().numpy(), mod.bias
            lb = lb.detach().double().cpu().numpy() if lb is not None else np.zeros(mod.out_features)
            w, b, shape, pending_identity = lw @ w, lw @ b + lb, (mod.out_features,), False
        elif isinstance(mod, nn.Conv2d):
            if len(shape) != 3:
                raise UnsupportedLayer(f"{where}: expects C×H×W inputs, gets shape {shape}")
            cw, cb, shape = _conv_matrix(mod, shape)
            w, b, pending_identity = cw @ w, cw @ b + cb, False
        elif isinstance(mod, nn.ReLU):
            if pending_identity and layers:  # ReLU(ReLU(h)) = ReLU(h)
                continue
            layers.append((w, b))
            dim = int(np.prod(shape))
            w, b, pending_identity = np.eye(dim), np.zeros(dim), True
        else:
            raise UnsupportedLayer(
                f"{where} cannot be encoded exactly; the MILP supports Flatten, Linear, ReLU, Conv2d "
                f"and Identity only")
    layers.append((w, b))
    return layers


def check_encoding(model: nn.Module, layers: list[Layer], inputs: torch.Tensor, atol: float = 1e-4) -> float:
    """Largest |logit difference| between ``model`` (float32) and the encoding (float64) on
    ``inputs`` (N×C×H×W); raises when it exceeds ``atol`` (an encoding bug, never a rounding)."""
    from attackaudit.exact.solver import forward

    with torch.no_grad():
        ref = model(inputs.float().cpu()).double().numpy()
    got = forward(layers, inputs.double().cpu().reshape(len(inputs), -1).numpy())
    if isinstance(model, LogitShift):  # compare decisions up to the per-sample shift
        got = got - np.log(np.exp(got - got.max(1, keepdims=True)).sum(1, keepdims=True)) - got.max(1, keepdims=True)
    err = float(np.abs(ref - got).max()) if ref.size else 0.0
    if err > atol:
        raise RuntimeError(f"MILP encoding disagrees with the model by {err:.3g} > {atol:g} in the logits")
    return err
