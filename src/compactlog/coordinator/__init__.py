"""Kafka's group and transaction coordinators on one broker."""
