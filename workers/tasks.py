"""Celery tasks: one-line wrappers around plain functions that take ids, never instances."""

from __future__ import annotations

from celery import shared_task

from workers import heartbeat


@shared_task(ignore_result=True)
def heartbeat_task() -> None:
    heartbeat.beat()
