"""A VIZ page of a CPU program: the kernels' C source is on it, and every kernel has its pass steps."""

import re

import numpy as np

from uopgrad import Tensor, viz


def test_page_of_a_cpu_realize_has_the_c_source_of_each_kernel(tmp_path):
    x = Tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6), device="CPU")
    with viz.capture(tmp_path) as pages:
        y = (x - x.sum(axis=1, keepdim=True)).exp()  # two kernels: the sum, then the broadcast exp
        out = y.numpy()
    m = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_allclose(out, np.exp(m - m.sum(axis=1, keepdims=True)), rtol=1e-6)
    assert [p.name for p in pages] == ["0000-CPU.html"]
    text = pages[0].read_text()
    kernels = re.findall(r"<h2>kernel \d+: (\w+)</h2>", text)
    assert len(kernels) == 2
    sources = re.findall(r'<pre class="source">(.*?)</pre>', text, flags=re.S)
    assert len(sources) == 2 and all(f"void {k}(" in s for k, s in zip(kernels, sources))
    assert text.count("step 1/") == 2 and "after &#x27;decompositions&#x27;" in text
