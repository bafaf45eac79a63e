"""The one write of the audit log (records.models.AuditEntry, docs/access.md "The audit log").

Every change to a project's API keys, members and their roles, alert rules (silences are a
rule's), channels, price overrides, retention and redaction is recorded here, by whatever makes
it: the pages, the API, Django's admin, the management commands. The caller records inside the
transaction of the change, so an entry commits or rolls back with it; `record` refuses to run
outside one.

- `actor_of(request)` names who acts (an operator, or an API key on the API) and from where;
  `command_actor(name)` a management command.
- `snapshot(obj)` is the audited fields of a key, membership, rule, channel, price override,
  project or redaction rule or policy, as JSON. Never a secret: a key is its prefix and name
  (never its hash), a channel has no signing secret and its webhook URL only to the host.
- `record_change(action, obj, actor=..., before=snapshot_taken_before)` after a create (before
  None) or an update; `record_deletion(obj, actor=...)` just before a delete;
  `record_member(project, user, before, actor=...)` after a membership changed, whichever way;
  `record(...)` for anything else. Only the fields that changed are kept in before and after,
  and a change that changed nothing writes no entry.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from django.db import DEFAULT_DB_ALIAS, models, transaction

from records.models import ApiKey, AuditEntry, Membership, Project


@dataclass(frozen=True)
class Actor:
    """Who made a change, and from which address (None for a command)."""

    kind: str  # AuditEntry.ActorKind
    name: str
    user_id: int | None = None
    key_id: int | None = None
    address: str | None = None


def client_address(request) -> str | None:
    """The address a request came from: the peer's (REMOTE_ADDR). No setting says that a proxy
    in front may name the client (DECISIONBOARD_HTTPS trusts the proxy's X-Forwarded-Proto
    alone), and X-Forwarded-For is written by whoever sends the request, so it is not read."""
    raw = (request.META.get("REMOTE_ADDR") or "").strip()
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        return None  # a Unix socket's peer has no address


def key_label(key: ApiKey) -> str:
    """A key as the log names it: its prefix and name, never more of it."""
    return f"{key.prefix}… {key.name}".strip()


def actor_of(request) -> Actor:
    """Who makes a request's change: its API key (DRF's `request.auth`) or its operator."""
    address = client_address(request)
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiKey):
        return Actor(AuditEntry.ActorKind.KEY, key_label(auth), key_id=auth.pk, address=address)
    user = request.user
    return Actor(AuditEntry.ActorKind.USER, user.get_username(), user_id=user.pk, address=address)


def command_actor(name: str) -> Actor:
    """A management command run on the server (`manage.py create_api_key`)."""
    return Actor(AuditEntry.ActorKind.SYSTEM, name)


# --- what is recorded of each object ---------------------------------------------------------


@dataclass(frozen=True)
class Audited:
    object_type: str
    fields: tuple[str, ...]


# By model label, so that this module needs no import of the apps above records (alerts).
AUDITED: dict[str, Audited] = {
    "records.apikey": Audited("api_key", ("name", "scope", "prefix", "rate_limit", "revoked_at")),
    "records.membership": Audited("member", ("user", "role")),
    "records.project": Audited("project", ("retention_days",)),
    "records.priceoverride": Audited(
        "price_override",
        (
            "model",
            "provider",
            "effective_from",
            "currency",
            "input_per_mtok",
            "output_per_mtok",
            "cache_read_per_mtok",
            "cache_write_per_mtok",
        ),
    ),  # fmt: skip
    "records.redactionrule": Audited("redaction_rule", ("kind", "name", "value")),
    "records.redactionpolicy": Audited(
        "redaction_policy", ("secrets", "cards", "emails", "phones", "ibans")
    ),
    "alerts.rule": Audited(
        "alert_rule",
        (
            "name",
            "metric",
            "agent",
            "model",
            "classifier",
            "kind",
            "match",
            "group_by",
            "comparator",
            "threshold",
            "warning_threshold",
            "window_minutes",
            "min_records",
            "for_minutes",
            "no_data",
            "renotify_minutes",
            "channels",
            "paused",
            "silenced_until",
        ),
    ),  # fmt: skip
    "alerts.channel": Audited("channel", ("name", "kind", "url", "addresses", "disabled")),
}
OBJECT_TYPES = tuple(sorted({a.object_type for a in AUDITED.values()}))

# The words of an object type for create, update and delete, where they are not those.
ACTION_WORDS: dict[str, dict[str, str]] = {
    "api_key": {"create": "mint"},
    "member": {"create": "add", "update": "change_role", "delete": "remove"},
}

# An update that changed only this field is named for what it did.
_NAMED_UPDATES: dict[tuple[str, str], tuple[str, str]] = {
    ("alert_rule", "paused"): ("resume", "pause"),  # (to false or empty, to true or set)
    ("alert_rule", "silenced_until"): ("unsilence", "silence"),
    ("api_key", "revoked_at"): ("update", "revoke"),
    ("channel", "disabled"): ("enable", "disable"),
}


def audited_of(obj: models.Model) -> Audited:
    try:
        return AUDITED[obj._meta.label_lower]
    except KeyError:
        raise ValueError(f"{obj._meta.label} is not audited") from None


def webhook_host(url: str) -> str:
    """A webhook URL without its path and query, which often carry the receiver's token."""
    if not url:
        return ""
    parts = urlsplit(url)
    rest = "/…" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{parts.hostname or ''}{rest}"


def as_json(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    return value


def snapshot(obj: models.Model) -> dict[str, Any]:
    """The audited fields of `obj` as JSON values (it must be saved for a many-to-many)."""
    out: dict[str, Any] = {}
    for name in audited_of(obj).fields:
        field = obj._meta.get_field(name)
        if field.many_to_many:
            value = sorted(getattr(obj, name).values_list("pk", flat=True)) if obj.pk else []
        elif name == "user":
            value = obj.user.get_username()
        elif name == "url":
            value = webhook_host(obj.url)
        else:
            value = getattr(obj, name)
        out[name] = as_json(value)
    return out


def name_of(obj: models.Model) -> str:
    if isinstance(obj, ApiKey):
        return key_label(obj)
    if isinstance(obj, Membership):
        return obj.user.get_username()
    if isinstance(obj, Project):
        return obj.name
    return str(getattr(obj, "name", "") or obj)[:200]


def project_of(obj: models.Model) -> Project:
    return obj if isinstance(obj, Project) else obj.project


def id_of(obj: models.Model) -> str:
    # A membership is its user: removed and given again, it is the same member.
    return str(obj.user_id if isinstance(obj, Membership) else obj.pk)


# --- the write -------------------------------------------------------------------------------


def changed_fields(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> tuple[dict | None, dict | None]:
    """Before and after cut to the fields that differ (both kept whole when one is None)."""
    if before is None or after is None:
        return (None if before is None else dict(before)), (None if after is None else dict(after))
    names = [n for n in {**before, **after} if before.get(n) != after.get(n)]
    return {n: before.get(n) for n in names}, {n: after.get(n) for n in names}


def record(
    project: Project,
    action: str,
    object_type: str,
    *,
    actor: Actor,
    object_id: object = "",
    object_name: str = "",
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> AuditEntry | None:
    """Write one audit entry, in the caller's transaction; None when before and after are the
    same (nothing changed). Raises RuntimeError outside a transaction: an entry must never
    outlive a change that rolled back, nor a change commit without its entry."""
    if not transaction.get_connection(using).in_atomic_block:
        raise RuntimeError("An audit entry is written inside the change's transaction.atomic().")
    before, after = changed_fields(as_json(before), as_json(after))
    if before == {} and after == {}:
        return None
    return AuditEntry.objects.using(using).create(
        project=project,
        actor_kind=actor.kind,
        actor_name=actor.name[:200],
        actor_user_id=actor.user_id,
        actor_key_id=actor.key_id,
        action=action,
        object_type=object_type,
        object_id=str(object_id)[:64],
        object_name=object_name[:200],
        before=before,
        after=after,
        address=actor.address,
    )


def record_change(
    action: str, obj: models.Model, *, actor: Actor, before: Mapping[str, Any] | None
) -> AuditEntry | None:
    """`obj` created (`before` None) or changed from `before` (its snapshot() taken before the
    change). An "update" that changed only a rule's pause or silence, a key's revocation or a
    channel's being disabled is named for it (pause, resume, silence, unsilence, revoke, ...)."""
    audited = audited_of(obj)
    after = snapshot(obj)
    action = ACTION_WORDS.get(audited.object_type, {}).get(action, action)
    if action == "update" and before is not None:
        _, new = changed_fields(before, after)
        if new is not None and len(new) == 1:
            name, value = next(iter(new.items()))
            names = _NAMED_UPDATES.get((audited.object_type, name))
            if names is not None:
                action = names[1] if value else names[0]
    return record(
        project_of(obj),
        action,
        audited.object_type,
        actor=actor,
        object_id=id_of(obj),
        object_name=name_of(obj),
        before=before,
        after=after,
    )


def record_deletion(obj: models.Model, *, actor: Actor, action: str = "delete") -> AuditEntry:
    """`obj` about to be deleted, in the delete's transaction (call it before the delete)."""
    object_type = audited_of(obj).object_type
    entry = record(
        project_of(obj),
        ACTION_WORDS.get(object_type, {}).get(action, action),
        object_type,
        actor=actor,
        object_id=id_of(obj),
        object_name=name_of(obj),
        before=snapshot(obj),
    )
    assert entry is not None  # a deletion always changes something
    return entry


def member_snapshot(project: Project, user) -> dict[str, Any] | None:
    """The user's membership of `project` as recorded (None: not a member)."""
    held = project.memberships.filter(user=user).select_related("user").first()
    return snapshot(held) if held is not None else None


def record_member(
    project: Project, user, before: Mapping[str, Any] | None, *, actor: Actor
) -> AuditEntry | None:
    """A membership changed from `before` (member_snapshot() taken before the change): an
    "add", a "change_role" or a "remove", told apart by what is there now."""
    after = member_snapshot(project, user)
    if before is None and after is None:
        return None
    action = "add" if before is None else "remove" if after is None else "change_role"
    return record(
        project,
        action,
        "member",
        actor=actor,
        object_id=user.pk,
        object_name=user.get_username(),
        before=before,
        after=after,
    )
