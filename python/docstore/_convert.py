"""Conversion of array-like field values to the exact numpy dtype of their field.

Rust takes numpy arrays of the exact dtype without copying; anything else comes here. Values are
converted only when nothing is lost: floats never go into integer fields, integers must fit (in a
float field, exactly), and floats must not overflow float32. Rounding a float64 to the nearest
float32 is the one loss allowed: it is what a float32 field is for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import FieldTypeError


def as_array(
    value: Any, dtype: str, doc_id: str, field: str, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype``: 1-D, or of ``shape`` (a fixed-shape field,
    whose value has that shape, or is flat with as many elements, as Arrow's fixed-size lists
    give it), converted by the rules above element by element."""
    if shape is not None:
        name = f"{dtype}[{','.join(map(str, shape))}]"
        where = f"doc {doc_id!r}: field {field!r} is {name}"
        if value is None:
            raise FieldTypeError(f"{where}, got None; declare the field {name}? to store None")
        try:
            array = np.asarray(_from_torch(value))
        except (ValueError, TypeError) as exc:
            raise FieldTypeError(f"{where}, got a value numpy cannot read: {exc}") from None
        if array.shape != shape and not (array.ndim == 1 and array.size == int(np.prod(shape))):
            raise FieldTypeError(f"{where}, got an array of shape {array.shape}")
        flat: Any = array.reshape(-1)
        if isinstance(value, (list, tuple)) and array.dtype.kind in "fO":
            # numpy reads ints beyond int64 (uint64's upper half) as floats: the elements go as a
            # list, to which the rules for ints in a list apply, as to a 1-D field's
            flat = np.asarray(value, dtype=object).reshape(-1).tolist()
        try:
            return as_array(flat, dtype, doc_id, field).reshape(shape)
        except FieldTypeError as exc:  # the elements' error, naming the field's own type
            raise FieldTypeError(str(exc).replace(f"is {dtype}[],", f"is {name},", 1)) from None
    target = bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    where = f"doc {doc_id!r}: field {field!r} is {dtype}[]"
    value = _from_torch(value)
    if value is None:
        raise FieldTypeError(f"{where}, got None; declare the field {dtype}[]? to store None")
    if isinstance(value, (str, bytes, bytearray, dict)):
        raise FieldTypeError(f"{where}, got {type(value).__name__}")
    if isinstance(value, np.ma.MaskedArray) and np.ma.is_masked(value):
        # np.asarray would keep whatever the masked slots hold, as if they were values
        raise FieldTypeError(f"{where}, got a masked array with masked elements; fill them first (.filled())")
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged lists, among others
        raise FieldTypeError(f"{where}, got a value numpy cannot read: {exc}") from None
    if array.ndim == 0:
        raise FieldTypeError(f"{where}, got {type(value).__name__}")
    if array.ndim != 1:
        raise FieldTypeError(f"{where}, got an array of shape {array.shape} (one dimension expected)")
    if array.size == 0:
        return np.empty(0, dtype=target)
    if array.dtype == target:  # a subclass (np.memmap) or a strided view: nothing to check
        return np.ascontiguousarray(array)
    listed = isinstance(value, (list, tuple))
    if array.dtype.kind == "O" or (listed and array.dtype.kind == "f"):
        items = value if listed else array.tolist()
        if all(_is_int(v) for v in items):  # ints that numpy read as floats or objects
            return _from_ints(items, target, where)
    if array.dtype.kind == "b":
        array = array.astype(np.uint8)
    if array.dtype.kind == "O" and any(v is None for v in array):
        raise FieldTypeError(f"{where}, got None (null) elements")
    if array.dtype.kind not in "iuf":
        raise FieldTypeError(f"{where}, got elements of type {array.dtype}")
    if target.kind in "iu":
        if array.dtype.kind == "f":
            raise FieldTypeError(f"{where}, got floating-point elements")
        info = np.iinfo(target)
        if array.min() < info.min or array.max() > info.max:
            raise FieldTypeError(f"{where}, got elements outside [{info.min}, {info.max}]")
        return np.ascontiguousarray(array, dtype=target)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is detected below
        converted = np.ascontiguousarray(array, dtype=target)
        if array.dtype.kind in "iu":
            exact = np.isfinite(converted).all() and np.array_equal(converted.astype(array.dtype), array)
            if not exact:
                raise FieldTypeError(f"{where}, got integers that {dtype} cannot hold exactly")
        elif np.isinf(converted).sum() != np.isinf(array).sum():
            raise FieldTypeError(f"{where}, got elements too large for {dtype}")
    return converted


def _from_torch(value: Any) -> Any:
    """A torch tensor of bfloat16, which numpy cannot read, as ml_dtypes' bfloat16 array (the
    same bits); another tensor detached and on the CPU (numpy refuses one that requires grad,
    as a model's outputs do); any other value as it is."""
    if type(value).__module__.split(".")[0] != "torch" or not hasattr(value, "detach"):
        return value
    value = value.detach().cpu()
    if str(value.dtype) != "torch.bfloat16":
        return value
    import torch

    return value.contiguous().view(torch.int16).numpy().view(bfloat16())


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _from_ints(ints: list[int] | tuple[int, ...], target: np.dtype, where: str) -> np.ndarray:
    """A list of Python ints as ``target``, refused unless every value fits exactly (numpy reads
    a list holding ints beyond int64 as floats or objects, and would round them)."""
    ints = [int(v) for v in ints]
    if target.kind in "iu":
        info = np.iinfo(target)
        if min(ints) < info.min or max(ints) > info.max:
            raise FieldTypeError(f"{where}, got elements outside [{info.min}, {info.max}]")
        return np.array(ints, dtype=target)
    try:
        converted = np.array([float(v) for v in ints], dtype=target)
    except OverflowError:
        raise FieldTypeError(f"{where}, got integers that {target} cannot hold exactly") from None
    if not np.isfinite(converted).all() or any(int(c) != v for c, v in zip(converted.tolist(), ints)):
        raise FieldTypeError(f"{where}, got integers that {target} cannot hold exactly")
    return converted


def bfloat16() -> np.dtype:
    """numpy's dtype for ``bfloat16[]`` elements, which numpy itself lacks: ``ml_dtypes.bfloat16``,
    the one JAX, TensorFlow and ONNX use, that ``torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)``
    takes without a copy (``docstore.torch`` does that)."""
    try:
        import ml_dtypes
    except ImportError:
        raise FieldTypeError(
            "bfloat16[] values are numpy arrays of ml_dtypes.bfloat16, and ml_dtypes is not installed: "
            "pip install ml_dtypes (or docstore[bfloat16])"
        ) from None
    dtype: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return dtype
