// Batched MCTS arena for EfficientZero (see the paper's appendix "MCTS Details").
//
// One Arena holds B independent trees, each with room for `num_simulations + 1`
// nodes (node 0 is the root; the node created by simulation s is node s + 1 in every
// tree).  All storage is allocated once in the constructor; the hot loop (traverse,
// expand_and_backup) allocates nothing.  Numbers are kept in double so that a plain
// Python reference search reproduces them bit for bit.
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
};

// Running min/max of the Q values seen in one tree (updated along backup paths only).
struct MinMax {
    double lo, hi;
    void clear();
    void update(double q);
    double normalize(double q, double epsilon) const;
};

class Arena {
public:
    Arena(int batch_size, int num_actions, int num_simulations, const SearchParams& params);

    // Starts B fresh searches.  `logits` is [B, A]; `noise` ([B, A]) may be null, in
    // which case `noise_fraction` is ignored.  Returns an empty string on success or a
    // message naming the bad input.
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

    // --- read-outs ---
    void root_visit_counts(int32_t* out) const;          // [B, A]
    void root_values(float* out) const;                  // [B]
    void root_q_values(float* out) const;                // [B, A], NaN where unvisited
    void depth_stats(int32_t* max_out, float* mean_out) const;  // [B], [B]

    int batch_size() const { return B_; }
    int num_actions() const { return A_; }
    int num_simulations() const { return S_; }
    int simulations_done() const { return sims_done_; }
    int nodes_per_tree() const { return N_; }

    // Inspection of one node (tests, debugging).  Indices must be in range.
    int node_visit_count(int tree, int node) const;
    double node_value_sum(int tree, int node) const;
    double node_value_prefix(int tree, int node) const;
    int node_depth(int tree, int node) const;
    int node_child(int tree, int node, int action) const;
    double node_prior(int tree, int node, int action) const;

private:
    size_t node_id(int tree, int node) const { return (size_t)tree * N_ + node; }
    bool is_reset(size_t id) const { return depth_[id] > 0 && depth_[id] % params_.lstm_horizon == 0; }
    double reward(size_t parent, size_t child) const;
    double q_value(size_t parent, size_t child) const;
    void set_prior(size_t id, const float* logits, const float* noise, double noise_fraction);
    int select_child(int tree, size_t id, bool is_root, double& q_hat);

    int B_, A_, S_, N_;
    SearchParams params_;
    int sims_done_ = 0;
    bool pending_ = false;   // a traverse waits for its expand_and_backup
    bool ready_ = false;     // reset has been called

    // Node storage, indexed by node_id (tree * N + node); per-child storage by id * A + a.
    std::vector<int32_t> visit_count_;
    std::vector<double> value_sum_;
    std::vector<double> value_prefix_;
    std::vector<int32_t> depth_;
    std::vector<int32_t> child_;
    std::vector<double> prior_;

    // Per tree.
    std::vector<MinMax> min_max_;
    std::vector<double> root_network_value_;
    std::vector<int32_t> path_;      // [B, N] node indices of the current search path
    std::vector<int32_t> path_len_;  // [B]
    std::vector<int32_t> leaf_action_;
    std::vector<int64_t> depth_sum_;
    std::vector<int32_t> depth_max_;
    std::vector<double> q_scratch_;  // [A] Q of the children of the node being scored
};

}  // namespace ez
