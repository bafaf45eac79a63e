"""Plotly figures for the operator pages, built in Python from plain page data.

Each chart function takes what dashboard.queries.page_rollups, dashboard.queries.timeline or
records.metrics returns and gives a figure as a JSON-ready dict ({"data": [...], "layout": {...}})
that a page embeds with `json_script` and the locally served plotly.js draws
(static/dashboard/charts.js). Traces are plotly.graph_objects, so a wrong property fails here, in
Python, not silently in the browser.

- plotting: the building blocks (colours, validated traces and layouts, the time-axis helpers,
  record text made safe to show); every other module builds on it;
- time_charts: charts over the page's period (records by kind, latencies, rates, counts, a
  streak's sparkline, a run's latency lanes);
- category_charts: charts over models, tools or stages (bars, stacked bars, the swap heatmap, the
  model paths, a pick's ranking, the fallback funnel);
- tool_charts: the tools, selection-accuracy and narrowing what-if pages;
- alert_charts: an alert rule's preview.
"""
