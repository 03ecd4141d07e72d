#!/usr/bin/env python3
"""Checks that a safetensors file written by Alpha loads with the Python `safetensors` library.

Usage: read_safetensors.py FILE.safetensors DESCRIPTION.json

DESCRIPTION.json (written by the C++ test SafetensorsPython.PythonLibraryReadsOurFiles) holds
  {"metadata": {str: str},
   "tensors": [{"name": str, "dtype": "F32"|..., "shape": [int], "values": [number, ...]}, ...]}
with the tensors in file order and their values flattened row-major (floats as exact doubles, integers
as integers). The file is loaded with safetensors.numpy; every name, dtype, shape and value must match
exactly, and so must the metadata and the order of the tensors in the file.

Needs: safetensors, numpy, and ml_dtypes when the file holds BF16 tensors (numpy has no bfloat16).
Exits 0 when everything matches, 1 with one line per mismatch otherwise.
"""
import json
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

NUMPY_DTYPES = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
                "I32": "int32", "I64": "int64", "U16": "uint16", "U8": "uint8"}


def check(path, description):
    """Returns a list of mismatches between the file and the description."""
    wanted = description["tensors"]
    if any(t["dtype"] == "BF16" for t in wanted):
        import ml_dtypes  # noqa: F401  registers numpy's 'bfloat16' dtype, which safetensors.numpy asks for
    errors = []
    loaded = load_file(path)
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
        # offset_keys() lists the names in data order (safetensors >= 0.4.2); keys() is sorted.
        file_order = f.offset_keys() if hasattr(f, "offset_keys") else None
    if metadata != description["metadata"]:
        errors.append(f"metadata {metadata} != {description['metadata']}")
    names = [t["name"] for t in wanted]
    if sorted(loaded) != sorted(names):
        errors.append(f"names {sorted(loaded)} != {sorted(names)}")
    if file_order is not None and file_order != names:
        errors.append(f"file order {file_order} != {names}")
    for t in wanted:
        name = t["name"]
        if name not in loaded:
            continue
        array = loaded[name]
        if array.dtype != np.dtype(NUMPY_DTYPES[t["dtype"]]):
            errors.append(f"{name}: dtype {array.dtype} != {t['dtype']}")
            continue
        if list(array.shape) != t["shape"]:
            errors.append(f"{name}: shape {list(array.shape)} != {t['shape']}")
            continue
        is_float = t["dtype"].startswith(("F", "BF"))
        want = np.array(t["values"], dtype=np.float64 if is_float else np.int64).reshape(t["shape"])
        got = array.astype(np.float64 if is_float else np.int64)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)[0] if got.ndim else ()
            errors.append(f"{name}: value at {tuple(bad)} is {got[tuple(bad)]}, expected {want[tuple(bad)]}")
    return errors


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, description_path = sys.argv[1], sys.argv[2]
    with open(description_path) as f:
        description = json.load(f)
    errors = check(path, description)
    for error in errors:
        print(f"{path}: {error}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"{path}: {len(description['tensors'])} tensors and the metadata match")


if __name__ == "__main__":
    main()
