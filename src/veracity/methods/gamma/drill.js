/* γ's drill-down: the answer, the ball and each perturbed answer beside the original.
   Registered with the report's item tables; every text reaches the page as text nodes
   (kit.el, kit.visible), never as markup. */
veracityDrills.register("gamma", function (d, kit) {
  "use strict";
  var el = kit.el, fmt = kit.fmt, facts = kit.facts, block = kit.block, visible = kit.visible,
      wordDiff = kit.wordDiff, perturbation = kit.perturbation;
  var box = el("div", { class: "drill" });
  box.append(facts([["γ", d.gamma], ["γ form", d.form], ["ball", d.ball], ["embedder", d.embedder],
                    ["seed", d.seed], ["N", d.n], ["model", d.model], ["γ_null", d.gamma_null],
                    ["P(correct)", d.p_correct], ["correct", d.correct], ["not scored", d.error]]));
  box.append(block("prompt", d.prompt, "mono"), block("answer", d.answer));
  if (d.references && d.references.length) box.append(block("reference answers", d.references.join("\n")));
  var rows = el("tbody");
  var prompts = d.perturbed_prompts || [];
  (d.perturbed_answers || []).forEach(function (answer, i) {
    var pair = wordDiff(d.answer, answer);
    var cos = d.perturbed_cosines ? d.perturbed_cosines[i] : null;
    rows.append(el("tr", null, el("td", { class: "num", text: i + 1 }),
      el("td", null, prompts[i] === undefined ? "—" : perturbation(d.prompt, prompts[i])),
      el("td", null, pair[0]), el("td", null, pair[1]), el("td", { class: "num", text: fmt(cos, 3) })));
  });
  box.append(el("h4", { text: "perturbed prompts and answers" }),
    el("div", { class: "scroll" }, el("table", { class: "pairs" },
      el("thead", null, el("tr", null, el("th", { text: "#" }), el("th", { text: "perturbed prompt (added part marked)" }),
        el("th", { text: "original answer (words missing from the perturbed answer marked)" }),
        el("th", { text: "perturbed answer (new words marked)" }), el("th", { text: "cosine to original" }))),
      rows)));
  return box;
});

/* γ of run A against run B (the report's comparison of two γ runs), registered as a view of
   the page's item table. */
(function () {
  "use strict";
  var kit = veracityDrills.kit;
  var el = kit.el, drill = kit.drill, merged = kit.merged, download = kit.download;

  // γ_A against γ_B for the items two runs share; click a point to open both items.
  function Comparison(root, spec, table) {
    this.root = root;
    this.spec = spec;
    this.table = table;
    this.build();
  }

  Comparison.prototype.build = function () {
    var self = this, runs = this.spec.runs;
    this.a = el("select", { "aria-label": "run A", onchange: function () { self.draw(); } });
    this.b = el("select", { "aria-label": "run B", onchange: function () { self.draw(); } });
    runs.forEach(function (r, i) {
      self.a.append(el("option", { value: i, text: r.label }));
      self.b.append(el("option", { value: i, text: r.label }));
    });
    var pair = this.spec.default_pair || [0, Math.min(1, runs.length - 1)];
    this.a.value = pair[0];
    this.b.value = pair[1];
    this.canvas = el("canvas", { width: 460, height: 460, class: "scatter", "aria-label": "γ of run A against γ of run B" });
    this.canvas.addEventListener("click", function (e) { self.click(e); });
    this.note = el("p", { class: "muted" });
    this.detail = el("div", { class: "side" });
    this.worst = el("div");
    var png = el("button", { type: "button", text: "PNG", class: "png", onclick: function () {
      self.canvas.toBlob(function (blob) { download(blob, "gamma-a-vs-b.png"); });
    } });
    this.root.append(el("div", { class: "filters" }, "A: ", this.a, " B: ", this.b, png), this.canvas, this.note, this.detail,
                     el("h4", { text: "Items where the two runs disagree most" }), this.worst);
    this.draw();
  };

  Comparison.prototype.pairs = function () {
    var ia = Number(this.a.value), ib = Number(this.b.value);
    var byId = new Map();
    this.table.rows.forEach(function (row) { if (row._run === ib) byId.set(row.id, row); });
    var out = [];
    this.table.rows.forEach(function (row) {
      if (row._run !== ia) return;
      var other = byId.get(row.id);
      if (other && other.prompt === row.prompt) out.push([row, other]);
    });
    return out;
  };

  Comparison.prototype.draw = function () {
    var self = this, ctx = this.canvas.getContext("2d");
    var W = this.canvas.width, H = this.canvas.height, pad = 56;
    var pairs = this.pairs();
    var scored = pairs.filter(function (p) { return typeof p[0].gamma === "number" && typeof p[1].gamma === "number"; });
    var top = Math.max(1e-9, this.spec.upper || 1);
    scored.forEach(function (p) { top = Math.max(top, p[0].gamma, p[1].gamma); });
    var sx = function (v) { return pad + (W - pad - 16) * v / top; };
    var sy = function (v) { return H - pad - (H - pad - 16) * v / top; };
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, H);
    ctx.strokeStyle = "#999";
    ctx.strokeRect(pad, 16, W - pad - 16, H - pad - 16);
    ctx.setLineDash([4, 4]);
    ctx.beginPath(); ctx.moveTo(sx(0), sy(0)); ctx.lineTo(sx(top), sy(top)); ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = "#222";
    ctx.font = "12px sans-serif";
    ctx.textAlign = "center";
    for (var t = 0; t <= 4; t++) {
      var v = top * t / 4;
      ctx.fillText(v.toFixed(2), sx(v), H - pad + 16);
      ctx.textAlign = "right"; ctx.fillText(v.toFixed(2), pad - 6, sy(v) + 4); ctx.textAlign = "center";
    }
    var la = this.spec.runs[Number(this.a.value)].label, lb = this.spec.runs[Number(this.b.value)].label;
    ctx.fillText("γ of A: " + la.slice(0, 60), pad + (W - pad) / 2, H - 14);
    ctx.save(); ctx.translate(14, (H - pad) / 2); ctx.rotate(-Math.PI / 2);
    ctx.fillText("γ of B: " + lb.slice(0, 60), 0, 0); ctx.restore();
    ctx.fillStyle = "rgba(76,114,176,0.6)";
    this.points = scored.map(function (p) {
      var x = sx(p[0].gamma), y = sy(p[1].gamma);
      ctx.beginPath(); ctx.arc(x, y, 3.5, 0, 2 * Math.PI); ctx.fill();
      return [x, y, p];
    });
    this.note.textContent = scored.length + " items scored in both runs (" + pairs.length +
      " shared). Dashed: γ_A = γ_B. Click a point to open both answers.";
    var rows = scored.map(function (p) {
      return { id: p[0].id, prompt: p[0].prompt, gamma_a: p[0].gamma, gamma_b: p[1].gamma,
               delta: Math.abs(p[0].gamma - p[1].gamma), _pair: p };
    }).sort(function (x, y) { return y.delta - x.delta; });
    var spec = { name: "gamma-disagreement", search: ["id", "prompt"], search_label: "id, prompt", range: "delta", drill: null, page_size: 10,
                 columns: [{ key: "id", label: "id", kind: "text" }, { key: "prompt", label: "prompt", kind: "text" },
                           { key: "gamma_a", label: "γ A", kind: "num", digits: 3 },
                           { key: "gamma_b", label: "γ B", kind: "num", digits: 3 },
                           { key: "delta", label: "|γ A − γ B|", kind: "num", digits: 3 }],
                 rows: rows };
    var holder = el("div");
    this.worst.replaceChildren(holder);
    var table = kit.ItemTable(holder, spec);
    table.body.addEventListener("click", function (e) {
      var tr = e.target.closest("tr");
      var index = Array.prototype.indexOf.call(table.body.children, tr) + table.page * table.pageSize;
      if (tr && table.shown[index]) self.show(table.shown[index]._pair);
    });
    this.detail.replaceChildren();
  };

  Comparison.prototype.click = function (e) {
    var rect = this.canvas.getBoundingClientRect();
    var x = (e.clientX - rect.left) * this.canvas.width / rect.width;
    var y = (e.clientY - rect.top) * this.canvas.height / rect.height;
    var best = null, dist = 64;
    (this.points || []).forEach(function (p) {
      var d = (p[0] - x) * (p[0] - x) + (p[1] - y) * (p[1] - y);
      if (d < dist) { dist = d; best = p[2]; }
    });
    if (best) this.show(best);
  };

  Comparison.prototype.show = function (pair) {
    var la = this.spec.runs[Number(this.a.value)].label, lb = this.spec.runs[Number(this.b.value)].label;
    this.detail.replaceChildren(
      el("div", { class: "block" }, el("h4", { text: "A: " + la }), drill("gamma", merged(pair[0]))),
      el("div", { class: "block" }, el("h4", { text: "B: " + lb }), drill("gamma", merged(pair[1]))));
  };

  veracityViews.register("vcompare", function (root, spec, table) { return new Comparison(root, spec, table); });
})();
