"""Celery tasks: one-line wrappers around plain functions that take ids, never instances."""

from __future__ import annotations

from celery import shared_task

from records import rollup
from workers import heartbeat


@shared_task(ignore_result=True)
def heartbeat_task() -> None:
    heartbeat.beat()


@shared_task(ignore_result=True)
def catch_up_task() -> None:
    rollup.catch_up()
