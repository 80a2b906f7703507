// The dashboard's only script: pan and zoom of the archive tree, and live pages (hyperagents-imo, MIT license).
// Pages come whole from the server with every text escaped there; this script never builds
// markup from data: it moves the tree's viewBox and swaps <main> for the server's fresh copy.
"use strict";

const POLL_MS = 2000;
const SPEND_MS = 15000; // when only the ledger moved (calls come often), the page follows at this pace
let view = null; // the tree's viewBox the user chose, kept across live updates
let shown = Date.now(); // when <main> was last made

function treeSvg() { return document.querySelector(".tree-view svg.tree"); }

function fullBox(svg) {
  // The whole tree, never drawn larger than life: a small tree stays at its size, centred.
  const w = parseFloat(svg.dataset.width), h = parseFloat(svg.dataset.height);
  const r = svg.getBoundingClientRect();
  const bw = Math.max(w, r.width || w), bh = Math.max(h, r.height || h);
  return [(w - bw) / 2, 0, bw, bh];
}

function setBox(svg, box) {
  view = box;
  svg.setAttribute("viewBox", box.map((v) => v.toFixed(1)).join(" "));
}

function fitBest(svg) {
  const best = svg.querySelector(".on-best .node-dot");
  const w = parseFloat(svg.dataset.width), h = parseFloat(svg.dataset.height);
  if (!best) { setBox(svg, fullBox(svg)); return; }
  const cx = parseFloat(best.getAttribute("cx")), cy = parseFloat(best.getAttribute("cy"));
  const bw = Math.min(w, 900), bh = Math.min(h, 520);
  setBox(svg, [cx - bw / 2, Math.max(0, cy - bh / 2), bw, bh]);
}

function setUpTree() {
  const svg = treeSvg();
  if (!svg) return;
  const box = svg.closest(".tree-view");
  const tall = parseFloat(svg.dataset.height);
  if (tall < box.clientHeight) box.style.height = Math.max(tall + 20, 160) + "px"; // a small tree, no blank
  if (view) setBox(svg, view); else setBox(svg, fullBox(svg));
  if (!box.previousElementSibling || !box.previousElementSibling.classList.contains("tree-tools")) {
    const tools = document.createElement("div");
    tools.className = "tree-tools";
    for (const [label, act] of [["fit all", () => setBox(treeSvg(), fullBox(treeSvg()))],
                                ["best node", () => fitBest(treeSvg())],
                                ["zoom in", () => zoom(treeSvg(), 0.7, null)],
                                ["zoom out", () => zoom(treeSvg(), 1 / 0.7, null)]]) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.addEventListener("click", act);
      tools.appendChild(b);
    }
    box.parentNode.insertBefore(tools, box);
  }
  box.addEventListener("wheel", (e) => {
    e.preventDefault();
    zoom(treeSvg(), e.deltaY > 0 ? 1.15 : 1 / 1.15, e);
  }, { passive: false });
  let drag = null;
  box.addEventListener("pointerdown", (e) => {
    if (e.target.closest("a")) return; // a click on a node opens it
    drag = { x: e.clientX, y: e.clientY, box: view.slice() };
    box.setPointerCapture(e.pointerId);
  });
  box.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const s = treeSvg(), r = s.getBoundingClientRect();
    const scale = Math.max(drag.box[2] / r.width, drag.box[3] / r.height);
    setBox(s, [drag.box[0] - (e.clientX - drag.x) * scale, drag.box[1] - (e.clientY - drag.y) * scale,
               drag.box[2], drag.box[3]]);
  });
  box.addEventListener("pointerup", () => { drag = null; });
  box.addEventListener("keydown", (e) => {
    if (e.key === "+" || e.key === "=") zoom(treeSvg(), 0.7, null);
    else if (e.key === "-") zoom(treeSvg(), 1 / 0.7, null);
    else if (e.key === "0") setBox(treeSvg(), fullBox(treeSvg()));
  });
}

// The live transcript (a meta agent at work, its page's #transcript-live note) is shown at its newest
// turn, and kept there as it grows; once the reader scrolls up, it stays where they are.
function liveTranscript() {
  return document.getElementById("transcript-live") ? document.getElementById("transcript") : null;
}

function atEnd(pre) { return pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24; }

function follow(pre, toEnd, kept) {
  if (pre) pre.scrollTop = toEnd ? pre.scrollHeight : kept;
}

function zoom(svg, factor, event) {
  const [x, y, w, h] = view;
  let fx = 0.5, fy = 0.5;
  if (event) {
    const r = svg.getBoundingClientRect();
    fx = (event.clientX - r.left) / r.width;
    fy = (event.clientY - r.top) / r.height;
  }
  const nw = Math.min(Math.max(w * factor, 40), fullBox(svg)[2] * 4);
  const nh = h * (nw / w);
  setBox(svg, [x + (w - nw) * fx, y + (h - nh) * fy, nw, nh]);
}

async function poll() {
  const main = document.getElementById("main");
  const state = document.getElementById("live-state");
  if (!main || !main.dataset.live) return;
  try {
    const answer = await fetch(main.dataset.live, { cache: "no-store" });
    const { version } = await answer.json();
    state.className = "live-state on";
    state.textContent = "live, checked " + new Date().toLocaleTimeString();
    const busy = document.activeElement && main.contains(document.activeElement) &&
      document.activeElement.tagName === "SELECT";
    const [records, spend] = version.split("-");
    const [oldRecords, oldSpend] = (main.dataset.version || "-").split("-");
    const stale = records !== oldRecords || (spend !== oldSpend && Date.now() - shown > SPEND_MS);
    if (stale && !busy) {
      const page = await fetch(window.location.href, { cache: "no-store" });
      const fresh = new DOMParser().parseFromString(await page.text(), "text/html").getElementById("main");
      if (fresh) {
        const before = liveTranscript();
        const toEnd = !before || atEnd(before), kept = before ? before.scrollTop : 0;
        main.replaceChildren(...fresh.childNodes);
        main.dataset.version = fresh.dataset.version;
        shown = Date.now();
        setUpTree();
        follow(liveTranscript(), toEnd, kept);
      }
    }
  } catch (err) {
    state.className = "live-state lost";
    state.textContent = "not reaching the dashboard; trying again";
  }
  setTimeout(poll, POLL_MS);
}

setUpTree();
follow(liveTranscript(), true, 0);
setTimeout(poll, POLL_MS);
