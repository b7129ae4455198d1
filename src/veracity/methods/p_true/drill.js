/* The P(True) drill-down: the answer, the model's reply when asked whether it is true, and
   the probabilities read from it. Every text reaches the page as text nodes, never markup. */
veracityDrills.register("p-true", function (d, kit) {
  "use strict";
  var el = kit.el, facts = kit.facts, block = kit.block;
  var box = el("div", { class: "drill" });
  box.append(facts([["P(True)", d.score], ["read from", d.source], ["raw P(True)", d.p_true],
                    ["raw P(False)", d.p_false], ["reply token", d.position], ["model", d.model],
                    ["not scored", d.error]]));
  box.append(block("prompt", d.prompt, "mono"), block("greedy answer", d.answer),
             block("the model's verdict on it", d.verdict));
  if (d.references && d.references.length) box.append(block("reference answers", d.references.join("\n")));
  return box;
});
