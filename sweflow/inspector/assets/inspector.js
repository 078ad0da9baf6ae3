// sweflow inspector: the runs table, one run's steps, two runs side by side.
// Routes live in the URL's fragment (#, #run/ID, #compare/A/B) so a static file links as well
// as a served page. Every text of a run goes in through textContent, never as HTML.
(function () {
  "use strict";

  var DATA = JSON.parse(document.getElementById("sweflow-data").textContent);
  var RUNS = DATA.runs;
  var BY_ID = {};
  RUNS.forEach(function (r) { BY_ID[r.id] = r; });
  var FOLD_LINES = 24; // an observation longer than this shows its head and folds the rest
  var HEAD_LINES = 12;

  var COLUMNS = [
    { key: "task", label: "Task", cls: "task" },
    { key: "source", label: "Source", cls: "source" },
    { key: "run", label: "Run", cls: "num", num: true },
    { key: "model", label: "Model", cls: "model" },
    { key: "policy", label: "Policy", cls: "num", num: true },
    { key: "steps", label: "Steps", cls: "num", num: true },
    { key: "exit", label: "Exit" },
    { key: "verdict", label: "Verdict" },
    { key: "reward", label: "Reward", cls: "num", num: true },
    { key: "tokens", label: "Tokens", cls: "num", num: true },
  ];
  var state = { sort: "task", dir: 1, text: "", verdict: "", source: "" };
  // a view can be linked: ?q=TEXT&verdict=V&source=S&sort=COLUMN&dir=-1 set the table's state
  (function fromQuery() {
    var query = new URLSearchParams(location.search);
    state.text = query.get("q") || "";
    state.verdict = query.get("verdict") || "";
    state.source = query.get("source") || "";
    if (COLUMNS.some(function (c) { return c.key === query.get("sort"); })) state.sort = query.get("sort");
    if (query.get("dir") === "-1") state.dir = -1;
  })();

  // -- small DOM helpers ------------------------------------------------------------------
  function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "cls") node.className = attrs[k];
      else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), attrs[k]);
      else node.setAttribute(k, attrs[k]);
    });
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function fmtInt(n) { return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"); }
  function fmtReward(x) { return x === null || x === undefined ? "—" : (Math.round(x * 1000) / 1000).toString(); }
  function pill(word, extra) {
    return el("span", { cls: "pill " + (extra || word.replace(/ /g, "-")), text: word || "—" });
  }
  function policy(r) { return r.policy === null || r.policy === undefined ? "—" : "v" + r.policy; }

  // -- syntax colouring of code and diffs -------------------------------------------------
  var KEYWORDS = {};
  ("False None True and as assert async await break class continue def del elif else except " +
   "finally for from global if import in is lambda nonlocal not or pass raise return try while " +
   "with yield match case function var let const new this typeof fn pub use impl struct enum " +
   "func package type interface then fi do done esac echo").split(" ").forEach(function (w) { KEYWORDS[w] = 1; });
  var BUILTINS = {};
  ("self cls print len range str int float dict list set tuple isinstance super object " +
   "Exception ValueError TypeError KeyError open").split(" ").forEach(function (w) { BUILTINS[w] = 1; });
  var TOKEN = /("""|'''|"(?:\\.|[^"\\])*"?|'(?:\\.|[^'\\])*'?|#.*$|\/\/.*$|\b\d+(?:\.\d+)?\b|\b[A-Za-z_][A-Za-z0-9_]*\b)/g;

  function colourCode(parent, text, lang) {
    var last = 0, m, afterDef = false;
    TOKEN.lastIndex = 0;
    while ((m = TOKEN.exec(text)) !== null) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      var t = m[0], cls = null;
      if (t[0] === '"' || t[0] === "'") cls = "tok-str";
      else if (t[0] === "#") cls = lang === "js" ? null : "tok-com";
      else if (t.slice(0, 2) === "//") cls = lang === "py" || lang === "sh" ? null : "tok-com";
      else if (/^\d/.test(t)) cls = "tok-num";
      else if (afterDef) cls = "tok-def";
      else if (KEYWORDS[t]) cls = "tok-kw";
      else if (BUILTINS[t]) cls = "tok-builtin";
      afterDef = t === "def" || t === "class" || t === "function" || t === "func" || t === "fn";
      if (cls === null && (t[0] === "#" || t.slice(0, 2) === "//")) {
        // not a comment in this language: colour what follows the mark as code
        parent.appendChild(document.createTextNode(t.slice(0, 1)));
        TOKEN.lastIndex = m.index + 1;
        last = m.index + 1;
        continue;
      }
      parent.appendChild(cls ? el("span", { cls: cls, text: t }) : document.createTextNode(t));
      last = m.index + t.length;
      if (t.length === 0) TOKEN.lastIndex++;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  function langOf(path) {
    var m = /\.([A-Za-z0-9]+)$/.exec(path || "");
    var ext = m ? m[1].toLowerCase() : "";
    if (ext === "py" || ext === "pyi") return "py";
    if (ext === "sh" || ext === "bash") return "sh";
    if (["js", "ts", "tsx", "jsx", "c", "h", "cc", "cpp", "java", "go", "rs", "cs"].indexOf(ext) >= 0) return "js";
    return "";
  }

  function diffView(text, cls) {
    var pre = el("pre", { cls: "diff " + (cls || "") });
    var lang = "";
    (text || "").replace(/\n$/, "").split("\n").forEach(function (line) {
      var span;
      if (/^(diff --git|index |--- |\+\+\+ |new file mode|deleted file mode|similarity|rename )/.test(line)) {
        if (line.slice(0, 4) === "+++ ") lang = langOf(line.slice(4));
        else if (line.slice(0, 11) === "diff --git ") lang = langOf(line.split(" ").pop());
        span = el("span", { cls: "ln d-head", text: line });
      } else if (line.slice(0, 2) === "@@") {
        span = el("span", { cls: "ln d-hunk", text: line });
      } else {
        var kind = line[0] === "+" ? "d-add" : line[0] === "-" ? "d-del" : "d-ctx";
        span = el("span", { cls: "ln " + kind }, el("span", { cls: "mark", text: line[0] || " " }));
        colourCode(span, line.slice(1), lang);
      }
      pre.appendChild(span);
    });
    return pre;
  }

  function folded(text, cls) {
    var lines = (text || "").split("\n");
    var box = el("div", { cls: "folded" });
    if (lines.length <= FOLD_LINES) {
      box.appendChild(el("pre", { cls: cls, text: text || "(no output)" }));
      return box;
    }
    box.appendChild(el("pre", { cls: cls, text: lines.slice(0, HEAD_LINES).join("\n") }));
    box.appendChild(el("details", { cls: "fold" },
      el("summary", { text: "show " + (lines.length - HEAD_LINES) + " more lines" }),
      el("pre", { cls: cls, text: lines.slice(HEAD_LINES).join("\n") })));
    return box;
  }

  // -- the header -------------------------------------------------------------------------
  function header() {
    document.getElementById("where").textContent = DATA.folder;
    var tasks = {}, resolved = 0, refused = 0, graded = 0;
    RUNS.forEach(function (r) {
      tasks[r.task] = 1;
      if (r.verdict === "resolved") resolved++;
      if (r.verdict === "refused") refused++;
      if (r.verdict !== "ungraded") graded++;
    });
    var chips = document.getElementById("chips");
    [[RUNS.length, "runs"], [Object.keys(tasks).length, "tasks"],
     [resolved + "/" + graded, "resolved"], [refused, "refused"]].forEach(function (c) {
      chips.appendChild(el("span", { cls: "chip" }, el("b", { text: String(c[0]) }), " " + c[1]));
    });
  }

  // -- the table --------------------------------------------------------------------------
  function matches(r) {
    if (state.verdict && r.verdict !== state.verdict) return false;
    if (state.source && r.source !== state.source) return false;
    if (!state.text) return true;
    var hay = [r.task, r.source, r.model, r.exit, r.verdict, policy(r)].join(" ").toLowerCase();
    return state.text.toLowerCase().split(/\s+/).every(function (w) { return hay.indexOf(w) >= 0; });
  }
  function compare(a, b) {
    var col = COLUMNS.filter(function (c) { return c.key === state.sort; })[0];
    var x = a[state.sort], y = b[state.sort];
    if (col && col.num) {
      x = x === null || x === undefined ? -Infinity : x;
      y = y === null || y === undefined ? -Infinity : y;
      return (x - y) * state.dir || a.task.localeCompare(b.task) || a.run - b.run;
    }
    return String(x).localeCompare(String(y)) * state.dir || a.run - b.run;
  }
  function options(select, values, all) {
    select.appendChild(el("option", { value: "", text: all }));
    values.forEach(function (v) { select.appendChild(el("option", { value: v, text: v })); });
  }
  function unique(key) {
    var seen = {};
    RUNS.forEach(function (r) { seen[r[key]] = 1; });
    return Object.keys(seen).sort();
  }

  function tableView(app) {
    var search = el("input", { id: "filter", type: "search", placeholder: "Filter: task, model, exit, verdict…" });
    search.value = state.text;
    var verdict = el("select", { id: "verdict-filter" });
    options(verdict, unique("verdict"), "all verdicts");
    verdict.value = state.verdict;
    var source = el("select", { id: "source-filter" });
    options(source, unique("source"), "all sources");
    source.value = state.source;
    var count = el("span", { cls: "count", id: "run-count" });
    app.appendChild(el("div", { cls: "toolbar" }, search, verdict, source, count));

    var headRow = el("tr");
    var tbody = el("tbody");
    COLUMNS.forEach(function (c) {
      var th = el("th", { cls: (c.num ? "num " : "") + (state.sort === c.key ? "sorted" : ""), "data-key": c.key },
        c.label, el("span", { cls: "arrow", text: state.sort === c.key ? (state.dir > 0 ? "▲" : "▼") : "" }));
      th.addEventListener("click", function () {
        state.dir = state.sort === c.key ? -state.dir : 1;
        state.sort = c.key;
        render();
      });
      headRow.appendChild(th);
    });
    var table = el("table", { cls: "runs", id: "runs" }, el("thead", {}, headRow), tbody);
    app.appendChild(el("div", { cls: "tablecard" }, table));

    function fill() {
      tbody.textContent = "";
      var shown = RUNS.filter(matches).sort(compare);
      shown.forEach(function (r) {
        var tr = el("tr", { cls: "run-row", "data-id": r.id, onclick: function () { location.hash = "#run/" + r.id; } },
          el("td", { cls: "task", text: r.task, title: r.task }),
          el("td", { cls: "source", text: r.source, title: r.path }),
          el("td", { cls: "num", text: String(r.run) }),
          el("td", { cls: "model", text: r.model || "—" }),
          el("td", { cls: "num", text: policy(r) }),
          el("td", { cls: "num", text: String(r.steps) }),
          el("td", {}, pill(r.exit || "—", "exit")),
          el("td", {}, pill(r.verdict)),
          el("td", { cls: "num", text: fmtReward(r.reward) }),
          el("td", { cls: "num", text: fmtInt(r.tokens) }));
        tbody.appendChild(tr);
      });
      if (!shown.length) {
        tbody.appendChild(el("tr", {}, el("td", { colspan: String(COLUMNS.length), cls: "empty-note", text: "No run matches the filter." })));
      }
      count.textContent = "Showing " + shown.length + " of " + RUNS.length + " runs";
      count.setAttribute("data-shown", String(shown.length));
    }
    search.addEventListener("input", function () { state.text = search.value; fill(); });
    verdict.addEventListener("change", function () { state.verdict = verdict.value; fill(); });
    source.addEventListener("change", function () { state.source = source.value; fill(); });
    fill();
  }

  // -- one run ----------------------------------------------------------------------------
  function fact(name, value) { return el("span", {}, name + " ", el("b", { text: String(value) })); }

  function summaryCard(r, compact) {
    var g = r.grading;
    var card = el("div", { cls: "card run-head", "data-id": r.id },
      el("h2", { text: r.task }),
      el("div", { cls: "facts" },
        pill(r.verdict), pill(r.exit || "—", "exit"),
        fact("reward", fmtReward(r.reward)), fact("model", r.model || "—"),
        fact("source", r.source), fact("run", r.run), fact("policy", policy(r)),
        fact("steps", r.steps), fact("tokens", fmtInt(r.prompt_tokens) + " + " + fmtInt(r.completion_tokens)),
        compact ? null : fact("wall", r.wall_s + " s"),
        compact ? null : fact("file", r.path)));
    if (g.reason && !g.refusal) card.appendChild(el("p", { cls: "reason", text: g.reason }));
    if (g.refusal) {
      card.appendChild(el("div", { cls: "refusal" },
        el("b", { text: "Refused by the tamper guard (" + g.refusal.status + "): " }), g.refusal.reason));
    }
    if (r.error && r.verdict !== "refused") card.appendChild(el("div", { cls: "error-note", text: r.error }));
    return card;
  }

  function gradingCard(r) {
    var tests = r.grading.tests || {};
    var kinds = Object.keys(tests);
    if (!kinds.length) return null;
    var grid = el("div", { cls: "tests" });
    kinds.forEach(function (kind) {
      var t = tests[kind];
      var list = el("ul", { cls: "test-list", "data-kind": kind });
      t.passed.forEach(function (name) { list.appendChild(el("li", { cls: "pass", text: name })); });
      t.failed.forEach(function (name) { list.appendChild(el("li", { cls: "fail", text: name })); });
      var total = t.passed.length + t.failed.length;
      grid.appendChild(el("div", {}, el("div", { cls: "kind", text: kind + " · " + t.passed.length + "/" + total + " pass" }), list));
    });
    var card = el("div", { cls: "card grading" }, el("h3", { text: "Grading" }), grid);
    if (r.grading.log_path) card.appendChild(el("div", { cls: "logpath" }, "grading files: ", el("code", { text: r.grading.log_path })));
    return card;
  }

  function stepCard(s) {
    var head = el("div", { cls: "step-head" },
      el("span", { cls: "n", text: "Step " + (s.index + 1) }),
      el("span", { text: fmtInt(s.prompt_tokens) + " prompt + " + fmtInt(s.completion_tokens) + " completion tokens" }),
      el("span", { text: "model " + s.model_s + " s · tools " + s.exec_s + " s" }));
    var body = el("div", { cls: "step-body" },
      s.thought ? el("p", { cls: "thought", text: s.thought }) : el("p", { cls: "thought none", text: "(no thought)" }));
    if (s.format_error) body.appendChild(el("div", { cls: "format-error", text: "Format error: " + s.format_error }));
    s.actions.forEach(function (a) {
      var box = el("div", { cls: "action", "data-tool": a.tool },
        el("div", { cls: "label", text: "action · " + a.tool }), el("pre", { cls: "cmd", text: a.line }));
      if (a.diff) box.appendChild(el("div", { cls: "edit" }, el("div", { cls: "label", text: "edit" }), diffView(a.diff, "edit-diff")));
      if (a.tool !== "submit") {
        box.appendChild(el("div", { cls: "label", text: "observation" }));
        var isDiff = /^diff --git /.test(a.observation || "");
        box.appendChild(isDiff ? diffView(a.observation, "obs-diff") : folded(a.observation, "obs"));
      }
      body.appendChild(box);
    });
    return el("div", { cls: "step", "data-index": String(s.index) }, head, body);
  }

  function runColumn(r, compact) {
    var col = el("div", { cls: "run-col" }, summaryCard(r, compact), gradingCard(r));
    if (!compact) {
      col.appendChild(el("details", { cls: "card issue" }, el("summary", { text: "The task as given to the agent" }),
        el("pre", { text: r.issue || "(none)" })));
    }
    var steps = el("div", { cls: "steps" });
    r.trace.forEach(function (s) { steps.appendChild(stepCard(s)); });
    col.appendChild(steps);
    var patch = el("div", { cls: "card patch" }, el("h3", { text: "Final patch" }));
    patch.appendChild(r.patch ? diffView(r.patch, "final-patch") : el("p", { cls: "thought none", text: "(empty patch)" }));
    col.appendChild(patch);
    return col;
  }

  function comparePicker(r, other) {
    var peers = RUNS.filter(function (x) { return x.task === r.task && x.id !== r.id; });
    if (!peers.length) return null;
    var pick = el("select", { cls: "compare-pick", id: "compare-pick" });
    pick.appendChild(el("option", { value: "", text: "Compare with another run of this task…" }));
    peers.forEach(function (p) {
      pick.appendChild(el("option", { value: p.id, text: p.source + " · run " + p.run + " · " + p.verdict }));
    });
    if (other) pick.value = other.id;
    pick.addEventListener("change", function () {
      location.hash = pick.value ? "#compare/" + r.id + "/" + pick.value : "#run/" + r.id;
    });
    return pick;
  }

  function runView(app, r) {
    app.appendChild(el("div", { cls: "crumbs" }, el("a", { href: "#", text: "← All runs" }), comparePicker(r)));
    app.appendChild(runColumn(r, false));
  }

  function compareView(app, a, b) {
    app.appendChild(el("div", { cls: "crumbs" }, el("a", { href: "#", text: "← All runs" }),
      el("a", { href: "#run/" + a.id, text: "only the left run" }), comparePicker(a, b)));
    var grid = el("div", { cls: "compare", id: "compare" });
    [a, b].forEach(function (r) { grid.appendChild(el("div", { cls: "compare-col" }, runColumn(r, true))); });
    app.appendChild(grid);
  }

  // -- routing ----------------------------------------------------------------------------
  function render() {
    var app = document.getElementById("app");
    app.textContent = "";
    var parts = location.hash.replace(/^#/, "").split("/");
    if (parts[0] === "run" && BY_ID[parts[1]]) {
      document.body.setAttribute("data-view", "run");
      runView(app, BY_ID[parts[1]]);
    } else if (parts[0] === "compare" && BY_ID[parts[1]] && BY_ID[parts[2]]) {
      document.body.setAttribute("data-view", "compare");
      compareView(app, BY_ID[parts[1]], BY_ID[parts[2]]);
    } else {
      document.body.setAttribute("data-view", "table");
      tableView(app);
    }
  }

  header();
  window.addEventListener("hashchange", function () { render(); window.scrollTo(0, 0); });
  render();
})();
