"""Train a small CNN on scikit-learn's handwritten digits (8x8 images, shipped with scikit-learn: no
download) with uopgrad.nn and Adam; report the test accuracy and write the loss curve as a PNG.

    python examples/digits.py [--epochs N] [--batch B] [--lr LR] [--plot PATH] [--device NAME]

The model is two blocks of conv(3x3) -> batchnorm -> relu -> maxpool (1 -> 16 -> 32 channels, 8x8 -> 2x2)
and a linear layer (128 -> 10), trained with Adam and a cosine learning-rate decay on 80% of the 1797
images and tested on the other 20%. Exit status 1 when the test accuracy is below --target (0.95).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from tqdm import tqdm

from uopgrad import Device, Tensor
from uopgrad.nn import BatchNorm, Conv2d, Linear
from uopgrad.nn.optim import Adam
from uopgrad.nn.state import get_parameters, get_state_dict


class Net:
    """Two conv blocks and a linear classifier."""

    def __init__(self) -> None:
        self.c1, self.bn1 = Conv2d(1, 16, 3, padding=1), BatchNorm(16)
        self.c2, self.bn2 = Conv2d(16, 32, 3, padding=1), BatchNorm(32)
        self.fc = Linear(128, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.bn1(self.c1(x)).relu().max_pool2d(2)  # (N, 16, 4, 4)
        x = self.bn2(self.c2(x)).relu().max_pool2d(2)  # (N, 32, 2, 2)
        return self.fc(x.flatten(1))


def load(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels): images as (N, 1, 8, 8) in [0, 1]."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = len(y) // 5
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def accuracy(net: Net, x: np.ndarray, y: np.ndarray, device: str) -> float:
    """The fraction of x that the model classifies as y."""
    pred = net(Tensor(x, device=device)).argmax(-1).numpy()
    return float((pred == y).mean())


def train(
    net: Net, x: np.ndarray, y: np.ndarray, epochs: int, batch: int, lr: float, device: str, seed: int
) -> list[float]:
    """Adam over shuffled mini-batches, the learning rate decaying along a cosine; returns the loss of
    every step."""
    opt = Adam(get_parameters(net), lr=lr)
    state = list(get_state_dict(net).values())  # the parameters and BatchNorm's running statistics
    rng = np.random.default_rng(seed)
    steps_per_epoch = len(y) // batch  # drop the ragged last batch: every step has the same shapes
    total = epochs * steps_per_epoch
    losses: list[float] = []
    with tqdm(total=epochs * steps_per_epoch, unit="step") as bar:
        for epoch in range(epochs):
            order = rng.permutation(len(y))
            for k in range(steps_per_epoch):
                first, started, before = not losses, time.perf_counter(), builds(device)
                if first:  # the one slow step: say why, then what it cost
                    bar.write("step 1 builds the kernels of the forward, backward and Adam step ...")
                idx = order[k * batch : (k + 1) * batch]
                xb, yb = Tensor(x[idx], device=device), Tensor(y[idx], device=device)
                # a buffer, not a constant: the kernels of every step stay the same
                opt.lr.assign(
                    Tensor(
                        np.asarray(lr * 0.5 * (1 + np.cos(np.pi * len(losses) / total)), np.float32),
                        device=device,
                    )
                )
                opt.zero_grad()
                with Tensor.train():  # BatchNorm's batch statistics, and the optimiser steps only in it
                    loss = net(xb).cross_entropy(yb)
                    loss.backward()
                    Tensor.realize(loss, *opt.schedule_step(), *state)  # one run: the loss before the update
                losses.append(float(loss.item()))
                if first:
                    seconds = time.perf_counter() - started
                    (compiled, hits), (c0, h0) = builds(device), before
                    bar.write(
                        f"step 1: {compiled - c0} kernels compiled, {hits - h0} from the disk cache,"
                        f" in {seconds:.2f} s; the other steps reuse them"
                    )
                bar.set_postfix(epoch=epoch + 1, loss=f"{losses[-1]:.4f}")
                bar.update()
    return losses


def builds(device: str) -> tuple[int, int]:
    """Kernels the device's compiler has compiled so far, and those its disk cache had."""
    stats = getattr(getattr(Device[device], "compiler", None), "stats", {})
    return stats.get("compiled", 0), stats.get("disk_hit", 0)


def plot(losses: list[float], path: Path) -> None:
    """The loss curve (and its running mean) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(losses, lw=0.8, alpha=0.5, label="step")
    w = max(1, len(losses) // 20)
    ax.plot(
        np.arange(w - 1, len(losses)),
        np.convolve(losses, np.ones(w) / w, "valid"),
        lw=2,
        label=f"running mean ({w})",
    )
    ax.set_xlabel("step")
    ax.set_ylabel("cross entropy")
    ax.set_yscale("log")
    ax.set_title("uopgrad: a small CNN on scikit-learn's digits")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--plot", type=Path, default=Path("build/digits_loss.png"))
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    device = Device.canonicalize(args.device) if args.device else Device.DEFAULT
    Tensor.manual_seed(args.seed)
    xtr, ytr, xte, yte = load(args.seed)
    print(f"digits: {len(ytr)} train, {len(yte)} test images on {device}")
    net = Net()
    t0 = time.perf_counter()
    losses = train(net, xtr, ytr, args.epochs, args.batch, args.lr, device, args.seed)
    seconds = time.perf_counter() - t0
    acc = accuracy(net, xte, yte, device)
    plot(losses, args.plot)
    print(f"test accuracy {acc:.4f} after {len(losses)} steps in {seconds:.1f}s; loss curve: {args.plot}")
    if acc < args.target:
        print(f"FAIL: test accuracy {acc:.4f} is below the target {args.target}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
