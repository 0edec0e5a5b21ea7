#include "flags/flags.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpeserve::flags {
namespace {

// "a whole number >= 1", "a number in [0, 1]", ...
std::string Expected(bool whole, const Bounds& bounds) {
  std::string out = whole ? "a whole number" : "a number";
  if (bounds.min && bounds.max) {
    absl::StrAppend(&out, " in [", *bounds.min, ", ", *bounds.max, "]");
  } else if (bounds.min) {
    absl::StrAppend(&out, " >= ", *bounds.min);
  } else if (bounds.max) {
    absl::StrAppend(&out, " <= ", *bounds.max);
  }
  return out;
}

bool InBounds(double value, const Bounds& bounds) {
  return (!bounds.min || value >= *bounds.min) && (!bounds.max || value <= *bounds.max);
}

// Parses a whole number of type T within bounds.
template <typename T>
absl::Status ParseWhole(std::string_view text, const Bounds& bounds, T* out) {
  T value{};
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &value) ||
      !InBounds(static_cast<double>(value), bounds)) {
    return absl::InvalidArgumentError(absl::StrCat("takes ", Expected(true, bounds)));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ParseReal(std::string_view text, const Bounds& bounds, double* out) {
  double value = 0;
  if (!absl::SimpleAtod(absl::string_view(text.data(), text.size()), &value) ||
      !std::isfinite(value) || !InBounds(value, bounds)) {
    return absl::InvalidArgumentError(absl::StrCat("takes ", Expected(false, bounds)));
  }
  *out = value;
  return absl::OkStatus();
}

// An optional field's default as --help shows it (none when unset).
template <typename T>
std::string Shown(const std::optional<T>& field) {
  return field ? absl::StrCat(*field) : "";
}

// Parses into a T with `parse` and sets the optional field only when that succeeds.
template <typename T, typename Parse>
std::function<absl::Status(std::string_view)> SetOptional(std::optional<T>* field, Parse parse) {
  return [field, parse](std::string_view text) {
    T value{};
    absl::Status s = parse(text, &value);
    if (s.ok()) *field = value;
    return s;
  };
}

}  // namespace

FlagSet::FlagSet(std::string program, std::string usage, std::string description)
    : program_(std::move(program)),
      usage_(std::move(usage)),
      description_(std::move(description)) {}

void FlagSet::AddFlag(std::string name, Flag flag) {
  if (!flags_.contains(name)) order_.push_back(name);
  flags_[std::move(name)] = std::move(flag);
}

void FlagSet::AddParsed(std::string name, std::string value_name, std::string help,
                        std::string shown, std::function<absl::Status(std::string_view)> parse) {
  AddFlag(std::move(name), Flag{.value_name = std::move(value_name),
                                .help = std::move(help),
                                .shown = std::move(shown),
                                .parse = std::move(parse)});
}

void FlagSet::Add(std::string name, std::string value_name, std::string help, std::string* field) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), *field,
            [field](std::string_view text) {
              *field = std::string(text);
              return absl::OkStatus();
            });
}

void FlagSet::Add(std::string name, std::string value_name, std::string help, int* field,
                  Bounds bounds) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), absl::StrCat(*field),
            [field, bounds](std::string_view text) { return ParseWhole(text, bounds, field); });
}

void FlagSet::Add(std::string name, std::string value_name, std::string help, int64_t* field,
                  Bounds bounds) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), absl::StrCat(*field),
            [field, bounds](std::string_view text) { return ParseWhole(text, bounds, field); });
}

void FlagSet::Add(std::string name, std::string value_name, std::string help, uint64_t* field) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), absl::StrCat(*field),
            [field](std::string_view text) { return ParseWhole(text, {.min = 0}, field); });
}

void FlagSet::Add(std::string name, std::string value_name, std::string help, double* field,
                  Bounds bounds) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), absl::StrCat(*field),
            [field, bounds](std::string_view text) { return ParseReal(text, bounds, field); });
}

void FlagSet::Add(std::string name, std::string value_name, std::string help,
                  std::optional<std::string>* field) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), field->value_or(""),
            [field](std::string_view text) {
              *field = std::string(text);
              return absl::OkStatus();
            });
}

void FlagSet::Add(std::string name, std::string value_name, std::string help,
                  std::optional<int>* field, Bounds bounds) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), Shown(*field),
            SetOptional(field, [bounds](std::string_view text, int* value) {
              return ParseWhole(text, bounds, value);
            }));
}

void FlagSet::Add(std::string name, std::string value_name, std::string help,
                  std::optional<int64_t>* field, Bounds bounds) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), Shown(*field),
            SetOptional(field, [bounds](std::string_view text, int64_t* value) {
              return ParseWhole(text, bounds, value);
            }));
}

void FlagSet::Add(std::string name, std::string value_name, std::string help,
                  std::optional<uint64_t>* field) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), Shown(*field),
            SetOptional(field, [](std::string_view text, uint64_t* value) {
              return ParseWhole(text, {.min = 0}, value);
            }));
}

void FlagSet::Add(std::string name, std::string value_name, std::string help,
                  std::optional<double>* field, Bounds bounds) {
  AddParsed(std::move(name), std::move(value_name), std::move(help), Shown(*field),
            SetOptional(field, [bounds](std::string_view text, double* value) {
              return ParseReal(text, bounds, value);
            }));
}

void FlagSet::Add(std::string name, std::string help, bool* field) {
  AddFlag(std::move(name), Flag{.help = std::move(help), .parse = [field](std::string_view text) {
                                  *field = text == "true";
                                  return absl::OkStatus();
                                }});
}

void FlagSet::AddCheck(std::function<absl::Status()> check) { checks_.push_back(std::move(check)); }

absl::Status FlagSet::Parse(int argc, char** argv, int first, bool* help_requested) {
  *help_requested = false;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
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
      value = value.value_or("true");
    } else if (!value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    if (absl::Status s = flag.parse(*value); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " ", s.message(), " (got '", *value, "')"));
    }
    flag.given = true;
  }
  for (const auto& check : checks_) {
    if (absl::Status s = check(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\n", description_, "\n\noptions:\n");
  for (const std::string& name : order_) {
    const Flag& flag = flags_.at(name);
    std::string left = absl::StrCat("  --", name);
    if (!flag.value_name.empty()) absl::StrAppend(&left, " ", flag.value_name);
    if (left.size() < 28) left.resize(28, ' ');
    absl::StrAppend(&out, left, " ", flag.help);
    if (!flag.value_name.empty() && !flag.shown.empty()) {
      absl::StrAppend(&out, " (default: ", flag.shown, ")");
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  --help                     print this help\n");
  return out;
}

bool FlagSet::Given(const std::string& name) const {
  const auto it = flags_.find(name);
  return it != flags_.end() && it->second.given;
}

std::optional<int> FlagSet::ParseOrExit(int argc, char** argv, int first) {
  bool help = false;
  if (absl::Status s = Parse(argc, argv, first, &help); !s.ok()) {
    std::cerr << program_ << ": " << s.message() << "\n\n" << Help();
    return 2;
  }
  if (help) {
    std::cout << Help();
    return 0;
  }
  return std::nullopt;
}

}  // namespace gpeserve::flags
