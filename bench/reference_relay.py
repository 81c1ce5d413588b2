#!/usr/bin/python3
# reference_relay.py -- The minimal outbox relay the benchmark compares with: plain SKIP LOCKED claim, delete after flush.
#
#   bench/reference_relay.py BATCH
#
# What a team writes in an afternoon: one transaction per batch, claim with SKIP LOCKED, produce
# every row (headers from the jsonb, plus outbox-id), flush, delete, commit. Same librdkafka
# settings as the relay's defaults (idempotent, acks=all, linger.ms=5). Exits when a claim comes
# back empty. Connection from the usual PG* variables, Kafka from KAFKA_BOOTSTRAP.
import os
import sys

import psycopg2
from confluent_kafka import Producer

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
db = psycopg2.connect("")
producer = Producer({"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP"], "enable.idempotence": True,
                     "acks": "all", "linger.ms": 5})
failed = []


def report(err, _msg):
    if err is not None:
        failed.append(err)


while True:
    with db, db.cursor() as cur:  # one transaction: commits on success, rolls back on error
        cur.execute("SELECT id, topic, key, payload, headers FROM outbox"
                    " WHERE published_at IS NULL AND dead_at IS NULL"
                    " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED", (batch,))
        rows = cur.fetchall()
        if not rows:
            break
        for id_, topic, key, payload, headers in rows:
            h = [(k, v.encode()) for k, v in (headers or {}).items()] + [("outbox-id", str(id_).encode())]
            while True:
                try:
                    producer.produce(topic, value=None if payload is None else bytes(payload), key=key,
                                     headers=h, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush()
        if failed:
            raise SystemExit(f"reference relay: {len(failed)} deliveries failed: {failed[0]}")
        cur.execute("DELETE FROM outbox WHERE id = ANY(%s)", ([r[0] for r in rows],))
