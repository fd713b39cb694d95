"""Examples that end each command's `--help` (run by tests/test_cli_help.py, from the
repository root, so they cannot go stale)."""

EXAMPLES = {
    "eval": [
        "diffdsl eval examples/det3.dd --inputs A='[[2,0,1],[1,3,2],[1,1,1]]'",
        "diffdsl eval examples/matrix.dd --inputs A='[[1,2,3],[4,5,6],[7,8,10]]' v='[1,2,3]' "
        "--json",
    ],
    "grad": [
        "diffdsl grad examples/det3.dd --inputs A='[[2,0,1],[1,3,2],[1,1,1]]'",
        "diffdsl grad examples/rosenbrock.dd --inputs x='[1.2, 1, 0.8, 1]' --json",
        "diffdsl grad examples/matrix.dd --of q --wrt v "
        "--inputs A='[[1,2,3],[4,5,6],[7,8,10]]' v='[1,2,3]'",
    ],
    "jacobian": [
        "diffdsl jacobian examples/matrix.dd --of w --wrt v "
        "--inputs A='[[1,2,3],[4,5,6],[7,8,10]]' v='[1,2,3]'",
        "diffdsl jacobian examples/det2.dd --inputs A='[[[1,2],[3,4]],[[0,1],[1,0]]]' --json",
    ],
    "hessian": [
        "diffdsl hessian examples/rosenbrock.dd --inputs x='[1, 1, 1, 1]'",
        "diffdsl hessian examples/det2.dd --inputs A='[[1,2],[3,4]]' --json",
    ],
    "vjp": [
        "diffdsl vjp examples/forum_scalar.dd --inputs x='[[1]]' --seed '[[1]]'",
        "diffdsl vjp examples/matrix.dd --of w --inputs A='[[1,2,3],[4,5,6],[7,8,10]]' "
        "v='[1,2,3]' --seed '[1,0,0]'",
    ],
    "jvp": [
        "diffdsl jvp examples/det2.dd --inputs A='[[1,2],[3,4]]' --tangents A='[[1,0],[0,0]]'",
        "diffdsl jvp examples/rosenbrock.dd --inputs x='[1, 1, 1, 1]' "
        "--tangents x='[1, 0, 0, 0]' --json",
    ],
    "hvp": [
        "diffdsl hvp examples/rosenbrock.dd --inputs x='[1.2, 1, 0.8, 1]' "
        "--tangents x='[1, 0, 0, 0]'",
        "diffdsl hvp examples/det3.dd --inputs A='[[2,0,1],[1,3,2],[1,1,1]]' "
        "--tangents A='[[1,0,0],[0,1,0],[0,0,1]]' --json",
    ],
    "diff": [
        "diffdsl diff examples/det2.dd",
        "diffdsl diff examples/det2.dd --latex",
        "diffdsl diff examples/piecewise.dd --simplify",
    ],
    "check": [
        "diffdsl check examples/det3.dd",
        "diffdsl check examples/rosenbrock.dd --domain x=-2:2",
        "diffdsl check examples/gauss.dd --inputs S='[[2,1,0],[1,2,1],[0,1,2]]' "
        "x='[1,0,1]' mu='[0,0,0]'",
    ],
    "graph": [
        "diffdsl graph examples/det2.dd",
        "diffdsl graph examples/det2.dd --grad",
    ],
    "export": [
        "diffdsl export examples/det3.dd --grad --hessian --c /tmp/diffdsl-export/det3",
        "diffdsl export examples/rosenbrock.dd --grad --shared /tmp/diffdsl-export/librosen",
    ],
    "cache": [
        "diffdsl cache info",
        "diffdsl cache info --json",
    ],
}


def epilog(command: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[command])
