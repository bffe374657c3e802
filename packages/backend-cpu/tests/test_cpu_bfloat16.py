"""bfloat16 on CPU: buffers hold the bits, values are floats rounded to bfloat16 after every op, as REFERENCE
computes them."""

import numpy as np

from uopgrad import dtypes


def test_bfloat16_kernels_agree_with_reference_bit_for_bit():
    import ml_dtypes

    from uopgrad import Tensor

    rng = np.random.default_rng(7)
    x = rng.standard_normal(64).astype(np.float32) * 50
    y = rng.standard_normal(64).astype(np.float32)
    outs = {}
    for dev in ("CPU", "REFERENCE"):
        a = Tensor(x, device=dev, dtype=dtypes.bfloat16)
        b = Tensor(y, device=dev, dtype=dtypes.bfloat16)
        r = ((a * b + a / 3).exp2().sqrt() - b.maximum(a)).sum()  # each op rounded to bfloat16
        outs[dev] = (r.numpy(), (a * b).numpy(), a.cast(dtypes.int16).numpy())
    for got, ref in zip(outs["CPU"], outs["REFERENCE"]):
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(
            got.view(np.uint16) if got.dtype == ml_dtypes.bfloat16 else got,
            ref.view(np.uint16) if ref.dtype == ml_dtypes.bfloat16 else ref,
        )
