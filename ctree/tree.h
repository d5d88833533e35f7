// Batched MCTS arena for EfficientZero (see the paper's appendix "MCTS Details").
//
// One Arena holds B independent trees, each with room for `num_simulations + 1`
// nodes (node 0 is the root; the node created by simulation s is node s + 1 in every
// tree).  All storage is allocated once in the constructor; the hot loop (traverse,
// expand_and_backup) allocates nothing.  Numbers are kept in double so that a plain
// Python reference search reproduces them bit for bit.
//
// Two selection modes share everything else (value prefix, backup, min-max, pools):
//
// - pUCT (the paper): every node scores its children with pUCT; the root prior may be
//   mixed with Dirichlet noise.
// - Gumbel (`SearchParams::gumbel`; "Policy improvement by planning with Gumbel",
//   Danihelka et al., ICLR 2022): the children are K candidates a caller sampled.  The
//   root runs sequential halving over the top-m candidates by g + log pi (g: Gumbel
//   noise), interior nodes pick deterministically from the improved policy
//   pi' = softmax(log pi + sigma(completed Q)).
//
// In both modes a logit of -inf marks a child that does not exist (a deduplicated
// candidate): its prior is 0 and it is never selected, visited or counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ez {

struct SearchParams {
    double c1 = 1.25;            // pUCT exploration constant
    double c2 = 19652.0;         // pUCT visit-count scale
    double discount = 0.988;     // per agent step (0.997^4 for Atari)
    int lstm_horizon = 5;        // value prefix restarts every this many depths
    double min_max_epsilon = 0.01;  // soft min-max threshold
    bool gumbel = false;         // Gumbel selection instead of pUCT
    double c_visit = 50.0;       // sigma(q) = (c_visit + max_b N(b)) * c_scale * q
    double c_scale = 0.1;
    int max_considered = 16;     // m: root candidates sequential halving starts from
    bool root_mean_q = false;    // pUCT: unvisited root children get the mean Q of the visited
                                 // ones instead of the paper's 0 (see select_puct)
    bool ezv2_tree = false;      // Gumbel mode: EfficientZero V2's released tree (below)
};

// `ezv2_tree`: the conventions of EfficientZero V2's released continuous search where they
// differ from ours (and from the Gumbel paper, where it says).  Each node's expansion counts
// as its first visit: the root's value, its v_mix and the interior selection count the
// root's network value as one more backup and a node's own visit in N(node); v_mix is
// (V(node) + N(node) sum pi q / sum pi) / (1 + N(node)) with V the node's running mean; the
// min-max statistics take the sampled path return r + gamma G at each level and gamma G at
// the root, and with no spread normalize q to itself (clipped); sequential halving ranks
// the survivors by g + log pi + sigma(q) only at V2's phase ends, visits the first survivor
// with the fewest visits and plays the first survivor.

// Running min/max of the Q values seen in one tree (updated along backup paths only).
struct MinMax {
    double lo, hi;
    void clear();
    void update(double q);
    double normalize(double q, double epsilon) const;
};

// The root visit count sequential halving asks for at each simulation: with m
// considered candidates and n simulations, out[s] (s < n) is the visit count the
// candidate picked at simulation s has before it.  Phases visit the surviving
// candidates in turn, each phase getting about n / (ceil(log2 m) * survivors) rounds,
// and halve the survivors (never below 2).  With m <= 1: 0, 1, 2, ...
void considered_visit_sequence(int num_considered, int num_simulations, int32_t* out);

// `ezv2_tree`'s halving schedule (V2's): out[s] (s < n) is how many survivors are kept
// after simulation s, 0 where no phase ends.  With m <= 1 no phase ends.
void ezv2_phase_ends(int num_considered, int num_simulations, int32_t* out);

class Arena {
public:
    static constexpr int32_t kMasked = -2;  // child slot of a masked (-inf logit) candidate

    Arena(int batch_size, int num_actions, int num_simulations, const SearchParams& params);

    // Starts B fresh searches.  `logits` is [B, A] (-inf masks a child; at least one
    // per row must be finite).  pUCT mode: `noise` ([B, A], non-negative) may be null, in
    // which case `noise_fraction` is ignored; masked children keep prior 0 (their share
    // of the noise is dropped).  Gumbel mode: `noise` is the Gumbel noise g ([B, A], any
    // finite values; null means g = 0, greedy) and `noise_fraction` is ignored.  Returns
    // an empty string on success or a message naming the bad input.
    std::string reset(const float* value_prefix, const float* value, const float* logits,
                      const float* noise, double noise_fraction);

    // Selects one leaf per tree.  Writes, for each tree b, the row of the leaf's parent
    // in a caller's [nodes * B] hidden-state pool (parent_node * B + b: the state the
    // network must step), the action to step, and whether the parent is a value-prefix
    // reset boundary (its LSTM state starts afresh).
    std::string traverse(int32_t* parent_row_out, int32_t* action_out, uint8_t* reset_out);

    // Creates the leaves chosen by the last traverse from the network outputs and
    // backs their values up to the roots.
    std::string expand_and_backup(const float* value_prefix, const float* value, const float* logits);

    // Gumbel mode: the root's first round of sequential halving in one network call.
    // While every simulation so far was a first visit of a considered root candidate, the
    // next ones are too, and they do not depend on each other: an unvisited candidate's
    // completed Q is the same for all of them, so sequential halving takes them in the
    // order of g + log pi (ties: lowest index), each leaf is a root child, and its backup
    // touches only the root and itself.  first_visits_left() is how many such
    // simulations remain in every tree (0 in pUCT mode, after a traverse(), or once a tree
    // has visited all its candidates); traverse_first_visits(k) selects the next k leaves
    // of every tree at once, in the order the simulations would make them (leaf j of tree
    // b is row j * B + b of the outputs), and expand_and_backup_first_visits applies the
    // network outputs for all k * B leaves, simulation by simulation, exactly as k
    // traverse / expand_and_backup pairs would.
    int first_visits_left() const;
    std::string traverse_first_visits(int k, int32_t* parent_row_out, int32_t* action_out, uint8_t* reset_out);
    std::string expand_and_backup_first_visits(const float* value_prefix, const float* value, const float* logits);

    // --- read-outs (valid after any number of simulations) ---
    void root_visit_counts(int32_t* out) const;          // [B, A]
    void root_values(float* out) const;                  // [B]
    void root_q_values(float* out) const;                // [B, A], NaN where unvisited
    void depth_stats(int32_t* max_out, float* mean_out) const;  // [B], [B]
    // Completed Q(root, a): Q of visited children, v_mix of unvisited ones, NaN where masked.
    void root_completed_q(float* out) const;             // [B, A]
    // pi' = softmax(log pi + sigma(normalized completed Q)) at the root, 0 where masked
    // (pUCT mode: the same formula, with the network prior before Dirichlet noise).
    void improved_policy(float* out) const;              // [B, A]
    // Among the considered root children with the most visits, the argmax of
    // g + log pi + sigma(normalized completed Q) (g left out when `with_noise` is false).
    // pUCT mode: every valid child is considered and g = 0.  ezv2_tree: the first survivor.
    void best_actions(bool with_noise, int64_t* out) const;  // [B]
    void root_considered(uint8_t* out) const;            // [B, A] 1 = eligible at the root

    int batch_size() const { return B_; }
    int num_actions() const { return A_; }
    int num_simulations() const { return S_; }
    int simulations_done() const { return sims_done_; }
    bool ready() const { return ready_; }
    int nodes_per_tree() const { return N_; }

    // Inspection of one node (tests, debugging).  Indices must be in range.
    int node_visit_count(int tree, int node) const;
    double node_value_sum(int tree, int node) const;
    double node_value_prefix(int tree, int node) const;
    double node_network_value(int tree, int node) const;
    int node_depth(int tree, int node) const;
    int node_child(int tree, int node, int action) const;  // -1: not expanded, kMasked: masked
    double node_prior(int tree, int node, int action) const;
    double node_log_prior(int tree, int node, int action) const;  // pUCT: NaN below the root

private:
    size_t node_id(int tree, int node) const { return (size_t)tree * N_ + node; }
    bool is_reset(size_t id) const { return depth_[id] > 0 && depth_[id] % params_.lstm_horizon == 0; }
    bool is_valid(size_t id, int a) const { return child_[id * A_ + a] != kMasked; }
    double* log_prior_of(size_t id) { return &log_prior_[(params_.gumbel ? id : id / N_) * A_]; }
    const double* log_prior_of(size_t id) const { return &log_prior_[(params_.gumbel ? id : id / N_) * A_]; }
    int child_visits(int tree, size_t id, int a) const;
    double reward(size_t parent, size_t child) const;
    double q_value(size_t parent, size_t child) const;
    // A fresh node's child slots (unexpanded or masked) and its priors from the logits.
    void init_children(size_t id, const float* logits, const float* noise, double noise_fraction);
    void choose_considered(int tree);
    int select_child(int tree, size_t id, bool is_root, double& q_hat);
    int select_puct(int tree, size_t id, bool is_root, double& q_hat);
    int select_gumbel_root(int tree, size_t id);
    int select_gumbel_interior(int tree, size_t id);
    int select_ezv2_root(int tree, size_t id) const;
    // g + log pi + sigma(normalized completed Q) of each root child of `tree` into score [A]
    // (g left out without `with_noise`; -inf where masked).
    void root_scores(int tree, bool with_noise, double* score) const;
    // ezv2_tree: keeps the `keep` survivors with the best g + log pi + sigma(q) (ties: rank).
    void rank_survivors(int tree, int keep);
    // Min-max normalization of q in `tree` (ezv2_tree: V2's, with no spread q itself).
    double normalized(int tree, double q) const;
    // N(node) and its running mean value, counting the root's network value as a backup
    // under ezv2_tree (every other node's expansion already is one).
    int own_visits(size_t id) const;
    double running_mean(size_t id) const;
    // Fills q [A] with the completed Q of the children of node `id`; returns
    // sum_b N(b) and max_b N(b) over them.
    void completed_q(int tree, size_t id, double* q, int& visits_sum, int& visits_max) const;
    double sigma_scale(int visits_max) const { return (params_.c_visit + visits_max) * params_.c_scale; }
    // Fills pi [A] with the improved policy at node `id`; returns sum_b N(b).
    int improved_policy_at(int tree, size_t id, double* pi) const;
    // Creates leaf sims_done_ + 1 of every tree (its parent and action set by a traverse)
    // from row r of the outputs and backs it up; advances sims_done_.
    void expand_backup_one(const float* value_prefix, const float* value, const float* logits);

    int B_, A_, S_, N_;
    SearchParams params_;
    int sims_done_ = 0;
    bool pending_ = false;   // a traverse waits for its expand_and_backup
    bool ready_ = false;     // reset has been called
    bool first_visits_only_ = false;  // every simulation since reset was a root first visit
    int pending_first_visits_ = 0;    // leaves a traverse_first_visits() selected

    // Node storage, indexed by node_id (tree * N + node); per-child storage by id * A + a.
    std::vector<int32_t> visit_count_;
    std::vector<double> value_sum_;
    std::vector<double> value_prefix_;
    std::vector<double> network_value_;  // v(s) the network predicted when s was expanded
    std::vector<int32_t> depth_;
    std::vector<int32_t> child_;     // node index, -1 = not expanded yet, kMasked = no such child
    std::vector<double> prior_;      // what pUCT uses (root: after noise); 0 where masked
    // log pi = logits - logsumexp over valid children (-inf = masked), read by the Gumbel
    // scores.  Gumbel mode: every node, [B * N, A]; pUCT mode: the roots only, [B, A].
    std::vector<double> log_prior_;

    // Per tree.
    std::vector<MinMax> min_max_;
    std::vector<int32_t> path_;      // [B, N] node indices of the current search path
    std::vector<int32_t> path_len_;  // [B]
    std::vector<int32_t> leaf_action_;
    std::vector<int64_t> depth_sum_;
    std::vector<int32_t> depth_max_;
    std::vector<double> gumbel_;       // [B, A] root Gumbel noise g (0 without noise / pUCT)
    std::vector<uint8_t> considered_;  // [B, A] root children sequential halving may pick
    std::vector<int32_t> visit_sequence_;  // [B, S] considered_visit_sequence(m_b, S)
    std::vector<int32_t> first_order_;     // [B, A] considered candidates by g + log pi
    std::vector<int32_t> num_considered_;  // [B] m_b
    std::vector<int32_t> survivors_;       // [B, A] ezv2_tree: the survivors, ranked
    std::vector<int32_t> num_survivors_;   // [B]
    std::vector<int32_t> phase_end_;       // [B, S] ezv2_phase_ends(m_b, S)

    // Scratch for the node being scored; mutable so the const read-outs can use it too.
    mutable std::vector<double> q_scratch_;      // [A]
    mutable std::vector<double> score_scratch_;  // [A]
    mutable std::vector<int32_t> index_scratch_; // [A]
};

}  // namespace ez
