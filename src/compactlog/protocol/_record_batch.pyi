"""Types of the record-batch C extension (``_record_batch.c``)."""

from typing import Any

# Any object with the buffer protocol: a numpy array, bytes, an Arrow buffer, a memoryview.
Buffer = Any

def decode_records(sections: list[Buffer], counts: Buffer, base_timestamps: Buffer, fixed: Buffer,
                   fixed_timestamps: Buffer) -> tuple[Any, ...]: ...
def encode_records(firsts: Buffer, lasts: Buffer, base_offsets: Buffer, base_timestamps: Buffer, offsets: Buffer,
                   timestamps: Buffer, key: tuple[Any, ...], value: tuple[Any, ...], headers: tuple[Any, ...] | None,
                   room: int) -> list[bytearray]: ...
