"""The ``docstore`` command line: build, info, get, verify, export, upgrade, demo.

``inputs`` reads what ``build`` takes; ``commands`` holds one function per command; this module
parses the arguments and turns every expected failure into one line and exit status 1.
"""

from __future__ import annotations

import argparse
import sys

from .. import DocstoreError, __version__
from .._docstore import DEFAULT_LEVEL, _redact_urls
from .._writer import ON_DUPLICATE
from .commands import (
    cmd_build,
    cmd_demo,
    cmd_export,
    cmd_get,
    cmd_info,
    cmd_seal,
    cmd_upgrade,
    cmd_verify,
)
from .inputs import FORMATS, UsageError


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar (there is none unless stderr is a TTY)"
    )


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docstore", description="Build and read docstore document stores.")
    parser.add_argument("--version", action="version", version=f"docstore {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "build",
        help="build a store from JSON lines, JSON arrays, TSV, CSV or Parquet, or an ir_datasets corpus",
    )
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help="input files ('-' reads stdin: JSON lines unless --format says otherwise; .gz is fine)",
    )
    p.add_argument(
        "--from-ir-datasets",
        metavar="NAME",
        help="build from the documents of an ir_datasets dataset (e.g. msmarco-passage) instead of INPUTs",
    )
    p.add_argument(
        "--json-fields",
        metavar="F1,F2",
        help="with --from-ir-datasets: fields (not str ones) to store as JSON (values the "
        "docs class's annotations do not allow, such as None)",
    )
    p.add_argument("-o", "--output", required=True, metavar="STORE", help="the store to create")
    p.add_argument("--id-field", default="doc_id", help="field holding the doc id (default: doc_id)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="input format (default: from the extension; a .json file holding an array is json)",
    )
    p.add_argument(
        "--fields",
        help="field types, e.g. text:str,label:int64 (default: inferred from the first 1,000 records; "
        "CSV/TSV columns of numbers as int64 or float64)",
    )
    p.add_argument("--columns", help="column names of header-less TSV/CSV, e.g. doc_id,text")
    p.add_argument(
        "--level", type=int, help=f"0 = lz4 fast, 1-12 = lz4 HC, -1 = none (default {DEFAULT_LEVEL})"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.add_argument(
        "--shards",
        type=_positive,
        default=1,
        metavar="N",
        help="build N shards in N processes, sealed into one collection (a directory) in input order; "
        "uncompressed JSON lines files are split between lines, other files go whole to one shard. "
        "The collection adds a global id index: about 57 bytes per id plus the id's own bytes",
    )
    p.add_argument(
        "--on-duplicate",
        choices=ON_DUPLICATE,
        default="error",
        help="a record whose id came before: error (the default: stop, then count the repeats and "
        "say where the first few are), first (keep the earlier record), last (keep the later one)",
    )
    _quiet(p)
    p.set_defaults(func=cmd_build, subparser=p)

    p = sub.add_parser("info", help="count, fields, sizes and codec of a store")
    p.add_argument("store")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print JSON")
    shape.add_argument(
        "--fields",
        action="store_true",
        help="print only the field types, as `build --fields` takes them (to rebuild an export)",
    )
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("get", help="print documents by id as JSON lines")
    p.add_argument("store")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("verify", help="check every checksum and every document")
    p.add_argument("store")
    _quiet(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "export",
        help="print every document as JSON lines, in insertion order (bytes as base64, "
        "NaN and infinities as strings), or write them to a Parquet file",
    )
    p.add_argument("store")
    p.add_argument("-o", "--output", help="write to a file instead of stdout")
    p.add_argument(
        "--format",
        choices=("jsonl", "parquet"),
        help="jsonl (the default) or parquet (default for an OUTPUT ending in .parquet; needs -o)",
    )
    p.add_argument("--id-field", default="doc_id", help="name of the id in each record (default: doc_id)")
    _quiet(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "upgrade",
        help="rewrite a store or collection in the current format (version 3: every read checked, "
        "lookups by id located by the key index), after verifying it",
    )
    p.add_argument("store")
    p.add_argument("output", nargs="?", help="where to write it (default: replace STORE atomically)")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    _quiet(p)
    p.set_defaults(func=cmd_upgrade)

    p = sub.add_parser(
        "seal",
        help="seal store files (shards) into one collection that reads as one store, in the order given",
    )
    p.add_argument("output", metavar="OUT", help="the collection (a directory) to create")
    p.add_argument("shards", nargs="+", metavar="SHARD", help="store files with the same fields")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT (a store or collection, nothing else) atomically",
    )
    mode.add_argument(
        "--append",
        action="store_true",
        help="add the shards after those of the collection OUT (one append at a time)",
    )
    p.add_argument(
        "--on-duplicate",
        choices=ON_DUPLICATE,
        default="error",
        help="an id that several shards hold: error (the default), first or last (keep the "
        "document of the first or last shard; the others' shards are copied without it)",
    )
    _quiet(p)
    p.set_defaults(func=cmd_seal)

    p = sub.add_parser("demo", help="build a sample corpus and compare lookups with a dict and ir_datasets")
    p.add_argument("--docs", type=_positive, default=200_000, help="documents in the sample corpus")
    p.add_argument("--dir", help="where to put the files (default: a temporary directory)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.command == "build":  # syntax errors: usage and status 2, as argparse gives them
        if args.from_ir_datasets is None and not args.inputs:
            args.subparser.error("give INPUT files, or --from-ir-datasets NAME")
        if args.from_ir_datasets is not None:
            given = [
                flag
                for flag, value in (("INPUT", args.inputs), ("--format", args.format),
                                    ("--fields", args.fields), ("--columns", args.columns),
                                    ("--id-field", args.id_field != "doc_id"))
                if value
            ]  # fmt: skip
            if given:
                args.subparser.error(f"{given[0]} is not allowed with --from-ir-datasets")
        elif args.json_fields is not None:
            args.subparser.error("--json-fields goes with --from-ir-datasets")
    try:
        status: int = args.func(args)
        return status
    except BrokenPipeError:
        return 0
    except (DocstoreError, UsageError, OSError, ValueError, KeyError, MemoryError) as exc:
        message = f"not found: {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__
        message = _in_cli_terms(args, message)
        # A URL given on the command line may hold credentials: never echo them.
        print(f"docstore {args.command}: error: {_redact_urls(message)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _in_cli_terms(args: argparse.Namespace, message: str) -> str:
    """An error of the Python API said as a command line user acts on it."""
    # The library's advice names its keyword argument; the command has a flag.
    if hasattr(args, "overwrite"):
        message = message.replace("pass overwrite=True", "pass --overwrite")
    if getattr(args, "on_duplicate", None) == "error" and message.startswith("duplicate doc id"):
        message += "; pass --on-duplicate first or --on-duplicate last to keep one document of each"
    # A file that is not a store at all is not "corrupt": the user gave the wrong file.
    if message.startswith("corrupt store: not a docstore file") and hasattr(args, "store"):
        message = (
            f"{args.store} is not a docstore file: it does not start as a store does "
            "(give a store file, or a collection directory)"
        )
    return message
