/* veracity report: sortable, filterable item tables, drill-down, run comparison, exports.
   Every text from a run reaches the page through textContent / text nodes, never as markup. */
(function () {
  "use strict";

  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (key) {
        var value = attrs[key];
        if (value === null || value === undefined) return;
        if (key === "text") node.textContent = String(value);
        else if (key === "class") node.className = value;
        else if (key.slice(0, 2) === "on") node.addEventListener(key.slice(2), value);
        else node.setAttribute(key, String(value));
      });
    }
    for (var i = 2; i < arguments.length; i++) {
      var kid = arguments[i];
      if (kid === null || kid === undefined) continue;
      node.append(kid instanceof Node ? kid : String(kid));
    }
    return node;
  }

  function readJson(id) {
    var block = document.getElementById(id);
    return block ? JSON.parse(block.textContent) : null;
  }

  function fmt(value, digits) {
    if (value === null || value === undefined || (typeof value === "number" && isNaN(value))) return "—";
    if (typeof value === "number") {
      if (digits === undefined) return Number.isInteger(value) ? String(value) : value.toFixed(3);
      return value.toFixed(digits);
    }
    if (typeof value === "boolean") return value ? "yes" : "no";
    return String(value);
  }

  // Control, format and separator characters (not the plain space) as \xNN / \uNNNN tokens.
  var INVISIBLE = /[\p{C}\p{Z}]/u;

  function visible(text, keep, markSpaces) {
    var frag = document.createDocumentFragment();
    var plain = "";
    for (var ch of String(text)) {
      var special = (ch === " " && markSpaces) || (ch !== " " && INVISIBLE.test(ch) && keep.indexOf(ch) < 0);
      if (!special) { plain += ch; continue; }
      if (plain) { frag.append(plain); plain = ""; }
      var code = ch.codePointAt(0);
      var hex = code.toString(16);
      var shown = code < 0x100 ? "\\x" + hex.padStart(2, "0") : "\\u" + hex.padStart(4, "0");
      frag.append(el("span", { class: "tok", title: "U+" + hex.toUpperCase().padStart(4, "0") }, shown));
    }
    if (plain) frag.append(plain);
    return frag;
  }

  function words(text) {
    return String(text).split(/(\s+)/).filter(function (t) { return t !== ""; });
  }

  // Longest common subsequence of two word lists: which words of each side are shared.
  function common(a, b) {
    var n = a.length, m = b.length;
    if (n * m > 400000) return null;
    var w = m + 1, dp = new Uint32Array((n + 1) * w);
    for (var i = n - 1; i >= 0; i--) {
      for (var j = m - 1; j >= 0; j--) {
        dp[i * w + j] = a[i] === b[j] ? dp[(i + 1) * w + j + 1] + 1 : Math.max(dp[(i + 1) * w + j], dp[i * w + j + 1]);
      }
    }
    var ka = new Array(n).fill(false), kb = new Array(m).fill(false);
    i = 0; j = 0;
    while (i < n && j < m) {
      if (a[i] === b[j]) { ka[i] = kb[j] = true; i++; j++; }
      else if (dp[(i + 1) * w + j] >= dp[i * w + j + 1]) i++;
      else j++;
    }
    return [ka, kb];
  }

  function marked(tokens, kept, cls) {
    var frag = document.createDocumentFragment();
    tokens.forEach(function (t, i) {
      var text = visible(t, "\n\t", false);
      if (kept === null || kept[i] || /^\s+$/.test(t)) frag.append(text);
      else frag.append(el("span", { class: cls }, text));
    });
    return frag;
  }

  // [original, other] with the words each lacks from the other highlighted.
  function wordDiff(original, other) {
    var a = words(original), b = words(other);
    var keep = common(a, b) || [null, null];
    return [el("div", { class: "text" }, marked(a, keep[0], "del")),
            el("div", { class: "text" }, marked(b, keep[1], "ins"))];
  }

  // A perturbed prompt: the part after the shared prefix marked, invisible characters spelled out.
  function perturbation(prompt, perturbed) {
    var n = 0;
    while (n < prompt.length && n < perturbed.length && prompt[n] === perturbed[n]) n++;
    var box = el("div", { class: "text mono" });
    if (n >= prompt.length / 2) {
      box.append(visible(perturbed.slice(0, n), "", false));
      if (n < perturbed.length) box.append(el("mark", { class: "pert" }, visible(perturbed.slice(n), "", true)));
      return box;
    }
    box.append(wordDiff(prompt, perturbed)[1]);
    return box;
  }

  function facts(pairs) {
    var dl = el("dl", { class: "facts" });
    pairs.forEach(function (p) {
      if (p[1] === null || p[1] === undefined) return;
      dl.append(el("dt", { text: p[0] }), el("dd", { text: fmt(p[1], p[2]) }));
    });
    return dl;
  }

  function block(title, text, cls) {
    return el("div", { class: "block" }, el("h4", { text: title }),
              el("div", { class: "text " + (cls || "") }, visible(text === null || text === undefined ? "" : text, "\n\t", false)));
  }

  var LONG = 160;  // characters of a text cell shown in the table; the drill-down has all

  // Drill-down renderers by name: each method's script registers its own (d, kit) -> node.
  var DRILLS = {};
  // Views over an item table by the class of their placeholder div (a method's comparison of
  // two runs): (root, spec, table, kit) -> view, built once the page's tables exist.
  var VIEWS = {};
  var KIT = { el: el, fmt: fmt, facts: facts, block: block, visible: visible, wordDiff: wordDiff,
              perturbation: perturbation, drill: drill, merged: merged, download: download,
              ItemTable: function (root, spec) { return new ItemTable(root, spec); } };
  window.veracityDrills = { register: function (name, render) { DRILLS[name] = render; }, kit: KIT };
  window.veracityViews = { register: function (cls, make) { VIEWS[cls] = make; } };

  function drill(name, d) {
    var render = DRILLS[name];
    return render ? render(d, KIT) : el("p", { class: "muted", text: "no drill-down view for " + name });
  }

  // A row's cells and its drill-down data (kept apart so each text is stored once).
  function merged(row) {
    return Object.assign({}, row._d, row);
  }

  // Cells a spreadsheet would read as a formula get a leading apostrophe.
  function csvCell(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "number") return isFinite(value) ? String(value) : "";
    var text = typeof value === "boolean" ? (value ? "yes" : "no") : String(value);
    text = text.replace(/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]/g, function (c) {
      return "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0");  // no terminal escapes
    });
    if (/^[=+\-@\t\r|]/.test(text)) text = "'" + text;
    return '"' + text.replace(/"/g, '""') + '"';
  }

  function toCsv(columns, rows) {
    var lines = [columns.map(function (c) { return csvCell(c.group ? c.group + ": " + c.label : c.label); }).join(",")];
    rows.forEach(function (row) {
      lines.push(columns.map(function (c) { return csvCell(row[c.key]); }).join(","));
    });
    return lines.join("\r\n") + "\r\n";
  }

  function download(blob, name) {
    var url = URL.createObjectURL(blob);
    var link = el("a", { href: url, download: name });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 1000);
  }

  function compare(a, b, key) {
    var x = a[key], y = b[key];
    var xn = x === null || x === undefined, yn = y === null || y === undefined;
    if (xn || yn) return xn === yn ? 0 : xn ? 1 : -1;
    if (typeof x === "number" && typeof y === "number") return x - y;
    return String(x).localeCompare(String(y));
  }

  function ItemTable(root, spec) {
    this.root = root;
    this.spec = spec;
    this.rows = spec.rows;
    this.sortKey = null;
    this.sortDir = 1;
    this.page = 0;
    this.pageSize = spec.page_size || 50;
    this.open = null;
    this.build();
    this.apply();
  }

  ItemTable.prototype.build = function () {
    var self = this, spec = this.spec;
    var bar = el("div", { class: "filters" });
    this.search = el("input", { type: "search", placeholder: "search " + spec.search_label, "aria-label": "search", oninput: function () { self.apply(); } });
    bar.append(this.search);
    if (spec.range) {
      var label = spec.columns.filter(function (c) { return c.key === spec.range; })[0].label;
      this.low = el("input", { type: "number", step: "any", placeholder: label + " ≥", class: "range", "aria-label": label + " at least", oninput: function () { self.apply(); } });
      this.high = el("input", { type: "number", step: "any", placeholder: label + " ≤", class: "range", "aria-label": label + " at most", oninput: function () { self.apply(); } });
      bar.append(this.low, this.high);
    }
    this.selects = [];
    spec.columns.forEach(function (c) {
      if (c.kind !== "cat") return;
      var values = Array.from(new Set(spec.rows.map(function (r) { return fmt(r[c.key]); }))).sort();
      if (values.length < 2) return;
      var select = el("select", { "aria-label": c.label, "data-key": c.key, onchange: function () { self.apply(); } },
                      el("option", { value: "", text: "any " + c.label }));
      values.forEach(function (v) { select.append(el("option", { value: v, text: v })); });
      self.selects.push(select);
      bar.append(select);
    });
    this.count = el("span", { class: "count" });
    var csv = el("button", { type: "button", class: "csv", text: "CSV of the filtered rows", onclick: function () {
      download(new Blob([self.csv()], { type: "text/csv;charset=utf-8" }), spec.name + ".csv");
    } });
    bar.append(this.count, csv);
    this.head = el("tr");
    spec.columns.forEach(function (c) {
      var th = el("th", { "data-key": c.key, title: c.help || null, class: c.kind === "num" ? "num sortable" : "sortable", tabindex: "0" }, c.label);
      var sort = function () { self.sortBy(c.key); };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") sort(); });
      self.head.append(th);
    });
    this.body = el("tbody");
    this.pager = el("div", { class: "pager" });
    var head = el("thead", null, this.groups(), this.head);
    this.root.append(bar, el("div", { class: "scroll" }, el("table", { class: "items" }, head, this.body)), this.pager);
  };

  // A header row over columns that share a group (e.g. one model's metrics), if any do.
  ItemTable.prototype.groups = function () {
    var columns = this.spec.columns;
    if (!columns.some(function (c) { return c.group; })) return null;
    var row = el("tr", { class: "groups" });
    for (var i = 0; i < columns.length;) {
      var j = i;
      while (j < columns.length && columns[j].group === columns[i].group) j++;
      row.append(el("th", { colspan: j - i, text: columns[i].group || "" }));
      i = j;
    }
    return row;
  };

  ItemTable.prototype.sortBy = function (key) {
    this.sortDir = this.sortKey === key ? -this.sortDir : 1;
    this.sortKey = key;
    this.apply();
  };

  ItemTable.prototype.apply = function () {
    var spec = this.spec, self = this;
    var needle = this.search.value.trim().toLowerCase();
    var low = this.low && this.low.value !== "" ? Number(this.low.value) : null;
    var high = this.high && this.high.value !== "" ? Number(this.high.value) : null;
    var chosen = this.selects.filter(function (s) { return s.value !== ""; });
    this.shown = this.rows.filter(function (row) {
      if (needle && (row._text || (row._text = spec.search.map(function (k) { return row[k] === null || row[k] === undefined ? "" : String(row[k]); }).join("\n").toLowerCase())).indexOf(needle) < 0) return false;
      if (low !== null || high !== null) {
        var v = row[spec.range];
        if (typeof v !== "number" || (low !== null && v < low) || (high !== null && v > high)) return false;
      }
      return chosen.every(function (s) { return fmt(row[s.getAttribute("data-key")]) === s.value; });
    });
    if (this.sortKey !== null) {
      var key = this.sortKey, dir = this.sortDir;
      this.shown.sort(function (a, b) {
        var an = a[key] === null || a[key] === undefined, bn = b[key] === null || b[key] === undefined;
        if (an || bn) return an === bn ? 0 : an ? 1 : -1;  // empty cells last either way
        return dir * compare(a, b, key);
      });
    }
    Array.from(this.head.children).forEach(function (th) {
      var key = th.getAttribute("data-key");
      th.setAttribute("aria-sort", key === self.sortKey ? (self.sortDir > 0 ? "ascending" : "descending") : "none");
    });
    this.page = Math.min(this.page, Math.max(0, Math.ceil(this.shown.length / this.pageSize) - 1));
    this.render();
  };

  ItemTable.prototype.render = function () {
    var self = this, spec = this.spec;
    var start = this.page * this.pageSize;
    var rows = this.shown.slice(start, start + this.pageSize);
    var frag = document.createDocumentFragment();
    rows.forEach(function (row) {
      var tr = el("tr", { class: spec.drill ? "item drill" : "item", tabindex: spec.drill ? "0" : null });
      spec.columns.forEach(function (c) {
        var value = row[c.key];
        var td = el("td", { class: c.kind === "num" ? "num" : c.kind === "text" ? "clip" : null });
        var shown = fmt(value, c.digits);
        if (c.kind === "text" && shown.length > LONG) shown = shown.slice(0, LONG - 1) + "…";
        td.append(c.kind === "text" ? visible(shown, "", false) : shown);
        tr.append(td);
      });
      if (spec.drill) {
        var toggle = function () { self.toggle(row, tr); };
        tr.addEventListener("click", toggle);
        tr.addEventListener("keydown", function (e) { if (e.key === "Enter") toggle(); });
      }
      frag.append(tr);
      if (self.open === row) frag.append(self.detailRow(row));
    });
    this.body.replaceChildren(frag);
    this.count.textContent = this.shown.length + " of " + this.rows.length + " rows";
    var pages = Math.max(1, Math.ceil(this.shown.length / this.pageSize));
    if (pages === 1) { this.pager.replaceChildren(); return; }
    this.pager.replaceChildren(
      el("button", { type: "button", text: "◀ previous", disabled: this.page === 0 ? "" : null, onclick: function () { self.page--; self.render(); } }),
      el("span", { text: " page " + (this.page + 1) + " of " + pages + " " }),
      el("button", { type: "button", text: "next ▶", disabled: this.page >= pages - 1 ? "" : null, onclick: function () { self.page++; self.render(); } }));
  };

  ItemTable.prototype.detailRow = function (row) {
    return el("tr", { class: "detail" }, el("td", { colspan: this.spec.columns.length }, drill(this.spec.drill, merged(row))));
  };

  ItemTable.prototype.toggle = function (row) {
    this.open = this.open === row ? null : row;
    this.render();
  };

  ItemTable.prototype.csv = function () {
    return toCsv(this.spec.columns, this.shown);
  };

  function figures() {
    document.querySelectorAll("figure.plot").forEach(function (fig) {
      var img = fig.querySelector("img");
      var button = fig.querySelector("button.png");
      if (!img || !button) return;
      button.addEventListener("click", function () {
        var bytes = atob(img.src.slice(img.src.indexOf(",") + 1));
        var data = new Uint8Array(bytes.length);
        for (var i = 0; i < bytes.length; i++) data[i] = bytes.charCodeAt(i);
        download(new Blob([data], { type: "image/png" }), (img.getAttribute("data-name") || "plot") + ".png");
      });
    });
  }


  // A table whose rows live in chunk scripts beside the page, sorted by spec.range
  // (ascending, unscored last); a chunk is loaded by a script element the first time a page,
  // a bound of the range filter or a search needs it.
  var arrived = {};
  window.veracityItems = function (table, index, rows) { arrived[table + "/" + index] = rows; };

  function PagedTable(root, spec) {
    this.root = root;
    this.spec = spec;
    this.loaded = {};
    this.waiting = {};
    this.starts = [];
    var at = 0;
    spec.chunks.forEach(function (c) { this.starts.push(at); at += c.n; }, this);
    this.desc = true;
    this.page = 0;
    this.pageSize = spec.page_size || 50;
    this.open = null;
    this.renders = 0;
    this.build();
    this.apply();
  }

  PagedTable.prototype.build = function () {
    var self = this, spec = this.spec;
    var label = spec.columns.filter(function (c) { return c.key === spec.range; })[0].label;
    var bar = el("div", { class: "filters" });
    this.search = el("input", { type: "search", placeholder: "search " + spec.search_label + " (loads every file)", "aria-label": "search", onchange: function () { self.apply(); } });
    this.low = el("input", { type: "number", step: "any", placeholder: label + " ≥", class: "range", "aria-label": label + " at least", oninput: function () { self.apply(); } });
    this.high = el("input", { type: "number", step: "any", placeholder: label + " ≤", class: "range", "aria-label": label + " at most", oninput: function () { self.apply(); } });
    this.count = el("span", { class: "count" });
    bar.append(this.search, this.low, this.high, this.count);
    this.head = el("tr");
    spec.columns.forEach(function (c) {
      var sortable = c.key === spec.range;
      var th = el("th", { "data-key": c.key, title: sortable ? "sort by " + c.label : (c.help || null), class: (c.kind === "num" ? "num" : "") + (sortable ? " sortable" : ""), tabindex: sortable ? "0" : null }, c.label);
      if (sortable) {
        var flip = function () { self.desc = !self.desc; self.page = 0; self.apply(); };
        th.addEventListener("click", flip);
        th.addEventListener("keydown", function (e) { if (e.key === "Enter") flip(); });
      }
      self.head.append(th);
    });
    this.body = el("tbody");
    this.pager = el("div", { class: "pager" });
    this.root.append(bar, el("div", { class: "scroll" }, el("table", { class: "items" }, el("thead", null, this.head), this.body)), this.pager);
  };

  PagedTable.prototype.load = function (i) {
    var self = this, spec = this.spec;
    if (this.loaded[i]) return Promise.resolve(this.loaded[i]);
    if (this.waiting[i]) return this.waiting[i];
    this.waiting[i] = new Promise(function (resolve, reject) {
      var script = document.createElement("script");
      script.src = spec.directory + "/" + spec.chunks[i].file;
      script.onload = function () {
        var rows = arrived[spec.name + "/" + i];
        delete arrived[spec.name + "/" + i];
        script.remove();
        if (!rows) { reject(new Error(spec.chunks[i].file + " holds no rows")); return; }
        self.loaded[i] = rows;
        resolve(rows);
      };
      script.onerror = function () { reject(new Error("cannot load " + script.src + ": keep the folder " + spec.directory + " beside this page")); };
      document.head.append(script);
    });
    return this.waiting[i];
  };

  // The chunk holding sorted position p.
  PagedTable.prototype.chunkOf = function (p) {
    var lo = 0, hi = this.starts.length - 1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (this.starts[mid] <= p) lo = mid; else hi = mid - 1; }
    return lo;
  };

  PagedTable.prototype.rowAt = function (p) {
    var i = this.chunkOf(p), start = this.starts[i];
    return this.load(i).then(function (rows) { return rows[p - start]; });
  };

  // First sorted position whose value is >= x (strict: > x), among the scored rows.
  PagedTable.prototype.bound = function (x, strict) {
    var spec = this.spec, self = this;
    var i = spec.chunks.findIndex(function (c) { return c.hi !== null && (strict ? c.hi > x : c.hi >= x); });
    if (i < 0) return Promise.resolve(spec.scored);
    return this.load(i).then(function (rows) {
      var lo = 0, hi = spec.chunks[i].scored;
      while (lo < hi) {
        var mid = (lo + hi) >> 1, v = rows[mid][spec.range];
        if (strict ? v > x : v >= x) hi = mid; else lo = mid + 1;
      }
      return self.starts[i] + lo;
    });
  };

  PagedTable.prototype.apply = function () {
    var self = this, spec = this.spec, began = performance.now();
    var low = this.low.value !== "" ? Number(this.low.value) : null;
    var high = this.high.value !== "" ? Number(this.high.value) : null;
    var needle = this.search.value.trim().toLowerCase();
    var ticket = this.ticket = (this.ticket || 0) + 1;
    var ranged = low !== null || high !== null;
    Promise.all([low === null ? 0 : this.bound(low, false), high === null ? spec.scored : this.bound(high, true)]).then(function (ends) {
      var a = ends[0], b = Math.max(ends[0], ends[1]);
      // positions in view order: worst first (desc) or best first; unscored rows only unfiltered
      var n = b - a, extra = ranged ? 0 : spec.total - spec.scored;
      self.at = function (k) { return k < n ? (self.desc ? b - 1 - k : a + k) : spec.scored + (k - n); };
      self.size = n + extra;
      if (!needle) { self.matches = null; return null; }
      return self.scan(needle, ticket);
    }).then(function () {
      if (ticket !== self.ticket) return;
      self.page = Math.min(self.page, Math.max(0, Math.ceil(self.shownCount() / self.pageSize) - 1));
      return self.render(ticket, began);
    }).catch(function (e) { self.count.textContent = String(e.message || e); });
  };

  PagedTable.prototype.shownCount = function () { return this.matches ? this.matches.length : this.size; };

  PagedTable.prototype.scan = function (needle, ticket) {
    var self = this, spec = this.spec, found = [], k = 0;
    var text = function (row) { return spec.search.map(function (key) { return row[key] === null || row[key] === undefined ? "" : String(row[key]); }).join("\n").toLowerCase(); };
    function step() {
      if (ticket !== self.ticket) return null;
      if (k >= self.size) { self.matches = found; return null; }
      var p = self.at(k);
      return self.rowAt(p).then(function () {
        var i = self.chunkOf(p), rows = self.loaded[i], start = self.starts[i];
        // the rest of this chunk in view order, without a promise per row
        while (k < self.size && self.chunkOf(self.at(k)) === i) {
          var row = rows[self.at(k) - start];
          if (text(row).indexOf(needle) >= 0) found.push(row);
          k++;
        }
        self.count.textContent = found.length + " found so far (searching)";
        return step();
      });
    }
    return step();
  };

  PagedTable.prototype.render = function (ticket, began) {
    var self = this, spec = this.spec;
    var start = this.page * this.pageSize, count = this.shownCount();
    var wanted = [];
    for (var k = start; k < Math.min(count, start + this.pageSize); k++) wanted.push(k);
    var rows = this.matches ? Promise.resolve(wanted.map(function (k) { return self.matches[k]; }))
      : Promise.all(wanted.map(function (k) { return self.rowAt(self.at(k)); }));
    return rows.then(function (rows) {
      if (ticket !== self.ticket) return;
      var frag = document.createDocumentFragment();
      rows.forEach(function (row) {
        var tr = el("tr", { class: spec.drill ? "item drill" : "item", tabindex: spec.drill ? "0" : null });
        spec.columns.forEach(function (c) {
          var td = el("td", { class: c.kind === "num" ? "num" : c.kind === "text" ? "clip" : null });
          var shown = fmt(row[c.key], c.digits);
          if (c.kind === "text" && shown.length > LONG) shown = shown.slice(0, LONG - 1) + "…";
          td.append(c.kind === "text" ? visible(shown, "", false) : shown);
          tr.append(td);
        });
        if (spec.drill) {
          var toggle = function () { self.open = self.open === row ? null : row; self.render(self.ticket, performance.now()); };
          tr.addEventListener("click", toggle);
          tr.addEventListener("keydown", function (e) { if (e.key === "Enter") toggle(); });
        }
        frag.append(tr);
        if (self.open === row) frag.append(el("tr", { class: "detail" }, el("td", { colspan: spec.columns.length }, drill(spec.drill, merged(row)))));
      });
      self.body.replaceChildren(frag);
      self.count.textContent = count + " of " + spec.total + " rows";
      var pages = Math.max(1, Math.ceil(count / self.pageSize));
      self.pager.replaceChildren(
        el("button", { type: "button", text: "◀ previous", disabled: self.page === 0 ? "" : null, onclick: function () { self.page--; self.render(self.ticket, performance.now()); } }),
        el("span", { text: " page " + (self.page + 1) + " of " + pages + " " }),
        el("button", { type: "button", text: "next ▶", disabled: self.page >= pages - 1 ? "" : null, onclick: function () { self.page++; self.render(self.ticket, performance.now()); } }));
      self.renders++;
      self.lastMs = performance.now() - began;
      if (!self.firstPaint) self.firstPaint = performance.now();
      self.root.setAttribute("data-renders", String(self.renders));
    });
  };

  function start() {
    var tables = {};
    document.querySelectorAll("div.vtable").forEach(function (root) {
      var id = root.getAttribute("data-src");
      tables[id] = new ItemTable(root, readJson(id));
    });
    var views = {};
    Object.keys(VIEWS).forEach(function (cls) {
      views[cls] = [];
      document.querySelectorAll("div." + cls).forEach(function (root) {
        var spec = readJson(root.getAttribute("data-src"));
        if (tables[spec.items]) views[cls].push(VIEWS[cls](root, spec, tables[spec.items], KIT));
      });
    });
    var paged = {};
    document.querySelectorAll("div.vpaged").forEach(function (root) {
      var id = root.getAttribute("data-src");
      paged[id] = new PagedTable(root, readJson(id));
    });
    figures();
    window.veracityReport = { tables: tables, views: views, paged: paged, toCsv: toCsv };
  }

  // After the methods' scripts (which follow this one) have registered their drills and views.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else setTimeout(start, 0);
})();
