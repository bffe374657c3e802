"""uopgrad.renderer.merge: rendered kernels as one source (helpers once, pragmas first, names apart)."""

from __future__ import annotations

import re

from uopgrad.renderer.merge import groups, merge, split

HEADER = re.compile(r"^__kernel\s+void\s+(\w+)\s*\(", re.MULTILINE)
HELP = "static inline float twice(float x) {\n  /* doubles */\n  return x * 2.0f;\n}"
OTHER = "static inline float half(float x) {\n  return x * 0.5f;\n}"


def kernel(name: str, *helpers: str, pragma: str = "#pragma OPENCL FP_CONTRACT OFF") -> str:
    return "\n".join(
        [pragma, *helpers, "", f"__kernel void {name}(__global float* a) {{", "  a[0] = 1.0f;", "}", ""]
    )


def test_split_finds_the_items_and_the_kernel():
    parts = split(kernel("k", HELP, OTHER), HEADER)
    assert parts is not None
    items, name, body = parts
    assert items == ["#pragma OPENCL FP_CONTRACT OFF", HELP, OTHER] and name == "k"
    assert body.startswith("__kernel void k(") and body.rstrip().endswith("}")


def test_a_source_of_two_kernels_or_none_is_not_split():
    assert split(kernel("a") + kernel("b"), HEADER) is None
    assert split("int x;\n", HEADER) is None
    assert merge([kernel("a"), "int x;\n"], HEADER) is None


def test_merge_keeps_each_helper_once_and_pragmas_first():
    fp64 = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"
    merged = merge([kernel("a", HELP), kernel("b", HELP, OTHER, pragma=fp64)], HEADER)
    assert merged is not None
    src, names = merged
    assert names == ["a", "b"]
    assert src.count("inline float twice") == 1 and src.count("inline float half") == 1
    assert src.index(fp64) < src.index("static inline") < src.index("__kernel void a(") < src.index("void b(")


def test_merge_renames_a_repeated_name_and_only_the_name():
    merged = merge([kernel("k"), kernel("k"), kernel("j"), kernel("k")], HEADER)
    assert merged is not None
    src, names = merged
    assert names == ["k", "k_m1", "j", "k_m3"]
    assert re.findall(r"__kernel void (\w+)\(", src) == names  # "__kernel" itself is untouched


def test_groups_hold_distinct_names():
    srcs = [kernel("k"), kernel("k"), kernel("j"), "int x;\n", kernel("k")]
    assert groups(srcs, HEADER) == [[0, 2], [1], [3], [4]]
