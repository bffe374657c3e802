"""VIZ pages as a user gets them: UOPGRAD_VIZ=DIR in a fresh process, and the API; checked by parsing the
HTML (and the SVG inside it as XML), and in headless Chromium where one is installed (test_viz_browser.py
drives the page's script)."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import pytest

from uopgrad import Tensor, UOp, viz
from uopgrad.pipeline import clear_program_cache

SVG = "{http://www.w3.org/2000/svg}"


class Page(HTMLParser):
    """Sections (h2 titles), SVG documents, figures of the steppers and <pre> texts of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.h2, self.svgs, self.figcaptions, self.pres, self.scripts, self.links = [], [], [], [], [], []
        self._text: list[str] | None = None
        self._svg_start: int | None = None
        self.raw = text
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h2", "figcaption", "pre", "script"):
            self._text = []
        if tag == "script" and "src" in a or tag == "link" and "href" in a:
            self.links.append(a)

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        target = {"h2": self.h2, "figcaption": self.figcaptions, "pre": self.pres, "script": self.scripts}
        if tag in target and self._text is not None:
            target[tag].append("".join(self._text))
            self._text = None


def svgs_of(text: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", text, flags=re.S)]


def node_texts(svg: ET.Element) -> list[str]:
    return [
        " ".join(t.text or "" for t in g.iter(f"{SVG}text"))
        for g in svg.iter(f"{SVG}g")
        if g.get("class") == "node"
    ]


def program(device="REFERENCE"):
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    w = Tensor(np.ones((4, 2), dtype=np.float32), device=device)
    return ((a @ w).relu() + 1).sum(axis=0)


def test_capture_writes_one_page_per_realize_with_every_section(tmp_path):
    clear_program_cache()  # kernels lowered by earlier tests are traced again anyway; start from none
    with viz.capture(tmp_path) as written:
        out = program().numpy()
        Tensor([1.0, 2.0]).exp().numpy()
    np.testing.assert_allclose(out, np.maximum(np.arange(12).reshape(3, 4) @ np.ones((4, 2)), 0).sum(0) + 3)
    assert len(written) == 2 and sorted(tmp_path.glob("run-*/0*.html")) == sorted(written)
    page = Page(written[0].read_text())
    assert page.h2[:2] == ["tensor graph", "schedule (1 items)"]
    assert any(h.startswith("kernel 0: r_2") for h in page.h2)
    assert not page.links, "a page must load nothing from outside itself"
    svgs = svgs_of(page.raw)
    tensor_graph = node_texts(svgs[0])
    assert any(t.startswith("REDUCE") for t in tensor_graph)
    assert any(t.startswith("BUFFER") for t in tensor_graph)
    schedule = node_texts(svgs[1])
    assert "0: r_2" in schedule
    assert sum(t.startswith("REFERENCE") for t in schedule) == 3  # 2 inputs, 1 output
    steps = [c for c in page.figcaptions]
    assert steps[0] == "step 1/5: as scheduled"
    assert [re.sub(r".*: ", "", s) for s in steps[1:]] == [
        "after 'index'",
        "after 'reduce'",
        "after 'index dtype'",
        "after 'decompositions'",
    ]
    unchanged = page.raw.count("(unchanged: the graph of the step before)")
    assert len(svgs) == 2 + len(steps) - unchanged  # tensor graph, schedule, one per step that changed
    # the steps differ: lowering replaces the tensor-level body with loops and loads
    ops_before = {t.split()[0] for t in node_texts(svgs[2])}
    ops_after = {t.split()[0] for t in node_texts(svgs[-1])}
    assert "RESHAPE" in ops_before and "RANGE" in ops_after and "RANGE" not in ops_before
    assert any("LOAD" in p and "STORE" in p for p in page.pres)  # REFERENCE: the linear program listing
    assert any("show(" in s for s in page.scripts)


def test_every_edge_ends_on_a_node_and_labels_are_escaped(tmp_path):
    u = UOp.variable('n<&>"', 1, 8) * 2 + 1
    path = viz.write_page(u.sink(), tmp_path / "sym.html")
    svg = svgs_of(path.read_text())[0]  # parses as XML: every text was escaped
    assert any('n<&>"' in t for t in node_texts(svg))
    nodes = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "node"]
    edges = [p for p in svg.iter(f"{SVG}path") if p.get("class") == "edge"]
    assert len(nodes) == len(u.sink().toposort()) and len(edges) >= len(nodes) - 1


def test_env_var_writes_pages_in_a_fresh_process_and_a_failed_realize_gets_a_page_too(tmp_path):
    code = textwrap.dedent("""
        import numpy as np
        from uopgrad import Tensor
        print(Tensor(np.arange(6.0, dtype=np.float32)).reshape(2, 3).sum(axis=1).tolist())
    """)
    env = {**os.environ, "UOPGRAD_VIZ": str(tmp_path), "UOPGRAD_DEVICE": "REFERENCE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[3.0, 12.0]", out.stderr
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("run-")
    assert sorted(p.name for p in runs[0].iterdir()) == ["0000-REFERENCE.html", "index.html"]
    assert "kernel 0: r_2" in (runs[0] / "0000-REFERENCE.html").read_text()


def test_big_graphs_are_listed_not_drawn(tmp_path):
    x = Tensor([1.0])
    for i in range(400):
        x = x * 1.0001 + i
    text = viz.page_html(x.uop.sink())
    assert "too many to draw" in text


def test_to_dot_has_one_node_per_uop_and_one_edge_per_source():
    u = (UOp.variable("i", 0, 9) + 3) * UOp.variable("i", 0, 9)
    dot = u.to_dot()
    assert dot.startswith("digraph uop {") and dot.endswith("}")
    nodes = re.findall(r'^  n(\d+) \[label="(.*)"\];$', dot, flags=re.M)
    edges = re.findall(r"^  n(\d+) -> n(\d+) \[label=\"(\d+)\"\];$", dot, flags=re.M)
    order = list(u.toposort())
    assert len(nodes) == len(order) and len(edges) == sum(len(x.src) for x in order)
    assert nodes[-1][1].startswith("MUL\\n")
    assert all(int(a) < int(b) for a, b, _ in edges)  # sources come first


def _browser() -> str | None:
    names = ("chromium", "chromium-browser", "google-chrome", "chrome")
    return next((b for b in names if shutil.which(b)), None)


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (apt-get install chromium)")
def test_screenshot_in_headless_chromium(tmp_path):
    with viz.capture(tmp_path) as written:
        program().numpy()
    shot = tmp_path / "page.png"
    subprocess.run(
        [
            _browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,1600",
            f"--screenshot={shot}",
            written[0].resolve().as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 1600)
    # a page that rendered is not one flat colour: its PNG of drawn boxes and text compresses far less well
    # than a 1200x1600 page with only the heading (about 16 kB)
    assert len(data) > 40_000


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (apt-get install chromium)")
def test_the_page_script_opens_the_step_a_link_names(tmp_path):
    with viz.capture(tmp_path) as written:
        program().numpy()
    url = written[0].resolve().as_uri() + "#kernel-0-step-3"
    dom = subprocess.run(
        [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    kernel = dom[dom.index('<section id="kernel-0"') :]
    figures = re.findall(r'<figure class="step" data-step="(\d+)"( hidden(?:="")?)?>', kernel)
    assert len(figures) == 5
    assert [s for s, hidden in figures if not hidden] == ["2"]  # the script ran: only step 3 shows


def index_rows(index_text: str) -> list[list[str]]:
    """The rows of a run's index table, each cell's text (links as their target)."""
    rows = re.findall(r"<tr(?: class=\"left\")?><td>(.*?)</td></tr>", index_text, flags=re.S)
    return [[re.sub(r'<a href="([^"]*)">.*?</a>', r"\1", c) for c in r.split("</td><td>")] for r in rows]


def test_a_run_has_one_index_listing_every_page_with_its_kernels(tmp_path):
    with viz.capture(tmp_path) as written:
        program().numpy()
        (Tensor([1.0, 2.0, 3.0]) * 2).exp().sum().numpy()
        Tensor([4.0]).sqrt().numpy()
    (run,) = tmp_path.iterdir()
    index = run / "index.html"
    assert viz.index_page() is None  # VIZ is off again after the block
    rows = index_rows(index.read_text())
    assert [r[1] for r in rows] == [p.name for p in written] and len(written) == 3
    for row, page in zip(rows, written):
        kernels = len(re.findall(r"<h2>kernel \d+: ", page.read_text()))
        assert row[2] == "REFERENCE" and int(row[3]) == kernels >= 1
        assert int(row[4]) > 0 and row[6] == ""
    assert "left out" not in index.read_text()


def test_the_cap_leaves_later_pages_out_and_the_index_says_so(tmp_path):
    with viz.capture(tmp_path / "free") as written:
        for _ in range(3):
            program().numpy()
    sizes = [len(p.read_bytes()) for p in written]
    cap = sizes[0] + sizes[1] // 2  # room for the first page only
    viz.enable(tmp_path / "capped", max_bytes=cap)
    try:
        outs = [program().numpy() for _ in range(3)]
    finally:
        viz.disable()
    assert all(np.array_equal(o, outs[0]) for o in outs)  # VIZ never changes what runs
    (run,) = (tmp_path / "capped").iterdir()
    assert sorted(p.name for p in run.iterdir()) == ["0000-REFERENCE.html", "index.html"]
    text = (run / "index.html").read_text()
    assert "2 of 3 realizes were left out (from realize 1 on)" in text and "UOPGRAD_VIZ_MAX_BYTES" in text
    assert [r[1] for r in index_rows(text)] == ["0000-REFERENCE.html"] + ["(left out: over the cap)"] * 2


def test_the_cap_from_the_environment_and_a_bad_one_warns(tmp_path):
    code = "from uopgrad import Tensor\nfor _ in range(3): Tensor([1.0, 2.0]).exp().numpy()"
    base = {**os.environ, "UOPGRAD_DEVICE": "REFERENCE"}
    for cap, kept in (("1", 0), ("20MB", 3), ("lots", 3)):
        env = {**base, "UOPGRAD_VIZ": str(tmp_path / cap), "UOPGRAD_VIZ_MAX_BYTES": cap}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert ("UOPGRAD_VIZ_MAX_BYTES" in out.stderr) == (
            cap == "lots"
        )  # a bad value: a warning, the default
        (run,) = (tmp_path / cap).iterdir()
        assert len(list(run.glob("0*.html"))) == kept


def test_uopgrad_viz_opens_only_the_run_it_is_given(tmp_path):
    code = "from uopgrad import Tensor\nTensor([1.0, 2.0]).exp().numpy()"
    env = {**os.environ, "UOPGRAD_DEVICE": "REFERENCE", "UOPGRAD_VIZ": str(tmp_path / "viz")}
    for _ in range(2):  # two processes, two runs in the same directory
        subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    runs = sorted((tmp_path / "viz").iterdir(), key=lambda p: (p / "index.html").stat().st_mtime)
    assert len(runs) == 2 and runs[0].name != runs[1].name

    def cli(*args, **extra):
        e = {k: v for k, v in os.environ.items() if k != "UOPGRAD_VIZ"} | extra
        cmd = [sys.executable, "-m", "uopgrad", "viz", "--print-only", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=120)

    assert cli(str(runs[0])).stdout.strip() == str(runs[0] / "index.html")
    assert cli(str(tmp_path / "viz")).stdout.strip() == str(runs[1] / "index.html")
    assert cli(UOPGRAD_VIZ=str(tmp_path / "viz")).stdout.strip() == str(runs[1] / "index.html")
    (tmp_path / "other").mkdir()
    none = cli(str(tmp_path / "other"))  # another directory: nothing, though pages exist elsewhere
    assert none.returncode == 1 and none.stdout == "" and "no VIZ run in" in none.stderr
    nodir = cli()
    assert nodir.returncode == 1 and "no VIZ directory" in nodir.stderr
    # in a fresh process, the last page is this process's, not the one another process wrote
    last = "from uopgrad import viz\nprint(viz.last_page())"
    fresh = subprocess.run([sys.executable, "-c", last], capture_output=True, text=True, timeout=120)
    assert fresh.stdout.strip() == "None"


def test_movement_chains_are_folded_into_one_node_that_lists_them():
    x = Tensor(np.arange(24, dtype=np.float32))
    y = (x.reshape(2, 3, 4).permute(2, 0, 1).reshape(4, 6)[1:3] + 1).sum()
    svg = svgs_of(viz.page_html(y.uop.sink()))[0]
    nodes = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "node"]
    folds = {g.get("data-fold"): g for g in nodes if g.get("data-fold")}
    assert sorted(folds) == ["2", "4"]  # the view of x, and the broadcast of the constant 1
    fold = folds["4"]
    ops = fold.get("data-op").split()
    assert ops == ["RESHAPE", "PERMUTE", "RESHAPE", "SHRINK"]
    assert folds["2"].get("data-op").split() == ["RESHAPE", "EXPAND"]
    members = next(g for g in fold.iter(f"{SVG}g") if g.get("class") == "members")
    assert members.get("display") == "none"
    lines = [t.text for t in members.iter(f"{SVG}text")]
    assert [line.split()[0] for line in lines] == ops and "(4,6)" in lines[2]
    # the nodes drawn as themselves: the buffer, the constant, ADD, REDUCE, the last RESHAPE (to a scalar:
    # a chain of one) and SINK
    alone = sorted(node_texts(svg)[k].split()[0] for k, g in enumerate(nodes) if not g.get("data-fold"))
    assert alone == ["ADD", "BUFFER", "CONST", "REDUCE", "RESHAPE", "SINK"]
