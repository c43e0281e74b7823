"""The wire contract: Avro schemas (``*.avsc``), the codec and packed numeric columns.

The ``.avsc`` files in this folder are the contract other languages read; see
``docs/wire.md``. Record short names are the file stems (``step_record``, ``kernel_batch``, ...).
"""

from argus.errors import ArgusError, DecodeError, EncodeError, SchemaNotFound
from argus.schemas.arrays import kernel_id, kernel_ids, pack, unpack
from argus.schemas.codec import SINGLE_OBJECT_MAGIC, Codec, RecordSchema, load_schemas

__all__ = [
    "SINGLE_OBJECT_MAGIC",
    "ArgusError",
    "Codec",
    "DecodeError",
    "EncodeError",
    "RecordSchema",
    "SchemaNotFound",
    "kernel_id",
    "kernel_ids",
    "load_schemas",
    "pack",
    "unpack",
]
