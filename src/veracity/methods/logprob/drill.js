/* The log-probability drill-down: the signals, then every token of the greedy answer with its
   probability. Every text reaches the page as text nodes (kit.el, kit.visible), never markup. */
veracityDrills.register("logprob", function (d, kit) {
  "use strict";
  var el = kit.el, fmt = kit.fmt, facts = kit.facts, block = kit.block;
  var box = el("div", { class: "drill" });
  box.append(facts([["signal", d.signal], ["score", d.score], ["top-k", d.top_k],
                    ["model", d.model], ["not scored", d.error]]));
  box.append(block("prompt", d.prompt, "mono"), block("greedy answer", d.answer));
  if (d.references && d.references.length) box.append(block("reference answers", d.references.join("\n")));
  var rows = el("tbody");
  (d.tokens || []).forEach(function (t, i) {
    rows.append(el("tr", null, el("td", { class: "num", text: i + 1 }),
      el("td", { class: "mono" }, kit.visible(t[0], "", true)), el("td", { class: "num", text: fmt(t[1], 3) }),
      el("td", { class: "num", text: fmt(Math.exp(t[1]), 3) })));
  });
  box.append(el("h4", { text: "answer tokens" }), el("div", { class: "scroll" },
    el("table", { class: "pairs" }, el("thead", null, el("tr", null, el("th", { text: "#" }),
      el("th", { text: "token" }), el("th", { text: "log p" }), el("th", { text: "p" }))), rows)));
  return box;
});
