// Candidate actions of a sampled search (the factorized and gaussian action modes;
// ez_robot/action_modes.py has the formulas and drives these).
//
// Every node a sampled search expands draws K candidates from the policy the network
// predicted there.  These functions turn random numbers the caller drew ahead (numpy,
// once per search) into those candidates for B nodes at once, so that a node costs one
// call here instead of a dozen numpy calls.  They follow the numpy formulas operation for
// operation in double and store float32, as numpy does; tanh, exp and log1p are the C
// library's, which may round the last bit of a double differently from numpy's own, so a
// result can differ from numpy's only where that bit decides a float32 rounding or a
// uniform draw lies on a bin edge.
#pragma once

#include <cstdint>

namespace ez {

// Gaussian mode.  params [B, 2D] are the policy head's outputs (D means, D std
// parameters); noise [B, draws, D] standard normal.  Writes actions [B, slots, D] (the
// first `draws` slots of each row; slots >= draws):
//   clip(tanh(m + s * noise), -bound, bound),  m = 5 tanh(mu / 5),  s = softplus(sigma + 1) + 0.1
void gaussian_candidates(const float* params, int batch, int dims, const double* noise, int draws,
                         double bound, float* actions, int slots);

// Factorized mode.  params [B, D * bins] are D categoricals' logits (T: float or double),
// taken at `temperature`; uniforms [B, draws, D] in [0, 1).  Each dimension's value is the
// bin whose CDF interval holds the uniform (the inverse CDF), written as bin_values[bin]
// into actions [B, slots, D] (the first `draws` slots).
template <typename T>
void factorized_candidates(const T* params, int batch, int dims, int bins, double temperature,
                           const double* uniforms, int draws, const float* bin_values, float* actions, int slots);

// counts [B, slots]: how many of the first `draws` candidates of its row (actions [B, slots,
// D]) equal each candidate, at the first of them; 0 at the later copies and past `draws`.
void duplicate_counts(const float* actions, int batch, int slots, int dims, int draws, int32_t* counts);

// logits [B, slots]: log_share[c] for each candidate, c its duplicate_counts (the tree's prior
// below the root: the share of the draws that chose the action, -inf at the later copies);
// log_share has draws + 1 entries.
void share_logits(const float* actions, int batch, int slots, int dims, int draws, const float* log_share,
                  float* logits);

}  // namespace ez
