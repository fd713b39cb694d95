"""`diffdsl check`'s report for people: one line per output and input, then the verdict.

The report itself (`check.check`, `Program.check`) is JSON-ready data; this only words it.
"""

from __future__ import annotations

from . import domains
from .check import RANK


def format_check(report: dict, ranges: dict | None = None) -> str:
    """Human-readable lines for a `check` report; first, where the points came from when
    `ranges` (`domains.sampling_ranges`, the report's `.ranges`) says it was not the
    default, or how many were given (the report's `.given`)."""
    lines = [domains.describe(name, entry) for name, entry in (ranges or {}).items()
             if entry["from"] != "default"]
    given = getattr(report, "given", 0)
    if given:
        lines.append("at the point given" if given == 1 else f"at the {given} points given")
    outs = list(dict.fromkeys(list(report["symbolic"]) + list(report["numeric"])))
    for out in outs:
        sym_out = report["symbolic"].get(out, {})
        num_out = report["numeric"].get(out, {})
        for name in dict.fromkeys(list(sym_out) + list(num_out)):
            parts = []
            sym = sym_out.get(name)
            if sym is not None:
                parts.append(_symbolic_phrase(sym))
            num = num_out.get(name)
            if num is not None:
                verdict = "ok" if num["ok"] else "FAILED"
                if num.get("checked", 1):
                    parts.append(f"finite differences max rel err "
                                 f"{num['max_rel_error']:.2g} {verdict}")
                else:
                    parts.append("finite differences: no point where the output is finite")
                if not num["ok"] and num.get("worst_element"):
                    parts[-1] += f" (worst at {out}{_index(num['worst_element'])}, " \
                                 f"{num.get('worst_kind')})"
            lines.append(f"d/d{name} of {out}: " + ", ".join(parts))
            for m in (sym or {}).get("mismatches", []):
                lines.append(f"MISMATCH d/d{name}{_index(m['input_index'])} of "
                             f"{out}{_index(m['output_index'])}: ours {m['ours']}  "
                             f"sympy {m['sympy']}")
            if sym is not None and sym["status"] == "skipped" and sym.get("reason"):
                lines.append(f"  skipped: {sym['reason']}")
    lines += _verdict(report)
    return "\n".join(lines)


def _verdict(report: dict) -> list[str]:
    """The last lines: ok, a failure, or what was not checked and how to check it."""
    status = report.get("status", "ok" if report["ok"] else "mismatch")
    if status == "ok":
        return ["ok"]
    if status == "mismatch":
        return ["FAILED: derivatives disagree"]
    pairs = report.get("unchecked", [])
    if not pairs:
        return ["NOT CHECKED: the program has no inputs, so it has no derivatives to compare"]
    which = ", ".join(f"d/d{name} of {out}" for out, name in pairs)
    return [f"NOT CHECKED: nothing was compared for {which}: SymPy skipped every element, "
            "and the output is finite at none of the points",
            "  give points inside the program's domain: --inputs NAME=VALUE ... (a batch of "
            "values is a point a row), or --domain NAME=LO:HI"]


def _symbolic_phrase(sym: dict) -> str:
    n = sym["elements"]
    noun = "element" if n == 1 else "elements"
    status = sym["status"]
    if status == "mismatch":
        bad = sym["counts"].get("mismatch", 0)
        return f"symbolic MISMATCH ({bad} of {n} {noun})"
    counts = sym.get("counts", {})
    if len(counts) > 1:
        detail = ", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=RANK.__getitem__))
        return f"symbolic {status} ({n} {noun}: {detail})"
    return f"symbolic {status} ({n} {noun})"


def _index(index) -> str:
    return f"[{', '.join(map(str, index))}]" if index else ""

