#include "candidates.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ez {

namespace {

constexpr double kMeanBound = 5.0;  // action_modes.MEAN_BOUND
constexpr double kStdMin = 0.1;     // action_modes.STD_MIN

// log(1 + e^x) as numpy's logaddexp(0, x) computes it.
double softplus(double x) {
    return x > 0.0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

}  // namespace

void gaussian_candidates(const float* params, int batch, int dims, const double* noise, int draws,
                         double bound, float* actions, int slots) {
    std::vector<double> mean(dims), std_dev(dims);
    for (int b = 0; b < batch; ++b) {
        const float* row = params + (size_t)b * 2 * dims;
        for (int d = 0; d < dims; ++d) {
            mean[d] = kMeanBound * std::tanh((double)row[d] / kMeanBound);
            std_dev[d] = softplus((double)row[dims + d] + 1.0) + kStdMin;
        }
        for (int k = 0; k < draws; ++k) {
            const double* z = noise + ((size_t)b * draws + k) * dims;
            float* out = actions + ((size_t)b * slots + k) * dims;
            for (int d = 0; d < dims; ++d) {
                double a = std::tanh(mean[d] + std_dev[d] * z[d]);
                out[d] = (float)std::min(std::max(a, -bound), bound);
            }
        }
    }
}

template <typename T>
void factorized_candidates(const T* params, int batch, int dims, int bins, double temperature,
                           const double* uniforms, int draws, const float* bin_values, float* actions, int slots) {
    std::vector<double> logits(bins), cdf(bins);
    for (int b = 0; b < batch; ++b) {
        for (int d = 0; d < dims; ++d) {
            // the categorical's CDF: softmax over the bins, shifted by the largest logit
            const T* x = params + ((size_t)b * dims + d) * bins;
            for (int j = 0; j < bins; ++j) logits[j] = temperature == 1.0 ? (double)x[j] : (double)x[j] / temperature;
            double top = *std::max_element(logits.begin(), logits.end());
            double total = 0.0;
            for (int j = 0; j < bins; ++j) {
                total += std::exp(logits[j] - top);
                cdf[j] = total;
            }
            for (int j = 0; j < bins; ++j) cdf[j] /= total;
            for (int k = 0; k < draws; ++k) {
                // the number of CDF values <= u (searchsorted, side="right"), at most bins - 1
                double u = uniforms[((size_t)b * draws + k) * dims + d];
                int bin = (int)(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
                actions[((size_t)b * slots + k) * dims + d] = bin_values[std::min(bin, bins - 1)];
            }
        }
    }
}

template void factorized_candidates<float>(const float*, int, int, int, double, const double*, int, const float*,
                                           float*, int);
template void factorized_candidates<double>(const double*, int, int, int, double, const double*, int, const float*,
                                            float*, int);

void duplicate_counts(const float* actions, int batch, int slots, int dims, int draws, int32_t* counts) {
    for (int b = 0; b < batch; ++b) {
        const float* row = actions + (size_t)b * slots * dims;
        int32_t* out = counts + (size_t)b * slots;
        std::fill(out, out + slots, 0);
        for (int k = 0; k < draws; ++k) {
            const float* mine = row + (size_t)k * dims;
            int first = k;  // the first candidate equal to this one
            for (int j = 0; j < k; ++j) {
                if (std::equal(mine, mine + dims, row + (size_t)j * dims)) {
                    first = j;
                    break;
                }
            }
            out[first] += 1;
        }
    }
}

void share_logits(const float* actions, int batch, int slots, int dims, int draws, const float* log_share,
                  float* logits) {
    std::vector<int32_t> counts((size_t)batch * slots);
    duplicate_counts(actions, batch, slots, dims, draws, counts.data());
    for (size_t i = 0; i < counts.size(); ++i) logits[i] = log_share[counts[i]];
}

}  // namespace ez
