#include "engine/eval/latency.h"

#include <algorithm>
#include <cmath>

namespace gpeserve::eval {
namespace {

double Lagging(const std::vector<double>& delays, double source_length, double target_length) {
  if (delays.empty() || source_length <= 0) return 0.0;
  if (delays[0] > source_length) return delays[0];
  if (target_length <= 0) target_length = static_cast<double>(delays.size());
  const double gamma = target_length / source_length;
  double sum = 0;
  int64_t tau = 0;
  for (size_t t = 0; t < delays.size(); ++t) {
    if (delays[t] > source_length) break;
    sum += delays[t] - static_cast<double>(t) / gamma;
    tau = static_cast<int64_t>(t) + 1;
    if (delays[t] >= source_length) break;  // the first word written with the whole source
  }
  return sum / static_cast<double>(tau);
}

}  // namespace

double AverageLagging(const std::vector<double>& delays, double source_length,
                      double target_length) {
  return Lagging(delays, source_length, target_length);
}

double LengthAdaptiveAverageLagging(const std::vector<double>& delays, double source_length,
                                    double target_length) {
  return Lagging(delays, source_length,
                 std::max(target_length, static_cast<double>(delays.size())));
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

}  // namespace gpeserve::eval
