#include "tree.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ez {

namespace {

std::string first_non_finite(const char* name, const float* x, size_t n, size_t row_len) {
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(x[i])) {
            std::string where = row_len > 1
                ? "[" + std::to_string(i / row_len) + ", " + std::to_string(i % row_len) + "]"
                : "[" + std::to_string(i) + "]";
            return name + std::string(" has a non-finite value (") + std::to_string(x[i]) + ") at " + where;
        }
    }
    return "";
}

}  // namespace

void MinMax::clear() {
    lo = std::numeric_limits<double>::infinity();
    hi = -std::numeric_limits<double>::infinity();
}

void MinMax::update(double q) {
    lo = std::min(lo, q);
    hi = std::max(hi, q);
}

double MinMax::normalize(double q, double epsilon) const {
    if (hi < lo) return 0.0;  // nothing seen yet: every candidate scores the same
    // Soft min-max: a range narrower than epsilon is widened to epsilon, so tiny value
    // differences early in training do not look like large ones.
    double delta = std::max(hi - lo, epsilon);
    double x = (q - lo) / delta;
    return std::min(1.0, std::max(0.0, x));
}

Arena::Arena(int batch_size, int num_actions, int num_simulations, const SearchParams& params)
    : B_(batch_size), A_(num_actions), S_(num_simulations), N_(num_simulations + 1), params_(params) {
    size_t nodes = (size_t)B_ * N_;
    visit_count_.assign(nodes, 0);
    value_sum_.assign(nodes, 0.0);
    value_prefix_.assign(nodes, 0.0);
    depth_.assign(nodes, 0);
    child_.assign(nodes * A_, -1);
    prior_.assign(nodes * A_, 0.0);
    min_max_.resize(B_);
    root_network_value_.assign(B_, 0.0);
    path_.assign(nodes, 0);
    path_len_.assign(B_, 0);
    leaf_action_.assign(B_, 0);
    depth_sum_.assign(B_, 0);
    depth_max_.assign(B_, 0);
    q_scratch_.assign(A_, 0.0);
}

double Arena::reward(size_t parent, size_t child) const {
    // Below a reset boundary the LSTM started afresh, so the child's value prefix is
    // the reward itself; otherwise the reward is the value-prefix difference.
    if (is_reset(parent)) return value_prefix_[child];
    return value_prefix_[child] - value_prefix_[parent];
}

double Arena::q_value(size_t parent, size_t child) const {
    return reward(parent, child) + params_.discount * (value_sum_[child] / visit_count_[child]);
}

void Arena::set_prior(size_t id, const float* logits, const float* noise, double noise_fraction) {
    double* p = &prior_[id * A_];
    double top = logits[0];
    for (int a = 1; a < A_; ++a) top = std::max(top, (double)logits[a]);
    double total = 0.0;
    for (int a = 0; a < A_; ++a) {
        p[a] = std::exp((double)logits[a] - top);
        total += p[a];
    }
    for (int a = 0; a < A_; ++a) p[a] /= total;
    if (noise != nullptr) {
        for (int a = 0; a < A_; ++a) p[a] = (1.0 - noise_fraction) * p[a] + noise_fraction * noise[a];
    }
}

std::string Arena::reset(const float* value_prefix, const float* value, const float* logits,
                         const float* noise, double noise_fraction) {
    std::string err = first_non_finite("root value_prefix", value_prefix, B_, 1);
    if (err.empty()) err = first_non_finite("root value", value, B_, 1);
    if (err.empty()) err = first_non_finite("root policy_logits", logits, (size_t)B_ * A_, A_);
    if (!err.empty()) return err;
    if (noise != nullptr) {
        if (!(noise_fraction >= 0.0 && noise_fraction <= 1.0))
            return "noise_fraction must be in [0, 1], got " + std::to_string(noise_fraction);
        err = first_non_finite("noise", noise, (size_t)B_ * A_, A_);
        if (!err.empty()) return err;
        for (size_t i = 0; i < (size_t)B_ * A_; ++i) {
            if (noise[i] < 0.0f) return "noise must be non-negative (Dirichlet samples)";
        }
    }
    for (int b = 0; b < B_; ++b) {
        size_t id = node_id(b, 0);
        visit_count_[id] = 0;
        value_sum_[id] = 0.0;
        value_prefix_[id] = value_prefix[b];
        depth_[id] = 0;
        std::fill(&child_[id * A_], &child_[id * A_] + A_, -1);
        set_prior(id, logits + (size_t)b * A_, noise ? noise + (size_t)b * A_ : nullptr, noise_fraction);
        min_max_[b].clear();
        root_network_value_[b] = value[b];
        depth_sum_[b] = 0;
        depth_max_[b] = 0;
        path_len_[b] = 0;
    }
    sims_done_ = 0;
    pending_ = false;
    ready_ = true;
    return "";
}

int Arena::select_child(int tree, size_t id, bool is_root, double& q_hat) {
    const int32_t* children = &child_[id * A_];
    const double* prior = &prior_[id * A_];
    // Mean-Q estimate for unvisited children (appendix, after ELF OpenGo):
    // Q^(root) = 0; Q^(s) = (Q^(parent) + sum of visited Q(s, b)) / (1 + #visited).
    double q_sum = 0.0;
    int visited = 0;
    for (int a = 0; a < A_; ++a) {
        if (children[a] >= 0) {
            q_scratch_[a] = q_value(id, node_id(tree, children[a]));
            q_sum += q_scratch_[a];
            ++visited;
        }
    }
    q_hat = is_root ? 0.0 : (q_hat + q_sum) / (1.0 + visited);

    // N(s) counts the node's own expansion as a visit (MuZero pseudocode), so at a
    // fresh node the prior decides the first selection instead of the action index.
    double n = visit_count_[id] + (is_root ? 1.0 : 0.0);
    double pb_c = (params_.c1 + std::log((n + params_.c2 + 1.0) / params_.c2)) * std::sqrt(n);
    const MinMax& mm = min_max_[tree];
    double best = -std::numeric_limits<double>::infinity();
    int best_action = 0;
    for (int a = 0; a < A_; ++a) {
        int child_visits = 0;
        double q = q_hat;
        if (children[a] >= 0) {
            child_visits = visit_count_[node_id(tree, children[a])];
            q = q_scratch_[a];
        }
        double score = mm.normalize(q, params_.min_max_epsilon) + prior[a] * pb_c / (1.0 + child_visits);
        if (score > best) {  // strict: ties go to the lowest action index
            best = score;
            best_action = a;
        }
    }
    return best_action;
}

std::string Arena::traverse(int32_t* parent_row_out, int32_t* action_out, uint8_t* reset_out) {
    if (!ready_) return "reset() must be called before traverse()";
    if (pending_) return "traverse() was called twice; expand_and_backup() must come in between";
    if (sims_done_ >= S_) return "all " + std::to_string(S_) + " simulations are done; call reset() to search again";
    for (int b = 0; b < B_; ++b) {
        int32_t* path = &path_[(size_t)b * N_];
        int len = 0;
        int node = 0;
        double q_hat = 0.0;
        while (true) {
            path[len++] = node;
            size_t id = node_id(b, node);
            int action = select_child(b, id, node == 0, q_hat);
            int next = child_[id * A_ + action];
            if (next < 0) {
                parent_row_out[b] = node * B_ + b;
                action_out[b] = action;
                reset_out[b] = is_reset(id) ? 1 : 0;
                leaf_action_[b] = action;
                break;
            }
            node = next;
        }
        path_len_[b] = len;
    }
    pending_ = true;
    return "";
}

std::string Arena::expand_and_backup(const float* value_prefix, const float* value, const float* logits) {
    if (!pending_) return "expand_and_backup() needs a traverse() first";
    std::string err = first_non_finite("value_prefix", value_prefix, B_, 1);
    if (err.empty()) err = first_non_finite("value", value, B_, 1);
    if (err.empty()) err = first_non_finite("policy_logits", logits, (size_t)B_ * A_, A_);
    if (!err.empty()) return err;

    const int leaf = sims_done_ + 1;
    const double discount = params_.discount;
    for (int b = 0; b < B_; ++b) {
        int32_t* path = &path_[(size_t)b * N_];
        int len = path_len_[b];
        size_t parent_id = node_id(b, path[len - 1]);
        size_t id = node_id(b, leaf);
        child_[parent_id * A_ + leaf_action_[b]] = leaf;
        visit_count_[id] = 0;
        value_sum_[id] = 0.0;
        value_prefix_[id] = value_prefix[b];
        depth_[id] = depth_[parent_id] + 1;
        std::fill(&child_[id * A_], &child_[id * A_] + A_, -1);
        set_prior(id, logits + (size_t)b * A_, nullptr, 0.0);
        path[len++] = leaf;

        // --- backup: only the nodes on this path change, so min-max stats are
        // updated along the path, never by rescanning the tree ---
        double bootstrap = value[b];
        for (int i = len - 1; i >= 0; --i) {
            size_t nid = node_id(b, path[i]);
            value_sum_[nid] += bootstrap;
            visit_count_[nid] += 1;
            if (i > 0) {
                size_t pid = node_id(b, path[i - 1]);
                double r = reward(pid, nid);
                min_max_[b].update(r + discount * (value_sum_[nid] / visit_count_[nid]));
                bootstrap = r + discount * bootstrap;
            }
        }
        depth_sum_[b] += depth_[id];
        depth_max_[b] = std::max(depth_max_[b], depth_[id]);
    }
    sims_done_ += 1;
    pending_ = false;
    return "";
}

void Arena::root_visit_counts(int32_t* out) const {
    for (int b = 0; b < B_; ++b) {
        size_t id = node_id(b, 0);
        for (int a = 0; a < A_; ++a) {
            int c = child_[id * A_ + a];
            out[(size_t)b * A_ + a] = c >= 0 ? visit_count_[node_id(b, c)] : 0;
        }
    }
}

void Arena::root_values(float* out) const {
    for (int b = 0; b < B_; ++b) {
        size_t id = node_id(b, 0);
        out[b] = visit_count_[id] > 0 ? (float)(value_sum_[id] / visit_count_[id]) : (float)root_network_value_[b];
    }
}

void Arena::root_q_values(float* out) const {
    for (int b = 0; b < B_; ++b) {
        size_t id = node_id(b, 0);
        for (int a = 0; a < A_; ++a) {
            int c = child_[id * A_ + a];
            out[(size_t)b * A_ + a] = c >= 0 ? (float)q_value(id, node_id(b, c)) : std::numeric_limits<float>::quiet_NaN();
        }
    }
}

void Arena::depth_stats(int32_t* max_out, float* mean_out) const {
    for (int b = 0; b < B_; ++b) {
        max_out[b] = depth_max_[b];
        mean_out[b] = sims_done_ > 0 ? (float)((double)depth_sum_[b] / sims_done_) : 0.0f;
    }
}

int Arena::node_visit_count(int tree, int node) const { return visit_count_[node_id(tree, node)]; }
double Arena::node_value_sum(int tree, int node) const { return value_sum_[node_id(tree, node)]; }
double Arena::node_value_prefix(int tree, int node) const { return value_prefix_[node_id(tree, node)]; }
int Arena::node_depth(int tree, int node) const { return depth_[node_id(tree, node)]; }
int Arena::node_child(int tree, int node, int action) const { return child_[node_id(tree, node) * A_ + action]; }
double Arena::node_prior(int tree, int node, int action) const { return prior_[node_id(tree, node) * A_ + action]; }

}  // namespace ez
