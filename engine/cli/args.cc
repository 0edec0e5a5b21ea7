#include "engine/cli/args.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace gpeserve::cli {

Args::Args(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void Args::AddString(const std::string& name, const std::string& value_name,
                     const std::string& help, std::optional<std::string> fallback) {
  flags_[name] = Flag{value_name, help, std::move(fallback)};
  order_.push_back(name);
}

void Args::AddBool(const std::string& name, const std::string& help) {
  flags_[name] = Flag{"", help, std::nullopt};
  order_.push_back(name);
}

absl::Status Args::Parse(int argc, char** argv, int first, bool* help_requested) {
  *help_requested = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      *help_requested = true;
      return absl::OkStatus();
    }
    if (!arg.starts_with("--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    std::replace(name.begin(), name.end(), '-', '_');  // --add-special-tokens works too
    const auto it = flags_.find(name);
    if (it == flags_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '--", name, "'"));
    }
    Flag& flag = it->second;
    if (flag.value_name.empty()) {
      if (value && *value != "true" && *value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
      flag.value = value.value_or("true");
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    flag.value = *value;
  }
  return absl::OkStatus();
}

std::string Args::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\n", description_, "\n\noptions:\n");
  for (const std::string& name : order_) {
    const Flag& flag = flags_.at(name);
    std::string left = absl::StrCat("  --", name);
    if (!flag.value_name.empty()) absl::StrAppend(&left, " ", flag.value_name);
    if (left.size() < 28) left.resize(28, ' ');
    absl::StrAppend(&out, left, " ", flag.help);
    if (!flag.value_name.empty() && flag.value)
      absl::StrAppend(&out, " (default: ", *flag.value, ")");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  --help                     print this help\n");
  return out;
}

std::optional<std::string> Args::Get(const std::string& name) const {
  const auto it = flags_.find(name);
  return it == flags_.end() ? std::nullopt : it->second.value;
}

bool Args::GetBool(const std::string& name) const { return Get(name).value_or("false") == "true"; }

std::optional<int> Args::ParseOrExit(int argc, char** argv, int first) {
  bool help = false;
  if (absl::Status s = Parse(argc, argv, first, &help); !s.ok()) {
    std::cerr << "gpe: " << s.message() << "\n\n" << Help();
    return 2;
  }
  if (help) {
    std::cout << Help();
    return 0;
  }
  return std::nullopt;
}

}  // namespace gpeserve::cli
