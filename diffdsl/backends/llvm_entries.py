"""The entries of a kernel's module (llvm.py): `diffdsl_rows`, the loop over rows that
threads call, and two CPython builtins, `diffdsl_point` (one row) and `diffdsl_batch` (rows
begin..end), which take NumPy arrays the METH_FASTCALL way and read their data pointers at
`data_offset`. Each calls the graph's segments with the port array `%p`, the scratch and no
context for loops split over threads (null: they run on the caller's thread). One row with
a context, `diffdsl_spread(ports, scratch, context)`, splits them (llvm_spread), and
`diffdsl_spread_bytes()` says how much memory a slice of theirs needs (0: none spread)."""

from __future__ import annotations


def entries(plan, n_ports: int, t: str, data_offset: int, spread_bytes: int) -> list[str]:
    """The entries (module docstring) over the segments of `plan` (llvm._Layout)."""
    calls = [f"  call void @seg{k}(ptr %p, ptr %s, ptr %x)" for k in range(len(plan.segments))]
    spread = calls
    calls = [line.replace("%x", "null") for line in calls]
    rows = [
        "define void @diffdsl_rows(ptr noalias %ports, ptr noalias %strides, i64 %begin, "
        "i64 %end, ptr noalias %s) nounwind {",
        "entry:",
        f"  %p = alloca ptr, i64 {max(n_ports, 1)}",
    ]
    for k in range(n_ports):  # read once, before the loop
        rows += [
            f"  %base{k}.a = getelementptr inbounds ptr, ptr %ports, i64 {k}",
            f"  %base{k} = load ptr, ptr %base{k}.a",
            f"  %stride{k}.a = getelementptr inbounds i64, ptr %strides, i64 {k}",
            f"  %stride{k} = load i64, ptr %stride{k}.a",
        ]
    rows += [
        "  %empty = icmp sge i64 %begin, %end",
        "  br i1 %empty, label %done, label %loop",
        "loop:",
        "  %r = phi i64 [ %begin, %entry ], [ %next, %loop ]",
    ]
    for k in range(n_ports):
        rows += [
            f"  %off{k} = mul i64 %r, %stride{k}",
            f"  %row{k} = getelementptr inbounds {t}, ptr %base{k}, i64 %off{k}",
            f"  %slot{k} = getelementptr inbounds ptr, ptr %p, i64 {k}",
            f"  store ptr %row{k}, ptr %slot{k}",
        ]
    rows += calls
    rows += [
        "  %next = add i64 %r, 1",
        "  %more = icmp slt i64 %next, %end",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}",
        "",
    ]
    # CPython builtins (METH_FASTCALL) whose arguments are NumPy arrays: one row with the
    # ports' arrays and the scratch; rows with the ports, their steps, the scratch and
    # [begin, end].
    one = []
    if plan.areas:
        # The point entry's loops run in a function of their own, whose arguments say that
        # the scratch is no input's memory: the optimiser then keeps a loop's sum in a
        # register and vectorises it, as in `diffdsl_rows` (inlined, it cannot tell).
        one = ["define internal void @diffdsl_one(ptr noalias %p, ptr noalias %s) noinline "
               "nounwind {", "entry:", *calls, "  ret void", "}", ""]
        calls = ["  call void @diffdsl_one(ptr %p, ptr %s)"]
        if not spread_bytes:
            spread = calls
    point = _fastcall("diffdsl_point", n_ports + 1, n_ports, data_offset,
                      [f"  %s = getelementptr inbounds i8, ptr %d{n_ports}, i64 0"] + calls)
    batch = _fastcall("diffdsl_batch", n_ports + 3, n_ports, data_offset, [
        f"  %begin = load i64, ptr %d{n_ports + 2}",
        f"  %end.a = getelementptr inbounds i64, ptr %d{n_ports + 2}, i64 1",
        "  %end = load i64, ptr %end.a",
        f"  call void @diffdsl_rows(ptr %p, ptr %d{n_ports}, i64 %begin, i64 %end, "
        f"ptr %d{n_ports + 1})"])
    point += ["@_Py_NoneStruct = external global i8", "declare void @Py_IncRef(ptr)", ""]
    spread = ["define void @diffdsl_spread(ptr noalias %p, ptr noalias %s, ptr %x) nounwind {",
              "entry:", *spread, "  ret void", "}", "",
              "define i64 @diffdsl_spread_bytes() nounwind {", "entry:",
              f"  ret i64 {spread_bytes}", "}", ""]
    return rows + one + point + batch + spread


def _fastcall(name: str, n_args: int, n_ports: int, data_offset: int, body: list) -> list:
    """A METH_FASTCALL function: `%d{k}` is the data pointer of argument k (a NumPy array),
    the first `n_ports` also stored in the port array `%p` that the segments read; then
    `body`; it returns None (a new reference), or NULL for a wrong number of arguments."""
    out = [f"define ptr @{name}(ptr %self, ptr %args, i64 %nargs) nounwind {{", "entry:",
           f"  %ok = icmp eq i64 %nargs, {n_args}",
           "  br i1 %ok, label %run, label %bad", "bad:", "  ret ptr null", "run:",
           f"  %p = alloca ptr, i64 {max(n_ports, 1)}"]
    for k in range(n_args):
        out += [f"  %a{k}.a = getelementptr inbounds ptr, ptr %args, i64 {k}",
                f"  %a{k} = load ptr, ptr %a{k}.a",
                f"  %d{k}.f = getelementptr inbounds i8, ptr %a{k}, i64 {data_offset}",
                f"  %d{k} = load ptr, ptr %d{k}.f"]
        if k < n_ports:
            out += [f"  %slot{k} = getelementptr inbounds ptr, ptr %p, i64 {k}",
                    f"  store ptr %d{k}, ptr %slot{k}"]
    return out + body + ["  call void @Py_IncRef(ptr @_Py_NoneStruct)",
                         "  ret ptr @_Py_NoneStruct", "}", ""]
