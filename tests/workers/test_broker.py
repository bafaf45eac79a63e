"""The embedded broker (kombu's filesystem transport, workers/broker.py) loses no message."""

from __future__ import annotations

import multiprocessing

from kombu import Connection

from workers.broker import Transport

PER_PRODUCER = 1500


def _connection(folder: str) -> Connection:
    options = {"data_folder_in": folder, "data_folder_out": folder, "store_processed": False,
               "processed_folder": folder, "control_folder": f"{folder}/control",
               "polling_interval": 0}  # fmt: skip
    return Connection("filesystem://", transport=Transport, transport_options=options)


def _produce(folder: str, producer: int) -> None:
    with _connection(folder) as conn:
        queue = conn.SimpleQueue("default")
        for i in range(PER_PRODUCER):
            queue.put({"producer": producer, "i": i, "pad": "x" * 2000})


def test_messages_published_while_a_worker_consumes_all_arrive_whole(tmp_path):
    # Two web processes publish while a worker polls the folder, as under ingest load. kombu's
    # own transport loses about one message in ten here, read before it was written.
    context = multiprocessing.get_context("fork")
    producers = [context.Process(target=_produce, args=(str(tmp_path), p)) for p in (1, 2)]
    for p in producers:
        p.start()
    received: set[tuple[int, int]] = set()
    unreadable = 0
    with _connection(str(tmp_path)) as conn:
        queue = conn.SimpleQueue("default")
        while len(received) < 2 * PER_PRODUCER:
            try:
                message = queue.get(timeout=10)
            except queue.Empty:
                break
            except ValueError:  # an empty or partial file: the message is lost
                unreadable += 1
                continue
            message.ack()
            received.add((message.payload["producer"], message.payload["i"]))
    for p in producers:
        p.join(30)
    assert unreadable == 0
    assert len(received) == 2 * PER_PRODUCER


def test_an_exchange_file_created_and_not_yet_written_is_an_empty_table(tmp_path):
    # What a worker finds when another, starting at the same moment, has created the exchange's
    # file and not yet written it: kombu's own transport raised a JSON decode error here and the
    # worker stopped.
    with _connection(str(tmp_path)) as conn:
        channel = conn.default_channel
        empty = channel._exchange_file("celery.pidbox")
        empty.parent.mkdir(exist_ok=True)
        empty.touch()
        assert channel.get_table("celery.pidbox") == []
        channel._queue_bind("celery.pidbox", "", "", "worker1")
        channel._queue_bind("celery.pidbox", "", "", "worker2")
        channel._queue_bind("celery.pidbox", "", "", "worker1")  # bound once
        assert [q.queue for q in channel.get_table("celery.pidbox")] == ["worker2", "worker1"]
        channel._delete("worker2", "celery.pidbox", "", "")
        assert [q.queue for q in channel.get_table("celery.pidbox")] == ["worker1"]
        channel._exchange_file("other").touch()
        channel._delete("worker3", "other", "", "")  # created and not yet written: nothing to do
        assert channel.get_table("other") == []


def _bind(folder: str, worker: int, start) -> None:
    start.wait()
    with _connection(folder) as conn:
        for i in range(50):
            conn.default_channel._queue_bind("fanout", "", "", f"w{worker}-{i}")


def test_workers_binding_to_one_exchange_at_once_all_get_in(tmp_path):
    context = multiprocessing.get_context("fork")
    start = context.Event()
    binders = [context.Process(target=_bind, args=(str(tmp_path), w, start)) for w in range(4)]
    for p in binders:
        p.start()
    start.set()
    for p in binders:
        p.join(30)
    assert [p.exitcode for p in binders] == [0, 0, 0, 0]
    with _connection(str(tmp_path)) as conn:
        bound = {q.queue for q in conn.default_channel.get_table("fanout")}
    assert bound == {f"w{w}-{i}" for w in range(4) for i in range(50)}
