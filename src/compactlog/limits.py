"""Java's integer bounds, which Kafka's fields and configs take: an offset, a timestamp or a ``long`` config
is a Java ``long``; a sequence number, a partition or an ``int`` config a Java ``int``."""

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1  # Integer.MAX_VALUE
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1  # Long.MAX_VALUE
