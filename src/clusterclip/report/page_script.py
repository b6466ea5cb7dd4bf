"""The report page's script: sortable, filterable tables cut to their first rows, the plan menu of the clusters
table, and a table marked ``fit`` stacked (keywords and examples on a second line of each row, a grid given by
the ``--cols`` and ``--mid`` of its box) whenever its columns would scroll sideways in its box."""

JS = """
(function () {
  "use strict";
  function keyOf(td, numeric) {
    var v = td.getAttribute("data-v");
    if (v === null) { v = td.textContent.trim(); }
    return numeric ? parseFloat(v) : v.toLowerCase();
  }
  function sortTable(table, th, col) {
    var numeric = th.getAttribute("data-type") === "num";
    var current = th.getAttribute("aria-sort");
    var first = th.getAttribute("data-first") || (numeric ? "descending" : "ascending");
    var dir = current === "descending" ? "ascending" : (current === "ascending" ? "descending" : first);
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = keyOf(a.cells[col], numeric), y = keyOf(b.cells[col], numeric);
      if (numeric) {
        if (isNaN(x) || isNaN(y)) { return isNaN(x) - isNaN(y); }
      }
      return x < y ? -sign : (x > y ? sign : 0);
    });
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) { frag.appendChild(r); });
    body.appendChild(frag);
    refresh(table);
  }
  function fit(table) {
    var box = table.parentElement;
    table.classList.remove("stacked");
    table.classList.toggle("stacked", box.scrollWidth > box.clientWidth + 1);
  }
  function fitAll() { Array.prototype.forEach.call(document.querySelectorAll("table.fit"), fit); }
  function refresh(table) {
    var input = document.querySelector('input[data-filter="' + table.id + '"]');
    var q = input ? input.value.trim().toLowerCase() : "";
    var limit = parseInt(table.getAttribute("data-limit") || "0", 10);
    var clip = limit > 0 && q === "" && table.getAttribute("data-all") !== "1";
    var shown = 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      var match = q === "" || r.textContent.toLowerCase().indexOf(q) >= 0;
      if (match) { shown += 1; }
      r.hidden = !match || (clip && shown > limit);
    });
    if (table.classList.contains("fit")) { fit(table); }
  }
  function showAll(table, all) {
    table.setAttribute("data-all", all ? "1" : "0");
    var button = document.querySelector('[data-more="' + table.id + '"] button');
    if (button) { button.textContent = all ? "show the first " + table.getAttribute("data-limit") : "show all"; }
    refresh(table);
  }
  function reveal() {
    var id = decodeURIComponent(location.hash.slice(1));
    var row = id ? document.getElementById(id) : null;
    var table = row && row.hidden ? row.closest("table[data-limit]") : null;
    if (table) { showAll(table, true); row.scrollIntoView(); }
  }
  function wire() {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
        th.tabIndex = 0;
        th.addEventListener("click", function () { sortTable(table, th, col); });
        th.addEventListener("keydown", function (e) {
          if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortTable(table, th, col); }
        });
      });
    });
    Array.prototype.forEach.call(document.querySelectorAll("input[data-filter]"), function (input) {
      var table = document.getElementById(input.getAttribute("data-filter"));
      if (table) { input.addEventListener("input", function () { refresh(table); }); }
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-more]"), function (note) {
      var table = document.getElementById(note.getAttribute("data-more"));
      if (!table) { return; }
      note.hidden = false;
      note.querySelector("button").addEventListener("click", function () {
        showAll(table, table.getAttribute("data-all") !== "1");
      });
      refresh(table);
    });
    Array.prototype.forEach.call(document.querySelectorAll("select[data-pick]"), function (select) {
      var table = document.getElementById(select.getAttribute("data-pick"));
      if (!table) { return; }
      select.addEventListener("change", function () {
        Array.prototype.forEach.call(table.querySelectorAll(".pick"), function (c) {
          c.classList.toggle("pick-off", !c.classList.contains("pick-" + select.value));
        });
        fitAll();
      });
    });
    fitAll();
    window.addEventListener("resize", fitAll);
    window.addEventListener("hashchange", reveal);
    reveal();
    document.body.setAttribute("data-ready", "1");
  }
  function checkImages() {
    var broken = 0;
    Array.prototype.forEach.call(document.images, function (img) {
      if (img.complete && img.naturalWidth === 0) {
        broken += 1;
        var msg = document.createElement("p");
        msg.className = "note";
        msg.textContent = "Chart not found: " + img.getAttribute("src") +
          " (keep the PNG files in the same folder as report.html).";
        img.replaceWith(msg);
      }
    });
    document.body.setAttribute("data-broken-images", String(broken));
  }
  window.addEventListener("load", checkImages);
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", wire); } else { wire(); }
})();
"""
