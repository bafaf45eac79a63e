// The runs list's "compare two runs": at most two ticks (a third unticks the oldest), and the
// button says how many are ticked. Delegated from the document, so rows htmx swaps in work too.
// Without this script the form still submits and the compare page names a wrong selection.
// Loaded async: it must not hold back the page's deferred scripts (charts.js submits the
// project switcher), so it may run before or after the document is parsed.
(function () {
  "use strict";
  var order = [];

  function boxes() {
    return Array.prototype.slice.call(
      document.querySelectorAll('input[type="checkbox"][name="run"][form="compare-form"]')
    );
  }

  function refresh() {
    var ticked = boxes().filter(function (box) { return box.checked; });
    order = order.filter(function (box) { return ticked.indexOf(box) !== -1; });
    ticked.forEach(function (box) { if (order.indexOf(box) === -1) order.push(box); });
    var button = document.querySelector("button[data-compare]");
    if (button) {
      button.disabled = ticked.length !== 2;
      button.textContent = ticked.length === 2
        ? "Compare the two selected runs"
        : "Compare two runs (" + ticked.length + " of 2 selected)";
    }
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.matches || !box.matches('input[type="checkbox"][name="run"]')) return;
    if (box.checked) {
      order = order.filter(function (other) { return other !== box; });
      order.push(box);
      while (order.filter(function (b) { return b.checked; }).length > 2) {
        var oldest = order.shift();
        oldest.checked = false;
      }
    }
    refresh();
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", refresh);
  } else {
    refresh();
  }
  document.addEventListener("htmx:afterSwap", refresh);
})();
