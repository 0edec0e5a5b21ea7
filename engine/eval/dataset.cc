#include "engine/eval/dataset.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace gpeserve::eval {

absl::StatusOr<std::vector<Example>> ParseDataset(std::string_view text, const std::string& name,
                                                  const std::string& source_key,
                                                  const std::string& target_key) {
  nlohmann::json data;
  try {
    data = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(name + ": not valid JSON: " + e.what());
  }
  if (!data.is_array()) {
    return absl::InvalidArgumentError(name + ": expected a JSON array of objects");
  }
  std::vector<Example> examples;
  for (size_t i = 0; i < data.size(); ++i) {
    const nlohmann::json& item = data[i];
    if (!item.is_object() || !item.contains(source_key) || !item[source_key].is_string() ||
        !item.contains(target_key) || !item[target_key].is_string()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: item %d needs string fields '%s' and '%s'", name, i, source_key, target_key));
    }
    examples.push_back({item[source_key].get<std::string>(), item[target_key].get<std::string>()});
  }
  return examples;
}

absl::StatusOr<std::vector<Example>> LoadDataset(const std::string& path,
                                                 const std::string& source_key,
                                                 const std::string& target_key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path + ": cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  return ParseDataset(text.str(), path, source_key, target_key);
}

}  // namespace gpeserve::eval
