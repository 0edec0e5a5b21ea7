// Simultaneous-translation latency of one sentence (docs/GPE.md section 6), with SimulEval's
// definitions: Average Lagging (AL) and Length-Adaptive Average Lagging (LAAL).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace gpeserve::eval {

// delays[t]: source units read when target word t+1 was complete (or milliseconds, for the
// computation-aware variants); source_length: |X| (words + 1 for the end segment);
// target_length: |Y| in words. Returns 0 for an empty delay list.
double AverageLagging(const std::vector<double>& delays, double source_length,
                      double target_length);
// AL with |Y| replaced by max(|Y|, number of delays).
double LengthAdaptiveAverageLagging(const std::vector<double>& delays, double source_length,
                                    double target_length);

// Nearest-rank percentile (p in 0..100) of unsorted values; 0 when there are none. For latency
// distributions (time to first token, inter-token latency).
double Percentile(std::vector<double> values, double p);

}  // namespace gpeserve::eval
