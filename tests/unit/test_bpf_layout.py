"""The ctypes mirrors in hostctl/datapath/pacer.py against the structs of hostctl/bpf/hostctl.h,
the header both BPF programs include and hostctl.core.bpfabi reads the sizes from.

The struct definitions are cut out of the header with a regex and compiled by gcc
into a tiny program that prints sizeof/offsetof/alignment of every struct and field;
the result is compared with ``pacer.MIRRORS`` (struct set, size, alignment, field names
in order, offsets, field sizes, and the field types: ``__u32`` must be ``c_uint32``,
``struct hc_flow_key`` the mirror of that struct, arrays of the same element and length).
The ``#define`` constants both sides rely on are compared too, and both programs are checked
to take their structs and sizes from the header (no struct or size of their own).

The two ``*_detects_*`` tests feed the checker a C text or a mirror with one extra
field, to show that a change made on one side only is caught. No root needed.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hostctl.core import bpfabi, pace, plan
from hostctl.core.bpfabi import STRUCT_RE, parse_structs
from hostctl.core.bpfabi import strip_comments as _strip_comments
from hostctl.datapath import classifier, pacer
from hostctl.datapath.classifier import bpf_dir

HEADER = bpf_dir() / "hostctl.h"  # the package's copy (hostctl/bpf), the one the programs include
PACE_SRC = HEADER.with_name("hc_pace.c")
CLASSIFY_SRC = HEADER.with_name("tl_classify.c")
CLASSIFIER_STRUCTS = {"hc_job_class", "hc_job_stats", "hc_ctl"}  # bcc builds their Python types: no mirrors
GCC = shutil.which("gcc")


def needs_gcc(fn):
    """gcc compiles the layout probe. Without it the test is skipped for a user without root;
    as root (CI, where scripts/setup.sh installs gcc) a missing gcc is an error, not a skip."""

    def run(*args, **kwargs):
        if GCC is None:
            if os.geteuid() == 0:
                pytest.fail("gcc is not installed: run scripts/setup.sh (it installs gcc for this test)")
            pytest.skip("gcc is not installed (needed to compile the layout probe)")
        return fn(*args, **kwargs)

    return functools.wraps(fn)(run)

C_TYPES = {"__u8": ctypes.c_uint8, "__u16": ctypes.c_uint16, "__u32": ctypes.c_uint32, "__u64": ctypes.c_uint64,
           "__s8": ctypes.c_int8, "__s16": ctypes.c_int16, "__s32": ctypes.c_int32, "__s64": ctypes.c_int64}


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
    if set(c) - CLASSIFIER_STRUCTS != set(mirrors):
        bad.append(f"structs in hostctl.h {sorted(set(c) - CLASSIFIER_STRUCTS)} != mirrors {sorted(mirrors)}")
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
    return HEADER.read_text()


def test_every_struct_is_parsed(c_text):
    structs = parse_structs(c_text)
    assert set(structs) == {"hc_flow_key", "hc_remote_key", "hc_port_key", "hc_rate", "hc_flow", "hc_burst",
                            "hc_pace_ctl", "hc_adopt", *CLASSIFIER_STRUCTS}
    assert all(structs.values())
    assert structs == bpfabi.STRUCTS  # what the package read at import is this header


# The kernel's own types that hc_pace.c declares (the context of a TCP iterator program, which no header
# declares, and the head of struct sock_common, whose header is slow to compile): not shared with the
# daemon, so not in hostctl.h.
KERNEL_CONTEXT = re.compile(r"^struct (bpf_iter_meta|bpf_iter__tcp|sock_common) \{.*?^\};", re.S | re.M)


def test_the_programs_take_structs_and_sizes_from_the_header():
    """Neither program defines a struct or a size of its own: one definition, in hostctl.h."""
    for src in (PACE_SRC, CLASSIFY_SRC):
        text = src.read_text()
        assert re.search(r'^#include "hostctl.h"', text, re.M), src.name
        assert parse_structs(KERNEL_CONTEXT.sub("", text)) == {}, f"{src.name} defines structs of its own"
        assert not re.search(r"^#define\s+(HC_|HP_(?!TCP_))", text, re.M), f"{src.name} defines a shared value"
    assert len(KERNEL_CONTEXT.findall(PACE_SRC.read_text())) == 3


@needs_gcc
def test_mirrors_match_the_c_structs(c_text, tmp_path):
    c = c_layout(c_text, tmp_path)
    assert layout_mismatches(c, pacer.MIRRORS) == []
    # what the program and pacer.py exchange has a fixed size (a map created with another
    # size would be refused by bcc's update, so spell them out)
    # (the classifier's structs too: classifier.py builds keys of these sizes; bcc makes its
    # Key/Leaf types from the C text, and a key of another size would be refused)
    assert {n: c[n]["size"] for n in c} == {"hc_flow_key": 40, "hc_remote_key": 20, "hc_port_key": 4, "hc_rate": 8,
                                           "hc_flow": 96, "hc_burst": 72, "hc_pace_ctl": 64, "hc_adopt": 48, "hc_job_class": 8,
                                           "hc_job_stats": 48, "hc_ctl": 40}
    assert [f[:3] for f in c["hc_remote_key"]["fields"]] == [["raddr", 0, 16], ["rport", 16, 2], ["pad", 18, 2]]


def test_classifier_maps():
    """tl_classify.c's maps, with the key (hash) or value (array) types of hostctl.h."""
    classify = CLASSIFY_SRC.read_text()
    maps = dict(re.findall(r"^BPF_(?:HASH|ARRAY)\((\w+), ([^,]+),", classify, re.M))
    assert maps == {"hc_flows": "struct hc_flow_key", "hc_ports": "__u32", "hc_remotes": "struct hc_remote_key",
                    "hc_job_class": "struct hc_job_class", "hc_job_stats": "struct hc_job_stats",
                    "hc_ctl": "struct hc_ctl"}  # hash maps: the key type; arrays: the value type
    # the maps table of the header comment names every map
    top = classify[:classify.index("*/")]
    assert all(re.search(rf"^ \*   {m}\s", top, re.M) for m in maps), "a map is missing from the table at the top"
    # every map of both programs is named hc_*, and the header lists them all
    pace_maps = re.findall(r"^BPF_(?:HASH|ARRAY|RINGBUF_OUTPUT)\((\w+)", PACE_SRC.read_text(), re.M)
    assert all(m.startswith("hc_") and len(m) <= 15 for m in [*maps, *pace_maps])  # 15: kernel name length
    listed = HEADER.read_text()[:HEADER.read_text().index("*/")]
    assert all(re.search(rf"\b{m}\b", listed) for m in [*maps, *pace_maps])


@needs_gcc
def test_checker_detects_a_field_added_in_c_only(c_text, tmp_path):
    changed = c_text.replace("    __u64 setopt_errors;     /* failed bpf_setsockopt calls */",
                             "    __u64 setopt_errors;     /* failed bpf_setsockopt calls */\n    __u64 extra;", 1)
    assert changed != c_text, "the hc_pace_ctl.setopt_errors line of hostctl.h changed: update this test"
    bad = layout_mismatches(c_layout(changed, tmp_path), pacer.MIRRORS)
    assert any("hc_pace_ctl: fields" in b for b in bad) and any("hc_pace_ctl: sizeof" in b for b in bad), bad
    # a renamed field (same sizes and offsets) is caught too
    swapped = c_text.replace("    __u8 side;", "    __u8 side2;", 1)
    assert swapped != c_text
    assert any("hc_port_key: fields" in b for b in layout_mismatches(c_layout(swapped, tmp_path), pacer.MIRRORS))


@needs_gcc
def test_checker_detects_a_field_added_in_the_mirror_only(c_text, tmp_path):
    class CtlExtra(ctypes.Structure):
        _fields_ = [*pacer.CtlC._fields_, ("extra", ctypes.c_uint64)]

    class RateSigned(ctypes.Structure):  # same size and offsets, another type
        _fields_ = [("rate_Bps", ctypes.c_int32), ("pad", ctypes.c_uint32)]

    c = c_layout(c_text, tmp_path)
    bad = layout_mismatches(c, {**pacer.MIRRORS, "hc_pace_ctl": CtlExtra, "hc_rate": RateSigned})
    assert any("hc_pace_ctl: fields" in b for b in bad), bad
    assert any("hc_pace_ctl: sizeof" in b for b in bad), bad
    assert any("hc_rate.rate_Bps: C type" in b for b in bad), bad
    assert any("structs in hostctl.h" in b for b in layout_mismatches(c, {**pacer.MIRRORS, "hc_new": CtlExtra}))


def test_constants_match(c_text):
    defines = bpfabi.parse_defines(c_text)
    assert defines["HP_UNLIMITED"] == pacer.UNLIMITED
    assert defines["HP_SLOT_WATCH"] == pacer.HP_SLOT_WATCH == pace.WATCH_SLOT
    assert defines["HP_F_CLOSED"] == pacer.HP_F_CLOSED
    assert defines["HP_F_SETOPT_ERR"] == pacer.HP_F_SETOPT_ERR
    assert defines["HP_CTL_TRACK_ALL"] == pacer.HP_CTL_TRACK_ALL
    assert defines["HP_CTL_RELEASE"] == pacer.HP_CTL_RELEASE
    assert defines["HP_CTL_KEY_CONTROL"] == pacer.HP_CTL_KEY_CONTROL
    assert defines["HP_CTL_KEY_COUNTERS"] == pacer.HP_CTL_KEY_COUNTERS
    assert (defines["HC_CTL_KEY_CONFIG"], defines["HC_CTL_KEY_COUNTERS"]) == (
        classifier.HC_CTL_KEY_CONFIG, classifier.HC_CTL_KEY_COUNTERS) == (0, 1)
    # the classifier's too: the daemon's config entry and the programs' counters entry
    assert re.search(r"^BPF_ARRAY\(hc_ctl, struct hc_ctl, 2\);", CLASSIFY_SRC.read_text(), re.M)
    pace_text = PACE_SRC.read_text()
    # one entry for the daemon's control words, one for the program's counters
    assert re.search(r"^BPF_ARRAY\(hc_pace_ctl, struct hc_pace_ctl, 2\);", pace_text, re.M)
    assert set(pacer.CTL_COUNTERS) < {f[0] for f in pacer.CtlC._fields_}
    assert {"local": defines["HP_SIDE_LOCAL"], "remote": defines["HP_SIDE_REMOTE"]} == pacer.SIDE
    # the sizes the loaders pass with -D are the header's
    assert [f"-D{n}={defines[n]}" for n in pacer.SIZES] == [f for f in pacer.cflags() if f.startswith("-D")]
    assert pacer.cflags(64)[1] == "-DHC_MAX_FLOWS=64"
    assert (plan.MAX_FLOW_ENTRIES, plan.MAX_PORT_ENTRIES, plan.MAX_REMOTE_ENTRIES, plan.MAX_JOB_SLOTS) == (
        defines["HC_MAX_FLOWS"], defines["HC_MAX_PORTS"], defines["HC_MAX_REMOTES"], defines["HC_MAX_SLOTS"])
    assert (pace.MAX_FLOW_SELECTORS, pace.MAX_PORT_SELECTORS, pace.MAX_REMOTE_SELECTORS) == (
        defines["HC_MAX_FLOWS"], defines["HC_MAX_PORTS"], defines["HC_MAX_REMOTES"])
    # the map names pacer.py opens and pins are the maps the program defines
    maps = re.findall(r"^BPF_(?:HASH|ARRAY|RINGBUF_OUTPUT)\((\w+)", pace_text, re.M)
    assert sorted(maps) == sorted(pacer.MAP_NAMES)
    # `hostctl clean` knows the pins of the names before hc_*
    assert all(old.startswith("hp_") for old in pacer.OLD_MAP_NAMES)
    assert sorted(pacer.OLD_MAP_NAMES.values()) == sorted(pacer.MAP_NAMES)
    assert re.search(rf"^int {pacer.PROG_NAME}\(struct bpf_sock_ops \*", pace_text, re.M)
