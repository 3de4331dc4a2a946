// Geometry of the report for tests/test_outputs_layout.py, written as JSON into a pre element the test reads back.
(function () {
  const out = { viewport: window.innerWidth, cells: [], names: [], overlaps: [], charts: 0, labels: 0 };
  const table = document.querySelector("h2 + .scroll table, h2 + table");
  const box = table.parentElement.getBoundingClientRect();
  out.container_right = Math.min(box.right, table.parentElement.classList.contains("scroll") ? box.right : Infinity);
  table.querySelectorAll("th, td").forEach((c, i) => {
    const r = c.getBoundingClientRect();
    out.cells.push({ i: i, text: c.textContent.slice(0, 30), right: r.right });
  });
  // where a name's lines start: the index of each character that begins a new line
  table.querySelectorAll("td.name").forEach((cell) => {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let text = "", top = null; const breaks = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let k = 0; k < node.length; k++) {
        const range = document.createRange(); range.setStart(node, k); range.setEnd(node, k + 1);
        const rects = range.getClientRects();
        if (rects.length && !/\s/.test(node.data[k])) {
          const t = rects[0].top;
          if (top !== null && t > top + 2) breaks.push(text.length);
          top = t;
        }
        text += node.data[k];
      }
    }
    out.names.push({ text: text, breaks: breaks });
  });
  // every pair of text elements in one chart whose boxes intersect by more than half a pixel
  document.querySelectorAll("svg").forEach((svg, s) => {
    out.charts++;
    const boxes = Array.from(svg.querySelectorAll("text"))
      .filter((t) => t.textContent.trim())
      .map((t) => ({ text: t.textContent, r: t.getBoundingClientRect() }));
    out.labels += boxes.length;
    for (let a = 0; a < boxes.length; a++) {
      for (let b = a + 1; b < boxes.length; b++) {
        const p = boxes[a].r, q = boxes[b].r;
        const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
        const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
        if (w > 0.5 && h > 0.5) out.overlaps.push({ chart: s, a: boxes[a].text, b: boxes[b].text });
      }
    }
  });
  const pre = document.createElement("pre"); pre.id = "layout-probe";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
})();
