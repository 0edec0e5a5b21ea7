// Structured fuzzing of the proto-to-session path: arbitrary StreamRequest sequences against the
// service and engine on a tiny model. (Not a libFuzzer target: the engine includes libtorch,
// whose headers clang 14 cannot parse in C++20, so this runs seeded random sequences, in the
// normal build and under ASan + UBSan.)
//
// Sequences: half of them a plausible session (a config, words, the end, perhaps one odd
// request), half 0-7 requests, each a config with random fields (valid values, boundary values and
// garbage mixed), a chunk (vocabulary words, random bytes, empty, whitespace, invalid UTF-8, text,
// boundaries), an end or an empty request; a third of the requests then have random bytes of their
// wire form flipped, inserted or removed (kept when they still parse: arbitrary field values). Each
// call must end with OK and exactly one SessionDone as its last response, or with one of the
// statuses the API documents for a client's mistake and a message; never INTERNAL, UNKNOWN, a
// hang, or OK for a session that was cancelled. Meanwhile good sessions run and must equal their
// offline runs, and afterwards every KV block is free. GPESERVE_FUZZ_SEQUENCES sets the count
// (default 400; scripts/sanitize runs the default).
#include <cstdlib>
#include <map>
#include <mutex>

#include "tests/server/server_fixture.h"

namespace gpeserve::server {
namespace {

std::string RandomBytes(std::mt19937& rng, int max_length) {
  std::string s(rng() % (max_length + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng() % 256);
  return s;
}

// Valid UTF-8 (proto3 `string` fields must be): ASCII, controls and a few multi-byte letters.
std::string RandomText(std::mt19937& rng, int max_length) {
  static const std::vector<std::string> pieces = {
      "a", " ", "\n", "\t", "{", "}", "%s", "\\", "\"", "<|im_end|>", "ü", "東", "\x01", "🙂"};
  std::string s;
  const int n = static_cast<int>(rng() % (max_length + 1));
  for (int i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
  return s;
}

std::string RandomWord(std::mt19937& rng) {
  switch (rng() % 8) {
    case 0:
      return RandomBytes(rng, 12);
    case 1:
      return "";
    case 2:
      return "a b";
    case 3:
      return "\xc3\x28";  // invalid UTF-8
    case 4:
      return std::string(rng() % 3000, 'x');
    default:
      return RandomWords(rng, 1)[0];
  }
}

template <typename T>
T Pick(std::mt19937& rng, std::initializer_list<T> values) {
  return *(values.begin() + rng() % values.size());
}

v1::SessionConfig RandomConfig(std::mt19937& rng) {
  v1::SessionConfig c;
  auto maybe = [&] { return rng() % 3 == 0; };
  if (maybe()) c.set_profile(Pick<std::string>(rng, {"qwen2.5", "auto", "klingon", "", "/etc"}));
  if (maybe()) c.set_wait_k(Pick<uint32_t>(rng, {0, 1, 2, 3, 7, 5000, 0xffffffffu}));
  if (maybe()) c.set_split(static_cast<v1::SessionConfig::Split>(rng() % 4));
  if (maybe()) c.set_paradigm(static_cast<v1::SessionConfig::Paradigm>(rng() % 6));
  if (maybe()) c.set_phi(Pick<uint32_t>(rng, {0, 1, 2, 100000}));
  if (maybe()) c.set_max_new_tokens(Pick<uint32_t>(rng, {0, 1, 5, 12, 1u << 30}));
  if (maybe()) c.set_max_write_tokens(Pick<uint32_t>(rng, {0, 1, 3, 1u << 30}));
  if (maybe()) c.set_compat(static_cast<v1::SessionConfig::Compat>(rng() % 4));
  if (maybe()) c.set_adapter(Pick<std::string>(rng, {"", "none", "de-en"}));
  if (maybe()) c.set_report_waiting(true);
  if (maybe()) c.set_instruction(rng() % 2 ? "Translate." : RandomText(rng, 40));
  if (maybe()) {
    v1::Sampling* s = c.mutable_sampling();
    s->set_temperature(Pick<double>(rng, {-1.0, 0.0, 0.7, 1e300}));
    s->set_top_k(Pick<int32_t>(rng, {-3, 0, 1, 50}));
    s->set_top_p(Pick<double>(rng, {-0.5, 0.0, 0.9, 1.0, 2.0}));
    s->set_seed(rng());
  }
  if (maybe()) {
    v1::Prompt* p = c.mutable_prompt();
    if (rng() % 2) p->set_instruct(RandomText(rng, 8));
    if (rng() % 2) p->set_user("User: ");
    if (rng() % 2) p->set_assistant("Assistant: ");
    if (rng() % 2) p->set_end(RandomText(rng, 3));
    p->set_add_space(rng() % 2);
  }
  if (maybe()) {
    v1::LongForm* l = c.mutable_long_form();
    l->set_enabled(rng() % 4 != 0);
    if (rng() % 2) l->add_sentence_marks(Pick<std::string>(rng, {".", "?", "", "\xff"}));
    l->set_max_segment_words(Pick<uint32_t>(rng, {0, 1, 3, 100000}));
    l->set_context_segments(Pick<uint32_t>(rng, {0, 1, 2, 1000}));
  }
  return c;
}

v1::StreamRequest RandomRequest(std::mt19937& rng, bool first) {
  v1::StreamRequest r;
  const int kind = first && rng() % 4 != 0 ? 0 : static_cast<int>(rng() % 10);
  if (kind == 0 || kind == 1) {
    *r.mutable_config() = RandomConfig(rng);
  } else if (kind <= 6) {
    v1::SourceChunk* chunk = r.mutable_chunk();
    if (rng() % 4 == 0) {
      chunk->set_text(rng() % 2 ? "the dog sees a cat " : RandomBytes(rng, 30));  // bytes
    } else {
      const int n = static_cast<int>(rng() % 6);
      for (int i = 0; i < n; ++i) chunk->add_words(RandomWord(rng));
    }
    if (rng() % 5 == 0) chunk->set_boundary(true);
  } else if (kind <= 8) {
    r.mutable_end();
  }  // else: an empty request
  return r;
}

// Flips, inserts or removes a few bytes of the wire form; the mutant when it still parses.
v1::StreamRequest Mutate(std::mt19937& rng, const v1::StreamRequest& request) {
  std::string wire = request.SerializeAsString();
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < edits; ++i) {
    const size_t at = wire.empty() ? 0 : rng() % wire.size();
    switch (rng() % 3) {
      case 0:
        if (!wire.empty()) wire[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
        wire.insert(wire.begin() + at, static_cast<char>(rng() % 256));
        break;
      default:
        if (!wire.empty()) wire.erase(at, 1);
    }
  }
  v1::StreamRequest mutant;
  return mutant.ParseFromString(wire) ? mutant : request;
}

// A session a client would send: a plausible config, chunks of words, the end.
std::vector<v1::StreamRequest> PlausibleSequence(std::mt19937& rng) {
  std::vector<v1::StreamRequest> requests;
  v1::StreamRequest config;
  config.mutable_config()->set_wait_k(1 + rng() % 3);
  if (rng() % 2) config.mutable_config()->set_max_new_tokens(1 + rng() % 12);
  if (rng() % 4 == 0) config.mutable_config()->set_report_waiting(true);
  if (rng() % 4 == 0) config.mutable_config()->mutable_long_form()->set_enabled(true);
  requests.push_back(config);
  const int chunks = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < chunks; ++i) {
    v1::StreamRequest chunk;
    for (const std::string& w : RandomWords(rng, 1 + rng() % 4))
      chunk.mutable_chunk()->add_words(w);
    if (rng() % 6 == 0) chunk.mutable_chunk()->set_boundary(true);
    requests.push_back(chunk);
  }
  if (rng() % 4 != 0) requests.push_back(RandomRequest(rng, false));  // anything
  v1::StreamRequest end;
  end.mutable_end();
  requests.push_back(end);
  return requests;
}

// Half plausible sessions, half anything; a third of the requests of either mutated.
std::vector<v1::StreamRequest> RandomSequence(std::mt19937& rng) {
  std::vector<v1::StreamRequest> requests;
  if (rng() % 2 == 0) {
    requests = PlausibleSequence(rng);
  } else {
    const int n = static_cast<int>(rng() % 8);
    for (int i = 0; i < n; ++i) requests.push_back(RandomRequest(rng, i == 0));
  }
  for (v1::StreamRequest& r : requests) {
    if (rng() % 3 == 0) r = Mutate(rng, r);
  }
  return requests;
}

// Sends a sequence with a deadline; the final status and the responses.
grpc::Status Send(v1::Gpeserve::Stub& stub, const std::vector<v1::StreamRequest>& requests,
                  std::vector<v1::StreamResponse>* responses) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub.Stream(&context);
  for (const v1::StreamRequest& r : requests) {
    if (!stream->Write(r)) break;
  }
  stream->WritesDone();
  v1::StreamResponse response;
  while (stream->Read(&response)) responses->push_back(response);
  return stream->Finish();
}

TEST_F(ServerTest, ArbitraryRequestSequences) {
  ServiceConfig config;
  config.max_chunk_words = 4;
  config.max_new_tokens_limit = 40;
  config.max_word_bytes = 256;
  Start(config, /*max_sessions=*/16, /*kv_blocks=*/512);
  const char* env = std::getenv("GPESERVE_FUZZ_SEQUENCES");
  const int sequences = env != nullptr ? std::atoi(env) : 400;
  constexpr int kThreads = 4;

  // Good sessions alongside, each against its offline run.
  std::mt19937 good_rng(11);
  std::vector<std::vector<std::string>> good_words;
  for (int i = 0; i < 3; ++i) good_words.push_back(RandomWords(good_rng, 6 + i));
  std::vector<absl::StatusOr<client::SessionTrace>> good(good_words.size(), absl::UnknownError(""));
  std::vector<std::thread> good_threads;
  v1::SessionConfig good_config;
  good_config.set_wait_k(2);
  for (size_t i = 0; i < good_words.size(); ++i) {
    good_threads.emplace_back(
        [&, i] { good[i] = client::RunSession(*stub_, connect_, good_config, good_words[i], 30); });
  }

  std::mutex mu;
  std::map<std::string, int> codes;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < sequences; i += kThreads) {
        std::mt19937 rng(1000 + i);
        const std::vector<v1::StreamRequest> requests = RandomSequence(rng);
        std::vector<v1::StreamResponse> responses;
        const grpc::Status status = Send(*stub_, requests, &responses);
        std::string failure;
        const grpc::StatusCode code = status.error_code();
        if (status.ok()) {
          int done = 0;
          for (const auto& r : responses) done += r.has_done();
          if (done != 1 || !responses.back().has_done()) {
            failure = absl::StrCat("OK with ", done, " SessionDone (not last, or not one)");
          } else if (responses.back().done().finish_reason() == "cancelled") {
            // Nobody cancels here: a refused request whose session's cancellation raced the
            // refusal once ended OK like this.
            failure = "OK with a cancelled SessionDone";
          }
        } else if (code != grpc::StatusCode::INVALID_ARGUMENT &&
                   code != grpc::StatusCode::FAILED_PRECONDITION &&
                   code != grpc::StatusCode::RESOURCE_EXHAUSTED &&
                   code != grpc::StatusCode::NOT_FOUND) {
          failure = absl::StrCat("status ", code, ": ", status.error_message());
        } else if (status.error_message().empty()) {
          failure = absl::StrCat("status ", code, " without a message");
        }
        std::lock_guard<std::mutex> lock(mu);
        ++codes[status.ok() ? "OK" : absl::StrCat(code)];
        if (!failure.empty()) {
          std::string shown;
          for (const auto& r : requests) shown += r.ShortDebugString() + " | ";
          failures.push_back(absl::StrCat("sequence ", i, ": ", failure, "\n  ", shown));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (std::thread& t : good_threads) t.join();

  std::string histogram;
  for (const auto& [code, n] : codes) absl::StrAppend(&histogram, code, ": ", n, "  ");
  std::cout << sequences << " sequences, by status code: " << histogram << std::endl;
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures; first:\n" << failures[0];
  EXPECT_GE(codes["OK"], sequences / 20) << "too few sequences ran to the end: " << histogram;
  for (size_t i = 0; i < good.size(); ++i) {
    ASSERT_TRUE(good[i].ok()) << good[i].status();
    const auto ids = good[i]->done.ids();
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end()),
              Alone(good_config, good_words[i]).output)
        << "good session " << i;
  }
  EXPECT_TRUE(AllBlocksFree());
}

}  // namespace
}  // namespace gpeserve::server
