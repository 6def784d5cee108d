"""Kafka's wire formats: the v2 record batch (record_batch.py), its codecs (compression.py) and where a
fetch's rows are cut into batches (batch_plan.py)."""
