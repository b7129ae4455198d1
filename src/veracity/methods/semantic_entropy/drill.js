/* The semantic-entropy drill-down: the greedy answer, then every sampled answer with its
   meaning cluster and mean token log-probability, grouped by cluster. Every text reaches the
   page as text nodes (kit.el), never markup. */
veracityDrills.register("semantic-entropy", function (d, kit) {
  "use strict";
  var el = kit.el, fmt = kit.fmt, facts = kit.facts, block = kit.block;
  var box = el("div", { class: "drill" });
  box.append(facts([["entropy", d.score], ["form", d.form], ["discrete", d.discrete],
                    ["likelihood-weighted", d.likelihood], ["clusters", d.n_clusters],
                    ["M", d.m], ["temperature", d.temperature], ["same meaning by", d.entailment],
                    ["model", d.model], ["not scored", d.error]]));
  box.append(block("prompt", d.prompt, "mono"), block("greedy answer", d.answer));
  if (d.references && d.references.length) box.append(block("reference answers", d.references.join("\n")));
  var order = (d.samples || []).map(function (_, i) { return i; });
  order.sort(function (a, b) { return ((d.clusters || [])[a] - (d.clusters || [])[b]) || (a - b); });
  var rows = el("tbody");
  order.forEach(function (i) {
    rows.append(el("tr", null, el("td", { class: "num", text: (d.clusters || [])[i] }),
      el("td", { class: "num", text: i + 1 }), el("td", { text: d.samples[i] }),
      el("td", { class: "num", text: fmt((d.sample_logprobs || [])[i], 3) })));
  });
  box.append(el("h4", { text: "sampled answers by meaning cluster" }), el("div", { class: "scroll" },
    el("table", { class: "pairs" }, el("thead", null, el("tr", null, el("th", { text: "cluster" }),
      el("th", { text: "#" }), el("th", { text: "sampled answer" }),
      el("th", { text: "mean log p" }))), rows)));
  return box;
});
