#include "flags/flags.h"

#include <string>
#include <vector>

#include "flags/groups.h"
#include "gtest/gtest.h"

namespace gpeserve::flags {
namespace {

// Parses `args` (without the program name) into `flags`.
absl::Status ParseArgs(FlagSet& flags, std::vector<std::string> args, bool* help = nullptr) {
  std::vector<char*> argv = {const_cast<char*>("prog")};
  for (std::string& arg : args) argv.push_back(arg.data());
  bool help_requested = false;
  absl::Status s = flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, &help_requested);
  if (help) *help = help_requested;
  return s;
}

struct Config {
  int count = 3;
  int64_t bytes = int64_t{1} << 33;
  double rate = 1.5;
  std::string name = "abc";
  std::optional<std::string> file;
  std::optional<int> limit;
  uint64_t seed = 7;
  bool verbose = false;
};

enum class Color { kRed, kGreen };

FlagSet MakeFlags(Config* c, Color* color) {
  FlagSet flags("prog", "prog [options]", "A test program.");
  flags.Add("count", "N", "how many", &c->count, {.min = 1});
  flags.Add("bytes", "BYTES", "how much", &c->bytes, {.min = 0});
  flags.Add("rate", "R", "how fast", &c->rate, {.min = 0, .max = 2});
  flags.Add("name", "NAME", "what", &c->name);
  flags.Add("file", "FILE", "where (default: nowhere)", &c->file);
  flags.Add("limit", "N", "at most", &c->limit, {.min = 0});
  flags.Add("seed", "N", "seed", &c->seed);
  flags.Add("verbose", "say more", &c->verbose);
  flags.AddChoice("color", "which color", color, {{"red", Color::kRed}, {"green", Color::kGreen}});
  return flags;
}

TEST(FlagsTest, DefaultsAreTheFieldsAndShowInHelp) {
  Config c;
  Color color = Color::kGreen;
  FlagSet flags = MakeFlags(&c, &color);
  ASSERT_TRUE(ParseArgs(flags, {}).ok());
  EXPECT_EQ(c.count, 3);
  EXPECT_FALSE(c.file.has_value());
  const std::string help = flags.Help();
  EXPECT_NE(help.find("--count N"), std::string::npos) << help;
  EXPECT_NE(help.find("how many (default: 3)"), std::string::npos) << help;
  EXPECT_NE(help.find("how much (default: 8589934592)"), std::string::npos) << help;
  EXPECT_NE(help.find("how fast (default: 1.5)"), std::string::npos) << help;
  EXPECT_NE(help.find("--color red|green"), std::string::npos) << help;
  EXPECT_NE(help.find("which color (default: green)"), std::string::npos) << help;
  EXPECT_NE(help.find("where (default: nowhere)\n"), std::string::npos) << help;  // none added
  EXPECT_EQ(help.find("at most (default"), std::string::npos) << help;
}

TEST(FlagsTest, ParsesEverySyntaxIntoTheFields) {
  Config c;
  Color color = Color::kRed;
  FlagSet flags = MakeFlags(&c, &color);
  ASSERT_TRUE(ParseArgs(flags, {"--count", "12", "--bytes=5", "--rate", "0.25", "--name=x y",
                                "--file", "f.txt", "--limit", "0", "--seed", "18446744073709551615",
                                "--verbose", "--color", "green"})
                  .ok());
  EXPECT_EQ(c.count, 12);
  EXPECT_EQ(c.bytes, 5);
  EXPECT_EQ(c.rate, 0.25);
  EXPECT_EQ(c.name, "x y");
  EXPECT_EQ(c.file, "f.txt");
  EXPECT_EQ(c.limit, 0);
  EXPECT_EQ(c.seed, UINT64_MAX);
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(color, Color::kGreen);
  EXPECT_TRUE(flags.Given("count"));
  Config d;
  FlagSet again = MakeFlags(&d, &color);
  ASSERT_TRUE(ParseArgs(again, {"--verbose=false", "--count=4"}).ok());
  EXPECT_FALSE(d.verbose);
  EXPECT_FALSE(again.Given("rate"));
}

TEST(FlagsTest, HyphensAreSynonymsOfUnderscores) {
  int wait_k = 3;
  FlagSet flags("prog", "prog", "");
  flags.Add("wait_k", "K", "k", &wait_k);
  ASSERT_TRUE(ParseArgs(flags, {"--wait-k", "5"}).ok());
  EXPECT_EQ(wait_k, 5);
}

TEST(FlagsTest, BadValuesNameTheFlagTheRuleAndTheValue) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--count", "0"}, "--count takes a whole number >= 1 (got '0')"},
      {{"--count", "2x"}, "--count takes a whole number >= 1 (got '2x')"},
      {{"--count", "99999999999"}, "--count takes a whole number >= 1 (got '99999999999')"},
      {{"--rate", "3"}, "--rate takes a number in [0, 2] (got '3')"},
      {{"--rate", "nan"}, "--rate takes a number in [0, 2] (got 'nan')"},
      {{"--seed", "-1"}, "--seed takes a whole number >= 0 (got '-1')"},
      {{"--color", "blue"}, "--color takes red|green (got 'blue')"},
      {{"--verbose=yes"}, "--verbose takes no value"},
      {{"--count"}, "--count needs a value"},
      {{"--colour", "red"}, "unknown flag '--colour'"},
      {{"stray"}, "unexpected argument 'stray'"},
  };
  for (const Case& test : cases) {
    Config c;
    Color color = Color::kRed;
    FlagSet flags = MakeFlags(&c, &color);
    const absl::Status s = ParseArgs(flags, test.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << test.message;
    EXPECT_EQ(s.message(), test.message);
  }
}

TEST(FlagsTest, ChecksRunAfterEveryFlagAndHelpStopsParsing) {
  Config c;
  Color color = Color::kRed;
  FlagSet flags = MakeFlags(&c, &color);
  flags.AddCheck([&c] {
    return c.count > c.limit.value_or(100) ? absl::InvalidArgumentError("--count exceeds --limit")
                                           : absl::OkStatus();
  });
  EXPECT_EQ(ParseArgs(flags, {"--count", "5", "--limit", "4"}).message(),
            "--count exceeds --limit");
  bool help = false;
  Config d;
  FlagSet other = MakeFlags(&d, &color);
  ASSERT_TRUE(ParseArgs(other, {"--count", "5", "--help", "--bogus"}, &help).ok());
  EXPECT_TRUE(help);
}

TEST(FlagGroupsTest, DefaultsComeFromTheStructsAndParseIntoThem) {
  FlagSet flags("prog", "prog", "");
  ModelFlags model;
  engine::EngineConfig engine;
  engine.kv_blocks = 1024;  // a binary's own default
  SessionFlags session;
  sampler::SamplingParams sampling;
  AddModelFlags(flags, &model);
  AddKvCacheFlags(flags, &engine);
  AddSchedulerFlags(flags, &engine);
  AddSessionFlags(flags, &session);
  AddSamplingFlags(flags, &sampling);
  const std::string help = flags.Help();
  EXPECT_NE(help.find("KV cache blocks (0: from --kv_cache_memory) (default: 1024)"),
            std::string::npos)
      << help;
  EXPECT_NE(help.find("(default: " + std::to_string(engine::EngineConfig().block_size) + ")"),
            std::string::npos);
  ASSERT_TRUE(ParseArgs(flags, {"--model",
                                "m",
                                "--dtype",
                                "int8",
                                "--threads",
                                "2",
                                "--block_size",
                                "32",
                                "--max_batch_tokens",
                                "64",
                                "--wait_k",
                                "5",
                                "--split",
                                "token",
                                "--paradigm",
                                "reencode",
                                "--compat",
                                "reference",
                                "--max_new_tokens",
                                "9",
                                "--phi",
                                "0",
                                "--instruction",
                                "Do it.",
                                "--temperature",
                                "0.5",
                                "--seed",
                                "3"})
                  .ok());
  EXPECT_EQ(model.dir, "m");
  EXPECT_EQ(model.options.dtype, "int8");
  EXPECT_EQ(model.options.threads, 2);
  EXPECT_EQ(engine.block_size, 32);
  EXPECT_EQ(engine.scheduler.max_batch_tokens, 64);
  EXPECT_EQ(session.options.policy.wait_k, 5);
  EXPECT_EQ(session.options.policy.split, policy::SplitMode::kToken);
  EXPECT_EQ(session.options.paradigm, session::Paradigm::kReencode);
  EXPECT_EQ(session.options.policy.compat, policy::Compat::kReference);
  EXPECT_EQ(session.options.policy.max_new_tokens, 9);
  EXPECT_EQ(sampling.temperature, 0.5);
  EXPECT_EQ(sampling.seed, 3u);
  // No --profile: auto, the model's chat format.
  auto resolved = session.Resolve("gemma2", "");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->profile.name, "gemma2");
  for (const auto& [model_type, profile] :
       {std::pair{"qwen2", "qwen2.5"}, std::pair{"qwen3", "qwen3"}, std::pair{"llama", "llama3"},
        std::pair{"mistral", "qwen2.5"}, std::pair{"phi3", "phi3"}}) {
    auto by_type = session.Resolve(model_type, "");
    ASSERT_TRUE(by_type.ok()) << by_type.status();
    EXPECT_EQ(by_type->profile.name, profile) << model_type;
  }
  resolved = session.Resolve("qwen2", "");
  EXPECT_EQ(resolved->profile.instruction, "Do it.");
  EXPECT_EQ(resolved->profile.phi, 0);
  EXPECT_EQ(resolved->policy.wait_k, 5);
}

TEST(FlagGroupsTest, GroupChecksRefuseWhatTheEngineWould) {
  {
    FlagSet flags("prog", "prog", "");
    engine::EngineConfig engine;
    AddSchedulerFlags(flags, &engine);
    EXPECT_EQ(ParseArgs(flags, {"--long_read_slowdown", "0.5"}).message(),
              "--long_read_slowdown takes 0 (off) or a number >= 1");
  }
  {
    FlagSet flags("prog", "prog", "");
    sampler::SamplingParams sampling;
    AddSamplingFlags(flags, &sampling);
    EXPECT_EQ(ParseArgs(flags, {"--top_p", "1.5"}).message(),
              "--top_p takes a number in [0, 1] (got '1.5')");
  }
  {
    FlagSet flags("prog", "prog", "");
    SessionFlags session;
    AddSessionFlags(flags, &session);
    ASSERT_TRUE(ParseArgs(flags, {"--profile", "no-such-profile"}).ok());
    EXPECT_FALSE(session.Resolve("qwen2", "").ok());
  }
}

}  // namespace
}  // namespace gpeserve::flags
