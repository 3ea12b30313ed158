#!/usr/bin/env python3
"""A BabelQueue Python SDK peer for the Go interop tests (integration/python_test.go).

It drives the real Python SDK (babelqueue[artemis], installed by scripts/python-peer setup)
against an Artemis broker, one command per process, and prints one JSON object per line on
stdout. Log output of the SDK goes to stderr. Every line has an "event" key:

  ready      the peer is connected (and, for consume, its receiver is attached)
  published  one message was published: id (meta.id), trace_id, queue
  handled    the handler ran: outcome ("ok" or "failed") and the full envelope it saw
  redriven   the SDK's redrive ran: redriven, skipped and the items
  done       the command finished: counts
  error      the command failed: message (the exit status is then 1)

Commands (the broker URL comes from --url or ARTEMIS_URL):

  version
  publish  --queue Q --urn U [--data JSON] [--trace ID] [--count N] [--seq-key K]
           [--header NAME=VALUE ...]
           [--gdpr-schema FILE --gdpr-key HEX]
  consume  --queue Q --urn U [--fail] [--max-attempts N] [--dead-letter]
           [--max N] [--idle SECONDS] [--gdpr-schema FILE --gdpr-key HEX]

With --gdpr-schema and --gdpr-key (an AES key in hex), publish encrypts the fields the
schema marks x-gdpr-sensitive with the SDK's babelqueue.gdpr.protect before publishing, and
consume decrypts them with babelqueue.gdpr.unprotect in the handler ("handled" then carries
the envelope as it arrived and "cleartext", the data decrypted, or "decrypt_error"). The
cipher is AES-GCM on the cryptography library (the SDK's gdpr extra): a random 12-byte
nonce, then the ciphertext and tag, standard base64.
  redrive  --dlq Q [--to QUEUE]

publish --header adds out-of-band headers (a W3C traceparent, say) as application properties:
through the SDK's publish_with_headers when its transport can carry headers; the SDK's Artemis
transport cannot (1.24.0 drops them), so then the message is the transport's own projection of
the SDK's envelope with the headers added, as an OpenTelemetry-instrumented Python producer
would send it.

consume stops after --max handled messages, or when no message arrives for --idle seconds
(0: never), or when stdin reaches end of file (the Go test closes it to stop the peer).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from typing import Any, Dict, Mapping


def emit(event: str, **fields: Any) -> None:
    """Write one JSON line and flush it, so the Go side sees it at once."""
    line = {"event": event}
    line.update(fields)
    sys.stdout.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class InteropFailure(Exception):
    """What the consume --fail handler raises: the dead_letter.exception the Go side reads."""


def broker_url(args: argparse.Namespace) -> str:
    url = args.url or os.environ.get("ARTEMIS_URL", "")
    if not url:
        raise SystemExit("peer.py: no broker: give --url or set ARTEMIS_URL")
    return url


def new_app(args: argparse.Namespace, queue: str, **options: Any):
    from babelqueue import BabelQueue
    from babelqueue.artemis_transport import ArtemisTransport

    transport = ArtemisTransport(broker_url(args))
    return BabelQueue(transport=transport, queue=queue, **options), transport


class AesGcmFieldCipher:
    """The family's field cipher (babelqueue.gdpr.Cipher) on the cryptography library."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)

    def encrypt(self, plaintext: bytes) -> str:
        import base64

        nonce = os.urandom(12)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, plaintext, None)).decode("ascii")

    def decrypt(self, ciphertext: str) -> bytes:
        import base64

        raw = base64.b64decode(ciphertext, validate=True)
        return self._aead.decrypt(raw[:12], raw[12:], None)


def gdpr_setup(args: argparse.Namespace):
    """The schema and cipher of --gdpr-schema/--gdpr-key, or (None, None)."""
    if not args.gdpr_schema:
        return None, None
    with open(args.gdpr_schema, encoding="utf-8") as f:
        schema = json.load(f)
    return schema, AesGcmFieldCipher(bytes.fromhex(args.gdpr_key))


def cmd_version(args: argparse.Namespace) -> int:
    import babelqueue
    import proton

    emit(
        "done",
        babelqueue=babelqueue.__version__,
        proton=".".join(str(part) for part in proton.VERSION),
        python=sys.version.split()[0],
    )
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    data = json.loads(args.data)
    if not isinstance(data, dict):
        raise SystemExit("peer.py publish: --data must be a JSON object")
    headers: Dict[str, str] = {}
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit("peer.py publish: --header wants NAME=VALUE, got %r" % item)
        headers[name] = value
    gdpr_schema, gdpr_cipher = gdpr_setup(args)
    app, transport = new_app(args, args.queue)
    emit("ready", queue=args.queue)
    try:
        for i in range(args.count):
            payload: Dict[str, Any] = json.loads(json.dumps(data))
            if args.seq_key:
                payload[args.seq_key] = i
            if gdpr_schema is not None:
                from babelqueue.gdpr import protect

                protect(payload, gdpr_schema, gdpr_cipher)
            trace_id = args.trace or None
            if headers:
                msg_id, via = publish_with_headers(app, transport, args.urn, payload, args.queue, trace_id, headers)
                emit("published", id=msg_id, queue=args.queue, seq=i, headers_via=via)
                continue
            msg_id = app.publish(args.urn, payload, queue=args.queue, trace_id=trace_id)
            emit("published", id=msg_id, queue=args.queue, seq=i)
    finally:
        transport.close()
    emit("done", published=args.count)
    return 0


def publish_with_headers(app, transport, urn, payload, queue, trace_id, headers):
    """Publish one message with out-of-band headers; returns its id and how they were sent."""
    from babelqueue.transport import HeaderPublisher

    if isinstance(transport, HeaderPublisher):
        return app.publish_with_headers(urn, payload, headers, queue=queue, trace_id=trace_id), "sdk"
    from babelqueue.codec import EnvelopeCodec

    envelope = EnvelopeCodec.make(urn, payload, queue=queue, trace_id=trace_id)
    message = transport._message(EnvelopeCodec.encode(envelope))
    properties = dict(message.properties or {})
    properties.update(headers)
    message.properties = properties
    transport._sender(queue).send(message)
    return envelope["meta"]["id"], "projection"


def cmd_consume(args: argparse.Namespace) -> int:
    options: Dict[str, Any] = {"max_attempts": args.max_attempts}
    if args.dead_letter:
        options["dead_letter"] = True
    app, transport = new_app(args, args.queue, **options)
    counts = {"ok": 0, "failed": 0}
    gdpr_schema, gdpr_cipher = gdpr_setup(args)

    def handler(data: Mapping[str, Any], meta: Mapping[str, Any], envelope: Mapping[str, Any]) -> None:
        outcome = "failed" if args.fail else "ok"
        counts[outcome] += 1
        extra: Dict[str, Any] = {}
        if gdpr_schema is not None:
            from babelqueue.gdpr import unprotect

            clear = json.loads(json.dumps(envelope.get("data", {})))
            try:
                unprotect(clear, gdpr_schema, gdpr_cipher)
                extra["cleartext"] = clear
            except Exception as exc:  # noqa: BLE001 - reported to the Go side
                extra["decrypt_error"] = "%s: %s" % (type(exc).__name__, exc)
        emit("handled", outcome=outcome, envelope=envelope, **extra)
        if args.fail:
            raise InteropFailure("python handler failed on purpose (attempts %s)" % envelope.get("attempts"))

    app.register(args.urn, handler)

    # Attach the receiver before saying "ready", so a test may publish right after. The SDK
    # attaches on the first pop; a message that this first pop already gets is dispatched.
    first = transport.pop(args.queue, timeout=0.2)
    emit("ready", queue=args.queue)

    stdin_closed = threading.Event()

    def watch_stdin() -> None:
        try:
            while sys.stdin.readline():
                pass
        finally:
            stdin_closed.set()
            app.stop()

    threading.Thread(target=watch_stdin, daemon=True).start()

    dispatched = 0
    try:
        if first is not None:
            app.dispatch(first)
            dispatched += 1
        while not stdin_closed.is_set():
            if args.max and dispatched >= args.max:
                break
            remaining = (args.max - dispatched) if args.max else None
            if args.idle > 0:
                # Returns after `remaining` dispatches or once the queue stays empty for --idle s.
                dispatched += app.consume(
                    args.queue, max_messages=remaining or (1 << 30), timeout=args.idle, handle_signals=False
                )
                break
            # Until stdin closes (app.stop), or, with --max, until that many were dispatched.
            dispatched += app.consume(args.queue, max_messages=remaining, timeout=1.0, handle_signals=False)
    finally:
        transport.close()
    emit("done", dispatched=dispatched, handled_ok=counts["ok"], handled_failed=counts["failed"])
    return 0


def cmd_redrive(args: argparse.Namespace) -> int:
    from babelqueue.redrive import redrive

    app, transport = new_app(args, args.dlq)
    emit("ready", queue=args.dlq)
    try:
        result = redrive(transport, args.dlq, to_queue=args.to or None, timeout=args.timeout)
    finally:
        transport.close()
    items = [
        {
            "message_id": item.message_id,
            "trace_id": item.trace_id,
            "urn": item.urn,
            "reason": item.reason,
            "from": item.from_queue,
            "to": item.to,
            "redriven": item.redriven,
        }
        for item in result.items
    ]
    emit("redriven", redriven=result.redriven, skipped=result.skipped, items=items)
    emit("done", redriven=result.redriven, skipped=result.skipped)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="BabelQueue Python SDK peer for the Go interop tests")
    parser.add_argument("--url", default="", help="broker URL (default: $ARTEMIS_URL)")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("version")

    p = sub.add_parser("publish")
    p.add_argument("--queue", required=True)
    p.add_argument("--urn", required=True)
    p.add_argument("--data", default="{}")
    p.add_argument("--trace", default="")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--seq-key", default="")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--gdpr-schema", default="")
    p.add_argument("--gdpr-key", default="")

    c = sub.add_parser("consume")
    c.add_argument("--queue", required=True)
    c.add_argument("--urn", required=True)
    c.add_argument("--fail", action="store_true")
    c.add_argument("--max-attempts", type=int, default=3)
    c.add_argument("--dead-letter", action="store_true")
    c.add_argument("--max", type=int, default=0)
    c.add_argument("--idle", type=float, default=0.0)
    c.add_argument("--gdpr-schema", default="")
    c.add_argument("--gdpr-key", default="")

    r = sub.add_parser("redrive")
    r.add_argument("--dlq", required=True)
    r.add_argument("--to", default="")
    r.add_argument("--timeout", type=float, default=2.0)

    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="peer.py %(levelname)s %(name)s: %(message)s")
    commands = {"version": cmd_version, "publish": cmd_publish, "consume": cmd_consume, "redrive": cmd_redrive}
    try:
        return commands[args.command](args)
    except Exception as exc:  # noqa: BLE001 - reported as a JSON line for the Go side
        emit("error", message="%s: %s" % (type(exc).__name__, exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
