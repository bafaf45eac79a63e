"""Run comparison (`/compare/?a=&b=`): two runs' decision paths side by side, by iteration.

For each iteration of either run, the lanes of a decision: the classifier's ranked list, what
was served and chosen, what the model then called, the model selected, the verdicts and the
turns; a lane whose text differs between the runs is marked. Reads the two runs' records of
those kinds only (index record_run_ts), at most COMPARE_RECORDS each, and folds them here
(`lanes`, `align`: pure functions over dashboard.queries.run_records.load_records dicts).

The runs list selects two runs with checkboxes named `run` and a GET form, so it works without
JavaScript; `?run=x&run=y` means `?a=x&b=y`.
"""

from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import mark_safe

from dashboard.queries.run_list import run_row
from dashboard.queries.run_records import load_records
from dashboard.web.access import get_run_for_user, role_required
from records.contract.kinds import KINDS
from records.models import Record, Run

COMPARE_RECORDS = 2000
# Every lane a kind declares, in the order a decision makes them, and the kinds that fill one.
_DECLARED = {
    lane for spec in KINDS.values() if spec.rendering.lanes for lane, _ in
    spec.rendering.lanes({}, {})
}  # fmt: skip
LANES = tuple(lane.name for lane in sorted(_DECLARED, key=lambda lane: lane.place))
LANE_LABELS = {lane.name: lane.label for lane in _DECLARED}
LANE_KINDS = tuple(name for name, spec in KINDS.items() if spec.rendering.lanes)


def record_lanes(kind: str, data: dict, derived: dict) -> list[tuple[str, str]]:
    """The (lane, text) pairs one record adds to its iteration, as its kind's rendering says."""
    spec = KINDS.get(kind)
    if spec is None or spec.rendering.lanes is None:
        return []
    d = data if isinstance(data, dict) else {}
    der = derived if isinstance(derived, dict) else {}
    return [(lane.name, text) for lane, text in spec.rendering.lanes(d, der)]


def lanes(records: list[dict]) -> dict[int | None, dict[str, list[str]]]:
    """Per iteration, each lane's texts in ts order. A record without an iteration (verdicts,
    turns) joins the iteration under way at its ts; None is before the first."""
    out: dict[int | None, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    current: int | None = None
    for r in records:
        if r["iteration"] is not None:
            current = r["iteration"]
        for lane, text in record_lanes(r["kind"], r["data"], r["derived"]):
            out[current][lane].append(text)
    return out


@dataclass(frozen=True)
class Lane:
    name: str
    label: str
    a: list[str]
    b: list[str]

    @property
    def differs(self) -> bool:
        return self.a != self.b


@dataclass(frozen=True)
class Step:
    iteration: int | None
    lanes: list[Lane]

    @property
    def label(self) -> str:
        return "before the first iteration" if self.iteration is None else f"{self.iteration}"

    @property
    def differs(self) -> bool:
        return any(lane.differs for lane in self.lanes)

    @property
    def only(self) -> str:
        """Which run alone has this iteration ("a" or "b"), or ""."""
        has_a = any(lane.a for lane in self.lanes)
        has_b = any(lane.b for lane in self.lanes)
        return "" if has_a and has_b else ("a" if has_a else "b")

    @property
    def rows_html(self) -> str:
        """The step's lanes as table rows, every record text escaped (html.escape, the five
        characters Django's escape handles).

        Built here with plain string escaping rather than template loops or format_html: two
        500-record runs are thousands of cells, and Django's lazy-aware escape alone cost ~40 ms
        of a comparison."""
        rows = []
        for i, lane in enumerate(self.lanes):
            head = ""
            if i == 0:
                only = f'<br><span class="muted">only in {self.only.upper()}</span>'
                head = (
                    f'<th rowspan="{len(self.lanes)}" scope="rowgroup">{_e(self.label)}'
                    f"{only if self.only else ''}</th>"
                )
            rows.append(
                f'<tr class="lane{" diff" if lane.differs else ""}" data-lane="{_e(lane.name)}">'
                f'{head}<td class="lane-name">{_e(lane.label)}{_DIFFERS if lane.differs else ""}'
                f'</td><td class="side-a">{_texts(lane.a)}</td>'
                f'<td class="side-b">{_texts(lane.b)}</td></tr>'
            )
        return mark_safe("".join(rows))


_DIFFERS = ' <span class="diff-mark" title="differs">≠</span>'
_NONE = '<span class="muted">—</span>'


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _texts(texts: list[str]) -> str:
    return "".join(f"<div>{_e(t)}</div>" for t in texts) if texts else _NONE


def align(a: list[dict], b: list[dict]) -> list[Step]:
    """The two runs' iterations side by side, in iteration order."""
    la, lb = lanes(a), lanes(b)
    numbers = sorted(set(la) | set(lb), key=lambda n: (n is not None, n if n is not None else 0))
    steps = []
    for n in numbers:
        ia, ib = la.get(n, {}), lb.get(n, {})
        shown = [
            Lane(name, LANE_LABELS[name], list(ia.get(name, ())), list(ib.get(name, ())))
            for name in LANES
            if ia.get(name) or ib.get(name)
        ]
        steps.append(Step(n, shown))
    return steps


def _records(run: Run) -> list[dict]:
    return load_records(
        Record.objects.filter(
            project_id=run.project_id, run_id=run.run_id, kind__in=LANE_KINDS
        ).order_by("ts", "id")[:COMPARE_RECORDS]
    )


def _chosen_ids(request: HttpRequest) -> tuple[str, str, str]:
    """(a, b, error): from ?a=&b=, or from two ?run= checkboxes of the runs list."""
    a, b = request.GET.get("a", "").strip(), request.GET.get("b", "").strip()
    picked = [r for r in request.GET.getlist("run") if r.strip()]
    if picked and not (a or b):
        if len(picked) != 2:
            return "", "", f"Select exactly two runs to compare ({len(picked)} selected)."
        a, b = picked
    if not (a and b):
        return a, b, "Choose two runs: tick two in the runs list, or type their ids."
    return a, b, ""


@role_required
def compare_runs(request: HttpRequest) -> HttpResponse:
    a_id, b_id, error = _chosen_ids(request)
    context: dict[str, Any] = {"a_id": a_id, "b_id": b_id, "error": error}
    if not error:
        run_a = get_run_for_user(request, a_id)
        run_b = get_run_for_user(request, b_id)
        records_a, records_b = _records(run_a), _records(run_b)
        steps = align(records_a, records_b)
        context.update(
            project=run_a.project,
            a=run_row(run_a),
            b=run_row(run_b),
            steps=steps,
            differing=sum(1 for s in steps if s.differs),
            capped=max(len(records_a), len(records_b)) >= COMPARE_RECORDS,
            compare_records=COMPARE_RECORDS,
        )
    return render(request, "dashboard/compare.html", context, status=400 if error and
                  (request.GET.getlist("run") or request.GET.get("a") or request.GET.get("b"))
                  else 200)  # fmt: skip
