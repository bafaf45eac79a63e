"""`manage.py serve_otlp_grpc`: the OTLP/gRPC receiver (api/otlp_grpc.py) in the foreground.

`manage.py serve` (bin/start) runs it beside gunicorn; production runs it under its own
supervisor (deploy/systemd/decisionboard-otlp-grpc.service, deploy/Procfile). SIGTERM or
SIGINT stops it after the calls in progress are answered (up to --grace seconds).
"""

from __future__ import annotations

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from api import otlp_grpc
from ops.heap import freeze_startup_objects


class Command(BaseCommand):
    help = "Serve OTLP/gRPC trace exports (TraceService/Export) on DECISIONBOARD_OTLP_GRPC_PORT."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
        parser.add_argument(
            "--port",
            type=int,
            default=None,
            help="default: DECISIONBOARD_OTLP_GRPC_PORT (4317; 0 turns the receiver off)",
        )
        parser.add_argument(
            "--threads",
            type=int,
            default=otlp_grpc.DEFAULT_THREADS,
            help="exports handled at once (each holds its own database connection)",
        )
        parser.add_argument("--grace", type=float, default=10.0)

    def handle(self, *args, host, port, threads, grace, **options):
        if port is None:
            port = settings.DECISIONBOARD["OTLP_GRPC_PORT"]
        if port == 0:
            raise CommandError("The OTLP/gRPC receiver is off (DECISIONBOARD_OTLP_GRPC_PORT=0).")
        try:
            receiver = otlp_grpc.server(host, port, threads)
        except RuntimeError as exc:
            raise CommandError(
                f"The OTLP/gRPC receiver {exc}: is the port in use? Set "
                "DECISIONBOARD_OTLP_GRPC_PORT to another port, or 0 to turn it off."
            ) from None
        # The objects of startup out of every full collection's walk, as in the web workers
        # (ops/heap.py): an export allocates enough to set off full collections, and each
        # walked all of Django otherwise.
        freeze_startup_objects()
        stopping = threading.Event()

        def stop(*_):
            stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"OTLP/gRPC receiver listening on {host}:{port}.")
        self.stdout.flush()
        stopping.wait()
        receiver.stop(grace).wait()
