"""Component parity with EfficientZero V2's released code (issue 95): the sampled Gumbel search
and the DMC state model.

    python benchmarks/peers/ezv2_parity.py --ezv2 /path/to/EfficientZeroV2 [--section search|model|all]

Their code is run, never copied: the harness imports it from their checkout, with stand-ins
for the packages a search or a model does not need (ray, wandb, gym, dmc2gym, torchrl, kornia,
colorednoise ...) put into ``sys.modules`` only while their modules import, and their CUDA
calls (``Tensor.cuda``, ``autocast``) turned into no-ops for the duration of each call.  It
needs their C++ tree built (``python setup.py build_ext --inplace`` in their ez/mcts/ctree,
ori_ctree and ctree_v2 with this interpreter; done here when missing, Cython required) and
builds, in a cache folder, ``_ezv2_probe.pyx``: a second binding of the same C++ that also
reads each root's completed Q out of their tree.

Search: both searches are driven by one deterministic fake network (numpy, float64, a
function of hidden state and action) and draw their candidates from one table of standard
normal noise: ours through ``ez_robot.action_modes.sample_candidates`` with its Gaussian draws
replaced by the table, theirs through their own ``sample_actions`` with their squashed normal
replaced by one that reads the same table.  The same Gumbel noise goes to both.  Their
driver and C++ tree and ours run unchanged.  A third search, ``tests/reference_ezv2_tree.py``, has one
switch per convention; it must reproduce each code exactly with all switches on that code's
side, and one-switch-at-a-time runs then say what each convention alone changes.

Model: their DMC state networks are built by their own ``EZDMCStateAgent.build_model`` with
their ``dmc_state.yaml``; ours by ``make_network`` with the ``ezv2_states`` recipe.  Layer
lists and parameter counts side by side; the weights are copied where the shapes allow and the
outputs compared.

Not a test: it prints tables of measured differences.  Runs in a few seconds on a CPU.
Needs, beside the package: `pip install cython omegaconf` (their tree and their config).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.machinery
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from tests import reference_ezv2_tree as ref  # noqa: E402
from ez_robot import action_modes as our_policies  # noqa: E402
from ez_robot import mcts as our_search_module  # noqa: E402
from ez_robot.mcts import RootOutput, search  # noqa: E402
from ez_robot.search_config import SearchConfig
from ez_robot.action_modes import ActionSpec, gaussian_params  # noqa: E402

K = 16          # candidates per root (both: num_sampled_actions / num_candidates)
SIMS = 32       # simulations per search on DMC (both)
BATCH = 8       # roots per search
HIDDEN = 8      # the fake network's hidden state
DIMS = 6        # action dimensions (cheetah_run, walker_run: 6; quadruped_walk: 12)


# ---------------------------------------------------------------------------------------
# Loading their code
# ---------------------------------------------------------------------------------------

ALWAYS_STUB = ("ray", "wandb", "dmc2gym", "gym", "torchrl", "kornia", "colorednoise", "hydra", "dm_env")


class _Anything:
    """Stand-in for anything from a stubbed package: constructible, callable, subclassable."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (_Anything,), {})
        setattr(self, name, cls)
        return cls


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, tops):
        self.tops = set(tops)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.tops:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _missing(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is None
    except (ImportError, ValueError):
        return True


@contextlib.contextmanager
def _stubbed_imports(extra=("cv2",)):
    tops = set(ALWAYS_STUB) | {t for t in extra if _missing(t)}
    before = set(sys.modules)
    finder = _StubFinder(tops)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:  # their modules keep what they imported
            if name.split(".")[0] in tops:
                del sys.modules[name]


@contextlib.contextmanager
def cpu_only(*modules):
    """Their ``.cuda()`` and ``autocast()`` become no-ops for the duration."""
    import torch

    saved_cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self
    saved = [(m, m.autocast) for m in modules if hasattr(m, "autocast")]
    for m, _ in saved:
        m.autocast = lambda *a, **k: contextlib.nullcontext()
    try:
        yield
    finally:
        torch.Tensor.cuda = saved_cuda
        for m, fn in saved:
            m.autocast = fn


def _build_their_trees(root: Path) -> None:
    for sub in ("ctree", "ori_ctree", "ctree_v2"):
        folder = root / "ez" / "mcts" / sub
        if not list(folder.glob("cytree*.so")) and not list(folder.glob("cytree*.pyd")):
            print(f"building their {folder} ...", file=sys.stderr)
            subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=folder, check=True,
                           stdout=subprocess.DEVNULL)


def _build_probe(root: Path):
    """Compiles _ezv2_probe.pyx against their C++ sources into a cache folder; returns the module."""
    source = HERE / "_ezv2_probe.pyx"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ez-robot" / "ezv2_probe"
    cache.mkdir(parents=True, exist_ok=True)
    ctree = (root / "ez" / "mcts" / "ctree").resolve()
    stamp = f"{source.stat().st_mtime_ns}:{ctree}:{(ctree / 'cnode.cpp').stat().st_mtime_ns}"
    built = list(cache.glob("_ezv2_probe*.so"))
    old = (cache / "stamp").read_text() if (cache / "stamp").exists() else ""
    if not built or old != stamp:
        (cache / "_ezv2_probe.pyx").write_text(source.read_text())
        (cache / "setup.py").write_text(
            "from setuptools import setup, Extension\n"
            "from Cython.Build import cythonize\n"
            f"ext = Extension('_ezv2_probe', ['_ezv2_probe.pyx'], include_dirs=[{str(ctree)!r}],\n"
            "                extra_compile_args=['-O2', '-w'], language='c++')\n"
            "setup(name='ezv2_probe', ext_modules=cythonize([ext], quiet=True))\n")
        print("building the probe binding of their tree ...", file=sys.stderr)
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=cache, check=True,
                       stdout=subprocess.DEVNULL)
        (cache / "stamp").write_text(stamp)
    sys.path.insert(0, str(cache))
    return importlib.import_module("_ezv2_probe")


class EZV2:
    """Their modules, imported from a checkout."""

    def __init__(self, root: str):
        self.root = Path(root).resolve()
        if not (self.root / "ez" / "mcts" / "cy_mcts.py").exists():
            raise SystemExit(f"--ezv2 {root}: not an EfficientZeroV2 checkout (no ez/mcts/cy_mcts.py)")
        _build_their_trees(self.root)
        self.probe = _build_probe(self.root)
        sys.path.insert(0, str(self.root))
        with _stubbed_imports():
            self.cy_mcts = importlib.import_module("ez.mcts.cy_mcts")
            self.mcts_base = importlib.import_module("ez.mcts.base")
        from omegaconf import OmegaConf

        self.config = OmegaConf.load(self.root / "ez" / "config" / "exp" / "dmc_state.yaml")

    def import_state_agent(self):
        with _stubbed_imports():
            agent = importlib.import_module("ez.agents.ez_dmc_state")
            fmt = importlib.import_module("ez.utils.format")
        return agent, fmt

    @property
    def discount(self) -> float:
        # their agent raises rl.discount to the power n_skip (EZDMCStateAgent.update_config)
        return float(self.config.rl.discount) ** int(self.config.env.n_skip)


# ---------------------------------------------------------------------------------------
# The shared fake network, noise and sampling
# ---------------------------------------------------------------------------------------

class FakeNet:
    """A deterministic function of (hidden, action): next hidden, reward, value, raw policy-head
    outputs (ours reads them raw; theirs gets them through V2's head transform, the same
    formulas: mean 5 tanh(mu / 5), std softplus(s + 1) + 0.1)."""

    def __init__(self, seed: int, reward_scale: float, value_offset: float, value_scale: float, dims: int = DIMS):
        rng = np.random.default_rng(seed)
        self.dims = dims
        self.W = rng.standard_normal((HIDDEN, HIDDEN)) * 0.9 / math.sqrt(HIDDEN)
        self.U = rng.standard_normal((HIDDEN, dims)) * 1.2 / math.sqrt(dims)
        self.b = rng.standard_normal(HIDDEN) * 0.3
        self.w_r = rng.standard_normal(HIDDEN) * 1.5
        self.w_v = rng.standard_normal(HIDDEN) * 1.0
        self.P = rng.standard_normal((2 * dims, HIDDEN)) * 0.8
        self.p_bias = np.concatenate([rng.standard_normal(dims) * 0.7, rng.uniform(-1.8, -0.6, dims)])
        self.reward_scale, self.value_offset, self.value_scale = reward_scale, value_offset, value_scale
        self.O = rng.standard_normal((HIDDEN, 5)) * 0.8

    def heads(self, h):
        value = self.value_offset + self.value_scale * np.tanh(h @ self.w_v)
        raw = (h @ self.P.T + self.p_bias).astype(np.float32)
        return value, raw

    def roots(self, batch: int, seed: int):
        x = np.random.default_rng(seed).standard_normal((batch, 5))
        h = np.tanh(x @ self.O.T)
        value, raw = self.heads(h)
        return h, value, raw

    def step(self, h, a):
        h = np.asarray(h, np.float64)
        a = np.asarray(a, np.float32).astype(np.float64)  # both trees hand over float32 actions
        nh = np.tanh(h @ self.W.T + a @ self.U.T + self.b)
        reward = self.reward_scale / (1.0 + np.exp(-(nh @ self.w_r)))
        value, raw = self.heads(nh)
        return nh, reward, value, raw


class _Shared:
    """The noise both sides sample with, and the switches of the injection."""

    table: np.ndarray = None      # [B, K, D] standard normal
    root: bool = True             # set by our sample_candidates wrapper
    no_mode: bool = False         # harness-side: drop our tanh(mean) candidate at evaluation


SHARED = _Shared()


def _our_table_draw(spec, params, count, scale, rng, mean_std=None):
    """ez_robot.action_modes._draw (the root's candidates) with the Gaussian draws read from
    the shared table: the policy draws take rows 0.., the widened ones the last rows (the rows
    V2's sample_actions reads, see TableSquashedNormal).  Interior nodes draw through
    ``_InjectedRng.standard_normal``."""
    batch = len(params)
    if count == 0:
        return np.zeros((batch, 0, spec.dims))
    mean, std = gaussian_params(params, spec.dims) if mean_std is None else mean_std
    n = SHARED.table.shape[1]
    rows = SHARED.table[:, :count] if (SHARED.root and scale == 1.0) else SHARED.table[:, n - count:]
    return np.tanh(mean[:, None] + scale * std[:, None] * rows)


_real_sample_candidates = our_policies.sample_candidates


def _our_sample_candidates(spec, params, count, rng, *, root, policy_samples=None, wide_scale=3.0,
                           correction=True, include_mode=False, bound=1.0):
    SHARED.root = root
    if SHARED.no_mode:
        include_mode = False
    return _real_sample_candidates(spec, params, count, rng, root=root, policy_samples=policy_samples,
                                   wide_scale=wide_scale, correction=correction, include_mode=include_mode,
                                   bound=bound)


class TableSquashedNormal:
    """Stands in for V2's SquashedNormal inside their sample_actions: tanh(loc + scale z) with z
    the last n rows of the shared table for a draw of n (their root draws 16 from the policy
    and keeps rows 0-3, then 12 from the widened policy: rows 4-15; a leaf draws 2: rows 14-15)."""

    def __init__(self, loc, scale):
        self.loc, self.scale = loc, scale

    def sample(self, shape):
        import torch

        n = int(shape[0])
        rows = SHARED.table[:, SHARED.table.shape[1] - n:]
        loc = self.loc.detach().numpy().astype(np.float64)
        scale = self.scale.detach().numpy().astype(np.float64) if hasattr(self.scale, "detach") else self.scale
        a = np.tanh(loc[:, None] + scale[:, None] * rows)
        return torch.from_numpy(np.ascontiguousarray(a.transpose(1, 0, 2)))

    def log_prob(self, x):  # their sample_actions computes a prior with it, which their tree never reads
        import torch

        x = x.clamp(-1 + 1e-6, 1 - 1e-6).double()
        pre = torch.atanh(x)
        loc = torch.as_tensor(self.loc).double()
        scale = torch.as_tensor(self.scale).double()
        z = (pre - loc) / scale
        return -0.5 * z * z - torch.log(scale) - 0.5 * math.log(2 * math.pi) - torch.log(1 - x * x)


class _InjectedRng(np.random.Generator):
    """A Generator whose gumbel() returns the shared Gumbel noise (zeros for V2's DMC search)."""

    def set(self, noise):
        self._noise = noise
        return self

    def gumbel(self, loc=0.0, scale=1.0, size=None):
        return np.array(self._noise, np.float64).reshape(size)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        """The interior nodes' numbers (``InteriorCandidates`` draws [simulations, B, draws, D]
        at once): every node of tree b reads the table's last ``draws`` rows of b, as V2's
        leaves do."""
        if size is None or len(size) != 4:
            return super().standard_normal(size, dtype=dtype, out=out)
        simulations, batch, draws, dims = size
        rows = SHARED.table[:, SHARED.table.shape[1] - draws:]
        return np.ascontiguousarray(np.broadcast_to(rows, (simulations,) + rows.shape), dtype=dtype)


class TheirModel:
    """The fake network behind V2's model interface (recurrent_inference: next state, reward
    [B, 1], value [B, 1], policy [B, 2D] = (mean, std), reward hidden)."""

    def __init__(self, net: FakeNet):
        self.net = net

    def recurrent_inference(self, states, actions, reward_hidden, training=False):
        import torch

        nh, reward, value, raw = self.net.step(states.detach().numpy(), actions.detach().numpy())
        return (torch.from_numpy(nh), torch.from_numpy(reward[:, None]), torch.from_numpy(value[:, None]),
                torch.from_numpy(their_policy(raw)), reward_hidden)


def their_policy(raw):
    mean, std = gaussian_params(raw, raw.shape[1] // 2)
    return np.concatenate([mean, std], axis=1)


# ---------------------------------------------------------------------------------------
# Running the three searches
# ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    name: str
    net: FakeNet
    add_noise: bool            # V2: widened root candidates (self-play, reanalyze); False: evaluation
    gumbel: bool               # V2: use_gumble_noise (their DMC search: False everywhere)
    sims: int = SIMS
    seed: int = 0


def run_theirs(ez: EZV2, case: Case, roots, gumbel, use_probe=True):
    import torch

    cfg = ez.config
    mcts = ez.cy_mcts.CyMCTS(num_actions=int(cfg.mcts.num_sampled_actions), discount=ez.discount, env="DMC",
                             **{**dict(cfg.mcts), "num_simulations": case.sims}, **dict(cfg.model))
    h0, v0, raw0 = roots
    saved = (ez.cy_mcts.SquashedNormal, ez.cy_mcts.tree, np.random.gumbel)
    ez.cy_mcts.SquashedNormal = TableSquashedNormal
    if use_probe:
        ez.cy_mcts.tree = ez.probe
    np.random.gumbel = lambda loc=0.0, scale=1.0, size=None: np.array(gumbel, np.float64).reshape(size)
    try:
        with cpu_only(ez.cy_mcts, ez.mcts_base):
            values, policies, actions, candidates, best, _ = mcts.search_continuous(
                TheirModel(case.net), len(v0), torch.from_numpy(h0), np.asarray(v0, np.float64),
                torch.from_numpy(their_policy(raw0)), use_gumble_noise=case.gumbel, add_noise=case.add_noise)
    finally:
        ez.cy_mcts.SquashedNormal, ez.cy_mcts.tree, np.random.gumbel = saved
    out = dict(root_values=np.asarray(values, np.float64), policy=np.asarray(policies, np.float64),
               best=np.asarray(best), candidates=np.asarray(candidates, np.float32), actions=np.asarray(actions))
    if use_probe:
        roots_obj, mm = ez.probe.LAST["roots"], ez.probe.LAST["min_max"]
        out["visits"] = np.asarray(roots_obj.get_distributions())
        out["completed_q"] = np.array([roots_obj.completed_q(b, mm) for b in range(len(v0))], np.float64)
    return out


def run_ours(case: Case, roots, gumbel, config: SearchConfig, *, no_mode=False):
    h0, v0, raw0 = roots
    net = case.net

    def recurrent_fn(hidden, actions, reset_mask):
        nh, reward, value, raw = net.step(hidden, actions)
        return nh, reward, value, raw

    saved = (our_search_module.sample_candidates, our_policies._draw)
    our_search_module.sample_candidates = _our_sample_candidates
    our_policies._draw = _our_table_draw
    SHARED.no_mode = no_mode
    try:
        rng = _InjectedRng(np.random.PCG64(0)).set(gumbel)
        out = search(RootOutput(h0, np.zeros(len(v0), np.float32), np.asarray(v0, np.float32), raw0), recurrent_fn,
                     config, rng, action_spec=ActionSpec("gaussian", dims=net.dims))
    finally:
        our_search_module.sample_candidates, our_policies._draw = saved
        SHARED.no_mode = False
    chosen = np.array([int(np.flatnonzero((out.candidates[b] == out.actions[b]).all(-1))[0])
                       for b in range(len(v0))])
    return dict(root_values=out.root_values.astype(np.float64), policy=out.policy.astype(np.float64),
                completed_q=out.root_q_values.astype(np.float64), visits=out.visit_counts, best=chosen,
                candidates=out.candidates)


def run_ref(case: Case, roots, gumbel, conv: ref.Conventions):
    h0, v0, raw0 = roots
    saved = our_policies._draw
    our_policies._draw = _our_table_draw
    try:
        sample = functools.partial(_our_sample_candidates, ActionSpec("gaussian", dims=case.net.dims),
                                   rng=None, wide_scale=3.0)

        def step(h, a):
            return case.net.step(h, a)

        return ref.ref_search(conv, root_hidden=h0, root_value=v0, root_params=raw0, step=step, sample=sample,
                              gumbel=gumbel, num_simulations=case.sims, count=K)
    finally:
        our_policies._draw = saved


def compare(a: dict, b: dict) -> dict:
    """Max abs differences of the outputs both report."""
    out = {}
    for key in ("root_values", "policy", "completed_q"):
        if key in a and key in b:
            x, y = np.asarray(a[key], np.float64), np.asarray(b[key], np.float64)
            both = np.isfinite(x) & np.isfinite(y)
            out[key] = float(np.abs(x - y)[both].max()) if both.any() else 0.0
            if (np.isfinite(x) != np.isfinite(y)).any():
                out[key] = math.inf
    if "visits" in a and "visits" in b:
        out["visits"] = int(np.abs(np.asarray(a["visits"]) - np.asarray(b["visits"])).max())
    out["actions"] = int((np.asarray(a["best"]) != np.asarray(b["best"])).sum())
    if "candidates" in a and "candidates" in b:
        out["candidates"] = float(np.abs(np.asarray(a["candidates"], np.float64)
                                         - np.asarray(b["candidates"], np.float64)).max())
    return out


def fmt(d: dict) -> str:
    parts = []
    for key, label in (("root_values", "value"), ("policy", "pi'"), ("completed_q", "Q"), ("visits", "N"),
                       ("actions", "act"), ("candidates", "cand")):
        if key in d:
            v = d[key]
            parts.append(f"{label} {v:.1e}" if isinstance(v, float) else f"{label} {v}")
    return ", ".join(parts)


# --- the conventions ---------------------------------------------------------------------

def ezv2_conventions(ez: EZV2, case: Case) -> ref.Conventions:
    m = ez.config.model
    return ref.Conventions(
        discount=ez.discount, lstm_horizon=1, proposal_correction=False, candidate_bound=0.999,
        interior_candidates=2, root_policy_samples=int(m.policy_action_num) if case.add_noise else K,
        include_mode=False, gumbel=case.gumbel, **ref.EZV2_TREE)


def ours_conventions(config: SearchConfig, case: Case, greedy: bool) -> ref.Conventions:
    return ref.Conventions(
        discount=config.discount, lstm_horizon=config.lstm_horizon, proposal_correction=config.proposal_correction,
        candidate_bound=config.candidate_bound, interior_candidates=config.interior_candidates or config.num_candidates,
        root_policy_samples=config.root_policy_samples, include_mode=greedy, gumbel=not greedy,
        **ref.OURS_TREE)


# (row name, Conventions field(s), what V2's code does, what ours does, paper, switch)
ROWS = [
    ("discount per decision", ("discount",),
     "0.997**n_skip = 0.994 (their agent raises rl.discount to n_skip=2)", "search.discount (recipe 0.997; preset 0.99)",
     "0.997 (hyper-parameter table; per env step?)", "search.discount=0.994009"),
    ("prior over candidates", ("proposal_correction",),
     "uniform: the tree gets logits 0 (sample_actions' log-prob ratio is computed, never passed)",
     "beta_hat/beta*pi (Sampled MuZero correction of the 4+12 mixture)",
     "uniform (ANCHORS)", "search.proposal_correction=false"),
    ("candidate clip", ("candidate_bound",), "clip to +-0.999", "no clip beyond tanh (1.0)", "not stated",
     "search.candidate_bound=0.999"),
    ("candidates below the root", ("interior_candidates",), "2 (leaf_num=2, both from the policy)",
     "16 (interior_candidates=0 -> K)", "K=16 everywhere (ANCHORS)", "search.interior_candidates=2"),
    ("widened root candidates at eval", ("root_policy_samples",),
     "eval (add_noise=False): 16 from the policy, none widened", "always 4 policy + 12 at 3x std",
     "4+12 (training); eval not stated", "none for eval only (search.root_policy_samples=16 changes training too)"),
    ("mode among eval candidates", ("include_mode",), "no (a commented-out line in legacy code)",
     "eval: candidate 0 = tanh(mean)", "not stated", "none (harness drops it)"),
    ("root Gumbel noise", ("gumbel",), "never on DMC (use_gumble_noise defaults to False in self-play, "
     "reanalyze and eval)", "drawn whenever add_noise (self-play, reanalyze); off at eval",
     "Gumbel top-k + sequential halving", "none separate from add_noise (harness injects g=0)"),
    ("root value", ("root_value_counts_prior",), "mean over [v_net(root)] + 32 backups (33 entries)",
     "mean over the 32 backups", "Gumbel/MuZero: mean of backups", "search.ezv2_tree=true"),
    ("v_mix of unvisited children", ("vmix_running_mean",),
     "(V_mean(node) + N_node*sum pi q/sum pi)/(1+N_node), V_mean the node's running mean, N_node its own visits",
     "(v_net + S*sum pi q/sum pi)/(1+S), S = sum of children visits", "Danihelka et al. (=ours)", "search.ezv2_tree=true"),
    ("interior selection denominator", ("interior_self_visit",), "pi'(a) - N(a)/(1 + N_node), N_node = 1+sum N(b)",
     "pi'(a) - N(a)/(1 + sum N(b))", "Danihelka et al. (=ours)", "search.ezv2_tree=true"),
    ("min-max entries", ("minmax_path_returns",), "r + g*G (the sampled path return) at each level",
     "r + g*mean value of the child", "MuZero: Q values (=ours)", "search.ezv2_tree=true"),
    ("min-max root entry", ("minmax_root_entry",), "also g*G_root (the root's reward is read as 0)",
     "no root entry", "none", "search.ezv2_tree=true"),
    ("min-max with no spread", ("normalize_flat_raw",), "q itself, clipped to [0,1]", "(q - lo)/eps, 0 with no entries",
     "not stated", "search.ezv2_tree=true"),
    ("halving order", ("halving_at_phase_end",),
     "survivors ranked at phase ends (their python schedule), visited in ranked order",
     "per simulation: best-scoring candidate with the visit count the schedule asks", "Danihelka et al. (both fit)",
     "search.ezv2_tree=true"),
]


def search_section(ez: EZV2, verbose: bool = False) -> list[dict]:
    from ez_robot.config import load_config, recipe_overrides, search_config

    shipped = search_config(load_config("cheetah_run", overrides=recipe_overrides("ezv2_states")))
    print("\n== SEARCH ==")
    print(f"their config: ez/config/exp/dmc_state.yaml mcts={dict(ez.config.mcts)}")
    print(f"their discount in the search: {ez.discount:.6f}; leaf_num (candidates below the root): 2")
    print(f"our search (cheetah_run + ezv2_states recipe): {shipped}")
    print(f"V2 halving schedule, 32 sims / 16 candidates: {ref.their_phase_ends(SIMS, K)} "
          f"(sim index -> survivors); ours visit sequence: {ref.our_visit_sequence(K, SIMS)}")

    nets = {"unit": FakeNet(1, reward_scale=0.1, value_offset=1.0, value_scale=0.5),
            "loco": FakeNet(2, reward_scale=1.0, value_offset=100.0, value_scale=30.0)}
    cases = []
    for scale, net in nets.items():
        cases += [Case(f"{scale}/selfplay", net, add_noise=True, gumbel=False, seed=11),
                  Case(f"{scale}/eval", net, add_noise=False, gumbel=False, seed=12),
                  Case(f"{scale}/gumbel", net, add_noise=True, gumbel=True, seed=13),
                  Case(f"{scale}/8sims", net, add_noise=True, gumbel=False, sims=8, seed=14)]
    results = []
    for case in cases:
        rng = np.random.default_rng(case.seed)
        SHARED.table = rng.standard_normal((BATCH, K, case.net.dims))
        gumbel = rng.gumbel(size=(BATCH, K)).astype(np.float32).astype(np.float64)
        g_used = gumbel if case.gumbel else np.zeros_like(gumbel)
        roots = case.net.roots(BATCH, case.seed + 100)
        greedy = not case.add_noise
        our_cfg = shipped.replace(num_simulations=case.sims, add_noise=not greedy)

        theirs = run_theirs(ez, case, roots, g_used)
        theirs_plain = run_theirs(ez, case, roots, g_used, use_probe=False)
        probe_ok = compare(theirs, theirs_plain)

        # ours as shipped (the recipe), then the reference with every switch on our side
        ours = run_ours(case, roots, gumbel, our_cfg)  # ours draws Gumbel noise whenever add_noise
        conv_ours = ours_conventions(our_cfg, case, greedy)
        ref_ours = run_ref(case, roots, gumbel, conv_ours)

        # ours aligned through its switches (search.ezv2_tree for the tree; + the harness-side g=0 /
        # no-mode), and the reference at V2's side
        aligned_cfg = our_cfg.replace(discount=ez.discount, proposal_correction=False, candidate_bound=0.999,
                                      interior_candidates=2, root_policy_samples=4 if case.add_noise else K,
                                      ezv2_tree=True)
        ours_aligned = run_ours(case, roots, g_used, aligned_cfg, no_mode=True)
        conv_v2 = ezv2_conventions(ez, case)
        ref_v2 = run_ref(case, roots, g_used, conv_v2)

        row = dict(case=case, theirs=theirs, ours=ours, probe_ok=probe_ok,
                   ref_vs_ours=compare(ref_ours, ours), ref_vs_ours_aligned=compare(ref_v2, ours_aligned),
                   ref_vs_theirs=compare(ref_v2, theirs), shipped_vs_theirs=compare(ours, theirs),
                   aligned_vs_theirs=compare(ours_aligned, theirs))
        # one convention at a time: V2's side everywhere except this row, at ours
        loo = {}
        for name, fields, *_ in ROWS:
            changes = {}
            for f in fields:
                if f in ref.OURS_TREE:
                    changes[f] = ref.OURS_TREE[f]
                else:
                    changes[f] = getattr(conv_ours, f)
            if all(getattr(conv_v2, f) == v for f, v in changes.items()):
                loo[name] = None  # this case does not exercise it
                continue
            loo[name] = compare(run_ref(case, roots, gumbel, dataclasses.replace(conv_v2, **changes)), theirs)
        row["loo"] = loo
        unvisited = np.asarray(theirs["visits"]) == 0
        if unvisited.any():  # completed Q of the root candidates no simulation reached: v_mix
            q = lambda out: np.asarray(out["completed_q"], np.float64)[unvisited]
            vmix_ours = run_ref(case, roots, g_used, dataclasses.replace(conv_v2, vmix_running_mean=False))
            row["unvisited_q"] = dict(count=int(unvisited.sum()), shipped=float(np.abs(q(ours) - q(theirs)).max()),
                                      aligned=float(np.abs(q(ours_aligned) - q(theirs)).max()),
                                      ref_vmix_ours=float(np.abs(q(vmix_ours) - q(theirs)).max()),
                                      ref_v2=float(np.abs(q(ref_v2) - q(theirs)).max()))
        results.append(row)

    print(f"\nchecks (max abs diffs; act = roots whose chosen candidate differs, of {BATCH}):")
    for r in results:
        print(f"  {r['case'].name:14s} probe binding vs their binding: {fmt(r['probe_ok'])}")
        print(f"  {'':14s} reference(our side) vs our search:   {fmt(r['ref_vs_ours'])}")
        print(f"  {'':14s} reference(V2 side) vs their search:  {fmt(r['ref_vs_theirs'])}")
    print("\nresult (max abs diffs against their search):")
    for r in results:
        print(f"  {r['case'].name:14s} ours as shipped:       {fmt(r['shipped_vs_theirs'])}")
        print(f"  {'':14s} ours, switches aligned: {fmt(r['aligned_vs_theirs'])}")
        print(f"  {'':14s} reference at V2's side vs ours aligned: {fmt(r['ref_vs_ours_aligned'])}")
    print("\ncompleted Q of the root candidates no simulation reached (their v_mix), max abs diff:")
    for r in results:
        u = r.get("unvisited_q")
        if u:
            print(f"  {r['case'].name:14s} {u['count']} entries: ours as shipped {u['shipped']:.1e}, ours aligned "
                  f"{u['aligned']:.1e}, reference at V2's side but our v_mix {u['ref_vmix_ours']:.1e}, "
                  f"reference at V2's side {u['ref_v2']:.1e}")
    print("\none convention at a time: the reference at V2's side except this row (at the shipped ez-robot "
          "value), max abs diff against their search over the cases that exercise it "
          "(act: roots whose chosen candidate differs / roots compared):")
    head = ("unit: value", "pi'", "Q", "act", "loco: value", "pi'", "Q", "act")
    print(f"  {'convention':34s} {'cases':>5s} " + "{:>11s} {:>8s} {:>8s} {:>7s}   {:>11s} {:>8s} {:>8s} {:>7s}".format(*head))
    summary = {}
    for name, *_ in ROWS:
        line = f"  {name:34s}"
        used = [r for r in results if r["loo"][name] is not None]
        line += f" {len(used):5d}"
        summary[name] = {}
        for scale in ("unit", "loco"):
            sub = [r["loo"][name] for r in used if r["case"].name.startswith(scale)]
            if not sub:
                line += f" {'-':>11s} {'-':>8s} {'-':>8s} {'-':>6s}  "
                continue
            agg = {k: max(d[k] for d in sub) for k in ("root_values", "policy", "completed_q")}
            acts = sum(d["actions"] for d in sub)
            summary[name][scale] = (agg, acts, len(sub) * BATCH)
            line += (f" {agg['root_values']:11.1e} {agg['policy']:8.1e} {agg['completed_q']:8.1e} "
                     f"{acts:3d}/{len(sub) * BATCH:<3d} ")
        print(line)
    if verbose:
        for name, *_ in ROWS:
            print(f"  {name}:")
            for r in results:
                d = r["loo"][name]
                print(f"      {r['case'].name}: " + ("-" if d is None else fmt(d)))
    scales = {r["case"].name: (float(np.abs(r["theirs"]["root_values"]).max()),
                               float(np.nanmax(r["theirs"]["completed_q"]) - np.nanmin(r["theirs"]["completed_q"])))
              for r in results}
    print("\nscale of the outputs (their root value max, completed-Q spread over all roots):")
    for k, (v, q) in scales.items():
        print(f"  {k:14s} |v| <= {v:.3g}, Q spread {q:.3g}")
    return results


# ---------------------------------------------------------------------------------------
# The state model
# ---------------------------------------------------------------------------------------

TASKS = {"cheetah_run": (17, 6), "walker_run": (24, 6), "quadruped_walk": (78, 12)}


def their_model(ez: EZV2, obs_dim: int, dims: int):
    from omegaconf import OmegaConf, open_dict

    agent_mod, fmt_mod = ez.import_state_agent()
    cfg = OmegaConf.create(OmegaConf.to_container(ez.config))
    with open_dict(cfg):
        cfg.env.action_space_size = dims
        cfg.env.obs_shape = obs_dim
        cfg.rl.discount = ez.discount
        cfg.model.reward_support.size = int(cfg.model.reward_support.bins)
        cfg.model.value_support.size = int(cfg.model.value_support.bins)
    agent = agent_mod.EZDMCStateAgent.__new__(agent_mod.EZDMCStateAgent)  # skips making a dm_control env
    m = cfg.model
    agent.config = cfg
    for key, value in dict(action_space_size=dims, obs_shape=obs_dim, n_stack=cfg.env.n_stack,
                           rep_net_shape=m.rep_net_shape, hidden_shape=m.hidden_shape, dyn_shape=m.dyn_shape,
                           act_embed_shape=m.act_embed_shape, rew_net_shape=list(m.rew_net_shape),
                           val_net_shape=list(m.val_net_shape), pi_net_shape=list(m.pi_net_shape),
                           proj_hid_shape=m.proj_hid_shape, pred_hid_shape=m.pred_hid_shape, proj_shape=m.proj_shape,
                           pred_shape=m.pred_shape, use_bn=m.use_bn, use_p_norm=m.use_p_norm, noisy_net=m.noisy_net,
                           num_blocks=m.num_blocks, fc_layers=m.fc_layers, down_sample=m.down_sample,
                           state_norm=m.state_norm, value_prefix=m.value_prefix, init_zero=m.init_zero,
                           value_ensumble=m.value_ensumble, value_policy_detach=cfg.train.value_policy_detach,
                           v_num=cfg.train.v_num).items():
        setattr(agent, key, value)
    model = agent.build_model()
    return model, cfg, fmt_mod


def our_model(task: str, **model_overrides):
    from ez_robot.config import load_config, recipe_overrides
    from ez_robot.networks import make_network

    sets = recipe_overrides("ezv2_states") + [f"model.{k}={v}" for k, v in model_overrides.items()]
    config = load_config(task, overrides=sets)
    obs_dim, dims = TASKS[task]
    net = make_network((obs_dim,), ActionSpec("gaussian", dims=dims), config.model,
                       value_prefix=config.train.value_prefix)
    return net, config


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _layers(module) -> str:
    import torch.nn as nn

    out = []
    for m in module.modules():
        if isinstance(m, nn.Linear):
            out.append(f"L{m.in_features}>{m.out_features}")
        elif isinstance(m, nn.LayerNorm):
            out.append("LN")
        elif isinstance(m, nn.BatchNorm1d):
            out.append("BN")
        elif isinstance(m, (nn.ReLU,)):
            out.append("relu")
        elif isinstance(m, nn.Tanh):
            out.append("tanh")
    return " ".join(out)


def _copy_linear(dst, src):
    dst.weight.data.copy_(src.weight.data)
    dst.bias.data.copy_(src.bias.data)


def _randomize(module, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.data.copy_(torch.randn(p.shape, generator=g) * 0.3)


def model_section(ez: EZV2) -> dict:
    import torch

    torch.manual_seed(0)
    print("\n== STATE MODEL ==")
    report = {}
    theirs, cfg, fmt_mod = their_model(ez, *TASKS["cheetah_run"])
    ours, our_cfg = our_model("cheetah_run")
    theirs.eval()
    ours.eval()
    m = cfg.model
    print(f"their model config: hidden {m.hidden_shape}, rep/dyn width {m.rep_net_shape}/{m.dyn_shape}, blocks "
          f"{m.num_blocks}, act embed {m.act_embed_shape}, heads {list(m.val_net_shape)} BN={m.use_bn}, "
          f"init_zero={m.init_zero}, value_prefix={m.value_prefix}, proj {m.proj_hid_shape}>{m.proj_shape}, "
          f"pred {m.pred_hid_shape}>{m.pred_shape}")
    print(f"our model config (cheetah_run + ezv2_states): {our_cfg.model}; value_prefix={our_cfg.train.value_prefix}")

    their_parts = {
        "representation": theirs.representation_model,
        "dynamics": theirs.dynamics_model,
        "reward head": theirs.reward_prediction_model,
        "value head": torch.nn.ModuleList([theirs.value_policy_model.val_resblock, theirs.value_policy_model.val_ln,
                                           theirs.value_policy_model.val_nets]),
        "policy head": torch.nn.ModuleList([theirs.value_policy_model.pi_resblock, theirs.value_policy_model.pi_ln,
                                            theirs.value_policy_model.pi_net]),
        "projection": theirs.projection_model,
        "prediction": theirs.projection_head_model,
    }
    our_parts = {
        "representation": ours.representation,
        "dynamics": ours.dynamics_residual,
        "reward head": ours.reward_head,
        "value head": ours.value_head,
        "policy head": ours.policy_head,
        "projection": ours.projector,
        "prediction": ours.predictor,
    }
    print("\nparameters and layers (cheetah_run: 17 observations, 6 action dims; modules in registration order, "
          "functional relu/tanh inside blocks not listed):")
    print(f"  {'part':15s} {'EZ-V2':>9s} {'ez-robot':>9s}")
    for part in their_parts:
        print(f"  {part:15s} {_count(their_parts[part]):9d} {_count(our_parts[part]):9d}")
        print(f"      V2:   {_layers(their_parts[part])}")
        print(f"      ours: {_layers(our_parts[part])}")
    print(f"  {'total':15s} {_count(theirs):9d} {_count(ours):9d}")
    close_sets = dict(head_hidden=256, head_layers=2, projection_hidden=int(m.proj_hid_shape),
                      projection_out=int(m.proj_shape))
    close, _ = our_model("cheetah_run", **close_sets)
    close_parts = {"reward head": close.reward_head, "value head": close.value_head, "policy head": close.policy_head,
                   "projection": close.projector, "prediction": close.predictor}
    print(f"  nearest ez-robot settings ({', '.join(f'model.{k}={v}' for k, v in close_sets.items())}): "
          + ", ".join(f"{k} {_count(v)}" for k, v in close_parts.items()) + f", total {_count(close)}")
    print(f"  unused in V2's forward: dynamics_model.dyn_ln_2 ({_count(theirs.dynamics_model.dyn_ln_2)} parameters)")
    for task, (obs_dim, dims) in TASKS.items():
        t, _, _ = their_model(ez, obs_dim, dims)
        o, _ = our_model(task)
        print(f"  total {task}: EZ-V2 {_count(t)}, ez-robot {_count(o)}")

    # --- zero-initialized last layers ---
    def last_linear(module):
        return [x for x in module.modules() if isinstance(x, torch.nn.Linear)][-1]

    zero = {name: bool((last_linear(p).weight == 0).all()) for name, p in their_parts.items()
            if name.endswith("head")}
    zero_ours = {name: bool((last_linear(p).weight == 0).all()) for name, p in our_parts.items()
                 if name.endswith("head")}
    print(f"\nlast layer zero at init: EZ-V2 {zero}; ez-robot {zero_ours}")
    report["zero_init"] = (zero, zero_ours)

    # --- representation: same shapes; copy and compare ---
    _randomize(theirs.representation_model, 1)
    rms = theirs.representation_model.running_mean_std
    rms.running_mean.copy_(torch.randn(17) * 2)
    rms.running_var.copy_(torch.rand(17) * 3 + 0.2)
    rep_o = ours.representation
    _copy_linear(rep_o[0], theirs.representation_model.mlp)
    rep_o[1].load_state_dict(theirs.representation_model.ln.state_dict())
    for ob, tb in zip(rep_o[3:], theirs.representation_model.Rep_resblocks):
        ob.norm.load_state_dict(tb.ln1.state_dict())
        _copy_linear(ob.inner, tb.linear1)
        _copy_linear(ob.outer, tb.linear2)
    norm = ours.normalizer
    norm.shift.copy_(rms.running_mean)
    norm.inv_std.copy_(1.0 / torch.sqrt(rms.running_var + rms.epsilon))  # their epsilon 1e-5 (ours 1e-8)
    sd = torch.sqrt(rms.running_var)
    x = rms.running_mean + 5 * sd * (torch.rand(256, 17) * 2 - 1)          # within 5 std
    x_far = rms.running_mean + 15 * sd * torch.sign(torch.randn(256, 17))  # 15 std out
    with torch.no_grad():
        d_rep = max((theirs.do_representation(v) - ours.represent(v)).abs().max().item() for v in (x, x_far))
        norm.limit.fill_(10.0)
        d_near = (theirs.do_representation(x) - ours.represent(x)).abs().max().item()
        d_far = (theirs.do_representation(x_far) - ours.represent(x_far)).abs().max().item()
    print(f"\nrepresentation, V2 weights and running stats copied into ours: max |diff| {d_rep:.1e} without our "
          f"clip; with our clip at 10 std: {d_near:.1e} for inputs within 5 std, {d_far:.2f} at 15 std")
    report["representation"] = (d_rep, d_near, d_far)
    print(f"  normalizer: V2 RunningMeanStd starts from mean 0, var 1 with a pseudo-count of {rms.count:.0f} "
          f"(count attribute), eps {rms.epsilon}, no clip, updated in every training-mode forward; ours starts as "
          f"the identity, eps 1e-8, clip +-10, updated from the learner's batches")

    # --- dynamics: V2 = first block + num_blocks blocks; ours = first + (residual_blocks - 1) ---
    n_v2 = 1 + len(theirs.dynamics_model.dyn_resblocks)
    n_ours = 1 + len(ours.dynamics_residual.blocks)
    ours3, _ = our_model("cheetah_run", residual_blocks=n_v2)
    _randomize(theirs.dynamics_model, 2)
    dyn_o, dyn_t = ours3.dynamics_residual, theirs.dynamics_model
    _copy_linear(dyn_o.embed[0], dyn_t.act_linear1)
    dyn_o.embed[1].load_state_dict(dyn_t.act_ln1.state_dict())
    dyn_o.first.norm.load_state_dict(dyn_t.dyn_ln_1.state_dict())
    _copy_linear(dyn_o.first.inner, dyn_t.dyn_net_1)
    _copy_linear(dyn_o.first.outer, dyn_t.dyn_net_2)
    for ob, tb in zip(dyn_o.blocks, dyn_t.dyn_resblocks):
        ob.norm.load_state_dict(tb.ln1.state_dict())
        _copy_linear(ob.inner, tb.linear1)
        _copy_linear(ob.outer, tb.linear2)
    h = torch.randn(256, 128)
    a = torch.rand(256, 6) * 2 - 1
    with torch.no_grad():
        d_dyn = (dyn_t(h, a) - dyn_o(h, a)).abs().max().item()
    print(f"\ndynamics: V2 has {n_v2} pre-norm blocks (the first reads state+embedding, then num_blocks={n_v2 - 1}); "
          f"ours has {n_ours} with residual_blocks=2 (first + residual_blocks-1), and the representation shares "
          f"residual_blocks, so no setting gives V2's 2 + 3.  With model.residual_blocks={n_v2} the shapes match: "
          f"V2 weights copied, max |diff| {d_dyn:.1e}")
    report["dynamics"] = (n_v2, n_ours, d_dyn)

    # --- policy transform ---
    raw = torch.randn(64, 12) * 4

    class _Raw(torch.nn.Module):  # their policy MLP replaced by fixed raw outputs
        def forward(self, x):
            return raw.clone()

    pv = theirs.value_policy_model
    saved_pi, pv.pi_net = pv.pi_net, _Raw()
    with torch.no_grad():
        _, pol = pv(torch.randn(64, 128))
    pv.pi_net = saved_pi
    mean_o, std_o = gaussian_params(raw.numpy(), 6)
    d_pol = max(np.abs(pol[:, :6].numpy() - mean_o).max(), np.abs(pol[:, 6:12].numpy() - std_o).max())
    print(f"\npolicy parameterisation (V2 head transform vs ez_robot.policies.gaussian_params on the same raw "
          f"outputs): max |diff| {d_pol:.1e}")
    report["policy"] = d_pol

    # --- supports ---
    vs, rs = cfg.model.value_support, cfg.model.reward_support
    h_v, h_r = fmt_mod.transform_one(float(vs.range[1])), fmt_mod.transform_one(float(rs.range[1]))
    print(f"\nsupports: V2 (DMC branch) spaces {vs.bins} bins evenly in h over [h({vs.range[0]}), h({vs.range[1]})] = "
          f"+-{h_v:.3f} (step {2 * h_v / (vs.bins - 1):.4f}) for values and +-{h_r:.4f} (step "
          f"{2 * h_r / (rs.bins - 1):.5f}) for rewards; the yaml's scale ({vs.scale}, {rs.scale}) is not read on DMC.  "
          f"Ours: value {2 * our_cfg.model.support_size * our_cfg.model.value_support_scale + 1} bins, step "
          f"{1 / our_cfg.model.value_support_scale} in h over +-{our_cfg.model.support_size}; reward the same "
          f"(reward_support_size 0).  h(x) = sign(x)(sqrt(|x|+1)-1) + 0.001x on both sides.")
    from ez_robot.networks import scalar_to_support, support_to_scalar

    xs = torch.tensor([0.0, 0.3, 1.0, 2.0, 5.0, 50.0, 150.0, 299.0, 400.0])
    t_vec = fmt_mod.DiscreteSupport.scalar_to_vector(xs.clone()[:, None], **dict(vs))
    t_back = fmt_mod.DiscreteSupport.vector_to_scalar(torch.log(t_vec[:, 0] + 1e-30), **dict(vs)).flatten()
    o_back = support_to_scalar(torch.log(scalar_to_support(xs, our_cfg.model.support_size) + 1e-30),
                               our_cfg.model.support_size)
    print("  value round trip x -> two-hot -> x (log of the two-hot as logits):")
    print("   x      " + " ".join(f"{v:8.2f}" for v in xs.tolist()))
    print("   V2     " + " ".join(f"{v:8.3f}" for v in t_back.tolist()))
    print("   ours   " + " ".join(f"{v:8.3f}" for v in o_back.tolist()))
    rx = torch.tensor([-2.5, -1.0, 0.0, 0.013, 0.5, 1.0, 2.0, 2.5])
    r_vec = fmt_mod.DiscreteSupport.scalar_to_vector(rx.clone()[:, None], **dict(rs))
    r_back = fmt_mod.DiscreteSupport.vector_to_scalar(torch.log(r_vec[:, 0] + 1e-30), **dict(rs)).flatten()
    print("  reward round trip:  x " + " ".join(f"{v:7.3f}" for v in rx.tolist()))
    print("                     V2 " + " ".join(f"{v:7.3f}" for v in r_back.tolist()))
    report["supports"] = (t_back.tolist(), o_back.tolist(), r_back.tolist())

    # --- value clip and ensemble ---
    print(f"\nvalue read-out: V2 clips inferred values to [0, 1e5] on DMC (EfficientZero.initial/recurrent_inference), "
          f"takes the min over v_num={cfg.train.v_num} value heads; ours does neither (and the recipe learns rewards "
          f"offset by -1, whose values are negative: V2's clip would zero them)")

    # --- projection with matching widths: BN (ours) vs LN (V2) ---
    ours_p, _ = our_model("cheetah_run", projection_hidden=int(m.proj_hid_shape), projection_out=int(m.proj_shape))
    ours_p.eval()
    _randomize(theirs.projection_model, 3)
    _randomize(theirs.projection_head_model, 4)
    t_lin = [x for x in theirs.projection_model if isinstance(x, torch.nn.Linear)]
    t_ln = [x for x in theirs.projection_model if isinstance(x, torch.nn.LayerNorm)]
    o_lin = [x for x in ours_p.projector if isinstance(x, torch.nn.Linear)]
    o_bn = [x for x in ours_p.projector if isinstance(x, torch.nn.BatchNorm1d)]
    for d, s in zip(o_lin, t_lin):
        _copy_linear(d, s)
    for d, s in zip(o_bn, t_ln):
        d.weight.data.copy_(s.weight.data)
        d.bias.data.copy_(s.bias.data)
    ours_p.projector.train()
    with torch.no_grad():
        z = torch.randn(256, 128) * 2 + torch.randn(128)
        d_proj = (theirs.projection_model(z) - ours_p.projector(z)).abs().max().item()
        scale_proj = theirs.projection_model(z).abs().max().item()
    print(f"\nprojection with model.projection_hidden={m.proj_hid_shape}, projection_out={m.proj_shape}: same Linear "
          f"shapes, V2 weights copied, LayerNorm affine copied into our BatchNorm (training mode, batch statistics, "
          f"as in the loss): max |diff| {d_proj:.2f} (V2 outputs up to {scale_proj:.2f}): V2 normalizes each sample "
          f"(LN), ours each feature over the batch (BN); no setting for LN there")
    report["projection"] = d_proj
    return report


def main(argv=None):
    global BATCH
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ezv2", required=True, help="an EfficientZeroV2 checkout (Shengjiewang-Jason/EfficientZeroV2)")
    parser.add_argument("--section", choices=("search", "model", "all"), default="all")
    parser.add_argument("--roots", type=int, default=8, help="roots per search case (default %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="every case of the one-convention runs")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    BATCH = args.roots
    ez = EZV2(args.ezv2)
    if args.section in ("search", "all"):
        search_section(ez, args.verbose)
    if args.section in ("model", "all"):
        model_section(ez)


if __name__ == "__main__":
    main()
