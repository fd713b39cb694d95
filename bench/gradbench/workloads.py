"""GradBench's default workloads: the sizes its tools are compared on and its inputs, drawn the
way its evals draw them (python/gradbench/gradbench/evals/*/run.py in GradBench), so that the
C++ reference and diffdsl see the same numbers as in a GradBench run.

Each eval draws its sizes in order from one seeded generator, so every size is drawn even when
only some are run. A `Case` holds one size: the consts to put in the eval's `.dd` program, the
arrays for diffdsl and the JSON input for GradBench's hand-written C++ ("manual" tool).
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import manual
import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 31337


@dataclass
class Eval:
    """How diffdsl and the C++ compute one eval's two functions, and how to compare them."""

    name: str
    primal: str  # the C++ function giving the value
    derivative: str  # the C++ function giving the derivative
    value_of: str  # the .dd output compared with the C++ value
    of: str  # the .dd output differentiated
    wrt: list[str]  # differentiated inputs, in the order the C++ writes its derivative
    newton: bool = False  # k-means' "dir": the gradient over the Hessian's diagonal
    batch: str = ""  # BA, HT: the module (ba.py) running a program for one observation

    @property
    def program(self) -> Path:
        return HERE / f"{self.name}.dd"


EVALS = {
    "det": Eval("det", "primal", "gradient", "d", "d", ["A"]),
    "lse": Eval("lse", "primal", "gradient", "lse", "lse", ["x"]),
    "llsq": Eval("llsq", "primal", "gradient", "cost", "cost", ["x"]),
    "kmeans": Eval("kmeans", "cost", "dir", "cost", "cost", ["C"], newton=True),
    "ode": Eval("ode", "primal", "gradient", "yf", "last", ["x"]),
    "gmm": Eval("gmm", "objective", "jacobian", "objective", "objective",
                ["alpha", "mu", "q", "l"]),
    "lstm": Eval("lstm", "objective", "jacobian", "loss", "loss", ["main", "extra"]),
    "ba": Eval("ba", "objective", "jacobian", "err", "err", ["rows", "cols", "vals"],
               batch="ba"),
    "ht": Eval("ht", "objective", "jacobian", "err", "err", ["jacobian"], batch="ht"),
}


@dataclass
class Case:
    """One size of one eval."""

    eval: str
    label: str
    consts: dict
    inputs: dict  # name -> array, for diffdsl
    cpp_input: dict = field(repr=False)  # the C++ tool's JSON input
    work: int = 0  # the size's product, which orders the eval's sizes
    dims: dict = field(default_factory=dict)  # the sizes, where no const holds them

    @property
    def sizes(self) -> dict:
        return self.dims or self.consts


def det_cases() -> list[Case]:
    np.random.seed(SEED)
    cases = []
    for ell in [5, 6, 7, 8, 9, 10, 11]:
        A = np.random.rand(ell * ell)
        cases.append(Case("det", f"ell={ell}", {"ell": ell}, {"A": A.reshape(ell, ell)},
                          {"A": A.tolist(), "ell": ell}, ell))
    return cases


def lse_cases() -> list[Case]:
    np.random.seed(SEED)
    cases = []
    for n in [2500, 5000, 10000, 20000, 40000, 80000, 160000, 320000, 640000, 1280000]:
        x = np.random.rand(n)
        cases.append(Case("lse", f"n={n}", {"n": n}, {"x": x}, {"x": x.tolist()}, n))
    return cases


def llsq_cases() -> list[Case]:
    np.random.seed(SEED)
    cases = []
    for n in [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8196, 16392]:
        m = 128
        x = np.random.rand(m)
        cases.append(Case("llsq", f"n={n},m={m}", {"n": n, "m": m}, {"x": x},
                          {"x": x.tolist(), "n": n}, n * m))
    return cases


def kmeans_cases() -> list[Case]:
    np.random.seed(SEED)
    combos = sorted([(k, n, d) for k in [10, 100, 1000] for n in [1000, 10000] for d in [8, 16]],
                    key=lambda v: v[0] * v[1] * v[2])
    cases = []
    for k, n, d in combos:
        points = np.random.rand(n, d)
        centroids = points[-k:]  # so that every cluster has a point, as GradBench's eval says
        cases.append(Case("kmeans", f"k={k},n={n},d={d}", {"n": n, "k": k, "d": d},
                          {"P": points, "C": centroids.copy()},
                          {"points": points.tolist(), "centroids": centroids.tolist()},
                          k * n * d))
    return cases


def ode_cases() -> list[Case]:
    np.random.seed(SEED)
    combos = sorted([(n, s) for n in [1000, 10000, 100000] for s in [1, 10, 100]],
                    key=lambda v: v[0] * v[1])
    cases = []
    for n, s in combos:
        x = np.random.rand(n)
        cases.append(Case("ode", f"n={n},s={s}", {"n": n, "s": s}, {"x": x},
                          {"x": x.tolist(), "s": s}, n * s))
    return cases


def gmm_cases() -> list[Case]:
    n, m, gamma = 1000, 0, 1.0
    combos = sorted([(d, k) for d in [2, 10, 20, 32, 64] for k in [5, 10, 25, 50, 100]],
                    key=lambda v: v[0] * v[1])
    cases = []
    for d, k in combos:
        rng = np.random.default_rng(seed=SEED)  # GradBench's generate(): a generator a size
        x = np.array([rng.normal(size=d) for _ in range(n)])
        alpha = rng.normal(size=k)
        mu = np.array([rng.uniform(size=d) for _ in range(k)])
        q = np.array([rng.normal(size=d) for _ in range(k)])
        lt = np.array([rng.normal(size=d * (d - 1) // 2) for _ in range(k)])
        cpp = {"d": d, "k": k, "n": n, "x": x.tolist(), "m": m, "gamma": gamma,
               "alpha": alpha.tolist(), "mu": mu.tolist(), "q": q.tolist(), "l": lt.tolist()}
        cases.append(Case("gmm", f"d={d},k={k},n={n}", {"n": n, "d": d, "k": k},
                          {"x": x, "alpha": alpha, "mu": mu, "q": q, "l": lt}, cpp, d * k))
    return cases


def lstm_cases() -> list[Case]:
    """GradBench's gen_lstm: the first c characters of its text as rows of bits (as many as the
    largest code of those characters needs), the parameters and state uniform in [0, 1)."""
    np.random.seed(SEED)
    full = _lstm_text()
    combos = sorted([(layers, c) for layers in [2, 4, 6] for c in [1024, 4096, 8192]],
                    key=lambda v: v[0] * v[1])
    cases = []
    for layers, c in combos:
        text = full[:c]
        bits = math.ceil(math.log2(max(ord(ch) for ch in text)))
        sequence = np.array([[float(bit) for bit in bin(ord(ch))[2:].zfill(bits)]
                             for ch in text])
        state = np.random.random((2 * layers, bits))
        main = np.random.random((2 * layers, 4 * bits))
        extra = np.random.random((3, bits))
        cpp = {"main_params": main.tolist(), "extra_params": extra.tolist(),
               "state": state.tolist(), "sequence": sequence.tolist()}
        cases.append(Case("lstm", f"l={layers},c={c}", {"l": layers, "c": c, "b": bits},
                          {"main": main, "extra": extra, "state": state,
                           "sequence": sequence}, cpp, layers * c))
    return cases


def ba_cases(last: int = 14) -> list[Case]:
    """GradBench's BA files 1 to 14 (its default): n cameras, m points, p observations, each a
    copy of the file's one camera, point, weight and feature; observation i sees camera i % n
    and point i % m (cpp/gradbench/evals/ba.hpp)."""
    names = _gradbench_names("evals/ba/data")
    cases = []
    for i in range(1, last + 1):
        lines = _gradbench_file(next(n for n in names if n.startswith(f"ba{i}_")),
                                "evals/ba/data").splitlines()
        n, m, p = (int(v) for v in lines[0].split())
        cam, x, w, feat = ([float(v) for v in line.split()] for line in lines[1:5])
        obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1)
        data = {"cams": np.tile(cam, (n, 1)), "X": np.tile(x, (m, 1)), "w": np.full(p, w[0]),
                "feats": np.tile(feat, (p, 1)), "obs": obs}
        cpp = {"n": n, "m": m, "p": p, "cam": cam, "x": x, "w": w[0], "feat": feat}
        cases.append(Case("ba", f"n={n},m={m},p={p}", {}, data, cpp, p,
                          {"n": n, "m": m, "p": p}))
    return sorted(cases, key=lambda c: c.work)


def ht_cases(last: int = 12) -> list[Case]:
    """GradBench's HT inputs 1 to 12 (its default: "complicated" correspondences, the "big"
    model, evals/ht/data/complicated_big) as its io.py reads them. Where the checkout lacks a
    file (a mirror without its large files: hand12, c = 100,000), the correspondences, points
    and barycentric coordinates are drawn from a seeded generator and theta is hand11's."""
    folder = "evals/ht/data/complicated_big"
    model = {name: _gradbench_file(f"{name}.txt", f"{folder}/model").splitlines()
             for name in ("bones", "vertices", "triangles")}
    bones = [line.split(":") for line in model["bones"]]
    vertices = [line.split(":") for line in model["vertices"]]
    weights = np.zeros((len(vertices), len(bones)))
    for v, atoms in enumerate(vertices):
        for j in range(int(atoms[8])):
            weights[v, int(atoms[9 + 2 * j])] = float(atoms[10 + 2 * j])
    base = np.array([[float(a) for a in atoms[:3]] + [1.0] for atoms in vertices])
    triangles = np.array([[int(a) for a in line.split(":")] for line in model["triangles"]])
    cpp_model = {"bone_count": len(bones), "bone_names": [b[0] for b in bones],
                 "parents": [int(b[1]) for b in bones],
                 "base_relatives": [np.reshape([float(a) for a in b[2:18]], (4, 4)).tolist()
                                    for b in bones],
                 "inverse_base_absolutes": [np.reshape([float(a) for a in b[18:34]],
                                                       (4, 4)).tolist() for b in bones],
                 "base_positions": base.tolist(), "weights": weights.tolist(),
                 "triangles": triangles.tolist(), "is_mirrored": False}
    names = _gradbench_names(folder)
    cases, theta = [], None
    for i in range(1, last + 1):
        name = next(n for n in names if n.startswith(f"hand{i}_"))
        text = _gradbench_file(name, folder, missing_ok=True)
        c = int(name.split("_c")[1].split(".")[0])
        if text is None:
            rng = np.random.default_rng(SEED)
            corr = rng.integers(0, len(triangles), size=c)
            points = rng.normal(scale=0.5, size=(c, 3))
            us = rng.uniform(0, 0.5, size=(c, 2))
        else:
            lines = text.splitlines()
            rows = [line.split() for line in lines[1:c + 1]]
            corr = np.array([int(r[0]) for r in rows])
            points = np.array([[float(a) for a in r[1:]] for r in rows])
            us = np.array([[float(a) for a in line.split()] for line in lines[c + 1:2 * c + 1]])
            theta = np.array([float(line) for line in lines[2 * c + 1:2 * c + 27]])
        data = {"theta": theta, "us": us, "points": points, "correspondences": corr,
                "triangles": triangles, "base_positions": base, "weights": weights}
        cpp = {"theta": theta.tolist(), "us": us.tolist(),
               "data": {"model": cpp_model, "correspondences": corr.tolist(),
                        "points": points.tolist()}}
        cases.append(Case("ht", f"c={c}", {}, data, cpp, c, {"c": c}))
    return cases


def _lstm_text() -> str:
    """GradBench's evals/lstm/data/lstm_full.txt; where the checkout lacks it (a mirror without
    its large files), 8,192 printable ASCII characters drawn from a seeded generator: 7 bits a
    character, as ASCII text has."""
    text = _gradbench_file("lstm_full.txt", "evals/lstm/data", missing_ok=True)
    if text is not None:
        return text
    codes = np.random.default_rng(SEED).integers(32, 127, size=8192)
    return "".join(map(chr, codes))


def _gradbench_names(folder: str) -> list[str]:
    """The names of the files in a folder of GradBench's checkout (a work tree or a git
    directory, manual.DEFAULT_SOURCE, which the C++ is built from)."""
    tree = Path(manual.DEFAULT_SOURCE) / folder
    if tree.is_dir():
        return sorted(path.name for path in tree.iterdir())
    listing = subprocess.run(["git", "--git-dir", manual.DEFAULT_SOURCE, "ls-tree",
                              "--name-only", "HEAD", f"{folder}/"],
                             capture_output=True, text=True, check=True).stdout
    return [line.rsplit("/", 1)[-1] for line in listing.splitlines()]


def _gradbench_file(name: str, folder: str, missing_ok: bool = False) -> str | None:
    path = Path(manual.DEFAULT_SOURCE) / folder / name
    if path.is_file():
        return path.read_text(encoding="utf8")
    done = subprocess.run(["git", "--git-dir", manual.DEFAULT_SOURCE, "show",
                           f"HEAD:{folder}/{name}"], capture_output=True)
    if done.returncode != 0 and not missing_ok:
        raise SystemExit(f"GradBench's {folder}/{name} is not in {manual.DEFAULT_SOURCE}")
    return done.stdout.decode("utf8") if done.returncode == 0 else None


CASES = {"det": det_cases, "lse": lse_cases, "llsq": llsq_cases, "kmeans": kmeans_cases,
         "ode": ode_cases, "gmm": gmm_cases, "lstm": lstm_cases, "ba": ba_cases,
         "ht": ht_cases}


def source(ev: Eval, consts: dict) -> str:
    """The eval's program with its size consts set: a user's edit of the `const` lines."""
    text = ev.program.read_text()
    for name, value in consts.items():
        text, count = re.subn(rf"^const {name} = .*$", f"const {name} = {value}", text,
                              count=1, flags=re.M)
        if count != 1:
            raise ValueError(f"{ev.program.name} has no 'const {name} = ...' line")
    return text


def flat(output, keys: list[str] | None = None) -> np.ndarray:
    """A C++ output (a number, a list, a list of lists, or a dict: GMM's, BA's) as one flat
    array: a dict's entries in the order of `keys` (`Eval.wrt` for a derivative), else as
    written (nlohmann's JSON writes keys sorted)."""
    if isinstance(output, dict):
        return np.concatenate([flat(output[key]) for key in keys or output])
    return np.ravel(np.asarray(output, dtype=float))
