/* The self-consistency drill-down: the greedy answer, then each sampled answer beside it with
   its cosine. Registered with the report's item tables; every text reaches the page as text
   nodes (kit.el, kit.visible), never as markup. */
veracityDrills.register("consistency", function (d, kit) {
  "use strict";
  var el = kit.el, fmt = kit.fmt, facts = kit.facts, block = kit.block, wordDiff = kit.wordDiff;
  var box = el("div", { class: "drill" });
  box.append(facts([["score", d.score], ["M", d.m], ["temperature", d.temperature],
                    ["model", d.model], ["embedder", d.embedder], ["not scored", d.error]]));
  box.append(block("prompt", d.prompt, "mono"), block("greedy answer", d.answer));
  if (d.references && d.references.length) box.append(block("reference answers", d.references.join("\n")));
  var rows = el("tbody");
  (d.samples || []).forEach(function (sample, i) {
    var pair = wordDiff(d.answer, sample);
    rows.append(el("tr", null, el("td", { class: "num", text: i + 1 }), el("td", null, pair[0]),
      el("td", null, pair[1]), el("td", { class: "num", text: fmt((d.cosines || [])[i], 3) })));
  });
  box.append(el("h4", { text: "sampled answers" }), el("div", { class: "scroll" },
    el("table", { class: "pairs" }, el("thead", null, el("tr", null, el("th", { text: "#" }),
      el("th", { text: "greedy answer (words missing from the sample marked)" }),
      el("th", { text: "sampled answer (new words marked)" }), el("th", { text: "cosine to greedy" }))),
      rows)));
  return box;
});
