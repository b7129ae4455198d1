/* Appendix D's cases: two deception runs on the same questions side by side, registered as a
   view of the page's item table, and the drill-down of one such pair. */
(function () {
  "use strict";
  var kit = veracityDrills.kit;
  var el = kit.el, drill = kit.drill, merged = kit.merged, download = kit.download;

  // Appendix D: two deception runs on the same questions; each question falls in one of four
  // correctness groups per run. Filter by subject, groups and contrast; open both side by side.
  function Cases(root, spec, table) {
    this.root = root;
    this.spec = spec;
    this.table = table;
    this.build();
  }

  Cases.prototype.build = function () {
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
    this.note = el("p", { class: "muted" });
    this.holder = el("div");
    this.root.append(el("div", { class: "filters" }, "A: ", this.a, " B: ", this.b), this.note, this.holder);
    this.draw();
  };

  Cases.prototype.group = function (row) {
    var n = row.normal === row.gold, m = row.misleading === row.gold;
    return this.spec.groups[n && m ? "both" : n ? "only_normal" : m ? "only_misleading" : "neither"];
  };

  Cases.prototype.draw = function () {
    var self = this, ia = Number(this.a.value), ib = Number(this.b.value);
    var la = this.spec.runs[ia].label, lb = this.spec.runs[ib].label, g = this.spec.groups, c = this.spec.contrasts;
    var byId = new Map();
    this.table.rows.forEach(function (row) { if (row._run === ib) byId.set(row.id, row); });
    var rows = [], counts = { a: 0, b: 0 };
    this.table.rows.forEach(function (row) {
      if (row._run !== ia) return;
      var other = byId.get(row.id);
      if (!other || other.question !== row.question) return;
      var ga = self.group(row), gb = self.group(other);
      var contrast = ga === g.both && gb === g.only_normal ? c.a_resists_b_misled
        : gb === g.both && ga === g.only_normal ? c.b_resists_a_misled : ga === gb ? c.same : c.other;
      if (contrast === c.a_resists_b_misled) counts.a++;
      if (contrast === c.b_resists_a_misled) counts.b++;
      rows.push({ id: row.id, subject: row.subject, question: row.question, group_a: ga, group_b: gb,
                  contrast: contrast, _a: row, _b: other, _labels: [la, lb] });
    });
    this.note.textContent = rows.length + " questions answered by both; A resists where B is misled on " +
      counts.a + ", B resists where A is misled on " + counts.b + ".";
    var spec = { name: "deception-cases-" + ia + "-" + ib, search: ["id", "subject", "question"], search_label: "id, subject, question",
                 range: null, drill: "deception-pair", page_size: 20,
                 columns: [{ key: "id", label: "id", kind: "text" }, { key: "subject", label: "subject", kind: "cat" },
                           { key: "question", label: "question", kind: "text" },
                           { key: "group_a", label: "A: " + la, kind: "cat" }, { key: "group_b", label: "B: " + lb, kind: "cat" },
                           { key: "contrast", label: "contrast", kind: "cat" }],
                 rows: rows };
    var holder = el("div");
    this.holder.replaceChildren(holder);
    this.view = kit.ItemTable(holder, spec);
  };

  veracityDrills.register("deception-pair", function (d) {
    return el("div", { class: "side" },
      el("div", { class: "block" }, el("h4", { text: "A: " + d._labels[0] }), drill("deception", merged(d._a))),
      el("div", { class: "block" }, el("h4", { text: "B: " + d._labels[1] }), drill("deception", merged(d._b))));
  });

  veracityViews.register("vcases", function (root, spec, table) { return new Cases(root, spec, table); });
})();
