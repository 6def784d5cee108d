"""The network layer of the Kafka-protocol server: listeners and request frames (:mod:`.socket_server`)."""
