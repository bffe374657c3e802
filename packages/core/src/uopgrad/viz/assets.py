"""The style and script every VIZ page carries inline (no CDN, no server: a page works offline).

The script, in plain JavaScript with no library:
- steppers: a kernel's pass steps, one shown at a time (buttons, slider, `page.html#kernel-2-step-3`);
- each picture: zoom (wheel over it, or + / -), pan (drag), fit (fit the graph to its box; done on load
  for a graph bigger than its box) and 1:1, all through the transform of the SVG's `<g class="view">`;
- search: the box at the top marks every node whose op (`data-op`) contains the text and counts them;
- folded chains: a click on a folded node (`data-fold`) shows or hides the list of the ops it stands for.
"""

from __future__ import annotations

__all__ = ["SCRIPT", "STYLE", "TOOLBAR"]

STYLE = """
body { font-family: sans-serif; margin: 0 2em 1em; color: #223; }
section { border-top: 1px solid #ccd; margin-top: 1em; }
.pic { overflow: hidden; border: 1px solid #dde; position: relative; cursor: grab; }
.pic .zoom { position: absolute; right: 4px; top: 4px; z-index: 1; }
.pic .zoom button { min-width: 2em; }
pre { background: #f6f6fa; padding: .5em; overflow: auto; }
.error { color: #a00; }
figure { margin: .3em 0; }
#toolbar { position: sticky; top: 0; background: #fff; padding: .4em 0; border-bottom: 1px solid #ccd;
  z-index: 2; }
g.node.hit rect, g.node.hit ellipse { stroke: #d00; stroke-width: 3; }
svg.searching g.node:not(.hit) { opacity: .35; }
g.node[data-fold] { cursor: pointer; }
"""

TOOLBAR = (
    '<div id="toolbar"><label>search op: <input id="search" type="search" size="32" '
    'placeholder="e.g. REDUCE, LOAD, RESHAPE"></label> <span id="hits"></span></div>'
)

SCRIPT = """
(function () {
  function fitOf(p) {  // the scale and offsets that fit the graph into its box (never above `most`)
    return function (most) {
      var w = p.box.clientWidth, h = p.box.clientHeight;
      if (!w || !h) return;
      var s = Math.min(w / p.w, h / p.h, most);
      p.set(s, (w - p.w * s) / 2, Math.max(0, (h - p.h * s) / 2));
    };
  }
  function picture(box) {
    var svg = box.querySelector("svg.graph"), view = svg && svg.querySelector("g.view");
    if (!view) return;
    var p = { box: box, svg: svg, view: view, w: +svg.getAttribute("width"), h: +svg.getAttribute("height") };
    var tall = Math.max(120, Math.min(p.h + 8, window.innerHeight * 0.75));
    box.style.height = tall + "px";
    svg.removeAttribute("viewBox");
    svg.setAttribute("width", "100%");
    svg.setAttribute("height", "100%");
    p.set = function (s, x, y) {
      p.s = s; p.x = x; p.y = y;
      view.setAttribute("transform", "translate(" + x + "," + y + ") scale(" + s + ")");
    };
    p.zoom = function (f, cx, cy) {  // keep the point (cx, cy) of the box where it is
      if (cx === undefined) { cx = box.clientWidth / 2; cy = box.clientHeight / 2; }
      var s = Math.max(0.02, Math.min(8, p.s * f));
      p.set(s, cx - (cx - p.x) * s / p.s, cy - (cy - p.y) * s / p.s);
    };
    p.fit = fitOf(p);
    var bar = document.createElement("div");
    bar.className = "zoom";
    [["+", function () { p.zoom(1.25); }], ["-", function () { p.zoom(0.8); }],
     ["fit", function () { p.fit(4); }], ["1:1", function () { p.set(1, 0, 0); }]].forEach(function (b) {
      var btn = document.createElement("button");
      btn.textContent = b[0]; btn.className = "zoom-" + (b[0] === "+" ? "in" : b[0] === "-" ? "out" : b[0]);
      btn.onclick = b[1];
      bar.appendChild(btn);
    });
    box.insertBefore(bar, svg);
    box.addEventListener("wheel", function (e) {
      e.preventDefault();
      var r = box.getBoundingClientRect();
      p.zoom(e.deltaY < 0 ? 1.15 : 1 / 1.15, e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    var drag = null;
    svg.addEventListener("mousedown", function (e) { drag = { x: e.clientX, y: e.clientY, moved: false }; });
    window.addEventListener("mousemove", function (e) {
      if (!drag) return;
      var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 2) drag.moved = true;
      if (drag.moved) { p.set(p.s, p.x + dx, p.y + dy); drag.x = e.clientX; drag.y = e.clientY; }
    });
    window.addEventListener("mouseup", function () { setTimeout(function () { drag = null; }, 0); });
    svg.addEventListener("click", function (e) {
      if (drag && drag.moved) return;
      var node = e.target.closest && e.target.closest("g.node[data-fold]");
      if (node) toggle(node);
    });
    p.set(1, 0, 0);
    box.viz = p;
    p.fit(1);
  }
  function toggle(node) {  // show or hide what a folded node stands for, on top of its neighbours
    var m = node.querySelector("g.members");
    var open = m.getAttribute("display") === "none";
    m.setAttribute("display", open ? "inline" : "none");
    node.classList.toggle("open", open);
    if (open) node.parentNode.appendChild(node);
  }
  document.querySelectorAll(".pic").forEach(picture);

  document.querySelectorAll(".stepper").forEach(function (st) {
    var figs = st.querySelectorAll("figure.step"), range = st.querySelector("input");
    function show(k) {
      k = Math.max(0, Math.min(figs.length - 1, k));
      figs.forEach(function (f, i) { f.hidden = i !== k; });
      range.value = k;
      var box = figs[k].querySelector(".pic");
      if (box && box.viz && box.viz.s === 1 && box.viz.x === 0) box.viz.fit(1);  // drawn while hidden
    }
    st.querySelector(".prev").onclick = function () { show(+range.value - 1); };
    st.querySelector(".next").onclick = function () { show(+range.value + 1); };
    range.oninput = function () { show(+range.value); };
    st.show = show;
  });
  // a link to one step: page.html#kernel-2-step-3
  var m = /^#(kernel-[0-9]+)-step-([0-9]+)$/.exec(location.hash);
  var sec = m && document.getElementById(m[1]);
  if (sec && sec.querySelector(".stepper")) {
    sec.querySelector(".stepper").show(+m[2] - 1);
    sec.scrollIntoView();
  }

  var search = document.getElementById("search"), hits = document.getElementById("hits");
  if (search) search.oninput = function () {
    var q = search.value.trim().toUpperCase(), n = 0, pics = 0;
    document.querySelectorAll("svg.graph").forEach(function (svg) {
      var here = 0;
      svg.querySelectorAll("g.node").forEach(function (g) {
        var hit = q !== "" && (g.getAttribute("data-op") || "").toUpperCase().indexOf(q) >= 0;
        g.classList.toggle("hit", hit);
        if (hit) here++;
      });
      svg.classList.toggle("searching", q !== "");
      n += here; if (here) pics++;
    });
    hits.textContent = q === "" ? "" : n + " nodes match in " + pics + " pictures";
  };
})();
"""
