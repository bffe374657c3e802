"""A VIZ page of a small CNN's forward and backward in a real headless Chromium: the SVG renders, fit and
zoom move the picture, search marks the nodes of an op, a folded movement chain opens on a click.

The page's own script runs in the browser; a few lines of test script appended to a copy of the page play
the user (events, as a mouse and keyboard make them) and write what they saw into the DOM, which
`chromium --dump-dom` prints. Skipped where no Chromium is installed (CI installs with pip only).
"""

import html
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from uopgrad import Tensor, viz

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
BROWSER = next((b for b in BROWSERS if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no headless Chromium on PATH (apt-get install chromium; CI has none)"
)

PLAY = """
<script>
(function () {
  function tf(box) { return box.querySelector("g.view").getAttribute("transform"); }
  function inside(box) {  // whether the drawn graph lies within its box
    var a = box.getBoundingClientRect(), b = box.querySelector("g.view").getBoundingClientRect();
    return b.left >= a.left - 1 && b.right <= a.right + 1 && b.top >= a.top - 1 && b.bottom <= a.bottom + 1;
  }
  var out = {}, box = document.querySelector("#tensor-graph .pic");
  out.nodes = document.querySelectorAll("svg.graph g.node").length;
  out.drawn = box.querySelector("g.node rect").getBBox().width;  // laid out: text and boxes have sizes
  out.load = tf(box); out.loadInside = inside(box);
  box.querySelector("button.zoom-1\\\\:1").click(); out.actual = tf(box); out.actualInside = inside(box);
  box.querySelector("button.zoom-fit").click(); out.fit = tf(box); out.fitInside = inside(box);
  box.querySelector("button.zoom-in").click(); out.zoomIn = tf(box);
  var r = box.getBoundingClientRect();
  box.dispatchEvent(new WheelEvent("wheel", {deltaY: 100, clientX: r.left + 50, clientY: r.top + 50,
                                             bubbles: true, cancelable: true}));
  out.wheel = tf(box);
  var svg = box.querySelector("svg");
  var at = {clientX: r.left + 100, clientY: r.top + 100, bubbles: true};
  svg.dispatchEvent(new MouseEvent("mousedown", at));
  window.dispatchEvent(new MouseEvent("mousemove", {clientX: r.left + 160, clientY: r.top + 130}));
  window.dispatchEvent(new MouseEvent("mouseup", {}));
  out.pan = tf(box);

  var search = document.getElementById("search");
  search.value = "reduce";
  search.dispatchEvent(new Event("input", {bubbles: true}));
  out.hits = document.getElementById("hits").textContent;
  out.marked = Array.prototype.map.call(document.querySelectorAll("g.node.hit"),
                                        function (g) { return g.getAttribute("data-op"); });
  search.value = ""; search.dispatchEvent(new Event("input", {bubbles: true}));
  out.markedAfterClear = document.querySelectorAll("g.node.hit").length;

  var fold = box.querySelector("g.node[data-fold]");
  out.fold = fold.getAttribute("data-fold");
  var members = fold.querySelector("g.members");
  out.before = getComputedStyle(members).display;
  function click(el) {  // as a mouse clicks: down, up, click, in one place
    ["mousedown", "mouseup", "click"].forEach(function (t) {
      el.dispatchEvent(new MouseEvent(t, {bubbles: true, clientX: 5, clientY: 5}));
    });
  }
  click(fold.querySelector("rect"));
  out.after = getComputedStyle(members).display;
  out.memberLines = members.querySelectorAll("text").length;
  out.memberWidth = members.getBBox().width;
  click(fold.querySelector("text"));
  out.again = getComputedStyle(members).display;

  var pre = document.createElement("pre"); pre.id = "played"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def cnn_step() -> None:
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((2, 1, 8, 8), dtype=np.float32))
    w1 = Tensor(rng.standard_normal((4, 1, 3, 3), dtype=np.float32), requires_grad=True)
    w2 = Tensor(rng.standard_normal((10, 36), dtype=np.float32), requires_grad=True)
    h = x.conv2d(w1).relu().max_pool2d(2)
    loss = (h.reshape(2, -1) @ w2.T).log_softmax(-1).mean()
    loss.backward()
    Tensor.realize(loss, w1.grad, w2.grad)


def play(page_text: str, tmp_path) -> dict:
    """Open the page with the test's script appended; what it saw."""
    played = tmp_path / "played.html"
    played.write_text(page_text.replace("</body>", PLAY + "</body>"), encoding="utf-8")
    dom = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,900", "--dump-dom",
         played.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    m = re.search(r'<pre id="played">(.*?)</pre>', dom, flags=re.S)
    assert m is not None, f"the page's script did not finish: {dom[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


def scale(transform: str) -> float:
    return float(re.search(r"scale\(([-0-9.e]+)\)", transform).group(1))


def translate(transform: str) -> tuple[float, float]:
    x, y = re.search(r"translate\(([-0-9.e]+),([-0-9.e]+)\)", transform).groups()
    return float(x), float(y)


def test_a_cnn_page_renders_zooms_searches_and_unfolds_in_chromium(tmp_path):
    with viz.capture(tmp_path / "viz") as written:
        cnn_step()
    # the page with the biggest tensor graph: the backward
    page = max(written, key=lambda p: p.read_text().split('id="schedule"')[0].count('class="node"'))
    text = page.read_text()
    seen = play(text, tmp_path)

    assert seen["nodes"] == text.count('<g class="node"') and seen["nodes"] > 100
    assert seen["drawn"] > 10
    # fit: the whole graph in its box, scaled down (it is bigger than the window); 1:1 is not inside
    assert scale(seen["fit"]) < 1 and seen["fitInside"] and not seen["actualInside"]
    assert seen["load"] == seen["fit"] and seen["actual"].endswith("scale(1)")
    assert scale(seen["zoomIn"]) == pytest.approx(1.25 * scale(seen["fit"]))
    assert scale(seen["wheel"]) == pytest.approx(scale(seen["zoomIn"]) / 1.15)
    (x0, y0), (x1, y1) = translate(seen["wheel"]), translate(seen["pan"])
    assert (x1 - x0, y1 - y0) == pytest.approx((60, 30)) and scale(seen["pan"]) == scale(seen["wheel"])
    # search: every node whose ops name REDUCE (as the HTML says), and only those, and their count
    expected = [
        html.unescape(op) for op in re.findall(r'<g class="node" data-id="\d+" data-op="([^"]*)"', text)
    ]
    expected = [op for op in expected if "REDUCE" in op.upper()]
    assert expected and sorted(seen["marked"]) == sorted(expected)
    assert seen["hits"].startswith(f"{len(expected)} nodes match")
    assert seen["markedAfterClear"] == 0
    # a folded chain: hidden, shown with one line per op it stands for, hidden again
    assert (seen["before"], seen["after"], seen["again"]) == ("none", "inline", "none")
    assert seen["memberLines"] == int(seen["fold"]) >= 2 and seen["memberWidth"] > 10
