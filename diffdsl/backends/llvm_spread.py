"""A long loop of a kernel's top level split over threads within one evaluation.

A batch of rows is split over the spinning pool's threads (pool.py) a slice of rows each,
but one evaluation ran on one thread, however long its loops: a GMM's gradient at d = 64,
k = 100 is one pass of 0.1 s over 1,000 points. A loop here that `spreads` (no state
carried, no min or max, enough work) runs its iterations in a function of their own,
`@r{i}.iter(captures, sums, rows, body's scratch, [one iteration's sums,] streams...,
begin, end)`, whose pointers are `noalias` arguments, as they were when the loop was
written inline in its segment (the optimiser keeps the captures in registers across it).
It is `noinline`: its two callers, the loop's place and the slice function, would each get
a copy of the loop, compiled twice.

The point call of such a kernel (`diffdsl_spread`, llvm_entries) takes the pool's context,
six int64 words (`CONTEXT`): the slots, the number of slices, the area for the slices' own
sums and scratch, the pool's `diffdsl_pool_run` and `diffdsl_pool_finish`, and a mask that
collects the workers found asleep. The loop posts slices 1.. to the pool's workers by the
pool's own machine code, each slice a call of `@r{i}.slice`, which unpacks the pointers
and gives slice w its own sums and scratch at area + (w - 1) * stride; slice 0 runs on this
thread in the loop's own areas. Once all are done, each sum is slice 0's plus slice 1's and
so on, in that order: the same sum as one thread's to rounding (the order of the additions
is not one thread's), the same from call to call for a given number of threads. Every other
entry passes no context (null), and the loop runs its iterations in one call of `iter`:
batches (whose rows are already on the pool), the JAX and PyTorch bridges and the C export.
"""

from __future__ import annotations

from .llvm_loops import LOCAL, add_loop, gate, iterate

# Work (nodes written out, `Region.work`) from which a loop spreads: about 50 us on one
# core, where the call through ctypes and the hand-over (a few us) are small beside it.
SPREAD_WORK = 1_000_000
# ... and at least this many times its sums: each slice starts and adds its own.
SUMS_WORK = 64
CONTEXT = ("slots", "count", "area", "run", "finish", "away")
LINE = 128  # a slice's area starts on a pair of cache lines of its own (cpu._rows_apart)


def spreads(region) -> bool:
    """Whether region `region` of a kernel's top level may be split over threads."""
    return not (region.winners or region.carry) and region.n >= 2 and \
        gate(region) is None and region.work >= max(SPREAD_WORK, SUMS_WORK * region.sums)


def _parts(region, area: dict) -> tuple[int, int, int]:
    """A slice's area, in elements: where its own iteration's sums lie (0: none, they are
    the iteration function's locals, or the body adds its sums itself), where its scratch
    for the body lies, and its size."""
    sums = region.sums if not area["adds"] and region.sums > LOCAL else 0
    return region.sums if sums else 0, region.sums + sums, region.sums + sums + area["body_size"]


def stride(region, area: dict, t: str) -> int:
    """Bytes between two slices' areas."""
    size = 4 if t == "float" else 8
    return -(-_parts(region, area)[2] * size // LINE) * LINE


def spread_loop(plan, region, i: int, t: str, prefix: str, zero: str, context: str,
                where: dict, block: list) -> list[str]:
    """Region node i's loop, with its pointers `where` (llvm_loops.loop) and the pool's
    context at `context`: its iteration function and slice function added to
    `plan.functions`; the code that calls them."""
    r = f"%r{i}"
    sums_at, body_at, _ = _parts(region, plan.areas[i])
    names = ["cap", "acc", "rows", "body"] + (["sums"] if sums_at else [])
    pointers = [where[name] for name in names] + where["bases"]
    params = [f"%{name}" for name in names] + [f"%b{j}" for j in range(len(where["bases"]))]
    inner = dict(where, **{name: f"%{name}" for name in names},
                 bases=params[len(names):])
    allocas = []
    if not sums_at and "sums" in where:  # a few: locals of the iteration function
        inner["sums"] = f"{r}.sums"
        allocas.append(f"{r}.sums = alloca {t}, i64 {max(region.sums, 1)}")
    lines = iterate(region, i, t, prefix, zero, inner,
                    ("%begin", "%end", f"br i1 %some, label %r{i}.head, label %r{i}.done"),
                    ["entry"])
    allocas += [line for line in lines if " = alloca " in line]
    plan.functions += [
        f"define internal void @r{i}.iter(" + ", ".join(f"ptr noalias {p}" for p in params) +
        ", i64 %begin, i64 %end) noinline nounwind {", "entry:",
        *("  " + line for line in allocas), "  %some = icmp slt i64 %begin, %end",
        *("  " + line for line in lines if " = alloca " not in line), "  ret void", "}", ""]
    size = 4 if t == "float" else 8
    unpack = ["%own = icmp eq i64 %begin, 0"]
    for k, p in enumerate(params):
        unpack += [f"{p}.a = getelementptr inbounds ptr, ptr %c, i64 {k}",
                   f"{p}.0 = load ptr, ptr {p}.a"]
    for name, at in (("acc", 0), ("body", body_at), ("sums", sums_at)):
        if name in names:  # slice 0 in the loop's own areas, the others in theirs
            unpack += [f"%{name}.w = getelementptr inbounds i8, ptr %w, i64 {at * size}",
                       f"%{name}.s = select i1 %own, ptr %{name}.0, ptr %{name}.w"]
    mine = [f"%{name}.s" if name in ("acc", "body", "sums") else f"%{name}.0"
            for name in names] + [f"{p}.0" for p in params[len(names):]]
    plan.functions += [
        f"define internal void @r{i}.slice(ptr noalias %c, ptr %unused, i64 %begin, "
        "i64 %end, ptr noalias %w) nounwind {", "entry:", *("  " + line for line in unpack),
        f"  call void @r{i}.iter(" + ", ".join(f"ptr {p}" for p in mine) +
        ", i64 %begin, i64 %end)", "  ret void", "}", ""]
    return _caller(region, i, t, pointers, context, stride(region, plan.areas[i], t), block)


def _caller(region, i: int, t: str, pointers: list, context: str, step: int,
            block: list) -> list[str]:
    """The loop's code where it stands: with no context, one call of its iterations; with
    one, its slices on the pool, then each slice's sums added to slice 0's in turn."""
    r, n, c = f"%r{i}", region.n, f"r{i}"
    args = ", ".join(f"ptr {p}" for p in pointers)
    out = [f"{r}.alone = icmp eq ptr {context}, null",
           f"br i1 {r}.alone, label %{c}.one, label %{c}.many", f"{c}.one:",
           f"call void @r{i}.iter({args}, i64 0, i64 {n})", f"br label %{c}.joined",
           f"{c}.many:", f"{r}.ctx = alloca ptr, i64 {len(pointers)}"]
    for k, p in enumerate(pointers):
        out += [f"{r}.ctx{k} = getelementptr inbounds ptr, ptr {r}.ctx, i64 {k}",
                f"store ptr {p}, ptr {r}.ctx{k}"]
    for k, word in enumerate(CONTEXT[:-1]):
        kind = "i64" if word == "count" else "ptr"
        out += [f"{r}.{word}.a = getelementptr inbounds i64, ptr {context}, i64 {k}",
                f"{r}.{word} = load {kind}, ptr {r}.{word}.a"]
    call = (f"(ptr {r}.slots, i64 {r}.n, i64 {r}.fn, ptr {r}.ctx, ptr null, i64 {n}, "
            f"ptr {r}.w0, i64 {step})")
    away = CONTEXT.index("away")
    out += [f"{r}.few = icmp slt i64 {r}.count, {n}",
            f"{r}.n = select i1 {r}.few, i64 {r}.count, i64 {n}",
            f"{r}.w0 = getelementptr inbounds i8, ptr {r}.area, i64 {-step}",
            f"{r}.fn = ptrtoint ptr @r{i}.slice to i64",
            f"{r}.away = call i64 {r}.run{call}", f"{r}.asleep = icmp ne i64 {r}.away, 0",
            f"br i1 {r}.asleep, label %{c}.late, label %{c}.ran", f"{c}.late:",
            # workers asleep: their slices run here, and the mask tells the caller to wake
            # them for the next call (pool.Pool.spread_done)
            f"call void {r}.finish{call}",
            f"{r}.mask.a = getelementptr inbounds i64, ptr {context}, i64 {away}",
            f"{r}.mask = load i64, ptr {r}.mask.a", f"{r}.mask.n = or i64 {r}.mask, {r}.away",
            f"store i64 {r}.mask.n, ptr {r}.mask.a", f"br label %{c}.ran", f"{c}.ran:"]
    if region.sums:
        out += [f"{r}.more = icmp sgt i64 {r}.n, 1",
                f"br i1 {r}.more, label %{c}.add, label %{c}.joined", f"{c}.add:",
                f"{r}.k = phi i64 [ 1, %{c}.ran ], [ {r}.k.n, %{c}.sum.done ]",
                f"{r}.k.o = sub i64 {r}.k, 1", f"{r}.k.b = mul i64 {r}.k.o, {step}",
                f"{r}.part = getelementptr inbounds i8, ptr {r}.area, i64 {r}.k.b"]
        out += add_loop(f"{c}.sum", pointers[1], f"{r}.part", 0, region.sums, t, [f"{c}.add"])
        out += [f"{r}.k.n = add i64 {r}.k, 1", f"{r}.k.m = icmp slt i64 {r}.k.n, {r}.n",
                f"br i1 {r}.k.m, label %{c}.add, label %{c}.joined"]
    else:
        out.append(f"br label %{c}.joined")
    block[0] = f"{c}.joined"
    return out + [f"{c}.joined:"]
