"""Protobuf writer schemas from the registry: the descriptor files of a schema id, its messages.

`schema_files` turns a registry's schema into its files, dependencies first. A registry serves a Protobuf schema
either as a base64 `FileDescriptorProto` (what confluent-kafka's `ProtobufSerializer` registers, and what
Confluent's registry serves for `?format=serialized`) or as `.proto` text (what Java's serializer registers;
Apicurio's ccompat API serves it as it was registered whatever the format asked). Text is compiled by protoc
(grpcio-tools' bundled one, in a child process, so its errors can be read). Imports of Protobuf's well-known types
(`google/protobuf/*.proto`) are resolved from the bundled files; any other import would need the registry's schema
references, which are not resolved: such a schema is refused (`SchemaProblem`). `message_at` names the message a
value's message indexes point at; `writer_schema` gives the Arrow columns its bodies decode into.
"""

from __future__ import annotations

import base64
import binascii
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)

from sharelake.formats.protobuf_decode import Writer, handler

# the well-known types' files, by import name: what a schema may import without references
WELL_KNOWN = {
    m.DESCRIPTOR.name: m.DESCRIPTOR.serialized_pb
    for m in (
        any_pb2,
        api_pb2,
        descriptor_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )
}
PROTOC_TIMEOUT_S = 60


class SchemaProblem(ValueError):
    """A writer schema this format cannot read (the records of its id are dead-lettered)."""


def _from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
        found = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError):
        return None
    return found if found.message_type or found.name else None


def _compiled(text: str) -> list[descriptor_pb2.FileDescriptorProto]:
    """`.proto` text compiled by protoc, its imports first."""
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="sharelake-proto-") as tmp:
        source = Path(tmp) / "schema.proto"
        source.write_text(text)
        out = Path(tmp) / "schema.pb"
        command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"-I{include}"]
        command += [f"--descriptor_set_out={out}", "--include_imports", source.name]
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, check=False)
        if done.returncode != 0:
            cause = " ".join(done.stderr.split())[:300] or f"protoc exit {done.returncode}"
            raise SchemaProblem(f"the .proto text does not compile: {cause}")
        found = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return list(found.file)


def schema_files(text: str) -> tuple[bytes, ...]:
    """The files of a registry schema, dependencies first, as serialized FileDescriptorProtos."""
    main = _from_base64(text)
    if main is None:
        files = _compiled(text)
    else:
        unknown = [d for d in main.dependency if d not in WELL_KNOWN]
        if unknown:
            raise SchemaProblem(
                f"imports {', '.join(unknown)}: only Protobuf's well-known types (google/protobuf/*.proto) "
                "are resolved, not schema references"
            )
        files = [descriptor_pb2.FileDescriptorProto.FromString(WELL_KNOWN[d]) for d in _closure(main)] + [main]
    pool = descriptor_pool.DescriptorPool()
    try:
        for f in files:
            pool.Add(f)
        pool.FindFileByName(files[-1].name)
    except Exception as e:  # noqa: BLE001 - the descriptors do not link
        raise SchemaProblem(f"its descriptors do not link ({' '.join(str(e).split())[:200]})") from None
    return tuple(f.SerializeToString() for f in files)


def _closure(main: descriptor_pb2.FileDescriptorProto) -> list[str]:
    """The well-known files `main` needs, each after its own imports."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in descriptor_pb2.FileDescriptorProto.FromString(WELL_KNOWN[name]).dependency:
            visit(dep)
        order.append(name)

    for dep in main.dependency:
        visit(dep)
    return order


def message_at(files: tuple[bytes, ...], path: tuple[int, ...]) -> str:
    """The full name of the message the wire format's indexes point at in the schema's main file."""
    main = descriptor_pb2.FileDescriptorProto.FromString(files[-1])
    scope = list(main.message_type)
    name = main.package
    for depth, index in enumerate(path):
        if not 0 <= index < len(scope):
            raise SchemaProblem(f"message indexes {list(path)} point past the schema's messages (at depth {depth})")
        message = scope[index]
        name = f"{name}.{message.name}" if name else message.name
        scope = list(message.nested_type)
    if not path:
        raise SchemaProblem("no message indexes")
    return str(name)


def writer_schema(writer: Writer) -> pa.Schema:
    """The Arrow columns ptars decodes `writer`'s bodies into."""
    schema: pa.Schema = handler(writer).schema()
    return schema
