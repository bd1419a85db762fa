"""CIFAR ResNet with option-A shortcuts (He, Zhang, Ren, Sun, "Deep Residual Learning for Image
Recognition", CVPR 2016, Sec. 4.2), written from the paper's description.

Depth ``6n + 2``: a 3x3 conv (3 -> 16) + BN + ReLU, three stages of ``n`` basic blocks with 16, 32, 64
channels (stride 2 at the start of stages 2 and 3), global average pooling and a linear layer
(64 -> classes). A block that changes shape uses the parameter-free "option A" shortcut: keep every
second pixel and zero-pad the new channels. State-dict keys: ``conv1, bn1,
layer{1,2,3}.{i}.{conv1,bn1,conv2,bn2}, linear`` (the layout of the shared ResNet-20/32/56 weights).

The network expects inputs normalised with mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225) at
32 px; :func:`genEval.classifiers.loaders.cifar_resnet` wraps it so that it takes ``[0, 1]`` images.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from genEval.interfaces import SettingError

CIFAR_RESNET_DEPTHS = (20, 32, 44, 56, 110)


class ShortcutA(nn.Module):
    """Option-A shortcut: spatial subsampling by 2 and zero channel padding (no weights)."""

    def __init__(self, in_planes: int, planes: int) -> None:
        super().__init__()
        self.pad = planes - in_planes

    def forward(self, x: Tensor) -> Tensor:
        x = x[:, :, ::2, ::2]
        lo = self.pad // 2
        return F.pad(x, (0, 0, 0, 0, lo, self.pad - lo))

    def extra_repr(self) -> str:
        return f"pad_channels={self.pad}"


class BasicBlock(nn.Module):
    """Two 3x3 conv + BN layers with a residual connection; ReLU after the sum."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = ShortcutA(in_planes, planes) if stride != 1 or in_planes != planes else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for 32x32 images; ``forward`` takes normalised images, returns logits."""

    def __init__(self, depth: int = 20, num_classes: int = 10) -> None:
        super().__init__()
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
            raise SettingError("depth", depth, f"6n+2 for a CIFAR ResNet (e.g. {list(CIFAR_RESNET_DEPTHS)})", "20")
        n = (depth - 2) // 6
        self.depth = depth
        self.num_classes = int(num_classes)
        self.conv1 = nn.Conv2d(3, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._stage(16, 16, n, stride=1)
        self.layer2 = self._stage(16, 32, n, stride=2)
        self.layer3 = self._stage(32, 64, n, stride=2)
        self.linear = nn.Linear(64, self.num_classes)
        for m in self.modules():  # He initialisation, as in the paper
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    @staticmethod
    def _stage(in_planes: int, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [BasicBlock(in_planes, planes, stride)]
        layers += [BasicBlock(planes, planes, 1) for _ in range(blocks - 1)]
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)

    def extra_repr(self) -> str:
        return f"depth={self.depth}, num_classes={self.num_classes}"
