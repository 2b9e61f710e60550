"""Architectures RobustBench uses, built without the robustbench package (its checkpoints are
plain state dicts; ``attackaudit.sources.model_loader`` loads them into these). Module and parameter names
follow RobustBench's definitions so its checkpoints load strictly.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _conv3(cin: int, cout: int, stride: int = 1, padding: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride, padding, bias=False)


class _WRNBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1, self.relu1, self.conv1 = nn.BatchNorm2d(cin), nn.ReLU(), _conv3(cin, cout, stride)
        self.bn2, self.relu2, self.conv2 = nn.BatchNorm2d(cout), nn.ReLU(), _conv3(cout, cout)
        self.equal = cin == cout
        self.convShortcut = None if self.equal else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        if self.equal:
            out = self.relu1(self.bn1(x))
        else:
            x = self.relu1(self.bn1(x))
            out = x
        out = self.conv2(self.relu2(self.bn2(self.conv1(out))))
        return (x if self.equal else self.convShortcut(x)) + out


class _Group(nn.Module):
    """``n`` blocks, the first changing width and stride, held under ``attribute`` (``layer`` in
    RobustBench's WideResNet, ``block`` in DeepMind's), so that checkpoints' keys match."""

    def __init__(self, block: type[nn.Module], attribute: str, n: int, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.attribute = attribute
        setattr(self, attribute, nn.Sequential(*[block(cin if i == 0 else cout, cout, stride if i == 0 else 1)
                                                 for i in range(n)]))

    def forward(self, x: Tensor) -> Tensor:
        return getattr(self, self.attribute)(x)


class WideResNet(nn.Module):
    """The TRADES-style WideResNet of RobustBench's ``wide_resnet.py`` (same parameter names)."""

    def __init__(self, depth: int = 28, widen_factor: int = 10, num_classes: int = 10, sub_block1: bool = False):
        super().__init__()
        ch = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        n = (depth - 4) // 6
        self.conv1 = _conv3(3, ch[0])
        self.block1 = _Group(_WRNBlock, "layer", n, ch[0], ch[1], 1)
        if sub_block1:
            self.sub_block1 = _Group(_WRNBlock, "layer", n, ch[0], ch[1], 1)  # unused in forward, as in RobustBench
        self.block2 = _Group(_WRNBlock, "layer", n, ch[1], ch[2], 2)
        self.block3 = _Group(_WRNBlock, "layer", n, ch[2], ch[3], 2)
        self.bn1, self.relu = nn.BatchNorm2d(ch[3]), nn.ReLU()
        self.fc = nn.Linear(ch[3], num_classes)
        self.channels = ch[3]

    def forward(self, x: Tensor) -> Tensor:
        out = self.block3(self.block2(self.block1(self.conv1(x))))
        out = F.avg_pool2d(self.relu(self.bn1(out)), 8)
        return self.fc(out.view(-1, self.channels))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = _conv3(planes, planes, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != out:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet50(nn.Module):
    """RobustBench's CIFAR ResNet-50 (``resnet.py``: ResNet(Bottleneck, [3, 4, 6, 3]))."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv3(3, 64), nn.BatchNorm2d(64)
        cin, layers = 64, []
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            seq = []
            for s in [stride] + [1] * (blocks - 1):
                seq.append(_Bottleneck(cin, planes, s))
                cin = planes * _Bottleneck.expansion
            layers.append(nn.Sequential(*seq))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.linear = nn.Linear(512 * _Bottleneck.expansion, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.linear(F.avg_pool2d(out, 4).flatten(1))


class _PreActBlock(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int, out_shortcut: bool) -> None:
        super().__init__()
        self.out_shortcut = out_shortcut
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), _conv3(cin, planes, stride)
        self.bn2, self.conv2 = nn.BatchNorm2d(planes), _conv3(planes, planes)
        if stride != 1 or cin != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out if self.out_shortcut else x) if hasattr(self, "shortcut") else x
        out = self.conv2(F.relu(self.bn2(self.conv1(out))))
        return out + shortcut


class PreActResNet18(nn.Module):
    """RobustBench's PreActResNet-18 (``PreActBlock``; ``v2``: ``PreActBlockV2`` with a final BN)."""

    def __init__(self, num_classes: int = 10, v2: bool = False) -> None:
        super().__init__()
        self.bn_before_fc = v2
        self.conv1 = _conv3(3, 64)
        cin, layers = 64, []
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(_PreActBlock(cin, planes, stride, v2), _PreActBlock(planes, planes, 1, v2)))
            cin = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        if v2:
            self.bn = nn.BatchNorm2d(512)
        self.linear = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.layer4(self.layer3(self.layer2(self.layer1(self.conv1(x)))))
        if self.bn_before_fc:
            out = F.relu(self.bn(out))
        return self.linear(F.avg_pool2d(out, 4).flatten(1))


class _Swish(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(x)


class _DMBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.batchnorm_0, self.relu_0 = nn.BatchNorm2d(cin), _Swish()
        self.conv_0 = _conv3(cin, cout, stride, padding=0)  # padded by hand, like TF's SAME
        self.batchnorm_1, self.relu_1 = nn.BatchNorm2d(cout), _Swish()
        self.conv_1 = _conv3(cout, cout)
        self.has_shortcut = cin != cout
        self.shortcut = nn.Conv2d(cin, cout, 1, stride, 0, bias=False) if self.has_shortcut else None
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        if self.has_shortcut:
            x = self.relu_0(self.batchnorm_0(x))
            v = x
        else:
            v = self.relu_0(self.batchnorm_0(x))
        v = F.pad(v, (1, 1, 1, 1) if self.stride == 1 else (0, 1, 0, 1))
        out = self.conv_1(self.relu_1(self.batchnorm_1(self.conv_0(v))))
        return (self.shortcut(x) if self.has_shortcut else x) + out


class DMWideResNet(nn.Module):
    """DeepMind's WideResNet with Swish (Gowal et al.), RobustBench's ``dm_wide_resnet.py`` names.

    Its input normalisation is left to ``Normalized``.
    """

    def __init__(self, depth: int = 70, width: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        ch = [16, 16 * width, 32 * width, 64 * width]
        n = (depth - 4) // 6
        self.init_conv = _conv3(3, ch[0])
        self.layer = nn.Sequential(*[_Group(_DMBlock, "block", n, ch[i], ch[i + 1], 1 if i == 0 else 2)
                                     for i in range(3)])
        self.batchnorm, self.relu = nn.BatchNorm2d(ch[3]), _Swish()
        self.logits = nn.Linear(ch[3], num_classes)
        self.channels = ch[3]

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.batchnorm(self.layer(self.init_conv(x))))
        return self.logits(F.avg_pool2d(out, 8).view(-1, self.channels))
