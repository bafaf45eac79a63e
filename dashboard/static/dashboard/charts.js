// Draws the pages' Plotly figures and wires the few behaviours that need script.
//
// A figure travels as JSON in <script type="application/json" id="X-figure"> (Django's
// json_script) beside an empty <div id="X">: this draws every such pair on load and after each
// htmx swap. No page carries inline script (the Content-Security-Policy forbids it), so this is
// the one place figures are drawn.
(function () {
  "use strict";
  var SUFFIX = "-figure";
  var CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  function draw(root) {
    if (!window.Plotly || !root || !root.querySelectorAll) return;
    var sources = root.querySelectorAll('script[type="application/json"][id$="' + SUFFIX + '"]');
    Array.prototype.forEach.call(sources, function (source) {
      var target = document.getElementById(source.id.slice(0, -SUFFIX.length));
      if (!target) return;
      var figure = JSON.parse(source.textContent);
      window.Plotly.react(target, figure.data || [], figure.layout || {}, CONFIG);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    draw(document);
  });
  // htmx fires htmx:load on every element it swaps in (filters, pagination, live runs).
  document.addEventListener("htmx:load", function (event) {
    if (event.target !== document.body) draw(event.target);
  });

  // The project switcher and the filter selects submit themselves when changed.
  document.addEventListener("change", function (event) {
    var field = event.target;
    if (!field.matches || !field.matches("[data-autosubmit]") || !field.form) return;
    if (field.form.requestSubmit) field.form.requestSubmit();
    else field.form.submit();
  });
})();
