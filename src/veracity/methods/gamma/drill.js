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
