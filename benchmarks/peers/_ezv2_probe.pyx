# distutils: language=c++
# cython: language_level=3
"""A second Python binding of EfficientZero V2's C++ Gumbel tree (their ez/mcts/ctree), for
the parity harness only (benchmarks/peers/ezv2_parity.py builds it from their checkout).

It offers the functions their ``CyMCTS.search_continuous`` calls, under the same names and
with the same arguments, so the harness can hand it to their unchanged driver in place of
their own binding; on top it exposes what their binding keeps inside the tree: each root's
completed Q, v_mix, children's visits, the list of values its mean is taken over, and the
min-max statistics.  Nothing here computes a search quantity itself: every number comes
from their C++ (compiled unchanged from their sources).  The last Roots and
MinMaxStatsList made are kept in ``LAST`` for those read-outs.
"""
from libcpp.vector cimport vector

cdef extern from "cminimax.cpp":
    pass

cdef extern from "cnode.cpp":
    pass

cdef extern from "cminimax.h" namespace "tools":
    cdef cppclass CMinMaxStats:
        float maximum
        float minimum

    cdef cppclass CMinMaxStatsList:
        CMinMaxStatsList(int) except +
        vector[CMinMaxStats] stats_lst
        void set_static_val(float, int, float)

cdef extern from "cnode.h" namespace "tree":
    cdef cppclass CNode:
        int visit_count
        int num_actions
        vector[int] selected_children_idx
        vector[float] estimated_value_lst
        vector[float] get_completed_Q(CMinMaxStats&, int)
        vector[int] get_children_visits()
        float get_v_mix()
        float get_value()

    cdef cppclass CRoots:
        CRoots(int, int, int, float) except +
        vector[CNode] roots
        void prepare(const vector[float]&, const vector[vector[float]]&, int)
        vector[vector[int]] get_distributions()
        vector[vector[float]] get_root_policies(CMinMaxStatsList*)
        vector[int] get_best_actions()
        vector[float] get_values()

    cdef cppclass CSearchResults:
        CSearchResults() except +
        CSearchResults(int) except +
        vector[int] hidden_state_index_x_lst
        vector[int] hidden_state_index_y_lst
        vector[int] last_actions
        vector[int] search_lens

    vector[int] c_batch_sequential_halving(CRoots*, const vector[vector[float]]&, CMinMaxStatsList*, int, int)
    void c_batch_traverse(CRoots*, CMinMaxStatsList*, CSearchResults&, int, int, const vector[vector[float]]&, int)
    void c_batch_back_propagate(int, const vector[float]&, const vector[float]&, const vector[vector[float]]&,
                                CMinMaxStatsList*, CSearchResults&, vector[int], int)

LAST = {}


cdef class MinMaxStatsList:
    cdef CMinMaxStatsList* ptr
    cdef int n

    def __cinit__(self, int num):
        self.ptr = new CMinMaxStatsList(num)
        self.n = num
        LAST["min_max"] = self

    def __dealloc__(self):
        del self.ptr

    def set_static_val(self, float delta, int c_visit, float c_scale):
        self.ptr.set_static_val(delta, c_visit, c_scale)

    def bounds(self, int i):
        """(minimum, maximum) of tree i."""
        return self.ptr.stats_lst[i].minimum, self.ptr.stats_lst[i].maximum


cdef class ResultsWrapper:
    cdef CSearchResults res

    def __cinit__(self, int num):
        self.res = CSearchResults(num)

    def get_search_len(self):
        return self.res.search_lens


cdef class Roots:
    cdef CRoots* ptr
    cdef int n

    def __cinit__(self, int num_roots, int num_actions, int num_simulations, float discount):
        # the same node pool size as their binding reserves (it must not reallocate)
        self.ptr = new CRoots(num_roots, num_actions, num_actions * (num_simulations + 2), discount)
        self.n = num_roots
        LAST["roots"] = self

    def __dealloc__(self):
        del self.ptr

    @property
    def num(self):
        return self.n

    def prepare(self, list values, list policies, int leaf_action_num):
        self.ptr.prepare(values, policies, leaf_action_num)

    def get_distributions(self):
        return self.ptr.get_distributions()

    def get_root_policies(self, MinMaxStatsList mm):
        return self.ptr.get_root_policies(mm.ptr)

    def get_best_actions(self):
        return self.ptr.get_best_actions()

    def get_values(self):
        return self.ptr.get_values()

    # --- read-outs their binding does not offer ---
    def completed_q(self, int i, MinMaxStatsList mm, int normalize=0):
        """Completed Q of root i's children (v_mix where unexpanded); normalize=1: min-max normalized."""
        return self.ptr.roots[i].get_completed_Q(mm.ptr.stats_lst[i], normalize)

    def v_mix(self, int i):
        return self.ptr.roots[i].get_v_mix()

    def visit_count(self, int i):
        return self.ptr.roots[i].visit_count

    def value_list(self, int i):
        return self.ptr.roots[i].estimated_value_lst

    def selected(self, int i):
        return self.ptr.roots[i].selected_children_idx


def batch_sequential_halving(Roots roots, list noises, MinMaxStatsList mm, int phase, int top):
    return c_batch_sequential_halving(roots.ptr, noises, mm.ptr, phase, top)


def batch_traverse(Roots roots, MinMaxStatsList mm, ResultsWrapper results, int num_simulations,
                   int simulation, list noises, int top):
    c_batch_traverse(roots.ptr, mm.ptr, results.res, num_simulations, simulation, noises, top)
    return results.res.hidden_state_index_x_lst, results.res.hidden_state_index_y_lst, results.res.last_actions


def batch_back_propagate(int index_x, list value_prefixes, list values, list logits, MinMaxStatsList mm,
                         ResultsWrapper results, list is_reset, int leaf_action_num):
    c_batch_back_propagate(index_x, value_prefixes, values, logits, mm.ptr, results.res, is_reset, leaf_action_num)
