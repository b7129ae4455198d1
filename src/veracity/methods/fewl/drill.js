/* FEWL's drill-down: references with their weights, every answer set, the pairs and neighbours.
   Registered with the report's item tables; every text reaches the page as text nodes
   (kit.el, kit.visible), never as markup. */
veracityDrills.register("fewl", function (d, kit) {
  "use strict";
  var el = kit.el, fmt = kit.fmt, facts = kit.facts, block = kit.block, visible = kit.visible,
      wordDiff = kit.wordDiff, perturbation = kit.perturbation;
  var box = el("div", { class: "drill" });
  box.append(facts([["answers from", d.source], ["FEWL", d.fewl], ["truthfulness T", d.truthfulness],
                    ["penalty L", d.penalty], ["scored", d.scored], ["pairs failed", d.pairs_failed],
                    ["pairs error", d.pairs_error]]));
  box.append(block("question", d.question), block("answer", d.answer));
  var refs = el("tbody");
  (d.references || []).forEach(function (text, i) {
    refs.append(el("tr", null, el("td", { text: (d.reference_models || [])[i] || "" }),
      el("td", { class: "num", text: fmt((d.lambda || [])[i], 3) }), el("td", { class: "num", text: fmt((d.expertise || [])[i], 3) }),
      el("td", null, el("div", { class: "text" }, visible(text, "\n\t", false)))));
  });
  box.append(el("h4", { text: "references (λ: weight, s: expertise)" }), el("div", { class: "scroll" },
    el("table", null, el("thead", null, el("tr", null, el("th", { text: "reference" }), el("th", { text: "λ" }),
      el("th", { text: "s" }), el("th", { text: "answer" }))), refs)));
  var others = el("tbody");
  Object.keys(d.answers || {}).forEach(function (name) {
    var a = d.answers[name];
    others.append(el("tr", { class: name === d.source ? "current" : null }, el("td", { text: name }),
      el("td", { class: "num", text: fmt(a.fewl, 3) }), el("td", { class: "num", text: fmt(a.truthfulness, 3) }),
      el("td", { class: "num", text: fmt(a.penalty, 3) }), el("td", null, el("div", { class: "text" }, visible(a.answer === null ? "" : a.answer, "\n\t", false)))));
  });
  box.append(el("h4", { text: "every scored answer to this question" }), el("div", { class: "scroll" },
    el("table", null, el("thead", null, el("tr", null, el("th", { text: "answers from" }), el("th", { text: "FEWL" }),
      el("th", { text: "T" }), el("th", { text: "L" }), el("th", { text: "answer" }))), others)));
  var pairs = el("tbody");
  (d.pairs || []).forEach(function (p, i) {
    pairs.append(el("tr", null, el("td", { class: "num", text: i + 1 }), el("td", null, el("div", { class: "text" }, visible(p.wrong, "\n\t", false))),
      el("td", null, el("div", { class: "text" }, visible(p.corrected, "\n\t", false)))));
  });
  box.append(el("details", null, el("summary", { text: (d.pairs || []).length + " intentionally wrong / corrected pairs" }),
    el("table", null, el("thead", null, el("tr", null, el("th", { text: "#" }), el("th", { text: "intentionally wrong" }),
      el("th", { text: "corrected" }))), pairs)));
  var nb = el("tbody");
  (d.neighbours || []).forEach(function (id, i) {
    nb.append(el("tr", null, el("td", { text: id }), el("td", { class: "num", text: fmt((d.neighbour_cosine || [])[i], 3) }),
      el("td", null, el("div", { class: "text" }, visible((d.neighbour_questions || [])[i] || "", "\n\t", false)))));
  });
  box.append(el("h4", { text: "penalty neighbours (questions whose references the answer is compared with)" }),
    el("table", null, el("thead", null, el("tr", null, el("th", { text: "id" }), el("th", { text: "question cosine" }),
      el("th", { text: "question" }))), nb));
  return box;
});
