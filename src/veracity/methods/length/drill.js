/* The length drill-down: the answer, how its tokens were counted and whether it was cut at
   max tokens. Every text reaches the page as text nodes, never markup. */
veracityDrills.register("length", function (d, kit) {
  "use strict";
  var el = kit.el, facts = kit.facts, block = kit.block;
  var box = el("div", { class: "drill" });
  box.append(facts([["tokens", d.score], ["counted by", d.counted_by],
                    ["finish reason", d.finish_reason], ["model", d.model], ["not scored", d.error]]));
  box.append(block("prompt", d.prompt, "mono"), block("greedy answer", d.answer));
  if (d.references && d.references.length) box.append(block("reference answers", d.references.join("\n")));
  return box;
});
