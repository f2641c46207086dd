"""The exact-rebuild recipe: ``docstore export``, then ``docstore build --fields "$(docstore info
--fields)"`` gives the same documents, bit for bit, for every field type: NaN payloads and signs,
infinities, -0.0, subnormals, integer extremes, nulls and empty lists included."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import docstore
import docstore.cli

INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
# Each float type's exponent and mantissa bits.
FLOATS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}


def dtype(elem: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if elem == "bfloat16" else np.dtype(elem)


def special_bits(elem: str) -> list[int]:
    """Bit patterns of the values a float conversion may change: signed zeros, infinities,
    quiet and signalling NaNs of either sign with payloads, a subnormal, the largest finite."""
    exponent_bits, mantissa_bits = FLOATS[elem]
    sign = 1 << (exponent_bits + mantissa_bits)
    inf = ((1 << exponent_bits) - 1) << mantissa_bits
    quiet = 1 << (mantissa_bits - 1)
    largest = inf - 1
    nans = [inf | quiet, sign | inf | quiet, inf | quiet | 1, inf | 1, sign | inf | 3, inf | (quiet >> 1)]
    return [0, sign, inf, sign | inf, 1, sign | 1, largest, *nans]


def elements(elem: str) -> np.ndarray:
    """The values an array field of element type ``elem`` holds in the test's documents."""
    if elem in FLOATS:
        size = dtype(elem).itemsize
        specials = np.array(special_bits(elem), f"<u{size}").view(dtype(elem))
        ordinary = np.array([1.5, -1 / 3, 1e-3, 65504.0], np.float64).astype(dtype(elem))
        return np.concatenate([specials, ordinary])
    info = np.iinfo(elem)
    return np.array([info.min, info.max, 0, 1, info.max // 3, info.min // 7], elem)


def values(ty: str) -> list:
    """Values of a field of type ``ty`` (no None: the nullable field adds them), together every
    value `elements` gives for an array type."""
    if ty == "str":
        return ["", 'ünï "q"\n\t\\ \u2028 😀', "\x00\x7f", "plain"]
    if ty == "bytes":
        return [b"", bytes(range(256)), b"\xff\x00", b"x"]
    if ty == "int64":
        return [0, -(2**63), 2**63 - 1, -1]
    if ty == "float64":
        bits = special_bits("float64")
        return [struct.unpack("<d", struct.pack("<Q", b))[0] for b in bits] + [1 / 3, -1e-300]
    if ty == "bool":
        return [True, False, True, False]
    if ty == "list[str]":
        return [[], ["a", ""], ["é", "😀", "\n"], ["x"]]
    if ty == "list[bytes]":
        return [[], [b"", b"\x00\xff"], [bytes(range(256))], [b"x"]]
    elem, _, dims = ty[:-1].partition("[")
    items = elements(elem)
    if not dims:  # 1-D of any length: the empty array too
        return [items, items[:0], items[::-1].copy(), items[:1]]
    shape = tuple(int(d) for d in dims.split(","))
    size = int(np.prod(shape))
    # Document k holds the elements from k * size on (round the list): together, all of them.
    count = max(4, -(-len(items) // size))
    return [np.resize(np.roll(items, -k * size), size).reshape(shape) for k in range(count)]


def documents(fields: dict[str, str]) -> list[dict]:
    """Records holding every value of each field's type (repeated to fill the longest), a
    nullable field's in the even documents and None in the odd ones."""
    columns = {name: values(ty.removesuffix("?")) for name, ty in fields.items()}
    count = max(len(vs) for vs in columns.values())
    return [
        {
            "doc_id": f"d{k}",
            **{
                name: None if fields[name].endswith("?") and k % 2 else vs[k % len(vs)]
                for name, vs in columns.items()
            },
        }
        for k in range(count)
    ]


TYPES = [
    "str",
    "bytes",
    "int64",
    "float64",
    "bool",
    "list[str]",
    "list[bytes]",
    *(f"{elem}[]" for elem in [*INTS, *FLOATS]),
    *(f"{elem}[5]" for elem in [*INTS, *FLOATS]),
    *(f"{elem}[2,3]" for elem in [*INTS, *FLOATS]),
    "float16[2,1,3]",
    "float64[1]",
]


def same(a, b) -> bool:
    """Whether two field values are the same, bit for bit (floats and arrays by their bytes)."""
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes())
    if isinstance(a, float):
        return type(b) is float and struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, list):
        return type(b) is list and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def assert_same_documents(a: docstore.DocStore, b: docstore.DocStore) -> None:
    assert a.fields == b.fields and list(a.keys()) == list(b.keys())
    for x, y in zip(a.values(), b.values()):
        for name in a.fields:
            got, want = getattr(y, name), getattr(x, name)
            assert same(want, got), f"doc {x.doc_id!r}, field {name!r}: {got!r}, not {want!r}"


def run(capsys, *args: str) -> str:
    """The command line in this process; its stdout (its status must be 0)."""
    status = docstore.cli.main(list(args))
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


@pytest.mark.parametrize("ty", TYPES)
def test_export_then_build_with_info_fields_is_bit_exact(tmp_path, capsys, ty):
    """Each type, and its nullable form beside it (None in some documents, values in others)."""
    records = documents({"v": ty, "n": f"{ty}?"})
    original = docstore.build(tmp_path / "a", records, fields={"v": ty, "n": f"{ty}?"})
    # The store holds the very bits given (else the rebuild would prove nothing about them).
    for record, doc in zip(records, original.values()):
        assert same(record["v"], doc.v) and same(record["n"], doc.n)

    run(capsys, "export", str(tmp_path / "a"), "-o", str(tmp_path / "a.jsonl"), "-q")
    spec = run(capsys, "info", str(tmp_path / "a"), "--fields").strip()
    assert spec == f"v:{ty},n:{ty}?"
    run(capsys, "build", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "b"), "-q", "--fields", spec)
    assert_same_documents(original, docstore.open(tmp_path / "b"))
    # Strict JSON: NaN and infinities as strings, never as JSON's missing constants.
    for line in (tmp_path / "a.jsonl").read_text(encoding="utf-8").split("\n")[:-1]:  # not at U+2028
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_the_recipe_as_a_shell_runs_it_rebuilds_a_store_of_every_type(tmp_path):
    """The recipe as documented, in a shell, on one store holding every type at once."""
    fields = {f"f{i}": ty for i, ty in enumerate(TYPES)} | {f"n{i}": f"{ty}?" for i, ty in enumerate(TYPES)}
    records = documents(fields)
    original = docstore.build(tmp_path / "a", records, fields=fields)
    recipe = (
        'docstore() { "$PYTHON" -m docstore.cli "$@"; }; '
        "docstore export a > a.jsonl && "
        'docstore build a.jsonl -o b -q --fields "$(docstore info a --fields)"'
    )
    done = subprocess.run(
        ["bash", "-c", recipe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert_same_documents(original, docstore.open(tmp_path / "b"))


def test_export_writes_nan_as_nan_unless_its_bits_say_more(tmp_path, capsys):
    """The documented encoding: ``"nan"`` for the NaN ``float("nan")`` gives (what exports
    wrote before), ``"nan:0x"`` and the bits for any other; ``"inf"``, ``"-inf"``."""
    f16 = np.array([0x7E00, 0xFE00, 0x7E01, 0x7C00, 0x8000], "<u2").view(np.float16)
    records = [
        {"doc_id": "a", "x": float("nan"), "h": f16},
        {"doc_id": "b", "x": float("-inf"), "h": f16[:1]},
    ]
    docstore.build(tmp_path / "a", records)
    lines = run(capsys, "export", str(tmp_path / "a")).splitlines()
    assert [json.loads(line) for line in lines] == [
        {"doc_id": "a", "x": "nan", "h": ["nan", "nan:0xfe00", "nan:0x7e01", "inf", -0.0]},
        {"doc_id": "b", "x": "-inf", "h": ["nan"]},
    ]


@pytest.mark.parametrize(
    ("ty", "value", "says"),
    [
        ("float32[]", ["nan:0x7e01"], "a NaN of float32 is written nan:0x and 8 hex digits"),
        ("float16[2]", [1, "nan:0x7c00"], "nan:0x7c00 is not the bits of a NaN of float16"),
        ("float64", "nan:0xzz", "a NaN of float64 is written nan:0x and 16 hex digits"),
        ("float16[2,2]", [["nan:0x7e01", 1], [2]], "float16[2,2]"),
    ],
)
def test_build_refuses_nan_bits_that_are_not_a_nan_of_the_field(tmp_path, capsys, ty, value, says):
    (tmp_path / "in.jsonl").write_text(json.dumps({"doc_id": "a", "x": value}) + "\n", encoding="utf-8")
    status = docstore.cli.main(
        ["build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "s"), "--fields", f"x:{ty}"]
    )
    err = capsys.readouterr().err
    assert status == 1 and says in err and "in.jsonl:1: doc 'a': field 'x'" in err, err
    assert not (tmp_path / "s").exists()


def test_fields_with_a_shape_of_several_dimensions(tmp_path, capsys):
    """``--fields`` splits at the commas between fields, not at those of a shape."""
    rows = [{"doc_id": "a", "m": [[1, 2, 3], [4, 5, 6]], "t": ["x"], "e": [0.5]}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = "m:int16[2,3],t:list[str],e:float32[1]"
    run(capsys, "build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "s"), "-q", "--fields", spec)
    store = docstore.open(tmp_path / "s")
    assert store.fields == {"m": "int16[2,3]", "t": "list[str]", "e": "float32[1]"}
    assert store["a"].m.tolist() == [[1, 2, 3], [4, 5, 6]]
    # CSV cells hold a shape's nested JSON arrays as they hold a list's
    (tmp_path / "in.csv").write_text('doc_id,m\na,"[[1,2,3],[4,5,""-inf""]]"\n', encoding="utf-8")
    run(
        capsys,
        "build",
        str(tmp_path / "in.csv"),
        "-o",
        str(tmp_path / "c"),
        "-q",
        "--fields",
        "m:float16[2,3]",
    )
    assert docstore.open(tmp_path / "c")["a"].m.tolist() == [[1, 2, 3], [4, 5, float("-inf")]]
