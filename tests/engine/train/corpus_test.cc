#include "engine/train/corpus.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace gpeserve::train {
namespace {

int Noun(const std::string& en) {
  for (int i = 0; i < NounCount(); ++i) {
    if (NounEnglish(i) == en) return i;
  }
  ADD_FAILURE() << "no noun " << en;
  return 0;
}
int Verb(const std::string& en) {
  for (int i = 0; i < VerbCount(); ++i) {
    if (VerbEnglish(i) == en) return i;
  }
  ADD_FAILURE() << "no verb " << en;
  return 0;
}

NounPhrase Np(Determiner d, const std::string& noun, bool plural = false,
              std::optional<int> adjective = std::nullopt, int number = 2) {
  NounPhrase np;
  np.determiner = d;
  np.noun = Noun(noun);
  np.plural = plural;
  np.adjective = adjective;
  np.number = number;
  return np;
}

Clause C(std::optional<NounPhrase> subject, const std::string& verb,
         std::optional<NounPhrase> object = std::nullopt, bool negated = false) {
  Clause c;
  c.subject = subject;
  c.verb = Verb(verb);
  c.object = object;
  c.negated = negated;
  return c;
}

constexpr int kBig = 0, kOld = 2, kRed = 4;  // adjective indices (big, small, old, new, red)

// Hand-worked renderings: cases, genders, adjective endings, kein/nicht, questions, verb-final
// subordinate clauses, separable verbs split and joined.
TEST(CorpusTest, HandWorkedSentences) {
  struct Case {
    Sentence sentence;
    std::string en, de;
  };
  std::vector<Case> cases;
  {
    Sentence s;
    s.main = C(Np(Determiner::kThe, "dog"), "see", Np(Determiner::kThe, "cat"));
    cases.push_back({s, "The dog sees the cat.", "Der Hund sieht die Katze."});
  }
  {
    Sentence s;
    s.main = C(Np(Determiner::kThe, "dog", false, kBig), "see", Np(Determiner::kA, "cat"), true);
    cases.push_back({s, "The big dog does not see a cat.", "Der große Hund sieht keine Katze."});
  }
  {
    Sentence s;
    s.main = C(Np(Determiner::kA, "man", false, kOld), "buy", Np(Determiner::kA, "apple"));
    cases.push_back({s, "An old man buys an apple.", "Ein alter Mann kauft einen Apfel."});
  }
  {
    Sentence s;
    s.main = C(Np(Determiner::kThe, "child"), "find", Np(Determiner::kThe, "book"), true);
    cases.push_back({s, "The child does not find the book.", "Das Kind findet das Buch nicht."});
  }
  {
    Sentence s;
    s.main = C(std::nullopt, "call", Np(Determiner::kHis, "mother"));
    s.main.pronoun = Pronoun::kHe;
    cases.push_back({s, "He calls his mother.", "Er ruft seine Mutter an."});
  }
  {
    Sentence s;
    s.main = C(Np(Determiner::kThe, "man"), "laugh");
    s.connective = Connective::kBecause;
    s.subordinate = C(Np(Determiner::kThe, "dog"), "see", Np(Determiner::kThe, "cat"));
    cases.push_back({s, "The man laughs because the dog sees the cat.",
                     "Der Mann lacht, weil der Hund die Katze sieht."});
  }
  {
    Sentence s;
    s.main = C(Np(Determiner::kMy, "sister"), "say");
    s.connective = Connective::kThat;
    s.subordinate = C(std::nullopt, "invite", Np(Determiner::kNumber, "friend", true, kRed, 3));
    s.subordinate.pronoun = Pronoun::kWe;
    cases.push_back({s, "My sister says that we invite three red friends.",
                     "Meine Schwester sagt, dass wir drei rote Freunde einladen."});
  }
  {
    Sentence s;
    s.question = true;
    s.main = C(Np(Determiner::kThe, "girl", true), "pick up", Np(Determiner::kMy, "car"));
    cases.push_back({s, "Do the girls pick up my car?", "Holen die Mädchen mein Auto ab?"});
  }
  {
    Sentence s;
    s.main = C(std::nullopt, "come back");
    s.main.pronoun = Pronoun::kI;
    s.main.negated = true;
    s.main.with = Np(Determiner::kThe, "teacher", true);
    cases.push_back(
        {s, "I do not come back with the teachers.", "Ich komme nicht mit den Lehrern zurück."});
  }
  {
    Sentence s;
    s.main = C(Np(Determiner::kNone, "bird", true, kBig), "sleep");
    s.connective = Connective::kBecause;
    s.subordinate = C(std::nullopt, "call", Np(Determiner::kA, "doctor"), true);
    s.subordinate.pronoun = Pronoun::kShe;
    cases.push_back({s, "Big birds sleep because she does not call a doctor.",
                     "Große Vögel schlafen, weil sie keinen Arzt anruft."});
  }
  {
    Sentence s;
    s.main = C(Np(Determiner::kA, "woman"), "play");
    s.main.with = Np(Determiner::kA, "child", false, kBig);
    cases.push_back(
        {s, "A woman plays with a big child.", "Eine Frau spielt mit einem großen Kind."});
  }
  {
    Sentence s;
    s.main = C(Np(Determiner::kThe, "house", false, kOld), "sleep");
    s.main.with = Np(Determiner::kNumber, "tree", true, std::nullopt, 12);
    cases.push_back(
        {s, "The old house sleeps with twelve trees.", "Das alte Haus schläft mit zwölf Bäumen."});
  }
  for (const Case& c : cases) {
    const Translation t = Render(c.sentence);
    EXPECT_EQ(t.en, c.en);
    EXPECT_EQ(t.de, c.de) << c.en;
  }
}

TEST(CorpusTest, DeterministicPerSeedAndVaried) {
  const auto a = GenerateCorpus(1, 300), b = GenerateCorpus(1, 300), c = GenerateCorpus(2, 300);
  ASSERT_EQ(a.size(), 300u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].en, b[i].en);
    EXPECT_EQ(a[i].de, b[i].de);
  }
  int same = 0;
  std::set<std::string> distinct;
  bool weil = false, dass = false, question = false, kein = false, nicht = false;
  for (size_t i = 0; i < a.size(); ++i) {
    same += a[i].en == c[i].en;
    distinct.insert(a[i].en);
    weil |= absl::StrContains(a[i].de, ", weil ");
    dass |= absl::StrContains(a[i].de, ", dass ");
    question |= absl::EndsWith(a[i].de, "?");
    kein |= absl::StrContains(a[i].de, " kein");
    nicht |= absl::StrContains(a[i].de, " nicht");
  }
  EXPECT_LT(same, 10);
  EXPECT_GT(distinct.size(), 280u);
  EXPECT_TRUE(weil && dass && question && kein && nicht);
}

// Properties over a generated corpus: one sentence-final mark, the same in both languages;
// the verb of a subordinate clause is its last word (before the mark), English and German.
TEST(CorpusTest, GeneratedSentencesAreWellFormed) {
  for (const Translation& t : GenerateCorpus(7, 2000)) {
    const char en_end = t.en.back(), de_end = t.de.back();
    EXPECT_EQ(en_end, de_end) << t.en;
    EXPECT_TRUE(en_end == '.' || en_end == '?');
    EXPECT_TRUE((t.de[0] >= 'A' && t.de[0] <= 'Z') || absl::StartsWith(t.de, "Ä") ||
                absl::StartsWith(t.de, "Ö") || absl::StartsWith(t.de, "Ü"))
        << t.de;
    EXPECT_FALSE(absl::StrContains(t.en, "  ") || absl::StrContains(t.de, "  "));
    EXPECT_FALSE(absl::StrContains(t.en, " a a") || absl::StrContains(t.en, " a o"));
    const size_t comma = t.de.find(", ");
    if (comma != std::string::npos) {
      // Verb-final: the clause's last word is a finite verb, which in this lexicon ends in
      // -e, -t or -en (sieht, anruft, einladen, ...), never an article or a noun of the
      // object position followed by nothing.
      std::vector<std::string> words =
          absl::StrSplit(t.de.substr(comma + 2, t.de.size() - comma - 3), ' ');
      const std::string& last = words.back();
      EXPECT_TRUE(absl::EndsWith(last, "t") || absl::EndsWith(last, "en") ||
                  absl::EndsWith(last, "e"))
          << t.de;
      EXPECT_NE(last, "nicht") << t.de;
    }
  }
}

}  // namespace
}  // namespace gpeserve::train
