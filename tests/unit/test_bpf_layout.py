"""The ctypes mirrors in hostctl/datapath/pacer.py against the structs of bpf/hc_pace.c.

The struct definitions are cut out of the C source with a regex and compiled by gcc
into a tiny program that prints sizeof/offsetof/alignment of every struct and field;
the result is compared with ``pacer.MIRRORS`` (struct set, size, alignment, field names
in order, offsets, field sizes, and the field types: ``__u32`` must be ``c_uint32``,
``struct hc_flow_key`` the mirror of that struct, arrays of the same element and length).
The ``#define`` constants both sides rely on are compared too.

The two ``*_detects_*`` tests feed the checker a C text or a mirror with one extra
field, to show that a change made on one side only is caught. No root needed.
"""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hostctl.datapath import pacer

SRC = Path(__file__).resolve().parents[2] / "bpf" / "hc_pace.c"
GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed (needed to compile the layout probe)")

STRUCT_RE = re.compile(r"^struct\s+(\w+)\s*\{(.*?)^\};", re.S | re.M)
FIELD_RE = re.compile(r"^\s*((?:struct\s+)?\w+)\s+(\w+)\s*((?:\[\s*\w+\s*\])*)\s*;\s*$")
C_TYPES = {"__u8": ctypes.c_uint8, "__u16": ctypes.c_uint16, "__u32": ctypes.c_uint32, "__u64": ctypes.c_uint64,
           "__s8": ctypes.c_int8, "__s16": ctypes.c_int16, "__s32": ctypes.c_int32, "__s64": ctypes.c_int64}


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def parse_structs(c_text: str) -> dict[str, list[tuple[str, str, list[int]]]]:
    """struct name -> [(C type, field name, array dims)] in declaration order."""
    out: dict[str, list[tuple[str, str, list[int]]]] = {}
    for m in STRUCT_RE.finditer(_strip_comments(c_text)):
        fields = []
        for line in m.group(2).split(";"):
            line = line.strip()
            if not line:
                continue
            fm = FIELD_RE.match(line + ";")
            assert fm, f"struct {m.group(1)}: cannot parse the field declaration {line!r}"
            dims = [int(d, 0) for d in re.findall(r"\[\s*(\w+)\s*\]", fm.group(3))]
            fields.append((" ".join(fm.group(1).split()), fm.group(2), dims))
        out[m.group(1)] = fields
    return out


def c_layout(c_text: str, tmp_path: Path) -> dict:
    """Compile the struct definitions of ``c_text`` and return what gcc says about them."""
    structs = parse_structs(c_text)
    defs = "\n\n".join(m.group(0) for m in STRUCT_RE.finditer(_strip_comments(c_text)))
    body = []
    for name, fields in structs.items():
        body.append(f'    printf("%s\\"{name}\\": {{\\"size\\": %zu, \\"align\\": %zu, \\"fields\\": [", '
                    f'first ? "" : ", ", sizeof(struct {name}), _Alignof(struct {name})); first = 0;')
        for i, (_t, f, _d) in enumerate(fields):
            sep = ", " if i else ""
            body.append(f'    printf("{sep}[\\"{f}\\", %zu, %zu]", offsetof(struct {name}, {f}), '
                        f'sizeof(((struct {name} *)0)->{f}));')
        body.append('    printf("]}");')
    prog = ("#include <stdio.h>\n#include <stddef.h>\n"
            "typedef unsigned char __u8; typedef unsigned short __u16; typedef unsigned int __u32;\n"
            "typedef unsigned long long __u64; typedef signed char __s8; typedef short __s16;\n"
            "typedef int __s32; typedef long long __s64;\n\n"
            f"{defs}\n\nint main(void)\n{{\n    int first = 1;\n    printf(\"{{\");\n"
            + "\n".join(body) + '\n    printf("}\\n");\n    return 0;\n}\n')
    (tmp_path / "layout.c").write_text(prog)
    exe = tmp_path / "layout"
    cc = subprocess.run([GCC, "-std=c11", "-Wall", "-Werror", "-o", str(exe), str(tmp_path / "layout.c")],
                        capture_output=True, text=True)
    assert cc.returncode == 0, f"the layout probe does not compile:\n{cc.stderr}\n{prog}"
    out = json.loads(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    for name, fields in structs.items():
        for entry, (ctype, _f, dims) in zip(out[name]["fields"], fields):
            entry.extend([ctype, dims])
    return out


def _ctype_of(ctype: str, dims: list[int], mirrors: dict):
    if ctype.startswith("struct "):
        t = mirrors.get(ctype.split()[1])
    else:
        t = C_TYPES.get(ctype)
    if t is None:
        return None
    for n in reversed(dims):
        t = t * n
    return t


def _same_type(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, type) and issubclass(a, ctypes.Array) and isinstance(b, type) and issubclass(b, ctypes.Array):
        return a._length_ == b._length_ and _same_type(a._type_, b._type_)
    return False


def layout_mismatches(c: dict, mirrors: dict) -> list[str]:
    """Every difference between gcc's layout and the ctypes mirrors (empty = equal)."""
    bad = []
    if set(c) != set(mirrors):
        bad.append(f"structs in hc_pace.c {sorted(c)} != mirrors {sorted(mirrors)}")
    for name in sorted(set(c) & set(mirrors)):
        cs, py = c[name], mirrors[name]
        py_fields = [f[0] for f in py._fields_]
        c_fields = [f[0] for f in cs["fields"]]
        if c_fields != py_fields:
            bad.append(f"struct {name}: fields in C {c_fields} != mirror {py_fields}")
        if cs["size"] != ctypes.sizeof(py):
            bad.append(f"struct {name}: sizeof C {cs['size']} != mirror {ctypes.sizeof(py)}")
        if cs["align"] != ctypes.alignment(py):
            bad.append(f"struct {name}: alignment C {cs['align']} != mirror {ctypes.alignment(py)}")
        py_types = dict(py._fields_)
        for fname, off, size, ctype, dims in cs["fields"]:
            if fname not in py_types:
                continue
            desc = getattr(py, fname)
            if (desc.offset, desc.size) != (off, size):
                bad.append(f"struct {name}.{fname}: C offset/size {off}/{size} != mirror {desc.offset}/{desc.size}")
            want = _ctype_of(ctype, dims, mirrors)
            if want is None or not _same_type(want, py_types[fname]):
                bad.append(f"struct {name}.{fname}: C type {ctype}{dims or ''} != mirror {py_types[fname].__name__}")
    return bad


@pytest.fixture(scope="module")
def c_text() -> str:
    return SRC.read_text()


def test_every_struct_is_parsed(c_text):
    structs = parse_structs(c_text)
    assert set(structs) == {"hc_flow_key", "hc_remote_key", "hp_port_key", "hp_rate", "hp_flow", "hp_burst", "hp_ctl"}
    assert all(structs.values())


@needs_gcc
def test_mirrors_match_the_c_structs(c_text, tmp_path):
    c = c_layout(c_text, tmp_path)
    assert layout_mismatches(c, pacer.MIRRORS) == []
    # what the program and pacer.py exchange has a fixed size (a map created with another
    # size would be refused by bcc's update, so spell them out)
    assert {n: c[n]["size"] for n in c} == {"hc_flow_key": 40, "hc_remote_key": 20, "hp_port_key": 4, "hp_rate": 8,
                                           "hp_flow": 96, "hp_burst": 72, "hp_ctl": 64}


CLASSIFY_SRC = SRC.with_name("tl_classify.c")


@needs_gcc
def test_classifier_structs_and_the_keys_shared_with_the_pacer(c_text, tmp_path):
    """tl_classify.c's map structs have the sizes classifier.py's keys are built for (bcc makes
    its Key/Leaf types from the C text; a key of another size would be refused), and the two
    keys both programs use (hc_flow_key, hc_remote_key) are the same in both files."""
    classify = CLASSIFY_SRC.read_text()
    c = c_layout(classify, tmp_path)
    assert {n: c[n]["size"] for n in c} == {"hc_flow_key": 40, "hc_remote_key": 20, "hc_job_class": 8,
                                           "hc_job_stats": 48, "hc_ctl": 40}
    assert [f[:3] for f in c["hc_remote_key"]["fields"]] == [["raddr", 0, 16], ["rport", 16, 2], ["pad", 18, 2]]
    mine, pacer_structs = parse_structs(classify), parse_structs(c_text)
    for name in ("hc_flow_key", "hc_remote_key"):
        assert mine[name] == pacer_structs[name], name
    assert layout_mismatches({n: c[n] for n in ("hc_flow_key", "hc_remote_key")},
                             {"hc_flow_key": pacer.FlowKeyC, "hc_remote_key": pacer.RemoteKeyC}) == []
    maps = dict(re.findall(r"^BPF_(?:HASH|ARRAY)\((\w+), ([^,]+),", classify, re.M))
    assert maps == {"hc_flows": "struct hc_flow_key", "hc_ports": "__u32", "hc_remotes": "struct hc_remote_key",
                    "hc_job_class": "struct hc_job_class", "hc_job_stats": "struct hc_job_stats",
                    "hc_ctl": "struct hc_ctl"}  # hash maps: the key type; arrays: the value type
    # the maps table of the header comment names every map
    header = classify[:classify.index("*/")]
    assert all(re.search(rf"^ \*   {m}\s", header, re.M) for m in maps), "a map is missing from the header table"


@needs_gcc
def test_checker_detects_a_field_added_in_c_only(c_text, tmp_path):
    changed = c_text.replace("    __u64 setopt_errors;     /* failed bpf_setsockopt calls */",
                             "    __u64 setopt_errors;     /* failed bpf_setsockopt calls */\n    __u64 extra;", 1)
    assert changed != c_text, "the hp_ctl.setopt_errors line of hc_pace.c changed: update this test"
    bad = layout_mismatches(c_layout(changed, tmp_path), pacer.MIRRORS)
    assert any("hp_ctl: fields" in b for b in bad) and any("hp_ctl: sizeof" in b for b in bad), bad
    # a renamed field (same sizes and offsets) is caught too
    swapped = c_text.replace("    __u8 side;", "    __u8 side2;", 1)
    assert swapped != c_text
    assert any("hp_port_key: fields" in b for b in layout_mismatches(c_layout(swapped, tmp_path), pacer.MIRRORS))


@needs_gcc
def test_checker_detects_a_field_added_in_the_mirror_only(c_text, tmp_path):
    class CtlExtra(ctypes.Structure):
        _fields_ = [*pacer.CtlC._fields_, ("extra", ctypes.c_uint64)]

    class RateSigned(ctypes.Structure):  # same size and offsets, another type
        _fields_ = [("rate_Bps", ctypes.c_int32), ("pad", ctypes.c_uint32)]

    c = c_layout(c_text, tmp_path)
    bad = layout_mismatches(c, {**pacer.MIRRORS, "hp_ctl": CtlExtra, "hp_rate": RateSigned})
    assert any("hp_ctl: fields" in b for b in bad), bad
    assert any("hp_ctl: sizeof" in b for b in bad), bad
    assert any("hp_rate.rate_Bps: C type" in b for b in bad), bad
    assert any("structs in hc_pace.c" in b for b in layout_mismatches(c, {**pacer.MIRRORS, "hp_new": CtlExtra}))


def test_constants_match(c_text):
    defines = dict(re.findall(r"^#define\s+(HP_\w+)\s+(\w+)", c_text, re.M))

    def num(name: str) -> int:
        return int(defines[name].rstrip("uUlL"), 0)

    assert num("HP_UNLIMITED") == pacer.UNLIMITED
    assert num("HP_SLOT_WATCH") == pacer.HP_SLOT_WATCH
    assert num("HP_F_CLOSED") == pacer.HP_F_CLOSED
    assert num("HP_F_SETOPT_ERR") == pacer.HP_F_SETOPT_ERR
    assert num("HP_CTL_TRACK_ALL") == pacer.HP_CTL_TRACK_ALL
    assert num("HP_CTL_RELEASE") == pacer.HP_CTL_RELEASE
    assert num("HP_CTL_KEY_CONTROL") == pacer.HP_CTL_KEY_CONTROL
    assert num("HP_CTL_KEY_COUNTERS") == pacer.HP_CTL_KEY_COUNTERS
    # one entry for the daemon's control words, one for the program's counters
    assert re.search(r"^BPF_ARRAY\(hp_ctl, struct hp_ctl, 2\);", c_text, re.M)
    assert set(pacer.CTL_COUNTERS) < {f[0] for f in pacer.CtlC._fields_}
    assert {"local": num("HP_SIDE_LOCAL"), "remote": num("HP_SIDE_REMOTE")} == pacer.SIDE
    for n in ("HP_MAX_FLOWS", "HP_MAX_PORTS", "HP_MAX_REMOTES", "HP_MAX_SLOTS", "HP_RINGBUF_PAGES"):
        assert num(n) == getattr(pacer, n), n
    # the map names pacer.py opens and pins are the maps the program defines
    maps = re.findall(r"^BPF_(?:HASH|ARRAY|RINGBUF_OUTPUT)\((\w+)", c_text, re.M)
    assert sorted(maps) == sorted(pacer.MAP_NAMES)
    assert re.search(rf"^int {pacer.PROG_NAME}\(struct bpf_sock_ops \*", c_text, re.M)
