#include "tree.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ez {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string where(size_t i, size_t row_len) {
    return row_len > 1 ? "[" + std::to_string(i / row_len) + ", " + std::to_string(i % row_len) + "]"
                       : "[" + std::to_string(i) + "]";
}

std::string first_non_finite(const char* name, const float* x, size_t n, size_t row_len) {
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(x[i]))
            return name + std::string(" has a non-finite value (") + std::to_string(x[i]) + ") at " + where(i, row_len);
    }
    return "";
}

// Logits may be -inf (no such child), never NaN or +inf, and every row needs a child.
std::string check_logits(const char* name, const float* x, int rows, int cols) {
    for (int r = 0; r < rows; ++r) {
        int valid = 0;
        for (int a = 0; a < cols; ++a) {
            size_t i = (size_t)r * cols + a;
            if (!(x[i] < std::numeric_limits<float>::infinity()))  // NaN or +inf
                return name + std::string(" has a non-finite value (") + std::to_string(x[i]) + ") at " +
                       where(i, cols);
            valid += x[i] != -std::numeric_limits<float>::infinity();
        }
        if (valid == 0)
            return name + std::string(" has no valid action at [") + std::to_string(r) + "]: every logit is -inf";
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

void considered_visit_sequence(int num_considered, int num_simulations, int32_t* out) {
    if (num_considered <= 1) {
        for (int s = 0; s < num_simulations; ++s) out[s] = s;
        return;
    }
    int log2m = 0;  // ceil(log2(m))
    while ((1LL << log2m) < num_considered) ++log2m;
    // Every survivor of a phase has the same count, so one counter stands for them all.
    int len = 0, visits = 0, survivors = num_considered;
    while (len < num_simulations) {
        int rounds = std::max(1, num_simulations / (log2m * survivors));
        for (int r = 0; r < rounds && len < num_simulations; ++r, ++visits) {
            for (int i = 0; i < survivors && len < num_simulations; ++i) out[len++] = visits;
        }
        survivors = std::max(2, survivors / 2);
    }
}

void ezv2_phase_ends(int num_considered, int num_simulations, int32_t* out) {
    std::fill(out, out + num_simulations, 0);
    if (num_considered <= 1) return;
    // V2's schedule, in its own floating-point steps: a phase of `survivors` candidates
    // lasts max(1, floor(n / (log2(m) survivors))) rounds; the last phase takes what is left.
    const double log2m = std::log2((double)num_considered);
    int survivors = num_considered, used = 0;
    int next = std::max((int)std::floor(num_simulations / (log2m * num_considered)), 1) * num_considered;
    for (int s = 0; s < num_simulations; ++s) {
        if (s + 1 < next) continue;
        survivors /= 2;
        int extra = survivors > 2 ? std::max((int)std::floor(num_simulations / (log2m * survivors)), 1) * survivors
                                  : num_simulations - used;
        used += extra;
        next = std::min(next + extra, num_simulations);
        out[s] = std::max(survivors, 1);  // V2 would keep none after a last halving to 0
    }
}

Arena::Arena(int batch_size, int num_actions, int num_simulations, const SearchParams& params)
    : B_(batch_size), A_(num_actions), S_(num_simulations), N_(num_simulations + 1), params_(params) {
    size_t nodes = (size_t)B_ * N_;
    visit_count_.assign(nodes, 0);
    value_sum_.assign(nodes, 0.0);
    value_prefix_.assign(nodes, 0.0);
    network_value_.assign(nodes, 0.0);
    depth_.assign(nodes, 0);
    child_.assign(nodes * A_, -1);
    prior_.assign(nodes * A_, 0.0);
    log_prior_.assign((params_.gumbel ? nodes : (size_t)B_) * A_, 0.0);
    min_max_.resize(B_);
    path_.assign(nodes, 0);
    path_len_.assign(B_, 0);
    leaf_action_.assign(B_, 0);
    depth_sum_.assign(B_, 0);
    depth_max_.assign(B_, 0);
    gumbel_.assign((size_t)B_ * A_, 0.0);
    considered_.assign((size_t)B_ * A_, 0);
    if (params_.gumbel) visit_sequence_.assign((size_t)B_ * S_, 0);
    first_order_.assign((size_t)B_ * A_, 0);
    num_considered_.assign(B_, 0);
    if (params_.gumbel && params_.ezv2_tree) {
        survivors_.assign((size_t)B_ * A_, 0);
        num_survivors_.assign(B_, 0);
        phase_end_.assign((size_t)B_ * S_, 0);
    }
    q_scratch_.assign(A_, 0.0);
    score_scratch_.assign(A_, 0.0);
    index_scratch_.assign(A_, 0);
}

int Arena::child_visits(int tree, size_t id, int a) const {
    int c = child_[id * A_ + a];
    return c >= 0 ? visit_count_[node_id(tree, c)] : 0;
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

void Arena::init_children(size_t id, const float* logits, const float* noise, double noise_fraction) {
    int32_t* children = &child_[id * A_];
    double* p = &prior_[id * A_];
    double top = logits[0];  // finite once a row has passed check_logits
    for (int a = 1; a < A_; ++a) top = std::max(top, (double)logits[a]);
    double total = 0.0;
    for (int a = 0; a < A_; ++a) {
        p[a] = std::exp((double)logits[a] - top);  // exactly 0 where masked
        total += p[a];
    }
    for (int a = 0; a < A_; ++a) p[a] /= total;
    std::fill(children, children + A_, -1);
    for (int a = 0; a < A_; ++a) {
        if (logits[a] == -std::numeric_limits<float>::infinity()) children[a] = kMasked;
    }
    if (params_.gumbel || id % N_ == 0) {
        double* log_p = log_prior_of(id);
        double log_total = std::log(total);
        for (int a = 0; a < A_; ++a) log_p[a] = ((double)logits[a] - top) - log_total;  // -inf where masked
    }
    if (noise != nullptr) {
        for (int a = 0; a < A_; ++a) {
            if (children[a] != kMasked) p[a] = (1.0 - noise_fraction) * p[a] + noise_fraction * noise[a];
        }
    }
}

void Arena::choose_considered(int tree) {
    size_t id = node_id(tree, 0);
    uint8_t* considered = &considered_[(size_t)tree * A_];
    const double* log_p = log_prior_of(id);
    const double* g = &gumbel_[(size_t)tree * A_];
    int valid = 0;
    for (int a = 0; a < A_; ++a) {
        considered[a] = 0;
        if (is_valid(id, a)) {
            index_scratch_[valid++] = a;
            score_scratch_[a] = g[a] + log_p[a];
        }
    }
    if (!params_.gumbel) {  // pUCT: every child may be picked
        for (int i = 0; i < valid; ++i) considered[index_scratch_[i]] = 1;
        return;
    }
    // The top m of g + log pi (ties: lowest index), Gumbel-top-k sampling without replacement.
    int m = std::min(params_.max_considered, valid);
    const double* score = score_scratch_.data();
    std::partial_sort(index_scratch_.begin(), index_scratch_.begin() + m, index_scratch_.begin() + valid,
                      [score](int32_t x, int32_t y) { return score[x] > score[y] || (score[x] == score[y] && x < y); });
    int32_t* order = &first_order_[(size_t)tree * A_];
    for (int i = 0; i < m; ++i) {
        considered[index_scratch_[i]] = 1;
        order[i] = index_scratch_[i];  // the order the first visits take (first_visits_left)
    }
    num_considered_[tree] = m;
    considered_visit_sequence(m, S_, visit_sequence_.data() + (size_t)tree * S_);
    if (params_.ezv2_tree) {
        std::copy(order, order + m, &survivors_[(size_t)tree * A_]);
        num_survivors_[tree] = m;
        ezv2_phase_ends(m, S_, phase_end_.data() + (size_t)tree * S_);
    }
}

std::string Arena::reset(const float* value_prefix, const float* value, const float* logits,
                         const float* noise, double noise_fraction) {
    std::string err = first_non_finite("root value_prefix", value_prefix, B_, 1);
    if (err.empty()) err = first_non_finite("root value", value, B_, 1);
    if (err.empty()) err = check_logits("root policy_logits", logits, B_, A_);
    if (!err.empty()) return err;
    if (noise != nullptr) {
        if (!params_.gumbel && !(noise_fraction >= 0.0 && noise_fraction <= 1.0))
            return "noise_fraction must be in [0, 1], got " + std::to_string(noise_fraction);
        err = first_non_finite("noise", noise, (size_t)B_ * A_, A_);
        if (!err.empty()) return err;
        for (size_t i = 0; !params_.gumbel && i < (size_t)B_ * A_; ++i) {
            if (noise[i] < 0.0f) return "noise must be non-negative (Dirichlet samples)";
        }
    }
    for (int b = 0; b < B_; ++b) {
        size_t id = node_id(b, 0);
        visit_count_[id] = 0;
        value_sum_[id] = 0.0;
        value_prefix_[id] = value_prefix[b];
        network_value_[id] = value[b];
        depth_[id] = 0;
        const float* row_noise = noise ? noise + (size_t)b * A_ : nullptr;
        double* g = &gumbel_[(size_t)b * A_];
        for (int a = 0; a < A_; ++a) g[a] = params_.gumbel && row_noise ? (double)row_noise[a] : 0.0;
        init_children(id, logits + (size_t)b * A_, params_.gumbel ? nullptr : row_noise, noise_fraction);
        choose_considered(b);
        min_max_[b].clear();
        depth_sum_[b] = 0;
        depth_max_[b] = 0;
        path_len_[b] = 0;
    }
    sims_done_ = 0;
    pending_ = false;
    ready_ = true;
    first_visits_only_ = params_.gumbel;
    pending_first_visits_ = 0;
    return "";
}

int Arena::select_child(int tree, size_t id, bool is_root, double& q_hat) {
    if (!params_.gumbel) return select_puct(tree, id, is_root, q_hat);
    if (!is_root) return select_gumbel_interior(tree, id);
    return params_.ezv2_tree ? select_ezv2_root(tree, id) : select_gumbel_root(tree, id);
}

double Arena::normalized(int tree, double q) const {
    const MinMax& mm = min_max_[tree];
    if (!params_.ezv2_tree) return mm.normalize(q, params_.min_max_epsilon);
    double delta = mm.hi - mm.lo;  // -inf with no entries
    double x = delta > 0.0 ? (q - mm.lo) / std::max(delta, params_.min_max_epsilon) : q;
    return std::min(1.0, std::max(0.0, x));
}

int Arena::own_visits(size_t id) const {
    return visit_count_[id] + (params_.ezv2_tree && id % N_ == 0 ? 1 : 0);
}

double Arena::running_mean(size_t id) const {
    double root_value = params_.ezv2_tree && id % N_ == 0 ? network_value_[id] : 0.0;
    return (value_sum_[id] + root_value) / own_visits(id);
}

int Arena::select_puct(int tree, size_t id, bool is_root, double& q_hat) {
    const int32_t* children = &child_[id * A_];
    const double* prior = &prior_[id * A_];
    // Mean-Q estimate for unvisited children (appendix, after ELF OpenGo):
    // Q^(root) = 0; Q^(s) = (Q^(parent) + sum of visited Q(s, b)) / (1 + #visited).
    // The paper's 0 at the root is "the worst state" only where returns are >= 0 (Atari,
    // DMC).  Where they are negative it is the best one, and every unvisited root child
    // outscores the visited ones: the search goes breadth-first and, with more actions
    // than simulations, its visit counts say nothing.  root_mean_q gives unvisited root
    // children the mean Q of the visited ones instead (0 until one is visited, when all
    // tie anyway), which moves with the returns' offset like the rest of the search.
    double q_sum = 0.0;
    int visited = 0;
    for (int a = 0; a < A_; ++a) {
        if (children[a] >= 0) {
            q_scratch_[a] = q_value(id, node_id(tree, children[a]));
            q_sum += q_scratch_[a];
            ++visited;
        }
    }
    if (is_root)
        q_hat = params_.root_mean_q && visited > 0 ? q_sum / visited : 0.0;
    else
        q_hat = (q_hat + q_sum) / (1.0 + visited);

    // N(s) counts the node's own expansion as a visit (MuZero pseudocode), so at a
    // fresh node the prior decides the first selection instead of the action index.
    double n = visit_count_[id] + (is_root ? 1.0 : 0.0);
    double pb_c = (params_.c1 + std::log((n + params_.c2 + 1.0) / params_.c2)) * std::sqrt(n);
    const MinMax& mm = min_max_[tree];
    double best = -kInf;
    int best_action = 0;
    for (int a = 0; a < A_; ++a) {
        int child_visits = 0;
        double q = q_hat;
        if (children[a] >= 0) {
            child_visits = visit_count_[node_id(tree, children[a])];
            q = q_scratch_[a];
        }
        double score = mm.normalize(q, params_.min_max_epsilon) + prior[a] * pb_c / (1.0 + child_visits);
        // A masked child scores -inf (never > best) instead of being skipped: this keeps
        // the unpredictable comparison below a conditional move, not a branch.
        score = children[a] == kMasked ? -kInf : score;
        if (score > best) {  // strict: ties go to the lowest action index
            best = score;
            best_action = a;
        }
    }
    return best_action;
}

void Arena::completed_q(int tree, size_t id, double* q, int& visits_sum, int& visits_max) const {
    const int32_t* children = &child_[id * A_];
    const double* prior = &prior_[id * A_];
    visits_sum = 0;
    visits_max = 0;
    double prior_sum = 0.0, weighted_q = 0.0;
    for (int a = 0; a < A_; ++a) {
        if (children[a] < 0) continue;
        size_t child = node_id(tree, children[a]);
        visits_sum += visit_count_[child];
        visits_max = std::max(visits_max, visit_count_[child]);
        q[a] = q_value(id, child);
        prior_sum += prior[a];
        weighted_q += prior[a] * q[a];
    }
    // v_mix, the Gumbel paper's value for unvisited actions: the network value mixed
    // with the prior-weighted mean Q of the visited children, weighted by their visits.
    // When the visited children's prior underflowed to 0 that mean is undefined: keep
    // the network value.
    double v_mix = network_value_[id];
    if (params_.ezv2_tree) {  // V2: the node's running mean and its own visit count
        double mean = running_mean(id);
        int n = own_visits(id);
        v_mix = prior_sum < 1e-6 ? mean : (mean + n * weighted_q / prior_sum) / (1.0 + n);
    } else if (visits_sum > 0 && prior_sum > 0.0) {
        v_mix = (network_value_[id] + visits_sum / prior_sum * weighted_q) / (1.0 + visits_sum);
    }
    for (int a = 0; a < A_; ++a) {
        if (children[a] < 0) q[a] = is_valid(id, a) ? v_mix : std::numeric_limits<double>::quiet_NaN();
    }
}

int Arena::improved_policy_at(int tree, size_t id, double* pi) const {
    double* q = q_scratch_.data();
    int visits_sum, visits_max;
    completed_q(tree, id, q, visits_sum, visits_max);
    const double scale = sigma_scale(visits_max);
    const double* log_p = log_prior_of(id);
    double top = -kInf;
    for (int a = 0; a < A_; ++a) {
        if (!is_valid(id, a)) continue;
        pi[a] = log_p[a] + scale * normalized(tree, q[a]);
        top = std::max(top, pi[a]);
    }
    double total = 0.0;
    for (int a = 0; a < A_; ++a) {
        pi[a] = is_valid(id, a) ? std::exp(pi[a] - top) : 0.0;
        total += pi[a];
    }
    for (int a = 0; a < A_; ++a) pi[a] /= total;
    return visits_sum;
}

void Arena::root_scores(int tree, bool with_noise, double* score) const {
    size_t id = node_id(tree, 0);
    double* q = q_scratch_.data();
    int visits_sum, visits_max;
    completed_q(tree, id, q, visits_sum, visits_max);
    const double scale = sigma_scale(visits_max);
    const double* log_p = log_prior_of(id);
    const double* g = &gumbel_[(size_t)tree * A_];
    for (int a = 0; a < A_; ++a)
        score[a] = is_valid(id, a) ? (with_noise ? g[a] : 0.0) + log_p[a] + scale * normalized(tree, q[a]) : -kInf;
}

int Arena::select_gumbel_root(int tree, size_t id) {
    // Sequential halving: the candidate whose visit count the sequence asks for now,
    // with the best g + log pi + sigma(q_hat).
    double* scores = score_scratch_.data();
    root_scores(tree, true, scores);
    const uint8_t* considered = &considered_[(size_t)tree * A_];
    const int wanted = visit_sequence_[(size_t)tree * S_ + sims_done_];
    double best = -kInf, best_any = -kInf;
    int best_action = -1, best_any_action = -1;
    for (int a = 0; a < A_; ++a) {
        if (!considered[a]) continue;
        double score = scores[a];
        if (score > best_any) {
            best_any = score;
            best_any_action = a;
        }
        if (child_visits(tree, id, a) == wanted && score > best) {
            best = score;
            best_action = a;
        }
    }
    // The sequence always names a count some survivor has; the fallback is a guard.
    return best_action >= 0 ? best_action : best_any_action;
}

int Arena::select_ezv2_root(int tree, size_t id) const {
    // The first survivor (in rank order) with the fewest visits.
    const int32_t* survivors = &survivors_[(size_t)tree * A_];
    int best = survivors[0], fewest = child_visits(tree, id, best);
    for (int i = 1; i < num_survivors_[tree]; ++i) {
        int n = child_visits(tree, id, survivors[i]);
        if (n < fewest) {
            best = survivors[i];
            fewest = n;
        }
    }
    return best;
}

void Arena::rank_survivors(int tree, int keep) {
    double* score = score_scratch_.data();
    root_scores(tree, true, score);
    int32_t* survivors = &survivors_[(size_t)tree * A_];
    const int n = num_survivors_[tree];
    std::stable_sort(survivors, survivors + n, [score](int32_t x, int32_t y) { return score[x] > score[y]; });
    num_survivors_[tree] = std::min(n, keep);
}

int Arena::select_gumbel_interior(int tree, size_t id) {
    // Deterministic: the child whose visit share lags its improved-policy mass most.
    double* pi = score_scratch_.data();
    int visits_sum = improved_policy_at(tree, id, pi);
    // V2 counts the node's own expansion in N(node): 1 + N(node) = 2 + sum_b N(b)
    const double denominator = 1.0 + (params_.ezv2_tree ? own_visits(id) : visits_sum);
    double best = -kInf;
    int best_action = 0;
    for (int a = 0; a < A_; ++a) {
        if (!is_valid(id, a)) continue;
        double score = pi[a] - child_visits(tree, id, a) / denominator;
        if (score > best) {
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
    first_visits_only_ = false;
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
    if (!pending_ || pending_first_visits_ > 0) return "expand_and_backup() needs a traverse() first";
    std::string err = first_non_finite("value_prefix", value_prefix, B_, 1);
    if (err.empty()) err = first_non_finite("value", value, B_, 1);
    if (err.empty()) err = check_logits("policy_logits", logits, B_, A_);
    if (!err.empty()) return err;
    expand_backup_one(value_prefix, value, logits);
    pending_ = false;
    return "";
}

void Arena::expand_backup_one(const float* value_prefix, const float* value, const float* logits) {
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
        network_value_[id] = value[b];
        depth_[id] = depth_[parent_id] + 1;
        init_children(id, logits + (size_t)b * A_, nullptr, 0.0);
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
                // ezv2_tree: the sampled path return, not the child's mean value
                min_max_[b].update(r + discount * (params_.ezv2_tree ? bootstrap : value_sum_[nid] / visit_count_[nid]));
                bootstrap = r + discount * bootstrap;
            } else if (params_.ezv2_tree) {
                min_max_[b].update(discount * bootstrap);  // V2 reads the root's reward as 0
            }
        }
        if (params_.ezv2_tree && phase_end_[(size_t)b * S_ + sims_done_] > 0)
            rank_survivors(b, phase_end_[(size_t)b * S_ + sims_done_]);
        depth_sum_[b] += depth_[id];
        depth_max_[b] = std::max(depth_max_[b], depth_[id]);
    }
    sims_done_ += 1;
}

int Arena::first_visits_left() const {
    if (!ready_ || pending_ || !first_visits_only_) return 0;
    int left = S_ - sims_done_;
    for (int b = 0; b < B_; ++b) {
        // the sequence's leading zeros: the simulations that visit a candidate for the first time
        const int32_t* sequence = &visit_sequence_[(size_t)b * S_];
        int zeros = 0;
        while (zeros < S_ && sequence[zeros] == 0) ++zeros;
        left = std::min(left, std::min(zeros, num_considered_[b]) - sims_done_);
    }
    return std::max(left, 0);
}

std::string Arena::traverse_first_visits(int k, int32_t* parent_row_out, int32_t* action_out, uint8_t* reset_out) {
    if (!ready_) return "reset() must be called before traverse_first_visits()";
    if (pending_) return "traverse_first_visits() while a traverse waits for its expand_and_backup()";
    int left = first_visits_left();
    if (k < 1 || k > left)
        return "traverse_first_visits(" + std::to_string(k) + "): " + std::to_string(left) +
               " first visits are left in every tree";
    for (int j = 0; j < k; ++j) {
        for (int b = 0; b < B_; ++b) {
            size_t row = (size_t)j * B_ + b;
            parent_row_out[row] = b;  // the root: node 0, row 0 * B + b
            action_out[row] = first_order_[(size_t)b * A_ + sims_done_ + j];
            reset_out[row] = 0;       // the root is never a value-prefix reset boundary
        }
    }
    pending_ = true;
    pending_first_visits_ = k;
    return "";
}

std::string Arena::expand_and_backup_first_visits(const float* value_prefix, const float* value,
                                                  const float* logits) {
    if (!pending_ || pending_first_visits_ == 0)
        return "expand_and_backup_first_visits() needs a traverse_first_visits() first";
    const int k = pending_first_visits_;
    std::string err = first_non_finite("value_prefix", value_prefix, (size_t)k * B_, 1);
    if (err.empty()) err = first_non_finite("value", value, (size_t)k * B_, 1);
    if (err.empty()) err = check_logits("policy_logits", logits, k * B_, A_);
    if (!err.empty()) return err;
    for (int j = 0; j < k; ++j) {
        for (int b = 0; b < B_; ++b) {
            path_[(size_t)b * N_] = 0;
            path_len_[b] = 1;
            leaf_action_[b] = first_order_[(size_t)b * A_ + sims_done_];
        }
        size_t offset = (size_t)j * B_;
        expand_backup_one(value_prefix + offset, value + offset, logits + offset * A_);
    }
    pending_ = false;
    pending_first_visits_ = 0;
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
        if (params_.ezv2_tree)
            out[b] = (float)running_mean(id);
        else
            out[b] = visit_count_[id] > 0 ? (float)(value_sum_[id] / visit_count_[id]) : (float)network_value_[id];
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

void Arena::root_completed_q(float* out) const {
    int visits_sum, visits_max;
    for (int b = 0; b < B_; ++b) {
        completed_q(b, node_id(b, 0), q_scratch_.data(), visits_sum, visits_max);
        for (int a = 0; a < A_; ++a) out[(size_t)b * A_ + a] = (float)q_scratch_[a];
    }
}

void Arena::improved_policy(float* out) const {
    for (int b = 0; b < B_; ++b) {
        improved_policy_at(b, node_id(b, 0), score_scratch_.data());
        for (int a = 0; a < A_; ++a) out[(size_t)b * A_ + a] = (float)score_scratch_[a];
    }
}

void Arena::best_actions(bool with_noise, int64_t* out) const {
    for (int b = 0; b < B_; ++b) {
        if (params_.ezv2_tree) {  // V2 plays the first survivor
            out[b] = survivors_[(size_t)b * A_];
            continue;
        }
        size_t id = node_id(b, 0);
        double* scores = score_scratch_.data();
        root_scores(b, with_noise, scores);
        const uint8_t* considered = &considered_[(size_t)b * A_];
        // The survivors of sequential halving: the considered children visited most.
        int most = -1;
        for (int a = 0; a < A_; ++a) {
            if (considered[a]) most = std::max(most, child_visits(b, id, a));
        }
        double best = -kInf;
        int64_t best_action = 0;
        for (int a = 0; a < A_; ++a) {
            if (!considered[a] || child_visits(b, id, a) != most) continue;
            if (scores[a] > best) {
                best = scores[a];
                best_action = a;
            }
        }
        out[b] = best_action;
    }
}

void Arena::root_considered(uint8_t* out) const {
    std::copy(considered_.begin(), considered_.end(), out);
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
double Arena::node_network_value(int tree, int node) const { return network_value_[node_id(tree, node)]; }
int Arena::node_depth(int tree, int node) const { return depth_[node_id(tree, node)]; }
int Arena::node_child(int tree, int node, int action) const { return child_[node_id(tree, node) * A_ + action]; }
double Arena::node_prior(int tree, int node, int action) const { return prior_[node_id(tree, node) * A_ + action]; }
double Arena::node_log_prior(int tree, int node, int action) const {
    if (!params_.gumbel && node != 0) return std::numeric_limits<double>::quiet_NaN();  // not kept
    return log_prior_of(node_id(tree, node))[action];
}

}  // namespace ez
