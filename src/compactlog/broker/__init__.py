"""The Kafka-protocol broker of a data directory: request dispatch (:mod:`.kafka_apis`) and one handler
module per family of requests, over the network layer (:mod:`compactlog.network`).

Imports kafka-python (its generated protocol messages and record codec); ``import compactlog`` does not
import this package.
"""
