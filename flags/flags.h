// The command-line flags of every binary (gpe, gpeserve, gpe-client): typed flags bound to the
// fields of a configuration struct. A flag's default is the field's value when the flag is
// added (so the defaults live in the structs, and --help shows them); parsing writes the field.
//
//   engine::EngineConfig config;
//   FlagSet flags("gpeserve", "gpeserve [options]", "Serves a model ...");
//   flags.Add("block_size", "N", "tokens per KV block", &config.block_size, {.min = 1});
//   if (auto code = flags.ParseOrExit(argc, argv, 1)) return *code;
//
// Syntax: "--name value", "--name=value", boolean "--name" (or --name=true|false). Names use
// underscores (--wait_k); hyphens are accepted as synonyms (--wait-k). Anything undeclared is
// an error naming the flag. A numeric flag refuses what is not a number of its type or lies
// outside its bounds, naming the flag and the value given. Checks added with AddCheck run after
// parsing (relations between flags).
//
// Thread-safety: not thread-safe; used once in main. The bound fields must outlive Parse.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace gpeserve::flags {

// Inclusive bounds of a numeric flag; unset: none.
struct Bounds {
  std::optional<double> min;
  std::optional<double> max;
};

class FlagSet {
 public:
  // `program` prefixes error messages ("gpeserve: ..."); `usage` is the first line of --help,
  // e.g. "gpe tokenize --model DIR [options]"; `description` follows it.
  FlagSet(std::string program, std::string usage, std::string description);

  // Value flags bound to a field; the field's current value is the default.
  void Add(std::string name, std::string value_name, std::string help, std::string* field);
  void Add(std::string name, std::string value_name, std::string help, int* field,
           Bounds bounds = {});
  void Add(std::string name, std::string value_name, std::string help, int64_t* field,
           Bounds bounds = {});
  void Add(std::string name, std::string value_name, std::string help, uint64_t* field);
  void Add(std::string name, std::string value_name, std::string help, double* field,
           Bounds bounds = {});
  // Optional fields: unset when not given (the help says what that means).
  void Add(std::string name, std::string value_name, std::string help,
           std::optional<std::string>* field);
  void Add(std::string name, std::string value_name, std::string help, std::optional<int>* field,
           Bounds bounds = {});
  void Add(std::string name, std::string value_name, std::string help,
           std::optional<int64_t>* field, Bounds bounds = {});
  void Add(std::string name, std::string value_name, std::string help,
           std::optional<uint64_t>* field);
  void Add(std::string name, std::string value_name, std::string help, std::optional<double>* field,
           Bounds bounds = {});
  // A boolean switch: "--name" sets it.
  void Add(std::string name, std::string help, bool* field);
  // One of named values, e.g. --split word|token bound to an enum; the value name lists them.
  template <typename T>
  void AddChoice(std::string name, std::string help, T* field,
                 std::vector<std::pair<std::string, T>> choices);
  // Any other type: `parse` turns the text into the field (or says why not, without the
  // flag's name: the message is prefixed with it); `shown` is the default as --help shows it
  // (empty: none).
  void AddParsed(std::string name, std::string value_name, std::string help, std::string shown,
                 std::function<absl::Status(std::string_view)> parse);
  // Runs after every flag parsed; its error is a usage error.
  void AddCheck(std::function<absl::Status()> check);

  // Parses argv[first..argc). On --help (or -h), *help_requested is set and OK returned.
  absl::Status Parse(int argc, char** argv, int first, bool* help_requested);
  // Parse for a program's entry point: on --help prints the help to stdout and returns 0; on a
  // usage error prints "<program>: <error>" and the help to stderr and returns 2; otherwise
  // nullopt.
  std::optional<int> ParseOrExit(int argc, char** argv, int first);
  std::string Help() const;
  // Whether the flag was on the command line.
  bool Given(const std::string& name) const;

 private:
  struct Flag {
    std::string value_name;  // empty for a switch
    std::string help;
    std::string shown;  // the default in --help; empty: none
    std::function<absl::Status(std::string_view)> parse;
    bool given = false;
  };
  void AddFlag(std::string name, Flag flag);

  std::string program_;
  std::string usage_;
  std::string description_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  std::vector<std::function<absl::Status()>> checks_;
};

template <typename T>
void FlagSet::AddChoice(std::string name, std::string help, T* field,
                        std::vector<std::pair<std::string, T>> choices) {
  std::string value_name, shown;
  for (const auto& [text, value] : choices) {
    value_name += (value_name.empty() ? "" : "|") + text;
    if (value == *field && shown.empty()) shown = text;
  }
  AddParsed(std::move(name), value_name, std::move(help), shown,
            [field, choices = std::move(choices), value_name](std::string_view text) {
              for (const auto& [choice, value] : choices) {
                if (text == choice) {
                  *field = value;
                  return absl::OkStatus();
                }
              }
              return absl::InvalidArgumentError("takes " + value_name);
            });
}

}  // namespace gpeserve::flags
