// A deterministic English-to-German parallel corpus from a small grammar, for training and
// evaluating streaming translators: articles with case and gender, adjective endings, numbers
// and plurals, possessives, negation (nicht / kein), yes/no questions, dative prepositions,
// subordinate clauses with the verb at the end ("..., weil der Hund die Katze sieht") and
// separable verbs ("er ruft seine Mutter an"), so that a simultaneous translator must
// sometimes wait for a verb.
//
// A sentence is built as a structure (Clause) and rendered into both languages; tests check
// renderings of hand-built clauses, and the generator draws clauses at random from a seed.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpeserve::train {

enum class Determiner { kThe, kA, kMy, kHis, kNumber, kNone };

// A noun phrase: determiner, optional adjective, noun (indices into the lexicon, see
// NounCount() and AdjectiveCount()), number.
struct NounPhrase {
  Determiner determiner = Determiner::kThe;
  int noun = 0;
  std::optional<int> adjective;
  bool plural = false;
  int number = 2;  // with Determiner::kNumber: 2..12 (plural)
};

enum class Pronoun { kI, kHe, kShe, kWe, kThey };

// A clause: subject (noun phrase or pronoun), verb (index into the lexicon, VerbCount()),
// object (for transitive verbs), an optional "with" phrase, negation.
struct Clause {
  std::optional<NounPhrase> subject;  // unset: `pronoun`
  Pronoun pronoun = Pronoun::kHe;
  int verb = 0;
  std::optional<NounPhrase> object;  // required for transitive verbs, absent otherwise
  std::optional<NounPhrase> with;    // "with the friend" / "mit dem Freund"
  bool negated = false;
};

enum class Connective { kBecause, kThat };  // ", weil" / ", dass" (that: after "says")

// A sentence: a main clause (a statement or a yes/no question) and an optional subordinate
// clause after a connective.
struct Sentence {
  Clause main;
  bool question = false;
  std::optional<Connective> connective;
  Clause subordinate;
};

struct Translation {
  std::string en;
  std::string de;
};

int NounCount();
int AdjectiveCount();
int VerbCount();
bool IsTransitive(int verb);
// For tests and docs: the lexicon entries.
std::string NounEnglish(int noun);
std::string VerbEnglish(int verb);

// Renders a sentence in English and German. REQUIRES: a valid structure (objects exactly on
// transitive verbs, indices in range, numbers 2..12 only with kNumber).
Translation Render(const Sentence& sentence);

// `count` random sentences drawn from `seed` (the same seed gives the same corpus).
std::vector<Translation> GenerateCorpus(uint64_t seed, int count);

}  // namespace gpeserve::train
