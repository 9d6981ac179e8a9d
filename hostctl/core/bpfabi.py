"""The BPF contract as the daemon sees it: constants and struct field lists read from
hostctl/bpf/hostctl.h, the one header both BPF programs include.

Every size and value that the programs and the Python side share (flow-table size, ring
pages, flag bits...) is defined there once and read from here; the ctypes mirrors of the
structs (hostctl/datapath/pacer.py) are checked against ``STRUCTS`` by
tests/unit/test_bpf_layout.py. Pure: file reading and regular expressions only.
"""

from __future__ import annotations

import re
from pathlib import Path

HEADER = Path(__file__).resolve().parents[1] / "bpf" / "hostctl.h"

_DEFINE_RE = re.compile(r"^\s*#define\s+([A-Z][A-Z0-9_]*)\s+(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", re.M)
STRUCT_RE = re.compile(r"^struct\s+(\w+)\s*\{(.*?)^\};", re.S | re.M)
_FIELD_RE = re.compile(r"^\s*((?:struct\s+)?\w+)\s+(\w+)\s*((?:\[\s*\w+\s*\])*)\s*;\s*$")


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def parse_defines(c_text: str) -> dict[str, int]:
    """``#define NAME <integer>`` lines -> {NAME: value} (hex or decimal, U/L suffixes dropped)."""
    return {n: int(v, 0) for n, v in _DEFINE_RE.findall(strip_comments(c_text))}


def parse_structs(c_text: str) -> dict[str, list[tuple[str, str, list[int]]]]:
    """struct name -> [(C type, field name, array dims)] in declaration order."""
    out: dict[str, list[tuple[str, str, list[int]]]] = {}
    for m in STRUCT_RE.finditer(strip_comments(c_text)):
        fields = []
        for line in m.group(2).split(";"):
            line = line.strip()
            if not line:
                continue
            fm = _FIELD_RE.match(line + ";")
            if not fm:
                raise ValueError(f"struct {m.group(1)}: cannot parse the field declaration {line!r}")
            dims = [int(d, 0) for d in re.findall(r"\[\s*(\w+)\s*\]", fm.group(3))]
            fields.append((" ".join(fm.group(1).split()), fm.group(2), dims))
        out[m.group(1)] = fields
    return out


_TEXT = HEADER.read_text()
DEFINES = parse_defines(_TEXT)
STRUCTS = parse_structs(_TEXT)
