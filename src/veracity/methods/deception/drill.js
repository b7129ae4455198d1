/* DB-MMLU's drill-down: the options, both answers and both lines of reasoning.
   Registered with the report's item tables; every text reaches the page as text nodes
   (kit.el, kit.visible), never as markup. */
veracityDrills.register("deception", function (d, kit) {
  "use strict";
  var el = kit.el, fmt = kit.fmt, facts = kit.facts, block = kit.block, visible = kit.visible,
      wordDiff = kit.wordDiff, perturbation = kit.perturbation;
  var box = el("div", { class: "drill" });
  var n = d.normal_side || {}, m = d.misleading_side || {};
  box.append(facts([["subject", d.subject], ["model", d.model], ["gold", d.gold],
                    ["normal answer", n.answer], ["misleading answer", m.answer],
                    ["attempts (normal, misleading)", (n.attempts || 0) + ", " + (m.attempts || 0)]]));
  box.append(block("question", d.question));
  var list = el("ol", { class: "options", type: "A" });
  (d.options || []).forEach(function (option, i) {
    var letter = "ABCD"[i];
    var tags = [letter === d.gold ? "gold" : null, letter === n.answer ? "normal" : null,
                letter === m.answer ? "misleading" : null].filter(Boolean);
    list.append(el("li", { class: letter === d.gold ? "gold" : null }, visible(option, "", false),
                   tags.length ? el("span", { class: "tag", text: " ← " + tags.join(", ") }) : null));
  });
  box.append(el("div", { class: "block" }, el("h4", { text: "options" }), list));
  box.append(block("misleading opening", d.misleading_start));
  var pair = wordDiff(n.reasoning || n.raw || "", m.reasoning || m.raw || "");
  box.append(el("div", { class: "side" },
    el("div", { class: "block" }, el("h4", { text: "normal reasoning → " + fmt(n.answer) }), pair[0]),
    el("div", { class: "block" }, el("h4", { text: "misleading reasoning → " + fmt(m.answer) }), pair[1])));
  var errors = (n.errors || []).concat(m.errors || []);
  if (errors.length) box.append(block("parse errors", errors.join("\n")));
  return box;
});
