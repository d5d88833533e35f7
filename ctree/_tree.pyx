# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython binding of the batched C++ MCTS arena (``tree.h``) and of the sampled search's
candidate draws (``candidates.h``).

This is the low-level layer: it checks every array it is given (type, dtype, shape,
finiteness) and raises a Python exception with a clear message instead of letting bad
input reach C++.  Use :func:`ez_robot.search` rather than driving it directly.
"""
import numpy as np
cimport numpy as cnp
from libc.math cimport isfinite
from libc.stdint cimport int32_t, int64_t, uint8_t
from libcpp cimport bool as cbool
from libcpp.string cimport string

cnp.import_array()


cdef extern from "tree.h" namespace "ez":
    cdef cppclass SearchParams:
        double c1
        double c2
        double discount
        int lstm_horizon
        double min_max_epsilon
        cbool gumbel
        double c_visit
        double c_scale
        int max_considered
        cbool root_mean_q
        cbool ezv2_tree

    void considered_visit_sequence(int, int, int32_t*)
    void ezv2_phase_ends(int, int, int32_t*)

    cdef cppclass Arena:
        Arena(int, int, int, const SearchParams&) except +
        string reset(const float*, const float*, const float*, const float*, double)
        string traverse(int32_t*, int32_t*, uint8_t*)
        string expand_and_backup(const float*, const float*, const float*)
        int first_visits_left() const
        string traverse_first_visits(int, int32_t*, int32_t*, uint8_t*)
        string expand_and_backup_first_visits(const float*, const float*, const float*)
        void root_visit_counts(int32_t*) const
        void root_values(float*) const
        void root_q_values(float*) const
        void depth_stats(int32_t*, float*) const
        void root_completed_q(float*) const
        void improved_policy(float*) const
        void best_actions(cbool, int64_t*) const
        void root_considered(uint8_t*) const
        int simulations_done() const
        cbool ready() const
        int node_visit_count(int, int) const
        double node_value_sum(int, int) const
        double node_value_prefix(int, int) const
        double node_network_value(int, int) const
        int node_depth(int, int) const
        int node_child(int, int, int) const
        double node_prior(int, int, int) const
        double node_log_prior(int, int, int) const


cdef extern from "candidates.h" namespace "ez":
    void draw_gaussian "ez::gaussian_candidates"(const float*, int, int, const double*, int, double, float*, int)
    void draw_factorized "ez::factorized_candidates"[T](const T*, int, int, int, double, const double*, int,
                                                        const float*, float*, int)
    void count_duplicates "ez::duplicate_counts"(const float*, int, int, int, int, int32_t*)
    void write_share_logits "ez::share_logits"(const float*, int, int, int, int, const float*, float*)


cdef cnp.ndarray _checked(object x, str name, int rows, int cols):
    """x as a C-contiguous float32 array of shape (rows,) (cols < 0) or (rows, cols)."""
    if not isinstance(x, cnp.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    cdef cnp.ndarray a = <cnp.ndarray> x
    if cnp.PyArray_TYPE(a) != cnp.NPY_FLOAT32:
        raise TypeError(f"{name} must have dtype float32, got {a.dtype}")
    cdef int ndim = cnp.PyArray_NDIM(a)
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(a)
    if cols < 0:
        ok = ndim == 1 and dims[0] == rows
    else:
        ok = ndim == 2 and dims[0] == rows and dims[1] == cols
    if not ok:
        expected = str((rows,)) if cols < 0 else str((rows, cols))
        raise ValueError(f"{name} must have shape {expected}, got {x.shape}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(a):
        a = np.ascontiguousarray(a)
    return a


cdef inline void _raise_if(string err, type kind=ValueError) except *:
    if err.size() > 0:
        raise kind(err.decode())


ctypedef void (*_Schedule)(int, int, int32_t*) noexcept


cdef cnp.ndarray _schedule(_Schedule fill, int num_considered, int num_simulations):
    """[num_simulations] int32 filled by one of the tree's per-simulation schedules."""
    if num_considered < 1:
        raise ValueError(f"num_considered must be >= 1, got {num_considered}")
    if num_simulations < 0:
        raise ValueError(f"num_simulations must be >= 0, got {num_simulations}")
    cdef cnp.ndarray out = np.empty(num_simulations, dtype=np.int32)
    fill(num_considered, num_simulations, <int32_t*> cnp.PyArray_DATA(out))
    return out


def considered_visits(int num_considered, int num_simulations):
    """[num_simulations] int32: the visit count the root child sequential halving picks
    at each simulation has before it, with ``num_considered`` candidates (Gumbel mode)."""
    return _schedule(considered_visit_sequence, num_considered, num_simulations)


def ezv2_halving(int num_considered, int num_simulations):
    """[num_simulations] int32: with ``ezv2_tree``, how many survivors sequential halving
    keeps after each simulation (EfficientZero V2's schedule), 0 where no phase ends."""
    return _schedule(ezv2_phase_ends, num_considered, num_simulations)


cdef class Tree:
    """B search trees in one arena, each with room for ``num_simulations + 1`` nodes.

    Node 0 of each tree is its root; the node created by simulation ``s`` is node
    ``s + 1`` in every tree, so a caller can keep hidden states in a pool indexed by
    ``[node, tree]``.

    Two selection modes (see ``tree.h``): pUCT (default) and, with ``gumbel=True``,
    Gumbel search over K sampled candidates (``num_actions`` is K): sequential halving
    over the top ``max_considered`` candidates at the root, the improved policy
    ``softmax(log pi + sigma(completed Q))`` below it, with
    ``sigma(q) = (c_visit + max_b N(b)) * c_scale * q``.  In both modes a logit of -inf
    marks a child that does not exist: it is never visited and has no policy mass.
    pUCT scores an unvisited root child with Q = 0 (the paper), or with ``root_mean_q``
    the mean Q of the root's visited children (for returns that can be negative).
    ``ezv2_tree`` (Gumbel mode) follows EfficientZero V2's released tree instead where it
    differs (``tree.h`` lists how).
    """

    cdef Arena* arena
    cdef readonly int batch_size
    cdef readonly int num_actions
    cdef readonly int num_simulations
    cdef readonly bint gumbel
    cdef int pending_first_visits

    def __cinit__(self, int batch_size, int num_actions, int num_simulations, *,
                  double c1=1.25, double c2=19652.0, double discount=0.997,
                  int lstm_horizon=5, double min_max_epsilon=0.01, bint gumbel=False,
                  double c_visit=50.0, double c_scale=0.1, int max_considered=16,
                  bint root_mean_q=False, bint ezv2_tree=False):
        self.arena = NULL
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        if num_simulations < 0:
            raise ValueError(f"num_simulations must be >= 0, got {num_simulations}")
        if not (c1 > 0 and isfinite(c1)):
            raise ValueError(f"c1 must be a positive finite number, got {c1}")
        if not (c2 > 0 and isfinite(c2)):
            raise ValueError(f"c2 must be a positive finite number, got {c2}")
        if not (0.0 <= discount <= 1.0):
            raise ValueError(f"discount must be in [0, 1], got {discount}")
        if lstm_horizon < 1:
            raise ValueError(f"lstm_horizon must be >= 1, got {lstm_horizon}")
        if not (min_max_epsilon > 0 and isfinite(min_max_epsilon)):
            raise ValueError(f"min_max_epsilon must be a positive finite number, got {min_max_epsilon}")
        if not (c_visit >= 0 and isfinite(c_visit)):
            raise ValueError(f"c_visit must be a non-negative finite number, got {c_visit}")
        if not (c_scale > 0 and isfinite(c_scale)):
            raise ValueError(f"c_scale must be a positive finite number, got {c_scale}")
        if max_considered < 1:
            raise ValueError(f"max_considered must be >= 1, got {max_considered}")
        if ezv2_tree and not gumbel:
            raise ValueError("ezv2_tree needs gumbel=True (it is EfficientZero V2's Gumbel tree)")
        cdef SearchParams params
        params.c1 = c1
        params.c2 = c2
        params.discount = discount
        params.lstm_horizon = lstm_horizon
        params.min_max_epsilon = min_max_epsilon
        params.gumbel = gumbel
        params.c_visit = c_visit
        params.c_scale = c_scale
        params.max_considered = max_considered
        params.root_mean_q = root_mean_q
        params.ezv2_tree = ezv2_tree
        self.batch_size = batch_size
        self.num_actions = num_actions
        self.num_simulations = num_simulations
        self.gumbel = gumbel
        self.arena = new Arena(batch_size, num_actions, num_simulations, params)

    def __dealloc__(self):
        if self.arena != NULL:
            del self.arena

    @property
    def simulations_done(self):
        return self.arena.simulations_done()

    def reset(self, value_prefix, value, policy_logits, noise=None, double noise_fraction=0.0):
        """Start a new search: value_prefix [B], value [B], policy_logits [B, A] (float32;
        -inf marks a child that does not exist, every row needs one finite logit).

        pUCT mode: optional Dirichlet noise [B, A] mixed into the root prior with
        ``noise_fraction``.  Gumbel mode: ``noise`` is the Gumbel noise g [B, A] (any
        finite values; None means g = 0, greedy) and ``noise_fraction`` is ignored."""
        cdef int B = self.batch_size, A = self.num_actions
        cdef cnp.ndarray vp = _checked(value_prefix, "value_prefix", B, -1)
        cdef cnp.ndarray v = _checked(value, "value", B, -1)
        cdef cnp.ndarray lg = _checked(policy_logits, "policy_logits", B, A)
        cdef cnp.ndarray nz
        cdef const float* noise_ptr = NULL
        if noise is not None:
            nz = _checked(noise, "noise", B, A)
            noise_ptr = <const float*> cnp.PyArray_DATA(nz)
        _raise_if(self.arena.reset(<const float*> cnp.PyArray_DATA(vp), <const float*> cnp.PyArray_DATA(v),
                                   <const float*> cnp.PyArray_DATA(lg), noise_ptr, noise_fraction))
        self.pending_first_visits = 0

    def traverse(self):
        """Select one leaf per tree.  Returns ``(parent_rows [B] int32, actions [B] int32,
        reset_mask [B] bool)``: the row ``parent_node * B + b`` of the hidden state to step
        in a [nodes * B] pool, the action, and whether that parent is a value-prefix reset
        boundary (its LSTM state starts afresh)."""
        cdef cnp.npy_intp B = self.batch_size
        cdef cnp.ndarray parents = cnp.PyArray_EMPTY(1, &B, cnp.NPY_INT32, 0)
        cdef cnp.ndarray actions = cnp.PyArray_EMPTY(1, &B, cnp.NPY_INT32, 0)
        cdef cnp.ndarray reset = cnp.PyArray_EMPTY(1, &B, cnp.NPY_BOOL, 0)
        _raise_if(self.arena.traverse(<int32_t*> cnp.PyArray_DATA(parents), <int32_t*> cnp.PyArray_DATA(actions),
                                      <uint8_t*> cnp.PyArray_DATA(reset)), RuntimeError)
        return parents, actions, reset

    def expand_and_backup(self, value_prefix, value, policy_logits):
        """Create the leaves chosen by the last :meth:`traverse` and back their values up."""
        cdef int B = self.batch_size, A = self.num_actions
        cdef cnp.ndarray vp = _checked(value_prefix, "value_prefix", B, -1)
        cdef cnp.ndarray v = _checked(value, "value", B, -1)
        cdef cnp.ndarray lg = _checked(policy_logits, "policy_logits", B, A)
        cdef string err = self.arena.expand_and_backup(<const float*> cnp.PyArray_DATA(vp),
                                                       <const float*> cnp.PyArray_DATA(v),
                                                       <const float*> cnp.PyArray_DATA(lg))
        if err.size() > 0:
            message = err.decode()
            raise (RuntimeError if message.startswith("expand_and_backup()") else ValueError)(message)

    def first_visits_left(self):
        """Gumbel mode: how many of the next simulations are first visits of root candidates
        in every tree (sequential halving's first round, while nothing else has run since
        :meth:`reset`); they can go to the network in one call (``traverse_first_visits``).
        0 in pUCT mode, after a :meth:`traverse`, or once a tree has visited every candidate."""
        return self.arena.first_visits_left()

    def traverse_first_visits(self, int k):
        """The next ``k`` (<= :meth:`first_visits_left`) simulations' leaves at once, in the
        order the simulations would make them: ``(parent_rows [k * B], actions [k * B],
        reset_mask [k * B])``, row ``j * B + b`` for simulation ``j`` of tree ``b``.  The same
        search as ``k`` :meth:`traverse` / :meth:`expand_and_backup` pairs."""
        if k < 1:
            raise ValueError(f"traverse_first_visits needs k >= 1, got {k}")
        cdef cnp.npy_intp n = <cnp.npy_intp> k * self.batch_size
        cdef cnp.ndarray parents = cnp.PyArray_EMPTY(1, &n, cnp.NPY_INT32, 0)
        cdef cnp.ndarray actions = cnp.PyArray_EMPTY(1, &n, cnp.NPY_INT32, 0)
        cdef cnp.ndarray reset = cnp.PyArray_EMPTY(1, &n, cnp.NPY_BOOL, 0)
        _raise_if(self.arena.traverse_first_visits(k, <int32_t*> cnp.PyArray_DATA(parents),
                                                   <int32_t*> cnp.PyArray_DATA(actions),
                                                   <uint8_t*> cnp.PyArray_DATA(reset)), RuntimeError)
        self.pending_first_visits = k
        return parents, actions, reset

    def expand_and_backup_first_visits(self, value_prefix, value, policy_logits):
        """Creates the ``k * B`` leaves of the last :meth:`traverse_first_visits` from the
        network's outputs for its rows (value_prefix and value [k * B], policy_logits
        [k * B, A]) and backs them up, simulation by simulation."""
        if self.pending_first_visits == 0:
            raise RuntimeError("expand_and_backup_first_visits() needs a traverse_first_visits() first")
        cdef int rows = self.pending_first_visits * self.batch_size, A = self.num_actions
        cdef cnp.ndarray vp = _checked(value_prefix, "value_prefix", rows, -1)
        cdef cnp.ndarray v = _checked(value, "value", rows, -1)
        cdef cnp.ndarray lg = _checked(policy_logits, "policy_logits", rows, A)
        cdef string err = self.arena.expand_and_backup_first_visits(<const float*> cnp.PyArray_DATA(vp),
                                                                    <const float*> cnp.PyArray_DATA(v),
                                                                    <const float*> cnp.PyArray_DATA(lg))
        if err.size() == 0:
            self.pending_first_visits = 0
        else:
            message = err.decode()
            raise (RuntimeError if message.startswith("expand_and_backup_first_visits()") else ValueError)(message)

    def root_visit_counts(self):
        """[B, A] int32 visit counts of the root's children."""
        cdef cnp.ndarray out = np.empty((self.batch_size, self.num_actions), dtype=np.int32)
        self.arena.root_visit_counts(<int32_t*> cnp.PyArray_DATA(out))
        return out

    def root_values(self):
        """[B] float32 mean backed-up value at each root (the network value if no simulation ran)."""
        cdef cnp.ndarray out = np.empty(self.batch_size, dtype=np.float32)
        self.arena.root_values(<float*> cnp.PyArray_DATA(out))
        return out

    def root_q_values(self):
        """[B, A] float32 Q(root, a) of visited children, NaN for unvisited ones."""
        cdef cnp.ndarray out = np.empty((self.batch_size, self.num_actions), dtype=np.float32)
        self.arena.root_q_values(<float*> cnp.PyArray_DATA(out))
        return out

    cdef _check_ready(self, str name):
        if not self.arena.ready():
            raise RuntimeError(f"reset() must be called before {name}()")

    def root_completed_q(self):
        """[B, A] float32 completed Q(root, a): Q of visited children, for unvisited ones
        the mixed value v_mix (network value and prior-weighted visited Q); NaN where masked."""
        self._check_ready("root_completed_q")
        cdef cnp.ndarray out = np.empty((self.batch_size, self.num_actions), dtype=np.float32)
        self.arena.root_completed_q(<float*> cnp.PyArray_DATA(out))
        return out

    def improved_policy(self):
        """[B, A] float32 softmax(log pi + sigma(completed Q normalized by the tree's min-max))
        at each root, 0 where masked: the policy target of Gumbel search.  pUCT mode: the
        same formula, from the network prior before Dirichlet noise."""
        self._check_ready("improved_policy")
        cdef cnp.ndarray out = np.empty((self.batch_size, self.num_actions), dtype=np.float32)
        self.arena.improved_policy(<float*> cnp.PyArray_DATA(out))
        return out

    def best_actions(self, bint gumbel=True):
        """[B] int64: among the considered root children visited most (the survivors of
        sequential halving), the argmax of g + log pi + sigma(completed Q); ``gumbel=False``
        leaves g out.  With no simulation: the argmax of g + log pi.  pUCT mode: every
        valid child is considered and g = 0 (the most visited, ties by improved policy)."""
        self._check_ready("best_actions")
        cdef cnp.ndarray out = np.empty(self.batch_size, dtype=np.int64)
        self.arena.best_actions(gumbel, <int64_t*> cnp.PyArray_DATA(out))
        return out

    def root_considered(self):
        """[B, A] bool: the root children the search may visit (Gumbel mode: the top
        ``max_considered`` of g + log pi; pUCT mode: every valid child)."""
        self._check_ready("root_considered")
        cdef cnp.ndarray out = np.empty((self.batch_size, self.num_actions), dtype=np.bool_)
        self.arena.root_considered(<uint8_t*> cnp.PyArray_DATA(out))
        return out

    def depth_stats(self):
        """``(max_depth [B] int32, mean_depth [B] float32)`` of the leaves expanded so far."""
        cdef cnp.ndarray mx = np.empty(self.batch_size, dtype=np.int32)
        cdef cnp.ndarray mean = np.empty(self.batch_size, dtype=np.float32)
        self.arena.depth_stats(<int32_t*> cnp.PyArray_DATA(mx), <float*> cnp.PyArray_DATA(mean))
        return mx, mean

    def node(self, int tree, int node):
        """Statistics of one node, for tests and debugging: a dict with visit_count,
        value_sum, value_prefix, network_value, depth, children [A] (-1 = not expanded,
        -2 = masked), prior [A] and log_prior [A] (-inf = masked; pUCT mode keeps it at
        the root only, NaN below)."""
        if not 0 <= tree < self.batch_size:
            raise IndexError(f"tree index {tree} out of range [0, {self.batch_size})")
        cdef int created = self.arena.simulations_done() + 1
        if not 0 <= node < created:
            raise IndexError(f"node index {node} out of range: tree has {created} node(s)")
        return {
            "visit_count": self.arena.node_visit_count(tree, node),
            "value_sum": self.arena.node_value_sum(tree, node),
            "value_prefix": self.arena.node_value_prefix(tree, node),
            "network_value": self.arena.node_network_value(tree, node),
            "depth": self.arena.node_depth(tree, node),
            "children": [self.arena.node_child(tree, node, a) for a in range(self.num_actions)],
            "prior": [self.arena.node_prior(tree, node, a) for a in range(self.num_actions)],
            "log_prior": [self.arena.node_log_prior(tree, node, a) for a in range(self.num_actions)],
        }


# --- candidate actions of a sampled search (candidates.h), and their rows in its action pool ---

cdef cnp.ndarray _array(object x, str name, int dtype, tuple shape, bint writable=False):
    """x itself if it is a C-contiguous numpy array of ``dtype`` and ``shape``, else an error."""
    if not isinstance(x, cnp.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    cdef cnp.ndarray a = <cnp.ndarray> x
    if cnp.PyArray_TYPE(a) != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(cnp.PyArray_DescrFromType(dtype))}, got {a.dtype}")
    cdef int i, ndim = cnp.PyArray_NDIM(a)
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(a)
    ok = ndim == len(shape)
    for i in range(ndim if ok else 0):
        ok = ok and dims[i] == <cnp.npy_intp> shape[i]
    if not ok:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(a):
        raise ValueError(f"{name} must be C-contiguous")
    if writable and not cnp.PyArray_ISWRITEABLE(a):
        raise ValueError(f"{name} must be writable")
    return a


def gaussian_candidates(params, noise, double bound, actions):
    """Gaussian candidates of B nodes, written into ``actions`` [B, slots, D] float32 (its
    first ``draws`` slots): clip(tanh(m + s z), -bound, bound) with m, s the pre-squash
    mean and std of ``params`` [B, 2D] float32 and z = ``noise`` [B, draws, D] float64."""
    cdef int B, draws, D, slots
    B, draws, D, slots = _draws_shape(noise, "noise", actions)
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    cdef cnp.ndarray p = _array(params, "params", cnp.NPY_FLOAT32, (B, 2 * D))
    cdef cnp.ndarray z = _array(noise, "noise", cnp.NPY_FLOAT64, (B, draws, D))
    cdef cnp.ndarray out = _array(actions, "actions", cnp.NPY_FLOAT32, (B, slots, D), True)
    draw_gaussian(<const float*> cnp.PyArray_DATA(p), B, D, <const double*> cnp.PyArray_DATA(z), draws, bound,
                  <float*> cnp.PyArray_DATA(out), slots)


def factorized_candidates(params, uniforms, bin_values, actions, double temperature=1.0, log_share=None,
                          logits=None):
    """Factorized candidates of B nodes: ``uniforms`` [B, draws, D] float64 in [0, 1) pick
    each dimension's bin from the categoricals of ``params`` [B, D x bins] (float32 or
    float64) at ``temperature`` (the inverse CDF); writes ``bin_values`` [bins] float32 of
    the chosen bins into ``actions`` [B, slots, D] float32 (its first ``draws`` slots).
    With ``log_share`` [draws + 1] float32 (log(c / draws)), also writes the tree's prior
    into ``logits`` [B, slots] float32: ``log_share[c]`` at the first copy of an action drawn
    c times, ``log_share[0]`` (-inf) at its later copies and past ``draws``."""
    cdef int B, draws, D, slots
    B, draws, D, slots = _draws_shape(uniforms, "uniforms", actions)
    if not isinstance(bin_values, cnp.ndarray) or bin_values.ndim != 1 or len(bin_values) < 1:
        raise ValueError("bin_values must be a non-empty 1-dimensional numpy array")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    cdef int bins = len(bin_values)
    cdef cnp.ndarray u = _array(uniforms, "uniforms", cnp.NPY_FLOAT64, (B, draws, D))
    cdef cnp.ndarray values = _array(bin_values, "bin_values", cnp.NPY_FLOAT32, (bins,))
    cdef cnp.ndarray out = _array(actions, "actions", cnp.NPY_FLOAT32, (B, slots, D), True)
    cdef cnp.ndarray p
    if isinstance(params, cnp.ndarray) and cnp.PyArray_TYPE(<cnp.ndarray> params) == cnp.NPY_FLOAT64:
        p = _array(params, "params", cnp.NPY_FLOAT64, (B, D * bins))
        draw_factorized[double](<const double*> cnp.PyArray_DATA(p), B, D, bins, temperature,
                                <const double*> cnp.PyArray_DATA(u), draws, <const float*> cnp.PyArray_DATA(values),
                                <float*> cnp.PyArray_DATA(out), slots)
    else:
        p = _array(params, "params", cnp.NPY_FLOAT32, (B, D * bins))
        draw_factorized[float](<const float*> cnp.PyArray_DATA(p), B, D, bins, temperature,
                               <const double*> cnp.PyArray_DATA(u), draws, <const float*> cnp.PyArray_DATA(values),
                               <float*> cnp.PyArray_DATA(out), slots)
    cdef cnp.ndarray share, out_logits
    if log_share is not None:
        share = _array(log_share, "log_share", cnp.NPY_FLOAT32, (draws + 1,))
        out_logits = _array(logits, "logits", cnp.NPY_FLOAT32, (B, slots), True)
        write_share_logits(<const float*> cnp.PyArray_DATA(out), B, slots, D, draws,
                           <const float*> cnp.PyArray_DATA(share), <float*> cnp.PyArray_DATA(out_logits))


def duplicate_counts(actions, int draws, counts):
    """Writes into ``counts`` [B, slots] int32 how many of the first ``draws`` candidates of
    each row of ``actions`` [B, slots, D] float32 equal each candidate, at the first of
    them; 0 at the later copies and past ``draws`` (merged duplicates)."""
    if not isinstance(actions, cnp.ndarray) or actions.ndim != 3:
        raise ValueError("actions must be a 3-dimensional numpy array [B, slots, D]")
    cdef int B = actions.shape[0], slots = actions.shape[1], D = actions.shape[2]
    if not 0 <= draws <= slots:
        raise ValueError(f"draws must be in [0, {slots}], got {draws}")
    cdef cnp.ndarray a = _array(actions, "actions", cnp.NPY_FLOAT32, (B, slots, D))
    cdef cnp.ndarray out = _array(counts, "counts", cnp.NPY_INT32, (B, slots), True)
    count_duplicates(<const float*> cnp.PyArray_DATA(a), B, slots, D, draws, <int32_t*> cnp.PyArray_DATA(out))


cdef tuple _draws_shape(object numbers, str name, object actions):
    """(B, draws, D, slots) of random numbers [B, draws, D] for actions [B, slots, D]."""
    if not isinstance(numbers, cnp.ndarray) or numbers.ndim != 3:
        raise ValueError(f"{name} must be a 3-dimensional numpy array [B, draws, D]")
    if not isinstance(actions, cnp.ndarray) or actions.ndim != 3:
        raise ValueError("actions must be a 3-dimensional numpy array [B, slots, D]")
    B, draws, D = numbers.shape
    slots = actions.shape[1]
    if slots < draws:
        raise ValueError(f"actions has {slots} slots per row for {draws} draws")
    return B, draws, D, slots


def child_rows(pool, parent_rows, children):
    """``pool[parent_rows, children]``: [B, D] float32 rows of ``pool`` [rows, A, D] float32,
    one per (parent row, child) pair of a :meth:`Tree.traverse` (the sampled search keeps
    its candidates' action vectors so)."""
    if not isinstance(pool, cnp.ndarray) or pool.ndim != 3:
        raise ValueError("pool must be a 3-dimensional numpy array [rows, A, D]")
    cdef cnp.npy_intp rows = pool.shape[0], A = pool.shape[1], D = pool.shape[2]
    cdef cnp.ndarray p = _array(pool, "pool", cnp.NPY_FLOAT32, (rows, A, D))
    cdef cnp.npy_intp B = len(parent_rows)
    cdef cnp.ndarray r = _array(parent_rows, "parent_rows", cnp.NPY_INT32, (B,))
    cdef cnp.ndarray c = _array(children, "children", cnp.NPY_INT32, (B,))
    cdef cnp.npy_intp[2] shape = [B, D]
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, shape, cnp.NPY_FLOAT32, 0)
    cdef const int32_t* row = <const int32_t*> cnp.PyArray_DATA(r)
    cdef const int32_t* child = <const int32_t*> cnp.PyArray_DATA(c)
    cdef const float* source = <const float*> cnp.PyArray_DATA(p)
    cdef float* target = <float*> cnp.PyArray_DATA(out)
    cdef cnp.npy_intp b, d
    for b in range(B):
        if not (0 <= row[b] < rows and 0 <= child[b] < A):
            raise IndexError(f"(parent row, child) ({row[b]}, {child[b]}) outside the pool's [{rows}, {A}]")
        for d in range(D):
            target[b * D + d] = source[(row[b] * A + child[b]) * D + d]
    return out

