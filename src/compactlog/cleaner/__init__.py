"""The log cleaner: Kafka's key-based compaction (planning, record rules, execution) for compactlog."""
