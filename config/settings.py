"""Decisionboard settings: one file, everything from the environment.

Embedded defaults (SQLite in WAL mode, a filesystem Celery broker under var/) need nothing set;
DATABASE_URL switches to PostgreSQL and REDIS_URL to Redis for the broker and the cache.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.beat_schedule import beat_schedule
from config.env import env_bool, env_int, env_rate, env_size, env_str
from config.oidc import oidc_from_environment
from config.queues import ROUTES, TASK_QUEUES, Queue

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("DECISIONBOARD_VAR_DIR", str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)
# This machine's name among several that share the database and Redis (DECISIONBOARD["HOSTNAME"]).
NAMED_HOST = env_str("DECISIONBOARD_HOSTNAME")

DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    # Embedded default: one random key per installation, kept beside the SQLite database so
    # that sessions survive restarts. Production sets SECRET_KEY.
    # The processes of a first start make it at once: each writes its own file whole, and the
    # first one linked into place is everybody's key (a reader never sees it half written).
    path = VAR_DIR / "secret_key"
    if not path.exists():
        mine = VAR_DIR / f".secret_key.{os.getpid()}"
        mine.write_text(secrets.token_urlsafe(50))
        mine.chmod(0o600)
        try:
            os.link(mine, path)
        except FileExistsError:
            pass
        finally:
            mine.unlink()
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = [
    h.strip() for h in env_str("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
]
CSRF_TRUSTED_ORIGINS = [o for o in (env_str("CSRF_TRUSTED_ORIGINS", "") or "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "records",
    "alerts",
    "api",
    "workers",
    "dashboard",
    "ops",
    "sso",
]

MIDDLEWARE = [
    # First, so that request latency (/metrics) covers every other middleware too.
    "ops.middleware.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # A NUL in the path or the query string is a 400 before any view sees it.
    "config.middleware.RejectHostileURLMiddleware",
    "dashboard.http.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # With DATABASE_REPLICA_URL: the reads of a request that only reads go to a replica.
    "config.replicas.ReplicaReadMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so that it is the first to see a view's exception: 503 when the database is down.
    "config.outage.DatabaseOutageMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


# SQLite, embedded or through DATABASE_URL: WAL lets the web and the workers read while one
# writes; IMMEDIATE takes the write lock at BEGIN so that two writers queue instead of
# dead-locking (a deferred transaction that upgrades to a write fails at once with "database is
# locked", whatever the timeout); the timeout is how long a writer queues before giving up.
SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
}
# PostgreSQL: give up on a connection attempt after this, so that an unreachable server answers
# 503 (config.outage) instead of holding a web worker for the kernel's TCP timeout.
POSTGRES_CONNECT_TIMEOUT = 5
# And no JIT compilation. PostgreSQL compiles a query whose estimated cost passes jit_above_cost
# (100,000), and on tables that were never analysed every estimate is a guess: the streak recompute
# (records.catchup.streak_fold._SEGMENTS_SQL, its probes an Append over every day partition) spent
# much of its time compiling, and a shuffled backlog caught up faster without JIT than with it
# (docs/decisions/0003-jit-off.md; bench/catchup.py and bench/streaks.py measure both). Set through
# the connection's startup options, so that it holds for every connection, the tests' included; URL
# `options` that name any jit setting (jit, jit_above_cost, ...) are left as they are: the
# operator's choice wins.
POSTGRES_STARTUP_OPTIONS = "-c jit=off"

# DATABASE_POOLER=transaction: DATABASE_URL points at a pooler in transaction mode (PgBouncer's
# pool_mode = transaction), so consecutive transactions of one connection may run on different
# server sessions. The product keeps no session state (its advisory locks are transactions',
# records.store.locks; its settings SET LOCAL; its server-side cursors live inside a
# transaction), so the only difference is here: PgBouncer refuses the `options` startup
# parameter, so jit=off comes from the role instead (`manage.py migrate` runs
# ALTER ROLE ... SET jit = off; `manage.py doctor` checks it).
POOLERS = ("", "session", "transaction")
DATABASE_POOLER = (env_str("DATABASE_POOLER", "") or "").strip().lower()
if DATABASE_POOLER not in POOLERS:
    raise ImproperlyConfigured(
        f"DATABASE_POOLER={DATABASE_POOLER!r} is not one of: transaction, session (or unset)"
    )


def _sqlite_test_name(name: Path) -> str:
    # A file (not :memory:) so that the worker and web subprocesses of the integration tests
    # share it; one per test process so that runs don't collide.
    return str(name.with_name(f"test-{name.stem}-{os.getpid()}.sqlite3"))


def _postgres(url: str, name: str) -> dict:
    try:
        # Persistent connections, each checked before its first use in a request (or task), so
        # that a connection broken by a database restart is replaced instead of reused.
        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    except Exception as exc:  # dj-database-url raises several types for a bad URL
        raise ImproperlyConfigured(f"{name} is not a database URL: {exc}") from None
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(f"{name} names {config['ENGINE']}, not PostgreSQL")
    options = config.setdefault("OPTIONS", {})
    options.setdefault("connect_timeout", POSTGRES_CONNECT_TIMEOUT)
    if "jit" not in options.get("options", "") and DATABASE_POOLER != "transaction":
        options["options"] = f"{options.get('options', '')} {POSTGRES_STARTUP_OPTIONS}".strip()
    if NAMED_HOST:  # pg_stat_activity names the host of each session
        options.setdefault("application_name", f"decisionboard@{NAMED_HOST}")
    return config


def _replicas(primary: dict | None) -> dict:
    """DATABASE_REPLICA_URL (comma-separated) as the aliases replica1, replica2, ... (see
    config.replicas) of the `primary` (None: SQLite, which has none); the tests read them as
    the primary (MIRROR), never making databases."""
    urls = [u.strip() for u in (env_str("DATABASE_REPLICA_URL", "") or "").split(",") if u.strip()]
    if urls and primary is None:
        raise ImproperlyConfigured("DATABASE_REPLICA_URL needs DATABASE_URL on PostgreSQL")
    replicas = {}
    for number, url in enumerate(urls, 1):
        config = _postgres(url, "DATABASE_REPLICA_URL")
        config["TEST"] = {"MIRROR": "default"}
        replicas[f"replica{number}"] = config
    return replicas


def _databases() -> dict:
    url = env_str("DATABASE_URL")
    if not url:
        name = VAR_DIR / "decisionboard.sqlite3"
        return {
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": name,
                "OPTIONS": dict(SQLITE_OPTIONS),
                "TEST": {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")},
            },
            **_replicas(None),
        }
    try:
        # Persistent connections, each checked before its first use in a request (or task), so
        # that a connection broken by a database restart is replaced instead of reused.
        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    except Exception as exc:  # dj-database-url raises several types for a bad URL
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # The same options as the embedded default; the URL's own query options win.
        config["OPTIONS"] = {**SQLITE_OPTIONS, **config.get("OPTIONS", {})}
        config["TEST"] = {"NAME": _sqlite_test_name(Path(config["NAME"]))}
        return {"default": config, **_replicas(None)}
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            f"DATABASE_URL names {config['ENGINE']}; Decisionboard runs on PostgreSQL or SQLite"
        )
    config = _postgres(url, "DATABASE_URL")
    # One test database per test process, so that concurrent runs on one server don't collide.
    config["TEST"] = {"NAME": f"test_{config['NAME']}_{os.getpid()}"}
    return {"default": config, **_replicas(config)}


DATABASES = _databases()
if len(DATABASES) > 1:
    DATABASE_ROUTERS = ["config.replicas.ReadReplicaRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "decisionboard",
            # Fail fast: the cache only serves rate limits and debouncing, never the ingest answer.
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "dashboard" / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js as the plotly package ships it, served as static/vendor/plotly.min.js.
    "dashboard.http.finders.PackageAssetFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed names (a changed file gets a new URL, so WhiteNoise serves them with a year's
    # max-age) and gzip copies, once `manage.py collectstatic` (bin/start runs it) wrote them.
    "staticfiles": {"BACKEND": "dashboard.http.staticfiles.StaticStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
# Single sign-on with OpenID Connect (config.oidc, the sso app): off unless
# DECISIONBOARD_OIDC_CLIENT_ID is set. Passwords keep Django's own backend.
OIDC = oidc_from_environment()
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "sso.backends.OidcBackend",
]

SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
# DECISIONBOARD_HTTPS=1 for a deployment served over HTTPS (usually TLS ended at a proxy that
# sets X-Forwarded-Proto and strips it from clients): cookies only over HTTPS, HSTS for a year,
# plain-HTTP requests redirected. `manage.py check --deploy` is clean with it.
HTTPS = env_bool("DECISIONBOARD_HTTPS", False)
if HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = 365 * 24 * 3600
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # Bodies decode as ingest's do (api.bodies): bad UTF-8 or deep nesting is a 400, not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "api.bodies.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # The domain's parameter errors (FilterError, MetricError) are 400s naming the parameter.
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Decisionboard API",
    "DESCRIPTION": "Decision records in, metrics, runs and exports out.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # msgspec's JSON Schema for the record kinds is 3.1-shaped.
    "OAS_VERSION": "3.1.0",
    # Every operation documents the errors it can answer (api.openapi.document_errors).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.openapi.document_errors",
    ],
}

# Email for alert notifications: SMTP when EMAIL_HOST is set, otherwise printed to the console.
EMAIL_HOST = env_str("EMAIL_HOST")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "decisionboard@localhost")
# The address pages and notifications link to, e.g. https://decisions.example.com
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000")

# Decisionboard's own options, all under one prefix, defaults here.
DECISIONBOARD = {
    # A request body over this is refused with 413 before it is parsed.
    "INGEST_MAX_BODY": env_size("DECISIONBOARD_INGEST_MAX_BODY", "5MB"),
    # Per-key request rate on ingest (a key's own rate_limit overrides it). The default is far
    # above one busy agent and the benchmarks; with REDIS_URL it is shared by all web processes,
    # otherwise each process counts on its own.
    "INGEST_RATE_LIMIT": env_rate("DECISIONBOARD_INGEST_RATE_LIMIT", "1000/s"),
    # How long a web process trusts an API key it has looked up (api.auth): a revoked key, or
    # one of a deleted project, is refused at most this long afterwards. 0 asks the database on
    # every request.
    "API_KEY_CACHE_SECONDS": env_int("DECISIONBOARD_API_KEY_CACHE_SECONDS", 5, minimum=0),
    "MAX_DATA_BYTES": env_size("DECISIONBOARD_MAX_DATA_BYTES", "256KB"),
    "MAX_FUTURE_SECONDS": env_int("DECISIONBOARD_MAX_FUTURE_SECONDS", 300, minimum=0),
    # The catch-up's lanes (records.catchup.passes): projects split by id into this many, each
    # folded by its own task and watermark, so that as many worker processes fold records in
    # parallel. Default 1: SQLite (the embedded default) runs one writer at a time, and `manage.py
    # serve`'s default worker has two slots that heartbeats and the alert tick share; set it to the
    # worker processes you give the catch-up on PostgreSQL (docs/scaling.md). Changing it on a
    # running installation is safe (records.catchup.passes._switch_lanes).
    "CATCHUP_LANES": env_int("DECISIONBOARD_CATCHUP_LANES", 1, minimum=1),
    # After each ingest commit, enqueue a (debounced) catch-up so rollups follow within seconds.
    "NUDGE_WORKERS": env_bool("DECISIONBOARD_NUDGE_WORKERS", True),
    # Export job files are deleted this long after they finish.
    "EXPORT_TTL_HOURS": env_int("DECISIONBOARD_EXPORT_TTL_HOURS", 24, minimum=1),
    # Webhooks to loopback, private or link-local addresses are refused unless this is on
    # (a receiver on the same network as a self-hosted Decisionboard).
    "ALERTS_ALLOW_PRIVATE_WEBHOOKS": env_bool("DECISIONBOARD_ALERTS_ALLOW_PRIVATE_WEBHOOKS", False),
    # Days of raw records kept (a project's own retention_days overrides it); older ones are
    # expired by the hour: whole daily partitions dropped on PostgreSQL, batched deletes on
    # SQLite (records.store.retention, docs/operations.md). Rollups, runs and streaks are kept for
    # ROLLUP_RETENTION_DAYS, which must be at least as long.
    "RETENTION_DAYS": env_int("DECISIONBOARD_RETENTION_DAYS", 30, minimum=1),
    "ROLLUP_RETENTION_DAYS": env_int("DECISIONBOARD_ROLLUP_RETENTION_DAYS", 400, minimum=1),
    # Days an invitation's link works (records.member_changes); each link works once.
    "INVITATION_DAYS": env_int("DECISIONBOARD_INVITATION_DAYS", 7, minimum=1),
    # /metrics answers 404 unless this is set, and then asks for it as a bearer token (what
    # Prometheus sends with `authorization: {credentials: ...}`).
    "METRICS_TOKEN": env_str("DECISIONBOARD_METRICS_TOKEN", ""),
    # The OTLP/gRPC receiver's port (api/otlp_grpc.py, `manage.py serve_otlp_grpc`): 4317, the
    # port OpenTelemetry SDKs and the Collector send to by default. 0 turns it off, and
    # `manage.py serve` then does not start it.
    "OTLP_GRPC_PORT": env_int("DECISIONBOARD_OTLP_GRPC_PORT", 4317, minimum=0),
    # A replica (DATABASE_REPLICA_URL) further behind the primary than this is not read: the
    # reads go to the primary until it catches up (config.replicas).
    "REPLICA_MAX_LAG_SECONDS": env_int("DECISIONBOARD_REPLICA_MAX_LAG_SECONDS", 30, minimum=0),
    # Model prices come from the snapshot the installed genai-prices ships. With this on, each
    # web and worker process also fetches newer prices from PRICES_UPDATE_URL every hour; off by
    # default, since many installations have no way out to the internet.
    "PRICES_UPDATE": env_bool("DECISIONBOARD_PRICES_UPDATE", False),
    # How long a process that prices records keeps a project's price overrides
    # (records.store.ingest_pricing): a changed override prices new records at most this long later,
    # and the records stored meanwhile are priced again once it has passed
    # (workers.tasks.enqueue_reprice). 0 reads them for every batch.
    "PRICE_OVERRIDE_CACHE_SECONDS": env_int(
        "DECISIONBOARD_PRICE_OVERRIDE_CACHE_SECONDS", 5, minimum=0
    ),
    "PRICES_UPDATE_URL": env_str(
        "DECISIONBOARD_PRICES_UPDATE_URL",
        "https://raw.githubusercontent.com/pydantic/genai-prices/refs/heads/main/prices/new_data/v2/data.json",
    ),
    # The name of this machine in heartbeats, /metrics and `manage.py doctor` (several hosts
    # sharing one database and Redis); the system's host name when unset.
    "HOSTNAME": NAMED_HOST or socket.gethostname(),
}
if DECISIONBOARD["ROLLUP_RETENTION_DAYS"] < DECISIONBOARD["RETENTION_DAYS"]:
    raise ImproperlyConfigured(
        "DECISIONBOARD_ROLLUP_RETENTION_DAYS must be at least DECISIONBOARD_RETENTION_DAYS: "
        "rollups are built from the raw records and outlive them"
    )

# Celery: Redis when REDIS_URL is set, otherwise kombu's filesystem transport under var/ so that
# the embedded product runs a real worker and beat with nothing else installed.
CELERY_BROKER_DIR = VAR_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    # Short socket timeouts: a nudge from ingest must fail fast when Redis is unreachable.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": 3600,
        "socket_connect_timeout": 1,
        "socket_timeout": 5,
    }
else:
    # The filesystem transport ignores the host; naming one keeps kombu from warning that none was
    # supplied on every connection.
    CELERY_BROKER_URL = "filesystem://localhost//"
    # kombu's own, except that a message appears in the queue folder only once written whole
    # (workers/broker.py): the stock one loses messages read half-written.
    CELERY_BROKER_TRANSPORT = "workers.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_DIR / "queue"),
        "data_folder_out": str(CELERY_BROKER_DIR / "queue"),
        "processed_folder": str(CELERY_BROKER_DIR / "processed"),
        # Broadcast exchanges (worker control, pidbox): kombu's default is ./control.
        "control_folder": str(CELERY_BROKER_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
    for _folder in ("queue", "processed", "control"):
        (CELERY_BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = Queue.DEFAULT.value
CELERY_TASK_QUEUES = TASK_QUEUES
CELERY_TASK_ROUTES = ROUTES
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_RESULT_BACKEND = None
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Bounded worker memory: a pool process whose resident size after a task (which always finishes),
# the memory it freed given back, is above this is replaced by a fresh one, so that the workers stay
# bounded over days whatever the heap keeps (workers.memory: the size after the task, not the task's
# peak). The bound sits above what a pool process holds once its passes are large (a catch-up
# behind): lower, the workers replace a process every minute or so for no flatter a worker
# (bench/soak.py prints the workers' memory). The work is bounded: a catch-up pass folds at most
# 200,000 records on PostgreSQL (records.catchup.passes), an export streams 2,000 rows at a time
# (records.formats.record_export), and each pool process takes one message at a time so that a long
# export holds no others back.
CELERY_WORKER_MAX_MEMORY_PER_CHILD = (
    env_int("DECISIONBOARD_WORKER_MAX_MEMORY_MB", 256, minimum=32) * 1024  # in KiB
)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes every database connection after each task unless this is set;
# then only every this many tasks, a backstop: a connection is kept from task to task and
# replaced past CONN_MAX_AGE or after a failed task (workers.connections).
CELERY_DB_REUSE_MAX = 1000
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = beat_schedule(DECISIONBOARD["CATCHUP_LANES"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
