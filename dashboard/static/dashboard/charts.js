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

  function submit(form) {
    if (form.requestSubmit) form.requestSubmit();
    else form.submit();
  }

  // The time-range control (templates/dashboard/partials/time_range.html): a preset applies at
  // once; "custom" shows From and To, which apply with the form's button. Hidden fields are
  // disabled so that a preset's URL carries no stale From/To.
  function presetChanged(select) {
    var control = select.closest("[data-time-range]");
    var custom = control && control.querySelector(".custom-range");
    var isCustom = select.value === "custom";
    if (custom) {
      custom.hidden = !isCustom;
      Array.prototype.forEach.call(custom.querySelectorAll("input"), function (input) {
        input.disabled = !isCustom;
      });
    }
    if (isCustom) {
      var first = custom && custom.querySelector("input");
      if (first) first.focus();
    } else if (select.form) {
      submit(select.form);
    }
  }

  // The rule form: the thresholds' unit follows the metric (% for a rate, ms for a latency).
  function metricChanged(select) {
    var source = document.getElementById("metric-units");
    if (!source || !select.form) return;
    var unit = JSON.parse(source.textContent)[select.value] || "";
    Array.prototype.forEach.call(select.form.querySelectorAll("[data-unit]"), function (span) {
      span.textContent = unit;
    });
  }

  // The project switcher and the filter selects submit themselves when changed.
  document.addEventListener("change", function (event) {
    var field = event.target;
    if (!field.matches) return;
    if (field.matches("[data-range-preset]")) return presetChanged(field);
    if (field.matches(".rule-form select[name=metric]")) return metricChanged(field);
    if (!field.matches("[data-autosubmit]") || !field.form) return;
    submit(field.form);
  });

  // Live pages ([data-live], polled by htmx): no poll while the tab is hidden, and one at once
  // when it shows again.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (document.hidden && elt && elt.hasAttribute && elt.hasAttribute("data-live")) {
      event.preventDefault();
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.hidden || !window.htmx) return;
    Array.prototype.forEach.call(document.querySelectorAll("[data-live]"), function (elt) {
      window.htmx.trigger(elt, "refresh");
    });
  });
})();
