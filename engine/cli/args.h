// A minimal command-line parser for the `gpe` subcommands: "--name value", "--name=value" and
// boolean "--name" flags, with a generated --help text. Flag names use underscores
// (--wait_k); hyphens are accepted as their synonyms (--wait-k). Flags are declared up front;
// anything undeclared is an error naming the flag.
//
// Thread-safety: not thread-safe; used once in main.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gpeserve::cli {

class Args {
 public:
  // `usage` is the first line of --help, e.g. "gpe tokenize --model DIR [options]".
  explicit Args(std::string usage, std::string description);

  void AddString(const std::string& name, const std::string& value_name, const std::string& help,
                 std::optional<std::string> fallback = std::nullopt);
  void AddBool(const std::string& name, const std::string& help);

  // Parses argv[first..argc). On --help, *help_requested is set and OK is returned.
  absl::Status Parse(int argc, char** argv, int first, bool* help_requested);
  // Parse for a command's entry point: on --help prints the help to stdout and returns 0; on a
  // usage error prints it with the help to stderr and returns 2; otherwise nullopt.
  std::optional<int> ParseOrExit(int argc, char** argv, int first);
  std::string Help() const;

  std::optional<std::string> Get(const std::string& name) const;
  bool GetBool(const std::string& name) const;

 private:
  struct Flag {
    std::string value_name;  // empty for boolean flags
    std::string help;
    std::optional<std::string> value;
  };
  std::string usage_;
  std::string description_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
};

}  // namespace gpeserve::cli
