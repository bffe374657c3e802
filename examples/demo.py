"""Train a tiny MLP through an `@function` layer, then check its gradients by finite differences.

The model is 2 -> 16 -> 16 -> 1 on generated data (y = sin(2 x0) * cos(x1)); each hidden layer is one
traced FUNCTION, so every step differentiates through `call_gradient`. After training, the gradients of a
float64 copy of the model are compared with central finite differences along random directions
(a dot-product test). Exit status 1 when that check fails.

    python examples/demo.py [--steps N] [--device NAME]

The device defaults to Device.DEFAULT ($UOPGRAD_DEVICE, else the first installed backend).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from uopgrad import Device, Tensor, dtypes, function


@function
def layer(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """One hidden layer: relu(x @ w + b), traced into a FUNCTION on every call."""
    return (x @ w + b).relu()


def model(x: Tensor, params: list[Tensor]) -> Tensor:
    w1, b1, w2, b2, w3, b3 = params
    return layer(layer(x, w1, b1), w2, b2) @ w3 + b3


def mse(pred: Tensor, y: Tensor) -> Tensor:
    return (pred - y).square().mean()


def init_params(rng: np.random.Generator, sizes: list[int]) -> list[np.ndarray]:
    params = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        params.append(rng.uniform(-1, 1, (n_in, n_out)) * np.sqrt(6 / (n_in + n_out)))
        params.append(np.zeros(n_out))
    return params


def make_data(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform(-1.5, 1.5, (n, 2))
    return x, (np.sin(2 * x[:, 0]) * np.cos(x[:, 1]))[:, None]


def train(
    x: np.ndarray, y: np.ndarray, init: list[np.ndarray], steps: int, lr: float, device: str
) -> tuple[list[float], list[np.ndarray]]:
    """SGD with momentum 0.9; returns the loss at every step and the trained parameters."""
    params = [Tensor(p.astype(np.float32), device=device, requires_grad=True) for p in init]
    velocity = [Tensor(np.zeros(p.shape, np.float32), device=device) for p in init]
    xt, yt = Tensor(x.astype(np.float32), device=device), Tensor(y.astype(np.float32), device=device)
    losses = []
    for step in range(steps):
        if step == 0:  # the step that compiles; the others reuse its kernels
            print("step   0 compiles its kernels (kept on disk: a second run loads them) ...")
            started = time.perf_counter()
        loss = mse(model(xt, params), yt)
        loss.backward()
        for p, v in zip(params, velocity):
            assert p.grad is not None
            v.assign(v * 0.9 + p.grad)
            p.assign(p.detach() - v * lr)
            p.grad = None
        Tensor.realize(loss, *params, *velocity)  # one run: the loss is read before the update lands
        losses.append(float(loss.item()))
        if step == 0:
            print(
                f"step   0  loss {losses[-1]:.6f}  ({time.perf_counter() - started:.2f} s with the compile)"
            )
        elif step % 5 == 0 or step == steps - 1:
            print(f"step {step:3d}  loss {losses[-1]:.6f}")
    return losses, [p.numpy() for p in params]


def gradient_check(
    x: np.ndarray,
    y: np.ndarray,
    params: list[np.ndarray],
    device: str,
    rng: np.random.Generator,
    directions: int = 5,
    h: float = 1e-6,
) -> float:
    """Max relative error between <grad, v> and the central difference of the loss along v (float64)."""

    def loss_at(ps: list[np.ndarray]) -> tuple[Tensor, list[Tensor]]:
        ts = [Tensor(p, device=device, dtype=dtypes.float64, requires_grad=True) for p in ps]
        xt = Tensor(x, device=device, dtype=dtypes.float64)
        yt = Tensor(y, device=device, dtype=dtypes.float64)
        return mse(model(xt, ts), yt), ts

    loss, ts = loss_at(params)
    grads = [g.numpy() for g in loss.gradient(*ts)]
    worst = 0.0
    for _ in range(directions):
        vs = [rng.standard_normal(p.shape) for p in params]
        analytic = sum(float(np.sum(g * v)) for g, v in zip(grads, vs))
        plus = loss_at([p + h * v for p, v in zip(params, vs)])[0].item()
        minus = loss_at([p - h * v for p, v in zip(params, vs)])[0].item()
        numeric = (float(plus) - float(minus)) / (2 * h)
        worst = max(worst, abs(analytic - numeric) / max(abs(analytic), abs(numeric), 1e-12))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--device", default=None, help="device to run on (default: Device.DEFAULT)")
    args = parser.parse_args(argv)
    device = Device.canonicalize(args.device) if args.device else Device.DEFAULT
    rng = np.random.default_rng(0)
    x, y = make_data(rng, 64)
    init = init_params(rng, [2, 16, 16, 1])
    print(f"device {device}: MLP 2 -> 16 -> 16 -> 1, {len(x)} samples, {args.steps} SGD steps")

    start = time.perf_counter()
    losses, trained = train(x, y, init, args.steps, args.lr, device)
    print(f"loss {losses[0]:.6f} -> {losses[-1]:.6f} in {time.perf_counter() - start:.1f} s")
    decreased = losses[-1] < 0.5 * losses[0]

    err = gradient_check(x, y, [p.astype(np.float64) for p in trained], device, rng)
    ok = err < 1e-6
    print(
        f"gradient check (float64, central differences, 5 random directions): max relative error "
        f"{err:.2e} -> {'PASS' if ok else 'FAIL'}"
    )
    if not decreased:
        print("FAIL: the loss did not halve during training")
    return 0 if ok and decreased else 1


if __name__ == "__main__":
    sys.exit(main())
